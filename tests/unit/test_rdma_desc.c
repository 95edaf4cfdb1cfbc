/*
 * test_rdma_desc.c - unit tests for the RDMA segment descriptor codec
 * (core/src/transport/transport_rdma.c), which is built with or without RDMA: the
 * exact bytes of a packed descriptor, the round trip, every truncation and
 * trailing byte, and each inconsistency the decoder must refuse. Without
 * MC_HAVE_RDMA it also checks that the transport's stubs say -ENOTSUP.
 *
 * The RDMA data path itself runs in a Soft-RoCE VM: make test-rdma.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "transport/transport_rdma.h"

static mc__rdma_desc_t *make_desc(uint64_t size, uint64_t chunk)
{
    uint32_t n = (uint32_t)(size / chunk + (size % chunk != 0));
    mc__rdma_desc_t *d = calloc(1, mc__rdma_desc_size(n));
    assert_non_null(d);
    d->size = size;
    d->chunk = chunk;
    d->n = n;
    for (uint32_t i = 0; i < n; i++) {
        d->c[i].addr = 0x7f0000000000ULL + (uint64_t)i * chunk;
        d->c[i].rkey = 0x1100 + i;
    }
    return d;
}

/* A heap copy of exactly n bytes, so that ASan sees reads past the end. */
static unsigned char *copy(const unsigned char *b, size_t n)
{
    unsigned char *p = malloc(n ? n : 1);
    assert_non_null(p);
    memcpy(p, b, n);
    return p;
}

static void test_exact_bytes(void **state)
{
    mc__rdma_desc_t *d = make_desc(0x30, 0x20); /* two chunks, the last short */
    unsigned char b[64];
    assert_int_equal(mc__rdma_desc_pack(d, b, sizeof(b)), 28 + 2 * 12);
    static const unsigned char want[52] = {
        'M',  'C', 'R', 'D', 1, 0,    0, 0,                   /* magic, version, reserved */
        0x30, 0,   0,   0,   0, 0,    0, 0,                   /* size */
        0x20, 0,   0,   0,   0, 0,    0, 0,                   /* chunk */
        2,    0,   0,   0,                                    /* n */
        0,    0,   0,   0,   0, 0x7f, 0, 0, 0x00, 0x11, 0, 0, /* chunk 0 */
        0x20, 0,   0,   0,   0, 0x7f, 0, 0, 0x01, 0x11, 0, 0, /* chunk 1 */
    };
    assert_memory_equal(b, want, sizeof(want));
    free(d);
}

static void test_round_trip(void **state)
{
    mc__rdma_desc_t *d = make_desc(96ULL << 20, 16ULL << 20);
    size_t need = mc__rdma_desc_pack(d, NULL, 0);
    assert_int_equal(need, 28 + 6 * 12);
    unsigned char *b = malloc(need);
    assert_int_equal(mc__rdma_desc_pack(d, b, need), need);
    mc__rdma_desc_t *e = NULL;
    assert_int_equal(mc__rdma_desc_unpack(b, need, &e), 0);
    assert_int_equal(e->size, d->size);
    assert_int_equal(e->chunk, d->chunk);
    assert_int_equal(e->n, d->n);
    for (uint32_t i = 0; i < d->n; i++) {
        assert_int_equal(e->c[i].addr, d->c[i].addr);
        assert_int_equal(e->c[i].rkey, d->c[i].rkey);
    }
    free(e);
    free(b);
    free(d);
}

static void test_pack_too_small_writes_nothing(void **state)
{
    mc__rdma_desc_t *d = make_desc(100, 10);
    unsigned char b[64];
    memset(b, 0xee, sizeof(b));
    assert_int_equal(mc__rdma_desc_pack(d, b, sizeof(b)), 28 + 10 * 12);
    for (size_t i = 0; i < sizeof(b); i++)
        assert_int_equal(b[i], 0xee);
    free(d);
}

static void test_cut_and_padded(void **state)
{
    mc__rdma_desc_t *d = make_desc(5000, 1024);
    unsigned char b[256];
    size_t n = mc__rdma_desc_pack(d, b, sizeof(b) - 1);
    for (size_t cut = 0; cut <= n + 1; cut++) {
        if (cut == n)
            continue;
        unsigned char *p = copy(b, cut);
        mc__rdma_desc_t *e = NULL;
        assert_int_equal(mc__rdma_desc_unpack(p, cut, &e), -EINVAL);
        assert_null(e);
        free(p);
    }
    free(d);
}

/* Packs d, overwrites bytes [at, at + bytes) with v (little endian) and
 * checks that the decoder refuses the result. */
static void refuse(const mc__rdma_desc_t *d, size_t at, uint64_t v, int bytes)
{
    unsigned char b[256];
    size_t n = mc__rdma_desc_pack(d, b, sizeof(b));
    for (int i = 0; i < bytes; i++)
        b[at + (size_t)i] = (unsigned char)(v >> (8 * i));
    unsigned char *p = copy(b, n);
    mc__rdma_desc_t *e = NULL;
    assert_int_equal(mc__rdma_desc_unpack(p, n, &e), -EINVAL);
    free(p);
}

static void test_inconsistent(void **state)
{
    mc__rdma_desc_t *d = make_desc(5000, 1024); /* 5 chunks */
    refuse(d, 0, 'X', 1);                       /* magic */
    refuse(d, 4, 2, 2);                         /* version */
    refuse(d, 8, 0, 8);                         /* size 0 */
    refuse(d, 16, 0, 8);                        /* chunk 0 */
    refuse(d, 8, 4096, 8);                      /* size needs 4 chunks, not 5 */
    refuse(d, 8, 5121, 8);                      /* size needs 6 chunks */
    refuse(d, 16, 900, 8);                      /* chunk makes 5000 six chunks */
    free(d);
    /* n above the limit, with a length to match: still refused */
    uint32_t n = MC__RDMA_DESC_MAX_CHUNKS + 1;
    size_t len = 28 + (size_t)n * 12;
    unsigned char *b = calloc(1, len);
    memcpy(b, "MCRD\x01\x00\x00\x00", 8);
    b[8 + 0] = 0x01; /* size = n bytes, chunk = 1 */
    b[8 + 2] = 0x01;
    b[16] = 1;
    memcpy(b + 24, &n, 4);
    mc__rdma_desc_t *e = NULL;
    assert_int_equal(mc__rdma_desc_unpack(b, len, &e), -EINVAL);
    free(b);
}

static void test_stubs_without_rdma(void **state)
{
#ifdef MC_HAVE_RDMA
    skip();
#else
    mc__rdma_ctx_t *ctx = NULL;
    assert_int_equal(mc__rdma_available(), -ENOTSUP);
    assert_int_equal(mc__rdma_ctx_new(NULL, NULL, &ctx), -ENOTSUP);
    assert_null(ctx);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_bytes),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_pack_too_small_writes_nothing),
        cmocka_unit_test(test_cut_and_padded),
        cmocka_unit_test(test_inconsistent),
        cmocka_unit_test(test_stubs_without_rdma),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
