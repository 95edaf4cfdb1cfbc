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
 * still on its way while the writer goes on, and from a segment's epoch
 * raised under such a transfer (its node refuses it, and it is sent
 * again).
 */
#include "writer_ops.h"

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

/* ---- a write refused for an old epoch, and sent again ---- */

/* Posted to a loop: says it ran (after everything posted before it). */
static void loop_reached(void *arg)
{
    slot_done(arg, 0);
}

/* Returns once everything posted to s's loop before this call ran there. */
static void loop_sync(mc_store_t *s)
{
    batch_t b;
    slot_t sl = {&b, 0};

    batch_init(&b, 1);
    assert_int_equal(mc_loop_post(mc_store_loop(s), loop_reached, &sl), 0);
    batch_wait(&b);
}

static uint64_t fenced_count(mc_store_t *s)
{
    mc_store_stats_t st;

    mc_store_stats(s, &st);
    return st.writes_fenced;
}

/* A writer of key (one byte) where f's writers write. */
static mc_writer_t *open_key(const fix_t *f, const char *key)
{
    mc_put_opts_t po = placement(f);
    mc_writer_t *w = NULL;
    batch_t b;
    slot_t sl = {&b, 0};

    batch_init(&b, 1);
    assert_int_equal(mc_writer_open_async(f->s, key, 1, &po, NULL, &w, slot_done, &sl), 0);
    batch_wait(&b);
    assert_int_equal(b.rc[0], 0);
    return w;
}

/* Holds s's loop thread (hold_run()): returns once it is held. */
static void hold_loop(mc_store_t *s, hold_t *h)
{
    assert_int_equal(mc_loop_post(mc_store_loop(s), hold_run, h), 0);
    pthread_mutex_lock(&h->mu);
    while (!h->held)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
}

/*
 * Two writes of the same bytes in flight together, the later one's to
 * stay, while the node's segment changes epoch (another writer there
 * failed, and the master fenced its space). The first write was granted
 * the old epoch and the node refuses it; the writer took a set with the
 * new one in between (a truncation's answers), so the second write is
 * taken. The first asks for the new epoch and is sent again: it must not
 * land over the second one (a write on its way is not only ever applied
 * in the order it was sent: a retry, a switch of transport).
 */
static void test_a_write_sent_again_for_a_new_epoch_stays_under_a_later_one(void **state)
{
    fix_t *f = *state;
    mc_store_t *s = f->s;
    size_t span = 64 * 1024;
    uint64_t at = 2 * FOFF; /* A and B: not where MC_FAULT_XFER fails writes */
    char *x = malloc(span), *a = malloc(FOFF), *b = malloc(FOFF), *got = malloc(span);
    char *want = malloc(span), one = 1;
    hold_t h = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    struct timespec t0, now;

    memset(x, 'x', span);
    memset(a, 'a', FOFF);
    memset(b, 'b', FOFF);
    memcpy(want, x, span);
    memcpy(want + at, b, FOFF);
    mc_writer_t *w = open_writer(f);
    assert_int_equal(wcall(w, 'w', 0, x, span), (int)span); /* granted the epoch of now */
    mc_writer_t *probe = open_key(f, "p");
    assert_int_equal(wcall(probe, 'w', 0, &one, 1), 1);

    /* Another writer on the node fails a transfer: its revoke is fenced,
     * and the master raises the segment's epoch. */
    mc_writer_t *g = open_key(f, "g");
    assert_int_equal(wcall(g, 'w', FOFF, &one, 1), -EIO);
    assert_int_equal(wcall(g, 'c', 0, NULL, 0), -EIO);

    /* Until the node enforces it (its next heartbeat): the probe, which
     * holds the old epoch, is refused once (and then sent again). */
    uint64_t fenced = fenced_count(s);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        assert_int_equal(wcall(probe, 'w', 0, &one, 1), 1);
        if (fenced_count(s) > fenced)
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > 10)
            fail_msg("the node never enforced the new epoch");
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    fenced = fenced_count(s);

    /* A (the old epoch) waits at the node, then a truncation with a long
     * gap (master calls only) gives the writer the new epoch, and B
     * follows A on the same connection. */
    hold_loop(f->node, &h);
    ops_t ra = {.w = w, .n = 1, .op = {{at, FOFF, 0, a, NULL}}};
    ops_t rt = {.w = w, .n = 2, .op = {TRUNC(4 * MiB), TRUNC(span)}};
    ops_t rb = {.w = w, .n = 1, .op = {{at, FOFF, 0, b, NULL}}};
    ops_start(s, &ra);
    ops_start(s, &rt);
    batch_wait(&rt.b);
    assert_int_equal(rt.b.rc[0], 0);
    assert_int_equal(rt.b.rc[1], 0);
    ops_start(s, &rb);
    loop_sync(s); /* B's bytes are on their way */
    hold_set(&h, 1);
    batch_wait(&ra.b);
    batch_wait(&rb.b);
    assert_int_equal(ra.b.rc[0], FOFF);
    assert_int_equal(rb.b.rc[0], FOFF);
    assert_cmp(fenced_count(s), >, fenced); /* A was refused, and sent again */

    memset(got, 0x55, span);
    assert_int_equal(wcall(w, 'r', 0, got, span), (int)span);
    same_bytes("read back", got, want, span);
    assert_int_equal(wcall(w, 'c', 0, NULL, 0), 0);
    memset(got, 0x55, span);
    assert_int_equal(mc_get(s, "f", 1, 0, got, span, NULL), (int)span);
    same_bytes("published", got, want, span);
    assert_int_equal(wcall(probe, 'c', 0, NULL, 0), 0);
    free(x);
    free(a);
    free(b);
    free(got);
    free(want);
}

/* ---- a replica dropped while the writer took a new replica set ---- */

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
        {"test_a_write_sent_again_for_a_new_epoch_stays_under_a_later_one",
         test_a_write_sent_again_for_a_new_epoch_stays_under_a_later_one, setup_env_node, teardown,
         FAIL},
        cmocka_unit_test_setup_teardown(test_a_dropped_replica_is_never_read_again, setup_two_nodes,
                                        teardown_two_nodes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
