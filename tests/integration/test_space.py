"""A full segment: writes fail with ENOSPC, the daemon stays up, earlier
files stay intact; with eviction enabled, least recently used files go.
Each test runs in both modes: the segment in the mount's own (embedded)
store, and a node's segment behind a master the mount is a client of."""

import ctypes
import errno
import os
import subprocess

import pytest

from harness import cli

MiB = 1 << 20


def test_enospc_and_recovery(store_mount):
    m = store_mount("64M")
    keep = os.urandom(MiB)
    with open(m.p("keep"), "wb") as f:
        f.write(keep)
    written = 0
    with pytest.raises(OSError) as e:
        for i in range(200):
            with open(m.p(f"fill{i}"), "wb") as f:
                f.write(os.urandom(MiB))
            written += 1
    assert e.value.errno == errno.ENOSPC
    assert 40 <= written <= 63
    assert open(m.p("keep"), "rb").read() == keep
    # The failed file published nothing past what was written before.
    for i in range(written):
        assert os.path.getsize(m.p(f"fill{i}")) == MiB
    # Space comes back when files go.
    for i in range(10):
        os.unlink(m.p(f"fill{i}"))
    with open(m.p("after"), "wb") as f:
        f.write(os.urandom(4 * MiB))
    assert os.path.getsize(m.p("after")) == 4 * MiB
    assert open(m.p("keep"), "rb").read() == keep


def fill_until_enospc(m, prefix="fill", limit=200):
    """Writes 1 MiB files until one fails with ENOSPC (at write or close);
    returns how many were published whole."""
    for i in range(limit):
        try:
            with open(m.p(f"{prefix}{i}"), "wb", buffering=0) as f:
                f.write(os.urandom(MiB))
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
            return i
    raise AssertionError(f"no ENOSPC after {limit} MiB")


def dd_until_enospc(path):
    """`dd` from /dev/urandom into path until the store is full: dd must
    report the failure."""
    r = subprocess.run(["dd", "if=/dev/urandom", f"of={path}", "bs=1M", "count=1024"],
                       capture_output=True, text=True)
    assert r.returncode != 0, "dd filled 1 GiB without ENOSPC"
    assert "No space left on device" in r.stderr, r.stderr


def check_overwrite_keeps_published_version(m, tmp_path, size):
    """The steps of the issue: `cp big victim`, fill the store, `cp big2
    victim` -> ENOSPC; victim still holds the first content and the filler
    that hit ENOSPC is not published with partial content."""
    old, new = tmp_path / "old", tmp_path / "new"
    old.write_bytes(os.urandom(size))
    new.write_bytes(os.urandom(size))
    subprocess.run(["cp", str(old), m.p("victim")], check=True)
    # One big filler: its writes fail half way; nothing of it is published
    # (the empty file its create made stays), and its space comes back.
    dd_until_enospc(m.p("filler"))
    assert os.path.getsize(m.p("filler")) == 0
    assert open(m.p("filler"), "rb").read() == b""
    # Now fill the store with files that are published whole.
    n = fill_until_enospc(m)
    assert n > 0
    assert os.path.getsize(m.p(f"fill{n}")) == 0, "the failed filler published partial data"
    # Overwrite with O_TRUNC (cp): fails, and keeps the old bytes.
    r = subprocess.run(["cp", str(new), m.p("victim")], capture_output=True, text=True)
    assert r.returncode != 0, "the overwrite did not fail"
    assert "No space left on device" in r.stderr, r.stderr
    assert os.path.getsize(m.p("victim")) == size
    assert open(m.p("victim"), "rb").read() == old.read_bytes()
    # In place without O_TRUNC (copy-on-write of the base): the same.
    with pytest.raises(OSError) as e:
        with open(m.p("victim"), "r+b", buffering=0) as f:
            f.seek(size // 2)
            f.write(b"x" * MiB)
    assert e.value.errno == errno.ENOSPC
    assert open(m.p("victim"), "rb").read() == old.read_bytes()
    # Growing with ftruncate: the same.
    with pytest.raises(OSError) as e:
        with open(m.p("victim"), "r+b", buffering=0) as f:
            f.truncate(size + 32 * MiB)
    assert e.value.errno == errno.ENOSPC
    assert open(m.p("victim"), "rb").read() == old.read_bytes()
    # With space again the overwrite succeeds.
    for i in range(n):
        os.unlink(m.p(f"fill{i}"))
    subprocess.run(["cp", str(new), m.p("victim")], check=True)
    assert open(m.p("victim"), "rb").read() == new.read_bytes()


def test_enospc_during_overwrite_keeps_published_version(store_mount, tmp_path):
    m = store_mount("64M")
    check_overwrite_keeps_published_version(m, tmp_path, 8 * MiB)
    # The C API sees the new version too.
    r = cli(m.store_addr, "get", "victim")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (tmp_path / "new").read_bytes()


def test_failed_write_poisons_every_writer_of_the_file(store_mount):
    """Two descriptors share one version in progress: when a write through
    one fails, neither publishes, both closes report the error, and a
    descriptor opened afterwards starts afresh."""
    m = store_mount("64M")
    old = os.urandom(MiB)
    with open(m.p("f"), "wb") as f:
        f.write(old)
    fds = []
    try:
        a = os.open(m.p("f"), os.O_WRONLY)
        fds.append(a)
        b = os.open(m.p("f"), os.O_WRONLY)
        fds.append(b)
        os.write(a, b"a" * 4096)
        with pytest.raises(OSError) as e:
            for i in range(100):
                os.pwrite(b, os.urandom(MiB), i * MiB)
        assert e.value.errno == errno.ENOSPC
        for fd in (a, b):
            with pytest.raises(OSError) as e:
                os.write(fd, b"late")
            assert e.value.errno == errno.ENOSPC
        # Nothing of the failed version shows, not even from the kernel's
        # page cache, which held what the writes had put there.
        assert open(m.p("f"), "rb").read() == old
        # A descriptor opened after the failure writes a version of its own.
        c = os.open(m.p("f"), os.O_WRONLY | os.O_TRUNC)
        fds.append(c)
        for fd in (a, b):
            fds.remove(fd)
            with pytest.raises(OSError) as e:
                os.close(fd)
            assert e.value.errno == errno.ENOSPC
        assert cli(m.store_addr, "get", "f").stdout == old  # c's version is not published yet
        os.write(c, b"fresh")
        fds.remove(c)
        os.close(c)
    finally:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
    assert open(m.p("f"), "rb").read() == b"fresh"


def test_eviction_removes_least_recently_used(store_mount):
    m = store_mount("64M", "--evict-high", "90", "--evict-ratio", "20")
    for i in range(100):
        with open(m.p(f"f{i:03d}"), "wb") as f:
            f.write(bytes([i]) * MiB)
        if i >= 1:
            # Keep f000 hot: read it after every write.
            assert open(m.p("f000"), "rb").read(1) == b"\0"
    present = set(os.listdir(m.p()))
    assert "f099" in present
    assert "f000" in present, "the most recently used file was evicted"
    assert "f001" not in present, "the least recently used file survived"
    assert len(present) < 64
    for name in present:
        i = int(name[1:])
        assert open(m.p(name), "rb").read() == bytes([i]) * MiB


FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_COLLAPSE_RANGE, FALLOC_FL_ZERO_RANGE = 1, 2, 8, 16


def fallocate(fd, mode, off, length):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
    if libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def test_fallocate_modes(store_mount):
    """fallocate(2): the default mode grows the file (taking the space, or
    failing with ENOSPC), FALLOC_FL_KEEP_SIZE changes nothing, PUNCH_HOLE and
    ZERO_RANGE clear the range; other modes are EOPNOTSUPP. What it does is
    part of the version in progress, published at close like a write; an
    ENOSPC leaves that version as it was (test_sparse has the rest)."""
    m = store_mount("64M")
    p = m.p("f")
    with open(p, "wb") as f:
        f.write(b"x" * 10000)
    fd = os.open(p, os.O_RDWR)
    os.posix_fallocate(fd, 0, 20000)  # the default mode, through libc
    assert os.fstat(fd).st_size == 20000
    assert os.pread(fd, 20000, 0) == b"x" * 10000 + bytes(10000)
    fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 1 << 20)
    assert os.fstat(fd).st_size == 20000
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 100, 50)
    fallocate(fd, FALLOC_FL_ZERO_RANGE, 19990, 20)  # and grows by 10
    with pytest.raises(OSError) as e:
        fallocate(fd, FALLOC_FL_COLLAPSE_RANGE, 0, 4096)
    assert e.value.errno == errno.EOPNOTSUPP
    os.close(fd)
    want = b"x" * 100 + bytes(50) + b"x" * 9850 + bytes(10010)
    assert open(p, "rb").read() == want
    assert cli(m.store_addr, "get", "f").stdout == want
    fd = os.open(p, os.O_RDWR)
    with pytest.raises(OSError) as e:
        os.posix_fallocate(fd, 0, 1 << 30)  # more than the store holds
    assert e.value.errno == errno.ENOSPC
    assert os.fstat(fd).st_size == 20010  # as it was, and still writable
    os.pwrite(fd, b"y", 0)
    os.close(fd)
    assert open(p, "rb").read() == b"y" + want[1:]
