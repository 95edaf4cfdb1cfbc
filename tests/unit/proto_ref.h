/*
 * proto_ref.h - what test_proto.c and test_proto_msgs.c share: heap copies
 * of exactly the bytes under test (so that AddressSanitizer sees any read
 * past the end), expected encodings written byte by byte without the
 * codec, a stat with every field distinctive, and a listing to encode.
 * Included once by each test file (its functions are static; a file uses
 * some of them).
 */
#ifndef MC_TEST_PROTO_REF_H
#define MC_TEST_PROTO_REF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/proto.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

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

/* A stat whose every field is distinctive (high bits, signs). */
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

/* A listing of n entries (every third a prefix), with more set as asked. */
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

#pragma GCC diagnostic pop

#endif /* MC_TEST_PROTO_REF_H */
