"""Sparse files (issue 10): a hole takes no space in the store and reads as
zeros, through a real mount, embedded and in a cluster: one byte far past
the store's size, `cp --sparse=always`, a hole filled by a later write,
truncate growing a file, fallocate's PUNCH_HOLE, fallocate giving holes
space (or ENOSPC, changing nothing), st_blocks and `du`,
lseek's SEEK_DATA and SEEK_HOLE; in a
cluster a sparse file survives a restart of the master and, replicated on
two nodes, the death of one of them."""

import errno
import os
import subprocess
import threading

import pytest

from harness import cli, cli_stats, free_port, wait_for
from test_metrics import scrape
from test_space import FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, fallocate

MiB = 1 << 20


def blocks(path):
    """Bytes the file takes, as st_blocks says (`du`)."""
    return os.stat(path).st_blocks * 512


def used(m):
    """Bytes allocated in the store of mount m."""
    return cli_stats(m.store_addr)["used_bytes"]


def pread_file(path, off, n):
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, n, off)
    finally:
        os.close(fd)


def test_a_byte_past_the_store_is_a_sparse_file(store_mount):
    """One byte at 512 MiB in a 64 MiB store: written, read back after
    zeros, and only its allocation unit taken (st_blocks, du, the store);
    the same at the largest offset a file has. Past that the kernel
    answers (EFBIG, or EINVAL when offset + length overflows)."""
    m = store_mount("64M")
    base = used(m)
    p = m.p("f")
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
    assert os.pwrite(fd, b"x", 512 * MiB) == 1
    os.close(fd)
    assert os.stat(p).st_size == 512 * MiB + 1
    assert pread_file(p, 512 * MiB - 4096, 8192) == bytes(4096) + b"x"
    assert pread_file(p, 0, MiB) == bytes(MiB)
    assert pread_file(p, 300 * MiB + 5, MiB) == bytes(MiB)
    assert blocks(p) <= 4096
    du = subprocess.run(["du", "-k", p], capture_output=True, text=True, check=True)
    assert int(du.stdout.split()[0]) <= 4, du.stdout
    assert used(m) - base <= 4096

    g = m.p("g")
    fd = os.open(g, os.O_CREAT | os.O_WRONLY, 0o644)
    assert os.pwrite(fd, b"y", (1 << 63) - 2) == 1
    try:
        os.pwrite(fd, b"z", (1 << 63) - 1)
        raise AssertionError("a write past the largest file succeeded")
    except OSError as e:  # the kernel's answer: offset + length overflows
        assert e.errno in (errno.EFBIG, errno.EINVAL)
    os.close(fd)
    assert os.stat(g).st_size == (1 << 63) - 1
    assert pread_file(g, (1 << 63) - 3, 2) == b"\0y"
    assert used(m) - base <= 8192


def test_holes_through_cp_writes_truncate_and_punch(store_mount, tmp_path):
    """cp --sparse=always of a sparse file keeps its holes; a later write
    into a hole takes space there only; truncate grows with a hole; a
    punched range gives its space back and reads zeros; a copy out of the
    mount is the same file."""
    m = store_mount("64M")
    src = tmp_path / "src"
    parts = {0: os.urandom(10000), 40 * MiB: os.urandom(70000), 100 * MiB - 5: b"tail!"}
    with open(src, "wb") as f:
        for off, data in parts.items():
            f.seek(off)
            f.write(data)
    p = m.p("copy")
    subprocess.run(["cp", "--sparse=always", str(src), p], check=True)
    assert os.stat(p).st_size == 100 * MiB
    assert blocks(p) < MiB
    subprocess.run(["cmp", str(src), p], check=True)
    # lseek finds the holes and the bytes (by 64-byte allocation unit).
    fd = os.open(p, os.O_RDONLY)
    hole = os.lseek(fd, 0, os.SEEK_HOLE)
    assert 10000 <= hole < 20000
    assert os.lseek(fd, hole, os.SEEK_DATA) == 40 * MiB
    assert os.lseek(fd, 40 * MiB + 1, os.SEEK_DATA) == 40 * MiB + 1
    assert 40 * MiB + 70000 <= os.lseek(fd, 40 * MiB, os.SEEK_HOLE) < 41 * MiB
    assert os.lseek(fd, 100 * MiB - 1, os.SEEK_HOLE) == 100 * MiB  # the end
    try:
        os.lseek(fd, 100 * MiB, os.SEEK_DATA)
        raise AssertionError("SEEK_DATA at the end")
    except OSError as e:
        assert e.errno == errno.ENXIO
    os.close(fd)

    # A write into the hole, and the ranges around it still zeros.
    with open(p, "r+b") as f:
        f.seek(70 * MiB + 3)
        f.write(b"filled")
    assert pread_file(p, 70 * MiB - 4096, 8192) == bytes(4099) + b"filled" + bytes(4087)
    assert blocks(p) < MiB

    # Truncate grows with a hole.
    os.truncate(p, 1 << 30)
    assert os.stat(p).st_size == 1 << 30
    assert blocks(p) < MiB
    assert pread_file(p, 100 * MiB - 5, 4096) == b"tail!" + bytes(4091)

    # A punched range gives its space back.
    dense = m.p("dense")
    with open(dense, "wb") as f:
        f.write(b"d" * (8 * MiB))
    before = used(m)
    fd = os.open(dense, os.O_RDWR)
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1000, 6 * MiB)
    os.close(fd)
    assert os.stat(dense).st_size == 8 * MiB
    assert pread_file(dense, 0, 8 * MiB) == b"d" * 1000 + bytes(6 * MiB) + b"d" * (2 * MiB - 1000)
    assert before - used(m) >= 6 * MiB - 4096
    assert blocks(dense) <= 2 * MiB + 4096

    # And back out of the mount.
    out = tmp_path / "out"
    subprocess.run(["cp", "--sparse=always", p, str(out)], check=True)
    subprocess.run(["cmp", p, str(out)], check=True)


def fill_store(m, tmp_path, leave):
    """Puts one object that leaves `leave` bytes of the store of mount m
    free (through the C API: exactly its size, no headroom)."""
    st = cli_stats(m.store_addr)
    filler = tmp_path / "filler"
    filler.write_bytes(b"f" * (st["total_bytes"] - st["used_bytes"] - leave))
    r = cli(m.store_addr, "put", "filler", str(filler))
    assert r.returncode == 0, r.stderr


def test_fallocate_gives_holes_space(store_mount, tmp_path):
    """fallocate's default mode (and KEEP_SIZE inside the file) gives a
    sparse range space: SEEK_HOLE finds no hole there any more, st_blocks
    covers it, and writes into it succeed in a store that is full
    meanwhile. When the store cannot hold the range, fallocate fails with
    ENOSPC and nothing changes: size, bytes, blocks, and the file still
    writable and published at close."""
    m = store_mount("64M")
    p = m.p("f")
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
    os.pwrite(fd, b"a" * 4096, 0)
    os.ftruncate(fd, 16 * MiB)
    os.close(fd)
    before = blocks(p)
    assert before <= 64 * 1024

    fd = os.open(p, os.O_RDWR)
    fallocate(fd, 0, 4 * MiB, 8 * MiB)
    fallocate(fd, FALLOC_FL_KEEP_SIZE, 14 * MiB, 4 * MiB)  # past the end: only up to it
    assert os.fstat(fd).st_size == 16 * MiB
    assert os.lseek(fd, 4 * MiB, os.SEEK_HOLE) >= 12 * MiB
    assert os.lseek(fd, 14 * MiB, os.SEEK_HOLE) == 16 * MiB
    assert os.lseek(fd, 4096, os.SEEK_HOLE) < 4 * MiB  # a hole outside stays
    fill_store(m, tmp_path, 256 * 1024)  # less than any range left
    data = os.urandom(8 * MiB)
    assert os.pwrite(fd, data, 4 * MiB) == 8 * MiB
    assert os.pwrite(fd, data[:2 * MiB], 14 * MiB) == 2 * MiB
    os.close(fd)
    after = blocks(p)
    assert after - before >= 10 * MiB
    assert pread_file(p, 0, 4 * MiB) == b"a" * 4096 + bytes(4 * MiB - 4096)
    assert pread_file(p, 4 * MiB, 8 * MiB) == data
    assert pread_file(p, 12 * MiB, 2 * MiB) == bytes(2 * MiB)
    assert pread_file(p, 14 * MiB, 4 * MiB) == data[:2 * MiB]

    # No room: ENOSPC, and the file as it was.
    r = cli(m.store_addr, "rm", "filler")
    assert r.returncode == 0, r.stderr
    q = m.p("q")
    fd = os.open(q, os.O_CREAT | os.O_RDWR, 0o644)
    os.pwrite(fd, b"q" * 100, 0)
    os.ftruncate(fd, 200 * MiB)
    for mode, off, length in ((0, 0, 100 * MiB), (FALLOC_FL_KEEP_SIZE, 0, 300 * MiB),
                              (0, 150 * MiB, 300 * MiB)):
        with pytest.raises(OSError) as e:
            fallocate(fd, mode, off, length)
        assert e.value.errno == errno.ENOSPC
        assert os.fstat(fd).st_size == 200 * MiB
        assert os.lseek(fd, 0, os.SEEK_HOLE) < MiB
    assert os.pwrite(fd, b"r", 200 * MiB - 1) == 1
    os.close(fd)
    assert os.stat(q).st_size == 200 * MiB
    assert blocks(q) <= 64 * 1024
    assert pread_file(q, 0, 200) == b"q" * 100 + bytes(100)
    assert pread_file(q, 200 * MiB - 2, 2) == b"\0r"


def test_gaps_left_by_parallel_writers_read_zeros(store_mount):
    """Threads pwrite at random places past the end of one file at once
    (through one descriptor and through their own), in a store whose free
    space holds another file's bytes: every byte no write covered reads as
    zeros, before and after the close."""
    import random
    import threading

    m = store_mount("64M")
    junk = m.p("junk")
    with open(junk, "wb") as f:
        f.write(b"\xaa" * (48 * MiB))
    os.unlink(junk)
    rng = random.Random(10)
    slots = rng.sample(range(64), 32)
    writes = [(k * 256 * 1024 + rng.randrange(100000), os.urandom(rng.randrange(1, 100000)))
              for k in slots]
    p = m.p("f")
    shared = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)

    def writer(part, own):
        fd = os.open(p, os.O_RDWR) if own else shared
        for off, data in part:
            assert os.pwrite(fd, data, off) == len(data)
        if own:
            os.close(fd)

    threads = [threading.Thread(target=writer, args=(writes[i::8], i % 2)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want = bytearray(max(off + len(d) for off, d in writes))
    for off, data in writes:
        want[off:off + len(data)] = data
    assert os.pread(shared, len(want) + 1, 0) == want
    os.close(shared)
    assert pread_file(p, 0, len(want) + 1) == want


def write_sparse(path):
    """A file of 256 MiB with three runs of bytes between holes; returns
    {offset: bytes} of the runs."""
    runs = {5: os.urandom(3000), 64 * MiB + 1: os.urandom(5 * MiB), 256 * MiB - 7: b"the end"}
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    for off, data in runs.items():
        os.pwrite(fd, data, off)
    os.close(fd)
    return runs


def check_sparse(path, runs):
    assert os.stat(path).st_size == 256 * MiB
    for off, data in runs.items():
        assert pread_file(path, off - 5, len(data) + 5) == bytes(5) + data, off
    assert pread_file(path, 0, 5) == bytes(5)
    assert pread_file(path, 3005, 4 * MiB) == bytes(4 * MiB)
    assert pread_file(path, 200 * MiB, 4 * MiB) == bytes(4 * MiB)


def test_sparse_file_survives_a_master_restart(cluster):
    """A restarted master rebuilds a sparse file from the nodes' records:
    the same bytes, the holes still taking no space."""
    from test_restart import restart, settled

    m = cluster.master()
    cluster.nodes(m, 2, "32M")
    mnt = cluster.mount("--master", m.addr, "--segment-size", "0", "--cache-mode", "direct")
    runs = write_sparse(mnt.p("s"))
    check_sparse(mnt.p("s"), runs)
    used_before = cli_stats(m.addr)["used_bytes"]
    assert used_before < 6 * MiB
    settled(m)
    m2 = restart(cluster, m)
    wait_for(lambda: cli(m2.addr, "stat", "s").returncode == 0, "the nodes to report")
    assert cli_stats(m2.addr)["used_bytes"] == used_before
    check_sparse(mnt.p("s"), runs)
    r = cli(m2.addr, "get", "s")
    assert r.returncode == 0 and len(r.stdout) == 256 * MiB
    for off, data in runs.items():
        assert r.stdout[off:off + len(data)] == data


def test_replicated_sparse_file_outlives_its_nodes(cluster):
    """A sparse file with 2 replicas on 2 nodes: when one dies, the repair
    copies its layout to a third node (holes stay holes: the store's use
    does not grow); then the other original node dies and the repaired copy
    alone serves the same bytes."""
    m = cluster.master("--node-ttl-ms", "2500")
    first = cluster.nodes(m, 2, "64M")
    mnt = cluster.mount("--master", m.addr, "--segment-size", "0", "--replicas", "2",
                        "--cache-mode", "direct")
    runs = write_sparse(mnt.p("s"))
    check_sparse(mnt.p("s"), runs)

    def replicas():
        r = cli(m.addr, "stat", "s")
        assert r.returncode == 0, r.stderr
        f = r.stdout.split()
        return int(f[f.index(b"replicas") + 1])

    assert replicas() == 2
    used_two = cli_stats(m.addr)["used_bytes"]
    assert used_two < 12 * MiB
    cluster.node(m, "64M")
    first[0].kill9()
    wait_for(lambda: cli_stats(m.addr)["counters"]["nodes_expired"] == 1, "the node dropped")
    wait_for(lambda: replicas() == 2, "the replica restored")
    st = cli_stats(m.addr)
    assert st["used_bytes"] == used_two
    assert 0 < st["counters"]["repair_bytes"] < 6 * MiB  # the bytes, not the holes
    first[1].kill9()
    wait_for(lambda: cli_stats(m.addr)["counters"]["nodes_expired"] == 2, "the node dropped")
    assert replicas() == 1
    check_sparse(mnt.p("s"), runs)


def test_fallocate_after_a_write_answered_before_its_space_keeps_its_bytes(cluster):
    """On a cluster mount a sequential write is answered before its bytes
    land (write-behind), and here before the master even gave it space (it
    is stopped). A fallocate of that range right after must not take the
    range for a hole: zeros written into it would land on the write's
    bytes. With the master stopped the FALLOCATE reaches the daemon first,
    every time."""
    master = cluster.master()
    cluster.node(master, "64M")
    port = free_port()
    m = cluster.mount("--master", master.addr, "--segment-size", "0", "--metrics", str(port))
    a, b = os.urandom(64 << 10), os.urandom(64 << 10)
    fd = os.open(m.p("f"), os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, a)  # the writer's first reservation: 64 KiB
    master.pause()
    try:
        os.write(fd, b)  # answered while its PUT_GROW waits for the master
        calls = fallocs(port)
        t = threading.Thread(target=fallocate, args=(fd, FALLOC_FL_KEEP_SIZE, 60000, 10000))
        t.start()
        wait_for(lambda: fallocs(port) > calls, what="the FALLOCATE to reach the daemon")
    finally:
        master.resume()
    t.join(30)
    os.close(fd)  # publishes
    r = cli(master.addr, "get", "f")  # what the store holds, not this mount's page cache
    assert r.returncode == 0, r.stderr
    assert r.stdout == a + b


def fallocs(port):
    return scrape(port).get(("mooncake_fuse_requests_total", 'opcode="FALLOCATE"'), 0)
