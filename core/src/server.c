/*
 * server.c - the protocol server (see server.h).
 *
 * Each accepted connection gets a small state: its owner id for the service
 * (writes in progress and open handles die with the connection) and whether
 * it said HELLO. Requests are answered in the order they complete; here all
 * complete at once, as the service and segment copies do no I/O.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rpc.h"
#include "server.h"

typedef struct sconn {
    mc__server_t *srv;
    mc__conn_t *c;
    uint64_t owner;
    struct sconn *prev, *next;
} sconn_t;

struct mc__server {
    mc_loop_t *loop;
    mc__listener_t *ls;
    mc__server_opts_t o;
    char addr[MC__ADDR_STRLEN];
    uint64_t next_owner;
    sconn_t *conns;
    mc_timer_t tick;
    mc__server_stats_t st;
};

static void bad_frame(sconn_t *sc, const mc__hdr_t *h, const char *why)
{
    sc->srv->st.bad_frames++;
    mc__log(MC__LOG_WARN, "closing %s: %s in %s request", mc__conn_peer(sc->c), why,
            mc__op_name(h->op));
    mc__conn_close(sc->c);
}

static void reply(sconn_t *sc, const mc__hdr_t *h, int status, const void *body, size_t len)
{
    int rc = mc__rpc_reply(sc->c, h, status, body, len);
    if (rc < 0) {
        mc__log(MC__LOG_WARN, "closing %s: cannot queue a reply (%s)", mc__conn_peer(sc->c),
                mc_strerror(rc));
        mc__conn_close(sc->c);
    }
}

static void do_hello(sconn_t *sc, const mc__hdr_t *h, const char *body, size_t len)
{
    uint16_t lo, hi;
    uint32_t role, nlen;
    const char *name;
    if (mc__unpack(body, len, "hhus", &lo, &hi, &role, &name, &nlen) < 0)
        return bad_frame(sc, h, "malformed body");
    if (lo > MC__PROTO_VERSION || hi < MC__PROTO_VERSION) {
        mc__log(MC__LOG_WARN, "closing %s: no common protocol version (it speaks %u..%u)",
                mc__conn_peer(sc->c), lo, hi);
        reply(sc, h, -EPROTONOSUPPORT, NULL, 0);
        mc__conn_close(sc->c);
        return;
    }
    mc__wbuf_t w = {0};
    mc__pack(&w, "hus", (unsigned)MC__PROTO_VERSION, 0u, "", 0u);
    reply(sc, h, w.err ? w.err : 0, w.p, w.len);
    free(w.p);
}

static void do_read(sconn_t *sc, const mc__hdr_t *h, const char *body, size_t len)
{
    uint32_t seg, n;
    uint64_t off;
    char *base;
    uint64_t size;
    if (mc__unpack(body, len, "uqu", &seg, &off, &n) < 0)
        return bad_frame(sc, h, "malformed body");
    if (n > MC__PROTO_CHUNK)
        return reply(sc, h, -EMSGSIZE, NULL, 0);
    if (sc->srv->o.seg_lookup(sc->srv->o.seg_arg, seg, &base, &size) < 0)
        return reply(sc, h, -ENOENT, NULL, 0);
    if (off > size || n > size - off)
        return reply(sc, h, -EINVAL, NULL, 0);
    /* Straight from the segment: the reader's lease or handle keeps these
     * bytes from being reused while they are sent. */
    struct iovec iov = {base + off, n};
    int rc = mc__rpc_replyv(sc->c, h, 0, &iov, 1, NULL, NULL);
    if (rc < 0) {
        mc__log(MC__LOG_WARN, "closing %s: cannot queue a reply (%s)", mc__conn_peer(sc->c),
                mc_strerror(rc));
        mc__conn_close(sc->c);
        return;
    }
    sc->srv->st.bytes_read += n;
}

static void do_write(sconn_t *sc, const mc__hdr_t *h, const char *body, size_t len)
{
    uint32_t seg, n;
    uint64_t off;
    const char *data;
    char *base;
    uint64_t size;
    if (mc__unpack(body, len, "uq*", &seg, &off, &data, &n) < 0)
        return bad_frame(sc, h, "malformed body");
    if (sc->srv->o.seg_lookup(sc->srv->o.seg_arg, seg, &base, &size) < 0)
        return reply(sc, h, -ENOENT, NULL, 0);
    if (off > size || n > size - off)
        return reply(sc, h, -EINVAL, NULL, 0);
    memcpy(base + off, data, n);
    sc->srv->st.bytes_written += n;
    reply(sc, h, 0, NULL, 0);
}

static void on_frame(mc__conn_t *c, const mc__hdr_t *h, const char *body, size_t len)
{
    sconn_t *sc = mc__conn_data(c);
    mc__server_t *srv = sc->srv;
    if (!srv)
        return;
    srv->st.requests++;
    if (h->flags & MC__F_RESPONSE)
        return bad_frame(sc, h, "unexpected response");
    switch (h->op) {
    case MC__OP_HELLO:
        return do_hello(sc, h, body, len);
    case MC__OP_AUTH:
        return reply(sc, h, -EOPNOTSUPP, NULL, 0); /* no secret configured */
    case MC__OP_READ:
        if (!srv->o.seg_lookup)
            return reply(sc, h, -EOPNOTSUPP, NULL, 0);
        return do_read(sc, h, body, len);
    case MC__OP_WRITE:
        if (!srv->o.seg_lookup)
            return reply(sc, h, -EOPNOTSUPP, NULL, 0);
        return do_write(sc, h, body, len);
    case MC__OP_SHM_MAP:
        return reply(sc, h, -EOPNOTSUPP, NULL, 0);
    default:
        break;
    }
    if (!srv->o.svc) {
        if (h->op == MC__OP_PING) {
            mc__wbuf_t w = {0};
            mc__pack(&w, "q", (uint64_t)mc_loop_now_ms());
            reply(sc, h, 0, w.p, w.len);
            free(w.p);
            return;
        }
        return reply(sc, h, -EOPNOTSUPP, NULL, 0);
    }
    mc__wbuf_t w = {0};
    int rc = mc__svc_handle(srv->o.svc, sc->owner, h->op, body, len, mc_loop_now_ms(), &w);
    if (rc == -EBADMSG) {
        free(w.p);
        return bad_frame(sc, h, "malformed body");
    }
    if (rc >= 0 && w.err)
        rc = w.err;
    reply(sc, h, rc, rc >= 0 ? w.p : NULL, rc >= 0 ? w.len : 0);
    free(w.p);
}

static void on_close(mc__conn_t *c, int err)
{
    sconn_t *sc = mc__conn_data(c);
    mc__server_t *srv = sc->srv;
    if (!srv) { /* the server closed first and settled for it */
        free(sc);
        return;
    }
    if (err && err != -ECONNRESET)
        mc__log(MC__LOG_INFO, "connection from %s closed: %s", mc__conn_peer(c), mc_strerror(err));
    if (srv->o.svc)
        mc__svc_owner_gone(srv->o.svc, sc->owner, mc_loop_now_ms());
    if (sc->prev)
        sc->prev->next = sc->next;
    else
        srv->conns = sc->next;
    if (sc->next)
        sc->next->prev = sc->prev;
    free(sc);
}

static const mc__conn_ops_t conn_ops = {.on_frame = on_frame, .on_close = on_close};

static void on_accept(mc__listener_t *ls, mc__conn_t *c)
{
    mc__server_t *srv = mc__listener_data(ls);
    sconn_t *sc = calloc(1, sizeof(*sc));
    if (!sc) {
        mc__conn_close(c);
        return;
    }
    sc->srv = srv;
    sc->c = c;
    sc->owner = ++srv->next_owner;
    sc->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = sc;
    srv->conns = sc;
    srv->st.conns++;
    mc__conn_set_data(c, sc);
}

static void on_tick(mc_timer_t *t)
{
    mc__server_t *srv = t->data;
    mc__svc_stats_t before, after;
    mc__svc_stats(srv->o.svc, &before);
    mc__svc_tick(srv->o.svc, mc_loop_now_ms());
    mc__svc_stats(srv->o.svc, &after);
    if (after.nodes_expired > before.nodes_expired)
        mc__log(MC__LOG_WARN,
                "%llu node(s) silent past their TTL: segments dropped, %llu "
                "object(s) lost",
                (unsigned long long)(after.nodes_expired - before.nodes_expired),
                (unsigned long long)(after.objects_lost - before.objects_lost));
}

int mc__server_new(mc__server_t **out, mc_loop_t *l, const mc__addr_t *a,
                   const mc__server_opts_t *o)
{
    mc__server_t *srv = calloc(1, sizeof(*srv));
    if (!srv)
        return -ENOMEM;
    srv->loop = l;
    srv->o = *o;
    int rc = mc__listen(l, a, &conn_ops, on_accept, srv, &srv->ls);
    if (rc < 0) {
        free(srv);
        return rc;
    }
    const mc__addr_t *b = mc__listener_addr(srv->ls);
    mc__addr_format((const struct sockaddr *)&b->ss, b->len, srv->addr, sizeof(srv->addr));
    if (srv->o.svc) {
        srv->tick.data = srv;
        mc_timer_start(l, &srv->tick, 1000, 1000, on_tick);
    }
    *out = srv;
    return 0;
}

const char *mc__server_addr(const mc__server_t *srv)
{
    return srv->addr;
}

void mc__server_stats(const mc__server_t *srv, mc__server_stats_t *st)
{
    *st = srv->st;
}

void mc__server_close(mc__server_t *srv)
{
    if (!srv)
        return;
    mc_timer_stop(&srv->tick);
    mc__listener_close(srv->ls);
    /* Connections free their state in on_close, from the loop. Detach them
     * from the server first: it is gone by then. */
    for (sconn_t *sc = srv->conns; sc;) {
        sconn_t *next = sc->next;
        if (srv->o.svc)
            mc__svc_owner_gone(srv->o.svc, sc->owner, mc_loop_now_ms());
        sc->srv = NULL;
        mc__conn_close(sc->c);
        sc = next;
    }
    srv->conns = NULL;
    free(srv);
}
