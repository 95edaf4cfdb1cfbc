/*
 * writers.c - per-file writer state (fs_wstate_t, writers.h).
 *
 * All writable handles of a file share one writer state, which opens a
 * store writer on the first write (copy-on-write from the current version;
 * under the page cache, the version the cache holds), streams data into
 * the store as it arrives, and publishes the new version when a writable
 * handle is flushed (close) or the last one is released.
 * Operations that need the writer while it is being opened or committed
 * wait on its queue; a commit waits for the writer operations in flight.
 *
 * A version in progress whose write fails (ENOSPC, EIO, any error of the
 * store while writing, copying the base or growing by truncate) is never
 * published: the writer is aborted once its operations in flight end, and
 * every handle open for writing at that moment fails its later writes and
 * its flush with the error. The file keeps its published version.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs.h"
#include "fs_i.h"
#include "inode.h"
#include "workers.h"
#include "writers.h"

/* Whether p is one of ws's owners. */
static int is_owner(const fs_wstate_t *ws, pid_t p)
{
    for (int i = 0; i < ws->nowners; i++)
        if (ws->owners[i] == p)
            return 1;
    return 0;
}

/* Records the requester's process as one that may publish at close. */
void fs_ws_add_owner(fs_wstate_t *ws, fuse_req_t req)
{
    pid_t tid = fuse_req_ctx(req)->pid;
    if (is_owner(ws, tid))
        return;
    pid_t p = fs_proc_of(ws->fs, tid);
    if (is_owner(ws, p))
        return;
    if (ws->nowners < (int)(sizeof(ws->owners) / sizeof(ws->owners[0])))
        ws->owners[ws->nowners++] = p;
}

/* A close publishes only when it comes from a process that opened the file
 * for writing or wrote to it: a forked child closing the descriptor it
 * inherited must not publish a half-written file. */
int fs_ws_is_owner(const fs_wstate_t *ws, fuse_req_t req)
{
    pid_t tid = fuse_req_ctx(req)->pid;
    if (is_owner(ws, tid) || is_owner(ws, fs_proc_of(ws->fs, tid)))
        return 1;
    return ws->nowners == (int)(sizeof(ws->owners) / sizeof(ws->owners[0]));
}

fs_wstate_t *fs_ws_get(fs_t *fs, fs_inode_t *in)
{
    if (in->ws)
        return in->ws;
    fs_wstate_t *ws = calloc(1, sizeof(*ws));
    if (!ws)
        return NULL;
    ws->fs = fs;
    ws->in = in;
    ws->next = fs->wss;
    if (fs->wss)
        fs->wss->prev = ws;
    fs->wss = ws;
    in->ws = ws;
    fs_view_publish_inode(fs, in, NULL); /* its reads wait for the writer now */
    return ws;
}

void fs_ws_adopt(fs_wstate_t *ws, mc_writer_t *w)
{
    ws->w = w;
    ws->state = WS_READY;
    ws->dirty = 1;
}

static void ws_free(fs_wstate_t *ws)
{
    fs_t *fs = ws->fs;
    if (ws->prev)
        ws->prev->next = ws->next;
    else
        fs->wss = ws->next;
    if (ws->next)
        ws->next->prev = ws->prev;
    ws->in->ws = NULL;
    mc_obj_close(ws->kept);
    fs_inode_maybe_free(fs->it, ws->in);
    free(ws);
}

static void ws_enqueue(fs_wstate_t *ws, fs_waiter_t *w)
{
    w->next = NULL;
    if (ws->wait_tail)
        ws->wait_tail->next = w;
    else
        ws->wait_head = w;
    ws->wait_tail = w;
}

int fs_ws_busy(const fs_wstate_t *ws)
{
    return ws->state == WS_OPENING || ws->state == WS_COMMITTING || ws->state == WS_FAILING;
}

/* Runs w once the state is not opening, committing or failing. */
void fs_ws_when_idle(fs_wstate_t *ws, fs_waiter_t *w)
{
    if (fs_ws_busy(ws))
        ws_enqueue(ws, w);
    else
        w->run(w, fs_woken(ws->fs));
}

/* Whether the file has a name to publish to: its own, or, its own gone, a
 * hard-linked file's other names (in->linked: its inode key). */
static int ws_named(const fs_wstate_t *ws)
{
    return ws->in->key || ws->in->linked;
}

/* Called when nothing is in flight: publish or drop what is left, free.
 * A file with no name left publishes nothing; its version in progress is
 * the file's content while any descriptor of it is open, as on a local
 * file system: a reader's misses of the page cache read it (with
 * --cache-mode direct a reader reads its own version, and only the
 * writable handles, which hold the state, read it). The last close drops
 * it (fh_free() in files.c). Once the mount stops (fs_shutdown() frees
 * the handles still open), nothing is published: a file still open for
 * writing was not closed, and its version in progress is dropped. */
void fs_ws_settle(fs_wstate_t *ws)
{
    if (ws->handles || ws->ops || ws->wait_head || fs_ws_busy(ws))
        return;
    if (ws->state == WS_READY) {
        if (ws->dirty && ws_named(ws) && !ws->fs->stopping) {
            fs_ws_commit(ws); /* settles again when done */
            return;
        }
        if (!ws_named(ws) && ws->in->opens && !ws->fs->direct_io)
            return;
        mc_writer_abort(ws->w);
        ws->w = NULL;
        ws->state = WS_NONE;
    }
    ws_free(ws);
}

static void ws_drain(fs_wstate_t *ws, int err)
{
    fs_waiter_t *w = ws->wait_head;
    ws->wait_head = ws->wait_tail = NULL;
    if (!err)
        err = fs_woken(ws->fs);
    while (w) {
        fs_waiter_t *next = w->next;
        if (err)
            w->run(w, err);
        else if (w->need_writer)
            fs_ws_need(ws, w);
        else
            fs_ws_when_idle(ws, w);
        w = next;
    }
}

/* Lets go of the version the writer copied (the inode's, when lent). */
static void ws_base_close(fs_wstate_t *ws)
{
    if (!ws->base_lent)
        mc_obj_close(ws->base);
    ws->base = NULL;
    ws->base_lent = 0;
}

static void ws_opened(void *arg, int rc)
{
    fs_wstate_t *ws = arg;
    ws_base_close(ws);
    ws->state = rc < 0 ? WS_NONE : WS_READY;
    ws->handles++;
    ws_drain(ws, rc < 0 ? rc : 0);
    ws->handles--;
    fs_ws_settle(ws);
}

static void ws_base_opened(void *arg, int rc)
{
    fs_wstate_t *ws = arg;
    /* No mode and no owner: the commit keeps those of the version it
     * replaces (as chmod and chown left them meanwhile). */
    mc_put_opts_t po = {.flags = MC_PUT_NOTDIR, .replica_num = ws->fs->replicas};
    if (rc < 0 && rc != -ENOENT)
        return ws_opened(ws, rc); /* not a file that went: its bytes are to be copied */
    if (rc < 0)
        ws->base = NULL; /* removed meanwhile, or written afresh: start empty */
    const char *key = ws->in->key ? ws->in->key : "orphan";
    size_t klen = ws->in->key ? ws->in->klen : 6;
    rc = mc_writer_open_async(ws->fs->store, key, klen, &po, ws->base, &ws->w, ws_opened, ws);
    if (rc < 0)
        ws_opened(ws, rc);
}

/* The base opened by key (mc_obj_open_async()): under the page cache, the
 * pages the kernel keeps are of another version than the writer copies
 * when that is not the one in->version says the cache holds. */
static void ws_base_opened_by_key(void *arg, int rc)
{
    fs_wstate_t *ws = arg;
    uint64_t v = rc == 0 ? mc_obj_stat(ws->base)->version : 0;
    ws->foreign = !ws->fs->direct_io && (rc == 0 || rc == -ENOENT) && v != ws->in->version;
    ws_base_opened(ws, rc);
}

/* State OPENING: opens the version the writer copies (none when the file
 * is written afresh), once no unlink or rename of the file is on its way.
 * As ws->gate's run. */
static void ws_open_base(fs_waiter_t *gate, int err)
{
    fs_wstate_t *ws = (fs_wstate_t *)((char *)gate - offsetof(fs_wstate_t, gate));
    (void)err;
    gate->run = ws_open_base;
    if (!ws->fresh && fs_naming_gate(ws->fs, ws->in->key, ws->in->klen, gate))
        return;
    if (ws->fs->stopping)
        return ws_opened(ws, -ECANCELED); /* fs_shutdown(): no new store operation */
    int rc = -ENOENT;
    int fresh = ws->fresh;
    int newest = ws->newest;
    ws->fresh = 0;
    ws->newest = 0;
    ws->foreign = 0;
    char ibuf[64];
    size_t klen;
    const char *key = fresh ? NULL : fs_inode_file_key(ws->in, ibuf, sizeof(ibuf), &klen);
    fs_inode_t *in = ws->in;
    int cached = !newest && !ws->fs->direct_io && in->version; /* the cache holds a known one */
    if (key && cached && !in->cur && in->cur_opening && fs_cache_wait(ws->fs, in, gate) == 0)
        return; /* the version published here, being opened (cache.c): copy that */
    if (!fresh && cached && in->cur && mc_obj_stat(in->cur)->version == in->version &&
        !mc_obj_stale(in->cur)) {
        /* The page cache holds that version (cache.c): the kernel's pages
         * of it stay under the writer's bytes (a page written back from a
         * mapping, a read that hits), so the writer copies it, not a newer
         * one another client published since: that would mix the two.
         * Also when the file's name went: ws->kept is what the name had
         * then, another client's version maybe. */
        ws->base = in->cur;
        ws->base_lent = 1;
        return ws_base_opened(ws, 0);
    }
    if (!key && !fresh && ws->kept) { /* no name left: the file as it went */
        ws->base = ws->kept;
        ws->kept = NULL;
        return ws_base_opened(ws, 0);
    }
    if (key)
        rc = mc_obj_open_async(ws->fs->store, key, klen, &ws->base, ws_base_opened_by_key, ws);
    if (rc < 0)
        ws_base_opened(ws, rc);
}

/* Runs w with the writer open, opening it (copy-on-write) if needed. */
void fs_ws_need(fs_wstate_t *ws, fs_waiter_t *w)
{
    switch (ws->state) {
    case WS_READY:
        w->run(w, fs_woken(ws->fs));
        return;
    case WS_OPENING:
    case WS_COMMITTING:
    case WS_FAILING:
        ws_enqueue(ws, w);
        return;
    case WS_NONE:
        break;
    }
    ws_enqueue(ws, w);
    ws->state = WS_OPENING;
    ws_open_base(&ws->gate, 0);
}

/* The version in progress failed with rc: every handle open for writing on
 * the file fails its later writes and its flushes with rc. */
void fs_ws_poison(fs_wstate_t *ws, int rc)
{
    /* The page cache may hold what the failed writes put there: the next
     * open that finds the version other descriptors read (or finds none
     * open) drops it (fs_cache_open() in cache.c). */
    ws->in->version = 0;
    for (fs_fh_t *fh = ws->fs->fhs; fh; fh = fh->next)
        if (fh->writable && fh->in == ws->in && !fh->err)
            fh->err = rc;
}

/* The poisoned handle's error, or 0. */
int fs_fh_err(const fs_fh_t *fh)
{
    return fh && fh->writable ? fh->err : 0;
}

/* The commit ended with rc: wake the flushes waiting for it (they answer
 * rc), then whatever queued meanwhile. */
static void ws_wake(fs_wstate_t *ws, int rc)
{
    fs_waiter_t *c = ws->committers;
    ws->committers = NULL;
    ws->closing = 0;
    while (c) {
        fs_waiter_t *next = c->next;
        c->run(c, rc);
        c = next;
    }
    ws->handles++;
    ws_drain(ws, 0);
    ws->handles--;
    fs_ws_settle(ws);
}

/* The commit ended, or the failed version was aborted (published says
 * whether a version was published): wake the flushes waiting for it, then
 * whatever queued meanwhile. */
static void ws_finish(fs_wstate_t *ws, int rc, int published)
{
    ws->w = NULL; /* the store freed it */
    ws->state = WS_NONE;
    ws->dirty = 0;
    if (rc < 0)
        fs_ws_poison(ws, rc); /* what the writers wrote is lost */
    if (published) {
        ws->in->st = ws->st;
        fs_cache_published(ws->fs, ws->in, ws->st.version, ws->closing);
        if (ws->foreign)
            ws->in->version = 0; /* pages of the version it did not copy may stay */
        ws->foreign = 0;
        mc_obj_close(ws->kept); /* the file has a name: the next writer copies it */
        ws->kept = NULL;
    }
    ws_wake(ws, rc);
}

/* The stat of a hard-linked file's inode key after its commit was refused
 * (ws_committed()): gone, the file had no name left when the commit came
 * (another mount removed its last one), and there was nothing to publish,
 * as for a file unlinked here (ws_commit_now()). */
static void ws_nameless(void *arg, int rc)
{
    fs_wstate_t *ws = arg;
    if (rc == -ENOENT)
        return ws_finish(ws, 0, 0); /* the store revoked the writer */
    fprintf(stderr, "mooncake-fs: error: publishing (a hard-linked file) failed: %s\n",
            mc_strerror(-ESTALE));
    ws_finish(ws, -ESTALE, 0);
}

static void ws_committed(void *arg, int rc)
{
    fs_wstate_t *ws = arg;
    char ibuf[64];
    size_t klen;
    const char *ino = !ws->in->key && rc == -ESTALE && !ws->fs->stopping
                          ? fs_inode_file_key(ws->in, ibuf, sizeof(ibuf), &klen)
                          : NULL;
    if (ino && mc_stat_async(ws->fs->store, ino, klen, &ws->st, ws_nameless, ws) == 0)
        return; /* refused for a file without a name, or lost? */
    /* Canceled: the daemon is shutting down. A directory: another mount
     * made one of the file's name meanwhile (MC_PUT_NOTDIR), which the
     * file would be hidden behind; the close says so. */
    if (rc < 0)
        fprintf(stderr, "mooncake-fs: %s: publishing %s failed: %s\n",
                rc == -ECANCELED ? "info"
                : rc == -EISDIR  ? "warn"
                                 : "error",
                ws->in->key ? ws->in->key : "(unlinked)", mc_strerror(rc));
    ws_finish(ws, rc, rc == 0);
}

/* Sends the commit (state COMMITTING, nothing in flight); when the file
 * has no name left, goes back to READY with nothing sent. */
static void ws_commit_now(fs_wstate_t *ws);

/* ws->gate's run while a commit waits for an unlink or rename of the file. */
static void ws_commit_gated(fs_waiter_t *gate, int err)
{
    fs_wstate_t *ws = (fs_wstate_t *)((char *)gate - offsetof(fs_wstate_t, gate));
    (void)err;
    if (!ws->fs->stopping)
        return ws_commit_now(ws);
    mc_writer_abort(ws->w); /* fs_shutdown(): no new store operation */
    ws_finish(ws, -ECANCELED, 0);
}

static void ws_commit_now(fs_wstate_t *ws)
{
    ws->gate.run = ws_commit_gated;
    if (fs_naming_gate(ws->fs, ws->in->key, ws->in->klen, &ws->gate))
        return; /* then to the key the file has, or none */
    if (!ws_named(ws)) {
        /* Unlinked or renamed over (no other name): nothing to publish,
         * and the writes stay the file's for its descriptors still open
         * (fs_ws_settle()); the flush answers 0. */
        ws->state = WS_READY;
        ws_wake(ws, 0);
        return;
    }
    char ibuf[64];
    size_t klen;
    const char *key = fs_inode_file_key(ws->in, ibuf, sizeof(ibuf), &klen);
    int rc = key ? mc_writer_set_key(ws->w, key, klen) : -EINVAL; /* no inode key */
    if (rc == 0) {
        rc = mc_writer_commit_async(ws->w, &ws->st, ws_committed, ws);
        if (rc == 0)
            return;
    }
    fprintf(stderr, "mooncake-fs: error: publishing %s failed: %s\n",
            ws->in->key ? ws->in->key : "(a hard-linked file)", mc_strerror(rc));
    mc_writer_abort(ws->w);
    ws_finish(ws, rc, 0);
}

/* Publishes the writer (state READY and dirty) once the writer operations
 * in flight end; if one of them fails, nothing is published and the
 * committers get its error. */
void fs_ws_commit(fs_wstate_t *ws)
{
    ws->state = WS_COMMITTING;
    ws->size = mc_writer_size(ws->w); /* writes wait meanwhile: it stays */
    if (!ws->ops)
        ws_commit_now(ws);
}

int64_t fs_ws_size(const fs_wstate_t *ws)
{
    if (ws->state == WS_READY)
        return (int64_t)mc_writer_size(ws->w);
    return ws->state == WS_COMMITTING ? (int64_t)ws->size : -1;
}

/* Counts a writer operation starting (state READY). */
void fs_ws_op_start(fs_wstate_t *ws)
{
    ws->ops++;
}

/* A writer operation ended with rc. A failure fails the version in
 * progress (see the top of this file). The last operation in flight sends
 * the commit waiting for it, or aborts the failed version, or, when the
 * last handle went meanwhile (a read of the version in progress through a
 * read-only descriptor holds none), publishes as that release would have.
 * The caller must hold the state (a handle) if it uses ws afterwards. */
void fs_ws_op_done(fs_wstate_t *ws, int rc)
{
    ws->ops--;
    if (rc < 0 && ws->state != WS_FAILING) {
        fs_ws_poison(ws, rc);
        ws->state = WS_FAILING;
        ws->err = rc;
    }
    if (ws->ops)
        return;
    if (ws->state == WS_COMMITTING) {
        ws_commit_now(ws);
    } else if (ws->state == WS_FAILING) {
        mc_writer_abort(ws->w);
        ws_finish(ws, ws->err, 0);
    } else if (!ws->fs->stopping) { /* fs_ws_shutdown() frees it then */
        fs_ws_settle(ws);
    }
}

static void ws_kept_opened(void *arg, int rc)
{
    fs_wstate_t *ws = arg;
    if (rc < 0)
        ws->kept = NULL; /* then a writer opened later starts empty */
    fs_waiter_t *w = ws->kept_wait;
    ws->kept_wait = NULL;
    w->run(w, rc < 0 ? rc : fs_woken(ws->fs));
    ws->handles--;
    fs_ws_settle(ws);
}

int fs_ws_before_unnamed(fs_inode_t *in, fs_waiter_t *w)
{
    fs_wstate_t *ws = in ? in->ws : NULL;
    if (!ws || !ws->handles || ws->state != WS_NONE || ws->fresh || ws->kept || ws->kept_wait ||
        !in->key || fs_inode_has_other_names(in) || ws->fs->stopping)
        return 0;
    ws->handles++; /* the open holds the state */
    ws->kept_wait = w;
    int rc = mc_obj_open_async(ws->fs->store, in->key, in->klen, &ws->kept, ws_kept_opened, ws);
    if (rc < 0)
        ws_kept_opened(ws, rc);
    return 1;
}

void fs_ws_shutdown(fs_t *fs, int store_closed)
{
    for (fs_wstate_t *ws = fs->wss, *next; ws; ws = next) {
        next = ws->next;
        /* A writer with an operation in flight (a commit, an open, writes)
         * is its store's until that operation ends: its callback still
         * comes, and finds the state here. */
        if (!store_closed && (ws->ops || fs_ws_busy(ws) || ws->kept_wait))
            continue;
        if (ws->w && !store_closed)
            mc_writer_abort(ws->w);
        if (ws->base && !store_closed)
            ws_base_close(ws);
        if (store_closed)
            ws->kept = NULL; /* closed with the store */
        if (store_closed)
            ws->in->held = NULL; /* closed with the store; ws_free() may free the inode */
        ws->w = NULL;
        ws->base = NULL;
        ws->base_lent = 0;
        ws->handles = 0;
        ws->wait_head = ws->wait_tail = NULL;
        ws_free(ws);
    }
}
