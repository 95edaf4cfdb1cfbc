/*
 * service_i.h - what the master service's files share (service.c: writes,
 * handles, dispatch; names.c: the namespace requests; nodes.c: segments,
 * their fences and the ended writes waiting on them, nodes, repair
 * requests; reports.c: nodes' records and the op log's view;
 * tasks.c: copy and move tasks).
 * Private to them: everyone else uses service.h.
 */
#ifndef MC_SERVICE_I_H
#define MC_SERVICE_I_H

#include "master/ids.h"
#include "master/repair.h"
#include "master/service.h"
#include "wire/proto.h"

/* What a connection (an owner) holds: its writes in progress and its open
 * handles, on one list. */
typedef struct owner {
    mc__idnode_t h; /* in svc->owners by connection id */
    struct owned *head;
} owner_t;

typedef struct owned {
    mc__idnode_t h; /* in svc->puts or svc->handles by its id */
    owner_t *own;
    struct owned *oprev, *onext; /* on own->head */
} owned_t;
/* A node silent this long is suspected dead: new puts and repairs go to
 * other nodes while there are any (heartbeats come every second). */
#define SUSPECT_MS 2500

typedef struct put {
    owned_t o;
    uint64_t touched;
    unsigned flags;
    int doomed; /* a replica its writer dropped (PUT_DROP_REPLICA) could not be
                   taken out, out of memory: it missed bytes, and the commit
                   fails (-EIO) rather than publish it */
    mc__version_t *v;
    struct put *tprev, *tnext; /* on svc->touch_*, least recently touched first */
} put_t;

typedef struct plist {
    put_t *head, *tail;
} plist_t;

typedef struct handle {
    owned_t o;
    mc__version_t *v;
} handle_t;

/* A write that ended while its writer may still be sending bytes (a
 * revoke after a failed transfer, a lease that ran out, a writer whose
 * connection went): its space stays allocated (and goes with its segment
 * if that is dropped) until its write lease is over (free_at) and the node
 * of each of its segments enforces the epoch raised for it (need[]), so
 * that no late byte of it can land in space handed to another object. */
typedef struct fenced {
    mc__version_t *v;
    uint64_t free_at;
    struct fenced *next;
    uint32_t nneed;
    struct {
        uint32_t seg;
        uint64_t epoch;
    } need[];
} fenced_t;

/* Notices waiting for one segment's node, at most this many bytes: past
 * it, notices are dropped and counted (notices_dropped). */
#define NOTES_MAX (64u << 20)
/* A node reports its records within this long of its mount, or its
 * segment's hold ends without the rest (a node that lost its connection
 * half-way must not keep its segment held for ever). */
#define REPORT_MAX_MS 60000

typedef struct seginfo {
    uint32_t id;
    uint64_t node; /* 0: local to this process */
    uint64_t size;
    char *addr;
    char *rdma; /* the node's RDMA record, opaque (NULL: none) */
    uint32_t rdma_len;
    mc__wbuf_t notes;    /* notices for its node, each an s (proto.h) */
    size_t sent;         /* bytes of notes the last RECORDS_TAKE answered */
    uint64_t hold_to;    /* the hold a report in progress ends at (0: none) */
    uint64_t report_by;  /* ... which must end by then, or the hold ends anyway */
    uint64_t hold_epoch; /* held until its node enforces this epoch (a checked
                            segment mounted again), then as hold_to says; 0: not */
    uint64_t epoch;      /* what grants of its space carry (proto.h, "Segment epochs") */
    uint64_t enforced;   /* the epoch its node last said it enforces */
    int checked;         /* every write there passed its node's check (MC__MOUNT_CHECKED) */
} seginfo_t;

typedef struct node {
    uint64_t id;
    uint64_t last_hb;
    uint64_t failed_at; /* a writer could not reach it (PUT_DROP_REPLICA); 0: never */
} node_t;

struct mc__svc {
    mc__master_t *m;
    mc__svc_opts_t o;
    mc__ids_t puts, handles, owners;
    plist_t by_touch; /* other processes' writes, least recently touched first */
    plist_t local;    /* this process's own writes (MC__SVC_OWNER_LOCAL) */
    fenced_t *fenced;
    uint64_t next_id;
    seginfo_t *segs;
    int nseg;
    node_t *nodes;
    int nnodes;
    uint32_t next_seg;
    uint64_t epoch_dropped; /* the highest epoch of a segment dropped so far: one
                               mounted anew gets one above it (nodes.c) */
    char *local_addr;
    char *local_rdma; /* RDMA record of the local segments (NULL: none) */
    uint32_t local_rdma_len;
    int local_rdma_fenced;              /* its RDMA peers write through the segment's fence */
    mc__svc_enforced_fn local_enforced; /* mc__svc_set_local_enforced() */
    void *local_enforced_arg;
    uint64_t nodes_expired, objects_lost, puts_expired, replicas_dropped;
    uint64_t run; /* this run's id (MOUNT_SEGMENT answers it) */
    uint64_t notices_dropped, records_merged, records_refused, records_renamed;
    uint64_t now_seen; /* the time of the last request or tick (segments_held) */
    mc__repair_t *rp;
    mc__svc_journal_fn journal; /* the op log (mc__svc_journal()); NULL: none */
    void *journal_arg;
    struct mc__tasks *tasks; /* copy and move tasks (tasks.c); NULL until the first */
    const mc__oplog_t *view; /* the log as this master found it (not owned) */
    uint32_t *pend;          /* segments the view has records of that have not */
    int npend;               /* mounted again here yet (merge_view(), once each) */
    mc__ids_t name_segs;     /* by inode number, the segments told of a name of
                                that file (reports.c) */
};

/* Frees svc->name_segs (mc__svc_free()). */
void mc__svc_name_segs_free(mc__svc_t *svc);

/* A request that does not decode is -EINVAL (a bad key) or -EBADMSG. */
#define TAKE(call)                                                                                 \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ < 0)                                                                               \
            return rc_ == -EINVAL ? -EINVAL : -EBADMSG;                                            \
    } while (0)
#define UNPACK(...) TAKE(mc__unpack(body, len, __VA_ARGS__))

/* The wall clock (ns) for the times a request sets; 0 without one. */
static inline int64_t mc__svc_wall(const mc__svc_t *svc)
{
    return svc->o.wall_ns ? svc->o.wall_ns() : 0;
}

/* The published version a request naming one key ("k") is about: 0, or
 * -ENOENT, -EPROTO. */
int mc__svc_take_version(mc__svc_t *svc, const char *body, size_t len, mc__version_t **out);

/* ---- names.c ---- */

/* The namespace requests: STAT, LOOKUP, REMOVE, RENAME, LINK, LIST,
 * SET_META, XATTR_*, STATFS and STATS (mc__svc_handle()'s contract); any
 * other op: -EOPNOTSUPP. */
int mc__svc_names(mc__svc_t *svc, uint16_t op, const char *body, size_t len, uint64_t now,
                  mc__wbuf_t *w);

/* ---- nodes.c ---- */

seginfo_t *mc__svc_seg_info(mc__svc_t *svc, uint32_t id);
/* Raises segment seg's epoch, so that writes granted space there before
 * are refused once its node enforces it. Returns that epoch (0: no such
 * segment). */
uint64_t mc__svc_seg_fence(mc__svc_t *svc, uint32_t seg);
/* Whether segment seg's node enforces epoch: 0 not yet, 1 it does (or
 * the segment is gone), 2 it does and every write there passed its check
 * (MC__MOUNT_CHECKED; for our own segment, unless served over RDMA
 * without a fence): no
 * write lease need run out as well. */
int mc__svc_seg_fenced(mc__svc_t *svc, uint32_t seg, uint64_t epoch);
/* Keeps the space of write v (ended, unpublished) until its bytes are
 * refused on each of its segments (a raised epoch their nodes enforce)
 * and, unless every write there passed its node's check, its write lease
 * is over at free_at: a writer that may still be sending can never land
 * bytes in space handed to another object (fenced_t). Out of memory: v
 * is freed at once. */
void mc__svc_fence_write(mc__svc_t *svc, mc__version_t *v, uint64_t free_at);
/* Frees the fenced writes that may go at now (all with force: the
 * service is closing). */
void mc__svc_fenced_sweep(mc__svc_t *svc, uint64_t now, int force);
/* Drops segment id and every replica on it (see nodes.c). */
void mc__svc_seg_drop(mc__svc_t *svc, uint32_t id, uint64_t now);
node_t *mc__svc_node_find(mc__svc_t *svc, uint64_t id);
/* Tells the master which segments placement should avoid right now. */
void mc__svc_mark_suspects(mc__svc_t *svc, uint64_t now);
/* Plans repairs onto the segments of live remote nodes. */
void mc__svc_repair_tick(mc__svc_t *svc, uint64_t now);
/* Appends v's replica set: each replica's segment, its node's data
 * address and RDMA record, its extents. Returns w->err. */
int mc__svc_pack_replicas(mc__svc_t *svc, mc__wbuf_t *w, const mc__version_t *v);
/* The id of the segment whose data address is addr[0..len), or -1. */
int64_t mc__svc_seg_by_addr(mc__svc_t *svc, const char *addr, size_t len);

/* The node requests: MOUNT_SEGMENT, UNMOUNT_SEGMENT, HEARTBEAT,
 * REPAIR_TAKE, REPAIR_DONE (proto.h). */
int mc__svc_op_mount(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w);
int mc__svc_op_unmount(mc__svc_t *svc, const char *body, size_t len, uint64_t now);
int mc__svc_op_heartbeat(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w);
int mc__svc_op_repair_take(mc__svc_t *svc, const char *body, size_t len, uint64_t now,
                           mc__wbuf_t *w);
int mc__svc_op_repair_done(mc__svc_t *svc, const char *body, size_t len, uint64_t now);

/* ---- reports.c: notices to nodes, their reports, the op log's view ---- */

int mc__svc_op_records_take(mc__svc_t *svc, const char *body, size_t len, mc__wbuf_t *w);
int mc__svc_op_records_report(mc__svc_t *svc, const char *body, size_t len, uint64_t now);
/* Ends the hold of segments whose report is overdue (REPORT_MAX_MS). */
void mc__svc_reports_tick(mc__svc_t *svc, uint64_t now);
/* v's replica on segment seg left it (a move): its node forgets the
 * record, and the op log the replica (MC__LOG_REP_GONE). */
void mc__svc_replica_gone(mc__svc_t *svc, const mc__version_t *v, uint32_t seg);
/* From now on, what changes a version's record is queued as a notice for
 * the nodes of its replicas (a master with nodes; see mc__master_notices()). */
void mc__svc_notices(mc__svc_t *svc);
/* 1 if notices wait for one of node's segments. */
int mc__svc_notes_for(mc__svc_t *svc, uint64_t node);
/* 1 if the op log knows records of segment id that wait for its node:
 * the id is not handed to another node. */
int mc__svc_seg_pending(const mc__svc_t *svc, uint32_t id);
/* Segment seg mounted by node, fresh or again: tells the log
 * (MC__LOG_SEG_NODE), so that a later leader merges the log's records of
 * seg into that node's segment only. */
void mc__svc_log_seg_node(mc__svc_t *svc, uint32_t seg, uint64_t node);
/* 1 if the op log's records of segment seg wait for a node other than
 * node (a leader since gave seg's id to it): node, naming seg, was cut
 * off through leader changes, and must take a new id. */
int mc__svc_seg_foreign(const mc__svc_t *svc, uint32_t seg, uint64_t node);
/* Segment seg dropped: tells the log (MC__LOG_SEG_GONE), and what the
 * log knew of it no longer waits for its node. */
void mc__svc_log_seg_gone(mc__svc_t *svc, uint32_t seg);
/* Segment seg is back (mounted again at a new leader, its report over or
 * overdue): the op log's records of it join what its node reported (the
 * log may know of changes the node had not fetched yet). Once per segment
 * the log knew at the takeover: a segment this master dropped since gets
 * nothing. */
void mc__svc_merge_view(mc__svc_t *svc, uint32_t seg, uint64_t now);

/* ---- tasks.c: copy and move tasks ---- */

typedef struct mc__tasks mc__tasks_t;

/* TASK_CREATE and TASK_QUERY (proto.h). */
int mc__svc_op_task_create(mc__svc_t *svc, const char *body, size_t len, uint64_t now,
                           mc__wbuf_t *w);
int mc__svc_op_task_query(mc__svc_t *svc, const char *body, size_t len, mc__wbuf_t *w);
/* REPLICA_DROP (proto.h): one replica of several off a published version
 * that no handle has open (its space is held while read leases last). */
int mc__svc_op_replica_drop(mc__svc_t *svc, const char *body, size_t len, uint64_t now);
/* Starts waiting tasks and ends moves whose source waited for handles. */
void mc__tasks_tick(mc__svc_t *svc, uint64_t now);
/* Frees the table (NULL: nothing); the copies in flight are the repair's. */
void mc__tasks_free(mc__tasks_t *ts);

#endif /* MC_SERVICE_I_H */
