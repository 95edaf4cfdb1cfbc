/*
 * etcd_pages.c - every key of a prefix read in pages at one revision
 * (mc__etcd_range_all(), etcd.h): no answer of etcd has to hold them all,
 * only what the caller gets at the end.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/etcd.h"
#include "runtime/etcd_i.h"

#define PAGE_KEYS 256

typedef struct pager {
    mc__etcd_t *e;
    char *end; /* the prefix's end */
    size_t elen;
    int64_t rev;        /* the revision read (the first page's) */
    mc__etcd_kv_t *kvs; /* copies: key and value in one allocation at key */
    size_t n, cap;
    mc__etcd_cb cb;
    void *arg;
} pager_t;

static void pager_free(pager_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        free((char *)p->kvs[i].key);
    free(p->kvs);
    free(p->end);
    free(p);
}

/* Copies the page's keys. Returns 0 or -ENOMEM. */
static int keep(pager_t *p, const mc__etcd_res_t *res)
{
    if (p->n + res->nkvs > p->cap) {
        size_t cap = p->cap ? p->cap : 64;
        while (cap < p->n + res->nkvs)
            cap *= 2;
        mc__etcd_kv_t *k = realloc(p->kvs, sizeof(*k) * cap);
        if (!k)
            return -ENOMEM;
        p->kvs = k;
        p->cap = cap;
    }
    for (size_t i = 0; i < res->nkvs; i++) {
        const mc__etcd_kv_t *kv = &res->kvs[i];
        char *c = malloc(kv->klen + kv->vlen + 2);
        if (!c)
            return -ENOMEM;
        memcpy(c, kv->key, kv->klen);
        c[kv->klen] = '\0';
        memcpy(c + kv->klen + 1, kv->val, kv->vlen);
        c[kv->klen + 1 + kv->vlen] = '\0';
        p->kvs[p->n] = *kv;
        p->kvs[p->n].key = c;
        p->kvs[p->n++].val = c + kv->klen + 1;
    }
    return 0;
}

static void on_page(void *arg, int rc, const mc__etcd_res_t *res)
{
    pager_t *p = arg;
    if (rc == 0 && !p->rev)
        p->rev = res->revision;
    if (rc == 0)
        rc = keep(p, res);
    if (rc == 0 && res->more && res->nkvs) {
        /* The next page starts just past the last key. */
        const mc__etcd_kv_t *last = &p->kvs[p->n - 1];
        char *next = malloc(last->klen + 1);
        rc = next ? 0 : -ENOMEM;
        if (next) {
            memcpy(next, last->key, last->klen);
            next[last->klen] = '\0';
            rc = mc__etcd_range_page(p->e, next, last->klen + 1, p->end, p->elen, PAGE_KEYS, p->rev,
                                     on_page, p);
            free(next);
        }
        if (rc == 0)
            return;
    }
    if (rc == 0) {
        mc__etcd_res_t all = {.revision = p->rev, .kvs = p->kvs, .nkvs = p->n};
        p->cb(p->arg, 0, &all);
    } else {
        p->cb(p->arg, rc, NULL);
    }
    pager_free(p);
}

int mc__etcd_range_all(mc__etcd_t *e, const char *prefix, size_t plen, mc__etcd_cb cb, void *arg)
{
    pager_t *p = calloc(1, sizeof(*p));
    if (!p || !(p->end = mc__etcd_prefix_end(prefix, plen, &p->elen))) {
        free(p);
        return -ENOMEM;
    }
    p->e = e;
    p->cb = cb;
    p->arg = arg;
    int rc = mc__etcd_range_page(e, prefix, plen, p->end, p->elen, PAGE_KEYS, 0, on_page, p);
    if (rc < 0) {
        free(p->end);
        free(p);
    }
    return rc;
}
