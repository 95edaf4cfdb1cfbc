/*
 * master.c - the metadata master's logic (see master.h): the master and its
 * segments, versions' lifetime (handles, leases, retiring, sweeping) and
 * their replica records. A put's life and the space it takes are in put.c,
 * the key namespace (remove, rename, list, lookup) in namespace.c; the lists
 * and fields they share are described in master_i.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "master/master_i.h"

/* Under AddressSanitizer versions come from malloc, which it watches. */
#if defined(__SANITIZE_ADDRESS__)
#define MC__NO_SLAB 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MC__NO_SLAB 1
#endif
#endif
#ifndef MC__NO_SLAB
#define MC__NO_SLAB 0
#endif

mc__segment_t *mc__master_seg(mc__master_t *m, uint32_t id)
{
    for (int i = 0; i < m->nseg; i++)
        if (m->segs[i].id == id)
            return &m->segs[i];
    return NULL;
}

char *mc__dup_key(const char *key, size_t klen)
{
    char *k = malloc(klen + 1);
    if (k) {
        memcpy(k, key, klen);
        k[klen] = '\0';
    }
    return k;
}

/* The index's key callback: a version's key is its own. */
static const char *version_key(const void *val, size_t *len)
{
    const mc__version_t *v = val;
    *len = v->klen;
    return v->key;
}

int mc__master_new(mc__master_t **out, const mc__master_opts_t *o)
{
    mc__master_t *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->ix = mc__index_new(version_key);
#if !MC__NO_SLAB
    m->slab = mc__slab_new();
    if (!m->slab) {
        mc__index_free(m->ix, NULL);
        m->ix = NULL;
    }
#endif
    if (!m->ix) {
        free(m);
        return -ENOMEM;
    }
    m->o = *o;
    if (!m->o.align)
        m->o.align = 64;
    if (!m->o.evict_ratio_pct)
        m->o.evict_ratio_pct = 10;
    m->next_id = o->first_id ? o->first_id : 1;
    m->stamp = m->next_id;
    mc__list_init(&m->lru);
    mc__list_init(&m->retired);
    if (mc__ids_init(&m->rebuilt) < 0) {
        mc__index_free(m->ix, NULL);
        mc__slab_free_all(m->slab);
        free(m);
        return -ENOMEM;
    }
    *out = m;
    return 0;
}

mc__version_t *mc__version_new(mc__master_t *m, const char *key, size_t klen, uint32_t repcap)
{
    size_t reps = sizeof(mc__replica_t) * repcap, size = sizeof(mc__version_t) + reps + klen + 1;
    int slab = m->slab && size <= MC__SLAB_MAX;
    mc__version_t *v = slab ? mc__slab_alloc(m->slab, size) : calloc(1, size);
    if (!v)
        return NULL;
    if (slab)
        v->flags = MC__V_SLAB;
    v->rep = (mc__replica_t *)(v + 1);
    v->repcap = (uint8_t)repcap;
    v->key = (char *)v->rep + reps;
    memcpy(v->key, key, klen);
    v->klen = (uint16_t)klen;
    return v;
}

void mc__version_set_key(mc__version_t *v, char *k, size_t klen)
{
    if (v->flags & MC__V_KEY_OWNED)
        free(v->key);
    v->key = k;
    v->klen = (uint16_t)klen;
    v->flags |= MC__V_KEY_OWNED;
}

mc__vmore_t *mc__version_more(mc__version_t *v)
{
    if (!v->more)
        v->more = calloc(1, sizeof(*v->more));
    return v->more;
}

void mc__version_free(mc__master_t *m, mc__version_t *v)
{
    for (uint32_t r = 0; r < v->nrep; r++)
        mc__replica_free_ext(&v->rep[r]);
    if (v->flags & MC__V_REP_OWNED)
        free(v->rep);
    if (v->flags & MC__V_KEY_OWNED)
        free(v->key);
    if (v->more) {
        free(v->more->xattr);
        free(v->more->link);
        free(v->more);
    }
    if (v->flags & MC__V_SLAB)
        mc__slab_free(m->slab, v);
    else
        free(v);
}

static void version_release_space(mc__master_t *m, mc__version_t *v)
{
    for (uint32_t r = 0; r < v->nrep; r++)
        mc__master_replica_release(m, &v->rep[r]);
    v->capacity = 0;
}

/* A rebuilt version leaves: its entry by id stays, with no version, so that
 * later records of it are refused. */
static void forget_rebuilt(mc__master_t *m, mc__version_t *v)
{
    if (!(v->flags & MC__V_REBUILT))
        return;
    mc__recovered_t *e = (mc__recovered_t *)mc__ids_get(&m->rebuilt, v->id);
    if (e && e->v == v)
        e->v = NULL;
    v->flags &= (uint8_t)~MC__V_REBUILT;
}

void mc__version_destroy(mc__master_t *m, mc__version_t *v)
{
    mc__list_del(v);
    mc__master_undirty(m, v);
    forget_rebuilt(m, v);
    version_release_space(m, v);
    mc__version_free(m, v);
}

void mc__master_retire(mc__master_t *m, mc__version_t *v, uint64_t now)
{
    mc__list_del(v);
    mc__master_undirty(m, v);
    forget_rebuilt(m, v); /* gone: a late record of it must not bring it back */
    if (m->notice && v->stamp)
        m->notice(m->notice_arg, m, v, 1);
    v->state = MC__RETIRED;
    if (v->refs || v->lease_until > now)
        mc__list_add_tail(&m->retired, v);
    else
        mc__version_destroy(m, v);
}

void mc__master_free(mc__master_t *m)
{
    if (!m)
        return;
    /* Handles are closed before the master: what is left is only leased. */
    while (m->retired.next != &m->retired)
        mc__version_destroy(m, m->retired.next);
    for (mc__version_t *v = m->lru.next; v != &m->lru; v = v->next)
        v->state = MC__RETIRED;
    mc__list_init(&m->lru);
    /* The published versions' memory (their space: the allocators go away
     * as a whole). A walk has read a version's key before handing it out. */
    mc__index_iter_t it;
    void *val;
    mc__index_seek(m->ix, &it, NULL, 0, 0);
    while (mc__index_next(&it, NULL, NULL, &val))
        mc__version_free(m, val);
    mc__index_free(m->ix, NULL);
    size_t at = 0;
    for (mc__idnode_t *e; m->rebuilt.b && (e = mc__ids_first(&m->rebuilt, &at));)
        free(mc__ids_del(&m->rebuilt, e->id));
    mc__ids_fini(&m->rebuilt);
    for (int i = 0; i < m->nseg; i++)
        mc__alloc_destroy(m->segs[i].alloc);
    free(m->segs);
    free(m->dirty);
    mc__slab_free_all(m->slab);
    free(m);
}

int mc__master_add_segment(mc__master_t *m, uint32_t id, uint64_t size)
{
    if (mc__master_seg(m, id))
        return -EEXIST;
    mc__segment_t *ns = realloc(m->segs, sizeof(*ns) * (size_t)(m->nseg + 1));
    if (!ns)
        return -ENOMEM;
    m->segs = ns;
    mc__segment_t *s = &m->segs[m->nseg];
    memset(s, 0, sizeof(*s));
    uint64_t unit = m->o.align < MC__SMALL_UNIT ? m->o.align : MC__SMALL_UNIT;
    int rc = mc__alloc_create(&s->alloc, size, unit);
    if (rc < 0)
        return rc;
    s->id = id;
    s->size = mc__alloc_size(s->alloc);
    s->avoid = 0;
    m->nseg++;
    return 0;
}

/* Takes replica r out of v's array (its extents are the caller's). */
static void replica_unlink(mc__version_t *v, uint32_t r)
{
    memmove(&v->rep[r], &v->rep[r + 1], sizeof(v->rep[0]) * (v->nrep - r - 1));
    v->nrep--;
    memset(&v->rep[v->nrep], 0, sizeof(v->rep[0]));
}

void mc__version_drop_replica(mc__version_t *v, uint32_t seg)
{
    for (uint32_t r = 0; r < v->nrep;) {
        if (v->rep[r].seg != seg) {
            r++;
            continue;
        }
        mc__replica_free_ext(&v->rep[r]);
        replica_unlink(v, r);
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
                mc__master_retire(m, v, now);
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
    mc__segment_t *s = mc__master_seg(m, id);
    if (s)
        s->hold_until = until;
}

int mc__master_segment_held(mc__master_t *m, uint32_t id, uint64_t now)
{
    mc__segment_t *s = mc__master_seg(m, id);
    return s && s->hold_until > now;
}

int mc__master_has_segment(const mc__master_t *m, uint32_t id)
{
    for (int i = 0; i < m->nseg; i++)
        if (m->segs[i].id == id)
            return 1;
    return 0;
}

void mc__master_segment_avoid(mc__master_t *m, uint32_t id, int avoid)
{
    mc__segment_t *s = mc__master_seg(m, id);
    if (s)
        s->avoid = avoid;
}

uint64_t mc__master_segment_free(const mc__master_t *m, uint32_t id)
{
    for (int i = 0; i < m->nseg; i++)
        if (m->segs[i].id == id)
            return mc__segment_free(&m->segs[i]);
    return 0;
}

mc__version_t *mc__master_resolve(mc__master_t *m, mc__version_t *v)
{
    if (!v || !mc__vmore(v)->link)
        return v;
    return mc__index_get(m->ix, mc__vmore(v)->link, mc__vmore(v)->linklen);
}

mc__version_t *mc__master_find(mc__master_t *m, const char *key, size_t klen)
{
    return mc__master_resolve(m, mc__index_get(m->ix, key, klen));
}

int mc__master_is_inode_key(const char *key, size_t klen)
{
    return klen >= MC__INODE_PLEN && memcmp(key, MC__INODE_PREFIX, MC__INODE_PLEN) == 0;
}

void mc__master_touch(mc__master_t *m, mc__version_t *v, uint64_t now, int lease)
{
    if (v->state == MC__PUBLISHED) {
        mc__list_del(v);
        mc__list_add_tail(&m->lru, v);
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
        mc__version_destroy(m, v); /* still leased: mc__master_sweep() frees it */
}

void mc__version_stat(const mc__version_t *v, uint64_t now, mc_stat_t *st)
{
    st->size = v->size;
    st->version = v->id;
    st->mtime_ns = v->mtime_ns;
    st->atime_ns = v->atime_ns;
    st->ctime_ns = v->ctime_ns;
    st->mode = v->mode;
    st->uid = v->uid;
    st->gid = v->gid;
    st->type = v->type;
    st->rdev = mc__vmore(v)->rdev;
    st->nlink = mc__vmore(v)->links ? mc__vmore(v)->links : 1;
    st->ino = mc__vmore(v)->links ? strtoull(v->key + MC__INODE_PLEN, NULL, 16) : 0;
    st->replicas = v->nrep;
    st->alloc = v->nrep ? mc__replica_bytes(&v->rep[0]) : 0;
    st->flags = 0;
    if (v->refs || v->lease_until > now)
        st->flags |= MC_STAT_LEASED;
    if (v->pin == MC_PIN_SOFT && (mc__vmore(v)->pin_until == 0 || mc__vmore(v)->pin_until > now))
        st->flags |= MC_STAT_SOFT_PIN;
    if (v->pin == MC_PIN_HARD)
        st->flags |= MC_STAT_HARD_PIN;
}

void mc__master_sweep(mc__master_t *m, uint64_t now)
{
    mc__version_t *v = m->retired.next;
    while (v != &m->retired) {
        mc__version_t *next = v->next;
        if (!v->refs && v->lease_until <= now)
            mc__version_destroy(m, v);
        v = next;
    }
}

int mc__master_replica_attach(mc__version_t *v, mc__replica_t *rep)
{
    if (has_replica_on(v, rep->seg))
        return -EEXIST;
    if (v->nrep >= MC__MAX_REPLICAS)
        return -ENOSPC;
    if (v->nrep >= v->repcap) {
        /* Out of the room it was made with: a repair's replica, or a
         * rebuilt version's next one. */
        mc__replica_t *a = malloc(sizeof(*a) * MC__MAX_REPLICAS);
        if (!a)
            return -ENOMEM;
        memcpy(a, v->rep, sizeof(*a) * v->nrep);
        if (v->flags & MC__V_REP_OWNED)
            free(v->rep);
        v->rep = a;
        v->repcap = MC__MAX_REPLICAS;
        v->flags |= MC__V_REP_OWNED;
    }
    v->rep[v->nrep++] = *rep;
    memset(rep, 0, sizeof(*rep));
    return 0;
}

int mc__version_has_replica(const mc__version_t *v, uint32_t seg)
{
    return has_replica_on(v, seg);
}

int mc__version_take_replica(mc__version_t *v, uint32_t seg, mc__replica_t *rep)
{
    for (uint32_t r = 0; r < v->nrep; r++) {
        if (v->rep[r].seg != seg)
            continue;
        *rep = v->rep[r];
        if (!rep->cap && rep->n) { /* v's ext1: the replica takes a copy along */
            if (!(rep->ext = malloc(sizeof(*rep->ext) * rep->n)))
                return -ENOMEM;
            memcpy(rep->ext, v->rep[r].ext, sizeof(*rep->ext) * rep->n);
            rep->cap = rep->n;
        } else if (!rep->cap) {
            rep->ext = NULL;
        }
        replica_unlink(v, r);
        return 1;
    }
    return 0;
}
