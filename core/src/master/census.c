/*
 * census.c - the master's versions counted by state (census.h): one walk
 * over the index (the published versions) and the retired array.
 */
#include <errno.h>
#include <string.h>

#include "master/census.h"
#include "master/master_i.h"

void mc__master_census(const mc__master_t *m, uint64_t now, mc__census_t *c)
{
    memset(c, 0, sizeof(*c));
    mc__index_iter_t it;
    void *val;
    mc__index_seek(m->ix, &it, NULL, 0, 0);
    while (mc__index_next(&it, NULL, NULL, &val)) {
        const mc__version_t *v = val;
        if (mc__vmore(v)->link)
            continue; /* a name entry: its file is counted */
        c->published++;
        c->leased += mc__leased(m, v, now);
        c->hard_pinned += v->pin == MC_PIN_HARD;
        c->soft_pinned +=
            v->pin == MC_PIN_SOFT && (!mc__vmore(v)->pin_until || mc__vmore(v)->pin_until > now);
        c->open += mc__vopen(v);
    }
    for (size_t i = 0; i < m->nretired; i++) {
        const mc__version_t *v = m->retired[i];
        c->retired++;
        for (uint32_t r = 0; r < v->nrep; r++)
            c->retired_bytes += mc__vrep_bytes(v, r); /* holes take none */
        c->open += mc__vopen(v);
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
