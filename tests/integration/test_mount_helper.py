"""The command line that mount.fuse3 builds from an /etc/fstab line,
"mooncake-fs SOURCE MOUNTPOINT -o OPTIONS": SOURCE is the master's address
or "embedded", every long option is also -o NAME=VALUE, and the mount is
named the way the line reads (SOURCE, type fuse.mooncake-fs), so that
`mount -a` finds it mounted. (tests/packaging runs the real mount -a.)"""

import os
import subprocess

from harness import DAEMON, cli


def mountinfo(path):
    """(fstype, source) of the mount at path, from /proc/self/mountinfo."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path:
                tail = fields[fields.index("-") + 1:]
                return tail[0], tail[1]
    return None


def test_embedded_source_and_o_options(make_mount):
    m = make_mount("-o", "segment-size=64M,cache-timeout=0,listen=none,rw,dev,suid", "embedded")
    assert mountinfo(m.path) == ("fuse.mooncake-fs", "embedded")
    st = os.statvfs(m.path)
    assert st.f_blocks * st.f_frsize == 64 << 20
    with open(m.p("f"), "wb") as f:
        f.write(b"through fstab options")
    with open(m.p("f"), "rb") as f:
        assert f.read() == b"through fstab options"
    assert m.stop("fusermount") == 0


def test_master_address_as_source(cluster):
    master = cluster.master()
    cluster.node(master, "64M")
    m = cluster.mount("-o", f"segment-size=0,replicas=1,timeout-ms=3000,master={master.addr}",
                      master.addr)
    assert mountinfo(m.path) == ("fuse.mooncake-fs", master.addr)
    with open(m.p("k"), "wb") as f:
        f.write(b"via the master")
    got = cli(master.addr, "get", "k")
    assert got.returncode == 0 and got.stdout == b"via the master", got.stderr


def test_source_and_master_must_agree(tmp_path):
    (tmp_path / "mnt").mkdir()
    out = subprocess.run([DAEMON, "-f", "--master", "127.0.0.1:1", "127.0.0.1:2",
                          str(tmp_path / "mnt")], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert "SOURCE '127.0.0.1:2' and --master '127.0.0.1:1' differ" in out.stderr


def test_a_third_positional_argument_is_refused(tmp_path):
    (tmp_path / "mnt").mkdir()
    out = subprocess.run([DAEMON, "-f", "embedded", str(tmp_path / "mnt"), "extra"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert "unexpected argument 'extra'" in out.stderr
