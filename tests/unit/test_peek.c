/*
 * test_peek.c - mc_obj_peek_async() on an embedded store: the bytes the
 * store lends reach the callback (short at the end, none past it, no
 * pieces then), from the version the handle pinned, on the loop thread. The
 * lending of blocks read ahead from another node is driven through a
 * cluster mount by tests/integration/test_stream.py.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "mooncake/mooncake.h"
#include "unit.h"

#define K(k) (k), strlen(k)

typedef struct peek {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    mc_loop_t *loop;
    int calls, result, on_loop, iovcnt;
    char got[64];
} peek_t;

static void peek_cb(void *arg, int result, const struct iovec *iov, int iovcnt)
{
    peek_t *p = arg;
    size_t n = 0;
    pthread_mutex_lock(&p->mu);
    p->calls++;
    p->result = result;
    p->on_loop = mc_loop_is_current(p->loop);
    p->iovcnt = iovcnt;
    for (int i = 0; i < iovcnt; i++) { /* valid only until we return */
        if (n + iov[i].iov_len <= sizeof(p->got))
            memcpy(p->got + n, iov[i].iov_base, iov[i].iov_len);
        n += iov[i].iov_len;
    }
    if (n != (size_t)(result > 0 ? result : 0))
        p->result = -EBADMSG; /* the pieces do not add up to the result */
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* Peeks [off, off + len) of o and waits (at most 10 s) for the callback;
 * returns its result, the bytes in p->got. */
static int peek(mc_store_t *s, mc_obj_t *o, uint64_t off, size_t len, peek_t *p)
{
    struct timespec until;
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->loop = mc_store_loop(s);
    int rc = mc_obj_peek_async(o, off, len, peek_cb, p);
    if (rc < 0)
        return rc;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&p->mu);
    while (p->calls == 0)
        if (pthread_cond_timedwait(&p->cv, &p->mu, &until) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&p->mu);
    assert_int_equal(p->calls, 1);
    assert_int_equal(p->on_loop, 1);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    return p->result;
}

static void test_peek_ranges_of_the_pinned_version(void **state)
{
    mc_store_opts_t so;
    mc_store_t *s = NULL;
    mc_obj_t *o = NULL;
    peek_t p;

    mc_store_opts_init(&so);
    so.segment_size = 16 << 20;
    assert_int_equal(mc_store_open(&s, &so), 0);
    assert_int_equal(mc_put(s, K("k"), "0123456789", 10, NULL), 0);
    assert_int_equal(mc_obj_open(s, K("k"), &o), 0);
    assert_int_equal(mc_put(s, K("k"), "a newer version", 15, NULL), 0);

    assert_int_equal(peek(s, o, 2, 5, &p), 5);
    assert_int_equal(p.iovcnt, 1); /* its own segment: one buffer */
    assert_memory_equal(p.got, "23456", 5);
    assert_int_equal(peek(s, o, 7, 10, &p), 3); /* short at the end */
    assert_memory_equal(p.got, "789", 3);
    assert_int_equal(peek(s, o, 10, 4, &p), 0); /* past it: nothing, no bytes */
    assert_int_equal(p.iovcnt, 0);
    assert_int_equal(peek(s, o, 0, 0, &p), 0);
    assert_int_equal(mc_obj_peek_async(o, 0, (size_t)INT32_MAX + 1, peek_cb, &p), -EINVAL);

    mc_obj_close(o);
    mc_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peek_ranges_of_the_pinned_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
