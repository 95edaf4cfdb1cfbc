/*
 * service.h - the master's request handling, with no I/O: a request body in,
 * a status and a response body out (docs/PROTOCOL.md). The server (server.c)
 * feeds it frames from connections; tests and fuzzers call it directly.
 *
 * Beyond the master logic it keeps the cluster's tables: segments and the
 * data address of the node serving each, nodes and their last heartbeat,
 * writes in progress (put ids) and open handles, each owned by the
 * connection that made them, so that a writer or reader that goes away
 * leaves nothing behind.
 */
#ifndef MC_SERVICE_H
#define MC_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "master/master.h"
#include "master/oplog.h"
#include "wire/proto.h"

typedef struct mc__svc mc__svc_t;

/* The owner of requests made in this very process (an embedded store's own
 * client, through a local link): its writes are never revoked as idle. */
#define MC__SVC_OWNER_LOCAL UINT64_MAX

/* A writer's lease on its write in progress (ms), at most put_ttl_ms: the
 * writer sends bytes only while it holds one (renewed by PUT_GROW), and the
 * space of a write revoked while its writer may still be sending is freed
 * only once the lease has run out. */
#define MC__WRITE_LEASE_MS 10000

typedef struct mc__svc_opts {
    uint64_t node_ttl_ms;        /* a node silent this long loses its segments */
    uint64_t put_ttl_ms;         /* a write in progress untouched this long is revoked */
    uint64_t write_lease_ms;     /* 0: MC__WRITE_LEASE_MS (capped at put_ttl_ms) */
    uint64_t first_id;           /* the first put/handle id (0: 1); a master
                                    passes a random one (mc__svc_random_id()) so
                                    that ids of an earlier incarnation never name
                                    this one's puts and handles */
    uint32_t repair_inflight;    /* repair copies at once (0: 4) */
    int no_repair;               /* plan no repairs at all */
    uint64_t repair_bytes_per_s; /* repair copy budget (0: no limit) */
    int64_t (*wall_ns)(void);    /* the wall clock, for a commit that names no
                                    mtime; the service reads no clock itself
                                    (NULL: such a commit's mtime is 0) */
} mc__svc_opts_t;

/* A random first id for mc__svc_opts_t.first_id, below 2^62 so that the
 * counter never wraps. */
uint64_t mc__svc_random_id(void);

/* Creates a service over master m (not owned). Returns 0 or -ENOMEM. */
int mc__svc_new(mc__svc_t **out, mc__master_t *m, const mc__svc_opts_t *o);

/* Frees the service, revoking writes in progress and closing handles. */
void mc__svc_free(mc__svc_t *svc);

/*
 * Registers a segment served by this very process (embedded store, or a
 * master with a segment): it never expires. addr is where nodes reach its
 * data (may be NULL: same process only).
 */
int mc__svc_add_local_segment(mc__svc_t *svc, uint32_t seg, uint64_t size, const char *addr);

/*
 * The epoch of segment seg that writes to it must carry at least (0: no
 * such segment; wire/proto.h, "Segment epochs"), for the data plane of a
 * segment local to this process. What that data plane enforces of an epoch
 * (it, or below it while a write of an older one is still being received
 * into the segment) the service asks fn (NULL: the epoch itself; a store
 * that serves nothing).
 */
uint64_t mc__svc_seg_epoch(mc__svc_t *svc, uint32_t seg);
typedef uint64_t (*mc__svc_enforced_fn)(void *arg, uint32_t seg, uint64_t epoch);
void mc__svc_set_local_enforced(mc__svc_t *svc, mc__svc_enforced_fn fn, void *arg);

/* Sets the data address published for local segments (once listening). */
void mc__svc_set_local_addr(mc__svc_t *svc, const char *addr);

/*
 * Sets the RDMA record published with the local segments (rec[0..len),
 * copied; len 0 clears it), and whether their RDMA peers write through
 * the segment's fence (fenced: transport_rdma.h, "Fences"; then they still
 * count as checked). Returns 0 or -ENOMEM.
 */
int mc__svc_set_local_rdma(mc__svc_t *svc, const void *rec, size_t len, int fenced);

/*
 * Handles one request of operation op from owner (a connection id) at time
 * now. Appends the response body to w and returns the status (0 or a
 * positive count for LOOKUP, or a negative errno). -EBADMSG means the body
 * did not decode: the caller closes the connection.
 */
int mc__svc_handle(mc__svc_t *svc, uint64_t owner, uint16_t op, const char *body, size_t len,
                   uint64_t now, mc__wbuf_t *w);

/*
 * Writes the bytes of a put into the replicas rep[0..nrep) of its pending
 * version, before mc__svc_put() publishes it. Returns 0, or a negative errno:
 * the put fails with it (-EREMOTE: a replica is not where the caller can
 * write at once).
 */
typedef int (*mc__svc_write_fn)(void *arg, const mc__replica_t *rep, uint32_t nrep);

/*
 * A whole put in one call, for a caller in this process that can write the
 * bytes at once (an embedded store into its own segment): the rules of
 * PUT_START with start, write(arg, ...) on the version's replicas, then the
 * rules of PUT_COMMIT with commit (its id unused), exactly as the two
 * requests apply them, without the write in progress they would keep in
 * between. Fills *st (unless NULL) with the new version's stat. Returns 0,
 * or a negative errno (nothing published, the space freed; write's error
 * as it is).
 */
int mc__svc_put(mc__svc_t *svc, const mc__put_start_rq_t *start, const mc__put_commit_rq_t *commit,
                mc__svc_write_fn write, void *arg, uint64_t now, mc_stat_t *st);

/* The owner's connection closed: revoke its writes (their space is freed
 * once their write lease is over), close its handles. O(what it held). */
void mc__svc_owner_gone(mc__svc_t *svc, uint64_t owner, uint64_t now);

/* The caller could not run the service for a while (its loop was busy):
 * every node counts as heard from at now, so that a stall of the master is
 * never taken for the silence of its nodes. */
void mc__svc_forgive(mc__svc_t *svc, uint64_t now);

/* Periodic work: expire silent nodes and idle writes, free fenced writes
 * whose lease is over, sweep read leases. Returns the number of segments
 * dropped. */
int mc__svc_tick(mc__svc_t *svc, uint64_t now);

/* Takes one entry of the op log (master/oplog.h): segment seg, notice
 * note[0..len) (valid during the call). */
typedef void (*mc__svc_journal_fn)(void *arg, uint32_t seg, const char *note, size_t len);

/*
 * Makes svc a master with an op log (a leader with standbys, server/ha.c):
 * every change of a record nodes keep goes to fn as an entry, when the
 * master flushes its dirty versions (mc__svc_flush()) or at once
 * for a drop. view (not owned; may be NULL) is the log as this master found
 * it when it took over: the versions it says are gone are refused from now
 * on, and a segment mounted again gets the log's records of it merged with
 * its node's report.
 */
void mc__svc_journal(mc__svc_t *svc, mc__svc_journal_fn fn, void *arg, const mc__oplog_t *view);

/* 1 while segments the op log knows have not come back (mounted again and
 * reported) since this master took over: a key missing now may still come
 * with them. */
int mc__svc_rebuilding(const mc__svc_t *svc);

/* Hands the master's dirty versions to their nodes' notices and, with an
 * op log, to the log (a leader calls it after each request, before the
 * answer goes out). */
void mc__svc_flush(mc__svc_t *svc);

/* Counters for logs and tests. */
typedef struct mc__svc_stats {
    uint64_t nodes, segments, puts, handles, nodes_expired, objects_lost, puts_expired;
    uint64_t replicas_dropped; /* by writers that could not reach a node (PUT_DROP_REPLICA) */
    uint64_t repair_started, repair_done, repair_failed, repair_bytes, repair_inflight,
        repair_waiting;       /* see repair.h */
    uint64_t records_merged;  /* nodes' records merged after a restart */
    uint64_t records_refused; /* ... and refused (older, gone, unreadable) */
    uint64_t records_renamed; /* of those merged, rebuilt under a new id (this
                                 run had handed out theirs: a clock set back) */
    uint64_t notices_dropped; /* notices a node's full queue could not take */
    uint64_t notices_waiting; /* bytes of notices nodes have not fetched yet */
    uint64_t segments_held;   /* segments where nothing new is placed yet (mounted
                                 again: writers of before may still land there,
                                 or its records are being reported), as of the
                                 last request or tick */
} mc__svc_stats_t;
void mc__svc_stats(const mc__svc_t *svc, mc__svc_stats_t *st);

/* The counters of mc__svc_stats() by name, into out[0..max) (STATS and
 * mc_master_stats()). Returns the count filled. */
size_t mc__svc_counters(const mc__svc_t *svc, mc_counter_t *out, size_t max);

#endif /* MC_SERVICE_H */
