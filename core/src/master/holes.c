/*
 * holes.c - sparse files (see master.h): a version's layout may hold holes,
 * extents whose offset is MC__HOLE: bytes of the object that take no space
 * in any segment and read as zeros. A writer's range past the end of what
 * it reserved leaves a hole behind it; a range inside a hole gets space
 * (mc__master_reserve_range()); a punched range gives its space back. Every
 * replica of a version has its holes at the same places in the object, so
 * a repair copies the layout (mc__master_replica_alloc_like()).
 *
 * Holes start and end on the allocation unit, as every extent does, so a
 * split of an extent at an object offset is a split at an aligned segment
 * offset, which the allocator takes back.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "master/master_i.h"

/* A growing extent array. */
typedef struct xv {
    mc__extent_t *e;
    uint32_t n, cap;
} xv_t;

/* Appends [off, +len) (off MC__HOLE: a hole) to x, joining it with the last
 * extent when both are holes or contiguous in the segment. 0 or -ENOMEM. */
static int xv_push(xv_t *x, uint64_t off, uint64_t len)
{
    if (!len)
        return 0;
    if (x->n) {
        mc__extent_t *l = &x->e[x->n - 1];
        int hole = off == MC__HOLE, lhole = l->off == MC__HOLE;
        if (hole == lhole && (hole || l->off + l->len == off)) {
            l->len += len;
            return 0;
        }
    }
    if (x->n == x->cap) {
        uint32_t cap = x->cap ? x->cap * 2 : 8;
        mc__extent_t *e = realloc(x->e, sizeof(*e) * cap);
        if (!e)
            return -ENOMEM;
        x->e = e;
        x->cap = cap;
    }
    x->e[x->n++] = (mc__extent_t){off, len};
    return 0;
}

/* Allocates len bytes from s into out (and got, what to give back on
 * failure). Returns 0, -ENOSPC, -ENOMEM. */
static int alloc_into(mc__segment_t *s, uint64_t len, xv_t *out, xv_t *got)
{
    if (!s)
        return -ENOSPC; /* its node is gone: the writer drops it */
    while (len) {
        mc__extent_t tmp[64];
        uint64_t n = len;
        int k = mc__alloc_get(s->alloc, n, tmp, 64);
        if (k < 0)
            return k;
        for (int i = 0; i < k; i++) {
            if (xv_push(got, tmp[i].off, tmp[i].len) < 0) {
                mc__alloc_put(s->alloc, &tmp[i], k - i);
                return -ENOMEM;
            }
            if (xv_push(out, tmp[i].off, tmp[i].len) < 0)
                return -ENOMEM;
        }
        len -= n;
    }
    return 0;
}

/* The piece [from, to) of extent e, which starts at object offset a. */
static int push_piece(xv_t *out, const mc__extent_t *e, uint64_t a, uint64_t from, uint64_t to)
{
    return xv_push(out, e->off == MC__HOLE ? MC__HOLE : e->off + (from - a), to - from);
}

/*
 * Builds into out the layout of rep over [0, cap) (past rep's own end a
 * hole) with [lo, hi) given space (punch 0; new space also goes to got) or
 * made a hole (punch 1; the space it held goes to drop). Returns 0 or a
 * negative errno; the caller gives got back and frees the arrays.
 */
static int remap(mc__segment_t *s, const mc__replica_t *rep, uint64_t cap, uint64_t lo, uint64_t hi,
                 int punch, xv_t *out, xv_t *got, xv_t *drop)
{
    uint64_t at = 0;
    int rc = 0;
    for (uint32_t i = 0; i <= rep->n && at < cap && rc == 0; i++) {
        mc__extent_t e = i < rep->n ? rep->ext[i] : (mc__extent_t){MC__HOLE, cap - at};
        uint64_t a = at, b = at + e.len;
        at = b;
        uint64_t x = lo < a ? a : lo > b ? b : lo; /* [x, y): the part in [lo, hi) */
        uint64_t y = hi > b ? b : hi < x ? x : hi;
        rc = push_piece(out, &e, a, a, x);
        if (rc == 0 && x < y) {
            if (!punch && e.off == MC__HOLE)
                rc = alloc_into(s, y - x, out, got);
            else if (punch && e.off != MC__HOLE)
                rc = push_piece(drop, &e, a, x, y) < 0 ? -ENOMEM : xv_push(out, MC__HOLE, y - x);
            else
                rc = push_piece(out, &e, a, x, y);
        }
        if (rc == 0)
            rc = push_piece(out, &e, a, y, b);
    }
    return rc;
}

/* Bytes of holes of rep's layout over [0, cap) that lie in [lo, hi). */
static uint64_t hole_bytes(const mc__replica_t *rep, uint64_t cap, uint64_t lo, uint64_t hi)
{
    uint64_t at = 0, t = 0;
    for (uint32_t i = 0; i <= rep->n && at < cap; i++) {
        int hole = i == rep->n || rep->ext[i].off == MC__HOLE;
        uint64_t b = i < rep->n ? at + rep->ext[i].len : cap;
        uint64_t x = lo < at ? at : lo, y = hi > b ? b : hi;
        if (hole && x < y)
            t += y - x;
        at = b;
    }
    return t;
}

static void xv_drop(mc__segment_t *s, xv_t *out, xv_t *got, xv_t *drop)
{
    if (s)
        mc__extents_put(s->alloc, got->e, got->n);
    free(out->e);
    free(got->e);
    free(drop->e);
    *out = *got = *drop = (xv_t){0};
}

int mc__master_reserve_range(mc__master_t *m, mc__version_t *v, uint64_t off, uint64_t len,
                             int punch, uint64_t now)
{
    const uint64_t unit = m->o.align;
    if (v->nrep == 0)
        return -EIO; /* every segment it was placed on is gone */
    if (off > (uint64_t)INT64_MAX || len > (uint64_t)INT64_MAX - off)
        return -EFBIG;
    uint64_t end = off + len;
    uint64_t lo = punch ? (off + unit - 1) & ~(unit - 1) : off & ~(unit - 1);
    uint64_t hi = punch ? end & ~(unit - 1) : (end + unit - 1) & ~(unit - 1);
    uint64_t cap = (end + unit - 1) & ~(unit - 1);
    if (cap < mc__vcap(v))
        cap = mc__vcap(v);
    mc__extent_t one0;
    mc__replica_t r0 = mc__vrep_get(v, 0, &one0);
    uint64_t need = punch || lo >= hi ? 0 : hole_bytes(&r0, cap, lo, hi);
    if (!punch && lo <= mc__vcap(v) && need == (hi > mc__vcap(v) ? hi - mc__vcap(v) : 0))
        return mc__master_reserve(m, v, end, now); /* no hole to leave or fill */
    if (need > mc__master_total(m))
        return -ENOSPC;
    xv_t out[MC__MAX_REPLICAS] = {0}, got[MC__MAX_REPLICAS] = {0}, drop[MC__MAX_REPLICAS] = {0};
    uint32_t r = 0;
    int rc = 0;
    for (; r < v->nrep && rc == 0; r++) {
        mc__extent_t one;
        mc__replica_t rep = mc__vrep_get(v, r, &one);
        mc__segment_t *s = mc__master_seg(m, rep.seg);
        rc = remap(s, &rep, cap, lo, hi, punch, &out[r], &got[r], &drop[r]);
        for (int pass = 0; rc == -ENOSPC && mc__master_make_room(m, need, pass, now); pass++) {
            xv_drop(s, &out[r], &got[r], &drop[r]);
            rep = mc__vrep_get(v, r, &one);
            rc = remap(s, &rep, cap, lo, hi, punch, &out[r], &got[r], &drop[r]);
        }
    }
    if (rc == 0) /* the new layouts are arrays of their own */
        rc = mc__version_rep_array(v);
    for (uint32_t i = 0; i < r; i++) {
        mc__segment_t *s = mc__master_seg(m, mc__vrep_seg(v, i));
        if (rc < 0) {
            xv_drop(s, &out[i], &got[i], &drop[i]);
            continue;
        }
        if (s)
            mc__extents_put(s->alloc, drop[i].e, drop[i].n);
        mc__replica_t *a = mc__vrep_array(v); /* its replicas' extent arrays their own */
        mc__replica_free_ext(&a[i], NULL);
        a[i].ext = out[i].e; /* room for a power of two, >= 8 */
        a[i].n = out[i].n;
        free(got[i].e);
        free(drop[i].e);
    }
    if (rc == 0)
        mc__version_set_cap(v, cap);
    return rc;
}

int mc__master_replica_alloc_like(mc__master_t *m, uint32_t seg, const mc__replica_t *like,
                                  mc__replica_t *rep)
{
    memset(rep, 0, sizeof(*rep));
    rep->seg = seg;
    mc__segment_t *s = mc__master_seg(m, seg);
    xv_t out = {0}, got = {0}, drop = {0};
    int rc = 0;
    for (uint32_t i = 0; i < like->n && rc == 0; i++) {
        if (like->ext[i].off == MC__HOLE)
            rc = xv_push(&out, MC__HOLE, like->ext[i].len);
        else
            rc = alloc_into(s, like->ext[i].len, &out, &got);
    }
    if (rc < 0) {
        xv_drop(s, &out, &got, &drop);
        return rc;
    }
    free(got.e);
    rep->ext = out.e; /* room for a power of two, >= 8 */
    rep->n = out.n;
    return 0;
}
