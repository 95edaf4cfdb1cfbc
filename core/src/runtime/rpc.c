/*
 * rpc.c - request/response calls on a conn (see rpc.h; the reconnecting
 * client over them is rpc_client.c).
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
    if (k->held) /* an answer that came first does not hide a failed send */
        call_deliver(k, status < 0 && k->held_status >= 0 ? status : k->held_status, NULL, 0);
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
    if (k->sending) {
        /* Answered before the conn sent all of its body (a peer that does
         * not wait for a whole request): cb waits for the send (call_sent()),
         * as for a timeout, so that the caller's buffers stay untouched. */
        k->held = 1;
        k->held_status = h->status;
    } else {
        call_deliver(k, h->status, body, len);
    }
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
