/*
 * test_writer_idle.c - an idle streaming writer's lease renewal (writer.c)
 * against a store closed on its own loop's thread, which frees its writers
 * without waiting for the answer to a renewal in flight: that answer
 * must find the writer gone, not read freed memory (the sanitized build of
 * the unit tests tells).
 */
#include "writer_fixture.h"

#include "client/store_i.h"

/* On the client's loop thread: its writer's idle renewal is in flight. */
static int renewing(probe_t *p)
{
    return ((mc_writer_t *)p->arg)->renewal != NULL;
}

/*
 * A pure client of srv's cluster opens a writer and leaves it idle while
 * the master answers nothing; once the writer's renewal is in flight it is
 * closed on its loop's thread, and then the master answers again, while
 * that loop runs on. The renewal's answer must find its writer gone (it
 * read the freed writer).
 */
static void test_a_client_closed_on_its_loop_with_a_renewal_in_flight(void **state)
{
    (void)state;
    hold_t h = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    mc_store_t *srv = open_server("127.0.0.1:0", SEG);
    fix_t f = {.srv = srv};
    mc_loop_t *l;
    mc_store_opts_t o;
    probe_t p = {.ready = renewing, .run_on_ms = 1000};
    pthread_t th;

    assert_int_equal(mc_loop_new(&l), 0);
    mc_store_opts_init(&o);
    o.master = mc_store_served_addr(srv);
    o.segment_size = 0; /* a pure client: no heartbeats for the held master to miss */
    o.no_shm = 1;
    o.loop = l;
    assert_int_equal(mc_store_open(&p.s, &o), 0); /* runs l until it is open */
    assert_int_equal(pthread_create(&th, NULL, run_loop, l), 0);
    f.s = p.s;
    p.arg = open_writer(&f);

    /* The master stops answering; the writer's lease is renewed once half
     * of it is gone (5 s of the master's 10). */
    assert_int_equal(mc_loop_post(mc_store_loop(srv), hold_run, &h), 0);
    probe_wait(&p);
    /* Closed on its loop's thread with the renewal unanswered: the writer
     * is freed now, the renewal's answer comes after, while the loop runs
     * on. */
    assert_int_equal(mc_loop_post(l, close_on_loop, &p), 0);
    hold_set(&h, 1); /* the master answers */
    assert_int_equal(pthread_join(th, NULL), 0);
    mc_loop_free(l);
    mc_store_close(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_client_closed_on_its_loop_with_a_renewal_in_flight),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
