/*
 * metrics.c - the client's metrics: every operation counted where it
 * finishes (mc__op_finish()), by kind, with its errors and latency, and
 * mc_metrics_store(), a store's metrics as Prometheus text (the names are
 * in docs/METRICS.md).
 */
#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "client/remote_i.h"
#include "client/store_i.h"
#include "mooncake/metrics.h"
#include "runtime/loop_i.h"
#include "runtime/metrics.h"
#include "server/metrics.h"

/* The kinds' names, in enum op_kind order. */
static const char *const op_names[MC__OP_KINDS] = {
    "put",
    "get",
    "stat",
    "remove",
    "rename",
    "list",
    "statfs",
    "master_stats",
    "lookup",
    "set_meta",
    "open",
    "obj_read",
    "obj_close",
    "writer_open",
    "writer_write",
    "writer_read",
    "writer_truncate",
    "writer_commit",
    "writer_abort",
    "xattr_get",
    "xattr_set",
    "xattr_list",
    "xattr_remove",
    "link",
    "writer_punch",
    "task_create",
    "task_query",
    "replica_drop",
    "create",
};

/* The latency buckets' upper bounds, in seconds. */
static const double lat_bounds[MC__LAT_BUCKETS] = {
    50e-6, 100e-6, 250e-6, 500e-6, 1e-3,   2.5e-3, 5e-3, 10e-3,
    25e-3, 50e-3,  100e-3, 250e-3, 500e-3, 1.0,    2.5,  10.0,
};

void mc__op_count(mc_store_t *s, enum op_kind kind, int rc, uint64_t t0_ns)
{
    mc__op_metrics_t *m = &s->opm;
    uint64_t now = mc__loop_clock_ns(s->loop);
    uint64_t ns = now > t0_ns ? now - t0_ns : 0;
    int b = 0;
    while (b < MC__LAT_BUCKETS && (double)ns > lat_bounds[b] * 1e9)
        b++;
    mc__bump(&m->ops[kind], 1); /* the loop thread's counters */
    if (rc < 0)
        mc__bump(&m->errors[kind], 1);
    mc__bump(&m->lat_sum_ns[kind], ns);
    mc__bump(&m->lat[kind][b], 1);
}

static uint64_t load(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static void ops(mc_metrics_t *mm, const mc__op_metrics_t *m)
{
    char labels[48];
    mc_metrics_family(mm, "mooncake_client_ops_total", "counter",
                      "Store operations finished, by kind.");
    for (int k = 0; k < MC__OP_KINDS; k++) {
        snprintf(labels, sizeof(labels), "op=\"%s\"", op_names[k]);
        mc_metrics_sample(mm, "mooncake_client_ops_total", labels, load(&m->ops[k]));
    }
    mc_metrics_family(mm, "mooncake_client_op_errors_total", "counter",
                      "Store operations that failed (a negative result), by kind.");
    for (int k = 0; k < MC__OP_KINDS; k++) {
        snprintf(labels, sizeof(labels), "op=\"%s\"", op_names[k]);
        mc_metrics_sample(mm, "mooncake_client_op_errors_total", labels, load(&m->errors[k]));
    }
    mc_metrics_family(mm, "mooncake_client_op_duration_seconds", "histogram",
                      "Store operations' latency, from the call to the result, by kind.");
    for (int k = 0; k < MC__OP_KINDS; k++) {
        uint64_t counts[MC__LAT_BUCKETS + 1];
        for (int b = 0; b <= MC__LAT_BUCKETS; b++)
            counts[b] = load(&m->lat[k][b]);
        snprintf(labels, sizeof(labels), "op=\"%s\"", op_names[k]);
        mc__metrics_histogram(mm, "mooncake_client_op_duration_seconds", labels, lat_bounds, counts,
                              MC__LAT_BUCKETS, (double)load(&m->lat_sum_ns[k]) / 1e9);
    }
}

static void transports(mc_metrics_t *mm, mc_store_t *s)
{
    mc_store_stats_t st;
    mc_store_stats(s, &st);
    const struct {
        const char *name;
        uint64_t ops, bytes;
    } t[] = {{"local", st.local_ops, st.local_bytes},
             {"shm", st.shm_ops, st.shm_bytes},
             {"tcp", st.tcp_ops, st.tcp_bytes},
             {"rdma", st.rdma_ops, st.rdma_bytes}};
    char labels[32];
    mc_metrics_family(mm, "mooncake_transport_bytes_total", "counter",
                      "Object bytes moved, by transport (a write counted once per replica).");
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        snprintf(labels, sizeof(labels), "transport=\"%s\"", t[i].name);
        mc_metrics_sample(mm, "mooncake_transport_bytes_total", labels, t[i].bytes);
    }
    mc_metrics_family(mm, "mooncake_transport_ops_total", "counter",
                      "Transfers (a memcpy, a request, an RDMA piece), by transport.");
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        snprintf(labels, sizeof(labels), "transport=\"%s\"", t[i].name);
        mc_metrics_sample(mm, "mooncake_transport_ops_total", labels, t[i].ops);
    }
    mc_metrics_family(mm, "mooncake_rdma_zero_copy_bytes_total", "counter",
                      "RDMA bytes moved straight to or from registered caller buffers.");
    mc_metrics_sample(mm, "mooncake_rdma_zero_copy_bytes_total", NULL, st.rdma_zero_copy_bytes);
    mc_metrics_family(mm, "mooncake_client_replica_cache_hits_total", "counter",
                      "Gets served from the replica-list cache.");
    mc_metrics_sample(mm, "mooncake_client_replica_cache_hits_total", NULL, st.cache_hits);
    mc_metrics_family(mm, "mooncake_client_writes_fenced_total", "counter",
                      "Write pieces refused for an old epoch (by a node, a mapped "
                      "segment's fence, or our own segment): their write had ended.");
    mc_metrics_sample(mm, "mooncake_client_writes_fenced_total", NULL, st.writes_fenced);
}

int mc_metrics_store(mc_metrics_t *mm, mc_store_t *s)
{
    if (!s->rm)
        return -ESHUTDOWN;
    /* A node serves once its segment is mounted at the master. */
    int rc = s->remote && s->seg_mem.base && !s->rm->seg_id ? -ENOTCONN : 0;
    if (!mm)
        return rc;
    ops(mm, &s->opm);
    transports(mm, s);
    mc_metrics_family(mm, "mooncake_segment_capacity_bytes", "gauge",
                      "Bytes of memory this process contributes as a segment.");
    mc_metrics_sample(mm, "mooncake_segment_capacity_bytes", NULL,
                      s->seg_mem.base ? s->seg_mem.size : 0);
    mc__server_t *srv = s->srv ? s->srv : s->rm->srv; /* embedded; a node */
    if (srv)
        mc__metrics_server(mm, srv);
    if (!s->remote && s->m && s->svc)
        mc__metrics_master(mm, s->m, s->svc, mc_loop_now_ms());
    return rc;
}
