/*
 * writer_idle.c - idle streaming writers renewed while the client runs.
 *
 * The master revokes a write that nobody touched for its put TTL, and the
 * write lease it grants is at most that TTL. A writer that moves bytes
 * renews its lease as it goes (writer.c, w_stale()); one left idle (a file
 * held open for writing, written now and then) is renewed here once half
 * its lease is gone, with an empty PUT_GROW, so that its write lasts as
 * long as this client runs and holds it. A client that stops or loses its
 * connection stops renewing, and the master revokes its writes as before.
 * One timer for all of them, armed for the earliest due; an embedded
 * store's master never revokes its own writers, so it has none. A renewal
 * counts as one of its writer's ops (w->ops): a commit or an abort waits
 * for it.
 */
#include <errno.h>
#include <stdlib.h>

#include "client/remote_i.h"
#include "runtime/loop_i.h"

static void renew_arm(mc_store_t *s, uint64_t at);

#define W_IDLE_GAP_MS 100

/* An idle renewal's own record, so that its answer finds out whether its
 * writer is still there: a store closed on its loop's thread frees its
 * writers at once, and the answer (-ECANCELED) comes later. */
struct w_renewal {
    mc_writer_t *w; /* NULL: gone */
};

void mc__writer_forget_renewal(mc_writer_t *w)
{
    if (w->renewal)
        w->renewal->w = NULL;
    w->renewal = NULL;
}

static void w_idle_renewed(void *arg, int status, const char *body, size_t len)
{
    struct w_renewal *r = arg;
    mc_writer_t *w = r->w;
    free(r);
    if (!w)
        return;
    w->renewal = NULL;
    status = mc__writer_renewed(w, status, body, len);
    w->renew_failed = status < 0;
    if (status < 0 && !w->err)
        w->renew_sent = mc__loop_time(w->s->loop); /* a timeout: again a second from now */
    if (!w->ending && !w->err && w->s->rm)
        renew_arm(w->s, status >= 0 ? w->renew_at : w->renew_sent + 1000);
    mc__writer_op_ended(w);
}

/* Sends w's idle renewal; 0 or -errno. */
static int w_idle_renew(mc_writer_t *w, uint64_t now)
{
    struct w_renewal *r = malloc(sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->w = w;
    w->renew_sent = now;
    int rc = mc__mcall(w->s, MC__OP_PUT_GROW, w_idle_renewed, r, "qqqu", w->put_id, (uint64_t)0,
                       (uint64_t)0, 0u);
    if (rc < 0) {
        free(r);
        return rc;
    }
    w->renewal = r;
    w->ops++;
    return 0;
}

/*
 * Renews the idle writers due: those whose lease is half gone, and with
 * them those within a quarter of a lease of it (renewed early). The timer
 * is armed for the earliest due, so a writer is renewed a quarter to half
 * a lease after its last renewal, and the timer fires at most about once a
 * quarter of a lease however many writers it serves (each firing walks
 * them all).
 */
static void renew_tick(mc_timer_t *t)
{
    mc_store_t *s = t->data;
    struct mc__remote *rm = s->rm;
    uint64_t now = mc__loop_time(s->loop), next = UINT64_MAX;
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
        if (w_idle_renew(w, now) < 0) {
            w->renew_failed = 1; /* could not be sent: again in a second */
            next = now + 1000 < next ? now + 1000 : next;
        }
    }
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
