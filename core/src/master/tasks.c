/*
 * tasks.c - copy and move tasks, the master's side: TASK_CREATE and
 * TASK_QUERY (docs/PROTOCOL.md), a bounded table of tasks, and their run;
 * and REPLICA_DROP, a move's second half on its own.
 *
 * A task names a key and target segments (and, for a move, a source). It
 * waits in a queue (at most MC_TASK_PENDING_MAX) until fewer than RUN_MAX
 * tasks run; then each target without a replica gets a copy planned by the
 * repair machinery (mc__repair_copy_to(), repair.h): space on the target,
 * the target node copying the bytes from a replica, and the replica joining
 * the very version it was copied from, or freed if that version was
 * replaced or removed meanwhile (the task then fails: no stale bytes join a
 * newer version). A move then takes the source replica off the version and
 * holds its space until the read leases handed out with it have run out
 * (repair.h's holds); while the version has open handles, which may read
 * the source for as long as they stay open, it waits, and a copy that went
 * meanwhile (its node died, another move took it) fails the move with the
 * source kept: a drop never takes a version's last replica. Finished tasks stay
 * for queries, the last MC_TASK_PENDING_MAX of them.
 *
 * The table is this master's only: a master that restarts or hands over to
 * a standby forgets its tasks (their copies end as repairs' do). What a
 * task changes is logged as any change of replicas: the new replica through
 * the dirty list (a PUT notice for each of the version's segments), the
 * dropped source as MC__LOG_REP_GONE after those (mc__svc_replica_gone()).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/service_i.h"

#define RUN_MAX 16 /* tasks copying at once */

typedef struct task {
    mc__idnode_t h; /* in mc__tasks.by_id by its id */
    uint32_t type, status;
    int32_t error;
    char *key; /* the object's key (owned) */
    size_t klen;
    uint64_t vid; /* the version copied, once started */
    uint32_t src; /* a move's source segment */
    uint32_t n, seg[MC_TASK_TARGETS_MAX];
    uint64_t node[MC_TASK_TARGETS_MAX];
    uint32_t running; /* copies in flight */
    int dropping;     /* a move copied: the source goes once no handle is open */
    int64_t created_ms, updated_ms;
    char msg[sizeof(((mc_task_info_t *)0)->message)];
    struct task *next; /* on the pending or the finished queue, or running */
} task_t;

typedef struct tqueue {
    task_t *head, *tail;
    size_t n;
} tqueue_t;

struct mc__tasks {
    mc__ids_t by_id;
    tqueue_t pending, done;
    task_t *running;
    size_t nrunning;
};

static void q_push(tqueue_t *q, task_t *t)
{
    t->next = NULL;
    if (q->tail)
        q->tail->next = t;
    else
        q->head = t;
    q->tail = t;
    q->n++;
}

static task_t *q_pop(tqueue_t *q)
{
    task_t *t = q->head;
    if (t && !(q->head = t->next))
        q->tail = NULL;
    if (t)
        q->n--;
    return t;
}

static int64_t wall_ms(const mc__svc_t *svc)
{
    return svc->o.wall_ns ? svc->o.wall_ns() / 1000000 : 0;
}

static void task_free(mc__tasks_t *ts, task_t *t)
{
    mc__ids_del(&ts->by_id, t->h.id);
    free(t->key);
    free(t);
}

void mc__tasks_free(mc__tasks_t *ts)
{
    if (!ts)
        return;
    task_t *t;
    while ((t = q_pop(&ts->pending)))
        task_free(ts, t);
    while ((t = q_pop(&ts->done)))
        task_free(ts, t);
    while ((t = ts->running)) {
        ts->running = t->next;
        task_free(ts, t);
    }
    mc__ids_fini(&ts->by_id);
    free(ts);
}

static void set_msg(task_t *t, int rc, const char *fmt, const char *what)
{
    if (!t->error && rc < 0) {
        t->error = rc;
        snprintf(t->msg, sizeof(t->msg), fmt, what);
    }
}

/* Ends running task t: off the running list, on the finished queue (the
 * oldest finished one goes past MC_TASK_PENDING_MAX). */
static void finish(mc__svc_t *svc, task_t *t)
{
    mc__tasks_t *ts = svc->tasks;
    for (task_t **pp = &ts->running; *pp; pp = &(*pp)->next) {
        if (*pp == t) {
            *pp = t->next;
            ts->nrunning--;
            break;
        }
    }
    t->status = t->error ? MC_TASK_FAILED : MC_TASK_SUCCESS;
    t->updated_ms = wall_ms(svc);
    q_push(&ts->done, t);
    if (ts->done.n > MC_TASK_PENDING_MAX)
        task_free(ts, q_pop(&ts->done));
}

/* Takes v's replica on seg off v (it has one there and others): its node
 * forgets the record, the op log learns it, the space is held until the
 * read leases handed out with it have run out, and the repair is not to
 * put it back. */
static void drop_replica(mc__svc_t *svc, mc__version_t *v, uint32_t seg, uint64_t now)
{
    mc__replica_t rep;
    if (v->nrep < 2)
        return; /* the last one: that is a REMOVE, never a drop */
    if (mc__version_take_replica(v, seg, &rep) <= 0) /* none there, or out of memory: kept */
        return;
    /* What the dirty list holds (a task's new replica) is logged first. */
    mc__svc_flush(svc);
    mc__svc_replica_gone(svc, v, seg);
    mc__repair_source_gone(svc->rp, v->id, seg); /* copies reading it join nothing */
    uint64_t until = mc__version_lease(svc->m, v);
    until = until > now ? until : now;
    mc__repair_hold(svc->rp, svc->m, &rep, until + MC__REPAIR_MARGIN_MS, 0);
    if (v->nrep < v->want) {
        v->want = v->nrep;
        mc__master_dirty_records(svc->m, v);
    }
}

/* A move whose copy is done takes the source replica off v, once no handle
 * has v open; returns 1 when the task is over. */
static int drop_source(mc__svc_t *svc, task_t *t, uint64_t now)
{
    mc__version_t *v = mc__master_find(svc->m, t->key, t->klen);
    if (!v || v->id != t->vid) {
        snprintf(t->msg, sizeof(t->msg), "the object was replaced after its copy");
        return 1; /* the source goes with that version */
    }
    if (mc__vopen(v)) {
        t->dropping = 1;
        return 0;
    }
    if (!mc__version_has_replica(v, t->seg[0])) {
        /* The copy went while the move waited (its node died, another
         * move took it): the source may be the last replica left. */
        set_msg(t, -ENODEV, "the copy on the target went before the source could go%s", "");
        return 1;
    }
    drop_replica(svc, v, t->src, now);
    return 1;
}

/* Ends t if nothing of it runs any more. */
static void settle(mc__svc_t *svc, task_t *t, uint64_t now)
{
    if (t->running)
        return;
    if (!t->error && t->type == MC_TASK_MOVE && !drop_source(svc, t, now))
        return;
    finish(svc, t);
}

/* Plans the copies of task t (taken off the queue). */
static void start(mc__svc_t *svc, task_t *t, uint64_t now)
{
    mc__tasks_t *ts = svc->tasks;
    t->next = ts->running;
    ts->running = t;
    ts->nrunning++;
    t->status = MC_TASK_PROCESSING;
    t->updated_ms = wall_ms(svc);
    mc__version_t *v = mc__master_find(svc->m, t->key, t->klen);
    if (!v || !v->nrep)
        set_msg(t, -ENOENT, "the object is gone%s", "");
    else if (t->type == MC_TASK_MOVE && !mc__version_has_replica(v, t->src))
        set_msg(t, -ESTALE, "the source holds no replica any more%s", "");
    for (uint32_t i = 0; !t->error && i < t->n; i++) {
        t->vid = v->id;
        seginfo_t *si = mc__svc_seg_info(svc, t->seg[i]);
        if (!si || si->node != t->node[i]) {
            set_msg(t, -ENXIO, "target %s is gone", si && si->addr ? si->addr : "segment");
            break;
        }
        if (!mc__version_has_replica(v, t->seg[i]) &&
            mc__master_segment_held(svc->m, t->seg[i], now)) {
            /* Mounted again a moment ago: writers of before may still
             * write into its free space, as for a repair. */
            set_msg(t, -EAGAIN, "target %s is on hold (mounted again a moment ago)",
                    si->addr ? si->addr : "segment");
            break;
        }
        int rc = mc__repair_copy_to(svc->rp, svc->m, v, t->seg[i], t->node[i], t->h.id, now);
        if (rc == 0)
            t->running++;
        else if (rc != -EEXIST && rc != 1)
            set_msg(t, rc, "no room for a replica on %s", si->addr ? si->addr : "the target");
    }
    settle(svc, t, now);
}

static void start_some(mc__svc_t *svc, uint64_t now)
{
    mc__tasks_t *ts = svc->tasks;
    while (ts->nrunning < RUN_MAX && ts->pending.head)
        start(svc, q_pop(&ts->pending), now);
}

/* The repair's word on one copy of a task (mc__repair_job_cb). */
static void on_job(void *arg, uint64_t job, int rc, mc__version_t *v, uint64_t now)
{
    mc__svc_t *svc = arg;
    (void)v;
    task_t *t = (task_t *)mc__ids_get(&svc->tasks->by_id, job);
    if (!t || t->status != MC_TASK_PROCESSING || !t->running)
        return;
    t->running--;
    if (rc == -ESTALE)
        set_msg(t, rc, "the object was replaced or removed during the copy%s", "");
    else if (rc == -ENODEV)
        set_msg(t, rc, "the target's node went away during the copy%s", "");
    else if (rc < 0)
        set_msg(t, rc, "the copy failed (%s)", rc == -ETIMEDOUT ? "timed out" : "node error");
    settle(svc, t, now);
}

void mc__tasks_tick(mc__svc_t *svc, uint64_t now)
{
    mc__tasks_t *ts = svc->tasks;
    if (!ts)
        return;
    for (task_t *t = ts->running, *next; t; t = next) {
        next = t->next;
        if (t->dropping && drop_source(svc, t, now))
            finish(svc, t);
    }
    start_some(svc, now);
}

static mc__tasks_t *tasks_get(mc__svc_t *svc)
{
    if (svc->tasks)
        return svc->tasks;
    mc__tasks_t *ts = calloc(1, sizeof(*ts));
    if (!ts || mc__ids_init(&ts->by_id) < 0) {
        free(ts);
        return NULL;
    }
    mc__repair_on_job(svc->rp, on_job, svc);
    return svc->tasks = ts;
}

/* The segment a task names by its node's data address addr[0..len): "" is
 * this master's own segment when it has exactly one. Returns its id, or
 * -ENXIO. */
static int64_t seg_named(mc__svc_t *svc, const char *addr, size_t len)
{
    if (len)
        return mc__svc_seg_by_addr(svc, addr, len);
    int64_t found = -ENXIO;
    for (int i = 0; i < svc->nseg; i++) {
        if (svc->segs[i].node == 0) {
            if (found >= 0)
                return -ENXIO;
            found = svc->segs[i].id;
        }
    }
    return found;
}

/* Fills t's targets from the rest of a TASK_CREATE (each an s) and checks
 * them against v. Returns 0 or a create's error. */
static int take_targets(mc__svc_t *svc, task_t *t, const mc__version_t *v, const char *p,
                        size_t left)
{
    while (left) {
        const char *a, *rest;
        uint32_t al, rl;
        TAKE(mc__unpack(p, left, "s*", &a, &al, &rest, &rl));
        p = rest;
        left = rl;
        if (t->n == MC_TASK_TARGETS_MAX)
            return -EINVAL;
        int64_t seg = seg_named(svc, a, al);
        if (seg < 0)
            return -ENXIO;
        seginfo_t *si = mc__svc_seg_info(svc, (uint32_t)seg);
        if (!mc__version_has_replica(v, (uint32_t)seg) && si->node == 0)
            return -EOPNOTSUPP; /* no node to do the copy */
        t->seg[t->n] = (uint32_t)seg;
        t->node[t->n++] = si->node;
    }
    return t->n ? 0 : -EINVAL;
}

int mc__svc_op_task_create(mc__svc_t *svc, const char *body, size_t len, uint64_t now,
                           mc__wbuf_t *w)
{
    const char *key, *src, *rest;
    uint32_t klen, type, sl, rl;
    UNPACK("kus*", &key, &klen, &type, &src, &sl, &rest, &rl);
    if (type != MC_TASK_COPY && type != MC_TASK_MOVE)
        return -EINVAL;
    mc__tasks_t *ts = tasks_get(svc);
    if (!ts)
        return -ENOMEM;
    mc__version_t *v = mc__master_find(svc->m, key, klen);
    if (!v || !v->nrep)
        return -ENOENT;
    if (ts->pending.n >= MC_TASK_PENDING_MAX)
        return -EBUSY;
    task_t *t = calloc(1, sizeof(*t));
    if (!t || !(t->key = malloc(v->klen + 1))) {
        free(t);
        return -ENOMEM;
    }
    memcpy(t->key, mc__vkey(v), v->klen + 1); /* a hard link's: its file's key */
    t->klen = v->klen;
    t->type = type;
    int rc = take_targets(svc, t, v, rest, rl);
    if (rc == 0 && type == MC_TASK_MOVE) {
        int64_t s = seg_named(svc, src, sl);
        if (s < 0)
            rc = -ENXIO;
        else if (t->n != 1 || (uint32_t)s == t->seg[0] || !mc__version_has_replica(v, (uint32_t)s))
            rc = -EINVAL;
        else
            t->src = (uint32_t)s;
    }
    if (rc < 0) {
        free(t->key);
        free(t);
        return rc;
    }
    t->h.id = svc->next_id++;
    mc__ids_add(&ts->by_id, &t->h);
    t->created_ms = t->updated_ms = wall_ms(svc);
    q_push(&ts->pending, t);
    mc__pack(w, "q", t->h.id);
    start_some(svc, now);
    return w->err;
}

int mc__svc_op_task_query(mc__svc_t *svc, const char *body, size_t len, mc__wbuf_t *w)
{
    uint64_t id;
    UNPACK("q", &id);
    task_t *t = svc->tasks ? (task_t *)mc__ids_get(&svc->tasks->by_id, id) : NULL;
    if (!t)
        return -ENOENT;
    mc__pack(w, "uuiiiqs", t->type, t->status, (int64_t)t->error, (int64_t)t->created_ms,
             (int64_t)t->updated_ms, t->node[0], t->msg, (uint32_t)strlen(t->msg));
    return w->err;
}

int mc__svc_op_replica_drop(mc__svc_t *svc, const char *body, size_t len, uint64_t now)
{
    const char *key, *addr;
    uint32_t klen, al;
    UNPACK("ks", &key, &klen, &addr, &al);
    mc__version_t *v = mc__master_find(svc->m, key, klen);
    if (!v)
        return -ENOENT;
    int64_t seg = seg_named(svc, addr, al);
    if (seg < 0)
        return -ENXIO;
    if (!mc__version_has_replica(v, (uint32_t)seg))
        return -ENOENT;
    if (v->nrep < 2)
        return -EINVAL; /* the last one: that is a REMOVE */
    if (mc__vopen(v))
        return -EBUSY; /* open handles may read from there for as long as they stay open */
    drop_replica(svc, v, (uint32_t)seg, now);
    return 0;
}
