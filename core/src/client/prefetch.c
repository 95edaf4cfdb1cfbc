/*
 * prefetch.c - read-ahead of open versions on remote replicas (prefetch.h).
 *
 * Each open version (mc_obj_t) that is read sequentially from a replica on
 * another node (TCP or RDMA; a replica in memory this process addresses is
 * read in place or copied at once, and gains nothing) gets a read-ahead
 * state: the offset a sequential read would start at, a window that
 * doubles on every sequential read up to the per-version bound, and a list
 * of blocks of MC__RA_BLOCK bytes, contiguous, each fetched by one transfer
 * (mc__xfer(), with failover between replicas), several in flight at once.
 * A read inside the blocks or at the expected offset is served from them
 * (waiting for the blocks still in flight); any other read is a seek: the
 * blocks are dropped, the window starts again, and the read goes straight
 * to the replicas. Blocks behind the reader are freed. Memory is bounded per
 * version (s->ra_max) and per store (s->ra_total, counted in s->ra_used
 * until a block is freed, in flight or not); a read the bounds leave
 * uncovered is a plain read.
 *
 * A state belongs to one version: its bytes never change while it is open,
 * so a block is good until the version is closed, and a reader of another
 * version has another mc_obj_t and another state. A failed block fails the
 * reads waiting for its bytes with its error (never serving anything else)
 * and drops the stream; the next read starts afresh.
 *
 * A read of mc_obj_peek_async() (o->dcb) that one or two blocks hold is
 * lent their bytes (o->lent, o->liov): no copy; a block outlives a drop
 * until the read's callback returned (mc__ra_unlend()). Any other such read
 * gets a buffer of its own here. (The kernel's read-ahead of a file with
 * the page cache asks 1 MiB at offsets that are seldom the blocks': most of
 * its reads span two.)
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/prefetch.h"
#include "client/remote_i.h"

typedef struct ra_blk {
    struct mc__ra *ra;
    struct ra_blk *next;
    uint64_t off, len;
    int pending;   /* its transfer is in flight */
    int dropped;   /* off the list: freed when its transfer ends and no read holds it */
    unsigned lent; /* reads lent its bytes, their callbacks not yet returned */
    char buf[];
} ra_blk_t;

typedef struct mc__ra {
    mc_store_t *s;
    mc_obj_t *obj;              /* NULL once the version is closed */
    mc__rset_t *rs;             /* the version's replicas (the object's; NULL once closed) */
    uint64_t size;              /* the version's size */
    uint64_t seq;               /* where a sequential read starts */
    uint64_t window;            /* bytes to keep fetched ahead of the reader (0: no stream) */
    uint64_t end;               /* the end of what the blocks cover */
    ra_blk_t *head;             /* blocks by offset, covering [head->off, end) */
    uint64_t bytes;             /* bytes of its blocks, listed or dropped in flight */
    unsigned pending;           /* blocks in flight */
    unsigned lent;              /* reads lent the bytes of its blocks */
    unsigned gen;               /* counts the streams dropped by a failure */
    op_t *waiting;              /* reads waiting for blocks, linked through o->tmp */
    struct mc__ra *prev, *next; /* on s->ras */
} mc__ra_t;

static uint64_t min64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

/* A read of mc_obj_peek_async() that is not lent a block's bytes: a
 * buffer of its own (freed by mc__ra_unlend()). 0 or -ENOMEM. */
static int own_buf(op_t *o)
{
    if (!o->buf)
        o->buf = malloc(o->u64 ? o->u64 : 1);
    return o->buf ? 0 : -ENOMEM;
}

/* A read straight from the replicas (o->u64 bytes, clamped already). */
static void plain(op_t *o, const mc__rset_t *rs)
{
    if (own_buf(o) < 0)
        return mc__op_finish(o, -ENOMEM);
    mc__xfer(o->s, rs, 0, o->off, o->buf, o->u64, mc__read_done, o);
}

static void blk_free(ra_blk_t *b)
{
    mc__ra_t *ra = b->ra;
    ra->bytes -= b->len;
    ra->s->ra_used -= b->len;
    free(b);
}

/* Frees ra once its version is closed and nothing is in flight. */
static void ra_maybe_free(mc__ra_t *ra)
{
    if (ra->obj || ra->pending || ra->lent)
        return;
    UNLINK(&ra->s->ras, ra);
    free(ra);
}

/* Takes b off the list (the list's first): freed now, or when its
 * transfer ends. */
static void blk_drop(ra_blk_t *b)
{
    mc__ra_t *ra = b->ra;
    ra->head = b->next;
    if (b->pending || b->lent)
        b->dropped = 1;
    else
        blk_free(b);
}

/* Drops every block (the stream stays as it is: ra->window). */
static void ra_drop_all(mc__ra_t *ra, uint64_t at)
{
    while (ra->head)
        blk_drop(ra->head);
    ra->end = at;
}

/* Lets go of every read waiting for blocks: those that need a byte of
 * [lo, hi) finish with err, the others are sent straight to the replicas
 * (their blocks are about to be dropped, and a dropped block wakes
 * nobody). */
static void ra_release(mc__ra_t *ra, uint64_t lo, uint64_t hi, int err)
{
    op_t *w = ra->waiting;
    ra->waiting = NULL;
    while (w) {
        op_t *next = w->tmp;
        w->tmp = NULL;
        if (w->off < hi && w->off + w->u64 > lo)
            mc__op_finish(w, err);
        else
            plain(w, ra->rs);
        w = next;
    }
}

/* Frees the blocks that end at or before off, which no waiting read needs. */
static void ra_trim(mc__ra_t *ra, uint64_t off)
{
    for (op_t *w = ra->waiting; w; w = w->tmp)
        off = min64(off, w->off);
    while (ra->head && ra->head->off + ra->head->len <= off)
        blk_drop(ra->head);
    if (!ra->head)
        ra->end = off > ra->end ? off : ra->end;
}

/* Whether the blocks hold every byte of [off, off + n). */
static int ra_covers(const mc__ra_t *ra, uint64_t off, uint64_t n)
{
    return ra->head && ra->head->off <= off && off + n <= ra->end;
}

/* Serves o from the blocks (which cover its range) when none of them is
 * in flight: copies, finishes o and returns 1; else returns 0. */
static int ra_serve(mc__ra_t *ra, op_t *o)
{
    uint64_t off = o->off, end = o->off + o->u64;
    ra_blk_t *b = ra->head;
    while (b && b->off + b->len <= off)
        b = b->next;
    for (ra_blk_t *c = b; c && c->off < end; c = c->next)
        if (c->pending)
            return 0;
    o->tmp = NULL;
    if (o->dcb && !o->buf && b &&
        (end <= b->off + b->len || (b->next && end <= b->next->off + b->next->len))) {
        /* lent, not copied: one piece per block */
        for (int i = 0; b && b->off < end; b = b->next, i++) {
            uint64_t lo = off > b->off ? off : b->off;
            o->liov[i] = (struct iovec){b->buf + (lo - b->off), min64(end, b->off + b->len) - lo};
            o->lent[i] = b;
            o->liovcnt = i + 1;
            b->lent++;
            ra->lent++;
        }
        mc__op_finish(o, (int)o->u64);
        return 1;
    }
    if (own_buf(o) < 0) {
        mc__op_finish(o, -ENOMEM);
        return 1;
    }
    for (; b && b->off < end; b = b->next) {
        uint64_t lo = off > b->off ? off : b->off;
        uint64_t hi = min64(end, b->off + b->len);
        memcpy((char *)o->buf + (lo - o->off), b->buf + (lo - b->off), hi - lo);
    }
    mc__op_finish(o, (int)o->u64);
    return 1;
}

static void ra_fail(mc__ra_t *ra, const ra_blk_t *failed, int err);

/* Serves every waiting read whose blocks have all arrived. */
static void ra_wake(mc__ra_t *ra)
{
    op_t *w = ra->waiting;
    ra->waiting = NULL;
    while (w) {
        op_t *next = w->tmp;
        w->tmp = NULL;
        if (!ra_serve(ra, w)) {
            w->tmp = ra->waiting;
            ra->waiting = w;
        }
        w = next;
    }
}

static void blk_done(void *arg, int rc)
{
    ra_blk_t *b = arg;
    mc__ra_t *ra = b->ra;
    ra->pending--;
    b->pending = 0;
    if (b->dropped) {
        if (!b->lent)
            blk_free(b);
        ra_maybe_free(ra);
        return;
    }
    if (rc >= 0 && ra->obj && mc_obj_stale(ra->obj))
        rc = -ESTALE; /* fetched through a handle the master may have let go meanwhile */
    if (rc < 0)
        return ra_fail(ra, b, rc);
    ra_wake(ra);
}

/*
 * A block failed with err (every replica was tried): the reads waiting for
 * any of its bytes fail with err; the others are read straight from the
 * replicas; the stream ends, so the next read starts afresh.
 */
static void ra_fail(mc__ra_t *ra, const ra_blk_t *failed, int err)
{
    ra_release(ra, failed->off, failed->off + failed->len, err);
    ra_drop_all(ra, ra->seq); /* frees failed */
    ra->window = 0;
    ra->gen++;
}

/* Fetches blocks from ra->end up to target (at most the version's end),
 * within the bounds of the version and the store. */
static void ra_fill(mc__ra_t *ra, uint64_t target)
{
    mc_store_t *s = ra->s;
    target = min64(target, ra->size);
    while (ra->end < target) {
        uint64_t len = min64(MC__RA_BLOCK, ra->size - ra->end);
        if (ra->bytes + len > s->ra_max || s->ra_used + len > s->ra_total)
            return;
        ra_blk_t *b = malloc(sizeof(*b) + len);
        if (!b)
            return;
        *b = (ra_blk_t){.ra = ra, .off = ra->end, .len = len, .pending = 1};
        ra_blk_t **at = &ra->head;
        while (*at)
            at = &(*at)->next;
        *at = b;
        ra->end += len;
        ra->bytes += len;
        s->ra_used += len;
        ra->pending++;
        unsigned gen = ra->gen;
        mc__xfer(s, ra->rs, 0, b->off, b->buf, len, blk_done, b);
        if (ra->gen != gen)
            return; /* it failed at once and the stream was dropped */
    }
}

/* Whether reads of ob of n bytes go through read-ahead: on, a read small
 * against the window, and the replica a read would use not in memory this
 * process addresses. */
static int ra_wanted(mc_obj_t *ob, uint64_t n)
{
    mc_store_t *s = ob->s;
    if (s->ra_max < MC__RA_BLOCK || n * 2 > s->ra_max || !ob->rs || !ob->rs->n)
        return 0;
    for (uint32_t i = 0; i < ob->rs->n; i++) {
        const struct rrep *rep = &ob->rs->r[i];
        const mc__transport_t *tp;
        struct peer *peer;
        mc__tp_ep_t ep;
        if (rep->dead)
            continue;
        if (mc__peer_route(s, rep, &tp, &peer, &ep) < 0)
            return 1; /* not reachable yet (RDMA connecting): remote */
        return !(tp->flags & MC__TP_MEM);
    }
    return 0;
}

static mc__ra_t *ra_new(mc_obj_t *ob)
{
    mc__ra_t *ra = calloc(1, sizeof(*ra));
    if (!ra)
        return NULL;
    ra->s = ob->s;
    ra->obj = ob;
    ra->rs = ob->rs;
    ra->size = ob->st.size;
    LINK(&ob->s->ras, ra);
    ob->ra = ra;
    return ra;
}

void mc__ra_read(op_t *o)
{
    mc_obj_t *ob = o->obj;
    uint64_t size = ob->st.size;
    if (mc_obj_stale(ob))
        return mc__op_finish(o, -ESTALE);
    o->u64 = o->off < size ? min64(size - o->off, o->len) : 0;
    if (!o->u64 || !ra_wanted(ob, o->u64))
        return plain(o, ob->rs);
    mc__ra_t *ra = ob->ra ? ob->ra : ra_new(ob);
    if (!ra)
        return plain(o, ob->rs);
    uint64_t off = o->off, n = o->u64;
    int held = ra->head && off >= ra->head->off && off <= ra->end;
    if (!held)
        ra_release(ra, 0, 0, 0);   /* another reader's reads, in flight together */
    if (!held && off != ra->seq) { /* a seek */
        ra_drop_all(ra, off);
        ra->window = 0;
        ra->seq = off + n;
        return plain(o, ob->rs);
    }
    if (!held)
        ra_drop_all(ra, off);
    if (off + n > ra->seq)
        ra->seq = off + n;
    ra->window = ra->window ? min64(ra->window * 2, ob->s->ra_max) : MC__RA_BLOCK;
    ra_trim(ra, off);
    ra_fill(ra, off + n + ra->window);
    if (!ra_covers(ra, off, n))
        return plain(o, ob->rs); /* the bounds are reached */
    if (!ra_serve(ra, o)) {
        o->tmp = ra->waiting;
        ra->waiting = o;
    }
}

void mc__ra_unlend(op_t *o)
{
    if (!o->lent[0]) {
        free(o->buf); /* own_buf()'s, or NULL */
        return;
    }
    for (int i = 0; i < 2 && o->lent[i]; i++) {
        ra_blk_t *b = o->lent[i];
        mc__ra_t *ra = b->ra;
        o->lent[i] = NULL;
        b->lent--;
        ra->lent--;
        if (b->dropped && !b->lent && !b->pending)
            blk_free(b);
        ra_maybe_free(ra);
    }
}

void mc__ra_close(mc_obj_t *ob)
{
    mc__ra_t *ra = ob->ra;
    if (!ra)
        return;
    ob->ra = NULL;
    ra_release(ra, 0, UINT64_MAX, -ECANCELED); /* reads in flight at close: a caller's bug */
    ra_drop_all(ra, 0);
    ra->obj = NULL; /* the transfers in flight hold the replica set */
    ra->rs = NULL;
    ra_maybe_free(ra);
}

void mc__ra_free_all(mc_store_t *s)
{
    while (s->ras) {
        mc__ra_t *ra = s->ras;
        s->ras = ra->next;
        while (ra->head) {
            ra_blk_t *b = ra->head;
            ra->head = b->next;
            free(b);
        }
        if (ra->obj)
            ra->obj->ra = NULL;
        free(ra);
    }
    s->ra_used = 0;
}
