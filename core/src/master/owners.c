/*
 * owners.c - a version's owner and group as one 32-bit index into the
 * master's table of the distinct (uid, gid) pairs its versions have had
 * (issue 14: a few pairs serve millions of objects). Index 0 is the pair
 * of none recorded (MC_OWNER_NONE twice), which is never in the table;
 * the others are found by their pair through an address table
 * (ptrmap.h) keyed by the pair's 64 bits inverted (never 0: that would be
 * none's). The table only grows, by one entry per new pair.
 */
#include <errno.h>
#include <stdlib.h>

#include "master/master_i.h"

_Static_assert(sizeof(uintptr_t) >= sizeof(uint64_t), "a pair is an address-sized key");

/* The key of pair (uid, gid) in m->owner_ix; 0 for none's. */
static const void *pair_key(uint32_t uid, uint32_t gid)
{
    return (const void *)(uintptr_t) ~((uint64_t)uid << 32 | gid);
}

void mc__version_owner(const mc__master_t *m, const mc__version_t *v, uint32_t *uid, uint32_t *gid)
{
    if (!v->owner) {
        *uid = *gid = MC_OWNER_NONE;
        return;
    }
    *uid = m->owners[v->owner].uid;
    *gid = m->owners[v->owner].gid;
}

int mc__version_set_owner(mc__master_t *m, mc__version_t *v, uint32_t uid, uint32_t gid)
{
    const void *k = pair_key(uid, gid);
    if (!k) {
        v->owner = 0;
        return 0;
    }
    const mc__ptrslot_t *e = mc__ptrmap_find(&m->owner_ix, k);
    if (e) {
        v->owner = (uint32_t)e->val;
        return 0;
    }
    if (m->nowners == m->owners_cap) {
        uint32_t cap = m->owners_cap ? m->owners_cap * 2 : 16; /* [0] stays unused */
        mc__owner_t *o = cap > m->owners_cap ? realloc(m->owners, sizeof(*o) * cap) : NULL;
        if (!o)
            return -ENOMEM;
        m->owners = o;
        m->owners_cap = cap;
        if (!m->nowners)
            m->nowners = 1;
    }
    if (mc__ptrmap_add(&m->owner_ix, k, m->nowners) < 0)
        return -ENOMEM;
    m->owners[m->nowners] = (mc__owner_t){uid, gid};
    v->owner = m->nowners++;
    return 0;
}

void mc__master_owners_free(mc__master_t *m)
{
    free(m->owners);
    m->owners = NULL;
    m->nowners = m->owners_cap = 0;
    mc__ptrmap_reset(&m->owner_ix);
}
