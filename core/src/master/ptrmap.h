/*
 * ptrmap.h - a small open-addressing table from an address to a 64-bit
 * value: what the master knows of a few versions at a time without a field
 * in every version (records.c: the dirty versions' places in the dirty
 * array; master.c: the open handles of the versions that have some).
 *
 * Linear probing at most half full, deletion by moving back the entries
 * that probed past the freed slot (no tombstones). The table owns nothing
 * but its slots. Not thread-safe: one master owns its tables.
 */
#ifndef MC_PTRMAP_H
#define MC_PTRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct mc__ptrslot {
    const void *p; /* NULL: an empty slot */
    uint64_t val;
} mc__ptrslot_t;

typedef struct mc__ptrmap {
    mc__ptrslot_t *s; /* NULL while empty and never grown, or after reset */
    size_t n, cap;    /* entries, slots (a power of two, or 0) */
} mc__ptrmap_t;

/* p's slot (its value in ->val, which the caller may change), or NULL. */
mc__ptrslot_t *mc__ptrmap_find(const mc__ptrmap_t *t, const void *p);

/* Files p (not NULL, not in t) with val. Returns 0 or -ENOMEM (t is then
 * unchanged). */
int mc__ptrmap_add(mc__ptrmap_t *t, const void *p, uint64_t val);

/* Empties slot e (from mc__ptrmap_find() on t; the slots after it may
 * move, so earlier results are stale). */
void mc__ptrmap_del(mc__ptrmap_t *t, mc__ptrslot_t *e);

/* Frees t's slots: t is empty, and takes no memory until the next add. */
void mc__ptrmap_reset(mc__ptrmap_t *t);

#endif /* MC_PTRMAP_H */
