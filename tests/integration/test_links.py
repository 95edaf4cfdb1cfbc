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


def test_hard_link_shares_writes_and_counts_names(mnt):
    with open(mnt.p("a"), "w") as f:
        f.write("first")
    os.mkdir(mnt.p("d"))
    run("ln", mnt.p("a"), mnt.p("d/b"))
    sa, sb = os.stat(mnt.p("a")), os.stat(mnt.p("d/b"))
    assert sa.st_nlink == sb.st_nlink == 2
    assert sa.st_ino == sb.st_ino
    assert open(mnt.p("d/b")).read() == "first"
    with open(mnt.p("d/b"), "w") as f:  # through the second name
        f.write("second, longer")
    assert open(mnt.p("a")).read() == "second, longer"
    with open(mnt.p("a"), "a") as f:
        f.write("!")
    assert open(mnt.p("d/b")).read() == "second, longer!"
    os.chmod(mnt.p("a"), 0o600)
    assert stat.S_IMODE(os.stat(mnt.p("d/b")).st_mode) == 0o600
    os.link(mnt.p("d/b"), mnt.p("c"))
    assert os.stat(mnt.p("a")).st_nlink == 3
    assert sorted(os.listdir(mnt.p())) == ["a", "c", "d"]
    assert [e.stat().st_nlink for e in os.scandir(mnt.p()) if e.name == "c"] == [3]
    # Unlinking one name keeps the others.
    os.unlink(mnt.p("a"))
    assert os.stat(mnt.p("c")).st_nlink == 2
    assert open(mnt.p("d/b")).read() == "second, longer!"
    # rename of a name onto another name of the same file does nothing.
    os.rename(mnt.p("c"), mnt.p("d/b"))
    assert os.path.exists(mnt.p("c")) and os.stat(mnt.p("c")).st_nlink == 2
    # rename of another file over a name drops that name only.
    with open(mnt.p("other"), "w") as f:
        f.write("other")
    os.rename(mnt.p("other"), mnt.p("c"))
    assert open(mnt.p("c")).read() == "other"
    assert os.stat(mnt.p("c")).st_nlink == 1
    assert os.stat(mnt.p("d/b")).st_nlink == 1
    assert open(mnt.p("d/b")).read() == "second, longer!"
    os.unlink(mnt.p("d/b"))
    assert os.listdir(mnt.p("d")) == []
    os.rmdir(mnt.p("d"))
    assert sorted(os.listdir(mnt.p())) == ["c"]


def test_hard_linked_file_shares_its_attributes(mnt):
    """Extended attributes belong to the file, not to a name: set through
    one name they show through every other, survive a rewrite and the
    unlink of the name they were set through."""
    with open(mnt.p("f"), "w") as f:
        f.write("x")
    os.link(mnt.p("f"), mnt.p("g"))
    os.setxattr(mnt.p("f"), "user.k", b"v1")
    assert os.getxattr(mnt.p("g"), "user.k") == b"v1"
    os.setxattr(mnt.p("g"), "user.k", b"v2", os.XATTR_REPLACE)
    assert os.getxattr(mnt.p("f"), "user.k") == b"v2"
    with open(mnt.p("g"), "a") as f:  # a rewrite through the other name
        f.write("y")
    assert os.listxattr(mnt.p("f")) == ["user.k"]
    os.unlink(mnt.p("f"))
    assert os.getxattr(mnt.p("g"), "user.k") == b"v2"
    os.removexattr(mnt.p("g"), "user.k")
    assert os.listxattr(mnt.p("g")) == []
    assert open(mnt.p("g")).read() == "xy"


def test_unlink_of_one_name_and_a_writer_through_it(mnt):
    """unlink of one of several names sets the file's ctime (its link
    count changed); writes through a descriptor opened by another name
    still publish, and so do those through a descriptor whose own name is
    unlinked or renamed over while the file keeps another name: they are
    the file's. With no name left, they are dropped at the last close
    (which answers 0; test_unlinked.py)."""
    from harness import clock_past

    with open(mnt.p("a"), "w") as f:
        f.write("one")
    os.link(mnt.p("a"), mnt.p("b"))
    ct = os.stat(mnt.p("a")).st_ctime_ns
    fd = os.open(mnt.p("a"), os.O_WRONLY)
    clock_past(ct)
    os.unlink(mnt.p("b"))
    st = os.stat(mnt.p("a"))
    assert st.st_nlink == 1 and st.st_ctime_ns > ct
    os.write(fd, b"TWO")
    os.close(fd)
    assert open(mnt.p("a")).read() == "TWO"

    with open(mnt.p("c"), "w") as f:
        f.write("one")
    os.link(mnt.p("c"), mnt.p("d"))
    fd = os.open(mnt.p("c"), os.O_WRONLY)
    os.write(fd, b"X")
    os.unlink(mnt.p("c"))
    os.write(fd, b"YZ")
    os.close(fd)
    assert open(mnt.p("d")).read() == "XYZ"
    assert os.stat(mnt.p("d")).st_nlink == 1

    with open(mnt.p("e"), "w") as f:
        f.write("one")
    os.link(mnt.p("e"), mnt.p("f"))
    with open(mnt.p("other"), "w") as f:
        f.write("other")
    fd = os.open(mnt.p("e"), os.O_WRONLY)
    os.rename(mnt.p("other"), mnt.p("e"))  # before the first write
    os.write(fd, b"QRS")
    os.close(fd)
    assert open(mnt.p("f")).read() == "QRS"
    assert open(mnt.p("e")).read() == "other"

    fd = os.open(mnt.p("f"), os.O_WRONLY)
    os.write(fd, b"lost")
    os.unlink(mnt.p("f"))  # the last name
    os.close(fd)  # no error: a file without a name publishes nothing
    assert not os.path.exists(mnt.p("f"))



def test_a_writer_whose_file_lost_its_last_name_gives_its_space_back(make_mount):
    """A writer publishing through a hard-linked file's inode key (its own
    name unlinked here) after its other name was removed through the API:
    the master refuses the commit (the file has no name left), and the
    version's space comes back, also in an embedded store, which never
    revokes its own writers on its own. (What the close answers:
    test_cluster.py, ..._lost_its_last_name_on_another_mount.)"""
    from harness import cli, cli_stats, wait_for

    m = make_mount("--segment-size", "64M", expect_log=r"publishing \(unlinked\) failed")
    addr = m.served_addr()
    with open(m.p("x"), "w") as f:
        f.write("one")
    os.link(m.p("x"), m.p("y"))
    fd = os.open(m.p("x"), os.O_WRONLY)
    os.write(fd, os.urandom(1 << 20))
    os.unlink(m.p("x"))  # y stays, as far as the mount knows
    r = cli(addr, "rm", "-f", "y")
    assert r.returncode == 0, r.stderr
    try:
        os.close(fd)
    except OSError as e:
        assert e.errno == errno.ESTALE
    wait_for(lambda: cli_stats(addr)["used_bytes"] == 0, "the write's space back", timeout=15)

def test_hard_link_errors(mnt):
    os.mkdir(mnt.p("d"))
    with open(mnt.p("f"), "w") as f:
        f.write("x")
    with pytest.raises(OSError) as e:
        os.link(mnt.p("d"), mnt.p("d2"))
    assert e.value.errno == errno.EPERM
    with pytest.raises(OSError) as e:
        os.link(mnt.p("f"), mnt.p("d"))
    assert e.value.errno == errno.EEXIST
    with pytest.raises(OSError) as e:
        os.link(mnt.p("nope"), mnt.p("g"))
    assert e.value.errno == errno.ENOENT
    os.symlink("f", mnt.p("s"))
    os.link(mnt.p("s"), mnt.p("s2"), follow_symlinks=False)  # a link to a symlink
    assert os.readlink(mnt.p("s2")) == "f"
    assert os.lstat(mnt.p("s")).st_nlink == 2


def make_tree(root):
    os.makedirs(os.path.join(root, "sub", "deep"))
    with open(os.path.join(root, "sub", "file"), "wb") as f:
        f.write(os.urandom(100_000))
    with open(os.path.join(root, "small"), "w") as f:
        f.write("small")
    os.chmod(os.path.join(root, "small"), 0o640)
    os.link(os.path.join(root, "sub", "file"), os.path.join(root, "sub", "deep", "hard"))
    os.link(os.path.join(root, "small"), os.path.join(root, "hard-small"))
    os.symlink("sub/file", os.path.join(root, "rel"))
    os.symlink("/nonexistent/target", os.path.join(root, "dangling"))
    os.symlink("sub", os.path.join(root, "dirlink"))
    os.mkfifo(os.path.join(root, "sub", "fifo"), 0o600)
    os.utime(os.path.join(root, "small"), ns=(10**18, 10**18))


def test_tar_round_trip_with_links_and_fifos(mnt, tmp_path):
    src = tmp_path / "src"
    make_tree(str(src))
    archive = tmp_path / "t.tar"
    run("tar", "-C", str(src), "-cf", str(archive), ".")
    os.mkdir(mnt.p("x"))
    run("tar", "-C", mnt.p("x"), "-xpf", str(archive))
    assert run("tar", "-C", mnt.p("x"), "-df", str(archive)) == ""
    assert os.stat(mnt.p("x/sub/file")).st_ino == os.stat(mnt.p("x/sub/deep/hard")).st_ino
    assert os.stat(mnt.p("x/small")).st_nlink == 2
    assert stat.S_ISFIFO(os.lstat(mnt.p("x/sub/fifo")).st_mode)
    # And back: an archive made in the mount extracts to the same tree.
    archive2 = tmp_path / "t2.tar"
    run("tar", "-C", mnt.p("x"), "-cf", str(archive2), ".")
    out = tmp_path / "out"
    out.mkdir()
    run("tar", "-C", str(out), "-xpf", str(archive2))
    assert run("tar", "-C", str(out), "-df", str(archive)) == ""
    assert os.stat(out / "sub/file").st_ino == os.stat(out / "sub/deep/hard").st_ino


@pytest.mark.skipif(not shutil.which("rsync"), reason="needs rsync")
def test_rsync_ah_round_trip(mnt, tmp_path):
    src = tmp_path / "src"
    make_tree(str(src))
    run("rsync", "-aH", str(src) + "/", mnt.p("r") + "/")
    assert run("rsync", "-naHi", str(src) + "/", mnt.p("r") + "/") == ""
    assert os.stat(mnt.p("r/small")).st_ino == os.stat(mnt.p("r/hard-small")).st_ino
    back = tmp_path / "back"
    run("rsync", "-aH", mnt.p("r") + "/", str(back) + "/")
    assert run("rsync", "-naHi", mnt.p("r") + "/", str(back) + "/") == ""
    assert os.stat(back / "small").st_ino == os.stat(back / "hard-small").st_ino


def add_owners_and_xattrs(root):
    """Gives make_tree()'s tree what an archive of a shared tree holds too:
    another owner and extended attributes. False when root's file system
    keeps no user.* attributes (then there is nothing to compare with)."""
    try:
        os.setxattr(os.path.join(root, "small"), "user.note", b"kept")
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return False
        raise
    os.setxattr(os.path.join(root, "sub"), "user.dir", b"d" * 300)
    os.setxattr(os.path.join(root, "sub", "file"), "user.big", os.urandom(3000))
    os.chown(os.path.join(root, "sub", "file"), 65534, 65534)
    return True


def xattrs_of(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            if os.path.islink(p) or stat.S_ISFIFO(os.lstat(p).st_mode):
                continue
            out[os.path.relpath(p, root)] = {k: os.getxattr(p, k) for k in os.listxattr(p)}
    return out


@pytest.mark.skipif(not shutil.which("rsync"), reason="needs rsync")
def test_tar_rsync_and_cp_keep_everything(mnt, tmp_path):
    """The whole tree (hard links, symlinks, a FIFO, owners, times, modes
    and user.* attributes) through `tar --xattrs -xpf`, `rsync -aHAX` and
    `cp -a`, into the mount and back out, with nothing lost on the way."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to give files another owner")
    src = str(tmp_path / "src")
    make_tree(src)
    if not add_owners_and_xattrs(src):
        pytest.skip(f"{tmp_path} keeps no user.* attributes to compare with")
    want = xattrs_of(src)
    archive = tmp_path / "t.tar"
    xattr_opts = ["--xattrs", "--xattrs-include=user.*"]
    run("tar", *xattr_opts, "-C", src, "-cf", str(archive), ".")
    os.mkdir(mnt.p("t"))
    run("tar", *xattr_opts, "-C", mnt.p("t"), "-xpf", str(archive))
    assert run("tar", "-C", mnt.p("t"), "-df", str(archive)) == ""  # content, owners, modes, times
    assert xattrs_of(mnt.p("t")) == want
    assert os.stat(mnt.p("t/sub/file")).st_uid == 65534
    run("rsync", "-aHAX", src + "/", mnt.p("r") + "/")
    assert run("rsync", "-naHAXi", src + "/", mnt.p("r") + "/") == ""
    run("cp", "-a", mnt.p("r"), mnt.p("c"))  # within the mount
    assert run("rsync", "-naHAXi", src + "/", mnt.p("c") + "/") == ""
    assert xattrs_of(mnt.p("c")) == want
    back = str(tmp_path / "back")
    run("rsync", "-aHAX", mnt.p("c") + "/", back + "/")
    assert run("rsync", "-naHAXi", src + "/", back + "/") == ""
    assert xattrs_of(back) == want
