/*
 * control_plane.c - the control plane: a master's requests through its
 * service, and the service's tick (see control_plane.h).
 *
 * Every request completes at once: the service does no I/O.
 */
#include <errno.h>
#include <stdlib.h>

#include <string.h>

#include "runtime/log.h"
#include "runtime/rpc.h"
#include "server/control_plane.h"
#include "server/ha.h"

/* An answer held until the op log holds the change it reports. */
typedef struct mc__held {
    struct mc__held *next;
    uint64_t owner, seq;
    mc__conn_t *c; /* NULL once its owner is gone */
    mc__hdr_t h;
    int rc;
    mc__wbuf_t w;
} held_t;

/* The requests that look a key up. */
static int is_read(uint16_t op)
{
    return op == MC__OP_GET_REPLICAS || op == MC__OP_OPEN || op == MC__OP_STAT ||
           op == MC__OP_LOOKUP || op == MC__OP_XATTR_GET || op == MC__OP_XATTR_LIST;
}

/* Sends (rc 0) or fails (rc < 0) the held answers up to seq. */
static void on_durable(void *arg, uint64_t seq, int rc)
{
    mc__control_plane_t *p = arg;
    while (p->held && p->held->seq <= seq) {
        held_t *h = p->held;
        p->held = h->next;
        if (!p->held)
            p->held_tail = NULL;
        if (h->c && mc__rpc_reply(h->c, &h->h, rc < 0 ? rc : h->rc, rc < 0 ? NULL : h->w.p,
                                  rc < 0 ? 0 : h->w.len) < 0)
            mc__conn_close(h->c);
        free(h->w.p);
        free(h);
    }
}

/* Holds the answer (rc, w, taken over) to h on c until the log is durable
 * up to seq. Returns 0 or -ENOMEM. */
static int hold(mc__control_plane_t *p, uint64_t owner, mc__conn_t *c, const mc__hdr_t *h, int rc,
                mc__wbuf_t *w, uint64_t seq)
{
    held_t *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    *e = (held_t){.owner = owner, .seq = seq, .c = c, .h = *h, .rc = rc, .w = *w};
    if (p->held_tail)
        p->held_tail->next = e;
    else
        p->held = e;
    p->held_tail = e;
    return 0;
}

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
    if (p->ha && !mc__ha_writable(p->ha)) {
        /* Not the leader, or not sure of it: a change now could not go to
         * the log. The nodes' TTLs start again once we are. */
        mc__svc_forgive(p->svc, now);
        return;
    }
    mc__svc_stats(p->svc, &before);
    mc__svc_tick(p->svc, now);
    mc__svc_stats(p->svc, &after);
    if (after.puts_expired > before.puts_expired)
        mc__log(MC__LOG_INFO, "revoked %llu write(s) nobody renewed for the put TTL",
                (unsigned long long)(after.puts_expired - before.puts_expired));
    if (after.nodes_expired > before.nodes_expired)
        mc__log(MC__LOG_WARN,
                "%llu node(s) silent past their TTL: segments dropped, %llu "
                "object(s) lost",
                (unsigned long long)(after.nodes_expired - before.nodes_expired),
                (unsigned long long)(after.objects_lost - before.objects_lost));
}

void mc__control_plane_start(mc__control_plane_t *p, mc_loop_t *l, mc__svc_t *svc,
                             struct mc__ha *ha)
{
    p->svc = svc;
    p->ha = ha;
    if (ha)
        mc__ha_on_durable(ha, on_durable, p);
    p->tick.data = p;
    mc_timer_start(l, &p->tick, TICK_MS, TICK_MS, on_tick);
}

void mc__control_plane_stop(mc__control_plane_t *p)
{
    mc_timer_stop(&p->tick);
    if (p->ha)
        mc__ha_on_durable(p->ha, NULL, NULL);
    while (p->held) { /* never answered: the change may or may not stay */
        held_t *h = p->held;
        p->held = h->next;
        free(h->w.p);
        free(h);
    }
    p->held_tail = NULL;
}

int mc__control_plane_handle(mc__control_plane_t *p, uint64_t owner, mc__conn_t *c,
                             const mc__hdr_t *h, const char *body, size_t len)
{
    mc__wbuf_t w = {0};
    int rc = p->ha ? mc__ha_admit(p->ha, h->op) : 0;
    int admitted = rc == 0; /* a request refused here changed nothing: no wait */
    if (rc == 0)
        rc = mc__svc_handle(p->svc, owner, h->op, body, len, mc_loop_now_ms(), &w);
    if (rc == -EBADMSG) {
        free(w.p);
        return rc;
    }
    if (rc >= 0 && w.err)
        rc = w.err;
    if (rc == -ENOENT && p->ha && is_read(h->op) && mc__ha_arriving(p->ha) &&
        mc__svc_rebuilding(p->svc))
        rc = -EAGAIN; /* its node may not have mounted at this new leader yet */
    uint64_t seq;
    if (p->ha && admitted && (mc__svc_flush(p->svc), mc__ha_defers(p->ha, h->op, &seq)) &&
        hold(p, owner, c, h, rc, &w, seq) == 0)
        return 0;
    if (rc < 0 && h->op < sizeof(p->op_errors) / sizeof(p->op_errors[0]))
        p->op_errors[h->op]++;
    rc = mc__rpc_reply(c, h, rc, rc >= 0 ? w.p : NULL, rc >= 0 ? w.len : 0);
    free(w.p);
    return rc;
}

void mc__control_plane_owner_gone(mc__control_plane_t *p, uint64_t owner)
{
    for (held_t *h = p->held; h; h = h->next)
        if (h->owner == owner)
            h->c = NULL;
    if (p->svc)
        mc__svc_owner_gone(p->svc, owner, mc_loop_now_ms());
}
