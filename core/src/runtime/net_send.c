/*
 * net_send.c - a framed connection's send queue (see net.h): frames queued
 * in order (a copy of the body, or the caller's buffers gathered), bounded
 * in bytes; early frames ahead of held ones; gathered sendmsg() calls with
 * a timeout; a descriptor passed with its frame's first byte; each frame's
 * done callback once the kernel took all of it, or with the conn's error
 * when it closes first. The state machine that drives it is in net.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/log.h"
#include "runtime/loop_i.h"
#include "runtime/net.h"
#include "runtime/net_i.h"

#define SEND_IOV_MAX 64           /* iovecs gathered into one sendmsg ... */
#define SEND_MAX_BYTES (4U << 20) /* ... and bytes: the send timeout bounds this much */
#define CONN_MAX_IOV 1000         /* body iovecs per frame */

/* One queued frame: iov[0] is the encoded header, the rest its body. */
struct wreq {
    struct wreq *next;
    mc__send_cb done;
    void *arg;
    size_t total, sent;
    int niov;
    int early;   /* MC__SEND_EARLY: may go out while the conn is held */
    int pass_fd; /* a descriptor to pass with the first byte (owned), or -1 */
    unsigned char hdr[MC__PROTO_HDR_SIZE];
    struct iovec iov[];
};

static void wreq_free(struct wreq *w)
{
    if (w->pass_fd >= 0)
        close(w->pass_fd);
    free(w);
}

/* Accounts n sent bytes to the queue, completing whole frames. Returns
 * how many it completed. */
static int consume_sent(mc__conn_t *c, size_t n)
{
    int done = 0;
    while (n > 0 && c->wq_head) {
        struct wreq *w = c->wq_head;
        size_t take = w->total - w->sent;
        if (take > n)
            take = n;
        w->sent += take;
        mc__conn_queued_add(c, -(ptrdiff_t)take);
        n -= take;
        if (w->sent < w->total)
            break;
        c->wq_head = w->next;
        if (!c->wq_head)
            c->wq_tail = NULL;
        if (w->done)
            w->done(w->arg, 0);
        wreq_free(w);
        done++;
    }
    return done;
}

static void on_sent(mc__io_t *io, int res)
{
    mc__conn_t *c = io->data;

    if (res > 0 && c->sending_fd && c->wq_head) {
        /* The kernel passed the descriptor with the first byte. */
        close(c->wq_head->pass_fd);
        c->wq_head->pass_fd = -1;
    }
    c->sending_fd = 0;
    if (res > 0) {
        if (consume_sent(c, (size_t)res) && c->state != CS_CLOSING && c->hook && c->hook->room)
            c->hook->room(c, c->hook_state); /* sends that found no room may go now */
    } else if (res == -ETIMEDOUT) {
        mc__conn_fail(c, res, MC__LOG_WARN, "send made no progress for %llu ms",
                      (unsigned long long)c->send_timeout_ms);
    } else if (res != -EINTR && res != -EAGAIN && res != 0) {
        mc__conn_fail(c, res, MC__LOG_INFO, "send failed: %s", strerror(-res));
    }
    mc__conn_drive(c);
}

/* Whether the head of the queue may be sent now. */
static int may_send(const mc__conn_t *c)
{
    return c->wq_head && (!c->held || c->wq_head->early);
}

/* Sends the front of the queue, at most SEND_IOV_MAX pieces and
 * SEND_MAX_BYTES bytes, with one sendmsg. While held, only early frames go;
 * a frame that passes a descriptor starts a sendmsg of its own, so that the
 * descriptor travels with its frame's first byte. */
static void arm_send(mc__conn_t *c)
{
    struct iovec iov[SEND_IOV_MAX];
    size_t total = 0;
    int n = 0, pass_fd = -1;

    if (c->wq_head->pass_fd >= 0 && c->wq_head->sent == 0)
        pass_fd = c->wq_head->pass_fd;
    for (struct wreq *w = c->wq_head; w && n < SEND_IOV_MAX && total < SEND_MAX_BYTES;
         w = w->next) {
        if ((c->held && !w->early) || (w != c->wq_head && w->pass_fd >= 0))
            break;
        size_t skip = w->sent;
        for (int i = 0; i < w->niov && n < SEND_IOV_MAX && total < SEND_MAX_BYTES; i++) {
            size_t len = w->iov[i].iov_len;
            if (skip >= len) {
                skip -= len;
                continue;
            }
            len -= skip;
            if (len > SEND_MAX_BYTES - total)
                len = SEND_MAX_BYTES - total;
            iov[n].iov_base = (char *)w->iov[i].iov_base + skip;
            iov[n].iov_len = len;
            total += len;
            skip = 0;
            n++;
        }
        if (pass_fd >= 0)
            break;
    }
    int rc;
    if (pass_fd >= 0) {
        c->sending_fd = 1;
        rc = mc__io_sendmsg_fd(c->loop, &c->wio, c->fd, iov, n, pass_fd, c->send_timeout_ms,
                               on_sent);
    } else {
        rc = mc__io_sendmsg(c->loop, &c->wio, c->fd, iov, n, c->send_timeout_ms, on_sent);
    }
    if (rc < 0) {
        c->sending_fd = 0;
        mc__conn_fail(c, rc, MC__LOG_WARN, "cannot send: %s", strerror(-rc));
    }
}

void mc__conn_send_next(mc__conn_t *c)
{
    if (may_send(c) && !mc__io_active(&c->wio))
        arm_send(c);
}

void mc__conn_fail_sends(mc__conn_t *c, int err)
{
    while (c->wq_head) {
        struct wreq *w = c->wq_head;
        c->wq_head = w->next;
        if (w->done)
            w->done(w->arg, err);
        wreq_free(w);
    }
    c->wq_tail = NULL;
    mc__conn_queued_add(c, -(ptrdiff_t)c->wq_bytes);
}

/* Checks that a frame of body bytes (early: MC__SEND_EARLY) may be queued
 * now. */
static int may_queue(const mc__conn_t *c, size_t body, int early)
{
    if (c->state == CS_CLOSING)
        return -EPIPE;
    if (body > MC__PROTO_MAX_BODY)
        return -EMSGSIZE;
    /* An empty queue takes any frame, so that a small bound cannot wedge;
     * any queue takes an early frame (a handshake's): while the conn is
     * held, the frames it goes ahead of wait for it. */
    if (c->wq_head && !early && c->wq_bytes + MC__PROTO_HDR_SIZE + body > c->max_queued)
        return -ENOBUFS;
    return 0;
}

static void enqueue(mc__conn_t *c, struct wreq *w, const mc__hdr_t *h, size_t body)
{
    mc__hdr_t hh = *h;

    hh.magic = MC__PROTO_MAGIC;
    hh.version = MC__PROTO_VERSION;
    hh.len = (uint32_t)body;
    mc__hdr_encode(w->hdr, &hh);
    w->iov[0].iov_base = w->hdr;
    w->iov[0].iov_len = MC__PROTO_HDR_SIZE;
    w->total = MC__PROTO_HDR_SIZE + body;
    w->next = NULL;
    if (w->early && c->held) {
        /* Ahead of the held frames, after the early ones; none of the held
         * ones has been sent, as they wait for mc__conn_hold(c, 0). */
        struct wreq **at = &c->wq_head;
        while (*at && (*at)->early)
            at = &(*at)->next;
        w->next = *at;
        *at = w;
        if (!w->next)
            c->wq_tail = w;
    } else {
        if (c->wq_tail)
            c->wq_tail->next = w;
        else
            c->wq_head = w;
        c->wq_tail = w;
    }
    mc__conn_queued_add(c, (ptrdiff_t)w->total);
    if (c->state == CS_OPEN)
        mc__conn_kick(c);
}

int mc__conn_send_ex(mc__conn_t *c, const mc__hdr_t *h, const void *body, size_t len,
                     unsigned flags, int pass_fd)
{
    int rc = may_queue(c, len, (flags & MC__SEND_EARLY) != 0);
    if (rc < 0)
        return rc;
    if (pass_fd >= 0 && !c->is_unix)
        return -EOPNOTSUPP;
    struct wreq *w = malloc(sizeof(*w) + 2 * sizeof(struct iovec) + len);
    if (!w)
        return -ENOMEM;
    w->pass_fd = -1;
    if (pass_fd >= 0 && (w->pass_fd = fcntl(pass_fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        rc = -errno;
        free(w);
        return rc;
    }
    char *copy = (char *)&w->iov[2];
    if (len)
        memcpy(copy, body, len);
    w->iov[1].iov_base = copy;
    w->iov[1].iov_len = len;
    w->niov = 2;
    w->sent = 0;
    w->done = NULL;
    w->arg = NULL;
    w->early = (flags & MC__SEND_EARLY) != 0;
    enqueue(c, w, h, len);
    return 0;
}

int mc__conn_check_frame(size_t body, int niov)
{
    if (niov < 0 || niov > CONN_MAX_IOV)
        return -EINVAL;
    return body > MC__PROTO_MAX_BODY ? -EMSGSIZE : 0;
}

int mc__conn_send(mc__conn_t *c, const mc__hdr_t *h, const void *body, size_t len)
{
    return mc__conn_send_ex(c, h, body, len, 0, -1);
}

int mc__conn_send_iov(mc__conn_t *c, const mc__hdr_t *h, const struct iovec *iov, int n,
                      mc__send_cb done, void *arg)
{
    size_t len = 0;

    if (n < 0 || n > CONN_MAX_IOV)
        return -EINVAL;
    for (int i = 0; i < n; i++) {
        if (iov[i].iov_len > MC__PROTO_MAX_BODY)
            return -EMSGSIZE;
        len += iov[i].iov_len; /* cannot overflow: n * 16 MiB is small */
    }
    int rc = may_queue(c, len, 0);
    if (rc < 0)
        return rc;
    struct wreq *w = malloc(sizeof(*w) + (size_t)(n + 1) * sizeof(struct iovec));
    if (!w)
        return -ENOMEM;
    if (n)
        memcpy(&w->iov[1], iov, (size_t)n * sizeof(*iov));
    w->niov = n + 1;
    w->sent = 0;
    w->done = done;
    w->arg = arg;
    w->early = 0;
    w->pass_fd = -1;
    enqueue(c, w, h, len);
    return 0;
}

void mc__conn_hold(mc__conn_t *c, int hold)
{
    c->held = hold != 0;
    if (!c->held && c->state == CS_OPEN)
        mc__conn_kick(c);
}

size_t mc__conn_queued(const mc__conn_t *c)
{
    return c->wq_bytes;
}
