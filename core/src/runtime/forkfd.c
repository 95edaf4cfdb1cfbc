/*
 * forkfd.c - the sockets a forked child closes (see forkfd.h): a bitmap
 * by descriptor, under a mutex that the forking thread holds across
 * fork(), so that the child sees it whole.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/forkfd.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static uint64_t *bits; /* words of it: nwords */
static size_t nwords;
static atomic_uint forks;

static void before_fork(void)
{
    pthread_mutex_lock(&mu);
}

static void in_parent(void)
{
    pthread_mutex_unlock(&mu);
}

/* The child: only the forking thread runs, and it holds mu. */
static void in_child(void)
{
    for (size_t w = 0; w < nwords; w++)
        for (uint64_t b = bits[w]; b; b &= b - 1)
            close((int)(w * 64 + (size_t)__builtin_ctzll(b)));
    if (bits)
        memset(bits, 0, nwords * sizeof(*bits));
    atomic_fetch_add(&forks, 1);
    pthread_mutex_unlock(&mu);
}

static void setup(void)
{
    pthread_atfork(before_fork, in_parent, in_child);
}

static void mark(int fd, int on)
{
    if (fd < 0)
        return;
    pthread_once(&once, setup);
    size_t w = (size_t)fd / 64;
    pthread_mutex_lock(&mu);
    if (w >= nwords && on) {
        size_t n = nwords ? nwords : 16;
        while (n <= w)
            n *= 2;
        uint64_t *nb = realloc(bits, n * sizeof(*nb));
        if (nb) {
            memset(nb + nwords, 0, (n - nwords) * sizeof(*nb));
            bits = nb;
            nwords = n;
        }
    }
    if (w < nwords) {
        if (on)
            bits[w] |= 1ull << (fd % 64);
        else
            bits[w] &= ~(1ull << (fd % 64));
    }
    pthread_mutex_unlock(&mu);
}

void mc__fd_own(int fd)
{
    mark(fd, 1);
}

void mc__fd_disown(int fd)
{
    mark(fd, 0);
}

unsigned mc__fork_count(void)
{
    return atomic_load(&forks);
}
