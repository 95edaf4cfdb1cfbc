/*
 * leader.h - a client of the master that leads a cluster on etcd (a master
 * address "etcd://host:port;host:port", Mooncake's form): the leader's
 * address is looked up in etcd before every connect (server/ha.h has the
 * key), and calls the leader refused, or that a lost connection cut off
 * and can be asked twice, are sent again until their timeout. Used by the
 * rpc binding of link.c. Loop thread only.
 */
#ifndef MC_CLIENT_LEADER_H
#define MC_CLIENT_LEADER_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/loop.h"
#include "runtime/rpc.h"

/* The environment variable naming the cluster (default: Mooncake's
 * "mooncake_cluster", MC__HA_CLUSTER_DEFAULT). */
#define MC__CLUSTER_ENV "MOONCAKE_CLUSTER_ID"

typedef struct mc__follow mc__follow_t;

/* 1 if addr is an etcd:// master address. */
int mc__follow_is_etcd(const char *addr);

/* Follows the leader of the cluster whose etcd is addr (etcd://...).
 * Returns 0, -EINVAL (a bad address or cluster id), -ENOMEM. */
int mc__follow_new(mc_loop_t *loop, const char *addr, mc__follow_t **out);

/* The resolve hook (rpc.h) of the client f serves; ops->resolve_arg = f. */
void mc__follow_resolve(mc__rpc_client_t *cl);

/* mc__rpc_client_call() on cl, sent again (bounded by timeout_ms in all)
 * while the leader cannot be reached or refuses (-EREMCHG: it is no longer
 * the leader, or not yet), and for the requests that can be asked twice
 * also after a lost connection. Returns as mc__rpc_client_call(), except
 * that a client still connecting is waited for. */
int mc__follow_call(mc__follow_t *f, mc__rpc_client_t *cl, uint16_t op, const void *body,
                    size_t len, uint64_t timeout_ms, mc__rpc_cb cb, void *arg);

/* Stops following: calls waiting to be sent again fail with -ECANCELED
 * (from the loop); f is freed once they have. */
void mc__follow_close(mc__follow_t *f);

#endif /* MC_CLIENT_LEADER_H */
