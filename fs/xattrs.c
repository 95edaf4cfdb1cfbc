/*
 * xattrs.c - extended attributes: getxattr, setxattr, listxattr and
 * removexattr on the object's metadata in the master (mc_xattr_*), with
 * Linux's namespace rules for the caller: "user." on regular files and
 * directories, "trusted." for root only (hidden from others' lists),
 * "security." / "system." and any other prefix not supported. A directory
 * keeps its attributes on its marker key ("a/b/"); an implicit directory
 * gets a marker on its first setxattr.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#include "fs.h"
#include "fs_i.h"
#include "inode.h"

#define DIR_MODE_DEFAULT 0755

static int has_prefix(const char *name, const char *p)
{
    return strncmp(name, p, strlen(p)) == 0;
}

/* The namespace rule of Linux (xattr_permission()) for the requester:
 * "user." only on regular files and directories, "trusted." only for
 * root; otherwise a change is -EPERM and a read -ENODATA. Other prefixes:
 * -EOPNOTSUPP. */
static int may_xattr(fuse_req_t req, const fs_inode_t *in, const char *name, int set)
{
    int ok;
    if (has_prefix(name, "user."))
        ok = in->is_dir || in->st.type == MC_TYPE_FILE;
    else if (has_prefix(name, "trusted."))
        ok = fuse_req_ctx(req)->uid == 0;
    else
        return -EOPNOTSUPP;
    return ok ? 0 : set ? -EPERM : -ENODATA;
}

/* Writes the key holding in's attributes into c->key: the file's (by its
 * inode key when its name went and a hard link stays), or the directory's
 * marker. Returns -ENOENT for a file unlinked with no other name,
 * -EOPNOTSUPP for the root (it has no record). */
static int xattr_key(fs_ctx_t *c)
{
    fs_inode_t *in = c->in;
    if (in->ino == FUSE_ROOT_ID)
        return -EOPNOTSUPP;
    if (!in->key && !in->is_dir) /* its name went: by its inode key if others stay */
        return fs_inode_file_key(in, c->key, sizeof(c->key), &c->klen) ? 0 : -ENOENT;
    if (!in->key)
        return -ENOENT;
    memcpy(c->key, in->key, in->klen);
    c->klen = in->klen;
    if (in->is_dir)
        c->key[c->klen++] = '/';
    c->key[c->klen] = '\0';
    return 0;
}

/* Starts c for ino with the attribute's name (if any) copied into c->key2
 * (the kernel sends at most XATTR_NAME_MAX bytes), or replies with the
 * error and returns NULL. */
static fs_ctx_t *xattr_ctx(fuse_req_t req, fuse_ino_t ino, const char *name, int set)
{
    fs_t *fs = fs_of(req);
    fs_inode_t *in = fs_inode_get(fs->it, ino);
    int rc = in ? 0 : -ENOENT;
    if (rc == 0 && name)
        rc = may_xattr(req, in, name, set);
    if (rc == 0 && name && strlen(name) > MC_XATTR_NAME_MAX)
        rc = -ERANGE;
    if (rc < 0) {
        reply_err(req, rc);
        return NULL;
    }
    fs_ctx_t *c = fs_ctx_new(req, in);
    if (!c)
        return NULL;
    if ((rc = xattr_key(c)) < 0) {
        fs_ctx_fail(c, rc);
        return NULL;
    }
    if (name) {
        c->klen2 = strlen(name);
        memcpy(c->key2, name, c->klen2 + 1);
    }
    return c;
}

/* Makes room for a get or a list: the kernel asked for size bytes (0: the
 * size only), the answer may be cap. Returns 0 or -ENOMEM. */
static int answer_room(fs_ctx_t *c, size_t size, size_t cap)
{
    c->size = size;
    c->data = malloc(cap);
    return c->data ? 0 : -ENOMEM;
}

/* Replies to a get or a list with n bytes of c->data, as the kernel asked
 * (c->size 0: the size only). */
static void reply_bytes(fs_ctx_t *c, size_t n)
{
    if (c->size == 0)
        fuse_reply_xattr(c->req, n);
    else if (n > c->size)
        return fs_ctx_fail(c, -ERANGE);
    else
        fuse_reply_buf(c->req, c->data, n);
    fs_ctx_free(c);
}

/* ---- getxattr ---- */

static void get_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc == -ENOENT && c->in->is_dir)
        rc = -ENODATA; /* an implicit directory: no marker, no attributes */
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    reply_bytes(c, (size_t)rc);
}

void fs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    fs_ctx_t *c = xattr_ctx(req, ino, name, 0);
    if (!c)
        return;
    int rc = answer_room(c, size, MC_XATTR_SIZE_MAX);
    if (rc == 0)
        rc = mc_xattr_get_async(c->fs->store, c->key, c->klen, name, c->data, MC_XATTR_SIZE_MAX,
                                get_done, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

/* ---- listxattr ---- */

static void list_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc == -ENOENT && c->in->is_dir)
        rc = 0;
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    /* Names another user may not see leave the list. */
    char *p = c->data, *out = c->data, *end = p + rc;
    int root = fuse_req_ctx(c->req)->uid == 0;
    while (p < end) {
        size_t l = strnlen(p, (size_t)(end - p)) + 1;
        if (root || !has_prefix(p, "trusted.")) {
            memmove(out, p, l);
            out += l;
        }
        p += l;
    }
    reply_bytes(c, (size_t)(out - (char *)c->data));
}

void fs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    fs_t *fs = fs_of(req);
    fs_inode_t *in = fs_inode_get(fs->it, ino);
    if (in && in->ino == FUSE_ROOT_ID)
        return (void)(size ? fuse_reply_buf(req, "", 0) : fuse_reply_xattr(req, 0));
    fs_ctx_t *c = xattr_ctx(req, ino, NULL, 0);
    if (!c)
        return;
    int rc = answer_room(c, size, MC_XATTR_LIST_MAX);
    if (rc == 0)
        rc = mc_xattr_list_async(c->fs->store, c->key, c->klen, c->data, MC_XATTR_LIST_MAX,
                                 list_done, c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}

/* ---- setxattr, removexattr ---- */

static void change_done(void *arg, int rc);

static int send_change(fs_ctx_t *c)
{
    if (c->kind == 1)
        return mc_xattr_set_async(c->fs->store, c->key, c->klen, c->key2, c->wbuf, c->size,
                                  (unsigned)c->flags, change_done, c);
    return mc_xattr_remove_async(c->fs->store, c->key, c->klen, c->key2, change_done, c);
}

static void marker_put(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0 && rc != -EEXIST)
        return fs_ctx_fail(c, rc);
    if ((rc = send_change(c)) < 0)
        fs_ctx_fail(c, rc);
}

static void change_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc == -ENOENT && c->in->is_dir && c->kind == 1 && !c->stage) {
        /* An implicit directory: give it a marker to hold the attributes. */
        mc_put_opts_t po = {.flags = MC_PUT_NOREPLACE | MC_PUT_MODE,
                            .mode = DIR_MODE_DEFAULT,
                            .replica_num = c->fs->replicas};
        c->stage = 1;
        rc = mc_put_async(c->fs->store, c->key, c->klen, "", 0, &po, marker_put, c);
        if (rc == 0)
            return;
    }
    if (rc == -ENOENT && c->in->is_dir && c->kind == 2)
        rc = -ENODATA;
    fs_ctx_fail(c, rc < 0 ? rc : 0);
}

void fs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                    size_t size, int flags)
{
    int rc;
    fs_ctx_t *c = xattr_ctx(req, ino, name, 1);
    if (!c)
        return;
    if (size) { /* the kernel's buffer is gone once this handler returns */
        c->data = malloc(size);
        if (!c->data)
            return fs_ctx_fail(c, -ENOMEM);
        memcpy(c->data, value, size);
    }
    c->kind = 1;
    c->wbuf = c->data;
    c->size = size;
    c->flags = flags & (XATTR_CREATE | XATTR_REPLACE);
    if (flags & ~(XATTR_CREATE | XATTR_REPLACE))
        return fs_ctx_fail(c, -EINVAL);
    if ((rc = send_change(c)) < 0)
        fs_ctx_fail(c, rc);
}

void fs_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    fs_ctx_t *c = xattr_ctx(req, ino, name, 1);
    if (!c)
        return;
    c->kind = 2;
    int rc = send_change(c);
    if (rc < 0)
        fs_ctx_fail(c, rc);
}
