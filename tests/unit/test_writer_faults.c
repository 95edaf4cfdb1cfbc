/*
 * test_writer_faults.c - a streaming writer (mc_writer_t) of a real store
 * whose operations in flight together fail part way: what the writer
 * reads back and publishes is what was acknowledged, zeros where nothing
 * was, or nothing at all with the failure's error at the commit.
 *
 * Failures come from a fault injection point in the client's transfers
 * (MC_FAULT_XFER, set while the test's stores open: write transfers that
 * start at one object offset fail, on every replica or on one node's),
 * from a write too large for the segment (ENOSPC from the master), and
 * from a node whose loop thread the test holds, so that a transfer is
 * still on its way while the writer goes on.
 */
#include "writer_fixture.h"

#include <poll.h>
#include <stdio.h>

#define FOFF 4096 /* where MC_FAULT_XFER's write transfers start */

/* One operation of a batch: a write of buf[off, off + len), (len 0 and
 * trunc 1) a truncation to off, (trunc 2) a read of [off, off + len) into
 * dst, or (trunc 3) a punch of [off, off + len). */
typedef struct wop {
    uint64_t off;
    size_t len;
    int trunc;
    const char *src; /* the bytes at off (NULL: the batch's buffer's) */
    char *dst;       /* a read's */
} wop_t;
#define WRITE(off, len)                                                                            \
    {                                                                                              \
        (off), (len), 0, NULL, NULL                                                                \
    }
#define TRUNC(size)                                                                                \
    {                                                                                              \
        (size), 0, 1, NULL, NULL                                                                   \
    }
#define READ(off, len, dst)                                                                        \
    {                                                                                              \
        (off), (len), 2, NULL, (dst)                                                               \
    }
#define PUNCH(off, len)                                                                            \
    {                                                                                              \
        (off), (len), 3, NULL, NULL                                                                \
    }

/* Operations of one writer issued together on its store's loop thread,
 * so that none of them waits for another's answer to start. */
typedef struct ops {
    mc_writer_t *w;
    const char *buf;
    int n;
    wop_t op[NW];
    slot_t sl[NW];
    batch_t b;
} ops_t;

static void ops_issue(void *arg)
{
    ops_t *r = arg;

    for (int i = 0; i < r->n; i++) {
        const wop_t *op = &r->op[i];
        int rc =
            op->trunc == 3 ? mc_writer_punch_async(r->w, op->off, op->len, slot_done, &r->sl[i])
            : op->trunc == 2
                ? mc_writer_read_async(r->w, op->off, op->dst, op->len, slot_done, &r->sl[i])
            : op->trunc ? mc_writer_truncate_async(r->w, op->off, slot_done, &r->sl[i])
                        : mc_writer_write_async(r->w, op->off, op->src ? op->src : r->buf + op->off,
                                                op->len, slot_done, &r->sl[i]);
        if (rc < 0)
            slot_done(&r->sl[i], rc);
    }
}

/* Issues r's operations together (not waited for). */
static void ops_start(mc_store_t *s, ops_t *r)
{
    batch_init(&r->b, r->n);
    for (int i = 0; i < r->n; i++)
        r->sl[i] = (slot_t){&r->b, i};
    assert_int_equal(mc_loop_post(mc_store_loop(s), ops_issue, r), 0);
}

/* One writer call, waited for: its result. */
static int wcall(mc_writer_t *w, int kind, uint64_t off, void *buf, size_t len)
{
    batch_t b;
    slot_t sl = {&b, 0};
    int rc;

    batch_init(&b, 1);
    if (kind == 'w')
        rc = mc_writer_write_async(w, off, buf, len, slot_done, &sl);
    else if (kind == 'r')
        rc = mc_writer_read_async(w, off, buf, len, slot_done, &sl);
    else
        rc = mc_writer_commit_async(w, NULL, slot_done, &sl);
    if (rc < 0)
        return rc;
    batch_wait(&b);
    return b.rc[0];
}

/* Fails at the first byte of got[0, n) that is not want's. */
static void same_bytes(const char *what, const char *got, const char *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s: byte %zu is 0x%02x, not 0x%02x", what, i, (unsigned char)got[i],
                     (unsigned char)want[i]);
}

/* Checks that w holds want[0, size) (read back, then published and
 * removed), saying which round of the test failed. */
static void check_published(mc_store_t *s, mc_writer_t *w, const char *want, uint64_t size,
                            size_t round)
{
    char *got = malloc(size ? size : 1), what[64];

    assert_cmp(mc_writer_size(w), ==, size);
    memset(got, 0x55, size);
    assert_int_equal(wcall(w, 'r', 0, got, size), (int)size);
    snprintf(what, sizeof(what), "round %zu, read back", round);
    same_bytes(what, got, want, size);
    assert_int_equal(wcall(w, 'c', 0, NULL, 0), 0);
    memset(got, 0x55, size);
    assert_int_equal(mc_get(s, "f", 1, 0, got, size, NULL), (int)size);
    snprintf(what, sizeof(what), "round %zu, published", round);
    same_bytes(what, got, want, size);
    assert_int_equal(mc_remove(s, "f", 1, MC_REMOVE_FORCE), 0);
    free(got);
}

/* Runs fixture fn with MC_FAULT_XFER set, in the stores it opens, to what
 * the test's entry gives as its initial state (*state). */
static int with_env(void **state, int (*fn)(void **))
{
    setenv("MC_FAULT_XFER", *state, 1);
    int rc = fn(state);
    unsetenv("MC_FAULT_XFER");
    return rc;
}

/* The fixtures of test_writer_gaps.c with that fault. */
static int setup_env(void **state)
{
    return with_env(state, setup);
}

static int setup_env_tcp(void **state)
{
    return with_env(state, setup_tcp);
}

static int setup_env_node(void **state)
{
    return with_env(state, setup_node);
}

/* The faults, for transfers of bytes that start at FOFF (at 0 in LATE_PUT,
 * where a put's start): */
#define FAIL "off=4096,err=5"             /* fail with EIO before a byte moves */
#define DELAY "off=4096,delay=1000"       /* held back a second, still on their way */
#define LATE "off=4096,err=5,delay=1000"  /* fail at once, and land a second later */
#define LATE_PUT "off=0,err=5,delay=1000" /* the same, in the writer's store only */

/* setup_tcp() (node 0) or setup_node() with the fault in the writer's
 * store only: the others' puts (dirty(), fill_pinned()) start at 0 too. */
static int setup_late_put(void **state, int node)
{
    fix_t *f = calloc(1, sizeof(*f));

    f->srv = open_server("127.0.0.1:0", node ? MiB : SEG);
    f->node = node ? open_member(f, SEG) : NULL;
    setenv("MC_FAULT_XFER", LATE_PUT, 1);
    f->s = open_member(f, 0);
    unsetenv("MC_FAULT_XFER");
    *state = f;
    return 0;
}

static int setup_late_put_tcp(void **state)
{
    return setup_late_put(state, 0);
}

static int setup_late_put_node(void **state)
{
    return setup_late_put(state, 1);
}

/*
 * A write whose transfer fails after it made room for the writes issued
 * with it (the size counted it, and they went on): B ends inside its
 * range (its bytes were dropped with the size going back), or C leaves it
 * inside the size (its range kept what the segment held). Either way the
 * commit fails with the write's error and nothing is published: a version
 * never loses an acknowledged write nor shows bytes nobody wrote.
 */
static void test_a_write_failed_in_transfer_fails_the_commit(void **state)
{
    fix_t *f = *state;
    mc_store_t *s = f->s;
    size_t span = 64 * 1024;
    char *data = malloc(span), *got = malloc(span), *want = calloc(1, span);
    wop_t later[2] = {WRITE(5000, 100), WRITE(20000, 100)};

    for (size_t i = 0; i < span; i++)
        data[i] = (char)(i % 251 + 1);
    for (int round = 0; round < 2; round++) {
        ops_t r = {.buf = data, .n = 2, .op = {WRITE(FOFF, 8192), later[round]}};
        uint64_t end = later[round].off + later[round].len;

        dirty(f);
        r.w = open_writer(f);
        assert_int_equal(wcall(r.w, 'w', 0, data, 10), 10);
        ops_start(s, &r);
        batch_wait(&r.b);
        assert_int_equal(r.b.rc[0], -EIO); /* the injected failure */
        /* Acknowledged, or (started after the failure: an embedded store
         * moves the bytes as a write starts) failed for the same cause. */
        if (r.b.rc[1] != -EIO)
            assert_int_equal(r.b.rc[1], (int)later[round].len);
        memset(want, 0, span);
        memcpy(want, data, 10);
        if (r.b.rc[1] > 0)
            memcpy(want + later[round].off, data + later[round].off, later[round].len);
        else
            end = 10;
        int rc = wcall(r.w, 'c', 0, NULL, 0);
        if (rc == 0) { /* say how the published version is wrong */
            memset(got, 0x55, span);
            int n = mc_get(s, "f", 1, 0, got, span, NULL);
            if (n != (int)end) /* fewer: a write dropped; more: bytes nobody wrote */
                fail_msg("round %d: published %d bytes, not %d", round, n, (int)end);
            same_bytes("published", got, want, end);
        }
        assert_int_equal(rc, -EIO);
        assert_int_equal(mc_get(s, "f", 1, 0, got, span, NULL), -ENOENT);
    }
    free(data);
    free(got);
    free(want);
}

/*
 * After a write failed in its transfer, the writer's reads, writes and
 * truncations fail with its error too: none of them can show or build on
 * bytes of a version that will never be published.
 */
static void test_a_failed_transfer_fails_what_follows(void **state)
{
    fix_t *f = *state;
    char *data = calloc(1, 3 * FOFF);

    mc_writer_t *w = open_writer(f);
    assert_int_equal(wcall(w, 'w', FOFF, data, FOFF), -EIO);
    assert_int_equal(wcall(w, 'r', 0, data, FOFF), -EIO);
    assert_int_equal(wcall(w, 'w', 0, data, 10), -EIO);
    assert_int_equal(wcall(w, 'c', 0, NULL, 0), -EIO);
    free(data);
}

/*
 * A write past the end that the master refuses (no space) while a
 * truncation issued after it shrinks the size into its range, or into the
 * gap before it, and maybe grows it again: the write changes nothing, the
 * size is the truncation's, and everything past the bytes written before
 * reads as zeros (POSIX: a file grown by truncate reads zeros there), not
 * as what the segment's space held.
 */
static void test_a_truncate_into_a_refused_write_reads_zeros(void **state)
{
    fix_t *f = *state;
    mc_store_t *s = f->s;
    size_t big = 2 * SEG, span = 2 * MiB;
    char *data = calloc(1, big), *want = calloc(1, span);
    uint64_t a = MiB - 4096;
    struct {
        uint64_t t1, t2; /* the truncations (t2 0: none) */
    } rounds[] = {{MiB - 2048, 0}, {MiB - 2048, MiB + 4096}, {500, 0}, {500, MiB + 100}};

    for (size_t i = 0; i < big; i++)
        data[i] = (char)(i % 239 + 1);
    memcpy(want, data, 10);
    for (size_t round = 0; round < sizeof(rounds) / sizeof(rounds[0]); round++) {
        ops_t r = {.buf = data, .n = 2, .op = {WRITE(a, big), TRUNC(rounds[round].t1)}};
        uint64_t size = rounds[round].t2 ? rounds[round].t2 : rounds[round].t1;

        if (rounds[round].t2)
            r.op[r.n++] = (wop_t)TRUNC(rounds[round].t2);
        dirty(f);
        r.w = open_writer(f);
        assert_int_equal(wcall(r.w, 'w', 0, data, 10), 10); /* space reserved past it */
        ops_start(s, &r);
        batch_wait(&r.b);
        assert_int_equal(r.b.rc[0], -ENOSPC);
        for (int i = 1; i < r.n; i++)
            assert_int_equal(r.b.rc[i], 0);
        check_published(s, r.w, want, size, round);
    }
    free(data);
    free(want);
}

/*
 * A write that waits for space (the master's answer to its grow) while a
 * truncation issued after it shrinks the size into its range and another
 * grows it again: the second truncation's zeros wait behind the write, and
 * must land after the write's bytes, not before them (POSIX: the bytes
 * past the first truncation read as zeros). Nothing fails here: it is the
 * order in which the writer sends what it was asked to, in that order.
 */
static void test_a_truncate_through_a_write_in_flight_reads_zeros(void **state)
{
    fix_t *f = *state;
    mc_store_t *s = f->s;
    size_t span = 2 * MiB;
    char *data = malloc(span), *want = malloc(span);
    struct {
        int first;        /* 10 bytes written first (space reserved past them) */
        uint64_t off, t1; /* the write's start (8192 bytes), the shrink */
    } rounds[] = {{0, 0, 0}, {0, 0, 4000}, {0, 100, 50}, {1, MiB - 100, MiB - 50}};

    for (size_t i = 0; i < span; i++)
        data[i] = (char)(i % 233 + 1);
    for (size_t round = 0; round < sizeof(rounds) / sizeof(rounds[0]); round++) {
        uint64_t off = rounds[round].off, t1 = rounds[round].t1, end = off + 8192;
        ops_t r = {.buf = data, .n = 3, .op = {WRITE(off, 8192), TRUNC(t1), TRUNC(end)}};

        dirty(f);
        r.w = open_writer(f);
        memset(want, 0, span);
        if (rounds[round].first) {
            assert_int_equal(wcall(r.w, 'w', 0, data, 10), 10);
            memcpy(want, data, 10);
        }
        if (t1 > off)
            memcpy(want + off, data + off, t1 - off);
        ops_start(s, &r);
        batch_wait(&r.b);
        assert_int_equal(r.b.rc[0], 8192);
        assert_int_equal(r.b.rc[1], 0);
        assert_int_equal(r.b.rc[2], 0);
        check_published(s, r.w, want, end, round);
    }
    free(data);
    free(want);
}

/*
 * A read issued right after a write past the size, before the write's
 * gap is zeros (its space is asked of the master first): the size already
 * counts the write, so the read must wait for the gap's zeros, never read
 * what the segment held there (another object's bytes). Nothing fails.
 */
static void test_a_read_after_a_write_past_the_size_reads_its_gap_as_zeros(void **state)
{
    fix_t *f = *state;
    mc_store_t *s = f->s;
    size_t gap = 256 * 1024, len = 4096;
    char *data = malloc(gap + len), *got = malloc(gap + len), *want = calloc(1, gap + len);

    for (size_t i = 0; i < gap + len; i++)
        data[i] = (char)(i % 229 + 1);
    memcpy(want, data, 10);
    memcpy(want + gap, data + gap, len);
    dirty(f);
    memset(got, 0x55, gap + len);
    ops_t r = {.buf = data, .n = 2, .op = {WRITE(gap, len), READ(0, gap + len, got)}};
    r.w = open_writer(f);
    assert_int_equal(wcall(r.w, 'w', 0, data, 10), 10); /* the writer's first space */
    ops_start(s, &r);
    batch_wait(&r.b);
    assert_int_equal(r.b.rc[0], (int)len);
    assert_int_equal(r.b.rc[1], (int)(gap + len));
    same_bytes("read with the write", got, want, gap + len);
    check_published(s, r.w, want, gap + len, 0);
    free(data);
    free(got);
    free(want);
}

/*
 * Two writes of the same bytes in flight together, the later one's
 * content to stay: they reach a co-located node whose segment is not
 * mapped yet, so both wait for the mapping, and must then be copied in the
 * order they were sent (a node applies a writer's transfers in order:
 * that is what makes the order of writes in flight together hold).
 */
static void test_writes_waiting_for_a_mapping_land_in_order(void **state)
{
    fix_t *f = *state;
    mc_store_t *s = f->s;
    char *a = malloc(8192), *b = malloc(8192), *got = malloc(8192);
    mc_store_stats_t st;

    memset(a, 'a', 8192);
    memset(b, 'b', 8192);
    ops_t r = {.n = 2, .op = {{0, 8192, 0, a, NULL}, {0, 8192, 0, b, NULL}}};
    r.w = open_writer(f);
    ops_start(s, &r);
    batch_wait(&r.b);
    assert_int_equal(r.b.rc[0], 8192);
    assert_int_equal(r.b.rc[1], 8192);
    memset(got, 0x55, 8192);
    assert_int_equal(wcall(r.w, 'r', 0, got, 8192), 8192);
    same_bytes("read back", got, b, 8192);
    assert_int_equal(wcall(r.w, 'c', 0, NULL, 0), 0);
    assert_int_equal(mc_get(s, "f", 1, 0, got, 8192, NULL), 8192);
    same_bytes("published", got, b, 8192);
    mc_store_stats(s, &st);
    assert_cmp(st.shm_bytes, >=, 2 * 8192); /* the writes went through the mapping */
    free(a);
    free(b);
    free(got);
}

/* ---- a replica dropped while the writer took a new replica set ---- */

/* Puts hard-pinned objects of 1 MiB, the i-th full of byte 'A' + i, until
 * the segments are full: every byte of free space is some object's now
 * (put by the store that holds the writer's segment, so that the writer's
 * store counts only its own transfers). Returns how many. */
static int fill_pinned(const fix_t *f, char *buf)
{
    mc_store_t *s = f->node ? f->node : f->srv; /* the segment's own store */
    mc_put_opts_t po = placement(f);
    char key[16];
    int n = 0, rc;

    po.pin = MC_PIN_HARD;
    for (;; n++) {
        snprintf(key, sizeof(key), "pin%d", n);
        memset(buf, 'A' + n, MiB);
        if ((rc = mc_put(s, key, strlen(key), buf, MiB, &po)) < 0)
            break;
    }
    assert_int_equal(rc, -ENOSPC);
    assert_in_range(n, 1, 40);
    return n;
}

/* Checks that the n objects of fill_pinned() kept their bytes, and removes
 * them. */
static void check_pinned(const fix_t *f, int n, char *buf)
{
    mc_store_t *s = f->node ? f->node : f->srv;
    char key[16], what[64], *want = malloc(MiB);

    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "pin%d", i);
        memset(want, 'A' + i, MiB);
        memset(buf, 0x55, MiB);
        assert_int_equal(mc_get(s, key, strlen(key), 0, buf, MiB, NULL), MiB);
        snprintf(what, sizeof(what), "another object (%s)", key);
        same_bytes(what, buf, want, MiB);
        assert_int_equal(mc_remove(s, key, strlen(key), MC_REMOVE_FORCE), 0);
    }
    free(want);
}

/*
 * A write's bytes are still on their way (MC_FAULT_XFER holds them back)
 * when a truncation shrinks the file below them and a write past a long
 * gap gives the gap's space back (punched). That space must not go to
 * another object while those bytes can still land in it: objects put
 * meanwhile, filling the segments, keep their bytes, and the file reads
 * as zeros up to the last write.
 */
static void test_space_given_back_waits_for_the_bytes_on_their_way(void **state)
{
    fix_t *f = *state;
    uint64_t boff = 3 * MiB, size = boff + 4096;
    char *data = malloc(4 * MiB + FOFF), *want = calloc(1, size), *buf = malloc(MiB);

    for (size_t i = 0; i < 4 * MiB + FOFF; i++)
        data[i] = (char)(i % 251 + 1);
    memcpy(want + boff, data + boff, 4096);
    dirty(f);
    ops_t a = {.w = open_writer(f), .buf = data, .n = 1, .op = {WRITE(FOFF, 4 * MiB)}};
    ops_t b = {.w = a.w, .buf = data, .n = 2, .op = {TRUNC(0), WRITE(boff, 4096)}};
    ops_start(f->s, &a); /* held back */
    ops_start(f->s, &b); /* [0, 3 MiB) is a gap past the size: punched */
    batch_wait(&b.b);
    assert_int_equal(b.b.rc[0], 0);
    assert_int_equal(b.b.rc[1], 4096);
    int n = fill_pinned(f, buf);
    batch_wait(&a.b);
    assert_int_equal(a.b.rc[0], 4 * MiB);
    check_pinned(f, n, buf);
    check_published(f->s, a.w, want, size, 0);
    free(data);
    free(want);
    free(buf);
}

/*
 * A writer dropped (mc_writer_abort()) while a write's bytes are still on
 * their way: its space goes back only after they landed, so that objects
 * put meanwhile, filling the segments, keep their bytes.
 */
static void test_an_abort_waits_for_the_bytes_on_their_way(void **state)
{
    fix_t *f = *state;
    char *data = malloc(MiB), *buf = malloc(MiB);

    memset(data, 'w', MiB);
    dirty(f);
    ops_t a = {.w = open_writer(f), .buf = data - FOFF, .n = 1, .op = {WRITE(FOFF, MiB)}};
    ops_start(f->s, &a); /* held back */
    mc_writer_abort(a.w);
    int n = fill_pinned(f, buf);
    batch_wait(&a.b);
    assert_int_equal(a.b.rc[0], MiB);
    check_pinned(f, n, buf);
    free(data);
    free(buf);
}

/*
 * A commit issued while a write is still on its way publishes the version
 * with the write's bytes: it waits for the writer's operations to end.
 */
static void test_a_commit_waits_for_the_writes_in_flight(void **state)
{
    fix_t *f = *state;
    char data[2 * FOFF], want[2 * FOFF], got[2 * FOFF];

    memset(data, 'w', sizeof(data));
    memset(want, 0, FOFF);
    memset(want + FOFF, 'w', FOFF);
    ops_t a = {.w = open_writer(f), .buf = data, .n = 1, .op = {WRITE(FOFF, FOFF)}};
    ops_start(f->s, &a); /* held back */
    assert_int_equal(wcall(a.w, 'c', 0, NULL, 0), 0);
    batch_wait(&a.b);
    assert_int_equal(a.b.rc[0], FOFF);
    memset(got, 0x55, sizeof(got));
    assert_int_equal(mc_get(f->s, "f", 1, 0, got, sizeof(got), NULL), 2 * FOFF);
    same_bytes("published", got, want, sizeof(got));
    assert_int_equal(mc_remove(f->s, "f", 1, MC_REMOVE_FORCE), 0);
}

/* Bytes s moved, on every transport. */
static uint64_t moved(mc_store_t *s)
{
    mc_store_stats_t st;

    mc_store_stats(s, &st);
    return st.local_bytes + st.shm_bytes + st.tcp_bytes + st.rdma_bytes;
}

/* Fills the segments with pinned objects (fill_pinned()), waits (bounded)
 * until the writer's store moved `until` bytes in all, the late ones
 * landed, then checks the objects. */
static void fill_until_landed(const fix_t *f, uint64_t until)
{
    char *buf = malloc(MiB);
    int n = fill_pinned(f, buf);
    struct timespec t0, now;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    do { /* the late bytes land a second after they failed */
        poll(NULL, 0, 10);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (moved(f->s) < until && now.tv_sec - t0.tv_sec < 10);
    assert_cmp(moved(f->s), >=, until);
    check_pinned(f, n, buf);
    free(buf);
}

/*
 * A write's transfer fails, and its bytes land all the same a second later
 * (MC_FAULT_XFER with a delay and an error: a node that took them after
 * the writer gave up on them). The writer's commit fails and gives its
 * space back; until its write lease is over, that space must not go to
 * another object: objects put meanwhile, filling the segments, keep their
 * bytes when the late ones land.
 */
static void test_a_failed_write_landing_late_spoils_no_other_object(void **state)
{
    fix_t *f = *state;
    char *data = malloc(MiB);

    memset(data, 'w', MiB);
    dirty(f);
    mc_writer_t *w = open_writer(f);
    assert_int_equal(wcall(w, 'w', FOFF, data, MiB), -EIO);
    assert_int_equal(wcall(w, 'c', 0, NULL, 0), -EIO);
    fill_until_landed(f, moved(f->s) + MiB);
    free(data);
}

/* The same for a put made in one call (its transfer from offset 0 fails:
 * setup_late_put_*). */
static void test_a_failed_put_landing_late_spoils_no_other_object(void **state)
{
    fix_t *f = *state;
    char *data = malloc(MiB);
    mc_put_opts_t po = placement(f);

    memset(data, 'w', MiB);
    dirty(f);
    assert_int_equal(mc_put(f->s, "f", 1, data, MiB, &po), -EIO);
    fill_until_landed(f, moved(f->s) + MiB);
    free(data);
}

/*
 * A write issued right after a punch of its range, before the punch's
 * answer: it takes effect after the punch (its bytes stay, the rest of the
 * range reads as zeros), and never lands in the space the punch gave back.
 */
static void test_a_write_after_a_punch_lands_after_it(void **state)
{
    fix_t *f = *state;
    size_t span = 3 * MiB;
    char *data = malloc(span), *want = calloc(1, span);

    for (size_t i = 0; i < span; i++)
        data[i] = (char)(i % 251 + 1);
    memcpy(want + 2 * MiB, data + 2 * MiB, MiB);
    memcpy(want + FOFF, data + FOFF, FOFF);
    dirty(f);
    mc_writer_t *w = open_writer(f);
    assert_int_equal(wcall(w, 'w', 0, data, span), (int)span);
    ops_t r = {.w = w, .buf = data, .n = 2, .op = {PUNCH(0, 2 * MiB), WRITE(FOFF, FOFF)}};
    ops_start(f->s, &r);
    batch_wait(&r.b);
    assert_int_equal(r.b.rc[0], 0);
    assert_int_equal(r.b.rc[1], FOFF);
    check_published(f->s, w, want, span, 0);
    free(data);
    free(want);
}

/* A master (its own small segment), two nodes and a pure client whose
 * write transfers at FOFF fail on node r's replica (as if r had reset the
 * connection): every store on its own loop thread, over TCP. */
typedef struct two {
    mc_store_t *srv, *n1, *r, *c;
} two_t;

static int setup_two_nodes(void **state)
{
    two_t *t = calloc(1, sizeof(*t));
    fix_t f = {0};
    char spec[128];

    t->srv = f.srv = open_server("127.0.0.1:0", MiB);
    t->n1 = open_member(&f, SEG);
    t->r = open_member(&f, SEG);
    snprintf(spec, sizeof(spec), "off=%d,err=%d,addr=%s", FOFF, ECONNRESET,
             mc_store_served_addr(t->r));
    setenv("MC_FAULT_XFER", spec, 1);
    t->c = open_member(&f, 0);
    unsetenv("MC_FAULT_XFER");
    *state = t;
    return 0;
}

static int teardown_two_nodes(void **state)
{
    two_t *t = *state;

    mc_store_close(t->c);
    mc_store_close(t->r);
    mc_store_close(t->n1);
    mc_store_close(t->srv);
    free(t);
    return 0;
}

/* A node's loop thread held by the test (a node that does not answer for
 * a while, and then does). */
typedef struct hold {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int held, released;
} hold_t;

static void hold_run(void *arg)
{
    hold_t *h = arg;
    struct timespec until;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10; /* bounded: a failing test must not hang the node */
    pthread_mutex_lock(&h->mu);
    h->held = 1;
    pthread_cond_broadcast(&h->cv);
    while (!h->released)
        if (pthread_cond_timedwait(&h->cv, &h->mu, &until) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&h->mu);
}

static void hold_set(hold_t *h, int released)
{
    pthread_mutex_lock(&h->mu);
    h->released = released;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/*
 * Node r misses a write (its transfer fails there while n1 takes it; the
 * writer drops r's replica) after the writer already took a new replica
 * set from the master in which r is still listed: a truncation got its
 * answers while the write's bytes to n1 were held up. r answers again
 * afterwards. The writer's reads of the version in progress must not come
 * from r (it holds the bytes the write replaced), nor may the published
 * version's.
 */
static void test_a_dropped_replica_is_never_read_again(void **state)
{
    two_t *t = *state;
    size_t size = 3 * MiB;
    char *a = malloc(2 * FOFF), *b = malloc(2 * FOFF), *want = calloc(1, size), *got = malloc(size);
    mc_put_opts_t po = {.replica_num = 2, .preferred_segment = mc_store_served_addr(t->r)};
    hold_t h = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    mc_writer_t *w = NULL;
    batch_t ob;
    slot_t osl = {&ob, 0};

    memset(a, 'a', 2 * FOFF);
    memset(b, 'b', 2 * FOFF);
    memcpy(want, a, FOFF);
    memcpy(want + FOFF, b + FOFF, FOFF);
    batch_init(&ob, 1);
    assert_int_equal(mc_writer_open_async(t->c, "f", 1, &po, NULL, &w, slot_done, &osl), 0);
    batch_wait(&ob);
    assert_int_equal(ob.rc[0], 0);
    assert_int_equal(wcall(w, 'w', 0, a, 2 * FOFF), 2 * FOFF); /* on r and n1 */

    /* n1 stops answering; the write at FOFF fails on r at once and waits
     * for n1; the truncation (master calls only: its long gap is punched)
     * gives the writer a new replica set meanwhile. */
    assert_int_equal(mc_loop_post(mc_store_loop(t->n1), hold_run, &h), 0);
    pthread_mutex_lock(&h.mu);
    while (!h.held)
        pthread_cond_wait(&h.cv, &h.mu);
    pthread_mutex_unlock(&h.mu);
    ops_t wr = {.w = w, .buf = b, .n = 1, .op = {WRITE(FOFF, FOFF)}};
    ops_t tr = {.w = w, .n = 1, .op = {TRUNC(size)}};
    ops_start(t->c, &wr);
    ops_start(t->c, &tr);
    batch_wait(&tr.b);
    assert_int_equal(tr.b.rc[0], 0);
    hold_set(&h, 1); /* n1 answers: the write lands there, r is dropped */
    batch_wait(&wr.b);
    assert_int_equal(wr.b.rc[0], FOFF);

    memset(got, 0x55, size);
    assert_int_equal(wcall(w, 'r', 0, got, 2 * FOFF), 2 * FOFF);
    same_bytes("read back", got, want, 2 * FOFF);
    assert_int_equal(wcall(w, 'c', 0, NULL, 0), 0);
    memset(got, 0x55, size);
    assert_int_equal(mc_get(t->c, "f", 1, 0, got, size, NULL), (int)size);
    /* r would be listed first (preferred), and hold the replaced bytes */
    same_bytes("published", got, want, size);
    free(a);
    free(b);
    free(want);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        {"test_a_write_failed_in_transfer_fails_the_commit",
         test_a_write_failed_in_transfer_fails_the_commit, setup_env, teardown, FAIL},
        {"test_a_write_failed_in_transfer_fails_the_commit_over_tcp",
         test_a_write_failed_in_transfer_fails_the_commit, setup_env_tcp, teardown, FAIL},
        {"test_a_write_failed_in_transfer_fails_the_commit_on_a_node",
         test_a_write_failed_in_transfer_fails_the_commit, setup_env_node, teardown, FAIL},
        {"test_a_failed_transfer_fails_what_follows", test_a_failed_transfer_fails_what_follows,
         setup_env, teardown, FAIL},
        cmocka_unit_test_setup_teardown(test_a_truncate_into_a_refused_write_reads_zeros, setup,
                                        teardown),
        {"test_a_truncate_into_a_refused_write_reads_zeros_over_tcp",
         test_a_truncate_into_a_refused_write_reads_zeros, setup_tcp, teardown, NULL},
        {"test_a_truncate_into_a_refused_write_reads_zeros_on_a_node",
         test_a_truncate_into_a_refused_write_reads_zeros, setup_node, teardown, NULL},
        cmocka_unit_test_setup_teardown(test_a_truncate_through_a_write_in_flight_reads_zeros,
                                        setup, teardown),
        {"test_a_truncate_through_a_write_in_flight_reads_zeros_over_tcp",
         test_a_truncate_through_a_write_in_flight_reads_zeros, setup_tcp, teardown, NULL},
        {"test_a_truncate_through_a_write_in_flight_reads_zeros_on_a_node",
         test_a_truncate_through_a_write_in_flight_reads_zeros, setup_node, teardown, NULL},
        cmocka_unit_test_setup_teardown(
            test_a_read_after_a_write_past_the_size_reads_its_gap_as_zeros, setup, teardown),
        {"test_a_read_after_a_write_past_the_size_reads_its_gap_as_zeros_over_tcp",
         test_a_read_after_a_write_past_the_size_reads_its_gap_as_zeros, setup_tcp, teardown, NULL},
        {"test_a_read_after_a_write_past_the_size_reads_its_gap_as_zeros_on_a_node",
         test_a_read_after_a_write_past_the_size_reads_its_gap_as_zeros, setup_node, teardown,
         NULL},
        cmocka_unit_test_setup_teardown(test_writes_waiting_for_a_mapping_land_in_order,
                                        setup_node_shm, teardown),
        cmocka_unit_test_setup_teardown(test_a_dropped_replica_is_never_read_again, setup_two_nodes,
                                        teardown_two_nodes),
        {"test_space_given_back_waits_for_the_bytes_on_their_way",
         test_space_given_back_waits_for_the_bytes_on_their_way, setup_env, teardown, DELAY},
        {"test_space_given_back_waits_for_the_bytes_on_their_way_over_tcp",
         test_space_given_back_waits_for_the_bytes_on_their_way, setup_env_tcp, teardown, DELAY},
        {"test_space_given_back_waits_for_the_bytes_on_their_way_on_a_node",
         test_space_given_back_waits_for_the_bytes_on_their_way, setup_env_node, teardown, DELAY},
        {"test_an_abort_waits_for_the_bytes_on_their_way",
         test_an_abort_waits_for_the_bytes_on_their_way, setup_env, teardown, DELAY},
        {"test_an_abort_waits_for_the_bytes_on_their_way_on_a_node",
         test_an_abort_waits_for_the_bytes_on_their_way, setup_env_node, teardown, DELAY},
        {"test_a_commit_waits_for_the_writes_in_flight",
         test_a_commit_waits_for_the_writes_in_flight, setup_env, teardown, DELAY},
        {"test_a_commit_waits_for_the_writes_in_flight_on_a_node",
         test_a_commit_waits_for_the_writes_in_flight, setup_env_node, teardown, DELAY},
        {"test_a_failed_write_landing_late_spoils_no_other_object_over_tcp",
         test_a_failed_write_landing_late_spoils_no_other_object, setup_env_tcp, teardown, LATE},
        {"test_a_failed_write_landing_late_spoils_no_other_object_on_a_node",
         test_a_failed_write_landing_late_spoils_no_other_object, setup_env_node, teardown, LATE},
        {"test_a_failed_put_landing_late_spoils_no_other_object_over_tcp",
         test_a_failed_put_landing_late_spoils_no_other_object, setup_late_put_tcp, teardown, NULL},
        {"test_a_failed_put_landing_late_spoils_no_other_object_on_a_node",
         test_a_failed_put_landing_late_spoils_no_other_object, setup_late_put_node, teardown,
         NULL},
        cmocka_unit_test_setup_teardown(test_a_write_after_a_punch_lands_after_it, setup, teardown),
        {"test_a_write_after_a_punch_lands_after_it_over_tcp",
         test_a_write_after_a_punch_lands_after_it, setup_tcp, teardown, NULL},
        {"test_a_write_after_a_punch_lands_after_it_on_a_node",
         test_a_write_after_a_punch_lands_after_it, setup_node, teardown, NULL},
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
