/*
 * rdma_selftest.c - the RDMA transport (core/src/transport/transport_rdma.c) run for
 * real: a node process and a client process over a verbs device (Soft-RoCE
 * rxe0 in the test VM, see run-vm.sh).
 *
 *   rdma_selftest node --listen IP:PORT --publish FILE [--seg-size BYTES]
 *   rdma_selftest client --connect IP:PORT --publish FILE
 *
 * The node fills a segment with a known pattern, registers it in chunks of
 * 16 MiB (so that large transfers cross memory regions), listens, and
 * publishes its pid and packed descriptor in FILE (standing in for the
 * master's segment table). The client reads the pattern, writes and reads
 * back 1 KiB, 1 MiB and 64 MiB through staging slots and through its own
 * registered buffers, runs many operations at once, checks the counters,
 * provokes a remote access error, a timeout and a close with operations
 * pending, and finally kills the node and checks that the pending and the
 * next operations fail within the timeout instead of hanging. The node has
 * a fence at epoch EPOCH (transport_rdma.h, "Fences"): the client's writes
 * carry that epoch, and writes of a lower one must be refused, alone or
 * among others, with nothing of theirs landing. Its fence's mount word is
 * at MOUNT: reads of a lower epoch must fail with ESTALE, alone or among
 * others, and one READ of the word decides the reads queued together.
 *
 * Prints one "ok"/"not ok" line per check and "N passed, N failed"; exits 0
 * when all passed, 1 otherwise, 77 when built without RDMA or when no device
 * exists.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/log.h"
#include "transport/transport_rdma.h"

#define KiB ((uint64_t)1024)
#define MiB ((uint64_t)1024 * 1024)
#define CHUNK (16 * MiB)  /* the node registers its segment in chunks this big */
#define TIMEOUT_MS 5000   /* connect and operations */
#define WATCHDOG_MS 60000 /* a wait longer than this is a hang */
#define BIG (64 * MiB)    /* the largest transfer */
#define EPOCH 100         /* the node's fence's epoch */
#define MOUNT 90          /* its mount word: the epoch of the segment's last mount */

static mc_loop_t *L;
static int passed, failed;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...)
{
    va_list ap;
    printf("%s - ", ok ? "ok" : "not ok");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    if (ok)
        passed++;
    else
        failed++;
}

static const char *err_name(int rc)
{
    return rc ? strerror(-rc) : "success";
}

static int parse_addr(const char *s, struct sockaddr_storage *ss)
{
    char host[128];
    const char *colon = strrchr(s, ':');
    if (!colon || (size_t)(colon - s) >= sizeof(host))
        return -EINVAL;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = 0;
    int port = atoi(colon + 1);
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    size_t hl = strlen(host);
    if (hl > 2 && host[0] == '[' && host[hl - 1] == ']') {
        host[hl - 1] = 0;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        return inet_pton(AF_INET6, host + 1, &in6->sin6_addr) == 1 ? 0 : -EINVAL;
    }
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &in->sin_addr) == 1 ? 0 : -EINVAL;
}

/* The node's segment content: word k of the segment is pattern_word(k). */
static uint64_t pattern_word(uint64_t k)
{
    return (k + 1) * 0x9E3779B97F4A7C15ULL;
}

static void fill_pattern(char *p, uint64_t at, uint64_t len)
{
    /* at and len are multiples of 8 here */
    for (uint64_t i = 0; i < len; i += 8) {
        uint64_t w = pattern_word((at + i) / 8);
        memcpy(p + i, &w, 8);
    }
}

static void fill_random(char *p, uint64_t len, uint64_t seed)
{
    uint64_t x = seed * 0x2545F4914F6CDD1DULL + 1;
    for (uint64_t i = 0; i < len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, len - i < 8 ? len - i : 8);
    }
}

static char *alloc_pages(uint64_t len)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, len) != 0)
        return NULL;
    memset(p, 0, len);
    return p;
}

/* ---- waiting on the loop ---- */

static int hung;

static void on_watchdog(mc_timer_t *t)
{
    hung = 1;
    mc_loop_stop(L);
}

typedef struct waiter {
    int want, done, rc; /* rc: the first error */
    uint64_t t0, t_end;
} waiter_t;

static void op_cb(void *arg, int status)
{
    waiter_t *w = arg;
    if (status && !w->rc)
        w->rc = status;
    if (++w->done == w->want) {
        w->t_end = mc_loop_now_ms();
        mc_loop_stop(L);
    }
}

/* Runs the loop until w has all its callbacks; -EDEADLK if that takes longer
 * than the watchdog (a hang: the transport broke its timeout promise). */
static int wait_all(waiter_t *w)
{
    mc_timer_t wd = {0};
    hung = 0;
    mc_timer_start(L, &wd, WATCHDOG_MS, 0, on_watchdog);
    while (w->done < w->want && !hung)
        mc_loop_run(L);
    mc_timer_stop(&wd);
    return hung ? -EDEADLK : w->rc;
}

typedef struct conn_wait {
    int done, rc;
} conn_wait_t;

static void on_connected(mc__rdma_conn_t *c, int status, void *arg)
{
    conn_wait_t *cw = arg;
    cw->done = 1;
    cw->rc = status;
    mc_loop_stop(L);
}

static int do_connect(mc__rdma_ctx_t *ctx, const struct sockaddr *sa, uint64_t timeout_ms,
                      mc__rdma_conn_t **out, uint64_t *ms)
{
    conn_wait_t cw = {0};
    uint64_t t0 = mc_loop_now_ms();
    int rc = mc__rdma_connect(ctx, sa, timeout_ms, on_connected, &cw, out);
    if (rc < 0)
        return rc;
    mc_timer_t wd = {0};
    hung = 0;
    mc_timer_start(L, &wd, WATCHDOG_MS, 0, on_watchdog);
    while (!cw.done && !hung)
        mc_loop_run(L);
    mc_timer_stop(&wd);
    *ms = mc_loop_now_ms() - t0;
    if (hung)
        return -EDEADLK;
    if (cw.rc < 0)
        *out = NULL; /* freed by the transport */
    return cw.rc;
}

/* One synchronous transfer: returns its status and its time in *ms. */
static int xfer(mc__rdma_conn_t *c, int write, char *buf, const mc__rdma_mr_t *mr,
                const mc__rdma_desc_t *rd, uint64_t roff, uint64_t len, uint64_t timeout_ms,
                uint64_t *ms)
{
    waiter_t w = {.want = 1, .t0 = mc_loop_now_ms()};
    int rc = write ? mc__rdma_write_epoch(c, EPOCH, buf, mr, rd, roff, len, timeout_ms, op_cb, &w)
                   : mc__rdma_read(c, buf, mr, rd, roff, len, timeout_ms, op_cb, &w);
    if (rc < 0)
        return rc;
    rc = wait_all(&w);
    if (ms)
        *ms = (w.t_end ? w.t_end : mc_loop_now_ms()) - w.t0;
    return rc;
}

static double mbps(uint64_t bytes, uint64_t ms)
{
    return ms ? (double)bytes / (double)MiB / ((double)ms / 1000.0) : 0.0;
}

/* ---- node ---- */

/* The node's fence: its epoch and a slot per connection, never reused
 * (the test makes a handful). */
static struct {
    _Atomic uint64_t epoch;
    _Atomic uint64_t slot[64];
    unsigned joined;
    _Atomic uint64_t mount;
} fence = {.epoch = EPOCH, .mount = MOUNT};

static _Atomic uint64_t *fence_join(void *arg, mc__rdma_conn_t *c, const char *peer)
{
    return fence.joined < 64 ? &fence.slot[fence.joined++] : NULL;
}

static void fence_leave(void *arg, mc__rdma_conn_t *c) {}

static const mc__rdma_fence_ops_t fence_ops = {.join = fence_join, .leave = fence_leave};

/*
 * The fence under rises (step_fence_races()): once the client sets go, the
 * node raises its epoch every RACE_TICK_MS, as a node does for a write
 * that ended: it stores the new epoch, then loads the slots, and counts
 * the rise as enforced once no slot shows an older write in progress.
 * Then it fills RACE_LEN bytes at RACE_AT with the epoch enforced (less
 * RACE_BASE, as one byte): the client writes there only bytes of its
 * write's epoch, so a byte below it at any later tick is a write that
 * landed after its epoch's end was enforced (bytes, not words: a word
 * read while the NIC writes it could mix two). The report lies in the
 * segment's last page, for the client's READs.
 */
#define RACE_AT (80 * MiB)
#define RACE_LEN (512 * KiB)
#define RACE_BASE EPOCH
#define RACE_MAX (RACE_BASE + 250)
#define RACE_TICK_MS 3

typedef struct race_report {
    uint64_t go;         /* the client's: 1 raise, 2 stop */
    uint64_t enforced;   /* the last epoch counted as enforced */
    uint64_t violations; /* ticks that found a byte below it */
    uint64_t rises;      /* rises enforced */
    uint64_t held;       /* ticks a slot held a rise back */
} race_report_t;

static char *race_seg;
static uint64_t race_seg_size;
static uint64_t race_pending; /* the rise being enforced, or 0 */

static void on_race_tick(mc_timer_t *t)
{
    volatile race_report_t *r = (volatile race_report_t *)(void *)(race_seg + race_seg_size - 4096);
    unsigned char *at = (unsigned char *)race_seg + RACE_AT;
    if (r->go != 1)
        return;
    if (!r->enforced) { /* the first tick: the region is the epoch's now */
        r->enforced = atomic_load(&fence.epoch);
        memset(at, (int)(r->enforced - RACE_BASE), RACE_LEN);
    }
    unsigned char floor = (unsigned char)(r->enforced - RACE_BASE);
    for (uint64_t i = 0; i < RACE_LEN; i++)
        if (((volatile unsigned char *)at)[i] < floor) {
            r->violations++;
            break;
        }
    if (!race_pending) {
        if (atomic_load(&fence.epoch) >= RACE_MAX)
            return;
        race_pending = atomic_load(&fence.epoch) + 1;
        atomic_store(&fence.epoch, race_pending);
    }
    for (unsigned k = 0; k < fence.joined; k++) {
        uint64_t e = atomic_load(&fence.slot[k]);
        if (e && e < race_pending) {
            r->held++;
            return;
        }
    }
    r->enforced = race_pending;
    race_pending = 0;
    memset(at, (int)(r->enforced - RACE_BASE), RACE_LEN);
    r->rises++;
}

static int run_node(const char *listen, const char *publish, uint64_t seg_size)
{
    struct sockaddr_storage ss;
    if (parse_addr(listen, &ss) < 0) {
        fprintf(stderr, "node: bad address %s\n", listen);
        return 1;
    }
    mc__rdma_opts_t o = {.bind = (struct sockaddr *)&ss, .max_mr_chunk = CHUNK};
    mc__rdma_ctx_t *ctx;
    int rc = mc__rdma_ctx_new(L, &o, &ctx);
    if (rc < 0) {
        fprintf(stderr, "node: no RDMA context: %s\n", strerror(-rc));
        return rc == -ENOTSUP || rc == -ENODEV ? 77 : 1;
    }
    char *seg = alloc_pages(seg_size);
    if (!seg) {
        fprintf(stderr, "node: cannot allocate %" PRIu64 " bytes\n", seg_size);
        return 1;
    }
    fill_pattern(seg, 0, seg_size);
    mc__rdma_mr_t *mr;
    if ((rc = mc__rdma_register(ctx, seg, seg_size, MC__RDMA_REMOTE, &mr)) < 0) {
        fprintf(stderr, "node: registering the segment failed: %s\n", strerror(-rc));
        return 1;
    }
    if ((rc = mc__rdma_fence(ctx, &fence.epoch, &fence.mount, &fence_ops)) < 0) {
        fprintf(stderr, "node: no fence: %s\n", strerror(-rc));
        return 1;
    }
    if ((rc = mc__rdma_listen(ctx, (struct sockaddr *)&ss)) < 0) {
        fprintf(stderr, "node: listening on %s failed: %s\n", listen, strerror(-rc));
        return 1;
    }
    const mc__rdma_desc_t *d = mc__rdma_mr_desc(mr);
    size_t need = mc__rdma_desc_pack(d, NULL, 0);
    unsigned char *blob = malloc(need);
    mc__rdma_desc_pack(d, blob, need);
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", publish);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "node: cannot write %s: %s\n", tmp, strerror(errno));
        return 1;
    }
    fprintf(f, "%d\n", (int)getpid());
    for (size_t i = 0; i < need; i++)
        fprintf(f, "%02x", blob[i]);
    fprintf(f, "\n");
    fclose(f);
    rename(tmp, publish);
    printf("node: pid %d on %s, segment of %" PRIu64 " bytes in %u regions of %" PRIu64
           ", descriptor %zu bytes, listening on port %d\n",
           (int)getpid(), mc__rdma_device_name(ctx), seg_size, d->n, d->chunk, need,
           mc__rdma_listen_port(ctx));
    fflush(stdout);
    free(blob);
    /* Serve until killed: the HCA does the work, this loop only accepts
     * (and raises the fence's epoch for step_fence_races()). */
    race_seg = seg;
    race_seg_size = seg_size;
    memset(seg + seg_size - 4096, 0, 4096); /* the race report */
    mc_timer_t race = {0};
    mc_timer_start(L, &race, RACE_TICK_MS, RACE_TICK_MS, on_race_tick);
    mc_loop_run(L);
    mc__rdma_deregister(mr);
    mc__rdma_ctx_free(ctx);
    return 0;
}

/* ---- client ---- */

static int read_publish(const char *path, int *pid, mc__rdma_desc_t **d)
{
    for (int i = 0; i < 400; i++) { /* up to 20 s for the node to start */
        FILE *f = fopen(path, "r");
        if (!f) {
            usleep(50000);
            continue;
        }
        static char line[1 << 20];
        int rc = -EINVAL;
        if (fscanf(f, "%d\n", pid) == 1 && fgets(line, sizeof(line), f)) {
            size_t hl = strcspn(line, "\n");
            unsigned char *blob = malloc(hl / 2 + 1);
            for (size_t k = 0; k + 1 < hl; k += 2) {
                unsigned v;
                sscanf(line + k, "%2x", &v);
                blob[k / 2] = (unsigned char)v;
            }
            rc = mc__rdma_desc_unpack(blob, hl / 2, d);
            free(blob);
        }
        fclose(f);
        return rc;
    }
    return -ENOENT;
}

static void check_codec(const mc__rdma_desc_t *d)
{
    size_t need = mc__rdma_desc_pack(d, NULL, 0);
    unsigned char *b = malloc(need);
    mc__rdma_desc_pack(d, b, need);
    mc__rdma_desc_t *e = NULL;
    int rc = mc__rdma_desc_unpack(b, need, &e);
    int same = rc == 0 && e->n == d->n && e->size == d->size && e->chunk == d->chunk;
    for (uint32_t i = 0; same && i < d->n; i++)
        same = e->c[i].addr == d->c[i].addr && e->c[i].rkey == d->c[i].rkey;
    check(same, "descriptor: pack/unpack round trip (%u chunks)", d->n);
    free(e);
    check(mc__rdma_desc_unpack(b, need - 1, &e) == -EINVAL, "descriptor: truncated -> EINVAL");
    b[0] ^= 1;
    check(mc__rdma_desc_unpack(b, need, &e) == -EINVAL, "descriptor: bad magic -> EINVAL");
    b[0] ^= 1;
    b[24] += 1; /* n no longer matches size / chunk */
    check(mc__rdma_desc_unpack(b, need, &e) == -EINVAL,
          "descriptor: inconsistent chunk count -> EINVAL");
    free(b);
}

/* What the client's steps share. */
typedef struct client {
    mc__rdma_ctx_t *ctx;
    mc__rdma_conn_t *c;
    const struct sockaddr *sa;
    mc__rdma_desc_t *rd; /* the node's segment */
    mc__rdma_mr_t *lmr;  /* src and dst, registered */
    char *src, *dst;     /* BIG bytes each */
    char *expect;        /* BIG bytes, not registered */
    int node_pid;
    uint64_t wbytes, rbytes, nwrites, nreads; /* what the counters must say */
} client_t;

/* Closes cl's connection and connects again; returns 0 or -1. */
static int reconnect(client_t *cl)
{
    uint64_t ms = 0;
    mc__rdma_close(cl->c);
    int rc = do_connect(cl->ctx, cl->sa, 0, &cl->c, &ms);
    check(rc == 0, "reconnect: %s in %" PRIu64 " ms", err_name(rc), ms);
    return rc < 0 ? -1 : 0;
}

/* 1. Reading the node's memory as it is: the pattern, across a region
 * boundary of the node's segment. 2. Round trips of each size, from
 * staging and from a registered buffer. */
static void step_round_trips(client_t *cl)
{
    uint64_t ms = 0, at = CHUNK - 2 * KiB;
    int rc = xfer(cl->c, 0, cl->dst, NULL, cl->rd, at, 4 * KiB, 0, &ms);
    fill_pattern(cl->expect, at, 4 * KiB);
    check(rc == 0 && memcmp(cl->dst, cl->expect, 4 * KiB) == 0,
          "READ 4 KiB of the node's pattern across its regions 0/1: %s", err_name(rc));
    cl->rbytes += 4 * KiB;
    cl->nreads++;

    static const uint64_t sizes[] = {1 * KiB, 1 * MiB, BIG};
    for (int mode = 0; mode < 2; mode++) {
        const mc__rdma_mr_t *m = mode ? cl->lmr : NULL;
        const char *mname = mode ? "registered buffer" : "staging";
        for (int si = 0; si < 3; si++) {
            uint64_t len = sizes[si];
            /* Offsets that are not aligned and, for BIG, cross 5 regions. */
            uint64_t roff = 8 * MiB + 12345 + (uint64_t)si * 4096 + (uint64_t)mode * 777;
            fill_random(cl->src, len, len + (uint64_t)mode);
            memset(cl->dst, 0, len);
            uint64_t wms = 0, rms = 0;
            int wrc = xfer(cl->c, 1, cl->src, m, cl->rd, roff, len, 0, &wms);
            int rrc = wrc ? wrc : xfer(cl->c, 0, cl->dst, m, cl->rd, roff, len, 0, &rms);
            int same = wrc == 0 && rrc == 0 && memcmp(cl->src, cl->dst, len) == 0;
            check(same,
                  "%s: WRITE then READ %" PRIu64 " KiB at offset %" PRIu64
                  ": %s, bytes equal (write %" PRIu64 " ms %.1f MiB/s, read %" PRIu64
                  " ms %.1f MiB/s)",
                  mname, len / KiB, roff, err_name(wrc ? wrc : rrc), wms, mbps(len, wms), rms,
                  mbps(len, rms));
            cl->wbytes += len;
            cl->rbytes += len;
            cl->nwrites++;
            cl->nreads++;
        }
    }
}

/* 3. Many at once: 12 writes of 1 MiB (48 slices for 16 slots), then 12
 * reads, from both kinds of buffer. 4. A write of zeros (buf NULL). */
static void step_many_and_zeros(client_t *cl)
{
    const int N = 12;
    fill_random(cl->src, N * MiB, 99);
    memset(cl->dst, 0, N * MiB);
    waiter_t w = {.want = N, .t0 = mc_loop_now_ms()};
    int sub = 0;
    for (int i = 0; i < N; i++)
        sub |= mc__rdma_write_epoch(cl->c, EPOCH, cl->src + i * MiB, (i & 1) ? cl->lmr : NULL,
                                    cl->rd, 32 * MiB + (uint64_t)i * MiB, MiB, 0, op_cb, &w);
    int wrc = sub ? sub : wait_all(&w);
    waiter_t r = {.want = N, .t0 = mc_loop_now_ms()};
    for (int i = 0; i < N && !wrc; i++)
        sub |= mc__rdma_read(cl->c, cl->dst + i * MiB, (i & 1) ? NULL : cl->lmr, cl->rd,
                             32 * MiB + (uint64_t)i * MiB, MiB, 0, op_cb, &r);
    int rrc = wrc ? wrc : sub ? sub : wait_all(&r);
    check(wrc == 0 && rrc == 0 && memcmp(cl->src, cl->dst, N * MiB) == 0,
          "%d concurrent 1 MiB WRITEs then %d READs, mixed buffers: %s, bytes equal", N, N,
          err_name(wrc ? wrc : rrc));
    cl->wbytes += N * MiB;
    cl->rbytes += N * MiB;
    cl->nwrites += N;
    cl->nreads += N;

    memset(cl->dst, 0xff, 64 * KiB);
    wrc = xfer(cl->c, 1, NULL, NULL, cl->rd, 40 * MiB, 64 * KiB, 0, NULL);
    rrc = wrc ? wrc : xfer(cl->c, 0, cl->dst, NULL, cl->rd, 40 * MiB, 64 * KiB, 0, NULL);
    memset(cl->expect, 0, 64 * KiB);
    check(wrc == 0 && rrc == 0 && memcmp(cl->dst, cl->expect, 64 * KiB) == 0,
          "WRITE of zeros (no buffer) reads back as zeros: %s", err_name(wrc ? wrc : rrc));
    cl->wbytes += 64 * KiB;
    cl->rbytes += 64 * KiB;
    cl->nwrites++;
    cl->nreads++;
}

/* 5. Counters. */
static void step_counters(client_t *cl)
{
    mc__rdma_stats_t st;
    mc__rdma_stats(cl->ctx, &st);
    printf("client: counters: reads %" PRIu64 " (%" PRIu64 " bytes), writes %" PRIu64 " (%" PRIu64
           " bytes), failed %" PRIu64 ", slices %" PRIu64 ", completions %" PRIu64
           ", cq wake-ups %" PRIu64 ", in-flight peak %" PRIu64 "\n",
           st.reads, st.bytes_read, st.writes, st.bytes_written, st.failed, st.slices,
           st.completions, st.cq_wakeups, st.inflight_peak);
    check(st.bytes_written == cl->wbytes && st.writes == cl->nwrites,
          "counters: %" PRIu64 " writes, %" PRIu64 " bytes written", st.writes, st.bytes_written);
    check(st.bytes_read == cl->rbytes && st.reads == cl->nreads,
          "counters: %" PRIu64 " reads, %" PRIu64 " bytes read", st.reads, st.bytes_read);
    check(st.failed == 0 && st.completions == st.slices + st.fence_wrs && st.fence_wrs > 0,
          "counters: no failure, every slice (%" PRIu64 ") and fence request (%" PRIu64
          ") completed",
          st.slices, st.fence_wrs);
    check(st.inflight_peak > 1 && st.inflight_peak <= MC__RDMA_MAX_INFLIGHT,
          "slices pipelined and bounded: peak %" PRIu64 " in flight (limit %d)", st.inflight_peak,
          MC__RDMA_MAX_INFLIGHT);
    check(st.cq_wakeups > 0 && st.cq_wakeups <= st.completions,
          "completions event-driven: %" PRIu64 " wake-ups for %" PRIu64 " completions",
          st.cq_wakeups, st.completions);
    check(st.conns_opened == 1 && st.conns_failed == 0, "counters: 1 connection opened");
}

/* 5b. The fence: writes below its epoch are refused, alone and among
 * others, and nothing of theirs lands; at or above it they land. */
static void step_fence(client_t *cl)
{
    check(mc__rdma_conn_fenced(cl->c), "the node's connection parameters name a fence slot");
    waiter_t w0 = {.want = 1};
    int z = mc__rdma_write_epoch(cl->c, 0, cl->src, NULL, cl->rd, 0, 4096, 0, op_cb, &w0);
    check(z == -ESTALE && w0.done == 0, "a write of no epoch: %s at once, no callback",
          err_name(z));

    const uint64_t at = 44 * MiB, N = 12;
    memset(cl->src, 0, N * MiB);
    int rc = xfer(cl->c, 1, cl->src, NULL, cl->rd, at, N * MiB, 0, NULL);
    waiter_t w = {.want = 1};
    fill_random(cl->src, MiB, 7);
    int sub = mc__rdma_write_epoch(cl->c, EPOCH - 1, cl->src, NULL, cl->rd, at, MiB, 0, op_cb, &w);
    int old = sub ? sub : wait_all(&w);
    int got = xfer(cl->c, 0, cl->dst, NULL, cl->rd, at, MiB, 0, NULL);
    memset(cl->expect, 0, MiB);
    check(rc == 0 && old == -ESTALE && got == 0 && memcmp(cl->dst, cl->expect, MiB) == 0,
          "a write of epoch %d below the fence's %d: %s, nothing of it landed", EPOCH - 1, EPOCH,
          err_name(old));

    /* Twelve at once, of epochs EPOCH + 1 and EPOCH - 1 in turn, from
     * both kinds of buffer: one round decides them all. */
    fill_random(cl->src, N * MiB, 8);
    int results[12];
    waiter_t ws[12];
    for (uint64_t i = 0; i < N; i++) {
        ws[i] = (waiter_t){.want = 1};
        uint64_t e = i & 1 ? EPOCH - 1 : EPOCH + 1;
        sub |= mc__rdma_write_epoch(cl->c, e, cl->src + i * MiB, (i & 2) ? cl->lmr : NULL, cl->rd,
                                    at + i * MiB, MiB, 0, op_cb, &ws[i]);
    }
    int landed = 0, refused = 0, right = !sub;
    for (uint64_t i = 0; i < N && !sub; i++) {
        results[i] = wait_all(&ws[i]);
        landed += results[i] == 0;
        refused += results[i] == -ESTALE;
    }
    got = xfer(cl->c, 0, cl->dst, NULL, cl->rd, at, N * MiB, 0, NULL);
    for (uint64_t i = 0; i < N && right; i++)
        right = memcmp(cl->dst + i * MiB, i & 1 ? cl->expect : cl->src + i * MiB, MiB) == 0 &&
                results[i] == (i & 1 ? -ESTALE : 0);
    check(right && got == 0 && landed == 6 && refused == 6,
          "%d writes at once, epochs %d and %d in turn: %d landed, %d refused (ESTALE), the "
          "bytes of each where they belong",
          (int)N, EPOCH + 1, EPOCH - 1, landed, refused);
    mc__rdma_stats_t st;
    mc__rdma_stats(cl->ctx, &st);
    check(st.writes_fenced == 8, "counters: %" PRIu64 " writes fenced (want 8)", st.writes_fenced);
}

/* 5b'. The mount word: a read of an epoch below it (a replica set of
 * before the segment was mounted again) fails with ESTALE, alone and
 * among others; at or above it the bytes arrive. One READ of the word
 * decides reads queued together. */
static void step_read_check(client_t *cl)
{
    const uint64_t at = 44 * MiB, N = 12, SZ = 4 * KiB;
    int rc = xfer(cl->c, 0, cl->expect, NULL, cl->rd, at, MiB, 0, NULL); /* unchecked */
    waiter_t w = {.want = 1};
    memset(cl->dst, 0, MiB);
    int sub = mc__rdma_read_epoch(cl->c, MOUNT, cl->dst, NULL, cl->rd, at, MiB, 0, op_cb, &w);
    int got = sub ? sub : wait_all(&w);
    check(rc == 0 && got == 0 && memcmp(cl->dst, cl->expect, MiB) == 0,
          "a read of epoch %d, the mount word's: %s, the bytes equal", MOUNT, err_name(got));
    w = (waiter_t){.want = 1};
    sub = mc__rdma_read_epoch(cl->c, MOUNT - 1, cl->dst, cl->lmr, cl->rd, at, MiB, 0, op_cb, &w);
    got = sub ? sub : wait_all(&w);
    check(got == -ESTALE, "a read of epoch %d below the mount word's %d: %s", MOUNT - 1, MOUNT,
          err_name(got));

    /* Twelve small ones at once, of epochs MOUNT + 1 and MOUNT - 1 in
     * turn, from both kinds of buffer. */
    mc__rdma_stats_t st0, st;
    mc__rdma_stats(cl->ctx, &st0);
    memset(cl->dst, 0, N * SZ);
    waiter_t ws[12];
    for (uint64_t i = 0; i < N; i++) {
        ws[i] = (waiter_t){.want = 1};
        uint64_t e = i & 1 ? MOUNT - 1 : MOUNT + 1;
        sub |= mc__rdma_read_epoch(cl->c, e, cl->dst + i * SZ, (i & 2) ? cl->lmr : NULL, cl->rd,
                                   at + i * SZ, SZ, 0, op_cb, &ws[i]);
    }
    int right = !sub, ok = 0, stale = 0;
    for (uint64_t i = 0; i < N && !sub; i++) {
        int r = wait_all(&ws[i]);
        ok += r == 0;
        stale += r == -ESTALE;
        right &= r == (i & 1 ? -ESTALE : 0) &&
                 (r || memcmp(cl->dst + i * SZ, cl->expect + i * SZ, SZ) == 0);
    }
    mc__rdma_stats(cl->ctx, &st);
    check(right && ok == 6 && stale == 6,
          "%d reads at once, epochs %d and %d in turn: %d read, %d discarded (ESTALE), the "
          "bytes of each read right",
          (int)N, MOUNT + 1, MOUNT - 1, ok, stale);
    check(st.fence_wrs - st0.fence_wrs == 1 && st.reads_fenced == 7,
          "counters: one READ of the mount word for the %d (%" PRIu64 "), %" PRIu64
          " reads discarded (want 7)",
          (int)N, st.fence_wrs - st0.fence_wrs, st.reads_fenced);
}

/* Reads the node's race report (on_race_tick()) into *r. */
static int race_report(client_t *cl, race_report_t *r)
{
    return xfer(cl->c, 0, (char *)r, NULL, cl->rd, cl->rd->size - 4096, sizeof(*r), 0, NULL);
}

/* Sets the node's go word (as a write no fence refuses). */
static int race_go(client_t *cl, uint64_t go)
{
    waiter_t w = {.want = 1};
    int rc = mc__rdma_write_epoch(cl->c, UINT64_MAX / 2, &go, NULL, cl->rd, cl->rd->size - 4096,
                                  sizeof(go), 0, op_cb, &w);
    return rc ? rc : wait_all(&w);
}

/* 5c. The fence under rises: while the node raises its epoch every few
 * ms, rounds of 8 writes of 64 KiB, each of the epoch last seen enforced,
 * go to its race region. A write refused (ESTALE) makes the next round
 * read the report again. No byte of a write may land after its epoch's
 * end was enforced; some writes must land, and some be refused. */
static void step_fence_races(client_t *cl)
{
    race_report_t r = {0};
    const uint64_t n = 8, len = RACE_LEN / 8;
    uint64_t landed = 0, refused = 0, rounds = 0, t0 = mc_loop_now_ms();
    int rc = race_go(cl, 1);
    while (rc == 0 && (rc = race_report(cl, &r)) == 0 && r.rises < 120 &&
           mc_loop_now_ms() - t0 < 20000) {
        uint64_t e = r.enforced ? r.enforced : EPOCH;
        memset(cl->src, (int)(e - RACE_BASE), RACE_LEN);
        waiter_t ws[8];
        int sub = 0;
        for (uint64_t i = 0; i < n; i++) {
            ws[i] = (waiter_t){.want = 1};
            sub |= mc__rdma_write_epoch(cl->c, e, cl->src + i * len, (i & 1) ? cl->lmr : NULL,
                                        cl->rd, RACE_AT + i * len, len, 0, op_cb, &ws[i]);
        }
        for (uint64_t i = 0; i < n && !sub; i++) {
            int w = wait_all(&ws[i]);
            landed += w == 0;
            refused += w == -ESTALE;
            if (w && w != -ESTALE)
                rc = w;
        }
        rc = rc ? rc : sub;
        rounds++;
    }
    int stop = race_go(cl, 2);
    int got = race_report(cl, &r);
    check(rc == 0 && stop == 0 && got == 0 && r.violations == 0 && r.rises >= 50 && landed > 0 &&
              refused > 0,
          "the fence under rises: %" PRIu64 " rises enforced (%" PRIu64 " ticks held back by a "
          "write in progress), %" PRIu64 " rounds of 8 writes: %" PRIu64 " landed, %" PRIu64
          " refused; bytes landed after their epoch ended: %" PRIu64 " (%s)",
          r.rises, r.held, rounds, landed, refused, r.violations,
          err_name(rc     ? rc
                   : stop ? stop
                          : got));
}

/* 6. Bad arguments fail at once, without a callback. 7. A remote access
 * error (a wrong rkey) fails the operation with EIO and the connection;
 * the next operation fails at once. Returns -1 when it cannot reconnect. */
static int step_bad_args_and_rkey(client_t *cl)
{
    waiter_t w = {.want = 1};
    int a = mc__rdma_read(cl->c, cl->dst, NULL, cl->rd, cl->rd->size - 10, 20, 0, op_cb, &w);
    int b = mc__rdma_read(cl->c, cl->expect, cl->lmr, cl->rd, 0, 4096, 0, op_cb, &w);
    int z = mc__rdma_write(cl->c, cl->src, NULL, cl->rd, 0, 0, 0, op_cb, &w);
    check(a == -EINVAL && b == -EINVAL && z == -EINVAL && w.done == 0,
          "out of the segment, outside the registered buffer, zero length: EINVAL, no "
          "callback (%d %d %d)",
          a, b, z);

    mc__rdma_desc_t *bad = malloc(mc__rdma_desc_size(cl->rd->n));
    memcpy(bad, cl->rd, mc__rdma_desc_size(cl->rd->n));
    for (uint32_t i = 0; i < bad->n; i++)
        bad->c[i].rkey ^= 0x5a5a00;
    uint64_t t0 = mc_loop_now_ms();
    int rc = xfer(cl->c, 0, cl->dst, NULL, bad, 0, 64 * KiB, 0, NULL);
    uint64_t took = mc_loop_now_ms() - t0;
    check(rc == -EIO, "READ with a wrong rkey: %s (want EIO) in %" PRIu64 " ms", err_name(rc),
          took);
    free(bad);
    waiter_t w2 = {.want = 1};
    int next = mc__rdma_read(cl->c, cl->dst, NULL, cl->rd, 0, 4096, 0, op_cb, &w2);
    check(next < 0 && next == mc__rdma_conn_error(cl->c) && w2.done == 0,
          "the next operation on that connection fails at once: %s", err_name(next));
    return reconnect(cl);
}

/* 8. A timeout: 64 MiB with 2 ms to do it. 9. Close with operations
 * pending: their callbacks get ECANCELED, from the loop, after close
 * returned. Returns -1 when it cannot reconnect. */
static int step_timeout_and_close(client_t *cl)
{
    uint64_t t0 = mc_loop_now_ms();
    int rc = xfer(cl->c, 0, cl->dst, cl->lmr, cl->rd, 0, BIG, 2, NULL);
    uint64_t took = mc_loop_now_ms() - t0;
    check(rc == -ETIMEDOUT && took < 1000,
          "READ of 64 MiB with a 2 ms timeout: %s in %" PRIu64 " ms", err_name(rc), took);
    if (reconnect(cl) < 0)
        return -1;

    waiter_t w = {.want = 2};
    int a = mc__rdma_read(cl->c, cl->dst, cl->lmr, cl->rd, 0, BIG, 0, op_cb, &w);
    int b = mc__rdma_write_epoch(cl->c, EPOCH, cl->src, NULL, cl->rd, 0, MiB, 0, op_cb, &w);
    mc__rdma_close(cl->c);
    int before = w.done;
    rc = a ? a : b ? b : wait_all(&w);
    check(a == 0 && b == 0 && before == 0 && w.done == 2 && rc == -ECANCELED,
          "close with 2 operations pending: both called back later with %s", err_name(rc));
    uint64_t ms = 0;
    rc = do_connect(cl->ctx, cl->sa, 0, &cl->c, &ms);
    check(rc == 0, "reconnect: %s in %" PRIu64 " ms", err_name(rc), ms);
    return rc < 0 ? -1 : 0;
}

/* 10. The node dies with an operation in flight. */
static void step_node_dies(client_t *cl)
{
    int got = 0, tries = 0, rc = 0;
    uint64_t took = 0, ms = 0;
    for (; tries < 5 && !got; tries++) {
        waiter_t w = {.want = 1, .t0 = mc_loop_now_ms()};
        rc = mc__rdma_read(cl->c, cl->dst, cl->lmr, cl->rd, 0, BIG, 0, op_cb, &w);
        if (rc < 0)
            break;
        if (tries == 0) {
            kill(cl->node_pid, SIGKILL);
            printf("client: killed the node (pid %d) with a 64 MiB READ in flight\n", cl->node_pid);
            fflush(stdout);
        }
        rc = wait_all(&w);
        took = mc_loop_now_ms() - w.t0;
        got = rc < 0;
    }
    check(got && rc != -EDEADLK && took <= TIMEOUT_MS + 1000,
          "the pending READ fails when the node dies: %s after %" PRIu64 " ms (try %d)",
          err_name(rc), took, tries);
    waiter_t w = {.want = 1};
    int next = mc__rdma_write_epoch(cl->c, EPOCH, cl->src, NULL, cl->rd, 0, 4096, 0, op_cb, &w);
    if (next == 0) /* not yet noticed: then it must fail from the loop */
        next = wait_all(&w);
    check(next < 0 && next != -EDEADLK, "the next operation fails: %s", err_name(next));
    mc__rdma_close(cl->c);
    cl->c = NULL;
    uint64_t t0 = mc_loop_now_ms();
    rc = do_connect(cl->ctx, cl->sa, 0, &cl->c, &ms);
    took = mc_loop_now_ms() - t0;
    check(rc < 0 && rc != -EDEADLK && took <= TIMEOUT_MS + 1000,
          "connecting to the dead node fails: %s in %" PRIu64 " ms", err_name(rc), took);
    if (rc == 0)
        mc__rdma_close(cl->c);
}

/* The client's set-up: the node's descriptor, a context, a connection and
 * the registered buffers. Returns 0, or the exit status. */
static int client_open(client_t *cl, const char *connect_to, const char *publish,
                       struct sockaddr_storage *ss)
{
    if (parse_addr(connect_to, ss) < 0) {
        fprintf(stderr, "client: bad address %s\n", connect_to);
        return 1;
    }
    cl->sa = (struct sockaddr *)ss;
    int rc = read_publish(publish, &cl->node_pid, &cl->rd);
    if (rc < 0) {
        fprintf(stderr, "client: no usable descriptor in %s: %s\n", publish, strerror(-rc));
        return 1;
    }
    printf("client: node pid %d, remote segment %" PRIu64 " bytes in %u regions\n", cl->node_pid,
           cl->rd->size, cl->rd->n);
    check_codec(cl->rd);
    check(cl->rd->n >= 5 && cl->rd->chunk == CHUNK,
          "the segment is registered in %u regions of %" PRIu64 " bytes (chunked MR registration)",
          cl->rd->n, cl->rd->chunk);

    mc__rdma_opts_t o = {.timeout_ms = TIMEOUT_MS, .max_mr_chunk = CHUNK};
    if ((rc = mc__rdma_ctx_new(L, &o, &cl->ctx)) < 0) {
        fprintf(stderr, "client: no RDMA context: %s\n", strerror(-rc));
        return rc == -ENOTSUP || rc == -ENODEV ? 77 : 1;
    }
    uint64_t ms = 0;
    rc = do_connect(cl->ctx, cl->sa, 0, &cl->c, &ms);
    check(rc == 0, "connect to %s on %s: %s in %" PRIu64 " ms", connect_to,
          mc__rdma_device_name(cl->ctx), err_name(rc), ms);
    if (rc < 0)
        return 1;

    /* Client buffers: src and dst of BIG bytes each, registered as one
     * region (4 x 16 MiB chunks + ...) for the zero-copy mode. */
    char *mem = alloc_pages(2 * BIG);
    cl->expect = alloc_pages(BIG);
    if (!mem || !cl->expect)
        return 1;
    cl->src = mem;
    cl->dst = mem + BIG;
    rc = mc__rdma_register(cl->ctx, mem, 2 * BIG, 0, &cl->lmr);
    check(rc == 0, "register 128 MiB of client buffers: %s (%u regions)", err_name(rc),
          rc == 0 ? mc__rdma_mr_desc(cl->lmr)->n : 0);
    return rc < 0 ? 1 : 0;
}

static int run_client(const char *connect_to, const char *publish)
{
    client_t cl = {0};
    struct sockaddr_storage ss;
    int rc = client_open(&cl, connect_to, publish, &ss);
    if (rc)
        return rc;
    step_round_trips(&cl);
    step_many_and_zeros(&cl);
    step_counters(&cl);
    step_fence(&cl);
    step_read_check(&cl);
    step_fence_races(&cl);
    if (step_bad_args_and_rkey(&cl) < 0 || step_timeout_and_close(&cl) < 0)
        return 1;
    step_node_dies(&cl);

    mc__rdma_stats_t st;
    mc__rdma_stats(cl.ctx, &st);
    printf("client: final counters: reads %" PRIu64 ", writes %" PRIu64 ", failed %" PRIu64
           " (timeouts %" PRIu64 "), connections opened %" PRIu64 ", failed %" PRIu64 "\n",
           st.reads, st.writes, st.failed, st.timeouts, st.conns_opened, st.conns_failed);
    check(st.timeouts >= 1 && st.failed >= 5 && st.conns_failed >= 3,
          "counters record the failures");
    mc__rdma_deregister(cl.lmr);
    mc__rdma_ctx_free(cl.ctx);
    free(cl.src);
    free(cl.expect);
    free(cl.rd);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: rdma_selftest node --listen IP:PORT --publish FILE [--seg-size N]\n"
                    "       rdma_selftest client --connect IP:PORT --publish FILE\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    const char *role = argv[1], *addr = NULL, *publish = NULL;
    uint64_t seg_size = 96 * MiB;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--listen") || !strcmp(argv[i], "--connect"))
            addr = argv[i + 1];
        else if (!strcmp(argv[i], "--publish"))
            publish = argv[i + 1];
        else if (!strcmp(argv[i], "--seg-size"))
            seg_size = strtoull(argv[i + 1], NULL, 0);
        else
            usage();
    }
    if (!addr || !publish)
        usage();
    setvbuf(stdout, NULL, _IOLBF, 0);
    int is_node = strcmp(role, "node") == 0;
    if (!is_node && strcmp(role, "client") != 0)
        usage();
    mc__log_init(is_node ? "rdma-node" : "rdma-client", MC__LOG_INFO);
    int rc = mc__rdma_available();
    if (rc <= 0) {
        printf("SKIP: %s\n", rc == 0 ? "no RDMA device" : strerror(-rc));
        return 77;
    }
    if (mc_loop_new(&L) < 0) {
        fprintf(stderr, "cannot create the loop\n");
        return 1;
    }
    rc = is_node ? run_node(addr, publish, seg_size) : run_client(addr, publish);
    mc_loop_free(L);
    return rc;
}
