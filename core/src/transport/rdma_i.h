/*
 * rdma_i.h - what the files of the RDMA transport share (transport_rdma.h
 * is their interface): little-endian helpers for the codecs, and with
 * MC_HAVE_RDMA the context, memory regions, connections and operations.
 *
 *   rdma_desc.c       the descriptor and record codecs (always built)
 *   transport_rdma.c  the context, connections and their rdma_cm events
 *   rdma_io.c         registrations, and operations: slices, completions
 */
#ifndef MC_RDMA_I_H
#define MC_RDMA_I_H

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>

#include "transport/transport_rdma.h"

static inline void put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint64_t get_le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#ifdef MC_HAVE_RDMA

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

enum cstate { C_RESOLVING, C_CONNECTING, C_ACCEPTING, C_CONNECTED, C_DEAD };

typedef struct op {
    struct op *next;
    mc__rdma_conn_t *c;
    int write;
    char *buf; /* NULL: a write of zeros */
    const mc__rdma_mr_t *mr;
    const mc__rdma_desc_t *rd;
    uint64_t roff, len;
    uint64_t issued; /* bytes posted */
    uint64_t done;   /* bytes completed */
    mc_timer_t timer;
    mc__rdma_cb cb;
    void *arg;
    uint64_t epoch; /* a write's, on a fenced connection; a checked read's (rdma_io.c) */
    int admitted;   /* it passed the fence (or needs not): its bytes may go */
    int check;      /* a read that ends only after a READ of the mount word */
    uint64_t seq;   /* a checked read's: c->checks_posted once its last slice was */
} op_t;

typedef struct slot {
    op_t *op;
    uint64_t off; /* within the op */
    uint32_t len;
} slot_t;

struct mc__rdma_mr {
    mc__rdma_ctx_t *ctx;
    char *base;
    size_t size;
    struct ibv_mr **mrs; /* desc->n of them */
    struct mc__rdma_mr *prev, *next;
    mc__rdma_desc_t *desc;
};

struct mc__rdma_conn {
    mc__rdma_ctx_t *ctx;
    struct mc__rdma_conn *prev, *next; /* ctx->conns */
    enum cstate state;
    int passive;     /* accepted by our listener: the context owns it */
    int err;         /* why it is DEAD */
    int closed;      /* its owner let go: free it once reaped */
    int reap_queued; /* reap_timer started */
    struct rdma_cm_id *id;
    struct ibv_comp_channel *ch; /* client only */
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_mr *stage_mr; /* client only: slots * slice_size bytes */
    char *stage;
    slot_t *slots;
    uint32_t *free_slots; /* a stack of free slot numbers */
    uint32_t nfree, nslots, inflight;
    uint64_t deadline_ms; /* connect/accept */
    mc_poll_t cq_poll;
    mc_timer_t setup_timer; /* connect or accept deadline */
    mc_timer_t reap_timer;
    mc__rdma_connect_cb ccb; /* NULL once called */
    void *carg;
    op_t *head, *tail; /* queued operations */
    op_t *issue;       /* the first with bytes not yet posted */
    char peer[64];
    /* Client of a node with a fence (rdma_io.c): where its epoch and our
     * slot are, what our slot holds as posted (0, or the lowest epoch of
     * the writes admitted and not done, and of those a READ in flight
     * decides), that READ (it decides the writes queued up to read_upto),
     * and the marks and READs posted and not completed. */
    int fenced, reading;
    int mark_stale; /* writes ended since the slot was last set: it may rise */
    uint64_t fence_addr, slot_addr;
    uint32_t fence_rkey, slot_rkey;
    uint64_t mark;
    op_t *read_upto;
    uint32_t ctrl_inflight, ctrl_next;
    uint64_t *ctrl; /* in the staging region: MC__RDMA_CTRL_* words */
    /* Client of a node whose fence has a mount word (rdma_io.c, "Reads"):
     * where it is, whether a READ of it is in flight, how many were
     * posted, and the checked reads whose slices were all posted and
     * that wait for one (ready: their bytes all arrived too). */
    int check_reads, checking, check_queued;
    uint64_t mount_addr;
    uint32_t mount_rkey;
    uint64_t checks_posted;
    uint32_t check_waiting, check_ready;
    mc_timer_t check_timer; /* a READ of the mount word after this turn's reads */
    /* Node: the slot of our fence this connection writes its marks to. */
    _Atomic uint64_t *slot;
    struct ibv_mr *slot_mr;
};

struct mc__rdma_ctx {
    mc_loop_t *loop;
    mc__rdma_opts_t o; /* device and bind are not kept */
    struct ibv_context *verbs;
    struct ibv_pd *pd;
    struct ibv_device_attr attr;
    uint64_t mr_chunk; /* bytes per memory region, page aligned */
    struct rdma_event_channel *cm;
    mc_poll_t cm_poll;
    struct rdma_cm_id *listen_id;
    mc__rdma_conn_t *conns;
    mc__rdma_mr_t *mrs;
    mc__rdma_stats_t st;
    char devname[64];
    /* A node's fence (mc__rdma_fence()): its epoch and mount words,
     * registered for peers' READs, and who gives connections their slots. */
    _Atomic uint64_t *fence_epoch, *fence_mount;
    struct ibv_mr *epoch_mr, *mount_mr;
    mc__rdma_fence_ops_t fence;
};

/* The work requests of the fence (rdma_io.c): a mark or a READ of the
 * epoch, at most MC__RDMA_CTRL_MAX posted at once, and a READ of the
 * mount word, one at a time; all beyond the slots. */
#define MC__RDMA_WR_MARK ((uint64_t)-1)
#define MC__RDMA_WR_FENCE ((uint64_t)-2)
#define MC__RDMA_WR_MOUNT ((uint64_t)-3)
#define MC__RDMA_CTRL_MAX 3
#define MC__RDMA_CTRL_WRS (MC__RDMA_CTRL_MAX + 1) /* and the mount word's READ */
/* The words of c->ctrl: the targets of the READs of the fence's epoch and
 * of its mount word, then a ring of marks' sources. */
#define MC__RDMA_CTRL_EPOCH 0
#define MC__RDMA_CTRL_MOUNT 1
#define MC__RDMA_CTRL_RING 2 /* the ring's first word */
#define MC__RDMA_CTRL_WORDS 9

/* -errno of a failed verbs/rdma_cm call that set errno, never 0. */
static inline int err_of(int fallback)
{
    return errno > 0 ? -errno : fallback;
}

/* Moves c to DEAD with err (-errno), tearing it down; idempotent
 * (transport_rdma.c). */
void mc__rdma_conn_fail(mc__rdma_conn_t *c, int err);

/* Stops op's timer, counts it and runs its callback with status; frees op
 * (rdma_io.c). */
void mc__rdma_finish_op(mc__rdma_ctx_t *ctx, op_t *op, int status);

/* A client connection's completion channel is readable (rdma_io.c). */
void mc__rdma_on_cq(mc_poll_t *p, int revents);

#endif /* MC_HAVE_RDMA */

#endif /* MC_RDMA_I_H */
