"""READs up to 2 MiB (issue 14, the mount's reads): the daemon asks the kernel
for requests of up to 512 pages (fs/devio.c, FS_MAX_PAGES), so a 1 MiB
read(2) into a buffer that does not start a page (malloc's 1 MiB blocks start
16 bytes in) is one READ, not two; and reads of up to 2 MiB at any offset,
into buffers at any alignment, return the bytes written: a file in many
extents, a hole longer than 1 MiB, a read past the end of the file, in both
cache modes, with and without worker threads, embedded and in a cluster; and
a 2 MiB read of a file that another client replaces meanwhile returns one
version, whole.

The kernel grants at most /proc/sys/fs/fuse/max_pages_limit pages (256 by
default), a machine-wide setting: with 256 a read(2) of 2 MiB reaches the
daemon as READs of up to 1 MiB, and the tests of the bytes read hold as
they are. The test that counts READs needs 512 pages: as root it raises
the limit for its own mount (the kernel reads it when a mount starts) and
puts it back at once, else it is skipped unless the machine grants them."""

import mmap
import os
import random
import subprocess

import pytest

from harness import cli, free_port
from test_metrics import fuse_requests

MiB = 1 << 20
PAGES = 512  # fs.h: FS_MAX_PAGES
LIMIT = "/proc/sys/fs/fuse/max_pages_limit"


def kernel_max_pages():
    """The most pages the kernel grants a READ (max_pages_limit; 256 before
    6.13, where there is no such file)."""
    try:
        with open(LIMIT) as f:
            return int(f.read())
    except OSError:
        return 256


def reads_at(fd, chunks, shift):
    """Reads [(off, size)] of fd into a buffer starting `shift` bytes past a
    page; returns the bytes, each chunk's read(2) whole (short at the end)."""
    big = max(size for _, size in chunks)
    buf = mmap.mmap(-1, big + 2 * mmap.PAGESIZE)
    view = memoryview(buf)[shift:shift + big]
    out = []
    for off, size in chunks:
        n = os.preadv(fd, [view[:size]], off)
        out.append(bytes(view[:n]))
    view.release()
    buf.close()
    return out


def mount_granted_512_pages(store_mount, *args):
    """store_mount(*args) with the kernel granting it PAGES pages a READ:
    max_pages_limit raised (as root) while the mount starts, then put
    back; the mount keeps what it was granted at its INIT."""
    old = kernel_max_pages()
    if old >= PAGES:
        return store_mount(*args)
    if os.geteuid() != 0 or not os.path.exists(LIMIT):
        pytest.skip(f"{LIMIT} is {old}, under {PAGES}, and not ours to raise: the kernel "
                    "splits such a read")
    with open(LIMIT, "w") as f:
        f.write(str(PAGES))
    try:
        return store_mount(*args)
    finally:
        with open(LIMIT, "w") as f:
            f.write(str(old))


def test_a_1mib_read_into_a_buffer_off_a_page_is_one_request(store_mount, tmp_path):
    port = free_port()
    m = mount_granted_512_pages(store_mount, "64M", "--cache-mode", "direct", "--threads", "1",
                                "--metrics", str(port))
    data = os.urandom(8 * MiB)
    with open(m.p("f"), "wb") as f:
        f.write(data)
    fd = os.open(m.p("f"), os.O_RDONLY)
    try:
        before = fuse_requests(port, "READ")
        got = reads_at(fd, [(i * MiB, MiB) for i in range(8)], 16)
        after = fuse_requests(port, "READ")
    finally:
        os.close(fd)
    assert b"".join(got) == data
    # Eight read(2)s of 1 MiB, 16 bytes into a page: 257 pages each. With
    # libfuse's 256 pages each was a READ of 1 MiB less 16 bytes and one of
    # 16 bytes (16 READs).
    assert after - before == 8


def test_max_read_caps_the_reads_the_kernel_sends(store_mount):
    """-o max_read=N (a mount option libfuse passes to the kernel, which
    init() must ask for too) caps every READ at N bytes, whatever the
    kernel's max_pages_limit: a test can have a large read(2) split into
    many READs without changing that machine-wide setting."""
    port = free_port()
    m = store_mount("64M", "--cache-mode", "direct", "--threads", "1", "-o", "max_read=131072",
                    "--metrics", str(port))
    data = os.urandom(2 * MiB)
    with open(m.p("f"), "wb") as f:
        f.write(data)
    fd = os.open(m.p("f"), os.O_RDONLY)
    try:
        before = fuse_requests(port, "READ")
        got = reads_at(fd, [(0, 2 * MiB)], 0)
        after = fuse_requests(port, "READ")
    finally:
        os.close(fd)
    assert got == [data]
    assert after - before == 16  # 2 MiB in READs of 128 KiB


def striped_file(m, ref, other):
    """Writes a 13 MiB file (and its reference copy) in 64 KiB writes
    interleaved with another file's, closing both every MiB so that each
    publish is a new version of the whole file: its bytes lie in many
    extents. Then a hole of 3 MiB and 5,000 bytes past it."""
    data = bytearray()
    rng = random.Random(14)
    for i in range(13):
        chunk = rng.randbytes(MiB)
        with open(m.p("f"), "ab") as f, open(m.p(other), "ab") as g:
            for k in range(0, MiB, 64 * 1024):
                f.write(chunk[k:k + 64 * 1024])
                g.write(b"o" * 4096)
        data += chunk
    tail = rng.randbytes(5000)
    with open(m.p("f"), "r+b") as f:
        f.seek(len(data) + 3 * MiB)
        f.write(tail)
    data += bytes(3 * MiB) + tail
    ref.write_bytes(data)
    return bytes(data)


@pytest.mark.parametrize("cache", ["direct", "pages"])
@pytest.mark.parametrize("threads", ["1", "3"])
def test_reads_up_to_2mib_at_any_offset_and_alignment(store_mount, tmp_path, cache, threads):
    m = store_mount("128M", "--cache-mode", cache, "--threads", threads)
    data = striped_file(m, tmp_path / "ref", "other")
    assert os.path.getsize(m.p("f")) == len(data)
    rng = random.Random(int(threads) + len(cache))
    chunks = [(0, 2 * MiB), (MiB - 1, 2 * MiB), (13 * MiB - 100, 2 * MiB),  # into the hole
              (14 * MiB, 2 * MiB),  # the hole whole (2 MiB of zeros)
              (len(data) - 3000, 2 * MiB),  # past the end: short
              (len(data), MiB), (len(data) + MiB, MiB)]  # at and past the end: empty
    chunks += [(rng.randrange(len(data)), rng.randrange(1, 2 * MiB + 1)) for _ in range(24)]
    for shift in (0, 16, 4095):
        fd = os.open(m.p("f"), os.O_RDONLY)
        try:
            got = reads_at(fd, chunks, shift)
        finally:
            os.close(fd)
        for (off, size), b in zip(chunks, got):
            assert b == data[off:off + size], (shift, off, size, len(b))
    with open(m.p("other"), "rb") as g:
        assert g.read() == b"o" * (13 * 16 * 4096)


def size_of(b):
    return 2 * MiB - 4099 * b  # each version another size, none a page multiple


READER = r"""
import mmap, os, sys
path, stop = sys.argv[1], sys.argv[2]
buf = mmap.mmap(-1, 2 * (1 << 20) + 2 * mmap.PAGESIZE)
view = memoryview(buf)[16:16 + 2 * (1 << 20)]  # 16 bytes into a page, as malloc's
seen = set()
while not os.path.exists(stop):
    fd = os.open(path, os.O_RDONLY)
    n = os.preadv(fd, [view], 0)  # the whole version in one read(2): one READ of 2 MiB
    os.close(fd)
    data = bytes(view[:n])
    b = data[0] if data else -1
    if not data or data.count(data[0]) != n or n != 2 * (1 << 20) - 4099 * b:
        print(f"mixed or cut: {n} bytes, first {b}, distinct {sorted(set(data))[:8]}")
        sys.exit(1)
    seen.add(b)
print(len(seen))
"""


@pytest.mark.parametrize("cache", ["direct", "pages"])
def test_a_2mib_read_of_a_file_replaced_meanwhile_is_one_version(store_mount, tmp_path, cache):
    m = store_mount("128M", "--cache-mode", cache, "--threads", "3")

    def put(b):
        r = cli(m.store_addr, "put", "f", input=bytes([b]) * size_of(b))
        assert r.returncode == 0, r.stderr

    put(1)
    stop = tmp_path / "stop"
    readers = [subprocess.Popen(["/usr/bin/python3", "-c", READER, m.p("f"), str(stop)],
                                stdout=subprocess.PIPE, text=True) for _ in range(3)]
    try:
        for b in range(2, 16):
            put(b)
    finally:
        stop.touch()
    outs = [r.communicate(timeout=60)[0] for r in readers]
    assert [r.returncode for r in readers] == [0] * 3, outs
    with open(m.p("f"), "rb") as f:
        assert f.read() == bytes([15]) * size_of(15)
