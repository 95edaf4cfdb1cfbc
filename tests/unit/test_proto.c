/*
 * test_proto.c - unit tests for the wire codec (core/src/wire/proto.c).
 *
 * Frame headers (exact bytes, every error); the request and response format
 * of every operation in the table, driven from MC__PROTO_OPS itself: each
 * field gets a distinctive value, the body is packed, compared with an
 * independent little-endian encoding written here, unpacked in one call and
 * field by field, and cut at every byte offset and padded with trailing
 * bytes; bad keys; the nested stat, replica set and listing; the output
 * buffer's growth, its size limit and its allocation failures.
 *
 * Decoders are always handed a heap copy of exactly the bytes under test, so
 * that AddressSanitizer sees any read past the end.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wire/proto.h"
#include "proto_fields.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

/* ---- helpers ---- */

/* A heap copy of b[0..n) (at least one byte allocated, none readable past
 * n under ASan). */
static char *dup_bytes(const void *b, size_t n)
{
    char *p = malloc(n ? n : 1);
    assert_non_null(p);
    if (n)
        memcpy(p, b, n);
    return p;
}

/* An expected encoding, written byte by byte without the codec. */
typedef struct ref {
    unsigned char *b;
    size_t n, cap;
} ref_t;

static void ref_byte(ref_t *r, unsigned char c)
{
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 256;
        r->b = realloc(r->b, r->cap);
        assert_non_null(r->b);
    }
    r->b[r->n++] = c;
}

static void ref_le(ref_t *r, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        ref_byte(r, (unsigned char)(v >> (8 * i)));
}

static void ref_bytes(ref_t *r, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ref_byte(r, ((const unsigned char *)p)[i]);
}

/* Encodes f per fmt; returns the offset where a trailing `*` starts, or -1. */
static long ref_fields(ref_t *r, const char *fmt, const fields_t *f)
{
    long star = -1;
    for (int i = 0; fmt[i]; i++) {
        switch (fmt[i]) {
        case 'b':
            ref_le(r, f->b[i], 1);
            break;
        case 'h':
            ref_le(r, f->h[i], 2);
            break;
        case 'u':
            ref_le(r, f->u[i], 4);
            break;
        case 'q':
            ref_le(r, f->q[i], 8);
            break;
        case 'i':
            ref_le(r, (uint64_t)f->i[i], 8);
            break;
        case 's':
        case 'k':
            ref_le(r, f->l[i], 4);
            ref_bytes(r, f->p[i], f->l[i]);
            break;
        case '*':
            star = (long)r->n;
            ref_bytes(r, f->p[i], f->l[i]);
            break;
        default:
            fail_msg("unknown format character %c", fmt[i]);
        }
    }
    return star;
}

/* Backing store for the byte fields of fill(). */
static char arena[FIELDS_MAX][64];

/* Gives every field of fmt a distinctive value: high bits set (so a sign or
 * byte-order slip shows), different per position, and bytes fields holding
 * NUL and 0xff (except keys, which may not hold NUL). */
static void fill(const char *fmt, fields_t *f)
{
    memset(f, 0, sizeof(*f));
    for (int i = 0; fmt[i]; i++) {
        f->b[i] = (uint8_t)(0xa0 + i);
        f->h[i] = (uint16_t)(0xb1c2 + i);
        f->u[i] = 0xc3d4e5f6u + (uint32_t)i;
        f->q[i] = 0xf7e6d5c4b3a29180ull + (uint64_t)i;
        f->i[i] = INT64_MIN + 0x0102030405060708ll + i;
        char *a = arena[i];
        if (fmt[i] == 'k') {
            f->l[i] = (uint32_t)snprintf(a, sizeof(arena[i]), "dir/key-%d/\xc3\xa9\xff", i);
        } else {
            f->l[i] = (uint32_t)(3 + i);
            for (uint32_t j = 0; j < f->l[i]; j++)
                a[j] = (char)(j == 0 ? 0 : j == 1 ? 0xff : 'a' + i + (int)j);
        }
        f->p[i] = a;
    }
}

/* Packs one field of f (position i) with a one-character format. */
static int pack_one(mc__wbuf_t *w, const fields_t *f, const char *fmt, int i)
{
    char one[2] = {fmt[i], '\0'};
    switch (fmt[i]) {
    case 'b':
        return mc__pack(w, one, (unsigned)f->b[i]);
    case 'h':
        return mc__pack(w, one, (unsigned)f->h[i]);
    case 'u':
        return mc__pack(w, one, (unsigned)f->u[i]);
    case 'q':
        return mc__pack(w, one, f->q[i]);
    case 'i':
        return mc__pack(w, one, f->i[i]);
    default:
        return mc__pack(w, one, (const void *)f->p[i], f->l[i]);
    }
}

/* ---- headers ---- */

static void test_hdr_round_trip(void **state)
{
    mc__hdr_t h = {.magic = MC__PROTO_MAGIC,
                   .version = MC__PROTO_VERSION,
                   .op = MC__OP_PUT_START,
                   .id = 0x0102030405060708ull,
                   .len = 0x00a1b2c3,
                   .flags = MC__F_RESPONSE,
                   .status = -ENOSPC};
    unsigned char buf[MC__PROTO_HDR_SIZE + 1];
    /* clang-format off */
    const unsigned char want[MC__PROTO_HDR_SIZE] = {
        'M', 'C', 'K', '1',           /* magic */
        1, 0,                         /* version */
        20, 0,                        /* op */
        8, 7, 6, 5, 4, 3, 2, 1,       /* id */
        0xc3, 0xb2, 0xa1, 0,          /* len */
        1, 0,                         /* flags */
        (unsigned char)-ENOSPC, 0xff, /* status */
    };
    /* clang-format on */

    memset(buf, 0xee, sizeof(buf));
    mc__hdr_encode(buf, &h);
    assert_memory_equal(buf, want, sizeof(want));
    assert_int_equal(buf[MC__PROTO_HDR_SIZE], 0xee); /* wrote 24 bytes, no more */

    mc__hdr_t d;
    memset(&d, 0, sizeof(d));
    char *copy = dup_bytes(buf, MC__PROTO_HDR_SIZE);
    assert_int_equal(mc__hdr_decode(copy, MC__PROTO_HDR_SIZE, &d), 0);
    assert_int_equal(d.magic, h.magic);
    assert_int_equal(d.version, h.version);
    assert_int_equal(d.op, h.op);
    assert_int_equal(d.id, h.id);
    assert_int_equal(d.len, h.len);
    assert_int_equal(d.flags, h.flags);
    assert_int_equal(d.status, -ENOSPC);
    free(copy);

    /* Extra bytes after the header (the body) are not the header's business. */
    assert_int_equal(mc__hdr_decode(buf, sizeof(buf), &d), 0);
}

/* A valid header for the error cases to spoil. */
static void good_hdr(unsigned char *buf)
{
    mc__hdr_t h = {.magic = MC__PROTO_MAGIC,
                   .version = MC__PROTO_VERSION,
                   .op = MC__OP_PING,
                   .id = 7,
                   .len = 0};
    mc__hdr_encode(buf, &h);
}

static void test_hdr_short_is_eagain(void **state)
{
    unsigned char buf[MC__PROTO_HDR_SIZE];
    good_hdr(buf);
    for (size_t n = 0; n < MC__PROTO_HDR_SIZE; n++) {
        mc__hdr_t d = {.id = 42};
        char *copy = dup_bytes(buf, n);
        assert_int_equal(mc__hdr_decode(copy, n, &d), -EAGAIN);
        assert_int_equal(d.id, 42); /* untouched */
        free(copy);
    }
}

static void test_hdr_bad_magic_or_version(void **state)
{
    unsigned char buf[MC__PROTO_HDR_SIZE];
    mc__hdr_t d;

    for (int i = 0; i < 4; i++) {
        good_hdr(buf);
        buf[i] ^= 0x20; /* "mCK1", "McK1", ... */
        assert_int_equal(mc__hdr_decode(buf, sizeof(buf), &d), -EPROTO);
    }
    const uint16_t versions[] = {0, 2, 0x100, 0xffff};
    for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
        good_hdr(buf);
        buf[4] = (unsigned char)versions[i];
        buf[5] = (unsigned char)(versions[i] >> 8);
        assert_int_equal(mc__hdr_decode(buf, sizeof(buf), &d), -EPROTO);
        assert_int_equal(d.version, versions[i]);
    }
}

/* Every one of the 65536 codes: known exactly when the table has it. */
static void test_hdr_every_op_code(void **state)
{
    unsigned char buf[MC__PROTO_HDR_SIZE];
    size_t known = 0;

    for (uint32_t op = 0; op <= 0xffff; op++) {
        const struct row *r = NULL;
        for (size_t i = 0; i < NROWS; i++)
            if (table[i].code == op)
                r = &table[i];
        mc__hdr_t h = {.magic = MC__PROTO_MAGIC, .version = MC__PROTO_VERSION, .op = (uint16_t)op};
        mc__hdr_t d;
        mc__hdr_encode(buf, &h);
        int rc = mc__hdr_decode(buf, sizeof(buf), &d);
        assert_int_equal(d.op, op); /* filled even when refused */
        if (r) {
            known++;
            assert_int_equal(rc, 0);
            assert_string_equal(mc__op_name((uint16_t)op), r->name);
            assert_string_equal(mc__op_format((uint16_t)op, 0), r->req);
            assert_string_equal(mc__op_format((uint16_t)op, 1), r->resp);
        } else {
            assert_int_equal(rc, -EBADMSG);
            assert_string_equal(mc__op_name((uint16_t)op), "?");
            assert_null(mc__op_format((uint16_t)op, 0));
            assert_null(mc__op_format((uint16_t)op, 1));
        }
    }
    assert_int_equal(known, NROWS);
}

static void test_hdr_body_limit(void **state)
{
    unsigned char buf[MC__PROTO_HDR_SIZE];
    mc__hdr_t h = {.magic = MC__PROTO_MAGIC, .version = MC__PROTO_VERSION, .op = MC__OP_WRITE};
    mc__hdr_t d;

    h.len = MC__PROTO_MAX_BODY;
    mc__hdr_encode(buf, &h);
    assert_int_equal(mc__hdr_decode(buf, sizeof(buf), &d), 0);
    assert_int_equal(d.len, MC__PROTO_MAX_BODY);

    const uint32_t over[] = {MC__PROTO_MAX_BODY + 1, 0x80000000u, UINT32_MAX};
    for (size_t i = 0; i < sizeof(over) / sizeof(over[0]); i++) {
        h.len = over[i];
        mc__hdr_encode(buf, &h);
        assert_int_equal(mc__hdr_decode(buf, sizeof(buf), &d), -EMSGSIZE);
        assert_int_equal(d.len, over[i]);
    }
}

/* ---- the field codec, every format of the table ---- */

/* Round trip, exact bytes, truncation at every offset and trailing bytes for
 * one format. */
static void check_format(const char *what, const char *fmt)
{
    fields_t in, out, chain;
    ref_t want = {0};
    mc__wbuf_t w = {0}, w1 = {0};

    fill(fmt, &in);
    long star = ref_fields(&want, fmt, &in);

    /* One call, and one call per field, both give the expected bytes. */
    int rc = pack_fields(&w, fmt, &in);
    if (rc == -ENOSYS)
        fail_msg("%s: format \"%s\" is missing from tests/unit/proto_fields.h", what, fmt);
    assert_int_equal(rc, 0);
    for (int i = 0; fmt[i]; i++)
        assert_int_equal(pack_one(&w1, &in, fmt, i), 0);
    assert_int_equal(w.len, want.n);
    assert_int_equal(w1.len, want.n);
    if (want.n) {
        assert_memory_equal(w.p, want.b, want.n);
        assert_memory_equal(w1.p, want.b, want.n);
    }

    /* Decoded in one call and field by field, the values come back, and the
     * byte fields point into the body. */
    char *body = dup_bytes(want.b, want.n);
    memset(&out, 0, sizeof(out));
    memset(&chain, 0, sizeof(chain));
    assert_int_equal(unpack_fields(body, want.n, fmt, &out), 0);
    assert_int_equal(unpack_chain(body, want.n, fmt, &chain), 0);
    assert_int_equal(fields_diff(fmt, &in, &out), -1);
    assert_int_equal(fields_diff(fmt, &in, &chain), -1);
    for (int i = 0; fmt[i]; i++) {
        if (strchr("sk*", fmt[i])) {
            assert_true(out.p[i] >= body && out.p[i] + out.l[i] <= body + want.n);
        }
    }
    free(body);

    /* Cut short anywhere before a trailing `*`: -EBADMSG, never a read past
     * the cut (the copy is exactly that long). Inside the `*`: a shorter
     * rest. */
    for (size_t cut = 0; cut < want.n; cut++) {
        char *part = dup_bytes(want.b, cut);
        int expect = star >= 0 && cut >= (size_t)star ? 0 : -EBADMSG;
        if (unpack_fields(part, cut, fmt, &out) != expect)
            fail_msg("%s \"%s\": cut at %zu of %zu: want %d", what, fmt, cut, want.n, expect);
        assert_int_equal(unpack_chain(part, cut, fmt, &chain), expect);
        free(part);
    }

    /* Trailing bytes: refused, unless a `*` takes them. */
    for (size_t extra = 1; extra <= 9; extra += 8) {
        char *more = malloc(want.n + extra);
        assert_non_null(more);
        if (want.n)
            memcpy(more, want.b, want.n);
        memset(more + want.n, 0x5a, extra);
        rc = unpack_fields(more, want.n + extra, fmt, &out);
        if (star >= 0) {
            assert_int_equal(rc, 0);
            assert_int_equal(out.l[strlen(fmt) - 1], in.l[strlen(fmt) - 1] + extra);
        } else {
            assert_int_equal(rc, -EBADMSG);
            assert_int_equal(unpack_chain(more, want.n + extra, fmt, &chain), -EBADMSG);
        }
        free(more);
    }

    free(want.b);
    free(w.p);
    free(w1.p);
}

static void test_every_op_round_trip(void **state)
{
    for (size_t i = 0; i < NROWS; i++) {
        check_format(table[i].name, table[i].req);
        check_format(table[i].name, table[i].resp);
    }
    check_format("all characters", "bhuqisk*");
}

/* b h u take unsigned ints: only the field's width goes out. */
static void test_pack_truncates_small_ints(void **state)
{
    mc__wbuf_t w = {0};
    assert_int_equal(mc__pack(&w, "bhu", 0x1ffu, 0x12345u, 0xffffffffu), 0);
    const unsigned char want[] = {0xff, 0x45, 0x23, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(w.len, sizeof(want));
    assert_memory_equal(w.p, want, sizeof(want));
    free(w.p);
}

static void test_unpack_null_outputs_skip(void **state)
{
    mc__wbuf_t w = {0};
    assert_int_equal(mc__pack(&w, "qsk*", (uint64_t)1, "ab", (uint32_t)2, "key", (uint32_t)3,
                              "rest", (uint32_t)4),
                     0);
    assert_int_equal(mc__unpack(w.p, w.len, "qsk*", NULL, NULL, NULL, NULL, NULL, NULL, NULL), 0);
    free(w.p);
}

static void test_bad_format(void **state)
{
    mc__wbuf_t w = {0};
    const char body[8] = {0};
    uint32_t u;
    const char *p;
    uint32_t l;

    assert_int_equal(mc__unpack(body, 4, "x", &u), -EBADMSG);
    assert_int_equal(mc__unpack(body, 8, "*u", &p, &l, &u), -EBADMSG);
    assert_int_equal(mc__pack(&w, "x", 1u), -EINVAL);
    free(w.p);
    memset(&w, 0, sizeof(w));
    assert_int_equal(mc__pack(&w, "*u", "ab", (uint32_t)2, 1u), -EINVAL);
    assert_int_equal(w.len, 0);
    free(w.p);
}

/* Zero-length bytes decode to a pointer into the body, not NULL. */
static void test_empty_bytes(void **state)
{
    mc__wbuf_t w = {0};
    const char *p = NULL, *r = NULL;
    uint32_t l = 1, rl = 1;

    assert_int_equal(mc__pack(&w, "s*", NULL, (uint32_t)0, NULL, (uint32_t)0), 0);
    assert_int_equal(w.len, 4);
    assert_int_equal(mc__unpack(w.p, w.len, "s*", &p, &l, &r, &rl), 0);
    assert_int_equal(l, 0);
    assert_int_equal(rl, 0);
    assert_ptr_equal(p, w.p + 4);
    assert_ptr_equal(r, w.p + 4);
    free(w.p);
}

/* Found by the fuzzer: re-encoding an empty raw field into a fresh buffer
 * computed NULL + 0, and so did decoding the NULL body that left. */
static void test_pack_nothing_into_empty_wbuf(void **state)
{
    mc__wbuf_t w = {0};

    assert_int_equal(mc__pack(&w, "*", NULL, (uint32_t)0), 0);
    assert_int_equal(mc__pack(&w, "*", "", (uint32_t)0), 0);
    assert_int_equal(mc__pack(&w, ""), 0);
    assert_int_equal(w.len, 0);
    assert_int_equal(w.err, 0);

    /* ... and decoding that empty body, which may be NULL. */
    const char *p = "x";
    uint32_t l = 1;
    assert_int_equal(mc__unpack(w.p, w.len, "*", &p, &l), 0);
    assert_int_equal(l, 0);
    assert_int_equal(mc__unpack(NULL, 0, ""), 0);
    assert_int_equal(mc__unpack(NULL, 0, "u", &l), -EBADMSG);
    free(w.p);
}

/* ---- keys ---- */

/* Every `k` of every format, replaced by each bad key: -EINVAL on decode. */
static void test_bad_keys_rejected(void **state)
{
    static char long_key[MC_KEY_MAX + 1];
    memset(long_key, 'x', sizeof(long_key));
    const struct {
        const char *p;
        uint32_t l;
        int pack_err;
    } bad[] = {
        {"", 0, -EINVAL},
        {"a\0b", 3, -EINVAL},
        {"\0", 1, -EINVAL},
        {"abc\0", 4, -EINVAL},
        {long_key, MC_KEY_MAX + 1, -ENAMETOOLONG},
    };
    size_t formats = 0;

    for (size_t r = 0; r < 2 * NROWS; r++) {
        const char *fmt = r % 2 ? table[r / 2].resp : table[r / 2].req;
        for (int k = 0; fmt[k]; k++) {
            if (fmt[k] != 'k')
                continue;
            formats++;
            for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
                fields_t f, out;
                ref_t body = {0};
                mc__wbuf_t w = {0};

                fill(fmt, &f);
                f.p[k] = bad[b].p;
                f.l[k] = bad[b].l;
                ref_fields(&body, fmt, &f);
                char *copy = dup_bytes(body.b, body.n);
                assert_int_equal(unpack_fields(copy, body.n, fmt, &out), -EINVAL);
                assert_int_equal(unpack_chain(copy, body.n, fmt, &out), -EINVAL);
                free(copy);
                free(body.b);

                /* The encoder will not send one either, and the error sticks. */
                assert_int_equal(pack_fields(&w, fmt, &f), bad[b].pack_err);
                size_t len = w.len;
                assert_int_equal(mc__pack(&w, "u", 1u), bad[b].pack_err);
                assert_int_equal(w.len, len);
                free(w.p);
            }
        }
    }
    assert_true(formats >= 8); /* the table's keyed requests were all seen */
}

/* The longest key and unusual bytes are fine. */
static void test_good_keys_accepted(void **state)
{
    static char max_key[MC_KEY_MAX];
    memset(max_key, '/', sizeof(max_key));
    mc__wbuf_t w = {0};
    const char *p;
    uint32_t l;

    assert_int_equal(mc__pack(&w, "k", max_key, (uint32_t)MC_KEY_MAX), 0);
    assert_int_equal(mc__unpack(w.p, w.len, "k", &p, &l), 0);
    assert_int_equal(l, MC_KEY_MAX);
    w.len = 0;
    assert_int_equal(mc__pack(&w, "k", "\xff\x01 .", (uint32_t)4), 0);
    assert_int_equal(mc__unpack(w.p, w.len, "k", &p, &l), 0);
    assert_int_equal(l, 4);
    free(w.p);
}

/* ---- stat ---- */

static const mc_stat_t some_stat = {
    .size = 0x8000000000000001ull,
    .version = 0x0123456789abcdefull,
    .mtime_ns = -1234567890123456789ll,
    .mode = 04755,
    .replicas = 3,
    .flags = MC_STAT_LEASED | MC_STAT_HARD_PIN,
    .uid = 1001,
    .gid = MC_OWNER_NONE,
    .type = MC_TYPE_CHR,
    .nlink = 7,
    .atime_ns = -5,
    .ctime_ns = 1700000000123456789ll,
    .rdev = 0x0102030405060708ull,
    .ino = 0x1112131415161718ull,
    .alloc = 0x2122232425262728ull,
};

static void assert_stat_equal(const mc_stat_t *a, const mc_stat_t *b)
{
    assert_int_equal(a->size, b->size);
    assert_int_equal(a->version, b->version);
    assert_int_equal(a->mtime_ns, b->mtime_ns);
    assert_int_equal(a->mode, b->mode);
    assert_int_equal(a->replicas, b->replicas);
    assert_int_equal(a->flags, b->flags);
    assert_int_equal(a->uid, b->uid);
    assert_int_equal(a->gid, b->gid);
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->nlink, b->nlink);
    assert_int_equal(a->atime_ns, b->atime_ns);
    assert_int_equal(a->ctime_ns, b->ctime_ns);
    assert_int_equal(a->rdev, b->rdev);
    assert_int_equal(a->ino, b->ino);
    assert_int_equal(a->alloc, b->alloc);
}

static void test_stat_round_trip(void **state)
{
    mc__wbuf_t w = {0};
    ref_t want = {0};

    assert_int_equal(mc__pack_stat(&w, &some_stat), 0);
    ref_le(&want, some_stat.size, 8);
    ref_le(&want, some_stat.version, 8);
    ref_le(&want, (uint64_t)some_stat.mtime_ns, 8);
    ref_le(&want, some_stat.mode, 4);
    ref_le(&want, some_stat.replicas, 4);
    ref_le(&want, some_stat.flags, 4);
    ref_le(&want, some_stat.uid, 4);
    ref_le(&want, some_stat.gid, 4);
    ref_le(&want, some_stat.type, 4);
    ref_le(&want, some_stat.nlink, 4);
    ref_le(&want, (uint64_t)some_stat.atime_ns, 8);
    ref_le(&want, (uint64_t)some_stat.ctime_ns, 8);
    ref_le(&want, some_stat.rdev, 8);
    ref_le(&want, some_stat.ino, 8);
    ref_le(&want, some_stat.alloc, 8);
    assert_int_equal(w.len, 92);
    assert_memory_equal(w.p, want.b, 92);
    assert_int_equal(mc__pack(&w, "u", 0xabcdu), 0); /* something after it */

    char *body = dup_bytes(w.p, w.len);
    const char *p = body;
    size_t n = w.len;
    mc_stat_t st;
    assert_int_equal(mc__take_stat(&p, &n, &st), 0);
    assert_stat_equal(&st, &some_stat);
    assert_ptr_equal(p, body + 92);
    assert_int_equal(n, 4);

    for (size_t cut = 0; cut < 92; cut++) {
        char *part = dup_bytes(body, cut);
        p = part;
        n = cut;
        assert_int_equal(mc__take_stat(&p, &n, &st), -EBADMSG);
        assert_ptr_equal(p, part);
        assert_int_equal(n, cut);
        free(part);
    }
    free(body);
    free(want.b);
    free(w.p);
}

/* ---- replica sets ---- */

typedef struct rep {
    uint32_t seg;
    const char *addr;
    const char *rdma; /* the node's RDMA record: opaque bytes */
    uint32_t next;
    uint64_t off[4], len[4];
} rep_t;

/* The encoder a server uses: proto.h has none for replica sets. */
static void pack_replicas(mc__wbuf_t *w, const rep_t *r, uint32_t count)
{
    mc__pack(w, "u", (unsigned)count);
    for (uint32_t i = 0; i < count; i++) {
        mc__pack(w, "ussu", (unsigned)r[i].seg, r[i].addr, (uint32_t)strlen(r[i].addr), r[i].rdma,
                 (uint32_t)strlen(r[i].rdma), (unsigned)r[i].next);
        for (uint32_t e = 0; e < r[i].next; e++)
            mc__pack(w, "qq", r[i].off[e], r[i].len[e]);
    }
}

static void make_replicas(rep_t *r, uint32_t count)
{
    static const char *addrs[] = {"", "10.0.0.1:7000", "[::1]:7001", "shm:node-3"};
    static const char *rdmas[] = {"", "MCRR\x01", "", "any opaque record \xff"};
    for (uint32_t i = 0; i < count; i++) {
        r[i].seg = 0x80000000u + i;
        r[i].addr = addrs[i % 4];
        r[i].rdma = rdmas[(i / 2) % 4];
        r[i].next = i % 4;
        for (uint32_t e = 0; e < r[i].next; e++) {
            r[i].off[e] = ((uint64_t)i << 40) + e * 0x100000ull;
            r[i].len[e] = 4096ull * (e + 1) + i;
        }
    }
}

static void check_replicas(uint32_t count)
{
    rep_t r[8];
    mc__wire_replica_t got[8];
    mc__wbuf_t w = {0};

    make_replicas(r, count);
    pack_replicas(&w, r, count);
    assert_int_equal(mc__pack(&w, "q", (uint64_t)99), 0); /* what follows stays */
    char *body = dup_bytes(w.p, w.len);
    const char *p = body;
    size_t n = w.len;

    assert_int_equal(mc__take_replicas(&p, &n, got, 8), (int)count);
    assert_int_equal(n, 8);
    assert_ptr_equal(p, body + w.len - 8);
    for (uint32_t i = 0; i < count; i++) {
        assert_int_equal(got[i].seg, r[i].seg);
        assert_int_equal(got[i].addr_len, strlen(r[i].addr));
        assert_memory_equal(got[i].addr, r[i].addr, got[i].addr_len);
        assert_int_equal(got[i].rdma_len, strlen(r[i].rdma));
        assert_memory_equal(got[i].rdma, r[i].rdma, got[i].rdma_len);
        assert_int_equal(got[i].next, r[i].next);
        for (uint32_t e = 0; e < r[i].next; e++) {
            uint64_t off, len;
            mc__wire_extent(&got[i], e, &off, &len);
            assert_int_equal(off, r[i].off[e]);
            assert_int_equal(len, r[i].len[e]);
        }
        uint64_t off = 1, len = 1;
        mc__wire_extent(&got[i], got[i].next, &off, &len); /* out of range */
        assert_int_equal(off, 0);
        assert_int_equal(len, 0);
    }

    /* max is enforced. */
    if (count) {
        p = body;
        n = w.len;
        assert_int_equal(mc__take_replicas(&p, &n, got, (int)count - 1), -EBADMSG);
        assert_ptr_equal(p, body);
    }

    /* Cut anywhere inside the set: -EBADMSG, nothing advanced. */
    for (size_t cut = 0; cut < w.len - 8; cut++) {
        char *part = dup_bytes(body, cut);
        p = part;
        n = cut;
        assert_int_equal(mc__take_replicas(&p, &n, got, 8), -EBADMSG);
        assert_ptr_equal(p, part);
        assert_int_equal(n, cut);
        free(part);
    }
    free(body);
    free(w.p);
}

static void test_replicas_round_trip(void **state)
{
    check_replicas(0);
    check_replicas(1);
    check_replicas(8);

    /* No replicas and max 0: out is never touched. */
    mc__wbuf_t w = {0};
    mc__pack(&w, "u", 0u);
    const char *p = w.p;
    size_t n = w.len;
    assert_int_equal(mc__take_replicas(&p, &n, NULL, 0), 0);
    assert_int_equal(n, 0);
    p = w.p;
    n = w.len;
    assert_int_equal(mc__take_replicas(&p, &n, NULL, -1), 0);
    free(w.p);
}

/* Counts that promise more than the bytes hold are refused up front. */
static void test_replicas_lying_counts(void **state)
{
    mc__wire_replica_t got[4];
    mc__wbuf_t w = {0};
    const char *p;
    size_t n;

    /* Replica counts past max, or past what the bytes could hold. */
    const uint32_t counts[] = {0xffffffffu, 0x80000000u, 1000u, 2u};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        memset(&w, 0, sizeof(w));
        mc__pack(&w, "uuuuu", (unsigned)counts[i], 1u, 0u, 0u, 0u);
        p = w.p;
        n = w.len;
        assert_int_equal(mc__take_replicas(&p, &n, got, INT_MAX), -EBADMSG);
        free(w.p);
    }

    /* Extent counts whose byte size would wrap 32 bits, or just too many. */
    const uint32_t nexts[] = {0x10000000u, 0xffffffffu, 2u};
    for (size_t i = 0; i < sizeof(nexts) / sizeof(nexts[0]); i++) {
        memset(&w, 0, sizeof(w));
        mc__pack(&w, "uussuqq", 1u, 5u, "a", (uint32_t)1, "", (uint32_t)0, (unsigned)nexts[i],
                 (uint64_t)0, (uint64_t)1);
        char *body = dup_bytes(w.p, w.len);
        p = body;
        n = w.len;
        assert_int_equal(mc__take_replicas(&p, &n, got, 4), -EBADMSG);
        free(body);
        free(w.p);
    }

    /* An address longer than what is left. */
    memset(&w, 0, sizeof(w));
    mc__pack(&w, "uuuuu", 1u, 5u, 0x7fffffffu, 0u, 0u);
    p = w.p;
    n = w.len;
    assert_int_equal(mc__take_replicas(&p, &n, got, 4), -EBADMSG);
    free(w.p);

    /* An RDMA record longer than what is left. */
    memset(&w, 0, sizeof(w));
    mc__pack(&w, "uusuu", 1u, 5u, "a", (uint32_t)1, 0x7fffffffu, 0u);
    p = w.p;
    n = w.len;
    assert_int_equal(mc__take_replicas(&p, &n, got, 4), -EBADMSG);
    free(w.p);
}

static void test_replicas_extent_overflow(void **state)
{
    mc__wire_replica_t got[1];
    const struct {
        uint64_t off1, len1, off2, len2;
        int ok;
    } cases[] = {
        {UINT64_MAX - 1, 1, 0, 0, 1},      /* ends exactly at 2^64 - 1 */
        {UINT64_MAX - 1, 2, 0, 0, 0},      /* offset + length wraps */
        {UINT64_MAX, 1, 0, 0, 1},          /* a hole (MC__WIRE_HOLE) */
        {UINT64_MAX, UINT64_MAX, 0, 1, 0}, /* a hole: lengths add up past 2^64 */
        {1, UINT64_MAX, 0, 0, 0},          /* offset + length wraps */
        {0, UINT64_MAX, 0, 0, 1},          /* one huge extent */
        {0, UINT64_MAX, 0, 1, 0},          /* lengths add up past 2^64 */
        {0, 1ull << 63, 0, 1ull << 63, 0}, /* lengths add up to 2^64 */
        {0, 1ull << 62, 1ull << 62, 3, 1}, /* fine */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        mc__wbuf_t w = {0};
        mc__pack(&w, "uussuqqqq", 1u, 1u, "", (uint32_t)0, "", (uint32_t)0, 2u, cases[i].off1,
                 cases[i].len1, cases[i].off2, cases[i].len2);
        const char *p = w.p;
        size_t n = w.len;
        int rc = mc__take_replicas(&p, &n, got, 1);
        if (cases[i].ok) {
            assert_int_equal(rc, 1);
        } else {
            assert_int_equal(rc, -EBADMSG);
        }
        free(w.p);
    }
}

/* A GET_REPLICAS response as a client reads it: lease length, stat, then
 * replica set, then nothing. */
static void test_get_replicas_body(void **state)
{
    rep_t r[2];
    mc__wire_replica_t got[4];
    mc__wbuf_t w = {0};
    mc_stat_t st;

    make_replicas(r, 2);
    mc__pack(&w, "q", (uint64_t)5000);
    mc__pack_stat(&w, &some_stat);
    pack_replicas(&w, r, 2);
    assert_int_equal(w.err, 0);

    const char *rest;
    uint32_t rlen;
    uint64_t lease;
    assert_int_equal(
        mc__unpack(w.p, w.len, mc__op_format(MC__OP_GET_REPLICAS, 1), &lease, &rest, &rlen), 0);
    assert_int_equal(lease, 5000);
    const char *p = rest;
    size_t n = rlen;
    assert_int_equal(mc__take_stat(&p, &n, &st), 0);
    assert_stat_equal(&st, &some_stat);
    assert_int_equal(mc__take_replicas(&p, &n, got, 4), 2);
    assert_int_equal(n, 0);
    free(w.p);
}

/* ---- listings ---- */

static mc_list_t *make_list(size_t n, int more)
{
    mc_list_t *l = calloc(1, sizeof(*l));
    assert_non_null(l);
    l->n = n;
    l->more = more;
    l->entries = n ? calloc(n, sizeof(*l->entries)) : NULL;
    for (size_t i = 0; i < n; i++) {
        mc_list_entry_t *e = &l->entries[i];
        char buf[64];
        e->is_prefix = i % 3 == 1;
        int len = snprintf(buf, sizeof(buf), e->is_prefix ? "dir/%zu/" : "dir/file-%zu", i);
        e->key = strdup(buf);
        assert_non_null(e->key);
        e->klen = (size_t)len;
        if (!e->is_prefix || i % 2) { /* prefixes carry their marker's stat, or zeros */
            e->st = some_stat;
            e->st.size = i;
            e->st.version = 1000 + i;
        }
    }
    if (n) {
        l->next = l->entries[n - 1].key;
        l->next_len = l->entries[n - 1].klen;
    }
    return l;
}

static void assert_list_equal(const mc_list_t *a, const mc_list_t *b)
{
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->more, b->more);
    for (size_t i = 0; i < a->n; i++) {
        assert_int_equal(a->entries[i].klen, b->entries[i].klen);
        assert_memory_equal(a->entries[i].key, b->entries[i].key, a->entries[i].klen);
        assert_int_equal(b->entries[i].key[b->entries[i].klen], '\0');
        assert_int_equal(a->entries[i].is_prefix, b->entries[i].is_prefix);
        assert_stat_equal(&a->entries[i].st, &b->entries[i].st);
    }
    if (b->n) {
        assert_ptr_equal(b->next, b->entries[b->n - 1].key);
        assert_int_equal(b->next_len, b->entries[b->n - 1].klen);
    } else {
        assert_null(b->next);
        assert_int_equal(b->next_len, 0);
    }
}

static void check_list(size_t count, int more)
{
    mc_list_t *l = make_list(count, more), *got = NULL;
    mc__wbuf_t w = {0};

    assert_int_equal(mc__pack_list(&w, l), 0);
    char *body = dup_bytes(w.p, w.len);
    assert_int_equal(mc__take_list(body, w.len, &got), (int)count);
    assert_list_equal(l, got);
    mc_list_free(got); /* the library's own free: the layouts agree */

    for (size_t cut = 0; cut < w.len; cut++) {
        char *part = dup_bytes(body, cut);
        got = (mc_list_t *)0x1;
        assert_int_equal(mc__take_list(part, cut, &got), -EBADMSG);
        assert_ptr_equal(got, (mc_list_t *)0x1); /* untouched */
        free(part);
    }
    char *longer = malloc(w.len + 1);
    assert_non_null(longer);
    memcpy(longer, body, w.len);
    longer[w.len] = 0;
    assert_int_equal(mc__take_list(longer, w.len + 1, &got), -EBADMSG);
    free(longer);

    free(body);
    free(w.p);
    mc_list_free(l);
}

static void assert_same_wbuf(const mc__wbuf_t *a, const mc__wbuf_t *b)
{
    assert_int_equal(a->len, b->len);
    assert_memory_equal(a->p, b->p, a->len);
}

/* A heap copy of w's bytes and one byte more, to cut at every length up
 * to one past the end (a trailing byte). */
static char *with_tail(const mc__wbuf_t *w)
{
    char *c = malloc(w->len + 1);
    assert_non_null(c);
    memcpy(c, w->p, w->len);
    c[w->len] = 'x';
    return c;
}

/* The put requests' own codecs write the bytes their formats do, and
 * decode (and refuse) what mc__unpack() does, cut at every length. */
static void check_typed_start(const mc__put_start_rq_t *rq)
{
    mc__wbuf_t a = {0}, b = {0};
    int ra = mc__pack(&a, "kquuuuqisuuuq", rq->key, rq->klen, rq->capacity, rq->flags, rq->mode,
                      rq->replicas, rq->pin, rq->pin_ttl_ms, rq->mtime_ns, rq->pref, rq->plen,
                      rq->uid, rq->gid, rq->type, rq->rdev);
    int rb = mc__pack_put_start(&b, rq);
    assert_int_equal(ra, rb);
    if (ra == 0) {
        assert_same_wbuf(&a, &b);
        for (size_t cut = 0; cut <= a.len + 1; cut++) {
            char *c = with_tail(&a);
            mc__put_start_rq_t t;
            const char *k, *pf;
            uint32_t kl, f, m, r, pn, pl, uid, gid, ty;
            uint64_t cap, ttl, rdev;
            int64_t mt;
            int ua = mc__unpack(c, cut, "kquuuuqisuuuq", &k, &kl, &cap, &f, &m, &r, &pn, &ttl, &mt,
                                &pf, &pl, &uid, &gid, &ty, &rdev);
            int ub = mc__take_put_start(c, cut, &t);
            assert_int_equal(ua, ub);
            if (ub == 0) {
                assert_int_equal(t.klen, rq->klen);
                assert_memory_equal(t.key, rq->key, rq->klen);
                assert_int_equal(t.capacity, rq->capacity);
                assert_int_equal(t.flags, rq->flags);
                assert_int_equal(t.mode, rq->mode);
                assert_int_equal(t.replicas, rq->replicas);
                assert_int_equal(t.pin, rq->pin);
                assert_int_equal(t.pin_ttl_ms, rq->pin_ttl_ms);
                assert_int_equal(t.mtime_ns, rq->mtime_ns);
                assert_int_equal(t.plen, rq->plen);
                assert_memory_equal(t.pref, rq->pref, rq->plen);
                assert_int_equal(t.uid, rq->uid);
                assert_int_equal(t.gid, rq->gid);
                assert_int_equal(t.type, rq->type);
                assert_int_equal(t.rdev, rq->rdev);
            }
            free(c);
        }
    }
    free(a.p);
    free(b.p);
}

static void check_typed_commit(const mc__put_commit_rq_t *rq)
{
    mc__wbuf_t a = {0}, b = {0};
    int ra = mc__pack(&a, "qkquui", rq->id, rq->key, rq->klen, rq->size, rq->what, rq->mode,
                      rq->mtime_ns);
    int rb = mc__pack_put_commit(&b, rq);
    assert_int_equal(ra, rb);
    if (ra == 0) {
        assert_same_wbuf(&a, &b);
        for (size_t cut = 0; cut <= a.len + 1; cut++) {
            char *c = with_tail(&a);
            mc__put_commit_rq_t t;
            uint64_t id, size;
            const char *k;
            uint32_t kl, wh, m;
            int64_t mt;
            int ua = mc__unpack(c, cut, "qkquui", &id, &k, &kl, &size, &wh, &m, &mt);
            int ub = mc__take_put_commit(c, cut, &t);
            assert_int_equal(ua, ub);
            if (ub == 0) {
                assert_int_equal(t.id, rq->id);
                assert_int_equal(t.klen, rq->klen);
                assert_memory_equal(t.key, rq->key, rq->klen);
                assert_int_equal(t.size, rq->size);
                assert_int_equal(t.what, rq->what);
                assert_int_equal(t.mode, rq->mode);
                assert_int_equal(t.mtime_ns, rq->mtime_ns);
            }
            free(c);
        }
    }
    free(a.p);
    free(b.p);
}

static void test_put_requests_typed(void **state)
{
    (void)state;
    static char longkey[MC_KEY_MAX + 1];
    memset(longkey, 'k', sizeof(longkey));
    const struct {
        const char *key;
        uint32_t klen;
    } keys[] = {{"a/b", 3},
                {"x", 1},
                {"", 0},
                {"a\0b", 3},
                {longkey, MC_KEY_MAX},
                {longkey, MC_KEY_MAX + 1}};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        mc__put_start_rq_t s = {.key = keys[i].key,
                                .klen = keys[i].klen,
                                .capacity = 0x0102030405060708ull,
                                .flags = 3,
                                .mode = 0644,
                                .replicas = 2,
                                .pin = 1,
                                .pin_ttl_ms = 7000,
                                .mtime_ns = -5,
                                .pref = i % 2 ? "10.0.0.1:7000" : "",
                                .plen = i % 2 ? 13 : 0,
                                .uid = 1000 + (uint32_t)i,
                                .gid = MC_OWNER_NONE,
                                .type = MC_TYPE_BLK,
                                .rdev = 0x0807060504030201ull};
        check_typed_start(&s);
        mc__put_commit_rq_t c = {.id = 0xfedcba9876543210ull,
                                 .key = keys[i].key,
                                 .klen = keys[i].klen,
                                 .size = 1024,
                                 .what = MC_META_MODE | MC_META_MTIME,
                                 .mode = 0600,
                                 .mtime_ns = 1700000000000000000ll};
        check_typed_commit(&c);
    }
}

/* A replica's head and extents written by their own encoders are the
 * bytes "u" + "ussu" + "qq"... would be, and decode back. */
static void test_replica_encoder(void **state)
{
    (void)state;
    mc__wbuf_t a = {0}, b = {0};
    mc__pack(&a, "uussuqqqq", 1u, 9u, "h:1", 3u, "rd", 2u, 2u, (uint64_t)4096, (uint64_t)100,
             (uint64_t)8192, (uint64_t)24);
    mc__pack(&b, "u", 1u);
    assert_int_equal(mc__pack_replica(&b, 9, "h:1", 3, "rd", 2, 2), 0);
    assert_int_equal(mc__pack_extent(&b, 4096, 100), 0);
    assert_int_equal(mc__pack_extent(&b, 8192, 24), 0);
    assert_same_wbuf(&a, &b);
    const char *p = b.p;
    size_t n = b.len;
    mc__wire_replica_t r;
    assert_int_equal(mc__take_replicas(&p, &n, &r, 1), 1);
    assert_int_equal(n, 0);
    uint64_t off, len;
    mc__wire_extent(&r, 1, &off, &len);
    assert_int_equal(off, 8192);
    assert_int_equal(len, 24);
    free(a.p);
    free(b.p);
}

static void test_list_round_trip(void **state)
{
    check_list(0, 0);
    check_list(0, 1);
    check_list(1, 0);
    check_list(7, 1);
    check_list(100, 0);
}

/* The layout of one listing entry, written without the codec. */
static void ref_entry(ref_t *r, const char *key, uint32_t klen, unsigned is_prefix)
{
    ref_le(r, klen, 4);
    ref_bytes(r, key, klen);
    ref_le(r, is_prefix, 1);
    for (int i = 0; i < 36; i++)
        ref_byte(r, 0);
}

static void test_list_malformed(void **state)
{
    mc_list_t *got = NULL;
    const struct {
        const char *what;
        uint32_t count, more;
        const char *key;
        uint32_t klen;
        unsigned is_prefix;
    } cases[] = {
        {"more is 2", 1, 2, "a", 1, 0},
        {"is_prefix is 2", 1, 0, "a", 1, 2},
        {"empty key", 1, 0, "", 0, 0},
        {"NUL in key", 1, 0, "a\0b", 3, 0},
        {"count past the bytes", 2, 0, "a", 1, 0},
        {"count 2^32 - 1", 0xffffffffu, 0, "a", 1, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ref_t r = {0};
        ref_le(&r, cases[i].count, 4);
        ref_le(&r, cases[i].more, 4);
        ref_entry(&r, cases[i].key, cases[i].klen, cases[i].is_prefix);
        char *body = dup_bytes(r.b, r.n);
        if (mc__take_list(body, r.n, &got) != -EBADMSG)
            fail_msg("listing with %s was accepted", cases[i].what);
        free(body);
        free(r.b);
    }

    /* A key of MC_KEY_MAX + 1 bytes. */
    static char long_key[MC_KEY_MAX + 1];
    memset(long_key, 'k', sizeof(long_key));
    ref_t r = {0};
    ref_le(&r, 1, 4);
    ref_le(&r, 0, 4);
    ref_entry(&r, long_key, sizeof(long_key), 0);
    assert_int_equal(mc__take_list((const char *)r.b, r.n, &got), -EBADMSG);
    free(r.b);

    /* The encoder refuses a bad key too. */
    mc_list_t *l = make_list(2, 0);
    free((char *)l->entries[1].key);
    l->entries[1].key = strdup("");
    l->entries[1].klen = 0;
    mc__wbuf_t w = {0};
    assert_int_equal(mc__pack_list(&w, l), -EINVAL);
    free(w.p);
    mc_list_free(l);
}

/* ---- the output buffer ---- */

static void test_wbuf_limit(void **state)
{
    char *big = calloc(1, MC__PROTO_MAX_BODY + 1);
    assert_non_null(big);
    mc__wbuf_t w = {0};

    /* Exactly the limit fits. */
    assert_int_equal(mc__pack(&w, "*", big, (uint32_t)MC__PROTO_MAX_BODY), 0);
    assert_int_equal(w.len, MC__PROTO_MAX_BODY);
    assert_true(w.cap <= MC__PROTO_MAX_BODY);
    /* One byte more does not, and the error sticks. */
    assert_int_equal(mc__pack(&w, "b", 1u), -EMSGSIZE);
    assert_int_equal(w.err, -EMSGSIZE);
    assert_int_equal(w.len, MC__PROTO_MAX_BODY);
    assert_int_equal(mc__pack(&w, ""), -EMSGSIZE);
    assert_int_equal(mc__pack(&w, "s", NULL, (uint32_t)0), -EMSGSIZE);
    free(w.p);

    /* One field over the limit on its own. */
    memset(&w, 0, sizeof(w));
    assert_int_equal(mc__pack(&w, "*", big, (uint32_t)MC__PROTO_MAX_BODY + 1), -EMSGSIZE);
    assert_int_equal(w.len, 0);
    free(w.p);

    /* A length prefix counts too: s of MAX - 4 fits, of MAX - 3 does not. */
    memset(&w, 0, sizeof(w));
    assert_int_equal(mc__pack(&w, "s", big, (uint32_t)MC__PROTO_MAX_BODY - 4), 0);
    free(w.p);
    memset(&w, 0, sizeof(w));
    assert_int_equal(mc__pack(&w, "s", big, (uint32_t)MC__PROTO_MAX_BODY - 3), -EMSGSIZE);
    assert_int_equal(w.len, 0); /* not even the length went out */
    free(w.p);

    /* A listing that would not fit. */
    memset(&w, 0, sizeof(w));
    assert_int_equal(mc__pack(&w, "*", big, (uint32_t)MC__PROTO_MAX_BODY - 10), 0);
    mc_list_t *l = make_list(1, 0);
    assert_int_equal(mc__pack_list(&w, l), -EMSGSIZE);
    assert_int_equal(mc__pack_stat(&w, &some_stat), -EMSGSIZE);
    mc_list_free(l);
    free(w.p);
    free(big);
}

/* Capacity grows geometrically: few reallocations, little slack. */
static void test_wbuf_grows_geometrically(void **state)
{
    mc__wbuf_t w = {0};
    size_t changes = 0, cap = 0;

    for (unsigned i = 0; i < 1000000; i++) {
        assert_int_equal(mc__pack(&w, "b", i), 0);
        if (w.cap != cap) {
            changes++;
            cap = w.cap;
        }
        assert_true(w.cap >= w.len);
    }
    assert_int_equal(w.len, 1000000);
    assert_true(changes <= 20);
    assert_true(w.cap < 2 * w.len + 256);
    for (unsigned i = 0; i < 1000000; i++)
        assert_int_equal((unsigned char)w.p[i], i & 0xff);
    free(w.p);
}

/*
 * Allocation failures, made real with an address-space limit in a fresh
 * process (this binary run again with ENOMEM_CHILD as its argument): a fresh
 * heap holds no free memory left over from other tests, and a fixed mmap
 * threshold keeps glibc from serving large blocks from the heap.
 */
#define ENOMEM_CHILD "--enomem-child"

static int enomem_child(void)
{
    mallopt(M_MMAP_THRESHOLD, 64 << 10);

    mc__wbuf_t w = {0};
    mc__wbuf_t lw = {0};
    mc_list_t *got = NULL;

    /* Listings prepared before the limit: one whose entry array cannot be
     * allocated, one whose keys run out of memory half way. */
    mc_list_t *many = make_list(120000, 0); /* under MC__PROTO_MAX_BODY packed */
    mc_list_t *wide = calloc(1, sizeof(*wide));
    static char key[MC_KEY_MAX];
    if (!wide)
        return 10;
    wide->n = 3000;
    wide->entries = calloc(wide->n, sizeof(*wide->entries));
    if (!wide->entries)
        return 10;
    for (size_t i = 0; i < wide->n; i++) {
        memset(key, 'a' + (int)(i % 26), sizeof(key));
        wide->entries[i].key = strndup(key, sizeof(key));
        wide->entries[i].klen = sizeof(key);
    }
    if (mc__pack_list(&lw, many) || mc__pack_list(&w, wide))
        return 11;

    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages;
    if (!f || fscanf(f, "%lu", &pages) != 1)
        return 12;
    fclose(f);
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = pages * (unsigned long)sysconf(_SC_PAGESIZE) + (4u << 20);
    if (setrlimit(RLIMIT_AS, &rl))
        return 13;

    if (mc__take_list(lw.p, lw.len, &got) != -ENOMEM)
        return 14;
    if (mc__take_list(w.p, w.len, &got) != -ENOMEM)
        return 15;

    mc__wbuf_t big = {0};
    static char chunk[1 << 20];
    int rc = 0;
    for (int i = 0; i < 16 && !rc; i++)
        rc = mc__pack(&big, "*", chunk, (uint32_t)sizeof(chunk));
    if (rc != -ENOMEM || big.err != -ENOMEM)
        return 16;
    size_t len = big.len;
    if (mc__pack(&big, "b", 1u) != -ENOMEM || big.len != len)
        return 17;
    return 0;
}

static void test_enomem(void **state)
{
    if (SANITIZED || getenv("MC_SANITIZED"))
        skip(); /* the sanitizers' shadow memory cannot live under RLIMIT_AS */
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/proc/self/exe", "test_proto", ENOMEM_CHILD, (char *)NULL);
        _exit(127);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], ENOMEM_CHILD))
        return enomem_child();

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hdr_round_trip),
        cmocka_unit_test(test_hdr_short_is_eagain),
        cmocka_unit_test(test_hdr_bad_magic_or_version),
        cmocka_unit_test(test_hdr_every_op_code),
        cmocka_unit_test(test_hdr_body_limit),
        cmocka_unit_test(test_every_op_round_trip),
        cmocka_unit_test(test_pack_truncates_small_ints),
        cmocka_unit_test(test_unpack_null_outputs_skip),
        cmocka_unit_test(test_bad_format),
        cmocka_unit_test(test_empty_bytes),
        cmocka_unit_test(test_pack_nothing_into_empty_wbuf),
        cmocka_unit_test(test_bad_keys_rejected),
        cmocka_unit_test(test_good_keys_accepted),
        cmocka_unit_test(test_stat_round_trip),
        cmocka_unit_test(test_replicas_round_trip),
        cmocka_unit_test(test_replicas_lying_counts),
        cmocka_unit_test(test_replicas_extent_overflow),
        cmocka_unit_test(test_get_replicas_body),
        cmocka_unit_test(test_put_requests_typed),
        cmocka_unit_test(test_replica_encoder),
        cmocka_unit_test(test_list_round_trip),
        cmocka_unit_test(test_list_malformed),
        cmocka_unit_test(test_wbuf_limit),
        cmocka_unit_test(test_wbuf_grows_geometrically),
        cmocka_unit_test(test_enomem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
