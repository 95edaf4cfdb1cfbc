/*
 * test_writer_faults.c - a streaming writer (mc_writer_t) of a real store
 * whose operations in flight together fail part way: what the writer
 * reads back and publishes is what was acknowledged, zeros where nothing
 * was, or nothing at all with the failure's error at the commit.
 *
 * Failures come from a fault injection point in the client's transfers
 * (MC_FAULT_XFER, set while the test's stores open: write transfers that
 * start at one object offset fail, on every replica or on one node's),
 * and from a write too large for the segment (ENOSPC from the master).
 */
#include "writer_fixture.h"

#include <stdio.h>

#define FOFF 4096 /* where MC_FAULT_XFER's write transfers start */

/* One operation of a batch: a write of buf[off, off + len) or (len 0 and
 * trunc) a truncation to off. */
typedef struct wop {
    uint64_t off;
    size_t len;
    int trunc;
} wop_t;

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
        int rc = op->trunc ? mc_writer_truncate_async(r->w, op->off, slot_done, &r->sl[i])
                           : mc_writer_write_async(r->w, op->off, r->buf + op->off, op->len,
                                                   slot_done, &r->sl[i]);
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

/* The fixtures of test_writer_gaps.c, with MC_FAULT_XFER failing every
 * write transfer at FOFF with EIO in the stores they open. */
static int with_fault(void **state, int (*fn)(void **))
{
    setenv("MC_FAULT_XFER", "off=4096,err=5", 1);
    int rc = fn(state);
    unsetenv("MC_FAULT_XFER");
    return rc;
}

static int setup_fault(void **state)
{
    return with_fault(state, setup);
}

static int setup_fault_tcp(void **state)
{
    return with_fault(state, setup_tcp);
}

static int setup_fault_node(void **state)
{
    return with_fault(state, setup_node);
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
    wop_t later[2] = {{5000, 100, 0}, {20000, 100, 0}};

    for (size_t i = 0; i < span; i++)
        data[i] = (char)(i % 251 + 1);
    for (int round = 0; round < 2; round++) {
        ops_t r = {.buf = data, .n = 2, .op = {{FOFF, 8192, 0}, later[round]}};
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
    char *data = calloc(1, big), *got = malloc(span), *want = calloc(1, span);
    uint64_t a = MiB - 4096;
    struct {
        uint64_t t1, t2; /* the truncations (t2 0: none) */
    } rounds[] = {{MiB - 2048, 0}, {MiB - 2048, MiB + 4096}, {500, 0}, {500, MiB + 100}};

    for (size_t i = 0; i < big; i++)
        data[i] = (char)(i % 239 + 1);
    memcpy(want, data, 10);
    for (size_t round = 0; round < sizeof(rounds) / sizeof(rounds[0]); round++) {
        ops_t r = {.buf = data, .n = 2, .op = {{a, big, 0}, {rounds[round].t1, 0, 1}}};
        uint64_t size = rounds[round].t2 ? rounds[round].t2 : rounds[round].t1;
        char what[64];

        if (rounds[round].t2)
            r.op[r.n++] = (wop_t){rounds[round].t2, 0, 1};
        dirty(f);
        r.w = open_writer(f);
        assert_int_equal(wcall(r.w, 'w', 0, data, 10), 10); /* space reserved past it */
        ops_start(s, &r);
        batch_wait(&r.b);
        assert_int_equal(r.b.rc[0], -ENOSPC);
        for (int i = 1; i < r.n; i++)
            assert_int_equal(r.b.rc[i], 0);
        assert_cmp(mc_writer_size(r.w), ==, size);
        memset(got, 0x55, span);
        assert_int_equal(wcall(r.w, 'r', 0, got, size), (int)size);
        snprintf(what, sizeof(what), "round %zu, read back", round);
        same_bytes(what, got, want, size);
        assert_int_equal(wcall(r.w, 'c', 0, NULL, 0), 0);
        memset(got, 0x55, span);
        assert_int_equal(mc_get(s, "f", 1, 0, got, span, NULL), (int)size);
        snprintf(what, sizeof(what), "round %zu, published", round);
        same_bytes(what, got, want, size);
        assert_int_equal(mc_remove(s, "f", 1, MC_REMOVE_FORCE), 0);
    }
    free(data);
    free(got);
    free(want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_write_failed_in_transfer_fails_the_commit,
                                        setup_fault, teardown),
        {"test_a_write_failed_in_transfer_fails_the_commit_over_tcp",
         test_a_write_failed_in_transfer_fails_the_commit, setup_fault_tcp, teardown, NULL},
        {"test_a_write_failed_in_transfer_fails_the_commit_on_a_node",
         test_a_write_failed_in_transfer_fails_the_commit, setup_fault_node, teardown, NULL},
        cmocka_unit_test_setup_teardown(test_a_failed_transfer_fails_what_follows, setup_fault,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_truncate_into_a_refused_write_reads_zeros, setup,
                                        teardown),
        {"test_a_truncate_into_a_refused_write_reads_zeros_over_tcp",
         test_a_truncate_into_a_refused_write_reads_zeros, setup_tcp, teardown, NULL},
        {"test_a_truncate_into_a_refused_write_reads_zeros_on_a_node",
         test_a_truncate_into_a_refused_write_reads_zeros, setup_node, teardown, NULL},
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
