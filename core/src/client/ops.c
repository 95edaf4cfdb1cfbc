/*
 * ops.c - the life of an op (store_i.h): made (its keys copied into it),
 * run on the store's loop thread (posted there from other threads),
 * finished, its callback called in a later callback, and freed or kept
 * for the next one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/loop_i.h"
#include "client/prefetch.h"
#include "client/store_i.h"

/*
 * Ops are made and freed at every call (a mount's create takes six), so the
 * loop thread keeps freed ones for reuse instead of going through malloc
 * and free each time: those with keys of at most OP_POOL_KEYS bytes, which
 * are all allocated with room for that many, at most OP_POOL_MAX of them
 * (s->op_pool, loop thread only). Ops made on other threads come from
 * calloc, as do all under AddressSanitizer, which then sees every op's
 * use after free.
 */
#define OP_POOL_KEYS 256
#if defined(__SANITIZE_ADDRESS__)
#define OP_POOL_MAX 0
#else
#define OP_POOL_MAX 64
#endif

static op_t *op_alloc(mc_store_t *s, size_t keys)
{
    op_t *o = NULL;
    if (keys <= OP_POOL_KEYS && mc_loop_is_current(s->loop) && s->op_pool) {
        o = s->op_pool;
        s->op_pool = o->wnext;
        s->op_pooled--;
        memset(o, 0, sizeof(*o));
    } else if (!(o = calloc(1, sizeof(*o) + (keys <= OP_POOL_KEYS ? OP_POOL_KEYS : keys)))) {
        return NULL;
    }
    o->small = keys <= OP_POOL_KEYS;
    return o;
}

static void op_free(op_t *o)
{
    mc_store_t *s = o->s;
    if (o->small && mc_loop_is_current(s->loop) && s->op_pooled < OP_POOL_MAX &&
        !__atomic_load_n(&s->closing, __ATOMIC_ACQUIRE)) {
        o->wnext = s->op_pool;
        s->op_pool = o;
        s->op_pooled++;
    } else {
        free(o);
    }
    mc__store_release(s); /* may free s (closed on its loop's thread) */
}

void mc__op_pool_free(mc_store_t *s)
{
    while (s->op_pool) {
        op_t *o = s->op_pool;
        s->op_pool = o->wnext;
        free(o);
    }
    s->op_pooled = 0;
}

op_t *mc__op_new(mc_store_t *s, enum op_kind kind, const char *key, size_t klen, const char *key2,
                 size_t klen2, mc_done_cb cb, void *arg)
{
    op_t *o = op_alloc(s, klen + klen2 + 2);
    if (!o)
        return NULL;
    mc__store_hold(s);
    o->s = s;
    o->kind = kind;
    o->t0_ns = mc__loop_recent_ns(s->loop);
    o->cb = cb;
    o->arg = arg;
    o->key = o->keys;
    o->klen = klen;
    if (klen)
        memcpy(o->key, key, klen);
    o->key[klen] = 0;
    o->key2 = o->keys + klen + 1;
    o->klen2 = klen2;
    if (klen2)
        memcpy(o->key2, key2, klen2);
    o->key2[klen2] = 0;
    return o;
}

static void complete(void *arg)
{
    op_t *o = arg;
    if (o->dcb) {
        if (o->result > 0 && !o->liovcnt) /* read into its own buffer */
            o->liov[o->liovcnt++] = (struct iovec){o->buf, (size_t)o->result};
        o->dcb(o->arg, o->result, o->liov, o->result > 0 ? o->liovcnt : 0);
        mc__ra_unlend(o);
    } else if (o->cb) {
        o->cb(o->arg, o->result);
    }
    op_free(o);
}

void mc__op_finish(op_t *o, int rc)
{
    o->result = rc;
    mc__op_count(o->s, o->kind, rc, o->t0_ns);
    mc_loop_defer(o->s->loop, &o->work, complete, o);
}

static void remote_posted(void *arg)
{
    op_t *o = arg;
    if (!o->s->rm) /* closing */
        return mc__op_finish(o, -ECANCELED);
    mc__remote_exec(o);
}

int mc__op_submit(op_t *o)
{
    mc_store_t *s = o->s;
    if (mc_loop_is_current(s->loop)) {
        remote_posted(o);
        return 0;
    }
    int rc = mc_loop_post(s->loop, remote_posted, o);
    if (rc < 0)
        op_free(o);
    return rc;
}
