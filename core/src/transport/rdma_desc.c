/*
 * rdma_desc.c - what a peer needs to reach memory over RDMA, as bytes: the
 * descriptor of a registration (chunk addresses and rkeys) and the record a
 * node publishes (its rdma_cm listener and its segment's descriptor). Pure
 * functions, always built: the master stores records without RDMA.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "transport/rdma_i.h"

/* ---- descriptor codec ---- */

#define DESC_MAGIC 0x4452434dU /* "MCRD" little endian */
#define DESC_VERSION 1
#define DESC_HEAD 28  /* magic u32, version u16, reserved u16, size u64, chunk u64, n u32 */
#define DESC_ENTRY 12 /* addr u64, rkey u32 */

size_t mc__rdma_desc_pack(const mc__rdma_desc_t *d, void *buf, size_t cap)
{
    size_t need = DESC_HEAD + (size_t)d->n * DESC_ENTRY;
    if (need > cap)
        return need;
    unsigned char *p = buf;
    put_le(p, DESC_MAGIC, 4);
    put_le(p + 4, DESC_VERSION, 2);
    put_le(p + 6, 0, 2);
    put_le(p + 8, d->size, 8);
    put_le(p + 16, d->chunk, 8);
    put_le(p + 24, d->n, 4);
    for (uint32_t i = 0; i < d->n; i++) {
        put_le(p + DESC_HEAD + (size_t)i * DESC_ENTRY, d->c[i].addr, 8);
        put_le(p + DESC_HEAD + (size_t)i * DESC_ENTRY + 8, d->c[i].rkey, 4);
    }
    return need;
}

int mc__rdma_desc_unpack(const void *buf, size_t len, mc__rdma_desc_t **out)
{
    const unsigned char *p = buf;
    if (len < DESC_HEAD || get_le(p, 4) != DESC_MAGIC || get_le(p + 4, 2) != DESC_VERSION)
        return -EINVAL;
    uint64_t size = get_le(p + 8, 8), chunk = get_le(p + 16, 8);
    uint32_t n = (uint32_t)get_le(p + 24, 4);
    if (!size || !chunk || !n || n > MC__RDMA_DESC_MAX_CHUNKS)
        return -EINVAL;
    if (len != DESC_HEAD + (size_t)n * DESC_ENTRY)
        return -EINVAL;
    /* n must be exactly the chunks that size needs: no empty tail chunk. */
    if (size / chunk + (size % chunk != 0) != n)
        return -EINVAL;
    mc__rdma_desc_t *d = malloc(mc__rdma_desc_size(n));
    if (!d)
        return -ENOMEM;
    d->size = size;
    d->chunk = chunk;
    d->n = n;
    for (uint32_t i = 0; i < n; i++) {
        d->c[i].addr = get_le(p + DESC_HEAD + (size_t)i * DESC_ENTRY, 8);
        d->c[i].rkey = (uint32_t)get_le(p + DESC_HEAD + (size_t)i * DESC_ENTRY + 8, 4);
    }
    *out = d;
    return 0;
}

/* ---- the record a node publishes ---- */

#define RECORD_MAGIC 0x5252434dU /* "MCRR" little endian */
#define RECORD_VERSION 1
#define RECORD_HEAD 8 /* magic u32, version u16, address length u16 */

int mc__rdma_record_pack(const char *addr, const mc__rdma_desc_t *d, char **out, size_t *len)
{
    size_t alen = strlen(addr);
    if (alen > 255)
        return -EINVAL;
    size_t dlen = mc__rdma_desc_pack(d, NULL, 0);
    unsigned char *p = malloc(RECORD_HEAD + alen + dlen);
    if (!p)
        return -ENOMEM;
    put_le(p, RECORD_MAGIC, 4);
    put_le(p + 4, RECORD_VERSION, 2);
    put_le(p + 6, alen, 2);
    memcpy(p + RECORD_HEAD, addr, alen);
    mc__rdma_desc_pack(d, p + RECORD_HEAD + alen, dlen);
    *out = (char *)p;
    *len = RECORD_HEAD + alen + dlen;
    return 0;
}

int mc__rdma_record_unpack(const void *rec, size_t len, char *addr, size_t cap, mc__rdma_desc_t **d)
{
    const unsigned char *p = rec;
    if (len < RECORD_HEAD || get_le(p, 4) != RECORD_MAGIC || get_le(p + 4, 2) != RECORD_VERSION)
        return -EINVAL;
    size_t alen = get_le(p + 6, 2);
    if (!alen || alen >= cap || alen > len - RECORD_HEAD || memchr(p + RECORD_HEAD, 0, alen))
        return -EINVAL;
    int rc = mc__rdma_desc_unpack(p + RECORD_HEAD + alen, len - RECORD_HEAD - alen, d);
    if (rc < 0)
        return rc;
    memcpy(addr, p + RECORD_HEAD, alen);
    addr[alen] = '\0';
    return 0;
}
