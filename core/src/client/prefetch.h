/*
 * prefetch.h - read-ahead of an open version (mc_obj_t) whose bytes lie on
 * another node (prefetch.c): sequential reads are detected per open
 * version, and a window of blocks ahead of the reader is fetched with
 * several transfers in flight, then served to later reads from memory.
 * Bounded per open version (mc_store_opts_t.readahead_max) and per store
 * (readahead_total). Loop thread only.
 */
#ifndef MC_CLIENT_PREFETCH_H
#define MC_CLIENT_PREFETCH_H

#include "client/store_i.h"

/* The size of one block fetched ahead: one transfer. */
#define MC__RA_BLOCK (1u << 20)
#define MC__RA_MAX_DEFAULT (8ULL << 20)     /* per open version */
#define MC__RA_TOTAL_DEFAULT (256ULL << 20) /* per store */

/*
 * Runs an OP_OBJ_READ: from the blocks read ahead when the read continues
 * a sequential stream on a remote replica (fetching the window ahead of
 * it), else straight from the replicas as a plain read. Completes o with
 * mc__op_finish(): the count read, or -errno.
 */
void mc__ra_read(op_t *o);

/* After the callback of a read of mc_obj_peek_async() (o->dcb) returned:
 * gives back the blocks it was lent, or frees the buffer it was read into. */
void mc__ra_unlend(op_t *o);

/* The version ob is being closed: frees its read-ahead blocks; blocks still
 * in flight are freed when their transfers end (which hold the replica set:
 * the caller may free ob's). */
void mc__ra_close(mc_obj_t *ob);

/* At store close, after the loop stopped: frees every read-ahead state
 * left, with its blocks and replica sets. */
void mc__ra_free_all(mc_store_t *s);

#endif /* MC_CLIENT_PREFETCH_H */
