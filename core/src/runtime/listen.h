/*
 * listen.h - listening sockets on the io_uring loop.
 *
 * A listener accepts stream connections (TCP or Unix) and hands each to
 * its owner as an open framed conn (net.h) with the listener's ops. Loop
 * thread only.
 */
#ifndef MC_LISTEN_H
#define MC_LISTEN_H

#include "mooncake/loop.h"
#include "runtime/addr.h"
#include "runtime/net.h"

typedef struct mc__listener mc__listener_t;

/*
 * Called for each accepted connection, already open, with the listener's
 * ops and its data set to the listener's arg; the callback may change the
 * data (mc__conn_set_data()) or close the conn.
 */
typedef void (*mc__accept_cb)(mc__listener_t *ls, mc__conn_t *c);

/*
 * mc__listen() binds a listening socket (TCP with SO_REUSEADDR; a Unix path
 * left over by a dead process is replaced, a live one is -EADDRINUSE) and
 * accepts on the loop, handing each connection to cb. Accept failures such
 * as -EMFILE are logged and retried after 100 ms. Returns 0 and sets *out,
 * or -errno from socket/bind/listen or -ENOMEM; cb is then never called.
 */
int mc__listen(mc_loop_t *l, const mc__addr_t *a, const mc__conn_ops_t *ops, mc__accept_cb cb,
               void *arg, mc__listener_t **out);

/*
 * mc__listen_socket() is mc__listen()'s socket alone, for a server that
 * accepts by other means (the metrics server): bound and listening as
 * there, non-blocking and close-on-exec, and marked for closing in a
 * forked child (forkfd.h; mc__fd_disown() it before closing it). Returns
 * the descriptor or -errno.
 */
int mc__listen_socket(const mc__addr_t *a);

/* mc__listener_addr() returns the bound address (the real port after ":0"). */
const mc__addr_t *mc__listener_addr(const mc__listener_t *ls);

/* mc__listener_data() returns the arg given to mc__listen(). */
void *mc__listener_data(const mc__listener_t *ls);

/*
 * mc__listener_close() stops accepting, closes the socket, removes a Unix
 * socket's path and frees ls at once (no callback runs after it). Conns
 * already accepted live on.
 */
void mc__listener_close(mc__listener_t *ls);

#endif /* MC_LISTEN_H */
