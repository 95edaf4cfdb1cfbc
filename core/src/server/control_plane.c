/*
 * control_plane.c - the control plane: a master's requests through its
 * service, and the service's tick (see control_plane.h).
 *
 * Every request completes at once: the service does no I/O.
 */
#include <errno.h>
#include <stdlib.h>

#include "runtime/log.h"
#include "runtime/rpc.h"
#include "server/control_plane.h"

#define TICK_MS 1000

static void on_tick(mc_timer_t *t)
{
    mc__control_plane_t *p = t->data;
    mc__svc_stats_t before, after;
    uint64_t now = mc_loop_now_ms();
    /* A tick far behind its period means this loop was busy, not that the
     * nodes fell silent: their heartbeats may be waiting unread. */
    if (p->last_tick && now - p->last_tick > 2 * TICK_MS) {
        mc__log(MC__LOG_WARN, "the master was busy for %llu ms: node TTLs start again",
                (unsigned long long)(now - p->last_tick));
        mc__svc_forgive(p->svc, now);
    }
    p->last_tick = now;
    mc__svc_stats(p->svc, &before);
    mc__svc_tick(p->svc, now);
    mc__svc_stats(p->svc, &after);
    if (after.puts_expired > before.puts_expired)
        mc__log(MC__LOG_INFO, "%llu idle write(s) revoked past the put TTL",
                (unsigned long long)(after.puts_expired - before.puts_expired));
    if (after.nodes_expired > before.nodes_expired)
        mc__log(MC__LOG_WARN,
                "%llu node(s) silent past their TTL: segments dropped, %llu "
                "object(s) lost",
                (unsigned long long)(after.nodes_expired - before.nodes_expired),
                (unsigned long long)(after.objects_lost - before.objects_lost));
}

void mc__control_plane_start(mc__control_plane_t *p, mc_loop_t *l, mc__svc_t *svc)
{
    p->svc = svc;
    p->tick.data = p;
    mc_timer_start(l, &p->tick, TICK_MS, TICK_MS, on_tick);
}

void mc__control_plane_stop(mc__control_plane_t *p)
{
    mc_timer_stop(&p->tick);
}

int mc__control_plane_handle(mc__control_plane_t *p, uint64_t owner, mc__conn_t *c,
                             const mc__hdr_t *h, const char *body, size_t len)
{
    mc__wbuf_t w = {0};
    int rc = mc__svc_handle(p->svc, owner, h->op, body, len, mc_loop_now_ms(), &w);
    if (rc == -EBADMSG) {
        free(w.p);
        return rc;
    }
    if (rc >= 0 && w.err)
        rc = w.err;
    if (rc < 0 && h->op < sizeof(p->op_errors) / sizeof(p->op_errors[0]))
        p->op_errors[h->op]++;
    rc = mc__rpc_reply(c, h, rc, rc >= 0 ? w.p : NULL, rc >= 0 ? w.len : 0);
    free(w.p);
    return rc;
}

void mc__control_plane_owner_gone(mc__control_plane_t *p, uint64_t owner)
{
    if (p->svc)
        mc__svc_owner_gone(p->svc, owner, mc_loop_now_ms());
}
