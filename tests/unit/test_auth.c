/*
 * test_auth.c - unit tests for authentication (core/src/runtime/auth.c) and the
 * session handshake between a real server (server.c) and a reconnecting
 * rpc client (rpc_client.c) on one loop over loopback TCP.
 *
 * The MACs are checked against known answers computed independently with
 * Python's hmac module (HMAC-SHA256, RFC 2104), so the wire format stays
 * what docs/PROTOCOL.md promises. The handshake cases prove that a call made
 * before the connection is even up waits for the handshake (the server
 * would refuse it otherwise), and that every mismatch of secrets ends in
 * -EACCES on the client's side; a client refused again and again says why
 * once per run of failures.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/auth.h"
#include "runtime/log.h"
#include "runtime/rpc.h"
#include "server/server.h"
#include "unit.h"

static const char *const horse = "correct horse battery staple";

static void nonces(unsigned char a[32], unsigned char b[32])
{
    for (int i = 0; i < 32; i++) {
        a[i] = (unsigned char)i;
        b[i] = (unsigned char)(32 + i);
    }
}

static void unhex(const char *hex, unsigned char *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (unsigned char)v;
    }
}

/* ---- the math ---- */

static void test_mac_known_answers(void **state)
{
    unsigned char a[32], b[32], got[32], want[32], key[200];
    mc__secret_t *s, *lng;

    nonces(a, b);
    assert_int_equal(mc__secret_new(horse, strlen(horse), &s), 0);
    mc__auth_mac(s, MC__AUTH_LABEL_SERVER, a, b, got);
    unhex("e755ceafa0747583ac93d2f3b6d199fe1ea3110a92c4b062184dd66d41107dbb", want, 32);
    assert_memory_equal(got, want, 32);
    mc__auth_mac(s, MC__AUTH_LABEL_CLIENT, b, a, got);
    unhex("5873f677d8ef9559b6bf6ca96c5c1234b97f11ea6925b15b3c0f5c88a7e26d1a", want, 32);
    assert_memory_equal(got, want, 32);

    /* A key longer than SHA-256's block is hashed first, as RFC 2104 says. */
    for (int i = 0; i < 200; i++)
        key[i] = (unsigned char)(i * 7);
    assert_int_equal(mc__secret_new(key, sizeof(key), &lng), 0);
    mc__auth_mac(lng, MC__AUTH_LABEL_SERVER, a, b, got);
    unhex("13e0a68409f8e28c488d29ac9e658f63c32663afde4ef890907712dc9ce5ae94", want, 32);
    assert_memory_equal(got, want, 32);
    mc__secret_free(lng);
    mc__secret_free(s);
}

static void test_check_refuses_every_difference(void **state)
{
    unsigned char a[32], b[32], mac[32], bad[32];
    mc__secret_t *s, *other;

    nonces(a, b);
    assert_int_equal(mc__secret_new("k", 1, &s), 0);
    assert_int_equal(mc__secret_new("K", 1, &other), 0);
    mc__auth_mac(s, MC__AUTH_LABEL_CLIENT, a, b, mac);
    assert_int_equal(mc__auth_check(s, MC__AUTH_LABEL_CLIENT, a, b, mac, 32), 0);
    /* Another label (a reflected proof), swapped nonces, another secret. */
    assert_int_equal(mc__auth_check(s, MC__AUTH_LABEL_SERVER, a, b, mac, 32), -EACCES);
    assert_int_equal(mc__auth_check(s, MC__AUTH_LABEL_CLIENT, b, a, mac, 32), -EACCES);
    assert_int_equal(mc__auth_check(other, MC__AUTH_LABEL_CLIENT, a, b, mac, 32), -EACCES);
    /* A flipped bit anywhere, a short or a long MAC. */
    for (int i = 0; i < 32; i++) {
        memcpy(bad, mac, 32);
        bad[i] ^= 0x10;
        assert_int_equal(mc__auth_check(s, MC__AUTH_LABEL_CLIENT, a, b, bad, 32), -EACCES);
    }
    assert_int_equal(mc__auth_check(s, MC__AUTH_LABEL_CLIENT, a, b, mac, 31), -EACCES);
    assert_int_equal(mc__auth_check(s, MC__AUTH_LABEL_CLIENT, a, b, mac, 0), -EACCES);
    mc__secret_free(other);
    mc__secret_free(s);
}

static void test_nonces_differ(void **state)
{
    unsigned char a[32], b[32];
    mc__auth_nonce(a);
    mc__auth_nonce(b);
    assert_memory_not_equal(a, b, 32);
}

/* ---- secret files ---- */

static char dir[64];

static const char *write_file(const char *name, const void *p, size_t n, mode_t mode)
{
    static char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, p, n), (ssize_t)n);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
    return path;
}

/* Loads path and checks that its secret is want[0..n): MACs agree with a
 * secret made of those bytes. */
static void assert_loads_as(const char *path, const char *want, size_t n)
{
    unsigned char a[32], b[32], m1[32], m2[32];
    mc__secret_t *s, *ref;
    nonces(a, b);
    assert_int_equal(mc__secret_load(path, &s), 0);
    assert_int_equal(mc__secret_new(want, n, &ref), 0);
    mc__auth_mac(s, MC__AUTH_LABEL_SERVER, a, b, m1);
    mc__auth_mac(ref, MC__AUTH_LABEL_SERVER, a, b, m2);
    assert_memory_equal(m1, m2, 32);
    mc__secret_free(ref);
    mc__secret_free(s);
}

static void test_secret_file_rules(void **state)
{
    char big[MC__AUTH_SECRET_MAX + 1];
    mc__secret_t *s = NULL;

    snprintf(dir, sizeof(dir), "/tmp/test_auth.XXXXXX");
    assert_non_null(mkdtemp(dir));
    mc__log_init("test_auth", MC__LOG_ERROR); /* the refusals are expected */

    assert_loads_as(write_file("a", "abc\n", 4, 0600), "abc", 3);
    assert_loads_as(write_file("b", "abc\r\n", 5, 0400), "abc", 3);
    assert_loads_as(write_file("c", "abc", 3, 0600), "abc", 3);
    assert_loads_as(write_file("d", "a b\n\n", 5, 0600), "a b\n", 4); /* one newline only */

    assert_int_equal(mc__secret_load(write_file("e", "\n", 1, 0600), &s), -EINVAL);
    assert_int_equal(mc__secret_load(write_file("f", "", 0, 0600), &s), -EINVAL);
    assert_int_equal(mc__secret_load(write_file("g", "abc", 3, 0644), &s), -EPERM);
    assert_int_equal(mc__secret_load(write_file("h", "abc", 3, 0640), &s), -EPERM);
    assert_int_equal(mc__secret_load(write_file("i", "abc", 3, 0602), &s), -EPERM);
    memset(big, 'x', sizeof(big));
    assert_int_equal(mc__secret_load(write_file("j", big, sizeof(big), 0600), &s), -EFBIG);
    assert_loads_as(write_file("k", big, sizeof(big) - 1, 0600), big, sizeof(big) - 1);
    assert_int_equal(mc__secret_load("/nonexistent/secret", &s), -ENOENT);
    assert_int_equal(mc__secret_load(dir, &s), -EINVAL); /* not a regular file */
    assert_null(s);
    assert_int_equal(mc__secret_new("", 0, &s), -EINVAL);

    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    mc__log_init("test_auth", MC__LOG_WARN);
}

/* ---- the handshake, server and client on one loop ---- */

struct hs {
    mc_loop_t *l;
    const mc__secret_t *cl_secret;
    mc__server_t *srv;
    mc__rpc_client_t *cl;
    mc_timer_t guard;
    int done, status, handshakes, connects;
    int stop_at;  /* run_until(): the loop stops as handshake stop_at starts, or a connect */
    int time_out; /* the next handshake times out (its HELLO unanswered, as it were) */
};

static void hs_done(void *arg, mc__conn_t *c, int rc)
{
    mc__rpc_client_ready(arg, c, rc);
}

static void hs_start(mc__rpc_client_t *cl, mc__conn_t *c)
{
    struct hs *t = mc__rpc_client_data(cl);
    /* As peers.c: failing for the last one's reason is logged at debug level. */
    mc__session_opts_t o = {.secret = t->cl_secret,
                            .role = MC__ROLE_CLIENT,
                            .timeout_ms = 2000,
                            .seen = mc__rpc_client_handshake_failed(cl)};
    if (++t->handshakes == t->stop_at)
        mc_loop_stop(t->l);
    if (t->time_out) { /* what the session reports when its HELLO times out */
        t->time_out = 0;
        mc__rpc_client_ready(cl, c, -ETIMEDOUT);
        return;
    }
    int rc = mc__session_start(c, &o, hs_done, cl);
    if (rc < 0)
        mc__rpc_client_ready(cl, c, rc);
}

static void ping_done(void *arg, int status, const char *body, size_t len)
{
    struct hs *t = arg;
    t->status = status;
    t->done = 1;
    mc_loop_stop(t->l);
}

static void stop_loop(mc_timer_t *tm)
{
    mc_loop_stop(tm->loop);
}

/* Serves PING with srv_secret, calls it once through a client with
 * cl_secret (before the connection is up), and returns the status. */
static int handshake_case(const mc__secret_t *srv_secret, const mc__secret_t *cl_secret,
                          uint64_t *refused)
{
    static const mc__rpc_client_ops_t ops = {.handshake = hs_start};
    struct hs t = {.cl_secret = cl_secret};
    mc__addr_t a;
    mc__server_stats_t st;

    assert_int_equal(mc_loop_new(&t.l), 0);
    assert_int_equal(mc__addr_parse("127.0.0.1:0", -1, &a), 0);
    mc__server_opts_t so = {.secret = srv_secret};
    assert_int_equal(mc__server_new(&t.srv, t.l, &a, &so), 0);
    assert_int_equal(mc__addr_parse(mc__server_addr(t.srv), -1, &a), 0);
    assert_int_equal(mc__rpc_client_new(t.l, &a, 2000, &ops, &t, &t.cl), 0);
    /* Queued on the connect attempt: it must wait for the handshake. */
    assert_int_equal(mc__rpc_client_call(t.cl, MC__OP_PING, "", 0, 3000, ping_done, &t), 0);
    assert_int_equal(mc_timer_start(t.l, &t.guard, 5000, 0, stop_loop), 0);
    assert_int_equal(mc_loop_run(t.l), 0);
    assert_true(t.done);
    assert_int_equal(t.handshakes, 1);
    mc_timer_stop(&t.guard);
    mc__rpc_client_close(t.cl);
    /* Let the server see the client go (a refused client hangs up). */
    mc_timer_start(t.l, &t.guard, 50, 0, stop_loop);
    mc_loop_run(t.l);
    mc__server_stats(t.srv, &st);
    *refused = st.refused;
    mc__server_close(t.srv);
    mc_timer_start(t.l, &t.guard, 20, 0, stop_loop);
    mc_loop_run(t.l);
    mc_loop_free(t.l);
    return t.status;
}

static void hs_connected(mc__rpc_client_t *cl, mc__conn_t *c)
{
    struct hs *t = mc__rpc_client_data(cl);
    t->connects++;
    mc_loop_stop(t->l);
}

/* Runs t's loop until handshake want starts (counting all of them), or the
 * client connects (5 s at most). Returns 0, or -1 when the loop could not
 * run. */
static int run_until(struct hs *t, int want)
{
    t->stop_at = want;
    t->connects = 0;
    int rc = mc_timer_start(t->l, &t->guard, 5000, 0, stop_loop) < 0 || mc_loop_run(t->l) < 0;
    mc_timer_stop(&t->guard);
    return rc ? -1 : 0;
}

/* How many times needle is in hay. */
static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* A client whose secret the server does not share keeps trying, with
 * backoff: why its handshake fails is a warning at the first refusal and
 * debug after (one line, not one every retry), also when the run of
 * failures began with another reason (a HELLO that timed out, which the
 * session does not log); a handshake that succeeds ends the run, and the
 * next run warns again. */
static void test_a_refusal_warns_once_per_run_of_failures(void **state)
{
    static const mc__rpc_client_ops_t ops = {.handshake = hs_start, .on_connect = hs_connected};
    static const char why[] = "failed to prove it knows the secret";
    mc__secret_t *k, *other;
    struct hs t = {0};
    mc__addr_t a;
    int rc = 0, refused_first = 0, connects = 0, after_connect = 1;

    assert_int_equal(mc__secret_new("k3y", 3, &k), 0);
    assert_int_equal(mc__secret_new("k3y!", 4, &other), 0);
    assert_int_equal(mc__addr_parse("127.0.0.1:0", -1, &a), 0);
    /* Warnings go to a file while the loop runs: nothing asserts until
     * stderr is back (cmocka's messages would go to the file too). */
    struct capture cap;
    capture_start(&cap);
    mc__log_init("test_auth", MC__LOG_WARN); /* debug lines are not printed */

    mc__server_opts_t so = {.secret = k};
    if (mc_loop_new(&t.l) < 0 || mc__server_new(&t.srv, t.l, &a, &so) < 0 ||
        mc__addr_parse(mc__server_addr(t.srv), -1, &a) < 0)
        rc = -1;
    t.cl_secret = other;
    t.time_out = 1;
    if (!rc && mc__rpc_client_new(t.l, &a, 2000, &ops, &t, &t.cl) < 0)
        rc = -1;
    if (!rc)
        rc = run_until(&t, 5); /* a timeout, then 4 refusals (backoff 100 to 800 ms) */
    refused_first = t.handshakes;
    t.cl_secret = k; /* the next one succeeds and ends the run */
    if (!rc)
        rc = run_until(&t, 1000);
    connects = t.connects;
    after_connect = t.cl ? mc__rpc_client_handshake_failed(t.cl) : 1;
    t.cl_secret = other;
    if (!rc) {
        mc__rpc_client_reconnect(t.cl); /* a new run: refused at once, again and again */
        rc = run_until(&t, t.handshakes + 2);
    }
    if (t.cl)
        mc__rpc_client_close(t.cl);
    mc__server_close(t.srv);
    if (t.l) {
        mc_timer_start(t.l, &t.guard, 20, 0, stop_loop);
        mc_loop_run(t.l);
        mc_loop_free(t.l);
    }
    char *log = capture_end(&cap);
    mc__log_init("test_auth", MC__LOG_WARN);
    mc__secret_free(other);
    mc__secret_free(k);

    if (rc < 0)
        fail_msg("setting up or running the loop failed; its log:\n%s", log);
    assert_int_equal(refused_first, 5);
    assert_int_equal(connects, 1);
    assert_int_equal(after_connect, 0);
    if (count(log, why) != 2)
        fail_msg("'%s' %d times in %d handshakes (want 2: one a run):\n%s", why, count(log, why),
                 t.handshakes, log);
    free(log);
}

static void test_handshake_cases(void **state)
{
    mc__secret_t *k, *other;
    uint64_t refused;

    mc__log_init("test_auth", MC__LOG_ERROR); /* refusals are warnings: quiet */
    assert_int_equal(mc__secret_new("k3y", 3, &k), 0);
    assert_int_equal(mc__secret_new("k3y!", 4, &other), 0);

    /* No secret anywhere: HELLO only. The same secret: HELLO and AUTH. */
    assert_int_equal(handshake_case(NULL, NULL, &refused), 0);
    assert_int_equal(refused, 0);
    assert_int_equal(handshake_case(k, k, &refused), 0);
    assert_int_equal(refused, 0);

    /* Another secret: the server's proof is wrong, the client hangs up
     * without sending its own; the server counts the refusal. */
    assert_int_equal(handshake_case(k, other, &refused), -EACCES);
    assert_int_equal(refused, 1);
    /* No secret at the client, one at the server. */
    assert_int_equal(handshake_case(k, NULL, &refused), -EACCES);
    assert_int_equal(refused, 1);
    /* A secret at the client, none at the server: refused by the client. */
    assert_int_equal(handshake_case(NULL, k, &refused), -EACCES);

    mc__secret_free(other);
    mc__secret_free(k);
    mc__log_init("test_auth", MC__LOG_WARN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mac_known_answers),
        cmocka_unit_test(test_check_refuses_every_difference),
        cmocka_unit_test(test_nonces_differ),
        cmocka_unit_test(test_secret_file_rules),
        cmocka_unit_test(test_handshake_cases),
        cmocka_unit_test(test_a_refusal_warns_once_per_run_of_failures),
    };
    alarm(60);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
