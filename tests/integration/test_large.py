"""Large files: 1 GiB in and out, dd with 1 MiB blocks, and the daemon's
memory while a 2 GiB file streams in; each in both modes (embedded, and a
client of a master whose node holds the bytes)."""

import os
import subprocess
import tempfile
import threading
import time

import pytest

GiB = 1 << 30
MiB = 1 << 20


def make_random_file(path, size):
    # A repeated 64 MiB block of urandom: cheap to make, still no pattern
    # that a 1 MiB-aligned mix-up would hide (the block is not a multiple
    # of any power of two beyond 64 MiB apart, and we compare bytes).
    block = os.urandom(64 * MiB + 4093)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n


COPY = GiB


def test_cp_1gib_in_and_out(store_mount, tmp_path):
    m = store_mount("1536M")
    # A name of its own in /dev/shm: runs side by side must not share it.
    fd, src = tempfile.mkstemp(prefix="mc-test-1g-",
                               dir="/dev/shm" if os.path.isdir("/dev/shm") else str(tmp_path))
    os.close(fd)
    make_random_file(src, COPY)
    try:
        subprocess.run(["cp", src, m.p("big")], check=True)
        assert os.path.getsize(m.p("big")) == COPY
        out = str(tmp_path / "out")
        subprocess.run(["cp", m.p("big"), out], check=True)
        subprocess.run(["cmp", src, out], check=True)
        subprocess.run(["cmp", src, m.p("big")], check=True)
        os.unlink(out)
    finally:
        os.unlink(src)


def test_dd_1m_blocks(mnt, tmp_path):
    subprocess.run(["dd", "if=/dev/urandom", f"of={tmp_path}/src", "bs=1M", "count=64"],
                   check=True, capture_output=True)
    subprocess.run(["dd", f"if={tmp_path}/src", f"of={mnt.p('dd')}", "bs=1M"],
                   check=True, capture_output=True)
    subprocess.run(["dd", f"if={mnt.p('dd')}", f"of={tmp_path}/back", "bs=1M"],
                   check=True, capture_output=True)
    subprocess.run(["cmp", f"{tmp_path}/src", f"{tmp_path}/back"], check=True)
    # A read at an odd offset and length.
    with open(mnt.p("dd"), "rb") as f, open(f"{tmp_path}/src", "rb") as g:
        f.seek(12345677)
        g.seek(12345677)
        assert f.read(3 * MiB + 17) == g.read(3 * MiB + 17)


@pytest.mark.skipif(os.environ.get("MC_SANITIZED") == "1",
                    reason="AddressSanitizer's shadow memory and quarantine inflate RSS")
def test_rss_bounded_while_copying_2gib(store_mount):
    """The daemon keeps no second copy of a file: its RSS stays within the
    bytes stored in the store plus 64 MiB while 2 GiB stream in (a client of
    a master stores none of them itself)."""
    m = store_mount("2304M")
    peak = {"excess": 0, "rss": 0, "samples": 0}
    done = threading.Event()

    def sample():
        while not done.is_set():
            rss = m.rss()
            st = os.statvfs(m.p())
            used = (st.f_blocks - st.f_bfree) * st.f_frsize
            rss2 = m.rss()
            excess = min(rss, rss2) - used
            peak["excess"] = max(peak["excess"], excess)
            peak["rss"] = max(peak["rss"], rss2)
            peak["samples"] += 1
            time.sleep(0.05)

    t = threading.Thread(target=sample)
    t.start()
    try:
        # A stream, no 2 GiB source file needed; the bytes' values do not
        # matter here (test_cp_1gib_in_and_out checks them), so yes(1), at
        # GB/s, rather than /dev/urandom, which took 8 s of CPU per 2 GiB.
        subprocess.run(f"yes 'mooncake rss bound 0123456789' | head -c {2 * GiB} | "
                       f"dd of={m.p('big')} bs=1M iflag=fullblock status=none",
                       shell=True, check=True)
    finally:
        done.set()
        t.join()
    assert os.path.getsize(m.p("big")) == 2 * GiB
    assert peak["samples"] > 5
    assert peak["excess"] <= 64 * MiB, \
        f"RSS exceeded stored bytes by {peak['excess'] / MiB:.1f} MiB (peak RSS {peak['rss'] / MiB:.0f} MiB)"
