/*
 * devio.c - how libfuse reads requests from and writes replies to the FUSE
 * device (fuse_session_custom_io()): a plain read() and writev(), as
 * libfuse's own, with one change: the reply to INIT asks for what libfuse
 * 3.14 does not, when the kernel offers it:
 *
 * - FUSE_HANDLE_KILLPRIV_V2, a flag libfuse 3.14 does not know. With it
 *   the kernel leaves clearing the set-user-ID and set-group-ID bits on a
 *   write or a truncation by an unprivileged process to the daemon
 *   (fs_kill_set_id() in files.c, kill_set_id_on_truncate() in attrs.c;
 *   chown's is the master's SET_META rule), and asks for a file's
 *   security.capability (GETXATTR) once instead of before every write: one
 *   request less for every write(2) but a file's first. The mount has no
 *   security.* attributes to clear (xattrs.c).
 * - max_pages FS_MAX_PAGES (fs.h) instead of libfuse's 256, which it derives
 *   from max_write and its receive buffer: READs of up to 2 MiB (replies
 *   need no receive buffer; WRITEs stay bounded by max_write).
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <linux/fuse.h>

#include "fs.h"

/* Notes the INIT request (its id, and what the kernel offers of what its
 * reply is to ask for) as it is read. */
static ssize_t dev_read(int fd, void *buf, size_t len, void *userdata)
{
    fs_t *fs = userdata;
    ssize_t n = read(fd, buf, len);
    const size_t need =
        sizeof(struct fuse_in_header) + offsetof(struct fuse_init_in, flags) + sizeof(uint32_t);
    if (n >= (ssize_t)need && !fs->init_seen) {
        const struct fuse_in_header *ih = buf;
        const struct fuse_init_in *in = (const void *)(ih + 1);
        if (ih->opcode == FUSE_INIT) {
            fs->init_seen = 1;
            fs->init_offered = in->flags & (FUSE_HANDLE_KILLPRIV_V2 | FUSE_MAX_PAGES);
            if (fs->init_offered)
                fs->init_unique = ih->unique;
        }
    }
    return n;
}

/* The reply to that INIT takes them. */
static ssize_t dev_writev(int fd, struct iovec *iov, int count, void *userdata)
{
    fs_t *fs = userdata;
    if (fs->init_unique && count >= 2 && iov[0].iov_len >= sizeof(struct fuse_out_header) &&
        iov[1].iov_len >= offsetof(struct fuse_init_out, flags) + sizeof(uint32_t)) {
        const struct fuse_out_header *oh = iov[0].iov_base;
        if (oh->unique == fs->init_unique && oh->error == 0) {
            struct fuse_init_out *out = iov[1].iov_base;
            out->flags |= fs->init_offered & FUSE_HANDLE_KILLPRIV_V2;
            if ((fs->init_offered & FUSE_MAX_PAGES) &&
                iov[1].iov_len >= offsetof(struct fuse_init_out, max_pages) + sizeof(uint16_t) &&
                (!(out->flags & FUSE_MAX_PAGES) || out->max_pages < FS_MAX_PAGES)) {
                out->flags |= FUSE_MAX_PAGES;
                out->max_pages = FS_MAX_PAGES;
            }
            fs->init_unique = 0;
        }
    }
    return writev(fd, iov, count);
}

int fs_devio_install(fs_t *fs)
{
    static const struct fuse_custom_io io = {.read = dev_read, .writev = dev_writev};
    return fuse_session_custom_io(fs->se, &io, fuse_session_fd(fs->se)) == 0 ? 0 : -1;
}
