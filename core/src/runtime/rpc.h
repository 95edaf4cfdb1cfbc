/*
 * rpc.h - request/response calls over a framed connection (net.h).
 *
 * A call sends a request frame with a fresh id and waits, bounded by its
 * timeout, for the response frame (MC__F_RESPONSE) that echoes the id. The
 * caller's callback runs exactly once, always from the loop, never inside
 * the call that started it:
 *
 *   status >= 0 or -errno   the response arrived: status is the header's,
 *                           body[0..len) its body (valid during the callback)
 *   -ETIMEDOUT              no response within timeout_ms
 *   the conn's close reason the conn closed first (-ECONNRESET when the peer
 *                           went away, -ETIMEDOUT, -EPROTO, ...), or
 *                           -ECANCELED after mc__conn_close(); all pending
 *                           calls of a conn fail together
 *
 * A conn's calls keep to a window of bytes in flight (MC__RPC_WINDOW,
 * mc__rpc_set_window()): a call counts its request body and the answer it
 * may receive (mc__rpc_call_into()'s cap) from when it is sent until it
 * is answered, times out or its conn closes. A call that would pass the window, or whose frame
 * finds the conn's send queue full (its bound, net.h), waits rather than failing, and the calls
 * made after it wait behind it: frames go out in the order of the calls. Its timeout starts once it
 * is sent, so that it bounds the call's own wait for the network, not the calls' ahead of it: a
 * transfer of any size, in 4 MiB pieces, succeeds over a link that moves the window within the
 * timeout (a link shared by several conns: their windows). The wait before is bounded by the calls
 * ahead, each by its timeout, and by the conn's send timeout (a peer that takes nothing fails the
 * conn, and its calls).
 *
 * A response nobody waits for (a late one, after a timeout) is dropped with
 * a debug line. Server side, mc__rpc_reply() answers a request frame.
 *
 * mc__rpc_client_t keeps one conn to an address alive: it reconnects after
 * a loss with exponential backoff (100 ms doubling to 5 s), except that a
 * session that lasted a while and then ended (a server closing it as idle,
 * or restarting) is reconnected at once. Calls made while a connect attempt
 * is in flight are queued on it (bounded by their timeout, or, past the
 * window, unsent, by the connect's); calls made while
 * waiting out the backoff fail at once with -ENOTCONN. A client that makes
 * no call for MC__RPC_KEEPALIVE_MS sends a PING, so that a server's idle
 * timeout (server.h) never closes a connection in use: the master ties
 * writes in progress and open handles to the connection that made them.
 *
 * Everything here runs on the conn's loop thread only.
 */
#ifndef MC_RPC_H
#define MC_RPC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "runtime/net.h"

typedef void (*mc__rpc_cb)(void *arg, int status, const char *body, size_t len);

/*
 * mc__rpc_call() sends request op with a copy of body[0..len) on c and
 * calls cb(arg, ...) once as described above. timeout_ms must be > 0.
 * Returns 0, or -EINVAL (timeout_ms 0), -EPIPE (c is closing), -EMSGSIZE
 * and -ENOMEM; cb is then never called. A full send queue is waited out
 * (above), never -ENOBUFS.
 */
int mc__rpc_call(mc__conn_t *c, uint16_t op, const void *body, size_t len, uint64_t timeout_ms,
                 mc__rpc_cb cb, void *arg);

/*
 * mc__rpc_callv() is mc__rpc_call() with the body gathered from iov[0..n)
 * without a copy. The buffers must stay untouched until cb runs; cb is
 * therefore held back until the conn has sent them (or failed), so a
 * timeout may be reported later than timeout_ms, bounded by the conn's send
 * timeout. Returns as mc__rpc_call().
 */
int mc__rpc_callv(mc__conn_t *c, uint16_t op, const struct iovec *iov, int n, uint64_t timeout_ms,
                  mc__rpc_cb cb, void *arg);

/*
 * mc__rpc_call_into() is mc__rpc_call() for a response whose body may be
 * large: on a TCP conn, a successful response (status >= 0) of
 * MC__CONN_SINK_MIN to cap bytes is received straight into dst, with no
 * copy through the conn's read buffer, and cb gets body == dst; any other
 * response arrives as for mc__rpc_call() (body in the read buffer). dst
 * must stay valid until cb runs. A timeout that fires while the body is
 * being received into dst closes the conn (the kernel may still write into
 * dst), and cb gets -ETIMEDOUT once the conn has let go of dst; its other
 * pending calls fail with it. Returns as mc__rpc_call().
 */
int mc__rpc_call_into(mc__conn_t *c, uint16_t op, const void *body, size_t len, char *dst,
                      size_t cap, uint64_t timeout_ms, mc__rpc_cb cb, void *arg);

/*
 * mc__rpc_call_early() is mc__rpc_call() with a frame that goes out while
 * the conn is held (MC__SEND_EARLY, net.h): the calls of a session
 * handshake. Returns as mc__rpc_call().
 */
int mc__rpc_call_early(mc__conn_t *c, uint16_t op, const void *body, size_t len,
                       uint64_t timeout_ms, mc__rpc_cb cb, void *arg);

/* Bytes a conn's calls keep in flight (see the top): eight READ or WRITE
 * pieces of MC__PROTO_CHUNK (4 MiB) with their requests' own bytes (64 KiB
 * spare), 0.3 s of a 1 Gbit/s link, 3 ms of 100 Gbit/s. */
#define MC__RPC_WINDOW ((32U << 20) + (64U << 10))

/* mc__rpc_set_window() bounds c's calls to bytes in flight (0:
 * MC__RPC_WINDOW), from the next call on. A call larger than the window
 * goes alone. */
void mc__rpc_set_window(mc__conn_t *c, size_t bytes);

/* mc__rpc_pending() returns the number of c's calls awaiting a response,
 * those waiting to be sent included. */
size_t mc__rpc_pending(const mc__conn_t *c);

/*
 * mc__rpc_reply() answers the request req received on c with status
 * (0..32767 or -errno) and a copy of body[0..len). Returns 0, -ERANGE for a
 * status that does not fit the header, or the errors of mc__conn_send().
 */
int mc__rpc_reply(mc__conn_t *c, const mc__hdr_t *req, int status, const void *body, size_t len);

/*
 * mc__rpc_reply_fd() is mc__rpc_reply() that also passes the descriptor fd
 * with the response (SCM_RIGHTS; a Unix conn only, else -EOPNOTSUPP). The
 * caller keeps fd: the conn sends a duplicate.
 */
int mc__rpc_reply_fd(mc__conn_t *c, const mc__hdr_t *req, int status, const void *body, size_t len,
                     int fd);

/*
 * mc__rpc_replyv() answers with a body gathered from iov[0..n) without a
 * copy; done(arg, status) follows as for mc__conn_send_iov(). Returns as
 * mc__rpc_reply(); done is then never called.
 */
int mc__rpc_replyv(mc__conn_t *c, const mc__hdr_t *req, int status, const struct iovec *iov, int n,
                   mc__send_cb done, void *arg);

/* ---- the reconnecting client ---- */

typedef struct mc__rpc_client mc__rpc_client_t;

/* What a client tells its owner; every member may be NULL. Copied. */
typedef struct mc__rpc_client_ops {
    /* Connected (again), and through the handshake if there is one. */
    void (*on_connect)(mc__rpc_client_t *cl, mc__conn_t *c);
    /* An open connection was lost with err; a reconnect is scheduled. */
    void (*on_disconnect)(mc__rpc_client_t *cl, int err);
    /* A request frame from the server (responses go to the calls). */
    void (*on_frame)(mc__rpc_client_t *cl, mc__conn_t *c, const mc__hdr_t *h, const char *body,
                     size_t len);
    /*
     * The session handshake (HELLO, AUTH), run on every new conn before any
     * call made through the client goes out: those are held back on the
     * conn (mc__conn_hold()) from its creation. It runs once the conn is
     * connected, makes its own calls with mc__rpc_call_early() on c, and
     * ends with mc__rpc_client_ready(cl, c, rc). A failure closes the conn:
     * the held calls fail with rc, and the client reconnects with backoff.
     */
    void (*handshake)(mc__rpc_client_t *cl, mc__conn_t *c);
    /*
     * Where to connect, asked before every connect attempt (a master found
     * through etcd moves): the owner answers, now or later, with
     * mc__rpc_client_resolved(). NULL: always the address given at creation.
     */
    void (*resolve)(mc__rpc_client_t *cl);
    void *resolve_arg; /* for ops.resolve: mc__rpc_client_resolve_arg() */
} mc__rpc_client_ops_t;

#define MC__RPC_BACKOFF_MIN_MS 100
#define MC__RPC_BACKOFF_MAX_MS 5000
#define MC__RPC_BACKOFF_RESOLVE_MS 500 /* the most with ops.resolve */
#define MC__RPC_KEEPALIVE_MS 15000     /* well inside a server's default idle timeout */
#define MC__RPC_RECONNECT_NOW_MS 1000  /* a session at least this long: reconnect at once */

/*
 * mc__rpc_client_new() creates a client for address a (copied) and starts
 * connecting; each attempt is bounded by connect_timeout_ms (0: the net
 * default). Returns 0 and sets *out, or -ENOMEM. Free with
 * mc__rpc_client_close().
 */
int mc__rpc_client_new(mc_loop_t *l, const mc__addr_t *a, uint64_t connect_timeout_ms,
                       const mc__rpc_client_ops_t *ops, void *data, mc__rpc_client_t **out);

/*
 * mc__rpc_client_call(), mc__rpc_client_call_into() and
 * mc__rpc_client_callv() are mc__rpc_call(), mc__rpc_call_into() and
 * mc__rpc_callv() on the client's current conn. They return -ENOTCONN while
 * the client waits to reconnect (cb is then never called).
 */
int mc__rpc_client_call(mc__rpc_client_t *cl, uint16_t op, const void *body, size_t len,
                        uint64_t timeout_ms, mc__rpc_cb cb, void *arg);
int mc__rpc_client_call_into(mc__rpc_client_t *cl, uint16_t op, const void *body, size_t len,
                             char *dst, size_t cap, uint64_t timeout_ms, mc__rpc_cb cb, void *arg);
int mc__rpc_client_callv(mc__rpc_client_t *cl, uint16_t op, const struct iovec *iov, int n,
                         uint64_t timeout_ms, mc__rpc_cb cb, void *arg);

/*
 * mc__rpc_client_ready() ends the handshake on c: rc 0 releases the held
 * calls (and on_connect runs); a negative rc closes c with rc as the reason
 * its held calls fail with (-EACCES for a refused secret). Ignored when c is
 * no longer the client's conn, or not in its handshake.
 */
void mc__rpc_client_ready(mc__rpc_client_t *cl, mc__conn_t *c, int rc);

/*
 * mc__rpc_client_resolved() answers ops.resolve: rc 0 connects to a (copied),
 * a negative rc (nothing found) retries later with backoff. Ignored when no
 * answer is awaited.
 */
void mc__rpc_client_resolved(mc__rpc_client_t *cl, const mc__addr_t *a, int rc);

/* mc__rpc_client_reconnect() drops the current conn (its calls fail with
 * -ECONNRESET) and connects again at once, resolving first: the server said
 * it is not the one to ask any more. */
void mc__rpc_client_reconnect(mc__rpc_client_t *cl);

/*
 * mc__rpc_client_set_keepalive() changes how long the client stays quiet
 * before it PINGs (0: never; MC__RPC_KEEPALIVE_MS by default). A PING that
 * fails is not an error of the client's: the conn's own close says so.
 */
void mc__rpc_client_set_keepalive(mc__rpc_client_t *cl, uint64_t ms);

/* mc__rpc_client_conn() returns the open conn (through its handshake), or
 * NULL while not connected. */
mc__conn_t *mc__rpc_client_conn(const mc__rpc_client_t *cl);

/* mc__rpc_client_handshake_failed() returns why the last handshake failed
 * (its -errno), while none succeeded since and the client's address is the
 * same; else 0. A handshake that fails for that same reason logs it at
 * debug level, not as a warning (mc__session_opts_t.seen): a server that
 * keeps refusing (another secret, another protocol version) is named once
 * per run of failures, not at every retry, and a new reason is named
 * too. */
int mc__rpc_client_handshake_failed(const mc__rpc_client_t *cl);

/* mc__rpc_client_resolve_arg() returns ops.resolve_arg. */
void *mc__rpc_client_resolve_arg(const mc__rpc_client_t *cl);

/* mc__rpc_client_data() returns the data given to mc__rpc_client_new(). */
void *mc__rpc_client_data(const mc__rpc_client_t *cl);

/*
 * mc__rpc_client_close() stops reconnecting and closes the conn; pending
 * calls then fail with -ECANCELED (from the loop, after this returns). No
 * client callback runs after this call; the client is freed by the loop.
 */
void mc__rpc_client_close(mc__rpc_client_t *cl);

#endif /* MC_RPC_H */
