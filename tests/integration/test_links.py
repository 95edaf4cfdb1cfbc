"""Symbolic links, special files and hard links of the mount (issue 10,
points 2 and 3): `ln -s`, readlink, lstat, dangling links, links to
directories, rename over a link; FIFOs, sockets and device nodes as
metadata-only objects (the kernel serves them once the node exists); and
tar and rsync of a tree holding all of these, compared with the original."""

import errno
import os
import shutil
import socket
import stat
import subprocess
import threading

import pytest


def run(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def test_symlink_readlink_lstat(mnt):
    with open(mnt.p("f"), "w") as f:
        f.write("hello")
    os.symlink("f", mnt.p("s"))
    assert os.readlink(mnt.p("s")) == "f"
    st = os.lstat(mnt.p("s"))
    assert stat.S_ISLNK(st.st_mode)
    assert st.st_size == 1
    assert stat.S_IMODE(st.st_mode) == 0o777
    assert st.st_uid == os.getuid()
    with open(mnt.p("s")) as f:
        assert f.read() == "hello"
    assert stat.S_ISREG(os.stat(mnt.p("s")).st_mode)
    run("ln", "-s", "/a/long/absolute/target" * 20, mnt.p("abs"))
    assert os.readlink(mnt.p("abs")) == "/a/long/absolute/target" * 20
    assert sorted(os.listdir(mnt.p())) == ["abs", "f", "s"]
    with os.scandir(mnt.p()) as it:
        kinds = {e.name: e.is_symlink() for e in it}
    assert kinds == {"abs": True, "f": False, "s": True}
    with pytest.raises(OSError) as e:
        os.readlink(mnt.p("f"))
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        os.symlink("g", mnt.p("s"))
    assert e.value.errno == errno.EEXIST
    os.unlink(mnt.p("s"))
    assert not os.path.lexists(mnt.p("s"))
    assert open(mnt.p("f")).read() == "hello"


def test_dangling_symlink_and_symlink_to_directory(mnt):
    os.symlink("nowhere", mnt.p("dangling"))
    assert os.path.lexists(mnt.p("dangling"))
    assert not os.path.exists(mnt.p("dangling"))
    with pytest.raises(FileNotFoundError):
        open(mnt.p("dangling"))
    os.makedirs(mnt.p("d/sub"))
    with open(mnt.p("d/sub/x"), "w") as f:
        f.write("x")
    os.symlink("d", mnt.p("dl"))
    assert os.path.isdir(mnt.p("dl"))
    assert os.listdir(mnt.p("dl")) == ["sub"]
    assert open(mnt.p("dl/sub/x")).read() == "x"
    os.symlink("../d/sub", mnt.p("d/up"))
    assert os.listdir(mnt.p("d/up")) == ["x"]
    # Writing through a dangling link creates its target.
    with open(mnt.p("dangling"), "w") as f:
        f.write("made")
    assert open(mnt.p("nowhere")).read() == "made"
    # rm -r of a directory holding a link to a directory keeps the target.
    shutil.rmtree(mnt.p("d"))
    assert not os.path.exists(mnt.p("dl"))


def test_rename_over_and_of_symlinks(mnt):
    for n in ("a", "b"):
        with open(mnt.p(n), "w") as f:
            f.write(n)
    os.symlink("a", mnt.p("la"))
    os.symlink("b", mnt.p("lb"))
    os.rename(mnt.p("la"), mnt.p("lb"))
    assert os.readlink(mnt.p("lb")) == "a"
    assert not os.path.lexists(mnt.p("la"))
    os.rename(mnt.p("b"), mnt.p("lb"))  # a file over a link
    assert not os.path.islink(mnt.p("lb"))
    assert open(mnt.p("lb")).read() == "b"
    os.symlink("a", mnt.p("lc"))
    os.rename(mnt.p("lc"), mnt.p("a"))  # a link over its own target
    assert os.readlink(mnt.p("a")) == "a"
    with pytest.raises(OSError) as e:
        open(mnt.p("a"))
    assert e.value.errno == errno.ELOOP
    os.mkdir(mnt.p("d"))
    os.symlink("../lb", mnt.p("tmp"))
    os.rename(mnt.p("tmp"), mnt.p("d/l"))
    assert open(mnt.p("d/l")).read() == "b"


def test_symlink_owner_and_times(mnt):
    os.symlink("t", mnt.p("s"))
    os.chown(mnt.p("s"), 1234, 5678, follow_symlinks=False)
    os.utime(mnt.p("s"), ns=(10**18, 2 * 10**18), follow_symlinks=False)
    st = os.lstat(mnt.p("s"))
    assert (st.st_uid, st.st_gid) == (1234, 5678)
    assert st.st_mtime_ns == 2 * 10**18
    assert os.readlink(mnt.p("s")) == "t"


def test_fifo_reader_and_writer(mnt):
    os.mkfifo(mnt.p("fifo"), 0o640)
    st = os.lstat(mnt.p("fifo"))
    assert stat.S_ISFIFO(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o640
    got = []

    def reader():
        with open(mnt.p("fifo"), "rb") as f:
            got.append(f.read())

    t = threading.Thread(target=reader)
    t.start()
    with open(mnt.p("fifo"), "wb") as f:
        f.write(b"through the pipe" * 1000)
    t.join(10)
    assert got == [b"through the pipe" * 1000]
    assert os.lstat(mnt.p("fifo")).st_size == 0
    os.unlink(mnt.p("fifo"))


def test_mknod_devices_and_socket(mnt):
    run("mknod", "-m", "600", mnt.p("null"), "c", "1", "3")
    st = os.lstat(mnt.p("null"))
    assert stat.S_ISCHR(st.st_mode)
    assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3)
    assert stat.S_IMODE(st.st_mode) == 0o600
    os.mknod(mnt.p("blk"), stat.S_IFBLK | 0o644, os.makedev(7, 200))
    st = os.lstat(mnt.p("blk"))
    assert stat.S_ISBLK(st.st_mode)
    assert st.st_rdev == os.makedev(7, 200)
    os.mknod(mnt.p("reg"), stat.S_IFREG | 0o600)
    assert stat.S_ISREG(os.lstat(mnt.p("reg")).st_mode)
    # The kernel opens the device: /dev/null through the mount (unless the
    # mount is nodev).
    if not os.statvfs(mnt.p()).f_flag & os.ST_NODEV:
        with open(mnt.p("null"), "wb") as f:
            f.write(b"gone")
        assert open(mnt.p("null"), "rb").read() == b""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(mnt.p("sock"))
    assert stat.S_ISSOCK(os.lstat(mnt.p("sock")).st_mode)
    s.close()
    os.unlink(mnt.p("sock"))
    assert sorted(os.listdir(mnt.p())) == ["blk", "null", "reg"]
