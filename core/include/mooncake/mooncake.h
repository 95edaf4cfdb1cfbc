/*
 * mooncake.h - the public API of libmooncake.
 *
 * A store maps keys (byte strings, 1..MC_KEY_MAX bytes, no NUL) to immutable
 * object versions. Every operation has an async form taking a completion
 * callback and, for whole-object operations, a sync form that is the async
 * form plus a wait.
 *
 * Conventions (see docs/ARCHITECTURE.md):
 *  - Functions return 0 (or a count) on success and a negative errno on
 *    failure; they never set errno. mc_strerror() names every code.
 *  - An async call that returns an error never calls its callback. One that
 *    returns 0 calls it exactly once, on the store's loop thread, and never
 *    from inside the call itself.
 *  - Buffers passed to an async call stay owned by the caller and must stay
 *    valid until the callback runs.
 *  - Any thread may call any function; work is handed to the store's loop.
 *    Sync forms called from the loop thread itself return -EDEADLK.
 *  - A store does not cross fork(): in a forked child its calls fail with
 *    -ECHILD and mc_store_close() only forgets it (open a store in the
 *    child). The child keeps none of its connections (nor those of
 *    mc_metrics_serve() or of etcd), so the parent's death is seen by its
 *    peers at once.
 */
#ifndef MOONCAKE_MOONCAKE_H
#define MOONCAKE_MOONCAKE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "mooncake/loop.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MC_VERSION_STRING "0.1.0"

/* Longest key, in bytes. */
#define MC_KEY_MAX 4096
/* Segment size of an embedded store when none is given: 1 GiB. */
#define MC_DEFAULT_SEGMENT_SIZE (1ULL << 30)
/* Default read lease, as in Mooncake's default_kv_lease_ttl. */
#define MC_DEFAULT_LEASE_MS 5000

typedef struct mc_store mc_store_t;
typedef struct mc_obj mc_obj_t;
typedef struct mc_writer mc_writer_t;

/* result is >= 0 on success (bytes, counts, or 0) or a negative errno. */
typedef void (*mc_done_cb)(void *arg, int result);
/* The same, with the bytes a read lends (mc_obj_peek_async()): iovcnt
 * pieces (0 when result <= 0) holding the result bytes in order, valid
 * until the callback returns. */
typedef void (*mc_data_cb)(void *arg, int result, const struct iovec *iov, int iovcnt);

typedef struct mc_store_opts {
    uint64_t segment_size;    /* bytes of memory this node contributes (embedded, 0:
                                 default; with a master, 0: a pure client) */
    const char *master;       /* NULL or "": embedded (master in this process);
                                 "host:port", "unix:/path", or "etcd://h:p;h:p":
                                 the leader of masters on etcd (cluster from
                                 $MOONCAKE_CLUSTER_ID, default mooncake_cluster) */
    uint64_t lease_ms;        /* read lease granted by get/open (0: default) */
    unsigned evict_high_pct;  /* evict when use exceeds this % (0: never, puts fail) */
    unsigned evict_ratio_pct; /* then free this % of the segment (0: 10) */
    mc_loop_t *loop;          /* run on this loop; NULL: the store runs its own thread */
    const char *listen;       /* serve the protocol here ("host:port", "unix:/path"):
                                 embedded, the master and the segment; with a master,
                                 the segment's data (default 127.0.0.1:0). NULL: an
                                 embedded store serves nothing */
    uint64_t timeout_ms;      /* bound on every network wait (0: 5000) */
    const char *secret_file;  /* NULL: no authentication. Otherwise the file holding
                                 the cluster's shared secret (its content less one
                                 trailing newline; not empty; no access for group or
                                 others, i.e. chmod 600, else mc_store_open() fails
                                 with -EPERM). Every connection this store makes,
                                 to the master and to nodes, then proves that both
                                 ends know the secret (challenge/response; it never
                                 crosses the wire), and what it serves (listen, a
                                 segment) requires the same of its peers. */
    int no_shm;               /* 1: move no bytes through shared memory: neither map
                                 co-located nodes' segments nor offer this store's
                                 segment for mapping (every transfer to another
                                 process then goes over a socket) */
    const char *protocol;     /* data transport to nodes: "tcp" (NULL or "": the
                                 default), "rdma" (one-sided RDMA READ/WRITE over
                                 libibverbs/librdmacm; mc_store_open() fails with
                                 -ENODEV without a usable device, -EPROTONOSUPPORT
                                 in a build without RDMA) or "auto" (RDMA when a
                                 device opens, else TCP). A node (segment_size > 0)
                                 serves its segment over the same transport, its
                                 rdma_cm listener on the host of listen (an IP
                                 address on the RDMA device, not loopback). With
                                 "rdma", co-located segments are reached over RDMA
                                 too, not shared memory */
    const char *rdma_devices; /* verbs device names, comma-separated ("rxe0"): the
                                 first that opens is used. NULL or "": the first
                                 device present */
    int no_replica_cache;     /* 1: mc_get() asks the master every time instead
                                 of keeping replica lists for half the read
                                 lease (a get may then miss another client's
                                 change for that long) */
    const char *segment_file; /* NULL: the segment is anonymous memory. Else the
                                 segment is segment_size bytes of this existing
                                 file (on tmpfs, /dev/shm, or any regular file)
                                 from segment_offset, mapped shared: what is put
                                 there is in the file's bytes. segment_size must
                                 be given and the file must hold offset + size
                                 bytes (else mc_store_open() fails: -ENOENT no
                                 such file, -EISDIR a directory, -EINVAL another
                                 kind of file or an offset that is not a
                                 multiple of the page size,
                                 -EOVERFLOW a file too small). The file must not
                                 shrink while the store is open (its pages would
                                 fault). Such a segment is not offered to
                                 co-located clients over shared memory: they
                                 reach it over TCP */
    uint64_t segment_offset;  /* where segment_file's segment starts */
    uint64_t readahead_max;   /* read-ahead of one open version (mc_obj_t) whose
                                 replica is on another node (TCP, RDMA): sequential
                                 mc_obj_read_async()s are detected and up to this
                                 many bytes ahead of them are fetched, in 1 MiB
                                 blocks with several in flight, and served from
                                 memory. 0: the default, 8 MiB; under 1 MiB: no
                                 read-ahead. A seek drops it and starts again */
    uint64_t readahead_total; /* the bound on the read-ahead of every open version
                                 of the store together (0: the default, 256 MiB);
                                 a read past the bounds reads the replica directly */
} mc_store_opts_t;

/* Object metadata, as published. */
typedef struct mc_stat {
    uint64_t size;     /* bytes */
    uint64_t version;  /* unique per publish, grows over time */
    int64_t mtime_ns;  /* content changed: wall clock at publish (or as set) */
    uint32_t mode;     /* permission bits (07777) */
    uint32_t replicas; /* number of complete replicas */
    uint32_t flags;    /* MC_STAT_* */
    uint32_t uid;      /* owner, or MC_OWNER_NONE when none was recorded */
    uint32_t gid;      /* group, or MC_OWNER_NONE */
    uint32_t type;     /* MC_TYPE_* */
    uint32_t nlink;    /* names: 1 for a key; a directory's lookup counts
                          2 + its subdirectories */
    int64_t atime_ns;  /* last read (relatime rule, docs/SEMANTICS.md) or as set */
    int64_t ctime_ns;  /* metadata or name changed: publish, set-meta, rename */
    uint64_t rdev;     /* device number of a device node (MC_TYPE_CHR, _BLK) */
    uint64_t ino;      /* a hard-linked file (mc_link_async()): its number, the
                          same under each of its names; 0 for a key that
                          shares its object with no other */
    uint64_t alloc;    /* bytes of segment space one replica takes: holes
                          (sparse files) take none; st_blocks * 512 */
} mc_stat_t;

/* uid / gid of an object whose writer named no owner. */
#define MC_OWNER_NONE 0xffffffffu

/* Object types (mc_stat_t.type), recorded as put (the mount's symbolic
 * links and special files). The store treats every type alike: a get of a
 * symbolic link returns its bytes, which are the link's target, and a get
 * of a FIFO, socket or device node returns its bytes, which the mount leaves
 * empty; a put over any of them publishes the put's type (a file unless
 * named). Readers that care check st.type. */
#define MC_TYPE_FILE 0
#define MC_TYPE_SYMLINK 1
#define MC_TYPE_FIFO 2
#define MC_TYPE_SOCK 3
#define MC_TYPE_CHR 4
#define MC_TYPE_BLK 5
#define MC_TYPE_MAX MC_TYPE_BLK

#define MC_STAT_LEASED 0x1   /* a read lease or an open handle holds it */
#define MC_STAT_SOFT_PIN 0x2 /* soft-pinned (evicted only as a last resort) */
#define MC_STAT_HARD_PIN 0x4 /* hard-pinned (never evicted) */

#define MC_PIN_NONE 0
#define MC_PIN_SOFT 1
#define MC_PIN_HARD 2

typedef struct mc_put_opts {
    uint32_t flags;           /* MC_PUT_* */
    uint32_t mode;            /* permission bits; with MC_PUT_MODE exactly these
                                 (0 too), else 0 keeps the replaced version's
                                 mode, or 0644 for a new key */
    uint32_t replica_num;     /* 0 means 1 */
    uint32_t pin;             /* MC_PIN_* */
    uint64_t soft_pin_ttl_ms; /* 0: the pin lasts until removed */
    int64_t mtime_ns;         /* 0: now */
    /* A node's data address ("host:port", as published in replica sets) to
     * place the first replica on when its segment has room; NULL: none.
     * Best effort: otherwise placement is as usual. Copied at submission. */
    const char *preferred_segment;
    uint32_t uid, gid; /* with MC_PUT_OWNER: the owner; else the replaced
                          version's, or MC_OWNER_NONE for a new key */
    uint32_t type;     /* MC_TYPE_* (0: a file) */
    uint64_t rdev;     /* MC_TYPE_CHR, MC_TYPE_BLK: the device number */
} mc_put_opts_t;

/* Fail with -EEXIST instead of replacing an existing key. */
#define MC_PUT_NOREPLACE 0x1
/* mc_put_opts_t.uid and .gid name the owner. */
#define MC_PUT_OWNER 0x2
/* mc_put_opts_t.mode is the mode even when it is 0. */
#define MC_PUT_MODE 0x4
/* Fail with -EISDIR, when it would publish, if keys start with the key and
 * a '/' (a directory of that name, as a mount shows keys): what a
 * mount writes never ends up hidden behind a directory that another mount
 * made meanwhile. */
#define MC_PUT_NOTDIR 0x8

/* Remove even if leased or open; readers finish on the old version. */
#define MC_REMOVE_FORCE 0x1
/* The key is a directory marker ("a/b/"): fail with -ENOTEMPTY if any other
 * key starts with it. */
#define MC_REMOVE_DIR 0x2

/* Fail with -EEXIST if the destination exists. */
#define MC_RENAME_NOREPLACE 0x1
/* from and to are prefixes ending in '/': move every key under from (the
 * marker included) atomically. Fails with -ENOTEMPTY if a key other than the
 * marker exists under to, -EINVAL if to lies under from. */
#define MC_RENAME_PREFIX 0x2

typedef struct mc_list_entry {
    const char *key; /* full key, NUL-terminated for convenience */
    size_t klen;
    int is_prefix; /* 1: a common prefix (ends with the delimiter); st unset */
    mc_stat_t st;
} mc_list_entry_t;

typedef struct mc_list {
    size_t n;
    mc_list_entry_t *entries;
    int more;         /* 1: more entries follow; pass `next` as `after` */
    const char *next; /* cursor: the last key (or prefix) returned */
    size_t next_len;
} mc_list_t;

typedef struct mc_space {
    uint64_t total;   /* bytes in all segments */
    uint64_t used;    /* bytes allocated (committed or being written) */
    uint64_t objects; /* keys published */
    uint64_t evicted; /* objects evicted since start */
} mc_space_t;

/* ---- errors ---- */

/* mc_strerror() returns a static description of a negative result code. */
MC_EXPORT const char *mc_strerror(int code);

/*
 * mc_parse_size() reads a byte count such as "4096", "16MB", "16 MB", "1G" or
 * "2GiB" (binary units, case-insensitive) into *out. Returns 0, -EINVAL (not
 * a size, e.g. "50%") or -ERANGE (too large).
 */
MC_EXPORT int mc_parse_size(const char *s, uint64_t *out);

/* ---- the process ---- */

/*
 * mc_log_init() sets the program name that prefixes libmooncake's one-line
 * diagnostics on stderr (copied; at most 63 bytes are kept) and, unless
 * level is NULL, the most verbose level printed: "error", "warn" (or
 * "warning"), "info" or "debug", any case. Before it is called the name is
 * "mooncake" and the level "warn". Returns 0, or -EINVAL for an unknown
 * level (then nothing changes). Call it at startup, before other threads
 * log.
 */
MC_EXPORT int mc_log_init(const char *program, const char *level);

/*
 * mc_nofile_raise() raises this process's soft RLIMIT_NOFILE to its hard
 * limit, so that a process serving connections is bounded by its server's
 * own connection limit rather than by a low default, and returns the new
 * soft limit, or -errno when it cannot be read or changed (the limit is
 * then as before). For programs to call once at startup (mooncake-master,
 * mooncake-fs and mooncake-cli do); the library never changes its host's
 * limits by itself.
 */
MC_EXPORT long mc_nofile_raise(void);

/* ---- the store ---- */

/* mc_store_opts_init() fills defaults (embedded, MC_DEFAULT_SEGMENT_SIZE). */
MC_EXPORT void mc_store_opts_init(mc_store_opts_t *o);

/*
 * mc_store_open() opens a store. Embedded when o->master is NULL or empty;
 * otherwise it connects to the master at o->master ("host:port", default
 * port 50051, or "unix:/path") and, with a segment_size, contributes that
 * much memory as a node. It returns once connected (and the segment
 * mounted), or fails within o->timeout_ms. Returns 0 and sets *out, or
 * -EINVAL (bad option or address), -ENOMEM, -ECONNREFUSED, -ETIMEDOUT,
 * -EACCES (the master wants a secret this store lacks or does not share, or
 * cannot prove it knows ours), the errors of reading o->secret_file
 * (-ENOENT, -EPERM, ...), or another -errno. The caller closes the store
 * with mc_store_close().
 */
MC_EXPORT int mc_store_open(mc_store_t **out, const mc_store_opts_t *o);

/*
 * mc_store_close() fails operations still waiting with -ECANCELED, releases
 * every handle and writer, and frees the store; each operation's callback
 * runs once, within the store's timeout. Called from another thread, it
 * returns when all is done. Called on the loop's thread (from a callback,
 * the callback of the very operation being answered included, or on the
 * caller's loop's thread when the caller supplied the loop), it returns at
 * once and the close goes on in the loop: operations still waiting are
 * called back later, and the store is freed after the last. A caller's
 * loop must run on until then: at most the store's timeout, and a node's
 * second for its segment's unmount more (stopped sooner, the store is
 * not freed). A store with a loop of its own closes on that loop, and its
 * thread then ends. The store may not be used once this is called. The
 * thread that opened a store
 * with a loop of its own is interrupted once, soon after (the kernel's
 * teardown of the loop's io_uring): a blocking call there that is not
 * restarted (a read from a socket with SO_RCVTIMEO) may fail with EINTR.
 */
MC_EXPORT void mc_store_close(mc_store_t *s);

/*
 * What a store moved, per transport, since it was opened: object bytes (no
 * headers), each byte a write stores counted once per replica it goes to.
 * An operation is one memcpy (local, shm) or one request (tcp); a cluster
 * client moves at most 4 MiB per operation, an embedded store copies a
 * whole range at once.
 *
 *   local  memcpy to or from this process's own segment
 *   shm    memcpy to or from a co-located node's segment, mapped from its
 *          memfd (same host, same network namespace)
 *   tcp    READ and WRITE requests to a node over a socket
 *   rdma   one-sided RDMA READs and WRITEs to a node's registered segment
 *          (an operation is one piece of at most 4 MiB; the transport
 *          splits it into work requests)
 */
typedef struct mc_store_stats {
    uint64_t local_ops, local_bytes;
    uint64_t shm_ops, shm_bytes;
    uint64_t tcp_ops, tcp_bytes;
    uint64_t rdma_ops, rdma_bytes;
    uint64_t cache_hits; /* mc_get()s served from the replica-list cache */
    /* Of rdma_bytes, those the NIC moved straight to or from the caller's
     * buffer (registered with mc_register_buffer()), without staging. */
    uint64_t rdma_zero_copy_bytes;
    /* Pieces of writes refused because their write had ended (by a node,
     * by the fence of a node's segment mapped here or written over RDMA,
     * or by our own segment): it was revoked or its lease ran out, and its space may be
     * another object's (a segment's epoch, docs/PROTOCOL.md). */
    uint64_t writes_fenced;
} mc_store_stats_t;

/* mc_store_stats() fills *out with s's counters. Any thread; each counter
 * is read atomically, the set as a whole is not a snapshot. */
MC_EXPORT void mc_store_stats(mc_store_t *s, mc_store_stats_t *out);

/*
 * mc_store_served_addr() returns the address this store serves on, as
 * bound ("127.0.0.1:40123", "unix:/path"): a node's segment data (the data
 * address its replicas carry and mc_put_opts_t.preferred_segment names),
 * or an embedded store's listen; "" when it serves nothing. Owned by the
 * store, valid until mc_store_close(); any thread.
 */
MC_EXPORT const char *mc_store_served_addr(mc_store_t *s);

/* mc_store_loop() returns the loop the store's callbacks run on. */
MC_EXPORT mc_loop_t *mc_store_loop(mc_store_t *s);

/* mc_key_check() returns 0 for a valid key, -EINVAL (empty, NUL inside) or
 * -ENAMETOOLONG (longer than MC_KEY_MAX). */
MC_EXPORT int mc_key_check(const char *key, size_t klen);

/* ---- whole objects ---- */

/* Publishes buf[0..len) under key. Result 0, or -EEXIST (NOREPLACE),
 * -ENOSPC, -EINVAL, -ENAMETOOLONG, -EFBIG (larger than the store). */
MC_EXPORT int mc_put_async(mc_store_t *s, const char *key, size_t klen, const void *buf, size_t len,
                           const mc_put_opts_t *po, mc_done_cb cb, void *arg);
/* The same with the value gathered from iov[0..iovcnt). */
MC_EXPORT int mc_putv_async(mc_store_t *s, const char *key, size_t klen, const struct iovec *iov,
                            int iovcnt, const mc_put_opts_t *po, mc_done_cb cb, void *arg);

/* Copies up to len bytes from offset off of the object into buf. Result:
 * bytes copied (0 at or past the end), or -ENOENT. If st is not NULL it
 * receives the object's metadata (st->size tells if buf was too small).
 * Grants a read lease. A read that fails (this one, mc_obj_read_async(),
 * any) leaves buf's contents unspecified: part of it may have been
 * written, over RDMA even with bytes the check after them refused
 * (-ESTALE). */
MC_EXPORT int mc_get_async(mc_store_t *s, const char *key, size_t klen, uint64_t off, void *buf,
                           size_t len, mc_stat_t *st, mc_done_cb cb, void *arg);

/* Results of mc_lookup_async(). */
#define MC_LOOKUP_FILE 1
#define MC_LOOKUP_DIR 2

/*
 * Tells what key names when keys are paths split at delim: MC_LOOKUP_DIR when
 * some key starts with key + delim (st then holds the metadata of the marker
 * key + delim if it exists, else zeros), else MC_LOOKUP_FILE when key itself
 * exists (st filled), else -ENOENT. A directory shadows a file of the same
 * name.
 */
MC_EXPORT int mc_lookup_async(mc_store_t *s, const char *key, size_t klen, int delim, mc_stat_t *st,
                              mc_done_cb cb, void *arg);

/* What mc_set_meta_async() changes (mc_meta_t.what). */
#define MC_META_MODE 0x1
#define MC_META_MTIME 0x2
#define MC_META_ATIME 0x4
#define MC_META_UID 0x8
#define MC_META_GID 0x10

/* Metadata to change: the fields what names, the others ignored. */
typedef struct mc_meta {
    unsigned what;    /* MC_META_* */
    uint32_t mode;    /* permission bits (07777) */
    uint32_t uid;     /* new owner */
    uint32_t gid;     /* new group */
    int64_t atime_ns; /* wall clock, nanoseconds since the epoch */
    int64_t mtime_ns;
} mc_meta_t;

/*
 * Changes the current version's metadata in place (metadata is not part of
 * a version's immutable bytes); the ctime becomes the master's wall clock.
 * A new owner or group (MC_META_UID, MC_META_GID) of an object that is not a
 * directory marker (a key ending in '/') also clears its set-user-ID bit, and
 * its set-group-ID bit when group-execute is set, as chown(2) does on Linux.
 * The store checks no credentials: who may change what is the caller's rule
 * (the mount applies POSIX's). Fills *st (if not NULL) with the result.
 * Result 0, -ENOENT, -EINVAL (an unknown bit in what).
 */
MC_EXPORT int mc_set_meta_async(mc_store_t *s, const char *key, size_t klen, const mc_meta_t *m,
                                mc_stat_t *st, mc_done_cb cb, void *arg);

/* ---- extended attributes ---- */

/*
 * An object's extended attributes are its metadata: name -> value pairs in
 * the master's record of the current version, changed in place (the ctime
 * becomes the master's wall clock), kept by a rename, and taken over by a
 * new version of the key (a put, a writer's commit) from the one it
 * replaces. Any name is stored as given; namespaces ("user.", "trusted.")
 * and who may touch them are the caller's rule (the mount applies Linux's).
 * Limits, as Linux gives them: a name of 1..MC_XATTR_NAME_MAX bytes
 * (-ERANGE), a value of at most MC_XATTR_SIZE_MAX bytes (-E2BIG), and per
 * object at most MC_XATTR_TOTAL_MAX bytes of names + 1 + values, with the
 * names list at most MC_XATTR_LIST_MAX (-ENOSPC beyond either).
 */
#define MC_XATTR_NAME_MAX 255
#define MC_XATTR_SIZE_MAX 65536
#define MC_XATTR_LIST_MAX 65536
#define MC_XATTR_TOTAL_MAX (128 * 1024)

/* mc_xattr_set_async() flags: the values of XATTR_CREATE and XATTR_REPLACE. */
#define MC_XATTR_CREATE 0x1  /* fail with -EEXIST if name exists */
#define MC_XATTR_REPLACE 0x2 /* fail with -ENODATA if name does not exist */

/*
 * Reads attribute name (a C string) of key into buf[0..len). Result: the
 * value's length; with len 0 nothing is copied (a size query); -ERANGE when
 * the value is longer than a len > 0; -ENODATA, -ENOENT.
 */
MC_EXPORT int mc_xattr_get_async(mc_store_t *s, const char *key, size_t klen, const char *name,
                                 void *buf, size_t len, mc_done_cb cb, void *arg);

/* Sets attribute name of key to val[0..vlen), MC_XATTR_* flags. Result 0,
 * -ENOENT, -EEXIST, -ENODATA, -ERANGE, -E2BIG, -ENOSPC, -EINVAL. */
MC_EXPORT int mc_xattr_set_async(mc_store_t *s, const char *key, size_t klen, const char *name,
                                 const void *val, size_t vlen, unsigned flags, mc_done_cb cb,
                                 void *arg);

/* Lists key's attribute names into buf[0..len), each followed by a NUL, as
 * listxattr(2). Result: the list's length (len 0: a size query), -ERANGE
 * when it is longer than a len > 0, -ENOENT. */
MC_EXPORT int mc_xattr_list_async(mc_store_t *s, const char *key, size_t klen, char *buf,
                                  size_t len, mc_done_cb cb, void *arg);

/* Removes attribute name of key. Result 0, -ENOENT, -ENODATA, -ERANGE. */
MC_EXPORT int mc_xattr_remove_async(mc_store_t *s, const char *key, size_t klen, const char *name,
                                    mc_done_cb cb, void *arg);

/* Fills *st. Result 0 or -ENOENT. */
MC_EXPORT int mc_stat_async(mc_store_t *s, const char *key, size_t klen, mc_stat_t *st,
                            mc_done_cb cb, void *arg);

/* Removes key (MC_REMOVE_*). Result 0, -ENOENT, -EBUSY (leased, not forced),
 * -ENOTEMPTY (MC_REMOVE_DIR). */
MC_EXPORT int mc_remove_async(mc_store_t *s, const char *key, size_t klen, unsigned flags,
                              mc_done_cb cb, void *arg);

/* Renames a key, or a prefix with MC_RENAME_PREFIX, atomically. Result 0,
 * -ENOENT, -EEXIST, -ENOTEMPTY, -EINVAL. */
MC_EXPORT int mc_rename_async(mc_store_t *s, const char *from, size_t flen, const char *to,
                              size_t tlen, unsigned flags, mc_done_cb cb, void *arg);

/*
 * Gives the object named by key from a second name, key to (a hard link):
 * both then name one object, whose next versions, metadata and reads are
 * the same through either; st.nlink counts the names and st.ino identifies
 * the object. Removing or replacing (put, rename over) a name drops that
 * name only; the object goes with its last name. A hard-linked object is
 * never evicted. Fills *st (if not NULL) with the object's metadata.
 * Result 0, -ENOENT, -EEXIST (to exists), -EPERM (a directory marker: a key
 * ending in '/'), -EINVAL, -ENAMETOOLONG.
 */
MC_EXPORT int mc_link_async(mc_store_t *s, const char *from, size_t flen, const char *to,
                            size_t tlen, mc_stat_t *st, mc_done_cb cb, void *arg);

/*
 * Lists keys starting with prefix, in byte order, strictly after `after`
 * (NULL: from the start), at most max entries (0: 1000). With delim (e.g.
 * '/'), keys with delim after the prefix are folded into one is_prefix entry.
 * On success *out is set (free it with mc_list_free()) and the result is the
 * entry count.
 */
MC_EXPORT int mc_list_async(mc_store_t *s, const char *prefix, size_t plen, const char *after,
                            size_t alen, int delim, size_t max, mc_list_t **out, mc_done_cb cb,
                            void *arg);
MC_EXPORT void mc_list_free(mc_list_t *l);

/* Fills *sp with the store's space use. Result 0. */
MC_EXPORT int mc_statfs_async(mc_store_t *s, mc_space_t *sp, mc_done_cb cb, void *arg);

/* One counter of the master (mc_master_stats()). */
typedef struct mc_counter {
    char name[32]; /* NUL-terminated, e.g. "repair_done" */
    uint64_t value;
} mc_counter_t;

/*
 * Fills out[0..max) with the master's counters (nodes, segments, writes in
 * progress, handles, nodes expired, objects lost, replicas dropped by
 * writers, repairs started, done, failed, bytes, in flight and waiting: see
 * docs/PROTOCOL.md, STATS). The result is the count filled. An embedded
 * store reports its own master.
 */
MC_EXPORT int mc_master_stats_async(mc_store_t *s, mc_counter_t *out, size_t max, mc_done_cb cb,
                                    void *arg);

/* Sync forms: the async call plus a wait; they return the callback's result. */
MC_EXPORT int mc_put(mc_store_t *s, const char *key, size_t klen, const void *buf, size_t len,
                     const mc_put_opts_t *po);
MC_EXPORT int mc_putv(mc_store_t *s, const char *key, size_t klen, const struct iovec *iov,
                      int iovcnt, const mc_put_opts_t *po);
MC_EXPORT int mc_get(mc_store_t *s, const char *key, size_t klen, uint64_t off, void *buf,
                     size_t len, mc_stat_t *st);
MC_EXPORT int mc_stat(mc_store_t *s, const char *key, size_t klen, mc_stat_t *st);
MC_EXPORT int mc_remove(mc_store_t *s, const char *key, size_t klen, unsigned flags);
MC_EXPORT int mc_rename(mc_store_t *s, const char *from, size_t flen, const char *to, size_t tlen,
                        unsigned flags);
MC_EXPORT int mc_link(mc_store_t *s, const char *from, size_t flen, const char *to, size_t tlen,
                      mc_stat_t *st);
MC_EXPORT int mc_list(mc_store_t *s, const char *prefix, size_t plen, const char *after,
                      size_t alen, int delim, size_t max, mc_list_t **out);
MC_EXPORT int mc_statfs(mc_store_t *s, mc_space_t *sp);
MC_EXPORT int mc_master_stats(mc_store_t *s, mc_counter_t *out, size_t max);
MC_EXPORT int mc_xattr_get(mc_store_t *s, const char *key, size_t klen, const char *name, void *buf,
                           size_t len);
MC_EXPORT int mc_xattr_set(mc_store_t *s, const char *key, size_t klen, const char *name,
                           const void *val, size_t vlen, unsigned flags);
MC_EXPORT int mc_xattr_list(mc_store_t *s, const char *key, size_t klen, char *buf, size_t len);
MC_EXPORT int mc_xattr_remove(mc_store_t *s, const char *key, size_t klen, const char *name);

/* ---- open versions (read handles) ---- */

/*
 * Opens the current version of key for reading. The handle pins that version:
 * it stays readable after the key is replaced or removed, until
 * mc_obj_close(). Result 0 (and *out set before the callback) or -ENOENT.
 */
MC_EXPORT int mc_obj_open_async(mc_store_t *s, const char *key, size_t klen, mc_obj_t **out,
                                mc_done_cb cb, void *arg);
/* The same, waited for: 0 with *out set, or -ENOENT. */
MC_EXPORT int mc_obj_open(mc_store_t *s, const char *key, size_t klen, mc_obj_t **out);
/* The version's metadata; valid until mc_obj_close(). */
MC_EXPORT const mc_stat_t *mc_obj_stat(const mc_obj_t *o);
/* Reads up to len bytes at off. Result: bytes read (short at the end). */
MC_EXPORT int mc_obj_read_async(mc_obj_t *o, uint64_t off, void *buf, size_t len, mc_done_cb cb,
                                void *arg);
/* The same, waited for. */
MC_EXPORT int mc_obj_read(mc_obj_t *o, uint64_t off, void *buf, size_t len);
/*
 * Reads up to len bytes at off into memory the store lends: cb gets them
 * (result: bytes read, short at the end) and may use them until it
 * returns. A read that one or two blocks read ahead hold is lent them, a
 * piece each (no copy); any other is read into a buffer of the store's,
 * one piece, freed after cb. For a caller that passes the bytes on at once
 * (a FUSE reply).
 */
MC_EXPORT int mc_obj_peek_async(mc_obj_t *o, uint64_t off, size_t len, mc_data_cb cb, void *arg);
/*
 * Reads in place: when bytes [off, off + len) of the version (clipped to its
 * size) start in memory this process addresses - its own segment, or a
 * co-located node's segment already mapped over shared memory - sets *p to
 * them and returns how many lie there contiguously (at most len; 0 at or
 * past the end). They stay valid, unchanged, until mc_obj_close(). A hole
 * of a sparse file is zeros in this process's memory. -EXDEV
 * when they are elsewhere (then read them with mc_obj_read_async()).
 * On the store's loop thread only.
 */
MC_EXPORT int64_t mc_obj_view(mc_obj_t *o, uint64_t off, size_t len, const void **p);
/*
 * 1 when the version may no longer be pinned: the connection to the master
 * that opened it was lost since (a master that restarted), and with it the
 * handle, so the version's space may go to another object; or a segment
 * mc_obj_view() pointed into was mounted again at the master since (it
 * dropped the segment, and the version's bytes there with it). Reads
 * through it then fail with -ESTALE, mc_obj_view() too; a pointer
 * mc_obj_view() gave must not be read any more. 0 otherwise. Any thread
 * (a few loads).
 */
MC_EXPORT int mc_obj_stale(const mc_obj_t *o);
/* One replica of an open version (mc_obj_replicas()). */
typedef struct mc_replica {
    uint32_t segment; /* the segment's id at the master */
    uint32_t extents; /* pieces the replica is stored in */
    uint64_t offset;  /* the first piece's offset in the segment */
    uint64_t bytes;   /* bytes the pieces hold (at least the version's size,
                         but for a sparse file's holes, which take none) */
    char addr[160];   /* the segment's node: its data address ("host:port",
                         "unix:/path"; "" in an embedded store), NUL-terminated */
} mc_replica_t;

/*
 * Where the version's bytes are: fills out[0..max) with its replicas as
 * the master placed them (each on another segment) and returns how many it
 * has (more than max: only max are filled). Any thread while the handle is
 * open; it asks no one and changes nothing.
 */
MC_EXPORT int mc_obj_replicas(const mc_obj_t *o, mc_replica_t *out, int max);
/*
 * Sparse files: the first offset at or after off where the version's bytes
 * (hole 0, lseek's SEEK_DATA) or a hole (hole 1, SEEK_HOLE; its end counts
 * as one) start. Result that offset, or -ENXIO when off is at or past the
 * size, or no bytes follow it. On the store's loop thread only.
 */
MC_EXPORT int64_t mc_obj_seek(const mc_obj_t *o, uint64_t off, int hole);
/* Releases the handle (NULL: nothing). Reads still in flight complete first. */
MC_EXPORT void mc_obj_close(mc_obj_t *o);

/* ---- streaming writes ---- */

/*
 * Creates a file in one request to the master: publishes an empty object
 * at key with po's options (as mc_put_async() of no bytes under
 * MC_PUT_NOREPLACE), opens it (as mc_obj_open_async()) and starts the
 * writer of its next version, empty, which keeps the mode and owner the
 * object was published with (as mc_writer_open_async() without a base).
 * Result 0 with *obj and *w set before the callback (the caller closes
 * the one and commits or aborts the other); -EEXIST when key is an object,
 * -EISDIR when it is a directory (some key starts with key + '/'), or an
 * error of those calls. On an error nothing is left open; an object
 * published before a later step failed stays.
 */
MC_EXPORT int mc_create_async(mc_store_t *s, const char *key, size_t klen, const mc_put_opts_t *po,
                              mc_obj_t **obj, mc_writer_t **w, mc_done_cb cb, void *arg);

/*
 * Starts a new version of key. Nothing is visible until commit. If base is
 * not NULL the new version starts as a copy of it (copy-on-write of an
 * existing file); otherwise empty. Space is allocated as data arrives, so
 * memory per writer is bounded. While it is open the store renews its
 * write at the master in the background, on the store's loop (a caller
 * that supplies the loop keeps it running), so that an idle writer is not
 * revoked at the master's put TTL. Result 0 with *out set, or -EINVAL,
 * -ENAMETOOLONG, -ENOSPC.
 */
MC_EXPORT int mc_writer_open_async(mc_store_t *s, const char *key, size_t klen,
                                   const mc_put_opts_t *po, mc_obj_t *base, mc_writer_t **out,
                                   mc_done_cb cb, void *arg);
/*
 * Writes len bytes at off (a gap reads as zeros: past the end, a hole that
 * takes no space). Result len or -ENOSPC, -EFBIG (refused: nothing
 * changed, the writer goes on), or the error of a transfer that failed
 * (-EIO, -ECONNREFUSED, -ETIMEDOUT, -ESTALE, ...): the version in progress
 * is then lost, and every later call on the writer, the commit included,
 * fails with that error (writes in flight together succeed or fail on
 * their own, but the commit reports the first failure).
 */
MC_EXPORT int mc_writer_write_async(mc_writer_t *w, uint64_t off, const void *buf, size_t len,
                                    mc_done_cb cb, void *arg);
/* Reads back what was written. Result: bytes read. */
MC_EXPORT int mc_writer_read_async(mc_writer_t *w, uint64_t off, void *buf, size_t len,
                                   mc_done_cb cb, void *arg);
/* Sets the size (shrinks, or grows with zeros: a hole, taking no space).
 * Result 0 or -ENOSPC. */
MC_EXPORT int mc_writer_truncate_async(mc_writer_t *w, uint64_t size, mc_done_cb cb, void *arg);
/*
 * Makes bytes [off, off + len) of the version in progress read as zeros,
 * giving back the space of the whole allocation units inside (a hole: a
 * sparse file); the size stays (the part past it changes nothing). Result
 * 0, or -ENOSPC / -EIO as a write.
 */
MC_EXPORT int mc_writer_punch_async(mc_writer_t *w, uint64_t off, uint64_t len, mc_done_cb cb,
                                    void *arg);
/* Current size. Loop thread only. */
MC_EXPORT uint64_t mc_writer_size(const mc_writer_t *w);
/* mc_obj_seek() in the version in progress, as its space stands: a write
 * whose callback has not run yet may not count as bytes (its space may
 * not be granted yet: its range reads as a hole until then), so wait for
 * the writes before seeking past them (the mount does). Loop thread only. */
MC_EXPORT int64_t mc_writer_seek(const mc_writer_t *w, uint64_t off, int hole);
/*
 * The key a hard-linked file (mc_stat_t.ino, not 0) is kept under, whatever
 * its names, into buf (NUL-terminated): it can be opened and stat'ed, and a
 * writer can publish to it (mc_writer_set_key()) while the file has a name
 * left (-ENOENT at commit otherwise); it cannot be put, renamed or removed.
 * Returns the key's length, or -EINVAL (ino 0), -ERANGE (buf too small).
 */
MC_EXPORT int mc_inode_key(uint64_t ino, char *buf, size_t size);
/* Changes the key the writer will publish under. Loop thread only. */
MC_EXPORT int mc_writer_set_key(mc_writer_t *w, const char *key, size_t klen);
/* Sets metadata to publish with: the mode (MC_META_MODE), the mtime
 * (MC_META_MTIME); other bits are ignored. Without them the commit keeps the
 * mode of the version it replaces and takes the commit's time. Loop thread
 * only. */
MC_EXPORT void mc_writer_set_meta(mc_writer_t *w, const mc_meta_t *m);
/*
 * Publishes the version (replacing the key's current one, or failing with
 * -EEXIST under MC_PUT_NOREPLACE), fills *st if not NULL, and frees the
 * writer whatever the result. It waits for the writer's operations issued
 * before it and publishes what they wrote. A writer one of whose transfers
 * failed (mc_writer_write_async()) publishes nothing: the commit fails with
 * that error and the key keeps its current version.
 */
MC_EXPORT int mc_writer_commit_async(mc_writer_t *w, mc_stat_t *st, mc_done_cb cb, void *arg);
/* Drops the writer and its space, once its operations issued before this
 * have ended (their callbacks still come); w is not to be used after. */
MC_EXPORT void mc_writer_abort(mc_writer_t *w);

/* ---- registered buffers (zero copy) ---- */

/*
 * mc_register_buffer() records [ptr, ptr + len) as a buffer the caller will
 * pass to puts and gets (any thread; the store's loop does the work, so
 * never from a callback when that loop runs on another thread). With an
 * RDMA transport the buffer is also registered with the device (local
 * access only): a transfer whose piece lies inside it lets the NIC read or
 * write the caller's memory directly instead of staging buffers (counted
 * in rdma_zero_copy_bytes). Without RDMA it is only recorded. The memory
 * must stay valid until mc_unregister_buffer() or mc_store_close().
 * Returns 0, -EINVAL (NULL, len 0, wrapping around), -EEXIST (overlaps a
 * registered buffer), -ENOMEM, or the device's error (-EPERM, -EFAULT:
 * e.g. the memlock limit, read-only memory).
 */
MC_EXPORT int mc_register_buffer(mc_store_t *s, void *ptr, size_t len);

/*
 * mc_unregister_buffer() forgets the buffer registered at ptr (its start).
 * It does not wait: while an RDMA transfer uses the buffer it fails with
 * -EBUSY (retry once that operation completed). Returns 0, -EINVAL (NULL),
 * -ENOENT (no buffer starts at ptr), -EBUSY.
 */
MC_EXPORT int mc_unregister_buffer(mc_store_t *s, void *ptr);

#ifdef __cplusplus
}
#endif

/* Replica tasks (copy and move, run by the master): in their own header. */
#include "mooncake/tasks.h"

#endif /* MOONCAKE_MOONCAKE_H */
