/*
 * server.h - the protocol server of a master and/or a node.
 *
 * Accepts connections on one address (and, for shared memory, on a second
 * one: the abstract Unix name of it), bounds them (how many, how idle, how
 * large before the handshake), runs the session handshake (HELLO, AUTH),
 * and then hands each request to a plane by its opcode's range
 * (wire/proto.h): master operations to the control plane
 * (control_plane.h, through a service) when the process is a master, data
 * operations (READ, WRITE, SHM_MAP) to the data plane (node/data_plane.h,
 * on the segments this process holds) when it is a node. A malformed
 * request closes its connection with a logged reason; the process and its
 * other connections carry on. Loop thread only.
 */
#ifndef MC_SERVER_H
#define MC_SERVER_H

#include <stdint.h>

#include "master/service.h"
#include "node/data_plane.h"
#include "runtime/auth.h"
#include "runtime/listen.h"
#include "runtime/net.h"

typedef struct mc__server mc__server_t;

/*
 * What a peer may make a server hold (docs/PROTOCOL.md, "Limits"). Until a
 * connection has been through the session handshake (HELLO, and AUTH with
 * a secret) its frames' bodies are bounded by MC__SERVER_HANDSHAKE_MAX_BODY,
 * far above the largest HELLO or AUTH the reference client sends, and it is
 * closed when no frame arrives for the handshake timeout; afterwards the
 * bound is MC__PROTO_MAX_BODY and the idle timeout applies.
 */
#define MC__SERVER_HANDSHAKE_MAX_BODY 1024
#define MC__SERVER_IDLE_TIMEOUT_MS 60000
#define MC__SERVER_HANDSHAKE_TIMEOUT_MS 10000
#define MC__SERVER_MAX_CONNS 8192 /* the most the default takes from RLIMIT_NOFILE */

typedef struct mc__server_opts {
    mc__svc_t *svc;               /* the control plane's service (not owned), or NULL */
    struct mc__ha *ha;            /* its standbys on etcd (server/ha.h; not owned), or NULL */
    mc__seg_lookup_fn seg_lookup; /* the data plane's segments (data_plane.h), or NULL */
    void *seg_arg;
    const mc__secret_t *secret; /* require HELLO + AUTH with it (not owned;
                                   it must outlive the server), or NULL */
    int shm;                    /* with seg_lookup and a TCP address: also listen on
                                   mc__shm_unix_addr() of it and answer SHM_MAP there */
    /* A connection with nothing queued for it that sends no whole frame for
     * idle_timeout_ms (0: MC__SERVER_IDLE_TIMEOUT_MS) is closed; before its
     * handshake, for handshake_timeout_ms (0: MC__SERVER_HANDSHAKE_TIMEOUT_MS). */
    uint64_t idle_timeout_ms, handshake_timeout_ms;
    /* Connections held at once, on both listeners (0: from RLIMIT_NOFILE,
     * leaving an eighth of it, at least 32 and at most half, to the rest of
     * the process; at most MC__SERVER_MAX_CONNS). At the limit a new connection takes the
     * place of the oldest one not yet through its handshake, or is closed
     * at once when there is none. */
    unsigned max_conns;
    /* A master's (with svc): bytes of answers queued across all its
     * connections past which one with answers queued takes no more
     * requests until they are sent (net.h, mc__conn_set_budget(); 0:
     * MC__SERVER_ANSWER_BUDGET). Each connection also stops at half of
     * MC__CONN_MAX_QUEUED of its own. */
    size_t answer_budget;
} mc__server_opts_t;

#define MC__SERVER_ANSWER_BUDGET ((size_t)256 << 20)

/* Opcodes below this are counted one by one (wire/proto.h: all of them). */
#define MC__SERVER_OPS 64

/* Counters, for logs, metrics and tests. */
typedef struct mc__server_stats {
    uint64_t conns, requests, bad_frames, bytes_read, bytes_written;
    uint64_t bytes_placed;   /* of bytes_written, received straight into the segment */
    uint64_t refused;        /* requests answered -EACCES: no or a failed AUTH */
    uint64_t shm_maps;       /* segment memfds handed out (SHM_MAP) */
    uint64_t writes_fenced;  /* WRITEs refused for an old epoch (wire/proto.h) */
    uint64_t timed_out;      /* connections closed by the idle or handshake timeout */
    uint64_t evicted;        /* ... to make room for a new one at the connection limit */
    uint64_t turned_away;    /* new connections closed at once at the limit */
    uint64_t open_conns;     /* connections open now */
    uint64_t answers_queued; /* bytes queued for sending, under the answer budget */
    uint64_t budget_pauses;  /* times a connection waited for the answer budget */
    uint64_t op_requests[MC__SERVER_OPS]; /* requests by opcode */
    uint64_t op_errors[MC__SERVER_OPS];   /* control requests the service failed, by opcode */
} mc__server_stats_t;

/*
 * Listens on a and serves. Returns 0 or -errno (bind errors included);
 * -EACCES, logged, for a TCP address beyond loopback without a secret. The
 * shm listener is best effort: when its name is taken (another node of the
 * same address in this network namespace) the server logs it and serves
 * TCP only.
 */
int mc__server_new(mc__server_t **out, mc_loop_t *l, const mc__addr_t *a,
                   const mc__server_opts_t *o);

/* The bound address as a string ("127.0.0.1:40123"). */
const char *mc__server_addr(const mc__server_t *srv);

void mc__server_stats(const mc__server_t *srv, mc__server_stats_t *st);

/* Stops listening and closes every connection. */
void mc__server_close(mc__server_t *srv);

/* What its data plane enforces of segment seg's epoch
 * (mc__data_plane_enforced(); srv NULL: epoch). */
uint64_t mc__server_enforced(mc__server_t *srv, uint32_t seg, uint64_t epoch);

/* Its data plane (for fence slots of writers it does not see, such as RDMA
 * connections: mc__data_plane_fence_join()), or NULL: it has none. */
mc__data_plane_t *mc__server_data_plane(mc__server_t *srv);

#endif /* MC_SERVER_H */
