"""Lost replicas come back, and writes go on when a replica's node dies:
mooncake-master with a short node TTL, nodes (mooncake-cli node), clients
through mooncake-cli and a mooncake-fs mount. Every process is real; every
wait is bounded."""

import os
import time

import pytest

from harness import cli, cli_stats

MiB = 1 << 20


def stats(master):
    """The master's counters, as `mooncake-cli stats --json` prints them."""
    return cli_stats(master.addr)["counters"]


def replicas(master, key):
    r = cli(master.addr, "stat", key)
    assert r.returncode == 0, (key, r.stderr)
    return int(r.stdout.split(b"replicas ")[1].split()[0])


def wait_for(what, cond, timeout=30):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, f"{what}: not after {timeout} s"
        time.sleep(0.2)


def put(master, key, data, *args):
    r = cli(master.addr, "--replicas", "2", *args, "put", key, input=data)
    assert r.returncode == 0, (key, r.stderr)


def get(master, key):
    r = cli(master.addr, "get", key)
    assert r.returncode == 0, (key, r.stderr)
    return r.stdout


def test_lost_replicas_are_restored_before_the_next_node_dies(cluster):
    m = cluster.master("--node-ttl-ms", "2500")
    nodes = [cluster.node(m) for _ in range(3)]
    blobs = {f"k{i:02d}": os.urandom(1 + (i * 104729) % (700 * 1024)) for i in range(24)}
    blobs["big"] = os.urandom(9 * MiB + 3)  # several 4 MiB pieces
    blobs["empty"] = b""
    for key, data in blobs.items():
        put(m, key, data)
    assert all(replicas(m, k) == 2 for k in blobs)

    # The first node dies: once the master drops it, every object it held
    # gets its second replica back on the node that had none.
    nodes[0].kill9()
    wait_for("the first dead node dropped", lambda: stats(m)["nodes_expired"] == 1)
    wait_for("replicas restored", lambda: all(replicas(m, k) == 2 for k in blobs))
    st = stats(m)
    assert st["repair_done"] >= 1 and st["repair_bytes"] >= 1, st
    assert st["repair_inflight"] == 0, st

    # Then the second: without the repair, the objects that lived on these
    # two nodes would be gone now.
    nodes[1].kill9()
    wait_for("the second dead node dropped", lambda: stats(m)["nodes_expired"] == 2)
    assert stats(m)["objects_lost"] == 0
    for key, data in blobs.items():
        assert get(m, key) == data, key


def test_repair_counters_in_cli_stats(cluster):
    # Nodes beat every second: a TTL of two and a half beats expires the
    # killed node soon, but no live one whose beat a busy machine delays.
    m = cluster.master("--node-ttl-ms", "2500", "--repair-inflight", "1", "--repair-mbps", "100")
    nodes = [cluster.node(m) for _ in range(3)]
    data = os.urandom(3 * MiB)
    for i in range(4):
        put(m, f"s{i}", data)
    r = cli(m.addr, "--stats", "stat", "s0")
    assert r.returncode == 0, r.stderr
    assert b"master: nodes 3 " in r.stderr and b" repair_done 0 " in r.stderr, r.stderr
    nodes[2].kill9()
    wait_for("the dead node dropped", lambda: stats(m)["nodes_expired"] == 1)
    wait_for("replicas restored", lambda: all(replicas(m, f"s{i}") == 2 for i in range(4)))
    r = cli(m.addr, "--stats", "stat", "s0")
    line = [l for l in r.stderr.decode().splitlines() if l.startswith("master:")][0].split()[1:]
    st = dict(zip(line[::2], map(int, line[1::2])))
    assert st["repair_started"] >= 1 and st["repair_done"] == st["repair_started"], st
    assert st["repair_bytes"] == st["repair_done"] * len(data), st
    assert st["nodes_expired"] == 1 and st["repair_failed"] == 0, st


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_writes_go_on_when_a_replica_node_dies(cluster, make_mount, how):
    """kill -9 or SIGSTOP of a node holding replicas while a mount and a C
    client write with 2 replicas: every write succeeds, before the master's
    node TTL runs out (nothing waits for it), and reads back."""
    m = cluster.master("--node-ttl-ms", "8000")
    nodes = [cluster.node(m, "64M", "--no-shm") for _ in range(3)]
    mnt = make_mount("--master", m.addr, "--segment-size", "0", "--replicas", "2",
                     "--timeout-ms", "1500", "--no-shm")
    files = {}
    for i in range(4):
        files[f"before{i}"] = os.urandom(200 * 1024 + i)
        with open(mnt.p(f"before{i}"), "wb") as f:
            f.write(files[f"before{i}"])
    # One file is open for writing across the node's death.
    held = open(mnt.p("held-open"), "wb")
    files["held-open"] = os.urandom(5 * MiB)
    held.write(files["held-open"][:MiB])
    held.flush()
    victim = nodes[0]
    if how == "kill":
        victim.kill9()
    else:
        victim.pause()
    try:
        # A C client's put placed on the victim first: it drops that replica.
        blobs = {"c-put": os.urandom(2 * MiB + 5)}
        put(m, "c-put", blobs["c-put"], "--no-shm", "--timeout-ms", "1500",
            "--preferred", victim.addr)
        # A stream of writes through the mount.
        for i in range(12):
            data = os.urandom(300 * 1024 + i * 4099)
            files[f"after{i}"] = data
            with open(mnt.p(f"after{i}"), "wb") as f:
                f.write(data)
        held.write(files["held-open"][MiB:])
        held.close()
        st = stats(m)
        # The node is still a member: no write waited for its TTL.
        assert st["nodes_expired"] == 0, st
        assert st["replicas_dropped"] >= 1, st
        assert replicas(m, "c-put") >= 1
    finally:
        if how == "stop":
            victim.resume()
        if not held.closed:  # a failed test must not keep the mount busy
            try:
                held.close()
            except OSError:
                pass
    for name, data in files.items():
        with open(mnt.p(name), "rb") as f:
            assert f.read() == data, name
    assert get(m, "c-put") == blobs["c-put"]
    if how == "kill":
        # After the TTL the repair brings every object back to 2 replicas.
        wait_for("replicas restored",
                 lambda: all(replicas(m, k) == 2 for k in [*files, "c-put"]), timeout=40)
        for name, data in files.items():
            with open(mnt.p(name), "rb") as f:
                assert f.read() == data, name
