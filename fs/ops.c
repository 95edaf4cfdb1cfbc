/*
 * ops.c - the FUSE low-level operations of mooncake-fs.
 *
 * Every handler starts an asynchronous store operation and returns; the
 * reply is sent from the completion, on the same loop thread. Nothing here
 * blocks. Only reply_err() turns a negative result into a FUSE error reply.
 *
 * Writes: all writable handles of a file share one writer state (fs_wstate),
 * which opens a store writer on the first write (copy-on-write from the
 * current version), streams data into the store as it arrives, and publishes
 * the new version when a writable handle is flushed (close) or the last one
 * is released. Operations that need the writer while it is being opened or
 * committed wait on its queue; a commit waits for the writer operations in
 * flight.
 *
 * A version in progress whose write fails (ENOSPC, EIO, any error of the
 * store while writing, copying the base or growing by truncate) is never
 * published: the writer is aborted once its operations in flight end, and
 * every handle open for writing at that moment fails its later writes and
 * its flush with the error. The file keeps its published version.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "fs.h"
#include "path.h"

#define DIR_MODE_DEFAULT 0755
#define BLKSIZE (1 << 20)

typedef struct fs_waiter fs_waiter_t;
struct fs_waiter {
    fs_waiter_t *next;
    int need_writer; /* 1: wants the writer open; 0: only wants it idle */
    void (*run)(fs_waiter_t *w, int err);
};

/* NONE: no writer. OPENING: mc_writer_open in flight. READY: the writer
 * takes writes. COMMITTING: a commit waits for the operations in flight, or
 * is in flight. FAILING: an operation failed; the writer is aborted when the
 * operations in flight end. */
enum ws_state { WS_NONE, WS_OPENING, WS_READY, WS_COMMITTING, WS_FAILING };

typedef struct fs_wstate {
    fs_t *fs;
    fs_inode_t *in;
    mc_writer_t *w;
    mc_obj_t *base;
    enum ws_state state;
    int handles;  /* writable handles plus operations holding the state */
    int ops;      /* writer operations (write, read, truncate) in flight */
    int err;      /* why the version failed, while FAILING */
    int dirty;    /* the writer holds changes not yet published */
    int orphaned; /* the file was unlinked or replaced: never publish */
    int fresh;    /* the next writer starts empty instead of copying */
    mc_stat_t st; /* filled by the commit */
    fs_waiter_t *wait_head, *wait_tail;
    fs_waiter_t *committers; /* flushes waiting for the commit in flight */
    pid_t owners[8];         /* processes that opened it for writing or wrote */
    int nowners;
    struct fs_wstate *prev, *next;
} fs_wstate_t;

typedef struct fs_fh {
    fs_inode_t *in;
    mc_obj_t *obj; /* the version opened, for reads */
    int writable;
    int append; /* O_APPEND: writes go to the end, whatever the offset */
    int err;    /* a write to the file failed while this handle was open for
                   writing: its later writes and its flushes fail with err */
    struct fs_fh *prev, *next;
} fs_fh_t;

typedef struct fs_dh {
    fs_inode_t *in;
    char *cursor; /* last key returned */
    size_t clen;
    off_t next_off; /* offset the next readdir continues from */
} fs_dh_t;

/* One request in flight. */
typedef struct ctx {
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
    int to_set;
    struct stat attr;
    struct fuse_file_info fi;
    mc_stat_t st;
    mc_stat_t st2;
    mc_list_t *list;
    mc_space_t sp;
    void *data; /* owned request buffer or read buffer */
    const char *wbuf;
    size_t size;
    off_t off;
    int plus;
    char *out; /* readdir reply */
    size_t outlen;
    char key[MC_KEY_MAX + 2];
    size_t klen;
    char key2[MC_KEY_MAX + 2];
    size_t klen2;
} ctx_t;

static fs_t *fs_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

static void reply_err(fuse_req_t req, int rc)
{
    fuse_reply_err(req, rc < 0 ? -rc : rc);
}

static ctx_t *ctx_new(fuse_req_t req, fs_inode_t *in)
{
    ctx_t *c = calloc(1, sizeof(*c));
    if (!c) {
        reply_err(req, -ENOMEM);
        return NULL;
    }
    c->fs = fs_of(req);
    c->req = req;
    c->in = in;
    c->fs->inflight++;
    return c;
}

static void ctx_free(ctx_t *c)
{
    c->fs->inflight--;
    mc_list_free(c->list);
    free(c->data);
    free(c->out);
    free(c);
}

static void ctx_fail(ctx_t *c, int rc)
{
    reply_err(c->req, rc);
    ctx_free(c);
}

void *fs_take_request_buffer(fs_t *fs)
{
    fs->rbuf_taken = 1;
    return fs->rbuf.mem;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- attributes ---- */

static void fill_attr(fs_t *fs, fs_inode_t *in, const mc_stat_t *st, struct stat *a)
{
    memset(a, 0, sizeof(*a));
    a->st_ino = in->ino;
    a->st_uid = fs->uid;
    a->st_gid = fs->gid;
    a->st_blksize = BLKSIZE;
    int64_t mt = st && st->mtime_ns ? st->mtime_ns : fs->start_ns;
    if (in->is_dir) {
        a->st_mode = S_IFDIR | (st && st->mode ? st->mode : DIR_MODE_DEFAULT);
        a->st_nlink = 2;
    } else {
        a->st_mode = S_IFREG | (st ? st->mode : 0644);
        a->st_nlink = in->key ? 1 : 0;
        a->st_size = st ? (off_t)st->size : 0;
        if (in->ws && in->ws->state == WS_READY)
            a->st_size = (off_t)mc_writer_size(in->ws->w);
        a->st_blocks = (a->st_size + 511) / 512;
    }
    a->st_mtim.tv_sec = mt / 1000000000LL;
    a->st_mtim.tv_nsec = mt % 1000000000LL;
    a->st_ctim = a->st_mtim;
    a->st_atim = a->st_mtim;
}

static void fill_entry(fs_t *fs, fs_inode_t *in, const mc_stat_t *st, struct fuse_entry_param *e)
{
    memset(e, 0, sizeof(*e));
    e->ino = in->ino;
    e->generation = 1;
    e->attr_timeout = fs->timeout;
    e->entry_timeout = fs->timeout;
    fill_attr(fs, in, st, &e->attr);
}

/* Copies the directory marker key of dir inode in ("a/b/") into out. */
static size_t marker_key(const fs_inode_t *in, char *out)
{
    memcpy(out, in->key, in->klen);
    out[in->klen] = '/';
    out[in->klen + 1] = '\0';
    return in->klen + 1;
}

/* Looks up parent + name into c->key; replies and returns -1 on error. */
static int child_key(ctx_t *c, fuse_ino_t parent, const char *name, char *key, size_t *klen)
{
    fs_inode_t *p = fs_inode_get(c->fs->it, parent);
    if (!p || !p->is_dir || !p->key) {
        ctx_fail(c, p ? -ENOTDIR : -ENOENT);
        return -1;
    }
    int rc = fs_key_join(p->key, p->klen, name, key);
    if (rc < 0) {
        ctx_fail(c, rc);
        return -1;
    }
    *klen = (size_t)rc;
    return 0;
}

/* The process (thread group) of a request's thread. */
static pid_t tgid_of(pid_t tid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tid;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return tid;
    buf[n] = '\0';
    const char *t = strstr(buf, "\nTgid:");
    return t ? (pid_t)atoi(t + 7) : tid;
}

/* ---- writer states ---- */

/* Records the requester's process as one that may publish at close. */
static void ws_add_owner(fs_wstate_t *ws, fuse_req_t req)
{
    pid_t p = tgid_of(fuse_req_ctx(req)->pid);
    for (int i = 0; i < ws->nowners; i++)
        if (ws->owners[i] == p)
            return;
    if (ws->nowners < (int)(sizeof(ws->owners) / sizeof(ws->owners[0])))
        ws->owners[ws->nowners++] = p;
}

/* A close publishes only when it comes from a process that opened the file
 * for writing or wrote to it: a forked child closing the descriptor it
 * inherited must not publish a half-written file. */
static int ws_is_owner(const fs_wstate_t *ws, fuse_req_t req)
{
    pid_t p = tgid_of(fuse_req_ctx(req)->pid);
    for (int i = 0; i < ws->nowners; i++)
        if (ws->owners[i] == p)
            return 1;
    return ws->nowners == (int)(sizeof(ws->owners) / sizeof(ws->owners[0]));
}

static fs_wstate_t *ws_get(fs_t *fs, fs_inode_t *in)
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
    return ws;
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
    fs_inode_maybe_free(fs->it, ws->in);
    free(ws);
}

static void ws_need(fs_wstate_t *ws, fs_waiter_t *w);
static void ws_commit(fs_wstate_t *ws);

static void ws_enqueue(fs_wstate_t *ws, fs_waiter_t *w)
{
    w->next = NULL;
    if (ws->wait_tail)
        ws->wait_tail->next = w;
    else
        ws->wait_head = w;
    ws->wait_tail = w;
}

static int ws_busy(const fs_wstate_t *ws)
{
    return ws->state == WS_OPENING || ws->state == WS_COMMITTING || ws->state == WS_FAILING;
}

/* Runs w once the state is not opening, committing or failing. */
static void ws_when_idle(fs_wstate_t *ws, fs_waiter_t *w)
{
    if (ws_busy(ws))
        ws_enqueue(ws, w);
    else
        w->run(w, 0);
}

/* Called when nothing is in flight: publish or drop what is left, free. */
static void ws_settle(fs_wstate_t *ws)
{
    if (ws->handles || ws->ops || ws->wait_head || ws_busy(ws))
        return;
    if (ws->state == WS_READY) {
        if (ws->dirty && !ws->orphaned && ws->in->key) {
            ws_commit(ws); /* settles again when done */
            return;
        }
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
    while (w) {
        fs_waiter_t *next = w->next;
        if (err)
            w->run(w, err);
        else if (w->need_writer)
            ws_need(ws, w);
        else
            ws_when_idle(ws, w);
        w = next;
    }
}

static void ws_opened(void *arg, int rc)
{
    fs_wstate_t *ws = arg;
    if (ws->base) {
        mc_obj_close(ws->base);
        ws->base = NULL;
    }
    ws->state = rc < 0 ? WS_NONE : WS_READY;
    ws->handles++;
    ws_drain(ws, rc < 0 ? rc : 0);
    ws->handles--;
    ws_settle(ws);
}

static void ws_base_opened(void *arg, int rc)
{
    fs_wstate_t *ws = arg;
    mc_put_opts_t po = {.mode = ws->in->st.mode, .replica_num = ws->fs->replicas};
    if (rc < 0)
        ws->base = NULL;
    const char *key = ws->in->key ? ws->in->key : "orphan";
    size_t klen = ws->in->key ? ws->in->klen : 6;
    rc = mc_writer_open_async(ws->fs->store, key, klen, &po, ws->base, &ws->w, ws_opened, ws);
    if (rc < 0)
        ws_opened(ws, rc);
}

/* Runs w with the writer open, opening it (copy-on-write) if needed. */
static void ws_need(fs_wstate_t *ws, fs_waiter_t *w)
{
    switch (ws->state) {
    case WS_READY:
        w->run(w, 0);
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
    int rc = -ENOENT;
    int fresh = ws->fresh;
    ws->fresh = 0;
    if (ws->in->key && !ws->orphaned && !fresh)
        rc = mc_obj_open_async(ws->fs->store, ws->in->key, ws->in->klen, &ws->base, ws_base_opened,
                               ws);
    if (rc < 0)
        ws_base_opened(ws, rc);
}

/* The version in progress failed with rc: every handle open for writing on
 * the file fails its later writes and its flushes with rc. */
static void ws_poison(fs_wstate_t *ws, int rc)
{
    for (fs_fh_t *fh = ws->fs->fhs; fh; fh = fh->next)
        if (fh->writable && fh->in == ws->in && !fh->err)
            fh->err = rc;
}

/* The poisoned handle's error, or 0. */
static int fh_err(const fs_fh_t *fh)
{
    return fh && fh->writable ? fh->err : 0;
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
        ws_poison(ws, rc); /* what the writers wrote is lost */
    if (published)
        ws->in->st = ws->st; /* written with direct I/O: not in the page cache */
    fs_waiter_t *c = ws->committers;
    ws->committers = NULL;
    while (c) {
        fs_waiter_t *next = c->next;
        c->run(c, rc);
        c = next;
    }
    ws->handles++;
    ws_drain(ws, 0);
    ws->handles--;
    ws_settle(ws);
}

static void ws_committed(void *arg, int rc)
{
    fs_wstate_t *ws = arg;
    if (rc < 0)
        fprintf(stderr, "mooncake-fs: error: publishing %s failed: %s\n",
                ws->in->key ? ws->in->key : "(unlinked)", mc_strerror(rc));
    ws_finish(ws, rc, rc == 0);
}

/* Sends the commit (state COMMITTING, nothing in flight), or drops the
 * changes when the file is gone. */
static void ws_commit_now(fs_wstate_t *ws)
{
    int rc = 0;
    if (!ws->orphaned && ws->in->key) {
        rc = mc_writer_set_key(ws->w, ws->in->key, ws->in->klen);
        if (rc == 0) {
            rc = mc_writer_commit_async(ws->w, &ws->st, ws_committed, ws);
            if (rc == 0)
                return;
        }
        fprintf(stderr, "mooncake-fs: error: publishing %s failed: %s\n", ws->in->key,
                mc_strerror(rc));
    }
    mc_writer_abort(ws->w);
    ws_finish(ws, rc, 0);
}

/* Publishes the writer (state READY and dirty) once the writer operations
 * in flight end; if one of them fails, nothing is published and the
 * committers get its error. */
static void ws_commit(fs_wstate_t *ws)
{
    ws->state = WS_COMMITTING;
    if (!ws->ops)
        ws_commit_now(ws);
}

/* Counts a writer operation starting (state READY). */
static void ws_op_start(fs_wstate_t *ws)
{
    ws->ops++;
}

/* A writer operation ended with rc. A failure fails the version in
 * progress (see the top of this file). The last operation in flight sends
 * the commit waiting for it, or aborts the failed version. The caller must
 * hold the state (a handle) if it uses ws afterwards. */
static void ws_op_done(fs_wstate_t *ws, int rc)
{
    ws->ops--;
    if (rc < 0 && ws->state != WS_FAILING) {
        ws_poison(ws, rc);
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
    }
}

/* The file was unlinked or replaced: what its writers hold is never
 * published. */
static void ws_orphan(fs_inode_t *in)
{
    if (in && in->ws)
        in->ws->orphaned = 1;
}

/* ---- lookup, getattr ---- */

static void lookup_done(void *arg, int rc)
{
    ctx_t *c = arg;
    if (rc < 0)
        return ctx_fail(c, rc);
    int is_dir = rc == MC_LOOKUP_DIR;
    fs_inode_t *in = fs_inode_ref(c->fs->it, c->key, c->klen, is_dir);
    if (!in)
        return ctx_fail(c, -ENOMEM);
    if (!is_dir)
        in->st = c->st;
    struct fuse_entry_param e;
    fill_entry(c->fs, in, is_dir && !c->st.version ? NULL : &c->st, &e);
    fuse_reply_entry(c->req, &e);
    ctx_free(c);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    ctx_t *c = ctx_new(req, NULL);
    if (!c || child_key(c, parent, name, c->key, &c->klen) < 0)
        return;
    int rc = mc_lookup_async(c->fs->store, c->key, c->klen, '/', &c->st, lookup_done, c);
    if (rc < 0)
        ctx_fail(c, rc);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    fs_t *fs = fs_of(req);
    fs_inode_t *in = fs_inode_get(fs->it, ino);
    if (in)
        fs_inode_forget(fs->it, in, nlookup);
    fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
    fs_t *fs = fs_of(req);
    for (size_t i = 0; i < count; i++) {
        fs_inode_t *in = fs_inode_get(fs->it, forgets[i].ino);
        if (in)
            fs_inode_forget(fs->it, in, forgets[i].nlookup);
    }
    fuse_reply_none(req);
}

static void attr_reply(ctx_t *c, const mc_stat_t *st)
{
    struct stat a;
    fill_attr(c->fs, c->in, st, &a);
    fuse_reply_attr(c->req, &a, c->fs->timeout);
    ctx_free(c);
}

static void attr_stat_done(void *arg, int rc)
{
    ctx_t *c = arg;
    fs_inode_t *in = c->in;
    if (in->is_dir)
        return attr_reply(c, rc == 0 ? &c->st : NULL);
    if (rc == -ENOENT && (!in->key || in->opens))
        return attr_reply(c, &in->st); /* open, unlinked: last known */
    if (rc < 0)
        return ctx_fail(c, rc);
    in->st = c->st;
    attr_reply(c, &c->st);
}

/* Replies to c->req with the inode's current attributes. */
static void attr_fetch(ctx_t *c)
{
    fs_inode_t *in = c->in;
    int rc;
    if (!in->key || in->ino == FUSE_ROOT_ID)
        return attr_reply(c, in->ino == FUSE_ROOT_ID ? NULL : &in->st);
    if (in->ws && in->ws->state != WS_NONE)
        return attr_reply(c, &in->st);
    if (in->is_dir) {
        c->klen2 = marker_key(in, c->key2);
        rc = mc_stat_async(c->fs->store, c->key2, c->klen2, &c->st, attr_stat_done, c);
    } else {
        rc = mc_stat_async(c->fs->store, in->key, in->klen, &c->st, attr_stat_done, c);
    }
    if (rc < 0)
        ctx_fail(c, rc);
}

/* Replies with the attributes a handle sees: its writer's size, or the
 * size of the version it opened. */
static void attr_reply_fh(fuse_req_t req, fs_t *fs, fs_fh_t *fh)
{
    fs_inode_t *in = fh->in;
    fs_wstate_t *ws = in->ws;
    struct stat a;
    fill_attr(fs, in, &in->st, &a);
    if (fh->writable && ws && ws->state == WS_READY)
        a.st_size = (off_t)mc_writer_size(ws->w);
    else if (fh->obj)
        a.st_size = (off_t)mc_obj_stat(fh->obj)->size;
    a.st_blocks = (a.st_size + 511) / 512;
    fuse_reply_attr(req, &a, fs->timeout);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fs_t *fs = fs_of(req);
    fs_inode_t *in = fs_inode_get(fs->it, ino);
    if (!in)
        return reply_err(req, -ENOENT);
    if (fi && !in->is_dir && fi->fh)
        return attr_reply_fh(req, fs, (fs_fh_t *)(uintptr_t)fi->fh);
    ctx_t *c = ctx_new(req, in);
    if (c)
        attr_fetch(c);
}

/* ---- setattr: size, then mode/times, then the reply ---- */

static void setattr_step(ctx_t *c);

static void setattr_next(void *arg, int rc)
{
    ctx_t *c = arg;
    if (rc < 0 && rc != -ENOENT)
        return ctx_fail(c, rc);
    c->stage++;
    setattr_step(c);
}

static void setattr_committed(fs_waiter_t *w, int err)
{
    ctx_t *c = (ctx_t *)w;
    fs_wstate_t *ws = c->in->ws;
    ws->handles--; /* ws_finish() settles the state after its committers */
    c->stage++;
    if (err < 0)
        return ctx_fail(c, err);
    setattr_step(c);
}

static void setattr_truncated(void *arg, int rc)
{
    ctx_t *c = arg;
    fs_wstate_t *ws = c->in->ws;
    int by_path = !c->fh || !c->fh->writable;
    if (rc >= 0)
        ws->dirty = 1;
    if (rc >= 0 && by_path) {
        /* truncate(2) by path: publish now. The commit's result (or the
         * error of a write that fails the version meanwhile) is the reply. */
        c->wait.run = setattr_committed;
        c->wait.next = ws->committers;
        ws->committers = &c->wait;
        if (ws->state == WS_READY)
            ws_commit(ws);
        return ws_op_done(ws, 0);
    }
    ws_op_done(ws, rc);
    ws->handles--;
    if (rc >= 0)
        rc = fh_err(c->fh); /* another write failed the version meanwhile */
    if (rc < 0) {
        ws_settle(ws);
        return ctx_fail(c, rc);
    }
    c->stage++;
    setattr_step(c);
}

static void setattr_have_writer(fs_waiter_t *w, int err)
{
    ctx_t *c = (ctx_t *)w;
    fs_wstate_t *ws = c->in->ws;
    if (err < 0)
        ws_poison(ws, err); /* opening the writer (copying the base) failed */
    else
        err = fh_err(c->fh);
    if (err < 0) {
        ws->handles--;
        ws_settle(ws);
        return ctx_fail(c, err);
    }
    ws_op_start(ws);
    int rc = mc_writer_truncate_async(ws->w, (uint64_t)c->attr.st_size, setattr_truncated, c);
    if (rc < 0)
        setattr_truncated(c, rc);
}

static void setattr_marker_put(void *arg, int rc)
{
    setattr_next(arg, rc == -EEXIST ? 0 : rc);
}

static void setattr_meta_done(void *arg, int rc)
{
    ctx_t *c = arg;
    if (rc == -ENOENT && c->in->is_dir && (c->to_set & FUSE_SET_ATTR_MODE)) {
        /* An implicit directory: give it a marker to hold the mode. */
        mc_put_opts_t po = {.flags = MC_PUT_NOREPLACE,
                            .mode = c->attr.st_mode & 07777,
                            .replica_num = c->fs->replicas};
        rc = mc_put_async(c->fs->store, c->key2, c->klen2, "", 0, &po, setattr_marker_put, c);
        if (rc == 0)
            return;
    }
    setattr_next(c, rc);
}

static void setattr_step(ctx_t *c)
{
    fs_inode_t *in = c->in;
    int rc = 0;
    switch (c->stage) {
    case 0: /* size */
        c->stage = 1;
        if ((c->to_set & FUSE_SET_ATTR_SIZE) && !in->is_dir) {
            if (!in->key && !in->ws)
                return ctx_fail(c, -ENOENT);
            if (fh_err(c->fh))
                return ctx_fail(c, fh_err(c->fh));
            fs_wstate_t *ws = ws_get(c->fs, in);
            if (!ws)
                return ctx_fail(c, -ENOMEM);
            ws->handles++;
            c->wait.need_writer = 1;
            c->wait.run = setattr_have_writer;
            return ws_need(ws, &c->wait);
        }
        c->stage = 2;
        /* fall through */
    case 1:
    case 2: { /* mode and mtime */
        c->stage = 2;
        unsigned what = 0;
        int64_t mtime = 0;
        if (c->to_set & FUSE_SET_ATTR_MODE)
            what |= MC_META_MODE;
        if (c->to_set & FUSE_SET_ATTR_MTIME_NOW) {
            what |= MC_META_MTIME;
            mtime = now_ns();
        } else if (c->to_set & FUSE_SET_ATTR_MTIME) {
            what |= MC_META_MTIME;
            mtime = (int64_t)c->attr.st_mtim.tv_sec * 1000000000LL + c->attr.st_mtim.tv_nsec;
        }
        if (!what || !in->key || in->ino == FUSE_ROOT_ID) {
            c->stage = 3;
            return setattr_step(c);
        }
        uint32_t mode = c->attr.st_mode & 07777;
        if (in->ws && in->ws->state == WS_READY)
            mc_writer_set_meta(in->ws->w, (what & MC_META_MODE) ? mode : 0, mtime);
        if (what & MC_META_MODE)
            in->st.mode = mode;
        if (what & MC_META_MTIME)
            in->st.mtime_ns = mtime;
        if (in->is_dir) {
            c->klen2 = marker_key(in, c->key2);
            rc = mc_set_meta_async(c->fs->store, c->key2, c->klen2, what, mode, mtime,
                                   setattr_meta_done, c);
        } else {
            rc = mc_set_meta_async(c->fs->store, in->key, in->klen, what, mode, mtime,
                                   setattr_meta_done, c);
        }
        if (rc < 0)
            ctx_fail(c, rc);
        return;
    }
    default:
        if (c->fh && !in->is_dir) {
            attr_reply_fh(c->req, c->fs, c->fh);
            return ctx_free(c);
        }
        attr_fetch(c);
    }
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    fs_t *fs = fs_of(req);
    fs_inode_t *in = fs_inode_get(fs->it, ino);
    if (!in)
        return reply_err(req, -ENOENT);
    if (((to_set & FUSE_SET_ATTR_UID) && attr->st_uid != fs->uid) ||
        ((to_set & FUSE_SET_ATTR_GID) && attr->st_gid != fs->gid))
        return reply_err(req, -EPERM);
    if ((to_set & FUSE_SET_ATTR_SIZE) && in->is_dir)
        return reply_err(req, -EISDIR);
    ctx_t *c = ctx_new(req, in);
    if (!c)
        return;
    c->attr = *attr;
    c->to_set = to_set;
    c->fh = fi ? (fs_fh_t *)(uintptr_t)fi->fh : NULL;
    setattr_step(c);
}

/* ---- directories: mkdir, rmdir, readdir ---- */

/* mkdir and mknod: publish an empty object (a directory's marker "a/b/",
 * or the file) if the name is free, then reply with the new entry. */
static void empty_done(void *arg, int rc)
{
    ctx_t *c = arg;
    if (rc < 0)
        return ctx_fail(c, rc);
    int is_dir = c->kind;
    fs_inode_t *in = fs_inode_ref(c->fs->it, c->key, c->klen, is_dir);
    if (!in)
        return ctx_fail(c, -ENOMEM);
    mc_stat_t st = {.mode = c->mode & 07777, .mtime_ns = now_ns()};
    if (!is_dir)
        in->st = st;
    struct fuse_entry_param e;
    fill_entry(c->fs, in, &st, &e);
    fuse_reply_entry(c->req, &e);
    ctx_free(c);
}

static void empty_looked_up(void *arg, int rc)
{
    ctx_t *c = arg;
    if (rc >= 0)
        return ctx_fail(c, -EEXIST);
    if (rc != -ENOENT)
        return ctx_fail(c, rc);
    mc_put_opts_t po = {
        .flags = MC_PUT_NOREPLACE, .mode = c->mode & 07777, .replica_num = c->fs->replicas};
    const char *key = c->key;
    size_t klen = c->klen;
    if (c->kind) {
        memcpy(c->key2, c->key, c->klen);
        c->key2[c->klen] = '/';
        c->klen2 = c->klen + 1;
        key = c->key2;
        klen = c->klen2;
    }
    rc = mc_put_async(c->fs->store, key, klen, "", 0, &po, empty_done, c);
    if (rc < 0)
        ctx_fail(c, rc);
}

static void make_empty(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, int is_dir)
{
    ctx_t *c = ctx_new(req, NULL);
    if (!c || child_key(c, parent, name, c->key, &c->klen) < 0)
        return;
    c->mode = mode;
    c->kind = is_dir;
    int rc = mc_lookup_async(c->fs->store, c->key, c->klen, '/', &c->st, empty_looked_up, c);
    if (rc < 0)
        ctx_fail(c, rc);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    make_empty(req, parent, name, mode, 1);
}

static void rmdir_done(void *arg, int rc)
{
    ctx_t *c = arg;
    fs_inode_t *in = fs_inode_find(c->fs->it, c->key, c->klen, 1);
    /* A directory that only existed through its last child vanished with
     * it: removing it now succeeds. */
    if (rc == -ENOENT && in)
        rc = 0;
    if (rc < 0)
        return ctx_fail(c, rc);
    if (in)
        fs_inode_unlink(c->fs->it, in);
    reply_err(c->req, 0);
    ctx_free(c);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    ctx_t *c = ctx_new(req, NULL);
    if (!c || child_key(c, parent, name, c->key, &c->klen) < 0)
        return;
    memcpy(c->key2, c->key, c->klen);
    c->key2[c->klen] = '/';
    c->klen2 = c->klen + 1;
    int rc = mc_remove_async(c->fs->store, c->key2, c->klen2, MC_REMOVE_DIR | MC_REMOVE_FORCE,
                             rmdir_done, c);
    if (rc < 0)
        ctx_fail(c, rc);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fs_inode_t *in = fs_inode_get(fs_of(req)->it, ino);
    if (!in)
        return reply_err(req, -ENOENT);
    if (!in->is_dir)
        return reply_err(req, -ENOTDIR);
    fs_dh_t *dh = calloc(1, sizeof(*dh));
    if (!dh)
        return reply_err(req, -ENOMEM);
    dh->in = in;
    in->opens++;
    fi->fh = (uintptr_t)dh;
    fuse_reply_open(req, fi);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fs_t *fs = fs_of(req);
    fs_dh_t *dh = (fs_dh_t *)(uintptr_t)fi->fh;
    dh->in->opens--;
    fs_inode_maybe_free(fs->it, dh->in);
    free(dh->cursor);
    free(dh);
    reply_err(req, 0);
}

/* Adds one entry to the readdir reply; returns 0, or 1 when it does not fit. */
static int dir_add(ctx_t *c, const char *name, fs_inode_t *in, const mc_stat_t *st, off_t off)
{
    size_t room = c->size - c->outlen;
    size_t need;
    if (c->plus) {
        struct fuse_entry_param e;
        fill_entry(c->fs, in, st, &e);
        need = fuse_add_direntry_plus(c->req, NULL, 0, name, &e, off);
        if (need > room)
            return 1;
        fuse_add_direntry_plus(c->req, c->out + c->outlen, room, name, &e, off);
    } else {
        struct stat a;
        fill_attr(c->fs, in, st, &a);
        need = fuse_add_direntry(c->req, NULL, 0, name, &a, off);
        if (need > room)
            return 1;
        fuse_add_direntry(c->req, c->out + c->outlen, room, name, &a, off);
    }
    c->outlen += need;
    return 0;
}

static void readdir_list(ctx_t *c);

static void readdir_done(void *arg, int rc)
{
    ctx_t *c = arg;
    fs_dh_t *dh = c->dh;
    if (rc < 0)
        return ctx_fail(c, rc);
    size_t plen = c->klen;
    mc_list_t *l = c->list;
    int full = 0;
    size_t i = 0;
    char name[NAME_MAX + 1];
    for (; i < l->n && !full; i++) {
        mc_list_entry_t *e = &l->entries[i];
        int nl = fs_child_name(e->key, e->klen, plen);
        if (nl >= 0) {
            memcpy(name, e->key + plen, (size_t)nl);
            name[nl] = '\0';
            int is_dir = e->is_prefix;
            size_t ilen = is_dir ? e->klen - 1 : e->klen;
            const mc_stat_t *st = is_dir && !e->st.version ? NULL : &e->st;
            fs_inode_t *in = fs_inode_find(c->fs->it, e->key, ilen, is_dir);
            fs_inode_t tmp = {.ino = 0, .is_dir = is_dir, .key = (char *)"", .klen = 0};
            if (c->plus) {
                in = fs_inode_ref(c->fs->it, e->key, ilen, is_dir);
                if (!in)
                    return ctx_fail(c, -ENOMEM);
                if (!is_dir)
                    in->st = e->st;
            }
            if (!in) {
                tmp.ino = 0xffffffff; /* unknown: the kernel asks by lookup */
                in = &tmp;
            }
            if (dir_add(c, name, in, st, dh->next_off + 1)) {
                if (c->plus)
                    fs_inode_forget(c->fs->it, in, 1);
                full = 1;
                break;
            }
            dh->next_off++;
        }
        /* Consumed: move the cursor past it. */
        char *cur = realloc(dh->cursor, e->klen);
        if (!cur)
            return ctx_fail(c, -ENOMEM);
        memcpy(cur, e->key, e->klen);
        dh->cursor = cur;
        dh->clen = e->klen;
    }
    if (!full && l->more) {
        mc_list_free(c->list);
        c->list = NULL;
        return readdir_list(c);
    }
    fuse_reply_buf(c->req, c->out, c->outlen);
    ctx_free(c);
}

static void readdir_list(ctx_t *c)
{
    size_t max = (c->size - c->outlen) / 32 + 1;
    int rc = mc_list_async(c->fs->store, c->key, c->klen, c->dh->cursor, c->dh->clen, '/', max,
                           &c->list, readdir_done, c);
    if (rc < 0)
        ctx_fail(c, rc);
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi, int plus)
{
    fs_dh_t *dh = (fs_dh_t *)(uintptr_t)fi->fh;
    fs_inode_t *in = dh->in;
    if (!in->key)
        return reply_err(req, -ENOENT);
    ctx_t *c = ctx_new(req, in);
    if (!c)
        return;
    c->dh = dh;
    c->plus = plus;
    c->size = size;
    c->out = malloc(size);
    if (!c->out)
        return ctx_fail(c, -ENOMEM);
    if (off != dh->next_off) {
        /* rewinddir() or seekdir(): start over, then skip to off. */
        free(dh->cursor);
        dh->cursor = NULL;
        dh->clen = 0;
        dh->next_off = 0;
        if (off > 2) {
            /* Positions past the dot entries are not kept; seekdir() to one
             * restarts the listing. */
            off = 0;
        }
    }
    if (dh->next_off < 1) {
        fs_inode_t *self = in;
        /* The kernel takes no lookup count for "." and "..". */
        if (dir_add(c, ".", self, NULL, 1) == 0)
            dh->next_off = 1;
    }
    if (dh->next_off == 1) {
        if (dir_add(c, "..", in, NULL, 2) == 0)
            dh->next_off = 2;
    }
    memcpy(c->key, in->key, in->klen);
    c->klen = in->klen;
    if (c->klen)
        c->key[c->klen++] = '/';
    readdir_list(c);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, fi, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, fi, 1);
}

/* ---- create, open, release ---- */

static fs_fh_t *fh_new(fs_t *fs, fs_inode_t *in, int writable)
{
    fs_fh_t *fh = calloc(1, sizeof(*fh));
    if (!fh)
        return NULL;
    if (writable) {
        fs_wstate_t *ws = ws_get(fs, in);
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
    if (fh->obj)
        mc_obj_close(fh->obj);
    fs_inode_t *in = fh->in;
    in->opens--;
    if (fh->writable && in->ws) {
        in->ws->handles--;
        ws_settle(in->ws);
    }
    fs_inode_maybe_free(fs->it, in);
    free(fh);
}

static int is_writable(int flags)
{
    return (flags & O_ACCMODE) != O_RDONLY;
}

/* The version is open: finish an open (kind 0) or a create (kind 1). */
static void open_done(void *arg, int rc)
{
    ctx_t *c = arg;
    fs_fh_t *fh = c->fh;
    fs_inode_t *in = c->in;
    if (rc < 0) {
        fh_free(c->fs, fh);
        if (c->kind == 1)
            fs_inode_forget(c->fs->it, in, 1);
        return ctx_fail(c, rc);
    }
    const mc_stat_t *st = mc_obj_stat(fh->obj);
    in->st = *st;
    c->fi.fh = (uintptr_t)fh;
    fh->append = (c->fi.flags & O_APPEND) != 0;
    /* The kernel keeps one page cache and one size per inode, and a
     * writer's O_TRUNC and writes change them under every reader of that
     * inode. So each handle does direct I/O: it reads exactly the version
     * it opened, whatever another handle publishes meanwhile. */
    c->fi.direct_io = 1;
    in->version = st->version;
    if (c->kind == 1) {
        struct fuse_entry_param e;
        fill_entry(c->fs, in, &in->st, &e);
        if (fuse_reply_create(c->req, &e, &c->fi) < 0) {
            fh_free(c->fs, fh);
            fs_inode_forget(c->fs->it, in, 1);
        }
    } else if (fuse_reply_open(c->req, &c->fi) < 0) {
        fh_free(c->fs, fh);
    }
    ctx_free(c);
}

static void open_version(ctx_t *c)
{
    int writable = is_writable(c->fi.flags);
    c->fh = fh_new(c->fs, c->in, writable);
    if (!c->fh)
        return ctx_fail(c, -ENOMEM);
    if (writable)
        ws_add_owner(c->in->ws, c->req);
    int rc = mc_obj_open_async(c->fs->store, c->in->key, c->in->klen, &c->fh->obj, open_done, c);
    if (rc < 0)
        open_done(c, rc);
}

static void open_truncated(void *arg, int rc)
{
    ctx_t *c = arg;
    fs_wstate_t *ws = c->in->ws;
    ws_op_done(ws, rc);
    if (rc < 0)
        ctx_fail(c, rc);
    else
        open_version(c); /* takes its handle before ours goes */
    ws->handles--;
    ws_settle(ws);
}

static void open_trunc_ready(fs_waiter_t *w, int err)
{
    ctx_t *c = (ctx_t *)w;
    if (err < 0)
        return ctx_fail(c, err);
    open_version(c);
}

/* O_TRUNC: the file is written afresh; readers keep seeing the old content
 * until the new version is published at close. */
static void open_trunc_writer(fs_waiter_t *w, int err)
{
    ctx_t *c = (ctx_t *)w;
    if (err < 0)
        return ctx_fail(c, err);
    fs_wstate_t *ws = ws_get(c->fs, c->in);
    if (!ws)
        return ctx_fail(c, -ENOMEM);
    ws->dirty = 1;
    if (ws->state == WS_READY) {
        ws->handles++;
        ws_op_start(ws);
        int rc = mc_writer_truncate_async(ws->w, 0, open_truncated, c);
        if (rc < 0)
            open_truncated(c, rc);
        return;
    }
    ws->fresh = 1;
    c->wait.need_writer = 1;
    c->wait.run = open_trunc_ready;
    ws_need(ws, &c->wait);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fs_inode_t *in = fs_inode_get(fs_of(req)->it, ino);
    if (!in)
        return reply_err(req, -ENOENT);
    if (!in->key)
        return reply_err(req, -ESTALE); /* replaced: the VFS looks the path up again */
    if (in->is_dir)
        return reply_err(req, -EISDIR);
    ctx_t *c = ctx_new(req, in);
    if (!c)
        return;
    c->fi = *fi;
    if ((fi->flags & O_TRUNC) && is_writable(fi->flags)) {
        c->wait.need_writer = 0;
        c->wait.run = open_trunc_writer;
        if (in->ws)
            return ws_when_idle(in->ws, &c->wait);
        return open_trunc_writer(&c->wait, 0);
    }
    open_version(c);
}

static void create_put_done(void *arg, int rc)
{
    ctx_t *c = arg;
    int existed = rc == -EEXIST;
    if (existed && !(c->fi.flags & O_EXCL))
        rc = 0; /* it exists (or was created meanwhile): open it */
    if (rc < 0)
        return ctx_fail(c, rc);
    c->in = fs_inode_ref(c->fs->it, c->key, c->klen, 0);
    if (!c->in)
        return ctx_fail(c, -ENOMEM);
    c->kind = 1;
    if (existed && (c->fi.flags & O_TRUNC) && is_writable(c->fi.flags)) {
        c->wait.need_writer = 0;
        c->wait.run = open_trunc_writer;
        if (c->in->ws)
            return ws_when_idle(c->in->ws, &c->wait);
        return open_trunc_writer(&c->wait, 0);
    }
    open_version(c);
}

static void create_looked_up(void *arg, int rc)
{
    ctx_t *c = arg;
    if (rc == MC_LOOKUP_DIR)
        return ctx_fail(c, -EISDIR);
    if (rc == MC_LOOKUP_FILE)
        return create_put_done(c, -EEXIST);
    if (rc != -ENOENT)
        return ctx_fail(c, rc);
    mc_put_opts_t po = {
        .flags = MC_PUT_NOREPLACE, .mode = c->mode & 07777, .replica_num = c->fs->replicas};
    rc = mc_put_async(c->fs->store, c->key, c->klen, "", 0, &po, create_put_done, c);
    if (rc < 0)
        ctx_fail(c, rc);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    ctx_t *c = ctx_new(req, NULL);
    if (!c || child_key(c, parent, name, c->key, &c->klen) < 0)
        return;
    c->fi = *fi;
    c->mode = mode;
    int rc = mc_lookup_async(c->fs->store, c->key, c->klen, '/', &c->st, create_looked_up, c);
    if (rc < 0)
        ctx_fail(c, rc);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
    if (!S_ISREG(mode))
        return reply_err(req, -EPERM); /* only regular files are objects */
    make_empty(req, parent, name, mode, 0);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fh_free(fs_of(req), (fs_fh_t *)(uintptr_t)fi->fh);
    reply_err(req, 0);
}

/* ---- read, write, flush ---- */

static void read_done(void *arg, int rc)
{
    ctx_t *c = arg;
    if (rc < 0)
        return ctx_fail(c, rc);
    fuse_reply_buf(c->req, c->data, (size_t)rc);
    ctx_free(c);
}

static void read_writer_done(void *arg, int rc)
{
    ctx_t *c = arg;
    ws_op_done(c->in->ws, 0); /* a failed read leaves the version intact */
    read_done(c, rc);
}

static void read_run(fs_waiter_t *w, int err)
{
    ctx_t *c = (ctx_t *)w;
    fs_fh_t *fh = c->fh;
    fs_wstate_t *ws = fh->in->ws;
    int rc;
    if (err < 0)
        return ctx_fail(c, err);
    if (fh->writable && ws && ws->state == WS_READY) {
        ws_op_start(ws);
        rc = mc_writer_read_async(ws->w, (uint64_t)c->off, c->data, c->size, read_writer_done, c);
        if (rc < 0)
            ws_op_done(ws, 0);
    } else if (fh->writable && fh->in->key && fh->in->version != mc_obj_stat(fh->obj)->version) {
        rc = mc_get_async(c->fs->store, fh->in->key, fh->in->klen, (uint64_t)c->off, c->data,
                          c->size, NULL, read_done, c); /* our own newer version */
    } else {
        rc = mc_obj_read_async(fh->obj, (uint64_t)c->off, c->data, c->size, read_done, c);
    }
    if (rc < 0)
        ctx_fail(c, rc);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    fs_fh_t *fh = (fs_fh_t *)(uintptr_t)fi->fh;
    ctx_t *c = ctx_new(req, fh->in);
    if (!c)
        return;
    c->fh = fh;
    c->off = off;
    c->size = size;
    c->data = malloc(size ? size : 1);
    if (!c->data)
        return ctx_fail(c, -ENOMEM);
    c->wait.run = read_run;
    c->wait.need_writer = 0;
    if (fh->writable && fh->in->ws)
        ws_when_idle(fh->in->ws, &c->wait);
    else
        read_run(&c->wait, 0);
}

static void write_done(void *arg, int rc)
{
    ctx_t *c = arg;
    ws_op_done(c->in->ws, rc); /* the handle holds the state */
    if (rc < 0)
        return ctx_fail(c, rc);
    fuse_reply_write(c->req, (size_t)rc);
    ctx_free(c);
}

static void write_run(fs_waiter_t *w, int err)
{
    ctx_t *c = (ctx_t *)w;
    fs_wstate_t *ws = c->in->ws;
    if (err < 0)
        ws_poison(ws, err); /* opening the writer (copying the base) failed */
    if (c->fh->err)
        return ctx_fail(c, c->fh->err);
    ws->dirty = 1;
    if (c->fh->append)
        c->off = (off_t)mc_writer_size(ws->w);
    ws_op_start(ws);
    int rc = mc_writer_write_async(ws->w, (uint64_t)c->off, c->wbuf, c->size, write_done, c);
    if (rc < 0)
        write_done(c, rc);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
    fs_fh_t *fh = (fs_fh_t *)(uintptr_t)fi->fh;
    fs_t *fs = fs_of(req);
    if (!fh->writable || !fh->in->ws)
        return reply_err(req, -EBADF);
    if (fh->err)
        return reply_err(req, fh->err);
    ctx_t *c = ctx_new(req, fh->in);
    if (!c)
        return;
    /* The data lives in the request buffer: keep it until the write is
     * done instead of copying it. */
    c->data = fs_take_request_buffer(fs);
    ws_add_owner(fh->in->ws, req);
    c->wbuf = buf;
    c->size = size;
    c->off = off;
    c->fh = fh;
    c->wait.need_writer = 1;
    c->wait.run = write_run;
    ws_need(fh->in->ws, &c->wait);
}

static void flush_committed(fs_waiter_t *w, int err)
{
    ctx_t *c = (ctx_t *)w;
    ctx_fail(c, err < 0 ? err : 0);
}

static void flush_run(fs_waiter_t *w, int err)
{
    ctx_t *c = (ctx_t *)w;
    fs_wstate_t *ws = c->in->ws;
    if (!err)
        err = c->fh->err;
    if (err < 0 || !ws || ws->state != WS_READY || !ws->dirty)
        return ctx_fail(c, err < 0 ? err : 0);
    c->wait.run = flush_committed;
    c->wait.next = ws->committers;
    ws->committers = &c->wait;
    ws_commit(ws);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fs_fh_t *fh = (fs_fh_t *)(uintptr_t)fi->fh;
    if (fh->writable && fh->err)
        return reply_err(req, fh->err); /* a write failed: nothing to publish */
    if (!fh->writable || !fh->in->ws || !ws_is_owner(fh->in->ws, req))
        return reply_err(req, 0); /* the last release publishes */
    ctx_t *c = ctx_new(req, fh->in);
    if (!c)
        return;
    c->fh = fh;
    c->wait.need_writer = 0;
    c->wait.run = flush_run;
    ws_when_idle(fh->in->ws, &c->wait);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    /* Data lives in memory segments; the version is published at close.
     * See docs/SEMANTICS.md. */
    reply_err(req, 0);
}

/* ---- unlink, rename ---- */

static void unlink_done(void *arg, int rc)
{
    ctx_t *c = arg;
    if (rc < 0)
        return ctx_fail(c, rc);
    fs_inode_t *in = fs_inode_find(c->fs->it, c->key, c->klen, 0);
    if (in) {
        ws_orphan(in);
        fs_inode_unlink(c->fs->it, in);
    }
    ctx_fail(c, 0);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    ctx_t *c = ctx_new(req, NULL);
    if (!c || child_key(c, parent, name, c->key, &c->klen) < 0)
        return;
    int rc = mc_remove_async(c->fs->store, c->key, c->klen, MC_REMOVE_FORCE, unlink_done, c);
    if (rc < 0)
        ctx_fail(c, rc);
}

static void rename_done(void *arg, int rc)
{
    ctx_t *c = arg;
    fs_t *fs = c->fs;
    if (rc < 0)
        return ctx_fail(c, rc);
    int is_dir = c->kind == MC_LOOKUP_DIR;
    size_t flen = c->klen, tlen = c->klen2;
    /* The replaced destination's inodes lose their key. */
    fs_inode_t *dst = fs_inode_find(fs->it, c->key2, tlen, 0);
    if (dst) {
        ws_orphan(dst);
        fs_inode_unlink(fs->it, dst);
    }
    dst = fs_inode_find(fs->it, c->key2, tlen, 1);
    if (dst)
        fs_inode_unlink(fs->it, dst);
    rc = fs_inode_rename(fs->it, c->key, flen, c->key2, tlen, is_dir);
    ctx_fail(c, rc);
}

static void rename_dest_looked_up(void *arg, int rc)
{
    ctx_t *c = arg;
    if (rc < 0 && rc != -ENOENT)
        return ctx_fail(c, rc);
    if (rc >= 0 && (c->flags & RENAME_NOREPLACE))
        return ctx_fail(c, -EEXIST);
    if (c->kind == MC_LOOKUP_FILE && rc == MC_LOOKUP_DIR)
        return ctx_fail(c, -EISDIR);
    if (c->kind == MC_LOOKUP_DIR && rc == MC_LOOKUP_FILE)
        return ctx_fail(c, -ENOTDIR);
    unsigned flags = (c->flags & RENAME_NOREPLACE) ? MC_RENAME_NOREPLACE : 0;
    if (c->kind == MC_LOOKUP_FILE) {
        rc = mc_rename_async(c->fs->store, c->key, c->klen, c->key2, c->klen2, flags, rename_done,
                             c);
    } else {
        /* Rename the prefixes "from/" -> "to/"; keys stay in c->key(2). */
        char *from = malloc(c->klen + 2), *to = malloc(c->klen2 + 2);
        if (!from || !to) {
            free(from);
            free(to);
            return ctx_fail(c, -ENOMEM);
        }
        memcpy(from, c->key, c->klen);
        from[c->klen] = '/';
        memcpy(to, c->key2, c->klen2);
        to[c->klen2] = '/';
        rc = mc_rename_async(c->fs->store, from, c->klen + 1, to, c->klen2 + 1,
                             flags | MC_RENAME_PREFIX, rename_done, c);
        free(from);
        free(to);
    }
    if (rc < 0)
        ctx_fail(c, rc);
}

static void rename_src_looked_up(void *arg, int rc)
{
    ctx_t *c = arg;
    if (rc < 0)
        return ctx_fail(c, rc);
    c->kind = rc;
    rc = mc_lookup_async(c->fs->store, c->key2, c->klen2, '/', &c->st2, rename_dest_looked_up, c);
    if (rc < 0)
        ctx_fail(c, rc);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
    if (flags & ~RENAME_NOREPLACE)
        return reply_err(req, -EINVAL); /* RENAME_EXCHANGE, RENAME_WHITEOUT */
    ctx_t *c = ctx_new(req, NULL);
    if (!c || child_key(c, parent, name, c->key, &c->klen) < 0 ||
        child_key(c, newparent, newname, c->key2, &c->klen2) < 0)
        return;
    c->flags = (int)flags;
    int rc = mc_lookup_async(c->fs->store, c->key, c->klen, '/', &c->st, rename_src_looked_up, c);
    if (rc < 0)
        ctx_fail(c, rc);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
    reply_err(req, -EPERM); /* a key names one object: no hard links */
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    reply_err(req, -EPERM);
}

/* ---- statfs, access ---- */

static void statfs_done(void *arg, int rc)
{
    ctx_t *c = arg;
    if (rc < 0)
        return ctx_fail(c, rc);
    struct statvfs sv;
    memset(&sv, 0, sizeof(sv));
    sv.f_bsize = 4096;
    sv.f_frsize = 4096;
    sv.f_blocks = c->sp.total / 4096;
    sv.f_bfree = (c->sp.total - c->sp.used) / 4096;
    sv.f_bavail = sv.f_bfree;
    sv.f_files = c->sp.objects + sv.f_bfree;
    sv.f_ffree = sv.f_bfree;
    sv.f_favail = sv.f_bfree;
    sv.f_namemax = NAME_MAX;
    fuse_reply_statfs(c->req, &sv);
    ctx_free(c);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    ctx_t *c = ctx_new(req, NULL);
    if (!c)
        return;
    int rc = mc_statfs_async(c->fs->store, &c->sp, statfs_done, c);
    if (rc < 0)
        ctx_fail(c, rc);
}

static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
    fs_inode_t *in = fs_inode_get(fs_of(req)->it, ino);
    reply_err(req, in ? 0 : -ENOENT);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    conn->max_write = 1 << 20;
    conn->max_readahead = 1 << 20;
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
        conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    if (conn->capable & FUSE_CAP_READDIRPLUS)
        conn->want |= FUSE_CAP_READDIRPLUS;
    conn->want &= ~(unsigned)(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE |
                              FUSE_CAP_WRITEBACK_CACHE);
}

void fs_shutdown(fs_t *fs)
{
    while (fs->fhs)
        fh_free(fs, fs->fhs);
    while (fs->wss) {
        fs_wstate_t *ws = fs->wss;
        if (ws->w)
            mc_writer_abort(ws->w);
        if (ws->base)
            mc_obj_close(ws->base);
        ws->w = NULL;
        ws->base = NULL;
        ws->handles = 0;
        ws->wait_head = ws->wait_tail = NULL;
        ws_free(ws);
    }
}

const struct fuse_lowlevel_ops fs_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .setattr = op_setattr,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .symlink = op_symlink,
    .rename = op_rename,
    .link = op_link,
    .open = op_open,
    .read = op_read,
    .write = op_write,
    .flush = op_flush,
    .release = op_release,
    .fsync = op_fsync,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .readdirplus = op_readdirplus,
    .releasedir = op_releasedir,
    .statfs = op_statfs,
    .access = op_access,
    .create = op_create,
};
