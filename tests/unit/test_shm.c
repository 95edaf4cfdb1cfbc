/*
 * test_shm.c - unit tests for the shared-memory transport's pieces
 * (core/src/transport/shm.c) and for SHM_MAP end to end on one loop: a server with a
 * memfd segment answers on its abstract Unix socket, and the descriptor
 * crosses the io_uring recvmsg path (loop_io.c, net.c) into the client, which
 * maps it and sees the server's bytes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime/log.h"
#include "runtime/rpc.h"
#include "server/server.h"
#include "transport/shm.h"
#include "transport/transport.h"

#define SEG_SIZE (1u << 20)

static void test_segment_is_a_sealed_memfd(void **state)
{
    mc__seg_t seg;
    char *map;

    assert_int_equal(mc__seg_create(SEG_SIZE, "test-seg", &seg), 0);
    assert_true(seg.fd >= 0);
    assert_int_equal(seg.size, SEG_SIZE);
    assert_true(fcntl(seg.fd, F_GET_SEALS) & F_SEAL_SHRINK);
    assert_true(fcntl(seg.fd, F_GET_SEALS) & F_SEAL_GROW);
    assert_int_equal(ftruncate(seg.fd, 0), -1); /* nobody can make us fault */
    assert_int_equal(ftruncate(seg.fd, 2 * SEG_SIZE), -1);

    /* A second mapping of the memfd is the same memory. */
    assert_int_equal(mc__shm_map(seg.fd, mc__shm_memfd_size(SEG_SIZE), &map), 0);
    memcpy(seg.base + 4096, "through the memfd", 17);
    assert_memory_equal(map + 4096, "through the memfd", 17);
    map[SEG_SIZE - 1] = 'z';
    assert_int_equal(seg.base[SEG_SIZE - 1], 'z');
    munmap(map, mc__shm_memfd_size(SEG_SIZE));

    /* More than the memfd holds (its segment and fence), or nothing, is
     * refused. */
    assert_int_equal(mc__shm_map(seg.fd, mc__shm_memfd_size(SEG_SIZE) + 1, &map), -EINVAL);
    assert_int_equal(mc__shm_map(seg.fd, 0, &map), -EINVAL);
    mc__seg_destroy(&seg);
    assert_null(seg.base);
    mc__seg_destroy(&seg); /* idempotent */
    assert_int_equal(mc__seg_create(0, "x", &seg), -EINVAL);
}

static void test_map_refuses_unsealed_memfd(void **state)
{
    char *map;
    int fd = memfd_create("unsealed", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, SEG_SIZE), 0);
    assert_int_equal(mc__shm_map(fd, SEG_SIZE, &map), -EPERM);
    close(fd);
}

/* A file's bytes as a segment: written through the mapping, read back
 * with pread(); the errors of a file that cannot be one. */
static void test_segment_in_a_file(void **state)
{
    (void)state;
    char path[] = "/tmp/mc-test-segfile-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    long page = sysconf(_SC_PAGESIZE);
    assert_int_equal(ftruncate(fd, 3 * page), 0);
    mc__seg_t seg;
    assert_int_equal(mc__seg_map_file(path, (uint64_t)page, (uint64_t)page, &seg), 0);
    assert_int_equal(seg.fd, -1); /* not offered to peers */
    /* Its fence (for RDMA peers) is not in the file: apart, and clear. */
    assert_non_null(seg.fence);
    assert_true((char *)seg.fence + sizeof(*seg.fence) <= seg.base ||
                (char *)seg.fence >= seg.base + page);
    assert_int_equal(atomic_load(&seg.fence->epoch), 0);
    assert_int_equal(atomic_load(&seg.fence->busy[MC__SHM_FENCE_SLOTS - 1]), 0);
    memcpy(seg.base + 10, "hello", 5);
    char got[5];
    assert_int_equal(pread(fd, got, 5, page + 10), 5);
    assert_memory_equal(got, "hello", 5);
    mc__seg_destroy(&seg);
    assert_null(seg.base);

    assert_int_equal(mc__seg_map_file(path, (uint64_t)page, 100, &seg), -EINVAL);
    assert_int_equal(mc__seg_map_file(path, 3 * (uint64_t)page, (uint64_t)page, &seg), -EOVERFLOW);
    assert_int_equal(mc__seg_map_file(path, 0, 0, &seg), -EINVAL);
    assert_int_equal(mc__seg_map_file("/tmp", (uint64_t)page, 0, &seg), -EISDIR);
    close(fd);
    unlink(path);
    assert_int_equal(mc__seg_map_file(path, (uint64_t)page, 0, &seg), -ENOENT);
}

static void test_unix_addr_and_locality(void **state)
{
    char name[MC__ADDR_STRLEN], longer[200];

    assert_int_equal(mc__shm_unix_addr("127.0.0.1:7100", name, sizeof(name)), 0);
    assert_string_equal(name, "unix:@mooncake-data/127.0.0.1:7100");
    /* A node served on a Unix socket answers SHM_MAP on that socket. */
    assert_int_equal(mc__shm_unix_addr("unix:/run/mc.sock", name, sizeof(name)), 0);
    assert_string_equal(name, "unix:/run/mc.sock");
    memset(longer, 'a', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    assert_int_equal(mc__shm_unix_addr(longer, name, sizeof(name)), -ENAMETOOLONG);
    memset(longer + 100, '\0', 1); /* fits the string, not a sun_path */
    char big[300];
    assert_int_equal(mc__shm_unix_addr(longer, big, sizeof(big)), -ENAMETOOLONG);

    assert_true(mc__addr_is_local("127.0.0.1:1"));
    assert_true(mc__addr_is_local("127.3.2.1:1"));
    assert_true(mc__addr_is_local("0.0.0.0:1"));
    assert_true(mc__addr_is_local("[::1]:1"));
    assert_true(mc__addr_is_local("[::]:1"));
    assert_false(mc__addr_is_local("192.0.2.1:1")); /* TEST-NET-1: documentation only */
    assert_true(mc__addr_is_local("unix:@x"));      /* a Unix socket is on this host */
    assert_true(mc__addr_is_local("unix:/run/mc.sock"));
    assert_false(mc__addr_is_local("not an address"));
    assert_false(mc__addr_is_local(NULL));
}

/* ---- SHM_MAP over a real server ---- */

struct env {
    mc_loop_t *l;
    mc__seg_t seg;
    mc__server_t *srv;
    mc__rpc_client_t *cl;
    mc_timer_t guard;
    int done, status, fd;
    uint64_t size, fence_off, epoch;
    uint32_t slot;
    uint32_t alt; /* another number lookup() answers for the segment (0: none) */
};

static int lookup(void *arg, uint32_t seg, mc__seg_t *out, uint64_t *epoch)
{
    struct env *e = arg;
    if (seg != 7 && (!e->alt || seg != e->alt))
        return -ENOENT;
    *out = e->seg;
    *epoch = e->epoch ? e->epoch : 1;
    return 0;
}

static void mapped(void *arg, int status, const char *body, size_t len)
{
    struct env *e = arg;
    e->status = status;
    e->fd = -1;
    if (status >= 0) {
        assert_int_equal(mc__unpack(body, len, "qqu", &e->size, &e->fence_off, &e->slot), 0);
        e->fd = mc__conn_take_fd(mc__rpc_client_conn(e->cl));
    }
    e->done = 1;
    mc_loop_stop(e->l);
}

static void stop_loop(mc_timer_t *t)
{
    mc_loop_stop(t->loop);
}

static void shm_map_call(struct env *e, uint32_t seg)
{
    char req[4];
    mc__wbuf_t w = {.p = req, .cap = sizeof(req)};
    mc__pack(&w, "u", seg);
    e->done = 0;
    assert_int_equal(mc__rpc_client_call(e->cl, MC__OP_SHM_MAP, w.p, w.len, 3000, mapped, e), 0);
    assert_int_equal(mc_timer_start(e->l, &e->guard, 5000, 0, stop_loop), 0);
    mc_loop_run(e->l);
    mc_timer_stop(&e->guard);
    assert_true(e->done);
}

/* Starts e's loop, its segment (id 7 to lookup()) and a server on TCP
 * loopback that serves SHM_MAP; *a is the server's listen address. */
static void env_start(struct env *e, mc__addr_t *a)
{
    assert_int_equal(mc_loop_new(&e->l), 0);
    assert_int_equal(mc__seg_create(SEG_SIZE, "test-seg", &e->seg), 0);
    assert_int_equal(mc__addr_parse("127.0.0.1:0", -1, a), 0);
    mc__server_opts_t so = {.seg_lookup = lookup, .seg_arg = e, .shm = 1};
    assert_int_equal(mc__server_new(&e->srv, e->l, a, &so), 0);
}

/* Closes the client and the server, lets the loop finish closing them,
 * and frees the loop and the segment. */
static void env_close(struct env *e)
{
    mc__rpc_client_close(e->cl);
    mc__server_close(e->srv);
    mc_timer_start(e->l, &e->guard, 30, 0, stop_loop);
    mc_loop_run(e->l);
    mc_loop_free(e->l);
    mc__seg_destroy(&e->seg);
}

static void test_shm_map_passes_the_memfd(void **state)
{
    struct env e = {0};
    mc__addr_t a;
    char name[MC__ADDR_STRLEN];
    char *map;

    mc__log_init("test_shm", MC__LOG_WARN);
    env_start(&e, &a);
    memcpy(e.seg.base + 100, "the node's bytes", 16);

    assert_int_equal(mc__shm_unix_addr(mc__server_addr(e.srv), name, sizeof(name)), 0);
    assert_int_equal(mc__addr_parse(name, -1, &a), 0);
    assert_int_equal(mc__rpc_client_new(e.l, &a, 2000, NULL, &e, &e.cl), 0);

    shm_map_call(&e, 8); /* not ours: no descriptor */
    assert_int_equal(e.status, -ENOENT);
    shm_map_call(&e, 7);
    assert_int_equal(e.status, 0);
    assert_int_equal(e.size, SEG_SIZE);
    assert_int_equal(e.fence_off, mc__shm_fence_off(SEG_SIZE));
    assert_int_equal(e.slot, 0);
    assert_true(e.fd >= 0);
    assert_true(fcntl(e.fd, F_GETFD) & FD_CLOEXEC);
    assert_int_equal(mc__shm_map(e.fd, mc__shm_memfd_size(e.size), &map), 0);
    close(e.fd);
    assert_memory_equal(map + 100, "the node's bytes", 16);
    memcpy(map + 200, "the client's", 12);
    assert_memory_equal(e.seg.base + 200, "the client's", 12);
    /* The fence is the node's: the same memory, at the epoch it had. */
    mc__shm_fence_t *f = (mc__shm_fence_t *)(void *)(map + e.fence_off);
    assert_int_equal((char *)mc__seg_fence(e.seg.base, e.seg.size) - e.seg.base, e.fence_off);
    assert_int_equal(f->epoch, 1);
    munmap(map, mc__shm_memfd_size(e.size));
    /* The same connection asking again keeps its slot. */
    shm_map_call(&e, 7);
    assert_int_equal(e.slot, 0);
    close(e.fd);

    mc__server_stats_t st;
    mc__server_stats(e.srv, &st);
    assert_int_equal(st.shm_maps, 2);

    env_close(&e);
}

/* A new client of e's shm socket, which maps segment 7: its mapping and
 * slot in *f. */
static char *map_client(struct env *e, mc__rpc_client_t **cl, mc__shm_fence_t **f)
{
    char name[MC__ADDR_STRLEN];
    mc__addr_t a;
    char *map;
    assert_int_equal(mc__shm_unix_addr(mc__server_addr(e->srv), name, sizeof(name)), 0);
    assert_int_equal(mc__addr_parse(name, -1, &a), 0);
    assert_int_equal(mc__rpc_client_new(e->l, &a, 2000, NULL, e, &e->cl), 0);
    shm_map_call(e, 7);
    assert_int_equal(e->status, 0);
    assert_int_equal(mc__shm_map(e->fd, mc__shm_memfd_size(e->size), &map), 0);
    close(e->fd);
    *cl = e->cl;
    *f = (mc__shm_fence_t *)(void *)(map + e->fence_off);
    return map;
}

/* Runs e's loop until the server has seen a connection close. */
static void settle(struct env *e)
{
    mc_timer_start(e->l, &e->guard, 50, 0, stop_loop);
    mc_loop_run(e->l);
}

/* The fence of a mapped segment: a client's copy of an epoch below the
 * node's is refused once the node raised its fence; a copy in progress
 * (its slot marked) holds the rise back; a client that goes away frees its
 * slot, marked or not. */
static void test_fence_refuses_old_epochs_and_holds_the_rise_for_copies(void **state)
{
    struct env e = {0};
    mc__addr_t a;
    mc__rpc_client_t *c1, *c2;
    mc__shm_fence_t *f1, *f2;

    mc__log_init("test_shm", MC__LOG_WARN);
    env_start(&e, &a);
    e.epoch = 10;
    char *m1 = map_client(&e, &c1, &f1);
    uint32_t s1 = e.slot;
    char *m2 = map_client(&e, &c2, &f2);
    uint32_t s2 = e.slot;
    assert_int_not_equal(s1, s2);

    /* At epoch 10, a copy of 10 lands; nothing is in progress. */
    assert_int_equal(mc__shm_copy_in(f1, s1, 10, m1 + 64, "ten", 3), 0);
    assert_memory_equal(e.seg.base + 64, "ten", 3);
    assert_int_equal(mc__server_enforced(e.srv, 7, 10), 10);

    /* The master raises the epoch to 11: the node enforces it at once
     * (no copy in progress), and a copy of 10 is refused from then on. */
    e.epoch = 11;
    assert_int_equal(mc__server_enforced(e.srv, 7, 11), 11);
    assert_int_equal(mc__shm_copy_in(f1, s1, 10, m1 + 64, "old", 3), -ESTALE);
    assert_memory_equal(e.seg.base + 64, "ten", 3);
    assert_int_equal(mc__shm_copy_in(f2, s2, 11, m2 + 128, NULL, 8), 0); /* zeros */

    /* A client frozen half-way through a copy of 11 (its slot marked)
     * holds a rise to 12 back until the copy ends. */
    atomic_store(&f2->busy[s2], 11);
    e.epoch = 12;
    assert_int_equal(mc__server_enforced(e.srv, 7, 12), 11);
    assert_int_equal(mc__shm_copy_in(f1, s1, 11, m1 + 64, "old", 3), -ESTALE);
    atomic_store(&f2->busy[s2], 0);
    assert_int_equal(mc__server_enforced(e.srv, 7, 12), 12);

    /* A client that dies half-way through a copy: its connection closes,
     * its slot is cleared and free again. */
    atomic_store(&f1->busy[s1], 12);
    e.epoch = 13;
    assert_int_equal(mc__server_enforced(e.srv, 7, 13), 12);
    mc__rpc_client_close(c1);
    settle(&e);
    assert_int_equal(mc__server_enforced(e.srv, 7, 13), 13);
    munmap(m1, mc__shm_memfd_size(SEG_SIZE));
    mc__shm_fence_t *f3;
    char *m3 = map_client(&e, &c1, &f3);
    assert_int_equal(e.slot, s1);
    assert_int_equal(f3->busy[s1], 0);
    munmap(m3, mc__shm_memfd_size(SEG_SIZE));
    munmap(m2, mc__shm_memfd_size(SEG_SIZE));
    mc__rpc_client_close(c2);
    env_close(&e); /* closes c1 */
}

/* The stress test's client thread: copies 64 bytes of its epoch's tag
 * with the epoch it was last granted, until told to stop. */
struct stress {
    mc__shm_fence_t *f;
    uint32_t slot;
    char *at; /* in the client's mapping */
    _Atomic uint64_t granted;
    _Atomic int stop;
    uint64_t landed, refused;
};

static void *stress_client(void *arg)
{
    struct stress *st = arg;
    char buf[64];
    while (!atomic_load(&st->stop)) {
        uint64_t e = atomic_load(&st->granted);
        memset(buf, (int)(e & 0x7f), sizeof(buf));
        if (mc__shm_copy_in(st->f, st->slot, e, st->at, buf, sizeof(buf)) == 0)
            st->landed++;
        else
            st->refused++;
    }
    return NULL;
}

/* Reads of a mapped segment (the shm transport's copies) check, after
 * the copy, the fence's mount epoch, which the node raises when its master
 * mounts the segment again (mc__data_plane_mounted()): a read for a
 * replica of an older epoch fails with -ESTALE; one of the mount's epoch or
 * later reads; epochs raised within a mount (the fence's epoch, for
 * writes) refuse no read. */
static void test_reads_of_a_segment_mounted_again_are_refused(void **state)
{
    struct env e = {0};
    mc__addr_t a;
    mc__rpc_client_t *c;
    mc__shm_fence_t *f;

    mc__log_init("test_shm", MC__LOG_WARN);
    env_start(&e, &a);
    e.epoch = 10;
    char *m = map_client(&e, &c, &f);
    memcpy(e.seg.base + 64, "old", 3);
    mc__tp_ep_t ep = {
        .mem = {.base = m, .size = SEG_SIZE, .fence = f, .slot = e.slot, .mount = &f->mount}};
    char buf[3];
    mc__tp_piece_t rd = {.buf = buf, .seg = 7, .epoch = 10, .off = 64, .len = 3};
    assert_int_equal(mc__tp_shm.move(&ep, &rd, NULL, NULL), 0);
    assert_memory_equal(buf, "old", 3);
    e.epoch = 11; /* raised for a write that ended: reads go on */
    assert_int_equal(mc__server_enforced(e.srv, 7, 11), 11);
    assert_int_equal(mc__tp_shm.move(&ep, &rd, NULL, NULL), 0);

    /* Dropped by the master, mounted again with epoch 12: a new object
     * takes the space. */
    mc__data_plane_mounted(mc__server_data_plane(e.srv), 7, 12);
    assert_int_equal(atomic_load(&f->mount), 12);
    e.epoch = 12;
    char fresh[] = "new";
    mc__tp_piece_t wr = {.write = 1, .buf = fresh, .seg = 7, .epoch = 12, .off = 64, .len = 3};
    assert_int_equal(mc__tp_shm.move(&ep, &wr, NULL, NULL), 0);
    assert_int_equal(mc__tp_shm.move(&ep, &rd, NULL, NULL), -ESTALE);
    rd.epoch = 12;
    assert_int_equal(mc__tp_shm.move(&ep, &rd, NULL, NULL), 0);
    assert_memory_equal(buf, "new", 3);
    ep.mem.mount = NULL; /* no mount word: no check (an embedded store's) */
    rd.epoch = 1;
    assert_int_equal(mc__tp_shm.move(&ep, &rd, NULL, NULL), 0);

    munmap(m, mc__shm_memfd_size(SEG_SIZE));
    env_close(&e); /* closes c */
    (void)c;
}

/* The fence under a client copying all the time on another thread: once
 * the node counts epoch r + 1 as enforced, no copy of epoch r lands, so
 * bytes written there then (space handed to another object) stay. */
static void test_fence_holds_against_a_client_racing_the_rise(void **state)
{
    struct env e = {0};
    mc__addr_t a;
    mc__rpc_client_t *c;
    struct stress st = {0};
    pthread_t th;

    mc__log_init("test_shm", MC__LOG_WARN);
    env_start(&e, &a);
    e.epoch = 1;
    char *m = map_client(&e, &c, &st.f);
    st.slot = e.slot;
    st.at = m + 4096;
    atomic_store(&st.granted, 1);
    assert_int_equal(pthread_create(&th, NULL, stress_client, &st), 0);
    char *mine = e.seg.base + 4096;
    for (uint64_t r = 1; r <= 20000; r++) {
        uint64_t spins = 0;
        while (mc__server_enforced(e.srv, 7, r + 1) != r + 1)
            assert_true(++spins < 100000000); /* a copy holds it: it ends */
        /* The space is someone else's now; the client, still at epoch r,
         * keeps trying. */
        memset(mine, 0xEE, 64);
        for (int i = 0; i < 200; i++)
            for (int j = 0; j < 64; j++)
                assert_int_equal((unsigned char)mine[j], 0xEE);
        atomic_store(&st.granted, r + 1); /* its write goes on at r + 1 */
    }
    atomic_store(&st.stop, 1);
    pthread_join(th, NULL);
    assert_true(st.landed > 0);
    assert_true(st.refused > 0);
    munmap(m, mc__shm_memfd_size(SEG_SIZE));
    env_close(&e);
}

/* Revokes an RDMA peer the data plane gave up on, as the node's does:
 * the transport tears its queue pair down, then says it left. */
static mc__data_plane_t *revoking;
static const void *revoked;

static void revoke_peer(const void *owner)
{
    revoked = owner;
    mc__data_plane_closed(revoking, owner);
}

/* Slots for writers the node does not see (RDMA connections): they share
 * the fence with mappings, keep their slots when the segment is mounted
 * again under another number, and hold a rise back while marked; one that
 * holds it too long is revoked, which frees its slot and lets the rise
 * go on. */
static void test_fence_slots_for_rdma_peers(void **state)
{
    struct env e = {0};
    mc__addr_t a;
    mc__rpc_client_t *c1;
    mc__shm_fence_t *f1;
    int A, B, C; /* three peers */
    _Atomic uint64_t *ep = NULL;

    mc__log_init("test_shm", MC__LOG_ERROR);
    env_start(&e, &a);
    e.epoch = 10;
    char *m1 = map_client(&e, &c1, &f1);
    uint32_t s1 = e.slot;
    mc__data_plane_t *dp = mc__server_data_plane(e.srv);
    assert_non_null(dp);
    mc__shm_fence_t *f = mc__seg_fence(e.seg.base, e.seg.size);
    _Atomic uint64_t *wa = mc__data_plane_fence_join(dp, 7, &A, "10.0.0.2:1", revoke_peer, &ep);
    assert_non_null(wa);
    assert_ptr_equal(ep, &f->epoch);
    assert_ptr_not_equal(wa, &f->busy[s1]);
    assert_ptr_equal(mc__data_plane_fence_join(dp, 7, &A, "10.0.0.2:1", revoke_peer, &ep), wa);
    /* Mounted again as segment 8: the same memory, fence and slots. */
    e.alt = 8;
    _Atomic uint64_t *wb = mc__data_plane_fence_join(dp, 8, &B, "10.0.0.3:1", revoke_peer, &ep);
    assert_non_null(wb);
    assert_ptr_not_equal(wb, wa);
    assert_ptr_not_equal(wb, &f->busy[s1]);
    assert_null(mc__data_plane_fence_join(dp, 9, &C, "10.0.0.4:1", revoke_peer, &ep));

    /* A write of 10 marked by A holds a rise to 11 back, under either
     * number; the fence is raised all the same. */
    atomic_store(wa, 10);
    e.epoch = 11;
    assert_int_equal(mc__server_enforced(e.srv, 8, 11), 10);
    assert_int_equal(mc__server_enforced(e.srv, 7, 11), 10);
    assert_int_equal(atomic_load(&f->epoch), 11);
    atomic_store(wa, 0);
    assert_int_equal(mc__server_enforced(e.srv, 8, 11), 11);

    /* B stops with a write of 11 marked: it holds a rise to 12 back until
     * it has done so for held_ms, then it is revoked and its slot freed. */
    dp->held_ms = 100;
    revoking = dp;
    atomic_store(wb, 11);
    e.epoch = 12;
    uint64_t t0 = mc_loop_now_ms();
    assert_int_equal(mc__server_enforced(e.srv, 8, 12), 11);
    while (mc__server_enforced(e.srv, 8, 12) != 12 && mc_loop_now_ms() - t0 < 3000)
        settle(&e);
    assert_ptr_equal(revoked, &B);
    assert_true(mc_loop_now_ms() - t0 >= 100);
    assert_int_equal(atomic_load(wb), 0);
    assert_ptr_equal(mc__data_plane_fence_join(dp, 8, &C, "10.0.0.4:1", revoke_peer, &ep), wb);
    mc__data_plane_closed(dp, &A);
    mc__data_plane_closed(dp, &C);
    munmap(m1, mc__shm_memfd_size(SEG_SIZE));
    env_close(&e); /* closes c1 */
}

/* A segment in a file (mc__seg_map_file()) is not offered for mapping, but
 * its RDMA peers' one-sided writes get fence slots as a memfd segment's
 * do: a write marked there holds a rise back, and a write below the
 * fence's epoch is refused by its peer. */
static void test_fence_slots_for_rdma_peers_in_a_file(void **state)
{
    (void)state;
    struct env e = {0};
    mc__addr_t a;
    int A, B;
    _Atomic uint64_t *ep = NULL;
    char path[] = "/tmp/mc-test-segfile-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, SEG_SIZE), 0);

    mc__log_init("test_shm", MC__LOG_ERROR);
    assert_int_equal(mc_loop_new(&e.l), 0);
    assert_int_equal(mc__seg_map_file(path, SEG_SIZE, 0, &e.seg), 0);
    assert_int_equal(mc__addr_parse("127.0.0.1:0", -1, &a), 0);
    mc__server_opts_t so = {.seg_lookup = lookup, .seg_arg = &e, .shm = 1};
    assert_int_equal(mc__server_new(&e.srv, e.l, &a, &so), 0);
    e.epoch = 10;
    mc__data_plane_t *dp = mc__server_data_plane(e.srv);
    assert_non_null(dp);
    _Atomic uint64_t *wa = mc__data_plane_fence_join(dp, 7, &A, "10.0.0.2:1", revoke_peer, &ep);
    assert_non_null(wa);
    assert_non_null(ep);
    _Atomic uint64_t *wb = mc__data_plane_fence_join(dp, 7, &B, "10.0.0.3:1", revoke_peer, &ep);
    assert_non_null(wb);
    assert_ptr_not_equal(wa, wb);
    /* The fence is not in the file: the file's bytes are the segment's. */
    assert_true((char *)ep < e.seg.base || (char *)ep >= e.seg.base + SEG_SIZE);

    atomic_store(wa, 10);
    e.epoch = 11;
    assert_int_equal(mc__server_enforced(e.srv, 7, 11), 10);
    assert_int_equal(atomic_load(ep), 11); /* a write of 10 starting now is refused */
    atomic_store(wa, 0);
    assert_int_equal(mc__server_enforced(e.srv, 7, 11), 11);

    /* Not offered for mapping: it has no memfd. */
    char name[128];
    assert_int_equal(mc__shm_unix_addr(mc__server_addr(e.srv), name, sizeof(name)), 0);
    assert_int_equal(mc__addr_parse(name, -1, &a), 0);
    assert_int_equal(mc__rpc_client_new(e.l, &a, 2000, NULL, &e, &e.cl), 0);
    shm_map_call(&e, 7);
    assert_int_equal(e.status, -EOPNOTSUPP);
    mc__data_plane_closed(dp, &A);
    mc__data_plane_closed(dp, &B);
    env_close(&e);
    close(fd);
    unlink(path);
}

/* Every slot of a fence taken (RDMA peers whose host vanished keep theirs:
 * an RC queue pair has no keepalive): a new RDMA peer takes the slot of the
 * one that joined first among those with no write in progress, which is
 * revoked (its queue pair torn down; a live one connects again). A marked
 * slot and a mapping's are never taken. */
static void test_full_fence_revokes_the_oldest_idle_rdma_peer(void **state)
{
    (void)state;
    struct env e = {0};
    mc__addr_t a;
    _Atomic uint64_t *ep = NULL;
    static char owners[MC__SHM_FENCE_SLOTS + 2];
    _Atomic uint64_t *w[MC__SHM_FENCE_SLOTS + 2];

    mc__log_init("test_shm", MC__LOG_ERROR);
    env_start(&e, &a);
    e.epoch = 10;
    mc__rpc_client_t *c1;
    mc__shm_fence_t *f1;
    char *m1 = map_client(&e, &c1, &f1); /* a mapping holds slot e.slot */
    uint32_t mapped = e.slot;
    mc__data_plane_t *dp = mc__server_data_plane(e.srv);
    revoking = dp;
    revoked = NULL;
    for (int i = 0; i < MC__SHM_FENCE_SLOTS - 1; i++) {
        w[i] = mc__data_plane_fence_join(dp, 7, &owners[i], "10.0.0.9:1", revoke_peer, &ep);
        assert_non_null(w[i]);
    }
    assert_null(revoked); /* room for every one of them */
    /* The first two mark a write; the third is the oldest idle one. */
    atomic_store(w[0], 10);
    atomic_store(w[1], 10);
    _Atomic uint64_t *wn = mc__data_plane_fence_join(dp, 7, &owners[MC__SHM_FENCE_SLOTS],
                                                     "10.0.0.8:1", revoke_peer, &ep);
    assert_ptr_equal(revoked, &owners[2]);
    assert_ptr_equal(wn, w[2]);
    /* The next takes the fourth's. */
    revoked = NULL;
    assert_ptr_equal(mc__data_plane_fence_join(dp, 7, &owners[MC__SHM_FENCE_SLOTS + 1],
                                               "10.0.0.8:2", revoke_peer, &ep),
                     w[3]);
    assert_ptr_equal(revoked, &owners[3]);
    /* The mapping's slot was never handed out. */
    mc__shm_fence_t *f = mc__seg_fence(e.seg.base, e.seg.size);
    for (int i = 0; i < MC__SHM_FENCE_SLOTS - 1; i++)
        assert_ptr_not_equal(w[i], &f->busy[mapped]);
    atomic_store(w[0], 0);
    atomic_store(w[1], 0);
    for (int i = 0; i < MC__SHM_FENCE_SLOTS + 2; i++)
        mc__data_plane_closed(dp, &owners[i]);
    munmap(m1, mc__shm_memfd_size(SEG_SIZE));
    env_close(&e);
}

static void test_shm_map_refused_over_tcp(void **state)
{
    struct env e = {0};
    mc__addr_t a;

    env_start(&e, &a);
    assert_int_equal(mc__addr_parse(mc__server_addr(e.srv), -1, &a), 0);
    assert_int_equal(mc__rpc_client_new(e.l, &a, 2000, NULL, &e, &e.cl), 0);
    shm_map_call(&e, 7);
    assert_int_equal(e.status, -EOPNOTSUPP);
    env_close(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segment_is_a_sealed_memfd),
        cmocka_unit_test(test_map_refuses_unsealed_memfd),
        cmocka_unit_test(test_segment_in_a_file),
        cmocka_unit_test(test_unix_addr_and_locality),
        cmocka_unit_test(test_shm_map_passes_the_memfd),
        cmocka_unit_test(test_shm_map_refused_over_tcp),
        cmocka_unit_test(test_fence_refuses_old_epochs_and_holds_the_rise_for_copies),
        cmocka_unit_test(test_fence_holds_against_a_client_racing_the_rise),
        cmocka_unit_test(test_reads_of_a_segment_mounted_again_are_refused),
        cmocka_unit_test(test_fence_slots_for_rdma_peers),
        cmocka_unit_test(test_fence_slots_for_rdma_peers_in_a_file),
        cmocka_unit_test(test_full_fence_revokes_the_oldest_idle_rdma_peer),
    };
    alarm(60);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
