/*
 * addr.h - socket addresses: "host:port", "[v6]:port", "unix:/path" and
 * "unix:@name" strings to sockaddrs and back. Pure but for name resolution
 * (mc__addr_parse()) and asking a socket for its peer (mc__addr_peer_name()).
 */
#ifndef MC_ADDR_H
#define MC_ADDR_H

#include <stddef.h>
#include <sys/socket.h>

/* Room for any address string this layer produces, with its NUL. */
#define MC__ADDR_STRLEN 160

/* A parsed socket address. */
typedef struct mc__addr {
    struct sockaddr_storage ss;
    socklen_t len;
} mc__addr_t;

/*
 * mc__addr_parse() parses "host:port", "[v6]:port", "unix:/path" or
 * "unix:@name" (Linux abstract namespace) into *out. A host that is not a
 * numeric IPv4/IPv6 address is resolved with getaddrinfo() (the first
 * result), which may block: parse at startup, not on a busy loop. When the
 * string has no ":port" the port is default_port, or the string is rejected
 * if default_port is negative. Returns 0, -EINVAL for a malformed string or
 * port, -ENAMETOOLONG for a Unix path that does not fit, -ENOENT for a host
 * name that does not resolve.
 */
int mc__addr_parse(const char *s, int default_port, mc__addr_t *out);

/*
 * mc__addr_format() writes sa as a string mc__addr_parse() accepts
 * ("127.0.0.1:5555", "[::1]:5555", "unix:/run/mc.sock", "unix:@name";
 * "unix:" for an unnamed socket) into buf[0..n). Returns buf.
 */
const char *mc__addr_format(const struct sockaddr *sa, socklen_t len, char *buf, size_t n);

/* mc__addr_port() returns the port of a TCP address, or -1 for Unix. */
int mc__addr_port(const mc__addr_t *a);

/*
 * mc__addr_is_loopback() returns 1 for an IP address only this host can
 * reach (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104), 0 for any other, the
 * unspecified address (every interface) and Unix addresses included.
 */
int mc__addr_is_loopback(const mc__addr_t *a);

/*
 * mc__addr_peer_name() names a connected socket's peer for logs: its
 * address as mc__addr_format() writes it and, for a Unix peer, " (pid N)"
 * (SO_PEERCRED); "fd N" when the socket has no peer address. Writes
 * buf[0..n).
 */
void mc__addr_peer_name(int fd, char *buf, size_t n);

#endif /* MC_ADDR_H */
