/*
 * test_store.c - unit tests of the public store API (mooncake.h) through a
 * real embedded store: whole objects, space, opening, the rules of async
 * calls, listing, threads, a caller-supplied loop and registered buffers.
 * The streaming writers and the read handles are test_store_handles.c; the
 * harness both use is store_harness.h.
 */
#include <sys/wait.h>
#include <unistd.h>

#include "store_harness.h"

/* ---- whole objects ---- */

static void test_put_get_round_trip(void **state)
{
    mc_store_t *s = *state;
    size_t len = 100000;
    char *val = pattern(len, 1), *buf = malloc(len + 100);
    mc_stat_t st;

    assert_int_equal(mc_put(s, K("obj"), val, len, NULL), 0);
    memset(&st, 0xee, sizeof(st));
    assert_int_equal(mc_get(s, K("obj"), 0, buf, len + 100, &st), (int)len);
    assert_memory_equal(buf, val, len);
    assert_int_equal(st.size, len);
    assert_cmp(st.version, >, 0);
    assert_int_equal(st.mode, 0644);
    assert_int_equal(st.replicas, 1);
    assert_int_equal(st.flags, MC_STAT_LEASED); /* get grants a read lease */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now_ns = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    assert_cmp(st.mtime_ns, <=, now_ns);
    assert_cmp(st.mtime_ns, >, now_ns - 60LL * 1000000000LL);

    /* Ranges, a short read at the end, nothing at or past the end. */
    assert_int_equal(mc_get(s, K("obj"), 1000, buf, 5000, NULL), 5000);
    assert_memory_equal(buf, val + 1000, 5000);
    assert_int_equal(mc_get(s, K("obj"), len - 10, buf, 100, NULL), 10);
    assert_memory_equal(buf, val + len - 10, 10);
    assert_int_equal(mc_get(s, K("obj"), len, buf, 100, &st), 0);
    assert_int_equal(st.size, len);
    assert_int_equal(mc_get(s, K("obj"), len + 12345, buf, 100, NULL), 0);
    /* A buffer too small: filled, and st says how big the object is. */
    assert_int_equal(mc_get(s, K("obj"), 0, buf, 10, &st), 10);
    assert_memory_equal(buf, val, 10);
    assert_int_equal(st.size, len);

    /* An empty object. */
    assert_int_equal(mc_put(s, K("empty"), NULL, 0, NULL), 0);
    assert_int_equal(mc_get(s, K("empty"), 0, buf, 10, &st), 0);
    assert_int_equal(st.size, 0);
    assert_int_equal(mc_get(s, K("missing"), 0, buf, 10, &st), -ENOENT);
    free(val);
    free(buf);
}

static void test_put_opts(void **state)
{
    mc_store_t *s = *state;
    mc_put_opts_t po = {.mode = 0100600, .mtime_ns = 1234567890123LL, .pin = MC_PIN_HARD};
    mc_stat_t st;

    assert_int_equal(mc_put(s, K("k"), "v", 1, &po), 0);
    assert_int_equal(mc_stat(s, K("k"), &st), 0);
    assert_int_equal(st.mode, 0600);
    assert_int_equal(st.mtime_ns, 1234567890123LL);
    assert_int_equal(st.flags, MC_STAT_HARD_PIN);
    po.flags = MC_PUT_NOREPLACE;
    assert_int_equal(mc_put(s, K("k"), "w", 1, &po), -EEXIST);
    char c = 0;
    assert_int_equal(mc_get(s, K("k"), 0, &c, 1, NULL), 1);
    assert_int_equal(c, 'v');
}

static void test_putv_gathers(void **state)
{
    mc_store_t *s = *state;
    char *a = pattern(3000, 2), *b = pattern(7, 3), *c = pattern(65536, 4);
    struct iovec iov[4] = {{a, 3000}, {NULL, 0}, {b, 7}, {c, 65536}};
    size_t len = 3000 + 7 + 65536;
    char *buf = malloc(len);

    assert_int_equal(mc_putv(s, K("v"), iov, 4, NULL), 0);
    assert_int_equal(mc_get(s, K("v"), 0, buf, len, NULL), (int)len);
    assert_memory_equal(buf, a, 3000);
    assert_memory_equal(buf + 3000, b, 7);
    assert_memory_equal(buf + 3007, c, 65536);
    assert_int_equal(mc_putv(s, K("none"), NULL, 0, NULL), 0);
    mc_stat_t st;
    assert_int_equal(mc_stat(s, K("none"), &st), 0);
    assert_int_equal(st.size, 0);
    assert_int_equal(mc_putv(s, K("bad"), NULL, 1, NULL), -EINVAL);
    assert_int_equal(mc_putv(s, K("bad"), iov, -1, NULL), -EINVAL);
    free(a);
    free(b);
    free(c);
    free(buf);
}

static void test_stat_and_versions(void **state)
{
    mc_store_t *s = *state;
    mc_stat_t st1, st2;

    assert_int_equal(mc_stat(s, K("k"), &st1), -ENOENT);
    assert_int_equal(put_str(s, "k", "hello"), 0);
    assert_int_equal(mc_stat(s, K("k"), &st1), 0);
    assert_int_equal(st1.size, 5);
    assert_int_equal(st1.flags, 0); /* stat grants no lease */
    assert_int_equal(put_str(s, "k", "hello, world"), 0);
    assert_int_equal(mc_stat(s, K("k"), &st2), 0);
    assert_int_equal(st2.size, 12);
    assert_cmp(st2.version, >, st1.version);
}

/* The mc_xattr_* calls through the client: getxattr(2)'s size rules (0:
 * the size; too small: -ERANGE), the master's errors, and the attributes
 * kept by a new put of the key. */
static void test_xattr_calls(void **state)
{
    mc_store_t *s = *state;
    char buf[64];
    assert_int_equal(mc_xattr_set(s, K("nope"), "user.a", "1", 1, 0), -ENOENT);
    assert_int_equal(mc_put(s, K("x"), "v", 1, NULL), 0);
    assert_int_equal(mc_xattr_set(s, K("x"), "user.a", "hello", 5, MC_XATTR_CREATE), 0);
    assert_int_equal(mc_xattr_set(s, K("x"), "user.a", "x", 1, MC_XATTR_CREATE), -EEXIST);
    assert_int_equal(mc_xattr_set(s, K("x"), "user.b", "x", 1, MC_XATTR_REPLACE), -ENODATA);
    assert_int_equal(mc_xattr_set(s, K("x"), "user.b", "", 0, 0), 0);
    assert_int_equal(mc_xattr_get(s, K("x"), "user.a", NULL, 0), 5);
    assert_int_equal(mc_xattr_get(s, K("x"), "user.a", buf, 4), -ERANGE);
    assert_int_equal(mc_xattr_get(s, K("x"), "user.a", buf, sizeof(buf)), 5);
    assert_memory_equal(buf, "hello", 5);
    assert_int_equal(mc_xattr_get(s, K("x"), "user.c", buf, sizeof(buf)), -ENODATA);
    assert_int_equal(mc_xattr_list(s, K("x"), NULL, 0), 14);
    assert_int_equal(mc_xattr_list(s, K("x"), buf, 13), -ERANGE);
    assert_int_equal(mc_xattr_list(s, K("x"), buf, sizeof(buf)), 14);
    assert_memory_equal(buf, "user.a\0user.b\0", 14);
    assert_int_equal(mc_xattr_set(s, K("x"), "user.big", buf, MC_XATTR_SIZE_MAX + 1, 0), -E2BIG);
    assert_int_equal(mc_put(s, K("x"), "new", 3, NULL), 0);
    assert_int_equal(mc_xattr_get(s, K("x"), "user.a", buf, sizeof(buf)), 5);
    assert_int_equal(mc_xattr_remove(s, K("x"), "user.a"), 0);
    assert_int_equal(mc_xattr_remove(s, K("x"), "user.a"), -ENODATA);
    assert_int_equal(mc_xattr_list(s, K("x"), buf, sizeof(buf)), 7);
}

static void test_remove(void **state)
{
    mc_store_t *s = *state;
    char buf[8];
    mc_stat_t st;

    assert_int_equal(put_str(s, "k", "v"), 0);
    assert_int_equal(mc_remove(s, K("k"), 0), 0);
    assert_int_equal(mc_remove(s, K("k"), 0), -ENOENT);
    assert_int_equal(mc_get(s, K("k"), 0, buf, sizeof(buf), NULL), -ENOENT);
    assert_int_equal(mc_stat(s, K("k"), &st), -ENOENT);
    /* A get leases the object: removal needs force until the lease ends. */
    assert_int_equal(put_str(s, "k", "v"), 0);
    assert_int_equal(mc_get(s, K("k"), 0, buf, sizeof(buf), NULL), 1);
    assert_int_equal(mc_remove(s, K("k"), 0), -EBUSY);
    assert_int_equal(mc_remove(s, K("k"), MC_REMOVE_FORCE), 0);
    assert_int_equal(mc_stat(s, K("k"), &st), -ENOENT);
    /* Directory markers. */
    assert_int_equal(put_str(s, "d/", ""), 0);
    assert_int_equal(put_str(s, "d/f", "x"), 0);
    assert_int_equal(mc_remove(s, K("d/"), MC_REMOVE_DIR), -ENOTEMPTY);
    assert_int_equal(mc_remove(s, K("d/f"), 0), 0);
    assert_int_equal(mc_remove(s, K("d/"), MC_REMOVE_DIR), 0);
}

static void test_rename(void **state)
{
    mc_store_t *s = *state;
    char buf[8] = "";

    assert_int_equal(put_str(s, "a/x", "1"), 0);
    assert_int_equal(put_str(s, "a/", ""), 0);
    assert_int_equal(put_str(s, "b", "2"), 0);
    assert_int_equal(mc_rename(s, K("b"), K("c"), 0), 0);
    assert_int_equal(mc_rename(s, K("b"), K("c"), 0), -ENOENT);
    assert_int_equal(mc_rename(s, K("c"), K("a/x"), MC_RENAME_NOREPLACE), -EEXIST);
    assert_int_equal(mc_rename(s, K("a/"), K("z/"), MC_RENAME_PREFIX), 0);
    assert_int_equal(mc_get(s, K("z/x"), 0, buf, sizeof(buf), NULL), 1);
    assert_string_equal(buf, "1");
    assert_int_equal(mc_rename(s, K("z/"), K("z/y/"), MC_RENAME_PREFIX), -EINVAL);
    assert_int_equal(mc_rename(s, K(""), K("q"), 0), -EINVAL);
}

/* For calls that must fail without calling back. */
static void never_cb(void *arg, int result)
{
    fprintf(stderr, "a failed call called back with %d\n", result);
    abort();
}

static void test_key_checks(void **state)
{
    mc_store_t *s = *state;
    static char big[MC_KEY_MAX + 1];
    char buf[4];
    mc_stat_t st;
    mc_obj_t *o = NULL;
    mc_writer_t *w = NULL;
    int calls = 0;

    memset(big, 'k', sizeof(big));
    assert_int_equal(mc_key_check("", 0), -EINVAL);
    assert_int_equal(mc_key_check(NULL, 1), -EINVAL);
    assert_int_equal(mc_key_check("a\0b", 3), -EINVAL);
    assert_int_equal(mc_key_check(big, MC_KEY_MAX + 1), -ENAMETOOLONG);
    assert_int_equal(mc_key_check(big, MC_KEY_MAX), 0);

    assert_int_equal(mc_put(s, "", 0, "v", 1, NULL), -EINVAL);
    assert_int_equal(mc_put(s, big, MC_KEY_MAX + 1, "v", 1, NULL), -ENAMETOOLONG);
    assert_int_equal(mc_put(s, "a\0b", 3, "v", 1, NULL), -EINVAL);
    assert_int_equal(mc_get(s, "", 0, 0, buf, 4, NULL), -EINVAL);
    assert_int_equal(mc_get(s, big, MC_KEY_MAX + 1, 0, buf, 4, NULL), -ENAMETOOLONG);
    assert_int_equal(mc_stat(s, "a\0", 2, &st), -EINVAL);
    assert_int_equal(mc_remove(s, big, MC_KEY_MAX + 1, 0), -ENAMETOOLONG);
    assert_int_equal(mc_rename(s, K("a"), big, MC_KEY_MAX + 1, 0), -ENAMETOOLONG);
    /* A failing async call never calls its callback. */
    assert_int_equal(mc_obj_open_async(s, "", 0, &o, never_cb, &calls), -EINVAL);
    assert_int_equal(mc_writer_open_async(s, big, MC_KEY_MAX + 1, NULL, NULL, &w, never_cb, &calls),
                     -ENAMETOOLONG);
    assert_null(o);
    assert_null(w);

    /* The longest key works. */
    assert_int_equal(mc_put(s, big, MC_KEY_MAX, "v", 1, NULL), 0);
    assert_int_equal(mc_get(s, big, MC_KEY_MAX, 0, buf, 4, NULL), 1);
    /* Keys are bytes: binary and non-NUL high bytes are fine. */
    assert_int_equal(mc_put(s, "\xff\x01", 2, "b", 1, NULL), 0);
    assert_int_equal(mc_get(s, "\xff\x01", 2, 0, buf, 4, NULL), 1);
}

static void test_put_too_big(void **state)
{
    mc_store_t *s = *state;
    size_t len = SEG + 1;
    char *val = calloc(1, len);

    assert_int_equal(mc_put(s, K("big"), val, len, NULL), -ENOSPC);
    assert_int_equal(mc_stat(s, K("big"), &(mc_stat_t){0}), -ENOENT);
    assert_int_equal(space(s).used, 0);
    /* Exactly the segment fits in an empty store. */
    assert_int_equal(mc_put(s, K("big"), val, SEG, NULL), 0);
    assert_int_equal(space(s).used, SEG);
    free(val);
}

static void test_fill_enospc(void **state)
{
    mc_store_t *s = *state;
    size_t len = MiB - 1000;
    char key[16];
    int n = 0, rc = 0;

    for (; n < 100; n++) {
        char *val = pattern(len, (unsigned)n);
        snprintf(key, sizeof(key), "f%d", n);
        rc = mc_put(s, K(key), val, len, NULL);
        free(val);
        if (rc < 0)
            break;
    }
    assert_int_equal(rc, -ENOSPC);
    assert_int_equal(n, 8);
    assert_int_equal(space(s).objects, 8);
    assert_int_equal(space(s).evicted, 0);
    /* A failed put leaves nothing behind. */
    snprintf(key, sizeof(key), "f%d", n);
    assert_int_equal(mc_stat(s, K(key), &(mc_stat_t){0}), -ENOENT);
    assert_int_equal(space(s).used, 8 * ((len + UNIT - 1) / UNIT * UNIT));
    /* Earlier objects are intact. */
    for (int i = 0; i < n; i++) {
        char *want = pattern(len, (unsigned)i);
        snprintf(key, sizeof(key), "f%d", i);
        char *got = get_all(s, key, len, &rc);
        assert_int_equal(rc, (int)len);
        assert_memory_equal(got, want, len);
        free(want);
        free(got);
    }
}

static void test_eviction_makes_room(void **state)
{
    mc_store_t *s = open_store(SEG, 1, 90);
    size_t len = MiB;
    char *val = pattern(len, 9), key[16];

    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "e%d", i);
        assert_int_equal(mc_put(s, K(key), val, len, NULL), 0);
    }
    mc_space_t sp = space(s);
    assert_cmp(sp.evicted, >=, 12);
    assert_cmp(sp.used, <=, sp.total / 100 * 90);
    assert_int_equal(sp.objects, 20 - sp.evicted);
    /* The newest survives, the oldest went first. */
    assert_int_equal(mc_stat(s, K("e19"), &(mc_stat_t){0}), 0);
    assert_int_equal(mc_stat(s, K("e0"), &(mc_stat_t){0}), -ENOENT);
    free(val);
    mc_store_close(s);
}

static void test_statfs(void **state)
{
    mc_store_t *s = *state;
    mc_space_t sp = space(s);

    assert_int_equal(sp.total, SEG);
    assert_int_equal(sp.used, 0);
    assert_int_equal(sp.objects, 0);
    assert_int_equal(sp.evicted, 0);
    char val[1000] = {0};
    assert_int_equal(mc_put(s, K("a"), val, 1000, NULL), 0);
    assert_int_equal(mc_put(s, K("b"), val, 1, NULL), 0);
    sp = space(s);
    assert_int_equal(sp.used, SMALL_ROUND(1000) + SMALL);
    assert_int_equal(sp.objects, 2);
    assert_int_equal(mc_remove(s, K("a"), 0), 0);
    sp = space(s);
    assert_int_equal(sp.used, SMALL);
    assert_int_equal(sp.objects, 1);
    /* The async form. */
    memset(&sp, 0, sizeof(sp));
    assert_int_equal(ASYNC(s, mc_statfs_async(s, &sp, cbw_cb, &w_)), 0);
    assert_int_equal(sp.total, SEG);
    assert_int_equal(sp.objects, 1);
}

static void test_open_bad_options(void **state)
{
    mc_store_opts_t o;
    mc_store_t *s = NULL;

    mc_store_opts_init(&o);
    assert_int_equal(o.segment_size, MC_DEFAULT_SEGMENT_SIZE);
    assert_null(o.master);
    assert_null(o.loop);
    o.segment_size = SEG;
    o.evict_high_pct = 101;
    assert_int_equal(mc_store_open(&s, &o), -EINVAL);
    o.evict_high_pct = 0;
    o.evict_ratio_pct = 101;
    assert_int_equal(mc_store_open(&s, &o), -EINVAL);
    o.evict_ratio_pct = 0;
    o.segment_size = 100;
    assert_int_equal(mc_store_open(&s, &o), -EINVAL);
    o.segment_size = SEG;
    /* A master address where nobody listens (loopback only): a clean error
     * within the timeout, as a node and as a pure client. */
    o.master = "127.0.0.1:1";
    o.timeout_ms = 2000;
    assert_int_equal(mc_store_open(&s, &o), -ECONNREFUSED);
    assert_null(s);
    o.segment_size = 0;
    assert_int_equal(mc_store_open(&s, &o), -ECONNREFUSED);
    o.master = "unix:/nonexistent/mc.sock";
    assert_int_equal(mc_store_open(&s, &o), -ENOENT);
    o.master = "127.0.0.1:notaport";
    assert_int_equal(mc_store_open(&s, &o), -EINVAL);
    assert_null(s);
    assert_string_equal(mc_strerror(0), "success");
    assert_non_null(mc_strerror(-ENOSPC));
    assert_non_null(mc_strerror(-99999));
}

/* ---- async rules ---- */

struct async_ctx {
    cbw_t w[10];
    char buf[16];
    mc_stat_t st;
    mc_space_t sp;
    mc_list_t *list;
    mc_obj_t *obj;
    int sync_rc[8];
    int post_rc;
};

/* On the loop thread: start async calls; none may call back before it
 * returns. */
static void start_async_on_loop(mc_store_t *s, void *arg)
{
    struct async_ctx *c = arg;
    int rc[8];

    for (int i = 0; i < 8; i++)
        cbw_init(&c->w[i], s);
    rc[0] = mc_put_async(s, K("a"), "x", 1, NULL, cbw_cb, &c->w[0]);
    rc[1] = mc_get_async(s, K("a"), 0, c->buf, sizeof(c->buf), NULL, cbw_cb, &c->w[1]);
    rc[2] = mc_stat_async(s, K("nope"), &c->st, cbw_cb, &c->w[2]);
    rc[3] = mc_remove_async(s, K("nope"), 0, cbw_cb, &c->w[3]);
    rc[4] = mc_rename_async(s, K("a"), K("b"), 0, cbw_cb, &c->w[4]);
    rc[5] = mc_list_async(s, NULL, 0, NULL, 0, '/', 0, &c->list, cbw_cb, &c->w[5]);
    rc[6] = mc_statfs_async(s, &c->sp, cbw_cb, &c->w[6]);
    rc[7] = mc_obj_open_async(s, K("b"), &c->obj, cbw_cb, &c->w[7]);
    for (int i = 0; i < 8; i++) {
        c->sync_rc[i] = rc[i];
        cbw_returned(&c->w[i]);
    }
}

static void test_async_never_completes_inside_call(void **state)
{
    mc_store_t *s = *state;
    struct async_ctx c;
    int want[8] = {0, 1, -ENOENT, -ENOENT, 0, 1, 0, 0};

    memset(&c, 0, sizeof(c));
    /* Operations started together run concurrently (as they do against a
     * cluster): the get and the rename must not depend on the put started
     * just before them, so "a" exists already. */
    assert_int_equal(mc_put(s, K("a"), "x", 1, NULL), 0);
    on_loop(s, start_async_on_loop, &c);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(c.sync_rc[i], 0);
        assert_int_equal(cbw_wait(&c.w[i]), want[i]);
        int after = c.w[i].after_return;
        if (!after)
            print_error("callback %d ran inside its call\n", i);
        assert_int_equal(after, 1);
    }
    assert_string_equal(c.buf, "x");
    assert_int_equal(c.list->n, 1);
    assert_string_equal(c.list->entries[0].key, "b");
    mc_list_free(c.list);
    assert_int_equal(c.sp.objects, 1);
    assert_non_null(c.obj);
    mc_obj_close(c.obj);
}

static void test_async_from_other_thread(void **state)
{
    mc_store_t *s = *state;
    char buf[4] = "";
    mc_stat_t st;

    /* Callbacks run on the loop thread (cbw_wait checks), exactly once. */
    assert_int_equal(ASYNC(s, mc_put_async(s, K("k"), "abc", 3, NULL, cbw_cb, &w_)), 0);
    assert_int_equal(ASYNC(s, mc_get_async(s, K("k"), 1, buf, 3, &st, cbw_cb, &w_)), 2);
    assert_string_equal(buf, "bc");
    assert_int_equal(st.size, 3);
    assert_int_equal(ASYNC(s, mc_stat_async(s, K("k"), &st, cbw_cb, &w_)), 0);
    assert_int_equal(ASYNC(s, mc_remove_async(s, K("k"), MC_REMOVE_FORCE, cbw_cb, &w_)), 0);
    assert_int_equal(ASYNC(s, mc_remove_async(s, K("k"), 0, cbw_cb, &w_)), -ENOENT);
}

static void sync_on_loop(mc_store_t *s, void *arg)
{
    struct async_ctx *c = arg;
    mc_list_t *l = NULL;
    struct iovec iov = {"x", 1};

    c->sync_rc[0] = mc_put(s, K("a"), "x", 1, NULL);
    c->sync_rc[1] = mc_get(s, K("a"), 0, c->buf, 1, NULL);
    c->sync_rc[2] = mc_stat(s, K("a"), &c->st);
    c->sync_rc[3] = mc_remove(s, K("a"), 0);
    c->sync_rc[4] = mc_rename(s, K("a"), K("b"), 0);
    c->sync_rc[5] = mc_list(s, NULL, 0, NULL, 0, 0, 0, &l);
    c->sync_rc[6] = mc_statfs(s, &c->sp);
    c->sync_rc[7] = mc_putv(s, K("a"), &iov, 1, NULL);
}

static void test_sync_on_loop_thread_edeadlk(void **state)
{
    mc_store_t *s = *state;
    struct async_ctx c;

    memset(&c, 0, sizeof(c));
    on_loop(s, sync_on_loop, &c);
    for (int i = 0; i < 8; i++)
        assert_int_equal(c.sync_rc[i], -EDEADLK);
    assert_int_equal(space(s).objects, 0);
}

/* ---- listing ---- */

static void test_list_paging(void **state)
{
    mc_store_t *s = *state;
    char key[32], want[1024] = "", got[1024] = "";

    for (int i = 0; i < 25; i++) {
        snprintf(key, sizeof(key), "l/%02d", i);
        assert_int_equal(put_str(s, key, "v"), 0);
        /* l/12/ below makes l/12 a directory, which shadows the file. */
        snprintf(key, sizeof(key), "l/%02d%s ", i, i == 12 ? "/+" : "");
        strcat(want, key);
    }
    assert_int_equal(put_str(s, "l/12/a", "v"), 0);
    assert_int_equal(put_str(s, "l/12/b/c", "v"), 0);
    assert_int_equal(put_str(s, "m", "v"), 0);

    char *after = NULL;
    size_t alen = 0;
    int pages = 0;
    for (;;) {
        mc_list_t *l = NULL;
        int n = mc_list(s, K("l/"), after, alen, '/', 4, &l);
        assert_cmp(n, >=, 0);
        assert_cmp(n, <=, 4);
        assert_int_equal((size_t)n, l->n);
        for (size_t i = 0; i < l->n; i++) {
            strcat(got, l->entries[i].key);
            strcat(got, l->entries[i].is_prefix ? "+ " : " ");
            if (!l->entries[i].is_prefix)
                assert_int_equal(l->entries[i].st.size, 1);
        }
        free(after);
        after = l->n ? strndup(l->next, l->next_len) : NULL;
        alen = l->n ? l->next_len : 0;
        int more = l->more;
        mc_list_free(l);
        assert_cmp(++pages, <=, 10);
        if (!more)
            break;
    }
    free(after);
    assert_string_equal(got, want);
    assert_int_equal(pages, 7); /* 26 entries, 4 a page */

    mc_list_t *l = NULL;
    assert_int_equal(mc_list(s, K("l/12/"), NULL, 0, 0, 0, &l), 2);
    assert_string_equal(l->entries[1].key, "l/12/b/c");
    mc_list_free(l);
    assert_int_equal(mc_list(s, "x", 1, NULL, 1, 0, 0, &l), -EINVAL);
}

/* ---- threads ---- */

struct worker {
    mc_store_t *s;
    int id;
    int errors;
};

static void *worker_main(void *arg)
{
    struct worker *wk = arg;
    char key[32], *buf = malloc(70000);
    unsigned seed = (unsigned)wk->id * 1000;

    for (int i = 0; i < 300; i++) {
        size_t len = (size_t)(rand_r(&seed) % 65536);
        unsigned tag = (unsigned)(wk->id * 100000 + i);
        char *val = pattern(len, tag);
        snprintf(key, sizeof(key), "t%d/%d", wk->id, i % 8);
        int rc = mc_put(wk->s, K(key), val, len, NULL);
        if (rc != 0) {
            fprintf(stderr, "worker %d: put %s: %d\n", wk->id, key, rc);
            wk->errors++;
        }
        mc_stat_t st;
        rc = mc_get(wk->s, K(key), 0, buf, 70000, &st);
        if (rc != (int)len || st.size != len || memcmp(buf, val, len) != 0) {
            fprintf(stderr, "worker %d: get %s: %d, want %zu\n", wk->id, key, rc, len);
            wk->errors++;
        }
        if (i % 5 == 0 && mc_remove(wk->s, K(key), MC_REMOVE_FORCE) != 0)
            wk->errors++;
        free(val);
    }
    free(buf);
    return NULL;
}

static void test_threads(void **state)
{
    /* A 1 ms lease so that replaced versions free their space quickly. */
    mc_store_t *s = open_store(SEG, 1, 0);
    pthread_t th[4];
    struct worker wk[4];

    for (int i = 0; i < 4; i++) {
        wk[i] = (struct worker){s, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &wk[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(wk[i].errors, 0);
    }
    mc_list_t *l = NULL;
    assert_int_equal(mc_list(s, NULL, 0, NULL, 0, '/', 0, &l), 4);
    mc_list_free(l);
    mc_store_close(s);
}

/* ---- a caller-supplied loop ---- */

struct own_loop {
    mc_loop_t *loop;
    mc_store_t *s;
    int rc;
    cbw_t w;
};

static void *run_loop(void *arg)
{
    mc_loop_run(arg);
    return NULL;
}

static void open_on_loop(void *arg)
{
    struct own_loop *o = arg;
    mc_store_opts_t opts;

    mc_store_opts_init(&opts);
    opts.segment_size = SEG;
    opts.loop = o->loop;
    o->rc = mc_store_open(&o->s, &opts);
    pthread_mutex_lock(&o->w.mu);
    o->w.calls = 1;
    o->w.on_loop = mc_loop_is_current(o->loop);
    pthread_cond_broadcast(&o->w.cv);
    pthread_mutex_unlock(&o->w.mu);
}

static void close_on_loop(void *arg)
{
    struct own_loop *o = arg;

    mc_store_close(o->s);
    mc_loop_stop(o->loop);
}

static void test_caller_supplied_loop(void **state)
{
    struct own_loop o;
    pthread_t th;
    char buf[4] = "";

    memset(&o, 0, sizeof(o));
    assert_int_equal(mc_loop_new(&o.loop), 0);
    pthread_mutex_init(&o.w.mu, NULL);
    pthread_cond_init(&o.w.cv, NULL);
    assert_int_equal(pthread_create(&th, NULL, run_loop, o.loop), 0);
    assert_int_equal(mc_loop_post(o.loop, open_on_loop, &o), 0);
    assert_int_equal(cbw_wait(&o.w), 0);
    assert_int_equal(o.rc, 0);
    assert_ptr_equal(mc_store_loop(o.s), o.loop);
    assert_int_equal(put_str(o.s, "k", "abc"), 0);
    assert_int_equal(mc_get(o.s, K("k"), 0, buf, 3, NULL), 3);
    assert_string_equal(buf, "abc");
    assert_int_equal(mc_loop_post(o.loop, close_on_loop, &o), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    mc_loop_free(o.loop);
}

/* Without RDMA a buffer is only recorded, yet overlaps and bad arguments
 * are rejected the same; transfers from it work as from any memory. */
static void test_register_buffer(void **state)
{
    mc_store_t *s = *state;
    size_t len = 1 << 20;
    char *buf = malloc(2 * len), *val = pattern(len, 7);

    assert_int_equal(mc_register_buffer(s, buf, len), 0);
    assert_int_equal(mc_register_buffer(s, buf, len), -EEXIST);
    assert_int_equal(mc_register_buffer(s, buf + len - 1, 2), -EEXIST);
    assert_int_equal(mc_register_buffer(s, buf - 1, 2), -EEXIST);
    assert_int_equal(mc_register_buffer(s, buf + len, len), 0); /* adjacent */
    assert_int_equal(mc_register_buffer(s, NULL, len), -EINVAL);
    assert_int_equal(mc_register_buffer(s, buf, 0), -EINVAL);
    assert_int_equal(mc_register_buffer(s, (void *)(uintptr_t)-16, 32), -EINVAL);
    assert_int_equal(mc_register_buffer(NULL, buf, len), -EINVAL);

    memcpy(buf, val, len);
    assert_int_equal(mc_put(s, K("zc"), buf, len, NULL), 0);
    memset(buf + len, 0, len);
    assert_int_equal(mc_get(s, K("zc"), 0, buf + len, len, NULL), (int)len);
    assert_memory_equal(buf + len, val, len);
    mc_store_stats_t st;
    mc_store_stats(s, &st);
    assert_int_equal(st.rdma_zero_copy_bytes, 0);

    assert_int_equal(mc_unregister_buffer(s, buf + 1), -ENOENT);
    assert_int_equal(mc_unregister_buffer(s, NULL), -EINVAL);
    assert_int_equal(mc_unregister_buffer(s, buf), 0);
    assert_int_equal(mc_unregister_buffer(s, buf), -ENOENT);
    assert_int_equal(mc_register_buffer(s, buf, len), 0); /* again, once free */
    assert_int_equal(mc_unregister_buffer(s, buf), 0);
    assert_int_equal(mc_unregister_buffer(s, buf + len), 0);
    free(val);
    free(buf);
}

/* A store does not cross fork(): a forked child's calls on its parent's
 * store fail at once with -ECHILD (they used to wait forever for a loop
 * thread that is not in the child), and closing it there only forgets it;
 * the parent's store goes on. */
static void test_forked_child_cannot_use_the_store(void **state)
{
    mc_store_t *s = *state;
    assert_int_equal(mc_put(s, K("before"), "b", 1, NULL), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(10); /* a hang fails the child */
        char c;
        int ok = mc_put(s, K("child"), "c", 1, NULL) == -ECHILD &&
                 mc_get(s, K("before"), 0, &c, 1, NULL) == -ECHILD;
        mc_store_close(s);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    char c = 0;
    assert_int_equal(mc_get(s, K("before"), 0, &c, 1, NULL), 1);
    assert_int_equal(c, 'b');
    assert_int_equal(mc_get(s, K("child"), 0, &c, 1, NULL), -ENOENT);
    assert_int_equal(mc_put(s, K("after"), "a", 1, NULL), 0);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_put_get_round_trip),
        T(test_forked_child_cannot_use_the_store),
        T(test_put_opts),
        T(test_putv_gathers),
        T(test_stat_and_versions),
        T(test_remove),
        T(test_xattr_calls),
        T(test_rename),
        T(test_key_checks),
        T(test_put_too_big),
        T(test_fill_enospc),
        cmocka_unit_test(test_eviction_makes_room),
        T(test_statfs),
        cmocka_unit_test(test_open_bad_options),
        T(test_async_never_completes_inside_call),
        T(test_async_from_other_thread),
        T(test_sync_on_loop_thread_edeadlk),
        T(test_list_paging),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_caller_supplied_loop),
        T(test_register_buffer),
    };
#undef T

    return cmocka_run_group_tests(tests, NULL, NULL);
}
