/*
 * test_master.c - unit tests for the metadata master (core/src/master/master.c).
 *
 * The master has no clock and no I/O, so every test drives mc__master_*
 * directly with explicit `now` values (milliseconds) and checks versions,
 * space, leases, pins, eviction and listings. Sizes are multiples of the
 * 64-byte allocation unit so that space use can be checked exactly.
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

#include "master/master.h"
#include "unit.h"

#define UNIT 64
#define SEG_SIZE (64 * 1024)
#define LEASE_MS 100
#define T0 1000 /* the first `now` of every test */

/* ---- helpers ---- */

static mc__master_t *new_master_opts(uint64_t seg_size, unsigned high, unsigned ratio)
{
    mc__master_opts_t o = {
        .lease_ms = LEASE_MS,
        .evict_high_pct = high,
        .evict_ratio_pct = ratio,
        .align = UNIT,
    };
    mc__master_t *m = NULL;

    assert_int_equal(mc__master_new(&m, &o), 0);
    assert_int_equal(mc__master_add_segment(m, 0, seg_size), 0);
    return m;
}

static mc__master_t *new_master(void)
{
    return new_master_opts(SEG_SIZE, 0, 0);
}

static uint64_t used(const mc__master_t *m)
{
    mc_space_t sp;

    mc__master_space(m, &sp);
    return sp.used;
}

static uint64_t objects(const mc__master_t *m)
{
    mc_space_t sp;

    mc__master_space(m, &sp);
    return sp.objects;
}

static uint64_t evicted(const mc__master_t *m)
{
    mc_space_t sp;

    mc__master_space(m, &sp);
    return sp.evicted;
}

static mc__version_t *find(mc__master_t *m, const char *key)
{
    return mc__master_find(m, key, strlen(key));
}

/* Publishes key with size bytes (and pin) at now; returns the version. */
static mc__version_t *put_pin(mc__master_t *m, const char *key, uint64_t size, uint32_t pin,
                              uint64_t now)
{
    mc_put_opts_t po = {.pin = pin};
    mc__version_t *v = NULL;

    assert_int_equal(mc__master_begin(m, key, strlen(key), &po, now, &v), 0);
    assert_non_null(v);
    assert_int_equal(mc__master_reserve(m, v, size, now), 0);
    assert_int_equal(mc__master_commit(m, v, size, 0, now), 0);
    assert_ptr_equal(find(m, key), v);
    return v;
}

static mc__version_t *put(mc__master_t *m, const char *key, uint64_t size, uint64_t now)
{
    return put_pin(m, key, size, MC_PIN_NONE, now);
}

/* The root directory: a LOOKUP of the delimiter alone, its subdirectories
 * (hard links' inode keys are in none) and its times. */
static void test_root_directory(void **state)
{
    (void)state;
    mc__master_t *m = new_master();
    mc__version_t *v = NULL;
    assert_int_equal(mc__master_lookup(m, "/", 1, '/', &v), MC_LOOKUP_DIR);
    assert_null(v);
    assert_int_equal(mc__master_subdirs(m, "/", 1, '/'), 0);
    put(m, "a/x", 10, T0);
    put(m, "a/y/z", 10, T0);
    put(m, "b/", 0, T0);
    put(m, "f", 10, T0);
    assert_int_equal(mc__master_link(m, "f", 1, "g", 1, &v), 0); /* an inode key */
    assert_int_equal(mc__master_subdirs(m, "/", 1, '/'), 2);
    assert_int_equal(mc__master_root_ns(m), 0);
    mc__master_dir_changed(m, "a/x", 3, 5);
    mc__master_dir_changed(m, "a/", 2, 6);
    assert_int_equal(mc__master_root_ns(m), 6); /* a marker in the root */
    mc__master_dir_changed(m, "f", 1, 7);
    assert_int_equal(mc__master_root_ns(m), 7);
    mc__master_free(m);
}

/* Sparse files (holes.c): a range past the end leaves a hole that takes no
 * space, even past the whole store; a range inside a hole gets space, with
 * eviction when full; a punch gives whole units back; commit trims a hole
 * as it trims space; a repair's replica copies the layout; abort frees
 * only what was allocated. */
static void test_holes(void **state)
{
    (void)state;
    mc__master_t *m = new_master_opts(SEG_SIZE, 90, 50);
    mc__version_t *v = NULL, *old = put(m, "old", SEG_SIZE / 2, T0);
    assert_int_equal(mc__master_begin(m, "s", 1, NULL, T0, &v), 0);
    assert_int_equal(mc__master_reserve_range(m, v, 10 * SEG_SIZE, 1, 0, T0), 0);
    assert_int_equal(v->rep[0].n, 2);
    assert_int_equal(v->rep[0].ext[0].off, MC__HOLE);
    assert_int_equal(v->rep[0].ext[0].len, 10 * SEG_SIZE);
    assert_int_equal(v->capacity, 10 * SEG_SIZE + UNIT);
    assert_int_equal(mc__replica_bytes(&v->rep[0]), UNIT);
    /* Filling most of the hole evicts the old object to make room. */
    assert_int_equal(mc__master_reserve_range(m, v, 100, SEG_SIZE - 4 * UNIT, 0, T0 + 1), 0);
    assert_null(find(m, "old"));
    (void)old;
    assert_int_equal(used(m), SEG_SIZE - 2 * UNIT);
    assert_int_equal(mc__master_reserve_range(m, v, 0, SEG_SIZE, 0, T0), -ENOSPC);
    assert_int_equal(used(m), SEG_SIZE - 2 * UNIT); /* unchanged */
    /* A punch of [UNIT + 1, 4 * UNIT) frees the two whole units inside. */
    assert_int_equal(mc__master_reserve_range(m, v, UNIT + 1, 3 * UNIT - 1, 1, T0), 0);
    assert_int_equal(used(m), SEG_SIZE - 4 * UNIT);
    /* A repair's replica has the same holes; the space of its bytes. */
    mc__replica_t r;
    assert_int_equal(mc__master_add_segment(m, 2, SEG_SIZE), 0);
    assert_int_equal(mc__master_replica_alloc_like(m, 2, &v->rep[0], &r), 0);
    assert_int_equal(mc__replica_bytes(&r), mc__replica_bytes(&v->rep[0]));
    for (uint64_t at = 0, i = 0, j = 0, ai = 0, aj = 0; at < v->capacity; at += UNIT) {
        while (at >= ai + v->rep[0].ext[i].len) /* the extent holding at, in each */
            ai += v->rep[0].ext[i++].len;
        while (at >= aj + r.ext[j].len)
            aj += r.ext[j++].len;
        assert_int_equal(r.ext[j].off == MC__HOLE, v->rep[0].ext[i].off == MC__HOLE);
    }
    mc__master_replica_release(m, &r);
    assert_int_equal(mc__master_segment_free(m, 2), SEG_SIZE);
    /* Commit trims to the size (the tail unit goes), then abort of another. */
    assert_int_equal(mc__master_commit(m, v, 2 * SEG_SIZE, 0, T0), 0);
    assert_int_equal(v->capacity, 2 * SEG_SIZE);
    assert_int_equal(used(m), SEG_SIZE - 5 * UNIT);
    mc_stat_t st;
    mc__version_stat(v, T0, &st);
    assert_int_equal(st.alloc, SEG_SIZE - 5 * UNIT);
    mc__version_t *w = NULL;
    assert_int_equal(mc__master_begin(m, "t", 1, NULL, T0, &w), 0);
    assert_int_equal(mc__master_reserve_range(m, w, SEG_SIZE, 10, 0, T0), 0);
    mc__master_abort(m, w);
    assert_int_equal(used(m), SEG_SIZE - 5 * UNIT);
    mc__master_free(m);
}

/* Renders a listing as "k1 k2 p/+ ..." (prefix entries marked with '+'),
 * and checks each entry's invariants on the way. */
static char *list_render(const mc_list_t *l)
{
    size_t cap = 64, n = 0;
    char *s = malloc(cap);

    assert_non_null(s);
    s[0] = '\0';
    for (size_t i = 0; i < l->n; i++) {
        const mc_list_entry_t *e = &l->entries[i];
        assert_int_equal(strlen(e->key), e->klen);
        while (n + e->klen + 3 > cap) {
            cap *= 2;
            s = realloc(s, cap);
            assert_non_null(s);
        }
        n += (size_t)sprintf(s + n, "%s%s%s", i ? " " : "", e->key, e->is_prefix ? "+" : "");
    }
    return s;
}

/* One listing call, rendered; *more and *next (a copy) returned if asked. */
static char *list_str(mc__master_t *m, const char *prefix, const char *after, int delim, size_t max,
                      int *more, char **next)
{
    mc_list_t *l = NULL;
    int rc = mc__master_list(m, prefix, strlen(prefix), after, after ? strlen(after) : 0, delim,
                             max, T0, &l);

    assert_cmp(rc, >=, 0);
    assert_non_null(l);
    assert_int_equal((size_t)rc, l->n);
    if (l->n) {
        assert_non_null(l->next);
        assert_int_equal(l->next_len, l->entries[l->n - 1].klen);
        assert_memory_equal(l->next, l->entries[l->n - 1].key, l->next_len);
    }
    char *s = list_render(l);
    if (more)
        *more = l->more;
    if (next)
        *next = l->n ? strndup(l->next, l->next_len) : NULL;
    mc_list_free(l);
    return s;
}

/* The whole listing (one page of up to 1000), rendered; must not have more. */
static char *list_all(mc__master_t *m, const char *prefix, const char *after, int delim)
{
    int more = -1;
    char *got = list_str(m, prefix, after, delim, 0, &more, NULL);

    assert_int_equal(more, 0);
    return got;
}

/* A macro so that a failure names the caller's line. */
#define assert_list(m, prefix, after, delim, want)                                                 \
    do {                                                                                           \
        char *got_ = list_all(m, prefix, after, delim);                                            \
        assert_string_equal(got_, want);                                                           \
        free(got_);                                                                                \
    } while (0)

/* ---- begin / reserve / commit ---- */

static void test_commit_publishes(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *v = NULL;
    mc_put_opts_t po = {.mode = 0600};

    assert_int_equal(mc__master_begin(m, "k", 1, &po, T0, &v), 0);
    assert_int_equal(v->state, MC__PENDING);
    assert_int_equal(mc__master_reserve(m, v, 1000, T0), 0);
    assert_int_equal(v->capacity, 1024);
    assert_int_equal(used(m), 1024);
    /* Pending: invisible to find, listing and the object count. */
    assert_null(find(m, "k"));
    assert_int_equal(objects(m), 0);
    assert_list(m, "", NULL, 0, "");

    /* Committing a smaller size returns the extra space. */
    assert_int_equal(mc__master_commit(m, v, 100, 0, T0), 0);
    assert_ptr_equal(find(m, "k"), v);
    assert_int_equal(v->state, MC__PUBLISHED);
    assert_int_equal(v->size, 100);
    assert_int_equal(v->capacity, 128);
    assert_int_equal(used(m), 128);
    assert_int_equal(objects(m), 1);
    assert_cmp(v->id, >, 0);

    mc_stat_t st;
    mc__version_stat(v, T0, &st);
    assert_int_equal(st.size, 100);
    assert_int_equal(st.version, v->id);
    assert_int_equal(st.mode, 0600);
    assert_int_equal(st.replicas, 1);
    assert_int_equal(st.flags, 0);
    assert_list(m, "", NULL, 0, "k");
    mc__master_free(m);
}

static void test_empty_object(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *v = put(m, "empty", 0, T0);

    assert_int_equal(v->size, 0);
    assert_int_equal(v->capacity, 0);
    assert_int_equal(used(m), 0);
    assert_int_equal(objects(m), 1);
    mc__master_free(m);
}

static void test_begin_bad_key(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *v = NULL;
    static char big[MC_KEY_MAX + 1];

    memset(big, 'x', sizeof(big));
    assert_int_equal(mc__master_begin(m, "", 0, NULL, T0, &v), -EINVAL);
    assert_int_equal(mc__master_begin(m, "a\0b", 3, NULL, T0, &v), -EINVAL);
    assert_int_equal(mc__master_begin(m, big, sizeof(big), NULL, T0, &v), -ENAMETOOLONG);
    assert_int_equal(mc__master_begin(m, big, MC_KEY_MAX, NULL, T0, &v), 0);
    mc__master_abort(m, v);
    mc__master_free(m);
}

static void test_begin_without_segment(void **state)
{
    mc__master_opts_t o = {.lease_ms = LEASE_MS, .align = UNIT};
    mc__master_t *m = NULL;
    mc__version_t *v = NULL;

    assert_int_equal(mc__master_new(&m, &o), 0);
    assert_int_equal(mc__master_begin(m, "k", 1, NULL, T0, &v), -ENOSPC);
    mc__master_free(m);
}

static void test_commit_noreplace(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *old = put(m, "k", 64, T0);
    mc__version_t *v = NULL;

    assert_int_equal(mc__master_begin(m, "k", 1, NULL, T0, &v), 0);
    assert_int_equal(mc__master_reserve(m, v, 640, T0), 0);
    assert_int_equal(used(m), 704);
    assert_int_equal(mc__master_commit(m, v, 640, MC_PUT_NOREPLACE, T0), -EEXIST);
    /* Nothing changed and the caller still owns v. */
    assert_ptr_equal(find(m, "k"), old);
    assert_int_equal(v->state, MC__PENDING);
    mc__master_abort(m, v);
    assert_int_equal(used(m), 64);
    /* NOREPLACE on a new key publishes. */
    assert_int_equal(mc__master_begin(m, "k2", 2, NULL, T0, &v), 0);
    assert_int_equal(mc__master_commit(m, v, 0, MC_PUT_NOREPLACE, T0), 0);
    assert_ptr_equal(find(m, "k2"), v);
    mc__master_free(m);
}

static void test_commit_size_over_capacity(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *v = NULL;

    assert_int_equal(mc__master_begin(m, "k", 1, NULL, T0, &v), 0);
    assert_int_equal(mc__master_reserve(m, v, 64, T0), 0);
    assert_int_equal(mc__master_commit(m, v, 65, 0, T0), -EINVAL);
    assert_null(find(m, "k"));
    mc__master_abort(m, v);
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

static void test_replace_bumps_version_and_frees_old(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *v1 = put(m, "k", 6400, T0);
    uint64_t id1 = v1->id;

    assert_int_equal(used(m), 6400);
    mc__version_t *v2 = put(m, "k", 640, T0 + 1);
    assert_cmp(v2->id, >, id1);
    assert_int_equal(used(m), 640);
    assert_int_equal(objects(m), 1);
    mc__master_free(m);
}

static void test_ref_holds_replaced_version(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *v1 = put(m, "k", 6400, T0);

    mc__master_ref(v1);
    mc__version_t *v2 = put(m, "k", 640, T0 + 1);
    assert_ptr_equal(find(m, "k"), v2);
    assert_int_equal(v1->state, MC__RETIRED);
    assert_int_equal(v1->size, 6400);
    assert_int_equal(used(m), 6400 + 640);
    /* Sweeping does not free a version a handle holds. */
    mc__master_sweep(m, T0 + 10 * LEASE_MS);
    assert_int_equal(used(m), 6400 + 640);
    mc__master_unref(m, v1, T0 + 2);
    assert_int_equal(used(m), 640);
    mc__master_free(m);
}

static void test_ref_and_lease_on_replaced_version(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *v1 = put(m, "k", 640, T0);

    mc__master_ref(v1);
    mc__master_touch(m, v1, T0, 1);
    put(m, "k", 64, T0 + 1);
    /* The last handle goes while the lease still runs: parked until sweep. */
    mc__master_unref(m, v1, T0 + 2);
    assert_int_equal(used(m), 640 + 64);
    mc__master_sweep(m, T0 + LEASE_MS - 1);
    assert_int_equal(used(m), 640 + 64);
    mc__master_sweep(m, T0 + LEASE_MS);
    assert_int_equal(used(m), 64);
    mc__master_free(m);
}

/* ---- leases and remove ---- */

static void test_lease_blocks_remove(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *v = put(m, "k", 640, T0);
    mc_stat_t st;

    mc__master_touch(m, v, T0, 1);
    mc__version_stat(v, T0, &st);
    assert_int_equal(st.flags, MC_STAT_LEASED);
    assert_int_equal(mc__master_remove(m, "k", 1, 0, T0 + 1), -EBUSY);
    assert_ptr_equal(find(m, "k"), v);
    assert_int_equal(mc__master_remove(m, "k", 1, MC_REMOVE_FORCE, T0 + 1), 0);
    assert_null(find(m, "k"));
    assert_int_equal(objects(m), 0);
    /* Retired with a lease: the space stays until the lease has run out. */
    assert_int_equal(used(m), 640);
    mc__master_sweep(m, T0 + LEASE_MS - 1);
    assert_int_equal(used(m), 640);
    mc__master_sweep(m, T0 + LEASE_MS);
    assert_int_equal(used(m), 0);
    assert_int_equal(mc__master_remove(m, "k", 1, MC_REMOVE_FORCE, T0 + 1), -ENOENT);
    mc__master_free(m);
}

static void test_lease_expires(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *v = put(m, "k", 64, T0);

    mc__master_touch(m, v, T0, 1);
    /* A later touch extends the lease, an earlier one does not shorten it. */
    mc__master_touch(m, v, T0 + 50, 1);
    mc__master_touch(m, v, T0, 1);
    assert_int_equal(v->lease_until, T0 + 50 + LEASE_MS);
    assert_int_equal(mc__master_remove(m, "k", 1, 0, T0 + 50 + LEASE_MS - 1), -EBUSY);
    assert_int_equal(mc__master_remove(m, "k", 1, 0, T0 + 50 + LEASE_MS), 0);
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

static void test_ref_blocks_remove(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *v = put(m, "k", 64, T0);

    mc__master_ref(v);
    assert_int_equal(mc__master_remove(m, "k", 1, 0, T0), -EBUSY);
    assert_int_equal(mc__master_remove(m, "k", 1, MC_REMOVE_FORCE, T0), 0);
    assert_int_equal(used(m), 64);
    mc__master_unref(m, v, T0);
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

static void test_remove_dir(void **state)
{
    mc__master_t *m = new_master();

    put(m, "a/", 0, T0);
    put(m, "a/x", 64, T0);
    put(m, "a0", 64, T0);
    assert_int_equal(mc__master_remove(m, "a/", 2, MC_REMOVE_DIR, T0), -ENOTEMPTY);
    assert_non_null(find(m, "a/"));
    assert_int_equal(mc__master_remove(m, "a", 1, MC_REMOVE_DIR, T0), -EINVAL);
    assert_int_equal(mc__master_remove(m, "a/x", 3, 0, T0), 0);
    assert_int_equal(mc__master_remove(m, "a/", 2, MC_REMOVE_DIR, T0), 0);
    assert_null(find(m, "a/"));
    assert_non_null(find(m, "a0"));
    assert_int_equal(mc__master_remove(m, "a/", 2, MC_REMOVE_DIR, T0), -ENOENT);
    assert_int_equal(mc__master_remove(m, "", 0, 0, T0), -EINVAL);
    mc__master_free(m);
}

/* ---- rename ---- */

static void test_rename_one(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *a = put(m, "a", 64, T0);
    put(m, "b", 640, T0);
    mc__version_t *d = put(m, "d", 128, T0);

    assert_int_equal(mc__master_rename(m, "a", 1, "c", 1, 0, T0), 0);
    assert_null(find(m, "a"));
    assert_ptr_equal(find(m, "c"), a);
    assert_string_equal(a->key, "c");
    assert_int_equal(a->klen, 1);
    /* Onto an existing key: replaces it and frees its space. */
    assert_int_equal(mc__master_rename(m, "c", 1, "b", 1, 0, T0), 0);
    assert_ptr_equal(find(m, "b"), a);
    assert_null(find(m, "c"));
    assert_int_equal(used(m), 64 + 128);
    assert_int_equal(objects(m), 2);
    assert_int_equal(mc__master_rename(m, "d", 1, "b", 1, MC_RENAME_NOREPLACE, T0), -EEXIST);
    assert_ptr_equal(find(m, "b"), a);
    assert_ptr_equal(find(m, "d"), d);
    assert_int_equal(mc__master_rename(m, "nope", 4, "x", 1, 0, T0), -ENOENT);
    assert_null(find(m, "x"));
    assert_int_equal(mc__master_rename(m, "b", 1, "b", 1, 0, T0), 0);
    assert_ptr_equal(find(m, "b"), a);
    assert_int_equal(mc__master_rename(m, "b", 1, "", 0, 0, T0), -EINVAL);
    mc__master_free(m);
}

static void test_rename_prefix(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *marker = put(m, "a/", 0, T0);
    mc__version_t *x = put(m, "a/x", 64, T0);
    mc__version_t *z = put(m, "a/y/z", 128, T0);
    put(m, "ab", 64, T0);
    put(m, "a", 64, T0);
    uint64_t id_x = x->id;

    assert_int_equal(mc__master_rename(m, "a/", 2, "b/", 2, MC_RENAME_PREFIX, T0), 0);
    assert_list(m, "", NULL, 0, "a ab b/ b/x b/y/z");
    assert_ptr_equal(find(m, "b/"), marker);
    assert_ptr_equal(find(m, "b/x"), x);
    assert_ptr_equal(find(m, "b/y/z"), z);
    assert_string_equal(z->key, "b/y/z");
    assert_int_equal(x->id, id_x); /* a rename publishes nothing new */

    /* Into itself, onto an ancestor, from a non-prefix. */
    assert_int_equal(mc__master_rename(m, "b/", 2, "b/x/", 4, MC_RENAME_PREFIX, T0), -EINVAL);
    assert_int_equal(mc__master_rename(m, "b/", 2, "b/", 2, MC_RENAME_PREFIX, T0), -EINVAL);
    assert_int_equal(mc__master_rename(m, "b/y/", 4, "b/", 2, MC_RENAME_PREFIX, T0), -ENOTEMPTY);
    assert_int_equal(mc__master_rename(m, "b", 1, "c/", 2, MC_RENAME_PREFIX, T0), -EINVAL);
    assert_int_equal(mc__master_rename(m, "q/", 2, "r/", 2, MC_RENAME_PREFIX, T0), -ENOENT);

    /* The destination has children: nothing moves. */
    put(m, "c/q", 64, T0);
    assert_int_equal(mc__master_rename(m, "b/", 2, "c/", 2, MC_RENAME_PREFIX, T0), -ENOTEMPTY);
    assert_list(m, "", NULL, 0, "a ab b/ b/x b/y/z c/q");

    /* The destination is only a marker: it is replaced. */
    put(m, "d/", 0, T0);
    assert_int_equal(
        mc__master_rename(m, "b/", 2, "d/", 2, MC_RENAME_PREFIX | MC_RENAME_NOREPLACE, T0),
        -EEXIST);
    uint64_t before = objects(m);
    assert_int_equal(mc__master_rename(m, "b/", 2, "d/", 2, MC_RENAME_PREFIX, T0), 0);
    assert_list(m, "", NULL, 0, "a ab c/q d/ d/x d/y/z");
    assert_ptr_equal(find(m, "d/"), marker);
    assert_int_equal(objects(m), before - 1);
    assert_int_equal(used(m), 64 + 64 + 64 + 64 + 128);

    /* A prefix with children but no marker moves too. */
    assert_int_equal(mc__master_rename(m, "d/y/", 4, "e/", 2, MC_RENAME_PREFIX, T0), 0);
    assert_list(m, "", NULL, 0, "a ab c/q d/ d/x e/z");
    mc__master_free(m);
}

static void test_rename_prefix_keeps_refs_and_leases(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *x = put(m, "a/x", 64, T0);

    mc__master_ref(x);
    mc__master_touch(m, x, T0, 1);
    assert_int_equal(mc__master_rename(m, "a/", 2, "b/", 2, MC_RENAME_PREFIX, T0), 0);
    assert_ptr_equal(find(m, "b/x"), x);
    assert_int_equal(mc__master_remove(m, "b/x", 3, 0, T0), -EBUSY);
    mc__master_unref(m, x, T0);
    mc__master_free(m);
}

/* ---- listing ---- */

static void test_list_delimiter(void **state)
{
    mc__master_t *m = new_master();
    const char *keys[] = {"d/",    "d/f1", "d/f2", "d/sub/g", "d/sub/h/i", "d/sub2/",
                          "d.dot", "d0",   "e",    "d/sub",   "x/y/"};

    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        put(m, keys[i], 64 * (i + 1), T0);

    /* The top level: directories fold into one prefix each, markers too. */
    assert_list(m, "", NULL, '/', "d.dot d/+ d0 e x/+");
    /* Children of d/ (the marker itself is a key under the prefix). */
    /* A directory shadows the file of the same name ("d/sub"). */
    assert_list(m, "d/", NULL, '/', "d/ d/f1 d/f2 d/sub/+ d/sub2/+");
    assert_list(m, "d/sub/", NULL, '/', "d/sub/g d/sub/h/+");
    assert_list(m, "d/sub", NULL, '/', "d/sub/+ d/sub2/+");
    assert_list(m, "nope/", NULL, '/', "");
    /* Without a delimiter: every key under the prefix, at any depth. */
    assert_list(m, "d/", NULL, 0, "d/ d/f1 d/f2 d/sub d/sub/g d/sub/h/i d/sub2/");
    assert_list(m, "", NULL, 0, "d.dot d/ d/f1 d/f2 d/sub d/sub/g d/sub/h/i d/sub2/ d0 e x/y/");

    /* Entries carry their metadata; a prefix entry carries its marker's,
     * or none without a marker. */
    mc_list_t *l = NULL;
    assert_int_equal(mc__master_list(m, "d/", 2, NULL, 0, '/', 0, T0, &l), 5);
    assert_string_equal(l->entries[1].key, "d/f1");
    assert_int_equal(l->entries[1].st.size, 128);
    assert_int_equal(l->entries[1].st.version, find(m, "d/f1")->id);
    assert_string_equal(l->entries[3].key, "d/sub/");
    assert_int_equal(l->entries[3].is_prefix, 1);
    assert_int_equal(l->entries[3].st.size, 0);
    assert_int_equal(l->entries[3].st.version, 0);
    assert_string_equal(l->entries[4].key, "d/sub2/");
    assert_int_equal(l->entries[4].is_prefix, 1);
    assert_int_equal(l->entries[4].st.version, find(m, "d/sub2/")->id);
    assert_int_equal(l->more, 0);
    mc_list_free(l);
    mc__master_free(m);
}

static void test_list_after_cursor_before_prefix(void **state)
{
    mc__master_t *m = new_master();
    const char *keys[] = {"a/x", "a0", "ab1", "ab2", "b1", "b2", "c"};

    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        put(m, keys[i], 64, T0);

    assert_list(m, "b", "b1", 0, "b2");
    assert_list(m, "b", "b", 0, "b1 b2");
    assert_list(m, "b", "c", 0, "");
    assert_list(m, "b", "b9", 0, "");
    /* A cursor that sorts before the prefix lists the whole prefix. */
    assert_list(m, "b", "a", 0, "b1 b2");
    assert_list(m, "b", "a/x", 0, "b1 b2");
    assert_list(m, "ab", "a", 0, "ab1 ab2");
    assert_list(m, "ab", "a0", 0, "ab1 ab2");
    assert_list(m, "", "ab2", 0, "b1 b2 c");
    /* A folded prefix as the cursor skips everything under it. */
    assert_list(m, "", "a/", '/', "a0 ab1 ab2 b1 b2 c");
    mc__master_free(m);
}

/* The folded listing of prefix computed from the undelimited one. */
/* ---- hard links ---- */

static mc__version_t *link_keys(mc__master_t *m, const char *from, const char *to)
{
    mc__version_t *v = NULL;
    assert_int_equal(mc__master_link(m, from, strlen(from), to, strlen(to), &v), 0);
    assert_non_null(v);
    return v;
}

static void test_link_shares_one_file(void **state)
{
    (void)state;
    mc__master_t *m = new_master();
    mc__version_t *v = put(m, "a", 128, T0);
    assert_ptr_equal(link_keys(m, "a", "d/b"), v);
    assert_ptr_equal(find(m, "a"), v);
    assert_ptr_equal(find(m, "d/b"), v);
    mc_stat_t st;
    mc__version_stat(v, T0, &st);
    assert_int_equal(st.nlink, 2);
    assert_int_not_equal(st.ino, 0);
    /* A new version through either name is the file's, under every name. */
    mc__version_t *w = put(m, "d/b", 256, T0 + 1);
    assert_ptr_equal(find(m, "a"), w);
    assert_int_equal(w->links, 2);
    mc_stat_t st2;
    mc__version_stat(w, T0, &st2);
    assert_int_equal(st2.ino, st.ino);
    assert_int_equal(used(m), 256);
    /* Listings show the names, never the inode key. */
    assert_list(m, "", NULL, '/', "a d/+");
    assert_list(m, "", NULL, 0, "a d/b");
    assert_list(m, "d/", NULL, '/', "d/b");
    /* A third name; removing names keeps the file until the last. */
    assert_ptr_equal(link_keys(m, "d/b", "c"), w);
    assert_int_equal(w->links, 3);
    assert_int_equal(mc__master_remove(m, "a", 1, 0, T0 + 2), 0);
    assert_null(find(m, "a"));
    assert_ptr_equal(find(m, "c"), w);
    assert_int_equal(w->links, 2);
    assert_int_equal(mc__master_remove(m, "c", 1, 0, T0 + 2), 0);
    assert_int_equal(used(m), 256);
    assert_int_equal(mc__master_remove(m, "d/b", 3, 0, T0 + 2), 0);
    assert_int_equal(used(m), 0);
    assert_int_equal(objects(m), 0);
    assert_list(m, "", NULL, 0, "");
    mc__master_free(m);
}

static void test_link_rename_rules(void **state)
{
    (void)state;
    mc__master_t *m = new_master();
    mc__version_t *v = put(m, "a", 64, T0);
    link_keys(m, "a", "b");
    /* Two names of one file: rename does nothing. */
    assert_int_equal(mc__master_rename(m, "b", 1, "a", 1, 0, T0), 0);
    assert_ptr_equal(find(m, "a"), v);
    assert_ptr_equal(find(m, "b"), v);
    assert_int_equal(v->links, 2);
    /* Another file over a name drops that name only. */
    mc__version_t *c = put(m, "c", 64, T0);
    assert_int_equal(mc__master_rename(m, "c", 1, "b", 1, 0, T0), 0);
    assert_ptr_equal(find(m, "b"), c);
    assert_int_equal(v->links, 1);
    /* A name moves like any key, also with its directory. */
    assert_int_equal(mc__master_rename(m, "a", 1, "d/a", 3, 0, T0), 0);
    assert_ptr_equal(find(m, "d/a"), v);
    assert_int_equal(mc__master_rename(m, "d/", 2, "e/", 2, MC_RENAME_PREFIX, T0), 0);
    assert_ptr_equal(find(m, "e/a"), v);
    /* A name over another file's name: the replaced file goes. */
    link_keys(m, "b", "b2");
    assert_int_equal(mc__master_rename(m, "e/a", 3, "b2", 2, 0, T0), 0);
    assert_ptr_equal(find(m, "b2"), v);
    assert_int_equal(c->links, 1);
    assert_int_equal(mc__master_remove(m, "b2", 2, 0, T0), 0);
    assert_int_equal(mc__master_remove(m, "b", 1, 0, T0), 0);
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

static void test_link_errors_and_inode_keys(void **state)
{
    (void)state;
    mc__master_t *m = new_master();
    mc__version_t *v = NULL;
    put(m, "a", 64, T0);
    put(m, "d/", 0, T0);
    assert_int_equal(mc__master_link(m, "x", 1, "y", 1, &v), -ENOENT);
    assert_int_equal(mc__master_link(m, "a", 1, "d/", 2, &v), -EPERM);
    assert_int_equal(mc__master_link(m, "d/", 2, "e", 1, &v), -EPERM);
    assert_int_equal(mc__master_link(m, "a", 1, "d/", 2, &v), -EPERM);
    put(m, "b", 64, T0);
    assert_int_equal(mc__master_link(m, "a", 1, "b", 1, &v), -EEXIST);
    link_keys(m, "a", "c");
    /* The inode key is the master's: no client changes it. */
    mc_list_t *l = NULL;
    const char *ik = find(m, "a")->key;
    assert_true(mc__master_is_inode_key(ik, strlen(ik)));
    assert_int_equal(mc__master_remove(m, ik, strlen(ik), 0, T0), -EINVAL);
    assert_int_equal(mc__master_rename(m, ik, strlen(ik), "z", 1, 0, T0), -EINVAL);
    assert_int_equal(mc__master_rename(m, "b", 1, ik, strlen(ik), 0, T0), -EINVAL);
    assert_int_equal(mc__master_link(m, ik, strlen(ik), "z", 1, &v), -EINVAL);
    assert_int_equal(mc__master_begin(m, ik, strlen(ik), NULL, T0, &v), -EINVAL);
    assert_int_equal(mc__master_list(m, "", 0, NULL, 0, 0, 100, T0, &l), 4); /* a b c d/ */
    mc_list_free(l);
    mc__master_free(m);
}

static void test_link_never_evicted(void **state)
{
    (void)state;
    mc__master_t *m = new_master_opts(SEG_SIZE, 90, 50);
    mc__version_t *v = put(m, "linked", 1024, T0);
    link_keys(m, "linked", "other");
    put(m, "plain", 1024, T0 + 1);
    assert_int_equal(mc__master_evict(m, 0, T0 + 10 * LEASE_MS), 1);
    assert_null(find(m, "plain"));
    assert_ptr_equal(find(m, "other"), v);
    mc__master_free(m);
}

static char *fold_reference(mc__master_t *m, const char *prefix, int delim)
{
    mc_list_t *l = NULL;
    size_t plen = strlen(prefix);

    int rc = mc__master_list(m, prefix, plen, NULL, 0, 0, 100000, T0, &l);
    assert_cmp(rc, >=, 0);
    assert_int_equal(l->more, 0);
    size_t cap = 1024, n = 0;
    char *s = malloc(cap), *last = NULL;
    s[0] = '\0';
    for (size_t i = 0; i < l->n; i++) {
        const char *k = l->entries[i].key;
        const char *d = delim ? strchr(k + plen, delim) : NULL;
        size_t kl = d ? (size_t)(d - k) + 1 : strlen(k);
        if (d && last && strlen(last) == kl && memcmp(last, k, kl) == 0)
            continue;
        if (!d && delim) {
            /* A directory of the same name shadows a file. */
            int shadowed = 0;
            for (size_t j = 0; j < l->n && !shadowed; j++) {
                const char *o = l->entries[j].key;
                shadowed = strlen(o) > kl && memcmp(o, k, kl) == 0 && o[kl] == delim;
            }
            if (shadowed)
                continue;
        }
        while (n + kl + 3 > cap)
            s = realloc(s, cap *= 2);
        n += (size_t)sprintf(s + n, "%s%.*s%s", n ? " " : "", (int)kl, k, d ? "+" : "");
        free(last);
        last = strndup(k, kl);
    }
    free(last);
    mc_list_free(l);
    return s;
}

static void test_list_paging(void **state)
{
    mc__master_t *m = new_master_opts(1 << 20, 0, 0);
    const char *keys[] = {"a",   "a.b",   "a/",    "a/1", "a/2/",   "a/2/x", "a/3/y/z", "a/4",
                          "a0",  "b/",    "b/c/",  "c",   "c/d",    "d/e/f", "d/e/g",   "d/f",
                          "e",   "e/",    "e/0/",  "e/1", "e/1/2/", "f/",    "f/a",     "f/b/",
                          "f/c", "f/c/d", "f/c/e", "g/",  "g/h/i",  "z"};
    const char *prefixes[] = {"", "a", "a/", "e/", "f/", "f/c", "q"};

    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        put(m, keys[i], 64, T0);

    for (size_t p = 0; p < sizeof(prefixes) / sizeof(prefixes[0]); p++) {
        for (int delim = 0; delim <= '/'; delim += '/') {
            char *want = fold_reference(m, prefixes[p], delim);
            for (size_t max = 1; max <= 7; max++) {
                /* Page with the cursor and join the pages. */
                size_t cap = 1024, n = 0, pages = 0;
                char *got = malloc(cap), *after = NULL;
                got[0] = '\0';
                for (;;) {
                    int more = 0;
                    char *next = NULL;
                    char *page = list_str(m, prefixes[p], after, delim, max, &more, &next);
                    while (n + strlen(page) + 2 > cap)
                        got = realloc(got, cap *= 2);
                    if (page[0])
                        n += (size_t)sprintf(got + n, "%s%s", n ? " " : "", page);
                    free(page);
                    free(after);
                    after = next;
                    assert_cmp(++pages, <, 100);
                    if (!more)
                        break;
                    assert_non_null(after);
                }
                free(after);
                if (strcmp(got, want) != 0)
                    print_error("prefix \"%s\" delim %d max %zu\n", prefixes[p], delim, max);
                assert_string_equal(got, want);
                free(got);
            }
            free(want);
        }
    }
    /* The undelimited reference itself is every key in byte order. */
    char *all = fold_reference(m, "", 0);
    assert_string_equal(all, "a a.b a/ a/1 a/2/ a/2/x a/3/y/z a/4 a0 b/ b/c/ c c/d d/e/f d/e/g "
                             "d/f e e/ e/0/ e/1 e/1/2/ f/ f/a f/b/ f/c f/c/d f/c/e g/ g/h/i z");
    free(all);
    mc__master_free(m);
}

static void test_list_more_flag(void **state)
{
    mc__master_t *m = new_master();
    int more = -1;
    char *next = NULL;

    put(m, "a", 64, T0);
    put(m, "b", 64, T0);
    char *s = list_str(m, "", NULL, 0, 2, &more, &next);
    assert_string_equal(s, "a b");
    /* Exactly max entries and nothing after: no more. */
    assert_int_equal(more, 0);
    free(s);
    free(next);
    s = list_str(m, "", NULL, 0, 1, &more, &next);
    assert_string_equal(s, "a");
    assert_int_equal(more, 1);
    assert_string_equal(next, "a");
    free(s);
    free(next);
    mc__master_free(m);
}

/* ---- space, eviction ---- */

#define OBJ 640              /* ten units */
#define SMALL_SEG (OBJ * 10) /* room for ten objects */

/* Which of the one-character keys in keys exist, as a string. */
static const char *present(mc__master_t *m, const char *keys)
{
    static char got[256];
    char k[2] = {0, 0};

    got[0] = '\0';
    for (const char *p = keys; *p; p++) {
        k[0] = *p;
        if (find(m, k))
            strncat(got, k, sizeof(got) - strlen(got) - 1);
    }
    return got;
}

#define assert_present(m, keys, want) assert_string_equal(present(m, keys), want)

static void test_evict_lru_order(void **state)
{
    /* Evict above 90% down to 80%. */
    mc__master_t *m = new_master_opts(SMALL_SEG, 90, 10);
    char key[2] = "0";
    uint64_t now = T0;

    /* 0..8: 90%, not above the mark. */
    for (int i = 0; i < 9; i++, key[0]++)
        put_pin(m, key, OBJ, i == 2 ? MC_PIN_SOFT : i == 4 ? MC_PIN_HARD : MC_PIN_NONE, now++);
    assert_int_equal(used(m), 9 * OBJ);
    assert_int_equal(evicted(m), 0);
    /* LRU order from 0..8 to 2 3 4 6 7 8 0 1 5: 5 leased, 3 held open. */
    mc__master_touch(m, find(m, "0"), now++, 0);
    mc__master_touch(m, find(m, "1"), now++, 0);
    mc__master_touch(m, find(m, "5"), now, 1);
    mc__version_t *v3 = find(m, "3");
    mc__master_ref(v3);

    /* 100%: down to 80% by evicting the two least recently used that can go. */
    put(m, "A", OBJ, now);
    assert_int_equal(evicted(m), 2);
    assert_present(m, "012345678AB", "0123458A");
    assert_int_equal(used(m), 8 * OBJ);

    /* Three objects do not fit: room for one is made first (8), then the
     * store is back above the mark and 0, 1 go. */
    mc__version_t *v = NULL;
    assert_int_equal(mc__master_begin(m, "B", 1, NULL, now, &v), 0);
    assert_int_equal(mc__master_reserve(m, v, 3 * OBJ, now), 0);
    assert_int_equal(evicted(m), 5);
    assert_present(m, "012345678AB", "2345A");
    assert_int_equal(used(m), 8 * OBJ);
    assert_int_equal(mc__master_commit(m, v, 3 * OBJ, 0, now), 0);

    mc__master_unref(m, v3, now);
    mc__master_free(m);
}

static void test_evict_soft_pin_last(void **state)
{
    mc__master_t *m = new_master_opts(SMALL_SEG, 90, 30);
    uint64_t now = T0;

    /* Oldest first: s (soft), h (hard), l (leased), u, v (unpinned). */
    put_pin(m, "s", 2 * OBJ, MC_PIN_SOFT, now++);
    put_pin(m, "h", 2 * OBJ, MC_PIN_HARD, now++);
    put(m, "l", OBJ, now++);
    put(m, "u", OBJ, now++);
    put(m, "v", OBJ, now++);
    mc__master_touch(m, find(m, "l"), T0, 1); /* leased until T0 + LEASE_MS */
    assert_int_equal(used(m), 7 * OBJ);

    /* 3 more: 100% > 90%, down to 60%: u, v, then the soft pin s. */
    mc__version_t *w = NULL;
    assert_int_equal(mc__master_begin(m, "w", 1, NULL, now, &w), 0);
    assert_int_equal(mc__master_reserve(m, w, 3 * OBJ, now), 0);
    assert_present(m, "shluvw", "hl");
    assert_int_equal(used(m), 6 * OBJ);
    assert_int_equal(evicted(m), 3);
    assert_int_equal(mc__master_commit(m, w, 3 * OBJ, MC_PUT_NOREPLACE, now), 0);

    /* Nothing else can go: the hard pin never, the lease not yet. */
    assert_int_equal(mc__master_evict(m, 0, now), 1); /* only w */
    assert_present(m, "shluvw", "hl");
    assert_int_equal(mc__master_evict(m, 0, T0 + LEASE_MS), 1); /* l, now expired */
    assert_present(m, "shluvw", "h");
    assert_int_equal(used(m), 2 * OBJ);
    mc__master_free(m);
}

static void test_evict_soft_pin_ttl(void **state)
{
    mc__master_t *m = new_master_opts(SMALL_SEG, 90, 10);
    mc_put_opts_t po = {.pin = MC_PIN_SOFT, .soft_pin_ttl_ms = 50};
    mc__version_t *v = NULL;
    mc_stat_t st;

    assert_int_equal(mc__master_begin(m, "s", 1, &po, T0, &v), 0);
    assert_int_equal(mc__master_reserve(m, v, OBJ, T0), 0);
    assert_int_equal(mc__master_commit(m, v, OBJ, 0, T0), 0);
    put(m, "u", OBJ, T0);
    mc__version_stat(v, T0 + 49, &st);
    assert_int_equal(st.flags, MC_STAT_SOFT_PIN);
    /* Still pinned: u goes first even though s is older. */
    assert_int_equal(mc__master_evict(m, OBJ, T0 + 49), 1);
    assert_present(m, "su", "s");
    put(m, "u", OBJ, T0 + 49);
    /* Expired: an ordinary object again, evicted in LRU order. */
    mc__version_stat(v, T0 + 50, &st);
    assert_int_equal(st.flags, 0);
    assert_int_equal(mc__master_evict(m, OBJ, T0 + 50), 1);
    assert_present(m, "su", "u");
    mc__master_free(m);
}

static void test_no_eviction_enospc(void **state)
{
    mc__master_t *m = new_master_opts(SMALL_SEG, 0, 0);
    char key[2] = "0";

    for (int i = 0; i < 10; i++, key[0]++)
        put(m, key, OBJ, T0);
    assert_int_equal(used(m), SMALL_SEG);

    mc__version_t *v = NULL;
    assert_int_equal(mc__master_begin(m, "x", 1, NULL, T0, &v), 0);
    assert_int_equal(mc__master_reserve(m, v, 64, T0), -ENOSPC);
    assert_int_equal(v->capacity, 0);
    assert_int_equal(evicted(m), 0);
    assert_int_equal(objects(m), 10);
    assert_int_equal(used(m), SMALL_SEG);
    /* Freeing one makes room; a failed growth leaves the reservation as is. */
    assert_int_equal(mc__master_remove(m, "0", 1, 0, T0), 0);
    assert_int_equal(mc__master_reserve(m, v, OBJ, T0), 0);
    assert_int_equal(mc__master_reserve(m, v, 2 * OBJ, T0), -ENOSPC);
    assert_int_equal(v->capacity, OBJ);
    assert_int_equal(used(m), SMALL_SEG);
    mc__master_abort(m, v);
    assert_int_equal(used(m), SMALL_SEG - OBJ);
    mc__master_free(m);
}

/* More than the whole store is ENOSPC, as on any file system: EFBIG is for
 * past the largest file size (issue 10). */
static void test_reserve_past_store_is_enospc(void **state)
{
    mc__master_t *m = new_master_opts(SMALL_SEG, 90, 10);
    mc__version_t *v = NULL;

    put(m, "a", OBJ, T0);
    assert_int_equal(mc__master_begin(m, "x", 1, NULL, T0, &v), 0);
    assert_int_equal(mc__master_reserve(m, v, SMALL_SEG + 1, T0), -ENOSPC);
    assert_int_equal(v->capacity, 0);
    /* Larger than the whole store is refused before anything is evicted. */
    assert_int_equal(evicted(m), 0);
    assert_non_null(find(m, "a"));
    mc__master_abort(m, v);
    assert_int_equal(used(m), OBJ);
    mc__master_free(m);
}

static void test_abort_returns_space(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *v = NULL;

    assert_int_equal(mc__master_begin(m, "k", 1, NULL, T0, &v), 0);
    /* Grow in steps, as a streaming writer does. */
    for (uint64_t c = 64; c <= 64 * 100; c += 64 * 7)
        assert_int_equal(mc__master_reserve(m, v, c, T0), 0);
    assert_int_equal(used(m), v->capacity);
    assert_cmp(used(m), >, 0);
    mc__master_abort(m, v);
    assert_int_equal(used(m), 0);
    assert_int_equal(objects(m), 0);
    mc__master_free(m);
}

static void test_set_key(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *v = NULL;

    assert_int_equal(mc__master_begin(m, "old", 3, NULL, T0, &v), 0);
    assert_int_equal(mc__master_set_key(m, v, "", 0), -EINVAL);
    assert_int_equal(mc__master_set_key(m, v, "new", 3), 0);
    assert_int_equal(mc__master_commit(m, v, 0, 0, T0), 0);
    assert_null(find(m, "old"));
    assert_ptr_equal(find(m, "new"), v);
    mc__master_free(m);
}

static void test_replicas_on_distinct_segments(void **state)
{
    mc__master_t *m = new_master();
    mc_put_opts_t po = {.replica_num = 3};
    mc__version_t *v = NULL;

    assert_int_equal(mc__master_add_segment(m, 0, SEG_SIZE), -EEXIST);
    assert_int_equal(mc__master_add_segment(m, 7, SEG_SIZE), 0);
    assert_int_equal(mc__master_begin(m, "k", 1, &po, T0, &v), 0);
    assert_int_equal(v->nrep, 2); /* no more replicas than segments */
    assert_int_not_equal(v->rep[0].seg, v->rep[1].seg);
    assert_int_equal(mc__master_reserve(m, v, 640, T0), 0);
    assert_int_equal(used(m), 2 * 640);
    assert_int_equal(mc__master_commit(m, v, 100, 0, T0), 0);
    assert_int_equal(used(m), 2 * 128);
    assert_int_equal(mc__master_remove(m, "k", 1, 0, T0), 0);
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

/* A node's segment goes away: objects keep their other replicas, objects
 * with none left disappear, pending writes lose that replica. */
static void test_drop_segment(void **state)
{
    mc__master_t *m = new_master();
    mc_put_opts_t two = {.replica_num = 2}, one = {.replica_num = 1};
    mc__version_t *a = NULL, *b = NULL, *p = NULL;

    assert_int_equal(mc__master_add_segment(m, 7, SEG_SIZE), 0);
    assert_int_equal(mc__master_begin(m, "two", 3, &two, T0, &a), 0);
    assert_int_equal(mc__master_reserve(m, a, 128, T0), 0);
    assert_int_equal(mc__master_commit(m, a, 100, 0, T0), 0);
    /* Segment 7 has the most free space now? Both equal after "two":
     * place "one" explicitly by filling segment 0 less. */
    assert_int_equal(mc__master_begin(m, "one", 3, &one, T0, &b), 0);
    uint32_t b_seg = b->rep[0].seg;
    assert_int_equal(mc__master_reserve(m, b, 128, T0), 0);
    assert_int_equal(mc__master_commit(m, b, 10, 0, T0), 0);
    assert_int_equal(mc__master_begin(m, "pending", 7, &two, T0, &p), 0);
    assert_int_equal(mc__master_reserve(m, p, 128, T0), 0);

    mc__version_drop_replica(p, b_seg);
    assert_int_equal(p->nrep, 1);
    assert_int_equal(mc__master_drop_segment(m, b_seg, T0), 1);
    assert_int_equal(mc__master_has_segment(m, b_seg), 0);
    assert_null(find(m, "one"));
    assert_ptr_equal(find(m, "two"), a);
    assert_int_equal(a->nrep, 1);
    assert_int_not_equal(a->rep[0].seg, b_seg);
    /* The pending write can still grow and publish on the survivor. */
    assert_int_equal(mc__master_reserve(m, p, 4096, T0), 0);
    assert_int_equal(mc__master_commit(m, p, 4000, 0, T0), 0);
    assert_int_equal(mc__master_drop_segment(m, 12345, T0), 0);
    /* With no segment left, nothing can be placed. */
    mc__master_drop_segment(m, a->rep[0].seg, T0);
    assert_null(find(m, "two"));
    assert_int_equal(mc__master_begin(m, "x", 1, &one, T0, &p), -ENOSPC);
    mc__master_free(m);
}

/* A preferred segment gets the first replica when it is mounted and has
 * room for the capacity asked; the other replicas go elsewhere as usual;
 * an unknown or full preferred segment falls back to best effort. */
static void test_preferred_segment(void **state)
{
    mc__master_t *m = new_master();
    mc_put_opts_t one = {.replica_num = 1}, three = {.replica_num = 3};
    mc__version_t *v = NULL;

    assert_int_equal(mc__master_add_segment(m, 7, SEG_SIZE), 0);
    assert_int_equal(mc__master_add_segment(m, 9, 2 * SEG_SIZE), 0);
    /* Best effort alone picks 9 (most free); the preference wins. */
    for (uint32_t want = 0; want <= 9; want += 7) {
        assert_int_equal(mc__master_begin_at(m, "k", 1, &one, want, 128, T0, &v), 0);
        assert_int_equal(v->nrep, 1);
        assert_int_equal(v->rep[0].seg, want);
        assert_int_equal(mc__master_reserve(m, v, 128, T0), 0);
        assert_int_equal(mc__master_commit(m, v, 100, 0, T0), 0);
    }
    assert_int_equal(mc__master_begin_at(m, "k", 1, &three, 7, 64, T0, &v), 0);
    assert_int_equal(v->nrep, 3);
    assert_int_equal(v->rep[0].seg, 7);
    assert_int_not_equal(v->rep[1].seg, 7);
    assert_int_not_equal(v->rep[2].seg, 7);
    assert_int_not_equal(v->rep[1].seg, v->rep[2].seg);
    mc__master_abort(m, v);
    /* Unknown segment, no preference: best effort (9, the most free). */
    assert_int_equal(mc__master_begin_at(m, "k", 1, &one, 12345, 64, T0, &v), 0);
    assert_int_equal(v->rep[0].seg, 9);
    mc__master_abort(m, v);
    assert_int_equal(mc__master_begin_at(m, "k", 1, &one, -1, 64, T0, &v), 0);
    assert_int_equal(v->rep[0].seg, 9);
    mc__master_abort(m, v);
    /* No room on the preferred segment for the capacity: elsewhere. */
    assert_int_equal(mc__master_begin_at(m, "k", 1, &one, 7, SEG_SIZE, T0, &v), 0);
    assert_int_equal(v->rep[0].seg, 9);
    mc__master_abort(m, v);
    mc__master_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_publishes),
        cmocka_unit_test(test_holes),
        cmocka_unit_test(test_root_directory),
        cmocka_unit_test(test_empty_object),
        cmocka_unit_test(test_begin_bad_key),
        cmocka_unit_test(test_begin_without_segment),
        cmocka_unit_test(test_commit_noreplace),
        cmocka_unit_test(test_commit_size_over_capacity),
        cmocka_unit_test(test_replace_bumps_version_and_frees_old),
        cmocka_unit_test(test_ref_holds_replaced_version),
        cmocka_unit_test(test_ref_and_lease_on_replaced_version),
        cmocka_unit_test(test_lease_blocks_remove),
        cmocka_unit_test(test_lease_expires),
        cmocka_unit_test(test_ref_blocks_remove),
        cmocka_unit_test(test_remove_dir),
        cmocka_unit_test(test_rename_one),
        cmocka_unit_test(test_rename_prefix),
        cmocka_unit_test(test_rename_prefix_keeps_refs_and_leases),
        cmocka_unit_test(test_list_delimiter),
        cmocka_unit_test(test_link_shares_one_file),
        cmocka_unit_test(test_link_rename_rules),
        cmocka_unit_test(test_link_errors_and_inode_keys),
        cmocka_unit_test(test_link_never_evicted),
        cmocka_unit_test(test_list_after_cursor_before_prefix),
        cmocka_unit_test(test_list_paging),
        cmocka_unit_test(test_list_more_flag),
        cmocka_unit_test(test_evict_lru_order),
        cmocka_unit_test(test_evict_soft_pin_last),
        cmocka_unit_test(test_evict_soft_pin_ttl),
        cmocka_unit_test(test_no_eviction_enospc),
        cmocka_unit_test(test_reserve_past_store_is_enospc),
        cmocka_unit_test(test_abort_returns_space),
        cmocka_unit_test(test_set_key),
        cmocka_unit_test(test_replicas_on_distinct_segments),
        cmocka_unit_test(test_drop_segment),
        cmocka_unit_test(test_preferred_segment),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
