/*
 * test_rpc.c - unit tests for calls over framed connections (rpc.h): time
 * outs, late replies, a server closing with calls pending, a client that
 * reconnects and keeps alive, and the server's connection and handshake
 * limits (server.h). The harness is net_harness.h, shared with test_net.c.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "net_harness.h"

/* ======== calls ======== */

static void test_rpc_timeout_and_late_reply(void **state)
{
    struct env *e = *state;
    struct server s;
    struct client *k = calloc(1, sizeof(*k));
    struct result r;

    server_start(&s, e->sl, "127.0.0.1:0", SRV_SILENT);
    client_connect(k, e->cl, &s.addr);
    assert_int_equal(call(k, MC__OP_PING, "", 200, &r), 0);
    WAIT_FOR(atomic_load(&r.done), 3000);
    assert_int_equal(r.status, -ETIMEDOUT);
    assert_cmp(r.t1 - r.t0, >=, 195);
    assert_cmp(r.t1 - r.t0, <, 1000);
    assert_int_equal(call(k, MC__OP_PING, "", 0, &r), -EINVAL);
    server_stop(&s);
    WAIT_FOR(atomic_load(&k->closed), 2000);

    /* A reply after the timeout is dropped; the conn carries on. The
     * server answers each request SLOW_MS after it came, in order, so the
     * first call's late reply arrives before the second call's: the
     * second's answer comes only after the late one was dropped. */
    server_start(&s, e->sl, "127.0.0.1:0", SRV_SLOW);
    client_connect(k, e->cl, &s.addr);
    assert_int_equal(call(k, MC__OP_PING, "", 100, &r), 0);
    WAIT_FOR(atomic_load(&r.done), 3000);
    assert_int_equal(r.status, -ETIMEDOUT);
    assert_int_equal(call(k, MC__OP_PING, "", 2000, &r), 0);
    WAIT_FOR(atomic_load(&r.done), 3000);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.len, 4);
    assert_memory_equal(r.body, "late", 4);
    client_close(k);
    server_stop(&s);
    free(k);
}

static void test_rpc_server_close_fails_pending(void **state)
{
    struct env *e = *state;
    struct server s;
    struct client *k = calloc(1, sizeof(*k));
    struct result r[5];

    server_start(&s, e->sl, "127.0.0.1:0", SRV_SILENT);
    client_connect(k, e->cl, &s.addr);
    struct call_req q = {.c = k->c, .op = MC__OP_PING, .timeout_ms = 10000, .res = r, .n = 5};
    run_on(e->cl, call_fn, &q);
    assert_int_equal(q.rc, 0);
    WAIT_FOR(atomic_load(&s.frames) == 5, 2000);
    uint64_t t0 = mc_loop_now_ms();
    server_stop(&s);
    for (int i = 0; i < 5; i++) {
        WAIT_FOR(atomic_load(&r[i].done), 2000);
        if (r[i].status != -ECONNRESET && r[i].status != -EPIPE)
            fail_msg("call %d: status %d, expected -ECONNRESET or -EPIPE", i, r[i].status);
    }
    assert_cmp(mc_loop_now_ms() - t0, <, 2000);
    WAIT_FOR(atomic_load(&k->closed), 2000);
    assert_int_equal(atomic_load(&k->close_err), -ECONNRESET);
    free(k);
}

/* Closing a conn mid-flight: zero-copy sends and calls fail once, before on_close. */
struct midflight {
    struct env *e;
    mc__conn_t *c;
    int fd;
    unsigned char *bufs[8];
    atomic_int dones, cancelled, closed, close_err, dones_at_close, calls_at_close;
    struct result res[3];
};

static void mid_done(void *arg, int status)
{
    struct midflight *m = arg;
    CHECK(status == 0 || status == -ECANCELED);
    for (int i = 0; i < 3; i++) /* sends complete before calls fail */
        CHECK(atomic_load(&m->res[i].done) == 0);
    if (status < 0)
        atomic_fetch_add(&m->cancelled, 1);
    atomic_fetch_add(&m->dones, 1);
}

static void mid_close(mc__conn_t *c, int err)
{
    struct midflight *m = mc__conn_data(c);

    atomic_store(&m->dones_at_close, atomic_load(&m->dones));
    int calls = 0;
    for (int i = 0; i < 3; i++)
        calls += atomic_load(&m->res[i].done);
    atomic_store(&m->calls_at_close, calls);
    for (int i = 0; i < 8; i++) {
        free(m->bufs[i]); /* nobody refers to them any more */
        m->bufs[i] = NULL;
    }
    atomic_store(&m->close_err, err);
    atomic_store(&m->closed, 1);
}

static const mc__conn_ops_t mid_ops = {.on_frame = bound_frame, .on_close = mid_close};

static void mid_start_fn(void *arg)
{
    struct midflight *m = arg;
    mc__hdr_t h = {.op = MC__OP_WRITE};

    CHECK(mc__conn_start(m->e->cl, m->fd, NULL, &mid_ops, m, &m->c) == 0);
    for (int i = 0; i < 8; i++) {
        m->bufs[i] = malloc(1 << 20);
        memset(m->bufs[i], i, 1 << 20);
        struct iovec iov = {m->bufs[i], 1 << 20};
        CHECK(mc__conn_send_iov(m->c, &h, &iov, 1, mid_done, m) == 0);
    }
    for (int i = 0; i < 3; i++)
        CHECK(mc__rpc_call(m->c, MC__OP_PING, NULL, 0, 10000, result_cb, &m->res[i]) == 0);
}

static void mid_close_fn(void *arg)
{
    struct midflight *m = arg;
    struct result r;

    mc__conn_close(m->c);
    mc__conn_close(m->c); /* idempotent */
    CHECK(mc__rpc_call(m->c, MC__OP_PING, NULL, 0, 1000, result_cb, &r) == -EPIPE);
    mc__hdr_t h = {.op = MC__OP_PING};
    CHECK(mc__conn_send(m->c, &h, NULL, 0) == -EPIPE);
    CHECK(atomic_load(&m->closed) == 0); /* on_close comes from the loop */
}

static void test_close_midflight(void **state)
{
    struct env *e = *state;
    struct midflight *m = calloc(1, sizeof(*m));
    int sv[2];

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    m->e = e;
    m->fd = sv[0];
    run_on(e->cl, mid_start_fn, m);
    /* Some bytes go out; the rest (8 MiB, past any socket buffer) wait:
     * nobody reads sv[1]. */
    int queued = 0;
    WAIT_FOR(ioctl(sv[1], FIONREAD, &queued) == 0 && queued > 0, 3000);
    run_on(e->cl, mid_close_fn, m);
    WAIT_FOR(atomic_load(&m->closed), 3000);
    assert_int_equal(atomic_load(&m->close_err), 0);
    assert_int_equal(atomic_load(&m->dones_at_close), 8);
    assert_int_equal(atomic_load(&m->calls_at_close), 3); /* and before on_close */
    assert_cmp(atomic_load(&m->cancelled), >=, 6);
    for (int i = 0; i < 3; i++) {
        WAIT_FOR(atomic_load(&m->res[i].done), 1000);
        assert_int_equal(m->res[i].status, -ECANCELED);
    }
    close(sv[1]);
    free(m);
}

/* ======== calls that find the send queue full ======== */

#define WQ_CALLS 12
#define WQ_BODY (1 << 20)
#define WQ_PACE_MS 100     /* the slow peer answers one frame in this long */
#define WQ_TIMEOUT_MS 1000 /* less than the whole run takes, at that pace */

/* The slow peer keeps a schedule: it answers no earlier than at, on
 * mc_loop_now_ms()'s clock (CLOCK_MONOTONIC), so that how long a run takes
 * follows from the schedule, not from how long each step happened to take. */
static void peer_wait_until(uint64_t at)
{
    struct timespec ts = {(time_t)(at / 1000), (long)(at % 1000) * 1000000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

struct wq_case {
    struct env *e;
    mc__conn_t *c;
    int fd;
    unsigned char *buf; /* the WRITE calls' bodies, WQ_CALLS * WQ_BODY */
    struct result res[WQ_CALLS + 2];
    int rc[WQ_CALLS + 2];
    atomic_int closed, close_err, done_at_close;
};

static void wq_close(mc__conn_t *c, int err)
{
    struct wq_case *w = mc__conn_data(c);
    int done = 0;
    for (int i = 0; i < WQ_CALLS + 2; i++)
        done += atomic_load(&w->res[i].done);
    atomic_store(&w->done_at_close, done);
    atomic_store(&w->close_err, err);
    atomic_store(&w->closed, 1);
}

static const mc__conn_ops_t wq_ops = {.on_frame = bound_frame, .on_close = wq_close};

/* Starts the conn with room for one frame of WQ_BODY bytes, then makes
 * WQ_CALLS WRITE calls of WQ_BODY bytes each (their bodies gathered
 * straight from w->buf) and two PINGs, all at once. */
static void wq_start_fn(void *arg)
{
    struct wq_case *w = arg;

    CHECK(mc__conn_start(w->e->cl, w->fd, NULL, &wq_ops, w, &w->c) == 0);
    mc__conn_set_limits(w->c, 2 * WQ_BODY, 0, 0);
    for (int i = 0; i < WQ_CALLS + 2; i++) {
        struct result *r = &w->res[i];
        r->t0 = mc_loop_now_ms();
        if (i < WQ_CALLS) {
            struct iovec iov = {w->buf + (size_t)i * WQ_BODY, WQ_BODY};
            w->rc[i] = mc__rpc_callv(w->c, MC__OP_WRITE, &iov, 1, WQ_TIMEOUT_MS, result_cb, r);
        } else {
            w->rc[i] = mc__rpc_call(w->c, MC__OP_PING, "p", 1, WQ_TIMEOUT_MS, result_cb, r);
        }
        CHECK(atomic_load(&r->done) == 0); /* never inside the call */
    }
}

static void wq_close_fn(void *arg)
{
    mc__conn_close(((struct wq_case *)arg)->c);
}

/* A socket pair whose kernel buffers are small (64 KiB), so that a frame
 * of 1 MiB waits in the conn's queue until the peer reads it, whatever
 * the machine's defaults; the peer's end (sv[1]) gives up a read after
 * 3 s. */
static void small_pair(int sv[2])
{
    int small = 64 << 10;
    struct timeval tv = {3, 0};

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
        assert_int_equal(setsockopt(sv[i], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
    }
    assert_int_equal(setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
}

static struct wq_case *wq_new(struct env *e, int *peer)
{
    struct wq_case *w = calloc(1, sizeof(*w));
    int sv[2];

    small_pair(sv);
    w->e = e;
    w->fd = sv[0];
    *peer = sv[1];
    w->buf = malloc((size_t)WQ_CALLS * WQ_BODY);
    for (int i = 0; i < WQ_CALLS; i++)
        fill(w->buf + (size_t)i * WQ_BODY, (uint64_t)i, WQ_BODY);
    return w;
}

/* Reads exactly n bytes from fd. */
static void read_exact(int fd, void *p, size_t n)
{
    while (n) {
        ssize_t r = read_retry(fd, p, n);
        assert_true(r > 0);
        p = (char *)p + r;
        n -= (size_t)r;
    }
}

/* A full send queue (mc__conn_set_limits()) used to fail a call with
 * -ENOBUFS at once: a put over TCP of more than the queue's 64 MiB, or
 * many smaller ones at once to one node, failed so. Now a call that finds
 * no room waits for it: every call goes out, in the order made, and each
 * call's time starts once its frame is queued, so a slow peer that
 * answers every frame within the timeout fails none, though the last
 * answer comes long after the first call was made. */
static void test_calls_wait_for_room_in_a_full_send_queue(void **state)
{
    struct env *e = *state;
    int peer;
    struct wq_case *w = wq_new(e, &peer);
    char *body = malloc(WQ_BODY);

    run_on(e->cl, wq_start_fn, w);
    for (int i = 0; i < WQ_CALLS + 2; i++)
        assert_int_equal(w->rc[i], 0);
    uint64_t last_id = 0;
    for (int i = 0; i < WQ_CALLS + 2; i++) {
        unsigned char hdr[MC__PROTO_HDR_SIZE];
        mc__hdr_t h;
        read_exact(peer, hdr, sizeof(hdr));
        assert_int_equal(mc__hdr_decode(hdr, sizeof(hdr), &h), 0);
        assert_int_equal(h.op, i < WQ_CALLS ? MC__OP_WRITE : MC__OP_PING);
        assert_int_equal(h.len, i < WQ_CALLS ? WQ_BODY : 1);
        read_exact(peer, body, h.len);
        if (i < WQ_CALLS)
            assert_true(matches(body, (uint64_t)i, WQ_BODY));
        if (i) /* in the order made */
            assert_cmp(h.id, >, last_id);
        last_id = h.id;
        peer_wait_until(w->res[0].t0 + (uint64_t)(i + 1) * WQ_PACE_MS);
        mc__hdr_t a = {.magic = MC__PROTO_MAGIC,
                       .version = MC__PROTO_VERSION,
                       .op = h.op,
                       .flags = MC__F_RESPONSE,
                       .id = h.id};
        mc__hdr_encode(hdr, &a);
        write_all(peer, hdr, sizeof(hdr));
    }
    for (int i = 0; i < WQ_CALLS + 2; i++) {
        WAIT_FOR(atomic_load(&w->res[i].done), 3000);
        if (w->res[i].status != 0)
            fail_msg("call %d: status %d", i, w->res[i].status);
    }
    /* The run took longer than one call may (the schedule's last answer
     * comes (WQ_CALLS + 2) * WQ_PACE_MS after the first call): the last
     * calls waited for room before their time started. */
    assert_cmp(w->res[WQ_CALLS + 1].t1 - w->res[0].t0, >, WQ_TIMEOUT_MS);
    run_on(e->cl, wq_close_fn, w);
    WAIT_FOR(atomic_load(&w->closed), 3000);
    close(peer);
    free(body);
    free(w->buf);
    free(w);
}

/* Calls still waiting for room when the conn closes fail once, with the
 * calls that were sent, before on_close. */
static void test_calls_waiting_for_room_fail_at_a_close(void **state)
{
    struct env *e = *state;
    int peer;
    struct wq_case *w = wq_new(e, &peer);

    run_on(e->cl, wq_start_fn, w); /* nobody reads: one frame goes, the rest wait */
    for (int i = 0; i < WQ_CALLS + 2; i++)
        assert_int_equal(w->rc[i], 0);
    run_on(e->cl, wq_close_fn, w);
    WAIT_FOR(atomic_load(&w->closed), 3000);
    assert_int_equal(atomic_load(&w->done_at_close), WQ_CALLS + 2); /* before on_close */
    for (int i = 0; i < WQ_CALLS + 2; i++)
        assert_int_equal(w->res[i].status, -ECANCELED);
    close(peer);
    free(w->buf);
    free(w);
}

/* ======== the window of bytes in flight ======== */

#define WIN_CALLS 10
#define WIN_PIECE (1 << 20)

struct win_case {
    struct env *e;
    mc__conn_t *c;
    int fd;
    char *dst; /* WIN_CALLS * WIN_PIECE: where answers may go (a TCP conn's) */
    struct result res[WIN_CALLS];
    int rc[WIN_CALLS];
    atomic_int closed;
};

static void win_close(mc__conn_t *c, int err)
{
    struct win_case *w = mc__conn_data(c);
    (void)err;
    atomic_store(&w->closed, 1);
}

static const mc__conn_ops_t win_ops = {.on_frame = bound_frame, .on_close = win_close};

static void win_close_fn(void *arg)
{
    mc__conn_close(((struct win_case *)arg)->c);
}

/* Starts the conn with a window of two pieces, then makes WIN_CALLS READ
 * calls whose answers (WIN_PIECE bytes each) go into w->dst, all at once. */
static void win_start_fn(void *arg)
{
    struct win_case *w = arg;

    CHECK(mc__conn_start(w->e->cl, w->fd, NULL, &win_ops, w, &w->c) == 0);
    mc__rpc_set_window(w->c, 2 * WIN_PIECE);
    for (int i = 0; i < WIN_CALLS; i++) {
        w->res[i].t0 = mc_loop_now_ms();
        w->rc[i] = mc__rpc_call_into(w->c, MC__OP_READ, NULL, 0, w->dst + (size_t)i * WIN_PIECE,
                                     WIN_PIECE, WQ_TIMEOUT_MS, result_cb, &w->res[i]);
    }
}

/* 1 if a byte arrives on fd within ms. */
static int readable_within(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 1;
}

/* A call's bytes count against its conn's window (mc__rpc_set_window())
 * from the moment it is sent until its answer: the request's body and the
 * answer it may get (call_into's cap). A READ of a large object used to
 * send every piece's request at once, so the last pieces waited for the
 * whole object to cross the link, and over a slow one timed out. Now a
 * peer sees two requests (the window), no third until it answers one, and
 * every call succeeds, in order, though the run takes longer than one
 * call's timeout. */
static void test_calls_keep_to_a_window_of_bytes_in_flight(void **state)
{
    struct env *e = *state;
    struct win_case *w = calloc(1, sizeof(*w));
    int sv[2];
    char *piece = malloc(WIN_PIECE);

    small_pair(sv);
    w->e = e;
    w->fd = sv[0];
    w->dst = malloc((size_t)WIN_CALLS * WIN_PIECE);
    run_on(e->cl, win_start_fn, w);
    for (int i = 0; i < WIN_CALLS; i++)
        assert_int_equal(w->rc[i], 0);
    mc__hdr_t req[WIN_CALLS];
    int got = 0;
    for (int i = 0; i < WIN_CALLS; i++) {
        while (got < WIN_CALLS && got < i + 2) { /* the window: two unanswered */
            unsigned char hdr[MC__PROTO_HDR_SIZE];
            read_exact(sv[1], hdr, sizeof(hdr));
            assert_int_equal(mc__hdr_decode(hdr, sizeof(hdr), &req[got]), 0);
            assert_int_equal(req[got].op, MC__OP_READ);
            assert_int_equal(req[got].len, 0); /* a READ of WIN_PIECE: its cost */
            if (got)
                assert_cmp(req[got].id, >, req[got - 1].id);
            got++;
        }
        if (i == 0) /* two in flight, the third held back */
            assert_false(readable_within(sv[1], 200));
        /* A call waits for the one two ahead, is sent at about
         * t0 + i * WQ_PACE_MS and answered two paces later, within its
         * timeout; the last answer comes past one timeout after t0. */
        peer_wait_until(w->res[0].t0 + (uint64_t)(i + 2) * WQ_PACE_MS);
        unsigned char hdr[MC__PROTO_HDR_SIZE];
        mc__hdr_t a = {.magic = MC__PROTO_MAGIC,
                       .version = MC__PROTO_VERSION,
                       .op = MC__OP_READ,
                       .flags = MC__F_RESPONSE,
                       .id = req[i].id,
                       .len = WIN_PIECE};
        mc__hdr_encode(hdr, &a);
        fill((unsigned char *)piece, (uint64_t)i, WIN_PIECE);
        write_all(sv[1], hdr, sizeof(hdr));
        write_all(sv[1], piece, WIN_PIECE);
    }
    for (int i = 0; i < WIN_CALLS; i++) {
        WAIT_FOR(atomic_load(&w->res[i].done), 3000);
        if (w->res[i].status != 0 || w->res[i].len != WIN_PIECE)
            fail_msg("call %d: status %d, %zu bytes", i, w->res[i].status, w->res[i].len);
        assert_true(matches(w->res[i].body, (uint64_t)i, sizeof(w->res[i].body)));
    }
    assert_cmp(w->res[WIN_CALLS - 1].t1 - w->res[0].t0, >, WQ_TIMEOUT_MS);
    run_on(e->cl, win_close_fn, w);
    WAIT_FOR(atomic_load(&w->closed), 3000);
    close(sv[1]);
    free(piece);
    free(w->dst);
    free(w);
}

#define WIN_TIMEOUT_MS 300

/* A window of one piece and two READs of one piece, each with a timeout of
 * WIN_TIMEOUT_MS. */
static void win_timeout_start_fn(void *arg)
{
    struct win_case *w = arg;

    CHECK(mc__conn_start(w->e->cl, w->fd, NULL, &win_ops, w, &w->c) == 0);
    mc__rpc_set_window(w->c, WIN_PIECE);
    for (int i = 0; i < 2; i++) {
        w->res[i].t0 = mc_loop_now_ms();
        w->rc[i] = mc__rpc_call_into(w->c, MC__OP_READ, NULL, 0, w->dst + (size_t)i * WIN_PIECE,
                                     WIN_PIECE, WIN_TIMEOUT_MS, result_cb, &w->res[i]);
    }
}

/* A call that times out leaves the window as one answered does: the call
 * waiting behind it goes then, and has a whole timeout of its own. */
static void test_a_timed_out_call_makes_room_in_the_window(void **state)
{
    struct env *e = *state;
    struct win_case *w = calloc(1, sizeof(*w));
    int sv[2];
    unsigned char hdr[MC__PROTO_HDR_SIZE];
    mc__hdr_t req[2];

    small_pair(sv);
    w->e = e;
    w->fd = sv[0];
    w->dst = malloc(2 * (size_t)WIN_PIECE);
    run_on(e->cl, win_timeout_start_fn, w);
    assert_int_equal(w->rc[0], 0);
    assert_int_equal(w->rc[1], 0);
    read_exact(sv[1], hdr, sizeof(hdr)); /* the first, never answered */
    assert_int_equal(mc__hdr_decode(hdr, sizeof(hdr), &req[0]), 0);
    assert_false(readable_within(sv[1], WIN_TIMEOUT_MS / 2)); /* the second waits */
    read_exact(sv[1], hdr, sizeof(hdr)); /* it comes once the first timed out */
    assert_int_equal(mc__hdr_decode(hdr, sizeof(hdr), &req[1]), 0);
    assert_cmp(req[1].id, >, req[0].id);
    WAIT_FOR(atomic_load(&w->res[0].done), 3000);
    assert_int_equal(w->res[0].status, -ETIMEDOUT);
    /* The slow peer answers half a timeout after the first timed out (and
     * the second was sent): within the second's own timeout. */
    peer_wait_until(w->res[0].t1 + WIN_TIMEOUT_MS / 2);
    char body[16];
    fill((unsigned char *)body, 1, sizeof(body));
    mc__hdr_t a = {.magic = MC__PROTO_MAGIC,
                   .version = MC__PROTO_VERSION,
                   .op = MC__OP_READ,
                   .flags = MC__F_RESPONSE,
                   .id = req[1].id,
                   .len = sizeof(body)};
    mc__hdr_encode(hdr, &a);
    write_all(sv[1], hdr, sizeof(hdr));
    write_all(sv[1], body, sizeof(body));
    WAIT_FOR(atomic_load(&w->res[1].done), 3000);
    assert_int_equal(w->res[1].status, 0);
    assert_int_equal(w->res[1].len, sizeof(body));
    assert_true(matches(w->res[1].body, 1, sizeof(body)));
    /* Made at once with the first, answered after more than one timeout. */
    assert_cmp(w->res[1].t1 - w->res[1].t0, >, WIN_TIMEOUT_MS);
    run_on(e->cl, win_close_fn, w);
    WAIT_FOR(atomic_load(&w->closed), 3000);
    close(sv[1]);
    free(w->dst);
    free(w);
}

/* ======== the reconnecting client ======== */

struct rc_case {
    struct env *e;
    mc__addr_t addr;
    mc__rpc_client_t *cl;
    atomic_int connects, disconnects;
    atomic_int connected; /* mirrors mc__rpc_client_conn() != NULL */
    int rc;
};

static void rc_on_connect(mc__rpc_client_t *cl, mc__conn_t *c)
{
    struct rc_case *t = mc__rpc_client_data(cl);
    CHECK(mc__rpc_client_conn(cl) == c);
    atomic_fetch_add(&t->connects, 1);
    atomic_store(&t->connected, 1);
}

static void rc_on_disconnect(mc__rpc_client_t *cl, int err)
{
    struct rc_case *t = mc__rpc_client_data(cl);
    CHECK(err == -ECONNRESET);
    atomic_fetch_add(&t->disconnects, 1);
    atomic_store(&t->connected, 0);
}

static const mc__rpc_client_ops_t rc_ops = {.on_connect = rc_on_connect,
                                            .on_disconnect = rc_on_disconnect};

static void rc_new_fn(void *arg)
{
    struct rc_case *t = arg;
    t->rc = mc__rpc_client_new(t->e->cl, &t->addr, 500, &rc_ops, t, &t->cl);
}

static void rc_close_fn(void *arg)
{
    struct rc_case *t = arg;
    mc__rpc_client_close(t->cl);
}

static void rc_call_ok(struct rc_case *t)
{
    struct result r;
    struct call_req q = {
        .cl = t->cl, .op = MC__OP_PING, .body = "hi", .timeout_ms = 2000, .res = &r};
    run_on(t->e->cl, call_fn, &q);
    assert_int_equal(q.rc, 0);
    WAIT_FOR(atomic_load(&r.done), 3000);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.len, 2);
}

static void test_rpc_client_reconnects(void **state)
{
    struct env *e = *state;
    struct rc_case *t = calloc(1, sizeof(*t));
    struct server s;
    struct result r;
    char where[64];
    int port = free_port();

    snprintf(where, sizeof(where), "127.0.0.1:%d", port);
    t->e = e;
    assert_int_equal(mc__addr_parse(where, -1, &t->addr), 0);
    run_on(e->cl, rc_new_fn, t);
    assert_int_equal(t->rc, 0);

    /* Nobody listens: calls fail, at once with -ENOTCONN while backing off. */
    struct call_req q = {.cl = t->cl, .op = MC__OP_PING, .timeout_ms = 1000, .res = &r};
    uint64_t t0 = mc_loop_now_ms();
    for (;;) {
        run_on(e->cl, call_fn, &q);
        if (q.rc == -ENOTCONN)
            break;
        assert_int_equal(q.rc, 0); /* queued on a connect attempt: it fails */
        WAIT_FOR(atomic_load(&r.done), 2000);
        assert_int_equal(r.status, -ECONNREFUSED);
        assert_cmp(mc_loop_now_ms() - t0, <, 2000);
    }

    /* A server appears: the client finds it within its backoff. */
    server_start(&s, e->sl, where, SRV_ECHO);
    WAIT_FOR(atomic_load(&t->connected), 3000);
    rc_call_ok(t);

    /* The server goes away and comes back: the client follows. */
    server_stop(&s);
    WAIT_FOR(atomic_load(&t->disconnects) == 1, 2000);
    server_start(&s, e->sl, where, SRV_ECHO);
    WAIT_FOR(atomic_load(&t->connects) == 2, 3000);
    rc_call_ok(t);

    run_on(e->cl, rc_close_fn, t);
    WAIT_FOR(atomic_load(&s.closed) == atomic_load(&s.accepted), 2000);
    server_stop(&s);
    usleep(10000); /* the client frees itself on the loop */
    free(t);
}

/* ---- a client that looks its server up before each connect ---- */

struct rs_case {
    struct rc_case rc; /* first: rc_on_connect() finds it as the client's data */
    mc__addr_t target; /* where the lookup points now */
    atomic_int lookups;
    atomic_int fail; /* the next lookup finds nothing */
};

static void rs_resolve(mc__rpc_client_t *cl)
{
    struct rs_case *t = mc__rpc_client_resolve_arg(cl);
    atomic_fetch_add(&t->lookups, 1);
    if (atomic_exchange(&t->fail, 0))
        mc__rpc_client_resolved(cl, NULL, -ENOENT);
    else
        mc__rpc_client_resolved(cl, &t->target, 0);
}

static void rs_new_fn(void *arg)
{
    struct rs_case *t = arg;
    mc__rpc_client_ops_t ops = rc_ops;
    ops.resolve = rs_resolve;
    ops.resolve_arg = t;
    mc__addr_t none = {0};
    t->rc.rc = mc__rpc_client_new(t->rc.e->cl, &none, 500, &ops, t, &t->rc.cl);
}

static void rs_reconnect_fn(void *arg)
{
    struct rs_case *t = arg;
    mc__rpc_client_reconnect(t->rc.cl);
}

/* The address comes from the lookup, before every connect: a client told to
 * reconnect finds the server that took over; a lookup that finds nothing
 * is retried with backoff. */
static void test_rpc_client_resolves(void **state)
{
    struct env *e = *state;
    struct rs_case *t = calloc(1, sizeof(*t));
    struct server a, b;
    char wa[64], wb[64];
    snprintf(wa, sizeof(wa), "127.0.0.1:%d", free_port());
    snprintf(wb, sizeof(wb), "127.0.0.1:%d", free_port());
    server_start(&a, e->sl, wa, SRV_ECHO);
    server_start(&b, e->sl, wb, SRV_ECHO);
    t->rc.e = e;
    assert_int_equal(mc__addr_parse(wa, -1, &t->target), 0);
    atomic_store(&t->fail, 1);
    run_on(e->cl, rs_new_fn, t);
    assert_int_equal(t->rc.rc, 0);
    WAIT_FOR(atomic_load(&t->rc.connected), 3000);
    assert_cmp(atomic_load(&t->lookups), >=, 2);   /* the first found nothing */
    WAIT_FOR(atomic_load(&a.accepted) == 1, 2000); /* counted on the server's loop */
    rc_call_ok(&t->rc);

    /* B takes over: told to reconnect, the client looks again and goes there. */
    assert_int_equal(mc__addr_parse(wb, -1, &t->target), 0);
    run_on(e->cl, rs_reconnect_fn, t);
    WAIT_FOR(atomic_load(&t->rc.connects) == 2, 3000);
    WAIT_FOR(atomic_load(&b.accepted) == 1, 2000);
    rc_call_ok(&t->rc);

    run_on(e->cl, rc_close_fn, &t->rc);
    WAIT_FOR(atomic_load(&b.closed) == atomic_load(&b.accepted), 2000);
    server_stop(&a);
    server_stop(&b);
    usleep(10000); /* the client frees itself on the loop */
    free(t);
}

static void rc_keepalive_fn(void *arg)
{
    struct rc_case *t = arg;
    mc__rpc_client_set_keepalive(t->cl, 50);
}

/* Closes the server's conns, not its listener: a server hanging up on an
 * idle client. */
static void srv_hang_up_fn(void *arg)
{
    struct server *s = arg;
    for (int i = 0; i < MAX_CONNS; i++)
        if (s->conns[i])
            mc__conn_close(s->conns[i]);
}

/* A quiet client PINGs so that a server's idle timeout leaves it alone; a
 * session closed by the server after a while is reopened at once, so that
 * the next call waits for it instead of failing with -ENOTCONN. */
static void test_rpc_client_keepalive_and_reconnect(void **state)
{
    struct env *e = *state;
    struct rc_case *t = calloc(1, sizeof(*t));
    struct server s;
    struct result r;
    char where[64];

    snprintf(where, sizeof(where), "127.0.0.1:%d", free_port());
    server_start(&s, e->sl, where, SRV_ECHO);
    t->e = e;
    assert_int_equal(mc__addr_parse(where, -1, &t->addr), 0);
    run_on(e->cl, rc_new_fn, t);
    assert_int_equal(t->rc, 0);
    run_on(e->cl, rc_keepalive_fn, t);
    WAIT_FOR(atomic_load(&t->connected), 3000);
    uint64_t t0 = mc_loop_now_ms();
    int before = atomic_load(&s.frames);
    WAIT_FOR(atomic_load(&s.frames) >= before + 3, 2000); /* PINGs, no call made */

    /* A session past MC__RPC_RECONNECT_NOW_MS that the server ends. */
    WAIT_FOR(mc_loop_now_ms() - t0 > MC__RPC_RECONNECT_NOW_MS + 100, 3000);
    run_on(e->sl, srv_hang_up_fn, &s);
    WAIT_FOR(atomic_load(&t->disconnects) == 1, 2000);
    struct call_req q = {
        .cl = t->cl, .op = MC__OP_PING, .body = "hi", .timeout_ms = 2000, .res = &r};
    run_on(e->cl, call_fn, &q);
    assert_int_equal(q.rc, 0); /* queued on the new connect, not -ENOTCONN */
    WAIT_FOR(atomic_load(&r.done), 3000);
    assert_int_equal(r.status, 0);
    assert_int_equal(atomic_load(&t->connects), 2);

    run_on(e->cl, rc_close_fn, t);
    WAIT_FOR(atomic_load(&s.closed) == atomic_load(&s.accepted), 2000);
    server_stop(&s);
    usleep(10000); /* the client frees itself on the loop */
    free(t);
}

/* ======== the server's limits (server.h) ======== */

struct srv_case {
    mc_loop_t *l;
    mc__server_opts_t o;
    mc__server_t *srv;
    mc__addr_t addr;
    mc__server_stats_t st;
    int rc;
};

static void srv_case_start_fn(void *arg)
{
    struct srv_case *t = arg;
    mc__addr_t a;

    t->rc = mc__addr_parse("127.0.0.1:0", -1, &a);
    if (t->rc == 0)
        t->rc = mc__server_new(&t->srv, t->l, &a, &t->o);
    if (t->rc == 0)
        t->rc = mc__addr_parse(mc__server_addr(t->srv), -1, &t->addr);
}

static void srv_case_stats_fn(void *arg)
{
    struct srv_case *t = arg;
    mc__server_stats(t->srv, &t->st);
}

static void srv_case_close_fn(void *arg)
{
    struct srv_case *t = arg;
    mc__server_close(t->srv);
}

/* Sends a request on a blocking socket; returns its response's status, or
 * INT_MIN when the server closed the connection instead. */
static int raw_call(int fd, uint16_t op, const void *body, uint32_t len)
{
    unsigned char hdr[MC__PROTO_HDR_SIZE];
    char resp[256];
    mc__hdr_t h = {
        .magic = MC__PROTO_MAGIC, .version = MC__PROTO_VERSION, .op = op, .id = 9, .len = len};

    mc__hdr_encode(hdr, &h);
    if (write(fd, hdr, sizeof(hdr)) != (ssize_t)sizeof(hdr) ||
        (len && write(fd, body, len) != (ssize_t)len))
        return INT_MIN;
    size_t got = 0;
    while (got < MC__PROTO_HDR_SIZE || got < MC__PROTO_HDR_SIZE + h.len) {
        ssize_t r = read_retry(fd, resp + got, sizeof(resp) - got);
        if (r <= 0)
            return INT_MIN;
        got += (size_t)r;
        if (got >= MC__PROTO_HDR_SIZE)
            assert_int_equal(mc__hdr_decode(resp, got, &h), 0);
    }
    return h.status;
}

static int raw_hello(int fd)
{
    mc__wbuf_t w = {0};
    mc__pack(&w, "hhuss", (unsigned)MC__PROTO_SESSION, (unsigned)MC__PROTO_SESSION,
             (unsigned)MC__ROLE_CLIENT, "t", 1u, "", 0u);
    int rc = raw_call(fd, MC__OP_HELLO, w.p, (uint32_t)w.len);
    free(w.p);
    return rc;
}

/* 1 once the server has closed fd (EOF or reset), 0 if it is still open
 * after the socket's receive timeout. */
static int raw_closed(int fd)
{
    char c;
    ssize_t r = read_retry(fd, &c, 1);
    return r == 0 || (r < 0 && errno == ECONNRESET);
}

/* At the connection limit a newcomer takes the place of the oldest
 * connection not yet through its handshake; when all are, it is turned
 * away at once. */
static void test_server_connection_limit(void **state)
{
    struct env *e = *state;
    struct srv_case t = {.l = e->sl, .o = {.max_conns = 2}};

    run_on(e->sl, srv_case_start_fn, &t);
    assert_int_equal(t.rc, 0);
    int a = raw_connect(&t.addr), b = raw_connect(&t.addr);
    assert_int_equal(raw_call(a, MC__OP_PING, NULL, 0), 0); /* served: no secret */
    assert_int_equal(raw_call(b, MC__OP_PING, NULL, 0), 0);
    int c = raw_connect(&t.addr);
    assert_int_equal(raw_call(c, MC__OP_PING, NULL, 0), 0);
    assert_true(raw_closed(a)); /* the oldest stranger made room */
    assert_int_equal(raw_hello(b), 0);
    assert_int_equal(raw_hello(c), 0);
    int d = raw_connect(&t.addr);
    assert_true(raw_closed(d)); /* everyone is in session: turned away */
    assert_int_equal(raw_call(b, MC__OP_PING, NULL, 0), 0);
    assert_int_equal(raw_call(c, MC__OP_PING, NULL, 0), 0);
    run_on(e->sl, srv_case_stats_fn, &t);
    assert_int_equal(t.st.evicted, 1);
    assert_int_equal(t.st.turned_away, 1);
    close(a);
    close(b);
    close(c);
    close(d);
    run_on(e->sl, srv_case_close_fn, &t);
}

/* Before its handshake a connection is bounded to small frames and the
 * handshake timeout; after it, to MC__PROTO_MAX_BODY and the idle timeout. */
static void test_server_handshake_limits(void **state)
{
    struct env *e = *state;
    struct srv_case t = {.l = e->sl, .o = {.handshake_timeout_ms = 100, .idle_timeout_ms = 400}};
    static char body[MC__SERVER_HANDSHAKE_MAX_BODY + 1];

    run_on(e->sl, srv_case_start_fn, &t);
    assert_int_equal(t.rc, 0);
    /* A body over the handshake's bound before HELLO: cut off. */
    int a = raw_connect(&t.addr);
    assert_int_equal(raw_call(a, MC__OP_WRITE, body, sizeof(body)), INT_MIN);
    close(a);
    /* After HELLO the same frame is answered (this server holds no
     * segments: -EOPNOTSUPP), and the connection stays. */
    a = raw_connect(&t.addr);
    assert_int_equal(raw_hello(a), 0);
    assert_int_equal(raw_call(a, MC__OP_WRITE, body, sizeof(body)), -EOPNOTSUPP);
    assert_int_equal(raw_call(a, MC__OP_PING, NULL, 0), 0);
    /* Silent before the handshake: closed after ~100 ms (the bound only
     * tells the 100 ms asked for from the 10 s default: a loaded machine
     * made it 1.1 s once). */
    uint64_t t0 = mc_loop_now_ms();
    int b = raw_connect(&t.addr);
    assert_true(raw_closed(b));
    assert_cmp(mc_loop_now_ms() - t0, >=, 90);
    assert_cmp(mc_loop_now_ms() - t0, <, MC__SERVER_HANDSHAKE_TIMEOUT_MS / 2);
    /* Through it, silent: closed after the idle timeout. */
    assert_true(raw_closed(a));
    assert_cmp(mc_loop_now_ms() - t0, >=, 390);
    run_on(e->sl, srv_case_stats_fn, &t);
    assert_int_equal(t.st.timed_out, 2);
    close(a);
    close(b);
    run_on(e->sl, srv_case_close_fn, &t);
}

/* ======== an answer that comes before its request was sent ======== */

struct early_case {
    struct env *e;
    mc__conn_t *c;
    int fd;
    unsigned char *buf; /* the WRITE's body, gathered without a copy */
    atomic_int done, closed;
    atomic_size_t queued_at_cb; /* bytes the conn still had to send when cb ran */
};

static void early_cb(void *arg, int status, const char *body, size_t len)
{
    struct early_case *k = arg;
    (void)status;
    (void)body;
    (void)len;
    atomic_store(&k->queued_at_cb, mc__conn_queued(k->c));
    atomic_store(&k->done, 1);
}

static void early_close(mc__conn_t *c, int err)
{
    (void)err;
    atomic_store(&((struct early_case *)mc__conn_data(c))->closed, 1);
}

static const mc__conn_ops_t early_ops = {.on_frame = bound_frame, .on_close = early_close};

static void early_start_fn(void *arg)
{
    struct early_case *k = arg;
    struct iovec iov = {k->buf, WQ_BODY};

    CHECK(mc__conn_start(k->e->cl, k->fd, NULL, &early_ops, k, &k->c) == 0);
    CHECK(mc__rpc_callv(k->c, MC__OP_WRITE, &iov, 1, 10000, early_cb, k) == 0);
}

static void early_close_fn(void *arg)
{
    mc__conn_close(((struct early_case *)arg)->c);
}

/* A bad peer answers a WRITE as soon as it has its header, before it has
 * read the body. mc__rpc_callv() promises that cb runs only once the conn
 * has sent the caller's buffers (rpc.h): its caller frees them then (the
 * tcp transport frees the piece holding the request's head at once), and
 * the kernel must not go on sending from freed memory to that peer. It ran
 * at the answer, with most of the body still to be sent. */
static void test_callv_answered_before_sent_waits_for_the_send(void **state)
{
    struct env *e = *state;
    struct early_case *k = calloc(1, sizeof(*k));
    int sv[2];
    unsigned char hdr[MC__PROTO_HDR_SIZE];
    mc__hdr_t h;
    char *body = malloc(WQ_BODY);

    small_pair(sv);
    k->e = e;
    k->fd = sv[0];
    k->buf = malloc(WQ_BODY);
    fill(k->buf, 1, WQ_BODY);
    atomic_store(&k->queued_at_cb, (size_t)-1);
    run_on(e->cl, early_start_fn, k);
    read_exact(sv[1], hdr, sizeof(hdr));
    assert_int_equal(mc__hdr_decode(hdr, sizeof(hdr), &h), 0);
    assert_int_equal(h.op, MC__OP_WRITE);
    mc__hdr_t a = {.magic = MC__PROTO_MAGIC,
                   .version = MC__PROTO_VERSION,
                   .op = h.op,
                   .flags = MC__F_RESPONSE,
                   .id = h.id};
    mc__hdr_encode(hdr, &a);
    write_all(sv[1], hdr, sizeof(hdr));
    /* The conn has taken the answer in (nothing left unread on its side)
     * before the peer reads the rest of the body. */
    int unread = 1;
    WAIT_FOR(ioctl(sv[1], SIOCOUTQ, &unread) == 0 && unread == 0, 3000);
    read_exact(sv[1], body, WQ_BODY);
    assert_true(matches(body, 1, WQ_BODY));
    WAIT_FOR(atomic_load(&k->done), 3000);
    if (atomic_load(&k->queued_at_cb) != 0)
        fail_msg("cb ran with %zu bytes of the caller's body still to send",
                 atomic_load(&k->queued_at_cb));
    run_on(e->cl, early_close_fn, k);
    WAIT_FOR(atomic_load(&k->closed), 3000);
    close(sv[1]);
    free(body);
    free(k->buf);
    free(k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rpc_timeout_and_late_reply, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rpc_server_close_fails_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_midflight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_calls_wait_for_room_in_a_full_send_queue, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_calls_waiting_for_room_fail_at_a_close, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_calls_keep_to_a_window_of_bytes_in_flight, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_timed_out_call_makes_room_in_the_window, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_rpc_client_reconnects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rpc_client_resolves, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rpc_client_keepalive_and_reconnect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_connection_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_handshake_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callv_answered_before_sent_waits_for_the_send, setup,
                                        teardown),
    };

    mc__log_init("test_rpc", MC__LOG_INFO);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
