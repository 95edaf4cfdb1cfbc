/*
 * metrics.h - Prometheus metrics and a health endpoint over HTTP.
 *
 * A program serves its metrics with mc_metrics_serve(): libmicrohttpd
 * answers on its own thread, and each scrape is handed to the program's
 * loop, where a collect callback appends the metrics to the text being
 * built (text exposition format 0.0.4) with mc_metrics_family() and
 * mc_metrics_sample(), or with mc_metrics_store() for a whole store. The
 * loop is never blocked; the HTTP thread waits for it a bounded time.
 *
 *   GET /metrics  200 and the text; 503 when the loop did not answer in time
 *   GET /health   200 "ok" when collect says the process serves; 503 otherwise
 */
#ifndef MOONCAKE_METRICS_H
#define MOONCAKE_METRICS_H

#include <stdint.h>

#include "mooncake/loop.h"
#include "mooncake/mooncake.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Metrics text being built; owned by the server, valid during collect. */
typedef struct mc_metrics mc_metrics_t;
typedef struct mc_metrics_server mc_metrics_server_t;

/*
 * Called on the loop's thread for every request: for /metrics with m set,
 * to append the metrics to m; for /health with m NULL. Returns 0 when the
 * process serves, or a negative errno when it does not (/health then
 * answers 503; /metrics still answers with what was appended).
 */
typedef int (*mc_metrics_cb)(void *arg, mc_metrics_t *m);

/* How long the HTTP thread waits for the loop before answering 503. */
#define MC_METRICS_WAIT_MS 2000

/*
 * mc_metrics_serve() serves /metrics and /health on addr: "PORT" (on
 * 127.0.0.1), "HOST:PORT" or "[V6]:PORT" (TCP only). collect(arg, m) runs
 * on loop's thread for each request. Returns 0 and sets *out, or -EINVAL
 * (a bad address), -ELIBACC (libmicrohttpd.so.12, loaded at the first
 * call, is missing), -EADDRINUSE or another -errno when it cannot listen.
 * Stop it with mc_metrics_stop().
 */
MC_EXPORT int mc_metrics_serve(mc_metrics_server_t **out, const char *addr, mc_loop_t *loop,
                               mc_metrics_cb collect, void *arg);

/* mc_metrics_server_port() returns the TCP port srv listens on (useful
 * after asking for port 0). */
MC_EXPORT int mc_metrics_server_port(const mc_metrics_server_t *srv);

/*
 * mc_metrics_stop() stops serving and frees srv (NULL: nothing). It may
 * wait up to MC_METRICS_WAIT_MS for a request in progress. Once it
 * returns, collect is never called again, so the caller may free what
 * collect uses. Any thread but the HTTP server's own.
 */
MC_EXPORT void mc_metrics_stop(mc_metrics_server_t *srv);

/* mc_metrics_family() starts a metric family: its "# HELP" and "# TYPE"
 * lines. type is "counter", "gauge" or "histogram". All samples of a family
 * follow its header. m NULL: nothing. */
MC_EXPORT void mc_metrics_family(mc_metrics_t *m, const char *name, const char *type,
                                 const char *help);

/* mc_metrics_sample() appends the sample `name{labels} value`; labels is
 * NULL or a list such as `op="get"` (values already escaped). m NULL:
 * nothing. */
MC_EXPORT void mc_metrics_sample(mc_metrics_t *m, const char *name, const char *labels,
                                 uint64_t value);

/*
 * mc_metrics_store() appends s's metrics to m (the names are in
 * docs/METRICS.md): operations, errors and latency per kind, bytes per
 * transport, and, for what s serves, its segment, its protocol server and,
 * embedded, its master. Call it on s's loop thread. m NULL appends
 * nothing. Returns 0 while s serves, -ENOTCONN for a node whose segment is
 * not mounted at the master, -ESHUTDOWN once s is closing.
 */
MC_EXPORT int mc_metrics_store(mc_metrics_t *m, mc_store_t *s);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_METRICS_H */
