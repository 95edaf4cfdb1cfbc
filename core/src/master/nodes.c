/*
 * nodes.c - the master service's segments and nodes (see service_i.h):
 * segments mounted by nodes (and this process's own), their fences and the
 * ended writes that wait on them, nodes' heartbeats and suspicion,
 * dropping a segment with every replica on it, counters,
 * the replica sets answers carry, and the node requests (mount, unmount,
 * heartbeat, repair tasks). The records nodes keep (notices, reports) and
 * the op log's view are reports.c's.
 *
 * Segments and nodes live in small arrays: a cluster has tens of them, not
 * millions.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/service_i.h"

seginfo_t *mc__svc_seg_info(mc__svc_t *svc, uint32_t id)
{
    for (int i = 0; i < svc->nseg; i++)
        if (svc->segs[i].id == id)
            return &svc->segs[i];
    return NULL;
}

static int seg_add(mc__svc_t *svc, uint32_t id, uint64_t node, uint64_t size, const char *addr,
                   size_t alen)
{
    seginfo_t *ns = realloc(svc->segs, sizeof(*ns) * (size_t)(svc->nseg + 1));
    if (!ns)
        return -ENOMEM;
    svc->segs = ns;
    char *a = NULL;
    if (addr) {
        a = malloc(alen + 1);
        if (!a)
            return -ENOMEM;
        memcpy(a, addr, alen);
        a[alen] = '\0';
    }
    /* Size 0: a segment the master already has (an embedded store's). */
    int rc = size ? mc__master_add_segment(svc->m, id, size) : 0;
    if (rc < 0) {
        free(a);
        return rc;
    }
    /* A local segment's data plane reads its epoch here (1 at first); a
     * node's is set when it mounts. */
    svc->segs[svc->nseg++] =
        (seginfo_t){.id = id, .node = node, .size = size, .addr = a, .epoch = 1, .enforced = 1};
    return 0;
}

/* A segment id for a node that asked for any: the next one not in use,
 * never 0 (an embedded store's own) nor UINT32_MAX, wrapping around, nor
 * one whose records in the op log wait for its node (merged into another
 * node's segment they would name its bytes). Returns 0 when every id is
 * taken. */
static uint32_t seg_new_id(mc__svc_t *svc)
{
    for (uint32_t tries = 0; tries < (uint32_t)(svc->nseg + svc->npend) + 1; tries++) {
        uint32_t id = svc->next_seg;
        svc->next_seg = id >= UINT32_MAX - 1 ? 1 : id + 1;
        if (id && !mc__svc_seg_info(svc, id) && !mc__svc_seg_pending(svc, id))
            return id;
    }
    return 0;
}

int mc__svc_add_local_segment(mc__svc_t *svc, uint32_t seg, uint64_t size, const char *addr)
{
    return seg_add(svc, seg, 0, size, addr, addr ? strlen(addr) : 0);
}

uint64_t mc__svc_seg_epoch(mc__svc_t *svc, uint32_t seg)
{
    seginfo_t *si = mc__svc_seg_info(svc, seg);
    return si ? si->epoch : 0;
}

void mc__svc_set_local_enforced(mc__svc_t *svc, mc__svc_enforced_fn fn, void *arg)
{
    svc->local_enforced = fn;
    svc->local_enforced_arg = arg;
}

uint64_t mc__svc_seg_fence(mc__svc_t *svc, uint32_t seg)
{
    seginfo_t *si = mc__svc_seg_info(svc, seg);
    return si ? ++si->epoch : 0;
}

int mc__svc_seg_fenced(mc__svc_t *svc, uint32_t seg, uint64_t epoch)
{
    seginfo_t *si = mc__svc_seg_info(svc, seg);
    if (si && si->node == 0) { /* ours: its data plane is asked now */
        if (svc->local_enforced &&
            svc->local_enforced(svc->local_enforced_arg, seg, si->epoch) < epoch)
            return 0;
        /* Checked unless served over RDMA without a fence: its data plane
         * checks WRITEs, mappings' copies and RDMA peers' writes (its
         * fence), and our own process copies on this thread. */
        return svc->local_rdma && !svc->local_rdma_fenced ? 1 : 2;
    }
    if (!si)
        return 1;
    return si->enforced < epoch ? 0 : si->checked ? 2 : 1;
}

void mc__svc_fence_write(mc__svc_t *svc, mc__version_t *v, uint64_t free_at)
{
    fenced_t *f = malloc(sizeof(*f) + sizeof(f->need[0]) * v->nrep);
    if (!f) {
        /* Out of memory: freeing at once is the lesser evil than a leak
         * that lasts forever, and the lease margin still holds. */
        mc__master_abort(svc->m, v);
        return;
    }
    *f = (fenced_t){.v = v, .free_at = free_at, .next = svc->fenced, .nneed = v->nrep};
    for (uint32_t r = 0; r < v->nrep; r++) {
        uint32_t seg = mc__vrep_seg(v, r);
        f->need[r].seg = seg;
        f->need[r].epoch = mc__svc_seg_fence(svc, seg);
    }
    svc->fenced = f;
}

/* Whether fenced write f may go at now: its bytes are refused where they
 * could land, and its lease is over unless every write there passed its
 * node's check (or force: the service is closing). */
static int fenced_over(mc__svc_t *svc, const fenced_t *f, uint64_t now, int force)
{
    int all_checked = 1;
    if (force)
        return 1;
    for (uint32_t i = 0; i < f->nneed; i++) {
        int fz = mc__svc_seg_fenced(svc, f->need[i].seg, f->need[i].epoch);
        if (!fz)
            return 0;
        all_checked &= fz == 2;
    }
    return all_checked || f->free_at <= now;
}

void mc__svc_fenced_sweep(mc__svc_t *svc, uint64_t now, int force)
{
    for (fenced_t **pp = &svc->fenced; *pp;) {
        fenced_t *f = *pp;
        if (!fenced_over(svc, f, now, force)) {
            pp = &f->next;
            continue;
        }
        *pp = f->next;
        mc__master_abort(svc->m, f->v);
        free(f);
    }
}

void mc__svc_set_local_addr(mc__svc_t *svc, const char *addr)
{
    free(svc->local_addr);
    svc->local_addr = addr ? strdup(addr) : NULL;
}

/* Replaces *dst (*dlen bytes) with a copy of src[0..len) (len 0: NULL).
 * Returns 0 or -ENOMEM (then *dst is unchanged). */
static int blob_set(char **dst, uint32_t *dlen, const void *src, size_t len)
{
    char *c = NULL;
    if (len && !(c = malloc(len)))
        return -ENOMEM;
    if (len)
        memcpy(c, src, len);
    free(*dst);
    *dst = c;
    *dlen = (uint32_t)len;
    return 0;
}

int mc__svc_set_local_rdma(mc__svc_t *svc, const void *rec, size_t len, int fenced)
{
    int rc = blob_set(&svc->local_rdma, &svc->local_rdma_len, rec, len);
    if (rc == 0)
        svc->local_rdma_fenced = fenced;
    return rc;
}

/* Drops a segment and the replicas on it: published, retired, pending and
 * fenced versions alike, so that none frees space in a segment mounted
 * again under the same id. */
void mc__svc_seg_drop(mc__svc_t *svc, uint32_t id, uint64_t now)
{
    for (put_t *p = svc->by_touch.head; p; p = p->tnext)
        mc__version_drop_replica(p->v, id);
    for (put_t *p = svc->local.head; p; p = p->tnext)
        mc__version_drop_replica(p->v, id);
    for (fenced_t *f = svc->fenced; f; f = f->next)
        mc__version_drop_replica(f->v, id);
    svc->objects_lost += mc__master_drop_segment(svc->m, id, now);
    mc__svc_log_seg_gone(svc, id);
    mc__repair_seg_dropped(svc->rp, svc->m, id, now); /* and wakes the repair */
    for (int i = 0; i < svc->nseg; i++) {
        if (svc->segs[i].id == id) {
            /* Replica sets of it may live on in clients: a mount again
             * under this id gets an epoch above theirs (mc__svc_op_mount()). */
            if (svc->epoch_dropped < svc->segs[i].epoch)
                svc->epoch_dropped = svc->segs[i].epoch;
            free(svc->segs[i].addr);
            free(svc->segs[i].rdma);
            free(svc->segs[i].notes.p);
            svc->segs[i] = svc->segs[--svc->nseg];
            break;
        }
    }
}

node_t *mc__svc_node_find(mc__svc_t *svc, uint64_t id)
{
    for (int i = 0; i < svc->nnodes; i++)
        if (svc->nodes[i].id == id)
            return &svc->nodes[i];
    return NULL;
}

static node_t *node_touch(mc__svc_t *svc, uint64_t id, uint64_t now)
{
    node_t *n = mc__svc_node_find(svc, id);
    if (!n) {
        node_t *nn = realloc(svc->nodes, sizeof(*nn) * (size_t)(svc->nnodes + 1));
        if (!nn)
            return NULL;
        svc->nodes = nn;
        n = &svc->nodes[svc->nnodes++];
        *n = (node_t){.id = id};
    }
    n->last_hb = now;
    return n;
}

static int node_suspect(const node_t *n, uint64_t now)
{
    return now - n->last_hb > SUSPECT_MS || n->failed_at > n->last_hb;
}

/* Whether segment si can take new data: local, or its node is not suspected. */
static int seg_live(mc__svc_t *svc, const seginfo_t *si, uint64_t now)
{
    if (si->node == 0)
        return 1;
    node_t *n = mc__svc_node_find(svc, si->node);
    return n && !node_suspect(n, now);
}

/* Tells the master which segments placement should avoid right now. */
void mc__svc_mark_suspects(mc__svc_t *svc, uint64_t now)
{
    for (int i = 0; i < svc->nseg; i++)
        mc__master_segment_avoid(svc->m, svc->segs[i].id, !seg_live(svc, &svc->segs[i], now));
}

/* Plans repairs onto the segments of live remote nodes. */
void mc__svc_repair_tick(mc__svc_t *svc, uint64_t now)
{
    mc__repair_target_t tg[64];
    size_t n = 0;
    for (int i = 0; i < svc->nseg && n < sizeof(tg) / sizeof(tg[0]); i++)
        if (svc->segs[i].node != 0 && seg_live(svc, &svc->segs[i], now) &&
            !mc__master_segment_held(svc->m, svc->segs[i].id, now))
            tg[n++] = (mc__repair_target_t){svc->segs[i].id, svc->segs[i].node};
    mc__repair_tick(svc->rp, svc->m, tg, n, now);
}

void mc__svc_stats(const mc__svc_t *svc, mc__svc_stats_t *st)
{
    st->nodes = (uint64_t)svc->nnodes;
    st->segments = (uint64_t)svc->nseg;
    st->puts = svc->puts.n;
    st->handles = svc->handles.n;
    st->nodes_expired = svc->nodes_expired;
    st->objects_lost = svc->objects_lost;
    st->puts_expired = svc->puts_expired;
    st->replicas_dropped = svc->replicas_dropped;
    mc__repair_stats_t rs;
    mc__repair_stats(svc->rp, &rs);
    st->repair_started = rs.started;
    st->repair_done = rs.done;
    st->repair_failed = rs.failed;
    st->repair_bytes = rs.bytes;
    st->repair_inflight = rs.inflight;
    st->repair_waiting = rs.waiting;
    st->records_merged = svc->records_merged;
    st->records_refused = svc->records_refused;
    st->records_renamed = svc->records_renamed;
    st->notices_dropped = svc->notices_dropped;
    st->notices_waiting = 0;
    st->segments_held = 0;
    for (int i = 0; i < svc->nseg; i++) {
        st->notices_waiting += svc->segs[i].notes.len;
        st->segments_held +=
            (uint64_t)mc__master_segment_held(svc->m, svc->segs[i].id, svc->now_seen);
    }
}

size_t mc__svc_counters(const mc__svc_t *svc, mc_counter_t *out, size_t max)
{
    mc__svc_stats_t st;
    mc__svc_stats(svc, &st);
    const struct {
        const char *name;
        uint64_t value;
    } all[] = {
        {"nodes", st.nodes},
        {"segments", st.segments},
        {"puts", st.puts},
        {"handles", st.handles},
        {"nodes_expired", st.nodes_expired},
        {"objects_lost", st.objects_lost},
        {"puts_expired", st.puts_expired},
        {"replicas_dropped", st.replicas_dropped},
        {"repair_started", st.repair_started},
        {"repair_done", st.repair_done},
        {"repair_failed", st.repair_failed},
        {"repair_bytes", st.repair_bytes},
        {"repair_inflight", st.repair_inflight},
        {"repair_waiting", st.repair_waiting},
        {"records_merged", st.records_merged},
        {"records_refused", st.records_refused},
        {"records_renamed", st.records_renamed},
        {"notices_dropped", st.notices_dropped},
        {"notices_waiting", st.notices_waiting},
        {"segments_held", st.segments_held},
    };
    size_t n = 0;
    for (; n < max && n < sizeof(all) / sizeof(all[0]); n++) {
        snprintf(out[n].name, sizeof(out[n].name), "%s", all[n].name);
        out[n].value = all[n].value;
    }
    return n;
}

void mc__svc_forgive(mc__svc_t *svc, uint64_t now)
{
    for (int i = 0; i < svc->nnodes; i++)
        if (svc->nodes[i].last_hb < now)
            svc->nodes[i].last_hb = now;
}

int mc__svc_pack_replicas(mc__svc_t *svc, mc__wbuf_t *w, const mc__version_t *v)
{
    mc__pack(w, "u", v->nrep);
    for (uint32_t r = 0; r < v->nrep; r++) {
        mc__extent_t one;
        const mc__replica_t r1 = mc__vrep_get(v, r, &one), *rep = &r1;
        seginfo_t *si = mc__svc_seg_info(svc, rep->seg);
        const char *addr = si && si->addr ? si->addr : "";
        const char *rdma = si && si->rdma ? si->rdma : "";
        uint32_t rdma_len = si ? si->rdma_len : 0;
        if (si && si->node == 0 && !si->addr && svc->local_addr)
            addr = svc->local_addr;
        if (si && si->node == 0 && !si->rdma && svc->local_rdma) {
            rdma = svc->local_rdma;
            rdma_len = svc->local_rdma_len;
        }
        mc__pack_replica(w, rep->seg, si ? si->epoch : 0, addr, (uint32_t)strlen(addr), rdma,
                         rdma_len, rep->n);
        for (uint32_t i = 0; i < rep->n; i++)
            mc__pack_extent(w, rep->ext[i].off, rep->ext[i].len);
    }
    return w->err;
}

/* The id of the segment whose data address is addr[0..len), or -1. */
int64_t mc__svc_seg_by_addr(mc__svc_t *svc, const char *addr, size_t len)
{
    if (!len)
        return -1;
    for (int i = 0; i < svc->nseg; i++) {
        const seginfo_t *si = &svc->segs[i];
        const char *a = si->addr;
        if (!a && si->node == 0)
            a = svc->local_addr;
        if (a && strlen(a) == len && memcmp(a, addr, len) == 0)
            return si->id;
    }
    return -1;
}

int mc__svc_op_mount(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w)
{
    uint64_t node, size, epoch;
    uint32_t seg, alen, rlen, flags;
    const char *addr, *rdma;
    UNPACK("qusqsuq", &node, &seg, &addr, &alen, &size, &rdma, &rlen, &flags, &epoch);
    if (node == 0 || size < 4096 || alen == 0 || seg == UINT32_MAX || epoch == UINT64_MAX)
        return -EINVAL;
    seginfo_t *si = seg ? mc__svc_seg_info(svc, seg) : NULL;
    if (si && si->node != node)
        return -EEXIST;
    /* Not mounted here, but the op log's records of that id are another
     * node's (a leader since this node was cut off gave the id away):
     * merged into this node's segment, they would name its bytes. */
    if (!si && seg && mc__svc_seg_foreign(svc, seg, node))
        return -EEXIST;
    int hold_for_epoch = 0; /* until the node enforces the epoch answered below */
    int fresh = !si;        /* not mounted at this master (any more) */
    if (!si) {
        /* A segment mounted again under its old id (this master expired
         * it, or restarted) may still receive late bytes from writers of
         * before, until their write leases run out: nothing new is placed
         * on it until then. */
        int again = seg != 0;
        if (!seg && !(seg = seg_new_id(svc)))
            return -ENOSPC;
        int rc = seg_add(svc, seg, node, size, addr, alen);
        if (rc < 0)
            return rc;
        mc__svc_log_seg_node(svc, seg, node);
        /* Unless every write there passes the node's check: the epoch it
         * gets below is past theirs, and the hold lasts only until the
         * node says it enforces that epoch (a WRITE of before may still be
         * arriving, a mapping's copy be in progress, as it mounts). */
        int checked = (flags & MC__MOUNT_CHECKED) != 0;
        uint64_t hold = checked ? UINT64_MAX : now + svc->o.write_lease_ms;
        if (again)
            mc__master_hold_segment(svc->m, seg, hold);
        si = mc__svc_seg_info(svc, seg);
        hold_for_epoch = again && checked;
        if (again && !(flags & MC__MOUNT_REPORT))
            mc__svc_merge_view(svc, seg, now);
        if (flags & MC__MOUNT_REPORT) {
            /* Its records follow: nothing new goes there before they are
             * merged (their space is not free), then as for a segment
             * mounted again. */
            mc__master_hold_segment(svc->m, seg, UINT64_MAX);
            si->hold_to = hold;
            si->report_by = now + REPORT_MAX_MS;
        }
    }
    mc__svc_notices(svc);
    /* The record is the node's to describe (address, keys): kept verbatim,
     * replaced by every mount so that a node that restarted its RDMA side
     * publishes fresh keys. */
    if (blob_set(&si->rdma, &si->rdma_len, rdma, rlen) < 0)
        return -ENOMEM;
    if (!node_touch(svc, node, now))
        return -ENOMEM;
    si->checked = (flags & MC__MOUNT_CHECKED) != 0;
    /* Past any epoch the node enforced before: a write granted space there
     * by another master, or by this one before, carries a lower one. */
    if (si->epoch <= epoch)
        si->epoch = epoch + 1;
    /* A segment mounted anew: past every epoch this master handed out for
     * a segment it dropped, which replica sets still in clients' hands
     * carry (the node may not have enforced the last of them). Its node
     * refuses their READs (proto.h, "Reads"): their objects were lost, and
     * new ones take the space. */
    if (fresh && si->epoch <= svc->epoch_dropped)
        si->epoch = svc->epoch_dropped + 1;
    if (hold_for_epoch || si->hold_epoch)
        si->hold_epoch = si->epoch;
    mc__repair_wake(svc->rp); /* room for copies */
    mc__pack(w, "uqq", seg, svc->run, si->epoch);
    return w->err;
}

int mc__svc_op_unmount(mc__svc_t *svc, const char *body, size_t len, uint64_t now)
{
    uint64_t node;
    uint32_t seg;
    UNPACK("qu", &node, &seg);
    seginfo_t *si = mc__svc_seg_info(svc, seg);
    if (!si || si->node != node)
        return -ENOENT;
    mc__svc_seg_drop(svc, seg, now);
    return 0;
}

/* A checked segment mounted again enforces the epoch of its mount: no
 * write of before can land any more, so new data may go there (once its
 * report, if one is in progress, is over). */
static void seg_enforces_mount(mc__svc_t *svc, seginfo_t *si, uint64_t now)
{
    si->hold_epoch = 0;
    if (si->hold_to) { /* a report in progress: it ends the hold */
        si->hold_to = now;
        return;
    }
    mc__master_hold_segment(svc->m, si->id, now);
    mc__repair_wake(svc->rp);
}

int mc__svc_op_heartbeat(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w)
{
    uint64_t node, enforced, want = 0;
    uint32_t seg, nflags;
    UNPACK("ququ", &node, &seg, &enforced, &nflags);
    node_t *n = mc__svc_node_find(svc, node);
    if (n)
        n->last_hb = now;
    uint32_t flags = !n ? MC__HB_REMOUNT : mc__repair_pending(svc->rp, node) ? MC__HB_REPAIR : 0;
    mc__svc_flush(svc);
    if (n && mc__svc_notes_for(svc, node))
        flags |= MC__HB_RECORDS;
    seginfo_t *si = n && seg ? mc__svc_seg_info(svc, seg) : NULL;
    if (si && si->node == node) {
        if (enforced > si->enforced && enforced <= si->epoch)
            si->enforced = enforced;
        if (si->hold_epoch && si->enforced >= si->hold_epoch)
            seg_enforces_mount(svc, si, now);
        si->checked = (nflags & MC__MOUNT_CHECKED) != 0;
        if (si->epoch > enforced)
            want = si->epoch;
    }
    mc__pack(w, "uq", flags, want);
    return w->err;
}

/* Hands node its repair tasks (repair.h; the layout is in proto.h). */
int mc__svc_op_repair_take(mc__svc_t *svc, const char *body, size_t len, uint64_t now,
                           mc__wbuf_t *w)
{
    uint64_t node;
    UNPACK("q", &node);
    mc__repair_task_t *t;
    for (int sent = 0; sent < 16 && (t = mc__repair_take(svc->rp, node, now));) {
        mc__version_t *v = mc__master_find(svc->m, t->key, t->klen);
        if (!v || v->id != t->vid) { /* replaced or removed since */
            mc__repair_finish(svc->rp, svc->m, node, t->id, -ENOENT, now);
            continue;
        }
        mc__wbuf_t tw = {0};
        mc__pack(&tw, "qqquuqssu", t->id, t->limit_ms, t->size, 1u, t->dst.seg,
                 mc__svc_seg_epoch(svc, t->dst.seg), "", 0u, "", 0u, t->dst.n);
        for (uint32_t i = 0; i < t->dst.n; i++)
            mc__pack(&tw, "qq", t->dst.ext[i].off, t->dst.ext[i].len);
        mc__svc_pack_replicas(svc, &tw, v);
        mc__repair_sources(t, v);
        if (tw.err == 0)
            mc__pack(w, "s", tw.p, (uint32_t)tw.len);
        free(tw.p);
        sent++;
    }
    return w->err;
}

int mc__svc_op_repair_done(mc__svc_t *svc, const char *body, size_t len, uint64_t now)
{
    uint64_t node, id;
    int64_t status;
    UNPACK("qqi", &node, &id, &status);
    return mc__repair_finish(svc->rp, svc->m, node, id, status == 0 ? 0 : -EIO, now);
}
