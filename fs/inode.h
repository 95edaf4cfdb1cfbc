/*
 * inode.h - the daemon's inode table.
 *
 * An inode stands for a key (a file) or a key prefix (a directory) for as
 * long as the kernel remembers it (its lookup count). Inode numbers are
 * never reused. A file's inode outlives versions: `version` is the version
 * whose bytes the kernel's page cache holds, so an open can tell the kernel
 * to keep or drop its cache. Runs on the loop thread only; no locks (the
 * workers of --threads read only `view`, published atomically).
 */
#ifndef FS_INODE_H
#define FS_INODE_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/mooncake.h"

struct fs_wstate;
struct fs_waiter;
struct fs_view;

typedef struct fs_inode {
    uint64_t ino;
    char *key; /* "" for the root; NULL once unlinked */
    size_t klen;
    int is_dir;
    uint64_t nlookup;
    uint64_t version;           /* version the page cache holds (0: none, or unknown);
                                   with --cache-mode direct, the newest version an
                                   open found or a writer published */
    mc_obj_t *cur;              /* --cache-mode pages, while the file is open: that
                                   version, which reads the cache misses come from
                                   (NULL: not open yet) */
    struct fs_view *view;       /* cur's bytes while the file has no writer state,
                                   for the workers (workers.h); atomic */
    int cur_opening;            /* cur is being opened */
    struct fs_waiter *cur_wait; /* reads waiting for it */
    mc_stat_t st;               /* last known metadata */
    int64_t counted_ns;         /* a directory: when the master last counted its
                                   subdirectories (st.nlink); 0: never, or one of
                                   them came or went through this mount since */
    struct fs_wstate *ws;       /* the shared writer of this file, if any */
    mc_obj_t *held;             /* the version a rename through this mount replaced
                                   while the kernel knew the inode: the next open of
                                   the inode (one racing the rename) reads it, as on
                                   a local filesystem; closed when the inode goes */
    int opens;                  /* open file handles */
    int linked;                 /* its name went while the file had others (a hard
                                   link): it lives on under its inode key, where its
                                   writer publishes (writers.c) and its attributes
                                   change (attrs.c, xattrs.c); with key NULL and
                                   linked 0 the file has no name left */
    struct fs_inode *by_ino_next, *by_key_next;
} fs_inode_t;

typedef struct fs_itable fs_itable_t;

/* Creates a table holding the root (ino 1). Returns NULL on ENOMEM. */
fs_itable_t *fs_itable_new(void);
void fs_itable_free(fs_itable_t *t);

fs_inode_t *fs_inode_get(fs_itable_t *t, uint64_t ino);
/* The live inode for key of the given kind, or NULL. */
fs_inode_t *fs_inode_find(fs_itable_t *t, const char *key, size_t klen, int is_dir);
/* Finds or creates the inode for key and counts one lookup. NULL on ENOMEM. */
fs_inode_t *fs_inode_ref(fs_itable_t *t, const char *key, size_t klen, int is_dir);
/* Drops n lookups; frees the inode when none remain and nothing is open. */
void fs_inode_forget(fs_itable_t *t, fs_inode_t *in, uint64_t n);
/* Frees an inode with no lookups once its last handle is gone. */
void fs_inode_maybe_free(fs_itable_t *t, fs_inode_t *in);
/* Whether in is a file with names besides its own (a hard link), as far
 * as its last known attributes say. */
static inline int fs_inode_has_other_names(const fs_inode_t *in)
{
    return in->st.ino && in->st.nlink > 1 && !in->is_dir;
}

/* The key file in lives under at the master: its name, or, when its name
 * went and other names stay (in->linked), its inode key, written into buf
 * (size bytes). NULL when it has none (unlinked with no other name). */
const char *fs_inode_file_key(const fs_inode_t *in, char *buf, size_t size, size_t *klen);

/* Detaches the inode from its key (after unlink / rmdir / replace). */
void fs_inode_unlink(fs_itable_t *t, fs_inode_t *in);
/* Moves inodes from key `from` to `to`; with prefix != 0 every inode whose
 * key is from or starts with from + "/" moves. Returns 0 or -ENOMEM. */
int fs_inode_rename(fs_itable_t *t, const char *from, size_t flen, const char *to, size_t tlen,
                    int prefix);
/* Number of live inodes. */
size_t fs_inode_count(const fs_itable_t *t);

#endif /* FS_INODE_H */
