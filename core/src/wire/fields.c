/*
 * fields.c - the wire protocol's field codec: the output buffer, and the
 * format-driven encoder (mc__pack) and decoder (mc__unpack) of a body's
 * fields (the format characters are in proto.h).
 *
 * Pure functions over memory, as all of the wire layer (see proto.c): every
 * decoder checks a field's length against the bytes left before it touches
 * them, and never reads outside [body, body + len).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wire/proto.h"
#include "wire/wire_i.h"

#define WBUF_FIRST_CAP 256u /* first allocation of an empty wbuf */

/* ---- the output buffer ---- */

/* Makes room for add more bytes and returns where they go, or NULL with
 * w->err set (and NULL when add is 0). The buffer never holds more than
 * MC__PROTO_MAX_BODY bytes, and its capacity doubles (capped at that limit),
 * so appending costs O(1) amortized. */
char *mc__wbuf_room(mc__wbuf_t *w, size_t add)
{
    if (w->err)
        return NULL;
    if (w->len > MC__PROTO_MAX_BODY || add > MC__PROTO_MAX_BODY - w->len) {
        w->err = -EMSGSIZE;
        return NULL;
    }
    if (!add)
        return NULL; /* nothing to write; w->p may still be NULL */
    size_t need = w->len + add;
    if (need > w->cap) {
        size_t cap = w->cap ? w->cap : WBUF_FIRST_CAP;
        while (cap < need)
            cap *= 2;
        if (cap > MC__PROTO_MAX_BODY)
            cap = MC__PROTO_MAX_BODY;
        char *p = realloc(w->p, cap);
        if (!p) {
            w->err = -ENOMEM;
            return NULL;
        }
        w->p = p;
        w->cap = cap;
    }
    char *at = w->p + w->len;
    w->len = need;
    return at;
}

static void put8(mc__wbuf_t *w, unsigned v)
{
    char *p = mc__wbuf_room(w, 1);
    if (p)
        *(unsigned char *)p = (unsigned char)v;
}

static void put16(mc__wbuf_t *w, unsigned v)
{
    char *p = mc__wbuf_room(w, 2);
    if (p)
        st16(p, (uint16_t)v);
}

static void put32(mc__wbuf_t *w, uint32_t v)
{
    char *p = mc__wbuf_room(w, 4);
    if (p)
        st32(p, v);
}

static void put64(mc__wbuf_t *w, uint64_t v)
{
    char *p = mc__wbuf_room(w, 8);
    if (p)
        st64(p, v);
}

/*
 * mc__vpack() appends fields to w per fmt (see proto.h for the characters).
 * b h u take unsigned int (truncated to the field's width), q uint64_t,
 * i int64_t, and s k * take a pointer and a uint32_t length (the pointer may
 * be NULL when the length is 0). A `*` writes the bytes without a length, so
 * it must come last. Errors stick in w->err and later appends do nothing:
 * -EMSGSIZE when the body would pass MC__PROTO_MAX_BODY, -ENOMEM, and
 * -EINVAL for an unknown format character or a `*` that is not last. A `k`
 * that fails mc_key_check() sets -EINVAL (empty, NUL inside) or
 * -ENAMETOOLONG, so that nothing the decoder would refuse is ever sent.
 * A field that fails leaves none of its bytes behind. Returns w->err. w
 * starts zeroed; the caller frees w->p.
 */
int mc__vpack(mc__wbuf_t *w, const char *fmt, va_list ap)
{
    for (const char *f = fmt; *f && !w->err; f++) {
        switch (*f) {
        case 'b':
            put8(w, va_arg(ap, unsigned));
            break;
        case 'h':
            put16(w, va_arg(ap, unsigned));
            break;
        case 'u':
            put32(w, va_arg(ap, unsigned));
            break;
        case 'q':
            put64(w, va_arg(ap, uint64_t));
            break;
        case 'i':
            put64(w, (uint64_t)va_arg(ap, int64_t));
            break;
        case 's':
        case 'k':
        case '*': {
            const void *src = va_arg(ap, const void *);
            uint32_t len = va_arg(ap, uint32_t);
            if (*f == 'k' && mc_key_check(src, len) < 0) {
                mc__wbuf_fail(w, len > MC_KEY_MAX ? -ENAMETOOLONG : -EINVAL);
                break;
            }
            if (*f == '*' && f[1]) {
                mc__wbuf_fail(w, -EINVAL);
                break;
            }
            /* The length and the bytes go in together or not at all. */
            size_t prefix = *f == '*' ? 0 : 4;
            char *p = mc__wbuf_room(w, prefix + len);
            if (p && prefix)
                st32(p, len);
            if (p && len)
                memcpy(p + prefix, src, len);
            break;
        }
        default:
            mc__wbuf_fail(w, -EINVAL);
            break;
        }
    }
    return w->err;
}

/* mc__pack() is mc__vpack() with the fields as arguments. */
int mc__pack(mc__wbuf_t *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = mc__vpack(w, fmt, ap);
    va_end(ap);
    return rc;
}

/* ---- the field decoder ---- */

/*
 * mc__vunpack() decodes body[0..len) per fmt into the pointers in ap (see
 * proto.h for their types). Any output pointer may be NULL to skip that
 * value. `s`, `k` and `*` yield a pointer into body and a length; nothing is
 * copied, so the values live as long as body (the pointer is not NULL, even
 * for zero bytes, unless body itself is NULL, as it may be when len is 0).
 * Returns 0, -EBADMSG for a field running past the end, bytes left over, a
 * `*` of more than UINT32_MAX bytes, or a bad format (unknown character, `*`
 * not last), and -EINVAL for a `k` that is empty, longer than MC_KEY_MAX or
 * holds a NUL. Fields are decoded in order and the first error
 * is returned; outputs are then undefined.
 */
int mc__vunpack(const char *body, size_t len, const char *fmt, va_list ap)
{
    const char *p = body;
    size_t left = len;

    for (const char *f = fmt; *f; f++) {
        switch (*f) {
        case 'b': {
            uint8_t *o = va_arg(ap, uint8_t *);
            if (left < 1)
                return -EBADMSG;
            if (o)
                *o = (uint8_t)*p;
            p += 1, left -= 1;
            break;
        }
        case 'h': {
            uint16_t *o = va_arg(ap, uint16_t *);
            if (left < 2)
                return -EBADMSG;
            if (o)
                *o = ld16(p);
            p += 2, left -= 2;
            break;
        }
        case 'u': {
            uint32_t *o = va_arg(ap, uint32_t *);
            if (left < 4)
                return -EBADMSG;
            if (o)
                *o = ld32(p);
            p += 4, left -= 4;
            break;
        }
        case 'q': {
            uint64_t *o = va_arg(ap, uint64_t *);
            if (left < 8)
                return -EBADMSG;
            if (o)
                *o = ld64(p);
            p += 8, left -= 8;
            break;
        }
        case 'i': {
            int64_t *o = va_arg(ap, int64_t *);
            if (left < 8)
                return -EBADMSG;
            if (o)
                *o = (int64_t)ld64(p);
            p += 8, left -= 8;
            break;
        }
        case 's':
        case 'k': {
            const char **op = va_arg(ap, const char **);
            uint32_t *ol = va_arg(ap, uint32_t *);
            if (left < 4)
                return -EBADMSG;
            uint32_t n = ld32(p);
            if (n > left - 4)
                return -EBADMSG;
            p += 4, left -= 4;
            if (*f == 'k' && mc_key_check(p, n) < 0)
                return -EINVAL;
            if (op)
                *op = p;
            if (ol)
                *ol = n;
            p += n, left -= n;
            break;
        }
        case '*': {
            const char **op = va_arg(ap, const char **);
            uint32_t *ol = va_arg(ap, uint32_t *);
            if (f[1] || left > UINT32_MAX)
                return -EBADMSG;
            if (op)
                *op = p;
            if (ol)
                *ol = (uint32_t)left;
            if (left) /* body may be NULL when len is 0 */
                p += left, left = 0;
            break;
        }
        default:
            return -EBADMSG;
        }
    }
    return left ? -EBADMSG : 0;
}

/* mc__unpack() is mc__vunpack() with the outputs as arguments. */
int mc__unpack(const char *body, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = mc__vunpack(body, len, fmt, ap);
    va_end(ap);
    return rc;
}
