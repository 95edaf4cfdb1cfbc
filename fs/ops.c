/*
 * ops.c - the FUSE low-level operations of mooncake-fs: which file serves
 * each one (fs_i.h), and the connection's settings (init).
 *
 * Every handler starts an asynchronous store operation and returns; the
 * reply is sent from the completion, on the same loop thread. Nothing
 * blocks. Only reply_err() (fs_i.h) turns a negative result into a FUSE
 * error reply.
 */
#include "fs.h"
#include "fs_i.h"

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    const fs_t *fs = userdata;
    /* -o max_read=N: libfuse refuses the session unless init() asks for
     * the size the mount option gave the kernel (READs of at most N bytes,
     * whatever max_pages allows). */
    conn->max_read = fs->max_read;
    conn->max_write = 1 << 20;
    conn->max_readahead = FS_MAX_READAHEAD; /* and the mount's window: bdi.c */
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
        conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    if (conn->capable & FUSE_CAP_READDIRPLUS)
        conn->want |= FUSE_CAP_READDIRPLUS;
    conn->want &= ~(unsigned)(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE |
                              FUSE_CAP_WRITEBACK_CACHE);
}

const struct fuse_lowlevel_ops fs_ops = {
    .init = op_init,
    .lookup = fs_op_lookup,
    .forget = fs_op_forget,
    .forget_multi = fs_op_forget_multi,
    .getattr = fs_op_getattr,
    .setattr = fs_op_setattr,
    .mknod = fs_op_mknod,
    .mkdir = fs_op_mkdir,
    .unlink = fs_op_unlink,
    .rmdir = fs_op_rmdir,
    .symlink = fs_op_symlink,
    .readlink = fs_op_readlink,
    .rename = fs_op_rename,
    .link = fs_op_link,
    .open = fs_op_open,
    .read = fs_op_read,
    .write = fs_op_write,
    .flush = fs_op_flush,
    .release = fs_op_release,
    .fsync = fs_op_fsync,
    .fallocate = fs_op_fallocate,
    .lseek = fs_op_lseek,
    .copy_file_range = fs_op_copy_file_range,
    .opendir = fs_op_opendir,
    .readdir = fs_op_readdir,
    .readdirplus = fs_op_readdirplus,
    .releasedir = fs_op_releasedir,
    .statfs = fs_op_statfs,
    .access = fs_op_access,
    .create = fs_op_create,
    .setxattr = fs_op_setxattr,
    .getxattr = fs_op_getxattr,
    .listxattr = fs_op_listxattr,
    .removexattr = fs_op_removexattr,
};
