/*
 * net.c - framed connections (see net.h).
 *
 * A conn is a state machine driven from one place, drive():
 *
 *   CONNECTING --connected--> OPEN --error, EOF, bad frame, close--> CLOSING --> freed
 *        \___________________connect failed, close_______________/
 *
 * Completions (connect, recv, send) update the conn and call drive(); calls
 * from the owner (send, close) update it and schedule drive() with
 * mc_loop_defer(), so that no callback ever runs inside an mc__conn_* call.
 * In OPEN, drive() delivers the whole frames buffered, keeps one recv and
 * one sendmsg in flight, and grows the read buffer to fit the next frame.
 * In CLOSING it cancels what is in flight and waits for the kernel to let
 * go of every buffer (the loop's release callbacks) before it fails the
 * send queue, tells the rpc hook and the owner, and frees the conn.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/log.h"
#include "runtime/loop_i.h"
#include "runtime/net.h"

#define RBUF_INIT (64U << 10)     /* read buffer of a new conn */
#define RBUF_MIN_FREE (8U << 10)  /* compact rather than recv into less */
#define RBUF_SHRINK_ROUNDS 64     /* small-frame rounds before a big buffer shrinks */
#define SEND_IOV_MAX 64           /* iovecs gathered into one sendmsg ... */
#define SEND_MAX_BYTES (4U << 20) /* ... and bytes: the send timeout bounds this much */
#define CONN_MAX_IOV 1000         /* body iovecs per frame */

/* ---- connections ---- */

enum conn_state {
    CS_CONNECTING, /* a connect is in flight; sends are queued */
    CS_OPEN,       /* frames flow both ways */
    CS_CLOSING,    /* cancelling; freed once the kernel lets go of the buffers */
};

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
    int kicked; /* a drive() is deferred: do not free */

    char *rbuf;              /* [roff, rlen) is received and not yet delivered */
    size_t rcap, rlen, roff; /* rbuf may move only while no recv is in flight */
    unsigned small_rounds;   /* rounds that needed no more than RBUF_INIT */

    struct wreq *wq_head, *wq_tail;
    size_t wq_bytes; /* queued and not yet sent */
    size_t max_queued;
    uint32_t max_body; /* mc__conn_set_max_body() */
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

static void drive(mc__conn_t *c);

static void kicked(void *arg)
{
    mc__conn_t *c = arg;
    c->kicked = 0;
    drive(c);
}

/* Runs drive() after the current callback; used by calls from the owner. */
static void kick(mc__conn_t *c)
{
    if (c->kicked)
        return;
    c->kicked = 1;
    mc_loop_defer(c->loop, &c->kick, kicked, c);
}

/* Moves c to CLOSING with err and logs why at level. */
static void __attribute__((format(printf, 4, 5)))
conn_fail(mc__conn_t *c, int err, int level, const char *fmt, ...)
{
    char why[256];
    va_list ap;

    if (c->state == CS_CLOSING)
        return;
    c->state = CS_CLOSING;
    c->err = err;
    if (mc__log_on(level)) {
        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
        mc__log(level, "closing %s: %s", c->peer, why);
    }
}

static void on_connected(mc__io_t *io, int res)
{
    mc__conn_t *c = io->data;

    if (c->state != CS_CONNECTING) {
        drive(c);
        return;
    }
    if (res < 0) {
        conn_fail(c, res, MC__LOG_DEBUG, "connect failed: %s", strerror(-res));
    } else {
        c->state = CS_OPEN;
        if (c->ops.on_open)
            c->ops.on_open(c);
    }
    drive(c);
}

/* Queues the descriptors the last recvmsg brought, oldest first. */
static void keep_fds(mc__conn_t *c)
{
    int dropped = 0;
    for (int i = 0; i < c->in_nfds; i++) {
        if (c->state == CS_OPEN && c->nrfds < MC__CONN_MAX_FDS) {
            c->rfds[c->nrfds++] = c->in_fds[i];
        } else {
            close(c->in_fds[i]);
            dropped++;
        }
    }
    c->in_nfds = 0;
    if (dropped && c->state == CS_OPEN)
        conn_fail(c, -EPROTO, MC__LOG_WARN, "%d unexpected file descriptors", dropped);
}

static void on_recv(mc__io_t *io, int res)
{
    mc__conn_t *c = io->data;

    keep_fds(c);
    if (c->state != CS_OPEN) /* closed by its owner: the bytes are dropped */
        ;
    else if (res > 0)
        c->rlen += (size_t)res;
    else if (res == 0)
        conn_fail(c, -ECONNRESET, MC__LOG_DEBUG, "peer closed the connection");
    else if (res == -ETIMEDOUT)
        conn_fail(c, res, MC__LOG_WARN, "idle for %llu ms", (unsigned long long)c->idle_timeout_ms);
    else if (res != -EINTR && res != -EAGAIN)
        conn_fail(c, res, MC__LOG_INFO, "receive failed: %s", strerror(-res));
    drive(c);
}

static void wreq_free(struct wreq *w)
{
    if (w->pass_fd >= 0)
        close(w->pass_fd);
    free(w);
}

/* Accounts n sent bytes to the queue, completing whole frames. */
static void consume_sent(mc__conn_t *c, size_t n)
{
    while (n > 0 && c->wq_head) {
        struct wreq *w = c->wq_head;
        size_t take = w->total - w->sent;
        if (take > n)
            take = n;
        w->sent += take;
        c->wq_bytes -= take;
        n -= take;
        if (w->sent < w->total)
            break;
        c->wq_head = w->next;
        if (!c->wq_head)
            c->wq_tail = NULL;
        if (w->done)
            w->done(w->arg, 0);
        wreq_free(w);
    }
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
    if (res > 0)
        consume_sent(c, (size_t)res);
    else if (res == -ETIMEDOUT)
        conn_fail(c, res, MC__LOG_WARN, "send made no progress for %llu ms",
                  (unsigned long long)c->send_timeout_ms);
    else if (res != -EINTR && res != -EAGAIN && res != 0)
        conn_fail(c, res, MC__LOG_INFO, "send failed: %s", strerror(-res));
    drive(c);
}

static void deliver(mc__conn_t *c, const mc__hdr_t *h, const char *body, size_t len)
{
    if ((h->flags & MC__F_RESPONSE) && c->hook && c->hook->frame(c, c->hook_state, h, body, len))
        return;
    if (c->ops.on_frame)
        c->ops.on_frame(c, h, body, len);
}

/* Decodes the header at buf[0..n) as mc__hdr_decode() does, and refuses
 * with -EMSGSIZE a body over the conn's own bound. */
static int header_decode(const mc__conn_t *c, const char *buf, size_t n, mc__hdr_t *h)
{
    int rc = mc__hdr_decode(buf, n, h);
    if (rc == 0 && h->len > c->max_body)
        rc = -EMSGSIZE;
    return rc;
}

/* Logs and closes for a header header_decode() refused; h holds the fields
 * it decoded (proto.c). */
static void reject_header(mc__conn_t *c, int rc, const mc__hdr_t *h)
{
    switch (rc) {
    case -EMSGSIZE:
        conn_fail(c, rc, MC__LOG_WARN, "oversized frame (%s, body %u bytes > max %u%s)",
                  mc__op_name(h->op), h->len, c->max_body,
                  c->max_body < MC__PROTO_MAX_BODY ? " on this connection so far" : "");
        break;
    case -EPROTO:
        conn_fail(c, rc, MC__LOG_WARN, "malformed frame header (bad magic 0x%08x or version %u)",
                  h->magic, h->version);
        break;
    case -EBADMSG:
        conn_fail(c, rc, MC__LOG_WARN, "frame with an unknown operation %u", h->op);
        break;
    default:
        conn_fail(c, rc, MC__LOG_WARN, "malformed frame header (%s)", strerror(-rc));
        break;
    }
}

/* Delivers every whole frame in the read buffer, while the conn stays open. */
static void deliver_frames(mc__conn_t *c)
{
    while (c->state == CS_OPEN && !c->shutdown) {
        size_t avail = c->rlen - c->roff;
        mc__hdr_t h;
        int rc = header_decode(c, c->rbuf + c->roff, avail, &h);
        if (rc == -EAGAIN)
            break;
        if (rc < 0) {
            reject_header(c, rc, &h);
            return;
        }
        size_t need = MC__PROTO_HDR_SIZE + (size_t)h.len;
        if (avail < need)
            break;
        const char *body = c->rbuf + c->roff + MC__PROTO_HDR_SIZE;
        c->roff += need;
        deliver(c, &h, body, h.len);
    }
    if (c->roff == c->rlen)
        c->roff = c->rlen = 0;
}

/* Makes room in the read buffer for the rest of the next frame. */
static int rbuf_reserve(mc__conn_t *c)
{
    size_t avail = c->rlen - c->roff;
    size_t need = MC__PROTO_HDR_SIZE;
    mc__hdr_t h;

    if (avail >= MC__PROTO_HDR_SIZE && header_decode(c, c->rbuf + c->roff, avail, &h) == 0)
        need = MC__PROTO_HDR_SIZE + (size_t)h.len;
    if (need > RBUF_INIT)
        c->small_rounds = 0;
    else if (avail == 0 && c->rcap > RBUF_INIT && ++c->small_rounds >= RBUF_SHRINK_ROUNDS) {
        free(c->rbuf); /* a burst of big frames is over: give the memory back */
        c->rbuf = NULL;
        c->rcap = 0;
        c->small_rounds = 0;
    }
    if (c->roff && (c->roff + need > c->rcap || c->rcap - c->rlen < RBUF_MIN_FREE)) {
        memmove(c->rbuf, c->rbuf + c->roff, avail);
        c->roff = 0;
        c->rlen = avail;
    }
    if (need > c->rcap || c->rcap == c->rlen) {
        size_t cap = c->rcap ? c->rcap * 2 : RBUF_INIT;
        if (cap < need)
            cap = need;
        if (cap > MC__PROTO_HDR_SIZE + (size_t)c->max_body)
            cap = MC__PROTO_HDR_SIZE + (size_t)c->max_body; /* one frame at most */
        if (cap <= c->rlen)
            return -ENOBUFS; /* cannot happen: a whole frame would have been delivered */
        char *p = realloc(c->rbuf, cap);
        if (!p)
            return -ENOMEM;
        c->rbuf = p;
        c->rcap = cap;
    }
    return 0;
}

static void arm_recv(mc__conn_t *c)
{
    int rc = rbuf_reserve(c);
    if (rc == 0 && c->is_unix)
        rc = mc__io_recvmsg(c->loop, &c->rio, c->fd, c->rbuf + c->rlen, c->rcap - c->rlen,
                            c->in_fds, &c->in_nfds, MC__CONN_MAX_FDS, c->idle_timeout_ms, on_recv);
    else if (rc == 0)
        rc = mc__io_recv(c->loop, &c->rio, c->fd, c->rbuf + c->rlen, c->rcap - c->rlen,
                         c->idle_timeout_ms, on_recv);
    if (rc < 0)
        conn_fail(c, rc, MC__LOG_WARN, "cannot receive: %s", strerror(-rc));
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
        conn_fail(c, rc, MC__LOG_WARN, "cannot send: %s", strerror(-rc));
    }
}

/* A cancelled request's buffers are free again. */
static void drained(void *arg)
{
    mc__conn_t *c = arg;
    c->draining--;
    drive(c);
}

static void cancel_io(mc__conn_t *c, mc__io_t *io)
{
    if (!mc__io_active(io))
        return;
    c->draining++;
    mc__io_cancel(io, drained, c);
}

/* The last step of CLOSING: no request refers to the conn any more. */
static void conn_finish(mc__conn_t *c)
{
    int err = c->err ? c->err : -ECANCELED;

    while (c->wq_head) {
        struct wreq *w = c->wq_head;
        c->wq_head = w->next;
        if (w->done)
            w->done(w->arg, err);
        wreq_free(w);
    }
    c->wq_tail = NULL;
    c->wq_bytes = 0;
    for (int i = 0; i < c->nrfds; i++)
        close(c->rfds[i]);
    c->nrfds = 0;
    if (c->hook)
        c->hook->close(c, c->hook_state, c->err);
    if (c->ops.on_close)
        c->ops.on_close(c, c->err);
    close(c->fd);
    free(c->rbuf);
    free(c);
}

/* The state machine: see the comment at the top of this file. */
static void drive(mc__conn_t *c)
{
    switch (c->state) {
    case CS_CONNECTING:
        return;
    case CS_OPEN:
        if (c->shutdown) {
            /* Take nothing more in; close once the queue is out. */
            cancel_io(c, &c->rio);
            if (!c->wq_head && !mc__io_active(&c->wio) && !c->draining) {
                c->state = CS_CLOSING;
                c->err = 0;
            }
        } else if (!mc__io_active(&c->rio)) {
            deliver_frames(c);
            if (c->state == CS_OPEN && !c->shutdown)
                arm_recv(c);
        }
        if (c->state == CS_OPEN && may_send(c) && !mc__io_active(&c->wio))
            arm_send(c);
        if (c->state == CS_OPEN)
            return;
        /* A frame, its owner or a failure closed it: carry on as CLOSING. */
        /* fall through */
    case CS_CLOSING:
        cancel_io(c, &c->cio);
        cancel_io(c, &c->rio);
        cancel_io(c, &c->wio);
        if (c->draining || c->kicked)
            return; /* drained() or kicked() comes back here */
        conn_finish(c);
        return;
    }
}

static mc__conn_t *conn_new(mc_loop_t *l, int fd, const mc__conn_ops_t *ops, void *data)
{
    mc__conn_t *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->loop = l;
    c->fd = fd;
    c->ops = *ops;
    c->data = data;
    c->cio.data = c->rio.data = c->wio.data = c;
    c->max_queued = MC__CONN_MAX_QUEUED;
    c->max_body = MC__PROTO_MAX_BODY;
    c->send_timeout_ms = MC__CONN_SEND_TIMEOUT_MS;
    return c;
}

/* TCP_NODELAY for TCP sockets: frames are whole when we send them. */
static void set_nodelay(int fd, int family)
{
    int one = 1;
    if (family == AF_INET || family == AF_INET6)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int mc__conn_start(mc_loop_t *l, int fd, const char *peer, const mc__conn_ops_t *ops, void *data,
                   mc__conn_t **out)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    mc__conn_t *c = conn_new(l, fd, ops, data);
    if (!c) {
        close(fd);
        return -ENOMEM;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && !(fl & O_NONBLOCK))
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
        set_nodelay(fd, ss.ss_family);
        c->is_unix = ss.ss_family == AF_UNIX;
    }
    if (peer)
        snprintf(c->peer, sizeof(c->peer), "%s", peer);
    else
        mc__addr_peer_name(fd, c->peer, sizeof(c->peer));
    c->state = CS_OPEN;
    kick(c);
    *out = c;
    return 0;
}

int mc__conn_connect(mc_loop_t *l, const mc__addr_t *a, uint64_t timeout_ms,
                     const mc__conn_ops_t *ops, void *data, mc__conn_t **out)
{
    int family = a->ss.ss_family;
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    set_nodelay(fd, family);
    mc__conn_t *c = conn_new(l, fd, ops, data);
    if (!c) {
        close(fd);
        return -ENOMEM;
    }
    mc__addr_format((const struct sockaddr *)&a->ss, a->len, c->peer, sizeof(c->peer));
    c->is_unix = family == AF_UNIX;
    c->state = CS_CONNECTING;
    int rc = mc__io_connect(l, &c->cio, fd, (const struct sockaddr *)&a->ss, a->len,
                            timeout_ms ? timeout_ms : MC__CONN_CONNECT_TIMEOUT_MS, on_connected);
    if (rc < 0) {
        close(fd);
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* Checks that a frame of body bytes may be queued now. */
static int may_queue(const mc__conn_t *c, size_t body)
{
    if (c->state == CS_CLOSING)
        return -EPIPE;
    if (body > MC__PROTO_MAX_BODY)
        return -EMSGSIZE;
    /* An empty queue takes any frame, so that a small bound cannot wedge. */
    if (c->wq_head && c->wq_bytes + MC__PROTO_HDR_SIZE + body > c->max_queued)
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
    c->wq_bytes += w->total;
    if (c->state == CS_OPEN)
        kick(c);
}

int mc__conn_send_ex(mc__conn_t *c, const mc__hdr_t *h, const void *body, size_t len,
                     unsigned flags, int pass_fd)
{
    int rc = may_queue(c, len);
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
    int rc = may_queue(c, len);
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

void mc__conn_close(mc__conn_t *c)
{
    if (c->state == CS_CLOSING)
        return;
    c->state = CS_CLOSING;
    c->err = 0;
    mc__log(MC__LOG_DEBUG, "closing %s: closed locally", c->peer);
    kick(c);
}

void mc__conn_abort(mc__conn_t *c, int err)
{
    if (c->state == CS_CLOSING)
        return;
    c->state = CS_CLOSING;
    c->err = err;
    mc__log(MC__LOG_DEBUG, "closing %s: %s", c->peer, strerror(-err));
    kick(c);
}

void mc__conn_shutdown(mc__conn_t *c)
{
    if (c->state == CS_CLOSING || c->shutdown)
        return;
    if (c->state == CS_CONNECTING) {
        mc__conn_close(c);
        return;
    }
    c->shutdown = 1;
    mc__log(MC__LOG_DEBUG, "closing %s once its replies are sent", c->peer);
    kick(c);
}

void mc__conn_hold(mc__conn_t *c, int hold)
{
    c->held = hold != 0;
    if (!c->held && c->state == CS_OPEN)
        kick(c);
}

int mc__conn_take_fd(mc__conn_t *c)
{
    if (!c->nrfds)
        return -ENOENT;
    int fd = c->rfds[0];
    memmove(c->rfds, c->rfds + 1, (size_t)(c->nrfds - 1) * sizeof(int));
    c->nrfds--;
    return fd;
}

int mc__conn_is_unix(const mc__conn_t *c)
{
    return c->is_unix;
}

int mc__conn_peer_uid(const mc__conn_t *c, uid_t *uid)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (!c->is_unix)
        return -ENOTSOCK;
    if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -errno;
    *uid = cred.uid;
    return 0;
}

void mc__conn_set_limits(mc__conn_t *c, size_t max_queued, uint64_t send_timeout_ms,
                         uint64_t idle_timeout_ms)
{
    c->max_queued = max_queued ? max_queued : MC__CONN_MAX_QUEUED;
    c->send_timeout_ms = send_timeout_ms ? send_timeout_ms : MC__CONN_SEND_TIMEOUT_MS;
    c->idle_timeout_ms = idle_timeout_ms;
}

void mc__conn_set_max_body(mc__conn_t *c, size_t max_body)
{
    c->max_body =
        max_body && max_body < MC__PROTO_MAX_BODY ? (uint32_t)max_body : MC__PROTO_MAX_BODY;
    if (c->state == CS_OPEN)
        kick(c); /* a buffered frame is checked against the new bound */
}

const char *mc__conn_peer(const mc__conn_t *c)
{
    return c->peer;
}

void *mc__conn_data(const mc__conn_t *c)
{
    return c->data;
}

void mc__conn_set_data(mc__conn_t *c, void *data)
{
    c->data = data;
}

mc_loop_t *mc__conn_loop(const mc__conn_t *c)
{
    return c->loop;
}

size_t mc__conn_queued(const mc__conn_t *c)
{
    return c->wq_bytes;
}

int mc__conn_is_open(const mc__conn_t *c)
{
    return c->state == CS_OPEN;
}

int mc__conn_is_closing(const mc__conn_t *c)
{
    return c->state == CS_CLOSING;
}

void mc__conn_set_hook(mc__conn_t *c, const mc__conn_hook_t *hook, void *state)
{
    c->hook = hook;
    c->hook_state = state;
}

void *mc__conn_hook_state(const mc__conn_t *c, const mc__conn_hook_t *hook)
{
    return c->hook == hook ? c->hook_state : NULL;
}
