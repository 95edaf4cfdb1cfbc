/*
 * repair.h - re-replication of under-replicated objects, the master's side.
 * No I/O and no clock of its own (callers pass `now`, milliseconds).
 *
 * A published version with fewer replicas than it asked for (its node died,
 * or a writer dropped a dead replica) but at least one gets a *task*: space
 * for one more replica is allocated on a segment of a live node that has no
 * replica of it, and that node (the target) is asked to copy the bytes from
 * a surviving replica into that space. The master cannot call nodes, so a
 * node learns of tasks through a flag on its HEARTBEAT reply, takes them
 * with REPAIR_TAKE and reports each with REPAIR_DONE; the master then adds
 * the replica to the version if it is still the same published version (its
 * id), and otherwise frees the space.
 *
 * Space safety: a task's extents live in the task table, so dropping the
 * target segment frees them with it (mc__repair_seg_dropped()). A task has a
 * time limit that the node also obeys, counted on the node from the moment
 * it asked for the task (before the master handed it out), so once the
 * master's own clock passes hand-out time + limit + a margin no late copy
 * can still write there and the space is freed. Extents that a writer may
 * still be writing to (a replica dropped from a put) are *held* the same
 * way before they go back to the free space.
 *
 * Bandwidth: at most `inflight` tasks at once and, with `bytes_per_s`, a
 * token bucket (one second of burst) on the bytes the tasks copy.
 */
#ifndef MC_REPAIR_H
#define MC_REPAIR_H

#include <stddef.h>
#include <stdint.h>

#include "master/master.h"

#define MC__REPAIR_MARGIN_MS 2000 /* the master waits this long past a task's limit */

typedef struct mc__repair mc__repair_t;

typedef struct mc__repair_opts {
    uint32_t inflight;    /* tasks at once (0: 4) */
    int off;              /* plan nothing (holds and tasks' ends still work) */
    uint64_t bytes_per_s; /* bytes copied per second, on average (0: no limit) */
    /* Whether segment seg's node enforces epoch (wire/proto.h, "Segment
     * epochs"): a hold with an epoch waits for it too (0: not yet), and for
     * its time only if fenced() is not 2 (every write there checked: see
     * mc__svc_seg_fenced()). NULL: 1. */
    int (*fenced)(void *arg, uint32_t seg, uint64_t epoch);
    void *fenced_arg;
} mc__repair_opts_t;

/* A segment that may receive copies: mounted, of a live remote node. */
typedef struct mc__repair_target {
    uint32_t seg;
    uint64_t node;
} mc__repair_target_t;

typedef struct mc__repair_task {
    uint64_t id;
    uint64_t node; /* the target node, which does the copy */
    uint64_t vid;  /* the version copied (mc__version_t.id) */
    char *key;     /* its key when planned (owned) */
    size_t klen;
    uint64_t size;     /* bytes to copy */
    uint64_t limit_ms; /* time the node has for the copy */
    mc__replica_t dst; /* the new replica's extents, on the target segment */
    uint64_t created;
    uint64_t expires; /* 0 until handed out; then when the master gives up */
    uint64_t job;     /* a user's task it belongs to (tasks.c); 0: a repair */
    /* The sources REPAIR_TAKE named (the version's replicas then: segment,
     * first extent's offset): the node may read any of them until its
     * limit, so the copy joins the version only if they are all still its
     * replicas (one taken away meanwhile, by a move, a drop or its node's
     * loss, may hold another object's bytes by then). */
    uint32_t nsrc;
    struct {
        uint32_t seg;
        uint64_t off;
    } src[MC__MAX_REPLICAS];
    /* A source left the version meanwhile (mc__repair_source_gone()): the
     * copy joins nothing, even where a replica came back at the same place
     * (its space may have held another object's bytes in between). */
    int stale;
    struct mc__repair_task *next;
} mc__repair_task_t;

typedef struct mc__repair_stats {
    uint64_t started;  /* tasks planned */
    uint64_t done;     /* replicas added */
    uint64_t failed;   /* tasks that failed, timed out or lost their object */
    uint64_t bytes;    /* bytes of the replicas added */
    uint64_t inflight; /* tasks now */
    uint64_t waiting;  /* under-replicated objects the last full scan could not place */
} mc__repair_stats_t;

/*
 * Told when a copy planned with mc__repair_copy_to() ends: rc 0 (the
 * replica joined v, which is then the version's current published form),
 * -ESTALE (the version was replaced or removed meanwhile: the space went
 * back), -ENOSPC (the version got MC__MAX_REPLICAS meanwhile), -ENODEV (the target segment was
 * dropped), -ETIMEDOUT (the node did not take it or finish in time) or -EIO (the node failed to
 * copy); v is NULL unless rc is 0. Not called when the repair state is freed.
 */
typedef void (*mc__repair_job_cb)(void *arg, uint64_t job, int rc, mc__version_t *v, uint64_t now);

/* Creates the repair state. Returns 0 or -ENOMEM. */
int mc__repair_new(mc__repair_t **out, const mc__repair_opts_t *o);

/* Frees it, returning every task's and hold's space to master m. */
void mc__repair_free(mc__repair_t *r, mc__master_t *m);

/* Something may have become under-replicated, or placeable: scan again. */
void mc__repair_wake(mc__repair_t *r);

/* Segment seg is gone (its allocator with it): tasks writing there and held
 * extents there are dropped, at time now. */
void mc__repair_seg_dropped(mc__repair_t *r, mc__master_t *m, uint32_t seg, uint64_t now);

/* Keeps rep's extents allocated until `until` and, with an epoch, until its
 * segment's node enforces it (opts.fenced; then `until` only counts where
 * a write may pass the node's check), then frees them (a writer's requests
 * may still be on their way there). Takes rep's contents. */
void mc__repair_hold(mc__repair_t *r, mc__master_t *m, mc__replica_t *rep, uint64_t until,
                     uint64_t epoch);

/*
 * Periodic work at time now: frees expired holds, gives up on tasks past
 * their time, and plans new tasks onto targets[0..n) within the limits.
 * Returns the number of tasks planned.
 */
int mc__repair_tick(mc__repair_t *r, mc__master_t *m, const mc__repair_target_t *targets, size_t n,
                    uint64_t now);

/* 1 if node has tasks it has not taken yet. */
int mc__repair_pending(const mc__repair_t *r, uint64_t node);

/*
 * Hands node its next task not yet taken, or NULL: the task counts as handed
 * out at now. The caller checks the version and either sends the task or
 * gives it up with mc__repair_finish() (never handed: freed at once).
 */
mc__repair_task_t *mc__repair_take(mc__repair_t *r, uint64_t node, uint64_t now);

/*
 * Ends task id of node with status (0: the copy is complete; -ENOENT: the
 * version went before the copy began; else the copy failed): the replica
 * joins the version when it is still the same published one, else (and on
 * failure) its space is freed. Returns 0, or -ENOENT for an unknown task
 * (expired, or another node's).
 */
/* Records v's replicas as the sources t's node is told to read (at
 * REPAIR_TAKE). */
void mc__repair_sources(mc__repair_task_t *t, const mc__version_t *v);

int mc__repair_finish(mc__repair_t *r, mc__master_t *m, uint64_t node, uint64_t id, int status,
                      uint64_t now);

/* Version vid's replica on segment seg went (a drop, a move's source; vid
 * 0: every version's, its segment was dropped): the copies that named it
 * as a source will not join. */
void mc__repair_source_gone(mc__repair_t *r, uint64_t vid, uint32_t seg);

void mc__repair_stats(const mc__repair_t *r, mc__repair_stats_t *st);

/* Sets the function told of the end of every copy planned for a job. */
void mc__repair_on_job(mc__repair_t *r, mc__repair_job_cb cb, void *arg);

/*
 * Plans a copy of published version v onto segment seg of node (a live
 * remote node, which does the copy as for a repair) for job (non-zero): the
 * space is allocated now, with v's layout. It counts among the copies in
 * flight but not in the repair counters. Returns 0, -EEXIST (v already has
 * a replica there), -ENOSPC (no room, or v has MC__MAX_REPLICAS) or
 * -ENOMEM. An empty object's replica joins v at once: 1, and no callback.
 */
int mc__repair_copy_to(mc__repair_t *r, mc__master_t *m, mc__version_t *v, uint32_t seg,
                       uint64_t node, uint64_t job, uint64_t now);

#endif /* MC_REPAIR_H */
