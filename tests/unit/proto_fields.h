/*
 * proto_fields.h - typed calls of mc__pack() and mc__unpack() for every
 * format string in the operation table, shared by tests/unit/test_proto.c
 * and tests/fuzz/fuzz_proto.c.
 *
 * The codec is variadic, so a test cannot build a call from a format string
 * at run time. Instead, fields_t holds one slot of every type per field
 * position, and pack_fields() / unpack_fields() make the call with the right
 * pointer types for each format the table uses (they return -ENOSYS for a
 * format they do not know, which the tests treat as a failure, so a new
 * format in proto.h cannot go untested). unpack_chain() is an independent
 * way to decode the same body: one field at a time, each with "c*" so the
 * rest of the body comes back raw. table[] lists the operations (NROWS of
 * them) for both to walk.
 */
#ifndef MC_TEST_PROTO_FIELDS_H
#define MC_TEST_PROTO_FIELDS_H

#include <errno.h>
#include <string.h>

#include "wire/proto.h"

/* The operation table as the header declares it, independent of proto.c's
 * copy: a row per operation with its name, code and request / response
 * formats. */
static const struct row {
    const char *name;
    uint16_t code;
    const char *req, *resp;
} table[] = {
#define T_ROW(name, code, req, resp) {#name, code, req, resp},
    MC__PROTO_OPS(T_ROW)
#undef T_ROW
};
#define NROWS (sizeof(table) / sizeof(table[0]))

#define FIELDS_MAX 16

typedef struct fields {
    uint8_t b[FIELDS_MAX];
    uint16_t h[FIELDS_MAX];
    uint32_t u[FIELDS_MAX];
    uint64_t q[FIELDS_MAX];
    int64_t i[FIELDS_MAX];
    const char *p[FIELDS_MAX]; /* s k *: bytes */
    uint32_t l[FIELDS_MAX];    /* s k *: length */
} fields_t;

/*
 * Every format of the table, and one that uses every character, with the
 * slot each field lives in (its position in the format).
 * X(format, fields...) with B H U Q I S naming the slot kinds.
 */
#define PROTO_FIELD_FORMATS(X, B, H, U, Q, I, S)                                                   \
    X("hhuss", H(0), H(1), U(2), S(3), S(4))                                                       \
    X("huss", H(0), U(1), S(2), S(3))                                                              \
    X("s", S(0))                                                                                   \
    X("q", Q(0))                                                                                   \
    X("qusqsuq", Q(0), U(1), S(2), Q(3), S(4), U(5), Q(6))                                         \
    X("uqq", U(0), Q(1), Q(2))                                                                     \
    X("uq", U(0), Q(1))                                                                            \
    X("quq", Q(0), U(1), Q(2))                                                                     \
    X("ququ", Q(0), U(1), Q(2), U(3))                                                              \
    X("quu*", Q(0), U(1), U(2), S(3))                                                              \
    X("u", U(0))                                                                                   \
    X("qu", Q(0), U(1))                                                                            \
    X("qqu", Q(0), Q(1), U(2))                                                                     \
    X("kquuuuqisuuuq", S(0), Q(1), U(2), U(3), U(4), U(5), Q(6), I(7), S(8), U(9), U(10), U(11),   \
      Q(12))                                                                                       \
    X("q*", Q(0), S(1))                                                                            \
    X("qq", Q(0), Q(1))                                                                            \
    X("qqqu", Q(0), Q(1), Q(2), U(3))                                                              \
    X("qq*", Q(0), Q(1), S(2))                                                                     \
    X("*", S(0))                                                                                   \
    X("qkquui", Q(0), S(1), Q(2), U(3), U(4), I(5))                                                \
    X("k", S(0))                                                                                   \
    X("ks", S(0), S(1))                                                                            \
    X("ksu*", S(0), S(1), U(2), S(3))                                                              \
    X("ku", S(0), U(1))                                                                            \
    X("kku", S(0), S(1), U(2))                                                                     \
    X("ssuu", S(0), S(1), U(2), U(3))                                                              \
    X("kuuuuii", S(0), U(1), U(2), U(3), U(4), I(5), I(6))                                         \
    X("qqqq", Q(0), Q(1), Q(2), Q(3))                                                              \
    X("qqi", Q(0), Q(1), I(2))                                                                     \
    X("uqqu", U(0), Q(1), Q(2), U(3))                                                              \
    X("uqq*", U(0), Q(1), Q(2), S(3))                                                              \
    X("kus*", S(0), U(1), S(2), S(3))                                                              \
    X("uuiiiqs", U(0), U(1), I(2), I(3), I(4), Q(5), S(6))                                         \
    X("bhuqisk*", B(0), H(1), U(2), Q(3), I(4), S(5), S(6), S(7))

#define PF_PK_B(n) (unsigned)f->b[n]
#define PF_PK_H(n) (unsigned)f->h[n]
#define PF_PK_U(n) (unsigned)f->u[n]
#define PF_PK_Q(n) f->q[n]
#define PF_PK_I(n) f->i[n]
#define PF_PK_S(n) (const void *)f->p[n], f->l[n]
#define PF_PK_CASE(fs, ...)                                                                        \
    if (!strcmp(fmt, fs))                                                                          \
        return mc__pack(w, fs, __VA_ARGS__);

/* Packs f per fmt with one mc__pack() call. Returns w->err, or -ENOSYS for
 * a format not listed above. */
static inline int pack_fields(mc__wbuf_t *w, const char *fmt, const fields_t *f)
{
    if (!*fmt)
        return mc__pack(w, "");
    PROTO_FIELD_FORMATS(PF_PK_CASE, PF_PK_B, PF_PK_H, PF_PK_U, PF_PK_Q, PF_PK_I, PF_PK_S)
    return -ENOSYS;
}

#define PF_UP_B(n) &f->b[n]
#define PF_UP_H(n) &f->h[n]
#define PF_UP_U(n) &f->u[n]
#define PF_UP_Q(n) &f->q[n]
#define PF_UP_I(n) &f->i[n]
#define PF_UP_S(n) &f->p[n], &f->l[n]
#define PF_UP_CASE(fs, ...)                                                                        \
    if (!strcmp(fmt, fs))                                                                          \
        return mc__unpack(body, len, fs, __VA_ARGS__);

/* Unpacks body[0..len) per fmt into f with one mc__unpack() call. Returns
 * its result, or -ENOSYS for a format not listed above. */
static inline int unpack_fields(const char *body, size_t len, const char *fmt, fields_t *f)
{
    if (!*fmt)
        return mc__unpack(body, len, "");
    PROTO_FIELD_FORMATS(PF_UP_CASE, PF_UP_B, PF_UP_H, PF_UP_U, PF_UP_Q, PF_UP_I, PF_UP_S)
    return -ENOSYS;
}

/* Decodes body[0..len) per fmt one field at a time (a format of one
 * character, followed by "*" for the rest unless it is the last field).
 * Returns what the first failing call returned, or 0. */
static inline int unpack_chain(const char *body, size_t len, const char *fmt, fields_t *f)
{
    const char *p = body, *rest = NULL;
    size_t n = len;
    uint32_t rlen = 0;

    if (!*fmt)
        return mc__unpack(body, len, "");
    for (int i = 0; fmt[i]; i++) {
        char one[3] = {fmt[i], fmt[i + 1] ? '*' : '\0', '\0'};
        int rc;

        if (i >= FIELDS_MAX)
            return -ENOSYS;
        switch (fmt[i]) {
        case 'b':
            rc = mc__unpack(p, n, one, &f->b[i], &rest, &rlen);
            break;
        case 'h':
            rc = mc__unpack(p, n, one, &f->h[i], &rest, &rlen);
            break;
        case 'u':
            rc = mc__unpack(p, n, one, &f->u[i], &rest, &rlen);
            break;
        case 'q':
            rc = mc__unpack(p, n, one, &f->q[i], &rest, &rlen);
            break;
        case 'i':
            rc = mc__unpack(p, n, one, &f->i[i], &rest, &rlen);
            break;
        default: /* s k *, and unknown characters (the codec refuses them) */
            rc = mc__unpack(p, n, one, &f->p[i], &f->l[i], &rest, &rlen);
            break;
        }
        if (rc)
            return rc;
        if (fmt[i + 1]) {
            p = rest;
            n = rlen;
        }
    }
    return 0;
}

/* Compares the fields fmt uses. Returns the position of the first
 * difference, or -1 when a and b agree. Bytes compare by content. */
static inline int fields_diff(const char *fmt, const fields_t *a, const fields_t *b)
{
    for (int i = 0; fmt[i] && i < FIELDS_MAX; i++) {
        int same;
        switch (fmt[i]) {
        case 'b':
            same = a->b[i] == b->b[i];
            break;
        case 'h':
            same = a->h[i] == b->h[i];
            break;
        case 'u':
            same = a->u[i] == b->u[i];
            break;
        case 'q':
            same = a->q[i] == b->q[i];
            break;
        case 'i':
            same = a->i[i] == b->i[i];
            break;
        default:
            same = a->l[i] == b->l[i] && (!a->l[i] || !memcmp(a->p[i], b->p[i], a->l[i]));
            break;
        }
        if (!same)
            return i;
    }
    return -1;
}

#endif /* MC_TEST_PROTO_FIELDS_H */
