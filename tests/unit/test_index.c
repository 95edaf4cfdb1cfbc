/*
 * test_index.c - unit tests for the ordered key index (core/src/master/index.c).
 *
 * Covers the map operations, the byte order of tricky keys (high bytes,
 * prefixes, '/' at several depths, embedded zero bytes), seek and prefix
 * walks, value ownership on free, and a long randomized run checked against
 * a sorted-array model. Every random choice comes from a fixed seed, so a
 * failure reproduces exactly.
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

/* Reference order, written independently of the index: unsigned bytes,
 * shorter first on a tie. */
static int ref_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;

    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];

        if (x != y)
            return x < y ? -1 : 1;
    }
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

/* Walks from *it and asserts that the next n entries are want[0..n) and
 * that the walk then ends. */
static void assert_walk(mc__index_iter_t *it, const test_key_t *want, size_t n)
{
    const char *k;
    size_t len;

    for (size_t i = 0; i < n; i++) {
        assert_int_equal(nxt(it, &k, &len, NULL), 1);
        assert_int_equal(len, want[i].len);
        assert_memory_equal(k, want[i].s, len);
    }
    assert_int_equal(nxt(it, &k, &len, NULL), 0);
}

static void test_empty(void **state)
{
    mc__index_t *ix = *state;
    mc__index_iter_t it;

    assert_int_equal(mc__index_count(ix), 0);
    assert_null(get_(ix, "a", 1));
    assert_null(get_(ix, NULL, 0));
    assert_null(rem(ix, "a", 1));
    mc__index_seek(ix, &it, NULL, 0, 0);
    assert_int_equal(nxt(&it, NULL, NULL, NULL), 0);
    mc__index_seek(ix, &it, "zz", 2, 1);
    assert_int_equal(nxt(&it, NULL, NULL, NULL), 0);
}

static void test_insert_get_replace_remove(void **state)
{
    mc__index_t *ix = *state;
    void *old = V(0xdead);

    assert_int_equal(ins(ix, "alpha", 5, V(1), &old), 0);
    assert_ptr_equal(old, V(0xdead)); /* untouched on a fresh insert */
    assert_int_equal(ins(ix, "beta", 4, V(2), NULL), 0);
    assert_int_equal(mc__index_count(ix), 2);
    assert_ptr_equal(get_(ix, "alpha", 5), V(1));
    assert_ptr_equal(get_(ix, "beta", 4), V(2));
    assert_null(get_(ix, "alph", 4));
    assert_null(get_(ix, "alphab", 6));

    assert_int_equal(ins(ix, "alpha", 5, V(3), &old), 1);
    assert_ptr_equal(old, V(1));
    assert_int_equal(ins(ix, "alpha", 5, V(4), NULL), 1);
    assert_int_equal(mc__index_count(ix), 2);
    assert_ptr_equal(get_(ix, "alpha", 5), V(4));

    assert_ptr_equal(rem(ix, "alpha", 5), V(4));
    assert_null(rem(ix, "alpha", 5));
    assert_null(get_(ix, "alpha", 5));
    assert_int_equal(mc__index_count(ix), 1);
    assert_ptr_equal(rem(ix, "beta", 4), V(2));
    assert_int_equal(mc__index_count(ix), 0);

    /* The index is usable again after it has been emptied. */
    assert_int_equal(ins(ix, "gamma", 5, V(5), NULL), 0);
    assert_ptr_equal(get_(ix, "gamma", 5), V(5));
}

/* Keys that agree in their first 8 or 16 bytes and differ after, by a high
 * byte or by length: the compare goes a word at a time, then byte by byte. */
static void test_order_past_a_word(void **state)
{
    mc__index_t *ix = *state;
    static const test_key_t sorted[] = {
        K("dir/name"),          K("dir/name\x00"),      K("dir/name/a"),     K("dir/name/abcdefg"),
        K("dir/name/abcdefgh"), K("dir/name/abcdefgi"), K("dir/name/a\x7f"), K("dir/name/a\x80"),
        K("dir/name\xff"),      K("dir/nam\x80"),
    };
    size_t n = sizeof(sorted) / sizeof(sorted[0]);
    for (size_t i = n; i-- > 0;)
        assert_int_equal(ins(ix, sorted[i].s, sorted[i].len, V(i + 1), NULL), 0);
    mc__index_iter_t it;
    const char *k;
    size_t kl;
    void *v;
    mc__index_seek(ix, &it, NULL, 0, 0);
    for (size_t i = 0; i < n; i++) {
        assert_true(nxt(&it, &k, &kl, &v));
        assert_ptr_equal(v, V(i + 1));
        assert_ptr_equal(get_(ix, sorted[i].s, sorted[i].len), V(i + 1));
    }
    assert_false(nxt(&it, &k, &kl, &v));
}

static void test_empty_key(void **state)
{
    mc__index_t *ix = *state;
    mc__index_iter_t it;
    const char *k = "x";
    size_t len = 99;

    assert_int_equal(ins(ix, "a", 1, V(2), NULL), 0);
    assert_int_equal(ins(ix, NULL, 0, V(1), NULL), 0);
    assert_ptr_equal(get_(ix, "", 0), V(1));
    mc__index_seek(ix, &it, NULL, 0, 0);
    assert_int_equal(nxt(&it, &k, &len, NULL), 1);
    assert_int_equal(len, 0);
    mc__index_seek(ix, &it, NULL, 0, 1); /* strictly after "" */
    assert_int_equal(nxt(&it, &k, &len, NULL), 1);
    assert_int_equal(len, 1);
    assert_memory_equal(k, "a", 1);
    assert_ptr_equal(rem(ix, NULL, 0), V(1));
    assert_int_equal(mc__index_count(ix), 1);
}

/* The index keeps no key of its own: a walk hands out the value's key. */
static void test_key_is_the_values(void **state)
{
    mc__index_t *ix = *state;
    mc__index_iter_t it;
    const char *k;
    size_t len;
    ent_t *e = ent("key/1", 5, 7), *e2 = ent("key/1", 5, 8);
    void *v;

    assert_int_equal(mc__index_insert(ix, e, NULL), 0);
    mc__index_seek(ix, &it, NULL, 0, 0);
    assert_int_equal(mc__index_next(&it, &k, &len, &v), 1);
    assert_ptr_equal(k, e->key);
    assert_ptr_equal(v, e);
    assert_int_equal(len, 5);

    /* A value of the same key takes the place; the walk gives its key. */
    assert_int_equal(mc__index_insert(ix, e2, &v), 1);
    assert_ptr_equal(v, e);
    mc__index_seek(ix, &it, NULL, 0, 0);
    assert_int_equal(mc__index_next(&it, &k, NULL, NULL), 1);
    assert_ptr_equal(k, e2->key);
    assert_int_equal(mc__index_insert(ix, NULL, NULL), -EINVAL);
}

/* Sorted by hand: "/" is 0x2f and "0" is 0x30, so "a/..." < "a0"; bytes
 * >= 0x80 sort after ASCII; a zero byte sorts first but after the end of a
 * shorter key. */
static const test_key_t tricky_sorted[] = {
    K(""),
    K("\x00"),
    K("a"),
    K("a\x00"),
    K("a\x00"
      "b"),
    K("a\x00\xff"),
    K("a/"),
    K("a//"),
    K("a/b"),
    K("a/b/"),
    K("a/b/c"),
    K("a/b/c/d"),
    K("a/b0"),
    K("a/bc"),
    K("a0"),
    K("a\x7f"),
    K("a\x80"),
    K("a\xff"),
    K("b"),
    K("\x7f"),
    K("\x80"),
    K("\x80\x00"),
    K("\x80\x01"),
    K("\xc3\xa9"),
    K("\xff"),
    K("\xff\xff"),
};

#define NTRICKY (sizeof(tricky_sorted) / sizeof(tricky_sorted[0]))

static void insert_tricky(mc__index_t *ix)
{
    /* Insert in a scrambled order (a stride coprime with the count). */
    for (size_t i = 0; i < NTRICKY; i++) {
        size_t j = (i * 7 + 3) % NTRICKY;

        assert_int_equal(ins(ix, tricky_sorted[j].s, tricky_sorted[j].len, V(j + 1), NULL), 0);
    }
    assert_int_equal(mc__index_count(ix), NTRICKY);
}

static void test_order_tricky_keys(void **state)
{
    mc__index_t *ix = *state;
    mc__index_iter_t it;

    /* The hand-sorted table must agree with the reference order. */
    for (size_t i = 1; i < NTRICKY; i++)
        assert_true(ref_cmp(tricky_sorted[i - 1].s, tricky_sorted[i - 1].len, tricky_sorted[i].s,
                            tricky_sorted[i].len) < 0);

    insert_tricky(ix);
    mc__index_seek(ix, &it, NULL, 0, 0);
    assert_walk(&it, tricky_sorted, NTRICKY);
    for (size_t j = 0; j < NTRICKY; j++)
        assert_ptr_equal(get_(ix, tricky_sorted[j].s, tricky_sorted[j].len), V(j + 1));
}

static void test_binary_keys_with_zero_bytes(void **state)
{
    mc__index_t *ix = *state;

    assert_int_equal(ins(ix, "a\0b", 3, V(1), NULL), 0);
    assert_int_equal(ins(ix, "a\0c", 3, V(2), NULL), 0);
    assert_int_equal(ins(ix, "a", 1, V(3), NULL), 0);
    assert_int_equal(ins(ix, "a\0", 2, V(4), NULL), 0);
    assert_int_equal(mc__index_count(ix), 4);
    assert_ptr_equal(get_(ix, "a\0b", 3), V(1));
    assert_ptr_equal(get_(ix, "a\0c", 3), V(2));
    assert_ptr_equal(get_(ix, "a", 1), V(3));
    assert_ptr_equal(get_(ix, "a\0", 2), V(4));
    assert_null(get_(ix, "a\0\0", 3));
    assert_ptr_equal(rem(ix, "a\0", 2), V(4));
    assert_ptr_equal(get_(ix, "a", 1), V(3));
    assert_ptr_equal(get_(ix, "a\0b", 3), V(1));
}

static size_t tricky_pos(const char *s, size_t len)
{
    for (size_t i = 0; i < NTRICKY; i++)
        if (ref_cmp(tricky_sorted[i].s, tricky_sorted[i].len, s, len) == 0)
            return i;
    fail_msg("key not in table");
    return 0;
}

static void test_seek(void **state)
{
    mc__index_t *ix = *state;
    mc__index_iter_t it;
    size_t p;

    insert_tricky(ix);

    /* NULL key: the first key, whatever after says about it. */
    mc__index_seek(ix, &it, NULL, 0, 0);
    assert_walk(&it, tricky_sorted, NTRICKY);
    mc__index_seek(ix, &it, NULL, 0, 1); /* > "", and "" is present */
    assert_walk(&it, tricky_sorted + 1, NTRICKY - 1);

    /* At an existing key. */
    p = tricky_pos("a/b", 3);
    mc__index_seek(ix, &it, "a/b", 3, 0);
    assert_walk(&it, tricky_sorted + p, NTRICKY - p);
    mc__index_seek(ix, &it, "a/b", 3, 1);
    assert_walk(&it, tricky_sorted + p + 1, NTRICKY - p - 1);

    /* At a missing key: both modes land on the next greater key. */
    p = tricky_pos("a/b0", 4);
    mc__index_seek(ix, &it, "a/b/z", 5, 0);
    assert_walk(&it, tricky_sorted + p, NTRICKY - p);
    mc__index_seek(ix, &it, "a/b/z", 5, 1);
    assert_walk(&it, tricky_sorted + p, NTRICKY - p);
    p = tricky_pos("a\x80", 2);
    mc__index_seek(ix, &it, "a\x7f\xff", 3, 0);
    assert_walk(&it, tricky_sorted + p, NTRICKY - p);

    /* At the last key and past the end. */
    mc__index_seek(ix, &it, "\xff\xff", 2, 0);
    assert_walk(&it, tricky_sorted + NTRICKY - 1, 1);
    mc__index_seek(ix, &it, "\xff\xff", 2, 1);
    assert_walk(&it, NULL, 0);
    mc__index_seek(ix, &it, "\xff\xff\x00", 3, 0);
    assert_walk(&it, NULL, 0);
}

/* Collects the keys that start with prefix by seeking to it and walking
 * while they match; returns how many, their values in vals. */
static size_t walk_prefix(mc__index_t *ix, const char *prefix, size_t plen, uintptr_t *vals,
                          size_t max)
{
    mc__index_iter_t it;
    const char *k;
    size_t len, n = 0;
    void *v;

    mc__index_seek(ix, &it, prefix, plen, 0);
    while (nxt(&it, &k, &len, &v)) {
        if (len < plen || (plen > 0 && memcmp(k, prefix, plen) != 0))
            break;
        assert_true(n < max);
        vals[n++] = (uintptr_t)v;
    }
    return n;
}

static void test_prefix_run(void **state)
{
    mc__index_t *ix = *state;
    static const char *const keys[] = {
        "dir",      "dir/",        "dir/a",  "dir/a/x", "dir/b", "dir/b/c/d",
        "dir/\xff", "dir0",        "dir.",   "dis",     "di",    "dir\x80/a",
        "dirx/a",   "other/dir/a", "d/ir/a", "dir//",   "e",
    };
    size_t nkeys = sizeof(keys) / sizeof(keys[0]);
    uintptr_t vals[32];
    size_t n;

    for (size_t i = 0; i < nkeys; i++)
        assert_int_equal(ins(ix, keys[i], strlen(keys[i]), V(i), NULL), 0);

    /* Under "dir/": dir/, dir//, dir/a, dir/a/x, dir/b, dir/b/c/d, dir/\xff. */
    n = walk_prefix(ix, "dir/", 4, vals, 32);
    assert_int_equal(n, 7);
    assert_int_equal(vals[0], 1);
    assert_int_equal(vals[1], 15);
    assert_int_equal(vals[2], 2);
    assert_int_equal(vals[3], 3);
    assert_int_equal(vals[4], 4);
    assert_int_equal(vals[5], 5);
    assert_int_equal(vals[6], 6);

    /* One level deeper, and a prefix that is itself absent. */
    n = walk_prefix(ix, "dir/b/", 6, vals, 32);
    assert_int_equal(n, 1);
    assert_int_equal(vals[0], 5);
    n = walk_prefix(ix, "dir/c", 5, vals, 32);
    assert_int_equal(n, 0);

    /* "dir" as a plain prefix covers everything starting with those bytes. */
    n = walk_prefix(ix, "dir", 3, vals, 32);
    assert_int_equal(n, 12);

    /* The empty prefix covers the whole index. */
    n = walk_prefix(ix, NULL, 0, vals, 32);
    assert_int_equal(n, nkeys);
}

static void test_next_null_outputs(void **state)
{
    mc__index_t *ix = *state;
    mc__index_iter_t it;
    void *v = NULL;

    assert_int_equal(ins(ix, "k1", 2, V(1), NULL), 0);
    assert_int_equal(ins(ix, "k2", 2, V(2), NULL), 0);
    mc__index_seek(ix, &it, NULL, 0, 0);
    assert_int_equal(nxt(&it, NULL, NULL, NULL), 1);
    assert_int_equal(nxt(&it, NULL, NULL, &v), 1);
    assert_ptr_equal(v, V(2));
    assert_int_equal(nxt(&it, NULL, NULL, NULL), 0);
    assert_int_equal(nxt(&it, NULL, NULL, NULL), 0);
}

static void test_many_sequential(void **state)
{
    mc__index_t *ix = *state;
    enum { N = 100000 };
    mc__index_iter_t it;
    char buf[16];
    const char *k;
    size_t len, i;
    void *v;

    /* Ascending inserts are the worst case for a naive tree. */
    for (i = 0; i < N; i++) {
        int n = snprintf(buf, sizeof(buf), "%08zu", i);

        assert_int_equal(ins(ix, buf, (size_t)n, V(i + 1), NULL), 0);
    }
    assert_int_equal(mc__index_count(ix), N);
    mc__index_seek(ix, &it, NULL, 0, 0);
    for (i = 0; nxt(&it, &k, &len, &v); i++)
        assert_int_equal((uintptr_t)v, i + 1);
    assert_int_equal(i, N);

    /* Remove from the top down, so the levels in use shrink back to none. */
    for (i = N; i-- > 0;) {
        int n = snprintf(buf, sizeof(buf), "%08zu", i);

        assert_ptr_equal(rem(ix, buf, (size_t)n), V(i + 1));
    }
    assert_int_equal(mc__index_count(ix), 0);
    mc__index_seek(ix, &it, NULL, 0, 0);
    assert_int_equal(nxt(&it, NULL, NULL, NULL), 0);
}

/* ---- randomized run against a sorted-array model ---- */

enum { RAND_OPS = 20000, MAXKEY = 6, MODEL_MAX = RAND_OPS };

typedef struct model_ent {
    char key[MAXKEY];
    size_t len;
    uintptr_t val;
} model_ent_t;

typedef struct model {
    model_ent_t e[MODEL_MAX];
    size_t n;
} model_t;

/* A short key over a small alphabet, so that collisions, shared prefixes,
 * zero bytes and high bytes are all common. */
static size_t random_key(char *k)
{
    static const char alpha[] = {'\0', '/', '0', 'a', 'b', '\x80', '\xff'};
    size_t len = (size_t)(rnd() % (MAXKEY + 1));

    for (size_t i = 0; i < len; i++)
        k[i] = alpha[rnd() % sizeof(alpha)];
    return len;
}

/* Index of the first model entry >= key (after == 0) or > key. */
static size_t model_bound(const model_t *m, const char *k, size_t len, int after)
{
    size_t lo = 0, hi = m->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = ref_cmp(m->e[mid].key, m->e[mid].len, k, len);

        if (c < 0 || (c == 0 && after))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int model_has(const model_t *m, size_t pos, const char *k, size_t len)
{
    return pos < m->n && ref_cmp(m->e[pos].key, m->e[pos].len, k, len) == 0;
}

/* Compares up to max entries walked from *it with the model from pos on; a
 * whole walk (max == SIZE_MAX) must also end where the model does. */
static void compare_walk(const model_t *m, mc__index_iter_t *it, size_t pos, size_t max, int op)
{
    const char *k;
    size_t len, steps;
    void *v;

    for (steps = 0; steps < max && pos < m->n; steps++, pos++) {
        if (nxt(it, &k, &len, &v) != 1)
            fail_msg("op %d: walk ended early at model entry %zu of %zu", op, pos, m->n);
        if (len != m->e[pos].len || memcmp(k, m->e[pos].key, len) != 0 ||
            (uintptr_t)v != m->e[pos].val)
            print_error("op %d: walk differs at model entry %zu\n", op, pos);
        assert_int_equal(len, m->e[pos].len);
        assert_memory_equal(k, m->e[pos].key, len);
        assert_int_equal((uintptr_t)v, m->e[pos].val);
    }
    if (pos == m->n && steps < max)
        assert_int_equal(nxt(it, NULL, NULL, NULL), 0);
}

static void test_random_against_model(void **state)
{
    mc__index_t *ix = *state;
    model_t *m = calloc(1, sizeof(*m));
    mc__index_iter_t it;
    char k[MAXKEY];

    assert_non_null(m);
    rng_state = 0x243f6a8885a308d3ULL;
    for (int op = 0; op < RAND_OPS; op++) {
        unsigned what = (unsigned)(rnd() % 100);
        size_t len = random_key(k);
        int after = (int)(rnd() & 1);
        size_t pos;
        int has;
        uintptr_t val = (uintptr_t)op + 1;

        /* Half the time aim at a present key, so replace, remove and get
         * hits are as common as misses. */
        if (m->n > 0 && (rnd() & 1)) {
            pos = (size_t)(rnd() % m->n);
            len = m->e[pos].len;
            memcpy(k, m->e[pos].key, len);
        }
        pos = model_bound(m, k, len, 0);
        has = model_has(m, pos, k, len);

        if (what < 50) {
            void *old = NULL;
            int rc = ins(ix, k, len, V(val), &old);

            assert_int_equal(rc, has ? 1 : 0);
            if (has) {
                assert_int_equal((uintptr_t)old, m->e[pos].val);
                m->e[pos].val = val;
            } else {
                assert_true(m->n < MODEL_MAX);
                memmove(&m->e[pos + 1], &m->e[pos], (m->n - pos) * sizeof(m->e[0]));
                memcpy(m->e[pos].key, k, len);
                m->e[pos].len = len;
                m->e[pos].val = val;
                m->n++;
            }
        } else if (what < 70) {
            void *got = rem(ix, k, len);

            assert_int_equal((uintptr_t)got, has ? m->e[pos].val : 0);
            if (has) {
                memmove(&m->e[pos], &m->e[pos + 1], (m->n - pos - 1) * sizeof(m->e[0]));
                m->n--;
            }
        } else if (what < 85) {
            void *got = get_(ix, k, len);

            assert_int_equal((uintptr_t)got, has ? m->e[pos].val : 0);
        } else {
            mc__index_seek(ix, &it, len ? k : NULL, len, after);
            compare_walk(m, &it, model_bound(m, k, len, after), 1 + rnd() % 16, op);
        }
        assert_int_equal(mc__index_count(ix), m->n);
        if (op % 1000 == 999) {
            mc__index_seek(ix, &it, NULL, 0, 0);
            compare_walk(m, &it, 0, SIZE_MAX, op);
        }
    }
    /* The run must have exercised a sizeable index, not a near-empty one. */
    assert_true(m->n > 500);
    mc__index_seek(ix, &it, NULL, 0, 0);
    compare_walk(m, &it, 0, SIZE_MAX, RAND_OPS);
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_empty, setup, teardown),
        cmocka_unit_test_setup_teardown(test_insert_get_replace_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_order_past_a_word, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_is_the_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_order_tricky_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_binary_keys_with_zero_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_seek, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prefix_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_next_null_outputs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_sequential, setup, teardown),
        cmocka_unit_test_setup_teardown(test_random_against_model, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
