/*
 * control_plane.h - the control plane: a master's requests.
 *
 * Answers the master's requests (nodes and segments, objects: the opcodes
 * from MC__OP_MOUNT_SEGMENT below MC__OP_READ, wire/proto.h, and PING)
 * through a service (master/service.h), and drives the service's clock: a
 * timer ticks it once a second. The protocol server (server.h) owns the
 * connections, the session handshake and the limits, and hands each control
 * request past the handshake to mc__control_plane_handle(), with the
 * connection's owner id: what a connection holds at the service (writes in
 * progress, open handles) dies with it (mc__control_plane_owner_gone()).
 * Loop thread only.
 */
#ifndef MC_CONTROL_PLANE_H
#define MC_CONTROL_PLANE_H

#include <stddef.h>
#include <stdint.h>

#include "master/service.h"
#include "mooncake/loop.h"
#include "runtime/net.h"
#include "wire/proto.h"

/* A control plane, kept by its owner (no allocation); zeroed, it serves
 * nothing until mc__control_plane_start(). */
struct mc__ha;
struct mc__held;

typedef struct mc__control_plane {
    mc__svc_t *svc;                    /* not owned */
    struct mc__ha *ha;                 /* standbys on etcd (ha.h; not owned), or NULL */
    struct mc__held *held, *held_tail; /* answers waiting for the op log, oldest first */
    mc_timer_t tick;
    uint64_t last_tick;     /* when the tick last ran (ms) */
    uint64_t op_errors[64]; /* requests the service failed, by opcode (< 64) */
} mc__control_plane_t;

/* Starts serving svc (not owned: it must outlive the plane) on l: starts
 * the tick. With ha (not owned; NULL: none), a request is handled only if
 * mc__ha_admit() lets it, and the answer to a change waits until the op log
 * holds it. */
void mc__control_plane_start(mc__control_plane_t *p, mc_loop_t *l, mc__svc_t *svc,
                             struct mc__ha *ha);

/* Stops the tick. A plane never started, or stopped, is a no-op. */
void mc__control_plane_stop(mc__control_plane_t *p);

/*
 * mc__control_plane_handle() answers the request h with body[0..len) that
 * arrived on c, whose owner id is owner, with the service's status and
 * response. Returns 0 once a reply is queued; -EBADMSG for a malformed
 * body, with nothing sent (the caller closes c as a bad frame); or the
 * -errno of a reply that could not be queued (the caller closes c).
 */
int mc__control_plane_handle(mc__control_plane_t *p, uint64_t owner, mc__conn_t *c,
                             const mc__hdr_t *h, const char *body, size_t len);

/* The connection of owner is gone: the service revokes its writes in
 * progress and closes its handles. A no-op on a plane not started. */
void mc__control_plane_owner_gone(mc__control_plane_t *p, uint64_t owner);

#endif /* MC_CONTROL_PLANE_H */
