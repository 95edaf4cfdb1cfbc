/*
 * index.h - ordered map from byte-string keys to pointers (a skiplist, with
 * a hash table beside it for exact keys).
 *
 * Keys are compared as unsigned bytes (memcmp, shorter first on a tie), so
 * the keys under a prefix form one contiguous run: seek to the prefix, walk
 * while keys still start with it. Looking up one key (mc__index_get(), the
 * slot of a key present) is O(1) expected; insert and remove are O(log n)
 * expected; a seek plus k steps is O(log n + k). Not thread-safe: the master
 * logic owns one and touches it from one thread.
 */
#ifndef MC_INDEX_H
#define MC_INDEX_H

#include <stddef.h>

typedef struct mc__index mc__index_t;

/* The longest key the index holds (a node keeps its length in 16 bits);
 * the master's keys are at most MC_KEY_MAX. */
#define MC__INDEX_KEY_MAX 65535

/* A position in the index; valid until the index is next modified. */
typedef struct mc__index_iter {
    void *node; /* private */
} mc__index_iter_t;

/* Returns a new empty index, or NULL when out of memory. */
mc__index_t *mc__index_new(void);

/* Frees the index and its copies of the keys; calls free_val(val) on every
 * value when free_val is not NULL. */
void mc__index_free(mc__index_t *ix, void (*free_val)(void *));

/*
 * Maps key to val. The index keeps its own copy of the key. If the key was
 * present its value is replaced: returns 1 and stores the previous value in
 * *old (when old is not NULL). Returns 0 when inserted, -ENOMEM when out of
 * memory or the key is longer than MC__INDEX_KEY_MAX (index unchanged).
 */
int mc__index_insert(mc__index_t *ix, const char *key, size_t len, void *val, void **old);

/*
 * The slot of key's value, to read and write in one walk: key is inserted
 * with a NULL value when absent (*added 1, else 0), the index keeping its
 * own copy. A caller that leaves NULL in an added slot must remove the key
 * (mc__index_remove()); the slot is valid until the index is next
 * modified. Returns NULL when out of memory or for a key longer than
 * MC__INDEX_KEY_MAX (index unchanged).
 */
void **mc__index_slot(mc__index_t *ix, const char *key, size_t len, int *added);

/* Returns the value for key, or NULL when absent. */
void *mc__index_get(const mc__index_t *ix, const char *key, size_t len);

/* Removes key; returns its value, or NULL when absent. */
void *mc__index_remove(mc__index_t *ix, const char *key, size_t len);

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
 * advances *it; returns 0 at the end. The key pointer stays valid until that
 * key is removed.
 */
int mc__index_next(mc__index_iter_t *it, const char **key, size_t *len, void **val);

#endif /* MC_INDEX_H */
