/*
 * unit.h - helpers the C unit tests share. Include it after <cmocka.h>.
 *
 * assert_cmp() compares two integers and prints both when the comparison
 * fails; rnd() is a seeded xorshift64* generator of the test's own (seed
 * rng_state, never 0), independent of any generator in the code under test;
 * read_retry() reads a socket with a receive timeout through EINTR;
 * capture_start() and capture_end() collect what is written to stderr;
 * free_port() picks a loopback port for a server a test starts.
 */
#ifndef MC_TEST_UNIT_H
#define MC_TEST_UNIT_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Checks a comparison of two integers, printing both when it fails. */
#define assert_cmp(a, op, b)                                                                       \
    do {                                                                                           \
        intmax_t a_ = (intmax_t)(a), b_ = (intmax_t)(b);                                           \
        if (!(a_ op b_))                                                                           \
            fail_msg("%s %s %s: %jd vs %jd", #a, #op, #b, a_, b_);                                 \
    } while (0)

/* The state of rnd(); a test seeds it. */
static uint64_t rng_state __attribute__((unused));

/* The next pseudo-random number (xorshift64*). */
static inline uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dULL;
}

/* read() on a socket with a receive timeout, going on after EINTR: the
 * kernel's teardown of a ring this thread made (a loop an earlier test
 * freed) interrupts the thread once, and with a timeout set the read is
 * not restarted. */
static inline ssize_t read_retry(int fd, void *buf, size_t n)
{
    ssize_t r;
    while ((r = read(fd, buf, n)) < 0 && errno == EINTR)
        ;
    return r;
}

/* A loopback port that was free a moment ago, below the ephemeral range
 * (32768 up), as tests/harness.py's free_port() picks them: the port the
 * kernel gives a connect() or a bind to port 0, in this test or in another
 * running beside it (run-unit.sh runs several), never is one of these. */
static inline int free_port(void)
{
    static uint64_t x;
    if (!x)
        x = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL) ^ 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < 1000; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        int port = 10000 + (int)((x * 0x2545f4914f6cdd1dULL) >> 33) % 22000;
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
            break;
        int ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
        close(fd);
        if (ok)
            return port;
    }
    fprintf(stderr, "free_port: no free port in 10000-31999\n");
    abort();
}

/* ---- stderr capture ---- */

struct capture {
    int saved;
    FILE *tmp;
};

static inline void capture_start(struct capture *cap)
{
    fflush(stderr);
    cap->saved = dup(2);
    cap->tmp = tmpfile();
    assert_non_null(cap->tmp);
    dup2(fileno(cap->tmp), 2);
}

/* Restores stderr; returns what was written (free it), echoed to stderr. */
static inline char *capture_end(struct capture *cap)
{
    fflush(stderr);
    dup2(cap->saved, 2);
    close(cap->saved);
    long n = ftell(cap->tmp);
    char *s = calloc(1, (size_t)(n > 0 ? n : 0) + 1);
    rewind(cap->tmp);
    size_t got = fread(s, 1, (size_t)(n > 0 ? n : 0), cap->tmp);
    s[got] = '\0';
    fclose(cap->tmp);
    fputs(s, stderr);
    return s;
}

#endif /* MC_TEST_UNIT_H */
