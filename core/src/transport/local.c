/*
 * local.c - the local transport (see transport.h): pieces of a segment this
 * process can address are copied with memcpy. The shm transport (shm.c)
 * moves a mapped segment of a co-located node with the same function, its
 * writes through the segment's fence (mc__shm_copy_in()). A write into our
 * own segment is checked against its epoch as a node checks a WRITE; a
 * read, after its copy, against the segment's mount epoch, as a node checks
 * a READ (wire/proto.h, "Reads").
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "mooncake/mooncake.h"
#include "transport/shm.h"
#include "transport/transport.h"

int mc__tp_mem_move(const mc__tp_ep_t *ep, const mc__tp_piece_t *p, mc__tp_cb cb, void *arg)
{
    char *mem = ep->mem.base;
    if (p->off > ep->mem.size || p->len > ep->mem.size - p->off)
        return -EIO;
    if (!p->write) {
        memcpy(p->buf, mem + p->off, p->len);
        return mc__shm_read_ok(ep->mem.mount, p->epoch); /* after the copy: shm.h */
    }
    if (ep->mem.fence)
        return mc__shm_copy_in(ep->mem.fence, ep->mem.slot, p->epoch, mem + p->off, p->buf, p->len);
    else if (ep->mem.epoch && p->epoch && p->epoch < *ep->mem.epoch)
        return -ESTALE; /* our own segment: the check a node makes of a WRITE */
    else if (p->buf)
        memcpy(mem + p->off, p->buf, p->len);
    else
        memset(mem + p->off, 0, p->len);
    return 0;
}

const mc__transport_t mc__tp_local = {
    .name = "local",
    .flags = MC__TP_SYNC | MC__TP_MEM,
    .ops_stat = offsetof(mc_store_stats_t, local_ops),
    .bytes_stat = offsetof(mc_store_stats_t, local_bytes),
    .move = mc__tp_mem_move,
};
