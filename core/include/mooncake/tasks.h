/*
 * tasks.h - replica tasks of libmooncake: copies and moves of an object's
 * replicas between segments, which the master runs, and dropping one
 * replica. Part of the public API of mooncake.h, which includes it; the
 * rest (the store, mc_done_cb) is there.
 */
#ifndef MOONCAKE_TASKS_H
#define MOONCAKE_TASKS_H

#include "mooncake/mooncake.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MC_TASK_COPY 0 /* another replica of an object on each target segment */
#define MC_TASK_MOVE 1 /* a replica from one segment to another */

#define MC_TASK_PENDING 0    /* waiting in the master's queue */
#define MC_TASK_PROCESSING 1 /* copies in flight */
#define MC_TASK_SUCCESS 2
#define MC_TASK_FAILED 3

/* Targets of one copy task, at most. */
#define MC_TASK_TARGETS_MAX 8
/* Tasks waiting on a master, at most: the next create fails with -EBUSY. */
#define MC_TASK_PENDING_MAX 1024

/* What a master says of one task (mc_task_query_async()). */
typedef struct mc_task_info {
    uint64_t id;
    uint32_t type;      /* MC_TASK_COPY, MC_TASK_MOVE */
    uint32_t status;    /* MC_TASK_* */
    int32_t error;      /* a failed task's -errno, else 0 */
    int64_t created_ms; /* wall clock of the master, milliseconds */
    int64_t updated_ms; /* its last change of status */
    uint64_t node;      /* the node that copies (the first target's), 0: none */
    char message[160];  /* why it failed, or a note; NUL-terminated */
} mc_task_info_t;

/*
 * mc_task_copy_async() asks the master to copy key's object to each of
 * targets[0..n) (segments named by their node's data address, as replica
 * sets carry them; "" names an embedded store's own segment) and returns
 * at once: *id receives the task's id for mc_task_query_async(). The
 * master allocates space on each target, the target node copies the bytes
 * from a replica over the data plane, and the master adds the replica to
 * the same version (its version number does not change). A version
 * replaced or removed during the copy fails the task; a target that
 * already holds a replica counts as done. Result 0, or -ENOENT (no such
 * key), -ENXIO (a target names no segment), -EINVAL (n is 0 or over
 * MC_TASK_TARGETS_MAX), -EOPNOTSUPP (a target is a master's own segment
 * without a replica: it takes no copies), -EBUSY (MC_TASK_PENDING_MAX tasks
 * wait). key and targets are copied at submission.
 */
MC_EXPORT int mc_task_copy_async(mc_store_t *s, const char *key, size_t klen,
                                 const char *const *targets, size_t n, uint64_t *id, mc_done_cb cb,
                                 void *arg);
MC_EXPORT int mc_task_copy(mc_store_t *s, const char *key, size_t klen, const char *const *targets,
                           size_t n, uint64_t *id);

/*
 * mc_task_move_async() is a copy to target that then drops the replica on
 * source (its space is freed once the read leases handed out with it have
 * run out; while a handle has the version open the task waits). Errors as
 * mc_task_copy_async(), and -EINVAL when source holds no replica of the
 * object or is target.
 */
MC_EXPORT int mc_task_move_async(mc_store_t *s, const char *key, size_t klen, const char *source,
                                 const char *target, uint64_t *id, mc_done_cb cb, void *arg);
MC_EXPORT int mc_task_move(mc_store_t *s, const char *key, size_t klen, const char *source,
                           const char *target, uint64_t *id);

/*
 * mc_task_query_async() fills *info with what the master knows of task id.
 * Result 0, or -ENOENT (no such task: never made, made by a master that
 * has since restarted or handed over, or finished longer ago than the last
 * MC_TASK_PENDING_MAX tasks).
 */
MC_EXPORT int mc_task_query_async(mc_store_t *s, uint64_t id, mc_task_info_t *info, mc_done_cb cb,
                                  void *arg);
MC_EXPORT int mc_task_query(mc_store_t *s, uint64_t id, mc_task_info_t *info);

/*
 * mc_replica_drop_async() asks the master to take the replica on segment
 * addr (a node's data address, as replica sets carry them; "" names an
 * embedded store's own segment) off key's published object, which keeps
 * its other replicas, its version and its bytes; the object then asks for
 * one replica less (no repair brings it back). The replica's space is
 * freed once the read leases handed out with it have run out. Result 0, or
 * -ENOENT (no such key, or no replica of it there), -ENXIO (addr names no
 * segment), -EINVAL (it is the last replica: remove the key instead),
 * -EBUSY (a handle has the version open and may read that replica).
 */
MC_EXPORT int mc_replica_drop_async(mc_store_t *s, const char *key, size_t klen, const char *addr,
                                    mc_done_cb cb, void *arg);
MC_EXPORT int mc_replica_drop(mc_store_t *s, const char *key, size_t klen, const char *addr);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_TASKS_H */
