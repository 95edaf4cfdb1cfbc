"""What a small file costs the mount (issue 14, docs/BENCHMARKS.md "Many
small files"): the FUSE requests the kernel sends for open(O_CREAT|O_EXCL),
a write of 4 KiB and close of a new file, counted by the daemon's
--metrics (mooncake_fuse_requests_total), in both modes, and those of a
file written in many pieces; and a new file's writer, which reserves room
for its first bytes, in a full store."""

import errno
import os
import pytest

from harness import free_port
from test_metrics import delta, scrape

FILES = 50


def test_a_new_small_file_costs_seven_requests(store_mount):
    port = free_port()
    m = store_mount("64M", "--metrics", str(port))
    d = m.p("d")
    os.mkdir(d)
    block = b"x" * 4096
    a = scrape(port)
    for i in range(FILES):
        fd = os.open(os.path.join(d, f"f{i}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        assert os.write(fd, block) == len(block)
        os.close(fd)
    b = scrape(port)

    def sent(op):
        return delta(a, b, "mooncake_fuse_requests_total", f'opcode="{op}"')

    for op in ("LOOKUP", "CREATE", "WRITE", "FLUSH"):
        assert sent(op) == FILES, op
    # RELEASE is sent after close returns: all of them by the next scrape,
    # or a few still on their way.
    assert sent("RELEASE") <= FILES
    # security.capability, asked before a new file's first write
    # (file_remove_privs()); see the next test.
    assert sent("GETXATTR") == FILES
    # The directory's attributes, which each create invalidates, for
    # default_permissions' check of the next create.
    assert sent("GETATTR") <= FILES + 1
    for i in range(FILES):
        with open(os.path.join(d, f"f{i}"), "rb") as f:
            assert f.read() == block


def test_writes_ask_for_security_capability_once_per_file(store_mount):
    """The daemon clears set-ID bits itself (FUSE_HANDLE_KILLPRIV_V2, asked
    for in its reply to INIT: fs/devio.c), so the kernel asks for a file's
    security.capability once, not before every write (a GETXATTR round trip
    for each 4 KiB of a `dd bs=4k`)."""
    port = free_port()
    m = store_mount("64M", "--metrics", str(port))
    writes = 32
    a = scrape(port)
    with open(m.p("f"), "wb", buffering=0) as f:
        for _ in range(writes):
            assert f.write(b"w" * 4096) == 4096
    b = scrape(port)
    # Once, and again only if the file's attributes were fetched meanwhile
    # (the kernel forgets the answer then).
    assert delta(a, b, "mooncake_fuse_requests_total", 'opcode="GETXATTR"') <= 2
    assert delta(a, b, "mooncake_fuse_requests_total", 'opcode="WRITE"') == writes
    assert os.path.getsize(m.p("f")) == writes * 4096


def fill(m, prefix, size, limit):
    """Writes files of size bytes until one fails with ENOSPC (at write or
    close); returns how many were published."""
    for i in range(limit):
        try:
            with open(m.p(f"{prefix}{i}"), "wb", buffering=0) as f:
                f.write(b"f" * size)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
            return i
    raise AssertionError(f"no ENOSPC after {limit} files of {size} bytes")


def test_an_empty_file_is_made_in_a_full_store(store_mount):
    """A new file's writer reserves room for its first bytes when there is
    room; in a full store it starts with none, so that creating an empty
    file still works (and a write then fails with ENOSPC)."""
    m = store_mount("16M")
    assert fill(m, "big", 1 << 20, 64) > 0
    fill(m, "small", 1024, 20000)
    for name in ("empty", "trunc"):
        open(m.p(name), "wb").close()
        assert os.path.getsize(m.p(name)) == 0
    with open(m.p("trunc"), "wb") as f:  # O_TRUNC of an existing file
        pass
    with pytest.raises(OSError) as e:
        with open(m.p("empty"), "wb", buffering=0) as f:
            f.write(b"x" * 65536)
    assert e.value.errno == errno.ENOSPC
    assert os.path.getsize(m.p("empty")) == 0
