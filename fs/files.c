/*
 * files.c - open files: create, open (O_TRUNC through the file's writer),
 * read, write, flush (publishes), release and fsync, and the handles
 * (fs_fh_t) they share. Writes go through the file's writer state
 * (writers.c). With the page cache (cache.c) reads the kernel's cache
 * misses come from the content it holds; with --cache-mode direct a handle
 * reads the version it opened, or, open for writing, its writer.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "fs.h"
#include "fs_i.h"
#include "inode.h"
#include "workers.h"
#include "writers.h"

/* ---- handles, open, create, release ---- */

static fs_fh_t *fh_new(fs_t *fs, fs_inode_t *in, int writable)
{
    fs_fh_t *fh = calloc(1, sizeof(*fh));
    if (!fh)
        return NULL;
    if (writable) {
        fs_wstate_t *ws = fs_ws_get(fs, in);
        if (!ws) {
            free(fh);
            return NULL;
        }
        ws->handles++;
    }
    fh->in = in;
    fh->writable = writable;
    fh->next = fs->fhs;
    if (fs->fhs)
        fs->fhs->prev = fh;
    fs->fhs = fh;
    in->opens++;
    return fh;
}

static void fh_free(fs_t *fs, fs_fh_t *fh)
{
    if (fh->prev)
        fh->prev->next = fh->next;
    else
        fs->fhs = fh->next;
    if (fh->next)
        fh->next->prev = fh->prev;
    fs_view_withdraw_fh(fs, fh);
    if (fh->obj)
        mc_obj_close(fh->obj);
    fs_inode_t *in = fh->in;
    int writable = fh->writable;
    free(fh);
    if (--in->opens == 0)
        fs_cache_unpin(fs, in); /* no reads without a handle */
    if (!in->ws)
        return fs_inode_maybe_free(fs->it, in);
    if (writable)
        in->ws->handles--;
    /* The last close of a file with no name drops its bytes; a state
     * freed frees the inode it held when nothing else does (ws_free()). */
    fs_ws_settle(in->ws);
}

static int is_writable(int flags)
{
    return (flags & O_ACCMODE) != O_RDONLY;
}

/* The version is open: finish an open (kind 0) or a create (kind 1). */
static void open_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    fs_fh_t *fh = c->fh;
    fs_inode_t *in = c->in;
    fh->opening = 0;
    if (rc == 0 && c->fs->stopping)
        rc = -ECANCELED; /* fs_shutdown() left this handle to us */
    /* The file the kernel looked up went (unlinked or replaced, here or by
     * another client) between its lookup and this open: ESTALE makes it
     * look the path up again once, and open what is there now, or make it
     * (O_CREAT), as on a local file system. ENOENT would fail an
     * open(O_CREAT) of a name that exists or can be made. */
    if (rc == -ENOENT)
        rc = -ESTALE;
    if (rc < 0) {
        fh_free(c->fs, fh);
        if (c->kind == 1)
            fs_inode_forget(c->fs->it, in, 1);
        return fs_ctx_fail(c, rc);
    }
    c->st = *mc_obj_stat(fh->obj);
    const mc_stat_t *st = &c->st;
    c->fi.fh = (uintptr_t)fh;
    fh->append = (c->fi.flags & O_APPEND) != 0;
    if (c->fs->direct_io) {
        /* --cache-mode direct: the kernel keeps one page cache and one size per
         * inode, and a writer's O_TRUNC and writes change them under every
         * reader of that inode. So each handle does direct I/O: it reads
         * exactly the version it opened, whatever is published meanwhile. */
        c->fi.direct_io = 1;
        in->version = st->version;
    } else {
        fs_cache_open(c->fs, in, fh, c->kind == 1, &c->fi);
    }
    /* A read-only handle has nothing to publish at close (fs_op_flush()
     * answers 0 at once): the kernel skips FLUSH, one round trip of every
     * open-read-close (FOPEN_NOFLUSH). */
    c->fi.noflush = !fh->writable;
    fs_view_publish_fh(c->fs, fh); /* before the kernel can read through it */
    in->st = *st;
    if (c->kind == 1) {
        struct fuse_entry_param e;
        fs_fill_entry(c->fs, in, &in->st, &e);
        if (fuse_reply_create(c->req, &e, &c->fi) < 0) {
            fh_free(c->fs, fh);
            fs_inode_forget(c->fs->it, in, 1);
        }
    } else if (fuse_reply_open(c->req, &c->fi) < 0) {
        fh_free(c->fs, fh);
    }
    fs_ctx_free(c);
}

static void open_replaced(fs_ctx_t *c);

/* An open (kind 0) or a create (kind 1) fails with rc before it has a
 * handle: a create's inode drops the lookup its reply would have given
 * the kernel (as open_done() does). ENOENT here means the file went
 * (its directory was there): ESTALE, as in open_done(). */
static void open_fail(fs_ctx_t *c, int rc)
{
    if (c->kind == 1)
        fs_inode_forget(c->fs->it, c->in, 1);
    fs_ctx_fail(c, rc == -ENOENT ? -ESTALE : rc);
}

static void open_version_gated(fs_waiter_t *w, int err);

static void open_version(fs_ctx_t *c)
{
    c->wait.run = open_version_gated;
    if (fs_naming_gate(c->fs, c->in->key, c->in->klen, &c->wait))
        return;      /* an unlink or rename of it on its way: then what it left */
    if (!c->in->key) /* unlinked or replaced while the open waited (O_TRUNC) */
        return c->kind == 1 ? open_fail(c, -ESTALE) : open_replaced(c);
    int writable = is_writable(c->fi.flags);
    c->fh = fh_new(c->fs, c->in, writable);
    if (!c->fh)
        return open_fail(c, -ENOMEM);
    if (writable)
        fs_ws_add_owner(c->in->ws, c->req);
    c->fh->opening = 1;
    int rc = mc_obj_open_async(c->fs->store, c->in->key, c->in->klen, &c->fh->obj, open_done, c);
    if (rc < 0)
        open_done(c, rc);
}

static void open_version_gated(fs_waiter_t *w, int err)
{
    if (err < 0)
        return open_fail((fs_ctx_t *)w, err);
    open_version((fs_ctx_t *)w);
}

/* An open of a file a rename through this mount replaced since the kernel
 * looked it up (fs_op_open()): reading, it gets the version the rename
 * replaced (namespace.c keeps it on the inode for one such open); writing,
 * or once that version is taken, ESTALE: the kernel then looks the path up
 * again and opens what is there now. */
static void open_replaced(fs_ctx_t *c)
{
    fs_inode_t *in = c->in;
    if (!in->held || is_writable(c->fi.flags) || (c->fi.flags & O_TRUNC))
        return fs_ctx_fail(c, -ESTALE);
    c->fh = fh_new(c->fs, in, 0);
    if (!c->fh)
        return fs_ctx_fail(c, -ENOMEM);
    c->fh->obj = in->held;
    in->held = NULL;
    open_done(c, 0);
}

static void open_truncated(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    fs_wstate_t *ws = c->in->ws;
    fs_ws_op_done(ws, rc);
    if (rc < 0)
        open_fail(c, rc);
    else
        open_version(c); /* takes its handle before ours goes */
    ws->handles--;
    fs_ws_settle(ws);
}

static void open_trunc_ready(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    if (err < 0)
        return open_fail(c, err);
    open_version(c);
}

/* O_TRUNC: the file is written afresh; readers keep seeing the old content
 * until the new version is published at close. */
static void open_trunc_writer(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    if (err < 0)
        return open_fail(c, err);
    c->wait.run = open_trunc_writer;
    if (fs_naming_gate(c->fs, c->in->key, c->in->klen, &c->wait))
        return; /* an unlink or rename of it on its way: truncate what it left */
    if (!c->in->key)
        return c->kind == 1 ? open_fail(c, -ESTALE) : open_replaced(c);
    fs_wstate_t *ws = fs_ws_get(c->fs, c->in);
    if (!ws)
        return open_fail(c, -ENOMEM);
    ws->dirty = 1;
    if (ws->state == WS_READY) {
        ws->handles++;
        fs_ws_op_start(ws);
        int rc = mc_writer_truncate_async(ws->w, 0, open_truncated, c);
        if (rc < 0)
            open_truncated(c, rc);
        return;
    }
    ws->fresh = 1;
    c->wait.need_writer = 1;
    c->wait.run = open_trunc_ready;
    fs_ws_need(ws, &c->wait);
}

void fs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fs_inode_t *in = fs_inode_get(fs_of(req)->it, ino);
    if (!in)
        return reply_err(req, -ESTALE); /* gone: the kernel looks again */
    if (in->is_dir)
        return reply_err(req, -EISDIR);
    fs_ctx_t *c = fs_ctx_new(req, in);
    if (!c)
        return;
    c->fi = *fi;
    if (!in->key)
        return open_replaced(c); /* unlinked or replaced since the lookup */
    if ((fi->flags & O_TRUNC) && is_writable(fi->flags)) {
        c->wait.need_writer = 0;
        c->wait.run = open_trunc_writer;
        if (in->ws)
            return fs_ws_when_idle(in->ws, &c->wait);
        return open_trunc_writer(&c->wait, 0);
    }
    open_version(c);
}

/* Opens the file a create made (existed: or found) for c->in. */
static void create_open(fs_ctx_t *c, int existed)
{
    c->kind = 1;
    /* A file this create made is empty: its writer starts empty too, as
     * O_TRUNC's does, and never copies what another client put there since
     * (the model checker found "a" written to a new file published as
     * "aXXX" after another client's put of "XXXX"). */
    if (is_writable(c->fi.flags) && (!existed || (c->fi.flags & O_TRUNC))) {
        c->wait.need_writer = 0;
        c->wait.run = open_trunc_writer;
        if (c->in->ws)
            return fs_ws_when_idle(c->in->ws, &c->wait);
        return open_trunc_writer(&c->wait, 0);
    }
    open_version(c);
}

static void create_put_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    int existed = rc == -EEXIST;
    if (existed && !(c->fi.flags & O_EXCL))
        rc = 0; /* it exists (or was created meanwhile): open it */
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    c->in = fs_inode_ref(c->fs->it, c->key, c->klen, 0);
    if (!c->in)
        return fs_ctx_fail(c, -ENOMEM);
    create_open(c, existed);
}

static void create_looked_up(void *arg, int rc);

/* mc_create_async() made the file and opened it and its writer: the handle
 * takes both, unless the file's inode has a writer state already (a
 * writer of the name's previous file, still open here), which the new
 * file's writer joins as an O_TRUNC's would. */
static void create_made(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc == -EEXIST)
        return create_put_done(c, rc);
    if (rc == -EOPNOTSUPP) { /* a master without CREATE: the steps one by one */
        rc = mc_lookup_async(c->fs->store, c->key, c->klen, '/', &c->st, create_looked_up, c);
        if (rc < 0)
            fs_ctx_fail(c, rc);
        return;
    }
    if (rc == -ENOENT) /* made, then removed before it was opened: look again */
        rc = -ESTALE;
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    fs_inode_t *in = c->in = fs_inode_ref(c->fs->it, c->key, c->klen, 0);
    if (!in || in->ws) {
        mc_writer_abort(c->w);
        mc_obj_close(c->obj);
        return in ? create_open(c, 0) : fs_ctx_fail(c, -ENOMEM);
    }
    fs_wstate_t *ws = fs_ws_get(c->fs, in);
    c->fh = ws ? fh_new(c->fs, in, 1) : NULL; /* holds ws */
    if (!c->fh) {
        mc_writer_abort(c->w);
        mc_obj_close(c->obj);
        if (ws)
            fs_ws_settle(ws);
        fs_inode_forget(c->fs->it, in, 1);
        return fs_ctx_fail(c, -ENOMEM);
    }
    fs_ws_adopt(ws, c->w);
    fs_ws_add_owner(ws, c->req);
    c->kind = 1;
    c->fh->obj = c->obj;
    open_done(c, 0);
}

static void create_looked_up(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc == MC_LOOKUP_DIR)
        return fs_ctx_fail(c, -EISDIR);
    if (rc == MC_LOOKUP_FILE)
        return create_put_done(c, -EEXIST);
    if (rc != -ENOENT)
        return fs_ctx_fail(c, rc);
    mc_put_opts_t po;
    fs_new_object_opts(c, &po);
    rc = mc_put_async(c->fs->store, c->key, c->klen, "", 0, &po, create_put_done, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

void fs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                  struct fuse_file_info *fi)
{
    fs_ctx_t *c = fs_ctx_new(req, NULL);
    if (!c || fs_child_key(c, parent, name, c->key, &c->klen) < 0)
        return;
    c->fi = *fi;
    c->mode = mode;
    fs_new_owner(c, parent, 0);
    int rc;
    if (is_writable(fi->flags)) { /* one request: made, opened, its writer started */
        mc_put_opts_t po;
        fs_new_object_opts(c, &po);
        rc = mc_create_async(c->fs->store, c->key, c->klen, &po, &c->obj, &c->w, create_made, c);
    } else {
        rc = mc_lookup_async(c->fs->store, c->key, c->klen, '/', &c->st, create_looked_up, c);
    }
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

void fs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fh_free(fs_of(req), (fs_fh_t *)(uintptr_t)fi->fh);
    reply_err(req, 0);
}

/* ---- read, write, flush ---- */

/* A read failed: replied, or told to the daemon's own reader (c->got). */
static void read_fail(fs_ctx_t *c, int rc)
{
    if (c->got)
        return c->got(c, rc);
    fs_ctx_fail(c, rc);
}

static void read_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0)
        return read_fail(c, rc);
    if (c->got)
        return c->got(c, rc);
    fuse_reply_buf(c->req, c->data, (size_t)rc);
    fs_ctx_free(c);
}

static void read_writer_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    fs_ws_op_done(c->in->ws, 0); /* a failed read leaves the version intact */
    read_done(c, rc);
}

/* Replies with the bytes the store lent (mc_obj_peek_async()): a block read
 * ahead, or a buffer of its own; the kernel's copy is the only one here. */
static void read_peeked(void *arg, int rc, const struct iovec *iov, int iovcnt)
{
    fs_ctx_t *c = arg;
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    if (iovcnt)
        fuse_reply_iov(c->req, iov, iovcnt);
    else
        fuse_reply_buf(c->req, NULL, 0);
    fs_ctx_free(c);
}

/* The buffer a read is copied into, allocated when the bytes cannot be
 * replied from where they lie. 0 or -ENOMEM. */
static int read_buf(fs_ctx_t *c)
{
    if (!c->data)
        c->data = malloc(c->size ? c->size : 1);
    return c->data ? 0 : -ENOMEM;
}

/* Reads c's range of version o: replied in place when its bytes lie in
 * memory this process addresses (the only copy is the kernel's), else from
 * the bytes the store lends (a block read ahead from another node, or a
 * buffer it reads into). 0 (the reply is sent or will be) or -errno. */
static int read_obj(fs_ctx_t *c, mc_obj_t *o)
{
    if (c->got) { /* the daemon's own read: into its buffer */
        int rc = read_buf(c);
        return rc < 0 ? rc : mc_obj_read_async(o, (uint64_t)c->off, c->data, c->size, read_done, c);
    }
    const void *p;
    int64_t n = mc_obj_view(o, (uint64_t)c->off, c->size, &p);
    if (n >= 0 &&
        ((size_t)n == c->size || (uint64_t)c->off + (uint64_t)n >= mc_obj_stat(o)->size)) {
        fuse_reply_buf(c->req, p, (size_t)n);
        fs_ctx_free(c);
        return 0;
    }
    return mc_obj_peek_async(o, (uint64_t)c->off, c->size, read_peeked, c);
}

/* Reads c's range of the version in progress of writer state ws. */
static int read_writer(fs_ctx_t *c, fs_wstate_t *ws)
{
    int rc = read_buf(c);
    if (rc < 0)
        return rc;
    fs_ws_op_start(ws);
    rc = mc_writer_read_async(ws->w, (uint64_t)c->off, c->data, c->size, read_writer_done, c);
    if (rc < 0)
        fs_ws_op_done(ws, 0);
    return rc;
}

/* --cache-mode pages: what the cache lacks comes from the content it holds:
 * the writer's version in progress, else the inode's cur. */
static void read_cached(fs_ctx_t *c)
{
    fs_inode_t *in = c->fh->in;
    fs_wstate_t *ws = in->ws;
    int rc;
    if (in->cur && mc_obj_stale(in->cur) && !(ws && ws->state == WS_READY))
        fs_cache_unpin(c->fs, in); /* its handle went with a lost master connection: open again */
    if (ws && ws->state == WS_READY) {
        rc = read_writer(c, ws);
    } else if (in->cur) {
        rc = read_obj(c, in->cur);
    } else {
        rc = fs_cache_wait(c->fs, in, &c->wait); /* after a publish by this very handle */
        if (rc < 0)
            read_fail(c, rc);
        return;
    }
    if (rc < 0)
        read_fail(c, rc);
}

static void read_run(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    if (err < 0) /* before c->fh: fs_shutdown() may have freed it */
        return read_fail(c, err);
    fs_fh_t *fh = c->fh;
    fs_wstate_t *ws = fh->in->ws;
    int rc;
    if (!c->fs->direct_io && !fh->direct)
        return read_cached(c);
    int follow = fh->writable; /* a writable handle reads what it wrote */
    if (follow && ws && ws->state == WS_READY) {
        rc = read_writer(c, ws);
    } else if (follow && fh->in->key && fh->in->version != mc_obj_stat(fh->obj)->version) {
        if (fs_naming_gate(c->fs, fh->in->key, fh->in->klen, &c->wait))
            return;       /* read_run() again once the unlink or rename is answered */
        rc = read_buf(c); /* a newer version than the handle's */
        if (rc == 0)
            rc = mc_get_async(c->fs->store, fh->in->key, fh->in->klen, (uint64_t)c->off, c->data,
                              c->size, NULL, read_done, c);
    } else {
        rc = read_obj(c, fh->obj);
    }
    if (rc < 0)
        read_fail(c, rc);
}

void fs_read_into(fs_ctx_t *c, void (*got)(fs_ctx_t *c, int rc))
{
    c->got = got;
    fs_wb_settled(c, read_run);
}

void fs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
    fs_fh_t *fh = (fs_fh_t *)(uintptr_t)fi->fh;
    fs_ctx_t *c = fs_ctx_new(req, fh->in);
    if (!c)
        return;
    c->fh = fh;
    c->off = off;
    c->size = size;
    fs_wb_settled(c, read_run);
}

static void write_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (fs_wb_done(c, rc))
        return;                   /* answered already (write-behind) */
    fs_ws_op_done(c->in->ws, rc); /* the handle holds the state */
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    fuse_reply_write(c->req, (size_t)rc);
    fs_ctx_free(c);
}

/* The published version lost its set-ID bits: the write goes on (the
 * writer's state is looked at again: it may have been committed since). */
static void write_killed(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0 && rc != -ENOENT) /* ENOENT: removed meanwhile; the write goes on */
        return fs_ctx_fail(c, rc);
    fs_ws_need(c->in->ws, &c->wait); /* the handle holds the state */
}

/* A write by a process without privilege (here: not root) clears the
 * set-user-ID bit, and the set-group-ID bit when group-execute is set, as
 * Linux does: the version being written publishes without them, and the
 * published one loses them before the write goes on, as the kernel's own
 * clearing did (the mount asks for FUSE_HANDLE_KILLPRIV_V2: devio.c).
 * Returns 1 when the write waits for that (write_killed() goes on). */
int fs_kill_set_id(fs_ctx_t *c)
{
    fs_inode_t *in = c->in;
    uint32_t mode = in->st.mode;
    if (c->uid == 0 || !(mode & (S_ISUID | S_ISGID)))
        return 0;
    mode &= ~(uint32_t)S_ISUID;
    if (mode & S_IXGRP)
        mode &= ~(uint32_t)S_ISGID;
    if (mode == in->st.mode)
        return 0;
    in->st.mode = mode;
    c->meta = (mc_meta_t){.what = MC_META_MODE, .mode = mode};
    mc_writer_set_meta(in->ws->w, &c->meta);
    return in->key &&
           mc_set_meta_async(c->fs->store, in->key, in->klen, &c->meta, NULL, write_killed, c) == 0;
}

static void write_run(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    fs_wstate_t *ws = c->in->ws;
    if (err < 0)
        fs_ws_poison(ws, err); /* opening the writer (copying the base) failed */
    if (c->fs->stopping)       /* before c->fh: fs_shutdown() freed it */
        return fs_ctx_fail(c, -ECANCELED);
    if (c->fh->err)
        return fs_ctx_fail(c, c->fh->err);
    ws->dirty = 1;
    if (fs_kill_set_id(c))
        return;
    if (c->fh->append)
        c->off = (off_t)mc_writer_size(ws->w);
    fs_ws_op_start(ws);
    uint64_t end = mc_writer_size(ws->w);
    int rc = mc_writer_write_async(ws->w, (uint64_t)c->off, c->wbuf, c->size, write_done, c);
    if (rc < 0)
        write_done(c, rc);
    else
        fs_wb_answer(c, end); /* its callback comes later, never inside the call */
}

fs_ctx_t *fs_write_ctx(fuse_req_t req, fs_fh_t *fh)
{
    if (!fh->writable || !fh->in->ws) {
        reply_err(req, -EBADF);
        return NULL;
    }
    if (fh->err) {
        reply_err(req, fh->err);
        return NULL;
    }
    fs_ctx_t *c = fs_ctx_new(req, fh->in);
    if (!c)
        return NULL;
    fs_ws_add_owner(fh->in->ws, req);
    c->fh = fh;
    c->wait.need_writer = 1;
    return c;
}

void fs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                 struct fuse_file_info *fi)
{
    fs_ctx_t *c = fs_write_ctx(req, (fs_fh_t *)(uintptr_t)fi->fh);
    if (!c)
        return;
    /* The data lives in the request buffer: keep it until the write is
     * done instead of copying it. */
    c->data = fs_take_request_buffer(c->fs);
    c->uid = fuse_req_ctx(req)->uid;
    c->wbuf = buf;
    c->size = size;
    c->off = off;
    c->wait.run = write_run;
    fs_ws_need(c->in->ws, &c->wait);
}

static void flush_committed(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    fs_ctx_fail(c, err < 0 ? err : 0);
}

static void flush_run(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    fs_wstate_t *ws = c->in->ws;
    if (!err)
        err = c->fh->err;
    if (err < 0 || !ws || ws->state != WS_READY || !ws->dirty)
        return fs_ctx_fail(c, err < 0 ? err : 0);
    c->wait.run = flush_committed;
    c->wait.next = ws->committers;
    ws->committers = &c->wait;
    ws->closing++;
    fs_ws_commit(ws);
}

void fs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fs_fh_t *fh = (fs_fh_t *)(uintptr_t)fi->fh;
    if (fh->writable && fh->err)
        return reply_err(req, fh->err); /* a write failed: nothing to publish */
    if (!fh->writable || !fh->in->ws || !fs_ws_is_owner(fh->in->ws, req))
        return reply_err(req, 0); /* the last release publishes */
    fs_ctx_t *c = fs_ctx_new(req, fh->in);
    if (!c)
        return;
    c->fh = fh;
    c->wait.need_writer = 0;
    c->wait.run = flush_run;
    fs_ws_when_idle(fh->in->ws, &c->wait);
}

/* What the probe of fsync_run() found: a version the store lost (its put
 * revoked: a stop past the put TTL, found by an idle renewal or by this
 * probe's) fails as a failed write does, and fsync reports it. */
static void fsync_probed(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    fs_ws_op_done(c->in->ws, rc < 0 ? rc : 0); /* the handle holds the state */
    if (c->fs->stopping)                       /* before c->fh: fs_shutdown() may have freed it */
        return fs_ctx_fail(c, -ECANCELED);
    fs_ctx_fail(c, rc < 0 ? rc : fs_fh_err(c->fh));
}

static void fsync_run(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    fs_wstate_t *ws = c->in->ws;
    if (!err)
        err = fs_fh_err(c->fh);
    if (err < 0 || c->fs->stopping || !ws || ws->state != WS_READY)
        return fs_ctx_fail(c, err < 0 ? err : 0);
    /* The writer may have lost its version with no operation of ours in
     * flight (an idle renewal that found the put gone): an empty read
     * answers the writer's error, or renews a lease half gone. */
    fs_ws_op_start(ws);
    int rc = mc_writer_read_async(ws->w, mc_writer_size(ws->w), NULL, 0, fsync_probed, c);
    if (rc < 0) {
        fs_ws_op_done(ws, 0);
        fs_ctx_fail(c, rc);
    }
}

void fs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    /* Data lives in memory segments; the version is published at close.
     * See docs/SEMANTICS.md. What fsync waits for is the writes answered
     * before they landed (write-behind): a failure among them is its error. */
    fs_fh_t *fh = (fs_fh_t *)(uintptr_t)fi->fh;
    if (!fh->writable || !fh->in->ws)
        return reply_err(req, fs_fh_err(fh));
    fs_ctx_t *c = fs_ctx_new(req, fh->in);
    if (!c)
        return;
    c->fh = fh;
    c->wait.need_writer = 0;
    c->wait.run = fsync_run;
    fs_wb_wait(fh->in->ws, &c->wait);
}

void fs_shutdown(fs_t *fs)
{
    /* A handle whose open is in flight is freed by open_done(), which the
     * store still calls (mc_store_close() cancels it): it writes fh->obj. */
    for (fs_fh_t *fh = fs->fhs, *next; fh; fh = next) {
        next = fh->next;
        if (!fh->opening)
            fh_free(fs, fh);
    }
    fs_ws_shutdown(fs, 0);
}
