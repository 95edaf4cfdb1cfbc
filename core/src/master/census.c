/*
 * census.c - the master's versions counted by state (census.h): one walk
 * over the published (LRU) and the retired lists.
 */
#include <errno.h>
#include <string.h>

#include "master/census.h"
#include "master/master_i.h"

void mc__master_census(const mc__master_t *m, uint64_t now, mc__census_t *c)
{
    memset(c, 0, sizeof(*c));
    for (const mc__version_t *v = m->lru.next; v != &m->lru; v = v->next) {
        c->published++;
        c->leased += v->lease_until > now;
        c->hard_pinned += v->pin == MC_PIN_HARD;
        c->soft_pinned += v->pin == MC_PIN_SOFT && (!v->pin_until || v->pin_until > now);
        c->open += v->refs > 0;
    }
    for (const mc__version_t *v = m->retired.next; v != &m->retired; v = v->next) {
        c->retired++;
        for (uint32_t r = 0; r < v->nrep; r++)
            c->retired_bytes += mc__replica_bytes(&v->rep[r]); /* holes take none */
        c->open += v->refs > 0;
    }
}

int mc__master_segment_at(const mc__master_t *m, int i, uint32_t *id, uint64_t *size,
                          uint64_t *used)
{
    if (i < 0 || i >= m->nseg)
        return -ENOENT;
    *id = m->segs[i].id;
    *size = m->segs[i].size;
    *used = mc__alloc_used(m->segs[i].alloc);
    return 0;
}
