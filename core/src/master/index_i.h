/*
 * index_i.h - the hash table beside the ordered index (index_hash.c), shared
 * by index.c and index_hash.c only.
 *
 * Open addressing with Robin Hood displacement over an array of 8-byte
 * slots: each slot holds a value pointer (its low 48 bits), how far the
 * value sits from its home slot (8 bits, 255 meaning "255 or more": then it
 * is computed from the key) and 8 bits of the key's hash, so that a probe
 * looks at the value's key only when those 8 bits match. The table keeps
 * no key: a value's key is what the index's key callback says.
 */
#ifndef MC_INDEX_I_H
#define MC_INDEX_I_H

#include <stddef.h>
#include <stdint.h>

#include "master/index.h"

typedef struct mc__ihash {
    uint64_t *slot; /* cap slots; 0: empty */
    size_t cap;     /* at least HASH_MIN */
    size_t count;
    mc__index_key_cb keyof;
} mc__ihash_t;

/* The 64-bit hash of key[0..len). */
uint64_t mc__ihash_key(const char *key, size_t len);

/* Makes an empty table. Returns 0 or -ENOMEM. */
int mc__ihash_init(mc__ihash_t *h, mc__index_key_cb keyof);

/* Frees the table's array (not the values). */
void mc__ihash_fini(mc__ihash_t *h);

/* Makes sure n more values fit (growing the table when it would pass its
 * load limit). Returns 0, or -ENOMEM when they would not fit at all. */
int mc__ihash_reserve(mc__ihash_t *h, size_t n);

/* The slot index of key (its hash hv), or -1 when absent. */
long mc__ihash_find(const mc__ihash_t *h, const char *key, size_t len, uint64_t hv);

/* The slot index of val itself (its key hashing to hv), or -1: probes
 * compare pointers, reading no key. */
long mc__ihash_find_ptr(const mc__ihash_t *h, const void *val, uint64_t hv);

/* The value in slot i (a slot mc__ihash_find() returned). */
static inline void *mc__ihash_val(const mc__ihash_t *h, long i)
{
    return (void *)(uintptr_t)(h->slot[i] & ((1ULL << 48) - 1));
}

/* Puts val in slot i in place of the value there (same key). */
static inline void mc__ihash_set(mc__ihash_t *h, long i, void *val)
{
    h->slot[i] = (h->slot[i] & ~((1ULL << 48) - 1)) | (uint64_t)(uintptr_t)val;
}

/* Adds val (its key hashing to hv, absent from the table; room reserved
 * with mc__ihash_reserve()). */
void mc__ihash_add(mc__ihash_t *h, void *val, uint64_t hv);

/* Copies up to n values into out, taken from the slots in order from slot
 * at % cap on (wrapping), looking at no more than 8 * n slots (and at most
 * every slot once). Returns how many it copied. */
size_t mc__ihash_sample(const mc__ihash_t *h, uint64_t at, void **out, size_t n);

/* Empties slot i, shifting back the values that follow it; may shrink a
 * table left mostly empty. */
void mc__ihash_del(mc__ihash_t *h, long i);

#endif /* MC_INDEX_I_H */
