/*
 * shm.c - segments in sealed memfds (or in a file the caller names), their
 * mapping by co-located clients, and the addresses of the shm transport
 * (see shm.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "runtime/net.h"
#include "mooncake/mooncake.h"
#include "transport/shm.h"
#include "transport/transport.h"

#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

int mc__seg_create(uint64_t size, const char *name, mc__seg_t *out)
{
    int rc;

    if (size == 0 || size > (uint64_t)SIZE_MAX / 2 || (off_t)size < 0)
        return -EINVAL;
    uint64_t total = mc__shm_memfd_size(size);
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)total) < 0 || fcntl(fd, F_ADD_SEALS, SEALS) < 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED) {
        rc = -errno;
        close(fd);
        return rc;
    }
    out->base = p;
    out->size = size;
    out->fd = fd;
    out->fence = mc__seg_fence(p, size);
    return 0;
}

int mc__seg_map_file(const char *path, uint64_t size, uint64_t off, mc__seg_t *out)
{
    struct stat st;
    long page = sysconf(_SC_PAGESIZE);

    if (size == 0 || size > (uint64_t)SIZE_MAX || (off_t)size < 0 || (off_t)off < 0 ||
        off % (uint64_t)(page > 0 ? page : 4096))
        return -EINVAL;
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    int rc = fstat(fd, &st) < 0 ? -errno : 0;
    if (rc == 0 && !S_ISREG(st.st_mode))
        rc = -EINVAL;
    if (rc == 0 && ((uint64_t)st.st_size < off || (uint64_t)st.st_size - off < size))
        rc = -EOVERFLOW;
    void *p = MAP_FAILED, *f = MAP_FAILED;
    if (rc == 0) {
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, (off_t)off);
        if (p == MAP_FAILED)
            rc = -errno;
    }
    close(fd); /* the mapping keeps the file */
    if (rc == 0) {
        f = mmap(NULL, sizeof(mc__shm_fence_t), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (f == MAP_FAILED) {
            rc = -errno;
            munmap(p, size);
        }
    }
    if (rc < 0)
        return rc;
    out->base = p;
    out->size = size;
    out->fd = -1;
    out->fence = f;
    return 0;
}

void mc__seg_destroy(mc__seg_t *seg)
{
    if (seg->base) {
        munmap(seg->base, seg->fd >= 0 ? mc__shm_memfd_size(seg->size) : seg->size);
        if (seg->fd >= 0)
            close(seg->fd);
        else if (seg->fence)
            munmap(seg->fence, sizeof(*seg->fence));
    }
    seg->base = NULL;
    seg->size = 0;
    seg->fd = -1;
    seg->fence = NULL;
}

int mc__shm_map(int fd, uint64_t size, char **base)
{
    struct stat st;

    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK))
        return -EPERM;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (size == 0 || size > (uint64_t)SIZE_MAX || (uint64_t)st.st_size < size)
        return -EINVAL;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED)
        return -errno;
    /* A forked child gets no copy: it cannot use the store, and must not
     * write into the segment past its parent's fence slot (forkfd.h). */
    madvise(p, size, MADV_DONTFORK);
    *base = p;
    return 0;
}

int mc__shm_unix_addr(const char *tcp_addr, char *out, size_t n)
{
    struct sockaddr_un un;
    /* A node served on a Unix socket answers SHM_MAP there itself. */
    int len = strncmp(tcp_addr, "unix:", 5) == 0
                  ? snprintf(out, n, "%s", tcp_addr)
                  : snprintf(out, n, "unix:@mooncake-data/%s", tcp_addr);
    /* "unix:@" becomes the leading NUL of an abstract name. */
    if (len < 0 || (size_t)len >= n || (size_t)len - 5 > sizeof(un.sun_path))
        return -ENAMETOOLONG;
    return 0;
}

/* Whether a (non-loopback) address is one of this host's interfaces'. */
static int on_an_interface(const struct sockaddr_storage *ss)
{
    struct ifaddrs *all, *i;
    int found = 0;

    if (getifaddrs(&all) < 0)
        return 0;
    for (i = all; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != ss->ss_family)
            continue;
        if (ss->ss_family == AF_INET)
            found = ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr ==
                    ((const struct sockaddr_in *)ss)->sin_addr.s_addr;
        else
            found = !memcmp(&((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
                            &((const struct sockaddr_in6 *)ss)->sin6_addr, sizeof(struct in6_addr));
    }
    freeifaddrs(all);
    return found;
}

int mc__addr_is_local(const char *addr)
{
    mc__addr_t a;

    if (addr && strncmp(addr, "unix:", 5) == 0)
        return 1; /* a Unix socket is always on this host */
    if (!addr || mc__addr_parse(addr, -1, &a) < 0)
        return 0;
    if (a.ss.ss_family == AF_INET) {
        uint32_t ip = ntohl(((const struct sockaddr_in *)&a.ss)->sin_addr.s_addr);
        if ((ip >> 24) == 127 || ip == INADDR_ANY)
            return 1;
    } else if (a.ss.ss_family == AF_INET6) {
        const struct in6_addr *ip = &((const struct sockaddr_in6 *)&a.ss)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(ip) || IN6_IS_ADDR_UNSPECIFIED(ip) ||
            (IN6_IS_ADDR_V4MAPPED(ip) && ip->s6_addr[12] == 127))
            return 1;
    } else {
        return 0;
    }
    return on_an_interface(&a.ss);
}

int mc__shm_copy_in(mc__shm_fence_t *f, uint32_t slot, uint64_t epoch, char *at, const char *src,
                    size_t n)
{
    _Atomic uint64_t *busy = &f->busy[slot];
    atomic_store(busy, epoch); /* then the node's epoch: see shm.h */
    if (atomic_load(&f->epoch) > epoch) {
        atomic_store_explicit(busy, 0, memory_order_release);
        return -ESTALE;
    }
    if (src)
        memcpy(at, src, n);
    else
        memset(at, 0, n);
    atomic_store_explicit(busy, 0, memory_order_release); /* after the bytes */
    return 0;
}

/* ---- the shm transport (transport.h): memcpy into the mapping ---- */

const mc__transport_t mc__tp_shm = {
    .name = "shm",
    .flags = MC__TP_SYNC | MC__TP_MEM,
    .ops_stat = offsetof(mc_store_stats_t, shm_ops),
    .bytes_stat = offsetof(mc_store_stats_t, shm_bytes),
    .move = mc__tp_mem_move,
};
