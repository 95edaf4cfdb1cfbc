/*
 * store_i.h - the store's internals, shared by store.c (the public API,
 * opening and closing) and the client's files (remote_i.h: every
 * operation, through a master link).
 */
#ifndef MC_STORE_I_H
#define MC_STORE_I_H

#include <pthread.h>
#include <stdint.h>

#include "master/master.h"
#include "mooncake/mooncake.h"
#include "server/rdma_setup.h"
#include "transport/shm.h"

struct mc__remote;
struct mc__svc;
struct mc__server;
struct mc__rset;
struct mc__secret;
struct mc__rdma_ctx;
struct mc__rdma_mr;

#define SEG_LOCAL 0

/* How mc_store_close() goes on (s->closing, atomic; open.c): not closing;
 * closed on its caller's loop's thread, freed later (draining, then
 * drained: freed once nothing in flight reads it, by whoever takes it to
 * freed first); closed from a callback of its own loop's thread, which
 * finishes the close and ends; closed from another thread, which waits
 * for it (a close from a callback meanwhile returns at once). */
enum {
    MC__CLOSE_NONE,
    MC__CLOSE_LATER,
    MC__CLOSE_DRAINED,
    MC__CLOSE_FREED,
    MC__CLOSE_SELF,
    MC__CLOSE_JOIN
};

/* Operations by kind (enum op_kind) and their latency (client/metrics.c):
 * relaxed atomics, written on the loop thread, read from any. */
#define MC__OP_KINDS 29
#define MC__LAT_BUCKETS 16 /* upper bounds in client/metrics.c, plus +Inf */
typedef struct mc__op_metrics {
    uint64_t ops[MC__OP_KINDS], errors[MC__OP_KINDS], lat_sum_ns[MC__OP_KINDS];
    uint64_t lat[MC__OP_KINDS][MC__LAT_BUCKETS + 1];
} mc__op_metrics_t;
#define WRITER_MAX_STEP (64ULL << 20) /* reservation growth per step */

struct mc_store {
    /* Connections to the master lost so far (atomic: mooncake-fs's workers
     * read it). A handle lives in the master's memory for as long as the
     * connection that opened it: once that is lost (a master that
     * restarted, a connection the master closed) nothing pins the version,
     * and its space may go to another object. */
    uint64_t master_lost;
    struct mc__remote *rm;  /* the cluster path; NULL when embedded */
    int remote;             /* opened with a master address */
    int open_done, open_rc; /* remote open, guarded by open_mu */
    pthread_mutex_t open_mu;
    pthread_cond_t open_cv;
    char *open_master, *open_listen;
    struct mc__svc *svc; /* embedded: the master protocol served to others */
    struct mc__server *srv;
    uint64_t timeout_ms;       /* bound on every network wait */
    struct mc__secret *secret; /* shared secret, or NULL: no authentication */
    mc_loop_t *loop;
    int own_loop;
    pthread_t thread;
    mc__master_t *m;
    mc__seg_t seg_mem;          /* our segment (base NULL: none): in a memfd offered to co-located
                                   clients, or in a file (transport/shm.h) */
    int no_shm;                 /* move no bytes through shared memory, either way */
    int no_rcache;              /* mc_get() without the replica-list cache */
    int xport;                  /* MC__XPORT_* asked for (transport_rdma.h) */
    struct mc__rdma_ctx *rdma;  /* the RDMA context, or NULL: TCP; loop thread */
    struct mc__rdma_mr *seg_mr; /* the segment, registered for peers; or NULL */
    char *rdma_rec;             /* the segment's RDMA record, published */
    size_t rdma_rec_len;
    mc__rdma_fencer_t fencer; /* an embedded master's segment's fence for RDMA peers (open.c) */
    mc_store_stats_t st;      /* updated with mc__count() on the loop thread */
    mc__op_metrics_t opm;     /* updated by mc__op_finish() */
    mc_timer_t sweep;
    mc_timer_t drain;     /* closing: lets connections finish */
    uint64_t drain_until; /* and ops in flight end, until then (ms) */
    int thread_started;
    int closing;             /* MC__CLOSE_*: how mc_store_close() goes on (open.c) */
    int live;                /* ops and transfers not yet freed, which read the store (atomic) */
    struct mc__ubuf *ubufs;  /* mc_register_buffer()'s regions; loop thread only */
    mc_obj_t *objs;          /* open handles, released by close; loop thread only */
    mc_writer_t *writers;    /* open writers, released by close; loop thread only */
    uint64_t ra_max;         /* read-ahead per open version, bytes (0: none; prefetch.h) */
    uint64_t ra_total;       /* read-ahead of the whole store, bytes */
    uint64_t ra_used;        /* bytes of read-ahead blocks now; loop thread only */
    struct mc__ra *ras;      /* read-ahead states, open or draining; loop thread only */
    struct mc__fault *fault; /* MC_FAULT_XFER: write transfers made to fail (xfer.c), or NULL */
    struct op *op_pool;      /* freed ops kept for reuse (ops.c); loop thread only */
    int op_pooled;           /* how many are on op_pool */
};

struct mc_obj {
    mc_store_t *s;
    mc_stat_t st;
    uint64_t rid;     /* the master's handle id */
    uint64_t session; /* s->master_lost when it was opened (mc_obj_stale()) */
    /* The segments mc_obj_view() pointed into: the word with the epoch of
     * each one's last mount, and the epoch of the replica viewed there
     * (mc_obj_stale(): a segment mounted again above it holds other bytes
     * now). Set on the loop thread before a view is handed out. */
    struct {
        const _Atomic uint64_t *mount;
        uint64_t epoch;
    } viewed[MC__MAX_REPLICAS];
    struct mc__rset *rs;   /* where its bytes are */
    struct mc__ra *ra;     /* its read-ahead (prefetch.c), or NULL */
    mc_obj_t *prev, *next; /* on s->objs */
};

struct mc_writer {
    mc_store_t *s;
    uint64_t size;
    unsigned put_flags;
    uint64_t put_id;     /* remote: the master's write id */
    uint64_t session;    /* remote: s->master_lost when it started: a later loss ended the
                            put (the master let go of it, or restarted and never knew it) */
    struct mc__rset *rs; /* remote: the replicas being written */
    uint64_t capacity;   /* remote: bytes reserved */
    uint64_t lease_ms;   /* remote: the write lease the master grants */
    uint64_t renew_at;   /* remote: renew the lease before writing from then on */
    unsigned meta_what;  /* MC_META_MODE, MC_META_MTIME: set for the commit */
    uint32_t mode;       /* remote: to publish with (MC_META_MODE) */
    int64_t mtime_ns;    /* MC_META_MTIME */
    char *key;           /* remote: the key to publish under */
    size_t klen;
    struct op *filling;   /* remote: the write filling a hole or a gap (writer.c), or NULL */
    struct op *fill_wait; /* remote: writes waiting for it, in order */
    int xfers;            /* remote: its transfers on their way (writer.c), parked ones too */
    uint64_t xfer_hi;     /* remote: where the last of them ends, at most */
    struct op *xq;        /* remote: the ops with one of them, in the order they asked (op->xq) */
    int xparked;          /* remote: those parked behind one before them that they overlap */
    struct op *xfer_wait; /* remote: punches waiting until none is */
    int ops;              /* remote: its writes, reads, truncations, punches not finished */
    struct op *ops_wait;  /* remote: a commit or abort waiting until none is */
    int err;         /* remote: the version is lost (writer.c): later ops and the commit fail so */
    int xfer_failed; /* remote: a write transfer failed: its bytes may still land */
    int handed;      /* remote: handed to the caller (open and copied): renewed when idle */
    int ending;      /* remote: its commit or revoke is sent: no renewal any more */
    struct w_renewal *renewal; /* remote: its idle renewal in flight (counted in ops), or NULL */
    int renew_failed;          /* remote: the last idle renewal failed (tried again later) */
    uint64_t renew_sent;       /* remote: when it was sent */
    mc_writer_t *prev, *next;  /* on s->writers */
};

/* Before w is freed: its idle renewal in flight, if any (writer.c), finds
 * it gone when its answer comes. Loop thread, or the store's close. */
void mc__writer_forget_renewal(mc_writer_t *w);

/* Links / unlinks n on the list at *head (a handle or a writer). */
#define LINK(head, n)                                                                              \
    do {                                                                                           \
        (n)->prev = NULL;                                                                          \
        (n)->next = *(head);                                                                       \
        if (*(head))                                                                               \
            (*(head))->prev = (n);                                                                 \
        *(head) = (n);                                                                             \
    } while (0)
#define UNLINK(head, n)                                                                            \
    do {                                                                                           \
        if ((n)->prev)                                                                             \
            (n)->prev->next = (n)->next;                                                           \
        else                                                                                       \
            *(head) = (n)->next;                                                                   \
        if ((n)->next)                                                                             \
            (n)->next->prev = (n)->prev;                                                           \
    } while (0)

enum op_kind {
    OP_PUT,
    OP_GET,
    OP_STAT,
    OP_REMOVE,
    OP_RENAME,
    OP_LIST,
    OP_STATFS,
    OP_MASTER_STATS,
    OP_LOOKUP,
    OP_SET_META,
    OP_OPEN,
    OP_OBJ_READ,
    OP_OBJ_CLOSE,
    OP_W_OPEN,
    OP_W_WRITE,
    OP_W_READ,
    OP_W_TRUNC,
    OP_W_COMMIT,
    OP_W_ABORT,
    OP_XATTR_GET,
    OP_XATTR_SET,
    OP_XATTR_LIST,
    OP_XATTR_REMOVE,
    OP_LINK,
    OP_W_PUNCH,
    OP_TASK_CREATE,
    OP_TASK_QUERY,
    OP_REPLICA_DROP,
    OP_CREATE,
};
_Static_assert(OP_CREATE + 1 == MC__OP_KINDS, "MC__OP_KINDS counts enum op_kind");

typedef struct op {
    mc_work_t work;
    mc_store_t *s;
    enum op_kind kind;
    uint64_t t0_ns; /* when it was made (CLOCK_MONOTONIC), for its latency */
    mc_done_cb cb;
    mc_data_cb dcb; /* mc_obj_peek_async(): called instead of cb, with o->buf */
    void *arg;
    int result;
    unsigned flags;
    uint64_t off;
    size_t len;
    void *buf;
    const struct iovec *iov;
    int iovcnt;
    struct iovec one;
    mc_stat_t *st;
    mc_put_opts_t po;
    int have_po;
    mc_meta_t meta; /* OP_SET_META */
    mc_list_t **list;
    size_t max;
    int delim;
    mc_space_t *sp;
    mc_counter_t *counters; /* OP_MASTER_STATS: max of them */
    mc_obj_t *obj;
    mc_obj_t **obj_out;
    mc_writer_t *w;
    mc_writer_t **w_out;
    int stage;        /* remote: where a multi-step operation is */
    uint64_t u64;     /* remote: scratch (put id, ...) */
    uint64_t sent_ms; /* remote: when the last master call that renews a lease went out */
    uint64_t lease_ms, renew_at;    /* remote: a whole-object put's write lease */
    uint64_t done;                  /* remote: bytes of a whole-object put sent so far */
    uint64_t base;                  /* remote: a writer's size when its write or truncate began */
    void (*cont)(struct op *o);     /* remote: what to do once the lease is renewed, or once
                                       what it waits for on its writer is done */
    void (*xdone)(void *o, int rc); /* remote: a writer's transfer's own callback (writer.c) */
    struct {
        struct op *next; /* on its writer's w->xq */
        uint64_t off, len;
        char *buf;        /* a write's bytes (NULL: zeros), a read's destination */
        int write;        /* or a read */
        int parked;       /* waits for a transfer before it that it overlaps */
    } xq;                 /* remote: a writer's transfer (writer.c, w_xfer()) */
    uint64_t lo, hi;      /* remote: a writer's bytes to zero around a write that fills a hole */
    struct op *wnext;     /* remote: on one of its writer's lists of waiting ops; freed: on
                             s->op_pool */
    void *tmp;            /* remote: scratch buffer */
    mc_task_info_t *task; /* OP_TASK_QUERY: the answer; OP_TASK_CREATE: *id in u64's place */
    uint64_t *task_id;    /* OP_TASK_CREATE: where the new task's id goes */
    void *lent[2];        /* remote: read-ahead blocks lent to a peek (prefetch.c) */
    struct iovec liov[2]; /* remote: a peek's bytes: in lent[], else o->buf */
    int liovcnt;
    int small;        /* its keys fit in OP_POOL_KEYS bytes: it may be reused (ops.c) */
    char *key, *key2; /* copies, inside this allocation */
    size_t klen, klen2;
    char keys[];
} op_t;

/* Adds n to counter *c, which only the loop thread writes and any thread
 * may read (mc_store_stats(), a metrics scrape): a relaxed load and store,
 * so a reader never sees a torn value, without the cost of a locked add. */
static inline void mc__bump(uint64_t *c, uint64_t n)
{
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

/* Counts one transfer of n bytes into the counters *ops and *bytes of
 * s->st, on the loop thread (mc__bump()). */
static inline void mc__count(uint64_t *ops, uint64_t *bytes, uint64_t n)
{
    mc__bump(ops, 1);
    mc__bump(bytes, n);
}

/* Completes o with rc from the loop thread, after the current callback,
 * and counts it (mc__op_count()). */
void mc__op_finish(op_t *o, int rc);

/* Counts a finished operation of this kind: one op, an error when rc < 0,
 * its latency since t0_ns (client/metrics.c): op_new() stamps t0_ns with
 * mc__loop_recent_ns() and the end reads the clock, once per operation. */
void mc__op_count(mc_store_t *s, enum op_kind kind, int rc, uint64_t t0_ns);

/* An op of kind on key[0..klen) and key2[0..klen2) (copies, in the op), to
 * hand to mc__op_submit(); NULL without memory. */
op_t *mc__op_new(mc_store_t *s, enum op_kind kind, const char *key, size_t klen, const char *key2,
                 size_t klen2, mc_done_cb cb, void *arg);

/* Frees the ops kept for reuse (ops.c): at close, once the loop has
 * stopped or from its thread. */
void mc__op_pool_free(mc_store_t *s);

/* An op or a transfer made (hold) and freed (release) on s: a store closed
 * on its caller's loop's thread is freed by the last release once its close
 * drained (open.c). A release must be the caller's last use of s. Any
 * thread. */
void mc__store_hold(mc_store_t *s);
void mc__store_release(mc_store_t *s);

/* Runs o on the loop; its callback runs later, never inside this call.
 * Returns 0 or -errno (o is freed, the callback never runs). */
int mc__op_submit(op_t *o);

/* A new op of kind for a put, a writer or a create of key with *po (NULL:
 * defaults; its preferred segment copied into the op). Returns 0 and
 * *out, -EINVAL, -ENAMETOOLONG, -ENOMEM. */
int mc__put_op(mc_store_t *s, enum op_kind kind, const char *key, size_t klen,
               const mc_put_opts_t *po, mc_done_cb cb, void *arg, op_t **out);

/* Runs o against the cluster; completes it with mc__op_finish(). */
void mc__remote_exec(op_t *o);

/* Connects s to the master at addr (and, with a segment, mounts it and
 * starts serving it). Loop thread; done(s, rc) once. */
int mc__remote_open(mc_store_t *s, const char *addr, const char *listen,
                    void (*done)(mc_store_t *s, int rc));

/* Opens the client path of an embedded store: its master is s->svc, in this
 * process (a local link, owner MC__SVC_OWNER_LOCAL), and its own segment is
 * seg. Call before the loop runs any operation. Returns 0 or -ENOMEM. */
int mc__remote_open_local(mc_store_t *s, uint32_t seg);

/*
 * Fault injection for tests (xfer.c): with MC_FAULT_XFER set to
 * "off=N,err=E[,addr=HOST:PORT]", every write transfer of bytes (not of
 * zeros) through mc__xfer() (not mc__xfer_write_own()) that starts at
 * object offset N fails with -E on each replica (on
 * the replica of the node serving at HOST:PORT only, when given) before a
 * byte of it moves. Read once per store, at open (s->fault, freed by the
 * close). Returns 0 (also when unset), -EINVAL (logged) or -ENOMEM.
 */
#define MC__FAULT_ENV "MC_FAULT_XFER"
int mc__fault_load(mc_store_t *s);

/* Sets the key a remote writer publishes under. */
int mc__remote_writer_set_key(mc_writer_t *w, const char *key, size_t klen);

/* Closes the cluster path (loop thread): a node unmounts its segment first
 * (bounded), then done(s) runs, possibly at once. done may be NULL. */
void mc__remote_close(mc_store_t *s, void (*done)(mc_store_t *s));

/* Offers s's segment over RDMA (once): registers it, listens on host, keeps
 * the record to publish in s->rdma_rec. Returns 0 or -errno (logged). */
int mc__store_rdma_serve(mc_store_t *s, const char *host);

/* A caller's buffer registered with mc_register_buffer(). */
struct mc__ubuf {
    char *base;
    size_t len;
    struct mc__rdma_mr *mr; /* its local registration, or NULL (no RDMA) */
    uint64_t users;         /* RDMA pieces in flight on mr */
    struct mc__ubuf *next;
};

/* Returns the registered buffer holding all of [p, p + len), or NULL.
 * Loop thread. */
struct mc__ubuf *mc__ubuf_find(mc_store_t *s, const void *p, size_t len);

/* Drops a reference to a replica set (NULL is ignored); the last frees it. */
void mc__rset_free(struct mc__rset *rs);

#endif /* MC_STORE_I_H */
