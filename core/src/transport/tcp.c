/*
 * tcp.c - the tcp transport (see transport.h): a piece is one READ or WRITE
 * request (proto.h) to the node's data address, over its rpc client; a
 * write of zeros sends them from a static page. A READ's answer is received
 * straight into the caller's buffer (mc__rpc_call_into()) when it is large
 * enough for that to pay; a small one is copied out of the conn's buffer.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "mooncake/mooncake.h"
#include "transport/transport.h"
#include "wire/proto.h"

static const char zeros[1 << 16];

typedef struct tcp_piece {
    mc__tp_cb cb;
    void *arg;
    char *dst; /* reads: where the bytes go */
    uint32_t want;
    char prefix[20]; /* writes: the packed "uqq" before the data */
    struct iovec iov[1 + (MC__PROTO_CHUNK / sizeof(zeros))];
} tcp_piece_t;

static void tcp_done(void *arg, int status, const char *body, size_t len)
{
    tcp_piece_t *tp = arg;
    if (status >= 0 && tp->dst) {
        if (len != tp->want)
            status = -EIO;
        else if (body != tp->dst)
            memcpy(tp->dst, body, len);
    }
    mc__tp_cb cb = tp->cb;
    void *cb_arg = tp->arg;
    free(tp);
    cb(cb_arg, status);
}

static int tcp_move(const mc__tp_ep_t *ep, const mc__tp_piece_t *p, mc__tp_cb cb, void *arg)
{
    tcp_piece_t *tp = calloc(1, sizeof(*tp));
    if (!tp)
        return -ENOMEM;
    tp->cb = cb;
    tp->arg = arg;
    tp->want = p->len;
    int rc;
    if (p->write) {
        mc__wbuf_t w = {.p = tp->prefix, .cap = sizeof(tp->prefix)};
        mc__pack(&w, "uqq", p->seg, p->epoch, p->off);
        tp->iov[0] = (struct iovec){tp->prefix, w.len};
        int niov = 1;
        if (!p->buf) {
            for (uint32_t z = 0; z < p->len; z += sizeof(zeros))
                tp->iov[niov++] = (struct iovec){
                    (void *)zeros, p->len - z < sizeof(zeros) ? p->len - z : sizeof(zeros)};
        } else {
            tp->iov[niov++] = (struct iovec){p->buf, p->len};
        }
        rc =
            mc__rpc_client_callv(ep->tcp, MC__OP_WRITE, tp->iov, niov, p->timeout_ms, tcp_done, tp);
    } else {
        char req[24];
        mc__wbuf_t w = {.p = req, .cap = sizeof(req)};
        mc__pack(&w, "uqqu", p->seg, p->epoch, p->off, p->len);
        tp->dst = p->buf;
        rc = mc__rpc_client_call_into(ep->tcp, MC__OP_READ, req, w.len, p->buf, p->len,
                                      p->timeout_ms, tcp_done, tp);
    }
    if (rc < 0)
        free(tp);
    return rc;
}

const mc__transport_t mc__tp_tcp = {
    .name = "tcp",
    .ops_stat = offsetof(mc_store_stats_t, tcp_ops),
    .bytes_stat = offsetof(mc_store_stats_t, tcp_bytes),
    .move = tcp_move,
};
