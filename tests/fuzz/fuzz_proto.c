/*
 * fuzz_proto.c - libFuzzer target for every decoder of the wire codec
 * (core/src/wire/proto.c). Build and run it with tests/fuzz/run.sh.
 *
 * Each input is read two ways:
 *  1. As a stream of frames, the way a connection reads them: mc__hdr_decode()
 *     on the front, then the body per the operation's request or response
 *     format (the header's MC__F_RESPONSE flag says which), then the nested
 *     structure its raw field carries (stat, replica set, listing), then the
 *     next frame.
 *  2. As a selector byte and a body: data[0] >> 1 picks an operation of the
 *     table (or, one past the last, a format using every character), and
 *     data[0] & 1 its request or response format; the rest is decoded with
 *     that format and also, whatever the operation, with
 *     mc__take_stat(), mc__take_replicas() and mc__take_list(), and with
 *     the put requests' own decoders (mc__take_put_start/commit()), which
 *     must agree with mc__unpack() of their formats.
 *
 * Beyond "no crash, no read outside the input" (AddressSanitizer and UBSan
 * watch that), every successful decode is checked: a one-call decode and a
 * field-by-field decode agree, re-encoding gives back exactly the input bytes
 * (the encoding is canonical), and decoding that again gives the same values.
 * A failed take leaves its cursor where it was. Any broken check aborts.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/proto.h"
#include "../unit/proto_fields.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define MAX_REPLICAS 8
/* A format with every character, listed in proto_fields.h. */
#define ALL_CHARS "bhuqisk*"

static int same_bytes(const mc__wbuf_t *w, const char *p, size_t n)
{
    return w->err == 0 && w->len == n && (!n || !memcmp(w->p, p, n));
}

/* Decodes body[0..len) per fmt in one call and field by field; on success
 * re-encodes and decodes again. Returns the decoder's result. */
static int check_fields(const char *fmt, const char *body, size_t len, fields_t *out)
{
    fields_t chain;

    memset(out, 0, sizeof(*out));
    memset(&chain, 0, sizeof(chain));
    int rc = unpack_fields(body, len, fmt, out);
    CHECK(rc != -ENOSYS); /* a format of the table missing from proto_fields.h */
    CHECK(rc == 0 || rc == -EBADMSG || rc == -EINVAL);
    CHECK(unpack_chain(body, len, fmt, &chain) == rc);
    if (rc)
        return rc;
    CHECK(fields_diff(fmt, out, &chain) == -1);
    for (int i = 0; fmt[i]; i++)
        if (strchr("sk*", fmt[i]))
            CHECK(out->p[i] >= body && out->l[i] <= len && out->p[i] + out->l[i] <= body + len);

    mc__wbuf_t w = {0};
    fields_t again;
    memset(&again, 0, sizeof(again));
    CHECK(pack_fields(&w, fmt, out) == 0);
    CHECK(same_bytes(&w, body, len));
    CHECK(unpack_fields(w.p, w.len, fmt, &again) == 0);
    CHECK(fields_diff(fmt, out, &again) == -1);
    free(w.p);
    return 0;
}

#define STAT_BYTES 92 /* a stat on the wire (proto.h) */

/* mc__take_stat() with its checks. */
static int take_stat(const char **p, size_t *n)
{
    const char *p0 = *p;
    size_t n0 = *n;
    mc_stat_t st;

    int rc = mc__take_stat(p, n, &st);
    if (rc) {
        CHECK(rc == -EBADMSG && *p == p0 && *n == n0 && n0 < STAT_BYTES);
        return rc;
    }
    CHECK(*p == p0 + STAT_BYTES && *n == n0 - STAT_BYTES);
    mc__wbuf_t w = {0};
    CHECK(mc__pack_stat(&w, &st) == 0);
    CHECK(same_bytes(&w, p0, STAT_BYTES));
    free(w.p);
    return 0;
}

/* mc__take_replicas() with its checks: the result re-encodes to the bytes
 * it consumed, and every extent is sane. */
static int take_replicas(const char **p, size_t *n, int max)
{
    const char *p0 = *p;
    size_t n0 = *n;
    mc__wire_replica_t r[MAX_REPLICAS];

    int rc = mc__take_replicas(p, n, max ? r : NULL, max);
    if (rc < 0) {
        CHECK(rc == -EBADMSG && *p == p0 && *n == n0);
        return rc;
    }
    CHECK(rc <= max && *p >= p0 && *p - p0 == (ptrdiff_t)(n0 - *n));
    mc__wbuf_t w = {0};
    mc__pack(&w, "u", (unsigned)rc);
    for (int i = 0; i < rc; i++) {
        CHECK(r[i].addr >= p0 && r[i].addr + r[i].addr_len <= *p);
        CHECK(r[i].rdma >= r[i].addr + r[i].addr_len && r[i].rdma + r[i].rdma_len <= *p);
        mc__pack_replica(&w, r[i].seg, r[i].epoch, r[i].addr, r[i].addr_len, r[i].rdma,
                         r[i].rdma_len, r[i].next);
        uint64_t total = 0;
        for (uint32_t e = 0; e < r[i].next; e++) {
            uint64_t off, len;
            mc__wire_extent(&r[i], e, &off, &len);
            /* A hole (offset MC__WIRE_HOLE) has no end in a segment. */
            uint64_t end_from = off == MC__WIRE_HOLE ? 0 : off;
            CHECK(len <= UINT64_MAX - end_from && len <= UINT64_MAX - total);
            total += len;
            mc__pack_extent(&w, off, len);
        }
    }
    CHECK(same_bytes(&w, p0, n0 - *n));
    free(w.p);
    return rc;
}

/* mc__take_list() with its checks: the listing re-encodes to the input. */
static int take_list(const char *p, size_t n)
{
    static mc_list_t marker; /* *out must stay untouched on error */
    mc_list_t *l = &marker;

    int rc = mc__take_list(p, n, &l);
    if (rc < 0) {
        CHECK((rc == -EBADMSG || rc == -ENOMEM) && l == &marker);
        return rc;
    }
    CHECK((size_t)rc == l->n && (l->more == 0 || l->more == 1));
    for (size_t i = 0; i < l->n; i++) {
        const mc_list_entry_t *e = &l->entries[i];
        CHECK(e->klen >= 1 && e->klen <= MC_KEY_MAX && e->key[e->klen] == '\0');
        CHECK(strlen(e->key) == e->klen && (e->is_prefix == 0 || e->is_prefix == 1));
    }
    CHECK(l->n ? l->next == l->entries[l->n - 1].key && l->next_len == l->entries[l->n - 1].klen
               : !l->next && !l->next_len);
    mc__wbuf_t w = {0};
    CHECK(mc__pack_list(&w, l) == 0);
    CHECK(same_bytes(&w, p, n));
    free(w.p);
    mc_list_free(l);
    return rc;
}

/* mc__take_rec() with its checks: a record it accepts re-encodes to the
 * input. */
static void take_rec(const char *p, size_t n)
{
    mc__rec_t r;
    if (mc__take_rec(p, n, &r) < 0)
        return;
    CHECK(r.klen >= 1 && r.klen <= MC_KEY_MAX);
    mc__wbuf_t w = {0};
    CHECK(mc__pack_rec_head(&w, &r) == 0);
    mc__wire_replica_t wr = {.next = r.next, .ext = r.ext};
    for (uint32_t i = 0; i < r.next; i++) {
        uint64_t off, len;
        mc__wire_extent(&wr, i, &off, &len);
        CHECK(mc__pack_extent(&w, off, len) == 0);
    }
    CHECK(same_bytes(&w, p, n));
    free(w.p);
}

/* A PUT_RENEW answer: each put's status and, renewed, its replica set. */
static void take_renewals(const char *p, size_t n)
{
    mc__wire_replica_t r[MAX_REPLICAS];

    while (n) {
        int64_t st;
        const char *rs, *p0 = p;
        size_t rl, n0 = n;
        if (mc__take_renewal(&p, &n, &st, &rs, &rl, r, MAX_REPLICAS) < 0) {
            CHECK(p == p0 && n == n0);
            return;
        }
        CHECK(n < n0 && rs >= p0 && rs + rl == p && (st == 0 || rl == 0));
        if (st == 0)
            CHECK(take_replicas(&rs, &rl, MAX_REPLICAS) >= 0 && rl == 0);
    }
}

/* A sequence of s fields (RECORDS_REPORT's records, RECORDS_TAKE's
 * notices), each checked by one(). */
static void each_s(const char *p, size_t n, void (*one)(const char *, size_t))
{
    while (n) {
        const char *e, *rest;
        uint32_t el, rl;
        if (mc__unpack(p, n, "s*", &e, &el, &rest, &rl) < 0)
            return;
        one(e, el);
        p = rest;
        n = rl;
    }
}

/* A notice: b kind, q version, and a record for a put. */
static void take_note(const char *p, size_t n)
{
    uint8_t kind;
    uint64_t id;
    const char *rec;
    uint32_t len;
    if (mc__unpack(p, n, "bqs", &kind, &id, &rec, &len) == 0)
        take_rec(rec, len);
}

/* Decodes the structure a response's raw field carries, as a client would:
 * all of it, nothing left over. */
static void check_nested(uint16_t op, const char *p, size_t n)
{
    switch (op) {
    case MC__OP_PUT_START:
    case MC__OP_PUT_GROW:
        take_replicas(&p, &n, MAX_REPLICAS);
        break;
    case MC__OP_GET_REPLICAS:
        if (take_stat(&p, &n) == 0)
            take_replicas(&p, &n, MAX_REPLICAS);
        break;
    case MC__OP_PUT_COMMIT:
    case MC__OP_STAT:
    case MC__OP_LOOKUP:
        take_stat(&p, &n);
        break;
    case MC__OP_LIST:
        take_list(p, n);
        break;
    case MC__OP_RECORDS_TAKE:
        each_s(p, n, take_note);
        break;
    case MC__OP_PUT_RENEW:
        take_renewals(p, n);
        break;
    default: /* READ: plain bytes */
        break;
    }
}

/* The put requests' own decoders: the same verdict as mc__unpack() with
 * their formats, and what they accept re-encodes to the input. */
static void check_put_requests(const char *body, size_t len)
{
    fields_t f;
    mc__put_start_rq_t s;
    mc__put_commit_rq_t c;
    mc__wbuf_t w = {0};

    int rc = mc__take_put_start(body, len, &s);
    CHECK(rc == unpack_fields(body, len, "kquuuuqisuuuq", &f));
    if (rc == 0) {
        CHECK(mc__pack_put_start(&w, &s) == 0 && same_bytes(&w, body, len));
        w.len = 0;
    }
    rc = mc__take_put_commit(body, len, &c);
    CHECK(rc == unpack_fields(body, len, "qkquui", &f));
    if (rc == 0)
        CHECK(mc__pack_put_commit(&w, &c) == 0 && same_bytes(&w, body, len));
    free(w.p);
}

/* Checks one frame's body against its operation's format. */
static void check_frame(const mc__hdr_t *h, const char *body, size_t len)
{
    int response = (h->flags & MC__F_RESPONSE) != 0;
    const char *fmt = mc__op_format(h->op, response);
    fields_t f;

    CHECK(fmt != NULL); /* mc__hdr_decode() accepted the op */
    if (response && h->status < 0)
        return; /* an error response has no body to decode */
    if (check_fields(fmt, body, len, &f) == 0 && response) {
        size_t last = strlen(fmt);
        if (last && fmt[last - 1] == '*')
            check_nested(h->op, f.p[last - 1], f.l[last - 1]);
    } else if (h->op == MC__OP_RECORDS_REPORT && check_fields(fmt, body, len, &f) == 0) {
        each_s(f.p[3], f.l[3], take_rec);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = (const char *)data;

    /* 1. A stream of frames. */
    const char *p = in;
    size_t n = size;
    for (;;) {
        mc__hdr_t h;
        int rc = mc__hdr_decode(p, n, &h);
        CHECK(rc == 0 || rc == -EAGAIN || rc == -EPROTO || rc == -EBADMSG || rc == -EMSGSIZE);
        if (rc == -EAGAIN) {
            CHECK(n < MC__PROTO_HDR_SIZE);
            break;
        }
        unsigned char again[MC__PROTO_HDR_SIZE];
        mc__hdr_encode(again, &h);
        CHECK(!memcmp(again, p, MC__PROTO_HDR_SIZE)); /* every field survives */
        if (rc)
            break; /* the connection would be closed */
        CHECK(h.len <= MC__PROTO_MAX_BODY);
        if (n - MC__PROTO_HDR_SIZE < h.len)
            break; /* waiting for the rest of the body */
        check_frame(&h, p + MC__PROTO_HDR_SIZE, h.len);
        p += MC__PROTO_HDR_SIZE + h.len;
        n -= MC__PROTO_HDR_SIZE + h.len;
    }

    /* 2. A selector byte and a body. */
    if (size < 1)
        return 0;
    size_t pick = (size_t)(data[0] >> 1) % (NROWS + 1);
    int response = data[0] & 1;
    const char *body = in + 1;
    size_t len = size - 1;
    fields_t f;

    if (pick == NROWS) {
        check_fields(ALL_CHARS, body, len, &f); /* the characters no operation uses */
    } else {
        const struct row *r = &table[pick];
        const char *fmt = response ? r->resp : r->req;
        size_t last = strlen(fmt);

        CHECK(!strcmp(mc__op_format(r->code, response), fmt));
        if (check_fields(fmt, body, len, &f) == 0 && response && last && fmt[last - 1] == '*')
            check_nested(r->code, f.p[last - 1], f.l[last - 1]);
    }

    p = body;
    n = len;
    take_stat(&p, &n);
    p = body;
    n = len;
    take_replicas(&p, &n, MAX_REPLICAS);
    p = body;
    n = len;
    take_replicas(&p, &n, 0);
    take_list(body, len);
    check_put_requests(body, len);
    return 0;
}
