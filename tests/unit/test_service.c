/*
 * test_service.c - the master service (core/src/master/service.c) driven with
 * request bodies, as the server would, with explicit time.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "master/master.h"
#include "wire/proto.h"
#include "master/repair.h"
#include "master/service.h"

#define T0 1000000
#define MiB (1ULL << 20)

typedef struct fixture {
    mc__master_t *m;
    mc__svc_t *svc;
    mc__wbuf_t resp;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    mc__master_opts_t mo = {.lease_ms = 5000, .align = 64};
    mc__svc_opts_t so = {.node_ttl_ms = 3000, .put_ttl_ms = 10000};
    assert_int_equal(mc__master_new(&f->m, &mo), 0);
    assert_int_equal(mc__svc_new(&f->svc, f->m, &so), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    mc__svc_free(f->svc);
    mc__master_free(f->m);
    free(f->resp.p);
    free(f);
    return 0;
}

/* Sends op with a body packed per fmt; returns the status. The response
 * body is in f->resp. */
static int call(fixture_t *f, uint64_t owner, uint64_t now, uint16_t op, const char *fmt, ...)
{
    mc__wbuf_t req = {0};
    va_list ap;
    va_start(ap, fmt);
    assert_int_equal(mc__vpack(&req, fmt, ap), 0);
    va_end(ap);
    f->resp.len = 0;
    f->resp.err = 0;
    int rc = mc__svc_handle(f->svc, owner, op, req.p ? req.p : "", req.len, now, &f->resp);
    free(req.p);
    return rc;
}

/* Mounts a segment of node (seg id 0: any) with RDMA record rdma ("": none). */
static uint32_t mount_rdma(fixture_t *f, uint64_t node, uint32_t seg, uint64_t size, uint64_t now,
                           const char *rdma)
{
    const char *addr = "127.0.0.1:7000";
    assert_int_equal(call(f, 1, now, MC__OP_MOUNT_SEGMENT, "qusqsu", node, seg, addr,
                          (uint32_t)strlen(addr), size, rdma, (uint32_t)strlen(rdma), 0u),
                     0);
    uint32_t got;
    uint64_t run;
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "uq", &got, &run), 0);
    return got;
}

static uint32_t mount(fixture_t *f, uint64_t node, uint64_t size, uint64_t now)
{
    return mount_rdma(f, node, 0, size, now, "");
}

static uint64_t used(fixture_t *f)
{
    mc_space_t sp;
    mc__master_space(f->m, &sp);
    return sp.used;
}

/* Starts a put of size bytes; returns the put id and checks the replicas. */
static uint64_t put_start(fixture_t *f, uint64_t owner, const char *key, uint64_t size,
                          uint32_t replicas, uint64_t now)
{
    int rc =
        call(f, owner, now, MC__OP_PUT_START, "kquuuuqisuuuq", key, (uint32_t)strlen(key), size, 0,
             0644, replicas, MC_PIN_NONE, (uint64_t)0, (int64_t)0, "", 0, 0, 0, 0, (uint64_t)0);
    assert_int_equal(rc, 0);
    const char *p = f->resp.p;
    size_t n = f->resp.len;
    uint64_t id, lease;
    const char *rest;
    uint32_t restlen;
    assert_int_equal(mc__unpack(p, n, "qq*", &id, &lease, &rest, &restlen), 0);
    assert_int_equal(lease, 10000); /* the write lease: put_ttl_ms here */
    mc__wire_replica_t reps[8];
    size_t left = restlen;
    int nrep = mc__take_replicas(&rest, &left, reps, 8);
    assert_int_equal(nrep, (int)replicas);
    for (int r = 0; r < nrep; r++) {
        uint64_t total = 0, off, len;
        for (uint32_t i = 0; i < reps[r].next; i++) {
            mc__wire_extent(&reps[r], i, &off, &len);
            total += len;
        }
        assert_true(total >= size);
        assert_int_equal(reps[r].addr_len, 14);
    }
    return id;
}

static int commit(fixture_t *f, uint64_t id, const char *key, uint64_t size, uint64_t now)
{
    return call(f, 1, now, MC__OP_PUT_COMMIT, "qkquui", id, key, (uint32_t)strlen(key), size,
                (uint32_t)0, (uint32_t)0, (int64_t)0);
}

/* A whole put: put_start() and a commit that must succeed. */
static void put(fixture_t *f, uint64_t owner, const char *key, uint64_t size, uint32_t replicas,
                uint64_t now)
{
    uint64_t id = put_start(f, owner, key, size, replicas, now);
    assert_int_equal(commit(f, id, key, size, now), 0);
}

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

static void test_owner_gone_revokes_and_closes(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 64 * MiB, T0);
    put(f, 5, "x", MiB, 1, T0);
    /* Owner 6 opens x and starts another write. */
    assert_int_equal(call(f, 6, T0, MC__OP_OPEN, "k", "x", 1), 0);
    put_start(f, 6, "y", 2 * MiB, 1, T0);
    assert_int_equal(used(f), 3 * MiB);
    /* x is replaced; the open handle keeps the old version's space. */
    put(f, 5, "x", MiB, 1, T0);
    assert_int_equal(used(f), 4 * MiB);
    mc__svc_stats_t st;
    mc__svc_stats(f->svc, &st);
    assert_int_equal(st.handles, 1);
    assert_int_equal(st.puts, 1);
    /* Owner 6 disconnects: its write is revoked, its handle closed. */
    mc__svc_owner_gone(f->svc, 6, T0 + 1000);
    mc__svc_stats(f->svc, &st);
    assert_int_equal(st.handles, 0);
    assert_int_equal(st.puts, 0);
    /* The replaced version is free; the revoked write's space waits for the
     * writer's lease (10 s from its last touch) to run out: the writer may
     * still be sending bytes into it. */
    assert_int_equal(used(f), 3 * MiB);
    assert_int_equal(call(f, 0, T0 + 9999, MC__OP_HEARTBEAT, "q", (uint64_t)11), 0);
    mc__svc_tick(f->svc, T0 + 9999);
    assert_int_equal(used(f), 3 * MiB);
    assert_int_equal(call(f, 0, T0 + 10000, MC__OP_HEARTBEAT, "q", (uint64_t)11), 0);
    mc__svc_tick(f->svc, T0 + 10000);
    assert_int_equal(used(f), MiB);
}

/* Closing one connection touches only what it holds; another owner's
 * handles and writes stay. */
static void test_owner_gone_leaves_other_owners(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 64 * MiB, T0);
    put(f, 5, "x", 4096, 1, T0);
    for (int i = 0; i < 3000; i++) {
        assert_int_equal(call(f, 6 + (uint64_t)(i % 2), T0, MC__OP_OPEN, "k", "x", 1), 0);
    }
    put_start(f, 7, "y", 4096, 1, T0);
    mc__svc_stats_t st;
    mc__svc_owner_gone(f->svc, 6, T0);
    mc__svc_stats(f->svc, &st);
    assert_int_equal(st.handles, 1500);
    assert_int_equal(st.puts, 1);
    mc__svc_owner_gone(f->svc, 6, T0); /* again: nothing */
    mc__svc_owner_gone(f->svc, 7, T0);
    mc__svc_stats(f->svc, &st);
    assert_int_equal(st.handles, 0);
    assert_int_equal(st.puts, 0);
}

/* A replaced version kept open while its segment is dropped and mounted
 * again must not free its extents into the new segment's allocator (the
 * master aborted: "more than is handed out"). */
static void test_open_replaced_version_outlives_its_segment(void **state)
{
    fixture_t *f = *state;
    uint32_t seg = mount(f, 11, 16 * MiB, T0);
    put(f, 5, "F", 4 * MiB, 1, T0);
    assert_int_equal(call(f, 6, T0, MC__OP_OPEN, "k", "F", 1), 0);
    uint64_t h;
    const char *rest;
    uint32_t rl;
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "q*", &h, &rest, &rl), 0);
    put(f, 5, "F", 2 * MiB, 1, T0);
    /* The node falls silent past its TTL, then mounts its segment again. */
    assert_int_equal(mc__svc_tick(f->svc, T0 + 4000), 1);
    assert_int_equal(mount_rdma(f, 11, seg, 16 * MiB, T0 + 5000, ""), seg);
    assert_int_equal(used(f), 0);
    assert_int_equal(call(f, 6, T0 + 5000, MC__OP_CLOSE, "q", h), 0);
    assert_int_equal(used(f), 0);
    /* The whole segment is there for new data once its hold is over. */
    put(f, 5, "G", 16 * MiB, 1, T0 + 16000);
}

/* A segment mounted again under its old id takes nothing new until the
 * write leases of before have run out: a writer that kept its replica set
 * may still send bytes into it. */
static void test_remounted_segment_is_held_for_a_lease(void **state)
{
    fixture_t *f = *state;
    uint32_t seg = mount(f, 11, 16 * MiB, T0);
    assert_int_equal(mc__svc_tick(f->svc, T0 + 4000), 1);
    assert_int_equal(mount_rdma(f, 11, seg, 16 * MiB, T0 + 5000, ""), seg);
    assert_int_equal(call(f, 5, T0 + 5000, MC__OP_PUT_START, "kquuuuqisuuuq", "k", 1, (uint64_t)100,
                          0, 0644, 1, MC_PIN_NONE, (uint64_t)0, (int64_t)0, "", 0, 0, 0, 0,
                          (uint64_t)0),
                     -EAGAIN);
    /* A fresh node's segment is usable at once. */
    mount(f, 12, 16 * MiB, T0 + 6000);
    put_start(f, 5, "k", 100, 1, T0 + 6000);
    call(f, 0, T0 + 15000, MC__OP_HEARTBEAT, "q", (uint64_t)11);
    call(f, 0, T0 + 15000, MC__OP_HEARTBEAT, "q", (uint64_t)12);
    put_start(f, 5, "k2", 100, 2, T0 + 15000);
}

/* Segment ids a node names cannot wrap the counter into ids in use. */
static void test_segment_ids_do_not_wrap(void **state)
{
    fixture_t *f = *state;
    const char *addr = "127.0.0.1:7000";
    assert_int_equal(call(f, 1, T0, MC__OP_MOUNT_SEGMENT, "qusqsu", (uint64_t)9, UINT32_MAX, addr,
                          (uint32_t)strlen(addr), 16 * MiB, "", 0, 0u),
                     -EINVAL);
    assert_int_equal(mount_rdma(f, 9, UINT32_MAX - 1, 16 * MiB, T0, ""), UINT32_MAX - 1);
    uint32_t a = mount(f, 10, 16 * MiB, T0);
    uint32_t b = mount(f, 11, 16 * MiB, T0);
    assert_true(a != 0 && b != 0 && a != b);
    assert_true(a != UINT32_MAX && b != UINT32_MAX && a != UINT32_MAX - 1 && b != UINT32_MAX - 1);
}

static void test_close_releases_replaced_version(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 64 * MiB, T0);
    put(f, 5, "x", MiB, 1, T0);
    assert_int_equal(call(f, 6, T0, MC__OP_OPEN, "k", "x", 1), 0);
    uint64_t h;
    const char *rest;
    uint32_t rl;
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "q*", &h, &rest, &rl), 0);
    assert_int_equal(call(f, 5, T0, MC__OP_REMOVE, "ku", "x", 1, 0), -EBUSY);
    assert_int_equal(call(f, 5, T0, MC__OP_REMOVE, "ku", "x", 1, MC_REMOVE_FORCE), 0);
    assert_int_equal(used(f), MiB);
    assert_int_equal(call(f, 6, T0, MC__OP_CLOSE, "q", h), 0);
    assert_int_equal(used(f), 0);
    assert_int_equal(call(f, 6, T0, MC__OP_CLOSE, "q", h), -ENOENT);
}

static void test_node_expiry_and_remount(void **state)
{
    fixture_t *f = *state;
    uint32_t s1 = mount(f, 11, 16 * MiB, T0);
    uint32_t s2 = mount(f, 12, 16 * MiB, T0);
    assert_int_not_equal(s1, s2);
    put(f, 5, "both", MiB, 2, T0);
    put(f, 5, "one", MiB, 1, T0);

    /* Node 12 keeps beating, node 11 falls silent past the TTL. */
    assert_int_equal(call(f, 0, T0 + 2000, MC__OP_HEARTBEAT, "q", (uint64_t)12), 0);
    uint32_t flags;
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "u", &flags), 0);
    assert_int_equal(flags & ~(uint32_t)MC__HB_RECORDS, 0);
    assert_int_equal(mc__svc_tick(f->svc, T0 + 4000), 1);
    mc__svc_stats_t st;
    mc__svc_stats(f->svc, &st);
    assert_int_equal(st.nodes, 1);
    assert_int_equal(st.segments, 1);
    assert_int_equal(call(f, 5, T0 + 4000, MC__OP_STAT, "k", "both", 4), 0);
    /* "one" was on node 11 or 12; whichever survived keeps it. */
    int one = call(f, 5, T0 + 4000, MC__OP_STAT, "k", "one", 3);
    assert_true(one == 0 || one == -ENOENT);
    assert_int_equal(st.objects_lost, one == 0 ? 0 : 1);

    /* The dead node comes back: its heartbeat asks it to mount again. */
    assert_int_equal(call(f, 0, T0 + 5000, MC__OP_HEARTBEAT, "q", (uint64_t)11), 0);
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "u", &flags), 0);
    assert_int_equal(flags, MC__HB_REMOUNT);
    mount(f, 11, 16 * MiB, T0 + 5000);
    mc__svc_stats(f->svc, &st);
    assert_int_equal(st.segments, 2);
}

/* The RDMA record a node mounts with goes out verbatim with every replica
 * on its segment, and a mount again replaces it (fresh keys). */
static void test_rdma_record_in_replica_sets(void **state)
{
    fixture_t *f = *state;
    uint32_t seg = mount_rdma(f, 11, 0, 16 * MiB, T0, "record-one");
    put(f, 5, "k", MiB, 1, T0);

    const char *recs[] = {"record-one", "record-two\x01\xff", ""};
    for (int i = 0; i < 3; i++) {
        if (i)
            assert_int_equal(mount_rdma(f, 11, seg, 16 * MiB, T0 + i, recs[i]), seg);
        assert_int_equal(call(f, 5, T0 + i, MC__OP_GET_REPLICAS, "k", "k", 1), 0);
        const char *p = f->resp.p;
        size_t n = f->resp.len;
        uint64_t lease;
        uint32_t n32;
        assert_int_equal(mc__unpack(p, n, "q*", &lease, &p, &n32), 0);
        n = n32;
        assert_int_equal(lease, 5000); /* granted just now */
        mc_stat_t st;
        mc__wire_replica_t r[2];
        assert_int_equal(mc__take_stat(&p, &n, &st), 0);
        assert_int_equal(mc__take_replicas(&p, &n, r, 2), 1);
        assert_int_equal(r[0].seg, seg);
        assert_int_equal(r[0].rdma_len, strlen(recs[i]));
        assert_memory_equal(r[0].rdma, recs[i], r[0].rdma_len);
    }
}

static void test_stale_put_expires(void **state)
{
    fixture_t *f = *state;
    mount(f, 11, 16 * MiB, T0);
    put_start(f, 5, "slow", MiB, 1, T0);
    assert_int_equal(call(f, 0, T0 + 2000, MC__OP_HEARTBEAT, "q", (uint64_t)11), 0);
    mc__svc_tick(f->svc, T0 + 2000);
    assert_int_equal(used(f), MiB);
    for (uint64_t t = T0 + 3000; t <= T0 + 12000; t += 1000) {
        call(f, 0, t, MC__OP_HEARTBEAT, "q", (uint64_t)11);
        mc__svc_tick(f->svc, t);
    }
    assert_int_equal(used(f), 0);
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

/* ---- repair ---- */

/* The segments of key's replicas, from GET_REPLICAS; returns the count. */
static int replica_segs(fixture_t *f, const char *key, uint64_t now, uint32_t *segs)
{
    assert_int_equal(call(f, 5, now, MC__OP_GET_REPLICAS, "k", key, (uint32_t)strlen(key)), 0);
    uint64_t lease;
    const char *p;
    uint32_t pl;
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "q*", &lease, &p, &pl), 0);
    size_t n = pl;
    mc_stat_t st;
    assert_int_equal(mc__take_stat(&p, &n, &st), 0);
    mc__wire_replica_t reps[8];
    int cnt = mc__take_replicas(&p, &n, reps, 8);
    assert_int_equal(cnt, (int)st.replicas);
    for (int i = 0; i < cnt; i++)
        segs[i] = reps[i].seg;
    return cnt;
}

static uint32_t hb_flags(fixture_t *f, uint64_t node, uint64_t now)
{
    uint32_t flags;
    assert_int_equal(call(f, 0, now, MC__OP_HEARTBEAT, "q", node), 0);
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "u", &flags), 0);
    return flags & ~(uint32_t)MC__HB_RECORDS; /* notices: test_records_* */
}

typedef struct task {
    uint64_t id, limit, size;
    uint32_t dst_seg, nsrc;
    uint64_t dst_bytes;
} task_t;

/* REPAIR_TAKE for node; decodes up to max tasks into t, returns the count. */
static int take(fixture_t *f, uint64_t node, uint64_t now, task_t *t, int max)
{
    assert_int_equal(call(f, 0, now, MC__OP_REPAIR_TAKE, "q", node), 0);
    const char *p = f->resp.p;
    size_t n = f->resp.len;
    int cnt = 0;
    while (n) {
        const char *tb, *rest, *r;
        uint32_t tl, rl, rlen;
        assert_int_equal(mc__unpack(p, n, "s*", &tb, &tl, &rest, &rl), 0);
        assert_true(cnt < max);
        assert_int_equal(
            mc__unpack(tb, tl, "qqq*", &t[cnt].id, &t[cnt].limit, &t[cnt].size, &r, &rlen), 0);
        size_t left = rlen;
        mc__wire_replica_t dst[8], src[8];
        assert_int_equal(mc__take_replicas(&r, &left, dst, 8), 1);
        t[cnt].dst_seg = dst[0].seg;
        t[cnt].dst_bytes = 0;
        for (uint32_t i = 0; i < dst[0].next; i++) {
            uint64_t off, len;
            mc__wire_extent(&dst[0], i, &off, &len);
            t[cnt].dst_bytes += len;
        }
        int ns = mc__take_replicas(&r, &left, src, 8);
        assert_true(ns >= 1);
        assert_int_equal(left, 0);
        t[cnt].nsrc = (uint32_t)ns;
        cnt++;
        p = rest;
        n = rl;
    }
    return cnt;
}

/* Three nodes, "k" on two of them (2 replicas); returns the segment without
 * a replica in *spare and the node of each segment in node_of[seg]. */
static void three_nodes_one_object(fixture_t *f, uint64_t size, uint32_t *segs, uint32_t *spare,
                                   uint64_t *node_of)
{
    for (uint64_t node = 11; node <= 13; node++)
        node_of[mount(f, node, 16 * MiB, T0)] = node;
    put(f, 5, "k", size, 2, T0);
    assert_int_equal(replica_segs(f, "k", T0, segs), 2);
    for (uint32_t s = 1; s <= 3; s++)
        if (s != segs[0] && s != segs[1])
            *spare = s;
}

/* A node's segment goes: the object is copied to the node without a
 * replica, which learns of the task from its heartbeat, and the replica
 * joins the object once the node reports the copy done. */
static void test_repair_restores_a_lost_replica(void **state)
{
    fixture_t *f = *state;
    uint32_t segs[8], spare;
    uint64_t node_of[8] = {0};
    three_nodes_one_object(f, 100000, segs, &spare, node_of);
    uint64_t before = used(f);
    assert_int_equal(call(f, 1, T0 + 10, MC__OP_UNMOUNT_SEGMENT, "qu", node_of[segs[0]], segs[0]),
                     0);
    assert_int_equal(replica_segs(f, "k", T0 + 10, segs + 2), 1);
    assert_int_equal(hb_flags(f, node_of[spare], T0 + 20), 0); /* nothing planned before a tick */
    mc__svc_tick(f->svc, T0 + 1000);
    assert_int_equal(hb_flags(f, node_of[segs[1]], T0 + 1000), 0);
    assert_int_equal(hb_flags(f, node_of[spare], T0 + 1000), MC__HB_REPAIR);
    task_t t[4];
    assert_int_equal(take(f, node_of[spare], T0 + 1000, t, 4), 1);
    assert_int_equal(t[0].dst_seg, spare);
    assert_int_equal(t[0].size, 100000);
    assert_true(t[0].dst_bytes >= 100000);
    assert_int_equal(t[0].nsrc, 1);
    assert_true(t[0].limit >= 10000);
    /* Taken once: no flag, no second copy of the task. */
    assert_int_equal(hb_flags(f, node_of[spare], T0 + 1100), 0);
    assert_int_equal(take(f, node_of[spare], T0 + 1100, t + 1, 3), 0);
    /* Space is reserved while the copy runs. */
    assert_int_equal(used(f), before / 2 + t[0].dst_bytes);
    assert_int_equal(
        call(f, 0, T0 + 1500, MC__OP_REPAIR_DONE, "qqi", node_of[spare], t[0].id, (int64_t)0), 0);
    assert_int_equal(replica_segs(f, "k", T0 + 1500, segs + 2), 2);
    assert_true(segs[2] == spare || segs[3] == spare);
    /* Reported twice, or by another node: unknown. */
    assert_int_equal(
        call(f, 0, T0 + 1500, MC__OP_REPAIR_DONE, "qqi", node_of[spare], t[0].id, (int64_t)0),
        -ENOENT);
    mc__svc_stats_t st;
    mc__svc_stats(f->svc, &st);
    assert_int_equal(st.repair_started, 1);
    assert_int_equal(st.repair_done, 1);
    assert_int_equal(st.repair_failed, 0);
    assert_int_equal(st.repair_bytes, 100000);
    assert_int_equal(st.repair_inflight, 0);
    /* Full again: later ticks plan nothing. */
    mc__svc_tick(f->svc, T0 + 2000);
    assert_int_equal(hb_flags(f, node_of[spare], T0 + 2000), 0);
}

/* A copy not reported in time is given up after its limit plus the margin,
 * its space freed and the repair planned again; a late report is refused. */
static void test_repair_task_expires(void **state)
{
    fixture_t *f = *state;
    uint32_t segs[8], spare;
    uint64_t node_of[8] = {0};
    three_nodes_one_object(f, 5000, segs, &spare, node_of);
    uint64_t one = used(f) / 2;
    call(f, 1, T0, MC__OP_UNMOUNT_SEGMENT, "qu", node_of[segs[0]], segs[0]);
    mc__svc_tick(f->svc, T0 + 100);
    task_t t[2];
    assert_int_equal(take(f, node_of[spare], T0 + 200, t, 2), 1);
    uint64_t end = T0 + 200 + t[0].limit + MC__REPAIR_MARGIN_MS;
    for (uint64_t now = T0 + 1000; now < end; now += 1000) { /* everyone keeps beating */
        hb_flags(f, node_of[segs[1]], now);
        hb_flags(f, node_of[spare], now);
        mc__svc_tick(f->svc, now);
        assert_int_equal(used(f), 2 * one);
    }
    hb_flags(f, node_of[segs[1]], end);
    hb_flags(f, node_of[spare], end);
    mc__svc_tick(f->svc, end);
    mc__svc_stats_t st;
    mc__svc_stats(f->svc, &st);
    assert_int_equal(st.repair_failed, 1);
    assert_int_equal(
        call(f, 0, end, MC__OP_REPAIR_DONE, "qqi", node_of[spare], t[0].id, (int64_t)0), -ENOENT);
    assert_int_equal(replica_segs(f, "k", end, segs + 2), 1);
    /* The freed task's space went back, and a new task was planned. */
    assert_int_equal(st.repair_started, 2);
    assert_int_equal(used(f), 2 * one);
    assert_int_equal(hb_flags(f, node_of[spare], end + 1), MC__HB_REPAIR);
}

/* The object is replaced while its copy runs: the copy's space is freed,
 * never attached to the new version. Dropping the target's segment frees a
 * task at once. */
static void test_repair_of_a_replaced_object(void **state)
{
    fixture_t *f = *state;
    uint32_t segs[8], spare;
    uint64_t node_of[8] = {0};
    three_nodes_one_object(f, 5000, segs, &spare, node_of);
    call(f, 1, T0, MC__OP_UNMOUNT_SEGMENT, "qu", node_of[segs[0]], segs[0]);
    mc__svc_tick(f->svc, T0 + 100);
    task_t t[2];
    assert_int_equal(take(f, node_of[spare], T0 + 100, t, 2), 1);
    put(f, 5, "k", 5000, 2, T0 + 200);
    uint64_t now_used = used(f);
    assert_int_equal(
        call(f, 0, T0 + 300, MC__OP_REPAIR_DONE, "qqi", node_of[spare], t[0].id, (int64_t)0), 0);
    assert_int_equal(used(f), now_used - t[0].dst_bytes);
    assert_int_equal(replica_segs(f, "k", T0 + 300, segs + 2), 2);
    mc__svc_stats_t st;
    mc__svc_stats(f->svc, &st);
    assert_int_equal(st.repair_done, 0);
    assert_int_equal(st.repair_failed, 1);

    /* A task whose target segment goes is dropped with it. */
    call(f, 5, T0 + 400, MC__OP_REMOVE, "ku", "k", 1, MC_REMOVE_FORCE);
    put(f, 5, "z", 5000, 2, T0 + 400);
    uint32_t zs[8];
    assert_int_equal(replica_segs(f, "z", T0 + 400, zs), 2);
    mc__svc_tick(f->svc, T0 + 500); /* nothing to do: both replicas live */
    assert_int_equal(take(f, node_of[zs[0]], T0 + 500, t, 2), 0);
}

/* A writer drops a replica whose node it cannot reach: the put publishes
 * with the others, the space stays held for a node TTL, new puts avoid that
 * node until it beats again, and the repair restores the count. */
static void test_put_drop_replica(void **state)
{
    fixture_t *f = *state;
    uint64_t node_of[8] = {0};
    for (uint64_t node = 11; node <= 13; node++)
        node_of[mount(f, node, 16 * MiB, T0)] = node;
    uint64_t id = put_start(f, 5, "w", 10000, 2, T0);
    assert_int_equal(call(f, 5, T0, MC__OP_GET_REPLICAS, "k", "w", 1), -ENOENT);
    uint64_t u = used(f);
    /* The segment of the put's first replica: the most free, segment 1. */
    uint32_t dead = 1;
    assert_int_equal(call(f, 5, T0 + 10, MC__OP_PUT_DROP_REPLICA, "qu", id, dead), 0);
    assert_int_equal(call(f, 5, T0 + 10, MC__OP_PUT_DROP_REPLICA, "qu", id, dead), 0);
    assert_int_equal(call(f, 5, T0 + 10, MC__OP_PUT_DROP_REPLICA, "qu", id + 99, dead), -ENOENT);
    assert_int_equal(commit(f, id, "w", 10000, T0 + 20), 0);
    uint32_t segs[8];
    assert_int_equal(replica_segs(f, "w", T0 + 20, segs), 1);
    assert_int_not_equal(segs[0], dead);
    assert_int_equal(used(f), u); /* held */
    /* New puts avoid the node while others have room. */
    for (int i = 0; i < 4; i++) {
        char key[8] = {'n', (char)('0' + i), 0};
        put(f, 5, key, 1000, 2, T0 + 30);
        uint32_t ns[8];
        assert_int_equal(replica_segs(f, key, T0 + 30, ns), 2);
        assert_true(ns[0] != dead && ns[1] != dead);
    }
    /* Nor does the repair copy there. */
    mc__svc_tick(f->svc, T0 + 100);
    assert_int_equal(hb_flags(f, node_of[dead], T0 + 200), 0);
    task_t t[2];
    uint32_t spare = 6 - segs[0] - dead;
    assert_int_equal(hb_flags(f, node_of[spare], T0 + 200), MC__HB_REPAIR);
    assert_int_equal(take(f, node_of[spare], T0 + 200, t, 2), 1);
    mc__svc_stats_t st;
    mc__svc_stats(f->svc, &st);
    assert_int_equal(st.replicas_dropped, 1);
    /* After a node TTL (3 s here) the held space is free. */
    for (uint64_t now = T0 + 1000; now <= T0 + 3010; now += 1000) {
        for (uint64_t node = 11; node <= 13; node++)
            hb_flags(f, node, now);
        mc__svc_tick(f->svc, now);
    }
    uint64_t held = used(f);
    for (uint64_t node = 11; node <= 13; node++)
        hb_flags(f, node, T0 + 3100);
    mc__svc_tick(f->svc, T0 + 3100);
    assert_true(used(f) < held);
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

/* ---- records: notices to nodes, reports after a restart ---- */

/* Fetches node's notices for seg (acknowledging ack bytes); returns the
 * answer's length, the notices' kinds and ids in kind[] / id[] (at most
 * max), their count in *n, and the first PUT's record bytes in rec. */
static size_t take_notes(fixture_t *f, uint64_t node, uint32_t seg, uint64_t ack, uint64_t now,
                         int *kind, uint64_t *id, int max, int *n, mc__wbuf_t *rec)
{
    assert_int_equal(call(f, 0, now, MC__OP_RECORDS_TAKE, "quq", node, seg, ack), 0);
    const char *p = f->resp.p;
    size_t left = f->resp.len, total = left;
    *n = 0;
    while (left) {
        const char *e, *rest, *r;
        uint32_t el, rl, len;
        uint8_t k;
        uint64_t v;
        assert_int_equal(mc__unpack(p, left, "s*", &e, &el, &rest, &rl), 0);
        assert_int_equal(mc__unpack(e, el, "bq*", &k, &v, &r, &len), 0);
        if (*n < max) {
            kind[*n] = k;
            id[*n] = v;
        }
        (*n)++;
        if (k == MC__NOTE_PUT && rec && !rec->len) {
            const char *b;
            uint32_t bl;
            assert_int_equal(mc__unpack(r, len, "s", &b, &bl), 0);
            mc__pack(rec, "*", b, bl);
        }
        p = rest;
        left = rl;
    }
    return total;
}

static void test_records_reach_nodes_and_rebuild_a_new_master(void **state)
{
    fixture_t *f = *state;
    uint32_t seg = mount(f, 11, 16 * MiB, T0);
    put(f, 1, "a/k", 1000, 1, T0);
    put(f, 1, "gone", 10, 1, T0);
    uint32_t flags;
    assert_int_equal(call(f, 0, T0 + 1, MC__OP_HEARTBEAT, "q", (uint64_t)11), 0);
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "u", &flags), 0);
    assert_int_equal(flags, MC__HB_RECORDS);
    int kind[8], n;
    uint64_t id[8];
    mc__wbuf_t rec = {0};
    size_t got = take_notes(f, 11, seg, 0, T0 + 1, kind, id, 8, &n, &rec);
    assert_int_equal(n, 2);
    assert_int_equal(kind[0], MC__NOTE_PUT);
    mc__rec_t r;
    assert_int_equal(mc__take_rec(rec.p, rec.len, &r), 0);
    assert_int_equal(r.klen, 3);
    assert_memory_equal(r.key, "a/k", 3);
    assert_int_equal(r.size, 1000);
    assert_int_equal(r.next, 1);
    uint64_t kid = r.version;
    /* Acknowledged: nothing waits; a remove sends a drop. */
    assert_int_equal(take_notes(f, 11, seg, got, T0 + 2, kind, id, 8, &n, NULL), 0);
    assert_int_equal(call(f, 1, T0 + 3, MC__OP_REMOVE, "ku", "gone", 4u, 0u), 0);
    take_notes(f, 11, seg, 0, T0 + 3, kind, id, 8, &n, NULL);
    assert_int_equal(n, 1);
    assert_int_equal(kind[0], MC__NOTE_DROP);
    assert_int_equal(
        call(f, 0, T0 + 4, MC__OP_RECORDS_TAKE, "quq", (uint64_t)11, seg, (uint64_t)1 << 40),
        -EINVAL); /* more than was answered */
    assert_int_equal(call(f, 0, T0 + 4, MC__OP_RECORDS_TAKE, "quq", (uint64_t)12, seg, 0ull),
                     -ENOENT); /* another node's segment */

    /* A new master: the node mounts with its records, the segment is held
     * until the report ends, and the object is back. */
    fixture_t *g = NULL;
    setup((void **)&g);
    const char *addr = "127.0.0.1:7000";
    assert_int_equal(call(g, 1, T0, MC__OP_MOUNT_SEGMENT, "qusqsu", (uint64_t)11, seg, addr,
                          (uint32_t)strlen(addr), 16 * MiB, "", 0u, (uint32_t)MC__MOUNT_REPORT),
                     0);
    uint32_t seg2;
    uint64_t run;
    assert_int_equal(mc__unpack(g->resp.p, g->resp.len, "uq", &seg2, &run), 0);
    assert_int_equal(seg2, seg);
    assert_int_equal(call(g, 1, T0 + 20000, MC__OP_PUT_START, "kquuuuqisuuuq", "x", 1u,
                          (uint64_t)10, 0u, 0644u, 1u, 0u, (uint64_t)0, (int64_t)0, "", 0u, 0u, 0u,
                          0u, (uint64_t)0),
                     -EAGAIN); /* held past the write lease: the report is not over */
    mc__wbuf_t body = {0};
    mc__pack(&body, "s", rec.p, (uint32_t)rec.len);
    mc__pack(&body, "s", "junk", 4u); /* unreadable: refused, not fatal */
    assert_int_equal(call(g, 0, T0 + 20001, MC__OP_RECORDS_REPORT, "quu*", (uint64_t)11, seg, 1u,
                          body.p, (uint32_t)body.len),
                     0);
    free(body.p);
    assert_int_equal(call(g, 1, T0 + 20002, MC__OP_STAT, "k", "a/k", 3u), 0);
    mc_stat_t st;
    const char *sp = g->resp.p;
    size_t sl = g->resp.len;
    assert_int_equal(mc__take_stat(&sp, &sl, &st), 0);
    assert_int_equal(st.version, kid);
    assert_int_equal(st.size, 1000);
    assert_int_equal(st.replicas, 1);
    assert_int_equal(call(g, 1, T0 + 20002, MC__OP_STAT, "k", "gone", 4u), -ENOENT);
    mc__svc_stats_t ss;
    mc__svc_stats(g->svc, &ss);
    assert_int_equal(ss.records_merged, 1);
    assert_int_equal(ss.records_refused, 1);
    /* The report is over: new puts go there again. */
    put(g, 1, "x", 10, 1, T0 + 20003);
    free(rec.p);
    teardown((void **)&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_commit_stat, setup, teardown),
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
        cmocka_unit_test_setup_teardown(test_owner_gone_revokes_and_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_owner_gone_leaves_other_owners, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_replaced_version_outlives_its_segment, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_remounted_segment_is_held_for_a_lease, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_segment_ids_do_not_wrap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_releases_replaced_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_node_expiry_and_remount, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rdma_record_in_replica_sets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_put_expires, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_and_statfs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_restores_a_lost_replica, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_task_expires, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_of_a_replaced_object, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_drop_replica, setup, teardown),
        cmocka_unit_test_setup_teardown(test_records_reach_nodes_and_rebuild_a_new_master, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
