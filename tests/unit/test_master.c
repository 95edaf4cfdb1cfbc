/*
 * test_master.c - unit tests for the metadata master (core/src/master/),
 * its namespace: the root directory, leases and remove, rename, listings
 * and hard links. Puts, space and eviction are test_master_space.c; the
 * fixture both use is master_fixture.h.
 */
#include "master_fixture.h"

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

/* ---- leases and remove ---- */

static void test_lease_blocks_remove(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *v = put(m, "k", 640, T0);
    mc_stat_t st;

    mc__master_touch(m, v, T0, 1);
    mc__version_stat(m, v, T0, &st);
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
    assert_int_equal(mc__version_lease(m, v), T0 + 50 + LEASE_MS);
    assert_int_equal(mc__master_remove(m, "k", 1, 0, T0 + 50 + LEASE_MS - 1), -EBUSY);
    assert_int_equal(mc__master_remove(m, "k", 1, 0, T0 + 50 + LEASE_MS), 0);
    assert_int_equal(used(m), 0);
    mc__master_free(m);
}

static void test_ref_blocks_remove(void **state)
{
    mc__master_t *m = new_master();
    mc__version_t *v = put(m, "k", 64, T0);

    assert_int_equal(mc__master_ref(m, v), 0);
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
    assert_string_equal(mc__vkey(a), "c");
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
    assert_string_equal(mc__vkey(z), "b/y/z");
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

    assert_int_equal(mc__master_ref(m, x), 0);
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
    mc__version_stat(m, v, T0, &st);
    assert_int_equal(st.nlink, 2);
    assert_int_not_equal(st.ino, 0);
    /* A new version through either name is the file's, under every name. */
    mc__version_t *w = put(m, "d/b", 256, T0 + 1);
    assert_ptr_equal(find(m, "a"), w);
    assert_int_equal(mc__vmore(w)->links, 2);
    mc_stat_t st2;
    mc__version_stat(m, w, T0, &st2);
    assert_int_equal(st2.ino, st.ino);
    assert_int_equal(used(m), 256);
    /* Listings show the names, never the inode key. */
    assert_list(m, "", NULL, '/', "a d/+");
    assert_list(m, "", NULL, 0, "a d/b");
    assert_list(m, "d/", NULL, '/', "d/b");
    /* A third name; removing names keeps the file until the last. */
    assert_ptr_equal(link_keys(m, "d/b", "c"), w);
    assert_int_equal(mc__vmore(w)->links, 3);
    assert_int_equal(mc__master_remove(m, "a", 1, 0, T0 + 2), 0);
    assert_null(find(m, "a"));
    assert_ptr_equal(find(m, "c"), w);
    assert_int_equal(mc__vmore(w)->links, 2);
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
    assert_int_equal(mc__vmore(v)->links, 2);
    /* Another file over a name drops that name only. */
    mc__version_t *c = put(m, "c", 64, T0);
    assert_int_equal(mc__master_rename(m, "c", 1, "b", 1, 0, T0), 0);
    assert_ptr_equal(find(m, "b"), c);
    assert_int_equal(mc__vmore(v)->links, 1);
    /* A name moves like any key, also with its directory. */
    assert_int_equal(mc__master_rename(m, "a", 1, "d/a", 3, 0, T0), 0);
    assert_ptr_equal(find(m, "d/a"), v);
    assert_int_equal(mc__master_rename(m, "d/", 2, "e/", 2, MC_RENAME_PREFIX, T0), 0);
    assert_ptr_equal(find(m, "e/a"), v);
    /* A name over another file's name: the replaced file goes. */
    link_keys(m, "b", "b2");
    assert_int_equal(mc__master_rename(m, "e/a", 3, "b2", 2, 0, T0), 0);
    assert_ptr_equal(find(m, "b2"), v);
    assert_int_equal(mc__vmore(c)->links, 1);
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
    const char *ik = mc__vkey(find(m, "a"));
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

/* A hard-linked file lost with its node leaves its names (ENOENT); a
 * version written through one of them brings the file back under every
 * name left, and it stays until its last name goes: removing another name
 * keeps the version just written. */
static void test_link_lost_then_written_again(void **state)
{
    (void)state;
    mc__master_t *m = new_master();
    put(m, "a", 128, T0);
    link_keys(m, "a", "b");
    link_keys(m, "a", "c");
    assert_int_equal(mc__master_add_segment(m, 1, SEG_SIZE), 0);
    assert_int_equal(mc__master_drop_segment(m, 0, T0), 1);
    assert_null(find(m, "a"));
    assert_null(find(m, "b"));
    mc__version_t *w = put(m, "a", 256, T0 + 1);
    assert_ptr_equal(find(m, "b"), w);
    assert_int_equal(mc__master_remove(m, "b", 1, 0, T0 + 2), 0);
    assert_ptr_equal(find(m, "a"), w);
    assert_ptr_equal(find(m, "c"), w);
    assert_int_equal(mc__master_remove(m, "c", 1, 0, T0 + 2), 0);
    assert_ptr_equal(find(m, "a"), w);
    assert_int_equal(mc__master_remove(m, "a", 1, 0, T0 + 2), 0);
    assert_int_equal(used(m), 0);
    assert_int_equal(objects(m), 0);
    mc__master_free(m);
}

/* The folded listing of prefix computed from the undelimited one. */

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

/* MC_PUT_NOTDIR: a commit fails with -EISDIR when a directory of the
 * key's name is there (its marker, or keys under it), as a mount would
 * show it instead of the file; a key that merely starts the same does
 * not count. */
static void test_put_notdir(void **state)
{
    (void)state;
    mc__master_t *m = new_master();
    const char *cases[][2] = {{"d/", "d"}, {"e/x", "e"}, {"fx", NULL}, {"g.x", NULL}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        put(m, cases[i][0], 10, T0);
        const char *key = cases[i][1] ? cases[i][1] : i == 2 ? "f" : "g";
        mc__version_t *v = NULL;
        assert_int_equal(mc__master_begin(m, key, strlen(key), NULL, T0, &v), 0);
        assert_int_equal(mc__master_reserve(m, v, 10, T0), 0);
        int rc = mc__master_commit(m, v, 10, MC_PUT_NOTDIR, T0);
        if (cases[i][1]) {
            assert_int_equal(rc, -EISDIR);
            assert_null(find(m, key));
            mc__master_abort(m, v);
        } else {
            assert_int_equal(rc, 0);
            assert_ptr_equal(find(m, key), v);
        }
    }
    mc__master_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_root_directory),
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
        cmocka_unit_test(test_link_lost_then_written_again),
        cmocka_unit_test(test_list_after_cursor_before_prefix),
        cmocka_unit_test(test_list_paging),
        cmocka_unit_test(test_list_more_flag),
        cmocka_unit_test(test_put_notdir),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
