/*
 * writer_ops.h - what the tests of a streaming writer under faults share
 * (test_writer_faults.c, test_writer_space.c): batches of writer operations
 * issued together on the store's loop thread, checks of what a writer
 * reads back and publishes, and the fixtures of writer_fixture.h with the
 * client's fault injection point (MC_FAULT_XFER) set.
 */
#ifndef MC_TEST_WRITER_OPS_H
#define MC_TEST_WRITER_OPS_H

#include "writer_fixture.h"

#include <poll.h>
#include <stdio.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

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

#pragma GCC diagnostic pop

#endif
