"""Regression tests for committed data under faults (issue: "Nothing
committed is ever corrupted or lost"). Each test reproduces, through real
processes (a master, nodes, a mount, raw sockets), one way the store used
to corrupt or lose committed data, and checks what must survive."""

import errno
import mmap
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request

import pytest

from harness import (cli, cli_stats, free_port, past_the_put_ttl, revoked_writes,
                     stopped_till_revoked, wait_for)
from wire import HDR, MAGIC, frame, get_replica, hello, recv_exact

MiB = 1 << 20
# How late MC_FAULT_XFER's copy comes in the late-bytes tests: after the
# victims are put (late_bytes_spoil_nothing() checks that it did). Under
# the sanitizers each of those puts' processes starts several times slower.
LATE_MS = 20000 if os.environ.get("MC_SANITIZED") else 8000
OP_PING, OP_MOUNT_SEGMENT, OP_OPEN = 3, 10, 24


def k_field(b):
    return struct.pack("<I", len(b)) + b


def responses(sock, n):
    """Reads n response frames; returns their statuses."""
    out = []
    for _ in range(n):
        hdr = struct.unpack(HDR, recv_exact(sock, 24))
        recv_exact(sock, hdr[4])
        out.append(hdr[6])
    return out


def test_an_idle_writer_of_a_running_mount_keeps_its_write_past_the_put_ttl(
        cluster, make_mount):
    """A file held open for writing and left idle (a log written now and
    then, a file an editor keeps open) keeps its version in progress for as
    long as the mount runs: the client renews its idle writes' leases, and
    the master revokes only a write nobody renews for the put TTL. Well
    past the TTL (a writer of a stopped mount was revoked meanwhile) the
    idle writer writes on and its close publishes every byte."""
    m = cluster.master("--put-ttl-ms", "3000")
    cluster.node(m)
    mnt = make_mount("--master", m.addr, "--segment-size", "0")
    stopped = make_mount("--master", m.addr, "--segment-size", "0",
                         expect_log=r"revoked|publishing")
    first, second = os.urandom(100000), os.urandom(3 * MiB)
    fd = os.open(mnt.p("log"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, first)
        past_the_put_ttl(m, stopped)
        past_the_put_ttl(m, stopped)
        os.write(fd, second)
    finally:
        os.close(fd)
    assert open(mnt.p("log"), "rb").read() == first + second
    assert revoked_writes(m) == 2  # the stopped writers' only


def server_requests(port, *ops):
    """How many requests of each op the process serving metrics on port
    received (mooncake_server_requests_total)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    got = dict(re.findall(r'^mooncake_server_requests_total\{op="(\w+)"\} (\d+)', text, re.M))
    return [int(got.get(op, 0)) for op in ops]


def test_a_mounts_idle_writers_are_renewed_together(cluster, make_mount):
    """Files held open for writing and left idle cost the master a number
    of calls that grows with time, not with the number of files: the mount
    renews all of its idle writes due together in one call (PUT_RENEW).
    Past two put TTLs every file still takes more bytes, and its close
    publishes all of them."""
    port = free_port()
    m = cluster.master("--put-ttl-ms", "3000", "--metrics", str(port))
    cluster.node(m)
    mnt = make_mount("--master", m.addr, "--segment-size", "0")
    stopped = make_mount("--master", m.addr, "--segment-size", "0",
                         expect_log=r"revoked|publishing")
    files = 16
    first = [os.urandom(1000 + i) for i in range(files)]
    fds = [os.open(mnt.p(f"f{i}"), os.O_WRONLY | os.O_CREAT, 0o644) for i in range(files)]
    try:
        for fd, b in zip(fds, first):
            os.write(fd, b)
        before, t0 = server_requests(port, "PUT_RENEW", "PUT_GROW"), time.monotonic()
        past_the_put_ttl(m, stopped)
        past_the_put_ttl(m, stopped)
        after, idle = server_requests(port, "PUT_RENEW", "PUT_GROW"), time.monotonic() - t0
        for fd, b in zip(fds, first):
            os.write(fd, b)
    finally:
        for fd in fds:
            os.close(fd)
    for i, b in enumerate(first):
        assert open(mnt.p(f"f{i}"), "rb").read() == b + b
    # The write lease is the put TTL here (3 s), renewed a quarter to half
    # of it after the last renewal, so the timer fires at most every 0.75 s;
    # each file renewed on its own would take at least idle / 1.5 calls,
    # 16 times over.
    calls = (after[0] - before[0]) + (after[1] - before[1])
    assert 0 < calls <= idle / 0.75 + 4, (calls, idle, before, after)


def test_a_stopped_writer_past_put_ttl_cannot_corrupt_another_object(cluster, make_mount):
    """A writer whose mount stops (SIGSTOP) past the put TTL has its put
    revoked and its space reused by another object: its later writes must
    fail, never land in the other object's space."""
    m = cluster.master("--put-ttl-ms", "2000")
    cluster.node(m)
    cluster.node(m)
    mnt = make_mount("--master", m.addr, "--segment-size", "0", "--replicas", "2",
                     expect_log=r"revoked|publishing")
    with open(mnt.p("f"), "wb") as f:
        f.write(b"published")
    fd = os.open(mnt.p("f"), os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, b"a" * 1000)
        stopped_till_revoked(m, mnt)  # past the put TTL, nobody renewed it
        victim = os.urandom(MiB)
        r = cli(m.addr, "--replicas", "2", "put", "victim", input=victim)
        assert r.returncode == 0, r.stderr
        with pytest.raises(OSError) as e:
            os.write(fd, b"b" * 500000)
            os.fsync(fd)
        assert e.value.errno in (errno.ESTALE, errno.EIO), e.value
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    r = cli(m.addr, "get", "victim")
    assert r.returncode == 0 and r.stdout == victim, "the committed victim was overwritten"
    assert open(mnt.p("f"), "rb").read() == b"published"


def test_fsync_of_a_writer_revoked_past_the_put_ttl_reports_the_loss(cluster, make_mount):
    """A writer whose mount stopped past the put TTL lost its version (the
    master revoked it; the idle renewal after the stop learns so): an
    fsync then must fail (ESTALE), as the close does, not answer 0 for
    bytes that will never be published (SEMANTICS: fsync returns "the error
    that failed the version")."""
    m = cluster.master("--put-ttl-ms", "2000")
    cluster.node(m)
    mnt = make_mount("--master", m.addr, "--segment-size", "0",
                     expect_log=r"revoked|publishing")
    fd = os.open(mnt.p("f"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"a" * 1000)
        os.fsync(fd)  # landed (write-behind): no write of ours is in flight at the stop
        stopped_till_revoked(m, mnt)
        # The idle renewal (or fsync's own, once the lease is half gone)
        # finds the put gone; until then fsync may still answer 0.
        errs = []

        def fsync_fails():
            try:
                os.fsync(fd)
            except OSError as e:
                errs.append(e)
            return errs

        wait_for(fsync_fails, "fsync to report the lost version", timeout=10, step=0.2)
        assert errs[0].errno in (errno.ESTALE, errno.EIO), errs[0]
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    r = cli(m.addr, "get", "f")
    assert r.returncode == 0 and r.stdout == b"", r.stdout[:64]


def test_open_replaced_version_freed_once_after_segment_dropped(cluster, make_mount):
    """A replaced version kept open while its node's segment is dropped and
    mounted again must not free its extents into the new segment (the master
    used to abort: 'more than is handed out')."""
    m = cluster.master("--node-ttl-ms", "2000")
    node = cluster.node(m)
    mnt = make_mount("--master", m.addr, "--segment-size", "0", "--timeout-ms", "1000",
                     "--cache-timeout", "0", expect_log=r"publishing|ENOENT|lost")
    with open(mnt.p("F"), "wb") as f:
        f.write(os.urandom(4 * MiB))
    held = open(mnt.p("F"), "rb")
    with open(mnt.p("F"), "wb") as f:
        f.write(os.urandom(2 * MiB))
    node.pause()
    try:
        wait_for(lambda: "silent past their TTL" in m.read_log(), "the stopped node to expire")
    finally:
        node.resume()
    # The node mounts its segment again (a put succeeds once it has and
    # the segment's hold for late writers of before is over).
    wait_for(lambda: cli(m.addr, "put", "probe", input=b"p").returncode == 0,
             "the node to mount its segment again", step=0.5)
    held.close()
    # The master is alive and the remounted segment works as new.
    data = os.urandom(3 * MiB)
    r = cli(m.addr, "put", "after", input=data)
    assert r.returncode == 0, r.stderr + m.read_log().encode()[-2000:]
    assert cli(m.addr, "get", "after").stdout == data
    assert m.proc.poll() is None, m.read_log()[-2000:]


def test_closing_a_connection_with_many_handles_does_not_expire_nodes(cluster):
    """Closing a connection that holds many handles used to rescan the whole
    handle index per handle (quadratic): the master stopped answering long
    enough to expire a healthy node and lose its objects."""
    m = cluster.master("--node-ttl-ms", "2000")
    cluster.node(m)
    payload = os.urandom(1000)
    assert cli(m.addr, "put", "obj", input=payload).returncode == 0
    host, port = m.addr.split(":")
    socks = []
    n = 30000
    for _ in range(2):
        s = socket.create_connection((host, int(port)))
        s.settimeout(120)
        req = frame(OP_OPEN, k_field(b"obj"))
        s.sendall(req * n)
        assert set(responses(s, n)) == {0}
        socks.append(s)
    # Close the connection whose handles came last (the old code rescanned
    # the other one's 30k handles for each of them).
    socks[1].close()
    socks[0].sendall(frame(OP_PING))
    assert responses(socks[0], 1) == [0]
    # Several node TTLs later the node is still there and so is the object.
    for _ in range(3):
        time.sleep(1)
        r = cli(m.addr, "stat", "obj")
        assert r.returncode == 0 and b"replicas 1" in r.stdout, r.stdout + r.stderr
    socks[0].close()
    assert "silent past their TTL" not in m.read_log(), m.read_log()[-2000:]
    assert cli(m.addr, "get", "obj").stdout == payload


@pytest.mark.parametrize("seg_id", [0xFFFFFFFF, 0xFFFFFFFE])
def test_mount_segment_with_huge_id_does_not_lock_out_nodes(cluster, seg_id):
    """A MOUNT_SEGMENT naming segment id 0xFFFFFFFF wrapped the id counter to
    0 (the master's own) and every later node failed to join."""
    m = cluster.master("--segment-size", "16M")
    host, port = m.addr.split(":")
    s = socket.create_connection((host, int(port)))
    s.settimeout(10)
    body = struct.pack("<QI", 77, seg_id) + k_field(b"127.0.0.1:9") + struct.pack("<Q", 1 << 20) \
        + k_field(b"") + struct.pack("<IQ", 0, 0)
    s.sendall(frame(OP_MOUNT_SEGMENT, body))
    responses(s, 1)  # refused or accepted: either way the next nodes join
    nodes = [cluster.node(m) for _ in range(2)]
    for i in range(10):
        data = os.urandom(1000 + i)
        r = cli(m.addr, "put", f"k{i}", input=data)
        assert r.returncode == 0, r.stderr
        assert cli(m.addr, "get", f"k{i}").stdout == data
    s.close()
    for n in nodes:
        assert "Address already in use" not in n.read_log()
        assert not re.search(r"mounting the segment .*failed", n.read_log()), n.read_log()


@pytest.mark.parametrize("where", ["nodes", "own"])
def test_writer_across_a_master_restart_cannot_publish_or_corrupt(cluster, make_mount, where):
    """A write started before the master restarted must not go on into the
    new master's space, nor commit through a new put that happens to get the
    same id (ids started at 1 in every incarnation; the model checker found
    another object's bytes published under the old writer's key). With
    "own" the writer's space is in the mount's own segment (a mount that is
    a node too, the only one): it copies there itself, with no node's
    check on the way, and the new master places new objects there at once
    (the segment's every write passes an epoch check)."""
    m = cluster.master()
    if where == "nodes":
        cluster.node(m)
        cluster.node(m)
    seg = "0" if where == "nodes" else "16M"
    mnt = make_mount("--master", m.addr, "--segment-size", seg, "--timeout-ms", "1000",
                     "--cache-timeout", "0", expect_log=r"publishing|lost the connection")
    fd = os.open(mnt.p("old"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"o" * 32768)
        m.kill9()
        m2 = None
        deadline = time.time() + 20
        while m2 is None:  # the old master's connections may hold the port a moment
            try:
                m2 = cluster.master(port=m.port)
            except AssertionError:
                assert time.time() < deadline, "the master could not listen again"
                time.sleep(0.5)
        # New puts succeed once the nodes have mounted again and their
        # segments' hold (late writers of before) is over.
        wait_for(lambda: cli(m2.addr, "put", "probe", input=b"p").returncode == 0,
                 "puts to work on the new master", step=0.5)
        victims = {f"v{i}": os.urandom(40000) for i in range(8)}
        for k, v in victims.items():
            assert cli(m2.addr, "put", k, input=v).returncode == 0
        with pytest.raises(OSError) as e:
            os.pwrite(fd, b"n" * 32768, 0)  # inside the space it has: no master call
            os.write(fd, b"n" * 65536)
            os.fsync(fd)
            os.close(fd)
            fd = -1
        assert e.value.errno in (errno.ESTALE, errno.EIO, errno.ENOENT), e.value
    finally:
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
    for k, v in victims.items():
        assert cli(m2.addr, "get", k).stdout == v, k
    r = cli(m2.addr, "get", "old")
    assert r.returncode != 0 or r.stdout == b"", r.stdout[:64]


def late_bytes_spoil_nothing(m, mnt, least):
    """Puts hard-pinned objects of 1 MiB (none is evicted) until the store
    is full, at least `least` of them; waits until mnt's late bytes
    (MC_FAULT_XFER's copy) came, and checks that every object kept its
    bytes."""
    victims = {}
    for i in range(64):
        v = bytes([0x41 + i % 26]) * MiB
        if cli(m.addr, "--pin", "hard", "put", f"v{i}", input=v).returncode != 0:
            break
        victims[f"v{i}"] = v
    assert len(victims) >= least, cli_stats(m.addr)
    assert "late copy" not in mnt.read_log(), "the late bytes came before the victims: no test"
    wait_for(lambda: "late copy" in mnt.read_log(), "the late bytes to reach the node",
             timeout=LATE_MS / 1000 + 22)
    for k, v in victims.items():
        got = cli(m.addr, "get", k).stdout
        assert got == v, f"{k} was overwritten by the late write ({got[:8]!r})"


@pytest.mark.parametrize("shm", [False, True], ids=["tcp", "shm"])
def test_a_write_landing_after_its_lease_spoils_no_other_object(cluster, make_mount, shm):
    """A write's bytes that reach a node after the writer gave up on them
    and after its write lease ran out (a network that held them; here the
    client's fault injection point sends a copy LATE_MS late) must not land in
    space the master handed to another object meanwhile. The master takes
    the space back once the lease is over; the node must refuse the late
    bytes (the segment's epoch moved on before the space was reused).
    With shared memory (shm) the mount maps the node's segment and copies
    into it itself: the late copy stands for a writer frozen between its
    lease check and its memcpy, and must be refused all the same."""
    m = cluster.master("--put-ttl-ms", "1000")  # the write lease: 1 s
    no_shm = [] if shm else ["--no-shm"]
    cluster.node(m, "8M", *no_shm)
    env = dict(os.environ, MC_FAULT_XFER=f"off=0,err=5,delay={LATE_MS}")
    mnt = make_mount("--master", m.addr, "--segment-size", "0", *no_shm, "--cache-timeout", "0",
                     env=env, expect_log=r"MC_FAULT_XFER|publishing|Input/output error")
    with open(mnt.p("probe"), "wb") as f:  # a write that lands (not at offset 0)
        f.seek(MiB)
        f.write(b"P" * 4096)
    os.unlink(mnt.p("probe"))
    with pytest.raises(OSError) as e:
        with open(mnt.p("late"), "wb") as f:
            f.write(b"L" * MiB)
    assert e.value.errno == errno.EIO, e.value
    # The failed write's space comes back once its lease is over...
    wait_for(lambda: cli_stats(m.addr)["used_bytes"] == 0, "the failed write's space to come back")
    # ... and other objects take all of it (pinned: none is evicted).
    late_bytes_spoil_nothing(m, mnt, 4)
    assert "the late copy reached the node: Stale file handle" in mnt.read_log()
    # The transport that carried the mount's bytes: shm or TCP, as asked.
    mnt.request_stop()
    assert mnt.wait_exit(30) == 0
    moved = re.search(r"bytes moved: local \d+ shm (\d+) tcp (\d+)", mnt.read_log())
    assert moved and (int(moved.group(1)) > 0) == shm and (int(moved.group(2)) > 0) != shm, \
        moved and moved.group(0)


def test_a_dropped_replica_landing_late_spoils_no_other_object(cluster, make_mount):
    """A writer that cannot reach one of its replicas' nodes (a timeout)
    drops that replica and goes on with the other; its bytes to the first
    may still arrive (a partition that heals; here they come LATE_MS late),
    after the master gave the dropped replica's space to another object.
    That node must refuse them."""
    m = cluster.master("--node-ttl-ms", "3000")
    cluster.node(m, "8M", "--no-shm")
    late = cluster.node(m, "8M", "--no-shm")
    env = dict(os.environ, MC_FAULT_XFER=f"off=0,err=110,delay={LATE_MS},addr={late.addr}")
    mnt = make_mount("--master", m.addr, "--segment-size", "0", "--no-shm", "--cache-timeout", "0",
                     "--replicas", "2", env=env,
                     expect_log=r"MC_FAULT_XFER|publishing|Connection timed out|without the replica")
    data = os.urandom(MiB)
    with open(mnt.p("f"), "wb") as f:
        f.write(data)
    assert open(mnt.p("f"), "rb").read() == data
    # The dropped replica's space comes back (held for the node TTL; in
    # practice once the late copy has come, LATE_MS after the write: 20 s
    # under the sanitizers, where a loaded CI run took over 30 s), and
    # other objects take all the free space there is.
    wait_for(lambda: cli_stats(m.addr)["used_bytes"] == MiB, "the dropped replica's space to come back",
             timeout=LATE_MS / 1000 + 30)
    late_bytes_spoil_nothing(m, mnt, 8)
    assert open(mnt.p("f"), "rb").read() == data
    assert "the late copy reached the node: Stale file handle" in mnt.read_log()


OP_SHM_MAP = 52
FENCE_BYTES = 8 + 8 * 8191  # its epoch, then a slot per mapping (transport/shm.h)


def shm_map(data_addr, seg):
    """Maps segment seg of the node at data_addr as a co-located client
    does (SHM_MAP on its abstract socket): (socket, mapping, fence offset,
    slot). The node frees the slot when the socket closes."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect("\0mooncake-data/" + data_addr)
    hello(s, name=b"test_faults")
    s.sendall(frame(OP_SHM_MAP, struct.pack("<I", seg), req_id=2))
    got, fds, _, _ = socket.recv_fds(s, 24, 1)
    hdr = struct.unpack(HDR, got + recv_exact(s, 24 - len(got)))
    assert hdr[0] == MAGIC and hdr[6] == 0 and len(fds) == 1, (hdr, fds)
    size, fence_off, slot = struct.unpack("<QQI", recv_exact(s, hdr[4]))
    m = mmap.mmap(fds[0], fence_off + FENCE_BYTES)
    os.close(fds[0])
    return s, m, fence_off, slot


def test_a_client_stopped_mid_copy_holds_the_space_until_it_exits(cluster):
    """A client that maps a node's segment copies into it itself. One that
    stops in the middle of a copy (here: a process that mapped the segment
    and marked a copy of an old epoch in its fence slot, as a writer does
    before its memcpy, and never finishes) could land its bytes whenever it
    goes on: the space of a write that ended there must not go to anyone
    else meanwhile, however long past the lease, and the node says why.
    When the process exits, its slot is freed and the space comes back."""
    m = cluster.master("--put-ttl-ms", "1000")  # the write lease: 1 s
    node = cluster.node(m, "16M")
    assert cli(m.addr, "--no-shm", "put", "k", input=b"k" * 4096).returncode == 0
    (seg, epoch), data_addr, _, _ = get_replica(m.addr, b"k")
    sock, mapping, fence_off, slot = shm_map(data_addr, seg)
    struct.pack_into("<Q", mapping, fence_off + 8 + 8 * slot, epoch)  # a copy in progress
    base = cli_stats(m.addr)["used_bytes"]
    # A write that fails: its space is revoked, fenced (its bytes might
    # still land), so it waits for the node to enforce a new epoch.
    env = dict(os.environ, MC_FAULT_XFER="off=0,err=5")
    r = cli(m.addr, "--no-shm", "put", "late", input=b"L" * MiB, env=env)
    assert r.returncode != 0, r.stderr
    wait_for(lambda: "is it stopped?" in node.read_log()
             or cli_stats(m.addr)["used_bytes"] < base + MiB,
             "the node to say what holds the space", timeout=30)
    assert cli_stats(m.addr)["used_bytes"] >= base + MiB, \
        "the space came back while the stopped copy could still land in it"
    assert f"process {os.getpid()} (fence slot {slot})" in node.read_log(), node.read_log()[-800:]
    # The stopped process exits: its copy can never land.
    mapping.close()
    sock.close()
    wait_for(lambda: cli_stats(m.addr)["used_bytes"] == base, "the space to come back")
    assert cli(m.addr, "put", "new", input=b"N" * MiB).returncode == 0
    assert cli(m.addr, "get", "k").stdout == b"k" * 4096


# A Python client that puts a key (mapping the co-located node's segment)
# and forks a child, which tries a put with the inherited store and closes
# it (writing what the put returned and how long both took to argv[2]),
# then waits until its standard input (the test's pipe) closes; the parent
# prints the child's pid and dies without closing its store, as a crash
# does.
FORKER = r"""
import os, sys, time
from mooncake.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
assert s.setup({"master_server_addr": sys.argv[1], "timeout_ms": 2000}) == 0
assert s.put("forked", b"f" * 4096) == 0
child = os.fork()
if child == 0:
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)
    os.dup2(null, 2)
    t0 = time.time()
    rc = s.put("child", b"c" * 4096)
    s.close()
    with open(sys.argv[2] + ".tmp", "w") as f:
        f.write(f"{rc} {time.time() - t0:.3f}")
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    os.read(0, 1)
    os._exit(0)
print(child, flush=True)
os._exit(0)
"""


def test_a_forked_child_keeps_no_connection_of_its_parent(cluster):
    """A process that forks once its store is connected (Python's
    multiprocessing does by default) must not leave its connections to
    the child: the child cannot use them (the store's loop thread is not
    forked), and holding them open would hide the parent's death. A
    parent that dies mid-copy into a node's segment would then hold the
    fence slot of its mapping, and with it the space of every write that
    ended there, until its children exit. Here the parent dies (after a
    put through the mapping) while its child sleeps: the node must see the
    mapping's connection close, and give its slot (0, the first) to the
    next client that maps the segment. The child's own use of the store it
    inherited fails at once (it used to wait forever for a loop thread
    that is not there)."""
    if os.environ.get("MC_SANITIZED"):
        pytest.skip("the Python C extension does not load under the sanitizers")
    m = cluster.master()
    cluster.node(m, "16M")
    assert cli(m.addr, "--no-shm", "put", "k", input=b"k" * 4096).returncode == 0
    (seg, _), data_addr, _, _ = get_replica(m.addr, b"k")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "python"))
    said = os.path.join(cluster.tmp, "child-put")
    hold, keep = os.pipe()  # the child lives until keep closes
    try:
        r = subprocess.run([sys.executable, "-c", FORKER, m.addr, said], env=env, stdin=hold,
                           capture_output=True, timeout=60)
    finally:
        os.close(hold)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    child = int(r.stdout)
    try:
        def next_slot():
            sock, mapping, _, slot = shm_map(data_addr, seg)
            mapping.close()
            sock.close()
            return slot

        wait_for(lambda: next_slot() == 0,
                 "the dead parent's fence slot to be free (its child holds no connection)",
                 timeout=10)
        wait_for(lambda: os.path.exists(said), "the child's put to return", timeout=30)
        rc, took = open(said).read().split()
        # UNAVAILABLE_IN_CURRENT_STATUS, as on a closed store; at once.
        assert int(rc) == -1010 and float(took) < 5, (rc, took)
        assert cli(m.addr, "get", "child").returncode != 0
    finally:
        os.close(keep)
        os.kill(child, signal.SIGKILL)


def test_an_open_descriptor_never_reads_another_files_bytes_after_its_node_rejoins(
        cluster, make_mount):
    """A descriptor (--cache-mode direct) on a file whose only node goes
    silent past its TTL and mounts again: the master dropped the segment
    (the file is lost), and new files land in its space. The descriptor
    must then fail, never read the bytes of the file that took its space."""
    rejoin_case(cluster, make_mount)


def test_an_open_descriptor_fails_with_estale_after_its_node_rejoins_over_tcp(
        cluster, make_mount):
    """The same over TCP (--no-shm): the node itself refuses the READ of a
    replica set from before its segment's mount, and the descriptor's read
    fails with ESTALE."""
    assert rejoin_case(cluster, make_mount, "--no-shm") == errno.ESTALE


def rejoin_case(cluster, make_mount, *extra):
    """Returns the errno of the descriptor's read (None: it read the old
    bytes)."""
    m = cluster.master("--node-ttl-ms", "2000")
    node = cluster.node(m, "8M")
    mnt = make_mount("--master", m.addr, "--segment-size", "0", "--timeout-ms", "1000",
                     "--cache-mode", "direct", "--cache-timeout", "0", *extra,
                     expect_log=r"publishing|ENOENT|lost|reading")
    old = b"A" * MiB
    assert cli(m.addr, "put", "a", input=old).returncode == 0
    fd = os.open(mnt.p("a"), os.O_RDONLY)
    try:
        node.pause()
        try:
            wait_for(lambda: "silent past their TTL" in m.read_log(), "the stopped node to expire")
        finally:
            node.resume()
        new = b"B" * MiB
        wait_for(lambda: cli(m.addr, "put", "b", input=new).returncode == 0,
                 "the node to mount its segment again", step=0.5)
        try:
            got = os.pread(fd, 4096, 0)
        except OSError as e:
            return e.errno  # refused: fine
        assert got == old[:4096], "the descriptor read %r..., another file's bytes" % got[:8]
        return None
    finally:
        os.close(fd)
