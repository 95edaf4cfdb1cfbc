/*
 * unit.h - helpers the C unit tests share. Include it after <cmocka.h>.
 *
 * assert_cmp() compares two integers and prints both when the comparison
 * fails; rnd() is a seeded xorshift64* generator of the test's own (seed
 * rng_state, never 0), independent of any generator in the code under test;
 * read_retry() reads a socket with a receive timeout through EINTR;
 * capture_start() and capture_end() collect what is written to stderr.
 */
#ifndef MC_TEST_UNIT_H
#define MC_TEST_UNIT_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
