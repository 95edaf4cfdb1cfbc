/*
 * test_store_close.c - mc_store_close() called on the store's loop thread
 * (a callback) while operations are in flight: on a caller's loop, as
 * mooncake.h says to close one, and on a store's own loop. The close
 * returns at once; each operation still waiting is called back once, with
 * -ECANCELED if it had no answer yet, and the store is freed after the
 * last (the sanitized build tells a read of it freed, and a store never
 * freed).
 */
#include "writer_fixture.h"

#include "client/store_i.h"

#include <dirent.h>

typedef struct ctx {
    mc_store_t *s;
    mc_loop_t *l;
    mc_stat_t st;
    char buf[4096];
    mc_timer_t stop, look;
    int rc, called;
} ctx_t;

/* Stops the loop the callback ran on: the test's threads end. */
static void op_done(void *arg, int rc)
{
    ctx_t *c = arg;

    c->rc = rc;
    c->called++;
    mc_loop_stop(c->l);
}

/* The loop runs on once the store is closed, at most 10 s (a callback that
 * never comes must fail the test, not hang it). */
static void run_on(ctx_t *c)
{
    assert_int_equal(mc_timer_start(c->l, &c->stop, 10000, 0, stop_loop), 0);
}

/* An embedded store on the caller's loop l. */
static mc_store_t *open_embedded_on(mc_loop_t *l)
{
    mc_store_opts_t o;
    mc_store_t *s = NULL;

    mc_store_opts_init(&o);
    o.segment_size = SEG;
    o.loop = l;
    assert_int_equal(mc_store_open(&s, &o), 0);
    return s;
}

/* Runs l on a thread of its own until it stops. */
static void run_until_stopped(mc_loop_t *l)
{
    pthread_t th;

    assert_int_equal(pthread_create(&th, NULL, run_loop, l), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
}

/* ---- closed from an operation's own callback ---- */

static void close_in_cb(void *arg, int rc)
{
    ctx_t *c = arg;

    c->rc = rc;
    c->called++;
    mc_store_close(c->s); /* the op is still being finished */
    mc_loop_stop(c->l);
}

static void stat_close_in_cb(void *arg)
{
    ctx_t *c = arg;

    assert_int_equal(mc_stat_async(c->s, "nokey", 5, &c->st, close_in_cb, c), 0);
}

/* An embedded store on a loop of the test's, where start runs first; until
 * the loop stops. */
static void run_embedded(ctx_t *c, mc_loop_fn start)
{
    assert_int_equal(mc_loop_new(&c->l), 0);
    c->s = open_embedded_on(c->l);
    assert_int_equal(mc_loop_post(c->l, start, c), 0);
    run_until_stopped(c->l);
}

static void test_closed_from_an_operations_callback(void **state)
{
    (void)state;
    ctx_t c = {0};

    run_embedded(&c, stat_close_in_cb);
    assert_int_equal(c.called, 1);
    assert_int_equal(c.rc, -ENOENT);
    mc_loop_free(c.l);
}

/* ---- closed with an operation in flight ---- */

static void stat_and_close(void *arg)
{
    ctx_t *c = arg;

    assert_int_equal(mc_stat_async(c->s, "nokey", 5, &c->st, op_done, c), 0);
    mc_store_close(c->s);
    run_on(c);
}

/* Embedded: the master answered at once, the answer comes a round later. */
static void test_an_embedded_store_closed_with_an_operation_in_flight(void **state)
{
    (void)state;
    ctx_t c = {0};

    run_embedded(&c, stat_and_close);
    assert_int_equal(c.called, 1);
    assert_true(c.rc == -ENOENT || c.rc == -ECANCELED);
    mc_loop_free(c.l);
}

/* A pure client on the caller's loop l of srv's cluster. */
static mc_store_t *open_client_on(mc_loop_t *l, mc_store_t *srv)
{
    mc_store_opts_t o;
    mc_store_t *s = NULL;

    mc_store_opts_init(&o);
    o.master = mc_store_served_addr(srv);
    o.segment_size = 0;
    o.no_shm = 1; /* bytes over TCP */
    o.loop = l;
    assert_int_equal(mc_store_open(&s, &o), 0); /* runs l until it is open */
    return s;
}

/* A pure client of srv's cluster on a loop of the test's, where start runs
 * first while held's loop answers nothing; until the loop stops. The
 * operation start began is failed with -ECANCELED by the close. */
static void run_client_cancelled(mc_store_t *srv, mc_store_t *held, mc_loop_fn start)
{
    hold_t h = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    ctx_t c = {0};

    assert_int_equal(mc_loop_new(&c.l), 0);
    c.s = open_client_on(c.l, srv);
    assert_int_equal(mc_loop_post(mc_store_loop(held), hold_run, &h), 0);
    assert_int_equal(mc_loop_post(c.l, start, &c), 0);
    run_until_stopped(c.l);
    assert_int_equal(c.called, 1);
    assert_int_equal(c.rc, -ECANCELED);
    mc_loop_free(c.l);
    hold_set(&h, 1);
}

/* A client whose master does not answer: the STAT fails with -ECANCELED
 * once the close ended the master's connection. */
static void test_a_client_closed_with_a_master_call_in_flight(void **state)
{
    (void)state;
    mc_store_t *srv = open_server("127.0.0.1:0", SEG);

    run_client_cancelled(srv, srv, stat_and_close);
    mc_store_close(srv);
}

/* The GET has its replica list; the node holding the bytes does not
 * answer its READ. Closed then (the op and its transfer are the store's
 * two live things), the connection ends and the transfer fails. */
static void close_once_reading(mc_timer_t *t)
{
    ctx_t *c = t->data;

    if (__atomic_load_n(&c->s->live, __ATOMIC_ACQUIRE) < 2)
        return; /* looked at again at the timer's next tick */
    mc_timer_stop(t);
    mc_store_close(c->s);
    run_on(c);
}

static void get_then_close(void *arg)
{
    ctx_t *c = arg;

    assert_int_equal(mc_get_async(c->s, "k", 1, 0, c->buf, sizeof(c->buf), &c->st, op_done, c), 0);
    c->look.data = c;
    assert_int_equal(mc_timer_start(c->l, &c->look, 10, 10, close_once_reading), 0);
}

static void test_a_client_closed_with_a_transfer_in_flight(void **state)
{
    (void)state;
    fix_t f = {.srv = open_server("127.0.0.1:0", 2 * MiB)};
    mc_store_t *node = open_member(&f, SEG);
    mc_put_opts_t po = {0};
    char v[4096];

    memset(v, 'v', sizeof(v));
    po.preferred_segment = mc_store_served_addr(node);
    assert_int_equal(mc_put(f.srv, "k", 1, v, sizeof(v), &po), 0);
    run_client_cancelled(f.srv, node, get_then_close);
    mc_store_close(node);
    mc_store_close(f.srv);
}

/* ---- a store with a loop of its own, closed from its callback ---- */

/* The threads of this process, but the kernel's io_uring workers (which
 * come and go as it likes). */
static int threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;

    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));) {
        char path[300], comm[32] = "";
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f) {
            if (!fgets(comm, sizeof(comm), f))
                comm[0] = 0;
            fclose(f);
        }
        n += strncmp(comm, "iou-", 4) != 0;
    }
    closedir(d);
    return n;
}

typedef struct own {
    ctx_t c;
    batch_t b;
} own_t;

static void own_close_in_cb(void *arg, int rc)
{
    own_t *w = arg;
    slot_t sl = {&w->b, 0};

    w->c.rc = rc;
    w->c.called++;
    mc_store_close(w->c.s); /* on the store's own thread, which finishes it */
    slot_done(&sl, 0);
}

/* Closed from its callback, a store with a loop of its own is closed by
 * its thread, which then ends (before, the close joined its own thread
 * and freed the loop it ran in). */
static void test_a_store_closed_from_its_own_loops_callback(void **state)
{
    (void)state;
    int before = threads();
    own_t w = {0};
    mc_store_opts_t o;
    struct timespec tick = {0, 10 * 1000 * 1000};

    mc_store_opts_init(&o);
    o.segment_size = SEG;
    assert_int_equal(mc_store_open(&w.c.s, &o), 0);
    assert_int_equal(threads(), before + 1);
    batch_init(&w.b, 1);
    assert_int_equal(mc_stat_async(w.c.s, "nokey", 5, &w.c.st, own_close_in_cb, &w), 0);
    batch_wait(&w.b);
    assert_int_equal(w.c.called, 1);
    assert_int_equal(w.c.rc, -ENOENT);
    /* The store's thread ends once it closed the store (at most 10 s). */
    for (int i = 0; i < 1000 && threads() > before; i++)
        nanosleep(&tick, NULL);
    assert_int_equal(threads(), before);
}

/* ---- closed from another thread ---- */

static void cancelled_cb(void *arg, int rc)
{
    slot_t *sl = arg;

    slot_done(sl, rc);
}

/*
 * A client with a loop of its own, closed from this thread while its GET
 * (a READ to a node that does not answer) and its STAT (to a master that
 * does not answer) are in flight: mc_store_close() returns once both were
 * called back, with -ECANCELED.
 */
static void test_a_client_closed_from_another_thread_calls_back_first(void **state)
{
    (void)state;
    hold_t hm = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    hold_t hn = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    fix_t f = {.srv = open_server("127.0.0.1:0", 2 * MiB)};
    mc_store_t *node = open_member(&f, SEG), *s;
    mc_put_opts_t po = {0};
    char v[4096], buf[4096];
    mc_stat_t st1, st2;
    batch_t b;
    slot_t sl[2];

    memset(v, 'v', sizeof(v));
    po.preferred_segment = mc_store_served_addr(node);
    assert_int_equal(mc_put(f.srv, "k", 1, v, sizeof(v), &po), 0);
    s = open_member(&f, 0);
    assert_int_equal(mc_stat(s, "k", 1, &st1), 0); /* connected to both */
    batch_init(&b, 2);
    sl[0] = (slot_t){&b, 0};
    sl[1] = (slot_t){&b, 1};
    assert_int_equal(mc_loop_post(mc_store_loop(node), hold_run, &hn), 0);
    assert_int_equal(mc_get_async(s, "k", 1, 0, buf, sizeof(buf), &st2, cancelled_cb, &sl[0]), 0);
    /* The GET's READ is on its way once the store has two live things. */
    for (int i = 0; i < 1000 && __atomic_load_n(&s->live, __ATOMIC_ACQUIRE) < 2; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    assert_true(__atomic_load_n(&s->live, __ATOMIC_ACQUIRE) >= 2);
    assert_int_equal(mc_loop_post(mc_store_loop(f.srv), hold_run, &hm), 0);
    assert_int_equal(mc_stat_async(s, "k", 1, &st1, cancelled_cb, &sl[1]), 0);
    mc_store_close(s);
    pthread_mutex_lock(&b.mu);
    int left = b.left;
    pthread_mutex_unlock(&b.mu);
    assert_int_equal(left, 0); /* both called back before the close returned */
    assert_int_equal(b.rc[0], -ECANCELED);
    assert_int_equal(b.rc[1], -ECANCELED);
    hold_set(&hn, 1);
    hold_set(&hm, 1);
    mc_store_close(node);
    mc_store_close(f.srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_closed_from_an_operations_callback),
        cmocka_unit_test(test_an_embedded_store_closed_with_an_operation_in_flight),
        cmocka_unit_test(test_a_client_closed_with_a_master_call_in_flight),
        cmocka_unit_test(test_a_client_closed_with_a_transfer_in_flight),
        cmocka_unit_test(test_a_store_closed_from_its_own_loops_callback),
        cmocka_unit_test(test_a_client_closed_from_another_thread_calls_back_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
