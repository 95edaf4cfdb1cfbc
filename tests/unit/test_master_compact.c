/*
 * test_master_compact.c - the master's compact versions: eviction by
 * sampled access clocks in an index past MC__EVICT_EXACT keys (the oldest
 * of a sample goes; never a pinned, open, leased or pending version), the
 * array of retired versions waiting for handles and leases, a version's
 * key and replicas read through mc__vkey() / mc__vrep_get() once they moved out
 * of its own allocation (a rename, a grown replica array), its ctime kept
 * apart from its mtime only when they differ, its lease in 32 bits from a
 * base that moves, replicas' extent arrays with no count of their
 * room, and a version's capacity kept as the length of a compact
 * version's one extent (packed in x1) through every change of its layout,
 * and its key in the tail of its fields.
 */
#include "master_fixture.h"

#define NKEYS 3000 /* past MC__EVICT_EXACT: eviction samples */
#define SEG_BIG (NKEYS * UNIT + 16 * UNIT)

static void key_of(char *buf, size_t len, int i)
{
    snprintf(buf, len, "key-%05d", i);
}

/* A master holding NKEYS one-unit objects put in order (key 0 the least
 * recently used). */
static mc__master_t *filled(uint64_t now)
{
    mc__master_t *m = new_master_opts(SEG_BIG, 0, 0);
    char k[32];

    for (int i = 0; i < NKEYS; i++) {
        key_of(k, sizeof(k), i);
        put(m, k, UNIT, now);
    }
    assert_true(NKEYS > MC__EVICT_EXACT);
    return m;
}

static int present_key(mc__master_t *m, int i)
{
    char k[32];

    key_of(k, sizeof(k), i);
    return find(m, k) != NULL;
}

static void test_sampled_eviction_takes_old_ones(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = filled(now);
    char k[32];

    /* The later half is used again: the first half is the old one. */
    for (int i = NKEYS / 2; i < NKEYS; i++) {
        key_of(k, sizeof(k), i);
        mc__master_touch(m, find(m, k), now, 0);
    }
    /* 200 go: with a sample of 16, the oldest of each is all but surely
     * from the old half (the master's random numbers are fixed: always). */
    assert_int_equal(mc__master_evict(m, used(m) - 200 * UNIT, now), 200);
    assert_int_equal(used(m), (uint64_t)(NKEYS - 200) * UNIT);
    for (int i = NKEYS / 2; i < NKEYS; i++)
        assert_true(present_key(m, i));
    mc__master_free(m);
}

static void test_sampled_eviction_skips_held_ones(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = filled(now);
    char k[32];
    mc__version_t *open = NULL, *pending = NULL;

    /* Every object is held some way but three: 100 (leased), 2000 (open,
     * the oldest), the rest pinned hard; and a pending version. */
    for (int i = 0; i < NKEYS; i++) {
        key_of(k, sizeof(k), i);
        mc__version_t *v = find(m, k);
        if (i == 100)
            mc__master_touch(m, v, now, 1);
        else if (i == 0)
            assert_int_equal(mc__master_ref(m, open = v), 0);
        else if (i != 7 && i != 1500 && i != 2999)
            v->pin = MC_PIN_HARD;
    }
    assert_int_equal(mc__master_begin(m, "pending", 7, NULL, now, &pending), 0);
    assert_int_equal(mc__master_reserve(m, pending, UNIT, now), 0);
    /* Samples find almost nothing to evict: the walk of all finds the three
     * (two of them first, then the third), then nothing more. */
    assert_int_equal(mc__master_evict(m, used(m) - 2 * UNIT, now), 2);
    assert_int_equal(present_key(m, 7) + present_key(m, 1500) + present_key(m, 2999), 1);
    assert_int_equal(mc__master_evict(m, 0, now), 1);
    assert_false(present_key(m, 7));
    assert_false(present_key(m, 1500));
    assert_false(present_key(m, 2999));
    assert_true(present_key(m, 0));
    assert_true(present_key(m, 100));
    assert_int_equal(used(m), (uint64_t)(NKEYS - 3 + 1) * UNIT);
    /* The lease ends: it goes too; the open one stays open. */
    assert_int_equal(mc__master_evict(m, 0, now + LEASE_MS), 1);
    assert_false(present_key(m, 100));
    assert_true(present_key(m, 0));
    mc__master_abort(m, pending);
    mc__master_unref(m, open, now + LEASE_MS);
    mc__master_free(m);
}

static void test_sampled_eviction_order_of_sample(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = filled(now);

    /* Evicting one at a time from a store whose order is the put order:
     * what goes is always older than most (one of a sample of 16: its age
     * ranks in the oldest sixth but for bad luck; allow the oldest half). */
    for (int n = 0; n < 50; n++) {
        uint64_t before = used(m);
        assert_int_equal(mc__master_evict(m, before - UNIT, now), 1);
    }
    int gone_late = 0;
    for (int i = NKEYS / 2; i < NKEYS; i++)
        gone_late += !present_key(m, i);
    assert_int_equal(gone_late, 0);
    mc__master_free(m);
}

/* Puts key i, opens it (leased too with lease) and removes it: it waits
 * in the retired array. */
static mc__version_t *put_open_removed(mc__master_t *m, int i, int lease, uint64_t now)
{
    char k[32];

    key_of(k, sizeof(k), i);
    mc__version_t *v = put(m, k, UNIT, now);
    assert_int_equal(mc__master_ref(m, v), 0);
    if (lease)
        mc__master_touch(m, v, now, 1);
    assert_int_equal(mc__master_remove(m, k, strlen(k), MC_REMOVE_FORCE, now), 0);
    return v;
}

static void test_retired_array(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = new_master_opts(SEG_BIG, 0, 0);
    mc__version_t *v[300];

    /* 300 open versions removed, every third leased too. */
    for (int i = 0; i < 300; i++)
        v[i] = put_open_removed(m, i, i % 3 == 0, now);
    assert_int_equal(objects(m), 0);
    assert_int_equal(used(m), 300 * UNIT);
    /* Handles close in another order: the unleased go at once. */
    for (int i = 299; i >= 0; i -= 2)
        mc__master_unref(m, v[i], now);
    for (int i = 0; i < 300; i += 2)
        mc__master_unref(m, v[i], now);
    assert_int_equal(used(m), 100 * UNIT); /* the leased ones */
    mc__master_sweep(m, now + LEASE_MS - 1);
    assert_int_equal(used(m), 100 * UNIT);
    mc__master_sweep(m, now + LEASE_MS);
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

static void test_retired_lose_dropped_segment(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = new_master_opts(SEG_BIG, 0, 0);
    mc__version_t *v[20];
    char k[32];

    for (int i = 0; i < 10; i++)
        v[i] = put_open_removed(m, i, 0, now);
    for (int i = 10; i < 20; i++) {
        key_of(k, sizeof(k), i);
        v[i] = put(m, k, UNIT, now);
    }
    /* The segment goes: the ten published are lost, the ten retired lose
     * their replica and are freed as their handles close. */
    assert_int_equal(mc__master_drop_segment(m, 0, now), 10);
    assert_int_equal(objects(m), 0);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(v[i]->nrep, 0);
        mc__master_unref(m, v[i], now);
    }
    assert_int_equal(mc__master_add_segment(m, 0, SEG_BIG), 0);
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

static void test_key_and_replicas_moved_out(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = new_master_opts(SEG_BIG, 0, 0);
    assert_int_equal(mc__master_add_segment(m, 1, SEG_BIG), 0);
    assert_int_equal(mc__master_add_segment(m, 2, SEG_BIG), 0);
    mc_put_opts_t one = {.replica_num = 1};
    mc__version_t *v = NULL;

    assert_int_equal(mc__master_begin(m, "a/file", 6, &one, now, &v), 0);
    assert_int_equal(mc__master_reserve(m, v, UNIT, now), 0);
    assert_int_equal(mc__master_commit(m, v, UNIT, 0, now), 0);
    assert_false(v->has_more);
    assert_string_equal(mc__vkey(v), "a/file");
    uint32_t seg0 = mc__vrep_seg(v, 0);
    uint64_t off0 = vrep(v, 0).ext[0].off;

    /* A second replica outgrows the room it was made with: the array moves
     * to the rare fields, the key stays where it was and reads the same. */
    mc__replica_t r;
    uint32_t other = seg0 == 1 ? 2 : 1;
    assert_int_equal(mc__master_replica_alloc(m, other, UNIT, &r), 0);
    assert_int_equal(mc__master_replica_attach(v, &r), 0);
    assert_true(v->flags & MC__V_REP_OWNED);
    assert_int_equal(v->nrep, 2);
    assert_int_equal(mc__vrep_seg(v, 0), seg0);
    assert_int_equal(vrep(v, 0).ext[0].off, off0);
    assert_int_equal(mc__vrep_seg(v, 1), other);
    assert_string_equal(mc__vkey(v), "a/file");
    assert_ptr_equal(find(m, "a/file"), v);

    /* A rename moves the key out too; twice, the first copy freed. */
    assert_int_equal(mc__master_rename(m, "a/file", 6, "b/longer-name", 13, 0, now), 0);
    assert_true(v->flags & MC__V_KEY_OWNED);
    assert_string_equal(mc__vkey(v), "b/longer-name");
    assert_int_equal(mc__master_rename(m, "b/longer-name", 13, "c", 1, 0, now), 0);
    assert_string_equal(mc__vkey(v), "c");
    assert_ptr_equal(find(m, "c"), v);
    assert_null(find(m, "a/file"));
    assert_int_equal(v->nrep, 2);
    assert_int_equal(mc__vrep_seg(v, 1), other);

    /* The rare fields the version had before keep their values. */
    assert_int_equal(mc__xattr_set(v, "user.x", 6, "1", 1, 0), 0);
    const char *val;
    uint32_t vlen;
    assert_int_equal(mc__xattr_get(v, "user.x", 6, &val, &vlen), 0);
    assert_int_equal(vlen, 1);
    assert_string_equal(mc__vkey(v), "c");
    assert_int_equal(used(m), 2 * UNIT);
    assert_int_equal(mc__master_remove(m, "c", 1, 0, now), 0);
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

static int64_t ctime_of(mc__master_t *m, mc__version_t *v)
{
    mc_stat_t st;

    mc__version_stat(m, v, T0, &st);
    assert_int_equal(st.ctime_ns, mc__vctime(v));
    return st.ctime_ns;
}

static void test_ctime_apart_from_mtime(void **state)
{
    (void)state;
    mc__master_t *m = new_master();
    mc__version_t *v = put(m, "d/x", UNIT, T0), *out = NULL;
    mc__version_t *dir = put(m, "d/", 0, T0);
    mc_meta_t meta = {.what = MC_META_MODE, .mode = 0600};

    /* Published: the ctime is the mtime, no rare fields. */
    assert_false(v->has_more);
    assert_int_equal(ctime_of(m, v), v->mtime_ns);
    /* A chmod: a ctime of its own, the mtime stays. */
    int64_t mtime = v->mtime_ns;
    assert_int_equal(mc__master_set_meta(m, "d/x", 3, &meta, 500, &out), 0);
    assert_ptr_equal(out, v);
    assert_true(v->flags & MC__V_CTIME);
    assert_int_equal(ctime_of(m, v), 500);
    assert_int_equal(v->mtime_ns, mtime);
    /* Its record carries both. */
    mc__rec_t rec;
    memset(&rec, 0, sizeof(rec));
    (void)mc__master_record(m, v, mc__vrep_seg(v, 0), &rec, &(mc__extent_t){0});
    assert_int_equal(rec.ctime_ns, 500);
    assert_int_equal(rec.mtime_ns, mtime);
    /* A new mtime at the same time: one again. */
    meta.what = MC_META_MTIME;
    meta.mtime_ns = 700;
    assert_int_equal(mc__master_set_meta(m, "d/x", 3, &meta, 700, &out), 0);
    assert_false(v->flags & MC__V_CTIME);
    assert_int_equal(ctime_of(m, v), 700);
    assert_int_equal(v->mtime_ns, 700);
    /* An older mtime (touch -d), changed later. */
    meta.mtime_ns = 100;
    assert_int_equal(mc__master_set_meta(m, "d/x", 3, &meta, 800, &out), 0);
    assert_int_equal(v->mtime_ns, 100);
    assert_int_equal(ctime_of(m, v), 800);
    mc__master_changed(m, v, 900);
    assert_int_equal(ctime_of(m, v), 900);
    /* A directory's name changes: its mtime and ctime move as one. */
    mc__master_dir_changed(m, "d/y", 3, 1000);
    assert_int_equal(dir->mtime_ns, 1000);
    assert_int_equal(ctime_of(m, dir), 1000);
    assert_false(dir->flags & MC__V_CTIME);
    mc__master_free(m);
}

static void test_lease_base_moves(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = new_master();
    mc__version_t *a = put(m, "a", UNIT, now), *b = put(m, "b", UNIT, now);
    mc__version_t *c = put(m, "c", UNIT, now);

    mc__master_touch(m, a, now, 1);
    assert_int_equal(mc__version_lease(m, a), T0 + LEASE_MS);
    /* Just short of 2^32 ms on: c leased, opened and removed (retired with
     * a lease running). */
    uint64_t later = T0 + (1ULL << 32) - 10;
    mc__master_touch(m, c, later, 1);
    assert_int_equal(mc__master_ref(m, c), 0);
    assert_int_equal(mc__master_remove(m, "c", 1, MC_REMOVE_FORCE, later), 0);
    mc__master_unref(m, c, later);
    assert_int_equal(used(m), 3 * UNIT);
    /* A lease past 2^32 ms from the base moves the base: every lease is
     * the same time as before, a lease long over none. */
    uint64_t t = later + 20;
    mc__master_touch(m, b, t, 1);
    assert_int_equal(mc__version_lease(m, b), t + LEASE_MS);
    assert_int_equal(mc__version_lease(m, c), later + LEASE_MS);
    assert_int_equal(mc__version_lease(m, a), 0);
    assert_int_equal(a->lease, 0);
    assert_int_equal(mc__master_remove(m, "a", 1, 0, t), 0);
    assert_int_equal(mc__master_remove(m, "b", 1, 0, t), -EBUSY);
    mc__master_sweep(m, later + LEASE_MS - 1);
    assert_int_equal(used(m), 2 * UNIT);
    mc__master_sweep(m, later + LEASE_MS);
    assert_int_equal(used(m), UNIT);
    assert_int_equal(mc__master_remove(m, "b", 1, 0, t + LEASE_MS), 0);
    mc__master_free(m);
}

static void test_replica_room_grows(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = new_master_opts(64 * UNIT, 0, 0);
    char k[32];

    /* 64 one-unit objects, every other removed: 32 holes of one unit. */
    for (int i = 0; i < 64; i++) {
        key_of(k, sizeof(k), i);
        put(m, k, UNIT, now);
    }
    for (int i = 0; i < 64; i += 2) {
        key_of(k, sizeof(k), i);
        assert_int_equal(mc__master_remove(m, k, strlen(k), 0, now), 0);
    }
    /* One object over 1, 2, 3 ... 32 of them: its own extent array grows
     * from the version's x1 through rooms of 2, 4 ... 32. */
    mc__version_t *v = NULL;
    assert_int_equal(mc__master_begin(m, "big", 3, NULL, now, &v), 0);
    for (uint64_t n = 1; n <= 32; n++) {
        assert_int_equal(mc__master_reserve(m, v, n * UNIT, now), 0);
        assert_int_equal(vrep(v, 0).n, n);
        if (n == 1)
            assert_true(in_x1(v));
        else
            assert_false(in_x1(v));
    }
    assert_int_equal(used(m), 64 * UNIT);
    /* Committed smaller: the tail goes back, the array stays its own. */
    assert_int_equal(mc__master_commit(m, v, 5 * UNIT, 0, now), 0);
    assert_int_equal(vrep(v, 0).n, 5);
    assert_int_equal(used(m), 37 * UNIT);
    /* Taken out (a repair's move), then given back: a replica of its own. */
    mc__replica_t r;
    uint32_t seg = mc__vrep_seg(v, 0);
    assert_int_equal(mc__version_take_replica(v, seg, &r), 1);
    assert_int_equal(v->nrep, 0);
    assert_int_equal(r.n, 5);
    assert_int_equal(mc__master_replica_attach(v, &r), 0);
    assert_int_equal(vrep(v, 0).n, 5);
    assert_int_equal(mc__master_remove(m, "big", 3, 0, now), 0);
    assert_int_equal(used(m), 32 * UNIT);

    /* A one-extent replica taken from x1 takes a copy of its own. */
    v = put(m, "one", UNIT, now);
    assert_true(in_x1(v));
    assert_int_equal(mc__version_take_replica(v, seg, &r), 1);
    assert_non_null(r.ext);
    assert_int_equal(r.n, 1);
    mc__master_replica_release(m, &r);
    assert_null(r.ext);
    assert_int_equal(used(m), 32 * UNIT);
    mc__master_free(m);
}

/* The layout of v agrees with its capacity: every replica's extents
 * cover it (a repair's replica may hold a unit's rounding more), and a
 * compact one's extent in x1 is of that length. */
static void assert_layout(const mc__version_t *v)
{
    for (uint32_t r = 0; r < v->nrep; r++) {
        const mc__replica_t r1 = vrep(v, r), *rep = &r1;
        uint64_t t = 0;
        for (uint32_t i = 0; i < rep->n; i++)
            t += rep->ext[i].len;
        assert_true(t >= mc__vcap(v) && t < mc__vcap(v) + UNIT);
        if (mc__vcompact(v)) {
            assert_true(r == 0 && rep->n <= 1);
            assert_int_equal(rep->n, v->n1);
        }
        if (in_x1(v))
            assert_int_equal(t, mc__vcap(v));
    }
}

/* A one-extent object's capacity is its extent's length: it grows in
 * place with it, stays when the object grows a second extent (the first
 * one kept where it was), and shrinks with it at the commit. */
static void test_capacity_is_the_one_extent_length(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = new_master_opts(64 * UNIT, 0, 0);
    mc__version_t *v = NULL;

    assert_int_equal(mc__master_begin(m, "a", 1, NULL, now, &v), 0);
    assert_int_equal(mc__vcap(v), 0);
    assert_int_equal(mc__master_reserve(m, v, UNIT, now), 0);
    assert_true(in_x1(v));
    assert_int_equal(mc__vcap(v), UNIT);
    uint64_t off = vrep(v, 0).ext[0].off;
    /* Something else takes space: the next growth is (most likely) a
     * second extent, the first one copied out where it was; if it came
     * right after the first, one extent, grown in place. */
    (void)put(m, "b", UNIT, now);
    assert_int_equal(mc__master_reserve(m, v, 5 * UNIT, now), 0);
    assert_int_equal(mc__vcap(v), 5 * UNIT);
    assert_int_equal(vrep(v, 0).ext[0].off, off);
    if (vrep(v, 0).n == 1) {
        assert_true(in_x1(v));
    } else {
        assert_false(in_x1(v));
        assert_int_equal(vrep(v, 0).ext[0].len, UNIT);
    }
    assert_layout(v);
    /* Committed with 100 bytes: the tail goes back (to 4-byte units). */
    assert_int_equal(mc__master_commit(m, v, 100, 0, now), 0);
    assert_int_equal(mc__vcap(v), 100);
    assert_layout(v);
    assert_int_equal(used(m), UNIT + 100);

    /* A small one trimmed to 4-byte units at its commit, in x1; renamed,
     * it keeps its extent and capacity. */
    mc__version_t *c = put(m, "c", 100, now);
    assert_true(in_x1(c));
    assert_int_equal(mc__vcap(c), 100);
    assert_int_equal(vrep(c, 0).ext[0].len, 100);
    uint64_t coff = vrep(c, 0).ext[0].off;
    assert_int_equal(mc__master_rename(m, "c", 1, "a-much-longer-name/c", 20, 0, now), 0);
    c = find(m, "a-much-longer-name/c");
    assert_non_null(c);
    assert_int_equal(mc__vcap(c), 100);
    assert_int_equal(vrep(c, 0).ext[0].off, coff);
    assert_layout(c);
    assert_int_equal(used(m), UNIT + 2 * 100);
    mc__master_free(m);
}

/* A master with a large segment 0 and a segment 1 of two units. */
static mc__master_t *two_segments(void)
{
    mc__master_t *m = new_master_opts(64 * UNIT, 0, 0);
    assert_int_equal(mc__master_add_segment(m, 1, 2 * UNIT), 0);
    return m;
}

/* A master with two segments of 64 units, 0 and 1. */
static mc__master_t *two_large_segments(void)
{
    mc__master_t *m = new_master_opts(64 * UNIT, 0, 0);
    assert_int_equal(mc__master_add_segment(m, 1, 64 * UNIT), 0);
    return m;
}

/* A growth that fails on a later replica gives the first one's growth
 * back: its one extent (and with it the capacity) is what it was, from
 * one unit or from none. */
static void test_capacity_after_a_failed_growth(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = two_segments();
    mc_put_opts_t po = {.replica_num = 2};
    mc__version_t *v = NULL;

    assert_int_equal(mc__master_begin(m, "a", 1, &po, now, &v), 0);
    assert_int_equal(v->nrep, 2);
    assert_int_equal(mc__vrep_seg(v, 0), 0); /* the most free first */
    assert_int_equal(mc__master_reserve(m, v, UNIT, now), 0);
    assert_int_equal(mc__master_reserve(m, v, 8 * UNIT, now), -ENOSPC);
    assert_int_equal(mc__vcap(v), UNIT);
    assert_int_equal(vrep(v, 0).n, 1);
    assert_layout(v);
    assert_int_equal(used(m), 2 * UNIT);
    mc__master_abort(m, v);
    assert_int_equal(used(m), 0);

    assert_int_equal(mc__master_begin(m, "b", 1, &po, now, &v), 0);
    assert_int_equal(mc__master_reserve(m, v, 8 * UNIT, now), -ENOSPC);
    assert_int_equal(mc__vcap(v), 0);
    assert_int_equal(vrep(v, 0).n, 0);
    assert_layout(v);
    assert_int_equal(used(m), 0);
    /* And grows later all the same. */
    assert_int_equal(mc__master_reserve(m, v, 2 * UNIT, now), 0);
    assert_int_equal(mc__vcap(v), 2 * UNIT);
    assert_layout(v);
    assert_int_equal(mc__master_commit(m, v, 2 * UNIT, 0, now), 0);
    assert_int_equal(used(m), 4 * UNIT);
    mc__master_free(m);
}

/* A one-extent object that gains a second replica (a repair's) takes a
 * replica array, its first replica's extent copied into an array of its
 * own, and keeps its capacity; losing the first replica, it keeps the
 * capacity, now the other replica's layout. */
static void test_capacity_with_a_second_replica(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = two_segments();
    mc__version_t *v = put(m, "a", 100, now);
    assert_int_equal(mc__vrep_seg(v, 0), 0);
    mc__replica_t r;
    assert_int_equal(mc__master_replica_alloc(m, 1, mc__vcap(v), &r), 0);
    assert_int_equal(mc__master_replica_attach(v, &r), 0);
    assert_int_equal(v->nrep, 2);
    assert_false(mc__vcompact(v));
    assert_int_equal(vrep(v, 0).n, 1);
    assert_int_equal(vrep(v, 0).ext[0].len, 100);
    assert_int_equal(mc__vcap(v), 100);
    assert_layout(v);
    assert_int_equal(mc__master_drop_segment(m, 0, now), 0);
    assert_ptr_equal(find(m, "a"), v);
    assert_int_equal(v->nrep, 1);
    assert_int_equal(mc__vrep_seg(v, 0), 1);
    assert_int_equal(mc__vcap(v), 100);
    assert_layout(v);
    mc_stat_t st;
    mc__version_stat(m, v, now, &st);
    assert_int_equal(st.size, 100);
    assert_int_equal(used(m), 2 * UNIT); /* the repair's replica, rounded */
    mc__master_free(m);
}

/* A version's key starts right after its fields (in the struct's tail
 * padding, when it has some); a compact one's allocation ends after the
 * key's NUL at the next 8 bytes, where another's replica array starts, for
 * keys of every length: nothing overlaps (and under ASan, where versions
 * are malloc'd to their size, nothing is read past the end). */
static void test_key_in_the_tail_of_the_fields(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = two_large_segments();
    mc_put_opts_t two = {.replica_num = 2};
    char k[48];

    for (size_t len = 1; len < sizeof(k); len++) {
        memset(k, 'a' + (int)(len % 26), len);
        k[len] = '\0';
        mc__version_t *v = put(m, k, 8, now);
        const char *key = mc__vkey(v);
        const char *end = (const char *)v + mc__vrep_offset(len);
        assert_true(mc__vcompact(v));
        assert_ptr_equal(key, (const char *)v + offsetof(mc__version_t, key));
        assert_true(sizeof(*v) - offsetof(mc__version_t, key) < 8);
        assert_memory_equal(key, k, len + 1);
        assert_true(end >= key + len + 1 && end < key + len + 1 + 8);
        assert_true(end >= (const char *)(v + 1));
        assert_int_equal((uintptr_t)end % 8, 0);
        assert_int_equal(v->nrep, 1);
        assert_true(in_x1(v));
        assert_int_equal(mc__vcap(v), 8);
        assert_int_equal(mc__master_remove(m, k, len, 0, now), 0);

        mc__version_t *w = NULL;
        assert_int_equal(mc__master_begin(m, k, len, &two, now, &w), 0);
        assert_int_equal(mc__master_reserve(m, w, 8, now), 0);
        assert_int_equal(mc__master_commit(m, w, 8, 0, now), 0);
        assert_false(mc__vcompact(w));
        assert_int_equal(w->repcap, 2);
        assert_ptr_equal((const char *)mc__vrep_array(w), (const char *)w + mc__vrep_offset(len));
        assert_false(in_x1(w)); /* every replica in an array: extents of its own */
        assert_int_equal(vrep(w, 0).n, 1);
        assert_int_equal(mc__vcap(w), 8);
        assert_int_not_equal(mc__vrep_seg(w, 0), mc__vrep_seg(w, 1));
        assert_int_equal(mc__master_remove(m, k, len, 0, now), 0);
    }
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

/* A version's own allocation (fields, key, one replica) takes 80 bytes
 * for the keys of 15 and 16 bytes the memory bench puts, and 72 for
 * Redis's names of up to 10 (key:999999): its one replica's segment and
 * extent are fields (no replica array: room for none), and the atime and
 * the pointer to the rare fields share one word, the atime moving into the
 * rare fields when they are made. The atime survives their making (a chmod
 * after a touch -a), reads back through stat and records, and changes
 * after. */
static void test_atime_shares_a_word_with_the_rare_fields(void **state)
{
    (void)state;
    mc__master_t *m = new_master();
    const char *keys[] = {"0123456789abcde", "0123456789abcdef", "key:999999", "k"};
    const size_t ends[] = {80, 80, 72, 64};
    for (int i = 0; i < 4; i++) {
        mc__version_t *v = put(m, keys[i], UNIT, T0);
        size_t end = mc__vrep_offset(v->klen) + sizeof(mc__replica_t) * v->repcap;
        assert_int_equal(v->repcap, 0);
        assert_int_equal(v->nrep, 1);
        assert_true(in_x1(v));
        assert_int_equal(end, ends[i]);
    }

    mc__version_t *v = put(m, "d/a", UNIT, T0), *out = NULL;
    mc_meta_t meta = {.what = MC_META_ATIME, .atime_ns = 123456789};
    assert_int_equal(mc__master_set_meta(m, "d/a", 3, &meta, 400, &out), 0);
    assert_ptr_equal(out, v);
    assert_int_equal(mc__vatime(v), 123456789);
    meta = (mc_meta_t){.what = MC_META_MODE, .mode = 0640};
    assert_int_equal(mc__master_set_meta(m, "d/a", 3, &meta, 500, &out), 0);
    assert_true(v->flags & MC__V_CTIME); /* the rare fields were made */
    mc_stat_t st;
    mc__version_stat(m, v, T0, &st);
    assert_int_equal(st.atime_ns, 123456789);
    assert_int_equal(st.ctime_ns, 500);
    assert_int_equal(st.mode & 07777, 0640);
    mc__rec_t rec;
    memset(&rec, 0, sizeof(rec));
    (void)mc__master_record(m, v, mc__vrep_seg(v, 0), &rec, &(mc__extent_t){0});
    assert_int_equal(rec.atime_ns, 123456789);
    assert_int_equal(rec.ctime_ns, 500);
    meta = (mc_meta_t){.what = MC_META_ATIME, .atime_ns = 987654321};
    assert_int_equal(mc__master_set_meta(m, "d/a", 3, &meta, 600, &out), 0);
    mc__version_stat(m, v, T0, &st);
    assert_int_equal(st.atime_ns, 987654321);
    assert_int_equal(st.ctime_ns, 600);
    mc__master_free(m);
}

/* A compact version (one replica, its segment in its fields) keeps at
 * most one extent, in x1, which grows in place when the space after it
 * is free: the layouts that need more (a second extent, a hole, a second
 * replica) take a replica array in its rare fields first, with room for
 * what it holds, holding what its fields held, and everything reads the
 * same through it; a replica taken out (a repair's move) leaves it with
 * none. Space is counted right throughout, and all of it comes back. */
static void test_compact_takes_an_array_when_it_must(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = two_large_segments();

    /* Grown into the free space right after its extent: still one extent,
     * in x1, compact. */
    mc__version_t *g = NULL;
    assert_int_equal(mc__master_begin(m, "g", 1, NULL, now, &g), 0);
    assert_int_equal(mc__master_reserve(m, g, UNIT, now), 0);
    uint64_t goff = vrep(g, 0).ext[0].off;
    assert_int_equal(mc__master_reserve(m, g, 3 * UNIT, now), 0);
    assert_true(mc__vcompact(g));
    assert_int_equal(vrep(g, 0).n, 1);
    assert_int_equal(vrep(g, 0).ext[0].off, goff);
    assert_int_equal(mc__vcap(g), 3 * UNIT);
    assert_int_equal(used(m), 3 * UNIT);
    assert_int_equal(mc__master_commit(m, g, 3 * UNIT - 5, 0, now), 0);
    assert_int_equal(mc__master_remove(m, "g", 1, 0, now), 0);
    assert_int_equal(used(m), 0);

    /* A second extent: "b" after "a" in the segment, so "a" cannot grow in
     * place. */
    mc__version_t *a = NULL;
    assert_int_equal(mc__master_begin(m, "a", 1, NULL, now, &a), 0);
    assert_true(mc__vcompact(a));
    assert_int_equal(a->nrep, 1);
    assert_int_equal(vrep(a, 0).n, 0);
    assert_null(vrep(a, 0).ext);
    uint32_t seg = mc__vrep_seg(a, 0);
    assert_int_equal(mc__master_reserve(m, a, UNIT, now), 0);
    assert_true(mc__vcompact(a));
    assert_false(a->has_more);
    assert_int_equal(vrep(a, 0).n, 1);
    assert_true(in_x1(a));
    uint64_t off = vrep(a, 0).ext[0].off;
    mc__version_t *b = put(m, "b", UNIT, now);
    assert_int_equal(mc__vrep_seg(b, 0), seg == 0 ? 1 : 0); /* the most free */
    mc__version_t *c = put(m, "c", UNIT, now);
    assert_int_equal(mc__vrep_seg(c, 0), seg);
    assert_int_equal(mc__master_reserve(m, a, 3 * UNIT, now), 0);
    assert_false(mc__vcompact(a));
    assert_true(a->flags & MC__V_REP_OWNED);
    assert_int_equal(a->repcap, 1); /* room for its one replica */
    assert_int_equal(a->nrep, 1);
    mc__replica_t r0 = vrep(a, 0);
    assert_int_equal(r0.seg, seg);
    assert_false(in_x1(a));
    assert_int_equal(r0.ext[0].off, off);
    assert_int_equal(mc__replica_bytes(&r0), 3 * UNIT);
    assert_int_equal(mc__master_commit(m, a, 3 * UNIT, 0, now), 0);
    assert_int_equal(used(m), 5 * UNIT);

    /* A hole: a one-extent compact version grown past a gap. */
    mc__version_t *h = put(m, "h", UNIT, now);
    assert_true(mc__vcompact(h));
    mc__version_t *h2 = NULL;
    assert_int_equal(mc__master_begin(m, "h", 1, NULL, now, &h2), 0);
    assert_true(mc__vcompact(h2));
    assert_int_equal(mc__master_reserve_range(m, h2, 8 * UNIT, UNIT, 0, now), 0);
    assert_false(mc__vcompact(h2));
    mc__replica_t hr = vrep(h2, 0);
    assert_int_equal(mc__vcap(h2), 9 * UNIT);
    assert_int_equal(mc__replica_bytes(&hr), UNIT); /* the rest a hole */
    assert_int_equal(hr.ext[0].off, MC__HOLE);
    assert_int_equal(mc__master_commit(m, h2, 9 * UNIT, 0, now), 0);
    assert_ptr_equal(find(m, "h"), h2);
    assert_int_equal(used(m), 6 * UNIT); /* "h"'s first version went */

    /* A second replica on the other segment; then the first one's segment
     * goes: the other one stays, as the only replica. */
    mc__replica_t r;
    uint32_t other = mc__vrep_seg(c, 0) == 0 ? 1 : 0;
    assert_int_equal(mc__master_replica_alloc(m, other, mc__vcap(c), &r), 0);
    assert_int_equal(mc__master_replica_attach(c, &r), 0);
    assert_false(mc__vcompact(c));
    assert_int_equal(c->repcap, 2);
    assert_int_equal(c->nrep, 2);
    assert_int_equal(mc__vrep_seg(c, 0), seg);
    assert_false(in_x1(c));
    assert_int_equal(vrep(c, 0).n, 1);
    assert_int_equal(mc__vrep_seg(c, 1), other);
    assert_true(mc__version_has_replica(c, other));

    /* Taken out of a compact version (a repair's move): none left, the
     * extent goes along as a copy; given back, an array. */
    mc__version_t *d = put(m, "d", UNIT, now);
    uint32_t dseg = mc__vrep_seg(d, 0);
    uint64_t doff = vrep(d, 0).ext[0].off;
    assert_int_equal(mc__version_take_replica(d, dseg, &r), 1);
    assert_int_equal(d->nrep, 0);
    assert_true(mc__vcompact(d));
    assert_int_equal(r.n, 1);
    assert_non_null(r.ext);
    assert_int_equal(r.ext[0].off, doff);
    assert_int_equal(mc__master_replica_attach(d, &r), 0);
    assert_false(mc__vcompact(d));
    assert_int_equal(d->nrep, 1);
    assert_int_equal(mc__vrep_seg(d, 0), dseg);
    assert_int_equal(vrep(d, 0).ext[0].off, doff);

    /* A pending compact version aborted, and everything removed: all the
     * space comes back. */
    mc__version_t *p = NULL;
    assert_int_equal(mc__master_begin(m, "p", 1, NULL, now, &p), 0);
    assert_int_equal(mc__master_reserve(m, p, 2 * UNIT, now), 0);
    assert_true(mc__vcompact(p));
    mc__master_abort(m, p);
    const char *keys[] = {"a", "b", "c", "d", "h"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        assert_int_equal(mc__master_remove(m, keys[i], 1, 0, now), 0);
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

/* Open handles are counted in the master's table of the versions that
 * have some, not in each version: many versions open twice (the table
 * grows), removed while open, stay until their last handle goes; those
 * not open are freed at once and never counted. */
static void test_open_handles_counted_apart(void **state)
{
    (void)state;
    enum { N = 300 };
    uint64_t now = T0;
    mc__master_t *m = new_master_opts(2 * N * UNIT, 0, 0);
    mc__version_t *v[N];
    char k[32];

    for (int i = 0; i < N; i++) {
        key_of(k, sizeof(k), i);
        v[i] = put(m, k, UNIT, now);
        assert_false(mc__vopen(v[i]));
        if (i % 2)
            continue;
        assert_int_equal(mc__master_ref(m, v[i]), 0);
        assert_int_equal(mc__master_ref(m, v[i]), 0);
        assert_true(mc__vopen(v[i]));
    }
    for (int i = 0; i < N; i++) {
        key_of(k, sizeof(k), i);
        /* An open one goes only by force. */
        int rc = mc__master_remove(m, k, strlen(k), 0, now);
        assert_int_equal(rc, i % 2 ? 0 : -EBUSY);
        if (rc < 0)
            assert_int_equal(mc__master_remove(m, k, strlen(k), MC_REMOVE_FORCE, now), 0);
    }
    assert_int_equal(used(m), N / 2 * UNIT); /* the open half */
    for (int i = 0; i < N; i += 2)
        mc__master_unref(m, v[i], now);
    assert_int_equal(used(m), N / 2 * UNIT);
    for (int i = 0; i < N; i += 2) {
        assert_true(mc__vopen(v[i]));
        mc__master_unref(m, v[i], now);
    }
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

static void owner_of(mc__master_t *m, const char *key, uint32_t *uid, uint32_t *gid)
{
    mc_stat_t st;
    mc__version_stat(m, find(m, key), T0, &st);
    *uid = st.uid;
    *gid = st.gid;
}

/* A version's owner and group are an index into the master's table of
 * the pairs: many versions over a few pairs (and root's, 0 and 0) read
 * back their own; none recorded reads as MC_OWNER_NONE; a chown of the
 * owner alone keeps the group; a new version that names none takes the
 * replaced one's; a record carries them. */
static void test_owners_by_index(void **state)
{
    (void)state;
    uint64_t now = T0;
    mc__master_t *m = new_master_opts(600 * UNIT, 0, 0);
    char k[32];
    uint32_t uid, gid;

    for (int i = 0; i < 500; i++) {
        key_of(k, sizeof(k), i);
        mc_put_opts_t po = {
            .flags = MC_PUT_OWNER, .uid = (uint32_t)(i % 37), .gid = (uint32_t)i % 3};
        mc__version_t *v = NULL;
        if (i % 5 == 0) /* none recorded */
            po.flags = 0;
        assert_int_equal(mc__master_begin(m, k, strlen(k), &po, now, &v), 0);
        assert_int_equal(mc__master_commit(m, v, 0, 0, now), 0);
    }
    for (int i = 0; i < 500; i++) {
        key_of(k, sizeof(k), i);
        owner_of(m, k, &uid, &gid);
        assert_int_equal(uid, i % 5 ? (uint32_t)(i % 37) : MC_OWNER_NONE);
        assert_int_equal(gid, i % 5 ? (uint32_t)i % 3 : MC_OWNER_NONE);
    }
    /* chown of the owner alone. */
    mc_meta_t meta = {.what = MC_META_UID, .uid = 4000};
    mc__version_t *out = NULL;
    key_of(k, sizeof(k), 7);
    assert_int_equal(mc__master_set_meta(m, k, strlen(k), &meta, 5, &out), 0);
    owner_of(m, k, &uid, &gid);
    assert_int_equal(uid, 4000);
    assert_int_equal(gid, 7 % 3);
    /* Replaced by a version that names none: it keeps them. */
    (void)put(m, k, UNIT, now);
    owner_of(m, k, &uid, &gid);
    assert_int_equal(uid, 4000);
    assert_int_equal(gid, 7 % 3);
    mc__rec_t rec;
    (void)mc__master_record(m, find(m, k), 0, &rec, &(mc__extent_t){0});
    assert_int_equal(rec.uid, 4000);
    assert_int_equal(rec.gid, 7 % 3);
    mc__master_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampled_eviction_takes_old_ones),
        cmocka_unit_test(test_sampled_eviction_skips_held_ones),
        cmocka_unit_test(test_sampled_eviction_order_of_sample),
        cmocka_unit_test(test_retired_array),
        cmocka_unit_test(test_retired_lose_dropped_segment),
        cmocka_unit_test(test_key_and_replicas_moved_out),
        cmocka_unit_test(test_ctime_apart_from_mtime),
        cmocka_unit_test(test_lease_base_moves),
        cmocka_unit_test(test_replica_room_grows),
        cmocka_unit_test(test_capacity_is_the_one_extent_length),
        cmocka_unit_test(test_capacity_after_a_failed_growth),
        cmocka_unit_test(test_capacity_with_a_second_replica),
        cmocka_unit_test(test_key_in_the_tail_of_the_fields),
        cmocka_unit_test(test_atime_shares_a_word_with_the_rare_fields),
        cmocka_unit_test(test_compact_takes_an_array_when_it_must),
        cmocka_unit_test(test_open_handles_counted_apart),
        cmocka_unit_test(test_owners_by_index),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
