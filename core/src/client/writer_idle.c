/*
 * writer_idle.c - idle streaming writers renewed while the client runs.
 *
 * The master revokes a write that nobody touched for its put TTL, and the
 * write lease it grants is at most that TTL. A writer that moves bytes
 * renews its lease as it goes (writer.c, w_stale()); one left idle (a file
 * held open for writing, written now and then) is renewed here once half
 * its lease is gone, in one PUT_RENEW with the others then due, so that its
 * write lasts as long as this client runs and holds it: the master's calls
 * grow with time, not with the number of idle writers. A client that stops
 * or loses its connection stops renewing, and the master revokes its
 * writes as before. One timer for all of them, armed for the earliest due;
 * an embedded store's master never revokes its own writers, so it has
 * none. A renewal counts as one of its writer's ops (w->ops): a commit or
 * an abort waits for it.
 */
#include <errno.h>
#include <stdlib.h>

#include "client/remote_i.h"
#include "runtime/loop_i.h"

static void renew_arm(mc_store_t *s, uint64_t at);

#define W_IDLE_GAP_MS 100

/* One PUT_RENEW in flight: the writers it renews, in the order of its put
 * ids, so that its answer finds out which are still there (NULL: gone; a
 * store's close frees its writers without waiting for renewals, whose
 * answer, -ECANCELED, may come later). */
struct w_renewal {
    uint32_t n;
    mc_writer_t *w[MC__RENEW_MAX];
};

void mc__writer_forget_renewal(mc_writer_t *w)
{
    struct w_renewal *r = w->renewal;
    for (uint32_t i = 0; r && i < r->n; i++)
        if (r->w[i] == w)
            r->w[i] = NULL;
    w->renewal = NULL;
}

/* w's renewal ended with status (and, renewed, its replica set). */
static void w_idle_renewed(mc_writer_t *w, int status, const char *rs, size_t rl)
{
    w->renewal = NULL;
    status = mc__writer_renewed(w, status, rs, rl);
    w->renew_failed = status < 0;
    if (status < 0 && !w->err)
        w->renew_sent = mc__loop_time(w->s->loop); /* a timeout: again a second from now */
    if (!w->ending && !w->err && w->s->rm)
        renew_arm(w->s, status >= 0 ? w->renew_at : w->renew_sent + 1000);
    mc__writer_op_ended(w);
}

static void renewal_answered(void *arg, int status, const char *body, size_t len)
{
    struct w_renewal *r = arg;
    mc__wire_replica_t scratch[MC__MAX_REPLICAS];
    for (uint32_t i = 0; i < r->n; i++) {
        int64_t st = status;
        const char *rs = NULL;
        size_t rl = 0;
        if (status >= 0 &&
            mc__take_renewal(&body, &len, &st, &rs, &rl, scratch, MC__MAX_REPLICAS) < 0) {
            st = -EIO; /* this one and those after it */
            status = -EIO;
        }
        if (st < -4095 || st > MC__RENEWED_BARE)
            st = -EIO; /* no status a master sends */
        if (r->w[i])
            w_idle_renewed(r->w[i], (int)st, rs, rl);
    }
    free(r);
}

/* Sends r, the idle renewals of r->n writers (a PUT_RENEW); each counts
 * as one of its writer's ops until the answer. One that cannot be sent is
 * tried again a second from now (*next). */
static void renewal_send(mc_store_t *s, struct w_renewal *r, uint64_t now, uint64_t *next)
{
    mc__wbuf_t *b = mc__link_body(s->rm->master);
    for (uint32_t i = 0; i < r->n; i++)
        mc__pack(b, "q", r->w[i]->put_id);
    int rc = mc__link_send(s->rm->master, MC__OP_PUT_RENEW, s->timeout_ms, renewal_answered, r);
    for (uint32_t i = 0; i < r->n; i++) {
        mc_writer_t *w = r->w[i];
        w->renew_sent = now;
        w->renew_failed = rc < 0;
        if (rc == 0) {
            w->renewal = r;
            w->ops++;
        }
    }
    if (rc < 0) {
        free(r);
        *next = now + 1000 < *next ? now + 1000 : *next;
    }
}

/*
 * Renews the idle writers due: those whose lease is half gone, and with
 * them those within a quarter of a lease of it (renewed early), in one
 * PUT_RENEW per MC__RENEW_MAX of them. The timer is armed for the earliest
 * due, so a writer is renewed a quarter to half a lease after its last
 * renewal, and the timer fires at most about once a quarter of a lease
 * however many writers it serves (each firing walks them all).
 */
static void renew_tick(mc_timer_t *t)
{
    mc_store_t *s = t->data;
    struct mc__remote *rm = s->rm;
    uint64_t now = mc__loop_time(s->loop), next = UINT64_MAX;
    struct w_renewal *r = NULL;
    if (!rm)
        return;
    rm->renew_due = 0;
    for (mc_writer_t *w = s->writers; w; w = w->next) {
        if (!w->handed || w->ending || w->renewal || w->err)
            continue;
        /* Not sooner than W_IDLE_GAP_MS after the last (a second after one
         * that failed): a lease of a few milliseconds (a tiny put TTL) must
         * not become a storm of calls. */
        uint64_t gap = w->renew_sent + (w->renew_failed ? 1000 : W_IDLE_GAP_MS);
        uint64_t due = w->renew_at > gap ? w->renew_at : gap;
        if (now + w->lease_ms / 4 < due) {
            next = due < next ? due : next;
            continue;
        }
        if (!r && !(r = calloc(1, sizeof(*r)))) {
            w->renew_failed = 1; /* no memory: again in a second */
            w->renew_sent = now;
            next = now + 1000 < next ? now + 1000 : next;
            continue;
        }
        r->w[r->n++] = w;
        if (r->n == MC__RENEW_MAX) {
            renewal_send(s, r, now, &next);
            r = NULL;
        }
    }
    if (r)
        renewal_send(s, r, now, &next);
    if (next != UINT64_MAX)
        renew_arm(s, next);
}

static void renew_arm(mc_store_t *s, uint64_t at)
{
    struct mc__remote *rm = s->rm;
    if (s->svc || (rm->renew_due && rm->renew_due <= at))
        return;
    uint64_t now = mc__loop_time(s->loop);
    rm->renew_due = at;
    rm->renew.data = s;
    if (mc_timer_start(s->loop, &rm->renew, at > now ? at - now : 1, 0, renew_tick) < 0)
        rm->renew_due = 0; /* no memory: the next writer handed out tries again */
}

void mc__writer_handed(mc_writer_t *w)
{
    w->handed = 1;
    if (w->s->rm)
        renew_arm(w->s, w->renew_at);
}
