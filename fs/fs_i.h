/*
 * fs_i.h - what the FUSE operation files of mooncake-fs share: a request in
 * flight (fs_ctx_t) and its helpers (request.c), an open file's handle
 * (fs_fh_t), the attribute fillers (attrs.c) and the handlers that the
 * operation table (ops.c) names, by the file that holds them. The writer
 * state of a file has its own header, writers.h.
 *
 * Everything runs on the loop thread: no locks. (The workers of --threads
 * read only the views that workers.h publishes.)
 */
#ifndef FS_FS_I_H
#define FS_FS_I_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "fs.h"
#include "inode.h"
#include "mooncake/mooncake.h"

/* A request waiting for a file's writer state (writers.h): queued, then
 * run once, with 0 or the error that ended the wait. */
typedef struct fs_waiter fs_waiter_t;
struct fs_waiter {
    fs_waiter_t *next;
    int need_writer; /* 1: wants the writer open; 0: only wants it idle */
    void (*run)(fs_waiter_t *w, int err);
};

/* What a waiter woken without an error of its own runs with: 0, or, once
 * the mount stops, -ECANCELED (fs_shutdown() freed the handles it may
 * name). */
static inline int fs_woken(const fs_t *fs)
{
    return fs->stopping ? -ECANCELED : 0;
}

/* An open file (fuse_file_info.fh); every one is on fs->fhs. */
typedef struct fs_fh {
    fs_inode_t *in;
    mc_obj_t *obj; /* the version opened, for reads */
    int writable;
    int opening;          /* its version is being opened (open_done() ends it) */
    int direct;           /* with the page cache, this one reads its own version with
                             direct I/O (fs_cache_open()) */
    struct fs_view *view; /* read-only, reading fh->obj: its bytes, for the
                             workers (workers.h); atomic */
    int append;           /* O_APPEND: writes go to the end, whatever the offset */
    int err;              /* a write to the file failed while this handle was open for
                             writing: its later writes and its flushes fail with err */
    struct fs_fh *prev, *next;
} fs_fh_t;

/* Whether handle fh reads the file's current content in this mount (the
 * version in progress of its writer, else the newest version this mount
 * knows) rather than the version it opened: every handle with the page
 * cache (--cache-mode pages) but one fs_cache_open() gave direct I/O, a
 * writable one with direct I/O. */
static inline int fs_fh_follows(const fs_t *fs, const fs_fh_t *fh)
{
    return fh->writable || (!fs->direct_io && !fh->direct);
}

/* An open directory (dirs.c). */
typedef struct fs_dh fs_dh_t;

/* One request in flight. */
typedef struct fs_ctx {
    fs_waiter_t wait;
    fs_t *fs;
    fuse_req_t req;
    fs_inode_t *in;
    fs_fh_t *fh;
    fs_dh_t *dh;
    int stage;
    int kind;
    int flags;
    mode_t mode;
    uid_t uid; /* the requester's, where an operation needs them */
    gid_t gid;
    int to_set;
    struct stat attr;
    struct fuse_file_info fi;
    mc_stat_t st;
    mc_stat_t st2;
    mc_meta_t meta;
    mc_list_t *list;
    mc_space_t sp;
    mc_obj_t *obj;  /* create: the new file, open (mc_create_async()) */
    mc_writer_t *w; /* create: the writer of its next version */
    void *data;     /* owned request buffer or read buffer */
    const char *wbuf;
    size_t size;
    off_t off;
    int plus;
    char *out; /* readdir reply */
    size_t outlen;
    mc_obj_t *held; /* rename: the version it replaces, for the inode's next open */
    /* A read for the daemon's own use (fs_read_into()): its bytes go to
     * c->data and to this instead of to a reply. */
    void (*got)(struct fs_ctx *c, int rc);
    struct fs_copy *copy;           /* copy_file_range: its state (copy.c), freed with c */
    void (*next)(struct fs_ctx *c); /* unlink, rename: what runs once the files
                                       are settled (namespace.c, settle()) */
    struct fs_ctx *naming_next;     /* unlink, rename sent: on fs->naming */
    fs_waiter_t *gated;             /* operations on its keys waiting for its answer
                                       (fs_naming_gate()) */
    /* Last, and not zeroed by fs_ctx_new() (empty strings): the keys. */
    char key[MC_KEY_MAX + 2];
    size_t klen;
    char key2[MC_KEY_MAX + 2];
    size_t klen2;
} fs_ctx_t;

static inline fs_t *fs_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

/* The only place a negative result becomes a FUSE error reply (0: success). */
static inline void reply_err(fuse_req_t req, int rc)
{
    fuse_reply_err(req, rc < 0 ? -rc : rc);
}

/* ---- request.c ---- */

/* Allocates a zeroed context for req on inode in (may be NULL) and counts
 * it in flight. On ENOMEM it replies to req itself and returns NULL. Freed
 * by fs_ctx_free() or fs_ctx_fail(). */
fs_ctx_t *fs_ctx_new(fuse_req_t req, fs_inode_t *in);

/* Frees c with its listing, data and readdir buffers and counts it out of
 * flight (the context itself may be kept for the next request); does not
 * reply. */
void fs_ctx_free(fs_ctx_t *c);

/* Frees the contexts fs_ctx_free() kept (at exit, after the store). */
void fs_ctx_spares_free(fs_t *fs);

/* Replies to c's request with rc (0: success) and frees c. */
void fs_ctx_fail(fs_ctx_t *c, int rc);

/* Writes the key of name under directory inode parent to key (MC_KEY_MAX + 2
 * bytes) and its length to *klen. Returns 0, or -1 after replying to c's
 * request with the error and freeing c. */
int fs_child_key(fs_ctx_t *c, fuse_ino_t parent, const char *name, char *key, size_t *klen);

/* The options of an object this request creates (create, mkdir, mknod,
 * symlink): the name must be free, permission bits c->mode exactly, the type
 * of c->mode's S_IF* bits with device number c->attr.st_rdev, owned by
 * c->uid / c->gid. */
void fs_new_object_opts(const fs_ctx_t *c, mc_put_opts_t *po);

/* Sets the owner of an object c's request creates under directory parent
 * (a directory if is_dir): the requester, with the group of a set-group-ID parent
 * (which a new directory inherits with the bit). */
void fs_new_owner(fs_ctx_t *c, fuse_ino_t parent, int is_dir);

/* The wall clock, in nanoseconds since the epoch. */
int64_t fs_now_ns(void);

/* ---- procs.c ---- */

/* The process (thread group) of thread tid, a requester: tid itself when
 * tid is a main thread or when its process cannot be told. */
pid_t fs_proc_of(fs_t *fs, pid_t tid);

/* ---- attrs.c ---- */

/* The S_IF* bits of an MC_TYPE_* (a regular file for an unknown one). */
mode_t fs_type_bits(uint32_t type);

/* The MC_TYPE_* of the S_IF* bits of mode (a file for 0 and S_IFREG). */
uint32_t fs_type_of(mode_t mode);

/* Fills a with the attributes of inode in, from st (NULL: not known, for
 * a directory without a marker); a file's size is its open writer's when
 * there is one. */
void fs_fill_attr(fs_t *fs, fs_inode_t *in, const mc_stat_t *st, struct stat *a);

/* How long the kernel may keep attributes st: the mount's timeout, 0 for a
 * hard-linked file. */
double fs_attr_timeout(const fs_t *fs, const mc_stat_t *st);

/* A subdirectory of the directory holding key (a child's key) comes or
 * goes through this mount: its count of them is asked for again. */
void fs_subdirs_changed(fs_t *fs, const char *key, size_t klen);

/* Fills e for replying with inode in (attributes as fs_fill_attr()). */
void fs_fill_entry(fs_t *fs, fs_inode_t *in, const mc_stat_t *st, struct fuse_entry_param *e);

void fs_op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                   struct fuse_file_info *fi);
void fs_op_statfs(fuse_req_t req, fuse_ino_t ino);
void fs_op_access(fuse_req_t req, fuse_ino_t ino, int mask);

/* ---- xattrs.c ---- */

void fs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void fs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                    size_t size, int flags);
void fs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void fs_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);

/* ---- dirs.c ---- */

void fs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void fs_op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void fs_op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets);
void fs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                   struct fuse_file_info *fi);
void fs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi);
void fs_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

/* ---- namespace.c ---- */

void fs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void fs_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev);
void fs_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void fs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void fs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                  const char *newname, unsigned int flags);
void fs_op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname);
void fs_op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name);
void fs_op_readlink(fuse_req_t req, fuse_ino_t ino);

/* ---- files.c ---- */

void fs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                  struct fuse_file_info *fi);
void fs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void fs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                 struct fuse_file_info *fi);
void fs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
/* ---- files.c ---- */

/* A context for a request that changes the version in progress through
 * handle fh (write, fallocate): the handle must be open for writing and not
 * failed (else it replies EBADF or the failure and returns NULL). The
 * requester may publish at close (fs_ws_add_owner()); c->fh is fh and
 * c->wait needs the writer. */
fs_ctx_t *fs_write_ctx(fuse_req_t req, fs_fh_t *fh);

/* ---- cache.c (--cache-mode pages) ---- */

/* Finishes the open of handle fh (its version open in fh->obj; created: by
 * this create) on file in: tells the kernel (fi) to keep or drop the pages
 * and size it has, and moves the version to the inode (in->cur) or closes
 * it: fh->obj is NULL after. A reader that found another version than
 * other descriptors read keeps it and gets direct I/O (fh->direct). */
void fs_cache_open(fs_t *fs, fs_inode_t *in, fs_fh_t *fh, int created, struct fuse_file_info *fi);

/* A version of in was published from this mount (its writes are what the
 * page cache holds); closing: how many of the file's handles here the
 * close of a descriptor published from (FLUSH: they usually go next). */
void fs_cache_published(fs_t *fs, fs_inode_t *in, uint64_t version, int closing);

/* The last handle of in closed: lets go of its version. */
void fs_cache_unpin(fs_t *fs, fs_inode_t *in);

/* Before the file's name goes (an unlink or a rename through this mount):
 * when descriptors of in open here read through the page cache and no
 * version is open for their misses (in->cur), opens the current one now,
 * while its key names it, and returns 1: w runs once it is open (or could
 * not be). Else returns 0 (none needed). */
int fs_cache_pin(fs_t *fs, fs_inode_t *in, fs_waiter_t *w);

/* ---- namespace.c ---- */

/*
 * Whether an unlink or a rename this mount sent is on its way to the master
 * for key (a file's; NULL: none) or a directory above it: then w runs (err
 * 0) once its answer is in and the inodes' keys follow it (a key moved, or
 * NULL: gone), and this returns 1; else 0. An operation that names a file
 * by its key at the master (a commit, a writer copying the file, an open
 * by key) goes through this first: sent meanwhile, it would reach the
 * master after the unlink or rename, under a key that names nothing, or
 * another file, by then (a commit made the unlinked file again; a rename's
 * file lost its writer's bytes to a new file under the old name).
 */
int fs_naming_gate(fs_t *fs, const char *key, size_t klen, fs_waiter_t *w);

/* Runs w (a read that missed the cache) once in->cur is open, opening it;
 * or returns -errno when it cannot be opened (the file was unlinked). */
int fs_cache_wait(fs_t *fs, fs_inode_t *in, fs_waiter_t *w);

/* ---- files.c: reads for the daemon's own use ---- */

/* Reads c->size bytes at c->off through handle c->fh (c->in its inode) as
 * a READ of it would (the content a read through it sees, once settled:
 * fs_wb_settled()) into c->data (allocated here if NULL, c->size bytes: a
 * later call on the same c must not ask for more),
 * then calls got(c, bytes read, short at the end; or -errno) instead of
 * replying. */
void fs_read_into(fs_ctx_t *c, void (*got)(fs_ctx_t *c, int rc));

/* A write by c->uid to file c->in, whose writer is open: clears the
 * set-ID bits a write by that user clears. Returns 1 when the write must
 * wait for that (c->wait runs again when it is done), else 0. */
int fs_kill_set_id(fs_ctx_t *c);

/* ---- copy.c ---- */

void fs_op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
                           struct fuse_file_info *fi_in, fuse_ino_t ino_out, off_t off_out,
                           struct fuse_file_info *fi_out, size_t len, int flags);

/* ---- fallocate.c ---- */

void fs_op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi);
void fs_op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                     struct fuse_file_info *fi);

#endif /* FS_FS_I_H */
