/*
 * etcd_json.c - the JSON of etcd's gateway (see etcd_i.h): base64 bytes
 * fields, int64 strings, key-values and error codes; and a prefix's range end.
 */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/etcd_i.h"

/* ---- base64 (the gateway's bytes fields) ---- */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *mc__etcd_b64_encode(const char *p, size_t n)
{
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out)
        return NULL;
    const unsigned char *s = (const unsigned char *)p;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0) |
                     (i + 2 < n ? s[i + 2] : 0);
        *o++ = B64[v >> 18 & 63];
        *o++ = B64[v >> 12 & 63];
        *o++ = i + 1 < n ? B64[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? B64[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

static int b64_val(char c)
{
    const char *q = c ? strchr(B64, c) : NULL;
    return q ? (int)(q - B64) : -1;
}

/* Decodes s in place; returns the length or -1. */
static long b64_decode(char *s)
{
    size_t n = strlen(s), o = 0;
    if (n % 4)
        return -1;
    for (size_t i = 0; i < n; i += 4) {
        int a = b64_val(s[i]), b = b64_val(s[i + 1]);
        int c = s[i + 2] == '=' ? 0 : b64_val(s[i + 2]),
            d = s[i + 3] == '=' ? 0 : b64_val(s[i + 3]);
        if (a < 0 || b < 0 || c < 0 || d < 0 || (s[i + 2] == '=' && s[i + 3] != '='))
            return -1;
        unsigned v = (unsigned)a << 18 | (unsigned)b << 12 | (unsigned)c << 6 | (unsigned)d;
        s[o++] = (char)(v >> 16);
        if (s[i + 2] != '=')
            s[o++] = (char)(v >> 8);
        if (s[i + 3] != '=')
            s[o++] = (char)v;
    }
    return (long)o;
}

char *mc__etcd_prefix_end(const char *key, size_t klen, size_t *n)
{
    char *end = malloc(klen ? klen : 1);
    if (!end)
        return NULL;
    memcpy(end, key, klen);
    *n = klen;
    while (*n && (unsigned char)end[*n - 1] == 0xff)
        --*n;
    if (*n)
        end[*n - 1]++;
    else
        end[(*n)++] = '\0';
    return end;
}

/* ---- JSON of the gateway ---- */

/* An int64 field (a string, or left out: 0). */
int64_t mc__etcd_jint(json_t *o, const char *name)
{
    json_t *v = json_object_get(o, name);
    if (json_is_string(v))
        return strtoll(json_string_value(v), NULL, 10);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : 0;
}

/* The base64 field name of o, decoded in place into its JSON string (which
 * o keeps); "" when left out. -1 for bad base64. */
static int jbytes(json_t *o, const char *name, const char **p, size_t *n)
{
    json_t *v = json_object_get(o, name);
    if (!json_is_string(v)) {
        *p = "";
        *n = 0;
        return 0;
    }
    char *s = (char *)json_string_value(v); /* decoded in place: shorter */
    long len = b64_decode(s);
    if (len < 0)
        return -1;
    *p = s;
    *n = (size_t)len;
    return 0;
}

int mc__etcd_parse_kv(json_t *o, mc__etcd_kv_t *kv)
{
    if (!json_is_object(o) || jbytes(o, "key", &kv->key, &kv->klen) < 0 ||
        jbytes(o, "value", &kv->val, &kv->vlen) < 0)
        return -EPROTO;
    kv->create_rev = mc__etcd_jint(o, "create_revision");
    kv->mod_rev = mc__etcd_jint(o, "mod_revision");
    kv->version = mc__etcd_jint(o, "version");
    kv->lease = mc__etcd_jint(o, "lease");
    return 0;
}

/* res->kvs from the array kvs (freed by the caller). */
int mc__etcd_parse_kvs(json_t *kvs, mc__etcd_res_t *res, mc__etcd_kv_t **out)
{
    size_t n = json_is_array(kvs) ? json_array_size(kvs) : 0;
    *out = n ? calloc(n, sizeof(**out)) : NULL;
    if (n && !*out)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (mc__etcd_parse_kv(json_array_get(kvs, i), &(*out)[i]) < 0)
            return -EPROTO;
    res->kvs = *out;
    res->nkvs = n;
    return 0;
}

/* An error answer's gRPC code as an errno. */
int mc__etcd_grpc_errno(json_t *j)
{
    switch (mc__etcd_jint(j, "code")) {
    case 4: /* DeadlineExceeded */
        return -ETIMEDOUT;
    case 5: /* NotFound: a lease */
        return -ENOENT;
    case 11: /* OutOfRange: compacted */
        return -ERANGE;
    case 14: /* Unavailable: no leader */
        return -EAGAIN;
    default:
        return -EPROTO;
    }
}
