/*
 * transport_rdma.c - the RDMA transport (see transport_rdma.h).
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
 *
 * Operations queue per connection in FIFO order; c->issue is the first with
 * bytes not yet posted. A slice occupies one slot (its staging buffer, when
 * the caller's buffer is not registered) from post to completion; the slots
 * bound what is in flight. An RC send queue completes in order, so
 * operations complete in the order they were queued.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "transport/transport_rdma.h"

/* ---- descriptor codec (always built: the master stores descriptors) ---- */

#define DESC_MAGIC 0x4452434dU /* "MCRD" little endian */
#define DESC_VERSION 1
#define DESC_HEAD 28  /* magic u32, version u16, reserved u16, size u64, chunk u64, n u32 */
#define DESC_ENTRY 12 /* addr u64, rkey u32 */

static void put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

size_t mc__rdma_desc_pack(const mc__rdma_desc_t *d, void *buf, size_t cap)
{
    size_t need = DESC_HEAD + (size_t)d->n * DESC_ENTRY;
    if (need > cap)
        return need;
    unsigned char *p = buf;
    put_le(p, DESC_MAGIC, 4);
    put_le(p + 4, DESC_VERSION, 2);
    put_le(p + 6, 0, 2);
    put_le(p + 8, d->size, 8);
    put_le(p + 16, d->chunk, 8);
    put_le(p + 24, d->n, 4);
    for (uint32_t i = 0; i < d->n; i++) {
        put_le(p + DESC_HEAD + (size_t)i * DESC_ENTRY, d->c[i].addr, 8);
        put_le(p + DESC_HEAD + (size_t)i * DESC_ENTRY + 8, d->c[i].rkey, 4);
    }
    return need;
}

int mc__rdma_desc_unpack(const void *buf, size_t len, mc__rdma_desc_t **out)
{
    const unsigned char *p = buf;
    if (len < DESC_HEAD || get_le(p, 4) != DESC_MAGIC || get_le(p + 4, 2) != DESC_VERSION)
        return -EINVAL;
    uint64_t size = get_le(p + 8, 8), chunk = get_le(p + 16, 8);
    uint32_t n = (uint32_t)get_le(p + 24, 4);
    if (!size || !chunk || !n || n > MC__RDMA_DESC_MAX_CHUNKS)
        return -EINVAL;
    if (len != DESC_HEAD + (size_t)n * DESC_ENTRY)
        return -EINVAL;
    /* n must be exactly the chunks that size needs: no empty tail chunk. */
    if (size / chunk + (size % chunk != 0) != n)
        return -EINVAL;
    mc__rdma_desc_t *d = malloc(mc__rdma_desc_size(n));
    if (!d)
        return -ENOMEM;
    d->size = size;
    d->chunk = chunk;
    d->n = n;
    for (uint32_t i = 0; i < n; i++) {
        d->c[i].addr = get_le(p + DESC_HEAD + (size_t)i * DESC_ENTRY, 8);
        d->c[i].rkey = (uint32_t)get_le(p + DESC_HEAD + (size_t)i * DESC_ENTRY + 8, 4);
    }
    *out = d;
    return 0;
}

#ifdef MC_HAVE_RDMA

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <unistd.h>

#include "runtime/log.h"

/* Connection parameters in rdma_cm private data, both ways. */
#define HELLO_MAGIC 0x4f4c484dU /* "MHLO" little endian */
#define HELLO_VERSION 1
#define HELLO_LEN 16 /* magic u32, version u16, flags u16, slice u32, inflight u32 */

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
};

static void conn_fail(mc__rdma_conn_t *c, int err);
static void pump(mc__rdma_conn_t *c);

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    return 0;
}

/* -errno of a failed verbs/rdma_cm call that set errno, never 0. */
static int err_of(int fallback)
{
    return errno > 0 ? -errno : fallback;
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

static void hello_pack(const mc__rdma_ctx_t *ctx, unsigned char *p)
{
    put_le(p, HELLO_MAGIC, 4);
    put_le(p + 4, HELLO_VERSION, 2);
    put_le(p + 6, 0, 2);
    put_le(p + 8, ctx->o.slice_size, 4);
    put_le(p + 12, ctx->o.max_inflight, 4);
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
    if (c->qp) {
        rdma_destroy_qp(c->id);
        c->qp = NULL;
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
    for (op_t *op = c->head; op; op = op->next)
        mc_timer_stop(&op->timer);
    c->issue = NULL;
    c->inflight = 0;
}

static void finish_op(mc__rdma_ctx_t *ctx, op_t *op, int status)
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
        finish_op(ctx, op, err);
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
static void conn_fail(mc__rdma_conn_t *c, int err)
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
    conn_fail(t->data, -ETIMEDOUT);
}

static uint64_t remaining_ms(const mc__rdma_conn_t *c)
{
    uint64_t now = mc_loop_now_ms();
    return c->deadline_ms > now ? c->deadline_ms - now : 1;
}

static void on_cq(mc_poll_t *p, int revents);

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
        c->cq = ibv_create_cq(ctx->verbs, (int)c->nslots + 1, c, c->ch, 0);
        if (!c->cq)
            return err_of(-ENOMEM);
        if ((rc = ibv_req_notify_cq(c->cq, 0)) != 0)
            return -rc;
        if ((rc = mc_poll_start(ctx->loop, &c->cq_poll, c->ch->fd, POLLIN, on_cq)) < 0)
            return rc;
        size_t bytes = (size_t)c->nslots * ctx->o.slice_size;
        void *stage;
        if ((rc = posix_memalign(&stage, 4096, bytes)) != 0)
            return -rc;
        c->stage = stage;
        c->stage_mr = ibv_reg_mr(ctx->pd, c->stage, bytes, IBV_ACCESS_LOCAL_WRITE);
        if (!c->stage_mr)
            return err_of(-ENOMEM);
    }
    struct ibv_qp_init_attr qa = {
        .send_cq = c->cq,
        .recv_cq = c->cq,
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 1,
        .cap = {.max_send_wr = c->passive ? 1 : c->nslots,
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
    hello_pack(ctx, hello);
    const char *why = NULL;
    if (id->verbs != ctx->verbs)
        why = "it arrived on another device";
    else if (!hello_ok(pd, plen))
        why = "its parameters are not ours (another protocol or version)";
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
        conn_fail(c, rc);
    }
}

static void on_route_resolved(mc__rdma_conn_t *c)
{
    unsigned char hello[HELLO_LEN];
    hello_pack(c->ctx, hello);
    int rc = make_qp(c);
    if (rc < 0) {
        conn_fail(c, rc);
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
        conn_fail(c, err_of(-ECONNABORTED));
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
        conn_fail(c, -EPROTO);
        return;
    }
    mc_timer_stop(&c->setup_timer);
    c->state = C_CONNECTED;
    if (c->passive) {
        ctx->st.conns_accepted++;
        mc__log(MC__LOG_INFO, "rdma: accepted %s", c->peer);
        return;
    }
    ctx->st.conns_opened++;
    mc__log(MC__LOG_INFO, "rdma: connected to %s on %s", c->peer, ctx->devname);
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
            conn_fail(c, -ENODEV);
        else if (rdma_resolve_route(e->id, (int)remaining_ms(c)))
            conn_fail(c, err_of(-ENETUNREACH));
        break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        if (c->state == C_RESOLVING)
            on_route_resolved(c);
        break;
    case RDMA_CM_EVENT_ESTABLISHED:
        on_established(c, pd, plen);
        break;
    case RDMA_CM_EVENT_ADDR_ERROR:
        conn_fail(c, event_err(e->status, -EHOSTUNREACH));
        break;
    case RDMA_CM_EVENT_ROUTE_ERROR:
        conn_fail(c, event_err(e->status, -ENETUNREACH));
        break;
    case RDMA_CM_EVENT_UNREACHABLE:
        conn_fail(c, event_err(e->status, -EHOSTUNREACH));
        break;
    case RDMA_CM_EVENT_REJECTED:
        conn_fail(c, -ECONNREFUSED);
        break;
    case RDMA_CM_EVENT_CONNECT_ERROR:
        conn_fail(c, event_err(e->status, -ECONNRESET));
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
        conn_fail(c, -ECONNRESET);
        break;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        conn_fail(c, -ENODEV);
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

static void on_wc(mc__rdma_conn_t *c, const struct ibv_wc *wc)
{
    mc__rdma_ctx_t *ctx = c->ctx;
    ctx->st.completions++;
    if (wc->status != IBV_WC_SUCCESS || wc->wr_id >= c->nslots) {
        mc__log(MC__LOG_WARN, "rdma: work request to %s failed: %s (vendor error %u)", c->peer,
                ibv_wc_status_str(wc->status), wc->vendor_err);
        conn_fail(c, wc->status != IBV_WC_SUCCESS ? wc_err(wc->status) : -EIO);
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
    if (op->done == op->len) {
        unlink_op(c, op);
        finish_op(ctx, op, 0);
    }
}

/*
 * The completion channel is readable: acknowledge its events, re-arm the CQ,
 * then drain it. Re-arming before the drain means a completion that lands
 * during the drain raises a new event instead of waiting unseen.
 */
static void on_cq(mc_poll_t *p, int revents)
{
    mc__rdma_conn_t *c = p->data;
    mc__rdma_ctx_t *ctx = c->ctx;
    if (revents < 0) {
        conn_fail(c, -EIO);
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
        conn_fail(c, -EIO);
        return;
    }
    struct ibv_wc wc[32];
    for (;;) {
        int n = ibv_poll_cq(c->cq, 32, wc);
        if (n < 0) {
            conn_fail(c, -EIO);
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
    while (c->state == C_CONNECTED && c->issue && c->nfree) {
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
            conn_fail(c, -EIO);
            return;
        }
        c->slots[si] = (slot_t){.op = op, .off = off, .len = (uint32_t)n};
        op->issued += n;
        c->inflight++;
        ctx->st.slices++;
        if (c->inflight > ctx->st.inflight_peak)
            ctx->st.inflight_peak = c->inflight;
        if (op->issued == op->len)
            c->issue = op->next;
    }
}

static void on_op_timeout(mc_timer_t *t)
{
    op_t *op = t->data;
    mc__rdma_conn_t *c = op->c;
    mc__log(MC__LOG_WARN, "rdma: %s of %llu bytes at %s timed out (%llu done)",
            op->write ? "write" : "read", (unsigned long long)op->len, c->peer,
            (unsigned long long)op->done);
    conn_fail(c, -ETIMEDOUT);
}

static int submit(mc__rdma_conn_t *c, int write, char *buf, const mc__rdma_mr_t *mr,
                  const mc__rdma_desc_t *rd, uint64_t roff, size_t len, uint64_t timeout_ms,
                  mc__rdma_cb cb, void *arg)
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
                 .arg = arg};
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
    return submit(c, 0, buf, mr, rd, roff, len, timeout_ms, cb, arg);
}

int mc__rdma_write(mc__rdma_conn_t *c, const void *buf, const mc__rdma_mr_t *mr,
                   const mc__rdma_desc_t *rd, uint64_t roff, size_t len, uint64_t timeout_ms,
                   mc__rdma_cb cb, void *arg)
{
    /* The cast is safe: a write only reads buf. */
    return submit(c, 1, (char *)buf, mr, rd, roff, len, timeout_ms, cb, arg);
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
        conn_fail(c, -ECANCELED);
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
        conn_fail(c, -ECANCELED);
        mc_timer_stop(&c->reap_timer);
        c->reap_queued = 0;
        reap(c); /* frees c: it is closed */
    }
    while (ctx->mrs)
        mc__rdma_deregister(ctx->mrs);
    mc_poll_stop(&ctx->cm_poll);
    rdma_destroy_event_channel(ctx->cm);
    ibv_dealloc_pd(ctx->pd);
    free(ctx);
}

#endif /* MC_HAVE_RDMA */

/* ---- wiring into the store (always built) ---- */

#include <netdb.h>
#include <stdio.h>

#include "runtime/log.h"

#define RECORD_MAGIC 0x5252434dU /* "MCRR" little endian */
#define RECORD_VERSION 1
#define RECORD_HEAD 8 /* magic u32, version u16, address length u16 */

int mc__xport_parse(const char *s)
{
    if (!s || !*s || strcmp(s, "tcp") == 0)
        return MC__XPORT_TCP;
    if (strcmp(s, "rdma") == 0)
        return MC__XPORT_RDMA;
    if (strcmp(s, "auto") == 0)
        return MC__XPORT_AUTO;
    return -EINVAL;
}

int mc__rdma_record_pack(const char *addr, const mc__rdma_desc_t *d, char **out, size_t *len)
{
    size_t alen = strlen(addr);
    if (alen > 255)
        return -EINVAL;
    size_t dlen = mc__rdma_desc_pack(d, NULL, 0);
    unsigned char *p = malloc(RECORD_HEAD + alen + dlen);
    if (!p)
        return -ENOMEM;
    put_le(p, RECORD_MAGIC, 4);
    put_le(p + 4, RECORD_VERSION, 2);
    put_le(p + 6, alen, 2);
    memcpy(p + RECORD_HEAD, addr, alen);
    mc__rdma_desc_pack(d, p + RECORD_HEAD + alen, dlen);
    *out = (char *)p;
    *len = RECORD_HEAD + alen + dlen;
    return 0;
}

int mc__rdma_record_unpack(const void *rec, size_t len, char *addr, size_t cap, mc__rdma_desc_t **d)
{
    const unsigned char *p = rec;
    if (len < RECORD_HEAD || get_le(p, 4) != RECORD_MAGIC || get_le(p + 4, 2) != RECORD_VERSION)
        return -EINVAL;
    size_t alen = get_le(p + 6, 2);
    if (!alen || alen >= cap || alen > len - RECORD_HEAD || memchr(p + RECORD_HEAD, 0, alen))
        return -EINVAL;
    int rc = mc__rdma_desc_unpack(p + RECORD_HEAD + alen, len - RECORD_HEAD - alen, d);
    if (rc < 0)
        return rc;
    memcpy(addr, p + RECORD_HEAD, alen);
    addr[alen] = '\0';
    return 0;
}

int mc__rdma_open(mc_loop_t *l, int xport, const char *devices, uint64_t timeout_ms,
                  mc__rdma_ctx_t **out)
{
    *out = NULL;
    if (xport == MC__XPORT_TCP)
        return 0;
    int n = mc__rdma_available(), rc = n;
    if (n == 0 || (n < 0 && n != -ENOTSUP))
        rc = -ENODEV; /* none, or no kernel support (ENOSYS): no usable device */
    if (n > 0) {
        char list[256];
        snprintf(list, sizeof(list), "%s", devices ? devices : "");
        char *save = NULL, *name = strtok_r(list, ", ", &save);
        mc__rdma_opts_t o = {.timeout_ms = timeout_ms};
        do {
            o.device = name;
            rc = mc__rdma_ctx_new(l, &o, out);
            if (rc == 0) {
                mc__log(MC__LOG_INFO, "rdma: data moves over RDMA (device %s)",
                        mc__rdma_device_name(*out));
                return 0;
            }
            mc__log(MC__LOG_INFO, "rdma: device %s: %s", name ? name : "(first)",
                    strerrordesc_np(-rc));
        } while (name && (name = strtok_r(NULL, ", ", &save)));
    }
    if (rc == -ENOTSUP)
        rc = -EPROTONOSUPPORT;
    if (xport == MC__XPORT_AUTO) {
        mc__log(MC__LOG_INFO, "rdma: %s: data moves over TCP",
                rc == -EPROTONOSUPPORT ? "not built in"
                : rc == -ENODEV        ? "no usable device"
                                       : strerrordesc_np(-rc));
        return 0;
    }
    return rc;
}

int mc__rdma_serve(mc__rdma_ctx_t *ctx, void *base, size_t size, const char *host,
                   mc__rdma_mr_t **mr, char **rec, size_t *rec_len)
{
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_PASSIVE, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    if (!host || getaddrinfo(host, "0", &hints, &ai) != 0)
        return -EINVAL;
    int rc = mc__rdma_listen_port(ctx);
    if (rc < 0)
        rc = mc__rdma_listen(ctx, ai->ai_addr);
    freeaddrinfo(ai);
    if (rc < 0)
        return rc;
    int port = mc__rdma_listen_port(ctx);
    if (port < 0)
        return port;
    rc = mc__rdma_register(ctx, base, size, MC__RDMA_REMOTE, mr);
    if (rc < 0)
        return rc;
    char addr[300];
    snprintf(addr, sizeof(addr), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    rc = mc__rdma_record_pack(addr, mc__rdma_mr_desc(*mr), rec, rec_len);
    if (rc < 0) {
        mc__rdma_deregister(*mr);
        *mr = NULL;
    }
    return rc;
}
