/*
 * data_plane.c - the data plane: READ, WRITE and SHM_MAP on this process's
 * segments (see data_plane.h).
 *
 * Every request completes at once: the segment is memory here, so a copy
 * (WRITE) or a reply that gathers straight from it (READ) is all there is.
 * Over TCP a large WRITE's bytes need not even be copied: the connection
 * receives them straight into the segment (mc__data_plane_place()).
 */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "node/data_plane.h"
#include "runtime/log.h"
#include "runtime/rpc.h"

#define WRITE_HEAD 12 /* a WRITE's body: "uq" (segment, offset), then the bytes */

/* Finds [off, off + n) of segment seg. Returns 0 and sets *at, or the
 * status to answer the request with. */
static int find_range(const mc__data_plane_t *p, uint32_t seg, uint64_t off, uint32_t n, char **at)
{
    char *base;
    uint64_t size;
    int fd;
    if (n > MC__PROTO_CHUNK)
        return -EMSGSIZE;
    if (p->lookup(p->arg, seg, &base, &size, &fd) < 0)
        return -ENOENT;
    if (off > size || n > size - off)
        return -EINVAL;
    *at = base + off;
    return 0;
}

static int do_read(mc__data_plane_t *p, mc__conn_t *c, const mc__hdr_t *h, const char *body,
                   size_t len)
{
    uint32_t seg, n;
    uint64_t off;
    char *at;
    if (mc__unpack(body, len, "uqu", &seg, &off, &n) < 0)
        return -EBADMSG;
    int rc = find_range(p, seg, off, n, &at);
    if (rc < 0)
        return mc__rpc_reply(c, h, rc, NULL, 0);
    struct iovec iov = {at, n};
    if ((rc = mc__rpc_replyv(c, h, 0, &iov, 1, NULL, NULL)) < 0)
        return rc;
    p->bytes_read += n;
    return 0;
}

static int do_write(mc__data_plane_t *p, mc__conn_t *c, const mc__hdr_t *h, const char *body,
                    size_t len)
{
    uint32_t seg, n;
    uint64_t off;
    const char *data;
    char *at;
    if (mc__unpack(body, len, "uq*", &seg, &off, &data, &n) < 0)
        return -EBADMSG;
    int rc = find_range(p, seg, off, n, &at);
    if (rc < 0)
        return mc__rpc_reply(c, h, rc, NULL, 0);
    memcpy(at, data, n);
    p->bytes_written += n;
    return mc__rpc_reply(c, h, 0, NULL, 0);
}

char *mc__data_plane_place(mc__data_plane_t *p, const mc__hdr_t *h, const char *head, size_t *skip)
{
    uint32_t seg;
    uint64_t off;
    char *at;
    if (h->op != MC__OP_WRITE || h->len < WRITE_HEAD ||
        mc__unpack(head, WRITE_HEAD, "uq", &seg, &off) < 0 ||
        find_range(p, seg, off, h->len - WRITE_HEAD, &at) < 0)
        return NULL; /* do_write() answers it, or refuses it */
    *skip = WRITE_HEAD;
    return at;
}

int mc__data_plane_placed(mc__data_plane_t *p, mc__conn_t *c, const mc__hdr_t *h)
{
    p->bytes_written += h->len - WRITE_HEAD;
    p->bytes_placed += h->len - WRITE_HEAD;
    return mc__rpc_reply(c, h, 0, NULL, 0);
}

/* Hands a co-located client the segment's memfd: over a Unix socket only
 * (the server's shm listener), where reaching us proves the client shares
 * our host. */
static int do_shm_map(mc__data_plane_t *p, mc__conn_t *c, const mc__hdr_t *h, const char *body,
                      size_t len)
{
    uint32_t seg;
    char *base;
    uint64_t size;
    int fd = -1;
    if (mc__unpack(body, len, "u", &seg) < 0)
        return -EBADMSG;
    if (!p->shm || !mc__conn_is_unix(c))
        return mc__rpc_reply(c, h, -EOPNOTSUPP, NULL, 0);
    if (p->lookup(p->arg, seg, &base, &size, &fd) < 0)
        return mc__rpc_reply(c, h, -ENOENT, NULL, 0);
    if (fd < 0)
        return mc__rpc_reply(c, h, -EOPNOTSUPP, NULL, 0);
    char resp[8];
    mc__wbuf_t w = {.p = resp, .cap = sizeof(resp)};
    mc__pack(&w, "q", size);
    int rc = mc__rpc_reply_fd(c, h, 0, w.p, w.len, fd);
    if (rc < 0)
        return rc;
    p->shm_maps++;
    mc__log(MC__LOG_DEBUG, "%s: mapped segment %u", mc__conn_peer(c), seg);
    return 0;
}

int mc__data_plane_handle(mc__data_plane_t *p, mc__conn_t *c, const mc__hdr_t *h, const char *body,
                          size_t len)
{
    switch (h->op) {
    case MC__OP_READ:
        return do_read(p, c, h, body, len);
    case MC__OP_WRITE:
        return do_write(p, c, h, body, len);
    case MC__OP_SHM_MAP:
        return do_shm_map(p, c, h, body, len);
    default:
        return mc__rpc_reply(c, h, -EOPNOTSUPP, NULL, 0);
    }
}
