/*
 * test_epochs.c - unit tests for a node's side of segment epochs
 * (wire/proto.h, "Segment epochs"; node/data_plane.c): a real protocol
 * server (server.c) serving a segment whose epoch the test raises, and a
 * raw peer on the test thread sending WRITEs over loopback TCP. A WRITE
 * below the segment's epoch is refused and writes nothing, buffered or
 * received in place; a WRITE still being received into the segment when
 * the epoch rises holds back what the server says it enforces until its
 * body has landed or its connection closed, so that a master frees no
 * space such bytes may still reach. A READ from before the segment's
 * last mount (wire/proto.h, "Reads") is refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "net_harness.h"

#define SEG 7
#define SEG_SIZE (1U << 20)
#define HEAD 20          /* a WRITE's "uqq": segment, epoch, offset */
#define BIG (256U << 10) /* received in place (over MC__CONN_SINK_MIN) */

/* The node: its segment's memory and epoch, and its server. */
struct node {
    mc_loop_t *l;
    char *mem;
    mc__shm_fence_t *fence; /* NULL: none */
    _Atomic uint64_t epoch;
    mc__server_t *srv;
    mc__addr_t addr;
};

static int lookup(void *arg, uint32_t seg, mc__seg_t *out, uint64_t *epoch)
{
    struct node *n = arg;
    if (seg != SEG)
        return -ENOENT;
    *out = (mc__seg_t){.base = n->mem, .size = SEG_SIZE, .fd = -1, .fence = n->fence};
    *epoch = atomic_load(&n->epoch);
    return 0;
}

static void start_fn(void *arg)
{
    struct node *n = arg;
    mc__server_opts_t so = {.seg_lookup = lookup, .seg_arg = n};
    CHECK(mc__server_new(&n->srv, n->l, &n->addr, &so) == 0);
}

static void close_fn(void *arg)
{
    struct node *n = arg;
    mc__server_close(n->srv);
}

/* What the node's server enforces of epoch, asked on its loop. */
struct ask {
    struct node *n;
    uint64_t epoch, got;
    mc__server_stats_t st;
};

static void ask_fn(void *arg)
{
    struct ask *a = arg;
    a->got = mc__server_enforced(a->n->srv, SEG, a->epoch);
    mc__server_stats(a->n->srv, &a->st);
}

static uint64_t enforced(struct env *e, struct node *n, uint64_t epoch)
{
    struct ask a = {.n = n, .epoch = epoch};
    run_on(e->sl, ask_fn, &a);
    return a.got;
}

static uint64_t fenced(struct env *e, struct node *n)
{
    struct ask a = {.n = n};
    run_on(e->sl, ask_fn, &a);
    return a.st.writes_fenced;
}

static int response(int fd, uint64_t id);

static uint64_t bytes_read(struct env *e, struct node *n)
{
    struct ask a = {.n = n};
    run_on(e->sl, ask_fn, &a);
    return a.st.bytes_read;
}

/* A connected raw peer of n's server, through the session handshake
 * (HELLO: until then a server takes no body over 1 KiB). */
static int peer(struct node *n)
{
    mc__addr_t a;
    assert_int_equal(mc__addr_parse(mc__server_addr(n->srv), -1, &a), 0);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a.ss, a.len), 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char out[MC__PROTO_HDR_SIZE + 64];
    mc__wbuf_t w = {.p = out + MC__PROTO_HDR_SIZE, .cap = 64};
    assert_int_equal(mc__pack(&w, "hhuss", (unsigned)MC__PROTO_SESSION, (unsigned)MC__PROTO_SESSION,
                              (unsigned)MC__ROLE_CLIENT, "t", 1u, "", 0u),
                     0);
    mc__hdr_t h = {.magic = MC__PROTO_MAGIC,
                   .version = MC__PROTO_VERSION,
                   .op = MC__OP_HELLO,
                   .id = 99,
                   .len = (uint32_t)w.len};
    mc__hdr_encode(out, &h);
    write_all(fd, out, MC__PROTO_HDR_SIZE + w.len);
    assert_int_equal(response(fd, 99), 0);
    return fd;
}

/* Puts at out a WRITE (request id) of n bytes of byte c at off of the
 * segment, carrying epoch; returns the frame's length. */
static size_t write_frame(char *out, uint64_t id, uint64_t epoch, uint64_t off, char c, size_t n)
{
    mc__hdr_t h = {.magic = MC__PROTO_MAGIC,
                   .version = MC__PROTO_VERSION,
                   .op = MC__OP_WRITE,
                   .id = id,
                   .len = (uint32_t)(HEAD + n)};
    mc__hdr_encode(out, &h);
    mc__wbuf_t w = {.p = out + MC__PROTO_HDR_SIZE, .cap = HEAD};
    assert_int_equal(mc__pack(&w, "uqq", (unsigned)SEG, epoch, off), 0);
    memset(out + MC__PROTO_HDR_SIZE + HEAD, c, n);
    return MC__PROTO_HDR_SIZE + HEAD + n;
}

/* Reads n bytes from fd into b. */
static void read_all(int fd, char *b, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = read_retry(fd, b + got, n - got);
        if (r <= 0)
            fail_msg("read %zu of %zu bytes, then %s", got, n, r ? strerror(errno) : "EOF");
        got += (size_t)r;
    }
}

/* Reads one response from fd: its status (its id must be id; its body,
 * at most 256 bytes, goes to body, NULL: dropped, and its length to *blen). */
static int response_body(int fd, uint64_t id, char *body, size_t *blen)
{
    char b[MC__PROTO_HDR_SIZE], drop[256];
    read_all(fd, b, sizeof(b));
    mc__hdr_t h;
    assert_int_equal(mc__hdr_decode(b, sizeof(b), &h), 0);
    assert_true(h.flags & MC__F_RESPONSE);
    assert_int_equal(h.id, id);
    assert_in_range(h.len, 0, sizeof(drop));
    read_all(fd, body ? body : drop, h.len);
    if (blen)
        *blen = h.len;
    return h.status;
}

static int response(int fd, uint64_t id)
{
    return response_body(fd, id, NULL, NULL);
}

/* Fails unless n bytes at off of the segment are all c. */
static void seg_is(const struct node *n, uint64_t off, char c, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (n->mem[off + i] != c)
            fail_msg("segment byte %zu is 0x%02x, not 0x%02x", (size_t)(off + i),
                     (unsigned char)n->mem[off + i], (unsigned char)c);
}

static struct node *node_start(struct env *e, uint64_t epoch)
{
    struct node *n = calloc(1, sizeof(*n));
    n->mem = calloc(1, SEG_SIZE);
    atomic_store(&n->epoch, epoch);
    assert_int_equal(mc__addr_parse("127.0.0.1:0", -1, &n->addr), 0);
    n->l = e->sl;
    run_on(e->sl, start_fn, n);
    assert_int_equal(atomic_load(&bad), 0);
    return n;
}

static void node_end(struct env *e, struct node *n)
{
    run_on(e->sl, close_fn, n);
    free(n->fence);
    free(n->mem);
    free(n);
}

/* Sends a READ (request id) of len bytes at off of the segment, carrying
 * epoch; returns its status, the bytes at got (len at most 256). */
static int read_req(int fd, uint64_t id, uint64_t epoch, uint64_t off, uint32_t len, char *got)
{
    char out[MC__PROTO_HDR_SIZE + 24];
    mc__wbuf_t w = {.p = out + MC__PROTO_HDR_SIZE, .cap = 24};
    assert_int_equal(mc__pack(&w, "uqqu", (unsigned)SEG, epoch, off, len), 0);
    mc__hdr_t h = {.magic = MC__PROTO_MAGIC,
                   .version = MC__PROTO_VERSION,
                   .op = MC__OP_READ,
                   .id = id,
                   .len = (uint32_t)w.len};
    mc__hdr_encode(out, &h);
    write_all(fd, out, MC__PROTO_HDR_SIZE + w.len);
    size_t blen = 0;
    int st = response_body(fd, id, got, &blen);
    if (st == 0)
        assert_int_equal(blen, len);
    return st;
}

/* The node's segment was mounted with epoch (as node.c does with its
 * MOUNT_SEGMENT answer), on its loop; reads_fenced gets the READs its
 * data plane refused so far. */
struct mount {
    struct node *n;
    uint64_t epoch, reads_fenced;
};

static void mount_fn(void *arg)
{
    struct mount *m = arg;
    mc__data_plane_t *dp = mc__server_data_plane(m->n->srv);
    if (m->epoch)
        mc__data_plane_mounted(dp, SEG, m->epoch);
    m->reads_fenced = dp->reads_fenced;
}

static uint64_t mounted(struct env *e, struct node *n, uint64_t epoch)
{
    struct mount m = {.n = n, .epoch = epoch};
    run_on(e->sl, mount_fn, &m);
    return m.reads_fenced;
}

/* A WRITE carrying the segment's epoch (or a later one) lands; one below
 * it is refused with -ESTALE and writes nothing, whether its body is
 * buffered (small) or would be received straight into the segment (big);
 * the server counts the refusals. */
static void test_a_write_of_an_old_epoch_is_refused(void **state)
{
    struct env *e = *state;
    struct node *n = node_start(e, 5);
    char *out = malloc(MC__PROTO_HDR_SIZE + HEAD + BIG);
    int fd = peer(n);

    size_t len = write_frame(out, 1, 5, 0, 'a', 100);
    write_all(fd, out, len);
    assert_int_equal(response(fd, 1), 0);
    seg_is(n, 0, 'a', 100);
    len = write_frame(out, 2, 6, 100, 'b', 100); /* granted by a master past us: taken */
    write_all(fd, out, len);
    assert_int_equal(response(fd, 2), 0);
    seg_is(n, 100, 'b', 100);

    atomic_store(&n->epoch, 7); /* the master raised it */
    len = write_frame(out, 3, 6, 0, 'x', 100);
    write_all(fd, out, len);
    assert_int_equal(response(fd, 3), -ESTALE);
    len = write_frame(out, 4, 6, 4096, 'x', BIG);
    write_all(fd, out, len);
    assert_int_equal(response(fd, 4), -ESTALE);
    len = write_frame(out, 5, 0, 0, 'x', 100); /* no epoch at all */
    write_all(fd, out, len);
    assert_int_equal(response(fd, 5), -ESTALE);
    seg_is(n, 0, 'a', 100);
    seg_is(n, 100, 'b', 100);
    seg_is(n, 4096, 0, BIG);
    assert_int_equal(fenced(e, n), 3);

    len = write_frame(out, 6, 7, 4096, 'c', BIG); /* the epoch now: in place */
    write_all(fd, out, len);
    assert_int_equal(response(fd, 6), 0);
    seg_is(n, 4096, 'c', BIG);
    close(fd);
    node_end(e, n);
    free(out);
}

/* A WRITE whose head was taken at epoch 5 and whose body is still on its
 * way when the epoch rises to 6: its bytes may still land, so the server
 * enforces only 5 until they have (then 6), and the same until a
 * connection that stopped half-way closes. */
static void test_a_write_on_its_way_holds_the_epoch_back(void **state)
{
    struct env *e = *state;
    struct node *n = node_start(e, 5);
    char *out = malloc(MC__PROTO_HDR_SIZE + HEAD + BIG);
    size_t part = MC__PROTO_HDR_SIZE + HEAD + 1000;

    assert_int_equal(enforced(e, n, 5), 5);
    for (uint64_t cut = 0, at = 5; cut < 2; cut++, at++) {
        size_t len = write_frame(out, 1, at, 0, (char)('a' + cut), BIG);
        int fd = peer(n);
        write_taken(fd, out, part);
        /* Its head arrives at epoch `at`: the body goes in place. Then
         * the master raises the epoch. */
        WAIT_FOR(enforced(e, n, at) == at && n->mem[999] == (char)('a' + cut), 2000);
        atomic_store(&n->epoch, at + 1);
        assert_int_equal(enforced(e, n, at + 1), at);
        if (!cut) {
            write_all(fd, out + part, len - part);
            assert_int_equal(response(fd, 1), 0);
            seg_is(n, 0, 'a', BIG);
        } else {
            close(fd); /* the peer stops half-way and goes */
        }
        WAIT_FOR(enforced(e, n, at + 1) == at + 1, 2000);
        if (!cut)
            close(fd);
    }
    node_end(e, n);
    free(out);
}

/* A READ carries its replica's epoch. Before any mount is recorded every
 * READ is answered; epochs raised within a mount (writes revoked) refuse
 * no READ; once the segment is mounted again with epoch 9 (its master had
 * dropped it), a READ of a replica handed out before (epoch 8 or less) is
 * refused with -ESTALE and sends no byte, and one of 9 or more is
 * answered. The fence says the mount's epoch to clients reading it
 * mapped; the mount epoch never goes down. */
static void test_a_read_from_before_the_mount_is_refused(void **state)
{
    struct env *e = *state;
    struct node *n = node_start(e, 5);
    n->fence = calloc(1, sizeof(*n->fence));
    memset(n->mem, 'o', 256);
    int fd = peer(n);
    char got[256];

    assert_int_equal(read_req(fd, 1, 0, 0, 100, got), 0); /* nothing mounted yet */
    assert_int_equal(mounted(e, n, 5), 0);
    assert_int_equal(read_req(fd, 2, 5, 0, 100, got), 0);
    assert_memory_equal(got, n->mem, 100);
    atomic_store(&n->epoch, 8); /* raised within the mount: reads go on */
    assert_int_equal(read_req(fd, 3, 5, 0, 100, got), 0);
    assert_int_equal(read_req(fd, 4, 4, 0, 100, got), -ESTALE); /* before this mount */

    assert_int_equal(mounted(e, n, 9), 1); /* dropped, and mounted again */
    assert_int_equal(atomic_load(&n->fence->mount), 9);
    memset(n->mem, 'n', 256); /* a new object takes the space */
    assert_int_equal(read_req(fd, 5, 8, 0, 100, got), -ESTALE);
    assert_int_equal(read_req(fd, 6, 5, 100, 10, got), -ESTALE);
    assert_int_equal(read_req(fd, 7, 0, 0, 10, got), -ESTALE);
    assert_int_equal(read_req(fd, 8, 9, 0, 100, got), 0);
    assert_memory_equal(got, n->mem, 100);
    assert_int_equal(read_req(fd, 9, 10, 0, 100, got), 0);
    assert_int_equal(mounted(e, n, 0), 4);

    assert_int_equal(mounted(e, n, 7), 4); /* never lower */
    assert_int_equal(atomic_load(&n->fence->mount), 9);
    assert_int_equal(read_req(fd, 10, 8, 0, 100, got), -ESTALE);
    assert_int_equal(fenced(e, n), 0); /* no WRITE was refused */
    close(fd);
    node_end(e, n);
}

/*
 * A READ's answer is sent from the segment itself (no copy), as the peer
 * takes it. READs accepted at epoch 5 whose reader is slow (it reads
 * nothing for a while: a stopped or slow client, or just more answers in
 * flight than the kernel's buffers hold, as here) may still wait in the
 * send queue when the segment is mounted again with epoch 9 and the
 * server says it enforces 9, which lets the master place new objects
 * there: the rest of the answers then carry the new object's bytes, as
 * the old replica's (SEMANTICS: "never returning the bytes of a file that
 * took its space"). The reader must get only the bytes that were there
 * when its READ was accepted, or no answer (an error, a closed
 * connection); as long as an answer of before the mount may still go
 * out, the server must not say it enforces the mount's epoch.
 */
static void test_a_slow_reader_gets_no_bytes_of_after_the_mount(void **state)
{
    struct env *e = *state;
    struct node *n = node_start(e, 5);
    memset(n->mem, 'o', SEG_SIZE);
    assert_int_equal(mounted(e, n, 5), 0);
    int fd = peer(n);

    /* READs of the whole segment, more than the kernel's buffers hold. */
    enum { READS = 16 };
    for (uint64_t id = 1; id <= READS; id++) {
        char out[MC__PROTO_HDR_SIZE + 24];
        mc__wbuf_t w = {.p = out + MC__PROTO_HDR_SIZE, .cap = 24};
        assert_int_equal(mc__pack(&w, "uqqu", (unsigned)SEG, (uint64_t)5, (uint64_t)0, SEG_SIZE),
                         0);
        mc__hdr_t h = {.magic = MC__PROTO_MAGIC,
                       .version = MC__PROTO_VERSION,
                       .op = MC__OP_READ,
                       .id = id,
                       .len = (uint32_t)w.len};
        mc__hdr_encode(out, &h);
        write_all(fd, out, MC__PROTO_HDR_SIZE + w.len);
    }
    /* Accepted: their answers are queued. */
    WAIT_FOR(bytes_read(e, n) == (uint64_t)READS * SEG_SIZE, 2000);

    /* The master restarts; the node mounts its segment again (epoch 9);
     * once the node says it enforces 9 (which it must come to: a slow
     * reader cannot hold the segment back for good), a new object takes
     * the space. */
    atomic_store(&n->epoch, 9);
    mounted(e, n, 9);
    WAIT_FOR(enforced(e, n, 9) == 9, 3000);
    memset(n->mem, 'n', SEG_SIZE);

    char *got = malloc(SEG_SIZE);
    size_t new_bytes = 0, answered = 0;
    for (uint64_t id = 1; id <= READS; id++) {
        char b[MC__PROTO_HDR_SIZE];
        mc__hdr_t h;
        if (read_retry(fd, b, sizeof(b)) != (ssize_t)sizeof(b))
            break; /* closed: fine */
        assert_int_equal(mc__hdr_decode(b, sizeof(b), &h), 0);
        assert_int_equal(h.id, id);
        if (h.status < 0)
            continue; /* refused: fine */
        assert_int_equal(h.len, SEG_SIZE);
        size_t got_n = 0;
        ssize_t r;
        while (got_n < SEG_SIZE && (r = read_retry(fd, got + got_n, SEG_SIZE - got_n)) > 0)
            got_n += (size_t)r;
        for (size_t i = 0; i < got_n; i++)
            new_bytes += got[i] != 'o';
        if (got_n < SEG_SIZE)
            break; /* closed half-way: fine */
        answered++;
    }
    if (new_bytes)
        fail_msg("READs of epoch 5 got %zu bytes of the object placed after the mount of "
                 "epoch 9 (%zu answers whole)",
                 new_bytes, answered);
    free(got);
    close(fd);
    node_end(e, n);
}

int main(void)
{
    mc__log_init("test_epochs", MC__LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_write_of_an_old_epoch_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_write_on_its_way_holds_the_epoch_back, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_read_from_before_the_mount_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_slow_reader_gets_no_bytes_of_after_the_mount, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
