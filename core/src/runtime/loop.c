/*
 * loop.c - the io_uring event loop (see mooncake/loop.h): the ring and its
 * rounds, the tokens requests carry (loop_ring.h), calls posted from other
 * threads, deferred work, fd polls, timers and the loop's clocks. The
 * socket operations of loop_i.h are in loop_io.c.
 *
 * Every request in the ring carries a token (struct tok) as user_data. A
 * handle points at its token and the token back at its handle; stopping a
 * handle detaches the two and asks the kernel to cancel the request, and the
 * token is freed when the kernel's last completion for it arrives. So a
 * handle can be freed as soon as it is stopped.
 *
 * Other threads reach the loop through a mutex-guarded queue plus an eventfd
 * that the loop polls like any other file descriptor.
 */
#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "runtime/forkfd.h"
#include "runtime/log.h"
#include "runtime/loop_ring.h"
#include "mooncake/loop.h"

struct posted {
    struct posted *next;
    mc_loop_fn fn;
    void *arg;
};

static __thread mc_loop_t *current_loop;

uint64_t mc_loop_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int64_t mc__wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t mc__loop_clock_ns(mc_loop_t *l)
{
    uint64_t ns = mono_ns();
    if (l && current_loop == l)
        l->clock_ns = ns;
    return ns;
}

uint64_t mc__loop_recent_ns(mc_loop_t *l)
{
    if (l && current_loop == l && l->clock_ns)
        return l->clock_ns;
    return mc__loop_clock_ns(l);
}

int64_t mc__loop_wall_ns(void)
{
    mc_loop_t *l = current_loop;
    if (!l || !l->clock_ns)
        return mc__wall_ns();
    return (int64_t)l->clock_ns + l->wall_off;
}

/* A round's start: both clocks read once (the wall clock's offset follows
 * a step of it, e.g. by NTP, from the next round on). */
static void round_clock(mc_loop_t *l)
{
    l->clock_ns = mono_ns();
    l->wall_off = mc__wall_ns() - (int64_t)l->clock_ns;
    l->now_ms = l->clock_ns / 1000000;
}

void mc__loop_defer_next(mc_loop_t *l, mc_work_t *w, mc_loop_fn fn, void *arg)
{
    w->next = NULL;
    w->fn = fn;
    w->arg = arg;
    if (l->next_tail)
        l->next_tail->next = w;
    else
        l->next_head = w;
    l->next_tail = w;
}

uint64_t mc__loop_time(mc_loop_t *l)
{
    if (!l->now_ms)
        l->now_ms = mc_loop_now_ms();
    return l->now_ms;
}

int mc_loop_is_current(const mc_loop_t *l)
{
    return current_loop == l;
}

int mc__loop_forked(const mc_loop_t *l)
{
    return l->forks != mc__fork_count();
}

static struct io_uring_sqe *get_sqe(mc_loop_t *l)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);
    if (!sqe) {
        io_uring_submit(&l->ring);
        sqe = io_uring_get_sqe(&l->ring);
    }
    return sqe;
}

struct tok *mc__tok_alloc(mc_loop_t *l, enum tok_kind kind, void *handle, size_t extra)
{
    struct tok *t = calloc(1, sizeof(*t) + extra);
    if (!t)
        return NULL;
    t->kind = kind;
    t->handle = handle;
    t->next = l->toks;
    if (l->toks)
        l->toks->prev = t;
    l->toks = t;
    return t;
}

static struct tok *tok_new(mc_loop_t *l, enum tok_kind kind, void *handle)
{
    struct tok *t = l->poll_spare;
    if (kind == TOK_POLL && t) {
        l->poll_spare = NULL;
        t->handle = handle;
        return t;
    }
    return mc__tok_alloc(l, kind, handle, 0);
}

void mc__tok_free(mc_loop_t *l, struct tok *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else
        l->toks = t->next;
    if (t->next)
        t->next->prev = t->prev;
    free(t);
}

static int arm_poll(mc_loop_t *l, struct tok *t, int fd, unsigned events)
{
    struct io_uring_sqe *sqe = get_sqe(l);
    if (!sqe)
        return -EBUSY;
    const mc_poll_t *p = t->handle;
    if (t->kind == TOK_POLL && p->once)
        io_uring_prep_poll_add(sqe, fd, events);
    else
        io_uring_prep_poll_multishot(sqe, fd, events);
    io_uring_sqe_set_data(sqe, t);
    return 0;
}

static int arm_timer(mc_loop_t *l, struct tok *t, uint64_t ms)
{
    struct io_uring_sqe *sqe = get_sqe(l);
    if (!sqe)
        return -EBUSY;
    mc__ms_to_ts(&t->ts, ms);
    io_uring_prep_timeout(sqe, &t->ts, 0, 0);
    io_uring_sqe_set_data(sqe, t);
    return 0;
}

/* Cancels the kernel request behind t; its completion frees t later. */
void mc__tok_cancel(mc_loop_t *l, struct tok *t)
{
    struct io_uring_sqe *sqe = get_sqe(l);
    t->handle = NULL;
    if (!sqe)
        return; /* the ring is wedged; the token is freed by mc_loop_free() */
    if (t->kind == TOK_TIMER)
        io_uring_prep_timeout_remove(sqe, (uint64_t)(uintptr_t)t, 0);
    else if (t->kind == TOK_IO)
        io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)t, 0); /* also ends its link timeout */
    else
        io_uring_prep_poll_remove(sqe, (uint64_t)(uintptr_t)t);
    io_uring_sqe_set_data(sqe, NULL);
}

/* Settles arm_*()'s result rc for the handle whose token slot is *token:
 * when arming failed, the handle is idle again and t is freed. */
int mc__tok_armed(mc_loop_t *l, struct tok *t, void **token, int rc)
{
    if (rc < 0) {
        *token = NULL;
        mc__tok_free(l, t);
    }
    return rc;
}

/* Stops the handle whose token slot is *token, if it is active. */
static void stop_handle(mc_loop_t *l, void **token)
{
    if (!*token)
        return;
    mc__tok_cancel(l, *token);
    *token = NULL;
}

int mc_loop_new(mc_loop_t **out)
{
    mc_loop_t *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->wake_tok = calloc(1, sizeof(*l->wake_tok));
    if (!l->wake_tok) {
        free(l);
        return -ENOMEM;
    }
    int rc = io_uring_queue_init(256, &l->ring, 0);
    if (rc < 0) {
        free(l->wake_tok);
        free(l);
        return rc;
    }
    /* A forked child keeps neither the ring nor its mappings (which hold
     * it as well): its requests in flight hold our sockets (forkfd.h). */
    mc__fd_own(l->ring.ring_fd);
    io_uring_ring_dontfork(&l->ring);
    l->forks = mc__fork_count();
    l->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->wake_fd < 0) {
        rc = -errno;
        mc__fd_disown(l->ring.ring_fd);
        io_uring_queue_exit(&l->ring);
        free(l->wake_tok);
        free(l);
        return rc;
    }
    pthread_mutex_init(&l->lock, NULL);
    l->wake_tok->kind = TOK_WAKE;
    rc = arm_poll(l, l->wake_tok, l->wake_fd, POLLIN);
    if (rc < 0) {
        close(l->wake_fd);
        mc__fd_disown(l->ring.ring_fd);
        io_uring_queue_exit(&l->ring);
        free(l->wake_tok);
        free(l);
        return rc;
    }
    /* Not submitted here: the loop's thread submits it with its first
     * round. A request completes through the task work of the thread that
     * submitted it, and that thread may be the caller's own (a program's
     * thread opening a store), which each completion would then interrupt:
     * its read from a socket with a receive timeout fails with EINTR, and
     * while it sleeps uninterruptibly the loop hears no post. */
    *out = l;
    return 0;
}

static void wake(mc_loop_t *l)
{
    if (atomic_exchange(&l->wake_pending, 1))
        return;
    uint64_t one = 1;
    ssize_t n = write(l->wake_fd, &one, sizeof(one));
    (void)n; /* EAGAIN means the counter is already non-zero: awake anyway */
}

void mc_loop_stop(mc_loop_t *l)
{
    atomic_store(&l->stop, 1);
    if (!mc_loop_is_current(l))
        wake(l);
}

int mc_loop_post(mc_loop_t *l, mc_loop_fn fn, void *arg)
{
    if (mc__loop_forked(l)) {
        mc__log(MC__LOG_ERROR, "a loop (a store) made before fork() cannot be used in the "
                               "forked child: open one in the child");
        return -ECHILD;
    }
    struct posted *p = malloc(sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->next = NULL;
    p->fn = fn;
    p->arg = arg;
    pthread_mutex_lock(&l->lock);
    if (l->post_tail)
        l->post_tail->next = p;
    else
        l->post_head = p;
    l->post_tail = p;
    pthread_mutex_unlock(&l->lock);
    wake(l);
    return 0;
}

void mc_loop_defer(mc_loop_t *l, mc_work_t *w, mc_loop_fn fn, void *arg)
{
    w->next = NULL;
    w->fn = fn;
    w->arg = arg;
    if (l->defer_tail)
        l->defer_tail->next = w;
    else
        l->defer_head = w;
    l->defer_tail = w;
}

static void run_posted(mc_loop_t *l)
{
    uint64_t v;
    ssize_t n = read(l->wake_fd, &v, sizeof(v));
    (void)n;
    atomic_store(&l->wake_pending, 0);
    pthread_mutex_lock(&l->lock);
    struct posted *p = l->post_head;
    l->post_head = l->post_tail = NULL;
    pthread_mutex_unlock(&l->lock);
    while (p) {
        struct posted *next = p->next;
        p->fn(p->arg);
        free(p);
        p = next;
    }
}

static void run_deferred(mc_loop_t *l)
{
    /* Work deferred by this work runs in the same round, after it. */
    while (l->defer_head) {
        mc_work_t *w = l->defer_head;
        l->defer_head = w->next;
        if (!l->defer_head)
            l->defer_tail = NULL;
        w->fn(w->arg);
    }
}

static void on_poll_cqe(mc_loop_t *l, struct tok *t, struct io_uring_cqe *cqe)
{
    mc_poll_t *p = t->handle;
    int more = (cqe->flags & IORING_CQE_F_MORE) != 0;
    if (!p) {
        if (!more)
            mc__tok_free(l, t);
        return;
    }
    if (!more && cqe->res >= 0 && !p->once) {
        /* The kernel ended the multishot poll (overflow): re-arm it. */
        if (arm_poll(l, t, p->fd, p->events) < 0) {
            p->token = NULL;
            mc__tok_free(l, t);
            p->cb(p, -EBUSY);
            return;
        }
    } else if (!more) {
        p->token = NULL;
        if (p->once && !l->poll_spare) {
            /* kept for the next mc_poll_once(), which the callback most
             * likely makes: a one-shot poll is armed once per event */
            t->handle = NULL;
            l->poll_spare = t;
        } else {
            mc__tok_free(l, t);
        }
    }
    p->cb(p, cqe->res);
}

static void on_timer_cqe(mc_loop_t *l, struct tok *t, struct io_uring_cqe *cqe)
{
    mc_timer_t *tm = t->handle;
    if (!tm || cqe->res == -ECANCELED) {
        mc__tok_free(l, t);
        return;
    }
    if (tm->repeat_ms && arm_timer(l, t, tm->repeat_ms) == 0) {
        /* token stays with the timer */
    } else {
        tm->token = NULL;
        mc__tok_free(l, t);
    }
    tm->cb(tm);
}

static void process_cqes(mc_loop_t *l)
{
    struct io_uring_cqe *cqe;
    while (io_uring_peek_cqe(&l->ring, &cqe) == 0) {
        uintptr_t ud = (uintptr_t)io_uring_cqe_get_data(cqe);
        struct tok *t = (struct tok *)(ud & ~TOK_LINK_BIT);
        if (t) {
            switch (t->kind) {
            case TOK_WAKE:
                if (!(cqe->flags & IORING_CQE_F_MORE))
                    arm_poll(l, t, l->wake_fd, POLLIN);
                run_posted(l);
                break;
            case TOK_POLL:
                on_poll_cqe(l, t, cqe);
                break;
            case TOK_TIMER:
                on_timer_cqe(l, t, cqe);
                break;
            case TOK_IO:
                mc__io_cqe(l, t, cqe, (ud & TOK_LINK_BIT) != 0);
                break;
            }
        }
        io_uring_cqe_seen(&l->ring, cqe);
        run_deferred(l);
    }
}

int mc_loop_run(mc_loop_t *l)
{
    mc_loop_t *saved = current_loop;
    int rc = 0;
    current_loop = l;
    round_clock(l);
    while (!atomic_load(&l->stop)) {
        if (l->next_head) { /* work for this round, queued in the last one */
            if (l->defer_tail)
                l->defer_tail->next = l->next_head;
            else
                l->defer_head = l->next_head;
            l->defer_tail = l->next_tail;
            l->next_head = l->next_tail = NULL;
        }
        run_deferred(l);
        if (atomic_load(&l->stop))
            break;
        rc = io_uring_submit_and_wait(&l->ring, l->defer_head || l->next_head ? 0 : 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
            break;
        rc = 0;
        round_clock(l);
        process_cqes(l);
    }
    run_deferred(l);
    atomic_store(&l->stop, 0);
    current_loop = saved;
    return rc;
}

void mc_loop_free(mc_loop_t *l)
{
    if (!l)
        return;
    mc_loop_t *saved = current_loop;
    current_loop = l;
    run_posted(l);
    while (l->next_head || l->defer_head) {
        mc_work_t *w = l->next_head;
        l->next_head = l->next_tail = NULL;
        while (w) { /* what the last round queued for the next one */
            mc_work_t *next = w->next;
            mc_loop_defer(l, w, w->fn, w->arg);
            w = next;
        }
        run_deferred(l);
    }
    current_loop = saved;
    /* Tear the ring down first, so that release functions free buffers no
     * request can still reach. */
    mc__fd_disown(l->ring.ring_fd);
    io_uring_queue_exit(&l->ring);
    while (l->toks) {
        struct tok *t = l->toks;
        if (t->handle) {
            if (t->kind == TOK_POLL)
                ((mc_poll_t *)t->handle)->token = NULL;
            else if (t->kind == TOK_IO)
                ((mc__io_t *)t->handle)->token = NULL;
            else
                ((mc_timer_t *)t->handle)->token = NULL;
        }
        if (t->kind == TOK_IO && t->release)
            t->release(t->release_arg);
        mc__tok_free(l, t);
    }
    close(l->wake_fd);
    pthread_mutex_destroy(&l->lock);
    free(l->wake_tok);
    free(l);
}

static int poll_arm(mc_loop_t *l, mc_poll_t *p, int fd, unsigned events, mc_poll_cb cb, int once)
{
    struct tok *t = tok_new(l, TOK_POLL, p);
    if (!t)
        return -ENOMEM;
    p->once = once;
    p->loop = l;
    p->fd = fd;
    p->events = events;
    p->cb = cb;
    p->token = t;
    return mc__tok_armed(l, t, &p->token, arm_poll(l, t, fd, events));
}

int mc_poll_start(mc_loop_t *l, mc_poll_t *p, int fd, unsigned events, mc_poll_cb cb)
{
    return poll_arm(l, p, fd, events, cb, 0);
}

int mc_poll_once(mc_loop_t *l, mc_poll_t *p, int fd, unsigned events, mc_poll_cb cb)
{
    return poll_arm(l, p, fd, events, cb, 1);
}

void mc_poll_stop(mc_poll_t *p)
{
    stop_handle(p->loop, &p->token);
}

int mc_timer_start(mc_loop_t *l, mc_timer_t *t, uint64_t timeout_ms, uint64_t repeat_ms,
                   mc_timer_cb cb)
{
    if (t->token && t->loop)
        mc_timer_stop(t);
    struct tok *k = tok_new(l, TOK_TIMER, t);
    if (!k)
        return -ENOMEM;
    t->loop = l;
    t->repeat_ms = repeat_ms;
    t->cb = cb;
    t->token = k;
    return mc__tok_armed(l, k, &t->token, arm_timer(l, k, timeout_ms));
}

void mc_timer_stop(mc_timer_t *t)
{
    stop_handle(t->loop, &t->token);
}
