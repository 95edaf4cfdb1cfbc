/*
 * metrics.c - mooncake-fs's metrics (metrics.h). The opcodes are the
 * kernel's (<linux/fuse.h>, a stable ABI), named here so that older
 * headers still name newer opcodes.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "metrics.h"
#include "workers.h"

#define OPCODES 52
#define FUSE_READ_OPCODE 15 /* below FUSE_STATX; others are counted as "other" */

static const char *const opcode_names[OPCODES] = {
    [1] = "LOOKUP",        [2] = "FORGET",         [3] = "GETATTR",
    [4] = "SETATTR",       [5] = "READLINK",       [6] = "SYMLINK",
    [8] = "MKNOD",         [9] = "MKDIR",          [10] = "UNLINK",
    [11] = "RMDIR",        [12] = "RENAME",        [13] = "LINK",
    [14] = "OPEN",         [15] = "READ",          [16] = "WRITE",
    [17] = "STATFS",       [18] = "RELEASE",       [20] = "FSYNC",
    [21] = "SETXATTR",     [22] = "GETXATTR",      [23] = "LISTXATTR",
    [24] = "REMOVEXATTR",  [25] = "FLUSH",         [26] = "INIT",
    [27] = "OPENDIR",      [28] = "READDIR",       [29] = "RELEASEDIR",
    [30] = "FSYNCDIR",     [31] = "GETLK",         [32] = "SETLK",
    [33] = "SETLKW",       [34] = "ACCESS",        [35] = "CREATE",
    [36] = "INTERRUPT",    [37] = "BMAP",          [38] = "DESTROY",
    [39] = "IOCTL",        [40] = "POLL",          [41] = "NOTIFY_REPLY",
    [42] = "BATCH_FORGET", [43] = "FALLOCATE",     [44] = "READDIRPLUS",
    [45] = "RENAME2",      [46] = "LSEEK",         [47] = "COPY_FILE_RANGE",
    [48] = "SETUPMAPPING", [49] = "REMOVEMAPPING", [50] = "SYNCFS",
    [51] = "TMPFILE",
};

/* Requests by opcode; [0]: opcodes without a name here. Loop thread. */
static uint64_t requests[OPCODES];

void fs_metrics_count(const struct fuse_buf *buf, int rc)
{
    uint32_t opcode = 0;
    /* struct fuse_in_header: u32 len, u32 opcode, ... */
    if (!(buf->flags & FUSE_BUF_IS_FD) && rc >= 8 && buf->mem)
        memcpy(&opcode, (const char *)buf->mem + 4, sizeof(opcode));
    requests[opcode < OPCODES && opcode_names[opcode] ? opcode : 0]++;
}

int fs_metrics_collect(void *arg, mc_metrics_t *m)
{
    fs_t *fs = arg;
    if (!fs->store || fuse_session_exited(fs->se))
        return -ESHUTDOWN;
    char labels[48];
    mc_metrics_family(m, "mooncake_fuse_requests_total", "counter",
                      "FUSE requests received, by opcode.");
    for (int op = 0; op < OPCODES; op++) {
        /* READs answered by the workers of --threads count too */
        uint64_t n = requests[op] + (op == FUSE_READ_OPCODE ? fs_workers_reads(fs) : 0);
        if (n) {
            snprintf(labels, sizeof(labels), "opcode=\"%s\"", op ? opcode_names[op] : "other");
            mc_metrics_sample(m, "mooncake_fuse_requests_total", labels, n);
        }
    }
    mc_metrics_family(m, "mooncake_fuse_worker_reads_total", "counter",
                      "READs answered straight from memory by the other threads of --threads.");
    mc_metrics_sample(m, "mooncake_fuse_worker_reads_total", NULL, fs_workers_reads(fs));
    mc_metrics_family(m, "mooncake_fuse_requests_in_flight", "gauge",
                      "FUSE requests started and not yet answered.");
    mc_metrics_sample(m, "mooncake_fuse_requests_in_flight", NULL, fs->inflight);
    return mc_metrics_store(m, fs->store);
}
