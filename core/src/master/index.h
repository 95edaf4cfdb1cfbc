/*
 * index.h - ordered map from byte-string keys to values that carry their
 * own keys (a B+tree of value pointers, with a hash table beside it for
 * exact keys).
 *
 * The index stores no key: a value's key is what the index's key callback
 * returns for it, and must not change while the value is in the index
 * (take it out, change the key, put it back). The index holds a pointer
 * per value in a leaf of the tree (48 bits of it, in 6 bytes) and one in
 * a slot of the hash table (8 bytes): about 16 bytes a value at a million
 * (leaves 80% to 95% full, the table 93%), up to 21 as the table's fill
 * goes down to 62.5% after it doubles.
 *
 * Keys are compared as unsigned bytes (memcmp, shorter first on a tie), so
 * the keys under a prefix form one contiguous run: seek to the prefix, walk
 * while keys still start with it. Looking up one key (mc__index_get()) is
 * O(1) expected; insert, replace and remove are O(log n); a seek plus k
 * steps is O(log n + k). Not thread-safe: the master logic owns one and
 * touches it from one thread.
 */
#ifndef MC_INDEX_H
#define MC_INDEX_H

#include <stddef.h>
#include <stdint.h>

typedef struct mc__index mc__index_t;

/* The key of a value in the index: returns it and stores its length in
 * *len. The bytes must stay as they are while the value is in the index. */
typedef const char *(*mc__index_key_cb)(const void *val, size_t *len);

/* A position in the index; valid until the index is next modified. */
typedef struct mc__index_iter {
    void *leaf; /* private */
    unsigned pos;
    mc__index_key_cb keyof;
} mc__index_iter_t;

/* Returns a new empty index whose values' keys keyof gives, or NULL when
 * out of memory. */
mc__index_t *mc__index_new(mc__index_key_cb keyof);

/* Frees the index; calls free_val(val) once on every value when free_val
 * is not NULL. It reads no value's key, so the values may be freed
 * already. ix may be NULL. */
void mc__index_free(mc__index_t *ix, void (*free_val)(void *));

/*
 * Makes sure the next n inserts of keys not present cannot fail, so that a
 * caller can take a value out, change its key and put it back without a
 * failure half-way. Returns 0 or -ENOMEM (the index unchanged apart from
 * spare memory).
 */
int mc__index_reserve(mc__index_t *ix, size_t n);

/*
 * Puts val (a non-NULL pointer below 2^48, as Linux's are) under its key.
 * If a value with that key was present, val takes its place: returns 1 and
 * stores that value in *old (when old is not NULL), which the caller owns
 * again. Returns 0 when inserted, -ENOMEM when out of memory (index
 * unchanged), -EINVAL for a pointer at or above 2^48.
 */
int mc__index_insert(mc__index_t *ix, void *val, void **old);

/*
 * Puts val in the place of old, a value in the index with the same key
 * (a key the caller just looked up): no key is compared but on the way
 * down the tree. Cannot fail: returns 0, or -EINVAL when old is not in the
 * index under val's key or val is not a pointer the index takes.
 */
int mc__index_replace(mc__index_t *ix, void *old, void *val);

/* Returns the value for key, or NULL when absent. */
void *mc__index_get(const mc__index_t *ix, const char *key, size_t len);

/* Removes key; returns its value (the caller owns it again), or NULL when
 * absent. */
void *mc__index_remove(mc__index_t *ix, const char *key, size_t len);

/*
 * A sample for approximate LRU: up to n values (into out) of entries that
 * lie together in the hash table's order, from a place that at picks (pass
 * a random number: the entries are then a random few). Costs O(n) steps.
 * Returns how many it gave (0 only for an empty index, or one so sparse
 * that 8 * n slots held none).
 */
size_t mc__index_sample(const mc__index_t *ix, uint64_t at, void **out, size_t n);

/* Number of keys. */
size_t mc__index_count(const mc__index_t *ix);

/*
 * Positions *it at the first key >= key (after == 0) or > key (after != 0).
 * key may be NULL (len 0) for the first key of the index.
 */
void mc__index_seek(const mc__index_t *ix, mc__index_iter_t *it, const char *key, size_t len,
                    int after);

/*
 * Returns 1 and the entry at *it (key, len and val may each be NULL), then
 * advances *it; returns 0 at the end. The key is the value's own (the key
 * callback's).
 */
int mc__index_next(mc__index_iter_t *it, const char **key, size_t *len, void **val);

/* Checks the index's structure (order, links, counts, the hash table):
 * returns 0, or -EINVAL naming nothing (for tests). O(n). */
int mc__index_check(const mc__index_t *ix);

#endif /* MC_INDEX_H */
