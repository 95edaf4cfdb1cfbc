/*
 * evict.c - eviction (see mc__master_evict() in master.h): approximate LRU
 * as Redis does it. A published version carries the master's access clock
 * of its last access (mc__version_t tick) instead of links in a list; the
 * version evicted is the least recently used of a random sample taken from
 * the index's hash table, or of all versions in a small index. When samples
 * find none that may go (nearly every version open, leased or pinned), one
 * walk of the index finds those that may, which then go oldest first.
 */
#include <stdlib.h>

#include "master/master_i.h"

#define SAMPLE_TRIES 8 /* samples in a row that found none, before a walk */

static int evictable(const mc__master_t *m, const mc__version_t *v, uint64_t now, int allow_soft)
{
    if (mc__vopen(v) || mc__leased(m, v, now) || v->pin == MC_PIN_HARD)
        return 0;
    if (mc__vmore(v)->links || mc__master_is_inode_key(mc__vkey(v), v->klen))
        return 0; /* a hard-linked file (its count of names may be 0 while a
                     restarted master waits for them): they would dangle */
    if (v->pin == MC_PIN_SOFT && !allow_soft &&
        (mc__vmore(v)->pin_until == 0 || mc__vmore(v)->pin_until > now))
        return 0;
    return 1;
}

/* 1 if v may go (name entries hold nothing: never). */
static int candidate(const mc__master_t *m, const mc__version_t *v, uint64_t now, int pass)
{
    return !mc__vmore(v)->link && evictable(m, v, now, pass);
}

/* How long ago (in accesses) v was used last. */
static uint32_t age(const mc__master_t *m, const mc__version_t *v)
{
    return m->tick - v->tick; /* the clock wraps: the difference does not */
}

/* Of v and best, the one to evict first: v when it may go and was used
 * less recently than best (or best is NULL). */
static mc__version_t *older(const mc__master_t *m, mc__version_t *best, mc__version_t *v,
                            uint64_t now, int pass)
{
    if (!candidate(m, v, now, pass) || (best && age(m, v) <= age(m, best)))
        return best;
    return v;
}

/* The least recently used version that may go, of all: NULL if none. */
static mc__version_t *oldest_of_all(mc__master_t *m, uint64_t now, int pass)
{
    mc__version_t *best = NULL;
    mc__index_iter_t it;
    void *val;
    mc__index_seek(m->ix, &it, NULL, 0, 0);
    while (mc__index_next(&it, NULL, NULL, &val))
        best = older(m, best, val, now, pass);
    return best;
}

/* The least recently used of random samples that may go (SAMPLE_TRIES
 * samples at most), or NULL. */
static mc__version_t *sampled(mc__master_t *m, uint64_t now, int pass)
{
    void *s[MC__EVICT_SAMPLE];
    for (int tries = 0; tries < SAMPLE_TRIES; tries++) {
        m->rng ^= m->rng << 13; /* xorshift64 */
        m->rng ^= m->rng >> 7;
        m->rng ^= m->rng << 17;
        size_t n = mc__index_sample(m->ix, m->rng, s, MC__EVICT_SAMPLE);
        mc__version_t *best = NULL;
        for (size_t i = 0; i < n; i++)
            best = older(m, best, s[i], now, pass);
        if (best)
            return best;
    }
    return NULL;
}

static void evict_one(mc__master_t *m, mc__version_t *v, uint64_t now)
{
    mc__index_remove(m->ix, mc__vkey(v), v->klen);
    mc__master_retire(m, v, now);
    m->evicted++;
}

/* A version that may go, and its age when a walk found it. */
typedef struct cand {
    uint32_t age;
    mc__version_t *v;
} cand_t;

static int by_age(const void *a, const void *b)
{
    uint32_t x = ((const cand_t *)a)->age, y = ((const cand_t *)b)->age;
    return x < y ? 1 : x > y ? -1 : 0; /* the oldest first */
}

/* Evicts, oldest first, from one walk's list of every version that may go,
 * until used space is at most target; one at a time by a walk each when
 * the list cannot be made (out of memory). Returns the number evicted. */
static size_t evict_walk(mc__master_t *m, uint64_t target, uint64_t now, int pass)
{
    cand_t *c = NULL;
    size_t n = 0, cap = 0, done = 0;
    mc__index_iter_t it;
    void *val;
    mc__index_seek(m->ix, &it, NULL, 0, 0);
    while (mc__index_next(&it, NULL, NULL, &val)) {
        if (!candidate(m, val, now, pass))
            continue;
        if (n == cap) {
            cand_t *g = realloc(c, sizeof(*c) * (cap = cap ? cap * 2 : 64));
            if (!g)
                goto nomem;
            c = g;
        }
        c[n++] = (cand_t){age(m, val), val};
    }
    if (n)
        qsort(c, n, sizeof(*c), by_age);
    for (size_t i = 0; i < n && mc__master_used(m) > target; i++, done++)
        evict_one(m, c[i].v, now);
    free(c);
    return done;
nomem:
    free(c);
    for (mc__version_t *v; mc__master_used(m) > target && (v = oldest_of_all(m, now, pass)); done++)
        evict_one(m, v, now);
    return done;
}

size_t mc__master_evict(mc__master_t *m, uint64_t target, uint64_t now)
{
    size_t n = 0;
    mc__master_sweep(m, now);
    for (int pass = 0; pass < 2 && mc__master_used(m) > target; pass++) {
        int exact = mc__index_count(m->ix) <= MC__EVICT_EXACT;
        while (mc__master_used(m) > target) {
            mc__version_t *v = exact ? oldest_of_all(m, now, pass) : sampled(m, now, pass);
            if (!v) {
                if (!exact)
                    n += evict_walk(m, target, now, pass);
                break;
            }
            evict_one(m, v, now);
            n++;
        }
    }
    return n;
}
