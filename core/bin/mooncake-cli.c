/*
 * mooncake-cli.c - mooncake-cli: the store from the shell, through the public C API
 * only (what a libmooncake user writes).
 *
 *   mooncake-cli --master HOST:PORT put KEY [FILE]   (FILE or stdin)
 *   mooncake-cli --master HOST:PORT get KEY [FILE]   (FILE or stdout)
 *   ... stat KEY | rm [-f] KEY | ls [PREFIX] | stats [--json] | node
 *
 * `mooncake-cli --help` lists the commands, `mooncake-cli COMMAND --help`
 * tells one. put and get of 1 MiB or more draw a progress line on stderr
 * when it is a terminal (and the data itself is not on one). "node"
 * contributes --segment-size bytes to the cluster until SIGINT or SIGTERM.
 * Exit status: 0 success, 1 a store error (printed), 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mooncake/metrics.h"
#include "mooncake/mooncake.h"

/* One command: its synopsis, a line for the command list, and what
 * `mooncake-cli NAME --help` adds; run() returns the exit status, or -1
 * for wrong arguments. */
typedef struct command {
    const char *name;
    const char *synopsis;
    const char *summary;
    const char *help;
    int (*run)(mc_store_t *s, int argc, char **argv);
} command_t;

static const command_t commands[];

static void usage(FILE *f)
{
    fprintf(f, "usage: mooncake-cli [--master ADDR] [--segment-size SIZE] [--segment-file F]\n"
               "                    [--listen ADDR]\n"
               "                    [--timeout-ms N] [--replicas N] [--pin hard|soft]\n"
               "                    [--auth-secret-file F] [--no-shm] [--protocol P]\n"
               "                    [--rdma-device NAME] [--preferred ADDR] [--repeat N]\n"
               "                    [--interval-ms N] [--no-progress] [--metrics ADDR]\n"
               "                    [--stats] [--log-level L] COMMAND [ARGS]\n"
               "commands (mooncake-cli COMMAND --help tells more):\n");
    for (const command_t *c = commands; c->name; c++)
        fprintf(f, "    %-16s %s\n", c->synopsis, c->summary);
    fprintf(f, "options:\n"
               "    --master ADDR    the store: a master or an embedded store's socket\n"
               "                     (host:port, unix:/path); none: an embedded store in\n"
               "                     this process, gone when it exits\n"
               "    --segment-size SIZE  node: bytes to contribute (e.g. 1G)\n"
               "    --segment-file F node: the segment is the first SIZE bytes of the\n"
               "                     existing file F (on /dev/shm, a DAX device's file\n"
               "                     system, ...), mapped shared, not anonymous memory\n"
               "    --listen ADDR    node: where the segment's data is served (default\n"
               "                     127.0.0.1:0; beyond loopback only with\n"
               "                     --auth-secret-file)\n"
               "    --timeout-ms N   bound on every network wait (default 5000)\n"
               "    --replicas N     put: copies on different nodes (default 1)\n"
               "    --pin hard|soft  put: never evict (hard) or evict last (soft)\n"
               "    --auth-secret-file F  the cluster's shared secret (a file of mode 600)\n"
               "    --no-shm         move no bytes through shared memory with co-located\n"
               "                     nodes (nor offer this node's segment that way)\n"
               "    --protocol P     data transport: tcp (default), rdma (fails without a\n"
               "                     usable device; a node listens for RDMA on the host of\n"
               "                     --listen, which must be on the device) or auto\n"
               "    --rdma-device NAME  verbs device(s) to use, comma-separated (default:\n"
               "                     the first)\n"
               "    --log-level L    error, warn (default), info, debug\n"
               "    --preferred ADDR put: place the first replica on the node whose data\n"
               "                     address is ADDR (host:port) when it has room\n"
               "    --repeat N       get: read the value N times through one store (the\n"
               "                     last read is written out)\n"
               "    --interval-ms N  get --repeat: pause N ms between reads\n"
               "    --no-progress    put, get: no progress line, even on a terminal\n"
               "    --metrics ADDR   serve the store's Prometheus metrics and /health over\n"
               "                     HTTP while the command runs (a node: until it stops)\n"
               "                     on ADDR: PORT (on 127.0.0.1) or HOST:PORT\n"
               "    --stats          print the bytes moved per transport, and the master's\n"
               "                     counters, to stderr at the end\n"
               "    -h, --help       this text\n");
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "mooncake-cli: %s: %s\n", what, mc_strerror(rc));
    return 1;
}

static uint32_t pin = MC_PIN_NONE, replicas = 1;
static const char *preferred;
static unsigned long repeat = 1, interval_ms;
static int no_progress;
static const char *metrics_addr;

/* ---- progress ----
 *
 * A one-line progress report, hand-written: Debian 12 packages no C library
 * for one (only Rust and Haskell crates), and this is a carriage return and
 * a few numbers. It is drawn on stderr at most every 100 ms, then once more
 * with the totals when the transfer ends. */

#define PROGRESS_MIN (1u << 20) /* smaller transfers end before anyone reads a line */

typedef struct progress {
    const char *label;
    uint64_t total; /* bytes expected; 0: unknown (stdin) */
    double start, last;
    int on; /* 1: draw (stderr is a terminal, the data is not on one) */
} progress_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sets p up for a transfer of total bytes (0: unknown); data_fd is the
 * descriptor the data comes from or goes to (-1: a file of ours). */
static void progress_init(progress_t *p, const char *label, uint64_t total, int data_fd)
{
    p->label = label;
    p->total = total;
    p->start = p->last = now_s();
    p->on = !no_progress && isatty(STDERR_FILENO) && !(data_fd >= 0 && isatty(data_fd));
}

/* Writes n bytes as e.g. "12.5 MiB" into buf. */
static const char *human(char *buf, size_t len, double n)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (n >= 1024 && u < 4) {
        n /= 1024;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", n, units[u]);
    return buf;
}

/* Redraws the line with done bytes so far; final: the summary, and a
 * newline. Draws nothing below PROGRESS_MIN bytes. */
static void progress_draw(progress_t *p, uint64_t done, int final)
{
    double t = now_s();
    if (!p->on || (!final && t - p->last < 0.1) || (p->total ? p->total : done) < PROGRESS_MIN)
        return;
    p->last = t;
    double secs = t - p->start, rate = secs > 0 ? (double)done / secs : 0;
    char a[32], b[32], r[32];
    if (final) {
        fprintf(stderr, "\r%s  %s in %.1f s, %s/s\033[K\n", p->label, human(a, sizeof(a), done),
                secs, human(r, sizeof(r), rate));
    } else if (p->total) {
        char eta[32] = "--";
        if (rate > 0 && done <= p->total)
            snprintf(eta, sizeof(eta), "%.0fs", (double)(p->total - done) / rate);
        fprintf(stderr, "\r%s  %s / %s  %3.0f%%  %s/s  ETA %s\033[K", p->label,
                human(a, sizeof(a), done), human(b, sizeof(b), p->total),
                100.0 * (double)done / (double)p->total, human(r, sizeof(r), rate), eta);
    } else {
        fprintf(stderr, "\r%s  %s  %s/s\033[K", p->label, human(a, sizeof(a), done),
                human(r, sizeof(r), rate));
    }
    fflush(stderr);
}

/* Bytes s has moved through every transport since it was opened. */
static uint64_t bytes_moved(mc_store_t *s)
{
    mc_store_stats_t st;
    mc_store_stats(s, &st);
    return st.local_bytes + st.shm_bytes + st.tcp_bytes + st.rdma_bytes;
}

/* An async call waited for by the main thread. */
typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, result;
} waiter_t;

static void waiter_cb(void *arg, int result)
{
    waiter_t *w = arg;
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    w->result = result;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/*
 * Waits for the call that was given waiter_cb and w (rc: what the call
 * returned; a failed call never calls back). Meanwhile draws p with the
 * bytes s moved since `base`, divided by `copies` (a put moves each byte
 * once per replica): the store counts each piece (at most 4 MiB) as it
 * completes. Returns the call's result.
 */
static int wait_moving(waiter_t *w, int rc, mc_store_t *s, progress_t *p, uint64_t base,
                       unsigned copies)
{
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&w->mu);
    while (!w->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        if (!w->done) {
            uint64_t done = (bytes_moved(s) - base) / copies;
            progress_draw(p, p->total && done > p->total ? p->total : done, 0);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return w->result;
}

static char *read_all(FILE *f, size_t *len, progress_t *p)
{
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        progress_draw(p, n, 0);
        if (got == 0)
            break;
        if (n == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
        }
    }
    *len = n;
    return buf;
}

/* ---- the commands ---- */

static int cmd_put(mc_store_t *s, int argc, char **argv)
{
    if (argc < 1 || argc > 2)
        return -1;
    FILE *f = argc == 2 ? fopen(argv[1], "rb") : stdin;
    if (!f)
        return fail(argv[1], -errno);
    int data_fd = f == stdin ? STDIN_FILENO : -1;
    struct stat fst;
    uint64_t expect =
        fstat(fileno(f), &fst) == 0 && S_ISREG(fst.st_mode) ? (uint64_t)fst.st_size : 0;
    char label[80];
    snprintf(label, sizeof(label), "put %.60s (reading)", argv[0]);
    progress_t p;
    progress_init(&p, label, expect, data_fd);
    size_t len;
    char *buf = read_all(f, &len, &p);
    if (f != stdin)
        fclose(f);
    if (!buf)
        return fail("reading", -ENOMEM);
    snprintf(label, sizeof(label), "put %.60s", argv[0]);
    progress_init(&p, label, len, data_fd);
    mc_put_opts_t po = {.replica_num = replicas, .pin = pin, .preferred_segment = preferred};
    waiter_t w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    uint64_t base = bytes_moved(s);
    int rc = mc_put_async(s, argv[0], strlen(argv[0]), buf, len, &po, waiter_cb, &w);
    rc = wait_moving(&w, rc, s, &p, base, replicas ? replicas : 1);
    free(buf);
    if (rc < 0) {
        if (p.on && p.last > p.start)
            fputc('\n', stderr); /* below the unfinished line */
        return fail(argv[0], rc);
    }
    progress_draw(&p, len, 1);
    return 0;
}

static int cmd_get(mc_store_t *s, int argc, char **argv)
{
    if (argc < 1 || argc > 2)
        return -1;
    mc_stat_t st;
    int rc = mc_stat(s, argv[0], strlen(argv[0]), &st);
    if (rc < 0)
        return fail(argv[0], rc);
    size_t cap = st.size ? st.size : 1;
    char *buf = malloc(cap);
    if (!buf)
        return fail(argv[0], -ENOMEM);
    char label[80];
    snprintf(label, sizeof(label), "get %.60s", argv[0]);
    progress_t p;
    progress_init(&p, label, st.size * repeat, argc == 2 ? -1 : STDOUT_FILENO);
    uint64_t base = bytes_moved(s);
    /* The object may change between stat and get: read what get says. */
    for (unsigned long i = 0; i < repeat && rc >= 0; i++) {
        if (i && interval_ms)
            usleep((useconds_t)(interval_ms * 1000));
        waiter_t w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
        rc = mc_get_async(s, argv[0], strlen(argv[0]), 0, buf, cap, &st, waiter_cb, &w);
        rc = wait_moving(&w, rc, s, &p, base, 1);
        progress_draw(&p, bytes_moved(s) - base, 0); /* between repeats too */
    }
    if (rc >= 0 && st.size > cap)
        rc = -EAGAIN;
    if (rc < 0) {
        free(buf);
        if (p.on && p.last > p.start)
            fputc('\n', stderr);
        return fail(argv[0], rc);
    }
    FILE *f = argc == 2 ? fopen(argv[1], "wb") : stdout;
    if (!f) {
        free(buf);
        return fail(argv[1], -errno);
    }
    size_t put = fwrite(buf, 1, (size_t)rc, f);
    int bad = (f != stdout ? fclose(f) : fflush(f)) != 0 || put != (size_t)rc;
    free(buf);
    if (bad)
        return fail("writing", -EIO);
    progress_draw(&p, (uint64_t)rc * repeat, 1);
    return 0;
}

static int cmd_stat(mc_store_t *s, int argc, char **argv)
{
    if (argc != 1)
        return -1;
    mc_stat_t st;
    int rc = mc_stat(s, argv[0], strlen(argv[0]), &st);
    if (rc < 0)
        return fail(argv[0], rc);
    printf("size %llu version %llu mode %o replicas %u mtime_ns %lld\n",
           (unsigned long long)st.size, (unsigned long long)st.version, st.mode, st.replicas,
           (long long)st.mtime_ns);
    return 0;
}

static int cmd_rm(mc_store_t *s, int argc, char **argv)
{
    unsigned flags = 0;
    if (argc == 2 && strcmp(argv[0], "-f") == 0) {
        flags = MC_REMOVE_FORCE;
        argv++;
        argc--;
    }
    if (argc != 1)
        return -1;
    int rc = mc_remove(s, argv[0], strlen(argv[0]), flags);
    return rc < 0 ? fail(argv[0], rc) : 0;
}

static int cmd_ls(mc_store_t *s, int argc, char **argv)
{
    if (argc > 1)
        return -1;
    const char *prefix = argc ? argv[0] : "";
    char *after = NULL;
    size_t alen = 0;
    for (;;) {
        mc_list_t *l = NULL;
        int rc = mc_list(s, prefix, strlen(prefix), after, alen, 0, 1000, &l);
        if (rc < 0) {
            free(after);
            return fail("ls", rc);
        }
        for (size_t i = 0; i < l->n; i++)
            printf("%llu\t%s\n", (unsigned long long)l->entries[i].st.size, l->entries[i].key);
        int more = l->more;
        free(after);
        after = more ? strndup(l->next, l->next_len) : NULL;
        alen = more ? l->next_len : 0;
        mc_list_free(l);
        if (!more)
            return 0;
    }
}

/* The master's counter called name among c[0..n), or 0. */
static uint64_t counter(const mc_counter_t *c, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(c[i].name, name) == 0)
            return c[i].value;
    return 0;
}

/* Prints the state as one JSON object (jansson). Returns the status. */
static int print_stats_json(const mc_space_t *sp, const mc_counter_t *c, int n)
{
    json_t *counters = json_object(), *o = json_object();
    for (int i = 0; i < n; i++)
        json_object_set_new(counters, c[i].name, json_integer((json_int_t)c[i].value));
    json_object_set_new(o, "nodes", json_integer((json_int_t)counter(c, n, "nodes")));
    json_object_set_new(o, "segments", json_integer((json_int_t)counter(c, n, "segments")));
    json_object_set_new(o, "total_bytes", json_integer((json_int_t)sp->total));
    json_object_set_new(o, "used_bytes", json_integer((json_int_t)sp->used));
    json_object_set_new(o, "objects", json_integer((json_int_t)sp->objects));
    json_object_set_new(o, "evicted", json_integer((json_int_t)sp->evicted));
    json_object_set_new(o, "counters", counters);
    int rc = json_dumpf(o, stdout, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    return rc < 0 || printf("\n") < 0 ? fail("writing", -EIO) : 0;
}

/* stats [--json]: the cluster's state from mc_statfs() (space, objects)
 * and mc_master_stats() (nodes, segments and the master's counters). */
static int cmd_stats(mc_store_t *s, int argc, char **argv)
{
    int json = argc == 1 && strcmp(argv[0], "--json") == 0;
    if (argc > json)
        return -1;
    mc_space_t sp;
    int rc = mc_statfs(s, &sp);
    if (rc < 0)
        return fail("statfs", rc);
    mc_counter_t c[64];
    int n = mc_master_stats(s, c, 64);
    if (n < 0)
        return fail("master stats", n);
    if (json)
        return print_stats_json(&sp, c, n);
    char tot[32], used[32], pct[48];
    human(tot, sizeof(tot), (double)sp.total);
    human(used, sizeof(used), (double)sp.used);
    snprintf(pct, sizeof(pct), "%s (%.1f%%)", used,
             sp.total ? 100.0 * (double)sp.used / (double)sp.total : 0.0);
    printf("%-6s %-9s %-11s %-22s %-9s %s\n", "NODES", "SEGMENTS", "CAPACITY", "USED", "OBJECTS",
           "EVICTED");
    printf("%-6llu %-9llu %-11s %-22s %-9llu %llu\n", (unsigned long long)counter(c, n, "nodes"),
           (unsigned long long)counter(c, n, "segments"), tot, pct, (unsigned long long)sp.objects,
           (unsigned long long)sp.evicted);
    printf("\n%-20s %s\n", "COUNTER", "VALUE");
    for (int i = 0; i < n; i++)
        if (strcmp(c[i].name, "nodes") && strcmp(c[i].name, "segments"))
            printf("%-20s %llu\n", c[i].name, (unsigned long long)c[i].value);
    return 0;
}

static int cmd_node(mc_store_t *s, int argc, char **argv)
{
    if (argc)
        return -1;
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    int sig;
    fprintf(stderr, "mooncake-cli: node up, serving %s\n", mc_store_served_addr(s));
    sigwait(&sigs, &sig);
    return 0;
}

static const command_t commands[] = {
    {"put", "put KEY [FILE]", "store FILE (default: standard input) under KEY",
     "Replaces KEY's value. Options (before the command): --replicas N, --pin hard|soft,\n"
     "--preferred ADDR, --no-progress. From 1 MiB on, a progress line (bytes, rate,\n"
     "ETA) is drawn on stderr when it is a terminal and the input is not.\n",
     cmd_put},
    {"get", "get KEY [FILE]", "write KEY's value to FILE (default: standard output)",
     "Options (before the command): --repeat N, --interval-ms N, --no-progress.\n"
     "From 1 MiB on, a progress line (bytes, rate, ETA) is drawn on stderr when it is\n"
     "a terminal and the output is not.\n",
     cmd_get},
    {"stat", "stat KEY", "print size, version, mode and replicas",
     "Prints one line: size, version, mode (octal), replicas, mtime_ns.\n", cmd_stat},
    {"rm", "rm [-f] KEY", "remove KEY",
     "  -f    remove even while a read lease or an open handle holds it\n", cmd_rm},
    {"ls", "ls [PREFIX]", "list keys under PREFIX",
     "Prints one line per key: its size, a tab, the key.\n", cmd_ls},
    {"stats", "stats [--json]", "print the cluster's state and the master's counters",
     "Prints nodes, segments, capacity, use, objects and evictions as a table, then\n"
     "the master's counters (puts, handles, nodes_expired, objects_lost,\n"
     "replicas_dropped, repair_*; see docs/PROTOCOL.md, STATS).\n"
     "  --json    one JSON object instead: nodes, segments, total_bytes, used_bytes,\n"
     "            objects, evicted, and counters (an object of every counter)\n",
     cmd_stats},
    {"node", "node", "contribute --segment-size bytes until interrupted",
     "Joins --master's cluster with a segment of --segment-size bytes served on\n"
     "--listen (options before the command), until SIGINT or SIGTERM.\n",
     cmd_node},
    {0},
};

static const command_t *find_command(const char *name)
{
    for (const command_t *c = commands; c->name; c++)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

static void command_usage(const command_t *c, FILE *f)
{
    fprintf(f, "usage: mooncake-cli [OPTIONS] %s\n%s.\n%s", c->synopsis, c->summary, c->help);
}

/*
 * Parses the options before the command into o and *stats (and the globals
 * above). Returns -1 to go on, or the status to exit with: 0 after --help,
 * 2 after a bad option or no command (said on stderr).
 */
static int parse_options(int argc, char **argv, mc_store_opts_t *o, int *stats)
{
    static const struct option longopts[] = {
        {"master", required_argument, NULL, 'm'},
        {"segment-size", required_argument, NULL, 's'},
        {"segment-file", required_argument, NULL, 'F'},
        {"listen", required_argument, NULL, 'l'},
        {"timeout-ms", required_argument, NULL, 't'},
        {"replicas", required_argument, NULL, 'r'},
        {"pin", required_argument, NULL, 'P'},
        {"auth-secret-file", required_argument, NULL, 'a'},
        {"no-shm", no_argument, NULL, 'S'},
        {"stats", no_argument, NULL, 'T'},
        {"protocol", required_argument, NULL, 'X'},
        {"rdma-device", required_argument, NULL, 'D'},
        {"log-level", required_argument, NULL, 'v'},
        {"preferred", required_argument, NULL, 'p'},
        {"repeat", required_argument, NULL, 'n'},
        {"interval-ms", required_argument, NULL, 'i'},
        {"no-progress", no_argument, NULL, 'Q'},
        {"metrics", required_argument, NULL, 'M'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm':
            o->master = optarg;
            break;
        case 's':
            if (mc_parse_size(optarg, &o->segment_size) < 0) {
                fprintf(stderr, "mooncake-cli: bad --segment-size '%s'\n", optarg);
                return 2;
            }
            break;
        case 'F':
            o->segment_file = optarg;
            break;
        case 'l':
            o->listen = optarg;
            break;
        case 't':
            o->timeout_ms = strtoull(optarg, NULL, 10);
            break;
        case 'r':
            replicas = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'a':
            o->secret_file = optarg;
            break;
        case 'S':
            o->no_shm = 1;
            break;
        case 'T':
            *stats = 1;
            break;
        case 'X':
            if (strcmp(optarg, "tcp") && strcmp(optarg, "rdma") && strcmp(optarg, "auto")) {
                fprintf(stderr, "mooncake-cli: --protocol takes tcp, rdma or auto\n");
                return 2;
            }
            o->protocol = optarg;
            break;
        case 'D':
            o->rdma_devices = optarg;
            break;
        case 'p':
            preferred = optarg;
            break;
        case 'i':
            interval_ms = strtoul(optarg, NULL, 10);
            break;
        case 'n':
            repeat = strtoul(optarg, NULL, 10);
            if (repeat == 0) {
                fprintf(stderr, "mooncake-cli: --repeat takes a positive count\n");
                return 2;
            }
            break;
        case 'Q':
            no_progress = 1;
            break;
        case 'M':
            metrics_addr = optarg;
            break;
        case 'v':
            if (mc_log_init("mooncake-cli", optarg) < 0) {
                fprintf(stderr, "mooncake-cli: bad --log-level '%s'\n", optarg);
                return 2;
            }
            break;
        case 'P':
            if (strcmp(optarg, "hard") == 0)
                pin = MC_PIN_HARD;
            else if (strcmp(optarg, "soft") == 0)
                pin = MC_PIN_SOFT;
            else {
                fprintf(stderr, "mooncake-cli: --pin takes hard or soft\n");
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    return -1;
}

/* A scrape, on the store's loop: the store's metrics. */
static int collect(void *arg, mc_metrics_t *m)
{
    return mc_metrics_store(m, arg);
}

/* Prints the master's counters as "name value" on one line after prefix. */
static void print_master_counters(mc_store_t *s, FILE *f, const char *prefix)
{
    mc_counter_t c[64];
    int n = mc_master_stats(s, c, 64);
    if (n < 0) {
        fail("master stats", n);
        return;
    }
    fprintf(f, "%s", prefix);
    for (int i = 0; i < n; i++)
        fprintf(f, " %s %llu", c[i].name, (unsigned long long)c[i].value);
    fprintf(f, "\n");
}

/* --stats: the bytes moved per transport and the master's counters, to
 * stderr. */
static void print_stats(mc_store_t *s)
{
    mc_store_stats_t st;
    mc_store_stats(s, &st);
    fprintf(stderr,
            "stats: local_ops %llu local_bytes %llu shm_ops %llu shm_bytes %llu "
            "tcp_ops %llu tcp_bytes %llu rdma_ops %llu rdma_bytes %llu "
            "rdma_zero_copy_bytes %llu cache_hits %llu\n",
            (unsigned long long)st.local_ops, (unsigned long long)st.local_bytes,
            (unsigned long long)st.shm_ops, (unsigned long long)st.shm_bytes,
            (unsigned long long)st.tcp_ops, (unsigned long long)st.tcp_bytes,
            (unsigned long long)st.rdma_ops, (unsigned long long)st.rdma_bytes,
            (unsigned long long)st.rdma_zero_copy_bytes, (unsigned long long)st.cache_hits);
    print_master_counters(s, stderr, "master:");
}

int main(int argc, char **argv)
{
    mc_store_opts_t o;
    int stats = 0;
    mc_store_opts_init(&o);
    o.segment_size = 0;
    int rc = parse_options(argc, argv, &o, &stats);
    if (rc >= 0)
        return rc;
    const command_t *cmd = find_command(argv[optind]);
    int nargs = argc - optind - 1;
    char **args = argv + optind + 1;
    if (!cmd) {
        fprintf(stderr, "mooncake-cli: no command '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    /* COMMAND --help (or -h first) tells the command; after "--" every
     * argument is taken as it is (a key named --help). */
    if (nargs && strcmp(args[0], "--") == 0) {
        nargs--;
        args++;
    } else {
        for (int i = 0; i < nargs; i++)
            if (strcmp(args[i], "--help") == 0 || (i == 0 && strcmp(args[i], "-h") == 0)) {
                command_usage(cmd, stdout);
                return 0;
            }
    }
    if (cmd->run == cmd_node) {
        /* Block the signals before the store's thread starts. */
        sigset_t sigs;
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGINT);
        sigaddset(&sigs, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    }
    mc_nofile_raise(); /* best effort: a node serves connections */
    mc_store_t *s;
    rc = mc_store_open(&s, &o);
    if (rc < 0 && o.listen && (rc == -EADDRINUSE || rc == -EADDRNOTAVAIL))
        return fail(o.listen, rc); /* the node's own listen, not the master */
    if (rc < 0)
        return fail(o.master ? o.master : "opening the store", rc);
    mc_metrics_server_t *metrics = NULL;
    if (metrics_addr &&
        (rc = mc_metrics_serve(&metrics, metrics_addr, mc_store_loop(s), collect, s)) < 0) {
        mc_store_close(s);
        return fail(metrics_addr, rc);
    }
    rc = cmd->run(s, nargs, args);
    if (stats)
        print_stats(s);
    mc_metrics_stop(metrics);
    mc_store_close(s);
    if (rc < 0) {
        command_usage(cmd, stderr);
        return 2;
    }
    return rc;
}
