/*
 * test_link_records.c - hard links across a restart of the master: nodes
 * keep the records the master's notices give them (RECORDS_TAKE, as
 * core/src/client/node.c applies them), a new master is rebuilt from their
 * reports (RECORDS_REPORT), and what comes back must never let the removal
 * of one name free the file while another of its names stands: the file's
 * count of names is the number of its names that came back, whichever
 * nodes kept which records.
 */
#include "svc_fixture.h"

#include <stdio.h>

#include "node_model.h"

/* 1 if nd keeps the record of an inode (a hard-linked file's bytes). */
static int node_has_inode(const tnode_t *nd)
{
    for (int i = 0; i < nd->n; i++) {
        mc__rec_t r;
        assert_int_equal(mc__take_rec(nd->recs[i].b, nd->recs[i].len, &r), 0);
        if (mc__master_is_inode_key(r.key, r.klen))
            return 1;
    }
    return 0;
}

/* A fixture as setup() makes it, its master drawing inode numbers from
 * seed (mc__master_opts_t ino_seed), as mooncake-master's and an embedded
 * master's do from a seed of their own. */
static fixture_t *setup_seeded(uint64_t seed)
{
    fixture_t *f = calloc(1, sizeof(*f));
    mc__master_opts_t mo = {.lease_ms = 5000, .align = 64, .ino_seed = seed};
    mc__svc_opts_t so = {.node_ttl_ms = 3000, .put_ttl_ms = 10000};
    assert_int_equal(mc__master_new(&f->m, &mo), 0);
    assert_int_equal(mc__svc_new(&f->svc, f->m, &so), 0);
    return f;
}

/* ---- requests ---- */

static int link_(fixture_t *f, const char *from, const char *to, uint64_t now)
{
    return call(f, 1, now, MC__OP_LINK, "kku", from, (uint32_t)strlen(from), to,
                (uint32_t)strlen(to), 0u);
}

static int remove_(fixture_t *f, const char *key, uint64_t now)
{
    return call(f, 1, now, MC__OP_REMOVE, "ku", key, (uint32_t)strlen(key), 0u);
}

/* The names of keys[0..n) that g has; each standing name must see the
 * file with nlink the number of names standing, and removing them one by
 * one must keep the file (with its size) under every name left until the
 * last. */
static int check_names(fixture_t *g, const char *const *keys, int n, uint64_t size, uint64_t now)
{
    const char *stand[8];
    int k = 0;
    mc_stat_t st;
    for (int i = 0; i < n; i++)
        if (key_stat(g, keys[i], now, &st) == 0)
            stand[k++] = keys[i];
    for (int i = 0; i < k; i++) {
        for (int j = i; j < k; j++) {
            assert_int_equal(key_stat(g, stand[j], now, &st), 0);
            assert_int_equal(st.size, size);
            if (k - i > 1) /* one name: as a plain file's, 1 */
                assert_int_equal(st.nlink, k - i);
        }
        assert_int_equal(remove_(g, stand[i], now), 0);
    }
    return k;
}

/* A file with two names on node A; rewritten through one name, its bytes
 * move to node B, which gets the file's record but no record of its
 * names; then one name is removed (the drop goes to B, which never kept
 * it). A new master rebuilt from A's and B's reports: whatever names
 * come back, removing one must not free the file under another. */
static void test_a_name_removed_after_a_rewrite_onto_another_node(void **state)
{
    fixture_t *f = *state;
    tnode_t a = {.id = 11}, b = {.id = 12};
    a.seg = mount(f, 11, 16 * MiB, T0);
    put(f, 1, "x", 1000, 1, T0);
    assert_int_equal(link_(f, "x", "y", T0 + 1), 0);
    node_take(f, &a, T0 + 2);
    assert_true(node_has(&a, "x") && node_has(&a, "y") && node_has_inode(&a));

    b.seg = mount(f, 12, 16 * MiB, T0 + 3);
    put(f, 1, "x", 3000, 1, T0 + 4); /* B has the most space free */
    node_take(f, &a, T0 + 5);
    node_take(f, &b, T0 + 5);
    assert_false(node_has_inode(&a));
    assert_true(node_has_inode(&b));
    assert_int_equal(remove_(f, "y", T0 + 6), 0);
    node_take(f, &a, T0 + 7);
    node_take(f, &b, T0 + 7);
    mc_stat_t st;
    assert_int_equal(key_stat(f, "x", T0 + 7, &st), 0);
    assert_int_equal(st.nlink, 1);

    fixture_t *g = NULL;
    setup((void **)&g);
    node_report(g, &a, T0 + 100);
    node_report(g, &b, T0 + 100);
    const char *keys[] = {"x", "y"};
    assert_int_equal(check_names(g, keys, 2, 3000, T0 + 101), 1); /* y stays gone */
    assert_int_equal(used(g), 0); /* the file went with its last name */
    /* x, removed at the new master, leaves the node that reported it. */
    node_take(g, &a, T0 + 102);
    node_take(g, &b, T0 + 102);
    assert_int_equal(a.n + b.n, 0);
    teardown((void **)&g);
    node_free(&a);
    node_free(&b);
}

/* The same without a rewrite: a file with two replicas (A and B) and two
 * names; one name is removed and the master dies before A fetched the
 * drop (B did). A keeps the name and the count of two, B the count of one
 * with a later stamp. */
static void test_a_name_removed_a_moment_before_the_restart(void **state)
{
    fixture_t *f = *state;
    tnode_t a = {.id = 11}, b = {.id = 12};
    a.seg = mount(f, 11, 16 * MiB, T0);
    b.seg = mount(f, 12, 16 * MiB, T0);
    put(f, 1, "x", 1000, 2, T0);
    assert_int_equal(link_(f, "x", "y", T0 + 1), 0);
    node_take(f, &a, T0 + 2);
    node_take(f, &b, T0 + 2);
    assert_true(node_has(&a, "y") && node_has(&b, "y"));
    assert_int_equal(remove_(f, "y", T0 + 3), 0);
    node_take(f, &b, T0 + 4); /* A had not fetched it yet */
    assert_true(node_has(&a, "y") && !node_has(&b, "y"));

    for (int order = 0; order < 2; order++) {
        fixture_t *g = NULL;
        setup((void **)&g);
        node_report(g, order ? &b : &a, T0 + 100);
        node_report(g, order ? &a : &b, T0 + 100);
        const char *keys[] = {"x", "y"};
        assert_true(check_names(g, keys, 2, 1000, T0 + 101) >= 1);
        assert_int_equal(used(g), 0);
        teardown((void **)&g);
    }
    node_free(&a);
    node_free(&b);
}

/* A name renamed after the rewrite: B keeps the renamed name, A the name
 * as it was (one version: the later stamp wins). And with A gone (dead
 * with the master, or away), the names come back from B alone: a node that
 * takes a hard-linked file's bytes takes its names' records too. */
static void test_a_name_renamed_after_a_rewrite(void **state)
{
    fixture_t *f = *state;
    tnode_t a = {.id = 11}, b = {.id = 12};
    a.seg = mount(f, 11, 16 * MiB, T0);
    put(f, 1, "x", 1000, 1, T0);
    assert_int_equal(link_(f, "x", "y", T0 + 1), 0);
    assert_int_equal(link_(f, "x", "z", T0 + 1), 0);
    node_take(f, &a, T0 + 2);
    b.seg = mount(f, 12, 16 * MiB, T0 + 3);
    put(f, 1, "x", 3000, 1, T0 + 4);
    assert_int_equal(call(f, 1, T0 + 5, MC__OP_RENAME, "kku", "y", 1u, "w", 1u, 0u), 0);
    assert_int_equal(remove_(f, "z", T0 + 5), 0);
    node_take(f, &a, T0 + 6);
    node_take(f, &b, T0 + 6);

    assert_true(node_has(&b, "x") && node_has(&b, "w") && !node_has(&b, "z"));
    for (int order = 0; order < 3; order++) { /* B then A, A then B, B alone */
        fixture_t *g = NULL;
        setup((void **)&g);
        node_report(g, order == 1 ? &a : &b, T0 + 100);
        if (order < 2)
            node_report(g, order ? &b : &a, T0 + 100);
        const char *keys[] = {"x", "y", "z", "w"};
        assert_int_equal(check_names(g, keys, 4, 3000, T0 + 101), 2); /* x and w */
        assert_int_equal(used(g), 0);
        teardown((void **)&g);
    }
    node_free(&a);
    node_free(&b);
}

/* A master whose ids start where the last one's did (a clock set back:
 * both fixtures start at id 1) makes a hard link after node A reported
 * and before node B did. Its new inode must not take the key of B's
 * hard-linked file, or B's file (a higher version id) replaces p's under
 * that key and B's names and p's name the same file. The ids: at the old
 * master (inode numbers from the ids, as before ino_seed) a 1, its inode
 * key 2, its names 3 and 4, p 5, z 6, z's inode key 7, its names 8 and 9;
 * at the new one, after A's report (ids up to 5), a3 takes 6, and the link
 * of p would take the inode key 7 from the ids: it draws its number. */
static void test_a_link_before_every_report_gets_an_inode_key_of_its_own(void **state)
{
    fixture_t *f = *state;
    tnode_t a = {.id = 11}, b = {.id = 12};
    a.seg = mount(f, 11, 16 * MiB, T0);
    put(f, 1, "a", 100, 1, T0);
    assert_int_equal(link_(f, "a", "a2", T0), 0);
    put(f, 1, "p", 1000, 1, T0);
    b.seg = mount(f, 12, 16 * MiB, T0);
    put(f, 1, "z", 3000, 1, T0); /* B has the most space free */
    assert_int_equal(link_(f, "z", "z2", T0), 0);
    mc_stat_t st;
    assert_int_equal(key_stat(f, "z", T0, &st), 0);
    uint64_t zino = st.ino;
    node_take(f, &a, T0 + 1);
    node_take(f, &b, T0 + 1);
    assert_true(node_has(&b, "z2") && !node_has(&a, "z2") && !node_has(&a, "z"));

    fixture_t *g = setup_seeded(0x5eed);
    node_report(g, &a, T0 + 100);
    assert_int_equal(link_(g, "a", "a3", T0 + 101), 0);
    assert_int_equal(link_(g, "p", "p2", T0 + 101), 0);
    assert_int_equal(key_stat(g, "p", T0 + 101, &st), 0);
    uint64_t pino = st.ino;
    node_report(g, &b, T0 + 102);
    assert_int_equal(key_stat(g, "z", T0 + 103, &st), 0);
    assert_int_equal(st.size, 3000);
    assert_int_equal(st.nlink, 2);
    assert_int_equal(st.ino, zino);
    assert_int_equal(key_stat(g, "z2", T0 + 103, &st), 0);
    assert_int_equal(st.size, 3000);
    assert_int_equal(key_stat(g, "p", T0 + 103, &st), 0);
    assert_int_equal(st.size, 1000);
    assert_int_equal(st.nlink, 2);
    assert_int_equal(st.ino, pino);
    assert_true(pino != zino);
    assert_int_equal(key_stat(g, "p2", T0 + 103, &st), 0);
    assert_int_equal(st.size, 1000);
    const char *keys[] = {"a", "a2", "a3", "p", "p2", "z", "z2"};
    for (int i = 0; i < 7; i++)
        assert_int_equal(remove_(g, keys[i], T0 + 104), 0);
    assert_int_equal(used(g), 0);
    teardown((void **)&g);
    node_free(&a);
    node_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_name_removed_after_a_rewrite_onto_another_node,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_name_removed_a_moment_before_the_restart, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_name_renamed_after_a_rewrite, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_link_before_every_report_gets_an_inode_key_of_its_own, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
