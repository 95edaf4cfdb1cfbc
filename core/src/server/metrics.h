/*
 * metrics.h - a master's and a protocol server's metrics (docs/METRICS.md),
 * rendered into a scrape (mooncake/metrics.h) on the loop thread: by
 * mooncake-master, and by an embedded store for its in-process master.
 */
#ifndef MC_SERVER_METRICS_H
#define MC_SERVER_METRICS_H

#include <stdint.h>

#include "master/master.h"
#include "master/service.h"
#include "mooncake/metrics.h"
#include "server/server.h"

/* Appends the master's metrics (mooncake_master_*): its service's counters,
 * space, segments, objects by state at now (ms, the loop's clock). */
void mc__metrics_master(mc_metrics_t *mm, const mc__master_t *m, const mc__svc_t *svc,
                        uint64_t now);

/* Appends a protocol server's metrics (mooncake_server_*): connections,
 * requests and errors by opcode, bytes its segment served. */
void mc__metrics_server(mc_metrics_t *mm, const mc__server_t *srv);

struct mc__ha;

/* A master on etcd's place in its cluster and its op log (server/ha.h). */
void mc__metrics_ha(mc_metrics_t *mm, const struct mc__ha *ha);

#endif /* MC_SERVER_METRICS_H */
