/*
 * test_index_tree.c - unit tests of the ordered index's tree
 * (core/src/master/index.c): inserts and removes in several orders and at
 * random, deep enough for leaves and inner nodes to split, pass values to
 * siblings and merge, with the structure checked (mc__index_check()) on
 * the way; replacing values that are separators; values freed once.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index_fixture.h"
#include "unit.h"

/* ---- value ownership on free ---- */

enum { NVALS = 1000 };
static int freed[NVALS];

static void count_free(void *p)
{
    ent_t *e = p;

    assert_true(e->tag < NVALS);
    freed[e->tag]++;
    free(e);
}

static ent_t *new_val(int i, int key)
{
    char buf[16];
    int n = snprintf(buf, sizeof(buf), "v/%d", key);

    return ent_new(buf, (size_t)n, (uintptr_t)i);
}

static void test_free_calls_free_val_once(void **state)
{
    mc__index_t *ix = mc__index_new(ent_key);
    int owned_by_index[NVALS] = {0};
    char buf[16];

    (void)state;
    assert_non_null(ix);
    memset(freed, 0, sizeof(freed));

    /* Keys 0..499 get values 0..499; values 500..749 replace keys 0..249,
     * and the replaced values come back to us. */
    for (int i = 0; i < 500; i++) {
        assert_int_equal(mc__index_insert(ix, new_val(i, i), NULL), 0);
        owned_by_index[i] = 1;
    }
    for (int i = 0; i < 250; i++) {
        void *old = NULL;

        assert_int_equal(mc__index_insert(ix, new_val(500 + i, i), &old), 1);
        assert_int_equal(((ent_t *)old)->tag, i);
        free(old);
        owned_by_index[i] = 0;
        owned_by_index[500 + i] = 1;
    }
    /* Removed values come back to us as well. */
    for (int i = 400; i < 500; i++) {
        int n = snprintf(buf, sizeof(buf), "v/%d", i);
        ent_t *old = mc__index_remove(ix, buf, (size_t)n);

        assert_non_null(old);
        assert_int_equal(old->tag, i);
        free(old);
        owned_by_index[i] = 0;
    }
    assert_int_equal(mc__index_count(ix), 400);
    assert_int_equal(mc__index_check(ix), 0);

    mc__index_free(ix, count_free);
    for (int i = 0; i < NVALS; i++)
        assert_int_equal(freed[i], owned_by_index[i]);
}

static void test_free_null_and_without_free_val(void **state)
{
    mc__index_t *ix = mc__index_new(ent_key);

    (void)state;
    mc__index_free(NULL, count_free); /* a no-op */
    assert_non_null(ix);
    ent_t *pa = ent_new("a", 1, 1), *pb = ent_new("b", 1, 2);

    assert_int_equal(mc__index_insert(ix, pa, NULL), 0);
    assert_int_equal(mc__index_insert(ix, pb, NULL), 0);
    mc__index_free(ix, NULL); /* must not touch the values */
    assert_int_equal(pa->tag + pb->tag, 3);
    free(pa);
    free(pb);
}

/* ---- the tree's shape: splits, sibling shifts, merges ---- */

static size_t key_of(char *buf, size_t i)
{
    return (size_t)snprintf(buf, 16, "k/%07zu", i);
}

/* Inserts N keys in the given order (0 ascending, 1 descending, 2 a
 * stride), checks the structure and the walk, then removes them in another
 * order, checking again on the way down. */
static void tree_order_run(mc__index_t *ix, int in, int out)
{
    enum { N = 20000 };
    char buf[16];
    mc__index_iter_t it;
    const char *k;
    size_t len, n = 0;

    for (size_t j = 0; j < N; j++) {
        size_t i = in == 0 ? j : in == 1 ? N - 1 - j : (j * 7919) % N;

        len = key_of(buf, i);
        assert_int_equal(ins(ix, buf, len, V(i + 1), NULL), 0);
    }
    assert_int_equal(mc__index_check(ix), 0);
    mc__index_seek(ix, &it, NULL, 0, 0);
    for (void *v; nxt(&it, &k, &len, &v); n++)
        assert_ptr_equal(v, V(n + 1));
    assert_int_equal(n, N);
    for (size_t j = 0; j < N; j++) {
        size_t i = out == 0 ? j : out == 1 ? N - 1 - j : (j * 7919) % N;

        len = key_of(buf, i);
        assert_ptr_equal(rem(ix, buf, len), V(i + 1));
        if (j % 997 == 0)
            assert_int_equal(mc__index_check(ix), 0);
    }
    assert_int_equal(mc__index_count(ix), 0);
    assert_int_equal(mc__index_check(ix), 0);
    mc__index_seek(ix, &it, NULL, 0, 0);
    assert_int_equal(nxt(&it, NULL, NULL, NULL), 0);
}

static void test_tree_orders(void **state)
{
    for (int in = 0; in < 3; in++)
        for (int out = 0; out < 3; out++)
            tree_order_run(*state, in, out);
}

/* Many keys over a small alphabet, against the model, with the structure
 * checked: deep enough for inner nodes to split and merge. */
static void test_tree_random_large(void **state)
{
    mc__index_t *ix = *state;
    enum { OPS = 200000, SPACE = 30000 };
    static uint8_t present[SPACE];
    char buf[16];
    size_t n = 0;

    memset(present, 0, sizeof(present));
    rng_state = 0x13198a2e03707344ULL;
    for (int op = 0; op < OPS; op++) {
        /* Phases: mostly inserts, then mostly removes, then mixed. */
        unsigned bias = op < OPS / 3 ? 80 : op < 2 * OPS / 3 ? 20 : 50;
        size_t i = (size_t)(rnd() % SPACE), len = key_of(buf, i);

        if (rnd() % 100 < bias) {
            assert_int_equal(ins(ix, buf, len, V(i + 1), NULL), present[i]);
            n += !present[i];
            present[i] = 1;
        } else {
            assert_ptr_equal(rem(ix, buf, len), present[i] ? V(i + 1) : NULL);
            n -= present[i];
            present[i] = 0;
        }
        assert_int_equal(mc__index_count(ix), n);
        if (op % 20000 == 0)
            assert_int_equal(mc__index_check(ix), 0);
    }
    assert_int_equal(mc__index_check(ix), 0);
    mc__index_iter_t it;
    void *v;
    size_t seen = 0, last = 0;

    mc__index_seek(ix, &it, NULL, 0, 0);
    while (nxt(&it, NULL, NULL, &v)) {
        assert_true((uintptr_t)v > last);
        assert_true(present[(uintptr_t)v - 1]);
        last = (uintptr_t)v;
        seen++;
    }
    assert_int_equal(seen, n);
}

/* Replacing every value (some of them separators in inner nodes) keeps the
 * structure whole: the old values are freed after, as a master frees them. */
static void test_replace_keeps_separators(void **state)
{
    mc__index_t *ix = *state;
    enum { N = 5000 };
    char buf[16];

    for (size_t i = 0; i < N; i++)
        assert_int_equal(ins(ix, buf, key_of(buf, (i * 31) % N), V(1), NULL), 0);
    for (size_t i = 0; i < N; i++) {
        void *old = NULL;

        assert_int_equal(ins(ix, buf, key_of(buf, i), V(2), &old), 1);
        assert_ptr_equal(old, V(1));
    }
    /* Scribble over every replaced value: a separator still pointing at one
     * would now break the order check. */
    for (size_t i = 0; i < narena; i++)
        if (arena[i]->tag == 1)
            memset(arena[i]->key, 0xff, arena[i]->len);
    assert_int_equal(mc__index_check(ix), 0);
    for (size_t i = 0; i < N; i += 2)
        assert_ptr_equal(rem(ix, buf, key_of(buf, i)), V(2));
    assert_int_equal(mc__index_check(ix), 0);
    assert_int_equal(mc__index_count(ix), N / 2);
}

/* A master frees its versions itself and then the index: freeing the
 * index reads no value (a deep tree, every value marked gone first). */
static void test_free_reads_no_value(void **state)
{
    mc__index_t *ix = *state;
    char buf[16];

    for (size_t i = 0; i < 5000; i++)
        assert_int_equal(ins(ix, buf, key_of(buf, (i * 31) % 5000), V(1), NULL), 0);
    for (size_t i = 0; i < narena; i++)
        arena[i]->tag = ENT_GONE;
    mc__index_free(ix, NULL);
    *state = mc__index_new(ent_key); /* for the teardown */
    assert_non_null(*state);
}

/* mc__index_replace(): the value found by key gives its place to another
 * of the same key, found by pointer; a value not in the index is refused. */
static void test_replace_by_pointer(void **state)
{
    mc__index_t *ix = *state;
    enum { N = 3000 };
    static ent_t *cur[N];
    char buf[16];

    for (size_t i = 0; i < N; i++) {
        size_t len = key_of(buf, (i * 17) % N);
        cur[(i * 17) % N] = ent(buf, len, 1);
        assert_int_equal(mc__index_insert(ix, cur[(i * 17) % N], NULL), 0);
    }
    for (size_t i = 0; i < N; i++) {
        size_t len = key_of(buf, i);
        ent_t *e = ent(buf, len, 2);
        assert_int_equal(mc__index_replace(ix, cur[i], e), 0);
        assert_ptr_equal(mc__index_get(ix, buf, len), e);
        cur[i]->tag = ENT_GONE; /* the index must not read the old one again */
        /* Replacing what is no longer there is refused. */
        assert_int_equal(mc__index_replace(ix, cur[i], ent(buf, len, 3)), -EINVAL);
        cur[i] = e;
    }
    assert_int_equal(mc__index_check(ix), 0);
    assert_int_equal(mc__index_count(ix), N);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_free_calls_free_val_once),
        cmocka_unit_test(test_free_null_and_without_free_val),
        cmocka_unit_test_setup_teardown(test_tree_orders, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tree_random_large, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replace_keeps_separators, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_reads_no_value, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replace_by_pointer, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
