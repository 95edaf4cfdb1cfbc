/*
 * test_late_records.c - unit tests of records a restarted master merges
 * after it went on serving (core/src/master/records.c, reports.c): a node
 * that reports late, after others, may hold the newest record of a version
 * another node reported first. What the master did meanwhile on its own (a
 * read's access time, a replica copied by a repair) is no change of the
 * version's metadata: the late record still gives its key, mode and times,
 * as if it had come first. The nodes are node_model.h's.
 */
#include "svc_fixture.h"

#include "node_model.h"

/* Run 1: "x" on nodes a and c, renamed to "k"; a misses the rename (its
 * record keeps "x"), c has it. Run 2: a reports, between() runs at the new
 * master (from T0 + 10 until before T0 + 2000), then c reports: the rename
 * of run 1 must come back, not stay undone (the file under "x" for good). */
static void rename_reported_late(fixture_t *f, void (*between)(fixture_t *g))
{
    tnode_t a = {.id = 11}, c = {.id = 13};
    a.seg = mount(f, a.id, 16 * MiB, T0);
    c.seg = mount(f, c.id, 16 * MiB, T0);
    put(f, 1, "x", 1000, 2, T0);
    node_take(f, &a, T0 + 1);
    node_take(f, &c, T0 + 1);
    assert_int_equal(call(f, 1, T0 + 2, MC__OP_RENAME, "kku", "x", 1u, "k", 1u, 0u), 0);
    node_take(f, &c, T0 + 3);
    assert_true(node_has(&a, "x") && node_has(&c, "k"));

    fixture_t *g = NULL;
    setup((void **)&g);
    node_report(g, &a, T0 + 10);
    mc_stat_t st;
    assert_int_equal(key_stat(g, "x", T0 + 10, &st), 0);
    between(g);
    node_report(g, &c, T0 + 2000);
    assert_int_equal(key_stat(g, "k", T0 + 2000, &st), 0);
    assert_int_equal(st.size, 1000);
    assert_int_equal(key_stat(g, "x", T0 + 2000, &st), -ENOENT);
    teardown((void **)&g);
    node_free(&a);
    node_free(&c);
}

/* A read of the file, which sets its access time. */
static void read_x(fixture_t *g)
{
    assert_int_equal(call(g, 1, T0 + 11, MC__OP_GET_REPLICAS, "k", "x", 1u), 0);
}

static void test_a_read_before_the_late_record_keeps_no_stale_key(void **state)
{
    rename_reported_late(*state, read_x);
}

/* A repair that copies the file to a third node (its one replica is below
 * the two it wants). */
static void repair_x(fixture_t *g)
{
    mount(g, 12, 16 * MiB, T0 + 10);
    mc__svc_tick(g->svc, T0 + 1000);
    assert_int_equal(beat(g, 12, T0 + 1000), 0);
    assert_int_equal(call(g, 0, T0 + 1000, MC__OP_REPAIR_TAKE, "q", (uint64_t)12), 0);
    const char *tb, *rest;
    uint32_t tl, rl;
    uint64_t task;
    assert_int_equal(mc__unpack(g->resp.p, g->resp.len, "s*", &tb, &tl, &rest, &rl), 0);
    assert_int_equal(mc__unpack(tb, tl, "q*", &task, &rest, &rl), 0);
    assert_int_equal(
        call(g, 0, T0 + 1100, MC__OP_REPAIR_DONE, "qqi", (uint64_t)12, task, (int64_t)0), 0);
    mc_stat_t st;
    assert_int_equal(key_stat(g, "x", T0 + 1100, &st), 0);
    assert_int_equal(st.replicas, 2);
}

static void test_a_repair_before_the_late_record_keeps_no_stale_key(void **state)
{
    rename_reported_late(*state, repair_x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_read_before_the_late_record_keeps_no_stale_key,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_repair_before_the_late_record_keeps_no_stale_key,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
