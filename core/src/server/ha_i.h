/*
 * ha_i.h - what the files of a master with standbys on etcd share (ha.c:
 * the election, the log's appends, following it; ha_snap.c: snapshots).
 * Private to them: everyone else uses ha.h.
 */
#ifndef MC_SERVER_HA_I_H
#define MC_SERVER_HA_I_H

#include "master/oplog.h"
#include "runtime/etcd.h"
#include "server/ha.h"
#include "wire/proto.h"

/* Bytes of entries in one log key: a transaction of TXN_KEYS of them stays
 * well under etcd's request limit (1.5 MiB). */
#define CHUNK_MAX (128u << 10)
#define TXN_KEYS 4 /* log keys in one transaction */
#define RETRY_MS 500
#define SEQ_DIGITS 20
#define REMOUNT_GRACE_MS 5000 /* a new leader's first moments: nodes mount again */

enum state { ST_STANDBY, ST_CAMPAIGN, ST_CATCHUP, ST_LEADER, ST_DEPOSED };

typedef struct chunk {
    mc__wbuf_t w;
    uint64_t upto; /* entries taken up to its end */
    uint64_t seq;  /* its log key (0: not sent yet) */
} chunk_t;

struct mc__ha {
    mc_loop_t *loop;
    mc__svc_t *svc;
    mc__etcd_t *etcd;
    mc__ha_opts_t o;
    char *addr;
    char prefix[256], leader[300], logp[300];
    size_t plen, llen, lplen;
    enum state st;
    int64_t lease;
    mc_timer_t ka;           /* keepalive (standby: its watch's check), every
                                third of the TTL */
    int ka_busy, grant_busy; /* a keepalive / grant in flight */
    int check_busy;          /* standby: a read of the leader key in flight */
    uint64_t ka_sent;        /* when the keepalive in flight went out */
    uint64_t deadline;       /* the lease is ours at least until then (ms) */
    uint64_t since;          /* when we began to lead */
    int64_t created;         /* our leader key's create revision */
    mc__oplog_t *view;       /* the log as read so far */
    uint64_t applied;        /* its last key applied (0: none) */
    mc__etcd_watch_t *watch; /* standby: the cluster's keys */
    mc_timer_t again;        /* standby: restart after an error */
    chunk_t *chunks;         /* leader: entries not durable yet, oldest first */
    size_t nchunks;
    uint64_t taken, durable;     /* entries handed to the log / durable */
    uint64_t next_seq;           /* the next log key */
    int sending, failing;        /* a transaction in flight; the last one failed */
    char snapp[300], snapk[300]; /* "<prefix>snap/", "<prefix>snapshot" */
    size_t snaplen, snapklen;
    uint64_t snap_seq;     /* the log key the last snapshot covers */
    mc__wbuf_t *snap;      /* leader: a snapshot being written, its batches */
    size_t nsnap, snap_at; /* ... how many, how many written (nsnap: the pointer next) */
    uint64_t snap_upto;    /* ... the log key it covers */
    uint64_t compact;      /* log keys between snapshots */
    int snap_turn;         /* the next transaction is the snapshot's */
    mc_timer_t retry;
    mc_work_t kick;
    int kicked;
    int closing; /* mc__ha_free(): callbacks do nothing */
    void (*on_durable)(void *arg, uint64_t seq, int rc);
    void *dur_arg;
};

/* ---- ha.c ---- */

/* The lease is gone for good: steps down (opts.deposed). */
void mc__ha_deposed(mc__ha_t *ha, const char *why);
/* Sends what waits (the log's next transaction, or the snapshot's). */
void mc__ha_send(mc__ha_t *ha);
/* The end of a fenced transaction: 1 if the caller goes on (rc tells how it
 * went), 0 if there is nothing more to do (closing, deposed). */
int mc__ha_fenced_end(mc__ha_t *ha, int rc, const mc__etcd_res_t *res);
/* Sends again after RETRY_MS. */
void mc__ha_retry_later(mc__ha_t *ha);

/* ---- ha_snap.c ---- */

/* Takes the view (the log up to ha->applied) as a snapshot to write. */
void mc__ha_snap_start(mc__ha_t *ha);
/* Writes the snapshot's next batches, then its pointer (fenced). */
void mc__ha_snap_send(mc__ha_t *ha);
/* Drops the snapshot being written. */
void mc__ha_snap_free(mc__ha_t *ha);
/* Reads the snapshot the pointer kv among res's keys names into a new view
 * when it is newer than what was applied. Returns 0, or -EAGAIN (a batch
 * missing: read again), -ENOMEM. */
int mc__ha_snap_take(mc__ha_t *ha, const mc__etcd_kv_t *ptr, const mc__etcd_res_t *res);

#endif /* MC_SERVER_HA_I_H */
