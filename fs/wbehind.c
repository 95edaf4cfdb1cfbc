/*
 * wbehind.c - write-behind on a cluster mount (writers.h): a sequential
 * write (at the end of what the file's version in progress holds: a
 * stream, as cp and dd write) is answered as soon as its writer operation
 * has started, while its bytes
 * travel to the nodes, so that the next write of the file (the kernel
 * sends them one at a time) overlaps it and several are in flight. The
 * request buffer holding the bytes is the write's own (fs_take_request_
 * buffer()), so nothing is copied. Bounded per file (fs->wb_max bytes in
 * flight) and per mount (fs->wb_total); a write past either bound is
 * answered when it lands, as every write of an embedded mount is.
 *
 * Nothing about publishing changes: an answered write still counts among
 * the writer's operations in flight (ws->ops), a close publishes only once
 * all of them landed, and one that fails fails the version (fs_ws_op_done()):
 * the next write, fsync or close of every descriptor writing the file
 * reports the error, and nothing of the version is published. Reads of the
 * version in progress, lseek's SEEK_DATA/SEEK_HOLE, fallocate and fsync
 * wait for the writes behind (fs_wb_wait()), so they see every byte written
 * before them (to fallocate, a write still waiting for its space would look
 * like a hole to fill with zeros). A truncation or a later
 * write need not wait: the writer's size covers a write from its start,
 * and the writer sends a transfer that overlaps one still on its way only
 * once that one landed (writer.c, w_xfer()).
 */
#include <errno.h>
#include <stdio.h>

#include "fs.h"
#include "fs_i.h"
#include "writers.h"

#define WB_ANSWERED 1 /* c->stage of a write answered before it landed */
#define WB_DEFAULT_MAX (8ULL << 20)
#define WB_DEFAULT_TOTAL (64ULL << 20)

int fs_wb_answer(fs_ctx_t *c, uint64_t end)
{
    fs_t *fs = c->fs;
    fs_wstate_t *ws = c->in->ws;
    if ((uint64_t)c->off != end || !fs->wb_max || ws->behind_wait ||
        ws->behind + c->size > fs->wb_max || fs->wb_used + c->size > fs->wb_total)
        return 0;
    ws->behind += c->size;
    fs->wb_used += c->size;
    ws->handles++; /* the descriptor may be released before the bytes land */
    c->stage = WB_ANSWERED;
    fuse_reply_write(c->req, c->size);
    return 1;
}

int fs_wb_done(fs_ctx_t *c, int rc)
{
    if (c->stage != WB_ANSWERED)
        return 0;
    fs_t *fs = c->fs;
    fs_wstate_t *ws = c->in->ws;
    fs_ws_op_done(ws, rc < 0 ? rc : 0); /* a failure fails the version */
    ws->behind -= c->size;
    fs->wb_used -= c->size;
    if (!ws->behind) {
        fs_waiter_t *w = ws->behind_wait;
        ws->behind_wait = NULL;
        while (w) {
            fs_waiter_t *next = w->next;
            fs_ws_when_idle(ws, w);
            w = next;
        }
    }
    ws->handles--;
    fs_ws_settle(ws);
    fs_ctx_free(c);
    return 1;
}

void fs_wb_wait(fs_wstate_t *ws, fs_waiter_t *w)
{
    if (!ws->behind)
        return fs_ws_when_idle(ws, w);
    w->next = ws->behind_wait;
    ws->behind_wait = w;
}

void fs_wb_settled(fs_ctx_t *c, void (*run)(fs_waiter_t *w, int err))
{
    c->wait.run = run;
    c->wait.need_writer = 0;
    if (fs_fh_follows(c->fs, c->fh) && c->fh->in->ws)
        fs_wb_wait(c->fh->in->ws, &c->wait);
    else
        run(&c->wait, 0);
}

int fs_stream_options(fs_t *fs, mc_store_opts_t *so, int cluster, const char *const opt[4])
{
    static const char *const names[4] = {"--readahead", "--total-readahead", "--write-behind",
                                         "--total-write-behind"};
    uint64_t v[4] = {0, 0, cluster ? WB_DEFAULT_MAX : 0, WB_DEFAULT_TOTAL};
    for (int i = 0; i < 4; i++) {
        if (opt[i] && mc_parse_size(opt[i], &v[i]) < 0) {
            fprintf(stderr, "mooncake-fs: error: bad %s '%s'\n", names[i], opt[i]);
            return -1;
        }
    }
    /* The store's 0 is its default: --readahead 0 turns it off. */
    so->readahead_max = opt[0] && !v[0] ? 1 : v[0];
    so->readahead_total = v[1];
    fs->wb_max = v[2];
    fs->wb_total = v[3];
    return 0;
}
