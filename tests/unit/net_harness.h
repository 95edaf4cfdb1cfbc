/*
 * net_harness.h - what the network unit tests (test_net*.c, test_rpc*.c,
 * test_epochs.c) share: a server loop and a client loop on their own
 * threads, a test server and client over framed connections, and calls.
 * Included once by each test file (its functions are static; a file uses
 * some of them).
 *
 * The test thread sets things up on the loops with run_on() (post, then
 * wait) and waits for results with WAIT_FOR(); loop-thread callbacks record
 * what they saw in atomics and count violations in `bad`, which the test
 * thread asserts on (cmocka's asserts must not run on another thread). Only
 * loopback and Unix addresses are used. alarm() kills a test that hangs.
 */
#ifndef MC_TEST_NET_HARNESS_H
#define MC_TEST_NET_HARNESS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "runtime/log.h"
#include "runtime/loop_i.h"
#include "mooncake/loop.h"
#include "runtime/listen.h"
#include "runtime/net.h"
#include "wire/proto.h"
#include "runtime/rpc.h"
#include "server/server.h"
#include "unit.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

/* ---- harness ---- */

/* Waits on the test thread until cond holds, failing after ms. */
#define WAIT_FOR(cond, ms)                                                                         \
    do {                                                                                           \
        uint64_t t0_ = mc_loop_now_ms();                                                           \
        while (!(cond)) {                                                                          \
            if (mc_loop_now_ms() - t0_ > (ms))                                                     \
                fail_msg("timed out after %d ms waiting for %s", (int)(ms), #cond);                \
            usleep(1000);                                                                          \
        }                                                                                          \
    } while (0)

/* Violations seen on loop threads; every test asserts it stays 0. */
static atomic_int bad;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            atomic_fetch_add(&bad, 1);                                                             \
        }                                                                                          \
    } while (0)

struct env {
    mc_loop_t *sl, *cl; /* server and client loop */
    pthread_t st, ct;
    char dir[64]; /* for Unix sockets */
};

static void *run_thread(void *arg)
{
    return (void *)(intptr_t)mc_loop_run(arg);
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));

    alarm(90);
    atomic_store(&bad, 0);
    assert_int_equal(mc_loop_new(&e->sl), 0);
    assert_int_equal(mc_loop_new(&e->cl), 0);
    assert_int_equal(pthread_create(&e->st, NULL, run_thread, e->sl), 0);
    assert_int_equal(pthread_create(&e->ct, NULL, run_thread, e->cl), 0);
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_net.XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;

    mc_loop_stop(e->sl);
    mc_loop_stop(e->cl);
    pthread_join(e->st, NULL);
    pthread_join(e->ct, NULL);
    mc_loop_free(e->sl);
    mc_loop_free(e->cl);
    rmdir(e->dir);
    free(e);
    alarm(0);
    assert_int_equal(atomic_load(&bad), 0);
    return 0;
}

struct on_loop {
    void (*fn)(void *);
    void *arg;
    sem_t done;
};

static void on_loop_tramp(void *p)
{
    struct on_loop *o = p;
    o->fn(o->arg);
    sem_post(&o->done);
}

/* Runs fn(arg) on loop l and waits for it. */
static void run_on(mc_loop_t *l, void (*fn)(void *), void *arg)
{
    struct on_loop o = {.fn = fn, .arg = arg};

    sem_init(&o.done, 0, 0);
    assert_int_equal(mc_loop_post(l, on_loop_tramp, &o), 0);
    sem_wait(&o.done);
    sem_destroy(&o.done);
}

static unsigned char pattern(uint64_t seq, size_t i)
{
    return (unsigned char)((i * 131u) ^ (seq * 17u) ^ (i >> 9));
}

static void fill(unsigned char *p, uint64_t seq, size_t len)
{
    for (size_t i = 0; i < len; i++)
        p[i] = pattern(seq, i);
}

static int matches(const char *p, uint64_t seq, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)p[i] != pattern(seq, i))
            return 0;
    return 1;
}

/* ---- a test server ---- */

enum srv_mode { SRV_ECHO, SRV_SILENT, SRV_SLOW };
#define MAX_CONNS 64
#define SLOW_MS 300

struct slow_reply {
    mc_timer_t timer;
    struct server *s;
    mc__conn_t *c; /* NULL once the conn closed */
    mc__hdr_t h;
    struct slow_reply *next;
};

struct server {
    mc_loop_t *l;
    const char *where; /* address to listen on */
    enum srv_mode mode;
    mc__listener_t *ls;
    mc__addr_t addr; /* as bound */
    int rc;
    mc__conn_t *conns[MAX_CONNS]; /* loop thread only */
    struct slow_reply *slow;      /* loop thread only */
    atomic_int accepted, closed, frames;
    int close_errs[MAX_CONNS]; /* in closing order, [0, closed) */
};

static void srv_slow_fire(mc_timer_t *t)
{
    struct slow_reply *r = t->data;
    struct server *s = r->s;

    if (r->c)
        CHECK(mc__rpc_reply(r->c, &r->h, 0, "late", 4) == 0);
    for (struct slow_reply **p = &s->slow; *p; p = &(*p)->next) {
        if (*p == r) {
            *p = r->next;
            break;
        }
    }
    free(r);
}

static void srv_frame(mc__conn_t *c, const mc__hdr_t *h, const char *body, size_t len)
{
    struct server *s = mc__conn_data(c);

    atomic_fetch_add(&s->frames, 1);
    CHECK(!(h->flags & MC__F_RESPONSE));
    if (s->mode == SRV_ECHO) {
        CHECK(mc__rpc_reply(c, h, 0, body, len) == 0);
    } else if (s->mode == SRV_SLOW) {
        struct slow_reply *r = calloc(1, sizeof(*r));
        r->s = s;
        r->c = c;
        r->h = *h;
        r->timer.data = r;
        r->next = s->slow;
        s->slow = r;
        CHECK(mc_timer_start(s->l, &r->timer, SLOW_MS, 0, srv_slow_fire) == 0);
    }
}

static void srv_close(mc__conn_t *c, int err)
{
    struct server *s = mc__conn_data(c);

    for (int i = 0; i < MAX_CONNS; i++)
        if (s->conns[i] == c)
            s->conns[i] = NULL;
    for (struct slow_reply *r = s->slow; r; r = r->next)
        if (r->c == c)
            r->c = NULL;
    s->close_errs[atomic_load(&s->closed) % MAX_CONNS] = err;
    atomic_fetch_add(&s->closed, 1);
}

static const mc__conn_ops_t srv_ops = {.on_frame = srv_frame, .on_close = srv_close};

static void srv_accept(mc__listener_t *ls, mc__conn_t *c)
{
    struct server *s = mc__listener_data(ls);

    CHECK(mc__conn_data(c) == s);
    CHECK(mc__conn_is_open(c));
    for (int i = 0; i < MAX_CONNS; i++) {
        if (!s->conns[i]) {
            s->conns[i] = c;
            break;
        }
    }
    atomic_fetch_add(&s->accepted, 1);
}

static void srv_start_fn(void *arg)
{
    struct server *s = arg;
    mc__addr_t a;

    s->rc = mc__addr_parse(s->where, -1, &a);
    if (s->rc == 0)
        s->rc = mc__listen(s->l, &a, &srv_ops, srv_accept, s, &s->ls);
    if (s->rc == 0)
        s->addr = *mc__listener_addr(s->ls);
}

static void server_start(struct server *s, mc_loop_t *l, const char *where, enum srv_mode mode)
{
    memset(s, 0, sizeof(*s));
    s->l = l;
    s->where = where;
    s->mode = mode;
    run_on(l, srv_start_fn, s);
    assert_int_equal(s->rc, 0);
}

static void srv_stop_fn(void *arg)
{
    struct server *s = arg;

    if (s->ls)
        mc__listener_close(s->ls);
    s->ls = NULL;
    for (int i = 0; i < MAX_CONNS; i++)
        if (s->conns[i])
            mc__conn_close(s->conns[i]);
    while (s->slow) {
        struct slow_reply *r = s->slow;
        s->slow = r->next;
        mc_timer_stop(&r->timer);
        free(r);
    }
}

/* Closes the listener and every conn, and waits for their on_close. */
static void server_stop(struct server *s)
{
    run_on(s->l, srv_stop_fn, s);
    WAIT_FOR(atomic_load(&s->closed) == atomic_load(&s->accepted), 5000);
}

/* ---- a test client: one conn, echoed frames checked in order ---- */

#define MAX_FRAMES 2048

struct client {
    mc_loop_t *l;
    mc__addr_t addr;
    mc__conn_t *c;
    int rc;
    atomic_int opened, closed, close_err, sync_cb;
    /* echo expectations (a send_iov's done may come after its echo: the
     * kernel sends a frame's bytes before the sendmsg carrying it returns) */
    int nframes;
    size_t sizes[MAX_FRAMES];
    int via_iov[MAX_FRAMES];
    atomic_int done[MAX_FRAMES]; /* send_iov done_cb status + 1 */
    atomic_int got, dones;
};

static void cli_open(mc__conn_t *c)
{
    struct client *k = mc__conn_data(c);
    atomic_fetch_add(&k->opened, 1);
}

static void cli_frame(mc__conn_t *c, const mc__hdr_t *h, const char *body, size_t len)
{
    struct client *k = mc__conn_data(c);
    int seq = atomic_load(&k->got);

    CHECK(h->flags & MC__F_RESPONSE);
    CHECK(h->status == 0);
    CHECK(seq < k->nframes);
    if (seq >= k->nframes)
        return;
    CHECK(h->id == (uint64_t)seq);
    CHECK(len == k->sizes[seq]);
    CHECK(len == k->sizes[seq] && matches(body, (uint64_t)seq, len));
    atomic_fetch_add(&k->got, 1);
}

static void cli_close(mc__conn_t *c, int err)
{
    struct client *k = mc__conn_data(c);

    atomic_store(&k->close_err, err);
    k->c = NULL;
    atomic_fetch_add(&k->closed, 1);
}

static const mc__conn_ops_t cli_ops = {
    .on_frame = cli_frame,
    .on_close = cli_close,
    .on_open = cli_open,
};

static void cli_connect_fn(void *arg)
{
    struct client *k = arg;

    k->rc = mc__conn_connect(k->l, &k->addr, 2000, &cli_ops, k, &k->c);
    /* Nothing may be reported inside the call. */
    if (atomic_load(&k->opened) || atomic_load(&k->closed))
        atomic_fetch_add(&k->sync_cb, 1);
}

static void client_connect(struct client *k, mc_loop_t *l, const mc__addr_t *a)
{
    memset(k, 0, sizeof(*k));
    k->l = l;
    k->addr = *a;
    run_on(l, cli_connect_fn, k);
    assert_int_equal(k->rc, 0);
    assert_int_equal(atomic_load(&k->sync_cb), 0);
}

static void cli_close_fn(void *arg)
{
    struct client *k = arg;
    if (k->c)
        mc__conn_close(k->c);
}

static void client_close(struct client *k)
{
    run_on(k->l, cli_close_fn, k);
    WAIT_FOR(atomic_load(&k->closed) == 1, 5000);
}

/* ---- calls ---- */

struct result {
    atomic_int done;
    int status;
    size_t len;
    char body[16];
    uint64_t t0, t1;
};

static void result_cb(void *arg, int status, const char *body, size_t len)
{
    struct result *r = arg;

    CHECK(atomic_load(&r->done) == 0); /* exactly once */
    r->status = status;
    r->len = len;
    if (body)
        memcpy(r->body, body, len < sizeof(r->body) ? len : sizeof(r->body));
    r->t1 = mc_loop_now_ms();
    atomic_store(&r->done, 1);
}

struct call_req {
    mc__conn_t *c;
    mc__rpc_client_t *cl;
    uint16_t op;
    const char *body;
    uint64_t timeout_ms;
    struct result *res;
    int n; /* calls to make, res[0..n) */
    int rc;
};

static void call_fn(void *arg)
{
    struct call_req *q = arg;
    int n = q->n ? q->n : 1;

    for (int i = 0; i < n; i++) {
        struct result *r = &q->res[i];
        size_t len = q->body ? strlen(q->body) : 0;
        memset(r, 0, sizeof(*r));
        r->t0 = mc_loop_now_ms();
        q->rc = q->cl ? mc__rpc_client_call(q->cl, q->op, q->body, len, q->timeout_ms, result_cb, r)
                      : mc__rpc_call(q->c, q->op, q->body, len, q->timeout_ms, result_cb, r);
        if (q->rc < 0)
            return;
        CHECK(atomic_load(&r->done) == 0); /* never inside the call */
    }
}

/* Makes one call on k's conn from its loop; returns mc__rpc_call()'s result. */
static int call(struct client *k, uint16_t op, const char *body, uint64_t timeout_ms,
                struct result *res)
{
    struct call_req q = {.c = k->c, .op = op, .body = body, .timeout_ms = timeout_ms, .res = res};
    run_on(k->l, call_fn, &q);
    return q.rc;
}

/* One echo round trip that must succeed. */
static void ping(struct client *k)
{
    struct result r;

    assert_int_equal(call(k, MC__OP_PING, "ping", 2000, &r), 0);
    WAIT_FOR(atomic_load(&r.done), 3000);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.len, 4);
    assert_memory_equal(r.body, "ping", 4);
}

/* ---- a raw peer: a blocking socket on the test thread ---- */

/* Writes p[0..n) to fd, all of it. */
static void write_all(int fd, const void *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        assert_true(w > 0);
        p = (const char *)p + w;
        n -= (size_t)w;
    }
}

/* Writes p[0..n) and waits until the peer's kernel has taken all of it
 * (the socket's send queue is empty): the recv the peer keeps armed then
 * sees these bytes alone, most of the time. */
static void write_taken(int fd, const void *p, size_t n)
{
    int queued = 1;
    write_all(fd, p, n);
    WAIT_FOR(ioctl(fd, SIOCOUTQ, &queued) == 0 && queued == 0, 2000);
}

/* ======== log ======== */

/* Opens a blocking TCP socket to a with a receive timeout (3 s). */
static int raw_connect(const mc__addr_t *a)
{
    int fd = socket(a->ss.ss_family, SOCK_STREAM, 0);
    struct timeval tv = {3, 0};

    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (const struct sockaddr *)&a->ss, a->len), 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* A frame handler that ignores the frame. */
static void bound_frame(mc__conn_t *c, const mc__hdr_t *h, const char *body, size_t len) {}

#pragma GCC diagnostic pop

#endif /* MC_TEST_NET_HARNESS_H */
