/*
 * namespace.c - the key namespace of the master (see master.h): removing and
 * renaming keys and prefixes, delimited listing, lookup of files and
 * directories, metadata, hard links (see master.h), the cursor over every
 * published version.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/master_i.h"

static int has_prefix(const char *key, size_t klen, const char *p, size_t plen)
{
    return klen >= plen && memcmp(key, p, plen) == 0;
}

/* 1 if some key other than prefix itself starts with prefix. */
static int prefix_has_children(mc__master_t *m, const char *prefix, size_t plen)
{
    mc__index_iter_t it;
    const char *k;
    size_t kl;
    mc__index_seek(m->ix, &it, prefix, plen, 1);
    return mc__index_next(&it, &k, &kl, NULL) && has_prefix(k, kl, prefix, plen);
}

/* A name entry left the index (removed, replaced): its file loses a name,
 * and goes with the last. */
static void name_gone(mc__master_t *m, mc__version_t *name, uint64_t now)
{
    mc__version_t *ino = mc__master_resolve(m, name);
    if (!ino) /* its file is missing (lost, or not reported yet): one name less waits */
        (void)mc__master_count_name(m, mc__vmore(name)->link, mc__vmore(name)->linklen, -1);
    mc__master_retire(m, name, now);
    if (ino && mc__vmore(ino)->links > 1) {
        ino->rare->links--;
        mc__master_dirty(m, ino); /* its nodes' records keep its count */
    } else if (ino) {
        mc__index_remove(m->ix, mc__vkey(ino), ino->klen);
        mc__master_retire(m, ino, now);
    }
}

/* Retires v, which left the index: a name entry as name_gone() says. */
static void entry_gone(mc__master_t *m, mc__version_t *v, uint64_t now)
{
    if (mc__vmore(v)->link)
        name_gone(m, v, now);
    else
        mc__master_retire(m, v, now);
}

int mc__master_remove(mc__master_t *m, const char *key, size_t klen, unsigned flags, uint64_t now)
{
    int rc = mc_key_check(key, klen);
    if (rc < 0)
        return rc;
    if (mc__master_is_inode_key(key, klen))
        return -EINVAL;
    if ((flags & MC_REMOVE_DIR) && key[klen - 1] != '/')
        return -EINVAL;
    mc__version_t *v = mc__index_get(m->ix, key, klen);
    if ((flags & MC_REMOVE_DIR) && prefix_has_children(m, key, klen))
        return -ENOTEMPTY;
    if (!v)
        return -ENOENT;
    mc__version_t *f = mc__master_resolve(m, v); /* what is busy: the file */
    if (!(flags & MC_REMOVE_FORCE) && f && (mc__vopen(f) || mc__leased(m, f, now)))
        return -EBUSY;
    mc__index_remove(m->ix, key, klen);
    entry_gone(m, v, now);
    return 0;
}

static int rename_one(mc__master_t *m, const char *from, size_t flen, const char *to, size_t tlen,
                      unsigned flags, uint64_t now)
{
    mc__version_t *v = mc__index_get(m->ix, from, flen);
    if (!v)
        return -ENOENT;
    if (flen == tlen && memcmp(from, to, flen) == 0)
        return 0;
    mc__version_t *dst = mc__index_get(m->ix, to, tlen);
    if ((flags & MC_RENAME_NOREPLACE) && dst)
        return -EEXIST;
    /* Two names of one file: rename(2) does nothing and succeeds. */
    if (mc__vmore(v)->link && dst && mc__vmore(dst)->link &&
        mc__vmore(v)->linklen == mc__vmore(dst)->linklen &&
        memcmp(mc__vmore(v)->link, mc__vmore(dst)->link, mc__vmore(v)->linklen) == 0)
        return 0;
    char *k = mc__version_more(v) ? mc__dup_key(to, tlen) : NULL;
    if (!k || (!dst && mc__index_reserve(m->ix, 1) < 0)) {
        free(k);
        return -ENOMEM;
    }
    /* v leaves from and comes back under to, which it takes from dst or
     * for which room was reserved: the insert cannot fail. */
    void *old = NULL;
    mc__index_remove(m->ix, from, flen);
    mc__version_set_key(v, k, tlen);
    int rc = mc__index_insert(m->ix, v, &old);
    mc__master_moved(m, v);
    if (rc == 1 && old)
        entry_gone(m, old, now);
    return 0;
}

static int rename_prefix(mc__master_t *m, const char *from, size_t flen, const char *to,
                         size_t tlen, unsigned flags, uint64_t now)
{
    if (from[flen - 1] != '/' || to[tlen - 1] != '/')
        return -EINVAL;
    if (has_prefix(to, tlen, from, flen))
        return -EINVAL; /* into itself */
    if (has_prefix(from, flen, to, tlen))
        return -ENOTEMPTY; /* onto an ancestor, which holds from */
    if (prefix_has_children(m, to, tlen))
        return -ENOTEMPTY;
    mc__version_t *dest_marker = mc__index_get(m->ix, to, tlen);
    if (dest_marker && (flags & MC_RENAME_NOREPLACE))
        return -EEXIST;

    /* Collect the versions under from, checking the new keys' lengths. */
    size_t n = 0, cap = 64;
    mc__version_t **vs = malloc(sizeof(*vs) * cap);
    if (!vs)
        return -ENOMEM;
    mc__index_iter_t it;
    const char *k;
    size_t kl;
    void *val;
    mc__index_seek(m->ix, &it, from, flen, 0);
    while (mc__index_next(&it, &k, &kl, &val) && has_prefix(k, kl, from, flen)) {
        if (kl - flen + tlen > MC_KEY_MAX) {
            free(vs);
            return -ENAMETOOLONG;
        }
        if (n == cap) {
            mc__version_t **nv = realloc(vs, sizeof(*vs) * (cap *= 2));
            if (!nv) {
                free(vs);
                return -ENOMEM;
            }
            vs = nv;
        }
        vs[n++] = val;
    }
    if (n == 0) {
        free(vs);
        return -ENOENT;
    }
    /* Build every new key first so that nothing can fail half-way except
     * the index's own allocations. */
    char **keys = malloc(sizeof(*keys) * n);
    if (!keys) {
        free(vs);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        size_t nl = vs[i]->klen - flen + tlen;
        keys[i] = mc__version_more(vs[i]) ? malloc(nl + 1) : NULL;
        if (!keys[i]) {
            while (i--)
                free(keys[i]);
            free(keys);
            free(vs);
            return -ENOMEM;
        }
        memcpy(keys[i], to, tlen);
        memcpy(keys[i] + tlen, mc__vkey(vs[i]) + flen, vs[i]->klen - flen);
        keys[i][nl] = '\0';
    }
    if (dest_marker) {
        mc__index_remove(m->ix, to, tlen);
        mc__master_retire(m, dest_marker, now);
    }
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        mc__version_t *v = vs[i];
        size_t nl = v->klen - flen + tlen;
        if (rc == 0)
            rc = mc__index_reserve(m->ix, 1); /* before v leaves its key */
        if (rc < 0) {
            /* Out of memory half-way: the keys not moved yet stay where
             * they are, and the request says it failed. */
            free(keys[i]);
            continue;
        }
        mc__index_remove(m->ix, mc__vkey(v), v->klen);
        mc__version_set_key(v, keys[i], nl);
        mc__index_insert(m->ix, v, NULL); /* a new key, room reserved: cannot fail */
        mc__master_moved(m, v);
    }
    free(keys);
    free(vs);
    return rc;
}

/* The keys of a request that changes two names (rename, link): valid, and
 * neither an inode key. Returns 0 or -EINVAL / -ENAMETOOLONG. */
static int check_pair(const char *from, size_t flen, const char *to, size_t tlen)
{
    int rc = mc_key_check(from, flen);
    if (rc == 0)
        rc = mc_key_check(to, tlen);
    if (rc == 0 && (mc__master_is_inode_key(from, flen) || mc__master_is_inode_key(to, tlen)))
        rc = -EINVAL;
    return rc;
}

int mc__master_rename(mc__master_t *m, const char *from, size_t flen, const char *to, size_t tlen,
                      unsigned flags, uint64_t now)
{
    int rc = check_pair(from, flen, to, tlen);
    if (rc < 0)
        return rc;
    if (flags & MC_RENAME_PREFIX)
        return rename_prefix(m, from, flen, to, tlen, flags, now);
    return rename_one(m, from, flen, to, tlen, flags, now);
}

/* Moves *it past every key that starts with prefix[0..plen) (a common
 * prefix ending in delim), with one seek, or a walk when delim is 0xff (no
 * byte sorts after it). */
static void skip_prefix(mc__master_t *m, mc__index_iter_t *it, const char *prefix, size_t plen,
                        int delim)
{
    char skip[MC_KEY_MAX + 1];
    const char *k;
    size_t kl;
    memcpy(skip, prefix, plen);
    if ((unsigned char)delim == 0xff) {
        mc__index_iter_t run = *it;
        while (mc__index_next(&run, &k, &kl, NULL) && has_prefix(k, kl, skip, plen))
            *it = run;
        return;
    }
    skip[plen - 1] = (char)(delim + 1);
    mc__index_seek(m->ix, it, skip, plen, 0);
}

struct list_buf {
    mc_list_t l;
    size_t cap;
};

static int list_push(const mc__master_t *m, struct list_buf *b, const char *key, size_t klen,
                     int is_prefix, const mc__version_t *v, uint64_t now)
{
    if (b->l.n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 16;
        mc_list_entry_t *e = realloc(b->l.entries, sizeof(*e) * cap);
        if (!e)
            return -ENOMEM;
        b->l.entries = e;
        b->cap = cap;
    }
    mc_list_entry_t *e = &b->l.entries[b->l.n];
    memset(e, 0, sizeof(*e));
    char *k = mc__dup_key(key, klen);
    if (!k)
        return -ENOMEM;
    e->key = k;
    e->klen = klen;
    e->is_prefix = is_prefix;
    if (v)
        mc__version_stat(m, v, now, &e->st);
    b->l.n++;
    return 0;
}

int mc__master_list(mc__master_t *m, const char *prefix, size_t plen, const char *after,
                    size_t alen, int delim, size_t max, uint64_t now, mc_list_t **out)
{
    struct list_buf *b = calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    if (!max)
        max = 1000;
    mc__index_iter_t it;
    /* Seek key for skipping a whole common prefix: the prefix with its last
     * byte (the delimiter) incremented. */
    char skip[MC_KEY_MAX + 1];
    /* A cursor that sorts before the prefix (a shorter head of it, or a
     * longer key before it) lists from the prefix's start. */
    size_t common = alen < plen ? alen : plen;
    int cmp = !after || !alen ? -1 : common ? memcmp(after, prefix, common) : 0;
    if (cmp == 0 && alen < plen)
        cmp = -1;
    if (cmp >= 0) {
        const char *d = delim > 0 && alen > plen ? memchr(after + plen, delim, alen - plen) : NULL;
        if (d && (size_t)(d - after) == alen - 1 && (unsigned char)delim < 0xff &&
            alen <= MC_KEY_MAX) {
            memcpy(skip, after, alen);
            skip[alen - 1] = (char)(delim + 1);
            mc__index_seek(m->ix, &it, skip, alen, 0);
        } else {
            mc__index_seek(m->ix, &it, after, alen, 1);
        }
    } else {
        mc__index_seek(m->ix, &it, prefix, plen, 0);
    }
    const char *k;
    size_t kl;
    void *val;
    int rc = 0;
    while (mc__index_next(&it, &k, &kl, &val)) {
        if (!has_prefix(k, kl, prefix, plen))
            break;
        if (mc__master_is_inode_key(k, kl)) { /* hard-linked files: by name only */
            skip_prefix(m, &it, MC__INODE_PREFIX, MC__INODE_PLEN, '/');
            continue;
        }
        if (b->l.n == max) {
            b->l.more = 1;
            break;
        }
        const char *d = delim > 0 ? memchr(k + plen, delim, kl - plen) : NULL;
        if (d) { /* a deeper key, or a directory marker: one prefix entry */
            size_t cl = (size_t)(d - k) + 1;
            /* The marker's metadata (mode, mtime) stands for the prefix. */
            rc = list_push(m, b, k, cl, 1, mc__index_get(m->ix, k, cl), now);
            if (rc < 0)
                break;
            skip_prefix(m, &it, k, cl, delim);
            continue;
        }
        if (delim > 0 && kl < MC_KEY_MAX) {
            /* A directory of the same name shadows the file. */
            memcpy(skip, k, kl);
            skip[kl] = (char)delim;
            if (prefix_has_children(m, skip, kl + 1) || mc__index_get(m->ix, skip, kl + 1))
                continue;
        }
        mc__version_t *f = mc__master_resolve(m, val);
        rc = list_push(m, b, k, kl, 0, f ? f : val, now);
        if (rc < 0)
            break;
    }
    if (rc < 0) {
        mc_list_free(&b->l);
        return rc;
    }
    if (b->l.n) {
        b->l.next = b->l.entries[b->l.n - 1].key;
        b->l.next_len = b->l.entries[b->l.n - 1].klen;
    }
    *out = &b->l;
    return (int)b->l.n;
}

int mc__master_lookup(mc__master_t *m, const char *key, size_t klen, int delim, mc__version_t **v)
{
    int rc = mc_key_check(key, klen);
    if (rc < 0)
        return rc;
    *v = NULL;
    if (delim > 0 && klen == 1 && key[0] == (char)delim)
        return MC_LOOKUP_DIR; /* the root */
    if (delim > 0 && klen < MC_KEY_MAX) {
        char dir[MC_KEY_MAX + 1];
        memcpy(dir, key, klen);
        dir[klen] = (char)delim;
        mc__version_t *marker = mc__index_get(m->ix, dir, klen + 1);
        if (marker || prefix_has_children(m, dir, klen + 1)) {
            *v = marker;
            return MC_LOOKUP_DIR;
        }
    }
    *v = mc__master_find(m, key, klen);
    return *v ? MC_LOOKUP_FILE : -ENOENT;
}

#define META_ALL (MC_META_MODE | MC_META_MTIME | MC_META_ATIME | MC_META_UID | MC_META_GID)

int mc__master_set_meta(mc__master_t *m, const char *key, size_t klen, const mc_meta_t *meta,
                        int64_t wall_ns, mc__version_t **out)
{
    if (meta->what & ~META_ALL)
        return -EINVAL;
    mc__version_t *v = mc__master_find(m, key, klen);
    if (!v)
        return -ENOENT;
    /* A ctime other than the mtime is kept in the rare fields: made first,
     * so that nothing changes when they cannot be. */
    int64_t mtime = meta->what & MC_META_MTIME ? meta->mtime_ns : v->mtime_ns;
    if (wall_ns != mtime && !mc__version_more(v))
        return -ENOMEM;
    uint32_t uid, gid; /* the new pair is filed first too */
    mc__version_owner(m, v, &uid, &gid);
    if (mc__version_set_owner(m, v, meta->what & MC_META_UID ? meta->uid : uid,
                              meta->what & MC_META_GID ? meta->gid : gid) < 0)
        return -ENOMEM;
    if (meta->what & MC_META_MODE)
        v->mode = meta->mode & 07777;
    if (meta->what & MC_META_MTIME)
        v->mtime_ns = meta->mtime_ns;
    if (meta->what & MC_META_ATIME)
        mc__version_set_atime(v, meta->atime_ns);
    /* chown(2) of what is not a directory: the set-user-ID bit goes, and
     * the set-group-ID bit with group-execute (without, it marks mandatory
     * locking on Linux, and stays). */
    if ((meta->what & (MC_META_UID | MC_META_GID)) && key[klen - 1] != '/') {
        v->mode &= ~(uint32_t)04000;
        if (v->mode & 010)
            v->mode &= ~(uint32_t)02000;
    }
    (void)mc__version_set_ctime(v, wall_ns); /* cannot fail: see above */
    mc__master_dirty(m, v);
    *out = v;
    return 0;
}

void mc__master_dir_changed(mc__master_t *m, const char *key, size_t klen, int64_t wall_ns)
{
    size_t end = klen && key[klen - 1] == '/' ? klen - 1 : klen; /* a marker's own '/' */
    const char *slash = end ? memrchr(key, '/', end) : NULL;
    if (!slash) { /* the root: no marker, the master keeps its times */
        m->root_ns = wall_ns;
        return;
    }
    mc__version_t *dir = mc__index_get(m->ix, key, (size_t)(slash - key) + 1);
    if (dir) {
        dir->mtime_ns = wall_ns;
        (void)mc__version_set_ctime(dir, wall_ns); /* the mtime: none to keep */
        mc__master_dirty(m, dir);
    }
}

int64_t mc__master_root_ns(const mc__master_t *m)
{
    return m->root_ns;
}

void mc__master_changed(mc__master_t *m, mc__version_t *v, int64_t wall_ns)
{
    (void)mc__version_set_ctime(v, wall_ns); /* out of memory: its mtime */
    mc__master_dirty(m, v);
}

uint32_t mc__master_subdirs(mc__master_t *m, const char *key, size_t klen, int delim)
{
    char dir[MC_KEY_MAX + 2];
    if (delim <= 0 || klen >= MC_KEY_MAX)
        return 0;
    memcpy(dir, key, klen);
    dir[klen] = (char)delim;
    size_t dlen = klen == 1 && key[0] == (char)delim ? 0 : klen + 1; /* the root: every key */
    uint32_t n = 0;
    mc__index_iter_t it;
    const char *k;
    size_t kl;
    mc__index_seek(m->ix, &it, dir, dlen, 1);
    while (mc__index_next(&it, &k, &kl, NULL) && has_prefix(k, kl, dir, dlen)) {
        const char *d = memchr(k + dlen, delim, kl - dlen);
        if (!d)
            continue;                                        /* a file of the directory */
        n += !(dlen == 0 && mc__master_is_inode_key(k, kl)); /* inodes: in no directory */
        skip_prefix(m, &it, k, (size_t)(d - k) + 1, delim);
    }
    return n;
}

/* A new inode key in ino[0..size) (MC__INODE_PLEN + 17 bytes); returns its
 * length. Its number is the next id, or with o.ino_seed a random one below
 * 2^62 (a mount shows it with bit 62 set) that no inode in the index has
 * and no name waiting for its file names. */
static size_t new_inode_key(mc__master_t *m, char *ino, size_t size)
{
    if (!m->o.ino_seed)
        return (size_t)snprintf(ino, size, "%s%llx", MC__INODE_PREFIX,
                                (unsigned long long)mc__master_new_id(m));
    for (;;) {
        uint64_t z = (m->ino_rng += 0x9e3779b97f4a7c15ULL); /* splitmix64 */
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        uint64_t no = (z ^ (z >> 31)) & ((1ULL << 62) - 1);
        size_t n = (size_t)snprintf(ino, size, "%s%llx", MC__INODE_PREFIX, (unsigned long long)no);
        if (no && !mc__index_get(m->ix, ino, n) && !(m->waiting.b && mc__ids_get(&m->waiting, no)))
            return n;
    }
}

/* A name entry for key naming inode key ino; NULL on ENOMEM. */
static mc__version_t *name_new(mc__master_t *m, const char *key, size_t klen, const char *ino,
                               size_t ilen)
{
    mc__version_t *n = mc__version_new(m, key, klen, 0);
    if (!n)
        return NULL;
    mc__vmore_t *x = mc__version_more(n);
    if (!x || !(x->link = mc__dup_key(ino, ilen))) {
        mc__version_free(m, n);
        return NULL;
    }
    x->linklen = (uint16_t)ilen;
    n->id = mc__master_new_id(m);
    n->state = MC__PUBLISHED; /* never evicted: it holds no space */
    return n;
}

int mc__master_link(mc__master_t *m, const char *from, size_t flen, const char *to, size_t tlen,
                    mc__version_t **out)
{
    int rc = check_pair(from, flen, to, tlen);
    if (rc < 0)
        return rc;
    if (from[flen - 1] == '/' || to[tlen - 1] == '/')
        return -EPERM; /* a directory */
    mc__version_t *src = mc__index_get(m->ix, from, flen);
    mc__version_t *f = mc__master_resolve(m, src);
    if (!f)
        return -ENOENT;
    if (mc__index_get(m->ix, to, tlen))
        return -EEXIST;
    char ino[MC__INODE_PLEN + 17];
    size_t ilen = f->klen;
    if (mc__vmore(src)->link)
        memcpy(ino, mc__vmore(src)->link, mc__vmore(src)->linklen);
    else
        ilen = new_inode_key(m, ino, sizeof(ino));
    mc__version_t *dst = name_new(m, to, tlen, ino, ilen);
    mc__version_t *name = mc__vmore(src)->link ? NULL : name_new(m, from, flen, ino, ilen);
    char *ikey = mc__vmore(src)->link ? NULL : mc__dup_key(ino, ilen);
    mc__vmore_t *fx = mc__version_more(f); /* counts its names */
    if (!dst || !fx || (!mc__vmore(src)->link && (!name || !ikey)))
        goto nomem;
    /* Three inserts of absent keys at most (to, the inode key, from again):
     * with room reserved none can fail. */
    if (mc__index_reserve(m->ix, 3) < 0)
        goto nomem;
    mc__index_insert(m->ix, dst, NULL);
    if (!mc__vmore(src)->link) {
        /* The file moves to its inode key; from becomes a name of it. */
        mc__index_remove(m->ix, from, flen);
        mc__version_set_key(f, ikey, ilen);
        mc__index_insert(m->ix, f, NULL);
        mc__index_insert(m->ix, name, NULL);
        fx->links = 1;
    }
    fx->links++;
    mc__master_dirty(m, f);
    mc__master_dirty(m, dst);
    mc__master_dirty(m, name);
    *out = f;
    return 0;
nomem:
    if (dst)
        mc__version_destroy(m, dst);
    if (name)
        mc__version_destroy(m, name);
    free(ikey);
    return -ENOMEM;
}

mc__version_t *mc__master_next(mc__master_t *m, const char *after, size_t alen)
{
    mc__index_iter_t it;
    void *val = NULL;
    mc__index_seek(m->ix, &it, alen ? after : NULL, alen, alen != 0);
    return mc__index_next(&it, NULL, NULL, &val) ? val : NULL;
}
