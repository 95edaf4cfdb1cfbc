/*
 * master_i.h - what the master logic's files share (master.c, put.c,
 * namespace.c): the master's fields, its segments and where versions are kept.
 * Not for other layers or for service.c, which use master.h.
 *
 * Published versions sit in an ordered index (key -> version, with a hash
 * table beside it) and carry the access clock of their last access
 * (mc__version_t tick), from which eviction takes the oldest of a random
 * sample. Retired versions that still have a handle or a lease wait in an
 * array until the last handle goes and mc__master_sweep() finds the lease
 * over. So every version that holds space is in the index or the array (or
 * is pending and its writer's, or MC__V_LOST), and dropping a segment
 * reaches each of them.
 */
#ifndef MC_MASTER_I_H
#define MC_MASTER_I_H

#include <stdlib.h>

#include "master/ids.h"
#include "master/index.h"
#include "master/master.h"
#include "master/ptrmap.h"
#include "master/slab.h"

typedef struct mc__segment {
    uint32_t id;
    uint64_t size;
    uint64_t hold_until; /* nothing new is placed here before then */
    mc__alloc_t *alloc;
    int avoid; /* placement takes it last (mc__master_segment_avoid) */
} mc__segment_t;

struct mc__master {
    mc__index_t *ix;
    mc__slab_t *slab; /* the versions that fit (NULL in a build with ASan: malloc) */
    mc__segment_t *segs;
    int nseg;
    uint64_t next_id;
    uint64_t first_made; /* the first id this run handed out (0: none yet):
                            a record reported with it or a later one may
                            carry an id this run gave another version
                            (records.c) */
    mc__master_opts_t o;
    uint32_t tick;           /* the access clock: one step per access (wraps:
                                eviction compares ages, tick - v->tick) */
    uint64_t rng;            /* xorshift64 state: eviction's samples */
    uint64_t ino_rng;        /* splitmix64 state: inode numbers (o.ino_seed) */
    uint64_t lease_base;     /* versions' leases end this many ms plus theirs
                                (mc__version_t lease; moved up by a walk of
                                every version, once in 2^32 ms at most) */
    mc__version_t **retired; /* retired, waiting for handles or a lease: */
    size_t nretired, rcap;   /* [0, nretired), room for rcap */
    uint64_t evicted;
    uint64_t stamp;        /* the last record stamp handed out */
    mc__version_t **dirty; /* versions whose nodes' records are stale (records.c),
                              NULL where one left before the flush: */
    size_t ndirty, dcap;   /* [dhead, ndirty) still to flush, room for dcap */
    size_t dhead;
    mc__ptrmap_t dplace;      /* the dirty versions' places in dirty, by address */
    mc__ptrmap_t handles;     /* the open handles of the versions that have some
                                 (MC__V_OPEN), by address */
    struct mc__owner *owners; /* the (uid, gid) pairs versions name (owners.c):
                                 [1, nowners); [0] unused (none) */
    uint32_t nowners, owners_cap;
    mc__ptrmap_t owner_ix; /* their indexes, by pair */
    int dirty_all;         /* the array could not grow: the next flush stamps every version */
    mc__notice_cb notice;  /* mc__master_notices(); NULL: none */
    void *notice_arg;
    mc__ids_t rebuilt;      /* mc__recovered_t by version id (records.c) */
    mc__ids_t waiting;      /* mc__waiting_t by inode number (records.c; empty
                               until a name's file is missing) */
    mc__ids_t renamed_to;   /* mc__renamed_t by the id a record was reported
                               under: the id its version took here instead
                               (records.c; empty until one is) */
    mc__ids_t renamed_from; /* the same pairs, by the id taken here */
    int64_t root_ns;        /* the root directory's mtime and ctime (namespace.c) */
};

/* A pair of owner and group that versions name by index (owners.c). */
typedef struct mc__owner {
    uint32_t uid, gid;
} mc__owner_t;

/* Frees m's table of owners (mc__master_free()). */
void mc__master_owners_free(mc__master_t *m);

/* A version rebuilt from nodes' records, by its id, so that the records of
 * its other replicas find it and the newest of them gives its metadata; v
 * NULL once it left the namespace (a later record of it must not bring it
 * back). */
typedef struct mc__recovered {
    mc__idnode_t h;
    mc__version_t *v;
    uint64_t stamp;       /* the stamp of its record as its nodes keep it, the
                             newest merged or sent */
    uint64_t meta : 62;   /* the stamp of the record that gave its metadata */
    uint64_t changed : 1; /* this run changed it (mc__master_dirty()): its
                             metadata is newer than any record's, whatever
                             the stamps (a clock set back starts this run's
                             below the last run's) */
    uint64_t moved : 1;   /* this run renamed it (mc__master_moved()): it is
                             newer at its key than any record's version */
} mc__recovered_t;

/* A version rebuilt under another id than its records' (records.c): one
 * id of the pair by the other (a pair is one block of two, [0] in
 * renamed_to). */
typedef struct mc__renamed {
    mc__idnode_t h;
    uint64_t id;
} mc__renamed_t;

/* The next version id; the first this run hands out is kept (first_made). */
static inline uint64_t mc__master_new_id(mc__master_t *m)
{
    if (!m->first_made)
        m->first_made = m->next_id;
    return m->next_id++;
}

/* The names in the index of a hard-linked file that is not (a name
 * reported before its file, or whose file was lost), by the file's inode
 * number: what its count of names starts at when it comes (records.c). */
typedef struct mc__waiting {
    mc__idnode_t h;
    uint32_t names;
} mc__waiting_t;

/* A name entry naming inode key ino[0..ilen) came into the index (delta 1)
 * or left it (-1): its file counts its names, or while the file is not in
 * the index, m->waiting does. Returns 0 or -ENOMEM (nothing changed). */
int mc__master_count_name(mc__master_t *m, const char *ino, size_t ilen, int delta);

/* Inode f leaves the index while its names stay (lost): they wait for a
 * version of it that comes back. Returns 0 or -ENOMEM. */
int mc__master_names_wait(mc__master_t *m, const mc__version_t *f);

/* The count of names waiting for inode key ino[0..ilen), taken out of
 * m->waiting (0: none). */
uint32_t mc__master_names_take(mc__master_t *m, const char *ino, size_t ilen);

/* Frees rep's extent array unless it is inl (the copy of a compact
 * version's one extent mc__vrep_get() filled; NULL when rep has none of
 * those). */
static inline void mc__replica_free_ext(mc__replica_t *rep, const mc__extent_t *inl)
{
    if (rep->ext != inl)
        free(rep->ext);
    rep->ext = NULL;
}

/* mc__master_replica_release() of a replica whose extent inl is a compact
 * version's copy (mc__replica_free_ext()). */
void mc__replica_release_in(mc__master_t *m, mc__replica_t *rep, const mc__extent_t *inl);

/* Takes v out of the dirty array (records.c); it is leaving. */
void mc__master_undirty(mc__master_t *m, mc__version_t *v);

/* mc__master_dirty() of v, which a rename of this run put under its key:
 * there, it is newer than any record's version (records.c), as one this
 * run made. */
void mc__master_moved(mc__master_t *m, mc__version_t *v);

/* 1 if v is under a read lease at now. */
static inline int mc__leased(const mc__master_t *m, const mc__version_t *v, uint64_t now)
{
    return v->lease && m->lease_base + v->lease > now;
}

/* Records an access of published v: it becomes the most recently used. */
static inline void mc__lru_touch(mc__master_t *m, mc__version_t *v)
{
    v->tick = ++m->tick;
}

/* Free bytes in a segment. */
static inline uint64_t mc__segment_free(const mc__segment_t *s)
{
    return mc__alloc_size(s->alloc) - mc__alloc_used(s->alloc);
}

/* After an allocation of want bytes failed for lack of space: pass 0
 * frees retired versions whose lease ran out, pass 1 evicts (when the
 * master evicts). Returns 1 if a retry may now succeed, else 0. */
int mc__master_make_room(mc__master_t *m, uint64_t want, int pass, uint64_t now);

/* Bytes allocated in all segments. */
uint64_t mc__master_used(const mc__master_t *m);

/* Bytes in all segments. */
uint64_t mc__master_total(const mc__master_t *m);

/* The mounted segment id, or NULL. */
mc__segment_t *mc__master_seg(mc__master_t *m, uint32_t id);

/* A NUL-terminated copy of key[0..klen) (the caller frees it), or NULL. */
char *mc__dup_key(const char *key, size_t klen);

/* A new version (zeroed, nowhere yet) of key[0..klen) with room for repcap
 * replicas (0: compact, its one replica in its fields), in one allocation
 * (from m's slab when it fits); NULL when out of memory. Free it with mc__version_destroy(), or
 * mc__version_free() if it holds no space. */
mc__version_t *mc__version_new(mc__master_t *m, const char *key, size_t klen, uint32_t repcap);

/* Frees v's memory (key, replica and extent arrays, attributes, link)
 * without returning its space or leaving the retired array. */
void mc__version_free(mc__master_t *m, mc__version_t *v);

/* v's key becomes k[0..klen), a malloc'd NUL-terminated string it now
 * owns (mc__dup_key()); the old key is freed. v must have its rare fields
 * made (mc__version_more(): the key is kept there), so this cannot fail. */
void mc__version_set_key(mc__version_t *v, char *k, size_t klen);

/* Frees v, its key and its space, taking it out of the retired array
 * first (when it is there). */
void mc__version_destroy(mc__master_t *m, mc__version_t *v);

/* A version leaves the index (the caller has removed it): frees it now, or
 * parks it in the retired array until its handles and lease end. */
void mc__master_retire(mc__master_t *m, mc__version_t *v, uint64_t now);

#endif /* MC_MASTER_I_H */
