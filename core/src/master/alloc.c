/*
 * alloc.c - the space allocator of one segment (see alloc.h).
 *
 * The free space is a dynamic array of extents sorted by offset, always fully
 * coalesced: no two free extents touch, so the array is exactly the list of
 * maximal free runs. With n free extents:
 *
 *   - mc__alloc_put: a binary search finds the neighbours (O(log n)); merging
 *     with them is O(1); when the extent touches neither, or bridges both, one
 *     entry is inserted or removed with a memmove (O(n) bytes moved, a single
 *     cheap memmove in practice; amortized O(1) array growth).
 *   - mc__alloc_get: best fit scans every free extent (O(n)). When no extent
 *     holds the request, the max largest extents are selected with a bounded
 *     min-heap built in the caller's out[] array (O(n log max)), then the
 *     taken ones are removed in one compaction pass (O(n + k log n)).
 *   - mc__alloc_largest: O(n) scan; the other accessors are O(1).
 *
 * An extent is always taken from the low end of a free extent, so a split
 * leaves the remainder in place and the array stays sorted without moves.
 *
 * Misuse that would make two owners share bytes (returning an extent that
 * overlaps free space, or one outside the region or misaligned) is caught
 * cheaply in mc__alloc_put and aborts with a message: silently continuing
 * would hand the same bytes out twice. Running out of memory while growing
 * the free array in mc__alloc_put aborts too, since put cannot fail.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/alloc.h"

struct mc__alloc {
    uint64_t size;      /* usable bytes, a multiple of align */
    uint64_t align;     /* power of two, at least 4 */
    uint64_t used;      /* bytes handed out */
    mc__extent_t *free; /* free extents sorted by off, none touching */
    size_t nfree;       /* entries in use in free[] */
    size_t cap;         /* entries allocated in free[] */
};

#define INITIAL_CAP 16

static void die(const char *what, uint64_t off, uint64_t len)
{
    fprintf(stderr, "mc__alloc_put: %s: extent [%" PRIu64 ", +%" PRIu64 ")\n", what, off, len);
    abort();
}

/* Returns the index of the first free extent whose off is greater than off
 * (nfree when there is none). */
static size_t upper_bound(const mc__alloc_t *a, uint64_t off)
{
    size_t lo = 0, hi = a->nfree;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a->free[mid].off <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int mc__alloc_create(mc__alloc_t **out, uint64_t size, uint64_t align)
{
    mc__alloc_t *a;

    if (!out || align < 4 || (align & (align - 1)) != 0)
        return -EINVAL;
    size &= ~(align - 1);
    if (size == 0)
        return -EINVAL;

    a = calloc(1, sizeof(*a));
    if (!a)
        return -ENOMEM;
    a->free = malloc(INITIAL_CAP * sizeof(*a->free));
    if (!a->free) {
        free(a);
        return -ENOMEM;
    }
    a->cap = INITIAL_CAP;
    a->size = size;
    a->align = align;
    a->free[0] = (mc__extent_t){.off = 0, .len = size};
    a->nfree = 1;
    *out = a;
    return 0;
}

void mc__alloc_destroy(mc__alloc_t *a)
{
    if (!a)
        return;
    free(a->free);
    free(a);
}

uint64_t mc__alloc_round(const mc__alloc_t *a, uint64_t len)
{
    return (len + a->align - 1) & ~(a->align - 1);
}

uint64_t mc__alloc_size(const mc__alloc_t *a)
{
    return a->size;
}

uint64_t mc__alloc_used(const mc__alloc_t *a)
{
    return a->used;
}

uint64_t mc__alloc_largest(const mc__alloc_t *a)
{
    uint64_t best = 0;

    for (size_t i = 0; i < a->nfree; i++)
        if (a->free[i].len > best)
            best = a->free[i].len;
    return best;
}

int mc__alloc_free_extents(const mc__alloc_t *a)
{
    return a->nfree > INT_MAX ? INT_MAX : (int)a->nfree;
}

/* Removes free[i] by shifting the entries after it down. */
static void remove_at(mc__alloc_t *a, size_t i)
{
    memmove(&a->free[i], &a->free[i + 1], (a->nfree - i - 1) * sizeof(*a->free));
    a->nfree--;
}

/* Single-extent path: the smallest free extent that holds len (the lowest
 * offset among equals). Returns its index, or nfree when none holds it. */
static size_t best_fit(const mc__alloc_t *a, uint64_t len)
{
    size_t best = a->nfree;

    for (size_t i = 0; i < a->nfree; i++) {
        uint64_t l = a->free[i].len;
        if (l >= len && (best == a->nfree || l < a->free[best].len)) {
            best = i;
            if (l == len)
                break;
        }
    }
    return best;
}

/* Heap order for picking the largest extents: x is "less" than y when it is
 * shorter, or as long but at a higher offset, so that among equals the lower
 * offsets are kept. The heap root is the least kept extent. */
static int ext_less(const mc__extent_t *x, const mc__extent_t *y)
{
    return x->len < y->len || (x->len == y->len && x->off > y->off);
}

static void sift_down(mc__extent_t *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && ext_less(&h[l], &h[m]))
            m = l;
        if (r < n && ext_less(&h[r], &h[m]))
            m = r;
        if (m == i)
            return;
        mc__extent_t t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void sift_up(mc__extent_t *h, int i)
{
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!ext_less(&h[i], &h[p]))
            return;
        mc__extent_t t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

/*
 * Multi-extent path, used when no single free extent holds len. Selects the
 * max largest free extents into out[] (a bounded min-heap), sorts them
 * largest first, and takes the shortest prefix that covers len, splitting the
 * last one. Returns the number of extents, or -ENOSPC (state unchanged; out[]
 * is used as scratch).
 */
static int gather(mc__alloc_t *a, uint64_t len, mc__extent_t *out, int max)
{
    int n = 0, k;
    uint64_t sum = 0;

    for (size_t i = 0; i < a->nfree; i++) {
        if (n < max) {
            out[n] = a->free[i];
            sift_up(out, n++);
        } else if (ext_less(&out[0], &a->free[i])) {
            out[0] = a->free[i];
            sift_down(out, n, 0);
        }
    }
    /* Heap sort with a min-heap leaves out[] largest first. */
    for (int end = n - 1; end > 0; end--) {
        mc__extent_t t = out[0];
        out[0] = out[end];
        out[end] = t;
        sift_down(out, end, 0);
    }
    for (k = 0; k < n && sum < len; k++)
        sum += out[k].len;
    if (sum < len)
        return -ENOSPC;

    /* Mark the wholly taken extents empty and trim the last one in place,
     * then squeeze the empty entries out in one pass. */
    for (int j = 0; j < k; j++) {
        size_t i = upper_bound(a, out[j].off) - 1;
        if (j == k - 1 && sum > len) {
            uint64_t rest = sum - len;
            out[j].len -= rest;
            a->free[i].off += out[j].len;
            a->free[i].len = rest;
        } else {
            a->free[i].len = 0;
        }
    }
    size_t w = 0;
    for (size_t i = 0; i < a->nfree; i++)
        if (a->free[i].len != 0)
            a->free[w++] = a->free[i];
    a->nfree = w;
    return k;
}

int mc__alloc_get(mc__alloc_t *a, uint64_t len, mc__extent_t *out, int max)
{
    size_t i;
    int n;

    if (len == 0 || max < 1 || !out)
        return -EINVAL;
    /* Checked before rounding so that a huge len cannot wrap around. */
    if (len > a->size - a->used)
        return -ENOSPC;
    len = mc__alloc_round(a, len);
    if (len > a->size - a->used)
        return -ENOSPC;

    i = best_fit(a, len);
    if (i < a->nfree) {
        mc__extent_t *f = &a->free[i];
        out[0] = (mc__extent_t){.off = f->off, .len = len};
        if (f->len == len) {
            remove_at(a, i);
        } else {
            f->off += len;
            f->len -= len;
        }
        a->used += len;
        return 1;
    }
    n = gather(a, len, out, max);
    if (n > 0)
        a->used += len;
    return n;
}

/* Makes room for one more free extent; put cannot report failure. */
static void reserve_one(mc__alloc_t *a)
{
    mc__extent_t *p;
    size_t cap;

    if (a->nfree < a->cap)
        return;
    cap = a->cap * 2;
    p = realloc(a->free, cap * sizeof(*p));
    if (!p) {
        fprintf(stderr, "mc__alloc_put: out of memory growing the free list\n");
        abort();
    }
    a->free = p;
    a->cap = cap;
}

static void put_one(mc__alloc_t *a, uint64_t off, uint64_t len)
{
    uint64_t mask = a->align - 1;
    size_t i;
    mc__extent_t *prev, *next;
    int join_prev, join_next;

    if (len == 0 || ((off | len) & mask) != 0)
        die("misaligned or empty", off, len);
    if (off >= a->size || len > a->size - off)
        die("outside the region", off, len);
    if (len > a->used)
        die("more than is handed out", off, len);

    /* free[i] is the first free extent after off; free[i - 1] the last at or
     * before it. Either overlapping the new extent means a double put. */
    i = upper_bound(a, off);
    prev = i > 0 ? &a->free[i - 1] : NULL;
    next = i < a->nfree ? &a->free[i] : NULL;
    if (prev && prev->off + prev->len > off)
        die("overlaps free space", off, len);
    if (next && off + len > next->off)
        die("overlaps free space", off, len);

    join_prev = prev && prev->off + prev->len == off;
    join_next = next && off + len == next->off;
    if (join_prev && join_next) {
        prev->len += len + next->len;
        remove_at(a, i);
    } else if (join_prev) {
        prev->len += len;
    } else if (join_next) {
        next->off = off;
        next->len += len;
    } else {
        reserve_one(a);
        memmove(&a->free[i + 1], &a->free[i], (a->nfree - i) * sizeof(*a->free));
        a->free[i] = (mc__extent_t){.off = off, .len = len};
        a->nfree++;
    }
    a->used -= len;
}

int mc__alloc_take(mc__alloc_t *a, uint64_t off, uint64_t len)
{
    if (len == 0 || ((off | len) & (a->align - 1)) != 0 || off >= a->size || len > a->size - off)
        return -EINVAL;
    size_t i = upper_bound(a, off);
    if (i == 0)
        return -EBUSY;
    mc__extent_t *f = &a->free[i - 1];
    if (f->off + f->len < off + len)
        return -EBUSY; /* not all of it is free */
    uint64_t head = off - f->off, tail = f->off + f->len - (off + len);
    if (head && tail) {
        if (a->nfree == a->cap) {
            mc__extent_t *p = realloc(a->free, a->cap * 2 * sizeof(*p));
            if (!p)
                return -ENOMEM;
            a->free = p;
            a->cap *= 2;
            f = &a->free[i - 1];
        }
        memmove(&a->free[i + 1], &a->free[i], (a->nfree - i) * sizeof(*a->free));
        a->free[i] = (mc__extent_t){.off = off + len, .len = tail};
        a->nfree++;
        f->len = head;
    } else if (head) {
        f->len = head;
    } else if (tail) {
        f->off = off + len;
        f->len = tail;
    } else {
        remove_at(a, i - 1);
    }
    a->used += len;
    return 0;
}

void mc__alloc_put(mc__alloc_t *a, const mc__extent_t *ext, int n)
{
    for (int j = 0; j < n; j++)
        put_one(a, ext[j].off, ext[j].len);
}
