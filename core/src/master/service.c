/*
 * service.c - the master's request handling (see service.h): the service's
 * life, writes in progress and open handles, the dispatch of every
 * request, and the put and open operations. The namespace requests are in
 * names.c; segments, nodes and repair requests in nodes.c; copy and move
 * tasks in tasks.c; what they share is in service_i.h.
 *
 * Writes in progress and open handles live in two id hashes (ids.h), and
 * on their owner's list (an owner is a connection), so that a connection's
 * close costs what it holds. Writes are also on a list by last touch, so
 * that expiring idle ones costs what expires.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "master/service_i.h"

uint64_t mc__svc_random_id(void)
{
    uint64_t id = 0;
    if (getrandom(&id, sizeof(id), 0) != sizeof(id))
        id = (uint64_t)(uintptr_t)&id * 2654435761u; /* no entropy: differs per run (ASLR) */
    return (id >> 2) | 1;
}

static int seg_fenced(void *arg, uint32_t seg, uint64_t epoch)
{
    return mc__svc_seg_fenced(arg, seg, epoch);
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
                            .off = svc->o.no_repair,
                            .fenced = seg_fenced,
                            .fenced_arg = svc};
    if (rc < 0 || mc__repair_new(&svc->rp, &ro) < 0) {
        mc__svc_free(svc);
        return -ENOMEM;
    }
    svc->next_id = svc->o.first_id ? svc->o.first_id : 1;
    svc->run = svc->next_id;
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
 * sending bytes: the space is kept until its write lease is over and the
 * nodes of its segments refuse them (mc__svc_fence_write()); without, the
 * writer said that none of its bytes can land any more, and the space is
 * freed now.
 */
static void put_end(mc__svc_t *svc, put_t *p, int fenced)
{
    uint64_t free_at = p->touched + svc->o.write_lease_ms;
    mc__version_t *v = put_del(svc, p);
    if (fenced)
        mc__svc_fence_write(svc, v, free_at);
    else
        mc__master_abort(svc->m, v);
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
    mc__svc_fenced_sweep(svc, UINT64_MAX, 1);
    mc__tasks_free(svc->tasks);
    mc__repair_free(svc->rp, svc->m);
    at = 0;
    for (mc__idnode_t *e; svc->owners.b && (e = mc__ids_first(&svc->owners, &at));)
        free(mc__ids_del(&svc->owners, e->id));
    mc__ids_fini(&svc->puts);
    mc__ids_fini(&svc->handles);
    mc__ids_fini(&svc->owners);
    mc__svc_name_segs_free(svc);
    for (int i = 0; i < svc->nseg; i++) {
        free(svc->segs[i].addr);
        free(svc->segs[i].rdma);
        free(svc->segs[i].notes.p);
    }
    free(svc->segs);
    free(svc->pend);
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

int mc__svc_tick(mc__svc_t *svc, uint64_t now)
{
    if (now > svc->now_seen)
        svc->now_seen = now;
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
                mc__svc_seg_drop(svc, svc->segs[s].id, now);
                dropped++;
            } else {
                s++;
            }
        }
    }
    /* Writes nobody touched for put_ttl: revoked. Their write lease (no
     * longer than put_ttl) is over, but bytes the writer sent before may
     * still be on their way: the space goes once the nodes refuse them. */
    while (svc->by_touch.head && now - svc->by_touch.head->touched > svc->o.put_ttl_ms) {
        put_end(svc, svc->by_touch.head, 1);
        svc->puts_expired++;
    }
    mc__svc_fenced_sweep(svc, now, 0);
    mc__svc_flush(svc);
    mc__svc_reports_tick(svc, now);
    mc__master_sweep(svc->m, now);
    mc__svc_repair_tick(svc, now);
    mc__tasks_tick(svc, now);
    return dropped;
}

/* ---- encoding ---- */

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
    mc__version_stat(svc->m, v, now, &st);
    mc__pack_stat(w, &st);
    return mc__svc_pack_replicas(svc, w, v);
}

#define DAY_NS (86400LL * 1000000000LL)

/* A read of v (an OPEN or GET_REPLICAS): its atime moves, under the relatime
 * rule: when it is not after the last change of content or metadata, or is
 * a day old. */
static void read_access(const mc__svc_t *svc, mc__version_t *v)
{
    int64_t t = mc__svc_wall(svc);
    int64_t a = mc__vatime(v);
    if (a <= v->mtime_ns || a <= mc__vctime(v) || t - a >= DAY_NS) {
        mc__version_set_atime(v, t);
        mc__master_dirty_records(svc->m, v);
    }
}

/* ---- operations ---- */

/*
 * The rules of a PUT_START: a pending version of rq's key with rq's options
 * and rq->capacity bytes reserved, placed by the master. Returns 0 and the
 * version (the caller's: it publishes or aborts it), or a negative errno.
 */
static int put_begin(mc__svc_t *svc, const mc__put_start_rq_t *rq, uint64_t now,
                     mc__version_t **out)
{
    if (rq->pin > MC_PIN_HARD)
        return -EINVAL;
    if ((rq->flags & MC_PUT_NOREPLACE) && mc__master_find(svc->m, rq->key, rq->klen))
        return -EEXIST;
    mc_put_opts_t po = {.flags = rq->flags,
                        .mode = rq->mode,
                        .replica_num = rq->replicas,
                        .pin = rq->pin,
                        .soft_pin_ttl_ms = rq->pin_ttl_ms,
                        .mtime_ns = rq->mtime_ns,
                        .uid = rq->uid,
                        .gid = rq->gid,
                        .type = rq->type,
                        .rdev = rq->rdev};
    mc__version_t *v;
    mc__svc_mark_suspects(svc, now);
    int rc =
        mc__master_begin_at(svc->m, rq->key, rq->klen, &po,
                            mc__svc_seg_by_addr(svc, rq->pref, rq->plen), rq->capacity, now, &v);
    if (rc < 0)
        return rc;
    if (rq->capacity && (rc = mc__master_reserve(svc->m, v, rq->capacity, now)) < 0) {
        mc__master_abort(svc->m, v);
        return rc;
    }
    *out = v;
    return 0;
}

/* Makes pending v (begun with flags) a write in progress of owner's, and
 * packs what a PUT_START answers; on failure aborts v. Returns 0 or a
 * negative errno. */
static int put_register(mc__svc_t *svc, uint64_t owner, mc__version_t *v, unsigned flags,
                        uint64_t now, mc__wbuf_t *w)
{
    int rc = 0;
    put_t *p = calloc(1, sizeof(*p));
    if (!p)
        rc = -ENOMEM;
    if (rc == 0) {
        p->flags = flags;
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
    return mc__svc_pack_replicas(svc, w, v);
}

static int op_put_start(mc__svc_t *svc, uint64_t owner, const char *body, size_t len, uint64_t now,
                        mc__wbuf_t *w)
{
    mc__put_start_rq_t rq;
    TAKE(mc__take_put_start(body, len, &rq));
    mc__version_t *v;
    int rc = put_begin(svc, &rq, now, &v);
    return rc < 0 ? rc : put_register(svc, owner, v, rq.flags, now, w);
}

/* Renews write p's lease and reserves bytes [off, off + n) of it (punches
 * them with punch); packs its replica set into w unless w is NULL. */
static int put_grow(mc__svc_t *svc, put_t *p, uint64_t off, uint64_t n, int punch, uint64_t now,
                    mc__wbuf_t *w)
{
    put_touch(svc, p, now);
    int rc = mc__master_reserve_range(svc->m, p->v, off, n, punch, now);
    if (rc < 0 || !w)
        return rc;
    return mc__svc_pack_replicas(svc, w, p->v);
}

static int op_put_grow(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w)
{
    uint64_t id, off, n;
    uint32_t flags;
    UNPACK("qqqu", &id, &off, &n, &flags);
    put_t *p = put_get(svc, id);
    if (!p)
        return -ENOENT;
    if (flags & ~(uint32_t)MC__GROW_PUNCH)
        return -EINVAL;
    return put_grow(svc, p, off, n, flags & MC__GROW_PUNCH, now, w);
}

/* PUT_RENEW: each put id's lease renewed as by an empty PUT_GROW, its
 * status and (renewed) its replica set packed in turn; past
 * MC__RENEW_BUDGET bytes of answer, renewed ones answer MC__RENEWED_BARE. */
static int op_put_renew(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w)
{
    if (len % 8 || len / 8 > MC__RENEW_MAX)
        return -EINVAL;
    for (; len; body += 8, len -= 8) {
        uint64_t id;
        mc__unpack(body, 8, "q", &id);
        put_t *p = put_get(svc, id);
        size_t at = w->len;
        int bare = at >= MC__RENEW_BUDGET;
        mc__pack(w, "i", (int64_t)(bare ? MC__RENEWED_BARE : 0));
        int rc = p ? put_grow(svc, p, 0, 0, 0, now, bare ? NULL : w) : -ENOENT;
        if (rc < 0 && !w->err) {
            w->len = at; /* the status alone */
            mc__pack(w, "i", (int64_t)rc);
        }
        if (w->err)
            return w->err;
    }
    return 0;
}

/* The rules a PUT_COMMIT checks before it publishes pending v: a failure
 * leaves the write in progress (its writer may revoke it). */
static int put_check(mc__svc_t *svc, mc__version_t *v, const mc__put_commit_rq_t *rq)
{
    if (v->nrep == 0)
        return -EIO; /* every node it was written to is gone */
    int rc = 0;
    if (rq->klen != v->klen || memcmp(rq->key, mc__vkey(v), rq->klen) != 0)
        rc = mc__master_set_key(svc->m, v, rq->key, rq->klen);
    if (rc == 0 && rq->size > mc__vcap(v))
        rc = -EINVAL;
    if (rc == 0 && mc__master_is_inode_key(mc__vkey(v), v->klen) &&
        !mc__master_find(svc->m, mc__vkey(v), v->klen))
        rc = -ENOENT; /* a hard-linked file's key: only while the file has a name */
    return rc;
}

/* The rest of a PUT_COMMIT: publishes v (put_check() passed; v is no longer
 * a write in progress), or aborts it. Fills *st (unless NULL) with the new
 * version's stat. Returns 0 or a negative errno. */
static int put_publish(mc__svc_t *svc, mc__version_t *v, unsigned flags,
                       const mc__put_commit_rq_t *rq, uint64_t now, mc_stat_t *st)
{
    if (rq->what & MC_META_MODE) {
        v->mode = rq->mode & 07777;
        v->inherit &= ~(unsigned)MC__INHERIT_MODE;
    }
    int64_t t = mc__svc_wall(svc);
    v->mtime_ns = (rq->what & MC_META_MTIME) ? rq->mtime_ns : t;
    mc__version_set_atime(v, t); /* a replaced version's atime stays (commit) */
    int is_new = 0;
    int rc = mc__version_set_ctime(v, t);
    if (rc == 0)
        rc = mc__master_commit_as(svc->m, v, rq->size, flags, now, &is_new);
    if (rc < 0) {
        mc__master_abort(svc->m, v);
        return rc;
    }
    mc__master_dirty(svc->m, v); /* its nodes learn its record (records.c) */
    if (is_new)
        mc__master_dir_changed(svc->m, mc__vkey(v), v->klen, t);
    if (v->nrep < v->want)
        mc__repair_wake(svc->rp); /* a replica was dropped on the way */
    if (st)
        mc__version_stat(svc->m, v, now, st);
    return 0;
}

static int op_put_commit(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w)
{
    mc__put_commit_rq_t rq;
    TAKE(mc__take_put_commit(body, len, &rq));
    put_t *p = put_get(svc, rq.id);
    if (!p)
        return -ENOENT;
    if (p->doomed)
        return -EIO; /* a replica that missed bytes could not be dropped */
    mc__version_t *v = p->v;
    unsigned flags = p->flags;
    int rc = put_check(svc, v, &rq);
    if (rc < 0)
        return rc;
    put_del(svc, p);
    mc_stat_t st;
    if ((rc = put_publish(svc, v, flags, &rq, now, &st)) < 0)
        return rc;
    return mc__pack_stat(w, &st);
}

int mc__svc_put(mc__svc_t *svc, const mc__put_start_rq_t *start, const mc__put_commit_rq_t *commit,
                mc__svc_write_fn write, void *arg, uint64_t now, mc_stat_t *st)
{
    mc__version_t *v;
    int rc = put_begin(svc, start, now, &v);
    if (rc < 0)
        return rc;
    mc__replica_t rep[MC__MAX_REPLICAS];
    mc__extent_t one[MC__MAX_REPLICAS]; /* a compact v's one extent */
    for (uint32_t r = 0; r < v->nrep; r++)
        rep[r] = mc__vrep_get(v, r, &one[r]);
    if ((rc = write(arg, rep, v->nrep)) < 0 || (rc = put_check(svc, v, commit)) < 0) {
        mc__master_abort(svc->m, v);
        return rc;
    }
    return put_publish(svc, v, start->flags, commit, now, st);
}

/* The write and the segment a request "qu" (put id, segment id) names:
 * 0, or -EBADMSG, -ENOENT (no such write). */
static int put_seg_take(mc__svc_t *svc, const char *body, size_t len, put_t **p, uint32_t *seg)
{
    uint64_t id;
    UNPACK("qu", &id, seg);
    *p = put_get(svc, id);
    return *p ? 0 : -ENOENT;
}

/* A writer could not reach the node of one replica while others took the
 * bytes: the put goes on without it, and new puts avoid that node. The
 * space stays allocated for a node TTL, as requests may still be on their
 * way there, and until the node refuses them (an epoch raised). */
static int op_put_drop(mc__svc_t *svc, const char *body, size_t len, uint64_t now)
{
    put_t *p;
    uint32_t seg;
    int rc = put_seg_take(svc, body, len, &p, &seg);
    if (rc < 0)
        return rc;
    put_touch(svc, p, now);
    mc__replica_t rep;
    rc = mc__version_take_replica(p->v, seg, &rep);
    if (rc < 0)
        p->doomed = 1; /* kept, with bytes missing: never published */
    if (rc <= 0)
        return rc; /* 0: gone already (its segment was dropped) */
    /* The writer's bytes to that node may still arrive (a partition that
     * heals): the space goes once its node refuses them. */
    mc__repair_hold(svc->rp, svc->m, &rep, now + svc->o.node_ttl_ms, mc__svc_seg_fence(svc, seg));
    seginfo_t *si = mc__svc_seg_info(svc, seg);
    node_t *n = si && si->node ? mc__svc_node_find(svc, si->node) : NULL;
    if (n)
        n->failed_at = now;
    svc->replicas_dropped++;
    return 0;
}

/* The epoch of a segment of a write that goes on (proto.h, "Segment
 * epochs"): a node refused one of its writes for an older one. A write
 * that ended gets -ENOENT: its late bytes must stay refused. */
static int op_put_epoch(mc__svc_t *svc, const char *body, size_t len, uint64_t now, mc__wbuf_t *w)
{
    put_t *p;
    uint32_t seg;
    int rc = put_seg_take(svc, body, len, &p, &seg);
    if (rc < 0)
        return rc;
    uint32_t r = 0;
    while (r < p->v->nrep && mc__vrep_seg(p->v, r) != seg)
        r++;
    if (r == p->v->nrep) /* not one of its segments (a replica dropped) */
        return -ENOENT;
    put_touch(svc, p, now);
    return mc__pack(w, "q", mc__svc_seg_epoch(svc, seg));
}

static int op_put_revoke(mc__svc_t *svc, const char *body, size_t len)
{
    uint64_t id;
    uint32_t flags = 0;
    if (len > 8)
        UNPACK("qu", &id, &flags);
    else /* an older client's: no flags */
        UNPACK("q", &id);
    if (flags & ~(uint32_t)MC__REVOKE_FENCED)
        return -EINVAL;
    put_t *p = put_get(svc, id);
    if (!p)
        return -ENOENT;
    /* The writer says it has stopped: its space is free at once, unless a
     * transfer of it failed whose bytes may still land (fenced). */
    put_end(svc, p, (flags & MC__REVOKE_FENCED) != 0);
    return 0;
}

/* The published version a request naming one key ("k") is about. */
int mc__svc_take_version(mc__svc_t *svc, const char *body, size_t len, mc__version_t **out)
{
    const char *key;
    uint32_t klen;
    UNPACK("k", &key, &klen);
    *out = mc__master_find(svc->m, key, klen);
    return *out ? 0 : -ENOENT;
}

/* Opens published v for owner (a handle that pins it) and packs what an
 * OPEN answers. Returns 0 or a negative errno. */
static int open_version(mc__svc_t *svc, uint64_t owner, mc__version_t *v, uint64_t now,
                        mc__wbuf_t *w)
{
    if (mc__master_ref(svc->m, v) < 0)
        return -ENOMEM;
    handle_t *h = calloc(1, sizeof(*h));
    if (h)
        h->v = v;
    if (!h || owned_add(svc, &svc->handles, &h->o, owner) < 0) {
        free(h);
        mc__master_unref(svc->m, v, now); /* published: it stays */
        return -ENOMEM;
    }
    mc__master_touch(svc->m, v, now, 0);
    read_access(svc, v);
    mc__pack(w, "q", h->o.h.id);
    return pack_version(svc, w, v, now);
}

static int op_open(mc__svc_t *svc, uint64_t owner, const char *body, size_t len, uint64_t now,
                   mc__wbuf_t *w)
{
    mc__version_t *v;
    int rc = mc__svc_take_version(svc, body, len, &v);
    return rc < 0 ? rc : open_version(svc, owner, v, now, w);
}

/*
 * CREATE: a new file in one request. Unless key is a file (-EEXIST) or a
 * directory (-EISDIR: some key starts with key + '/'), publishes it empty
 * with rq's options (a PUT_START and PUT_COMMIT of no bytes), opens it (an
 * OPEN) and starts a write of it that keeps the mode and owner it
 * publishes with (a PUT_START of rq's capacity, or of none when there is
 * no room for that), answering what the OPEN would, the capacity reserved,
 * and what the PUT_START would.
 */
static int op_create(mc__svc_t *svc, uint64_t owner, const char *body, size_t len, uint64_t now,
                     mc__wbuf_t *w)
{
    mc__put_start_rq_t rq;
    TAKE(mc__take_put_start(body, len, &rq));
    mc__version_t *v, *next;
    int rc = mc__master_lookup(svc->m, rq.key, rq.klen, '/', &v);
    if (rc != -ENOENT)
        return rc == MC_LOOKUP_DIR ? -EISDIR : rc == MC_LOOKUP_FILE ? -EEXIST : rc;
    mc__put_start_rq_t wrq = {.key = rq.key,
                              .klen = rq.klen,
                              .capacity = rq.capacity,
                              .replicas = rq.replicas,
                              .pref = rq.pref,
                              .plen = rq.plen};
    rc = put_begin(svc, &wrq, now, &next);
    if (rc == -ENOSPC && wrq.capacity) {
        wrq.capacity = 0;
        rc = put_begin(svc, &wrq, now, &next);
    }
    if (rc < 0)
        return rc;
    rq.capacity = 0;
    rq.flags |= MC_PUT_NOREPLACE;
    mc__put_commit_rq_t commit = {.key = rq.key, .klen = rq.klen};
    if ((rc = put_begin(svc, &rq, now, &v)) == 0 && (rc = put_check(svc, v, &commit)) < 0)
        mc__master_abort(svc->m, v);
    if (rc == 0)
        rc = put_publish(svc, v, rq.flags, &commit, now, NULL);
    if (rc == 0)
        rc = open_version(svc, owner, v, now, w);
    if (rc < 0) {
        mc__master_abort(svc->m, next);
        return rc;
    }
    mc__pack(w, "q", wrq.capacity);
    /* The write's commit: the file is there now (no NOREPLACE), and what
     * it must not publish over stays so (MC_PUT_NOTDIR). */
    return put_register(svc, owner, next, rq.flags & MC_PUT_NOTDIR, now, w);
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
    mc__version_t *v;
    int rc = mc__svc_take_version(svc, body, len, &v);
    if (rc < 0)
        return rc;
    mc__master_touch(svc->m, v, now, 1);
    read_access(svc, v);
    uint64_t until = mc__version_lease(svc->m, v);
    mc__pack(w, "q", until > now ? until - now : (uint64_t)0);
    return pack_version(svc, w, v, now);
}

int mc__svc_handle(mc__svc_t *svc, uint64_t owner, uint16_t op, const char *body, size_t len,
                   uint64_t now, mc__wbuf_t *w)
{
    if (now > svc->now_seen)
        svc->now_seen = now;
    switch (op) {
    case MC__OP_PING:
        UNPACK("");
        mc__pack(w, "q", now);
        return w->err;
    case MC__OP_MOUNT_SEGMENT:
        return mc__svc_op_mount(svc, body, len, now, w);
    case MC__OP_UNMOUNT_SEGMENT:
        return mc__svc_op_unmount(svc, body, len, now);
    case MC__OP_HEARTBEAT:
        return mc__svc_op_heartbeat(svc, body, len, now, w);
    case MC__OP_PUT_START:
        return op_put_start(svc, owner, body, len, now, w);
    case MC__OP_PUT_GROW:
        return op_put_grow(svc, body, len, now, w);
    case MC__OP_PUT_RENEW:
        return op_put_renew(svc, body, len, now, w);
    case MC__OP_PUT_COMMIT:
        return op_put_commit(svc, body, len, now, w);
    case MC__OP_PUT_REVOKE:
        return op_put_revoke(svc, body, len);
    case MC__OP_PUT_DROP_REPLICA:
        return op_put_drop(svc, body, len, now);
    case MC__OP_PUT_EPOCH:
        return op_put_epoch(svc, body, len, now, w);
    case MC__OP_REPAIR_TAKE:
        return mc__svc_op_repair_take(svc, body, len, now, w);
    case MC__OP_REPAIR_DONE:
        return mc__svc_op_repair_done(svc, body, len, now);
    case MC__OP_RECORDS_TAKE:
        return mc__svc_op_records_take(svc, body, len, w);
    case MC__OP_RECORDS_REPORT:
        return mc__svc_op_records_report(svc, body, len, now);
    case MC__OP_TASK_CREATE:
        return mc__svc_op_task_create(svc, body, len, now, w);
    case MC__OP_TASK_QUERY:
        return mc__svc_op_task_query(svc, body, len, w);
    case MC__OP_REPLICA_DROP:
        return mc__svc_op_replica_drop(svc, body, len, now);
    case MC__OP_OPEN:
        return op_open(svc, owner, body, len, now, w);
    case MC__OP_CREATE:
        return op_create(svc, owner, body, len, now, w);
    case MC__OP_CLOSE:
        return op_close(svc, body, len, now);
    case MC__OP_GET_REPLICAS:
        return op_get_replicas(svc, body, len, now, w);
    default: /* the namespace requests, and -EOPNOTSUPP */
        return mc__svc_names(svc, op, body, len, now, w);
    }
}
