/*
 * leader.c - following the leader of a cluster of masters on etcd (see
 * leader.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/leader.h"
#include "runtime/addr.h"
#include "runtime/etcd.h"
#include "runtime/log.h"
#include "server/ha.h"
#include "wire/proto.h"

#define RETRY_MS 100

typedef struct again again_t;

struct mc__follow {
    mc_loop_t *loop;
    mc__etcd_t *etcd;
    char key[300];
    size_t klen;
    mc__rpc_client_t *cl; /* the client whose connects we resolve */
    again_t *calls;       /* calls in progress */
    int closed, looking;
    int in_close; /* inside close, or a call's callback: f must stay */
};

/* A call that may be sent again. */
struct again {
    mc__follow_t *f;
    mc__rpc_client_t *cl;
    uint16_t op;
    char *body;
    size_t len;
    uint64_t deadline;
    mc__rpc_cb cb;
    void *arg;
    int last;    /* the last failure */
    int waiting; /* on t, to be sent again */
    mc_timer_t t;
    again_t *prev, *next;
};

int mc__follow_is_etcd(const char *addr)
{
    return addr && strncmp(addr, "etcd://", 7) == 0;
}

int mc__follow_new(mc_loop_t *loop, const char *addr, mc__follow_t **out)
{
    mc__follow_t *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    const char *cluster = getenv(MC__CLUSTER_ENV);
    int n = mc__ha_leader_key(cluster && *cluster ? cluster : NULL, f->key, sizeof(f->key));
    int rc = n < 0 ? -EINVAL : mc__etcd_new(loop, addr, 2000, &f->etcd);
    if (rc < 0) {
        free(f);
        return rc;
    }
    f->loop = loop;
    f->klen = (size_t)n;
    *out = f;
    return 0;
}

static void free_if_done(mc__follow_t *f)
{
    if (f->closed && !f->calls && !f->looking && !f->in_close)
        free(f);
}

static void on_leader(void *arg, int rc, const mc__etcd_res_t *res)
{
    mc__follow_t *f = arg;
    f->looking = 0;
    if (f->closed) {
        free_if_done(f);
        return;
    }
    mc__addr_t a;
    char buf[MC__ADDR_STRLEN];
    if (rc == 0 && res->nkvs == 1 && res->kvs[0].vlen < sizeof(buf)) {
        memcpy(buf, res->kvs[0].val, res->kvs[0].vlen);
        buf[res->kvs[0].vlen] = '\0';
        rc = mc__addr_parse(buf, 50051, &a);
    } else if (rc == 0) {
        rc = -ENOENT; /* no leader now */
    }
    if (rc == 0)
        mc__log(MC__LOG_DEBUG, "the leader is %s", buf);
    mc__rpc_client_resolved(f->cl, &a, rc);
}

void mc__follow_resolve(mc__rpc_client_t *cl)
{
    mc__follow_t *f = mc__rpc_client_resolve_arg(cl);
    f->cl = cl;
    int rc = f->closed ? -ECANCELED : mc__etcd_range(f->etcd, f->key, f->klen, 0, on_leader, f);
    if (rc == 0)
        f->looking = 1;
    else
        mc__rpc_client_resolved(cl, NULL, rc);
}

/* Requests a lost connection may have cut off after the master handled
 * them, which are still right to send again. */
static int idempotent(uint16_t op)
{
    switch (op) {
    case MC__OP_PING:
    case MC__OP_HEARTBEAT:
    case MC__OP_GET_REPLICAS:
    case MC__OP_OPEN:
    case MC__OP_STAT:
    case MC__OP_LOOKUP:
    case MC__OP_LIST:
    case MC__OP_STATFS:
    case MC__OP_STATS:
    case MC__OP_XATTR_GET:
    case MC__OP_XATTR_LIST:
    case MC__OP_TASK_QUERY:
        return 1;
    default:
        return 0;
    }
}

static void again_end(again_t *g, int status, const char *body, size_t len)
{
    mc__follow_t *f = g->f;
    if (g->prev)
        g->prev->next = g->next;
    else
        f->calls = g->next;
    if (g->next)
        g->next->prev = g->prev;
    mc_timer_stop(&g->t);
    f->in_close++; /* the callback may close f: freed below, not under us */
    g->cb(g->arg, status, body, len);
    f->in_close--;
    free(g->body);
    free(g);
    free_if_done(f);
}

static void on_answer(void *arg, int status, const char *body, size_t len);
static void send_again(mc_timer_t *t);

static void wait_again(again_t *g)
{
    g->waiting = 1;
    mc_timer_start(g->f->loop, &g->t, RETRY_MS, 0, send_again);
}

/* Sends g; on a client still connecting, waits a moment. */
static void send_again(mc_timer_t *t)
{
    again_t *g = t->data;
    uint64_t now = mc_loop_now_ms();
    g->waiting = 0;
    if (g->f->closed || now >= g->deadline) {
        again_end(g, g->f->closed ? -ECANCELED : g->last, "", 0);
        return;
    }
    int rc = mc__rpc_client_call(g->cl, g->op, g->body, g->len, g->deadline - now, on_answer, g);
    if (rc == -ENOTCONN) {
        wait_again(g);
        return;
    }
    if (rc < 0)
        again_end(g, rc, "", 0);
}

static void on_answer(void *arg, int status, const char *body, size_t len)
{
    again_t *g = arg;
    int again = 0;
    if (status == -EREMCHG) {
        again = 1; /* refused unhandled: not the leader */
        mc__rpc_client_reconnect(g->cl);
    } else if (status == -ETIMEDOUT && idempotent(g->op)) {
        /* No answer in time (a change's answer may carry ETIMEDOUT from
         * the leader itself: its log could not be written): a leader that
         * stopped answering (stopped, cut off) may have been replaced:
         * look it up again for the next calls. */
        mc__rpc_client_reconnect(g->cl);
    } else if (status == -EAGAIN &&
               (g->op == MC__OP_PUT_START || g->op == MC__OP_CREATE || idempotent(g->op))) {
        again = 1; /* a new leader holds its segments a moment, and its
                      nodes may not have mounted yet (SEMANTICS) */
    } else if (status == -ECONNRESET || status == -EPIPE || status == -ENOTCONN ||
               status == -ECONNREFUSED || status == -ECONNABORTED) {
        again = idempotent(g->op);
    }
    if (!again || g->f->closed || mc_loop_now_ms() >= g->deadline) {
        again_end(g, status, body, len);
        return;
    }
    g->last = status;
    wait_again(g);
}

int mc__follow_call(mc__follow_t *f, mc__rpc_client_t *cl, uint16_t op, const void *body,
                    size_t len, uint64_t timeout_ms, mc__rpc_cb cb, void *arg)
{
    if (f->closed)
        return -ECANCELED;
    again_t *g = calloc(1, sizeof(*g));
    if (!g || !(g->body = malloc(len ? len : 1))) {
        free(g);
        return -ENOMEM;
    }
    memcpy(g->body, body, len);
    *g = (again_t){.f = f,
                   .cl = cl,
                   .op = op,
                   .body = g->body,
                   .len = len,
                   .deadline = mc_loop_now_ms() + timeout_ms,
                   .cb = cb,
                   .arg = arg,
                   .last = -ENOTCONN,
                   .next = f->calls};
    g->t.data = g;
    int rc = mc__rpc_client_call(cl, op, body, len, timeout_ms, on_answer, g);
    if (rc < 0 && rc != -ENOTCONN) {
        free(g->body);
        free(g);
        return rc;
    }
    if (f->calls)
        f->calls->prev = g;
    f->calls = g;
    if (rc == -ENOTCONN)
        wait_again(g);
    return 0;
}

void mc__follow_close(mc__follow_t *f)
{
    if (!f)
        return;
    f->closed = 1;
    f->in_close++;
    mc__etcd_t *e = f->etcd;
    f->etcd = NULL;
    mc__etcd_free(e); /* a lookup in flight ends now (on_leader) */
    for (again_t *g = f->calls; g; g = g->next)
        if (g->waiting) /* fails from the loop */
            mc_timer_start(f->loop, &g->t, 0, 0, send_again);
    f->in_close--;
    free_if_done(f);
}
