/*
 * rdma_io.c - the RDMA transport's data path (see transport_rdma.h):
 * memory registrations, the fence (its words registered on a node,
 * mc__rdma_fence(), and its protocol on a client's connection), and
 * operations on a connected client connection.
 *
 * Operations queue per connection in FIFO order; c->issue is the first with
 * bytes not yet posted. A slice occupies one slot (its staging buffer, when
 * the caller's buffer is not registered) from post to completion; the slots
 * bound what is in flight. An RC send queue completes in order, so
 * operations complete in the order they were queued.
 *
 * On a connection to a node with a fence (transport_rdma.h, "Fences") a
 * write is admitted before its first slice: when c->issue reaches one that
 * is not, the writes queued so far are decided together by one round, a
 * mark of the lowest epoch among them and those admitted (when that is
 * below what the slot holds) and a READ of the fence's epoch after it;
 * the READ's completion admits each write of that epoch or above and fails
 * the others with -ESTALE. Once writes complete, the slot is set to what
 * those left need (0: none). Marks and READs are few (MC__RDMA_CTRL_MAX)
 * and go beyond the slots.
 *
 * Reads. On a connection to a node whose fence has a mount word, a read
 * of an epoch (mc__rdma_read_epoch()) ends only after a READ of that word
 * posted after its last slice: the responder executes one queue pair's
 * READs in order, so the word is read after the read's bytes were. Above
 * the read's epoch, the segment was mounted again since the read's
 * replica set was handed out and the bytes may be another object's: the
 * read fails with -ESTALE. One READ of the word, in flight at a time,
 * decides every read whose slices were all posted before it: it is
 * posted at the end of a loop turn in which reads were queued and all
 * posted (so one get costs one, behind its bytes), or when a read's bytes
 * all arrived and none is in flight.
 */
#ifdef MC_HAVE_RDMA

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/log.h"
#include "transport/rdma_i.h"

static void pump(mc__rdma_conn_t *c);

/* ---- memory registration ---- */

int mc__rdma_register(mc__rdma_ctx_t *ctx, void *base, size_t size, unsigned flags,
                      mc__rdma_mr_t **out)
{
    if (!base || !size)
        return -EINVAL;
    uint64_t chunk = ctx->mr_chunk;
    uint64_t n = size / chunk + (size % chunk != 0);
    if (n > MC__RDMA_DESC_MAX_CHUNKS)
        return -EINVAL;
    mc__rdma_mr_t *mr = calloc(1, sizeof(*mr));
    if (!mr)
        return -ENOMEM;
    mr->desc = calloc(1, mc__rdma_desc_size((uint32_t)n));
    mr->mrs = calloc(n, sizeof(*mr->mrs));
    if (!mr->desc || !mr->mrs) {
        free(mr->desc);
        free(mr->mrs);
        free(mr);
        return -ENOMEM;
    }
    int access = IBV_ACCESS_LOCAL_WRITE;
    if (flags & MC__RDMA_REMOTE)
        access |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    mr->ctx = ctx;
    mr->base = base;
    mr->size = size;
    mr->desc->size = size;
    mr->desc->chunk = chunk;
    mr->desc->n = (uint32_t)n;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t at = (uint64_t)i * chunk;
        uint64_t len = size - at < chunk ? size - at : chunk;
        mr->mrs[i] = ibv_reg_mr(ctx->pd, mr->base + at, len, access);
        if (!mr->mrs[i]) {
            int rc = err_of(-ENOMEM);
            mc__log(MC__LOG_WARN, "rdma: registering %llu bytes on %s failed: %s",
                    (unsigned long long)len, ctx->devname, strerror(-rc));
            while (i--)
                ibv_dereg_mr(mr->mrs[i]);
            free(mr->desc);
            free(mr->mrs);
            free(mr);
            return rc;
        }
        mr->desc->c[i].addr = (uint64_t)(uintptr_t)(mr->base + at);
        mr->desc->c[i].rkey = mr->mrs[i]->rkey;
    }
    mr->next = ctx->mrs;
    if (ctx->mrs)
        ctx->mrs->prev = mr;
    ctx->mrs = mr;
    ctx->st.registered_bytes += size;
    *out = mr;
    return 0;
}

void mc__rdma_deregister(mc__rdma_mr_t *mr)
{
    if (!mr)
        return;
    mc__rdma_ctx_t *ctx = mr->ctx;
    for (uint32_t i = 0; i < mr->desc->n; i++)
        ibv_dereg_mr(mr->mrs[i]);
    if (mr->prev)
        mr->prev->next = mr->next;
    else
        ctx->mrs = mr->next;
    if (mr->next)
        mr->next->prev = mr->prev;
    ctx->st.registered_bytes -= mr->size;
    free(mr->desc);
    free(mr->mrs);
    free(mr);
}

const mc__rdma_desc_t *mc__rdma_mr_desc(const mc__rdma_mr_t *mr)
{
    return mr->desc;
}

void mc__rdma_finish_op(mc__rdma_ctx_t *ctx, op_t *op, int status)
{
    mc_timer_stop(&op->timer);
    if (status == 0 && op->write) {
        ctx->st.writes++;
        ctx->st.bytes_written += op->len;
    } else if (status == 0) {
        ctx->st.reads++;
        ctx->st.bytes_read += op->len;
    } else {
        ctx->st.failed++;
        if (status == -ETIMEDOUT)
            ctx->st.timeouts++;
    }
    mc__rdma_cb cb = op->cb;
    void *arg = op->arg;
    free(op);
    cb(arg, status);
}

/* ---- completions ---- */

static int wc_err(enum ibv_wc_status s)
{
    switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_WR_FLUSH_ERR:
    case IBV_WC_LOC_QP_OP_ERR:
    case IBV_WC_REM_ABORT_ERR:
    case IBV_WC_FATAL_ERR:
    case IBV_WC_RESP_TIMEOUT_ERR:
        return -ECONNRESET; /* the peer or the QP is gone */
    default:
        return -EIO; /* access, protection, length: this request was bad */
    }
}

static void unlink_op(mc__rdma_conn_t *c, op_t *op)
{
    op_t **pp = &c->head, *prev = NULL;
    while (*pp && *pp != op) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (!*pp)
        return;
    *pp = op->next;
    if (c->tail == op)
        c->tail = prev;
}

/* ---- the fence (see the top of this file) ---- */

int mc__rdma_conn_fenced(const mc__rdma_conn_t *c)
{
    return c->fenced;
}

int mc__rdma_fence(mc__rdma_ctx_t *ctx, _Atomic uint64_t *epoch, _Atomic uint64_t *mount,
                   const mc__rdma_fence_ops_t *ops)
{
    if (!ops) {
        ctx->fence = (mc__rdma_fence_ops_t){0};
        return 0;
    }
    if (ctx->epoch_mr)
        return -EBUSY;
    ctx->epoch_mr = ibv_reg_mr(ctx->pd, (void *)epoch, sizeof(*epoch), IBV_ACCESS_REMOTE_READ);
    if (!ctx->epoch_mr)
        return err_of(-ENOMEM);
    if (mount) {
        ctx->mount_mr = ibv_reg_mr(ctx->pd, (void *)mount, sizeof(*mount), IBV_ACCESS_REMOTE_READ);
        if (!ctx->mount_mr) {
            int rc = err_of(-ENOMEM);
            ibv_dereg_mr(ctx->epoch_mr);
            ctx->epoch_mr = NULL;
            return rc;
        }
    }
    ctx->fence_epoch = epoch;
    ctx->fence_mount = mount;
    ctx->fence = *ops;
    return 0;
}

void mc__rdma_revoke(mc__rdma_conn_t *c)
{
    if (c->passive)
        mc__rdma_conn_fail(c, -ECONNABORTED);
}

/* Posts a mark of v to our slot (read 0) or a READ of the fence's epoch
 * (read 1). Returns 0, or -1 when the connection failed. */
static int post_ctrl(mc__rdma_conn_t *c, int read, uint64_t v)
{
    uint64_t *w = &c->ctrl[MC__RDMA_CTRL_EPOCH];
    if (!read) {
        /* A ring of sources: with at most MC__RDMA_CTRL_MAX posted, the one
         * reused here completed. */
        w = &c->ctrl[MC__RDMA_CTRL_RING +
                     c->ctrl_next++ % (MC__RDMA_CTRL_WORDS - MC__RDMA_CTRL_RING)];
        *w = v;
    }
    struct ibv_sge sge = {(uintptr_t)w, sizeof(*w), c->stage_mr->lkey};
    struct ibv_send_wr wr = {
        .wr_id = read ? MC__RDMA_WR_FENCE : MC__RDMA_WR_MARK,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE,
        .send_flags = IBV_SEND_SIGNALED,
        .wr.rdma = {.remote_addr = read ? c->fence_addr : c->slot_addr,
                    .rkey = read ? c->fence_rkey : c->slot_rkey},
    };
    struct ibv_send_wr *bad;
    int rc = ibv_post_send(c->qp, &wr, &bad);
    if (rc) {
        mc__log(MC__LOG_WARN, "rdma: posting to %s's fence failed: %s", c->peer, strerror(rc));
        mc__rdma_conn_fail(c, -EIO);
        return -1;
    }
    c->ctrl_inflight++;
    c->ctx->st.fence_wrs++;
    return 0;
}

/* What our slot must hold: the lowest epoch of the writes admitted and not
 * done, and of every write queued up to upto (or NULL); 0 if none. */
static uint64_t mark_wanted(const mc__rdma_conn_t *c, const op_t *upto)
{
    uint64_t low = 0;
    int covered = upto != NULL;
    for (const op_t *op = c->head; op; op = op->next) {
        if (op->write && (op->admitted || covered) && (!low || op->epoch < low))
            low = op->epoch;
        if (op == upto)
            covered = 0;
    }
    return low;
}

/* Moves the fence along for c->issue: starts a round for it when it must
 * pass the fence and none is in flight, else, once writes ended
 * (c->mark_stale), brings the slot to what the admitted writes need.
 * Whether c->issue may post. */
static int fence_step(mc__rdma_conn_t *c)
{
    op_t *op = c->issue;
    int waits = op && op->write && !op->admitted;
    if (c->reading)
        return !waits;
    if (waits && c->ctrl_inflight + 2 <= MC__RDMA_CTRL_MAX) {
        uint64_t want = mark_wanted(c, c->tail);
        if (want != c->mark && post_ctrl(c, 0, want) < 0)
            return 0;
        c->mark = want;
        if (post_ctrl(c, 1, 0) < 0)
            return 0;
        c->reading = 1;
        c->read_upto = c->tail;
    } else if (!waits && c->mark_stale && c->ctrl_inflight < MC__RDMA_CTRL_MAX) {
        uint64_t want = mark_wanted(c, NULL);
        if (want == c->mark || post_ctrl(c, 0, want) == 0) {
            c->mark = want;
            c->mark_stale = 0;
        }
    }
    return !waits;
}

/* The READ of the fence's epoch completed: it decides the writes queued up
 * to c->read_upto. */
static void fence_read(mc__rdma_conn_t *c)
{
    mc__rdma_ctx_t *ctx = c->ctx;
    uint64_t fence = *(volatile uint64_t *)&c->ctrl[MC__RDMA_CTRL_EPOCH];
    op_t *stop = c->read_upto, *refused = NULL, **rtail = &refused;
    c->reading = 0;
    c->read_upto = NULL;
    for (op_t *op = c->issue, *next; op; op = next) {
        next = op->next;
        if (op->write && !op->admitted) {
            if (op->epoch && op->epoch >= fence) {
                op->admitted = 1;
            } else {
                if (c->issue == op)
                    c->issue = next;
                unlink_op(c, op);
                op->next = NULL;
                *rtail = op;
                rtail = &op->next;
            }
        }
        if (op == stop)
            break;
    }
    if (refused)
        c->mark_stale = 1;
    while (refused) {
        op_t *op = refused;
        refused = op->next;
        ctx->st.writes_fenced++;
        mc__log(MC__LOG_DEBUG, "rdma: a write of epoch %llu to %s refused: the fence is at %llu",
                (unsigned long long)op->epoch, c->peer, (unsigned long long)fence);
        mc__rdma_finish_op(ctx, op, -ESTALE);
    }
}

/* ---- reads' check of the mount word (see the top of this file) ---- */

/* Posts a READ of the node's mount word, which decides every checked read
 * whose slices were all posted. */
static void check_post(mc__rdma_conn_t *c)
{
    uint64_t *w = &c->ctrl[MC__RDMA_CTRL_MOUNT];
    struct ibv_sge sge = {(uintptr_t)w, sizeof(*w), c->stage_mr->lkey};
    struct ibv_send_wr wr = {
        .wr_id = MC__RDMA_WR_MOUNT,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_READ,
        .send_flags = IBV_SEND_SIGNALED,
        .wr.rdma = {.remote_addr = c->mount_addr, .rkey = c->mount_rkey},
    };
    struct ibv_send_wr *bad;
    int rc = ibv_post_send(c->qp, &wr, &bad);
    if (rc) {
        mc__log(MC__LOG_WARN, "rdma: posting to %s's mount word failed: %s", c->peer, strerror(rc));
        mc__rdma_conn_fail(c, -EIO);
        return;
    }
    c->checking = 1;
    c->checks_posted++;
    c->ctx->st.fence_wrs++;
}

static void on_check_timer(mc_timer_t *t)
{
    mc__rdma_conn_t *c = t->data;
    c->check_queued = 0;
    if (c->state == C_CONNECTED && !c->checking && c->check_waiting)
        check_post(c);
}

/* After pump(): posts a READ of the mount word when a read's bytes all
 * arrived and none is in flight, or, when every queued read was posted,
 * at the end of this loop turn (the reads queued with it share it). */
static void check_step(mc__rdma_conn_t *c)
{
    if (c->state != C_CONNECTED || !c->check_reads || c->checking || !c->check_waiting)
        return;
    if (c->check_ready) {
        check_post(c);
    } else if (!c->issue && !c->check_queued) {
        if (mc_timer_start(c->ctx->loop, &c->check_timer, 0, 0, on_check_timer) == 0)
            c->check_queued = 1;
        else
            check_post(c); /* the ring is full: now, for one read */
    }
}

/* The READ of the mount word completed: it decides the checked reads
 * whose slices were all posted before it (their bytes arrived: an RC
 * send queue completes in order). */
static void check_done(mc__rdma_conn_t *c)
{
    mc__rdma_ctx_t *ctx = c->ctx;
    uint64_t mount = *(volatile uint64_t *)&c->ctrl[MC__RDMA_CTRL_MOUNT];
    op_t *ended = NULL, **etail = &ended;
    c->checking = 0;
    for (op_t *op = c->head, *next; op; op = next) {
        next = op->next;
        if (!op->check || op->issued != op->len || op->seq >= c->checks_posted)
            continue;
        if (op->done != op->len) {
            op->seq = c->checks_posted; /* not seen: the next READ decides it */
            continue;
        }
        c->check_waiting--;
        c->check_ready--;
        unlink_op(c, op);
        op->next = NULL;
        *etail = op;
        etail = &op->next;
    }
    while (ended) {
        op_t *op = ended;
        ended = op->next;
        int stale = op->epoch < mount;
        if (stale) {
            ctx->st.reads_fenced++;
            mc__log(MC__LOG_DEBUG,
                    "rdma: a read of epoch %llu from %s discarded: the segment was mounted "
                    "again at %llu",
                    (unsigned long long)op->epoch, c->peer, (unsigned long long)mount);
        }
        mc__rdma_finish_op(ctx, op, stale ? -ESTALE : 0);
    }
}

static void on_wc(mc__rdma_conn_t *c, const struct ibv_wc *wc)
{
    mc__rdma_ctx_t *ctx = c->ctx;
    ctx->st.completions++;
    if (wc->status == IBV_WC_SUCCESS && wc->wr_id == MC__RDMA_WR_MOUNT) {
        check_done(c);
        return;
    }
    if (wc->status == IBV_WC_SUCCESS &&
        (wc->wr_id == MC__RDMA_WR_MARK || wc->wr_id == MC__RDMA_WR_FENCE)) {
        c->ctrl_inflight--;
        if (wc->wr_id == MC__RDMA_WR_FENCE)
            fence_read(c);
        return;
    }
    if (wc->status != IBV_WC_SUCCESS || wc->wr_id >= c->nslots) {
        mc__log(MC__LOG_WARN, "rdma: work request to %s failed: %s (vendor error %u)", c->peer,
                ibv_wc_status_str(wc->status), wc->vendor_err);
        mc__rdma_conn_fail(c, wc->status != IBV_WC_SUCCESS ? wc_err(wc->status) : -EIO);
        return;
    }
    uint32_t si = (uint32_t)wc->wr_id;
    slot_t *s = &c->slots[si];
    op_t *op = s->op;
    if (!op->write && !op->mr)
        memcpy(op->buf + s->off, c->stage + (size_t)si * ctx->o.slice_size, s->len);
    op->done += s->len;
    s->op = NULL;
    c->free_slots[c->nfree++] = si;
    c->inflight--;
    if (op->done == op->len && op->check) {
        c->check_ready++; /* its bytes count once a READ of the mount word says */
    } else if (op->done == op->len) {
        c->mark_stale |= op->write && c->fenced;
        unlink_op(c, op);
        mc__rdma_finish_op(ctx, op, 0);
    }
}

/*
 * The completion channel is readable: acknowledge its events, re-arm the CQ,
 * then drain it. Re-arming before the drain means a completion that lands
 * during the drain raises a new event instead of waiting unseen.
 */
void mc__rdma_on_cq(mc_poll_t *p, int revents)
{
    mc__rdma_conn_t *c = p->data;
    mc__rdma_ctx_t *ctx = c->ctx;
    if (revents < 0) {
        mc__rdma_conn_fail(c, -EIO);
        return;
    }
    ctx->st.cq_wakeups++;
    struct ibv_cq *ecq;
    void *ectx;
    unsigned nev = 0;
    while (ibv_get_cq_event(c->ch, &ecq, &ectx) == 0)
        nev++;
    if (nev)
        ibv_ack_cq_events(c->cq, nev);
    if (ibv_req_notify_cq(c->cq, 0)) {
        mc__rdma_conn_fail(c, -EIO);
        return;
    }
    struct ibv_wc wc[32];
    for (;;) {
        int n = ibv_poll_cq(c->cq, 32, wc);
        if (n < 0) {
            mc__rdma_conn_fail(c, -EIO);
            return;
        }
        for (int i = 0; i < n; i++) {
            on_wc(c, &wc[i]);
            if (c->state != C_CONNECTED) /* failed, or closed by a callback */
                return;
        }
        if (n < 32)
            break;
    }
    pump(c);
}

/* ---- operations ---- */

/* Posts slices of the queued operations while slots are free. */
static void pump(mc__rdma_conn_t *c)
{
    mc__rdma_ctx_t *ctx = c->ctx;
    while (c->state == C_CONNECTED && (!c->fenced || fence_step(c)) && c->issue && c->nfree) {
        op_t *op = c->issue;
        const mc__rdma_desc_t *rd = op->rd;
        uint64_t off = op->issued;
        uint64_t n = op->len - off;
        if (n > ctx->o.slice_size)
            n = ctx->o.slice_size;
        /* Stay inside one remote chunk... */
        uint64_t ra = op->roff + off;
        uint64_t ci = ra / rd->chunk, cw = ra % rd->chunk;
        if (n > rd->chunk - cw)
            n = rd->chunk - cw;
        uint32_t si = c->free_slots[--c->nfree];
        struct ibv_sge sge;
        if (op->mr) {
            /* ... and inside one local memory region. */
            uint64_t la = (uint64_t)(op->buf + off - op->mr->base);
            uint64_t lc = op->mr->desc->chunk;
            if (n > lc - la % lc)
                n = lc - la % lc;
            sge = (struct ibv_sge){(uintptr_t)(op->buf + off), (uint32_t)n,
                                   op->mr->mrs[la / lc]->lkey};
        } else {
            char *st = c->stage + (size_t)si * ctx->o.slice_size;
            if (op->write && op->buf)
                memcpy(st, op->buf + off, n);
            else if (op->write)
                memset(st, 0, n);
            sge = (struct ibv_sge){(uintptr_t)st, (uint32_t)n, c->stage_mr->lkey};
        }
        struct ibv_send_wr wr = {
            .wr_id = si,
            .sg_list = &sge,
            .num_sge = 1,
            .opcode = op->write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
            .send_flags = IBV_SEND_SIGNALED,
            .wr.rdma = {.remote_addr = rd->c[ci].addr + cw, .rkey = rd->c[ci].rkey},
        };
        struct ibv_send_wr *bad;
        int rc = ibv_post_send(c->qp, &wr, &bad);
        if (rc) {
            c->free_slots[c->nfree++] = si;
            mc__log(MC__LOG_WARN, "rdma: posting to %s failed: %s", c->peer, strerror(rc));
            mc__rdma_conn_fail(c, -EIO);
            return;
        }
        c->slots[si] = (slot_t){.op = op, .off = off, .len = (uint32_t)n};
        op->issued += n;
        c->inflight++;
        ctx->st.slices++;
        if (c->inflight > ctx->st.inflight_peak)
            ctx->st.inflight_peak = c->inflight;
        if (op->issued == op->len) {
            c->issue = op->next;
            if (op->check) {
                op->seq = c->checks_posted;
                c->check_waiting++;
            }
        }
    }
    check_step(c);
}

static void on_op_timeout(mc_timer_t *t)
{
    op_t *op = t->data;
    mc__rdma_conn_t *c = op->c;
    mc__log(MC__LOG_WARN, "rdma: %s of %llu bytes at %s timed out (%llu done)",
            op->write ? "write" : "read", (unsigned long long)op->len, c->peer,
            (unsigned long long)op->done);
    mc__rdma_conn_fail(c, -ETIMEDOUT);
}

/* Queues an operation; a read with check is decided by the mount word. */
static int submit(mc__rdma_conn_t *c, int write, int check, uint64_t epoch, char *buf,
                  const mc__rdma_mr_t *mr, const mc__rdma_desc_t *rd, uint64_t roff, size_t len,
                  uint64_t timeout_ms, mc__rdma_cb cb, void *arg)
{
    if (!len || !rd || !cb || !rd->chunk || (!buf && (!write || mr)))
        return -EINVAL;
    if (roff > rd->size || len > rd->size - roff)
        return -EINVAL;
    if (mr && (mr->ctx != c->ctx || buf < mr->base || (uint64_t)(buf - mr->base) > mr->size ||
               len > mr->size - (uint64_t)(buf - mr->base)))
        return -EINVAL;
    if (c->closed)
        return -EBADF;
    if (c->state == C_DEAD)
        return c->err;
    if (c->state != C_CONNECTED)
        return -ENOTCONN;
    if (write && c->fenced && !epoch) {
        c->ctx->st.writes_fenced++;
        return -ESTALE; /* a write of no epoch: as the node's WRITE refuses it */
    }
    op_t *op = calloc(1, sizeof(*op));
    if (!op)
        return -ENOMEM;
    *op = (op_t){.c = c,
                 .write = write,
                 .buf = buf,
                 .mr = mr,
                 .rd = rd,
                 .roff = roff,
                 .len = len,
                 .cb = cb,
                 .arg = arg,
                 .epoch = epoch,
                 .admitted = !write || !c->fenced,
                 .check = check && !write && c->check_reads};
    op->timer.data = op;
    int rc = mc_timer_start(c->ctx->loop, &op->timer,
                            timeout_ms ? timeout_ms : c->ctx->o.timeout_ms, 0, on_op_timeout);
    if (rc < 0) {
        free(op);
        return rc;
    }
    if (c->tail)
        c->tail->next = op;
    else
        c->head = op;
    c->tail = op;
    if (!c->issue)
        c->issue = op;
    /* A failure to post fails the connection; op's callback then runs from
     * the loop, not here. */
    pump(c);
    return 0;
}

int mc__rdma_read(mc__rdma_conn_t *c, void *buf, const mc__rdma_mr_t *mr, const mc__rdma_desc_t *rd,
                  uint64_t roff, size_t len, uint64_t timeout_ms, mc__rdma_cb cb, void *arg)
{
    if (!buf)
        return -EINVAL;
    return submit(c, 0, 0, 0, buf, mr, rd, roff, len, timeout_ms, cb, arg);
}

int mc__rdma_read_epoch(mc__rdma_conn_t *c, uint64_t epoch, void *buf, const mc__rdma_mr_t *mr,
                        const mc__rdma_desc_t *rd, uint64_t roff, size_t len, uint64_t timeout_ms,
                        mc__rdma_cb cb, void *arg)
{
    if (!buf)
        return -EINVAL;
    return submit(c, 0, 1, epoch, buf, mr, rd, roff, len, timeout_ms, cb, arg);
}

int mc__rdma_write(mc__rdma_conn_t *c, const void *buf, const mc__rdma_mr_t *mr,
                   const mc__rdma_desc_t *rd, uint64_t roff, size_t len, uint64_t timeout_ms,
                   mc__rdma_cb cb, void *arg)
{
    return mc__rdma_write_epoch(c, 0, buf, mr, rd, roff, len, timeout_ms, cb, arg);
}

int mc__rdma_write_epoch(mc__rdma_conn_t *c, uint64_t epoch, const void *buf,
                         const mc__rdma_mr_t *mr, const mc__rdma_desc_t *rd, uint64_t roff,
                         size_t len, uint64_t timeout_ms, mc__rdma_cb cb, void *arg)
{
    /* The cast is safe: a write only reads buf. */
    return submit(c, 1, 0, epoch, (char *)buf, mr, rd, roff, len, timeout_ms, cb, arg);
}

#endif /* MC_HAVE_RDMA */
