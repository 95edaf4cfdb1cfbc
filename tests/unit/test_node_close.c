/*
 * test_node_close.c - a node closed while its calls to the master are in
 * flight (node.c): the close waits a bounded time for its UNMOUNT_SEGMENT
 * and then ends the master's connection, whose other calls (a heartbeat,
 * a fetch of records) fail afterwards. Their answers must find the node's
 * state alive, not read freed memory (the sanitized build of the unit
 * tests tells).
 */
#include "writer_fixture.h"

#include "client/remote_i.h"

/* On the node's loop thread: a call of the node role is in flight (the
 * master is held, so it stays there). */
static int calling(probe_t *p)
{
    return p->s->rm && p->s->rm->calls;
}

/*
 * A node of srv's cluster; the master stops answering, and once the node's
 * heartbeat is in flight the node is closed. Its UNMOUNT_SEGMENT goes
 * unanswered for its second, the close ends the master's connection, and
 * the heartbeat's failure comes after that, on the loop that is closing
 * (it read the freed node state).
 */
static void test_a_node_closed_with_its_heartbeat_in_flight(void **state)
{
    (void)state;
    hold_t h = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    fix_t f = {.srv = open_server("127.0.0.1:0", SEG)};
    probe_t p = {.ready = calling};

    p.s = open_member(&f, SEG);
    assert_int_equal(mc_loop_post(mc_store_loop(f.srv), hold_run, &h), 0);
    probe_wait(&p); /* a heartbeat comes within its period, 1 s */
    mc_store_close(p.s);
    hold_set(&h, 1);
    mc_store_close(f.srv);
}

/*
 * The same with the node on its caller's loop, closed on that loop's
 * thread: the store is gone before its calls' answers, the UNMOUNT_SEGMENT's
 * among them, come.
 */
static void test_a_node_closed_on_its_loop_with_its_heartbeat_in_flight(void **state)
{
    (void)state;
    hold_t h = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    mc_store_t *srv = open_server("127.0.0.1:0", SEG);
    mc_store_opts_t o;
    mc_loop_t *l;
    /* The loop runs on well past the close's wait for its UNMOUNT_SEGMENT
     * (1 s): the master link ends then, the heartbeat's failure comes, and
     * the store and the node's state are freed (or the sanitized build
     * reports them leaked). */
    probe_t p = {.ready = calling, .run_on_ms = 3000};
    pthread_t th;

    assert_int_equal(mc_loop_new(&l), 0);
    mc_store_opts_init(&o);
    o.master = mc_store_served_addr(srv);
    o.segment_size = SEG;
    o.listen = "127.0.0.1:0";
    o.no_shm = 1;
    o.loop = l;
    assert_int_equal(mc_store_open(&p.s, &o), 0); /* runs l until it is open */
    assert_int_equal(pthread_create(&th, NULL, run_loop, l), 0);
    assert_int_equal(mc_loop_post(mc_store_loop(srv), hold_run, &h), 0);
    probe_wait(&p);
    assert_int_equal(mc_loop_post(l, close_on_loop, &p), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    mc_loop_free(l);
    hold_set(&h, 1);
    mc_store_close(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_node_closed_with_its_heartbeat_in_flight),
        cmocka_unit_test(test_a_node_closed_on_its_loop_with_its_heartbeat_in_flight),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
