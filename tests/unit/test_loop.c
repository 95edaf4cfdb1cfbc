/*
 * test_loop.c - unit tests for the io_uring event loop (core/src/runtime/loop.c).
 *
 * Most tests run the loop on the test's own thread: handles are set up
 * before mc_loop_run(), callbacks stop the loop when they are done, and a
 * guard timer stops it after a bound so that a missing callback fails an
 * assertion instead of hanging. Cross-thread tests run the loop on a second
 * thread. alarm() kills a test that hangs anyway.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mooncake/loop.h"
#include "unit.h"

static int setup(void **state)
{
    mc_loop_t *l = NULL;

    alarm(20);
    assert_int_equal(mc_loop_new(&l), 0);
    assert_non_null(l);
    *state = l;
    return 0;
}

static int teardown(void **state)
{
    mc_loop_free(*state);
    alarm(0);
    return 0;
}

/* A timer whose callback stops the loop (data: the loop). */
static void stop_cb(mc_timer_t *t)
{
    mc_loop_stop(t->data);
}

/* Runs l on this thread for at most ms (a guard timer stops it). */
static void run_for(mc_loop_t *l, uint64_t ms)
{
    mc_timer_t guard;

    memset(&guard, 0, sizeof(guard));
    guard.data = l;
    assert_int_equal(mc_timer_start(l, &guard, ms, 0, stop_cb), 0);
    assert_int_equal(mc_loop_run(l), 0);
    mc_timer_stop(&guard);
}

static void *run_thread(void *arg)
{
    intptr_t rc = mc_loop_run(arg);
    return (void *)rc;
}

/* ---- run / stop ---- */

static void post_sem(void *arg)
{
    sem_post(arg);
}

static void test_run_stop_from_other_thread(void **state)
{
    mc_loop_t *l = *state;
    pthread_t th;
    void *rc = (void *)1;
    sem_t running;

    assert_int_equal(mc_loop_is_current(l), 0);
    assert_int_equal(sem_init(&running, 0, 0), 0);
    for (int round = 0; round < 3; round++) { /* a stopped loop can run again */
        assert_int_equal(pthread_create(&th, NULL, run_thread, l), 0);
        /* Stopped while it runs (it ran a call), not before it starts. */
        assert_int_equal(mc_loop_post(l, post_sem, &running), 0);
        assert_int_equal(sem_wait(&running), 0);
        mc_loop_stop(l);
        assert_int_equal(pthread_join(th, &rc), 0);
        assert_int_equal((intptr_t)rc, 0);
    }
    sem_destroy(&running);
    /* Stopped before it runs: returns at once. */
    mc_loop_stop(l);
    assert_int_equal(mc_loop_run(l), 0);
}

static void test_now_ms(void **state)
{
    uint64_t a = mc_loop_now_ms();

    usleep(20000);
    uint64_t b = mc_loop_now_ms();
    assert_cmp(b, >=, a + 19);
    assert_cmp(b, <, a + 5000);
}

/* ---- post ---- */

#define POSTERS 4
#define POSTS 20000

struct post_rec {
    mc_loop_t *l;
    int thread;
    int seq;
    int *next; /* per-thread expected sequence, shared */
    int *bad;
};

struct post_state {
    mc_loop_t *l;
    int next[POSTERS];
    int bad;
    int ran;
    struct post_rec recs[POSTERS][POSTS];
};

static void post_fn(void *arg)
{
    struct post_rec *r = arg;

    if (!mc_loop_is_current(r->l) || r->next[r->thread] != r->seq)
        (*r->bad)++;
    r->next[r->thread] = r->seq + 1;
}

struct poster {
    struct post_state *ps;
    int thread;
    int errors;
};

static void *poster_main(void *arg)
{
    struct poster *p = arg;

    for (int i = 0; i < POSTS; i++) {
        struct post_rec *r = &p->ps->recs[p->thread][i];
        *r = (struct post_rec){p->ps->l, p->thread, i, p->ps->next, &p->ps->bad};
        if (mc_loop_post(p->ps->l, post_fn, r) != 0)
            p->errors++;
        if (i % 1000 == 0)
            sched_yield();
    }
    return NULL;
}

static void stop_fn(void *arg)
{
    mc_loop_stop(arg);
}

static void test_post_from_many_threads(void **state)
{
    mc_loop_t *l = *state;
    struct post_state *ps = calloc(1, sizeof(*ps));
    pthread_t loop_th, th[POSTERS];
    struct poster p[POSTERS];

    ps->l = l;
    assert_int_equal(pthread_create(&loop_th, NULL, run_thread, l), 0);
    for (int i = 0; i < POSTERS; i++) {
        p[i] = (struct poster){ps, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, poster_main, &p[i]), 0);
    }
    for (int i = 0; i < POSTERS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(p[i].errors, 0);
    }
    /* Posted after everything else: runs last. */
    assert_int_equal(mc_loop_post(l, stop_fn, l), 0);
    assert_int_equal(pthread_join(loop_th, NULL), 0);
    assert_int_equal(ps->bad, 0);
    for (int i = 0; i < POSTERS; i++)
        assert_int_equal(ps->next[i], POSTS);
    free(ps);
}

/* Posts calls that count their runs to a loop, each once the one before
 * ran (a wake-up each), until told. */
struct ticker {
    mc_loop_t *l;
    atomic_int stop;
    atomic_int ran; /* on the loop's thread */
    sem_t done;     /* posted by each call */
};

static void count_fn(void *arg)
{
    struct ticker *t = arg;
    atomic_fetch_add(&t->ran, 1);
    sem_post(&t->done);
}

static void *ticker_main(void *arg)
{
    struct ticker *t = arg;

    while (!atomic_load(&t->stop) && mc_loop_post(t->l, count_fn, t) == 0)
        sem_wait(&t->done);
    return NULL;
}

/* What the thread that makes a loop sees of it. */
struct maker {
    int errs[3]; /* the errno of each read */
    int ran;     /* calls the loop ran while they went on */
};

static void *maker_main(void *arg)
{
    struct maker *m = arg;
    mc_loop_t *l = NULL;
    pthread_t loop_th, tick_th;
    int sv[2];
    char b;

    struct timeval tv = {.tv_usec = 200 * 1000};
    if (mc_loop_new(&l) < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 ||
        setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
        return (void *)1;
    struct ticker t = {.l = l};
    sem_init(&t.done, 0, 0);
    if (pthread_create(&loop_th, NULL, run_thread, l) != 0)
        return (void *)1;
    if (pthread_create(&tick_th, NULL, ticker_main, &t) != 0) {
        mc_loop_stop(l);
        pthread_join(loop_th, NULL);
        return (void *)1;
    }
    for (int i = 0; i < 3; i++) { /* each read waits out its timeout */
        errno = 0;
        m->errs[i] = read(sv[0], &b, 1) < 0 ? errno : 0;
    }
    atomic_store(&t.stop, 1);
    pthread_join(tick_th, NULL);
    m->ran = atomic_load(&t.ran);
    mc_loop_post(l, stop_fn, l);
    pthread_join(loop_th, NULL);
    sem_destroy(&t.done);
    mc_loop_free(l);
    close(sv[0]);
    close(sv[1]);
    return NULL;
}

/* A loop made on one thread and run on another leaves the first alone:
 * its wake-ups (each post) are not the making thread's work. A request
 * the making thread had submitted would complete through that thread's
 * task work, which interrupts whatever it blocks in: a read from a socket
 * with a receive timeout (SO_RCVTIMEO) then fails with EINTR, which a
 * program using libmooncake never asked for (and a making thread asleep in
 * the kernel uninterruptibly would hold the loop's wake-ups back). The
 * making thread is a fresh one: the kernel's teardown of a ring freed
 * before (another test's) interrupts the thread that made that ring once. */
static void test_loop_made_here_run_elsewhere_leaves_this_thread_alone(void **state)
{
    struct maker m = {{0}, 0};
    pthread_t th;
    void *rc = (void *)1;

    (void)state;
    alarm(20);
    assert_int_equal(pthread_create(&th, NULL, maker_main, &m), 0);
    assert_int_equal(pthread_join(th, &rc), 0);
    alarm(0);
    assert_null(rc);
    for (int i = 0; i < 3; i++)
        if (m.errs[i] != EAGAIN)
            fail_msg("read %d on the thread that made the loop: %s, not EAGAIN", i,
                     strerror(m.errs[i]));
    assert_cmp(m.ran, >, 100); /* the loop was woken while it read */
}

/* ---- defer ---- */

struct order {
    mc_loop_t *l;
    char log[64];
    mc_work_t w[4];
};

static void log_add(struct order *o, const char *s)
{
    strcat(o->log, s);
}

static void d2(void *arg)
{
    log_add(arg, " D2");
}

static void d1(void *arg)
{
    struct order *o = arg;

    log_add(o, " D1");
    mc_loop_defer(o->l, &o->w[2], d2, o); /* deferred by deferred work */
}

static void d3(void *arg)
{
    log_add(arg, " D3");
}

static void b_fn(void *arg)
{
    struct order *o = arg;

    log_add(o, " B");
    mc_loop_stop(o->l);
}

static void a_fn(void *arg)
{
    struct order *o = arg;

    log_add(o, "A");
    assert_int_equal(mc_loop_post(o->l, b_fn, o), 0);
    mc_loop_defer(o->l, &o->w[0], d1, o);
    mc_loop_defer(o->l, &o->w[1], d3, o);
    log_add(o, " a-end"); /* deferred work runs after this callback */
}

static void test_defer_order(void **state)
{
    mc_loop_t *l = *state;
    struct order o = {.l = l};

    assert_int_equal(mc_loop_post(l, a_fn, &o), 0);
    assert_int_equal(mc_loop_run(l), 0);
    assert_string_equal(o.log, "A a-end D1 D3 D2 B");
}

static void test_defer_before_run(void **state)
{
    mc_loop_t *l = *state;
    struct order o = {.l = l};

    /* Deferred from the owning thread before the loop runs: runs first. */
    mc_loop_defer(l, &o.w[0], d3, &o);
    assert_int_equal(mc_loop_post(l, b_fn, &o), 0);
    assert_int_equal(mc_loop_run(l), 0);
    assert_string_equal(o.log, " D3 B");
}

/* ---- timers ---- */

struct tstate {
    mc_loop_t *l;
    int calls;
    int stop_at;        /* stop the timer itself at this call */
    uint64_t start_ms;  /* when started */
    uint64_t first_ms;  /* first call */
    mc_timer_t *victim; /* stop and free this one in the callback */
};

static void count_cb(mc_timer_t *t)
{
    struct tstate *ts = t->data;

    if (ts->calls++ == 0)
        ts->first_ms = mc_loop_now_ms();
    if (ts->stop_at && ts->calls == ts->stop_at)
        mc_timer_stop(t);
    if (ts->victim) {
        mc_timer_stop(ts->victim);
        free(ts->victim);
        ts->victim = NULL;
    }
}

static void test_timer_one_shot(void **state)
{
    mc_loop_t *l = *state;
    struct tstate ts = {.l = l};
    mc_timer_t t;

    memset(&t, 0, sizeof(t));
    t.data = &ts;
    ts.start_ms = mc_loop_now_ms();
    assert_int_equal(mc_timer_start(l, &t, 30, 0, count_cb), 0);
    run_for(l, 150);
    assert_int_equal(ts.calls, 1);
    assert_cmp(ts.first_ms, >=, ts.start_ms + 29);
    run_for(l, 50);
    assert_int_equal(ts.calls, 1);
    mc_timer_stop(&t); /* stopping a timer that has fired is harmless */
    mc_timer_stop(&t);
}

static void test_timer_zero_timeout(void **state)
{
    mc_loop_t *l = *state;
    struct tstate ts = {.l = l};
    mc_timer_t t;

    memset(&t, 0, sizeof(t));
    t.data = &ts;
    assert_int_equal(mc_timer_start(l, &t, 0, 0, count_cb), 0);
    run_for(l, 50);
    assert_int_equal(ts.calls, 1);
}

static void test_timer_repeat_stops_itself(void **state)
{
    mc_loop_t *l = *state;
    struct tstate ts = {.l = l, .stop_at = 5};
    mc_timer_t t;

    memset(&t, 0, sizeof(t));
    t.data = &ts;
    ts.start_ms = mc_loop_now_ms();
    assert_int_equal(mc_timer_start(l, &t, 5, 10, count_cb), 0);
    run_for(l, 300);
    assert_int_equal(ts.calls, 5);
    assert_cmp(mc_loop_now_ms(), >=, ts.start_ms + 5 + 4 * 10);
}

static void test_timer_repeat_until_stopped(void **state)
{
    mc_loop_t *l = *state;
    struct tstate ts = {.l = l};
    mc_timer_t t;

    memset(&t, 0, sizeof(t));
    t.data = &ts;
    uint64_t t0 = mc_loop_now_ms();
    assert_int_equal(mc_timer_start(l, &t, 10, 10, count_cb), 0);
    run_for(l, 105);
    mc_timer_stop(&t);
    /* Never early: no more calls than 10 ms periods have passed (a busy
     * machine may let the loop wake late, and then every timer due runs
     * in that round, the guard's and this one's). */
    assert_cmp(ts.calls, >=, 5);
    assert_cmp(ts.calls, <=, (mc_loop_now_ms() - t0) / 10);
    int calls = ts.calls;
    run_for(l, 50);
    assert_int_equal(ts.calls, calls);
}

static void test_timer_restart(void **state)
{
    mc_loop_t *l = *state;
    struct tstate ts = {.l = l};
    mc_timer_t t;

    memset(&t, 0, sizeof(t));
    t.data = &ts;
    assert_int_equal(mc_timer_start(l, &t, 10000, 0, count_cb), 0);
    assert_int_equal(mc_timer_start(l, &t, 10, 0, count_cb), 0); /* stops the first */
    run_for(l, 100);
    assert_int_equal(ts.calls, 1);
}

static void test_timer_stop_then_free(void **state)
{
    mc_loop_t *l = *state;
    struct tstate ts = {.l = l};

    /* Stopped and freed before the loop ever ran. */
    mc_timer_t *t = calloc(1, sizeof(*t));
    t->data = &ts;
    assert_int_equal(mc_timer_start(l, t, 10, 0, count_cb), 0);
    mc_timer_stop(t);
    free(t);
    /* Stopped and freed while running, after firing once. */
    t = calloc(1, sizeof(*t));
    t->data = &ts;
    assert_int_equal(mc_timer_start(l, t, 5, 5, count_cb), 0);
    run_for(l, 8);
    /* Once, or twice when the loop's thread was held up past 10 ms (a
     * loaded machine): the guard's stop ends the round, not its CQEs. */
    int calls = ts.calls;
    assert_in_range(calls, 1, 2);
    mc_timer_stop(t);
    free(t);
    run_for(l, 40);
    assert_int_equal(ts.calls, calls);
}

static void test_timer_stop_and_free_other_due_at_once(void **state)
{
    mc_loop_t *l = *state;
    struct tstate a = {.l = l}, b = {.l = l};
    mc_timer_t ta;

    /* Both expire together: whichever runs first stops and frees the
     * other, whose completion may already be waiting. */
    for (int round = 0; round < 20; round++) {
        mc_timer_t *tb = calloc(1, sizeof(*tb));
        memset(&ta, 0, sizeof(ta));
        a = (struct tstate){.l = l, .victim = tb};
        b = (struct tstate){.l = l};
        ta.data = &a;
        tb->data = &b;
        assert_int_equal(mc_timer_start(l, &ta, 2, 0, count_cb), 0);
        assert_int_equal(mc_timer_start(l, tb, 2, 0, count_cb), 0);
        run_for(l, 20);
        assert_null(a.victim); /* a ran and freed b */
        assert_int_equal(a.calls, 1);
        assert_cmp(b.calls, <=, 1);
    }
}

/* ---- poll ---- */

struct pstate {
    mc_loop_t *l;
    int fds[2];
    int calls;
    int bad_revents;
    int stop_at;
    mc_poll_t *p;
};

static void pipe_cb(mc_poll_t *p, int revents)
{
    struct pstate *ps = p->data;
    char c;

    if (revents <= 0 || !(revents & POLLIN))
        ps->bad_revents = revents ? revents : -1;
    while (read(ps->fds[0], &c, 1) == 1)
        ;
    if (++ps->calls == ps->stop_at) {
        mc_poll_stop(p);
        mc_poll_stop(p); /* idempotent */
        mc_loop_stop(ps->l);
    }
}

static void write_cb(mc_timer_t *t)
{
    struct pstate *ps = t->data;

    if (write(ps->fds[1], "x", 1) != 1)
        ps->bad_revents = -2;
}

static void test_poll_pipe(void **state)
{
    mc_loop_t *l = *state;
    struct pstate ps = {.l = l, .stop_at = 3};
    mc_poll_t p;
    mc_timer_t w;

    assert_int_equal(pipe2(ps.fds, O_NONBLOCK), 0);
    memset(&p, 0, sizeof(p));
    memset(&w, 0, sizeof(w));
    p.data = &ps;
    w.data = &ps;
    assert_int_equal(mc_poll_start(l, &p, ps.fds[0], POLLIN, pipe_cb), 0);
    /* A byte every 10 ms; the callback stops the poll and the loop at 3. */
    assert_int_equal(mc_timer_start(l, &w, 10, 10, write_cb), 0);
    assert_int_equal(mc_loop_run(l), 0);
    assert_int_equal(ps.calls, 3);
    assert_int_equal(ps.bad_revents, 0);
    /* Stopped: further bytes call nothing. */
    run_for(l, 50);
    mc_timer_stop(&w);
    assert_int_equal(ps.calls, 3);
    close(ps.fds[0]);
    close(ps.fds[1]);
}

static void *write_later(void *arg)
{
    struct pstate *ps = arg;

    usleep(20000);
    if (write(ps->fds[1], "y", 1) != 1)
        ps->bad_revents = -2;
    return NULL;
}

static void test_poll_woken_by_other_thread(void **state)
{
    mc_loop_t *l = *state;
    struct pstate ps = {.l = l, .stop_at = 1};
    mc_poll_t p;
    pthread_t th;

    assert_int_equal(pipe2(ps.fds, O_NONBLOCK), 0);
    memset(&p, 0, sizeof(p));
    p.data = &ps;
    assert_int_equal(mc_poll_start(l, &p, ps.fds[0], POLLIN, pipe_cb), 0);
    assert_int_equal(pthread_create(&th, NULL, write_later, &ps), 0);
    run_for(l, 2000);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(ps.calls, 1);
    assert_int_equal(ps.bad_revents, 0);
    close(ps.fds[0]);
    close(ps.fds[1]);
}

static void test_poll_stop_then_free(void **state)
{
    mc_loop_t *l = *state;
    struct pstate ps = {.l = l};
    mc_timer_t w;

    assert_int_equal(pipe2(ps.fds, O_NONBLOCK), 0);
    /* Stopped and freed before the loop ran, then the fd becomes ready. */
    mc_poll_t *p = calloc(1, sizeof(*p));
    p->data = &ps;
    assert_int_equal(mc_poll_start(l, p, ps.fds[0], POLLIN, pipe_cb), 0);
    mc_poll_stop(p);
    free(p);
    assert_int_equal(write(ps.fds[1], "x", 1), 1);
    run_for(l, 30);
    assert_int_equal(ps.calls, 0);

    /* Stopped and freed after it has been called, while data keeps coming. */
    p = calloc(1, sizeof(*p));
    p->data = &ps;
    assert_int_equal(mc_poll_start(l, p, ps.fds[0], POLLIN, pipe_cb), 0);
    run_for(l, 10);
    assert_int_equal(ps.calls, 1); /* the byte already there */
    mc_poll_stop(p);
    free(p);
    memset(&w, 0, sizeof(w));
    w.data = &ps;
    assert_int_equal(mc_timer_start(l, &w, 2, 2, write_cb), 0);
    run_for(l, 30);
    mc_timer_stop(&w);
    assert_int_equal(ps.calls, 1);
    close(ps.fds[0]);
    close(ps.fds[1]);
}

/* mc_poll_once(): one byte read per call and the poll armed again; three
 * bytes that came together make three calls (a multishot poll may make
 * one), and an empty pipe none until the next byte. */
static void once_cb(mc_poll_t *p, int revents)
{
    struct pstate *ps = p->data;
    char c;

    if (revents <= 0 || !(revents & POLLIN))
        ps->bad_revents = revents ? revents : -1;
    if (read(ps->fds[0], &c, 1) != 1)
        ps->bad_revents = -3; /* called with nothing to read */
    ps->calls++;
    if (ps->calls != ps->stop_at && mc_poll_once(ps->l, p, ps->fds[0], POLLIN, once_cb) != 0)
        ps->bad_revents = -4;
}

static void test_poll_once(void **state)
{
    mc_loop_t *l = *state;
    struct pstate ps = {.l = l, .stop_at = 5};
    mc_poll_t p;

    assert_int_equal(pipe2(ps.fds, O_NONBLOCK), 0);
    memset(&p, 0, sizeof(p));
    p.data = &ps;
    assert_int_equal(write(ps.fds[1], "abc", 3), 3);
    assert_int_equal(mc_poll_once(l, &p, ps.fds[0], POLLIN, once_cb), 0);
    run_for(l, 30);
    assert_int_equal(ps.calls, 3);
    assert_int_equal(ps.bad_revents, 0);
    assert_int_equal(write(ps.fds[1], "d", 1), 1);
    run_for(l, 30);
    assert_int_equal(ps.calls, 4);
    /* Left idle by its fifth call: nothing after it. */
    assert_int_equal(write(ps.fds[1], "ef", 2), 2);
    run_for(l, 30);
    assert_int_equal(ps.calls, 5);
    assert_int_equal(ps.bad_revents, 0);
    mc_poll_stop(&p); /* idle: nothing to stop */

    /* Armed and stopped before the fd is ready: never called. */
    char c;
    assert_int_equal(read(ps.fds[0], &c, 1), 1);
    assert_int_equal(mc_poll_once(l, &p, ps.fds[0], POLLIN, once_cb), 0);
    mc_poll_stop(&p);
    assert_int_equal(write(ps.fds[1], "g", 1), 1);
    run_for(l, 30);
    assert_int_equal(ps.calls, 5);
    close(ps.fds[0]);
    close(ps.fds[1]);
}

static void test_poll_bad_fd(void **state)
{
    mc_loop_t *l = *state;
    struct pstate ps = {.l = l};
    mc_poll_t p;

    memset(&p, 0, sizeof(p));
    p.data = &ps;
    ps.fds[0] = -1;
    /* Either refused at once or reported through the callback, once. */
    int rc = mc_poll_start(l, &p, 12345, POLLIN, pipe_cb);
    if (rc == 0) {
        run_for(l, 30);
        assert_int_equal(ps.calls, 1);
        assert_cmp(ps.bad_revents, <, 0);
    } else {
        assert_cmp(rc, <, 0);
    }
    mc_poll_stop(&p);
}

/* ---- mc_loop_free ---- */

struct free_state {
    mc_loop_t *l;
    int ran;
    int on_loop;
    mc_work_t w;
};

static void deferred_in_free(void *arg)
{
    struct free_state *f = arg;

    f->ran += 100;
}

static void posted_fn(void *arg)
{
    struct free_state *f = arg;

    f->ran++;
    f->on_loop += mc_loop_is_current(f->l);
    if (f->ran == 1)
        mc_loop_defer(f->l, &f->w, deferred_in_free, f);
}

static void *post_three(void *arg)
{
    struct free_state *f = arg;

    for (int i = 0; i < 3; i++)
        if (mc_loop_post(f->l, posted_fn, f) != 0)
            f->ran = -1000;
    return NULL;
}

static void test_free_runs_posted_work(void **state)
{
    mc_loop_t *l = NULL;
    struct free_state f;
    pthread_t th;

    /* A loop that never ran. */
    assert_int_equal(mc_loop_new(&l), 0);
    f = (struct free_state){.l = l};
    assert_int_equal(pthread_create(&th, NULL, post_three, &f), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    mc_loop_free(l);
    assert_int_equal(f.ran, 103);
    assert_int_equal(f.on_loop, 3);

    /* A loop that ran and stopped, with work posted after the stop. */
    assert_int_equal(mc_loop_new(&l), 0);
    f = (struct free_state){.l = l};
    assert_int_equal(pthread_create(&th, NULL, run_thread, l), 0);
    mc_loop_stop(l);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(pthread_create(&th, NULL, post_three, &f), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    mc_loop_free(l);
    assert_int_equal(f.ran, 103);
}

static void test_free_forgets_started_handles(void **state)
{
    mc_loop_t *l = NULL;
    struct tstate ts = {0};
    struct pstate ps = {0};
    mc_timer_t t;
    mc_poll_t p;

    assert_int_equal(mc_loop_new(&l), 0);
    ts.l = ps.l = l;
    assert_int_equal(pipe2(ps.fds, O_NONBLOCK), 0);
    memset(&t, 0, sizeof(t));
    memset(&p, 0, sizeof(p));
    t.data = &ts;
    p.data = &ps;
    assert_int_equal(mc_timer_start(l, &t, 0, 1, count_cb), 0);
    assert_int_equal(mc_poll_start(l, &p, ps.fds[0], POLLIN, pipe_cb), 0);
    assert_int_equal(write(ps.fds[1], "x", 1), 1);
    run_for(l, 20);
    assert_cmp(ts.calls, >=, 1);
    assert_int_equal(ps.calls, 1);
    int calls = ts.calls;
    /* Freed with both still started: no callback, nothing leaked (ASan). */
    mc_loop_free(l);
    assert_int_equal(ts.calls, calls);
    assert_int_equal(ps.calls, 1);
    mc_timer_stop(&t); /* forgotten handles are stopped */
    mc_poll_stop(&p);
    close(ps.fds[0]);
    close(ps.fds[1]);
}

static void set_flag(void *arg)
{
    *(int *)arg = 1;
}

static void never(void *arg)
{
    (void)arg;
    _exit(3); /* a forked child has no loop thread to run it */
}

/* A forked child cannot use its parent's loop (the loop's thread is not
 * forked, nor are its ring's mappings): mc_loop_post() there fails at
 * once with -ECHILD instead of queueing work nobody runs; the parent's
 * loop goes on. */
static void test_post_in_forked_child_fails(void **state)
{
    mc_loop_t *l;
    assert_int_equal(mc_loop_new(&l), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(mc_loop_post(l, never, NULL) == -ECHILD ? 0 : 1);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    int ran = 0;
    assert_int_equal(mc_loop_post(l, set_flag, &ran), 0);
    run_for(l, 20);
    assert_int_equal(ran, 1);
    mc_loop_free(l);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_run_stop_from_other_thread),
        cmocka_unit_test(test_now_ms),
        T(test_post_from_many_threads),
        cmocka_unit_test(test_loop_made_here_run_elsewhere_leaves_this_thread_alone),
        T(test_defer_order),
        T(test_defer_before_run),
        T(test_timer_one_shot),
        T(test_timer_zero_timeout),
        T(test_timer_repeat_stops_itself),
        T(test_timer_repeat_until_stopped),
        T(test_timer_restart),
        T(test_timer_stop_then_free),
        T(test_timer_stop_and_free_other_due_at_once),
        T(test_poll_pipe),
        T(test_poll_woken_by_other_thread),
        T(test_poll_stop_then_free),
        T(test_poll_bad_fd),
        T(test_poll_once),
        cmocka_unit_test(test_free_runs_posted_work),
        cmocka_unit_test(test_free_forgets_started_handles),
        cmocka_unit_test(test_post_in_forked_child_fails),
    };
#undef T

    return cmocka_run_group_tests(tests, NULL, NULL);
}
