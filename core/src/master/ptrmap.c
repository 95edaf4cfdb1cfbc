/*
 * ptrmap.c - the address table (see ptrmap.h): Fibonacci hashing of the
 * address, linear probing, backward-shift deletion.
 */
#include <errno.h>
#include <stdlib.h>

#include "master/ptrmap.h"

/* The first slot to look at for p in a table of cap slots (a power of
 * two, at least 64): the top bits of the address times 2^64 / phi. */
static size_t home(const void *p, size_t cap)
{
    return (size_t)(((uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull) >>
                    (64 - __builtin_ctzll((unsigned long long)cap)));
}

mc__ptrslot_t *mc__ptrmap_find(const mc__ptrmap_t *t, const void *p)
{
    if (!t->n)
        return NULL;
    for (size_t i = home(p, t->cap);; i = (i + 1) & (t->cap - 1)) {
        if (t->s[i].p == p)
            return &t->s[i];
        if (!t->s[i].p)
            return NULL;
    }
}

static void put(mc__ptrslot_t *s, size_t cap, const void *p, uint64_t val)
{
    size_t i = home(p, cap);
    while (s[i].p)
        i = (i + 1) & (cap - 1);
    s[i] = (mc__ptrslot_t){p, val};
}

int mc__ptrmap_add(mc__ptrmap_t *t, const void *p, uint64_t val)
{
    if (2 * (t->n + 1) > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        mc__ptrslot_t *s = calloc(cap, sizeof(*s));
        if (!s)
            return -ENOMEM;
        for (size_t i = 0; i < t->cap; i++)
            if (t->s[i].p)
                put(s, cap, t->s[i].p, t->s[i].val);
        free(t->s);
        t->s = s;
        t->cap = cap;
    }
    put(t->s, t->cap, p, val);
    t->n++;
    return 0;
}

void mc__ptrmap_del(mc__ptrmap_t *t, mc__ptrslot_t *e)
{
    size_t mask = t->cap - 1, hole = (size_t)(e - t->s);
    t->s[hole].p = NULL;
    for (size_t i = (hole + 1) & mask; t->s[i].p; i = (i + 1) & mask) {
        /* The entry at i may move back into the hole unless its home lies
         * in (hole, i]: then it would be found no more. */
        size_t h = home(t->s[i].p, t->cap);
        if (((i - h) & mask) >= ((i - hole) & mask)) {
            t->s[hole] = t->s[i];
            t->s[i].p = NULL;
            hole = i;
        }
    }
    t->n--;
}

void mc__ptrmap_reset(mc__ptrmap_t *t)
{
    free(t->s);
    *t = (mc__ptrmap_t){0};
}
