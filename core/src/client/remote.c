/*
 * remote.c - the client: every operation of the store, once (remote_i.h
 * names the files that help). Metadata comes from the master through a link
 * (link.h: an RPC to a master elsewhere, or a direct call into the one of an
 * embedded store); bytes move straight to and from the segments (xfer.c).
 *
 * Every operation is a small chain of calls that ends in mc__op_finish().
 * Every call is bounded by the store's timeout. This file holds the master
 * calls, the simple operations, whole-object puts, gets and opens, and the
 * dispatch; streaming writers are in writer.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "client/prefetch.h"
#include "client/remote_i.h"
#include "runtime/loop_i.h"

/* ---- master calls ---- */

/* Calls the master with a body packed per fmt; cb gets the response. */
int mc__mcall(mc_store_t *s, uint16_t op, mc__rpc_cb cb, void *arg, const char *fmt, ...)
{
    if (!s->rm)
        return -ECANCELED; /* the store is closing */
    va_list ap;
    va_start(ap, fmt);
    int rc = mc__link_vcall(s->rm->master, op, s->timeout_ms, cb, arg, fmt, ap);
    va_end(ap);
    return rc;
}

void mc__ignore_reply(void *arg, int status, const char *body, size_t len) {}

/* The PUT_START of o (its key and options) with capacity bytes. */
static void put_start_rq(const op_t *o, uint64_t capacity, mc__put_start_rq_t *rq)
{
    const char *pref = o->po.preferred_segment ? o->po.preferred_segment : "";
    *rq = (mc__put_start_rq_t){.key = o->key,
                               .klen = (uint32_t)o->klen,
                               .capacity = capacity,
                               .flags = o->po.flags,
                               .mode = o->po.mode,
                               .replicas = o->po.replica_num,
                               .pin = o->po.pin,
                               .pin_ttl_ms = o->po.soft_pin_ttl_ms,
                               .mtime_ns = o->po.mtime_ns,
                               .pref = pref,
                               .plen = (uint32_t)strlen(pref),
                               .uid = o->po.uid,
                               .gid = o->po.gid,
                               .type = o->po.type,
                               .rdev = o->po.rdev};
}

/* The two requests of every put go through their own encoders (proto.h). */
/* Sends request op (PUT_START or CREATE) with o's PUT_START body. */
static int put_start_call(op_t *o, uint16_t op, uint64_t capacity, mc__rpc_cb cb)
{
    mc_store_t *s = o->s;
    mc__put_start_rq_t rq;
    if (!s->rm)
        return -ECANCELED; /* the store is closing */
    put_start_rq(o, capacity, &rq);
    mc__pack_put_start(mc__link_body(s->rm->master), &rq);
    return mc__link_send(s->rm->master, op, s->timeout_ms, cb, o);
}

int mc__mcall_put_start(op_t *o, uint64_t capacity, mc__rpc_cb cb)
{
    return put_start_call(o, MC__OP_PUT_START, capacity, cb);
}

int mc__mcall_create(op_t *o, uint64_t capacity, mc__rpc_cb cb)
{
    return put_start_call(o, MC__OP_CREATE, capacity, cb);
}

int mc__mcall_put_commit(mc_store_t *s, const mc__put_commit_rq_t *rq, mc__rpc_cb cb, void *arg)
{
    if (!s->rm)
        return -ECANCELED;
    mc__pack_put_commit(mc__link_body(s->rm->master), rq);
    return mc__link_send(s->rm->master, MC__OP_PUT_COMMIT, s->timeout_ms, cb, arg);
}

/* ---- simple operations ---- */

/* Decodes a STATS answer (s name, q value, ...) into out[0..max). Returns
 * the count, or -EIO. */
static int take_counters(const char *p, size_t n, mc_counter_t *out, size_t max)
{
    int cnt = 0;
    while (n) {
        const char *name, *rest;
        uint32_t nl, rl;
        uint64_t val;
        if (mc__unpack(p, n, "sq*", &name, &nl, &val, &rest, &rl) < 0)
            return -EIO;
        if ((size_t)cnt < max) {
            size_t l = nl < sizeof(out->name) - 1 ? nl : sizeof(out->name) - 1;
            memcpy(out[cnt].name, name, l);
            out[cnt].name[l] = '\0';
            out[cnt].value = val;
            cnt++;
        }
        p = rest;
        n = rl;
    }
    return cnt;
}

static void simple_done(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    int rc = status;
    const char *p = body;
    size_t n = len;
    if (o->kind == OP_RENAME || o->kind == OP_LINK ||
        (o->kind == OP_REMOVE && (o->flags & ~MC_REMOVE_FORCE)))
        mc__rc_clear(o->s->rm);
    else if (o->kind == OP_REMOVE || (o->kind == OP_STAT && status == -ENOENT))
        mc__rc_drop(o->s->rm, o->key, o->klen, NULL);
    if (status >= 0) {
        switch (o->kind) {
        case OP_SET_META:
            if (!o->st)
                break;
            /* fall through */
        case OP_STAT:
        case OP_LOOKUP:
        case OP_LINK:
            if (!o->st)
                break;
            if (mc__take_stat(&p, &n, o->st) < 0)
                rc = -EIO;
            else if (o->kind == OP_STAT)
                mc__rc_check(o->s->rm, o->key, o->klen, o->st);
            break;
        case OP_LIST: {
            int cnt = mc__take_list(body, len, o->list);
            rc = cnt < 0 ? -EIO : cnt;
            break;
        }
        case OP_STATFS:
            if (mc__unpack(body, len, "qqqq", &o->sp->total, &o->sp->used, &o->sp->objects,
                           &o->sp->evicted) < 0)
                rc = -EIO;
            break;
        case OP_MASTER_STATS:
            rc = take_counters(p, n, o->counters, o->max);
            break;
        default:
            break;
        }
    }
    mc__op_finish(o, rc);
}

/* ---- put (whole object) ---- */

/* A whole-object put sends this much at a time, checking its write lease in
 * between (a put larger than what one lease covers renews it). */
#define PUT_STEP (64ULL << 20)

static void put_end(op_t *o, int rc)
{
    mc__rset_free(o->buf);
    o->buf = NULL;
    free(o->tmp);
    o->tmp = NULL;
    mc__op_finish(o, rc);
}

void mc__put_revoke(mc_store_t *s, uint64_t put_id, int fenced)
{
    if (fenced)
        mc__mcall(s, MC__OP_PUT_REVOKE, mc__ignore_reply, NULL, "qu", put_id,
                  (uint32_t)MC__REVOKE_FENCED);
    else
        mc__mcall(s, MC__OP_PUT_REVOKE, mc__ignore_reply, NULL, "q", put_id);
}

/* Ends o's put with rc: fenced when its transfer failed (xfer 1). */
static void put_fail(op_t *o, int rc, int xfer)
{
    mc__put_revoke(o->s, o->u64, xfer);
    put_end(o, rc);
}

static void put_committed(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    mc__rc_drop(o->s->rm, o->key, o->klen, NULL);
    put_end(o, status < 0 ? revoked(status) : 0);
}

static void put_step(op_t *o);

/* The PUT_COMMIT of o's o->len bytes (the mode went with PUT_START). */
static void put_commit_rq(const op_t *o, mc__put_commit_rq_t *rq)
{
    *rq = (mc__put_commit_rq_t){.id = o->u64,
                                .key = o->key,
                                .klen = (uint32_t)o->klen,
                                .size = o->len,
                                .what = o->po.mtime_ns ? MC_META_MTIME : 0,
                                .mtime_ns = o->po.mtime_ns};
}

static void put_renewed(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    mc__rset_t *rs = NULL;
    size_t n = len;
    if (status >= 0 && mc__rset_take(&body, &n, &rs) < 0)
        status = -EIO;
    if (status < 0)
        return put_fail(o, revoked(status), 0);
    mc__rset_free(o->buf); /* replicas dropped meanwhile are gone from it */
    o->buf = rs;
    rs->put_id = o->u64;
    o->renew_at = o->sent_ms + o->lease_ms / 2;
    put_step(o);
}

static void put_sent(void *arg, int rc)
{
    op_t *o = arg;
    if (rc < 0)
        return put_fail(o, rc, 1);
    o->done += o->off;
    put_step(o);
}

/* Sends the next step of the object (renewing the lease first when half of
 * it is gone), then commits. */
static void put_step(op_t *o)
{
    int rc;
    uint64_t now = mc__loop_time(o->s->loop);
    if (o->done == o->len) {
        mc__rset_free(o->buf);
        o->buf = NULL;
        mc__put_commit_rq_t rq;
        put_commit_rq(o, &rq);
        rc = mc__mcall_put_commit(o->s, &rq, put_committed, o);
        if (rc < 0)
            put_end(o, rc);
        return;
    }
    if (now >= o->renew_at) {
        o->sent_ms = now;
        rc = mc__mcall(o->s, MC__OP_PUT_GROW, put_renewed, o, "qqqu", o->u64, (uint64_t)0,
                       (uint64_t)0, 0u); /* nothing new: the lease renewed */
        if (rc < 0)
            put_fail(o, rc, 0);
        return;
    }
    const char *src = o->tmp ? o->tmp : (o->iovcnt ? o->iov[0].iov_base : "");
    o->off = o->len - o->done < PUT_STEP ? o->len - o->done : PUT_STEP;
    mc__xfer(o->s, o->buf, 1, o->done, (char *)src + o->done, o->off, put_sent, o);
}

static void put_started(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    if (status < 0)
        return put_end(o, status);
    const char *rest;
    uint32_t rl;
    mc__rset_t *rs = NULL;
    size_t n;
    if (mc__unpack(body, len, "qq*", &o->u64, &o->lease_ms, &rest, &rl) < 0 ||
        (n = rl, mc__rset_take(&rest, &n, &rs)) < 0)
        return put_end(o, -EIO);
    o->buf = rs;
    rs->put_id = o->u64;
    o->renew_at = o->sent_ms + o->lease_ms / 2;
    o->done = 0;
    put_step(o);
}

/* put_at_once()'s write: o's bytes into the new version's replicas. */
static int put_write_own(void *arg, const mc__replica_t *rep, uint32_t nrep)
{
    op_t *o = arg;
    const char *src = o->tmp ? o->tmp : (o->iovcnt ? o->iov[0].iov_base : "");
    return mc__xfer_write_own(o->s, rep, nrep, src, o->len);
}

/*
 * A put whose master is in this process and whose replicas are all in our
 * own segment is one call (mc__link_put()): the same rules as PUT_START and
 * PUT_COMMIT, the bytes copied in between. Returns 1 when it finished o, 0
 * when o must take the two requests (an rpc link, or a replica elsewhere).
 */
static int put_at_once(op_t *o)
{
    mc__put_start_rq_t start;
    mc__put_commit_rq_t commit;
    put_start_rq(o, o->len, &start);
    put_commit_rq(o, &commit);
    int rc = mc__link_put(o->s->rm->master, &start, &commit, put_write_own, o, NULL);
    if (rc == -EOPNOTSUPP || rc == -EREMOTE)
        return 0;
    mc__rc_drop(o->s->rm, o->key, o->klen, NULL);
    put_end(o, rc);
    return 1;
}

static void remote_put(op_t *o)
{
    size_t total = 0;
    for (int i = 0; i < o->iovcnt; i++)
        total += o->iov[i].iov_len;
    o->len = total;
    if (o->iovcnt > 1) { /* gather into one buffer: pieces index it by offset */
        o->tmp = malloc(total ? total : 1);
        if (!o->tmp)
            return mc__op_finish(o, -ENOMEM);
        size_t at = 0;
        for (int i = 0; i < o->iovcnt; i++) {
            if (o->iov[i].iov_len) /* an empty piece may have no base */
                memcpy((char *)o->tmp + at, o->iov[i].iov_base, o->iov[i].iov_len);
            at += o->iov[i].iov_len;
        }
    }
    if (total <= PUT_STEP && put_at_once(o))
        return;
    o->sent_ms = mc__loop_time(o->s->loop);
    int rc = mc__mcall_put_start(o, total, put_started);
    if (rc < 0) {
        free(o->tmp);
        o->tmp = NULL;
        mc__op_finish(o, rc);
    }
}

/* ---- get, open, read ---- */

static void get_replicas_done(void *arg, int status, const char *body, size_t len);
static void get_opened(void *arg, int status, const char *body, size_t len);

/* Whether a get's read must be checked against its lease when it ends: a
 * master of another process may free the version's space once the lease is
 * over. An embedded store's master runs on our loop, between our callbacks,
 * and a read from our own segment is one memcpy right after the lease is
 * granted or found in the cache (xfer.c), so none can come between: the
 * clock is not read twice per get for nothing. */
static int lease_checked(const op_t *o)
{
    return o->s->remote;
}

/* GET_REPLICAS for o's get, its lease counted from now on (the master
 * grants it later: the lease lasts at least that long). */
static int get_replicas(op_t *o)
{
    o->sent_ms = lease_checked(o) ? mc_loop_now_ms() : 0;
    o->u64 = __atomic_load_n(&o->s->master_lost, __ATOMIC_SEQ_CST); /* until read_range() */
    return mc__mcall(o->s, MC__OP_GET_REPLICAS, get_replicas_done, o, "k", o->key,
                     (uint32_t)o->klen);
}

void mc__read_done(void *arg, int rc)
{
    op_t *o = arg;
    if (o->kind == OP_GET) {
        rcache_ent_t *e = o->tmp;
        o->tmp = NULL;
        if (rc < 0 && o->stage == 1 && o->s->rm) {
            /* The cached set failed: forget it, ask the master once. */
            mc__rc_drop(o->s->rm, o->key, o->klen, e);
            mc__rc_put(e);
            o->stage = 2;
            rc = get_replicas(o);
            if (rc < 0)
                mc__op_finish(o, rc);
            return;
        }
        if (rc >= 0 && o->u64 && lease_checked(o) &&
            (!e->lease_end || mc_loop_now_ms() >= e->lease_end ||
             e->session != __atomic_load_n(&o->s->master_lost, __ATOMIC_SEQ_CST))) {
            /* The read outlived its lease (a slow link, a large object):
             * the version's space may have been freed and given to another
             * object while it was read, so the bytes may not be its. Read
             * again under a handle, which holds the version until it
             * closes, however long the read takes. */
            mc__rc_drop(o->s->rm, o->key, o->klen, e);
            mc__rc_put(e);
            o->stage = 3;
            rc = mc__mcall(o->s, MC__OP_OPEN, get_opened, o, "k", o->key, (uint32_t)o->klen);
            if (rc < 0)
                mc__op_finish(o, rc);
            return;
        }
        mc__rc_put(e);
    } else if (rc >= 0 && o->obj && mc_obj_stale(o->obj)) {
        rc = -ESTALE; /* read through a handle the master may have let go meanwhile */
    }
    o->tmp = NULL;
    mc__op_finish(o, rc < 0 ? rc : (int)o->u64);
}

/* Reads [o->off, o->off + o->len) clamped to size from rs into o->buf. */
static void read_range(op_t *o, const mc__rset_t *rs, uint64_t size)
{
    uint64_t n = 0;
    if (o->off < size)
        n = size - o->off < o->len ? size - o->off : o->len;
    o->u64 = n;
    mc__xfer(o->s, rs, 0, o->off, o->buf, n, mc__read_done, o);
}

static void get_replicas_done(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    if (status < 0) {
        if (status == -ENOENT)
            mc__rc_drop(o->s->rm, o->key, o->klen, NULL);
        return mc__op_finish(o, status);
    }
    const char *p;
    uint32_t pl;
    size_t n;
    uint64_t lease_ms;
    mc_stat_t st;
    mc__rset_t *rs = NULL;
    if (mc__unpack(body, len, "q*", &lease_ms, &p, &pl) < 0 ||
        (n = pl, mc__take_stat(&p, &n, &st)) < 0 || mc__rset_take(&p, &n, &rs) < 0)
        return mc__op_finish(o, -EIO);
    rcache_ent_t *e = calloc(1, sizeof(*e) + o->klen);
    if (!e) {
        mc__rset_free(rs);
        return mc__op_finish(o, -ENOMEM);
    }
    e->refs = 1; /* this get's */
    e->lease_end = lease_ms ? o->sent_ms + lease_ms : 0;
    e->session = o->u64;
    e->st = st;
    e->rs = rs;
    e->klen = o->klen;
    memcpy(e->key, o->key, o->klen);
    /* Half the lease: a margin for the trip and the clocks' tick. */
    uint64_t keep = lease_ms - lease_ms / 2;
    if (keep && lease_ms / 2 && o->s->rm && !o->s->no_rcache) {
        e->expires = mc__loop_recent_ns(o->s->loop) / 1000000 + keep;
        mc__rc_insert(o->s->rm, e);
    }
    if (o->st)
        *o->st = st;
    o->tmp = e;
    read_range(o, rs, st.size);
}

/* The end of a get's read under a handle (stage 3): closes it. */
static void get_pinned_done(void *arg, int rc)
{
    op_t *o = arg;
    if (rc >= 0 && mc_obj_stale(o->obj))
        rc = -ESTALE; /* the handle went with a lost master connection meanwhile */
    mc__obj_release(o->obj);
    o->obj = NULL;
    mc__op_finish(o, rc < 0 ? rc : (int)o->u64);
}

/* OPEN of a get whose read outlived its lease: reads the version opened. */
static void get_opened(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    size_t n = len;
    mc_obj_t *ob;
    int rc = status < 0 ? status : mc__obj_take(o->s, &body, &n, &ob);
    if (rc < 0)
        return mc__op_finish(o, rc);
    o->obj = ob;
    if (o->st)
        *o->st = ob->st;
    uint64_t size = ob->st.size, cnt = 0;
    if (o->off < size)
        cnt = size - o->off < o->len ? size - o->off : o->len;
    o->u64 = cnt;
    mc__xfer(o->s, ob->rs, 0, o->off, o->buf, cnt, get_pinned_done, o);
}

/* mc_get(): through the cache when it has the key, else the master. */
static int remote_get(op_t *o)
{
    rcache_ent_t *e = o->s->no_rcache ? NULL : mc__rc_find(o->s->rm, o->key, o->klen);
    if (!e) {
        o->stage = 0;
        return get_replicas(o);
    }
    mc__bump(&o->s->st.cache_hits, 1);
    e->refs++;
    o->stage = 1;
    o->tmp = e;
    if (o->st)
        *o->st = e->st;
    read_range(o, e->rs, e->st.size);
    return 0;
}

int mc__obj_take(mc_store_t *s, const char **p, size_t *n, mc_obj_t **out)
{
    mc_obj_t *ob = calloc(1, sizeof(*ob));
    const char *rest;
    uint32_t rl;
    size_t left;
    if (!ob)
        return -ENOMEM;
    ob->s = s;
    ob->session = __atomic_load_n(&s->master_lost, __ATOMIC_SEQ_CST);
    if (mc__unpack(*p, *n, "q*", &ob->rid, &rest, &rl) < 0 ||
        (left = rl, mc__take_stat(&rest, &left, &ob->st)) < 0 ||
        mc__rset_take(&rest, &left, &ob->rs) < 0) {
        if (ob->rid)
            mc__mcall(s, MC__OP_CLOSE, mc__ignore_reply, NULL, "q", ob->rid);
        free(ob);
        return -EIO;
    }
    LINK(&s->objs, ob);
    *p = rest;
    *n = left;
    *out = ob;
    return 0;
}

void mc__obj_release(mc_obj_t *ob)
{
    mc_store_t *s = ob->s;
    mc__mcall(s, MC__OP_CLOSE, mc__ignore_reply, NULL, "q", ob->rid);
    UNLINK(&s->objs, ob);
    mc__ra_close(ob);
    mc__rset_free(ob->rs);
    free(ob);
    if (!s->objs && s->rm && s->rm->retired)
        mc__peers_unretire(s->rm);
}

static void open_done(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    size_t n = len;
    int rc = status < 0 ? status : mc__obj_take(o->s, &body, &n, o->obj_out);
    mc__op_finish(o, rc);
}

/* ---- dispatch ---- */

void mc__remote_exec(op_t *o)
{
    mc_store_t *s = o->s;
    int rc = 0;
    switch (o->kind) {
    case OP_PUT:
        return remote_put(o);
    case OP_GET:
        rc = remote_get(o);
        break;
    case OP_STAT:
        rc = mc__mcall(s, MC__OP_STAT, simple_done, o, "k", o->key, (uint32_t)o->klen);
        break;
    case OP_LOOKUP:
        rc = mc__mcall(s, MC__OP_LOOKUP, simple_done, o, "ku", o->key, (uint32_t)o->klen,
                       (uint32_t)o->delim);
        break;
    case OP_REMOVE:
        rc = mc__mcall(s, MC__OP_REMOVE, simple_done, o, "ku", o->key, (uint32_t)o->klen, o->flags);
        break;
    case OP_RENAME:
        rc = mc__mcall(s, MC__OP_RENAME, simple_done, o, "kku", o->key, (uint32_t)o->klen, o->key2,
                       (uint32_t)o->klen2, o->flags);
        break;
    case OP_LINK:
        rc = mc__mcall(s, MC__OP_LINK, simple_done, o, "kku", o->key, (uint32_t)o->klen, o->key2,
                       (uint32_t)o->klen2, (uint32_t)0);
        break;
    case OP_LIST:
        rc = mc__mcall(s, MC__OP_LIST, simple_done, o, "ssuu", o->key, (uint32_t)o->klen, o->key2,
                       (uint32_t)o->klen2, (uint32_t)o->delim, (uint32_t)(o->max ? o->max : 1000));
        break;
    case OP_SET_META:
        rc = mc__mcall(s, MC__OP_SET_META, simple_done, o, "kuuuuii", o->key, (uint32_t)o->klen,
                       o->meta.what, o->meta.mode, o->meta.uid, o->meta.gid, o->meta.atime_ns,
                       o->meta.mtime_ns);
        break;
    case OP_STATFS:
        rc = mc__mcall(s, MC__OP_STATFS, simple_done, o, "");
        break;
    case OP_MASTER_STATS:
        rc = mc__mcall(s, MC__OP_STATS, simple_done, o, "");
        break;
    case OP_OPEN:
        rc = mc__mcall(s, MC__OP_OPEN, open_done, o, "k", o->key, (uint32_t)o->klen);
        break;
    case OP_OBJ_READ:
        return mc__ra_read(o);
    case OP_OBJ_CLOSE:
        mc__obj_release(o->obj);
        return mc__op_finish(o, 0);
    case OP_CREATE:
        return mc__create_exec(o);
    case OP_W_OPEN:
    case OP_W_WRITE:
    case OP_W_READ:
    case OP_W_TRUNC:
    case OP_W_PUNCH:
    case OP_W_COMMIT:
    case OP_W_ABORT:
        return mc__writer_exec(o);
    case OP_XATTR_GET:
    case OP_XATTR_SET:
    case OP_XATTR_LIST:
    case OP_XATTR_REMOVE:
        return mc__xattr_exec(o);
    case OP_TASK_CREATE:
    case OP_TASK_QUERY:
    case OP_REPLICA_DROP:
        return mc__task_exec(o);
    }
    if (rc < 0)
        mc__op_finish(o, rc);
}
