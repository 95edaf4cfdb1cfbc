/*
 * writers.h - the writer state of a file (writers.c): all writable handles
 * of a file share one, which opens a store writer on first use (copy-on-
 * write from the current version), publishes it at close, and fails every
 * writable handle when a write of the version in progress fails.
 *
 * A handle or an operation that uses a state holds it (ws->handles++); the
 * state is freed by fs_ws_settle() once nothing holds it and nothing is in
 * flight, but for a file with no name left (unlinked, renamed over), whose
 * version in progress stays while any handle of the file is open, read-only
 * ones too: it is the file's content. Runs on the loop thread only; no
 * locks.
 */
#ifndef FS_WRITERS_H
#define FS_WRITERS_H

#include <sys/types.h>

#include "fs.h"
#include "fs_i.h"
#include "inode.h"
#include "mooncake/mooncake.h"

/* NONE: no writer. OPENING: mc_writer_open in flight. READY: the writer
 * takes writes. COMMITTING: a commit waits for the operations in flight, or
 * is in flight. FAILING: an operation failed; the writer is aborted when the
 * operations in flight end. */
enum ws_state { WS_NONE, WS_OPENING, WS_READY, WS_COMMITTING, WS_FAILING };

typedef struct fs_wstate {
    fs_t *fs;
    fs_inode_t *in;
    mc_writer_t *w;
    mc_obj_t *base;         /* the version the writer copies, while it opens */
    int base_lent;          /* base is the inode's cur, lent: cur_set() hands it
                               over (base_lent 0) instead of closing it */
    mc_obj_t *kept;         /* the version the file's key named when its last name
                               went with no writer open (fs_ws_before_unnamed()):
                               what a writer opened afterwards copies, unless
                               the page cache holds the inode's cur (that) */
    fs_waiter_t *kept_wait; /* waiting for kept's open */
    enum ws_state state;
    int handles;   /* writable handles plus operations holding the state */
    int ops;       /* writer operations (write, read, truncate) in flight */
    int err;       /* why the version failed, while FAILING */
    int dirty;     /* the writer holds changes not yet published */
    int fresh;     /* the next writer starts empty instead of copying */
    int newest;    /* the next writer copies the version the key names, not
                      the one the page cache holds (a truncate by path) */
    int foreign;   /* the version in progress copies another version than the
                      page cache holds (--cache-mode pages): its publish leaves
                      what the cache holds unknown (in->version 0) */
    mc_stat_t st;  /* filled by the commit */
    uint64_t size; /* while COMMITTING: the size it publishes */
    fs_waiter_t *wait_head, *wait_tail;
    fs_waiter_t *committers;  /* flushes waiting for the commit in flight */
    int closing;              /* how many of them are a descriptor's close (FLUSH) */
    fs_waiter_t gate;         /* the base's open or the commit, waiting for an
                                 unlink or rename of the file (fs_naming_gate()) */
    uint64_t behind;          /* bytes of writes answered while in flight (wbehind.c) */
    fs_waiter_t *behind_wait; /* waiting for them to land (fs_wb_wait()) */
    pid_t owners[8];          /* processes that opened it for writing or wrote */
    int nowners;
    struct fs_wstate *prev, *next;
} fs_wstate_t;

/* The writer state of inode in, created (state NONE, held by nobody) if it
 * has none. Returns NULL on ENOMEM. */
fs_wstate_t *fs_ws_get(fs_t *fs, fs_inode_t *in);

/* Makes w, a writer opened with the file (mc_create_async()), the one of
 * ws, which has none (state NONE, nobody waiting): state READY, and dirty,
 * as a file made afresh publishes at close. */
void fs_ws_adopt(fs_wstate_t *ws, mc_writer_t *w);

/* The size of the version in progress that ws holds (state READY or
 * COMMITTING: the size the writes made, which the kernel has), or -1
 * when it holds none. */
int64_t fs_ws_size(const fs_wstate_t *ws);

/* Records the process of req as one whose close may publish the file. */
void fs_ws_add_owner(fs_wstate_t *ws, fuse_req_t req);

/* Whether a close from req's process may publish (fs_ws_add_owner()). */
int fs_ws_is_owner(const fs_wstate_t *ws, fuse_req_t req);

/* Runs w (now or later, exactly once) with the writer open, opening it if
 * needed; err is the error that opening it gave. */
void fs_ws_need(fs_wstate_t *ws, fs_waiter_t *w);

/* Whether the state is opening, committing or failing. */
int fs_ws_busy(const fs_wstate_t *ws);
/* Runs w (now or later, exactly once) when the state is neither opening,
 * committing nor failing. */
void fs_ws_when_idle(fs_wstate_t *ws, fs_waiter_t *w);

/* Frees the state, after publishing or dropping what its writer holds, if
 * nothing holds it and nothing is in flight (and, for a file with no name
 * left, no handle of the file is open); else does nothing. */
void fs_ws_settle(fs_wstate_t *ws);

/* Publishes the writer (state READY, dirty) once its operations in flight
 * end, and once no unlink or rename of the file is on its way; for a file
 * that has no name left then, goes back to READY, publishing nothing. The
 * waiters on ws->committers run with the result (0 for the latter). */
void fs_ws_commit(fs_wstate_t *ws);

/* Counts a writer operation (write, read, truncate) starting on a READY
 * state; fs_ws_op_done() ends it with its result. */
void fs_ws_op_start(fs_wstate_t *ws);
void fs_ws_op_done(fs_wstate_t *ws, int rc);

/* Fails the version in progress: every handle open for writing on the
 * file fails its later writes and flushes with rc. */
void fs_ws_poison(fs_wstate_t *ws, int rc);

/* The error that failed the version a writable handle wrote to, or 0. */
int fs_fh_err(const fs_fh_t *fh);

/* The name of in is about to go (an unlink, or a rename over it), and with
 * it the file's last name: when handles are open for writing and none has
 * written since the last publish (no writer), opens the version its key
 * still names and keeps it (ws->kept), for the writer their first write
 * opens to copy: their writes then change the file's bytes instead of an
 * empty file's (a writer opened afterwards has no key to copy from). An
 * open handle, not a writer: it holds no write lease. Returns 1 when it
 * does (w runs once the open is done, or failed), else 0. */
int fs_ws_before_unnamed(fs_inode_t *in, fs_waiter_t *w);

/* At unmount, after every handle is gone: aborts every idle writer and
 * frees its state. Writers with an operation in flight are left to finish
 * (their callbacks come while the store closes); with store_closed (after
 * mc_store_close(), when the store has freed every writer) the states
 * left are freed without touching their writers. */
void fs_ws_shutdown(fs_t *fs, int store_closed);

/* ---- write-behind (wbehind.c) ---- */

/* Answers write c (its writer operation started) at once when it is
 * sequential (at end, the size of the version in progress before it) and
 * the bounds of write-behind allow it: the bytes are still in flight, the
 * state held until they land (fs_wb_done()). Returns 1 if answered, else
 * 0: answer it when it ends, as before. */
int fs_wb_answer(fs_ctx_t *c, uint64_t end);

/* The writer operation of write c ended with rc: returns 0 if c was not
 * answered by fs_wb_answer() (the caller answers), else ends it (a failure
 * fails the version: the next write, fsync or close reports it) and
 * returns 1. */
int fs_wb_done(fs_ctx_t *c, int rc);

/* Runs w (now or later, exactly once) when no write of ws is behind (every
 * answered write landed or failed) and the state is idle
 * (fs_ws_when_idle()). New writes are not answered early while w waits. */
void fs_wb_wait(fs_wstate_t *ws, fs_waiter_t *w);

/* Runs request c (c->fh's) with run, now or later: once what a read through
 * its handle sees has settled, when the handle follows its file's writer
 * (fs_fh_follows()): after the writes behind, with the writer idle
 * (fs_wb_wait()). Reads and lseek go through here. */
void fs_wb_settled(fs_ctx_t *c, void (*run)(fs_waiter_t *w, int err));

/* Sets the bounds of read-ahead (in so) and write-behind (in fs) from
 * opt[]: --readahead, --total-readahead, --write-behind and
 * --total-write-behind, each NULL for its default (write-behind: none on an
 * embedded mount, cluster 0). Returns 0, or -1 after saying what is wrong. */
int fs_stream_options(fs_t *fs, mc_store_opts_t *so, int cluster, const char *const opt[4]);

#endif /* FS_WRITERS_H */
