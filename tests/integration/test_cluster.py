"""The store as a cluster: mooncake-master, nodes and mounts on loopback,
replicas, node death, leases, eviction, a master restart and malformed
frames. Every process is real; every wait is bounded."""

import errno
import os
import re
import socket
import struct
import subprocess
import time

import pytest

from harness import CLI, MC_BENCH, cli, cli_stats
from wire import HDR, closed_by_peer, frame, recv_exact

MiB = 1 << 20


def test_two_mounts_on_different_nodes_see_each_other(cluster, make_mount):
    m = cluster.master()
    cluster.node(m)
    a = make_mount("--master", m.addr, "--segment-size", "64M")
    b = make_mount("--master", m.addr, "--segment-size", "64M")
    data = os.urandom(3 * MiB + 7)
    with open(a.p("from-a"), "wb") as f:
        f.write(data)
    # Close-to-open: once closed on a, an open on b sees it.
    with open(b.p("from-a"), "rb") as f:
        assert f.read() == data
    os.makedirs(b.p("x", "y"))
    with open(b.p("x", "y", "from-b"), "w") as f:
        f.write("hello")
    assert os.listdir(a.p("x", "y")) == ["from-b"]
    assert open(a.p("x", "y", "from-b")).read() == "hello"
    os.rename(a.p("x"), a.p("z"))
    assert sorted(os.listdir(b.p())) == ["from-a", "z"]
    # And the C API sees the same objects.
    r = cli(m.addr, "get", "z/y/from-b")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"hello"


def test_a_close_publishes_under_the_name_its_mount_knew(cluster, make_mount):
    """A file being written on one mount is published at close under the
    name it has on that mount, whatever another mount did to that name
    meanwhile (SEMANTICS, Several mounts): removed there, it comes back;
    replaced there by a rename, the close replaces it again (the last
    close wins, as between two writers)."""
    m = cluster.master()
    cluster.node(m)
    a = make_mount("--master", m.addr, "--segment-size", "64M")
    b = make_mount("--master", m.addr, "--segment-size", "64M")
    fd = os.open(b.p("gone"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"written on b, ")
    os.unlink(a.p("gone"))
    os.write(fd, b"removed on a")
    os.close(fd)
    for mnt in (a, b):
        with open(mnt.p("gone"), "rb") as f:
            assert f.read() == b"written on b, removed on a"
    fd = os.open(b.p("over"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"written on b")
    with open(a.p("other"), "wb") as f:
        f.write(b"renamed over it on a")
    os.rename(a.p("other"), a.p("over"))
    with open(a.p("over"), "rb") as f:
        assert f.read() == b"renamed over it on a"
    os.close(fd)
    for mnt in (a, b):
        with open(mnt.p("over"), "rb") as f:
            assert f.read() == b"written on b"
    assert not os.path.exists(a.p("other"))


def test_replica_survives_kill_9_of_a_node(cluster, make_mount):
    m = cluster.master("--node-ttl-ms", "2000")
    nodes = [cluster.node(m) for _ in range(3)]
    mnt = make_mount("--master", m.addr, "--segment-size", "0", "--replicas", "2",
                     "--timeout-ms", "2000")
    blobs = {}
    for i in range(200):
        data = os.urandom(1 + (i * 7919) % (100 * 1024))
        blobs[f"f{i:03d}"] = data
        with open(mnt.p(f"f{i:03d}"), "wb") as f:
            f.write(data)
    r = cli(m.addr, "stat", "f000")
    assert b"replicas 2" in r.stdout, r.stdout
    nodes[1].kill9()
    for name, data in blobs.items():
        with open(mnt.p(name), "rb") as f:
            assert f.read() == data, name
    for name in list(blobs)[::10]:
        r = cli(m.addr, "get", name)
        assert r.returncode == 0, r.stderr
        assert r.stdout == blobs[name]
    # After the node's TTL the master drops its segment; the objects keep
    # their surviving replica (and the repair copies them to the third node).
    deadline = time.time() + 15
    while cli_stats(m.addr)["counters"]["nodes_expired"] != 1:
        assert time.time() < deadline, "the dead node's segment was never dropped"
        time.sleep(0.2)
    for name in list(blobs)[::5]:
        with open(mnt.p(name), "rb") as f:
            assert f.read() == blobs[name]


def test_node_with_the_only_replica_dies(cluster, make_mount):
    m = cluster.master("--node-ttl-ms", "2500")
    a = cluster.node(m)
    cluster.node(m)
    mnt = make_mount("--master", m.addr, "--segment-size", "0", "--timeout-ms", "2000")
    blobs = {}
    for i in range(40):
        blobs[f"g{i:02d}"] = os.urandom(50000 + i)
        with open(mnt.p(f"g{i:02d}"), "wb") as f:
            f.write(blobs[f"g{i:02d}"])
    a.kill9()
    # Past the node TTL and a master tick: the lost objects leave the index.
    deadline = time.time() + 15
    while len(os.listdir(mnt.p())) == len(blobs):
        assert time.time() < deadline, "the dead node's objects never went away"
        time.sleep(0.2)
    lost, kept = [], []
    for name, data in blobs.items():
        try:
            with open(mnt.p(name), "rb") as f:
                assert f.read() == data
            kept.append(name)
        except OSError as e:
            assert e.errno == errno.ENOENT, (name, e)
            lost.append(name)
    assert lost and kept, (lost, kept)
    assert sorted(os.listdir(mnt.p())) == sorted(kept)
    r = cli(m.addr, "get", lost[0])
    assert r.returncode == 1 and b"No such file" in r.stderr
    # The cluster carries on.
    with open(mnt.p("after"), "wb") as f:
        f.write(b"still writable")
    assert open(mnt.p("after"), "rb").read() == b"still writable"


def test_lease_blocks_remove_unless_forced(cluster):
    m = cluster.master("--lease-ms", "3000", "--segment-size", "16M")
    assert cli(m.addr, "put", "k", input=b"value").returncode == 0
    r = cli(m.addr, "get", "k")
    assert r.stdout == b"value"
    r = cli(m.addr, "rm", "k")
    assert r.returncode == 1 and b"busy" in r.stderr.lower(), r.stderr
    assert cli(m.addr, "rm", "-f", "k").returncode == 0
    assert cli(m.addr, "stat", "k").returncode == 1
    # Unleased objects go without force.
    assert cli(m.addr, "put", "k2", input=b"v").returncode == 0
    assert cli(m.addr, "rm", "k2").returncode == 0


def test_eviction_spares_hard_pins_and_unplaceable_put_fails(cluster, make_mount):
    m = cluster.master("--segment-size", "32M", "--evict-high", "90", "--evict-ratio", "30",
                       "--lease-ms", "1")
    blob = os.urandom(MiB)
    assert cli(m.addr, "--pin", "hard", "put", "pinned", input=blob).returncode == 0
    for i in range(60):
        r = cli(m.addr, "put", f"e{i:02d}", input=blob)
        assert r.returncode == 0, (i, r.stderr)
    names = cli(m.addr, "ls").stdout.decode()
    assert "pinned" in names
    assert "e59" in names
    assert "e00" not in names  # least recently used went first
    r = cli(m.addr, "get", "pinned")
    assert r.stdout == blob
    # Bigger than the whole store: nothing can make room.
    r = cli(m.addr, "put", "huge", input=os.urandom(40 * MiB))
    assert r.returncode == 1


def test_master_killed_then_restarted(cluster, make_mount):
    m = cluster.master()
    cluster.node(m)
    mnt = make_mount("--master", m.addr, "--segment-size", "0", "--timeout-ms", "1000",
                     "--cache-timeout", "0", expect_log=r"publishing|lost the connection")
    with open(mnt.p("before"), "w") as f:
        f.write("x")
    m.kill9()
    # Every call fails within its timeout; none hangs.
    for op in (lambda: os.stat(mnt.p("before")), lambda: os.listdir(mnt.p()),
               lambda: open(mnt.p("new"), "w").write("y")):
        t0 = time.time()
        with pytest.raises(OSError):
            op()
        assert time.time() - t0 < 8
    t0 = time.time()
    r = cli(m.addr, "--timeout-ms", "1000", "stat", "before")
    assert r.returncode == 1 and time.time() - t0 < 8
    # A new master on the same address: the node mounts its segment again,
    # the mount reconnects, new writes succeed (the old metadata is gone).
    m2 = cluster.master(port=m.port)
    deadline = time.time() + 20
    while True:
        try:
            with open(mnt.p("after"), "w") as f:
                f.write("back")
            break
        except OSError:
            assert time.time() < deadline, "writes did not come back after the restart"
            time.sleep(0.5)
    assert open(mnt.p("after")).read() == "back"
    assert cli(m2.addr, "get", "after").stdout == b"back"


def ping(sock, req_id):
    """Sends PING and returns the response header's fields."""
    sock.sendall(frame(3, req_id=req_id))
    hdr = struct.unpack(HDR, recv_exact(sock, 24))
    recv_exact(sock, hdr[4])  # the body: the server's clock
    return hdr


@pytest.mark.parametrize("target", ["master", "node"])
def test_malformed_frames_close_only_that_connection(cluster, target):
    m = cluster.master("--segment-size", "16M")
    node = cluster.node(m)
    host, port = (m.addr if target == "master" else node.addr).split(":")
    assert cli(m.addr, "put", "live", input=b"before").returncode == 0
    bad_frames = [
        b"\x00" * 24,                                    # bad magic
        frame(31, length=(16 << 20) + 1),                 # oversized
        frame(999),                                       # unknown op
        # STAT (master) / WRITE (node): a length past the end of the body
        frame(31, b"\x05\x00\x00\x00ab") if target == "master" else frame(51, b"\x01\x00"),
        frame(50, b"\x01\x00"),                           # READ: truncated
        frame(3, b"", version=9),                         # unknown version
        b"\x4d\x43\x4b",                                  # truncated header, then silence
    ]
    for i, bad in enumerate(bad_frames):
        # A well-behaved client stays connected meanwhile.
        good = socket.create_connection((host, int(port)))
        good.settimeout(3)
        assert ping(good, 7)[5] & 1  # a response
        s = socket.create_connection((host, int(port)))
        s.sendall(bad)
        if i == len(bad_frames) - 1:
            s.close()  # a peer that dies mid-header
        else:
            assert closed_by_peer(s), f"frame {i} did not close the connection"
            s.close()
        assert ping(good, 8)[3] == 8
        good.close()
    r = cli(m.addr, "get", "live")
    assert r.returncode == 0 and r.stdout == b"before"
    assert "closing" in (m.read_log() if target == "master" else node.read_log())


def test_node_that_stops_leaves_at_once(cluster):
    """A node stopped with SIGTERM unmounts its segment on the way out: puts
    right after go to the nodes still there, not to the one that left
    (regression: the UNMOUNT was queued and dropped with the connection)."""
    m = cluster.master("--node-ttl-ms", "60000")
    leaving = cluster.node(m)
    cluster.node(m)
    assert leaving.stop() == 0
    for i in range(20):
        r = cli(m.addr, "put", f"after{i}", input=os.urandom(100000))
        assert r.returncode == 0, (i, r.stderr)
        assert cli(m.addr, "get", f"after{i}").returncode == 0


def test_preferred_segment_takes_every_replica(cluster):
    m = cluster.master("--node-ttl-ms", "2500")
    a, b, c = (cluster.node(m) for _ in range(3))
    blobs = {f"p{i}": os.urandom(1000 + 4099 * i) for i in range(10)}
    for key, data in blobs.items():
        r = cli(m.addr, "--preferred", b.addr, "--replicas", "1", "put", key, input=data)
        assert r.returncode == 0, r.stderr
    a.kill9()
    c.kill9()
    # Once the master drops the silent nodes, every object still reads back:
    # all of them sit on b.
    deadline = time.time() + 15
    while sum(int(n) for n in re.findall(r"(\d+) node\(s\) silent", m.read_log())) < 2:
        assert time.time() < deadline, "the dead nodes were never dropped"
        time.sleep(0.1)
    for key, data in blobs.items():
        r = cli(m.addr, "--timeout-ms", "2000", "get", key)
        assert r.returncode == 0, (key, r.stderr)
        assert r.stdout == data, key


def cache_hits(stderr):
    found = re.search(rb"cache_hits (\d+)", stderr)
    assert found, stderr
    return int(found.group(1))


def test_replica_list_cache_within_the_lease(cluster):
    m = cluster.master("--lease-ms", "300")
    cluster.node(m)
    old = os.urandom(100 * 1024)
    assert cli(m.addr, "put", "k", input=old).returncode == 0
    # 20 gets through one store: the master is asked once.
    r = cli(m.addr, "--stats", "--repeat", "20", "get", "k")
    assert r.returncode == 0, r.stderr
    assert r.stdout == old
    assert cache_hits(r.stderr) >= 19
    # A long-lived reader (a get every 50 ms for 3 s) sees another client's
    # new value once its cached set's lease has run out.
    new = os.urandom(len(old))
    reader = subprocess.Popen([CLI, "--master", m.addr, "--stats", "--repeat", "60",
                               "--interval-ms", "50", "get", "k"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.5)
    assert cli(m.addr, "put", "k", input=new).returncode == 0
    out, err = reader.communicate(timeout=60)
    assert reader.returncode == 0, err
    assert out == new
    assert cache_hits(err) >= 1


def test_new_file_written_after_another_clients_put_is_its_own(cluster):
    """A file created through the mount is empty; what its descriptor
    writes is the whole new version, even when another client put the key
    between the create and the first write (the model checker found "a"
    published as "aXXX": the writer copied the other client's version)."""
    m = cluster.master()
    cluster.node(m)
    mnt = cluster.mount("--master", m.addr, "--segment-size", "0", "--cache-timeout", "0")
    fd = os.open(mnt.p("new"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        assert cli(m.addr, "put", "new", input=b"XXXX").returncode == 0
        os.write(fd, b"a")
    finally:
        os.close(fd)
    assert open(mnt.p("new"), "rb").read() == b"a"
    assert cli(m.addr, "get", "new").stdout == b"a"


def test_puts_over_tcp_past_what_a_connection_queues(cluster, tmp_path):
    """A connection queues at most 64 MiB of frames to send, and a call that
    found no room failed at once with ENOBUFS: a put over TCP (another
    host's client, or --no-shm) of more than 64 MiB failed, and so did
    32 puts of 4 MiB at once to one node. Calls now wait their turn in the
    connection's window of 32 MiB in flight (and for room in its queue):
    the 100 MiB put reaches both replicas whole, and every put of the 32
    in flight (mc_bench, for a second) succeeds."""
    MiB = 1 << 20
    m = cluster.master()
    cluster.nodes(m, 2, "512M", "--no-shm")
    big = os.urandom(100 * MiB)
    path = tmp_path / "big"
    path.write_bytes(big)
    r = cli(m.addr, "--no-shm", "--replicas", "2", "put", "big", str(path))
    assert r.returncode == 0, r.stderr
    r = cli(m.addr, "--no-shm", "get", "big")
    assert r.returncode == 0, r.stderr
    assert r.stdout == big
    r = subprocess.run([MC_BENCH, "--master", m.addr, "--no-shm", "--size", "4M", "-n", "32",
                        "--keys", "1", "--seconds", "1", "--ops", "put"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_writer_whose_file_lost_its_last_name_on_another_mount(cluster, make_mount):
    """A descriptor open for writing through a name this mount unlinked,
    while the file kept another name, publishes to the file at close
    (SEMANTICS, Hard links); when another mount removed that other name
    meanwhile, the file has no name left: its writes are dropped and the
    close answers 0, as for any file without a name."""
    m = cluster.master()
    cluster.node(m)
    a = make_mount("--master", m.addr, "--segment-size", "0")
    b = make_mount("--master", m.addr, "--segment-size", "0")
    with open(b.p("x"), "w") as f:
        f.write("one")
    os.link(b.p("x"), b.p("y"))
    fd = os.open(b.p("x"), os.O_WRONLY)
    os.write(fd, b"TWO")
    os.unlink(b.p("x"))  # y stays, as far as b knows
    os.unlink(a.p("y"))  # the last name, on another mount
    os.close(fd)
    for mnt in (a, b):
        assert not os.path.exists(mnt.p("x"))
    assert sorted(os.listdir(a.p())) == []


def test_a_close_never_publishes_a_file_a_directory_hides(cluster, make_mount):
    """A file being written on one mount is published at close under the
    name it has there, even when another mount removed it meanwhile
    (SEMANTICS, Several mounts); when that mount made a directory of the
    same name since, the published file must not end up hidden behind
    it ("through the mount the clash cannot be made", Keys and paths):
    every file the store holds stays reachable through the mount."""
    m = cluster.master()
    cluster.node(m)
    a = make_mount("--master", m.addr, "--segment-size", "0")
    b = make_mount("--master", m.addr, "--segment-size", "0")
    fd = os.open(b.p("d"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"written on b")
    os.unlink(a.p("d"))
    os.mkdir(a.p("d"))
    with open(a.p("d", "f"), "w") as f:
        f.write("in the directory")
    with pytest.raises(OSError) as e:
        os.close(fd)  # refused: nothing hidden is published
    assert e.value.errno == errno.EISDIR, e.value
    r = cli(m.addr, "ls")
    assert r.returncode == 0, r.stderr
    keys = [line.split(b"\t", 1)[1].decode() for line in r.stdout.splitlines()]
    for k in keys:
        if not k.endswith("/"):
            assert os.path.isfile(a.p(k)), f"{k} is in the store, hidden from the mount"
