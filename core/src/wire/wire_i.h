/*
 * wire_i.h - what the wire layer's files share and nothing else sees:
 * little-endian loads and stores, and the output buffer's growth.
 */
#ifndef MC_WIRE_I_H
#define MC_WIRE_I_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

#include "wire/proto.h"

/* ---- little-endian loads and stores ---- */

/* Unaligned, through memcpy (one load or store on any host), with the byte
 * order fixed by endian.h: a no-op on little-endian hosts. */
static inline uint16_t ld16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof(v));
    return le16toh(v);
}

static inline uint32_t ld32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return le32toh(v);
}

static inline uint64_t ld64(const void *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return le64toh(v);
}

static inline void st16(void *p, uint16_t v)
{
    v = htole16(v);
    memcpy(p, &v, sizeof(v));
}

static inline void st32(void *p, uint32_t v)
{
    v = htole32(v);
    memcpy(p, &v, sizeof(v));
}

static inline void st64(void *p, uint64_t v)
{
    v = htole64(v);
    memcpy(p, &v, sizeof(v));
}

/* Makes room for add more bytes at the end of w and returns where they go,
 * or NULL with w->err set (and NULL when add is 0). */
char *mc__wbuf_room(mc__wbuf_t *w, size_t add);

/* Sets w->err to err unless an error is there already. */
static inline void mc__wbuf_fail(mc__wbuf_t *w, int err)
{
    if (!w->err)
        w->err = err;
}

#endif /* MC_WIRE_I_H */
