/*
 * link.h - how the client reaches a master: one interface, two bindings.
 *
 * A call sends one request (an operation of proto.h and its body) and calls
 * back once with the response's status and body, exactly as an RPC does
 * (rpc.h): always from the loop, never inside the call that started it.
 *
 *   rpc    the master is another process: the call is an RPC over a
 *          reconnecting client connection (rpc.h), bounded by its timeout.
 *   local  the master is in this process (an embedded store): the call is
 *          mc__svc_handle() on the spot, with no socket and no copy of the
 *          request, and the response is delivered after the current
 *          callback. The requests of one local link belong to one owner
 *          of the service, as a connection's do.
 *
 * So the client runs the same code, and the master's request handling the
 * same rules, whether the master is here or elsewhere. Loop thread only.
 *
 * One call exists for the local binding only: a whole small put whose
 * bytes go into this process's own segment (mc__link_put()), the two
 * requests of a put made one call, without a codec or a second round.
 */
#ifndef MC_LINK_H
#define MC_LINK_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "master/service.h"
#include "mooncake/loop.h"
#include "runtime/net.h"
#include "runtime/rpc.h"

typedef struct mc__link mc__link_t;

/*
 * Sends request op with body[0..len) (copied, or used before returning) and
 * calls cb(arg, status, body, len) once, as described above. Returns 0, or a
 * negative errno (the request was not sent; cb is never called).
 */
int mc__link_call(mc__link_t *l, uint16_t op, const void *body, size_t len, uint64_t timeout_ms,
                  mc__rpc_cb cb, void *arg);

/*
 * mc__link_call() with a body packed per fmt (mc__pack(), proto.h) into
 * the link's own buffer, which is kept from call to call. Returns 0, or a
 * negative errno (a field that cannot be packed, or as mc__link_call()).
 */
int mc__link_vcall(mc__link_t *l, uint16_t op, uint64_t timeout_ms, mc__rpc_cb cb, void *arg,
                   const char *fmt, va_list ap);

/*
 * For a body a typed encoder writes (proto.h): mc__link_body() empties the
 * link's request buffer and returns it; mc__link_send() then sends what is
 * in it as mc__link_call() does, and returns what that does (or the
 * buffer's error).
 */
mc__wbuf_t *mc__link_body(mc__link_t *l);
int mc__link_send(mc__link_t *l, uint16_t op, uint64_t timeout_ms, mc__rpc_cb cb, void *arg);

/*
 * A whole put in one call (mc__svc_put(): the rules of PUT_START and
 * PUT_COMMIT, with write() moving the bytes in between), answered on the
 * spot in *st (unless NULL) and the return value, with no callback: the local binding
 * only, for a caller that can write every replica at once. Returns what
 * mc__svc_put() does, or -EOPNOTSUPP on the rpc binding (nothing done: the
 * caller sends PUT_START and PUT_COMMIT).
 */
int mc__link_put(mc__link_t *l, const mc__put_start_rq_t *start, const mc__put_commit_rq_t *commit,
                 mc__svc_write_fn write, void *arg, mc_stat_t *st);

/* Closes the link: calls in flight fail with -ECANCELED (rpc) or are
 * answered as usual (local); a local link's owner is gone for the
 * service (its writes are revoked, its handles closed). */
void mc__link_close(mc__link_t *l);

/* The rpc binding: a reconnecting client of the master at a (rpc.h; ops and
 * arg as for mc__rpc_client_new()). Returns 0 or a negative errno. */
int mc__link_rpc_new(mc_loop_t *loop, const mc__addr_t *a, uint64_t timeout_ms,
                     const mc__rpc_client_ops_t *ops, void *arg, mc__link_t **out);

/* The rpc binding to the leader of the cluster of masters whose etcd is
 * addr ("etcd://host:port;host:port", client/leader.h): looked up before
 * every connect; refused calls, and those that can be asked twice, are sent
 * again within their timeout. Returns 0, -EINVAL, -ENOMEM. */
int mc__link_follow_new(mc_loop_t *loop, const char *addr, uint64_t timeout_ms,
                        const mc__rpc_client_ops_t *ops, void *arg, mc__link_t **out);

/* The local binding: calls go to svc (not owned) as owner. Returns 0 or
 * -ENOMEM. */
int mc__link_local_new(mc_loop_t *loop, struct mc__svc *svc, uint64_t owner, mc__link_t **out);

#endif /* MC_LINK_H */
