/*
 * namespace.c - operations that make, remove and move names: mkdir and
 * mknod (an empty object published if the name is free: a file, a FIFO, a
 * socket or a device node), symlink (an object whose bytes are the target)
 * and readlink, rmdir, unlink, rename (a key, or a directory's whole
 * prefix, on the master), and link (a second name of a file, kept by the
 * master).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs.h"
#include "fs_i.h"
#include "inode.h"
#include "writers.h"

/* mkdir, mknod and symlink: publish an object (a directory's marker
 * "a/b/", an empty file or special file, or a link holding its target in
 * c->data) if the name is free, then reply with the new entry. */
static void empty_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    int is_dir = c->kind;
    if (is_dir)
        fs_subdirs_changed(c->fs, c->key, c->klen);
    fs_inode_t *in = fs_inode_ref(c->fs->it, c->key, c->klen, is_dir);
    if (!in)
        return fs_ctx_fail(c, -ENOMEM);
    int64_t now = fs_now_ns();
    mc_stat_t st = {.mode = c->mode & 07777,
                    .mtime_ns = now,
                    .atime_ns = now,
                    .ctime_ns = now,
                    .uid = c->uid,
                    .gid = c->gid,
                    .version = (uint64_t)is_dir, /* a directory has its marker */
                    .nlink = is_dir ? 2 : 1,
                    .size = c->size,
                    .type = is_dir ? MC_TYPE_FILE : fs_type_of(c->mode),
                    .rdev = (uint64_t)c->attr.st_rdev};
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
    mc_put_opts_t po;
    fs_new_object_opts(c, &po);
    const char *key = c->key;
    size_t klen = c->klen;
    if (c->kind) {
        memcpy(c->key2, c->key, c->klen);
        c->key2[c->klen] = '/';
        c->klen2 = c->klen + 1;
        key = c->key2;
        klen = c->klen2;
    }
    rc = mc_put_async(c->fs->store, key, klen, c->data ? c->data : "", c->size, &po, empty_done, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

/* Creates name under parent: a directory, or an object of mode's type
 * with device rdev and content target (NULL: none). */
static void make_empty(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, int is_dir,
                       dev_t rdev, const char *target)
{
    fs_ctx_t *c = fs_ctx_new(req, NULL);
    if (!c || fs_child_key(c, parent, name, c->key, &c->klen) < 0)
        return;
    if (target) {
        c->size = strlen(target);
        c->data = strdup(target);
        if (!c->data)
            return fs_ctx_fail(c, -ENOMEM);
    }
    c->mode = mode;
    c->attr.st_rdev = rdev;
    c->kind = is_dir;
    if (is_dir) /* and again when done: a count taken meanwhile lacks it */
        fs_subdirs_changed(c->fs, c->key, c->klen);
    fs_new_owner(c, parent, is_dir);
    int rc = mc_lookup_async(c->fs->store, c->key, c->klen, '/', &c->st, empty_looked_up, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

void fs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    make_empty(req, parent, name, mode, 1, 0, NULL);
}

void fs_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
    switch (mode & S_IFMT) {
    case 0:
    case S_IFREG:
    case S_IFIFO:
    case S_IFSOCK:
        rdev = 0;
        break;
    case S_IFCHR:
    case S_IFBLK:
        break; /* a device node is metadata: the kernel opens the device */
    default:
        return reply_err(req, -EINVAL);
    }
    make_empty(req, parent, name, mode, 0, rdev, NULL);
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
    fs_subdirs_changed(c->fs, c->key, c->klen);
    reply_err(c->req, 0);
    fs_ctx_free(c);
}

void fs_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    fs_ctx_t *c = fs_ctx_new(req, NULL);
    if (!c || fs_child_key(c, parent, name, c->key, &c->klen) < 0)
        return;
    fs_subdirs_changed(c->fs, c->key, c->klen);
    memcpy(c->key2, c->key, c->klen);
    c->key2[c->klen] = '/';
    c->klen2 = c->klen + 1;
    int rc = mc_remove_async(c->fs->store, c->key2, c->klen2, MC_REMOVE_DIR | MC_REMOVE_FORCE,
                             rmdir_done, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

/* Whether key is one of c's keys or under one (a directory's). */
static int naming_touches(const fs_ctx_t *c, const char *key, size_t klen)
{
    const char *k[2] = {c->key, c->key2};
    size_t n[2] = {c->klen, c->klen2};
    for (int i = 0; i < 2; i++)
        if (n[i] && klen >= n[i] && memcmp(key, k[i], n[i]) == 0 &&
            (klen == n[i] || key[n[i]] == '/'))
            return 1;
    return 0;
}

int fs_naming_gate(fs_t *fs, const char *key, size_t klen, fs_waiter_t *w)
{
    if (!key)
        return 0;
    for (fs_ctx_t *c = fs->naming; c; c = c->naming_next) {
        if (naming_touches(c, key, klen)) {
            w->next = c->gated;
            c->gated = w;
            return 1;
        }
    }
    return 0;
}

/* c (an unlink or a rename) is sent: operations on its keys wait. */
static void naming_start(fs_ctx_t *c)
{
    c->naming_next = c->fs->naming;
    c->fs->naming = c;
}

/* c is answered and the inodes follow it: runs what waited for it, then
 * answers the request with rc. */
static void naming_done(fs_ctx_t *c, int rc)
{
    fs_ctx_t **p = &c->fs->naming;
    while (*p && *p != c)
        p = &(*p)->naming_next;
    if (*p)
        *p = c->naming_next;
    fs_waiter_t *w = c->gated, *order = NULL;
    c->gated = NULL;
    while (w) { /* gated last first: run them in their order */
        fs_waiter_t *next = w->next;
        w->next = order;
        order = w;
        w = next;
    }
    int err = fs_woken(c->fs);
    while (order) {
        fs_waiter_t *next = order->next;
        order->run(order, err);
        order = next;
    }
    fs_ctx_fail(c, rc);
}

static void unlink_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0)
        return naming_done(c, rc);
    fs_inode_t *in = fs_inode_find(c->fs->it, c->key, c->klen, 0);
    if (in) {
        in->linked = fs_inode_has_other_names(in);
        fs_inode_unlink(c->fs->it, in);
    }
    naming_done(c, 0);
}

/*
 * Before an unlink or a rename sends its request: for the file at c->key
 * (and c->key2 when set: a rename's destination), in turn,
 *
 * - waits until no commit of it is in flight here (one a close or the
 *   last writer's release started): the request then reaches the master
 *   after the version that commit publishes, and after the open of it
 *   that the commit makes for the descriptors still open here
 *   (fs_cache_published()), in the order the kernel sent them;
 * - for the file whose name goes (the unlinked one, a rename's replaced
 *   destination): when descriptors are open for writing and none wrote
 *   yet, opens its current version while its key still names it and
 *   keeps it for the writer their first write opens to copy
 *   (fs_ws_before_unnamed()): their writes then change the file's bytes,
 *   which they and its readers keep until the last close;
 * - opens its current version for the descriptors open here that read
 *   through the page cache, if none is (fs_cache_pin()), while its key
 *   still names it.
 *
 * Else such a descriptor's read that misses the cache would look the file
 * up by a key that is gone (EIO) or names another file by then. Then runs
 * c->next. c->stage counts the steps: three a key.
 */
static void settle_step(fs_waiter_t *w, int err)
{
    fs_ctx_t *c = (fs_ctx_t *)w;
    (void)err; /* a failed commit or open leaves nothing more to wait for */
    int steps = c->klen2 ? 6 : 3;
    while (c->stage < steps) {
        int dst = c->stage >= 3, step = c->stage % 3;
        fs_inode_t *in =
            fs_inode_find(c->fs->it, dst ? c->key2 : c->key, dst ? c->klen2 : c->klen, 0);
        int gone = dst || !c->klen2; /* a rename's source keeps its file */
        c->stage++;
        if (!in)
            continue;
        if (step == 0 && in->ws && fs_ws_busy(in->ws))
            return fs_ws_when_idle(in->ws, w);
        if (step == 1 && gone && fs_ws_before_unnamed(in, w))
            return;
        if (step == 2 && fs_cache_pin(c->fs, in, w))
            return;
    }
    c->stage = 0;
    c->next(c);
}

static void settle(fs_ctx_t *c, void (*next)(fs_ctx_t *c))
{
    c->next = next;
    c->stage = 0;
    c->wait.need_writer = 0;
    c->wait.run = settle_step;
    settle_step(&c->wait, 0);
}

static void unlink_issue(fs_ctx_t *c)
{
    naming_start(c);
    int rc = mc_remove_async(c->fs->store, c->key, c->klen, MC_REMOVE_FORCE, unlink_done, c);
    if (rc < 0)
        naming_done(c, rc);
}

void fs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    fs_ctx_t *c = fs_ctx_new(req, NULL);
    if (!c || fs_child_key(c, parent, name, c->key, &c->klen) < 0)
        return;
    settle(c, unlink_issue);
}

static void rename_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    fs_t *fs = c->fs;
    if (rc < 0)
        return naming_done(c, rc);
    int is_dir = c->kind == MC_LOOKUP_DIR;
    size_t flen = c->klen, tlen = c->klen2;
    fs_subdirs_changed(fs, c->key, flen);
    fs_subdirs_changed(fs, c->key2, tlen);
    /* The replaced destination's inodes lose their key; a file's keeps
     * the version it had, for an open that raced this rename. */
    fs_inode_t *dst = fs_inode_find(fs->it, c->key2, tlen, 0);
    if (dst) {
        dst->linked = fs_inode_has_other_names(dst);
        fs_inode_unlink(fs->it, dst);
        if (!dst->held) {
            dst->held = c->held;
            c->held = NULL;
        }
    }
    dst = fs_inode_find(fs->it, c->key2, tlen, 1);
    if (dst)
        fs_inode_unlink(fs->it, dst);
    rc = fs_inode_rename(fs->it, c->key, flen, c->key2, tlen, is_dir);
    naming_done(c, rc);
}

static void rename_issue(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0)
        c->held = NULL; /* gone meanwhile: nothing to hold */
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
            return naming_done(c, -ENOMEM);
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
        naming_done(c, rc);
}

/* A file replacing a file the kernel knows (it may be opening it right
 * now, from a lookup made before this rename): the replaced version is
 * opened first and kept on its inode (rename_done()), so that such an open
 * reads it, as it would on a local filesystem, instead of failing with
 * ESTALE (the kernel looks a path up again only once: a second rename in
 * that window failed the open). One more round trip to the master, only
 * for a destination the kernel has looked up. */
static void rename_dest_looked_up(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0 && rc != -ENOENT)
        return naming_done(c, rc);
    if (rc >= 0 && (c->flags & RENAME_NOREPLACE))
        return naming_done(c, -EEXIST);
    if (c->kind == MC_LOOKUP_FILE && rc == MC_LOOKUP_DIR)
        return naming_done(c, -EISDIR);
    if (c->kind == MC_LOOKUP_DIR && rc == MC_LOOKUP_FILE)
        return naming_done(c, -ENOTDIR);
    fs_inode_t *dst = rc == MC_LOOKUP_FILE ? fs_inode_find(c->fs->it, c->key2, c->klen2, 0) : NULL;
    if (!dst || !dst->nlookup || dst->held)
        return rename_issue(c, 0);
    rc = mc_obj_open_async(c->fs->store, c->key2, c->klen2, &c->held, rename_issue, c);
    if (rc < 0)
        rename_issue(c, rc);
}

static void rename_src_looked_up(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0)
        return naming_done(c, rc);
    c->kind = rc;
    rc = mc_lookup_async(c->fs->store, c->key2, c->klen2, '/', &c->st2, rename_dest_looked_up, c);
    if (rc < 0)
        naming_done(c, rc);
}

/* The source and the destination are settled (settle()): the rename
 * starts, with its lookups; operations on its keys wait for its answer
 * (fs_naming_gate()). */
static void rename_settled(fs_ctx_t *c)
{
    naming_start(c); /* from here on: its lookups decide what it does */
    int rc = mc_lookup_async(c->fs->store, c->key, c->klen, '/', &c->st, rename_src_looked_up, c);
    if (rc < 0)
        naming_done(c, rc);
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
    fs_subdirs_changed(c->fs, c->key, c->klen);
    fs_subdirs_changed(c->fs, c->key2, c->klen2);
    c->flags = (int)flags;
    settle(c, rename_settled);
}

/* link: the master gives the file a second name (mc_link_async()); the new
 * name gets its own inode here, showing the file's shared st_ino. */
static void link_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    c->in->st = c->st;
    /* The source's attributes were cached before it was linked (count 1,
     * its own number): the kernel drops them (attributes only, no pages). */
    fuse_lowlevel_notify_inval_inode(c->fs->se, c->in->ino, -1, 0);
    fs_inode_t *in = fs_inode_ref(c->fs->it, c->key2, c->klen2, 0);
    if (!in)
        return fs_ctx_fail(c, -ENOMEM);
    in->st = c->st;
    struct fuse_entry_param e;
    fs_fill_entry(c->fs, in, &c->st, &e);
    fuse_reply_entry(c->req, &e);
    fs_ctx_free(c);
}

void fs_op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
    fs_inode_t *in = fs_inode_get(fs_of(req)->it, ino);
    if (!in || !in->key)
        return reply_err(req, -ENOENT);
    if (in->is_dir)
        return reply_err(req, -EPERM); /* the kernel refuses it first */
    fs_ctx_t *c = fs_ctx_new(req, in);
    if (!c || fs_child_key(c, newparent, newname, c->key2, &c->klen2) < 0)
        return;
    int rc =
        mc_link_async(c->fs->store, in->key, in->klen, c->key2, c->klen2, &c->st, link_done, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

void fs_op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    if (strlen(link) >= PATH_MAX)
        return reply_err(req, -ENAMETOOLONG);
    make_empty(req, parent, name, S_IFLNK | 0777, 0, 0, link);
}

/* readlink: the bytes of the link's object are its target. */
static void readlink_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    if (c->st.type != MC_TYPE_SYMLINK)
        return fs_ctx_fail(c, -EINVAL); /* replaced by a file through the API */
    if (c->st.size >= PATH_MAX)
        return fs_ctx_fail(c, -ENAMETOOLONG);
    ((char *)c->data)[rc] = '\0';
    fuse_reply_readlink(c->req, c->data);
    fs_ctx_free(c);
}

void fs_op_readlink(fuse_req_t req, fuse_ino_t ino)
{
    fs_inode_t *in = fs_inode_get(fs_of(req)->it, ino);
    if (!in || !in->key)
        return reply_err(req, -ENOENT);
    if (in->is_dir)
        return reply_err(req, -EINVAL);
    fs_ctx_t *c = fs_ctx_new(req, in);
    if (!c)
        return;
    c->data = malloc(PATH_MAX);
    if (!c->data)
        return fs_ctx_fail(c, -ENOMEM);
    int rc = mc_get_async(c->fs->store, in->key, in->klen, 0, c->data, PATH_MAX - 1, &c->st,
                          readlink_done, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}
