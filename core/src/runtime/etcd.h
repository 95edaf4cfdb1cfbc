/*
 * etcd.h - a client of etcd's v3 API (etcd 3.4, Debian's etcd-server),
 * through etcd's JSON gateway: HTTP POSTs of JSON to /v3/kv/..., /v3/lease/...
 * and /v3/watch, made with libcurl's multi interface on the loop (no thread;
 * nothing blocks; every request is bounded by the timeout) and read with
 * libjansson. It is the only module that knows etcd: the rest of the code
 * sees this interface.
 *
 * Endpoints are tried in turn: a request that cannot reach one (refused)
 * goes to the next, once each, before it fails; one that reached it and got
 * no answer (reset, timed out) goes there too if it only reads (a range),
 * and fails otherwise (it may have been applied); either way the requests
 * after it go to the next endpoint first. Keys and values are bytes. Loop
 * thread only.
 */
#ifndef MC_RUNTIME_ETCD_H
#define MC_RUNTIME_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/loop.h"

typedef struct mc__etcd mc__etcd_t;
typedef struct mc__etcd_watch mc__etcd_watch_t;

/* A key-value pair as etcd keeps it. */
typedef struct mc__etcd_kv {
    const char *key;
    size_t klen;
    const char *val;
    size_t vlen;
    int64_t create_rev; /* the revision that created the key */
    int64_t mod_rev;    /* the revision of its last change */
    int64_t version;    /* changes since it was created */
    int64_t lease;      /* 0: none */
} mc__etcd_kv_t;

/* What a request answered. Valid during the callback only. */
typedef struct mc__etcd_res {
    int64_t revision;         /* the store's revision when it answered */
    int succeeded;            /* put_if: whether the condition held */
    int64_t lease, ttl;       /* lease_grant, lease_keepalive: the lease and its TTL (s) */
    const mc__etcd_kv_t *kvs; /* range (and put_if when it did not hold): the keys */
    size_t nkvs;
    int64_t deleted; /* delete: how many keys went */
    int more;        /* range_page: keys past the limit are left */
} mc__etcd_res_t;

/* A request's end: rc 0 and res, or -errno (-ETIMEDOUT, -ECONNREFUSED, ...,
 * -EPROTO for an answer that is not etcd's, -ENOENT for an unknown lease)
 * and res NULL. */
typedef void (*mc__etcd_cb)(void *arg, int rc, const mc__etcd_res_t *res);

/* One change a watch saw: put (deleted 0) or delete of kv->key. */
typedef struct mc__etcd_event {
    int deleted;
    mc__etcd_kv_t kv;
} mc__etcd_event_t;

/* A watch's news: rc 0 and n events (n may be 0: progress); or rc < 0, and
 * the watch has ended (the stream broke, or etcd compacted past its
 * revision: -ERANGE); it must still be freed with mc__etcd_watch_cancel(). */
typedef void (*mc__etcd_watch_cb)(void *arg, int rc, const mc__etcd_event_t *ev, size_t n,
                                  int64_t revision);

/* Opens a client of the etcd at endpoints ("http://h:p" or "h:p", several
 * separated by ',' or ';'; the list may start with "etcd://", as Mooncake's
 * master addresses do). timeout_ms bounds each request (1 to 3600000).
 * 0 or -errno (-EINVAL for a bad list, -ELIBACC when libcurl.so.4, loaded
 * at the first call, is missing). */
int mc__etcd_new(mc_loop_t *loop, const char *endpoints, unsigned timeout_ms, mc__etcd_t **out);

/* Frees the client: requests in flight end with -ECANCELED first, and so do
 * watches (their owners still free them with mc__etcd_watch_cancel()). */
void mc__etcd_free(mc__etcd_t *e);

/* Puts key = val (attached to lease unless it is 0). */
int mc__etcd_put(mc__etcd_t *e, const char *key, size_t klen, const char *val, size_t vlen,
                 int64_t lease, mc__etcd_cb cb, void *arg);

/* Puts key = val only if the key's last change was revision mod_rev (0:
 * only if the key does not exist): one transaction. res->succeeded says
 * whether it held; when it did not, res->kvs is the key as it is. */
int mc__etcd_put_if(mc__etcd_t *e, const char *key, size_t klen, const char *val, size_t vlen,
                    int64_t lease, int64_t mod_rev, mc__etcd_cb cb, void *arg);

/* One key of mc__etcd_put_fenced(). */
typedef struct mc__etcd_put_kv {
    const char *key;
    size_t klen;
    const char *val;
    size_t vlen;
} mc__etcd_put_kv_t;

/* Puts kvs[0..n) (no lease) only if the key fence still holds the value its
 * creation at revision create_rev gave it (it was not deleted, nor deleted
 * and made again): one transaction, all or nothing. res->succeeded says
 * whether the fence held. A leader's writes, fenced by its leader key. */
int mc__etcd_put_fenced(mc__etcd_t *e, const char *fence, size_t flen, int64_t create_rev,
                        const mc__etcd_put_kv_t *kvs, size_t n, mc__etcd_cb cb, void *arg);

/* The key (prefix 0) or every key starting with it (prefix 1), in key order. */
int mc__etcd_range(mc__etcd_t *e, const char *key, size_t klen, int prefix, mc__etcd_cb cb,
                   void *arg);

/* Deletes the key, or every key starting with it. */
int mc__etcd_delete(mc__etcd_t *e, const char *key, size_t klen, int prefix, mc__etcd_cb cb,
                    void *arg);

/* At most limit keys (0: no limit) from key (included) to end (excluded), in
 * key order, as the store was at revision rev (0: now); res->more says
 * whether keys are left past the limit. */
int mc__etcd_range_page(mc__etcd_t *e, const char *key, size_t klen, const char *end, size_t elen,
                        int64_t limit, int64_t rev, mc__etcd_cb cb, void *arg);

/* Every key starting with prefix, as mc__etcd_range() with prefix 1 gives
 * them, but read in pages at one revision, so that no answer of etcd has to
 * hold them all (etcd_pages.c). res->revision is the revision read. */
int mc__etcd_range_all(mc__etcd_t *e, const char *prefix, size_t plen, mc__etcd_cb cb, void *arg);

/* Deletes every key from key (included) to end (excluded), in byte order. */
int mc__etcd_delete_range(mc__etcd_t *e, const char *key, size_t klen, const char *end, size_t elen,
                          mc__etcd_cb cb, void *arg);

/* A lease of ttl_s seconds (res->lease, res->ttl). */
int mc__etcd_lease_grant(mc__etcd_t *e, int64_t ttl_s, mc__etcd_cb cb, void *arg);

/* Renews the lease for its TTL (res->ttl); -ENOENT once it has expired. */
int mc__etcd_lease_keepalive(mc__etcd_t *e, int64_t lease, mc__etcd_cb cb, void *arg);

/* Ends the lease now, and deletes the keys attached to it. */
int mc__etcd_lease_revoke(mc__etcd_t *e, int64_t lease, mc__etcd_cb cb, void *arg);

/* Watches the key (or prefix) from revision start_rev (0: from now on):
 * cb gets every change, in revision order, as etcd streams it. *out is the
 * watch, for mc__etcd_watch_cancel(). A watch is not bounded by the
 * timeout; a broken stream ends it (cb with rc < 0). */
int mc__etcd_watch(mc__etcd_t *e, const char *key, size_t klen, int prefix, int64_t start_rev,
                   mc__etcd_watch_cb cb, void *arg, mc__etcd_watch_t **out);

/* Stops and frees the watch: cb is not called again. */
void mc__etcd_watch_cancel(mc__etcd_watch_t *w);

#endif /* MC_RUNTIME_ETCD_H */
