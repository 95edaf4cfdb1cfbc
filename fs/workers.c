/*
 * workers.c - --threads N: N - 1 threads read FUSE requests from the
 * session's device beside the loop thread. A worker answers a READ by
 * itself when the bytes are a view that cannot change under it (fs_view_t:
 * an open version whose bytes lie in memory this process addresses), with
 * one writev() of the reply header and the segment's memory: no copy but
 * the kernel's. Every other request goes to the loop unchanged
 * (mc_loop_post()), where libfuse processes it as if the loop had read it:
 * the fs state (inodes, handles, writers, the page cache's bookkeeping) and
 * the store stay the loop's alone.
 *
 * While no view is published the workers sleep and the loop reads every
 * request, as with --threads 1.
 *
 * A view is published with an atomic store and withdrawn by storing NULL
 * and then waiting until no worker holds it (each worker announces the
 * view it reads in its hazard pointer before it checks that the view is
 * still published), so the loop may close the version right after.
 */
#include <errno.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "metrics.h"
#include "workers.h"

struct fs_view {
    mc_obj_t *obj; /* the version (open while the view is published) */
    uint64_t size; /* of the version */
    uint32_t n;
    struct piece {
        uint64_t off; /* in the version */
        uint64_t len;
        const char *p; /* NULL: a hole, zeros */
    } piece[];
};

/* A read whose bytes lie in more pieces than this goes to the loop. */
#define MAX_PIECES 64

/* libfuse 3.14's receive buffer: the largest request (a WRITE of
 * max_write, 1 MiB) and its header fit. */
#define BUFSIZE ((size_t)(256 * 4096 + 4096))

/* A request smaller than this is copied to the loop; a larger one (a
 * WRITE's data) hands the buffer over and the worker takes a new one. */
#define COPY_MAX ((size_t)(64 * 1024))

typedef struct worker {
    struct fs_workers *all;
    pthread_t thread;
    int ep;
    char *buf;
    fs_view_t *hazard; /* the view being read (atomic) */
} __attribute__((aligned(64))) worker_t;

struct fs_workers {
    fs_t *fs;
    int fd;         /* the session's device */
    int stopfd;     /* an eventfd: readable once the workers are to stop */
    int stop;       /* atomic */
    unsigned n;     /* running */
    unsigned cap;   /* w[] */
    uint64_t reads; /* atomic */
    /* Views published (atomic; changed on the loop). While there is none,
     * the workers do not read the device: every request they read would
     * be posted to the loop, a hop that only makes it slower. */
    unsigned long views;
    pthread_mutex_t gate_mu; /* guards the sleep on gate_cv */
    pthread_cond_t gate_cv;  /* views became 1, or stop */
    worker_t w[];
};

/* A request on its way to the loop. */
typedef struct fwd {
    fs_t *fs;
    void *mem; /* malloc()ed: the loop's handler may keep it (a WRITE) */
    size_t size;
} fwd_t;

/* ---- views (built and withdrawn on the loop) ---- */

/* A version in more pieces than this gets no view (the loop reads it). */
#define MAX_VIEW_PIECES 65536

/* What a hole of a sparse file reads as (a piece without memory): as many
 * as the largest READ asks for with 4 KiB pages (FS_MAX_PAGES). */
static const char zeros[FS_MAX_PAGES * 4096];

/* Appends piece [off, off + len) at p (NULL: a hole) to *vp. 0 or -1. */
static int view_add(fs_view_t **vp, uint32_t *cap, uint64_t off, uint64_t len, const char *p)
{
    fs_view_t *v = *vp;
    if (v->n == *cap) {
        if (*cap >= MAX_VIEW_PIECES)
            return -1;
        v = realloc(v, sizeof(*v) + 2 * *cap * sizeof(v->piece[0]));
        if (!v)
            return -1;
        *vp = v;
        *cap *= 2;
    }
    v->piece[v->n++] = (struct piece){.off = off, .len = len, .p = p};
    return 0;
}

/* The view of version o, or NULL when some of its bytes lie elsewhere (or
 * in too many pieces, or memory is short). A sparse file's hole is one
 * piece of zeros, however long. mc_obj_view() counts every byte as moved
 * once, here. */
static fs_view_t *view_build(mc_obj_t *o)
{
    uint64_t size = mc_obj_stat(o)->size, off = 0;
    uint32_t cap = 4;
    fs_view_t *v = malloc(sizeof(*v) + cap * sizeof(v->piece[0]));
    if (!v)
        return NULL;
    v->obj = o;
    v->size = size;
    v->n = 0;
    while (off < size) {
        const void *p = NULL;
        int64_t n;
        if (mc_obj_seek(o, off, 1) == (int64_t)off) { /* a hole: up to the next bytes */
            int64_t data = mc_obj_seek(o, off, 0);
            n = (data < 0 ? (int64_t)size : data) - (int64_t)off;
        } else {
            n = mc_obj_view(o, off, (size_t)(size - off), &p);
        }
        if (n <= 0 || view_add(&v, &cap, off, (uint64_t)n, p) < 0)
            goto fail;
        off += (uint64_t)n;
    }
    return v;
fail:
    free(v);
    return NULL;
}

/* Wakes the workers sleeping in gate_wait(). */
static void gate_open(struct fs_workers *all)
{
    pthread_mutex_lock(&all->gate_mu);
    pthread_cond_broadcast(&all->gate_cv);
    pthread_mutex_unlock(&all->gate_mu);
}

/* Publishes v in *slot (NULL before) for the workers. */
static void view_publish(fs_t *fs, fs_view_t **slot, fs_view_t *v)
{
    __atomic_store_n(slot, v, __ATOMIC_RELEASE);
    if (__atomic_fetch_add(&fs->workers->views, 1, __ATOMIC_SEQ_CST) == 0)
        gate_open(fs->workers);
}

/* Makes *slot NULL and frees the view it held once no worker reads it. */
static void view_withdraw(fs_t *fs, fs_view_t **slot)
{
    fs_view_t *v = *slot;
    if (!v)
        return;
    __atomic_store_n(slot, NULL, __ATOMIC_SEQ_CST);
    struct fs_workers *ws = fs->workers;
    if (ws)
        __atomic_fetch_sub(&ws->views, 1, __ATOMIC_SEQ_CST);
    for (unsigned i = 0; ws && i < ws->n; i++)
        while (__atomic_load_n(&ws->w[i].hazard, __ATOMIC_SEQ_CST) == v)
            sched_yield(); /* a reply being written: microseconds */
    free(v);
}

void fs_view_publish_fh(fs_t *fs, fs_fh_t *fh)
{
    if (!fs->workers || fh->writable || !fh->obj || fh->view)
        return;
    fs_view_t *v = view_build(fh->obj);
    if (v)
        view_publish(fs, &fh->view, v);
}

void fs_view_withdraw_fh(fs_t *fs, fs_fh_t *fh)
{
    view_withdraw(fs, &fh->view);
}

void fs_view_publish_inode(fs_t *fs, fs_inode_t *in, mc_obj_t *o)
{
    view_withdraw(fs, &in->view);
    if (!fs->workers || !o || in->ws)
        return;
    fs_view_t *v = view_build(o);
    if (v)
        view_publish(fs, &in->view, v);
}

/* ---- the workers ---- */

/* The view *slot holds, announced in w's hazard pointer (NULL: none). */
static fs_view_t *view_hold(worker_t *w, fs_view_t **slot)
{
    for (;;) {
        fs_view_t *v = __atomic_load_n(slot, __ATOMIC_SEQ_CST);
        if (!v)
            return NULL;
        __atomic_store_n(&w->hazard, v, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(slot, __ATOMIC_SEQ_CST) == v)
            return v;
    }
}

/* Replies to the READ of ih, size bytes at off, from view v: 0, or -1
 * when the bytes lie in too many pieces (the loop answers it then). */
static int reply_from_view(worker_t *w, const struct fuse_in_header *ih, const fs_view_t *v,
                           uint64_t off, uint64_t size)
{
    struct iovec iov[1 + MAX_PIECES];
    struct fuse_out_header oh = {.error = 0, .unique = ih->unique};
    int k = 1;
    uint64_t len = 0;
    if (off < v->size && size > v->size - off)
        size = v->size - off;
    if (off < v->size && size) {
        uint32_t lo = 0, hi = v->n; /* the piece holding off */
        while (hi - lo > 1) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (v->piece[mid].off <= off)
                lo = mid;
            else
                hi = mid;
        }
        for (uint32_t i = lo; len < size; i++, k++) {
            if (k > MAX_PIECES)
                return -1;
            const struct piece *p = &v->piece[i];
            uint64_t in = off + len - p->off, n = p->len - in;
            if (n > size - len)
                n = size - len;
            if (!p->p && n > sizeof(zeros))
                return -1; /* more zeros than zeros[] (pages over 4 KiB): the loop */
            const char *at = p->p ? p->p + in : zeros;
            iov[k] = (struct iovec){.iov_base = (void *)at, .iov_len = (size_t)n};
            len += n;
        }
    }
    oh.len = (uint32_t)(sizeof(oh) + len);
    iov[0] = (struct iovec){.iov_base = &oh, .iov_len = sizeof(oh)};
    ssize_t rc = writev(w->all->fd, iov, k);
    /* ENOENT: the request was interrupted and is gone; ENODEV,
     * ECONNABORTED: unmounted (the kernel ended the connection). */
    if (rc < 0 && errno != ENOENT && errno != ENODEV && errno != ECONNABORTED)
        fprintf(stderr, "mooncake-fs: error: replying to a read: %s\n", strerror(errno));
    __atomic_fetch_add(&w->all->reads, 1, __ATOMIC_RELAXED);
    return 0;
}

/* Answers the request in w->buf (n bytes) when it is a READ of a view:
 * 1 answered, 0 not (the loop must). */
static int try_read(worker_t *w, size_t n)
{
    const struct fuse_in_header *ih = (const void *)w->buf;
    if (n < sizeof(*ih) + sizeof(struct fuse_read_in) || ih->opcode != FUSE_READ)
        return 0;
    const struct fuse_read_in *ri = (const void *)(ih + 1);
    /* The kernel sends a READ only on a handle that OPEN returned and
     * RELEASE has not yet freed; it sends RELEASE once no read on the
     * handle is unanswered (docs/ARCHITECTURE.md, "Threads"). */
    fs_fh_t *fh = (fs_fh_t *)(uintptr_t)ri->fh;
    fs_view_t *v = view_hold(w, &fh->view);
    if (!v && !fh->writable && !fh->direct && !w->all->fs->direct_io)
        v = view_hold(w, &fh->in->view);
    /* A version whose handle went with a lost connection to the master may
     * have lost its space to another object: the loop answers (ESTALE). */
    int done = v && !mc_obj_stale(v->obj) && reply_from_view(w, ih, v, ri->offset, ri->size) == 0;
    __atomic_store_n(&w->hazard, NULL, __ATOMIC_RELEASE);
    return done;
}

/* On the loop: processes a request a worker read, as on_fuse() would. */
static void fwd_run(void *arg)
{
    fwd_t *f = arg;
    fs_t *fs = f->fs;
    if (fs->stopping || fuse_session_exited(fs->se)) {
        free(f->mem); /* as on_fuse(): nothing is read once stopping */
        free(f);
        return;
    }
    struct fuse_buf saved = fs->rbuf;
    fs->rbuf = (struct fuse_buf){.size = f->size, .mem = f->mem};
    fs_metrics_count(&fs->rbuf, (int)f->size);
    fuse_session_process_buf(fs->se, &fs->rbuf);
    if (!fs->rbuf_taken)
        free(f->mem);
    fs->rbuf_taken = 0;
    fs->rbuf = saved;
    free(f);
}

/* Hands the request in w->buf (n bytes) to the loop. 0 or -ENOMEM. */
static int forward(worker_t *w, size_t n)
{
    fwd_t *f = malloc(sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->fs = w->all->fs;
    f->size = n;
    if (n > COPY_MAX) {
        f->mem = w->buf;
        w->buf = NULL;
    } else if ((f->mem = malloc(n)) != NULL) {
        memcpy(f->mem, w->buf, n);
    }
    if (!f->mem || mc_loop_post(f->fs->loop, fwd_run, f) < 0) {
        if (!w->buf)
            w->buf = f->mem; /* handed over: take it back */
        else
            free(f->mem);
        free(f);
        return -ENOMEM;
    }
    return 0;
}

/* Reads the requests waiting on the device: 0, or -1 when the session is
 * over (the loop sees it too: the device polls as an error). */
static int drain(worker_t *w)
{
    struct fs_workers *all = w->all;
    for (int i = 0; i < 64 && !__atomic_load_n(&all->stop, __ATOMIC_ACQUIRE); i++) {
        if (!w->buf && !(w->buf = malloc(BUFSIZE)))
            return 0; /* the loop reads them */
        ssize_t n = read(all->fd, w->buf, BUFSIZE);
        if (n < 0 && (errno == EINTR || errno == ENOENT))
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n <= 0)
            return -1; /* ENODEV: unmounted */
        if (try_read(w, (size_t)n))
            continue;
        if (forward(w, (size_t)n) < 0) {
            const struct fuse_in_header *ih = (const void *)w->buf;
            struct fuse_out_header oh = {.len = sizeof(oh), .error = -ENOMEM, .unique = ih->unique};
            if (ih->opcode != FUSE_FORGET && ih->opcode != FUSE_BATCH_FORGET &&
                write(all->fd, &oh, sizeof(oh)) < 0)
                fprintf(stderr, "mooncake-fs: error: replying: %s\n", strerror(errno));
        }
    }
    return 0;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    struct fs_workers *all = w->all;
    while (!__atomic_load_n(&all->stop, __ATOMIC_ACQUIRE)) {
        if (!__atomic_load_n(&all->views, __ATOMIC_SEQ_CST)) {
            pthread_mutex_lock(&all->gate_mu);
            while (!__atomic_load_n(&all->views, __ATOMIC_SEQ_CST) &&
                   !__atomic_load_n(&all->stop, __ATOMIC_ACQUIRE))
                pthread_cond_wait(&all->gate_cv, &all->gate_mu);
            pthread_mutex_unlock(&all->gate_mu);
            continue;
        }
        struct epoll_event ev[2];
        int n = epoll_wait(w->ep, ev, 2, -1);
        if (n < 0 && errno != EINTR)
            break;
        if (__atomic_load_n(&all->stop, __ATOMIC_ACQUIRE))
            break;
        if (n > 0 && drain(w) < 0)
            break;
    }
    return NULL;
}

/* Sets up worker i's epoll: the device (EPOLLEXCLUSIVE: one worker wakes
 * per request, not all) and the stop eventfd. 0 or -errno. */
static int worker_init(struct fs_workers *all, unsigned i)
{
    worker_t *w = &all->w[i];
    w->all = all;
    w->ep = epoll_create1(EPOLL_CLOEXEC);
    if (w->ep < 0)
        return -errno;
    struct epoll_event dev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.u32 = 0};
    struct epoll_event stop = {.events = EPOLLIN, .data.u32 = 1};
    if (epoll_ctl(w->ep, EPOLL_CTL_ADD, all->fd, &dev) < 0 ||
        epoll_ctl(w->ep, EPOLL_CTL_ADD, all->stopfd, &stop) < 0)
        return -errno;
    return 0;
}

int fs_workers_start(fs_t *fs, unsigned n)
{
    if (n == 0)
        return 0;
    struct fs_workers *all = calloc(1, sizeof(*all) + n * sizeof(all->w[0]));
    if (!all)
        return -ENOMEM;
    all->fs = fs;
    all->fd = fuse_session_fd(fs->se);
    pthread_mutex_init(&all->gate_mu, NULL);
    pthread_cond_init(&all->gate_cv, NULL);
    all->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int rc = all->stopfd < 0 ? -errno : 0;
    all->cap = n;
    for (unsigned i = 0; i < n; i++)
        all->w[i].ep = -1;
    for (unsigned i = 0; rc == 0 && i < n; i++) {
        rc = worker_init(all, i);
        if (rc == 0)
            rc = -pthread_create(&all->w[i].thread, NULL, worker_main, &all->w[i]);
        if (rc == 0)
            all->n = i + 1;
    }
    fs->workers = all;
    if (rc < 0)
        fs_workers_stop(fs);
    return rc;
}

void fs_workers_stop(fs_t *fs)
{
    struct fs_workers *all = fs->workers;
    if (!all)
        return;
    __atomic_store_n(&all->stop, 1, __ATOMIC_RELEASE);
    gate_open(all);
    uint64_t one = 1;
    if (write(all->stopfd, &one, sizeof(one)) < 0)
        fprintf(stderr, "mooncake-fs: error: stopping the workers: %s\n", strerror(errno));
    for (unsigned i = 0; i < all->n; i++)
        pthread_join(all->w[i].thread, NULL);
    fs->workers = NULL; /* views withdrawn from now on wait for nobody */
    fs->worker_reads = all->reads;
    for (unsigned i = 0; i < all->cap; i++) {
        if (all->w[i].ep >= 0)
            close(all->w[i].ep);
        free(all->w[i].buf);
    }
    if (all->stopfd >= 0)
        close(all->stopfd);
    pthread_mutex_destroy(&all->gate_mu);
    pthread_cond_destroy(&all->gate_cv);
    free(all);
}

uint64_t fs_workers_reads(const fs_t *fs)
{
    const struct fs_workers *all = fs->workers;
    return all ? __atomic_load_n(&all->reads, __ATOMIC_RELAXED) : fs->worker_reads;
}
