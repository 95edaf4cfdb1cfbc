/*
 * fs.h - the mooncake-fs daemon's state, shared by main.c (options, session,
 * event loop) and the FUSE operations (the table in ops.c; what the
 * operation files share among themselves is in fs_i.h).
 */
#ifndef FS_FS_H
#define FS_FS_H

#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>
#include <sys/types.h>

#include "inode.h"
#include "mooncake/mooncake.h"

/* The kernel's readahead for the mount's files: max_readahead (ops.c) and
 * the window of the mount's device (bdi.c). */
#define FS_MAX_READAHEAD (1u << 20)

/* The largest READ the kernel is asked for, in pages (devio.c): 2 MiB, so
 * that a 1 MiB read(2) into a buffer that does not start a page (malloc's
 * 1 MiB blocks start 16 bytes in) is one request, not one of 1 MiB less 16
 * bytes and one of 16. The kernel grants at most its max_pages_limit
 * (/proc/sys/fs/fuse/max_pages_limit: 256 pages by default, 1 MiB). WRITEs
 * stay at max_write (1 MiB, the receive buffer's size). */
#define FS_MAX_PAGES 512

struct fs_fh;
struct fs_dh;
struct fs_wstate;
struct fs_workers;

/* The main threads of processes that made requests (procs.c). */
#define FS_LEADERS 8
struct fs_leader {
    pid_t pid; /* 0: an empty entry */
    int pidfd; /* pid's, polled until the process exits */
    mc_poll_t poll;
};

typedef struct fs {
    mc_store_t *store;
    mc_loop_t *loop;
    fs_itable_t *it;
    struct fuse_session *se;
    double timeout;    /* entry and attribute cache time, seconds */
    int direct_io;     /* --cache direct: no page cache for file content */
    uint32_t replicas; /* replicas of each file written */
    uid_t uid;
    gid_t gid;
    int64_t start_ns;       /* mtime of directories without a marker */
    struct fuse_buf rbuf;   /* the request being processed */
    int rbuf_taken;         /* a handler kept rbuf.mem; receive into a new one */
    struct fs_fh *fhs;      /* every open file handle, for shutdown */
    struct fs_dh *dhs;      /* every open directory handle, for exit (dirs.c) */
    struct fs_wstate *wss;  /* every writer state, for shutdown */
    struct fs_ctx *naming;  /* unlinks and renames sent, not answered (namespace.c) */
    unsigned long inflight; /* requests started and not yet answered, and writes
                               answered while their bytes are in flight (wbehind.c) */
    struct fs_ctx *spare;   /* freed request contexts kept for the next ones */
    unsigned nspare;
    int stopping;                         /* shutting down: no more requests are read */
    unsigned threads;                     /* --threads: the loop and N - 1 workers */
    unsigned max_read;                    /* -o max_read=N: the largest READ, bytes (0: no limit) */
    struct fs_workers *workers;           /* --threads: the other threads reading requests */
    uint64_t worker_reads;                /* READs they answered, once stopped */
    uint64_t wb_max;                      /* write-behind per file, bytes (0: none; wbehind.c) */
    uint64_t wb_total;                    /* write-behind of the whole mount, bytes */
    uint64_t wb_used;                     /* bytes of writes answered and still in flight */
    int init_seen;                        /* INIT was read (devio.c) */
    uint64_t init_unique;                 /* its id, while its reply is to be amended */
    uint32_t init_offered;                /* what the reply is to ask for that INIT offered */
    struct fs_leader leaders[FS_LEADERS]; /* procs.c */
    unsigned leader_next;                 /* the entry to take next */
} fs_t;

/* The FUSE low-level operations of the daemon. */
extern const struct fuse_lowlevel_ops fs_ops;

/* Takes ownership of the current request buffer: the caller free()s it
 * when done. In request.c. */
void *fs_take_request_buffer(fs_t *fs);

/* Raises the kernel's readahead window for the files mounted at mountpoint
 * (absolute, resolved: as fuse_parse_cmdline() gives it; mounted already)
 * to kib KiB, when this process may (root); else leaves it. In bdi.c. */
void fs_kernel_readahead(const char *mountpoint, unsigned kib);

/* Has libfuse read and write the session's device through devio.c (the
 * INIT reply asks for FUSE_HANDLE_KILLPRIV_V2). Call after the mount.
 * Returns 0, or -1 (libfuse's own I/O stays). */
int fs_devio_install(fs_t *fs);

/* Closes the pidfds of the processes fs_proc_of() (fs_i.h) kept, at exit
 * after the loop (their polls went with it). In procs.c. */
void fs_procs_close(fs_t *fs);

/* Frees the directory handles still open at exit, after the store is
 * closed (no listing of theirs can complete then): the kernel drops a
 * RELEASEDIR that the daemon had not read when the file system was
 * unmounted. In dirs.c. */
void fs_dirs_close(fs_t *fs);

/* Releases every open handle and writer, at unmount. In files.c. */
void fs_shutdown(fs_t *fs);

#endif /* FS_FS_H */
