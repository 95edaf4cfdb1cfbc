"""The same-host shared-memory data path: a client next to a node maps the
node's segment (a sealed memfd handed over SCM_RIGHTS on the node's abstract
Unix socket) and copies bytes with memcpy; `mooncake-cli --stats` says which
transport carried them. When shared memory is off or unavailable, TCP
carries the same bytes. Every process is real; every wait is bounded."""

import errno
import fcntl
import mmap
import os
import re
import socket
import struct

import pytest

from harness import cli

MiB = 1 << 20
HDR = "<IHHQIHh"
MAGIC = 0x314B434D
OP_SHM_MAP = 52


def stats(stderr):
    m = re.search(rb"stats: (.*)", stderr)
    assert m, stderr
    words = m.group(1).split()
    return {words[i].decode(): int(words[i + 1]) for i in range(0, len(words), 2)}


def put_get(master, data, *args, replicas=1):
    """Puts and gets data through mooncake-cli; returns the two stats."""
    r = cli(master, *args, "--stats", "--replicas", str(replicas), "put", "obj", input=data)
    assert r.returncode == 0, r.stderr
    put = stats(r.stderr)
    r = cli(master, *args, "--stats", "get", "obj")
    assert r.returncode == 0, r.stderr
    assert r.stdout == data
    return put, stats(r.stderr)


def test_colocated_client_moves_data_through_shm(cluster):
    m = cluster.master()
    cluster.node(m, "64M")
    data = os.urandom(8 * MiB)
    put, get = put_get(m.addr, data)
    for st in (put, get):
        assert st["shm_bytes"] == len(data), st
        assert st["shm_ops"] >= 2, st  # 4 MiB per copy
        assert st["tcp_bytes"] == 0 and st["tcp_ops"] == 0, st
        assert st["local_bytes"] == 0, st


def test_replicas_on_two_colocated_nodes(cluster):
    m = cluster.master()
    cluster.node(m, "32M")
    cluster.node(m, "32M")
    data = os.urandom(3 * MiB + 17)
    put, get = put_get(m.addr, data, replicas=2)
    assert put["shm_bytes"] == 2 * len(data) and put["tcp_bytes"] == 0, put
    assert get["shm_bytes"] == len(data) and get["tcp_bytes"] == 0, get


def test_no_shm_client_uses_tcp(cluster):
    m = cluster.master()
    cluster.node(m, "64M")
    data = os.urandom(8 * MiB)
    put, get = put_get(m.addr, data, "--no-shm")
    for st in (put, get):
        assert st["tcp_bytes"] == len(data) and st["shm_bytes"] == 0, st
    # A client with shared memory reads what went over TCP, and vice versa.
    r = cli(m.addr, "--stats", "get", "obj")
    assert r.stdout == data and stats(r.stderr)["shm_bytes"] == len(data)


def test_node_without_shm_socket_falls_back_to_tcp(cluster):
    # The node offers no Unix socket: the client's attempt fails (nobody
    # listens on the abstract name) and the same transfer goes over TCP.
    m = cluster.master()
    cluster.node(m, "64M", "--no-shm")
    data = os.urandom(8 * MiB)
    put, get = put_get(m.addr, data)
    for st in (put, get):
        assert st["tcp_bytes"] == len(data) and st["shm_bytes"] == 0, st


def test_master_segment_and_mount_use_shm(cluster, make_mount):
    # The master's own segment is offered too; a mount next to it uses it.
    m = cluster.master("--segment-size", "32M")
    data = os.urandom(5 * MiB + 1)
    put, get = put_get(m.addr, data)
    assert put["shm_bytes"] == len(data) and put["tcp_bytes"] == 0, put
    mnt = make_mount("--master", m.addr, "--segment-size", "0")
    with open(mnt.p("f"), "wb") as f:
        f.write(data)
    assert open(mnt.p("f"), "rb").read() == data
    assert open(mnt.p("obj"), "rb").read() == data


def test_shm_with_authentication(cluster, tmp_path):
    key = tmp_path / "secret"
    key.write_bytes(b"shm-secret\n")
    os.chmod(key, 0o600)
    m = cluster.master("--auth-secret-file", str(key))
    node = cluster.node(m, "64M", "--auth-secret-file", str(key))
    data = os.urandom(8 * MiB)
    put, get = put_get(m.addr, data, "--auth-secret-file", str(key))
    assert put["shm_bytes"] == len(data) and put["tcp_bytes"] == 0, put
    assert get["shm_bytes"] == len(data) and get["tcp_bytes"] == 0, get
    # The node's shm socket refuses a peer that skips the handshake.
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect("\0mooncake-data/" + node.addr)
    s.sendall(struct.pack(HDR, MAGIC, 1, OP_SHM_MAP, 1, 4, 0, 0) + struct.pack("<I", 1))
    hdr = struct.unpack(HDR, s.recv(24, socket.MSG_WAITALL))
    assert hdr[6] == -errno.EACCES
    assert s.recv(1) == b""  # closed
    s.close()
    assert "before authentication" in node.read_log()


def test_shm_map_hands_over_the_segment(cluster):
    m = cluster.master()
    node = cluster.node(m, "16M")
    data = os.urandom(MiB)
    assert cli(m.addr, "put", "obj", input=data).returncode == 0
    # Over TCP, SHM_MAP is refused: only the Unix socket proves co-location.
    host, port = node.addr.split(":")
    t = socket.create_connection((host, int(port)))
    t.settimeout(5)
    t.sendall(struct.pack(HDR, MAGIC, 1, OP_SHM_MAP, 1, 4, 0, 0) + struct.pack("<I", 1))
    assert struct.unpack(HDR, t.recv(24, socket.MSG_WAITALL))[6] == -errno.EOPNOTSUPP
    t.close()
    # Over the node's abstract Unix socket the memfd comes back: it is the
    # segment, holding the object's bytes, sealed against shrinking.
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect("\0mooncake-data/" + node.addr)
    seg = None
    for seg_id in range(1, 8):  # the master numbers segments from 1
        s.sendall(struct.pack(HDR, MAGIC, 1, OP_SHM_MAP, seg_id, 4, 0, 0) +
                  struct.pack("<I", seg_id))
        msg, fds, _, _ = socket.recv_fds(s, 24 + 8, 1)
        while len(msg) < 32:
            more = s.recv(32 - len(msg))
            msg += more
            if not more or struct.unpack(HDR, msg[:24])[6] < 0:
                break
        hdr = struct.unpack(HDR, msg[:24])
        if hdr[6] == 0:
            (size,) = struct.unpack("<Q", msg[24:32])
            assert size == 16 * MiB and len(fds) == 1
            seg = fds[0]
            break
        assert hdr[6] == -errno.ENOENT and not fds
    s.close()
    assert seg is not None
    with mmap.mmap(seg, 16 * MiB) as mm:
        assert mm.find(data) >= 0
    F_GET_SEALS, F_SEAL_SHRINK = 1034, 0x2
    assert fcntl.fcntl(seg, F_GET_SEALS) & F_SEAL_SHRINK
    with pytest.raises(OSError):
        os.ftruncate(seg, 0)
    os.close(seg)


def test_client_of_an_embedded_mount_maps_its_segment(make_mount):
    # An embedded mooncake-fs serves its store on a Unix socket (its
    # default --listen): a C client of that socket maps the daemon's
    # segment through the same socket and copies; no byte crosses it.
    mnt = make_mount("--segment-size", "64M")
    addr = mnt.served_addr()
    assert addr.startswith("unix:/")
    data = os.urandom(3 * MiB + 5)
    put, get = put_get(addr, data)
    for st in (put, get):
        assert st["shm_bytes"] == len(data) and st["tcp_bytes"] == 0, st
    assert open(mnt.p("obj"), "rb").read() == data
    # A client without shared memory sends the bytes over the socket; a
    # daemon without it answers SHM_MAP -EOPNOTSUPP and the client does too.
    put, get = put_get(addr, data, "--no-shm")
    for st in (put, get):
        assert st["tcp_bytes"] == len(data) and st["shm_bytes"] == 0, st
    plain = make_mount("--segment-size", "16M", "--no-shm")
    put, get = put_get(plain.served_addr(), data)
    for st in (put, get):
        assert st["tcp_bytes"] == len(data) and st["shm_bytes"] == 0, st
