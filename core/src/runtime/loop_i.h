/*
 * loop_i.h - internal socket operations on the io_uring loop (loop_io.c),
 * and the loop's next-round work and clocks (loop.c).
 *
 * An mc__io_t is a caller-allocated handle for one socket request: accept
 * (multishot), connect, recv or sendmsg. It follows the token discipline of
 * mooncake/loop.h: the request carries a loop-owned token as user_data, and
 * mc__io_cancel() detaches the handle from it, so the handle may be freed at
 * once and a completion that arrives later is dropped.
 *
 * Buffers are different from handles: the kernel may still read (send) or
 * write (recv) them until its last completion for the request arrives, even
 * after a cancel. mc__io_cancel() therefore takes a release function that the
 * loop calls exactly then; buffers handed over this way are freed safely.
 *
 * Every operation but accept takes a timeout in milliseconds (0: none),
 * implemented with a linked IORING_OP_LINK_TIMEOUT; when it fires the
 * callback gets -ETIMEDOUT. All functions are for the loop's thread only.
 */
#ifndef MC_LOOP_I_H
#define MC_LOOP_I_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "mooncake/loop.h"

/* The most iovecs one mc__io_sendmsg() takes (the kernel's UIO_MAXIOV). */
#define MC__IO_MAX_IOV 1024
/* The most descriptors one mc__io_recvmsg() takes in (SCM_RIGHTS). */
#define MC__IO_MAX_FDS 4

typedef struct mc__io mc__io_t;

/*
 * The completion callback: res is what the system call would have returned
 * (a byte count, a new fd, 0) or -errno; -ETIMEDOUT when the op's timeout
 * fired. For one-shot ops the handle is no longer active when cb runs, so cb
 * may start it again or free it.
 */
typedef void (*mc__io_cb)(mc__io_t *io, int res);

struct mc__io {
    mc_loop_t *loop; /* private */
    void *token;     /* private: the in-flight request, NULL when idle */
    mc__io_cb cb;    /* private */
    void *data;      /* free for the caller */
};

/*
 * mc__io_accept() accepts connections on the listening socket fd with one
 * multishot request (Linux 5.19+): cb(io, newfd) for each connection, the new
 * fd non-blocking and close-on-exec and owned by cb. A negative res stops the
 * handle (it is then idle; the caller may start it again, e.g. after a delay
 * on -EMFILE). Fds that arrive after mc__io_cancel() are closed by the loop.
 * Returns 0 or -errno (-ENOMEM, -EBUSY when the ring is full); cb is then
 * never called.
 */
int mc__io_accept(mc_loop_t *l, mc__io_t *io, int fd, mc__io_cb cb);

/*
 * mc__io_connect() connects socket fd to sa (copied; it need not outlive the
 * call): cb(io, 0) once connected, or cb(io, -errno) (-ECONNREFUSED,
 * -ENOENT for a missing Unix socket, -ETIMEDOUT after timeout_ms).
 * Returns 0 or -errno (-EINVAL for an oversized address); cb is then never
 * called.
 */
int mc__io_connect(mc_loop_t *l, mc__io_t *io, int fd, const struct sockaddr *sa, socklen_t salen,
                   uint64_t timeout_ms, mc__io_cb cb);

/*
 * mc__io_recv() receives up to len bytes into buf: cb(io, n) with n > 0, 0 at
 * end of stream, or -errno. buf must stay valid until cb runs or, after a
 * cancel, until the release function runs. Returns 0 or -errno.
 */
int mc__io_recv(mc_loop_t *l, mc__io_t *io, int fd, void *buf, size_t len, uint64_t timeout_ms,
                mc__io_cb cb);

/*
 * mc__io_sendmsg() sends the iov[0..n) gather list with MSG_NOSIGNAL:
 * cb(io, bytes sent) (possibly fewer than asked, the caller continues) or
 * cb(io, -errno) (-EPIPE, -ECONNRESET, -ETIMEDOUT when nothing could be sent
 * within timeout_ms). The iovec array is copied; the buffers it points at
 * must stay valid as for mc__io_recv(). Returns 0 or -errno (-EINVAL when n
 * is not 1..MC__IO_MAX_IOV).
 */
int mc__io_sendmsg(mc_loop_t *l, mc__io_t *io, int fd, const struct iovec *iov, int n,
                   uint64_t timeout_ms, mc__io_cb cb);

/*
 * mc__io_sendmsg_fd() is mc__io_sendmsg() on a Unix stream socket that also
 * passes the descriptor pass_fd (SCM_RIGHTS) with the first byte sent. The
 * kernel takes its own reference when the call is made; the caller keeps
 * pass_fd and may close it once cb has run (or after a cancel, once the
 * release function has). Returns as mc__io_sendmsg(), and -EBADF for a
 * negative pass_fd.
 */
int mc__io_sendmsg_fd(mc_loop_t *l, mc__io_t *io, int fd, const struct iovec *iov, int n,
                      int pass_fd, uint64_t timeout_ms, mc__io_cb cb);

/*
 * mc__io_recvmsg() is mc__io_recv() that also takes in descriptors passed
 * with SCM_RIGHTS (close-on-exec): before cb(io, n) runs they are stored in
 * fds[0..*nfds), at most maxfds (1..MC__IO_MAX_FDS) of them, and belong to
 * the caller; *nfds is 0 when none came. fds and nfds must stay valid as
 * buf does. Descriptors that arrive after mc__io_cancel() are closed by the
 * loop. Returns 0 or -errno (-EINVAL for a bad maxfds).
 */
int mc__io_recvmsg(mc_loop_t *l, mc__io_t *io, int fd, void *buf, size_t len, int *fds, int *nfds,
                   int maxfds, uint64_t timeout_ms, mc__io_cb cb);

/*
 * mc__io_cancel() cancels io's request: cb is not called again and io may be
 * freed at once. If release is non-NULL, release(arg) runs on the loop thread
 * once the kernel has finished with the request (its last completion), or from
 * mc_loop_free(); it runs at once when io was idle. Idempotent for the handle.
 */
void mc__io_cancel(mc__io_t *io, mc_loop_fn release, void *arg);

/* mc__io_active() returns 1 while io has a request in flight. */
static inline int mc__io_active(const mc__io_t *io)
{
    return io->token != NULL;
}

/*
 * mc__loop_defer_next() runs fn(arg) on the loop thread in the loop's next
 * round, after the completions that round brings: unlike mc_loop_defer(),
 * work that keeps deferring more work this way cannot starve timers and I/O.
 * Loop thread only.
 */
void mc__loop_defer_next(mc_loop_t *l, mc_work_t *w, mc_loop_fn fn, void *arg);

/* The loop's time (mc_loop_now_ms()) as of the start of its current round:
 * no clock read per call. Loop thread only. */
uint64_t mc__loop_time(mc_loop_t *l);

/* The wall clock in ns since the epoch (CLOCK_REALTIME): what the master
 * service is handed to stamp a commit's mtime (mc__svc_opts_t.wall_ns). */
int64_t mc__wall_ns(void);

/* CLOCK_MONOTONIC in ns, read now; on l's thread it is also kept as l's
 * most recent reading (mc__loop_recent_ns()). */
uint64_t mc__loop_clock_ns(mc_loop_t *l);

/* On l's thread: l's most recent monotonic reading (the start of the round,
 * or a later mc__loop_clock_ns()), no clock read; elsewhere a fresh one. An
 * operation's start stamp (its latency then counts from at most one
 * reading before the call). */
uint64_t mc__loop_recent_ns(mc_loop_t *l);

/* The wall clock as mc__wall_ns(), without a clock read on a loop thread:
 * the loop's most recent monotonic reading (mc__loop_recent_ns()) plus the
 * wall clock's offset taken at the round's start; fresh elsewhere. What
 * stamps a commit's mtime. */
int64_t mc__loop_wall_ns(void);

/* Whether l was made by the process this one was forked from: its thread
 * and its ring are not here, and it cannot be used (forkfd.h). */
int mc__loop_forked(const mc_loop_t *l);

#endif /* MC_LOOP_I_H */
