/*
 * test_etcd.c - the etcd client (runtime/etcd.h) against a real etcd: the
 * test starts Debian's etcd (etcd-server) on loopback ports of its own, in
 * a temporary data directory, and runs each request on a loop on this
 * thread until its callback stops the loop. Skips (77) without etcd.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mooncake/loop.h"
#include "runtime/etcd.h"
#include "unit.h"

static mc_loop_t *loop;
static pid_t etcd_pid;
static char ep[64];
static char dir[] = "/tmp/mc-test-etcd.XXXXXX";

/* ---- harness ---- */

/* What one request answered. */
typedef struct got {
    int done, rc;
    int64_t revision, lease, ttl, deleted;
    int succeeded, more;
    size_t nkvs;
    char key[8][64], val[8][64];
    size_t klen[8], vlen[8];
    int64_t mod_rev[8], create_rev[8], kv_lease[8];
} got_t;

static void on_res(void *arg, int rc, const mc__etcd_res_t *res)
{
    got_t *g = arg;
    g->done = 1;
    g->rc = rc;
    if (res) {
        g->revision = res->revision;
        g->lease = res->lease;
        g->ttl = res->ttl;
        g->deleted = res->deleted;
        g->succeeded = res->succeeded;
        g->more = res->more;
        g->nkvs = res->nkvs;
        for (size_t i = 0; i < res->nkvs && i < 8; i++) {
            const mc__etcd_kv_t *kv = &res->kvs[i];
            g->klen[i] = kv->klen < 64 ? kv->klen : 64;
            g->vlen[i] = kv->vlen < 64 ? kv->vlen : 64;
            memcpy(g->key[i], kv->key, g->klen[i]);
            memcpy(g->val[i], kv->val, g->vlen[i]);
            g->mod_rev[i] = kv->mod_rev;
            g->create_rev[i] = kv->create_rev;
            g->kv_lease[i] = kv->lease;
        }
    }
    mc_loop_stop(loop);
}

/* Runs the loop until g's request ended; returns its rc. */
static int wait_res(got_t *g, int start_rc)
{
    assert_int_equal(start_rc, 0);
    while (!g->done)
        assert_int_equal(mc_loop_run(loop), 0);
    return g->rc;
}

#define K(s) (s), sizeof(s) - 1

static mc__etcd_t *client(const char *eps, unsigned timeout_ms)
{
    mc__etcd_t *e = NULL;
    assert_int_equal(mc__etcd_new(loop, eps, timeout_ms, &e), 0);
    return e;
}

static int setup_etcd(void **state)
{
    if (system("command -v etcd >/dev/null 2>&1") != 0) {
        printf("needs etcd (Debian's etcd-server; packaging/deps.sh installs it)\n");
        exit(77);
    }
    if (!mkdtemp(dir))
        return -1;
    int cport = free_port(), pport = free_port();
    snprintf(ep, sizeof(ep), "127.0.0.1:%d", cport);
    char curl[64], purl[64], cluster[96], data[128], logf[128];
    snprintf(curl, sizeof(curl), "http://127.0.0.1:%d", cport);
    snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", pport);
    snprintf(cluster, sizeof(cluster), "t=%s", purl);
    snprintf(data, sizeof(data), "%s/data", dir);
    snprintf(logf, sizeof(logf), "%s/etcd.log", dir);
    etcd_pid = fork();
    if (etcd_pid == 0) {
        int fd = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execlp("etcd", "etcd", "--name", "t", "--data-dir", data, "--listen-client-urls", curl,
               "--advertise-client-urls", curl, "--listen-peer-urls", purl,
               "--initial-advertise-peer-urls", purl, "--initial-cluster", cluster, (char *)NULL);
        _exit(127);
    }
    assert_int_equal(mc_loop_new(&loop), 0);
    /* Ready when it answers a range. */
    mc__etcd_t *e = client(ep, 1000);
    for (int i = 0; i < 200; i++) {
        got_t g = {0};
        if (wait_res(&g, mc__etcd_range(e, K("ready"), 0, on_res, &g)) == 0) {
            mc__etcd_free(e);
            return 0;
        }
        usleep(100 * 1000);
    }
    fail_msg("etcd did not start (log: %s)", logf);
    return -1;
}

static int teardown_etcd(void **state)
{
    if (etcd_pid > 0) {
        kill(etcd_pid, SIGKILL);
        waitpid(etcd_pid, NULL, 0);
    }
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        return -1;
    mc_loop_free(loop);
    return 0;
}

/* ---- tests ---- */

/* Bytes keys and values (a 0 byte, a 0xff byte) go in and come back; a
 * prefix range sees exactly its keys, in order; revisions grow; a prefix
 * delete removes them. */
static void test_put_range_delete(void **state)
{
    mc__etcd_t *e = client(ep, 5000);
    got_t g = {0};
    assert_int_equal(wait_res(&g, mc__etcd_put(e, K("p/a"), K("one\0two"), 0, on_res, &g)), 0);
    int64_t r1 = g.revision;
    assert_cmp(r1, >, 0);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_put(e, K("p/b\xff"), K("\xff"), 0, on_res, &g)), 0);
    assert_cmp(g.revision, >, r1);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_put(e, K("q"), K("other"), 0, on_res, &g)), 0);

    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_range(e, K("p/"), 1, on_res, &g)), 0);
    assert_int_equal(g.nkvs, 2);
    assert_int_equal(g.klen[0], 3);
    assert_memory_equal(g.key[0], "p/a", 3);
    assert_int_equal(g.vlen[0], 7);
    assert_memory_equal(g.val[0], "one\0two", 7);
    assert_memory_equal(g.key[1], "p/b\xff", 4);
    assert_memory_equal(g.val[1], "\xff", 1);
    assert_int_equal(g.mod_rev[0], r1);

    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_range(e, K("p/a"), 0, on_res, &g)), 0);
    assert_int_equal(g.nkvs, 1);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_range(e, K("nothing"), 0, on_res, &g)), 0);
    assert_int_equal(g.nkvs, 0);

    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_delete(e, K("p/"), 1, on_res, &g)), 0);
    assert_int_equal(g.deleted, 2);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_range(e, K("p/"), 1, on_res, &g)), 0);
    assert_int_equal(g.nkvs, 0);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_range(e, K("q"), 0, on_res, &g)), 0);
    assert_int_equal(g.nkvs, 1); /* outside the prefix */
    mc__etcd_free(e);
}

/* put_if: create-only wins once; the loser sees the winner's value; a
 * compare on the last revision holds once. */
static void test_put_if(void **state)
{
    mc__etcd_t *e = client(ep, 5000);
    got_t g = {0};
    assert_int_equal(wait_res(&g, mc__etcd_put_if(e, K("leader"), K("A"), 0, 0, on_res, &g)), 0);
    assert_true(g.succeeded);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_put_if(e, K("leader"), K("B"), 0, 0, on_res, &g)), 0);
    assert_false(g.succeeded);
    assert_int_equal(g.nkvs, 1);
    assert_memory_equal(g.val[0], "A", 1);
    int64_t rev = g.mod_rev[0];
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_put_if(e, K("leader"), K("C"), 0, rev, on_res, &g)), 0);
    assert_true(g.succeeded);
    memset(&g, 0, sizeof(g)); /* the same revision again: no longer the last */
    assert_int_equal(wait_res(&g, mc__etcd_put_if(e, K("leader"), K("D"), 0, rev, on_res, &g)), 0);
    assert_false(g.succeeded);
    assert_memory_equal(g.val[0], "C", 1);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_delete(e, K("leader"), 0, on_res, &g)), 0);
    mc__etcd_free(e);
}

/* put_fenced: the keys go in together while the fence is the one created at
 * the revision given; once it was deleted and made again, nothing goes in. */
static void test_put_fenced(void **state)
{
    mc__etcd_t *e = client(ep, 5000);
    got_t g = {0};
    assert_int_equal(wait_res(&g, mc__etcd_put_if(e, K("fence"), K("A"), 0, 0, on_res, &g)), 0);
    assert_true(g.succeeded);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_range(e, K("fence"), 0, on_res, &g)), 0);
    int64_t created = g.create_rev[0];
    mc__etcd_put_kv_t kvs[2] = {{K("log/1"), K("one")}, {K("log/2"), K("two")}};
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_put_fenced(e, K("fence"), created, kvs, 2, on_res, &g)),
                     0);
    assert_true(g.succeeded);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_range(e, K("log/"), 1, on_res, &g)), 0);
    assert_int_equal(g.nkvs, 2);
    assert_memory_equal(g.val[1], "two", 3);

    /* Another holder of the fence: the first one's writes fail whole. */
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_delete(e, K("fence"), 0, on_res, &g)), 0);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_put_if(e, K("fence"), K("B"), 0, 0, on_res, &g)), 0);
    mc__etcd_put_kv_t late[2] = {{K("log/2"), K("late")}, {K("log/3"), K("three")}};
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_put_fenced(e, K("fence"), created, late, 2, on_res, &g)),
                     0);
    assert_false(g.succeeded);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_range(e, K("log/"), 1, on_res, &g)), 0);
    assert_int_equal(g.nkvs, 2);
    assert_memory_equal(g.val[1], "two", 3);
    /* A range delete: [log/1, log/2) takes log/1 only. */
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_delete_range(e, K("log/1"), K("log/2"), on_res, &g)), 0);
    assert_int_equal(g.deleted, 1);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_range(e, K("log/"), 1, on_res, &g)), 0);
    assert_int_equal(g.nkvs, 1);
    assert_memory_equal(g.key[0], "log/2", 5);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_delete(e, K("log/"), 1, on_res, &g)), 0);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_delete(e, K("fence"), 0, on_res, &g)), 0);
    mc__etcd_free(e);
}

/* What mc__etcd_range_all() answered: the count, and whether the keys came
 * in order. */
typedef struct all {
    int done, rc;
    size_t n;
    int ordered;
    int64_t revision;
} all_t;

static void on_all(void *arg, int rc, const mc__etcd_res_t *res)
{
    all_t *a = arg;
    a->done = 1;
    a->rc = rc;
    if (res) {
        a->n = res->nkvs;
        a->revision = res->revision;
        a->ordered = 1;
        for (size_t i = 0; i < res->nkvs; i++) {
            char want[32];
            snprintf(want, sizeof(want), "pg/%04zu", i);
            a->ordered &= res->kvs[i].klen == 7 && memcmp(res->kvs[i].key, want, 7) == 0 &&
                          res->kvs[i].vlen == 1 && res->kvs[i].val[0] == 'v';
        }
    }
    mc_loop_stop(loop);
}

/* A prefix read in pages: every key once, in order, at one revision; a page
 * with a limit says there is more. */
static void test_range_pages(void **state)
{
    mc__etcd_t *e = client(ep, 5000);
    got_t g = {0};
    assert_int_equal(wait_res(&g, mc__etcd_put_if(e, K("pgfence"), K("x"), 0, 0, on_res, &g)), 0);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_range(e, K("pgfence"), 0, on_res, &g)), 0);
    int64_t created = g.create_rev[0];
    enum { N = 600, BATCH = 100 };
    static char keys[N][8];
    for (int b = 0; b < N; b += BATCH) {
        mc__etcd_put_kv_t kvs[BATCH];
        for (int i = 0; i < BATCH; i++) {
            snprintf(keys[b + i], sizeof(keys[b + i]), "pg/%04d", b + i);
            kvs[i] = (mc__etcd_put_kv_t){keys[b + i], 7, "v", 1};
        }
        memset(&g, 0, sizeof(g));
        assert_int_equal(
            wait_res(&g, mc__etcd_put_fenced(e, K("pgfence"), created, kvs, BATCH, on_res, &g)), 0);
        assert_true(g.succeeded);
    }
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_range_page(e, K("pg/"), K("pg0"), 10, 0, on_res, &g)),
                     0);
    assert_int_equal(g.nkvs, 10);
    assert_true(g.more);
    all_t a = {0};
    assert_int_equal(mc__etcd_range_all(e, K("pg/"), on_all, &a), 0);
    while (!a.done)
        assert_int_equal(mc_loop_run(loop), 0);
    assert_int_equal(a.rc, 0);
    assert_int_equal(a.n, N);
    assert_true(a.ordered);
    assert_cmp(a.revision, >, created);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_delete(e, K("pg"), 1, on_res, &g)), 0);
    mc__etcd_free(e);
}

/* A key on a lease goes with it: at revoke, and when it is not kept alive. */
static void test_leases(void **state)
{
    mc__etcd_t *e = client(ep, 5000);
    got_t g = {0};
    assert_int_equal(wait_res(&g, mc__etcd_lease_grant(e, 30, on_res, &g)), 0);
    int64_t lease = g.lease;
    assert_cmp(lease, !=, 0);
    assert_int_equal(g.ttl, 30);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_put(e, K("l/k"), K("v"), lease, on_res, &g)), 0);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_range(e, K("l/k"), 0, on_res, &g)), 0);
    assert_int_equal(g.kv_lease[0], lease);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_lease_keepalive(e, lease, on_res, &g)), 0);
    assert_int_equal(g.ttl, 30);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_lease_revoke(e, lease, on_res, &g)), 0);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_range(e, K("l/k"), 0, on_res, &g)), 0);
    assert_int_equal(g.nkvs, 0);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_lease_keepalive(e, lease, on_res, &g)), -ENOENT);

    /* Not kept alive: gone after its TTL. */
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_lease_grant(e, 1, on_res, &g)), 0);
    lease = g.lease;
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_put(e, K("l/short"), K("v"), lease, on_res, &g)), 0);
    size_t n = 1;
    for (int i = 0; i < 60 && n; i++) {
        usleep(100 * 1000);
        memset(&g, 0, sizeof(g));
        assert_int_equal(wait_res(&g, mc__etcd_range(e, K("l/short"), 0, on_res, &g)), 0);
        n = g.nkvs;
    }
    assert_int_equal(n, 0);
    assert_int_equal(mc__etcd_lease_grant(e, 0, on_res, &g), -EINVAL);
    mc__etcd_free(e);
}

typedef struct seen {
    int n, ended, rc;
    int deleted[8];
    char key[8][16];
    int64_t revision;
} seen_t;

static void on_watch(void *arg, int rc, const mc__etcd_event_t *ev, size_t n, int64_t revision)
{
    seen_t *s = arg;
    if (rc < 0) {
        s->ended = 1;
        s->rc = rc;
        mc_loop_stop(loop);
        return;
    }
    for (size_t i = 0; i < n && s->n < 8; i++, s->n++) {
        s->deleted[s->n] = ev[i].deleted;
        snprintf(s->key[s->n], 16, "%.*s", (int)ev[i].kv.klen, ev[i].kv.key);
    }
    s->revision = revision;
    mc_loop_stop(loop);
}

/* A prefix watch sees puts and deletes under it, in order, and nothing
 * else; one from an old revision replays what came since. */
static void test_watch(void **state)
{
    mc__etcd_t *e = client(ep, 5000);
    seen_t s = {0};
    mc__etcd_watch_t *w = NULL;
    got_t g = {0};
    assert_int_equal(wait_res(&g, mc__etcd_put(e, K("w0"), K("before"), 0, on_res, &g)), 0);
    int64_t from = g.revision;
    assert_int_equal(mc__etcd_watch(e, K("w/"), 1, 0, on_watch, &s, &w), 0);
    /* Give the watch time to be created before the changes. */
    for (int i = 0; i < 5; i++) {
        memset(&g, 0, sizeof(g));
        assert_int_equal(wait_res(&g, mc__etcd_range(e, K("x"), 0, on_res, &g)), 0);
        usleep(50 * 1000);
    }
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_put(e, K("w/a"), K("1"), 0, on_res, &g)), 0);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_put(e, K("other"), K("1"), 0, on_res, &g)), 0);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_delete(e, K("w/a"), 0, on_res, &g)), 0);
    uint64_t t0 = mc_loop_now_ms();
    while (s.n < 2 && !s.ended && mc_loop_now_ms() - t0 < 5000)
        assert_int_equal(mc_loop_run(loop), 0);
    assert_false(s.ended);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.key[0], "w/a");
    assert_int_equal(s.deleted[0], 0);
    assert_string_equal(s.key[1], "w/a");
    assert_int_equal(s.deleted[1], 1);
    mc__etcd_watch_cancel(w);

    /* From an old revision: the put of w0 (not under w/) is not seen, the
     * put and delete of w/a are. */
    seen_t s2 = {0};
    assert_int_equal(mc__etcd_watch(e, K("w"), 1, from, on_watch, &s2, &w), 0);
    t0 = mc_loop_now_ms();
    while (s2.n < 3 && !s2.ended && mc_loop_now_ms() - t0 < 5000)
        assert_int_equal(mc_loop_run(loop), 0);
    assert_int_equal(s2.n, 3);
    assert_string_equal(s2.key[0], "w0");
    assert_string_equal(s2.key[1], "w/a");
    assert_int_equal(s2.deleted[2], 1);
    mc__etcd_watch_cancel(w);
    mc__etcd_free(e);
}

/* A dead endpoint first: the request goes to the next one. All dead: a
 * clear error, in bounded time. A stopped etcd: -ETIMEDOUT. */
static void test_endpoints_and_timeouts(void **state)
{
    char eps[160];
    snprintf(eps, sizeof(eps), "http://127.0.0.1:%d;%s", free_port(), ep);
    mc__etcd_t *e = client(eps, 3000);
    got_t g = {0};
    assert_int_equal(wait_res(&g, mc__etcd_put(e, K("fo"), K("v"), 0, on_res, &g)), 0);
    mc__etcd_free(e);

    snprintf(eps, sizeof(eps), "etcd://127.0.0.1:%d;%s", free_port(), ep); /* Mooncake's form */
    e = client(eps, 3000);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_range(e, K("fo"), 0, on_res, &g)), 0);
    assert_int_equal(g.nkvs, 1);
    mc__etcd_free(e);

    snprintf(eps, sizeof(eps), "127.0.0.1:%d,127.0.0.1:%d", free_port(), free_port());
    e = client(eps, 3000);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_range(e, K("fo"), 0, on_res, &g)), -ECONNREFUSED);
    mc__etcd_free(e);

    e = client(ep, 500);
    /* Stopped means every thread of it: waitpid reports the stop once the
     * group stop is complete (a thread still running could answer). */
    kill(etcd_pid, SIGSTOP);
    int st = 0;
    assert_int_equal(waitpid(etcd_pid, &st, WUNTRACED), etcd_pid);
    assert_true(WIFSTOPPED(st));
    uint64_t t0 = mc_loop_now_ms();
    memset(&g, 0, sizeof(g));
    int rc = wait_res(&g, mc__etcd_range(e, K("fo"), 0, on_res, &g));
    uint64_t took = mc_loop_now_ms() - t0;
    kill(etcd_pid, SIGCONT);
    assert_int_equal(rc, -ETIMEDOUT);
    assert_cmp(took, <, 3000);
    /* Freed with a request in flight: it ends with -ECANCELED. */
    memset(&g, 0, sizeof(g));
    assert_int_equal(mc__etcd_range(e, K("fo"), 0, on_res, &g), 0);
    mc__etcd_free(e);
    assert_int_equal(g.rc, -ECANCELED);

    mc__etcd_t *bad = NULL;
    assert_int_equal(mc__etcd_new(loop, "", 1000, &bad), -EINVAL);
    assert_int_equal(mc__etcd_new(loop, ",;", 1000, &bad), -EINVAL);
    assert_int_equal(mc__etcd_new(loop, "h:1", 0, &bad), -EINVAL);
}

/* A member that takes connections and answers nothing (stopped, hung, cut
 * off past its socket): a request sent there times out (a range goes on
 * to the next endpoint), and the requests after it go to the next
 * endpoint first (a member refusing connections is passed over at once;
 * one that hangs must not take every request's timeout for ever). */
static void test_a_hung_endpoint_is_passed_over(void **state)
{
    (void)state;
    int hung = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    assert_int_equal(bind(hung, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(hung, 16), 0); /* the kernel accepts; nobody reads */
    assert_int_equal(getsockname(hung, (struct sockaddr *)&a, &len), 0);
    char eps[160];
    snprintf(eps, sizeof(eps), "127.0.0.1:%d;%s", ntohs(a.sin_port), ep);
    mc__etcd_t *e = client(eps, 500);
    got_t g = {0};
    assert_int_equal(wait_res(&g, mc__etcd_put(e, K("hung"), K("v"), 0, on_res, &g)), -ETIMEDOUT);
    for (int i = 0; i < 3; i++) {
        memset(&g, 0, sizeof(g));
        assert_int_equal(wait_res(&g, mc__etcd_range(e, K("fo"), 0, on_res, &g)), 0);
    }
    /* The put that timed out was not sent again elsewhere: it may have
     * been applied there, and a request is answered once. */
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_range(e, K("hung"), 0, on_res, &g)), 0);
    assert_int_equal(g.nkvs, 0);
    mc__etcd_free(e);
    /* A range (it only reads) that timed out there is sent to the next
     * endpoint: answered, in about one timeout more. */
    e = client(ep, 500);
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_put(e, K("fo2"), K("v"), 0, on_res, &g)), 0);
    mc__etcd_free(e);
    e = client(eps, 500);
    memset(&g, 0, sizeof(g));
    uint64_t t0 = mc_loop_now_ms();
    assert_int_equal(wait_res(&g, mc__etcd_range(e, K("fo2"), 0, on_res, &g)), 0);
    assert_int_equal(g.nkvs, 1);
    assert_cmp(mc_loop_now_ms() - t0, <, 3000);
    mc__etcd_free(e);
    close(hung);
}

/* Connections of this process to etcd's client port (the test's). */
static int etcd_connections(void)
{
    int port = atoi(strchr(ep, ':') + 1), n = 0;
    for (int fd = 0; fd < 1024; fd++) {
        struct sockaddr_in a;
        socklen_t len = sizeof(a);
        if (getpeername(fd, (struct sockaddr *)&a, &len) == 0 && a.sin_family == AF_INET &&
            ntohs(a.sin_port) == port)
            n++;
    }
    return n;
}

/* A forked child keeps no connection to etcd (forkfd.h): its parent's
 * client stays usable, and the child cannot use the client anyway. */
static void test_forked_child_keeps_no_connection(void **state)
{
    (void)state;
    mc__etcd_t *e = client(ep, 5000);
    got_t g = {0};
    assert_int_equal(wait_res(&g, mc__etcd_put(e, K("fork/a"), K("1"), 0, on_res, &g)), 0);
    assert_cmp(etcd_connections(), >, 0); /* kept alive for the next request */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(etcd_connections() > 100 ? 100 : etcd_connections());
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
        fail_msg("the forked child kept %d connection(s) to etcd", WEXITSTATUS(status));
    memset(&g, 0, sizeof(g));
    assert_int_equal(wait_res(&g, mc__etcd_range(e, K("fork/a"), 0, on_res, &g)), 0);
    assert_int_equal(g.nkvs, 1);
    mc__etcd_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_range_delete),
        cmocka_unit_test(test_put_if),
        cmocka_unit_test(test_put_fenced),
        cmocka_unit_test(test_range_pages),
        cmocka_unit_test(test_leases),
        cmocka_unit_test(test_watch),
        cmocka_unit_test(test_endpoints_and_timeouts),
        cmocka_unit_test(test_a_hung_endpoint_is_passed_over),
        cmocka_unit_test(test_forked_child_keeps_no_connection),
    };
    return cmocka_run_group_tests(tests, setup_etcd, teardown_etcd);
}
