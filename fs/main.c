/*
 * main.c - mooncake-fs: options, the FUSE session, and the event loop.
 *
 * One thread runs the fs: the io_uring loop polls the FUSE device and a
 * signalfd; each readable event reads requests (on_fuse()) and hands them
 * to the operations (the table in ops.c), which answer from store
 * completions on this loop. With --threads N, N - 1 workers (workers.c) read the device
 * too: they answer READs from memory and post every other request here.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <execinfo.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fs.h"
#include "metrics.h"
#include "workers.h"
#include "writers.h"

/* --threads by default: one per CPU, up to this many (see --help). */
#define THREADS_DEFAULT_MAX 16
#define THREADS_MAX 256

struct options {
    char *segment_size;
    char *master;
    char *lease_ms;
    char *evict_high;
    char *evict_ratio;
    char *timeout;
    char *listen;
    char *net_timeout;
    char *replicas;
    char *secret_file;
    char *protocol;
    char *rdma_devices;
    char *metrics;
    char *cache;
    char *stream[4]; /* --readahead, --total-readahead, --write-behind, --total-write-behind */
    char *threads;
    unsigned long max_read; /* -o max_read=N, also kept for libfuse */
    int no_shm;
    int help;
    int version;
    char *pos[2]; /* the positional arguments: [SOURCE] MOUNTPOINT */
    int npos;
};

#define OPT(t, p)                                                                                  \
    {                                                                                              \
        t, offsetof(struct options, p), 1                                                          \
    }
/* Every long option --NAME VALUE is also --NAME=VALUE and -o NAME=VALUE, the
 * form an /etc/fstab line (mount.fuse3) passes. */
#define OPT_ARG(name, p) OPT("--" name "=%s", p), OPT("--" name " %s", p), OPT(name "=%s", p)
static const struct fuse_opt option_spec[] = {
    OPT_ARG("segment-size", segment_size),
    OPT_ARG("master", master),
    OPT_ARG("lease-ms", lease_ms),
    OPT_ARG("evict-high", evict_high),
    OPT_ARG("evict-ratio", evict_ratio),
    OPT_ARG("replicas", replicas),
    OPT_ARG("listen", listen),
    OPT_ARG("auth-secret-file", secret_file),
    OPT_ARG("timeout-ms", net_timeout),
    OPT_ARG("cache-timeout", timeout),
    OPT_ARG("cache-mode", cache),
    OPT_ARG("total-readahead", stream[1]),
    OPT_ARG("readahead", stream[0]),
    OPT_ARG("total-write-behind", stream[3]),
    OPT_ARG("write-behind", stream[2]),
    OPT_ARG("threads", threads),
    OPT("--no-shm", no_shm),
    OPT("no-shm", no_shm),
    OPT_ARG("protocol", protocol),
    OPT_ARG("rdma-device", rdma_devices),
    OPT_ARG("metrics", metrics),
    OPT("--help", help),
    OPT("-h", help),
    OPT("--version", version),
    OPT("-V", version),
    FUSE_OPT_END,
};

static void usage(const char *prog)
{
    printf("usage: %s [options] [SOURCE] MOUNTPOINT\n\n"
           "Mounts a Mooncake object store: every key is a file, '/' in a key is a\n"
           "directory level. Without --master the store is embedded in this process.\n"
           "SOURCE, as in an /etc/fstab line, is the master's address (as --master)\n"
           "or 'embedded'; every --NAME VALUE option is also -o NAME=VALUE.\n\n"
           "options:\n"
           "    --segment-size SIZE   memory this node contributes (default 1G;\n"
           "                          units K, M, G, T, e.g. 512M, 4GiB)\n"
           "    --master HOST:PORT    join the cluster of this master (default: an embedded\n"
           "                          store, a one-node cluster of its own)\n"
           "    --listen ADDR         where to serve the protocol: embedded, the master and\n"
           "                          the segment (default: a Unix socket only this user\n"
           "                          may use, named after the mount point, in\n"
           "                          /run/mooncake-fs, $XDG_RUNTIME_DIR/mooncake-fs or\n"
           "                          /tmp/mooncake-fs-UID; 'none' serves nothing); with\n"
           "                          --master, the segment's data (default 127.0.0.1 on\n"
           "                          any free port). TCP beyond loopback needs a secret\n"
           "    --timeout-ms N        bound on every network wait (default 5000)\n"
           "    --auth-secret-file F  the cluster's shared secret (a file of mode 600):\n"
           "                          peers prove to each other that they know it\n"
           "                          (needed to --listen beyond loopback)\n"
           "    --no-shm              move no bytes through shared memory with nodes on\n"
           "                          this host (nor offer this segment that way)\n"
           "    --protocol P          data transport to nodes: tcp (default), rdma (fails\n"
           "                          without a usable device) or auto (RDMA when a\n"
           "                          device opens); with a segment, RDMA is served on\n"
           "                          the host of --listen\n"
           "    --rdma-device NAME    verbs device(s), comma-separated (default: the first)\n"
           "    --replicas N          copies of each file, on different nodes (default 1)\n"
           "    --lease-ms N          read lease in milliseconds (default %d)\n"
           "    --evict-high PCT      evict least recently used objects when the\n"
           "                          segment is PCT%% full (default 0: never evict,\n"
           "                          writes fail with ENOSPC instead)\n"
           "    --evict-ratio PCT     how much to free per eviction (default 10)\n"
           "    --metrics ADDR        serve Prometheus metrics and /health over HTTP on\n"
           "                          ADDR: PORT (on 127.0.0.1) or HOST:PORT (default:\n"
           "                          none)\n"
           "    --cache-timeout SEC   kernel entry/attribute cache time (default 1)\n"
           "    --cache-mode MODE     file content: 'pages' (default) through the kernel's\n"
           "                          page cache (mmap works; a mount sees one content per\n"
           "                          file), or 'direct': direct I/O, each open reads the\n"
           "                          version it opened (no shared mmap)\n"
           "    --readahead SIZE      read ahead of a file read sequentially from another\n"
           "                          node, up to SIZE per open file (default 8M; 0: off)\n"
           "    --total-readahead SIZE  bound on all read-ahead together (default 256M)\n"
           "    --write-behind SIZE   with --master: answer writes while up to SIZE of a\n"
           "                          file's are still in flight (default 8M; 0: off;\n"
           "                          errors then fail the next write, fsync or close)\n"
           "    --total-write-behind SIZE  bound on all writes in flight (default 64M)\n"
           "    --threads N           threads reading FUSE requests (default: the CPUs\n"
           "                          this process may run on, at most %d): the others\n"
           "                          answer reads from memory, the loop the rest\n"
           "    -f                    stay in the foreground\n"
           "    -d                    debug: foreground, log every FUSE request\n"
           "    -o OPT[,OPT...]       FUSE mount options (see mount.fuse3(8))\n"
           "    -h, --help            this text\n"
           "    -V, --version         print the version\n",
           prog, MC_DEFAULT_LEASE_MS, THREADS_DEFAULT_MAX);
}

static int parse_uint(const char *s, const char *what, unsigned long max, unsigned long *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v > max) {
        fprintf(stderr, "mooncake-fs: error: bad %s '%s'\n", what, s);
        return -1;
    }
    *out = v;
    return 0;
}

/*
 * fuse_opt_parse()'s callback: takes the positional arguments, [SOURCE]
 * MOUNTPOINT, into o->pos (mount.fuse3 runs "mooncake-fs SOURCE MOUNTPOINT
 * -o OPTIONS" for an /etc/fstab line), and notes -o max_read=N, which
 * libfuse passes to the kernel but requires init() to ask for too (ops.c).
 * Returns 0 (taken), 1 (not ours: kept for libfuse) or -1 (a third one, or
 * no memory).
 */
static int take_positional(void *data, const char *arg, int key, struct fuse_args *outargs)
{
    struct options *o = data;
    if (key == FUSE_OPT_KEY_OPT && strncmp(arg, "max_read=", 9) == 0) {
        o->max_read = strtoul(arg + 9, NULL, 10); /* libfuse checks the number */
        return 1; /* a mount option of the kernel's too: libfuse passes it on */
    }
    if (key != FUSE_OPT_KEY_NONOPT)
        return 1;
    if (o->npos == 2) {
        fprintf(stderr, "mooncake-fs: error: unexpected argument '%s' (try --help)\n", arg);
        return -1;
    }
    o->pos[o->npos] = strdup(arg);
    return o->pos[o->npos++] ? 0 : -1;
}

/*
 * Hands the mount point back to libfuse, and with a SOURCE (an /etc/fstab
 * line's first field) takes it as --master (unless it is "embedded") and
 * names the mount after it: fsname=SOURCE, type fuse.mooncake-fs, the way
 * the line reads, so that "mount -a" sees it mounted. Returns 0, or -1
 * after saying what is wrong.
 */
static int apply_positional(struct options *o, struct fuse_args *args)
{
    if (o->npos == 0)
        return 0; /* libfuse says that the mount point is missing */
    const char *source = o->npos == 2 ? o->pos[0] : NULL;
    if (fuse_opt_add_arg(args, o->pos[o->npos - 1]) < 0)
        return -1;
    if (!source)
        return 0;
    if (strcmp(source, "embedded") != 0) {
        if (o->master && strcmp(o->master, source) != 0) {
            fprintf(stderr, "mooncake-fs: error: SOURCE '%s' and --master '%s' differ\n", source,
                    o->master);
            return -1;
        }
        if (!o->master && !(o->master = strdup(source)))
            return -1;
    }
    char *opts = NULL;
    size_t n = strlen("fsname=") + strlen(source) + 1;
    char *fsname = malloc(n);
    int rc = -1;
    if (fsname) {
        snprintf(fsname, n, "fsname=%s", source);
        rc = fuse_opt_add_opt_escaped(&opts, fsname) < 0 ||
                     fuse_opt_add_opt(&opts, "subtype=mooncake-fs") < 0 ||
                     fuse_opt_add_arg(args, "-o") < 0 || fuse_opt_add_arg(args, opts) < 0
                 ? -1
                 : 0;
    }
    free(fsname);
    free(opts);
    return rc;
}

/* Releases open handles while the store's loop still runs (after the
 * workers, which read their memory, are gone), then stops. */
static void shutdown_and_stop(fs_t *fs)
{
    if (fs->stopping)
        return;
    fs->stopping = 1;
    fs_workers_stop(fs);
    fs_shutdown(fs);
    mc_loop_stop(fs->loop);
}

/* Reads the requests waiting on the device and processes them, when the
 * one-shot poll of the device (mc_poll_once(), armed again at the end) says
 * it is readable.
 *
 * It stops reading after a request when no other request is in flight:
 * then the requester is most likely waiting for this one's answer (a
 * process making files one after the other sends LOOKUP, CREATE, WRITE,
 * FLUSH... each after the last one's reply), and reading on would only
 * find the device empty, a failed read(2) (EAGAIN) per request on the way
 * to its answer. The poll armed again sees the device afresh in the loop's
 * next io_uring_enter(), which the loop makes anyway, after the answers of
 * this round went out: nothing that came meanwhile is missed. While other
 * requests are in flight (several processes, or writes behind) it reads
 * on until the device is empty, as many as 64 at a time. */
static void on_fuse(mc_poll_t *p, int revents)
{
    fs_t *fs = p->data;
    /* The loop finishes the round it is in after a stop: a request read now
     * (a RELEASE the kernel sent as the signal came) would name a handle
     * fs_shutdown() freed. The unmount ends what the kernel still has. */
    if (fs->stopping)
        return;
    if (revents < 0 || (revents & (POLLERR | POLLHUP | POLLNVAL))) {
        shutdown_and_stop(fs);
        return;
    }
    for (int i = 0; i < 64 && !fuse_session_exited(fs->se); i++) {
        int rc = fuse_session_receive_buf(fs->se, &fs->rbuf);
        if (rc == -EAGAIN)
            break;
        if (rc == -EINTR)
            continue;
        if (rc == -ECONNABORTED) { /* the kernel ended the connection (unmounted) */
            fuse_session_exit(fs->se);
            break;
        }
        if (rc <= 0) {
            if (rc < 0)
                fprintf(stderr, "mooncake-fs: error: reading /dev/fuse: %s\n", strerror(-rc));
            break;
        }
        fs_metrics_count(&fs->rbuf, rc);
        fuse_session_process_buf(fs->se, &fs->rbuf);
        if (fs->rbuf_taken) {
            fs->rbuf.mem = NULL; /* libfuse allocates the next one */
            fs->rbuf_taken = 0;
        }
        if (fs->inflight <= 1)
            break;
    }
    if (fuse_session_exited(fs->se)) { /* unmounted (fusermount3 -u) */
        shutdown_and_stop(fs);
        return;
    }
    if (fs->stopping)
        return;
    int rc = mc_poll_once(fs->loop, p, fuse_session_fd(fs->se), POLLIN, on_fuse);
    if (rc < 0) {
        fprintf(stderr, "mooncake-fs: error: polling /dev/fuse: %s\n", mc_strerror(rc));
        shutdown_and_stop(fs);
    }
}

static void on_signal(mc_poll_t *p, int revents)
{
    fs_t *fs = p->data;
    struct signalfd_siginfo si;
    ssize_t n = read(p->fd, &si, sizeof(si));
    if (n == (ssize_t)sizeof(si))
        fprintf(stderr, "mooncake-fs: %s, unmounting\n", strsignal((int)si.ssi_signo));
    shutdown_and_stop(fs);
}

/* Whether dir is (now) a directory of ours that group and others cannot
 * enter: made here with mode 700, or found so. A symbolic link, another
 * user's directory or a looser mode is not used (and said so). */
static int private_dir(const char *dir)
{
    struct stat st;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return 0;
    if (lstat(dir, &st) < 0)
        return 0;
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
        fprintf(stderr,
                "mooncake-fs: warning: not using %s for the store's socket: not a directory "
                "of this user closed to others\n",
                dir);
        return 0;
    }
    return 1;
}

/*
 * Picks the embedded store's default address: "unix:DIR/NAME.sock" in buf,
 * where DIR is the first private_dir() of /run/mooncake-fs (root),
 * $XDG_RUNTIME_DIR/mooncake-fs and /tmp/mooncake-fs-UID, else a fresh
 * mkdtemp() directory, whose path goes to temp_dir (the caller removes it
 * at exit). NAME is the mount point with '/' as '-' (and bytes other than
 * letters, digits, '.', '_' and '-' as '_'), cut to its last characters
 * when a socket address cannot hold it all. Only the owner can enter DIR,
 * so only the owner (and root) reaches the socket, as only they reach a
 * mount without allow_other. Returns 0 or -errno.
 */
static int default_listen_addr(const char *mountpoint, char *buf, size_t n, char *temp_dir,
                               size_t tn)
{
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int found = 0;

    temp_dir[0] = '\0';
    if (geteuid() == 0) {
        snprintf(dir, sizeof(dir), "/run/mooncake-fs");
        found = private_dir(dir);
    }
    if (!found && xdg && xdg[0] == '/' &&
        (size_t)snprintf(dir, sizeof(dir), "%s/mooncake-fs", xdg) < sizeof(dir))
        found = private_dir(dir);
    if (!found) {
        snprintf(dir, sizeof(dir), "/tmp/mooncake-fs-%u", (unsigned)geteuid());
        found = private_dir(dir);
    }
    if (!found) {
        snprintf(dir, sizeof(dir), "/tmp/mooncake-fs-%u-XXXXXX", (unsigned)geteuid());
        if (!mkdtemp(dir))
            return -errno;
        snprintf(temp_dir, tn, "%s", dir);
    }
    /* The mount point as a file name; when too long, its end. */
    char name[PATH_MAX];
    size_t len = 0;
    for (const char *p = mountpoint + strspn(mountpoint, "/"); *p && len + 1 < sizeof(name); p++)
        name[len++] = *p == '/' ? '-' : strchr("._-", *p) || isalnum((unsigned char)*p) ? *p : '_';
    if (len == 0)
        name[len++] = '-'; /* mounted on / */
    name[len] = '\0';
    size_t room = sizeof(dir) - 1 - strlen(dir) - strlen("/.sock");
    if (room > sizeof(dir) || room == 0)
        return -ENAMETOOLONG;
    int w = snprintf(buf, n, "unix:%s/%s.sock", dir, len > room ? name + len - room : name);
    return w < 0 || (size_t)w >= n ? -ENAMETOOLONG : 0;
}

/* Creates the loop and opens the store on it. Returns 0 or -errno (logged). */
static int open_store(fs_t *fs, mc_store_opts_t *so, int default_listen)
{
    mc_nofile_raise(); /* best effort: the store may serve connections */
    int rc = mc_loop_new(&fs->loop);
    if (rc < 0) {
        fprintf(stderr, "mooncake-fs: error: io_uring: %s\n", mc_strerror(rc));
        return rc;
    }
    so->loop = fs->loop;
    rc = mc_store_open(&fs->store, so);
    if (rc == -EADDRINUSE && default_listen) {
        fprintf(stderr,
                "mooncake-fs: warning: %s is taken: not serving the protocol (give "
                "--listen ADDR)\n",
                so->listen);
        so->listen = NULL;
        rc = mc_store_open(&fs->store, so);
    }
    if (rc < 0) {
        fs->store = NULL;
        fprintf(stderr, "mooncake-fs: error: opening the store: %s\n", mc_strerror(rc));
    }
    return rc;
}

/* The CPUs this process may run on, at most THREADS_DEFAULT_MAX: the
 * --threads default. */
static unsigned default_threads(void)
{
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    return n < 1 ? 1 : n > THREADS_DEFAULT_MAX ? THREADS_DEFAULT_MAX : (unsigned)n;
}

/*
 * Checks the daemon's options and copies them into the store's options (so)
 * and the daemon's settings (fs). Returns 0, or -1 after saying which option
 * is wrong. The strings stay owned by o: so points into them.
 */
static int apply_options(const struct options *o, mc_store_opts_t *so, fs_t *fs)
{
    unsigned long v;
    if (o->segment_size && mc_parse_size(o->segment_size, &so->segment_size) < 0) {
        fprintf(stderr, "mooncake-fs: error: bad --segment-size '%s'\n", o->segment_size);
        return -1;
    }
    if (o->lease_ms) {
        if (parse_uint(o->lease_ms, "--lease-ms", 86400000UL, &v) < 0)
            return -1;
        so->lease_ms = v;
    }
    if (o->evict_high) {
        if (parse_uint(o->evict_high, "--evict-high", 100, &v) < 0)
            return -1;
        so->evict_high_pct = (unsigned)v;
    }
    if (o->evict_ratio) {
        if (parse_uint(o->evict_ratio, "--evict-ratio", 100, &v) < 0)
            return -1;
        so->evict_ratio_pct = (unsigned)v;
    }
    fs->timeout = 1.0;
    if (o->timeout) {
        char *end;
        fs->timeout = strtod(o->timeout, &end);
        if (*end || end == o->timeout || fs->timeout < 0) {
            fprintf(stderr, "mooncake-fs: error: bad --cache-timeout '%s'\n", o->timeout);
            return -1;
        }
    }
    fs->direct_io = 0;
    if (o->cache) {
        if (strcmp(o->cache, "pages") && strcmp(o->cache, "direct")) {
            fprintf(stderr, "mooncake-fs: error: --cache-mode takes pages or direct\n");
            return -1;
        }
        fs->direct_io = !strcmp(o->cache, "direct");
    }
    fs->threads = default_threads();
    if (o->threads) {
        if (parse_uint(o->threads, "--threads", THREADS_MAX, &v) < 0)
            return -1;
        if (v == 0) {
            fprintf(stderr, "mooncake-fs: error: --threads takes 1 to %d\n", THREADS_MAX);
            return -1;
        }
        fs->threads = (unsigned)v;
    }
    fs->max_read = o->max_read > UINT_MAX ? UINT_MAX : (unsigned)o->max_read;
    so->master = o->master;
    so->secret_file = o->secret_file;
    so->no_shm = o->no_shm;
    so->protocol = o->protocol;
    so->rdma_devices = o->rdma_devices;
    if (o->protocol && strcmp(o->protocol, "tcp") && strcmp(o->protocol, "rdma") &&
        strcmp(o->protocol, "auto")) {
        fprintf(stderr, "mooncake-fs: error: --protocol takes tcp, rdma or auto\n");
        return -1;
    }
    if (fs_stream_options(fs, so, o->master && o->master[0], (const char *const *)o->stream) < 0)
        return -1;
    fs->replicas = 1;
    if (o->replicas) {
        if (parse_uint(o->replicas, "--replicas", 8, &v) < 0 || v == 0)
            return -1;
        fs->replicas = (uint32_t)v;
    }
    if (o->net_timeout) {
        if (parse_uint(o->net_timeout, "--timeout-ms", 3600000UL, &v) < 0 || v == 0)
            return -1;
        so->timeout_ms = v;
    }
    return 0;
}

/*
 * Sets so->listen: the default Unix socket (default_listen_addr(), written
 * to buf; a fresh temporary directory goes to temp_dir) for an embedded
 * store without --listen, else --listen unless it is "none". Without a
 * directory for the default socket the store serves nothing (and says so).
 */
static void choose_listen(const struct options *o, int default_listen, const char *mountpoint,
                          mc_store_opts_t *so, char *buf, size_t n, char *temp_dir, size_t tn)
{
    if (default_listen) {
        int rc = default_listen_addr(mountpoint, buf, n, temp_dir, tn);
        if (rc < 0)
            fprintf(stderr,
                    "mooncake-fs: warning: no directory for the store's socket (%s): "
                    "not serving the protocol\n",
                    strerror(-rc));
        else
            so->listen = buf;
    } else if (o->listen && strcmp(o->listen, "none") != 0)
        so->listen = o->listen;
}

/*
 * Creates the FUSE session (fs->se), mounts it (then sets *mounted) and
 * opens the store: in the foreground before the mount appears, so that a
 * mount point that shows up is ready (and a master that cannot be reached
 * leaves nothing mounted); in the background after fork(), which io_uring
 * does not survive. Returns 0, or -1 (what failed is logged); the caller
 * frees what was made.
 */
static int mount_and_open_store(fs_t *fs, struct fuse_args *args,
                                const struct fuse_cmdline_opts *fopts, mc_store_opts_t *so,
                                int default_listen, int *mounted)
{
    /* The kernel checks permission bits against the owner (this user) as on
     * any file system; with -o allow_other others get what the modes give. */
    if (fuse_opt_add_arg(args, "-odefault_permissions") < 0)
        return -1;
    fs->se = fuse_session_new(args, &fs_ops, sizeof(fs_ops), fs);
    if (!fs->se)
        return -1;
    if (fopts->foreground && open_store(fs, so, default_listen) < 0)
        return -1;
    if (fuse_session_mount(fs->se, fopts->mountpoint) != 0)
        return -1;
    *mounted = 1;
    if (fs_devio_install(fs) < 0)
        fprintf(stderr, "mooncake-fs: info: libfuse's own device I/O: the kernel asks for "
                        "security.capability before a file's first write\n");
    fs_kernel_readahead(fopts->mountpoint, FS_MAX_READAHEAD >> 10);
    if (fuse_daemonize(fopts->foreground) != 0)
        return -1;
    if (!fopts->foreground && open_store(fs, so, default_listen) < 0)
        return -1;
    return 0;
}

/* A crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) writes the stack to
 * stderr, the daemon's log, before the default action (the exit status
 * and a core dump, if enabled, stay as they were): a crash that happens
 * once in many runs can then be read from one log. */
static void on_crash(int sig)
{
    void *frames[64];
    int n = backtrace(frames, 64);
    static const char msg[] = "mooncake-fs: crashed; stack:\n";
    if (write(2, msg, sizeof(msg) - 1) < 0)
        _exit(128 + sig);
    backtrace_symbols_fd(frames, n, 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void report_crashes(void)
{
    void *warm[1];
    backtrace(warm, 1); /* loads libgcc now: not from the handler */
    struct sigaction sa = {.sa_handler = on_crash, .sa_flags = SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaction(sigs[i], &sa, NULL);
}

/*
 * Blocks SIGINT, SIGTERM and SIGHUP (they arrive through a signalfd, *sfd,
 * which the caller closes), ignores SIGPIPE, and polls the FUSE device and
 * the signalfd on the loop. The caller owns both polls. Returns 0, or -1
 * (logged).
 */
static int watch_device_and_signals(fs_t *fs, mc_poll_t *fuse_poll, mc_poll_t *sig_poll, int *sfd)
{
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    sigprocmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    report_crashes();
    *sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
    int fd = fuse_session_fd(fs->se);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (*sfd < 0 || mc_poll_once(fs->loop, fuse_poll, fd, POLLIN, on_fuse) < 0 ||
        mc_poll_start(fs->loop, sig_poll, *sfd, POLLIN, on_signal) < 0) {
        fprintf(stderr, "mooncake-fs: error: cannot watch the FUSE device\n");
        return -1;
    }
    return 0;
}

static void log_mounted(const char *mountpoint, const mc_store_opts_t *so)
{
    if (so->master && so->master[0])
        fprintf(stderr, "mooncake-fs: mounted %s (master %s, segment %llu bytes)\n", mountpoint,
                so->master, (unsigned long long)so->segment_size);
    else
        fprintf(stderr, "mooncake-fs: mounted %s (embedded store, segment %llu bytes%s%s)\n",
                mountpoint, (unsigned long long)so->segment_size, so->listen ? ", serving " : "",
                so->listen ? so->listen : "");
}

/* Which transport carried the bytes (the tests read this line). */
static void log_bytes_moved(mc_store_t *store)
{
    mc_store_stats_t st;
    mc_store_stats(store, &st);
    fprintf(stderr,
            "mooncake-fs: bytes moved: local %llu shm %llu tcp %llu rdma %llu "
            "(ops: local %llu shm %llu tcp %llu rdma %llu)\n",
            (unsigned long long)st.local_bytes, (unsigned long long)st.shm_bytes,
            (unsigned long long)st.tcp_bytes, (unsigned long long)st.rdma_bytes,
            (unsigned long long)st.local_ops, (unsigned long long)st.shm_ops,
            (unsigned long long)st.tcp_ops, (unsigned long long)st.rdma_ops);
}

/* Frees the strings fuse_opt_parse() stored in o. */
static void free_options(struct options *o)
{
    free(o->segment_size);
    free(o->master);
    free(o->lease_ms);
    free(o->evict_high);
    free(o->evict_ratio);
    free(o->timeout);
    free(o->cache);
    for (int i = 0; i < 4; i++)
        free(o->stream[i]);
    free(o->threads);
    free(o->listen);
    free(o->net_timeout);
    free(o->replicas);
    free(o->secret_file);
    free(o->protocol);
    free(o->rdma_devices);
    free(o->metrics);
    free(o->pos[0]);
    free(o->pos[1]);
}

/* The metrics endpoint's thread (when asked for) and the workers of
 * --threads. After fuse_daemonize() and with the signals blocked: the
 * threads inherit the mask. */
static int start_threads(fs_t *fs, const char *metrics_addr, mc_metrics_server_t **metrics)
{
    if (metrics_addr) {
        int rc = mc_metrics_serve(metrics, metrics_addr, fs->loop, fs_metrics_collect, fs);
        if (rc < 0) {
            fprintf(stderr, "mooncake-fs: error: cannot serve metrics on %s: %s\n", metrics_addr,
                    mc_strerror(rc));
            return rc;
        }
    }
    int rc = fs_workers_start(fs, fs->threads - 1);
    if (rc < 0)
        fprintf(stderr, "mooncake-fs: error: starting %u threads: %s\n", fs->threads,
                mc_strerror(rc));
    return rc;
}

int main(int argc, char *argv[])
{
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct fuse_cmdline_opts fopts = {0};
    struct options o = {0};
    mc_store_opts_t so;
    fs_t fs = {0};
    mc_poll_t fuse_poll = {.data = &fs}, sig_poll = {.data = &fs};
    mc_metrics_server_t *metrics = NULL;
    int ret = 1, mounted = 0, sfd = -1;

    mc_store_opts_init(&so);
    if (fuse_opt_parse(&args, &o, option_spec, take_positional) == -1) {
        free_options(&o);
        return 1;
    }
    if (o.help) {
        usage(argv[0]);
        fuse_opt_free_args(&args);
        return 0;
    }
    if (o.version) {
        printf("mooncake-fs %s (libfuse %s)\n", MC_VERSION_STRING, fuse_pkgversion());
        fuse_opt_free_args(&args);
        return 0;
    }
    if (apply_positional(&o, &args) < 0)
        goto out_args;
    if (fuse_parse_cmdline(&args, &fopts) != 0)
        goto out_args;
    if (fopts.show_help || fopts.show_version) {
        usage(argv[0]);
        ret = 0;
        goto out_args;
    }
    if (!fopts.mountpoint) {
        fprintf(stderr, "usage: %s [options] MOUNTPOINT (try --help)\n", argv[0]);
        goto out_args;
    }
    if (apply_options(&o, &so, &fs) < 0)
        goto out_args;
    int default_listen = !o.listen && !(o.master && o.master[0]);
    char listen_buf[sizeof(((struct sockaddr_un *)0)->sun_path) + 8], temp_dir[PATH_MAX];
    temp_dir[0] = '\0';
    choose_listen(&o, default_listen, fopts.mountpoint, &so, listen_buf, sizeof(listen_buf),
                  temp_dir, sizeof(temp_dir));
    if (o.master && o.master[0] && !o.segment_size)
        so.segment_size = MC_DEFAULT_SEGMENT_SIZE;

    fs.uid = getuid();
    fs.gid = getgid();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    fs.start_ns = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    fs.it = fs_itable_new();
    if (!fs.it)
        goto out;

    if (mount_and_open_store(&fs, &args, &fopts, &so, default_listen, &mounted) < 0)
        goto out;
    if (watch_device_and_signals(&fs, &fuse_poll, &sig_poll, &sfd) < 0)
        goto out;
    if (start_threads(&fs, o.metrics, &metrics) < 0)
        goto out;
    log_mounted(fopts.mountpoint, &so);
    int rc = mc_loop_run(fs.loop);
    if (rc < 0)
        fprintf(stderr, "mooncake-fs: error: event loop: %s\n", mc_strerror(rc));
    else
        ret = 0;
    mc_poll_stop(&fuse_poll);
    mc_poll_stop(&sig_poll);
out:
    fs_workers_stop(&fs);     /* the loop ended without shutdown_and_stop() */
    mc_metrics_stop(metrics); /* before the store it reads goes */
    if (sfd >= 0)
        close(sfd);
    if (fs.store) {
        log_bytes_moved(fs.store);
        mc_store_close(fs.store);
        fs_ws_shutdown(&fs, 1); /* what was still in flight at shutdown */
        fs_dirs_close(&fs);
    }
    fs_ctx_spares_free(&fs);
    if (temp_dir[0])
        rmdir(temp_dir);
    if (fs.loop)
        mc_loop_free(fs.loop);
    fs_procs_close(&fs);
    if (mounted)
        fuse_session_unmount(fs.se);
    if (fs.se)
        fuse_session_destroy(fs.se);
    fs_itable_free(fs.it);
out_args:
    free(fs.rbuf.mem);
    free(fopts.mountpoint);
    fuse_opt_free_args(&args);
    free_options(&o);
    return ret;
}
