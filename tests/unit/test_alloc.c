/*
 * test_alloc.c - unit tests for the segment space allocator (core/src/master/alloc.c).
 *
 * The fixed-layout tests build known patterns of holes and check where each
 * request lands; the stress test drives random gets, puts and tail shrinks
 * and checks every result against a map of allocation units. The stress seed
 * can be set with MC_TEST_SEED to reproduce a failure.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "master/alloc.h"
#include "unit.h"

#define U 64 /* the alignment most tests use: one allocation unit */

static mc__alloc_t *new_alloc(uint64_t size, uint64_t align)
{
    mc__alloc_t *a = NULL;

    assert_int_equal(mc__alloc_create(&a, size, align), 0);
    assert_non_null(a);
    return a;
}

/* Allocates len bytes that must come back as exactly one extent. */
static mc__extent_t get_one(mc__alloc_t *a, uint64_t len)
{
    mc__extent_t e = {0, 0};

    assert_int_equal(mc__alloc_get(a, len, &e, 1), 1);
    return e;
}

/* Checks that ext[0..n) are aligned, inside [0, size), pairwise disjoint and
 * add up to total bytes. */
static void check_extents(const mc__alloc_t *a, const mc__extent_t *ext, int n, uint64_t total)
{
    uint64_t sum = 0, size = mc__alloc_size(a);

    for (int i = 0; i < n; i++) {
        assert_true(ext[i].len > 0);
        assert_int_equal(ext[i].off % U, 0);
        assert_int_equal(ext[i].len % U, 0);
        assert_true(ext[i].off < size);
        assert_true(ext[i].len <= size - ext[i].off);
        for (int j = 0; j < i; j++)
            assert_true(ext[i].off + ext[i].len <= ext[j].off ||
                        ext[j].off + ext[j].len <= ext[i].off);
        sum += ext[i].len;
    }
    assert_int_equal(sum, total);
}

static void test_create_rejects_bad_arguments(void **state)
{
    mc__alloc_t *a = NULL;
    mc__extent_t e;

    assert_int_equal(mc__alloc_create(&a, 1 << 20, 0), -EINVAL);
    assert_int_equal(mc__alloc_create(&a, 1 << 20, 2), -EINVAL);  /* below 4 */
    assert_int_equal(mc__alloc_create(&a, 1 << 20, 12), -EINVAL); /* not 2^k */
    assert_int_equal(mc__alloc_create(&a, 1 << 20, 96), -EINVAL);
    assert_int_equal(mc__alloc_create(&a, 4095, 4096), -EINVAL); /* < one unit */
    assert_int_equal(mc__alloc_create(&a, 0, 64), -EINVAL);
    assert_null(a);

    /* 4 bytes, the smallest unit (a small object's) */
    assert_int_equal(mc__alloc_create(&a, 1 << 20, 4), 0);
    assert_int_equal(mc__alloc_get(a, 5, &e, 1), 1);
    assert_int_equal(e.len, 8);
    mc__alloc_put(a, &e, 1);
    mc__alloc_destroy(a);
    a = NULL;

    /* size is rounded down to the alignment */
    assert_int_equal(mc__alloc_create(&a, 3 * 4096 + 100, 4096), 0);
    assert_int_equal(mc__alloc_size(a), 3 * 4096);
    assert_int_equal(mc__alloc_used(a), 0);
    assert_int_equal(mc__alloc_largest(a), 3 * 4096);
    assert_int_equal(mc__alloc_free_extents(a), 1);

    assert_int_equal(mc__alloc_get(a, 0, &e, 1), -EINVAL);
    assert_int_equal(mc__alloc_get(a, 1, &e, 0), -EINVAL);
    assert_int_equal(mc__alloc_used(a), 0);
    mc__alloc_destroy(a);

    a = new_alloc(8, 8); /* the smallest allocator: one unit */
    assert_int_equal(mc__alloc_size(a), 8);
    mc__alloc_destroy(a);
    mc__alloc_destroy(NULL);
}

static void test_get_rounds_up_to_alignment(void **state)
{
    mc__alloc_t *a = new_alloc(64 * U, U);
    mc__extent_t e;

    assert_int_equal(mc__alloc_round(a, 1), U);
    assert_int_equal(mc__alloc_round(a, U), U);
    assert_int_equal(mc__alloc_round(a, U + 1), 2 * U);

    e = get_one(a, 1);
    assert_int_equal(e.off, 0);
    assert_int_equal(e.len, U);
    e = get_one(a, U + 1);
    assert_int_equal(e.off, U);
    assert_int_equal(e.len, 2 * U);
    e = get_one(a, 3 * U);
    assert_int_equal(e.off, 3 * U);
    assert_int_equal(e.len, 3 * U);
    assert_int_equal(mc__alloc_used(a), 6 * U);
    assert_int_equal(mc__alloc_largest(a), 58 * U);
    mc__alloc_destroy(a);
}

static void test_fill_exactly_then_enospc(void **state)
{
    mc__alloc_t *a = new_alloc(16 * U, U);
    mc__extent_t e[4];

    for (int i = 0; i < 16; i++) {
        mc__extent_t x = get_one(a, U);
        assert_int_equal(x.off, (uint64_t)i * U);
    }
    assert_int_equal(mc__alloc_used(a), 16 * U);
    assert_int_equal(mc__alloc_largest(a), 0);
    assert_int_equal(mc__alloc_free_extents(a), 0);

    assert_int_equal(mc__alloc_get(a, 1, e, 4), -ENOSPC);
    assert_int_equal(mc__alloc_get(a, UINT64_MAX, e, 4), -ENOSPC);
    assert_int_equal(mc__alloc_used(a), 16 * U);
    assert_int_equal(mc__alloc_free_extents(a), 0);
    mc__alloc_destroy(a);

    /* one request for the whole region, then nothing more */
    a = new_alloc(16 * U, U);
    e[0] = get_one(a, 16 * U);
    assert_int_equal(e[0].off, 0);
    assert_int_equal(e[0].len, 16 * U);
    assert_int_equal(mc__alloc_get(a, U, e, 1), -ENOSPC);
    assert_int_equal(mc__alloc_used(a), 16 * U);
    mc__alloc_destroy(a);

    /* more than the region, even in many pieces */
    a = new_alloc(16 * U, U);
    assert_int_equal(mc__alloc_get(a, 16 * U + 1, e, 4), -ENOSPC);
    assert_int_equal(mc__alloc_used(a), 0);
    assert_int_equal(mc__alloc_free_extents(a), 1);
    mc__alloc_destroy(a);
}

static void test_free_and_reuse(void **state)
{
    mc__alloc_t *a = new_alloc(8 * U, U);
    mc__extent_t x, y, z;

    x = get_one(a, 2 * U);
    y = get_one(a, 2 * U);
    mc__alloc_put(a, &x, 1);
    assert_int_equal(mc__alloc_used(a), 2 * U);
    assert_int_equal(mc__alloc_free_extents(a), 2);

    /* the freed hole is the best fit for the same size */
    z = get_one(a, 2 * U);
    assert_int_equal(z.off, x.off);
    assert_int_equal(z.len, x.len);

    mc__alloc_put(a, &y, 1);
    mc__alloc_put(a, &z, 1);
    assert_int_equal(mc__alloc_used(a), 0);
    assert_int_equal(mc__alloc_free_extents(a), 1);
    assert_int_equal(mc__alloc_largest(a), 8 * U);

    /* the whole region is usable again */
    z = get_one(a, 8 * U);
    assert_int_equal(z.off, 0);
    mc__alloc_put(a, &z, 1);
    mc__alloc_destroy(a);
}

/*
 * Builds holes of hole[i] units, each followed by one allocated unit, from
 * offset 0; whatever is left of the region after them stays free.
 */
static void make_holes(mc__alloc_t *a, const int *hole, int n)
{
    mc__extent_t tmp[16];

    assert_true(n <= 16);
    for (int i = 0; i < n; i++) {
        tmp[i] = get_one(a, (uint64_t)hole[i] * U);
        (void)get_one(a, U);
    }
    mc__alloc_put(a, tmp, n);
}

static void test_best_fit_picks_smallest_hole(void **state)
{
    /* holes at 0 (3 units), 4 (1 unit), 6 (2 units), 9 (4 units), tail 14.. */
    static const int hole[] = {3, 1, 2, 4};
    mc__alloc_t *a = new_alloc(64 * U, U);
    mc__extent_t e;

    make_holes(a, hole, 4);
    assert_int_equal(mc__alloc_free_extents(a), 5);
    e = get_one(a, 2 * U);
    assert_int_equal(e.off, 6 * U); /* not the first hole that fits (0) */
    e = get_one(a, U);
    assert_int_equal(e.off, 4 * U);
    e = get_one(a, 3 * U + 1); /* rounds to 4 units: only hole 9 fits exactly */
    assert_int_equal(e.off, 9 * U);
    e = get_one(a, 2 * U); /* now the 3-unit hole is the best; take its low end */
    assert_int_equal(e.off, 0);
    e = get_one(a, U);
    assert_int_equal(e.off, 2 * U);
    e = get_one(a, U); /* only the tail is left */
    assert_int_equal(e.off, 14 * U);
    assert_int_equal(mc__alloc_free_extents(a), 1);
    mc__alloc_destroy(a);
}

static void test_fragmented_request_spans_extents(void **state)
{
    mc__alloc_t *a = new_alloc(32 * U, U);
    mc__extent_t x[32], e[8];
    int n;

    for (int i = 0; i < 32; i++)
        x[i] = get_one(a, U);
    for (int i = 0; i < 32; i += 2)
        mc__alloc_put(a, &x[i], 1);
    assert_int_equal(mc__alloc_free_extents(a), 16);
    assert_int_equal(mc__alloc_largest(a), U);

    n = mc__alloc_get(a, 5 * U - 7, e, 8);
    assert_int_equal(n, 5);
    check_extents(a, e, n, 5 * U);
    for (int i = 0; i < n; i++) {
        /* each piece is one of the holes: an even unit */
        assert_int_equal(e[i].len, U);
        assert_int_equal((e[i].off / U) % 2, 0);
    }
    assert_int_equal(mc__alloc_used(a), 21 * U);
    assert_int_equal(mc__alloc_free_extents(a), 11);
    mc__alloc_destroy(a);
}

static void test_fragmented_takes_largest_first_and_splits_last(void **state)
{
    /* holes at 0 (1 unit), 2 (4 units), 7 (2 units), 10 (3 units), 14 (2 units) */
    static const int hole[] = {1, 4, 2, 3, 2};
    mc__alloc_t *a = new_alloc(17 * U, U); /* the last separator ends it */
    mc__extent_t e[8];
    int n;

    make_holes(a, hole, 5);
    assert_int_equal(mc__alloc_free_extents(a), 5);
    assert_int_equal(mc__alloc_used(a), 5 * U);

    n = mc__alloc_get(a, 6 * U, e, 8);
    assert_int_equal(n, 2);
    assert_int_equal(e[0].off, 2 * U); /* the 4-unit hole, whole */
    assert_int_equal(e[0].len, 4 * U);
    assert_int_equal(e[1].off, 10 * U); /* the low 2 units of the 3-unit hole */
    assert_int_equal(e[1].len, 2 * U);
    assert_int_equal(mc__alloc_free_extents(a), 4); /* 1, 2, 1 (split), 2 */
    assert_int_equal(mc__alloc_largest(a), 2 * U);

    /* an exact cover: the two 2-unit holes, nothing split */
    n = mc__alloc_get(a, 4 * U, e, 2);
    assert_int_equal(n, 2);
    check_extents(a, e, n, 4 * U);
    assert_int_equal(e[0].len, 2 * U);
    assert_int_equal(e[1].len, 2 * U);
    assert_int_equal(mc__alloc_free_extents(a), 2);
    assert_int_equal(mc__alloc_used(a), 15 * U);
    mc__alloc_destroy(a);
}

static void test_enospc_when_max_too_small(void **state)
{
    mc__alloc_t *a = new_alloc(32 * U, U);
    mc__extent_t x[32], e[8];
    uint64_t used;
    int nfree;

    for (int i = 0; i < 32; i++)
        x[i] = get_one(a, U);
    for (int i = 0; i < 32; i += 2)
        mc__alloc_put(a, &x[i], 1);
    used = mc__alloc_used(a);
    nfree = mc__alloc_free_extents(a);

    assert_int_equal(mc__alloc_get(a, 5 * U, e, 4), -ENOSPC);
    assert_int_equal(mc__alloc_get(a, 2 * U, e, 1), -ENOSPC);
    assert_int_equal(mc__alloc_used(a), used);
    assert_int_equal(mc__alloc_free_extents(a), nfree);
    assert_int_equal(mc__alloc_largest(a), U);

    /* enough free bytes in total but not in 8 pieces */
    assert_int_equal(mc__alloc_get(a, 9 * U, e, 8), -ENOSPC);
    assert_int_equal(mc__alloc_used(a), used);
    assert_int_equal(mc__alloc_free_extents(a), nfree);

    /* the same request succeeds when enough pieces are allowed */
    assert_int_equal(mc__alloc_get(a, 5 * U, e, 5), 5);
    check_extents(a, e, 5, 5 * U);
    assert_int_equal(mc__alloc_used(a), used + 5 * U);
    mc__alloc_destroy(a);
}

static void seed_rng(void)
{
    const char *s = getenv("MC_TEST_SEED");

    rng_state = s ? strtoull(s, NULL, 0) : 0x6d6f6f6e63616b65ULL;
    if (rng_state == 0)
        rng_state = 1;
    print_message("seed %llu (set MC_TEST_SEED to repeat)\n", (unsigned long long)rng_state);
}

static void test_coalesce_after_random_free_order(void **state)
{
    enum { N = 200 };
    mc__alloc_t *a;
    mc__extent_t x[N];
    uint64_t total = 0;

    seed_rng();
    for (int i = 0; i < N; i++)
        total += (1 + i % 7) * U;
    a = new_alloc(total, U);
    for (int i = 0; i < N; i++)
        x[i] = get_one(a, (1 + i % 7) * U);
    assert_int_equal(mc__alloc_used(a), total);
    assert_int_equal(mc__alloc_free_extents(a), 0);

    for (int i = N - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)(rnd() % (uint64_t)(i + 1));
        mc__extent_t t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
    for (int i = 0; i < N; i++) {
        mc__alloc_put(a, &x[i], 1);
        /* at most one free extent per hole between the i + 1 freed ones */
        assert_true(mc__alloc_free_extents(a) <= i + 1);
    }
    assert_int_equal(mc__alloc_used(a), 0);
    assert_int_equal(mc__alloc_free_extents(a), 1);
    assert_int_equal(mc__alloc_largest(a), total);
    mc__alloc_destroy(a);
}

static void test_put_tail_subrange(void **state)
{
    mc__alloc_t *a = new_alloc(16 * U, U);
    mc__extent_t x, y, part;

    x = get_one(a, 8 * U); /* [0, 8) */
    y = get_one(a, 4 * U); /* [8, 12) */
    assert_int_equal(x.off, 0);
    assert_int_equal(y.off, 8 * U);

    /* y shrinks to 1 unit: its tail joins the free tail of the region */
    part = (mc__extent_t){.off = y.off + U, .len = 3 * U};
    mc__alloc_put(a, &part, 1);
    y.len = U;
    assert_int_equal(mc__alloc_used(a), 9 * U);
    assert_int_equal(mc__alloc_free_extents(a), 1);
    assert_int_equal(mc__alloc_largest(a), 7 * U);

    /* x gives back a middle piece, then its tail: the tail bridges nothing
     * (y follows it) but both pieces stay separate free extents */
    part = (mc__extent_t){.off = 2 * U, .len = 2 * U};
    mc__alloc_put(a, &part, 1);
    assert_int_equal(mc__alloc_free_extents(a), 2);
    part = (mc__extent_t){.off = 6 * U, .len = 2 * U};
    mc__alloc_put(a, &part, 1);
    assert_int_equal(mc__alloc_free_extents(a), 3);
    assert_int_equal(mc__alloc_used(a), 5 * U);

    /* the rest of x and then y: everything coalesces */
    part = (mc__extent_t){.off = 4 * U, .len = 2 * U};
    mc__alloc_put(a, &part, 1);
    assert_int_equal(mc__alloc_free_extents(a), 2);
    part = (mc__extent_t){.off = 0, .len = 2 * U};
    mc__alloc_put(a, &part, 1);
    assert_int_equal(mc__alloc_free_extents(a), 2);
    mc__alloc_put(a, &y, 1);
    assert_int_equal(mc__alloc_used(a), 0);
    assert_int_equal(mc__alloc_free_extents(a), 1);
    assert_int_equal(mc__alloc_largest(a), 16 * U);
    mc__alloc_destroy(a);
}

/* Runs fn in a child process and checks that it dies of SIGABRT. */
static void expect_abort(void (*fn)(void))
{
    pid_t pid;
    int status;

    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0)
            dup2(fd, 2); /* keep the expected message out of the log */
        fn();
        _exit(0);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
}

static void double_put(void)
{
    mc__alloc_t *a = NULL;
    mc__extent_t x = {0, 0}, y = {0, 0};

    if (mc__alloc_create(&a, 16 * U, U) != 0 || mc__alloc_get(a, 4 * U, &x, 1) != 1 ||
        mc__alloc_get(a, 4 * U, &y, 1) != 1)
        _exit(2);
    mc__alloc_put(a, &x, 1);
    mc__alloc_put(a, &x, 1);
}

static void partial_overlap_put(void)
{
    mc__alloc_t *a = NULL;
    mc__extent_t x = {0, 0}, bad;

    if (mc__alloc_create(&a, 16 * U, U) != 0 || mc__alloc_get(a, 4 * U, &x, 1) != 1)
        _exit(2);
    bad = (mc__extent_t){.off = 3 * U, .len = 2 * U}; /* runs into the free tail */
    mc__alloc_put(a, &bad, 1);
}

static void misaligned_put(void)
{
    mc__alloc_t *a = NULL;
    mc__extent_t x = {0, 0}, bad;

    if (mc__alloc_create(&a, 16 * U, U) != 0 || mc__alloc_get(a, 4 * U, &x, 1) != 1)
        _exit(2);
    bad = (mc__extent_t){.off = 8, .len = U};
    mc__alloc_put(a, &bad, 1);
}

static void test_put_misuse_aborts(void **state)
{
    expect_abort(double_put);
    expect_abort(partial_overlap_put);
    expect_abort(misaligned_put);
}

/* ---- randomized stress against a unit map ---- */

enum { UNITS = 2048, MAX_OBJ = 256, MAX_EXT = 8 };

struct obj {
    mc__extent_t ext[MAX_EXT];
    int n;
};

struct run {
    uint64_t off, len; /* in units */
};

/* Fills runs[] with the maximal free runs of map[]; returns their count. */
static int free_runs(const uint8_t *map, struct run *runs)
{
    int n = 0;

    for (uint64_t u = 0; u < UNITS;) {
        if (map[u]) {
            u++;
            continue;
        }
        uint64_t s = u;
        while (u < UNITS && !map[u])
            u++;
        runs[n++] = (struct run){s, u - s};
    }
    return n;
}

static int run_by_len_desc(const void *x, const void *y)
{
    const struct run *p = x, *q = y;

    return p->len < q->len ? 1 : p->len > q->len ? -1 : 0;
}

static void mark(uint8_t *map, const mc__extent_t *e, uint8_t v)
{
    for (uint64_t u = e->off / U; u < (e->off + e->len) / U; u++) {
        assert_int_equal(map[u], !v); /* never handed out twice or freed twice */
        map[u] = v;
    }
}

/* Checks the allocator's accessors against the map. */
static void check_model(const mc__alloc_t *a, const uint8_t *map, struct run *runs)
{
    uint64_t used = 0, longest = 0;
    int n = free_runs(map, runs);

    for (int u = 0; u < UNITS; u++)
        used += map[u];
    for (int i = 0; i < n; i++)
        if (runs[i].len > longest)
            longest = runs[i].len;
    assert_int_equal(mc__alloc_used(a), used * U);
    /* the free list is fully coalesced: one extent per maximal run */
    assert_int_equal(mc__alloc_free_extents(a), n);
    assert_int_equal(mc__alloc_largest(a), longest * U);
}

/* Checks the outcome of a get of len units in max pieces against the runs
 * that were free before it. */
static void check_get(const struct run *runs, int nruns, uint64_t len, int max,
                      const mc__extent_t *e, int n)
{
    struct run sorted[UNITS];
    uint64_t best = 0, sum = 0;
    int k;

    for (int i = 0; i < nruns; i++)
        if (runs[i].len >= len && (best == 0 || runs[i].len < best))
            best = runs[i].len;
    if (best) { /* best fit: one piece from the start of a smallest fitting run */
        int found = 0;
        assert_int_equal(n, 1);
        assert_int_equal(e[0].len, len * U);
        for (int i = 0; i < nruns; i++)
            found |= runs[i].off * U == e[0].off && runs[i].len == best;
        assert_true(found);
        return;
    }
    memcpy(sorted, runs, (size_t)nruns * sizeof(*runs));
    qsort(sorted, (size_t)nruns, sizeof(*sorted), run_by_len_desc);
    for (k = 0; k < nruns && sum < len; k++)
        sum += sorted[k].len;
    if (sum < len || k > max) {
        assert_int_equal(n, -ENOSPC);
        return;
    }
    /* largest first: the pieces have the lengths of the k largest runs, the
     * last one cut to what is still needed, and each starts a run */
    assert_int_equal(n, k);
    for (int i = 0; i < k; i++) {
        uint64_t want = i < k - 1 ? sorted[i].len : sorted[i].len - (sum - len);
        int found = 0;
        assert_int_equal(e[i].len, want * U);
        for (int j = 0; j < nruns; j++)
            found |= runs[j].off * U == e[i].off && runs[j].len >= want;
        assert_true(found);
    }
}

static void test_stress_against_unit_map(void **state)
{
    static uint8_t map[UNITS];
    static struct obj objs[MAX_OBJ];
    static struct run runs[UNITS];
    int nobj = 0, gets = 0, spans = 0, fails = 0;
    mc__alloc_t *a;

    seed_rng();
    memset(map, 0, sizeof(map));
    a = new_alloc((uint64_t)UNITS * U + U / 2, U); /* size is rounded down */
    assert_int_equal(mc__alloc_size(a), (uint64_t)UNITS * U);

    for (int op = 0; op < 10000; op++) {
        uint64_t r = rnd() % 100;

        if (nobj < MAX_OBJ && (r < 50 || nobj == 0)) {
            /* mostly small objects, now and then a large one */
            uint64_t len = rnd() % 16 == 0 ? 1 + rnd() % (256 * U) : 1 + rnd() % (24 * U);
            int max = 1 + (int)(rnd() % MAX_EXT);
            int nruns = free_runs(map, runs);
            struct obj *o = &objs[nobj];
            uint64_t used = mc__alloc_used(a);
            int nfree = mc__alloc_free_extents(a);

            o->n = mc__alloc_get(a, len, o->ext, max);
            check_get(runs, nruns, (len + U - 1) / U, max, o->ext, o->n);
            gets++;
            if (o->n < 0) {
                assert_int_equal(mc__alloc_used(a), used);
                assert_int_equal(mc__alloc_free_extents(a), nfree);
                fails++;
            } else {
                check_extents(a, o->ext, o->n, (len + U - 1) / U * U);
                for (int i = 0; i < o->n; i++)
                    mark(map, &o->ext[i], 1);
                spans += o->n > 1;
                nobj++;
            }
        } else if (r < 85 || nobj == MAX_OBJ) {
            int i = (int)(rnd() % (uint64_t)nobj);
            mc__alloc_put(a, objs[i].ext, objs[i].n);
            for (int j = 0; j < objs[i].n; j++)
                mark(map, &objs[i].ext[j], 0);
            objs[i] = objs[--nobj];
        } else {
            /* shrink: give back an aligned tail of the last extent */
            struct obj *o = &objs[rnd() % (uint64_t)nobj];
            mc__extent_t *last = &o->ext[o->n - 1];
            if (last->len > U) {
                uint64_t keep = (1 + rnd() % (last->len / U - 1)) * U;
                mc__extent_t tail = {last->off + keep, last->len - keep};
                mc__alloc_put(a, &tail, 1);
                mark(map, &tail, 0);
                last->len = keep;
            }
        }
        check_model(a, map, runs);
    }
    print_message("%d gets: %d spanned several extents, %d failed\n", gets, spans, fails);
    assert_true(spans > 0);
    assert_true(fails > 0);

    while (nobj > 0) {
        nobj--;
        mc__alloc_put(a, objs[nobj].ext, objs[nobj].n);
        for (int j = 0; j < objs[nobj].n; j++)
            mark(map, &objs[nobj].ext[j], 0);
    }
    check_model(a, map, runs);
    assert_int_equal(mc__alloc_free_extents(a), 1);
    assert_int_equal(mc__alloc_largest(a), (uint64_t)UNITS * U);
    mc__alloc_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_rejects_bad_arguments),
        cmocka_unit_test(test_get_rounds_up_to_alignment),
        cmocka_unit_test(test_fill_exactly_then_enospc),
        cmocka_unit_test(test_free_and_reuse),
        cmocka_unit_test(test_best_fit_picks_smallest_hole),
        cmocka_unit_test(test_fragmented_request_spans_extents),
        cmocka_unit_test(test_fragmented_takes_largest_first_and_splits_last),
        cmocka_unit_test(test_enospc_when_max_too_small),
        cmocka_unit_test(test_coalesce_after_random_free_order),
        cmocka_unit_test(test_put_tail_subrange),
        cmocka_unit_test(test_put_misuse_aborts),
        cmocka_unit_test(test_stress_against_unit_map),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
