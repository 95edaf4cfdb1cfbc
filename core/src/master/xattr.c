/*
 * xattr.c - extended attributes of an object version: a small packed list
 * kept in the version record, with the rules of Linux's setxattr(2) and
 * getxattr(2) that do not depend on who asks (name and value sizes,
 * XATTR_CREATE / XATTR_REPLACE, a per-object total). Namespaces and
 * credentials are the caller's rule (the mount applies them).
 *
 * The list (mc__vmore(v)->xattr, mc__vmore(v)->xattr_len bytes) holds entries one after another:
 * u8 name length (1..MC_XATTR_NAME_MAX), the name, u32 value length (host
 * order), the value. It never leaves the master in this form.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "master/master.h"

/* Finds name in v's list: returns the entry's offset, or -1. */
static long find(const mc__version_t *v, const char *name, size_t nlen)
{
    size_t at = 0;
    const char *n, *val;
    size_t nl;
    uint32_t vl;
    while (mc__xattr_next(v, &at, &n, &nl, &val, &vl)) {
        if (nl == nlen && memcmp(n, name, nlen) == 0)
            return (long)(n - 1 - mc__vmore(v)->xattr);
    }
    return -1;
}

/* The bytes of the entry at offset off. */
static size_t entry_size(const mc__version_t *v, size_t off)
{
    uint32_t vl;
    size_t nl = (unsigned char)mc__vmore(v)->xattr[off];
    memcpy(&vl, mc__vmore(v)->xattr + off + 1 + nl, sizeof(vl));
    return 1 + nl + sizeof(vl) + vl;
}

int mc__xattr_next(const mc__version_t *v, size_t *at, const char **name, size_t *nlen,
                   const char **val, uint32_t *vlen)
{
    if (*at >= mc__vmore(v)->xattr_len)
        return 0;
    const char *p = mc__vmore(v)->xattr + *at;
    *nlen = (unsigned char)p[0];
    *name = p + 1;
    memcpy(vlen, p + 1 + *nlen, sizeof(*vlen));
    *val = p + 1 + *nlen + sizeof(*vlen);
    *at += 1 + *nlen + sizeof(*vlen) + *vlen;
    return 1;
}

/* The name rule of Linux: 1..255 bytes (ERANGE otherwise); no NUL inside
 * (a C string cannot carry one). */
static int check_name(const char *name, size_t nlen)
{
    if (nlen == 0 || nlen > MC_XATTR_NAME_MAX)
        return -ERANGE;
    if (memchr(name, '\0', nlen))
        return -EINVAL;
    return 0;
}

/* Checks name and finds its entry: 0 and *off, -ENODATA, or the name's
 * error. */
static int find_named(const mc__version_t *v, const char *name, size_t nlen, size_t *off)
{
    int rc = check_name(name, nlen);
    if (rc < 0)
        return rc;
    long at = find(v, name, nlen);
    if (at < 0)
        return -ENODATA;
    *off = (size_t)at;
    return 0;
}

int mc__xattr_get(const mc__version_t *v, const char *name, size_t nlen, const char **val,
                  uint32_t *vlen)
{
    size_t at;
    int rc = find_named(v, name, nlen, &at);
    if (rc < 0)
        return rc;
    const char *n;
    size_t nl;
    mc__xattr_next(v, &at, &n, &nl, val, vlen);
    return 0;
}

/* The totals a list would have: names (each + 1, as listxattr(2) gives
 * them) and all bytes counted against MC_XATTR_TOTAL_MAX. */
static void totals(const mc__version_t *v, size_t *names, size_t *all)
{
    size_t at = 0, nl;
    const char *n, *val;
    uint32_t vl;
    *names = *all = 0;
    while (mc__xattr_next(v, &at, &n, &nl, &val, &vl)) {
        *names += nl + 1;
        *all += nl + 1 + vl;
    }
}

int mc__xattr_set(mc__version_t *v, const char *name, size_t nlen, const char *val, size_t vlen,
                  unsigned flags)
{
    if (flags & ~(unsigned)(MC_XATTR_CREATE | MC_XATTR_REPLACE))
        return -EINVAL;
    int rc = check_name(name, nlen);
    if (rc < 0)
        return rc;
    if (vlen > MC_XATTR_SIZE_MAX)
        return -E2BIG;
    long off = find(v, name, nlen);
    if (off >= 0 && (flags & MC_XATTR_CREATE))
        return -EEXIST;
    if (off < 0 && (flags & MC_XATTR_REPLACE))
        return -ENODATA;
    size_t names, all, old = 0;
    totals(v, &names, &all);
    if (off >= 0) {
        old = entry_size(v, (size_t)off);
        all -= old - sizeof(uint32_t); /* its name + 1 + value */
        names -= nlen + 1;
    }
    if (all + nlen + 1 + vlen > MC_XATTR_TOTAL_MAX || names + nlen + 1 > MC_XATTR_LIST_MAX)
        return -ENOSPC;
    mc__vmore_t *x = mc__version_more(v);
    if (!x)
        return -ENOMEM;
    size_t add = 1 + nlen + sizeof(uint32_t) + vlen;
    size_t len = x->xattr_len - old + add;
    char *p = malloc(len);
    if (!p)
        return -ENOMEM;
    /* The list without the old entry, then the new one at the end. */
    size_t keep = off >= 0 ? (size_t)off : x->xattr_len;
    if (keep)
        memcpy(p, x->xattr, keep);
    if (off >= 0 && x->xattr_len > keep + old)
        memcpy(p + keep, x->xattr + keep + old, x->xattr_len - keep - old);
    char *e = p + x->xattr_len - old;
    uint32_t vl = (uint32_t)vlen;
    e[0] = (char)nlen;
    memcpy(e + 1, name, nlen);
    memcpy(e + 1 + nlen, &vl, sizeof(vl));
    if (vlen)
        memcpy(e + 1 + nlen + sizeof(vl), val, vlen);
    free(x->xattr);
    x->xattr = p;
    x->xattr_len = (uint32_t)len;
    return 0;
}

int mc__xattr_remove(mc__version_t *v, const char *name, size_t nlen)
{
    size_t at;
    int rc = find_named(v, name, nlen, &at);
    if (rc < 0)
        return rc;
    size_t sz = entry_size(v, at);
    mc__vmore_t *x = v->rare; /* it has the attribute found */
    memmove(x->xattr + at, x->xattr + at + sz, x->xattr_len - at - sz);
    x->xattr_len -= (uint32_t)sz;
    if (x->xattr_len == 0) {
        free(x->xattr);
        x->xattr = NULL;
    }
    return 0;
}

void mc__xattr_take(mc__version_t *to, mc__version_t *from)
{
    if (to->has_more) {
        free(to->rare->xattr);
        to->rare->xattr = NULL;
        to->rare->xattr_len = 0;
    }
    if (!mc__vmore(from)->xattr)
        return;
    to->rare->xattr = from->rare->xattr; /* to's rare fields: the caller made them */
    to->rare->xattr_len = from->rare->xattr_len;
    from->rare->xattr = NULL;
    from->rare->xattr_len = 0;
}
