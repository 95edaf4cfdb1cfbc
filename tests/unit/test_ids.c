/*
 * test_ids.c - unit tests for the id hash (core/src/master/ids.c) that the
 * master service files writes in progress, handles and owners in.
 *
 * Random adds, lookups and deletes of ids (consecutive runs, as the service
 * hands them out, and random 64-bit ones) are checked against a plain array
 * of what must be there; the table grows through many doublings; a drain
 * with mc__ids_first() takes every record exactly once.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>

#include "master/ids.h"
#include "unit.h"

#define N 20000

typedef struct rec {
    mc__idnode_t h;
    int in; /* in the table, per the test's own bookkeeping */
} rec_t;

static void check_all(const mc__ids_t *t, rec_t *r, size_t n)
{
    size_t in = 0;
    for (size_t i = 0; i < n; i++) {
        mc__idnode_t *e = mc__ids_get(t, r[i].h.id);
        if (r[i].in) {
            assert_ptr_equal(e, &r[i].h);
            in++;
        } else {
            assert_null(e);
        }
    }
    assert_int_equal(t->n, in);
}

static void run(uint64_t first, int random_ids)
{
    mc__ids_t t;
    assert_int_equal(mc__ids_init(&t), 0);
    rec_t *r = calloc(N, sizeof(*r));
    assert_non_null(r);
    rng_state = 0x9e3779b97f4a7c15ull ^ first;
    for (size_t i = 0; i < N; i++)
        r[i].h.id = random_ids ? rnd() | 1 : first + i;
    for (size_t i = 0; i < N; i++) { /* add all, deleting some on the way */
        mc__ids_add(&t, &r[i].h);
        r[i].in = 1;
        if (rnd() % 3 == 0) {
            size_t j = rnd() % (i + 1);
            mc__idnode_t *e = mc__ids_del(&t, r[j].h.id);
            assert_ptr_equal(e, r[j].in ? &r[j].h : NULL);
            r[j].in = 0;
        }
    }
    assert_true(t.bits > 6); /* it grew */
    check_all(&t, r, N);
    size_t at = 0, drained = 0;
    for (mc__idnode_t *e; (e = mc__ids_first(&t, &at));) {
        rec_t *x = (rec_t *)e;
        assert_true(x->in);
        assert_ptr_equal(mc__ids_del(&t, e->id), e);
        x->in = 0;
        drained++;
    }
    assert_int_equal(t.n, 0);
    check_all(&t, r, N);
    assert_null(mc__ids_del(&t, first));
    assert_true(drained > 0);
    mc__ids_fini(&t);
    free(r);
}

static void test_consecutive_ids(void **state)
{
    (void)state;
    run(1, 0);
    run(0x3fffffffffff0000ull, 0); /* a random first id near the top */
}

static void test_random_ids(void **state)
{
    (void)state;
    run(7, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_consecutive_ids),
        cmocka_unit_test(test_random_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
