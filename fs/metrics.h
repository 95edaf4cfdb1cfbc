/*
 * metrics.h - mooncake-fs's metrics: FUSE requests counted by opcode as
 * they arrive, and the scrape of the daemon (its requests, then its
 * store's metrics). Loop thread only.
 */
#ifndef FS_METRICS_H
#define FS_METRICS_H

#include "fs.h"
#include "mooncake/metrics.h"

/* Counts the request in buf (rc bytes, as fuse_session_receive_buf()
 * returned) by its opcode. */
void fs_metrics_count(const struct fuse_buf *buf, int rc);

/* The daemon's scrape (an mc_metrics_cb; arg is the fs_t): FUSE requests
 * by opcode, requests in flight, the store's metrics. Serving while the
 * store is open and the session mounted. */
int fs_metrics_collect(void *arg, mc_metrics_t *m);

#endif /* FS_METRICS_H */
