/*
 * store_harness.h - what test_store.c and test_store_handles.c share: a
 * real embedded store (an 8 MiB segment and the store's own loop thread),
 * waiting for callbacks, and wrappers of the calls. Included once by each
 * test file (its functions are static; a file uses some of them).
 *
 * Sync forms are used where they exist; the streaming writer and the
 * handles, which only have async forms, are driven through small wrappers
 * that wait for the callback on a condition variable. Code that must run on
 * the loop thread (loop-only calls, sync calls that must fail with -EDEADLK,
 * async calls whose callbacks must not run inside them) is posted there
 * with on_loop().
 */
#ifndef MC_TEST_STORE_HARNESS_H
#define MC_TEST_STORE_HARNESS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mooncake/mooncake.h"
#include "unit.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

#define MiB (1024 * 1024)
#define SEG (8 * MiB)
#define UNIT 64 /* the embedded store's allocation unit */
#define SMALL 4 /* what a published object under 1 KiB with no hole is rounded to */
#define SMALL_ROUND(n) (((n) + SMALL - 1) / SMALL * SMALL)

/* ---- waiting for callbacks ---- */

typedef struct cbw {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    mc_loop_t *loop;
    int calls;
    int result;
    int on_loop;      /* the callback ran on the loop thread */
    int returned;     /* set by the caller once the async call returned */
    int after_return; /* the callback saw `returned` set */
} cbw_t;

static void cbw_init(cbw_t *w, mc_store_t *s)
{
    memset(w, 0, sizeof(*w));
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->loop = mc_store_loop(s);
}

static void cbw_cb(void *arg, int result)
{
    cbw_t *w = arg;

    pthread_mutex_lock(&w->mu);
    w->calls++;
    w->result = result;
    w->on_loop = mc_loop_is_current(w->loop);
    w->after_return = w->returned;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void cbw_returned(cbw_t *w)
{
    pthread_mutex_lock(&w->mu);
    w->returned = 1;
    pthread_mutex_unlock(&w->mu);
}

/* Waits (at most 10 s) for the callback; returns its result. */
static int cbw_wait(cbw_t *w)
{
    struct timespec until;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&w->mu);
    while (w->calls == 0)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &until) == ETIMEDOUT)
            break;
    int calls = w->calls, result = w->result, on_loop = w->on_loop;
    pthread_mutex_unlock(&w->mu);
    assert_int_equal(calls, 1);
    assert_int_equal(on_loop, 1);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    return result;
}

/* An async call's return code, then (if 0) its callback's result. */
#define ASYNC(s, call)                                                                             \
    ({                                                                                             \
        cbw_t w_;                                                                                  \
        cbw_init(&w_, s);                                                                          \
        int rc_ = (call);                                                                          \
        if (rc_ == 0)                                                                              \
            rc_ = cbw_wait(&w_);                                                                   \
        rc_;                                                                                       \
    })

/* Runs fn(arg) on the store's loop thread and waits for it to return. */
struct on_loop {
    void (*fn)(mc_store_t *s, void *arg);
    mc_store_t *s;
    void *arg;
    cbw_t w;
};

static void on_loop_run(void *arg)
{
    struct on_loop *o = arg;

    o->fn(o->s, o->arg);
    cbw_cb(&o->w, 0);
}

static void on_loop(mc_store_t *s, void (*fn)(mc_store_t *, void *), void *arg)
{
    struct on_loop o = {.fn = fn, .s = s, .arg = arg};

    cbw_init(&o.w, s);
    assert_int_equal(mc_loop_post(mc_store_loop(s), on_loop_run, &o), 0);
    assert_int_equal(cbw_wait(&o.w), 0);
}

/* ---- fixtures and helpers ---- */

static mc_store_t *open_store(uint64_t seg, uint64_t lease_ms, unsigned evict_high)
{
    mc_store_opts_t o;
    mc_store_t *s = NULL;

    mc_store_opts_init(&o);
    o.segment_size = seg;
    o.lease_ms = lease_ms;
    o.evict_high_pct = evict_high;
    assert_int_equal(mc_store_open(&s, &o), 0);
    assert_non_null(s);
    return s;
}

static int setup(void **state)
{
    *state = open_store(SEG, 0, 0);
    return 0;
}

static int teardown(void **state)
{
    mc_store_close(*state);
    return 0;
}

/* Deterministic content: byte i of object `seed`. */
static void fill(void *buf, size_t len, unsigned seed)
{
    unsigned char *p = buf;

    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)(i * 31 + seed * 7 + (i >> 8));
}

static void *pattern(size_t len, unsigned seed)
{
    void *p = malloc(len ? len : 1);

    assert_non_null(p);
    fill(p, len, seed);
    return p;
}

#define K(str) (str), strlen(str)

static int put_str(mc_store_t *s, const char *key, const char *val)
{
    return mc_put(s, K(key), val, strlen(val), NULL);
}

/* Gets the whole object into a new buffer (at most max bytes). */
static void *get_all(mc_store_t *s, const char *key, size_t max, int *rc)
{
    void *buf = calloc(1, max + 1);

    assert_non_null(buf);
    *rc = mc_get(s, K(key), 0, buf, max, NULL);
    return buf;
}

static mc_space_t space(mc_store_t *s)
{
    mc_space_t sp;

    memset(&sp, 0xff, sizeof(sp));
    assert_int_equal(mc_statfs(s, &sp), 0);
    return sp;
}

/* Writer and handle calls, waited for. */
static mc_writer_t *w_open(mc_store_t *s, const char *key, const mc_put_opts_t *po, mc_obj_t *base)
{
    mc_writer_t *w = NULL;

    assert_int_equal(ASYNC(s, mc_writer_open_async(s, K(key), po, base, &w, cbw_cb, &w_)), 0);
    assert_non_null(w);
    return w;
}

static int w_write(mc_store_t *s, mc_writer_t *w, uint64_t off, const void *buf, size_t len)
{
    return ASYNC(s, mc_writer_write_async(w, off, buf, len, cbw_cb, &w_));
}

static int w_read(mc_store_t *s, mc_writer_t *w, uint64_t off, void *buf, size_t len)
{
    return ASYNC(s, mc_writer_read_async(w, off, buf, len, cbw_cb, &w_));
}

static int w_truncate(mc_store_t *s, mc_writer_t *w, uint64_t size)
{
    return ASYNC(s, mc_writer_truncate_async(w, size, cbw_cb, &w_));
}

static int w_commit(mc_store_t *s, mc_writer_t *w, mc_stat_t *st)
{
    return ASYNC(s, mc_writer_commit_async(w, st, cbw_cb, &w_));
}

static mc_obj_t *obj_open(mc_store_t *s, const char *key)
{
    mc_obj_t *o = NULL;

    assert_int_equal(ASYNC(s, mc_obj_open_async(s, K(key), &o, cbw_cb, &w_)), 0);
    assert_non_null(o);
    return o;
}

static int obj_read(mc_store_t *s, mc_obj_t *o, uint64_t off, void *buf, size_t len)
{
    return ASYNC(s, mc_obj_read_async(o, off, buf, len, cbw_cb, &w_));
}

static void wr_size_fn(mc_store_t *s, void *arg)
{
    void **a = arg;

    *(uint64_t *)a[1] = mc_writer_size(a[0]);
}

/* mc_writer_size() is loop-thread only. */
static uint64_t w_size(mc_store_t *s, mc_writer_t *w)
{
    uint64_t size = UINT64_MAX;
    void *a[2] = {w, &size};

    on_loop(s, wr_size_fn, a);
    return size;
}

#pragma GCC diagnostic pop

#endif /* MC_TEST_STORE_HARNESS_H */
