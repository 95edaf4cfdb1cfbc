/*
 * etcd.c - etcd's v3 API over its JSON gateway (see etcd.h), with libcurl's
 * multi interface on the loop and libjansson.
 *
 * libcurl tells us which sockets to watch (sock_cb) and when to wake it
 * (timer_cb); the loop's polls and timer call curl_multi_socket_action(),
 * and finished transfers are collected by check_done(). io_uring polls are
 * multishot (a new event, not a level), so a socket's poll is armed again
 * after each action: curl may leave bytes it has not read yet.
 *
 * The gateway speaks proto3 JSON: bytes fields (keys, values) are base64,
 * 64-bit integers are strings, fields at their default value (0, false) are
 * left out.
 */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/dl.h"
#include "runtime/etcd.h"
#include "runtime/etcd_i.h"
#include "runtime/forkfd.h"
#include "runtime/log.h"

#define RESP_MAX (64u << 20) /* an answer (a range) larger than this fails */
#define EP_MAX 8

enum kind { K_PUT, K_PUT_IF, K_RANGE, K_DELETE, K_GRANT, K_KEEPALIVE, K_REVOKE, K_WATCH };

typedef struct req req_t;

struct mc__etcd {
    mc_loop_t *loop;
    const mc__curl_fns_t *cu; /* libcurl's functions (dl.h) */
    CURLM *multi;
    mc_timer_t timer;
    char *eps[EP_MAX];
    int neps;
    int cur; /* the endpoint requests go to first */
    unsigned timeout_ms;
    req_t *reqs;        /* in flight, watches too */
    int in_action;      /* inside curl_multi_socket_action(): sockets are not freed, */
    struct sockw *dead; /* but kept here until it returns */
};

struct mc__etcd_watch {
    req_t *r;
};

struct req {
    mc__etcd_t *e;
    CURL *h;
    enum kind kind;
    const char *path;
    char *body;
    char *resp;
    size_t rlen, rcap;
    int tries;
    int ep; /* the endpoint it went to (an index into eps) */
    mc__etcd_cb cb;
    mc__etcd_watch_cb wcb;
    void *arg;
    mc__etcd_watch_t *w;
    int ended; /* a watch that reported its end */
    struct curl_slist *hdrs;
    req_t *prev, *next;
};

/* A socket libcurl asked us to watch. */
typedef struct sockw {
    mc_poll_t p;
    mc__etcd_t *e;
    curl_socket_t fd;
    unsigned events;
    int removed;
    struct sockw *next; /* on e->dead */
} sockw_t;

/* ---- requests ---- */

static void req_free(req_t *r)
{
    mc__etcd_t *e = r->e;
    if (r->prev)
        r->prev->next = r->next;
    else
        e->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    if (r->h) {
        e->cu->multi_remove_handle(e->multi, r->h);
        e->cu->easy_cleanup(r->h);
    }
    e->cu->slist_free_all(r->hdrs);
    free(r->body);
    free(r->resp);
    free(r->w);
    free(r);
}

static void watch_lines(req_t *r);

static size_t on_data(char *p, size_t size, size_t nmemb, void *arg)
{
    req_t *r = arg;
    size_t n = size * nmemb;
    if (r->ended)
        return 0; /* a watch that ended: stop the transfer */
    if (r->rlen + n + 1 > RESP_MAX)
        return 0; /* fails the transfer: CURLE_WRITE_ERROR */
    if (r->rlen + n + 1 > r->rcap) {
        size_t cap = r->rcap ? r->rcap : 4096;
        while (cap < r->rlen + n + 1)
            cap *= 2;
        char *b = realloc(r->resp, cap);
        if (!b)
            return 0;
        r->resp = b;
        r->rcap = cap;
    }
    memcpy(r->resp + r->rlen, p, n);
    r->rlen += n;
    r->resp[r->rlen] = '\0';
    if (r->kind == K_WATCH)
        watch_lines(r);
    return n;
}

/* Points r at endpoint ep and adds it to the multi handle. */
static int req_send(req_t *r, unsigned ep_at)
{
    mc__etcd_t *e = r->e;
    char url[512];
    r->ep = ep_at % e->neps;
    const char *ep = e->eps[r->ep];
    snprintf(url, sizeof(url), "%s%s%s", strncmp(ep, "http", 4) ? "http://" : "", ep, r->path);
    e->cu->easy_setopt(r->h, CURLOPT_URL, url);
    r->rlen = 0;
    return e->cu->multi_add_handle(e->multi, r->h) == CURLM_OK ? 0 : -ENOMEM;
}

/* Connections to etcd are made and closed here, so that a forked child
 * closes them (forkfd.h): it would otherwise hold its dead parent's
 * connections open. curl closes a connection with the callback of the
 * request that opened it, whichever request used it last. */
static curl_socket_t open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
    (void)arg;
    (void)purpose;
    int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    if (fd < 0)
        return CURL_SOCKET_BAD;
    mc__fd_own(fd);
    return fd;
}

static int close_socket(void *arg, curl_socket_t fd)
{
    (void)arg;
    mc__fd_disown(fd);
    return close(fd);
}

/* Starts a request of kind on path with JSON body j (taken). */
static int req_start(mc__etcd_t *e, enum kind kind, const char *path, json_t *j, mc__etcd_cb cb,
                     mc__etcd_watch_cb wcb, void *arg, req_t **out)
{
    req_t *r = calloc(1, sizeof(*r));
    char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!r || !body || !(r->h = e->cu->easy_init())) {
        free(r);
        free(body);
        return -ENOMEM;
    }
    r->e = e;
    r->kind = kind;
    r->path = path;
    r->body = body;
    r->cb = cb;
    r->wcb = wcb;
    r->arg = arg;
    r->hdrs = e->cu->slist_append(NULL, "Content-Type: application/json");
    e->cu->easy_setopt(r->h, CURLOPT_POSTFIELDS, r->body);
    e->cu->easy_setopt(r->h, CURLOPT_HTTPHEADER, r->hdrs);
    e->cu->easy_setopt(r->h, CURLOPT_WRITEFUNCTION, on_data);
    e->cu->easy_setopt(r->h, CURLOPT_WRITEDATA, r);
    e->cu->easy_setopt(r->h, CURLOPT_PRIVATE, r);
    e->cu->easy_setopt(r->h, CURLOPT_NOSIGNAL, 1L);
    e->cu->easy_setopt(r->h, CURLOPT_CONNECTTIMEOUT_MS, (long)e->timeout_ms);
    e->cu->easy_setopt(r->h, CURLOPT_PROTOCOLS_STR, "http");
    e->cu->easy_setopt(r->h, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    e->cu->easy_setopt(r->h, CURLOPT_CLOSESOCKETFUNCTION, close_socket);
    if (kind != K_WATCH)
        e->cu->easy_setopt(r->h, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
    r->next = e->reqs;
    if (e->reqs)
        e->reqs->prev = r;
    e->reqs = r;
    int rc = req_send(r, e->cur);
    if (rc < 0) {
        req_free(r);
        return rc;
    }
    if (out)
        *out = r;
    return 0;
}

/* The body of a finished unary request, for its callback. */
static void unary_done(req_t *r, int rc)
{
    mc__etcd_res_t res = {0};
    mc__etcd_kv_t *kvs = NULL;
    json_t *j = NULL;
    if (rc == 0) {
        json_error_t err;
        j = json_loadb(r->resp ? r->resp : "", r->rlen, 0, &err);
        json_t *result = json_object_get(j, "result"); /* keepalive streams its answers */
        if (result) {
            json_incref(result);
            json_decref(j);
            j = result;
        }
        if (!json_is_object(j))
            rc = -EPROTO;
        else if (json_object_get(j, "error") || json_object_get(j, "code"))
            rc = mc__etcd_grpc_errno(j);
    }
    if (rc == 0) {
        res.revision = mc__etcd_jint(json_object_get(j, "header"), "revision");
        switch (r->kind) {
        case K_RANGE:
            rc = mc__etcd_parse_kvs(json_object_get(j, "kvs"), &res, &kvs);
            res.more = json_is_true(json_object_get(j, "more"));
            break;
        case K_DELETE:
            res.deleted = mc__etcd_jint(j, "deleted");
            break;
        case K_PUT_IF: {
            res.succeeded = json_is_true(json_object_get(j, "succeeded"));
            json_t *rr = json_object_get(json_array_get(json_object_get(j, "responses"), 0),
                                         "response_range");
            if (!res.succeeded && rr)
                rc = mc__etcd_parse_kvs(json_object_get(rr, "kvs"), &res, &kvs);
            break;
        }
        case K_GRANT:
        case K_KEEPALIVE:
            res.lease = mc__etcd_jint(j, "ID");
            res.ttl = mc__etcd_jint(j, "TTL");
            if (r->kind == K_KEEPALIVE && res.ttl <= 0)
                rc = -ENOENT; /* the lease has expired */
            break;
        default:
            break;
        }
    }
    r->cb(r->arg, rc, rc == 0 ? &res : NULL);
    free(kvs);
    json_decref(j);
}

/* ---- watches ---- */

/* Reports a watch's end once. */
static void watch_end(req_t *r, int rc)
{
    if (r->ended)
        return;
    r->ended = 1;
    r->wcb(r->arg, rc, NULL, 0, 0);
}

/* One message of the watch stream: {"result": {header, created, events,
 * canceled, compact_revision}}. */
static void watch_msg(req_t *r, const char *line, size_t n)
{
    json_error_t err;
    json_t *j = json_loadb(line, n, 0, &err);
    json_t *m = json_object_get(j, "result");
    if (!json_is_object(m)) {
        json_decref(j);
        return watch_end(r, json_object_get(j, "error") ? mc__etcd_grpc_errno(j) : -EPROTO);
    }
    if (json_is_true(json_object_get(m, "canceled"))) {
        int rc = mc__etcd_jint(m, "compact_revision") ? -ERANGE : -ECANCELED;
        json_decref(j);
        return watch_end(r, rc);
    }
    json_t *evs = json_object_get(m, "events");
    size_t ne = json_is_array(evs) ? json_array_size(evs) : 0;
    mc__etcd_event_t *ev = ne ? calloc(ne, sizeof(*ev)) : NULL;
    int rc = ne && !ev ? -ENOMEM : 0;
    for (size_t i = 0; rc == 0 && i < ne; i++) {
        json_t *e = json_array_get(evs, i);
        json_t *type = json_object_get(e, "type");
        ev[i].deleted = json_is_string(type) && !strcmp(json_string_value(type), "DELETE");
        rc = mc__etcd_parse_kv(json_object_get(e, "kv"), &ev[i].kv);
    }
    if (rc < 0)
        watch_end(r, rc);
    else if (!json_is_true(json_object_get(m, "created")) || ne)
        r->wcb(r->arg, 0, ev, ne, mc__etcd_jint(json_object_get(m, "header"), "revision"));
    free(ev);
    json_decref(j);
}

/* Takes every whole line (message) out of the watch's buffer. */
static void watch_lines(req_t *r)
{
    char *nl;
    while (!r->ended && (nl = memchr(r->resp, '\n', r->rlen))) {
        size_t n = (size_t)(nl - r->resp);
        watch_msg(r, r->resp, n);
        memmove(r->resp, nl + 1, r->rlen - n - 1);
        r->rlen -= n + 1;
        r->resp[r->rlen] = '\0';
    }
}

/* ---- the multi handle on the loop ---- */

static int curl_errno(CURLcode cc)
{
    switch (cc) {
    case CURLE_OK:
        return 0;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
        return -EHOSTUNREACH;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
        return -ECONNRESET;
    case CURLE_WRITE_ERROR:
        return -EMSGSIZE;
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    default:
        return -EIO;
    }
}

static void check_done(mc__etcd_t *e)
{
    CURLMsg *m;
    int left;
    while ((m = e->cu->multi_info_read(e->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        req_t *r = NULL;
        long status = 0;
        CURL *h = m->easy_handle;
        CURLcode cc = m->data.result;
        e->cu->easy_getinfo(h, CURLINFO_PRIVATE, (char **)&r);
        e->cu->easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        e->cu->multi_remove_handle(e->multi, h);
        int rc = curl_errno(cc);
        /* Not sent at all: the next endpoint may answer. */
        if ((cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST) &&
            ++r->tries < e->neps && req_send(r, r->ep + 1) == 0)
            continue;
        if (rc == 0 && r->tries) /* that endpoint answered: go there first */
            e->cur = r->ep;
        /* Connected, then nothing or a broken answer: a member stopped,
         * hung or cut off. The next requests go to the next endpoint
         * first, or every request would wait its timeout there for ever.
         * A range, which only reads, goes there too; any other request is
         * not sent again (it may have been applied there). */
        int hung = rc == -ETIMEDOUT || rc == -ECONNRESET;
        if (hung && e->cur == r->ep)
            e->cur = (r->ep + 1) % e->neps;
        if (hung && r->kind == K_RANGE && ++r->tries < e->neps && req_send(r, r->ep + 1) == 0)
            continue;
        if (r->kind == K_WATCH) {
            watch_end(r, rc < 0 ? rc : -ECONNRESET); /* a stream never ends well */
            continue;                                /* freed by mc__etcd_watch_cancel() */
        }
        if (rc == 0 && status != 200 && !r->rlen)
            rc = -EPROTO;
        unary_done(r, rc);
        req_free(r);
    }
}

static void on_sock(mc_poll_t *p, int revents);

/* Frees the sockets curl let go of during an action. */
static void free_dead(mc__etcd_t *e)
{
    while (!e->in_action && e->dead) {
        sockw_t *w = e->dead;
        e->dead = w->next;
        free(w);
    }
}

/* Arms (again) the poll of w for its events. */
static void sock_arm(sockw_t *w)
{
    mc_poll_stop(&w->p);
    w->p.data = w;
    if (w->events && mc_poll_start(w->e->loop, &w->p, w->fd, w->events, on_sock) < 0)
        mc__log(MC__LOG_WARN, "etcd: cannot watch a socket");
}

static void on_sock(mc_poll_t *p, int revents)
{
    sockw_t *w = p->data;
    mc__etcd_t *e = w->e;
    curl_socket_t fd = w->fd;
    int flags = 0, running;
    if (revents < 0 || (revents & (POLLERR | POLLHUP)))
        flags |= CURL_CSELECT_ERR;
    if (revents > 0 && (revents & POLLIN))
        flags |= CURL_CSELECT_IN;
    if (revents > 0 && (revents & POLLOUT))
        flags |= CURL_CSELECT_OUT;
    e->in_action++;
    e->cu->multi_socket_action(e->multi, fd, flags, &running);
    e->in_action--;
    if (!w->removed)
        sock_arm(w); /* as a level: curl may not have read everything */
    free_dead(e);
    check_done(e);
}

static int sock_cb(CURL *h, curl_socket_t fd, int what, void *userp, void *socketp)
{
    mc__etcd_t *e = userp;
    sockw_t *w = socketp;
    (void)h;
    if (what == CURL_POLL_REMOVE) {
        if (w) {
            mc_poll_stop(&w->p); /* a stopped handle may be freed at once, */
            w->removed = 1;      /* but on_sock() may still be looking at it */
            w->next = e->dead;
            e->dead = w;
            free_dead(e);
        }
        return 0;
    }
    if (!w) {
        w = calloc(1, sizeof(*w));
        if (!w)
            return -1;
        w->e = e;
        w->fd = fd;
        e->cu->multi_assign(e->multi, fd, w);
    }
    w->events = (what & CURL_POLL_IN ? POLLIN : 0) | (what & CURL_POLL_OUT ? POLLOUT : 0);
    sock_arm(w);
    return 0;
}

static void on_timer(mc_timer_t *t)
{
    mc__etcd_t *e = t->data;
    int running;
    e->in_action++;
    e->cu->multi_socket_action(e->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    e->in_action--;
    free_dead(e);
    check_done(e);
}

static int timer_cb(CURLM *m, long timeout_ms, void *userp)
{
    mc__etcd_t *e = userp;
    (void)m;
    if (timeout_ms < 0) {
        mc_timer_stop(&e->timer);
        return 0;
    }
    e->timer.data = e;
    return mc_timer_start(e->loop, &e->timer, (uint64_t)timeout_ms, 0, on_timer) < 0 ? -1 : 0;
}

/* ---- the interface ---- */

int mc__etcd_new(mc_loop_t *loop, const char *endpoints, unsigned timeout_ms, mc__etcd_t **out)
{
    if (!endpoints || !*endpoints || timeout_ms == 0 || timeout_ms > 3600000)
        return -EINVAL;
    const mc__curl_fns_t *cu = mc__curl(); /* libcurl, loaded now (dl.h) */
    if (!cu)
        return -ELIBACC;
    mc__etcd_t *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    e->loop = loop;
    e->cu = cu;
    e->timeout_ms = timeout_ms;
    const char *p = endpoints;
    if (!strncmp(p, "etcd://", 7)) /* Mooncake's form of a master address */
        p += 7;
    while (*p) {
        size_t n = strcspn(p, ",;");
        int rc = n >= 256 || (n && e->neps == EP_MAX) ? -EINVAL : 0;
        if (!rc && n && !(e->eps[e->neps++] = strndup(p, n)))
            rc = -ENOMEM;
        if (rc < 0) {
            mc__etcd_free(e);
            return rc;
        }
        p += n + (p[n] != '\0');
    }
    if (!e->neps || !(e->multi = e->cu->multi_init())) {
        int rc = e->neps ? -ENOMEM : -EINVAL;
        mc__etcd_free(e);
        return rc;
    }
    e->cu->multi_setopt(e->multi, CURLMOPT_SOCKETFUNCTION, sock_cb);
    e->cu->multi_setopt(e->multi, CURLMOPT_SOCKETDATA, e);
    e->cu->multi_setopt(e->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    e->cu->multi_setopt(e->multi, CURLMOPT_TIMERDATA, e);
    *out = e;
    return 0;
}

void mc__etcd_free(mc__etcd_t *e)
{
    if (!e)
        return;
    while (e->reqs) {
        req_t *r = e->reqs;
        if (r->kind == K_WATCH) {
            watch_end(r, -ECANCELED);
            r->w->r = NULL; /* the owner's cancel then only frees the handle */
            r->w = NULL;
        } else {
            r->cb(r->arg, -ECANCELED, NULL);
        }
        req_free(r);
    }
    mc_timer_stop(&e->timer);
    if (e->multi)
        e->cu->multi_cleanup(e->multi); /* removes its sockets: sock_cb frees them */
    free_dead(e);
    for (int i = 0; i < e->neps; i++)
        free(e->eps[i]);
    free(e);
}

/* The request body's key fields: key, and range_end for a prefix. */
static json_t *key_obj(const char *key, size_t klen, int prefix)
{
    char *k = mc__etcd_b64_encode(key, klen);
    json_t *j = k ? json_pack("{s:s}", "key", k) : NULL;
    free(k);
    if (!j || !prefix)
        return j;
    size_t n;
    char *end = mc__etcd_prefix_end(key, klen, &n);
    char *e64 = end ? mc__etcd_b64_encode(end, n) : NULL;
    free(end);
    if (!e64 || json_object_set_new(j, "range_end", json_string(e64)) < 0) {
        free(e64);
        json_decref(j);
        return NULL;
    }
    free(e64);
    return j;
}

static char *i64(char *buf, int64_t v)
{
    snprintf(buf, 24, "%lld", (long long)v);
    return buf;
}

/* {key, value, lease} of a put. */
static json_t *put_obj(const char *key, size_t klen, const char *val, size_t vlen, int64_t lease)
{
    json_t *j = key_obj(key, klen, 0);
    char *v = mc__etcd_b64_encode(val, vlen);
    char b[24];
    if (!j || !v || json_object_set_new(j, "value", json_string(v)) < 0 ||
        (lease && json_object_set_new(j, "lease", json_string(i64(b, lease))) < 0)) {
        json_decref(j);
        j = NULL;
    }
    free(v);
    return j;
}

int mc__etcd_put(mc__etcd_t *e, const char *key, size_t klen, const char *val, size_t vlen,
                 int64_t lease, mc__etcd_cb cb, void *arg)
{
    json_t *j = put_obj(key, klen, val, vlen, lease);
    return j ? req_start(e, K_PUT, "/v3/kv/put", j, cb, NULL, arg, NULL) : -ENOMEM;
}

int mc__etcd_put_if(mc__etcd_t *e, const char *key, size_t klen, const char *val, size_t vlen,
                    int64_t lease, int64_t mod_rev, mc__etcd_cb cb, void *arg)
{
    char b[24];
    json_t *put = put_obj(key, klen, val, vlen, lease);
    json_t *cmp = key_obj(key, klen, 0);
    json_t *get = key_obj(key, klen, 0);
    json_t *j = NULL;
    if (put && cmp && get &&
        json_object_set_new(cmp, "target", json_string(mod_rev ? "MOD" : "CREATE")) == 0 &&
        json_object_set_new(cmp, mod_rev ? "mod_revision" : "create_revision",
                            json_string(i64(b, mod_rev))) == 0 &&
        json_object_set_new(cmp, "result", json_string("EQUAL")) == 0)
        j = json_pack("{s:[O],s:[{s:O}],s:[{s:O}]}", "compare", cmp, "success", "request_put", put,
                      "failure", "request_range", get);
    json_decref(put);
    json_decref(cmp);
    json_decref(get);
    return j ? req_start(e, K_PUT_IF, "/v3/kv/txn", j, cb, NULL, arg, NULL) : -ENOMEM;
}

int mc__etcd_put_fenced(mc__etcd_t *e, const char *fence, size_t flen, int64_t create_rev,
                        const mc__etcd_put_kv_t *kvs, size_t n, mc__etcd_cb cb, void *arg)
{
    char b[24];
    json_t *cmp = key_obj(fence, flen, 0), *ops = json_array(), *j = NULL;
    int ok = cmp && ops && json_object_set_new(cmp, "target", json_string("CREATE")) == 0 &&
             json_object_set_new(cmp, "create_revision", json_string(i64(b, create_rev))) == 0 &&
             json_object_set_new(cmp, "result", json_string("EQUAL")) == 0;
    for (size_t i = 0; ok && i < n; i++) {
        json_t *put = put_obj(kvs[i].key, kvs[i].klen, kvs[i].val, kvs[i].vlen, 0);
        ok = put && json_array_append_new(ops, json_pack("{s:o}", "request_put", put)) == 0;
    }
    if (ok)
        j = json_pack("{s:[O],s:O}", "compare", cmp, "success", ops);
    json_decref(cmp);
    json_decref(ops);
    return j ? req_start(e, K_PUT_IF, "/v3/kv/txn", j, cb, NULL, arg, NULL) : -ENOMEM;
}

int mc__etcd_range(mc__etcd_t *e, const char *key, size_t klen, int prefix, mc__etcd_cb cb,
                   void *arg)
{
    json_t *j = key_obj(key, klen, prefix);
    return j ? req_start(e, K_RANGE, "/v3/kv/range", j, cb, NULL, arg, NULL) : -ENOMEM;
}

int mc__etcd_range_page(mc__etcd_t *e, const char *key, size_t klen, const char *end, size_t elen,
                        int64_t limit, int64_t rev, mc__etcd_cb cb, void *arg)
{
    char b[24];
    json_t *j = key_obj(key, klen, 0);
    char *e64 = mc__etcd_b64_encode(end, elen);
    if (!j || !e64 || json_object_set_new(j, "range_end", json_string(e64)) < 0 ||
        (limit && json_object_set_new(j, "limit", json_string(i64(b, limit))) < 0) ||
        (rev && json_object_set_new(j, "revision", json_string(i64(b, rev))) < 0)) {
        free(e64);
        json_decref(j);
        return -ENOMEM;
    }
    free(e64);
    return req_start(e, K_RANGE, "/v3/kv/range", j, cb, NULL, arg, NULL);
}

int mc__etcd_delete(mc__etcd_t *e, const char *key, size_t klen, int prefix, mc__etcd_cb cb,
                    void *arg)
{
    json_t *j = key_obj(key, klen, prefix);
    return j ? req_start(e, K_DELETE, "/v3/kv/deleterange", j, cb, NULL, arg, NULL) : -ENOMEM;
}

int mc__etcd_delete_range(mc__etcd_t *e, const char *key, size_t klen, const char *end, size_t elen,
                          mc__etcd_cb cb, void *arg)
{
    json_t *j = key_obj(key, klen, 0);
    char *e64 = mc__etcd_b64_encode(end, elen);
    if (!j || !e64 || json_object_set_new(j, "range_end", json_string(e64)) < 0) {
        free(e64);
        json_decref(j);
        return -ENOMEM;
    }
    free(e64);
    return req_start(e, K_DELETE, "/v3/kv/deleterange", j, cb, NULL, arg, NULL);
}

/* A lease request: {TTL} (grant) or {ID} (keepalive, revoke). */
static int lease_req(mc__etcd_t *e, enum kind kind, const char *path, const char *field, int64_t v,
                     mc__etcd_cb cb, void *arg)
{
    char b[24];
    json_t *j = json_pack("{s:s}", field, i64(b, v));
    return j ? req_start(e, kind, path, j, cb, NULL, arg, NULL) : -ENOMEM;
}

int mc__etcd_lease_grant(mc__etcd_t *e, int64_t ttl_s, mc__etcd_cb cb, void *arg)
{
    if (ttl_s <= 0)
        return -EINVAL;
    return lease_req(e, K_GRANT, "/v3/lease/grant", "TTL", ttl_s, cb, arg);
}

int mc__etcd_lease_keepalive(mc__etcd_t *e, int64_t lease, mc__etcd_cb cb, void *arg)
{
    return lease_req(e, K_KEEPALIVE, "/v3/lease/keepalive", "ID", lease, cb, arg);
}

int mc__etcd_lease_revoke(mc__etcd_t *e, int64_t lease, mc__etcd_cb cb, void *arg)
{
    return lease_req(e, K_REVOKE, "/v3/lease/revoke", "ID", lease, cb, arg);
}

int mc__etcd_watch(mc__etcd_t *e, const char *key, size_t klen, int prefix, int64_t start_rev,
                   mc__etcd_watch_cb cb, void *arg, mc__etcd_watch_t **out)
{
    char b[24];
    mc__etcd_watch_t *w = calloc(1, sizeof(*w));
    json_t *k = key_obj(key, klen, prefix);
    if (!w || !k ||
        (start_rev &&
         json_object_set_new(k, "start_revision", json_string(i64(b, start_rev))) < 0)) {
        free(w);
        json_decref(k);
        return -ENOMEM;
    }
    json_t *j = json_pack("{s:o}", "create_request", k);
    if (!j) {
        free(w);
        return -ENOMEM;
    }
    int rc = req_start(e, K_WATCH, "/v3/watch", j, NULL, cb, arg, &w->r);
    if (rc < 0) {
        free(w);
        return rc;
    }
    w->r->w = w;
    *out = w;
    return 0;
}

void mc__etcd_watch_cancel(mc__etcd_watch_t *w)
{
    if (!w)
        return;
    if (!w->r) { /* its client went first */
        free(w);
        return;
    }
    req_free(w->r); /* frees w */
}
