"""Extended attributes of the mount (issue 10, point 4): user.* on files and
directories for their users, trusted.* for root only, security.* and other
namespaces not supported; XATTR_CREATE / XATTR_REPLACE; Linux's limits and
errnos; the ctime moves; attributes survive a rewrite of the file and a
rename; `cp -a` and `rsync -aX` keep them; the C API (and so Python) reads
the same attributes as the object's metadata.

Users come from test_posix_meta's fixtures (useradd, setpriv)."""

import errno
import os
import shutil
import subprocess

import pytest

from harness import clock_past
from test_posix_meta import as_user, shared_mount, users, world_dir  # noqa: F401 (fixtures)

XATTR_CREATE, XATTR_REPLACE = os.XATTR_CREATE, os.XATTR_REPLACE


def need(tool):
    if not shutil.which(tool):
        pytest.skip(f"needs {tool}")


def test_setfattr_getfattr_list_remove(shared_mount):
    need("setfattr")
    m = shared_mount()
    f = m.p("f")
    open(f, "w").write("data")
    subprocess.run(["setfattr", "-n", "user.color", "-v", "blue", f], check=True)
    subprocess.run(["setfattr", "-n", "user.empty", f], check=True)
    r = subprocess.run(["getfattr", "-d", "--absolute-names", f], check=True,
                       capture_output=True, text=True)
    assert 'user.color="blue"' in r.stdout
    assert os.getxattr(f, "user.color") == b"blue"
    assert os.getxattr(f, "user.empty") == b""
    assert sorted(os.listxattr(f)) == ["user.color", "user.empty"]
    subprocess.run(["setfattr", "-x", "user.color", f], check=True)
    assert os.listxattr(f) == ["user.empty"]
    with pytest.raises(OSError) as e:
        os.getxattr(f, "user.color")
    assert e.value.errno == errno.ENODATA
    with pytest.raises(OSError) as e:
        os.removexattr(f, "user.color")
    assert e.value.errno == errno.ENODATA
    # Directories, with or without a marker of their own.
    os.mkdir(m.p("d"))
    os.setxattr(m.p("d"), "user.dir", b"yes")
    assert os.getxattr(m.p("d"), "user.dir") == b"yes"
    os.makedirs(m.p("e", "sub"))
    open(m.p("e", "sub", "x"), "w").close()
    assert os.listxattr(m.p("e", "sub")) == []
    os.setxattr(m.p("e", "sub"), "user.k", b"v")
    assert os.listxattr(m.p("e", "sub")) == ["user.k"]
    assert open(f).read() == "data"


def test_create_replace_flags(shared_mount):
    m = shared_mount()
    f = m.p("f")
    open(f, "w").close()
    with pytest.raises(OSError) as e:
        os.setxattr(f, "user.a", b"1", XATTR_REPLACE)
    assert e.value.errno == errno.ENODATA
    os.setxattr(f, "user.a", b"1", XATTR_CREATE)
    with pytest.raises(OSError) as e:
        os.setxattr(f, "user.a", b"2", XATTR_CREATE)
    assert e.value.errno == errno.EEXIST
    os.setxattr(f, "user.a", b"3", XATTR_REPLACE)
    assert os.getxattr(f, "user.a") == b"3"
    os.setxattr(f, "user.a", b"four")
    assert os.getxattr(f, "user.a") == b"four"


def test_limits_and_errnos(shared_mount):
    m = shared_mount()
    f = m.p("f")
    open(f, "w").close()
    # A name of 255 bytes is the longest.
    name = "user." + "n" * 250
    os.setxattr(f, name, b"x")
    assert os.getxattr(f, name) == b"x"
    with pytest.raises(OSError) as e:
        os.setxattr(f, name + "n", b"x")
    assert e.value.errno == errno.ERANGE
    # A value of 64 KiB is the largest.
    big = os.urandom(65536)
    os.setxattr(f, "user.big", big)
    assert os.getxattr(f, "user.big") == big
    with pytest.raises(OSError) as e:
        os.setxattr(f, "user.big2", big + b"x")
    assert e.value.errno == errno.E2BIG
    # The object's total (128 KiB of names and values) gives ENOSPC.
    os.setxattr(f, "user.big3", big[:60000])
    with pytest.raises(OSError) as e:
        os.setxattr(f, "user.big4", big[:10000])
    assert e.value.errno == errno.ENOSPC
    os.removexattr(f, "user.big3")
    os.setxattr(f, "user.big4", big[:10000])
    # A buffer too small: ERANGE (getxattr and listxattr with a size).
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(4)
    assert libc.getxattr(f.encode(), b"user.big", buf, 4) == -1
    assert ctypes.get_errno() == errno.ERANGE
    assert libc.getxattr(f.encode(), b"user.big", None, 0) == 65536
    assert libc.listxattr(f.encode(), buf, 4) == -1
    assert ctypes.get_errno() == errno.ERANGE
    # Namespaces the store does not keep.
    for n in ("security.selinux", "system.foo", "other.x"):
        with pytest.raises(OSError) as e:
            os.setxattr(f, n, b"x")
        assert e.value.errno in (errno.EOPNOTSUPP, errno.ENOTSUP)


def test_trusted_is_root_only(shared_mount, users):
    m = shared_mount()
    pub = world_dir(m.p("pub"))
    f = os.path.join(pub, "f")
    as_user("mc10a", "open(f, 'w').close(); os.setxattr(f, 'user.mine', b'1'); out = 0", f=f)
    os.setxattr(f, "trusted.secret", b"root")
    assert os.getxattr(f, "trusted.secret") == b"root"
    assert sorted(os.listxattr(f)) == ["trusted.secret", "user.mine"]
    out = as_user("mc10a", """
out = {"list": sorted(os.listxattr(f))}
try:
    os.setxattr(f, "trusted.x", b"1")
except OSError as e:
    out["set"] = e.errno
try:
    os.getxattr(f, "trusted.secret")
except OSError as e:
    out["get"] = e.errno
""", f=f)
    assert out == {"list": ["user.mine"], "set": errno.EPERM, "get": errno.ENODATA}
    # Another user may not write user.* of a file it cannot write.
    os.chmod(f, 0o644)
    out = as_user("mc10b", "os.setxattr(f, 'user.x', b'1'); out = 0", f=f)
    assert out == {"errno": errno.EACCES}
    assert as_user("mc10b", "out = os.getxattr(f, 'user.mine').decode()", f=f) == "1"


def test_ctime_moves_and_survives_rewrite_and_rename(shared_mount):
    m = shared_mount()
    f = m.p("f")
    open(f, "w").write("one")
    os.setxattr(f, "user.keep", b"me")
    c0 = os.stat(f).st_ctime_ns
    clock_past(c0)
    os.setxattr(f, "user.more", b"x")
    c1 = os.stat(f).st_ctime_ns
    assert c1 > c0
    clock_past(c1)
    os.removexattr(f, "user.more")
    assert os.stat(f).st_ctime_ns > c1
    # A rewrite (a new version) keeps them; so does O_TRUNC and an append.
    with open(f, "w") as fh:
        fh.write("two")
    assert os.getxattr(f, "user.keep") == b"me"
    with open(f, "a") as fh:
        fh.write("three")
    assert os.getxattr(f, "user.keep") == b"me"
    os.truncate(f, 1)
    assert os.getxattr(f, "user.keep") == b"me"
    # Rename of the file and of its directory.
    os.mkdir(m.p("d"))
    os.rename(f, m.p("d", "g"))
    assert os.getxattr(m.p("d", "g"), "user.keep") == b"me"
    os.setxattr(m.p("d"), "user.dir", b"1")
    os.rename(m.p("d"), m.p("d2"))
    assert os.getxattr(m.p("d2", "g"), "user.keep") == b"me"
    assert os.getxattr(m.p("d2"), "user.dir") == b"1"
    # A file replaced by another by rename has the other's attributes.
    open(m.p("h"), "w").close()
    os.rename(m.p("h"), m.p("d2", "g"))
    assert os.listxattr(m.p("d2", "g")) == []


def test_cp_a_and_rsync_X_preserve(shared_mount, tmp_path):
    m = shared_mount()
    src = m.p("src")
    os.makedirs(os.path.join(src, "sub"))
    open(os.path.join(src, "a"), "w").write("A")
    open(os.path.join(src, "sub", "b"), "w").write("B")
    os.setxattr(os.path.join(src, "a"), "user.one", b"1")
    os.setxattr(os.path.join(src, "sub", "b"), "user.two", b"2" * 1000)
    os.setxattr(os.path.join(src, "sub"), "user.dir", b"d")
    subprocess.run(["cp", "-a", src, m.p("cp")], check=True)
    assert os.getxattr(m.p("cp", "a"), "user.one") == b"1"
    assert os.getxattr(m.p("cp", "sub", "b"), "user.two") == b"2" * 1000
    assert os.getxattr(m.p("cp", "sub"), "user.dir") == b"d"
    need("rsync")
    # Out to the local disk and back in.
    out = tmp_path / "out"
    subprocess.run(["rsync", "-aX", src + "/", str(out) + "/"], check=True)
    assert os.getxattr(out / "sub" / "b", "user.two") == b"2" * 1000
    subprocess.run(["rsync", "-aX", str(out) + "/", m.p("rs") + "/"], check=True)
    assert os.getxattr(m.p("rs", "a"), "user.one") == b"1"
    assert os.getxattr(m.p("rs", "sub"), "user.dir") == b"d"
    r = subprocess.run(["rsync", "-naXi", "--checksum", src + "/", m.p("rs") + "/"],
                       check=True, capture_output=True, text=True)
    assert r.stdout.strip() == ""
