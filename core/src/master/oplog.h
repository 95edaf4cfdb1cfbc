/*
 * oplog.h - the op log of a master with standbys (docs/PROTOCOL.md, "The op
 * log"), as data: what a leader appends, and the view of it a standby keeps
 * so that it is ready to take over. No I/O: server/ha.c moves the bytes to
 * and from etcd.
 *
 * An entry is one change of what the nodes keep, in the very encoding of
 * the notices nodes fetch (proto.h, MC__NOTE_*), for one segment: `u`
 * segment id, then an `s` with the notice (kind, version id, for a put the
 * record with the version's extents in that segment). MC__LOG_SEG_GONE says
 * the segment was dropped, MC__LOG_SEG_NODE which node mounted it. A batch
 * (one key of the log) is entries one after another.
 *
 * The view keeps, for each version, its latest record on each segment, the
 * versions that left the namespace, and each segment's node: a master
 * taking over marks those gone, and merges a segment's records when its
 * node (that one: not another naming its id) mounts it again, as it merges
 * the node's own report (mc__master_merge()).
 */
#ifndef MC_MASTER_OPLOG_H
#define MC_MASTER_OPLOG_H

#include <stddef.h>
#include <stdint.h>

#include "wire/proto.h"

/* Notice kinds of the log only: segment dropped (its records go); one
 * version's replica on the segment dropped (a move: that record goes, the
 * version stays); segment mounted by a node (the notice's id field is the
 * node's id: the segment's records are that node's). */
#define MC__LOG_SEG_GONE 3
#define MC__LOG_REP_GONE 4
#define MC__LOG_SEG_NODE 5

typedef struct mc__oplog mc__oplog_t;

/* Returns 0 or -ENOMEM. */
int mc__oplog_new(mc__oplog_t **out);
void mc__oplog_free(mc__oplog_t *l);

/* Appends one entry (segment seg, notice note[0..len)) to w. Returns w->err. */
int mc__oplog_pack(mc__wbuf_t *w, uint32_t seg, const char *note, size_t len);

/* Applies a batch p[0..n) to the view, entry by entry. Returns 0, -EBADMSG
 * (what came before the bad entry stays applied) or -ENOMEM. */
int mc__oplog_apply(mc__oplog_t *l, const char *p, size_t n);

/* Calls cb with each record the view keeps for segment seg (valid during
 * the call). */
void mc__oplog_each(const mc__oplog_t *l, uint32_t seg,
                    void (*cb)(void *arg, const char *rec, size_t len), void *arg);

/* Calls cb once with each segment the view keeps records of. */
void mc__oplog_each_seg(const mc__oplog_t *l, void (*cb)(void *arg, uint32_t seg), void *arg);

/* The node that last mounted segment seg, as the log says (0: it does not
 * say, as in a log of before MC__LOG_SEG_NODE, or the segment was
 * dropped). */
uint64_t mc__oplog_seg_node(const mc__oplog_t *l, uint32_t seg);

/* Calls cb with each version id that left the namespace. */
void mc__oplog_each_gone(const mc__oplog_t *l, void (*cb)(void *arg, uint64_t id), void *arg);

/*
 * The view as batches (the compacted log: a snapshot), each at most
 * chunk_max bytes unless one entry is larger: a SEG_NODE entry per
 * segment whose node the view knows, a PUT entry per record, a DROP entry
 * (segment 0) per version gone. Applying them in order to an
 * empty view gives this view back. Sets *out to an array of *n buffers,
 * each w.p the caller frees, as the array. Returns 0 or -ENOMEM.
 */
int mc__oplog_snapshot(const mc__oplog_t *l, size_t chunk_max, mc__wbuf_t **out, size_t *n);

/* Versions the view holds records of, and versions gone. */
void mc__oplog_counts(const mc__oplog_t *l, uint64_t *live, uint64_t *gone);

#endif /* MC_MASTER_OPLOG_H */
