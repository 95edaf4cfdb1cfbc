/*
 * names.c - the master's namespace requests (see service_i.h): STAT,
 * LOOKUP, REMOVE, RENAME, LINK, LIST, SET_META, the XATTR_ calls, STATFS and
 * STATS. They hold no write or handle of a connection: each is the master
 * logic's rule (namespace.c, xattr.c) plus the times it sets and the answer's
 * encoding. Puts, opens and the dispatch are in service.c.
 */
#include <errno.h>
#include <string.h>

#include "master/service_i.h"

/* A rename took from to to: the names of both directories changed, and the
 * object moved (or the directory's marker) changed its ctime. */
static void renamed(mc__svc_t *svc, const char *from, uint32_t flen, const char *to, uint32_t tlen)
{
    int64_t t = mc__svc_wall(svc);
    mc__master_dir_changed(svc->m, from, flen, t);
    mc__master_dir_changed(svc->m, to, tlen, t);
    mc__version_t *v = mc__master_find(svc->m, to, tlen);
    if (v) {
        (void)mc__version_set_ctime(v, t); /* out of memory: its mtime */
        mc__master_dirty(svc->m, v);
    }
}

/* XATTR_GET, _SET, _LIST, _REMOVE: the rules are xattr.c's; a change sets
 * the ctime. */
static int op_xattr(mc__svc_t *svc, uint16_t op, const char *body, size_t len, mc__wbuf_t *w)
{
    const char *key, *name, *val;
    uint32_t klen, nlen = 0, flags = 0, vlen = 0;
    int rc;
    switch (op) {
    case MC__OP_XATTR_LIST:
        UNPACK("k", &key, &klen);
        break;
    case MC__OP_XATTR_SET:
        UNPACK("ksu*", &key, &klen, &name, &nlen, &flags, &val, &vlen);
        break;
    default:
        UNPACK("ks", &key, &klen, &name, &nlen);
    }
    mc__version_t *v = mc__master_find(svc->m, key, klen);
    if (!v)
        return -ENOENT;
    switch (op) {
    case MC__OP_XATTR_GET:
        if ((rc = mc__xattr_get(v, name, nlen, &val, &vlen)) < 0)
            return rc;
        return mc__pack(w, "*", val, vlen);
    case MC__OP_XATTR_LIST: {
        size_t at = 0, nl;
        while (mc__xattr_next(v, &at, &name, &nl, &val, &vlen)) {
            mc__pack(w, "*", name, (uint32_t)nl); /* a raw field is last: one each */
            mc__pack(w, "*", "", (uint32_t)1);
        }
        return w->err;
    }
    case MC__OP_XATTR_SET:
        rc = mc__xattr_set(v, name, nlen, val, vlen, flags);
        break;
    default:
        rc = mc__xattr_remove(v, name, nlen);
    }
    if (rc == 0) {
        (void)mc__version_set_ctime(v, mc__svc_wall(svc)); /* it has rare fields: its xattrs */
        mc__master_dirty(svc->m, v);
    }
    return rc;
}

static int op_stat(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w)
{
    mc__version_t *v;
    mc_stat_t st;
    int rc = mc__svc_take_version(svc, body, len, &v);
    if (rc < 0)
        return rc;
    mc__version_stat(svc->m, v, now, &st);
    return mc__pack_stat(w, &st);
}

static int op_lookup(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w)
{
    const char *key;
    uint32_t klen, delim;
    mc__version_t *v;
    mc_stat_t st;
    UNPACK("ku", &key, &klen, &delim);
    int rc = mc__master_lookup(svc->m, key, klen, (int)delim, &v);
    if (rc < 0)
        return rc;
    memset(&st, 0, sizeof(st));
    if (v)
        mc__version_stat(svc->m, v, now, &st);
    if (rc == MC_LOOKUP_DIR)
        st.nlink = 2 + mc__master_subdirs(svc->m, key, klen, (int)delim);
    if (rc == MC_LOOKUP_DIR && !v && klen == 1 && key[0] == (char)delim)
        st.mtime_ns = st.ctime_ns = mc__master_root_ns(svc->m); /* the root */
    mc__pack_stat(w, &st);
    return w->err ? w->err : rc;
}

static int op_remove(mc__svc_t *svc, const char *body, size_t len, uint64_t now)
{
    const char *key;
    uint32_t klen, flags;
    UNPACK("ku", &key, &klen, &flags);
    mc__version_t *v = mc__master_find(svc->m, key, klen);
    int linked = v && mc__vmore(v)->links > 1; /* a hard-linked file keeps its other names */
    int rc = mc__master_remove(svc->m, key, klen, flags, now);
    if (rc == 0)
        mc__master_dir_changed(svc->m, key, klen, mc__svc_wall(svc));
    if (rc == 0 && linked)
        mc__master_changed(svc->m, v, mc__svc_wall(svc)); /* its link count changed: ctime */
    return rc;
}

/* RENAME and LINK: from key to key2. */
static int op_rename_link(mc__svc_t *svc, uint16_t op, const char *body, size_t len, uint64_t now,
                          mc__wbuf_t *w)
{
    const char *key, *key2;
    uint32_t klen, klen2, flags;
    mc__version_t *v;
    mc_stat_t st;
    int rc;
    UNPACK("kku", &key, &klen, &key2, &klen2, &flags);
    if (op == MC__OP_RENAME) {
        rc = mc__master_rename(svc->m, key, klen, key2, klen2, flags, now);
        if (rc == 0)
            renamed(svc, key, klen, key2, klen2);
        return rc;
    }
    if (flags)
        return -EINVAL;
    if ((rc = mc__master_link(svc->m, key, klen, key2, klen2, &v)) < 0)
        return rc;
    int64_t t = mc__svc_wall(svc);
    (void)mc__version_set_ctime(v, t); /* it has rare fields: its count of names */
    mc__master_dirty(svc->m, v);
    mc__master_dir_changed(svc->m, key2, klen2, t);
    mc__version_stat(svc->m, v, now, &st);
    return mc__pack_stat(w, &st);
}

static int op_list(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w)
{
    const char *prefix, *after;
    uint32_t plen, alen, delim, max;
    UNPACK("ssuu", &prefix, &plen, &after, &alen, &delim, &max);
    if (plen > MC_KEY_MAX || alen > MC_KEY_MAX)
        return -EINVAL;
    mc_list_t *l = NULL;
    int rc = mc__master_list(svc->m, prefix, plen, alen ? after : NULL, alen, (int)delim,
                             max > 10000 ? 10000 : max, now, &l);
    if (rc < 0)
        return rc;
    mc__pack_list(w, l);
    mc_list_free(l);
    return w->err;
}

static int op_set_meta(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w)
{
    const char *key;
    uint32_t klen;
    mc_meta_t meta;
    mc__version_t *v;
    mc_stat_t st;
    UNPACK("kuuuuii", &key, &klen, &meta.what, &meta.mode, &meta.uid, &meta.gid, &meta.atime_ns,
           &meta.mtime_ns);
    int rc = mc__master_set_meta(svc->m, key, klen, &meta, mc__svc_wall(svc), &v);
    if (rc < 0)
        return rc;
    mc__version_stat(svc->m, v, now, &st);
    return mc__pack_stat(w, &st);
}

/* STATFS: the space; STATS: the counters. */
static int op_space_stats(mc__svc_t *svc, uint16_t op, const char *body, size_t len, mc__wbuf_t *w)
{
    UNPACK("");
    if (op == MC__OP_STATFS) {
        mc_space_t sp;
        mc__master_space(svc->m, &sp);
        mc__pack(w, "qqqq", sp.total, sp.used, sp.objects, sp.evicted);
        return w->err;
    }
    mc__svc_flush(svc); /* so that notices_waiting counts every change made */
    mc_counter_t c[32];
    size_t n = mc__svc_counters(svc, c, 32);
    for (size_t i = 0; i < n; i++)
        mc__pack(w, "sq", c[i].name, (uint32_t)strlen(c[i].name), c[i].value);
    return w->err;
}

int mc__svc_names(mc__svc_t *svc, uint16_t op, const char *body, size_t len, uint64_t now,
                  mc__wbuf_t *w)
{
    switch (op) {
    case MC__OP_STAT:
        return op_stat(svc, body, len, now, w);
    case MC__OP_LOOKUP:
        return op_lookup(svc, body, len, now, w);
    case MC__OP_REMOVE:
        return op_remove(svc, body, len, now);
    case MC__OP_RENAME:
    case MC__OP_LINK:
        return op_rename_link(svc, op, body, len, now, w);
    case MC__OP_LIST:
        return op_list(svc, body, len, now, w);
    case MC__OP_SET_META:
        return op_set_meta(svc, body, len, now, w);
    case MC__OP_STATFS:
    case MC__OP_STATS:
        return op_space_stats(svc, op, body, len, w);
    case MC__OP_XATTR_GET:
    case MC__OP_XATTR_SET:
    case MC__OP_XATTR_LIST:
    case MC__OP_XATTR_REMOVE:
        return op_xattr(svc, op, body, len, w);
    default:
        return -EOPNOTSUPP;
    }
}
