/*
 * fallocate.c - a sparse file's holes: fallocate(2) on a file open for
 * writing (the default mode and FALLOC_FL_KEEP_SIZE filling holes with
 * space, PUNCH_HOLE and ZERO_RANGE making real holes), on the version in
 * progress of the file's writer (writers.h), as a write would; lseek(2)'s
 * SEEK_DATA and SEEK_HOLE.
 */
#include <errno.h>
#include <linux/falloc.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fs.h"
#include "fs_i.h"
#include "writers.h"

/* The zeros the default mode writes into holes, a piece at a time: a
 * read-only private anonymous mapping made at the first use, every page of
 * it the kernel's zero page, so that it takes no memory. A hole up to this
 * long gets its space in one request to the master: all of it, or none and
 * ENOSPC. (A global array would take no memory either, but the sanitizer
 * builds poison and scan every global: 64 MiB of it cost each daemon 0.3 s
 * at its start and exit.) */
#define ZEROS_LEN ((size_t)64 << 20)

/* The mapping, made now if it is not yet (any thread; a failed mmap is
 * tried again at the next call); NULL if it cannot be. */
static const char *zeros_get(void)
{
    static _Atomic(const char *) zeros;
    const char *z = atomic_load_explicit(&zeros, memory_order_acquire);
    if (z)
        return z;
    void *p = mmap(NULL, ZEROS_LEN, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (!atomic_compare_exchange_strong(&zeros, &z, (const char *)p))
        munmap(p, ZEROS_LEN); /* another thread's came first: z is it */
    else
        z = p;
    return z;
}

/* What a request's context holds through the steps (fs_ctx_t's fields):
 * c->off the next byte to look at, c->size the length to punch (PUNCH_HOLE,
 * ZERO_RANGE), c->attr.st_size the size to grow to (0: none), c->st.size
 * the size before (what an ENOSPC restores), c->st2.size the end of the
 * range whose holes get space (the default mode), c->flags the error being
 * reported while the size is restored. */

static void falloc_step(void *arg, int rc);

/* The next hole in [c->off, c->st2.size) of the version in progress, at
 * most one piece of zeros long: its length (0: none) and start (*at). */
static size_t falloc_hole(const fs_ctx_t *c, const mc_writer_t *w, uint64_t *at)
{
    uint64_t lim = c->st2.size;
    int64_t h = (uint64_t)c->off < lim ? mc_writer_seek(w, (uint64_t)c->off, 1) : -ENXIO;
    if (h < 0 || (uint64_t)h >= lim)
        return 0;
    int64_t d = mc_writer_seek(w, (uint64_t)h, 0);
    uint64_t end = d < 0 || (uint64_t)d > lim ? lim : (uint64_t)d;
    *at = (uint64_t)h;
    return end - (uint64_t)h > ZEROS_LEN ? ZEROS_LEN : (size_t)(end - (uint64_t)h);
}

/* Punches [c->off, c->off + c->size) of the version in progress (a hole
 * reads as zeros), then grows it to c->attr.st_size (0: no growth) with a
 * hole, then gives the holes of [c->off, c->st2.size) space (zeros written
 * into them: the default mode); one writer operation at a time. */
static void falloc_next(fs_ctx_t *c)
{
    fs_wstate_t *ws = c->in->ws;
    uint64_t size = mc_writer_size(ws->w), end = (uint64_t)c->attr.st_size, at;
    size_t n;
    int rc;
    if (c->size) {
        rc = mc_writer_punch_async(ws->w, (uint64_t)c->off, c->size, falloc_step, c);
        c->size = 0;
    } else if (end > size) {
        rc = mc_writer_truncate_async(ws->w, end, falloc_step, c);
        c->attr.st_size = 0;
    } else if ((n = falloc_hole(c, ws->w, &at)) > 0) {
        c->off = (off_t)(at + n);
        rc = mc_writer_write_async(ws->w, at, zeros_get(), n, falloc_step, c);
    } else {
        fs_ws_op_done(ws, 0);
        return fs_ctx_fail(c, c->flags);
    }
    if (rc < 0)
        falloc_step(c, rc);
}

static void falloc_step(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    fs_wstate_t *ws = c->in->ws;
    if (rc == -ENOSPC && c->st2.size && !c->flags) {
        /* No space for a hole: the file keeps its size and its bytes (the
         * holes filled so far read as zeros, as before), and its version
         * goes on: as on Linux, a failed fallocate leaves the file usable. */
        c->flags = rc; /* replied once the size is back */
        c->st2.size = 0;
        rc = 0;
        if (mc_writer_size(ws->w) > c->st.size) {
            rc = mc_writer_truncate_async(ws->w, c->st.size, falloc_step, c);
            if (rc == 0)
                return;
        }
    }
    if (rc < 0) {
        fs_ws_op_done(ws, rc); /* fails the version, as a write does */
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
    if (c->fs->stopping) /* before c->fh: fs_shutdown() freed it */
        return fs_ctx_fail(c, -ECANCELED);
    if (c->fh->err)
        return fs_ctx_fail(c, c->fh->err);
    uint64_t size = mc_writer_size(ws->w), off = (uint64_t)c->off, end = c->st2.size, at;
    int keep = (c->mode & FALLOC_FL_KEEP_SIZE) != 0;
    c->st.size = size;
    /* Only the part inside the file needs clearing: past its end it reads
     * as zeros already. */
    if (c->size)
        c->size = off >= size ? 0 : (size_t)((end < size ? end : size) - off);
    if (!keep && end > size)
        c->attr.st_size = (off_t)end;
    /* The default mode fills the holes of the range, inside the file's
     * (new) size. */
    c->st2.size = c->mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) ? 0
                  : keep && end > size                                    ? size
                                                                          : end;
    if (!c->size && !c->attr.st_size && !falloc_hole(c, ws->w, &at))
        return fs_ctx_fail(c, 0); /* nothing changes */
    if (c->st2.size && !zeros_get())
        return fs_ctx_fail(c, -ENOMEM); /* before the version is touched */
    ws->dirty = 1;
    fs_ws_op_start(ws);
    falloc_next(c);
}

/* The writes answered before they landed (write-behind) have: only now do
 * the holes of the version in progress show where no byte was written (a
 * write still waiting for its space looks like one, and zeros given to it
 * would land on its bytes). Then with the writer open. */
static void falloc_landed(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    if (err < 0)
        return fs_ctx_fail(c, err);
    c->wait.run = falloc_run;
    fs_ws_need(c->in->ws, &c->wait);
}

/*
 * fallocate(2) on a handle open for writing, in the version in progress.
 * The default mode grows the file to the range's end (with a hole) and
 * gives every hole of the range space (zeros written into it), so that a
 * later write there needs none; or fails with ENOSPC, leaving the file's
 * size and bytes as they were. FALLOC_FL_KEEP_SIZE does the same inside
 * the file's size (space past the end is not reserved ahead). PUNCH_HOLE
 * and ZERO_RANGE make the range inside the file a hole
 * (mc_writer_punch_async(): its whole allocation units give their space
 * back); ZERO_RANGE without KEEP_SIZE grows the file with a hole. Other
 * modes: EOPNOTSUPP.
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
    c->st2.size = (uint64_t)off + (uint64_t)len; /* the range's end, until falloc_run() */
    c->size = (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) ? (size_t)len : 0;
    c->wait.run = falloc_landed;
    c->wait.need_writer = 1;
    fs_wb_wait(fh->in->ws, &c->wait);
}

/*
 * lseek(2) with SEEK_DATA or SEEK_HOLE (the kernel does the others itself):
 * in the content a read through this handle sees (files.c): the version in
 * progress, the inode's newest version (page cache) or the handle's own.
 * As a read, it waits while that content is changing hands (a version
 * being opened or published), and for the newest version to be opened
 * after this mount published it.
 */
static void lseek_run(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    if (err < 0) /* before c->fh: fs_shutdown() may have freed it */
        return fs_ctx_fail(c, err);
    fs_fh_t *fh = c->fh;
    fs_inode_t *in = fh->in;
    int cached = !c->fs->direct_io && !fh->direct;
    int hole = c->flags;
    int64_t r = -ENXIO;
    if (in->ws && in->ws->state == WS_READY && (cached || fh->writable)) {
        r = mc_writer_seek(in->ws->w, (uint64_t)c->off, hole);
    } else if (cached && in->cur) {
        r = mc_obj_seek(in->cur, (uint64_t)c->off, hole);
    } else if (cached) {
        r = fs_cache_wait(c->fs, in, &c->wait); /* runs this again */
        if (r == 0)
            return;
    } else if (fh->obj) {
        r = mc_obj_seek(fh->obj, (uint64_t)c->off, hole);
    }
    if (r < 0)
        return fs_ctx_fail(c, (int)r);
    fuse_reply_lseek(c->req, (off_t)r);
    fs_ctx_free(c);
}

void fs_op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
    fs_fh_t *fh = (fs_fh_t *)(uintptr_t)fi->fh;
    (void)ino;
    if ((whence != SEEK_DATA && whence != SEEK_HOLE) || off < 0)
        return reply_err(req, -EINVAL);
    fs_ctx_t *c = fs_ctx_new(req, fh->in);
    if (!c)
        return;
    c->fh = fh;
    c->off = off;
    c->flags = whence == SEEK_HOLE;
    fs_wb_settled(c, lseek_run);
}
