/*
 * master.h - the metadata master's logic: key index, object versions, space,
 * leases, pins and eviction. No I/O and no clock of its own: callers pass
 * `now` (milliseconds, monotonic), so the same code serves the embedded store
 * and, behind a wire protocol, the master process. Not thread-safe: one
 * thread owns a master.
 *
 * A version is PENDING while a writer fills it (invisible), PUBLISHED while
 * the index maps its key to it, and RETIRED once replaced or removed: a
 * retired version's space is returned when the last handle (ref) is dropped
 * and its read lease has run out.
 *
 * Hard links: a key that names a file shared with other keys maps to a
 * name entry (a published version with `link` set, no replicas, never
 * evicted) whose `link` is the key of the shared file, an inode key under
 * MC__INODE_PREFIX that no client may put, rename or remove, and that no
 * listing shows. The inode's version counts its names in `links`. Lookups,
 * opens, reads, metadata changes and commits of a name go to the inode;
 * removing or replacing a name drops one count, the last one the inode.
 */
#ifndef MC_MASTER_H
#define MC_MASTER_H

#include <stddef.h>
#include <stdint.h>

#include "master/alloc.h"
#include "mooncake/mooncake.h"
#include "wire/record.h"

#define MC__MAX_REPLICAS 8

/* Space is reserved in the master's allocation unit (mc__master_opts_t
 * align, 64 bytes by default). A version under MC__SMALL_MAX bytes with no
 * hole is trimmed at its commit to a multiple of MC__SMALL_UNIT, the
 * segments' allocators' unit: a 100-byte value takes 100 bytes, not 128
 * (nor 104, as in 8-byte units). Nothing reads a value in wider words than
 * bytes (memcpy, the kernel, the NIC), so 4-byte offsets are as good. */
#define MC__SMALL_UNIT 4
#define MC__SMALL_MAX 1024

/* The keys of hard-linked files (inodes); see the top of this file. */
#define MC__INODE_PREFIX "\x01mooncake-inode/"
#define MC__INODE_PLEN (sizeof(MC__INODE_PREFIX) - 1)

typedef struct mc__master mc__master_t;

typedef struct mc__replica {
    uint32_t seg;      /* segment id */
    uint32_t n;        /* extents */
    mc__extent_t *ext; /* byte ranges in the segment, in object order: NULL,
                          a caller's copy of a compact version's one extent
                          (mc__vrep_get(), not the replica's own), or an
                          array of its own with room for at least
                          mc__replica_room(n) */
} mc__replica_t;

/* The room an extent array of a replica's own has for n extents: the
 * power of two at or above n, at least 2 (so that one grows by doubling
 * with no count of its own). */
static inline uint64_t mc__replica_room(uint64_t n)
{
    uint64_t r = 2;
    while (r < n)
        r *= 2;
    return r;
}

enum mc__vstate { MC__PENDING, MC__PUBLISHED, MC__RETIRED };

/* What a pending version takes from the version its commit replaces: the
 * mode when the put named none, the owner when it named none, the atime
 * (publishing new content is no access), and always its extended
 * attributes (a put carries none). */
#define MC__INHERIT_MODE 0x1
#define MC__INHERIT_OWNER 0x2

/* mc__version_t.flags: what of a version lives outside its own allocation
 * (its key after a rename, its replica array after growing past the room
 * it was made with, none for a compact one), pointed to from its rare
 * fields (mc__vmore_t key, rep) and freed on its own. Read both through
 * mc__vkey() and mc__vrep_get(). */
#define MC__V_KEY_OWNED 0x1
#define MC__V_REP_OWNED 0x2
#define MC__V_REBUILT                                                                              \
    0x4 /* rebuilt from nodes' records: an entry by its id in the                                  \
           master's table of those (records.c) */

/* mc__version_t.flags: its own allocation is from the master's slab
 * (slab.h), not from malloc. */
#define MC__V_SLAB 0x8

/* mc__version_t.flags: retired while it had a handle or a lease, when the
 * master's array of those could not grow (out of memory): it is never
 * freed, neither its memory nor its space (a leak, never a use after
 * free or space handed out twice). */
#define MC__V_LOST 0x10

/* mc__version_t.flags: its ctime is not its mtime (a change of metadata
 * came after its content's): it is in its rare fields (mc__vmore_t
 * ctime_ns). Read it through mc__vctime(). */
#define MC__V_CTIME 0x20

/* mc__version_t.flags: its record has been handed to the notice callback
 * (mc__master_flush()) or came from a node (mc__master_merge()): its nodes
 * keep it, so leaving the namespace is told to them. */
#define MC__V_NOTED 0x40

/* mc__version_t.flags: it has open handles, counted in the master's table
 * of those (mc__master_ref()): most versions have none, and carry no
 * count. Read it through mc__vopen(). */
#define MC__V_OPEN 0x80

/* A compact version's one extent packed in 8 bytes (mc__version_t x1):
 * its offset in 42 bits and its length in 22, both in MC__SMALL_UNIT
 * units, as every extent of a segment is (mc__master_add_segment() gives
 * each segment's allocator the unit 4, the smallest it takes, and it hands
 * out and takes back only multiples of its unit), so offsets below 16 TiB
 * and lengths below 16 MiB. An extent past either, or a hole,
 * does not fit: its version takes a replica array (mc__vcompact()), as one
 * with more extents does; a version that large has bytes to spare. */
#define MC__X1_OFF_BITS 42
#define MC__X1_OFF_END ((uint64_t)MC__SMALL_UNIT << MC__X1_OFF_BITS)
#define MC__X1_LEN_END ((uint64_t)MC__SMALL_UNIT << (64 - MC__X1_OFF_BITS))

/* 1 if e fits a compact version's x1 (mc__x1_pack()), else 0. */
static inline int mc__x1_fits(const mc__extent_t *e)
{
    return e->off != MC__HOLE && (e->off | e->len) % MC__SMALL_UNIT == 0 &&
           e->off < MC__X1_OFF_END && e->len < MC__X1_LEN_END;
}

/* e packed (mc__x1_fits(e) must hold), and back. */
static inline uint64_t mc__x1_pack(const mc__extent_t *e)
{
    return (e->off / MC__SMALL_UNIT) | ((e->len / MC__SMALL_UNIT) << MC__X1_OFF_BITS);
}

static inline mc__extent_t mc__x1_unpack(uint64_t x)
{
    return (mc__extent_t){(x & (((uint64_t)1 << MC__X1_OFF_BITS) - 1)) * MC__SMALL_UNIT,
                          (x >> MC__X1_OFF_BITS) * MC__SMALL_UNIT};
}

/*
 * One version. Sized for the million small objects of a cache: one
 * allocation holds the struct and the key, and either its one replica's
 * segment and extent in the fields (a compact version: room for no replica
 * array, mc__vcompact()) or a replica array after the key (room for the
 * replicas asked for, when more than one); the fields are as wide as their
 * values need (the aim, issue 14: 1M keys of 100 B in no more memory than
 * Redis takes, docs/BENCHMARKS.md).
 */
typedef struct mc__version {
    uint64_t id;
    /* Bit-fields as narrow as their values (checked where they come in):
     * with the size in 48 bits (a larger one, of a sparse file, in the
     * rare fields), the key's length in 13 and the mode in 12, the lease
     * in 32, the atime sharing a word with the rare fields and the one
     * extent with the capacity, the fields take 61 bytes, where the key
     * starts (mc__vrep_offset()): a key of up to 10 bytes and its NUL end
     * at 72. */
    uint64_t size : 48;         /* bytes of data, below MC__VSIZE_BIG, else that and
                                   the size is in its rare fields (mc__vmore_t
                                   size); read it through mc__vsize() */
    uint64_t klen : 13;         /* <= MC_KEY_MAX */
    uint64_t state : 2;         /* enum mc__vstate */
    uint64_t has_more : 1;      /* it has rare fields (mc__version_more()) */
    int64_t mtime_ns;           /* wall clock (ns); the service sets it */
    union {                     /* one word for two fields (has_more says which) */
        int64_t atime_own;      /* !has_more: its atime (wall clock, ns, as the
                                   mtime); read it through mc__vatime() */
        struct mc__vmore *rare; /* has_more: what few versions have (owned),
                                   its atime too; read it through mc__vmore() */
    };
    uint64_t x1;    /* compact with an extent (n1): that extent, packed
                       (mc__x1_pack()), whose length is its capacity;
                       otherwise its capacity, the bytes reserved in each
                       replica. Read it through mc__vcap() and
                       mc__vrep_get(): most objects' only extent needs
                       neither an allocation nor a length of its own */
    uint32_t owner; /* its owner and group: an index into the master's
                       table of those pairs (owners.c; 0: none recorded);
                       read them through mc__version_owner() */
    uint32_t lease; /* its read lease ends at the master's lease base plus
                       this many ms (0: none); read it through
                       mc__version_lease() */
    union {
        uint32_t tick; /* published: the master's access clock at its last
                          access (approximate LRU: eviction samples versions
                          and takes the oldest) */
        uint32_t rpos; /* retired: its place in the master's array of those
                          waiting for handles or a lease, plus one (0: none) */
    };
    uint32_t seg1;        /* compact (mc__vcompact()) with a replica: its segment */
    uint16_t mode : 12;   /* & 07777 */
    uint16_t pin : 2;     /* MC_PIN_* (<= MC_PIN_HARD) */
    uint16_t inherit : 2; /* pending: MC__INHERIT_*, what to take at commit
                             from the version it replaces */
    uint8_t nrep : 4;     /* <= MC__MAX_REPLICAS */
    uint8_t repcap : 4;   /* the replicas its array has room for: after its
                             fields and its key, or, MC__V_REP_OWNED, in its
                             rare fields; 0: compact, see mc__vcompact() */
    uint8_t type : 3;     /* MC_TYPE_* */
    uint8_t n1 : 1;       /* compact with a replica: its extents (0 or 1, in
                             x1) */
    uint8_t want : 4;     /* replicas asked for (clamped to the segments at the
                             start; <= MC__MAX_REPLICAS) */
    uint8_t flags;        /* MC__V_* */
    char key[];           /* its key, unless MC__V_KEY_OWNED (read it through
                             mc__vkey()): right after the fields, in the
                             struct's tail padding and on */
} mc__version_t;

_Static_assert(MC__MAX_REPLICAS < 16 && MC_PIN_HARD < 4 && MC_TYPE_MAX < 8 &&
                   (MC__INHERIT_MODE | MC__INHERIT_OWNER) < 4 && MC_KEY_MAX < 8192,
               "mc__version_t's bit-fields");
_Static_assert(offsetof(mc__version_t, key) == 61, "mc__version_t's fields take 61 bytes");
_Static_assert(sizeof(mc__version_t) - offsetof(mc__version_t, key) < 8,
               "a version's own allocation (mc__vrep_offset()) covers its struct");

/* The fields of a version that few versions set (xattrs, hard links, soft
 * pins with a TTL, device numbers, sizes past 48 bits), kept apart so that the others do not
 * carry them: a version without any has none (has_more 0). Made, they take
 * the version's atime along, whose word then points to them. */
typedef struct mc__vmore {
    int64_t atime_ns;   /* the version's atime (mc__vatime()) */
    char *xattr;        /* owned: extended attributes, packed (xattr.c); NULL: none */
    char *link;         /* a name entry: the inode key it names (owned), else NULL */
    uint64_t pin_until; /* soft pin expiry (ms); 0: no expiry */
    uint64_t rdev;
    uint32_t xattr_len;
    uint32_t links;     /* an inode: the names of the file (0: a plain key) */
    uint16_t linklen;   /* <= MC_KEY_MAX */
    uint16_t klen_in;   /* MC__V_KEY_OWNED: the length of the key in v's own
                           allocation (its replicas follow it) */
    int64_t ctime_ns;   /* MC__V_CTIME: v's ctime */
    char *key;          /* MC__V_KEY_OWNED: v's key (owned, NUL-terminated) */
    mc__replica_t *rep; /* MC__V_REP_OWNED: v's replica array (owned, room for
                           v->repcap) */
    uint64_t size;      /* v's size when it is MC__VSIZE_BIG or more */
} mc__vmore_t;

/* The sizes a version keeps in its rare fields, not in its own 48 bits:
 * 2^48 - 1 bytes (just under 256 TiB) and more, which only a sparse file
 * has (a file's bytes are in segments; its holes take no space). */
#define MC__VSIZE_BIG (((uint64_t)1 << 48) - 1)

/* v's size: the bytes of its data. */
static inline uint64_t mc__vsize(const mc__version_t *v)
{
    return v->size == MC__VSIZE_BIG ? v->rare->size : v->size;
}

/* Sets v's size. Returns 0, or -ENOMEM (nothing changed) when the size is
 * MC__VSIZE_BIG or more and v's rare fields could not be made. */
int mc__version_set_size(mc__version_t *v, uint64_t size);

/* v's rare fields to read: all zero when it has none. */
static inline const mc__vmore_t *mc__vmore(const mc__version_t *v)
{
    static const mc__vmore_t none;
    return v->has_more ? v->rare : &none;
}

/* v's atime (wall clock, ns). */
static inline int64_t mc__vatime(const mc__version_t *v)
{
    return v->has_more ? v->rare->atime_ns : v->atime_own;
}

/* Sets v's atime to t. */
static inline void mc__version_set_atime(mc__version_t *v, int64_t t)
{
    if (v->has_more)
        v->rare->atime_ns = t;
    else
        v->atime_own = t;
}

/* v's key (klen bytes, NUL-terminated): in v's own allocation, right after
 * its fields (where the index's comparisons find it at once), unless
 * MC__V_KEY_OWNED. */
static inline char *mc__vkey(const mc__version_t *v)
{
    if (v->flags & MC__V_KEY_OWNED)
        return v->rare->key;
    return (char *)(uintptr_t)v->key;
}

/* Where a version's own replica array starts, after a key of klen bytes
 * and its NUL, at the next 8 bytes (never before the struct's end); a
 * compact version's allocation ends there. */
static inline size_t mc__vrep_offset(size_t klen)
{
    return (offsetof(mc__version_t, key) + klen + 1 + 7) & ~(size_t)7;
}

/* 1 if v is compact: its allocation has no room for a replica array and
 * none moved out (MC__V_REP_OWNED); its one replica, when it has one
 * (nrep 1), is seg1 with n1 extents (0, or 1 packed in x1). Most versions
 * are: those put with one replica. Adding a replica, or an extent that x1
 * does not hold (a second one, or one that does not fit, mc__x1_fits()),
 * makes the array first (mc__version_rep_array()); a version with an array
 * keeps it, and every replica in it has an extent array of its own. */
static inline int mc__vcompact(const mc__version_t *v)
{
    return v->repcap == 0 && !(v->flags & MC__V_REP_OWNED);
}

/* v's replica array, rep[0..nrep): in v's own allocation, after its key,
 * unless MC__V_REP_OWNED. Not for a compact version, which has none:
 * read a replica through mc__vrep_get() and write it through
 * mc__vrep_put(). */
static inline mc__replica_t *mc__vrep_array(const mc__version_t *v)
{
    if (v->flags & MC__V_REP_OWNED)
        return v->rare->rep;
    size_t klen = v->flags & MC__V_KEY_OWNED ? v->rare->klen_in : v->klen;
    return (mc__replica_t *)(uintptr_t)((const char *)v + mc__vrep_offset(klen));
}

/* v's replica r (r < nrep), as a value: its ext is the replica's own
 * array in v, or, v compact, one (the caller's) holding a copy of its one
 * extent (x1 unpacked): what is read through it is v's, what is written
 * through one is v's only once stored back (mc__vrep_put()). */
static inline mc__replica_t mc__vrep_get(const mc__version_t *v, uint32_t r, mc__extent_t *one)
{
    if (!mc__vcompact(v))
        return mc__vrep_array(v)[r];
    if (!v->n1)
        return (mc__replica_t){.seg = v->seg1};
    *one = mc__x1_unpack(v->x1);
    return (mc__replica_t){.seg = v->seg1, .n = 1, .ext = one};
}

/* The segment of v's replica r (r < nrep). */
static inline uint32_t mc__vrep_seg(const mc__version_t *v, uint32_t r)
{
    return mc__vcompact(v) ? v->seg1 : mc__vrep_array(v)[r].seg;
}

/* Stores rep as v's replica r (a value from mc__vrep_get(v, r, one),
 * changed). A compact version's replica keeps at most one extent, in
 * one, that fits x1 (mc__x1_fits()): anything else takes
 * mc__version_rep_array() first (aborts otherwise: a replica array lost is
 * space and bytes lost, an extent cut short is bytes lost). Its extent
 * gone, its capacity stays what the extent's length was. */
void mc__vrep_put(mc__version_t *v, uint32_t r, const mc__replica_t *rep, const mc__extent_t *one);

/* Gives compact v a replica array (in its rare fields, MC__V_REP_OWNED,
 * room for its replicas, at least one) holding what its fields held, its
 * one extent in an extent array of its replica's own, and x1 the capacity
 * alone; nothing for a version that has one. Returns 0, or -ENOMEM
 * (nothing changed). */
int mc__version_rep_array(mc__version_t *v);

/* 1 if v has open handles (mc__master_ref()), else 0. */
static inline int mc__vopen(const mc__version_t *v)
{
    return (v->flags & MC__V_OPEN) != 0;
}

/* v's capacity: the bytes reserved in each replica (the length of its
 * layout, holes included). */
static inline uint64_t mc__vcap(const mc__version_t *v)
{
    return mc__vcompact(v) && v->n1 ? mc__x1_unpack(v->x1).len : v->x1;
}

/* Sets v's capacity to cap. While v is compact with an extent (in x1),
 * that extent's length is the same field: the caller has made (or
 * trimmed) that extent to cap already (aborts otherwise: the capacity
 * would be wrong, or the extent). */
void mc__version_set_cap(mc__version_t *v, uint64_t cap);

/* v's ctime (wall clock, ns): its mtime unless a change of metadata came
 * later (MC__V_CTIME). */
static inline int64_t mc__vctime(const mc__version_t *v)
{
    return v->flags & MC__V_CTIME ? v->rare->ctime_ns : v->mtime_ns;
}

/* Sets v's ctime to t (wall clock, ns); set the mtime first when both
 * change, since a ctime equal to the mtime is kept as none. Returns 0, or
 * -ENOMEM when t needed v's rare fields and they could not be made: its
 * ctime then reads as its mtime. */
int mc__version_set_ctime(mc__version_t *v, int64_t t);

/* v's rare fields to write, made (zeroed) the first time; NULL when out of
 * memory. */
mc__vmore_t *mc__version_more(mc__version_t *v);

/* Tells the nodes that hold v's replicas (or, for a name entry, its file's)
 * that v's record changed (drop 0: it carries a new stamp, see
 * mc__master_record()) or that v left the namespace (drop 1). See
 * mc__master_dirty(). */
typedef void (*mc__notice_cb)(void *arg, mc__master_t *m, mc__version_t *v, int drop);

/* The longest read lease (mc__master_opts_t lease_ms is cut to it): 24 days. */
#define MC__LEASE_MAX_MS ((uint64_t)INT32_MAX)

typedef struct mc__master_opts {
    uint64_t lease_ms;
    uint64_t first_id;        /* the first version id and stamp (0: 1); a master that
                                 may restart passes one above every id of its
                                 earlier runs (the wall clock in microseconds) */
    uint64_t ino_seed;        /* 0: a hard-linked file's inode number is the next
                                 version id; else the seed of random ones, drawn
                                 anew by each run (mc__svc_random_id()): a
                                 restarted master links files before every node
                                 has reported, and its ids may start below the
                                 last run's (a clock set back), but its inode
                                 numbers must not be those of files reported
                                 later */
    unsigned evict_high_pct;  /* 0: never evict */
    unsigned evict_ratio_pct; /* % of all space to free per eviction */
    uint64_t align;           /* allocation unit (power of two) */
} mc__master_opts_t;

/* Creates a master with no segments. Returns 0 or -ENOMEM. */
int mc__master_new(mc__master_t **out, const mc__master_opts_t *o);

/* Frees the master with every version, pending or not. */
void mc__master_free(mc__master_t *m);

/* Adds a segment of size bytes under id. Returns 0, -EEXIST, -EINVAL, -ENOMEM. */
int mc__master_add_segment(mc__master_t *m, uint32_t id, uint64_t size);

/*
 * Drops segment id (its node is gone): its replicas leave every version, and
 * a published version left without a replica leaves the index. Pending
 * versions belong to their writers, who drop the replica themselves
 * (mc__version_drop_replica). Returns the number of objects lost.
 */
size_t mc__master_drop_segment(mc__master_t *m, uint32_t id, uint64_t now);

/* Places nothing new on segment id before until (ms): it was mounted again
 * and writers of before may still send late bytes into it. Puts that find
 * every segment on hold fail with -EAGAIN. */
void mc__master_hold_segment(mc__master_t *m, uint32_t id, uint64_t until);

/* 1 if segment id is on hold at now (mc__master_hold_segment()). */
int mc__master_segment_held(mc__master_t *m, uint32_t id, uint64_t now);

/* 1 if segment id is mounted. */
int mc__master_has_segment(const mc__master_t *m, uint32_t id);

/* Removes the replica on segment seg from v, if any. */
void mc__version_drop_replica(mc__version_t *v, uint32_t seg);

/* The published version of key, or NULL; for a hard link's name, the
 * version of the file it names (NULL if that was lost). */
mc__version_t *mc__master_find(mc__master_t *m, const char *key, size_t klen);

/* What an index entry stands for: for a name entry the version of the file
 * it names (NULL if lost), else v itself. */
mc__version_t *mc__master_resolve(mc__master_t *m, mc__version_t *v);

/* The inode number of key[0..klen): 1 (*no set) if key is an inode key as
 * a master makes it (MC__INODE_PREFIX and the number in lowercase hex,
 * without leading zeros), else 0. */
int mc__inode_no(const char *key, size_t klen, uint64_t *no);

/* 1 if key lies under MC__INODE_PREFIX (no client may change it). */
int mc__master_is_inode_key(const char *key, size_t klen);

/*
 * Gives the file named by key `from` a new name `to` (a hard link): the
 * first link moves the file's version to a new inode key and leaves a name
 * entry under from; every link adds a name entry and counts one more name.
 * Sets *out to the file's version. Returns 0, -ENOENT (from is absent, or
 * the file it names was lost), -EEXIST (to exists), -EPERM (from or to is a
 * directory marker, ending in '/'), -EINVAL (an inode key, or a bad key),
 * -ENAMETOOLONG, -ENOMEM.
 */
int mc__master_link(mc__master_t *m, const char *from, size_t flen, const char *to, size_t tlen,
                    mc__version_t **out);

/* Records an access (LRU) and, with lease != 0, grants a read lease. */
void mc__master_touch(mc__master_t *m, mc__version_t *v, uint64_t now, int lease);

/* Takes / drops an open handle on a version (counted in m's table of the
 * versions that have some). Taking one returns 0, or -ENOMEM (no handle
 * taken). Dropping the last handle of a retired version frees it (or
 * parks it until its lease ends). */
int mc__master_ref(mc__master_t *m, mc__version_t *v);
void mc__master_unref(mc__master_t *m, mc__version_t *v, uint64_t now);

/*
 * Starts a pending version of key (placing its replicas). The caller owns it
 * until mc__master_commit() succeeds or mc__master_abort(). Returns 0,
 * -EINVAL / -ENAMETOOLONG (bad key), -ENOSPC (no segment), -ENOMEM.
 */
int mc__master_begin(mc__master_t *m, const char *key, size_t klen, const mc_put_opts_t *po,
                     uint64_t now, mc__version_t **out);

/* mc__master_begin() placing the first replica on segment pref_seg when it
 * is mounted and has at least need bytes free (pref_seg < 0: no preference);
 * otherwise, and for the other replicas, best effort as usual. */
int mc__master_begin_at(mc__master_t *m, const char *key, size_t klen, const mc_put_opts_t *po,
                        int64_t pref_seg, uint64_t need, uint64_t now, mc__version_t **out);

/* Grows a pending version's reserved space to at least capacity bytes in
 * every replica, evicting if enabled. Returns 0 or -ENOSPC / -ENOMEM (the
 * reservation is then unchanged). */
int mc__master_reserve(mc__master_t *m, mc__version_t *v, uint64_t capacity, uint64_t now);

/*
 * Sparse files (holes.c): grows a pending version's layout to at least
 * off + len bytes, the bytes past its old end a hole (MC__HOLE extents,
 * taking no space), then gives [off, off + len) space in every replica
 * (holes in it filled; the range widened to the allocation unit), or with
 * punch makes the whole units of [off, off + len) a hole, returning their
 * space. Returns 0, -ENOSPC / -ENOMEM (v is then unchanged), -EIO (no
 * replica left).
 */
int mc__master_reserve_range(mc__master_t *m, mc__version_t *v, uint64_t off, uint64_t len,
                             int punch, uint64_t now);

/* Bytes of segment space replica rep holds (its holes take none). */
uint64_t mc__replica_bytes(const mc__replica_t *rep);

/* mc__replica_bytes() of v's replica r (r < nrep). */
static inline uint64_t mc__vrep_bytes(const mc__version_t *v, uint32_t r)
{
    mc__extent_t one;
    mc__replica_t rep = mc__vrep_get(v, r, &one);
    return mc__replica_bytes(&rep);
}

/* Returns the extents ext[0..n) that are not holes to allocator a. */
void mc__extents_put(mc__alloc_t *a, const mc__extent_t *ext, uint32_t n);

/* Changes the key a pending version will be published under. */
int mc__master_set_key(mc__master_t *m, mc__version_t *v, const char *key, size_t klen);

/*
 * Publishes a pending version with the given size (<= capacity; extra space
 * is returned), replacing the key's current version, whose mode and owner it
 * takes as v->inherit says, and whose atime and extended attributes it
 * keeps. With MC_PUT_NOREPLACE
 * in flags, fails with -EEXIST if the key exists, and the caller still owns v.
 */
int mc__master_commit(mc__master_t *m, mc__version_t *v, uint64_t size, unsigned flags,
                      uint64_t now);
/* mc__master_commit(), also telling whether the name is a new one in its
 * directory (*added 1: no entry stood under it) so that the caller need not
 * look the key up again. added may be NULL. */
int mc__master_commit_as(mc__master_t *m, mc__version_t *v, uint64_t size, unsigned flags,
                         uint64_t now, int *added);

/* Drops a pending version and its space. */
void mc__master_abort(mc__master_t *m, mc__version_t *v);

/* Removes key; see MC_REMOVE_*. A hard link's name goes with one count of
 * its file, which goes with its last name. Returns 0, -ENOENT, -EBUSY,
 * -ENOTEMPTY, -EINVAL (also for an inode key). */
int mc__master_remove(mc__master_t *m, const char *key, size_t klen, unsigned flags, uint64_t now);

/* Renames a key or a prefix; see MC_RENAME_*. */
int mc__master_rename(mc__master_t *m, const char *from, size_t flen, const char *to, size_t tlen,
                      unsigned flags, uint64_t now);

/* Builds a listing (see mc_list_async()). Returns the count, or -ENOMEM. */
int mc__master_list(mc__master_t *m, const char *prefix, size_t plen, const char *after,
                    size_t alen, int delim, size_t max, uint64_t now, mc_list_t **out);

/* Tells whether key is a directory (some key starts with key + delim; *v is
 * the marker key + delim or NULL; the delimiter alone is the root, always
 * a directory), a file (*v its version) or absent; see mc_lookup_async(). */
int mc__master_lookup(mc__master_t *m, const char *key, size_t klen, int delim, mc__version_t **v);

/*
 * Changes the metadata of key's current version as mc_set_meta_async() says
 * (a new owner clears set-ID bits of what is not a directory marker), with
 * ctime wall_ns, and sets *out to the version. Returns 0, -ENOENT, -EINVAL
 * (an unknown bit in meta->what).
 */
int mc__master_set_meta(mc__master_t *m, const char *key, size_t klen, const mc_meta_t *meta,
                        int64_t wall_ns, mc__version_t **out);

/*
 * A name appeared in, or left, the directory holding key (the keys are paths
 * split at '/'): the directory's marker key, if it has one, takes mtime and
 * ctime wall_ns. The directory of a marker "a/b/" is "a/"; a key without
 * '/' lies in the root, which has no marker: its times are the master's
 * (mc__master_root_ns()).
 */
void mc__master_dir_changed(mc__master_t *m, const char *key, size_t klen, int64_t wall_ns);

/* When a name last appeared in or left the root directory (wall clock,
 * ns; 0: not since the master started): its mtime and ctime. */
int64_t mc__master_root_ns(const mc__master_t *m);

/* v's metadata changed (ctime wall_ns): its nodes get its record. */
void mc__master_changed(mc__master_t *m, mc__version_t *v, int64_t wall_ns);

/* The number of distinct prefixes key + delim + name + delim (the
 * subdirectories of the directory key; of the root, name + delim, when
 * key is the delimiter alone). Costs one step per key directly under
 * key + delim and one index seek per subdirectory. */
uint32_t mc__master_subdirs(mc__master_t *m, const char *key, size_t klen, int delim);

/* Fills the space counters. */
void mc__master_space(const mc__master_t *m, mc_space_t *sp);

/* Frees retired versions whose lease has run out. */
void mc__master_sweep(mc__master_t *m, uint64_t now);

/* Eviction's sample, and the count of keys up to which it looks at all. */
#define MC__EVICT_SAMPLE 16
#define MC__EVICT_EXACT 1024

/* Evicts unleased, unpinned, unopened objects, least recently used first
 * as near as a sample tells (evict.c: the oldest of MC__EVICT_SAMPLE
 * versions picked at random; of all of them while the index holds at most
 * MC__EVICT_EXACT keys; when 8 samples in a row find none that may go, one
 * walk lists those that may, and they go oldest first), until used space
 * is at most target bytes. Returns the number evicted. */
size_t mc__master_evict(mc__master_t *m, uint64_t target, uint64_t now);

/*
 * Marks segment id as one new replicas avoid (its node looks dead): placement
 * takes it only when no other segment is left. Unknown ids are ignored.
 */
void mc__master_segment_avoid(mc__master_t *m, uint32_t id, int avoid);

/* Free bytes in segment id (0 when it is not mounted). */
uint64_t mc__master_segment_free(const mc__master_t *m, uint32_t id);

/*
 * Allocates len bytes (> 0) on segment seg into *rep, a replica that belongs
 * to no version yet (repair). Returns 0, -ENOSPC (also for an unknown
 * segment) or -ENOMEM. Give it back with mc__master_replica_release() or to
 * a version with mc__master_replica_attach().
 */
int mc__master_replica_alloc(mc__master_t *m, uint32_t seg, uint64_t len, mc__replica_t *rep);

/* As mc__master_replica_alloc() for a replica with the layout of like:
 * its holes are holes, its other extents' lengths allocated (holes.c). */
int mc__master_replica_alloc_like(mc__master_t *m, uint32_t seg, const mc__replica_t *like,
                                  mc__replica_t *rep);

/* Returns rep's extents to its segment's free space (when the segment is
 * still mounted: a dropped segment took them along) and frees rep->ext. */
void mc__master_replica_release(mc__master_t *m, mc__replica_t *rep);

/*
 * Adds rep (from mc__master_replica_alloc()) to v as a complete replica; v
 * owns it from then on. Returns 0, or -EEXIST (v already has a replica on
 * that segment) / -ENOSPC (v has MC__MAX_REPLICAS) / -ENOMEM (v's array had
 * no room left and could not grow): rep is then unchanged.
 */
int mc__master_replica_attach(mc__version_t *v, mc__replica_t *rep);

/* 1 if v has a replica on segment seg, else 0. */
int mc__version_has_replica(const mc__version_t *v, uint32_t seg);

/* Moves v's replica on segment seg, if any, into *rep (space still
 * allocated); returns 1 if there was one, 0 if not, -ENOMEM (v unchanged). */
int mc__version_take_replica(mc__version_t *v, uint32_t seg, mc__replica_t *rep);

/* The first published version whose key sorts after after[0..alen) (alen 0:
 * the first of all), or NULL at the end: a cursor that survives changes. */
mc__version_t *mc__master_next(mc__master_t *m, const char *after, size_t alen);

/* ---- extended attributes (xattr.c) ---- */

/* Steps through v's attributes: *at starts at 0; returns 1 with the next
 * name and value (pointing into v's list, valid until it changes), or 0 at
 * the end. */
int mc__xattr_next(const mc__version_t *v, size_t *at, const char **name, size_t *nlen,
                   const char **val, uint32_t *vlen);

/* Finds attribute name: *val and *vlen point into v's list. Returns 0,
 * -ENODATA, -ERANGE (a name empty or over MC_XATTR_NAME_MAX), -EINVAL (a
 * NUL in the name). */
int mc__xattr_get(const mc__version_t *v, const char *name, size_t nlen, const char **val,
                  uint32_t *vlen);

/*
 * Sets attribute name to val[0..vlen) as setxattr(2) does, flags
 * MC_XATTR_CREATE / MC_XATTR_REPLACE. Returns 0, -EEXIST, -ENODATA,
 * -ERANGE / -EINVAL (the name), -E2BIG (a value over MC_XATTR_SIZE_MAX),
 * -ENOSPC (the object's attributes would pass MC_XATTR_TOTAL_MAX, or their
 * names MC_XATTR_LIST_MAX), -EINVAL (unknown flags), -ENOMEM.
 */
int mc__xattr_set(mc__version_t *v, const char *name, size_t nlen, const char *val, size_t vlen,
                  unsigned flags);

/* Removes attribute name. Returns 0, -ENODATA, -ERANGE, -EINVAL. */
int mc__xattr_remove(mc__version_t *v, const char *name, size_t nlen);

/* Moves from's attributes to to (whose own are freed): a new version takes
 * those of the one it replaces. When from has some, to must have its rare
 * fields made already (mc__version_more()): this cannot fail. */
void mc__xattr_take(mc__version_t *to, mc__version_t *from);

/* ---- records kept by nodes, and rebuilding from them (records.c) ---- */

/* v's record changed (a commit, a rename, new metadata): it goes on the
 * dirty list, and mc__master_flush() hands it to the notice callback once,
 * however often it changed meanwhile. O(1); nothing without a notice
 * callback or before mc__master_notices() turned them on. A version rebuilt
 * from records keeps the metadata this run gave it from then on: a record
 * merged later gives it none (records.c). */
void mc__master_dirty(mc__master_t *m, mc__version_t *v);

/* The same for what the master changes on its own (a replica added or given
 * up, the access time a read sets): a record merged later still gives a
 * rebuilt v its metadata and key, as if it had come first. */
void mc__master_dirty_records(mc__master_t *m, mc__version_t *v);

/* Starts sending notices to cb (NULL: stops): a master with no node to
 * keep records pays nothing for them. */
void mc__master_notices(mc__master_t *m, mc__notice_cb cb, void *arg);

/* Stamps every dirty version (a new stamp each, from the master's count)
 * and hands it to the notice callback. */
void mc__master_flush(mc__master_t *m);

/* Fills the record (wire/record.h's mc__rec_t) of v as kept for its replica on
 * segment seg: its metadata, and rec->next, the count of its extents there
 * (none for a name entry), which it returns (NULL: none); rec->ext is NULL.
 * Everything points into v, but a compact v's one extent, copied into
 * *one. The record's stamp is the last one m handed out: in the notice
 * callback, the one mc__master_flush() gave v (a version keeps no stamp
 * of its own; a record built later describes v as it is then, newer than
 * any sent before). */
const mc__extent_t *mc__master_record(const mc__master_t *m, const mc__version_t *v, uint32_t seg,
                                      mc__rec_t *rec, mc__extent_t *one);

/*
 * Merges one record reported by the node of segment seg (mounted again
 * after a restart of the master): the newest version of a key wins
 * (version ids grow across runs, see first_id; a version this run made
 * beats every record of a version it has not seen, since a clock set back
 * can give it the lower id); a record of a version
 * already rebuilt adds its replica, and the record with the latest stamp
 * gives the metadata; a version rebuilt and then removed or replaced stays
 * gone. The record's extents, ext[0..rec->next) (rec->ext is not read),
 * must be free in the segment: they are taken. Returns 1 (merged), 2 (merged under
 * another id: this run may have handed out the record's id, for another
 * version; the node should forget the record, and is sent the version's,
 * dirty), 0 (refused: older, gone, or its space not free: the node should
 * forget it), -EINVAL (a bad record), -ENOMEM.
 */
int mc__master_merge(mc__master_t *m, uint32_t seg, const mc__rec_t *rec, const mc__extent_t *ext,
                     uint64_t now);

/* Version id left the namespace before this master rebuilt it (the op log
 * says so): records of it are refused from now on. Returns 0 or -ENOMEM. */
int mc__master_forget(mc__master_t *m, uint64_t id);

/* A version id and a stamp of a record that will be merged later (the op
 * log knows it): ids and stamps handed out from now on are newer, so that
 * what changes meanwhile wins over it. */
void mc__master_seen(mc__master_t *m, uint64_t id, uint64_t stamp);

/* v's owner and group (MC_OWNER_NONE: none recorded). */
void mc__version_owner(const mc__master_t *m, const mc__version_t *v, uint32_t *uid, uint32_t *gid);

/* Sets v's owner and group (owners.c: the pair is filed in m's table the
 * first time any version has it). Returns 0, or -ENOMEM (v unchanged). */
int mc__version_set_owner(mc__master_t *m, mc__version_t *v, uint32_t uid, uint32_t gid);

/* Fills st from a version of m. */
void mc__version_stat(const mc__master_t *m, const mc__version_t *v, uint64_t now, mc_stat_t *st);

/* When v's read lease ends (ms, the master's clock; 0: it never had one). */
uint64_t mc__version_lease(const mc__master_t *m, const mc__version_t *v);

#endif /* MC_MASTER_H */
