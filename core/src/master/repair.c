/*
 * repair.c - re-replication of under-replicated objects (see repair.h).
 *
 * Finding work: a scan walks the key index from a cursor (a key, so that it
 * survives changes between ticks), a bounded number of keys per tick,
 * stopping when the in-flight or bandwidth limit is reached and going on
 * from the cursor at the next tick. A scan starts when something may have
 * become under-replicated (mc__repair_wake()), and again a while after a
 * scan that found objects it could not place. Tasks and holds are short
 * lists: at most `inflight` tasks, and holds only for replicas dropped in
 * the last few seconds.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "master/repair.h"

#define SCAN_PER_TICK 100000 /* keys looked at per tick */
#define RETRY_MS 5000        /* rescan this long after a scan that left objects waiting */
#define UNTAKEN_MS 10000     /* a task its node does not take in this long is dropped */

typedef struct hold {
    mc__replica_t rep;
    uint64_t until;
    uint64_t epoch; /* its segment's node must enforce it too (0: no) */
    struct hold *next;
} hold_t;

struct mc__repair {
    mc__repair_opts_t o;
    mc__repair_task_t *tasks;
    hold_t *holds;
    uint64_t next_id;
    int woken, scanning;
    char *cursor; /* the last key scanned (NULL: from the start) */
    size_t clen;
    uint64_t found_waiting; /* in the scan going on */
    uint64_t retry_at;      /* 0: no rescan planned */
    int64_t budget;         /* bytes that may start now (bytes_per_s) */
    uint64_t last_tick;
    mc__repair_stats_t st;
    mc__repair_job_cb job_cb; /* told of the end of a job's copies */
    void *job_arg;
};

int mc__repair_new(mc__repair_t **out, const mc__repair_opts_t *o)
{
    mc__repair_t *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    if (o)
        r->o = *o;
    if (!r->o.inflight)
        r->o.inflight = 4;
    r->next_id = 1;
    *out = r;
    return 0;
}

static void task_free(mc__repair_t *r, mc__master_t *m, mc__repair_task_t *t)
{
    mc__master_replica_release(m, &t->dst);
    free(t->key);
    free(t);
    r->st.inflight--;
}

/* Ends t, taken off the list, with rc (v: the version its replica joined
 * when rc is 0): a repair is counted, a job's owner is told. */
static void task_end(mc__repair_t *r, mc__master_t *m, mc__repair_task_t *t, int rc,
                     mc__version_t *v, uint64_t now)
{
    if (!t->job && rc < 0)
        r->st.failed++;
    if (t->job && r->job_cb)
        r->job_cb(r->job_arg, t->job, rc, rc == 0 ? v : NULL, now);
    task_free(r, m, t);
}

void mc__repair_free(mc__repair_t *r, mc__master_t *m)
{
    if (!r)
        return;
    while (r->tasks) {
        mc__repair_task_t *t = r->tasks;
        r->tasks = t->next;
        task_free(r, m, t);
    }
    while (r->holds) {
        hold_t *h = r->holds;
        r->holds = h->next;
        mc__master_replica_release(m, &h->rep);
        free(h);
    }
    free(r->cursor);
    free(r);
}

void mc__repair_wake(mc__repair_t *r)
{
    r->woken = 1;
}

void mc__repair_seg_dropped(mc__repair_t *r, mc__master_t *m, uint32_t seg, uint64_t now)
{
    mc__repair_source_gone(r, 0, seg); /* mounted again, a copy may land where they were */
    for (mc__repair_task_t **pp = &r->tasks; *pp;) {
        mc__repair_task_t *t = *pp;
        if (t->dst.seg != seg) {
            pp = &t->next;
            continue;
        }
        *pp = t->next;
        task_end(r, m, t, -ENODEV, NULL, now);
    }
    for (hold_t **pp = &r->holds; *pp;) {
        hold_t *h = *pp;
        if (h->rep.seg != seg) {
            pp = &h->next;
            continue;
        }
        *pp = h->next;
        mc__master_replica_release(m, &h->rep);
        free(h);
    }
    r->woken = 1;
}

void mc__repair_hold(mc__repair_t *r, mc__master_t *m, mc__replica_t *rep, uint64_t until,
                     uint64_t epoch)
{
    hold_t *h = calloc(1, sizeof(*h));
    if (!h) { /* no memory to remember it: give the space back now */
        mc__master_replica_release(m, rep);
        return;
    }
    h->rep = *rep;
    memset(rep, 0, sizeof(*rep));
    h->until = until;
    h->epoch = epoch;
    h->next = r->holds;
    r->holds = h;
}

static int has_task(const mc__repair_t *r, uint64_t vid)
{
    for (const mc__repair_task_t *t = r->tasks; t; t = t->next)
        if (t->vid == vid)
            return 1;
    return 0;
}

/* The target with the most free space that has no replica of v and room
 * for it; NULL if none. */
static const mc__repair_target_t *pick_target(mc__master_t *m, const mc__version_t *v,
                                              const mc__repair_target_t *targets, size_t n)
{
    const mc__repair_target_t *best = NULL;
    const uint64_t bytes = mc__vrep_bytes(v, 0);
    uint64_t best_free = 0;
    for (size_t i = 0; i < n; i++) {
        if (mc__version_has_replica(v, targets[i].seg))
            continue;
        uint64_t fr = mc__master_segment_free(m, targets[i].seg);
        if (fr >= bytes && fr > 0 && (!best || fr > best_free)) {
            best = &targets[i];
            best_free = fr;
        }
    }
    return best;
}

/* Allocates space for a replica of v on target tg, with v's layout (holes
 * stay holes), and files the task that copies it there into *out. Returns
 * 0, -ENOSPC or -ENOMEM. */
static int plan_one(mc__repair_t *r, mc__master_t *m, mc__version_t *v,
                    const mc__repair_target_t *tg, uint64_t now, mc__repair_task_t **out)
{
    mc__replica_t rep;
    mc__repair_task_t *t = calloc(1, sizeof(*t));
    char *key = t ? malloc(v->klen + 1) : NULL;
    if (!key) {
        free(t);
        return -ENOMEM;
    }
    mc__extent_t one;
    const mc__replica_t r0 = mc__vrep_get(v, 0, &one);
    if (mc__master_replica_alloc_like(m, tg->seg, &r0, &rep) < 0) {
        free(key);
        free(t);
        return -ENOSPC;
    }
    memcpy(key, mc__vkey(v), v->klen + 1);
    *t = (mc__repair_task_t){.id = r->next_id++,
                             .node = tg->node,
                             .vid = v->id,
                             .key = key,
                             .klen = v->klen,
                             .size = mc__vsize(v),
                             /* >= 10 MB/s of its bytes (a repair skips holes) */
                             .limit_ms = 10000 + mc__replica_bytes(&rep) / (10 << 10),
                             .dst = rep,
                             .created = now,
                             .next = r->tasks};
    r->tasks = t;
    r->st.inflight++;
    r->budget -= (int64_t)mc__replica_bytes(&rep);
    *out = t;
    return 0;
}

/* Plans one more replica for v; returns 1 if it did, 0 if v must wait. */
static int plan(mc__repair_t *r, mc__master_t *m, mc__version_t *v,
                const mc__repair_target_t *targets, size_t n, uint64_t now)
{
    const mc__repair_target_t *tg = pick_target(m, v, targets, n);
    if (!tg)
        return 0;
    if (mc__vcap(v) == 0) { /* an empty object: nothing to copy */
        mc__replica_t rep;
        memset(&rep, 0, sizeof(rep));
        rep.seg = tg->seg;
        if (mc__master_replica_attach(v, &rep) < 0)
            return 0;                   /* out of memory: it waits */
        mc__master_dirty_records(m, v); /* the new replica's node keeps its record */
        r->st.started++;
        r->st.done++;
        r->woken = 1; /* it may want still more */
        return 1;
    }
    mc__repair_task_t *t;
    if (plan_one(r, m, v, tg, now, &t) < 0)
        return 0;
    r->st.started++;
    return 1;
}

static void expire(mc__repair_t *r, mc__master_t *m, uint64_t now)
{
    for (mc__repair_task_t **pp = &r->tasks; *pp;) {
        mc__repair_task_t *t = *pp;
        int over = t->expires ? now >= t->expires : now - t->created >= UNTAKEN_MS;
        if (!over) {
            pp = &t->next;
            continue;
        }
        *pp = t->next;
        task_end(r, m, t, -ETIMEDOUT, NULL, now);
        r->woken = 1;
    }
    for (hold_t **pp = &r->holds; *pp;) {
        hold_t *h = *pp;
        int fz = h->epoch && r->o.fenced ? r->o.fenced(r->o.fenced_arg, h->rep.seg, h->epoch) : 1;
        if (!fz || (now < h->until && fz != 2)) {
            pp = &h->next;
            continue;
        }
        *pp = h->next;
        mc__master_replica_release(m, &h->rep);
        free(h);
    }
}

int mc__repair_tick(mc__repair_t *r, mc__master_t *m, const mc__repair_target_t *targets, size_t n,
                    uint64_t now)
{
    expire(r, m, now);
    if (r->o.bytes_per_s) {
        uint64_t dt = r->last_tick && now > r->last_tick ? now - r->last_tick : 0;
        r->budget += (int64_t)(r->o.bytes_per_s / 1000 * dt);
        if (r->budget > (int64_t)r->o.bytes_per_s)
            r->budget = (int64_t)r->o.bytes_per_s; /* one second of burst */
    }
    r->last_tick = now;
    if (r->o.off)
        return 0;
    if (!r->scanning && (r->woken || (r->retry_at && now >= r->retry_at))) {
        r->scanning = 1;
        r->woken = 0;
        r->retry_at = 0;
        r->found_waiting = 0;
        free(r->cursor);
        r->cursor = NULL;
        r->clen = 0;
    }
    int planned = 0;
    for (size_t seen = 0; r->scanning && seen < SCAN_PER_TICK; seen++) {
        if (r->st.inflight >= r->o.inflight || (r->o.bytes_per_s && r->budget <= 0))
            break;
        mc__version_t *v = mc__master_next(m, r->cursor, r->clen);
        if (!v) {
            r->scanning = 0;
            r->st.waiting = r->found_waiting;
            if (r->found_waiting)
                r->retry_at = now + RETRY_MS;
            break;
        }
        char *c = malloc(v->klen ? v->klen : 1);
        if (!c)
            break;
        memcpy(c, mc__vkey(v), v->klen);
        free(r->cursor);
        r->cursor = c;
        r->clen = v->klen;
        if (v->nrep == 0 || v->nrep >= v->want || has_task(r, v->id))
            continue;
        if (plan(r, m, v, targets, n, now))
            planned++;
        else
            r->found_waiting++;
    }
    return planned;
}

int mc__repair_pending(const mc__repair_t *r, uint64_t node)
{
    for (const mc__repair_task_t *t = r->tasks; t; t = t->next)
        if (t->node == node && !t->expires)
            return 1;
    return 0;
}

mc__repair_task_t *mc__repair_take(mc__repair_t *r, uint64_t node, uint64_t now)
{
    for (mc__repair_task_t *t = r->tasks; t; t = t->next) {
        if (t->node == node && !t->expires) {
            t->expires = now + t->limit_ms + MC__REPAIR_MARGIN_MS;
            return t;
        }
    }
    return NULL;
}

static uint64_t first_off(const mc__replica_t *rep)
{
    return rep->n ? rep->ext[0].off : 0;
}

void mc__repair_sources(mc__repair_task_t *t, const mc__version_t *v)
{
    t->nsrc = 0;
    for (uint32_t i = 0; i < v->nrep && i < MC__MAX_REPLICAS; i++) {
        mc__extent_t one;
        mc__replica_t rep = mc__vrep_get(v, i, &one);
        t->src[i].seg = rep.seg;
        t->src[i].off = first_off(&rep);
        t->nsrc = i + 1;
    }
}

/* Whether every source t's node was told to read is still a replica of v. */
static int sources_kept(const mc__repair_task_t *t, const mc__version_t *v)
{
    for (uint32_t i = 0; i < t->nsrc; i++) {
        int kept = 0;
        for (uint32_t r = 0; r < v->nrep && !kept; r++) {
            mc__extent_t one;
            mc__replica_t rep = mc__vrep_get(v, r, &one);
            kept = rep.seg == t->src[i].seg && first_off(&rep) == t->src[i].off;
        }
        if (!kept)
            return 0;
    }
    return 1;
}

int mc__repair_finish(mc__repair_t *r, mc__master_t *m, uint64_t node, uint64_t id, int status,
                      uint64_t now)
{
    mc__repair_task_t **pp = &r->tasks;
    while (*pp && ((*pp)->id != id || (*pp)->node != node))
        pp = &(*pp)->next;
    mc__repair_task_t *t = *pp;
    if (!t)
        return -ENOENT;
    *pp = t->next;
    uint64_t bytes = mc__replica_bytes(&t->dst); /* copied: a sparse file's holes are not */
    if (bytes > t->size)
        bytes = t->size;
    mc__version_t *v = status == 0 ? mc__master_find(m, t->key, t->klen) : NULL;
    int rc = status == 0 || status == -ENOENT ? -ESTALE : -EIO; /* -ENOENT: v went */
    int at = v && v->id == t->vid && v->state == MC__PUBLISHED && !t->stale && sources_kept(t, v)
                 ? mc__master_replica_attach(v, &t->dst)
                 : -ESTALE;
    if (at == 0) {
        /* The new replica's node keeps its record (and the op log). */
        mc__master_dirty_records(m, v);
        rc = 0;
        if (!t->job) {
            r->st.done++;
            r->st.bytes += bytes;
        }
    } else if (at == -EEXIST && t->job) {
        rc = 0; /* another copy got there first: the target has its replica */
    } else if (at == -ENOSPC) {
        rc = -ENOSPC; /* MC__MAX_REPLICAS meanwhile */
    }
    task_end(r, m, t, rc, v, now); /* frees dst unless it joined v */
    r->woken = 1;                  /* the version may want more, or another target */
    return 0;
}

void mc__repair_source_gone(mc__repair_t *r, uint64_t vid, uint32_t seg)
{
    for (mc__repair_task_t *t = r->tasks; t; t = t->next) {
        if (vid && t->vid != vid)
            continue;
        for (uint32_t i = 0; i < t->nsrc; i++)
            if (t->src[i].seg == seg)
                t->stale = 1;
    }
}

void mc__repair_stats(const mc__repair_t *r, mc__repair_stats_t *st)
{
    *st = r->st;
}

void mc__repair_on_job(mc__repair_t *r, mc__repair_job_cb cb, void *arg)
{
    r->job_cb = cb;
    r->job_arg = arg;
}

int mc__repair_copy_to(mc__repair_t *r, mc__master_t *m, mc__version_t *v, uint32_t seg,
                       uint64_t node, uint64_t job, uint64_t now)
{
    if (mc__version_has_replica(v, seg))
        return -EEXIST;
    if (v->nrep >= MC__MAX_REPLICAS || v->nrep == 0)
        return -ENOSPC;
    mc__repair_target_t tg = {seg, node};
    mc__repair_task_t *t = NULL;
    if (mc__vcap(v) == 0) { /* an empty object: nothing to copy */
        mc__replica_t rep = {.seg = seg};
        int rc = mc__master_replica_attach(v, &rep);
        if (rc < 0)
            return rc;
        mc__master_dirty_records(m, v);
        return 1;
    }
    int rc = plan_one(r, m, v, &tg, now, &t);
    if (rc < 0)
        return rc;
    t->job = job;
    return 0;
}
