"""A full segment: writes fail with ENOSPC, the daemon stays up, earlier
files stay intact; with eviction enabled, least recently used files go."""

import errno
import os

import pytest

MiB = 1 << 20


def test_enospc_and_recovery(make_mount):
    m = make_mount("--segment-size", "64M")
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


def test_eviction_removes_least_recently_used(make_mount):
    m = make_mount("--segment-size", "64M", "--evict-high", "90", "--evict-ratio", "20")
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
