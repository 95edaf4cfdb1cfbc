/*
 * auth.h - shared secrets, the challenge/response math, and the client side
 * of the session handshake (docs/PROTOCOL.md, "Session").
 *
 * Both peers of a connection prove that they know the same secret without
 * sending it: each sends a fresh 32-byte random nonce, and each answers
 * with HMAC-SHA256(secret, label || the other's nonce || its own nonce),
 * where the label ("server" or "client") keeps one side's answer from being
 * replayed as the other's. The primitives are libsodium's: HMAC-SHA256
 * (crypto_auth_hmacsha256_*), randombytes_buf() for nonces and
 * sodium_memcmp() to compare MACs in constant time.
 *
 * The server side of the handshake lives in server.c, which uses the
 * functions below. Everything but mc__session_start() may run on any
 * thread; that one runs on the conn's loop.
 */
#ifndef MC_AUTH_H
#define MC_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/net.h"

#define MC__AUTH_NONCE 32        /* bytes of a nonce */
#define MC__AUTH_MAC 32          /* bytes of an HMAC-SHA256 */
#define MC__AUTH_SECRET_MAX 4096 /* longest secret file */

/* The labels in front of the MAC'd nonces. */
#define MC__AUTH_LABEL_SERVER "server"
#define MC__AUTH_LABEL_CLIENT "client"

typedef struct mc__secret mc__secret_t;

/*
 * mc__secret_load() reads the shared secret from the file at path: its
 * whole content less one trailing newline ("\n" or "\r\n"). It refuses a
 * file that group or others may access in any way (mode & 077: -EPERM; run
 * chmod 600), one that is not a regular file (-EINVAL), an empty secret
 * (-EINVAL) and one over MC__AUTH_SECRET_MAX bytes (-EFBIG); open and read
 * errors come back as they are (-ENOENT, -EACCES). Each refusal is logged
 * as an error line that names the file and the reason. On success *out
 * holds the secret; free it with mc__secret_free().
 */
int mc__secret_load(const char *path, mc__secret_t **out);

/*
 * mc__secret_new() makes a secret of the bytes p[0..len) (copied), for tests
 * and embedders. Returns 0, -EINVAL for an empty one, -EFBIG, -ENOMEM.
 */
int mc__secret_new(const void *p, size_t len, mc__secret_t **out);

/* mc__secret_free() wipes and frees s; NULL is fine. */
void mc__secret_free(mc__secret_t *s);

/* mc__auth_nonce() fills out with MC__AUTH_NONCE random bytes. */
void mc__auth_nonce(unsigned char out[MC__AUTH_NONCE]);

/*
 * mc__auth_mac() computes HMAC-SHA256(key = the secret, message = label ||
 * first || second), the nonces MC__AUTH_NONCE bytes each, into out.
 */
void mc__auth_mac(const mc__secret_t *s, const char *label, const unsigned char *first,
                  const unsigned char *second, unsigned char out[MC__AUTH_MAC]);

/*
 * mc__auth_check() compares mac[0..len) with mc__auth_mac() of the same
 * inputs, in constant time. Returns 0 when they match, else -EACCES (also
 * for a len other than MC__AUTH_MAC).
 */
int mc__auth_check(const mc__secret_t *s, const char *label, const unsigned char *first,
                   const unsigned char *second, const void *mac, size_t len);

/* What the client side of a handshake needs. Copied by mc__session_start(),
 * except the secret, which must outlive the handshake. */
typedef struct mc__session_opts {
    const mc__secret_t *secret; /* NULL: none configured */
    uint32_t role;              /* MC__ROLE_CLIENT or MC__ROLE_NODE */
    const char *name;           /* for the server's logs; NULL: "mooncake/PID" */
    uint64_t timeout_ms;        /* per call; must be > 0 */
    int seen;                   /* why the last handshake failed (-errno; 0: none): this one
                                   failing for that reason logs it at debug level, not as a
                                   warning (mc__rpc_client_handshake_failed()) */
} mc__session_opts_t;

/* The handshake's end: rc 0, or why it failed (see mc__session_start()). */
typedef void (*mc__session_cb)(void *arg, mc__conn_t *c, int rc);

/*
 * mc__session_start() runs the client side of the handshake on the
 * connected conn c with early calls (mc__rpc_call_early()): HELLO with a
 * fresh client nonce, a check of the server's proof, then AUTH with the
 * client's. cb(arg, c, rc) runs once, from the loop: rc 0 when the session
 * may carry other calls, -EACCES when either side lacks or refuses the
 * secret, -EPROTO for a malformed HELLO answer, -EPROTONOSUPPORT when the
 * peer speaks another session version, or the failure of a call
 * (-ETIMEDOUT, the conn's close reason). Each but the last is logged with
 * its reason and the peer's name: as a warning, or at debug level when it
 * is o->seen. Returns 0, or -errno (-ENOMEM,
 * errors of mc__rpc_call_early()); cb is then never called.
 */
int mc__session_start(mc__conn_t *c, const mc__session_opts_t *o, mc__session_cb cb, void *arg);

#endif /* MC_AUTH_H */
