/*
 * request.c - one FUSE request in flight: its context (fs_ctx_t), its reply
 * when it fails, the key of a named child, and the request buffer a write
 * keeps instead of copying.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs.h"
#include "fs_i.h"
#include "inode.h"
#include "path.h"

fs_ctx_t *fs_ctx_new(fuse_req_t req, fs_inode_t *in)
{
    /* Zeroed but for the two key buffers (8 KiB of the context: zeroing
     * them was a third of the daemon's time creating small files), which
     * are empty strings until a request writes a key there. */
    fs_t *fs = fs_of(req);
    fs_ctx_t *c = fs->spare;
    if (c) {
        fs->spare = (fs_ctx_t *)c->data; /* the list's link while spare */
        fs->nspare--;
    } else if (!(c = malloc(sizeof(*c)))) {
        reply_err(req, -ENOMEM);
        return NULL;
    }
    memset(c, 0, offsetof(fs_ctx_t, key));
    c->key[0] = c->key2[0] = '\0';
    c->klen = c->klen2 = 0;
    c->fs = fs;
    c->req = req;
    c->in = in;
    c->fs->inflight++;
    return c;
}

/* Contexts kept for reuse (the loop thread's): a context is 8 KiB, past
 * what malloc keeps at hand, and a small file takes five. */
#define SPARE_MAX 32

void fs_ctx_free(fs_ctx_t *c)
{
    fs_t *fs = c->fs;
    fs->inflight--;
    mc_list_free(c->list);
    mc_obj_close(c->held);
    free(c->copy);
    free(c->data);
    free(c->out);
    if (fs->nspare >= SPARE_MAX)
        return free(c);
    c->data = fs->spare;
    fs->spare = c;
    fs->nspare++;
}

void fs_ctx_spares_free(fs_t *fs)
{
    while (fs->spare) {
        fs_ctx_t *c = fs->spare;
        fs->spare = (fs_ctx_t *)c->data;
        free(c);
    }
    fs->nspare = 0;
}

void fs_ctx_fail(fs_ctx_t *c, int rc)
{
    reply_err(c->req, rc);
    fs_ctx_free(c);
}

void *fs_take_request_buffer(fs_t *fs)
{
    fs->rbuf_taken = 1;
    return fs->rbuf.mem;
}

void fs_new_object_opts(const fs_ctx_t *c, mc_put_opts_t *po)
{
    *po = (mc_put_opts_t){.flags = MC_PUT_NOREPLACE | MC_PUT_MODE | MC_PUT_OWNER | MC_PUT_NOTDIR,
                          .mode = c->mode & 07777,
                          .uid = c->uid,
                          .gid = c->gid,
                          .type = fs_type_of(c->mode),
                          .rdev = (uint64_t)c->attr.st_rdev,
                          .replica_num = c->fs->replicas};
}

void fs_new_owner(fs_ctx_t *c, fuse_ino_t parent, int is_dir)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(c->req);
    c->uid = ctx->uid;
    c->gid = ctx->gid;
    /* In a set-group-ID directory, what is made takes the directory's
     * group, and a directory the set-group-ID bit too (as on Linux). */
    const fs_inode_t *p = fs_inode_get(c->fs->it, parent);
    const mc_stat_t *st = p ? &p->st : NULL;
    if (st && st->version && (st->mode & S_ISGID) && st->gid != MC_OWNER_NONE) {
        c->gid = (gid_t)st->gid;
        if (is_dir)
            c->mode |= S_ISGID;
    }
}

int64_t fs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Looks up parent + name into c->key; replies and returns -1 on error. */
int fs_child_key(fs_ctx_t *c, fuse_ino_t parent, const char *name, char *key, size_t *klen)
{
    fs_inode_t *p = fs_inode_get(c->fs->it, parent);
    if (!p || !p->is_dir || !p->key) {
        fs_ctx_fail(c, p ? -ENOTDIR : -ENOENT);
        return -1;
    }
    int rc = fs_key_join(p->key, p->klen, name, key);
    if (rc < 0) {
        fs_ctx_fail(c, rc);
        return -1;
    }
    *klen = (size_t)rc;
    return 0;
}
