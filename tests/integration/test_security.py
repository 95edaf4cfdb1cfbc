"""Authentication: a cluster whose processes share a secret works end to end
(mount and C API); a wrong or missing secret fails cleanly with EACCES while
the master carries on and says why; a raw socket that skips AUTH is answered
-EACCES and cut off; the handshake's MACs are the documented HMAC-SHA256
(docs/PROTOCOL.md), checked here with Python's own hmac module."""

import errno
import hashlib
import hmac
import os
import struct
import subprocess
import time

from harness import DAEMON, MASTER, cli
from wire import SESSION, call, closed_by_peer, connect, s_field

OP_HELLO, OP_AUTH, OP_PING, OP_STAT, OP_READ = 1, 2, 3, 31, 50
EACCES = -errno.EACCES


def secret_file(tmp_path, name, content, mode=0o600):
    path = tmp_path / name
    path.write_bytes(content)
    os.chmod(path, mode)
    return str(path)


# ---- raw frames ----

def hello(sock, nonce):
    """HELLO with nonce: (status, auth, server nonce, server proof)."""
    body = struct.pack("<HHI", SESSION, SESSION, 1) + s_field(b"test_security") + s_field(nonce)
    status, resp = call(sock, OP_HELLO, body)
    if status < 0:
        return status, None, None, None
    ver, auth, nlen = struct.unpack_from("<HII", resp)
    snonce = resp[10:10 + nlen]
    (plen,) = struct.unpack_from("<I", resp, 10 + nlen)
    proof = resp[14 + nlen:14 + nlen + plen]
    assert ver == SESSION and 14 + nlen + plen == len(resp)
    return status, auth, snonce, proof


def mac(secret, label, first, second):
    return hmac.new(secret, label + first + second, hashlib.sha256).digest()


# ---- tests ----

def test_shared_secret_cluster_works_end_to_end(cluster, make_mount, tmp_path):
    key = secret_file(tmp_path, "secret", b"correct horse battery staple\n")
    m = cluster.master("--auth-secret-file", key)
    cluster.node(m, "64M", "--auth-secret-file", key)
    mnt = make_mount("--master", m.addr, "--segment-size", "32M", "--auth-secret-file", key)
    data = os.urandom(5 * (1 << 20) + 3)
    with open(mnt.p("f"), "wb") as f:
        f.write(data)
    r = cli(m.addr, "--auth-secret-file", key, "get", "f")
    assert r.returncode == 0, r.stderr
    assert r.stdout == data
    r = cli(m.addr, "--auth-secret-file", key, "--replicas", "2", "put", "g", input=b"via cli")
    assert r.returncode == 0, r.stderr
    assert open(mnt.p("g"), "rb").read() == b"via cli"
    # No connection was refused on the way.
    log = m.read_log()
    assert "hung up" not in log and "closing" not in log, log


def test_wrong_or_missing_secret_fails_cleanly(cluster, tmp_path):
    key = secret_file(tmp_path, "secret", b"s3cret")
    wrong = secret_file(tmp_path, "wrong", b"s3cret-but-not-quite")
    m = cluster.master("--auth-secret-file", key, "--segment-size", "16M")
    assert cli(m.addr, "--auth-secret-file", key, "put", "k", input=b"v").returncode == 0

    for args in (["--auth-secret-file", wrong], []):
        t0 = time.time()
        r = cli(m.addr, *args, "get", "k")
        assert r.returncode == 1, (args, r)
        assert b"Permission denied" in r.stderr, r.stderr
        assert r.stdout == b""
        assert time.time() - t0 < 10
    # A node with the wrong secret cannot join either.
    r = cli(m.addr, "--auth-secret-file", wrong, "--segment-size", "16M", "node", timeout=20)
    assert r.returncode == 1 and b"Permission denied" in r.stderr, r.stderr

    # The master carries on, and says what it refused.
    r = cli(m.addr, "--auth-secret-file", key, "get", "k")
    assert r.returncode == 0 and r.stdout == b"v", r.stderr
    log = m.read_log()
    assert "warn:" in log and "hung up before authenticating" in log, log


def test_client_with_secret_refuses_server_without_one(cluster, tmp_path):
    key = secret_file(tmp_path, "secret", b"s3cret")
    m = cluster.master("--segment-size", "16M")
    assert cli(m.addr, "put", "k", input=b"v").returncode == 0
    r = cli(m.addr, "--auth-secret-file", key, "get", "k")
    assert r.returncode == 1 and b"Permission denied" in r.stderr, r.stderr
    assert b"cannot prove" in r.stderr


def test_mount_with_wrong_secret_exits(cluster, tmp_path):
    key = secret_file(tmp_path, "secret", b"s3cret")
    wrong = secret_file(tmp_path, "wrong", b"other")
    m = cluster.master("--auth-secret-file", key)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run([DAEMON, "-f", "--master", m.addr, "--segment-size", "16M",
                        "--auth-secret-file", wrong, str(mnt)],
                       capture_output=True, timeout=30)
    assert r.returncode != 0
    assert b"Permission denied" in r.stderr, r.stderr


def test_raw_socket_that_skips_auth_is_closed(cluster, tmp_path):
    secret = b"raw-secret"
    key = secret_file(tmp_path, "secret", secret + b"\n")
    m = cluster.master("--auth-secret-file", key, "--segment-size", "16M")
    node = cluster.node(m, "16M", "--auth-secret-file", key)

    for addr, op, body in ((m.addr, OP_PING, b""),
                           (m.addr, OP_STAT, s_field(b"k")),
                           (node.addr, OP_READ, struct.pack("<IQQI", 1, 1, 0, 16))):
        # A request before any HELLO.
        s = connect(addr)
        assert call(s, op, body)[0] == EACCES
        assert closed_by_peer(s)
        s.close()
        # HELLO, then a request without AUTH.
        s = connect(addr)
        status, auth, snonce, proof = hello(s, os.urandom(32))
        assert (status, auth, len(snonce), len(proof)) == (0, 1, 32, 32)
        assert call(s, op, body, req_id=2)[0] == EACCES
        assert closed_by_peer(s)
        s.close()

    # A HELLO without a nonce; an AUTH with a wrong MAC; AUTH before HELLO.
    s = connect(m.addr)
    body = struct.pack("<HHI", SESSION, SESSION, 1) + s_field(b"x") + s_field(b"")
    assert call(s, OP_HELLO, body)[0] == EACCES
    assert closed_by_peer(s)
    s = connect(m.addr)
    hello(s, os.urandom(32))
    assert call(s, OP_AUTH, s_field(os.urandom(32)), req_id=2)[0] == EACCES
    assert closed_by_peer(s)
    s = connect(m.addr)
    assert call(s, OP_AUTH, s_field(os.urandom(32)))[0] == EACCES
    assert closed_by_peer(s)

    # The documented handshake, done by hand: both proofs are HMAC-SHA256.
    s = connect(m.addr)
    cnonce = os.urandom(32)
    status, auth, snonce, proof = hello(s, cnonce)
    assert hmac.compare_digest(proof, mac(secret, b"server", cnonce, snonce))
    assert call(s, OP_AUTH, s_field(mac(secret, b"client", snonce, cnonce)), req_id=2)[0] == 0
    assert call(s, OP_PING, req_id=3)[0] == 0
    s.close()

    log = m.read_log()
    assert "before authentication" in log and "wrong secret" in log, log
    assert "before authentication" in node.read_log()
    assert cli(m.addr, "--auth-secret-file", key, "put", "still", input=b"up").returncode == 0


def test_a_peer_of_an_older_session_version_is_refused(cluster):
    """HELLO negotiates one session version; a peer that speaks only older
    ones is refused with EPROTONOSUPPORT and hung up on, before it can send
    anything that the versions read apart. A node of version 6 (before
    small objects in 4-byte units) reporting records to a master of 7, or
    the other way round, would otherwise meet records it drops; a range
    that reaches the current version is served it."""
    m = cluster.master("--segment-size", "16M")
    s = connect(m.addr)
    body = struct.pack("<HHI", 1, SESSION - 1, 2) + s_field(b"old-node") + s_field(b"")
    assert call(s, OP_HELLO, body)[0] == -errno.EPROTONOSUPPORT
    assert closed_by_peer(s)
    s.close()
    s = connect(m.addr)
    body = struct.pack("<HHI", 1, SESSION + 3, 2) + s_field(b"new-node") + s_field(b"")
    status, resp = call(s, OP_HELLO, body)
    assert status == 0 and struct.unpack_from("<H", resp)[0] == SESSION
    s.close()


def test_secret_file_is_checked(cluster, tmp_path):
    m = cluster.master()
    loose = secret_file(tmp_path, "loose", b"secret", mode=0o644)
    empty = secret_file(tmp_path, "empty", b"\n")
    for path, why in ((loose, b"chmod 600"), (empty, b"empty"),
                      (str(tmp_path / "missing"), b"No such file")):
        r = cli(m.addr, "--auth-secret-file", path, "ls")
        assert r.returncode == 1, r
        assert why in r.stderr, r.stderr
    r = subprocess.run([MASTER, "--port", "0", "--auth-secret-file", loose],
                       capture_output=True, timeout=10)
    assert r.returncode == 2 and b"chmod 600" in r.stderr, r.stderr
