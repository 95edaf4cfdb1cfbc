/*
 * data_plane.h - the data plane: a node's segment server.
 *
 * Answers the data requests (READ, WRITE, SHM_MAP: the opcodes from
 * MC__OP_READ up, wire/proto.h) on the segments this process holds, which
 * it finds through a lookup its owner gives. The protocol server
 * (server/server.h) owns the connections, the session handshake and the
 * limits, and hands each data request past the handshake to
 * mc__data_plane_handle(). No I/O of its own but the replies; loop thread
 * only.
 */
#ifndef MC_DATA_PLANE_H
#define MC_DATA_PLANE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/net.h"
#include "transport/shm.h"
#include "wire/proto.h"

/* Finds a local segment: its memory, its memfd (-1: none, not offered for
 * SHM_MAP) and its fence (NULL: none) in *out, and its epoch: a WRITE
 * carrying a lower one is refused (wire/proto.h, "Segment epochs").
 * Returns 0 or -ENOENT. */
typedef int (*mc__seg_lookup_fn)(void *arg, uint32_t seg, mc__seg_t *out, uint64_t *epoch);

/* WRITEs being received into a segment (mc__data_plane_place()), counted
 * by segment and epoch. */
typedef struct mc__placing {
    uint32_t seg;
    uint64_t epoch;
    uint32_t n;
} mc__placing_t;

/* A segment whose fence (shm.h) was handed out: to clients that mapped its
 * memfd (SHM_MAP) and to RDMA connections (mc__data_plane_fence_join());
 * the fence's slots in use. Found by the fence: a segment mounted again
 * under another number keeps its fence and its slots. */
typedef struct mc__shm_seg {
    uint32_t seg; /* the number it was last handed out under */
    mc__shm_fence_t *f;
    uint64_t used[(MC__SHM_FENCE_SLOTS + 63) / 64];
    /* The copy in progress that last held a rise back, since when, and
     * whether that was logged or revoked (held_ms). */
    uint32_t held_slot;
    uint64_t held_epoch, held_since_ms;
    int held_said;
} mc__shm_seg_t;

/* A copy that holds a rise back this long is logged (once): its client is
 * stopped or hung in the middle of it, and the space of the writes that
 * ended there waits for it. A holder that can be revoked (an RDMA
 * connection: its queue pair torn down, after which nothing it sent
 * lands) is revoked then, and the rise goes on. */
#define MC__FENCE_HELD_WARN_MS 5000

/* A fence slot, held by its owner (the connection that mapped its
 * segment, or an RDMA connection) until that closes, or, for an RDMA
 * connection, until it is revoked: when its write held a rise back too
 * long, or when every slot is taken and it is the first to have joined of
 * those with no write in progress (an RC queue pair has no keepalive: a
 * peer whose host vanished would keep its slot for good). */
typedef struct mc__shm_user {
    const void *owner;
    mc__shm_fence_t *f;
    uint32_t slot;
    uint64_t seq;                      /* the order it joined in */
    int pid;                           /* a mapping client's process (SO_PEERCRED), for logs */
    char peer[48];                     /* an RDMA peer's address, for logs */
    void (*revoke)(const void *owner); /* ends owner's writes for good, or NULL */
} mc__shm_user_t;

/* The epoch a segment was last mounted with at its master (wire/proto.h,
 * "Reads"): READs of a lower one are refused. */
typedef struct mc__mount {
    uint32_t seg;
    uint64_t epoch;
} mc__mount_t;

/* A READ's answer on its way to the peer, gathered straight from the
 * segment: until the conn has sent it (or closed), the segment's bytes
 * there still go out as that READ's. */
typedef struct mc__reading {
    struct mc__reading *prev, *next;
    struct mc__data_plane *p; /* NULL once the plane is gone (fini) */
    mc__conn_t *c;
    uint32_t seg;
    uint64_t mount; /* the segment's mount epoch when the READ was taken */
} mc__reading_t;

/* A data plane: filled in by its owner, which keeps it. */
typedef struct mc__data_plane {
    mc__seg_lookup_fn lookup;
    void *arg;
    int shm;                /* answer SHM_MAP (on a Unix conn only); 0: -EOPNOTSUPP */
    uint64_t held_ms;       /* a copy holding a rise back this long is logged or
                               revoked (0: MC__FENCE_HELD_WARN_MS) */
    mc__placing_t *placing; /* [0, nplacing), room for cplacing (free()) */
    uint32_t nplacing, cplacing;
    mc__shm_seg_t *shm_segs; /* [0, nshm_segs) (free()) */
    uint32_t nshm_segs;
    mc__shm_user_t *users; /* [0, nusers), room for cusers (free()) */
    uint32_t nusers, cusers;
    uint64_t joins;      /* slots given so far (mc__shm_user_t.seq) */
    mc__mount_t *mounts; /* [0, nmounts) (free()): mc__data_plane_mounted() */
    uint32_t nmounts;
    mc__reading_t *reading; /* READ answers being sent (each freed once sent) */
    /* Counters, for logs and tests. */
    uint64_t bytes_read, bytes_written, shm_maps;
    uint64_t bytes_placed;  /* of bytes_written, received in place */
    uint64_t writes_fenced; /* WRITEs refused for an epoch below the segment's */
    uint64_t reads_fenced;  /* READs refused for an epoch below the segment's mount */
} mc__data_plane_t;

/*
 * mc__data_plane_handle() answers the data request h with body[0..len) on
 * c: READ from the segment straight into the reply (the reader's lease or
 * handle keeps those bytes from being reused while they are sent; a READ
 * whose epoch is below the segment's mount epoch, mc__data_plane_mounted(),
 * gets -ESTALE: its replica set is from before the mount, and a conn still
 * sending an answer from before a mount is closed by it), WRITE
 * into it, SHM_MAP with the segment's memfd passed along (SCM_RIGHTS) and
 * a slot of its fence (shm.h) for c, which c holds until it closes
 * (mc__data_plane_closed(); -EBUSY when every slot is taken).
 * A request the plane refuses (-ENOENT for an unknown segment, -EINVAL
 * beyond its end, -EMSGSIZE over MC__PROTO_CHUNK, -EOPNOTSUPP) is answered
 * with that status. Returns 0 once a reply is queued; -EBADMSG for a
 * malformed body, with nothing sent (the caller closes c as a bad frame);
 * or the -errno of a reply that could not be queued (the caller closes c).
 */
int mc__data_plane_handle(mc__data_plane_t *p, mc__conn_t *c, const mc__hdr_t *h, const char *body,
                          size_t len);

/*
 * mc__data_plane_place() is the conn's body_dst for the data requests
 * (net.h): for a WRITE h whose head (its body's first MC__CONN_SINK_HEAD
 * bytes) names a range the plane would write, it returns where in the
 * segment the bytes go, sets *skip to the head's length, and *pl to its
 * segment and epoch, so that they are received there, straight from the
 * socket. Any other request (a READ, a WRITE the plane refuses) gets NULL:
 * it is buffered and goes to mc__data_plane_handle() as usual. The segment
 * outlives the conn. Until mc__data_plane_placed() or, for a conn that
 * closed first, mc__data_plane_unplace() with *pl, the write counts as
 * being received (mc__data_plane_enforced()).
 */
char *mc__data_plane_place(mc__data_plane_t *p, const mc__hdr_t *h, const char *head, size_t *skip,
                           mc__placing_t *pl);

/*
 * mc__data_plane_placed() answers the WRITE h whose bytes were received in
 * place (mc__data_plane_place(), which filled pl). Returns 0 once the reply
 * is queued, or the -errno of a reply that could not be (the caller closes
 * c).
 */
int mc__data_plane_placed(mc__data_plane_t *p, mc__conn_t *c, const mc__hdr_t *h,
                          const mc__placing_t *pl);
void mc__data_plane_unplace(mc__data_plane_t *p, const mc__placing_t *pl);

/*
 * What the plane enforces of segment seg's epoch: epoch (the lookup's,
 * which it refuses WRITEs below), or the lowest epoch below it of a WRITE
 * still being received into seg (its bytes may land until it ends) or of
 * a write in progress in a fence slot, of a client that mapped seg or of
 * an RDMA peer (which from now on start none below epoch). A master hands space of a write
 * that ended to others only once the epoch raised for it is enforced.
 */
uint64_t mc__data_plane_enforced(mc__data_plane_t *p, uint32_t seg, uint64_t epoch);

/*
 * mc__data_plane_mounted() records that segment seg was mounted at its
 * master with epoch (the one MOUNT_SEGMENT answered): READs of a lower
 * epoch are refused from now on, and the segment's fence (if any) says
 * so to the clients that read it mapped (shm.h). It only ever rises.
 * Before the segment takes new data. mc__data_plane_mount_epoch() is
 * what was recorded for seg (0: nothing, no READ is refused).
 */
void mc__data_plane_mounted(mc__data_plane_t *p, uint32_t seg, uint64_t epoch);
uint64_t mc__data_plane_mount_epoch(const mc__data_plane_t *p, uint32_t seg);

/* Whether c holds a fence slot (it mapped a segment). The owner keeps such
 * a connection open until its peer closes it (a frozen client's copy must
 * keep its slot), and tells the plane when it closes. */
int mc__data_plane_maps(const mc__data_plane_t *p, const mc__conn_t *c);

/*
 * mc__data_plane_fence_join() gives owner, a writer into segment seg that
 * passes no check of ours (an RDMA connection's one-sided writes), a slot
 * of seg's fence, as SHM_MAP gives a mapping one: owner marks there the
 * epoch of each write before it starts it (shm.h). peer names it in logs;
 * revoke (or NULL) ends its writes for good when a copy of its holds a
 * rise back too long (MC__FENCE_HELD_WARN_MS), and must then call
 * mc__data_plane_closed(owner) (it may do so from within). Returns the
 * slot's word and sets *epoch to the fence's epoch, or NULL: seg is not a
 * segment of ours with a fence, every slot is taken, or no memory.
 */
_Atomic uint64_t *mc__data_plane_fence_join(mc__data_plane_t *p, uint32_t seg, const void *owner,
                                            const char *peer, void (*revoke)(const void *owner),
                                            _Atomic uint64_t **epoch);

/* owner (a connection, or an RDMA connection given a slot) closed: its
 * fence slots are cleared and free again. Its writes are over for good (a
 * process that died, a client that closed it between copies, a queue pair
 * destroyed), so none of its is in progress. */
void mc__data_plane_closed(mc__data_plane_t *p, const void *owner);

/* Frees what p holds (not p). */
void mc__data_plane_fini(mc__data_plane_t *p);

#endif /* MC_DATA_PLANE_H */
