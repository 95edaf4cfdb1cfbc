/*
 * remote.c - the client: every operation of the store, once. Metadata comes
 * from the master through a link (link.h: an RPC to a master elsewhere, or a
 * direct call into the one of an embedded store), bytes move straight to and
 * from the segments.
 *
 * Every operation is a small chain of calls that ends in mc__op_finish().
 * Data moves in pieces of at most MC__PROTO_CHUNK bytes, all pieces of a
 * transfer in flight at once: writes go to every replica, reads to one and
 * fail over to the next. A piece whose segment is this process's own is
 * copied directly. Every call is bounded by the store's timeout.
 *
 * With an RDMA context (protocol rdma, or auto with a device) a piece to a
 * node that published an RDMA record is one RDMA READ or WRITE against the
 * node's registered segment instead of a READ/WRITE request: one rdma_cm
 * connection per node, made on first use (after the TCP session to the node
 * authenticated, when a secret is configured) and reused by every
 * operation. A connection that breaks fails its pieces (reads then fail
 * over to the next replica) and is closed; the next transfer reconnects,
 * and a failed connect is remembered for RDMA_RETRY_MS so that reads fail
 * over at once instead of waiting on a dead node again.
 *
 * When the store has a segment it is also a node: it serves the segment's
 * data (server.c), mounts it at the master, and heartbeats; a master that
 * forgot the node (it restarted) is answered by mounting again.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "runtime/auth.h"
#include "client/link.h"
#include "runtime/log.h"
#include "runtime/loop_i.h"
#include "wire/proto.h"
#include "runtime/rpc.h"
#include "server/server.h"
#include "transport/shm.h"
#include "client/store_i.h"
#include "server/rdma_setup.h"
#include "transport/transport_rdma.h"

typedef struct mc__rset {
    uint32_t n;
    uint64_t put_id; /* a writer's set: the put it belongs to (0: none) */
    struct rrep {
        uint32_t seg;
        char addr[MC__ADDR_STRLEN];
        char rdma_addr[MC__ADDR_STRLEN]; /* the node's rdma_cm listener */
        mc__rdma_desc_t *desc;           /* its segment over RDMA; NULL: TCP only */
        uint32_t next;
        mc__extent_t *ext;
        int dead; /* a write could not reach its node: the put goes on without it */
    } r[];        /* n of them */
} mc__rset_t;

/* A segment of a co-located node, as this process sees it. */
typedef struct shm_map {
    uint32_t seg;
    enum { SHM_TRYING, SHM_MAPPED, SHM_FAILED } state;
    char *base; /* SHM_MAPPED: the node's segment, mapped read-write shared */
    uint64_t size;
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

struct mc__remote {
    mc_store_t *s;
    mc__link_t *master; /* rpc, or local in an embedded store */
    peer_t *peers;
    mc__server_t *srv; /* serves our segment, when we have one */
    uint64_t node_id;
    uint32_t seg_id; /* our segment's id (a node: 0 until mounted) */
    int own_seg;     /* seg_id is our own segment: its bytes are copied here */
    mc_timer_t hb;
    int mounting;
    void (*open_done)(mc_store_t *s, int rc);
    void (*close_done)(mc_store_t *s);
    struct rcache_ent **rc_tab; /* replica-list cache: RC_BUCKETS chains, or NULL */
    size_t rc_n;                /* entries in it */
    struct rtask *tasks;        /* repair copies into our segment */
    int taking;                 /* a REPAIR_TAKE in flight */
    uint64_t take_at;           /* when it was sent: tasks' limits count from there */
};

/* ---- replica sets ---- */

void mc__rset_free(mc__rset_t *rs)
{
    if (!rs)
        return;
    for (uint32_t i = 0; i < rs->n; i++) {
        free(rs->r[i].ext);
        free(rs->r[i].desc);
    }
    free(rs);
}

/* Decodes a replica set from the front of *p (n bytes left) into an owned copy. */
static int rset_take(const char **p, size_t *n, mc__rset_t **out)
{
    mc__wire_replica_t w[MC__MAX_REPLICAS];
    int cnt = mc__take_replicas(p, n, w, MC__MAX_REPLICAS);
    if (cnt < 0)
        return -EIO;
    mc__rset_t *rs = calloc(1, sizeof(*rs) + sizeof(rs->r[0]) * (size_t)cnt);
    if (!rs)
        return -ENOMEM;
    for (int i = 0; i < cnt; i++) {
        struct rrep *r = &rs->r[i];
        r->seg = w[i].seg;
        size_t al = w[i].addr_len < MC__ADDR_STRLEN - 1 ? w[i].addr_len : MC__ADDR_STRLEN - 1;
        memcpy(r->addr, w[i].addr, al);
        r->addr[al] = '\0';
        r->ext = malloc(sizeof(*r->ext) * (w[i].next ? w[i].next : 1));
        if (!r->ext) {
            mc__rset_free(rs);
            return -ENOMEM;
        }
        if (w[i].rdma_len && mc__rdma_record_unpack(w[i].rdma, w[i].rdma_len, r->rdma_addr,
                                                    sizeof(r->rdma_addr), &r->desc) < 0) {
            mc__log(MC__LOG_WARN, "%s: malformed RDMA record for segment %u: using TCP", r->addr,
                    r->seg);
            r->desc = NULL;
        }
        r->next = w[i].next;
        for (uint32_t e = 0; e < w[i].next; e++)
            mc__wire_extent(&w[i], e, &r->ext[e].off, &r->ext[e].len);
        rs->n = (uint32_t)i + 1;
    }
    *out = rs;
    return 0;
}

/* ---- replica-list cache ----
 *
 * mc_get() keeps the stat and replica set GET_REPLICAS returned for half the
 * read lease the master granted with them (the lease keeps the version's
 * space from being reused meanwhile), so repeated gets of a key skip the
 * master. This client's own put, remove, rename and writer commit drop the
 * keys they touch, and so does a stat that finds the key gone or at another
 * version (a stat before a get, as mooncake-cli does, thus sees other
 * clients' changes); a read that fails on a cached set drops it and asks the
 * master again. Full: cleared. Off with no_replica_cache (Python's direct
 * backend). Loop thread only. An entry is freed when neither the table nor
 * a get reading through it holds it.
 */
#define RC_MAX 4096
#define RC_BUCKETS 8192

typedef struct rcache_ent {
    struct rcache_ent *hnext;
    uint32_t refs;
    uint64_t expires; /* mc_loop_now_ms() */
    mc_stat_t st;
    mc__rset_t *rs;
    size_t klen;
    char key[];
} rcache_ent_t;

static size_t rc_bucket(const char *key, size_t klen)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < klen; i++)
        h = (h ^ (unsigned char)key[i]) * 1099511628211ULL;
    return (size_t)(h % RC_BUCKETS);
}

static void rc_put(rcache_ent_t *e)
{
    if (e && --e->refs == 0) {
        mc__rset_free(e->rs);
        free(e);
    }
}

/* Unlinks *pp (an entry in the table) and drops the table's reference. */
static void rc_unlink(struct mc__remote *rm, rcache_ent_t **pp)
{
    rcache_ent_t *e = *pp;
    *pp = e->hnext;
    rm->rc_n--;
    rc_put(e);
}

static void rc_clear(struct mc__remote *rm)
{
    for (size_t b = 0; rm && rm->rc_tab && rm->rc_n && b < RC_BUCKETS; b++)
        while (rm->rc_tab[b])
            rc_unlink(rm, &rm->rc_tab[b]);
}

/* Drops key's entry (only if it is e, unless e is NULL). */
static void rc_drop(struct mc__remote *rm, const char *key, size_t klen, const rcache_ent_t *e)
{
    if (!rm || !rm->rc_tab)
        return;
    for (rcache_ent_t **pp = &rm->rc_tab[rc_bucket(key, klen)]; *pp; pp = &(*pp)->hnext) {
        if ((*pp)->klen == klen && memcmp((*pp)->key, key, klen) == 0) {
            if (!e || *pp == e)
                rc_unlink(rm, pp);
            return;
        }
    }
}

/* key's live entry, or NULL (an expired one is dropped). */
static rcache_ent_t *rc_find(struct mc__remote *rm, const char *key, size_t klen)
{
    if (!rm || !rm->rc_tab)
        return NULL;
    for (rcache_ent_t **pp = &rm->rc_tab[rc_bucket(key, klen)]; *pp; pp = &(*pp)->hnext) {
        rcache_ent_t *e = *pp;
        if (e->klen == klen && memcmp(e->key, key, klen) == 0) {
            if (mc_loop_now_ms() < e->expires)
                return e;
            rc_unlink(rm, pp);
            return NULL;
        }
    }
    return NULL;
}

/* A fresher word from the master on key (a stat): an entry of another
 * version goes. */
static void rc_check(struct mc__remote *rm, const char *key, size_t klen, const mc_stat_t *st)
{
    rcache_ent_t *e = rc_find(rm, key, klen);
    if (e && e->st.version != st->version)
        rc_drop(rm, key, klen, e);
}

/* Puts e in the table (which takes a reference), replacing key's entry. */
static void rc_insert(struct mc__remote *rm, rcache_ent_t *e)
{
    if (!rm->rc_tab && !(rm->rc_tab = calloc(RC_BUCKETS, sizeof(*rm->rc_tab))))
        return;
    rc_drop(rm, e->key, e->klen, NULL);
    if (rm->rc_n >= RC_MAX)
        rc_clear(rm);
    size_t b = rc_bucket(e->key, e->klen);
    e->hnext = rm->rc_tab[b];
    rm->rc_tab[b] = e;
    e->refs++;
    rm->rc_n++;
}

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
        .role = s->seg ? MC__ROLE_NODE : MC__ROLE_CLIENT,
        .timeout_ms = s->timeout_ms,
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

static const mc__rpc_client_ops_t master_ops = {.handshake = handshake_master};
static const mc__rpc_client_ops_t peer_ops = {.handshake = handshake_peer};

/* A transfer between a buffer and the replicas of an object (xfer()). */
typedef struct xfer {
    mc_store_t *s;
    const mc__rset_t *rs;
    int write;
    int zero; /* the source is zeros */
    uint64_t off, len;
    char *buf;
    uint32_t replica;           /* reads: the replica being tried */
    int rerr[MC__MAX_REPLICAS]; /* writes: the first error per replica */
    int pending;
    int issuing;
    int err;
    void (*done)(void *arg, int rc);
    void *arg;
    struct xfer *wait_next; /* parked on a peer (shm_wait()) */
} xfer_t;

/* ---- peers ---- */

static void shm_unmap_all(peer_t *p)
{
    while (p->maps) {
        shm_map_t *m = p->maps;
        p->maps = m->next;
        if (m->state == SHM_MAPPED)
            munmap(m->base, m->size);
        free(m);
    }
}

static void peer_free(peer_t *p)
{
    shm_unmap_all(p);
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

static void xfer_step(xfer_t *x);

/* Restarts the transfers that waited for p's SHM_MAP answers. */
static void shm_resume(peer_t *p)
{
    xfer_t *w = p->waiters;
    p->waiters = NULL;
    while (w) {
        xfer_t *next = w->wait_next;
        xfer_step(w);
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
    uint64_t size = 0;
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
    if (rc >= 0 && mc__unpack(body, len, "q", &size) < 0)
        rc = -EPROTO;
    if (rc >= 0) {
        mc__conn_t *c = mc__rpc_client_conn(p->shm_cl);
        int fd = c ? mc__conn_take_fd(c) : -ENOENT;
        rc = fd < 0 ? -EPROTO : mc__shm_map(fd, size, &base);
        if (fd >= 0)
            close(fd);
    }
    shm_map_t *m = shm_find(p, seg);
    if (m && rc >= 0) {
        m->state = SHM_MAPPED;
        m->base = base;
        m->size = size;
        mc__log(MC__LOG_INFO,
                "%s: segment %u mapped (%llu bytes): data moves through shared memory", p->addr,
                seg, (unsigned long long)size);
    } else {
        if (rc >= 0)
            munmap(base, size);
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
 * longer the segment the master knows, so drop the mappings. */
static void shm_lost(mc__rpc_client_t *cl, int err)
{
    peer_t *p = mc__rpc_client_data(cl);
    mc__log(MC__LOG_INFO, "%s: shared memory lost (%s): using TCP until it maps again", p->addr,
            err ? mc_strerror(err) : "closed");
    shm_unmap_all(p);
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

/* ---- transfers ---- */

static const char zeros[1 << 16];

typedef struct piece {
    xfer_t *x;
    uint32_t r;           /* the replica */
    mc__rpc_client_t *cl; /* the node's client, to reset on a timeout */
    char *dst;            /* reads: where the bytes go */
    uint32_t want;
    char prefix[16]; /* writes: the packed "uq" before the data */
    struct iovec iov[1 + (MC__PROTO_CHUNK / sizeof(zeros))];
} piece_t;

/* A piece moved by RDMA; rd is a copy of the replica's descriptor, which
 * a writer's growing replica set may free before the piece completes. */
typedef struct rpiece {
    xfer_t *x;
    uint32_t r; /* the replica */
    peer_t *p;
    mc__rdma_conn_t *c;
    uint32_t want;
    struct mc__ubuf *ub; /* zero copy: the caller's registered buffer, or NULL */
    mc__rdma_desc_t rd;  /* variable size: keep last */
} rpiece_t;

static void xfer_end(xfer_t *x);

/* Records a piece's error: per replica for a write, for the whole read. */
static void xfer_fail(xfer_t *x, uint32_t r, int err)
{
    int *e = x->write ? &x->rerr[r] : &x->err;
    if (err < 0 && !*e)
        *e = err;
}

/* Errors that say the node is unreachable, not that the request was bad. */
static int conn_error(int err)
{
    switch (-err) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case EHOSTDOWN:
    case ENETUNREACH:
    case ENOTCONN:
    case EPIPE:
        return 1;
    default:
        return 0;
    }
}

static int mcall(mc_store_t *s, uint16_t op, mc__rpc_cb cb, void *arg, const char *fmt, ...);
static void ignore_reply(void *arg, int status, const char *body, size_t len);

/*
 * The end of a write: the first error, or 0. Replicas whose node could not
 * be reached while another replica took every byte are dropped (marked dead
 * in the set, and PUT_DROP_REPLICA to the master, which sends the request
 * before any later call of this writer): the put goes on with the others,
 * and the master restores the count later (repair.h).
 */
static int xfer_write_result(xfer_t *x)
{
    mc__rset_t *rs = (mc__rset_t *)x->rs; /* a writer's own set */
    int ok = 0, hard = 0;
    for (uint32_t r = 0; r < rs->n; r++) {
        if (rs->r[r].dead)
            continue;
        if (!x->rerr[r])
            ok++;
        else if (!conn_error(x->rerr[r]) || !rs->put_id)
            hard = x->rerr[r];
    }
    int first = 0;
    for (uint32_t r = 0; r < rs->n && !first; r++)
        if (!rs->r[r].dead)
            first = x->rerr[r];
    if (hard || !ok || x->err)
        return x->err ? x->err : hard ? hard : first;
    for (uint32_t r = 0; r < rs->n; r++) {
        if (rs->r[r].dead || !x->rerr[r])
            continue;
        mc__log(MC__LOG_WARN, "%s: %s: writing on without the replica on segment %u", rs->r[r].addr,
                mc_strerror(x->rerr[r]), rs->r[r].seg);
        rs->r[r].dead = 1;
        mcall(x->s, MC__OP_PUT_DROP_REPLICA, ignore_reply, NULL, "qu", rs->put_id, rs->r[r].seg);
    }
    return 0;
}

static void rpiece_done(void *arg, int status)
{
    rpiece_t *rp = arg;
    xfer_t *x = rp->x;
    if (rp->ub)
        rp->ub->users--;
    if (status >= 0) {
        mc__count(&x->s->st.rdma_ops, &x->s->st.rdma_bytes, rp->want);
        if (rp->ub)
            __atomic_fetch_add(&x->s->st.rdma_zero_copy_bytes, rp->want, __ATOMIC_RELAXED);
    } else if (x->s->rm && rp->p->rc == rp->c && mc__rdma_conn_error(rp->c)) {
        /* The connection broke (the node died, the QP failed, a timeout):
         * drop it; the next transfer to this node reconnects. */
        mc__log(MC__LOG_INFO, "%s: RDMA connection lost (%s)", rp->p->addr, mc_strerror(status));
        mc__rdma_close(rp->c);
        rp->p->rc = NULL;
        rp->p->rstate = RDMA_NONE;
    }
    xfer_fail(x, rp->r, status);
    x->pending--;
    free(rp);
    xfer_end(x);
}

static void xfer_end(xfer_t *x)
{
    if (x->pending || x->issuing)
        return;
    if (x->err && !x->write && x->replica + 1 < x->rs->n) {
        mc__log(MC__LOG_INFO, "read from %s failed (%s): trying the next replica",
                x->rs->r[x->replica].addr, mc_strerror(x->err));
        x->replica++;
        x->err = 0;
        xfer_step(x);
        return;
    }
    int rc = x->write ? xfer_write_result(x) : x->err;
    void (*done)(void *, int) = x->done;
    void *arg = x->arg;
    free(x);
    done(arg, rc);
}

static void piece_done(void *arg, int status, const char *body, size_t len)
{
    piece_t *pc = arg;
    xfer_t *x = pc->x;
    if (status >= 0 && !x->write) {
        if (len != pc->want)
            status = -EIO;
        else
            memcpy(pc->dst, body, len);
    }
    if (status >= 0)
        mc__count(&x->s->st.tcp_ops, &x->s->st.tcp_bytes, pc->want);
    if (status == -ETIMEDOUT && x->s->rm && pc->cl) {
        /* A node that does not answer in time (gone, or the link cut) gets
         * a fresh connection: calls queued behind a dead stream would only
         * time out one after another. */
        mc__conn_t *c = mc__rpc_client_conn(pc->cl);
        if (c)
            mc__conn_close(c);
    }
    xfer_fail(x, pc->r, status);
    x->pending--;
    free(pc);
    xfer_end(x);
}

/* Issues the pieces of [x->off, x->off + x->len) on replica r. */
static void xfer_replica(xfer_t *x, uint32_t r)
{
    mc_store_t *s = x->s;
    struct mc__remote *rm = s->rm;
    const struct rrep *rep = &x->rs->r[r];
    int *err = x->write ? &x->rerr[r] : &x->err; /* this replica's error */
    int local = rm->own_seg && rep->seg == rm->seg_id && s->seg;
    peer_t *peer = local ? NULL : peer_get(rm, rep->addr);
    if (!local && !peer) {
        *err = -EHOSTUNREACH;
        return;
    }
    mc__rpc_client_t *cl = peer ? peer->cl : NULL;
    int rdma = peer && want_rdma(s, peer, rep);
    if (rdma && (peer->rstate != RDMA_UP || mc__rdma_conn_error(peer->rc))) {
        *err = peer->rstate == RDMA_FAILED ? peer->rerr : -ENOTCONN;
        return;
    }
    if (peer && !rdma && s->xport == MC__XPORT_RDMA) {
        mc__log(MC__LOG_WARN, "%s: segment %u is not served over RDMA (protocol rdma)", rep->addr,
                rep->seg);
        *err = -EPROTONOSUPPORT;
        return;
    }
    /* Bytes are copied directly into our own segment or a mapped one. */
    char *mem = local ? s->seg : NULL;
    uint64_t mem_size = local ? s->seg_size : 0;
    shm_map_t *m = peer && !rdma ? shm_find(peer, rep->seg) : NULL;
    if (m && m->state == SHM_MAPPED) {
        mem = m->base;
        mem_size = m->size;
    }
    uint64_t at = 0, end = x->off + x->len;
    for (uint32_t e = 0; e < rep->next && at < end && !*err; e++) {
        const mc__extent_t *ex = &rep->ext[e];
        uint64_t lo = x->off > at ? x->off : at;
        uint64_t hi = end < at + ex->len ? end : at + ex->len;
        for (uint64_t p = lo; p < hi && !*err;) {
            uint32_t n = (uint32_t)(hi - p < MC__PROTO_CHUNK ? hi - p : MC__PROTO_CHUNK);
            uint64_t soff = ex->off + (p - at);
            char *user = x->buf ? x->buf + (p - x->off) : NULL;
            if (mem) {
                if (soff > mem_size || n > mem_size - soff) {
                    *err = -EIO;
                } else if (x->write) {
                    if (x->zero)
                        memset(mem + soff, 0, n);
                    else
                        memcpy(mem + soff, user, n);
                } else {
                    memcpy(user, mem + soff, n);
                }
                if (local)
                    mc__count(&s->st.local_ops, &s->st.local_bytes, n);
                else
                    mc__count(&s->st.shm_ops, &s->st.shm_bytes, n);
                p += n;
                continue;
            }
            if (rdma) {
                size_t dsz = mc__rdma_desc_size(rep->desc->n);
                rpiece_t *rp = malloc(offsetof(rpiece_t, rd) + dsz);
                if (!rp) {
                    *err = -ENOMEM;
                    break;
                }
                *rp = (rpiece_t){.x = x, .r = r, .p = peer, .c = peer->rc, .want = n};
                memcpy(&rp->rd, rep->desc, dsz);
                /* Zero copy when the piece lies in a buffer the caller
                 * registered: the NIC moves the caller's bytes itself. */
                struct mc__ubuf *ub = user && !x->zero ? mc__ubuf_find(s, user, n) : NULL;
                const mc__rdma_mr_t *mr = ub ? ub->mr : NULL;
                if (mr) {
                    rp->ub = ub;
                    ub->users++;
                }
                int rc = x->write ? mc__rdma_write(peer->rc, x->zero ? NULL : user, mr, &rp->rd,
                                                   soff, n, s->timeout_ms, rpiece_done, rp)
                                  : mc__rdma_read(peer->rc, user, mr, &rp->rd, soff, n,
                                                  s->timeout_ms, rpiece_done, rp);
                if (rc < 0) {
                    if (rp->ub)
                        rp->ub->users--;
                    free(rp);
                    *err = rc;
                    break;
                }
                x->pending++;
                p += n;
                continue;
            }
            piece_t *pc = calloc(1, sizeof(*pc));
            if (!pc) {
                *err = -ENOMEM;
                break;
            }
            pc->x = x;
            pc->r = r;
            pc->cl = cl;
            pc->dst = user;
            pc->want = n;
            int rc;
            if (x->write) {
                mc__wbuf_t w = {.p = pc->prefix, .cap = sizeof(pc->prefix)};
                mc__pack(&w, "uq", rep->seg, soff);
                pc->iov[0] = (struct iovec){pc->prefix, w.len};
                int niov = 1;
                if (x->zero) {
                    for (uint32_t z = 0; z < n; z += sizeof(zeros))
                        pc->iov[niov++] = (struct iovec){
                            (void *)zeros, n - z < sizeof(zeros) ? n - z : sizeof(zeros)};
                } else {
                    pc->iov[niov++] = (struct iovec){user, n};
                }
                rc = mc__rpc_client_callv(cl, MC__OP_WRITE, pc->iov, niov, s->timeout_ms,
                                          piece_done, pc);
            } else {
                char req[24];
                mc__wbuf_t w = {.p = req, .cap = sizeof(req)};
                mc__pack(&w, "uqu", rep->seg, soff, n);
                rc =
                    mc__rpc_client_call(cl, MC__OP_READ, req, w.len, s->timeout_ms, piece_done, pc);
            }
            if (rc < 0) {
                free(pc);
                *err = rc;
                break;
            }
            x->pending++;
            p += n;
        }
        at += ex->len;
    }
}

/* Whether x must wait for a SHM_MAP answer before it issues (shm_wait()). */
static int xfer_parks(xfer_t *x)
{
    struct mc__remote *rm = x->s->rm;
    for (uint32_t r = x->write ? 0 : x->replica; r < x->rs->n; r++) {
        const struct rrep *rep = &x->rs->r[r];
        if (rep->dead)
            continue;
        if (!(rm->own_seg && rep->seg == rm->seg_id && x->s->seg)) {
            peer_t *p = peer_get(rm, rep->addr);
            if (p && want_rdma(x->s, p, rep) ? rdma_wait(x, p, rep) : p && shm_wait(x, p, rep->seg))
                return 1;
        }
        if (!x->write)
            break;
    }
    return 0;
}

static void xfer_step(xfer_t *x)
{
    if (!x->s->rm) { /* the store is closing */
        if (!x->err)
            x->err = -ECANCELED;
        x->replica = x->rs->n;
        xfer_end(x);
        return;
    }
    while (!x->write && x->replica + 1 < x->rs->n && x->rs->r[x->replica].dead)
        x->replica++; /* a writer's dropped replica lacks bytes */
    if (xfer_parks(x))
        return; /* shm_resume() comes back here */
    x->issuing = 1;
    if (x->write) {
        for (uint32_t r = 0; r < x->rs->n; r++)
            if (!x->rs->r[r].dead && !x->rerr[r])
                xfer_replica(x, r);
    } else if (x->rs->r[x->replica].dead) {
        x->err = -EIO;
    } else {
        xfer_replica(x, x->replica);
    }
    x->issuing = 0;
    xfer_end(x);
}

/*
 * Moves len bytes between buf and object offset off of the replicas rs
 * (every replica for a write; the first that works for a read); buf NULL
 * with write writes zeros. done(arg, rc) runs once, possibly at once.
 */
static void xfer(mc_store_t *s, const mc__rset_t *rs, int write, uint64_t off, char *buf,
                 uint64_t len, void (*done)(void *, int), void *arg)
{
    if (!len) {
        done(arg, 0);
        return;
    }
    if (!s->rm) { /* the store is closing */
        done(arg, -ECANCELED);
        return;
    }
    if (!rs || !rs->n) {
        done(arg, -EIO);
        return;
    }
    xfer_t *x = calloc(1, sizeof(*x));
    if (!x) {
        done(arg, -ENOMEM);
        return;
    }
    *x = (xfer_t){.s = s,
                  .rs = rs,
                  .write = write,
                  .zero = write && !buf,
                  .off = off,
                  .len = len,
                  .buf = buf,
                  .done = done,
                  .arg = arg};
    xfer_step(x);
}

/* ---- master calls ---- */

/* Calls the master with a body packed per fmt; cb gets the response. */
static int mcall(mc_store_t *s, uint16_t op, mc__rpc_cb cb, void *arg, const char *fmt, ...)
{
    mc__wbuf_t w = {0};
    va_list ap;
    va_start(ap, fmt);
    int rc = mc__vpack(&w, fmt, ap);
    va_end(ap);
    if (rc == 0)
        rc = s->rm ? mc__link_call(s->rm->master, op, w.p ? w.p : "", w.len, s->timeout_ms, cb, arg)
                   : -ECANCELED; /* the store is closing */
    free(w.p);
    return rc;
}

static void ignore_reply(void *arg, int status, const char *body, size_t len) {}

static int64_t put_mtime(const op_t *o)
{
    return o->po.mtime_ns;
}

/* ---- simple operations ---- */

/* Decodes a STATS answer (s name, q value, ...) into out[0..max). Returns
 * the count, or -EIO. */
static int take_counters(const char *p, size_t n, mc_counter_t *out, size_t max)
{
    int cnt = 0;
    while (n) {
        const char *name, *rest;
        uint32_t nl, rl;
        uint64_t val;
        if (mc__unpack(p, n, "sq*", &name, &nl, &val, &rest, &rl) < 0)
            return -EIO;
        if ((size_t)cnt < max) {
            size_t l = nl < sizeof(out->name) - 1 ? nl : sizeof(out->name) - 1;
            memcpy(out[cnt].name, name, l);
            out[cnt].name[l] = '\0';
            out[cnt].value = val;
            cnt++;
        }
        p = rest;
        n = rl;
    }
    return cnt;
}

static void simple_done(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    int rc = status;
    const char *p = body;
    size_t n = len;
    if (o->kind == OP_RENAME || (o->kind == OP_REMOVE && (o->flags & ~MC_REMOVE_FORCE)))
        rc_clear(o->s->rm);
    else if (o->kind == OP_REMOVE || (o->kind == OP_STAT && status == -ENOENT))
        rc_drop(o->s->rm, o->key, o->klen, NULL);
    if (status >= 0) {
        switch (o->kind) {
        case OP_STAT:
        case OP_LOOKUP:
            if (mc__take_stat(&p, &n, o->st) < 0)
                rc = -EIO;
            else if (o->kind == OP_STAT)
                rc_check(o->s->rm, o->key, o->klen, o->st);
            break;
        case OP_LIST: {
            int cnt = mc__take_list(body, len, o->list);
            rc = cnt < 0 ? -EIO : cnt;
            break;
        }
        case OP_STATFS:
            if (mc__unpack(body, len, "qqqq", &o->sp->total, &o->sp->used, &o->sp->objects,
                           &o->sp->evicted) < 0)
                rc = -EIO;
            break;
        case OP_MASTER_STATS:
            rc = take_counters(p, n, o->counters, o->max);
            break;
        default:
            break;
        }
    }
    mc__op_finish(o, rc);
}

/* ---- put (whole object) ---- */

/* A whole-object put sends this much at a time, checking its write lease in
 * between (a put larger than what one lease covers renews it). */
#define PUT_STEP (64ULL << 20)

/* The master forgot a write in progress: its lease ran out (idle past the
 * put TTL, or a master that restarted). The writer must stop. */
static int revoked(int status)
{
    return status == -ENOENT ? -ESTALE : status;
}

static void put_end(op_t *o, int rc)
{
    mc__rset_free(o->buf);
    o->buf = NULL;
    free(o->tmp);
    o->tmp = NULL;
    mc__op_finish(o, rc);
}

static void put_fail(op_t *o, int rc)
{
    mcall(o->s, MC__OP_PUT_REVOKE, ignore_reply, NULL, "q", o->u64);
    put_end(o, rc);
}

static void put_committed(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    rc_drop(o->s->rm, o->key, o->klen, NULL);
    put_end(o, status < 0 ? revoked(status) : 0);
}

static void put_step(op_t *o);

static void put_renewed(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    mc__rset_t *rs = NULL;
    size_t n = len;
    if (status >= 0 && rset_take(&body, &n, &rs) < 0)
        status = -EIO;
    if (status < 0)
        return put_fail(o, revoked(status));
    mc__rset_free(o->buf); /* replicas dropped meanwhile are gone from it */
    o->buf = rs;
    rs->put_id = o->u64;
    o->renew_at = o->sent_ms + o->lease_ms / 2;
    put_step(o);
}

static void put_sent(void *arg, int rc)
{
    op_t *o = arg;
    if (rc < 0)
        return put_fail(o, rc);
    o->done += o->off;
    put_step(o);
}

/* Sends the next step of the object (renewing the lease first when half of
 * it is gone), then commits. */
static void put_step(op_t *o)
{
    int rc;
    uint64_t now = mc__loop_time(o->s->loop);
    if (o->done == o->len) {
        mc__rset_free(o->buf);
        o->buf = NULL;
        rc = mcall(o->s, MC__OP_PUT_COMMIT, put_committed, o, "qkqui", o->u64, o->key,
                   (uint32_t)o->klen, (uint64_t)o->len, o->po.mode, put_mtime(o));
        if (rc < 0)
            put_end(o, rc);
        return;
    }
    if (now >= o->renew_at) {
        o->sent_ms = now;
        rc = mcall(o->s, MC__OP_PUT_GROW, put_renewed, o, "qq", o->u64, (uint64_t)0);
        if (rc < 0)
            put_fail(o, rc);
        return;
    }
    const char *src = o->tmp ? o->tmp : (o->iovcnt ? o->iov[0].iov_base : "");
    o->off = o->len - o->done < PUT_STEP ? o->len - o->done : PUT_STEP;
    xfer(o->s, o->buf, 1, o->done, (char *)src + o->done, o->off, put_sent, o);
}

static void put_started(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    if (status < 0)
        return put_end(o, status);
    const char *rest;
    uint32_t rl;
    mc__rset_t *rs = NULL;
    size_t n;
    if (mc__unpack(body, len, "qq*", &o->u64, &o->lease_ms, &rest, &rl) < 0 ||
        (n = rl, rset_take(&rest, &n, &rs)) < 0)
        return put_end(o, -EIO);
    o->buf = rs;
    rs->put_id = o->u64;
    o->renew_at = o->sent_ms + o->lease_ms / 2;
    o->done = 0;
    put_step(o);
}

static void remote_put(op_t *o)
{
    size_t total = 0;
    for (int i = 0; i < o->iovcnt; i++)
        total += o->iov[i].iov_len;
    o->len = total;
    if (o->iovcnt > 1) { /* gather into one buffer: pieces index it by offset */
        o->tmp = malloc(total ? total : 1);
        if (!o->tmp)
            return mc__op_finish(o, -ENOMEM);
        size_t at = 0;
        for (int i = 0; i < o->iovcnt; i++) {
            if (o->iov[i].iov_len) /* an empty piece may have no base */
                memcpy((char *)o->tmp + at, o->iov[i].iov_base, o->iov[i].iov_len);
            at += o->iov[i].iov_len;
        }
    }
    const char *pref = o->po.preferred_segment ? o->po.preferred_segment : "";
    o->sent_ms = mc__loop_time(o->s->loop);
    int rc = mcall(o->s, MC__OP_PUT_START, put_started, o, "kquuuuqis", o->key, (uint32_t)o->klen,
                   (uint64_t)total, o->po.flags, o->po.mode, o->po.replica_num, o->po.pin,
                   o->po.soft_pin_ttl_ms, put_mtime(o), pref, (uint32_t)strlen(pref));
    if (rc < 0) {
        free(o->tmp);
        o->tmp = NULL;
        mc__op_finish(o, rc);
    }
}

/* ---- get, open, read ---- */

static void get_replicas_done(void *arg, int status, const char *body, size_t len);

static void read_done(void *arg, int rc)
{
    op_t *o = arg;
    if (o->kind == OP_GET) {
        rcache_ent_t *e = o->tmp;
        o->tmp = NULL;
        if (rc < 0 && o->stage == 1 && o->s->rm) {
            /* The cached set failed: forget it, ask the master once. */
            rc_drop(o->s->rm, o->key, o->klen, e);
            rc_put(e);
            o->stage = 2;
            rc = mcall(o->s, MC__OP_GET_REPLICAS, get_replicas_done, o, "k", o->key,
                       (uint32_t)o->klen);
            if (rc < 0)
                mc__op_finish(o, rc);
            return;
        }
        rc_put(e);
    }
    o->tmp = NULL;
    mc__op_finish(o, rc < 0 ? rc : (int)o->u64);
}

/* Reads [o->off, o->off + o->len) clamped to size from rs into o->buf. */
static void read_range(op_t *o, const mc__rset_t *rs, uint64_t size)
{
    uint64_t n = 0;
    if (o->off < size)
        n = size - o->off < o->len ? size - o->off : o->len;
    o->u64 = n;
    xfer(o->s, rs, 0, o->off, o->buf, n, read_done, o);
}

static void get_replicas_done(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    if (status < 0) {
        if (status == -ENOENT)
            rc_drop(o->s->rm, o->key, o->klen, NULL);
        return mc__op_finish(o, status);
    }
    const char *p;
    uint32_t pl;
    size_t n;
    uint64_t lease_ms;
    mc_stat_t st;
    mc__rset_t *rs = NULL;
    if (mc__unpack(body, len, "q*", &lease_ms, &p, &pl) < 0 ||
        (n = pl, mc__take_stat(&p, &n, &st)) < 0 || rset_take(&p, &n, &rs) < 0)
        return mc__op_finish(o, -EIO);
    rcache_ent_t *e = calloc(1, sizeof(*e) + o->klen);
    if (!e) {
        mc__rset_free(rs);
        return mc__op_finish(o, -ENOMEM);
    }
    e->refs = 1; /* this get's */
    e->st = st;
    e->rs = rs;
    e->klen = o->klen;
    memcpy(e->key, o->key, o->klen);
    /* Half the lease: a margin for the trip and the clocks' tick. */
    uint64_t keep = lease_ms - lease_ms / 2;
    if (keep && lease_ms / 2 && o->s->rm && !o->s->no_rcache) {
        e->expires = mc_loop_now_ms() + keep;
        rc_insert(o->s->rm, e);
    }
    if (o->st)
        *o->st = st;
    o->tmp = e;
    read_range(o, rs, st.size);
}

/* mc_get(): through the cache when it has the key, else the master. */
static int remote_get(op_t *o)
{
    rcache_ent_t *e = o->s->no_rcache ? NULL : rc_find(o->s->rm, o->key, o->klen);
    if (!e) {
        o->stage = 0;
        return mcall(o->s, MC__OP_GET_REPLICAS, get_replicas_done, o, "k", o->key,
                     (uint32_t)o->klen);
    }
    __atomic_fetch_add(&o->s->st.cache_hits, 1, __ATOMIC_RELAXED);
    e->refs++;
    o->stage = 1;
    o->tmp = e;
    if (o->st)
        *o->st = e->st;
    read_range(o, e->rs, e->st.size);
    return 0;
}

static void open_done(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    if (status < 0)
        return mc__op_finish(o, status);
    mc_obj_t *ob = calloc(1, sizeof(*ob));
    const char *rest;
    uint32_t rl;
    size_t n;
    if (!ob)
        return mc__op_finish(o, -ENOMEM);
    ob->s = o->s;
    if (mc__unpack(body, len, "q*", &ob->rid, &rest, &rl) < 0 ||
        (n = rl, mc__take_stat(&rest, &n, &ob->st)) < 0 || rset_take(&rest, &n, &ob->rs) < 0) {
        if (ob->rid)
            mcall(o->s, MC__OP_CLOSE, ignore_reply, NULL, "q", ob->rid);
        free(ob);
        return mc__op_finish(o, -EIO);
    }
    LINK(&o->s->objs, ob);
    *o->obj_out = ob;
    mc__op_finish(o, 0);
}

/* ---- writers ---- */

static void w_free(mc_writer_t *w)
{
    UNLINK(&w->s->writers, w);
    mc__rset_free(w->rs);
    free(w->key);
    free(w);
}

/* Replaces w's replica set with the one in a PUT_START/PUT_GROW reply. */
static int w_take_rset(mc_writer_t *w, const char *p, size_t n)
{
    mc__rset_t *rs;
    int rc = rset_take(&p, &n, &rs);
    if (rc < 0)
        return rc;
    mc__rset_free(w->rs);
    w->rs = rs;
    rs->put_id = w->put_id;
    return 0;
}

static void w_copy_step(op_t *o);
static void w_copied(void *arg, int rc);

static void w_renewed(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    mc_writer_t *w = o->w;
    if (status >= 0)
        status = w_take_rset(w, body, len);
    if (status < 0 && o->kind == OP_W_OPEN)
        return w_copied(o, revoked(status)); /* revokes and frees the writer */
    if (status < 0)
        return mc__op_finish(o, revoked(status));
    w->renew_at = o->sent_ms + w->lease_ms / 2;
    if (o->u64 > w->capacity)
        w->capacity = o->u64;
    o->cont(o);
}

/*
 * Asks the master to reserve capacity bytes for w (capacity <= what it has:
 * only to renew the write lease), takes the replica set it answers (replicas
 * dropped meanwhile are gone from it), then goes on with cont(o).
 */
static void w_grow(op_t *o, uint64_t capacity, void (*cont)(op_t *))
{
    o->u64 = capacity;
    o->cont = cont;
    o->sent_ms = mc__loop_time(o->s->loop);
    int rc = mcall(o->s, MC__OP_PUT_GROW, w_renewed, o, "qq", o->w->put_id, capacity);
    if (rc < 0 && o->kind == OP_W_OPEN)
        w_copied(o, rc);
    else if (rc < 0)
        mc__op_finish(o, rc);
}

/* Whether w's lease must be renewed before it moves another byte: half of
 * it is gone, so that what it sends now lands well before the master could
 * hand the space to anyone else. */
static int w_stale(const mc_writer_t *w)
{
    return mc__loop_time(w->s->loop) >= w->renew_at;
}

static void w_copied(void *arg, int rc)
{
    op_t *o = arg;
    if (rc < 0) {
        free(o->tmp);
        o->tmp = NULL;
        mcall(o->s, MC__OP_PUT_REVOKE, ignore_reply, NULL, "q", o->w->put_id);
        w_free(o->w);
        return mc__op_finish(o, rc);
    }
    if (o->stage == 1) { /* the chunk was read: write it */
        o->stage = 2;
        uint64_t n = o->obj->st.size - o->w->size;
        if (n > MC__PROTO_CHUNK)
            n = MC__PROTO_CHUNK;
        xfer(o->s, o->w->rs, 1, o->w->size, o->tmp, n, w_copied, o);
        return;
    }
    uint64_t n = o->obj->st.size - o->w->size;
    o->w->size += n > MC__PROTO_CHUNK ? MC__PROTO_CHUNK : n;
    w_copy_step(o);
}

/* Copies the base version into the new one, one chunk at a time. */
static void w_copy_step(op_t *o)
{
    mc_writer_t *w = o->w;
    if (w->size >= o->obj->st.size) {
        free(o->tmp);
        o->tmp = NULL;
        *o->w_out = w;
        return mc__op_finish(o, 0);
    }
    if (w_stale(w))
        return w_grow(o, w->capacity, w_copy_step);
    uint64_t n = o->obj->st.size - w->size;
    if (n > MC__PROTO_CHUNK)
        n = MC__PROTO_CHUNK;
    o->stage = 1;
    xfer(o->s, o->obj->rs, 0, w->size, o->tmp, n, w_copied, o);
}

static void w_started(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    if (status < 0)
        return mc__op_finish(o, status);
    mc_writer_t *w = calloc(1, sizeof(*w));
    const char *rest;
    uint32_t rl;
    if (!w)
        return mc__op_finish(o, -ENOMEM);
    w->s = o->s;
    w->put_flags = o->po.flags;
    w->mode = o->po.mode;
    w->key = malloc(o->klen + 1);
    if (!w->key || mc__unpack(body, len, "qq*", &w->put_id, &w->lease_ms, &rest, &rl) < 0 ||
        w_take_rset(w, rest, rl) < 0) {
        free(w->key);
        free(w);
        return mc__op_finish(o, -EIO);
    }
    memcpy(w->key, o->key, o->klen);
    w->key[o->klen] = '\0';
    w->klen = o->klen;
    w->renew_at = o->sent_ms + w->lease_ms / 2;
    LINK(&o->s->writers, w);
    o->w = w;
    if (!o->obj) {
        *o->w_out = w;
        return mc__op_finish(o, 0);
    }
    w->capacity = o->obj->st.size;
    if (!o->po.mode)
        w->mode = o->obj->st.mode;
    o->tmp = malloc(MC__PROTO_CHUNK);
    if (!o->tmp) {
        w_copied(o, -ENOMEM);
        return;
    }
    w_copy_step(o);
}

static void w_op_done(void *arg, int rc)
{
    op_t *o = arg;
    mc_writer_t *w = o->w;
    if (rc >= 0 && o->kind == OP_W_WRITE) {
        if (o->off + o->len > w->size)
            w->size = o->off + o->len;
        rc = (int)o->len;
    }
    if (rc >= 0 && o->kind == OP_W_TRUNC) {
        w->size = o->off;
        rc = 0;
    }
    mc__op_finish(o, rc);
}

static void w_have_space(op_t *o);

static void w_gap_filled(void *arg, int rc)
{
    op_t *o = arg;
    if (rc < 0)
        return mc__op_finish(o, rc);
    o->w->size = o->off; /* the hole is zeros now */
    w_have_space(o);
}

/* Space is reserved up to at least the end: fill any gap, then do the op. */
static void w_have_space(op_t *o)
{
    mc_writer_t *w = o->w;
    if (o->stage == 0 && o->off > w->size) {
        /* A hole reads as zeros: write them first. */
        o->stage = 1;
        xfer(o->s, w->rs, 1, w->size, NULL, o->off - w->size, w_gap_filled, o);
        return;
    }
    if (o->kind == OP_W_TRUNC)
        return w_op_done(o, 0);
    xfer(o->s, w->rs, 1, o->off, o->buf, o->len, w_op_done, o);
}

/* Makes room for [.., end) in w (asking the master for more space, with
 * headroom so that streaming writes ask rarely; renewing the lease when it
 * is half gone), then continues the op. */
static void w_reserve(op_t *o, uint64_t end)
{
    mc_writer_t *w = o->w;
    if (end <= w->capacity)
        return w_stale(w) ? w_grow(o, w->capacity, w_have_space) : w_have_space(o);
    uint64_t step = w->capacity < WRITER_MAX_STEP ? w->capacity : WRITER_MAX_STEP;
    if (step < (1 << 20))
        step = 1 << 20;
    w_grow(o, end > w->capacity + step ? end : w->capacity + step, w_have_space);
}

static void w_read(op_t *o)
{
    mc_writer_t *w = o->w;
    uint64_t n = o->off < w->size ? w->size - o->off : 0;
    o->u64 = n < o->len ? n : o->len;
    xfer(o->s, w->rs, 0, o->off, o->buf, o->u64, read_done, o);
}

static void w_committed(void *arg, int status, const char *body, size_t len)
{
    op_t *o = arg;
    const char *p = body;
    size_t n = len;
    mc_stat_t st;
    if (status >= 0 && mc__take_stat(&p, &n, &st) < 0)
        status = -EIO;
    if (status >= 0 && o->st)
        *o->st = st;
    rc_drop(o->s->rm, o->w->key, o->w->klen, NULL);
    w_free(o->w);
    mc__op_finish(o, status < 0 ? revoked(status) : 0);
}

/* ---- dispatch ---- */

void mc__remote_exec(op_t *o)
{
    mc_store_t *s = o->s;
    int rc = 0;
    switch (o->kind) {
    case OP_PUT:
        return remote_put(o);
    case OP_GET:
        rc = remote_get(o);
        break;
    case OP_STAT:
        rc = mcall(s, MC__OP_STAT, simple_done, o, "k", o->key, (uint32_t)o->klen);
        break;
    case OP_LOOKUP:
        rc = mcall(s, MC__OP_LOOKUP, simple_done, o, "ku", o->key, (uint32_t)o->klen,
                   (uint32_t)o->delim);
        break;
    case OP_REMOVE:
        rc = mcall(s, MC__OP_REMOVE, simple_done, o, "ku", o->key, (uint32_t)o->klen, o->flags);
        break;
    case OP_RENAME:
        rc = mcall(s, MC__OP_RENAME, simple_done, o, "kku", o->key, (uint32_t)o->klen, o->key2,
                   (uint32_t)o->klen2, o->flags);
        break;
    case OP_LIST:
        rc = mcall(s, MC__OP_LIST, simple_done, o, "ssuu", o->key, (uint32_t)o->klen, o->key2,
                   (uint32_t)o->klen2, (uint32_t)o->delim, (uint32_t)(o->max ? o->max : 1000));
        break;
    case OP_SET_META:
        rc = mcall(s, MC__OP_SET_META, simple_done, o, "kuui", o->key, (uint32_t)o->klen, o->flags,
                   o->po.mode, o->po.mtime_ns);
        break;
    case OP_STATFS:
        rc = mcall(s, MC__OP_STATFS, simple_done, o, "");
        break;
    case OP_MASTER_STATS:
        rc = mcall(s, MC__OP_STATS, simple_done, o, "");
        break;
    case OP_OPEN:
        rc = mcall(s, MC__OP_OPEN, open_done, o, "k", o->key, (uint32_t)o->klen);
        break;
    case OP_OBJ_READ:
        return read_range(o, o->obj->rs, o->obj->st.size);
    case OP_OBJ_CLOSE:
        mcall(s, MC__OP_CLOSE, ignore_reply, NULL, "q", o->obj->rid);
        UNLINK(&s->objs, o->obj);
        mc__rset_free(o->obj->rs);
        free(o->obj);
        return mc__op_finish(o, 0);
    case OP_W_OPEN:
        o->sent_ms = mc__loop_time(s->loop);
        rc = mcall(s, MC__OP_PUT_START, w_started, o, "kquuuuqis", o->key, (uint32_t)o->klen,
                   (uint64_t)(o->obj ? o->obj->st.size : 0), o->po.flags, o->po.mode,
                   o->po.replica_num, o->po.pin, o->po.soft_pin_ttl_ms, o->po.mtime_ns,
                   o->po.preferred_segment ? o->po.preferred_segment : "",
                   (uint32_t)(o->po.preferred_segment ? strlen(o->po.preferred_segment) : 0));
        break;
    case OP_W_WRITE:
        if (o->off + o->len < o->off)
            return mc__op_finish(o, -EFBIG);
        return w_reserve(o, o->off + o->len);
    case OP_W_READ:
        /* Its own bytes, as long as the space is still its own. */
        return w_stale(o->w) ? w_grow(o, o->w->capacity, w_read) : w_read(o);
    case OP_W_TRUNC:
        if (o->off <= o->w->size) {
            o->w->size = o->off;
            return mc__op_finish(o, 0);
        }
        return w_reserve(o, o->off);
    case OP_W_COMMIT: {
        mc_writer_t *w = o->w;
        rc = mcall(s, MC__OP_PUT_COMMIT, w_committed, o, "qkqui", w->put_id, w->key,
                   (uint32_t)w->klen, w->size, w->mode, w->mtime_set ? w->mtime_ns : 0);
        if (rc < 0) {
            mcall(s, MC__OP_PUT_REVOKE, ignore_reply, NULL, "q", w->put_id);
            w_free(w);
        }
        break;
    }
    case OP_W_ABORT:
        mcall(s, MC__OP_PUT_REVOKE, ignore_reply, NULL, "q", o->w->put_id);
        w_free(o->w);
        return mc__op_finish(o, 0);
    }
    if (rc < 0)
        mc__op_finish(o, rc);
}

/* Sets the key a remote writer publishes under (loop thread). */
int mc__remote_writer_set_key(mc_writer_t *w, const char *key, size_t klen)
{
    char *k = malloc(klen + 1);
    if (!k)
        return -ENOMEM;
    memcpy(k, key, klen);
    k[klen] = '\0';
    free(w->key);
    w->key = k;
    w->klen = klen;
    return 0;
}

/* ---- the node role, and opening ---- */

static int seg_lookup(void *arg, uint32_t seg, char **base, uint64_t *size, int *fd)
{
    mc_store_t *s = arg;
    if (!s->rm || seg != s->rm->seg_id || !s->seg)
        return -ENOENT;
    *base = s->seg;
    *size = s->seg_size;
    *fd = s->seg_fd;
    return 0;
}

static void opened(struct mc__remote *rm, int rc)
{
    if (rm->open_done) {
        void (*done)(mc_store_t *, int) = rm->open_done;
        rm->open_done = NULL;
        done(rm->s, rc);
    }
}

static void mount_segment(struct mc__remote *rm);

static void mounted(void *arg, int status, const char *body, size_t len)
{
    struct mc__remote *rm = arg;
    uint32_t seg;
    rm->mounting = 0;
    if (status >= 0 && mc__unpack(body, len, "u", &seg) < 0)
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
        return opened(rm, status);
    }
    if (rm->seg_id && rm->seg_id != seg)
        mc__log(MC__LOG_INFO, "segment mounted again as %u (was %u)", seg, rm->seg_id);
    rm->seg_id = seg;
    rm->own_seg = 1;
    opened(rm, 0);
}

static void mount_segment(struct mc__remote *rm)
{
    const char *addr = mc__server_addr(rm->srv);
    rm->mounting = 1;
    mc_store_t *s = rm->s;
    int rc = mcall(s, MC__OP_MOUNT_SEGMENT, mounted, rm, "qusqs", rm->node_id, rm->seg_id, addr,
                   (uint32_t)strlen(addr), s->seg_size, s->rdma_rec ? s->rdma_rec : "",
                   (uint32_t)s->rdma_rec_len);
    if (rc < 0) {
        rm->mounting = 0;
        opened(rm, rc);
    }
}

/* ---- repair tasks (the node role) ----
 *
 * The master asks this node, through a flag on the heartbeat reply, to copy
 * under-replicated objects into space it allocated on our segment
 * (repair.h). A task reads 4 MiB pieces from a surviving replica (xfer():
 * failover, any transport) and copies each into our segment, but never
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
        mcall(t->s, MC__OP_REPAIR_DONE, ignore_reply, NULL, "qqi", rm->node_id, t->id, (int64_t)rc);
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
    /* Our own segment: a memcpy, done before xfer() returns. */
    xfer(t->s, t->dst, 1, t->at, t->buf, t->n, rt_written, t);
}

static void rt_step(void *arg)
{
    rtask_t *t = arg;
    if (!t->rm)
        return rt_free(t);
    if (t->at >= t->size)
        return rt_finish(t, 0);
    t->n = t->size - t->at < MC__PROTO_CHUNK ? t->size - t->at : MC__PROTO_CHUNK;
    xfer(t->s, t->src, 0, t->at, t->buf, t->n, rt_read, t);
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
    int rc = rset_take(&rest, &left, &t->dst);
    if (rc == 0)
        rc = rset_take(&rest, &left, &t->src);
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
    uint32_t flags;
    if (status < 0 || mc__unpack(body, len, "u", &flags) < 0)
        return; /* the master is away: the next beat tries again */
    if (flags & MC__HB_REMOUNT) {
        for (rtask_t *t = rm->tasks; t; t = t->next)
            t->cancelled = 1;
    }
    if ((flags & MC__HB_REPAIR) && !rm->taking && rm->seg_id) {
        rm->take_at = mc_loop_now_ms();
        rm->taking = mcall(rm->s, MC__OP_REPAIR_TAKE, repair_taken, rm, "q", rm->node_id) == 0;
    }
    if ((flags & MC__HB_REMOUNT) && !rm->mounting) {
        mc__log(MC__LOG_INFO, "the master does not know this node: mounting the segment again");
        mount_segment(rm);
    }
}

static void on_beat(mc_timer_t *t)
{
    struct mc__remote *rm = t->data;
    mcall(rm->s, MC__OP_HEARTBEAT, beat_done, rm, "q", rm->node_id);
}

static void pinged(void *arg, int status, const char *body, size_t len)
{
    opened(arg, status < 0 ? status : 0);
}

int mc__remote_open(mc_store_t *s, const char *addr, const char *listen,
                    void (*done)(mc_store_t *s, int rc))
{
    mc__addr_t ma, la;
    int rc = mc__addr_parse(addr, 50051, &ma);
    if (rc < 0)
        return rc;
    if (s->seg && (rc = mc__addr_parse(listen ? listen : "127.0.0.1:0", 0, &la)) < 0)
        return rc;
    struct mc__remote *rm = calloc(1, sizeof(*rm));
    if (!rm)
        return -ENOMEM;
    rm->s = s;
    rm->open_done = done;
    if (getrandom(&rm->node_id, sizeof(rm->node_id), 0) != sizeof(rm->node_id) || !rm->node_id)
        rm->node_id = (uint64_t)mc_loop_now_ms() * 2654435761u | 1;
    rc = mc__link_rpc_new(s->loop, &ma, s->timeout_ms, &master_ops, rm, &rm->master);
    if (rc < 0) {
        free(rm);
        return rc;
    }
    s->rm = rm;
    if (s->seg) {
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
    rc = mcall(s, MC__OP_PING, pinged, rm, "");
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
    rm->own_seg = s->seg != NULL;
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
    while (rm->peers) {
        peer_t *p = rm->peers;
        rm->peers = p->next;
        mc__rpc_client_close(p->cl);
        if (p->shm_cl)
            mc__rpc_client_close(p->shm_cl);
        p->shm_cl = NULL;
        shm_unmap_all(p);
        if (p->rc)
            mc__rdma_close(p->rc); /* pending pieces and a connect get -ECANCELED */
        p->rc = NULL;
        if (p->shm_pending || p->rdma_pending)
            p->zombie = 1; /* shm_mapped() or rdma_settled() frees it */
        else
            peer_free(p);
    }
    while (rm->tasks) { /* their next step frees them */
        rtask_t *t = rm->tasks;
        rm->tasks = t->next;
        t->rm = NULL;
    }
    mc__link_close(rm->master);
    rc_clear(rm);
    free(rm->rc_tab);
    free(rm);
    if (done)
        done(s);
}

static void unmounted(void *arg, int status, const char *body, size_t len)
{
    remote_free(arg);
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
    mc_timer_stop(&rm->hb);
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
        if (mc__link_call(rm->master, MC__OP_UNMOUNT_SEGMENT, body, w.len, t, unmounted, rm) == 0)
            return;
    }
    remote_free(rm);
}
