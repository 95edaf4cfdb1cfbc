/*
 * census.h - counting the master's versions by state, for metrics: leased,
 * pinned, open and retired ones. A walk over every version (O(objects)),
 * so for a scrape now and then, not for every request.
 */
#ifndef MC_CENSUS_H
#define MC_CENSUS_H

#include <stdint.h>

#include "master/master.h"

typedef struct mc__census {
    uint64_t published;   /* versions in the index */
    uint64_t leased;      /* ... under a read lease at now */
    uint64_t soft_pinned; /* ... soft-pinned (the pin not expired at now) */
    uint64_t hard_pinned; /* ... hard-pinned */
    uint64_t open;        /* versions, published or retired, with open handles */
    uint64_t retired;     /* replaced or removed, kept for a lease or a handle */
    uint64_t retired_bytes;
} mc__census_t;

/* Fills *c with m's versions at now (ms, the master's clock). */
void mc__master_census(const mc__master_t *m, uint64_t now, mc__census_t *c);

/* The i-th mounted segment's id, size and bytes allocated. Returns 0, or
 * -ENOENT past the last one. */
int mc__master_segment_at(const mc__master_t *m, int i, uint32_t *id, uint64_t *size,
                          uint64_t *used);

#endif /* MC_CENSUS_H */
