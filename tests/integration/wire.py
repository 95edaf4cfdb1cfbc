"""Raw wire-protocol frames for tests that talk to servers by hand
(docs/PROTOCOL.md: a 24-byte little-endian header, then the body)."""

import socket
import struct

HDR = "<IHHQIHh"  # magic, version, op, id, len, flags, status
MAGIC = 0x314B434D
SESSION = 9  # the session version HELLO negotiates (MC__PROTO_SESSION)


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


OP_HELLO, OP_GET_REPLICAS = 1, 30


def s_field(b):
    return struct.pack("<I", len(b)) + b


def connect(addr, timeout=5):
    """A connection to a TCP address "host:port"."""
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.settimeout(timeout)
    return s


def call(sock, op, body=b"", req_id=1):
    """Sends a request; returns (status, body) of its response."""
    sock.sendall(frame(op, body, req_id=req_id))
    magic, _, rop, rid, n, flags, status = struct.unpack(HDR, recv_exact(sock, 24))
    assert (magic, rop, rid, flags & 1) == (MAGIC, op, req_id, 1)
    return status, recv_exact(sock, n)


def hello(sock, nonce=b"", name=b"test_limits"):
    body = struct.pack("<HHI", SESSION, SESSION, 1) + s_field(name) + s_field(nonce)
    status, _ = call(sock, OP_HELLO, body)
    assert status == 0


def get_replica(addr, key):
    """GET_REPLICAS over a raw socket: (segment id and its epoch, data
    address, first extent)."""
    s = connect(addr)
    hello(s)
    status, body = call(s, OP_GET_REPLICAS, s_field(key))
    s.close()
    assert status == 0
    p = 8 + 92  # lease, stat
    (count,) = struct.unpack_from("<I", body, p)
    assert count >= 1
    seg, epoch, alen = struct.unpack_from("<IQI", body, p + 4)
    p += 20
    data_addr = body[p:p + alen].decode()
    p += alen
    (rlen,) = struct.unpack_from("<I", body, p)
    p += 4 + rlen
    nxt, off, length = struct.unpack_from("<IQQ", body, p)
    assert nxt >= 1
    return (seg, epoch), data_addr, off, length
