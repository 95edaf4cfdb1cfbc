/*
 * test_records.c - unit tests of the records nodes keep and of the merge
 * rules of a master rebuilding its namespace from them
 * (core/src/master/records.c): the newest version of a key wins, replicas
 * of one version on several segments are one object, a version rebuilt and
 * then removed or replaced stays gone, space a record names must be free,
 * the latest record of a version gives its metadata, what this run put or
 * renamed to a key wins over any record (a clock set back gives it the
 * lower id; a rebuilt version renamed there may have it anyway), a record
 * whose id this run may have handed out is rebuilt under another, and ids
 * handed out after a merge are newer than every one reported.
 */
#include "master_fixture.h"

/* A master with nseg segments of SEG_SIZE bytes, ids 1 to nseg (none at 0:
 * master_fixture.h's new_master() has one there). */
static mc__master_t *new_master_segs(uint32_t nseg)
{
    mc__master_opts_t o = {.lease_ms = LEASE_MS, .align = UNIT};
    mc__master_t *m = NULL;
    assert_int_equal(mc__master_new(&m, &o), 0);
    for (uint32_t s = 1; s <= nseg; s++)
        assert_int_equal(mc__master_add_segment(m, s, SEG_SIZE), 0);
    return m;
}

/* A record (proto.h's mc__rec_t) and the extents merged with it. */
typedef struct trec {
    mc__rec_t r;
    const mc__extent_t *ext;
    mc__extent_t one; /* mc__master_record()'s copy of a compact one's extent */
} trec_t;

/* A record of key as version id (stamp), size bytes at offset off. */
static trec_t rec(const char *key, uint64_t id, uint64_t stamp, uint64_t size, mc__extent_t *ext)
{
    trec_t t = {.r = {.version = id,
                      .stamp = stamp,
                      .key = key,
                      .klen = (uint32_t)strlen(key),
                      .size = size,
                      .mtime_ns = 111,
                      .atime_ns = 222,
                      .ctime_ns = 333,
                      .mode = 0640,
                      .uid = 1000,
                      .gid = 100,
                      .want = 2,
                      .next = size ? 1 : 0},
                .ext = ext};
    return t;
}

static int merge(mc__master_t *m, uint32_t seg, const trec_t *t, uint64_t now)
{
    return mc__master_merge(m, seg, &t->r, t->ext, now);
}

static void test_a_record_brings_its_object_back(void **state)
{
    (void)state;
    mc__master_t *m = new_master_segs(1);
    mc__extent_t e = {4096, 128};
    trec_t r = rec("a/b", 77, 5, 100, &e);
    assert_int_equal(merge(m, 1, &r, T0), 1);
    mc__version_t *v = find(m, "a/b");
    assert_non_null(v);
    assert_int_equal(v->id, 77);
    assert_int_equal(mc__vsize(v), 100);
    assert_int_equal(v->mode, 0640);
    uint32_t uid, gid;
    mc__version_owner(m, v, &uid, &gid);
    assert_int_equal(uid, 1000);
    assert_int_equal(gid, 100);
    assert_int_equal(v->mtime_ns, 111);
    assert_int_equal(v->nrep, 1);
    assert_int_equal(mc__vrep_seg(v, 0), 1);
    assert_int_equal(vrep(v, 0).ext[0].off, 4096);
    /* Compact, as it was put: its one extent in x1, no array. */
    assert_true(mc__vcompact(v));
    assert_false(v->flags & MC__V_REP_OWNED);
    assert_true(in_x1(v));
    assert_int_equal(mc__vcap(v), 128);
    assert_int_equal(used(m), 128);
    /* A record of the same segment again (reported twice): nothing new. */
    assert_int_equal(merge(m, 1, &r, T0), 1);
    assert_int_equal(used(m), 128);
    /* New puts never land on its space, and get newer ids. */
    mc__version_t *n = NULL;
    assert_int_equal(mc__master_begin(m, "c", 1, NULL, T0, &n), 0);
    assert_int_equal(mc__master_reserve(m, n, SEG_SIZE - 128, T0), 0);
    for (uint32_t i = 0; i < vrep(n, 0).n; i++)
        assert_true(vrep(n, 0).ext[i].off + vrep(n, 0).ext[i].len <= 4096 ||
                    vrep(n, 0).ext[i].off >= 4096 + 128);
    assert_int_equal(mc__master_commit(m, n, 10, 0, T0), 0);
    assert_cmp(n->id, >, 77);
    mc__master_free(m);
}

/* A sparse file's record names its holes (MC__HOLE extents): the rebuilt
 * version has them, and takes the space of its bytes only. */
static void test_a_record_keeps_holes(void **state)
{
    (void)state;
    mc__master_t *m = new_master_segs(1);
    mc__version_t *v = NULL;
    assert_int_equal(mc__master_begin(m, "s", 1, NULL, T0, &v), 0);
    assert_int_equal(mc__master_reserve_range(m, v, 100 * SEG_SIZE, 10, 0, T0), 0);
    assert_int_equal(mc__master_reserve_range(m, v, 0, 10, 0, T0), 0);
    assert_int_equal(mc__master_commit(m, v, 100 * SEG_SIZE + 10, 0, T0), 0);
    trec_t r;
    r.ext = mc__master_record(m, v, 1, &r.r, &r.one);
    assert_int_equal(r.r.next, 3);
    assert_int_equal(r.ext[1].off, MC__HOLE);
    mc__master_t *m2 = new_master_segs(1);
    assert_int_equal(merge(m2, 1, &r, T0), 1);
    mc__version_t *w = find(m2, "s");
    assert_non_null(w);
    assert_int_equal(mc__vsize(w), 100 * SEG_SIZE + 10);
    assert_int_equal(vrep(w, 0).n, 3);
    assert_false(mc__vcompact(w)); /* three extents: an array */
    /* A record of one extent that is a hole (a file truncated up, never
     * written) takes no space and is no compact version's x1 either. */
    mc__extent_t hole = {MC__HOLE, 4 * UNIT};
    trec_t h = rec("h", 99, 5, 4 * UNIT, &hole);
    h.r.next = 1;
    assert_int_equal(merge(m2, 1, &h, T0), 1);
    mc__version_t *hv = find(m2, "h");
    assert_non_null(hv);
    assert_false(mc__vcompact(hv));
    assert_int_equal(vrep(hv, 0).ext[0].off, MC__HOLE);
    assert_int_equal(mc__vcap(hv), 4 * UNIT);
    assert_int_equal(vrep(w, 0).ext[1].off, MC__HOLE);
    assert_int_equal(vrep(w, 0).ext[1].len, 100 * SEG_SIZE - UNIT);
    assert_int_equal(used(m2), 2 * UNIT);
    assert_int_equal(used(m2), used(m));
    /* A sparse file of 2^48 bytes and more (its size is in the version's
     * rare fields, not its own 48 bits) comes back with its size. */
    uint64_t bsize = MC__VSIZE_BIG + 1 + 10;
    mc__extent_t big[2] = {{MC__HOLE, MC__VSIZE_BIG + 1}, {SEG_SIZE - UNIT, UNIT}};
    trec_t b = rec("b", 98, 5, bsize, big);
    b.r.next = 2;
    assert_int_equal(merge(m2, 1, &b, T0), 1);
    mc__version_t *bv = find(m2, "b");
    assert_non_null(bv);
    assert_int_equal(mc__vsize(bv), bsize);
    trec_t again;
    again.ext = mc__master_record(m2, bv, 1, &again.r, &again.one);
    assert_int_equal(again.r.size, bsize);
    mc__master_free(m2);
    mc__master_free(m);
}

static void test_replicas_of_one_version_are_one_object(void **state)
{
    (void)state;
    mc__master_t *m = new_master_segs(2);
    mc__extent_t e1 = {0, 128}, e2 = {1024, 128};
    trec_t r1 = rec("k", 9, 3, 128, &e1), r2 = rec("k", 9, 3, 128, &e2);
    assert_int_equal(merge(m, 1, &r1, T0), 1);
    assert_int_equal(merge(m, 2, &r2, T0), 1);
    mc__version_t *v = find(m, "k");
    assert_int_equal(v->nrep, 2);
    assert_int_equal(v->want, 2);
    mc_space_t sp;
    mc__master_space(m, &sp);
    assert_int_equal(sp.objects, 1);
    assert_int_equal(sp.used, 256);
    /* A replica whose bytes differ in length is not of this version. */
    mc__master_t *m2 = new_master_segs(2);
    mc__extent_t e3 = {0, 64};
    trec_t r3 = rec("k", 9, 3, 64, &e3);
    assert_int_equal(merge(m2, 1, &r1, T0), 1);
    assert_int_equal(merge(m2, 2, &r3, T0), 0);
    assert_int_equal(find(m2, "k")->nrep, 1);
    mc__master_free(m2);
    mc__master_free(m);
}

static void test_the_newest_version_of_a_key_wins(void **state)
{
    (void)state;
    mc__master_t *m = new_master_segs(2);
    mc__extent_t old = {0, 64}, new = {0, 128}, old2 = {512, 64};
    /* Older first, then newer (on another node): the newer replaces it and
     * frees its space. */
    trec_t ro = rec("k", 5, 1, 64, &old), rn = rec("k", 8, 2, 128, &new);
    assert_int_equal(merge(m, 1, &ro, T0), 1);
    assert_int_equal(merge(m, 2, &rn, T0), 1);
    assert_int_equal(find(m, "k")->id, 8);
    assert_int_equal(used(m), 128);
    /* Another replica of the older one comes late: refused. */
    trec_t ro2 = rec("k", 5, 1, 64, &old2);
    assert_int_equal(merge(m, 1, &ro2, T0), 0);
    assert_int_equal(find(m, "k")->id, 8);
    assert_int_equal(used(m), 128);
    mc__master_free(m);
}

static void test_removed_after_the_rebuild_stays_gone(void **state)
{
    (void)state;
    mc__master_t *m = new_master_segs(2);
    mc__extent_t e1 = {0, 64}, e2 = {0, 64};
    trec_t r1 = rec("k", 5, 1, 64, &e1), r2 = rec("k", 5, 1, 64, &e2);
    assert_int_equal(merge(m, 1, &r1, T0), 1);
    assert_int_equal(mc__master_remove(m, "k", 1, 0, T0), 0);
    mc__master_sweep(m, T0 + 1000);
    assert_int_equal(merge(m, 2, &r2, T0), 0);
    assert_null(find(m, "k"));
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

static void test_what_this_run_published_wins(void **state)
{
    (void)state;
    mc__master_opts_t o = {.lease_ms = 100, .align = UNIT, .first_id = 1000};
    mc__master_t *m = NULL;
    assert_int_equal(mc__master_new(&m, &o), 0);
    assert_int_equal(mc__master_add_segment(m, 1, SEG_SIZE), 0);
    mc__version_t *v = NULL;
    assert_int_equal(mc__master_begin(m, "k", 1, NULL, T0, &v), 0);
    assert_int_equal(mc__master_reserve(m, v, 64, T0), 0);
    assert_int_equal(mc__master_commit(m, v, 64, 0, T0), 0);
    assert_int_equal(v->id, 1000);
    mc__extent_t e = {4096, 64};
    trec_t r = rec("k", 999, 1, 64, &e);
    assert_int_equal(merge(m, 1, &r, T0), 0);
    assert_ptr_equal(find(m, "k"), v);
    assert_int_equal(used(m), 64);
    mc__master_free(m);
}

/* A master restarted with its clock behind the run before (first_id is the
 * wall clock in microseconds): a put acknowledged by this run has an id
 * below a surviving record's, yet it is newer: the record is refused. */
static void test_this_run_wins_over_a_record_with_a_higher_id(void **state)
{
    (void)state;
    mc__master_opts_t o = {.lease_ms = 100, .align = UNIT, .first_id = 1000};
    mc__master_t *m = NULL;
    assert_int_equal(mc__master_new(&m, &o), 0);
    assert_int_equal(mc__master_add_segment(m, 1, SEG_SIZE), 0);
    assert_int_equal(mc__master_add_segment(m, 2, SEG_SIZE), 0);
    mc__version_t *v = NULL;
    assert_int_equal(mc__master_begin(m, "k", 1, NULL, T0, &v), 0);
    assert_int_equal(mc__master_reserve(m, v, 64, T0), 0);
    assert_int_equal(mc__master_commit(m, v, 64, 0, T0), 0);
    assert_int_equal(v->id, 1000);
    mc__extent_t e = {4096, 64};
    trec_t r = rec("k", 5000, 1, 64, &e); /* the run before's, its clock ahead */
    assert_int_equal(merge(m, 2, &r, T0), 0);
    assert_ptr_equal(find(m, "k"), v);
    assert_int_equal(used(m), 64);
    /* Ids handed out from now on are still above every one reported. */
    mc__version_t *w = NULL;
    assert_int_equal(mc__master_begin(m, "j", 1, NULL, T0, &w), 0);
    assert_int_equal(mc__master_reserve(m, w, 64, T0), 0);
    assert_int_equal(mc__master_commit(m, w, 64, 0, T0), 0);
    assert_true(w->id > 5000);
    mc__master_free(m);
}

/* Records with ids at or above the first this run handed out (its clock
 * set back) may carry this run's ids: each is rebuilt under a new id (2),
 * yet the versions of a key keep the order of the ids reported. */
static mc__master_t *put_one_then_segs(uint32_t nseg)
{
    mc__master_opts_t o = {.lease_ms = 100, .align = UNIT, .first_id = 1000};
    mc__master_t *m = NULL;
    assert_int_equal(mc__master_new(&m, &o), 0);
    for (uint32_t s = 1; s <= nseg; s++)
        assert_int_equal(mc__master_add_segment(m, s, SEG_SIZE), 0);
    mc__version_t *v = NULL;
    assert_int_equal(mc__master_begin(m, "j", 1, NULL, T0, &v), 0);
    assert_int_equal(mc__master_reserve(m, v, 64, T0), 0);
    assert_int_equal(mc__master_commit(m, v, 64, 0, T0), 0);
    assert_int_equal(v->id, 1000);
    return m;
}

static void test_records_of_ids_this_run_handed_out_keep_their_order(void **state)
{
    (void)state;
    mc__extent_t e1 = {4096, 64}, e2 = {8192, 128}, e3 = {4096, 64};
    trec_t old = rec("k", 1000, 1, 64, &e1), newer = rec("k", 1700, 2, 128, &e2);
    trec_t old_too = rec("k", 1000, 1, 64, &e3); /* old's other replica */
    /* The older first: renamed, then replaced by the newer. */
    mc__master_t *m = put_one_then_segs(3);
    assert_int_equal(merge(m, 1, &old, T0), 2);
    mc__version_t *v = find(m, "k");
    assert_true(v->id > 1000);
    assert_int_equal(merge(m, 2, &newer, T0), 2);
    v = find(m, "k");
    assert_int_equal(mc__vsize(v), 128);
    assert_true(v->id > 1700);
    assert_int_equal(merge(m, 3, &old_too, T0), 0); /* replaced: it stays gone */
    assert_int_equal(mc__vsize(find(m, "k")), 128);
    assert_int_equal(find(m, "j")->id, 1000);
    mc__master_free(m);
    /* The newer first: the older is refused; a second replica of the newer
     * joins the version it was renamed to. */
    m = put_one_then_segs(3);
    assert_int_equal(merge(m, 2, &newer, T0), 2);
    uint64_t id = find(m, "k")->id;
    assert_int_equal(merge(m, 1, &old, T0), 0);
    e3 = (mc__extent_t){4096, 128};
    trec_t newer_too = rec("k", 1700, 2, 128, &e3);
    assert_int_equal(merge(m, 3, &newer_too, T0), 2);
    v = find(m, "k");
    assert_int_equal(v->id, id);
    assert_int_equal(v->nrep, 2);
    assert_int_equal(used(m), 64 + 128 + 128);
    mc__master_free(m);
}

static void no_notice(void *arg, mc__master_t *m, mc__version_t *v, int drop)
{
    (void)arg, (void)m, (void)v, (void)drop;
}

/* A late record of a rebuilt version names a key that this run put anew:
 * this run's version came after every record of a run before, whatever
 * the ids (its clock set back gave it a lower one): the late record's key
 * change must not retire it; the rebuilt version was replaced there, and
 * leaves. */
static void test_a_late_rename_never_retires_what_this_run_put(void **state)
{
    (void)state;
    mc__master_t *m = put_one_then_segs(2); /* "j", id 1000 */
    mc__version_t *b = NULL;
    assert_int_equal(mc__master_begin(m, "b", 1, NULL, T0, &b), 0);
    assert_int_equal(mc__master_reserve(m, b, 64, T0), 0);
    assert_int_equal(mc__master_commit(m, b, 64, 0, T0), 0);
    mc__extent_t e1 = {8192, 64}, e2 = {8192, 64};
    /* Node 1 missed the rename of a to b in the run before; node 2 did not. */
    trec_t stale = rec("a", 5000, 10, 64, &e1), fresh = rec("b", 5000, 11, 64, &e2);
    assert_int_equal(merge(m, 1, &stale, T0), 2);
    assert_int_equal(merge(m, 2, &fresh, T0), 2);
    assert_ptr_equal(find(m, "b"), b);
    assert_null(find(m, "a")); /* replaced at b: gone */
    mc__master_free(m);
}

/* A record merged after this run changed its version (a chmod, here) must
 * not undo the change, even with a higher stamp (a clock set back started
 * this run's stamps below those of the run before); among records, the
 * one with the latest stamp still gives the metadata, merged before or
 * after a flush of this run stamped the version. */
static void test_a_late_record_never_undoes_what_this_run_changed(void **state)
{
    (void)state;
    mc__master_t *m = new_master_segs(3);
    mc__master_notices(m, no_notice, NULL);
    mc__extent_t e1 = {0, 64}, e2 = {0, 64}, e3 = {0, 64};
    trec_t r1 = rec("k", 5, 4, 64, &e1), r2 = rec("k", 5, 5, 64, &e2), r3 = rec("k", 5, 7, 64, &e3);
    r3.r.mode = 0600;
    assert_int_equal(merge(m, 1, &r1, T0), 1);
    assert_int_equal(merge(m, 2, &r2, T0), 1);
    mc__master_flush(m); /* node 1's record is stale: stamped anew */
    assert_int_equal(merge(m, 3, &r3, T0), 1);
    assert_int_equal(find(m, "k")->mode, 0600);
    mc__master_free(m);

    m = new_master_segs(2);
    mc__master_notices(m, no_notice, NULL);
    assert_int_equal(merge(m, 1, &r1, T0), 1);
    mc_meta_t meta = {.what = MC_META_MODE, .mode = 0444};
    mc__version_t *v = NULL;
    assert_int_equal(mc__master_set_meta(m, "k", 1, &meta, T0, &v), 0);
    mc__master_flush(m);
    r3.r.stamp = 1ULL << 40; /* the run before's clock was ahead */
    assert_int_equal(merge(m, 2, &r3, T0), 1);
    assert_int_equal(find(m, "k")->mode, 0444);
    assert_int_equal(find(m, "k")->nrep, 2);
    mc__master_free(m);
}

/* A key this run renamed a rebuilt version to is this run's, as one it
 * put there: a late record of an older version of that key (its node away
 * while this run renamed j over k, so k was not seen) must not replace
 * it: j's bytes, renamed, would be lost, whatever the ids. */
static void test_a_late_record_never_replaces_what_this_run_renamed_there(void **state)
{
    (void)state;
    mc__master_t *m = new_master_segs(2);
    mc__master_notices(m, no_notice, NULL);
    mc__extent_t e1 = {0, 64}, e2 = {0, 128};
    trec_t j = rec("j", 10, 1, 64, &e1), k = rec("k", 20, 2, 128, &e2);
    assert_int_equal(merge(m, 1, &j, T0), 1);
    mc__version_t *v = find(m, "j");
    assert_int_equal(mc__master_rename(m, "j", 1, "k", 1, 0, T0), 0);
    assert_int_equal(merge(m, 2, &k, T0), 0);
    assert_ptr_equal(find(m, "k"), v);
    assert_int_equal(mc__vsize(find(m, "k")), 64);
    assert_null(find(m, "j"));
    assert_int_equal(used(m), 64);
    mc__master_free(m);

    /* The same through a directory's rename (d/j to e/j over an e/j unseen). */
    m = new_master_segs(2);
    mc__master_notices(m, no_notice, NULL);
    j = rec("d/j", 10, 1, 64, &e1), k = rec("e/j", 20, 2, 128, &e2);
    assert_int_equal(merge(m, 1, &j, T0), 1);
    v = find(m, "d/j");
    assert_int_equal(mc__master_rename(m, "d/", 2, "e/", 2, MC_RENAME_PREFIX, T0), 0);
    assert_int_equal(merge(m, 2, &k, T0), 0);
    assert_ptr_equal(find(m, "e/j"), v);
    assert_int_equal(used(m), 64);
    mc__master_free(m);
}

/* And a late record moving another rebuilt version to that key (its run
 * renamed x to k; the node that reported x missed it) finds k replaced by
 * this run: the version leaves, as one replaced at its newest key. */
static void test_a_late_rename_never_retires_what_this_run_renamed_there(void **state)
{
    (void)state;
    mc__master_t *m = new_master_segs(3);
    mc__master_notices(m, no_notice, NULL);
    mc__extent_t e1 = {0, 64}, e2 = {0, 128}, e3 = {0, 128};
    trec_t j = rec("j", 10, 1, 64, &e1), x = rec("x", 30, 5, 128, &e2);
    trec_t x_at_k = rec("k", 30, 6, 128, &e3);
    assert_int_equal(merge(m, 1, &j, T0), 1);
    assert_int_equal(merge(m, 2, &x, T0), 1);
    mc__version_t *v = find(m, "j");
    assert_int_equal(mc__master_rename(m, "j", 1, "k", 1, 0, T0), 0);
    assert_int_equal(merge(m, 3, &x_at_k, T0), 1);
    assert_ptr_equal(find(m, "k"), v);
    assert_null(find(m, "x")); /* replaced at k */
    mc__master_free(m);
}

static void test_space_that_is_not_free_is_refused(void **state)
{
    (void)state;
    mc__master_t *m = new_master_segs(1);
    mc__extent_t a = {0, 256}, b = {128, 256}, bad = {3, 64}, past = {SEG_SIZE, 64};
    trec_t ra = rec("a", 5, 1, 256, &a), rb = rec("b", 6, 1, 256, &b);
    assert_int_equal(merge(m, 1, &ra, T0), 1);
    assert_int_equal(merge(m, 1, &rb, T0), 0); /* overlaps a */
    trec_t rbad = rec("c", 7, 1, 64, &bad), rpast = rec("d", 8, 1, 64, &past);
    assert_int_equal(merge(m, 1, &rbad, T0), 0);
    assert_int_equal(merge(m, 1, &rpast, T0), 0);
    /* A size the space cannot hold, a bad type, an unknown segment. */
    mc__extent_t e = {1024, 64};
    trec_t big = rec("e", 9, 1, 65, &e), type = rec("f", 10, 1, 64, &e);
    type.r.type = MC_TYPE_MAX + 1;
    assert_int_equal(merge(m, 1, &big, T0), 0);
    assert_int_equal(merge(m, 1, &type, T0), -EINVAL);
    assert_int_equal(merge(m, 9, &ra, T0), 0);
    assert_int_equal(used(m), 256);
    mc__master_free(m);
}

/* Small objects are kept in 4-byte units (MC__SMALL_UNIT): their records
 * name extents that start and end on 4 bytes, not 8, and a restarted master
 * takes them back as they are, capacity and all. */
static void test_small_objects_in_4_byte_units_come_back(void **state)
{
    (void)state;
    mc__master_t *m = new_master_segs(1);
    mc__extent_t a = {0, 100}, b = {100, 100}, c = {200, 104};
    trec_t r1 = rec("a", 5, 1, 100, &a), r2 = rec("b", 6, 1, 100, &b), r3 = rec("c", 7, 1, 101, &c);
    assert_int_equal(merge(m, 1, &r1, T0), 1);
    assert_int_equal(merge(m, 1, &r2, T0), 1);
    assert_int_equal(merge(m, 1, &r3, T0), 1);
    assert_int_equal(used(m), 304);
    mc__version_t *v = find(m, "b");
    assert_non_null(v);
    assert_int_equal(vrep(v, 0).ext[0].off, 100);
    assert_int_equal(mc__vcap(v), 100);
    assert_int_equal(mc__vcap(find(m, "c")), 104);
    /* 2 bytes off the unit: refused, as before. */
    mc__extent_t odd = {306, 100};
    trec_t rodd = rec("d", 8, 1, 100, &odd);
    assert_int_equal(merge(m, 1, &rodd, T0), 0);
    assert_int_equal(used(m), 304);
    mc__master_free(m);
}

static void test_the_latest_record_gives_the_metadata(void **state)
{
    (void)state;
    mc__master_t *m = new_master_segs(2);
    mc__extent_t e1 = {0, 64}, e2 = {0, 64};
    /* Node 1 missed a rename and a chmod (stamp 4); node 2 has them (7). */
    trec_t stale = rec("old", 5, 4, 64, &e1), fresh = rec("new", 5, 7, 64, &e2);
    fresh.r.mode = 0600;
    char x[] = {4, 'u', 's', 'e', 'r', 2, 0, 0, 0, 'h', 'i'};
    fresh.r.xattr = x;
    fresh.r.xattr_len = sizeof(x);
    assert_int_equal(merge(m, 1, &stale, T0), 1);
    assert_non_null(find(m, "old"));
    assert_int_equal(merge(m, 2, &fresh, T0), 1);
    assert_null(find(m, "old"));
    mc__version_t *v = find(m, "new");
    assert_non_null(v);
    assert_int_equal(v->mode, 0600);
    assert_int_equal(v->nrep, 2);
    const char *val;
    uint32_t vl;
    assert_int_equal(mc__xattr_get(v, "user", 4, &val, &vl), 0);
    assert_int_equal(vl, 2);
    /* The other way round: the stale one, later, changes nothing. */
    mc__master_t *m2 = new_master_segs(2);
    assert_int_equal(merge(m2, 2, &fresh, T0), 1);
    assert_int_equal(merge(m2, 1, &stale, T0), 1);
    assert_null(find(m2, "old"));
    assert_int_equal(find(m2, "new")->mode, 0600);
    /* Broken attributes are refused. */
    char bad[] = {9, 'u'};
    trec_t rb = rec("z", 20, 1, 0, NULL);
    rb.r.xattr = bad;
    rb.r.xattr_len = sizeof(bad);
    assert_int_equal(merge(m2, 1, &rb, T0), -EINVAL);
    mc__master_free(m2);
    mc__master_free(m);
}

static void test_hard_links_come_back(void **state)
{
    (void)state;
    mc__master_t *m = new_master_segs(1);
    const char ino[] = MC__INODE_PREFIX "2a";
    mc__extent_t e = {0, 64};
    trec_t f = rec(ino, 40, 3, 10, &e);
    f.r.links = 2;
    trec_t n1 = rec("x", 41, 3, 0, NULL), n2 = rec("d/y", 42, 3, 0, NULL);
    n1.r.link = n2.r.link = ino;
    n1.r.linklen = n2.r.linklen = (uint32_t)strlen(ino);
    /* A name may come before its file. */
    assert_int_equal(merge(m, 1, &n1, T0), 1);
    assert_null(find(m, "x"));
    assert_int_equal(merge(m, 1, &f, T0), 1);
    assert_int_equal(merge(m, 1, &n2, T0), 1);
    assert_ptr_equal(find(m, "x"), find(m, "d/y"));
    mc_stat_t st;
    mc__version_stat(m, find(m, "x"), T0, &st);
    assert_int_equal(st.nlink, 2);
    assert_int_equal(st.ino, 0x2a);
    /* A name must name an inode key, and holds no bytes. */
    trec_t bad = rec("w", 43, 3, 0, NULL);
    bad.r.link = "x";
    bad.r.linklen = 1;
    assert_int_equal(merge(m, 1, &bad, T0), -EINVAL);
    mc__master_free(m);
}

/* A name entry record of key naming ino. */
static trec_t name_rec(const char *key, const char *ino, uint64_t id, uint64_t stamp)
{
    trec_t t = rec(key, id, stamp, 0, NULL);
    t.r.link = ino;
    t.r.linklen = (uint32_t)strlen(ino);
    return t;
}

static uint32_t nlink_of(mc__master_t *m, const char *key)
{
    mc_stat_t st;
    assert_non_null(find(m, key));
    mc__version_stat(m, find(m, key), T0, &st);
    return st.nlink;
}

/* A file's count of names is the names merged, whatever its record says
 * (nodes keep the records of a file and of its names apart, and may have
 * fetched more or fewer of the last notices): removing one never frees
 * the file under another. */
static void test_a_file_counts_the_names_that_come_back(void **state)
{
    (void)state;
    const char ino[] = MC__INODE_PREFIX "2a";
    mc__extent_t e = {0, 64}, e2 = {128, 64};
    for (uint32_t said = 1; said <= 3; said += 2) {
        for (int first = 0; first < 2; first++) {
            mc__master_t *m = new_master_segs(1);
            trec_t f = rec(ino, 40, 3, 10, &e);
            f.r.links = said; /* 1 or 3: two names come back */
            trec_t x = name_rec("x", ino, 41, 2), y = name_rec("y", ino, 42, 2);
            if (first)
                assert_int_equal(merge(m, 1, &f, T0), 1);
            assert_int_equal(merge(m, 1, &x, T0), 1);
            assert_int_equal(merge(m, 1, &y, T0), 1);
            if (!first)
                assert_int_equal(merge(m, 1, &f, T0), 1);
            assert_int_equal(nlink_of(m, "x"), 2);
            /* A later record of the file (another node's) keeps the count. */
            trec_t f2 = f;
            f2.r.stamp = 9;
            f2.r.links = 7;
            assert_int_equal(merge(m, 1, &f2, T0), 1);
            assert_int_equal(nlink_of(m, "y"), 2);
            assert_int_equal(mc__master_remove(m, "x", 1, 0, T0), 0);
            assert_int_equal(nlink_of(m, "y"), 1);
            assert_int_equal(mc__master_remove(m, "y", 1, 0, T0), 0);
            assert_int_equal(objects(m), 0);
            assert_int_equal(used(m), 0);
            mc__master_free(m);
        }
    }

    /* A newer version of the file replaces one counted already, and a newer
     * record of a key replaces a name: the count follows. */
    mc__master_t *m = new_master_segs(1);
    trec_t x = name_rec("x", ino, 41, 2), y = name_rec("y", ino, 42, 2);
    trec_t f = rec(ino, 40, 3, 10, &e), g = rec(ino, 50, 5, 10, &e2);
    trec_t y2 = rec("y", 60, 6, 0, NULL);
    assert_int_equal(merge(m, 1, &x, T0), 1);
    assert_int_equal(merge(m, 1, &f, T0), 1);
    assert_int_equal(merge(m, 1, &y, T0), 1);
    assert_int_equal(merge(m, 1, &g, T0), 1);
    assert_int_equal(nlink_of(m, "x"), 2);
    assert_int_equal(merge(m, 1, &y2, T0), 1); /* y is a plain file now */
    assert_int_equal(nlink_of(m, "x"), 1);
    assert_int_equal(mc__master_remove(m, "x", 1, 0, T0), 0);
    assert_int_equal(mc__master_remove(m, "y", 1, 0, T0), 0);
    assert_int_equal(objects(m), 0);
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

/* A name removed while its file is not back yet counts no more when the
 * file comes; names of a file lost with its segment wait for an older
 * version of it that another node reports. */
static void test_names_wait_for_their_file(void **state)
{
    (void)state;
    const char ino[] = MC__INODE_PREFIX "2a";
    mc__extent_t e = {0, 64}, e2 = {0, 64};
    mc__master_t *m = new_master_segs(2);
    trec_t x = name_rec("x", ino, 41, 2), y = name_rec("y", ino, 42, 2),
           z = name_rec("z", ino, 43, 2);
    assert_int_equal(merge(m, 1, &x, T0), 1);
    assert_int_equal(merge(m, 1, &y, T0), 1);
    assert_int_equal(merge(m, 1, &z, T0), 1);
    assert_int_equal(mc__master_remove(m, "z", 1, 0, T0), 0);
    trec_t f = rec(ino, 50, 3, 10, &e);
    f.r.links = 3;
    assert_int_equal(merge(m, 1, &f, T0), 1);
    assert_int_equal(nlink_of(m, "x"), 2);
    /* Segment 1 goes with the file; segment 2 has an older version. */
    assert_int_equal(mc__master_drop_segment(m, 1, T0), 1);
    assert_null(find(m, "x"));
    trec_t old = rec(ino, 40, 2, 10, &e2);
    old.r.links = 1;
    assert_int_equal(merge(m, 2, &old, T0), 1);
    assert_int_equal(nlink_of(m, "x"), 2);
    assert_int_equal(mc__master_remove(m, "x", 1, 0, T0), 0);
    assert_non_null(find(m, "y"));
    assert_int_equal(mc__master_remove(m, "y", 1, 0, T0), 0);
    assert_int_equal(objects(m), 0);
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

/* Inode keys come back only as masters make them (lowercase hex, no
 * leading zero): their numbers count the names that wait for them. */
static void test_inode_keys_as_masters_make_them(void **state)
{
    (void)state;
    mc__master_t *m = new_master_segs(1);
    const char *bad[] = {MC__INODE_PREFIX, MC__INODE_PREFIX "2A", MC__INODE_PREFIX "02a",
                         MC__INODE_PREFIX "2a/", MC__INODE_PREFIX "10000000000000000"};
    mc__extent_t e = {0, 64};
    for (int i = 0; i < 5; i++) {
        trec_t n = name_rec("x", bad[i], 41, 2);
        assert_int_equal(merge(m, 1, &n, T0), -EINVAL);
        trec_t f = rec(bad[i], 40, 2, 10, &e);
        assert_int_equal(merge(m, 1, &f, T0), -EINVAL);
    }
    trec_t n = name_rec(MC__INODE_PREFIX "1", MC__INODE_PREFIX "2a", 41, 2);
    assert_int_equal(merge(m, 1, &n, T0), -EINVAL); /* a name under an inode key */
    assert_int_equal(objects(m), 0);
    mc__master_free(m);
}

/* A master seeded for inode numbers (ino_seed) with a file "a" (its ids
 * start above those of the records below). */
static mc__master_t *seeded_with_a(uint64_t seed)
{
    mc__master_opts_t o = {.lease_ms = LEASE_MS, .align = UNIT, .ino_seed = seed, .first_id = 100};
    mc__master_t *m = NULL;
    assert_int_equal(mc__master_new(&m, &o), 0);
    assert_int_equal(mc__master_add_segment(m, 1, SEG_SIZE), 0);
    mc__version_t *v = NULL;
    assert_int_equal(mc__master_begin(m, "a", 1, NULL, T0, &v), 0);
    assert_int_equal(mc__master_reserve(m, v, 64, T0), 0);
    assert_int_equal(mc__master_commit(m, v, 64, 0, T0), 0);
    return m;
}

static uint64_t link_ino(mc__master_t *m)
{
    mc__version_t *f = NULL;
    mc_stat_t st;
    assert_int_equal(mc__master_link(m, "a", 1, "b", 1, &f), 0);
    mc__version_stat(m, f, T0, &st);
    return st.ino;
}

/* With ino_seed, a new inode's number is drawn (a restarted master links
 * files before every node reported, and its ids may start below the last
 * run's): below 2^62, never one an inode in the index has, nor one names
 * merged wait for. */
static void test_seeded_inode_numbers_skip_those_taken(void **state)
{
    (void)state;
    mc__master_t *m = seeded_with_a(7);
    uint64_t n = link_ino(m);
    assert_true(n != 0 && n < (1ULL << 62));
    mc__master_free(m);
    m = seeded_with_a(8);
    assert_true(link_ino(m) != n); /* another seed, another number */
    mc__master_free(m);

    char ino[64];
    snprintf(ino, sizeof(ino), "%s%llx", MC__INODE_PREFIX, (unsigned long long)n);
    mc__extent_t e = {1024, 64};
    for (int taken_by = 0; taken_by < 2; taken_by++) {
        m = seeded_with_a(7);
        trec_t f = rec(ino, 40, 3, 10, &e), x = name_rec("x", ino, 41, 3);
        assert_int_equal(merge(m, 1, taken_by ? &x : &f, T0), 1);
        uint64_t n2 = link_ino(m);
        assert_true(n2 != n && n2 != 0 && n2 < (1ULL << 62));
        mc__master_free(m);
    }
}

/* Notices: a change marks its version dirty once; a flush stamps it and
 * hands it over; a version leaving the namespace is handed over at once. */
static int notes[16], nnotes;

static void on_notice(void *arg, mc__master_t *m, mc__version_t *v, int drop)
{
    (void)arg, (void)m;
    if (nnotes < 16)
        notes[nnotes++] = drop ? -(int)v->id : (int)v->id;
}

static void test_changes_are_noticed_once_per_flush(void **state)
{
    (void)state;
    mc__master_t *m = new_master_segs(1);
    mc__master_notices(m, on_notice, NULL);
    nnotes = 0;
    mc__version_t *v = NULL;
    assert_int_equal(mc__master_begin(m, "k", 1, NULL, T0, &v), 0);
    assert_int_equal(mc__master_commit(m, v, 0, 0, T0), 0);
    mc__master_dirty(m, v);
    mc__master_dirty(m, v);
    assert_int_equal(nnotes, 0);
    mc__master_flush(m);
    assert_int_equal(nnotes, 1);
    assert_int_equal(notes[0], (int)v->id);
    assert_true(v->flags & MC__V_NOTED);
    mc__master_flush(m);
    assert_int_equal(nnotes, 1);
    /* Renamed and then removed before the next flush: only the drop. */
    int id = (int)v->id;
    assert_int_equal(mc__master_rename(m, "k", 1, "j", 1, 0, T0), 0);
    assert_int_equal(mc__master_remove(m, "j", 1, 0, T0), 0);
    assert_int_equal(nnotes, 2);
    assert_int_equal(notes[1], -id);
    mc__master_flush(m);
    assert_int_equal(nnotes, 2);
    mc__master_free(m);
}

/* Many dirty versions (past the dirty array's first size), some removed
 * before the flush (each one's place emptied, found through the table of
 * the dirty versions' places): the flush tells every other one once, and
 * none of the removed ones. */
static uint8_t told[4000];
static int told_dup;

static void on_notice_count(void *arg, mc__master_t *m, mc__version_t *v, int drop)
{
    (void)arg, (void)m;
    if (drop)
        return;
    int i = atoi(mc__vkey(v) + 1);
    told_dup |= told[i];
    told[i] = 1;
}

/* Publishes key "k<i>" (empty) and returns its version. */
static mc__version_t *put_k(mc__master_t *m, int i)
{
    char key[16];
    mc__version_t *v = NULL;
    int n = snprintf(key, sizeof(key), "k%d", i);
    assert_int_equal(mc__master_begin(m, key, (size_t)n, NULL, T0, &v), 0);
    assert_int_equal(mc__master_commit(m, v, 0, 0, T0), 0);
    return v;
}

static void test_many_dirty_some_removed(void **state)
{
    (void)state;
    enum { N = 400 };
    mc__master_t *m = new_master_segs(1);
    mc__master_notices(m, on_notice_count, NULL);
    memset(told, 0, sizeof(told));
    told_dup = 0;
    char key[16];
    for (int i = 0; i < N; i++)
        mc__master_dirty(m, put_k(m, i));
    for (int i = 0; i < N; i += 3) {
        int n = snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(mc__master_remove(m, key, (size_t)n, 0, T0), 0);
    }
    mc__master_flush(m);
    assert_int_equal(told_dup, 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(told[i], i % 3 != 0);
    memset(told, 0, sizeof(told));
    mc__master_flush(m); /* nothing is dirty any more */
    for (int i = 0; i < N; i++)
        assert_int_equal(told[i], 0);
    mc__master_free(m);
}

/* A burst of dirty versions (the table of their places grows past the
 * size the flush keeps), each marked twice, every other one replaced by a
 * new version before the flush (a new address, maybe the freed one's):
 * each one still published is told once; the next round, with the table
 * made anew, the same. */
static void test_a_burst_of_dirty_versions(void **state)
{
    (void)state;
    enum { N = 4000 };
    mc__master_t *m = new_master_segs(1);
    mc__master_notices(m, on_notice_count, NULL);
    for (int round = 0; round < 2; round++) {
        memset(told, 0, sizeof(told));
        told_dup = 0;
        for (int i = 0; i < N; i++) {
            mc__version_t *v = put_k(m, i);
            mc__master_dirty(m, v);
            mc__master_dirty(m, v);
        }
        for (int i = 0; i < N; i += 2)
            (void)put_k(m, i); /* replaced, the new one not marked */
        mc__master_flush(m);
        assert_int_equal(told_dup, 0);
        for (int i = 0; i < N; i++)
            assert_int_equal(told[i], i % 2);
    }
    mc__master_free(m);
}

/* ---- a node's records, then a master restarted from them ----
 *
 * A node as the notices leave it (reports.c): the record of each version
 * of its segment (a name entry's: its file's nodes), by version id, a drop
 * forgetting one. Every version here is on segment 1. */
typedef struct kept {
    uint64_t id;
    mc__rec_t r;
    char key[64], link[64];
    mc__extent_t ext[4];
} kept_t;
static kept_t kept[32];
static int nkept;

static void on_notice_keep(void *arg, mc__master_t *m, mc__version_t *v, int drop)
{
    (void)arg;
    int i = 0;
    while (i < nkept && kept[i].id != v->id)
        i++;
    if (drop) {
        if (i < nkept)
            kept[i] = kept[--nkept];
        return;
    }
    if (mc__vmore(v)->link && !mc__master_resolve(m, v))
        return; /* a name of a lost file: no nodes */
    assert_true(i < 32);
    if (i == nkept)
        nkept++;
    kept_t *k = &kept[i];
    mc__extent_t one;
    const mc__extent_t *ext = mc__master_record(m, v, 1, &k->r, &one);
    assert_true(k->r.klen < sizeof(k->key) && k->r.linklen < sizeof(k->link));
    assert_true(k->r.next <= 4 && !k->r.xattr_len);
    k->id = v->id;
    memcpy(k->key, k->r.key, k->r.klen);
    k->r.key = k->key;
    if (k->r.linklen)
        memcpy(k->link, k->r.link, k->r.linklen);
    k->r.link = k->r.linklen ? k->link : NULL;
    for (uint32_t e = 0; e < k->r.next; e++)
        k->ext[e] = ext[e];
}

/* A new master of segment 1 rebuilt from what the node keeps. */
static mc__master_t *restarted(void)
{
    mc__master_t *m2 = new_master_segs(1);
    for (int i = 0; i < nkept; i++)
        assert_int_equal(mc__master_merge(m2, 1, &kept[i].r, kept[i].ext, T0), 1);
    return m2;
}

/* A name of a hard-linked file replaced by a rename: the file has one
 * name less, at this master and at the one rebuilt from the records, whose
 * file goes with its last name (else it stays at its inode key, named by
 * nothing, listed nowhere, never evicted: its space is never given back). */
static void test_a_name_renamed_over_leaves_the_count_of_names_right(void **state)
{
    (void)state;
    mc__master_t *m = new_master_segs(1);
    mc__master_notices(m, on_notice_keep, NULL);
    nkept = 0;
    mc__version_t *v = NULL, *f = NULL;
    assert_int_equal(mc__master_begin(m, "a", 1, NULL, T0, &v), 0);
    assert_int_equal(mc__master_reserve(m, v, 1000, T0), 0);
    assert_int_equal(mc__master_commit(m, v, 1000, 0, T0), 0);
    mc__master_dirty(m, v);
    assert_int_equal(mc__master_link(m, "a", 1, "b", 1, &f), 0);
    assert_int_equal(mc__master_begin(m, "c", 1, NULL, T0, &v), 0);
    assert_int_equal(mc__master_commit(m, v, 0, 0, T0), 0);
    mc__master_dirty(m, v);
    mc__master_flush(m);
    /* "c" over "b": the file keeps "a" only. */
    assert_int_equal(mc__master_rename(m, "c", 1, "b", 1, 0, T0), 0);
    mc__master_flush(m);
    mc_stat_t st;
    mc__version_stat(m, find(m, "a"), T0, &st);
    assert_int_equal(st.nlink, 1);

    mc__master_t *m2 = restarted();
    assert_non_null(find(m2, "b"));
    assert_non_null(find(m2, "a"));
    mc__version_stat(m2, find(m2, "a"), T0, &st);
    assert_int_equal(st.nlink, 1);
    assert_int_equal(mc__master_remove(m2, "a", 1, 0, T0), 0);
    assert_int_equal(mc__master_remove(m2, "b", 1, 0, T0), 0);
    assert_int_equal(objects(m2), 0);
    assert_int_equal(used(m2), 0); /* the file's space came back */
    mc__master_free(m2);
    mc__master_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_record_brings_its_object_back),
        cmocka_unit_test(test_a_record_keeps_holes),
        cmocka_unit_test(test_replicas_of_one_version_are_one_object),
        cmocka_unit_test(test_the_newest_version_of_a_key_wins),
        cmocka_unit_test(test_removed_after_the_rebuild_stays_gone),
        cmocka_unit_test(test_what_this_run_published_wins),
        cmocka_unit_test(test_this_run_wins_over_a_record_with_a_higher_id),
        cmocka_unit_test(test_records_of_ids_this_run_handed_out_keep_their_order),
        cmocka_unit_test(test_a_late_rename_never_retires_what_this_run_put),
        cmocka_unit_test(test_a_late_record_never_undoes_what_this_run_changed),
        cmocka_unit_test(test_a_late_record_never_replaces_what_this_run_renamed_there),
        cmocka_unit_test(test_a_late_rename_never_retires_what_this_run_renamed_there),
        cmocka_unit_test(test_space_that_is_not_free_is_refused),
        cmocka_unit_test(test_small_objects_in_4_byte_units_come_back),
        cmocka_unit_test(test_the_latest_record_gives_the_metadata),
        cmocka_unit_test(test_hard_links_come_back),
        cmocka_unit_test(test_a_file_counts_the_names_that_come_back),
        cmocka_unit_test(test_names_wait_for_their_file),
        cmocka_unit_test(test_inode_keys_as_masters_make_them),
        cmocka_unit_test(test_seeded_inode_numbers_skip_those_taken),
        cmocka_unit_test(test_changes_are_noticed_once_per_flush),
        cmocka_unit_test(test_many_dirty_some_removed),
        cmocka_unit_test(test_a_burst_of_dirty_versions),
        cmocka_unit_test(test_a_name_renamed_over_leaves_the_count_of_names_right),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
