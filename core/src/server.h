/*
 * server.h - the protocol server of a master and/or a node.
 *
 * Accepts connections on one address and answers requests: master
 * operations through a service (service.h) when the process is a master,
 * data operations (READ, WRITE) on the segments this process holds when it
 * is a node. A malformed request closes its connection with a logged reason;
 * the process and its other connections carry on. Loop thread only.
 */
#ifndef MC_SERVER_H
#define MC_SERVER_H

#include <stdint.h>

#include "auth.h"
#include "net.h"
#include "service.h"

typedef struct mc__server mc__server_t;

/* Finds a local segment's memory and its memfd (-1: none, not offered for
 * SHM_MAP); returns 0 or -ENOENT. */
typedef int (*mc__seg_lookup_fn)(void *arg, uint32_t seg, char **base, uint64_t *size, int *fd);

typedef struct mc__server_opts {
    mc__svc_t *svc;               /* master operations, or NULL */
    mc__seg_lookup_fn seg_lookup; /* data operations, or NULL */
    void *seg_arg;
    const mc__secret_t *secret; /* require HELLO + AUTH with it (not owned;
                                   it must outlive the server), or NULL */
    int shm;                    /* with seg_lookup and a TCP address: also listen on
                                   mc__shm_unix_addr() of it and answer SHM_MAP there */
} mc__server_opts_t;

/* Counters, for logs and tests. */
typedef struct mc__server_stats {
    uint64_t conns, requests, bad_frames, bytes_read, bytes_written;
    uint64_t refused;  /* requests answered -EACCES: no or a failed AUTH */
    uint64_t shm_maps; /* segment memfds handed out (SHM_MAP) */
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

#endif /* MC_SERVER_H */
