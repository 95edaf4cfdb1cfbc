/*
 * ids.c - the intrusive id hash (see ids.h): chained buckets, Fibonacci
 * hashing (ids are mostly consecutive, and the multiply spreads them).
 */
#include <errno.h>
#include <stdlib.h>

#include "master/ids.h"

#define FIRST_BITS 6

static size_t slot(unsigned bits, uint64_t id)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> (64 - bits));
}

int mc__ids_init(mc__ids_t *t)
{
    t->bits = FIRST_BITS;
    t->n = 0;
    t->b = calloc((size_t)1 << t->bits, sizeof(*t->b));
    return t->b ? 0 : -ENOMEM;
}

void mc__ids_fini(mc__ids_t *t)
{
    free(t->b);
    t->b = NULL;
    t->n = 0;
}

static void grow(mc__ids_t *t)
{
    unsigned bits = t->bits + 1;
    mc__idnode_t **b = calloc((size_t)1 << bits, sizeof(*b));
    if (!b)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < (size_t)1 << t->bits; i++) {
        while (t->b[i]) {
            mc__idnode_t *e = t->b[i];
            t->b[i] = e->hnext;
            size_t s = slot(bits, e->id);
            e->hnext = b[s];
            b[s] = e;
        }
    }
    free(t->b);
    t->b = b;
    t->bits = bits;
}

void mc__ids_add(mc__ids_t *t, mc__idnode_t *e)
{
    if (t->n >= (size_t)1 << t->bits && t->bits < 8 * sizeof(size_t) - 2)
        grow(t);
    size_t s = slot(t->bits, e->id);
    e->hnext = t->b[s];
    t->b[s] = e;
    t->n++;
}

mc__idnode_t *mc__ids_get(const mc__ids_t *t, uint64_t id)
{
    mc__idnode_t *e = t->b[slot(t->bits, id)];
    while (e && e->id != id)
        e = e->hnext;
    return e;
}

mc__idnode_t *mc__ids_del(mc__ids_t *t, uint64_t id)
{
    for (mc__idnode_t **pp = &t->b[slot(t->bits, id)]; *pp; pp = &(*pp)->hnext) {
        mc__idnode_t *e = *pp;
        if (e->id == id) {
            *pp = e->hnext;
            t->n--;
            return e;
        }
    }
    return NULL;
}

mc__idnode_t *mc__ids_first(const mc__ids_t *t, size_t *at)
{
    for (; t->n && *at < (size_t)1 << t->bits; ++*at)
        if (t->b[*at])
            return t->b[*at];
    return NULL;
}
