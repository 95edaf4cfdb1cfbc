/*
 * index.c - the ordered key index: a skiplist of byte-string keys.
 *
 * Each node is one allocation: the node header, its tower of forward
 * pointers (1..INDEX_MAX_LEVEL of them), then the key bytes. A node never
 * moves once inserted, so a key pointer handed out by mc__index_next() stays
 * valid until that key is removed. Node heights come from a per-index
 * xorshift generator with a fixed seed, so the shape of an index depends only
 * on the sequence of operations applied to it (reproducible in tests).
 * Promotion probability is 1/4, which keeps the expected tower at 4/3
 * pointers per node.
 *
 * Every node is also in a hash table of its key, for the lookups of one
 * exact key (mc__index_get(), and mc__index_slot() of a key present: a
 * commit replacing a version): one or two compares where a walk takes a
 * dozen. The table doubles when it holds more nodes than buckets; a table
 * that cannot grow (out of memory) keeps working with longer chains.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "master/index.h"

#define INDEX_MAX_LEVEL 32
#define INDEX_SEED 0x9e3779b97f4a7c15ULL
#define HASH_MIN 64 /* buckets of a new index's table (a power of two) */

/* 24 bytes before the tower: a million keys are a million nodes. */
struct index_node {
    void *val;
    struct index_node *hnext;  /* in its bucket of the hash table */
    uint32_t hash;             /* key_hash() of the key, its low 32 bits */
    uint16_t len;              /* key length in bytes, <= MC__INDEX_KEY_MAX */
    unsigned char level;       /* entries in next[], 1..INDEX_MAX_LEVEL */
    struct index_node *next[]; /* then the len key bytes */
};

struct mc__index {
    size_t count;
    uint64_t rng; /* xorshift64 state, never 0 */
    int level;    /* levels in use: head[level..] are all NULL */
    struct index_node *head[INDEX_MAX_LEVEL];
    struct index_node **tab; /* the hash table: nbucket chains */
    size_t nbucket;          /* a power of two */
};

static char *node_key(const struct index_node *n)
{
    return (char *)&n->next[n->level];
}

/* x's bytes in memory order as an integer: two such words order as their
 * bytes do. */
static uint64_t word_be(const unsigned char *p)
{
    uint64_t x;

    memcpy(&x, p, sizeof(x));
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    x = __builtin_bswap64(x);
#endif
    return x;
}

/*
 * Compares n's key with key/len: <0, 0, >0 as n's key sorts before, equal to
 * or after it (memcmp's order, shorter first on a tie). Eight bytes at a
 * time, inline: every step of a walk compares, keys under one prefix share
 * their first bytes, and a call of memcmp per node cost more than the
 * comparing. key may be NULL when len is 0.
 */
static int node_cmp(const struct index_node *n, const char *key, size_t len)
{
    const unsigned char *a = (const unsigned char *)node_key(n);
    const unsigned char *b = (const unsigned char *)key;
    size_t min = n->len < len ? n->len : len, i = 0;

    for (; i + 8 <= min; i += 8) {
        uint64_t x = word_be(a + i), y = word_be(b + i);

        if (x != y)
            return x < y ? -1 : 1;
    }
    for (; i < min; i++)
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    return (n->len > len) - (n->len < len);
}

/* A 32-bit hash of key[0..len), eight bytes at a time. */
static uint32_t key_hash(const char *key, size_t len)
{
    const unsigned char *p = (const unsigned char *)key;
    uint64_t h = INDEX_SEED ^ len;
    size_t i = 0;

    for (; i + 8 <= len; i += 8) {
        uint64_t w;

        memcpy(&w, p + i, sizeof(w));
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    if (i < len) {
        uint64_t w = 0;

        memcpy(&w, p + i, len - i);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
    }
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return (uint32_t)(h ^ (h >> 33));
}

/* The node of key (its hash h), or NULL. */
static struct index_node *hash_find(const mc__index_t *ix, const char *key, size_t len, uint32_t h)
{
    for (struct index_node *n = ix->tab[h & (ix->nbucket - 1)]; n; n = n->hnext)
        if (n->hash == h && n->len == len && (!len || memcmp(node_key(n), key, len) == 0))
            return n;
    return NULL;
}

/* Puts n in the hash table, doubling it first when it holds as many nodes
 * as buckets (and memory allows). */
static void hash_add(mc__index_t *ix, struct index_node *n)
{
    if (ix->count >= ix->nbucket) {
        size_t nb = ix->nbucket * 2;
        struct index_node **tab = calloc(nb, sizeof(*tab));

        if (tab) {
            for (size_t b = 0; b < ix->nbucket; b++) {
                for (struct index_node *e = ix->tab[b], *next; e; e = next) {
                    next = e->hnext;
                    e->hnext = tab[e->hash & (nb - 1)];
                    tab[e->hash & (nb - 1)] = e;
                }
            }
            free(ix->tab);
            ix->tab = tab;
            ix->nbucket = nb;
        }
    }
    struct index_node **b = &ix->tab[n->hash & (ix->nbucket - 1)];

    n->hnext = *b;
    *b = n;
}

/* Takes n out of the hash table. */
static void hash_del(mc__index_t *ix, struct index_node *n)
{
    struct index_node **pp = &ix->tab[n->hash & (ix->nbucket - 1)];

    while (*pp != n)
        pp = &(*pp)->hnext;
    *pp = n->hnext;
}

/* Draws a tower height: 1, then one more level with probability 1/4 each,
 * two random bits per step. 64 bits give exactly the 32 levels we allow. */
static int random_level(mc__index_t *ix)
{
    uint64_t x = ix->rng;
    int level = 1;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    ix->rng = x;
    while (level < INDEX_MAX_LEVEL && (x & 3) == 0) {
        level++;
        x >>= 2;
    }
    return level;
}

/*
 * Finds the first node whose key is >= key (after == 0) or > key (after != 0)
 * and returns it, or NULL when there is none. When update is not NULL,
 * update[i] receives, for each level i in use, the forward array whose slot i
 * points at or past that node: the links an insert or remove must rewrite.
 * Only callers that own a mutable index pass update.
 */
static struct index_node *find(const mc__index_t *ix, const char *key, size_t len, int after,
                               struct index_node **update[])
{
    struct index_node **fwd = (struct index_node **)ix->head;
    struct index_node *stop = NULL; /* the last node found at or past key */

    for (int i = ix->level - 1; i >= 0; i--) {
        struct index_node *n;

        /* A level down often starts at the node that ended the level
         * above: it is known to be at or past key, so it is not compared
         * again. */
        while ((n = fwd[i]) != NULL && n != stop) {
            int c = node_cmp(n, key, len);

            if (c > 0 || (c == 0 && !after)) {
                stop = n;
                break;
            }
            fwd = n->next;
        }
        if (update)
            update[i] = fwd;
    }
    return fwd[0];
}

/* Returns a new empty index, or NULL when out of memory. Free it with
 * mc__index_free(). */
mc__index_t *mc__index_new(void)
{
    mc__index_t *ix = calloc(1, sizeof(*ix));

    if (!ix)
        return NULL;
    ix->rng = INDEX_SEED;
    ix->nbucket = HASH_MIN;
    ix->tab = calloc(ix->nbucket, sizeof(*ix->tab));
    if (!ix->tab) {
        free(ix);
        return NULL;
    }
    return ix;
}

/* Frees the index and its copies of the keys; calls free_val(val) exactly
 * once on every value when free_val is not NULL. ix may be NULL. */
void mc__index_free(mc__index_t *ix, void (*free_val)(void *))
{
    struct index_node *n, *next;

    if (!ix)
        return;
    for (n = ix->head[0]; n; n = next) {
        next = n->next[0];
        if (free_val)
            free_val(n->val);
        free(n);
    }
    free(ix->tab);
    free(ix);
}

/*
 * The slot of key's value, for the caller to read and write: key is inserted
 * with a NULL value when absent (*added 1, else 0), and the index keeps its
 * own copy of the key. A caller that leaves NULL in an added slot removes
 * the key again. Returns NULL when out of memory, or for a key longer than
 * MC__INDEX_KEY_MAX (index unchanged).
 */
void **mc__index_slot(mc__index_t *ix, const char *key, size_t len, int *added)
{
    struct index_node **update[INDEX_MAX_LEVEL];
    uint32_t h;
    struct index_node *n;

    *added = 0;
    if (len > MC__INDEX_KEY_MAX)
        return NULL;
    h = key_hash(key, len);
    n = hash_find(ix, key, len, h);
    size_t hdr;
    uint64_t saved_rng = ix->rng;
    int level;

    if (n)
        return &n->val;

    find(ix, key, len, 0, update);
    level = random_level(ix);
    hdr = sizeof(*n) + (size_t)level * sizeof(n->next[0]);
    n = len <= SIZE_MAX - hdr ? malloc(hdr + len) : NULL;
    if (!n) {
        ix->rng = saved_rng; /* leave no trace, not even in the next height */
        return NULL;
    }
    n->val = NULL;
    n->len = (uint16_t)len;
    n->hash = h;
    n->level = (unsigned char)level;
    if (len)
        memcpy(node_key(n), key, len);

    for (int i = ix->level; i < level; i++)
        update[i] = ix->head;
    if (level > ix->level)
        ix->level = level;
    for (int i = 0; i < level; i++) {
        n->next[i] = update[i][i];
        update[i][i] = n;
    }
    hash_add(ix, n);
    ix->count++;
    *added = 1;
    return &n->val;
}

/*
 * Maps key to val. The index keeps its own copy of the key. If the key was
 * present its value is replaced: returns 1 and stores the previous value in
 * *old (when old is not NULL); the caller owns that value again. Returns 0
 * when inserted, -ENOMEM when out of memory or for a key longer than
 * MC__INDEX_KEY_MAX (index unchanged).
 */
int mc__index_insert(mc__index_t *ix, const char *key, size_t len, void *val, void **old)
{
    int added;
    void **slot = mc__index_slot(ix, key, len, &added);

    if (!slot)
        return -ENOMEM;
    if (!added && old)
        *old = *slot;
    *slot = val;
    return !added;
}

/* Returns the value for key, or NULL when absent (or when NULL was stored). */
void *mc__index_get(const mc__index_t *ix, const char *key, size_t len)
{
    struct index_node *n =
        len <= MC__INDEX_KEY_MAX ? hash_find(ix, key, len, key_hash(key, len)) : NULL;

    return n ? n->val : NULL;
}

/* Removes key and frees the index's copy of it; returns its value, which the
 * caller owns again, or NULL when absent. */
void *mc__index_remove(mc__index_t *ix, const char *key, size_t len)
{
    struct index_node **update[INDEX_MAX_LEVEL];
    struct index_node *n = find(ix, key, len, 0, update);
    void *val;

    if (!n || node_cmp(n, key, len) != 0)
        return NULL;
    /* n is the first node >= key, so every level of its tower links to it
     * from update[i]. */
    for (int i = 0; i < n->level; i++)
        update[i][i] = n->next[i];
    hash_del(ix, n);
    while (ix->level > 0 && ix->head[ix->level - 1] == NULL)
        ix->level--;
    ix->count--;
    val = n->val;
    free(n);
    return val;
}

/* Returns the number of keys. */
size_t mc__index_count(const mc__index_t *ix)
{
    return ix->count;
}

/*
 * Positions *it at the first key >= key (after == 0) or > key (after != 0),
 * or at the end when there is none. key may be NULL (len 0) for the first
 * key of the index.
 */
void mc__index_seek(const mc__index_t *ix, mc__index_iter_t *it, const char *key, size_t len,
                    int after)
{
    it->node = find(ix, key, len, after, NULL);
}

/*
 * Returns 1 and the entry at *it (key, len and val may each be NULL), then
 * advances *it; returns 0 at the end. The key pointer points into the index
 * and stays valid until that key is removed.
 */
int mc__index_next(mc__index_iter_t *it, const char **key, size_t *len, void **val)
{
    struct index_node *n = it->node;

    if (!n)
        return 0;
    if (key)
        *key = node_key(n);
    if (len)
        *len = n->len;
    if (val)
        *val = n->val;
    it->node = n->next[0];
    return 1;
}
