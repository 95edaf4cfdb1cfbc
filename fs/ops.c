/*
 * ops.c - the FUSE low-level operations of mooncake-fs.
 *
 * Every handler starts an asynchronous store operation and returns; the
 * reply is sent from the completion, on the same loop thread. Nothing here
 * blocks. Only reply_err() (fs_i.h) turns a negative result into a FUSE
 * error reply. Writes go through the file's writer state (writers.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "fs.h"
#include "fs_i.h"
#include "inode.h"
#include "path.h"
#include "writers.h"

#define DIR_MODE_DEFAULT 0755
#define BLKSIZE (1 << 20)

struct fs_dh {
    fs_inode_t *in;
    char *cursor; /* last key returned */
    size_t clen;
    off_t next_off; /* offset the next readdir continues from */
};

/* ---- attributes ---- */

void fs_fill_attr(fs_t *fs, fs_inode_t *in, const mc_stat_t *st, struct stat *a)
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

void fs_fill_entry(fs_t *fs, fs_inode_t *in, const mc_stat_t *st, struct fuse_entry_param *e)
{
    memset(e, 0, sizeof(*e));
    e->ino = in->ino;
    e->generation = 1;
    e->attr_timeout = fs->timeout;
    e->entry_timeout = fs->timeout;
    fs_fill_attr(fs, in, st, &e->attr);
}

/* Copies the directory marker key of dir inode in ("a/b/") into out. */
static size_t marker_key(const fs_inode_t *in, char *out)
{
    memcpy(out, in->key, in->klen);
    out[in->klen] = '/';
    out[in->klen + 1] = '\0';
    return in->klen + 1;
}

/* ---- lookup, getattr ---- */

static void lookup_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    int is_dir = rc == MC_LOOKUP_DIR;
    fs_inode_t *in = fs_inode_ref(c->fs->it, c->key, c->klen, is_dir);
    if (!in)
        return fs_ctx_fail(c, -ENOMEM);
    if (!is_dir)
        in->st = c->st;
    struct fuse_entry_param e;
    fs_fill_entry(c->fs, in, is_dir && !c->st.version ? NULL : &c->st, &e);
    fuse_reply_entry(c->req, &e);
    fs_ctx_free(c);
}

void fs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    fs_ctx_t *c = fs_ctx_new(req, NULL);
    if (!c || fs_child_key(c, parent, name, c->key, &c->klen) < 0)
        return;
    int rc = mc_lookup_async(c->fs->store, c->key, c->klen, '/', &c->st, lookup_done, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

void fs_op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    fs_t *fs = fs_of(req);
    fs_inode_t *in = fs_inode_get(fs->it, ino);
    if (in)
        fs_inode_forget(fs->it, in, nlookup);
    fuse_reply_none(req);
}

void fs_op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
    fs_t *fs = fs_of(req);
    for (size_t i = 0; i < count; i++) {
        fs_inode_t *in = fs_inode_get(fs->it, forgets[i].ino);
        if (in)
            fs_inode_forget(fs->it, in, forgets[i].nlookup);
    }
    fuse_reply_none(req);
}

static void attr_reply(fs_ctx_t *c, const mc_stat_t *st)
{
    struct stat a;
    fs_fill_attr(c->fs, c->in, st, &a);
    fuse_reply_attr(c->req, &a, c->fs->timeout);
    fs_ctx_free(c);
}

static void attr_stat_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    fs_inode_t *in = c->in;
    if (in->is_dir)
        return attr_reply(c, rc == 0 ? &c->st : NULL);
    if (rc == -ENOENT && (!in->key || in->opens))
        return attr_reply(c, &in->st); /* open, unlinked: last known */
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    in->st = c->st;
    attr_reply(c, &c->st);
}

/* Replies to c->req with the inode's current attributes. */
static void attr_fetch(fs_ctx_t *c)
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
        fs_ctx_fail(c, rc);
}

/* Replies with the attributes a handle sees: its writer's size, or the
 * size of the version it opened. */
static void attr_reply_fh(fuse_req_t req, fs_t *fs, fs_fh_t *fh)
{
    fs_inode_t *in = fh->in;
    fs_wstate_t *ws = in->ws;
    struct stat a;
    fs_fill_attr(fs, in, &in->st, &a);
    if (fh->writable && ws && ws->state == WS_READY)
        a.st_size = (off_t)mc_writer_size(ws->w);
    else if (fh->obj)
        a.st_size = (off_t)mc_obj_stat(fh->obj)->size;
    a.st_blocks = (a.st_size + 511) / 512;
    fuse_reply_attr(req, &a, fs->timeout);
}

void fs_op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fs_t *fs = fs_of(req);
    fs_inode_t *in = fs_inode_get(fs->it, ino);
    if (!in)
        return reply_err(req, -ENOENT);
    if (fi && !in->is_dir && fi->fh)
        return attr_reply_fh(req, fs, (fs_fh_t *)(uintptr_t)fi->fh);
    fs_ctx_t *c = fs_ctx_new(req, in);
    if (c)
        attr_fetch(c);
}

/* ---- setattr: size, then mode/times, then the reply ---- */

static void setattr_step(fs_ctx_t *c);

static void setattr_next(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0 && rc != -ENOENT)
        return fs_ctx_fail(c, rc);
    c->stage++;
    setattr_step(c);
}

static void setattr_committed(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    fs_wstate_t *ws = c->in->ws;
    ws->handles--; /* ws_finish() settles the state after its committers */
    c->stage++;
    if (err < 0)
        return fs_ctx_fail(c, err);
    setattr_step(c);
}

static void setattr_truncated(void *arg, int rc)
{
    fs_ctx_t *c = arg;
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
            fs_ws_commit(ws);
        return fs_ws_op_done(ws, 0);
    }
    fs_ws_op_done(ws, rc);
    ws->handles--;
    if (rc >= 0)
        rc = fs_fh_err(c->fh); /* another write failed the version meanwhile */
    if (rc < 0) {
        fs_ws_settle(ws);
        return fs_ctx_fail(c, rc);
    }
    c->stage++;
    setattr_step(c);
}

static void setattr_have_writer(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    fs_wstate_t *ws = c->in->ws;
    if (err < 0)
        fs_ws_poison(ws, err); /* opening the writer (copying the base) failed */
    else
        err = fs_fh_err(c->fh);
    if (err < 0) {
        ws->handles--;
        fs_ws_settle(ws);
        return fs_ctx_fail(c, err);
    }
    fs_ws_op_start(ws);
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
    fs_ctx_t *c = arg;
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

static void setattr_step(fs_ctx_t *c)
{
    fs_inode_t *in = c->in;
    int rc = 0;
    switch (c->stage) {
    case 0: /* size */
        c->stage = 1;
        if ((c->to_set & FUSE_SET_ATTR_SIZE) && !in->is_dir) {
            if (!in->key && !in->ws)
                return fs_ctx_fail(c, -ENOENT);
            if (fs_fh_err(c->fh))
                return fs_ctx_fail(c, fs_fh_err(c->fh));
            fs_wstate_t *ws = fs_ws_get(c->fs, in);
            if (!ws)
                return fs_ctx_fail(c, -ENOMEM);
            ws->handles++;
            c->wait.need_writer = 1;
            c->wait.run = setattr_have_writer;
            return fs_ws_need(ws, &c->wait);
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
            mtime = fs_now_ns();
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
            fs_ctx_fail(c, rc);
        return;
    }
    default:
        if (c->fh && !in->is_dir) {
            attr_reply_fh(c->req, c->fs, c->fh);
            return fs_ctx_free(c);
        }
        attr_fetch(c);
    }
}

void fs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
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
    fs_ctx_t *c = fs_ctx_new(req, in);
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
    fs_ctx_t *c = arg;
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    int is_dir = c->kind;
    fs_inode_t *in = fs_inode_ref(c->fs->it, c->key, c->klen, is_dir);
    if (!in)
        return fs_ctx_fail(c, -ENOMEM);
    mc_stat_t st = {.mode = c->mode & 07777, .mtime_ns = fs_now_ns()};
    if (!is_dir)
        in->st = st;
    struct fuse_entry_param e;
    fs_fill_entry(c->fs, in, &st, &e);
    fuse_reply_entry(c->req, &e);
    fs_ctx_free(c);
}

static void empty_looked_up(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc >= 0)
        return fs_ctx_fail(c, -EEXIST);
    if (rc != -ENOENT)
        return fs_ctx_fail(c, rc);
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
        fs_ctx_fail(c, rc);
}

static void make_empty(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, int is_dir)
{
    fs_ctx_t *c = fs_ctx_new(req, NULL);
    if (!c || fs_child_key(c, parent, name, c->key, &c->klen) < 0)
        return;
    c->mode = mode;
    c->kind = is_dir;
    int rc = mc_lookup_async(c->fs->store, c->key, c->klen, '/', &c->st, empty_looked_up, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

void fs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    make_empty(req, parent, name, mode, 1);
}

static void rmdir_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    fs_inode_t *in = fs_inode_find(c->fs->it, c->key, c->klen, 1);
    /* A directory that only existed through its last child vanished with
     * it: removing it now succeeds. */
    if (rc == -ENOENT && in)
        rc = 0;
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    if (in)
        fs_inode_unlink(c->fs->it, in);
    reply_err(c->req, 0);
    fs_ctx_free(c);
}

void fs_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    fs_ctx_t *c = fs_ctx_new(req, NULL);
    if (!c || fs_child_key(c, parent, name, c->key, &c->klen) < 0)
        return;
    memcpy(c->key2, c->key, c->klen);
    c->key2[c->klen] = '/';
    c->klen2 = c->klen + 1;
    int rc = mc_remove_async(c->fs->store, c->key2, c->klen2, MC_REMOVE_DIR | MC_REMOVE_FORCE,
                             rmdir_done, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

void fs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
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

void fs_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
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
static int dir_add(fs_ctx_t *c, const char *name, fs_inode_t *in, const mc_stat_t *st, off_t off)
{
    size_t room = c->size - c->outlen;
    size_t need;
    if (c->plus) {
        struct fuse_entry_param e;
        fs_fill_entry(c->fs, in, st, &e);
        need = fuse_add_direntry_plus(c->req, NULL, 0, name, &e, off);
        if (need > room)
            return 1;
        fuse_add_direntry_plus(c->req, c->out + c->outlen, room, name, &e, off);
    } else {
        struct stat a;
        fs_fill_attr(c->fs, in, st, &a);
        need = fuse_add_direntry(c->req, NULL, 0, name, &a, off);
        if (need > room)
            return 1;
        fuse_add_direntry(c->req, c->out + c->outlen, room, name, &a, off);
    }
    c->outlen += need;
    return 0;
}

static void readdir_list(fs_ctx_t *c);

static void readdir_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    fs_dh_t *dh = c->dh;
    if (rc < 0)
        return fs_ctx_fail(c, rc);
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
                    return fs_ctx_fail(c, -ENOMEM);
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
            return fs_ctx_fail(c, -ENOMEM);
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
    fs_ctx_free(c);
}

static void readdir_list(fs_ctx_t *c)
{
    size_t max = (c->size - c->outlen) / 32 + 1;
    int rc = mc_list_async(c->fs->store, c->key, c->klen, c->dh->cursor, c->dh->clen, '/', max,
                           &c->list, readdir_done, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi, int plus)
{
    fs_dh_t *dh = (fs_dh_t *)(uintptr_t)fi->fh;
    fs_inode_t *in = dh->in;
    if (!in->key)
        return reply_err(req, -ENOENT);
    fs_ctx_t *c = fs_ctx_new(req, in);
    if (!c)
        return;
    c->dh = dh;
    c->plus = plus;
    c->size = size;
    c->out = malloc(size);
    if (!c->out)
        return fs_ctx_fail(c, -ENOMEM);
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

void fs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                   struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, fi, 0);
}

void fs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
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
    if (fh->obj)
        mc_obj_close(fh->obj);
    fs_inode_t *in = fh->in;
    in->opens--;
    if (fh->writable && in->ws) {
        in->ws->handles--;
        fs_ws_settle(in->ws);
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
    fs_ctx_t *c = arg;
    fs_fh_t *fh = c->fh;
    fs_inode_t *in = c->in;
    if (rc < 0) {
        fh_free(c->fs, fh);
        if (c->kind == 1)
            fs_inode_forget(c->fs->it, in, 1);
        return fs_ctx_fail(c, rc);
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

static void open_version(fs_ctx_t *c)
{
    int writable = is_writable(c->fi.flags);
    c->fh = fh_new(c->fs, c->in, writable);
    if (!c->fh)
        return fs_ctx_fail(c, -ENOMEM);
    if (writable)
        fs_ws_add_owner(c->in->ws, c->req);
    int rc = mc_obj_open_async(c->fs->store, c->in->key, c->in->klen, &c->fh->obj, open_done, c);
    if (rc < 0)
        open_done(c, rc);
}

static void open_truncated(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    fs_wstate_t *ws = c->in->ws;
    fs_ws_op_done(ws, rc);
    if (rc < 0)
        fs_ctx_fail(c, rc);
    else
        open_version(c); /* takes its handle before ours goes */
    ws->handles--;
    fs_ws_settle(ws);
}

static void open_trunc_ready(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    if (err < 0)
        return fs_ctx_fail(c, err);
    open_version(c);
}

/* O_TRUNC: the file is written afresh; readers keep seeing the old content
 * until the new version is published at close. */
static void open_trunc_writer(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    if (err < 0)
        return fs_ctx_fail(c, err);
    fs_wstate_t *ws = fs_ws_get(c->fs, c->in);
    if (!ws)
        return fs_ctx_fail(c, -ENOMEM);
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
        return reply_err(req, -ENOENT);
    if (!in->key)
        return reply_err(req, -ESTALE); /* replaced: the VFS looks the path up again */
    if (in->is_dir)
        return reply_err(req, -EISDIR);
    fs_ctx_t *c = fs_ctx_new(req, in);
    if (!c)
        return;
    c->fi = *fi;
    if ((fi->flags & O_TRUNC) && is_writable(fi->flags)) {
        c->wait.need_writer = 0;
        c->wait.run = open_trunc_writer;
        if (in->ws)
            return fs_ws_when_idle(in->ws, &c->wait);
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
    c->kind = 1;
    if (existed && (c->fi.flags & O_TRUNC) && is_writable(c->fi.flags)) {
        c->wait.need_writer = 0;
        c->wait.run = open_trunc_writer;
        if (c->in->ws)
            return fs_ws_when_idle(c->in->ws, &c->wait);
        return open_trunc_writer(&c->wait, 0);
    }
    open_version(c);
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
    mc_put_opts_t po = {
        .flags = MC_PUT_NOREPLACE, .mode = c->mode & 07777, .replica_num = c->fs->replicas};
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
    int rc = mc_lookup_async(c->fs->store, c->key, c->klen, '/', &c->st, create_looked_up, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

void fs_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
    if (!S_ISREG(mode))
        return reply_err(req, -EPERM); /* only regular files are objects */
    make_empty(req, parent, name, mode, 0);
}

void fs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fh_free(fs_of(req), (fs_fh_t *)(uintptr_t)fi->fh);
    reply_err(req, 0);
}

/* ---- read, write, flush ---- */

static void read_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    fuse_reply_buf(c->req, c->data, (size_t)rc);
    fs_ctx_free(c);
}

static void read_writer_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    fs_ws_op_done(c->in->ws, 0); /* a failed read leaves the version intact */
    read_done(c, rc);
}

static void read_run(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    fs_fh_t *fh = c->fh;
    fs_wstate_t *ws = fh->in->ws;
    int rc;
    if (err < 0)
        return fs_ctx_fail(c, err);
    if (fh->writable && ws && ws->state == WS_READY) {
        fs_ws_op_start(ws);
        rc = mc_writer_read_async(ws->w, (uint64_t)c->off, c->data, c->size, read_writer_done, c);
        if (rc < 0)
            fs_ws_op_done(ws, 0);
    } else if (fh->writable && fh->in->key && fh->in->version != mc_obj_stat(fh->obj)->version) {
        rc = mc_get_async(c->fs->store, fh->in->key, fh->in->klen, (uint64_t)c->off, c->data,
                          c->size, NULL, read_done, c); /* our own newer version */
    } else {
        rc = mc_obj_read_async(fh->obj, (uint64_t)c->off, c->data, c->size, read_done, c);
    }
    if (rc < 0)
        fs_ctx_fail(c, rc);
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
    c->data = malloc(size ? size : 1);
    if (!c->data)
        return fs_ctx_fail(c, -ENOMEM);
    c->wait.run = read_run;
    c->wait.need_writer = 0;
    if (fh->writable && fh->in->ws)
        fs_ws_when_idle(fh->in->ws, &c->wait);
    else
        read_run(&c->wait, 0);
}

static void write_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    fs_ws_op_done(c->in->ws, rc); /* the handle holds the state */
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    fuse_reply_write(c->req, (size_t)rc);
    fs_ctx_free(c);
}

static void write_run(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    fs_wstate_t *ws = c->in->ws;
    if (err < 0)
        fs_ws_poison(ws, err); /* opening the writer (copying the base) failed */
    if (c->fh->err)
        return fs_ctx_fail(c, c->fh->err);
    ws->dirty = 1;
    if (c->fh->append)
        c->off = (off_t)mc_writer_size(ws->w);
    fs_ws_op_start(ws);
    int rc = mc_writer_write_async(ws->w, (uint64_t)c->off, c->wbuf, c->size, write_done, c);
    if (rc < 0)
        write_done(c, rc);
}

void fs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                 struct fuse_file_info *fi)
{
    fs_fh_t *fh = (fs_fh_t *)(uintptr_t)fi->fh;
    fs_t *fs = fs_of(req);
    if (!fh->writable || !fh->in->ws)
        return reply_err(req, -EBADF);
    if (fh->err)
        return reply_err(req, fh->err);
    fs_ctx_t *c = fs_ctx_new(req, fh->in);
    if (!c)
        return;
    /* The data lives in the request buffer: keep it until the write is
     * done instead of copying it. */
    c->data = fs_take_request_buffer(fs);
    fs_ws_add_owner(fh->in->ws, req);
    c->wbuf = buf;
    c->size = size;
    c->off = off;
    c->fh = fh;
    c->wait.need_writer = 1;
    c->wait.run = write_run;
    fs_ws_need(fh->in->ws, &c->wait);
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

void fs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    /* Data lives in memory segments; the version is published at close.
     * See docs/SEMANTICS.md. */
    reply_err(req, 0);
}

/* ---- unlink, rename ---- */

static void unlink_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    fs_inode_t *in = fs_inode_find(c->fs->it, c->key, c->klen, 0);
    if (in) {
        fs_ws_orphan(in);
        fs_inode_unlink(c->fs->it, in);
    }
    fs_ctx_fail(c, 0);
}

void fs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    fs_ctx_t *c = fs_ctx_new(req, NULL);
    if (!c || fs_child_key(c, parent, name, c->key, &c->klen) < 0)
        return;
    int rc = mc_remove_async(c->fs->store, c->key, c->klen, MC_REMOVE_FORCE, unlink_done, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

static void rename_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    fs_t *fs = c->fs;
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    int is_dir = c->kind == MC_LOOKUP_DIR;
    size_t flen = c->klen, tlen = c->klen2;
    /* The replaced destination's inodes lose their key. */
    fs_inode_t *dst = fs_inode_find(fs->it, c->key2, tlen, 0);
    if (dst) {
        fs_ws_orphan(dst);
        fs_inode_unlink(fs->it, dst);
    }
    dst = fs_inode_find(fs->it, c->key2, tlen, 1);
    if (dst)
        fs_inode_unlink(fs->it, dst);
    rc = fs_inode_rename(fs->it, c->key, flen, c->key2, tlen, is_dir);
    fs_ctx_fail(c, rc);
}

static void rename_dest_looked_up(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0 && rc != -ENOENT)
        return fs_ctx_fail(c, rc);
    if (rc >= 0 && (c->flags & RENAME_NOREPLACE))
        return fs_ctx_fail(c, -EEXIST);
    if (c->kind == MC_LOOKUP_FILE && rc == MC_LOOKUP_DIR)
        return fs_ctx_fail(c, -EISDIR);
    if (c->kind == MC_LOOKUP_DIR && rc == MC_LOOKUP_FILE)
        return fs_ctx_fail(c, -ENOTDIR);
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
            return fs_ctx_fail(c, -ENOMEM);
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
        fs_ctx_fail(c, rc);
}

static void rename_src_looked_up(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    c->kind = rc;
    rc = mc_lookup_async(c->fs->store, c->key2, c->klen2, '/', &c->st2, rename_dest_looked_up, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

void fs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                  const char *newname, unsigned int flags)
{
    if (flags & ~RENAME_NOREPLACE)
        return reply_err(req, -EINVAL); /* RENAME_EXCHANGE, RENAME_WHITEOUT */
    fs_ctx_t *c = fs_ctx_new(req, NULL);
    if (!c || fs_child_key(c, parent, name, c->key, &c->klen) < 0 ||
        fs_child_key(c, newparent, newname, c->key2, &c->klen2) < 0)
        return;
    c->flags = (int)flags;
    int rc = mc_lookup_async(c->fs->store, c->key, c->klen, '/', &c->st, rename_src_looked_up, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

void fs_op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
    reply_err(req, -EPERM); /* a key names one object: no hard links */
}

void fs_op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    reply_err(req, -EPERM);
}

/* ---- statfs, access ---- */

static void statfs_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0)
        return fs_ctx_fail(c, rc);
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
    fs_ctx_free(c);
}

void fs_op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    fs_ctx_t *c = fs_ctx_new(req, NULL);
    if (!c)
        return;
    int rc = mc_statfs_async(c->fs->store, &c->sp, statfs_done, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

void fs_op_access(fuse_req_t req, fuse_ino_t ino, int mask)
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
    fs_ws_shutdown(fs);
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
    .rename = fs_op_rename,
    .link = fs_op_link,
    .open = fs_op_open,
    .read = fs_op_read,
    .write = fs_op_write,
    .flush = fs_op_flush,
    .release = fs_op_release,
    .fsync = fs_op_fsync,
    .opendir = fs_op_opendir,
    .readdir = fs_op_readdir,
    .readdirplus = fs_op_readdirplus,
    .releasedir = fs_op_releasedir,
    .statfs = fs_op_statfs,
    .access = fs_op_access,
    .create = fs_op_create,
};
