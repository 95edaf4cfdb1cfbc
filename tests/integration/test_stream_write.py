"""The streaming cluster mount's writes as the node takes them: a WRITE of
32 KiB or more over TCP is received straight into the node's segment (no
copy through the connection's read buffer). What a user relies on: the
bytes read back are the bytes written, and a writer that dies in the
middle of a WRITE's body leaves the node serving everyone else, with
nothing of the dead writer's unfinished version published."""

import os
import random
import re
import subprocess
import urllib.request

from harness import free_port, wait_for

MiB = 1 << 20
CLIENT = ("--segment-size", "0", "--no-shm")
PLACED = "mooncake_server_segment_bytes_placed_total"
WRITTEN = 'mooncake_server_segment_bytes_total{direction="write"}'


def metric(port, sample):
    """The value of one sample line (name{labels}) of /metrics at port."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(r"^" + re.escape(sample) + r" (\S+)$", text, re.M)
    assert m, f"no {sample} in:\n{text}"
    return float(m.group(1))


def node_and_mounts(cluster, size, n):
    """A master, a node of size serving /metrics, and n client mounts;
    returns (node, its metrics port, mounts)."""
    m = cluster.master()
    port = free_port()
    node = cluster.node(m, size, "--metrics", str(port))
    return node, port, [cluster.mount("--master", m.addr, *CLIENT) for _ in range(n)]


def test_a_streamed_write_is_placed_in_the_segment_and_reads_back(cluster, tmp_path):
    node, port, (a, b) = node_and_mounts(cluster, "128M", 2)
    data = random.Random(7).randbytes(24 * MiB + 4321)
    src = tmp_path / "src"
    src.write_bytes(data)
    placed0, written0 = metric(port, PLACED), metric(port, WRITTEN)
    subprocess.run(["dd", f"if={src}", f"of={a.p('f')}", "bs=1M", "status=none"], check=True,
                   timeout=120)
    with open(b.p("f"), "rb") as f:
        assert f.read() == data
    assert metric(port, WRITTEN) - written0 == len(data)
    # 1 MiB writes go to the node in pieces of up to 1 MiB: nearly every
    # byte is received in place (a piece under 32 KiB, at an extent's edge,
    # goes through the read buffer).
    assert metric(port, PLACED) - placed0 >= len(data) // 2


def test_a_writer_killed_mid_write_leaves_the_node_serving(cluster, tmp_path):
    node, port, (a, b, c) = node_and_mounts(cluster, "512M", 3)
    placed0 = metric(port, PLACED)
    dd = subprocess.Popen(["dd", "if=/dev/zero", f"of={a.p('big')}", "bs=1M", "count=400"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: metric(port, PLACED) > placed0, timeout=60,
                 what="the node receiving the writer's bytes in place")
        a.kill9()  # mid-stream: most likely mid-body too
        a.abandon()  # and unmounted (lazily), as a dead daemon's mount would be by hand
    finally:
        dd.kill()
        dd.wait()
    # The node carries on: another client's write reads back whole.
    data = random.Random(8).randbytes(16 * MiB + 99)
    src = tmp_path / "src"
    src.write_bytes(data)
    subprocess.run(["dd", f"if={src}", f"of={c.p('g')}", "bs=1M", "status=none"], check=True,
                   timeout=120)
    with open(b.p("g"), "rb") as f:
        assert f.read() == data
    assert node.proc.poll() is None
    # Nothing of the dead writer's version in progress was published: at
    # most the empty file its create made.
    assert not os.path.exists(b.p("big")) or os.path.getsize(b.p("big")) == 0
