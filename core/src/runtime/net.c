/*
 * net.c - framed connections (see net.h): the state machine, connecting,
 * the receive side (framing, the read buffer, delivery), closing, and the
 * accessors. The send queue is in net_send.c; net_i.h is what they share.
 *
 * A conn is a state machine driven from one place, mc__conn_drive():
 *
 *   CONNECTING --connected--> OPEN --error, EOF, bad frame, close--> CLOSING --> freed
 *        \___________________connect failed, close_______________/
 *
 * Completions (connect, recv, send) update the conn and call
 * mc__conn_drive(); calls from the owner (send, close) update it and
 * schedule it with mc_loop_defer() (mc__conn_kick()), so that no callback
 * ever runs inside an mc__conn_* call. In OPEN, it delivers the whole frames
 * buffered, keeps one recv and one sendmsg in flight, and grows the read
 * buffer to fit the next frame; or, for a response whose body the rpc hook
 * wants in a buffer of its own (hook body_dst), or a request whose body its
 * owner does (ops body_dst: a node's WRITE, into its segment), copies there
 * what the read buffer holds of it and receives the rest straight into it,
 * asking the socket for no byte past the body (c->sink), then delivers it
 * from there.
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

#include "runtime/forkfd.h"
#include "runtime/log.h"
#include "runtime/loop_i.h"
#include "runtime/net.h"
#include "runtime/net_i.h"

#define RBUF_INIT (64U << 10)    /* read buffer of a new conn */
#define RBUF_MIN_FREE (8U << 10) /* compact rather than recv into less */
#define RBUF_SHRINK_ROUNDS 64    /* small-frame rounds before a big buffer shrinks */

static void kicked(void *arg)
{
    mc__conn_t *c = arg;
    c->kicked = 0;
    mc__conn_drive(c);
}

/* Runs mc__conn_drive() after the current callback; used by calls from the owner. */
void mc__conn_kick(mc__conn_t *c)
{
    if (c->kicked)
        return;
    c->kicked = 1;
    mc_loop_defer(c->loop, &c->kick, kicked, c);
}

/* Moves c to CLOSING with err and logs why at level. */
void mc__conn_fail(mc__conn_t *c, int err, int level, const char *fmt, ...)
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
        mc__conn_drive(c);
        return;
    }
    if (res < 0) {
        mc__conn_fail(c, res, MC__LOG_DEBUG, "connect failed: %s", strerror(-res));
    } else {
        c->state = CS_OPEN;
        if (c->ops.on_open)
            c->ops.on_open(c);
    }
    mc__conn_drive(c);
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
        mc__conn_fail(c, -EPROTO, MC__LOG_WARN, "%d unexpected file descriptors", dropped);
}

static void on_recv(mc__io_t *io, int res)
{
    mc__conn_t *c = io->data;

    keep_fds(c);
    if (c->state != CS_OPEN) /* closed by its owner: the bytes are dropped */
        ;
    else if (res > 0 && c->sink)
        c->sink_got += (size_t)res;
    else if (res > 0)
        c->rlen += (size_t)res;
    else if (res == 0)
        mc__conn_fail(c, -ECONNRESET, MC__LOG_DEBUG, "peer closed the connection");
    else if (res == -ETIMEDOUT)
        mc__conn_fail(c, res, MC__LOG_WARN, "idle for %llu ms",
                      (unsigned long long)c->idle_timeout_ms);
    else if (res != -EINTR && res != -EAGAIN)
        mc__conn_fail(c, res, MC__LOG_INFO, "receive failed: %s", strerror(-res));
    mc__conn_drive(c);
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
        mc__conn_fail(c, rc, MC__LOG_WARN, "oversized frame (%s, body %u bytes > max %u%s)",
                      mc__op_name(h->op), h->len, c->max_body,
                      c->max_body < MC__PROTO_MAX_BODY ? " on this connection so far" : "");
        break;
    case -EPROTO:
        mc__conn_fail(c, rc, MC__LOG_WARN,
                      "malformed frame header (bad magic 0x%08x or version %u)", h->magic,
                      h->version);
        break;
    case -EBADMSG:
        mc__conn_fail(c, rc, MC__LOG_WARN, "frame with an unknown operation %u", h->op);
        break;
    default:
        mc__conn_fail(c, rc, MC__LOG_WARN, "malformed frame header (%s)", strerror(-rc));
        break;
    }
}

/* Where the body of frame h, whose first avail bytes are buffered at head,
 * goes in place: the rpc hook's buffer for a response, the owner's for a
 * request (from byte *skip on, the rest kept in c->sink_head); NULL: the
 * read buffer. */
static char *sink_dst(mc__conn_t *c, const mc__hdr_t *h, const char *head, size_t avail,
                      size_t *skip)
{
    *skip = 0;
    if (c->is_unix || h->len < MC__CONN_SINK_MIN)
        return NULL;
    if (h->flags & MC__F_RESPONSE)
        return c->hook && c->hook->body_dst ? c->hook->body_dst(c, c->hook_state, h) : NULL;
    if (!c->ops.body_dst || avail < MC__CONN_SINK_HEAD)
        return NULL;
    char *dst = c->ops.body_dst(c, h, head, skip);
    if (dst && *skip > MC__CONN_SINK_HEAD)
        mc__conn_fail(c, -EINVAL, MC__LOG_ERROR, "a body placed past its head (%zu bytes)", *skip);
    if (!dst || c->state != CS_OPEN)
        return NULL;
    memcpy(c->sink_head, head, *skip);
    return dst;
}

/*
 * Whether the body of frame h, of which avail bytes are buffered, goes
 * straight into a buffer named for it (sink_dst()): then the buffered part
 * is copied there, taken out of the read buffer, and c->sink set; the
 * following receives fill the rest (arm_recv()).
 */
static int sink_start(mc__conn_t *c, const mc__hdr_t *h, size_t avail)
{
    const char *head = c->rbuf + c->roff + MC__PROTO_HDR_SIZE;
    size_t skip;
    char *dst = sink_dst(c, h, head, avail, &skip);
    if (!dst)
        return 0;
    c->sink_got = avail;
    c->sink_skip = skip;
    memcpy(dst, head + skip, avail - skip);
    c->sink = dst;
    c->sink_hdr = *h;
    c->roff += MC__PROTO_HDR_SIZE + avail;
    return 1;
}

/* Delivers the body received in place once it is whole: 1 if it was (or
 * none is being received), 0 while bytes are missing. */
static int sink_deliver(mc__conn_t *c)
{
    if (!c->sink)
        return 1;
    if (c->sink_got < c->sink_hdr.len)
        return 0;
    char *body = c->sink;
    c->sink = NULL;
    if (c->sink_hdr.flags & MC__F_RESPONSE)
        deliver(c, &c->sink_hdr, body, c->sink_hdr.len);
    else
        c->ops.on_placed(c, &c->sink_hdr, c->sink_head, c->sink_skip);
    return 1;
}

/* Delivers every whole frame in the read buffer, while the conn stays open. */
static void deliver_frames(mc__conn_t *c)
{
    int was_paused = c->paused;
    c->paused = 0;
    while (c->state == CS_OPEN && !c->shutdown) {
        if (c->pause_at && c->wq_bytes >= c->pause_at) {
            c->paused = 1; /* on_sent() drives it again as the queue drains */
            break;
        }
        if (c->budget && c->wq_bytes && c->budget->queued >= c->budget->limit) {
            c->paused = 1; /* the same, until the queue is empty */
            c->budget->pauses += !was_paused;
            break;
        }
        if (!sink_deliver(c))
            break;
        if (c->state != CS_OPEN || c->shutdown)
            break;
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
        if (avail < need) {
            if (sink_start(c, &h, avail - MC__PROTO_HDR_SIZE))
                continue;
            break;
        }
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
    int rc;
    if (c->sink) /* the rest of a body received in place, and nothing past it */
        rc = mc__io_recv(c->loop, &c->rio, c->fd, c->sink + (c->sink_got - c->sink_skip),
                         c->sink_hdr.len - c->sink_got, c->idle_timeout_ms, on_recv);
    else if ((rc = rbuf_reserve(c)) < 0)
        ;
    else if (c->is_unix)
        rc = mc__io_recvmsg(c->loop, &c->rio, c->fd, c->rbuf + c->rlen, c->rcap - c->rlen,
                            c->in_fds, &c->in_nfds, MC__CONN_MAX_FDS, c->idle_timeout_ms, on_recv);
    else
        rc = mc__io_recv(c->loop, &c->rio, c->fd, c->rbuf + c->rlen, c->rcap - c->rlen,
                         c->idle_timeout_ms, on_recv);
    if (rc < 0)
        mc__conn_fail(c, rc, MC__LOG_WARN, "cannot receive: %s", strerror(-rc));
}

/* A cancelled request's buffers are free again. */
static void drained(void *arg)
{
    mc__conn_t *c = arg;
    c->draining--;
    mc__conn_drive(c);
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

    mc__conn_fail_sends(c, err);
    for (int i = 0; i < c->nrfds; i++)
        close(c->rfds[i]);
    c->nrfds = 0;
    if (c->hook)
        c->hook->close(c, c->hook_state, c->err);
    if (c->ops.on_close)
        c->ops.on_close(c, c->err);
    mc__fd_disown(c->fd);
    close(c->fd);
    free(c->rbuf);
    free(c);
}

/* The state machine: see the comment at the top of this file. */
void mc__conn_drive(mc__conn_t *c)
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
            if (c->state == CS_OPEN && !c->shutdown && !c->paused)
                arm_recv(c);
        }
        if (c->state == CS_OPEN)
            mc__conn_send_next(c);
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
    mc__fd_own(fd); /* a forked child closes it (forkfd.h) */
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
    mc__conn_kick(c);
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
        mc__fd_disown(fd);
        close(fd);
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void mc__conn_close(mc__conn_t *c)
{
    if (c->state == CS_CLOSING)
        return;
    c->state = CS_CLOSING;
    c->err = 0;
    mc__log(MC__LOG_DEBUG, "closing %s: closed locally", c->peer);
    mc__conn_kick(c);
}

void mc__conn_abort(mc__conn_t *c, int err)
{
    if (c->state == CS_CLOSING)
        return;
    c->state = CS_CLOSING;
    c->err = err;
    mc__log(MC__LOG_DEBUG, "closing %s: %s", c->peer, strerror(-err));
    mc__conn_kick(c);
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
    mc__conn_kick(c);
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

int mc__conn_peer_cred(const mc__conn_t *c, uid_t *uid, pid_t *pid)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (!c->is_unix)
        return -ENOTSOCK;
    if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -errno;
    if (uid)
        *uid = cred.uid;
    if (pid)
        *pid = cred.pid;
    return 0;
}

void mc__conn_set_limits(mc__conn_t *c, size_t max_queued, uint64_t send_timeout_ms,
                         uint64_t idle_timeout_ms)
{
    c->max_queued = max_queued ? max_queued : MC__CONN_MAX_QUEUED;
    c->send_timeout_ms = send_timeout_ms ? send_timeout_ms : MC__CONN_SEND_TIMEOUT_MS;
    c->idle_timeout_ms = idle_timeout_ms;
}

void mc__conn_set_backpressure(mc__conn_t *c, size_t pause_at)
{
    c->pause_at = pause_at;
}

void mc__conn_set_budget(mc__conn_t *c, mc__send_budget_t *b)
{
    c->budget = b;
}

void mc__conn_set_max_body(mc__conn_t *c, size_t max_body)
{
    c->max_body =
        max_body && max_body < MC__PROTO_MAX_BODY ? (uint32_t)max_body : MC__PROTO_MAX_BODY;
    if (c->state == CS_OPEN)
        mc__conn_kick(c); /* a buffered frame is checked against the new bound */
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
