/*
 * loop.h - the io_uring event loop that drives every libmooncake process.
 *
 * One loop per thread. Everything that touches a loop runs on the thread that
 * called mc_loop_run(), except mc_loop_post() and mc_loop_stop(), which any
 * thread may call, and handles started before the loop first runs (see
 * mc_loop_new()). Handles (mc_poll_t, mc_timer_t, mc_work_t) are allocated by
 * the caller; their fields are private. A stopped handle may be freed at once:
 * a completion that arrives for it later is dropped by the loop.
 */
#ifndef MOONCAKE_LOOP_H
#define MOONCAKE_LOOP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef MC_EXPORT
#define MC_EXPORT __attribute__((visibility("default")))
#endif

typedef struct mc_loop mc_loop_t;
typedef void (*mc_loop_fn)(void *arg);

/* A unit of deferred work; intrusive so that deferring never allocates. */
typedef struct mc_work {
    struct mc_work *next;
    mc_loop_fn fn;
    void *arg;
} mc_work_t;

typedef struct mc_poll mc_poll_t;
typedef void (*mc_poll_cb)(mc_poll_t *p, int revents);

/* Watches a file descriptor for readiness until stopped. */
struct mc_poll {
    mc_loop_t *loop; /* private */
    void *token;     /* private: the in-flight io_uring request */
    int fd;          /* private */
    unsigned events; /* private */
    mc_poll_cb cb;   /* private */
    int once;        /* private: armed by mc_poll_once() */
    void *data;      /* free for the caller */
};

typedef struct mc_timer mc_timer_t;
typedef void (*mc_timer_cb)(mc_timer_t *t);

/* A one-shot or repeating timer. */
struct mc_timer {
    mc_loop_t *loop;    /* private */
    void *token;        /* private */
    uint64_t repeat_ms; /* private */
    mc_timer_cb cb;     /* private */
    void *data;         /* free for the caller */
};

/*
 * mc_loop_new() creates a loop with its own io_uring and wake-up eventfd.
 * Returns 0 and sets *out, or -errno (-ENOMEM, or what io_uring_queue_init
 * returned). The caller frees the loop with mc_loop_free() once mc_loop_run()
 * has returned (or was never called). Handles may be started on the making
 * thread before the loop first runs: their requests reach the kernel with
 * the loop's first round, from the thread that runs it, so that their
 * completions never interrupt the making thread (as long as they fit the
 * ring's 256 entries; more would be submitted from the making thread).
 */
MC_EXPORT int mc_loop_new(mc_loop_t **out);

/* mc_loop_free() releases the loop. Work still queued by mc_loop_post() is run
 * first, so that nobody waits forever on it; handles still started are
 * forgotten (their callbacks never run). The kernel's teardown of the ring
 * interrupts the threads that made and ran the loop once, soon after: a
 * blocking call there that the kernel does not restart (a read from a
 * socket with a receive timeout, SO_RCVTIMEO) may fail with EINTR. */
MC_EXPORT void mc_loop_free(mc_loop_t *l);

/*
 * mc_loop_run() runs callbacks on the calling thread until mc_loop_stop().
 * Returns 0 when stopped, or -errno when io_uring itself failed.
 */
MC_EXPORT int mc_loop_run(mc_loop_t *l);

/* mc_loop_stop() makes mc_loop_run() return after the current callback.
 * Thread-safe. */
MC_EXPORT void mc_loop_stop(mc_loop_t *l);

/*
 * mc_loop_post() runs fn(arg) on the loop's thread soon. Thread-safe; this is
 * how other threads hand work to a loop. Returns 0 or -ENOMEM (fn not called),
 * or -ECHILD in a forked child of the process that made the loop (its thread
 * is not there: make a loop, or open a store, in the child). Work posted
 * before mc_loop_free() always runs.
 */
MC_EXPORT int mc_loop_post(mc_loop_t *l, mc_loop_fn fn, void *arg);

/*
 * mc_loop_defer() runs fn(arg) on the loop thread after the current callback
 * returns, in FIFO order. Loop thread only; never allocates; *w must stay
 * valid until fn runs. Used so that an async call never completes inside
 * the call that started it.
 */
MC_EXPORT void mc_loop_defer(mc_loop_t *l, mc_work_t *w, mc_loop_fn fn, void *arg);

/* mc_loop_is_current() returns 1 when called from inside mc_loop_run() of l. */
MC_EXPORT int mc_loop_is_current(const mc_loop_t *l);

/* mc_loop_now_ms() returns a monotonic clock in milliseconds. */
MC_EXPORT uint64_t mc_loop_now_ms(void);

/*
 * mc_poll_start() calls cb(p, revents) each time fd is ready for `events`
 * (POLLIN, POLLOUT, ...), until mc_poll_stop(). revents is negative (-errno)
 * if the poll itself failed; the poll is then stopped. Returns 0 or -errno.
 */
MC_EXPORT int mc_poll_start(mc_loop_t *l, mc_poll_t *p, int fd, unsigned events, mc_poll_cb cb);

/*
 * mc_poll_once() calls cb(p, revents) once, when fd is ready for `events`
 * (at once if it is ready now), and then leaves p idle: the caller arms it
 * again with mc_poll_once() when it wants the next readiness. Each arming
 * looks at fd afresh, so readiness that came while p was idle is never
 * missed (with mc_poll_start() wake-ups that come close together may make
 * one callback). revents is as for mc_poll_start(). Returns 0 or -errno
 * (cb not called); p must be idle (never started, stopped, or its one
 * callback called).
 */
MC_EXPORT int mc_poll_once(mc_loop_t *l, mc_poll_t *p, int fd, unsigned events, mc_poll_cb cb);

/* mc_poll_stop() stops watching; cb is not called again. Idempotent. */
MC_EXPORT void mc_poll_stop(mc_poll_t *p);

/*
 * mc_timer_start() calls cb(t) after timeout_ms, then every repeat_ms if
 * repeat_ms is non-zero, until mc_timer_stop(). Restarting a started timer
 * stops it first. Returns 0 or -errno.
 */
MC_EXPORT int mc_timer_start(mc_loop_t *l, mc_timer_t *t, uint64_t timeout_ms, uint64_t repeat_ms,
                             mc_timer_cb cb);

/* mc_timer_stop() cancels the timer; cb is not called again. Idempotent. */
MC_EXPORT void mc_timer_stop(mc_timer_t *t);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_LOOP_H */
