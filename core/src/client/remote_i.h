/*
 * remote_i.h - what the files of the client share (store_i.h is what the
 * store's API shares with them):
 *
 *   remote.c  master calls, and the operations: simple ones, put, get, open
 *   writer.c  streaming writers (OP_W_*)
 *   writer_idle.c  their leases renewed while they sit idle
 *   writer_xfer.c  their transfers, in the order they take effect
 *   xfer.c    replica sets, and transfers between a buffer and replicas
 *             in pieces, over the transports of transport/transport.h
 *   peers.c   sessions, the nodes we move data with, and which transport
 *             reaches a replica (shared memory mappings, RDMA connections)
 *   rcache.c  the replica-list cache of mc_get()
 *   node.c    opening and closing; the node role: mounting the segment,
 *             heartbeats, repair copies
 *
 * Loop thread only, all of it.
 */
#ifndef MC_REMOTE_I_H
#define MC_REMOTE_I_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "client/link.h"
#include "client/store_i.h"
#include "master/ids.h"
#include "runtime/rpc.h"
#include "server/rdma_setup.h"
#include "server/server.h"
#include "transport/transport.h"
#include "wire/proto.h"

/* A replica set, as the master hands it out (mc__rset_take()). */
typedef struct mc__rset {
    uint32_t n;
    uint32_t refs;          /* its holder, plus every transfer in flight over it */
    uint64_t put_id;        /* a writer's set: the put it belongs to (0: none) */
    struct mc__rset *newer; /* a writer's set: the one that replaced it (a reference), or NULL */
    struct rrep {
        uint32_t seg;
        uint64_t epoch; /* its segment's, as granted (raised by PUT_EPOCH) */
        char addr[MC__ADDR_STRLEN];
        char rdma_addr[MC__ADDR_STRLEN]; /* the node's rdma_cm listener */
        mc__rdma_desc_t *desc;           /* its segment over RDMA; NULL: TCP only */
        uint32_t next;
        mc__extent_t *ext;
        int dead; /* a write could not reach its node: the put goes on without it */
    } r[];        /* n of them */
} mc__rset_t;

struct peer;
struct rtask;
struct rcache_ent;

struct mc__remote {
    mc_store_t *s;
    mc__link_t *master; /* rpc, or local in an embedded store */
    struct peer *peers;
    struct shm_map *retired; /* lost nodes' mappings that open handles may view (peers.c) */
    mc__server_t *srv;       /* serves our segment, when we have one */
    uint64_t node_id;
    uint32_t seg_id; /* our segment's id (a node: 0 until mounted) */
    int own_seg;     /* seg_id is our own segment: its bytes are copied here */
    mc_timer_t hb;
    mc_timer_t renew;   /* idle writers' renewals (writer.c) */
    uint64_t renew_due; /* when it fires (0: not armed) */
    int mounting;
    /* mc__remote_close() began: the master link lives until its calls in
     * flight are answered (its UNMOUNT_SEGMENT among them), and their
     * answers may come after the store is gone (its close does not wait
     * for them): node.c's callbacks then do nothing. */
    int closing;
    /* node.c's calls to the master in flight, each answered once (a
     * failure too: -ECANCELED once the link closed). Their answers find rm
     * alive: once closed, the last of them frees it (released). */
    int calls;
    int released; /* closed with calls in flight: the last answer frees rm */
    void (*open_done)(mc_store_t *s, int rc);
    void (*close_done)(mc_store_t *s);
    struct rcache_ent **rc_tab; /* replica-list cache: RC_BUCKETS chains, or NULL */
    size_t rc_n;                /* entries in it */
    struct rtask *tasks;        /* repair copies into our segment */
    int taking;                 /* a REPAIR_TAKE in flight */
    uint64_t take_at;           /* when it was sent: tasks' limits count from there */
    mc__ids_t recs;             /* the records of what our segment holds, by version id (node.c) */
    uint64_t rec_bytes;         /* their bytes: at most the segment's size */
    uint64_t rec_ack;           /* bytes of the last RECORDS_TAKE answer applied */
    uint64_t run;               /* the master run our segment was last mounted at (0: none) */
    uint64_t epoch;             /* our segment's: WRITEs below it are refused (proto.h) */
    _Atomic uint64_t mount_epoch; /* the epoch of our segment's last mount: READs below it
                                     are refused (proto.h, "Reads"; node.c) */
    int mount_unsure;             /* a mount's answer was lost: the next epoch a
                                     heartbeat raises ours to is the mount's (node.c) */
    mc__rdma_fencer_t fencer;     /* our segment's fence for RDMA peers (node.c) */
    int rtaking;                  /* a RECORDS_TAKE in flight */
    int reporting; /* records follow our mount: until the report's last call is answered */
    size_t rep_at; /* the next bucket of recs to report (SIZE_MAX: the last is sent) */
};

/* ---- master calls (remote.c) ---- */

/* Calls the master with a body packed per fmt; cb gets the response.
 * Returns 0, or -errno (cb is never called; -ECANCELED: the store is
 * closing). */
int mc__mcall(mc_store_t *s, uint16_t op, mc__rpc_cb cb, void *arg, const char *fmt, ...);

/* The two requests of every put (a whole object's and a writer's), with
 * their own encoders (proto.h): PUT_START for o (its key and options) with
 * capacity bytes, and PUT_COMMIT of rq. As mc__mcall() otherwise. */
int mc__mcall_put_start(op_t *o, uint64_t capacity, mc__rpc_cb cb);
int mc__mcall_put_commit(mc_store_t *s, const mc__put_commit_rq_t *rq, mc__rpc_cb cb, void *arg);

/* CREATE of o's key and options, its writer reserving capacity bytes (the
 * body of a PUT_START). As mc__mcall() otherwise. */
int mc__mcall_create(op_t *o, uint64_t capacity, mc__rpc_cb cb);

/* The bytes a writer with nothing to copy reserves when it starts (its
 * PUT_START, or the CREATE that starts it): a small file's writes fit,
 * with no PUT_GROW (the first grow takes the reservation to 1 MiB). */
#define MC__WRITER_FIRST (64u << 10)

/* A callback for master calls whose answer does not matter. */
void mc__ignore_reply(void *arg, int status, const char *body, size_t len);

/* The master forgot a write in progress: its lease ran out (nobody renewed
 * it for the put TTL: its client stopped; or a master that restarted). The
 * writer must stop. */
static inline int revoked(int status)
{
    return status == -ENOENT ? -ESTALE : status;
}

/* The end of a read of o->u64 bytes into o->buf (a get, an open version's
 * or a writer's read): finishes o with the count or the error. */
void mc__read_done(void *arg, int rc);

/*
 * An open version from the front of an OPEN answer at *p (*n bytes: handle
 * id, stat, replica set), on the store's list; *p and *n move past it.
 * Returns 0 and *out, -EIO (the handle is closed), -ENOMEM.
 */
int mc__obj_take(mc_store_t *s, const char **p, size_t *n, mc_obj_t **out);

/* Closes open version ob (CLOSE) and frees it. */
void mc__obj_release(mc_obj_t *ob);

/* ---- a new file in one call (create.c) ---- */

/* Runs an OP_CREATE op; completes it with mc__op_finish(). */
void mc__create_exec(op_t *o);

/* ---- extended attributes (xattr.c) ---- */

/* Runs an OP_XATTR_* op; completes it with mc__op_finish(). */
void mc__xattr_exec(op_t *o);

/* ---- copy and move tasks (tasks.c) ---- */

/* Runs an OP_TASK_* op; completes it with mc__op_finish(). */
void mc__task_exec(op_t *o);

/* ---- writers (writer.c) ---- */

/* Runs a writer's op (OP_W_*); completes it with mc__op_finish(). */
void mc__writer_exec(op_t *o);

/*
 * A writer of key from the answer to a PUT_START (put id, write lease,
 * replica set; the CREATE answer's tail) sent at sent_ms, with capacity
 * bytes reserved: on the store's list, the caller's (*out) to finish.
 * Returns 0, -EIO (a malformed answer), -ENOMEM.
 */
int mc__writer_take(mc_store_t *s, const char *key, size_t klen, uint64_t sent_ms,
                    uint64_t capacity, const char *body, size_t len, mc_writer_t **out);

/* Writer w is the caller's now (opened, its base copied): from now on its
 * lease is renewed while it sits idle, until its commit or abort
 * (writer_idle.c). */
void mc__writer_handed(mc_writer_t *w);

/* Runs the ops parked on *list (o->cont(o) each, in order). */
void mc__writer_wake(op_t **list);

/* Sends len bytes at off of w's version (buf; NULL: zeros), write, or reads
 * them into buf, for op o of writer o->w, to the replicas o->w has when it
 * starts; done(o, rc) when it ended (writer_xfer.c). One transfer per op
 * at a time. */
void mc__writer_xfer(op_t *o, int write, uint64_t off, char *buf, uint64_t len,
                     void (*done)(void *, int));

/* Whether a transfer of w on its way may land at or past off
 * (writer_xfer.c). */
int mc__writer_landing(const mc_writer_t *w, uint64_t off);

/* For writer_idle.c: takes the answer to w's idle renewal (status, body:
 * a PUT_GROW's; status MC__RENEWED_BARE: renewed, no body) into w: its
 * replica set and next renewal, or the put's loss (w->err). Returns
 * status, or the error taking it. */
int mc__writer_renewed(mc_writer_t *w, int status, const char *body, size_t len);

/* For writer_idle.c: one of w's ops (its renewal) ended: a commit or an
 * abort waiting for the last goes on. */
void mc__writer_op_ended(mc_writer_t *w);

/* ---- transfers (xfer.c) ---- */

/* Decodes a replica set from the front of *p (n bytes left) into an owned
 * copy *out (free with mc__rset_free()). Returns 0, -EIO, -ENOMEM. */
int mc__rset_take(const char **p, size_t *n, mc__rset_t **out);

/*
 * A writer's set rs takes the place of old (which may be NULL): a replica
 * dropped in old is dropped in rs, and one that a transfer still in
 * flight over old drops later is dropped in rs too (old keeps a reference
 * to rs until it is freed). Matches replicas by segment.
 */
void mc__rset_replace(mc__rset_t *old, mc__rset_t *rs);

/*
 * Sparse files: whether object offset off lies in a hole of rs (1: a hole,
 * also past its extents; 0: bytes), with [*start, *end) the run of holes or
 * of bytes around it (*end UINT64_MAX past the extents). Every replica of a
 * version has its holes at the same places.
 */
int mc__rset_run(const mc__rset_t *rs, uint64_t off, uint64_t *start, uint64_t *end);

/* xfer_t.delayed: what MC_FAULT_XFER's delay did to a transfer. */
enum {
    MC__XFER_ON_TIME = 0, /* nothing (yet) */
    MC__XFER_HELD,        /* held back once, then sent */
    MC__XFER_LATE_COPY,   /* a copy of a failed write's bytes, sent after the delay */
};

/* A transfer between a buffer and the replicas of an object (mc__xfer()). */
typedef struct xfer {
    mc_store_t *s;
    const mc__rset_t *rs;
    int write;
    int zero; /* the source is zeros */
    uint64_t off, len;
    char *buf;
    uint32_t replica;           /* reads: the replica being tried */
    int rerr[MC__MAX_REPLICAS]; /* writes: the first error per replica */
    int pending;
    int issuing;
    int delayed;   /* MC__XFER_*: what MC_FAULT_XFER's delay did to it */
    int refreshes; /* PUT_EPOCH rounds after a node refused an old epoch */
    uint32_t redo; /* replicas to send again: their epoch was refreshed */
    int err;
    void (*done)(void *arg, int rc);
    void *arg;
    struct xfer *wait_next; /* parked on a peer (mc__peer_wait()) */
} xfer_t;

/* PUT_REVOKE of write put_id (its answer ignored): fenced when a transfer
 * of it failed, whose bytes may still land (MC__REVOKE_FENCED). */
void mc__put_revoke(mc_store_t *s, uint64_t put_id, int fenced);

/*
 * Moves len bytes between buf and object offset off of the replicas rs
 * (every replica for a write; the first that works for a read); buf NULL
 * with write writes zeros. done(arg, rc) runs once, possibly at once. The
 * transfer holds a reference to rs until then, so its holder may replace
 * and free it meanwhile (a writer growing while writes are in flight).
 */
void mc__xfer(mc_store_t *s, const mc__rset_t *rs, int write, uint64_t off, char *buf, uint64_t len,
              void (*done)(void *, int), void *arg);

/*
 * Writes buf[0..len) into the replicas rep[0..nrep) of a pending version on
 * the spot, when each is in our own segment (mc__peer_own()): the write of
 * a put made in one call (mc__link_put()). Returns 0, -EREMOTE (a replica
 * is elsewhere; nothing written), or the transport's error.
 */
int mc__xfer_write_own(mc_store_t *s, const mc__replica_t *rep, uint32_t nrep, const char *buf,
                       uint64_t len);

/* Issues x's pieces, or parks it until a peer is ready; peers.c resumes
 * parked transfers with it. */
void mc__xfer_step(xfer_t *x);

/* ---- peers and routes (peers.c) ---- */

/* The master's rpc client callbacks: the session handshake. */
extern const mc__rpc_client_ops_t mc__master_ops;

/*
 * Whether x must wait before it moves bytes on replica rep: the first
 * transfer to a co-located node waits for the segment's mapping, one over
 * RDMA for the connection to the node. Parks x (mc__xfer_step() resumes it)
 * and returns 1, or returns 0: go ahead.
 */
int mc__peer_wait(xfer_t *x, const struct rrep *rep);

/* Whether segment seg is our own (its bytes are copied here); if so, fills
 * *tp and *ep with the local transport over it. Returns 1 or 0. */
int mc__peer_own(const mc_store_t *s, uint32_t seg, const mc__transport_t **tp, mc__tp_ep_t *ep);

/*
 * Picks the transport for pieces on replica rep now, and fills *ep for it;
 * *peer is the node (NULL: our own segment). Returns 0, or -errno: the
 * replica is out of reach (-EHOSTUNREACH, -ENOTCONN or the connect's error
 * for RDMA not up, -EPROTONOSUPPORT: protocol rdma to a node without it).
 */
int mc__peer_route(mc_store_t *s, const struct rrep *rep, const mc__transport_t **tp,
                   struct peer **peer, mc__tp_ep_t *ep);

/* A piece on ep to peer failed with err: a connection that timed out or
 * broke is dropped (the next transfer makes a new one). The store is open. */
void mc__peer_piece_failed(struct peer *p, const mc__transport_t *tp, const mc__tp_ep_t *ep,
                           int err);

/* Closes every peer of rm (at close): pieces and waits in flight fail. */
void mc__peers_close(struct mc__remote *rm);

/* Unmaps the segments of lost nodes that were kept mapped because handles
 * were open (mc_obj_view()'s pointers into them stay good until
 * mc_obj_close()). Called when the last handle closes, and at close. */
void mc__peers_unretire(struct mc__remote *rm);

/* ---- the replica-list cache (rcache.c) ---- */

typedef struct rcache_ent {
    struct rcache_ent *hnext;
    uint32_t refs;
    uint64_t expires;   /* mc_loop_now_ms() */
    uint64_t lease_end; /* mc_loop_now_ms(): the read lease lasts at least this long
                           (its GET_REPLICAS went out, plus the lease; 0: none) */
    uint64_t session;   /* s->master_lost then: a master that restarted (or a lost
                           connection) knows no lease of before */
    mc_stat_t st;
    mc__rset_t *rs;
    size_t klen;
    char key[];
} rcache_ent_t;

/* Drops a reference to e (NULL is ignored); the last frees it. */
void mc__rc_put(rcache_ent_t *e);

/* Drops every entry (rm may be NULL: the store is closing). */
void mc__rc_clear(struct mc__remote *rm);

/* Drops key's entry (only if it is e, unless e is NULL). */
void mc__rc_drop(struct mc__remote *rm, const char *key, size_t klen, const rcache_ent_t *e);

/* key's live entry, or NULL (an expired one is dropped). */
rcache_ent_t *mc__rc_find(struct mc__remote *rm, const char *key, size_t klen);

/* A fresher word from the master on key (a stat): an entry of another
 * version goes. */
void mc__rc_check(struct mc__remote *rm, const char *key, size_t klen, const mc_stat_t *st);

/* Puts e in the table (which takes a reference), replacing key's entry. */
void mc__rc_insert(struct mc__remote *rm, rcache_ent_t *e);

#endif /* MC_REMOTE_I_H */
