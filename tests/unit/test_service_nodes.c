/*
 * test_service_nodes.c - the master service (core/src/master/service.c)
 * driven with request bodies, as the server would, with explicit time:
 * what owners (connections) hold, segments and nodes coming and going,
 * repair, and the records nodes keep. Puts, the namespace and metadata are
 * test_service.c; the fixture both use is svc_fixture.h.
 */
#include "svc_fixture.h"

#include "master/oplog.h"

#include "nomem.h"

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
    assert_int_equal(beat(f, (uint64_t)11, T0 + 9999), 0);
    mc__svc_tick(f->svc, T0 + 9999);
    assert_int_equal(used(f), 3 * MiB);
    assert_int_equal(beat(f, (uint64_t)11, T0 + 10000), 0);
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
    mc__svc_stats_t st;
    mc__svc_stats(f->svc, &st);
    assert_int_equal(st.segments_held, 1);
    /* A fresh node's segment is usable at once. */
    mount(f, 12, 16 * MiB, T0 + 6000);
    put_start(f, 5, "k", 100, 1, T0 + 6000);
    mc__svc_stats(f->svc, &st);
    assert_int_equal(st.segments_held, 1);
    beat(f, (uint64_t)11, T0 + 15000);
    beat(f, (uint64_t)12, T0 + 15000);
    mc__svc_stats(f->svc, &st);
    assert_int_equal(st.segments_held, 0);
    put_start(f, 5, "k2", 100, 2, T0 + 15000);
}

/* A node whose every write passes its epoch check (MC__MOUNT_CHECKED) is
 * not held for a write lease when it mounts again: writes of before carry
 * an older epoch. But only once it says it enforces the epoch its mount
 * got: a WRITE of before may still be arriving into the segment (or a
 * mapping's copy be in progress) while it mounts, so nothing new goes
 * there before its next heartbeat says so. */
static void test_remounted_checked_segment_takes_puts_once_it_enforces(void **state)
{
    fixture_t *f = *state;
    uint32_t seg = mount_flags(f, 11, 0, 16 * MiB, T0, "", MC__MOUNT_CHECKED);
    assert_int_equal(mc__svc_tick(f->svc, T0 + 4000), 1);
    assert_int_equal(mount_flags(f, 11, seg, 16 * MiB, T0 + 5000, "", MC__MOUNT_CHECKED), seg);
    uint64_t mounted_at = f->nodes[0].epoch;
    f->nodes[0].epoch = mounted_at - 1; /* a write of before still lands: what it enforces */
    assert_int_equal(beat(f, 11, T0 + 5500), 0);
    assert_int_equal(call(f, 5, T0 + 5500, MC__OP_PUT_START, "kquuuuqisuuuq", "k", 1, (uint64_t)100,
                          0, 0644, 1, MC_PIN_NONE, (uint64_t)0, (int64_t)0, "", 0, 0, 0, 0,
                          (uint64_t)0),
                     -EAGAIN);
    f->nodes[0].epoch = mounted_at; /* that write ended */
    assert_int_equal(beat(f, 11, T0 + 6000), 0);
    put_start(f, 5, "k", 100, 1, T0 + 6000);
}

/* A write revoked behind its writer's back on a segment whose every write
 * passes its node's check frees its space once the node enforces the
 * epoch raised for it, without waiting out the write lease; once the node
 * says a write may pass unchecked (it serves RDMA now), the lease counts
 * again. */
static void test_fenced_space_on_a_checked_segment_goes_at_the_beat(void **state)
{
    fixture_t *f = *state;
    mount_flags(f, 11, 0, 64 * MiB, T0, "", MC__MOUNT_CHECKED);
    for (int round = 0; round < 2; round++) {
        uint64_t t = T0 + (uint64_t)round * 20000;
        put_start(f, 6, "y", 2 * MiB, 1, t);
        assert_int_equal(used(f), 2 * MiB);
        if (round)
            f->nodes[0].flags = 0; /* it serves RDMA now */
        mc__svc_owner_gone(f->svc, 6, t + 1000);
        assert_int_equal(beat(f, 11, t + 1500), 0); /* learns the new epoch */
        mc__svc_tick(f->svc, t + 1500);
        assert_int_equal(used(f), 2 * MiB);
        assert_int_equal(beat(f, 11, t + 2000), 0); /* enforces it */
        mc__svc_tick(f->svc, t + 2000);
        assert_int_equal(used(f), round ? 2 * MiB : 0);
        beat(f, 11, t + 11000); /* the lease from the last touch (t) is over */
        mc__svc_tick(f->svc, t + 11000);
        assert_int_equal(used(f), 0);
    }
}

static uint64_t enforced_so_far(void *arg, uint32_t seg, uint64_t epoch)
{
    (void)seg;
    (void)epoch;
    return *(uint64_t *)arg;
}

/* The master's own segment is checked by its own data plane (WRITEs, and
 * the fences of the clients that map it or write over RDMA): a write
 * revoked there frees its space as soon as that plane enforces the epoch
 * raised for it (round 0; round 2, served over RDMA with the fence);
 * served over RDMA without a fence (one-sided writes pass no check) it
 * waits out the lease (round 1). */
static void test_fenced_space_on_the_masters_own_segment(void **state)
{
    fixture_t *f = *state;
    uint64_t enforces = 0;
    assert_int_equal(mc__master_add_segment(f->m, 0, 64 * MiB), 0);
    assert_int_equal(mc__svc_add_local_segment(f->svc, 0, 0, "127.0.0.1:7000"), 0);
    mc__svc_set_local_enforced(f->svc, enforced_so_far, &enforces);
    for (int round = 0; round < 3; round++) {
        uint64_t t = T0 + (uint64_t)round * 20000;
        if (round)
            assert_int_equal(mc__svc_set_local_rdma(f->svc, "rdma", 4, round == 2), 0);
        put_start(f, 6, "y", 2 * MiB, 1, t);
        assert_int_equal(used(f), 2 * MiB);
        mc__svc_owner_gone(f->svc, 6, t + 1000);
        mc__svc_tick(f->svc, t + 1000); /* the plane does not enforce it yet */
        assert_int_equal(used(f), 2 * MiB);
        enforces = mc__svc_seg_epoch(f->svc, 0);
        mc__svc_tick(f->svc, t + 1500);
        assert_int_equal(used(f), round == 1 ? 2 * MiB : 0);
        mc__svc_tick(f->svc, t + 11000); /* the lease from the last touch (t) is over */
        assert_int_equal(used(f), 0);
    }
}

/* Segment ids a node names cannot wrap the counter into ids in use. */
static void test_segment_ids_do_not_wrap(void **state)
{
    fixture_t *f = *state;
    const char *addr = "127.0.0.1:7000";
    assert_int_equal(call(f, 1, T0, MC__OP_MOUNT_SEGMENT, "qusqsuq", (uint64_t)9, UINT32_MAX, addr,
                          (uint32_t)strlen(addr), 16 * MiB, "", 0, 0u, (uint64_t)0),
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
    assert_int_equal(beat(f, (uint64_t)12, T0 + 2000), 0);
    uint32_t flags;
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "u*", &flags, NULL, NULL), 0);
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
    assert_int_equal(beat(f, (uint64_t)11, T0 + 5000), 0);
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "u*", &flags, NULL, NULL), 0);
    assert_int_equal(flags, MC__HB_REMOUNT);
    mount(f, 11, 16 * MiB, T0 + 5000);
    mc__svc_stats(f->svc, &st);
    assert_int_equal(st.segments, 2);
}

/* The epoch of key's first replica, as OPEN hands it out (the handle is
 * owner's). */
static uint64_t open_epoch(fixture_t *f, uint64_t owner, const char *key, uint64_t now)
{
    assert_int_equal(call(f, owner, now, MC__OP_OPEN, "k", key, (uint32_t)strlen(key)), 0);
    const char *p = f->resp.p;
    size_t n = f->resp.len;
    uint64_t handle;
    uint32_t n32;
    assert_int_equal(mc__unpack(p, n, "q*", &handle, &p, &n32), 0);
    n = n32;
    mc_stat_t st;
    mc__wire_replica_t r[2];
    assert_int_equal(mc__take_stat(&p, &n, &st), 0);
    assert_int_equal(mc__take_replicas(&p, &n, r, 2), 1);
    return r[0].epoch;
}

/* A segment dropped at the node TTL and mounted again under its id gets
 * an epoch above every one the master handed out for it before, even one
 * its node never learned (raised for a revoked write, then handed out
 * with a replica set, before the node went silent): the node refuses the
 * READs of those replica sets (wire/proto.h, "Reads"), whose space new
 * objects take. Before, the mount started from the node's epoch + 1,
 * which such a replica set carries. */
static void test_remount_epoch_is_above_every_epoch_handed_out(void **state)
{
    fixture_t *f = *state;
    uint32_t seg = mount_flags(f, 11, 0, 16 * MiB, T0, "", MC__MOUNT_CHECKED);
    uint64_t enforces = f->nodes[0].epoch; /* what the node enforces, and knows */
    put(f, 5, "a", MiB, 1, T0);
    assert_int_equal(open_epoch(f, 7, "a", T0), enforces);
    /* A write revoked: the master raises the epoch; the node never beats
     * again, so it never learns it. A descriptor opened now carries it. */
    put_start(f, 6, "y", MiB, 1, T0 + 100);
    mc__svc_owner_gone(f->svc, 6, T0 + 200);
    uint64_t handed = open_epoch(f, 8, "a", T0 + 300);
    assert_true(handed > enforces);
    assert_int_equal(f->nodes[0].epoch, enforces);

    assert_int_equal(mc__svc_tick(f->svc, T0 + 4000), 1); /* silent past the TTL */
    assert_int_equal(call(f, 5, T0 + 4000, MC__OP_STAT, "k", "a", 1), -ENOENT);
    assert_int_equal(beat(f, 11, T0 + 5000), 0); /* asked to mount again */
    assert_int_equal(mount_flags(f, 11, seg, 16 * MiB, T0 + 5000, "", MC__MOUNT_CHECKED), seg);
    uint64_t mounted_at = f->nodes[0].epoch;
    assert_true(mounted_at > handed);

    /* New objects there carry it (or later), once the node enforces it. */
    assert_int_equal(beat(f, 11, T0 + 6000), 0);
    put(f, 5, "b", MiB, 1, T0 + 6000);
    assert_true(open_epoch(f, 7, "b", T0 + 6000) >= mounted_at);

    /* And again: a second drop and mount goes past the first mount's. */
    assert_int_equal(mc__svc_tick(f->svc, T0 + 10000), 1);
    f->nodes[0].epoch = enforces; /* a node that enforces less than it was told */
    assert_int_equal(mount_flags(f, 11, seg, 16 * MiB, T0 + 10000, "", MC__MOUNT_CHECKED), seg);
    assert_true(f->nodes[0].epoch > mounted_at);
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
    assert_int_equal(beat(f, (uint64_t)11, T0 + 2000), 0);
    mc__svc_tick(f->svc, T0 + 2000);
    assert_int_equal(used(f), MiB);
    /* Idle past the put TTL (10 s) at T0 + 11000: revoked, and its space
     * goes once the node enforces the epoch raised for it (its beat at
     * T0 + 12000 learns it, the next one says so). */
    for (uint64_t t = T0 + 3000; t <= T0 + 12000; t += 1000) {
        beat(f, (uint64_t)11, t);
        mc__svc_tick(f->svc, t);
    }
    assert_int_equal(used(f), MiB);
    beat(f, (uint64_t)11, T0 + 13000);
    mc__svc_tick(f->svc, T0 + 13000);
    assert_int_equal(used(f), 0);
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
    assert_int_equal(beat(f, node, now), 0);
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "u*", &flags, NULL, NULL), 0);
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

/* A drop the master cannot make (out of memory) must not let the put
 * publish with the replica its writer could not reach, which missed
 * bytes: the put ends, and its commit fails. */
static void test_put_drop_replica_out_of_memory_ends_the_put(void **state)
{
    fixture_t *f = *state;
#ifdef NO_WRAP
    skip(); /* AddressSanitizer's allocator: none fails */
#endif
    for (uint64_t node = 11; node <= 12; node++)
        mount(f, node, 16 * MiB, T0);
    uint64_t id = put_start(f, 5, "w", 10000, 1, T0);
    /* A compact version's one replica's extent is in its fields (packed):
     * taking it out needs an allocation (a replica of an array owns its
     * extents, and takes none). */
    const char *p = f->resp.p, *rest;
    uint32_t restlen;
    uint64_t pid, lease;
    assert_int_equal(mc__unpack(p, f->resp.len, "qq*", &pid, &lease, &rest, &restlen), 0);
    size_t left = restlen;
    mc__wire_replica_t reps[1];
    assert_int_equal(mc__take_replicas(&rest, &left, reps, 1), 1);
    uint32_t first = reps[0].seg;
    mc__wbuf_t body = {0};
    assert_int_equal(mc__pack(&body, "qu", id, first), 0);
    allocs_left = 0; /* every allocation fails while the service handles it */
    int rc =
        mc__svc_handle(f->svc, 5, MC__OP_PUT_DROP_REPLICA, body.p, body.len, T0 + 10, &f->resp);
    allocs_left = -1;
    free(body.p);
    assert_int_equal(rc, -ENOMEM);
    assert_true(commit(f, id, "w", 10000, T0 + 20) < 0);
    assert_int_equal(call(f, 5, T0 + 20, MC__OP_STAT, "k", "w", 1u), -ENOENT);
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
    assert_int_equal(beat(f, (uint64_t)11, T0 + 1), 0);
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "u*", &flags, NULL, NULL), 0);
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
     * until the report ends, and the object is back. The epoch it gets is
     * past the one it enforced at the old master, whose writes in progress
     * carry that one or lower. */
    fixture_t *g = NULL;
    setup((void **)&g);
    const char *addr = "127.0.0.1:7000";
    uint64_t old_epoch = 1796050401994252ull;
    assert_int_equal(call(g, 1, T0, MC__OP_MOUNT_SEGMENT, "qusqsuq", (uint64_t)11, seg, addr,
                          (uint32_t)strlen(addr), 16 * MiB, "", 0u, (uint32_t)MC__MOUNT_REPORT,
                          old_epoch),
                     0);
    uint32_t seg2;
    uint64_t run, epoch;
    assert_int_equal(mc__unpack(g->resp.p, g->resp.len, "uqq", &seg2, &run, &epoch), 0);
    assert_int_equal(seg2, seg);
    assert_true(epoch > old_epoch);
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

/* ---- the op log: a new leader merges a segment's logged records ----
 *
 * The journal of the fixture's service feeds a view (oplog.h), as a
 * standby's follows the log; a second service takes over with it. */

static void to_view(void *arg, uint32_t seg, const char *note, size_t len)
{
    mc__wbuf_t w = {0};
    assert_int_equal(mc__oplog_pack(&w, seg, note, len), 0);
    assert_int_equal(mc__oplog_apply(arg, w.p, w.len), 0);
    free(w.p);
}

/* Node's mount at a new leader as a node sends it (node.c): its old
 * segment id and its records, and on -EEXIST (the id is another node's
 * now) again under a new id. Returns the id it got. */
static uint32_t remount(fixture_t *g, uint64_t node, uint32_t seg, uint64_t now)
{
    const char *addr = "127.0.0.1:7000";
    int rc =
        call(g, 1, now, MC__OP_MOUNT_SEGMENT, "qusqsuq", node, seg, addr, (uint32_t)strlen(addr),
             16 * MiB, "", 0u, (uint32_t)MC__MOUNT_REPORT, (uint64_t)5);
    if (rc == -EEXIST)
        rc =
            call(g, 1, now, MC__OP_MOUNT_SEGMENT, "qusqsuq", node, 0u, addr, (uint32_t)strlen(addr),
                 16 * MiB, "", 0u, (uint32_t)MC__MOUNT_REPORT, (uint64_t)5);
    assert_int_equal(rc, 0);
    uint32_t got;
    uint64_t run, epoch;
    assert_int_equal(mc__unpack(g->resp.p, g->resp.len, "uqq", &got, &run, &epoch), 0);
    return got;
}

static uint64_t stat_version(fixture_t *f, const char *key, uint64_t now, int *rc)
{
    *rc = call(f, 1, now, MC__OP_STAT, "k", key, (uint32_t)strlen(key));
    if (*rc < 0)
        return 0;
    mc_stat_t st;
    const char *sp = f->resp.p;
    size_t sl = f->resp.len;
    assert_int_equal(mc__take_stat(&sp, &sl, &st), 0);
    return st.version;
}

/* A put acknowledged by the old leader whose notice its node had not
 * fetched lives in the log only. A new node mounting at the new leader
 * before the old one gets a fresh id: it must not be the id the log
 * knows the old node's records under, or those records are never merged
 * and the node's older record of the key wins. */
static void test_failover_keeps_logged_put_when_a_new_node_mounts_first(void **state)
{
    fixture_t *f = *state;
    mc__oplog_t *view;
    assert_int_equal(mc__oplog_new(&view), 0);
    mc__svc_journal(f->svc, to_view, view, NULL);
    uint32_t seg = mount(f, 11, 16 * MiB, T0);
    put(f, 1, "k", 1000, 1, T0);
    mc__svc_flush(f->svc);
    int kind[8], n;
    uint64_t id[8];
    mc__wbuf_t rec = {0};
    assert_int_equal(beat(f, 11, T0 + 1), 0);
    take_notes(f, 11, seg, 0, T0 + 1, kind, id, 8, &n, &rec); /* the node keeps v1's record */
    assert_int_equal(n, 1);
    int rc;
    uint64_t v1 = stat_version(f, "k", T0 + 2, &rc);
    /* v2, acknowledged (in the log); the leader dies before the node fetches it. */
    put(f, 1, "k", 2000, 1, T0 + 2);
    mc__svc_flush(f->svc);
    uint64_t v2 = stat_version(f, "k", T0 + 2, &rc);
    assert_true(v2 > v1);

    fixture_t *g = NULL;
    setup((void **)&g);
    mc__svc_journal(g->svc, NULL, NULL, view);
    mount(g, 13, 16 * MiB, T0 + 10); /* a new node, no records: first */
    uint32_t seg2 = remount(g, 11, seg, T0 + 11);
    mc__wbuf_t body = {0};
    mc__pack(&body, "s", rec.p, (uint32_t)rec.len);
    assert_int_equal(call(g, 0, T0 + 12, MC__OP_RECORDS_REPORT, "quu*", (uint64_t)11, seg2, 1u,
                          body.p, (uint32_t)body.len),
                     0);
    free(body.p);
    free(rec.p);
    uint64_t got = stat_version(g, "k", T0 + 13, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(got, v2); /* not v1 back */
    teardown((void **)&g);
    mc__oplog_free(view);
}

/* The log's records of one node's segment must never be merged into
 * another node's segment that got the same id from the new leader: its
 * extents there hold other bytes. */
static void test_failover_never_merges_a_nodes_log_into_another_segment(void **state)
{
    fixture_t *f = *state;
    mc__oplog_t *view;
    assert_int_equal(mc__oplog_new(&view), 0);
    mc__svc_journal(f->svc, to_view, view, NULL);
    uint32_t sa = mount(f, 11, 16 * MiB, T0);
    put(f, 1, "a", 1000, 1, T0); /* on node 11's segment, its only one yet */
    /* Node 11's segment full, so that "b" goes to node 12's. */
    assert_int_equal(call(f, 1, T0, MC__OP_PUT_START, "kquuuuqisuuuq", "fill", 4u,
                          (uint64_t)(16 * MiB - 1024), 0u, 0644u, 1u, 0u, (uint64_t)0, (int64_t)0,
                          "", 0u, 0u, 0u, 0u, (uint64_t)0),
                     0);
    uint32_t sb = mount(f, 12, 16 * MiB, T0);
    put(f, 1, "x", 1000, 1, T0); /* where node 11 has "a" */
    put(f, 1, "b", 1000, 1, T0); /* where node 11 has nothing */
    mc__version_t *bv = mc__master_find(f->m, "b", 1);
    assert_non_null(bv);
    if (mc__vrep_seg(bv, 0) != sb)
        skip(); /* placement put it elsewhere: the scenario needs it on node 12 */
    mc__svc_flush(f->svc);
    int kind[8], n;
    uint64_t id[8];
    mc__wbuf_t rec = {0};
    assert_int_equal(beat(f, 11, T0 + 1), 0);
    take_notes(f, 11, sa, 0, T0 + 1, kind, id, 8, &n, &rec);

    /* The new leader: a new node first, then node 11 (its old id is
     * taken: it gets another one, maybe node 12's), node 12 still away. */
    fixture_t *g = NULL;
    setup((void **)&g);
    mc__svc_journal(g->svc, NULL, NULL, view);
    mount(g, 13, 16 * MiB, T0 + 10);
    uint32_t sa2 = remount(g, 11, sa, T0 + 11);
    mc__wbuf_t body = {0};
    mc__pack(&body, "s", rec.p, (uint32_t)rec.len);
    assert_int_equal(call(g, 0, T0 + 12, MC__OP_RECORDS_REPORT, "quu*", (uint64_t)11, sa2, 1u,
                          body.p, (uint32_t)body.len),
                     0);
    free(body.p);
    free(rec.p);
    mc__version_t *gb = mc__master_find(g->m, "b", 1);
    /* Node 11 never held "b": a replica there would send its readers to
     * whatever node 11 keeps at those offsets. */
    for (uint32_t r = 0; gb && r < gb->nrep; r++)
        assert_int_not_equal(mc__vrep_seg(gb, r), sa2);
    teardown((void **)&g);
    mc__oplog_free(view);
}

/* A put made at the new leader before an old version's node mounts there
 * is newer than that version, whatever id the new leader's clock gave it
 * to start with: the log knows every version id of before. (Here the old
 * leader's ids are past the new one's first, as for a standby started
 * before the leader, or on a host whose clock is behind.) */
static void test_failover_put_before_the_old_version_reports_wins(void **state)
{
    fixture_t *f = *state;
    mc__oplog_t *view;
    assert_int_equal(mc__oplog_new(&view), 0);
    mc__svc_journal(f->svc, to_view, view, NULL);
    uint32_t seg = mount(f, 11, 16 * MiB, T0);
    const char *others[] = {"o1", "o2", "o3", "o4"};
    for (int i = 0; i < 4; i++)
        put(f, 1, others[i], 100, 1, T0);
    put(f, 1, "k", 1000, 1, T0);
    mc__svc_flush(f->svc);
    int kind[8], n, rc;
    uint64_t id[8];
    assert_int_equal(beat(f, 11, T0 + 1), 0);
    take_notes(f, 11, seg, 0, T0 + 1, kind, id, 8, &n, NULL);
    uint64_t old = stat_version(f, "k", T0 + 1, &rc);
    mc__version_t *kv = mc__master_find(f->m, "k", 1);
    mc__rec_t r;
    mc__extent_t one;
    const mc__extent_t *ext = mc__master_record(f->m, kv, seg, &r, &one);
    mc__wbuf_t rec = {0};
    mc__pack_rec_head(&rec, &r);
    for (uint32_t i = 0; i < r.next; i++)
        mc__pack_extent(&rec, ext[i].off, ext[i].len);

    /* The new leader: another node mounts, a client writes "k" again
     * (acknowledged), then node 11 comes back with its record of before. */
    fixture_t *g = NULL;
    setup((void **)&g);
    mc__svc_journal(g->svc, NULL, NULL, view);
    mount(g, 12, 16 * MiB, T0 + 10);
    put(g, 1, "k", 2000, 1, T0 + 10);
    uint64_t fresh = stat_version(g, "k", T0 + 10, &rc);
    assert_int_equal(rc, 0);
    uint32_t seg2 = remount(g, 11, seg, T0 + 11);
    mc__wbuf_t body = {0};
    mc__pack(&body, "s", rec.p, (uint32_t)rec.len);
    assert_int_equal(call(g, 0, T0 + 12, MC__OP_RECORDS_REPORT, "quu*", (uint64_t)11, seg2, 1u,
                          body.p, (uint32_t)body.len),
                     0);
    free(body.p);
    free(rec.p);
    assert_int_equal(call(g, 1, T0 + 13, MC__OP_STAT, "k", "k", 1u), 0);
    mc_stat_t st;
    const char *sp = g->resp.p;
    size_t sl = g->resp.len;
    assert_int_equal(mc__take_stat(&sp, &sl, &st), 0);
    assert_int_not_equal(st.version, old);
    assert_int_equal(st.version, fresh);
    assert_int_equal(st.size, 2000); /* the put acknowledged last, not the one of before */
    teardown((void **)&g);
    mc__oplog_free(view);
}

/* A node whose report is overdue (the master ended its segment's hold
 * without it) still gets the op log's records of its segment merged: a
 * rename acknowledged by the old leader that the node had not fetched
 * stays done. */
static void test_failover_merges_the_log_of_a_segment_whose_report_is_overdue(void **state)
{
    fixture_t *f = *state;
    mc__oplog_t *view;
    assert_int_equal(mc__oplog_new(&view), 0);
    mc__svc_journal(f->svc, to_view, view, NULL);
    uint32_t seg = mount(f, 11, 16 * MiB, T0);
    put(f, 1, "k", 1000, 1, T0);
    mc__svc_flush(f->svc);
    int kind[8], n;
    uint64_t id[8];
    mc__wbuf_t rec = {0};
    assert_int_equal(beat(f, 11, T0 + 1), 0);
    take_notes(f, 11, seg, 0, T0 + 1, kind, id, 8, &n, &rec); /* its record: "k" */
    /* Renamed (acknowledged: in the log); the node does not fetch it. */
    assert_int_equal(call(f, 1, T0 + 2, MC__OP_RENAME, "kku", "k", 1u, "k2", 2u, 0u), 0);
    mc__svc_flush(f->svc);

    fixture_t *g = NULL;
    setup((void **)&g);
    mc__svc_journal(g->svc, NULL, NULL, view);
    assert_int_equal(remount(g, 11, seg, T0 + 10), seg);
    for (uint64_t t = T0 + 1010; t <= T0 + 61010; t += 1000) { /* alive, its report overdue */
        assert_int_equal(
            call(g, 0, t, MC__OP_HEARTBEAT, "ququ", (uint64_t)11, seg, (uint64_t)0, 0u), 0);
        mc__svc_tick(g->svc, t);
    }
    mc__wbuf_t body = {0};
    mc__pack(&body, "s", rec.p, (uint32_t)rec.len);
    assert_int_equal(call(g, 0, T0 + 61011, MC__OP_RECORDS_REPORT, "quu*", (uint64_t)11, seg, 1u,
                          body.p, (uint32_t)body.len),
                     0);
    free(body.p);
    free(rec.p);
    assert_int_equal(call(g, 1, T0 + 61012, MC__OP_STAT, "k", "k2", 2u), 0);
    assert_int_equal(call(g, 1, T0 + 61012, MC__OP_STAT, "k", "k", 1u), -ENOENT);
    teardown((void **)&g);
    mc__oplog_free(view);
}

/* Through two leader changes: the first drops node 11's segment (silent
 * past the TTL) and tells the log; the second, which knows nothing of it,
 * gives its id to a new node 12, whose records the log then holds under
 * that id; at a third leader node 11 comes back naming its old id before
 * node 12 does. The log's records of that id are node 12's: merged into
 * node 11's segment they would send readers of node 12's objects to
 * whatever node 11 keeps at those offsets. */
static void test_failover_never_merges_another_nodes_log_into_a_returning_segment(void **state)
{
    fixture_t *f = *state;
    mc__oplog_t *view;
    assert_int_equal(mc__oplog_new(&view), 0);
    mc__svc_journal(f->svc, to_view, view, NULL);
    uint32_t sa = mount(f, 11, 16 * MiB, T0);
    put(f, 1, "a", 1000, 1, T0);
    mc__svc_flush(f->svc);
    int kind[8], n;
    uint64_t id[8];
    mc__wbuf_t rec = {0};
    assert_int_equal(beat(f, 11, T0 + 1), 0);
    take_notes(f, 11, sa, 0, T0 + 1, kind, id, 8, &n, &rec); /* node 11 keeps "a"'s record */
    assert_int_equal(mc__svc_tick(f->svc, T0 + 4000), 1);    /* silent past the TTL: dropped */
    mc__svc_flush(f->svc);

    /* The second leader (its journal goes on into the same log). */
    fixture_t *g = NULL;
    setup((void **)&g);
    mc__svc_journal(g->svc, to_view, view, view);
    assert_int_equal(mount(g, 12, 16 * MiB, T0 + 10), sa); /* the id is free there */
    put(g, 1, "b", 4096, 1, T0 + 10); /* so that "c" is not where node 11 has "a" */
    put(g, 1, "c", 1000, 1, T0 + 10); /* on node 12's segment */
    mc__svc_flush(g->svc);
    teardown((void **)&g);

    /* The third leader: node 11 first, with its old id and its records. */
    fixture_t *h = NULL;
    setup((void **)&h);
    mc__svc_journal(h->svc, NULL, NULL, view);
    uint32_t sa3 = remount(h, 11, sa, T0 + 20);
    mc__wbuf_t body = {0};
    mc__pack(&body, "s", rec.p, (uint32_t)rec.len);
    assert_int_equal(call(h, 0, T0 + 21, MC__OP_RECORDS_REPORT, "quu*", (uint64_t)11, sa3, 1u,
                          body.p, (uint32_t)body.len),
                     0);
    free(body.p);
    free(rec.p);
    mc__version_t *hc = mc__master_find(h->m, "c", 1);
    for (uint32_t r = 0; hc && r < hc->nrep; r++)
        assert_int_not_equal(mc__vrep_seg(hc, r), sa3);
    /* Node 12 comes back under its id: the log's record of "c" joins its
     * report, on its segment. */
    assert_int_equal(remount(h, 12, sa, T0 + 22), sa);
    assert_int_equal(
        call(h, 0, T0 + 23, MC__OP_RECORDS_REPORT, "quu*", (uint64_t)12, sa, 1u, "", 0u), 0);
    hc = mc__master_find(h->m, "c", 1);
    assert_non_null(hc);
    assert_int_equal(mc__vrep_seg(hc, 0), sa);
    teardown((void **)&h);
    mc__oplog_free(view);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_owner_gone_revokes_and_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_owner_gone_leaves_other_owners, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_replaced_version_outlives_its_segment, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_remounted_segment_is_held_for_a_lease, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_remounted_checked_segment_takes_puts_once_it_enforces,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_fenced_space_on_a_checked_segment_goes_at_the_beat,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_fenced_space_on_the_masters_own_segment, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_segment_ids_do_not_wrap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_releases_replaced_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_node_expiry_and_remount, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remount_epoch_is_above_every_epoch_handed_out, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_rdma_record_in_replica_sets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_put_expires, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_restores_a_lost_replica, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_task_expires, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_of_a_replaced_object, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_drop_replica, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_drop_replica_out_of_memory_ends_the_put, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_records_reach_nodes_and_rebuild_a_new_master, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_failover_keeps_logged_put_when_a_new_node_mounts_first,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_failover_never_merges_a_nodes_log_into_another_segment,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_failover_put_before_the_old_version_reports_wins,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_failover_never_merges_another_nodes_log_into_a_returning_segment, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_failover_merges_the_log_of_a_segment_whose_report_is_overdue, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
