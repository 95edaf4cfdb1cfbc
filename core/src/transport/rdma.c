/*
 * rdma.c - the rdma transport (see transport.h): a piece is one RDMA READ
 * or WRITE on a connection to the node (transport_rdma.h), which slices it;
 * both carry the replica's epoch, for the node's fence (a write's) and
 * mount word (a read's).
 * Built with or without RDMA: without it, moves fail with -ENOTSUP (the
 * client then never picks this transport: it has no RDMA context).
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mooncake/mooncake.h"
#include "transport/transport.h"

/* A piece in flight; rd is a copy of the endpoint's descriptor, which a
 * writer's growing replica set may free before the piece completes. */
typedef struct rdma_piece {
    mc__tp_cb cb;
    void *arg;
    mc__rdma_desc_t rd; /* variable size: keep last */
} rdma_piece_t;

static void rdma_done(void *arg, int status)
{
    rdma_piece_t *rp = arg;
    mc__tp_cb cb = rp->cb;
    void *cb_arg = rp->arg;
    free(rp);
    cb(cb_arg, status);
}

static int rdma_move(const mc__tp_ep_t *ep, const mc__tp_piece_t *p, mc__tp_cb cb, void *arg)
{
    size_t dsz = mc__rdma_desc_size(ep->rdma.desc->n);
    rdma_piece_t *rp = malloc(offsetof(rdma_piece_t, rd) + dsz);
    if (!rp)
        return -ENOMEM;
    rp->cb = cb;
    rp->arg = arg;
    memcpy(&rp->rd, ep->rdma.desc, dsz);
    int rc = p->write ? mc__rdma_write_epoch(ep->rdma.c, p->epoch, p->buf, p->mr, &rp->rd, p->off,
                                             p->len, p->timeout_ms, rdma_done, rp)
                      : mc__rdma_read_epoch(ep->rdma.c, p->epoch, p->buf, p->mr, &rp->rd, p->off,
                                            p->len, p->timeout_ms, rdma_done, rp);
    if (rc < 0)
        free(rp);
    return rc;
}

const mc__transport_t mc__tp_rdma = {
    .name = "rdma",
    .flags = MC__TP_ZERO_COPY,
    .ops_stat = offsetof(mc_store_stats_t, rdma_ops),
    .bytes_stat = offsetof(mc_store_stats_t, rdma_bytes),
    .move = rdma_move,
};
