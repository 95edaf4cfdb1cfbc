/*
 * test_tasks.c - copy and move tasks on the master (core/src/master/tasks.c)
 * driven with request bodies, as the server would, with explicit time: the
 * nodes' side is played by REPAIR_TAKE and REPAIR_DONE requests.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "master/master.h"
#include "master/service.h"
#include "wire/proto.h"
#include "svc_call.h"

#define T0 1000000
#define SIZE 100000 /* bytes of the object */

typedef struct fixture {
    mc__master_t *m;
    mc__svc_t *svc;
    mc__wbuf_t resp;
    uint32_t seg[3]; /* nodes 11, 12, 13 at 127.0.0.1:7011, 7012, 7013 */
    uint64_t version;
} fixture_t;

static int call(fixture_t *f, uint64_t now, uint16_t op, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = svc_vcall(f->svc, &f->resp, 1, now, op, fmt, ap);
    va_end(ap);
    return rc;
}

/* A whole put of SIZE bytes of key with nrep replicas, the first on
 * segment seg. */
static void put_n(fixture_t *f, const char *key, uint32_t seg, uint32_t nrep, uint64_t now)
{
    char pref[32];
    snprintf(pref, sizeof(pref), "127.0.0.1:%u", 7010 + seg);
    assert_int_equal(call(f, now, MC__OP_PUT_START, "kquuuuqisuuuq", key, (uint32_t)strlen(key),
                          (uint64_t)SIZE, 0u, 0644u, nrep, MC_PIN_NONE, (uint64_t)0, (int64_t)0,
                          pref, (uint32_t)strlen(pref), 0u, 0u, 0u, (uint64_t)0),
                     0);
    uint64_t id;
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "q*", &id, NULL, NULL), 0);
    assert_int_equal(call(f, now, MC__OP_PUT_COMMIT, "qkquui", id, key, (uint32_t)strlen(key),
                          (uint64_t)SIZE, 0u, 0u, (int64_t)0),
                     0);
}

static void put_on(fixture_t *f, const char *key, uint32_t seg, uint64_t now)
{
    put_n(f, key, seg, 1, now);
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    svc_test_new(&f->m, &f->svc);
    for (int i = 0; i < 3; i++) {
        char addr[32];
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", 7011 + i);
        assert_int_equal(call(f, T0, MC__OP_MOUNT_SEGMENT, "qusqsuq", (uint64_t)(11 + i), 0u, addr,
                              (uint32_t)strlen(addr), (uint64_t)(16 << 20), "", 0u, 0u,
                              (uint64_t)0),
                         0);
        assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "u*", &f->seg[i], NULL, NULL), 0);
        assert_int_equal(f->seg[i], (uint32_t)(i + 1));
    }
    put_on(f, "k", 1, T0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    svc_test_free(f->m, f->svc, &f->resp);
    free(f);
    return 0;
}

/* TASK_CREATE: type, source ("" for a copy), then the targets. Returns the
 * status; the id in *id. */
static int create_at(fixture_t *f, uint64_t now, const char *key, uint32_t type, const char *src,
                     const char *t1, const char *t2, uint64_t *id)
{
    mc__wbuf_t rest = {0};
    mc__pack(&rest, "s", src, (uint32_t)strlen(src));
    mc__pack(&rest, "s", t1, (uint32_t)strlen(t1));
    if (t2)
        mc__pack(&rest, "s", t2, (uint32_t)strlen(t2));
    int rc = call(f, now, MC__OP_TASK_CREATE, "ku*", key, (uint32_t)strlen(key), type, rest.p,
                  (uint32_t)rest.len);
    free(rest.p);
    if (rc == 0)
        assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "q", id), 0);
    return rc;
}

static int create(fixture_t *f, const char *key, uint32_t type, const char *src, const char *t1,
                  const char *t2, uint64_t *id)
{
    return create_at(f, T0, key, type, src, t1, t2, id);
}

/* TASK_QUERY: the status (MC_TASK_*), its error in *err. */
static uint32_t query(fixture_t *f, uint64_t id, int64_t *err)
{
    uint32_t type, status, ml;
    int64_t c, u, e;
    uint64_t node;
    const char *msg;
    assert_int_equal(call(f, T0, MC__OP_TASK_QUERY, "q", id), 0);
    assert_int_equal(
        mc__unpack(f->resp.p, f->resp.len, "uuiiiqs", &type, &status, &e, &c, &u, &node, &msg, &ml),
        0);
    if (err)
        *err = e;
    return status;
}

/* The segments of key's replicas, into segs; their count. The version in
 * f->version. */
static int replicas(fixture_t *f, const char *key, uint32_t *segs)
{
    assert_int_equal(call(f, T0, MC__OP_GET_REPLICAS, "k", key, (uint32_t)strlen(key)), 0);
    const char *p;
    uint32_t pl;
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "q*", NULL, &p, &pl), 0);
    size_t n = pl;
    mc_stat_t st;
    assert_int_equal(mc__take_stat(&p, &n, &st), 0);
    f->version = st.version;
    mc__wire_replica_t reps[8];
    int cnt = mc__take_replicas(&p, &n, reps, 8);
    for (int i = 0; i < cnt; i++)
        segs[i] = reps[i].seg;
    return cnt;
}

/* Node takes its copy tasks (at most 16 a call, each an s): their ids
 * into ids (NULL: only the first is kept); returns the first, 0 for none. */
static uint64_t take_all(fixture_t *f, uint64_t node, int *count, uint64_t *ids)
{
    assert_int_equal(call(f, T0, MC__OP_REPAIR_TAKE, "q", node), 0);
    const char *p = f->resp.p, *tb, *rest;
    size_t n = f->resp.len;
    uint32_t tl, rl;
    uint64_t first = 0, id;
    *count = 0;
    while (n) {
        assert_int_equal(mc__unpack(p, n, "s*", &tb, &tl, &rest, &rl), 0);
        assert_int_equal(mc__unpack(tb, tl, "q*", &id, NULL, NULL), 0);
        if (!first)
            first = id;
        if (ids)
            ids[*count] = id;
        ++*count;
        p = rest;
        n = rl;
    }
    return first;
}

static uint64_t take(fixture_t *f, uint64_t node, int *count)
{
    return take_all(f, node, count, NULL);
}

static void done(fixture_t *f, uint64_t node, uint64_t task, int64_t status)
{
    assert_int_equal(call(f, T0, MC__OP_REPAIR_DONE, "qqi", node, task, status), 0);
}

static void test_copy_joins_the_same_version(void **state)
{
    fixture_t *f = *state;
    uint32_t segs[8];
    assert_int_equal(replicas(f, "k", segs), 1);
    uint64_t v = f->version, id;
    assert_int_equal(create(f, "k", MC_TASK_COPY, "", "127.0.0.1:7012", "127.0.0.1:7013", &id), 0);
    assert_int_equal(query(f, id, NULL), MC_TASK_PROCESSING);
    int n;
    uint64_t t2 = take(f, 12, &n), t3;
    assert_int_equal(n, 1);
    t3 = take(f, 13, &n);
    assert_int_equal(n, 1);
    done(f, 12, t2, 0);
    assert_int_equal(query(f, id, NULL), MC_TASK_PROCESSING); /* one copy still runs */
    done(f, 13, t3, 0);
    int64_t err;
    assert_int_equal(query(f, id, &err), MC_TASK_SUCCESS);
    assert_int_equal(err, 0);
    assert_int_equal(replicas(f, "k", segs), 3);
    assert_int_equal(f->version, v);
}

static void test_move_survives_its_source(void **state)
{
    fixture_t *f = *state;
    uint64_t id;
    uint32_t segs[8];
    assert_int_equal(create(f, "k", MC_TASK_MOVE, "127.0.0.1:7011", "127.0.0.1:7012", NULL, &id),
                     0);
    int n;
    uint64_t t = take(f, 12, &n);
    assert_int_equal(n, 1);
    done(f, 12, t, 0);
    assert_int_equal(query(f, id, NULL), MC_TASK_SUCCESS);
    assert_int_equal(replicas(f, "k", segs), 1);
    assert_int_equal(segs[0], 2);
    /* The source node goes: the object stays. */
    assert_int_equal(call(f, T0, MC__OP_UNMOUNT_SEGMENT, "qu", (uint64_t)11, 1u), 0);
    assert_int_equal(replicas(f, "k", segs), 1);
    assert_int_equal(segs[0], 2);
}

/* A move to a segment that holds a replica already only drops the source:
 * the object then asks for one replica less (no repair brings it back). */
static void test_move_onto_a_replica_drops_the_source(void **state)
{
    fixture_t *f = *state;
    uint64_t id;
    uint32_t segs[8];
    int n;
    put_n(f, "k2", 1, 2, T0);
    assert_int_equal(replicas(f, "k2", segs), 2);
    uint32_t other = segs[0] == 1 ? segs[1] : segs[0];
    char to[32];
    snprintf(to, sizeof(to), "127.0.0.1:%u", 7010 + other);
    assert_int_equal(create(f, "k2", MC_TASK_MOVE, "127.0.0.1:7011", to, NULL, &id), 0);
    assert_int_equal(query(f, id, NULL), MC_TASK_SUCCESS);
    assert_int_equal(replicas(f, "k2", segs), 1);
    assert_int_equal(segs[0], other);
    mc__svc_tick(f->svc, T0 + 1); /* the repair finds nothing to do */
    for (uint64_t node = 11; node <= 13; node++) {
        take(f, node, &n);
        assert_int_equal(n, 0);
    }
}

static int drop(fixture_t *f, const char *key, const char *addr)
{
    return call(f, T0, MC__OP_REPLICA_DROP, "ks", key, (uint32_t)strlen(key), addr,
                (uint32_t)strlen(addr));
}

/* REPLICA_DROP takes one replica of several away for good (no repair puts
 * it back), refuses the last one and one that an open handle may read. */
static void test_drop_one_replica(void **state)
{
    fixture_t *f = *state;
    uint32_t segs[8];
    int n;
    put_n(f, "k2", 1, 3, T0);
    assert_int_equal(replicas(f, "k2", segs), 3);
    uint64_t v = f->version;
    assert_int_equal(drop(f, "none", "127.0.0.1:7011"), -ENOENT);
    assert_int_equal(drop(f, "k2", "127.0.0.1:1"), -ENXIO);
    assert_int_equal(drop(f, "k", "127.0.0.1:7012"), -ENOENT); /* no replica there */
    assert_int_equal(drop(f, "k2", "127.0.0.1:7012"), 0);
    assert_int_equal(replicas(f, "k2", segs), 2);
    assert_int_equal(f->version, v);
    for (int i = 0; i < 2; i++)
        assert_int_not_equal(segs[i], 2);
    mc__svc_tick(f->svc, T0 + 1); /* the repair finds nothing to do */
    for (uint64_t node = 11; node <= 13; node++) {
        take(f, node, &n);
        assert_int_equal(n, 0);
    }
    /* An open handle may read any replica: none is dropped meanwhile. */
    assert_int_equal(call(f, T0, MC__OP_OPEN, "k", "k2", 2u), 0);
    uint64_t h;
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "q*", &h, NULL, NULL), 0);
    assert_int_equal(drop(f, "k2", "127.0.0.1:7011"), -EBUSY);
    assert_int_equal(call(f, T0, MC__OP_CLOSE, "q", h), 0);
    assert_int_equal(drop(f, "k2", "127.0.0.1:7011"), 0);
    assert_int_equal(replicas(f, "k2", segs), 1);
    assert_int_equal(segs[0], 3);
    assert_int_equal(drop(f, "k2", "127.0.0.1:7013"), -EINVAL); /* the last: a REMOVE */
}

static void test_create_errors(void **state)
{
    fixture_t *f = *state;
    uint64_t id;
    assert_int_equal(create(f, "none", MC_TASK_COPY, "", "127.0.0.1:7012", NULL, &id), -ENOENT);
    assert_int_equal(create(f, "k", MC_TASK_COPY, "", "127.0.0.1:1", NULL, &id), -ENXIO);
    assert_int_equal(create(f, "k", MC_TASK_MOVE, "127.0.0.1:7011", "127.0.0.1:7011", NULL, &id),
                     -EINVAL);
    assert_int_equal(create(f, "k", MC_TASK_MOVE, "127.0.0.1:7013", "127.0.0.1:7012", NULL, &id),
                     -EINVAL); /* no replica on the source */
    assert_int_equal(call(f, T0, MC__OP_TASK_QUERY, "q", (uint64_t)12345), -ENOENT);
    /* A target that already holds a replica: done at once. */
    assert_int_equal(create(f, "k", MC_TASK_COPY, "", "127.0.0.1:7011", NULL, &id), 0);
    assert_int_equal(query(f, id, NULL), MC_TASK_SUCCESS);
}

static void test_new_version_during_copy_fails_the_task(void **state)
{
    fixture_t *f = *state;
    uint64_t id, id2;
    uint32_t segs[8];
    int n;
    assert_int_equal(create(f, "k", MC_TASK_COPY, "", "127.0.0.1:7012", NULL, &id), 0);
    assert_int_equal(create(f, "k", MC_TASK_COPY, "", "127.0.0.1:7013", NULL, &id2), 0);
    uint64_t t = take(f, 12, &n); /* this copy is under way */
    put_on(f, "k", 1, T0);        /* a writer publishes a new version */
    done(f, 12, t, 0);
    int64_t err;
    assert_int_equal(query(f, id, &err), MC_TASK_FAILED);
    assert_int_equal(err, -ESTALE);
    /* This one's node had not taken it yet: it is never handed out. */
    take(f, 13, &n);
    assert_int_equal(n, 0);
    assert_int_equal(query(f, id2, &err), MC_TASK_FAILED);
    assert_int_equal(err, -ESTALE);
    assert_int_equal(replicas(f, "k", segs), 1); /* the new version's own */
    assert_int_equal(segs[0], 1);
}

static void test_target_node_dies_mid_copy(void **state)
{
    fixture_t *f = *state;
    uint64_t id;
    uint32_t segs[8];
    int n;
    assert_int_equal(create(f, "k", MC_TASK_MOVE, "127.0.0.1:7011", "127.0.0.1:7012", NULL, &id),
                     0);
    take(f, 12, &n);
    assert_int_equal(call(f, T0, MC__OP_UNMOUNT_SEGMENT, "qu", (uint64_t)12, 2u), 0);
    int64_t err;
    assert_int_equal(query(f, id, &err), MC_TASK_FAILED);
    assert_int_equal(err, -ENODEV);
    assert_int_equal(replicas(f, "k", segs), 1); /* no half replica, the source kept */
    assert_int_equal(segs[0], 1);
}

static void test_a_failed_copy_fails_the_task(void **state)
{
    fixture_t *f = *state;
    uint64_t id;
    uint32_t segs[8];
    int n;
    assert_int_equal(create(f, "k", MC_TASK_COPY, "", "127.0.0.1:7013", NULL, &id), 0);
    uint64_t t = take(f, 13, &n);
    done(f, 13, t, -EIO);
    int64_t err;
    assert_int_equal(query(f, id, &err), MC_TASK_FAILED);
    assert_int_equal(err, -EIO);
    assert_int_equal(replicas(f, "k", segs), 1);
}

/* A segment mounted again under its old id is on hold (writers of before
 * may still write into its free space): no copy lands there. */
static void test_no_copy_into_a_held_segment(void **state)
{
    fixture_t *f = *state;
    const char *addr = "127.0.0.1:7013";
    uint64_t id;
    assert_int_equal(call(f, T0, MC__OP_UNMOUNT_SEGMENT, "qu", (uint64_t)13, 3u), 0);
    assert_int_equal(call(f, T0, MC__OP_MOUNT_SEGMENT, "qusqsuq", (uint64_t)13, 3u, addr,
                          (uint32_t)strlen(addr), (uint64_t)(16 << 20), "", 0u, 0u, (uint64_t)0),
                     0);
    assert_int_equal(create(f, "k", MC_TASK_COPY, "", addr, NULL, &id), 0);
    int64_t err;
    assert_int_equal(query(f, id, &err), MC_TASK_FAILED);
    assert_int_equal(err, -EAGAIN);
}

static void test_pending_limit(void **state)
{
    fixture_t *f = *state;
    uint64_t id;
    int made = 0, rc;
    while ((rc = create(f, "k", MC_TASK_COPY, "", "127.0.0.1:7012", NULL, &id)) == 0)
        made++;
    assert_int_equal(rc, -EBUSY);
    assert_true(made >= MC_TASK_PENDING_MAX && made < MC_TASK_PENDING_MAX + 64);
    assert_int_equal(query(f, id, NULL), MC_TASK_PENDING); /* the last one made */
    /* The running copies end: the waiting tasks start at the next tick, and
     * see the replica there. */
    int n;
    uint64_t ids[16];
    while (take_all(f, 12, &n, ids))
        while (n--)
            done(f, 12, ids[n], 0);
    mc__svc_tick(f->svc, T0 + 10);
    assert_int_equal(query(f, id, NULL), MC_TASK_SUCCESS);
}

/* The offset of the first extent of key's replica on segment seg, at now
 * (a GET_REPLICAS: it leases the version). */
static uint64_t extent_on(fixture_t *f, const char *key, uint32_t seg, uint64_t now)
{
    assert_int_equal(call(f, now, MC__OP_GET_REPLICAS, "k", key, (uint32_t)strlen(key)), 0);
    const char *p;
    uint32_t pl;
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "q*", NULL, &p, &pl), 0);
    size_t n = pl;
    mc_stat_t st;
    assert_int_equal(mc__take_stat(&p, &n, &st), 0);
    mc__wire_replica_t reps[8];
    int cnt = mc__take_replicas(&p, &n, reps, 8);
    for (int i = 0; i < cnt; i++) {
        if (reps[i].seg != seg || !reps[i].next)
            continue;
        uint64_t off, len;
        mc__wire_extent(&reps[i], 0, &off, &len);
        return off;
    }
    fail_msg("%s has no replica on segment %u", key, seg);
    return 0;
}

/* Every node's heartbeat at now (each enforcing the epoch it is asked to). */
static void beat_all(fixture_t *f, uint64_t now, uint64_t *epoch)
{
    for (int i = 0; i < 3; i++) {
        assert_int_equal(
            call(f, now, MC__OP_HEARTBEAT, "ququ", (uint64_t)(11 + i), f->seg[i], epoch[i], 0u), 0);
        uint32_t flags;
        uint64_t want;
        assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "uq", &flags, &want), 0);
        if (want > epoch[i])
            epoch[i] = want;
    }
}

/* A copy reads the replicas REPAIR_TAKE named as its sources, for up to
 * its time limit. A move that drops one of them meanwhile holds that
 * space only a lease and a margin: once another object has it, the copy
 * reads that object's bytes, and must not join the version then. */
static void test_a_copy_whose_source_was_moved_away_does_not_join(void **state)
{
    fixture_t *f = *state;
    uint64_t epoch[3] = {0, 0, 0}, copy, move;
    uint64_t src = extent_on(f, "k", 1, T0); /* where the copy will read k */
    int n;
    assert_int_equal(create(f, "k", MC_TASK_COPY, "", "127.0.0.1:7013", NULL, &copy), 0);
    uint64_t tc = take(f, 13, &n); /* node 13 copies from segment 1 (10 s limit) */
    assert_int_equal(n, 1);
    assert_int_equal(create(f, "k", MC_TASK_MOVE, "127.0.0.1:7011", "127.0.0.1:7012", NULL, &move),
                     0);
    uint64_t tm = take(f, 12, &n);
    assert_int_equal(n, 1);
    done(f, 12, tm, 0); /* the move is done first: segment 1's replica goes */
    assert_int_equal(query(f, move, NULL), MC_TASK_SUCCESS);
    uint64_t now = T0;
    for (; now <= T0 + 9000; now += 1000) { /* within the copy's limit */
        beat_all(f, now, epoch);
        mc__svc_tick(f->svc, now);
    }
    now -= 1000;
    put_on(f, "x", 1, now); /* another object on segment 1 */
    uint64_t x = extent_on(f, "x", 1, now);
    int reused = x < src + SIZE && src < x + SIZE;
    /* Node 13's copy, still within its limit, read x's bytes where it
     * read segment 1 after x was written. */
    assert_int_equal(call(f, now, MC__OP_REPAIR_DONE, "qqi", (uint64_t)13, tc, (int64_t)0), 0);
    int64_t err;
    uint32_t status = query(f, copy, &err);
    uint32_t segs[8];
    int cnt = replicas(f, "k", segs), joined = 0;
    for (int i = 0; i < cnt; i++)
        joined |= segs[i] == 3;
    if (reused && joined)
        fail_msg("k's copy on segment 3 joined k (task status %u) although its source space "
                 "[%llu, +%u) on segment 1 went to x at %llu while the copy ran",
                 status, (unsigned long long)src, SIZE, (unsigned long long)x);
}

/* Opens key (a handle: a move waits for it to close before it drops its
 * source); returns the handle. */
static uint64_t open_k(fixture_t *f, const char *key)
{
    assert_int_equal(call(f, T0, MC__OP_OPEN, "k", key, (uint32_t)strlen(key)), 0);
    uint64_t h;
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "q*", &h, NULL, NULL), 0);
    return h;
}

/* A move whose copy is done waits for the open handles before it drops
 * the source. If the copy went meanwhile (its node died), dropping the
 * source would leave the version with no replica at all: the source
 * stays. (Fails before the fix: k is left with no replica.) */
static void test_move_keeps_its_source_when_the_copy_went(void **state)
{
    fixture_t *f = *state;
    uint64_t id;
    uint32_t segs[8];
    int n;
    uint64_t h = open_k(f, "k");
    assert_int_equal(create(f, "k", MC_TASK_MOVE, "127.0.0.1:7011", "127.0.0.1:7012", NULL, &id),
                     0);
    uint64_t t = take(f, 12, &n);
    assert_int_equal(n, 1);
    done(f, 12, t, 0);
    assert_int_equal(query(f, id, NULL), MC_TASK_PROCESSING); /* waits for the handle */
    assert_int_equal(replicas(f, "k", segs), 2);
    /* The target's node goes: its copy with it. */
    assert_int_equal(call(f, T0, MC__OP_UNMOUNT_SEGMENT, "qu", (uint64_t)12, 2u), 0);
    assert_int_equal(replicas(f, "k", segs), 1);
    assert_int_equal(call(f, T0, MC__OP_CLOSE, "q", h), 0);
    mc__svc_tick(f->svc, T0 + 1);
    assert_int_not_equal(query(f, id, NULL), MC_TASK_PROCESSING);
    assert_int_equal(replicas(f, "k", segs), 1); /* the source, still there */
    assert_int_equal(segs[0], 1);
}

/* Two moves that wait for a handle, one from segment 1 to 2 and one back:
 * each drops its source once the handle closes, and the second must not
 * drop the last replica the first left. (Fails before the fix: k is left
 * with no replica.) */
static void test_moves_back_and_forth_keep_a_replica(void **state)
{
    fixture_t *f = *state;
    uint64_t there, back;
    uint32_t segs[8];
    int n;
    uint64_t h = open_k(f, "k");
    assert_int_equal(create(f, "k", MC_TASK_MOVE, "127.0.0.1:7011", "127.0.0.1:7012", NULL, &there),
                     0);
    uint64_t t = take(f, 12, &n);
    assert_int_equal(n, 1);
    done(f, 12, t, 0);
    assert_int_equal(create(f, "k", MC_TASK_MOVE, "127.0.0.1:7012", "127.0.0.1:7011", NULL, &back),
                     0);
    assert_int_equal(query(f, there, NULL), MC_TASK_PROCESSING);
    assert_int_equal(query(f, back, NULL), MC_TASK_PROCESSING);
    assert_int_equal(call(f, T0, MC__OP_CLOSE, "q", h), 0);
    mc__svc_tick(f->svc, T0 + 1);
    assert_int_not_equal(query(f, there, NULL), MC_TASK_PROCESSING);
    assert_int_not_equal(query(f, back, NULL), MC_TASK_PROCESSING);
    assert_int_equal(replicas(f, "k", segs), 1);
}

/* The offset of the first extent of key's replica on segment seg, read
 * from the master itself (no lease granted); UINT64_MAX: none there. */
static uint64_t extent_quiet(fixture_t *f, const char *key, uint32_t seg)
{
    mc__version_t *v = mc__master_find(f->m, key, strlen(key));
    for (uint32_t r = 0; v && r < v->nrep; r++) {
        mc__extent_t one;
        mc__replica_t rep = mc__vrep_get(v, r, &one);
        if (rep.seg == seg && rep.n)
            return rep.ext[0].off;
    }
    return UINT64_MAX;
}

/* A copy reads the sources REPAIR_TAKE named for up to its time limit, and
 * joins only if they are all still replicas, told by segment and first
 * offset. A replica dropped (REPLICA_DROP) and, once its hold ran out,
 * made again by another copy at the very same place looks the same, though
 * the space held another object's bytes in between, which the first copy
 * may have read. (Fails before the fix: the copy joins.) */
static void test_a_copy_whose_source_went_and_came_back_does_not_join(void **state)
{
    fixture_t *f = *state;
    uint64_t epoch[3] = {0, 0, 0}, id, copy, back;
    uint32_t segs[8];
    int n;
    put_on(f, "x", 1, T0); /* after k on segment 1: k's place there is a hole of its size */
    assert_int_equal(create(f, "k", MC_TASK_COPY, "", "127.0.0.1:7012", NULL, &id), 0);
    done(f, 12, take(f, 12, &n), 0);
    assert_int_equal(query(f, id, NULL), MC_TASK_SUCCESS);
    assert_int_equal(replicas(f, "k", segs), 2); /* leases k until T0 + 5 s */
    uint64_t src = extent_quiet(f, "k", 1);
    assert_int_equal(create(f, "k", MC_TASK_COPY, "", "127.0.0.1:7013", NULL, &copy), 0);
    uint64_t tc = take(f, 13, &n); /* node 13 reads segments 1 and 2 (10 s limit) */
    assert_int_equal(n, 1);
    assert_int_equal(drop(f, "k", "127.0.0.1:7011"), 0); /* held for the lease and a margin */
    uint64_t now = T0;
    for (; now <= T0 + 8000; now += 1000) {
        beat_all(f, now, epoch);
        mc__svc_tick(f->svc, now);
    }
    /* Another object takes the space, is written, and goes. */
    put_on(f, "z", 1, now);
    uint64_t z = extent_quiet(f, "z", 1);
    assert_int_equal(call(f, now, MC__OP_REMOVE, "ku", "z", 1u, 0u), 0);
    /* A copy back to segment 1, at the same place. */
    assert_int_equal(create_at(f, now, "k", MC_TASK_COPY, "", "127.0.0.1:7011", NULL, &back), 0);
    done(f, 11, take(f, 11, &n), 0);
    assert_int_equal(query(f, back, NULL), MC_TASK_SUCCESS);
    uint64_t again = extent_quiet(f, "k", 1);
    /* Node 13's copy, within its limit, read z's bytes where it read
     * segment 1 while z was there. */
    assert_int_equal(call(f, now, MC__OP_REPAIR_DONE, "qqi", (uint64_t)13, tc, (int64_t)0), 0);
    int64_t err;
    uint32_t status = query(f, copy, &err);
    int cnt = replicas(f, "k", segs), joined = 0;
    for (int i = 0; i < cnt; i++)
        joined |= segs[i] == 3;
    if (z == src && again == src && joined)
        fail_msg("k's copy on segment 3 joined k (task status %u) although its source "
                 "[%llu, +%u) on segment 1 held z while the copy ran",
                 status, (unsigned long long)src, SIZE);
    if (z != src || again != src)
        fail_msg("the scenario did not arise: k at %llu, z at %llu, k again at %llu",
                 (unsigned long long)src, (unsigned long long)z, (unsigned long long)again);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_copy_joins_the_same_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_move_survives_its_source, setup, teardown),
        cmocka_unit_test_setup_teardown(test_move_onto_a_replica_drops_the_source, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drop_one_replica, setup, teardown),
        cmocka_unit_test_setup_teardown(test_new_version_during_copy_fails_the_task, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_target_node_dies_mid_copy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_failed_copy_fails_the_task, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_copy_into_a_held_segment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pending_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_copy_whose_source_was_moved_away_does_not_join,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_move_keeps_its_source_when_the_copy_went, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_moves_back_and_forth_keep_a_replica, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_copy_whose_source_went_and_came_back_does_not_join,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
