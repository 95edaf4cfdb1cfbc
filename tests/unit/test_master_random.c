/*
 * test_master_random.c - random operations on the master's versions,
 * compact (one replica in the fields) and general, with allocations
 * failing now and then: puts of one to three replicas begun, grown,
 * given holes and punched (sizes past 2^48 among them), committed and
 * aborted; a repair's replica
 * attached, a replica taken out and given back, removes, a segment
 * dropped and mounted again. After every step every version's layout
 * covers its capacity (a compact one holds at most one extent, in x1)
 * and the bytes of all layouts are the space the master counts as used;
 * each round rebuilds a second master from the records (merges failing
 * now and then too), and ends with all space back and every allocation
 * freed. The same again at scale: sizes around 16 MiB in segments whose
 * free space straddles 16 TiB, the bounds of a compact version's packed
 * extent (master.h: x1), so that extents fit it and do not, either way.
 *
 * Allocations fail through malloc(), calloc() and realloc() defined here
 * over glibc's; under a sanitizer, which has its own, none fail.
 */
#include "master_fixture.h"
#include "master/master_i.h"

static int failing; /* 1: allocations fail now and then */
static long live;   /* allocations not freed */

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_UNDEFINED__)
static long failed; /* allocations that failed */
static uint64_t frng = 12345;
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);

/* One allocation in eight fails while failing is set. */
static int may_allocate(void)
{
    if (!failing)
        return 1;
    frng = frng * 6364136223846793005ULL + 1442695040888963407ULL;
    if ((frng >> 33) % 8 != 0)
        return 1;
    failed++;
    return 0;
}

void *malloc(size_t n)
{
    void *p = may_allocate() ? __libc_malloc(n) : NULL;
    live += p != NULL;
    return p;
}

void *calloc(size_t n, size_t size)
{
    void *p = may_allocate() ? __libc_calloc(n, size) : NULL;
    live += p != NULL;
    return p;
}

void *realloc(void *q, size_t n)
{
    void *p = may_allocate() ? __libc_realloc(q, n) : NULL;
    if (!q)
        live += p != NULL;
    return p;
}

void free(void *p)
{
    live -= p != NULL;
    __libc_free(p);
}
#endif

#define NSEG 3
#define SEGSZ (256 * UNIT)
/* At scale: segments of 16 TiB and 256 MiB, all below 16 TiB but 128 MiB
 * taken by a filler, sizes 128 KiB times those of the small rounds. */
#define BIG_SEGSZ (MC__X1_OFF_END + 256 * 1024 * 1024ULL)
#define BIG_FILL (MC__X1_OFF_END - 128 * 1024 * 1024ULL)
#define BIG_SCALE (128 * 1024)
static uint64_t segsz = SEGSZ, scale = 1;
static mc__replica_t filler[NSEG]; /* at scale: each segment's */
#define NPEND 4
#define NHELD 16

static uint64_t rng = 88172645463325252ULL;
static uint64_t rn(uint64_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return n ? rng % n : 0;
}

static mc__version_t *pend[NPEND];
static mc__replica_t held[NHELD];
static int nheld;
static long st_commit, st_conv, st_attach, st_take, st_range, st_reserve, st_big;
static long st_fit, st_nofit; /* committed with one extent: compact, or not (past x1) */

static uint64_t layout_bytes(const mc__version_t *v)
{
    uint64_t t = 0;
    for (uint32_t r = 0; r < v->nrep; r++) {
        mc__replica_t rep = vrep(v, r);
        uint64_t len = 0;
        for (uint32_t i = 0; i < rep.n; i++)
            len += rep.ext[i].len;
        if (rep.n)
            assert_int_equal(len, mc__vcap(v));
        if (mc__vcompact(v)) {
            assert_true(rep.n <= 1);
            if (rep.n)
                assert_true(in_x1(v));
        }
        t += mc__replica_bytes(&rep);
    }
    return t;
}

static void check(mc__master_t *m)
{
    uint64_t t = 0;
    mc__index_iter_t it;
    void *val;
    mc__index_seek(m->ix, &it, NULL, 0, 0);
    while (mc__index_next(&it, NULL, NULL, &val)) {
        t += layout_bytes(val);
        assert_true(mc__vsize(val) <= mc__vcap(val)); /* a size past 2^48 too */
    }
    for (size_t i = 0; i < m->nretired; i++)
        t += layout_bytes(m->retired[i]);
    for (int i = 0; i < NPEND; i++)
        if (pend[i])
            t += layout_bytes(pend[i]);
    for (int i = 0; i < nheld; i++)
        t += mc__replica_bytes(&held[i]);
    for (int i = 0; i < NSEG; i++)
        t += mc__replica_bytes(&filler[i]);
    assert_int_equal(t, used(m));
}

static mc__version_t *pick(mc__master_t *m, char *k)
{
    snprintf(k, 16, "k%d", (int)rn(12));
    return find(m, k);
}

static void step(mc__master_t *m, uint64_t now)
{
    char k[16];
    int p = (int)rn(NPEND);
    switch (rn(10)) {
    case 0: /* begin */
        if (!pend[p]) {
            mc_put_opts_t po = {.replica_num = (uint32_t)(1 + (rn(3) == 0 ? rn(3) : 0))};
            snprintf(k, 16, "k%d", (int)rn(12));
            if (mc__master_begin(m, k, strlen(k), &po, now, &pend[p]) < 0)
                pend[p] = NULL;
        }
        break;
    case 1: /* reserve */
        if (pend[p])
            st_reserve +=
                0 == mc__master_reserve(m, pend[p], mc__vcap(pend[p]) + rn(6) * 40 * scale, now);
        break;
    case 2: /* range or punch, now and then past 2^48 (a size kept in the side record) */
        if (pend[p]) {
            uint64_t off = rn(16) ? rn(12) * 50 * scale : MC__VSIZE_BIG - 200 + rn(6) * 50;
            st_range += 0 == mc__master_reserve_range(m, pend[p], off, 1 + rn(4) * 60 * scale,
                                                      rn(3) == 0, now);
        }
        break;
    case 3: /* commit: the whole capacity or less */
        if (pend[p]) {
            uint64_t cap = mc__vcap(pend[p]);
            uint64_t size = rn(4) == 0 ? cap : cap ? rn(cap + 1) : 0;
            if (mc__master_commit(m, pend[p], size, 0, now) == 0) {
                mc_stat_t st;
                mc__version_stat(m, pend[p], now, &st);
                assert_int_equal(st.size, size);
                st_big += size >= MC__VSIZE_BIG;
                if (pend[p]->nrep == 1 && vrep(pend[p], 0).n == 1) {
                    st_fit += in_x1(pend[p]);
                    st_nofit += !mc__vcompact(pend[p]);
                }
                st_commit++;
                if (!mc__vcompact(pend[p]))
                    st_conv++;
                pend[p] = NULL;
            }
        }
        break;
    case 4: /* abort */
        if (pend[p]) {
            mc__master_abort(m, pend[p]);
            pend[p] = NULL;
        }
        break;
    case 5: { /* a repair: another replica like the first */
        mc__version_t *v = pick(m, k);
        if (!v || !v->nrep || mc__vmore(v)->link)
            break;
        uint32_t seg = (uint32_t)rn(NSEG);
        if (mc__version_has_replica(v, seg) || !mc__master_has_segment(m, seg))
            break;
        mc__replica_t r, r0 = vrep(v, 0);
        if (mc__master_replica_alloc_like(m, seg, &r0, &r) < 0)
            break;
        if (r.n == 0 && mc__vcap(v)) {
            mc__master_replica_release(m, &r);
            break;
        }
        if (mc__master_replica_attach(v, &r) == 0)
            st_attach++;
        else
            mc__master_replica_release(m, &r);
        break;
    }
    case 6: { /* a move's drop: take a replica out (held) */
        mc__version_t *v = pick(m, k);
        if (!v || v->nrep < 1 || nheld == NHELD)
            break;
        uint32_t seg = mc__vrep_seg(v, (uint32_t)rn(v->nrep));
        if (v->nrep == 1 && rn(2))
            break;
        if (mc__version_take_replica(v, seg, &held[nheld]) == 1) {
            nheld++;
            st_take++;
        }
        break;
    }
    case 7: /* give a held replica back */
        if (nheld) {
            mc__master_replica_release(m, &held[--nheld]);
        }
        break;
    case 8: /* remove */
        pick(m, k);
        (void)mc__master_remove(m, k, strlen(k), 0, now);
        break;
    case 9: /* drop a segment now and then, and mount it again */
        if (rn(20) == 0) {
            uint32_t seg = (uint32_t)rn(NSEG);
            for (int i = 0; i < nheld;)
                if (held[i].seg == seg) {
                    free(held[i].ext);
                    held[i] = held[--nheld];
                } else {
                    i++;
                }
            for (int i = 0; i < NPEND; i++)
                if (pend[i])
                    mc__version_drop_replica(pend[i], seg);
            free(filler[seg].ext); /* its space goes with the segment */
            filler[seg] = (mc__replica_t){0};
            mc__master_drop_segment(m, seg, now);
            failing = 0;
            assert_int_equal(mc__master_add_segment(m, seg, segsz), 0);
            if (scale > 1)
                assert_int_equal(mc__master_replica_alloc(m, seg, BIG_FILL, &filler[seg]), 0);
            failing = 1;
        }
        break;
    }
}

/* A master whose leases last lease_ms, with segments 0 .. NSEG - 1. */
static mc__master_t *random_master(uint64_t lease_ms)
{
    mc__master_opts_t o = {.lease_ms = lease_ms, .align = UNIT};
    mc__master_t *m = NULL;
    assert_int_equal(mc__master_new(&m, &o), 0);
    for (uint32_t s = 0; s < NSEG; s++)
        assert_int_equal(mc__master_add_segment(m, s, segsz), 0);
    return m;
}

/* Rebuilds a second master from the records of the first's published
 * versions: the same space in use. */
static void rebuild_check(mc__master_t *m)
{
    mc__master_t *m2 = random_master(LEASE_MS);
    uint64_t want = 0;
    mc__index_iter_t it;
    void *val;
    mc__index_seek(m->ix, &it, NULL, 0, 0);
    while (mc__index_next(&it, NULL, NULL, &val)) {
        mc__version_t *v = val;
        want += layout_bytes(v);
        for (uint32_t r = 0; r < v->nrep; r++) {
            mc__rec_t rec;
            uint32_t seg = mc__vrep_seg(v, r);
            mc__extent_t one;
            const mc__extent_t *e = mc__master_record(m, v, seg, &rec, &one);
            failing = 1;
            int rc = mc__master_merge(m2, seg, &rec, e, T0);
            failing = 0;
            assert_true(rc == 1 || rc == -ENOMEM);
        }
    }
    uint64_t got = 0;
    mc__index_seek(m2->ix, &it, NULL, 0, 0);
    while (mc__index_next(&it, NULL, NULL, &val))
        got += layout_bytes(val);
    assert_int_equal(used(m2), got);
    assert_true(got <= want); /* merges that failed brought nothing */
    mc__master_free(m2);
}

/* rounds rounds of 400 random steps, each from a new master. */
static void random_rounds(int rounds)
{
    for (int round = 0; round < rounds; round++) {
        long live0 = live;
        mc__master_t *m = random_master(0);
        for (uint32_t s = 0; s < NSEG && scale > 1; s++)
            assert_int_equal(mc__master_replica_alloc(m, s, BIG_FILL, &filler[s]), 0);
        memset(pend, 0, sizeof(pend));
        nheld = 0;
        uint64_t now = T0;
        for (int i = 0; i < 400; i++) {
            failing = 1;
            step(m, now++);
            failing = 0;
            check(m);
        }
        rebuild_check(m);
        for (int i = 0; i < NPEND; i++)
            if (pend[i]) {
                mc__master_abort(m, pend[i]);
                pend[i] = NULL;
            }
        while (nheld)
            mc__master_replica_release(m, &held[--nheld]);
        for (int i = 0; i < NSEG; i++)
            mc__master_replica_release(m, &filler[i]);
        char k[16];
        for (int i = 0; i < 12; i++) {
            snprintf(k, 16, "k%d", i);
            (void)mc__master_remove(m, k, strlen(k), 0, now);
        }
        mc__master_sweep(m, now + 1000);
        assert_int_equal(used(m), 0);
        mc__master_free(m);
        assert_int_equal(live, live0);
    }
}

static void test_random_ops(void **state)
{
    (void)state;
    random_rounds(3000);
    /* The steps reached what they are for: versions committed compact and
     * in the general form, replicas attached and taken, holes. */
    assert_true(st_commit > 1000 && st_conv > 100 && st_attach > 100 && st_take > 100);
    assert_true(st_range > 100 && st_reserve > 1000 && st_big > 10);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_UNDEFINED__)
    assert_true(failed > 1000);
#endif
}

static void test_random_ops_at_scale(void **state)
{
    (void)state;
    segsz = BIG_SEGSZ;
    scale = BIG_SCALE;
    st_commit = st_conv = st_fit = st_nofit = 0;
    random_rounds(300);
    segsz = SEGSZ;
    scale = 1;
    /* Objects of one extent both in x1 and past it (its length, or its
     * offset past 16 TiB). */
    assert_true(st_commit > 100 && st_fit > 20 && st_nofit > 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_ops),
        cmocka_unit_test(test_random_ops_at_scale),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
