/*
 * test_net.c - unit tests for the network layer: socket ops on the loop
 * (loop_i.h), the logger (log.h), addresses, listeners and framed
 * connections (net.h) and calls (rpc.h).
 *
 * A server loop and a client loop each run on their own thread. The test
 * thread sets things up on them with run_on() (post, then wait) and waits
 * for results with WAIT_FOR(); loop-thread callbacks record what they saw
 * in atomics and count violations in `bad`, which the test thread asserts
 * on (cmocka's asserts must not run on another thread). Only loopback and
 * Unix addresses are used. alarm() kills a test that hangs anyway.
 */
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

/* A loopback TCP port nobody listens on: bound, then closed. */
static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
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

/* ---- stderr capture ---- */

struct capture {
    int saved;
    FILE *tmp;
};

static void capture_start(struct capture *cap)
{
    fflush(stderr);
    cap->saved = dup(2);
    cap->tmp = tmpfile();
    assert_non_null(cap->tmp);
    dup2(fileno(cap->tmp), 2);
}

/* Restores stderr; returns what was written (free it), echoed to stderr. */
static char *capture_end(struct capture *cap)
{
    fflush(stderr);
    dup2(cap->saved, 2);
    close(cap->saved);
    long n = ftell(cap->tmp);
    char *s = calloc(1, (size_t)(n > 0 ? n : 0) + 1);
    rewind(cap->tmp);
    size_t got = fread(s, 1, (size_t)(n > 0 ? n : 0), cap->tmp);
    s[got] = '\0';
    fclose(cap->tmp);
    fputs(s, stderr);
    return s;
}

/* ======== log ======== */

static void test_log_lines(void **state)
{
    struct capture cap;

    mc__log_init("test_net", MC__LOG_INFO);
    capture_start(&cap);
    mc__log(MC__LOG_ERROR, "boom %d", 1);
    mc__log(MC__LOG_WARN, "read failed: %s", "Input/output error");
    mc__log(MC__LOG_INFO, "two\nlines");
    mc__log(MC__LOG_DEBUG, "not shown");
    char *s = capture_end(&cap);
    assert_string_equal(s, "test_net: error: boom 1\n"
                           "test_net: warn: read failed: Input/output err\n"
                           "test_net: info: two lines\n");
    free(s);

    assert_int_equal(mc__log_parse_level("DEBUG"), MC__LOG_DEBUG);
    assert_int_equal(mc__log_parse_level("warning"), MC__LOG_WARN);
    assert_int_equal(mc__log_parse_level("error"), MC__LOG_ERROR);
    assert_int_equal(mc__log_parse_level("loud"), -EINVAL);
    /* The public entry point: a bad level changes nothing; NULL keeps it. */
    assert_int_equal(mc_log_init("other", "loud"), -EINVAL);
    assert_int_equal(mc_log_init("test_net", NULL), 0);
    assert_int_equal(mc__log_get_level(), MC__LOG_INFO);
    assert_int_equal(mc_log_init("test_net", "Debug"), 0);
    assert_int_equal(mc__log_get_level(), MC__LOG_DEBUG);
    assert_int_equal(mc_log_init("test_net", "info"), 0);

    /* A long message stays one line. */
    char big[4000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    capture_start(&cap);
    mc__log(MC__LOG_WARN, "%s", big);
    s = capture_end(&cap);
    assert_non_null(strstr(s, "...\n"));
    assert_ptr_equal(strchr(s, '\n'), s + strlen(s) - 1);
    free(s);
    mc__log_set_level(MC__LOG_INFO);
}

/* ======== addresses ======== */

static void test_addr_parse(void **state)
{
    mc__addr_t a;
    char buf[MC__ADDR_STRLEN];

    assert_int_equal(mc__addr_parse("127.0.0.1:5555", -1, &a), 0);
    assert_int_equal(a.ss.ss_family, AF_INET);
    assert_int_equal(mc__addr_port(&a), 5555);
    assert_string_equal(mc__addr_format((struct sockaddr *)&a.ss, a.len, buf, sizeof(buf)),
                        "127.0.0.1:5555");
    assert_int_equal(mc__addr_parse("[::1]:80", -1, &a), 0);
    assert_int_equal(a.ss.ss_family, AF_INET6);
    assert_string_equal(mc__addr_format((struct sockaddr *)&a.ss, a.len, buf, sizeof(buf)),
                        "[::1]:80");
    assert_int_equal(mc__addr_parse("localhost:7", -1, &a), 0);
    assert_int_equal(mc__addr_port(&a), 7);
    assert_int_equal(mc__addr_parse("127.0.0.1", 50051, &a), 0);
    assert_int_equal(mc__addr_port(&a), 50051);
    assert_int_equal(mc__addr_parse("unix:/run/mc.sock", -1, &a), 0);
    assert_int_equal(a.ss.ss_family, AF_UNIX);
    assert_int_equal(mc__addr_port(&a), -1);
    assert_string_equal(mc__addr_format((struct sockaddr *)&a.ss, a.len, buf, sizeof(buf)),
                        "unix:/run/mc.sock");
    assert_int_equal(mc__addr_parse("unix:@mooncake", -1, &a), 0);
    assert_int_equal(a.len, offsetof(struct sockaddr_un, sun_path) + 9);
    assert_string_equal(mc__addr_format((struct sockaddr *)&a.ss, a.len, buf, sizeof(buf)),
                        "unix:@mooncake");

    static const char *const bad_addrs[] = {
        "",       "127.0.0.1",  "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:1x",
        "::1:80", "[::1]x",     "[]:80",      "[127.0.0.1]:80",  "unix:",        "unix:@",
        ":80",    "[::1]:99999"};
    for (size_t i = 0; i < sizeof(bad_addrs) / sizeof(bad_addrs[0]); i++) {
        int rc = mc__addr_parse(bad_addrs[i], -1, &a);
        if (rc != -EINVAL)
            fail_msg("\"%s\": %d, expected -EINVAL", bad_addrs[i], rc);
    }
    char longp[200] = "unix:/";
    memset(longp + 6, 'p', sizeof(longp) - 7);
    longp[sizeof(longp) - 1] = '\0';
    assert_int_equal(mc__addr_parse(longp, -1, &a), -ENAMETOOLONG);
    assert_int_equal(mc__addr_parse("no-such-host.invalid:80", -1, &a), -ENOENT);
}

/* ======== loop socket ops ======== */

struct io_rec {
    mc__io_t io;
    atomic_int calls;
    atomic_int res;
};

static void io_rec_cb(mc__io_t *io, int res)
{
    struct io_rec *r = io->data;
    atomic_store(&r->res, res);
    atomic_fetch_add(&r->calls, 1);
}

struct io_case {
    struct env *e;
    int fd;
    struct io_rec *rec;
    void *buf;
    size_t len;
    uint64_t timeout_ms;
    int rc;
};

static void recv_fn(void *arg)
{
    struct io_case *q = arg;
    q->rc = mc__io_recv(q->e->cl, &q->rec->io, q->fd, q->buf, q->len, q->timeout_ms, io_rec_cb);
}

static void send_fn(void *arg)
{
    struct io_case *q = arg;
    struct iovec iov[2] = {{q->buf, q->len / 2},
                           {(char *)q->buf + q->len / 2, q->len - q->len / 2}};
    q->rc = mc__io_sendmsg(q->e->cl, &q->rec->io, q->fd, iov, 2, q->timeout_ms, io_rec_cb);
}

static void release_free(void *p)
{
    free(p);
}

/* Cancels q's op, handing its buffer to the loop to free, and frees the handle. */
static void cancel_free_fn(void *arg)
{
    struct io_case *q = arg;
    mc__io_cancel(&q->rec->io, release_free, q->buf);
    free(q->rec);
    q->rec = NULL;
    q->buf = NULL;
}

static void test_io_recv_send_cancel_timeout(void **state)
{
    struct env *e = *state;
    int sv[2];

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);

    /* recv: completes with the bytes written. */
    struct io_rec *r = calloc(1, sizeof(*r));
    r->io.data = r;
    char small[16];
    struct io_case q = {e, sv[0], r, small, sizeof(small), 1000, 0};
    run_on(e->cl, recv_fn, &q);
    assert_int_equal(q.rc, 0);
    usleep(20000);
    assert_int_equal(atomic_load(&r->calls), 0);
    assert_int_equal(write(sv[1], "hello", 5), 5);
    WAIT_FOR(atomic_load(&r->calls) == 1, 2000);
    assert_int_equal(atomic_load(&r->res), 5);
    assert_memory_equal(small, "hello", 5);

    /* recv with a timeout and nothing to read: -ETIMEDOUT, within bounds. */
    uint64_t t0 = mc_loop_now_ms();
    q.timeout_ms = 100;
    run_on(e->cl, recv_fn, &q);
    WAIT_FOR(atomic_load(&r->calls) == 2, 2000);
    assert_int_equal(atomic_load(&r->res), -ETIMEDOUT);
    assert_cmp(mc_loop_now_ms() - t0, >=, 95);
    free(r);

    /* recv cancelled mid-flight: handle freed at once, buffer by the loop. */
    q.rec = calloc(1, sizeof(*q.rec));
    q.rec->io.data = q.rec;
    q.buf = malloc(4096);
    q.len = 4096;
    q.timeout_ms = 5000;
    run_on(e->cl, recv_fn, &q);
    assert_int_equal(q.rc, 0);
    run_on(e->cl, cancel_free_fn, &q);
    assert_int_equal(write(sv[1], "late", 4), 4); /* nobody may receive this into freed memory */
    usleep(20000);

    /* sendmsg on a full socket waits (no -EAGAIN), then times out. */
    char junk[4096];
    memset(junk, 'j', sizeof(junk));
    while (write(sv[0], junk, sizeof(junk)) > 0)
        ;
    r = calloc(1, sizeof(*r));
    r->io.data = r;
    struct io_case s = {e, sv[0], r, junk, sizeof(junk), 150, 0};
    t0 = mc_loop_now_ms();
    run_on(e->cl, send_fn, &s);
    assert_int_equal(s.rc, 0);
    WAIT_FOR(atomic_load(&r->calls) == 1, 2000);
    assert_int_equal(atomic_load(&r->res), -ETIMEDOUT);
    assert_cmp(mc_loop_now_ms() - t0, >=, 145);

    /* sendmsg without a timeout completes once the peer reads. */
    s.timeout_ms = 0;
    run_on(e->cl, send_fn, &s);
    usleep(30000);
    assert_int_equal(atomic_load(&r->calls), 1);
    while (read(sv[1], junk, sizeof(junk)) > 0)
        ;
    WAIT_FOR(atomic_load(&r->calls) == 2, 2000);
    assert_int_equal(atomic_load(&r->res), (int)sizeof(junk));
    free(r);

    /* sendmsg cancelled mid-flight on a full socket. */
    while (write(sv[0], junk, sizeof(junk)) > 0)
        ;
    s.rec = calloc(1, sizeof(*s.rec));
    s.rec->io.data = s.rec;
    s.buf = malloc(1 << 20);
    memset(s.buf, 's', 1 << 20);
    s.len = 1 << 20;
    s.timeout_ms = 10000;
    run_on(e->cl, send_fn, &s);
    assert_int_equal(s.rc, 0);
    run_on(e->cl, cancel_free_fn, &s);
    usleep(20000);
    close(sv[0]);
    close(sv[1]);
}

static int released;
static void count_release(void *arg)
{
    released++;
}

/* A cancelled op whose completion never came: mc_loop_free() releases it. */
static void test_io_release_on_loop_free(void **state)
{
    mc_loop_t *l;
    mc__io_t io = {0};
    int sv[2];
    char buf[8];

    assert_int_equal(mc_loop_new(&l), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(mc__io_recv(l, &io, sv[0], buf, sizeof(buf), 0, NULL), 0);
    assert_true(mc__io_active(&io));
    released = 0;
    mc__io_cancel(&io, count_release, NULL);
    assert_false(mc__io_active(&io));
    mc_loop_free(l);
    assert_int_equal(released, 1);
    /* Cancelling an idle handle releases at once. */
    mc__io_cancel(&io, count_release, NULL);
    assert_int_equal(released, 2);
    close(sv[0]);
    close(sv[1]);
}

/* ======== framed connections ======== */

static const size_t echo_sizes[] = {0,       1,
                                    7,       23,
                                    24,      25,
                                    1000,    65535,
                                    65536,   65537,
                                    1 << 20, (3 << 20) + 5,
                                    4 << 20, MC__PROTO_MAX_BODY};

struct iov_send {
    struct client *k;
    int seq;
    unsigned char *buf;
};

static void iov_done(void *arg, int status)
{
    struct iov_send *s = arg;

    CHECK(status == 0);
    CHECK(atomic_load(&s->k->done[s->seq]) == 0);
    atomic_store(&s->k->done[s->seq], status + 1);
    atomic_fetch_add(&s->k->dones, 1);
    free(s->buf); /* the conn must not touch it any more */
    free(s);
}

/* Queues k's frames: big ones first, then a burst of small ones; every
 * other frame zero-copy in three pieces. */
static void echo_send_fn(void *arg)
{
    struct client *k = arg;

    for (int seq = 0; seq < k->nframes; seq++) {
        size_t len = k->sizes[seq];
        unsigned char *buf = malloc(len ? len : 1);
        mc__hdr_t h = {.op = MC__OP_WRITE, .id = (uint64_t)seq};
        fill(buf, (uint64_t)seq, len);
        if (k->via_iov[seq]) {
            struct iov_send *s = malloc(sizeof(*s));
            *s = (struct iov_send){k, seq, buf};
            struct iovec iov[3] = {{buf, len / 3},
                                   {buf + len / 3, len / 3},
                                   {buf + 2 * (len / 3), len - 2 * (len / 3)}};
            CHECK(mc__conn_send_iov(k->c, &h, iov, 3, iov_done, s) == 0);
        } else {
            CHECK(mc__conn_send(k->c, &h, buf, len) == 0);
            free(buf); /* copied */
        }
    }
}

static void echo_round(struct env *e, const char *where)
{
    struct server s;
    struct client *k = calloc(1, sizeof(*k));

    server_start(&s, e->sl, where, SRV_ECHO);
    client_connect(k, e->cl, &s.addr);
    /* Queued while connecting: sent once connected. */
    int n = 0;
    for (size_t i = 0; i < sizeof(echo_sizes) / sizeof(echo_sizes[0]); i++)
        k->sizes[n++] = echo_sizes[i];
    for (; n < 1000; n++)
        k->sizes[n] = (size_t)(n * 37 % 300);
    k->nframes = n;
    int iovs = 0;
    for (int i = 0; i < n; i++)
        iovs += k->via_iov[i] = i % 2;
    run_on(e->cl, echo_send_fn, k);
    WAIT_FOR(atomic_load(&k->got) == n, 20000);
    assert_int_equal(atomic_load(&k->opened), 1);
    assert_int_equal(atomic_load(&k->dones), iovs);
    assert_int_equal(atomic_load(&bad), 0);
    client_close(k);
    assert_int_equal(atomic_load(&k->close_err), 0);
    /* The server saw its peer go away. */
    WAIT_FOR(atomic_load(&s.closed) == 1, 2000);
    assert_int_equal(s.close_errs[0], -ECONNRESET);
    server_stop(&s);
    free(k);
}

static void test_echo_tcp(void **state)
{
    echo_round(*state, "127.0.0.1:0");
}

static void test_echo_tcp6(void **state)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;

    if (fd >= 0)
        close(fd);
    if (!ok) {
        print_message("no IPv6 loopback here: skipped\n");
        skip();
    }
    echo_round(*state, "[::1]:0");
}

static void test_echo_unix(void **state)
{
    struct env *e = *state;
    char where[128];

    snprintf(where, sizeof(where), "unix:%s/echo.sock", e->dir);
    echo_round(e, where);
    /* The listener removed its path. */
    snprintf(where, sizeof(where), "%s/echo.sock", e->dir);
    assert_int_equal(access(where, F_OK), -1);

    snprintf(where, sizeof(where), "unix:@test_net.%d", (int)getpid());
    echo_round(e, where);
}

/* A stale Unix socket file is replaced; a live one is not. */
static void test_unix_stale_path(void **state)
{
    struct env *e = *state;
    char where[128], path[96];
    struct server s, s2;
    struct sockaddr_un un = {.sun_family = AF_UNIX};

    snprintf(path, sizeof(path), "%s/stale.sock", e->dir);
    snprintf(where, sizeof(where), "unix:%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    memcpy(un.sun_path, path, strlen(path) + 1);
    assert_int_equal(bind(fd, (struct sockaddr *)&un, sizeof(un)), 0);
    close(fd); /* the file stays behind, nobody listens */
    server_start(&s, e->sl, where, SRV_ECHO);

    memset(&s2, 0, sizeof(s2));
    s2.l = e->sl;
    s2.where = where;
    run_on(e->sl, srv_start_fn, &s2);
    assert_int_equal(s2.rc, -EADDRINUSE);
    server_stop(&s);
    assert_int_equal(access(path, F_OK), -1);
}

/* Opens a blocking TCP socket to a with a receive timeout. */
static int raw_connect(const mc__addr_t *a)
{
    int fd = socket(a->ss.ss_family, SOCK_STREAM, 0);
    struct timeval tv = {3, 0};

    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (const struct sockaddr *)&a->ss, a->len), 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Sends bytes and expects the server to cut the connection. */
static void expect_cut(const mc__addr_t *a, const void *bytes, size_t n)
{
    char buf[64];
    int fd = raw_connect(a);

    assert_int_equal(write(fd, bytes, n), (ssize_t)n);
    ssize_t got = read(fd, buf, sizeof(buf));
    if (got != 0 && !(got < 0 && errno == ECONNRESET))
        fail_msg("expected the server to close: read %zd, errno %d", got, errno);
    close(fd);
}

static void test_bad_frames_close_only_that_conn(void **state)
{
    struct env *e = *state;
    struct server s;
    struct client *k = calloc(1, sizeof(*k));
    struct capture cap;
    unsigned char hdr[MC__PROTO_HDR_SIZE];
    mc__hdr_t h = {.magic = MC__PROTO_MAGIC, .version = MC__PROTO_VERSION, .op = MC__OP_PING};

    server_start(&s, e->sl, "127.0.0.1:0", SRV_ECHO);
    client_connect(k, e->cl, &s.addr);
    ping(k);

    capture_start(&cap);
    /* garbage: bad magic */
    memset(hdr, 0xab, sizeof(hdr));
    expect_cut(&s.addr, hdr, sizeof(hdr));
    ping(k);
    /* an oversized body length */
    h.len = MC__PROTO_MAX_BODY + 1;
    mc__hdr_encode(hdr, &h);
    expect_cut(&s.addr, hdr, sizeof(hdr));
    ping(k);
    /* an unknown operation */
    h.len = 0;
    h.op = 999;
    mc__hdr_encode(hdr, &h);
    expect_cut(&s.addr, hdr, sizeof(hdr));
    ping(k);
    WAIT_FOR(atomic_load(&s.closed) == 3, 2000);
    char *log = capture_end(&cap);
    assert_int_equal(s.close_errs[0], -EPROTO);
    assert_int_equal(s.close_errs[1], -EMSGSIZE);
    assert_int_equal(s.close_errs[2], -EBADMSG);
    assert_non_null(strstr(log, "warn: closing 127.0.0.1:"));
    assert_non_null(strstr(log, "bad magic"));
    assert_non_null(strstr(log, "oversized frame"));
    assert_non_null(strstr(log, "unknown operation"));
    assert_null(strcasestr(log, "error"));
    free(log);

    /* A valid frame dribbled in byte by byte is reassembled. */
    int fd = raw_connect(&s.addr);
    h.op = MC__OP_PING;
    h.id = 77;
    h.len = 3;
    mc__hdr_encode(hdr, &h);
    for (size_t i = 0; i < sizeof(hdr); i++) {
        assert_int_equal(write(fd, hdr + i, 1), 1);
        usleep(500);
    }
    assert_int_equal(write(fd, "abc", 3), 3);
    unsigned char resp[MC__PROTO_HDR_SIZE + 3];
    size_t got = 0;
    while (got < sizeof(resp)) {
        ssize_t r = read(fd, resp + got, sizeof(resp) - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
    mc__hdr_t rh;
    assert_int_equal(mc__hdr_decode(resp, sizeof(resp), &rh), 0);
    assert_int_equal(rh.id, 77);
    assert_int_equal(rh.len, 3);
    assert_true(rh.flags & MC__F_RESPONSE);
    assert_memory_equal(resp + MC__PROTO_HDR_SIZE, "abc", 3);
    /* A truncated frame, then EOF: closed quietly. */
    h.len = 100;
    mc__hdr_encode(hdr, &h);
    assert_int_equal(write(fd, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
    close(fd);
    WAIT_FOR(atomic_load(&s.closed) == 4, 2000);
    assert_int_equal(s.close_errs[3], -ECONNRESET);

    ping(k);
    client_close(k);
    server_stop(&s);
    free(k);
}

/* Frames over the bound: -ENOBUFS; bodies over the protocol maximum: -EMSGSIZE. */
struct bound_case {
    struct env *e;
    mc__conn_t *c;
    int fd;
    int sent, rc_full, rc_big, rc_iov;
    size_t queued;
    atomic_int closed;
    atomic_int close_err;
};

static void bound_close(mc__conn_t *c, int err)
{
    struct bound_case *b = mc__conn_data(c);
    atomic_store(&b->close_err, err);
    atomic_store(&b->closed, 1);
}

static void bound_frame(mc__conn_t *c, const mc__hdr_t *h, const char *body, size_t len) {}

static const mc__conn_ops_t bound_ops = {.on_frame = bound_frame, .on_close = bound_close};

static void bound_fn(void *arg)
{
    struct bound_case *b = arg;
    static char chunk[256 << 10];
    mc__hdr_t h = {.op = MC__OP_WRITE};
    struct iovec iov = {chunk, MC__PROTO_MAX_BODY + 1};

    CHECK(mc__conn_start(b->e->cl, b->fd, "pair", &bound_ops, b, &b->c) == 0);
    mc__conn_set_limits(b->c, 1 << 20, 200, 0);
    b->rc_big = mc__conn_send(b->c, &h, chunk, MC__PROTO_MAX_BODY + 1);
    b->rc_iov = mc__conn_send_iov(b->c, &h, &iov, 1, NULL, NULL);
    for (b->sent = 0; b->sent < 100; b->sent++) {
        b->rc_full = mc__conn_send(b->c, &h, chunk, sizeof(chunk));
        if (b->rc_full < 0)
            break;
    }
    b->queued = mc__conn_queued(b->c);
}

static void test_send_bounds_and_send_timeout(void **state)
{
    struct env *e = *state;
    struct bound_case b = {.e = e};
    int sv[2];

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    b.fd = sv[0];
    run_on(e->cl, bound_fn, &b);
    assert_int_equal(b.rc_big, -EMSGSIZE);
    assert_int_equal(b.rc_iov, -EMSGSIZE);
    assert_int_equal(b.rc_full, -ENOBUFS);
    assert_int_equal(b.sent, 3); /* 3 * (256 KiB + 24) fit in 1 MiB, 4 do not */
    assert_cmp(b.queued, <=, 1 << 20);
    /* Nobody reads sv[1]: the send stalls and the send timeout closes the conn. */
    WAIT_FOR(atomic_load(&b.closed), 3000);
    assert_int_equal(atomic_load(&b.close_err), -ETIMEDOUT);
    close(sv[1]);
}

static void idle_fn(void *arg)
{
    struct bound_case *b = arg;
    CHECK(mc__conn_start(b->e->cl, b->fd, NULL, &bound_ops, b, &b->c) == 0);
    mc__conn_set_limits(b->c, 0, 0, 100);
}

static void test_idle_timeout(void **state)
{
    struct env *e = *state;
    struct bound_case b = {.e = e};
    int sv[2];

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    b.fd = sv[0];
    uint64_t t0 = mc_loop_now_ms();
    run_on(e->cl, idle_fn, &b);
    WAIT_FOR(atomic_load(&b.closed), 3000);
    assert_int_equal(atomic_load(&b.close_err), -ETIMEDOUT);
    assert_cmp(mc_loop_now_ms() - t0, >=, 95);
    close(sv[1]);
}

/* A header announcing more than mc__conn_set_max_body() allows closes the
 * conn before its body is read; 0 lifts the bound. */
struct maxbody_case {
    struct env *e;
    mc__conn_t *c;
    int fd;
    size_t max;
    atomic_int frames, closed, close_err;
};

static void mb_frame(mc__conn_t *c, const mc__hdr_t *h, const char *body, size_t len)
{
    struct maxbody_case *b = mc__conn_data(c);
    atomic_fetch_add(&b->frames, 1);
}

static void mb_close(mc__conn_t *c, int err)
{
    struct maxbody_case *b = mc__conn_data(c);
    atomic_store(&b->close_err, err);
    atomic_store(&b->closed, 1);
}

static const mc__conn_ops_t mb_ops = {.on_frame = mb_frame, .on_close = mb_close};

static void mb_start_fn(void *arg)
{
    struct maxbody_case *b = arg;
    CHECK(mc__conn_start(b->e->cl, b->fd, "pair", &mb_ops, b, &b->c) == 0);
    mc__conn_set_max_body(b->c, b->max);
}

static void mb_set_fn(void *arg)
{
    struct maxbody_case *b = arg;
    mc__conn_set_max_body(b->c, b->max);
}

/* Writes a PING frame announcing len body bytes, and send of them. */
static void mb_write(int fd, uint32_t len, size_t send)
{
    static char body[4096];
    unsigned char hdr[MC__PROTO_HDR_SIZE];
    mc__hdr_t h = {
        .magic = MC__PROTO_MAGIC, .version = MC__PROTO_VERSION, .op = MC__OP_PING, .len = len};
    mc__hdr_encode(hdr, &h);
    assert_int_equal(write(fd, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
    if (send)
        assert_int_equal(write(fd, body, send), (ssize_t)send);
}

static void test_max_body(void **state)
{
    struct env *e = *state;
    struct maxbody_case b = {.e = e, .max = 100};
    struct capture cap;
    char buf[16];
    int sv[2];

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    b.fd = sv[0];
    run_on(e->cl, mb_start_fn, &b);
    mb_write(sv[1], 100, 100); /* at the bound: delivered */
    WAIT_FOR(atomic_load(&b.frames) == 1, 2000);
    b.max = 0; /* lifted: MC__PROTO_MAX_BODY */
    run_on(e->cl, mb_set_fn, &b);
    mb_write(sv[1], 4000, 4000);
    WAIT_FOR(atomic_load(&b.frames) == 2, 2000);
    b.max = 100;
    run_on(e->cl, mb_set_fn, &b);
    capture_start(&cap);
    mb_write(sv[1], 101, 0); /* over it: refused on the header alone */
    WAIT_FOR(atomic_load(&b.closed), 2000);
    char *log = capture_end(&cap);
    assert_int_equal(atomic_load(&b.close_err), -EMSGSIZE);
    assert_int_equal(atomic_load(&b.frames), 2);
    assert_non_null(strstr(log, "oversized frame (PING, body 101 bytes > max 100"));
    free(log);
    struct timeval tv = {3, 0};
    setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    assert_int_equal(read(sv[1], buf, sizeof(buf)), 0); /* the conn closed its end */
    close(sv[1]);
}

/* ======== connect ======== */

static void test_connect_refused(void **state)
{
    struct env *e = *state;
    struct client *k = calloc(1, sizeof(*k));
    mc__addr_t a;
    char where[128];

    snprintf(where, sizeof(where), "127.0.0.1:%d", free_port());
    assert_int_equal(mc__addr_parse(where, -1, &a), 0);
    client_connect(k, e->cl, &a);
    WAIT_FOR(atomic_load(&k->closed), 3000);
    assert_int_equal(atomic_load(&k->close_err), -ECONNREFUSED);
    assert_int_equal(atomic_load(&k->opened), 0);

    snprintf(where, sizeof(where), "unix:%s/nobody.sock", e->dir);
    assert_int_equal(mc__addr_parse(where, -1, &a), 0);
    client_connect(k, e->cl, &a);
    WAIT_FOR(atomic_load(&k->closed), 3000);
    assert_int_equal(atomic_load(&k->close_err), -ENOENT);
    free(k);
}

/* A listener whose accept queue is full: further SYNs are dropped, so a
 * connect hangs. Returns the listening fd, or -1 if this kernel does not. */
static int full_listener(mc__addr_t *a, int *extra, int nextra)
{
    struct sockaddr_in *in = (struct sockaddr_in *)&a->ss;
    int l = socket(AF_INET, SOCK_STREAM, 0);

    memset(a, 0, sizeof(*a));
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a->len = sizeof(*in);
    assert_int_equal(bind(l, (struct sockaddr *)in, sizeof(*in)), 0);
    assert_int_equal(listen(l, 0), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)in, &a->len), 0);
    for (int i = 0; i < nextra; i++) {
        extra[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(extra[i], (struct sockaddr *)in, sizeof(*in));
        struct pollfd p = {extra[i], POLLOUT, 0};
        if (poll(&p, 1, 200) == 0) {
            for (int j = i + 1; j < nextra; j++)
                extra[j] = -1;
            return l;
        }
    }
    return -1;
}

static void test_connect_timeout(void **state)
{
    struct env *e = *state;
    struct client *k = calloc(1, sizeof(*k));
    mc__addr_t a;
    int extra[8];

    int l = full_listener(&a, extra, 8);
    if (l < 0) {
        print_message("the kernel never stalls a loopback connect: skipped\n");
        free(k);
        skip();
    }
    uint64_t t0 = mc_loop_now_ms();
    memset(k, 0, sizeof(*k));
    k->l = e->cl;
    k->addr = a;
    /* client_connect() uses a 2000 ms timeout */
    run_on(e->cl, cli_connect_fn, k);
    assert_int_equal(k->rc, 0);
    WAIT_FOR(atomic_load(&k->closed), 5000);
    assert_int_equal(atomic_load(&k->close_err), -ETIMEDOUT);
    assert_cmp(mc_loop_now_ms() - t0, >=, 1990);
    assert_cmp(mc_loop_now_ms() - t0, <, 3500);

    /* Closing a conn whose connect is in flight is clean too. */
    memset(k, 0, sizeof(*k));
    k->l = e->cl;
    k->addr = a;
    run_on(e->cl, cli_connect_fn, k);
    run_on(e->cl, cli_close_fn, k);
    WAIT_FOR(atomic_load(&k->closed), 2000);
    assert_int_equal(atomic_load(&k->close_err), 0);
    for (int i = 0; i < 8; i++)
        if (extra[i] >= 0)
            close(extra[i]);
    close(l);
    free(k);
}

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

    /* A reply after the timeout is dropped; the conn carries on. */
    server_start(&s, e->sl, "127.0.0.1:0", SRV_SLOW);
    client_connect(k, e->cl, &s.addr);
    assert_int_equal(call(k, MC__OP_PING, "", 100, &r), 0);
    WAIT_FOR(atomic_load(&r.done), 3000);
    assert_int_equal(r.status, -ETIMEDOUT);
    usleep((SLOW_MS + 100) * 1000);
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
    usleep(50000); /* some bytes go out, the rest wait: nobody reads sv[1] */
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

/* read() on a socket with a receive timeout, which the loops' io_uring task
 * work may interrupt with EINTR (the kernel does not restart it then). */
static ssize_t read_retry(int fd, void *buf, size_t n)
{
    ssize_t r;
    while ((r = read(fd, buf, n)) < 0 && errno == EINTR)
        ;
    return r;
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
    /* Silent before the handshake: closed after ~100 ms. */
    uint64_t t0 = mc_loop_now_ms();
    int b = raw_connect(&t.addr);
    assert_true(raw_closed(b));
    assert_cmp(mc_loop_now_ms() - t0, >=, 90);
    assert_cmp(mc_loop_now_ms() - t0, <, 1000);
    /* Through it, silent: closed after the idle timeout. */
    assert_true(raw_closed(a));
    assert_cmp(mc_loop_now_ms() - t0, >=, 390);
    run_on(e->sl, srv_case_stats_fn, &t);
    assert_int_equal(t.st.timed_out, 2);
    close(a);
    close(b);
    run_on(e->sl, srv_case_close_fn, &t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log_lines),
        cmocka_unit_test(test_addr_parse),
        cmocka_unit_test_setup_teardown(test_io_recv_send_cancel_timeout, setup, teardown),
        cmocka_unit_test(test_io_release_on_loop_free),
        cmocka_unit_test_setup_teardown(test_echo_tcp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_echo_tcp6, setup, teardown),
        cmocka_unit_test_setup_teardown(test_echo_unix, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unix_stale_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_frames_close_only_that_conn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_send_bounds_and_send_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idle_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_body, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connect_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connect_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rpc_timeout_and_late_reply, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rpc_server_close_fails_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_midflight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rpc_client_reconnects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rpc_client_keepalive_and_reconnect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_connection_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_handshake_limits, setup, teardown),
    };

    mc__log_init("test_net", MC__LOG_INFO);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
