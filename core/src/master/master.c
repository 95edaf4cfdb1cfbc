/*
 * master.c - the metadata master's logic (see master.h): the master and its
 * segments, versions' lifetime (handles, leases, retiring, sweeping) and
 * their replica records. A put's life and the space it takes are in put.c,
 * eviction in evict.c, the key namespace (remove, rename, list, lookup) in
 * namespace.c; the fields they share (the access clock, the array of
 * retired versions) are described in master_i.h.
 */
#include <errno.h>
#include <stdio.h>
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
    return mc__vkey(v);
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
    if (m->o.lease_ms > MC__LEASE_MAX_MS)
        m->o.lease_ms = MC__LEASE_MAX_MS; /* a lease fits in 32 bits from its base */
    m->rng = 0x9e3779b97f4a7c15ULL;       /* any odd seed: eviction's samples need no secret */
    m->ino_rng = o->ino_seed;
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
    size_t size = mc__vrep_offset(klen) + sizeof(mc__replica_t) * repcap;
    int slab = m->slab && size <= MC__SLAB_MAX;
    mc__version_t *v = slab ? mc__slab_alloc(m->slab, size) : calloc(1, size);
    if (!v)
        return NULL;
    if (slab)
        v->flags = MC__V_SLAB;
    v->repcap = (uint8_t)repcap;
    memcpy(mc__vkey(v), key, klen); /* the allocation is zeroed: the NUL is there */
    v->klen = (uint16_t)klen;
    return v;
}

void mc__version_set_key(mc__version_t *v, char *k, size_t klen)
{
    if (v->flags & MC__V_KEY_OWNED)
        free(v->rare->key);
    else
        v->rare->klen_in = v->klen; /* the replicas stay after the first key */
    v->rare->key = k;
    v->klen = (uint16_t)klen;
    v->flags |= MC__V_KEY_OWNED;
}

mc__vmore_t *mc__version_more(mc__version_t *v)
{
    if (v->has_more)
        return v->rare;
    mc__vmore_t *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->atime_ns = v->atime_own; /* its word now points here */
    v->rare = x;
    v->has_more = 1;
    return x;
}

int mc__version_set_size(mc__version_t *v, uint64_t size)
{
    if (size < MC__VSIZE_BIG) {
        v->size = size;
        return 0;
    }
    if (!mc__version_more(v))
        return -ENOMEM;
    v->rare->size = size;
    v->size = MC__VSIZE_BIG;
    return 0;
}

int mc__version_set_ctime(mc__version_t *v, int64_t t)
{
    if (t == v->mtime_ns) {
        v->flags &= (uint8_t)~MC__V_CTIME;
        return 0;
    }
    if (!mc__version_more(v)) {
        v->flags &= (uint8_t)~MC__V_CTIME;
        return -ENOMEM;
    }
    v->rare->ctime_ns = t;
    v->flags |= MC__V_CTIME;
    return 0;
}

void mc__version_free(mc__master_t *m, mc__version_t *v)
{
    if (!mc__vcompact(v)) { /* a compact one's one extent is in x1 */
        mc__replica_t *rep = mc__vrep_array(v);
        for (uint32_t r = 0; r < v->nrep; r++)
            mc__replica_free_ext(&rep[r], NULL);
    }
    if (v->has_more) {
        if (v->flags & MC__V_REP_OWNED)
            free(v->rare->rep);
        if (v->flags & MC__V_KEY_OWNED)
            free(v->rare->key);
        free(v->rare->xattr);
        free(v->rare->link);
        free(v->rare);
    }
    if (v->flags & MC__V_SLAB)
        mc__slab_free(m->slab, v);
    else
        free(v);
}

static void version_release_space(mc__master_t *m, mc__version_t *v)
{
    for (uint32_t r = 0; r < v->nrep; r++) {
        mc__extent_t one;
        mc__replica_t rep = mc__vrep_get(v, r, &one);
        mc__replica_release_in(m, &rep, &one);
        mc__vrep_put(v, r, &rep, &one);
    }
    mc__version_set_cap(v, 0);
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

/* Parks retired v in the retired array. Returns 0 or -ENOMEM. */
static int retired_add(mc__master_t *m, mc__version_t *v)
{
    if (m->nretired == m->rcap) {
        size_t cap = m->rcap ? m->rcap * 2 : 64;
        mc__version_t **a = realloc(m->retired, sizeof(*a) * cap);
        if (!a)
            return -ENOMEM;
        m->retired = a;
        m->rcap = cap;
    }
    m->retired[m->nretired++] = v;
    v->rpos = (uint32_t)m->nretired;
    return 0;
}

/* Takes v out of the retired array if it is there (the last one takes its
 * place). */
static void retired_del(mc__master_t *m, mc__version_t *v)
{
    if (v->state != MC__RETIRED || !v->rpos)
        return;
    mc__version_t *last = m->retired[--m->nretired];
    m->retired[v->rpos - 1] = last;
    last->rpos = v->rpos;
    v->rpos = 0;
}

void mc__version_destroy(mc__master_t *m, mc__version_t *v)
{
    retired_del(m, v);
    mc__master_undirty(m, v);
    forget_rebuilt(m, v);
    version_release_space(m, v);
    mc__version_free(m, v);
}

void mc__master_retire(mc__master_t *m, mc__version_t *v, uint64_t now)
{
    mc__master_undirty(m, v);
    forget_rebuilt(m, v); /* gone: a late record of it must not bring it back */
    if (m->notice && (v->flags & MC__V_NOTED))
        m->notice(m->notice_arg, m, v, 1);
    v->state = MC__RETIRED;
    v->rpos = 0; /* was its access clock */
    if (!mc__vopen(v) && !mc__leased(m, v, now))
        mc__version_destroy(m, v);
    else if (retired_add(m, v) < 0)
        v->flags |= MC__V_LOST;
}

void mc__master_free(mc__master_t *m)
{
    if (!m)
        return;
    /* Handles are closed before the master: what is left is only leased. */
    while (m->nretired)
        mc__version_destroy(m, m->retired[m->nretired - 1]);
    free(m->retired);
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
    mc__ids_t *maps[] = {&m->waiting, &m->renamed_to}; /* a pair's block is its "to" entry */
    for (size_t i = 0; i < sizeof(maps) / sizeof(maps[0]); i++) {
        at = 0;
        for (mc__idnode_t *e; maps[i]->b && (e = mc__ids_first(maps[i], &at));)
            free(mc__ids_del(maps[i], e->id));
        mc__ids_fini(maps[i]);
    }
    mc__ids_fini(&m->renamed_from);
    for (int i = 0; i < m->nseg; i++)
        mc__alloc_destroy(m->segs[i].alloc);
    free(m->segs);
    free(m->dirty);
    mc__ptrmap_reset(&m->dplace);
    mc__ptrmap_reset(&m->handles);
    mc__master_owners_free(m);
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

static void internal_error(const char *what)
{
    fprintf(stderr, "mooncake: internal error: %s\n", what);
    abort();
}

void mc__vrep_put(mc__version_t *v, uint32_t r, const mc__replica_t *rep, const mc__extent_t *one)
{
    if (!mc__vcompact(v)) {
        if (rep->ext && rep->ext == one)
            internal_error("a replica array given a compact version's extent");
        mc__vrep_array(v)[r] = *rep;
        return;
    }
    if (r != 0 || rep->n > 1 || (rep->n && (rep->ext != one || !mc__x1_fits(one))))
        internal_error("a compact version given an extent its fields do not hold");
    if (rep->n)
        v->x1 = mc__x1_pack(one);
    else if (v->n1)
        v->x1 = mc__x1_unpack(v->x1).len; /* its capacity stays */
    v->seg1 = rep->seg;
    v->n1 = rep->n != 0;
}

void mc__version_set_cap(mc__version_t *v, uint64_t cap)
{
    if (!mc__vcompact(v) || !v->n1)
        v->x1 = cap;
    else if (mc__x1_unpack(v->x1).len != cap)
        internal_error("a compact version's capacity is not its extent's length");
}

/* Gives v a replica array of its own in its rare fields with room for
 * room (>= nrep, >= 1) replicas: its replicas move there from its fields
 * or from the room after its key, or its array grows. Returns 0 or -ENOMEM
 * (nothing changed). */
static int rep_array_own(mc__version_t *v, uint32_t room)
{
    mc__replica_t *a;
    if (v->flags & MC__V_REP_OWNED) {
        if (!(a = realloc(v->rare->rep, sizeof(*a) * room)))
            return -ENOMEM;
        memset(a + v->nrep, 0, sizeof(*a) * (room - v->nrep));
        v->rare->rep = a;
    } else if (!mc__vcompact(v)) { /* out of the room after its key */
        mc__vmore_t *more = mc__version_more(v);
        if (!more || !(a = calloc(room, sizeof(*a))))
            return -ENOMEM;
        memcpy(a, mc__vrep_array(v), sizeof(*a) * v->nrep);
        more->rep = a;
        v->flags |= MC__V_REP_OWNED;
    } else {
        /* Compact: its one replica, if any, takes its extent, if any, into
         * an array of its own (a replica in an array owns its extents),
         * and x1 keeps the capacity alone. */
        mc__vmore_t *more = mc__version_more(v);
        mc__extent_t one, *e = NULL;
        mc__replica_t r0 = v->nrep ? mc__vrep_get(v, 0, &one) : (mc__replica_t){0};
        if (!more || !(a = calloc(room, sizeof(*a))))
            return -ENOMEM;
        if (r0.n && !(e = malloc(sizeof(*e) * mc__replica_room(r0.n)))) {
            free(a);
            return -ENOMEM;
        }
        if (r0.n) {
            e[0] = one;
            r0.ext = e;
        }
        a[0] = r0; /* zeroed past nrep, as ever */
        const uint64_t cap = mc__vcap(v);
        more->rep = a;
        v->flags |= MC__V_REP_OWNED;
        v->seg1 = 0;
        v->n1 = 0;
        v->x1 = cap;
    }
    v->repcap = (uint8_t)room;
    return 0;
}

int mc__version_rep_array(mc__version_t *v)
{
    return mc__vcompact(v) ? rep_array_own(v, v->nrep ? v->nrep : 1) : 0;
}

/* Takes replica r out of v (its extents are the caller's). */
static void replica_unlink(mc__version_t *v, uint32_t r)
{
    if (mc__vcompact(v)) {
        const uint64_t cap = mc__vcap(v); /* stays, as in an array */
        v->nrep = 0;
        v->seg1 = 0;
        v->n1 = 0;
        v->x1 = cap;
        return;
    }
    mc__replica_t *a = mc__vrep_array(v);
    memmove(&a[r], &a[r + 1], sizeof(a[0]) * (v->nrep - r - 1));
    v->nrep--;
    memset(&a[v->nrep], 0, sizeof(a[0]));
}

void mc__version_drop_replica(mc__version_t *v, uint32_t seg)
{
    for (uint32_t r = 0; r < v->nrep;) {
        mc__extent_t one;
        mc__replica_t rep = mc__vrep_get(v, r, &one);
        if (rep.seg != seg) {
            r++;
            continue;
        }
        mc__replica_free_ext(&rep, &one);
        replica_unlink(v, r);
    }
}

static int has_replica_on(const mc__version_t *v, uint32_t seg)
{
    for (uint32_t r = 0; r < v->nrep; r++)
        if (mc__vrep_seg(v, r) == seg)
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
    /* Every version in the index is published; retired ones lose their
     * replica records on the segment too (their space is gone with it). A
     * version left with no replica leaves the index: the walk goes on after
     * its key (copied: the version may be freed). */
    size_t lost = 0;
    char after[MC_KEY_MAX + 1];
    mc__index_iter_t it;
    const char *k;
    size_t kl;
    void *val;
    mc__index_seek(m->ix, &it, NULL, 0, 0);
    while (mc__index_next(&it, &k, &kl, &val)) {
        mc__version_t *v = val;
        if (!has_replica_on(v, id))
            continue;
        mc__version_drop_replica(v, id);
        if (v->nrep)
            continue;
        memcpy(after, k, kl);
        mc__index_remove(m->ix, after, kl);
        /* A hard-linked file's names stay: an older version of it that a
         * node reports later counts them (out of memory: it counts those
         * merged after it only). */
        (void)mc__master_names_wait(m, v);
        mc__master_retire(m, v, now);
        lost++;
        mc__index_seek(m->ix, &it, after, kl, 1);
    }
    for (size_t i = 0; i < m->nretired; i++)
        mc__version_drop_replica(m->retired[i], id);
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

uint64_t mc__version_lease(const mc__master_t *m, const mc__version_t *v)
{
    return v->lease ? m->lease_base + v->lease : 0;
}

/* v's lease from base on (base <= now, the lease_ms after it fit). */
static void lease_move(const mc__master_t *m, mc__version_t *v, uint64_t base)
{
    uint64_t until = mc__version_lease(m, v);
    v->lease = until > base ? (uint32_t)(until - base) : 0;
}

/* The leases' base moves to now: every version that can hold a lease (the
 * published, the retired waiting) gets its lease again from there, an
 * ended one none. O(versions), once in 2^32 ms (49 days) at most. */
static void lease_rebase(mc__master_t *m, uint64_t now)
{
    mc__index_iter_t it;
    void *val;
    mc__index_seek(m->ix, &it, NULL, 0, 0);
    while (mc__index_next(&it, NULL, NULL, &val))
        lease_move(m, val, now);
    for (size_t i = 0; i < m->nretired; i++)
        lease_move(m, m->retired[i], now);
    m->lease_base = now;
}

void mc__master_touch(mc__master_t *m, mc__version_t *v, uint64_t now, int lease)
{
    if (v->state == MC__PUBLISHED)
        mc__lru_touch(m, v);
    uint64_t until = now + m->o.lease_ms;
    if (!lease || until <= mc__version_lease(m, v) || until < m->lease_base)
        return; /* the last: the clock went back, which it does not */
    if (until - m->lease_base > UINT32_MAX)
        lease_rebase(m, now);
    v->lease = (uint32_t)(until - m->lease_base);
}

int mc__master_ref(mc__master_t *m, mc__version_t *v)
{
    mc__ptrslot_t *e = mc__vopen(v) ? mc__ptrmap_find(&m->handles, v) : NULL;
    if (e) {
        e->val++;
        return 0;
    }
    if (mc__ptrmap_add(&m->handles, v, 1) < 0)
        return -ENOMEM;
    v->flags |= MC__V_OPEN;
    return 0;
}

void mc__master_unref(mc__master_t *m, mc__version_t *v, uint64_t now)
{
    mc__ptrslot_t *e = mc__vopen(v) ? mc__ptrmap_find(&m->handles, v) : NULL;
    if (!e || --e->val)
        return;
    mc__ptrmap_del(&m->handles, e);
    v->flags &= (uint8_t)~MC__V_OPEN;
    if (v->state == MC__RETIRED && !mc__leased(m, v, now) && !(v->flags & MC__V_LOST))
        mc__version_destroy(m, v); /* still leased: mc__master_sweep() frees it */
}

void mc__version_stat(const mc__master_t *m, const mc__version_t *v, uint64_t now, mc_stat_t *st)
{
    st->size = mc__vsize(v);
    st->version = v->id;
    st->mtime_ns = v->mtime_ns;
    st->atime_ns = mc__vatime(v);
    st->ctime_ns = mc__vctime(v);
    st->mode = v->mode;
    mc__version_owner(m, v, &st->uid, &st->gid);
    st->type = v->type;
    st->rdev = mc__vmore(v)->rdev;
    st->nlink = mc__vmore(v)->links ? mc__vmore(v)->links : 1;
    st->ino = mc__vmore(v)->links ? strtoull(mc__vkey(v) + MC__INODE_PLEN, NULL, 16) : 0;
    st->replicas = v->nrep;
    st->alloc = v->nrep ? mc__vrep_bytes(v, 0) : 0;
    st->flags = 0;
    if (mc__vopen(v) || mc__leased(m, v, now))
        st->flags |= MC_STAT_LEASED;
    if (v->pin == MC_PIN_SOFT && (mc__vmore(v)->pin_until == 0 || mc__vmore(v)->pin_until > now))
        st->flags |= MC_STAT_SOFT_PIN;
    if (v->pin == MC_PIN_HARD)
        st->flags |= MC_STAT_HARD_PIN;
}

void mc__master_sweep(mc__master_t *m, uint64_t now)
{
    /* From the end: the last one fills a freed place, and was seen. */
    for (size_t i = m->nretired; i--;) {
        mc__version_t *v = m->retired[i];
        if (!mc__vopen(v) && !mc__leased(m, v, now))
            mc__version_destroy(m, v);
    }
}

int mc__master_replica_attach(mc__version_t *v, mc__replica_t *rep)
{
    if (has_replica_on(v, rep->seg))
        return -EEXIST;
    if (v->nrep >= MC__MAX_REPLICAS)
        return -ENOSPC;
    /* Out of room (none for a compact one): a repair's replica, or a
     * rebuilt version's next one. */
    if (v->nrep >= v->repcap && rep_array_own(v, v->nrep + 1u) < 0)
        return -ENOMEM;
    mc__vrep_array(v)[v->nrep++] = *rep;
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
        if (mc__vrep_seg(v, r) != seg)
            continue;
        mc__extent_t one;
        *rep = mc__vrep_get(v, r, &one);
        if (rep->ext == &one) { /* compact: the replica takes a copy along */
            if (!(rep->ext = malloc(sizeof(*rep->ext) * mc__replica_room(rep->n))))
                return -ENOMEM;
            rep->ext[0] = one;
        }
        replica_unlink(v, r);
        return 1;
    }
    return 0;
}
