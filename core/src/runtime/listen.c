/*
 * listen.c - listening sockets that accept on the io_uring loop and hand
 * each connection, started as an open framed conn (net.h), to their owner
 * (see listen.h).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "runtime/forkfd.h"
#include "runtime/listen.h"
#include "runtime/log.h"
#include "runtime/loop_i.h"

#define ACCEPT_RETRY_MS 100 /* after an accept failure (-EMFILE, ...) */

struct mc__listener {
    mc_loop_t *loop;
    int fd;
    mc__addr_t addr; /* as bound */
    char name[MC__ADDR_STRLEN];
    mc__conn_ops_t ops;
    mc__accept_cb cb;
    void *arg;
    mc__io_t aio;
    mc_timer_t retry;
    int owns_path; /* a Unix socket file to remove on close: this inode */
    dev_t dev;
    ino_t ino;
};

static void on_accept(mc__io_t *io, int res);

static void accept_again(mc_timer_t *t)
{
    mc__listener_t *ls = t->data;
    int rc = mc__io_accept(ls->loop, &ls->aio, ls->fd, on_accept);
    if (rc < 0) {
        mc__log(MC__LOG_WARN, "%s: cannot accept (%s); retrying in %d ms", ls->name, strerror(-rc),
                ACCEPT_RETRY_MS);
        mc_timer_start(ls->loop, &ls->retry, ACCEPT_RETRY_MS, 0, accept_again);
    }
}

static void on_accept(mc__io_t *io, int res)
{
    mc__listener_t *ls = io->data;
    char peer[MC__ADDR_STRLEN], named[2 * MC__ADDR_STRLEN];
    const char *name = peer;
    mc__conn_t *c;

    if (res < 0) { /* the multishot accept ended: back off, then accept again */
        mc__log(MC__LOG_WARN, "%s: accept failed (%s); retrying in %d ms", ls->name, strerror(-res),
                ACCEPT_RETRY_MS);
        mc_timer_start(ls->loop, &ls->retry, ACCEPT_RETRY_MS, 0, accept_again);
        return;
    }
    mc__addr_peer_name(res, peer, sizeof(peer));
    if (ls->addr.ss.ss_family == AF_UNIX && strncmp(peer, "unix: ", 6) == 0) {
        /* An unnamed Unix peer: say which socket it came in on. */
        snprintf(named, sizeof(named), "%s%s", ls->name, peer + 5);
        name = named;
    }
    int rc = mc__conn_start(ls->loop, res, name, &ls->ops, ls->arg, &c);
    if (rc < 0) {
        mc__log(MC__LOG_WARN, "%s: dropping a connection from %s: %s", ls->name, name,
                strerror(-rc));
        return;
    }
    mc__log(MC__LOG_DEBUG, "%s: accepted %s", ls->name, mc__conn_peer(c));
    ls->cb(ls, c); /* may close ls: touch nothing after this */
}

/* A Unix path in use: replace it if nobody listens there any more. The probe
 * does not block: a live listener with a full backlog says EAGAIN. */
static int take_stale_path(const struct sockaddr_un *un, socklen_t len)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int rc = connect(fd, (const struct sockaddr *)un, len);
    int e = errno;
    close(fd);
    if (rc == 0 || e != ECONNREFUSED)
        return -EADDRINUSE;
    if (unlink(un->sun_path) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

static int bind_listen(int fd, const mc__addr_t *a)
{
    const struct sockaddr_un *un = (const struct sockaddr_un *)&a->ss;
    int one = 1;

    if (a->ss.ss_family != AF_UNIX)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int rc = bind(fd, (const struct sockaddr *)&a->ss, a->len);
    if (rc < 0 && errno == EADDRINUSE && a->ss.ss_family == AF_UNIX && un->sun_path[0]) {
        if ((rc = take_stale_path(un, a->len)) < 0)
            return rc;
        rc = bind(fd, (const struct sockaddr *)&a->ss, a->len);
    }
    if (rc < 0 || listen(fd, SOMAXCONN) < 0)
        return -errno;
    return 0;
}

int mc__listen_socket(const mc__addr_t *a)
{
    int fd = socket(a->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    mc__fd_own(fd); /* a forked child closes it (forkfd.h) */
    int rc = bind_listen(fd, a);
    if (rc < 0) {
        mc__fd_disown(fd);
        close(fd);
        return rc;
    }
    return fd;
}

int mc__listen(mc_loop_t *l, const mc__addr_t *a, const mc__conn_ops_t *ops, mc__accept_cb cb,
               void *arg, mc__listener_t **out)
{
    const struct sockaddr_un *un = (const struct sockaddr_un *)&a->ss;
    struct stat st;
    int rc;

    mc__listener_t *ls = calloc(1, sizeof(*ls));
    if (!ls)
        return -ENOMEM;
    ls->fd = mc__listen_socket(a);
    if (ls->fd < 0) {
        rc = ls->fd;
        free(ls);
        return rc;
    }
    ls->addr.len = sizeof(ls->addr.ss);
    if (getsockname(ls->fd, (struct sockaddr *)&ls->addr.ss, &ls->addr.len) < 0)
        ls->addr = *a;
    if (a->ss.ss_family == AF_UNIX && un->sun_path[0] && stat(un->sun_path, &st) == 0) {
        ls->owns_path = 1;
        ls->dev = st.st_dev;
        ls->ino = st.st_ino;
    }
    mc__addr_format((struct sockaddr *)&ls->addr.ss, ls->addr.len, ls->name, sizeof(ls->name));
    ls->loop = l;
    ls->ops = *ops;
    ls->cb = cb;
    ls->arg = arg;
    ls->aio.data = ls;
    ls->retry.data = ls;
    if ((rc = mc__io_accept(l, &ls->aio, ls->fd, on_accept)) < 0)
        goto fail;
    mc__log(MC__LOG_INFO, "listening on %s", ls->name);
    *out = ls;
    return 0;
fail:
    if (ls->owns_path)
        unlink(un->sun_path);
    mc__fd_disown(ls->fd);
    close(ls->fd);
    free(ls);
    return rc;
}

const mc__addr_t *mc__listener_addr(const mc__listener_t *ls)
{
    return &ls->addr;
}

void *mc__listener_data(const mc__listener_t *ls)
{
    return ls->arg;
}

static void close_fd(void *arg)
{
    close((int)(intptr_t)arg);
}

void mc__listener_close(mc__listener_t *ls)
{
    struct stat st;
    const struct sockaddr_un *un = (const struct sockaddr_un *)&ls->addr.ss;

    mc_timer_stop(&ls->retry);
    /* The kernel may still hold the socket: close it when it lets go. */
    mc__fd_disown(ls->fd);
    mc__io_cancel(&ls->aio, close_fd, (void *)(intptr_t)ls->fd);
    /* Remove the path only if it is still ours, not a successor's. */
    if (ls->owns_path && stat(un->sun_path, &st) == 0 && st.st_dev == ls->dev &&
        st.st_ino == ls->ino)
        unlink(un->sun_path);
    free(ls);
}
