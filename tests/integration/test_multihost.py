"""The cluster across hosts: mooncake-master, nodes and a mount each in its
own network namespace, joined by veth pairs to a bridge (netns.py). Nothing
listens on loopback; every byte crosses the veth links, which the interface
counters prove. Skipped, with the reason, where namespaces cannot be made.

Topology (10.200.0.0/24, reachable only from these namespaces):
    master .1   node a .2   node b .3   node c .4   client (the mount) .5

Every process has the cluster's secret: without one, a server refuses to
listen beyond loopback."""

import os
import re
import shlex
import subprocess
import threading
import time

import pytest

import netns
from cluster import Master, Node, cli
from conftest import BAD_LOG, DAEMON, Mount, is_mounted

MiB = 1 << 20


class NsMount(Mount):
    """conftest.Mount, with the daemon in a host's network namespace (under
    nsenter, so the FUSE mount lands in our mount namespace)."""

    def __init__(self, tmp_path, host, *args, expect_log=None):
        self.host = host
        self.path = str(tmp_path / "mnt")
        os.makedirs(self.path, exist_ok=True)
        self.log_path = str(tmp_path / "daemon.log")
        self.cmd = host.wrap([DAEMON, "-f", *args, self.path])
        self.expect_log = expect_log
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while not is_mounted(self.path):
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited {self.proc.returncode}: {self.read_log()}"
                                     f"\nreproduce: {self.reproduce()}")
            if time.time() > deadline:
                self.proc.kill()
                raise AssertionError(f"not mounted after 20 s\nreproduce: {self.reproduce()}")
            time.sleep(0.02)


class MultiHost:
    """The namespaces of one test and the processes in them; close() stops
    every process (SIGTERM → exit 0, unmount → exit 0), scans the logs and
    deletes the namespaces, whatever happened before."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.net = netns.Net()
        self.procs = []   # cluster.Proc: master and nodes
        self.mounts = []
        self.expect = {}  # proc or mount -> regex of log lines the test provokes
        self.hung = False
        self.key = str(tmp / "secret")
        with open(self.key, "wb") as f:
            f.write(os.urandom(32).hex().encode())
        os.chmod(self.key, 0o600)
        try:
            self.master_host = self.net.host("master")
            self.node_hosts = [self.net.host(n) for n in ("a", "b", "c")]
            self.client = self.net.host("client")
            self.net.check()
        except Exception:
            self.net.close()
            raise

    def master(self, *args):
        m = Master(self.tmp, "--auth-secret-file", self.key, *args, netns=self.master_host.ns,
                   host=self.master_host.addr)
        m.key = self.key
        self.procs.append(m)
        return m

    def node(self, master, host, size="64M"):
        n = Node(self.tmp, master.addr, size, "--auth-secret-file", self.key, netns=host.ns,
                 host=host.addr)
        n.host = host
        self.procs.append(n)
        return n

    def mount(self, *args, expect_log=None):
        d = self.tmp / f"fs{len(self.mounts)}"
        d.mkdir()
        m = NsMount(d, self.client, "--auth-secret-file", self.key, *args, expect_log=expect_log)
        self.mounts.append(m)
        return m

    def close(self):
        errors = []
        try:
            for m in self.mounts:
                if self.hung and m.proc.poll() is None:
                    m.proc.kill()  # a request is stuck: fusermount -u would wait for it
                    m.proc.wait()
                    subprocess.run(["fusermount3", "-uz", m.path], check=False)
                    continue
                try:
                    if m.proc.poll() is None:
                        rc = m.stop()
                        if rc != 0:
                            errors.append(f"mount exited {rc}:\n{m.read_log()[-2000:]}"
                                          f"\nreproduce: {m.reproduce()}")
                    elif m.proc.returncode != 0:
                        errors.append(f"mount died with {m.proc.returncode}:\n"
                                      f"{m.read_log()[-2000:]}")
                    m.check_log()
                except AssertionError as e:
                    errors.append(str(e))
            for p in reversed(self.procs):
                try:
                    killed = p.proc.returncode == -9  # kill9() by the test
                    rc = p.stop()
                    if rc != 0 and not killed:
                        errors.append(f"{shlex.join(p.cmd)} exited {rc}:\n{p.read_log()[-2000:]}")
                except AssertionError as e:
                    errors.append(str(e))
                expect = self.expect.get(p)
                bad = [l for l in p.read_log().splitlines() if BAD_LOG.search(l)
                       and not (expect and re.search(expect, l))]
                if bad:
                    errors.append(f"{shlex.join(p.cmd)} logged errors:\n" + "\n".join(bad))
            left = self.net.pids()
            for pid in left:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            if left:
                errors.append(f"processes left in the namespaces: {left}")
        finally:
            for m in self.mounts:
                if is_mounted(m.path):
                    subprocess.run(["fusermount3", "-uz", m.path], check=False)
            for p in [*self.procs, *self.mounts]:
                if p.proc.poll() is None:
                    p.proc.kill()
                    p.proc.wait()
            self.net.close()
        return errors


@pytest.fixture
def mh(tmp_path):
    try:
        netns.probe()
    except netns.NetnsUnavailable as e:
        pytest.skip(f"network namespaces unavailable: {e}")
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse")
    h = MultiHost(tmp_path)
    yield h
    errors = h.close()
    assert not errors, "\n".join(errors)


def bounded(mh, limit, fn, *args):
    """fn(*args) in a thread; fails the test if it has not returned within
    limit seconds. Returns fn's result or raises its exception."""
    out = {}

    def run():
        try:
            out["value"] = fn(*args)
        except BaseException as e:
            out["error"] = e

    t0 = time.time()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    if t.is_alive():
        mh.hung = True
        raise AssertionError(f"{getattr(fn, '__name__', fn)}{args} still running after {limit} s")
    if "error" in out:
        raise out["error"]
    return out["value"], time.time() - t0


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def cli_ok(master, host, *args, input=None):
    r = cli(master.addr, "--auth-secret-file", master.key, *args, input=input, netns=host.ns,
            timeout=30)
    assert r.returncode == 0, (args, r.stderr)
    return r.stdout


def test_round_trip_across_namespaces(mh):
    m = mh.master()
    a = mh.node(m, mh.node_hosts[0])
    b = mh.node(m, mh.node_hosts[1])
    mnt = mh.mount("--master", m.addr, "--segment-size", "0", "--listen", "none",
                   "--cache-timeout", "0")
    files = {
        "empty": b"",
        "one": b"x",
        "small": os.urandom(4095),
        "dir/sub/big": os.urandom(4 * MiB + 7),
        "dir/mid": os.urandom(300 * 1024 + 1),
    }
    total = sum(map(len, files.values()))
    rx0, tx0 = mh.client.counters()
    for name, data in files.items():
        os.makedirs(os.path.dirname(mnt.p(name)), exist_ok=True)
        write(mnt.p(name), data)
    rx1, tx1 = mh.client.counters()
    # The bytes went out of the client's interface, not through loopback or
    # shared memory.
    assert tx1 - tx0 >= total, (tx1 - tx0, total)
    for name, data in files.items():
        assert read(mnt.p(name)) == data, name
    rx2, _ = mh.client.counters()
    assert rx2 - rx1 >= total, (rx2 - rx1, total)
    # And through the C API, from each node's host.
    for host in mh.node_hosts[:2]:
        for name, data in files.items():
            assert cli_ok(m, host, "get", name) == data, (host.ns, name)
    # A node's segment got data written over its own link.
    assert sum(n.host.counters()[0] for n in (a, b)) >= total
    # A put from a node's host shows up in the mount.
    blob = os.urandom(MiB + 3)
    cli_ok(m, mh.node_hosts[1], "put", "from-b/obj", input=blob)
    assert os.listdir(mnt.p("from-b")) == ["obj"]
    assert read(mnt.p("from-b", "obj")) == blob
    assert sorted(os.listdir(mnt.p())) == ["dir", "empty", "from-b", "one", "small"]


def test_replica_survives_kill_9_of_a_node_host(mh):
    m = mh.master("--node-ttl-ms", "2000")
    nodes = [mh.node(m, h) for h in mh.node_hosts]
    mnt = mh.mount("--master", m.addr, "--segment-size", "0", "--listen", "none",
                   "--replicas", "2", "--timeout-ms", "2000")
    blobs = {}
    for i in range(100):
        data = os.urandom(1 + (i * 7919) % (100 * 1024))
        blobs[f"f{i:03d}"] = data
        write(mnt.p(f"f{i:03d}"), data)
    assert b"replicas 2" in cli_ok(m, mh.node_hosts[0], "stat", "f000")
    # Every node holds some of it.
    assert all(n.host.counters()[0] > 100 * 1024 for n in nodes)
    nodes[1].kill9()
    total = sum(map(len, blobs.values()))
    rx0, _ = mh.client.counters()
    for name, data in blobs.items():
        got, took = bounded(mh, 10, read, mnt.p(name))
        assert got == data, name
    assert mh.client.counters()[0] - rx0 >= total  # over the network, not a cache
    for name, data in blobs.items():
        assert cli_ok(m, mh.node_hosts[0], "--timeout-ms", "2000", "get", name) == data, name
    # After the node's TTL the master drops its segment; the objects keep
    # their surviving replica (the repair copies them to the third host),
    # and new files go to the two nodes left.
    deadline = time.time() + 15
    while b"nodes_expired 1\n" not in cli_ok(m, mh.node_hosts[2], "stats"):
        assert time.time() < deadline, "the dead node's segment was never dropped"
        time.sleep(0.2)
    for name in list(blobs)[::5]:
        assert read(mnt.p(name)) == blobs[name], name
    stats = [cli_ok(m, mh.node_hosts[2], "stat", name) for name in list(blobs)[:10]]
    assert all(b"replicas 1" in s or b"replicas 2" in s for s in stats), stats
    write(mnt.p("after"), b"after the kill")
    assert read(mnt.p("after")) == b"after the kill"
    assert cli_ok(m, mh.node_hosts[2], "get", "after") == b"after the kill"
    assert b"replicas 2" in cli_ok(m, mh.node_hosts[2], "stat", "after")


def test_cut_link_to_a_node_fails_over_without_hanging(mh):
    """The link to node b goes down (the process lives on, its peers get no
    reset): reads fail over to the other replica, writes fail or succeed but
    every call returns within a bound; once the master has dropped b, writes
    succeed again; when the link comes back b mounts its segment again and
    takes new data."""
    timeout = 1.0
    bound = 6 * timeout  # a call may wait on the master and a replica or two
    m = mh.master("--node-ttl-ms", "2000")
    nodes = [mh.node(m, h) for h in mh.node_hosts]
    b = nodes[1]
    mnt = mh.mount("--master", m.addr, "--segment-size", "0", "--listen", "none",
                   "--replicas", "2", "--timeout-ms", str(int(timeout * 1000)),
                   "--cache-timeout", "0")
    blobs = {}
    for i in range(30):
        blobs[f"g{i:02d}"] = os.urandom(20000 + i * 1000)
        write(mnt.p(f"g{i:02d}"), blobs[f"g{i:02d}"])
    total = sum(map(len, blobs.values()))
    # b holds a replica of about two thirds of the files.
    assert b.host.counters()[0] >= total // 3
    b.host.cut()
    # A write at once, while the master still places replicas on b: it may
    # fail, but within the bound.
    try:
        bounded(mh, bound, write, mnt.p("during"), b"while b is cut")
    except OSError:
        pass
    # Each read is served intact, from a replica that is not on b, in bound.
    rx0, _ = mh.client.counters()
    for name, data in blobs.items():
        got, took = bounded(mh, bound, read, mnt.p(name))
        assert got == data, name
    assert mh.client.counters()[0] - rx0 >= total  # over the network, not a cache
    for name in list(blobs)[::3]:
        out, took = bounded(mh, bound + 5, cli_ok, m, mh.node_hosts[0],
                            "--timeout-ms", str(int(timeout * 1000)), "get", name)
        assert out == blobs[name], name
    # Once the master has dropped the silent node, writes succeed again.
    deadline = time.time() + 15
    while True:
        try:
            bounded(mh, bound, write, mnt.p("after"), b"written while b is cut")
            break
        except OSError:
            assert time.time() < deadline, "writes did not come back while b was cut"
            time.sleep(0.2)
    assert read(mnt.p("after")) == b"written while b is cut"
    # Mend the link: b mounts its segment again when the master asks and,
    # being the emptiest, soon receives new data over its link.
    b.host.mend()
    data = os.urandom(256 * 1024)
    deadline = time.time() + 15
    for i in range(1000):
        assert time.time() < deadline, "node b got no data after its link came back"
        rx0, _ = b.host.counters()
        try:
            bounded(mh, bound, write, mnt.p(f"back{i}"), data)
        except OSError:
            time.sleep(0.2)  # a write to b may time out while its connection recovers
            continue
        if b.host.counters()[0] - rx0 >= len(data):
            break
        time.sleep(0.2)
    assert read(mnt.p(f"back{i}")) == data
    assert cli_ok(m, mh.node_hosts[1], "get", f"back{i}") == data
