/*
 * link.c - the master link's two bindings (see link.h): an RPC client of a
 * master elsewhere, and direct calls into this process's service.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/leader.h"
#include "client/link.h"
#include "runtime/loop_i.h"

typedef struct reply reply_t;

struct mc__link {
    mc_loop_t *loop;
    mc__rpc_client_t *cl; /* rpc: the master's connection */
    mc__follow_t *fw;     /* rpc to a cluster's leader found through etcd, or NULL */
    struct mc__svc *svc;  /* local: the master in this process */
    uint64_t owner;       /* local: whose requests these are */
    mc__wbuf_t req;       /* mc__link_vcall()'s body, reused */
    reply_t *spare;       /* local: answered replies kept for reuse */
    int nspare;
    int inflight; /* local: replies not yet delivered */
    int closed;   /* local: closed while replies were in flight */
};

/* A buffer grown past this is given back after use, and at most this many
 * spare replies are kept: the reuse saves two allocations a call, the bound
 * keeps what an idle link holds small. */
#define BUF_KEEP 4096
#define SPARE_MAX 64

/* A local call's response, delivered after the current callback. */
struct reply {
    mc_work_t work;
    mc__link_t *l;
    reply_t *next; /* on l->spare */
    mc__rpc_cb cb;
    void *arg;
    int status;
    mc__wbuf_t body;
};

static void link_free(mc__link_t *l)
{
    while (l->spare) {
        reply_t *r = l->spare;
        l->spare = r->next;
        free(r->body.p);
        free(r);
    }
    free(l->req.p);
    free(l);
}

static void deliver(void *p)
{
    reply_t *r = p;
    mc__link_t *l = r->l;
    r->cb(r->arg, r->status, r->body.p ? r->body.p : "", r->body.len);
    l->inflight--; /* only now: the callback may close the link */
    if (l->closed) {
        free(r->body.p);
        free(r);
        if (!l->inflight)
            link_free(l);
        return;
    }
    if (l->nspare >= SPARE_MAX || r->body.cap > BUF_KEEP) {
        free(r->body.p);
        free(r);
        return;
    }
    r->next = l->spare;
    l->spare = r;
    l->nspare++;
}

static reply_t *reply_get(mc__link_t *l)
{
    reply_t *r = l->spare;
    if (r) {
        l->spare = r->next;
        l->nspare--;
        r->body.len = 0;
        r->body.err = 0;
    } else if (!(r = calloc(1, sizeof(*r)))) {
        return NULL;
    }
    r->l = l;
    return r;
}

int mc__link_call(mc__link_t *l, uint16_t op, const void *body, size_t len, uint64_t timeout_ms,
                  mc__rpc_cb cb, void *arg)
{
    if (l->fw)
        return mc__follow_call(l->fw, l->cl, op, body, len, timeout_ms, cb, arg);
    if (l->cl)
        return mc__rpc_client_call(l->cl, op, body, len, timeout_ms, cb, arg);
    reply_t *r = reply_get(l);
    if (!r)
        return -ENOMEM;
    l->inflight++;
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

mc__wbuf_t *mc__link_body(mc__link_t *l)
{
    l->req.len = 0;
    l->req.err = 0;
    return &l->req;
}

int mc__link_send(mc__link_t *l, uint16_t op, uint64_t timeout_ms, mc__rpc_cb cb, void *arg)
{
    mc__wbuf_t *w = &l->req;
    int rc = w->err ? w->err : mc__link_call(l, op, w->p ? w->p : "", w->len, timeout_ms, cb, arg);
    if (w->cap > BUF_KEEP) {
        free(w->p);
        *w = (mc__wbuf_t){0};
    }
    return rc;
}

int mc__link_vcall(mc__link_t *l, uint16_t op, uint64_t timeout_ms, mc__rpc_cb cb, void *arg,
                   const char *fmt, va_list ap)
{
    mc__vpack(mc__link_body(l), fmt, ap);
    return mc__link_send(l, op, timeout_ms, cb, arg);
}

int mc__link_put(mc__link_t *l, const mc__put_start_rq_t *start, const mc__put_commit_rq_t *commit,
                 mc__svc_write_fn write, void *arg, mc_stat_t *st)
{
    if (l->cl)
        return -EOPNOTSUPP;
    return mc__svc_put(l->svc, start, commit, write, arg, mc__loop_time(l->loop), st);
}

void mc__link_close(mc__link_t *l)
{
    if (!l)
        return;
    mc__follow_close(l->fw);
    if (l->cl)
        mc__rpc_client_close(l->cl);
    else
        mc__svc_owner_gone(l->svc, l->owner, mc_loop_now_ms());
    if (l->inflight) {
        l->closed = 1; /* the last reply delivered frees it */
        return;
    }
    link_free(l);
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

int mc__link_follow_new(mc_loop_t *loop, const char *addr, uint64_t timeout_ms,
                        const mc__rpc_client_ops_t *ops, void *arg, mc__link_t **out)
{
    mc__link_t *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->loop = loop;
    int rc = mc__follow_new(loop, addr, &l->fw);
    mc__rpc_client_ops_t o = *ops;
    o.resolve = mc__follow_resolve;
    o.resolve_arg = l->fw;
    mc__addr_t none = {0}; /* every connect resolves first */
    if (rc == 0 && (rc = mc__rpc_client_new(loop, &none, timeout_ms, &o, arg, &l->cl)) < 0)
        mc__follow_close(l->fw);
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
