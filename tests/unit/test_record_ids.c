/*
 * test_record_ids.c - unit tests of version ids across restarts of a master
 * without etcd (core/src/master/records.c, reports.c): a master whose clock
 * was set back hands out ids that a node's records of the run before may
 * carry too, for other keys. Nodes keep records by id, and a later restart
 * merges them by id: the two must never be taken for one. The nodes are
 * node_model.h's, and every master starts its ids at 1 (svc_call.h), as a
 * master restarted with its clock set back to the start of the run before
 * would.
 */
#include "svc_fixture.h"

#include "node_model.h"

/* The key of nd's record of version id ("" if none) in buf. */
static const char *node_key(const tnode_t *nd, uint64_t id, char *buf, size_t size)
{
    buf[0] = 0;
    for (int i = 0; i < nd->n; i++) {
        mc__rec_t r;
        if (nd->recs[i].id != id)
            continue;
        assert_int_equal(mc__take_rec(nd->recs[i].b, nd->recs[i].len, &r), 0);
        assert_true(r.klen < size);
        memcpy(buf, r.key, r.klen);
        buf[r.klen] = 0;
    }
    return buf;
}

/* Run 1 put k1 on node A. Run 2 (its ids from where run 1's began) put k2
 * on node B under k1's id before A reported k1. Both must stay two objects:
 * in run 2, on the nodes, and after a third master merges the nodes'
 * records, whichever node reports first. */
static void test_a_record_whose_id_this_run_handed_out_keeps_its_own_object(void **state)
{
    fixture_t *f = *state;
    tnode_t a = {.id = 11}, b = {.id = 12};
    mc_stat_t st, k1;
    a.seg = mount(f, 11, 16 * MiB, T0);
    put(f, 1, "k1", 1000, 1, T0);
    node_take(f, &a, T0 + 1);
    assert_int_equal(a.n, 1);
    assert_int_equal(key_stat(f, "k1", T0 + 1, &st), 0);
    uint64_t x = st.version;

    fixture_t *g = NULL;
    setup((void **)&g);
    b.seg = mount(g, 12, 16 * MiB, T0 + 10); /* B mounts first, A is slow */
    put(g, 1, "k2", 1000, 1, T0 + 10);
    assert_int_equal(key_stat(g, "k2", T0 + 10, &st), 0);
    assert_int_equal(st.version, x); /* the clash */
    node_take(g, &b, T0 + 11);
    node_report(g, &a, T0 + 12);
    assert_int_equal(key_stat(g, "k1", T0 + 13, &k1), 0);
    assert_int_equal(k1.size, 1000);
    assert_int_not_equal(k1.version, x); /* k2 has x in this run */
    mc__svc_stats_t ss;
    mc__svc_stats(g->svc, &ss);
    assert_int_equal(ss.records_renamed, 1);
    node_take(g, &a, T0 + 13);
    node_take(g, &b, T0 + 13);
    char buf[64];
    assert_int_equal(a.n, 1); /* k1, under its id of this run only */
    assert_string_equal(node_key(&a, k1.version, buf, sizeof(buf)), "k1");
    assert_int_equal(b.n, 1);
    assert_string_equal(node_key(&b, x, buf, sizeof(buf)), "k2");

    for (int order = 0; order < 2; order++) {
        fixture_t *h = NULL;
        setup((void **)&h);
        node_report(h, order ? &a : &b, T0 + 20);
        node_report(h, order ? &b : &a, T0 + 21);
        mc_stat_t h1, h2;
        assert_int_equal(key_stat(h, "k1", T0 + 22, &h1), 0);
        assert_int_equal(key_stat(h, "k2", T0 + 22, &h2), 0);
        assert_int_equal(h1.replicas, 1);
        assert_int_equal(h2.replicas, 1);
        assert_int_not_equal(h1.version, h2.version);
        teardown((void **)&h);
    }
    teardown((void **)&g);
    node_free(&a);
    node_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_a_record_whose_id_this_run_handed_out_keeps_its_own_object, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
