/*
 * devio.c - how libfuse reads requests from and writes replies to the FUSE
 * device (fuse_session_custom_io()): a plain read() and writev(), as
 * libfuse's own, with one change: the reply to INIT asks for
 * FUSE_HANDLE_KILLPRIV_V2 when the kernel offers it, a flag libfuse 3.14
 * does not know.
 *
 * With it the kernel leaves clearing the set-user-ID and set-group-ID bits
 * on a write or a truncation by an unprivileged process to the daemon
 * (kill_set_id() in files.c, kill_set_id_on_truncate() in attrs.c; chown's
 * is the master's SET_META rule), and asks for a file's security.capability
 * (GETXATTR) once instead of before every write: one request less for
 * every write(2) but a file's first. The mount has no security.*
 * attributes to clear (xattrs.c).
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <linux/fuse.h>

#include "fs.h"

/* Notes the INIT request (its id, and whether the kernel offers the flag)
 * as it is read. */
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
            if (in->flags & FUSE_HANDLE_KILLPRIV_V2)
                fs->init_unique = ih->unique;
        }
    }
    return n;
}

/* The reply to that INIT takes the flag. */
static ssize_t dev_writev(int fd, struct iovec *iov, int count, void *userdata)
{
    fs_t *fs = userdata;
    if (fs->init_unique && count >= 2 && iov[0].iov_len >= sizeof(struct fuse_out_header) &&
        iov[1].iov_len >= offsetof(struct fuse_init_out, flags) + sizeof(uint32_t)) {
        const struct fuse_out_header *oh = iov[0].iov_base;
        if (oh->unique == fs->init_unique && oh->error == 0) {
            struct fuse_init_out *out = iov[1].iov_base;
            out->flags |= FUSE_HANDLE_KILLPRIV_V2;
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
