/*
 * test_writer_space.c - a streaming writer gives space back to the master
 * (a punch, a commit, an abort, a revoke) only when none of its transfers
 * can land there any more: another object may be given that space next.
 * Transfers are held back, or fail and land late, through the client's
 * fault injection point (MC_FAULT_XFER, delay=); the segments are then
 * filled with other objects, each of which must keep its bytes.
 */
#include "writer_ops.h"

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
    char *data = malloc(FOFF + MiB), *buf = malloc(MiB);

    memset(data, 'w', FOFF + MiB);
    dirty(f);
    ops_t a = {.w = open_writer(f), .buf = data, .n = 1, .op = {WRITE(FOFF, MiB)}};
    /* The writer has the space first (a write from 0 is not held back):
     * the held write then goes out at once, before the abort behind it.
     * Had it still waited for its space, the objects below could take
     * that space first, and the write would rightly fail (ENOSPC). */
    assert_int_equal(wcall(a.w, 'w', 0, data, FOFF + MiB), FOFF + MiB);
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

/* Write pieces of s that a node refused: their write had ended. */
static uint64_t fenced(mc_store_t *s)
{
    mc_store_stats_t st;

    mc_store_stats(s, &st);
    return st.writes_fenced;
}

/* Fills the segments with pinned objects (fill_pinned()), waits (bounded)
 * until the writer's store moved `until` bytes in all or a node refused
 * them (the late ones came), then checks the objects. */
static void fill_until_landed(const fix_t *f, uint64_t until)
{
    char *buf = malloc(MiB);
    uint64_t refused = fenced(f->s);
    int n = fill_pinned(f, buf);
    struct timespec t0, now;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    do { /* the late bytes come a second after they failed */
        poll(NULL, 0, 10);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (moved(f->s) < until && fenced(f->s) == refused && now.tv_sec - t0.tv_sec < 10);
    assert_true(moved(f->s) >= until || fenced(f->s) > refused);
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

/*
 * Another write on the writer's segment ends while the writer goes on (a
 * transfer of it failed: MC_FAULT_XFER in that client only, so it revokes
 * fenced): the master raises the segment's epoch to fence that write's
 * late bytes, so the node refuses the writer's next pieces once; the
 * writer asks for the epoch now and goes on, every write succeeding and
 * every byte published.
 */
static void test_a_write_goes_on_when_another_is_fenced(void **state)
{
    fix_t *f = *state;
    size_t chunk = 64 * 1024, n = 0, max = 4 * MiB / chunk;
    char *data = malloc(chunk * max);
    mc_put_opts_t po = placement(f);
    batch_t b;
    slot_t sl = {&b, 0};
    mc_writer_t *other = NULL;

    for (size_t i = 0; i < chunk * max; i++)
        data[i] = (char)(i % 251 + i / chunk);
    mc_writer_t *w = open_writer(f);
    assert_int_equal(wcall(w, 'w', 0, data, chunk), (int)chunk);
    n = 1;
    setenv("MC_FAULT_XFER", FAIL, 1);
    mc_store_t *s2 = open_member(f, 0);
    unsetenv("MC_FAULT_XFER");
    batch_init(&b, 1);
    assert_int_equal(mc_writer_open_async(s2, "g", 1, &po, NULL, &other, slot_done, &sl), 0);
    batch_wait(&b);
    assert_int_equal(b.rc[0], 0);
    assert_int_equal(wcall(other, 'w', FOFF, data, chunk), -EIO);
    assert_int_equal(wcall(other, 'c', 0, NULL, 0), -EIO); /* revoked, fenced */
    mc_store_close(s2);
    uint64_t refused = fenced(f->s);
    /* Writes into space it holds already (a write that grows gets a fresh
     * replica set, epochs and all): the old epoch goes out until the node
     * enforces the new one, within a beat or two. */
    while (fenced(f->s) == refused && n < max) {
        poll(NULL, 0, 100);
        assert_int_equal(wcall(w, 'w', 0, data + n * chunk, chunk), (int)chunk);
        n++;
    }
    assert_cmp(fenced(f->s), >, refused);
    check_published(f->s, w, data + (n - 1) * chunk, chunk, 0);
    free(data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
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
        {"test_a_write_goes_on_when_another_is_fenced_over_tcp",
         test_a_write_goes_on_when_another_is_fenced, setup_tcp, teardown, NULL},
        {"test_a_write_goes_on_when_another_is_fenced_on_a_node",
         test_a_write_goes_on_when_another_is_fenced, setup_node, teardown, NULL},
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
