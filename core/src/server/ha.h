/*
 * ha.h - a master with standbys on etcd (docs/SEMANTICS.md, "A cluster that
 * survives its master"; the keys in docs/PROTOCOL.md, "The op log").
 *
 * Every master of a cluster campaigns for the key MC__HA_ROOT<cluster>/leader
 * with its address as value, attached to an etcd lease of ttl_s seconds that
 * it keeps alive at a third of the TTL. The one that puts it first leads:
 * it reads the op log to its end, then serves. The others are standbys:
 * they follow the log (a watch) into their view of it, and campaign again
 * as soon as the leader key goes (its lease lapsed).
 *
 * The leader's service hands every change of what nodes keep to the log
 * (mc__svc_journal()); entries are batched into keys MC__HA_ROOT<cluster>
 * /log/<seq>, appended in one etcd transaction that holds only while the
 * leader key is still the one this master created (fencing). The answer to
 * a change waits until its entries are durable (mc__ha_defers()). Every
 * compact_keys log keys the leader writes its view of the log as a
 * snapshot (keys snap/<seq>/<n>, then the pointer "snapshot"), and deletes
 * the log keys and older snapshots it covers.
 *
 * A leader that cannot prove its lease (no keepalive answered within the
 * TTL: etcd unreachable, or this process was stopped) or whose appends fail
 * refuses changes (-EROFS) and keeps answering reads; once etcd answers
 * again it goes on. One whose lease is gone, or whose append found another
 * leader, is deposed: opts.deposed is called and nothing more is answered.
 * Loop thread only; the only module beside runtime/etcd.c that knows etcd.
 */
#ifndef MC_SERVER_HA_H
#define MC_SERVER_HA_H

#include <stddef.h>
#include <stdint.h>

#include "master/service.h"
#include "mooncake/loop.h"

#define MC__HA_ROOT "/mooncake/"
/* The cluster id when none is given (Mooncake's default). */
#define MC__HA_CLUSTER_DEFAULT "mooncake_cluster"

/* The log is compacted into a snapshot, and trimmed, every this many keys. */
#define MC__HA_COMPACT_KEYS 1000

typedef struct mc__ha mc__ha_t;

typedef struct mc__ha_opts {
    const char *endpoints; /* etcd, as mc__etcd_new() takes them */
    const char *cluster;   /* the cluster id (NULL: MC__HA_CLUSTER_DEFAULT) */
    unsigned ttl_s;        /* the lease (>= 1) */
    unsigned timeout_ms;   /* each etcd request */
    unsigned compact_keys; /* log keys between snapshots (0: MC__HA_COMPACT_KEYS) */
    /* The lease is gone for good: this master's state must not be served
     * again (the program starts afresh as a candidate). */
    void (*deposed)(void *arg);
    void *arg;
} mc__ha_opts_t;

/* Fills buf with the leader key of cluster (NULL: the default). Returns its
 * length, or -ENAMETOOLONG. Clients look the leader up there. */
int mc__ha_leader_key(const char *cluster, char *buf, size_t n);

/* Makes a candidate for svc (not owned), which answers nothing until it
 * leads. Returns 0, -EINVAL (a cluster id with '/', a bad endpoint list),
 * -ENOMEM. */
int mc__ha_new(mc_loop_t *l, mc__svc_t *svc, const mc__ha_opts_t *o, mc__ha_t **out);

/* Starts campaigning, as the master clients reach at addr (copied: the
 * leader key's value). Returns 0 or -ENOMEM. */
int mc__ha_start(mc__ha_t *ha, const char *addr);

/* Gives the lease back (a revoke, sent now: its answer is not waited for),
 * so that a standby takes over at once rather than after the TTL; answers
 * nothing more. For a master shutting down. */
void mc__ha_resign(mc__ha_t *ha);

/* Stops and frees (without resigning: the lease then lapses by itself). */
void mc__ha_free(mc__ha_t *ha);

/* 0 if request op may be handled now; -EREMCHG (not the leader: look the
 * leader up again) or -EROFS (a change while the leader cannot write the
 * log). */
int mc__ha_admit(mc__ha_t *ha, uint16_t op);

/* After handling request op (the service flushed): 1 and *seq if its answer
 * must wait until the log is durable up to seq (mc__ha_on_durable()), else 0. */
int mc__ha_defers(mc__ha_t *ha, uint16_t op, uint64_t *seq);

/* fn(arg, seq, rc) is called when the log is durable up to seq (rc 0), or
 * when entries up to seq could not be written for now (rc -ETIMEDOUT: they
 * are retried; those answers may not wait longer). */
void mc__ha_on_durable(mc__ha_t *ha, void (*fn)(void *arg, uint64_t seq, int rc), void *arg);

/* What mc__ha_stats() tells (metrics). */
typedef struct mc__ha_stats {
    int leading, writable;     /* mc__ha_leading(), mc__ha_writable() */
    uint64_t entries, pending; /* entries handed to the log; not durable yet */
    uint64_t key;              /* the last log key applied to the view */
} mc__ha_stats_t;
void mc__ha_stats(const mc__ha_t *ha, mc__ha_stats_t *st);

/* 1 in a new leader's first moments, while the nodes mount again: a miss
 * (-ENOENT) of a read that mc__svc_rebuilding() may still fill is answered
 * -EAGAIN, which clients following the leader wait out. */
int mc__ha_arriving(const mc__ha_t *ha);

/* 1 while leading. */
int mc__ha_leading(const mc__ha_t *ha);

/* 1 while leading with the lease proven and the log written: the master may
 * change its state on its own (expire nodes, revoke writes). */
int mc__ha_writable(const mc__ha_t *ha);

#endif /* MC_SERVER_HA_H */
