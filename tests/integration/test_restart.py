"""A master that restarts loses nothing (issue 11, part 1): the nodes keep
the record of every published version with a replica in their segment, and
report them when they mount again at a new master, which rebuilds its
namespace from them. Real processes: a master killed with SIGKILL, a new
one on the same address, nodes, a mount and the Python client."""

import errno
import mmap
import os
import socket
import stat
import struct
import subprocess
import sys
import threading
import time

import pytest

from harness import CLI, cli, cli_stats, wait_for
from wire import HDR, MAGIC, OP_HELLO, closed_by_peer, recv_exact

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

MiB = 1 << 20


def settled(m):
    """Waits until every node has fetched the notices of what it holds (the
    master's notices_waiting counter is 0)."""
    wait_for(lambda: cli_stats(m.addr)["counters"]["notices_waiting"] == 0,
             "the nodes to fetch their records", step=0.2)


def restart(cluster, m, *args, **kw):
    """kill -9 of master m, then a new master on the same address."""
    m.kill9()
    return restart_on(cluster, m.port, *args, **kw)


def restart_on(cluster, port, *args, **kw):
    """A new master on port (once a killed one's connections let it go)."""
    deadline = time.time() + 20
    while True:  # the old master's connections may hold the port a moment
        try:
            return cluster.master(*args, port=port, **kw)
        except AssertionError:
            assert time.time() < deadline, "the master could not listen again"
            time.sleep(0.5)


def stat_of(addr, key):
    r = cli(addr, "stat", key)
    assert r.returncode == 0, (key, r.stderr)
    f = r.stdout.split()
    return {f[i].decode(): f[i + 1].decode() for i in range(0, len(f) - 1, 2)}


def listing(addr, prefix=""):
    r = cli(addr, "ls", prefix)
    assert r.returncode == 0, r.stderr
    return sorted(line for line in r.stdout.decode().splitlines())  # size TAB key


def test_objects_survive_a_master_restart(cluster):
    """Every committed object is back after kill -9 of the master: the same
    bytes, metadata and listing, replicas counted once per node."""
    m = cluster.master()
    cluster.nodes(m, 2, "32M")
    blobs = {f"d/{i}": os.urandom(1 + (i * 7919) % 300_000) for i in range(30)}
    for i, (k, v) in enumerate(blobs.items()):
        r = cli(m.addr, "--replicas", "2" if i % 2 else "1", "put", k, input=v)
        assert r.returncode == 0, r.stderr
    assert cli(m.addr, "put", "empty", input=b"").returncode == 0
    assert cli(m.addr, "put", "gone", input=b"remove me").returncode == 0
    assert cli(m.addr, "put", "twice", input=b"old").returncode == 0
    assert cli(m.addr, "put", "twice", input=b"new").returncode == 0
    assert cli(m.addr, "rm", "gone").returncode == 0
    before = {k: stat_of(m.addr, k) for k in [*blobs, "empty", "twice"]}
    keys = listing(m.addr)
    settled(m)

    m2 = restart(cluster, m)
    wait_for(lambda: cli(m2.addr, "get", "empty").returncode == 0, "the nodes to report")
    wait_for(lambda: cli_stats(m2.addr)["segments"] == 2, "both nodes to mount again")
    wait_for(lambda: all(stat_of(m2.addr, k)["replicas"] == before[k]["replicas"]
                         for k in blobs), "every replica to be reported")
    for k, v in blobs.items():
        assert cli(m2.addr, "get", k).stdout == v, k
    assert cli(m2.addr, "get", "twice").stdout == b"new"
    r = cli(m2.addr, "get", "gone")
    assert r.returncode != 0, "a removed object came back"
    for k, st in before.items():
        assert stat_of(m2.addr, k) == st, k
    assert listing(m2.addr) == keys
    c = cli_stats(m2.addr)
    assert c["objects"] == len(keys) == len(blobs) + 2
    assert c["counters"]["records_merged"] >= len(keys)
    # New writes go on (once the segments' hold is over: EAGAIN until then),
    # with versions newer than every one of before.
    wait_for(lambda: cli(m2.addr, "put", "twice", input=b"newer").returncode == 0, "puts",
             step=0.5)
    assert cli(m2.addr, "get", "twice").stdout == b"newer"
    assert int(stat_of(m2.addr, "twice")["version"]) > int(before["twice"]["version"])


def test_mount_metadata_survives_a_master_restart(cluster, make_mount):
    """Files, directories, modes, times, xattrs, symlinks and hard links made
    through a mount are back, as they were, after a restart of the master."""
    m = cluster.master()
    cluster.nodes(m, 2, "32M")
    mnt = make_mount("--master", m.addr, "--segment-size", "0", "--timeout-ms", "2000",
                     "--cache-timeout", "0", expect_log=r"lost the connection|publishing")
    os.makedirs(mnt.p("dir/sub"))
    os.mkdir(mnt.p("empty"))
    with open(mnt.p("dir/f"), "wb") as f:
        f.write(b"hello" * 1000)
    os.chmod(mnt.p("dir/f"), 0o640)
    os.utime(mnt.p("dir/f"), ns=(1_600_000_000_000_000_000, 1_500_000_000_000_000_000))
    os.setxattr(mnt.p("dir/f"), "user.colour", b"blue")
    os.symlink("dir/f", mnt.p("link"))
    with open(mnt.p("dir/sub/g"), "wb") as f:
        f.write(b"g")
    os.link(mnt.p("dir/sub/g"), mnt.p("hard"))
    with open(mnt.p("rm-me"), "wb") as f:
        f.write(b"x")
    os.unlink(mnt.p("rm-me"))
    paths = ["dir", "dir/sub", "empty", "dir/f", "link", "dir/sub/g", "hard"]
    before = {p: os.lstat(mnt.p(p)) for p in paths}
    tree = sorted(os.path.relpath(os.path.join(d, n), mnt.p())
                  for d, ds, fs in os.walk(mnt.p()) for n in ds + fs)
    settled(m)

    m2 = restart(cluster, m)
    wait_for(lambda: os.path.exists(mnt.p("dir/f")), "the mount to see the files again")
    wait_for(lambda: cli_stats(m2.addr)["segments"] == 2, "both nodes to mount again")
    after = sorted(os.path.relpath(os.path.join(d, n), mnt.p())
                   for d, ds, fs in os.walk(mnt.p()) for n in ds + fs)
    assert after == tree
    for p in paths:
        a, b = os.lstat(mnt.p(p)), before[p]
        for field in ("st_mode", "st_uid", "st_gid", "st_size", "st_nlink", "st_mtime_ns"):
            assert getattr(a, field) == getattr(b, field), (p, field)
    assert os.lstat(mnt.p("dir/f")).st_atime_ns == before["dir/f"].st_atime_ns
    assert stat.S_ISLNK(os.lstat(mnt.p("link")).st_mode)
    assert os.readlink(mnt.p("link")) == "dir/f"
    assert os.getxattr(mnt.p("dir/f"), "user.colour") == b"blue"
    with open(mnt.p("dir/f"), "rb") as f:
        assert f.read() == b"hello" * 1000
    with open(mnt.p("hard"), "rb") as f:
        assert f.read() == b"g"
    assert os.stat(mnt.p("hard")).st_ino == os.stat(mnt.p("dir/sub/g")).st_ino
    assert not os.path.exists(mnt.p("rm-me"))


def test_a_hard_link_removed_after_a_rewrite_stays_removed(cluster, make_mount):
    """A file with two names, rewritten (its bytes move to the other node,
    which gets no record of its names), then one name removed: after a
    restart of the master the removed name stays gone, the file counts the
    name left, and removing that one name frees it (it was no data loss
    before: the removed name came back with a count of one, and removing
    it freed the file under the name that stands)."""
    m = cluster.master()
    cluster.nodes(m, 2, "32M")
    mnt = make_mount("--master", m.addr, "--segment-size", "0", "--timeout-ms", "2000",
                     "--cache-timeout", "0", expect_log=r"lost the connection|publishing")
    with open(mnt.p("f"), "wb") as f:
        f.write(b"a" * (4 * MiB))
    os.link(mnt.p("f"), mnt.p("g"))
    settled(m)
    new = os.urandom(6 * MiB)
    with open(mnt.p("g"), "wb") as f:  # onto the node with more space free
        f.write(new)
    os.unlink(mnt.p("g"))
    assert os.stat(mnt.p("f")).st_nlink == 1
    settled(m)

    m2 = restart(cluster, m)
    wait_for(lambda: cli_stats(m2.addr)["segments"] == 2, "both nodes to mount again")
    wait_for(lambda: cli_stats(m2.addr)["counters"]["segments_held"] == 0,
             "both reports to end", step=0.2)
    wait_for(lambda: os.path.exists(mnt.p("f")), "the mount to see the file again")
    assert not os.path.exists(mnt.p("g"))
    assert os.stat(mnt.p("f")).st_nlink == 1
    with open(mnt.p("f"), "rb") as f:
        assert f.read() == new
    os.unlink(mnt.p("f"))
    wait_for(lambda: cli_stats(m2.addr)["used_bytes"] == 0, "the file's space to come back")
    assert cli_stats(m2.addr)["objects"] == 0


def test_hard_links_come_back_from_the_node_their_file_moved_to(cluster, make_mount):
    """A file with two names on node A is rewritten onto node B (more space
    free), by a put of one name; then A dies with the master. Both names
    come back from B alone, with the new bytes (they were lost with A
    before: B had the file's record but not its names')."""
    m = cluster.master()
    a = cluster.node(m, "32M")
    mnt = make_mount("--master", m.addr, "--segment-size", "0", "--timeout-ms", "2000",
                     "--cache-timeout", "0", expect_log=r"lost the connection|publishing")
    with open(mnt.p("f"), "wb") as f:
        f.write(b"a" * MiB)
    os.link(mnt.p("f"), mnt.p("g"))
    settled(m)  # A keeps the names' records
    cluster.node(m, "64M")
    new = os.urandom(3 * MiB)
    assert cli(m.addr, "put", "g", input=new).returncode == 0  # onto B: more space free
    settled(m)
    a.kill9()
    m2 = restart(cluster, m)
    wait_for(lambda: cli_stats(m2.addr)["segments"] == 1 and
             cli_stats(m2.addr)["counters"]["segments_held"] == 0, "B to report")
    wait_for(lambda: os.path.exists(mnt.p("f")) and os.path.exists(mnt.p("g")),
             "the mount to see both names again")
    for name in ("f", "g"):
        assert os.stat(mnt.p(name)).st_nlink == 2
        with open(mnt.p(name), "rb") as f:
            assert f.read() == new, name


def test_a_file_renamed_over_a_name_not_reported_yet_keeps_its_bytes(cluster, make_mount):
    """j on node A, k on node B; the master restarts while B is stopped, so
    k is not there yet, and j is renamed to k through a mount. When B comes
    back and reports its k, the rename stands: k holds j's bytes (before,
    B's older k replaced them, and j's bytes were lost)."""
    m = cluster.master()
    a, b = cluster.nodes(m, 2, "32M")
    one, two = os.urandom(5000), os.urandom(5000)
    assert cli(m.addr, "--preferred", a.addr, "put", "j", input=one).returncode == 0
    assert cli(m.addr, "--preferred", b.addr, "put", "k", input=two).returncode == 0
    settled(m)
    b.pause()
    m2 = restart(cluster, m)
    wait_for(lambda: cli(m2.addr, "get", "j").returncode == 0, "A to report j", step=0.5)
    mnt = make_mount("--master", m2.addr, "--segment-size", "0", "--timeout-ms", "2000",
                     "--cache-timeout", "0", "--cache-mode", "direct",
                     expect_log=r"lost the connection")
    assert not os.path.exists(mnt.p("k"))
    os.rename(mnt.p("j"), mnt.p("k"))
    b.resume()
    wait_for(lambda: cli_stats(m2.addr)["segments"] == 2 and
             cli_stats(m2.addr)["counters"]["segments_held"] == 0, "B to report", step=0.2)
    assert not os.path.exists(mnt.p("j"))
    with open(mnt.p("k"), "rb") as f:
        assert f.read() == one
    assert cli(m2.addr, "get", "k").stdout == one
    assert cli_stats(m2.addr)["objects"] == 1


def python_store():
    """A Python client on the C extension (built by make python-ext, which
    make test builds before this stage). Under the sanitizers the extension
    does not load (it would need the ASan runtime preloaded), as for
    python/tests: skipped there."""
    if os.environ.get("MC_SANITIZED"):
        pytest.skip("the Python C extension does not load under the sanitizers")
    from mooncake.store import MooncakeDistributedStore

    return MooncakeDistributedStore()


def test_python_puts_survive_and_an_unfinished_put_fails_then_retries(cluster, make_mount):
    """Objects put through the Python client are back after a restart; a
    put in flight across it fails with a clear error (ESTALE) and succeeds
    when retried."""
    m = cluster.master()
    cluster.nodes(m, 2, "32M")
    s = python_store()
    assert s.setup({"master_server_addr": m.addr, "timeout_ms": 2000}) == 0
    try:
        blobs = {f"py/{i}": os.urandom(1000 + i) for i in range(10)}
        for k, v in blobs.items():
            assert s.put(k, v) == 0
        mnt = make_mount("--master", m.addr, "--segment-size", "0", "--timeout-ms", "2000",
                         expect_log=r"lost the connection|publishing")
        fd = os.open(mnt.p("inflight"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, b"a" * 65536)
        settled(m)
        m2 = restart(cluster, m)
        # Each node mounts its segment again on its own heartbeat: the keys
        # on one come back before the other's.
        wait_for(lambda: all(s.get(k) == v for k, v in blobs.items()),
                 "every key put through Python to read back")
        with pytest.raises(OSError) as e:
            os.write(fd, b"b" * (4 * MiB))
            os.close(fd)
            fd = -1
        assert e.value.errno in (errno.ESTALE, errno.EIO), e.value
        # The put made before the restart is not published half-written:
        # the file is as its create left it (empty).
        with open(mnt.p("inflight"), "rb") as f:
            assert f.read() == b""

        def retry():
            try:
                with open(mnt.p("inflight"), "wb") as f:
                    f.write(b"c" * 65536)
                return True
            except OSError as e:
                assert e.errno in (errno.EAGAIN, errno.ESTALE, errno.EIO), e
                return False

        wait_for(retry, "the retried write to succeed", step=0.5)
        with open(mnt.p("inflight"), "rb") as f:
            assert f.read() == b"c" * 65536
        assert cli(m2.addr, "get", "inflight").stdout == b"c" * 65536
    finally:
        if "fd" in dir() and fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
        s.close()


FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def clock_set_back():
    """The environment of a master whose wall clock starts at the same
    instant every run (Debian's libfaketime: 2026-01-01, one microsecond
    more per reading; its monotonic clock, which its timers use, is the
    real one), as a master restarted with its clock set back to the start
    of the run before would be: its version ids start at the same one."""
    if not os.path.exists(FAKETIME_LIB):
        pytest.skip("libfaketime is not installed (Debian's faketime; packaging/deps.sh)")
    env = {**os.environ, "LD_PRELOAD": FAKETIME_LIB,
           "FAKETIME": "@2026-01-01 00:00:00 i0.000001", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    # A sanitized build's runtime (linked in) would refuse to start after a
    # preloaded library; libfaketime only wraps the clock calls.
    asan = os.environ.get("ASAN_OPTIONS")
    env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
    return env


def test_a_master_whose_clock_went_back_keeps_two_objects_that_share_an_id(cluster):
    """Node A holds k1; the master restarts with its clock set back and,
    before A reports (A is stopped), puts k2 on node B under k1's version
    id. Both stay, with their own bytes, through that run and the next
    restart."""
    env = clock_set_back()
    m = cluster.master(env=env)
    a, b = cluster.nodes(m, 2, "32M")
    one, two = os.urandom(5000), os.urandom(5000)
    assert cli(m.addr, "--preferred", a.addr, "put", "k1", input=one).returncode == 0
    v1 = stat_of(m.addr, "k1")["version"]
    settled(m)
    a.pause()
    m.kill9()
    m2 = restart_on(cluster, m.port, env=env)
    wait_for(lambda: cli(m2.addr, "put", "k2", input=two).returncode == 0, "puts on B", step=0.5)
    assert stat_of(m2.addr, "k2")["version"] == v1  # the clash the test is about
    a.resume()
    wait_for(lambda: cli(m2.addr, "get", "k1").returncode == 0, "A to report k1")
    assert cli(m2.addr, "get", "k1").stdout == one
    assert cli(m2.addr, "get", "k2").stdout == two
    assert stat_of(m2.addr, "k1")["version"] != v1
    assert cli_stats(m2.addr)["counters"]["records_renamed"] == 1
    settled(m2)
    m3 = restart(cluster, m2)
    wait_for(lambda: cli_stats(m3.addr)["objects"] == 2 and
             all(cli(m3.addr, "get", k).returncode == 0 for k in ("k1", "k2")),
             "both nodes to report")
    assert cli(m3.addr, "get", "k1").stdout == one
    assert cli(m3.addr, "get", "k2").stdout == two
    for k in ("k1", "k2"):
        assert stat_of(m3.addr, k)["replicas"] == "1", k


def test_node_restarted_with_the_master_reports_nothing(cluster):
    """A node that restarted too has lost its bytes: what only it held is
    gone, what another node held is back with one replica."""
    m = cluster.master()
    a, b = cluster.nodes(m, 2, "32M")
    assert cli(m.addr, "--replicas", "2", "put", "both", input=b"2" * 5000).returncode == 0
    assert cli(m.addr, "--preferred", a.addr, "put", "only-a", input=b"a").returncode == 0
    settled(m)
    a.kill9()
    m2 = restart(cluster, m)
    cluster.node(m2, "32M")
    wait_for(lambda: cli(m2.addr, "get", "both").returncode == 0, "b to report")
    assert cli(m2.addr, "get", "both").stdout == b"2" * 5000
    assert cli(m2.addr, "get", "only-a").returncode != 0


def test_many_records_are_reported_in_batches(cluster):
    """A node holding more records than one report carries (about 1 MiB)
    sends them in several, one after the other: all are back."""
    m = cluster.master()
    cluster.node(m, "64M")
    s = python_store()
    assert s.setup({"master_server_addr": m.addr, "timeout_ms": 5000}) == 0
    try:
        keys = [f"many/{i:05d}/" + "n" * 200 for i in range(6000)]
        for at in range(0, len(keys), 500):
            chunk = keys[at:at + 500]
            assert s.put_batch(chunk, [k[-20:].encode() + b"%d" % at for k in chunk]) == 0
        settled(m)
        m2 = restart(cluster, m)
        wait_for(lambda: cli_stats(m2.addr)["objects"] == len(keys), "every record to be merged")
        assert cli_stats(m2.addr)["counters"]["records_merged"] == len(keys)
        for at in (0, 2999, 5999):
            assert s.get(keys[at]) == keys[at][-20:].encode() + b"%d" % (at - at % 500)
    finally:
        s.close()


@pytest.mark.parametrize("shm", [False, True])
def test_puts_after_a_master_restart_wait_only_for_what_the_nodes_cannot_check(cluster, shm):
    """After a master restart, a node whose every write passed an epoch
    check (its own, or the fence of a mapping a client copies through; no
    RDMA) takes new objects as soon as it has mounted again, reported what
    it holds and said it enforces its new epoch (its next heartbeat): the
    writes of before carry an older epoch and are refused. With shm the client that put the old object mapped the node's
    segment (shared memory), and is still no reason to wait out a write
    lease (before the fences, puts failed with EAGAIN for 10 s here)."""
    m = cluster.master()
    cluster.node(m, "32M", *([] if shm else ["--no-shm"]))
    r = cli(m.addr, *([] if shm else ["--no-shm"]), "--stats", "put", "k", input=b"old")
    assert r.returncode == 0, r.stderr
    assert (b"shm_ops 0 " not in r.stderr) == shm, r.stderr  # the put went through the mapping
    settled(m)
    m2 = restart(cluster, m)
    wait_for(lambda: cli(m2.addr, "get", "k").stdout == b"old", "the node to report")
    # New puts wait only until the node's next heartbeat says it enforces
    # its new epoch (a second, not the 10 s write lease).
    wait_for(lambda: cli(m2.addr, "put", "new", input=b"new").returncode == 0,
             "a put to succeed within a few heartbeats", timeout=5)
    assert cli(m2.addr, "get", "new").stdout == b"new"


class OtherVersionMaster:
    """A master of another session version on port, as far as HELLO
    goes: it answers every HELLO with -EPROTONOSUPPORT, as a master of a
    version the peer does not speak does (server.c), and hangs up."""

    def __init__(self, port):
        self.sock = None

        def bound():
            try:
                self.sock = socket.create_server(("127.0.0.1", port))
                return True
            except OSError:
                return False
        # The killed master's connections may hold the port a moment.
        wait_for(bound, "the killed master's port to be free", timeout=20, step=0.2)
        self.sock.settimeout(0.2)
        self.hellos = 0
        self.other = []  # ops that were not HELLO
        self.done = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.done:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            with c:
                c.settimeout(5)
                try:
                    magic, ver, op, rid, n, _, _ = struct.unpack(HDR, recv_exact(c, 24))
                    recv_exact(c, n)
                except (AssertionError, OSError):
                    continue
                if op != OP_HELLO:
                    self.other.append(op)
                    continue
                self.hellos += 1
                c.sendall(struct.pack(HDR, MAGIC, ver, op, rid, 0, 1, -errno.EPROTONOSUPPORT))
                c.shutdown(socket.SHUT_WR)  # the reply first, then the end
                closed_by_peer(c, timeout=5)

    def close(self):
        self.done = True
        self.thread.join()
        self.sock.close()


def test_a_node_keeps_its_bytes_while_the_master_speaks_another_version(cluster):
    """A master of another session version (a rollback, or a standby still
    on an older binary) refuses a node that held data with EPROTONOSUPPORT:
    the node keeps its segment and its records and keeps trying, sending
    nothing but HELLO, and says why in its log; the next master of its own
    version gets every byte back."""
    m = cluster.master()
    node = cluster.node(m, "32M")
    blobs = {f"v/{i}": os.urandom(1 + i * 10_007) for i in range(8)}
    for k, v in blobs.items():
        assert cli(m.addr, "put", k, input=v).returncode == 0
    settled(m)
    m.kill9()
    other = OtherVersionMaster(m.port)
    try:
        wait_for(lambda: other.hellos >= 3, "the node to try the other master again and again",
                 timeout=60, step=0.2)
        assert node.proc.poll() is None, node.fail("exited at a master of another version")
        assert other.other == [], other.other
        # ... and says why, for whoever runs it: once, not at every retry.
        log = node.read_log()
        assert log.count("does not speak our protocol version") == 1, log
    finally:
        other.close()
    m2 = restart_on(cluster, m.port)
    wait_for(lambda: cli(m2.addr, "get", "v/0").returncode == 0, "the node to report")
    for k, v in blobs.items():
        assert cli(m2.addr, "get", k).stdout == v, k


@pytest.mark.parametrize("cache", ["direct", "pages"])
def test_a_file_open_through_a_master_restart_never_reads_another_files_bytes(cluster,
                                                                                make_mount, cache):
    """OPEN pins the version a reader opened for as long as its handle is
    open (PROTOCOL, OPEN): the master neither frees nor reuses its space.
    The handle lives in the master's memory only, so a master that restarts
    knows of no handle: the file can then be removed and its space given to
    another file while a descriptor still reads the old one's. The reader
    may fail then, but never read the other file's bytes."""
    m = cluster.master()
    cluster.node(m, "28M")  # room for one 24 MiB file: g takes f's space
    mnt = make_mount("--master", m.addr, "--segment-size", "0", "--timeout-ms", "2000",
                     "--cache-mode", cache, "--readahead", "0",
                     expect_log=r"lost the connection|publishing|master")
    assert cli(m.addr, "put", "f", input=b"\xaa" * (24 * MiB)).returncode == 0
    fd = os.open(mnt.p("f"), os.O_RDONLY)
    try:
        assert os.pread(fd, 4096, 0) == b"\xaa" * 4096
        settled(m)
        m2 = restart(cluster, m)
        wait_for(lambda: cli(m2.addr, "stat", "f").returncode == 0, "the node to report")
        # The mount's link reconnects on its next call.
        wait_for(lambda: os.path.exists(mnt.p("f")), "the mount to reach the new master")
        r = cli(m2.addr, "rm", "f")  # no -f: an open handle would refuse it (EBUSY)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: cli(m2.addr, "put", "g", input=b"\xbb" * (24 * MiB)).returncode == 0,
                 "a put to succeed once the hold is over", step=0.5)
        try:
            got = os.pread(fd, 1 * MiB, 20 * MiB)
        except OSError as e:  # failing is allowed; another file's bytes are not
            assert e.errno in (errno.ESTALE, errno.EIO), e
            return
        foreign = len(got) - got.count(0xAA)
        assert foreign == 0, f"a read of f through its open descriptor got {foreign} bytes of g"
    finally:
        os.close(fd)


@pytest.mark.parametrize("cache", ["direct", "pages"])
def test_a_file_open_through_a_master_restart_is_read_again_once_opened_again(cluster,
                                                                               make_mount, cache):
    """The other side of the test above: a file open through a master
    restart that nobody replaced reads right through a new descriptor, and,
    with the page cache (the inode's version opened again), through the old
    one too."""
    m = cluster.master()
    cluster.node(m, "64M")
    mnt = make_mount("--master", m.addr, "--segment-size", "0", "--timeout-ms", "2000",
                     "--cache-mode", cache, "--readahead", "0",
                     expect_log=r"lost the connection|publishing|master")
    data = os.urandom(16 * MiB)
    assert cli(m.addr, "put", "f", input=data).returncode == 0
    fd = os.open(mnt.p("f"), os.O_RDONLY)
    try:
        assert os.pread(fd, 4096, 0) == data[:4096]
        settled(m)
        m2 = restart(cluster, m)
        wait_for(lambda: cli(m2.addr, "stat", "f").returncode == 0, "the node to report")
        wait_for(lambda: os.path.exists(mnt.p("f")), "the mount to reach the new master")
        with open(mnt.p("f"), "rb") as f:
            f.seek(8 * MiB)
            assert f.read(MiB) == data[8 * MiB:9 * MiB]
        if cache == "pages":
            assert os.pread(fd, MiB, 12 * MiB) == data[12 * MiB:13 * MiB]
    finally:
        os.close(fd)


def test_a_cached_replica_list_is_not_read_after_a_master_restart(cluster):
    """mc_get() keeps a replica list for half the read lease the master
    granted with it (PROTOCOL, GET_REPLICAS): the lease keeps the version's
    space from other objects meanwhile. A master that restarts knows no
    lease of its predecessor: the key can be removed and its space given to
    another object while the list is still cached. A get through it must
    then return the key's bytes or fail, never the other object's."""
    m = cluster.master("--lease-ms", "30000")  # lists kept 15 s
    cluster.node(m, "28M")  # room for one 24 MiB object: g takes f's space
    assert cli(m.addr, "put", "f", input=b"\xaa" * (24 * MiB)).returncode == 0
    reader = subprocess.Popen([CLI, "--master", m.addr, "--timeout-ms", "2000", "--repeat", "2",
                               "--interval-ms", "9000", "--no-progress", "get", "f"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.5)  # the first get is done (24 MiB over loopback)
        settled(m)
        m2 = restart(cluster, m)
        wait_for(lambda: cli(m2.addr, "stat", "f").returncode == 0, "the node to report")
        assert cli(m2.addr, "rm", "f").returncode == 0
        wait_for(lambda: cli(m2.addr, "put", "g", input=b"\xbb" * (24 * MiB)).returncode == 0,
                 "a put to succeed once the hold is over", step=0.5)
        out, err = reader.communicate(timeout=60)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    if reader.returncode != 0:  # failing is allowed (f is gone); g's bytes are not
        return
    foreign = len(out) - out.count(0xAA)
    assert foreign == 0, f"get f returned {foreign} bytes of g (of {len(out)})"


def test_a_write_in_progress_never_reads_back_another_files_bytes_after_a_master_restart(
        cluster, make_mount):
    """A write in progress is lost with the master that knew it (its write
    and close fail with ESTALE): the new master knows no put, and gives its
    space to other objects once the node enforces its new epoch. A read of
    the version in progress (here through a descriptor open for writing
    with O_DIRECT, which reads what the file's writers wrote) must then
    fail too, never return the other object's bytes."""
    m = cluster.master()
    cluster.node(m, "40M")  # g (36 MiB) takes the space w had
    mnt = make_mount("--master", m.addr, "--segment-size", "0", "--timeout-ms", "2000",
                     expect_log=r"lost the connection|publishing|master|renew")
    buf = mmap.mmap(-1, MiB)  # aligned, for O_DIRECT
    fdw = os.open(mnt.p("w"), os.O_RDWR | os.O_CREAT, 0o644)
    fdr = os.open(mnt.p("w"), os.O_RDWR | os.O_DIRECT)
    try:
        for off in range(0, 16 * MiB, MiB):
            assert os.pwrite(fdw, b"\xaa" * MiB, off) == MiB
        assert os.preadv(fdr, [buf], 0) == MiB and buf[:] == b"\xaa" * MiB
        m2 = restart(cluster, m)
        wait_for(lambda: cli(m2.addr, "put", "g", input=b"\xbb" * (36 * MiB)).returncode == 0,
                 "a put to succeed once the hold is over", step=0.2)
        try:
            n = os.preadv(fdr, [buf], 12 * MiB)
        except OSError as e:  # failing is allowed; another file's bytes are not
            assert e.errno in (errno.ESTALE, errno.EIO), e
            return
        got = buf[:n]
        foreign = len(got) - got.count(0xAA)
        assert foreign == 0, f"a read of the write in progress got {foreign} bytes of g"
    finally:
        for fd in (fdr, fdw):
            try:
                os.close(fd)
            except OSError:
                pass  # its close fails: the write is lost
