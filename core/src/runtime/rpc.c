/*
 * rpc.c - request/response calls and the reconnecting client (see rpc.h).
 *
 * A conn that makes calls carries a struct rpc, attached as the conn's hook
 * (net.h): a hash table of pending calls by request id. Each call has its
 * own one-shot timer. A call leaves the table exactly once (response,
 * timeout or close) and its callback runs then, except that a callv whose
 * body the conn is still sending holds its result back until the send is
 * done, so the caller never reuses buffers the kernel may still read; and a
 * call_into whose answer's body is being received into its buffer does not
 * time out alone: its timeout closes the conn, and the close, once the
 * kernel let go of the buffer, fails it (the same rule the other way).
 *
 * A call counts against its conn's window (struct rpc's inflight) from
 * when it is sent until it leaves the table: its request body and the
 * answer it may receive (call_into's cap). A call that would pass the
 * window, or whose frame finds the send queue full (-ENOBUFS, net.h),
 * waits instead, with every later call behind it so that frames go out in
 * the order of the calls: its own copy of the body (or of the caller's
 * iovecs) is kept in the wait list, and the waiting calls go as answers
 * come back (rpc_frame(), call_timeout()) and as the kernel takes frames
 * (the conn's room() hook). Its timer starts when it is sent: the wait
 * before that is bounded by the calls ahead, each by its own timeout, and
 * by the conn's send timeout, which fails the conn (and every call,
 * waiting or not) when the peer takes nothing.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/log.h"
#include "runtime/rpc.h"

#define TABLE_MIN 16

struct rpc;

struct call {
    struct call *next; /* hash chain */
    struct rpc *r;
    uint64_t id;
    uint16_t op;
    mc__rpc_cb cb; /* NULL once called */
    void *arg;
    mc_timer_t timer;
    uint64_t timeout_ms;
    int sending; /* callv: the conn still refers to the caller's buffers */
    char *dst;   /* call_into: where a response body of up to cap bytes goes */
    size_t cap;
    int receiving;   /* the conn receives the body into dst: it never times out alone */
    int held;        /* a result waits for the send to finish ... */
    int held_status; /* ... and this is it */
    size_t cost;     /* bytes it counts against the window: body and cap */
    /* Waiting for room in the window or the send queue (the wait list): */
    struct call *wnext;
    struct iovec *wiov; /* the body: the caller's iovecs, or a copy (wcopy) */
    int wn;
    int wcopy;
};

struct rpc {
    mc__conn_t *c;
    uint64_t next_id;
    struct call **tab; /* nb buckets, a power of two */
    size_t nb, count;
    size_t inflight, window;            /* bytes of the calls in the table, and their bound */
    struct call *wait_head, *wait_tail; /* calls waiting for room, in order */
    size_t waiting;
};

static int rpc_frame(mc__conn_t *c, void *state, const mc__hdr_t *h, const char *body, size_t len);
static void rpc_close(mc__conn_t *c, void *state, int err);
static char *rpc_body_dst(mc__conn_t *c, void *state, const mc__hdr_t *h);
static void rpc_room(mc__conn_t *c, void *state);

static const mc__conn_hook_t rpc_hook = {rpc_frame, rpc_close, rpc_body_dst, rpc_room};

/* ---- the table of pending calls ---- */

static void table_grow(struct rpc *r)
{
    size_t nb = r->nb * 2;
    struct call **tab = calloc(nb, sizeof(*tab));
    if (!tab)
        return; /* chains get longer, nothing worse */
    for (size_t i = 0; i < r->nb; i++) {
        while (r->tab[i]) {
            struct call *k = r->tab[i];
            r->tab[i] = k->next;
            k->next = tab[k->id & (nb - 1)];
            tab[k->id & (nb - 1)] = k;
        }
    }
    free(r->tab);
    r->tab = tab;
    r->nb = nb;
}

static void table_add(struct rpc *r, struct call *k)
{
    if (r->count >= r->nb * 2)
        table_grow(r);
    struct call **b = &r->tab[k->id & (r->nb - 1)];
    k->next = *b;
    *b = k;
    r->count++;
    r->inflight += k->cost;
}

static struct call *table_find(const struct rpc *r, uint64_t id)
{
    for (struct call *k = r->tab[id & (r->nb - 1)]; k; k = k->next)
        if (k->id == id)
            return k;
    return NULL;
}

static struct call *table_take(struct rpc *r, uint64_t id)
{
    for (struct call **p = &r->tab[id & (r->nb - 1)]; *p; p = &(*p)->next) {
        if ((*p)->id == id) {
            struct call *k = *p;
            *p = k->next;
            r->count--;
            r->inflight -= k->cost;
            return k;
        }
    }
    return NULL;
}

static struct rpc *rpc_get(mc__conn_t *c)
{
    struct rpc *r = mc__conn_hook_state(c, &rpc_hook);
    if (r)
        return r;
    r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->tab = calloc(TABLE_MIN, sizeof(*r->tab));
    if (!r->tab) {
        free(r);
        return NULL;
    }
    r->nb = TABLE_MIN;
    r->next_id = 1;
    r->window = MC__RPC_WINDOW;
    r->c = c;
    mc__conn_set_hook(c, &rpc_hook, r);
    return r;
}

/* ---- completing calls ---- */

/* Runs k's callback (k is out of the table); frees k unless the conn still
 * sends its body, in which case call_sent() frees it. */
static void call_deliver(struct call *k, int status, const char *body, size_t len)
{
    mc__rpc_cb cb = k->cb;
    void *arg = k->arg;

    k->cb = NULL;
    free(k->wiov);
    k->wiov = NULL;
    if (!k->sending)
        free(k);
    cb(arg, status, body, len);
}

/* The conn is done with a callv's body. */
static void call_sent(void *arg, int status)
{
    struct call *k = arg;

    k->sending = 0;
    if (k->held)
        call_deliver(k, k->held_status, NULL, 0);
    else if (!k->cb)
        free(k); /* its response came first */
    /* else: still in the table, waiting for its response */
}

static void call_timeout(mc_timer_t *t)
{
    struct call *k = t->data;
    struct rpc *r = k->r;

    if (k->receiving) {
        /* The kernel may still write into k->dst: only the conn's close,
         * once it let go of the buffer, fails k (rpc_close()). */
        mc__conn_abort(r->c, -ETIMEDOUT);
        return;
    }
    table_take(r, k->id);
    mc__log(MC__LOG_DEBUG, "%s: %s call %" PRIu64 " timed out after %" PRIu64 " ms",
            mc__conn_peer(r->c), mc__op_name(k->op), k->id, k->timeout_ms);
    if (k->sending) {
        k->held = 1;
        k->held_status = -ETIMEDOUT;
    } else {
        call_deliver(k, -ETIMEDOUT, NULL, 0);
    }
    rpc_room(r->c, r); /* its bytes left the window */
}

static int rpc_frame(mc__conn_t *c, void *state, const mc__hdr_t *h, const char *body, size_t len)
{
    struct rpc *r = state;
    struct call *k = table_take(r, h->id);

    if (!k) {
        mc__log(MC__LOG_DEBUG, "%s: dropping a %s response to unknown request %" PRIu64,
                mc__conn_peer(c), mc__op_name(h->op), h->id);
        return 1;
    }
    mc_timer_stop(&k->timer);
    call_deliver(k, h->status, body, len);
    rpc_room(c, r); /* its bytes left the window */
    return 1;
}

/* A response's body is about to arrive: into the call's own buffer when
 * it asked for that (call_into) and the body fits; the call is then
 * receiving until its frame is delivered or the conn closes. */
static char *rpc_body_dst(mc__conn_t *c, void *state, const mc__hdr_t *h)
{
    struct rpc *r = state;
    struct call *k = table_find(r, h->id);
    (void)c;
    if (!k || !k->dst || h->status < 0 || h->len > k->cap)
        return NULL;
    k->receiving = 1;
    return k->dst;
}

/* The conn is closing; every send is done by now (net.h), so no call is
 * held: fail those still waiting for a response, then let go of r. */
static void rpc_close(mc__conn_t *c, void *state, int err)
{
    struct rpc *r = state;
    struct call *all = NULL;
    int status = err < 0 ? err : -ECANCELED;

    mc__conn_set_hook(c, NULL, NULL);
    for (size_t i = 0; i < r->nb; i++) {
        while (r->tab[i]) {
            struct call *k = r->tab[i];
            r->tab[i] = k->next;
            k->next = all;
            all = k;
        }
    }
    struct call *waiting = r->wait_head; /* never sent: no timer runs */
    free(r->tab);
    free(r);
    while (all) {
        struct call *k = all;
        all = k->next;
        mc_timer_stop(&k->timer);
        k->sending = 0;
        call_deliver(k, status, NULL, 0);
    }
    while (waiting) {
        struct call *k = waiting;
        waiting = k->wnext;
        call_deliver(k, status, NULL, 0);
    }
}

/* ---- starting calls ---- */

/* What a call sends and where its answer goes (call_start()). */
typedef struct call_args {
    uint16_t op;
    const void *body; /* copied, len bytes; or: */
    size_t len;
    const struct iovec *iov; /* gathered without a copy (callv), n pieces */
    int n;
    unsigned flags; /* mc__conn_send_ex()'s */
    char *dst;      /* call_into: the response body's buffer, cap bytes */
    size_t cap;
    uint64_t timeout_ms;
} call_args_t;

_Static_assert(
    8 * (MC__PROTO_CHUNK + 64) <= MC__RPC_WINDOW,
    "the window holds eight READ or WRITE pieces of MC__PROTO_CHUNK with their requests");

/* Whether a call of cost bytes fits r's window now: an empty window takes
 * any call, so that one larger than the window cannot wedge. */
static int window_fits(const struct rpc *r, size_t cost)
{
    return r->inflight == 0 || r->inflight + cost <= r->window;
}

/* Starts k's timer and queues its frame; k goes into the table. Returns 0
 * or -errno (-ENOBUFS: no room in the send queue; k is as it was). */
static int call_send(struct rpc *r, struct call *k, const call_args_t *a)
{
    mc__hdr_t h;
    int rc = mc_timer_start(mc__conn_loop(r->c), &k->timer, k->timeout_ms, 0, call_timeout);
    if (rc < 0)
        return rc;
    memset(&h, 0, sizeof(h));
    h.op = a->op;
    h.id = k->id;
    if (a->iov) {
        k->sending = 1;
        rc = mc__conn_send_iov(r->c, &h, a->iov, a->n, call_sent, k);
    } else {
        rc = mc__conn_send_ex(r->c, &h, a->body, a->len, a->flags, -1);
    }
    if (rc < 0) {
        k->sending = 0;
        mc_timer_stop(&k->timer);
        return rc;
    }
    table_add(r, k);
    return 0;
}

/* Puts k at the end of the wait list with what a sends (copied). */
static int call_wait(struct rpc *r, struct call *k, const call_args_t *a)
{
    int n = a->iov ? a->n : 1;
    size_t copy = a->iov ? 0 : a->len;
    k->wiov = malloc(sizeof(struct iovec) * (size_t)(n ? n : 1) + copy);
    if (!k->wiov)
        return -ENOMEM;
    if (a->iov) {
        memcpy(k->wiov, a->iov, sizeof(struct iovec) * (size_t)n);
    } else {
        k->wiov[0].iov_base = (char *)(k->wiov + 1);
        k->wiov[0].iov_len = a->len;
        if (a->len)
            memcpy(k->wiov[0].iov_base, a->body, a->len);
    }
    k->wn = n;
    k->wcopy = !a->iov;
    if (r->wait_tail)
        r->wait_tail->wnext = k;
    else
        r->wait_head = k;
    r->wait_tail = k;
    r->waiting++;
    return 0;
}

/* Calls left the window, or frames c's send queue: the waiting calls go,
 * in order, while there is room in both. */
static void rpc_room(mc__conn_t *c, void *state)
{
    struct rpc *r = state;
    /* On a closing conn (a callback below may close it), rpc_close() fails
     * them with the conn's reason. */
    while (r->wait_head && window_fits(r, r->wait_head->cost) && !mc__conn_is_closing(c)) {
        struct call *k = r->wait_head;
        call_args_t a = {.op = k->op, .dst = k->dst, .cap = k->cap};
        if (k->wcopy) {
            a.body = k->wiov[0].iov_base;
            a.len = k->wiov[0].iov_len;
        } else {
            a.iov = k->wiov;
            a.n = k->wn;
        }
        int rc = call_send(r, k, &a);
        if (rc == -ENOBUFS)
            return;
        r->wait_head = k->wnext;
        if (!r->wait_head)
            r->wait_tail = NULL;
        r->waiting--;
        k->wnext = NULL;
        free(k->wiov); /* the conn keeps its own copy of the iovecs */
        k->wiov = NULL;
        if (rc < 0)
            call_deliver(k, rc, NULL, 0); /* from the loop: a completion runs this */
    }
}

static int call_start(mc__conn_t *c, const call_args_t *a, mc__rpc_cb cb, void *arg)
{
    int rc;

    if (!cb || a->timeout_ms == 0)
        return -EINVAL;
    if (mc__conn_is_closing(c))
        return -EPIPE;
    struct rpc *r = rpc_get(c);
    if (!r)
        return -ENOMEM;
    struct call *k = calloc(1, sizeof(*k));
    if (!k)
        return -ENOMEM;
    k->r = r;
    k->id = r->next_id++;
    k->op = a->op;
    k->cb = cb;
    k->arg = arg;
    k->dst = a->dst;
    k->cap = a->cap;
    k->timeout_ms = a->timeout_ms;
    k->timer.data = k;
    size_t body = a->len;
    if (a->iov)
        for (int i = 0, n = a->n > 0 ? a->n : 0; i < n; i++)
            body += a->iov[i].iov_len;
    /* What the conn would refuse later refuses the call now, waiting or not. */
    if ((rc = mc__conn_check_frame(body, a->iov ? a->n : 1)) < 0) {
        free(k);
        return rc;
    }
    k->cost = body + a->cap;
    /* Behind calls that wait for room, unless it is a handshake's (early):
     * those wait for it. */
    int early = (a->flags & MC__SEND_EARLY) != 0;
    rc = (r->wait_head || !window_fits(r, k->cost)) && !early ? -ENOBUFS : call_send(r, k, a);
    if (rc == -ENOBUFS && !early)
        rc = call_wait(r, k, a);
    if (rc < 0) {
        free(k);
        return rc;
    }
    return 0;
}

int mc__rpc_call(mc__conn_t *c, uint16_t op, const void *body, size_t len, uint64_t timeout_ms,
                 mc__rpc_cb cb, void *arg)
{
    call_args_t a = {.op = op, .body = body, .len = len, .timeout_ms = timeout_ms};
    return call_start(c, &a, cb, arg);
}

int mc__rpc_call_into(mc__conn_t *c, uint16_t op, const void *body, size_t len, char *dst,
                      size_t cap, uint64_t timeout_ms, mc__rpc_cb cb, void *arg)
{
    call_args_t a = {
        .op = op, .body = body, .len = len, .dst = dst, .cap = cap, .timeout_ms = timeout_ms};
    return call_start(c, &a, cb, arg);
}

int mc__rpc_call_early(mc__conn_t *c, uint16_t op, const void *body, size_t len,
                       uint64_t timeout_ms, mc__rpc_cb cb, void *arg)
{
    call_args_t a = {
        .op = op, .body = body, .len = len, .flags = MC__SEND_EARLY, .timeout_ms = timeout_ms};
    return call_start(c, &a, cb, arg);
}

int mc__rpc_callv(mc__conn_t *c, uint16_t op, const struct iovec *iov, int n, uint64_t timeout_ms,
                  mc__rpc_cb cb, void *arg)
{
    static const struct iovec none;
    call_args_t a = {
        .op = op, .iov = iov ? iov : &none, .n = iov ? n : 0, .timeout_ms = timeout_ms};
    return call_start(c, &a, cb, arg);
}

void mc__rpc_set_window(mc__conn_t *c, size_t bytes)
{
    struct rpc *r = rpc_get(c);
    if (r) /* calls waiting now go when the next call leaves the window */
        r->window = bytes ? bytes : MC__RPC_WINDOW;
}

size_t mc__rpc_pending(const mc__conn_t *c)
{
    const struct rpc *r = mc__conn_hook_state(c, &rpc_hook);
    return r ? r->count + r->waiting : 0;
}

static int reply_hdr(mc__hdr_t *h, const mc__hdr_t *req, int status)
{
    if (status < INT16_MIN || status > INT16_MAX)
        return -ERANGE;
    memset(h, 0, sizeof(*h));
    h->op = req->op;
    h->id = req->id;
    h->flags = MC__F_RESPONSE;
    h->status = (int16_t)status;
    return 0;
}

int mc__rpc_reply(mc__conn_t *c, const mc__hdr_t *req, int status, const void *body, size_t len)
{
    mc__hdr_t h;
    int rc = reply_hdr(&h, req, status);
    return rc < 0 ? rc : mc__conn_send(c, &h, body, len);
}

int mc__rpc_reply_fd(mc__conn_t *c, const mc__hdr_t *req, int status, const void *body, size_t len,
                     int fd)
{
    mc__hdr_t h;
    int rc = reply_hdr(&h, req, status);
    return rc < 0 ? rc : mc__conn_send_ex(c, &h, body, len, 0, fd);
}

int mc__rpc_replyv(mc__conn_t *c, const mc__hdr_t *req, int status, const struct iovec *iov, int n,
                   mc__send_cb done, void *arg)
{
    mc__hdr_t h;
    int rc = reply_hdr(&h, req, status);
    return rc < 0 ? rc : mc__conn_send_iov(c, &h, iov, n, done, arg);
}

/* ---- the reconnecting client ---- */

struct mc__rpc_client {
    mc_loop_t *loop;
    mc__addr_t addr;
    char name[MC__ADDR_STRLEN];
    uint64_t connect_timeout_ms;
    mc__rpc_client_ops_t ops;
    void *data;
    mc__conn_t *conn; /* connecting or open; NULL while backing off */
    int open;         /* conn is connected */
    int ready;        /* ... and its handshake (if any) succeeded */
    mc_timer_t timer; /* the next connect attempt */
    uint64_t backoff_ms;
    mc_timer_t keepalive; /* every keepalive_ms while keepalive_ms > 0 */
    uint64_t keepalive_ms;
    uint64_t last_call_ms; /* when a call last went out through the client */
    uint64_t ready_ms;     /* when the current session became ready */
    unsigned failures;     /* attempts failed in a row: only the first is logged as info */
    int hs_last;           /* why the last handshake failed, until one succeeds or the
                              address changes (mc__rpc_client_handshake_failed()) */
    int closing;
    int in_cb;         /* inside an owner's callback: mc__rpc_client_close() must not free */
    int handshake_err; /* why the last handshake failed, 0 if it did not */
    int resolving;     /* ops.resolve was asked and has not answered */
    int resolved;      /* ... and answered: the next attempt connects */
};

static void client_connect(mc__rpc_client_t *cl);

static void client_timer(mc_timer_t *t)
{
    client_connect(t->data);
}

static void client_retry_later(mc__rpc_client_t *cl)
{
    if (mc_timer_start(cl->loop, &cl->timer, cl->backoff_ms, 0, client_timer) < 0)
        mc__log(MC__LOG_ERROR, "%s: cannot schedule a reconnect; giving up", cl->name);
    /* A server found by ops.resolve is being replaced: look again soon. */
    uint64_t max = cl->ops.resolve ? MC__RPC_BACKOFF_RESOLVE_MS : MC__RPC_BACKOFF_MAX_MS;
    cl->backoff_ms *= 2;
    if (cl->backoff_ms > max)
        cl->backoff_ms = max;
}

/* The conn is connected and, with a handshake, through it. */
static void client_ready(mc__rpc_client_t *cl, mc__conn_t *c)
{
    cl->ready = 1;
    cl->ready_ms = mc_loop_now_ms();
    cl->backoff_ms = MC__RPC_BACKOFF_MIN_MS;
    mc__log(cl->failures ? MC__LOG_INFO : MC__LOG_DEBUG, "connected to %s", cl->name);
    cl->failures = 0;
    cl->hs_last = 0;
    if (cl->ops.on_connect)
        cl->ops.on_connect(cl, c);
}

static void client_on_open(mc__conn_t *c)
{
    mc__rpc_client_t *cl = mc__conn_data(c);

    cl->open = 1;
    if (cl->ops.handshake)
        cl->ops.handshake(cl, c);
    else
        client_ready(cl, c);
}

void mc__rpc_client_ready(mc__rpc_client_t *cl, mc__conn_t *c, int rc)
{
    if (c != cl->conn || !cl->open || cl->ready || cl->closing)
        return; /* a conn already lost, or a late answer */
    if (rc < 0) {
        cl->handshake_err = rc;
        mc__conn_abort(c, rc);
        return;
    }
    mc__conn_hold(c, 0);
    client_ready(cl, c);
}

static void client_on_frame(mc__conn_t *c, const mc__hdr_t *h, const char *body, size_t len)
{
    mc__rpc_client_t *cl = mc__conn_data(c);

    if (cl->ops.on_frame && !cl->closing)
        cl->ops.on_frame(cl, c, h, body, len);
    else
        mc__log(MC__LOG_DEBUG, "%s: dropping an unexpected %s frame", cl->name, mc__op_name(h->op));
}

static void client_on_close(mc__conn_t *c, int err)
{
    mc__rpc_client_t *cl = mc__conn_data(c);
    int was_open = cl->open, was_ready = cl->ready, hs_err = cl->handshake_err;
    int reconnect_now = 0;

    cl->conn = NULL;
    cl->open = 0;
    cl->ready = 0;
    cl->handshake_err = 0;
    if (cl->closing) {
        free(cl);
        return;
    }
    if (was_open && !was_ready) {
        /* Connected, but the handshake failed (its owner said why): back off
         * as for a refused connect. */
        int e = hs_err ? hs_err : err;
        cl->hs_last = e ? e : -ECONNRESET;
        mc__log(cl->failures++ || hs_err ? MC__LOG_DEBUG : MC__LOG_WARN,
                "session with %s failed (%s); retrying in %" PRIu64 " ms", cl->name,
                e ? strerror(-e) : "closed", cl->backoff_ms);
    } else if (was_open) {
        mc__log(MC__LOG_WARN, "lost the connection to %s (%s); reconnecting", cl->name,
                err ? strerror(-err) : "closed");
        reconnect_now = mc_loop_now_ms() - cl->ready_ms >= MC__RPC_RECONNECT_NOW_MS;
        if (cl->ops.on_disconnect) {
            cl->in_cb = 1;
            cl->ops.on_disconnect(cl, err);
            cl->in_cb = 0;
            if (cl->closing) {
                free(cl);
                return;
            }
        }
    } else {
        mc__log(cl->failures++ ? MC__LOG_DEBUG : MC__LOG_INFO,
                "cannot connect to %s (%s); retrying in %" PRIu64 " ms", cl->name, strerror(-err),
                cl->backoff_ms);
    }
    if (reconnect_now && was_ready)
        client_connect(cl); /* so that the next call waits for it instead of failing */
    else
        client_retry_later(cl);
}

static const mc__conn_ops_t client_conn_ops = {
    .on_frame = client_on_frame,
    .on_close = client_on_close,
    .on_open = client_on_open,
};

static void client_connect(mc__rpc_client_t *cl)
{
    if (cl->ops.resolve && !cl->resolved) {
        if (!cl->resolving) {
            cl->resolving = 1;
            cl->ops.resolve(cl);
        }
        return;
    }
    cl->resolved = 0;
    int rc = mc__conn_connect(cl->loop, &cl->addr, cl->connect_timeout_ms, &client_conn_ops, cl,
                              &cl->conn);
    if (rc == 0 && cl->ops.handshake)
        mc__conn_hold(cl->conn, 1); /* calls wait for the handshake */
    if (rc < 0) {
        cl->conn = NULL;
        mc__log(cl->failures++ ? MC__LOG_DEBUG : MC__LOG_WARN,
                "cannot connect to %s (%s); retrying in %" PRIu64 " ms", cl->name, strerror(-rc),
                cl->backoff_ms);
        client_retry_later(cl);
    }
}

static void keepalive_done(void *arg, int status, const char *body, size_t len) {}

/* Quiet for keepalive_ms: a PING, so that the server does not take the
 * connection for an abandoned one. */
static void client_keepalive(mc_timer_t *t)
{
    mc__rpc_client_t *cl = t->data;
    uint64_t now = mc_loop_now_ms();

    if (!cl->ready || now - cl->last_call_ms < cl->keepalive_ms)
        return;
    cl->last_call_ms = now;
    if (mc__rpc_call(cl->conn, MC__OP_PING, "", 0, cl->keepalive_ms, keepalive_done, NULL) < 0)
        mc__log(MC__LOG_DEBUG, "%s: cannot queue a keepalive PING", cl->name);
}

void mc__rpc_client_resolved(mc__rpc_client_t *cl, const mc__addr_t *a, int rc)
{
    if (!cl->resolving || cl->closing)
        return;
    cl->resolving = 0;
    if (rc < 0) {
        mc__log(cl->failures++ ? MC__LOG_DEBUG : MC__LOG_WARN,
                "cannot find the master (%s); retrying in %" PRIu64 " ms", strerror(-rc),
                cl->backoff_ms);
        client_retry_later(cl);
        return;
    }
    if (a->len != cl->addr.len || memcmp(&a->ss, &cl->addr.ss, a->len))
        cl->hs_last = 0; /* another server: its refusal is news */
    cl->addr = *a;
    mc__addr_format((const struct sockaddr *)&a->ss, a->len, cl->name, sizeof(cl->name));
    cl->resolved = 1;
    client_connect(cl);
}

void mc__rpc_client_reconnect(mc__rpc_client_t *cl)
{
    if (cl->conn && cl->open && !cl->closing)
        mc__conn_abort(cl->conn, -ECONNRESET); /* client_on_close() reconnects */
}

void mc__rpc_client_set_keepalive(mc__rpc_client_t *cl, uint64_t ms)
{
    cl->keepalive_ms = ms;
    cl->keepalive.data = cl;
    if (ms && !cl->closing)
        mc_timer_start(cl->loop, &cl->keepalive, ms, ms, client_keepalive);
    else
        mc_timer_stop(&cl->keepalive);
}

int mc__rpc_client_new(mc_loop_t *l, const mc__addr_t *a, uint64_t connect_timeout_ms,
                       const mc__rpc_client_ops_t *ops, void *data, mc__rpc_client_t **out)
{
    mc__rpc_client_t *cl = calloc(1, sizeof(*cl));
    if (!cl)
        return -ENOMEM;
    cl->loop = l;
    cl->addr = *a;
    mc__addr_format((const struct sockaddr *)&a->ss, a->len, cl->name, sizeof(cl->name));
    cl->connect_timeout_ms = connect_timeout_ms;
    if (ops)
        cl->ops = *ops;
    cl->data = data;
    cl->timer.data = cl;
    cl->backoff_ms = MC__RPC_BACKOFF_MIN_MS;
    cl->last_call_ms = mc_loop_now_ms();
    mc__rpc_client_set_keepalive(cl, MC__RPC_KEEPALIVE_MS);
    client_connect(cl);
    *out = cl;
    return 0;
}

int mc__rpc_client_call(mc__rpc_client_t *cl, uint16_t op, const void *body, size_t len,
                        uint64_t timeout_ms, mc__rpc_cb cb, void *arg)
{
    if (!cl->conn || cl->closing)
        return -ENOTCONN;
    cl->last_call_ms = mc_loop_now_ms();
    return mc__rpc_call(cl->conn, op, body, len, timeout_ms, cb, arg);
}

int mc__rpc_client_call_into(mc__rpc_client_t *cl, uint16_t op, const void *body, size_t len,
                             char *dst, size_t cap, uint64_t timeout_ms, mc__rpc_cb cb, void *arg)
{
    if (!cl->conn || cl->closing)
        return -ENOTCONN;
    cl->last_call_ms = mc_loop_now_ms();
    return mc__rpc_call_into(cl->conn, op, body, len, dst, cap, timeout_ms, cb, arg);
}

int mc__rpc_client_callv(mc__rpc_client_t *cl, uint16_t op, const struct iovec *iov, int n,
                         uint64_t timeout_ms, mc__rpc_cb cb, void *arg)
{
    if (!cl->conn || cl->closing)
        return -ENOTCONN;
    cl->last_call_ms = mc_loop_now_ms();
    return mc__rpc_callv(cl->conn, op, iov, n, timeout_ms, cb, arg);
}

mc__conn_t *mc__rpc_client_conn(const mc__rpc_client_t *cl)
{
    return cl->ready && !cl->closing ? cl->conn : NULL;
}

int mc__rpc_client_handshake_failed(const mc__rpc_client_t *cl)
{
    return cl->hs_last;
}

void *mc__rpc_client_resolve_arg(const mc__rpc_client_t *cl)
{
    return cl->ops.resolve_arg;
}

void *mc__rpc_client_data(const mc__rpc_client_t *cl)
{
    return cl->data;
}

void mc__rpc_client_close(mc__rpc_client_t *cl)
{
    if (cl->closing)
        return;
    cl->closing = 1;
    mc_timer_stop(&cl->timer);
    mc_timer_stop(&cl->keepalive);
    if (cl->conn)
        mc__conn_close(cl->conn); /* client_on_close() frees cl */
    else if (!cl->in_cb)
        free(cl);
}
