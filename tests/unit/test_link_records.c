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

/* ---- a node as node.c keeps its records ---- */

typedef struct trec {
    uint64_t id;
    char *b;
    uint32_t len;
} trec_t;

typedef struct tnode {
    uint64_t id;
    uint32_t seg;
    trec_t recs[64];
    int n;
} tnode_t;

static void node_forget(tnode_t *nd, uint64_t id)
{
    for (int i = 0; i < nd->n; i++) {
        if (nd->recs[i].id == id) {
            free(nd->recs[i].b);
            nd->recs[i] = nd->recs[--nd->n];
            return;
        }
    }
}

static void node_free(tnode_t *nd)
{
    while (nd->n)
        node_forget(nd, nd->recs[0].id);
}

/* Fetches and applies every notice waiting for nd's segment at f. */
static void node_take(fixture_t *f, tnode_t *nd, uint64_t now)
{
    uint64_t ack = 0;
    for (;;) {
        assert_int_equal(call(f, 0, now, MC__OP_RECORDS_TAKE, "quq", nd->id, nd->seg, ack), 0);
        if (f->resp.len == 0)
            return;
        ack = f->resp.len;
        const char *p = f->resp.p;
        size_t left = f->resp.len;
        while (left) {
            const char *e, *rest, *r, *b;
            uint32_t el, rl, len, bl;
            uint8_t kind;
            uint64_t id;
            assert_int_equal(mc__unpack(p, left, "s*", &e, &el, &rest, &rl), 0);
            assert_int_equal(mc__unpack(e, el, "bq*", &kind, &id, &r, &len), 0);
            node_forget(nd, id);
            if (kind == MC__NOTE_PUT) {
                assert_int_equal(mc__unpack(r, len, "s", &b, &bl), 0);
                assert_true(nd->n < 64);
                trec_t *t = &nd->recs[nd->n++];
                t->id = id;
                t->len = bl;
                t->b = malloc(bl);
                memcpy(t->b, b, bl);
            }
            p = rest;
            left = rl;
        }
    }
}

/* 1 if nd keeps a record of key. */
static int node_has(const tnode_t *nd, const char *key)
{
    for (int i = 0; i < nd->n; i++) {
        mc__rec_t r;
        assert_int_equal(mc__take_rec(nd->recs[i].b, nd->recs[i].len, &r), 0);
        if (r.klen == strlen(key) && memcmp(r.key, key, r.klen) == 0)
            return 1;
    }
    return 0;
}

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

/* nd mounts its segment again at the new master g and reports every record
 * it keeps. */
static void node_report(fixture_t *g, tnode_t *nd, uint64_t now)
{
    const char *addr = "127.0.0.1:7000";
    assert_int_equal(call(g, 1, now, MC__OP_MOUNT_SEGMENT, "qusqsuq", nd->id, nd->seg, addr,
                          (uint32_t)strlen(addr), 16 * MiB, "", 0u, (uint32_t)MC__MOUNT_REPORT,
                          (uint64_t)5),
                     0);
    uint32_t got;
    uint64_t run, epoch;
    assert_int_equal(mc__unpack(g->resp.p, g->resp.len, "uqq", &got, &run, &epoch), 0);
    assert_int_equal(got, nd->seg);
    mc__wbuf_t body = {0};
    for (int i = 0; i < nd->n; i++)
        mc__pack(&body, "s", nd->recs[i].b, nd->recs[i].len);
    assert_int_equal(call(g, 0, now, MC__OP_RECORDS_REPORT, "quu*", nd->id, nd->seg, 1u,
                          body.p ? body.p : "", (uint32_t)body.len),
                     0);
    free(body.p);
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

/* STAT of key at f: its status, the stat in *st. */
static int stat_of(fixture_t *f, const char *key, uint64_t now, mc_stat_t *st)
{
    int rc = call(f, 1, now, MC__OP_STAT, "k", key, (uint32_t)strlen(key));
    memset(st, 0, sizeof(*st));
    if (rc == 0) {
        const char *sp = f->resp.p;
        size_t sl = f->resp.len;
        assert_int_equal(mc__take_stat(&sp, &sl, st), 0);
    }
    return rc;
}

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
        if (stat_of(g, keys[i], now, &st) == 0)
            stand[k++] = keys[i];
    for (int i = 0; i < k; i++) {
        for (int j = i; j < k; j++) {
            assert_int_equal(stat_of(g, stand[j], now, &st), 0);
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
    assert_int_equal(stat_of(f, "x", T0 + 7, &st), 0);
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
 * as it was (one version: the later stamp wins). */
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

    for (int order = 0; order < 2; order++) {
        fixture_t *g = NULL;
        setup((void **)&g);
        node_report(g, order ? &b : &a, T0 + 100);
        node_report(g, order ? &a : &b, T0 + 100);
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
    assert_int_equal(stat_of(f, "z", T0, &st), 0);
    uint64_t zino = st.ino;
    node_take(f, &a, T0 + 1);
    node_take(f, &b, T0 + 1);
    assert_true(node_has(&b, "z2") && !node_has(&a, "z2") && !node_has(&a, "z"));

    fixture_t *g = setup_seeded(0x5eed);
    node_report(g, &a, T0 + 100);
    assert_int_equal(link_(g, "a", "a3", T0 + 101), 0);
    assert_int_equal(link_(g, "p", "p2", T0 + 101), 0);
    assert_int_equal(stat_of(g, "p", T0 + 101, &st), 0);
    uint64_t pino = st.ino;
    node_report(g, &b, T0 + 102);
    assert_int_equal(stat_of(g, "z", T0 + 103, &st), 0);
    assert_int_equal(st.size, 3000);
    assert_int_equal(st.nlink, 2);
    assert_int_equal(st.ino, zino);
    assert_int_equal(stat_of(g, "z2", T0 + 103, &st), 0);
    assert_int_equal(st.size, 3000);
    assert_int_equal(stat_of(g, "p", T0 + 103, &st), 0);
    assert_int_equal(st.size, 1000);
    assert_int_equal(st.nlink, 2);
    assert_int_equal(st.ino, pino);
    assert_true(pino != zino);
    assert_int_equal(stat_of(g, "p2", T0 + 103, &st), 0);
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
