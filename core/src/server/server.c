/*
 * server.c - the protocol server: listeners, connections and sessions
 * (see server.h).
 *
 * Each accepted connection gets a small state: its owner id for the
 * control plane (writes in progress and open handles die with the
 * connection) and where it stands in the session handshake. With a
 * secret, a connection is served nothing but HELLO and AUTH until AUTH has
 * succeeded:
 *
 *   FRESH --HELLO (client nonce)--> CHALLENGED --AUTH (right MAC)--> OPEN
 *      \____ anything else, a wrong MAC: -EACCES, hang up --> REFUSED
 *
 * Without a secret every connection starts OPEN (HELLO is optional), except
 * on a Unix socket from a user other than ours or root: whoever may
 * connect to the socket file, such a stranger is refused -EACCES at its
 * first request (SO_PEERCRED), so that a local user gets from the store no
 * more than from the mount. Without a secret, TCP is served on loopback
 * only (and with a warning: every local user may connect there).
 *
 * Past the handshake, a request goes to a plane by its opcode's range
 * (wire/proto.h): the session's own (HELLO, AUTH) are answered here; the
 * data requests (READ and up) go to the data plane (node/data_plane.c),
 * the rest to the control plane (control_plane.c), PING included when
 * there is a service, which answers it itself; without one PING is
 * answered here. A plane this server was not given answers -EOPNOTSUPP.
 * Requests are answered in the order they complete; here all complete at
 * once, as the service and segment copies do no I/O. A large WRITE's bytes
 * are received straight into the segment (body_dst(), on_placed()).
 *
 * Until a connection has been through the handshake (HELLO without a
 * secret, AUTH with one: `greeted`) the net layer refuses bodies over
 * MC__SERVER_HANDSHAKE_MAX_BODY, and the short handshake timeout applies.
 * A timer sweeps the connections for those idle past their timeout (not
 * one that mapped a segment: it holds a fence slot, data_plane.h); a new
 * connection at the limit evicts the oldest one not yet greeted.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "runtime/auth.h"
#include "runtime/log.h"
#include "runtime/rpc.h"
#include "server/control_plane.h"
#include "server/server.h"
#include "transport/shm.h"

enum sess { S_FRESH, S_CHALLENGED, S_OPEN, S_REFUSED };

typedef struct sconn {
    mc__server_t *srv;
    mc__conn_t *c;
    uint64_t owner;
    enum sess sess;
    int said_hello;
    int greeted;           /* through the handshake: the full body limit and idle timeout */
    int dropped;           /* closed for a timeout or to make room, with a line saying why */
    uint64_t last_ms;      /* when its last whole frame arrived (or it was accepted) */
    int stranger;          /* a Unix peer of another user, and no secret: refused */
    uid_t uid;             /* the Unix peer's user (SO_PEERCRED) */
    mc__placing_t placing; /* a WRITE being received in place (placing.n 1) */
    int mapped;            /* holds a fence slot (SHM_MAP): never idle (data_plane.h) */
    unsigned char cnonce[MC__AUTH_NONCE], snonce[MC__AUTH_NONCE];
    struct sconn *prev, *next;
} sconn_t;

struct mc__server {
    mc_loop_t *loop;
    mc__listener_t *ls;
    mc__listener_t *shm_ls; /* the abstract Unix socket of SHM_MAP, or NULL */
    mc__server_opts_t o;
    char addr[MC__ADDR_STRLEN];
    uint64_t next_owner;
    sconn_t *conns;  /* newest first */
    unsigned nconns; /* in conns, closing ones included: they hold a descriptor */
    unsigned max_conns;
    uint64_t full_logged_ms; /* when "at the limit" was last logged */
    mc_timer_t sweep;
    mc__control_plane_t control; /* started with o.svc */
    mc__data_plane_t data;       /* with o.seg_lookup */
    mc__server_stats_t st;       /* the planes count their own bytes and maps */
    mc__send_budget_t budget;    /* the answers queued to a master's peers (net.h) */
};

/* The handshake is done: lift the handshake's limits. */
static void greet(sconn_t *sc)
{
    sc->greeted = 1;
    mc__conn_set_max_body(sc->c, 0);
}

static void bad_frame(sconn_t *sc, const mc__hdr_t *h, const char *why)
{
    sc->srv->st.bad_frames++;
    mc__log(MC__LOG_WARN, "closing %s: %s in %s request", mc__conn_peer(sc->c), why,
            mc__op_name(h->op));
    mc__conn_close(sc->c);
}

/* A reply could not be queued (rc < 0): hang up. */
static void cannot_reply(sconn_t *sc, int rc)
{
    mc__log(MC__LOG_WARN, "closing %s: cannot queue a reply (%s)", mc__conn_peer(sc->c),
            mc_strerror(rc));
    mc__conn_close(sc->c);
}

static void reply(sconn_t *sc, const mc__hdr_t *h, int status, const void *body, size_t len)
{
    int rc = mc__rpc_reply(sc->c, h, status, body, len);
    if (rc < 0)
        cannot_reply(sc, rc);
}

/* Settles what a plane's handler returned (data_plane.h, control_plane.h). */
static void planed(sconn_t *sc, const mc__hdr_t *h, int rc)
{
    if (rc == -EBADMSG)
        bad_frame(sc, h, "malformed body");
    else if (rc < 0)
        cannot_reply(sc, rc);
}

/* Answers h with -EACCES and hangs up once the answer is out. */
static void refuse(sconn_t *sc, const mc__hdr_t *h, const char *why)
{
    sc->srv->st.refused++;
    sc->sess = S_REFUSED;
    mc__log(MC__LOG_WARN, "closing %s: %s (%s request)", mc__conn_peer(sc->c), why,
            mc__op_name(h->op));
    reply(sc, h, -EACCES, NULL, 0);
    mc__conn_shutdown(sc->c);
}

static void do_hello(sconn_t *sc, const mc__hdr_t *h, const char *body, size_t len)
{
    const mc__secret_t *secret = sc->srv->o.secret;
    uint16_t lo, hi;
    uint32_t role, nlen, clen;
    const char *name, *cnonce;
    if (mc__unpack(body, len, "hhuss", &lo, &hi, &role, &name, &nlen, &cnonce, &clen) < 0)
        return bad_frame(sc, h, "malformed body");
    if (sc->said_hello)
        return secret ? refuse(sc, h, "a second HELLO") : reply(sc, h, -EPROTO, NULL, 0);
    sc->said_hello = 1;
    if (lo > MC__PROTO_SESSION || hi < MC__PROTO_SESSION) {
        mc__log(MC__LOG_WARN, "closing %s: no common protocol version (it speaks %u..%u)",
                mc__conn_peer(sc->c), lo, hi);
        reply(sc, h, -EPROTONOSUPPORT, NULL, 0);
        mc__conn_shutdown(sc->c);
        return;
    }
    mc__log(MC__LOG_DEBUG, "%s: HELLO from %.*s (role %u)", mc__conn_peer(sc->c),
            (int)(nlen > 64 ? 64 : nlen), name, role);
    mc__wbuf_t w = {0};
    if (!secret) {
        mc__pack(&w, "huss", (unsigned)MC__PROTO_SESSION, 0u, "", 0u, "", 0u);
        greet(sc);
    } else {
        if (clen != MC__AUTH_NONCE)
            return refuse(sc, h, "HELLO without a client nonce, and a secret is required");
        unsigned char proof[MC__AUTH_MAC];
        memcpy(sc->cnonce, cnonce, MC__AUTH_NONCE);
        mc__auth_nonce(sc->snonce);
        mc__auth_mac(secret, MC__AUTH_LABEL_SERVER, sc->cnonce, sc->snonce, proof);
        mc__pack(&w, "huss", (unsigned)MC__PROTO_SESSION, 1u, sc->snonce, (uint32_t)MC__AUTH_NONCE,
                 proof, (uint32_t)MC__AUTH_MAC);
        sc->sess = S_CHALLENGED;
    }
    reply(sc, h, w.err ? w.err : 0, w.p, w.len);
    free(w.p);
}

static void do_auth(sconn_t *sc, const mc__hdr_t *h, const char *body, size_t len)
{
    const char *mac;
    uint32_t mlen;
    if (!sc->srv->o.secret)
        return reply(sc, h, -EOPNOTSUPP, NULL, 0); /* no secret configured */
    if (mc__unpack(body, len, "s", &mac, &mlen) < 0)
        return bad_frame(sc, h, "malformed body");
    if (sc->sess != S_CHALLENGED)
        return refuse(sc, h, sc->sess == S_OPEN ? "a second AUTH" : "AUTH before HELLO");
    if (mc__auth_check(sc->srv->o.secret, MC__AUTH_LABEL_CLIENT, sc->snonce, sc->cnonce, mac,
                       mlen) < 0)
        return refuse(sc, h, "authentication failed (wrong secret)");
    sc->sess = S_OPEN;
    greet(sc);
    mc__log(MC__LOG_DEBUG, "%s: authenticated", mc__conn_peer(sc->c));
    reply(sc, h, 0, NULL, 0);
}

static void on_frame(mc__conn_t *c, const mc__hdr_t *h, const char *body, size_t len)
{
    sconn_t *sc = mc__conn_data(c);
    mc__server_t *srv = sc ? sc->srv : NULL;
    if (!srv)
        return;
    srv->st.requests++;
    if (h->op < MC__SERVER_OPS)
        srv->st.op_requests[h->op]++;
    sc->last_ms = mc_loop_now_ms();
    if (h->flags & MC__F_RESPONSE)
        return bad_frame(sc, h, "unexpected response");
    if (sc->stranger) {
        char why[96];
        snprintf(why, sizeof(why), "uid %u is not this server's user, and no secret is set",
                 (unsigned)sc->uid);
        return refuse(sc, h, why);
    }
    if (sc->sess != S_OPEN && h->op != MC__OP_HELLO && h->op != MC__OP_AUTH)
        return refuse(sc, h, "a request before authentication");
    if (h->op == MC__OP_HELLO)
        return do_hello(sc, h, body, len);
    if (h->op == MC__OP_AUTH)
        return do_auth(sc, h, body, len);
    if (h->op >= MC__OP_READ) { /* data */
        if (!srv->o.seg_lookup)
            return reply(sc, h, -EOPNOTSUPP, NULL, 0);
        int rc = mc__data_plane_handle(&srv->data, sc->c, h, body, len);
        if (h->op == MC__OP_SHM_MAP)
            sc->mapped = mc__data_plane_maps(&srv->data, sc->c);
        return planed(sc, h, rc);
    }
    if (srv->o.svc) /* control */
        return planed(sc, h,
                      mc__control_plane_handle(&srv->control, sc->owner, sc->c, h, body, len));
    if (h->op == MC__OP_PING) {
        mc__wbuf_t w = {0};
        mc__pack(&w, "q", (uint64_t)mc_loop_now_ms());
        reply(sc, h, 0, w.p, w.len);
        free(w.p);
        return;
    }
    reply(sc, h, -EOPNOTSUPP, NULL, 0);
}

static void on_close(mc__conn_t *c, int err)
{
    sconn_t *sc = mc__conn_data(c);
    if (!sc) /* turned away at the door */
        return;
    mc__server_t *srv = sc->srv;
    if (!srv) { /* the server closed first and settled for it */
        free(sc);
        return;
    }
    if (sc->dropped) {
        /* closed by us, who said why */
    } else if (sc->sess == S_CHALLENGED) {
        /* A client that finds our proof wrong hangs up without AUTH. */
        srv->st.refused++;
        mc__log(MC__LOG_WARN,
                "%s hung up before authenticating: it lacks the secret, or has another one",
                mc__conn_peer(c));
    } else if (err && err != -ECONNRESET) {
        mc__log(MC__LOG_INFO, "connection from %s closed: %s", mc__conn_peer(c), mc_strerror(err));
    }
    if (sc->placing.n) /* closed half-way through a WRITE's body */
        mc__data_plane_unplace(&srv->data, &sc->placing);
    if (sc->mapped)
        mc__data_plane_closed(&srv->data, c);
    mc__control_plane_owner_gone(&srv->control, sc->owner);
    if (sc->prev)
        sc->prev->next = sc->next;
    else
        srv->conns = sc->next;
    if (sc->next)
        sc->next->prev = sc->prev;
    srv->nconns--;
    free(sc);
}

/* A large WRITE past the handshake is received straight into the segment
 * (data_plane.h); every other frame goes to on_frame whole. */
static char *body_dst(mc__conn_t *c, const mc__hdr_t *h, const char *head, size_t *skip)
{
    sconn_t *sc = mc__conn_data(c);
    mc__server_t *srv = sc ? sc->srv : NULL;
    if (!srv || !srv->o.seg_lookup || sc->stranger || sc->sess != S_OPEN)
        return NULL;
    return mc__data_plane_place(&srv->data, h, head, skip, &sc->placing);
}

static void on_placed(mc__conn_t *c, const mc__hdr_t *h, const char *head, size_t skip)
{
    (void)head;
    (void)skip;
    sconn_t *sc = mc__conn_data(c);
    mc__server_t *srv = sc ? sc->srv : NULL;
    if (!srv)
        return;
    srv->st.requests++;
    srv->st.op_requests[MC__OP_WRITE]++; /* the only request placed */
    sc->last_ms = mc_loop_now_ms();
    mc__placing_t pl = sc->placing;
    sc->placing.n = 0;
    planed(sc, h, mc__data_plane_placed(&srv->data, sc->c, h, &pl));
}

static const mc__conn_ops_t conn_ops = {
    .on_frame = on_frame, .on_close = on_close, .body_dst = body_dst, .on_placed = on_placed};

/*
 * At the connection limit: closes the oldest connection not yet through its
 * handshake, so that idle strangers cannot keep a client out, and returns
 * 1; or returns 0 when every connection is greeted.
 */
static int evict_one(mc__server_t *srv, const char *newcomer)
{
    sconn_t *oldest = NULL;
    for (sconn_t *sc = srv->conns; sc; sc = sc->next)
        if (!sc->greeted && !sc->dropped && !mc__conn_is_closing(sc->c))
            oldest = sc;
    if (!oldest)
        return 0;
    srv->st.evicted++;
    oldest->dropped = 1;
    mc__log(MC__LOG_INFO,
            "closing %s: %u connections, the limit, and %s came in before its handshake",
            mc__conn_peer(oldest->c), srv->max_conns, newcomer);
    mc__conn_close(oldest->c);
    return 1;
}

static void on_accept(mc__listener_t *ls, mc__conn_t *c)
{
    mc__server_t *srv = mc__listener_data(ls);
    if (srv->nconns >= srv->max_conns && !evict_one(srv, mc__conn_peer(c))) {
        uint64_t now = mc_loop_now_ms();
        srv->st.turned_away++;
        if (now - srv->full_logged_ms >= 1000) { /* once a second at most */
            srv->full_logged_ms = now;
            mc__log(MC__LOG_WARN, "turning %s away: %u connections, the limit, all in session",
                    mc__conn_peer(c), srv->max_conns);
        }
        mc__conn_set_data(c, NULL);
        mc__conn_close(c);
        return;
    }
    sconn_t *sc = calloc(1, sizeof(*sc));
    if (!sc) {
        mc__conn_set_data(c, NULL);
        mc__conn_close(c);
        return;
    }
    sc->srv = srv;
    sc->c = c;
    sc->owner = ++srv->next_owner;
    sc->sess = srv->o.secret ? S_FRESH : S_OPEN;
    sc->last_ms = mc_loop_now_ms();
    mc__conn_set_max_body(c, MC__SERVER_HANDSHAKE_MAX_BODY);
    /* Every request queues its answer: a peer with more answers in flight
     * than half the send bound waits for them (net.h) rather than being
     * hung up on when the bound is reached. */
    mc__conn_set_backpressure(c, MC__CONN_MAX_QUEUED / 2);
    /* And a master's answers are copies: across its peers they stay about
     * within its budget, however many peers do not read theirs. */
    if (srv->o.svc)
        mc__conn_set_budget(c, &srv->budget);
    srv->nconns++;
    if (!srv->o.secret && mc__conn_is_unix(c))
        sc->stranger =
            mc__conn_peer_cred(c, &sc->uid, NULL) < 0 || (sc->uid != geteuid() && sc->uid != 0);
    sc->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = sc;
    srv->conns = sc;
    srv->st.conns++;
    mc__conn_set_data(c, sc);
}

/* Closes the connections that sent nothing for their timeout. One whose
 * replies are still queued is not idle: its send timeout bounds it. */
static void on_sweep(mc_timer_t *t)
{
    mc__server_t *srv = t->data;
    uint64_t now = mc_loop_now_ms();
    for (sconn_t *sc = srv->conns; sc; sc = sc->next) {
        uint64_t limit = sc->greeted ? srv->o.idle_timeout_ms : srv->o.handshake_timeout_ms;
        if (sc->dropped || sc->mapped || now - sc->last_ms < limit || mc__conn_queued(sc->c) ||
            mc__conn_is_closing(sc->c))
            continue;
        sc->dropped = 1;
        srv->st.timed_out++;
        if (sc->greeted)
            mc__log(MC__LOG_INFO, "closing %s: idle for %llu ms", mc__conn_peer(sc->c),
                    (unsigned long long)(now - sc->last_ms));
        else
            mc__log(MC__LOG_INFO, "closing %s: no handshake after %llu ms idle",
                    mc__conn_peer(sc->c), (unsigned long long)(now - sc->last_ms));
        mc__conn_abort(sc->c, -ETIMEDOUT);
    }
}

/* The default connection limit: what RLIMIT_NOFILE leaves to connections. */
static unsigned default_max_conns(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= 8 * (rlim_t)MC__SERVER_MAX_CONNS)
        return MC__SERVER_MAX_CONNS;
    rlim_t n = rl.rlim_cur, keep = n / 8 > 32 ? n / 8 : 32;
    if (keep > n / 2)
        keep = n / 2;
    n -= keep;
    if (n > MC__SERVER_MAX_CONNS)
        n = MC__SERVER_MAX_CONNS;
    return n ? (unsigned)n : 1;
}

/* Listens on the abstract Unix name of our TCP address, for SHM_MAP. */
static void shm_listen(mc__server_t *srv)
{
    char name[MC__ADDR_STRLEN];
    mc__addr_t ua;
    int rc = mc__shm_unix_addr(srv->addr, name, sizeof(name));
    if (rc == 0)
        rc = mc__addr_parse(name, -1, &ua);
    if (rc == 0)
        rc = mc__listen(srv->loop, &ua, &conn_ops, on_accept, srv, &srv->shm_ls);
    if (rc < 0) {
        mc__log(MC__LOG_INFO, "not offering shared memory on %s: %s", name, mc_strerror(rc));
        srv->shm_ls = NULL;
        return;
    }
    srv->data.shm = 1;
}

/* Without a secret, whoever reaches a TCP address reads and writes every
 * key: refuse one beyond this host, and say so for loopback. */
static int check_reach(const mc__addr_t *a, const mc__server_opts_t *o)
{
    char name[MC__ADDR_STRLEN];
    if (o->secret || a->ss.ss_family == AF_UNIX)
        return 0;
    mc__addr_format((const struct sockaddr *)&a->ss, a->len, name, sizeof(name));
    if (!mc__addr_is_loopback(a)) {
        mc__log(MC__LOG_ERROR,
                "refusing to serve %s without a shared secret: whoever reaches it could read "
                "and write every key (give --auth-secret-file F, or listen on loopback or a "
                "unix:/path)",
                name);
        return -EACCES;
    }
    mc__log(MC__LOG_WARN,
            "serving %s without a shared secret: any local user can read and write every key "
            "there (give --auth-secret-file F, or listen on a unix:/path)",
            name);
    return 0;
}

int mc__server_new(mc__server_t **out, mc_loop_t *l, const mc__addr_t *a,
                   const mc__server_opts_t *o)
{
    int rc = check_reach(a, o);
    if (rc < 0)
        return rc;
    mc__server_t *srv = calloc(1, sizeof(*srv));
    if (!srv)
        return -ENOMEM;
    srv->loop = l;
    srv->o = *o;
    if (!srv->o.idle_timeout_ms)
        srv->o.idle_timeout_ms = MC__SERVER_IDLE_TIMEOUT_MS;
    if (!srv->o.handshake_timeout_ms)
        srv->o.handshake_timeout_ms = MC__SERVER_HANDSHAKE_TIMEOUT_MS;
    srv->max_conns = srv->o.max_conns ? srv->o.max_conns : default_max_conns();
    srv->budget.limit = srv->o.answer_budget ? srv->o.answer_budget : MC__SERVER_ANSWER_BUDGET;
    rc = mc__listen(l, a, &conn_ops, on_accept, srv, &srv->ls);
    if (rc < 0) {
        free(srv);
        return rc;
    }
    const mc__addr_t *b = mc__listener_addr(srv->ls);
    mc__addr_format((const struct sockaddr *)&b->ss, b->len, srv->addr, sizeof(srv->addr));
    srv->data = (mc__data_plane_t){.lookup = o->seg_lookup, .arg = o->seg_arg};
    if (o->shm && o->seg_lookup && b->ss.ss_family == AF_UNIX)
        srv->data.shm = 1; /* SHM_MAP on the Unix socket we serve */
    else if (o->shm && o->seg_lookup)
        shm_listen(srv); /* answers SHM_MAP once it listens */
    if (srv->o.svc)
        mc__control_plane_start(&srv->control, l, srv->o.svc, srv->o.ha);
    /* Often enough that a connection outlives its timeout by a quarter of
     * the shorter one at most (and by 1 s at most). */
    uint64_t every = srv->o.idle_timeout_ms < srv->o.handshake_timeout_ms
                         ? srv->o.idle_timeout_ms
                         : srv->o.handshake_timeout_ms;
    every = every / 4 > 1000 ? 1000 : every / 4 < 10 ? 10 : every / 4;
    srv->sweep.data = srv;
    mc_timer_start(l, &srv->sweep, every, every, on_sweep);
    mc__log(MC__LOG_DEBUG,
            "%s: at most %u connections, idle timeout %llu ms (%llu ms before the handshake)",
            srv->addr, srv->max_conns, (unsigned long long)srv->o.idle_timeout_ms,
            (unsigned long long)srv->o.handshake_timeout_ms);
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
    st->bytes_read = srv->data.bytes_read;
    st->bytes_written = srv->data.bytes_written;
    st->bytes_placed = srv->data.bytes_placed;
    st->shm_maps = srv->data.shm_maps;
    st->writes_fenced = srv->data.writes_fenced;
    st->open_conns = srv->nconns;
    st->answers_queued = srv->budget.queued;
    st->budget_pauses = srv->budget.pauses;
    _Static_assert(sizeof(st->op_errors) == sizeof(srv->control.op_errors), "op_errors");
    memcpy(st->op_errors, srv->control.op_errors, sizeof(st->op_errors));
}

void mc__server_close(mc__server_t *srv)
{
    if (!srv)
        return;
    mc__control_plane_stop(&srv->control);
    mc_timer_stop(&srv->sweep);
    mc__listener_close(srv->ls);
    if (srv->shm_ls)
        mc__listener_close(srv->shm_ls);
    /* Connections free their state in on_close, from the loop. Detach them
     * from the server first: it is gone by then. */
    for (sconn_t *sc = srv->conns; sc;) {
        sconn_t *next = sc->next;
        mc__control_plane_owner_gone(&srv->control, sc->owner);
        mc__conn_set_budget(sc->c, NULL); /* it is the server's */
        sc->srv = NULL;
        mc__conn_close(sc->c);
        sc = next;
    }
    srv->conns = NULL;
    mc__data_plane_fini(&srv->data);
    free(srv);
}

uint64_t mc__server_enforced(mc__server_t *srv, uint32_t seg, uint64_t epoch)
{
    return srv ? mc__data_plane_enforced(&srv->data, seg, epoch) : epoch;
}

mc__data_plane_t *mc__server_data_plane(mc__server_t *srv)
{
    return srv && srv->o.seg_lookup ? &srv->data : NULL;
}
