/*
 * ha.c - a master with standbys on etcd: the election on a lease, the op
 * log's appends (fenced by the leader key) and a standby following the log
 * (see ha.h); the snapshots are in ha_snap.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/log.h"
#include "server/ha_i.h"

static void standby(mc__ha_t *ha);
static void campaign(mc__ha_t *ha);

int mc__ha_leader_key(const char *cluster, char *buf, size_t n)
{
    int l =
        snprintf(buf, n, "%s%s/leader", MC__HA_ROOT, cluster ? cluster : MC__HA_CLUSTER_DEFAULT);
    return l < 0 || (size_t)l >= n ? -ENAMETOOLONG : l;
}

int mc__ha_leading(const mc__ha_t *ha)
{
    return ha->st == ST_LEADER;
}

int mc__ha_writable(const mc__ha_t *ha)
{
    return ha->st == ST_LEADER && !ha->failing && mc_loop_now_ms() < ha->deadline;
}

int mc__ha_arriving(const mc__ha_t *ha)
{
    return ha->st == ST_LEADER && mc_loop_now_ms() < ha->since + REMOUNT_GRACE_MS;
}

void mc__ha_stats(const mc__ha_t *ha, mc__ha_stats_t *st)
{
    *st = (mc__ha_stats_t){.leading = mc__ha_leading(ha),
                           .writable = mc__ha_writable(ha),
                           .entries = ha->taken,
                           .pending = ha->taken - ha->durable,
                           .key = ha->applied};
}

void mc__ha_deposed(mc__ha_t *ha, const char *why)
{
    if (ha->st == ST_DEPOSED)
        return;
    mc__log(MC__LOG_WARN, "no longer the leader (%s): stepping down", why);
    ha->st = ST_DEPOSED;
    if (ha->o.deposed)
        ha->o.deposed(ha->o.arg);
}

/* ---- the lease ---- */

static void on_keepalive(void *arg, int rc, const mc__etcd_res_t *res)
{
    mc__ha_t *ha = arg;
    if (ha->closing)
        return;
    ha->ka_busy = 0;
    (void)res;
    if (rc == 0) {
        ha->deadline = ha->ka_sent + (uint64_t)ha->o.ttl_s * 1000;
        return;
    }
    if (rc != -ENOENT) {
        mc__log(MC__LOG_DEBUG, "etcd keepalive: %s", mc_strerror(rc));
        return;
    }
    ha->lease = 0;
    if (ha->st == ST_LEADER || ha->st == ST_CATCHUP)
        mc__ha_deposed(ha, "the lease expired");
}

static void standby_check(mc__ha_t *ha);

static void on_ka_tick(mc_timer_t *t)
{
    mc__ha_t *ha = t->data;
    if (ha->st == ST_STANDBY && ha->watch && !ha->check_busy)
        standby_check(ha);
    if (!ha->lease || ha->ka_busy || ha->st == ST_DEPOSED)
        return;
    ha->ka_sent = mc_loop_now_ms();
    if (mc__etcd_lease_keepalive(ha->etcd, ha->lease, on_keepalive, ha) == 0)
        ha->ka_busy = 1;
}

/* ---- following the log ---- */

/* The sequence number of log key k, or 0 if k is not one. */
static uint64_t log_seq(const mc__ha_t *ha, const char *k, size_t n)
{
    if (n != ha->lplen + SEQ_DIGITS || memcmp(k, ha->logp, ha->lplen) != 0)
        return 0;
    uint64_t s = 0;
    for (size_t i = ha->lplen; i < n; i++) {
        if (k[i] < '0' || k[i] > '9')
            return 0;
        s = s * 10 + (uint64_t)(k[i] - '0');
    }
    return s;
}

/* Applies log key kv if it is the next one. Returns 0, 1 (a gap: read the
 * log again), or -errno. */
static int apply_kv(mc__ha_t *ha, const mc__etcd_kv_t *kv)
{
    uint64_t s = log_seq(ha, kv->key, kv->klen);
    if (!s || s <= ha->applied)
        return 0;
    if (s != ha->applied + 1 && ha->applied)
        return 1;
    int rc = mc__oplog_apply(ha->view, kv->val, kv->vlen);
    if (rc < 0) {
        mc__log(MC__LOG_ERROR, "op log key %" PRIu64 ": %s", s, mc_strerror(rc));
        return rc;
    }
    ha->applied = s;
    return 0;
}

typedef struct wdrop {
    mc_work_t w;
    mc__etcd_watch_t *watch;
} wdrop_t;

static void cancel_watch(void *arg)
{
    wdrop_t *d = arg;
    mc__etcd_watch_cancel(d->watch);
    free(d);
}

/* Stops following the watch: it is cancelled once the current callback
 * (maybe its own, which must not free it) has returned. */
static void drop_watch(mc__ha_t *ha)
{
    wdrop_t *d = ha->watch ? malloc(sizeof(*d)) : NULL;
    if (!d)
        return; /* none, or leaked rather than freed under its callback */
    d->watch = ha->watch;
    ha->watch = NULL;
    mc_loop_defer(ha->loop, &d->w, cancel_watch, d);
}

static void on_again(mc_timer_t *t)
{
    standby(t->data);
}

static void restart_soon(mc__ha_t *ha)
{
    drop_watch(ha);
    ha->st = ST_STANDBY;
    mc_timer_start(ha->loop, &ha->again, RETRY_MS, 0, on_again);
}

static void on_watch(void *arg, int rc, const mc__etcd_event_t *ev, size_t n, int64_t revision)
{
    mc__ha_t *ha = arg;
    if (ha->closing || !ha->watch)
        return; /* a watch dropped, not yet cancelled */
    (void)revision;
    if (rc < 0) {
        mc__log(MC__LOG_DEBUG, "etcd watch ended: %s", mc_strerror(rc));
        restart_soon(ha);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const mc__etcd_kv_t *kv = &ev[i].kv;
        if (kv->klen == ha->llen && memcmp(kv->key, ha->leader, ha->llen) == 0) {
            if (ev[i].deleted) {
                drop_watch(ha);
                campaign(ha);
                return;
            }
            continue;
        }
        if (!ev[i].deleted && apply_kv(ha, kv) != 0) {
            restart_soon(ha);
            return;
        }
    }
}

/* A standby's watch can go silent without ending: the etcd member it
 * reads from stopped, hung or was cut off while its connection stays open
 * (nothing comes, not even an error). So a standby reads the leader key
 * itself every third of the TTL: gone, it campaigns as the watch's delete
 * would have made it; a read that fails starts the watch again (the etcd
 * client passes over a member that timed out). The op log the watch may
 * have missed is read again at the campaign (on_catchup()). */
static void on_check(void *arg, int rc, const mc__etcd_res_t *res)
{
    mc__ha_t *ha = arg;
    if (ha->closing)
        return;
    ha->check_busy = 0;
    if (ha->st != ST_STANDBY || !ha->watch)
        return; /* the watch answered meanwhile, or ended */
    if (rc < 0) {
        mc__log(MC__LOG_DEBUG, "reading the leader key: %s: watching again", mc_strerror(rc));
        restart_soon(ha);
    } else if (res->nkvs == 0) {
        mc__log(MC__LOG_INFO, "no leader of cluster %s (its watch did not tell): campaigning",
                ha->o.cluster);
        drop_watch(ha);
        campaign(ha);
    }
}

static void standby_check(mc__ha_t *ha)
{
    if (mc__etcd_range(ha->etcd, ha->leader, ha->llen, 0, on_check, ha) == 0)
        ha->check_busy = 1;
}

/* Whether range kvs name a leader; applies the log keys among them.
 * Returns 1 (a leader), 0 (none), or -errno. */
static int take_range(mc__ha_t *ha, const mc__etcd_res_t *res)
{
    int leader = 0, rc;
    for (size_t i = 0; i < res->nkvs; i++) {
        const mc__etcd_kv_t *kv = &res->kvs[i];
        if (kv->klen == ha->snapklen && memcmp(kv->key, ha->snapk, ha->snapklen) == 0 &&
            (rc = mc__ha_snap_take(ha, kv, res)) < 0)
            return rc;
    }
    for (size_t i = 0; i < res->nkvs; i++) {
        const mc__etcd_kv_t *kv = &res->kvs[i];
        if (kv->klen == ha->llen && memcmp(kv->key, ha->leader, ha->llen) == 0)
            leader = 1;
        else if (apply_kv(ha, kv) != 0)
            return -EAGAIN;
    }
    return leader;
}

static void on_standby_range(void *arg, int rc, const mc__etcd_res_t *res)
{
    mc__ha_t *ha = arg;
    if (ha->closing)
        return;
    if (ha->st != ST_STANDBY)
        return;
    if (rc == 0 && (rc = take_range(ha, res)) == 0) {
        campaign(ha);
        return;
    }
    if (rc == 1)
        rc = mc__etcd_watch(ha->etcd, ha->prefix, ha->plen, 1, res->revision + 1, on_watch, ha,
                            &ha->watch);
    if (rc < 0)
        restart_soon(ha);
}

/* Reads the cluster's keys (the leader, the log), then watches them. */
static void standby(mc__ha_t *ha)
{
    ha->st = ST_STANDBY;
    if (mc__etcd_range_all(ha->etcd, ha->prefix, ha->plen, on_standby_range, ha) < 0)
        restart_soon(ha);
}

/* ---- winning ---- */

static void on_journal(void *arg, uint32_t seg, const char *note, size_t len);

static void on_catchup(void *arg, int rc, const mc__etcd_res_t *res)
{
    mc__ha_t *ha = arg;
    if (ha->closing)
        return;
    if (ha->st != ST_CATCHUP)
        return;
    if (rc == 0 && (rc = take_range(ha, res)) == 1) {
        uint64_t live, gone;
        mc__oplog_counts(ha->view, &live, &gone);
        mc__log(MC__LOG_INFO,
                "leading cluster %s: op log read to key %" PRIu64 " (%" PRIu64 " versions, %" PRIu64
                " gone)",
                ha->o.cluster, ha->applied, live, gone);
        ha->next_seq = ha->applied + 1;
        ha->st = ST_LEADER;
        ha->since = mc_loop_now_ms();
        mc__svc_journal(ha->svc, on_journal, ha, ha->view);
        return;
    }
    /* Our key is there unless the lease went: try the log again. */
    mc__log(MC__LOG_WARN, "reading the op log: %s", mc_strerror(rc < 0 ? rc : -EAGAIN));
    if (mc__etcd_range_all(ha->etcd, ha->prefix, ha->plen, on_catchup, ha) < 0)
        mc__ha_deposed(ha, "cannot read the op log");
}

static void on_campaign(void *arg, int rc, const mc__etcd_res_t *res)
{
    mc__ha_t *ha = arg;
    if (ha->closing)
        return;
    if (ha->st != ST_CAMPAIGN)
        return;
    if (rc < 0 || !res->succeeded) {
        if (rc < 0)
            mc__log(MC__LOG_DEBUG, "campaign: %s", mc_strerror(rc));
        if (rc < 0)
            restart_soon(ha);
        else
            standby(ha);
        return;
    }
    ha->created = res->revision;
    ha->st = ST_CATCHUP;
    if (mc__etcd_range_all(ha->etcd, ha->prefix, ha->plen, on_catchup, ha) < 0)
        mc__ha_deposed(ha, "cannot read the op log");
}

static void put_leader(mc__ha_t *ha)
{
    ha->st = ST_CAMPAIGN;
    if (mc__etcd_put_if(ha->etcd, ha->leader, ha->llen, ha->addr, strlen(ha->addr), ha->lease, 0,
                        on_campaign, ha) < 0)
        restart_soon(ha);
}

static void on_grant(void *arg, int rc, const mc__etcd_res_t *res)
{
    mc__ha_t *ha = arg;
    if (ha->closing)
        return;
    ha->grant_busy = 0;
    if (rc < 0) {
        mc__log(MC__LOG_DEBUG, "etcd lease: %s", mc_strerror(rc));
        restart_soon(ha);
        return;
    }
    ha->lease = res->lease;
    ha->deadline = ha->ka_sent + (uint64_t)ha->o.ttl_s * 1000;
    put_leader(ha);
}

/* Puts the leader key on our lease (granted first if we hold none). */
static void campaign(mc__ha_t *ha)
{
    ha->st = ST_CAMPAIGN;
    if (ha->lease) {
        put_leader(ha);
        return;
    }
    ha->ka_sent = mc_loop_now_ms();
    if (!ha->grant_busy && mc__etcd_lease_grant(ha->etcd, ha->o.ttl_s, on_grant, ha) == 0)
        ha->grant_busy = 1;
    else if (!ha->grant_busy)
        restart_soon(ha);
}

/* ---- the leader's log ---- */

static void kick(void *arg)
{
    mc__ha_t *ha = arg;
    ha->kicked = 0;
    mc__ha_send(ha);
}

static void on_journal(void *arg, uint32_t seg, const char *note, size_t len)
{
    mc__ha_t *ha = arg;
    chunk_t *c = ha->nchunks ? &ha->chunks[ha->nchunks - 1] : NULL;
    if (!c || c->seq || c->w.len + len + 8 > CHUNK_MAX) {
        chunk_t *nc = realloc(ha->chunks, sizeof(*nc) * (ha->nchunks + 1));
        if (!nc) {
            mc__ha_deposed(ha, "out of memory for the op log");
            return;
        }
        ha->chunks = nc;
        c = &nc[ha->nchunks++];
        *c = (chunk_t){0};
    }
    if (mc__oplog_pack(&c->w, seg, note, len) < 0) {
        mc__ha_deposed(ha, "out of memory for the op log");
        return;
    }
    c->upto = ++ha->taken;
    if (!ha->kicked) {
        ha->kicked = 1;
        mc_loop_defer(ha->loop, &ha->kick, kick, ha);
    }
}

static void on_retry(mc_timer_t *t)
{
    mc__ha_send(t->data);
}

void mc__ha_retry_later(mc__ha_t *ha)
{
    mc_timer_start(ha->loop, &ha->retry, RETRY_MS, 0, on_retry);
}

int mc__ha_fenced_end(mc__ha_t *ha, int rc, const mc__etcd_res_t *res)
{
    if (ha->closing)
        return 0;
    ha->sending = 0;
    if (ha->st != ST_LEADER)
        return 0;
    if (rc == 0 && !res->succeeded) {
        mc__ha_deposed(ha, "another master holds the leader key");
        return 0;
    }
    return 1;
}

static void on_appended(void *arg, int rc, const mc__etcd_res_t *res)
{
    mc__ha_t *ha = arg;
    if (!mc__ha_fenced_end(ha, rc, res))
        return;
    size_t n = 0;
    while (n < ha->nchunks && n < TXN_KEYS && ha->chunks[n].seq)
        n++;
    uint64_t upto = n ? ha->chunks[n - 1].upto : ha->durable;
    if (rc < 0) {
        if (!ha->failing)
            mc__log(MC__LOG_WARN,
                    "cannot append to the op log (%s): changes refused until etcd "
                    "answers",
                    mc_strerror(rc));
        ha->failing = 1;
        if (ha->on_durable)
            ha->on_durable(ha->dur_arg, upto, -ETIMEDOUT);
        mc__ha_retry_later(ha);
        return;
    }
    if (ha->failing)
        mc__log(MC__LOG_INFO, "the op log is written again");
    ha->failing = 0;
    for (size_t i = 0; i < n; i++) {
        /* Our view follows the log, for the snapshots. */
        if (mc__oplog_apply(ha->view, ha->chunks[i].w.p, ha->chunks[i].w.len) < 0) {
            mc__ha_deposed(ha, "out of memory for the op log");
            return;
        }
        ha->applied = ha->chunks[i].seq;
        free(ha->chunks[i].w.p);
    }
    memmove(ha->chunks, ha->chunks + n, sizeof(*ha->chunks) * (ha->nchunks - n));
    ha->nchunks -= n;
    ha->durable = upto;
    if (ha->on_durable)
        ha->on_durable(ha->dur_arg, upto, 0);
    mc__ha_send(ha);
}

/* Sends the oldest chunks in one fenced transaction (one at a time). */
void mc__ha_send(mc__ha_t *ha)
{
    if (ha->st != ST_LEADER || ha->sending)
        return;
    if (!ha->snap && ha->applied >= ha->snap_seq + ha->compact &&
        (!ha->nchunks || !ha->chunks[0].seq))
        mc__ha_snap_start(ha);
    /* A snapshot's transactions take turns with the log's, so that the
     * answers to changes do not wait for a whole snapshot. */
    if (ha->snap && (ha->snap_turn || !ha->nchunks)) {
        ha->snap_turn = 0;
        mc__ha_snap_send(ha);
        return;
    }
    ha->snap_turn = 1;
    if (!ha->nchunks)
        return;
    mc_timer_stop(&ha->retry);
    mc__etcd_put_kv_t kvs[TXN_KEYS];
    char keys[TXN_KEYS][300];
    size_t n = 0;
    for (; n < ha->nchunks && n < TXN_KEYS; n++) {
        chunk_t *c = &ha->chunks[n];
        if (!c->seq)
            c->seq = ha->next_seq++; /* kept: a retry writes the same key */
        int kl = snprintf(keys[n], sizeof(keys[n]), "%s%0*" PRIu64, ha->logp, SEQ_DIGITS, c->seq);
        kvs[n] = (mc__etcd_put_kv_t){keys[n], (size_t)kl, c->w.p, c->w.len};
    }
    int rc =
        mc__etcd_put_fenced(ha->etcd, ha->leader, ha->llen, ha->created, kvs, n, on_appended, ha);
    if (rc < 0)
        mc__ha_retry_later(ha);
    else
        ha->sending = 1;
}

/* ---- requests ---- */

/* The requests that change what the log keeps (their answers wait for it),
 * and the start of a write (refused with them while the log cannot be
 * written). */
static int is_change(uint16_t op, int starts)
{
    switch (op) {
    case MC__OP_PUT_COMMIT:
    case MC__OP_REMOVE:
    case MC__OP_RENAME:
    case MC__OP_SET_META:
    case MC__OP_LINK:
    case MC__OP_XATTR_SET:
    case MC__OP_XATTR_REMOVE:
    case MC__OP_UNMOUNT_SEGMENT:
    case MC__OP_REPLICA_DROP:
    case MC__OP_CREATE: /* publishes, and starts a write */
        return 1;
    case MC__OP_PUT_START:
    case MC__OP_PUT_GROW:
        return starts;
    default:
        return 0;
    }
}

int mc__ha_admit(mc__ha_t *ha, uint16_t op)
{
    if (op == MC__OP_PING || op == MC__OP_HELLO || op == MC__OP_AUTH)
        return 0;
    if (ha->st != ST_LEADER)
        return -EREMCHG;
    if ((op == MC__OP_PUT_START || op == MC__OP_CREATE) &&
        mc_loop_now_ms() < ha->since + REMOUNT_GRACE_MS) {
        mc__svc_stats_t st;
        mc__svc_stats(ha->svc, &st);
        if (!st.segments)
            return -EAGAIN; /* the nodes have not found us yet */
    }
    if (is_change(op, 1) && !mc__ha_writable(ha)) {
        if (!ha->failing && !ha->ka_busy)
            on_ka_tick(&ha->ka); /* find out at once */
        return -EROFS;
    }
    return 0;
}

int mc__ha_defers(mc__ha_t *ha, uint16_t op, uint64_t *seq)
{
    if (ha->st != ST_LEADER || ha->taken == ha->durable || !is_change(op, 0))
        return 0;
    *seq = ha->taken;
    return 1;
}

void mc__ha_on_durable(mc__ha_t *ha, void (*fn)(void *arg, uint64_t seq, int rc), void *arg)
{
    ha->on_durable = fn;
    ha->dur_arg = arg;
}

/* ---- life ---- */

int mc__ha_new(mc_loop_t *l, mc__svc_t *svc, const mc__ha_opts_t *o, mc__ha_t **out)
{
    if (!o->endpoints || !o->ttl_s)
        return -EINVAL;
    mc__ha_t *ha = calloc(1, sizeof(*ha));
    if (!ha)
        return -ENOMEM;
    ha->loop = l;
    ha->svc = svc;
    ha->o = *o;
    if (!ha->o.cluster)
        ha->o.cluster = MC__HA_CLUSTER_DEFAULT;
    int pl = snprintf(ha->prefix, sizeof(ha->prefix), "%s%s/", MC__HA_ROOT, ha->o.cluster);
    int rc = pl > 0 && (size_t)pl < sizeof(ha->prefix) && !strchr(ha->o.cluster, '/') ? 0 : -EINVAL;
    if (rc == 0) {
        ha->plen = (size_t)pl;
        ha->llen = (size_t)snprintf(ha->leader, sizeof(ha->leader), "%sleader", ha->prefix);
        ha->lplen = (size_t)snprintf(ha->logp, sizeof(ha->logp), "%slog/", ha->prefix);
        ha->snaplen = (size_t)snprintf(ha->snapp, sizeof(ha->snapp), "%ssnap/", ha->prefix);
        ha->snapklen = (size_t)snprintf(ha->snapk, sizeof(ha->snapk), "%ssnapshot", ha->prefix);
        ha->compact = o->compact_keys ? o->compact_keys : MC__HA_COMPACT_KEYS;
        rc = mc__oplog_new(&ha->view);
    }
    if (rc == 0)
        rc = mc__etcd_new(l, o->endpoints, o->timeout_ms ? o->timeout_ms : 2000, &ha->etcd);
    if (rc < 0) {
        mc__oplog_free(ha->view);
        free(ha);
        return rc;
    }
    ha->ka.data = ha;
    ha->again.data = ha;
    ha->retry.data = ha;
    ha->st = ST_DEPOSED; /* nothing until mc__ha_start() */
    *out = ha;
    return 0;
}

int mc__ha_start(mc__ha_t *ha, const char *addr)
{
    if (!(ha->addr = strdup(addr)))
        return -ENOMEM;
    uint64_t every = (uint64_t)ha->o.ttl_s * 1000 / 3;
    mc_timer_start(ha->loop, &ha->ka, every, every, on_ka_tick);
    standby(ha);
    return 0;
}

static void on_revoked(void *arg, int rc, const mc__etcd_res_t *res)
{
    (void)arg;
    (void)res;
    if (rc < 0)
        mc__log(MC__LOG_DEBUG, "giving the lease back: %s", mc_strerror(rc));
}

void mc__ha_resign(mc__ha_t *ha)
{
    if (!ha || ha->st == ST_DEPOSED)
        return;
    if (ha->st == ST_LEADER)
        mc__log(MC__LOG_INFO, "leaving the lead of cluster %s", ha->o.cluster);
    ha->st = ST_DEPOSED;
    if (ha->lease)
        mc__etcd_lease_revoke(ha->etcd, ha->lease, on_revoked, ha);
    ha->lease = 0;
}

void mc__ha_free(mc__ha_t *ha)
{
    if (!ha)
        return;
    ha->closing = 1;
    mc_timer_stop(&ha->ka);
    mc_timer_stop(&ha->again);
    mc_timer_stop(&ha->retry);
    if (ha->watch)
        mc__etcd_watch_cancel(ha->watch);
    mc__etcd_free(ha->etcd); /* requests in flight end (-ECANCELED) */
    for (size_t i = 0; i < ha->nchunks; i++)
        free(ha->chunks[i].w.p);
    free(ha->chunks);
    mc__ha_snap_free(ha);
    mc__oplog_free(ha->view);
    free(ha->addr);
    free(ha);
}
