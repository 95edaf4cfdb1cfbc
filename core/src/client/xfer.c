/*
 * xfer.c - replica sets, and transfers between a buffer and the replicas of
 * an object (remote_i.h).
 *
 * Data moves in pieces of at most MC__PROTO_CHUNK bytes, all pieces of a
 * transfer issued at once (over TCP, those past a connection's window of
 * bytes in flight wait in the rpc layer, rpc.h): writes go to every replica,
 * reads to one and fail over to the next. Each replica's pieces take the transport
 * mc__peer_route() picks (transport/transport.h): memcpy into our own
 * segment or a co-located node's mapped one, RDMA, or TCP; a transfer that
 * must first wait for a mapping or an RDMA connection is parked on the
 * peer (mc__peer_wait()). A write that could not reach a replica's node
 * while another replica took every byte drops that replica. A put made in
 * one call (mc__link_put()) copies into our own segment on the spot, with
 * the same pieces, through mc__xfer_write_own().
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/remote_i.h"
#include "runtime/log.h"

/* ---- replica sets ---- */

void mc__rset_free(mc__rset_t *rs)
{
    while (rs && !--rs->refs) {
        mc__rset_t *newer = rs->newer; /* its reference goes with it */
        for (uint32_t i = 0; i < rs->n; i++)
            free(rs->r[i].desc);
        free(rs); /* the extents live in the same block */
        rs = newer;
    }
}

/* Marks segment seg's replica dead in rs and in every set that replaced
 * it since. */
static void rset_drop(mc__rset_t *rs, uint32_t seg)
{
    for (; rs; rs = rs->newer)
        for (uint32_t i = 0; i < rs->n; i++)
            if (rs->r[i].seg == seg)
                rs->r[i].dead = 1;
}

void mc__rset_replace(mc__rset_t *old, mc__rset_t *rs)
{
    if (!old)
        return;
    old->newer = rs; /* a set is replaced once: its holder drops it now */
    rs->refs++;
    for (uint32_t i = 0; i < old->n; i++)
        if (old->r[i].dead)
            rset_drop(rs, old->r[i].seg);
}

int mc__rset_take(const char **p, size_t *n, mc__rset_t **out)
{
    mc__wire_replica_t w[MC__MAX_REPLICAS];
    int cnt = mc__take_replicas(p, n, w, MC__MAX_REPLICAS);
    if (cnt < 0)
        return -EIO;
    /* One block: the set, its replicas, then every replica's extents (a
     * put's set is decoded on every put: one allocation, nothing zeroed
     * that is written next). */
    size_t next = 0;
    for (int i = 0; i < cnt; i++)
        next += w[i].next;
    size_t head = sizeof(mc__rset_t) + sizeof(struct rrep) * (size_t)cnt;
    head = (head + _Alignof(mc__extent_t) - 1) / _Alignof(mc__extent_t) * _Alignof(mc__extent_t);
    mc__rset_t *rs = malloc(head + sizeof(mc__extent_t) * next);
    if (!rs)
        return -ENOMEM;
    rs->n = 0;
    rs->refs = 1;
    rs->put_id = 0;
    rs->newer = NULL;
    mc__extent_t *ext = (mc__extent_t *)((char *)rs + head);
    for (int i = 0; i < cnt; i++) {
        struct rrep *r = &rs->r[i];
        r->seg = w[i].seg;
        r->epoch = w[i].epoch;
        size_t al = w[i].addr_len < MC__ADDR_STRLEN - 1 ? w[i].addr_len : MC__ADDR_STRLEN - 1;
        memcpy(r->addr, w[i].addr, al);
        r->addr[al] = '\0';
        r->rdma_addr[0] = '\0';
        r->desc = NULL;
        r->dead = 0;
        if (w[i].rdma_len && mc__rdma_record_unpack(w[i].rdma, w[i].rdma_len, r->rdma_addr,
                                                    sizeof(r->rdma_addr), &r->desc) < 0) {
            mc__log(MC__LOG_WARN, "%s: malformed RDMA record for segment %u: using TCP", r->addr,
                    r->seg);
            r->desc = NULL;
        }
        r->next = w[i].next;
        r->ext = ext;
        for (uint32_t e = 0; e < w[i].next; e++)
            mc__wire_extent(&w[i], e, &r->ext[e].off, &r->ext[e].len);
        ext += w[i].next;
        rs->n = (uint32_t)i + 1;
    }
    *out = rs;
    return 0;
}

int mc__rset_run(const mc__rset_t *rs, uint64_t off, uint64_t *start, uint64_t *end)
{
    const struct rrep *r = rs && rs->n ? &rs->r[0] : NULL; /* every replica has the holes */
    uint64_t at = 0;
    int hole = 1;
    *start = 0;
    for (uint32_t e = 0; r && e < r->next; e++) {
        int h = r->ext[e].off == MC__HOLE;
        if (h != hole || e == 0)
            *start = at; /* a run of this kind starts here */
        hole = h;
        at += r->ext[e].len;
        if (at <= off)
            continue;
        /* off lies in this run: find where it ends */
        while (e + 1 < r->next && (r->ext[e + 1].off == MC__HOLE) == hole)
            at += r->ext[++e].len;
        *end = at;
        return hole;
    }
    if (!hole || !r || !r->next)
        *start = at; /* past the extents: a hole without an end */
    *end = UINT64_MAX;
    return 1;
}

/* ---- transfers ---- */

/* A piece in flight on an asynchronous transport. */
typedef struct piece {
    xfer_t *x;
    uint32_t r; /* the replica */
    struct peer *p;
    const mc__transport_t *tp;
    mc__tp_ep_t ep;
    struct mc__ubuf *ub; /* zero copy: the caller's registered buffer, or NULL */
    uint32_t len;
} piece_t;

static void xfer_end(xfer_t *x);
static void xfer_replica(xfer_t *x, uint32_t r);
static int fault_copy_result(const xfer_t *x);

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
    case ECANCELED: /* its connection was closed under it: another piece on it timed out */
        return 1;
    default:
        return 0;
    }
}

/*
 * The end of a write: the first error, or 0. Replicas whose node could not
 * be reached while another replica took every byte are dropped (marked dead
 * in the set and in the sets that replaced it since, and PUT_DROP_REPLICA
 * to the master, which sends the request before any later call of this
 * writer): the put goes on with the others, and the master restores the
 * count later (repair.h). A replica that missed a write is never read
 * again for this version, even if its node answers again.
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
        rset_drop(rs, rs->r[r].seg); /* and where a grow since listed it still */
        mc__mcall(x->s, MC__OP_PUT_DROP_REPLICA, mc__ignore_reply, NULL, "qu", rs->put_id,
                  rs->r[r].seg);
    }
    return 0;
}

/* Counts n bytes moved by tp in s's counters of it. */
static void tp_count(mc_store_t *s, const mc__transport_t *tp, uint64_t n)
{
    mc__count((uint64_t *)((char *)&s->st + tp->ops_stat),
              (uint64_t *)((char *)&s->st + tp->bytes_stat), n);
}

static void piece_done(void *arg, int status)
{
    piece_t *pc = arg;
    xfer_t *x = pc->x;
    if (pc->ub)
        pc->ub->users--;
    if (status >= 0) {
        tp_count(x->s, pc->tp, pc->len);
        if (pc->ub)
            mc__bump(&x->s->st.rdma_zero_copy_bytes, pc->len);
    } else if (status == -ESTALE && x->write) {
        mc__bump(&x->s->st.writes_fenced, 1);
    } else if (x->s->rm) {
        mc__peer_piece_failed(pc->p, pc->tp, &pc->ep, status);
    }
    xfer_fail(x, pc->r, status);
    x->pending--;
    free(pc);
    xfer_end(x);
}

/* ---- epochs (wire/proto.h, "Segment epochs") ---- */

/* Raises segment seg's epoch to epoch in rs and in every set that
 * replaced it since. */
static void rset_epoch(mc__rset_t *rs, uint32_t seg, uint64_t epoch)
{
    for (; rs; rs = rs->newer)
        for (uint32_t i = 0; i < rs->n; i++)
            if (rs->r[i].seg == seg && rs->r[i].epoch < epoch)
                rs->r[i].epoch = epoch;
}

typedef struct refresh {
    xfer_t *x;
    uint32_t r;
} refresh_t;

static void epoch_got(void *arg, int status, const char *body, size_t len)
{
    refresh_t *rf = arg;
    xfer_t *x = rf->x;
    uint64_t epoch;
    if (status >= 0 && mc__unpack(body, len, "q", &epoch) == 0) {
        rset_epoch((mc__rset_t *)x->rs, x->rs->r[rf->r].seg, epoch);
        x->rerr[rf->r] = 0;
        x->redo |= 1u << rf->r;
    } else {
        mc__log(MC__LOG_INFO, "%s: a write refused for an old epoch, and none newer: %s",
                x->rs->r[rf->r].addr, mc_strerror(status < 0 ? status : -EBADMSG));
    }
    free(rf);
    x->pending--;
    xfer_end(x);
}

/*
 * The replicas whose node refused x's pieces for an old epoch: the master
 * raised it, fencing out a write that ended there. A write that goes on
 * asks for the epoch now (PUT_EPOCH; a write that ended gets -ENOENT and
 * fails) and sends those replicas' pieces again, a few rounds at most.
 * Whether it asked.
 */
static int xfer_refresh(xfer_t *x)
{
    /* A fault's late copy (MC__XFER_LATE_COPY) stands for bytes sent before: it
     * keeps the epoch it has. */
    if (!x->write || !x->rs->put_id || x->refreshes >= 3 || x->delayed == MC__XFER_LATE_COPY)
        return 0;
    int asked = 0;
    for (uint32_t r = 0; r < x->rs->n; r++) {
        if (x->rerr[r] != -ESTALE || x->rs->r[r].dead)
            continue;
        refresh_t *rf = malloc(sizeof(*rf));
        if (!rf)
            break;
        *rf = (refresh_t){x, r};
        if (mc__mcall(x->s, MC__OP_PUT_EPOCH, epoch_got, rf, "qu", x->rs->put_id, x->rs->r[r].seg) <
            0) {
            free(rf);
            break;
        }
        x->pending++;
        asked = 1;
    }
    x->refreshes += asked;
    return asked;
}

/* Sends again the pieces of the replicas xfer_refresh() refreshed.
 * Whether there were any. */
static int xfer_redo(xfer_t *x)
{
    uint32_t redo = x->redo;
    if (!redo)
        return 0;
    x->redo = 0;
    x->issuing = 1;
    for (uint32_t r = 0; r < x->rs->n; r++)
        if (redo & (1u << r) && !x->rs->r[r].dead)
            xfer_replica(x, r);
    x->issuing = 0;
    return 1;
}

static void xfer_end(xfer_t *x)
{
    if (x->pending || x->issuing)
        return;
    if (xfer_redo(x)) {
        xfer_end(x);
        return;
    }
    if (xfer_refresh(x))
        return;
    if (x->err && !x->write && x->replica + 1 < x->rs->n) {
        mc__log(MC__LOG_INFO, "read from %s failed (%s): trying the next replica",
                x->rs->r[x->replica].addr, mc_strerror(x->err));
        x->replica++;
        x->err = 0;
        mc__xfer_step(x);
        return;
    }
    int rc = x->delayed == MC__XFER_LATE_COPY ? fault_copy_result(x)
             : x->write                       ? xfer_write_result(x)
                                              : x->err;
    void (*done)(void *, int) = x->done;
    void *arg = x->arg;
    mc_store_t *s = x->s;
    mc__rset_free((mc__rset_t *)x->rs);
    free(x);
    done(arg, rc);
    mc__store_release(s); /* may free s (closed on its loop's thread) */
}

/* Starts piece p of x on replica r (node peer) over tp. Returns 0 or
 * -errno (nothing started). */
static int xfer_piece(xfer_t *x, uint32_t r, struct peer *peer, const mc__transport_t *tp,
                      const mc__tp_ep_t *ep, mc__tp_piece_t *p)
{
    mc_store_t *s = x->s;
    if (tp->flags & MC__TP_SYNC) {
        int rc = tp->move(ep, p, NULL, NULL);
        if (rc >= 0)
            tp_count(s, tp, p->len);
        else if (rc == -ESTALE && p->write) /* a mapped segment's fence, or our own
                                                segment, refused it */
            mc__bump(&s->st.writes_fenced, 1);
        return rc;
    }
    piece_t *pc = malloc(sizeof(*pc));
    if (!pc)
        return -ENOMEM;
    *pc = (piece_t){.x = x, .r = r, .p = peer, .tp = tp, .ep = *ep, .len = p->len};
    /* Zero copy when the piece lies in a buffer the caller registered: the
     * NIC moves the caller's bytes itself. */
    struct mc__ubuf *ub =
        (tp->flags & MC__TP_ZERO_COPY) && p->buf ? mc__ubuf_find(s, p->buf, p->len) : NULL;
    if (ub && ub->mr) {
        pc->ub = ub;
        ub->users++;
        p->mr = ub->mr;
    }
    int rc = tp->move(ep, p, piece_done, pc);
    if (rc < 0) {
        if (pc->ub)
            pc->ub->users--;
        free(pc);
        return rc;
    }
    x->pending++;
    return 0;
}

/* Issues the pieces of [x->off, x->off + x->len) on replica r, whose
 * extents ext[0..next) are in segment seg, over tp and ep; the first error
 * goes to *err and ends it. */
static void xfer_extents(xfer_t *x, uint32_t r, struct peer *peer, const mc__transport_t *tp,
                         const mc__tp_ep_t *ep, uint32_t seg, uint64_t epoch,
                         const mc__extent_t *ext, uint32_t next, int *err)
{
    uint64_t at = 0, end = x->off + x->len;
    for (uint32_t e = 0; e < next && at < end && !*err; e++) {
        const mc__extent_t *ex = &ext[e];
        uint64_t lo = x->off > at ? x->off : at;
        uint64_t hi = end < at + ex->len ? end : at + ex->len;
        if (ex->off == MC__HOLE) { /* no bytes anywhere: reads as zeros, a write has none */
            if (!x->write && x->buf && lo < hi)
                memset(x->buf + (lo - x->off), 0, hi - lo);
            at += ex->len;
            continue;
        }
        for (uint64_t p = lo; p < hi && !*err;) {
            uint32_t n = (uint32_t)(hi - p < MC__PROTO_CHUNK ? hi - p : MC__PROTO_CHUNK);
            mc__tp_piece_t pc = {.write = x->write,
                                 .buf = x->buf ? x->buf + (p - x->off) : NULL,
                                 .seg = seg,
                                 .epoch = epoch,
                                 .off = ex->off + (p - at),
                                 .len = n,
                                 .timeout_ms = x->s->timeout_ms};
            int rc = xfer_piece(x, r, peer, tp, ep, &pc);
            if (rc < 0)
                *err = rc;
            p += n;
        }
        at += ex->len;
    }
}

/* ---- fault injection ---- */

/* What MC_FAULT_XFER asks for (mc__fault_load()). */
struct mc__fault {
    uint64_t off;               /* the object offset a failing transfer starts at */
    int err;                    /* its error, positive (0: none, only a delay) */
    uint64_t delay_ms;          /* held back this long before it starts (0: not) */
    char addr[MC__ADDR_STRLEN]; /* only on the replica of the node serving here ("": all) */
};

/* Parses one "name=value" of MC_FAULT_XFER into f. Returns 0 or -EINVAL. */
static int fault_field(struct mc__fault *f, const char *name, const char *val)
{
    char *end;
    errno = 0;
    if (!strcmp(name, "addr") && strlen(val) < sizeof(f->addr)) {
        strcpy(f->addr, val);
        return 0;
    }
    unsigned long long v = strtoull(val, &end, 0);
    if (errno || end == val || *end)
        return -EINVAL;
    if (!strcmp(name, "off"))
        f->off = v;
    else if (!strcmp(name, "err") && v > 0 && v < 4096)
        f->err = (int)v;
    else if (!strcmp(name, "delay") && v > 0 && v <= 60000)
        f->delay_ms = v;
    else
        return -EINVAL;
    return 0;
}

int mc__fault_load(mc_store_t *s)
{
    const char *spec = getenv(MC__FAULT_ENV);
    if (!spec || !*spec)
        return 0;
    struct mc__fault *f = calloc(1, sizeof(*f));
    char *copy = strdup(spec), *save = NULL;
    int rc = f && copy ? 0 : -ENOMEM;
    for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t && !rc;
         t = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(t, '=');
        if (!eq)
            rc = -EINVAL;
        else
            *eq = '\0', rc = fault_field(f, t, eq + 1);
    }
    free(copy);
    if (!rc && !f->err && !f->delay_ms)
        rc = -EINVAL;
    if (rc < 0) {
        mc__log(MC__LOG_ERROR, "%s='%s': %s (want off=N,err=ERRNO|delay=MS[,addr=HOST:PORT])",
                MC__FAULT_ENV, spec, mc_strerror(rc));
        free(f);
        return rc;
    }
    mc__log(MC__LOG_WARN,
            "%s: write transfers at offset %llu are held back %llu ms, then fail with %s",
            MC__FAULT_ENV, (unsigned long long)f->off, (unsigned long long)f->delay_ms,
            f->err ? mc_strerror(-f->err) : "nothing");
    s->fault = f;
    return 0;
}

/* Whether MC_FAULT_XFER is about x: a write of bytes at its offset (not
 * the copy fault_delays() sends). */
static int fault_on(const xfer_t *x)
{
    const struct mc__fault *f = x->s->fault;
    return f && x->write && x->buf && x->off == f->off && x->delayed != MC__XFER_LATE_COPY;
}

/* Whether MC_FAULT_XFER aims at replica rep (its addr=, or every one). */
static int fault_aims(const xfer_t *x, const struct rrep *rep)
{
    const struct mc__fault *f = x->s->fault;
    return f && (!f->addr[0] || !strcmp(f->addr, rep->addr));
}

/* The error x gets on replica rep from MC_FAULT_XFER, or 0. */
static int fault_hit(const xfer_t *x, const struct rrep *rep)
{
    const struct mc__fault *f = x->s->fault;
    if (!fault_on(x) || !f->err)
        return 0;
    return fault_aims(x, rep) ? -f->err : 0;
}

/* A transfer MC_FAULT_XFER holds back: its bytes are still on their way. */
typedef struct fault_delay {
    mc_timer_t t; /* first */
    xfer_t *x;
} fault_delay_t;

static void fault_resume(mc_timer_t *t)
{
    fault_delay_t *d = (fault_delay_t *)t;
    xfer_t *x = d->x;
    free(d);
    mc__xfer_step(x);
}

/* How a fault's late copy ended: the first error of a replica it went to
 * (fault_aims()), or 0. */
static int fault_copy_result(const xfer_t *x)
{
    for (uint32_t r = 0; r < x->rs->n; r++)
        if (fault_aims(x, &x->rs->r[r]) && x->rerr[r])
            return x->rerr[r];
    return x->err;
}

static void fault_copy_landed(void *arg, int rc)
{
    mc__log(MC__LOG_WARN, "MC_FAULT_XFER: the late copy reached the node: %s",
            rc < 0 ? mc_strerror(rc) : "written");
    free(arg);
}

/* A copy of write x's bytes (MC__XFER_LATE_COPY), or NULL. */
static xfer_t *fault_copy(const xfer_t *x)
{
    xfer_t *g = calloc(1, sizeof(*g));
    char *copy = malloc(x->len);
    if (!g || !copy) {
        free(g);
        free(copy);
        return NULL;
    }
    memcpy(copy, x->buf, x->len);
    *g = (xfer_t){.s = x->s,
                  .rs = x->rs,
                  .write = 1,
                  .off = x->off,
                  .len = x->len,
                  .buf = copy,
                  .delayed = MC__XFER_LATE_COPY,
                  .done = fault_copy_landed,
                  .arg = copy};
    ((mc__rset_t *)x->rs)->refs++;
    mc__store_hold(x->s);
    return g;
}

/*
 * MC_FAULT_XFER's delay, once for x: x is held back that long. With an
 * error as well, x fails at once (fault_hit()) and a copy of its bytes goes
 * out after the delay all the same: a node that takes them after the
 * writer gave up on them. Whether x itself waits.
 */
static int fault_delays(xfer_t *x)
{
    if (x->delayed || !fault_on(x) || !x->s->fault->delay_ms)
        return 0;
    x->delayed = MC__XFER_HELD;
    xfer_t *held = x->s->fault->err ? fault_copy(x) : x;
    fault_delay_t *d = held ? calloc(1, sizeof(*d)) : NULL;
    if (d) {
        d->x = held;
        if (mc_timer_start(x->s->loop, &d->t, x->s->fault->delay_ms, 0, fault_resume) == 0)
            return held == x;
    }
    free(d);
    if (held && held != x) {
        held->err = -ENOMEM;
        xfer_end(held);
    }
    return 0;
}

/* Issues the pieces of [x->off, x->off + x->len) on replica r. */
static void xfer_replica(xfer_t *x, uint32_t r)
{
    const struct rrep *rep = &x->rs->r[r];
    int *err = x->write ? &x->rerr[r] : &x->err; /* this replica's error */
    const mc__transport_t *tp;
    struct peer *peer;
    mc__tp_ep_t ep;
    int rc = fault_hit(x, rep);
    if (rc < 0) {
        *err = rc;
        return;
    }
    rc = mc__peer_route(x->s, rep, &tp, &peer, &ep);
    if (rc < 0) {
        *err = rc;
        return;
    }
    xfer_extents(x, r, peer, tp, &ep, rep->seg, rep->epoch, rep->ext, rep->next, err);
}

int mc__xfer_write_own(mc_store_t *s, const mc__replica_t *rep, uint32_t nrep, const char *buf,
                       uint64_t len)
{
    const mc__transport_t *tp;
    mc__tp_ep_t ep;
    for (uint32_t r = 0; r < nrep; r++)
        if (!mc__peer_own(s, rep[r].seg, &tp, &ep))
            return -EREMOTE;
    /* The local transport is synchronous: xfer_piece() moves each piece
     * before it returns and never keeps x, and these are the fields that
     * xfer_extents() reads (set one by one: zeroing the whole transfer
     * cost a 1 KiB put more than its copy). */
    xfer_t x;
    x.s = s;
    x.write = 1;
    x.off = 0;
    x.len = len;
    x.buf = (char *)buf;
    x.err = 0;
    for (uint32_t r = 0; r < nrep && !x.err; r++)
        xfer_extents(&x, r, NULL, tp, &ep, rep[r].seg, 0, rep[r].ext, rep[r].n, &x.err);
    return x.err;
}

/* Whether x must wait for a peer before it issues (mc__peer_wait()). */
static int xfer_parks(xfer_t *x)
{
    for (uint32_t r = x->write ? 0 : x->replica; r < x->rs->n; r++) {
        const struct rrep *rep = &x->rs->r[r];
        if (rep->dead)
            continue;
        if (mc__peer_wait(x, rep))
            return 1;
        if (!x->write)
            break;
    }
    return 0;
}

void mc__xfer_step(xfer_t *x)
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
    if (fault_delays(x))
        return; /* its timer resumes it */
    if (xfer_parks(x))
        return; /* the peer resumes it */
    x->issuing = 1;
    if (x->write) {
        /* A fault's late copy (MC__XFER_LATE_COPY) goes to the replicas the fault
         * failed, dropped ones included: those bytes were on their way. */
        for (uint32_t r = 0; r < x->rs->n; r++)
            if ((x->delayed == MC__XFER_LATE_COPY ? fault_aims(x, &x->rs->r[r])
                                                  : !x->rs->r[r].dead) &&
                !x->rerr[r])
                xfer_replica(x, r);
    } else if (x->rs->r[x->replica].dead) {
        x->err = -EIO;
    } else {
        xfer_replica(x, x->replica);
    }
    x->issuing = 0;
    xfer_end(x);
}

void mc__xfer(mc_store_t *s, const mc__rset_t *rs, int write, uint64_t off, char *buf, uint64_t len,
              void (*done)(void *, int), void *arg)
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
    ((mc__rset_t *)rs)->refs++;
    mc__store_hold(s);
    mc__xfer_step(x);
}
