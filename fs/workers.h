/*
 * workers.h - the threads that read FUSE requests besides the loop
 * (--threads N: N - 1 of them) and answer the READs they can by
 * themselves, straight from segment memory; every other request goes to
 * the loop thread unchanged. docs/ARCHITECTURE.md ("Threads") says why.
 */
#ifndef FS_WORKERS_H
#define FS_WORKERS_H

#include "fs.h"
#include "fs_i.h"
#include "inode.h"

/* The bytes of one open version, as pieces of memory this process
 * addresses; what a worker replies a READ from. Built and freed on the
 * loop thread; read by the workers. */
typedef struct fs_view fs_view_t;

/* Starts n worker threads reading the session's device (fs->se; the loop
 * keeps reading it too). Call on the loop thread after the mount, with the
 * signals the loop takes blocked (the threads inherit the mask). Returns 0
 * (n == 0 starts none) or -errno (none left running). */
int fs_workers_start(fs_t *fs, unsigned n);

/* Stops and joins the workers: none reads a request or a view after it
 * returns. Requests they handed to the loop and that have not run yet are
 * dropped when they run (fs->stopping). Loop thread; idempotent. */
void fs_workers_stop(fs_t *fs);

/* READs answered by the workers (for the metrics). Any thread. */
uint64_t fs_workers_reads(const fs_t *fs);

/* Handle fh (read-only) reads exactly its version fh->obj for as long as
 * it is open: lets the workers answer its READs when the bytes all lie in
 * memory this process addresses. Loop thread; no-op without workers. */
void fs_view_publish_fh(fs_t *fs, fs_fh_t *fh);

/* Inode in's page-cache misses (--cache-mode pages) are read from version
 * o (in->cur), and in has no writer state: lets the workers answer them.
 * o == NULL, or a writer state that appears, withdraws it (call before
 * o is closed). Loop thread. */
void fs_view_publish_inode(fs_t *fs, fs_inode_t *in, mc_obj_t *o);

/* Withdraws what fs_view_publish_fh() published for fh; returns after no
 * worker reads it any more. Loop thread. */
void fs_view_withdraw_fh(fs_t *fs, fs_fh_t *fh);

#endif /* FS_WORKERS_H */
