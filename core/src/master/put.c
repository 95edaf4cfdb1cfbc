/*
 * put.c - a put's life and the space it takes (see master.h): placing a
 * pending version's replicas, reserving space (sweeping, then evicting:
 * evict.c), publishing or aborting; the
 * extents of replicas, also for repair; the space counters.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "master/master_i.h"

/* Placement order: segments to avoid last, then the most free space first. */
static int place_before(const mc__segment_t *a, const mc__segment_t *b)
{
    if (a->avoid != b->avoid)
        return !a->avoid;
    return mc__segment_free(a) > mc__segment_free(b);
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
    if ((po && (po->type > MC_TYPE_MAX || po->pin > MC_PIN_HARD)) ||
        mc__master_is_inode_key(key, klen))
        return -EINVAL;
    if (m->nseg == 0)
        return -ENOSPC;
    /* Segments on hold take nothing new (mc__master_hold_segment()). */
    char used[256];
    uint32_t usable = 0;
    memset(used, 0, m->nseg < 256 ? (size_t)m->nseg : 256); /* the bytes read below */
    for (int i = 0; i < m->nseg && i < 256; i++) {
        if (m->segs[i].hold_until > now)
            used[i] = 1;
        else
            usable++;
    }
    if (usable == 0)
        return -EAGAIN;
    /* Best-effort placement: each replica on a different segment, the
     * preferred one first when it is mounted and has need bytes free, then
     * the ones with the most free space. */
    uint32_t want = po && po->replica_num ? po->replica_num : 1;
    if (want > MC__MAX_REPLICAS)
        want = MC__MAX_REPLICAS;
    if (want > (uint32_t)m->nseg)
        want = (uint32_t)m->nseg;
    /* One replica: a compact version (its segment in its fields). */
    mc__version_t *v = mc__version_new(m, key, klen, want > 1 ? want : 0);
    if (!v)
        return -ENOMEM;
    v->state = MC__PENDING;
    if (po && ((po->flags & MC_PUT_MODE) || po->mode)) {
        v->mode = po->mode & 07777;
    } else {
        v->mode = 0644;
        v->inherit |= MC__INHERIT_MODE;
    }
    if (po && (po->flags & MC_PUT_OWNER)) {
        if (mc__version_set_owner(m, v, po->uid, po->gid) < 0) {
            mc__version_free(m, v);
            return -ENOMEM;
        }
    } else {
        v->inherit |= MC__INHERIT_OWNER; /* none recorded (0) until then */
    }
    v->type = po ? po->type : MC_TYPE_FILE;
    v->mtime_ns = po ? po->mtime_ns : 0; /* 0: the commit's time (service.c) */
    v->pin = po ? po->pin : MC_PIN_NONE;
    int ttl = v->pin == MC_PIN_SOFT && po->soft_pin_ttl_ms;
    if ((po && po->rdev) || ttl) {
        mc__vmore_t *x = mc__version_more(v);
        if (!x) {
            mc__version_free(m, v);
            return -ENOMEM;
        }
        x->rdev = po->rdev;
        x->pin_until = ttl ? now + po->soft_pin_ttl_ms : 0;
    }

    v->want = (uint8_t)want; /* segments on hold count: the repair fills them later */
    if (want > usable)
        want = usable;
    uint32_t r0 = 0;
    for (int i = 0; pref_seg >= 0 && i < m->nseg && i < 256; i++) {
        if (!used[i] && m->segs[i].id == (uint32_t)pref_seg && !m->segs[i].avoid &&
            mc__segment_free(&m->segs[i]) >= need && mc__segment_free(&m->segs[i]) > 0) {
            used[i] = 1;
            mc__vrep_put(v, r0++, &(mc__replica_t){.seg = (uint32_t)pref_seg}, NULL);
            break;
        }
    }
    for (uint32_t r = r0; r < want; r++) {
        int best = -1;
        for (int i = 0; i < m->nseg && i < 256; i++)
            if (!used[i] && (best < 0 || place_before(&m->segs[i], &m->segs[best])))
                best = i;
        used[best] = 1;
        mc__vrep_put(v, r, &(mc__replica_t){.seg = m->segs[best].id}, NULL);
    }
    v->nrep = (uint8_t)want;
    *out = v;
    return 0;
}

/* Allocates len more bytes at the end of replica rep. rep is a copy of
 * compact version cv's replica (else cv is NULL), its one extent, if any,
 * in *one (mc__vrep_get()): while it keeps one extent that fits cv's x1
 * (mc__x1_fits()), that stays in *one; else cv gets its replica array
 * first and rep becomes that array's replica, with an extent array of its
 * own (which a replica of no compact version always has, or none). */
static int replica_grow(mc__master_t *m, mc__replica_t *rep, uint64_t len, mc__extent_t *one,
                        mc__version_t *cv)
{
    mc__segment_t *s = mc__master_seg(m, rep->seg);
    if (!s)
        return -ENOSPC;
    mc__extent_t got[64];
    int n = mc__alloc_get(s->alloc, len, got, 64);
    if (n < 0)
        return n;
    if (cv && n == 1 && rep->n == 0 && mc__x1_fits(&got[0])) {
        *one = got[0];
        rep->ext = one;
        rep->n = 1;
        return 0;
    }
    if (cv && n == 1 && rep->n == 1 && one->off + one->len == got[0].off) {
        mc__extent_t e = {one->off, one->len + got[0].len};
        if (mc__x1_fits(&e)) {
            *one = e; /* right after its one extent: it grows in place */
            return 0;
        }
    }
    if (cv) {
        if (mc__version_rep_array(cv) < 0) {
            mc__alloc_put(s->alloc, got, n);
            return -ENOMEM;
        }
        *rep = mc__vrep_array(cv)[0]; /* its extent moved to an array of its own */
    }
    if (rep->n + (uint64_t)n > (rep->ext ? mc__replica_room(rep->n) : 0)) {
        uint64_t room = mc__replica_room(rep->n + (uint64_t)n);
        mc__extent_t *e = realloc(rep->ext, sizeof(*e) * room);
        if (!e) {
            mc__alloc_put(s->alloc, got, n);
            return -ENOMEM;
        }
        rep->ext = e;
    }
    for (int i = 0; i < n; i++) {
        /* Merge with the previous extent when contiguous (not a hole). */
        if (rep->n && rep->ext[rep->n - 1].off != MC__HOLE &&
            rep->ext[rep->n - 1].off + rep->ext[rep->n - 1].len == got[i].off)
            rep->ext[rep->n - 1].len += got[i].len;
        else
            rep->ext[rep->n++] = got[i];
    }
    return 0;
}

/* replica_grow() of v's replica r. */
static int version_grow(mc__master_t *m, mc__version_t *v, uint32_t r, uint64_t len)
{
    mc__extent_t one;
    mc__replica_t rep = mc__vrep_get(v, r, &one);
    int rc = replica_grow(m, &rep, len, &one, mc__vcompact(v) ? v : NULL);
    mc__vrep_put(v, r, &rep, &one);
    return rc;
}

/* Returns bytes beyond keep (rounded) at the end of replica r. */
static void replica_trim(mc__master_t *m, mc__replica_t *rep, uint64_t keep)
{
    mc__segment_t *s = mc__master_seg(m, rep->seg);
    uint64_t at = 0;
    uint32_t i = 0;
    for (; i < rep->n; i++) {
        mc__extent_t *e = &rep->ext[i];
        if (at + e->len > keep) {
            uint64_t head = keep - at; /* aligned: keep is rounded */
            if (head) {
                mc__extent_t tail = {e->off + head, e->len - head};
                if (s && e->off != MC__HOLE)
                    mc__alloc_put(s->alloc, &tail, 1);
                e->len = head;
                i++;
            }
            break;
        }
        at += e->len;
    }
    if (i < rep->n && s)
        mc__extents_put(s->alloc, &rep->ext[i], rep->n - i);
    if (i < rep->n)
        rep->n = i;
}

/* replica_trim() of v's replica r: a compact v's stays in x1 (shorter, it
 * fits still). */
static void version_trim(mc__master_t *m, mc__version_t *v, uint32_t r, uint64_t keep)
{
    mc__extent_t one;
    mc__replica_t rep = mc__vrep_get(v, r, &one);
    replica_trim(m, &rep, keep);
    mc__vrep_put(v, r, &rep, &one);
}

void mc__extents_put(mc__alloc_t *a, const mc__extent_t *ext, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (ext[i].off != MC__HOLE)
            mc__alloc_put(a, &ext[i], 1);
}

uint64_t mc__replica_bytes(const mc__replica_t *rep)
{
    uint64_t t = 0;
    for (uint32_t i = 0; i < rep->n; i++)
        if (rep->ext[i].off != MC__HOLE)
            t += rep->ext[i].len;
    return t;
}

/* Rounds len up to the allocation unit (shared by every segment). */
static uint64_t round_up(const mc__master_t *m, uint64_t len)
{
    return (len + m->o.align - 1) & ~(m->o.align - 1);
}

/* The space a version of size bytes keeps at its commit: size rounded to
 * the allocation unit, or to MC__SMALL_UNIT for a small one with no hole
 * (its layout is all data, so no hole edge leaves the unit). */
static uint64_t small_keep(const mc__master_t *m, const mc__version_t *v, uint64_t size)
{
    uint64_t unit = MC__SMALL_UNIT;
    if (size >= MC__SMALL_MAX || m->o.align < unit || !v->nrep ||
        mc__vrep_bytes(v, 0) != mc__vcap(v))
        return round_up(m, size);
    return (size + unit - 1) & ~(unit - 1);
}

static uint64_t total_size(const mc__master_t *m)
{
    uint64_t t = 0;
    for (int i = 0; i < m->nseg; i++)
        t += m->segs[i].size;
    return t;
}

uint64_t mc__master_used(const mc__master_t *m)
{
    uint64_t t = 0;
    for (int i = 0; i < m->nseg; i++)
        t += mc__alloc_used(m->segs[i].alloc);
    return t;
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

int mc__master_make_room(mc__master_t *m, uint64_t want, int pass, uint64_t now)
{
    if (pass == 0) {
        mc__master_sweep(m, now);
        return 1;
    }
    if (pass > 1 || !evict_enabled(m))
        return 0;
    uint64_t target = low_mark(m);
    uint64_t total = total_size(m);
    if (want > total)
        return 0;
    if (total - want < target)
        target = total - want;
    mc__master_evict(m, target, now);
    return 1;
}

uint64_t mc__master_total(const mc__master_t *m)
{
    return total_size(m);
}

int mc__master_reserve(mc__master_t *m, mc__version_t *v, uint64_t capacity, uint64_t now)
{
    /* The capacity before: a compact version's one extent (x1) may grow
     * in place below, and its length is the capacity's field. */
    const uint64_t old = mc__vcap(v);
    if (capacity <= old)
        return 0;
    if (v->nrep == 0)
        return -EIO; /* every segment it was placed on is gone */
    if (capacity - old > total_size(m))
        return -ENOSPC; /* EFBIG is for past the largest file (INT64_MAX) */
    uint64_t want = round_up(m, capacity - old);
    uint32_t done = 0;
    int rc = 0;
    for (; done < v->nrep; done++) {
        rc = version_grow(m, v, done, want);
        if (rc == -ENOSPC) {
            /* Space held by expired leases first, then eviction. */
            mc__master_sweep(m, now);
            rc = version_grow(m, v, done, want);
            if (rc == -ENOSPC && evict_enabled(m)) {
                uint64_t target = low_mark(m);
                uint64_t total = total_size(m);
                if (total - want < target)
                    target = total - want;
                mc__master_evict(m, target, now);
                rc = version_grow(m, v, done, want);
            }
        }
        if (rc < 0)
            break;
    }
    if (rc < 0) {
        for (uint32_t r = 0; r < done; r++)
            version_trim(m, v, r, old);
        mc__version_set_cap(v, old);
        return rc;
    }
    mc__version_set_cap(v, old + want);
    if (evict_enabled(m) && mc__master_used(m) > total_size(m) / 100 * m->o.evict_high_pct)
        mc__master_evict(m, low_mark(m), now);
    return 0;
}

int mc__master_set_key(mc__master_t *m, mc__version_t *v, const char *key, size_t klen)
{
    (void)m;
    int rc = mc_key_check(key, klen);
    if (rc < 0)
        return rc;
    char *k = mc__version_more(v) ? mc__dup_key(key, klen) : NULL;
    if (!k)
        return -ENOMEM;
    mc__version_set_key(v, k, klen);
    return 0;
}

/* The number of name entries naming inode key ino[0..ilen): a walk of the
 * whole index, for the rare file that comes back after it was lost. */
static uint32_t names_of(mc__master_t *m, const char *ino, size_t ilen)
{
    mc__index_iter_t it;
    void *val;
    uint32_t n = 0;
    mc__index_seek(m->ix, &it, NULL, 0, 0);
    while (mc__index_next(&it, NULL, NULL, &val)) {
        const mc__vmore_t *x = mc__vmore((mc__version_t *)val);
        n += x->link && x->linklen == ilen && memcmp(x->link, ino, ilen) == 0;
    }
    return n;
}

/* 1 if keys start with key[0..klen) and a '/' (its marker, or what it
 * holds): a directory of that name. */
static int names_a_dir(mc__master_t *m, const char *key, size_t klen)
{
    char dir[MC_KEY_MAX + 1];
    if (klen + 1 > MC_KEY_MAX)
        return 0; /* no key is longer than that */
    memcpy(dir, key, klen);
    dir[klen] = '/';
    mc__index_iter_t it;
    const char *k;
    size_t kl;
    mc__index_seek(m->ix, &it, dir, klen + 1, 0);
    return mc__index_next(&it, &k, &kl, NULL) && kl > klen && memcmp(k, dir, klen + 1) == 0;
}

int mc__master_commit(mc__master_t *m, mc__version_t *v, uint64_t size, unsigned flags,
                      uint64_t now)
{
    return mc__master_commit_as(m, v, size, flags, now, NULL);
}

int mc__master_commit_as(mc__master_t *m, mc__version_t *v, uint64_t size, unsigned flags,
                         uint64_t now, int *added)
{
    if (size > mc__vcap(v))
        return -EINVAL;
    /* The name in one hash probe; a new one gets room in the index now,
     * so that nothing can fail once v goes in below. */
    mc__version_t *name = mc__index_get(m->ix, mc__vkey(v), v->klen);
    if (added)
        *added = !name;
    if ((flags & MC_PUT_NOREPLACE) && name)
        return -EEXIST;
    if ((flags & MC_PUT_NOTDIR) && names_a_dir(m, mc__vkey(v), v->klen))
        return -EISDIR;
    if (!name && mc__index_reserve(m->ix, 1) < 0)
        return -ENOMEM;
    mc__version_t *cur = name; /* what v replaces in the index */
    /* What v takes from the version it replaces (its file's names, its
     * attributes) goes into v's rare fields: made now, while failing
     * changes nothing (no slot was added: name is there). */
    const mc__vmore_t *nx = name ? mc__vmore(name) : NULL;
    if (((nx && (nx->link || nx->xattr || nx->links)) || size >= MC__VSIZE_BIG) &&
        !mc__version_more(v))
        return -ENOMEM;
    if (name && mc__vmore(name)->link) {
        /* A hard link's name: the new version is the file's, under its
         * inode key, for every name. */
        int rc = mc__master_set_key(m, v, mc__vmore(name)->link, mc__vmore(name)->linklen);
        if (rc < 0)
            return rc;
        cur = mc__index_get(m->ix, mc__vkey(v), v->klen); /* the file, or NULL: lost */
        if (!cur && mc__index_reserve(m->ix, 1) < 0)
            return -ENOMEM;
    }
    uint64_t keep = small_keep(m, v, size);
    if (keep < mc__vcap(v)) {
        for (uint32_t r = 0; r < v->nrep; r++)
            version_trim(m, v, r, keep);
        mc__version_set_cap(v, keep);
    }
    /* Replaced in place, or a new key with room reserved: cannot fail. */
    mc__version_t *old = cur;
    if (cur)
        mc__index_replace(m->ix, cur, v);
    else
        mc__index_insert(m->ix, v, NULL);
    (void)mc__version_set_size(v, size); /* cannot fail: a large size's rare fields are made */
    v->id = mc__master_new_id(m);
    v->state = MC__PUBLISHED;
    mc__lru_touch(m, v);
    if (old) {
        if (v->inherit & MC__INHERIT_MODE)
            v->mode = old->mode;
        if (v->inherit & MC__INHERIT_OWNER)
            v->owner = old->owner; /* an index of the same master */
        mc__version_set_atime(v, mc__vatime(old));
        mc__xattr_take(v, old);
        if (mc__vmore(old)->links)
            v->rare->links = old->rare->links; /* an inode: made above (a link) */
        mc__master_retire(m, old, now);
    } else if (name && mc__vmore(name)->link) {
        /* The file was lost: this name brings it back, for every name of
         * it left (each counts, so that it goes with the last). */
        v->rare->links = names_of(m, mc__vkey(v), v->klen);
        (void)mc__master_names_take(m, mc__vkey(v), v->klen); /* counted again */
    }
    v->inherit = 0;
    return 0;
}

void mc__master_abort(mc__master_t *m, mc__version_t *v)
{
    mc__version_destroy(m, v);
}

void mc__master_space(const mc__master_t *m, mc_space_t *sp)
{
    sp->total = total_size(m);
    sp->used = mc__master_used(m);
    sp->objects = mc__index_count(m->ix);
    sp->evicted = m->evicted;
}

int mc__master_replica_alloc(mc__master_t *m, uint32_t seg, uint64_t len, mc__replica_t *rep)
{
    memset(rep, 0, sizeof(*rep));
    rep->seg = seg;
    int rc = replica_grow(m, rep, round_up(m, len), NULL, NULL);
    if (rc < 0)
        mc__master_replica_release(m, rep);
    return rc;
}

void mc__replica_release_in(mc__master_t *m, mc__replica_t *rep, const mc__extent_t *inl)
{
    mc__segment_t *s = mc__master_seg(m, rep->seg);
    if (s && rep->n)
        mc__extents_put(s->alloc, rep->ext, rep->n);
    mc__replica_free_ext(rep, inl);
    rep->n = 0;
}

void mc__master_replica_release(mc__master_t *m, mc__replica_t *rep)
{
    mc__replica_release_in(m, rep, NULL);
}
