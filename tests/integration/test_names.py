"""Names the mount cannot hold fail with the documented errno (see
docs/SEMANTICS.md), and the daemon carries on."""

import errno
import os

import pytest


def expect_errno(code, fn, *args):
    with pytest.raises(OSError) as e:
        fn(*args)
    assert e.value.errno == code, os.strerror(e.value.errno)


def test_name_too_long(mnt):
    expect_errno(errno.ENAMETOOLONG, open, mnt.p("x" * 256), "w")
    expect_errno(errno.ENAMETOOLONG, os.mkdir, mnt.p("y" * 300))
    expect_errno(errno.ENAMETOOLONG, os.stat, mnt.p("z" * 1000))
    with open(mnt.p("x" * 255), "w") as f:
        f.write("ok")
    assert os.path.getsize(mnt.p("x" * 255)) == 2


def test_key_too_long(mnt):
    # Keys are at most 4096 bytes (with room for a directory marker): nest
    # directories until the key would pass that.
    os.chdir(mnt.p())
    try:
        depth = 0
        while True:
            name = "d" * 200
            try:
                os.mkdir(name)
            except OSError as e:
                assert e.errno == errno.ENAMETOOLONG
                break
            os.chdir(name)
            depth += 1
            assert depth < 100
        assert depth == 4095 // 201
        expect_errno(errno.ENAMETOOLONG, open, "f" * 200, "w")
    finally:
        os.chdir("/")


def test_file_and_directory_of_same_name(mnt):
    with open(mnt.p("same"), "w") as f:
        f.write("file")
    expect_errno(errno.EEXIST, os.mkdir, mnt.p("same"))
    os.mkdir(mnt.p("dir"))
    expect_errno(errno.EISDIR, open, mnt.p("dir"), "w")
    expect_errno(errno.ENOTDIR, os.listdir, mnt.p("same"))
    expect_errno(errno.ENOTDIR, open, mnt.p("same", "child"), "w")


def test_trailing_slash_and_dots(mnt):
    with open(mnt.p("plain"), "w") as f:
        f.write("x")
    expect_errno(errno.ENOTDIR, os.stat, mnt.p("plain") + "/")
    os.mkdir(mnt.p("d"))
    assert os.path.isdir(mnt.p("d") + "/")
    assert os.path.samefile(mnt.p("d", "."), mnt.p("d"))
    assert os.path.samefile(mnt.p("d", ".."), mnt.p())
    # The daemon is still serving.
    assert sorted(os.listdir(mnt.p())) == ["d", "plain"]
