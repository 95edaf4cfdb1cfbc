/*
 * mc_bench.c - throughput of the libmooncake C API, and of the baselines it
 * is compared with, for bench/cluster.sh. Public API only (mooncake.h).
 *
 *   mc_bench --master HOST:PORT [opts]   put then get through a cluster (the
 *                                        process is a pure client)
 *   mc_bench --embedded [opts]           put then get on an in-process store
 *   mc_bench --memcached HOST:PORT [opts] set then get against memcached
 *                                        (text protocol), one connection per
 *                                        in-flight request
 *   mc_bench --memcpy [opts]             memcpy of --size bytes from a 64 MiB
 *                                        source region into one buffer
 * opts: --size SIZE (1K, 1M, ...), -n/--concurrency N (requests in flight),
 *       --seconds S (per measured phase), --keys K (keys per in-flight slot),
 *       --ops put,get,stat (phases; put/set first so that get finds the keys;
 *       stat asks the master only, no byte moves: its ops/s are the master's),
 *       --memory (store modes: no phase; after the fill, prints
 *       keys=N rss_bytes_per_key=B, what this process's resident memory grew
 *       by per key, segment pages and the master's metadata included),
 *       --key-prefix P (keys P:0 to P:N-1, N = concurrency x keys: the
 *       names redis-server's DEBUG POPULATE N P gives; default
 *       mcb/SIZE/SLOT/I, I < K)
 *
 * Every key is written once, untimed, before the measured phases (N writes
 * in flight, as the phases keep). The store
 * and memcached modes keep exactly N requests in flight: each completion
 * issues the next request of its slot until the phase's time is up; the
 * phase ends when the last one completes, and is timed up to that point.
 * Prints one line of key=value per phase:
 *   mode=cluster op=get size=1024 conc=16 secs=1.50 ops=N ops_s=N mib_s=N cpu=C errors=0
 *   p50_us=L p99_us=L
 * (cpu: this process's CPU use over the phase, in cores; p50_us, p99_us: the
 * median and 99th percentile of one request's latency, from issue to
 * completion, in microseconds, within about 3% (the histogram's buckets); not
 * printed for --memcpy).
 * Exit status 1 if any request failed or returned the wrong bytes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "mooncake/mooncake.h"

enum { OP_PUT, OP_GET, OP_STAT };
static const char *const op_names[][3] = {{"put", "get", "stat"}, {"set", "get", "stat"}};

static struct {
    const char *mode;
    size_t size;
    unsigned conc;
    unsigned keys; /* per slot */
    double seconds;
    int phases[3];
    int nphases;
    int memory;             /* --memory */
    const char *key_prefix; /* --key-prefix: keys PREFIX:N, N from 0 (redis's DEBUG POPULATE names) */
    int no_shm;                         /* --no-shm: a co-located node is still reached over TCP */
    const char *protocol, *rdma_device; /* --protocol, --rdma-device */
    const char *secret_file;            /* --auth-secret-file */
} cfg = {.size = 1024, .conc = 16, .keys = 16, .seconds = 2.0};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* CPU seconds (user + system) this process has used so far, all threads. */
static double cpu_secs(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static double phase_cpu0;

/* ---- latency histogram: 16 buckets per power of two of nanoseconds ---- */

enum { HIST_SUB = 16, HIST_BUCKETS = 61 * HIST_SUB };
typedef struct hist {
    uint32_t n[HIST_BUCKETS];
} hist_t;

static unsigned hist_index(uint64_t ns)
{
    if (ns < HIST_SUB)
        return (unsigned)ns;
    unsigned e = 63u - (unsigned)__builtin_clzll(ns); /* >= 4 */
    return (e - 3) * HIST_SUB + (unsigned)((ns >> (e - 4)) & (HIST_SUB - 1));
}

static void hist_add(hist_t *h, uint64_t ns)
{
    h->n[hist_index(ns)]++;
}

/* The middle of bucket i, in nanoseconds. */
static double hist_value(unsigned i)
{
    if (i < HIST_SUB)
        return i;
    unsigned e = i / HIST_SUB + 3, sub = i % HIST_SUB;
    double lo = (double)((uint64_t)(HIST_SUB + sub) << (e - 4));
    return lo + (double)(1ULL << (e - 4)) / 2;
}

/* The smallest latency (ns) that q of the recorded requests do not exceed. */
static double hist_quantile(const hist_t *h, double q)
{
    uint64_t total = 0, seen = 0;
    for (unsigned i = 0; i < HIST_BUCKETS; i++)
        total += h->n[i];
    if (!total)
        return 0;
    uint64_t want = (uint64_t)(q * (double)total + 0.999999);
    for (unsigned i = 0; i < HIST_BUCKETS; i++)
        if ((seen += h->n[i]) >= want)
            return hist_value(i);
    return hist_value(HIST_BUCKETS - 1);
}

static void hist_merge(hist_t *into, const hist_t *h)
{
    for (unsigned i = 0; i < HIST_BUCKETS; i++)
        into->n[i] += h->n[i];
}

/* Marks the start of a measured phase (for the cpu= field of report()). */
static void phase_start(void)
{
    phase_cpu0 = cpu_secs();
}

/* cpu= is this process's CPU use over the phase in cores (1.00: one core
 * busy all the time): on a small machine it tells whether the client or the
 * server was the bottleneck. */
static void report(const char *op, uint64_t ops, uint64_t ns, uint64_t errors, const hist_t *lat)
{
    double secs = (double)ns / 1e9;
    double ops_s = secs > 0 ? (double)ops / secs : 0;
    printf("mode=%s op=%s size=%zu conc=%u secs=%.2f ops=%llu ops_s=%.0f mib_s=%.1f cpu=%.2f "
           "errors=%llu",
           cfg.mode, op, cfg.size, cfg.conc, secs, (unsigned long long)ops, ops_s,
           ops_s * (double)cfg.size / 1048576.0, secs > 0 ? (cpu_secs() - phase_cpu0) / secs : 0,
           (unsigned long long)errors);
    if (lat)
        printf(" p50_us=%.1f p99_us=%.1f", hist_quantile(lat, 0.50) / 1e3,
               hist_quantile(lat, 0.99) / 1e3);
    printf("\n");
    fflush(stdout);
}

static int make_key(char *k, size_t cap, unsigned slot, uint64_t i)
{
    if (cfg.key_prefix)
        return snprintf(k, cap, "%s:%llu", cfg.key_prefix,
                        (unsigned long long)slot * cfg.keys + i % cfg.keys);
    return snprintf(k, cap, "mcb/%zu/%u/%llu", cfg.size, slot, (unsigned long long)(i % cfg.keys));
}

/* The byte a slot's values are filled with, so a get can be checked. */
static unsigned char fill_of(unsigned slot)
{
    return (unsigned char)('a' + slot % 26);
}

/* ---- the store: async calls, N in flight ---- */

struct phase;

typedef struct slot {
    struct phase *ph;
    unsigned idx;
    uint64_t seq, done, errors;
    uint64_t t_issue; /* when the request in flight was issued */
    hist_t lat;       /* latency of this slot's completed requests */
    char key[64];
    size_t klen;
    char *buf;
    mc_stat_t st;
} slot_t;

typedef struct phase {
    mc_store_t *s;
    int op;
    uint64_t deadline;
    slot_t *slots;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned inflight;
    int first_err;
    uint64_t per_slot; /* 0: until the deadline; else this many requests a slot, untimed */
} phase_t;

static void slot_done(slot_t *sl)
{
    phase_t *ph = sl->ph;
    pthread_mutex_lock(&ph->mu);
    if (--ph->inflight == 0)
        pthread_cond_signal(&ph->cv);
    pthread_mutex_unlock(&ph->mu);
}

static void on_done(void *arg, int rc);

/* Issues the slot's next request; on failure the slot stops. */
static void issue(slot_t *sl)
{
    phase_t *ph = sl->ph;
    sl->klen = (size_t)make_key(sl->key, sizeof(sl->key), sl->idx, sl->seq++);
    sl->t_issue = now_ns();
    int rc =
        ph->op == OP_PUT
            ? mc_put_async(ph->s, sl->key, sl->klen, sl->buf, cfg.size, NULL, on_done, sl)
        : ph->op == OP_GET
            ? mc_get_async(ph->s, sl->key, sl->klen, 0, sl->buf, cfg.size, &sl->st, on_done, sl)
            : mc_stat_async(ph->s, sl->key, sl->klen, &sl->st, on_done, sl);
    if (rc < 0) {
        sl->errors++;
        ph->first_err = ph->first_err ? ph->first_err : rc;
        slot_done(sl);
    }
}

/* On the store's loop thread. */
static void on_done(void *arg, int rc)
{
    slot_t *sl = arg;
    phase_t *ph = sl->ph;
    int ok = ph->op == OP_PUT    ? rc == 0
             : ph->op == OP_STAT ? rc == 0 && sl->st.size == cfg.size
                                 : rc == (int)cfg.size && sl->st.size == cfg.size &&
                                       (unsigned char)sl->buf[0] == fill_of(sl->idx) &&
                                       (unsigned char)sl->buf[cfg.size - 1] == fill_of(sl->idx);
    uint64_t now = now_ns();
    if (ok) {
        sl->done++;
        hist_add(&sl->lat, now - sl->t_issue);
    } else {
        sl->errors++;
        if (!ph->first_err)
            ph->first_err = rc < 0 ? rc : -EIO;
    }
    if (ok && (ph->per_slot ? sl->seq < ph->per_slot : now < ph->deadline))
        issue(sl);
    else
        slot_done(sl);
}

/* A timed phase of op (per_slot 0), or the untimed fill: every slot puts
 * its per_slot keys once, and nothing is printed. */
static int store_phase(mc_store_t *s, int op, slot_t *slots, uint64_t per_slot)
{
    phase_t ph = {.s = s, .op = op, .slots = slots, .inflight = cfg.conc, .per_slot = per_slot};
    pthread_mutex_init(&ph.mu, NULL);
    pthread_cond_init(&ph.cv, NULL);
    for (unsigned i = 0; i < cfg.conc; i++) {
        slots[i].ph = &ph;
        slots[i].seq = slots[i].done = slots[i].errors = 0;
        memset(&slots[i].lat, 0, sizeof(slots[i].lat));
        if (op == OP_GET)
            memset(slots[i].buf, 0, cfg.size);
    }
    phase_start();
    uint64_t t0 = now_ns();
    ph.deadline = t0 + (uint64_t)(cfg.seconds * 1e9);
    for (unsigned i = 0; i < cfg.conc; i++)
        issue(&slots[i]);
    pthread_mutex_lock(&ph.mu);
    while (ph.inflight)
        pthread_cond_wait(&ph.cv, &ph.mu);
    pthread_mutex_unlock(&ph.mu);
    uint64_t t1 = now_ns();
    uint64_t ops = 0, errors = 0;
    hist_t lat = {{0}};
    for (unsigned i = 0; i < cfg.conc; i++) {
        ops += slots[i].done;
        errors += slots[i].errors;
        hist_merge(&lat, &slots[i].lat);
    }
    if (!per_slot)
        report(op_names[0][op], ops, t1 - t0, errors, &lat);
    if (errors)
        fprintf(stderr, "mc_bench: %llu %s errors, first: %s\n", (unsigned long long)errors,
                op_names[0][op], mc_strerror(ph.first_err));
    pthread_mutex_destroy(&ph.mu);
    pthread_cond_destroy(&ph.cv);
    return errors ? -1 : 0;
}

/* This process's resident memory (VmRSS), in bytes; 0 if unknown. */
static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return (uint64_t)kb * 1024;
}

static int run_store(const char *master)
{
    uint64_t rss0 = rss_bytes(); /* before the store: what --memory counts from */
    mc_store_opts_t o;
    mc_store_opts_init(&o);
    if (master) {
        o.master = master;
        o.segment_size = 0; /* a pure client: no byte stays in this process */
        /* A co-located node's segment is mapped and copied directly unless
         * --no-shm keeps every byte on the socket. */
        o.no_shm = cfg.no_shm;
        o.protocol = cfg.protocol;
        o.rdma_devices = cfg.rdma_device;
        o.secret_file = cfg.secret_file;
    } else {
        /* Embedded: master and segment in this process, nothing served. */
        o.segment_size = (uint64_t)cfg.size * cfg.conc * cfg.keys * 4 + (64ULL << 20);
    }
    mc_store_t *s;
    int rc = mc_store_open(&s, &o);
    if (rc < 0) {
        fprintf(stderr, "mc_bench: opening the store (%s): %s\n", master ? master : "embedded",
                mc_strerror(rc));
        return 1;
    }
    slot_t *slots = calloc(cfg.conc, sizeof(*slots));
    int bad = !slots;
    for (unsigned i = 0; !bad && i < cfg.conc; i++) {
        slots[i].idx = i;
        bad = !(slots[i].buf = malloc(cfg.size));
        if (!bad)
            memset(slots[i].buf, fill_of(i), cfg.size);
    }
    /* Untimed: every key once (connections made, replica lists learned). */
    if (!bad)
        bad = store_phase(s, OP_PUT, slots, cfg.keys) < 0;
    if (!bad && cfg.memory) {
        uint64_t n = (uint64_t)cfg.conc * cfg.keys;
        printf("mode=%s keys=%llu size=%zu rss_bytes_per_key=%.0f\n", cfg.mode,
               (unsigned long long)n, cfg.size, (double)(rss_bytes() - rss0) / (double)n);
    }
    for (int p = 0; !bad && !cfg.memory && p < cfg.nphases; p++) {
        if (cfg.phases[p] == OP_GET)
            for (unsigned i = 0; i < cfg.conc; i++)
                memset(slots[i].buf, fill_of(i), cfg.size);
        bad = store_phase(s, cfg.phases[p], slots, 0) < 0;
        /* A get overwrote the buffers; a later put must write the fill. */
        for (unsigned i = 0; i < cfg.conc; i++)
            memset(slots[i].buf, fill_of(i), cfg.size);
    }
    /* Which path carried the bytes, for cluster.sh to check. */
    mc_store_stats_t st;
    mc_store_stats(s, &st);
    printf("tcp_bytes=%llu shm_bytes=%llu local_bytes=%llu rdma_bytes=%llu\n",
           (unsigned long long)st.tcp_bytes, (unsigned long long)st.shm_bytes,
           (unsigned long long)st.local_bytes, (unsigned long long)st.rdma_bytes);
    mc_store_close(s);
    for (unsigned i = 0; slots && i < cfg.conc; i++)
        free(slots[i].buf);
    free(slots);
    return bad;
}

/* ---- memcached: text protocol, one connection per slot, one thread ---- */

typedef struct mconn {
    int fd;
    unsigned idx;
    uint64_t seq, done, errors;
    uint64_t t_sent; /* when the request in flight was sent */
    hist_t lat;      /* latency of this connection's completed requests */
    char *rbuf;
    size_t rlen, rcap;
    int active;
} mconn_t;

static char *mc_value; /* the value every set sends */

static int mconn_send(mconn_t *c, int op)
{
    char hdr[128], key[64];
    make_key(key, sizeof(key), c->idx, c->seq++);
    c->t_sent = now_ns();
    struct iovec iov[3];
    int n;
    if (op == OP_PUT) {
        int h = snprintf(hdr, sizeof(hdr), "set %s 0 0 %zu\r\n", key, cfg.size);
        memset(mc_value, fill_of(c->idx), cfg.size);
        iov[0] = (struct iovec){hdr, (size_t)h};
        iov[1] = (struct iovec){mc_value, cfg.size};
        iov[2] = (struct iovec){"\r\n", 2};
        n = 3;
    } else {
        int h = snprintf(hdr, sizeof(hdr), "get %s\r\n", key);
        iov[0] = (struct iovec){hdr, (size_t)h};
        n = 1;
    }
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    while (total) { /* blocking socket: a request is small */
        ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        total -= (size_t)w;
        while (w > 0) {
            size_t d = (size_t)w < m.msg_iov->iov_len ? (size_t)w : m.msg_iov->iov_len;
            m.msg_iov->iov_base = (char *)m.msg_iov->iov_base + d;
            m.msg_iov->iov_len -= d;
            w -= (ssize_t)d;
            if (!m.msg_iov->iov_len) {
                m.msg_iov++;
                m.msg_iovlen--;
            }
        }
    }
    return 0;
}

/* Length of the complete response at the start of c->rbuf, 0 if incomplete,
 * -1 if wrong. For a get, checks the value's bytes. */
static long mconn_parse(mconn_t *c, int op)
{
    char *b = c->rbuf;
    char *eol = memmem(b, c->rlen, "\r\n", 2);
    if (!eol)
        return c->rlen > 512 ? -1 : 0;
    size_t hl = (size_t)(eol - b) + 2;
    if (op == OP_PUT)
        return hl == 8 && memcmp(b, "STORED\r\n", 8) == 0 ? (long)hl : -1;
    unsigned long len;
    if (strncmp(b, "VALUE ", 6) != 0)
        return -1; /* END: a miss */
    char *sp = memrchr(b, ' ', hl - 2);
    if (!sp || (len = strtoul(sp + 1, NULL, 10)) != cfg.size)
        return -1;
    size_t total = hl + len + 2 + 5;
    if (c->rlen < total)
        return 0;
    if ((unsigned char)b[hl] != fill_of(c->idx) ||
        (unsigned char)b[hl + len - 1] != fill_of(c->idx) || memcmp(b + hl + len, "\r\nEND\r\n", 7))
        return -1;
    return (long)total;
}

static int mc_connect(const char *hostport)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (!colon || (size_t)(colon - hostport) >= sizeof(host))
        return -EINVAL;
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = 0;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        return -EINVAL;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        int e = -errno;
        close(fd);
        fd = e;
    }
    freeaddrinfo(ai);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    return fd;
}

/* One measured phase over all connections; seconds <= 0: one request per key,
 * untimed (the prefill). */
static int memcached_phase(int ep, mconn_t *cs, int op, double seconds)
{
    phase_start();
    uint64_t t0 = now_ns(), deadline = t0 + (uint64_t)(seconds * 1e9);
    uint64_t limit = seconds > 0 ? UINT64_MAX : cfg.keys;
    unsigned active = 0;
    for (unsigned i = 0; i < cfg.conc; i++) {
        mconn_t *c = &cs[i];
        c->seq = c->done = c->errors = 0;
        memset(&c->lat, 0, sizeof(c->lat));
        c->rlen = 0;
        c->active = mconn_send(c, op) == 0;
        c->errors += !c->active;
        active += (unsigned)c->active;
    }
    struct epoll_event evs[64];
    while (active) {
        int n = epoll_wait(ep, evs, 64, 10000);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "mc_bench: memcached: no response in 10 s\n");
            return -1;
        }
        for (int e = 0; e < n; e++) {
            mconn_t *c = evs[e].data.ptr;
            if (!c->active)
                continue;
            ssize_t r = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
            if (r <= 0) {
                if (r < 0 && errno == EINTR)
                    continue;
                c->errors++;
                c->active = 0;
                active--;
                continue;
            }
            c->rlen += (size_t)r;
            long used = mconn_parse(c, op);
            if (used == 0)
                continue;
            if (used < 0 || (size_t)used != c->rlen) { /* one request in flight */
                c->errors++;
                c->active = 0;
                active--;
                continue;
            }
            c->done++;
            hist_add(&c->lat, now_ns() - c->t_sent);
            c->rlen = 0;
            if (c->seq < limit && now_ns() < deadline && mconn_send(c, op) == 0)
                continue;
            c->active = 0;
            active--;
        }
    }
    uint64_t ops = 0, errors = 0;
    hist_t lat = {{0}};
    for (unsigned i = 0; i < cfg.conc; i++) {
        ops += cs[i].done;
        errors += cs[i].errors;
        hist_merge(&lat, &cs[i].lat);
    }
    if (seconds > 0)
        report(op_names[1][op], ops, now_ns() - t0, errors, &lat);
    if (errors)
        fprintf(stderr, "mc_bench: memcached: %llu %s errors\n", (unsigned long long)errors,
                op_names[1][op]);
    return errors ? -1 : 0;
}

static int run_memcached(const char *addr)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    mconn_t *cs = calloc(cfg.conc, sizeof(*cs));
    mc_value = malloc(cfg.size);
    if (ep < 0 || !cs || !mc_value)
        return 1;
    int bad = 0;
    for (unsigned i = 0; !bad && i < cfg.conc; i++) {
        mconn_t *c = &cs[i];
        c->idx = i;
        c->rcap = cfg.size + 512;
        c->rbuf = malloc(c->rcap);
        c->fd = mc_connect(addr);
        if (c->fd < 0 || !c->rbuf) {
            fprintf(stderr, "mc_bench: connecting to memcached at %s: %s\n", addr,
                    strerror(c->fd < 0 ? -c->fd : ENOMEM));
            bad = 1;
            break;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    }
    if (!bad)
        bad = memcached_phase(ep, cs, OP_PUT, 0) < 0; /* prefill, untimed */
    for (int p = 0; !bad && p < cfg.nphases; p++)
        bad = memcached_phase(ep, cs, cfg.phases[p], cfg.seconds) < 0;
    for (unsigned i = 0; i < cfg.conc; i++) {
        if (cs[i].fd > 0)
            close(cs[i].fd);
        free(cs[i].rbuf);
    }
    free(cs);
    free(mc_value);
    close(ep);
    return bad;
}

/* ---- memcpy ---- */

static int run_memcpy(void)
{
    size_t region = 64 << 20;
    if (region < cfg.size * 4)
        region = cfg.size * 4;
    size_t n = region / cfg.size;
    char *src = malloc(n * cfg.size), *dst = malloc(cfg.size);
    if (!src || !dst)
        return 1;
    memset(src, 'm', n * cfg.size);
    memset(dst, 0, cfg.size);
    phase_start();
    uint64_t t0 = now_ns(), deadline = t0 + (uint64_t)(cfg.seconds * 1e9), ops = 0;
    for (;;) {
        for (int k = 0; k < 64; k++, ops++) {
            memcpy(dst, src + (ops % n) * cfg.size, cfg.size);
            __asm__ volatile("" : : "r"(dst) : "memory");
        }
        if (now_ns() >= deadline)
            break;
    }
    uint64_t t1 = now_ns();
    int bad = dst[0] != 'm' || dst[cfg.size - 1] != 'm';
    report("memcpy", ops, t1 - t0, (uint64_t)bad, NULL);
    free(src);
    free(dst);
    return bad;
}

/* ---- main ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mc_bench (--master HOST:PORT | --embedded | --memcached HOST:PORT |\n"
            "                 --memcpy) [--size SIZE] [--concurrency N] [--seconds S] [--no-shm]\n"
            "                [--keys K] [--key-prefix P] [--ops put,get,stat] [--memory]\n"
            "                [--protocol tcp|rdma|auto] [--rdma-device NAME] [--auth-secret-file F]\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"master", required_argument, NULL, 'm'},
        {"embedded", no_argument, NULL, 'e'},
        {"memcached", required_argument, NULL, 'M'},
        {"memcpy", no_argument, NULL, 'c'},
        {"size", required_argument, NULL, 's'},
        {"concurrency", required_argument, NULL, 'n'},
        {"no-shm", no_argument, NULL, 'N'},
        {"seconds", required_argument, NULL, 't'},
        {"keys", required_argument, NULL, 'k'},
        {"ops", required_argument, NULL, 'o'},
        {"protocol", required_argument, NULL, 'P'},
        {"rdma-device", required_argument, NULL, 'D'},
        {"auth-secret-file", required_argument, NULL, 'a'},
        {"memory", no_argument, NULL, 'R'},
        {"key-prefix", required_argument, NULL, 'K'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    const char *addr = NULL, *ops = "put,get";
    int c;
    while ((c = getopt_long(argc, argv, "hn:", longopts, NULL)) != -1) {
        switch (c) {
        case 'm':
            cfg.mode = "cluster";
            addr = optarg;
            break;
        case 'e':
            cfg.mode = "embedded";
            break;
        case 'M':
            cfg.mode = "memcached";
            addr = optarg;
            break;
        case 'c':
            cfg.mode = "memcpy";
            break;
        case 's': {
            uint64_t v;
            if (mc_parse_size(optarg, &v) < 0 || v == 0 || v > (1U << 30)) {
                fprintf(stderr, "mc_bench: bad --size '%s'\n", optarg);
                return 2;
            }
            cfg.size = (size_t)v;
            break;
        }
        case 'n':
            cfg.conc = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'N':
            cfg.no_shm = 1;
            break;
        case 'P':
            cfg.protocol = optarg;
            break;
        case 'D':
            cfg.rdma_device = optarg;
            break;
        case 'a':
            cfg.secret_file = optarg;
            break;
        case 't':
            cfg.seconds = strtod(optarg, NULL);
            break;
        case 'k':
            cfg.keys = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'o':
            ops = optarg;
            break;
        case 'R':
            cfg.memory = 1;
            break;
        case 'K':
            if (strlen(optarg) > 32) { /* keys are made in 64-byte buffers */
                fprintf(stderr, "mc_bench: --key-prefix is longer than 32 bytes\n");
                return 2;
            }
            cfg.key_prefix = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!cfg.mode || optind != argc || cfg.conc == 0 || cfg.conc > 4096 || cfg.keys == 0 ||
        !(cfg.seconds > 0)) {
        usage(stderr);
        return 2;
    }
    char *opsdup = strdup(ops), *save = NULL;
    for (char *t = strtok_r(opsdup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int op = strcmp(t, "put") == 0 || strcmp(t, "set") == 0 ? OP_PUT
                 : strcmp(t, "get") == 0                        ? OP_GET
                 : strcmp(t, "stat") == 0                       ? OP_STAT
                                                                : -1;
        if (op < 0 || cfg.nphases == 3) {
            fprintf(stderr, "mc_bench: --ops takes put,get,stat (or some of them)\n");
            return 2;
        }
        cfg.phases[cfg.nphases++] = op;
    }
    free(opsdup);
    if (strcmp(cfg.mode, "memcpy") == 0) {
        cfg.conc = 1; /* one thread copying */
        return run_memcpy();
    }
    if (strcmp(cfg.mode, "memcached") == 0) {
        for (int p = 0; p < cfg.nphases; p++)
            if (cfg.phases[p] == OP_STAT || cfg.memory) {
                fprintf(stderr, "mc_bench: stat and --memory are for the store modes\n");
                return 2;
            }
        return run_memcached(addr);
    }
    /* SHM PATH: a `--shm --master ADDR` mode goes here once the shared-memory
     * data path exists: the same run_store() with the path enabled, checked
     * through the store's counters (see STATS in run_store), compared with
     * --memcpy by cluster.sh. */
    return run_store(addr); /* cluster (addr set) or embedded (NULL) */
}
