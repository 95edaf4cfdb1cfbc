/*
 * svc_fixture.h - what test_service.c, test_service_nodes.c and test_record_ids.c share: a
 * master and its service (mc__svc_new()) as the fixture, requests sent with
 * call(), segments mounted, and whole puts. Included once by each test file
 * (its functions are static; a file uses some of them).
 */
#ifndef MC_TEST_SVC_FIXTURE_H
#define MC_TEST_SVC_FIXTURE_H

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
#include "svc_call.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

#define T0 1000000
#define MiB (1ULL << 20)

/* A node of the fixture: its segment and the epoch it enforces there. */
typedef struct fnode {
    uint64_t id;
    uint32_t seg;
    uint64_t epoch;
    uint32_t flags; /* MC__MOUNT_CHECKED: every write passes its check */
} fnode_t;

typedef struct fixture {
    mc__master_t *m;
    mc__svc_t *svc;
    mc__wbuf_t resp;
    fnode_t nodes[16];
    int nnodes;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    svc_test_new(&f->m, &f->svc);
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

/* Sends op with a body packed per fmt; returns the status. The response
 * body is in f->resp. */
static int call(fixture_t *f, uint64_t owner, uint64_t now, uint16_t op, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = svc_vcall(f->svc, &f->resp, owner, now, op, fmt, ap);
    va_end(ap);
    return rc;
}

/* Mounts a segment of node (seg id 0: any) with RDMA record rdma ("": none)
 * and flags (MC__MOUNT_*). */
static uint32_t mount_flags(fixture_t *f, uint64_t node, uint32_t seg, uint64_t size, uint64_t now,
                            const char *rdma, uint32_t flags)
{
    const char *addr = "127.0.0.1:7000";
    int i = 0;
    while (i < f->nnodes && f->nodes[i].id != node)
        i++;
    uint64_t had = i < f->nnodes ? f->nodes[i].epoch : 0; /* what it enforced before */
    assert_int_equal(call(f, 1, now, MC__OP_MOUNT_SEGMENT, "qusqsuq", node, seg, addr,
                          (uint32_t)strlen(addr), size, rdma, (uint32_t)strlen(rdma), flags, had),
                     0);
    uint32_t got;
    uint64_t run, epoch;
    assert_int_equal(mc__unpack(f->resp.p, f->resp.len, "uqq", &got, &run, &epoch), 0);
    assert_true(epoch > had); /* the master's is past the node's */
    assert_true(i < 16);
    f->nnodes += i == f->nnodes;
    f->nodes[i] = (fnode_t){node, got, epoch, flags & MC__MOUNT_CHECKED};
    return got;
}

static uint32_t mount_rdma(fixture_t *f, uint64_t node, uint32_t seg, uint64_t size, uint64_t now,
                           const char *rdma)
{
    return mount_flags(f, node, seg, size, now, rdma, 0);
}

/* Node's heartbeat at now, as a node sends it: its segment and the epoch
 * it enforces, which it raises to the master's answer at once (and says
 * so at its next beat). Returns the status; the answer is in f->resp. */
static int beat(fixture_t *f, uint64_t node, uint64_t now)
{
    fnode_t *n = NULL;
    for (int i = 0; i < f->nnodes; i++)
        if (f->nodes[i].id == node)
            n = &f->nodes[i];
    int rc = call(f, 0, now, MC__OP_HEARTBEAT, "ququ", node, n ? n->seg : 0u,
                  n ? n->epoch : (uint64_t)0, n ? n->flags : 0u);
    uint32_t flags;
    uint64_t want;
    if (rc == 0 && n && mc__unpack(f->resp.p, f->resp.len, "uq", &flags, &want) == 0 &&
        want > n->epoch)
        n->epoch = want;
    return rc;
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

/* STAT of key at f: its status, the stat in *st. */
static int key_stat(fixture_t *f, const char *key, uint64_t now, mc_stat_t *st)
{
    int rc = call(f, 1, now, MC__OP_STAT, "k", key, (uint32_t)strlen(key));
    memset(st, 0, sizeof(*st));
    if (rc == 0) {
        const char *sp = f->resp.p;
        size_t sl = f->resp.len;
        assert_int_equal(mc__take_stat(&sp, &sl, st), 0);
    }
    return rc;
}

#pragma GCC diagnostic pop

#endif /* MC_TEST_SVC_FIXTURE_H */
