/*
 * open.c - opening and closing a store (the public mc_store_open() and
 * mc_store_close()): its loop thread, an embedded store's in-process
 * master, segment and server, a client's connection to a master elsewhere
 * (and, with a segment, its node role), RDMA when asked for, and the
 * orderly close that lets operations in flight finish.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/auth.h"
#include "runtime/log.h"
#include "runtime/loop_i.h"
#include "master/master.h"
#include "master/service.h"
#include "mooncake/mooncake.h"
#include "server/server.h"
#include "transport/shm.h"
#include "client/prefetch.h"
#include "client/store_i.h"
#include "server/rdma_setup.h"

/* ---- open / close ---- */

/* An embedded store's master does its periodic work here, unless a server
 * (serving the protocol) does it already. */
static void on_sweep(mc_timer_t *t)
{
    mc_store_t *s = t->data;
    if (!s->srv)
        mc__svc_tick(s->svc, mc_loop_now_ms());
}

static void store_free(mc_store_t *s);

static void *loop_thread(void *arg)
{
    mc_store_t *s = arg;
    mc_loop_run(s->loop);
    if (__atomic_load_n(&s->closing, __ATOMIC_ACQUIRE) == MC__CLOSE_SELF) {
        /* Closed from one of its callbacks: nobody joins this thread. */
        pthread_detach(pthread_self());
        store_free(s);
    }
    return NULL;
}

static int local_seg_lookup(void *arg, uint32_t seg, mc__seg_t *out, uint64_t *epoch)
{
    mc_store_t *s = arg;
    if (seg != SEG_LOCAL || !s->seg_mem.base)
        return -ENOENT;
    *out = s->seg_mem;
    *epoch = mc__svc_seg_epoch(s->svc, seg);
    return 0;
}

static uint64_t local_enforced(void *arg, uint32_t seg, uint64_t epoch)
{
    mc_store_t *s = arg;
    return mc__server_enforced(s->srv, seg, epoch);
}

/* The embedded master (an in-process service) with the local segment. */
static int embedded_master(mc_store_t *s, const mc_store_opts_t *o)
{
    mc__master_opts_t mo = {
        .lease_ms = o->lease_ms ? o->lease_ms : MC_DEFAULT_LEASE_MS,
        .evict_high_pct = o->evict_high_pct,
        .evict_ratio_pct = o->evict_ratio_pct,
        .align = 64,
        /* Above the ids of an earlier run, as mooncake-master's: nodes that
         * joined it report what they hold when it comes back. */
        .first_id = (uint64_t)(mc__wall_ns() / 1000),
        .ino_seed = mc__svc_random_id(), /* inode numbers no earlier run had */
    };
    int rc = mc__master_new(&s->m, &mo);
    if (rc < 0 || (rc = mc__master_add_segment(s->m, SEG_LOCAL, s->seg_mem.size)) < 0)
        return rc;
    mc__svc_opts_t so = {.first_id = mc__svc_random_id(), .wall_ns = mc__loop_wall_ns};
    if ((rc = mc__svc_new(&s->svc, s->m, &so)) < 0)
        return rc;
    return mc__svc_add_local_segment(s->svc, SEG_LOCAL, 0, NULL);
}

/* Serves the embedded master and segment to other processes. */
static int serve_embedded(mc_store_t *s, const char *listen)
{
    mc__addr_t a;
    int rc = mc__addr_parse(listen, 50051, &a);
    if (rc < 0)
        return rc;
    mc__server_opts_t o = {.svc = s->svc,
                           .seg_lookup = local_seg_lookup,
                           .seg_arg = s,
                           .secret = s->secret,
                           .shm = !s->no_shm};
    rc = mc__server_new(&s->srv, s->loop, &a, &o);
    if (rc < 0)
        return rc;
    mc__svc_set_local_addr(s->svc, mc__server_addr(s->srv));
    mc__svc_set_local_enforced(s->svc, local_enforced, s);
    if (s->rdma && s->seg_mem.base) {
        static const uint32_t local = SEG_LOCAL;
        char host[MC__ADDR_STRLEN];
        if ((rc = mc__rdma_host_of(mc__server_addr(s->srv), host, sizeof(host))) < 0 ||
            (rc = mc__store_rdma_serve(s, host)) < 0)
            return rc;
        mc__rdma_fence_segment(&s->fencer, s->rdma, s->srv, &local, s->seg_mem.fence);
        if ((rc = mc__svc_set_local_rdma(s->svc, s->rdma_rec, s->rdma_rec_len,
                                         s->fencer.ctx != NULL)) < 0)
            return rc;
    }
    return 0;
}

int mc__store_rdma_serve(mc_store_t *s, const char *host)
{
    if (s->seg_mr)
        return 0;
    int rc = mc__rdma_serve(s->rdma, s->seg_mem.base, s->seg_mem.size, host, &s->seg_mr,
                            &s->rdma_rec, &s->rdma_rec_len);
    if (rc < 0)
        mc__log(MC__LOG_ERROR, "cannot serve the segment over RDMA on %s: %s", host,
                mc_strerror(rc));
    return rc;
}

static void remote_opened(mc_store_t *s, int rc)
{
    pthread_mutex_lock(&s->open_mu);
    s->open_rc = rc;
    s->open_done = 1;
    pthread_cond_signal(&s->open_cv);
    pthread_mutex_unlock(&s->open_mu);
    if (!s->own_loop)
        mc_loop_stop(s->loop);
}

static void remote_open_posted(void *arg)
{
    mc_store_t *s = arg;
    int rc = mc__remote_open(s, s->open_master, s->open_listen, remote_opened);
    if (rc < 0)
        remote_opened(s, rc);
}

/* Connects to the master (and mounts the segment), waiting for the result. */
static int open_remote(mc_store_t *s)
{
    if (s->own_loop) {
        int rc = mc_loop_post(s->loop, remote_open_posted, s);
        if (rc < 0)
            return rc;
    } else if (mc_loop_is_current(s->loop)) {
        return -EDEADLK; /* cannot wait on the loop we are running */
    } else {
        remote_open_posted(s);
        if (!s->open_done)
            mc_loop_run(s->loop); /* until remote_opened() stops it */
    }
    pthread_mutex_lock(&s->open_mu);
    while (!s->open_done)
        pthread_cond_wait(&s->open_cv, &s->open_mu);
    pthread_mutex_unlock(&s->open_mu);
    return s->open_rc;
}

/* The store's segment, seg_size bytes: in a memfd, so that co-located
 * clients can map it (shm.h), or in o->segment_file. */
static int open_segment(mc_store_t *s, const mc_store_opts_t *o, uint64_t seg_size)
{
    mc__seg_t seg;
    int rc = o->segment_file ? mc__seg_map_file(o->segment_file, seg_size, o->segment_offset, &seg)
                             : mc__seg_create(seg_size, "mooncake-segment", &seg);
    if (rc < 0) {
        if (o->segment_file)
            mc__log(MC__LOG_ERROR, "segment file %s: %s", o->segment_file, mc_strerror(rc));
        return rc;
    }
    s->seg_mem = seg;
    return 0;
}

/* The store's own loop thread; it takes no signals: they belong to the
 * caller. */
static int start_loop_thread(mc_store_t *s)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = -pthread_create(&s->thread, NULL, loop_thread, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0)
        s->thread_started = 1;
    return rc;
}

int mc_store_open(mc_store_t **out, const mc_store_opts_t *o)
{
    mc_store_opts_t def;
    if (!o) {
        mc_store_opts_init(&def);
        o = &def;
    }
    int remote = o->master && o->master[0];
    if (o->evict_high_pct > 100 || o->evict_ratio_pct > 100)
        return -EINVAL;
    uint64_t seg_size = o->segment_size;
    if (!seg_size && !remote)
        seg_size = MC_DEFAULT_SEGMENT_SIZE;
    if (seg_size && seg_size < 4096)
        return -EINVAL;
    if (o->segment_file && !o->segment_size)
        return -EINVAL; /* a file's segment has the size asked for, no default */

    mc_store_t *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    pthread_mutex_init(&s->open_mu, NULL);
    pthread_cond_init(&s->open_cv, NULL);
    s->remote = remote;
    s->timeout_ms = o->timeout_ms ? o->timeout_ms : 5000;
    s->seg_mem.fd = -1;
    s->no_shm = o->no_shm != 0;
    s->no_rcache = o->no_replica_cache != 0;
    s->ra_max = o->readahead_max ? o->readahead_max : MC__RA_MAX_DEFAULT;
    s->ra_total = o->readahead_total ? o->readahead_total : MC__RA_TOTAL_DEFAULT;
    int rc = mc__xport_parse(o->protocol);
    if (rc < 0)
        goto fail;
    s->xport = rc;
    if ((rc = mc__fault_load(s)) < 0)
        goto fail;
    if (o->secret_file && (rc = mc__secret_load(o->secret_file, &s->secret)) < 0)
        goto fail;
    if (seg_size && (rc = open_segment(s, o, seg_size)) < 0)
        goto fail;
    if (!remote && (rc = embedded_master(s, o)) < 0)
        goto fail;
    if (o->loop) {
        s->loop = o->loop;
    } else {
        rc = mc_loop_new(&s->loop);
        if (rc < 0)
            goto fail;
        s->own_loop = 1;
    }
    /* Before the loop thread starts, so that a missing device is an error
     * of this call (the context then belongs to the loop thread). */
    if ((rc = mc__rdma_open(s->loop, s->xport, o->rdma_devices, s->timeout_ms, &s->rdma)) < 0) {
        mc__log(MC__LOG_ERROR, "protocol rdma: %s",
                rc == -ENODEV            ? "no usable RDMA device"
                : rc == -EPROTONOSUPPORT ? "built without RDMA (libibverbs)"
                                         : mc_strerror(rc));
        goto fail;
    }
    if (!remote) {
        /* One path: the embedded store is a client of its own master. */
        if ((rc = mc__remote_open_local(s, SEG_LOCAL)) < 0)
            goto fail;
        s->sweep.data = s;
        rc = mc_timer_start(s->loop, &s->sweep, 1000, 1000, on_sweep);
        if (rc < 0)
            goto fail;
        if (o->listen && (rc = serve_embedded(s, o->listen)) < 0)
            goto fail;
    }
    if (remote) {
        s->open_master = strdup(o->master);
        s->open_listen = o->listen ? strdup(o->listen) : NULL;
        if (!s->open_master || (o->listen && !s->open_listen)) {
            rc = -ENOMEM;
            goto fail;
        }
    }
    if (s->own_loop && (rc = start_loop_thread(s)) < 0)
        goto fail;
    if (remote && (rc = open_remote(s)) < 0)
        goto fail;
    *out = s;
    return 0;
fail:
    mc_store_close(s);
    return rc;
}

/* Lets the loop run for a moment so that closing connections finish, and
 * on while operations or transfers are still in flight (their connections'
 * ends fail them with -ECANCELED), at most the store's timeout. */
static void stop_cb(mc_timer_t *t)
{
    mc_store_t *s = t->data;
    if (__atomic_load_n(&s->live, __ATOMIC_ACQUIRE) && mc_loop_now_ms() < s->drain_until)
        return; /* looked at again in 10 ms */
    mc_timer_stop(t);
    mc_loop_stop(t->loop);
}

/* The cluster path is closed: give the connections a moment to finish
 * closing, then stop the loop. */
static void remote_closed(mc_store_t *s)
{
    s->drain.data = s;
    s->drain_until = mc_loop_now_ms() + s->timeout_ms;
    mc_timer_start(s->loop, &s->drain, 50, 10, stop_cb);
}

/* Closes the embedded master's server, once its segment's fence is taken
 * back from the RDMA listener (whose calls reach the server's data plane). */
static void server_close(mc_store_t *s)
{
    mc__rdma_unfence(&s->fencer);
    mc__server_close(s->srv);
    s->srv = NULL;
}

static void close_on_loop(mc_store_t *s)
{
    mc_timer_stop(&s->sweep);
    int net = s->remote || s->srv;
    server_close(s);
    if (net) {
        mc__remote_close(s, remote_closed);
    } else {
        mc__remote_close(s, NULL);
        mc_loop_stop(s->loop);
    }
}

static void stop_on_loop(void *arg)
{
    close_on_loop(arg);
}

/* Closed on a caller's loop's thread: once the master connection ended
 * (and a segment served to peers had a moment for receives into it to
 * end), the store is freed when the last operation or transfer still in
 * flight lets it go (mc__store_release()): those waiting on the master or a
 * peer are failed with -ECANCELED as their connections close. */
/* Frees s once, whoever (the drain's end, the last release) gets here
 * first with the close drained. */
static void free_drained(mc_store_t *s)
{
    int drained = MC__CLOSE_DRAINED;
    if (__atomic_compare_exchange_n(&s->closing, &drained, MC__CLOSE_FREED, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        store_free(s);
}

static void drained(mc_store_t *s)
{
    __atomic_store_n(&s->closing, MC__CLOSE_DRAINED, __ATOMIC_RELEASE);
    if (!__atomic_load_n(&s->live, __ATOMIC_ACQUIRE))
        free_drained(s);
}

static void drain_done(mc_timer_t *t)
{
    drained(t->data);
}

static void drain_segment(mc_store_t *s)
{
    s->drain.data = s;
    if (mc_timer_start(s->loop, &s->drain, 50, 0, drain_done) < 0)
        drained(s);
}

static void close_later(mc_store_t *s)
{
    mc_timer_stop(&s->sweep);
    int served = s->seg_mem.base && (s->remote || s->srv);
    server_close(s);
    mc__remote_close(s, served ? drain_segment : drained);
}

void mc__store_hold(mc_store_t *s)
{
    __atomic_add_fetch(&s->live, 1, __ATOMIC_RELAXED);
}

void mc__store_release(mc_store_t *s)
{
    if (!__atomic_sub_fetch(&s->live, 1, __ATOMIC_ACQ_REL))
        free_drained(s);
}

void mc_store_close(mc_store_t *s)
{
    if (!s)
        return;
    if (s->loop && mc__loop_forked(s->loop)) {
        /* A forked child's copy of its parent's store: its loop thread is
         * not here, nor its ring or sockets (runtime/forkfd.h). Nothing to
         * close; the parent's store goes on. */
        mc__log(MC__LOG_DEBUG, "a store inherited through fork() is left to its parent");
        return;
    }
    int was = MC__CLOSE_NONE, on_loop = s->loop && mc_loop_is_current(s->loop);
    int how = !on_loop                           ? MC__CLOSE_JOIN
              : s->own_loop && s->thread_started ? MC__CLOSE_SELF
                                                 : MC__CLOSE_LATER;
    if (!__atomic_compare_exchange_n(&s->closing, &was, how, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return; /* closed already (from a callback, or another thread): finishing */
    if (how == MC__CLOSE_SELF) {
        /* From one of its callbacks: its thread finishes the close once the
         * loop stops (loop_thread()), and ends. */
        close_on_loop(s);
        return;
    }
    if (how == MC__CLOSE_LATER) {
        /* On its caller's loop's thread (a callback): operations in flight
         * are called back later, so the close goes on after this returns. */
        close_later(s);
        return;
    }
    if (s->own_loop && s->thread_started) {
        if (mc_loop_post(s->loop, stop_on_loop, s) < 0)
            mc_loop_stop(s->loop);
        pthread_join(s->thread, NULL);
    } else if (s->loop) {
        close_on_loop(s);
        mc_loop_run(s->loop); /* until the drain timer (or at once) */
    }
    store_free(s);
}

/* Frees the store and what it still holds, once nothing runs its work any
 * more: its loop stopped, or (closed on a caller's loop's thread) nothing
 * in flight reads it. */
static void store_free(mc_store_t *s)
{
    /* The loop has stopped, or nothing in flight reads the store (closed
     * on its caller's loop's thread): no operation uses the registration
     * any more; the context's watches leave the loop. */
    mc__rdma_deregister(s->seg_mr);
    s->seg_mr = NULL;
    for (struct mc__ubuf *u = s->ubufs; u; u = u->next) {
        if (!u->users) { /* those still in use: mc__rdma_ctx_free() releases them */
            mc__rdma_deregister(u->mr);
            u->mr = NULL;
        }
    }
    mc__rdma_ctx_free(s->rdma);
    s->rdma = NULL;
    while (s->ubufs) {
        struct mc__ubuf *u = s->ubufs;
        s->ubufs = u->next;
        free(u);
    }
    if (s->own_loop)
        mc_loop_free(s->loop); /* runs anything posted meanwhile */
    /* The loop is stopped (or nothing in flight reads the store): release
     * what callers left open, as promised. Their handles and writes at the
     * master went with the client's link (an embedded master's are freed
     * with it). */
    mc__ra_free_all(s);
    while (s->objs) {
        mc_obj_t *ob = s->objs;
        s->objs = ob->next;
        mc__rset_free(ob->rs);
        free(ob);
    }
    while (s->writers) {
        mc_writer_t *w = s->writers;
        s->writers = w->next;
        mc__writer_forget_renewal(w); /* its answer may come later (closed on the loop) */
        mc__rset_free(w->rs);
        free(w->key);
        free(w);
    }
    mc__op_pool_free(s);
    mc__svc_free(s->svc);
    mc__master_free(s->m);
    free(s->rdma_rec);
    mc__seg_destroy(&s->seg_mem);
    mc__secret_free(s->secret);
    free(s->fault);
    free(s->open_master);
    free(s->open_listen);
    pthread_mutex_destroy(&s->open_mu);
    pthread_cond_destroy(&s->open_cv);
    free(s);
}
