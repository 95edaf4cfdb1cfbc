/*
 * ids.h - an intrusive hash of records by 64-bit id: the service's writes
 * in progress, open handles and owners. Lookups by id are what every
 * PUT_GROW, PUT_COMMIT, READ of a handle and CLOSE does, so they cost one
 * multiply and a short chain, not a walk of an ordered index.
 *
 * A record embeds an mc__idnode_t and is found again by container
 * arithmetic. The table owns nothing: freeing records is the caller's.
 * Buckets double when the table holds as many records as buckets; if that
 * allocation fails the table keeps working with longer chains.
 */
#ifndef MC_MASTER_IDS_H
#define MC_MASTER_IDS_H

#include <stddef.h>
#include <stdint.h>

typedef struct mc__idnode {
    uint64_t id;
    struct mc__idnode *hnext;
} mc__idnode_t;

typedef struct mc__ids {
    mc__idnode_t **b;
    unsigned bits; /* 1 << bits buckets */
    size_t n;
} mc__ids_t;

/* Returns 0 or -ENOMEM. */
int mc__ids_init(mc__ids_t *t);
void mc__ids_fini(mc__ids_t *t);

/* Files e under e->id, which must not be in t yet. */
void mc__ids_add(mc__ids_t *t, mc__idnode_t *e);
mc__idnode_t *mc__ids_get(const mc__ids_t *t, uint64_t id);
/* Takes the record with id out of t and returns it (NULL: none). */
mc__idnode_t *mc__ids_del(mc__ids_t *t, uint64_t id);
/* For draining t: the first record in a bucket at or after *at (start at
 * 0), moving *at there; NULL when none is left. Taking the record out
 * before the next call keeps *at valid. */
mc__idnode_t *mc__ids_first(const mc__ids_t *t, size_t *at);

#endif /* MC_MASTER_IDS_H */
