/*
 * writer.c - streaming writers (mc_writer_t): a pending version the master
 * reserves space for as it grows (PUT_START, PUT_GROW, with a write lease
 * renewed when half of it is gone; an idle writer's by writer_idle.c),
 * written through xfer.c to every replica, published with PUT_COMMIT or dropped with PUT_REVOKE;
 * one opened on an existing version first copies it. Sparse files: a write past the end leaves a
 * hole (no space) behind it, a long gap past the size is punched, a write into a hole gets space
 * there, and a copy keeps the base's holes. Writes may be in flight together (write-behind): the
 * size counts each from its start (o->base is the size before it), a write that fills a hole or
 * zeroes a gap holds the others back meanwhile, and a transfer that overlaps one on its way waits
 * for it to land (writer_xfer.c). Space goes back to the master (a punch, a revoke)
 * only when no transfer of the writer can land in it any more: another object may get it next.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/remote_i.h"
#include "runtime/loop_i.h"

static void w_free(mc_writer_t *w)
{
    mc__writer_forget_renewal(w);
    UNLINK(&w->s->writers, w);
    mc__rset_free(w->rs);
    free(w->key);
    free(w);
}

void mc__writer_wake(op_t **list)
{
    op_t *q = *list;
    *list = NULL;
    while (q) {
        op_t *next = q->wnext;
        q->wnext = NULL;
        q->cont(q);
        q = next;
    }
}

/* Parks o at the end of *list; again(o) runs when it is woken. */
static void w_park(op_t **list, op_t *o, void (*again)(op_t *))
{
    while (*list)
        list = &(*list)->wnext;
    o->cont = again;
    *list = o;
}

/* Finishes o, one of w's writes, reads, truncations or punches; a commit
 * or an abort that waited for w's ops goes on after the last. */
static void w_finish(op_t *o, int rc)
{
    mc_writer_t *w = o->w;
    mc__op_finish(o, rc); /* its callback runs later: o and w stay */
    if (!--w->ops)
        mc__writer_wake(&w->ops_wait);
}

/* Ends w's write at the master without publishing it (and frees w): fenced
 * when a write transfer failed, whose bytes may still land (a failure
 * that moved no byte, as the master refusing space, frees it at once). */
static void w_revoke(mc_writer_t *w)
{
    mc__put_revoke(w->s, w->put_id, w->xfer_failed);
    w_free(w);
}

/* Replaces w's replica set with the one in a PUT_START/PUT_GROW reply. */
static int w_take_rset(mc_writer_t *w, const char *p, size_t n)
{
    mc__rset_t *rs;
    int rc = mc__rset_take(&p, &n, &rs);
    if (rc < 0)
        return rc;
    mc__rset_replace(w->rs, rs); /* what transfers over the old one drop is dropped here */
    mc__rset_free(w->rs);
    w->rs = rs;
    rs->put_id = w->put_id;
    return 0;
}

static void w_copy_step(op_t *o);
static void w_copied(void *arg, int rc);
static void w_fail(op_t *o, int rc);

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
        return w_fail(o, grow_error(status));
    w->renew_at = o->sent_ms + w->lease_ms / 2;
    if (o->u64 > w->capacity)
        w->capacity = o->u64;
    o->cont(o);
}

/*
 * PUT_GROW: asks the master for space for [off, off + len) of w (holes in
 * it filled), or with punch to make its whole allocation units a hole; the
 * reservation grows to at least off + len, a hole past its old end (sparse
 * files). off = len = 0 only renews the write lease. Takes the replica set
 * it answers (replicas dropped meanwhile are gone from it), then goes on
 * with cont(o).
 */
static void w_grow(op_t *o, uint64_t off, uint64_t len, int punch, void (*cont)(op_t *))
{
    o->u64 = punch ? 0 : off + len;
    o->cont = cont;
    o->sent_ms = mc__loop_time(o->s->loop);
    int rc = mc__mcall(o->s, MC__OP_PUT_GROW, w_renewed, o, "qqqu", o->w->put_id, off,
                       (uint64_t)len, punch ? (unsigned)MC__GROW_PUNCH : 0u);
    if (rc < 0 && o->kind == OP_W_OPEN)
        w_copied(o, rc);
    else if (rc < 0)
        w_fail(o, grow_error(rc));
}

/* Whether w's lease must be renewed before it moves another byte: half of
 * it is gone, so that what it sends now lands well before the master could
 * hand the space to anyone else. */
static int w_stale(const mc_writer_t *w)
{
    return mc__loop_time(w->s->loop) >= w->renew_at;
}

/* The end of the chunk of the base to copy next: o->off is the next byte,
 * o->len the end of the run of bytes it lies in. */
static uint64_t w_copy_end(const op_t *o)
{
    return o->len - o->off > MC__PROTO_CHUNK ? o->off + MC__PROTO_CHUNK : o->len;
}

/* A write of the copy (bytes or zeros) ended: one that failed may still
 * land, so its space is revoked fenced (w_revoke()). */
static void w_copy_wrote(void *arg, int rc)
{
    op_t *o = arg;
    if (rc < 0)
        o->w->xfer_failed = 1;
    w_copied(o, rc);
}

static void w_copied(void *arg, int rc)
{
    op_t *o = arg;
    if (rc < 0) {
        free(o->tmp);
        o->tmp = NULL;
        w_revoke(o->w);
        return mc__op_finish(o, rc);
    }
    if (o->stage == 1) { /* the chunk was read: write it */
        o->stage = 2;
        mc__xfer(o->s, o->w->rs, 1, o->off, o->tmp, w_copy_end(o) - o->off, w_copy_wrote, o);
        return;
    }
    if (o->stage == 2) /* written */
        o->off = w_copy_end(o);
    o->w->size = o->off; /* stage 3: the gap before it is zeros */
    w_copy_step(o);
}

/*
 * Copies the base version into the new one: its runs of bytes a chunk at a
 * time, its holes left holes. Before a run, the space for it is asked for
 * (a hole before it in the new version) and what of the gap before it has
 * space in the new version is zeroed.
 */
static void w_copy_step(op_t *o)
{
    mc_writer_t *w = o->w;
    uint64_t size = o->obj->st.size, a, b;
    while (o->off >= o->len && o->off < size) { /* the next run */
        int hole = mc__rset_run(o->obj->rs, o->off, &a, &b);
        o->len = b < size ? b : size;
        if (hole)
            o->off = o->len;
    }
    if (w->size >= size) {
        free(o->tmp);
        o->tmp = NULL;
        mc__writer_handed(w);
        *o->w_out = w;
        return mc__op_finish(o, 0);
    }
    if (w_stale(w))
        return w_grow(o, 0, 0, 0, w_copy_step);
    uint64_t end = o->off < size ? o->len : size;
    if (w->capacity < end) /* the run's space (or the end's, after a hole) */
        return w_grow(o, o->off, end - o->off, 0, w_copy_step);
    if (w->size < o->off) {
        o->stage = 3;
        mc__xfer(o->s, w->rs, 1, w->size, NULL, o->off - w->size, w_copy_wrote, o);
        return;
    }
    o->stage = 1;
    mc__xfer(o->s, o->obj->rs, 0, o->off, o->tmp, w_copy_end(o) - o->off, w_copied, o);
}

/* The bytes the new version reserves at PUT_START: all of base's unless the
 * base has holes, whose space it leaves unreserved; MC__WRITER_FIRST without a
 * base (or an empty one). */
static uint64_t w_start_capacity(const mc_obj_t *base)
{
    uint64_t a, b;
    if (!base || !base->st.size)
        return MC__WRITER_FIRST;
    if (mc__rset_run(base->rs, 0, &a, &b) || b < base->st.size)
        return 0;
    return base->st.size;
}

int mc__writer_take(mc_store_t *s, const char *key, size_t klen, uint64_t sent_ms,
                    uint64_t capacity, const char *body, size_t len, mc_writer_t **out)
{
    mc_writer_t *w = calloc(1, sizeof(*w));
    const char *rest;
    uint32_t rl;
    if (!w || !(w->key = malloc(klen + 1))) {
        free(w);
        return -ENOMEM;
    }
    w->s = s;
    if (mc__unpack(body, len, "qq*", &w->put_id, &w->lease_ms, &rest, &rl) < 0 ||
        w_take_rset(w, rest, rl) < 0) {
        free(w->key);
        free(w);
        return -EIO;
    }
    memcpy(w->key, key, klen);
    w->key[klen] = '\0';
    w->klen = klen;
    w->renew_at = sent_ms + w->lease_ms / 2;
    w->capacity = capacity;
    w->session = __atomic_load_n(&s->master_lost, __ATOMIC_SEQ_CST);
    LINK(&s->writers, w);
    *out = w;
    return 0;
}

static void w_started(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    if (status == -ENOSPC && o->u64 == MC__WRITER_FIRST) {
        /* No room for the first bytes: start with none, as the writes ask
         * for space (and fail there when there is none). */
        o->u64 = 0;
        status = mc__mcall_put_start(o, 0, w_started);
        if (status == 0)
            return;
    }
    if (status < 0)
        return mc__op_finish(o, status);
    mc_writer_t *w;
    int rc = mc__writer_take(o->s, o->key, o->klen, o->sent_ms, o->u64, body, len, &w);
    if (rc < 0)
        return mc__op_finish(o, rc);
    w->put_flags = o->po.flags;
    o->w = w;
    if (!o->obj || !o->obj->st.size) {
        mc__writer_handed(w);
        *o->w_out = w;
        return mc__op_finish(o, 0);
    }
    o->off = o->len = 0;
    o->tmp = malloc(MC__PROTO_CHUNK);
    if (!o->tmp) {
        w_copied(o, -ENOMEM);
        return;
    }
    w_copy_step(o);
}

/* Finishes o with rc, giving a write its length and the others 0. */
static void w_op_end(op_t *o, int rc)
{
    if (rc >= 0 && o->kind == OP_W_WRITE)
        rc = (int)o->len;
    if (rc >= 0 && o->kind == OP_W_TRUNC)
        rc = 0;
    if (rc >= 0 && o->kind == OP_W_PUNCH)
        rc = 0;
    w_finish(o, rc);
}

/* The version in progress lost a transfer (rc < 0): the bytes of its range
 * are unknown now (some pieces landed, some did not, on some replicas), and
 * the writes issued after it went on over a size that counted it. Nothing
 * of it may be read or published any more: every later op of w and its
 * commit fail with the first such error (docs/SEMANTICS.md). */
static void w_poison(mc_writer_t *w, int rc)
{
    if (rc < 0 && !w->err)
        w->err = rc;
}

/* The end of a write, truncation or punch whose last step was a transfer
 * (or that failed where the size cannot be told back, w_fail()). */
static void w_op_done(void *arg, int rc)
{
    op_t *o = arg;
    w_poison(o->w, rc);
    w_op_end(o, rc);
}

static void w_have_space(op_t *o);
static void w_reserve(op_t *o);
static void w_read_start(op_t *o);
static void w_punch_start(op_t *o);
static void w_unfill(op_t *o);

/* The end of a punch (w_punch()): the ops that waited for it go on. */
static void w_punch_done(void *arg, int rc)
{
    op_t *o = arg;
    w_poison(o->w, rc);
    w_unfill(o);
    w_op_end(o, rc);
}

/*
 * Ends o's fill of a hole (its new space around what it writes is zeroed)
 * or of a gap, or o's punch: the ops that waited for it look at the layout
 * again. While a write fills a hole or a gap every later op of the writer
 * waits, so that the zeros land on space no other write has touched yet;
 * while a punch gives space back, so that no write lands there.
 */
static void w_unfill(op_t *o)
{
    mc_writer_t *w = o->w;
    if (w->filling != o)
        return;
    w->filling = NULL;
    mc__writer_wake(&w->fill_wait); /* each parks again, in order, when one of them fills */
}

/*
 * The failed o, which holds w->filling, adds nothing to the size: every
 * op started after it waits in w->fill_wait, in the order they started,
 * and each write or truncation counted its start (o->base) from a size
 * that took o in. Counts them again without o: a write that o's end kept from a gap
 * of its own gets one (zeroed, where o would have zeroed its), and the size
 * is what they make it, not less (o's start would drop their bytes).
 * A truncation that shrank the size after o started (it does not wait)
 * set the size over o: the size stays, and [o->base, size), which o would
 * have zeroed or written, must read as zeros. Returns the end of what
 * must be zeroed from o->base (o->base: nothing).
 */
static uint64_t w_forget(op_t *o)
{
    mc_writer_t *w = o->w;
    uint64_t with = o->kind == OP_W_TRUNC || o->off + o->len > o->base ? o->off + o->len : o->base;
    uint64_t without = o->base;
    for (op_t *q = w->fill_wait; q; q = q->wnext) {
        if (q->kind == OP_W_READ || q->kind == OP_W_PUNCH)
            continue; /* adds nothing to the size */
        uint64_t end = q->off + q->len;
        if (q->base > without)
            q->base = without;
        with = q->kind == OP_W_TRUNC || end > with ? end : with;
        without = q->kind == OP_W_TRUNC || end > without ? end : without;
    }
    if (w->size != with)
        return w->size > o->base ? w->size : o->base;
    w->size = without;
    return o->base;
}

/* The zeros a refused o owed were written (w_fail()): its error goes to
 * its caller, kept in o->result, and the writes after it go on. */
static void w_forgotten(void *arg, int rc)
{
    op_t *o = arg;
    w_poison(o->w, rc);
    w_unfill(o);
    w_op_end(o, o->result);
}

/* The reservation reaches the end of what a refused o owed (w_fail()):
 * zeros where it has space, the rest a hole already. */
static void w_forget_zero(op_t *o)
{
    uint64_t end = o->hi < o->w->capacity ? o->hi : o->w->capacity;
    if (end <= o->base)
        return w_forgotten(o, 0);
    mc__writer_xfer(o, 1, o->base, NULL, end - o->base, w_forgotten);
}

/*
 * Finishes o with rc < 0 (o->w's op but its open), letting writes that
 * wait for it go on. One that holds w->filling and failed before its first
 * step (stage 0: the master refused its space, ENOSPC) touched no byte:
 * the writer goes on as if it had never been issued. Any other failure
 * loses the version (w_poison()).
 */
static void w_fail(op_t *o, int rc)
{
    mc_writer_t *w = o->w;
    if (o->kind == OP_W_PUNCH) /* the put is gone */
        return w_punch_done(o, rc);
    if (w->filling != o) /* a renewal: the put is gone */
        return w_op_done(o, rc);
    if (o->stage > 0) /* its layout changed, zeros went out: not a refusal */
        w_poison(w, rc);
    uint64_t end = w_forget(o);
    if (end > o->base && !w->err) {
        o->result = rc;
        o->hi = end;
        if (end <= w->capacity)
            return w_forget_zero(o);
        /* A truncation left the size past the space (o's grow was refused,
         * and a writer that began small reserved little): the rest becomes
         * a hole (no space needed), so that it reads as zeros too. A
         * failure of that grow comes back here and loses the version. */
        o->stage = 1;
        return w_grow(o, end, 0, 0, w_forget_zero);
    }
    w_unfill(o);
    w_op_end(o, rc);
}

static void w_step_done(void *arg, int rc)
{
    op_t *o = arg;
    if (rc < 0) {
        w_poison(o->w, rc); /* before w_fail() takes it for a refusal */
        return w_fail(o, rc);
    }
    w_have_space(o);
}

/* A gap this long before a write, past the writer's size when it began,
 * is punched (its space given back) rather than zeroed where it has
 * space. */
#define W_PUNCH_GAP (1u << 20)

/*
 * Space is reserved up to at least the end: zeroes the new space around a
 * write that filled a hole (stages 0 and 1, [o->lo, off) and [end, o->hi)),
 * makes the gap [o->base, off) past the size it began at zeros (2: punched
 * when long and not a hole already, 3: zeroed where it has space), then
 * does the op. A write with a gap holds w->filling from w_reserve() until
 * its bytes are sent: a later write may land in the gap, and must not have
 * its bytes zeroed after it wrote them, and a later truncation's zeros must
 * be sent after them. Writes started before it end at o->base.
 */
static void w_have_space(op_t *o)
{
    mc_writer_t *w = o->w;
    uint64_t end = o->off + o->len, a, b;
    switch (o->stage++) {
    case 0:
        if (o->lo < o->off)
            return mc__writer_xfer(o, 1, o->lo, NULL, o->off - o->lo, w_step_done);
        return w_have_space(o);
    case 1:
        if (o->hi > end)
            return mc__writer_xfer(o, 1, end, NULL, o->hi - end, w_step_done);
        return w_have_space(o);
    case 2: /* a punch, once no transfer can land there (a write's that a
             * truncation shrank the size into) */
        if (o->off <= o->base) {
            o->stage++; /* no gap */
        } else if (o->off > o->base + W_PUNCH_GAP &&
                   !(mc__rset_run(w->rs, o->base, &a, &b) && b >= o->off)) {
            if (mc__writer_landing(w, o->base)) {
                o->stage--;
                return w_park(&w->xfer_wait, o, w_have_space);
            }
            return w_grow(o, o->base, o->off - o->base, 1, w_have_space);
        }
        return w_have_space(o);
    case 3: /* reads as zeros: write them where it has space */
        return mc__writer_xfer(o, 1, o->base, NULL, o->off - o->base, w_step_done);
    default:
        break;
    }
    /* The bytes are asked for before the writes that waited are let go:
     * a transfer of theirs that overlaps them starts once they landed
     * (mc__writer_xfer()), so the zeros of a later truncation that grows again
     * (after one that shrank into this write) land on them, not under
     * them. (Its callback is deferred: o outlives it.) */
    if (o->kind == OP_W_WRITE)
        mc__writer_xfer(o, 1, o->off, o->buf, o->len, w_op_done);
    w_unfill(o);
    if (o->kind == OP_W_TRUNC)
        w_op_done(o, 0);
}

/*
 * Makes room for [o->off, end) in w, then continues the op: asks the master
 * for space past what w reserved (with headroom so that streaming writes
 * ask rarely; a hole between, when the range starts past it) or for the
 * holes inside the range; renews the lease when it is half gone.
 */
static void w_reserve(op_t *o)
{
    mc_writer_t *w = o->w;
    uint64_t off = o->off, end = o->off + o->len, cap = w->capacity, a, b, c, d;
    if (w->err) /* the version was lost while o waited */
        return w_op_end(o, w->err);
    if (w->filling) /* after it, in order */
        return w_park(&w->fill_wait, o, w_reserve);
    o->stage = 0;
    o->lo = off; /* nothing to zero around it */
    o->hi = end;
    if (off > o->base)
        w->filling = o;           /* later writes wait until its gap is zeros */
    if (off < cap && off < end) { /* holes where it writes fill: zero around them after */
        uint64_t top = end < cap ? end : cap;
        int hole = mc__rset_run(w->rs, off, &a, &b);
        if (hole || b < top) {
            o->lo = hole ? a : off;
            o->hi = mc__rset_run(w->rs, top - 1, &c, &d) && end <= cap ? d : end;
            if (o->hi > cap)
                o->hi = cap;
            w->filling = o;
            return w_grow(o, off, end - off, 0, w_have_space);
        }
    }
    if (end <= cap)
        return w_stale(w) ? w_grow(o, 0, 0, 0, w_have_space) : w_have_space(o);
    uint64_t from = off > cap ? off : cap;
    uint64_t to = end;
    if (o->kind == OP_W_WRITE) {
        /* As long as the run of bytes that ends at the end (not its holes) */
        uint64_t run = cap && !mc__rset_run(w->rs, cap - 1, &a, &b) && from == cap ? cap - a : 0;
        uint64_t step = run < WRITER_MAX_STEP ? run : WRITER_MAX_STEP;
        if (run + step < (1 << 20))
            step = (1 << 20) - run; /* to 1 MiB at least (past MC__WRITER_FIRST) */
        if (to < from + step)
            to = from + step;
        if (to > (uint64_t)INT64_MAX)
            to = end; /* no headroom past the largest file */
    }
    /* The others wait for the layout this grow gets: one that asked for
     * space meanwhile could be handed the gap this one leaves, which
     * nobody would zero (test_writer_gaps). */
    w->filling = o;
    w_grow(o, from, to - from, 0, w_have_space);
}

/* The whole units of a punched range are a hole: zero the rest of it. */
static void w_punched(op_t *o)
{
    mc__writer_xfer(o, 1, o->off, NULL, o->len, w_punch_done);
}

/* A punch gives the space of its whole units back: once no transfer can
 * land there (a write's bytes still on their way). It holds w->filling
 * from w_punch_start() to its end, so that the ops issued after it wait:
 * a write sent meanwhile would land in the space given back. */
static void w_punch(op_t *o)
{
    mc_writer_t *w = o->w;
    if (w->err)
        return w_punch_done(o, w->err);
    if (mc__writer_landing(w, o->off))
        return w_park(&w->xfer_wait, o, w_punch);
    w_grow(o, o->off, o->len, 1, w_punched);
}

/* Starts punch o, after the op that fills a hole or a gap, in order. */
static void w_punch_start(op_t *o)
{
    mc_writer_t *w = o->w;
    if (w->filling)
        return w_park(&w->fill_wait, o, w_punch_start);
    w->filling = o;
    w_punch(o);
}

/* Whether w's put ended with a lost connection to the master: its space
 * may be another object's now, so nothing read there is its own. */
static int w_lost(mc_writer_t *w)
{
    if (__atomic_load_n(&w->s->master_lost, __ATOMIC_SEQ_CST) == w->session)
        return 0;
    w_poison(w, -ESTALE);
    return 1;
}

static void w_read_done(void *arg, int rc)
{
    op_t *o = arg;
    if (rc >= 0 && w_lost(o->w))
        rc = -ESTALE;
    w_finish(o, rc < 0 ? rc : (int)o->u64);
}

static void w_read(op_t *o)
{
    mc_writer_t *w = o->w;
    if (w_lost(w))
        return w_finish(o, -ESTALE);
    uint64_t n = o->off < w->size ? w->size - o->off : 0;
    o->u64 = n < o->len ? n : o->len;
    mc__writer_xfer(o, 0, o->off, o->buf, o->u64, w_read_done);
}

/* A read waits, in order, while a write fills a hole or a gap (w->filling):
 * the size already counts that write, and until its zeros are written the
 * gap holds what the segment held (another object's bytes). Then it reads
 * its own bytes, as long as the space is still its own. */
static void w_read_start(op_t *o)
{
    mc_writer_t *w = o->w;
    if (w->err)
        return w_finish(o, w->err);
    if (w->filling)
        return w_park(&w->fill_wait, o, w_read_start);
    w_stale(w) ? w_grow(o, 0, 0, 0, w_read) : w_read(o);
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
    if (status < 0)
        w_revoke(o->w); /* a commit refused leaves the put (an inode key without a name) */
    else
        w_free(o->w);
    mc__op_finish(o, status < 0 ? revoked(status) : 0);
}

/* ---- idle writers' renewals (the timer is writer_idle.c's) ---- */

int mc__writer_renewed(mc_writer_t *w, int status, const char *body, size_t len)
{
    if (status == 0) /* MC__RENEWED_BARE: renewed, the set it has kept */
        status = w_take_rset(w, body, len);
    if (status >= 0)
        w->renew_at = w->renew_sent + w->lease_ms / 2;
    else if (grow_error(status) == -ESTALE)
        w_poison(w, -ESTALE); /* the put is gone: every later op fails so */
    return status;
}

void mc__writer_op_ended(mc_writer_t *w)
{
    if (!--w->ops)
        mc__writer_wake(&w->ops_wait);
}

/* ---- dispatch ---- */

/* A write, read, truncation or punch of o->w: counted in w->ops until it
 * finishes (w_finish()). */
static void w_range_exec(op_t *o)
{
    mc_writer_t *w = o->w;
    w->ops++;
    if (o->kind == OP_W_READ)
        return w_read_start(o);
    if (w->err)
        return w_finish(o, w->err); /* the version is lost (w_poison()) */
    switch (o->kind) {
    case OP_W_WRITE:
        if (o->off > (uint64_t)INT64_MAX || o->len > (uint64_t)INT64_MAX - o->off)
            return w_finish(o, -EFBIG); /* past the largest file, as Linux's */
        /* Writes may be in flight together (write-behind): the size covers
         * each from its start, so that a later one zeroes no gap that an
         * earlier one is writing, and an append lands after both. */
        o->base = w->size;
        if (o->off + o->len > w->size)
            w->size = o->off + o->len;
        return w_reserve(o);
    case OP_W_TRUNC:
        if (o->off > (uint64_t)INT64_MAX)
            return w_finish(o, -EFBIG);
        if (o->off <= w->size) {
            w->size = o->off;
            return w_finish(o, 0);
        }
        o->len = 0;
        o->base = w->size; /* growing: a hole, counted from its start */
        w->size = o->off;
        return w_reserve(o);
    default: /* OP_W_PUNCH */
        if (o->off >= w->size || !o->len)
            return w_finish(o, 0);
        if (o->len > w->size - o->off)
            o->len = (size_t)(w->size - o->off); /* past the size: zeros already */
        o->stage = 0;
        return w_punch_start(o);
    }
}

/* Publishes o->w, or revokes it when a transfer failed; after every op of
 * it finished (so that no transfer can land once its space is freed). */
static void w_commit(op_t *o)
{
    mc_writer_t *w = o->w;
    if (w->ops)
        return w_park(&w->ops_wait, o, w_commit);
    w->ending = 1;
    if (w->err) { /* nothing of it is published: its space goes back */
        int rc = w->err;
        w_revoke(w);
        return mc__op_finish(o, rc);
    }
    mc__put_commit_rq_t rq = {.id = w->put_id,
                              .key = w->key,
                              .klen = (uint32_t)w->klen,
                              .size = w->size,
                              .what = w->meta_what,
                              .mode = w->mode,
                              .mtime_ns = w->mtime_ns};
    int rc = mc__mcall_put_commit(o->s, &rq, w_committed, o);
    if (rc < 0) {
        w_revoke(w);
        mc__op_finish(o, rc);
    }
}

/* Drops o->w and its space, after every op of it finished. */
static void w_abort(op_t *o)
{
    mc_writer_t *w = o->w;
    if (w->ops)
        return w_park(&w->ops_wait, o, w_abort);
    w_revoke(w);
    mc__op_finish(o, 0);
}

void mc__writer_exec(op_t *o)
{
    switch (o->kind) {
    case OP_W_OPEN:
        o->sent_ms = mc__loop_time(o->s->loop);
        o->u64 = w_start_capacity(o->obj);
        int rc = mc__mcall_put_start(o, o->u64, w_started);
        if (rc < 0)
            mc__op_finish(o, rc);
        return;
    case OP_W_WRITE:
    case OP_W_READ:
    case OP_W_TRUNC:
    case OP_W_PUNCH:
        return w_range_exec(o);
    case OP_W_COMMIT:
        return w_commit(o);
    case OP_W_ABORT:
        return w_abort(o);
    default:
        break;
    }
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
