/*
 * net_i.h - what net.c (the state machine, connecting, the receive side,
 * closing, the accessors) shares with net_send.c (the send queue): the
 * connection itself and the few steps each side takes in the other.
 * Private to runtime/net*.c; everyone else uses net.h.
 */
#ifndef MC_RUNTIME_NET_I_H
#define MC_RUNTIME_NET_I_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/loop.h"
#include "runtime/loop_i.h"
#include "runtime/net.h"

enum conn_state {
    CS_CONNECTING, /* a connect is in flight; sends are queued */
    CS_OPEN,       /* frames flow both ways */
    CS_CLOSING,    /* cancelling; freed once the kernel lets go of the buffers */
};

struct wreq; /* one queued frame: net_send.c */

struct mc__conn {
    mc_loop_t *loop;
    int fd;
    enum conn_state state;
    int err; /* on_close's argument, set when CLOSING starts */
    mc__conn_ops_t ops;
    void *data;
    const mc__conn_hook_t *hook;
    void *hook_state;
    char peer[MC__ADDR_STRLEN];

    mc__io_t cio, rio, wio; /* connect, recv, sendmsg */
    int draining;           /* cancelled requests the kernel still holds */
    mc_work_t kick;
    int kicked; /* an mc__conn_drive() is deferred: do not free */

    char *rbuf;              /* [roff, rlen) is received and not yet delivered */
    size_t rcap, rlen, roff; /* rbuf may move only while no recv is in flight */
    unsigned small_rounds;   /* rounds that needed no more than RBUF_INIT */

    char *sink;         /* a body received in place: its bytes from sink_skip on */
    size_t sink_got;    /* bytes of the body received (its first sink_skip included) */
    size_t sink_skip;   /* a request's: its head's bytes, in sink_head */
    mc__hdr_t sink_hdr; /* its header (sink_hdr.len: the bytes it needs) */
    char sink_head[MC__CONN_SINK_HEAD];

    struct wreq *wq_head, *wq_tail;
    size_t wq_bytes; /* queued and not yet sent */
    size_t max_queued;
    size_t pause_at;           /* mc__conn_set_backpressure(); 0: never */
    int paused;                /* frames wait in rbuf until the queue is under pause_at
                                  (or empty, while the budget is spent) */
    mc__send_budget_t *budget; /* mc__conn_set_budget(); NULL: none */
    uint32_t max_body;         /* mc__conn_set_max_body() */
    uint64_t send_timeout_ms, idle_timeout_ms;
    int held;       /* mc__conn_hold(): only MC__SEND_EARLY frames go out */
    int shutdown;   /* mc__conn_shutdown(): deliver nothing, close once sent */
    int is_unix;    /* AF_UNIX: receive with recvmsg, descriptors may pass */
    int sending_fd; /* the sendmsg in flight carries the head's descriptor */

    int rfds[MC__CONN_MAX_FDS]; /* received descriptors, oldest first (owned) */
    int nrfds;
    int in_fds[MC__CONN_MAX_FDS]; /* what the recvmsg in flight brought */
    int in_nfds;
};

/* Adds n (negative: takes) to c's queued bytes and its budget's. */
static inline void mc__conn_queued_add(mc__conn_t *c, ptrdiff_t n)
{
    c->wq_bytes += (size_t)n;
    if (c->budget)
        c->budget->queued += (size_t)n;
}

/* net.c: the state machine, one step (see the comment at the top of net.c).
 * Completions call it; it may free c. */
void mc__conn_drive(mc__conn_t *c);

/* net.c: runs mc__conn_drive() after the current callback; used by calls
 * from the owner, so that no callback runs inside an mc__conn_* call. */
void mc__conn_kick(mc__conn_t *c);

/* net.c: moves c to CLOSING with err and logs why at level (no-op when it
 * is already closing). */
void mc__conn_fail(mc__conn_t *c, int err, int level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* net_send.c: starts a sendmsg of the front of the queue when it may go
 * (not held back) and none is in flight; a failure to start one closes c. */
void mc__conn_send_next(mc__conn_t *c);

/* net_send.c: the last step of CLOSING for the queue: every frame still
 * queued is freed and its done callback gets err. */
void mc__conn_fail_sends(mc__conn_t *c, int err);

#endif /* MC_RUNTIME_NET_I_H */
