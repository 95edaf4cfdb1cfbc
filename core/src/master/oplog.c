/*
 * oplog.c - the op log's entries and a standby's view of it (see oplog.h):
 * a hash by version id of each version's latest record per segment.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "master/ids.h"
#include "master/master.h"
#include "master/oplog.h"

typedef struct lrec {
    uint32_t seg, len;
    char *rec;
} lrec_t;

typedef struct entry {
    mc__idnode_t h;
    int gone;
    uint32_t n;
    lrec_t r[MC__MAX_REPLICAS];
} entry_t;

typedef struct seg_node {
    uint32_t seg;
    uint64_t node;
} seg_node_t;

struct mc__oplog {
    mc__ids_t by_id;
    uint64_t live, gone;
    seg_node_t *nodes; /* [0, nnodes): each segment's node (MC__LOG_SEG_NODE) */
    size_t nnodes;
};

int mc__oplog_new(mc__oplog_t **out)
{
    mc__oplog_t *l = calloc(1, sizeof(*l));
    if (!l || mc__ids_init(&l->by_id) < 0) {
        free(l);
        return -ENOMEM;
    }
    *out = l;
    return 0;
}

static void entry_clear(entry_t *e)
{
    for (uint32_t i = 0; i < e->n; i++)
        free(e->r[i].rec);
    e->n = 0;
}

void mc__oplog_free(mc__oplog_t *l)
{
    if (!l)
        return;
    size_t at = 0;
    for (mc__idnode_t *h; (h = mc__ids_first(&l->by_id, &at));) {
        entry_t *e = (entry_t *)mc__ids_del(&l->by_id, h->id);
        entry_clear(e);
        free(e);
    }
    mc__ids_fini(&l->by_id);
    free(l->nodes);
    free(l);
}

int mc__oplog_pack(mc__wbuf_t *w, uint32_t seg, const char *note, size_t len)
{
    return mc__pack(w, "us", seg, note, (uint32_t)len);
}

static entry_t *entry_get(mc__oplog_t *l, uint64_t id)
{
    entry_t *e = (entry_t *)mc__ids_get(&l->by_id, id);
    if (e || !(e = calloc(1, sizeof(*e))))
        return e;
    e->h.id = id;
    mc__ids_add(&l->by_id, &e->h);
    l->live++;
    return e;
}

/* Keeps rec[0..len) as version id's record on segment seg. */
static int keep(mc__oplog_t *l, uint64_t id, uint32_t seg, const char *rec, uint32_t len)
{
    entry_t *e = entry_get(l, id);
    if (!e)
        return -ENOMEM;
    if (e->gone)
        return 0; /* ids are never reused: a late record of a version gone */
    uint32_t i = 0;
    while (i < e->n && e->r[i].seg != seg)
        i++;
    if (i == MC__MAX_REPLICAS)
        return 0;
    char *c = malloc(len ? len : 1);
    if (!c)
        return -ENOMEM;
    memcpy(c, rec, len);
    if (i == e->n)
        e->n++;
    else
        free(e->r[i].rec);
    e->r[i] = (lrec_t){seg, len, c};
    return 0;
}

static int drop(mc__oplog_t *l, uint64_t id)
{
    entry_t *e = entry_get(l, id);
    if (!e)
        return -ENOMEM;
    if (!e->gone) {
        entry_clear(e);
        e->gone = 1;
        l->live--;
        l->gone++;
    }
    return 0;
}

static seg_node_t *seg_node_find(const mc__oplog_t *l, uint32_t seg)
{
    for (size_t i = 0; i < l->nnodes; i++)
        if (l->nodes[i].seg == seg)
            return &l->nodes[i];
    return NULL;
}

uint64_t mc__oplog_seg_node(const mc__oplog_t *l, uint32_t seg)
{
    const seg_node_t *sn = seg_node_find(l, seg);
    return sn ? sn->node : 0;
}

/* Segment seg was mounted by node. */
static int seg_node(mc__oplog_t *l, uint32_t seg, uint64_t node)
{
    seg_node_t *sn = seg_node_find(l, seg);
    if (!sn) {
        sn = realloc(l->nodes, sizeof(*sn) * (l->nnodes + 1));
        if (!sn)
            return -ENOMEM;
        l->nodes = sn;
        sn = &l->nodes[l->nnodes++];
        sn->seg = seg;
    }
    sn->node = node;
    return 0;
}

/* Segment seg was dropped: every record on it goes, and its node. */
static void seg_gone(mc__oplog_t *l, uint32_t seg)
{
    seg_node_t *sn = seg_node_find(l, seg);
    if (sn)
        *sn = l->nodes[--l->nnodes];
    for (size_t b = 0; b < ((size_t)1 << l->by_id.bits); b++) {
        for (mc__idnode_t *h = l->by_id.b[b]; h; h = h->hnext) {
            entry_t *e = (entry_t *)h;
            for (uint32_t i = 0; i < e->n; i++) {
                if (e->r[i].seg == seg) {
                    free(e->r[i].rec);
                    e->r[i] = e->r[--e->n];
                    break;
                }
            }
        }
    }
}

/* Version id's record on segment seg goes (its other records stay). */
static void rep_gone(mc__oplog_t *l, uint64_t id, uint32_t seg)
{
    entry_t *e = (entry_t *)mc__ids_get(&l->by_id, id);
    for (uint32_t i = 0; e && i < e->n; i++) {
        if (e->r[i].seg == seg) {
            free(e->r[i].rec);
            e->r[i] = e->r[--e->n];
            return;
        }
    }
}

int mc__oplog_apply(mc__oplog_t *l, const char *p, size_t n)
{
    while (n) {
        uint32_t seg, nl, rl, restl;
        const char *note, *rec, *rest;
        uint8_t kind;
        uint64_t id;
        if (mc__unpack(p, n, "us*", &seg, &note, &nl, &rest, &restl) < 0 ||
            mc__unpack(note, nl, "bq*", &kind, &id, &rec, &rl) < 0)
            return -EBADMSG;
        p = rest;
        n = restl;
        int rc = 0;
        if (kind == MC__NOTE_PUT) {
            if (mc__unpack(rec, rl, "s", &rec, &rl) < 0)
                return -EBADMSG;
            rc = keep(l, id, seg, rec, rl);
        } else if (kind == MC__NOTE_DROP) {
            rc = drop(l, id);
        } else if (kind == MC__LOG_SEG_GONE) {
            seg_gone(l, seg);
        } else if (kind == MC__LOG_REP_GONE) {
            rep_gone(l, id, seg);
        } else if (kind == MC__LOG_SEG_NODE) {
            rc = seg_node(l, seg, id);
        } else {
            return -EBADMSG;
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

void mc__oplog_each(const mc__oplog_t *l, uint32_t seg,
                    void (*cb)(void *arg, const char *rec, size_t len), void *arg)
{
    for (size_t b = 0; b < ((size_t)1 << l->by_id.bits); b++)
        for (mc__idnode_t *h = l->by_id.b[b]; h; h = h->hnext) {
            const entry_t *e = (const entry_t *)h;
            for (uint32_t i = 0; i < e->n; i++)
                if (e->r[i].seg == seg)
                    cb(arg, e->r[i].rec, e->r[i].len);
        }
}

void mc__oplog_each_seg(const mc__oplog_t *l, void (*cb)(void *arg, uint32_t seg), void *arg)
{
    uint32_t seen[64];
    size_t n = 0;
    for (size_t b = 0; b < ((size_t)1 << l->by_id.bits); b++)
        for (mc__idnode_t *h = l->by_id.b[b]; h; h = h->hnext) {
            const entry_t *e = (const entry_t *)h;
            for (uint32_t i = 0; i < e->n; i++) {
                size_t k = 0;
                while (k < n && seen[k] != e->r[i].seg)
                    k++;
                if (k < n)
                    continue;
                if (n < sizeof(seen) / sizeof(seen[0]))
                    seen[n++] = e->r[i].seg;
                cb(arg, e->r[i].seg); /* past 64 segments, maybe twice: callers take that */
            }
        }
}

void mc__oplog_each_gone(const mc__oplog_t *l, void (*cb)(void *arg, uint64_t id), void *arg)
{
    for (size_t b = 0; b < ((size_t)1 << l->by_id.bits); b++)
        for (mc__idnode_t *h = l->by_id.b[b]; h; h = h->hnext)
            if (((const entry_t *)h)->gone)
                cb(arg, h->id);
}

void mc__oplog_counts(const mc__oplog_t *l, uint64_t *live, uint64_t *gone)
{
    *live = l->live;
    *gone = l->gone;
}

/* Appends an entry to the last buffer of *b, or a new one past chunk_max. */
static int snap_add(mc__wbuf_t **b, size_t *n, size_t chunk_max, uint32_t seg, const char *note,
                    size_t len)
{
    if (!*n || (*b)[*n - 1].len + len + 8 > chunk_max) {
        mc__wbuf_t *nb = realloc(*b, sizeof(*nb) * (*n + 1));
        if (!nb)
            return -ENOMEM;
        *b = nb;
        nb[(*n)++] = (mc__wbuf_t){0};
    }
    return mc__oplog_pack(&(*b)[*n - 1], seg, note, len) < 0 ? -ENOMEM : 0;
}

int mc__oplog_snapshot(const mc__oplog_t *l, size_t chunk_max, mc__wbuf_t **out, size_t *n)
{
    mc__wbuf_t *b = NULL, note = {0};
    size_t nb = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < l->nnodes; i++) {
        note.len = note.err = 0;
        mc__pack(&note, "bq", MC__LOG_SEG_NODE, l->nodes[i].node);
        rc = note.err ? -ENOMEM : snap_add(&b, &nb, chunk_max, l->nodes[i].seg, note.p, note.len);
    }
    for (size_t k = 0; rc == 0 && k < ((size_t)1 << l->by_id.bits); k++) {
        for (mc__idnode_t *h = l->by_id.b[k]; rc == 0 && h; h = h->hnext) {
            const entry_t *e = (const entry_t *)h;
            for (uint32_t i = 0; rc == 0 && i < (e->gone ? 1 : e->n); i++) {
                note.len = note.err = 0;
                if (e->gone)
                    mc__pack(&note, "bq", MC__NOTE_DROP, h->id);
                else
                    mc__pack(&note, "bqs", MC__NOTE_PUT, h->id, e->r[i].rec, e->r[i].len);
                rc = note.err ? -ENOMEM
                              : snap_add(&b, &nb, chunk_max, e->gone ? 0 : e->r[i].seg, note.p,
                                         note.len);
            }
        }
    }
    free(note.p);
    if (rc < 0) {
        for (size_t i = 0; i < nb; i++)
            free(b[i].p);
        free(b);
        return rc;
    }
    *out = b;
    *n = nb;
    return 0;
}
