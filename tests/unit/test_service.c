/*
 * test_service.c - the master service (core/src/master/service.c) driven with
 * request bodies, as the server would, with explicit time: puts, the
 * namespace, metadata and extended attributes. Owners, segments, nodes,
 * repair and records are test_service_nodes.c; the fixture both use is
 * svc_fixture.h.
 */
#include "svc_fixture.h"

static void test_put_commit_stat(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 64 * MiB, T0);
    uint64_t id = put_start(f, 5, "a/b", 1000, 1, T0);
    /* Invisible until committed. */
    assert_int_equal(call(f, 5, T0, MC__OP_STAT, "k", "a/b", 3), -ENOENT);
    assert_int_equal(commit(f, id, "a/b", 1000, T0), 0);
    assert_int_equal(call(f, 5, T0, MC__OP_STAT, "k", "a/b", 3), 0);
    const char *p = f->resp.p;
    size_t n = f->resp.len;
    mc_stat_t st;
    assert_int_equal(mc__take_stat(&p, &n, &st), 0);
    assert_int_equal(st.size, 1000);
    assert_int_equal(st.mode, 0644);
    /* The put id is spent. */
    assert_int_equal(commit(f, id, "a/b", 1000, T0), -ENOENT);
    /* Directory lookup through the same service. */
    assert_int_equal(call(f, 5, T0, MC__OP_LOOKUP, "ku", "a", 1, '/'), MC_LOOKUP_DIR);
    assert_int_equal(call(f, 5, T0, MC__OP_LOOKUP, "ku", "a/b", 3, '/'), MC_LOOKUP_FILE);
}

/* mc__svc_put()'s write: records what it was handed, returns write_rc. */
static struct {
    int calls, rc;
    uint32_t nrep;
    uint64_t bytes; /* in the replicas' extents */
} wr;

static int record_write(void *arg, const mc__replica_t *rep, uint32_t nrep)
{
    (void)arg;
    wr.calls++;
    wr.nrep = nrep;
    wr.bytes = 0;
    for (uint32_t r = 0; r < nrep; r++)
        for (uint32_t e = 0; e < rep[r].n; e++)
            wr.bytes += rep[r].ext[e].len;
    return wr.rc;
}

/* A put in one call (an embedded store's, mc__svc_put()): the rules of
 * PUT_START and PUT_COMMIT, the write in between, nothing left when it
 * fails. */
static void test_put_in_one_call(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 4 * MiB, T0);
    mount(f, 12, 4 * MiB, T0);
    mc__put_start_rq_t start = {.key = "one", .klen = 3, .capacity = 1000, .replicas = 2};
    mc__put_commit_rq_t commit = {.key = "one", .klen = 3, .size = 1000};
    mc_stat_t st;
    memset(&wr, 0, sizeof(wr));
    assert_int_equal(mc__svc_put(f->svc, &start, &commit, record_write, NULL, T0, &st), 0);
    assert_int_equal(wr.calls, 1);
    assert_int_equal(wr.nrep, 2);
    assert_true(wr.bytes >= 2000);
    assert_int_equal(st.size, 1000);
    assert_int_equal(st.mode, 0644);
    assert_int_equal(call(f, 5, T0, MC__OP_STAT, "k", "one", 3), 0);
    uint64_t in_use = used(f);

    /* The rules of PUT_START: NOREPLACE, and the write is never called. */
    start.flags = MC_PUT_NOREPLACE;
    assert_int_equal(mc__svc_put(f->svc, &start, &commit, record_write, NULL, T0, NULL), -EEXIST);
    assert_int_equal(wr.calls, 1);
    /* ... and of PUT_COMMIT: a size past what was reserved. */
    start.flags = 0;
    commit.size = 1 * MiB;
    assert_int_equal(mc__svc_put(f->svc, &start, &commit, record_write, NULL, T0, NULL), -EINVAL);
    /* A write that fails: its error, nothing published, the space freed. */
    commit.size = 1000;
    wr.rc = -EREMOTE;
    assert_int_equal(mc__svc_put(f->svc, &start, &commit, record_write, NULL, T0, NULL), -EREMOTE);
    assert_int_equal(used(f), in_use);
    /* A new version replaces the old one, whose space is freed. */
    wr.rc = 0;
    commit.size = 10;
    assert_int_equal(mc__svc_put(f->svc, &start, &commit, record_write, NULL, T0, &st), 0);
    assert_int_equal(st.size, 10);
    assert_true(used(f) < in_use);
    /* No write in progress is left behind. */
    mc__svc_stats_t ss;
    mc__svc_stats(f->svc, &ss);
    assert_int_equal(ss.puts, 0);
}

static void test_grow_and_rename_at_commit(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 64 * MiB, T0);
    uint64_t id = put_start(f, 5, "tmp", 0, 1, T0);
    assert_int_equal(call(f, 5, T0, MC__OP_PUT_GROW, "qqqu", id, 0, 3 * MiB, 0), 0);
    assert_true(used(f) >= 3 * MiB);
    assert_int_equal(commit(f, id, "final", 2 * MiB, T0), 0);
    assert_int_equal(call(f, 5, T0, MC__OP_STAT, "k", "tmp", 3), -ENOENT);
    assert_int_equal(call(f, 5, T0, MC__OP_STAT, "k", "final", 5), 0);
    assert_int_equal(used(f), 2 * MiB);
    assert_int_equal(call(f, 5, T0, MC__OP_PUT_GROW, "qqqu", id, 0, MiB, 0), -ENOENT);
}

/*
 * PUT_RENEW renews each write it names as an empty PUT_GROW does: renewed
 * 8 s into the put TTL (10 s), the writes outlive the TTL counted from
 * their start, and an unknown id fails alone. The answer is each id's
 * status and, renewed, its replica set, in order. A body that is not
 * whole put ids, or more than MC__RENEW_MAX of them, is refused.
 */
static void test_put_renew(void **state)
{
    fixture_t *f = *state;
    uint32_t seg = mount(f, 11, 64 * MiB, T0);
    uint64_t a = put_start(f, 5, "a", 100, 1, T0), b = put_start(f, 5, "b", 100, 1, T0);
    mc__wbuf_t ids = {0}; /* a, an unknown id, b, then up to MC__RENEW_MAX + 1 */
    mc__pack(&ids, "qqq", a, (uint64_t)424242, b);
    while (ids.len < 8 * (MC__RENEW_MAX + 1))
        mc__pack(&ids, "q", a);

    for (uint64_t t = T0 + 2000; t <= T0 + 8000; t += 2000) { /* the node stays */
        assert_int_equal(beat(f, 11, t), 0);
        mc__svc_tick(f->svc, t);
    }
    assert_int_equal(call(f, 5, T0 + 8000, MC__OP_PUT_RENEW, "*", ids.p, (uint32_t)24), 0);
    const char *p = f->resp.p, *rs;
    size_t n = f->resp.len, rl;
    int64_t st[3];
    mc__wire_replica_t r[2];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(mc__take_renewal(&p, &n, &st[i], &rs, &rl, r, 2), 0);
        if (st[i] >= 0) {
            assert_int_equal(mc__take_replicas(&rs, &rl, r, 2), 1);
            assert_int_equal(r[0].seg, seg);
        }
    }
    assert_int_equal(n, 0);
    assert_int_equal(st[0], 0);
    assert_int_equal(st[1], -ENOENT);
    assert_int_equal(st[2], 0);
    /* Past the TTL from their start, not from the renewal: both kept. */
    for (uint64_t t = T0 + 10000; t <= T0 + 12000; t += 2000) {
        assert_int_equal(beat(f, 11, t), 0);
        mc__svc_tick(f->svc, t);
    }
    assert_int_equal(commit(f, a, "a", 100, T0 + 12000), 0);
    assert_int_equal(commit(f, b, "b", 100, T0 + 12000), 0);

    assert_int_equal(call(f, 5, T0, MC__OP_PUT_RENEW, "*", ids.p, (uint32_t)12), -EINVAL);
    assert_int_equal(call(f, 5, T0, MC__OP_PUT_RENEW, "*", ids.p, (uint32_t)ids.len), -EINVAL);
    assert_int_equal(call(f, 5, T0, MC__OP_PUT_RENEW, "*", ids.p, (uint32_t)0), 0);
    assert_int_equal(f->resp.len, 0);
    free(ids.p);
}

/* PUT_RENEW of MC__RENEW_MAX ids: accepted, and the answer keeps to
 * MC__RENEW_BUDGET bytes of replica sets however large they are: a sparse
 * write of some 1,200 extents (about 19 KiB of set), named 256 times,
 * answers its set until the budget and then MC__RENEWED_BARE. */
static void test_put_renew_answer_budget(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 64 * MiB, T0);
    uint64_t id = put_start(f, 5, "sparse", 0, 1, T0);
    for (uint64_t i = 0; i < 600; i++) /* data, hole, data, ... */
        assert_int_equal(call(f, 5, T0, MC__OP_PUT_GROW, "qqqu", id, i * 128, 64, 0), 0);
    mc__wbuf_t ids = {0};
    for (int i = 0; i < MC__RENEW_MAX; i++)
        mc__pack(&ids, "q", id);
    assert_int_equal(call(f, 5, T0, MC__OP_PUT_RENEW, "*", ids.p, (uint32_t)ids.len), 0);
    assert_true(f->resp.len < MC__RENEW_BUDGET + 64 * 1024);
    const char *p = f->resp.p, *rs;
    size_t n = f->resp.len, rl;
    mc__wire_replica_t r[2];
    int full = 0, bare = 0;
    for (int i = 0; i < MC__RENEW_MAX; i++) {
        int64_t st;
        assert_int_equal(mc__take_renewal(&p, &n, &st, &rs, &rl, r, 2), 0);
        assert_true(st == 0 || (st == MC__RENEWED_BARE && rl == 0));
        assert_true(st == 0 ? !bare : 1); /* full ones first */
        full += st == 0;
        bare += st == MC__RENEWED_BARE;
    }
    assert_int_equal(n, 0);
    assert_true(full > 0 && bare > 0);
    free(ids.p);
}

/* The extents of the one replica in f->resp (a PUT_GROW answer). */
static int grow_extents(fixture_t *f, uint64_t *off, uint64_t *len, int max)
{
    const char *p = f->resp.p;
    size_t n = f->resp.len;
    mc__wire_replica_t r;
    assert_int_equal(mc__take_replicas(&p, &n, &r, 1), 1);
    for (uint32_t i = 0; i < r.next && (int)i < max; i++)
        mc__wire_extent(&r, i, &off[i], &len[i]);
    return (int)r.next;
}

/* Sparse files: PUT_GROW past the end leaves a hole (an extent at
 * MC__WIRE_HOLE) that takes no space, even past the whole store; a range
 * inside the hole gets space; a punch gives it back; the stat counts the
 * bytes allocated. */
static void test_grow_sparse(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 64 * MiB, T0);
    uint64_t id = put_start(f, 5, "s", 0, 1, T0), off[8], len[8];
    assert_int_equal(call(f, 5, T0, MC__OP_PUT_GROW, "qqqu", id, 512 * MiB, 1, 0), 0);
    assert_int_equal(grow_extents(f, off, len, 8), 2);
    assert_int_equal(off[0], MC__WIRE_HOLE);
    assert_int_equal(len[0], 512 * MiB);
    assert_int_equal(len[1], 64);
    assert_int_equal(used(f), 64);
    /* Into the hole: [1 MiB - 10, 1 MiB + 10) takes its units. */
    assert_int_equal(call(f, 5, T0, MC__OP_PUT_GROW, "qqqu", id, MiB - 10, 20, 0), 0);
    assert_int_equal(grow_extents(f, off, len, 8), 4);
    assert_int_equal(off[0], MC__WIRE_HOLE);
    assert_int_equal(len[0], MiB - 64);
    assert_int_equal(len[1], 128);
    assert_int_equal(off[2], MC__WIRE_HOLE);
    assert_int_equal(used(f), 192);
    /* A punch of whole units gives them back; flags it does not know fail. */
    assert_int_equal(call(f, 5, T0, MC__OP_PUT_GROW, "qqqu", id, MiB - 64, 64, MC__GROW_PUNCH), 0);
    assert_int_equal(used(f), 128);
    assert_int_equal(call(f, 5, T0, MC__OP_PUT_GROW, "qqqu", id, 0, 0, 2), -EINVAL);
    assert_int_equal(commit(f, id, "s", 512 * MiB + 1, T0), 0);
    mc_stat_t st;
    assert_int_equal(call(f, 5, T0, MC__OP_STAT, "k", "s", 1), 0);
    const char *p = f->resp.p;
    size_t n = f->resp.len;
    assert_int_equal(mc__take_stat(&p, &n, &st), 0);
    assert_int_equal(st.size, 512 * MiB + 1);
    assert_int_equal(st.alloc, 128);
    assert_int_equal(used(f), 128);
}

static void test_noreplace_and_errors(void **state)
{
    fixture_t *f = *state;
    /* No segment: nowhere to put it. */
    assert_int_equal(call(f, 1, T0, MC__OP_PUT_START, "kquuuuqisuuuq", "k", 1, (uint64_t)10, 0, 0,
                          1, 0, (uint64_t)0, (int64_t)0, "", 0, 0, 0, 0, (uint64_t)0),
                     -ENOSPC);
    mount(f, 11, 4 * MiB, T0);
    put(f, 1, "k", 10, 1, T0);
    assert_int_equal(call(f, 1, T0, MC__OP_PUT_START, "kquuuuqisuuuq", "k", 1, (uint64_t)10,
                          MC_PUT_NOREPLACE, 0, 1, 0, (uint64_t)0, (int64_t)0, "", 0, 0, 0, 0,
                          (uint64_t)0),
                     -EEXIST);
    /* Larger than the whole store: no space (EFBIG is past the largest file). */
    assert_int_equal(call(f, 1, T0, MC__OP_PUT_START, "kquuuuqisuuuq", "big", 3, 8 * MiB, 0, 0, 1,
                          0, (uint64_t)0, (int64_t)0, "", 0, 0, 0, 0, (uint64_t)0),
                     -ENOSPC);
    /* Malformed bodies and bad keys. */
    assert_int_equal(mc__svc_handle(f->svc, 1, MC__OP_STAT, "\x01", 1, T0, &f->resp), -EBADMSG);
    assert_int_equal(call(f, 1, T0, MC__OP_STAT, "s", "", 0), -EINVAL);
    assert_int_equal(mc__svc_handle(f->svc, 1, MC__OP_READ, "", 0, T0, &f->resp), -EOPNOTSUPP);
}

static void test_list_and_statfs(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 16 * MiB, T0);
    const char *keys[] = {"d/a", "d/b", "d/sub/c", "e"};
    for (int i = 0; i < 4; i++) {
        put(f, 5, keys[i], 100, 1, T0);
    }
    assert_int_equal(call(f, 5, T0, MC__OP_LIST, "ssuu", "d/", 2, "", 0, '/', 10), 0);
    mc_list_t *l = NULL;
    assert_int_equal(mc__take_list(f->resp.p, f->resp.len, &l), 3);
    assert_string_equal(l->entries[0].key, "d/a");
    assert_string_equal(l->entries[2].key, "d/sub/");
    assert_int_equal(l->entries[2].is_prefix, 1);
    mc_list_free(l);
    assert_int_equal(call(f, 5, T0, MC__OP_STATFS, ""), 0);
    uint64_t total, usedb, objects, evicted;
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "qqqq", &total, &usedb, &objects, &evicted),
                     0);
    assert_int_equal(total, 16 * MiB);
    assert_int_equal(objects, 4);
    assert_int_equal(call(f, 5, T0, MC__OP_RENAME, "kku", "d/", 2, "z/", 2, MC_RENAME_PREFIX), 0);
    assert_int_equal(call(f, 5, T0, MC__OP_STAT, "k", "z/sub/c", 7), 0);
}

/* ---- metadata: owners, modes, times, link counts (issue 10) ---- */

static int64_t wall_now; /* the wall clock the service reads, set by the tests */

static int64_t fake_wall(void)
{
    return wall_now;
}

static int setup_wall(void **state)
{
    setup(state);
    fixture_t *f = *state;
    mc__svc_free(f->svc);
    mc__svc_opts_t so = {.node_ttl_ms = 3000, .put_ttl_ms = 10000, .wall_ns = fake_wall};
    assert_int_equal(mc__svc_new(&f->svc, f->m, &so), 0);
    wall_now = 1000;
    return 0;
}

/* A put with flags, mode and owner; returns 0 or the commit's error. */
static int put_meta(fixture_t *f, const char *key, unsigned flags, uint32_t mode, uint32_t uid,
                    uint32_t gid)
{
    int rc = call(f, 1, T0, MC__OP_PUT_START, "kquuuuqisuuuq", key, (uint32_t)strlen(key),
                  (uint64_t)10, flags, mode, 1u, 0u, (uint64_t)0, (int64_t)0, "", 0u, uid, gid,
                  (uint32_t)MC_TYPE_FILE, (uint64_t)0);
    if (rc < 0)
        return rc;
    uint64_t id;
    const char *rest;
    uint32_t rl;
    uint64_t lease;
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "qq*", &id, &lease, &rest, &rl), 0);
    return commit(f, id, key, 10, T0);
}

/* The stat a request answered with (the whole body, or its front). */
static mc_stat_t resp_stat(fixture_t *f)
{
    const char *p = f->resp.p;
    size_t n = f->resp.len;
    mc_stat_t st;
    assert_int_equal(mc__take_stat(&p, &n, &st), 0);
    return st;
}

static mc_stat_t stat_of(fixture_t *f, const char *key)
{
    assert_int_equal(call(f, 1, T0, MC__OP_STAT, "k", key, (uint32_t)strlen(key)), 0);
    return resp_stat(f);
}

static int set_meta(fixture_t *f, const char *key, unsigned what, uint32_t mode, uint32_t uid,
                    uint32_t gid, int64_t atime, int64_t mtime)
{
    return call(f, 1, T0, MC__OP_SET_META, "kuuuuii", key, (uint32_t)strlen(key), what, mode, uid,
                gid, atime, mtime);
}

/* LINK: both names answer the file's stat (nlink, one ino) through STAT,
 * LOOKUP and SET_META; a put through one name is read through the other;
 * the link sets the file's ctime and the new name's directory's. */
static void test_link_through_the_service(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 64 * MiB, T0);
    put(f, 1, "d/", 0, 1, T0);
    put(f, 1, "a", 100, 1, T0);
    int64_t before = stat_of(f, "d/").ctime_ns;
    assert_int_equal(call(f, 1, T0, MC__OP_LINK, "kku", "a", 1, "d/b", 3, 0), 0);
    mc_stat_t st = resp_stat(f);
    assert_int_equal(st.nlink, 2);
    assert_int_not_equal(st.ino, 0);
    assert_true(stat_of(f, "d/").ctime_ns >= before);
    assert_int_equal(call(f, 1, T0, MC__OP_LINK, "kku", "a", 1, "c", 1, 1), -EINVAL);
    assert_int_equal(call(f, 1, T0, MC__OP_LINK, "kku", "a", 1, "d/b", 3, 0), -EEXIST);
    put(f, 1, "d/b", 300, 1, T0 + 1);
    mc_stat_t a = stat_of(f, "a");
    assert_int_equal(a.size, 300);
    assert_int_equal(a.nlink, 2);
    assert_int_equal(a.ino, st.ino);
    assert_int_equal(call(f, 1, T0, MC__OP_LOOKUP, "ku", "d/b", 3, '/'), MC_LOOKUP_FILE);
    assert_int_equal(resp_stat(f).size, 300);
    assert_int_equal(set_meta(f, "a", MC_META_MODE, 0600, 0, 0, 0, 0), 0);
    assert_int_equal(stat_of(f, "d/b").mode, 0600);
    /* A commit to the file's inode key (mc_inode_key()) publishes for
     * every name, while the file has one; removing a name sets its ctime. */
    char ikey[64];
    int ilen = mc_inode_key(st.ino, ikey, sizeof(ikey));
    assert_true(ilen > 0);
    uint64_t id = put_start(f, 1, "tmp", 500, 1, T0);
    assert_int_equal(commit(f, id, ikey, 500, T0), 0);
    assert_int_equal(stat_of(f, "a").size, 500);
    int64_t ct = stat_of(f, "a").ctime_ns;
    wall_now += 1000;
    assert_int_equal(call(f, 1, T0, MC__OP_REMOVE, "ku", "a", 1, MC_REMOVE_FORCE), 0);
    assert_int_equal(stat_of(f, "d/b").nlink, 1);
    assert_true(stat_of(f, "d/b").ctime_ns > ct);
    assert_int_equal(call(f, 1, T0, MC__OP_REMOVE, "ku", "d/b", 3, MC_REMOVE_FORCE), 0);
    assert_int_equal(call(f, 1, T0, MC__OP_STAT, "k", "d/b", 3), -ENOENT);
    id = put_start(f, 1, "tmp", 10, 1, T0);
    assert_int_equal(commit(f, id, ikey, 10, T0), -ENOENT); /* no name left */
    assert_int_equal(call(f, 1, T0, MC__OP_STAT, "k", ikey, (uint32_t)ilen), -ENOENT);
}

/* The owner and mode a create names stay through a republish that names
 * none (a writer's new version), and through a rename; mode 0 is a mode. */
/* A CREATE of key with capacity for its write: mode 0600, owner 7:8. */
static int create(fixture_t *f, const char *key, uint64_t capacity)
{
    return call(f, 1, T0, MC__OP_CREATE, "kquuuuqisuuuq", key, (uint32_t)strlen(key), capacity,
                MC_PUT_MODE | MC_PUT_OWNER, 0600u, 1u, 0u, (uint64_t)0, (int64_t)0, "", 0u, 7u, 8u,
                0u, (uint64_t)0);
}

/* CREATE, a mount's create in one request: the file published empty with
 * the request's mode and owner, a handle on it, the capacity reserved and
 * a write of its next version, which keeps that mode and owner; -EEXIST for
 * a file, -EISDIR for a directory; a write with no room for its first
 * bytes starts with none. */
static void test_create_in_one_request(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 1 * MiB, T0);
    assert_int_equal(create(f, "d/f", 64 * 1024), 0);
    const char *p = f->resp.p, *rest;
    size_t n = f->resp.len;
    uint32_t rl;
    uint64_t handle, capacity, id, lease;
    mc_stat_t st;
    mc__wire_replica_t r;
    assert_int_equal(mc__unpack(p, n, "q*", &handle, &rest, &rl), 0);
    p = rest;
    n = rl;
    assert_int_equal(mc__take_stat(&p, &n, &st), 0);
    assert_int_equal(st.size, 0);
    assert_int_equal(st.mode, 0600);
    assert_int_equal(st.uid, 7);
    assert_int_equal(mc__take_replicas(&p, &n, &r, 1), 1);
    assert_int_equal(mc__unpack(p, n, "qqq*", &capacity, &id, &lease, &rest, &rl), 0);
    assert_int_equal(capacity, 64 * 1024);
    n = rl;
    assert_int_equal(mc__take_replicas(&rest, &n, &r, 1), 1);
    /* Published at once, and open: a remove without force waits. */
    assert_int_equal(stat_of(f, "d/f").size, 0);
    assert_int_equal(call(f, 1, T0, MC__OP_REMOVE, "ku", "d/f", 3u, 0u), -EBUSY);
    /* The write publishes its bytes with the file's mode and owner. */
    assert_int_equal(commit(f, id, "d/f", 4096, T0), 0);
    st = stat_of(f, "d/f");
    assert_int_equal(st.size, 4096);
    assert_int_equal(st.mode, 0600);
    assert_int_equal(st.gid, 8);
    assert_int_equal(call(f, 1, T0, MC__OP_CLOSE, "q", handle), 0);
    /* A file, a directory. */
    assert_int_equal(create(f, "d/f", 0), -EEXIST);
    assert_int_equal(create(f, "d", 0), -EISDIR);
    /* No room for the write's first bytes: it starts with none. */
    assert_int_equal(create(f, "g", 2 * MiB), 0);
    p = f->resp.p;
    n = f->resp.len;
    assert_int_equal(mc__unpack(p, n, "q*", &handle, &rest, &rl), 0);
    n = rl;
    assert_int_equal(mc__take_stat(&rest, &n, &st), 0);
    assert_int_equal(mc__take_replicas(&rest, &n, &r, 1), 1);
    assert_int_equal(mc__unpack(rest, n, "q*", &capacity, &rest, &rl), 0);
    assert_int_equal(capacity, 0);
}

static void test_owner_kept_through_republish(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 4 * MiB, T0);
    assert_int_equal(put_meta(f, "f", MC_PUT_OWNER | MC_PUT_MODE, 0, 1000, 100), 0);
    mc_stat_t st = stat_of(f, "f");
    assert_int_equal(st.uid, 1000);
    assert_int_equal(st.gid, 100);
    assert_int_equal(st.mode, 0);
    assert_int_equal(st.nlink, 1);
    assert_int_equal(put_meta(f, "f", 0, 0, 0, 0), 0);
    st = stat_of(f, "f");
    assert_int_equal(st.uid, 1000);
    assert_int_equal(st.gid, 100);
    assert_int_equal(st.mode, 0);
    assert_int_equal(call(f, 1, T0, MC__OP_RENAME, "kku", "f", 1u, "g", 1u, 0u), 0);
    st = stat_of(f, "g");
    assert_int_equal(st.uid, 1000);
    /* A key put without an owner has none; a new owner replaces it. */
    assert_int_equal(put_meta(f, "h", 0, 0, 0, 0), 0);
    st = stat_of(f, "h");
    assert_int_equal(st.uid, MC_OWNER_NONE);
    assert_int_equal(st.mode, 0644);
    assert_int_equal(put_meta(f, "h", MC_PUT_OWNER, 0600, 7, 8), 0);
    st = stat_of(f, "h");
    assert_int_equal(st.uid, 7);
    assert_int_equal(st.gid, 8);
    assert_int_equal(st.mode, 0600);
    /* An unknown type is refused. */
    assert_int_equal(call(f, 1, T0, MC__OP_PUT_START, "kquuuuqisuuuq", "t", 1u, (uint64_t)1, 0u, 0u,
                          1u, 0u, (uint64_t)0, (int64_t)0, "", 0u, 0u, 0u, 99u, (uint64_t)0),
                     -EINVAL);
}

/* chown clears set-user-ID, and set-group-ID with group-execute, of what is
 * not a directory; every change moves ctime. */
static void test_chown_clears_set_id(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 4 * MiB, T0);
    assert_int_equal(put_meta(f, "x", MC_PUT_MODE, 06755, 0, 0), 0);
    assert_int_equal(put_meta(f, "y", MC_PUT_MODE, 06644, 0, 0), 0);
    assert_int_equal(put_meta(f, "d/", MC_PUT_MODE, 06755, 0, 0), 0);
    wall_now = 5000;
    assert_int_equal(set_meta(f, "x", MC_META_UID | MC_META_GID, 0, 1000, 100, 0, 0), 0);
    mc_stat_t st = resp_stat(f);
    assert_int_equal(st.mode, 0755);
    assert_int_equal(st.uid, 1000);
    assert_int_equal(st.gid, 100);
    assert_int_equal(st.ctime_ns, 5000);
    assert_int_equal(set_meta(f, "y", MC_META_GID, 0, 0, 100, 0, 0), 0);
    assert_int_equal(resp_stat(f).mode, 02644); /* no group-execute: set-group-ID stays */
    assert_int_equal(set_meta(f, "d/", MC_META_UID, 0, 1000, 0, 0, 0), 0);
    assert_int_equal(resp_stat(f).mode, 06755);
    /* chmod and utimes, each field alone. */
    wall_now = 6000;
    assert_int_equal(set_meta(f, "x", MC_META_MODE, 04711, 0, 0, 0, 0), 0);
    st = resp_stat(f);
    assert_int_equal(st.mode, 04711);
    assert_int_equal(st.ctime_ns, 6000);
    assert_int_equal(st.uid, 1000);
    int64_t mtime = st.mtime_ns;
    assert_int_equal(set_meta(f, "x", MC_META_ATIME, 0, 0, 0, 123, 0), 0);
    st = resp_stat(f);
    assert_int_equal(st.atime_ns, 123);
    assert_int_equal(st.mtime_ns, mtime);
    assert_int_equal(set_meta(f, "x", MC_META_MTIME, 0, 0, 0, 0, -456), 0);
    st = resp_stat(f);
    assert_int_equal(st.atime_ns, 123);
    assert_int_equal(st.mtime_ns, -456);
    assert_int_equal(set_meta(f, "x", 0x100, 0, 0, 0, 0, 0), -EINVAL);
    assert_int_equal(set_meta(f, "nope", MC_META_MODE, 0, 0, 0, 0, 0), -ENOENT);
}

/* A directory's marker takes mtime and ctime when a name appears in it or
 * leaves it, not when a file in it is rewritten; a lookup counts its
 * subdirectories. */
static void test_dir_times_and_nlink(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 4 * MiB, T0);
    wall_now = 100;
    assert_int_equal(put_meta(f, "d/", 0, 0, 0, 0), 0);
    assert_int_equal(put_meta(f, "e/", 0, 0, 0, 0), 0);
    wall_now = 200;
    assert_int_equal(put_meta(f, "d/x", 0, 0, 0, 0), 0);
    mc_stat_t st = stat_of(f, "d/");
    assert_int_equal(st.mtime_ns, 200);
    assert_int_equal(st.ctime_ns, 200);
    assert_int_equal(stat_of(f, "e/").mtime_ns, 100);
    wall_now = 300;
    assert_int_equal(put_meta(f, "d/x", 0, 0, 0, 0), 0); /* a rewrite: no new name */
    assert_int_equal(stat_of(f, "d/").mtime_ns, 200);
    assert_int_equal(stat_of(f, "d/x").mtime_ns, 300);
    wall_now = 400;
    assert_int_equal(call(f, 1, T0, MC__OP_RENAME, "kku", "d/x", 3u, "e/x", 3u, 0u), 0);
    assert_int_equal(stat_of(f, "d/").mtime_ns, 400);
    assert_int_equal(stat_of(f, "e/").ctime_ns, 400);
    st = stat_of(f, "e/x");
    assert_int_equal(st.ctime_ns, 400);
    assert_int_equal(st.mtime_ns, 300);
    wall_now = 500;
    assert_int_equal(call(f, 1, T0, MC__OP_REMOVE, "ku", "e/x", 3u, 0u), 0);
    assert_int_equal(stat_of(f, "e/").mtime_ns, 500);
    /* A new directory marker changes its parent; the root has none. */
    wall_now = 600;
    assert_int_equal(put_meta(f, "d/sub/", 0, 0, 0, 0), 0);
    assert_int_equal(stat_of(f, "d/").mtime_ns, 600);

    /* d holds sub/ (a marker), a/ (implicit), b (a file), c/ (deep). */
    assert_int_equal(put_meta(f, "d/a/1", 0, 0, 0, 0), 0);
    assert_int_equal(put_meta(f, "d/a/2", 0, 0, 0, 0), 0);
    assert_int_equal(put_meta(f, "d/b", 0, 0, 0, 0), 0);
    assert_int_equal(put_meta(f, "d/c/x/y", 0, 0, 0, 0), 0);
    assert_int_equal(call(f, 1, T0, MC__OP_LOOKUP, "ku", "d", 1u, (uint32_t)'/'), MC_LOOKUP_DIR);
    st = resp_stat(f);
    assert_int_equal(st.nlink, 2 + 3);
    assert_int_equal(st.mtime_ns, 600);
    assert_int_equal(call(f, 1, T0, MC__OP_LOOKUP, "ku", "d/a", 3u, (uint32_t)'/'), MC_LOOKUP_DIR);
    assert_int_equal(resp_stat(f).nlink, 2);
    assert_int_equal(call(f, 1, T0, MC__OP_LOOKUP, "ku", "d/b", 3u, (uint32_t)'/'), MC_LOOKUP_FILE);
    assert_int_equal(resp_stat(f).nlink, 1);
}

/* atime: a read (OPEN, GET_REPLICAS) moves it when it is not after the last
 * change (relatime), a rewrite keeps it. */
static void test_atime_relatime(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 4 * MiB, T0);
    wall_now = 100;
    assert_int_equal(put_meta(f, "f", 0, 0, 0, 0), 0);
    mc_stat_t st = stat_of(f, "f");
    assert_int_equal(st.atime_ns, 100);
    assert_int_equal(st.mtime_ns, 100);
    assert_int_equal(st.ctime_ns, 100);
    wall_now = 200;
    assert_int_equal(call(f, 1, T0, MC__OP_GET_REPLICAS, "k", "f", 1u), 0);
    assert_int_equal(stat_of(f, "f").atime_ns, 200);
    wall_now = 300;
    assert_int_equal(call(f, 1, T0, MC__OP_GET_REPLICAS, "k", "f", 1u), 0);
    assert_int_equal(stat_of(f, "f").atime_ns, 200); /* after the last change: stays */
    wall_now = 400;
    assert_int_equal(put_meta(f, "f", 0, 0, 0, 0), 0);
    st = stat_of(f, "f");
    assert_int_equal(st.atime_ns, 200); /* writing is no access */
    assert_int_equal(st.mtime_ns, 400);
    wall_now = 500;
    assert_int_equal(call(f, 1, T0, MC__OP_OPEN, "k", "f", 1u), 0);
    assert_int_equal(stat_of(f, "f").atime_ns, 500);
    wall_now = 500 + 86400LL * 1000000000LL;
    assert_int_equal(call(f, 1, T0, MC__OP_GET_REPLICAS, "k", "f", 1u), 0);
    assert_int_equal(stat_of(f, "f").atime_ns, wall_now); /* a day later */
}

/* ---- extended attributes (issue 10, point 4) ---- */

static int xset(fixture_t *f, const char *key, const char *name, const char *val, size_t vlen,
                unsigned flags)
{
    return call(f, 1, T0, MC__OP_XATTR_SET, "ksu*", key, (uint32_t)strlen(key), name,
                (uint32_t)strlen(name), flags, val, (uint32_t)vlen);
}

static int xget(fixture_t *f, const char *key, const char *name)
{
    return call(f, 1, T0, MC__OP_XATTR_GET, "ks", key, (uint32_t)strlen(key), name,
                (uint32_t)strlen(name));
}

static int xrm(fixture_t *f, const char *key, const char *name)
{
    return call(f, 1, T0, MC__OP_XATTR_REMOVE, "ks", key, (uint32_t)strlen(key), name,
                (uint32_t)strlen(name));
}

/* The response body as a string (values and lists are text here). */
static void assert_resp(fixture_t *f, const char *want, size_t n)
{
    assert_int_equal(f->resp.len, n);
    assert_memory_equal(f->resp.p, want, n);
}

/* set / get / list / remove, CREATE and REPLACE, ctime on each change. */
static void test_xattr_set_get_list_remove(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 4 * MiB, T0);
    assert_int_equal(xset(f, "nope", "user.a", "1", 1, 0), -ENOENT);
    assert_int_equal(put_meta(f, "x", 0, 0, 0, 0), 0);
    assert_int_equal(xget(f, "x", "user.a"), -ENODATA);
    assert_int_equal(xset(f, "x", "user.a", "1", 1, MC_XATTR_REPLACE), -ENODATA);
    wall_now = 2000;
    assert_int_equal(xset(f, "x", "user.a", "1", 1, MC_XATTR_CREATE), 0);
    assert_int_equal(stat_of(f, "x").ctime_ns, 2000);
    assert_int_equal(xset(f, "x", "user.a", "2", 1, MC_XATTR_CREATE), -EEXIST);
    assert_int_equal(xset(f, "x", "user.b", "", 0, 0), 0);
    assert_int_equal(xset(f, "x", "user.a", "three", 5, MC_XATTR_REPLACE), 0);
    assert_int_equal(xget(f, "x", "user.a"), 0);
    assert_resp(f, "three", 5);
    assert_int_equal(xget(f, "x", "user.b"), 0);
    assert_resp(f, "", 0);
    assert_int_equal(call(f, 1, T0, MC__OP_XATTR_LIST, "k", "x", 1), 0);
    assert_resp(f, "user.b\0user.a", 14); /* a replaced value moves to the end */
    assert_int_equal(xset(f, "x", "user.a", "1", 1, MC_XATTR_CREATE | MC_XATTR_REPLACE), -EEXIST);
    assert_int_equal(xset(f, "x", "user.a", "1", 1, 0x4), -EINVAL);
    wall_now = 3000;
    assert_int_equal(xrm(f, "x", "user.b"), 0);
    assert_int_equal(stat_of(f, "x").ctime_ns, 3000);
    assert_int_equal(xrm(f, "x", "user.b"), -ENODATA);
    assert_int_equal(xrm(f, "x", "user.a"), 0);
    assert_int_equal(call(f, 1, T0, MC__OP_XATTR_LIST, "k", "x", 1), 0);
    assert_int_equal(f->resp.len, 0);
    wall_now = 4000;
    assert_int_equal(xget(f, "x", "user.a"), -ENODATA);
    assert_int_equal(stat_of(f, "x").ctime_ns, 3000); /* reads change nothing */
}

/* Linux's limits: names 1..255 bytes (ERANGE), values up to 64 KiB (E2BIG),
 * per object 128 KiB of names and values (ENOSPC). */
static void test_xattr_limits(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 4 * MiB, T0);
    assert_int_equal(put_meta(f, "x", 0, 0, 0, 0), 0);
    char name[300], *big = calloc(1, MC_XATTR_SIZE_MAX + 1);
    memset(name, 'n', sizeof(name));
    name[255] = '\0';
    assert_int_equal(xset(f, "x", name, "v", 1, 0), 0);
    name[255] = 'n';
    name[256] = '\0';
    assert_int_equal(xset(f, "x", name, "v", 1, 0), -ERANGE);
    assert_int_equal(xget(f, "x", name), -ERANGE);
    assert_int_equal(xset(f, "x", "", "v", 1, 0), -ERANGE);
    assert_int_equal(call(f, 1, T0, MC__OP_XATTR_SET, "ksu*", "x", 1, "a\0b", 3, 0, "v", 1),
                     -EINVAL);
    assert_int_equal(xset(f, "x", "user.big", big, MC_XATTR_SIZE_MAX + 1, 0), -E2BIG);
    assert_int_equal(xset(f, "x", "user.big", big, MC_XATTR_SIZE_MAX, 0), 0);
    /* 255 + 1 + 1 + 9 + 65536 used: another 64 KiB no longer fits. */
    assert_int_equal(xset(f, "x", "user.big2", big, MC_XATTR_SIZE_MAX, 0), -ENOSPC);
    size_t room = MC_XATTR_TOTAL_MAX - (255 + 1 + 1) - (9 + MC_XATTR_SIZE_MAX) - 10;
    assert_int_equal(xset(f, "x", "user.big2", big, room, 0), 0);
    assert_int_equal(xset(f, "x", "user.c", "", 0, 0), -ENOSPC);
    /* Replacing a value counts the new size instead of the old. */
    assert_int_equal(xset(f, "x", "user.big2", big, room - 7, 0), 0);
    assert_int_equal(xset(f, "x", "user.c", "", 0, 0), 0);
    free(big);
}

/* A new version keeps the attributes of the one it replaces; a rename
 * carries them; a remove drops them. */
static void test_xattr_kept_by_republish_and_rename(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 4 * MiB, T0);
    assert_int_equal(put_meta(f, "x", 0, 0, 0, 0), 0);
    assert_int_equal(xset(f, "x", "user.a", "1", 1, 0), 0);
    assert_int_equal(put_meta(f, "x", 0, 0, 0, 0), 0);
    assert_int_equal(xget(f, "x", "user.a"), 0);
    assert_resp(f, "1", 1);
    assert_int_equal(call(f, 5, T0, MC__OP_RENAME, "kku", "x", 1, "d/y", 3, 0), 0);
    assert_int_equal(xget(f, "d/y", "user.a"), 0);
    assert_int_equal(call(f, 5, T0, MC__OP_RENAME, "kku", "d/", 2, "e/", 2, MC_RENAME_PREFIX), 0);
    assert_int_equal(xget(f, "e/y", "user.a"), 0);
    assert_resp(f, "1", 1);
    assert_int_equal(call(f, 5, T0, MC__OP_REMOVE, "ku", "e/y", 3, 0), 0);
    assert_int_equal(put_meta(f, "e/y", 0, 0, 0, 0), 0);
    assert_int_equal(xget(f, "e/y", "user.a"), -ENODATA);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_commit_stat, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_renew, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_renew_answer_budget, setup, teardown),
        cmocka_unit_test_setup_teardown(test_link_through_the_service, setup_wall, teardown),
        cmocka_unit_test_setup_teardown(test_owner_kept_through_republish, setup_wall, teardown),
        cmocka_unit_test_setup_teardown(test_chown_clears_set_id, setup_wall, teardown),
        cmocka_unit_test_setup_teardown(test_dir_times_and_nlink, setup_wall, teardown),
        cmocka_unit_test_setup_teardown(test_atime_relatime, setup_wall, teardown),
        cmocka_unit_test_setup_teardown(test_xattr_set_get_list_remove, setup_wall, teardown),
        cmocka_unit_test_setup_teardown(test_xattr_limits, setup_wall, teardown),
        cmocka_unit_test_setup_teardown(test_xattr_kept_by_republish_and_rename, setup_wall,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_put_in_one_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grow_and_rename_at_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grow_sparse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_noreplace_and_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_and_statfs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_in_one_request, setup_wall, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
