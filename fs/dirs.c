/*
 * dirs.c - finding names and reading directories: lookup, forget,
 * opendir, readdir(plus) and releasedir. A directory is a key prefix; its
 * listing comes from the store page by page, resumed from the last key
 * returned.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"
#include "fs_i.h"
#include "inode.h"
#include "path.h"

struct fs_dh {
    fs_inode_t *in;
    char *cursor; /* last key returned, past the directory's prefix (the
                     directory may be renamed between two reads); NULL:
                     none yet */
    size_t clen;
    off_t next_off;            /* offset the next readdir continues from */
    struct fs_dh *prev, *next; /* fs->dhs: every open directory, for exit */
};

static void lookup_done(void *arg, int rc)
{
    fs_ctx_t *c = arg;
    if (rc < 0)
        return fs_ctx_fail(c, rc);
    int is_dir = rc == MC_LOOKUP_DIR;
    fs_inode_t *in = fs_inode_ref(c->fs->it, c->key, c->klen, is_dir);
    if (!in)
        return fs_ctx_fail(c, -ENOMEM);
    in->st = c->st; /* a directory's: its marker's, with its link count */
    struct fuse_entry_param e;
    fs_fill_entry(c->fs, in, &c->st, &e);
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
    fs_t *fs = fs_of(req);
    dh->next = fs->dhs;
    if (fs->dhs)
        fs->dhs->prev = dh;
    fs->dhs = dh;
    fi->fh = (uintptr_t)dh;
    fuse_reply_open(req, fi);
}

void fs_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fs_t *fs = fs_of(req);
    fs_dh_t *dh = (fs_dh_t *)(uintptr_t)fi->fh;
    dh->in->opens--;
    fs_inode_maybe_free(fs->it, dh->in);
    if (dh->prev)
        dh->prev->next = dh->next;
    else
        fs->dhs = dh->next;
    if (dh->next)
        dh->next->prev = dh->prev;
    free(dh->cursor);
    free(dh);
    reply_err(req, 0);
}

void fs_dirs_close(fs_t *fs)
{
    while (fs->dhs) {
        fs_dh_t *dh = fs->dhs;
        fs->dhs = dh->next;
        free(dh->cursor);
        free(dh);
    }
}

/* ---- readdir ---- */

/* Adds one entry to the readdir reply; returns 0, or 1 when it does not fit. */
static int dir_add(fs_ctx_t *c, const char *name, fs_inode_t *in, const mc_stat_t *st, off_t off)
{
    size_t room = c->size - c->outlen;
    size_t need;
    if (c->plus) {
        struct fuse_entry_param e;
        fs_fill_entry(c->fs, in, st, &e);
        /* A listing does not count a subdirectory's subdirectories: its
         * st_nlink comes from a getattr (a lookup), not from here. */
        if (in->is_dir)
            e.attr_timeout = 0;
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
            const mc_stat_t *st = &e->st;
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
        char *cur = realloc(dh->cursor, e->klen - plen + 1);
        if (!cur)
            return fs_ctx_fail(c, -ENOMEM);
        memcpy(cur, e->key + plen, e->klen - plen);
        dh->cursor = cur;
        dh->clen = e->klen - plen;
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
    /* The last key returned, under the directory's name of now. */
    size_t alen = c->dh->cursor ? c->klen + c->dh->clen : 0; /* "": the marker */
    if (alen > MC_KEY_MAX)
        return fs_ctx_fail(c, -ENAMETOOLONG);
    memcpy(c->key2, c->key, c->klen);
    if (alen)
        memcpy(c->key2 + c->klen, c->dh->cursor, c->dh->clen);
    int rc = mc_list_async(c->fs->store, c->key, c->klen, alen ? c->key2 : NULL, alen, '/', max,
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
