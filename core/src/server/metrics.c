/*
 * metrics.c - a master's and a protocol server's metrics (metrics.h):
 * their counters as Prometheus families.
 */
#include <inttypes.h>
#include <stdio.h>

#include "master/census.h"
#include "runtime/metrics.h"
#include "server/ha.h"
#include "server/metrics.h"
#include "wire/proto.h"

/* One family with one sample. */
static void one(mc_metrics_t *mm, const char *name, const char *type, const char *help, uint64_t v)
{
    mc_metrics_family(mm, name, type, help);
    mc_metrics_sample(mm, name, NULL, v);
}

void mc__metrics_master(mc_metrics_t *mm, const mc__master_t *m, const mc__svc_t *svc, uint64_t now)
{
    mc__svc_stats_t st;
    mc__svc_stats(svc, &st);
    one(mm, "mooncake_master_nodes", "gauge", "Nodes known to the master.", st.nodes);
    one(mm, "mooncake_master_segments", "gauge", "Segments mounted.", st.segments);
    one(mm, "mooncake_master_puts_in_progress", "gauge", "Writes started and not committed.",
        st.puts);
    one(mm, "mooncake_master_handles", "gauge", "Open read handles.", st.handles);
    one(mm, "mooncake_master_nodes_expired_total", "counter",
        "Nodes dropped for silence past their TTL.", st.nodes_expired);
    one(mm, "mooncake_master_objects_lost_total", "counter",
        "Objects gone with the last segment holding a replica.", st.objects_lost);
    one(mm, "mooncake_master_puts_expired_total", "counter",
        "Writes nobody renewed for the put TTL, revoked.", st.puts_expired);
    one(mm, "mooncake_master_replicas_dropped_total", "counter",
        "Replicas writers dropped (node unreachable).", st.replicas_dropped);
    one(mm, "mooncake_master_repairs_started_total", "counter", "Repair copies started.",
        st.repair_started);
    one(mm, "mooncake_master_repairs_done_total", "counter", "Repair copies done.", st.repair_done);
    one(mm, "mooncake_master_repairs_failed_total", "counter", "Repair copies failed.",
        st.repair_failed);
    one(mm, "mooncake_master_repair_bytes_total", "counter", "Bytes copied by repairs.",
        st.repair_bytes);
    one(mm, "mooncake_master_repairs_inflight", "gauge", "Repair copies in flight.",
        st.repair_inflight);
    one(mm, "mooncake_master_repairs_waiting", "gauge", "Repair tasks waiting.", st.repair_waiting);

    mc_space_t sp;
    mc__master_space(m, &sp);
    one(mm, "mooncake_master_capacity_bytes", "gauge", "Bytes in all segments.", sp.total);
    one(mm, "mooncake_master_used_bytes", "gauge",
        "Bytes allocated in all segments (committed or being written).", sp.used);
    one(mm, "mooncake_master_objects", "gauge", "Keys published.", sp.objects);
    one(mm, "mooncake_master_evictions_total", "counter", "Objects evicted.", sp.evicted);

    char labels[32];
    uint32_t id;
    uint64_t size, used;
    mc_metrics_family(mm, "mooncake_master_segment_capacity_bytes", "gauge",
                      "Bytes of each mounted segment.");
    for (int i = 0; mc__master_segment_at(m, i, &id, &size, &used) == 0; i++) {
        snprintf(labels, sizeof(labels), "segment=\"%" PRIu32 "\"", id);
        mc_metrics_sample(mm, "mooncake_master_segment_capacity_bytes", labels, size);
    }
    mc_metrics_family(mm, "mooncake_master_segment_used_bytes", "gauge",
                      "Bytes allocated in each mounted segment.");
    for (int i = 0; mc__master_segment_at(m, i, &id, &size, &used) == 0; i++) {
        snprintf(labels, sizeof(labels), "segment=\"%" PRIu32 "\"", id);
        mc_metrics_sample(mm, "mooncake_master_segment_used_bytes", labels, used);
    }

    mc__census_t c;
    mc__master_census(m, now, &c);
    one(mm, "mooncake_master_leased_objects", "gauge", "Published versions under a read lease.",
        c.leased);
    mc_metrics_family(mm, "mooncake_master_pinned_objects", "gauge",
                      "Published versions pinned, by kind of pin.");
    mc_metrics_sample(mm, "mooncake_master_pinned_objects", "pin=\"soft\"", c.soft_pinned);
    mc_metrics_sample(mm, "mooncake_master_pinned_objects", "pin=\"hard\"", c.hard_pinned);
    one(mm, "mooncake_master_open_versions", "gauge", "Versions with open handles.", c.open);
    one(mm, "mooncake_master_retired_versions", "gauge",
        "Replaced or removed versions kept for a lease or a handle.", c.retired);
    one(mm, "mooncake_master_retired_bytes", "gauge", "Bytes the retired versions hold.",
        c.retired_bytes);
}

/* A counter family by opcode: a sample for each operation seen. */
static void by_op(mc_metrics_t *mm, const char *name, const char *help, const uint64_t *counts)
{
    char labels[48];
    mc_metrics_family(mm, name, "counter", help);
    for (unsigned op = 0; op < MC__SERVER_OPS; op++)
        if (counts[op]) {
            snprintf(labels, sizeof(labels), "op=\"%s\"", mc__op_name((uint16_t)op));
            mc_metrics_sample(mm, name, labels, counts[op]);
        }
}

void mc__metrics_server(mc_metrics_t *mm, const mc__server_t *srv)
{
    mc__server_stats_t st;
    mc__server_stats(srv, &st);
    one(mm, "mooncake_server_connections", "gauge", "Protocol connections open.", st.open_conns);
    one(mm, "mooncake_server_connections_total", "counter", "Protocol connections accepted.",
        st.conns);
    one(mm, "mooncake_server_connections_closed_total", "counter",
        "Connections closed by the idle or handshake timeout.", st.timed_out);
    one(mm, "mooncake_server_connections_refused_total", "counter",
        "Connections evicted or turned away at the connection limit.", st.evicted + st.turned_away);
    one(mm, "mooncake_server_answers_queued_bytes", "gauge",
        "Bytes of a master's answers queued for its peers (bounded by --answer-budget).",
        st.answers_queued);
    one(mm, "mooncake_server_answer_budget_pauses_total", "counter",
        "Times a connection took no request in while the answer budget was spent.",
        st.budget_pauses);
    one(mm, "mooncake_server_auth_refused_total", "counter",
        "Requests refused for want of authentication.", st.refused);
    one(mm, "mooncake_server_bad_frames_total", "counter", "Malformed requests.", st.bad_frames);
    by_op(mm, "mooncake_server_requests_total", "Protocol requests, by operation.", st.op_requests);
    by_op(mm, "mooncake_server_request_errors_total",
          "Master requests that failed (a negative status), by operation.", st.op_errors);
    mc_metrics_family(mm, "mooncake_server_segment_bytes_total", "counter",
                      "Bytes this process's segment served over the protocol (READ, WRITE).");
    mc_metrics_sample(mm, "mooncake_server_segment_bytes_total", "direction=\"read\"",
                      st.bytes_read);
    mc_metrics_sample(mm, "mooncake_server_segment_bytes_total", "direction=\"write\"",
                      st.bytes_written);
    one(mm, "mooncake_server_segment_bytes_placed_total", "counter",
        "Of the bytes written, those received from the socket straight into the segment.",
        st.bytes_placed);
    one(mm, "mooncake_server_shm_maps_total", "counter", "Segment memfds handed out (SHM_MAP).",
        st.shm_maps);
    one(mm, "mooncake_server_writes_fenced_total", "counter",
        "WRITEs refused for an epoch below their segment's: their write had ended.",
        st.writes_fenced);
}

void mc__metrics_ha(mc_metrics_t *mm, const struct mc__ha *ha)
{
    mc__ha_stats_t st;
    mc__ha_stats(ha, &st);
    one(mm, "mooncake_master_leading", "gauge", "1 while this master leads its cluster on etcd.",
        (uint64_t)st.leading);
    one(mm, "mooncake_master_oplog_writable", "gauge",
        "1 while the leader takes changes (lease proven, op log written).", (uint64_t)st.writable);
    one(mm, "mooncake_master_oplog_entries_total", "counter",
        "Entries handed to the op log by this master.", st.entries);
    one(mm, "mooncake_master_oplog_pending", "gauge", "Op log entries not yet durable in etcd.",
        st.pending);
    one(mm, "mooncake_master_oplog_key", "gauge", "The last op log key this master applied.",
        st.key);
}
