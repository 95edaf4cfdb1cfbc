/*
 * view.c - mc_obj_view(): the bytes of an open version read in place when
 * they lie in memory this process addresses: its own segment (the local
 * transport) or a co-located node's segment mapped over shared memory (the
 * shm transport, once mapped). The version is pinned while it is open, and
 * a published version's bytes never change, so the pointer stays good
 * until mc_obj_close(), unless the segment is mounted again at the master
 * (it dropped it: wire/proto.h, "Reads"), after which mc_obj_stale() says
 * so. A hole of a sparse file is viewed as zeros.
 * mc_obj_seek() and mc_writer_seek() find a sparse file's holes and bytes.
 */
#include <errno.h>

#include "client/remote_i.h"
#include "transport/transport.h"

/* What a hole of a sparse file reads as (never written: in .bss). */
static char zeros[1 << 20];

int mc_obj_stale(const mc_obj_t *o)
{
    if (__atomic_load_n(&o->s->master_lost, __ATOMIC_SEQ_CST) != o->session)
        return 1;
    for (uint32_t i = 0; i < MC__MAX_REPLICAS; i++) {
        const _Atomic uint64_t *m = __atomic_load_n(&o->viewed[i].mount, __ATOMIC_ACQUIRE);
        if (!m)
            break;
        if (mc__shm_read_ok(m, o->viewed[i].epoch) < 0)
            return 1; /* mounted again: its space may hold another object */
    }
    return 0;
}

/* Notes that o's bytes were viewed in a segment whose last mount's epoch
 * is at mount, for a replica of epoch (mc_obj_stale()). */
static void viewed(mc_obj_t *o, const _Atomic uint64_t *mount, uint64_t epoch)
{
    for (uint32_t i = 0; mount && i < MC__MAX_REPLICAS; i++) {
        if (o->viewed[i].mount == mount && o->viewed[i].epoch == epoch)
            return;
        if (!o->viewed[i].mount) {
            o->viewed[i].epoch = epoch;
            __atomic_store_n(&o->viewed[i].mount, mount, __ATOMIC_RELEASE);
            return;
        }
    }
}

int64_t mc_obj_view(mc_obj_t *o, uint64_t off, size_t len, const void **p)
{
    mc_store_t *s = o->s;
    if (!s->rm)
        return -ECANCELED; /* the store is closing */
    if (mc_obj_stale(o))
        return -ESTALE;
    if (off >= o->st.size || !len)
        return 0;
    if (len > o->st.size - off)
        len = (size_t)(o->st.size - off);
    const mc__rset_t *rs = o->rs;
    for (uint32_t i = 0; rs && i < rs->n; i++) {
        const struct rrep *rep = &rs->r[i];
        const mc__transport_t *tp;
        struct peer *peer;
        mc__tp_ep_t ep;
        if (rep->dead || mc__peer_route(s, rep, &tp, &peer, &ep) < 0 || !(tp->flags & MC__TP_MEM))
            continue;
        /* Mounted again since the replica was handed out: other bytes. */
        if (mc__shm_read_ok(ep.mem.mount, rep->epoch) < 0)
            continue;
        uint64_t at = 0; /* the bytes are the extents, in order */
        for (uint32_t e = 0; e < rep->next; e++) {
            const mc__extent_t *x = &rep->ext[e];
            if (off >= at + x->len) {
                at += x->len;
                continue;
            }
            uint64_t in = off - at;
            uint64_t n = x->len - in < len ? x->len - in : len;
            if (x->off == MC__HOLE) { /* a sparse file's hole: zeros no segment holds */
                *p = zeros;
                return (int64_t)(n < sizeof(zeros) ? n : sizeof(zeros));
            }
            if (x->off > ep.mem.size || in + n > ep.mem.size - x->off)
                return -EIO;
            *p = (const char *)ep.mem.base + x->off + in;
            viewed(o, ep.mem.mount, rep->epoch);
            mc__count((uint64_t *)((char *)&s->st + tp->ops_stat),
                      (uint64_t *)((char *)&s->st + tp->bytes_stat), n);
            return (int64_t)n;
        }
        return -EIO; /* the extents end before the size */
    }
    return -EXDEV;
}

/* The first offset at or after off, before size, in a hole (hole 1; size
 * itself counts as one) or in bytes (hole 0) of rs; -ENXIO if none. */
static int64_t rset_seek(const mc__rset_t *rs, uint64_t size, uint64_t off, int hole)
{
    uint64_t a, b;
    if (off >= size)
        return -ENXIO;
    while (mc__rset_run(rs, off, &a, &b) != !!hole) {
        if (b >= size)
            return hole ? (int64_t)size : -ENXIO;
        off = b;
    }
    return (int64_t)off;
}

int64_t mc_obj_seek(const mc_obj_t *o, uint64_t off, int hole)
{
    return rset_seek(o->rs, o->st.size, off, hole);
}

int64_t mc_writer_seek(const mc_writer_t *w, uint64_t off, int hole)
{
    return rset_seek(w->rs, w->size, off, hole);
}
