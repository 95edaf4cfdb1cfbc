/*
 * proto.c - the wire protocol's codec: frame headers, the table of
 * operations, and the nested structures (stat, replica set, record,
 * listing, put requests) carried in raw fields. The format-driven field
 * encoder and decoder they build on are in fields.c.
 *
 * Everything here is a pure function over memory: no I/O, no clock, no state
 * but const tables, so every decoder can be fuzzed (tests/fuzz/fuzz_proto.c).
 * Bytes on the wire are little-endian whatever the host; they are assembled
 * and taken apart with explicit shifts, never by casting a struct over a
 * buffer. Every decoder checks a field's length against the bytes left
 * before it touches them, and never reads outside [body, body + len).
 *
 * This file calls nothing outside the wire layer (the field codec is in
 * fields.c, the key rule and mc_list_free() in keys.c), so the fuzzer
 * builds it with those files alone.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "wire/proto.h"
#include "wire/wire_i.h"

/* Wire sizes of the nested structures. */
#define STAT_SIZE 92u      /* q q i u u u u u u u i i q q q */
#define EXTENT_SIZE 16u    /* q offset, q length */
#define REPLICA_MIN 24u    /* u seg, q epoch, u addr length, u rdma length, u extent count */
#define LIST_ENTRY_MIN 98u /* u key length, 1 key byte, b is_prefix, stat */

/* ---- the operation table ---- */

struct op_desc {
    const char *name; /* NULL: no operation has this code */
    const char *req, *resp;
};

#define OP_ROW(name, code, req, resp) [code] = {#name, req, resp},
static const struct op_desc ops[] = {MC__PROTO_OPS(OP_ROW)};
#undef OP_ROW

static const struct op_desc *op_find(uint16_t op)
{
    if (op >= sizeof(ops) / sizeof(ops[0]) || !ops[op].name)
        return NULL;
    return &ops[op];
}

/*
 * mc__op_format() returns the request (response == 0) or response format
 * string of op from the table in proto.h, or NULL when no operation has that
 * code. The string is static.
 */
const char *mc__op_format(uint16_t op, int response)
{
    const struct op_desc *d = op_find(op);
    if (!d)
        return NULL;
    return response ? d->resp : d->req;
}

/* mc__op_name() returns the static name of op ("PUT_START"), or "?" for a
 * code no operation has. */
const char *mc__op_name(uint16_t op)
{
    const struct op_desc *d = op_find(op);
    return d ? d->name : "?";
}

/* ---- frame headers ---- */

/*
 * mc__hdr_decode() decodes the header at the front of buf[0..n).
 * Layout (offsets in bytes): 0 magic u32, 4 version u16, 6 op u16, 8 id u64,
 * 16 len u32, 20 flags u16, 22 status i16. Returns 0; -EAGAIN when n is
 * short of MC__PROTO_HDR_SIZE (*h untouched); -EPROTO for a bad magic or
 * version; -EBADMSG for an operation code not in the table; -EMSGSIZE for
 * len over MC__PROTO_MAX_BODY. On those three errors *h still holds every
 * decoded field, so the caller can log what it refused. Flags are not
 * checked here.
 */
int mc__hdr_decode(const void *buf, size_t n, mc__hdr_t *h)
{
    const unsigned char *b = buf;

    if (n < MC__PROTO_HDR_SIZE)
        return -EAGAIN;
    h->magic = ld32(b);
    h->version = ld16(b + 4);
    h->op = ld16(b + 6);
    h->id = ld64(b + 8);
    h->len = ld32(b + 16);
    h->flags = ld16(b + 20);
    h->status = (int16_t)ld16(b + 22);
    if (h->magic != MC__PROTO_MAGIC || h->version != MC__PROTO_VERSION)
        return -EPROTO;
    if (!op_find(h->op))
        return -EBADMSG;
    if (h->len > MC__PROTO_MAX_BODY)
        return -EMSGSIZE;
    return 0;
}

/*
 * mc__hdr_encode() writes h into buf[0..MC__PROTO_HDR_SIZE) in the layout
 * mc__hdr_decode() reads. It copies every field as given (it does not fill
 * in the magic or version) and checks nothing.
 */
void mc__hdr_encode(void *buf, const mc__hdr_t *h)
{
    unsigned char *b = buf;

    st32(b, h->magic);
    st16(b + 4, h->version);
    st16(b + 6, h->op);
    st64(b + 8, h->id);
    st32(b + 16, h->len);
    st16(b + 20, h->flags);
    st16(b + 22, (uint16_t)h->status);
}

/* ---- stat ---- */

/* mc__pack_stat() appends st as `q size, q version, i mtime_ns, u mode,
 * u replicas, u flags, u uid, u gid, u type, u nlink, i atime_ns,
 * i ctime_ns, q rdev, q ino, q alloc` (92 bytes). Returns w->err. */
/* As mc__pack(w, "qqiuuuuuuuiiqqq", ...) of the fields, without reading a
 * format: every GET_REPLICAS, OPEN and PUT_COMMIT answer carries one. */
int mc__pack_stat(mc__wbuf_t *w, const mc_stat_t *st)
{
    char *b = mc__wbuf_room(w, STAT_SIZE);
    if (!b)
        return w->err;
    st64(b, st->size);
    st64(b + 8, st->version);
    st64(b + 16, (uint64_t)st->mtime_ns);
    st32(b + 24, st->mode);
    st32(b + 28, st->replicas);
    st32(b + 32, st->flags);
    st32(b + 36, st->uid);
    st32(b + 40, st->gid);
    st32(b + 44, st->type);
    st32(b + 48, st->nlink);
    st64(b + 52, (uint64_t)st->atime_ns);
    st64(b + 60, (uint64_t)st->ctime_ns);
    st64(b + 68, st->rdev);
    st64(b + 76, st->ino);
    st64(b + 84, st->alloc);
    return 0;
}

/*
 * mc__take_stat() decodes the 92-byte stat at the front of *p / *n into *st
 * and advances *p and *n past it. Returns 0, or -EBADMSG when fewer than 92
 * bytes are left (then *p, *n and *st are untouched).
 */
int mc__take_stat(const char **p, size_t *n, mc_stat_t *st)
{
    const char *b = *p;

    if (*n < STAT_SIZE)
        return -EBADMSG;
    st->size = ld64(b);
    st->version = ld64(b + 8);
    st->mtime_ns = (int64_t)ld64(b + 16);
    st->mode = ld32(b + 24);
    st->replicas = ld32(b + 28);
    st->flags = ld32(b + 32);
    st->uid = ld32(b + 36);
    st->gid = ld32(b + 40);
    st->type = ld32(b + 44);
    st->nlink = ld32(b + 48);
    st->atime_ns = (int64_t)ld64(b + 52);
    st->ctime_ns = (int64_t)ld64(b + 60);
    st->rdev = ld64(b + 68);
    st->ino = ld64(b + 76);
    st->alloc = ld64(b + 84);
    *p += STAT_SIZE;
    *n -= STAT_SIZE;
    return 0;
}

/* ---- replica sets ---- */

/*
 * mc__pack_replica() appends the head of one replica of a set (the count
 * goes first, as a "u"), as mc__pack(w, "uqssu", seg, epoch, addr, alen,
 * rdma, rlen, next) does, in one reservation; its next extents follow with
 * mc__pack_extent(). Both return w->err.
 */
int mc__pack_replica(mc__wbuf_t *w, uint32_t seg, uint64_t epoch, const char *addr, uint32_t alen,
                     const char *rdma, uint32_t rlen, uint32_t next)
{
    char *b = mc__wbuf_room(w, REPLICA_MIN + (size_t)alen + rlen);
    if (!b)
        return w->err;
    st32(b, seg);
    st64(b + 4, epoch);
    st32(b + 12, alen);
    if (alen)
        memcpy(b + 16, addr, alen);
    b += 16 + alen;
    st32(b, rlen);
    if (rlen)
        memcpy(b + 4, rdma, rlen);
    st32(b + 4 + rlen, next);
    return 0;
}

int mc__pack_extent(mc__wbuf_t *w, uint64_t off, uint64_t len)
{
    char *b = mc__wbuf_room(w, EXTENT_SIZE);
    if (!b)
        return w->err;
    st64(b, off);
    st64(b + 8, len);
    return 0;
}

/*
 * mc__take_replicas() decodes the replica set at the front of *p / *n
 * (`u count`, then per replica `u seg, q epoch, s address, s rdma, u extent count`, then per
 * extent `q offset, q length`) into out[0..count) and advances *p and *n past
 * it. The addresses and extents point into the input; nothing is copied.
 * Returns the count, or -EBADMSG (then *p and *n are untouched) when a field
 * runs past the end, count exceeds max (a negative max counts as 0), an
 * extent count does not fit the bytes left, an extent's offset + length
 * passes 2^64, or a replica's extent lengths add up past 2^64. out may be
 * NULL when max is 0.
 */
/* 1 if none of the n extents at b (q offset, q length each) passes 2^64 - 1
 * (a hole, offset MC__WIRE_HOLE, has no end in a segment), nor do their
 * lengths added. */
static int extents_ok(const char *b, uint32_t n)
{
    uint64_t total = 0;
    for (uint32_t e = 0; e < n; e++) {
        uint64_t off = ld64(b + e * EXTENT_SIZE), len = ld64(b + e * EXTENT_SIZE + 8);
        if (off == MC__WIRE_HOLE)
            off = 0;
        if (len > UINT64_MAX - off || len > UINT64_MAX - total)
            return 0;
        total += len;
    }
    return 1;
}

int mc__take_replicas(const char **p, size_t *n, mc__wire_replica_t *out, int max)
{
    const char *b = *p;
    size_t left = *n;

    if (left < 4)
        return -EBADMSG;
    uint32_t count = ld32(b);
    b += 4, left -= 4;
    if (count > (uint32_t)(max < 0 ? 0 : max) || count > left / REPLICA_MIN)
        return -EBADMSG;
    for (uint32_t r = 0; r < count; r++) {
        mc__wire_replica_t *o = &out[r];
        if (left < 16)
            return -EBADMSG;
        o->seg = ld32(b);
        o->epoch = ld64(b + 4);
        o->addr_len = ld32(b + 12);
        b += 16, left -= 16;
        if (o->addr_len > left)
            return -EBADMSG;
        o->addr = b;
        b += o->addr_len, left -= o->addr_len;
        if (left < 4)
            return -EBADMSG;
        o->rdma_len = ld32(b);
        b += 4, left -= 4;
        if (o->rdma_len > left)
            return -EBADMSG;
        o->rdma = b;
        b += o->rdma_len, left -= o->rdma_len;
        if (left < 4)
            return -EBADMSG;
        o->next = ld32(b);
        b += 4, left -= 4;
        if (o->next > left / EXTENT_SIZE)
            return -EBADMSG;
        o->ext = (const unsigned char *)b;
        if (!extents_ok(b, o->next))
            return -EBADMSG;
        b += (size_t)o->next * EXTENT_SIZE, left -= (size_t)o->next * EXTENT_SIZE;
    }
    *p = b;
    *n = left;
    return (int)count;
}

int mc__take_renewal(const char **p, size_t *n, int64_t *status, const char **rset, size_t *rlen,
                     mc__wire_replica_t *out, int max)
{
    const char *rest;
    uint32_t rl;

    if (mc__unpack(*p, *n, "i*", status, &rest, &rl) < 0)
        return -EBADMSG;
    *rset = rest;
    *rlen = 0;
    size_t left = rl;
    if (*status == 0 && mc__take_replicas(&rest, &left, out, max) < 0)
        return -EBADMSG;
    *rlen = rl - left;
    *p = rest;
    *n = left;
    return 0;
}

/* mc__wire_extent() reads the i-th extent of a decoded replica into *off and
 * *len; an i at or past r->next yields 0 and 0. */
void mc__wire_extent(const mc__wire_replica_t *r, uint32_t i, uint64_t *off, uint64_t *len)
{
    if (i >= r->next) {
        *off = *len = 0;
        return;
    }
    *off = ld64(r->ext + (size_t)i * EXTENT_SIZE);
    *len = ld64(r->ext + (size_t)i * EXTENT_SIZE + 8);
}

/* ---- records (a node's copy of a version's metadata) ---- */

#define REC_HEAD "qqksqiiiuuuuquuusu"

int mc__pack_rec_head(mc__wbuf_t *w, const mc__rec_t *r)
{
    /* The master's record says "none" with NULL. */
    const char *link = r->link ? r->link : "", *xattr = r->xattr ? r->xattr : "";
    return mc__pack(w, REC_HEAD, r->version, r->stamp, r->key, r->klen, link, r->linklen, r->size,
                    r->mtime_ns, r->atime_ns, r->ctime_ns, r->mode, r->uid, r->gid, r->type,
                    r->rdev, r->links, r->pin, r->want, xattr, r->xattr_len, r->next);
}

/* mc__take_rec() decodes a whole record: its head with mc__unpack(), the
 * link checked as a key when not empty, then exactly `next` extents, none
 * whose offset + length, or whose lengths added, pass 2^64 - 1. */
int mc__take_rec(const char *p, size_t n, mc__rec_t *r)
{
    const char *rest;
    uint32_t rl;
    int rc = mc__unpack(p, n, REC_HEAD "*", &r->version, &r->stamp, &r->key, &r->klen, &r->link,
                        &r->linklen, &r->size, &r->mtime_ns, &r->atime_ns, &r->ctime_ns, &r->mode,
                        &r->uid, &r->gid, &r->type, &r->rdev, &r->links, &r->pin, &r->want,
                        &r->xattr, &r->xattr_len, &r->next, &rest, &rl);
    if (rc < 0)
        return rc;
    if (r->linklen && mc_key_check(r->link, r->linklen) < 0)
        return -EINVAL;
    if (r->next != rl / EXTENT_SIZE || rl % EXTENT_SIZE || !extents_ok(rest, r->next))
        return -EBADMSG;
    r->ext = (const unsigned char *)rest;
    return 0;
}

/* ---- listings ---- */

/*
 * mc__take_list() decodes a whole listing body (`u count, u more`, then per
 * entry `s key, b is_prefix, stat`) into a new mc_list_t that the caller
 * frees with mc_list_free(). Each entry's key is its own NUL-terminated copy;
 * next / next_len name the last entry's key (NULL / 0 for no entries).
 * Returns the entry count, -ENOMEM, or -EBADMSG (*out untouched) when a
 * field runs past the end, bytes are left over, count is more than the bytes
 * could hold, more or is_prefix is not 0 or 1, or a key fails mc_key_check().
 */
int mc__take_list(const char *p, size_t n, mc_list_t **out)
{
    if (n < 8)
        return -EBADMSG;
    uint32_t count = ld32(p), more = ld32(p + 4);
    p += 8, n -= 8;
    if (more > 1 || count > n / LIST_ENTRY_MIN || count > INT_MAX)
        return -EBADMSG;

    mc_list_t *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->more = (int)more;
    if (count && !(l->entries = calloc(count, sizeof(*l->entries)))) {
        free(l);
        return -ENOMEM;
    }
    int rc = -EBADMSG;
    for (uint32_t i = 0; i < count; i++) {
        mc_list_entry_t *e = &l->entries[i];
        if (n < 4)
            goto fail;
        uint32_t klen = ld32(p);
        p += 4, n -= 4;
        if (klen > n || mc_key_check(p, klen) < 0)
            goto fail;
        char *k = malloc((size_t)klen + 1);
        if (!k) {
            rc = -ENOMEM;
            goto fail;
        }
        memcpy(k, p, klen);
        k[klen] = '\0';
        e->key = k;
        e->klen = klen;
        l->n++; /* from here mc_list_free() frees the key */
        p += klen, n -= klen;
        if (n < 1 || (unsigned char)*p > 1)
            goto fail;
        e->is_prefix = *p;
        p += 1, n -= 1;
        if (mc__take_stat(&p, &n, &e->st) < 0)
            goto fail;
    }
    if (n)
        goto fail;
    if (l->n) {
        l->next = l->entries[l->n - 1].key;
        l->next_len = l->entries[l->n - 1].klen;
    }
    *out = l;
    return (int)l->n;
fail:
    mc_list_free(l);
    return rc;
}

/*
 * mc__pack_list() appends l as a listing (see mc__take_list()); more and
 * is_prefix go out as 0 or 1. Returns w->err, which is also set to -EINVAL
 * for an entry whose key fails mc_key_check() (a listing never carries one)
 * and to -EMSGSIZE for more than UINT32_MAX entries.
 */
int mc__pack_list(mc__wbuf_t *w, const mc_list_t *l)
{
    if (l->n > UINT32_MAX)
        mc__wbuf_fail(w, -EMSGSIZE);
    mc__pack(w, "uu", (unsigned)l->n, (unsigned)(l->more != 0));
    for (size_t i = 0; i < l->n && !w->err; i++) {
        const mc_list_entry_t *e = &l->entries[i];
        if (mc_key_check(e->key, e->klen) < 0) {
            mc__wbuf_fail(w, -EINVAL);
            break;
        }
        mc__pack(w, "sb", e->key, (uint32_t)e->klen, (unsigned)(e->is_prefix != 0));
        mc__pack_stat(w, &e->st);
    }
    return w->err;
}

/* ---- the put requests ---- */

/* A field reader over a body: the first error sticks, as in mc__vunpack(). */
typedef struct rd {
    const char *p;
    size_t left;
    int err;
} rd_t;

static const char *rd_take(rd_t *r, size_t n)
{
    if (r->err || n > r->left) {
        r->err = r->err ? r->err : -EBADMSG;
        return NULL;
    }
    const char *at = r->p;
    r->p += n, r->left -= n;
    return at;
}

static uint32_t rd32(rd_t *r)
{
    const char *b = rd_take(r, 4);
    return b ? ld32(b) : 0;
}

static uint64_t rd64(rd_t *r)
{
    const char *b = rd_take(r, 8);
    return b ? ld64(b) : 0;
}

/* An "s" (key 0) or "k" (key 1) field. */
static void rd_str(rd_t *r, int key, const char **out, uint32_t *len)
{
    *len = rd32(r);
    *out = rd_take(r, *len);
    if (!r->err && key && mc_key_check(*out, *len) < 0)
        r->err = -EINVAL;
}

static int rd_end(const rd_t *r)
{
    return r->err ? r->err : r->left ? -EBADMSG : 0;
}

/* The bytes of an "s" or "k" field; a key that fails mc_key_check() sets
 * w->err as mc__vpack() does. */
static void wr_str(char **b, const char *s, uint32_t len)
{
    st32(*b, len);
    if (len)
        memcpy(*b + 4, s, len);
    *b += 4 + len;
}

static int key_err(const char *key, uint32_t klen)
{
    int rc = mc_key_check(key, klen);
    return rc < 0 ? (klen > MC_KEY_MAX ? -ENAMETOOLONG : -EINVAL) : 0;
}

int mc__pack_put_start(mc__wbuf_t *w, const mc__put_start_rq_t *rq)
{
    int rc = key_err(rq->key, rq->klen);
    if (rc < 0) {
        mc__wbuf_fail(w, rc);
        return w->err;
    }
    char *b = mc__wbuf_room(w, 4 + (size_t)rq->klen + 8 + 4 * 4 + 8 + 8 + 4 + rq->plen + 3 * 4 + 8);
    if (!b)
        return w->err;
    wr_str(&b, rq->key, rq->klen);
    st64(b, rq->capacity);
    st32(b + 8, rq->flags);
    st32(b + 12, rq->mode);
    st32(b + 16, rq->replicas);
    st32(b + 20, rq->pin);
    st64(b + 24, rq->pin_ttl_ms);
    st64(b + 32, (uint64_t)rq->mtime_ns);
    b += 40;
    wr_str(&b, rq->pref, rq->plen);
    st32(b, rq->uid);
    st32(b + 4, rq->gid);
    st32(b + 8, rq->type);
    st64(b + 12, rq->rdev);
    return 0;
}

int mc__take_put_start(const char *body, size_t len, mc__put_start_rq_t *rq)
{
    rd_t r = {body, len, 0};
    rd_str(&r, 1, &rq->key, &rq->klen);
    rq->capacity = rd64(&r);
    rq->flags = rd32(&r);
    rq->mode = rd32(&r);
    rq->replicas = rd32(&r);
    rq->pin = rd32(&r);
    rq->pin_ttl_ms = rd64(&r);
    rq->mtime_ns = (int64_t)rd64(&r);
    rd_str(&r, 0, &rq->pref, &rq->plen);
    rq->uid = rd32(&r);
    rq->gid = rd32(&r);
    rq->type = rd32(&r);
    rq->rdev = rd64(&r);
    return rd_end(&r);
}

int mc__pack_put_commit(mc__wbuf_t *w, const mc__put_commit_rq_t *rq)
{
    int rc = key_err(rq->key, rq->klen);
    if (rc < 0) {
        mc__wbuf_fail(w, rc);
        return w->err;
    }
    char *b = mc__wbuf_room(w, 8 + 4 + (size_t)rq->klen + 8 + 4 + 4 + 8);
    if (!b)
        return w->err;
    st64(b, rq->id);
    b += 8;
    wr_str(&b, rq->key, rq->klen);
    st64(b, rq->size);
    st32(b + 8, rq->what);
    st32(b + 12, rq->mode);
    st64(b + 16, (uint64_t)rq->mtime_ns);
    return 0;
}

int mc__take_put_commit(const char *body, size_t len, mc__put_commit_rq_t *rq)
{
    rd_t r = {body, len, 0};
    rq->id = rd64(&r);
    rd_str(&r, 1, &rq->key, &rq->klen);
    rq->size = rd64(&r);
    rq->what = rd32(&r);
    rq->mode = rd32(&r);
    rq->mtime_ns = (int64_t)rd64(&r);
    return rd_end(&r);
}
