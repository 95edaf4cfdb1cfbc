"""Everyday tools on the mount: cp, cat, ls, stat, mkdir, rmdir, mv, rm."""

import ctypes
import errno
import os
import subprocess
import time

import pytest


def run(*cmd, cwd=None):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=cwd).stdout


def test_cp_cat_cmp(mnt):
    run("cp", "/etc/services", mnt.p())
    run("cmp", "/etc/services", mnt.p("services"))
    with open("/etc/services", "rb") as a, open(mnt.p("services"), "rb") as b:
        assert a.read() == b.read()
    assert os.path.getsize(mnt.p("services")) == os.path.getsize("/etc/services")


def test_ls_la_stat_sizes_and_mtimes(mnt):
    umask = os.umask(0)
    os.umask(umask)
    before = time.time()
    for i, n in enumerate([0, 1, 4096, 100000]):
        with open(mnt.p(f"f{i}"), "wb") as f:
            f.write(os.urandom(n))
    after = time.time()
    listing = run("ls", "-la", mnt.p())
    for i in range(4):
        assert f"f{i}" in listing
    for i, n in enumerate([0, 1, 4096, 100000]):
        st = os.stat(mnt.p(f"f{i}"))
        assert st.st_size == n
        assert before - 2 <= st.st_mtime <= after + 2
        assert st.st_mode & 0o777 == 0o666 & ~umask
    os.utime(mnt.p("f1"), (1_000_000_000, 1_234_567_890))
    assert os.stat(mnt.p("f1")).st_mtime == 1_234_567_890
    os.chmod(mnt.p("f1"), 0o600)
    assert os.stat(mnt.p("f1")).st_mode & 0o777 == 0o600


def test_mkdir_p_and_rmdir_not_empty(mnt):
    os.makedirs(mnt.p("a", "b", "c"))
    assert os.path.isdir(mnt.p("a", "b", "c"))
    assert os.listdir(mnt.p("a")) == ["b"]
    with open(mnt.p("a", "b", "file"), "w") as f:
        f.write("x")
    with pytest.raises(OSError) as e:
        os.rmdir(mnt.p("a", "b"))
    assert e.value.errno == errno.ENOTEMPTY
    with pytest.raises(OSError) as e:
        os.mkdir(mnt.p("a"))
    assert e.value.errno == errno.EEXIST
    os.rmdir(mnt.p("a", "b", "c"))
    assert sorted(os.listdir(mnt.p("a", "b"))) == ["file"]
    # An empty directory made through the mount survives.
    os.mkdir(mnt.p("empty"))
    assert os.listdir(mnt.p("empty")) == []
    assert "empty" in os.listdir(mnt.p())
    os.rmdir(mnt.p("empty"))
    assert "empty" not in os.listdir(mnt.p())


def test_mv_file_and_directory_of_1000(mnt):
    with open(mnt.p("one"), "w") as f:
        f.write("hello")
    run("mv", mnt.p("one"), mnt.p("two"))
    assert not os.path.exists(mnt.p("one"))
    assert open(mnt.p("two")).read() == "hello"

    os.mkdir(mnt.p("src"))
    for i in range(1000):
        with open(mnt.p("src", f"f{i:04d}"), "w") as f:
            f.write(f"content {i}\n" * (i % 7 + 1))
    os.mkdir(mnt.p("src", "sub"))
    with open(mnt.p("src", "sub", "deep"), "w") as f:
        f.write("deep")
    run("mv", mnt.p("src"), mnt.p("dst"))
    assert not os.path.exists(mnt.p("src"))
    names = sorted(os.listdir(mnt.p("dst")))
    assert len(names) == 1001
    for i in range(1000):
        with open(mnt.p("dst", f"f{i:04d}")) as f:
            assert f.read() == f"content {i}\n" * (i % 7 + 1)
    assert open(mnt.p("dst", "sub", "deep")).read() == "deep"


def test_rename_noreplace_and_over_existing(mnt):
    for n in ("a", "b"):
        with open(mnt.p(n), "w") as f:
            f.write(n * 10)
    os.rename(mnt.p("a"), mnt.p("b"))  # replaces
    assert open(mnt.p("b")).read() == "a" * 10
    assert not os.path.exists(mnt.p("a"))
    with open(mnt.p("c"), "w") as f:
        f.write("c")
    subprocess.run(["mv", "-n", mnt.p("c"), mnt.p("b")])
    assert open(mnt.p("b")).read() == "a" * 10
    # renameat2(RENAME_NOREPLACE) through the kernel
    libc = ctypes.CDLL(None, use_errno=True)
    AT_FDCWD, RENAME_NOREPLACE = -100, 1
    rc = libc.renameat2(AT_FDCWD, mnt.p("c").encode(), AT_FDCWD, mnt.p("b").encode(),
                        RENAME_NOREPLACE)
    assert rc == -1 and ctypes.get_errno() == errno.EEXIST


def test_rm_r(mnt):
    os.makedirs(mnt.p("t", "u", "v"))
    for d in ("t", "t/u", "t/u/v"):
        for i in range(5):
            with open(mnt.p(d, f"x{i}"), "w") as f:
                f.write("x")
    run("rm", "-r", mnt.p("t"))
    assert not os.path.exists(mnt.p("t"))
    assert os.listdir(mnt.p()) == []


def test_overwrite_append_and_random_write(mnt):
    p = mnt.p("f")
    with open(p, "wb") as f:
        f.write(b"0123456789")
    with open(p, "ab") as f:
        f.write(b"abc")
    assert open(p, "rb").read() == b"0123456789abc"
    with open(p, "r+b") as f:
        f.seek(2)
        f.write(b"XY")
        f.seek(20)
        f.write(b"Z")
    assert open(p, "rb").read() == b"01XY456789abc" + b"\0" * 7 + b"Z"
    with open(p, "wb") as f:
        f.write(b"new")
    assert open(p, "rb").read() == b"new"
    os.truncate(p, 1)
    assert open(p, "rb").read() == b"n"
    os.truncate(p, 4)
    assert open(p, "rb").read() == b"n\0\0\0"


def test_read_back_while_open_for_write(mnt):
    p = mnt.p("rw")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"hello world")
    assert os.pread(fd, 5, 6) == b"world"
    assert os.fstat(fd).st_size == 11
    os.close(fd)
    assert open(p, "rb").read() == b"hello world"


def test_unlink_open_file_keeps_reading(mnt):
    p = mnt.p("gone")
    with open(p, "wb") as f:
        f.write(b"still here")
    f = open(p, "rb")
    os.unlink(p)
    assert not os.path.exists(p)
    assert f.read() == b"still here"
    f.close()


def test_statfs_reports_segment(mnt):
    st = os.statvfs(mnt.p())
    total = st.f_blocks * st.f_frsize
    assert 500 * 2**20 <= total <= 512 * 2**20
    free_before = st.f_bfree
    with open(mnt.p("x"), "wb") as f:
        f.write(b"\1" * (8 << 20))
    assert os.statvfs(mnt.p()).f_bfree <= free_before - (8 << 20) // st.f_frsize
    assert st.f_namemax == 255


def test_unsupported_operations_fail_cleanly(mnt):
    with open(mnt.p("f"), "w") as f:
        f.write("x")
    with pytest.raises(OSError) as e:
        os.setxattr(mnt.p("f"), "security.k", b"v")  # user.* works: test_xattr.py
    assert e.value.errno == errno.EOPNOTSUPP
    # mmap: test_page_cache.py (shared mappings fail only with --cache-mode direct).
    libc = ctypes.CDLL(None, use_errno=True)
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    with open(mnt.p("g"), "w") as f:
        f.write("g")
    rc = libc.renameat2(AT_FDCWD, mnt.p("f").encode(), AT_FDCWD, mnt.p("g").encode(),
                        RENAME_EXCHANGE)
    assert rc == -1 and ctypes.get_errno() == errno.EINVAL
    assert open(mnt.p("f")).read() == "x" and open(mnt.p("g")).read() == "g"
