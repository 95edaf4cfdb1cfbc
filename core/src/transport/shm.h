/*
 * shm.h - segments in shared memory, and what a client needs to reach them
 * from the same host: the "shm" transport of the design.
 *
 * A node's segment lives in a sealed memfd mapped MAP_SHARED. Besides its
 * TCP data address, the node listens on an abstract Unix socket named from
 * that address (mc__shm_unix_addr()); abstract names are per network
 * namespace, so reaching one proves that client and node share the host
 * (and namespace). A node whose data address is a Unix socket (an embedded
 * store's listen, "unix:/path") answers on that socket itself. There the client asks SHM_MAP for
 * the segment's memfd, maps it read-write, and from then on moves bytes with memcpy.
 *
 * The seals matter: a client could otherwise ftruncate() the memfd and make
 * the node (or other clients) fault with SIGBUS on its next access. The node
 * seals its memfd against shrinking and growing; a client maps only a memfd
 * sealed against shrinking, for the same reason in the other direction.
 * A segment in a file the caller named (mc__seg_map_file()) has no seals to
 * offer: it is not handed out, and its peers reach it over TCP or RDMA.
 *
 * Copies into a mapped segment pass no node's check, so the memfd carries
 * a fence after the segment (mc__shm_fence_t; a segment in a file has one
 * in memory of its own, for its RDMA peers) that keeps a write which
 * ended from landing late (wire/proto.h, "Segment epochs"): each client
 * that maps the segment gets a slot (as does each RDMA connection, whose
 * one-sided writes pass no check either: transport_rdma.h), marks there
 * the epoch of a copy before it starts it and clears it after, and starts
 * none below the fence's epoch; the node raises that epoch and counts a rise as enforced
 * only once no slot shows an older copy in progress. Each side stores,
 * then loads the other's word (sequentially consistent), so at least one
 * of them sees the other: a copy that started before the rise holds the
 * rise back until it ends, and one after it is refused. Reads pass no
 * node's check either: after each copy out, a client checks the fence's
 * mount epoch (mc__shm_read_ok(); over RDMA, a READ of it after the
 * bytes: transport_rdma.h), which the node raises when its master
 * mounts the segment again, before the segment takes new data.
 */
#ifndef MC_SHM_H
#define MC_SHM_H

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The slots of a fence: mappings of one segment at once. */
#define MC__SHM_FENCE_SLOTS 8190

/* The fence of a memfd segment, in the memfd at mc__shm_fence_off() of
 * the segment's size (64 KiB, its pages allocated as first touched).
 * mount: the epoch of the segment's last mount at its master (wire/proto.h,
 * "Reads"), which the node stores before the segment takes new data; a
 * client that copied bytes out for a replica of a lower epoch discards
 * them (-ESTALE): the segment was mounted again since that replica was
 * handed out, and its space may hold another object's bytes. */
typedef struct mc__shm_fence {
    _Atomic uint64_t epoch;                     /* a copy below it must not start */
    _Atomic uint64_t busy[MC__SHM_FENCE_SLOTS]; /* a slot's copy in progress: its epoch, or 0 */
    _Atomic uint64_t mount;                     /* a read below it is refused, after its copy */
} mc__shm_fence_t;

_Static_assert(sizeof(mc__shm_fence_t) == 65536, "the fence's layout is 64 KiB");

/* Where the fence of a segment of size bytes lies in its memfd (the size
 * rounded up to 4 KiB), and the bytes the memfd holds in all. */
static inline uint64_t mc__shm_fence_off(uint64_t size)
{
    return (size + 4095) & ~(uint64_t)4095;
}
static inline uint64_t mc__shm_memfd_size(uint64_t size)
{
    return mc__shm_fence_off(size) + sizeof(mc__shm_fence_t);
}

/* A segment's memory: base[0..size), the memfd behind it (or -1: a file's),
 * and its fence: a memfd's follows the segment in the same mapping, a
 * file's is anonymous shared memory of its own (not in the file, whose
 * bytes are all the segment's; nor offered for mapping, as the file is
 * not). */
typedef struct mc__seg {
    char *base;
    uint64_t size;
    int fd;
    mc__shm_fence_t *fence;
} mc__seg_t;

/* Where the fence of segment base[0..size) made by mc__seg_create() (whose
 * fd is not -1) lies: after it in its memfd, as a client maps it too. */
static inline mc__shm_fence_t *mc__seg_fence(char *base, uint64_t size)
{
    return (mc__shm_fence_t *)(void *)(base + mc__shm_fence_off(size));
}

/*
 * mc__seg_create() makes a segment of size bytes, and its fence after it,
 * in a new memfd called name (for /proc/PID/maps), sealed against resizing
 * and mapped read-write shared; the pages are allocated as they are first
 * touched. Returns 0 and fills *out, or -errno (-ENOMEM, -EMFILE, -ENOSYS
 * without memfd). Undo with mc__seg_destroy().
 */
int mc__seg_create(uint64_t size, const char *name, mc__seg_t *out);

/*
 * mc__shm_read_ok() says, after a copy out of a mapped segment for a
 * replica of epoch, whether those bytes were the replica's: 0, or -ESTALE
 * when the segment was mounted again above epoch (mount: the fence's mount
 * word, or NULL: no check). The load follows the copy's loads.
 */
static inline int mc__shm_read_ok(const _Atomic uint64_t *mount, uint64_t epoch)
{
    atomic_thread_fence(memory_order_acquire); /* the copy's loads, then this one */
    return mount && epoch < atomic_load(mount) ? -ESTALE : 0;
}

/*
 * mc__shm_copy_in() copies n bytes of src (NULL: zeros) to at, a mapped
 * segment's memory, as a write of epoch through slot of fence f: -ESTALE,
 * and nothing copied, when the fence's epoch is above epoch; else 0.
 */
int mc__shm_copy_in(mc__shm_fence_t *f, uint32_t slot, uint64_t epoch, char *at, const char *src,
                    size_t n);

/*
 * mc__seg_map_file() maps size bytes of the regular file path from offset
 * off (a multiple of the page size) read-write shared into *out, whose fd
 * is then -1: the file is not offered for mapping by peers (no seals guard
 * its size); its fence is mapped apart. Returns 0, -ENOENT (no such file), -EISDIR (a directory),
 * -EINVAL (another kind of file, a bad offset, size 0), -EOVERFLOW (the file holds fewer than off +
 * size bytes), or open()'s and mmap()'s errors. Undo with mc__seg_destroy().
 */
int mc__seg_map_file(const char *path, uint64_t size, uint64_t off, mc__seg_t *out);

/* mc__seg_destroy() unmaps and closes what mc__seg_create() or
 * mc__seg_map_file() made, and clears *seg; a seg whose base is NULL is
 * left alone. */
void mc__seg_destroy(mc__seg_t *seg);

/*
 * mc__shm_map() maps size bytes (the segment and its fence) of a segment
 * memfd received from a node, read-write shared, into *base, after
 * checking that the memfd is sealed against shrinking (F_SEAL_SHRINK: else
 * -EPERM) and holds at least size bytes (else -EINVAL); a forked child does
 * not inherit the mapping. It does not take fd: the caller closes it (the
 * mapping lives on). Undo with
 * munmap(*base, size).
 */
int mc__shm_map(int fd, uint64_t size, char **base);

/*
 * mc__shm_unix_addr() writes the abstract Unix address on which the node
 * whose TCP data address is tcp_addr ("127.0.0.1:7100") offers SHM_MAP:
 * "unix:@mooncake-data/127.0.0.1:7100"; a node served on a Unix socket
 * ("unix:/path") offers it on that very socket, whose address is copied.
 * Returns 0, or -ENAMETOOLONG when it does not fit out[0..n) or a Unix
 * socket name.
 */
int mc__shm_unix_addr(const char *tcp_addr, char *out, size_t n);

/*
 * mc__addr_is_local() returns 1 when the address string names this host
 * (any Unix address; a loopback address, the unspecified address, or one of
 * its interfaces' addresses), else 0 (also for unparsable ones). It reads
 * the interface list (getifaddrs(), a local netlink query) on each call.
 */
int mc__addr_is_local(const char *addr);

#endif /* MC_SHM_H */
