/*
 * loop_ring.h - what loop.c (the ring, posts, polls, timers, clocks) shares
 * with loop_io.c (the socket operations of loop_i.h): the loop itself and
 * the token every request in the ring carries as user_data. Private to
 * runtime/loop*.c; everyone else uses mooncake/loop.h and loop_i.h. How
 * tokens and handles part is told at the top of loop.c.
 */
#ifndef MC_RUNTIME_LOOP_RING_H
#define MC_RUNTIME_LOOP_RING_H

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>

#include "mooncake/loop.h"
#include "runtime/loop_i.h"

enum tok_kind { TOK_WAKE, TOK_POLL, TOK_TIMER, TOK_IO };
enum io_op { IO_ACCEPT, IO_CONNECT, IO_RECV, IO_SENDMSG, IO_RECVMSG };

/* user_data of a linked timeout: its op's token with this bit set. */
#define TOK_LINK_BIT ((uintptr_t)1)

struct tok {
    enum tok_kind kind;
    void *handle; /* mc_poll_t / mc_timer_t / mc__io_t, NULL once detached */
    struct __kernel_timespec ts;
    struct tok *prev, *next; /* all live tokens, freed by mc_loop_free() */
    /* TOK_IO only: */
    enum io_op op;
    int fd;
    int pending;   /* CQEs still to come: the op, and its linked timeout */
    int res;       /* the op's result, held until the timeout's CQE */
    int timed_out; /* the linked timeout fired */
    socklen_t salen;
    void *buf; /* IO_RECV, IO_RECVMSG */
    size_t len;
    mc_loop_fn release;
    void *release_arg;
    union {
        struct sockaddr_storage sa;
        struct msghdr msg;
    } u;
    int *fds_out, *nfds_out; /* IO_RECVMSG: where received descriptors go */
    union {                  /* IO_SENDMSG, IO_RECVMSG: SCM_RIGHTS */
        size_t align;        /* a cmsghdr's alignment */
        /* CMSG_SPACE(sizeof(int) * MC__IO_MAX_FDS), spelled out: clang does
         * not take CMSG_SPACE() as a constant; the last term covers the
         * alignment padding. */
        char buf[sizeof(struct cmsghdr) + sizeof(int) * MC__IO_MAX_FDS + sizeof(size_t)];
    } ctrl;
    struct iovec iov[]; /* IO_SENDMSG: the caller's iovec array, copied */
};

struct posted; /* a call from another thread: loop.c */

struct mc_loop {
    struct io_uring ring;
    int wake_fd;
    struct tok *wake_tok; /* apart: struct tok ends in a flexible array */
    atomic_int stop;
    atomic_int wake_pending;
    pthread_mutex_t lock;
    struct posted *post_head, *post_tail; /* guarded by lock */
    mc_work_t *defer_head, *defer_tail;   /* loop thread only */
    mc_work_t *next_head, *next_tail;     /* mc__loop_defer_next(); loop thread only */
    struct tok *toks;                     /* loop thread only */
    struct tok *poll_spare; /* a poll token kept for reuse (on toks, no handle); loop thread only */
    uint64_t now_ms;        /* mc__loop_time(); loop thread only */
    uint64_t clock_ns;      /* mc__loop_recent_ns(); loop thread only */
    int64_t wall_off;       /* wall clock - clock_ns, as of the round's start */
    unsigned forks;         /* mc__fork_count() when made: a forked child's copy is dead */
};

/* A relative timeout of ms milliseconds, as io_uring takes it. */
static inline void mc__ms_to_ts(struct __kernel_timespec *ts, uint64_t ms)
{
    ts->tv_sec = (long long)(ms / 1000);
    ts->tv_nsec = (long long)(ms % 1000) * 1000000;
}

/* A new token of kind for handle, with extra bytes after it (the iovec
 * array of a sendmsg), on l's list of live tokens. NULL: no memory. */
struct tok *mc__tok_alloc(mc_loop_t *l, enum tok_kind kind, void *handle, size_t extra);

/* Takes t off l's list and frees it. */
void mc__tok_free(mc_loop_t *l, struct tok *t);

/* Detaches t from its handle and cancels the kernel request behind it; its
 * last completion frees t later. */
void mc__tok_cancel(mc_loop_t *l, struct tok *t);

/* Settles an arming's result rc for the handle whose token slot is *token:
 * when arming failed, the handle is idle again and t is freed. Returns rc. */
int mc__tok_armed(mc_loop_t *l, struct tok *t, void **token, int rc);

/* A completion of a TOK_IO token (loop_io.c): is_link when it is the linked
 * timeout's. Frees t once the kernel is done with it. */
void mc__io_cqe(mc_loop_t *l, struct tok *t, struct io_uring_cqe *cqe, int is_link);

#endif /* MC_RUNTIME_LOOP_RING_H */
