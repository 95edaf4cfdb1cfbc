/*
 * mooncake-cli.c - mooncake-cli: the store from the shell, through the public C API
 * only (what a libmooncake user writes).
 *
 *   mooncake-cli --master HOST:PORT put KEY [FILE]   (FILE or stdin)
 *   mooncake-cli --master HOST:PORT get KEY [FILE]   (FILE or stdout)
 *   ... stat KEY | rm [-f] KEY | ls [PREFIX] | stats | node
 *
 * "node" contributes --segment-size bytes to the cluster until SIGINT or
 * SIGTERM. Exit status: 0 success, 1 a store error (printed), 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mooncake/mooncake.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: mooncake-cli [--master ADDR] [--segment-size SIZE] [--listen ADDR]\n"
               "                    [--timeout-ms N] [--replicas N] [--pin hard|soft]\n"
               "                    [--auth-secret-file F] [--no-shm] [--protocol P]\n"
               "                    [--rdma-device NAME] [--preferred ADDR] [--repeat N]\n"
               "                    [--interval-ms N]\n"
               "                    [--stats] COMMAND [ARGS]\n"
               "commands:\n"
               "    put KEY [FILE]   store FILE (default: standard input) under KEY\n"
               "    get KEY [FILE]   write KEY's value to FILE (default: standard output)\n"
               "    stat KEY         print size, version, mode and replicas\n"
               "    rm [-f] KEY      remove KEY (-f: even while leased or open)\n"
               "    ls [PREFIX]      list keys under PREFIX\n"
               "    stats            print the master's counters (nodes, repairs, ...)\n"
               "    node             contribute --segment-size bytes until interrupted\n"
               "options:\n"
               "    --listen ADDR    node: where the segment's data is served (default\n"
               "                     127.0.0.1:0; beyond loopback only with\n"
               "                     --auth-secret-file)\n"
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
               "    --stats          print the bytes moved per transport, and the master's\n"
               "                     counters, to stderr at the end\n");
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "mooncake-cli: %s: %s\n", what, mc_strerror(rc));
    return 1;
}

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
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

static uint32_t pin = MC_PIN_NONE;
static const char *preferred;
static unsigned long repeat = 1, interval_ms;

static int cmd_put(mc_store_t *s, int argc, char **argv, uint32_t replicas)
{
    if (argc < 1 || argc > 2)
        return -1;
    FILE *f = argc == 2 ? fopen(argv[1], "rb") : stdin;
    if (!f)
        return fail(argv[1], -errno);
    size_t len;
    char *buf = read_all(f, &len);
    if (f != stdin)
        fclose(f);
    if (!buf)
        return fail("reading", -ENOMEM);
    mc_put_opts_t po = {.replica_num = replicas, .pin = pin, .preferred_segment = preferred};
    int rc = mc_put(s, argv[0], strlen(argv[0]), buf, len, &po);
    free(buf);
    return rc < 0 ? fail(argv[0], rc) : 0;
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
    /* The object may change between stat and get: read what get says. */
    for (unsigned long i = 0; i < repeat && rc >= 0; i++) {
        if (i && interval_ms)
            usleep((useconds_t)(interval_ms * 1000));
        rc = mc_get(s, argv[0], strlen(argv[0]), 0, buf, cap, &st);
    }
    if (rc >= 0 && st.size > cap)
        rc = -EAGAIN;
    if (rc < 0) {
        free(buf);
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
    return bad ? fail("writing", -EIO) : 0;
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

/* Prints the master's counters as "name value" to f, on one line with a
 * prefix or one per line. */
static int print_master_stats(mc_store_t *s, FILE *f, const char *prefix)
{
    mc_counter_t c[64];
    int n = mc_master_stats(s, c, 64);
    if (n < 0)
        return fail("master stats", n);
    if (prefix)
        fprintf(f, "%s", prefix);
    for (int i = 0; i < n; i++)
        fprintf(f, prefix ? " %s %llu" : "%s %llu\n", c[i].name, (unsigned long long)c[i].value);
    if (prefix)
        fprintf(f, "\n");
    return 0;
}

static int cmd_node(void)
{
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    int sig;
    fprintf(stderr, "mooncake-cli: node up\n");
    sigwait(&sigs, &sig);
    return 0;
}

/*
 * Parses the options before the command into o, *replicas and *stats (and
 * the globals above). Returns -1 to go on, or the status to exit with: 0
 * after --help, 2 after a bad option or no command (said on stderr).
 */
static int parse_options(int argc, char **argv, mc_store_opts_t *o, uint32_t *replicas, int *stats)
{
    static const struct option longopts[] = {
        {"master", required_argument, NULL, 'm'},
        {"segment-size", required_argument, NULL, 's'},
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
        case 'l':
            o->listen = optarg;
            break;
        case 't':
            o->timeout_ms = strtoull(optarg, NULL, 10);
            break;
        case 'r':
            *replicas = (uint32_t)strtoul(optarg, NULL, 10);
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

/* Runs the command cmd with args[0..nargs) on s. Returns its status, or -1
 * for an unknown command or a wrong number of arguments. */
static int run_command(mc_store_t *s, const char *cmd, int nargs, char **args, uint32_t replicas)
{
    if (strcmp(cmd, "put") == 0)
        return cmd_put(s, nargs, args, replicas);
    if (strcmp(cmd, "get") == 0)
        return cmd_get(s, nargs, args);
    if (strcmp(cmd, "stat") == 0)
        return cmd_stat(s, nargs, args);
    if (strcmp(cmd, "rm") == 0)
        return cmd_rm(s, nargs, args);
    if (strcmp(cmd, "ls") == 0)
        return cmd_ls(s, nargs, args);
    if (strcmp(cmd, "stats") == 0 && nargs == 0)
        return print_master_stats(s, stdout, NULL);
    if (strcmp(cmd, "node") == 0 && nargs == 0)
        return cmd_node();
    return -1;
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
    print_master_stats(s, stderr, "master:");
}

int main(int argc, char **argv)
{
    mc_store_opts_t o;
    uint32_t replicas = 1;
    int stats = 0;
    mc_store_opts_init(&o);
    o.segment_size = 0;
    int rc = parse_options(argc, argv, &o, &replicas, &stats);
    if (rc >= 0)
        return rc;
    const char *cmd = argv[optind];
    int nargs = argc - optind - 1;
    char **args = argv + optind + 1;
    if (strcmp(cmd, "node") == 0) {
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
    if (rc < 0)
        return fail(o.master ? o.master : "opening the store", rc);
    rc = run_command(s, cmd, nargs, args, replicas);
    if (stats)
        print_stats(s);
    mc_store_close(s);
    if (rc < 0) {
        usage(stderr);
        return 2;
    }
    return rc;
}
