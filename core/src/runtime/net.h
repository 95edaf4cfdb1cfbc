/*
 * net.h - framed connections on the io_uring loop.
 *
 * An mc__conn_t carries wire-protocol frames (proto.h) over a stream socket,
 * TCP or Unix. It reads into a buffer that grows up to one whole frame,
 * splits the stream into frames with mc__hdr_decode() and hands each to its
 * on_frame callback (a large response's body may instead be received
 * straight into a buffer its call named: mc__conn_hook_t.body_dst, and a
 * large request's body into one its owner named: mc__conn_ops_t.body_dst); it
 * queues outgoing frames in order and sends them with gathered sendmsg()
 * calls. A peer that sends a malformed, oversized or unknown-operation
 * header is cut off with a logged reason; other connections carry on.
 * Addresses are in addr.h, listeners in listen.h.
 *
 * Lifetime: the net layer allocates a conn and frees it right after its
 * on_close callback, which runs exactly once, always from the loop (never
 * inside an mc__conn_* call), after every send's done callback. Everything
 * here runs on the conn's loop thread only.
 */
#ifndef MC_NET_H
#define MC_NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "mooncake/loop.h"
#include "runtime/addr.h"
#include "wire/proto.h"

/* Defaults; see mc__conn_set_limits(). */
#define MC__CONN_MAX_QUEUED (64U << 20)  /* bytes queued for sending */
#define MC__CONN_SEND_TIMEOUT_MS 30000   /* a send that makes no progress */
#define MC__CONN_CONNECT_TIMEOUT_MS 5000 /* when mc__conn_connect() gets 0 */
#define MC__CONN_MAX_FDS 4               /* received descriptors a conn keeps */
#define MC__CONN_SINK_MIN (32U << 10)    /* the smallest body received in place */
#define MC__CONN_SINK_HEAD 24            /* a request's head read before its body_dst */

/* Flags of mc__conn_send_ex(). */
#define MC__SEND_EARLY 0x1 /* goes out while the conn is held (mc__conn_hold()) */

typedef struct mc__conn mc__conn_t;

/* What a connection tells its owner. Copied by the conn. */
typedef struct mc__conn_ops {
    /*
     * A whole frame arrived. body[0..len) lies in the conn's read buffer and
     * is valid until on_frame returns. Responses (MC__F_RESPONSE) go to the
     * rpc layer instead when one is attached (rpc.h).
     */
    void (*on_frame)(mc__conn_t *c, const mc__hdr_t *h, const char *body, size_t len);
    /*
     * Called once with err = 0 when the conn is closed by mc__conn_close(),
     * or -errno: -ECONNRESET when the peer closed or reset the stream,
     * -EPROTO / -EMSGSIZE / -EBADMSG when the peer broke the protocol,
     * -ETIMEDOUT when a connect, send or idle timeout fired, -ECONNREFUSED
     * and friends when a connect failed. The conn is freed when it returns.
     */
    void (*on_close)(mc__conn_t *c, int err);
    /* Optional: an mc__conn_connect() conn is connected. Not called for
     * accepted conns, which are open from the start. */
    void (*on_open)(mc__conn_t *c);
    /*
     * Optional, on a TCP conn: where the body of a request (not a response)
     * of MC__CONN_SINK_MIN bytes or more goes, instead of the read buffer.
     * Asked once the header and the body's first MC__CONN_SINK_HEAD bytes
     * (head) are buffered, and before the rest is: returns dst and sets
     * *skip (at most MC__CONN_SINK_HEAD): the body's bytes from *skip on
     * are received into dst[0..h->len - *skip), straight from the socket;
     * or returns NULL to have the frame buffered and go to on_frame as any
     * other (it may be asked again as more bytes arrive). The conn writes
     * into dst until on_placed runs or the conn closes (on_close): the
     * owner keeps it valid until then. Set both or neither.
     */
    char *(*body_dst)(mc__conn_t *c, const mc__hdr_t *h, const char *head, size_t *skip);
    /*
     * The body of request h is whole, in the buffer body_dst named; head
     * holds its first skip bytes (valid until on_placed returns). Takes
     * on_frame's place for that frame. A conn that closes before the body
     * is whole never calls it: dst then holds any part of the body.
     */
    void (*on_placed)(mc__conn_t *c, const mc__hdr_t *h, const char *head, size_t skip);
} mc__conn_ops_t;

/*
 * A send's completion for mc__conn_send_iov(): status 0 once the kernel has
 * taken every byte (the caller's buffers are free again), or -errno when the
 * conn closed first (-ECANCELED after mc__conn_close()).
 */
typedef void (*mc__send_cb)(void *arg, int status);

/*
 * mc__conn_start() wraps a connected stream socket fd (ownership passes to
 * the conn, which closes it) in an open conn. peer names it in logs (copied;
 * NULL: the conn asks getpeername()). TCP sockets get TCP_NODELAY. Returns 0
 * and sets *out, or -errno (-ENOMEM); fd is closed then too.
 */
int mc__conn_start(mc_loop_t *l, int fd, const char *peer, const mc__conn_ops_t *ops, void *data,
                   mc__conn_t **out);

/*
 * mc__conn_connect() creates a socket, sets *out to a conn in the
 * connecting state and connects it to a. The result always arrives through
 * the callbacks, never inside this call: on_open when connected, or
 * on_close(-ECONNREFUSED, -ENOENT, -ETIMEDOUT after timeout_ms, ...).
 * timeout_ms 0 means MC__CONN_CONNECT_TIMEOUT_MS. Frames sent before the
 * connection is up are queued. Returns 0, or -errno when no socket could be
 * made (-EMFILE, -ENOMEM, -EAFNOSUPPORT); no callback runs then.
 */
int mc__conn_connect(mc_loop_t *l, const mc__addr_t *a, uint64_t timeout_ms,
                     const mc__conn_ops_t *ops, void *data, mc__conn_t **out);

/*
 * mc__conn_send() queues the frame h (magic, version and len are filled in)
 * with a copy of body[0..len). Frames go out in the order they were queued.
 * Returns 0, -EMSGSIZE for a body over MC__PROTO_MAX_BODY, -ENOBUFS when
 * the queue would pass its bound (mc__conn_set_limits(); the peer reads
 * slower than frames come: the rpc layer waits for room, see
 * mc__conn_hook_t.room), -EPIPE when the conn is closing, -ENOMEM.
 */
int mc__conn_send(mc__conn_t *c, const mc__hdr_t *h, const void *body, size_t len);

/*
 * mc__conn_check_frame() says whether a frame of body bytes in niov pieces
 * could ever be sent: 0, -EMSGSIZE for a body over MC__PROTO_MAX_BODY,
 * -EINVAL for a count of pieces mc__conn_send_iov() does not take. For
 * callers that hold a frame back before they send it (rpc.c).
 */
int mc__conn_check_frame(size_t body, int niov);

/*
 * mc__conn_send_ex() is mc__conn_send() with flags (MC__SEND_EARLY: the
 * frame goes out while the conn is held, ahead of the held frames and after
 * earlier early ones, and is queued past the bound, held or not: the held
 * frames it goes ahead of could not make room for it) and, when pass_fd >= 0, a descriptor passed
 * with the frame's first byte (SCM_RIGHTS; the conn sends a duplicate, the caller keeps pass_fd).
 * Returns as mc__conn_send(), and -EOPNOTSUPP for a descriptor on a conn that is not a Unix socket,
 * -EMFILE when it cannot be duplicated.
 */
int mc__conn_send_ex(mc__conn_t *c, const mc__hdr_t *h, const void *body, size_t len,
                     unsigned flags, int pass_fd);

/*
 * mc__conn_send_iov() queues the frame h with a body gathered from
 * iov[0..n) without copying it: the buffers (not the iovec array, which is
 * copied) must stay untouched until done(arg, status), which is called
 * exactly once, from the loop, before the conn's on_close. done may be NULL.
 * Returns 0 or the errors of mc__conn_send() (-EINVAL for n < 0 or
 * n > 1000); done is then never called.
 */
int mc__conn_send_iov(mc__conn_t *c, const mc__hdr_t *h, const struct iovec *iov, int n,
                      mc__send_cb done, void *arg);

/*
 * mc__conn_close() closes the conn: queued and in-flight frames are dropped
 * (their done callbacks get -ECANCELED), pending requests are cancelled, and
 * on_close(c, 0) follows from the loop. No frame is delivered after this
 * call. Idempotent; c stays valid until on_close returns.
 */
void mc__conn_close(mc__conn_t *c);

/*
 * mc__conn_abort() is mc__conn_close() with a reason: on_close (and the rpc
 * hook, which fails the pending calls with it) gets err (a negative errno)
 * instead of 0. Idempotent: a conn already closing keeps its first reason.
 */
void mc__conn_abort(mc__conn_t *c, int err);

/*
 * mc__conn_shutdown() closes the conn once the frames queued so far are
 * sent (bounded by the send timeout): no frame is delivered after this
 * call, and on_close(c, 0) follows. This is how a server answers a request
 * and then hangs up. A conn still connecting is closed at once.
 */
void mc__conn_shutdown(mc__conn_t *c);

/*
 * mc__conn_hold() holds back (hold 1) or releases (hold 0) the frames
 * queued without MC__SEND_EARLY: while held they stay queued, in order, and
 * only early frames go out. A session handshake holds a new conn before it
 * opens (right after mc__conn_connect()), runs with early frames, and
 * releases the conn once it succeeds. Holding a conn that has already sent
 * ordinary frames is not supported.
 */
void mc__conn_hold(mc__conn_t *c, int hold);

/*
 * mc__conn_take_fd() returns the oldest descriptor received on a Unix conn
 * (SCM_RIGHTS, close-on-exec) and not yet taken; the caller owns it. A
 * descriptor arrives no later than the frame it was sent with. Returns
 * -ENOENT when none is waiting. A conn keeps at most MC__CONN_MAX_FDS; a
 * peer that sends more is cut off, and those never taken are closed with
 * the conn.
 */
int mc__conn_take_fd(mc__conn_t *c);

/* mc__conn_is_unix() returns 1 for a Unix-domain conn. */
int mc__conn_is_unix(const mc__conn_t *c);

/*
 * mc__conn_peer_cred() stores the user and process ids of a Unix conn's
 * peer, as the kernel recorded them at connect (SO_PEERCRED), in *uid and
 * *pid (either may be NULL). Returns 0, or -ENOTSOCK for a TCP conn, or
 * -errno.
 */
int mc__conn_peer_cred(const mc__conn_t *c, uid_t *uid, pid_t *pid);

/*
 * mc__conn_set_limits() changes the conn's bounds: max_queued bytes queued
 * for sending (0: MC__CONN_MAX_QUEUED); send_timeout_ms after which a send
 * that makes no progress closes the conn with -ETIMEDOUT
 * (0: MC__CONN_SEND_TIMEOUT_MS); idle_timeout_ms after which a conn that
 * receives nothing is closed with -ETIMEDOUT (0: never, the default). Takes
 * effect for the next send or receive.
 */
void mc__conn_set_limits(mc__conn_t *c, size_t max_queued, uint64_t send_timeout_ms,
                         uint64_t idle_timeout_ms);

/*
 * mc__conn_set_backpressure() makes the conn stop taking frames in while
 * pause_at bytes or more wait to be sent (0: never, the default): frames
 * received stay undelivered and nothing more is read until the peer has
 * taken enough of the queue. For a server whose every request queues a
 * reply: a peer with more requests in flight than the bound waits for its
 * answers instead of seeing the conn closed (-ENOBUFS). A peer must read
 * its answers while it sends, or the two wait for each other.
 */
void mc__conn_set_backpressure(mc__conn_t *c, size_t pause_at);

/* Bytes queued for sending across a set of conns (a server's), and the
 * bound past which they take no more frames in: mc__conn_set_budget(). */
typedef struct mc__send_budget {
    size_t queued; /* now, across the conns that count in it */
    size_t limit;
    uint64_t pauses; /* times a conn stopped taking frames in for it */
} mc__send_budget_t;

/*
 * mc__conn_set_budget() counts what c queues for sending in b (NULL: none;
 * set it before c queues anything, and keep b until c is closed). While
 * b->queued is at b->limit or past it, a conn that has anything queued
 * takes no frame in (as with backpressure) until its queue is empty: peers
 * that do not read their answers hold about the limit between them, plus
 * one answer each, however many they are, while a conn with nothing queued
 * always goes on (so that none waits for another's peer).
 */
void mc__conn_set_budget(mc__conn_t *c, mc__send_budget_t *b);

/*
 * mc__conn_set_max_body() bounds the bodies the conn accepts to max_body
 * bytes (0, or more than MC__PROTO_MAX_BODY: MC__PROTO_MAX_BODY, the
 * default). A header announcing more closes the conn with -EMSGSIZE before
 * any of its body is read, and the read buffer never grows past one frame
 * of max_body. A server keeps a conn small this way until its peer has been
 * through the session handshake (server.c). Takes effect for the next
 * frame, including one already buffered but not yet delivered.
 */
void mc__conn_set_max_body(mc__conn_t *c, size_t max_body);

/* mc__conn_peer() returns the peer's address for logs; valid as long as c. */
const char *mc__conn_peer(const mc__conn_t *c);

/* mc__conn_data() returns the caller's pointer given at creation or by
 * mc__conn_set_data(). */
void *mc__conn_data(const mc__conn_t *c);
void mc__conn_set_data(mc__conn_t *c, void *data);

/* mc__conn_loop() returns the loop the conn runs on. */
mc_loop_t *mc__conn_loop(const mc__conn_t *c);

/* mc__conn_queued() returns the bytes queued and not yet sent. */
size_t mc__conn_queued(const mc__conn_t *c);

/* mc__conn_is_open() returns 1 when connected and not closing. */
int mc__conn_is_open(const mc__conn_t *c);

/* mc__conn_is_closing() returns 1 once the conn is closing (on_close is due). */
int mc__conn_is_closing(const mc__conn_t *c);

/*
 * The rpc layer's hook into a conn (rpc.c attaches one; nothing else
 * should). frame() sees every frame with MC__F_RESPONSE before on_frame and
 * returns 1 if it took it; close() runs just before on_close, after all
 * done callbacks, with on_close's err.
 *
 * body_dst() (may be NULL) is asked, on a TCP conn, for a response whose
 * header has arrived and whose body (h->len bytes, at least
 * MC__CONN_SINK_MIN) has not: it returns a buffer of at least h->len bytes
 * to receive the body into, straight from the socket, or NULL for the read
 * buffer. The conn then owns that buffer until it hands it to frame() as
 * body (once every byte is in) or, if it closes first, until close() runs:
 * the kernel may write into it until then, whatever timers fire.
 *
 * room() (may be NULL) runs, from the loop, when frames have left the send
 * queue (the kernel took them) and the conn is not closing: sends that
 * found the queue full (-ENOBUFS) may find room now.
 */
typedef struct mc__conn_hook {
    int (*frame)(mc__conn_t *c, void *state, const mc__hdr_t *h, const char *body, size_t len);
    void (*close)(mc__conn_t *c, void *state, int err);
    char *(*body_dst)(mc__conn_t *c, void *state, const mc__hdr_t *h);
    void (*room)(mc__conn_t *c, void *state);
} mc__conn_hook_t;

/* mc__conn_set_hook() attaches hook (static storage) with its state. */
void mc__conn_set_hook(mc__conn_t *c, const mc__conn_hook_t *hook, void *state);

/* mc__conn_hook_state() returns the hook's state if hook is attached, or NULL. */
void *mc__conn_hook_state(const mc__conn_t *c, const mc__conn_hook_t *hook);

#endif /* MC_NET_H */
