/*
 * loop_io.c - the socket operations of loop_i.h on the io_uring loop:
 * accept (multishot), connect, recv, sendmsg and recvmsg (descriptors
 * passed with SCM_RIGHTS), cancel, and their completions.
 *
 * They use the tokens of loop.c (loop_ring.h). The token also owns what the
 * kernel reads after submission (the connect address, the msghdr and its
 * iovec array), so nothing a caller frees is ever referenced by a request.
 * An op with a timeout is a linked pair: the op's CQE carries the token,
 * the IORING_OP_LINK_TIMEOUT's CQE the token with its low bit set, and the
 * token waits for both before it reports, so that it knows whether a
 * -ECANCELED was the timeout's doing.
 */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/loop_ring.h"

/* Queues the SQEs for t's op, and its linked timeout when timeout_ms is
 * non-zero. Both go into one submission: a link split across two would run
 * the op without its timeout. */
static int arm_io(mc_loop_t *l, struct tok *t, uint64_t timeout_ms)
{
    unsigned need = timeout_ms ? 2 : 1;
    if (io_uring_sq_space_left(&l->ring) < need)
        io_uring_submit(&l->ring);
    if (io_uring_sq_space_left(&l->ring) < need)
        return -EBUSY;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);
    switch (t->op) {
    case IO_ACCEPT:
        io_uring_prep_multishot_accept(sqe, t->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        break;
    case IO_CONNECT:
        io_uring_prep_connect(sqe, t->fd, (struct sockaddr *)&t->u.sa, t->salen);
        break;
    case IO_RECV:
        io_uring_prep_recv(sqe, t->fd, t->buf, t->len, 0);
        break;
    case IO_SENDMSG:
        io_uring_prep_sendmsg(sqe, t->fd, &t->u.msg, MSG_NOSIGNAL);
        break;
    case IO_RECVMSG:
        io_uring_prep_recvmsg(sqe, t->fd, &t->u.msg, MSG_CMSG_CLOEXEC);
        break;
    }
    io_uring_sqe_set_data(sqe, t);
    t->pending = 1;
    t->timed_out = 0;
    if (timeout_ms) {
        sqe->flags |= IOSQE_IO_LINK;
        mc__ms_to_ts(&t->ts, timeout_ms);
        struct io_uring_sqe *lt = io_uring_get_sqe(&l->ring);
        io_uring_prep_link_timeout(lt, &t->ts, 0);
        io_uring_sqe_set_data(lt, (void *)((uintptr_t)t | TOK_LINK_BIT));
        t->pending = 2;
    }
    return 0;
}

/* The kernel is done with t: hand its buffers back and free it. */
static void tok_done(mc_loop_t *l, struct tok *t)
{
    if (t->release)
        t->release(t->release_arg);
    mc__tok_free(l, t);
}

static void on_accept_cqe(mc_loop_t *l, struct tok *t, struct io_uring_cqe *cqe)
{
    mc__io_t *io = t->handle;
    int more = (cqe->flags & IORING_CQE_F_MORE) != 0;
    int res = cqe->res;

    if (!io) { /* cancelled: nobody wants this connection */
        if (res >= 0)
            close(res);
        if (!more)
            tok_done(l, t);
        return;
    }
    if (!more && res >= 0 && arm_io(l, t, 0) < 0) {
        /* The kernel ended the multishot (CQ overflow) and the ring is full. */
        close(res);
        res = -EBUSY;
    }
    if (!more && res < 0) {
        io->token = NULL;
        tok_done(l, t);
    }
    io->cb(io, res);
}

/* Hands the descriptors a recvmsg brought to its caller, or closes them
 * when nobody wants them (cancelled, failed). */
static void take_fds(struct tok *t, int keep)
{
    int n = 0;
    if (t->res >= 0) {
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&t->u.msg); cm; cm = CMSG_NXTHDR(&t->u.msg, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t cnt = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < cnt; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
                if (keep && n < MC__IO_MAX_FDS)
                    t->fds_out[n++] = fd;
                else
                    close(fd);
            }
        }
    }
    if (keep)
        *t->nfds_out = n;
}

void mc__io_cqe(mc_loop_t *l, struct tok *t, struct io_uring_cqe *cqe, int is_link)
{
    if (t->op == IO_ACCEPT) {
        on_accept_cqe(l, t, cqe);
        return;
    }
    if (is_link) {
        if (cqe->res == -ETIME)
            t->timed_out = 1;
    } else {
        t->res = cqe->res;
    }
    if (--t->pending > 0)
        return;
    mc__io_t *io = t->handle;
    int res = t->res;
    if (t->timed_out && (res == -ECANCELED || res == -EINTR))
        res = -ETIMEDOUT;
    if (t->op == IO_RECVMSG)
        take_fds(t, io != NULL && res >= 0);
    tok_done(l, t);
    if (io) {
        io->token = NULL;
        io->cb(io, res);
    }
}

static int io_start(mc_loop_t *l, mc__io_t *io, struct tok *t, uint64_t timeout_ms, mc__io_cb cb)
{
    io->loop = l;
    io->cb = cb;
    io->token = t;
    return mc__tok_armed(l, t, &io->token, arm_io(l, t, timeout_ms));
}

static struct tok *io_tok(mc_loop_t *l, mc__io_t *io, enum io_op op, int fd, size_t extra)
{
    struct tok *t = mc__tok_alloc(l, TOK_IO, io, extra);
    if (t) {
        t->op = op;
        t->fd = fd;
    }
    return t;
}

int mc__io_accept(mc_loop_t *l, mc__io_t *io, int fd, mc__io_cb cb)
{
    struct tok *t = io_tok(l, io, IO_ACCEPT, fd, 0);
    if (!t)
        return -ENOMEM;
    return io_start(l, io, t, 0, cb);
}

int mc__io_connect(mc_loop_t *l, mc__io_t *io, int fd, const struct sockaddr *sa, socklen_t salen,
                   uint64_t timeout_ms, mc__io_cb cb)
{
    if (salen > sizeof(struct sockaddr_storage))
        return -EINVAL;
    struct tok *t = io_tok(l, io, IO_CONNECT, fd, 0);
    if (!t)
        return -ENOMEM;
    memcpy(&t->u.sa, sa, salen);
    t->salen = salen;
    return io_start(l, io, t, timeout_ms, cb);
}

int mc__io_recv(mc_loop_t *l, mc__io_t *io, int fd, void *buf, size_t len, uint64_t timeout_ms,
                mc__io_cb cb)
{
    struct tok *t = io_tok(l, io, IO_RECV, fd, 0);
    if (!t)
        return -ENOMEM;
    t->buf = buf;
    t->len = len;
    return io_start(l, io, t, timeout_ms, cb);
}

/* A sendmsg of iov[0..n), passing pass_fd with its first byte when it is
 * not negative; n is already checked. */
static int sendmsg_start(mc_loop_t *l, mc__io_t *io, int fd, const struct iovec *iov, int n,
                         int pass_fd, uint64_t timeout_ms, mc__io_cb cb)
{
    struct tok *t = io_tok(l, io, IO_SENDMSG, fd, (size_t)n * sizeof(*iov));
    if (!t)
        return -ENOMEM;
    memcpy(t->iov, iov, (size_t)n * sizeof(*iov));
    t->u.msg.msg_iov = t->iov;
    t->u.msg.msg_iovlen = (size_t)n;
    if (pass_fd >= 0) {
        t->u.msg.msg_control = t->ctrl.buf;
        t->u.msg.msg_controllen = CMSG_SPACE(sizeof(int));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&t->u.msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &pass_fd, sizeof(pass_fd));
    }
    return io_start(l, io, t, timeout_ms, cb);
}

int mc__io_sendmsg(mc_loop_t *l, mc__io_t *io, int fd, const struct iovec *iov, int n,
                   uint64_t timeout_ms, mc__io_cb cb)
{
    if (n < 1 || n > MC__IO_MAX_IOV)
        return -EINVAL;
    return sendmsg_start(l, io, fd, iov, n, -1, timeout_ms, cb);
}

int mc__io_sendmsg_fd(mc_loop_t *l, mc__io_t *io, int fd, const struct iovec *iov, int n,
                      int pass_fd, uint64_t timeout_ms, mc__io_cb cb)
{
    if (n < 1 || n > MC__IO_MAX_IOV)
        return -EINVAL;
    if (pass_fd < 0)
        return -EBADF;
    return sendmsg_start(l, io, fd, iov, n, pass_fd, timeout_ms, cb);
}

int mc__io_recvmsg(mc_loop_t *l, mc__io_t *io, int fd, void *buf, size_t len, int *fds, int *nfds,
                   int maxfds, uint64_t timeout_ms, mc__io_cb cb)
{
    if (maxfds < 1 || maxfds > MC__IO_MAX_FDS)
        return -EINVAL;
    struct tok *t = io_tok(l, io, IO_RECVMSG, fd, sizeof(struct iovec));
    if (!t)
        return -ENOMEM;
    t->iov[0].iov_base = buf;
    t->iov[0].iov_len = len;
    t->u.msg.msg_iov = t->iov;
    t->u.msg.msg_iovlen = 1;
    t->u.msg.msg_control = t->ctrl.buf;
    t->u.msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)maxfds);
    t->fds_out = fds;
    t->nfds_out = nfds;
    *nfds = 0;
    return io_start(l, io, t, timeout_ms, cb);
}

void mc__io_cancel(mc__io_t *io, mc_loop_fn release, void *arg)
{
    struct tok *t = io->token;
    if (!t) {
        if (release)
            release(arg);
        return;
    }
    t->release = release;
    t->release_arg = arg;
    mc__tok_cancel(io->loop, t);
    io->token = NULL;
}
