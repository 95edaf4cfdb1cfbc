/*
 * xattr.c - the client's extended-attribute calls: one master call each
 * (XATTR_GET, _SET, _LIST, _REMOVE), the answer copied into the caller's
 * buffer with getxattr(2)'s size rules (len 0: the size; too small:
 * -ERANGE).
 */
#include <errno.h>
#include <string.h>

#include "client/remote_i.h"

static void xattr_done(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    int rc = status;
    if (status >= 0 && (o->kind == OP_XATTR_GET || o->kind == OP_XATTR_LIST)) {
        if (len > INT32_MAX)
            rc = -EIO;
        else if (o->len && len > o->len)
            rc = -ERANGE;
        else {
            if (o->len && len)
                memcpy(o->buf, body, len);
            rc = (int)len;
        }
    }
    mc__op_finish(o, rc);
}

void mc__xattr_exec(op_t *o)
{
    mc_store_t *s = o->s;
    uint32_t klen = (uint32_t)o->klen, nlen = (uint32_t)o->klen2;
    int rc;
    switch (o->kind) {
    case OP_XATTR_GET:
        rc = mc__mcall(s, MC__OP_XATTR_GET, xattr_done, o, "ks", o->key, klen, o->key2, nlen);
        break;
    case OP_XATTR_SET:
        rc = mc__mcall(s, MC__OP_XATTR_SET, xattr_done, o, "ksu*", o->key, klen, o->key2, nlen,
                       o->flags, o->len ? o->buf : "", (uint32_t)o->len);
        break;
    case OP_XATTR_LIST:
        rc = mc__mcall(s, MC__OP_XATTR_LIST, xattr_done, o, "k", o->key, klen);
        break;
    default:
        rc = mc__mcall(s, MC__OP_XATTR_REMOVE, xattr_done, o, "ks", o->key, klen, o->key2, nlen);
        break;
    }
    if (rc < 0)
        mc__op_finish(o, rc);
}
