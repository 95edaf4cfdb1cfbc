"""The streaming cluster mount: mounts that are clients of a master, every
byte over TCP to the nodes (--no-shm, no segment of their own). Reads of a
file read sequentially are fetched ahead (--readahead), writes are answered
while earlier ones are still in flight (--write-behind). What a user relies
on: the bytes are the file's, byte for byte, whatever the pattern of reads;
a reader keeps the version it opened while another client replaces it; a
node that dies fails the read over or fails it with an error, never with
wrong bytes; the daemon's memory stays within the read-ahead bound."""

import errno
import os
import random
import subprocess
import threading
import time

import pytest

from harness import wait_for

MiB = 1 << 20
CLIENT = ("--segment-size", "0", "--no-shm")
# What a read of a file whose every copy is gone may fail with (SEMANTICS:
# Faults): the node refused or reset the connection, or did not answer.
NODE_GONE = (errno.ECONNREFUSED, errno.ECONNRESET, errno.ETIMEDOUT, errno.EIO, errno.EHOSTUNREACH,
             errno.ENOTCONN, errno.EPIPE)


def source(tmp_path, name, size, seed):
    """A local file of size pseudo-random bytes; returns (path, bytes)."""
    data = random.Random(seed).randbytes(size)
    path = tmp_path / name
    path.write_bytes(data)
    return str(path), data


def writer_and_reader(cluster, node_size, *reader_args):
    """A master, one node of node_size, and two client mounts: (a, b), b
    with reader_args."""
    m = cluster.master()
    cluster.node(m, node_size)
    return (cluster.mount("--master", m.addr, *CLIENT),
            cluster.mount("--master", m.addr, *CLIENT, *reader_args))


def cmp(a, b):
    r = subprocess.run(["cmp", a, b], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("cache", ["pages", "direct"])
def test_big_sequential_write_and_reads_match(cluster, tmp_path, cache):
    a, b = writer_and_reader(cluster, "256M", "--cache-mode", cache)
    src, _ = source(tmp_path, "src", 40 * MiB + 12345, 1)
    # cp writes 128 KiB at a time; dd with 1 MiB blocks (the mount's largest
    # write); both published whole at close.
    subprocess.run(["cp", src, a.p("f")], check=True, timeout=120)
    subprocess.run(["dd", f"if={src}", f"of={a.p('g')}", "bs=1M", "status=none"], check=True,
                   timeout=120)
    cmp(src, b.p("f"))
    # 128 KiB and 1 MiB application reads through the other mount.
    for bs, name in (("128K", "g"), ("1M", "f")):
        out = tmp_path / f"out-{bs}"
        subprocess.run(["dd", f"if={b.p(name)}", f"of={out}", f"bs={bs}", "status=none"],
                       check=True, timeout=120)
        cmp(src, str(out))
        out.unlink()
    assert os.path.getsize(b.p("g")) == os.path.getsize(src)


@pytest.mark.parametrize("cache", ["pages", "direct"])
def test_random_reads_between_sequential_ones(cluster, tmp_path, cache):
    a, b = writer_and_reader(cluster, "128M", "--cache-mode", cache)
    src, data = source(tmp_path, "src", 24 * MiB + 777, 2)
    subprocess.run(["cp", src, a.p("f")], check=True, timeout=120)
    rnd = random.Random(3)
    fd = os.open(b.p("f"), os.O_RDONLY)
    try:
        off = 0
        while off < len(data):
            n = rnd.choice([4096, 128 * 1024, 1 << 20])
            assert os.pread(fd, n, off) == data[off:off + n], off
            off += n
            if rnd.random() < 0.3:  # a seek elsewhere, then back to the stream
                at = rnd.randrange(len(data))
                size = rnd.choice([1, 5000, 300 * 1024])
                assert os.pread(fd, size, at) == data[at:at + size], at
            if rnd.random() < 0.05:  # a read past the end
                assert os.pread(fd, 100, len(data) + rnd.randrange(10)) == b""
        # Backwards, block by block.
        for off in range(len(data) - 64 * 1024, 0, -3 * MiB):
            assert os.pread(fd, 64 * 1024, off) == data[off:off + 64 * 1024], off
    finally:
        os.close(fd)


@pytest.mark.parametrize("cache", ["pages", "direct"])
def test_reader_keeps_its_version_while_another_client_replaces_it(cluster, tmp_path, cache):
    a, b = writer_and_reader(cluster, "256M", "--cache-mode", cache)
    src1, old = source(tmp_path, "v1", 16 * MiB + 3, 4)
    src2, new = source(tmp_path, "v2", 12 * MiB + 5, 5)
    subprocess.run(["cp", src1, a.p("f")], check=True, timeout=120)
    with open(b.p("f"), "rb", buffering=0) as f:
        got = f.read(3 * MiB)  # the stream is running: blocks of the old version are fetched
        # Replaced by the other client, in place (O_TRUNC) ...
        subprocess.run(["cp", src2, a.p("f")], check=True, timeout=120)
        got += f.read(5 * MiB)
        # ... and by a rename over it.
        subprocess.run(["cp", src2, a.p("tmp")], check=True, timeout=120)
        os.rename(a.p("tmp"), a.p("f"))
        while True:
            chunk = f.read(128 * 1024)
            if not chunk:
                break
            got += chunk
    assert got == old  # its own version, whole
    # An open after the replacement reads the new version, whole: nothing
    # of the old one read ahead shows.
    with open(b.p("f"), "rb") as f:
        assert f.read() == new
    cmp(src2, b.p("f"))


def test_node_killed_mid_stream_fails_over(cluster, tmp_path):
    m = cluster.master("--node-ttl-ms", "3000")
    nodes = cluster.nodes(m, 2, "128M")
    a = cluster.mount("--master", m.addr, *CLIENT, "--replicas", "2")
    b = cluster.mount("--master", m.addr, *CLIENT, "--cache-mode", "direct", "--timeout-ms", "3000")
    src, data = source(tmp_path, "src", 24 * MiB, 6)
    subprocess.run(["cp", src, a.p("f")], check=True, timeout=120)
    with open(b.p("f"), "rb", buffering=0) as f:
        got = f.read(4 * MiB)
        nodes[0].kill9()
        while True:
            chunk = f.read(128 * 1024)
            if not chunk:
                break
            got += chunk
    assert got == data  # the other replica served the rest
    cmp(src, b.p("f"))


def test_node_with_the_only_copy_killed_mid_stream_fails_the_read(cluster, tmp_path):
    m = cluster.master("--node-ttl-ms", "60000")
    node = cluster.node(m, "128M")
    a = cluster.mount("--master", m.addr, *CLIENT)
    b = cluster.mount("--master", m.addr, *CLIENT, "--cache-mode", "direct", "--timeout-ms", "3000")
    src, data = source(tmp_path, "src", 32 * MiB, 7)
    subprocess.run(["cp", src, a.p("f")], check=True, timeout=120)
    got = b""
    with open(b.p("f"), "rb", buffering=0) as f:
        got = f.read(2 * MiB)
        node.kill9()
        with pytest.raises(OSError) as e:
            while True:
                chunk = f.read(128 * 1024)
                assert chunk, "read the whole file from a node that is gone"
                got += chunk
    assert e.value.errno in NODE_GONE, e.value
    assert got == data[:len(got)]  # what it did return is the file's


@pytest.mark.parametrize("cache", ["pages", "direct"])
def test_node_stalled_mid_stream_fails_the_read_in_time(cluster, tmp_path, cache):
    """The node stops (SIGSTOP) while read-ahead blocks are being received
    from it, most likely in the middle of one's body: the read fails within
    the transfer timeout with an error (the connection is closed under the
    blocks being received into), never hangs and never returns bytes that
    are not the file's; the mount keeps working once the node is back."""
    m = cluster.master("--node-ttl-ms", "60000")
    node = cluster.node(m, "128M")
    a = cluster.mount("--master", m.addr, *CLIENT)
    b = cluster.mount("--master", m.addr, *CLIENT, "--cache-mode", cache, "--timeout-ms", "1000")
    src, data = source(tmp_path, "src", 48 * MiB, 8)
    subprocess.run(["cp", src, a.p("f")], check=True, timeout=120)
    got = b""
    try:
        with open(b.p("f"), "rb", buffering=0) as f:
            got = f.read(MiB)
            node.pause()
            t0 = time.monotonic()
            with pytest.raises(OSError) as e:
                while True:
                    chunk = f.read(128 * 1024)
                    assert chunk, "read the whole file from a node that is stopped"
                    got += chunk
            assert time.monotonic() - t0 < 20
    finally:
        node.resume()
    assert e.value.errno in NODE_GONE, e.value
    assert got == data[:len(got)]  # what it did return is the file's
    # The node is back: once the client has reconnected (it backs off after
    # the loss, and fails reads with ENOTCONN meanwhile), a new read gets it all.
    def reads_whole():
        try:
            with open(b.p("f"), "rb") as f:
                back = f.read()
        except OSError as err:
            if err.errno in NODE_GONE:
                return False
            raise
        assert back == data
        return True

    wait_for(reads_whole, "the file read whole once the node is back", timeout=15)


def rss_mib(proc):
    return proc.rss() / MiB


@pytest.mark.skipif(os.environ.get("MC_SANITIZED") == "1",
                    reason="AddressSanitizer's shadow memory and quarantine inflate RSS")
def test_read_ahead_memory_is_bounded(cluster, tmp_path):
    total = 8  # MiB
    a, b = writer_and_reader(cluster, "256M", "--cache-mode", "direct", "--readahead", "4M",
                             "--total-readahead", f"{total}M")
    files = 16
    blobs = [random.Random(10 + i).randbytes(6 * MiB) for i in range(files)]
    for i, blob in enumerate(blobs):
        with open(a.p(f"f{i}"), "wb") as f:
            f.write(blob)
    base = rss_mib(b)
    fds = [os.open(b.p(f"f{i}"), os.O_RDONLY) for i in range(files)]
    peak = base
    try:
        # Every file read sequentially at once, round robin: each stream
        # would keep 4 MiB ahead, 64 MiB together, but the total is 8 MiB.
        for off in range(0, 6 * MiB, 256 * 1024):
            for i, fd in enumerate(fds):
                assert os.pread(fd, 256 * 1024, off) == blobs[i][off:off + 256 * 1024], (i, off)
            peak = max(peak, rss_mib(b))
    finally:
        for fd in fds:
            os.close(fd)
    # The margin: libfuse's request buffers and the reads' own buffers.
    assert peak - base < total + 24, (base, peak)


@pytest.mark.parametrize("cache", ["pages", "direct"])
def test_readers_of_one_file_at_once(cluster, tmp_path, cache):
    """Regression: with the page cache, every reader of a file on the mount
    reads through one open version, so their streams interleave there and
    seek while others' reads wait for blocks; a read waiting for a block
    that a seek dropped was never answered (the reader hung)."""
    a, b = writer_and_reader(cluster, "128M", "--cache-mode", cache)
    src, data = source(tmp_path, "src", 20 * MiB + 99, 8)
    subprocess.run(["cp", src, a.p("f")], check=True, timeout=120)
    errors = []

    def read_from(start, step):
        try:
            with open(b.p("f"), "rb", buffering=0) as f:
                f.seek(start)
                off = start
                while True:
                    chunk = f.read(step)
                    if not chunk:
                        break
                    assert chunk == data[off:off + len(chunk)], off
                    off += len(chunk)
                assert off == len(data)
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=read_from, args=(start, step))
               for start, step in ((0, 128 * 1024), (7 * MiB + 5, 64 * 1024), (13 * MiB, MiB),
                                   (3 * MiB, 4096))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a reader hung"
    assert not errors, errors
