/*
 * test_master_x1.c - a compact version's one extent packed in 8 bytes of
 * its fields (master.h: x1, mc__x1_pack()): offsets below MC__X1_OFF_END
 * (16 TiB) and lengths below MC__X1_LEN_END (16 MiB), in 4-byte units. An
 * extent past either takes a replica array (its capacity then in x1 alone)
 * however it comes: a reservation, a growth in place past the length, a
 * segment offset past the range, a rebuild from records; and a replica
 * added, dropped, taken out and given back, a hole and a punch, a trim at
 * the commit, all keep the space counted right. The segments are the
 * master's bookkeeping only: one of 32 TiB takes no memory.
 */
#include "master_fixture.h"
#include "master/master_i.h"

#define MiB (1024ULL * 1024)
#define TiB (1024ULL * 1024 * MiB)

/* The layout of v agrees with its capacity and the space it holds. */
static uint64_t layout_bytes(const mc__version_t *v)
{
    uint64_t t = 0;
    for (uint32_t r = 0; r < v->nrep; r++) {
        mc__replica_t rep = vrep(v, r);
        uint64_t len = 0;
        for (uint32_t i = 0; i < rep.n; i++)
            len += rep.ext[i].len;
        assert_true(len >= mc__vcap(v) && len < mc__vcap(v) + UNIT);
        if (mc__vcompact(v))
            assert_true(rep.n == v->n1 && r == 0);
        t += mc__replica_bytes(&rep);
    }
    return t;
}

static void test_pack_boundaries(void **state)
{
    (void)state;
    assert_int_equal(MC__X1_OFF_END, 16 * TiB);
    assert_int_equal(MC__X1_LEN_END, 16 * MiB);
    const mc__extent_t fit[] = {
        {0, 0},
        {0, 4},
        {MC__X1_OFF_END - 4, MC__X1_LEN_END - 4},
        {12345 * 4, 100},
        {MC__X1_OFF_END - 4, 4},
    };
    for (size_t i = 0; i < sizeof(fit) / sizeof(fit[0]); i++) {
        assert_true(mc__x1_fits(&fit[i]));
        mc__extent_t back = mc__x1_unpack(mc__x1_pack(&fit[i]));
        assert_int_equal(back.off, fit[i].off);
        assert_int_equal(back.len, fit[i].len);
    }
    const mc__extent_t nofit[] = {
        {MC__X1_OFF_END, 4},
        {0, MC__X1_LEN_END},
        {UINT64_MAX - 3, 4},
        {MC__HOLE, 4},
        {2, 4},
        {4, 6},
    };
    for (size_t i = 0; i < sizeof(nofit) / sizeof(nofit[0]); i++)
        assert_false(mc__x1_fits(&nofit[i]));
}

/* An object of one extent of 16 MiB (the first length past x1) takes an
 * array at once; one just under stays compact, and growing in place past
 * the length takes the array then, its one extent where it was; trimmed
 * below at its commit, it keeps the array (a version never goes back). */
static void test_extent_past_the_length(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = new_master_opts(64 * MiB, 0, 0);
    mc__version_t *v = NULL;

    assert_int_equal(mc__master_begin(m, "big", 3, NULL, now, &v), 0);
    assert_int_equal(mc__master_reserve(m, v, MC__X1_LEN_END, now), 0);
    assert_false(mc__vcompact(v));
    assert_int_equal(vrep(v, 0).n, 1);
    assert_int_equal(vrep(v, 0).ext[0].len, MC__X1_LEN_END);
    assert_int_equal(mc__vcap(v), MC__X1_LEN_END);
    assert_int_equal(mc__master_commit(m, v, MC__X1_LEN_END - 1000, 0, now), 0);
    assert_int_equal(mc__vcap(v), MC__X1_LEN_END - 960); /* to 64-byte units */
    assert_int_equal(layout_bytes(v), used(m));

    mc__version_t *w = NULL;
    assert_int_equal(mc__master_begin(m, "w", 1, NULL, now, &w), 0);
    assert_int_equal(mc__master_reserve(m, w, MC__X1_LEN_END - UNIT, now), 0);
    assert_true(in_x1(w));
    uint64_t off = vrep(w, 0).ext[0].off;
    assert_int_equal(mc__vcap(w), MC__X1_LEN_END - UNIT);
    assert_int_equal(mc__master_reserve(m, w, MC__X1_LEN_END + UNIT, now), 0);
    assert_false(mc__vcompact(w));
    assert_true(w->flags & MC__V_REP_OWNED);
    assert_int_equal(vrep(w, 0).n, 1); /* grown in place all the same */
    assert_int_equal(vrep(w, 0).ext[0].off, off);
    assert_int_equal(mc__vcap(w), MC__X1_LEN_END + UNIT);
    assert_int_equal(used(m), mc__vcap(v) + mc__vcap(w));
    assert_int_equal(mc__master_commit(m, w, 100, 0, now), 0);
    assert_false(mc__vcompact(w));
    assert_int_equal(mc__vcap(w), 100); /* to 4-byte units, a small one */
    assert_int_equal(vrep(w, 0).ext[0].len, 100);
    assert_int_equal(used(m), mc__vcap(v) + 100);

    /* A compact one that grows past the length, then fails to (no space):
     * its reservation is what it was. */
    mc__version_t *x = NULL;
    assert_int_equal(mc__master_begin(m, "x", 1, NULL, now, &x), 0);
    assert_int_equal(mc__master_reserve(m, x, 4 * MiB, now), 0);
    assert_true(in_x1(x));
    assert_int_equal(mc__master_reserve(m, x, 60 * MiB, now), -ENOSPC);
    assert_true(in_x1(x));
    assert_int_equal(mc__vcap(x), 4 * MiB);
    assert_int_equal(used(m), mc__vcap(v) + 100 + 4 * MiB);
    mc__master_abort(m, x);
    assert_int_equal(mc__master_remove(m, "big", 3, 0, now), 0);
    assert_int_equal(mc__master_remove(m, "w", 1, 0, now), 0);
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

/* Merges the records of m's published versions into m2 (same segments):
 * the same space in use, the same layouts. */
static void rebuild_same(mc__master_t *m, mc__master_t *m2)
{
    mc__index_iter_t it;
    void *val;
    mc__index_seek(m->ix, &it, NULL, 0, 0);
    while (mc__index_next(&it, NULL, NULL, &val)) {
        mc__version_t *v = val;
        for (uint32_t r = 0; r < v->nrep; r++) {
            mc__rec_t rec;
            mc__extent_t one;
            uint32_t seg = mc__vrep_seg(v, r);
            const mc__extent_t *e = mc__master_record(m, v, seg, &rec, &one);
            assert_int_equal(mc__master_merge(m2, seg, &rec, e, T0), 1);
        }
    }
    mc__index_seek(m->ix, &it, NULL, 0, 0);
    while (mc__index_next(&it, NULL, NULL, &val)) {
        mc__version_t *v = val, *w = find(m2, mc__vkey(v));
        assert_non_null(w);
        assert_int_equal(mc__vcap(w), mc__vcap(v));
        assert_int_equal(mc__vcompact(w), mc__vcompact(v) && v->nrep == 1);
        assert_int_equal(layout_bytes(w), layout_bytes(v));
        assert_int_equal(vrep(w, 0).ext[0].off, vrep(v, 0).ext[0].off);
    }
    assert_int_equal(used(m2), used(m));
}

/* Objects at segment offsets past 16 TiB take an array, those below stay
 * compact; either way a second replica (a repair's) comes and goes, a
 * replica is taken out and given back (a move), and records rebuild them
 * as they were. */
static void test_offset_past_the_range(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = new_master_opts(32 * TiB, 0, 0);
    mc__version_t *fill = NULL;

    /* Everything below 16 TiB but one unit taken by a pending version. */
    assert_int_equal(mc__master_begin(m, "fill", 4, NULL, now, &fill), 0);
    assert_int_equal(mc__master_reserve(m, fill, MC__X1_OFF_END - UNIT, now), 0);
    assert_false(mc__vcompact(fill)); /* far past the length */
    assert_int_equal(vrep(fill, 0).ext[0].off, 0);
    mc__version_t *lo = put(m, "lo", 100, now), *hi = put(m, "hi", 100, now);
    assert_true(in_x1(lo));
    assert_int_equal(vrep(lo, 0).ext[0].off, MC__X1_OFF_END - UNIT);
    assert_false(mc__vcompact(hi));
    assert_int_equal(vrep(hi, 0).ext[0].off, MC__X1_OFF_END - UNIT + 100);
    assert_int_equal(vrep(hi, 0).n, 1);
    assert_int_equal(mc__vcap(hi), 100);
    mc_stat_t st;
    mc__version_stat(m, hi, now, &st);
    assert_int_equal(st.size, 100);
    assert_int_equal(st.alloc, 100);
    mc__master_abort(m, fill);
    assert_int_equal(used(m), 200);

    /* Records: the same layouts in a new master. */
    mc__master_t *m2 = new_master_opts(32 * TiB, 0, 0);
    rebuild_same(m, m2);
    mc__master_free(m2);

    /* A second replica on another segment, then the first one's segment
     * goes (each keeps its capacity and its one replica). */
    assert_int_equal(mc__master_add_segment(m, 1, 32 * TiB), 0);
    mc__version_t *vs[] = {lo, hi};
    for (int i = 0; i < 2; i++) {
        mc__replica_t r;
        mc__replica_t r0 = vrep(vs[i], 0);
        assert_int_equal(mc__master_replica_alloc_like(m, 1, &r0, &r), 0);
        assert_int_equal(mc__master_replica_attach(vs[i], &r), 0);
        assert_false(mc__vcompact(vs[i]));
        assert_int_equal(vs[i]->nrep, 2);
        assert_int_equal(mc__vcap(vs[i]), 100);
        assert_int_equal(vrep(vs[i], 0).ext[0].off, MC__X1_OFF_END - UNIT + 100 * (uint64_t)i);
    }
    assert_int_equal(used(m), 400);
    m2 = new_master_opts(32 * TiB, 0, 0);
    assert_int_equal(mc__master_add_segment(m2, 1, 32 * TiB), 0);
    rebuild_same(m, m2);
    mc__master_free(m2);
    assert_int_equal(mc__master_drop_segment(m, 0, now), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(vs[i]->nrep, 1);
        assert_int_equal(mc__vrep_seg(vs[i], 0), 1);
        assert_int_equal(mc__vcap(vs[i]), 100);
        assert_int_equal(layout_bytes(vs[i]), 100);
    }
    assert_int_equal(used(m), 200);
    mc__master_free(m);
}

/* A move of a compact version's replica: taken out, its extent goes
 * along in an array of its own (past the range too); given back, an
 * array. Its capacity stays meanwhile. */
static void test_take_and_give_back(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = new_master_opts(32 * TiB, 0, 0);
    mc__version_t *v = put(m, "v", 100, now);
    assert_true(in_x1(v));
    uint64_t off = vrep(v, 0).ext[0].off;
    mc__replica_t r;
    assert_int_equal(mc__version_take_replica(v, 0, &r), 1);
    assert_true(mc__vcompact(v));
    assert_int_equal(v->nrep, 0);
    assert_int_equal(mc__vcap(v), 100);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.ext[0].off, off);
    assert_int_equal(r.ext[0].len, 100);
    assert_int_equal(mc__master_replica_attach(v, &r), 0);
    assert_false(mc__vcompact(v));
    assert_int_equal(mc__vcap(v), 100);
    assert_int_equal(vrep(v, 0).ext[0].off, off);
    assert_int_equal(used(m), 100);
    assert_int_equal(mc__master_remove(m, "v", 1, 0, now), 0);
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

/* A sparse file: a hole never sits in x1 (a layout with one takes an
 * array), a punch in a compact one's extent makes three, and the space
 * comes back. */
static void test_holes_take_an_array(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = new_master_opts(SEG_SIZE, 0, 0);
    mc__version_t *v = NULL;

    assert_int_equal(mc__master_begin(m, "p", 1, NULL, now, &v), 0);
    assert_int_equal(mc__master_reserve(m, v, 3 * UNIT, now), 0);
    assert_true(in_x1(v));
    assert_int_equal(mc__master_reserve_range(m, v, UNIT, UNIT, 1, now), 0);
    assert_false(mc__vcompact(v));
    assert_int_equal(vrep(v, 0).n, 3);
    assert_int_equal(vrep(v, 0).ext[1].off, MC__HOLE);
    assert_int_equal(mc__vcap(v), 3 * UNIT);
    assert_int_equal(used(m), 2 * UNIT);
    assert_int_equal(mc__master_commit(m, v, 3 * UNIT, 0, now), 0);

    mc__version_t *h = NULL; /* a hole first: never compact with it */
    assert_int_equal(mc__master_begin(m, "h", 1, NULL, now, &h), 0);
    assert_int_equal(mc__master_reserve_range(m, h, 4 * UNIT, 1, 0, now), 0);
    assert_false(mc__vcompact(h));
    assert_int_equal(vrep(h, 0).ext[0].off, MC__HOLE);
    assert_int_equal(mc__vcap(h), 5 * UNIT);
    assert_int_equal(mc__master_commit(m, h, 4 * UNIT + 1, 0, now), 0);
    assert_int_equal(used(m), 3 * UNIT);
    mc__master_t *m2 = new_master_opts(SEG_SIZE, 0, 0);
    rebuild_same(m, m2);
    mc__master_free(m2);
    assert_int_equal(mc__master_remove(m, "p", 1, 0, now), 0);
    assert_int_equal(mc__master_remove(m, "h", 1, 0, now), 0);
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_boundaries),       cmocka_unit_test(test_extent_past_the_length),
        cmocka_unit_test(test_offset_past_the_range), cmocka_unit_test(test_take_and_give_back),
        cmocka_unit_test(test_holes_take_an_array),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
