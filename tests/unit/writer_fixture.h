/*
 * writer_fixture.h - what the tests of a streaming writer in flight share
 * (test_writer_gaps.c, test_writer_faults.c, test_writer_space.c): the three stores a writer
 * runs on (embedded; a pure client over TCP of an embedded store; a pure
 * client whose bytes go to a node of their own), batches of operations
 * waited for together, a segment left full of 0xaa, a writer opened there,
 * a store's loop watched and a store closed on it (test_writer_idle.c,
 * test_node_close.c).
 * Included once by each test file (its functions are static; a file uses
 * some of them).
 */
#ifndef MC_TEST_WRITER_FIXTURE_H
#define MC_TEST_WRITER_FIXTURE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mooncake/mooncake.h"
#include "unit.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

#define MiB (1024 * 1024)
#define SEG (8 * MiB)
#define NW 8 /* operations in flight together */

/* The stores of a test: the writer's, the one that holds the master (the
 * same store when embedded), and the node whose segment holds the writer's
 * bytes when that is not the master's. */
typedef struct fix {
    mc_store_t *s;    /* writes, reads and removes through this one */
    mc_store_t *srv;  /* the master and a segment: s, or a store s reaches over TCP */
    mc_store_t *node; /* NULL, or a node of srv that holds the writer's bytes */
} fix_t;

/* Operations of one batch, waited for together. */
typedef struct batch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int left;       /* callbacks still to come */
    int rc[NW + 1]; /* each operation's result */
} batch_t;

typedef struct slot {
    batch_t *b;
    int i;
} slot_t;

static void batch_init(batch_t *b, int n)
{
    memset(b, 0, sizeof(*b));
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->left = n;
}

static void slot_done(void *arg, int rc)
{
    slot_t *sl = arg;
    batch_t *b = sl->b;

    pthread_mutex_lock(&b->mu);
    b->rc[sl->i] = rc;
    b->left--;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* Waits (at most 10 s) until every operation of b called back. */
static void batch_wait(batch_t *b)
{
    struct timespec until;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&b->mu);
    while (b->left > 0)
        if (pthread_cond_timedwait(&b->cv, &b->mu, &until) == ETIMEDOUT)
            break;
    int left = b->left;
    pthread_mutex_unlock(&b->mu);
    assert_int_equal(left, 0);
}

/* A store's loop thread held by the test (a node or a master that does not
 * answer for a while, at most 10 s, and then does): hold_run() posted to
 * its loop, hold_set(h, 1) lets it go. */
typedef struct hold {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int held, released;
} hold_t;

static void hold_run(void *arg)
{
    hold_t *h = arg;
    struct timespec until;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10; /* bounded: a failing test must not hang the node */
    pthread_mutex_lock(&h->mu);
    h->held = 1;
    pthread_cond_broadcast(&h->cv);
    while (!h->released)
        if (pthread_cond_timedwait(&h->cv, &h->mu, &until) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&h->mu);
}

static void hold_set(hold_t *h, int released)
{
    pthread_mutex_lock(&h->mu);
    h->released = released;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* Where the writer's bytes go: f's node, or wherever the master likes. */
static mc_put_opts_t placement(const fix_t *f)
{
    mc_put_opts_t po = {0};

    po.preferred_segment = f->node ? mc_store_served_addr(f->node) : NULL;
    return po;
}

/* Leaves the free space of the segment the writer's bytes go to full of
 * 0xaa (what a version removed but still leased holds stays so until its
 * lease runs out). */
static void dirty(const fix_t *f)
{
    mc_store_t *s = f->node ? f->node : f->srv;
    mc_put_opts_t po = placement(f);
    mc_space_t sp = {.total = SEG}; /* a node's segment: all of it is free */

    if (!f->node)
        assert_int_equal(mc_statfs(s, &sp), 0);
    size_t len = (size_t)(sp.total - sp.used);
    char *junk = malloc(len);
    memset(junk, 0xaa, len);
    /* Space still held for a moment (a revoked or removed version's, until
     * its lease and margin run out) is not free: fill what is. */
    int rc;
    while ((rc = mc_put(s, "junk", 4, junk, len, &po)) == -ENOSPC && len > MiB)
        len -= MiB;
    assert_int_equal(rc, 0);
    assert_int_equal(mc_remove(s, "junk", 4, 0), 0);
    free(junk);
}

static mc_writer_t *open_writer(const fix_t *f)
{
    mc_put_opts_t po = placement(f);
    batch_t b;
    slot_t sl = {&b, 0};
    mc_writer_t *w = NULL;

    batch_init(&b, 1);
    assert_int_equal(mc_writer_open_async(f->s, "f", 1, &po, NULL, &w, slot_done, &sl), 0);
    batch_wait(&b);
    assert_int_equal(b.rc[0], 0);
    return w;
}

/* The store that holds the master and a segment of size bytes: embedded,
 * serving the protocol at listen when not NULL. */
static mc_store_t *open_server(const char *listen, uint64_t size)
{
    mc_store_opts_t o;
    mc_store_t *s = NULL;

    mc_store_opts_init(&o);
    o.segment_size = size;
    o.lease_ms = 1; /* a round's version, read and removed, frees its space at once */
    o.listen = listen;
    assert_int_equal(mc_store_open(&s, &o), 0);
    return s;
}

/* An embedded store: the writer's bytes are copied into its own segment. */
static int setup(void **state)
{
    fix_t *f = calloc(1, sizeof(*f));

    f->srv = f->s = open_server(NULL, SEG);
    *state = f;
    return 0;
}

/* A store of the cluster whose master srv serves: a pure client, or with
 * size a node serving its segment on a loopback port the kernel picks;
 * with shm, a node offers its segment to co-located clients and a client
 * maps the segments of nodes on this host (no shared memory otherwise). */
static mc_store_t *open_member_shm(const fix_t *f, uint64_t size, int shm)
{
    mc_store_opts_t o;
    mc_store_t *s = NULL;

    mc_store_opts_init(&o);
    o.master = mc_store_served_addr(f->srv);
    o.no_shm = !shm;
    o.segment_size = size;
    o.listen = size ? "127.0.0.1:0" : NULL;
    assert_int_equal(mc_store_open(&s, &o), 0);
    return s;
}

static mc_store_t *open_member(const fix_t *f, uint64_t size)
{
    return open_member_shm(f, size, 0);
}

/* A pure client of an embedded store that serves on a loopback port the
 * kernel picks: every byte the writer moves crosses a TCP connection. */
static int setup_tcp(void **state)
{
    fix_t *f = calloc(1, sizeof(*f));

    f->srv = open_server("127.0.0.1:0", SEG);
    f->s = open_member(f, 0);
    *state = f;
    return 0;
}

/* The same, with the writer's bytes on a node of its own (another loop
 * thread than the master's): its bytes are still on their way while the
 * master answers the next write's request for space, as in a cluster. */
static int setup_node(void **state)
{
    fix_t *f = calloc(1, sizeof(*f));

    f->srv = open_server("127.0.0.1:0", MiB);
    f->node = open_member(f, SEG);
    f->s = open_member(f, 0);
    *state = f;
    return 0;
}

/* The same, with the node's segment mapped into the writer's store: its
 * bytes are copied there (shm), once the mapping was set up on first use. */
static int setup_node_shm(void **state)
{
    fix_t *f = calloc(1, sizeof(*f));

    f->srv = open_server("127.0.0.1:0", MiB);
    f->node = open_member_shm(f, SEG, 1);
    f->s = open_member_shm(f, 0, 1);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fix_t *f = *state;

    if (f->s != f->srv)
        mc_store_close(f->s);
    if (f->node)
        mc_store_close(f->node);
    mc_store_close(f->srv);
    free(f);
    return 0;
}

/* A store's loop watched by the test: probe_wait() returns once ready()
 * holds there; close_on_loop() closes the store on that loop's thread. */
typedef struct probe {
    mc_store_t *s;
    int (*ready)(struct probe *p); /* read on s's loop thread */
    void *arg;                     /* what ready() looks at */
    batch_t b;
    mc_timer_t look, stop;
    uint64_t run_on_ms; /* close_on_loop(): how long the loop runs on */
} probe_t;

/* On the loop's thread: the batch ends once ready() holds. */
static void probe_look(mc_timer_t *t)
{
    probe_t *p = t->data;
    slot_t sl = {&p->b, 0};

    if (!p->ready(p))
        return; /* looked at again at the timer's next tick */
    mc_timer_stop(t);
    slot_done(&sl, 0);
}

static void probe_start(void *arg)
{
    probe_t *p = arg;

    p->look.data = p;
    assert_int_equal(mc_timer_start(mc_store_loop(p->s), &p->look, 10, 10, probe_look), 0);
}

/* Returns once p->ready(p) holds on p->s's loop (looked at every 10 ms, at
 * most 10 s). */
static void probe_wait(probe_t *p)
{
    batch_init(&p->b, 1);
    assert_int_equal(mc_loop_post(mc_store_loop(p->s), probe_start, p), 0);
    batch_wait(&p->b);
}

/* A caller's loop, run on a thread of the test's until stop_loop(). */
static void *run_loop(void *arg)
{
    mc_loop_run(arg);
    return NULL;
}

static void stop_loop(mc_timer_t *t)
{
    mc_loop_stop(t->loop);
}

/* Posted to p->s's loop: closes the store on that loop's thread (which
 * returns at once) and lets the loop run on for p->run_on_ms, as a
 * caller's loop must after it closed a store: what the close left to
 * finish (the master connection's end, its calls' answers, the store's
 * free) runs then. */
static void close_on_loop(void *arg)
{
    probe_t *p = arg;
    mc_loop_t *l = mc_store_loop(p->s);

    mc_store_close(p->s);
    assert_int_equal(mc_timer_start(l, &p->stop, p->run_on_ms, 0, stop_loop), 0);
}

#pragma GCC diagnostic pop

#endif /* MC_TEST_WRITER_FIXTURE_H */
