/*
 * inode.c - the daemon's inode table (see inode.h): two chained hash tables,
 * by inode number and by (key, kind), that double as they fill.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "inode.h"

struct fs_itable {
    fs_inode_t **by_ino, **by_key;
    size_t cap; /* buckets in each table, a power of two */
    size_t count;
    uint64_t next_ino;
};

static uint64_t key_hash(const char *key, size_t klen, int is_dir)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)is_dir;
    for (size_t i = 0; i < klen; i++) {
        h ^= (unsigned char)key[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static size_t ino_slot(const fs_itable_t *t, uint64_t ino)
{
    return (size_t)(ino * 0x9E3779B97F4A7C15ULL >> 17) & (t->cap - 1);
}

static size_t key_slot(const fs_itable_t *t, const fs_inode_t *in)
{
    return (size_t)key_hash(in->key, in->klen, in->is_dir) & (t->cap - 1);
}

static void key_link(fs_itable_t *t, fs_inode_t *in)
{
    size_t b = key_slot(t, in);
    in->by_key_next = t->by_key[b];
    t->by_key[b] = in;
}

static void key_unlink(fs_itable_t *t, fs_inode_t *in)
{
    fs_inode_t **p = &t->by_key[key_slot(t, in)];
    while (*p && *p != in)
        p = &(*p)->by_key_next;
    if (*p)
        *p = in->by_key_next;
    in->by_key_next = NULL;
}

static int grow(fs_itable_t *t)
{
    size_t ncap = t->cap * 2;
    fs_inode_t **bi = calloc(ncap, sizeof(*bi));
    fs_inode_t **bk = calloc(ncap, sizeof(*bk));
    if (!bi || !bk) {
        free(bi);
        free(bk);
        return -ENOMEM;
    }
    fs_inode_t **oi = t->by_ino;
    size_t ocap = t->cap;
    free(t->by_key);
    t->by_ino = bi;
    t->by_key = bk;
    t->cap = ncap;
    for (size_t b = 0; b < ocap; b++) {
        fs_inode_t *in = oi[b];
        while (in) {
            fs_inode_t *next = in->by_ino_next;
            size_t s = ino_slot(t, in->ino);
            in->by_ino_next = bi[s];
            bi[s] = in;
            if (in->key)
                key_link(t, in);
            in = next;
        }
    }
    free(oi);
    return 0;
}

static fs_inode_t *inode_new(fs_itable_t *t, const char *key, size_t klen, int is_dir)
{
    if (t->count + 1 > t->cap && grow(t) < 0)
        return NULL;
    fs_inode_t *in = calloc(1, sizeof(*in));
    if (!in)
        return NULL;
    in->key = malloc(klen + 1);
    if (!in->key) {
        free(in);
        return NULL;
    }
    memcpy(in->key, key, klen);
    in->key[klen] = '\0';
    in->klen = klen;
    in->is_dir = is_dir;
    in->ino = t->next_ino++;
    size_t s = ino_slot(t, in->ino);
    in->by_ino_next = t->by_ino[s];
    t->by_ino[s] = in;
    key_link(t, in);
    t->count++;
    return in;
}

fs_itable_t *fs_itable_new(void)
{
    fs_itable_t *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->cap = 1024;
    t->by_ino = calloc(t->cap, sizeof(*t->by_ino));
    t->by_key = calloc(t->cap, sizeof(*t->by_key));
    t->next_ino = 1;
    fs_inode_t *root = t->by_ino && t->by_key ? inode_new(t, "", 0, 1) : NULL;
    if (!root) {
        fs_itable_free(t);
        return NULL;
    }
    root->nlookup = 1; /* the root is never forgotten */
    return t;
}

void fs_itable_free(fs_itable_t *t)
{
    if (!t)
        return;
    for (size_t b = 0; t->by_ino && b < t->cap; b++) {
        fs_inode_t *in = t->by_ino[b];
        while (in) {
            fs_inode_t *next = in->by_ino_next;
            free(in->key);
            free(in);
            in = next;
        }
    }
    free(t->by_ino);
    free(t->by_key);
    free(t);
}

fs_inode_t *fs_inode_get(fs_itable_t *t, uint64_t ino)
{
    fs_inode_t *in = t->by_ino[ino_slot(t, ino)];
    while (in && in->ino != ino)
        in = in->by_ino_next;
    return in;
}

fs_inode_t *fs_inode_find(fs_itable_t *t, const char *key, size_t klen, int is_dir)
{
    size_t b = (size_t)key_hash(key, klen, is_dir) & (t->cap - 1);
    for (fs_inode_t *in = t->by_key[b]; in; in = in->by_key_next)
        if (in->is_dir == is_dir && in->klen == klen && memcmp(in->key, key, klen) == 0)
            return in;
    return NULL;
}

fs_inode_t *fs_inode_ref(fs_itable_t *t, const char *key, size_t klen, int is_dir)
{
    fs_inode_t *in = fs_inode_find(t, key, klen, is_dir);
    if (!in)
        in = inode_new(t, key, klen, is_dir);
    if (in)
        in->nlookup++;
    return in;
}

void fs_inode_maybe_free(fs_itable_t *t, fs_inode_t *in)
{
    if (in->nlookup || in->opens || in->ws || in->ino == 1)
        return;
    fs_inode_t **p = &t->by_ino[ino_slot(t, in->ino)];
    while (*p && *p != in)
        p = &(*p)->by_ino_next;
    if (*p)
        *p = in->by_ino_next;
    if (in->key)
        key_unlink(t, in);
    free(in->key);
    mc_obj_close(in->held);
    free(in);
    t->count--;
}

void fs_inode_forget(fs_itable_t *t, fs_inode_t *in, uint64_t n)
{
    in->nlookup = n >= in->nlookup ? 0 : in->nlookup - n;
    fs_inode_maybe_free(t, in);
}

const char *fs_inode_file_key(const fs_inode_t *in, char *buf, size_t size, size_t *klen)
{
    if (in->key) {
        *klen = in->klen;
        return in->key;
    }
    int n = in->linked ? mc_inode_key(in->st.ino, buf, size) : -ENOENT;
    *klen = n > 0 ? (size_t)n : 0;
    return n > 0 ? buf : NULL;
}

void fs_inode_unlink(fs_itable_t *t, fs_inode_t *in)
{
    if (!in->key || in->ino == 1)
        return;
    key_unlink(t, in);
    free(in->key);
    in->key = NULL;
    in->klen = 0;
}

static int set_key(fs_itable_t *t, fs_inode_t *in, const char *to, size_t tlen, size_t skip)
{
    size_t nl = tlen + in->klen - skip;
    char *k = malloc(nl + 1);
    if (!k)
        return -ENOMEM;
    memcpy(k, to, tlen);
    memcpy(k + tlen, in->key + skip, in->klen - skip);
    k[nl] = '\0';
    key_unlink(t, in);
    free(in->key);
    in->key = k;
    in->klen = nl;
    key_link(t, in);
    return 0;
}

int fs_inode_rename(fs_itable_t *t, const char *from, size_t flen, const char *to, size_t tlen,
                    int prefix)
{
    if (!prefix) {
        fs_inode_t *in = fs_inode_find(t, from, flen, 0);
        return in ? set_key(t, in, to, tlen, flen) : 0;
    }
    /* Collect first: moving an inode re-links it in the key table. */
    size_t n = 0;
    fs_inode_t **hit = malloc(sizeof(*hit) * (t->count + 1));
    if (!hit)
        return -ENOMEM;
    for (size_t b = 0; b < t->cap; b++)
        for (fs_inode_t *in = t->by_ino[b]; in; in = in->by_ino_next)
            if (in->key && in->klen >= flen && memcmp(in->key, from, flen) == 0 &&
                (in->klen == flen || in->key[flen] == '/'))
                hit[n++] = in;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = set_key(t, hit[i], to, tlen, flen);
    free(hit);
    return rc;
}

size_t fs_inode_count(const fs_itable_t *t)
{
    return t->count;
}
