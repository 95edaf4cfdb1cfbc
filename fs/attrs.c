/*
 * attrs.c - attributes: getattr, setattr (size through the file's writer,
 * then mode, owner and times in one metadata change, then the reply; chown's
 * rules for the caller), statfs and access, and how an inode's attributes are
 * filled in for every reply that carries them.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "fs.h"
#include "fs_i.h"
#include "inode.h"
#include "writers.h"

#define DIR_MODE_DEFAULT 0755
#define BLKSIZE (1 << 20)

static struct timespec ts_of(int64_t ns)
{
    return (struct timespec){.tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL};
}

mode_t fs_type_bits(uint32_t type)
{
    switch (type) {
    case MC_TYPE_SYMLINK:
        return S_IFLNK;
    case MC_TYPE_FIFO:
        return S_IFIFO;
    case MC_TYPE_SOCK:
        return S_IFSOCK;
    case MC_TYPE_CHR:
        return S_IFCHR;
    case MC_TYPE_BLK:
        return S_IFBLK;
    default:
        return S_IFREG;
    }
}

uint32_t fs_type_of(mode_t mode)
{
    switch (mode & S_IFMT) {
    case S_IFLNK:
        return MC_TYPE_SYMLINK;
    case S_IFIFO:
        return MC_TYPE_FIFO;
    case S_IFSOCK:
        return MC_TYPE_SOCK;
    case S_IFCHR:
        return MC_TYPE_CHR;
    case S_IFBLK:
        return MC_TYPE_BLK;
    default:
        return MC_TYPE_FILE;
    }
}

void fs_fill_attr(fs_t *fs, fs_inode_t *in, const mc_stat_t *st, struct stat *a)
{
    memset(a, 0, sizeof(*a));
    /* A hard-linked file shows one number under all its names (tar and
     * rsync -H find links by it), apart from the daemon's own numbers. */
    a->st_ino = st && st->ino && !in->is_dir ? (ino_t)(st->ino | 1ULL << 62) : (ino_t)in->ino;
    /* A key no owner was recorded for (put through the API) is the
     * daemon's, as every file was before owners were stored. */
    a->st_uid = st && st->uid != MC_OWNER_NONE ? (uid_t)st->uid : fs->uid;
    a->st_gid = st && st->gid != MC_OWNER_NONE ? (gid_t)st->gid : fs->gid;
    a->st_blksize = BLKSIZE;
    /* A directory's st without a version: it has no marker (its lookup
     * still counted its subdirectories). */
    int marker = st && (!in->is_dir || st->version);
    /* The root has no marker but times (the master's). */
    int64_t mt = st && st->mtime_ns ? st->mtime_ns : fs->start_ns;
    if (in->is_dir) {
        a->st_mode = S_IFDIR | (marker ? st->mode : DIR_MODE_DEFAULT);
        a->st_nlink = st && st->nlink >= 2 ? st->nlink : 2;
    } else {
        a->st_mode = st ? fs_type_bits(st->type) | st->mode : S_IFREG | 0644;
        a->st_rdev = st ? (dev_t)st->rdev : 0;
        /* Names of the object: more than one for a hard-linked file. */
        a->st_nlink = in->key ? (st && st->nlink > 1 ? st->nlink : 1) : 0;
        a->st_size = st ? (off_t)st->size : 0;
        /* The space its bytes take: a sparse file's holes take none. A
         * version in progress counts every byte. */
        a->st_blocks = st ? (blkcnt_t)((st->alloc + 511) / 512) : 0;
        /* Until the commit's answer (COMMITTING too): the kernel has the
         * size the writes made, and cuts its page cache to the size it is
         * told (a reader of the cache would then read short). */
        int64_t wsize = in->ws ? fs_ws_size(in->ws) : -1;
        if (wsize >= 0) {
            a->st_size = (off_t)wsize;
            a->st_blocks = (a->st_size + 511) / 512;
        } else if (!fs->direct_io && in->cur) {
            /* The page cache holds cur while the file is open: the kernel
             * must not take the size of a newer version that a reader
             * opened with direct I/O meanwhile (readers of the cache would
             * get cur's bytes padded with zeros to that size). */
            a->st_size = (off_t)mc_obj_stat(in->cur)->size;
            a->st_blocks = (blkcnt_t)((mc_obj_stat(in->cur)->alloc + 511) / 512);
        }
    }
    a->st_mtim = ts_of(mt);
    a->st_ctim = ts_of(st && st->ctime_ns ? st->ctime_ns : mt);
    a->st_atim = ts_of(marker && st->atime_ns ? st->atime_ns : mt);
}

double fs_attr_timeout(const fs_t *fs, const mc_stat_t *st)
{
    /* A link or unlink through another name changes the count and ctime
     * of a hard-linked file, and the kernel knows nothing of names other
     * than the one it asked about: it must ask each time. */
    return st && st->ino ? 0 : fs->timeout;
}

void fs_fill_entry(fs_t *fs, fs_inode_t *in, const mc_stat_t *st, struct fuse_entry_param *e)
{
    memset(e, 0, sizeof(*e));
    e->ino = in->ino;
    e->generation = 1;
    e->attr_timeout = fs_attr_timeout(fs, st);
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

/* ---- getattr ---- */

static void attr_reply(fs_ctx_t *c, const mc_stat_t *st)
{
    struct stat a;
    fs_fill_attr(c->fs, c->in, st, &a);
    fuse_reply_attr(c->req, &a, fs_attr_timeout(c->fs, st));
    fs_ctx_free(c);
}

static void attr_stat_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    fs_inode_t *in = c->in;
    if (in->is_dir && rc == MC_LOOKUP_DIR) {
        in->st = c->st;
        in->counted_ns = fs_now_ns();
    }
    if (in->is_dir)
        return attr_reply(c, rc == MC_LOOKUP_DIR ? &c->st : NULL);
    if (rc == -ENOENT && (!in->key || in->opens))
        return attr_reply(c, &in->st); /* open, unlinked: last known */
    /* Gone under the name the kernel looked up (removed or renamed by
     * another client, or by this mount between the kernel's lookup and
     * this): ESTALE makes the kernel look the path up again (a stat, an
     * open's permission check: open(O_CREAT) then creates it), where
     * ENOENT would fail the call on a name it no longer holds. */
    if (rc == -ENOENT)
        rc = -ESTALE;
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    in->st = c->st;
    attr_reply(c, &c->st);
}

static void attr_fetch(fs_ctx_t *c);

/* A directory's marker was stat'ed: its attributes with the count of
 * subdirectories known; without a marker (gone), a lookup after all. */
static void attr_marker_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    fs_inode_t *in = c->in;
    if (rc < 0) {
        in->counted_ns = 0;
        return attr_fetch(c);
    }
    c->st.nlink = in->st.nlink;
    in->st = c->st;
    attr_reply(c, &c->st);
}

/* Whether directory in's count of subdirectories is recent enough to
 * answer with: within the attribute timeout since the master counted
 * them, as the kernel keeps attributes that long (counting walks every
 * key of the directory: it was most of the work of creating a file in a
 * large one, since each create makes the kernel ask for the directory's
 * attributes again). */
static int subdirs_fresh(const fs_t *fs, const fs_inode_t *in)
{
    return in->counted_ns && in->st.version &&
           (double)(fs_now_ns() - in->counted_ns) < fs->timeout * 1e9;
}

void fs_subdirs_changed(fs_t *fs, const char *key, size_t klen)
{
    size_t plen = klen;
    while (plen > 0 && key[plen - 1] != '/')
        plen--;
    fs_inode_t *p = fs_inode_find(fs->it, plen ? key : "", plen ? plen - 1 : 0, 1);
    if (p)
        p->counted_ns = 0;
}

/* Replies to c->req with the inode's current attributes. */
static void attr_fetch(fs_ctx_t *c)
{
    fs_inode_t *in = c->in;
    int rc;
    if (!in->key)
        return attr_reply(c, &in->st);
    if (in->ws && in->ws->state != WS_NONE)
        return attr_reply(c, &in->st);
    if (in->is_dir && in->ino != FUSE_ROOT_ID && subdirs_fresh(c->fs, in)) {
        c->klen = marker_key(in, c->key);
        rc = mc_stat_async(c->fs->store, c->key, c->klen, &c->st, attr_marker_done, c);
    } else if (in->ino == FUSE_ROOT_ID) { /* the master's LOOKUP of "/" is the root */
        rc = mc_lookup_async(c->fs->store, "/", 1, '/', &c->st, attr_stat_done, c);
    } else if (in->is_dir) {
        rc = mc_lookup_async(c->fs->store, in->key, in->klen, '/', &c->st, attr_stat_done, c);
    } else {
        rc = mc_stat_async(c->fs->store, in->key, in->klen, &c->st, attr_stat_done, c);
    }
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

/* Replies with the attributes a handle sees: the size of what it reads
 * (fs_fh_follows()): its writer's version in progress or the newest
 * version known, else the version it opened. */
static void attr_reply_fh(fuse_req_t req, fs_t *fs, fs_fh_t *fh)
{
    fs_inode_t *in = fh->in;
    struct stat a;
    fs_fill_attr(fs, in, &in->st, &a); /* the writer's size, if one is open */
    if (!fs_fh_follows(fs, fh) && fh->obj) {
        a.st_size = (off_t)mc_obj_stat(fh->obj)->size;
        a.st_blocks = (blkcnt_t)((mc_obj_stat(fh->obj)->alloc + 511) / 512);
    }
    fuse_reply_attr(req, &a, fs_attr_timeout(fs, &in->st));
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
    if (c->fs->stopping) { /* before c->fh: fs_shutdown() freed it */
        fs_ws_op_done(ws, rc < 0 ? rc : -ECANCELED);
        ws->handles--;
        fs_ws_settle(ws);
        return fs_ctx_fail(c, -ECANCELED);
    }
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

static void setattr_meta(fs_ctx_t *c);

static void setattr_marker_put(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0 && rc != -EEXIST)
        return fs_ctx_fail(c, rc);
    setattr_meta(c); /* now on the marker */
}

/* Makes the change m (at now) in st, as the master would. */
static void meta_apply(mc_stat_t *st, const mc_meta_t *m, int64_t now)
{
    if (m->what & MC_META_MODE)
        st->mode = m->mode;
    if (m->what & MC_META_UID)
        st->uid = m->uid;
    if (m->what & MC_META_GID)
        st->gid = m->gid;
    if (m->what & MC_META_ATIME)
        st->atime_ns = m->atime_ns;
    if (m->what & MC_META_MTIME)
        st->mtime_ns = m->mtime_ns;
    st->ctime_ns = now;
}

static void setattr_meta_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    fs_inode_t *in = c->in;
    if (rc == -ENOENT && !in->key && !in->is_dir) {
        /* Changed by its inode key (its name went, it had others), which
         * is gone too: the file has no name left, as for an unlinked one
         * (setattr_step()). */
        in->linked = 0;
        meta_apply(&in->st, &c->meta, fs_now_ns());
        return setattr_next(c, 0);
    }
    if (rc == -ENOENT && in->is_dir && !c->kind) {
        /* An implicit directory: give it a marker to hold the metadata. */
        mc_put_opts_t po = {.flags = MC_PUT_NOREPLACE | MC_PUT_MODE,
                            .mode = DIR_MODE_DEFAULT,
                            .replica_num = c->fs->replicas};
        c->kind = 1;
        rc = mc_put_async(c->fs->store, c->key2, c->klen2, "", 0, &po, setattr_marker_put, c);
        if (rc == 0)
            return;
    }
    if (rc == 0 && !in->is_dir) {
        uint64_t size = in->st.size, version = in->st.version;
        in->st = c->st;
        if (in->ws && in->ws->state != WS_NONE) { /* its size is the writer's */
            in->st.size = size;
            in->st.version = version;
        }
    } else if (rc == 0) {
        in->st = c->st;
    }
    setattr_next(c, rc);
}

/* Sends the metadata change c->meta for the file, or for the directory's
 * marker (c->key2). */
static void setattr_meta(fs_ctx_t *c)
{
    fs_inode_t *in = c->in;
    const char *key = in->key;
    size_t klen = in->klen;
    int rc = 0;
    if (in->is_dir) {
        c->klen2 = marker_key(in, c->key2);
        key = c->key2;
        klen = c->klen2;
    } else if (!key) { /* its name went, others stay: the file by its inode key */
        key = fs_inode_file_key(in, c->key2, sizeof(c->key2), &klen);
        rc = key ? 0 : -ENOENT;
    }
    if (rc >= 0)
        rc = mc_set_meta_async(c->fs->store, key, klen, &c->meta, &c->st, setattr_meta_done, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

static int64_t ns_of(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000LL + t->tv_nsec;
}

static void setattr_step(fs_ctx_t *c)
{
    fs_inode_t *in = c->in;
    if (c->fs->stopping) /* a later stage: fs_shutdown() freed c->fh */
        return fs_ctx_fail(c, -ECANCELED);
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
            /* truncate(2) by path truncates the file as it is now, as an
             * open for writing would (close-to-open), not the version the
             * page cache holds for the descriptors reading it here: the
             * kernel drops their pages when the size changes. With a
             * descriptor open for writing here, the version it shows
             * (writers.c): its close would publish that one's bytes. */
            if (ws->state == WS_NONE && !ws->handles && (!c->fh || !c->fh->writable))
                ws->newest = 1;
            ws->handles++;
            c->wait.need_writer = 1;
            c->wait.run = setattr_have_writer;
            return fs_ws_need(ws, &c->wait);
        }
        c->stage = 2;
        /* fall through */
    case 1:
    case 2: { /* mode, owner, times */
        c->stage = 2;
        mc_meta_t *m = &c->meta;
        int64_t now = fs_now_ns();
        memset(m, 0, sizeof(*m));
        if (c->to_set & FUSE_SET_ATTR_MODE) {
            m->what |= MC_META_MODE;
            m->mode = c->attr.st_mode & 07777;
        }
        if (c->to_set & FUSE_SET_ATTR_UID) {
            m->what |= MC_META_UID;
            m->uid = (uint32_t)c->attr.st_uid;
        }
        if (c->to_set & FUSE_SET_ATTR_GID) {
            m->what |= MC_META_GID;
            m->gid = (uint32_t)c->attr.st_gid;
        }
        if (c->to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW)) {
            m->what |= MC_META_ATIME;
            m->atime_ns = (c->to_set & FUSE_SET_ATTR_ATIME_NOW) ? now : ns_of(&c->attr.st_atim);
        }
        if (c->to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW)) {
            m->what |= MC_META_MTIME;
            m->mtime_ns = (c->to_set & FUSE_SET_ATTR_MTIME_NOW) ? now : ns_of(&c->attr.st_mtim);
        }
        if (m->what && !in->key && !in->is_dir && !in->linked) {
            /* Unlinked or replaced while open, with no other name: nobody
             * else can see the file, whose attributes live here, for its
             * descriptors, until the last of them closes. */
            meta_apply(&in->st, m, now);
            m->what = 0;
        }
        if (!m->what || (!in->key && in->is_dir) || in->ino == FUSE_ROOT_ID) {
            c->stage = 3;
            return setattr_step(c);
        }
        /* A version being written publishes with the new mode and mtime. */
        if (in->ws && in->ws->state == WS_READY)
            mc_writer_set_meta(in->ws->w, m);
        return setattr_meta(c);
    }
    default:
        if (c->fh && !in->is_dir) {
            attr_reply_fh(c->req, c->fs, c->fh);
            return fs_ctx_free(c);
        }
        attr_fetch(c);
    }
}

/* 1 if the requester is in group gid (its own group or a supplementary
 * one). */
static int in_group(fuse_req_t req, gid_t gid)
{
    if (fuse_req_ctx(req)->gid == gid)
        return 1;
    gid_t groups[64];
    int n = fuse_req_getgroups(req, 64, groups);
    for (int i = 0; i < n && i < 64; i++)
        if (groups[i] == gid)
            return 1;
    return 0;
}

/* chown(2)'s rules for the requester on a file whose attributes are cur:
 * root changes both; the owner may "change" the owner to itself and the
 * group to one of its groups. The kernel checks the same under
 * default_permissions; this holds without it. Returns 0 or -EPERM. */
static int may_chown(fuse_req_t req, const struct stat *cur, int to_set, const struct stat *attr)
{
    uid_t uid = fuse_req_ctx(req)->uid;
    if (uid == 0 || !(to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)))
        return 0;
    if (uid != cur->st_uid)
        return -EPERM;
    if ((to_set & FUSE_SET_ATTR_UID) && attr->st_uid != cur->st_uid)
        return -EPERM;
    if ((to_set & FUSE_SET_ATTR_GID) && attr->st_gid != cur->st_gid && !in_group(req, attr->st_gid))
        return -EPERM;
    return 0;
}

/* A truncation by a process without privilege (here: not root) clears the
 * set-user-ID bit, and the set-group-ID bit when group-execute is set, as a
 * write does (files.c): the kernel leaves it to the daemon, which asks for
 * FUSE_HANDLE_KILLPRIV_V2 (devio.c). */
static void kill_set_id_on_truncate(fs_ctx_t *c, const struct stat *cur)
{
    if (!(c->to_set & FUSE_SET_ATTR_SIZE) || (c->to_set & FUSE_SET_ATTR_MODE) ||
        !S_ISREG(cur->st_mode) || fuse_req_ctx(c->req)->uid == 0)
        return;
    mode_t mode = cur->st_mode & ~(mode_t)S_ISUID;
    if (mode & S_IXGRP)
        mode &= ~(mode_t)S_ISGID;
    if (mode == cur->st_mode)
        return;
    c->to_set |= FUSE_SET_ATTR_MODE;
    c->attr.st_mode = mode;
}

void fs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                   struct fuse_file_info *fi)
{
    fs_t *fs = fs_of(req);
    fs_inode_t *in = fs_inode_get(fs->it, ino);
    if (!in)
        return reply_err(req, -ENOENT);
    struct stat cur;
    fs_fill_attr(fs, in, &in->st, &cur);
    int rc = may_chown(req, &cur, to_set, attr);
    if (rc < 0)
        return reply_err(req, rc);
    if ((to_set & FUSE_SET_ATTR_SIZE) && in->is_dir)
        return reply_err(req, -EISDIR);
    fs_ctx_t *c = fs_ctx_new(req, in);
    if (!c)
        return;
    c->attr = *attr;
    c->to_set = to_set;
    c->fh = fi ? (fs_fh_t *)(uintptr_t)fi->fh : NULL;
    kill_set_id_on_truncate(c, &cur);
    setattr_step(c);
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
