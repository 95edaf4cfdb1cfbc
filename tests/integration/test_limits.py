"""Limits on what a peer can make a server hold (docs/PROTOCOL.md, "Limits"):
no big frame is buffered before the session handshake, idle connections are
closed (and a real client reconnects transparently), a crowd of idle
connections under a low descriptor limit does not lock clients out, and a
node refuses a READ/WRITE payload over the 4 MiB chunk size instead of
writing past the extent it was given. Every process is real; every wait is
bounded."""

import errno
import os
import re
import socket
import struct
import time
import urllib.error
import urllib.request

import pytest

from harness import cli, free_port
from wire import (SESSION, OP_HELLO, call, closed_by_peer, connect, frame, get_replica, hello,
                  s_field)

MiB = 1 << 20
OP_PING, OP_PUT_START, OP_READ, OP_WRITE = 3, 20, 50, 51
CHUNK = 4 * MiB  # MC__PROTO_CHUNK: the largest READ/WRITE payload


def wait_for(cond, timeout, what):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.05)


def send_some(sock, data):
    """Sends what the peer takes of data; a peer that hangs up is fine."""
    try:
        sock.sendall(data)
    except OSError:
        pass


@pytest.mark.parametrize("target", ["master", "node"])
def test_big_frame_before_handshake_is_not_buffered(cluster, target):
    """24 connections announce a 16 MiB body and send 4 MiB of it without a
    HELLO: each is cut off at the header, and the server's memory stays put
    (regression: the bodies were buffered, 24 of them took ~400 MB)."""
    m = cluster.master("--segment-size", "16M")
    node = cluster.node(m)
    proc, addr = (m, m.addr) if target == "master" else (node, node.addr)
    before = proc.rss()
    body = os.urandom(4 * MiB)
    socks = []
    for _ in range(24):
        s = connect(addr)
        send_some(s, frame(OP_PUT_START, length=16 * MiB) + body)
        socks.append(s)
    deadline = time.time() + 5
    for i, s in enumerate(socks):
        assert closed_by_peer(s, max(0.1, deadline - time.time())), f"connection {i} not closed"
        s.close()
    grown = proc.rss() - before
    assert grown < 24 * MiB, f"RSS grew by {grown >> 20} MiB"
    assert "oversized frame" in proc.read_log()
    # Served as before: the limit is lifted by the handshake.
    data = os.urandom(6 * MiB)
    assert cli(m.addr, "put", "big", input=data).returncode == 0
    assert cli(m.addr, "get", "big").stdout == data


def test_big_frame_between_hello_and_auth_is_not_buffered(cluster, tmp_path):
    """With a secret, HELLO alone does not lift the limit: AUTH does."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"s3cret")
    os.chmod(secret, 0o600)
    m = cluster.master("--segment-size", "16M", "--auth-secret-file", str(secret))
    s = connect(m.addr)
    body = struct.pack("<HHI", SESSION, SESSION, 1) + s_field(b"test_limits") + s_field(os.urandom(32))
    status, _ = call(s, OP_HELLO, body)
    assert status == 0
    send_some(s, frame(OP_PUT_START, length=16 * MiB) + os.urandom(2 * MiB))
    assert closed_by_peer(s, 5)
    s.close()
    assert "oversized frame" in m.read_log()


def test_idle_connections_are_closed_and_clients_reconnect(cluster, make_mount):
    """A connection that sends nothing is closed: soon before its handshake,
    after the idle timeout once through it. A node's heartbeats keep its
    connection, and a mount whose connection was closed while idle carries
    on: its client reconnects transparently on the next call."""
    m = cluster.master("--segment-size", "32M", "--idle-timeout-ms", "1500",
                       "--handshake-timeout-ms", "500")
    node = cluster.node(m)
    # No HELLO: closed after the handshake timeout.
    t0 = time.time()
    s = connect(m.addr)
    assert closed_by_peer(s, 5), "a connection without HELLO was not closed"
    assert time.time() - t0 >= 0.4
    s.close()
    # Through HELLO: the idle timeout.
    t0 = time.time()
    s = connect(m.addr)
    hello(s)
    assert closed_by_peer(s, 6), "an idle connection was not closed"
    assert time.time() - t0 >= 1.4
    s.close()
    # Busy: kept past the idle timeout.
    s = connect(m.addr)
    hello(s)
    for i in range(8):
        assert call(s, OP_PING, req_id=i + 2)[0] == 0
        time.sleep(0.4)
    s.close()
    assert "idle for" in m.read_log()

    mnt = make_mount("--master", m.addr, "--segment-size", "0")  # a client only: no heartbeats
    with open(mnt.p("before"), "wb") as f:
        f.write(b"x" * 1000)
    closed = m.read_log().count("idle for")
    wait_for(lambda: m.read_log().count("idle for") > closed, 10, "the mount's connection to idle out")
    with open(mnt.p("before"), "rb") as f:
        assert f.read() == b"x" * 1000
    with open(mnt.p("after"), "wb") as f:
        f.write(b"y" * 1000)
    assert cli(m.addr, "get", "after").stdout == b"y" * 1000
    # The node's heartbeats kept its session: it never had to reconnect.
    assert "lost the connection" not in node.read_log()


def test_idle_connections_do_not_lock_out_clients(cluster):
    """300 connections that never say HELLO, against a master allowed 256
    descriptors: a real client still gets in at once (regression: the master
    ran out of descriptors and nobody else could connect)."""
    m = cluster.master("--segment-size", "16M", prefix=["prlimit", "--nofile=256:256"])
    addr = m.addr
    idle = []
    for _ in range(300):
        idle.append(connect(addr))
    t0 = time.time()
    r = cli(addr, "put", "k", input=b"v" * 100, timeout=30)
    assert r.returncode == 0, r.stderr
    r = cli(addr, "get", "k", timeout=30)
    assert r.returncode == 0 and r.stdout == b"v" * 100, r.stderr
    assert time.time() - t0 < 10
    # Room was made by closing the oldest strangers (a burst of them may also
    # meet the descriptor limit for a moment: accepting resumes 100 ms later).
    assert "the limit" in m.read_log()
    for s in idle:
        s.close()


def test_node_refuses_payload_over_the_chunk_size(cluster):
    """A WRITE of 4 MiB + 1 bytes is refused with -EMSGSIZE and writes
    nothing (regression: the node wrote it, over whatever followed the
    extent); a READ of as much is refused the same way."""
    m = cluster.master()
    cluster.node(m, "64M")
    data = os.urandom(8 * MiB)
    assert cli(m.addr, "put", "obj", input=data).returncode == 0
    seg, data_addr, off, _ = get_replica(m.addr, b"obj")
    s = connect(data_addr)
    hello(s)
    status, _ = call(s, OP_WRITE, struct.pack("<IQQ", *seg, off) + b"\0" * (CHUNK + 1), req_id=2)
    assert status == -errno.EMSGSIZE
    status, _ = call(s, OP_READ, struct.pack("<IQQI", *seg, off, CHUNK + 1), req_id=3)
    assert status == -errno.EMSGSIZE
    # At the limit, both work, and the connection stays open throughout.
    status, got = call(s, OP_READ, struct.pack("<IQQI", *seg, off, CHUNK), req_id=4)
    assert status == 0 and len(got) == CHUNK
    s.close()
    assert cli(m.addr, "get", "obj").stdout == data


OP_LIST = 35


def answers_queued(port):
    """The master's mooncake_server_answers_queued_bytes, from its metrics
    (None while its loop is too busy to answer them: 503)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    except urllib.error.HTTPError as e:
        if e.code == 503:
            return None
        raise
    m = re.search(r"^mooncake_server_answers_queued_bytes (\S+)$", text, re.M)
    assert m, "no answers_queued_bytes in the metrics"
    return float(m.group(1))


def test_peers_that_do_not_read_their_answers_hold_the_answer_budget(cluster, make_mount):
    """Twelve connections ask a master for listings of about 6 MB each,
    sixteen each, and never read the answers. Each alone may queue 32 MiB
    (half its send bound) before it waits: 12 of them, over 400 MB of the
    master's memory. With --answer-budget 64M they hold about the budget
    between them, plus an answer each; another client is still answered."""
    budget = 64 * MiB
    mport = free_port()
    m = cluster.master("--segment-size", "16M", "--answer-budget", "64M", "--metrics", str(mport))
    mnt = make_mount("--master", m.addr, "--segment-size", "0")
    deep = mnt.p(*(c * 250 for c in "abcdefghijkl"))  # keys of over 3000 bytes
    os.makedirs(deep)
    for i in range(2000):
        open(os.path.join(deep, "%05d" % i), "wb").close()
    listing = struct.pack("<I", 0) + struct.pack("<I", 0) + struct.pack("<II", 0, 10000)
    one = frame(OP_LIST, listing)
    before = m.rss()
    socks = []
    for _ in range(12):
        s = connect(m.addr)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel holds little
        s.sendall(one * 16)
        socks.append(s)
    # Each connection has an answer queued once the budget is spent: the
    # queue grows no more.
    last = []

    def settled():
        last.append(answers_queued(mport))
        return len(last) >= 10 and len(set(last[-10:])) == 1 and None not in last[-10:]

    wait_for(settled, 120, "the answers queued to settle")
    queued = last[-1]
    assert budget <= queued <= budget + 12 * 7 * MiB, queued
    grown = m.rss() - before
    if not os.environ.get("MC_SANITIZED"):  # ASan keeps freed memory in quarantine
        assert grown < budget + 12 * 7 * MiB + 64 * MiB, f"the master grew by {grown >> 20} MiB"
    r = cli(m.addr, "stat", "a" * 250 + "/")
    assert r.returncode == 0, r.stderr  # another client is answered meanwhile
    for s in socks:
        s.close()
    wait_for(lambda: answers_queued(mport) == 0, 30, "the answers of closed connections to go")
