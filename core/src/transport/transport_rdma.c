/*
 * transport_rdma.c - the RDMA transport (see transport_rdma.h): the context,
 * and connections with their rdma_cm events. Registrations, the fence's
 * (mc__rdma_fence()) too, and operations are in rdma_io.c, the codecs in
 * rdma_desc.c.
 *
 * A connection is a small state machine driven by rdma_cm events, all of
 * them read from the context's one event channel:
 *
 *   client:  RESOLVING --ADDR_RESOLVED--> (resolve route) --ROUTE_RESOLVED-->
 *            CONNECTING (QP made, rdma_connect) --ESTABLISHED--> CONNECTED
 *   node:    CONNECT_REQUEST --> ACCEPTING (QP made, rdma_accept)
 *            --ESTABLISHED--> CONNECTED
 *   any state --error event, failed completion, timeout, close--> DEAD
 *
 * Entering DEAD tears every verbs resource down at once (the QP first, so the
 * HCA is done with the buffers), then a zero-length timer "reaps" the
 * connection on the next loop turn: it runs the callbacks still owed (the
 * connect's, the queued operations') with the error and frees the
 * connection once its owner has let go. Callbacks therefore never run
 * inside the call that caused them, and a callback may close its own
 * connection.
 */
#ifdef MC_HAVE_RDMA

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/log.h"
#include "transport/rdma_i.h"

/* Connection parameters in rdma_cm private data, both ways: magic u32,
 * version u16, flags u16, slice u32, inflight u32; then, from a node with
 * a fence (HELLO_FENCED), its epoch's address u64 and our slot's u64, and
 * their rkeys u32 each, and when it has a mount word (HELLO_MOUNT), its
 * address u64 and rkey u32 (zeros otherwise). A connect request carries
 * at most 56 bytes of private data. */
#define HELLO_MAGIC 0x4f4c484dU /* "MHLO" little endian */
#define HELLO_VERSION 3
#define HELLO_LEN 52
#define HELLO_FENCED 0x1
#define HELLO_MOUNT 0x2

_Static_assert(HELLO_LEN <= 56, "the parameters fit a connect request's private data");

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    return 0;
}

static const char *addr_str(const struct sockaddr *sa, char *buf, size_t n)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
        port = ntohs(in->sin_port);
        snprintf(buf, n, "%s:%d", ip, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
        port = ntohs(in6->sin6_port);
        snprintf(buf, n, "[%s]:%d", ip, port);
    } else {
        snprintf(buf, n, "(family %d)", sa->sa_family);
    }
    return buf;
}

/* Our parameters; a node's connection c given a slot adds the fence. */
static void hello_pack(const mc__rdma_ctx_t *ctx, const mc__rdma_conn_t *c, unsigned char *p)
{
    memset(p, 0, HELLO_LEN);
    put_le(p, HELLO_MAGIC, 4);
    put_le(p + 4, HELLO_VERSION, 2);
    put_le(p + 8, ctx->o.slice_size, 4);
    put_le(p + 12, ctx->o.max_inflight, 4);
    if (c && c->slot_mr) {
        put_le(p + 6, HELLO_FENCED | (ctx->mount_mr ? HELLO_MOUNT : 0), 2);
        put_le(p + 16, (uint64_t)(uintptr_t)ctx->fence_epoch, 8);
        put_le(p + 24, (uint64_t)(uintptr_t)c->slot, 8);
        put_le(p + 32, ctx->epoch_mr->rkey, 4);
        put_le(p + 36, c->slot_mr->rkey, 4);
        if (ctx->mount_mr) {
            put_le(p + 40, (uint64_t)(uintptr_t)ctx->fence_mount, 8);
            put_le(p + 48, ctx->mount_mr->rkey, 4);
        }
    }
}

static int hello_ok(const void *pd, size_t len)
{
    return pd && len >= HELLO_LEN && get_le(pd, 4) == HELLO_MAGIC &&
           get_le((const unsigned char *)pd + 4, 2) == HELLO_VERSION;
}

/* ---- context ---- */

int mc__rdma_available(void)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list)
        return err_of(-ENOSYS);
    ibv_free_device_list(list);
    return n;
}

/* Picks the verbs context ctx will use (owned by librdmacm, never closed). */
static int pick_device(mc__rdma_ctx_t *ctx, const mc__rdma_opts_t *o)
{
    if (!o->device && o->bind) {
        struct rdma_cm_id *id;
        if (rdma_create_id(ctx->cm, &id, NULL, RDMA_PS_TCP))
            return err_of(-ENOMEM);
        int rc = rdma_bind_addr(id, (struct sockaddr *)o->bind) ? err_of(-EADDRNOTAVAIL) : 0;
        if (rc == 0 && !id->verbs)
            rc = -ENODEV; /* a wildcard, or an address on no RDMA device */
        if (rc == 0)
            ctx->verbs = id->verbs;
        rdma_destroy_id(id);
        return rc;
    }
    int n = 0;
    struct ibv_context **list = rdma_get_devices(&n);
    if (!list)
        return err_of(-ENODEV);
    for (int i = 0; i < n && !ctx->verbs; i++)
        if (!o->device || strcmp(ibv_get_device_name(list[i]->device), o->device) == 0)
            ctx->verbs = list[i];
    rdma_free_devices(list);
    return ctx->verbs ? 0 : -ENODEV;
}

static void on_cm(mc_poll_t *p, int revents);

int mc__rdma_ctx_new(mc_loop_t *l, const mc__rdma_opts_t *opts, mc__rdma_ctx_t **out)
{
    mc__rdma_opts_t o = opts ? *opts : (mc__rdma_opts_t){0};
    if (!o.timeout_ms)
        o.timeout_ms = MC__RDMA_TIMEOUT_MS;
    if (!o.slice_size)
        o.slice_size = MC__RDMA_SLICE_SIZE;
    if (!o.max_inflight)
        o.max_inflight = MC__RDMA_MAX_INFLIGHT;

    mc__rdma_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return -ENOMEM;
    ctx->loop = l;
    int rc;
    ctx->cm = rdma_create_event_channel();
    if (!ctx->cm) {
        rc = err_of(-ENODEV);
        goto fail;
    }
    if ((rc = set_nonblock(ctx->cm->fd)) < 0)
        goto fail;
    if ((rc = pick_device(ctx, &o)) < 0)
        goto fail;
    if (ibv_query_device(ctx->verbs, &ctx->attr)) {
        rc = err_of(-EIO);
        goto fail;
    }
    if (o.max_inflight > (uint32_t)ctx->attr.max_qp_wr - 1)
        o.max_inflight = (uint32_t)ctx->attr.max_qp_wr - 1;
    ctx->pd = ibv_alloc_pd(ctx->verbs);
    if (!ctx->pd) {
        rc = err_of(-ENOMEM);
        goto fail;
    }
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t chunk = ctx->attr.max_mr_size;
    if (o.max_mr_chunk && o.max_mr_chunk < chunk)
        chunk = o.max_mr_chunk;
    chunk -= chunk % page;
    ctx->mr_chunk = chunk ? chunk : page;
    snprintf(ctx->devname, sizeof(ctx->devname), "%s", ibv_get_device_name(ctx->verbs->device));
    o.device = NULL;
    o.bind = NULL;
    ctx->o = o;
    ctx->cm_poll.data = ctx;
    if ((rc = mc_poll_start(l, &ctx->cm_poll, ctx->cm->fd, POLLIN, on_cm)) < 0)
        goto fail;
    mc__log(MC__LOG_INFO,
            "rdma: device %s (max_mr_size %llu, max_qp_wr %d, max_qp_rd_atom %d), "
            "slices of %u bytes, %u in flight",
            ctx->devname, (unsigned long long)ctx->attr.max_mr_size, ctx->attr.max_qp_wr,
            ctx->attr.max_qp_rd_atom, o.slice_size, o.max_inflight);
    *out = ctx;
    return 0;
fail:
    if (ctx->pd)
        ibv_dealloc_pd(ctx->pd);
    if (ctx->cm)
        rdma_destroy_event_channel(ctx->cm);
    free(ctx);
    return rc;
}

const char *mc__rdma_device_name(const mc__rdma_ctx_t *ctx)
{
    return ctx->devname;
}

void mc__rdma_stats(const mc__rdma_ctx_t *ctx, mc__rdma_stats_t *st)
{
    *st = ctx->st;
}

/* ---- connections: life cycle ---- */

static mc__rdma_conn_t *conn_new(mc__rdma_ctx_t *ctx, int passive)
{
    mc__rdma_conn_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->ctx = ctx;
    c->passive = passive;
    if (!passive) {
        c->nslots = ctx->o.max_inflight;
        c->slots = calloc(c->nslots, sizeof(*c->slots));
        c->free_slots = calloc(c->nslots, sizeof(*c->free_slots));
        if (!c->slots || !c->free_slots) {
            free(c->slots);
            free(c->free_slots);
            free(c);
            return NULL;
        }
        for (uint32_t i = 0; i < c->nslots; i++)
            c->free_slots[c->nfree++] = c->nslots - 1 - i;
    }
    c->cq_poll.data = c;
    c->setup_timer.data = c;
    c->reap_timer.data = c;
    c->check_timer.data = c;
    c->next = ctx->conns;
    if (ctx->conns)
        ctx->conns->prev = c;
    ctx->conns = c;
    return c;
}

static void conn_free(mc__rdma_conn_t *c)
{
    mc__rdma_ctx_t *ctx = c->ctx;
    if (c->prev)
        c->prev->next = c->next;
    else
        ctx->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c->slots);
    free(c->free_slots);
    free(c);
}

/*
 * Releases every verbs and rdma_cm resource of c. The QP goes first: once
 * it is destroyed the HCA no longer reads or writes any buffer of ours, so
 * the operations may be failed and their buffers handed back. rdma_cm sends
 * the peer a disconnect when the id goes.
 */
static void teardown(mc__rdma_conn_t *c)
{
    mc__rdma_ctx_t *ctx = c->ctx;
    if (c->qp) {
        rdma_destroy_qp(c->id);
        c->qp = NULL;
    }
    /* Nothing of the peer's lands any more: its fence slot may go. */
    if (c->slot_mr) {
        ibv_dereg_mr(c->slot_mr);
        c->slot_mr = NULL;
    }
    if (c->slot) {
        c->slot = NULL;
        if (ctx->fence.leave)
            ctx->fence.leave(ctx->fence.arg, c);
    }
    mc_poll_stop(&c->cq_poll);
    if (c->cq) {
        ibv_destroy_cq(c->cq);
        c->cq = NULL;
    }
    if (c->ch) {
        ibv_destroy_comp_channel(c->ch);
        c->ch = NULL;
    }
    if (c->stage_mr) {
        ibv_dereg_mr(c->stage_mr);
        c->stage_mr = NULL;
    }
    free(c->stage);
    c->stage = NULL;
    if (c->id) {
        rdma_destroy_id(c->id);
        c->id = NULL;
    }
    mc_timer_stop(&c->setup_timer);
    mc_timer_stop(&c->check_timer);
    c->check_queued = 0;
    for (op_t *op = c->head; op; op = op->next)
        mc_timer_stop(&op->timer);
    c->issue = NULL;
    c->inflight = 0;
}

/* Runs the callbacks a DEAD or closed connection still owes, then frees it
 * if its owner let go. */
static void reap(mc__rdma_conn_t *c)
{
    mc__rdma_ctx_t *ctx = c->ctx;
    int err = c->err ? c->err : -ECANCELED;
    c->reap_queued = 0;
    if (c->ccb) {
        mc__rdma_connect_cb cb = c->ccb;
        c->ccb = NULL;
        cb(c, err, c->carg);
    }
    while (c->head) {
        op_t *op = c->head;
        c->head = op->next;
        if (!c->head)
            c->tail = NULL;
        mc__rdma_finish_op(ctx, op, err);
    }
    if (c->closed && !c->reap_queued)
        conn_free(c);
}

static void on_reap(mc_timer_t *t)
{
    reap(t->data);
}

static void queue_reap(mc__rdma_conn_t *c)
{
    if (c->reap_queued)
        return;
    int rc = mc_timer_start(c->ctx->loop, &c->reap_timer, 0, 0, on_reap);
    if (rc < 0) {
        /* The ring is full or memory short: callbacks stay owed until the
         * next teardown or mc__rdma_ctx_free(). */
        mc__log(MC__LOG_ERROR, "rdma: cannot schedule the cleanup of %s: %s", c->peer,
                strerror(-rc));
        return;
    }
    c->reap_queued = 1;
}

/* Moves c to DEAD with err (-errno), tearing it down; idempotent. */
void mc__rdma_conn_fail(mc__rdma_conn_t *c, int err)
{
    mc__rdma_ctx_t *ctx = c->ctx;
    if (c->state == C_DEAD)
        return;
    int quiet = err == -ECANCELED || (c->passive && err == -ECONNRESET);
    if (!quiet) {
        ctx->st.conns_failed++;
        mc__log(MC__LOG_WARN, "rdma: connection %s %s failed: %s", c->passive ? "from" : "to",
                c->peer, strerror(-err));
    } else {
        mc__log(MC__LOG_DEBUG, "rdma: connection %s %s closed: %s", c->passive ? "from" : "to",
                c->peer, strerror(-err));
    }
    c->err = err;
    c->state = C_DEAD;
    teardown(c);
    /* Nobody else will free a node-side connection or a failed connect. */
    if (c->passive || c->ccb)
        c->closed = 1;
    queue_reap(c);
}

static void on_setup_timeout(mc_timer_t *t)
{
    mc__rdma_conn_fail(t->data, -ETIMEDOUT);
}

static uint64_t remaining_ms(const mc__rdma_conn_t *c)
{
    uint64_t now = mc_loop_now_ms();
    return c->deadline_ms > now ? c->deadline_ms - now : 1;
}

/* Creates c's CQ (with a completion channel on the loop, for a client), its
 * staging slots and its RC QP. */
static int make_qp(mc__rdma_conn_t *c)
{
    mc__rdma_ctx_t *ctx = c->ctx;
    int rc;
    if (c->passive) {
        /* The node posts nothing: its CQ only exists because a QP needs one. */
        c->cq = ibv_create_cq(ctx->verbs, 1, c, NULL, 0);
        if (!c->cq)
            return err_of(-ENOMEM);
    } else {
        c->ch = ibv_create_comp_channel(ctx->verbs);
        if (!c->ch)
            return err_of(-ENOMEM);
        if ((rc = set_nonblock(c->ch->fd)) < 0)
            return rc;
        c->cq = ibv_create_cq(ctx->verbs, (int)c->nslots + MC__RDMA_CTRL_WRS + 1, c, c->ch, 0);
        if (!c->cq)
            return err_of(-ENOMEM);
        if ((rc = ibv_req_notify_cq(c->cq, 0)) != 0)
            return -rc;
        if ((rc = mc_poll_start(ctx->loop, &c->cq_poll, c->ch->fd, POLLIN, mc__rdma_on_cq)) < 0)
            return rc;
        size_t bytes = (size_t)c->nslots * ctx->o.slice_size + MC__RDMA_CTRL_WORDS * 8;
        void *stage;
        if ((rc = posix_memalign(&stage, 4096, bytes)) != 0)
            return -rc;
        c->stage = stage;
        c->ctrl = (uint64_t *)(void *)(c->stage + (size_t)c->nslots * ctx->o.slice_size);
        c->stage_mr = ibv_reg_mr(ctx->pd, c->stage, bytes, IBV_ACCESS_LOCAL_WRITE);
        if (!c->stage_mr)
            return err_of(-ENOMEM);
    }
    struct ibv_qp_init_attr qa = {
        .send_cq = c->cq,
        .recv_cq = c->cq,
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 1,
        .cap = {.max_send_wr = c->passive ? 1 : c->nslots + MC__RDMA_CTRL_WRS,
                .max_recv_wr = 1,
                .max_send_sge = 1,
                .max_recv_sge = 1},
    };
    if (rdma_create_qp(c->id, ctx->pd, &qa))
        return err_of(-ENOMEM);
    c->qp = c->id->qp;
    return 0;
}

/* ---- rdma_cm events ---- */

static void on_connect_request(mc__rdma_ctx_t *ctx, struct rdma_cm_id *id, const void *pd,
                               size_t plen)
{
    unsigned char hello[HELLO_LEN];
    char peer[64];
    addr_str(rdma_get_peer_addr(id), peer, sizeof(peer));
    hello_pack(ctx, NULL, hello);
    const char *why = NULL;
    if (id->verbs != ctx->verbs)
        why = "it arrived on another device";
    else if (!hello_ok(pd, plen))
        why = "its parameters are not ours (another protocol or version)";
    else if (ctx->epoch_mr && !ctx->fence.join)
        why = "our fence was taken back (closing)";
    if (why) {
        mc__log(MC__LOG_WARN, "rdma: refusing a connection from %s: %s", peer, why);
        rdma_reject(id, hello, sizeof(hello));
        rdma_destroy_id(id);
        return;
    }
    mc__rdma_conn_t *c = conn_new(ctx, 1);
    if (!c) {
        rdma_reject(id, hello, sizeof(hello));
        rdma_destroy_id(id);
        return;
    }
    c->id = id;
    id->context = c;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    c->state = C_ACCEPTING;
    int rc = make_qp(c);
    if (rc == 0 && ctx->fence.join) {
        /* Its slot of our fence, which it alone may write. */
        c->slot = ctx->fence.join(ctx->fence.arg, c, peer);
        if (!c->slot)
            rc = -EBUSY;
        else if (!(c->slot_mr = ibv_reg_mr(ctx->pd, (void *)c->slot, sizeof(*c->slot),
                                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)))
            rc = err_of(-ENOMEM);
        hello_pack(ctx, c, hello);
    }
    if (rc == 0) {
        struct rdma_conn_param cp = {
            .private_data = hello,
            .private_data_len = sizeof(hello),
            .responder_resources = RDMA_MAX_RESP_RES, /* the peer's RDMA READs */
            .initiator_depth = 0,
            .rnr_retry_count = 7,
        };
        if (rdma_accept(id, &cp))
            rc = err_of(-ECONNABORTED);
    }
    if (rc == 0)
        rc = mc_timer_start(ctx->loop, &c->setup_timer, ctx->o.timeout_ms, 0, on_setup_timeout);
    if (rc < 0) {
        mc__log(MC__LOG_WARN, "rdma: cannot accept %s: %s", peer, strerror(-rc));
        rdma_reject(id, hello, sizeof(hello));
        mc__rdma_conn_fail(c, rc);
    }
}

static void on_route_resolved(mc__rdma_conn_t *c)
{
    unsigned char hello[HELLO_LEN];
    hello_pack(c->ctx, NULL, hello);
    int rc = make_qp(c);
    if (rc < 0) {
        mc__rdma_conn_fail(c, rc);
        return;
    }
    struct rdma_conn_param cp = {
        .private_data = hello,
        .private_data_len = sizeof(hello),
        .responder_resources = 1,
        .initiator_depth = RDMA_MAX_INIT_DEPTH, /* RDMA READs in flight */
        .retry_count = 7,
        .rnr_retry_count = 7,
    };
    if (rdma_connect(c->id, &cp)) {
        mc__rdma_conn_fail(c, err_of(-ECONNABORTED));
        return;
    }
    c->state = C_CONNECTING;
}

static void on_established(mc__rdma_conn_t *c, const void *pd, size_t plen)
{
    mc__rdma_ctx_t *ctx = c->ctx;
    if (c->state != (c->passive ? C_ACCEPTING : C_CONNECTING))
        return;
    if (!c->passive && !hello_ok(pd, plen)) {
        mc__rdma_conn_fail(c, -EPROTO);
        return;
    }
    const unsigned char *h = pd;
    unsigned flags = c->passive ? 0 : (unsigned)get_le(h + 6, 2);
    if (flags & HELLO_FENCED) {
        c->fenced = 1;
        c->fence_addr = get_le(h + 16, 8);
        c->slot_addr = get_le(h + 24, 8);
        c->fence_rkey = (uint32_t)get_le(h + 32, 4);
        c->slot_rkey = (uint32_t)get_le(h + 36, 4);
    }
    if (flags & HELLO_MOUNT) {
        c->check_reads = 1;
        c->mount_addr = get_le(h + 40, 8);
        c->mount_rkey = (uint32_t)get_le(h + 48, 4);
    }
    mc_timer_stop(&c->setup_timer);
    c->state = C_CONNECTED;
    if (c->passive) {
        ctx->st.conns_accepted++;
        mc__log(MC__LOG_INFO, "rdma: accepted %s", c->peer);
        return;
    }
    ctx->st.conns_opened++;
    mc__log(MC__LOG_INFO, "rdma: connected to %s on %s%s", c->peer, ctx->devname,
            c->check_reads ? " (writes fenced, reads checked)"
            : c->fenced    ? " (writes fenced)"
                           : "");
    mc__rdma_connect_cb cb = c->ccb;
    c->ccb = NULL;
    cb(c, 0, c->carg);
}

/* An error event's status as -errno: rdma_cm gives a -errno or, for a
 * reject, the CM's positive reason code. */
static int event_err(int status, int fallback)
{
    return status < 0 ? status : fallback;
}

static void on_cm_event(mc__rdma_ctx_t *ctx, const struct rdma_cm_event *e, const void *pd,
                        size_t plen)
{
    if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        on_connect_request(ctx, e->id, pd, plen);
        return;
    }
    if (e->id == ctx->listen_id) {
        mc__log(MC__LOG_WARN, "rdma: listener event %s (status %d)", rdma_event_str(e->event),
                e->status);
        return;
    }
    mc__rdma_conn_t *c = e->id->context;
    if (!c || c->state == C_DEAD)
        return;
    switch (e->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (c->state != C_RESOLVING)
            break;
        if (e->id->verbs != ctx->verbs)
            mc__rdma_conn_fail(c, -ENODEV);
        else if (rdma_resolve_route(e->id, (int)remaining_ms(c)))
            mc__rdma_conn_fail(c, err_of(-ENETUNREACH));
        break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        if (c->state == C_RESOLVING)
            on_route_resolved(c);
        break;
    case RDMA_CM_EVENT_ESTABLISHED:
        on_established(c, pd, plen);
        break;
    case RDMA_CM_EVENT_ADDR_ERROR:
        mc__rdma_conn_fail(c, event_err(e->status, -EHOSTUNREACH));
        break;
    case RDMA_CM_EVENT_ROUTE_ERROR:
        mc__rdma_conn_fail(c, event_err(e->status, -ENETUNREACH));
        break;
    case RDMA_CM_EVENT_UNREACHABLE:
        mc__rdma_conn_fail(c, event_err(e->status, -EHOSTUNREACH));
        break;
    case RDMA_CM_EVENT_REJECTED:
        mc__rdma_conn_fail(c, -ECONNREFUSED);
        break;
    case RDMA_CM_EVENT_CONNECT_ERROR:
        mc__rdma_conn_fail(c, event_err(e->status, -ECONNRESET));
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
        mc__rdma_conn_fail(c, -ECONNRESET);
        break;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        mc__rdma_conn_fail(c, -ENODEV);
        break;
    default:
        mc__log(MC__LOG_DEBUG, "rdma: event %s on %s ignored", rdma_event_str(e->event), c->peer);
        break;
    }
}

/*
 * The event channel is readable: take every event. Each is copied (with its
 * private data) and acknowledged before it is handled, because handling may
 * destroy its id, which waits for the acknowledgement.
 */
static void on_cm(mc_poll_t *p, int revents)
{
    mc__rdma_ctx_t *ctx = p->data;
    if (revents < 0) {
        mc__log(MC__LOG_ERROR, "rdma: watching the rdma_cm channel failed: %s", strerror(-revents));
        return;
    }
    for (;;) {
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(ctx->cm, &ev)) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                mc__log(MC__LOG_ERROR, "rdma: reading an rdma_cm event failed: %s",
                        strerror(errno));
            return;
        }
        struct rdma_cm_event e = *ev;
        unsigned char pd[256];
        size_t plen = 0;
        if (ev->param.conn.private_data && ev->param.conn.private_data_len) {
            plen = ev->param.conn.private_data_len;
            if (plen > sizeof(pd))
                plen = sizeof(pd);
            memcpy(pd, ev->param.conn.private_data, plen);
        }
        rdma_ack_cm_event(ev);
        on_cm_event(ctx, &e, plen ? pd : NULL, plen);
    }
}

/* ---- listen, connect, close ---- */

int mc__rdma_listen(mc__rdma_ctx_t *ctx, const struct sockaddr *sa)
{
    if (!sa)
        return -EINVAL;
    if (ctx->listen_id)
        return -EBUSY;
    struct rdma_cm_id *id;
    if (rdma_create_id(ctx->cm, &id, NULL, RDMA_PS_TCP))
        return err_of(-ENOMEM);
    int rc = 0;
    if (rdma_bind_addr(id, (struct sockaddr *)sa))
        rc = err_of(-EADDRNOTAVAIL);
    else if (id->verbs && id->verbs != ctx->verbs)
        rc = -ENODEV;
    else if (rdma_listen(id, 128))
        rc = err_of(-EADDRINUSE);
    if (rc < 0) {
        rdma_destroy_id(id);
        return rc;
    }
    ctx->listen_id = id;
    char buf[64];
    mc__log(MC__LOG_INFO, "rdma: listening on %s (port %d) on %s", addr_str(sa, buf, sizeof(buf)),
            ntohs(rdma_get_src_port(id)), ctx->devname);
    return 0;
}

int mc__rdma_listen_port(const mc__rdma_ctx_t *ctx)
{
    if (!ctx->listen_id)
        return -ENOTCONN;
    return ntohs(rdma_get_src_port(ctx->listen_id));
}

int mc__rdma_connect(mc__rdma_ctx_t *ctx, const struct sockaddr *sa, uint64_t timeout_ms,
                     mc__rdma_connect_cb cb, void *arg, mc__rdma_conn_t **out)
{
    if (!sa || !cb || !out)
        return -EINVAL;
    if (!timeout_ms)
        timeout_ms = ctx->o.timeout_ms;
    mc__rdma_conn_t *c = conn_new(ctx, 0);
    if (!c)
        return -ENOMEM;
    addr_str(sa, c->peer, sizeof(c->peer));
    int rc = 0;
    if (rdma_create_id(ctx->cm, &c->id, c, RDMA_PS_TCP)) {
        c->id = NULL;
        rc = err_of(-ENOMEM);
    }
    c->state = C_RESOLVING;
    c->deadline_ms = mc_loop_now_ms() + timeout_ms;
    if (rc == 0)
        rc = mc_timer_start(ctx->loop, &c->setup_timer, timeout_ms, 0, on_setup_timeout);
    int resolve_ms = timeout_ms > INT_MAX ? INT_MAX : (int)timeout_ms;
    if (rc == 0 && rdma_resolve_addr(c->id, NULL, (struct sockaddr *)sa, resolve_ms))
        rc = err_of(-EHOSTUNREACH);
    if (rc < 0) {
        teardown(c);
        conn_free(c);
        return rc;
    }
    c->ccb = cb;
    c->carg = arg;
    *out = c;
    return 0;
}

int mc__rdma_conn_error(const mc__rdma_conn_t *c)
{
    return c->state == C_DEAD ? c->err : 0;
}

void mc__rdma_close(mc__rdma_conn_t *c)
{
    if (!c || c->closed)
        return;
    c->closed = 1;
    if (c->state != C_DEAD)
        mc__rdma_conn_fail(c, -ECANCELED);
    else
        queue_reap(c);
}

void mc__rdma_ctx_free(mc__rdma_ctx_t *ctx)
{
    if (!ctx)
        return;
    if (ctx->listen_id)
        rdma_destroy_id(ctx->listen_id);
    ctx->listen_id = NULL;
    while (ctx->conns) {
        mc__rdma_conn_t *c = ctx->conns;
        c->closed = 1;
        mc__rdma_conn_fail(c, -ECANCELED);
        mc_timer_stop(&c->reap_timer);
        c->reap_queued = 0;
        reap(c); /* frees c: it is closed */
    }
    while (ctx->mrs)
        mc__rdma_deregister(ctx->mrs);
    if (ctx->epoch_mr)
        ibv_dereg_mr(ctx->epoch_mr);
    if (ctx->mount_mr)
        ibv_dereg_mr(ctx->mount_mr);
    mc_poll_stop(&ctx->cm_poll);
    rdma_destroy_event_channel(ctx->cm);
    ibv_dealloc_pd(ctx->pd);
    free(ctx);
}

#endif /* MC_HAVE_RDMA */
