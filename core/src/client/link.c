/*
 * link.c - the master link's two bindings (see link.h): an RPC client of a
 * master elsewhere, and direct calls into this process's service.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/link.h"
#include "runtime/loop_i.h"
#include "master/service.h"

struct mc__link {
    mc_loop_t *loop;
    mc__rpc_client_t *cl; /* rpc: the master's connection */
    struct mc__svc *svc;  /* local: the master in this process */
    uint64_t owner;       /* local: whose requests these are */
};

/* A local call's response, delivered after the current callback. */
typedef struct reply {
    mc_work_t work;
    mc__rpc_cb cb;
    void *arg;
    int status;
    mc__wbuf_t body;
} reply_t;

static void deliver(void *p)
{
    reply_t *r = p;
    r->cb(r->arg, r->status, r->body.p ? r->body.p : "", r->body.len);
    free(r->body.p);
    free(r);
}

int mc__link_call(mc__link_t *l, uint16_t op, const void *body, size_t len, uint64_t timeout_ms,
                  mc__rpc_cb cb, void *arg)
{
    if (l->cl)
        return mc__rpc_client_call(l->cl, op, body, len, timeout_ms, cb, arg);
    reply_t *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->cb = cb;
    r->arg = arg;
    r->status = mc__svc_handle(l->svc, l->owner, op, body, len, mc__loop_time(l->loop), &r->body);
    if (r->body.err && r->status >= 0)
        r->status = r->body.err;
    /* In the next round, as a response over a socket would come: a client
     * that keeps calling from its callbacks cannot starve the loop. */
    mc__loop_defer_next(l->loop, &r->work, deliver, r);
    return 0;
}

void mc__link_close(mc__link_t *l)
{
    if (!l)
        return;
    if (l->cl)
        mc__rpc_client_close(l->cl);
    else
        mc__svc_owner_gone(l->svc, l->owner, mc_loop_now_ms());
    free(l);
}

int mc__link_rpc_new(mc_loop_t *loop, const mc__addr_t *a, uint64_t timeout_ms,
                     const mc__rpc_client_ops_t *ops, void *arg, mc__link_t **out)
{
    mc__link_t *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->loop = loop;
    int rc = mc__rpc_client_new(loop, a, timeout_ms, ops, arg, &l->cl);
    if (rc < 0) {
        free(l);
        return rc;
    }
    *out = l;
    return 0;
}

int mc__link_local_new(mc_loop_t *loop, struct mc__svc *svc, uint64_t owner, mc__link_t **out)
{
    mc__link_t *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->loop = loop;
    l->svc = svc;
    l->owner = owner;
    *out = l;
    return 0;
}
