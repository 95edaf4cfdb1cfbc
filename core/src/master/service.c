/*
 * service.c - the master's request handling (see service.h).
 *
 * Writes in progress and open handles live in two id hashes (ids.h), and
 * on their owner's list (an owner is a
 * connection), so that a connection's close costs what it holds. Writes are
 * also on a list by last touch, so that expiring idle ones costs what
 * expires. Segments and nodes live in small arrays (a cluster has tens of
 * them, not millions).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "master/ids.h"
#include "master/repair.h"
#include "master/service.h"

/* What a connection (an owner) holds: its writes in progress and its open
 * handles, on one list. */
typedef struct owner {
    mc__idnode_t h; /* in svc->owners by connection id */
    struct owned *head;
} owner_t;

typedef struct owned {
    mc__idnode_t h; /* in svc->puts or svc->handles by its id */
    owner_t *own;
    struct owned *oprev, *onext; /* on own->head */
} owned_t;
/* A node silent this long is suspected dead: new puts and repairs go to
 * other nodes while there are any (heartbeats come every second). */
#define SUSPECT_MS 2500

typedef struct put {
    owned_t o;
    uint64_t touched;
    unsigned flags;
    mc__version_t *v;
    struct put *tprev, *tnext; /* on svc->touch_*, least recently touched first */
} put_t;

typedef struct plist {
    put_t *head, *tail;
} plist_t;

typedef struct handle {
    owned_t o;
    mc__version_t *v;
} handle_t;

/* A revoked write whose writer may still be sending bytes: it holds a write
 * lease until free_at. Its space stays allocated (and goes with its segment
 * if that is dropped) until then, so that no late write of it can land in
 * space handed to another object. */
typedef struct fenced {
    mc__version_t *v;
    uint64_t free_at;
    struct fenced *next;
} fenced_t;

typedef struct seginfo {
    uint32_t id;
    uint64_t node; /* 0: local to this process */
    uint64_t size;
    char *addr;
    char *rdma; /* the node's RDMA record, opaque (NULL: none) */
    uint32_t rdma_len;
} seginfo_t;

typedef struct node {
    uint64_t id;
    uint64_t last_hb;
    uint64_t failed_at; /* a writer could not reach it (PUT_DROP_REPLICA); 0: never */
} node_t;

struct mc__svc {
    mc__master_t *m;
    mc__svc_opts_t o;
    mc__ids_t puts, handles, owners;
    plist_t by_touch; /* other processes' writes, least recently touched first */
    plist_t local;    /* this process's own writes (MC__SVC_OWNER_LOCAL) */
    fenced_t *fenced;
    uint64_t next_id;
    seginfo_t *segs;
    int nseg;
    node_t *nodes;
    int nnodes;
    uint32_t next_seg;
    char *local_addr;
    char *local_rdma; /* RDMA record of the local segments (NULL: none) */
    uint32_t local_rdma_len;
    uint64_t nodes_expired, objects_lost, puts_expired, replicas_dropped;
    mc__repair_t *rp;
};

uint64_t mc__svc_random_id(void)
{
    uint64_t id = 0;
    if (getrandom(&id, sizeof(id), 0) != sizeof(id))
        id = (uint64_t)(uintptr_t)&id * 2654435761u; /* no entropy: differs per run (ASLR) */
    return (id >> 2) | 1;
}

int mc__svc_new(mc__svc_t **out, mc__master_t *m, const mc__svc_opts_t *o)
{
    mc__svc_t *svc = calloc(1, sizeof(*svc));
    if (!svc)
        return -ENOMEM;
    svc->m = m;
    if (o)
        svc->o = *o;
    if (!svc->o.node_ttl_ms)
        svc->o.node_ttl_ms = 5000;
    if (!svc->o.put_ttl_ms)
        svc->o.put_ttl_ms = 60000;
    if (!svc->o.write_lease_ms)
        svc->o.write_lease_ms = MC__WRITE_LEASE_MS;
    if (svc->o.write_lease_ms > svc->o.put_ttl_ms)
        svc->o.write_lease_ms = svc->o.put_ttl_ms;
    int rc = mc__ids_init(&svc->puts);
    if (rc == 0)
        rc = mc__ids_init(&svc->handles);
    if (rc == 0)
        rc = mc__ids_init(&svc->owners);
    mc__repair_opts_t ro = {.inflight = svc->o.repair_inflight,
                            .bytes_per_s = svc->o.repair_bytes_per_s,
                            .off = svc->o.no_repair};
    if (rc < 0 || mc__repair_new(&svc->rp, &ro) < 0) {
        mc__svc_free(svc);
        return -ENOMEM;
    }
    svc->next_id = svc->o.first_id ? svc->o.first_id : 1;
    svc->next_seg = 1;
    *out = svc;
    return 0;
}

/* ---- owners, writes and handles ---- */

static owner_t *owner_get(mc__svc_t *svc, uint64_t id)
{
    owner_t *own = (owner_t *)mc__ids_get(&svc->owners, id);
    if (own)
        return own;
    if (!(own = calloc(1, sizeof(*own))))
        return NULL;
    own->h.id = id;
    mc__ids_add(&svc->owners, &own->h);
    return own;
}

/* Files e under a fresh id in ids and on owner's list. Returns 0 or
 * -ENOMEM. */
static int owned_add(mc__svc_t *svc, mc__ids_t *ids, owned_t *e, uint64_t owner)
{
    owner_t *own = owner_get(svc, owner);
    if (!own)
        return -ENOMEM;
    e->h.id = svc->next_id++;
    mc__ids_add(ids, &e->h);
    e->own = own;
    e->oprev = NULL;
    e->onext = own->head;
    if (own->head)
        own->head->oprev = e;
    own->head = e;
    return 0;
}

/* Takes e out of ids and off its owner's list (the owner's record stays,
 * empty or not, until the owner is gone). */
static void owned_del(mc__ids_t *ids, owned_t *e)
{
    mc__ids_del(ids, e->h.id);
    if (e->oprev)
        e->oprev->onext = e->onext;
    else
        e->own->head = e->onext;
    if (e->onext)
        e->onext->oprev = e->oprev;
}

/* The list p is on: the writes of this very process (MC__SVC_OWNER_LOCAL)
 * never expire, the others do when idle. */
static plist_t *put_list(mc__svc_t *svc, const put_t *p)
{
    return p->o.own->h.id == MC__SVC_OWNER_LOCAL ? &svc->local : &svc->by_touch;
}

static void touch_unlink(mc__svc_t *svc, put_t *p)
{
    plist_t *l = put_list(svc, p);
    if (p->tprev)
        p->tprev->tnext = p->tnext;
    else if (l->head == p)
        l->head = p->tnext;
    if (p->tnext)
        p->tnext->tprev = p->tprev;
    else if (l->tail == p)
        l->tail = p->tprev;
    p->tprev = p->tnext = NULL;
}

/* Records that p's writer is alive at now (its lease starts again). */
static void put_touch(mc__svc_t *svc, put_t *p, uint64_t now)
{
    touch_unlink(svc, p);
    plist_t *l = put_list(svc, p);
    p->touched = now;
    p->tprev = l->tail;
    if (l->tail)
        l->tail->tnext = p;
    else
        l->head = p;
    l->tail = p;
}

/* Forgets write p; returns its version, which is the caller's now. */
static mc__version_t *put_del(mc__svc_t *svc, put_t *p)
{
    mc__version_t *v = p->v;
    touch_unlink(svc, p);
    owned_del(&svc->puts, &p->o);
    free(p);
    return v;
}

/*
 * Ends write p without publishing it. With fenced, its writer may still be
 * sending bytes until its write lease runs out, so the space is kept until
 * then; without, the writer has stopped (it said so, or its lease is over)
 * and the space is freed now.
 */
static void put_end(mc__svc_t *svc, put_t *p, int fenced)
{
    uint64_t free_at = p->touched + svc->o.write_lease_ms;
    mc__version_t *v = put_del(svc, p);
    fenced_t *f = fenced ? malloc(sizeof(*f)) : NULL;
    if (!f) {
        /* Out of memory: freeing at once is the lesser evil than a leak
         * that lasts forever, and the lease margin still holds. */
        mc__master_abort(svc->m, v);
        return;
    }
    *f = (fenced_t){.v = v, .free_at = free_at, .next = svc->fenced};
    svc->fenced = f;
}

/* Frees the fenced writes whose lease is over at now. */
static void fenced_sweep(mc__svc_t *svc, uint64_t now)
{
    for (fenced_t **pp = &svc->fenced; *pp;) {
        fenced_t *f = *pp;
        if (f->free_at > now) {
            pp = &f->next;
            continue;
        }
        *pp = f->next;
        mc__master_abort(svc->m, f->v);
        free(f);
    }
}

static void handle_del(mc__svc_t *svc, handle_t *h, uint64_t now)
{
    mc__version_t *v = h->v;
    owned_del(&svc->handles, &h->o);
    free(h);
    mc__master_unref(svc->m, v, now);
}

void mc__svc_free(mc__svc_t *svc)
{
    if (!svc)
        return;
    while (svc->by_touch.head)
        put_end(svc, svc->by_touch.head, 0);
    while (svc->local.head)
        put_end(svc, svc->local.head, 0);
    size_t at = 0;
    for (mc__idnode_t *e; svc->handles.b && (e = mc__ids_first(&svc->handles, &at));)
        handle_del(svc, (handle_t *)e, 0);
    fenced_sweep(svc, UINT64_MAX);
    mc__repair_free(svc->rp, svc->m);
    at = 0;
    for (mc__idnode_t *e; svc->owners.b && (e = mc__ids_first(&svc->owners, &at));)
        free(mc__ids_del(&svc->owners, e->id));
    mc__ids_fini(&svc->puts);
    mc__ids_fini(&svc->handles);
    mc__ids_fini(&svc->owners);
    for (int i = 0; i < svc->nseg; i++) {
        free(svc->segs[i].addr);
        free(svc->segs[i].rdma);
    }
    free(svc->segs);
    free(svc->nodes);
    free(svc->local_addr);
    free(svc->local_rdma);
    free(svc);
}

void mc__svc_owner_gone(mc__svc_t *svc, uint64_t owner, uint64_t now)
{
    owner_t *own = (owner_t *)mc__ids_del(&svc->owners, owner);
    if (!own)
        return;
    while (own->head) {
        owned_t *e = own->head;
        if (mc__ids_get(&svc->puts, e->h.id) == &e->h)
            put_end(svc, (put_t *)e, 1);
        else
            handle_del(svc, (handle_t *)e, now);
    }
    free(own);
}

static seginfo_t *seg_info(mc__svc_t *svc, uint32_t id)
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
    svc->segs[svc->nseg++] = (seginfo_t){.id = id, .node = node, .size = size, .addr = a};
    return 0;
}

/* A segment id for a node that asked for any: the next one not in use,
 * never 0 (an embedded store's own) nor UINT32_MAX, wrapping around.
 * Returns 0 when every id is taken. */
static uint32_t seg_new_id(mc__svc_t *svc)
{
    for (uint32_t tries = 0; tries < (uint32_t)svc->nseg + 1; tries++) {
        uint32_t id = svc->next_seg;
        svc->next_seg = id >= UINT32_MAX - 1 ? 1 : id + 1;
        if (id && !seg_info(svc, id))
            return id;
    }
    return 0;
}

int mc__svc_add_local_segment(mc__svc_t *svc, uint32_t seg, uint64_t size, const char *addr)
{
    return seg_add(svc, seg, 0, size, addr, addr ? strlen(addr) : 0);
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

int mc__svc_set_local_rdma(mc__svc_t *svc, const void *rec, size_t len)
{
    return blob_set(&svc->local_rdma, &svc->local_rdma_len, rec, len);
}

/* Drops a segment and the replicas on it: published, retired, pending and
 * fenced versions alike, so that none frees space in a segment mounted
 * again under the same id. */
static void seg_drop(mc__svc_t *svc, uint32_t id, uint64_t now)
{
    for (put_t *p = svc->by_touch.head; p; p = p->tnext)
        mc__version_drop_replica(p->v, id);
    for (put_t *p = svc->local.head; p; p = p->tnext)
        mc__version_drop_replica(p->v, id);
    for (fenced_t *f = svc->fenced; f; f = f->next)
        mc__version_drop_replica(f->v, id);
    svc->objects_lost += mc__master_drop_segment(svc->m, id, now);
    mc__repair_seg_dropped(svc->rp, svc->m, id); /* and wakes the repair */
    for (int i = 0; i < svc->nseg; i++) {
        if (svc->segs[i].id == id) {
            free(svc->segs[i].addr);
            free(svc->segs[i].rdma);
            svc->segs[i] = svc->segs[--svc->nseg];
            break;
        }
    }
}

static node_t *node_find(mc__svc_t *svc, uint64_t id)
{
    for (int i = 0; i < svc->nnodes; i++)
        if (svc->nodes[i].id == id)
            return &svc->nodes[i];
    return NULL;
}

static node_t *node_touch(mc__svc_t *svc, uint64_t id, uint64_t now)
{
    node_t *n = node_find(svc, id);
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
    node_t *n = node_find(svc, si->node);
    return n && !node_suspect(n, now);
}

/* Tells the master which segments placement should avoid right now. */
static void mark_suspects(mc__svc_t *svc, uint64_t now)
{
    for (int i = 0; i < svc->nseg; i++)
        mc__master_segment_avoid(svc->m, svc->segs[i].id, !seg_live(svc, &svc->segs[i], now));
}

/* Plans repairs onto the segments of live remote nodes. */
static void repair_tick(mc__svc_t *svc, uint64_t now)
{
    mc__repair_target_t tg[64];
    size_t n = 0;
    for (int i = 0; i < svc->nseg && n < sizeof(tg) / sizeof(tg[0]); i++)
        if (svc->segs[i].node != 0 && seg_live(svc, &svc->segs[i], now) &&
            !mc__master_segment_held(svc->m, svc->segs[i].id, now))
            tg[n++] = (mc__repair_target_t){svc->segs[i].id, svc->segs[i].node};
    mc__repair_tick(svc->rp, svc->m, tg, n, now);
}

int mc__svc_tick(mc__svc_t *svc, uint64_t now)
{
    int dropped = 0;
    for (int i = 0; i < svc->nnodes;) {
        node_t *n = &svc->nodes[i];
        if (now - n->last_hb <= svc->o.node_ttl_ms) {
            i++;
            continue;
        }
        uint64_t id = n->id;
        svc->nodes[i] = svc->nodes[--svc->nnodes];
        svc->nodes_expired++;
        for (int s = 0; s < svc->nseg;) {
            if (svc->segs[s].node == id) {
                seg_drop(svc, svc->segs[s].id, now);
                dropped++;
            } else {
                s++;
            }
        }
    }
    /* Writes nobody touched for put_ttl: revoked. Their write lease (no
     * longer than put_ttl) is over, so the space is free at once. */
    while (svc->by_touch.head && now - svc->by_touch.head->touched > svc->o.put_ttl_ms) {
        put_end(svc, svc->by_touch.head, 0);
        svc->puts_expired++;
    }
    fenced_sweep(svc, now);
    mc__master_sweep(svc->m, now);
    repair_tick(svc, now);
    return dropped;
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

/* ---- encoding ---- */

static int pack_replicas(mc__svc_t *svc, mc__wbuf_t *w, const mc__version_t *v)
{
    mc__pack(w, "u", v->nrep);
    for (uint32_t r = 0; r < v->nrep; r++) {
        const mc__replica_t *rep = &v->rep[r];
        seginfo_t *si = seg_info(svc, rep->seg);
        const char *addr = si && si->addr ? si->addr : "";
        const char *rdma = si && si->rdma ? si->rdma : "";
        uint32_t rdma_len = si ? si->rdma_len : 0;
        if (si && si->node == 0 && !si->addr && svc->local_addr)
            addr = svc->local_addr;
        if (si && si->node == 0 && !si->rdma && svc->local_rdma) {
            rdma = svc->local_rdma;
            rdma_len = svc->local_rdma_len;
        }
        mc__pack_replica(w, rep->seg, addr, (uint32_t)strlen(addr), rdma, rdma_len, rep->n);
        for (uint32_t i = 0; i < rep->n; i++)
            mc__pack_extent(w, rep->ext[i].off, rep->ext[i].len);
    }
    return w->err;
}

/* The id of the segment whose data address is addr[0..len), or -1. */
static int64_t seg_by_addr(mc__svc_t *svc, const char *addr, size_t len)
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

static put_t *put_get(mc__svc_t *svc, uint64_t id)
{
    return (put_t *)mc__ids_get(&svc->puts, id);
}

static handle_t *handle_get(mc__svc_t *svc, uint64_t id)
{
    return (handle_t *)mc__ids_get(&svc->handles, id);
}

/* The stat and replica set of v, as OPEN and GET_REPLICAS answer them. */
static int pack_version(mc__svc_t *svc, mc__wbuf_t *w, const mc__version_t *v, uint64_t now)
{
    mc_stat_t st;
    mc__version_stat(v, now, &st);
    mc__pack_stat(w, &st);
    return pack_replicas(svc, w, v);
}

/* ---- operations ---- */

/* A request that does not decode is -EINVAL (a bad key) or -EBADMSG. */
#define TAKE(call)                                                                                 \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ < 0)                                                                               \
            return rc_ == -EINVAL ? -EINVAL : -EBADMSG;                                            \
    } while (0)
#define UNPACK(...) TAKE(mc__unpack(body, len, __VA_ARGS__))

static int op_put_start(mc__svc_t *svc, uint64_t owner, const char *body, size_t len, uint64_t now,
                        mc__wbuf_t *w)
{
    mc__put_start_rq_t rq;
    TAKE(mc__take_put_start(body, len, &rq));
    if (rq.pin > MC_PIN_HARD)
        return -EINVAL;
    if ((rq.flags & MC_PUT_NOREPLACE) && mc__master_find(svc->m, rq.key, rq.klen))
        return -EEXIST;
    mc_put_opts_t po = {.flags = rq.flags,
                        .mode = rq.mode,
                        .replica_num = rq.replicas,
                        .pin = rq.pin,
                        .soft_pin_ttl_ms = rq.pin_ttl_ms,
                        .mtime_ns = rq.mtime_ns};
    mc__version_t *v;
    mark_suspects(svc, now);
    int rc = mc__master_begin_at(svc->m, rq.key, rq.klen, &po, seg_by_addr(svc, rq.pref, rq.plen),
                                 rq.capacity, now, &v);
    if (rc < 0)
        return rc;
    if (rq.capacity)
        rc = mc__master_reserve(svc->m, v, rq.capacity, now);
    put_t *p = rc == 0 ? calloc(1, sizeof(*p)) : NULL;
    if (rc == 0 && !p)
        rc = -ENOMEM;
    if (rc == 0) {
        p->flags = rq.flags;
        p->v = v;
        rc = owned_add(svc, &svc->puts, &p->o, owner);
        if (rc < 0)
            free(p);
    }
    if (rc < 0) {
        mc__master_abort(svc->m, v);
        return rc;
    }
    put_touch(svc, p, now);
    /* The writer's lease: it writes only while it holds one (PUT_GROW
     * renews it), and a revoked write's space waits for it to run out. */
    mc__pack(w, "qq", p->o.h.id, svc->o.write_lease_ms);
    return pack_replicas(svc, w, v);
}

static int op_put_grow(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w)
{
    uint64_t id, capacity;
    UNPACK("qq", &id, &capacity);
    put_t *p = put_get(svc, id);
    if (!p)
        return -ENOENT;
    put_touch(svc, p, now);
    int rc = mc__master_reserve(svc->m, p->v, capacity, now);
    if (rc < 0)
        return rc;
    return pack_replicas(svc, w, p->v);
}

static int op_put_commit(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w)
{
    mc__put_commit_rq_t rq;
    TAKE(mc__take_put_commit(body, len, &rq));
    put_t *p = put_get(svc, rq.id);
    if (!p)
        return -ENOENT;
    mc__version_t *v = p->v;
    if (v->nrep == 0)
        return -EIO; /* every node it was written to is gone */
    int rc = 0;
    if (rq.klen != v->klen || memcmp(rq.key, v->key, rq.klen) != 0)
        rc = mc__master_set_key(svc->m, v, rq.key, rq.klen);
    if (rc == 0 && rq.size > v->capacity)
        rc = -EINVAL;
    if (rc < 0)
        return rc;
    if (rq.mode)
        v->mode = rq.mode & 07777;
    v->mtime_ns = rq.mtime_ns ? rq.mtime_ns : svc->o.wall_ns ? svc->o.wall_ns() : 0;
    rc = mc__master_commit(svc->m, v, rq.size, p->flags, now);
    put_del(svc, p);
    if (rc < 0) {
        mc__master_abort(svc->m, v);
        return rc;
    }
    if (v->nrep < v->want)
        mc__repair_wake(svc->rp); /* a replica was dropped on the way */
    mc_stat_t st;
    mc__version_stat(v, now, &st);
    return mc__pack_stat(w, &st);
}

/* A writer could not reach the node of one replica while others took the
 * bytes: the put goes on without it, and new puts avoid that node. The
 * space stays allocated for a node TTL, as requests may still be on their
 * way there. */
static int op_put_drop(mc__svc_t *svc, const char *body, size_t len, uint64_t now)
{
    uint64_t id;
    uint32_t seg;
    UNPACK("qu", &id, &seg);
    put_t *p = put_get(svc, id);
    if (!p)
        return -ENOENT;
    put_touch(svc, p, now);
    mc__replica_t rep;
    if (!mc__version_take_replica(p->v, seg, &rep))
        return 0; /* gone already (its segment was dropped) */
    mc__repair_hold(svc->rp, svc->m, &rep, now + svc->o.node_ttl_ms);
    seginfo_t *si = seg_info(svc, seg);
    node_t *n = si && si->node ? node_find(svc, si->node) : NULL;
    if (n)
        n->failed_at = now;
    svc->replicas_dropped++;
    return 0;
}

static int op_put_revoke(mc__svc_t *svc, const char *body, size_t len)
{
    uint64_t id;
    UNPACK("q", &id);
    put_t *p = put_get(svc, id);
    if (!p)
        return -ENOENT;
    /* The writer says it has stopped: its space is free at once. */
    put_end(svc, p, 0);
    return 0;
}

static int op_open(mc__svc_t *svc, uint64_t owner, const char *body, size_t len, uint64_t now,
                   mc__wbuf_t *w)
{
    const char *key;
    uint32_t klen;
    UNPACK("k", &key, &klen);
    mc__version_t *v = mc__master_find(svc->m, key, klen);
    if (!v)
        return -ENOENT;
    handle_t *h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    h->v = v;
    if (owned_add(svc, &svc->handles, &h->o, owner) < 0) {
        free(h);
        return -ENOMEM;
    }
    mc__master_ref(v);
    mc__master_touch(svc->m, v, now, 0);
    mc__pack(w, "q", h->o.h.id);
    return pack_version(svc, w, v, now);
}

static int op_close(mc__svc_t *svc, const char *body, size_t len, uint64_t now)
{
    uint64_t id;
    UNPACK("q", &id);
    handle_t *h = handle_get(svc, id);
    if (!h)
        return -ENOENT;
    handle_del(svc, h, now);
    return 0;
}

static int op_get_replicas(mc__svc_t *svc, const char *body, size_t len, uint64_t now,
                           mc__wbuf_t *w)
{
    const char *key;
    uint32_t klen;
    UNPACK("k", &key, &klen);
    mc__version_t *v = mc__master_find(svc->m, key, klen);
    if (!v)
        return -ENOENT;
    mc__master_touch(svc->m, v, now, 1);
    mc__pack(w, "q", v->lease_until > now ? v->lease_until - now : (uint64_t)0);
    return pack_version(svc, w, v, now);
}

static int op_mount(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w)
{
    uint64_t node, size;
    uint32_t seg, alen, rlen;
    const char *addr, *rdma;
    UNPACK("qusqs", &node, &seg, &addr, &alen, &size, &rdma, &rlen);
    if (node == 0 || size < 4096 || alen == 0 || seg == UINT32_MAX)
        return -EINVAL;
    seginfo_t *si = seg ? seg_info(svc, seg) : NULL;
    if (si && si->node != node)
        return -EEXIST;
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
        if (again)
            mc__master_hold_segment(svc->m, seg, now + svc->o.write_lease_ms);
        si = seg_info(svc, seg);
    }
    /* The record is the node's to describe (address, keys): kept verbatim,
     * replaced by every mount so that a node that restarted its RDMA side
     * publishes fresh keys. */
    if (blob_set(&si->rdma, &si->rdma_len, rdma, rlen) < 0)
        return -ENOMEM;
    if (!node_touch(svc, node, now))
        return -ENOMEM;
    mc__repair_wake(svc->rp); /* room for copies */
    mc__pack(w, "u", seg);
    return w->err;
}

static int op_unmount(mc__svc_t *svc, const char *body, size_t len, uint64_t now)
{
    uint64_t node;
    uint32_t seg;
    UNPACK("qu", &node, &seg);
    seginfo_t *si = seg_info(svc, seg);
    if (!si || si->node != node)
        return -ENOENT;
    seg_drop(svc, seg, now);
    return 0;
}

static int op_heartbeat(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w)
{
    uint64_t node;
    UNPACK("q", &node);
    node_t *n = node_find(svc, node);
    if (n)
        n->last_hb = now;
    uint32_t flags = !n ? MC__HB_REMOUNT : mc__repair_pending(svc->rp, node) ? MC__HB_REPAIR : 0;
    mc__pack(w, "u", flags);
    return w->err;
}

/* Hands node its repair tasks (repair.h; the layout is in proto.h). */
static int op_repair_take(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w)
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
        mc__pack(&tw, "qqquussu", t->id, t->limit_ms, t->size, 1u, t->dst.seg, "", 0u, "", 0u,
                 t->dst.n);
        for (uint32_t i = 0; i < t->dst.n; i++)
            mc__pack(&tw, "qq", t->dst.ext[i].off, t->dst.ext[i].len);
        pack_replicas(svc, &tw, v);
        if (tw.err == 0)
            mc__pack(w, "s", tw.p, (uint32_t)tw.len);
        free(tw.p);
        sent++;
    }
    return w->err;
}

static int op_repair_done(mc__svc_t *svc, const char *body, size_t len, uint64_t now)
{
    uint64_t node, id;
    int64_t status;
    UNPACK("qqi", &node, &id, &status);
    return mc__repair_finish(svc->rp, svc->m, node, id, status == 0 ? 0 : -EIO, now);
}

int mc__svc_handle(mc__svc_t *svc, uint64_t owner, uint16_t op, const char *body, size_t len,
                   uint64_t now, mc__wbuf_t *w)
{
    mc__master_t *m = svc->m;
    const char *key, *key2;
    uint32_t klen, klen2, flags, u1, u2;
    int64_t mtime;
    mc__version_t *v;
    mc_stat_t st;
    int rc;

    switch (op) {
    case MC__OP_PING:
        UNPACK("");
        mc__pack(w, "q", now);
        return w->err;
    case MC__OP_MOUNT_SEGMENT:
        return op_mount(svc, body, len, now, w);
    case MC__OP_UNMOUNT_SEGMENT:
        return op_unmount(svc, body, len, now);
    case MC__OP_HEARTBEAT:
        return op_heartbeat(svc, body, len, now, w);
    case MC__OP_PUT_START:
        return op_put_start(svc, owner, body, len, now, w);
    case MC__OP_PUT_GROW:
        return op_put_grow(svc, body, len, now, w);
    case MC__OP_PUT_COMMIT:
        return op_put_commit(svc, body, len, now, w);
    case MC__OP_PUT_REVOKE:
        return op_put_revoke(svc, body, len);
    case MC__OP_PUT_DROP_REPLICA:
        return op_put_drop(svc, body, len, now);
    case MC__OP_REPAIR_TAKE:
        return op_repair_take(svc, body, len, now, w);
    case MC__OP_REPAIR_DONE:
        return op_repair_done(svc, body, len, now);
    case MC__OP_OPEN:
        return op_open(svc, owner, body, len, now, w);
    case MC__OP_CLOSE:
        return op_close(svc, body, len, now);
    case MC__OP_GET_REPLICAS:
        return op_get_replicas(svc, body, len, now, w);
    case MC__OP_STAT:
        UNPACK("k", &key, &klen);
        v = mc__master_find(m, key, klen);
        if (!v)
            return -ENOENT;
        mc__version_stat(v, now, &st);
        return mc__pack_stat(w, &st);
    case MC__OP_LOOKUP:
        UNPACK("ku", &key, &klen, &u1);
        rc = mc__master_lookup(m, key, klen, (int)u1, &v);
        if (rc < 0)
            return rc;
        memset(&st, 0, sizeof(st));
        if (v)
            mc__version_stat(v, now, &st);
        mc__pack_stat(w, &st);
        return w->err ? w->err : rc;
    case MC__OP_REMOVE:
        UNPACK("ku", &key, &klen, &flags);
        return mc__master_remove(m, key, klen, flags, now);
    case MC__OP_RENAME:
        UNPACK("kku", &key, &klen, &key2, &klen2, &flags);
        return mc__master_rename(m, key, klen, key2, klen2, flags, now);
    case MC__OP_LIST: {
        UNPACK("ssuu", &key, &klen, &key2, &klen2, &u1, &u2);
        if (klen > MC_KEY_MAX || klen2 > MC_KEY_MAX)
            return -EINVAL;
        mc_list_t *l = NULL;
        rc = mc__master_list(m, key, klen, klen2 ? key2 : NULL, klen2, (int)u1,
                             u2 > 10000 ? 10000 : u2, now, &l);
        if (rc < 0)
            return rc;
        mc__pack_list(w, l);
        mc_list_free(l);
        return w->err;
    }
    case MC__OP_SET_META:
        UNPACK("kuui", &key, &klen, &flags, &u1, &mtime);
        return mc__master_set_meta(m, key, klen, flags, u1, mtime);
    case MC__OP_STATFS: {
        UNPACK("");
        mc_space_t sp;
        mc__master_space(m, &sp);
        mc__pack(w, "qqqq", sp.total, sp.used, sp.objects, sp.evicted);
        return w->err;
    }
    case MC__OP_STATS: {
        UNPACK("");
        mc_counter_t c[32];
        size_t n = mc__svc_counters(svc, c, 32);
        for (size_t i = 0; i < n; i++)
            mc__pack(w, "sq", c[i].name, (uint32_t)strlen(c[i].name), c[i].value);
        return w->err;
    }
    default:
        return -EOPNOTSUPP;
    }
}
