/*
 * writer.c - streaming writers (mc_writer_t): a pending version the master
 * reserves space for as it grows (PUT_START, PUT_GROW, with a write lease
 * renewed when half of it is gone), written through xfer.c to every
 * replica, published with PUT_COMMIT or dropped with PUT_REVOKE; one opened
 * on an existing version first copies it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/remote_i.h"
#include "runtime/loop_i.h"

static void w_free(mc_writer_t *w)
{
    UNLINK(&w->s->writers, w);
    mc__rset_free(w->rs);
    free(w->key);
    free(w);
}

/* Replaces w's replica set with the one in a PUT_START/PUT_GROW reply. */
static int w_take_rset(mc_writer_t *w, const char *p, size_t n)
{
    mc__rset_t *rs;
    int rc = mc__rset_take(&p, &n, &rs);
    if (rc < 0)
        return rc;
    mc__rset_free(w->rs);
    w->rs = rs;
    rs->put_id = w->put_id;
    return 0;
}

static void w_copy_step(op_t *o);
static void w_copied(void *arg, int rc);
static void w_op_done(void *arg, int rc);

/* Why a PUT_GROW failed, as the writer's error: a connection to the master
 * lost with it lost the put too (a master lets go of what a connection
 * held when it closes, and one that restarted never knew it), as when the
 * master says the put is gone (-ESTALE). */
static int grow_error(int status)
{
    switch (-status) {
    case ECONNRESET:
    case ECONNABORTED:
    case ENOTCONN:
    case EPIPE:
        return -ESTALE;
    default:
        return revoked(status);
    }
}

static void w_renewed(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    mc_writer_t *w = o->w;
    if (status >= 0)
        status = w_take_rset(w, body, len);
    if (status < 0 && o->kind == OP_W_OPEN)
        return w_copied(o, revoked(status)); /* revokes and frees the writer */
    if (status < 0)
        return w_op_done(o, grow_error(status));
    w->renew_at = o->sent_ms + w->lease_ms / 2;
    if (o->u64 > w->capacity)
        w->capacity = o->u64;
    o->cont(o);
}

/*
 * Asks the master to reserve capacity bytes for w (capacity <= what it has:
 * only to renew the write lease), takes the replica set it answers (replicas
 * dropped meanwhile are gone from it), then goes on with cont(o).
 */
static void w_grow(op_t *o, uint64_t capacity, void (*cont)(op_t *))
{
    o->u64 = capacity;
    o->cont = cont;
    o->sent_ms = mc__loop_time(o->s->loop);
    int rc = mc__mcall(o->s, MC__OP_PUT_GROW, w_renewed, o, "qq", o->w->put_id, capacity);
    if (rc < 0 && o->kind == OP_W_OPEN)
        w_copied(o, rc);
    else if (rc < 0)
        w_op_done(o, grow_error(rc));
}

/* Whether w's lease must be renewed before it moves another byte: half of
 * it is gone, so that what it sends now lands well before the master could
 * hand the space to anyone else. */
static int w_stale(const mc_writer_t *w)
{
    return mc__loop_time(w->s->loop) >= w->renew_at;
}

static void w_copied(void *arg, int rc)
{
    op_t *o = arg;
    if (rc < 0) {
        free(o->tmp);
        o->tmp = NULL;
        mc__mcall(o->s, MC__OP_PUT_REVOKE, mc__ignore_reply, NULL, "q", o->w->put_id);
        w_free(o->w);
        return mc__op_finish(o, rc);
    }
    if (o->stage == 1) { /* the chunk was read: write it */
        o->stage = 2;
        uint64_t n = o->obj->st.size - o->w->size;
        if (n > MC__PROTO_CHUNK)
            n = MC__PROTO_CHUNK;
        mc__xfer(o->s, o->w->rs, 1, o->w->size, o->tmp, n, w_copied, o);
        return;
    }
    uint64_t n = o->obj->st.size - o->w->size;
    o->w->size += n > MC__PROTO_CHUNK ? MC__PROTO_CHUNK : n;
    w_copy_step(o);
}

/* Copies the base version into the new one, one chunk at a time. */
static void w_copy_step(op_t *o)
{
    mc_writer_t *w = o->w;
    if (w->size >= o->obj->st.size) {
        free(o->tmp);
        o->tmp = NULL;
        *o->w_out = w;
        return mc__op_finish(o, 0);
    }
    if (w_stale(w))
        return w_grow(o, w->capacity, w_copy_step);
    uint64_t n = o->obj->st.size - w->size;
    if (n > MC__PROTO_CHUNK)
        n = MC__PROTO_CHUNK;
    o->stage = 1;
    mc__xfer(o->s, o->obj->rs, 0, w->size, o->tmp, n, w_copied, o);
}

static void w_started(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    if (status < 0)
        return mc__op_finish(o, status);
    mc_writer_t *w = calloc(1, sizeof(*w));
    const char *rest;
    uint32_t rl;
    if (!w)
        return mc__op_finish(o, -ENOMEM);
    w->s = o->s;
    w->put_flags = o->po.flags;
    w->key = malloc(o->klen + 1);
    if (!w->key || mc__unpack(body, len, "qq*", &w->put_id, &w->lease_ms, &rest, &rl) < 0 ||
        w_take_rset(w, rest, rl) < 0) {
        free(w->key);
        free(w);
        return mc__op_finish(o, -EIO);
    }
    memcpy(w->key, o->key, o->klen);
    w->key[o->klen] = '\0';
    w->klen = o->klen;
    w->renew_at = o->sent_ms + w->lease_ms / 2;
    LINK(&o->s->writers, w);
    o->w = w;
    if (!o->obj) {
        *o->w_out = w;
        return mc__op_finish(o, 0);
    }
    w->capacity = o->obj->st.size;
    o->tmp = malloc(MC__PROTO_CHUNK);
    if (!o->tmp) {
        w_copied(o, -ENOMEM);
        return;
    }
    w_copy_step(o);
}

static void w_op_done(void *arg, int rc)
{
    op_t *o = arg;
    mc_writer_t *w = o->w;
    if (rc < 0 && o->kind == OP_W_WRITE && w->size == o->off + o->len)
        w->size = o->base; /* no later write grew it: as before this one */
    if (rc >= 0 && o->kind == OP_W_WRITE)
        rc = (int)o->len; /* the size counted it when it started */
    if (rc >= 0 && o->kind == OP_W_TRUNC) {
        w->size = o->off;
        rc = 0;
    }
    mc__op_finish(o, rc);
}

static void w_have_space(op_t *o);

static void w_gap_filled(void *arg, int rc)
{
    op_t *o = arg;
    if (rc < 0)
        return w_op_done(o, rc);
    if (o->off > o->w->size)
        o->w->size = o->off; /* the hole is zeros now */
    w_have_space(o);
}

/* Space is reserved up to at least the end: fill any gap, then do the op. */
static void w_have_space(op_t *o)
{
    mc_writer_t *w = o->w;
    if (o->stage == 0 && o->off > o->base) {
        /* A hole reads as zeros: write them first (past every write
         * started before this one, which may still be in flight). */
        o->stage = 1;
        mc__xfer(o->s, w->rs, 1, o->base, NULL, o->off - o->base, w_gap_filled, o);
        return;
    }
    if (o->kind == OP_W_TRUNC)
        return w_op_done(o, 0);
    mc__xfer(o->s, w->rs, 1, o->off, o->buf, o->len, w_op_done, o);
}

/* Makes room for [.., end) in w (asking the master for more space, with
 * headroom so that streaming writes ask rarely; renewing the lease when it
 * is half gone), then continues the op. */
static void w_reserve(op_t *o, uint64_t end)
{
    mc_writer_t *w = o->w;
    if (end <= w->capacity)
        return w_stale(w) ? w_grow(o, w->capacity, w_have_space) : w_have_space(o);
    uint64_t step = w->capacity < WRITER_MAX_STEP ? w->capacity : WRITER_MAX_STEP;
    if (step < (1 << 20))
        step = 1 << 20;
    w_grow(o, end > w->capacity + step ? end : w->capacity + step, w_have_space);
}

static void w_read(op_t *o)
{
    mc_writer_t *w = o->w;
    uint64_t n = o->off < w->size ? w->size - o->off : 0;
    o->u64 = n < o->len ? n : o->len;
    mc__xfer(o->s, w->rs, 0, o->off, o->buf, o->u64, mc__read_done, o);
}

static void w_committed(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    const char *p = body;
    size_t n = len;
    mc_stat_t st;
    if (status >= 0 && mc__take_stat(&p, &n, &st) < 0)
        status = -EIO;
    if (status >= 0 && o->st)
        *o->st = st;
    mc__rc_drop(o->s->rm, o->w->key, o->w->klen, NULL);
    w_free(o->w);
    mc__op_finish(o, status < 0 ? revoked(status) : 0);
}

/* ---- dispatch ---- */

void mc__writer_exec(op_t *o)
{
    mc_store_t *s = o->s;
    int rc = 0;
    switch (o->kind) {
    case OP_W_OPEN:
        o->sent_ms = mc__loop_time(s->loop);
        rc = mc__mcall_put_start(o, o->obj ? o->obj->st.size : 0, w_started);
        break;
    case OP_W_WRITE:
        if (o->off > (uint64_t)INT64_MAX || o->len > (uint64_t)INT64_MAX - o->off)
            return mc__op_finish(o, -EFBIG); /* past the largest file, as Linux's */
        /* Writes may be in flight together (write-behind): the size covers
         * each from its start, so that a later one fills no gap that an
         * earlier one is writing, and an append lands after both. */
        o->base = o->w->size;
        if (o->off + o->len > o->w->size)
            o->w->size = o->off + o->len;
        return w_reserve(o, o->off + o->len);
    case OP_W_READ:
        /* Its own bytes, as long as the space is still its own. */
        return w_stale(o->w) ? w_grow(o, o->w->capacity, w_read) : w_read(o);
    case OP_W_TRUNC:
        if (o->off > (uint64_t)INT64_MAX)
            return mc__op_finish(o, -EFBIG);
        if (o->off <= o->w->size) {
            o->w->size = o->off;
            return mc__op_finish(o, 0);
        }
        o->base = o->w->size;
        return w_reserve(o, o->off);
    case OP_W_COMMIT: {
        mc_writer_t *w = o->w;
        mc__put_commit_rq_t rq = {.id = w->put_id,
                                  .key = w->key,
                                  .klen = (uint32_t)w->klen,
                                  .size = w->size,
                                  .what = w->meta_what,
                                  .mode = w->mode,
                                  .mtime_ns = w->mtime_ns};
        rc = mc__mcall_put_commit(s, &rq, w_committed, o);
        if (rc < 0) {
            mc__mcall(s, MC__OP_PUT_REVOKE, mc__ignore_reply, NULL, "q", w->put_id);
            w_free(w);
        }
        break;
    }
    case OP_W_ABORT:
        mc__mcall(s, MC__OP_PUT_REVOKE, mc__ignore_reply, NULL, "q", o->w->put_id);
        w_free(o->w);
        return mc__op_finish(o, 0);
    default:
        break;
    }
    if (rc < 0)
        mc__op_finish(o, rc);
}

/* Sets the key a remote writer publishes under (loop thread). */
int mc__remote_writer_set_key(mc_writer_t *w, const char *key, size_t klen)
{
    char *k = malloc(klen + 1);
    if (!k)
        return -ENOMEM;
    memcpy(k, key, klen);
    k[klen] = '\0';
    free(w->key);
    w->key = k;
    w->klen = klen;
    return 0;
}
