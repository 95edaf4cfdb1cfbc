"""Raw wire-protocol frames for tests that talk to servers by hand
(docs/PROTOCOL.md: a 24-byte little-endian header, then the body)."""

import socket
import struct

HDR = "<IHHQIHh"  # magic, version, op, id, len, flags, status
MAGIC = 0x314B434D
SESSION = 6  # the session version HELLO negotiates (MC__PROTO_SESSION)


def frame(op, body=b"", length=None, magic=MAGIC, version=1, req_id=7):
    """A request frame; length, magic and version may be forged."""
    n = len(body) if length is None else length
    return struct.pack(HDR, magic, version, op, req_id, n, 0, 0) + body


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return buf


def closed_by_peer(sock, timeout=3):
    """True once the peer closes the connection, False after timeout."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
