/*
 * service.c - the master's request handling (see service.h).
 *
 * Writes in progress and open handles live in two ordered indexes keyed by
 * their 8-byte big-endian id; segments and nodes in small arrays (a cluster
 * has tens of them, not millions).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "index.h"
#include "repair.h"
#include "service.h"

/* A node silent this long is suspected dead: new puts and repairs go to
 * other nodes while there are any (heartbeats come every second). */
#define SUSPECT_MS 2500

typedef struct put {
    uint64_t id, owner, touched;
    unsigned flags;
    mc__version_t *v;
} put_t;

typedef struct handle {
    uint64_t id, owner;
    mc__version_t *v;
} handle_t;

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
    mc__index_t *puts, *handles;
    uint64_t next_id;
    seginfo_t *segs;
    int nseg;
    node_t *nodes;
    int nnodes;
    uint32_t next_seg;
    char *local_addr;
    char *local_rdma; /* RDMA record of the local segments (NULL: none) */
    uint32_t local_rdma_len;
    uint64_t nodes_expired, objects_lost, replicas_dropped;
    mc__repair_t *rp;
};

static void id_key(uint64_t id, char k[8])
{
    for (int i = 0; i < 8; i++)
        k[i] = (char)(id >> (56 - 8 * i));
}

static int64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
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
    svc->puts = mc__index_new();
    svc->handles = mc__index_new();
    mc__repair_opts_t ro = {.inflight = svc->o.repair_inflight,
                            .bytes_per_s = svc->o.repair_bytes_per_s,
                            .off = svc->o.no_repair};
    if (!svc->puts || !svc->handles || mc__repair_new(&svc->rp, &ro) < 0) {
        mc__svc_free(svc);
        return -ENOMEM;
    }
    svc->next_id = 1;
    svc->next_seg = 1;
    *out = svc;
    return 0;
}

static void drop_owner_entries(mc__svc_t *svc, int all, uint64_t owner, uint64_t now)
{
    mc__index_iter_t it;
    const char *k;
    size_t kl;
    void *val;
    char key[8];
    /* Collect ids first: removing from the index invalidates iterators. */
    for (int pass = 0; pass < 2; pass++) {
        mc__index_t *ix = pass ? svc->handles : svc->puts;
        for (;;) {
            int found = 0;
            mc__index_seek(ix, &it, NULL, 0, 0);
            while (mc__index_next(&it, &k, &kl, &val)) {
                uint64_t o = pass ? ((handle_t *)val)->owner : ((put_t *)val)->owner;
                if (all || o == owner) {
                    memcpy(key, k, 8);
                    found = 1;
                    break;
                }
            }
            if (!found)
                break;
            val = mc__index_remove(ix, key, 8);
            if (pass) {
                handle_t *h = val;
                mc__master_unref(svc->m, h->v, now);
                free(h);
            } else {
                put_t *p = val;
                mc__master_abort(svc->m, p->v);
                free(p);
            }
        }
    }
}

void mc__svc_free(mc__svc_t *svc)
{
    if (!svc)
        return;
    if (svc->puts && svc->handles)
        drop_owner_entries(svc, 1, 0, 0);
    mc__repair_free(svc->rp, svc->m);
    mc__index_free(svc->puts, NULL);
    mc__index_free(svc->handles, NULL);
    for (int i = 0; i < svc->nseg; i++) {
        free(svc->segs[i].addr);
        free(svc->segs[i].rdma);
    }
    free(svc->segs);
    free(svc->nodes);
    free(svc->local_addr);
    free(svc);
}

void mc__svc_owner_gone(mc__svc_t *svc, uint64_t owner, uint64_t now)
{
    drop_owner_entries(svc, 0, owner, now);
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
    if (id >= svc->next_seg)
        svc->next_seg = id + 1;
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

/* Drops a segment and the replicas on it (pending writes included). */
static void seg_drop(mc__svc_t *svc, uint32_t id, uint64_t now)
{
    mc__index_iter_t it;
    void *val;
    mc__index_seek(svc->puts, &it, NULL, 0, 0);
    while (mc__index_next(&it, NULL, NULL, &val))
        mc__version_drop_replica(((put_t *)val)->v, id);
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
        if (svc->segs[i].node != 0 && seg_live(svc, &svc->segs[i], now))
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
    /* Writes nobody touched for put_ttl: their writer is gone. */
    mc__index_iter_t it;
    const char *k;
    size_t kl;
    void *val;
    char key[8];
    for (;;) {
        int found = 0;
        mc__index_seek(svc->puts, &it, NULL, 0, 0);
        while (mc__index_next(&it, &k, &kl, &val)) {
            if (now - ((put_t *)val)->touched > svc->o.put_ttl_ms) {
                memcpy(key, k, 8);
                found = 1;
                break;
            }
        }
        if (!found)
            break;
        put_t *p = mc__index_remove(svc->puts, key, 8);
        mc__master_abort(svc->m, p->v);
        free(p);
    }
    mc__master_sweep(svc->m, now);
    repair_tick(svc, now);
    return dropped;
}

void mc__svc_stats(const mc__svc_t *svc, mc__svc_stats_t *st)
{
    st->nodes = (uint64_t)svc->nnodes;
    st->segments = (uint64_t)svc->nseg;
    st->puts = mc__index_count(svc->puts);
    st->handles = mc__index_count(svc->handles);
    st->nodes_expired = svc->nodes_expired;
    st->objects_lost = svc->objects_lost;
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
        mc__pack(w, "ussu", rep->seg, addr, (uint32_t)strlen(addr), rdma, rdma_len, rep->n);
        for (uint32_t i = 0; i < rep->n; i++)
            mc__pack(w, "qq", rep->ext[i].off, rep->ext[i].len);
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
    char k[8];
    id_key(id, k);
    return mc__index_get(svc->puts, k, 8);
}

/* Removes the put or handle with this id from ix; returns it, or NULL. */
static void *take_by_id(mc__index_t *ix, uint64_t id)
{
    char k[8];
    id_key(id, k);
    return mc__index_remove(ix, k, 8);
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

#define UNPACK(...)                                                                                \
    do {                                                                                           \
        int rc_ = mc__unpack(body, len, __VA_ARGS__);                                              \
        if (rc_ < 0)                                                                               \
            return rc_ == -EINVAL ? -EINVAL : -EBADMSG;                                            \
    } while (0)

static int op_put_start(mc__svc_t *svc, uint64_t owner, const char *body, size_t len, uint64_t now,
                        mc__wbuf_t *w)
{
    const char *key, *pref;
    uint32_t klen, flags, mode, replicas, pin, plen;
    uint64_t capacity, ttl;
    int64_t mtime;
    UNPACK("kquuuuqis", &key, &klen, &capacity, &flags, &mode, &replicas, &pin, &ttl, &mtime, &pref,
           &plen);
    if (pin > MC_PIN_HARD)
        return -EINVAL;
    if ((flags & MC_PUT_NOREPLACE) && mc__master_find(svc->m, key, klen))
        return -EEXIST;
    mc_put_opts_t po = {.flags = flags,
                        .mode = mode,
                        .replica_num = replicas,
                        .pin = pin,
                        .soft_pin_ttl_ms = ttl,
                        .mtime_ns = mtime};
    mc__version_t *v;
    mark_suspects(svc, now);
    int rc = mc__master_begin_at(svc->m, key, klen, &po, seg_by_addr(svc, pref, plen), capacity,
                                 now, &v);
    if (rc < 0)
        return rc;
    if (capacity)
        rc = mc__master_reserve(svc->m, v, capacity, now);
    put_t *p = rc == 0 ? calloc(1, sizeof(*p)) : NULL;
    if (rc == 0 && !p)
        rc = -ENOMEM;
    if (rc == 0) {
        p->id = svc->next_id++;
        p->owner = owner;
        p->touched = now;
        p->flags = flags;
        p->v = v;
        char k[8];
        id_key(p->id, k);
        rc = mc__index_insert(svc->puts, k, 8, p, NULL);
        if (rc < 0)
            free(p);
    }
    if (rc < 0) {
        mc__master_abort(svc->m, v);
        return rc;
    }
    mc__pack(w, "q", p->id);
    return pack_replicas(svc, w, v);
}

static int op_put_grow(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w)
{
    uint64_t id, capacity;
    UNPACK("qq", &id, &capacity);
    put_t *p = put_get(svc, id);
    if (!p)
        return -ENOENT;
    p->touched = now;
    int rc = mc__master_reserve(svc->m, p->v, capacity, now);
    if (rc < 0)
        return rc;
    return pack_replicas(svc, w, p->v);
}

static int op_put_commit(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w)
{
    uint64_t id, size;
    const char *key;
    uint32_t klen, mode;
    int64_t mtime;
    UNPACK("qkqui", &id, &key, &klen, &size, &mode, &mtime);
    put_t *p = put_get(svc, id);
    if (!p)
        return -ENOENT;
    mc__version_t *v = p->v;
    if (v->nrep == 0)
        return -EIO; /* every node it was written to is gone */
    int rc = 0;
    if (klen != v->klen || memcmp(key, v->key, klen) != 0)
        rc = mc__master_set_key(svc->m, v, key, klen);
    if (rc == 0 && size > v->capacity)
        rc = -EINVAL;
    if (rc < 0)
        return rc;
    if (mode)
        v->mode = mode & 07777;
    v->mtime_ns = mtime ? mtime : wall_ns();
    rc = mc__master_commit(svc->m, v, size, p->flags, now);
    take_by_id(svc->puts, id);
    free(p);
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
    p->touched = now;
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
    put_t *p = take_by_id(svc->puts, id);
    if (!p)
        return -ENOENT;
    mc__master_abort(svc->m, p->v);
    free(p);
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
    h->id = svc->next_id++;
    h->owner = owner;
    h->v = v;
    char k[8];
    id_key(h->id, k);
    if (mc__index_insert(svc->handles, k, 8, h, NULL) < 0) {
        free(h);
        return -ENOMEM;
    }
    mc__master_ref(v);
    mc__master_touch(svc->m, v, now, 0);
    mc__pack(w, "q", h->id);
    return pack_version(svc, w, v, now);
}

static int op_close(mc__svc_t *svc, const char *body, size_t len, uint64_t now)
{
    uint64_t id;
    UNPACK("q", &id);
    handle_t *h = take_by_id(svc->handles, id);
    if (!h)
        return -ENOENT;
    mc__master_unref(svc->m, h->v, now);
    free(h);
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
    if (node == 0 || size < 4096 || alen == 0)
        return -EINVAL;
    seginfo_t *si = seg ? seg_info(svc, seg) : NULL;
    if (si && si->node != node)
        return -EEXIST;
    if (!si) {
        if (!seg)
            seg = svc->next_seg;
        int rc = seg_add(svc, seg, node, size, addr, alen);
        if (rc < 0)
            return rc;
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
