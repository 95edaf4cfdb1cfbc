/*
 * slab.h - small objects of many sizes packed without malloc's per-chunk
 * header and rounding: the master's versions (issue 14: a million small
 * objects, each a version of about 190 bytes that malloc would give a
 * 208-byte chunk).
 *
 * Sizes are rounded up to 8 bytes; each size has its own blocks of 1 MiB
 * (mapped from the kernel, aligned to their size so that an object finds
 * its block by its address), handed out front to back and reused through a
 * free list. A block whose last object goes is returned to the kernel
 * unless it is the only one of its size with room. Not thread-safe: one
 * master owns one slab.
 */
#ifndef MC_SLAB_H
#define MC_SLAB_H

#include <stddef.h>

typedef struct mc__slab mc__slab_t;

/* The largest object a slab holds; larger ones are the caller's to
 * malloc. */
#define MC__SLAB_MAX 1024

/* Returns a new empty slab, or NULL when out of memory. */
mc__slab_t *mc__slab_new(void);

/* Returns every block to the kernel, with whatever objects are still in
 * them. s may be NULL. */
void mc__slab_free_all(mc__slab_t *s);

/* Returns size bytes (1..MC__SLAB_MAX), zeroed and 8-byte aligned, or NULL
 * when out of memory (or for a size out of range). */
void *mc__slab_alloc(mc__slab_t *s, size_t size);

/* Gives back an object from mc__slab_alloc() of s. */
void mc__slab_free(mc__slab_t *s, void *p);

/* Blocks the slab holds now (for tests). */
size_t mc__slab_blocks(const mc__slab_t *s);

#endif /* MC_SLAB_H */
