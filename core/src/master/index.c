/*
 * index.c - the ordered key index: a B+tree of value pointers whose keys
 * live in the values (index.h), beside a hash table of them (index_hash.c).
 *
 * Leaves hold up to LEAF_CAP value pointers (6 bytes each) in key order and are linked
 * both ways, so a walk is a step along an array; inner nodes hold up to
 * INNER_CAP children and, between them, separators that are values too:
 * sep[i] is the least value of child i + 1's subtree, always a value in the
 * index, so no key is ever copied. A separator changes only when that value
 * leaves its place as least of the subtree: removed (its successor takes
 * over), replaced by a value of the same key, or moved to a sibling.
 *
 * A full leaf first passes a value to a sibling with room, and splits only
 * when neither has any (in half, or unevenly at either end so that keys
 * arriving in order fill leaves); a leaf under a quarter full merges with a
 * sibling when the two fit in three quarters of a leaf, an empty one goes.
 * Inner nodes merge when under a quarter full and the two fit in one.
 * Nodes come from a small pool kept filled before each insert
 * (mc__index_reserve()), so an insert fails before it changes anything.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "master/index_i.h"

#define LEAF_CAP 80  /* a 512-byte malloc chunk */
#define INNER_CAP 32 /* children */
#define MAX_DEPTH 40 /* inner levels; every inner node below the root has >= 1 child of many */

/* A value pointer in a leaf: its low 48 bits (index.h: values lie below
 * 2^48), in 6 bytes, so that a 512-byte leaf holds 80 values, not 60. */
typedef struct vp {
    uint16_t w[3];
} vp_t;

static inline void *vget(const vp_t *p)
{
    return (void *)(uintptr_t)((uint64_t)p->w[0] | (uint64_t)p->w[1] << 16 |
                               (uint64_t)p->w[2] << 32);
}

static inline void vset(vp_t *p, const void *val)
{
    uint64_t x = (uint64_t)(uintptr_t)val;
    p->w[0] = (uint16_t)x;
    p->w[1] = (uint16_t)(x >> 16);
    p->w[2] = (uint16_t)(x >> 32);
}

struct leaf {
    struct leaf *prev, *next;
    uint32_t n;
    vp_t val[LEAF_CAP];
};

_Static_assert(sizeof(vp_t) == 6 && sizeof(struct leaf) <= 504,
               "a leaf is a 512-byte malloc chunk");

struct inner {
    uint32_t n;               /* children */
    void *sep[INNER_CAP - 1]; /* sep[i]: the least value under child[i + 1] */
    void *child[INNER_CAP];   /* inner nodes, or leaves on the last level */
};

struct mc__index {
    mc__index_key_cb keyof;
    size_t count;
    int height; /* inner levels above the leaves (0: the root is a leaf) */
    void *root; /* never NULL */
    mc__ihash_t h;
    struct leaf *spare_leaf;   /* the pool, linked through next */
    struct inner *spare_inner; /* linked through child[0] */
    size_t nspare_leaf, nspare_inner;
};

/* One step of a walk from the root: the inner node and the child taken. */
typedef struct step {
    struct inner *node;
    unsigned ci;
} step_t;

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

/* Compares val's key with key/len: <0, 0, >0 as it sorts before, equal to
 * or after (memcmp's order, shorter first on a tie), eight bytes at a time.
 * key may be NULL when len is 0. */
static int val_cmp(const mc__index_t *ix, const void *val, const char *key, size_t len)
{
    size_t vlen, i = 0;
    const unsigned char *a = (const unsigned char *)ix->keyof(val, &vlen);
    const unsigned char *b = (const unsigned char *)key;
    size_t min = vlen < len ? vlen : len;

    for (; i + 8 <= min; i += 8) {
        uint64_t x = word_be(a + i), y = word_be(b + i);

        if (x != y)
            return x < y ? -1 : 1;
    }
    for (; i < min; i++)
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    return (vlen > len) - (vlen < len);
}

/* Walks from the root to the leaf where key belongs, recording the steps
 * in path[0..height) when path is not NULL. */
static struct leaf *descend(const mc__index_t *ix, const char *key, size_t len, step_t *path)
{
    void *n = ix->root;

    for (int k = 0; k < ix->height; k++) {
        struct inner *in = n;
        unsigned lo = 0, hi = in->n - 1; /* the child: how many separators are <= key */

        while (lo < hi) {
            unsigned mid = lo + (hi - lo) / 2;

            if (val_cmp(ix, in->sep[mid], key, len) <= 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (path)
            path[k] = (step_t){in, lo};
        n = in->child[lo];
    }
    return n;
}

/* The first position in l whose key is >= key (after == 0) or > key. */
static unsigned leaf_bound(const mc__index_t *ix, const struct leaf *l, const char *key, size_t len,
                           int after)
{
    unsigned lo = 0, hi = l->n;

    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        int c = val_cmp(ix, vget(&l->val[mid]), key, len);

        if (c < 0 || (c == 0 && after))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ---- the node pool ---- */

int mc__index_reserve(mc__index_t *ix, size_t n)
{
    size_t want_inner = n * ((size_t)ix->height + n + 1);

    while (ix->nspare_leaf < n) {
        struct leaf *l = malloc(sizeof(*l));

        if (!l)
            return -ENOMEM;
        l->next = ix->spare_leaf;
        ix->spare_leaf = l;
        ix->nspare_leaf++;
    }
    while (ix->nspare_inner < want_inner) {
        struct inner *in = malloc(sizeof(*in));

        if (!in)
            return -ENOMEM;
        in->child[0] = ix->spare_inner;
        ix->spare_inner = in;
        ix->nspare_inner++;
    }
    return mc__ihash_reserve(&ix->h, n);
}

static struct leaf *take_leaf(mc__index_t *ix)
{
    struct leaf *l = ix->spare_leaf;

    ix->spare_leaf = l->next;
    ix->nspare_leaf--;
    memset(l, 0, sizeof(*l));
    return l;
}

static struct inner *take_inner(mc__index_t *ix)
{
    struct inner *in = ix->spare_inner;

    ix->spare_inner = in->child[0];
    ix->nspare_inner--;
    in->n = 0;
    return in;
}

/* ---- insert ---- */

/* Adds (sep, child) right after the child that path[k] took, splitting
 * full inner nodes upwards and growing a new root when the old one splits. */
static void insert_child(mc__index_t *ix, step_t *path, int k, void *sep, void *child)
{
    for (; k >= 0; k--) {
        struct inner *p = path[k].node;
        unsigned at = path[k].ci + 1, n = p->n;

        if (n < INNER_CAP) {
            memmove(&p->child[at + 1], &p->child[at], (n - at) * sizeof(p->child[0]));
            memmove(&p->sep[at], &p->sep[at - 1], (n - at) * sizeof(p->sep[0]));
            p->child[at] = child;
            p->sep[at - 1] = sep;
            p->n++;
            return;
        }
        /* Split p: INNER_CAP + 1 children, the middle separator goes up. */
        void *c[INNER_CAP + 1], *s[INNER_CAP];
        unsigned h = (INNER_CAP + 1) / 2;
        struct inner *r = take_inner(ix);

        for (unsigned i = 0; i <= n; i++)
            c[i] = i < at ? p->child[i] : i == at ? child : p->child[i - 1];
        for (unsigned i = 0; i < n; i++)
            s[i] = i < at - 1 ? p->sep[i] : i == at - 1 ? sep : p->sep[i - 1];
        memcpy(p->child, c, h * sizeof(c[0]));
        memcpy(p->sep, s, (h - 1) * sizeof(s[0]));
        p->n = h;
        memcpy(r->child, c + h, (n + 1 - h) * sizeof(c[0]));
        memcpy(r->sep, s + h, (n - h) * sizeof(s[0]));
        r->n = n + 1 - h;
        sep = s[h - 1];
        child = r;
    }
    struct inner *root = take_inner(ix);

    root->n = 2;
    root->child[0] = ix->root;
    root->child[1] = child;
    root->sep[0] = sep;
    ix->root = root;
    ix->height++;
}

/* Makes room in full leaf l (where val belongs at pos) by passing one value
 * to a sibling with room; returns 1 when val is in place, else 0. */
static int shift_to_sibling(mc__index_t *ix, step_t *up, struct leaf *l, unsigned pos, void *val)
{
    struct inner *p = up->node;
    unsigned ci = up->ci;

    if (ci > 0 && ((struct leaf *)p->child[ci - 1])->n < LEAF_CAP) {
        struct leaf *s = p->child[ci - 1];

        if (pos == 0) {
            vset(&s->val[s->n++], val);
            return 1;
        }
        s->val[s->n++] = l->val[0];
        memmove(&l->val[0], &l->val[1], (pos - 1) * sizeof(l->val[0]));
        vset(&l->val[pos - 1], val);
        p->sep[ci - 1] = vget(&l->val[0]);
        return 1;
    }
    if (ci + 1 < p->n && ((struct leaf *)p->child[ci + 1])->n < LEAF_CAP) {
        struct leaf *s = p->child[ci + 1];

        memmove(&s->val[1], &s->val[0], s->n * sizeof(s->val[0]));
        s->n++;
        if (pos == LEAF_CAP) {
            vset(&s->val[0], val);
        } else {
            s->val[0] = l->val[LEAF_CAP - 1];
            memmove(&l->val[pos + 1], &l->val[pos], (LEAF_CAP - 1 - pos) * sizeof(l->val[0]));
            vset(&l->val[pos], val);
        }
        p->sep[ci] = vget(&s->val[0]);
        return 1;
    }
    return 0;
}

/* Puts val (absent; nodes reserved) at its place in the tree. */
static void tree_insert(mc__index_t *ix, void *val, const char *key, size_t len)
{
    step_t path[MAX_DEPTH];
    struct leaf *l = descend(ix, key, len, path);
    unsigned pos = leaf_bound(ix, l, key, len, 0);

    if (l->n < LEAF_CAP) {
        memmove(&l->val[pos + 1], &l->val[pos], (l->n - pos) * sizeof(l->val[0]));
        vset(&l->val[pos], val);
        l->n++;
        return;
    }
    if (ix->height > 0 && shift_to_sibling(ix, &path[ix->height - 1], l, pos, val))
        return;
    /* Split: in half, or at an end when val arrives at one. */
    vp_t tmp[LEAF_CAP + 1];
    unsigned s = pos == LEAF_CAP ? LEAF_CAP : pos == 0 ? 1 : (LEAF_CAP + 1) / 2;
    struct leaf *r = take_leaf(ix);

    memcpy(tmp, l->val, pos * sizeof(tmp[0]));
    vset(&tmp[pos], val);
    memcpy(tmp + pos + 1, l->val + pos, (LEAF_CAP - pos) * sizeof(tmp[0]));
    memcpy(l->val, tmp, s * sizeof(tmp[0]));
    l->n = s;
    memcpy(r->val, tmp + s, (LEAF_CAP + 1 - s) * sizeof(tmp[0]));
    r->n = LEAF_CAP + 1 - s;
    r->prev = l;
    r->next = l->next;
    if (l->next)
        l->next->prev = r;
    l->next = r;
    insert_child(ix, path, ix->height - 1, vget(&r->val[0]), r);
}

/* old (in the tree) gives its place to val, which has the same key. */
static void tree_replace(mc__index_t *ix, void *old, void *val, const char *key, size_t len)
{
    step_t path[MAX_DEPTH];
    struct leaf *l = descend(ix, key, len, path);
    unsigned pos = 0;

    while (vget(&l->val[pos]) != old) /* a scan of pointers: no key read */
        pos++;
    vset(&l->val[pos], val);
    for (int k = 0; k < ix->height; k++)
        if (path[k].ci > 0 && path[k].node->sep[path[k].ci - 1] == old)
            path[k].node->sep[path[k].ci - 1] = val;
}

/* ---- remove ---- */

static void unlink_leaf(struct leaf *l)
{
    if (l->prev)
        l->prev->next = l->next;
    if (l->next)
        l->next->prev = l->prev;
    free(l);
}

/* Takes child idx (already freed or merged away) out of path[k]'s node,
 * merging and dropping inner nodes upwards as they empty or run low. */
static void remove_child(mc__index_t *ix, step_t *path, int k, unsigned idx)
{
    for (;;) {
        struct inner *p = path[k].node;
        unsigned si = idx > 0 ? idx - 1 : 0;

        memmove(&p->child[idx], &p->child[idx + 1], (p->n - idx - 1) * sizeof(p->child[0]));
        if (p->n > 1)
            memmove(&p->sep[si], &p->sep[si + 1], (p->n - 2 - si) * sizeof(p->sep[0]));
        p->n--;
        if (k == 0)
            break;
        struct inner *g = path[k - 1].node;
        unsigned gi = path[k - 1].ci;

        if (p->n == 0) {
            free(p);
        } else if (p->n >= INNER_CAP / 4) {
            return;
        } else if (gi > 0 && ((struct inner *)g->child[gi - 1])->n + p->n <= INNER_CAP) {
            struct inner *s = g->child[gi - 1];

            s->sep[s->n - 1] = g->sep[gi - 1];
            memcpy(&s->sep[s->n], p->sep, (p->n - 1) * sizeof(p->sep[0]));
            memcpy(&s->child[s->n], p->child, p->n * sizeof(p->child[0]));
            s->n += p->n;
            free(p);
        } else if (gi + 1 < g->n && ((struct inner *)g->child[gi + 1])->n + p->n <= INNER_CAP) {
            struct inner *s = g->child[gi + 1];

            p->sep[p->n - 1] = g->sep[gi];
            memcpy(&p->sep[p->n], s->sep, (s->n - 1) * sizeof(s->sep[0]));
            memcpy(&p->child[p->n], s->child, s->n * sizeof(s->child[0]));
            p->n += s->n;
            free(s);
            gi++;
        } else {
            return;
        }
        idx = gi;
        k--;
    }
    /* The root keeps two children or more, or gives way to its only one. */
    while (ix->height > 0 && ((struct inner *)ix->root)->n == 1) {
        struct inner *root = ix->root;

        ix->root = root->child[0];
        ix->height--;
        free(root);
    }
}

/* Leaf l (reached by path) lost a value: drops it when empty, merges it
 * with a sibling when it runs low and they fit in three quarters of one. */
static void rebalance_leaf(mc__index_t *ix, step_t *path, struct leaf *l)
{
    if (ix->height == 0)
        return;
    int k = ix->height - 1;
    struct inner *p = path[k].node;
    unsigned ci = path[k].ci;

    if (l->n == 0) {
        unlink_leaf(l);
        remove_child(ix, path, k, ci);
        return;
    }
    if (l->n >= LEAF_CAP / 4)
        return;
    if (ci > 0 && ((struct leaf *)p->child[ci - 1])->n + l->n <= LEAF_CAP * 3 / 4) {
        struct leaf *s = p->child[ci - 1];

        memcpy(&s->val[s->n], l->val, l->n * sizeof(l->val[0]));
        s->n += l->n;
        unlink_leaf(l);
        remove_child(ix, path, k, ci);
    } else if (ci + 1 < p->n && ((struct leaf *)p->child[ci + 1])->n + l->n <= LEAF_CAP * 3 / 4) {
        struct leaf *s = p->child[ci + 1];

        memcpy(&l->val[l->n], s->val, s->n * sizeof(s->val[0]));
        l->n += s->n;
        unlink_leaf(s);
        remove_child(ix, path, k, ci + 1);
    }
}

/* ---- the API ---- */

mc__index_t *mc__index_new(mc__index_key_cb keyof)
{
    mc__index_t *ix = calloc(1, sizeof(*ix));

    if (!ix)
        return NULL;
    ix->keyof = keyof;
    ix->root = calloc(1, sizeof(struct leaf));
    if (!ix->root || mc__ihash_init(&ix->h, keyof) < 0) {
        free(ix->root);
        free(ix);
        return NULL;
    }
    return ix;
}

static void free_inner(void *n, int height)
{
    if (height == 0)
        return; /* a leaf: freed along the chain */
    struct inner *in = n;

    for (unsigned i = 0; i < in->n; i++)
        free_inner(in->child[i], height - 1);
    free(in);
}

void mc__index_free(mc__index_t *ix, void (*free_val)(void *))
{
    if (!ix)
        return;
    /* The leftmost leaf, reached without a compare: the values may be
     * gone already (a caller that freed them itself passes no free_val). */
    void *n = ix->root;
    for (int k = 0; k < ix->height; k++)
        n = ((struct inner *)n)->child[0];
    struct leaf *l = n;

    free_inner(ix->root, ix->height);
    while (l) {
        struct leaf *next = l->next;

        for (unsigned i = 0; free_val && i < l->n; i++)
            free_val(vget(&l->val[i]));
        free(l);
        l = next;
    }
    while (ix->spare_leaf) {
        struct leaf *next = ix->spare_leaf->next;

        free(ix->spare_leaf);
        ix->spare_leaf = next;
    }
    while (ix->spare_inner) {
        struct inner *next = ix->spare_inner->child[0];

        free(ix->spare_inner);
        ix->spare_inner = next;
    }
    mc__ihash_fini(&ix->h);
    free(ix);
}

int mc__index_insert(mc__index_t *ix, void *val, void **old)
{
    size_t len;
    const char *key;
    uint64_t hv;
    long at;

    if (!val || (uintptr_t)val >> 48)
        return -EINVAL;
    key = ix->keyof(val, &len);
    hv = mc__ihash_key(key, len);
    at = mc__ihash_find(&ix->h, key, len, hv);
    if (at >= 0) {
        void *was = mc__ihash_val(&ix->h, at);

        mc__ihash_set(&ix->h, at, val);
        tree_replace(ix, was, val, key, len);
        if (old)
            *old = was;
        return 1;
    }
    int rc = mc__index_reserve(ix, 1);

    if (rc < 0)
        return rc;
    tree_insert(ix, val, key, len);
    mc__ihash_add(&ix->h, val, hv);
    ix->count++;
    return 0;
}

int mc__index_replace(mc__index_t *ix, void *old, void *val)
{
    size_t len;
    const char *key;
    long at;

    if (!val || (uintptr_t)val >> 48)
        return -EINVAL;
    key = ix->keyof(val, &len);
    at = mc__ihash_find_ptr(&ix->h, old, mc__ihash_key(key, len));
    if (at < 0)
        return -EINVAL;
    mc__ihash_set(&ix->h, at, val);
    tree_replace(ix, old, val, key, len);
    return 0;
}

void *mc__index_get(const mc__index_t *ix, const char *key, size_t len)
{
    long at = mc__ihash_find(&ix->h, key, len, mc__ihash_key(key, len));

    return at >= 0 ? mc__ihash_val(&ix->h, at) : NULL;
}

void *mc__index_remove(mc__index_t *ix, const char *key, size_t len)
{
    long at = mc__ihash_find(&ix->h, key, len, mc__ihash_key(key, len));

    if (at < 0)
        return NULL;
    step_t path[MAX_DEPTH];
    struct leaf *l = descend(ix, key, len, path);
    unsigned pos = leaf_bound(ix, l, key, len, 0);
    void *val = vget(&l->val[pos]), *succ;

    memmove(&l->val[pos], &l->val[pos + 1], (l->n - pos - 1) * sizeof(l->val[0]));
    l->n--;
    /* Where val was the least of a subtree, its successor is now. */
    succ = pos < l->n ? vget(&l->val[pos]) : l->next ? vget(&l->next->val[0]) : NULL;
    for (int k = 0; k < ix->height; k++)
        if (path[k].ci > 0 && path[k].node->sep[path[k].ci - 1] == val)
            path[k].node->sep[path[k].ci - 1] = succ;
    mc__ihash_del(&ix->h, at);
    ix->count--;
    rebalance_leaf(ix, path, l);
    return val;
}

size_t mc__index_sample(const mc__index_t *ix, uint64_t at, void **out, size_t n)
{
    return mc__ihash_sample(&ix->h, at, out, n);
}

size_t mc__index_count(const mc__index_t *ix)
{
    return ix->count;
}

void mc__index_seek(const mc__index_t *ix, mc__index_iter_t *it, const char *key, size_t len,
                    int after)
{
    struct leaf *l = descend(ix, key, len, NULL);
    unsigned pos = leaf_bound(ix, l, key, len, after);

    if (pos == l->n) {
        l = l->next;
        pos = 0;
    }
    it->leaf = l;
    it->pos = pos;
    it->keyof = ix->keyof;
}

int mc__index_next(mc__index_iter_t *it, const char **key, size_t *len, void **val)
{
    struct leaf *l = it->leaf;

    if (!l)
        return 0;
    void *v = vget(&l->val[it->pos]);

    if (key || len) {
        size_t kl;
        const char *k = it->keyof(v, &kl);

        if (key)
            *key = k;
        if (len)
            *len = kl;
    }
    if (val)
        *val = v;
    if (++it->pos == l->n) {
        it->leaf = l->next;
        it->pos = 0;
    }
    return 1;
}

/* ---- checking (tests) ---- */

/* Checks the subtree n of the given height whose values lie in (lo, hi)
 * (NULL: unbounded); *first gets its least value, *leaf walks the leaf
 * chain alongside. Returns the values under n, or -1. */
static long check_node(const mc__index_t *ix, const void *n, int height, const void *lo,
                       const void *hi, const void **first, const struct leaf **leaf)
{
    size_t kl;
    const char *k;

    if (height == 0) {
        const struct leaf *l = n;

        if (l != *leaf || (l->n == 0 && ix->height > 0) || l->n > LEAF_CAP)
            return -1;
        for (unsigned i = 0; i < l->n; i++) {
            void *v = vget(&l->val[i]);
            k = ix->keyof(v, &kl);
            if ((lo && val_cmp(ix, lo, k, kl) > 0) || (hi && val_cmp(ix, hi, k, kl) <= 0))
                return -1;
            if (i > 0 && val_cmp(ix, vget(&l->val[i - 1]), k, kl) >= 0)
                return -1;
            if (mc__index_get(ix, k, kl) != v)
                return -1;
        }
        if (l->next && l->next->prev != l)
            return -1;
        *first = l->n ? vget(&l->val[0]) : NULL;
        *leaf = l->next;
        return l->n;
    }
    const struct inner *in = n;
    long total = 0;

    if (in->n == 0 || in->n > INNER_CAP || (n == ix->root && in->n < 2))
        return -1;
    for (unsigned i = 0; i < in->n; i++) {
        const void *f = NULL;
        long c = check_node(ix, in->child[i], height - 1, i ? in->sep[i - 1] : lo,
                            i + 1 < in->n ? in->sep[i] : hi, &f, leaf);

        if (c < 0 || (i > 0 && f != in->sep[i - 1]) || (i > 0 && lo == NULL && f == NULL))
            return -1;
        if (i == 0)
            *first = f;
        total += c;
    }
    return total;
}

int mc__index_check(const mc__index_t *ix)
{
    const struct leaf *leaf = descend(ix, NULL, 0, NULL);
    const void *first = NULL;

    if (leaf->prev)
        return -EINVAL;
    long n = check_node(ix, ix->root, ix->height, NULL, NULL, &first, &leaf);

    if (n < 0 || (size_t)n != ix->count || leaf != NULL || ix->h.count != ix->count)
        return -EINVAL;
    return 0;
}
