"""The cluster across hosts: mooncake-master, nodes and a mount each in its
own network namespace, joined by veth pairs to a bridge (netns.py). Nothing
listens on loopback; every byte crosses the veth links, which the interface
counters prove. Skipped, with the reason, where namespaces cannot be made.

Topology (10.200.0.0/24, reachable only from these namespaces):
    master .1   node a .2   node b .3   node c .4   client (the mount) .5

Every process has the cluster's secret: without one, a server refuses to
listen beyond loopback."""

import json
import os
import subprocess
import threading
import time

import pytest

import netns
from harness import CLI, Cluster, cli

MiB = 1 << 20


class MultiHost(Cluster):
    """A harness.Cluster whose processes run in the namespaces of a private
    network: the master, three node hosts and a client host for the mounts.
    close() also requires that no process is left in the namespaces, and
    deletes them, whatever happened before."""

    def __init__(self, tmp):
        super().__init__(tmp)
        self.net = netns.Net()
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
        m = super().master("--auth-secret-file", self.key, *args, netns=self.master_host.ns,
                           host=self.master_host.addr)
        m.key = self.key
        return m

    def node(self, master, host, size="64M"):
        n = super().node(master, size, "--auth-secret-file", self.key, netns=host.ns,
                         host=host.addr)
        n.host = host
        return n

    def mount(self, *args, expect_log=None):
        return super().mount("--auth-secret-file", self.key, *args, netns=self.client.ns,
                             expect_log=expect_log)

    def close(self):
        try:
            errors = super().close()
            left = self.net.pids()
            for pid in left:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            if left:
                errors.append(f"processes left in the namespaces: {left}")
        finally:
            self.kill_all()
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


def cli_ok(master, host, *args, input=None, timeout=30):
    r = cli(master.addr, "--auth-secret-file", master.key, *args, input=input, netns=host.ns,
            timeout=timeout)
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
    while json.loads(cli_ok(m, mh.node_hosts[2], "stats", "--json"))["counters"][
            "nodes_expired"] != 1:
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
    # A client of its own on host a: its calls to the master (not cut) get
    # 3 timeouts' worth, so that a loaded machine does not fail them; a
    # replica on b costs it one wait before it fails over, within the bound.
    for name in list(blobs)[::3]:
        out, took = bounded(mh, bound + 5, cli_ok, m, mh.node_hosts[0],
                            "--timeout-ms", str(int(3 * timeout * 1000)), "get", name)
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


def test_a_slow_link_moves_an_object_many_timeouts_long(mh):
    """A timeout bounds each wait for the network, not a whole transfer:
    over a link of 300 Mbit/s, 96 MiB take about 2.7 s each way, and with
    --timeout-ms 2000 a put and a get of them from the client's host
    succeed. A get used to send every piece's request at once, so its last
    pieces waited for the whole object to cross and timed out; a put's
    pieces waited behind up to 64 MiB. Now a connection keeps at most
    32 MiB in flight (rpc.h's window), 0.9 s of this link."""
    try:
        mh.client.limit(300)
    except netns.NetnsUnavailable as e:
        pytest.skip(f"cannot slow a link here: {e}")
    m = mh.master()
    mh.node(m, mh.node_hosts[0], "256M")
    data = os.urandom(96 * MiB)
    cli_ok(m, mh.client, "--timeout-ms", "2000", "put", "big", input=data, timeout=60)
    assert cli_ok(m, mh.client, "--timeout-ms", "2000", "get", "big", timeout=60) == data


def test_a_get_slower_than_its_read_lease_never_returns_another_objects_bytes(mh):
    """A get holds a read lease (GET_REPLICAS), not a handle, and the lease
    is all that keeps the version's space from being reused. Over a slow
    link a get lasts longer than the lease (a timeout bounds each wait, not
    a whole transfer: the test above), so the key can be removed once the
    lease ran out, and its space given to another object, while the get
    still reads it. The get must then return the whole version it asked
    for (or fail), never the other object's bytes."""
    try:
        mh.client.limit(100)  # 64 MiB: about 5.4 s
    except netns.NetnsUnavailable as e:
        pytest.skip(f"cannot slow a link here: {e}")
    m = mh.master("--lease-ms", "500")
    near = mh.node_hosts[0]
    mh.node(m, near, "80M")  # room for one 64 MiB object: b takes a's space
    a = b"\xaa" * (64 * MiB)
    cli_ok(m, near, "put", "a", input=a, timeout=60)
    reader = subprocess.Popen(
        mh.client.wrap([CLI, "--master", m.addr, "--auth-secret-file", m.key,
                                      "--timeout-ms", "4000", "get", "a"]),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.2)  # the lease (0.5 s) is over; the get has a third of the bytes
    cli_ok(m, near, "rm", "a")  # no -f: allowed, nothing holds a
    cli_ok(m, near, "put", "b", input=b"\xbb" * (64 * MiB), timeout=60)
    out, err = reader.communicate(timeout=60)
    if reader.returncode != 0:  # failing is allowed (a is gone); foreign bytes are not
        assert b"No such file" in err, err
        return
    foreign = len(out) - out.count(0xAA)
    assert len(out) == len(a) and foreign == 0, (
        f"get a returned {len(out)} bytes, {foreign} of them not a's "
        f"(first at {next((i for i, c in enumerate(out) if c != 0xAA), None)})")
