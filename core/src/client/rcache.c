/*
 * rcache.c - the replica-list cache of mc_get() (remote_i.h).
 *
 * mc_get() keeps the stat and replica set GET_REPLICAS returned for half the
 * read lease the master granted with them (the lease keeps the version's
 * space from being reused meanwhile), so repeated gets of a key skip the
 * master. This client's own put, remove, rename and writer commit drop the
 * keys they touch, and so does a stat that finds the key gone or at another
 * version (a stat before a get, as mooncake-cli does, thus sees other
 * clients' changes); a read that fails on a cached set drops it and asks the
 * master again. Full: cleared. Off with no_replica_cache (Python's direct
 * backend). Loop thread only. An entry is freed when neither the table nor
 * a get reading through it holds it.
 */
#include <stdlib.h>
#include <string.h>

#include "client/remote_i.h"
#include "runtime/loop_i.h"
#include "mooncake/loop.h"

#define RC_MAX 4096
#define RC_BUCKETS 8192

static size_t rc_bucket(const char *key, size_t klen)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < klen; i++)
        h = (h ^ (unsigned char)key[i]) * 1099511628211ULL;
    return (size_t)(h % RC_BUCKETS);
}

void mc__rc_put(rcache_ent_t *e)
{
    if (e && --e->refs == 0) {
        mc__rset_free(e->rs);
        free(e);
    }
}

/* Unlinks *pp (an entry in the table) and drops the table's reference. */
static void rc_unlink(struct mc__remote *rm, rcache_ent_t **pp)
{
    rcache_ent_t *e = *pp;
    *pp = e->hnext;
    rm->rc_n--;
    mc__rc_put(e);
}

void mc__rc_clear(struct mc__remote *rm)
{
    for (size_t b = 0; rm && rm->rc_tab && rm->rc_n && b < RC_BUCKETS; b++)
        while (rm->rc_tab[b])
            rc_unlink(rm, &rm->rc_tab[b]);
}

void mc__rc_drop(struct mc__remote *rm, const char *key, size_t klen, const rcache_ent_t *e)
{
    if (!rm || !rm->rc_tab)
        return;
    for (rcache_ent_t **pp = &rm->rc_tab[rc_bucket(key, klen)]; *pp; pp = &(*pp)->hnext) {
        if ((*pp)->klen == klen && memcmp((*pp)->key, key, klen) == 0) {
            if (!e || *pp == e)
                rc_unlink(rm, pp);
            return;
        }
    }
}

rcache_ent_t *mc__rc_find(struct mc__remote *rm, const char *key, size_t klen)
{
    if (!rm || !rm->rc_tab)
        return NULL;
    for (rcache_ent_t **pp = &rm->rc_tab[rc_bucket(key, klen)]; *pp; pp = &(*pp)->hnext) {
        rcache_ent_t *e = *pp;
        if (e->klen == klen && memcmp(e->key, key, klen) == 0) {
            /* The loop's latest reading: no clock read per get (the entry
             * is kept half a lease; a reading is far fresher than that). */
            if (mc__loop_recent_ns(rm->s->loop) / 1000000 < e->expires &&
                e->session == __atomic_load_n(&rm->s->master_lost, __ATOMIC_RELAXED))
                return e;
            rc_unlink(rm, pp);
            return NULL;
        }
    }
    return NULL;
}

void mc__rc_check(struct mc__remote *rm, const char *key, size_t klen, const mc_stat_t *st)
{
    rcache_ent_t *e = mc__rc_find(rm, key, klen);
    if (e && e->st.version != st->version)
        mc__rc_drop(rm, key, klen, e);
}

void mc__rc_insert(struct mc__remote *rm, rcache_ent_t *e)
{
    if (!rm->rc_tab && !(rm->rc_tab = calloc(RC_BUCKETS, sizeof(*rm->rc_tab))))
        return;
    mc__rc_drop(rm, e->key, e->klen, NULL);
    if (rm->rc_n >= RC_MAX)
        mc__rc_clear(rm);
    size_t b = rc_bucket(e->key, e->klen);
    e->hnext = rm->rc_tab[b];
    rm->rc_tab[b] = e;
    e->refs++;
    rm->rc_n++;
}
