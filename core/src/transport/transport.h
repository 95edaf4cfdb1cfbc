/*
 * transport.h - one interface for every way bytes travel: a transport moves
 * one piece, a byte range between a caller's buffer and (segment, offset,
 * length) of a replica, and calls back when it is done.
 *
 *   local  this process's own segment: memcpy (local.c)
 *   shm    a co-located node's segment, mapped after SHM_MAP: memcpy, a
 *          write's fenced by its epoch (shm.c)
 *   tcp    a READ or WRITE request to the node's data address (tcp.c)
 *   rdma   one-sided RDMA READ or WRITE against the node's registered
 *          segment, a write's fenced by its epoch (rdma.c, over the verbs
 *          layer of transport_rdma.h)
 *
 * A transport is a table of functions (mc__transport_t); its caller (the
 * client's transfers) picks one per replica and fills the endpoint
 * (mc__tp_ep_t) it moves over, and never branches on the kind again. The
 * caller keeps what an endpoint names alive until the piece's callback ran:
 * mappings, rpc clients, RDMA connections and descriptors are its state.
 * Each piece is counted, on success, in the transport's counters of
 * mc_store_stats_t. Everything runs on the loop thread.
 */
#ifndef MC_TRANSPORT_H
#define MC_TRANSPORT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/rpc.h"
#include "transport/transport_rdma.h"

/* One piece: at most MC__PROTO_CHUNK bytes. */
typedef struct mc__tp_piece {
    int write;               /* 1: buf to the segment; 0: the segment to buf */
    char *buf;               /* the caller's bytes; NULL with write: zeros */
    const mc__rdma_mr_t *mr; /* buf's RDMA registration (MC__TP_ZERO_COPY), or NULL */
    uint32_t seg;            /* the replica's segment, as the master numbers it */
    uint64_t epoch;          /* the replica's segment epoch as granted (wire/proto.h,
                                "Segment epochs"; tcp carries it, the node checks it;
                                shm and rdma check a write's against the node's
                                fence, shm.h, transport_rdma.h; local, shm and
                                rdma a read's against the segment's mount epoch,
                                after the copy) */
    uint64_t off;            /* where in the segment */
    uint32_t len;
    uint64_t timeout_ms; /* a bound on the wait (asynchronous transports) */
} mc__tp_piece_t;

struct mc__shm_fence;

/* Where pieces go: the member of the transport's kind. */
typedef union mc__tp_ep {
    struct {
        char *base; /* the segment's memory, mapped here */
        uint64_t size;
        struct mc__shm_fence *fence; /* shm: writes go through its slot (shm.h); local: NULL */
        uint32_t slot;
        const uint64_t *epoch;         /* local: the segment's epoch now, or NULL; a write of a
                                          lower one (not 0) is refused with -ESTALE */
        const _Atomic uint64_t *mount; /* the epoch of the segment's last mount (shm:
                                          its fence's; local: our node's), or NULL:
                                          a read of a lower one fails with -ESTALE */
    } mem;                             /* local, shm */
    mc__rpc_client_t *tcp;             /* tcp: the node's client (session made) */
    struct {
        mc__rdma_conn_t *c;          /* a connected connection to the node */
        const mc__rdma_desc_t *desc; /* the segment's descriptor: copied per piece */
    } rdma;
} mc__tp_ep_t;

/* A piece's end: status 0 or -errno. */
typedef void (*mc__tp_cb)(void *arg, int status);

/* mc__transport_t flags. */
#define MC__TP_SYNC 0x1      /* move() is done when it returns; cb is never called */
#define MC__TP_ZERO_COPY 0x2 /* with piece.mr the bytes move without a copy */
#define MC__TP_MEM 0x4       /* the endpoint is memory this process addresses (ep->mem) */

typedef struct mc__transport {
    const char *name;
    unsigned flags;
    size_t ops_stat, bytes_stat; /* offsetof() its counters in mc_store_stats_t */
    /*
     * Starts moving piece p over ep (both read during the call only).
     * Returns 0: cb(arg, status) runs once, later (from the loop), unless
     * the transport is MC__TP_SYNC, whose pieces are done by then; or
     * -errno: nothing moved (-EIO: the range lies outside a memory
     * endpoint; -ESTALE: shm or rdma refused a write's old epoch, or a
     * memory endpoint mounted again since a read's epoch), and cb is never
     * called. An rdma read of a segment mounted again since its epoch
     * gets -ESTALE in cb.
     */
    int (*move)(const mc__tp_ep_t *ep, const mc__tp_piece_t *p, mc__tp_cb cb, void *arg);
} mc__transport_t;

extern const mc__transport_t mc__tp_local, mc__tp_shm, mc__tp_tcp, mc__tp_rdma;

/* The memory move of local and shm (local.c): the same memcpy, counted
 * apart. */
int mc__tp_mem_move(const mc__tp_ep_t *ep, const mc__tp_piece_t *p, mc__tp_cb cb, void *arg);

#endif /* MC_TRANSPORT_H */
