/*
 * auth.c - shared secrets, the challenge/response math and the client side
 * of the session handshake (see auth.h).
 *
 * The cryptography is libsodium's, not ours: HMAC-SHA256 through the
 * init/update/final interface (which takes a key of any length, as RFC 2104
 * HMAC does, so another implementation gets the same MAC from the same
 * secret file), randombytes_buf() for nonces (getrandom() underneath), and
 * sodium_memcmp() so that comparing a MAC takes the same time wherever it
 * differs. Secrets are wiped with sodium_memzero() when freed.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/auth.h"
#include "runtime/log.h"
#include "wire/proto.h"
#include "runtime/rpc.h"

struct mc__secret {
    size_t len;
    unsigned char key[];
};

/* ---- libsodium ---- */

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static int sodium_rc;

static void sodium_start(void)
{
    sodium_rc = sodium_init(); /* 0, or 1 when already initialized */
}

/* libsodium wants sodium_init() before any other call; it picks the RNG and
 * the CPU-specific code paths. Aborts if it fails, which it does only when
 * the system has no usable randomness. */
static void need_sodium(void)
{
    pthread_once(&sodium_once, sodium_start);
    if (sodium_rc < 0) {
        mc__log(MC__LOG_ERROR, "libsodium cannot start (no random source?)");
        abort();
    }
}

/* ---- secrets ---- */

int mc__secret_new(const void *p, size_t len, mc__secret_t **out)
{
    if (len == 0)
        return -EINVAL;
    if (len > MC__AUTH_SECRET_MAX)
        return -EFBIG;
    need_sodium();
    mc__secret_t *s = malloc(sizeof(*s) + len);
    if (!s)
        return -ENOMEM;
    s->len = len;
    memcpy(s->key, p, len);
    *out = s;
    return 0;
}

void mc__secret_free(mc__secret_t *s)
{
    if (!s)
        return;
    sodium_memzero(s->key, s->len);
    free(s);
}

int mc__secret_load(const char *path, mc__secret_t **out)
{
    unsigned char buf[MC__AUTH_SECRET_MAX + 3];
    struct stat st;
    size_t n = 0;
    int rc = 0;

    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        rc = -errno;
        mc__log(MC__LOG_ERROR, "secret file %s: %s", path, strerror(-rc));
        return rc;
    }
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        mc__log(MC__LOG_ERROR, "secret file %s: %s", path, strerror(-rc));
    } else if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        mc__log(MC__LOG_ERROR, "secret file %s: not a regular file", path);
    } else if (st.st_mode & 077) {
        rc = -EPERM;
        mc__log(MC__LOG_ERROR,
                "secret file %s: group or others may access it (mode %03o); "
                "chmod 600 it",
                path, (unsigned)(st.st_mode & 0777));
    }
    while (rc == 0 && n < sizeof(buf)) {
        ssize_t got = read(fd, buf + n, sizeof(buf) - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            rc = -errno;
            mc__log(MC__LOG_ERROR, "secret file %s: %s", path, strerror(-rc));
        }
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    if (rc == 0) {
        if (n && buf[n - 1] == '\n')
            n--;
        if (n && buf[n - 1] == '\r')
            n--;
        rc = mc__secret_new(buf, n, out);
        if (rc == -EINVAL)
            mc__log(MC__LOG_ERROR, "secret file %s: the secret is empty", path);
        else if (rc == -EFBIG)
            mc__log(MC__LOG_ERROR, "secret file %s: longer than %d bytes", path,
                    MC__AUTH_SECRET_MAX);
    }
    sodium_memzero(buf, sizeof(buf));
    return rc;
}

/* ---- the math ---- */

void mc__auth_nonce(unsigned char out[MC__AUTH_NONCE])
{
    need_sodium();
    randombytes_buf(out, MC__AUTH_NONCE);
}

void mc__auth_mac(const mc__secret_t *s, const char *label, const unsigned char *first,
                  const unsigned char *second, unsigned char out[MC__AUTH_MAC])
{
    crypto_auth_hmacsha256_state st;

    need_sodium();
    crypto_auth_hmacsha256_init(&st, s->key, s->len);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label));
    crypto_auth_hmacsha256_update(&st, first, MC__AUTH_NONCE);
    crypto_auth_hmacsha256_update(&st, second, MC__AUTH_NONCE);
    crypto_auth_hmacsha256_final(&st, out);
    sodium_memzero(&st, sizeof(st));
}

int mc__auth_check(const mc__secret_t *s, const char *label, const unsigned char *first,
                   const unsigned char *second, const void *mac, size_t len)
{
    unsigned char want[MC__AUTH_MAC];

    if (len != MC__AUTH_MAC)
        return -EACCES;
    mc__auth_mac(s, label, first, second, want);
    int same = sodium_memcmp(want, mac, MC__AUTH_MAC) == 0;
    sodium_memzero(want, sizeof(want));
    return same ? 0 : -EACCES;
}

/* ---- the client side of the handshake ---- */

typedef struct session {
    mc__conn_t *c;
    const mc__secret_t *secret;
    uint64_t timeout_ms;
    unsigned char cnonce[MC__AUTH_NONCE];
    mc__session_cb cb;
    void *arg;
    int seen; /* o->seen: a failure for this reason is logged at debug level */
    char peer[MC__ADDR_STRLEN];
} session_t;

/* The level of the message saying why ss fails with rc: a warning, unless
 * the last handshake failed for the same reason. */
static int why_level(const session_t *ss, int rc)
{
    return rc == ss->seen ? MC__LOG_DEBUG : MC__LOG_WARN;
}

static void session_end(session_t *ss, int rc)
{
    mc__session_cb cb = ss->cb;
    void *arg = ss->arg;
    mc__conn_t *c = ss->c;
    sodium_memzero(ss, sizeof(*ss));
    free(ss);
    cb(arg, c, rc);
}

static void auth_done(void *arg, int status, const char *body, size_t len)
{
    session_t *ss = arg;
    if (status == -EACCES)
        mc__log(why_level(ss, -EACCES), "%s refused our secret (a different --auth-secret-file?)",
                ss->peer);
    session_end(ss, status < 0 ? status : 0);
}

/* The peer speaks no session version of ours (an upgrade or a rollback
 * across one; theirs: the version it answered, -1 when it refused ours):
 * nothing more goes to it, and whoever runs this process is told why. */
static void other_version(session_t *ss, int theirs)
{
    char why[32] = "it refused it";
    if (theirs >= 0)
        snprintf(why, sizeof(why), "it answered %d", theirs);
    mc__log(why_level(ss, -EPROTONOSUPPORT),
            "%s does not speak our protocol version, %u (%s): upgrade it and this process "
            "together",
            ss->peer, (unsigned)MC__PROTO_SESSION, why);
    session_end(ss, -EPROTONOSUPPORT);
}

static void hello_done(void *arg, int status, const char *body, size_t len)
{
    session_t *ss = arg;
    uint16_t ver;
    uint32_t auth, nlen, plen;
    const char *snonce, *proof;

    if (status == -EACCES)
        mc__log(why_level(ss, -EACCES), "%s refused the session: permission denied", ss->peer);
    if (status == -EPROTONOSUPPORT)
        return other_version(ss, -1);
    if (status < 0)
        return session_end(ss, status);
    if (mc__unpack(body, len, "huss", &ver, &auth, &snonce, &nlen, &proof, &plen) < 0 || auth > 1) {
        mc__log(why_level(ss, -EPROTO), "%s: malformed HELLO answer", ss->peer);
        return session_end(ss, -EPROTO);
    }
    if (ver != MC__PROTO_SESSION)
        return other_version(ss, (int)ver);
    if (!auth && !ss->secret)
        return session_end(ss, 0);
    if (!auth) {
        mc__log(why_level(ss, -EACCES),
                "%s does not authenticate: refusing a server that cannot prove it "
                "knows the secret",
                ss->peer);
        return session_end(ss, -EACCES);
    }
    if (!ss->secret) {
        mc__log(why_level(ss, -EACCES),
                "%s requires authentication and no secret is configured "
                "(--auth-secret-file)",
                ss->peer);
        return session_end(ss, -EACCES);
    }
    if (nlen != MC__AUTH_NONCE || mc__auth_check(ss->secret, MC__AUTH_LABEL_SERVER, ss->cnonce,
                                                 (const unsigned char *)snonce, proof, plen) < 0) {
        mc__log(why_level(ss, -EACCES), "%s failed to prove it knows the secret: refusing it",
                ss->peer);
        return session_end(ss, -EACCES);
    }
    unsigned char mac[MC__AUTH_MAC];
    char req[4 + MC__AUTH_MAC];
    mc__wbuf_t w = {.p = req, .cap = sizeof(req)};
    mc__auth_mac(ss->secret, MC__AUTH_LABEL_CLIENT, (const unsigned char *)snonce, ss->cnonce, mac);
    mc__pack(&w, "s", mac, (uint32_t)sizeof(mac));
    int rc =
        w.err ? w.err
              : mc__rpc_call_early(ss->c, MC__OP_AUTH, w.p, w.len, ss->timeout_ms, auth_done, ss);
    sodium_memzero(mac, sizeof(mac));
    sodium_memzero(req, sizeof(req));
    if (rc < 0)
        session_end(ss, rc);
}

int mc__session_start(mc__conn_t *c, const mc__session_opts_t *o, mc__session_cb cb, void *arg)
{
    char name[64];
    mc__wbuf_t w = {0};

    session_t *ss = calloc(1, sizeof(*ss));
    if (!ss)
        return -ENOMEM;
    ss->c = c;
    ss->secret = o->secret;
    ss->timeout_ms = o->timeout_ms;
    ss->cb = cb;
    ss->arg = arg;
    ss->seen = o->seen;
    snprintf(ss->peer, sizeof(ss->peer), "%s", mc__conn_peer(c));
    mc__auth_nonce(ss->cnonce);
    if (!o->name)
        snprintf(name, sizeof(name), "mooncake/%d", (int)getpid());
    const char *nm = o->name ? o->name : name;
    int rc = mc__pack(&w, "hhuss", (unsigned)MC__PROTO_SESSION, (unsigned)MC__PROTO_SESSION,
                      (unsigned)o->role, nm, (uint32_t)strlen(nm), ss->cnonce,
                      (uint32_t)sizeof(ss->cnonce));
    if (rc == 0)
        rc = mc__rpc_call_early(c, MC__OP_HELLO, w.p, w.len, o->timeout_ms, hello_done, ss);
    free(w.p);
    if (rc < 0)
        free(ss);
    return rc;
}
