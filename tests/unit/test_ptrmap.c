/*
 * test_ptrmap.c - unit tests for the address table (core/src/master/
 * ptrmap.c) that the master keeps the dirty versions' places and the open
 * handles' counts in.
 *
 * Random adds, value changes and deletes of the addresses of an array's
 * elements (neighbours, as a slab's objects are) are checked against the
 * test's own bookkeeping after every step of a few, and in full after many:
 * the table grows through many doublings and deletion keeps every other
 * entry findable; a reset empties it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>

#include "master/ptrmap.h"
#include "unit.h"

#define N 20000

static uint64_t vals[N]; /* what each element maps to; 0: not in the table */
static char objs[N][88]; /* the addresses filed: 88 bytes apart */

static void check_all(const mc__ptrmap_t *t)
{
    size_t in = 0;
    for (size_t i = 0; i < N; i++) {
        mc__ptrslot_t *e = mc__ptrmap_find(t, objs[i]);
        if (vals[i]) {
            assert_non_null(e);
            assert_ptr_equal(e->p, objs[i]);
            assert_int_equal(e->val, vals[i]);
            in++;
        } else {
            assert_null(e);
        }
    }
    assert_int_equal(t->n, in);
}

static void test_random_adds_and_deletes(void **state)
{
    (void)state;
    mc__ptrmap_t t = {0};
    uint64_t rng = 12345;
    for (int step = 0; step < 200000; step++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        size_t i = (size_t)(rng % N);
        /* Adds win twice as often: the table fills, then churns. */
        mc__ptrslot_t *e = mc__ptrmap_find(&t, objs[i]);
        if (!vals[i]) {
            assert_null(e);
            vals[i] = (uint64_t)step + 1;
            assert_int_equal(mc__ptrmap_add(&t, objs[i], vals[i]), 0);
        } else if (rng % 3 == 0) {
            assert_non_null(e);
            mc__ptrmap_del(&t, e);
            vals[i] = 0;
        } else {
            assert_non_null(e);
            e->val = vals[i] = vals[i] + 1;
        }
        if (step % 20000 == 0)
            check_all(&t);
    }
    check_all(&t);
    assert_true(t.cap >= 2 * t.n);
    /* Emptied one by one, then reset. */
    for (size_t i = 0; i < N; i++) {
        if (!vals[i])
            continue;
        mc__ptrmap_del(&t, mc__ptrmap_find(&t, objs[i]));
        vals[i] = 0;
    }
    check_all(&t);
    mc__ptrmap_reset(&t);
    assert_null(t.s);
    assert_null(mc__ptrmap_find(&t, objs[0]));
    assert_int_equal(mc__ptrmap_add(&t, objs[0], 7), 0);
    assert_int_equal(mc__ptrmap_find(&t, objs[0])->val, 7);
    mc__ptrmap_reset(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_adds_and_deletes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
