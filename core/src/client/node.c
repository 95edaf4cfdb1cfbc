/*
 * node.c - opening and closing the client path, and the node role: a store
 * with a segment serves its bytes (server.c), mounts it at the master and
 * heartbeats; a master that forgot the node (it restarted) is answered by
 * mounting again, and the master's repair tasks copy objects into it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "client/leader.h"
#include "client/remote_i.h"
#include "runtime/log.h"
#include "runtime/loop_i.h"
#include "server/rdma_setup.h"

/* ---- the node role, and opening ---- */

static int seg_lookup(void *arg, uint32_t seg, mc__seg_t *out, uint64_t *epoch)
{
    mc_store_t *s = arg;
    if (!s->rm || seg != s->rm->seg_id || !s->seg_mem.base)
        return -ENOENT;
    *out = s->seg_mem;
    *epoch = s->rm->epoch;
    return 0;
}

/* MC__MOUNT_CHECKED when every write into our segment so far passed an
 * epoch check: our data plane's, or a fence's (a mapping's, SHM_MAP,
 * transport/shm.h; an RDMA connection's, transport_rdma.h); none if we
 * serve RDMA without a fence (the device would not register it). */
static uint32_t seg_checked(struct mc__remote *rm)
{
    return rm->s->rdma_rec && !rm->fencer.ctx ? 0u : (uint32_t)MC__MOUNT_CHECKED;
}

/* Raises our segment's epoch to the master's (wire/proto.h, "Segment
 * epochs"): WRITEs of an older one are refused from now on. */
static void epoch_raise(struct mc__remote *rm, uint64_t epoch)
{
    if (epoch <= rm->epoch)
        return;
    mc__log(MC__LOG_DEBUG, "segment %u: epoch %llu (writes of an older one are refused)",
            rm->seg_id, (unsigned long long)epoch);
    rm->epoch = epoch;
}

/* Our segment is mounted at the master with epoch: READs of a replica set
 * handed out before (a lower epoch) are refused from now on, by our data
 * plane, by the fence for clients that read it mapped, and by our own
 * copies (wire/proto.h, "Reads"). Before new data may go there: the master
 * places none before our heartbeat says we enforce the epoch. */
static void mount_record(struct mc__remote *rm, uint64_t epoch)
{
    rm->mount_unsure = 0;
    if (epoch > atomic_load(&rm->mount_epoch))
        atomic_store(&rm->mount_epoch, epoch);
    mc__data_plane_t *dp = mc__server_data_plane(rm->srv);
    if (dp)
        mc__data_plane_mounted(dp, rm->seg_id, epoch);
}

static void opened(struct mc__remote *rm, int rc)
{
    if (rm->open_done) {
        void (*done)(mc_store_t *, int) = rm->open_done;
        rm->open_done = NULL;
        done(rm->s, rc);
    }
}

/* ---- the node role's calls to the master ----
 *
 * Each call's answer holds rm (rm->calls). mc__remote_close() ends the
 * master link after a bounded wait for its UNMOUNT_SEGMENT, and the store
 * may be freed before these answers come (its close waits for its ops and
 * transfers, not for them), while calls sent before (a heartbeat, a fetch
 * of records) are answered later, with -ECANCELED at the latest: rm
 * outlives them, and the last answer after the close frees it. */
static int ncall(struct mc__remote *rm, uint16_t op, mc__rpc_cb cb, const char *fmt, ...)
{
    if (rm->closing)
        return -ECANCELED;
    va_list ap;
    va_start(ap, fmt);
    int rc = mc__link_vcall(rm->master, op, rm->s->timeout_ms, cb, rm, fmt, ap);
    va_end(ap);
    if (rc == 0)
        rm->calls++;
    return rc;
}

/* Counts an answer to ncall(). Returns 1 once rm is closing: the answer is
 * then dropped (rm may be freed on return). */
static int answered(struct mc__remote *rm)
{
    rm->calls--;
    if (!rm->closing)
        return 0;
    if (rm->released && !rm->calls)
        free(rm);
    return 1;
}

static void mount_segment(struct mc__remote *rm);

/* ---- records of what our segment holds ----
 *
 * The master tells us, in notices we fetch when a heartbeat says so
 * (RECORDS_TAKE), the record of every published version with a replica in
 * our segment, and which ones left. We keep them, opaque, by version id, at
 * most the segment's size in bytes (each belongs to bytes in it), and
 * report them when we mount our segment at a master that restarted
 * (RECORDS_REPORT), so that it gets its namespace back. A master that
 * merely forgot us (it dropped our segment: the objects were lost to it)
 * gets nothing: we forget them too.
 */
typedef struct nrec {
    mc__idnode_t h;
    uint32_t len;
    char b[];
} nrec_t;

static void recs_forget(struct mc__remote *rm, uint64_t id)
{
    nrec_t *r = (nrec_t *)mc__ids_del(&rm->recs, id);
    if (r) {
        rm->rec_bytes -= r->len;
        free(r);
    }
}

static void recs_clear(struct mc__remote *rm)
{
    size_t at = 0;
    for (mc__idnode_t *e; rm->recs.b && (e = mc__ids_first(&rm->recs, &at));)
        recs_forget(rm, e->id);
}

/* Applies one notice (proto.h: b kind, q version, for a put s record). */
static void recs_apply(struct mc__remote *rm, const char *p, size_t n)
{
    uint8_t kind;
    uint64_t id;
    const char *rest, *rec;
    uint32_t rl, len;
    if (mc__unpack(p, n, "bq*", &kind, &id, &rest, &rl) < 0)
        return;
    if (!rm->recs.b && mc__ids_init(&rm->recs) < 0)
        return;
    recs_forget(rm, id);
    if (kind != MC__NOTE_PUT || mc__unpack(rest, rl, "s", &rec, &len) < 0)
        return;
    if (rm->rec_bytes + len > rm->s->seg_mem.size) {
        mc__log(MC__LOG_WARN, "records of the segment pass its size: version %llu not kept",
                (unsigned long long)id);
        return;
    }
    nrec_t *r = malloc(sizeof(*r) + len);
    if (!r)
        return;
    r->h.id = id;
    r->len = len;
    memcpy(r->b, rec, len);
    mc__ids_add(&rm->recs, &r->h);
    rm->rec_bytes += len;
}

static void records_take(struct mc__remote *rm);

static void records_taken(void *arg, int status, const char *body, size_t len)
{
    struct mc__remote *rm = arg;
    if (answered(rm))
        return; /* answered while the store closes */
    rm->rtaking = 0;
    if (status < 0) {
        rm->rec_ack = 0; /* the next take starts over: notices are idempotent */
        return;
    }
    rm->rec_ack = len;
    while (len) {
        const char *e, *rest;
        uint32_t el, rl;
        if (mc__unpack(body, len, "s*", &e, &el, &rest, &rl) < 0)
            break;
        recs_apply(rm, e, el);
        body = rest;
        len = rl;
    }
    if (rm->rec_ack)
        records_take(rm); /* acknowledges these, fetches more */
}

static void records_take(struct mc__remote *rm)
{
    if (rm->rtaking || !rm->seg_id || rm->mounting || rm->reporting)
        return;
    rm->rtaking = ncall(rm, MC__OP_RECORDS_TAKE, records_taken, "quq", rm->node_id, rm->seg_id,
                        rm->rec_ack) == 0;
}

static void report_next(struct mc__remote *rm);

/* The last RECORDS_REPORT call ended with status: the next goes. */
static void report_ended(struct mc__remote *rm, int status)
{
    if (status < 0) {
        /* The master ends the segment's hold without the rest in time. */
        mc__log(MC__LOG_WARN, "reporting the segment's records to the master failed: %s",
                mc_strerror(status));
        rm->reporting = 0;
        return;
    }
    if (rm->rep_at == SIZE_MAX)
        rm->reporting = 0; /* that was the last */
    else
        report_next(rm);
}

static void reported(void *arg, int status, const char *body, size_t len)
{
    struct mc__remote *rm = arg;
    if (answered(rm))
        return; /* answered while the store closes */
    report_ended(rm, status);
}

/* Sends the next RECORDS_REPORT: the records of the next buckets, about
 * MC__NOTES_BATCH bytes, one call at a time (the table does not change
 * meanwhile: no notices are fetched while reporting). */
static void report_next(struct mc__remote *rm)
{
    mc__wbuf_t w = {0};
    size_t nb = rm->recs.b ? (size_t)1 << rm->recs.bits : 0;
    while (rm->rep_at < nb && w.len < MC__NOTES_BATCH) {
        for (mc__idnode_t *e = rm->recs.b[rm->rep_at]; e; e = e->hnext)
            mc__pack(&w, "s", ((nrec_t *)e)->b, ((nrec_t *)e)->len);
        rm->rep_at++;
    }
    int last = rm->rep_at >= nb;
    if (last)
        rm->rep_at = SIZE_MAX;
    int rc = w.err ? w.err
                   : ncall(rm, MC__OP_RECORDS_REPORT, reported, "quu*", rm->node_id, rm->seg_id,
                           (unsigned)last, w.p ? w.p : "", (uint32_t)w.len);
    free(w.p);
    if (rc < 0)
        report_ended(rm, rc);
}

/* Reports every record to a new master, or, to the one that dropped our
 * segment (the objects were lost to it), none: we forget them, and send
 * only the end of the report. */
static void records_report(struct mc__remote *rm, int all)
{
    if (all)
        mc__log(MC__LOG_INFO, "reporting %zu records of the segment to a master that restarted",
                rm->recs.n);
    else
        recs_clear(rm);
    rm->rep_at = 0;
    report_next(rm);
}

static void mounted(void *arg, int status, const char *body, size_t len)
{
    struct mc__remote *rm = arg;
    if (answered(rm))
        return; /* answered while the store closes */
    uint32_t seg;
    uint64_t run = 0, epoch = 0;
    rm->mounting = 0;
    if (status >= 0 && mc__unpack(body, len, "uqq", &seg, &run, &epoch) < 0)
        status = -EIO;
    if (status == -EEXIST && rm->seg_id) {
        /* A master that restarted gave our old id to another node: take a
         * new one (writes addressed to the old id now fail here). */
        mc__log(MC__LOG_INFO, "segment %u belongs to another node now: mounting under a new id",
                rm->seg_id);
        rm->seg_id = 0;
        rm->own_seg = 0;
        return mount_segment(rm);
    }
    if (status < 0) {
        mc__log(MC__LOG_WARN, "mounting the segment at the master failed: %s", mc_strerror(status));
        /* The master may have mounted it all the same (an answer lost):
         * then its next heartbeat raises our epoch to the mount's. */
        rm->mount_unsure = rm->seg_id != 0;
        return opened(rm, status);
    }
    if (rm->seg_id && rm->seg_id != seg)
        mc__log(MC__LOG_INFO, "segment mounted again as %u (was %u)", seg, rm->seg_id);
    rm->seg_id = seg;
    rm->own_seg = 1;
    rm->rec_ack = 0;
    epoch_raise(rm, epoch);
    mount_record(rm, epoch);
    int all = run != rm->run; /* a new master: it gets every record */
    rm->run = run;
    if (rm->reporting)
        records_report(rm, all);
    opened(rm, 0);
}

static void mount_segment(struct mc__remote *rm)
{
    const char *addr = mc__server_addr(rm->srv);
    rm->mounting = 1;
    mc_store_t *s = rm->s;
    rm->reporting = rm->recs.n != 0;
    int rc = ncall(rm, MC__OP_MOUNT_SEGMENT, mounted, "qusqsuq", rm->node_id, rm->seg_id, addr,
                   (uint32_t)strlen(addr), s->seg_mem.size, s->rdma_rec ? s->rdma_rec : "",
                   (uint32_t)s->rdma_rec_len,
                   (rm->reporting ? MC__MOUNT_REPORT : 0u) | seg_checked(rm), rm->epoch);
    if (rc < 0) {
        rm->mounting = 0;
        opened(rm, rc);
    }
}

/* ---- repair tasks (the node role) ----
 *
 * The master asks this node, through a flag on the heartbeat reply, to copy
 * under-replicated objects into space it allocated on our segment
 * (repair.h). A task reads 4 MiB pieces from a surviving replica (mc__xfer():
 * failover, any transport) and copies each into our segment (a sparse
 * file's holes, which the target has too, are skipped), but never
 * after its time limit, counted from when we sent REPAIR_TAKE (so before
 * the master's own count starts); REPAIR_DONE reports the end. A master
 * that forgot us (REMOUNT) cancels every task: that space is not ours to
 * write any more. One step per loop turn (mc_loop_defer()), so that
 * pieces copied at once do not recurse.
 */
typedef struct rtask {
    mc_store_t *s;
    struct mc__remote *rm; /* NULL once the remote closed: freed at the next step */
    uint64_t id, size, at, n, deadline;
    mc__rset_t *src, *dst;
    char *buf;
    int cancelled;
    mc_work_t work;
    struct rtask *next;
} rtask_t;

static void rt_free(rtask_t *t)
{
    mc__rset_free(t->src);
    mc__rset_free(t->dst);
    free(t->buf);
    free(t);
}

/* Reports the task's end to the master and frees it. */
static void rt_finish(rtask_t *t, int rc)
{
    struct mc__remote *rm = t->rm;
    if (rm) {
        for (rtask_t **pp = &rm->tasks; *pp; pp = &(*pp)->next) {
            if (*pp == t) {
                *pp = t->next;
                break;
            }
        }
        if (rc < 0)
            mc__log(MC__LOG_INFO, "repair task %llu: %s", (unsigned long long)t->id,
                    mc_strerror(rc));
        mc__mcall(t->s, MC__OP_REPAIR_DONE, mc__ignore_reply, NULL, "qqi", rm->node_id, t->id,
                  (int64_t)rc);
    }
    rt_free(t);
}

static void rt_step(void *arg);

static void rt_written(void *arg, int rc)
{
    rtask_t *t = arg;
    if (rc < 0)
        return rt_finish(t, rc);
    t->at += t->n;
    mc_loop_defer(t->s->loop, &t->work, rt_step, t);
}

static void rt_read(void *arg, int rc)
{
    rtask_t *t = arg;
    if (!t->rm)
        return rt_free(t);
    if (rc == 0 && t->cancelled)
        rc = -ECANCELED;
    if (rc == 0 && mc_loop_now_ms() >= t->deadline)
        rc = -ETIMEDOUT;
    if (rc == 0 && t->dst->r[0].seg != t->rm->seg_id)
        rc = -ESTALE;
    if (rc < 0)
        return rt_finish(t, rc);
    /* Our own segment: a memcpy, done before mc__xfer() returns. */
    mc__xfer(t->s, t->dst, 1, t->at, t->buf, t->n, rt_written, t);
}

static void rt_step(void *arg)
{
    rtask_t *t = arg;
    if (!t->rm)
        return rt_free(t);
    uint64_t a, b;
    if (t->at < t->size && mc__rset_run(t->dst, t->at, &a, &b))
        t->at = b; /* a hole of a sparse file: nothing to copy */
    if (t->at >= t->size)
        return rt_finish(t, 0);
    t->n = t->size - t->at < MC__PROTO_CHUNK ? t->size - t->at : MC__PROTO_CHUNK;
    mc__xfer(t->s, t->src, 0, t->at, t->buf, t->n, rt_read, t);
}

/* Starts one task from a REPAIR_TAKE answer (p[0..n): its s field). */
static void rt_start(struct mc__remote *rm, const char *p, size_t n)
{
    uint64_t id, limit, size;
    const char *rest;
    uint32_t rl;
    if (mc__unpack(p, n, "qqq*", &id, &limit, &size, &rest, &rl) < 0)
        return; /* the master lets it expire */
    size_t left = rl;
    rtask_t *t = calloc(1, sizeof(*t));
    if (!t)
        return;
    *t = (rtask_t){.s = rm->s, .rm = rm, .id = id, .size = size, .deadline = rm->take_at + limit};
    int rc = mc__rset_take(&rest, &left, &t->dst);
    if (rc == 0)
        rc = mc__rset_take(&rest, &left, &t->src);
    if (rc == 0 && (t->dst->n != 1 || t->dst->r[0].seg != rm->seg_id || !t->src->n))
        rc = -ESTALE;
    if (rc == 0 && !(t->buf = malloc(MC__PROTO_CHUNK)))
        rc = -ENOMEM;
    t->next = rm->tasks;
    rm->tasks = t;
    if (rc < 0)
        return rt_finish(t, rc);
    rt_step(t);
}

static void repair_taken(void *arg, int status, const char *body, size_t len)
{
    struct mc__remote *rm = arg;
    if (answered(rm))
        return; /* answered while the store closes */
    rm->taking = 0;
    if (status < 0)
        return;
    while (len) {
        const char *task, *rest;
        uint32_t tl, rl;
        if (mc__unpack(body, len, "s*", &task, &tl, &rest, &rl) < 0)
            return;
        rt_start(rm, task, tl);
        body = rest;
        len = rl;
    }
}

static void beat_done(void *arg, int status, const char *body, size_t len)
{
    struct mc__remote *rm = arg;
    if (answered(rm))
        return; /* answered while the store closes */
    uint32_t flags;
    uint64_t epoch;
    if (status < 0 || mc__unpack(body, len, "uq", &flags, &epoch) < 0)
        return; /* the master is away: the next beat tries again */
    if (rm->own_seg && !(flags & MC__HB_REMOUNT)) {
        epoch_raise(rm, epoch);
        if (rm->mount_unsure && epoch)
            mount_record(rm, epoch); /* the mount whose answer was lost */
    }
    if (flags & MC__HB_REMOUNT) {
        for (rtask_t *t = rm->tasks; t; t = t->next)
            t->cancelled = 1;
    }
    if ((flags & MC__HB_REPAIR) && !rm->taking && rm->seg_id) {
        rm->take_at = mc_loop_now_ms();
        rm->taking = ncall(rm, MC__OP_REPAIR_TAKE, repair_taken, "q", rm->node_id) == 0;
    }
    if ((flags & MC__HB_RECORDS) && !(flags & MC__HB_REMOUNT))
        records_take(rm);
    if ((flags & MC__HB_REMOUNT) && !rm->mounting) {
        mc__log(MC__LOG_INFO, "the master does not know this node: mounting the segment again");
        mount_segment(rm);
    }
}

static void on_beat(mc_timer_t *t)
{
    struct mc__remote *rm = t->data;
    /* What we enforce of our epoch: the master frees space of writes that
     * ended once we do (a write still being received holds it back). */
    uint32_t seg = rm->own_seg ? rm->seg_id : 0;
    ncall(rm, MC__OP_HEARTBEAT, beat_done, "ququ", rm->node_id, seg,
          seg ? mc__server_enforced(rm->srv, seg, rm->epoch) : 0, seg_checked(rm));
}

static void pinged(void *arg, int status, const char *body, size_t len)
{
    struct mc__remote *rm = arg;
    if (answered(rm))
        return; /* answered while the store closes */
    opened(rm, status < 0 ? status : 0);
}

int mc__remote_open(mc_store_t *s, const char *addr, const char *listen,
                    void (*done)(mc_store_t *s, int rc))
{
    mc__addr_t ma, la;
    int follow = mc__follow_is_etcd(addr);
    int rc = follow ? 0 : mc__addr_parse(addr, 50051, &ma);
    if (rc < 0)
        return rc;
    if (s->seg_mem.base && (rc = mc__addr_parse(listen ? listen : "127.0.0.1:0", 0, &la)) < 0)
        return rc;
    struct mc__remote *rm = calloc(1, sizeof(*rm));
    if (!rm)
        return -ENOMEM;
    rm->s = s;
    rm->open_done = done;
    if (getrandom(&rm->node_id, sizeof(rm->node_id), 0) != sizeof(rm->node_id) || !rm->node_id)
        rm->node_id = (uint64_t)mc_loop_now_ms() * 2654435761u | 1;
    /* Our segment's first epoch: above any this host's clock gave a node
     * before (a write granted space in a node of this address that ran
     * before us carries one of those). The master raises it at the mount. */
    rm->epoch = (uint64_t)mc__loop_wall_ns() / 1000;
    rc = follow
             ? mc__link_follow_new(s->loop, addr, s->timeout_ms, &mc__master_ops, rm, &rm->master)
             : mc__link_rpc_new(s->loop, &ma, s->timeout_ms, &mc__master_ops, rm, &rm->master);
    if (rc < 0) {
        free(rm);
        return rc;
    }
    s->rm = rm;
    if (s->seg_mem.base) {
        mc__server_opts_t so = {
            .seg_lookup = seg_lookup, .seg_arg = s, .secret = s->secret, .shm = !s->no_shm};
        rc = mc__server_new(&rm->srv, s->loop, &la, &so);
        if (rc < 0) {
            mc__remote_close(s, NULL);
            return rc;
        }
        if (s->rdma) {
            /* The rdma_cm listener shares the data address's host. */
            char host[MC__ADDR_STRLEN];
            rc = mc__rdma_host_of(mc__server_addr(rm->srv), host, sizeof(host));
            if (rc >= 0)
                rc = mc__store_rdma_serve(s, host);
            if (rc >= 0)
                mc__rdma_fence_segment(&rm->fencer, s->rdma, rm->srv, &rm->seg_id,
                                       s->seg_mem.fence);
            if (rc < 0 && s->xport == MC__XPORT_RDMA) {
                mc__remote_close(s, NULL);
                return rc;
            }
            if (rc < 0)
                mc__log(MC__LOG_INFO, "the segment is served over TCP only (protocol auto)");
        }
        rm->hb.data = rm;
        mc_timer_start(s->loop, &rm->hb, 1000, 1000, on_beat);
        mount_segment(rm);
        return 0;
    }
    rc = ncall(rm, MC__OP_PING, pinged, "");
    if (rc < 0) {
        mc__remote_close(s, NULL);
        return rc;
    }
    return 0;
}

int mc__remote_open_local(mc_store_t *s, uint32_t seg)
{
    struct mc__remote *rm = calloc(1, sizeof(*rm));
    if (!rm)
        return -ENOMEM;
    rm->s = s;
    rm->seg_id = seg;
    rm->own_seg = s->seg_mem.base != NULL;
    int rc = mc__link_local_new(s->loop, s->svc, MC__SVC_OWNER_LOCAL, &rm->master);
    if (rc < 0) {
        free(rm);
        return rc;
    }
    s->rm = rm;
    return 0;
}

/* Closes the connections and frees rm; then tells the store. */
static void remote_free(struct mc__remote *rm)
{
    mc_store_t *s = rm->s;
    void (*done)(mc_store_t *) = rm->close_done;
    mc__peers_close(rm);
    while (rm->tasks) { /* their next step frees them */
        rtask_t *t = rm->tasks;
        rm->tasks = t->next;
        t->rm = NULL;
    }
    mc__link_close(rm->master);
    mc__rc_clear(rm);
    recs_clear(rm);
    mc__ids_fini(&rm->recs);
    free(rm->rc_tab);
    if (rm->calls)
        rm->released = 1; /* the last answer frees it */
    else
        free(rm);
    if (done)
        done(s);
}

static void unmounted(void *arg, int status, const char *body, size_t len)
{
    struct mc__remote *rm = arg;
    rm->calls--;
    remote_free(rm);
}

void mc__remote_close(mc_store_t *s, void (*done)(mc_store_t *s))
{
    struct mc__remote *rm = s->rm;
    if (!rm) {
        if (done)
            done(s);
        return;
    }
    rm->open_done = NULL;
    rm->close_done = done;
    rm->closing = 1;
    mc_timer_stop(&rm->hb);
    mc_timer_stop(&rm->renew);
    mc__rdma_unfence(&rm->fencer); /* it reaches rm->srv's data plane */
    mc__server_close(rm->srv);
    rm->srv = NULL;
    s->rm = NULL; /* operations from now on fail with -ECANCELED */
    /* A node leaving says so, so that the master stops placing data on its
     * segment at once instead of after the node TTL. Bounded wait. */
    if (rm->seg_id && rm->master && rm->node_id) {
        char body[16];
        mc__wbuf_t w = {.p = body, .cap = sizeof(body)};
        mc__pack(&w, "qu", rm->node_id, rm->seg_id);
        uint64_t t = s->timeout_ms < 1000 ? s->timeout_ms : 1000;
        if (mc__link_call(rm->master, MC__OP_UNMOUNT_SEGMENT, body, w.len, t, unmounted, rm) == 0) {
            rm->calls++;
            return;
        }
    }
    remote_free(rm);
}
