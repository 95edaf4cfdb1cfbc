/*
 * test_slab.c - unit tests for the master's slab of small objects
 * (core/src/master/slab.c): sizes and alignment, zeroed objects that do not
 * overlap, reuse of freed ones, blocks returned when empty, and a random
 * run of allocations and frees checked against a record of what each
 * object holds.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "master/slab.h"
#include "unit.h"

static void test_sizes_and_alignment(void **state)
{
    (void)state;
    mc__slab_t *s = mc__slab_new();

    assert_non_null(s);
    assert_null(mc__slab_alloc(s, 0));
    assert_null(mc__slab_alloc(s, MC__SLAB_MAX + 1));
    for (size_t size = 1; size <= MC__SLAB_MAX; size += 37) {
        unsigned char *p = mc__slab_alloc(s, size);

        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 8, 0);
        for (size_t i = 0; i < size; i++)
            assert_int_equal(p[i], 0);
        memset(p, 0xab, size);
    }
    mc__slab_free_all(s);
    mc__slab_free_all(NULL);
}

/* Objects of one size fill a block and go on to the next; freed ones are
 * reused before new memory, and zeroed again. */
static void test_reuse_and_blocks(void **state)
{
    (void)state;
    enum { N = 20000, SIZE = 192 };
    mc__slab_t *s = mc__slab_new();
    static unsigned char *p[N];

    for (size_t i = 0; i < N; i++) {
        p[i] = mc__slab_alloc(s, SIZE);
        assert_non_null(p[i]);
        memset(p[i], (int)(i & 0xff), SIZE);
    }
    size_t blocks = mc__slab_blocks(s);
    assert_true(blocks >= (size_t)N * SIZE / (1 << 20));
    assert_true(blocks <= (size_t)N * SIZE / (1 << 20) + 1);
    /* No two overlap: every object still holds its own byte. */
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < SIZE; j++)
            assert_int_equal(p[i][j], i & 0xff);
    unsigned char *freed = p[N / 2];
    mc__slab_free(s, freed);
    unsigned char *again = mc__slab_alloc(s, SIZE);
    assert_ptr_equal(again, freed);
    for (size_t j = 0; j < SIZE; j++)
        assert_int_equal(again[j], 0);
    p[N / 2] = again;
    /* Everything freed: the blocks go, all but one. */
    for (size_t i = 0; i < N; i++)
        mc__slab_free(s, p[i]);
    assert_int_equal(mc__slab_blocks(s), 1);
    mc__slab_free_all(s);
}

/* Random sizes, allocations and frees; each live object holds a pattern
 * of its own that must survive every other call. */
static void test_random_run(void **state)
{
    (void)state;
    enum { SLOTS = 4000, OPS = 200000 };
    static unsigned char *p[SLOTS];
    static size_t size[SLOTS];
    mc__slab_t *s = mc__slab_new();

    rng_state = 0xa4093822299f31d0ULL;
    for (int op = 0; op < OPS; op++) {
        size_t i = (size_t)(rnd() % SLOTS);

        if (p[i]) {
            for (size_t j = 0; j < size[i]; j++)
                assert_int_equal(p[i][j], (unsigned char)(i + j));
            mc__slab_free(s, p[i]);
            p[i] = NULL;
        } else {
            size[i] = 1 + (size_t)(rnd() % (rnd() & 1 ? 64 : MC__SLAB_MAX));
            p[i] = mc__slab_alloc(s, size[i]);
            assert_non_null(p[i]);
            for (size_t j = 0; j < size[i]; j++)
                p[i][j] = (unsigned char)(i + j);
        }
    }
    for (size_t i = 0; i < SLOTS; i++) {
        if (p[i])
            mc__slab_free(s, p[i]);
        p[i] = NULL;
    }
    /* At most one block kept per size class. */
    assert_true(mc__slab_blocks(s) <= MC__SLAB_MAX / 8);
    mc__slab_free_all(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_and_alignment),
        cmocka_unit_test(test_reuse_and_blocks),
        cmocka_unit_test(test_random_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
