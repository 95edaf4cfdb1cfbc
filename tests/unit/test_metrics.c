/*
 * test_metrics.c - the metrics server (mooncake/metrics.h) over real sockets
 * on loopback: a scrape on a kept-alive connection, and what a forked child
 * of the serving process keeps of the server (nothing: its port and its
 * scrapers' connections are the parent's alone).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mooncake/loop.h"
#include "mooncake/metrics.h"
#include "unit.h"

static mc_loop_t *loop;
static pthread_t loop_thread;

static void *run_loop(void *arg)
{
    (void)arg;
    mc_loop_run(loop);
    return NULL;
}

static int collect(void *arg, mc_metrics_t *m)
{
    (void)arg;
    mc_metrics_family(m, "test_up", "gauge", "1 while the test serves");
    mc_metrics_sample(m, "test_up", NULL, 1);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    if (mc_loop_new(&loop) < 0)
        return -1;
    return pthread_create(&loop_thread, NULL, run_loop, NULL) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    mc_loop_stop(loop);
    pthread_join(loop_thread, NULL);
    mc_loop_free(loop);
    return 0;
}

/* A TCP connection to 127.0.0.1:port, receives bounded by 5 s. */
static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {.tv_sec = 5};
    assert_true(fd >= 0);
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* Sends req on fd; fails unless the answer carries want. */
static void ask(int fd, const char *req, const char *want)
{
    char buf[4096];
    size_t n = 0;
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    while (n < sizeof(buf) - 1) {
        ssize_t r = read_retry(fd, buf + n, sizeof(buf) - 1 - n);
        if (r <= 0)
            fail_msg("read: %zd (%s) after \"%.*s\"", r, strerror(errno), (int)n, buf);
        n += (size_t)r;
        buf[n] = 0;
        if (strstr(buf, want))
            return;
    }
    fail_msg("no '%s' in the answer", want);
}

/* One GET /metrics on fd (HTTP/1.1: the connection stays open). */
static void scrape(int fd, const char *want)
{
    ask(fd, "GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n", want);
}

/* The sockets this process holds but skip (-1: none). */
static int count_sockets(int skip)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));) {
        char path[300], link[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, link, sizeof(link) - 1);
        if (len < 0 || atoi(e->d_name) == skip)
            continue;
        link[len] = 0;
        n += strncmp(link, "socket:", 7) == 0;
    }
    closedir(d);
    return n;
}

/* A bind and listen on 127.0.0.1:port, as the next server would: 0 or -errno. */
static int can_listen(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1, rc = 0;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 1) < 0)
        rc = -errno;
    close(fd);
    return rc;
}

static void *serve_thread(void *arg)
{
    mc_loop_run(arg);
    return NULL;
}

static void put_int(int fd, int v)
{
    if (write(fd, &v, sizeof(v)) != sizeof(v))
        _exit(3);
}

static int get_int(int fd)
{
    int v = -1;
    return read(fd, &v, sizeof(v)) == sizeof(v) ? v : -1;
}

/* The server's process (a child of the test): serves on a port of its own,
 * says which (to_test), forks a child at the test's word (from_test), says
 * how many sockets that child holds, and waits to be killed. The child
 * lives until hold closes. */
static void serving_process(int to_test, int from_test, int hold)
{
    mc_loop_t *l;
    mc_metrics_server_t *srv;
    pthread_t t;
    alarm(20); /* a hang fails the test */
    if (mc_loop_new(&l) < 0 || pthread_create(&t, NULL, serve_thread, l) != 0 ||
        mc_metrics_serve(&srv, "127.0.0.1:0", l, collect, NULL) < 0)
        _exit(2);
    put_int(to_test, mc_metrics_server_port(srv));
    if (get_int(from_test) != 1)
        _exit(2);
    int counted[2];
    if (pipe(counted) < 0)
        _exit(2);
    pid_t pid = fork();
    if (pid == 0) {
        put_int(counted[1], count_sockets(-1));
        char ch;
        (void)!read(hold, &ch, 1);
        _exit(0);
    }
    put_int(to_test, get_int(counted[0]));
    pause(); /* killed here */
    _exit(0);
}

/* A process that serves metrics forks a child (a worker, say), then dies
 * without stopping its server (killed): the child must keep neither the
 * listening socket (the next server could not take the port while it
 * lives) nor a scraper's connection (the scraper would wait for an answer
 * that never comes instead of seeing the server gone). */
static void test_forked_child_keeps_no_socket(void **state)
{
    (void)state;
    int up[2], down[2], hold[2];
    assert_int_equal(pipe(up), 0);
    assert_int_equal(pipe(down), 0);
    assert_int_equal(pipe(hold), 0);
    pid_t server = fork();
    assert_true(server >= 0);
    if (server == 0) {
        close(hold[1]);
        serving_process(up[1], down[0], hold[0]);
    }
    close(up[1]);
    close(down[0]);
    close(hold[0]);
    int port = get_int(up[0]);
    assert_true(port > 0);
    int c = dial(port);
    scrape(c, "test_up 1");
    put_int(down[1], 1);
    int n = get_int(up[0]); /* the server's child is born */
    kill(server, SIGKILL);
    assert_int_equal(waitpid(server, NULL, 0), server);
    char ch;
    ssize_t eof = read_retry(c, &ch, 1);
    int listened = can_listen(port);
    close(hold[1]); /* the server's child goes */
    close(c);
    close(up[0]);
    close(down[1]);
    if (n != 0 || eof != 0 || listened != 0)
        fail_msg("the child kept %d socket(s) of the server; the scraper read %zd (0: the "
                 "server is gone); listening on its port again: %s",
                 n, eof, listened ? strerror(-listened) : "done");
}

/* After the fork, the parent's server goes on answering. */
static void test_parent_serves_after_fork(void **state)
{
    (void)state;
    mc_metrics_server_t *srv = NULL;
    assert_int_equal(mc_metrics_serve(&srv, "127.0.0.1:0", loop, collect, NULL), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(0);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    int c = dial(mc_metrics_server_port(srv));
    scrape(c, "test_up 1");
    scrape(c, "test_up 1"); /* the same connection, again */
    close(c);
    mc_metrics_stop(srv);
}

/* What a scraper's requests get, several on one connection. */
static void test_requests(void **state)
{
    (void)state;
    mc_metrics_server_t *srv = NULL;
    assert_int_equal(mc_metrics_serve(&srv, "127.0.0.1:0", loop, collect, NULL), 0);
    int port = mc_metrics_server_port(srv);
    int c = dial(port);
    ask(c, "GET /health HTTP/1.1\r\nHost: t\r\n\r\n", "200 OK");
    ask(c, "GET /health HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nbody", "\r\n\r\nok\n");
    scrape(c, "# TYPE test_up gauge\ntest_up 1\n");
    close(c);
    c = dial(port);
    ask(c, "POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nbody", "405");
    close(c);
    c = dial(port);
    ask(c, "GET /other HTTP/1.1\r\nHost: t\r\n\r\n", "404");
    close(c);
    mc_metrics_stop(srv);
    mc_metrics_server_t *busy = NULL;
    assert_int_equal(mc_metrics_serve(&srv, "127.0.0.1:0", loop, collect, NULL), 0);
    char addr[32];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", mc_metrics_server_port(srv));
    assert_int_equal(mc_metrics_serve(&busy, addr, loop, collect, NULL), -EADDRINUSE);
    assert_int_equal(mc_metrics_serve(&busy, "nowhere:x", loop, collect, NULL), -EINVAL);
    mc_metrics_stop(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_requests),
        cmocka_unit_test(test_forked_child_keeps_no_socket),
        cmocka_unit_test(test_parent_serves_after_fork),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
