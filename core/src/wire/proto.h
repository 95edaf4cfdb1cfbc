/*
 * proto.h - the wire protocol: frames, the field codec, and the table of
 * operations (docs/PROTOCOL.md is the prose version of this file).
 *
 * A frame is a fixed 24-byte little-endian header followed by a body of at
 * most MC__PROTO_MAX_BODY bytes. A body is a sequence of fields whose types
 * are given by a format string per operation (one for the request, one for
 * the response), so encoding and decoding are driven from one table and the
 * decoders are pure functions (bytes in, values or an error out) that can be
 * fuzzed. Nothing here does I/O.
 *
 * Format characters:
 *   b  u8      h  u16     u  u32     q  u64     i  i64 (two's complement)
 *   s  bytes: u32 length + that many bytes (decoded as pointer + length into
 *      the body; no copy)
 *   k  a key: like s, but 1..MC_KEY_MAX bytes without NUL (else -EINVAL)
 *   *  the rest of the body, raw (decoded as pointer + length; last only)
 */
#ifndef MC_PROTO_H
#define MC_PROTO_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define MC__PROTO_MAGIC 0x314b434dU /* "MCK1" in little-endian byte order */
#define MC__PROTO_VERSION 1         /* the frame layout (the header's version field) */
/* The version HELLO negotiates: the bodies. 2: stats carry owner, type, link
 * count, atime, ctime and rdev; PUT_START an owner, type and rdev; PUT_COMMIT
 * and SET_META say which fields they set. 3: MOUNT_SEGMENT carries flags and
 * answers the master's run id; RECORDS_TAKE and RECORDS_REPORT (a restarted
 * master rebuilds its namespace from the nodes). 4: sparse files: an
 * extent whose offset is MC__WIRE_HOLE is a hole, the stat carries the
 * bytes allocated, PUT_GROW names a range (and may punch). 5: segment
 * epochs (below). 6: SHM_MAP answers a fence slot (transport/shm.h). 7:
 * small objects in 4-byte units, so a record's extents may sit at offsets
 * that a master of 6 (8-byte units) refuses, dropping their bytes. 8:
 * PUT_RENEW (idle writes' leases renewed together). 9: READ carries its
 * replica's epoch, and a node refuses one from before its segment's mount
 * (below). A peer of another version is refused. */
#define MC__PROTO_SESSION 9

/* The most put ids one PUT_RENEW carries, and the bytes of replica sets its
 * answer carries at most: past them an entry answers MC__RENEWED_BARE (its
 * write renewed, its replica set left out), so that the answer stays far
 * below MC__PROTO_MAX_BODY however large the sets are. */
#define MC__RENEW_MAX 256
#define MC__RENEW_BUDGET (1U << 20)
#define MC__RENEWED_BARE 1

/* The offset of an extent that is a hole: its length takes no space in the
 * segment and reads as zeros (session version 4; master/alloc.h's
 * MC__HOLE). */
#define MC__WIRE_HOLE UINT64_MAX

/* PUT_GROW flags. MC__GROW_PUNCH: make the whole allocation units of the
 * range a hole instead of giving it space. */
#define MC__GROW_PUNCH 0x1

/* PUT_REVOKE flags. MC__REVOKE_FENCED: a transfer of the write failed, and
 * its bytes may still land (a node that took them after the writer gave
 * up): the master keeps the space until the write lease is over, as for a
 * writer that died. Without it the space is free at once. */
#define MC__REVOKE_FENCED 0x1

/*
 * Segment epochs (session version 5): how a node keeps a write that ended
 * out of space handed to someone else. Every segment has an epoch, which
 * only grows; a replica set carries its segment's, and a WRITE the epoch
 * of the replica it writes. A node refuses (-ESTALE) a WRITE whose epoch
 * is below the one it enforces. Before the master gives another object
 * space that a write which ended may still send bytes to (a revoke after
 * a failed transfer, a write lease that ran out), it raises the segment's
 * epoch and waits until the node says it enforces it (HEARTBEAT): bytes of
 * that write still on their way are refused from then on. The writes
 * still going on there get -ESTALE once, and ask for the epoch now
 * (PUT_EPOCH), which the master answers only for a write that goes on.
 *
 * Reads (session version 9): a segment mounted again (its master dropped it
 * at the node TTL, and the objects on it with it) gets an epoch above every
 * one that master handed out for it, and its node refuses (-ESTALE) a READ
 * whose epoch is below the one of its last mount: a replica set of before
 * names space that new objects may take. Epochs raised within one mount
 * (for writes that ended) refuse no read. A client that reads a mapped
 * segment checks the fence's mount epoch after its copy (transport/shm.h),
 * and one that reads over RDMA reads it after the bytes
 * (transport/transport_rdma.h).
 */

#define MC__PROTO_HDR_SIZE 24
#define MC__PROTO_MAX_BODY (16U << 20) /* 16 MiB: data moves in chunks below */
#define MC__PROTO_CHUNK (4U << 20)     /* largest READ/WRITE payload */

/* Header flags. */
#define MC__F_RESPONSE 0x1

/*
 * The operations: X(name, code, request format, response format).
 * Responses carry a status in the header (0 or a negative errno); their
 * body follows the response format only when the status is >= 0.
 */
#define MC__PROTO_OPS(X)                                                                            \
    /* session */                                                                                   \
    X(HELLO, 1, "hhuss", "huss") /* min ver, max ver, role, name, client nonce -> ver, auth?,       \
                                    server nonce, server proof */                                   \
    X(AUTH, 2, "s", "")          /* client proof */                                                 \
    X(PING, 3, "", "q")          /* -> server time (ms) */                                          \
    /* nodes and segments (master) */                                                               \
    X(MOUNT_SEGMENT, 10, "qusqsuq", "uqq") /* node id, seg id (0: any), data addr, size, RDMA       \
                                              record (empty: none), flags (MC__MOUNT_*), the epoch  \
                                              the node enforces -> seg id, the master's run id,     \
                                              the epoch to enforce from now on */                   \
    X(UNMOUNT_SEGMENT, 11, "qu", "")       /* node id, seg id */                                    \
    X(HEARTBEAT, 12, "ququ", "uq")         /* node id, its seg id (0: none), the epoch it enforces  \
                                              there, flags (MC__MOUNT_CHECKED) -> flags (MC__HB_*), \
                                              the epoch to enforce (0: as it is) */                 \
    X(REPAIR_TAKE, 13, "q", "*")           /* node id -> repair tasks, each an s (see below) */     \
    X(REPAIR_DONE, 14, "qqi", "")          /* node id, task id, status (0: copied) */               \
    /* extended attributes (master) */                                                              \
    X(XATTR_GET, 15, "ks", "*")   /* key, name -> value */                                          \
    X(XATTR_SET, 16, "ksu*", "")  /* key, name, flags (MC_XATTR_*), value */                        \
    X(XATTR_LIST, 17, "k", "*")   /* key -> names, each ending in NUL */                            \
    X(XATTR_REMOVE, 18, "ks", "") /* key, name */                                                   \
    /* the nodes' records of what they hold (master) */                                             \
    X(RECORDS_TAKE, 40, "quq", "*")   /* node id, seg id, bytes of the last answer applied ->       \
                                         notices, each an s (see below) */                          \
    X(RECORDS_REPORT, 41, "quu*", "") /* node id, seg id, last (0/1), records, each an s */         \
    X(TASK_CREATE, 42, "kus*", "q")   /* key, type (MC_TASK_*), source, targets, each an s ->       \
                                         task id */                                                 \
    X(TASK_QUERY, 43, "q", "uuiiiqs") /* task id -> type, status, error, created, updated (ms),     \
                                         node, message */                                           \
    X(REPLICA_DROP, 44, "ks", "")     /* key, data address ("": the master's own segment) */        \
    /* objects (master) */                                                                          \
    X(PUT_START, 20, "kquuuuqisuuuq", "qq*") /* key, capacity, flags, mode, replicas, pin, pin      \
                                                ttl, mtime, preferred data addr, uid, gid, type,    \
                                                rdev -> put id, write lease ms, replica set */      \
    X(PUT_GROW, 21, "qqqu", "*")             /* put id, off, len, flags -> replica set */           \
    X(PUT_COMMIT, 22, "qkquui", "*")  /* put id, key, size, what (MC_META_MODE, _MTIME), mode,      \
                                         mtime -> stat */                                           \
    X(PUT_REVOKE, 23, "q", "")        /* put id */                                                  \
    X(OPEN, 24, "k", "q*")            /* key -> handle id, stat + replica set (pins it) */          \
    X(CLOSE, 25, "q", "")             /* handle id */                                               \
    X(PUT_DROP_REPLICA, 26, "qu", "") /* put id, segment id (its node is unreachable) */            \
    X(PUT_EPOCH, 27, "qu", "q")       /* put id, segment id -> its epoch now (a write going on) */  \
    X(PUT_RENEW, 28, "*", "*")        /* put ids, each a q -> for each, i status (0: renewed) and,  \
                                         when 0, its replica set (as PUT_GROW's answer); 1:         \
                                         renewed, its set left out (MC__RENEWED_BARE) */            \
    X(GET_REPLICAS, 30, "k", "q*")    /* key -> lease ms, stat + replica set (lease granted) */     \
    X(STAT, 31, "k", "*")             /* key -> stat */                                             \
    X(LOOKUP, 32, "ku", "*")          /* key, delim -> stat (status = MC_LOOKUP_*) */               \
    X(REMOVE, 33, "ku", "")           /* key, flags */                                              \
    X(RENAME, 34, "kku", "")          /* from, to, flags */                                         \
    X(LIST, 35, "ssuu", "*")          /* prefix, after, delim, max -> listing */                    \
    X(SET_META, 36, "kuuuuii", "*")   /* key, what, mode, uid, gid, atime, mtime -> stat */         \
    X(STATFS, 37, "", "qqqq")         /* -> total, used, objects, evicted */                        \
    X(STATS, 38, "", "*")             /* -> counters, each s name + q value */                      \
    X(LINK, 49, "kku", "*")           /* from, to, flags (0) -> stat of the file (hard link) */     \
    /* a new file in one request (master) */                                                        \
    X(CREATE, 45, "kquuuuqisuuuq", "q*") /* as PUT_START (capacity: the write's) -> handle id,      \
                                            stat + replica set (as OPEN), capacity reserved (q),    \
                                            put id, write lease ms, replica set (as PUT_START) */   \
    /* data (nodes) */                                                                              \
    X(READ, 50, "uqqu", "*")   /* seg id, its epoch, offset, length -> bytes */                     \
    X(WRITE, 51, "uqq*", "")   /* seg id, its epoch, offset, bytes */                               \
    X(SHM_MAP, 52, "u", "qqu") /* seg id -> size, fence offset, slot (fd as SCM_RIGHTS) */

enum mc__op {
#define MC__OP_ENUM(name, code, req, resp) MC__OP_##name = code,
    MC__PROTO_OPS(MC__OP_ENUM)
#undef MC__OP_ENUM
};

/* Heartbeat reply flags. */
#define MC__HB_REMOUNT 0x1 /* the master does not know this node: mount again */
#define MC__HB_REPAIR 0x2  /* repair tasks wait for this node: REPAIR_TAKE */
#define MC__HB_RECORDS 0x4 /* notices of records wait for this node: RECORDS_TAKE */

/* MOUNT_SEGMENT flags (MC__MOUNT_CHECKED also in HEARTBEAT).
 * MC__MOUNT_REPORT: records follow (RECORDS_REPORT); hold the segment until
 * the last. MC__MOUNT_CHECKED: every write into the segment so far passed
 * an epoch check (the node's, or its segment's fence: a mapping's, SHM_MAP,
 * or an RDMA connection's; none came by one-sided RDMA into a segment
 * without a fence): bytes of a write that ended are refused once the node
 * enforces the epoch raised for it, so the master need not also wait out a
 * write lease. */
#define MC__MOUNT_REPORT 0x1
#define MC__MOUNT_CHECKED 0x2

/* A notice in a RECORDS_TAKE answer (the bytes of its s field): b kind, q
 * version id, and for MC__NOTE_PUT the record (an s, see mc__rec_t). */
#define MC__NOTE_PUT 1  /* keep (or replace) the record of this version */
#define MC__NOTE_DROP 2 /* forget the record of this version */
/* The most bytes of notices one RECORDS_TAKE answers, and of records one
 * RECORDS_REPORT carries (give or take one). */
#define MC__NOTES_BATCH (1u << 20)

/*
 * A repair task in a REPAIR_TAKE answer (the bytes of its s field):
 *   q task id, q time limit (ms, counted from when the node sent
 *   REPAIR_TAKE), q bytes to copy, then the target as a replica set of one
 *   (the node's own segment and the extents to fill), then the source
 *   replica set (read with failover, as a get does).
 */

/* Roles in HELLO. */
#define MC__ROLE_CLIENT 1
#define MC__ROLE_NODE 2

typedef struct mc__hdr {
    uint32_t magic;
    uint16_t version;
    uint16_t op;
    uint64_t id;    /* request id, echoed by the response */
    uint32_t len;   /* body bytes */
    uint16_t flags; /* MC__F_* */
    int16_t status; /* responses: 0..32767 or -errno */
} mc__hdr_t;

/*
 * Decodes a header from buf[0..n). Returns 0, -EAGAIN when n is short of a
 * header, -EPROTO for a bad magic or version, -EMSGSIZE for a body over
 * MC__PROTO_MAX_BODY, -EBADMSG for an unknown operation.
 */
int mc__hdr_decode(const void *buf, size_t n, mc__hdr_t *h);

/* Encodes h into buf[0..MC__PROTO_HDR_SIZE). */
void mc__hdr_encode(void *buf, const mc__hdr_t *h);

/* The request or response format of op, or NULL for an unknown op. */
const char *mc__op_format(uint16_t op, int response);

/* The name of op ("PUT_START"), or "?" */
const char *mc__op_name(uint16_t op);

/* A growable output buffer. err sticks at the first failure (-ENOMEM,
 * -EMSGSIZE) and later writes do nothing. Free p with free(). */
typedef struct mc__wbuf {
    char *p;
    size_t len, cap;
    int err;
} mc__wbuf_t;

/*
 * Appends fields per fmt: b h u take unsigned (promoted) ints, q takes
 * uint64_t, i int64_t, s k * take (const void *, uint32_t length).
 * Returns w->err (0 when all fit).
 */
int mc__pack(mc__wbuf_t *w, const char *fmt, ...);
int mc__vpack(mc__wbuf_t *w, const char *fmt, va_list ap);

/*
 * Decodes body[0..len) per fmt into pointers: b uint8_t *, h uint16_t *,
 * u uint32_t *, q uint64_t *, i int64_t *, s k * (const char **, uint32_t *).
 * The whole body must be consumed. Returns 0, or -EBADMSG (truncated,
 * trailing bytes, bad format) / -EINVAL (a bad key); outputs are then
 * undefined.
 */
int mc__unpack(const char *body, size_t len, const char *fmt, ...);
int mc__vunpack(const char *body, size_t len, const char *fmt, va_list ap);

/*
 * Helpers for the nested structures carried as raw (`*`) fields.
 *
 * stat:        q size, q version, i mtime_ns, u mode, u replicas, u flags,
 *              u uid, u gid, u type, u nlink, i atime_ns, i ctime_ns, q rdev,
 *              q ino, q alloc
 * replica set: u count, then per replica: u seg id, q its epoch, s data address,
 *              s RDMA record (empty: TCP only; opaque to the master, see
 *              transport_rdma.h), u extent count, then per extent:
 *              q offset (MC__WIRE_HOLE: a hole), q length
 * listing:     u count, u more, then per entry: s key, b is_prefix, stat
 */
#include "mooncake/mooncake.h"
#include "wire/record.h"

int mc__pack_stat(mc__wbuf_t *w, const mc_stat_t *st);
/* Reads a stat from the front of *p / *n, advancing them. 0 or -EBADMSG. */
int mc__take_stat(const char **p, size_t *n, mc_stat_t *st);

/* One replica as decoded: pointers into the body, no copy. */
typedef struct mc__wire_replica {
    uint32_t seg;
    uint64_t epoch; /* the segment's (see "Segment epochs") */
    const char *addr;
    uint32_t addr_len;
    const char *rdma; /* the node's RDMA record (rdma_len 0: none) */
    uint32_t rdma_len;
    uint32_t next;            /* extents */
    const unsigned char *ext; /* next * 16 bytes: LE offset, length */
} mc__wire_replica_t;

/*
 * Reads a replica set: at most max replicas into out. Returns the count or
 * -EBADMSG (also for more than max replicas, or extents whose lengths
 * overflow).
 */
int mc__take_replicas(const char **p, size_t *n, mc__wire_replica_t *out, int max);
/* Appends the head of one replica (after a "u" count): seg, its epoch,
 * address, RDMA record and extent count; then each extent with
 * mc__pack_extent(). Return w->err. */
int mc__pack_replica(mc__wbuf_t *w, uint32_t seg, uint64_t epoch, const char *addr, uint32_t alen,
                     const char *rdma, uint32_t rlen, uint32_t next);
int mc__pack_extent(mc__wbuf_t *w, uint64_t off, uint64_t len);
/* The i-th extent of a decoded replica. */
void mc__wire_extent(const mc__wire_replica_t *r, uint32_t i, uint64_t *off, uint64_t *len);

/* Reads one put's entry of a PUT_RENEW answer from the front of *p / *n,
 * advancing them: its status and, when 0 (renewed with its set), its
 * replica set, decoded into out (at most max replicas) and left as
 * *rset[0..*rlen) for mc__take_replicas(). Returns 0 or -EBADMSG. */
int mc__take_renewal(const char **p, size_t *n, int64_t *status, const char **rset, size_t *rlen,
                     mc__wire_replica_t *out, int max);

/*
 * The two requests every put makes, with codecs of their own: the same
 * bytes as their formats in the table ("kquuuuqisuuuq", "qkquui") and the same
 * errors as mc__pack()/mc__unpack(), but no format to read, which costs an
 * embedded store's small puts more than the rest of the codec.
 */
typedef struct mc__put_start_rq {
    const char *key;
    uint32_t klen;
    uint64_t capacity;
    uint32_t flags, mode, replicas, pin;
    uint64_t pin_ttl_ms;
    int64_t mtime_ns;
    const char *pref; /* preferred segment's address ("" : none) */
    uint32_t plen;
    uint32_t uid, gid, type; /* mc_put_opts_t's (uid, gid apply with MC_PUT_OWNER) */
    uint64_t rdev;
} mc__put_start_rq_t;

typedef struct mc__put_commit_rq {
    uint64_t id;
    const char *key;
    uint32_t klen;
    uint64_t size;
    uint32_t what; /* MC_META_MODE: mode applies; MC_META_MTIME: mtime does
                      (else the commit's wall clock) */
    uint32_t mode;
    int64_t mtime_ns;
} mc__put_commit_rq_t;

int mc__pack_put_start(mc__wbuf_t *w, const mc__put_start_rq_t *rq);
int mc__take_put_start(const char *body, size_t len, mc__put_start_rq_t *rq);
int mc__pack_put_commit(mc__wbuf_t *w, const mc__put_commit_rq_t *rq);
int mc__take_put_commit(const char *body, size_t len, mc__put_commit_rq_t *rq);

/* The record of a published version (mc__rec_t) is in wire/record.h: the
 * master fills and merges it without the codec. */

/* Appends a record up to and including its extent count (rec->next); the
 * caller appends that many extents with mc__pack_extent(). Returns w->err. */
int mc__pack_rec_head(mc__wbuf_t *w, const mc__rec_t *rec);
/* Decodes a whole record from p[0..n). Returns 0, -EBADMSG (truncated,
 * trailing bytes, extents that overflow) or -EINVAL (a bad key or link). */
int mc__take_rec(const char *p, size_t n, mc__rec_t *rec);

/* Decodes a listing body into a freshly allocated mc_list_t (free with
 * mc_list_free()). Returns the entry count, -EBADMSG or -ENOMEM. */
int mc__take_list(const char *p, size_t n, mc_list_t **out);
/* Encodes a listing. */
int mc__pack_list(mc__wbuf_t *w, const mc_list_t *l);

#endif /* MC_PROTO_H */
