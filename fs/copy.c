/*
 * copy.c - copy_file_range(2) between two files of the mount (and cp,
 * which uses it): the daemon moves the bytes from what a read of the
 * source sees into the destination's version in progress itself, a chunk
 * at a time, in one request. Without it the kernel falls back to a copy
 * through a pipe: a READ and a WRITE request for every 64 KiB or so, each
 * a round trip to the daemon.
 *
 * A chunk is read as a READ through the source handle would be
 * (fs_read_into(): the writer's version in progress, the page cache's
 * version or the handle's own) and written as a WRITE through the
 * destination handle would be (the writer opened if need be, set-ID bits
 * cleared, the version failed on an error), each in its turn: the same
 * rules as the READs and WRITEs the kernel would send, with one buffer of
 * at most COPY_CHUNK per copy in flight. The kernel drops the destination's
 * cached pages over the range after the reply and takes the size.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "fs.h"
#include "fs_i.h"
#include "writers.h"

/* Bytes read and written at a time (the buffer a copy holds). */
#define COPY_CHUNK ((size_t)1 << 20)

/* Bytes copied by one request at most: the reply's count is 32 bits (a
 * longer copy_file_range(2) returns this much, and the caller goes on). */
#define COPY_MAX ((uint64_t)1 << 30)

struct fs_copy {
    fs_fh_t *src, *dst;
    uint64_t src_off, dst_off;
    uint64_t len;  /* bytes asked for (at most COPY_MAX) */
    uint64_t done; /* bytes written */
    int last;      /* the chunk in hand reached the source's end */
};

static void copy_next(fs_ctx_t *c);

static void copy_end(fs_ctx_t *c)
{
    fuse_reply_write(c->req, (size_t)c->copy->done);
    fs_ctx_free(c);
}

/* The copy stopped at an error: the bytes copied before it, as write(2)
 * counts them (the error comes again with the next call: a failed write
 * failed the destination's version, a failed read fails again), or the
 * error when there were none. */
static void copy_fail(fs_ctx_t *c, int rc)
{
    if (c->copy->done)
        return copy_end(c);
    fs_ctx_fail(c, rc);
}

static void copy_written(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    struct fs_copy *k = c->copy;
    /* c->in is the destination's inode while a chunk is written; the
     * handles (k->src, k->dst) may be gone once the daemon stops
     * (fs_shutdown() frees them while this write is in flight). */
    fs_ws_op_done(c->in->ws, rc); /* a failure fails the version */
    if (rc < 0)
        return copy_fail(c, rc);
    if (c->fs->stopping)
        return fs_ctx_fail(c, -ECANCELED);
    k->done += (uint64_t)rc;
    if (k->last || k->done >= k->len)
        return copy_end(c);
    copy_next(c);
}

/* The destination's writer is open: writes the chunk in hand (c->size
 * bytes in c->data), as a WRITE would (files.c, write_run()). */
static void copy_write(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    struct fs_copy *k = c->copy;
    if (c->fs->stopping)
        return fs_ctx_fail(c, -ECANCELED);
    fs_wstate_t *ws = c->in->ws;
    if (err < 0)
        fs_ws_poison(ws, err); /* opening the writer (copying the base) failed */
    if (k->dst->err)
        return copy_fail(c, k->dst->err);
    ws->dirty = 1;
    if (fs_kill_set_id(c))
        return; /* runs again once the set-ID bits are cleared */
    fs_ws_op_start(ws);
    int rc = mc_writer_write_async(ws->w, k->dst_off + k->done, c->data, c->size, copy_written, c);
    if (rc < 0)
        copy_written(c, rc);
}

/* A chunk was read (rc bytes, or -errno): on to the destination. */
static void copy_read(fs_ctx_t *c, int rc)
{
    struct fs_copy *k = c->copy;
    if (rc < 0)
        return copy_fail(c, rc);
    if (c->fs->stopping)
        return fs_ctx_fail(c, -ECANCELED);
    if ((size_t)rc < c->size)
        k->last = 1; /* the source ends here */
    if (rc == 0)
        return copy_end(c);
    c->size = (size_t)rc;
    c->fh = k->dst;
    c->in = k->dst->in;
    c->wait.run = copy_write;
    c->wait.need_writer = 1;
    fs_ws_need(c->in->ws, &c->wait); /* the handle holds the state */
}

/* Reads the next chunk of the source. */
static void copy_next(fs_ctx_t *c)
{
    struct fs_copy *k = c->copy;
    uint64_t left = k->len - k->done;
    c->fh = k->src;
    c->in = k->src->in;
    c->off = (off_t)(k->src_off + k->done);
    c->size = left < COPY_CHUNK ? (size_t)left : COPY_CHUNK;
    fs_read_into(c, copy_read);
}

void fs_op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
                           struct fuse_file_info *fi_in, fuse_ino_t ino_out, off_t off_out,
                           struct fuse_file_info *fi_out, size_t len, int flags)
{
    fs_fh_t *src = (fs_fh_t *)(uintptr_t)fi_in->fh;
    fs_fh_t *dst = (fs_fh_t *)(uintptr_t)fi_out->fh;
    (void)ino_in;
    (void)ino_out;
    /* The kernel checked the rest (modes, O_APPEND, overlapping ranges of
     * one file, the size limit) before it sent the request. */
    if (flags != 0 || off_in < 0 || off_out < 0)
        return reply_err(req, -EINVAL);
    if (len > INT64_MAX - (uint64_t)off_out)
        return reply_err(req, -EFBIG);
    fs_ctx_t *c = fs_write_ctx(req, dst); /* EBADF unless dst writes */
    if (!c)
        return;
    struct fs_copy *k = calloc(1, sizeof(*k));
    if (!k)
        return fs_ctx_fail(c, -ENOMEM);
    c->copy = k;
    c->uid = fuse_req_ctx(req)->uid;
    k->src = src;
    k->dst = dst;
    k->src_off = (uint64_t)off_in;
    k->dst_off = (uint64_t)off_out;
    k->len = len < COPY_MAX ? len : COPY_MAX;
    if (k->len == 0)
        return copy_end(c);
    copy_next(c);
}
