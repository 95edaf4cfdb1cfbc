/*
 * etcd_i.h - what etcd.c shares with etcd_json.c, the JSON of etcd's
 * gateway: proto3 JSON, bytes fields in base64, 64-bit integers as strings,
 * fields at their default value left out. Private to runtime/etcd*.c.
 */
#ifndef MC_RUNTIME_ETCD_I_H
#define MC_RUNTIME_ETCD_I_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/etcd.h"

/* p[0..n) in base64, NUL-terminated; the caller frees it. NULL: no memory. */
char *mc__etcd_b64_encode(const char *p, size_t n);

/* The end of the range of keys starting with key[0..klen): the key with its
 * last byte below 0xff raised by one (trailing 0xff bytes dropped); "\0"
 * (every key) if none is. Sets *n to its length; the caller frees it (NULL:
 * no memory). */
char *mc__etcd_prefix_end(const char *key, size_t klen, size_t *n);

/* An int64 field of o (a string, or left out: 0). */
int64_t mc__etcd_jint(json_t *o, const char *name);

/* A key-value of the gateway into kv, whose key and value point into o's
 * strings (decoded in place). 0 or -EPROTO. */
int mc__etcd_parse_kv(json_t *o, mc__etcd_kv_t *kv);

/* res->kvs from the array kvs: *out, which the caller frees. 0, -ENOMEM,
 * -EPROTO. */
int mc__etcd_parse_kvs(json_t *kvs, mc__etcd_res_t *res, mc__etcd_kv_t **out);

/* An error answer's gRPC code as an errno. */
int mc__etcd_grpc_errno(json_t *j);

#endif /* MC_RUNTIME_ETCD_I_H */
