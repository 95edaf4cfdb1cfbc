/*
 * transport_rdma.h - the RDMA transport: one-sided RDMA READ and WRITE between
 * local buffers and registered remote memory, over RC queue pairs set up with
 * rdma_cm, completions driven by the io_uring loop (libibverbs + librdmacm).
 *
 * Roles. A node registers its segment (mc__rdma_register() with
 * MC__RDMA_REMOTE), publishes the descriptor (mc__rdma_desc_pack(): one
 * address and rkey per chunk of at most the device's max_mr_size) and
 * listens (mc__rdma_listen()); it then takes no part in the data path, the
 * HCA serves the reads and writes. A client connects (mc__rdma_connect(),
 * one connection per node, reused by every operation) and moves bytes with
 * mc__rdma_read() / mc__rdma_write() between its buffer and (descriptor,
 * offset) of the node's segment.
 *
 * Local buffers are either the caller's own, registered with
 * mc__rdma_register() (zero copy), or anything else: then the bytes pass
 * through the connection's registered staging slots. An operation is split
 * into slices of at most slice_size bytes that never cross a chunk of either
 * side; at most max_inflight slices are posted per connection, the rest wait
 * in FIFO order.
 *
 * Completions: each connection's CQ is armed with ibv_req_notify_cq() and
 * its completion channel fd is watched with mc_poll_start(); every wake-up
 * acknowledges the events, re-arms, then drains the CQ. No thread, no busy
 * polling. The rdma_cm event channel is watched the same way.
 *
 * Fences. One-sided writes pass no check of the node's, so a node that
 * revokes writers (wire/proto.h, "Segment epochs") gives its listener a
 * fence (mc__rdma_fence(): the layout and rules of transport/shm.h) and
 * each connection it accepts a slot of it, named in the connection's
 * parameters. Before a write's bytes go (mc__rdma_write_epoch()) the
 * client marks the write's epoch in its slot (an RDMA WRITE) and reads the
 * fence's epoch (an RDMA READ, after the mark on the same queue pair):
 * above the write's, the write fails with -ESTALE and nothing of it is
 * posted. The slot keeps the lowest epoch of the writes admitted and not
 * done; once they completed it rises or clears. A node that raises its
 * epoch stores it in the fence, then loads the slots: a write that began
 * before holds the rise back until it ends, and one after is refused. A
 * connection that holds a rise back too long is revoked (its queue pair
 * destroyed, mc__rdma_revoke()): nothing it sends lands any more.
 *
 * One-sided reads pass no check of the node's either, so a fence may also
 * carry the node's mount word (the epoch its segment was last mounted
 * with, shm.h), registered for READs too. A read of an epoch
 * (mc__rdma_read_epoch()) on such a connection ends only after an RDMA
 * READ of that word posted after the read's bytes on the same queue pair
 * (which the responder executes after them): above the read's epoch, the
 * segment was mounted again since its replica set was handed out, the
 * bytes may be another object's, and the read fails with -ESTALE. One such
 * READ decides every read posted before it (rdma_io.c, "Reads").
 *
 * Errors. Every wait is bounded: a connect or accept by the context's
 * timeout, an operation by its own timeout_ms. A failed work completion
 * (remote access error, retries exceeded, flush), a QP or device error
 * event, a disconnect from the peer or a timeout tears the connection down
 * (its QP is destroyed first, so the HCA touches no buffer afterwards) and
 * fails every operation queued on it: -EIO for an access or protection
 * error, -ECONNRESET for a peer gone or a QP in error, -ETIMEDOUT for a
 * timeout, -ENODEV when the device went away. The caller reconnects.
 *
 * Threading: everything here runs on the context's loop thread.
 *
 * Without MC_HAVE_RDMA (the build found no libibverbs/librdmacm) every
 * function but the descriptor codec is a static inline stub returning
 * -ENOTSUP.
 */
#ifndef MC_TRANSPORT_RDMA_H
#define MC_TRANSPORT_RDMA_H

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "mooncake/loop.h"

/* Defaults used when an option is 0. */
#define MC__RDMA_TIMEOUT_MS 5000        /* connect, accept, and operations given 0 */
#define MC__RDMA_SLICE_SIZE (256 << 10) /* bytes per work request */
#define MC__RDMA_MAX_INFLIGHT 16        /* work requests posted per connection */

/* mc__rdma_register() flags. */
#define MC__RDMA_REMOTE 0x1 /* peers may RDMA READ and WRITE it (a segment) */

/* The largest descriptor mc__rdma_desc_unpack() accepts, in chunks. */
#define MC__RDMA_DESC_MAX_CHUNKS 65536

typedef struct mc__rdma_ctx mc__rdma_ctx_t;
typedef struct mc__rdma_conn mc__rdma_conn_t;
typedef struct mc__rdma_mr mc__rdma_mr_t;

typedef struct mc__rdma_opts {
    const char *device;          /* verbs device name ("rxe0"); NULL: see bind */
    const struct sockaddr *bind; /* with no device: the device that carries this
                                  * address; neither: the first device */
    uint64_t timeout_ms;         /* connect and accept; operations given 0 */
    uint32_t slice_size;         /* bytes per work request */
    uint32_t max_inflight;       /* work requests posted per connection */
    uint64_t max_mr_chunk;       /* split registrations above this (0: the
                                  * device's max_mr_size alone decides) */
} mc__rdma_opts_t;

/*
 * Where remote memory lies: chunk i covers bytes [i * chunk, i * chunk +
 * chunk) of the region (the last may be shorter) at remote address addr
 * with key rkey.
 */
typedef struct mc__rdma_desc {
    uint64_t size;  /* bytes in all */
    uint64_t chunk; /* bytes per chunk */
    uint32_t n;     /* chunks: ceil(size / chunk) */
    struct mc__rdma_rchunk {
        uint64_t addr;
        uint32_t rkey;
    } c[];
} mc__rdma_desc_t;

/* Counters of one context; all but registered_bytes only grow. */
typedef struct mc__rdma_stats {
    uint64_t reads, writes;                /* operations that succeeded */
    uint64_t bytes_read, bytes_written;    /* their bytes */
    uint64_t failed;                       /* operations failed with an error */
    uint64_t timeouts;                     /* of which by their timeout */
    uint64_t slices;                       /* work requests posted */
    uint64_t inflight_peak;                /* most slices posted at once on a conn */
    uint64_t cq_wakeups;                   /* completion channel wake-ups */
    uint64_t completions;                  /* work completions drained */
    uint64_t conns_opened, conns_accepted; /* established, as client / node */
    uint64_t conns_failed;                 /* torn down by an error or timeout */
    uint64_t writes_fenced;                /* writes refused by a node's fence (-ESTALE) */
    uint64_t reads_fenced;                 /* reads discarded by a node's mount word (-ESTALE) */
    uint64_t fence_wrs;                    /* marks and READs of fences (and mount words) posted */
    uint64_t registered_bytes;             /* currently registered by callers */
} mc__rdma_stats_t;

/* mc__rdma_connect() callback: status 0 (c is usable) or -errno. */
typedef void (*mc__rdma_connect_cb)(mc__rdma_conn_t *c, int status, void *arg);
/* mc__rdma_read()/mc__rdma_write() callback: status 0 or -errno. */
typedef void (*mc__rdma_cb)(void *arg, int status);

/*
 * mc__rdma_desc_size() returns the bytes of a descriptor of n chunks, for
 * allocating one.
 */
static inline size_t mc__rdma_desc_size(uint32_t n)
{
    return sizeof(mc__rdma_desc_t) + (size_t)n * sizeof(struct mc__rdma_rchunk);
}

/*
 * mc__rdma_desc_pack() writes d as a byte string (little endian, versioned)
 * into buf[0..cap), for the master's segment table. Returns the length it
 * needs; nothing is written when that is more than cap. Pure: no I/O.
 */
size_t mc__rdma_desc_pack(const mc__rdma_desc_t *d, void *buf, size_t cap);

/*
 * mc__rdma_desc_unpack() parses what mc__rdma_desc_pack() wrote. Returns 0
 * and sets *out to a descriptor the caller frees with free(), or -EINVAL for
 * a malformed, inconsistent or oversized string, -ENOMEM. Pure: no I/O.
 */
int mc__rdma_desc_unpack(const void *buf, size_t len, mc__rdma_desc_t **out);

/*
 * A node's fence: ops->join(arg, c, peer) runs for each connection the
 * listener accepts and returns the word of its slot (peers may RDMA WRITE
 * only their own), or NULL to refuse it; ops->leave(arg, c) runs once c's
 * queue pair is destroyed (nothing it sends lands any more), and only for
 * connections join gave a slot.
 */
typedef struct mc__rdma_fence_ops {
    _Atomic uint64_t *(*join)(void *arg, mc__rdma_conn_t *c, const char *peer);
    void (*leave)(void *arg, mc__rdma_conn_t *c);
    void *arg;
} mc__rdma_fence_ops_t;

#ifdef MC_HAVE_RDMA

/*
 * mc__rdma_available() returns the number of RDMA devices present (0: none,
 * use TCP), or -errno when libibverbs cannot tell.
 */
int mc__rdma_available(void);

/*
 * mc__rdma_ctx_new() opens a device (opts->device, or the one that carries
 * opts->bind, or the first), allocates its protection domain and starts
 * watching its rdma_cm event channel on loop l. opts may be NULL for
 * the defaults. Returns 0 and sets *out, or -ENODEV (no such device),
 * -ENOMEM, -errno from the verbs library. The caller frees it with
 * mc__rdma_ctx_free().
 */
int mc__rdma_ctx_new(mc_loop_t *l, const mc__rdma_opts_t *opts, mc__rdma_ctx_t **out);

/*
 * mc__rdma_ctx_free() closes the listener and every connection (a client
 * connection's handle becomes invalid; its pending operations and a pending
 * connect get their callbacks with -ECANCELED before this returns), then
 * frees the context. Registrations must have been released with
 * mc__rdma_deregister() first; those left are released here. Loop thread,
 * or after mc_loop_run() returned, never from one of this context's
 * callbacks; NULL is ignored.
 */
void mc__rdma_ctx_free(mc__rdma_ctx_t *ctx);

/* mc__rdma_device_name() returns the name of the context's device. */
const char *mc__rdma_device_name(const mc__rdma_ctx_t *ctx);

/* mc__rdma_stats() copies the context's counters into *st. */
void mc__rdma_stats(const mc__rdma_ctx_t *ctx, mc__rdma_stats_t *st);

/*
 * mc__rdma_register() registers [base, base + size) with the context's
 * protection domain, as one memory region per chunk of at most the device's
 * max_mr_size (and opts->max_mr_chunk). flags: MC__RDMA_REMOTE for memory
 * peers access (a segment); 0 for a local buffer of the zero-copy API.
 * Returns 0 and sets *out, or -EINVAL (size 0), -ENOMEM, -errno from
 * ibv_reg_mr (-EFAULT, -EPERM: the memlock limit). The memory stays the
 * caller's; it must outlive the registration, which the caller releases
 * with mc__rdma_deregister() once no operation uses it.
 */
int mc__rdma_register(mc__rdma_ctx_t *ctx, void *base, size_t size, unsigned flags,
                      mc__rdma_mr_t **out);

/* mc__rdma_deregister() releases a registration; NULL is ignored. */
void mc__rdma_deregister(mc__rdma_mr_t *mr);

/*
 * mc__rdma_mr_desc() returns the descriptor peers use to reach mr (chunk
 * addresses and rkeys); it belongs to mr and lives as long as it.
 */
const mc__rdma_desc_t *mc__rdma_mr_desc(const mc__rdma_mr_t *mr);

/*
 * mc__rdma_listen() accepts connections on sa (rdma_cm; port 0 picks one).
 * Accepted connections are the context's: they carry no operations of
 * ours, only give peers a queue pair to reach this context's MC__RDMA_REMOTE
 * registrations; they are dropped when the peer disconnects or fails.
 * One listener per context. Returns 0, -EBUSY (already listening),
 * -EADDRINUSE, -ENODEV (sa is on another device), -errno.
 */
int mc__rdma_listen(mc__rdma_ctx_t *ctx, const struct sockaddr *sa);

/*
 * mc__rdma_fence() gives ctx's listener the fence whose epoch word is epoch
 * and whose mount word is mount (or NULL: peers' reads are not checked),
 * both registered for peers' RDMA READs, for connections accepted from now
 * on (see the top of this file); ops NULL detaches it (call that before
 * what ops reaches goes away; connections are refused from then on). The
 * words stay the caller's and must outlive ctx. Returns 0, -EBUSY (a fence
 * already), or the error of registering a word.
 */
int mc__rdma_fence(mc__rdma_ctx_t *ctx, _Atomic uint64_t *epoch, _Atomic uint64_t *mount,
                   const mc__rdma_fence_ops_t *ops);

/* mc__rdma_revoke() tears down c, a connection the listener accepted: its
 * queue pair is destroyed before this returns (then ops->leave runs), so
 * nothing c's peer sends lands any more. */
void mc__rdma_revoke(mc__rdma_conn_t *c);

/* Whether c, connected, writes through a fence slot of its node's. */
int mc__rdma_conn_fenced(const mc__rdma_conn_t *c);

/* mc__rdma_listen_port() returns the port listened on, or -ENOTCONN. */
int mc__rdma_listen_port(const mc__rdma_ctx_t *ctx);

/*
 * mc__rdma_connect() connects to a node listening on sa: address and route
 * resolution, then an RC queue pair (connection parameters in rdma_cm
 * private data, checked by both sides). cb(c, 0, arg) runs once connected;
 * cb(c, -errno, arg) if not within timeout_ms (0: the context's): then
 * -ETIMEDOUT, -ECONNREFUSED (rejected: nobody listens, or a peer of another
 * protocol version), -EHOSTUNREACH, -ENETUNREACH, -ENODEV (the route is on
 * another device), and c is freed after cb returns. Sets *out at once, so
 * that mc__rdma_close() can cancel (cb gets -ECANCELED). cb never runs
 * inside this call. Returns 0, or -errno (cb is then never called).
 */
int mc__rdma_connect(mc__rdma_ctx_t *ctx, const struct sockaddr *sa, uint64_t timeout_ms,
                     mc__rdma_connect_cb cb, void *arg, mc__rdma_conn_t **out);

/*
 * mc__rdma_close() closes a client connection: operations still pending get
 * their callbacks with -ECANCELED (or the error that broke the connection)
 * from the loop, after this returns; a pending connect gets -ECANCELED.
 * The handle is invalid once this returns. May be called from any callback.
 */
void mc__rdma_close(mc__rdma_conn_t *c);

/*
 * mc__rdma_conn_error() returns 0 while c is usable or connecting, or the
 * error that broke it.
 */
int mc__rdma_conn_error(const mc__rdma_conn_t *c);

/*
 * mc__rdma_read() reads len bytes at offset roff of the remote region rd
 * into buf; mc__rdma_write() writes them from buf (buf NULL: zeros). buf
 * lies inside the caller's registration mr, or mr is NULL and the bytes go
 * through staging slots. cb(arg, status) runs exactly once from the loop
 * when every byte has arrived, or with -errno when the connection failed
 * (see the top of this file) or timeout_ms (0: the context's) passed
 * first. buf, mr and rd must stay valid until cb runs; buf must not be read
 * (read) or changed (write) before then. Returns 0, or -EINVAL (len 0,
 * [roff, roff + len) outside rd, buf outside mr), -ENOTCONN (still
 * connecting), the error that broke the connection, -ENOMEM; cb is then
 * never called.
 */
int mc__rdma_read(mc__rdma_conn_t *c, void *buf, const mc__rdma_mr_t *mr, const mc__rdma_desc_t *rd,
                  uint64_t roff, size_t len, uint64_t timeout_ms, mc__rdma_cb cb, void *arg);
int mc__rdma_write(mc__rdma_conn_t *c, const void *buf, const mc__rdma_mr_t *mr,
                   const mc__rdma_desc_t *rd, uint64_t roff, size_t len, uint64_t timeout_ms,
                   mc__rdma_cb cb, void *arg);

/*
 * mc__rdma_read_epoch() is mc__rdma_read() for a read of epoch (the
 * segment's epoch in the replica set the read is for): on a connection to
 * a node whose fence has a mount word, cb gets -ESTALE when that word,
 * read after the bytes, is above epoch: the segment was mounted again and
 * buf holds whatever its space held (see the top of this file); buf is
 * then not to be used. Without a mount word, epoch is not used.
 */
int mc__rdma_read_epoch(mc__rdma_conn_t *c, uint64_t epoch, void *buf, const mc__rdma_mr_t *mr,
                        const mc__rdma_desc_t *rd, uint64_t roff, size_t len, uint64_t timeout_ms,
                        mc__rdma_cb cb, void *arg);

/*
 * mc__rdma_write_epoch() is mc__rdma_write() for a write of epoch (the
 * segment's epoch as its writer was granted it): on a connection to a
 * node with a fence its bytes go only if the fence's epoch is not above
 * epoch, else cb gets -ESTALE and nothing was written (see the top of this
 * file); epoch 0 is refused there at once (-ESTALE returned, cb never
 * called). Without a fence, epoch is not used.
 */
int mc__rdma_write_epoch(mc__rdma_conn_t *c, uint64_t epoch, const void *buf,
                         const mc__rdma_mr_t *mr, const mc__rdma_desc_t *rd, uint64_t roff,
                         size_t len, uint64_t timeout_ms, mc__rdma_cb cb, void *arg);

#else /* !MC_HAVE_RDMA: built without libibverbs/librdmacm */

static inline int mc__rdma_available(void)
{
    return -ENOTSUP;
}
static inline int mc__rdma_ctx_new(mc_loop_t *l, const mc__rdma_opts_t *opts, mc__rdma_ctx_t **out)
{
    return -ENOTSUP;
}
static inline void mc__rdma_ctx_free(mc__rdma_ctx_t *ctx) {}
static inline const char *mc__rdma_device_name(const mc__rdma_ctx_t *ctx)
{
    return "none";
}
static inline void mc__rdma_stats(const mc__rdma_ctx_t *ctx, mc__rdma_stats_t *st)
{
    *st = (mc__rdma_stats_t){0};
}
static inline int mc__rdma_register(mc__rdma_ctx_t *ctx, void *base, size_t size, unsigned flags,
                                    mc__rdma_mr_t **out)
{
    return -ENOTSUP;
}
static inline void mc__rdma_deregister(mc__rdma_mr_t *mr) {}
static inline const mc__rdma_desc_t *mc__rdma_mr_desc(const mc__rdma_mr_t *mr)
{
    return NULL;
}
static inline int mc__rdma_listen(mc__rdma_ctx_t *ctx, const struct sockaddr *sa)
{
    return -ENOTSUP;
}
static inline int mc__rdma_listen_port(const mc__rdma_ctx_t *ctx)
{
    return -ENOTSUP;
}
static inline int mc__rdma_fence(mc__rdma_ctx_t *ctx, _Atomic uint64_t *epoch,
                                 _Atomic uint64_t *mount, const mc__rdma_fence_ops_t *ops)
{
    return -ENOTSUP;
}
static inline void mc__rdma_revoke(mc__rdma_conn_t *c) {}
static inline int mc__rdma_conn_fenced(const mc__rdma_conn_t *c)
{
    return 0;
}
static inline int mc__rdma_connect(mc__rdma_ctx_t *ctx, const struct sockaddr *sa,
                                   uint64_t timeout_ms, mc__rdma_connect_cb cb, void *arg,
                                   mc__rdma_conn_t **out)
{
    return -ENOTSUP;
}
static inline void mc__rdma_close(mc__rdma_conn_t *c) {}
static inline int mc__rdma_conn_error(const mc__rdma_conn_t *c)
{
    return -ENOTSUP;
}
static inline int mc__rdma_read(mc__rdma_conn_t *c, void *buf, const mc__rdma_mr_t *mr,
                                const mc__rdma_desc_t *rd, uint64_t roff, size_t len,
                                uint64_t timeout_ms, mc__rdma_cb cb, void *arg)
{
    return -ENOTSUP;
}
static inline int mc__rdma_read_epoch(mc__rdma_conn_t *c, uint64_t epoch, void *buf,
                                      const mc__rdma_mr_t *mr, const mc__rdma_desc_t *rd,
                                      uint64_t roff, size_t len, uint64_t timeout_ms,
                                      mc__rdma_cb cb, void *arg)
{
    return -ENOTSUP;
}
static inline int mc__rdma_write(mc__rdma_conn_t *c, const void *buf, const mc__rdma_mr_t *mr,
                                 const mc__rdma_desc_t *rd, uint64_t roff, size_t len,
                                 uint64_t timeout_ms, mc__rdma_cb cb, void *arg)
{
    return -ENOTSUP;
}
static inline int mc__rdma_write_epoch(mc__rdma_conn_t *c, uint64_t epoch, const void *buf,
                                       const mc__rdma_mr_t *mr, const mc__rdma_desc_t *rd,
                                       uint64_t roff, size_t len, uint64_t timeout_ms,
                                       mc__rdma_cb cb, void *arg)
{
    return -ENOTSUP;
}

#endif /* MC_HAVE_RDMA */

/* ---- the record a node publishes (always built) ---- */

/*
 * The RDMA record a node publishes with MOUNT_SEGMENT and the master hands
 * out, verbatim, in replica sets: where its rdma_cm listener is and the
 * descriptor of its segment.
 *
 *   u32 magic "MCRR", u16 version 1, u16 address length, the address
 *   ("ip:port", no NUL), then the mc__rdma_desc_pack() bytes.
 *
 * mc__rdma_record_pack() returns 0 and sets *out (the caller frees it with
 * free()) and *len, or -EINVAL (an address longer than 255 bytes), -ENOMEM.
 * mc__rdma_record_unpack() parses one into addr (NUL-terminated, at most
 * cap - 1 bytes) and *d (the caller frees it with free()); returns 0, or
 * -EINVAL for a malformed record, -ENOMEM. Both are pure.
 */
int mc__rdma_record_pack(const char *addr, const mc__rdma_desc_t *d, char **out, size_t *len);
int mc__rdma_record_unpack(const void *rec, size_t len, char *addr, size_t cap,
                           mc__rdma_desc_t **d);

#endif /* MC_TRANSPORT_RDMA_H */
