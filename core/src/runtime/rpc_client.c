/*
 * rpc_client.c - the reconnecting client (see rpc.h): one address, a conn
 * made again after each close with exponential backoff (shorter while an
 * ops.resolve callback finds the server), an optional handshake before
 * it is ready, and keepalives on an idle session. Its calls are rpc.c's on
 * the current conn (connecting or open); while it backs off with no conn,
 * or once closing, they fail at once with -ENOTCONN.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/log.h"
#include "runtime/rpc.h"

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
