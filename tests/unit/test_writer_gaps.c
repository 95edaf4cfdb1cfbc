/*
 * test_writer_gaps.c - writes in flight together on one streaming writer
 * (mc_writer_t) of a real store, past its end: every byte no write
 * covers reads as zeros, never as what the segment's space held before.
 *
 * The writes are issued from the store's loop thread in one go, so that
 * each one's request for space to the master goes out before any answer
 * comes back: the order in which a writer learns its layout then differs
 * from the order it asked. The freed space is full of 0xaa first, so that
 * zeros must be written, not found.
 *
 * Every test runs three times: on an embedded store, whose bytes move by
 * memcpy as each transfer starts; on a pure client of another store in this
 * process reached over TCP loopback, whose transfers are in flight together
 * and whose writer takes a new replica set at each grow while transfers
 * still use the old; and on a pure client whose bytes go over TCP to a node
 * that is not the master (its own loop thread), so that a write's bytes are
 * often still on their way when the master's answer to the next write comes
 * back and that write's zeros go out beside them.
 */
#include "writer_fixture.h"

/* The writes of one round: issued together on the loop thread. */
typedef struct round {
    mc_writer_t *w;
    int n;
    uint64_t off[NW];
    size_t len[NW];
    int rc[NW]; /* each write's result when not its length (0: its length) */
    const char *buf;
    slot_t sl[NW];
    batch_t b;
} round_t;

static void issue(void *arg)
{
    round_t *r = arg;

    for (int i = 0; i < r->n; i++) {
        int rc = mc_writer_write_async(r->w, r->off[i], r->buf + r->off[i], r->len[i], slot_done,
                                       &r->sl[i]);
        if (rc < 0)
            slot_done(&r->sl[i], rc);
    }
}

/* Runs r's writes together, then checks that the writer holds want[0,
 * end) (the bytes written, zeros elsewhere), read back and published. */
static void run_round(mc_store_t *s, round_t *r, const char *want, size_t end)
{
    batch_init(&r->b, r->n);
    for (int i = 0; i < r->n; i++)
        r->sl[i] = (slot_t){&r->b, i};
    assert_int_equal(mc_loop_post(mc_store_loop(s), issue, r), 0);
    batch_wait(&r->b);
    for (int i = 0; i < r->n; i++)
        assert_int_equal(r->b.rc[i], r->rc[i] ? r->rc[i] : (int)r->len[i]);
    assert_cmp(mc_writer_size(r->w), ==, end);

    char *got = malloc(end);
    batch_t b;
    slot_t sl = {&b, 0};
    batch_init(&b, 1);
    memset(got, 0x55, end);
    assert_int_equal(mc_writer_read_async(r->w, 0, got, end, slot_done, &sl), 0);
    batch_wait(&b);
    assert_int_equal(b.rc[0], (int)end);
    for (size_t i = 0; i < end; i++)
        if (got[i] != want[i])
            fail_msg("byte %zu is 0x%02x, not 0x%02x", i, (unsigned char)got[i],
                     (unsigned char)want[i]);
    batch_init(&b, 1);
    assert_int_equal(mc_writer_commit_async(r->w, NULL, slot_done, &sl), 0);
    batch_wait(&b);
    assert_int_equal(b.rc[0], 0);
    memset(got, 0x55, end);
    assert_int_equal(mc_get(s, "f", 1, 0, got, end, NULL), (int)end);
    assert_memory_equal(got, want, end);
    assert_int_equal(mc_remove(s, "f", 1, MC_REMOVE_FORCE), 0); /* its read lease too */
    free(got);
}

/* Checks that the bytes went the way the fixture meant: over TCP for a
 * client of another store, through no socket for an embedded one. */
static void check_transport(const fix_t *f)
{
    mc_store_stats_t st;

    mc_store_stats(f->s, &st);
    if (f->s != f->srv)
        assert_cmp(st.tcp_bytes, >, 0);
    else
        assert_cmp(st.tcp_bytes, ==, 0);
}

/* A write past the reserved space and, before the master answered it, a
 * write into the gap it leaves: the second one's space is handed out after
 * the first's, and whatever of it lies around what it writes is zeroed. */
static void test_write_into_a_gap_being_reserved(void **state)
{
    fix_t *f = *state;
    mc_store_t *s = f->s;
    char *data = malloc(3 * MiB), *want = calloc(1, 3 * MiB);
    round_t r = {.n = 3, .off = {2 * MiB, 64 * 1024, MiB + 7}, .len = {4096, 4096, 100}};

    for (size_t i = 0; i < 3 * MiB; i++)
        data[i] = (char)(i % 251 + 1);
    for (int i = 0; i < r.n; i++)
        memcpy(want + r.off[i], data + r.off[i], r.len[i]);
    dirty(f);
    r.w = open_writer(f);
    r.buf = data;
    run_round(s, &r, want, 2 * MiB + 4096);
    check_transport(f);
    free(data);
    free(want);
}

/*
 * Zeros written right beside a write's bytes still on their way: a long
 * write (its bytes in flight over TCP while the next writes get their
 * space) with, issued together after it, a write just before it in the
 * same unit of space, one in the hole before it, one a few bytes past its
 * end (a short gap, zeroed), one far past it (a long gap, punched) and one
 * into that punched gap. Every zero they write lands beside, never on, the
 * bytes of the others.
 */
static void test_zeros_beside_writes_in_flight(void **state)
{
    fix_t *f = *state;
    mc_store_t *s = f->s;
    uint64_t a = MiB + 100, alen = 2 * MiB, aend = a + alen;
    size_t span = 5 * MiB;
    char *data = malloc(span), *want = calloc(1, span);
    round_t r = {.n = 6,
                 .off = {a, aend + 10, a - 30, a - 200, aend + 3 * MiB / 2, aend + 115},
                 .len = {alen, 100, 20, 20, 4096, 50}};

    for (size_t i = 0; i < span; i++)
        data[i] = (char)(i % 241 + 1);
    for (int round = 0; round < 10; round++) {
        size_t end = 0;
        memset(want, 0, span);
        for (int i = 0; i < r.n; i++) {
            memcpy(want + r.off[i], data + r.off[i], r.len[i]);
            if (r.off[i] + r.len[i] > end)
                end = r.off[i] + r.len[i];
        }
        dirty(f);
        r.w = open_writer(f);
        r.buf = data;
        run_round(s, &r, want, end);
    }
    check_transport(f);
    free(data);
    free(want);
}

/*
 * A write past the end that fails (no space for it) while writes issued
 * after it wait for it: they succeed, so the size covers them, and the gap
 * before them, which the failed write would have zeroed, reads as zeros.
 * (The size went back to what it was before the failed write, dropping the
 * later writes' bytes, and nobody zeroed the gap: each later write had
 * counted its gap from the failed write's end.)
 */
static void test_a_failed_write_leaves_later_writes_whole(void **state)
{
    fix_t *f = *state;
    mc_store_t *s = f->s;
    size_t big = 2 * SEG, span = 4 * MiB;
    char *data = calloc(1, big), *want = calloc(1, span);
    round_t r = {.n = 3,
                 .off = {3 * MiB, 5000, 200 * 1024},
                 .len = {big, 100, 100},
                 .rc = {-ENOSPC},
                 .buf = data};

    for (size_t i = 0; i < big; i++)
        data[i] = (char)(i % 239 + 1);
    memcpy(want, data, 10);
    for (int i = 1; i < r.n; i++)
        memcpy(want + r.off[i], data + r.off[i], r.len[i]);
    for (int round = 0; round < 5; round++) {
        batch_t b;
        slot_t sl = {&b, 0};

        dirty(f);
        r.w = open_writer(f);
        batch_init(&b, 1); /* the first bytes: space reserved past them */
        assert_int_equal(mc_writer_write_async(r.w, 0, data, 10, slot_done, &sl), 0);
        batch_wait(&b);
        assert_int_equal(b.rc[0], 10);
        run_round(s, &r, want, 200 * 1024 + 100);
    }
    check_transport(f);
    free(data);
    free(want);
}

/* Rounds of writes at random places past the end, in flight together. */
static void test_random_writes_in_flight_past_the_end(void **state)
{
    fix_t *f = *state;
    mc_store_t *s = f->s;
    size_t span = 6 * MiB, slot = span / 48;
    char *data = malloc(span), *want = malloc(span);

    rng_state = 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i < span; i++)
        data[i] = (char)(i % 253 + 1);
    for (int round = 0; round < 40; round++) {
        round_t r = {.n = NW, .buf = data};
        int used[48] = {0};
        size_t end = 0;
        memset(want, 0, span);
        for (int i = 0; i < NW; i++) {
            int k;
            do
                k = (int)(rnd() % 48);
            while (used[k]);
            used[k] = 1;
            r.off[i] = (uint64_t)k * slot + rnd() % (slot / 2);
            r.len[i] = 1 + rnd() % (slot / 2);
            memcpy(want + r.off[i], data + r.off[i], r.len[i]);
            if (r.off[i] + r.len[i] > end)
                end = r.off[i] + r.len[i];
        }
        dirty(f);
        r.w = open_writer(f);
        run_round(s, &r, want, end);
    }
    check_transport(f);
    free(data);
    free(want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_write_into_a_gap_being_reserved, setup, teardown),
        cmocka_unit_test_setup_teardown(test_random_writes_in_flight_past_the_end, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zeros_beside_writes_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_failed_write_leaves_later_writes_whole, setup,
                                        teardown),
        {"test_write_into_a_gap_being_reserved_over_tcp", test_write_into_a_gap_being_reserved,
         setup_tcp, teardown, NULL},
        {"test_random_writes_in_flight_past_the_end_over_tcp",
         test_random_writes_in_flight_past_the_end, setup_tcp, teardown, NULL},
        {"test_zeros_beside_writes_in_flight_over_tcp", test_zeros_beside_writes_in_flight,
         setup_tcp, teardown, NULL},
        {"test_a_failed_write_leaves_later_writes_whole_over_tcp",
         test_a_failed_write_leaves_later_writes_whole, setup_tcp, teardown, NULL},
        {"test_write_into_a_gap_being_reserved_on_a_node", test_write_into_a_gap_being_reserved,
         setup_node, teardown, NULL},
        {"test_random_writes_in_flight_past_the_end_on_a_node",
         test_random_writes_in_flight_past_the_end, setup_node, teardown, NULL},
        {"test_zeros_beside_writes_in_flight_on_a_node", test_zeros_beside_writes_in_flight,
         setup_node, teardown, NULL},
        {"test_a_failed_write_leaves_later_writes_whole_on_a_node",
         test_a_failed_write_leaves_later_writes_whole, setup_node, teardown, NULL},
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
