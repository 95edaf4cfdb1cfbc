/*
 * writer_xfer.c - the transfers of a streaming writer (writer.c) in the
 * order they take effect: every transfer of a writer's ops goes through
 * mc__writer_xfer(), which counts those on their way (space is given back
 * only when none can land in it) and parks one that overlaps a transfer
 * still on its way until that one ended (see mc__writer_xfer()).
 */
#include "client/remote_i.h"

static void w_xfer_done(void *arg, int rc);

/* Starts o's transfer: to the replicas w has now (a parked one's set may
 * have been replaced meanwhile; its range's space has not moved). */
static void w_xfer_go(op_t *o)
{
    mc__xfer(o->s, o->w->rs, o->xq.write, o->xq.off, o->xq.buf, o->xq.len, w_xfer_done, o);
}

/* Whether transfers q and o touch the same bytes, one of them writing. */
static int w_overlap(const op_t *q, const op_t *o)
{
    return (q->xq.write || o->xq.write) && q->xq.len && o->xq.len &&
           q->xq.off < o->xq.off + o->xq.len && o->xq.off < q->xq.off + q->xq.len;
}

/* Whether o, on w->xq, must wait for a transfer asked for before it. */
static int w_blocked(const mc_writer_t *w, const op_t *o)
{
    for (const op_t *q = w->xq; q != o; q = q->xq.next)
        if (w_overlap(q, o))
            return 1;
    return 0;
}

/* Starts the parked transfers of w that no earlier one overlaps any more,
 * in order. One may end at once and change the list: look again. */
static void w_xfer_next(mc_writer_t *w)
{
    op_t *q = w->xq;
    while (w->xparked && q) {
        if (!q->xq.parked || w_blocked(w, q)) {
            q = q->xq.next;
            continue;
        }
        q->xq.parked = 0;
        w->xparked--;
        w_xfer_go(q);
        q = w->xq;
    }
}

static void w_xfer_done(void *arg, int rc)
{
    op_t *o = arg;
    mc_writer_t *w = o->w;
    op_t **pp = &w->xq;
    while (*pp != o)
        pp = &(*pp)->xq.next;
    *pp = o->xq.next;
    if (rc < 0 && o->kind != OP_W_READ) /* a read's only transfer reads */
        w->xfer_failed = 1;
    if (!--w->xfers) {
        w->xfer_hi = 0;
        mc__writer_wake(&w->xfer_wait);
    }
    w_xfer_next(w); /* o's op is not finished: w stays */
    o->xdone(o, rc);
}

/*
 * Every transfer of an op of w's goes through here, so that w knows when
 * none is on its way: space given back while one is could go to another
 * object, and the transfer land there after that object's bytes. And so
 * that transfers that touch the same bytes take effect in the order they
 * were asked for: one that overlaps a transfer still on its way (a write's
 * bytes or zeros, or a read, under or over a write) is parked until that
 * one ended. A node applies the requests of one connection in order, but
 * the bytes of a write need not reach it that way: a piece refused for an
 * old epoch is sent again after the master answers (xfer.c), possibly
 * after a later write granted the new epoch landed; a transfer that waited
 * for a shared-memory mapping is copied at once while one sent over TCP
 * before it is still on its way (peers.c).
 */
void mc__writer_xfer(op_t *o, int write, uint64_t off, char *buf, uint64_t len,
                     void (*done)(void *, int))
{
    mc_writer_t *w = o->w;
    o->xdone = done;
    w->xfers++;
    if (off + len > w->xfer_hi)
        w->xfer_hi = off + len;
    o->xq.next = NULL;
    o->xq.off = off;
    o->xq.len = len;
    o->xq.buf = buf;
    o->xq.write = write;
    o->xq.parked = 0;
    op_t **pp = &w->xq;
    for (; *pp; pp = &(*pp)->xq.next)
        if (w_overlap(*pp, o))
            o->xq.parked = 1;
    *pp = o;
    if (o->xq.parked) {
        w->xparked++;
        return;
    }
    w_xfer_go(o);
}

/* Whether a transfer on its way may land at or past off, in the space a
 * punch from off would give back. Without a truncation that shrank the
 * size below a write in flight, none does past a write's gap (the writes
 * before it end at its start). */
int mc__writer_landing(const mc_writer_t *w, uint64_t off)
{
    return w->xfers && w->xfer_hi > off;
}
