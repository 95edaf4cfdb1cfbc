/*
 * test_proto.c - unit tests for the wire codec (core/src/wire/proto.c): its
 * framing and its field codec.
 *
 * Frame headers (exact bytes, every error); the request and response format
 * of every operation in the table, driven from MC__PROTO_OPS itself: each
 * field gets a distinctive value, the body is packed, compared with an
 * independent little-endian encoding written here, unpacked in one call and
 * field by field, and cut at every byte offset and padded with trailing
 * bytes; bad keys; the output buffer's growth, its size limit and its
 * allocation failures. The nested messages (stat, replica set, listing,
 * typed put requests) are test_proto_msgs.c; what both use is proto_ref.h.
 *
 * Decoders are always handed a heap copy of exactly the bytes under test, so
 * that AddressSanitizer sees any read past the end.
 */
#include <errno.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto_ref.h"
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
        cmocka_unit_test(test_wbuf_limit),
        cmocka_unit_test(test_wbuf_grows_geometrically),
        cmocka_unit_test(test_enomem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
