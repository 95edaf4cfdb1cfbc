/*
 * test_rpc_into.c - unit tests for calls whose response body is received
 * straight into the caller's buffer (mc__rpc_call_into(), the conn's
 * body_dst hook in net.c): the body arriving in pieces around what the
 * read buffer already held, the frame after it, a body larger than the
 * buffer, an error answer, a timeout and a peer that hangs up mid-body.
 *
 * The peer is a plain blocking socket on the test thread, so that the test
 * decides how the response's bytes are cut: it writes a piece and waits
 * until the client has taken it (the socket's send queue is empty) before
 * the next one.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "net_harness.h"

#define BIG (256U << 10)

/* A listener on loopback (blocking) and the address it listens on. */
static int raw_listen(mc__addr_t *a)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(listen(fd, 4), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
    char s[64];
    snprintf(s, sizeof(s), "127.0.0.1:%d", ntohs(sin.sin_port));
    assert_int_equal(mc__addr_parse(s, 0, a), 0);
    return fd;
}

/* A client conn to a fresh raw peer: returns the peer's end. */
static int peer_pair(struct env *e, struct client *k)
{
    mc__addr_t a;
    int ls = raw_listen(&a);
    client_connect(k, e->cl, &a);
    int fd = accept(ls, NULL, NULL);
    assert_true(fd >= 0);
    close(ls);
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    WAIT_FOR(atomic_load(&k->opened), 2000);
    return fd;
}

/* Reads one request frame's header (and skips its body); returns its id. */
static uint64_t read_request(int fd)
{
    char buf[MC__PROTO_HDR_SIZE + 64];
    size_t got = 0;
    mc__hdr_t h;
    while (got < MC__PROTO_HDR_SIZE) {
        ssize_t r = read_retry(fd, buf + got, MC__PROTO_HDR_SIZE - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
    assert_int_equal(mc__hdr_decode(buf, got, &h), 0);
    assert_true(h.len <= 64);
    while (got < MC__PROTO_HDR_SIZE + h.len) {
        ssize_t r = read_retry(fd, buf + got, MC__PROTO_HDR_SIZE + h.len - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
    return h.id;
}

/* A response header to request id with status and a body of len bytes. */
static void response_hdr(char *out, uint64_t id, int status, uint32_t len)
{
    mc__hdr_t h = {.magic = MC__PROTO_MAGIC,
                   .version = MC__PROTO_VERSION,
                   .op = MC__OP_READ,
                   .id = id,
                   .flags = MC__F_RESPONSE,
                   .status = (int16_t)status,
                   .len = len};
    mc__hdr_encode(out, &h);
}

/* One call_into, its result and where its body came from. */
struct into {
    mc__conn_t *c;
    char *dst;
    size_t cap;
    uint64_t timeout_ms;
    int rc;
    atomic_int done;
    int status;
    size_t len;
    int in_place; /* body == dst */
    int matches;  /* the body holds pattern(7, ...) */
};

static void into_cb(void *arg, int status, const char *body, size_t len)
{
    struct into *q = arg;
    CHECK(atomic_load(&q->done) == 0);
    q->status = status;
    q->len = len;
    q->in_place = body && body == q->dst;
    q->matches = body && matches(body, 7, len);
    atomic_store(&q->done, 1);
}

static void into_fn(void *arg)
{
    struct into *q = arg;
    q->rc = mc__rpc_call_into(q->c, MC__OP_READ, "r", 1, q->dst, q->cap, q->timeout_ms, into_cb, q);
}

static void start_into(struct client *k, struct into *q, char *dst, size_t cap, uint64_t timeout)
{
    memset(q, 0, sizeof(*q));
    q->c = k->c;
    q->dst = dst;
    q->cap = cap;
    q->timeout_ms = timeout;
    run_on(k->l, into_fn, q);
    assert_int_equal(q->rc, 0);
}

/* A client conn, its raw peer, the caller's buffer and a response (one
 * header and a body of BIG + 1 bytes at the most) to write. */
struct fix {
    struct client *k;
    int fd;
    char *dst, *resp;
};

/* Puts in f->resp a successful response to id with a body of len bytes
 * of pattern 7. */
static void response(struct fix *f, uint64_t id, uint32_t len)
{
    response_hdr(f->resp, id, 0, len);
    fill((unsigned char *)f->resp + MC__PROTO_HDR_SIZE, 7, len);
}

static void fix_start(struct env *e, struct fix *f)
{
    f->k = calloc(1, sizeof(*f->k));
    f->fd = peer_pair(e, f->k);
    f->dst = malloc(BIG);
    f->resp = malloc(MC__PROTO_HDR_SIZE * 2 + BIG + 8);
    assert_true(f->k && f->dst && f->resp);
}

/* Checks that no loop callback saw a violation, closes the conn (unless it
 * closed already) and the peer, and frees it all. */
static void fix_end(struct fix *f)
{
    assert_int_equal(atomic_load(&bad), 0);
    if (!atomic_load(&f->k->closed))
        client_close(f->k);
    if (f->fd >= 0)
        close(f->fd);
    free(f->resp);
    free(f->dst);
    free(f->k);
}

/* The body lands in the caller's buffer, whatever the read buffer held of
 * it when its header arrived, and the frame right behind it (written in
 * the same piece as the body's end) is framed as usual. */
static void test_body_received_in_place(void **state)
{
    struct fix f;
    fix_start(*state, &f);
    struct into q;
    struct result small;

    start_into(f.k, &q, f.dst, BIG, 5000);
    uint64_t id = read_request(f.fd);
    assert_int_equal(call(f.k, MC__OP_PING, "", 5000, &small), 0);
    uint64_t id2 = read_request(f.fd);

    response(&f, id, BIG);
    size_t first = MC__PROTO_HDR_SIZE + 1000;
    write_taken(f.fd, f.resp, first); /* the header and a little: in the read buffer */
    write_taken(f.fd, f.resp + first, 100000);
    size_t rest = MC__PROTO_HDR_SIZE + BIG - first - 100000;
    response_hdr(f.resp + first + 100000 + rest, id2, 0, 5); /* the next frame, same write */
    memcpy(f.resp + first + 100000 + rest + MC__PROTO_HDR_SIZE, "pong!", 5);
    write_all(f.fd, f.resp + first + 100000, rest + MC__PROTO_HDR_SIZE + 5);

    WAIT_FOR(atomic_load(&q.done), 3000);
    assert_int_equal(q.status, 0);
    assert_int_equal(q.len, BIG);
    assert_true(q.in_place);
    assert_true(q.matches);
    WAIT_FOR(atomic_load(&small.done), 3000);
    assert_int_equal(small.status, 0);
    assert_int_equal(small.len, 5);
    assert_memory_equal(small.body, "pong!", 5);
    fix_end(&f);
}

/* A body larger than the caller's buffer, and an error answer, arrive as
 * for mc__rpc_call(): through the read buffer, the buffer untouched. */
static void test_body_over_cap_and_errors_use_the_read_buffer(void **state)
{
    struct fix f;
    fix_start(*state, &f);
    struct into q;

    memset(f.dst, 0x5a, BIG);
    start_into(f.k, &q, f.dst, BIG, 5000);
    response(&f, read_request(f.fd), BIG + 1);
    write_all(f.fd, f.resp, MC__PROTO_HDR_SIZE + BIG + 1);
    WAIT_FOR(atomic_load(&q.done), 3000);
    assert_int_equal(q.status, 0);
    assert_int_equal(q.len, BIG + 1);
    assert_false(q.in_place);
    assert_true(q.matches);
    for (size_t i = 0; i < BIG; i++)
        if (f.dst[i] != 0x5a)
            fail_msg("byte %zu of the buffer was written", i);

    start_into(f.k, &q, f.dst, BIG, 5000);
    response_hdr(f.resp, read_request(f.fd), -ENOENT, MC__CONN_SINK_MIN);
    memset(f.resp + MC__PROTO_HDR_SIZE, 0, MC__CONN_SINK_MIN);
    write_all(f.fd, f.resp, MC__PROTO_HDR_SIZE + MC__CONN_SINK_MIN);
    WAIT_FOR(atomic_load(&q.done), 3000);
    assert_int_equal(q.status, -ENOENT);
    assert_false(q.in_place);
    assert_int_equal(f.dst[0], 0x5a);
    fix_end(&f);
}

/* A call that times out while its body is being received closes the conn
 * (-ETIMEDOUT for it and the other pending calls): the kernel may still
 * write into the buffer, so the callback comes only once the conn let go. */
static void test_timeout_mid_body_closes_the_conn(void **state)
{
    struct fix f;
    fix_start(*state, &f);
    struct into q;
    struct result other;

    start_into(f.k, &q, f.dst, BIG, 300);
    uint64_t id = read_request(f.fd);
    assert_int_equal(call(f.k, MC__OP_PING, "", 10000, &other), 0);
    read_request(f.fd);
    response(&f, id, BIG);
    write_taken(f.fd, f.resp, MC__PROTO_HDR_SIZE + 4000);
    WAIT_FOR(atomic_load(&q.done), 3000);
    assert_int_equal(q.status, -ETIMEDOUT);
    WAIT_FOR(atomic_load(&other.done), 3000);
    assert_int_equal(other.status, -ETIMEDOUT);
    WAIT_FOR(atomic_load(&f.k->closed), 3000);
    assert_int_equal(atomic_load(&f.k->close_err), -ETIMEDOUT);
    assert_true(matches(f.dst, 7, 4000));
    fix_end(&f);
}

/* A peer that hangs up in the middle of a body fails the call with
 * -ECONNRESET, at once. */
static void test_peer_gone_mid_body(void **state)
{
    struct fix f;
    fix_start(*state, &f);
    struct into q;

    start_into(f.k, &q, f.dst, BIG, 10000);
    response(&f, read_request(f.fd), BIG);
    write_taken(f.fd, f.resp, MC__PROTO_HDR_SIZE + 70000);
    uint64_t t0 = mc_loop_now_ms();
    close(f.fd);
    WAIT_FOR(atomic_load(&q.done), 3000);
    assert_int_equal(q.status, -ECONNRESET);
    assert_cmp(mc_loop_now_ms() - t0, <, 2000);
    WAIT_FOR(atomic_load(&f.k->closed), 3000);
    f.fd = -1;
    fix_end(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_body_received_in_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_body_over_cap_and_errors_use_the_read_buffer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_timeout_mid_body_closes_the_conn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peer_gone_mid_body, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
