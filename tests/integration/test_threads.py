"""--threads N (issue 14, "every core"): besides the loop, N - 1 threads read
FUSE requests; they answer READs whose bytes are a version that cannot change
under them straight from segment memory, and hand every other request to the
loop. Several processes read different files and the same file at once, and
each gets exactly the bytes written (cmp); a file replaced by another client
while it is read is seen by each open as one version, whole; unmounting while
reads are in flight leaves a daemon that exits 0. Both cache modes; the
workers must have answered reads (mooncake_fuse_worker_reads_total)."""

import os
import signal
import subprocess
import time

import pytest

from harness import cli, free_port, wait_for
from test_metrics import scrape
from test_stream import NODE_GONE

MiB = 1 << 20
# the loop and two workers, even on 2 cores (MC_TEST_THREADS=1: the same
# tests against one thread)
THREADS = os.environ.get("MC_TEST_THREADS", "3")


def worker_reads(port):
    return scrape(port).get(("mooncake_fuse_worker_reads_total", ""), 0)


def fuse_reads(port):
    return scrape(port).get(("mooncake_fuse_requests_total", 'opcode="READ"'), 0)


def put(m, key, data):
    """Publishes data as key through another client of the store."""
    r = cli(m.store_addr, "put", key, input=data)
    assert r.returncode == 0, r.stderr


def threads_mount(store_mount, cache, port):
    return store_mount("256M", "--threads", THREADS, "--cache-mode", cache, "--metrics",
                       str(port))


@pytest.mark.parametrize("cache", ["direct", "pages"])
def test_parallel_readers_of_different_and_the_same_files(store_mount, tmp_path, cache):
    port = free_port()
    m = threads_mount(store_mount, cache, port)
    sizes = [8 * MiB + 12345, 5 * MiB, 3 * MiB + 1]
    refs = []
    for i, size in enumerate(sizes):
        data = os.urandom(size)
        ref = tmp_path / f"ref{i}"
        ref.write_bytes(data)
        refs.append(ref)
        # published by another client: the mount's page cache holds none of it
        put(m, f"f{i}", data)
    # a sparse file, written through the mount: its holes are views of zeros
    hole = tmp_path / "ref3"
    with open(hole, "wb") as r, open(m.p("f3"), "wb") as f:
        for off, data in ((3 * MiB + 7, b"x" * 5000), (9 * MiB, b"y" * MiB), (20 * MiB - 1, b"z")):
            for out in (r, f):
                out.seek(off)
                out.write(data)
    refs.append(hole)
    # four processes on f0 at once, one on each of the others, twice over
    pairs = [(0, refs[0])] * 4 + [(i, refs[i]) for i in (1, 2, 3, 3)]
    for _ in range(2):
        procs = [subprocess.Popen(["cmp", m.p(f"f{i}"), str(ref)]) for i, ref in pairs]
        assert [p.wait(timeout=60) for p in procs] == [0] * len(procs)
    # The loop reads the device too: which thread takes a request is a race,
    # but over hundreds of READs the workers take some.
    assert THREADS == "1" or worker_reads(port) > 0, "no READ was answered by a worker"


def uniform_version(data):
    """The version i a reader got: i bytes of value i + 1 ... all the same
    byte b, and exactly size_of(b) of them; None when mixed or cut."""
    if not data or data.count(data[0]) != len(data) or len(data) != size_of(data[0]):
        return None
    return data[0]


def size_of(b):
    return MiB + 4099 * b  # each version another size, none a page multiple


READER = r"""
import sys
path, stop = sys.argv[1], sys.argv[2]
import os
seen = set()
while not os.path.exists(stop):
    with open(path, "rb") as f:
        data = f.read()
    b = data[0] if data else -1
    if not data or data.count(data[0]) != len(data) or len(data) != (1 << 20) + 4099 * b:
        runs, at = [], 0
        while at < len(data) and len(runs) < 8:
            end = at
            while end < len(data) and data[end] == data[at]:
                end += 1
            runs.append((data[at], at, end))
            at = end
        print(f"mixed or cut: {len(data)} bytes: runs {runs}")
        sys.exit(1)
    seen.add(b)
print(len(seen))
"""


@pytest.mark.parametrize("cache", ["direct", "pages"])
def test_a_file_replaced_while_read_is_seen_whole(store_mount, tmp_path, cache):
    port = free_port()
    m = threads_mount(store_mount, cache, port)
    put(m, "f", bytes([1]) * size_of(1))
    stop = tmp_path / "stop"
    readers = [subprocess.Popen(["/usr/bin/python3", "-c", READER, m.p("f"), str(stop)],
                                stdout=subprocess.PIPE, text=True) for _ in range(4)]
    try:
        for b in range(2, 14):
            put(m, "f", bytes([b]) * size_of(b))
    finally:
        stop.touch()
    outs = [r.communicate(timeout=60)[0] for r in readers]
    assert [r.returncode for r in readers] == [0] * 4, outs
    with open(m.p("f"), "rb") as f:
        assert uniform_version(f.read()) == 13
    assert THREADS == "1" or worker_reads(port) > 0, "no READ was answered by a worker"


READ_FOREVER = r"""
import sys
while True:
    try:
        with open(sys.argv[1], "rb") as f:
            while f.read(1 << 20):
                pass
    except OSError:
        sys.exit(0)  # unmounted
"""


@pytest.mark.parametrize("cache", ["direct", "pages"])
@pytest.mark.parametrize("how", ["sigterm", "lazy-unmount"])
def test_unmount_while_reads_are_in_flight(store_mount, cache, how):
    port = free_port()
    m = threads_mount(store_mount, cache, port)
    put(m, "big", os.urandom(16 * MiB))
    readers = [subprocess.Popen(["/usr/bin/python3", "-c", READ_FOREVER, m.p("big")])
               for _ in range(4)]
    try:
        # (with the page cache, the kernel soon serves every read itself)
        wait_for(lambda: fuse_reads(port) > 0, "the daemon to answer a read", timeout=30)
        time.sleep(0.2)  # the readers keep reading: stop in the middle of it
        if how == "sigterm":
            assert m.stop(signal.SIGTERM) == 0
        else:
            # The mount point goes at once; the daemon ends when the last
            # reader has closed the file (the readers' next open fails).
            subprocess.run(["fusermount3", "-uz", m.path], check=True)
            m.stopping = True
            assert m.wait_exit() == 0
    finally:
        for r in readers:
            try:
                r.wait(timeout=30)
            except subprocess.TimeoutExpired:
                r.kill()
                r.wait()
    assert all(r.returncode == 0 for r in readers)


def test_threads_option_is_checked(make_mount, tmp_path):
    from harness import DAEMON
    for bad in ("0", "x", "257"):
        r = subprocess.run([DAEMON, "-f", "--threads", bad, str(tmp_path)], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode != 0 and "--threads" in r.stderr, (bad, r.stderr)
    m = make_mount("--segment-size", "16M", "--threads", "1")
    with open(m.p("f"), "wb") as f:
        f.write(b"one thread")
    with open(m.p("f"), "rb") as f:
        assert f.read() == b"one thread"


def test_workers_reading_a_node_killed_while_its_file_is_open(cluster, tmp_path):
    """Regression: when a node on this host died, its shm socket closed and
    the client unmapped its segment while the workers still replied from
    views into it: writev failed with EFAULT ("replying to a read: Bad
    address") and the reader got EIO. The mapping stays until the store
    closes: a worker's reply of the open version is its bytes; the loop,
    which reads the dead node over TCP now, fails a read with the
    connection's error."""
    m = cluster.master()
    node = cluster.node(m)
    port = free_port()
    mnt = cluster.mount("--master", m.addr, "--segment-size", "0", "--threads", THREADS,
                        "--cache-mode", "direct", "--metrics", str(port))
    data = os.urandom(4 * MiB)
    with open(mnt.p("f"), "wb") as f:
        f.write(data)
    fd = os.open(mnt.p("f"), os.O_RDONLY)
    try:
        assert os.pread(fd, MiB, 0) == data[:MiB]
        node.kill9()
        base, served = worker_reads(port), 0
        for i in range(5000):
            off = (i * 7 * 4096) % (len(data) - 4096)
            try:
                assert os.pread(fd, 4096, off) == data[off:off + 4096], off
                served += 1
            except OSError as e:
                assert e.errno in NODE_GONE, e
            if i % 100 == 99 and worker_reads(port) - base >= 20:
                break
        assert worker_reads(port) - base >= 20, "the workers answered no reads after the kill"
        assert served
    finally:
        os.close(fd)
