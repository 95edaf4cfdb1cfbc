/*
 * rdma_setup.h - setting a process up for RDMA: which transport a store
 * asked for (mc_store_opts_t.protocol, --protocol), opening the device it
 * uses, and offering a node's segment to peers (registered, an rdma_cm
 * listener, the record to publish with MOUNT_SEGMENT, its fence). Used by a store
 * (client/store.c, client/node.c) and by mooncake-master with a segment;
 * the transport itself is transport/transport_rdma.h. Always built: without
 * RDMA, mc__rdma_open() says so and mc__rdma_serve() fails with -ENOTSUP.
 */
#ifndef MC_RDMA_SETUP_H
#define MC_RDMA_SETUP_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/loop.h"
#include "server/server.h"
#include "transport/transport_rdma.h"

/* A store's data transport (mc_store_opts_t.protocol). */
enum mc__xport {
    MC__XPORT_TCP = 0,  /* sockets only */
    MC__XPORT_RDMA = 1, /* RDMA to every node; an error at open without a device */
    MC__XPORT_AUTO = 2, /* RDMA when a usable device exists, TCP otherwise */
};

/*
 * mc__xport_parse() maps "tcp", "rdma" and "auto" (NULL or "": tcp) to
 * MC__XPORT_*; anything else is -EINVAL.
 */
int mc__xport_parse(const char *s);

/*
 * mc__rdma_open() makes the context a store with transport xport uses, on
 * loop l: none for MC__XPORT_TCP; for MC__XPORT_RDMA and MC__XPORT_AUTO
 * the first device of devices (a comma-separated list of verbs device
 * names, "rxe0,mlx5_1") that opens, or the first device present when
 * devices is NULL or empty. Returns 0 and sets *out (NULL: TCP; free a
 * context with mc__rdma_ctx_free()), or, for MC__XPORT_RDMA only:
 * -EPROTONOSUPPORT (built without libibverbs/librdmacm), -ENODEV (no RDMA
 * device, or none of devices), -errno from opening it. MC__XPORT_AUTO
 * never fails for want of a device: it logs why and returns TCP.
 */
int mc__rdma_open(mc_loop_t *l, int xport, const char *devices, uint64_t timeout_ms,
                  mc__rdma_ctx_t **out);

/*
 * mc__rdma_serve() offers segment [base, base + size) to peers: registers it
 * (MC__RDMA_REMOTE), listens with rdma_cm on host (an IP literal; port 0
 * picks one) unless ctx already listens, and packs the record to publish
 * (*rec, *rec_len; the caller frees *rec with free()). Returns 0 and sets
 * *mr (the caller releases it with mc__rdma_deregister() before freeing
 * ctx), or -EINVAL (host is not an IP address), the errors of
 * mc__rdma_register() and mc__rdma_listen() (-ENODEV: host is not on the
 * context's device, e.g. a loopback address), -ENOMEM.
 */
int mc__rdma_serve(mc__rdma_ctx_t *ctx, void *base, size_t size, const char *host,
                   mc__rdma_mr_t **mr, char **rec, size_t *rec_len);

/*
 * A fence for what a process serves over RDMA (transport_rdma.h,
 * "Fences"): each connection its listener accepts gets a slot of the
 * segment's fence from srv's data plane (node/data_plane.h), as segment
 * *seg there (read at each connection: a node's number changes when it
 * mounts again), and is revoked when a write of its holds an epoch's rise
 * back too long. The
 * caller keeps it while the fence is given (mc__rdma_fence_segment()).
 */
typedef struct mc__rdma_fencer {
    mc__rdma_ctx_t *ctx; /* the listener it is given to, or NULL: none */
    mc__server_t *srv;
    const uint32_t *seg;
} mc__rdma_fencer_t;

/*
 * mc__rdma_fence_segment() gives ctx's listener fence, the segment's
 * (mc__seg_t.fence, transport/shm.h), with slots from srv's data plane as
 * segment *seg, and fills f (f->ctx set: given). Returns 0, or -ENOTSUP
 * (fence NULL; without RDMA), or the errors of mc__rdma_fence(); a
 * segment left without a fence is logged.
 */
int mc__rdma_fence_segment(mc__rdma_fencer_t *f, mc__rdma_ctx_t *ctx, mc__server_t *srv,
                           const uint32_t *seg, mc__shm_fence_t *fence);

/* mc__rdma_unfence() takes f's fence back from its listener, which refuses
 * connections from then on; nothing when none was given. Call it before
 * f's server closes. */
void mc__rdma_unfence(mc__rdma_fencer_t *f);

/* Writes the host part of a data address ("10.0.0.1:7100", "[fe80::1]:7100"),
 * the host an RDMA listener binds, into host[0..cap). Returns 0,
 * -EAFNOSUPPORT (a unix: address), -EINVAL. */
int mc__rdma_host_of(const char *addr, char *host, size_t cap);

#endif /* MC_RDMA_SETUP_H */
