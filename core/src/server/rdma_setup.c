/*
 * rdma_setup.c - setting a process up for RDMA (see rdma_setup.h): the
 * protocol a store asked for, the device it opens, and a node's segment
 * offered to peers, with its fence.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>

#include "runtime/log.h"
#include "server/rdma_setup.h"
#include "transport/shm.h"

int mc__xport_parse(const char *s)
{
    if (!s || !*s || strcmp(s, "tcp") == 0)
        return MC__XPORT_TCP;
    if (strcmp(s, "rdma") == 0)
        return MC__XPORT_RDMA;
    if (strcmp(s, "auto") == 0)
        return MC__XPORT_AUTO;
    return -EINVAL;
}

int mc__rdma_open(mc_loop_t *l, int xport, const char *devices, uint64_t timeout_ms,
                  mc__rdma_ctx_t **out)
{
    *out = NULL;
    if (xport == MC__XPORT_TCP)
        return 0;
    int n = mc__rdma_available(), rc = n;
    if (n == 0 || (n < 0 && n != -ENOTSUP))
        rc = -ENODEV; /* none, or no kernel support (ENOSYS): no usable device */
    if (n > 0) {
        char list[256];
        snprintf(list, sizeof(list), "%s", devices ? devices : "");
        char *save = NULL, *name = strtok_r(list, ", ", &save);
        mc__rdma_opts_t o = {.timeout_ms = timeout_ms};
        do {
            o.device = name;
            rc = mc__rdma_ctx_new(l, &o, out);
            if (rc == 0) {
                mc__log(MC__LOG_INFO, "rdma: data moves over RDMA (device %s)",
                        mc__rdma_device_name(*out));
                return 0;
            }
            mc__log(MC__LOG_INFO, "rdma: device %s: %s", name ? name : "(first)",
                    strerrordesc_np(-rc));
        } while (name && (name = strtok_r(NULL, ", ", &save)));
    }
    if (rc == -ENOTSUP)
        rc = -EPROTONOSUPPORT;
    if (xport == MC__XPORT_AUTO) {
        mc__log(MC__LOG_INFO, "rdma: %s: data moves over TCP",
                rc == -EPROTONOSUPPORT ? "not built in"
                : rc == -ENODEV        ? "no usable device"
                                       : strerrordesc_np(-rc));
        return 0;
    }
    return rc;
}

int mc__rdma_serve(mc__rdma_ctx_t *ctx, void *base, size_t size, const char *host,
                   mc__rdma_mr_t **mr, char **rec, size_t *rec_len)
{
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_PASSIVE, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    if (!host || getaddrinfo(host, "0", &hints, &ai) != 0)
        return -EINVAL;
    int rc = mc__rdma_listen_port(ctx);
    if (rc < 0)
        rc = mc__rdma_listen(ctx, ai->ai_addr);
    freeaddrinfo(ai);
    if (rc < 0)
        return rc;
    int port = mc__rdma_listen_port(ctx);
    if (port < 0)
        return port;
    rc = mc__rdma_register(ctx, base, size, MC__RDMA_REMOTE, mr);
    if (rc < 0)
        return rc;
    char addr[300];
    snprintf(addr, sizeof(addr), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    rc = mc__rdma_record_pack(addr, mc__rdma_mr_desc(*mr), rec, rec_len);
    if (rc < 0) {
        mc__rdma_deregister(*mr);
        *mr = NULL;
    }
    return rc;
}

int mc__rdma_host_of(const char *addr, char *host, size_t cap)
{
    const char *colon = strrchr(addr, ':');
    if (strncmp(addr, "unix:", 5) == 0 || !colon)
        return -EAFNOSUPPORT; /* RDMA needs an IP address */
    const char *h = addr;
    size_t n = (size_t)(colon - addr);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']')
        h++, n -= 2;
    if (n == 0 || n >= cap)
        return -EINVAL;
    memcpy(host, h, n);
    host[n] = '\0';
    return 0;
}

/* ---- the fence (transport_rdma.h, "Fences") ---- */

static void fence_revoke(const void *owner)
{
    mc__rdma_revoke((mc__rdma_conn_t *)(uintptr_t)owner);
}

static _Atomic uint64_t *fence_join(void *arg, mc__rdma_conn_t *c, const char *peer)
{
    mc__rdma_fencer_t *f = arg;
    mc__data_plane_t *dp = mc__server_data_plane(f->srv);
    _Atomic uint64_t *epoch;
    if (!dp)
        return NULL;
    return mc__data_plane_fence_join(dp, *f->seg, c, peer, fence_revoke, &epoch);
}

static void fence_leave(void *arg, mc__rdma_conn_t *c)
{
    mc__rdma_fencer_t *f = arg;
    mc__data_plane_t *dp = mc__server_data_plane(f->srv);
    if (dp)
        mc__data_plane_closed(dp, c);
}

int mc__rdma_fence_segment(mc__rdma_fencer_t *f, mc__rdma_ctx_t *ctx, mc__server_t *srv,
                           const uint32_t *seg, mc__shm_fence_t *fence)
{
    *f = (mc__rdma_fencer_t){.srv = srv, .seg = seg};
    mc__rdma_fence_ops_t ops = {.join = fence_join, .leave = fence_leave, .arg = f};
    int rc = fence ? mc__rdma_fence(ctx, &fence->epoch, &fence->mount, &ops) : -ENOTSUP;
    if (rc < 0)
        mc__log(MC__LOG_WARN, "RDMA peers' writes pass no fence: %s", strerror(-rc));
    if (rc == 0)
        f->ctx = ctx;
    return rc;
}

void mc__rdma_unfence(mc__rdma_fencer_t *f)
{
    if (f->ctx)
        mc__rdma_fence(f->ctx, NULL, NULL, NULL);
    f->ctx = NULL;
}
