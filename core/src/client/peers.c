/*
 * peers.c - the nodes this client moves data with (remote_i.h): the
 * sessions every connection starts with, one peer per node address, and
 * which transport reaches a replica (mc__peer_route()).
 *
 * A node on this host (same network namespace) maps its segment into ours
 * after SHM_MAP on its shm socket (transport/shm.h); the first transfer to
 * it waits for the answer, so that it already takes the faster path.
 *
 * With an RDMA context (protocol rdma, or auto with a device) pieces to a
 * node that published an RDMA record go over RDMA instead of READ/WRITE
 * requests: one rdma_cm connection per node, made on first use (after the
 * TCP session to the node authenticated, when a secret is configured) and
 * reused by every operation. A connection that breaks fails its pieces
 * (reads then fail over to the next replica) and is closed; the next
 * transfer reconnects, and a failed connect is remembered for RDMA_RETRY_MS
 * so that reads fail over at once instead of waiting on a dead node again.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client/remote_i.h"
#include "runtime/auth.h"
#include "runtime/log.h"
#include "server/rdma_setup.h"
#include "transport/shm.h"

/* A segment of a co-located node, as this process sees it. */
typedef struct shm_map {
    uint32_t seg;
    enum { SHM_TRYING, SHM_MAPPED, SHM_FAILED } state;
    char *base; /* SHM_MAPPED: the node's segment, mapped read-write shared */
    uint64_t size;
    uint64_t map_len;       /* what is mapped at base: the segment and its fence */
    mc__shm_fence_t *fence; /* in the mapping: our writes go through slot (shm.h) */
    uint32_t slot;
    uint64_t failed_at; /* SHM_FAILED: TCP until SHM_RETRY_MS after this */
    struct shm_map *next;
} shm_map_t;

/* A node we move data to and from. */
typedef struct peer {
    char addr[MC__ADDR_STRLEN];
    struct mc__remote *rm;
    mc__rpc_client_t *cl;     /* TCP: READ, WRITE */
    int local;                /* addr names this host: its segment may map (shm.h) */
    mc__rpc_client_t *shm_cl; /* to its shm socket, while a mapping is wanted or held */
    shm_map_t *maps;
    struct xfer *waiters; /* transfers waiting for a SHM_MAP answer */
    int shm_pending;      /* SHM_MAP calls in flight */
    mc__rdma_conn_t *rc;  /* RDMA: the connection while connecting or up */
    enum { RDMA_NONE, RDMA_AUTHING, RDMA_CONNECTING, RDMA_UP, RDMA_FAILED } rstate;
    int rerr;                    /* RDMA_FAILED: why */
    uint64_t rfailed_at;         /* RDMA_FAILED: when */
    char raddr[MC__ADDR_STRLEN]; /* where rc goes */
    int rdma_pending;            /* a PING or a connect in flight (RDMA_AUTHING, _CONNECTING) */
    int zombie; /* the remote closed: free once shm_pending and rdma_pending are 0 */
    struct peer *next;
} peer_t;

#define SHM_RETRY_MS 10000 /* after a failed SHM_MAP, use TCP this long */
#define RDMA_RETRY_MS 1000 /* after a failed RDMA connect, fail fast this long */

/* ---- sessions ---- */

static void handshake_done(void *arg, mc__conn_t *c, int rc)
{
    mc__rpc_client_ready(arg, c, rc);
}

/* Every connection this store makes, to the master, to a node, or to a
 * node's shm socket, starts with HELLO (and AUTH with a secret) before any
 * call goes out. */
static void session(mc_store_t *s, mc__rpc_client_t *cl, mc__conn_t *c)
{
    mc__session_opts_t o = {
        .secret = s->secret,
        .role = s->seg_mem.base ? MC__ROLE_NODE : MC__ROLE_CLIENT,
        .timeout_ms = s->timeout_ms,
        .seen = mc__rpc_client_handshake_failed(cl),
    };
    int rc = mc__session_start(c, &o, handshake_done, cl);
    if (rc < 0)
        mc__rpc_client_ready(cl, c, rc);
}

/* The master's client: its data is the remote. */
static void handshake_master(mc__rpc_client_t *cl, mc__conn_t *c)
{
    struct mc__remote *rm = mc__rpc_client_data(cl);
    session(rm->s, cl, c);
}

/* A node's clients (TCP and shm): their data is the peer. */
static void handshake_peer(mc__rpc_client_t *cl, mc__conn_t *c)
{
    struct peer *p = mc__rpc_client_data(cl);
    session(p->rm->s, cl, c);
}

/* The connection to the master is lost, and the handles opened on it with
 * it: reads through them are not to be trusted from now on (mc_obj_stale()). */
static void master_lost(mc__rpc_client_t *cl, int err)
{
    (void)err;
    struct mc__remote *rm = mc__rpc_client_data(cl);
    __atomic_add_fetch(&rm->s->master_lost, 1, __ATOMIC_SEQ_CST);
}

const mc__rpc_client_ops_t mc__master_ops = {.handshake = handshake_master,
                                             .on_disconnect = master_lost};
static const mc__rpc_client_ops_t peer_ops = {.handshake = handshake_peer};

/* ---- peers ---- */

static void shm_unmap_all(shm_map_t **list)
{
    while (*list) {
        shm_map_t *m = *list;
        *list = m->next;
        if (m->state == SHM_MAPPED)
            munmap(m->base, m->map_len);
        free(m);
    }
}

/* A node's shm socket closed: unmaps its segments, but keeps those mapped
 * while any handle is open (mc_obj_view() promised its pointers until
 * mc_obj_close(), and another thread may be copying from them): the pages
 * of a memfd stay valid while mapped, whatever became of the node. */
static void shm_retire_all(peer_t *p)
{
    struct mc__remote *rm = p->rm;
    while (p->maps) {
        shm_map_t *m = p->maps;
        p->maps = m->next;
        if (m->state == SHM_MAPPED && rm->s->objs) {
            m->next = rm->retired;
            rm->retired = m;
            continue;
        }
        if (m->state == SHM_MAPPED)
            munmap(m->base, m->map_len);
        free(m);
    }
}

void mc__peers_unretire(struct mc__remote *rm)
{
    while (rm->retired) {
        shm_map_t *m = rm->retired;
        rm->retired = m->next;
        munmap(m->base, m->map_len);
        free(m);
    }
}

static void peer_free(peer_t *p)
{
    shm_unmap_all(&p->maps);
    free(p);
}

static peer_t *peer_get(struct mc__remote *rm, const char *addr)
{
    for (peer_t *p = rm->peers; p; p = p->next)
        if (strcmp(p->addr, addr) == 0)
            return p;
    mc__addr_t a;
    if (mc__addr_parse(addr, -1, &a) < 0)
        return NULL;
    peer_t *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    snprintf(p->addr, sizeof(p->addr), "%s", addr);
    p->rm = rm;
    /* protocol rdma means RDMA to every node, co-located ones included. */
    p->local = !rm->s->no_shm && rm->s->xport != MC__XPORT_RDMA && mc__addr_is_local(addr);
    if (mc__rpc_client_new(rm->s->loop, &a, rm->s->timeout_ms, &peer_ops, p, &p->cl) < 0) {
        free(p);
        return NULL;
    }
    p->next = rm->peers;
    rm->peers = p;
    return p;
}

/* ---- shared memory with co-located nodes ---- */

static shm_map_t *shm_find(peer_t *p, uint32_t seg)
{
    for (shm_map_t *m = p->maps; m; m = m->next)
        if (m->seg == seg)
            return m;
    return NULL;
}
/* Restarts the transfers that waited for p's SHM_MAP answers (or its RDMA
 * connection) in the order they began: each parked in front of the list,
 * and a node must get a writer's transfers in the order they were sent
 * (writer.c: a later write or truncation lands on an earlier one). */
static void shm_resume(peer_t *p)
{
    xfer_t *w = NULL;
    for (xfer_t *x = p->waiters, *next; x; x = next) {
        next = x->wait_next;
        x->wait_next = w;
        w = x;
    }
    p->waiters = NULL;
    while (w) {
        xfer_t *next = w->wait_next;
        mc__xfer_step(w);
        w = next;
    }
}

/* Stops talking to p's shm socket when no mapping needs it. */
static void shm_idle(peer_t *p)
{
    for (shm_map_t *m = p->maps; m; m = m->next)
        if (m->state != SHM_FAILED)
            return;
    if (p->shm_cl) {
        mc__rpc_client_close(p->shm_cl);
        p->shm_cl = NULL;
    }
}

typedef struct shm_call {
    peer_t *p;
    uint32_t seg;
} shm_call_t;

static void shm_mapped(void *arg, int status, const char *body, size_t len)
{
    shm_call_t *sc = arg;
    peer_t *p = sc->p;
    uint32_t seg = sc->seg;
    uint64_t size = 0, fence_off = 0;
    uint32_t slot = 0;
    char *base = NULL;

    free(sc);
    p->shm_pending--;
    if (p->zombie) {
        shm_resume(p); /* they fail: the remote is gone */
        if (!p->shm_pending && !p->rdma_pending)
            peer_free(p);
        return;
    }
    int rc = status;
    if (rc >= 0 &&
        (mc__unpack(body, len, "qqu", &size, &fence_off, &slot) < 0 || fence_off < size ||
         fence_off % 8 || fence_off > UINT64_MAX / 2 || slot >= MC__SHM_FENCE_SLOTS))
        rc = -EPROTO;
    uint64_t map_len = fence_off + sizeof(mc__shm_fence_t);
    if (rc >= 0) {
        mc__conn_t *c = mc__rpc_client_conn(p->shm_cl);
        int fd = c ? mc__conn_take_fd(c) : -ENOENT;
        rc = fd < 0 ? -EPROTO : mc__shm_map(fd, map_len, &base);
        if (fd >= 0)
            close(fd);
    }
    shm_map_t *m = shm_find(p, seg);
    if (m && rc >= 0) {
        m->state = SHM_MAPPED;
        m->base = base;
        m->size = size;
        m->map_len = map_len;
        m->fence = (mc__shm_fence_t *)(void *)(base + fence_off);
        m->slot = slot;
        mc__log(MC__LOG_INFO,
                "%s: segment %u mapped (%llu bytes): data moves through shared memory", p->addr,
                seg, (unsigned long long)size);
    } else {
        if (rc >= 0)
            munmap(base, map_len);
        if (m) {
            m->state = SHM_FAILED;
            m->failed_at = mc_loop_now_ms();
        }
        mc__log(MC__LOG_INFO, "%s: no shared memory for segment %u (%s): using TCP", p->addr, seg,
                mc_strerror(rc < 0 ? rc : -ENOENT));
        shm_idle(p);
    }
    shm_resume(p);
}

/* The node's shm socket closed (it died, or restarted): its memory is no
 * longer the segment the master knows, so drop the mappings (once no handle
 * may still view them). */
static void shm_lost(mc__rpc_client_t *cl, int err)
{
    peer_t *p = mc__rpc_client_data(cl);
    mc__log(MC__LOG_INFO, "%s: shared memory lost (%s): using TCP until it maps again", p->addr,
            err ? mc_strerror(err) : "closed");
    shm_retire_all(p);
    mc__rpc_client_close(cl);
    p->shm_cl = NULL;
}

static const mc__rpc_client_ops_t shm_ops = {.handshake = handshake_peer,
                                             .on_disconnect = shm_lost};

/* Asks p's shm socket for segment seg (a new SHM_TRYING entry). */
static int shm_start(peer_t *p, uint32_t seg)
{
    mc_store_t *s = p->rm->s;
    int rc;

    if (!p->shm_cl) {
        char name[MC__ADDR_STRLEN];
        mc__addr_t ua;
        if ((rc = mc__shm_unix_addr(p->addr, name, sizeof(name))) < 0 ||
            (rc = mc__addr_parse(name, -1, &ua)) < 0 ||
            (rc = mc__rpc_client_new(s->loop, &ua, s->timeout_ms, &shm_ops, p, &p->shm_cl)) < 0)
            return rc;
    }
    shm_map_t *m = calloc(1, sizeof(*m));
    shm_call_t *sc = calloc(1, sizeof(*sc));
    char req[4];
    mc__wbuf_t w = {.p = req, .cap = sizeof(req)};
    mc__pack(&w, "u", seg);
    if (!m || !sc) {
        rc = -ENOMEM;
    } else {
        *sc = (shm_call_t){p, seg};
        rc = mc__rpc_client_call(p->shm_cl, MC__OP_SHM_MAP, w.p, w.len, s->timeout_ms, shm_mapped,
                                 sc);
    }
    if (rc < 0) {
        free(m);
        free(sc);
        return rc;
    }
    m->seg = seg;
    m->state = SHM_TRYING;
    m->next = p->maps;
    p->maps = m;
    p->shm_pending++;
    return 0;
}

/*
 * Whether x must wait before it moves bytes to or from segment seg of p:
 * the first transfer to a co-located node asks for the segment's memory
 * and waits for the answer, so that it already takes the faster path.
 * Parks x on p and returns 1, or returns 0 (go ahead: mapped, or TCP).
 */
static int shm_wait(xfer_t *x, peer_t *p, uint32_t seg)
{
    if (!p->local)
        return 0;
    shm_map_t *m = shm_find(p, seg);
    if (m && m->state == SHM_FAILED && mc_loop_now_ms() - m->failed_at >= SHM_RETRY_MS) {
        for (shm_map_t **pp = &p->maps; *pp; pp = &(*pp)->next) {
            if (*pp == m) {
                *pp = m->next;
                break;
            }
        }
        free(m);
        m = NULL;
    }
    if (!m && shm_start(p, seg) < 0)
        return 0;
    m = shm_find(p, seg);
    if (!m || m->state != SHM_TRYING)
        return 0;
    x->wait_next = p->waiters;
    p->waiters = x;
    return 1;
}

/* ---- RDMA connections to nodes ---- */

/* Whether pieces on replica rep of peer p go over RDMA: we have a context,
 * the node published a record, and (auto) shared memory does not serve. */
static int want_rdma(const mc_store_t *s, const peer_t *p, const struct rrep *rep)
{
    return s->rdma && rep->desc && !(s->xport == MC__XPORT_AUTO && p->local);
}

static void rdma_fail(peer_t *p, int err)
{
    p->rstate = RDMA_FAILED;
    p->rerr = err;
    p->rfailed_at = mc_loop_now_ms();
    mc__log(MC__LOG_INFO, "%s: no RDMA connection to %s (%s)", p->addr, p->raddr, mc_strerror(err));
}

/* The end of a PING or a connect: frees a zombie, else wakes the waiters. */
static int rdma_settled(peer_t *p)
{
    p->rdma_pending = 0;
    if (!p->zombie)
        return 0;
    shm_resume(p); /* they fail: the remote is gone */
    if (!p->shm_pending)
        peer_free(p);
    return 1;
}

static void rdma_connected(mc__rdma_conn_t *c, int status, void *arg)
{
    peer_t *p = arg;
    if (rdma_settled(p))
        return;
    if (status < 0) {
        p->rc = NULL; /* freed after this returns */
        rdma_fail(p, status);
    } else {
        p->rstate = RDMA_UP;
        mc__log(MC__LOG_INFO, "%s: RDMA connection to %s up", p->addr, p->raddr);
    }
    shm_resume(p);
}

static void rdma_dial(peer_t *p)
{
    mc_store_t *s = p->rm->s;
    mc__addr_t a;
    int rc = mc__addr_parse(p->raddr, -1, &a);
    if (rc >= 0) {
        p->rstate = RDMA_CONNECTING;
        p->rdma_pending = 1;
        rc = mc__rdma_connect(s->rdma, (struct sockaddr *)&a.ss, s->timeout_ms, rdma_connected, p,
                              &p->rc);
    }
    if (rc < 0) {
        p->rdma_pending = 0;
        p->rc = NULL;
        rdma_fail(p, rc);
    }
}

/* The node answered a PING over its authenticated TCP session: it knows
 * the secret, so RDMA may go to it. */
static void rdma_authed(void *arg, int status, const char *body, size_t len)
{
    peer_t *p = arg;
    if (rdma_settled(p))
        return;
    if (status < 0)
        rdma_fail(p, status);
    else
        rdma_dial(p);
    if (p->rstate != RDMA_CONNECTING)
        shm_resume(p);
}

/* Starts the RDMA connection to p at rep's listener. */
static void rdma_start(peer_t *p, const struct rrep *rep)
{
    mc_store_t *s = p->rm->s;
    snprintf(p->raddr, sizeof(p->raddr), "%s", rep->rdma_addr);
    if (!s->secret)
        return rdma_dial(p);
    /* With a secret, RDMA follows a mutually authenticated session: the
     * PING goes out only after HELLO/AUTH with the node succeeded. */
    p->rstate = RDMA_AUTHING;
    p->rdma_pending = 1;
    int rc = mc__rpc_client_call(p->cl, MC__OP_PING, "", 0, s->timeout_ms, rdma_authed, p);
    if (rc < 0) {
        p->rdma_pending = 0;
        rdma_fail(p, rc);
    }
}

/*
 * Whether x must wait for p's RDMA connection before it moves bytes on
 * replica rep: a broken connection is closed, a failure older than
 * RDMA_RETRY_MS forgotten, and a missing one started. Parks x on p and
 * returns 1, or returns 0 (go ahead: up, or failed).
 */
static int rdma_wait(xfer_t *x, peer_t *p, const struct rrep *rep)
{
    if (p->rstate == RDMA_UP && mc__rdma_conn_error(p->rc)) {
        mc__rdma_close(p->rc);
        p->rc = NULL;
        p->rstate = RDMA_NONE;
    }
    if (p->rstate == RDMA_FAILED && mc_loop_now_ms() - p->rfailed_at >= RDMA_RETRY_MS)
        p->rstate = RDMA_NONE;
    if (p->rstate == RDMA_NONE)
        rdma_start(p, rep);
    if (p->rstate != RDMA_AUTHING && p->rstate != RDMA_CONNECTING)
        return 0;
    x->wait_next = p->waiters;
    p->waiters = x;
    return 1;
}

/* ---- routes ---- */

int mc__peer_own(const mc_store_t *s, uint32_t seg, const mc__transport_t **tp, mc__tp_ep_t *ep)
{
    if (!s->rm->own_seg || seg != s->rm->seg_id || !s->seg_mem.base)
        return 0;
    ep->mem.base = s->seg_mem.base;
    ep->mem.size = s->seg_mem.size;
    ep->mem.fence = NULL;
    /* A write that ended may still be copied here (a writer of before a
     * master restart, or revoked when its master connection dropped): it
     * carries an epoch below the one our node reports it enforces, and is
     * refused, as our data plane refuses such a WRITE. Copied on the
     * thread that reports the epoch, so no copy straddles a rise. (An
     * embedded store's epoch stays 0: it never revokes its own writers.) */
    ep->mem.epoch = &s->rm->epoch;
    /* A read of a replica handed out before our segment was mounted again
     * may have copied another object's bytes: it fails, as our data plane
     * refuses such a READ. */
    ep->mem.mount = &s->rm->mount_epoch;
    *tp = &mc__tp_local;
    return 1;
}

/* Whether rep is our own segment, whose bytes are copied here. */
static int own_replica(const mc_store_t *s, const struct rrep *rep)
{
    const mc__transport_t *tp;
    mc__tp_ep_t ep;
    return mc__peer_own(s, rep->seg, &tp, &ep);
}

int mc__peer_wait(xfer_t *x, const struct rrep *rep)
{
    if (own_replica(x->s, rep))
        return 0;
    peer_t *p = peer_get(x->s->rm, rep->addr);
    return p && want_rdma(x->s, p, rep) ? rdma_wait(x, p, rep) : p && shm_wait(x, p, rep->seg);
}

int mc__peer_route(mc_store_t *s, const struct rrep *rep, const mc__transport_t **tp,
                   struct peer **peer, mc__tp_ep_t *ep)
{
    *peer = NULL;
    if (mc__peer_own(s, rep->seg, tp, ep))
        return 0;
    peer_t *p = peer_get(s->rm, rep->addr);
    if (!p)
        return -EHOSTUNREACH;
    *peer = p;
    if (want_rdma(s, p, rep)) {
        if (p->rstate != RDMA_UP || mc__rdma_conn_error(p->rc))
            return p->rstate == RDMA_FAILED ? p->rerr : -ENOTCONN;
        ep->rdma.c = p->rc;
        ep->rdma.desc = rep->desc;
        *tp = &mc__tp_rdma;
        return 0;
    }
    if (s->xport == MC__XPORT_RDMA) {
        mc__log(MC__LOG_WARN, "%s: segment %u is not served over RDMA (protocol rdma)", rep->addr,
                rep->seg);
        return -EPROTONOSUPPORT;
    }
    shm_map_t *m = shm_find(p, rep->seg);
    if (m && m->state == SHM_MAPPED) {
        ep->mem.base = m->base;
        ep->mem.size = m->size;
        ep->mem.fence = m->fence;
        ep->mem.slot = m->slot;
        ep->mem.epoch = NULL;
        ep->mem.mount = &m->fence->mount;
        *tp = &mc__tp_shm;
        return 0;
    }
    ep->tcp = p->cl;
    *tp = &mc__tp_tcp;
    return 0;
}

void mc__peer_piece_failed(struct peer *p, const mc__transport_t *tp, const mc__tp_ep_t *ep,
                           int err)
{
    if (tp == &mc__tp_tcp && err == -ETIMEDOUT) {
        /* A node that does not answer in time (gone, or the link cut) gets
         * a fresh connection: calls queued behind a dead stream would only
         * time out one after another. */
        mc__conn_t *c = mc__rpc_client_conn(ep->tcp);
        if (c)
            mc__conn_close(c);
    } else if (tp == &mc__tp_rdma && p->rc == ep->rdma.c && mc__rdma_conn_error(ep->rdma.c)) {
        /* The connection broke (the node died, the QP failed, a timeout):
         * drop it; the next transfer to this node reconnects. */
        mc__log(MC__LOG_INFO, "%s: RDMA connection lost (%s)", p->addr, mc_strerror(err));
        mc__rdma_close(ep->rdma.c);
        p->rc = NULL;
        p->rstate = RDMA_NONE;
    }
}

void mc__peers_close(struct mc__remote *rm)
{
    mc__peers_unretire(rm);
    while (rm->peers) {
        peer_t *p = rm->peers;
        rm->peers = p->next;
        mc__rpc_client_close(p->cl);
        if (p->shm_cl)
            mc__rpc_client_close(p->shm_cl);
        p->shm_cl = NULL;
        shm_unmap_all(&p->maps);
        if (p->rc)
            mc__rdma_close(p->rc); /* pending pieces and a connect get -ECANCELED */
        p->rc = NULL;
        if (p->shm_pending || p->rdma_pending)
            p->zombie = 1; /* shm_mapped() or rdma_settled() frees it */
        else
            peer_free(p);
    }
}
