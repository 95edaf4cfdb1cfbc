/*
 * cache.c - the kernel's page cache under --cache-mode pages (the default):
 * which version of a file it holds (in->version), the open version reads
 * that miss it come from (in->cur), and what an open tells the kernel to
 * keep or drop. docs/SEMANTICS.md ("Consistency") has the rules this gives.
 */
#include <errno.h>
#include <stdlib.h>

#include "fs.h"
#include "fs_i.h"
#include "inode.h"
#include "workers.h"
#include "writers.h"

/*
 * --cache-mode pages (the default): the kernel keeps one page cache per inode,
 * and it holds the content this mount shows for the file: the version in
 * progress while the file has a writer here (writes go through the cache,
 * and reads that miss it read the writer), else the newest version an open
 * here found or published (in->version; 0 when unknown, as after a failed
 * version). An open that finds another version drops the cached pages (no
 * keep_cache) and the kernel's attributes, so that the size is asked for
 * again.
 *
 * alone: no other handle of the file is open here. Then the pages are
 * dropped by a notification, before the reply: the kernel's own drop for
 * an open without keep_cache runs in the opener after the reply, while
 * another open that finds the new version keeps the cache and may read
 * meanwhile, and a read(2) copied the old version's pages where that drop
 * had not come yet and the new one's where it had (one read of two
 * versions). Alone, no READ can be waiting here with pages locked that
 * the notification would wait for: the kernel sends READs only on open
 * handles and RELEASE after their last answer. With other handles open
 * (an open for writing moves the cache under its readers) only the
 * attributes are invalidated by the notification: invalidating pages from
 * the loop could wait on a page locked by a read queued behind it.
 *
 * The size the kernel holds is the version's the cache holds: while cur is set,
 * attributes give its size (fs_fill_attr()). An open that keeps the cache
 * leaves the size as it is, and that holds because the master's answers reach
 * the daemon in the order it asked (one connection, or direct calls; the master
 * answers each at once): a LOOKUP or GETATTR answered after the open's answer
 * finds cur set, and one answered before it found the version the open found or
 * an older one (then the open moves the cache, and invalidates the attributes;
 * the kernel drops attributes asked for before that, by their attr_version).
 * Were an open answered after a later GETATTR, it could keep the old version's
 * pages under the new version's size: read(2) would cut the old version there.
 */
static void cache_keep_or_drop(fs_t *fs, fs_inode_t *in, const mc_stat_t *st, int created,
                               int alone, struct fuse_file_info *fi)
{
    fi->direct_io = 0;
    fi->keep_cache = 1;
    /* A failing writer's pages are no version's: they go (its poison set
     * in->version 0), even while its operations end and it is aborted. */
    if (st->version == in->version ||
        (in->ws && in->ws->state != WS_NONE && in->ws->state != WS_FAILING))
        return; /* the cache holds this version, or the writer's */
    fi->keep_cache = 0;
    if (!created) /* the size the kernel knows may be another version's */
        fuse_lowlevel_notify_inval_inode(fs->se, in->ino, alone ? 0 : -1, 0);
    in->version = st->version;
}

/* Makes o (or NULL) the version the reads of in that miss the page cache
 * come from, closing the one before (once no worker reads it). */
static void cur_set(fs_t *fs, fs_inode_t *in, mc_obj_t *o)
{
    fs_view_publish_inode(fs, in, o);
    if (in->ws && in->ws->base_lent && in->ws->base == in->cur)
        in->ws->base_lent = 0; /* the writer copies it: it closes it after */
    else if (in->cur)
        mc_obj_close(in->cur);
    in->cur = o;
}

typedef struct cur_open {
    fs_waiter_t gate; /* first: waiting for an unlink or rename (cur_send()) */
    fs_t *fs;
    fs_inode_t *in;
    mc_obj_t *obj;
} cur_open_t;

static void cur_opened(void *arg, int rc)
{
    cur_open_t *o = arg;
    fs_inode_t *in = o->in;
    in->cur_opening = 0;
    in->opens--; /* cur_open()'s hold */
    if (rc == 0 && (!in->opens || (in->cur && mc_obj_stat(in->cur)->version == in->version &&
                                   !mc_obj_stale(in->cur)))) {
        mc_obj_close(o->obj); /* nobody reads, or an open set it meanwhile */
    } else if (rc == 0) {
        if (mc_obj_stat(o->obj)->version != in->version)
            in->version = 0; /* published again since: the next open drops the cache */
        cur_set(o->fs, in, o->obj);
    }
    fs_waiter_t *w = in->cur_wait;
    in->cur_wait = NULL;
    while (w) {
        fs_waiter_t *next = w->next;
        w->run(w, rc == -ENOENT ? -EIO : rc < 0 ? rc : fs_woken(o->fs)); /* ENOENT: not read(2)'s */
        w = next;
    }
    if (!in->opens && in->ws)
        fs_ws_settle(in->ws); /* it may wait for the last handle (writers.c) */
    else
        fs_inode_maybe_free(o->fs->it, in);
    free(o);
}

/* Sends cur_open()'s open by key, once no unlink or rename of the file is
 * on its way: sent before its answer, it would open what the key names
 * after it, nothing or another file. */
static void cur_send(fs_waiter_t *gate, int err)
{
    cur_open_t *o = (cur_open_t *)gate;
    fs_inode_t *in = o->in;
    (void)err;
    if (fs_naming_gate(o->fs, in->key, in->klen, gate))
        return;
    int rc = !in->key ? -ENOENT : o->fs->stopping ? -ECANCELED : 0; /* gone meanwhile */
    if (rc == 0)
        rc = mc_obj_open_async(o->fs->store, in->key, in->klen, &o->obj, cur_opened, o);
    if (rc < 0)
        cur_opened(o, rc);
}

/* Opens the current version of in as its cur (cur_opening while it runs). */
static void cur_open(fs_t *fs, fs_inode_t *in)
{
    cur_open_t *o = malloc(sizeof(*o));
    if (!o || !in->key || in->cur_opening) {
        free(o);
        return;
    }
    o->gate.run = cur_send;
    o->fs = fs;
    o->in = in;
    in->cur_opening = 1;
    in->opens++; /* keeps the inode until the open ends */
    cur_send(&o->gate, 0);
}

void fs_cache_published(fs_t *fs, fs_inode_t *in, uint64_t version, int closing)
{
    in->version = version;
    /* The kernel holds the attributes it had while the file was written,
     * where every byte up to the size takes space: a sparse file's
     * st_blocks is asked for again (attributes only: no page is waited
     * for). */
    if (in->st.alloc < in->st.size)
        fuse_lowlevel_notify_inval_inode(fs->se, in->ino, -1, 0);
    if (fs->direct_io)
        return;
    cur_set(fs, in, NULL);
    /* Another handle may read what the cache lacks, or write: open the
     * version now, while its key is sure to name it (an unlink or a rename
     * of the file waits for this: settle() in namespace.c). A writer of
     * one of them copies it (writers.c): opened by key at that write, it
     * could be a version another client published since, under the pages
     * the kernel keeps of this one (a mapping's page written back would
     * splice them into that version). The handles whose close published
     * are usually released next, and open nothing: a descriptor that
     * stays open after the close of its dup (a mapping's) then leaves its
     * next writer to copy the version its key names (SEMANTICS). */
    if (in->opens > closing)
        cur_open(fs, in);
}

void fs_cache_open(fs_t *fs, fs_inode_t *in, fs_fh_t *fh, int created, struct fuse_file_info *fi)
{
    const mc_stat_t *st = mc_obj_stat(fh->obj);
    /* Another version than the other descriptors of the file here read
     * (cur's: their cache misses come from it; else the cache's): moving
     * the cache would hand them pages of both. So this reader reads its
     * version with direct I/O, and they keep theirs. That holds also when
     * the daemon does not know what the cache holds (in->version 0: a
     * writer failed, or the file was published again while cur was
     * opened): their misses still come from cur. (A rename over the file
     * by this very mount reaches the master before the kernel's open of
     * the file it replaces can: that open finds the new file's version
     * under the old one's key.) */
    int readers = in->opens - in->cur_opening - 1; /* cur_open() holds one */
    uint64_t theirs = in->cur ? mc_obj_stat(in->cur)->version : in->version;
    if (!fh->writable && theirs && st->version != theirs && readers > 0 &&
        !(in->ws && in->ws->state != WS_NONE)) {
        fi->direct_io = 1;
        fh->direct = 1;
        return;
    }
    cache_keep_or_drop(fs, in, st, created, readers == 0, fi);
    /* The handle's version becomes the inode's cur when it is the one the
     * page cache holds; the handle keeps none of its own. */
    uint64_t v = mc_obj_stat(fh->obj)->version;
    if (v == in->version &&
        (!in->cur || mc_obj_stat(in->cur)->version != v || mc_obj_stale(in->cur)))
        cur_set(fs, in, fh->obj); /* a stale cur (a lost master connection): this one holds */
    else
        mc_obj_close(fh->obj); /* cur has it, or the cache holds a writer's */
    fh->obj = NULL;
}

void fs_cache_unpin(fs_t *fs, fs_inode_t *in)
{
    cur_set(fs, in, NULL);
}

int fs_cache_pin(fs_t *fs, fs_inode_t *in, fs_waiter_t *w)
{
    if (fs->direct_io || !in->opens || in->cur || !in->key || (in->ws && in->ws->state == WS_READY))
        return 0;
    return fs_cache_wait(fs, in, w) == 0;
}

int fs_cache_wait(fs_t *fs, fs_inode_t *in, fs_waiter_t *w)
{
    cur_open(fs, in);
    if (!in->cur_opening)
        return in->key ? -ENOMEM : -EIO; /* unlinked since it published */
    w->next = in->cur_wait;
    in->cur_wait = w;
    return 0;
}
