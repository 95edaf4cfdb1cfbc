/*
 * tasks.c - the client's copy and move tasks (mc_task_*): TASK_CREATE and
 * TASK_QUERY, and mc_replica_drop_async(): REPLICA_DROP, one master call
 * each. The master runs the task
 * (master/tasks.c); the client only names it and asks how it goes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "client/remote_i.h"

static void task_done(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    int rc = status;
    if (rc >= 0 && o->kind == OP_TASK_CREATE)
        rc = mc__unpack(body, len, "q", o->task_id) < 0 ? -EBADMSG : 0;
    if (rc >= 0 && o->kind == OP_TASK_QUERY) {
        mc_task_info_t *ti = o->task;
        const char *msg;
        uint32_t ml;
        int64_t err;
        memset(ti, 0, sizeof(*ti));
        if (mc__unpack(body, len, "uuiiiqs", &ti->type, &ti->status, &err, &ti->created_ms,
                       &ti->updated_ms, &ti->node, &msg, &ml) < 0)
            rc = -EBADMSG;
        else {
            ti->id = o->u64;
            ti->error = (int32_t)err;
            if (ml >= sizeof(ti->message))
                ml = sizeof(ti->message) - 1;
            memcpy(ti->message, msg, ml);
        }
    }
    mc__op_finish(o, rc);
}

void mc__task_exec(op_t *o)
{
    int rc;
    if (o->kind == OP_TASK_CREATE)
        rc = mc__mcall(o->s, MC__OP_TASK_CREATE, task_done, o, "ku*", o->key, (uint32_t)o->klen,
                       (uint32_t)o->flags, o->key2, (uint32_t)o->klen2);
    else if (o->kind == OP_REPLICA_DROP)
        rc = mc__mcall(o->s, MC__OP_REPLICA_DROP, task_done, o, "ks", o->key, (uint32_t)o->klen,
                       o->key2, (uint32_t)o->klen2);
    else
        rc = mc__mcall(o->s, MC__OP_TASK_QUERY, task_done, o, "q", o->u64);
    if (rc < 0)
        mc__op_finish(o, rc);
}

/* The length of segment address a, or -EINVAL (NULL, or too long). */
static ssize_t addr_len(const char *a)
{
    size_t n = a ? strnlen(a, MC__ADDR_STRLEN) : MC__ADDR_STRLEN;
    return n < MC__ADDR_STRLEN ? (ssize_t)n : -EINVAL;
}

/* Appends address a as an s field (u32 length, bytes) to w. */
static int put_addr(mc__wbuf_t *w, const char *a)
{
    ssize_t n = addr_len(a);
    return n < 0 ? (int)n : mc__pack(w, "s", a, (uint32_t)n);
}

/* Submits a TASK_CREATE of type for key: source (a move's; NULL for a
 * copy) and the targets travel packed in the op's second key slot. */
static int create(mc_store_t *s, uint32_t type, const char *key, size_t klen, const char *source,
                  const char *const *targets, size_t n, uint64_t *id, mc_done_cb cb, void *arg)
{
    int rc = mc_key_check(key, klen);
    if (rc < 0)
        return rc;
    if (!id || !targets || n == 0 || n > MC_TASK_TARGETS_MAX)
        return -EINVAL;
    mc__wbuf_t w = {0};
    rc = put_addr(&w, source ? source : "");
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = put_addr(&w, targets[i]);
    op_t *o = rc == 0 ? mc__op_new(s, OP_TASK_CREATE, key, klen, w.p, w.len, cb, arg) : NULL;
    free(w.p);
    if (!o)
        return rc < 0 ? rc : -ENOMEM;
    o->flags = type;
    o->task_id = id;
    return mc__op_submit(o);
}

int mc_task_copy_async(mc_store_t *s, const char *key, size_t klen, const char *const *targets,
                       size_t n, uint64_t *id, mc_done_cb cb, void *arg)
{
    return create(s, MC_TASK_COPY, key, klen, NULL, targets, n, id, cb, arg);
}

int mc_task_move_async(mc_store_t *s, const char *key, size_t klen, const char *source,
                       const char *target, uint64_t *id, mc_done_cb cb, void *arg)
{
    if (!source || !target)
        return -EINVAL;
    return create(s, MC_TASK_MOVE, key, klen, source, &target, 1, id, cb, arg);
}

int mc_task_query_async(mc_store_t *s, uint64_t id, mc_task_info_t *info, mc_done_cb cb, void *arg)
{
    if (!info)
        return -EINVAL;
    op_t *o = mc__op_new(s, OP_TASK_QUERY, NULL, 0, NULL, 0, cb, arg);
    if (!o)
        return -ENOMEM;
    o->u64 = id;
    o->task = info;
    return mc__op_submit(o);
}

int mc_replica_drop_async(mc_store_t *s, const char *key, size_t klen, const char *addr,
                          mc_done_cb cb, void *arg)
{
    int rc = mc_key_check(key, klen);
    if (rc < 0)
        return rc;
    ssize_t al = addr_len(addr);
    if (al < 0)
        return (int)al;
    op_t *o = mc__op_new(s, OP_REPLICA_DROP, key, klen, addr, (size_t)al, cb, arg);
    if (!o)
        return -ENOMEM;
    return mc__op_submit(o);
}
