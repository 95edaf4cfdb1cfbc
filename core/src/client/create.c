/*
 * create.c - mc_create_async(): a new file published empty, opened, and
 * the writer of its next version started, in one request to the master
 * (CREATE, docs/PROTOCOL.md): what a mount's create(2) needs, which took
 * a LOOKUP, a put, a PUT_START and an OPEN.
 */
#include <errno.h>

#include "client/remote_i.h"
#include "runtime/loop_i.h"

int mc_create_async(mc_store_t *s, const char *key, size_t klen, const mc_put_opts_t *po,
                    mc_obj_t **obj, mc_writer_t **w, mc_done_cb cb, void *arg)
{
    op_t *o;
    int rc = mc__put_op(s, OP_CREATE, key, klen, po, cb, arg, &o);
    if (rc < 0)
        return rc;
    o->obj_out = obj;
    o->w_out = w;
    return mc__op_submit(o);
}

/* The answer: the open version, the capacity the write reserved, then the
 * write (as a PUT_START answers). */
static void create_done(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    size_t n = len;
    mc_obj_t *ob;
    mc_writer_t *w;
    uint64_t capacity;
    const char *rest;
    uint32_t rl;
    if (status < 0)
        return mc__op_finish(o, status);
    mc__rc_drop(o->s->rm, o->key, o->klen, NULL); /* as a put's: a new version */
    int rc = mc__obj_take(o->s, &body, &n, &ob);
    if (rc < 0)
        return mc__op_finish(o, rc);
    if (mc__unpack(body, n, "q*", &capacity, &rest, &rl) < 0)
        rc = -EIO;
    if (rc == 0)
        rc = mc__writer_take(o->s, o->key, o->klen, o->sent_ms, capacity, rest, rl, &w);
    if (rc < 0) {
        mc__obj_release(ob);
        return mc__op_finish(o, rc);
    }
    w->put_flags = 0; /* keeps the mode and owner it was published with */
    mc__writer_handed(w);
    *o->obj_out = ob;
    *o->w_out = w;
    mc__op_finish(o, 0);
}

void mc__create_exec(op_t *o)
{
    o->sent_ms = mc__loop_time(o->s->loop);
    int rc = mc__mcall_create(o, MC__WRITER_FIRST, create_done);
    if (rc < 0)
        mc__op_finish(o, rc);
}
