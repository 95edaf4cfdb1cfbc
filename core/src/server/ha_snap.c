/*
 * ha_snap.c - snapshots of the op log (see ha.h): the leader's view written
 * as batches under snap/S/ and named by the pointer "snapshot", the log
 * and older snapshots it covers deleted; a master reading the keys starts
 * from the snapshot the pointer names.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/log.h"
#include "server/ha_i.h"

void mc__ha_snap_free(mc__ha_t *ha)
{
    for (size_t i = 0; i < ha->nsnap; i++)
        free(ha->snap[i].p);
    free(ha->snap);
    ha->snap = NULL;
    ha->nsnap = ha->snap_at = 0;
}

void mc__ha_snap_start(mc__ha_t *ha)
{
    if (mc__oplog_snapshot(ha->view, CHUNK_MAX, &ha->snap, &ha->nsnap) < 0) {
        ha->snap_seq = ha->applied; /* try again later */
        return;
    }
    if (!ha->nsnap) { /* nothing kept: still a pointer, with no batch */
        free(ha->snap);
        ha->snap = calloc(1, sizeof(*ha->snap));
        if (!ha->snap)
            return;
    }
    ha->snap_at = 0;
    ha->snap_upto = ha->applied;
}

static void on_trimmed(void *arg, int rc, const mc__etcd_res_t *res)
{
    (void)arg;
    (void)res;
    if (rc < 0)
        mc__log(MC__LOG_DEBUG, "trimming the op log: %s", mc_strerror(rc));
}

static void on_snap(void *arg, int rc, const mc__etcd_res_t *res);

void mc__ha_snap_send(mc__ha_t *ha)
{
    mc__etcd_put_kv_t kvs[TXN_KEYS];
    char keys[TXN_KEYS][320], val[64];
    size_t n = 0;
    if (ha->snap_at < ha->nsnap && ha->snap[0].p) {
        for (; n < TXN_KEYS && ha->snap_at + n < ha->nsnap; n++) {
            int kl = snprintf(keys[n], sizeof(keys[n]), "%s%0*" PRIu64 "/%06zu", ha->snapp,
                              SEQ_DIGITS, ha->snap_upto, ha->snap_at + n);
            const mc__wbuf_t *b = &ha->snap[ha->snap_at + n];
            kvs[n] = (mc__etcd_put_kv_t){keys[n], (size_t)kl, b->p, b->len};
        }
    } else {
        size_t batches = ha->snap[0].p ? ha->nsnap : 0;
        int vl =
            snprintf(val, sizeof(val), "%0*" PRIu64 " %zu", SEQ_DIGITS, ha->snap_upto, batches);
        kvs[n++] = (mc__etcd_put_kv_t){ha->snapk, ha->snapklen, val, (size_t)vl};
    }
    ha->sending = 1;
    if (mc__etcd_put_fenced(ha->etcd, ha->leader, ha->llen, ha->created, kvs, n, on_snap, ha) < 0) {
        ha->sending = 0;
        mc__ha_retry_later(ha);
    }
}

static void on_snap(void *arg, int rc, const mc__etcd_res_t *res)
{
    mc__ha_t *ha = arg;
    if (!mc__ha_fenced_end(ha, rc, res))
        return;
    if (rc < 0) {
        mc__ha_retry_later(ha);
        return;
    }
    int pointer = ha->snap_at >= ha->nsnap || !ha->snap[0].p;
    if (!pointer) {
        ha->snap_at += TXN_KEYS;
        if (ha->snap_at > ha->nsnap)
            ha->snap_at = ha->nsnap;
    } else {
        /* The pointer names it: the log it covers and older snapshots go. */
        char end[320];
        int el =
            snprintf(end, sizeof(end), "%s%0*" PRIu64, ha->logp, SEQ_DIGITS, ha->snap_upto + 1);
        mc__etcd_delete_range(ha->etcd, ha->logp, ha->lplen, end, (size_t)el, on_trimmed, ha);
        el = snprintf(end, sizeof(end), "%s%0*" PRIu64, ha->snapp, SEQ_DIGITS, ha->snap_upto);
        mc__etcd_delete_range(ha->etcd, ha->snapp, ha->snaplen, end, (size_t)el, on_trimmed, ha);
        mc__log(MC__LOG_DEBUG, "op log compacted to key %" PRIu64 " (%zu batches)", ha->snap_upto,
                ha->nsnap);
        ha->snap_seq = ha->snap_upto;
        mc__ha_snap_free(ha);
    }
    mc__ha_send(ha);
}

int mc__ha_snap_take(mc__ha_t *ha, const mc__etcd_kv_t *ptr, const mc__etcd_res_t *res)
{
    char v[64];
    uint64_t seq;
    size_t n;
    if (ptr->vlen >= sizeof(v))
        return -EAGAIN;
    memcpy(v, ptr->val, ptr->vlen);
    v[ptr->vlen] = '\0';
    if (sscanf(v, "%" SCNu64 " %zu", &seq, &n) != 2)
        return -EAGAIN;
    ha->snap_seq = seq;
    if (seq <= ha->applied)
        return 0;
    char pre[320];
    int pl = snprintf(pre, sizeof(pre), "%s%0*" PRIu64 "/", ha->snapp, SEQ_DIGITS, seq);
    mc__oplog_t *nv;
    if (mc__oplog_new(&nv) < 0)
        return -ENOMEM;
    size_t found = 0;
    for (size_t i = 0; i < res->nkvs; i++) {
        const mc__etcd_kv_t *kv = &res->kvs[i];
        if (kv->klen > (size_t)pl && memcmp(kv->key, pre, (size_t)pl) == 0 &&
            mc__oplog_apply(nv, kv->val, kv->vlen) == 0)
            found++;
    }
    if (found != n) {
        mc__oplog_free(nv);
        return -EAGAIN;
    }
    mc__oplog_free(ha->view);
    ha->view = nv;
    ha->applied = seq;
    return 0;
}
