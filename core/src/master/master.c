/*
 * master.c - the metadata master's logic (see master.h).
 *
 * Published versions sit in an ordered index (key -> version) and on an LRU
 * list (least recently used at the head) that eviction walks. Retired
 * versions that still have a handle or a lease wait on a second list until
 * the last handle goes and mc__master_sweep() finds the lease over. So every
 * version that holds space is on one of the two lists (or is pending and
 * its writer's), and dropping a segment reaches each of them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "master/index.h"
#include "master/master.h"

typedef struct segment {
    uint32_t id;
    uint64_t size;
    uint64_t hold_until; /* nothing new is placed here before then */
    mc__alloc_t *alloc;
    int avoid; /* placement takes it last (mc__master_segment_avoid) */
} segment_t;

struct mc__master {
    mc__index_t *ix;
    segment_t *segs;
    int nseg;
    uint64_t next_id;
    mc__master_opts_t o;
    mc__version_t lru;     /* sentinel: published, least recently used first */
    mc__version_t retired; /* sentinel: retired, waiting for their lease */
    uint64_t evicted;
};

static void list_init(mc__version_t *s)
{
    s->prev = s->next = s;
}

static void list_del(mc__version_t *v)
{
    if (!v->next)
        return;
    v->prev->next = v->next;
    v->next->prev = v->prev;
    v->prev = v->next = NULL;
}

static void list_add_tail(mc__version_t *s, mc__version_t *v)
{
    v->prev = s->prev;
    v->next = s;
    s->prev->next = v;
    s->prev = v;
}

static segment_t *seg_by_id(mc__master_t *m, uint32_t id)
{
    for (int i = 0; i < m->nseg; i++)
        if (m->segs[i].id == id)
            return &m->segs[i];
    return NULL;
}

int mc__master_new(mc__master_t **out, const mc__master_opts_t *o)
{
    mc__master_t *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->ix = mc__index_new();
    if (!m->ix) {
        free(m);
        return -ENOMEM;
    }
    m->o = *o;
    if (!m->o.align)
        m->o.align = 64;
    if (!m->o.evict_ratio_pct)
        m->o.evict_ratio_pct = 10;
    m->next_id = 1;
    list_init(&m->lru);
    list_init(&m->retired);
    *out = m;
    return 0;
}

static void version_release_space(mc__master_t *m, mc__version_t *v)
{
    for (uint32_t r = 0; r < v->nrep; r++) {
        segment_t *s = seg_by_id(m, v->rep[r].seg);
        if (s && v->rep[r].n)
            mc__alloc_put(s->alloc, v->rep[r].ext, (int)v->rep[r].n);
        free(v->rep[r].ext);
        v->rep[r].ext = NULL;
        v->rep[r].n = v->rep[r].cap = 0;
    }
    v->capacity = 0;
}

static void version_destroy(mc__master_t *m, mc__version_t *v)
{
    list_del(v);
    version_release_space(m, v);
    free(v->key);
    free(v);
}

/* A version leaves the index: free it now, or park it on the retired list
 * until its handles and lease end. */
static void retire(mc__master_t *m, mc__version_t *v, uint64_t now)
{
    list_del(v);
    v->state = MC__RETIRED;
    if (v->refs || v->lease_until > now)
        list_add_tail(&m->retired, v);
    else
        version_destroy(m, v);
}

static void free_published(void *p)
{
    mc__version_t *v = p;
    for (uint32_t r = 0; r < v->nrep; r++)
        free(v->rep[r].ext); /* the allocators go away as a whole */
    free(v->key);
    free(v);
}

void mc__master_free(mc__master_t *m)
{
    if (!m)
        return;
    /* Handles are closed before the master: what is left is only leased. */
    while (m->retired.next != &m->retired)
        version_destroy(m, m->retired.next);
    for (mc__version_t *v = m->lru.next; v != &m->lru; v = v->next)
        v->state = MC__RETIRED;
    list_init(&m->lru);
    mc__index_free(m->ix, free_published);
    for (int i = 0; i < m->nseg; i++)
        mc__alloc_destroy(m->segs[i].alloc);
    free(m->segs);
    free(m);
}

int mc__master_add_segment(mc__master_t *m, uint32_t id, uint64_t size)
{
    if (seg_by_id(m, id))
        return -EEXIST;
    segment_t *ns = realloc(m->segs, sizeof(*ns) * (size_t)(m->nseg + 1));
    if (!ns)
        return -ENOMEM;
    m->segs = ns;
    segment_t *s = &m->segs[m->nseg];
    memset(s, 0, sizeof(*s));
    int rc = mc__alloc_create(&s->alloc, size, m->o.align);
    if (rc < 0)
        return rc;
    s->id = id;
    s->size = mc__alloc_size(s->alloc);
    s->avoid = 0;
    m->nseg++;
    return 0;
}

void mc__version_drop_replica(mc__version_t *v, uint32_t seg)
{
    for (uint32_t r = 0; r < v->nrep;) {
        if (v->rep[r].seg != seg) {
            r++;
            continue;
        }
        free(v->rep[r].ext);
        memmove(&v->rep[r], &v->rep[r + 1], sizeof(v->rep[0]) * (v->nrep - r - 1));
        v->nrep--;
        memset(&v->rep[v->nrep], 0, sizeof(v->rep[0]));
    }
}

static int has_replica_on(const mc__version_t *v, uint32_t seg)
{
    for (uint32_t r = 0; r < v->nrep; r++)
        if (v->rep[r].seg == seg)
            return 1;
    return 0;
}

size_t mc__master_drop_segment(mc__master_t *m, uint32_t id, uint64_t now)
{
    int at = -1;
    for (int i = 0; i < m->nseg; i++)
        if (m->segs[i].id == id)
            at = i;
    if (at < 0)
        return 0;
    /* Every version on the LRU list is published; retired ones lose their
     * replica records on the segment too (their space is gone with it). */
    size_t lost = 0;
    mc__version_t *v = m->lru.next;
    while (v != &m->lru) {
        mc__version_t *next = v->next;
        if (has_replica_on(v, id)) {
            mc__version_drop_replica(v, id);
            if (v->nrep == 0) {
                mc__index_remove(m->ix, v->key, v->klen);
                retire(m, v, now);
                lost++;
            }
        }
        v = next;
    }
    for (v = m->retired.next; v != &m->retired; v = v->next)
        mc__version_drop_replica(v, id);
    mc__alloc_destroy(m->segs[at].alloc);
    memmove(&m->segs[at], &m->segs[at + 1], sizeof(m->segs[0]) * (size_t)(m->nseg - at - 1));
    m->nseg--;
    return lost;
}

void mc__master_hold_segment(mc__master_t *m, uint32_t id, uint64_t until)
{
    segment_t *s = seg_by_id(m, id);
    if (s)
        s->hold_until = until;
}

int mc__master_segment_held(mc__master_t *m, uint32_t id, uint64_t now)
{
    segment_t *s = seg_by_id(m, id);
    return s && s->hold_until > now;
}

int mc__master_has_segment(const mc__master_t *m, uint32_t id)
{
    for (int i = 0; i < m->nseg; i++)
        if (m->segs[i].id == id)
            return 1;
    return 0;
}

mc__version_t *mc__master_find(mc__master_t *m, const char *key, size_t klen)
{
    return mc__index_get(m->ix, key, klen);
}

void mc__master_touch(mc__master_t *m, mc__version_t *v, uint64_t now, int lease)
{
    if (v->state == MC__PUBLISHED) {
        list_del(v);
        list_add_tail(&m->lru, v);
    }
    if (lease && now + m->o.lease_ms > v->lease_until)
        v->lease_until = now + m->o.lease_ms;
}

void mc__master_ref(mc__version_t *v)
{
    v->refs++;
}

void mc__master_unref(mc__master_t *m, mc__version_t *v, uint64_t now)
{
    if (--v->refs == 0 && v->state == MC__RETIRED && v->lease_until <= now)
        version_destroy(m, v); /* still leased: mc__master_sweep() frees it */
}

static char *dup_key(const char *key, size_t klen)
{
    char *k = malloc(klen + 1);
    if (k) {
        memcpy(k, key, klen);
        k[klen] = '\0';
    }
    return k;
}

static uint64_t seg_free(const segment_t *s)
{
    return mc__alloc_size(s->alloc) - mc__alloc_used(s->alloc);
}

/* Placement order: segments to avoid last, then the most free space first. */
static int place_before(const segment_t *a, const segment_t *b)
{
    if (a->avoid != b->avoid)
        return !a->avoid;
    return seg_free(a) > seg_free(b);
}

int mc__master_begin(mc__master_t *m, const char *key, size_t klen, const mc_put_opts_t *po,
                     uint64_t now, mc__version_t **out)
{
    return mc__master_begin_at(m, key, klen, po, -1, 0, now, out);
}

int mc__master_begin_at(mc__master_t *m, const char *key, size_t klen, const mc_put_opts_t *po,
                        int64_t pref_seg, uint64_t need, uint64_t now, mc__version_t **out)
{
    int rc = mc_key_check(key, klen);
    if (rc < 0)
        return rc;
    if (m->nseg == 0)
        return -ENOSPC;
    /* Segments on hold take nothing new (mc__master_hold_segment()). */
    char used[256] = {0};
    uint32_t usable = 0;
    for (int i = 0; i < m->nseg && i < 256; i++) {
        if (m->segs[i].hold_until > now)
            used[i] = 1;
        else
            usable++;
    }
    if (usable == 0)
        return -EAGAIN;
    mc__version_t *v = calloc(1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    v->key = dup_key(key, klen);
    if (!v->key) {
        free(v);
        return -ENOMEM;
    }
    v->klen = klen;
    v->state = MC__PENDING;
    v->mode = po && po->mode ? (po->mode & 07777) : 0644;
    v->mtime_ns = po ? po->mtime_ns : 0; /* 0: the commit's time (service.c) */
    v->pin = po ? po->pin : MC_PIN_NONE;
    if (v->pin == MC_PIN_SOFT && po->soft_pin_ttl_ms)
        v->pin_until = now + po->soft_pin_ttl_ms;

    /* Best-effort placement: each replica on a different segment, the
     * preferred one first when it is mounted and has need bytes free, then
     * the ones with the most free space. */
    uint32_t want = po && po->replica_num ? po->replica_num : 1;
    if (want > MC__MAX_REPLICAS)
        want = MC__MAX_REPLICAS;
    if (want > (uint32_t)m->nseg)
        want = (uint32_t)m->nseg;
    v->want = want; /* segments on hold count: the repair fills them later */
    if (want > usable)
        want = usable;
    uint32_t r0 = 0;
    for (int i = 0; pref_seg >= 0 && i < m->nseg && i < 256; i++) {
        if (!used[i] && m->segs[i].id == (uint32_t)pref_seg && !m->segs[i].avoid &&
            seg_free(&m->segs[i]) >= need && seg_free(&m->segs[i]) > 0) {
            used[i] = 1;
            v->rep[r0++].seg = (uint32_t)pref_seg;
            break;
        }
    }
    for (uint32_t r = r0; r < want; r++) {
        int best = -1;
        for (int i = 0; i < m->nseg && i < 256; i++)
            if (!used[i] && (best < 0 || place_before(&m->segs[i], &m->segs[best])))
                best = i;
        used[best] = 1;
        v->rep[r].seg = m->segs[best].id;
    }
    v->nrep = want;
    *out = v;
    return 0;
}

/* Allocates len more bytes at the end of replica r. */
static int replica_grow(mc__master_t *m, mc__replica_t *rep, uint64_t len)
{
    segment_t *s = seg_by_id(m, rep->seg);
    if (!s)
        return -ENOSPC;
    mc__extent_t got[64];
    int n = mc__alloc_get(s->alloc, len, got, 64);
    if (n < 0)
        return n;
    if (rep->n + (uint32_t)n > rep->cap) {
        uint32_t cap = rep->cap ? rep->cap * 2 : 4;
        while (cap < rep->n + (uint32_t)n)
            cap *= 2;
        mc__extent_t *e = realloc(rep->ext, sizeof(*e) * cap);
        if (!e) {
            mc__alloc_put(s->alloc, got, n);
            return -ENOMEM;
        }
        rep->ext = e;
        rep->cap = cap;
    }
    for (int i = 0; i < n; i++) {
        /* Merge with the previous extent when contiguous. */
        if (rep->n && rep->ext[rep->n - 1].off + rep->ext[rep->n - 1].len == got[i].off)
            rep->ext[rep->n - 1].len += got[i].len;
        else
            rep->ext[rep->n++] = got[i];
    }
    return 0;
}

/* Returns bytes beyond keep (rounded) at the end of replica r. */
static void replica_trim(mc__master_t *m, mc__replica_t *rep, uint64_t keep)
{
    segment_t *s = seg_by_id(m, rep->seg);
    uint64_t at = 0;
    uint32_t i = 0;
    for (; i < rep->n; i++) {
        mc__extent_t *e = &rep->ext[i];
        if (at + e->len > keep) {
            uint64_t head = keep - at; /* aligned: keep is rounded */
            if (head) {
                mc__extent_t tail = {e->off + head, e->len - head};
                if (s)
                    mc__alloc_put(s->alloc, &tail, 1);
                e->len = head;
                i++;
            }
            break;
        }
        at += e->len;
    }
    if (i < rep->n && s)
        mc__alloc_put(s->alloc, &rep->ext[i], (int)(rep->n - i));
    if (i < rep->n)
        rep->n = i;
}

/* Rounds len up to the allocation unit (shared by every segment). */
static uint64_t round_up(const mc__master_t *m, uint64_t len)
{
    return (len + m->o.align - 1) & ~(m->o.align - 1);
}

static uint64_t total_size(const mc__master_t *m)
{
    uint64_t t = 0;
    for (int i = 0; i < m->nseg; i++)
        t += m->segs[i].size;
    return t;
}

static uint64_t total_used(const mc__master_t *m)
{
    uint64_t t = 0;
    for (int i = 0; i < m->nseg; i++)
        t += mc__alloc_used(m->segs[i].alloc);
    return t;
}

static int evictable(const mc__version_t *v, uint64_t now, int allow_soft)
{
    if (v->refs || v->lease_until > now || v->pin == MC_PIN_HARD)
        return 0;
    if (v->pin == MC_PIN_SOFT && !allow_soft && (v->pin_until == 0 || v->pin_until > now))
        return 0;
    return 1;
}

size_t mc__master_evict(mc__master_t *m, uint64_t target, uint64_t now)
{
    size_t n = 0;
    mc__master_sweep(m, now);
    for (int pass = 0; pass < 2 && total_used(m) > target; pass++) {
        mc__version_t *v = m->lru.next;
        while (v != &m->lru && total_used(m) > target) {
            mc__version_t *next = v->next;
            if (evictable(v, now, pass)) {
                mc__index_remove(m->ix, v->key, v->klen);
                retire(m, v, now);
                m->evicted++;
                n++;
            }
            v = next;
        }
    }
    return n;
}

static int evict_enabled(const mc__master_t *m)
{
    return m->o.evict_high_pct > 0;
}

static uint64_t low_mark(const mc__master_t *m)
{
    uint64_t total = total_size(m);
    unsigned pct =
        m->o.evict_high_pct > m->o.evict_ratio_pct ? m->o.evict_high_pct - m->o.evict_ratio_pct : 0;
    return total / 100 * pct;
}

int mc__master_reserve(mc__master_t *m, mc__version_t *v, uint64_t capacity, uint64_t now)
{
    if (capacity <= v->capacity)
        return 0;
    if (v->nrep == 0)
        return -EIO; /* every segment it was placed on is gone */
    if (capacity > total_size(m))
        return -EFBIG;
    uint64_t want = round_up(m, capacity - v->capacity);
    uint32_t done = 0;
    int rc = 0;
    for (; done < v->nrep; done++) {
        rc = replica_grow(m, &v->rep[done], want);
        if (rc == -ENOSPC) {
            /* Space held by expired leases first, then eviction. */
            mc__master_sweep(m, now);
            rc = replica_grow(m, &v->rep[done], want);
            if (rc == -ENOSPC && evict_enabled(m)) {
                uint64_t target = low_mark(m);
                uint64_t total = total_size(m);
                if (total - want < target)
                    target = total - want;
                mc__master_evict(m, target, now);
                rc = replica_grow(m, &v->rep[done], want);
            }
        }
        if (rc < 0)
            break;
    }
    if (rc < 0) {
        for (uint32_t r = 0; r < done; r++)
            replica_trim(m, &v->rep[r], v->capacity);
        return rc;
    }
    v->capacity += want;
    if (evict_enabled(m) && total_used(m) > total_size(m) / 100 * m->o.evict_high_pct)
        mc__master_evict(m, low_mark(m), now);
    return 0;
}

int mc__master_set_key(mc__master_t *m, mc__version_t *v, const char *key, size_t klen)
{
    (void)m;
    int rc = mc_key_check(key, klen);
    if (rc < 0)
        return rc;
    char *k = dup_key(key, klen);
    if (!k)
        return -ENOMEM;
    free(v->key);
    v->key = k;
    v->klen = klen;
    return 0;
}

int mc__master_commit(mc__master_t *m, mc__version_t *v, uint64_t size, unsigned flags,
                      uint64_t now)
{
    if (size > v->capacity)
        return -EINVAL;
    if ((flags & MC_PUT_NOREPLACE) && mc__index_get(m->ix, v->key, v->klen))
        return -EEXIST;
    uint64_t keep = round_up(m, size);
    if (keep < v->capacity) {
        for (uint32_t r = 0; r < v->nrep; r++)
            replica_trim(m, &v->rep[r], keep);
        v->capacity = keep;
    }
    /* Make sure the index can take the key before anything changes. */
    void *old = NULL;
    int rc = mc__index_insert(m->ix, v->key, v->klen, v, &old);
    if (rc < 0)
        return rc;
    v->size = size;
    v->id = m->next_id++;
    v->state = MC__PUBLISHED;
    list_add_tail(&m->lru, v);
    if (rc == 1 && old)
        retire(m, old, now);
    return 0;
}

void mc__master_abort(mc__master_t *m, mc__version_t *v)
{
    version_destroy(m, v);
}

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

int mc__master_remove(mc__master_t *m, const char *key, size_t klen, unsigned flags, uint64_t now)
{
    int rc = mc_key_check(key, klen);
    if (rc < 0)
        return rc;
    if ((flags & MC_REMOVE_DIR) && key[klen - 1] != '/')
        return -EINVAL;
    mc__version_t *v = mc__index_get(m->ix, key, klen);
    if ((flags & MC_REMOVE_DIR) && prefix_has_children(m, key, klen))
        return -ENOTEMPTY;
    if (!v)
        return -ENOENT;
    if (!(flags & MC_REMOVE_FORCE) && (v->refs || v->lease_until > now))
        return -EBUSY;
    mc__index_remove(m->ix, key, klen);
    retire(m, v, now);
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
    if ((flags & MC_RENAME_NOREPLACE) && mc__index_get(m->ix, to, tlen))
        return -EEXIST;
    char *k = dup_key(to, tlen);
    if (!k)
        return -ENOMEM;
    void *old = NULL;
    int rc = mc__index_insert(m->ix, to, tlen, v, &old);
    if (rc < 0) {
        free(k);
        return rc;
    }
    mc__index_remove(m->ix, from, flen);
    free(v->key);
    v->key = k;
    v->klen = tlen;
    if (rc == 1 && old)
        retire(m, old, now);
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
        keys[i] = malloc(nl + 1);
        if (!keys[i]) {
            while (i--)
                free(keys[i]);
            free(keys);
            free(vs);
            return -ENOMEM;
        }
        memcpy(keys[i], to, tlen);
        memcpy(keys[i] + tlen, vs[i]->key + flen, vs[i]->klen - flen);
        keys[i][nl] = '\0';
    }
    if (dest_marker) {
        mc__index_remove(m->ix, to, tlen);
        retire(m, dest_marker, now);
    }
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        mc__version_t *v = vs[i];
        size_t nl = v->klen - flen + tlen;
        mc__index_remove(m->ix, v->key, v->klen);
        if (rc == 0)
            rc = mc__index_insert(m->ix, keys[i], nl, v, NULL);
        if (rc < 0) {
            /* Out of memory half-way: the object is lost, say so. */
            retire(m, v, now);
            free(keys[i]);
            continue;
        }
        free(v->key);
        v->key = keys[i];
        v->klen = nl;
    }
    free(keys);
    free(vs);
    return rc;
}

int mc__master_rename(mc__master_t *m, const char *from, size_t flen, const char *to, size_t tlen,
                      unsigned flags, uint64_t now)
{
    int rc = mc_key_check(from, flen);
    if (rc == 0)
        rc = mc_key_check(to, tlen);
    if (rc < 0)
        return rc;
    if (flags & MC_RENAME_PREFIX)
        return rename_prefix(m, from, flen, to, tlen, flags, now);
    return rename_one(m, from, flen, to, tlen, flags, now);
}

void mc__version_stat(const mc__version_t *v, uint64_t now, mc_stat_t *st)
{
    st->size = v->size;
    st->version = v->id;
    st->mtime_ns = v->mtime_ns;
    st->mode = v->mode;
    st->replicas = v->nrep;
    st->flags = 0;
    if (v->refs || v->lease_until > now)
        st->flags |= MC_STAT_LEASED;
    if (v->pin == MC_PIN_SOFT && (v->pin_until == 0 || v->pin_until > now))
        st->flags |= MC_STAT_SOFT_PIN;
    if (v->pin == MC_PIN_HARD)
        st->flags |= MC_STAT_HARD_PIN;
}

struct list_buf {
    mc_list_t l;
    size_t cap;
};

static int list_push(struct list_buf *b, const char *key, size_t klen, int is_prefix,
                     const mc__version_t *v, uint64_t now)
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
    char *k = dup_key(key, klen);
    if (!k)
        return -ENOMEM;
    e->key = k;
    e->klen = klen;
    e->is_prefix = is_prefix;
    if (v)
        mc__version_stat(v, now, &e->st);
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
        if (b->l.n == max) {
            b->l.more = 1;
            break;
        }
        const char *d = delim > 0 ? memchr(k + plen, delim, kl - plen) : NULL;
        if (d) { /* a deeper key, or a directory marker: one prefix entry */
            size_t cl = (size_t)(d - k) + 1;
            /* The marker's metadata (mode, mtime) stands for the prefix. */
            rc = list_push(b, k, cl, 1, mc__index_get(m->ix, k, cl), now);
            if (rc < 0)
                break;
            memcpy(skip, k, cl);
            if ((unsigned char)delim == 0xff) {
                /* No byte sorts after the delimiter: walk past the run. */
                mc__index_iter_t run = it;
                while (mc__index_next(&run, &k, &kl, NULL) && has_prefix(k, kl, skip, cl))
                    it = run;
                continue;
            }
            skip[cl - 1] = (char)(delim + 1);
            mc__index_seek(m->ix, &it, skip, cl, 0);
            continue;
        }
        if (delim > 0 && kl < MC_KEY_MAX) {
            /* A directory of the same name shadows the file. */
            memcpy(skip, k, kl);
            skip[kl] = (char)delim;
            if (prefix_has_children(m, skip, kl + 1) || mc__index_get(m->ix, skip, kl + 1))
                continue;
        }
        rc = list_push(b, k, kl, 0, val, now);
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
    *v = mc__index_get(m->ix, key, klen);
    return *v ? MC_LOOKUP_FILE : -ENOENT;
}

int mc__master_set_meta(mc__master_t *m, const char *key, size_t klen, unsigned what, uint32_t mode,
                        int64_t mtime_ns)
{
    mc__version_t *v = mc__index_get(m->ix, key, klen);
    if (!v)
        return -ENOENT;
    if (what & MC_META_MODE)
        v->mode = mode & 07777;
    if (what & MC_META_MTIME)
        v->mtime_ns = mtime_ns;
    return 0;
}

void mc__master_space(const mc__master_t *m, mc_space_t *sp)
{
    sp->total = total_size(m);
    sp->used = total_used(m);
    sp->objects = mc__index_count(m->ix);
    sp->evicted = m->evicted;
}

void mc__master_sweep(mc__master_t *m, uint64_t now)
{
    mc__version_t *v = m->retired.next;
    while (v != &m->retired) {
        mc__version_t *next = v->next;
        if (!v->refs && v->lease_until <= now)
            version_destroy(m, v);
        v = next;
    }
}

void mc__master_segment_avoid(mc__master_t *m, uint32_t id, int avoid)
{
    segment_t *s = seg_by_id(m, id);
    if (s)
        s->avoid = avoid;
}

uint64_t mc__master_segment_free(const mc__master_t *m, uint32_t id)
{
    for (int i = 0; i < m->nseg; i++)
        if (m->segs[i].id == id)
            return seg_free(&m->segs[i]);
    return 0;
}

int mc__master_replica_alloc(mc__master_t *m, uint32_t seg, uint64_t len, mc__replica_t *rep)
{
    memset(rep, 0, sizeof(*rep));
    rep->seg = seg;
    int rc = replica_grow(m, rep, round_up(m, len));
    if (rc < 0)
        mc__master_replica_release(m, rep);
    return rc;
}

void mc__master_replica_release(mc__master_t *m, mc__replica_t *rep)
{
    segment_t *s = seg_by_id(m, rep->seg);
    if (s && rep->n)
        mc__alloc_put(s->alloc, rep->ext, (int)rep->n);
    free(rep->ext);
    rep->ext = NULL;
    rep->n = rep->cap = 0;
}

int mc__master_replica_attach(mc__version_t *v, mc__replica_t *rep)
{
    if (has_replica_on(v, rep->seg))
        return -EEXIST;
    if (v->nrep >= MC__MAX_REPLICAS)
        return -ENOSPC;
    v->rep[v->nrep++] = *rep;
    memset(rep, 0, sizeof(*rep));
    return 0;
}

int mc__version_take_replica(mc__version_t *v, uint32_t seg, mc__replica_t *rep)
{
    for (uint32_t r = 0; r < v->nrep; r++) {
        if (v->rep[r].seg != seg)
            continue;
        *rep = v->rep[r];
        memmove(&v->rep[r], &v->rep[r + 1], sizeof(v->rep[0]) * (v->nrep - r - 1));
        v->nrep--;
        memset(&v->rep[v->nrep], 0, sizeof(v->rep[0]));
        return 1;
    }
    return 0;
}

mc__version_t *mc__master_next(mc__master_t *m, const char *after, size_t alen)
{
    mc__index_iter_t it;
    void *val = NULL;
    mc__index_seek(m->ix, &it, alen ? after : NULL, alen, alen != 0);
    return mc__index_next(&it, NULL, NULL, &val) ? val : NULL;
}
