/*
 * alloc.h - the space allocator of one segment.
 *
 * Hands out byte ranges (extents) of a region [0, size) that someone else
 * owns (the memory itself lives elsewhere; this only does the bookkeeping).
 * Lengths are rounded up to the allocator's alignment. A request that cannot
 * be met by one free extent is met by several (largest first), so an object
 * may span several extents; when the free space in all cannot meet it, the
 * call fails and allocates nothing. Freed extents coalesce with their
 * neighbours. Not thread-safe.
 */
#ifndef MC_ALLOC_H
#define MC_ALLOC_H

#include <stdint.h>

typedef struct mc__extent {
    uint64_t off;
    uint64_t len;
} mc__extent_t;

/* The off of an extent of an object's layout that is a hole: len bytes of
 * the object that take no space in any segment and read as zeros (sparse
 * files). Never handed to or taken from an allocator. */
#define MC__HOLE UINT64_MAX

typedef struct mc__alloc mc__alloc_t;

/*
 * Creates an allocator for size bytes with the given alignment (a power of
 * two, at least 4). size is rounded down to the alignment. Returns 0 and sets
 * *out, or -EINVAL (bad alignment, size smaller than one unit) or -ENOMEM.
 * Free it with mc__alloc_destroy().
 */
int mc__alloc_create(mc__alloc_t **out, uint64_t size, uint64_t align);

void mc__alloc_destroy(mc__alloc_t *a);

/*
 * Allocates len bytes (len > 0, rounded up to the alignment) as at most max
 * extents, written to out[0..n). Prefers a single extent (best fit: the
 * smallest free extent that holds it). Returns n >= 1, or -ENOSPC when the
 * space cannot be found in max extents (nothing allocated), -EINVAL for
 * len == 0 or max < 1.
 */
int mc__alloc_get(mc__alloc_t *a, uint64_t len, mc__extent_t *out, int max);

/* Returns n extents obtained from mc__alloc_get() (each exactly as handed
 * out, or any aligned sub-range of one) to the free space. */
void mc__alloc_put(mc__alloc_t *a, const mc__extent_t *ext, int n);

/*
 * Takes exactly [off, off + len) out of the free space (a master rebuilding
 * what a node reports it holds). Returns 0, -EBUSY (some of it is not free),
 * -EINVAL (empty, misaligned or outside the region), -ENOMEM.
 */
int mc__alloc_take(mc__alloc_t *a, uint64_t off, uint64_t len);

/* Rounds len up to the allocator's alignment. */
uint64_t mc__alloc_round(const mc__alloc_t *a, uint64_t len);

uint64_t mc__alloc_size(const mc__alloc_t *a);    /* usable bytes */
uint64_t mc__alloc_used(const mc__alloc_t *a);    /* bytes handed out */
uint64_t mc__alloc_largest(const mc__alloc_t *a); /* largest free extent */
int mc__alloc_free_extents(const mc__alloc_t *a); /* count of free extents */

#endif /* MC_ALLOC_H */
