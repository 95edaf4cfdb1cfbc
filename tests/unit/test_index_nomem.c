/*
 * test_index_nomem.c - the ordered index when memory runs out
 * (core/src/master/index.c): an insert that cannot get memory fails with
 * -ENOMEM and leaves the index as it was, and after mc__index_reserve(ix,
 * n) the next n inserts succeed with no memory to be had at all (what the
 * master's rename and link rely on to move a version to a new key).
 *
 * Allocations fail on request through nomem.h; under AddressSanitizer,
 * which owns malloc, it skips.
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

#include "nomem.h"

static size_t key_at(char *buf, size_t i)
{
    return (size_t)snprintf(buf, 16, "n/%07zu", i);
}

/* The j-th new key (j < n): just after one of the n keys of fill(), so
 * that new keys land all over the tree. */
static size_t new_key(char *buf, size_t j, size_t n)
{
    return (size_t)snprintf(buf, 16, "n/%07zu+", (j * 104729) % n);
}

/* Fills the index with n keys (deep enough for inner nodes). */
static void fill(mc__index_t *ix, size_t n)
{
    char buf[16];

    for (size_t i = 0; i < n; i++)
        assert_int_equal(ins(ix, buf, key_at(buf, (i * 7919) % n), V(i + 1), NULL), 0);
}

/* Inserts of new keys with the k-th allocation failing, for every k until
 * one needs no more: each failure leaves the index whole and unchanged. */
static void test_failed_insert_changes_nothing(void **state)
{
#ifdef NO_WRAP
    skip();
#endif
    mc__index_t *ix = *state;
    enum { N = 6000 };
    char buf[16];
    size_t fails = 0;

    fill(ix, N);
    for (size_t j = 0; j < 2000; j++) {
        size_t len = new_key(buf, j, N);
        ent_t *e = ent(buf, len, N + j + 1);

        for (long k = 0;; k++) {
            allocs_left = k;
            int rc = mc__index_insert(ix, e, NULL);
            allocs_left = -1;
            if (rc == 0)
                break;
            assert_int_equal(rc, -ENOMEM);
            fails++;
            assert_null(mc__index_get(ix, buf, len));
            assert_int_equal(mc__index_count(ix), N + j);
            assert_int_equal(mc__index_check(ix), 0);
        }
    }
    assert_true(fails > 0); /* some inserts did need memory */
    assert_int_equal(mc__index_check(ix), 0);
}

/* After a reserve of n, n inserts of new keys succeed with every
 * allocation failing, even when each splits nodes up to the root. */
static void test_reserved_inserts_cannot_fail(void **state)
{
#ifdef NO_WRAP
    skip();
#endif
    mc__index_t *ix = *state;
    enum { N = 3000, ROUNDS = 400 };
    char buf[16];
    size_t next = N;

    fill(ix, N);
    for (int r = 0; r < ROUNDS; r++) {
        size_t n = 1 + (size_t)r % 3;
        ent_t *e[3];

        for (size_t i = 0; i < n; i++) {
            size_t len = new_key(buf, next - N + i, N);
            e[i] = ent(buf, len, next + i + 1);
        }
        assert_int_equal(mc__index_reserve(ix, n), 0);
        allocs_left = 0;
        for (size_t i = 0; i < n; i++)
            assert_int_equal(mc__index_insert(ix, e[i], NULL), 0);
        allocs_left = -1;
        next += n;
    }
    assert_int_equal(mc__index_count(ix), next);
    assert_int_equal(mc__index_check(ix), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_failed_insert_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserved_inserts_cannot_fail, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
