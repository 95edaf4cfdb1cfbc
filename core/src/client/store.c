/*
 * store.c - the public store API: turning each call into an `op` for the
 * client (remote.c), the sync calls as async ones plus a wait, and
 * registered buffers. Opening and closing a store are in open.c, the life
 * of an op (made, run, finished, freed or kept for reuse) in ops.c.
 *
 * Every operation becomes an `op` that runs on the store's loop thread: at
 * once when the caller is already on it, otherwise posted to the loop; its
 * callback runs later, never inside the call. There is one path: a store
 * opened with a master address is a client of that master (and with a
 * segment, a node); an embedded store is a client of a master in this very
 * process (master.c and service.c behind a local link, link.h) with its
 * segment as the only one, running the same client code and the same
 * request handling a cluster runs.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/log.h"
#include "runtime/loop_i.h"
#include "mooncake/mooncake.h"
#include "client/prefetch.h"
#include "client/store_i.h"
#include "master/master.h"
#include "transport/transport_rdma.h"

void mc_store_opts_init(mc_store_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->segment_size = MC_DEFAULT_SEGMENT_SIZE;
    o->lease_ms = MC_DEFAULT_LEASE_MS;
}

mc_loop_t *mc_store_loop(mc_store_t *s)
{
    return s->loop;
}

void mc_store_stats(mc_store_t *s, mc_store_stats_t *out)
{
    out->local_ops = __atomic_load_n(&s->st.local_ops, __ATOMIC_RELAXED);
    out->local_bytes = __atomic_load_n(&s->st.local_bytes, __ATOMIC_RELAXED);
    out->shm_ops = __atomic_load_n(&s->st.shm_ops, __ATOMIC_RELAXED);
    out->shm_bytes = __atomic_load_n(&s->st.shm_bytes, __ATOMIC_RELAXED);
    out->tcp_ops = __atomic_load_n(&s->st.tcp_ops, __ATOMIC_RELAXED);
    out->tcp_bytes = __atomic_load_n(&s->st.tcp_bytes, __ATOMIC_RELAXED);
    out->rdma_ops = __atomic_load_n(&s->st.rdma_ops, __ATOMIC_RELAXED);
    out->rdma_bytes = __atomic_load_n(&s->st.rdma_bytes, __ATOMIC_RELAXED);
    out->rdma_zero_copy_bytes = __atomic_load_n(&s->st.rdma_zero_copy_bytes, __ATOMIC_RELAXED);
    out->writes_fenced = __atomic_load_n(&s->st.writes_fenced, __ATOMIC_RELAXED);
    out->cache_hits = __atomic_load_n(&s->st.cache_hits, __ATOMIC_RELAXED);
}

/* ---- async API ---- */

static int key_op(mc_store_t *s, enum op_kind kind, const char *key, size_t klen, mc_done_cb cb,
                  void *arg, op_t **out)
{
    int rc = mc_key_check(key, klen);
    if (rc < 0)
        return rc;
    *out = mc__op_new(s, kind, key, klen, NULL, 0, cb, arg);
    return *out ? 0 : -ENOMEM;
}

/* key_op() for a put or a writer: copies *po (if any) into the op, its
 * preferred segment into the op's second key slot. */
int mc__put_op(mc_store_t *s, enum op_kind kind, const char *key, size_t klen,
               const mc_put_opts_t *po, mc_done_cb cb, void *arg, op_t **out)
{
    int rc = mc_key_check(key, klen);
    if (rc < 0)
        return rc;
    const char *pref = po ? po->preferred_segment : NULL;
    size_t plen = pref ? strlen(pref) : 0;
    if (plen > MC_KEY_MAX)
        return -EINVAL;
    op_t *o = mc__op_new(s, kind, key, klen, pref, plen, cb, arg);
    if (!o)
        return -ENOMEM;
    if (po)
        o->po = *po;
    o->po.preferred_segment = plen ? o->key2 : NULL;
    *out = o;
    return 0;
}

int mc_putv_async(mc_store_t *s, const char *key, size_t klen, const struct iovec *iov, int iovcnt,
                  const mc_put_opts_t *po, mc_done_cb cb, void *arg)
{
    op_t *o;
    if (iovcnt < 0 || (iovcnt && !iov))
        return -EINVAL;
    int rc = mc__put_op(s, OP_PUT, key, klen, po, cb, arg, &o);
    if (rc < 0)
        return rc;
    o->iov = iov;
    o->iovcnt = iovcnt;
    return mc__op_submit(o);
}

int mc_put_async(mc_store_t *s, const char *key, size_t klen, const void *buf, size_t len,
                 const mc_put_opts_t *po, mc_done_cb cb, void *arg)
{
    op_t *o;
    int rc = mc__put_op(s, OP_PUT, key, klen, po, cb, arg, &o);
    if (rc < 0)
        return rc;
    o->one.iov_base = (void *)buf;
    o->one.iov_len = len;
    o->iov = &o->one;
    o->iovcnt = 1;
    return mc__op_submit(o);
}

int mc_get_async(mc_store_t *s, const char *key, size_t klen, uint64_t off, void *buf, size_t len,
                 mc_stat_t *st, mc_done_cb cb, void *arg)
{
    op_t *o;
    if (len > INT32_MAX)
        return -EINVAL;
    int rc = key_op(s, OP_GET, key, klen, cb, arg, &o);
    if (rc < 0)
        return rc;
    o->off = off;
    o->buf = buf;
    o->len = len;
    o->st = st;
    return mc__op_submit(o);
}

int mc_stat_async(mc_store_t *s, const char *key, size_t klen, mc_stat_t *st, mc_done_cb cb,
                  void *arg)
{
    op_t *o;
    int rc = key_op(s, OP_STAT, key, klen, cb, arg, &o);
    if (rc < 0)
        return rc;
    o->st = st;
    return mc__op_submit(o);
}

int mc_lookup_async(mc_store_t *s, const char *key, size_t klen, int delim, mc_stat_t *st,
                    mc_done_cb cb, void *arg)
{
    op_t *o;
    int rc = key_op(s, OP_LOOKUP, key, klen, cb, arg, &o);
    if (rc < 0)
        return rc;
    o->delim = delim;
    o->st = st;
    return mc__op_submit(o);
}

int mc_set_meta_async(mc_store_t *s, const char *key, size_t klen, const mc_meta_t *m,
                      mc_stat_t *st, mc_done_cb cb, void *arg)
{
    op_t *o;
    int rc = key_op(s, OP_SET_META, key, klen, cb, arg, &o);
    if (rc < 0)
        return rc;
    o->meta = *m;
    o->st = st;
    return mc__op_submit(o);
}

/* An op on key's attribute name (NULL for a list): the name travels in
 * the op's second key slot. Names longer than a key cannot be valid (the
 * master's rule says -ERANGE past MC_XATTR_NAME_MAX); they stop here. */
static int xattr_op(mc_store_t *s, enum op_kind kind, const char *key, size_t klen,
                    const char *name, mc_done_cb cb, void *arg, op_t **out)
{
    int rc = mc_key_check(key, klen);
    if (rc < 0)
        return rc;
    size_t nlen = name ? strnlen(name, MC_KEY_MAX + 1) : 0;
    if (nlen > MC_KEY_MAX)
        return -ERANGE;
    *out = mc__op_new(s, kind, key, klen, name, nlen, cb, arg);
    return *out ? 0 : -ENOMEM;
}

/* A get (name) or a list (name NULL) answered into buf[0..len). */
static int xattr_read(mc_store_t *s, enum op_kind kind, const char *key, size_t klen,
                      const char *name, void *buf, size_t len, mc_done_cb cb, void *arg)
{
    op_t *o;
    if (len && !buf)
        return -EINVAL;
    int rc = xattr_op(s, kind, key, klen, name, cb, arg, &o);
    if (rc < 0)
        return rc;
    o->buf = buf;
    o->len = len;
    return mc__op_submit(o);
}

int mc_xattr_get_async(mc_store_t *s, const char *key, size_t klen, const char *name, void *buf,
                       size_t len, mc_done_cb cb, void *arg)
{
    if (!name)
        return -EINVAL;
    return xattr_read(s, OP_XATTR_GET, key, klen, name, buf, len, cb, arg);
}

int mc_xattr_set_async(mc_store_t *s, const char *key, size_t klen, const char *name,
                       const void *val, size_t vlen, unsigned flags, mc_done_cb cb, void *arg)
{
    op_t *o;
    if (!name || (vlen && !val))
        return -EINVAL;
    if (vlen > MC_XATTR_SIZE_MAX)
        return -E2BIG; /* the master's rule too; a huge value would not fit a frame */
    int rc = xattr_op(s, OP_XATTR_SET, key, klen, name, cb, arg, &o);
    if (rc < 0)
        return rc;
    o->buf = (void *)val;
    o->len = vlen;
    o->flags = flags;
    return mc__op_submit(o);
}

int mc_xattr_list_async(mc_store_t *s, const char *key, size_t klen, char *buf, size_t len,
                        mc_done_cb cb, void *arg)
{
    return xattr_read(s, OP_XATTR_LIST, key, klen, NULL, buf, len, cb, arg);
}

int mc_xattr_remove_async(mc_store_t *s, const char *key, size_t klen, const char *name,
                          mc_done_cb cb, void *arg)
{
    op_t *o;
    if (!name)
        return -EINVAL;
    int rc = xattr_op(s, OP_XATTR_REMOVE, key, klen, name, cb, arg, &o);
    return rc < 0 ? rc : mc__op_submit(o);
}

int mc_remove_async(mc_store_t *s, const char *key, size_t klen, unsigned flags, mc_done_cb cb,
                    void *arg)
{
    op_t *o;
    int rc = key_op(s, OP_REMOVE, key, klen, cb, arg, &o);
    if (rc < 0)
        return rc;
    o->flags = flags;
    return mc__op_submit(o);
}

/* key_op() for an operation on two keys (rename, link). */
static int two_key_op(mc_store_t *s, enum op_kind kind, const char *from, size_t flen,
                      const char *to, size_t tlen, mc_done_cb cb, void *arg, op_t **out)
{
    int rc = mc_key_check(from, flen);
    if (rc == 0)
        rc = mc_key_check(to, tlen);
    if (rc < 0)
        return rc;
    *out = mc__op_new(s, kind, from, flen, to, tlen, cb, arg);
    return *out ? 0 : -ENOMEM;
}

int mc_rename_async(mc_store_t *s, const char *from, size_t flen, const char *to, size_t tlen,
                    unsigned flags, mc_done_cb cb, void *arg)
{
    op_t *o;
    int rc = two_key_op(s, OP_RENAME, from, flen, to, tlen, cb, arg, &o);
    if (rc < 0)
        return rc;
    o->flags = flags;
    return mc__op_submit(o);
}

int mc_link_async(mc_store_t *s, const char *from, size_t flen, const char *to, size_t tlen,
                  mc_stat_t *st, mc_done_cb cb, void *arg)
{
    op_t *o;
    int rc = two_key_op(s, OP_LINK, from, flen, to, tlen, cb, arg, &o);
    if (rc < 0)
        return rc;
    o->st = st;
    return mc__op_submit(o);
}

int mc_list_async(mc_store_t *s, const char *prefix, size_t plen, const char *after, size_t alen,
                  int delim, size_t max, mc_list_t **out, mc_done_cb cb, void *arg)
{
    if ((plen && !prefix) || (alen && !after) || plen > MC_KEY_MAX || alen > MC_KEY_MAX)
        return -EINVAL;
    op_t *o = mc__op_new(s, OP_LIST, prefix, plen, after, after ? alen : 0, cb, arg);
    if (!o)
        return -ENOMEM;
    o->delim = delim;
    o->max = max;
    o->list = out;
    return mc__op_submit(o);
}

int mc_statfs_async(mc_store_t *s, mc_space_t *sp, mc_done_cb cb, void *arg)
{
    op_t *o = mc__op_new(s, OP_STATFS, NULL, 0, NULL, 0, cb, arg);
    if (!o)
        return -ENOMEM;
    o->sp = sp;
    return mc__op_submit(o);
}

int mc_master_stats_async(mc_store_t *s, mc_counter_t *out, size_t max, mc_done_cb cb, void *arg)
{
    op_t *o = mc__op_new(s, OP_MASTER_STATS, NULL, 0, NULL, 0, cb, arg);
    if (!o)
        return -ENOMEM;
    o->counters = out;
    o->max = max;
    return mc__op_submit(o);
}

int mc_obj_open_async(mc_store_t *s, const char *key, size_t klen, mc_obj_t **out, mc_done_cb cb,
                      void *arg)
{
    op_t *o;
    int rc = key_op(s, OP_OPEN, key, klen, cb, arg, &o);
    if (rc < 0)
        return rc;
    o->obj_out = out;
    return mc__op_submit(o);
}

const mc_stat_t *mc_obj_stat(const mc_obj_t *ob)
{
    return &ob->st;
}

/* Submits an op on a byte range of an open version ob or a writer w (the
 * other one NULL). */
static int range_op(mc_store_t *s, enum op_kind kind, mc_obj_t *ob, mc_writer_t *w, uint64_t off,
                    void *buf, size_t len, mc_done_cb cb, void *arg)
{
    if (len > INT32_MAX)
        return -EINVAL;
    op_t *o = mc__op_new(s, kind, NULL, 0, NULL, 0, cb, arg);
    if (!o)
        return -ENOMEM;
    o->obj = ob;
    o->w = w;
    o->off = off;
    o->buf = buf;
    o->len = len;
    return mc__op_submit(o);
}

/* Submits the op that ends an open version ob or a writer w (the other one
 * NULL), with no callback: it cannot fail, so out of memory (for 200 bytes)
 * aborts. */
static void end_op(mc_store_t *s, enum op_kind kind, mc_obj_t *ob, mc_writer_t *w)
{
    op_t *o = mc__op_new(s, kind, NULL, 0, NULL, 0, NULL, NULL);
    if (!o)
        abort();
    o->obj = ob;
    o->w = w;
    mc__op_submit(o);
}

int mc_obj_peek_async(mc_obj_t *ob, uint64_t off, size_t len, mc_data_cb cb, void *arg)
{
    if (len > INT32_MAX)
        return -EINVAL;
    op_t *o = mc__op_new(ob->s, OP_OBJ_READ, NULL, 0, NULL, 0, NULL, arg);
    if (!o)
        return -ENOMEM;
    o->dcb = cb;
    o->obj = ob;
    o->off = off;
    o->len = len; /* o->buf: lent or allocated where it is read (prefetch.c) */
    return mc__op_submit(o);
}

int mc_obj_read_async(mc_obj_t *ob, uint64_t off, void *buf, size_t len, mc_done_cb cb, void *arg)
{
    return range_op(ob->s, OP_OBJ_READ, ob, NULL, off, buf, len, cb, arg);
}

void mc_obj_close(mc_obj_t *ob)
{
    if (ob)
        end_op(ob->s, OP_OBJ_CLOSE, ob, NULL);
}

int mc_writer_open_async(mc_store_t *s, const char *key, size_t klen, const mc_put_opts_t *po,
                         mc_obj_t *base, mc_writer_t **out, mc_done_cb cb, void *arg)
{
    op_t *o;
    int rc = mc__put_op(s, OP_W_OPEN, key, klen, po, cb, arg, &o);
    if (rc < 0)
        return rc;
    o->obj = base;
    o->w_out = out;
    return mc__op_submit(o);
}

int mc_writer_write_async(mc_writer_t *w, uint64_t off, const void *buf, size_t len, mc_done_cb cb,
                          void *arg)
{
    return range_op(w->s, OP_W_WRITE, NULL, w, off, (void *)buf, len, cb, arg);
}

int mc_writer_read_async(mc_writer_t *w, uint64_t off, void *buf, size_t len, mc_done_cb cb,
                         void *arg)
{
    return range_op(w->s, OP_W_READ, NULL, w, off, buf, len, cb, arg);
}

int mc_writer_truncate_async(mc_writer_t *w, uint64_t size, mc_done_cb cb, void *arg)
{
    return range_op(w->s, OP_W_TRUNC, NULL, w, size, NULL, 0, cb, arg);
}

int mc_writer_punch_async(mc_writer_t *w, uint64_t off, uint64_t len, mc_done_cb cb, void *arg)
{
    op_t *o = mc__op_new(w->s, OP_W_PUNCH, NULL, 0, NULL, 0, cb, arg);
    if (!o)
        return -ENOMEM;
    o->w = w;
    o->off = off;
    o->len = len > SIZE_MAX ? SIZE_MAX : (size_t)len;
    return mc__op_submit(o);
}

uint64_t mc_writer_size(const mc_writer_t *w)
{
    return w->size;
}

int mc_inode_key(uint64_t ino, char *buf, size_t size)
{
    if (!ino)
        return -EINVAL;
    int n = snprintf(buf, size, "%s%llx", MC__INODE_PREFIX, (unsigned long long)ino);
    return n < 0 || (size_t)n >= size ? -ERANGE : n;
}

int mc_writer_set_key(mc_writer_t *w, const char *key, size_t klen)
{
    int rc = mc_key_check(key, klen);
    if (rc < 0)
        return rc;
    return mc__remote_writer_set_key(w, key, klen);
}

void mc_writer_set_meta(mc_writer_t *w, const mc_meta_t *m)
{
    if (m->what & MC_META_MODE)
        w->mode = m->mode & 07777;
    if (m->what & MC_META_MTIME)
        w->mtime_ns = m->mtime_ns;
    w->meta_what |= m->what & (MC_META_MODE | MC_META_MTIME);
}

int mc_writer_commit_async(mc_writer_t *w, mc_stat_t *st, mc_done_cb cb, void *arg)
{
    op_t *o = mc__op_new(w->s, OP_W_COMMIT, NULL, 0, NULL, 0, cb, arg);
    if (!o)
        return -ENOMEM;
    o->w = w;
    o->st = st;
    return mc__op_submit(o);
}

void mc_writer_abort(mc_writer_t *w)
{
    if (w)
        end_op(w->s, OP_W_ABORT, NULL, w);
}

/* ---- sync API: the async call plus a wait ---- */

struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int result;
};

static void waiter_cb(void *arg, int result)
{
    struct waiter *w = arg;
    pthread_mutex_lock(&w->mu);
    w->result = result;
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static int waiter_wait(struct waiter *w, int rc)
{
    if (rc == 0) {
        pthread_mutex_lock(&w->mu);
        while (!w->done)
            pthread_cond_wait(&w->cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
        rc = w->result;
    }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    return rc;
}

#define SYNC(s, call)                                                                              \
    do {                                                                                           \
        if (mc_loop_is_current((s)->loop))                                                         \
            return -EDEADLK;                                                                       \
        struct waiter w_ = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};            \
        return waiter_wait(&w_, call);                                                             \
    } while (0)

int mc_put(mc_store_t *s, const char *key, size_t klen, const void *buf, size_t len,
           const mc_put_opts_t *po)
{
    SYNC(s, mc_put_async(s, key, klen, buf, len, po, waiter_cb, &w_));
}

int mc_putv(mc_store_t *s, const char *key, size_t klen, const struct iovec *iov, int iovcnt,
            const mc_put_opts_t *po)
{
    SYNC(s, mc_putv_async(s, key, klen, iov, iovcnt, po, waiter_cb, &w_));
}

int mc_task_copy(mc_store_t *s, const char *key, size_t klen, const char *const *targets, size_t n,
                 uint64_t *id)
{
    SYNC(s, mc_task_copy_async(s, key, klen, targets, n, id, waiter_cb, &w_));
}

int mc_task_move(mc_store_t *s, const char *key, size_t klen, const char *source,
                 const char *target, uint64_t *id)
{
    SYNC(s, mc_task_move_async(s, key, klen, source, target, id, waiter_cb, &w_));
}

int mc_task_query(mc_store_t *s, uint64_t id, mc_task_info_t *info)
{
    SYNC(s, mc_task_query_async(s, id, info, waiter_cb, &w_));
}

int mc_replica_drop(mc_store_t *s, const char *key, size_t klen, const char *addr)
{
    SYNC(s, mc_replica_drop_async(s, key, klen, addr, waiter_cb, &w_));
}

int mc_get(mc_store_t *s, const char *key, size_t klen, uint64_t off, void *buf, size_t len,
           mc_stat_t *st)
{
    SYNC(s, mc_get_async(s, key, klen, off, buf, len, st, waiter_cb, &w_));
}

int mc_stat(mc_store_t *s, const char *key, size_t klen, mc_stat_t *st)
{
    SYNC(s, mc_stat_async(s, key, klen, st, waiter_cb, &w_));
}

int mc_remove(mc_store_t *s, const char *key, size_t klen, unsigned flags)
{
    SYNC(s, mc_remove_async(s, key, klen, flags, waiter_cb, &w_));
}

int mc_rename(mc_store_t *s, const char *from, size_t flen, const char *to, size_t tlen,
              unsigned flags)
{
    SYNC(s, mc_rename_async(s, from, flen, to, tlen, flags, waiter_cb, &w_));
}

int mc_link(mc_store_t *s, const char *from, size_t flen, const char *to, size_t tlen,
            mc_stat_t *st)
{
    SYNC(s, mc_link_async(s, from, flen, to, tlen, st, waiter_cb, &w_));
}

int mc_list(mc_store_t *s, const char *prefix, size_t plen, const char *after, size_t alen,
            int delim, size_t max, mc_list_t **out)
{
    SYNC(s, mc_list_async(s, prefix, plen, after, alen, delim, max, out, waiter_cb, &w_));
}

int mc_statfs(mc_store_t *s, mc_space_t *sp)
{
    SYNC(s, mc_statfs_async(s, sp, waiter_cb, &w_));
}

int mc_master_stats(mc_store_t *s, mc_counter_t *out, size_t max)
{
    SYNC(s, mc_master_stats_async(s, out, max, waiter_cb, &w_));
}

/* ---- registered buffers ---- */

struct mc__ubuf *mc__ubuf_find(mc_store_t *s, const void *p, size_t len)
{
    const char *a = p;
    for (struct mc__ubuf *u = s->ubufs; u; u = u->next)
        if (a >= u->base && len <= u->len && (size_t)(a - u->base) <= u->len - len)
            return u;
    return NULL;
}

struct reg_call {
    mc_store_t *s;
    char *ptr;
    size_t len;
    int unreg;
    struct waiter w;
};

/* Registers or unregisters on the loop thread. */
static int reg_run(struct reg_call *c)
{
    mc_store_t *s = c->s;
    if (c->unreg) {
        for (struct mc__ubuf **pp = &s->ubufs; *pp; pp = &(*pp)->next) {
            struct mc__ubuf *u = *pp;
            if (u->base != c->ptr)
                continue;
            if (u->users)
                return -EBUSY;
            *pp = u->next;
            mc__rdma_deregister(u->mr);
            free(u);
            return 0;
        }
        return -ENOENT;
    }
    for (struct mc__ubuf *u = s->ubufs; u; u = u->next)
        if (c->ptr < u->base + u->len && u->base < c->ptr + c->len)
            return -EEXIST;
    struct mc__ubuf *u = calloc(1, sizeof(*u));
    if (!u)
        return -ENOMEM;
    u->base = c->ptr;
    u->len = c->len;
    if (s->rdma) {
        int rc = mc__rdma_register(s->rdma, c->ptr, c->len, 0, &u->mr);
        if (rc < 0) {
            mc__log(MC__LOG_WARN, "register_buffer: %zu bytes: %s", c->len, mc_strerror(rc));
            free(u);
            return rc;
        }
    }
    u->next = s->ubufs;
    s->ubufs = u;
    return 0;
}

static void reg_posted(void *arg)
{
    struct reg_call *c = arg;
    waiter_cb(&c->w, reg_run(c));
}

/* Runs c on the store's loop thread and waits for it. */
static int reg_call(struct reg_call *c)
{
    if (mc_loop_is_current(c->s->loop))
        return reg_run(c);
    c->w = (struct waiter){PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    return waiter_wait(&c->w, mc_loop_post(c->s->loop, reg_posted, c));
}

int mc_register_buffer(mc_store_t *s, void *ptr, size_t len)
{
    if (!s || !ptr || !len || (uintptr_t)ptr + len < (uintptr_t)ptr)
        return -EINVAL;
    struct reg_call c = {.s = s, .ptr = ptr, .len = len};
    return reg_call(&c);
}

int mc_unregister_buffer(mc_store_t *s, void *ptr)
{
    if (!s || !ptr)
        return -EINVAL;
    struct reg_call c = {.s = s, .ptr = ptr, .unreg = 1};
    return reg_call(&c);
}

int mc_xattr_get(mc_store_t *s, const char *key, size_t klen, const char *name, void *buf,
                 size_t len)
{
    SYNC(s, mc_xattr_get_async(s, key, klen, name, buf, len, waiter_cb, &w_));
}

int mc_xattr_set(mc_store_t *s, const char *key, size_t klen, const char *name, const void *val,
                 size_t vlen, unsigned flags)
{
    SYNC(s, mc_xattr_set_async(s, key, klen, name, val, vlen, flags, waiter_cb, &w_));
}

int mc_xattr_list(mc_store_t *s, const char *key, size_t klen, char *buf, size_t len)
{
    SYNC(s, mc_xattr_list_async(s, key, klen, buf, len, waiter_cb, &w_));
}

int mc_xattr_remove(mc_store_t *s, const char *key, size_t klen, const char *name)
{
    SYNC(s, mc_xattr_remove_async(s, key, klen, name, waiter_cb, &w_));
}

int mc_obj_open(mc_store_t *s, const char *key, size_t klen, mc_obj_t **out)
{
    SYNC(s, mc_obj_open_async(s, key, klen, out, waiter_cb, &w_));
}

int mc_obj_read(mc_obj_t *ob, uint64_t off, void *buf, size_t len)
{
    SYNC(ob->s, mc_obj_read_async(ob, off, buf, len, waiter_cb, &w_));
}
