/*
 * metrics.c - Prometheus text (exposition format 0.0.4) and the HTTP server
 * that serves it (mooncake/metrics.h).
 *
 * libmicrohttpd answers on its own thread. A request becomes a scrape that
 * is posted to the program's loop, where the collect callback fills it;
 * the HTTP thread waits for it at most MC_METRICS_WAIT_MS and answers 503
 * when the loop is late. A scrape is shared by both threads (counted
 * references, freed by whichever lets go last), and so is the hub that
 * holds the callback: once mc_metrics_stop() has marked it stopped, a
 * scrape still queued on the loop completes without calling collect.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/addr.h"
#include "runtime/dl.h"
#include "runtime/forkfd.h"
#include "runtime/listen.h"
#include "runtime/log.h"
#include "runtime/metrics.h"

/* ---- the text ---- */

void mc__metrics_printf(mc_metrics_t *m, const char *fmt, ...)
{
    if (!m || m->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = m->cap - m->len;
        int n = vsnprintf(m->p ? m->p + m->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            m->oom = 1;
            return;
        }
        if ((size_t)n < room) {
            m->len += (size_t)n;
            return;
        }
        size_t cap = m->cap ? m->cap * 2 : 16384;
        while (cap - m->len <= (size_t)n)
            cap *= 2;
        char *p = realloc(m->p, cap);
        if (!p) {
            m->oom = 1;
            return;
        }
        m->p = p;
        m->cap = cap;
    }
}

void mc_metrics_family(mc_metrics_t *m, const char *name, const char *type, const char *help)
{
    mc__metrics_printf(m, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void mc_metrics_sample(mc_metrics_t *m, const char *name, const char *labels, uint64_t value)
{
    if (labels && *labels)
        mc__metrics_printf(m, "%s{%s} %llu\n", name, labels, (unsigned long long)value);
    else
        mc__metrics_printf(m, "%s %llu\n", name, (unsigned long long)value);
}

void mc__metrics_histogram(mc_metrics_t *m, const char *name, const char *labels,
                           const double *bounds, const uint64_t *counts, size_t n, double sum)
{
    const char *sep = labels && *labels ? "," : "";
    const char *l = labels ? labels : "";
    uint64_t cum = 0;
    for (size_t i = 0; i <= n; i++) {
        cum += counts[i];
        if (i < n)
            mc__metrics_printf(m, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, l, sep, bounds[i],
                               (unsigned long long)cum);
        else
            mc__metrics_printf(m, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, l, sep,
                               (unsigned long long)cum);
    }
    mc__metrics_printf(m, "%s_sum%s%s%s %.9f\n", name, *l ? "{" : "", l, *l ? "}" : "", sum);
    mc__metrics_printf(m, "%s_count%s%s%s %llu\n", name, *l ? "{" : "", l, *l ? "}" : "",
                       (unsigned long long)cum);
}

/* ---- the server ---- */

/* What the HTTP thread and the loop share; guarded by mu. */
typedef struct hub {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a scrape is done */
    int refs;          /* the server and every scrape not yet freed */
    int stopped;       /* collect must not run any more */
    mc_loop_t *loop;
    mc_metrics_cb collect;
    void *arg;
} hub_t;

/* One request, shared with the loop until both let go (guarded by hub->mu). */
typedef struct scrape {
    hub_t *hub;
    int refs, done, rc, health;
    mc_metrics_t m;
} scrape_t;

struct mc_metrics_server {
    struct MHD_Daemon *d;
    hub_t *hub;
    int port;
    int fd; /* the listening socket: ours, lent to libmicrohttpd */
};

/* Drops a reference to h (h->mu held; released here). */
static void hub_unref_unlock(hub_t *h)
{
    int last = --h->refs == 0;
    pthread_mutex_unlock(&h->mu);
    if (last) {
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->cv);
        free(h);
    }
}

/* Drops a reference to sc (its hub's mu held; released here); the last
 * one frees it and drops its reference to the hub. */
static void scrape_unref_unlock(scrape_t *sc)
{
    hub_t *h = sc->hub;
    if (--sc->refs > 0) {
        pthread_mutex_unlock(&h->mu);
        return;
    }
    free(sc->m.p);
    free(sc);
    hub_unref_unlock(h);
}

/* On the loop's thread: fills the scrape, unless the server stopped. */
static void run_scrape(void *arg)
{
    scrape_t *sc = arg;
    hub_t *h = sc->hub;
    pthread_mutex_lock(&h->mu);
    sc->rc = h->stopped ? -ESHUTDOWN : h->collect(h->arg, sc->health ? NULL : &sc->m);
    sc->done = 1;
    pthread_cond_broadcast(&h->cv);
    scrape_unref_unlock(sc);
}

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned code, const char *type,
                              char *body, size_t len)
{
    const mc__mhd_fns_t *mhd = mc__mhd(); /* loaded: the server runs */
    struct MHD_Response *r = mhd->create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    mhd->add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result ret = mhd->queue_response(conn, code, r);
    mhd->destroy_response(r);
    return ret;
}

static enum MHD_Result answer_text(struct MHD_Connection *conn, unsigned code, const char *text)
{
    char *body = strdup(text);
    if (!body)
        return MHD_NO;
    return answer(conn, code, "text/plain; charset=utf-8", body, strlen(body));
}

/*
 * Posts a scrape to the loop and waits for it at most MC_METRICS_WAIT_MS.
 * Returns it done (the caller owns one reference, hub->mu held), or NULL
 * when it could not be posted or the loop was late (nothing held).
 */
static scrape_t *scrape(hub_t *h, int health)
{
    scrape_t *sc = calloc(1, sizeof(*sc));
    if (!sc)
        return NULL;
    sc->hub = h;
    sc->health = health;
    sc->refs = 2;
    pthread_mutex_lock(&h->mu);
    h->refs++;
    pthread_mutex_unlock(&h->mu);
    if (mc_loop_post(h->loop, run_scrape, sc) < 0) {
        pthread_mutex_lock(&h->mu);
        sc->refs = 1;
        scrape_unref_unlock(sc);
        return NULL;
    }
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += MC_METRICS_WAIT_MS / 1000;
    until.tv_nsec += (MC_METRICS_WAIT_MS % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&h->mu);
    while (!sc->done && pthread_cond_timedwait(&h->cv, &h->mu, &until) != ETIMEDOUT)
        ;
    if (!sc->done) {
        scrape_unref_unlock(sc);
        return NULL;
    }
    return sc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **ctx)
{
    hub_t *h = cls;
    (void)version;
    (void)upload_data;
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return answer_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "GET only\n"); /* and closes */
    /* The first call has the headers: answering then would close the
     * connection (a body could follow). Answered at the last (a GET's body,
     * if any, read and dropped), a scraper's HTTP/1.1 connection stays open
     * for its next scrape. */
    if (!*ctx || *upload_data_size) {
        *ctx = conn;
        *upload_data_size = 0;
        return MHD_YES;
    }
    int health = strcmp(url, "/health") == 0;
    if (!health && strcmp(url, "/metrics") != 0)
        return answer_text(conn, MHD_HTTP_NOT_FOUND, "/metrics or /health\n");
    scrape_t *sc = scrape(h, health);
    if (!sc)
        return answer_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "the loop did not answer\n");
    int rc = sc->rc;
    mc_metrics_t m = sc->m;
    sc->m = (mc_metrics_t){0}; /* ours now */
    scrape_unref_unlock(sc);
    if (health) {
        free(m.p);
        if (rc < 0) {
            char why[96];
            snprintf(why, sizeof(why), "not serving: %s\n", mc_strerror(rc));
            return answer_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, why);
        }
        return answer_text(conn, MHD_HTTP_OK, "ok\n");
    }
    if (m.oom) {
        free(m.p);
        return answer_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    }
    return answer(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", m.p, m.len);
}

/* A forked child must not keep a scraper's connection (forkfd.h): it would
 * hold it open after the parent died, and the scraper would wait on it
 * instead of seeing the server gone. libmicrohttpd tells of a connection's
 * end before it closes the socket. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **sctx,
                          enum MHD_ConnectionNotificationCode code)
{
    (void)cls;
    (void)sctx;
    const union MHD_ConnectionInfo *ci =
        mc__mhd()->get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return;
    if (code == MHD_CONNECTION_NOTIFY_STARTED)
        mc__fd_own(ci->connect_fd);
    else
        mc__fd_disown(ci->connect_fd);
}

/* "PORT" means 127.0.0.1:PORT; otherwise host:port or [v6]:port. */
static int parse_addr(const char *addr, mc__addr_t *a)
{
    char buf[MC__ADDR_STRLEN];
    if (!addr || !*addr)
        return -EINVAL;
    if (strspn(addr, "0123456789") == strlen(addr)) {
        snprintf(buf, sizeof(buf), "127.0.0.1:%s", addr);
        addr = buf;
    }
    int rc = mc__addr_parse(addr, -1, a);
    if (rc < 0)
        return rc;
    if (a->ss.ss_family != AF_INET && a->ss.ss_family != AF_INET6)
        return -EINVAL;
    return 0;
}

int mc_metrics_serve(mc_metrics_server_t **out, const char *addr, mc_loop_t *loop,
                     mc_metrics_cb collect, void *arg)
{
    mc__addr_t a;
    int rc = parse_addr(addr, &a);
    if (rc < 0)
        return rc;
    if (!mc__mhd()) /* libmicrohttpd, loaded now (dl.h); after this, never NULL */
        return -ELIBACC;
    mc_metrics_server_t *srv = calloc(1, sizeof(*srv));
    hub_t *h = calloc(1, sizeof(*h));
    pthread_condattr_t ca;
    if (!srv || !h || pthread_condattr_init(&ca) != 0) {
        free(srv);
        free(h);
        return -ENOMEM;
    }
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&h->mu, NULL);
    h->refs = 1;
    h->loop = loop;
    h->collect = collect;
    h->arg = arg;
    srv->hub = h;
    /* The listening socket is ours (a forked child closes it: forkfd.h),
     * and taken back from libmicrohttpd at the stop (MHD_USE_ITC lets
     * mc_metrics_stop() quiesce it) so that we close it ourselves. */
    struct stat st = {0};
    srv->fd = mc__listen_socket(&a);
    if (srv->fd < 0 || fstat(srv->fd, &st) < 0) {
        rc = srv->fd < 0 ? srv->fd : -errno;
        goto fail;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ITC;
    if (a.ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    errno = 0;
    srv->d = mc__mhd()->start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_LISTEN_SOCKET,
                                     srv->fd, MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
                                     MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
                                     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (!srv->d) {
        rc = errno ? -errno : -ENOMEM;
        goto fail;
    }
    mc__addr_t bound = {.len = sizeof(bound.ss)};
    srv->port = getsockname(srv->fd, (struct sockaddr *)&bound.ss, &bound.len) == 0
                    ? mc__addr_port(&bound)
                    : mc__addr_port(&a);
    *out = srv;
    return 0;
fail:
    if (srv->fd >= 0) {
        /* Closed unless libmicrohttpd closed it as it failed (then the
         * number may be another's socket now: not ours to close). */
        struct stat now;
        mc__fd_disown(srv->fd);
        if (fstat(srv->fd, &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino)
            close(srv->fd);
    }
    pthread_mutex_lock(&h->mu);
    hub_unref_unlock(h);
    free(srv);
    return rc;
}

int mc_metrics_server_port(const mc_metrics_server_t *srv)
{
    return srv->port;
}

void mc_metrics_stop(mc_metrics_server_t *srv)
{
    if (!srv)
        return;
    const mc__mhd_fns_t *mhd = mc__mhd();        /* loaded: the server runs */
    MHD_socket fd = mhd->quiesce_daemon(srv->d); /* no new connection */
    mhd->stop_daemon(srv->d);                    /* joins the HTTP thread: no new scrape */
    if (fd != MHD_INVALID_SOCKET) {              /* ours again (else libmicrohttpd closed it) */
        mc__fd_disown(fd);
        close(fd);
    }
    hub_t *h = srv->hub;
    pthread_mutex_lock(&h->mu); /* waits for a collect in progress */
    h->stopped = 1;
    hub_unref_unlock(h);
    free(srv);
}
