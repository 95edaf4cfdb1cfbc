/*
 * test_net_place.c - unit tests for requests whose body a conn receives
 * straight into a buffer its owner names (mc__conn_ops_t.body_dst and
 * on_placed in net.h; a node's WRITE into its segment): the body arriving
 * in pieces around what the read buffer held, with the frame right behind
 * it framed as usual; a request the owner declines, delivered whole to
 * on_frame; a peer that hangs up mid-body, whose request is never
 * delivered.
 *
 * The peer is a plain blocking socket on the test thread, so that the test
 * decides how the request's bytes are cut: it writes a piece and waits
 * until the conn has taken it (the socket's send queue is empty) before the
 * next one.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "net_harness.h"

#define BIG (256U << 10)
#define SKIP 12 /* the head bytes the owner keeps (a WRITE's segment and offset) */

/* The owner of the conn under test: where bodies go and what arrived. */
struct owner {
    char dst[BIG];
    char head[MC__CONN_SINK_HEAD];
    mc__conn_t *c;
    atomic_int placed, frames, closed;
    int close_err;
    size_t placed_len, frame_len; /* the last frame of each kind */
    int frame_matches;            /* its body held pattern(9, ...) past the head */
    uint64_t frame_id, placed_id;
};

static char *own_body_dst(mc__conn_t *c, const mc__hdr_t *h, const char *head, size_t *skip)
{
    struct owner *o = mc__conn_data(c);
    if (head[0] != 'P' || h->len - SKIP > BIG) /* 'P': place it; anything else: decline */
        return NULL;
    *skip = SKIP;
    return o->dst;
}

static void own_placed(mc__conn_t *c, const mc__hdr_t *h, const char *head, size_t skip)
{
    struct owner *o = mc__conn_data(c);
    CHECK(skip == SKIP);
    memcpy(o->head, head, skip);
    o->placed_len = h->len;
    o->placed_id = h->id;
    atomic_fetch_add(&o->placed, 1);
}

static void own_frame(mc__conn_t *c, const mc__hdr_t *h, const char *body, size_t len)
{
    struct owner *o = mc__conn_data(c);
    CHECK(atomic_load(&o->placed) || len < MC__CONN_SINK_MIN || body[0] != 'P');
    o->frame_len = len;
    o->frame_id = h->id;
    o->frame_matches = len <= SKIP || matches(body + SKIP, 9, len - SKIP);
    atomic_fetch_add(&o->frames, 1);
}

static void own_close(mc__conn_t *c, int err)
{
    struct owner *o = mc__conn_data(c);
    o->close_err = err;
    atomic_store(&o->closed, 1);
}

static const mc__conn_ops_t own_ops = {.on_frame = own_frame,
                                       .on_close = own_close,
                                       .body_dst = own_body_dst,
                                       .on_placed = own_placed};

struct start {
    mc_loop_t *l;
    struct owner *o;
    int fd;
};

static void start_fn(void *arg)
{
    struct start *s = arg;
    CHECK(mc__conn_start(s->l, s->fd, "peer", &own_ops, s->o, &s->o->c) == 0);
}

/* On the loop: closes the conn unless it closed already (then it is freed). */
static void close_fn(void *arg)
{
    struct owner *o = arg;
    if (!atomic_load(&o->closed))
        mc__conn_close(o->c);
}

/* An owner's conn on the server loop and the raw peer's end (returned). */
static int pair(struct env *e, struct owner *o)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    assert_true(ls >= 0);
    assert_int_equal(bind(ls, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(listen(ls, 1), 0);
    assert_int_equal(getsockname(ls, (struct sockaddr *)&sin, &len), 0);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    struct start s = {.l = e->sl, .o = o, .fd = accept(ls, NULL, NULL)};
    assert_true(s.fd >= 0);
    close(ls);
    run_on(e->sl, start_fn, &s);
    return fd;
}

static void owner_end(struct env *e, struct owner *o, int fd)
{
    if (fd >= 0)
        close(fd);
    run_on(e->sl, close_fn, o);
    WAIT_FOR(atomic_load(&o->closed), 3000);
    assert_int_equal(atomic_load(&bad), 0);
}

/* Puts at out a request id whose body is a head ('P' to be placed, 'B' to
 * be buffered, then SKIP - 1 bytes of 'h') and n bytes of pattern 9;
 * returns the frame's length. */
static size_t request(char *out, uint64_t id, char kind, size_t n)
{
    mc__hdr_t h = {.magic = MC__PROTO_MAGIC,
                   .version = MC__PROTO_VERSION,
                   .op = MC__OP_WRITE,
                   .id = id,
                   .len = (uint32_t)(SKIP + n)};
    mc__hdr_encode(out, &h);
    char *body = out + MC__PROTO_HDR_SIZE;
    body[0] = kind;
    memset(body + 1, 'h', SKIP - 1);
    fill((unsigned char *)body + SKIP, 9, n);
    return MC__PROTO_HDR_SIZE + SKIP + n;
}

/* The body lands in the owner's buffer past its head, whatever the read
 * buffer held of it when the header arrived, and the frame written in the
 * same piece as the body's end is framed and delivered after it. */
static void test_request_body_placed(void **state)
{
    struct owner *o = calloc(1, sizeof(*o));
    char *out = malloc(2 * (MC__PROTO_HDR_SIZE + SKIP + BIG));
    int fd = pair(*state, o);
    size_t n1 = request(out, 1, 'P', BIG);
    size_t n2 = request(out + n1, 2, 'B', 100);
    write_taken(fd, out, MC__PROTO_HDR_SIZE + SKIP + 5000); /* the head and a little */
    write_taken(fd, out + MC__PROTO_HDR_SIZE + SKIP + 5000, 70000);
    write_taken(fd, out + MC__PROTO_HDR_SIZE + SKIP + 75000,
                n1 + n2 - (MC__PROTO_HDR_SIZE + SKIP + 75000));
    WAIT_FOR(atomic_load(&o->frames) == 1, 3000);
    assert_int_equal(atomic_load(&o->placed), 1);
    assert_int_equal(o->placed_id, 1);
    assert_int_equal(o->placed_len, SKIP + BIG);
    assert_memory_equal(o->head, out + MC__PROTO_HDR_SIZE, SKIP);
    assert_true(matches(o->dst, 9, BIG));
    assert_int_equal(o->frame_id, 2);
    assert_int_equal(o->frame_len, SKIP + 100);
    assert_true(o->frame_matches);
    owner_end(*state, o, fd);
    free(out);
    free(o);
}

/* A request the owner declines (body_dst NULL) arrives whole in on_frame,
 * and so does one whose body is too small to be worth placing. */
static void test_request_declined_is_buffered(void **state)
{
    struct owner *o = calloc(1, sizeof(*o));
    char *out = malloc(MC__PROTO_HDR_SIZE + SKIP + BIG);
    int fd = pair(*state, o);
    size_t n = request(out, 3, 'B', BIG);
    write_taken(fd, out, 30000);
    write_taken(fd, out + 30000, n - 30000);
    WAIT_FOR(atomic_load(&o->frames) == 1, 3000);
    assert_int_equal(o->frame_len, SKIP + BIG);
    assert_true(o->frame_matches);
    n = request(out, 4, 'P', 1000); /* under MC__CONN_SINK_MIN */
    write_taken(fd, out, n);
    WAIT_FOR(atomic_load(&o->frames) == 2, 3000);
    assert_int_equal(o->frame_id, 4);
    assert_int_equal(atomic_load(&o->placed), 0);
    owner_end(*state, o, fd);
    free(out);
    free(o);
}

/* A peer that hangs up mid-body: the request is never delivered (neither
 * on_placed nor on_frame), and the conn closes with -ECONNRESET. */
static void test_request_cut_short_is_dropped(void **state)
{
    struct owner *o = calloc(1, sizeof(*o));
    char *out = malloc(MC__PROTO_HDR_SIZE + SKIP + BIG);
    int fd = pair(*state, o);
    request(out, 5, 'P', BIG);
    write_taken(fd, out, MC__PROTO_HDR_SIZE + SKIP + 100000);
    close(fd);
    WAIT_FOR(atomic_load(&o->closed), 3000);
    assert_int_equal(o->close_err, -ECONNRESET);
    assert_int_equal(atomic_load(&o->placed), 0);
    assert_int_equal(atomic_load(&o->frames), 0);
    owner_end(*state, o, -1);
    free(out);
    free(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_request_body_placed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_request_declined_is_buffered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_request_cut_short_is_dropped, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
