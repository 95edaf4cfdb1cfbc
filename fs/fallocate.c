/*
 * fallocate.c - a sparse file's holes: fallocate(2) on a file open for
 * writing (the default mode, FALLOC_FL_KEEP_SIZE, PUNCH_HOLE and
 * ZERO_RANGE making real holes), on the version in progress of the file's
 * writer (writers.h), as a write would; lseek(2)'s SEEK_DATA and SEEK_HOLE.
 */
#include <errno.h>
#include <linux/falloc.h>
#include <stdint.h>
#include <unistd.h>

#include "fs.h"
#include "fs_i.h"
#include "writers.h"

/* The zeros the default mode writes past the end, a piece at a time (in
 * .bss: never written). */
static char zeros[1 << 20];

static void falloc_step(void *arg, int rc);

/* Punches [c->off, c->off + c->size) of the version in progress (a hole
 * reads as zeros), then grows it to c->attr.st_size (0: no growth): with
 * space (zeros written) in the default mode, a hole for ZERO_RANGE; one
 * writer operation at a time. */
static void falloc_next(fs_ctx_t *c)
{
    fs_wstate_t *ws = c->in->ws;
    uint64_t size = mc_writer_size(ws->w), end = (uint64_t)c->attr.st_size;
    int rc;
    if (c->size) {
        rc = mc_writer_punch_async(ws->w, (uint64_t)c->off, c->size, falloc_step, c);
        c->size = 0;
    } else if (end > size && (c->mode & FALLOC_FL_ZERO_RANGE)) {
        rc = mc_writer_truncate_async(ws->w, end, falloc_step, c);
        c->attr.st_size = 0;
    } else if (end > size) {
        size_t n = end - size < sizeof(zeros) ? (size_t)(end - size) : sizeof(zeros);
        rc = mc_writer_write_async(ws->w, size, zeros, n, falloc_step, c);
    } else {
        fs_ws_op_done(ws, 0);
        return fs_ctx_fail(c, 0);
    }
    if (rc < 0)
        falloc_step(c, rc);
}

static void falloc_step(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0) {
        fs_ws_op_done(c->in->ws, rc); /* fails the version, as a write does */
        return fs_ctx_fail(c, rc);
    }
    falloc_next(c);
}

static void falloc_run(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    fs_wstate_t *ws = c->in->ws;
    if (err < 0)
        fs_ws_poison(ws, err);
    if (c->fh->err)
        return fs_ctx_fail(c, c->fh->err);
    uint64_t size = mc_writer_size(ws->w);
    uint64_t end = (uint64_t)c->off + c->size;
    /* Only the part inside the file needs clearing: past its end it reads
     * as zeros already. */
    c->size = (uint64_t)c->off >= size ? 0 : (size_t)((end < size ? end : size) - (uint64_t)c->off);
    if (!(c->mode & FALLOC_FL_KEEP_SIZE) && end > size)
        c->attr.st_size = (off_t)end;
    if (!c->size && !c->attr.st_size)
        return fs_ctx_fail(c, 0); /* nothing changes */
    ws->dirty = 1;
    fs_ws_op_start(ws);
    falloc_next(c);
}

/*
 * fallocate(2) on a handle open for writing, in the version in progress.
 * The default mode grows the file with zeros written, which take their
 * space (or fail with ENOSPC); holes inside the file stay holes. With
 * FALLOC_FL_KEEP_SIZE it changes nothing (space past the end is not
 * reserved ahead). PUNCH_HOLE and ZERO_RANGE make the range inside the file
 * a hole (mc_writer_punch_async(): its whole allocation units give their
 * space back); ZERO_RANGE without KEEP_SIZE grows the file with a hole.
 * Other modes: EOPNOTSUPP.
 */
void fs_op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                     struct fuse_file_info *fi)
{
    fs_fh_t *fh = (fs_fh_t *)(uintptr_t)fi->fh;
    int known = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
    if (mode & ~known || ((mode & FALLOC_FL_PUNCH_HOLE) && (mode & FALLOC_FL_ZERO_RANGE)))
        return reply_err(req, -EOPNOTSUPP);
    if (off < 0 || len <= 0)
        return reply_err(req, -EINVAL);
    if (len > INT64_MAX - off)
        return reply_err(req, -EFBIG);
    fs_ctx_t *c = fs_write_ctx(req, fh);
    if (!c)
        return;
    c->mode = (mode_t)mode;
    c->off = off;
    c->size = (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) ? (size_t)len : 0;
    if (!c->size) /* the default mode clears nothing: only the end matters */
        c->off = off + len;
    c->wait.run = falloc_run;
    fs_ws_need(fh->in->ws, &c->wait);
}

/*
 * lseek(2) with SEEK_DATA or SEEK_HOLE (the kernel does the others itself):
 * in the content a read through this handle sees (files.c): the version in
 * progress, the inode's newest version (page cache) or the handle's own.
 */
void fs_op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
    fs_fh_t *fh = (fs_fh_t *)(uintptr_t)fi->fh;
    fs_t *fs = fs_of(req);
    fs_inode_t *in = fh->in;
    int cached = !fs->direct_io && !fh->direct;
    (void)ino;
    if ((whence != SEEK_DATA && whence != SEEK_HOLE) || off < 0)
        return reply_err(req, -EINVAL);
    int hole = whence == SEEK_HOLE;
    int64_t r = -ENXIO;
    if (in->ws && in->ws->state == WS_READY && (cached || fh->writable))
        r = mc_writer_seek(in->ws->w, (uint64_t)off, hole);
    else if (cached && in->cur)
        r = mc_obj_seek(in->cur, (uint64_t)off, hole);
    else if (fh->obj)
        r = mc_obj_seek(fh->obj, (uint64_t)off, hole);
    if (r < 0)
        return reply_err(req, (int)r);
    fuse_reply_lseek(req, (off_t)r);
}
