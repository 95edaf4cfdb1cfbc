"""copy_file_range(2) within the mount, as cp uses it: the daemon copies
the bytes itself, in one request (no READ or WRITE requests go to it), and
the copy reads what a read of the source sees and writes as writes to the
destination do. In both modes and both cache modes."""

import errno
import mmap
import os
import random

import pytest

from harness import free_port, wait_for
from test_metrics import fuse_requests

CACHE_MODES = ["pages", "direct"]


def copy_all(src, dst, count, off_src=None, off_dst=None):
    """copy_file_range until count bytes went or the source ended; the
    bytes copied."""
    done = 0
    while done < count:
        n = os.copy_file_range(src, dst, count - done,
                               None if off_src is None else off_src + done,
                               None if off_dst is None else off_dst + done)
        if n == 0:
            break
        done += n
    return done


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_a_copy_is_one_request_and_exact(store_mount, cache):
    port = free_port()
    m = store_mount("512M", "--cache-mode", cache, "--metrics", str(port))
    data = random.randbytes(24 * 1024 * 1024 + 12345)  # chunks and a tail
    with open(m.p("src"), "wb") as f:
        f.write(data)
    writes, reads = fuse_requests(port, "WRITE"), fuse_requests(port, "READ")
    with open(m.p("src"), "rb") as s, open(m.p("dst"), "wb") as d:
        assert copy_all(s.fileno(), d.fileno(), len(data) + 4096) == len(data)
    # The daemon did it: the kernel's fallback would have sent hundreds.
    assert fuse_requests(port, "COPY_FILE_RANGE") >= 1
    assert fuse_requests(port, "WRITE") == writes
    assert fuse_requests(port, "READ") == reads
    assert os.path.getsize(m.p("dst")) == len(data)
    with open(m.p("dst"), "rb") as f:
        assert f.read() == data
    # cp, which uses it too.
    os.system(f"cp {m.p('dst')} {m.p('cp')}")
    with open(m.p("cp"), "rb") as f:
        assert f.read() == data


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_ranges_holes_and_the_end(store_mount, cache):
    m = store_mount("256M", "--cache-mode", cache)
    src = random.randbytes(3 * 1024 * 1024 + 77)
    old = random.randbytes(100_000)
    with open(m.p("src"), "wb") as f:
        f.write(src)
    with open(m.p("dst"), "wb") as f:
        f.write(old)
    want = bytearray(old)
    with open(m.p("src"), "rb") as s, open(m.p("dst"), "r+b") as d:
        # Into the middle of what is there.
        assert copy_all(s.fileno(), d.fileno(), 5000, 1000, 2000) == 5000
        want[2000:7000] = src[1000:6000]
        # Past the end: a gap of zeros before it.
        at = 1_500_000
        assert copy_all(s.fileno(), d.fileno(), 2_000_000, 700_000, at) == 2_000_000
        want += bytes(at - len(want))
        want[at:at + 2_000_000] = src[700_000:2_700_000]
        # Asking past the source's end copies up to it; at its end, nothing.
        tail = len(src) - 3_000_000
        assert os.copy_file_range(s.fileno(), d.fileno(), 1 << 30, 3_000_000, 0) == tail
        want[0:tail] = src[3_000_000:]
        assert os.copy_file_range(s.fileno(), d.fileno(), 4096, len(src), 0) == 0
        # The descriptor's own offsets move when none are given.
        s.seek(10)
        d.seek(20)
        assert os.copy_file_range(s.fileno(), d.fileno(), 30) == 30
        want[20:50] = src[10:40]
        assert (s.tell(), d.tell()) == (40, 50)
        # Read back before the close, through the writing descriptor.
        d.seek(0)
        assert d.read() == bytes(want)
    with open(m.p("dst"), "rb") as f:
        assert f.read() == bytes(want)


@pytest.mark.parametrize("cache", CACHE_MODES)
def test_a_copy_within_a_file_and_of_unpublished_writes(store_mount, cache):
    m = store_mount("256M", "--cache-mode", cache)
    a = random.randbytes(1_000_000)
    b = random.randbytes(300_000)
    with open(m.p("f"), "w+b") as f:
        f.write(a)
        f.flush()  # in the version in progress, not yet published
        # From the file itself, to a range that does not overlap.
        assert copy_all(f.fileno(), f.fileno(), 200_000, 0, 900_000) == 200_000
        # To another file, the bytes not yet published.
        with open(m.p("g"), "wb") as g:
            assert copy_all(f.fileno(), g.fileno(), 1_100_000, 0, 0) == 1_100_000
        # Overlapping ranges of one file: the kernel refuses them.
        with pytest.raises(OSError):
            os.copy_file_range(f.fileno(), f.fileno(), 1000, 0, 500)
        f.seek(0, os.SEEK_END)
        f.write(b)
    want_f = a[:900_000] + a[:200_000] + b
    with open(m.p("f"), "rb") as f:
        assert f.read() == want_f
    with open(m.p("g"), "rb") as g:
        assert g.read() == a[:900_000] + a[:200_000]


def test_a_copy_publishes_at_close(store_mount):
    """Close-to-open: an open after the close of the destination sees the
    copy, and the file's size is the copy's end."""
    m = store_mount("256M")
    data = random.randbytes(2_000_000)
    with open(m.p("src"), "wb") as f:
        f.write(data)
    with open(m.p("dst"), "wb") as f:
        f.write(b"old")
    with open(m.p("src"), "rb") as s, open(m.p("dst"), "r+b") as d:
        assert copy_all(s.fileno(), d.fileno(), len(data), 0, 0) == len(data)
    assert os.stat(m.p("dst")).st_size == len(data)
    with open(m.p("dst"), "rb") as f:
        assert f.read() == data


def test_a_copy_without_room_fails_and_publishes_nothing(store_mount):
    """ENOSPC, as a write's: the destination keeps what it had (here: the
    empty file the create made) and the source is untouched."""
    m = store_mount("64M")
    data = random.randbytes(40 << 20)
    with open(m.p("src"), "wb") as f:
        f.write(data)
    with pytest.raises(OSError) as e:
        with open(m.p("src"), "rb") as s, open(m.p("dst"), "wb") as d:
            copy_all(s.fileno(), d.fileno(), len(data))
    assert e.value.errno == errno.ENOSPC
    assert os.path.getsize(m.p("dst")) == 0
    with open(m.p("src"), "rb") as f:
        assert f.read() == data


def test_a_copy_takes_what_a_shared_mapping_wrote(store_mount):
    """Bytes written through mmap(MAP_SHARED) of the source, not yet
    msync()ed, are copied (the kernel writes them back first), as a read
    sees them. --cache-mode pages: the only one with shared mappings."""
    m = store_mount("256M")
    size = 1 << 20
    with open(m.p("src"), "wb") as f:
        f.write(b"a" * size)
    with open(m.p("src"), "r+b") as f, mmap.mmap(f.fileno(), size) as mm:
        mm[1000:1005] = b"HELLO"
        mm[size - 5:] = b"WORLD"
        with open(m.p("src"), "rb") as s, open(m.p("dst"), "wb") as d:
            assert copy_all(s.fileno(), d.fileno(), size) == size
    with open(m.p("dst"), "rb") as f:
        got = f.read()
    assert got[1000:1005] == b"HELLO" and got[size - 5:] == b"WORLD"
    assert got == b"a" * 1000 + b"HELLO" + b"a" * (size - 1010) + b"WORLD"


def test_a_daemon_stopped_during_a_copy_exits_cleanly(cluster):
    """SIGTERM while a long copy is in flight (a cluster mount: chunk by
    chunk through a node): the daemon answers what it can, frees what the
    copy held and exits 0 with a clean log (the fixture checks both). Under
    the sanitizers this caught the copy reaching the handles the shutdown
    had freed."""
    import signal
    import threading
    port = free_port()
    master = cluster.master()
    cluster.node(master, "1G")
    m = cluster.mount("--master", master.addr, "--segment-size", "0", "--metrics", str(port))
    size = 384 << 20
    with open(m.p("src"), "wb") as f:
        f.write(os.urandom(1 << 20) * (size >> 20))
    copies = fuse_requests(port, "COPY_FILE_RANGE")
    outcome = []

    def copy():
        try:
            with open(m.p("src"), "rb") as s, open(m.p("dst"), "wb") as d:
                outcome.append(copy_all(s.fileno(), d.fileno(), size))
        except OSError as e:
            outcome.append(e.errno)

    t = threading.Thread(target=copy)
    t.start()
    wait_for(lambda: fuse_requests(port, "COPY_FILE_RANGE") > copies,
             "the copy to reach the daemon", timeout=20, step=0.005)
    assert m.stop(signal.SIGTERM) == 0
    t.join(30)
    assert not t.is_alive() and outcome  # answered or failed, never hung
