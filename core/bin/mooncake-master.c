/*
 * mooncake-master.c - mooncake-master: the cluster's metadata master.
 *
 * Serves the master logic (key index, versions, placement, leases, pins,
 * eviction, node liveness) over the wire protocol on one address, optionally
 * with a memory segment of its own. Runs one io_uring loop until SIGINT or
 * SIGTERM, then exits 0.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <linux/close_range.h>
#include <unistd.h>

#include "runtime/auth.h"
#include "runtime/log.h"
#include "runtime/loop_i.h"
#include "master/master.h"
#include "mooncake/metrics.h"
#include "mooncake/mooncake.h"
#include "runtime/net.h"
#include "server/metrics.h"
#include "server/ha.h"
#include "server/server.h"
#include "master/service.h"
#include "transport/shm.h"
#include "server/rdma_setup.h"
#include "transport/transport_rdma.h"

#define SEG_LOCAL 0

static mc__seg_t seg_mem = {.fd = -1};
static uint64_t seg_size;

static void on_signal(mc_poll_t *p, int revents)
{
    struct signalfd_siginfo si;
    if (read(p->fd, &si, sizeof(si)) == (ssize_t)sizeof(si))
        mc__log(MC__LOG_INFO, "%s: shutting down", strsignal((int)si.ssi_signo));
    mc_loop_stop(p->data);
}

static void on_drained(mc_timer_t *t)
{
    mc_loop_stop(t->data);
}

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [options]\n\n"
            "The Mooncake metadata master: nodes mount memory segments into it, clients\n"
            "ask it where objects live; data never passes through it.\n\n"
            "options:\n"
            "    --listen ADDR         host:port or unix:/path (default 127.0.0.1:50051;\n"
            "                          give 0.0.0.0:PORT and a secret to serve other hosts)\n"
            "    --port N              shorthand for --listen 127.0.0.1:N\n"
            "    --segment-size SIZE   also host a segment of SIZE bytes (e.g. 1G)\n"
            "    --lease-ms N          read lease granted by gets (default %d)\n"
            "    --node-ttl-ms N       a node silent this long loses its segments (5000)\n"
            "    --put-ttl-ms N        a write nobody renews this long is revoked (60000;\n"
            "                          clients renew their open writes while they run);\n"
            "                          its writer's later writes fail (ESTALE)\n"
            "    --evict-high PCT      evict when use passes PCT%% (default 0: never)\n"
            "    --evict-ratio PCT     then free PCT%% of the space (default 10)\n"
            "    --repair-inflight N   copies restoring lost replicas at once (default 4;\n"
            "                          0: no repair)\n"
            "    --repair-mbps N       and at most N MiB/s of them on average (default 0:\n"
            "                          no limit)\n"
            "    --auth-secret-file F  the cluster's shared secret (mode 600): every peer\n"
            "                          must prove it knows it, and this master proves\n"
            "                          it to them (required beyond loopback; without\n"
            "                          one, every local user may use the cluster)\n"
            "    --no-shm              do not offer the segment to co-located clients\n"
            "    --idle-timeout-ms N   close a connection silent this long (default %d)\n"
            "    --handshake-timeout-ms N  ... this long before its HELLO/AUTH (%d)\n"
            "    --max-connections N   connections at once (default: from the\n"
            "                          descriptor limit, at most %d)\n"
            "    --answer-budget SIZE  answers queued to all peers at once past which a\n"
            "                          peer with some queued sends no more until it has\n"
            "                          read them (default 256M)\n"
            "    --protocol P          how peers reach the segment: tcp (default), rdma\n"
            "                          (also over RDMA; fails without a device) or auto\n"
            "    --rdma-device NAME    the verbs device(s) for RDMA, comma-separated\n"
            "    --metrics ADDR        serve Prometheus metrics and /health over HTTP on\n"
            "                          ADDR: PORT (on 127.0.0.1) or HOST:PORT (default:\n"
            "                          none)\n"
            "    --etcd URL[,URL...]   run as one of the cluster's masters on etcd: the\n"
            "                          one holding the leader lease serves, the others\n"
            "                          follow its op log and take over when it goes\n"
            "    --cluster-id NAME     the cluster's name in etcd (default %s)\n"
            "    --etcd-ttl S          the leader's lease in seconds (default 5)\n"
            "    --etcd-compact N      snapshot the op log and trim it every N keys\n"
            "                          (default %d)\n"
            "    --log-level LEVEL     error, warn, info (default), debug\n"
            "    -h, --help, -V, --version\n",
            prog, MC_DEFAULT_LEASE_MS, MC__SERVER_IDLE_TIMEOUT_MS, MC__SERVER_HANDSHAKE_TIMEOUT_MS,
            MC__SERVER_MAX_CONNS, MC__HA_CLUSTER_DEFAULT, MC__HA_COMPACT_KEYS);
}

static int num(const char *s, const char *what, unsigned long long max, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || v > max) {
        fprintf(stderr, "mooncake-master: error: bad %s '%s'\n", what, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* What the command line asks for. */
struct options {
    char listen_buf[64];
    const char *listen, *secret_file, *rdma_devices, *metrics;
    mc__ha_opts_t ha; /* ha.endpoints NULL: a master alone */
    int no_shm, xport, level;
    mc__master_opts_t mo;
    mc__svc_opts_t so;
    uint64_t idle_ms, handshake_ms;
    unsigned max_conns;
    uint64_t answer_budget;
};

/* What the process runs; freed by free_master(). */
struct master {
    mc_loop_t *loop;
    mc__master_t *m;
    mc__svc_t *svc;
    mc__server_t *srv;
    mc__rdma_ctx_t *rdma;
    mc__rdma_mr_t *seg_mr;
    mc__rdma_fencer_t fencer; /* the segment's fence, for RDMA peers */
    mc__secret_t *secret;
    mc_metrics_server_t *metrics;
    mc__ha_t *ha;
};

/* The master's own segment (SEG_LOCAL), for its data plane; arg is the
 * struct master. */
static int seg_lookup(void *arg, uint32_t seg, mc__seg_t *out, uint64_t *epoch)
{
    struct master *mp = arg;
    if (seg != SEG_LOCAL || !seg_mem.base)
        return -ENOENT;
    *out = seg_mem;
    *epoch = mc__svc_seg_epoch(mp->svc, seg);
    return 0;
}

static uint64_t seg_enforced(void *arg, uint32_t seg, uint64_t epoch)
{
    struct master *mp = arg;
    return mc__server_enforced(mp->srv, seg, epoch);
}

/*
 * Parses the command line into o (and the segment's size into seg_size).
 * Returns -1 to go on, or the status to exit with: 0 after --help or
 * --version, 2 after a bad option (said on stderr).
 */
static int parse_options(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"port", required_argument, NULL, 'p'},
        {"segment-size", required_argument, NULL, 's'},
        {"lease-ms", required_argument, NULL, 'L'},
        {"node-ttl-ms", required_argument, NULL, 'T'},
        {"put-ttl-ms", required_argument, NULL, 'U'},
        {"evict-high", required_argument, NULL, 'e'},
        {"evict-ratio", required_argument, NULL, 'r'},
        {"repair-inflight", required_argument, NULL, 'F'},
        {"repair-mbps", required_argument, NULL, 'B'},
        {"auth-secret-file", required_argument, NULL, 'a'},
        {"no-shm", no_argument, NULL, 'S'},
        {"idle-timeout-ms", required_argument, NULL, 'I'},
        {"handshake-timeout-ms", required_argument, NULL, 'H'},
        {"max-connections", required_argument, NULL, 'C'},
        {"answer-budget", required_argument, NULL, 'Q'},
        {"protocol", required_argument, NULL, 'P'},
        {"rdma-device", required_argument, NULL, 'D'},
        {"log-level", required_argument, NULL, 'v'},
        {"metrics", required_argument, NULL, 'M'},
        {"etcd", required_argument, NULL, 'E'},
        {"cluster-id", required_argument, NULL, 'c'},
        {"etcd-ttl", required_argument, NULL, 't'},
        {"etcd-compact", required_argument, NULL, 'K'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {0},
    };
    unsigned long long v;
    int c;

    o->listen = "127.0.0.1:50051";
    o->ha.ttl_s = 5;
    o->xport = MC__XPORT_TCP;
    o->level = MC__LOG_INFO;
    /* Version ids start above every id of an earlier run (one publish per
     * microsecond at most, on average), so that the records nodes report
     * after a restart compare with what this run publishes. */
    o->mo = (mc__master_opts_t){.lease_ms = MC_DEFAULT_LEASE_MS,
                                .align = 64,
                                .first_id = (uint64_t)(mc__wall_ns() / 1000),
                                .ino_seed = mc__svc_random_id()};
    o->so = (mc__svc_opts_t){.first_id = mc__svc_random_id(), .wall_ns = mc__loop_wall_ns};
    while ((c = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
        switch (c) {
        case 'l':
            o->listen = optarg;
            break;
        case 'p':
            if (num(optarg, "--port", 65535, &v) < 0)
                return 2;
            snprintf(o->listen_buf, sizeof(o->listen_buf), "127.0.0.1:%llu", v);
            o->listen = o->listen_buf;
            break;
        case 's':
            if (mc_parse_size(optarg, &seg_size) < 0 || (seg_size && seg_size < 4096)) {
                fprintf(stderr, "mooncake-master: error: bad --segment-size '%s'\n", optarg);
                return 2;
            }
            break;
        case 'L':
            if (num(optarg, "--lease-ms", 86400000, &v) < 0)
                return 2;
            o->mo.lease_ms = v;
            break;
        case 'T':
            if (num(optarg, "--node-ttl-ms", 86400000, &v) < 0 || v == 0)
                return 2;
            o->so.node_ttl_ms = v;
            break;
        case 'U':
            if (num(optarg, "--put-ttl-ms", 86400000, &v) < 0 || v == 0)
                return 2;
            o->so.put_ttl_ms = v;
            break;
        case 'e':
            if (num(optarg, "--evict-high", 100, &v) < 0)
                return 2;
            o->mo.evict_high_pct = (unsigned)v;
            break;
        case 'r':
            if (num(optarg, "--evict-ratio", 100, &v) < 0)
                return 2;
            o->mo.evict_ratio_pct = (unsigned)v;
            break;
        case 'F':
            if (num(optarg, "--repair-inflight", 1024, &v) < 0)
                return 2;
            o->so.repair_inflight = (uint32_t)v;
            o->so.no_repair = v == 0;
            break;
        case 'B':
            if (num(optarg, "--repair-mbps", 1 << 20, &v) < 0)
                return 2;
            o->so.repair_bytes_per_s = v << 20;
            break;
        case 'a':
            o->secret_file = optarg;
            break;
        case 'S':
            o->no_shm = 1;
            break;
        case 'I':
            if (num(optarg, "--idle-timeout-ms", 86400000, &v) < 0 || v == 0)
                return 2;
            o->idle_ms = v;
            break;
        case 'H':
            if (num(optarg, "--handshake-timeout-ms", 86400000, &v) < 0 || v == 0)
                return 2;
            o->handshake_ms = v;
            break;
        case 'C':
            if (num(optarg, "--max-connections", 1000000, &v) < 0 || v == 0)
                return 2;
            o->max_conns = (unsigned)v;
            break;
        case 'Q':
            if (mc_parse_size(optarg, &o->answer_budget) < 0 || o->answer_budget < 4096) {
                fprintf(stderr, "mooncake-master: error: bad --answer-budget '%s'\n", optarg);
                return 2;
            }
            break;
        case 'P':
            if ((o->xport = mc__xport_parse(optarg)) < 0) {
                fprintf(stderr, "mooncake-master: error: --protocol takes tcp, rdma or auto\n");
                return 2;
            }
            break;
        case 'D':
            o->rdma_devices = optarg;
            break;
        case 'M':
            o->metrics = optarg;
            break;
        case 'E':
            o->ha.endpoints = optarg;
            break;
        case 'c':
            o->ha.cluster = optarg;
            break;
        case 't':
            if (num(optarg, "--etcd-ttl", 3600, &v) < 0 || v == 0)
                return 2;
            o->ha.ttl_s = (unsigned)v;
            break;
        case 'K':
            if (num(optarg, "--etcd-compact", 1000000, &v) < 0 || v == 0)
                return 2;
            o->ha.compact_keys = (unsigned)v;
            break;
        case 'v':
            o->level = mc__log_parse_level(optarg);
            if (o->level < 0) {
                fprintf(stderr, "mooncake-master: error: bad --log-level '%s'\n", optarg);
                return 2;
            }
            break;
        case 'h':
            usage(stdout, argv[0]);
            return 0;
        case 'V':
            printf("mooncake-master %s (protocol %d)\n", MC_VERSION_STRING, MC__PROTO_SESSION);
            return 0;
        default:
            usage(stderr, argv[0]);
            return 2;
        }
    }
    if (optind < argc) {
        usage(stderr, argv[0]);
        return 2;
    }
    return -1;
}

/*
 * Starts logging, raises the descriptor limit, parses the listen address
 * into *addr, loads the secret into *secret (when a file is given) and
 * blocks the signals that stop the master (sigs), which a signalfd takes
 * later. Returns 0, or 2 (logged) for a bad address or secret.
 */
static int prepare(const struct options *o, mc__addr_t *addr, mc__secret_t **secret, sigset_t *sigs)
{
    mc__log_init("mooncake-master", o->level);
    if (mc_nofile_raise() < 0)
        mc__log(MC__LOG_INFO, "cannot raise the descriptor limit: the connection limit follows it");
    int rc = mc__addr_parse(o->listen, 50051, addr);
    if (rc < 0) {
        mc__log(MC__LOG_ERROR, "bad --listen '%s': %s", o->listen, mc_strerror(rc));
        return 2;
    }
    if (o->secret_file && mc__secret_load(o->secret_file, secret) < 0)
        return 2; /* the reason is logged */
    sigemptyset(sigs);
    sigaddset(sigs, SIGINT);
    sigaddset(sigs, SIGTERM);
    sigprocmask(SIG_BLOCK, sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

/* Makes the loop, the master logic, its service and the segment, if any.
 * Returns 0 or a negative code (logged). */
static int open_master(const struct options *o, struct master *mp)
{
    int rc;
    if ((rc = mc_loop_new(&mp->loop)) < 0 || (rc = mc__master_new(&mp->m, &o->mo)) < 0 ||
        (rc = mc__svc_new(&mp->svc, mp->m, &o->so)) < 0) {
        mc__log(MC__LOG_ERROR, "starting: %s", mc_strerror(rc));
        return rc;
    }
    if (seg_size) {
        /* In a memfd, so that co-located clients can map it (shm.h). */
        if ((rc = mc__seg_create(seg_size, "mooncake-segment", &seg_mem)) < 0 ||
            mc__svc_add_local_segment(mp->svc, SEG_LOCAL, seg_size, NULL)) {
            mc__log(MC__LOG_ERROR, "cannot host a segment of %llu bytes: %s",
                    (unsigned long long)seg_size, mc_strerror(rc < 0 ? rc : -ENOMEM));
            return rc < 0 ? rc : -ENOMEM;
        }
    }
    return 0;
}

/* Serves the service and the segment on addr. Returns 0 or a negative
 * code (logged). */
static int serve(const struct options *o, const mc__addr_t *addr, struct master *mp)
{
    int rc;
    if (o->ha.endpoints && (rc = mc__ha_new(mp->loop, mp->svc, &o->ha, &mp->ha)) < 0) {
        mc__log(MC__LOG_ERROR, "--etcd %s --cluster-id %s: %s", o->ha.endpoints,
                o->ha.cluster ? o->ha.cluster : MC__HA_CLUSTER_DEFAULT, mc_strerror(rc));
        return rc;
    }
    mc__server_opts_t sro = {.svc = mp->svc,
                             .ha = mp->ha,
                             .seg_lookup = seg_lookup,
                             .seg_arg = mp,
                             .secret = mp->secret,
                             .shm = !o->no_shm && seg_size,
                             .idle_timeout_ms = o->idle_ms,
                             .handshake_timeout_ms = o->handshake_ms,
                             .max_conns = o->max_conns,
                             .answer_budget = (size_t)o->answer_budget};
    rc = mc__server_new(&mp->srv, mp->loop, addr, &sro);
    if (rc < 0) {
        mc__log(MC__LOG_ERROR, "cannot listen on %s: %s", o->listen, mc_strerror(rc));
        return rc;
    }
    mc__svc_set_local_addr(mp->svc, mc__server_addr(mp->srv));
    mc__svc_set_local_enforced(mp->svc, seg_enforced, mp);
    if (mp->ha && (rc = mc__ha_start(mp->ha, mc__server_addr(mp->srv))) < 0)
        return rc;
    if (mp->ha && seg_size)
        mc__log(MC__LOG_WARN, "--segment-size with --etcd: the objects in this master's own "
                              "segment do not survive a failover (give the memory to nodes)");
    return 0;
}

/* With a segment and an RDMA device (--protocol rdma or auto), also serves
 * the segment over RDMA; its record goes out with every replica set that
 * names it. Returns 0, or a negative code (logged) when --protocol rdma
 * cannot be had. */
static int serve_rdma(const struct options *o, struct master *mp)
{
    int rc;
    if (seg_size && (rc = mc__rdma_open(mp->loop, o->xport, o->rdma_devices, 0, &mp->rdma)) < 0) {
        mc__log(MC__LOG_ERROR, "protocol rdma: %s",
                rc == -ENODEV ? "no usable RDMA device" : mc_strerror(rc));
        return rc;
    }
    if (!mp->rdma)
        return 0;
    char host[MC__ADDR_STRLEN], *rec = NULL;
    size_t rec_len = 0;
    rc = mc__rdma_host_of(mc__server_addr(mp->srv), host, sizeof(host));
    if (rc == 0)
        rc =
            mc__rdma_serve(mp->rdma, seg_mem.base, seg_mem.size, host, &mp->seg_mr, &rec, &rec_len);
    static const uint32_t local = SEG_LOCAL;
    if (rc >= 0)
        mc__rdma_fence_segment(&mp->fencer, mp->rdma, mp->srv, &local, seg_mem.fence);
    if (rc >= 0)
        rc = mc__svc_set_local_rdma(mp->svc, rec, rec_len, mp->fencer.ctx != NULL);
    free(rec);
    if (rc < 0 && o->xport == MC__XPORT_RDMA) {
        mc__log(MC__LOG_ERROR, "cannot serve the segment over RDMA on %s: %s", host,
                mc_strerror(rc));
        return rc;
    }
    if (rc < 0)
        mc__log(MC__LOG_INFO, "the segment is served over TCP only: %s", mc_strerror(rc));
    return 0;
}

/* A scrape, on the loop: the master's and its server's metrics. Serving
 * while the server is up. */
static int collect(void *arg, mc_metrics_t *m)
{
    struct master *mp = arg;
    if (!mp->srv)
        return -ESHUTDOWN;
    if (m) {
        mc__metrics_master(m, mp->m, mp->svc, mc_loop_now_ms());
        mc__metrics_server(m, mp->srv);
        if (mp->ha)
            mc__metrics_ha(m, mp->ha);
    }
    return 0;
}

/* With --metrics, serves the metrics over HTTP. Returns 0 or a negative
 * code (logged). */
static int serve_metrics(const struct options *o, struct master *mp)
{
    if (!o->metrics)
        return 0;
    int rc = mc_metrics_serve(&mp->metrics, o->metrics, mp->loop, collect, mp);
    if (rc < 0) {
        mc__log(MC__LOG_ERROR, "cannot serve metrics on %s: %s", o->metrics, mc_strerror(rc));
        return rc;
    }
    mc__log(MC__LOG_INFO, "metrics on port %d (/metrics, /health)",
            mc_metrics_server_port(mp->metrics));
    return 0;
}

/* Closes the server, once the segment's fence is taken back from the RDMA
 * listener (whose calls reach the server's data plane). */
static void server_close(struct master *mp)
{
    mc__rdma_unfence(&mp->fencer);
    mc__server_close(mp->srv);
    mp->srv = NULL;
}

/*
 * Runs the loop until SIGINT or SIGTERM (sigs, blocked), then closes the
 * server and lets the loop finish with its connections. Returns the exit
 * status: 0, or 1 when the loop or the signalfd failed.
 */
static int run_until_signal(struct master *mp, const sigset_t *sigs)
{
    int sfd = signalfd(-1, sigs, SFD_CLOEXEC | SFD_NONBLOCK);
    mc_poll_t sig = {.data = mp->loop};
    if (sfd < 0 || mc_poll_start(mp->loop, &sig, sfd, POLLIN, on_signal) < 0)
        return 1;
    mc__log(MC__LOG_INFO, "listening on %s (segment %llu bytes%s)", mc__server_addr(mp->srv),
            (unsigned long long)seg_size, mp->secret ? ", authentication required" : "");
    int rc = mc_loop_run(mp->loop);
    mc_poll_stop(&sig);
    close(sfd);
    /* Close the connections and let the loop finish with them (and a
     * standby take over at once). */
    mc__ha_resign(mp->ha);
    server_close(mp);
    mc_timer_t drain = {.data = mp->loop};
    mc_timer_start(mp->loop, &drain, 50, 0, on_drained);
    mc_loop_run(mp->loop);
    return rc < 0 ? 1 : 0;
}

/* Frees what prepare(), open_master(), serve() and serve_rdma() made. */
static void free_master(struct master *mp)
{
    mc_metrics_stop(mp->metrics); /* first: its scrapes use the rest */
    server_close(mp);
    mc__ha_free(mp->ha);
    mc__svc_free(mp->svc);
    mc__master_free(mp->m);
    mc__rdma_deregister(mp->seg_mr);
    mc__rdma_ctx_free(mp->rdma);
    if (mp->loop)
        mc_loop_free(mp->loop);
    mc__seg_destroy(&seg_mem);
    mc__secret_free(mp->secret);
}

static char **self_argv;

/* The lease is gone (server/ha.h): this process's state must not be served
 * again. It starts afresh, as a candidate, in the same process. */
static void on_deposed(void *arg)
{
    (void)arg;
    mc__log(MC__LOG_WARN, "starting again as a candidate");
    close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    execv("/proc/self/exe", self_argv);
    mc__log(MC__LOG_ERROR, "cannot start again: %s", strerror(errno));
    _exit(1);
}

int main(int argc, char **argv)
{
    struct options o = {0};
    struct master mp = {0};
    mc__addr_t addr;
    sigset_t sigs;
    int ret = parse_options(argc, argv, &o);
    if (ret >= 0)
        return ret;
    self_argv = argv;
    o.ha.deposed = on_deposed;
    o.ha.timeout_ms = o.ha.ttl_s * 1000 / 3 > 500 ? o.ha.ttl_s * 1000 / 3 : 500;
    if ((ret = prepare(&o, &addr, &mp.secret, &sigs)) != 0)
        return ret;
    ret = 1;
    if (open_master(&o, &mp) == 0 && serve(&o, &addr, &mp) == 0 && serve_rdma(&o, &mp) == 0 &&
        serve_metrics(&o, &mp) == 0)
        ret = run_until_signal(&mp, &sigs);
    free_master(&mp);
    return ret;
}
