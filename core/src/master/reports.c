/*
 * reports.c - the records nodes keep, as the master service sees them (see
 * service_i.h): the notices queued per segment for its node
 * (RECORDS_TAKE), the merge of a node's report after a restart of the
 * master (RECORDS_REPORT, and the hold of a segment whose report is
 * overdue), and, at a new leader, the op log's view: the segments whose
 * records wait for their node (their ids are not handed out again), what
 * it says left the namespace, and its records joining a segment's report.
 * Split from nodes.c, which mounts, drops and watches the segments.
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "master/oplog.h"
#include "master/service_i.h"

/* ---- records: notices to nodes, reports from them ----
 *
 * Each node keeps the record of every published version with a replica in
 * its segment (records.c). Notices for it wait here, per segment, until
 * the node fetches them (RECORDS_TAKE, when its heartbeat says there are
 * some): the master never calls a node. A node that mounts its segment
 * again after a restart of the master reports its records
 * (RECORDS_REPORT), which the master merges; its segment takes nothing new
 * until the report is over.
 */

/* Encodes one notice about v for segment seg into e (see proto.h). */
static void note_encode(mc__wbuf_t *e, const mc__master_t *m, uint32_t seg, mc__version_t *v,
                        int drop)
{
    mc__pack(e, "bq", drop ? MC__NOTE_DROP : MC__NOTE_PUT, v->id);
    if (drop)
        return;
    mc__rec_t r;
    mc__extent_t one;
    const mc__extent_t *ext = mc__master_record(m, v, seg, &r, &one);
    mc__wbuf_t rb = {0};
    mc__pack_rec_head(&rb, &r);
    for (uint32_t i = 0; i < r.next; i++)
        mc__pack_extent(&rb, ext[i].off, ext[i].len);
    if (rb.err == 0)
        mc__pack(e, "s", rb.p, (uint32_t)rb.len);
    else
        e->err = rb.err;
    free(rb.p);
}

/* Appends the notice e to the queue of segment seg's node. */
static void note_queue(mc__svc_t *svc, uint32_t seg, const mc__wbuf_t *e)
{
    seginfo_t *si = mc__svc_seg_info(svc, seg);
    if (!si || si->node == 0)
        return; /* our own segment goes with us */
    if (si->notes.len > NOTES_MAX || e->err) {
        svc->notices_dropped++;
        return;
    }
    mc__pack(&si->notes, "s", e->p, (uint32_t)e->len);
    if (si->notes.err) {
        svc->notices_dropped++;
        si->notes.err = 0; /* what was queued before stays whole */
    }
}

/* Appends one notice about v to the queue of segment seg's node and, for a
 * master with an op log, to the log. */
static void note_add(mc__svc_t *svc, uint32_t seg, mc__version_t *v, int drop, int log)
{
    seginfo_t *si = mc__svc_seg_info(svc, seg);
    if (!si || si->node == 0)
        return;
    mc__wbuf_t e = {0};
    note_encode(&e, svc->m, seg, v, drop);
    if (log && svc->journal && e.err == 0)
        svc->journal(svc->journal_arg, seg, e.p, e.len);
    note_queue(svc, seg, &e);
    free(e.p);
}

void mc__svc_replica_gone(mc__svc_t *svc, const mc__version_t *v, uint32_t seg)
{
    seginfo_t *si = mc__svc_seg_info(svc, seg);
    if (!si || si->node == 0)
        return; /* our own segment keeps no records */
    mc__wbuf_t e = {0};
    mc__pack(&e, "bq", MC__NOTE_DROP, v->id);
    note_queue(svc, seg, &e);
    e.len = 0;
    mc__pack(&e, "bq", MC__LOG_REP_GONE, v->id);
    if (svc->journal && e.err == 0)
        svc->journal(svc->journal_arg, seg, e.p, e.len);
    free(e.p);
}

/* ---- where the records of a hard-linked file's names are ----
 *
 * A name's record goes to the nodes of its file when the name is made or
 * renamed. The file's bytes may move since (a rewrite onto other nodes, a
 * repair): the nodes of before keep the name, and the new ones get the
 * records of all its names, so that the names come back with the file
 * from its nodes of now alone. So that a drop (or a rename) of a name
 * reaches every node told of it, and the name does not come back with a
 * restart of the master, each hard-linked file keeps the segments told of
 * any of its names, and its name entries (both merged from a segment's
 * report too), until the file leaves. */

typedef struct name_segs {
    mc__idnode_t h;
    uint32_t n, cap;
    uint32_t *seg;
    uint32_t nnames, names_cap;
    mc__version_t **names; /* its name entries (told by their notices, or
                              merged): a node that takes the file's bytes
                              takes their records */
} name_segs_t;

/* The segments of the names of inode key ino[0..ilen); made if make (NULL:
 * none, or out of memory). */
static name_segs_t *name_segs(mc__svc_t *svc, const char *ino, size_t ilen, int make)
{
    uint64_t no;
    if (!mc__inode_no(ino, ilen, &no))
        return NULL;
    name_segs_t *t = svc->name_segs.b ? (name_segs_t *)mc__ids_get(&svc->name_segs, no) : NULL;
    if (t || !make)
        return t;
    if ((!svc->name_segs.b && mc__ids_init(&svc->name_segs) < 0) || !(t = calloc(1, sizeof(*t))))
        return NULL;
    t->h.id = no;
    mc__ids_add(&svc->name_segs, &t->h);
    return t;
}

static int segs_have(const name_segs_t *t, uint32_t seg)
{
    for (uint32_t i = 0; t && i < t->n; i++)
        if (t->seg[i] == seg)
            return 1;
    return 0;
}

/* Adds seg to t (out of memory: not added). */
static void segs_add(name_segs_t *t, uint32_t seg)
{
    if (!t || segs_have(t, seg))
        return;
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 4;
        uint32_t *s = realloc(t->seg, sizeof(*s) * cap);
        if (!s)
            return;
        t->seg = s;
        t->cap = cap;
    }
    t->seg[t->n++] = seg;
}

/* Name entry v of t's file came (keep) or left (out of memory: not kept,
 * its record then stays where it is). */
static void names_keep(name_segs_t *t, mc__version_t *v, int keep)
{
    uint32_t i = 0;
    while (t && i < t->nnames && t->names[i] != v)
        i++;
    if (!t || (i < t->nnames) == keep)
        return;
    if (!keep) {
        t->names[i] = t->names[--t->nnames];
        return;
    }
    if (t->nnames == t->names_cap) {
        uint32_t cap = t->names_cap ? t->names_cap * 2 : 2;
        mc__version_t **a = realloc(t->names, sizeof(*a) * cap);
        if (!a)
            return;
        t->names = a;
        t->names_cap = cap;
    }
    t->names[t->nnames++] = v;
}

static void name_segs_del(mc__svc_t *svc, name_segs_t *t)
{
    mc__ids_del(&svc->name_segs, t->h.id);
    free(t->seg);
    free(t->names);
    free(t);
}

void mc__svc_name_segs_free(mc__svc_t *svc)
{
    size_t at = 0;
    for (mc__idnode_t *e; svc->name_segs.b && (e = mc__ids_first(&svc->name_segs, &at));)
        name_segs_del(svc, (name_segs_t *)e);
    mc__ids_fini(&svc->name_segs);
}

/* The master's notice callback (mc__master_notices()): v's record went
 * stale, or v left the namespace; its nodes are those of its replicas (a
 * name entry's: its file's, and those told of its file's names before). */
static void on_notice(void *arg, mc__master_t *m, mc__version_t *v, int drop)
{
    mc__svc_t *svc = arg;
    const mc__vmore_t *x = mc__vmore(v);
    const mc__version_t *f = x->link ? mc__master_resolve(m, v) : v;
    name_segs_t *t = x->link ? name_segs(svc, x->link, x->linklen, f && !drop) : NULL;
    names_keep(t, v, !drop);
    for (uint32_t r = 0; f && r < f->nrep; r++) {
        uint32_t seg = mc__vrep_seg(f, r);
        note_add(svc, seg, v, drop, 1);
        if (!drop)
            segs_add(t, seg);
    }
    for (uint32_t i = 0; t && i < t->n; i++) {
        int sent = 0;
        for (uint32_t r = 0; f && r < f->nrep && !sent; r++)
            sent = mc__vrep_seg(f, r) == t->seg[i];
        if (!sent)
            note_add(svc, t->seg[i], v, drop, 1);
    }
    /* A hard-linked file's bytes on a node not told of its names (a
     * rewrite, a repair): its names' records go there too, so that they
     * come back with the file from its nodes of now alone. */
    if (!drop && !x->link && mc__master_is_inode_key(mc__vkey(v), v->klen) &&
        (t = name_segs(svc, mc__vkey(v), v->klen, 0)))
        for (uint32_t r = 0; r < v->nrep; r++) {
            uint32_t seg = mc__vrep_seg(v, r);
            if (segs_have(t, seg))
                continue;
            for (uint32_t i = 0; i < t->nnames; i++)
                note_add(svc, seg, t->names[i], 0, 1);
            segs_add(t, seg);
        }
    /* The file left (its last name went, or it was lost): so do its names'
     * segments. A version of it replaced by a newer one leaves them. */
    if (drop && !x->link && mc__master_is_inode_key(mc__vkey(v), v->klen) &&
        !mc__master_find(m, mc__vkey(v), v->klen) && (t = name_segs(svc, mc__vkey(v), v->klen, 0)))
        name_segs_del(svc, t);
}

void mc__svc_notices(mc__svc_t *svc)
{
    mc__master_notices(svc->m, on_notice, svc);
}

/* ---- the op log (master/oplog.h) ---- */

static void pend_add(void *arg, uint32_t seg)
{
    mc__svc_t *svc = arg;
    uint32_t *p = realloc(svc->pend, sizeof(*p) * (size_t)(svc->npend + 1));
    if (p) { /* else the log's records of seg are not merged: as without etcd */
        svc->pend = p;
        p[svc->npend++] = seg;
    }
}

/* 1 (once) if segment seg still waits for the log's records of it: taken
 * off the list, as when it is dropped here. */
static int pend_take(mc__svc_t *svc, uint32_t seg)
{
    for (int i = 0; i < svc->npend; i++) {
        if (svc->pend[i] == seg) {
            svc->pend[i] = svc->pend[--svc->npend];
            return 1;
        }
    }
    return 0;
}

int mc__svc_seg_pending(const mc__svc_t *svc, uint32_t id)
{
    for (int i = 0; i < svc->npend; i++)
        if (svc->pend[i] == id)
            return 1;
    return 0;
}

void mc__svc_log_seg_node(mc__svc_t *svc, uint32_t seg, uint64_t node)
{
    mc__wbuf_t e = {0};
    mc__pack(&e, "bq", MC__LOG_SEG_NODE, node);
    if (svc->journal && e.err == 0)
        svc->journal(svc->journal_arg, seg, e.p, e.len);
    free(e.p);
}

int mc__svc_seg_foreign(const mc__svc_t *svc, uint32_t seg, uint64_t node)
{
    uint64_t owner;
    return svc->view && mc__svc_seg_pending(svc, seg) &&
           (owner = mc__oplog_seg_node(svc->view, seg)) != 0 && owner != node;
}

void mc__svc_log_seg_gone(mc__svc_t *svc, uint32_t seg)
{
    mc__wbuf_t e = {0};
    mc__pack(&e, "bq", MC__LOG_SEG_GONE, (uint64_t)0);
    if (svc->journal && e.err == 0)
        svc->journal(svc->journal_arg, seg, e.p, e.len);
    free(e.p);
    pend_take(svc, seg); /* what the log knew of it is gone too */
}

static void forget(void *arg, uint64_t id)
{
    mc__master_forget(arg, id);
}

int mc__svc_rebuilding(const mc__svc_t *svc)
{
    return svc->npend > 0;
}

static void seen_rec(void *arg, const char *rec, size_t len)
{
    mc__rec_t r;
    if (mc__take_rec(rec, len, &r) == 0)
        mc__master_seen(arg, r.version, r.stamp);
}

/* Segment seg has records in the view: they wait for its node, and what
 * this master publishes meanwhile is newer than they are (its clock may
 * have started its ids below theirs). */
static void view_seg(void *arg, uint32_t seg)
{
    mc__svc_t *svc = arg;
    mc__oplog_each(svc->view, seg, seen_rec, svc->m);
    pend_add(svc, seg);
}

void mc__svc_journal(mc__svc_t *svc, mc__svc_journal_fn fn, void *arg, const mc__oplog_t *view)
{
    svc->journal = fn;
    svc->journal_arg = arg;
    svc->view = view;
    mc__svc_notices(svc);
    if (view) {
        mc__oplog_each_gone(view, forget, svc->m);
        mc__oplog_each_seg(view, view_seg, svc);
    }
}

void mc__svc_flush(mc__svc_t *svc)
{
    mc__master_flush(svc->m);
}

int mc__svc_notes_for(mc__svc_t *svc, uint64_t node)
{
    for (int i = 0; i < svc->nseg; i++)
        if (svc->segs[i].node == node && svc->segs[i].notes.len)
            return 1;
    return 0;
}

int mc__svc_op_records_take(mc__svc_t *svc, const char *body, size_t len, mc__wbuf_t *w)
{
    uint64_t node, ack;
    uint32_t seg;
    UNPACK("quq", &node, &seg, &ack);
    seginfo_t *si = mc__svc_seg_info(svc, seg);
    if (!si || si->node != node)
        return -ENOENT;
    mc__svc_flush(svc);
    /* The node applied the last answer: those notices are done. */
    if (ack > si->sent)
        return -EINVAL;
    memmove(si->notes.p, si->notes.p + ack, si->notes.len - ack);
    si->notes.len -= ack;
    size_t n = 0;
    while (n + 4 <= si->notes.len) {
        uint32_t el;
        memcpy(&el, si->notes.p + n, 4);
        el = le32toh(el);
        if (n && n + 4 + el > MC__NOTES_BATCH)
            break;
        n += 4 + el;
    }
    si->sent = n;
    return mc__pack(w, "*", si->notes.p, (uint32_t)n);
}

/* Merges one record p[0..pl) (mc__rec_t) on segment seg; one merged under
 * another id (mc__master_merge()'s 2) is dropped from seg's node (the
 * version's record under its new id follows). Returns as
 * mc__master_merge() (1 for merged), -EBADMSG for one that does not decode. */
static int merge_one(mc__svc_t *svc, uint32_t seg, const char *p, uint32_t pl, uint64_t now)
{
    mc__rec_t wr;
    mc__extent_t ext[64], *e = ext;
    int rc = mc__take_rec(p, pl, &wr);
    if (rc < 0)
        return -EBADMSG;
    if (wr.next > 64 && !(e = malloc(sizeof(*e) * wr.next)))
        return -ENOMEM;
    mc__wire_replica_t wrep = {.next = wr.next, .ext = wr.ext};
    for (uint32_t i = 0; i < wr.next; i++)
        mc__wire_extent(&wrep, i, &e[i].off, &e[i].len);
    rc = mc__master_merge(svc->m, seg, &wr, e, now);
    if (e != ext)
        free(e);
    if (rc == 2) {
        mc__version_t tmp = {.id = wr.version};
        note_add(svc, seg, &tmp, 1, 1);
        svc->records_renamed++;
        rc = 1;
    }
    if (rc == 1 && wr.linklen) { /* a name's record: seg keeps it */
        name_segs_t *t = name_segs(svc, wr.link, wr.linklen, 1);
        mc__version_t *v = mc__master_find(svc->m, wr.key, wr.klen);
        const mc__vmore_t *x = v ? mc__vmore(v) : NULL;
        segs_add(t, seg);
        if (x && x->link && x->linklen == wr.linklen && !memcmp(x->link, wr.link, wr.linklen))
            names_keep(t, v, 1);
    }
    return rc;
}

typedef struct view_merge {
    mc__svc_t *svc;
    uint32_t seg;
    uint64_t now;
} view_merge_t;

static void merge_logged(void *arg, const char *rec, size_t len)
{
    view_merge_t *vm = arg;
    int rc = merge_one(vm->svc, vm->seg, rec, (uint32_t)len, vm->now);
    if (rc == 1)
        vm->svc->records_merged++;
    else
        vm->svc->records_refused++;
}

void mc__svc_merge_view(mc__svc_t *svc, uint32_t seg, uint64_t now)
{
    view_merge_t vm = {svc, seg, now};
    if (svc->view && pend_take(svc, seg))
        mc__oplog_each(svc->view, seg, merge_logged, &vm);
}

int mc__svc_op_records_report(mc__svc_t *svc, const char *body, size_t len, uint64_t now)
{
    uint64_t node;
    uint32_t seg, last, rl;
    const char *rest;
    UNPACK("quu*", &node, &seg, &last, &rest, &rl);
    seginfo_t *si = mc__svc_seg_info(svc, seg);
    if (!si || si->node != node)
        return -ENOENT;
    size_t left = rl;
    while (left) {
        const char *p, *next;
        uint32_t pl, nl;
        TAKE(mc__unpack(rest, left, "s*", &p, &pl, &next, &nl));
        rest = next;
        left = nl;
        int rc = merge_one(svc, seg, p, pl, now);
        if (rc == -ENOMEM)
            return rc;
        if (rc == 1) {
            svc->records_merged++;
            continue;
        }
        /* Refused (older, gone, its space taken) or unreadable: the node
         * forgets it. */
        svc->records_refused++;
        uint64_t id;
        if (pl >= 8) {
            memcpy(&id, p, 8);
            mc__version_t tmp = {.id = le64toh(id)};
            note_add(svc, seg, &tmp, 1, 0);
        }
    }
    if (last && si->hold_to) {
        mc__svc_merge_view(svc, seg, now);
        /* The report is over: new data may go there once the writers of
         * before are over too. */
        mc__master_hold_segment(svc->m, seg, si->hold_to > now ? si->hold_to : now);
        si->hold_to = 0;
        mc__repair_wake(svc->rp);
    }
    return 0;
}

void mc__svc_reports_tick(mc__svc_t *svc, uint64_t now)
{
    for (int i = 0; i < svc->nseg; i++) {
        seginfo_t *si = &svc->segs[i];
        if (si->hold_to && now >= si->report_by) {
            /* Without the rest of the report: the log's records of it
             * still join (before new data may take their space). */
            mc__svc_merge_view(svc, si->id, now);
            mc__master_hold_segment(svc->m, si->id, si->hold_to > now ? si->hold_to : now);
            si->hold_to = 0;
        }
    }
}
