/*
 * addr.c - socket addresses: parsing and formatting them, and naming a
 * connected socket's peer (see addr.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "runtime/addr.h"

static int parse_port(const char *s, int *port)
{
    if (!*s)
        return -EINVAL;
    long v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        v = v * 10 + (*p - '0');
        if (v > 65535)
            return -EINVAL;
    }
    *port = (int)v;
    return 0;
}

static int parse_unix(const char *p, mc__addr_t *out)
{
    struct sockaddr_un *un = (struct sockaddr_un *)&out->ss;
    size_t n = strlen(p);

    un->sun_family = AF_UNIX;
    if (n == 0 || (p[0] == '@' && n == 1))
        return -EINVAL;
    if (p[0] == '@') { /* abstract: a NUL, then the name without a terminator */
        if (n > sizeof(un->sun_path))
            return -ENAMETOOLONG;
        un->sun_path[0] = '\0';
        memcpy(un->sun_path + 1, p + 1, n - 1);
        out->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    } else {
        if (n >= sizeof(un->sun_path))
            return -ENAMETOOLONG;
        memcpy(un->sun_path, p, n + 1);
        out->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    }
    return 0;
}

/* Resolves host (numeric only if numeric_v6) into out, port not yet set. */
static int resolve(const char *host, int numeric_v6, mc__addr_t *out)
{
    struct addrinfo hints, *res = NULL;
    struct sockaddr_in *in4 = (struct sockaddr_in *)&out->ss;

    if (!numeric_v6 && inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        out->len = sizeof(*in4);
        return 0;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_family = numeric_v6 ? AF_INET6 : AF_UNSPEC;
    hints.ai_flags = numeric_v6 ? AI_NUMERICHOST : 0;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res)
        return numeric_v6 ? -EINVAL : -ENOENT;
    if (res->ai_addrlen > sizeof(out->ss)) {
        freeaddrinfo(res);
        return -EINVAL;
    }
    memcpy(&out->ss, res->ai_addr, res->ai_addrlen);
    out->len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

int mc__addr_parse(const char *s, int default_port, mc__addr_t *out)
{
    char host[256];
    const char *port_s = NULL;
    int numeric_v6 = 0, port = default_port, rc;

    memset(out, 0, sizeof(*out));
    if (!s || !*s)
        return -EINVAL;
    if (strncmp(s, "unix:", 5) == 0)
        return parse_unix(s + 5, out);
    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        if (!end || end == s + 1 || (size_t)(end - s - 1) >= sizeof(host))
            return -EINVAL;
        memcpy(host, s + 1, (size_t)(end - s - 1));
        host[end - s - 1] = '\0';
        if (end[1] == ':')
            port_s = end + 2;
        else if (end[1] != '\0')
            return -EINVAL;
        numeric_v6 = 1;
    } else {
        const char *colon = strrchr(s, ':');
        if (colon && strchr(s, ':') != colon)
            return -EINVAL; /* a bare IPv6 address: it needs brackets */
        size_t n = colon ? (size_t)(colon - s) : strlen(s);
        if (n == 0 || n >= sizeof(host))
            return -EINVAL;
        memcpy(host, s, n);
        host[n] = '\0';
        if (colon)
            port_s = colon + 1;
    }
    if (port_s && (rc = parse_port(port_s, &port)) < 0)
        return rc;
    if (port < 0 || port > 65535)
        return -EINVAL;
    if ((rc = resolve(host, numeric_v6, out)) < 0)
        return rc;
    if (out->ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&out->ss)->sin_port = htons((uint16_t)port);
    else if (out->ss.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&out->ss)->sin6_port = htons((uint16_t)port);
    else
        return -EINVAL;
    return 0;
}

const char *mc__addr_format(const struct sockaddr *sa, socklen_t len, char *buf, size_t n)
{
    char ip[INET6_ADDRSTRLEN];
    size_t off = offsetof(struct sockaddr_un, sun_path);

    if (n == 0)
        return buf;
    buf[0] = '\0';
    if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in4->sin_addr, ip, sizeof(ip));
        snprintf(buf, n, "%s:%u", ip, ntohs(in4->sin_port));
    } else if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
        snprintf(buf, n, "[%s]:%u", ip, ntohs(in6->sin6_port));
    } else if (sa->sa_family == AF_UNIX) {
        const struct sockaddr_un *un = (const struct sockaddr_un *)sa;
        size_t plen = len > off ? len - off : 0;
        if (plen == 0)
            snprintf(buf, n, "unix:");
        else if (un->sun_path[0] == '\0')
            snprintf(buf, n, "unix:@%.*s", (int)(plen - 1), un->sun_path + 1);
        else
            snprintf(buf, n, "unix:%.*s", (int)strnlen(un->sun_path, plen), un->sun_path);
    } else {
        snprintf(buf, n, "?");
    }
    return buf;
}

int mc__addr_is_loopback(const mc__addr_t *a)
{
    if (a->ss.ss_family == AF_INET)
        return ntohl(((const struct sockaddr_in *)&a->ss)->sin_addr.s_addr) >> 24 == 127;
    if (a->ss.ss_family != AF_INET6)
        return 0;
    const struct in6_addr *ip = &((const struct sockaddr_in6 *)&a->ss)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(ip) || (IN6_IS_ADDR_V4MAPPED(ip) && ip->s6_addr[12] == 127);
}

int mc__addr_port(const mc__addr_t *a)
{
    if (a->ss.ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
    if (a->ss.ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
    return -1;
}

void mc__addr_peer_name(int fd, char *buf, size_t n)
{
    mc__addr_t a;
    struct ucred cred;
    socklen_t clen = sizeof(cred);

    a.len = sizeof(a.ss);
    if (getpeername(fd, (struct sockaddr *)&a.ss, &a.len) < 0) {
        snprintf(buf, n, "fd %d", fd);
        return;
    }
    mc__addr_format((struct sockaddr *)&a.ss, a.len, buf, n);
    if (a.ss.ss_family == AF_UNIX && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0) {
        size_t used = strlen(buf);
        snprintf(buf + used, n - used, " (pid %d)", (int)cred.pid);
    }
}
