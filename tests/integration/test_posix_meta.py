"""Owners, modes and times of the mount as POSIX gives them, driven as
several users (issue 10, points 1 and 6): a file belongs to who made it and
stays theirs through rename and rewrite; chown and chgrp follow POSIX's
rules and clear set-ID bits; a write by an unprivileged user clears them;
atime, mtime and ctime move as each operation says; utimensat sets each
time alone; a directory counts 2 + its subdirectories; O_CREAT with mode
0000 makes mode 0000. (Running out of store is ENOSPC: test_space.py; a
write past the store's size makes a sparse file: test_sparse.py.)

The users (mc10a, mc10b, both in group mc10g; mc10b also in mc10h) are made
with useradd for the module and removed after it, under a lock (a file
in /tmp) that one module holds at a time: the users are the machine's, so
test_xattr (which uses them too) on another pytest process, or another
checkout's run, waits instead of losing them to this module's cleanup.
They run Python under `setpriv --init-groups`. The mounts use `-o allow_other` (the daemon adds
default_permissions) in directories every user may reach."""

import errno
import fcntl
import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import pytest

from harness import Cluster, clock_past

USERS = {"mc10a": ["mc10g"], "mc10b": ["mc10g", "mc10h"]}
GROUPS = ["mc10g", "mc10h"]
USERS_LOCK = "/tmp/mooncake-test-users.lock"


def _run(*cmd):
    subprocess.run(cmd, check=False, capture_output=True)


@pytest.fixture(scope="module")
def users():
    """{name: (uid, gid)} of the test users, made for the module."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to make users and act as them")
    if not shutil.which("setpriv") or not shutil.which("useradd"):
        pytest.skip("needs setpriv and useradd")
    with open(USERS_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield from _users()


def _users():
    for g in GROUPS:
        _run("groupadd", g)
    out = {}
    for u, groups in USERS.items():
        _run("useradd", "--no-create-home", "--user-group", "-G", ",".join(groups), u)
        r = subprocess.run(["id", "-u", u], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip("useradd failed")
        g = subprocess.run(["id", "-g", u], capture_output=True, text=True)
        out[u] = (int(r.stdout), int(g.stdout))
    yield out
    for u in USERS:
        _run("userdel", u)
    for g in GROUPS:
        _run("groupdel", g)


def gid_of(group):
    return int(subprocess.run(["getent", "group", group], capture_output=True,
                              text=True).stdout.split(":")[2])


def as_user(user, code, **values):
    """Runs Python code as user (its groups too); code sees `values` as
    globals and sets `out`, returned as decoded JSON. An OSError raised by
    the code comes back as {"errno": N}."""
    prog = ("import json, os, sys, errno\n"
            "g = json.loads(sys.argv[1]); globals().update(g)\n"
            "try:\n"
            + "".join("    " + line + "\n" for line in code.strip().splitlines())
            + "except OSError as e:\n    out = {'errno': e.errno}\n"
            "print(json.dumps(out))\n")
    r = subprocess.run(["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups",
                        sys.executable, "-c", prog, json.dumps(values)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture
def shared_mount(mode, users):
    """shared_mount(size="256M", *args): a mount with allow_other, in a
    directory every user can reach, embedded or a cluster's client."""
    dirs = []

    def mktemp(_name):
        d = pathlib.Path(tempfile.mkdtemp(prefix="mc-posix-"))
        os.chmod(d, 0o755)
        dirs.append(d)
        return d

    c = Cluster(tempfile.gettempdir(), mktemp=mktemp)

    def make(size="256M", *args):
        base = ["-o", "allow_other", "--cache-timeout", "0", *args]
        if mode == "embedded":
            return c.mount("--segment-size", size, *base)
        d = mktemp("cluster")
        c.tmp = d
        master = c.master()
        c.node(master, size)
        return c.mount("--master", master.addr, "--segment-size", "0", *base)

    yield make
    errors = c.close()
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    assert not errors, "\n".join(errors)


def world_dir(path):
    """A directory in the mount every user may write to (made by root)."""
    os.mkdir(path)
    os.chmod(path, 0o1777)
    return path


def ns(t):
    return t.tv_sec * 10**9 + t.tv_nsec if hasattr(t, "tv_sec") else t


def test_owner_is_the_creator_through_rename_and_rewrite(shared_mount, users):
    m = shared_mount()
    pub = world_dir(m.p("pub"))
    uid, gid = users["mc10a"]
    out = as_user("mc10a", """
with open(os.path.join(d, "f"), "w") as f:
    f.write("one")
os.mkdir(os.path.join(d, "sub"))
os.rename(os.path.join(d, "f"), os.path.join(d, "sub", "g"))
with open(os.path.join(d, "sub", "g"), "a") as f:
    f.write("two")
st = os.stat(os.path.join(d, "sub", "g"))
sd = os.stat(os.path.join(d, "sub"))
out = [st.st_uid, st.st_gid, sd.st_uid, sd.st_gid]
""", d=pub)
    assert out == [uid, gid, uid, gid]
    # Root sees the same owners; a rewrite by root keeps them too.
    with open(m.p("pub", "sub", "g"), "a") as f:
        f.write("three")
    st = os.stat(m.p("pub", "sub", "g"))
    assert (st.st_uid, st.st_gid) == (uid, gid)
    assert open(m.p("pub", "sub", "g")).read() == "onetwothree"
    # truncate by path republishes too.
    os.truncate(m.p("pub", "sub", "g"), 3)
    assert os.stat(m.p("pub", "sub", "g")).st_uid == uid


def test_chown_and_chgrp_rules(shared_mount, users):
    m = shared_mount()
    pub = world_dir(m.p("pub"))
    a_uid, a_gid = users["mc10a"]
    b_uid, _ = users["mc10b"]
    g, h = gid_of("mc10g"), gid_of("mc10h")
    f = os.path.join(pub, "f")
    as_user("mc10a", "open(f, 'w').close(); out = 0", f=f)
    # The owner may set the group to one of its groups, not to another.
    assert as_user("mc10a", "os.chown(f, -1, gid); out = 0", f=f, gid=g) == 0
    assert os.stat(f).st_gid == g
    assert as_user("mc10a", "os.chown(f, -1, gid); out = 0", f=f, gid=h) == {"errno": errno.EPERM}
    # ... nor give the file away; and another user may change neither.
    assert as_user("mc10a", "os.chown(f, uid, -1); out = 0", f=f, uid=b_uid) == \
        {"errno": errno.EPERM}
    assert as_user("mc10b", "os.chown(f, -1, gid); out = 0", f=f, gid=h) == {"errno": errno.EPERM}
    # Root may do both.
    os.chown(f, b_uid, h)
    st = os.stat(f)
    assert (st.st_uid, st.st_gid) == (b_uid, h)
    assert as_user("mc10b", "os.chown(f, -1, gid); out = 0", f=f, gid=g) == 0
    # chown and chgrp clear set-user-ID and set-group-ID (with group-execute).
    os.chmod(f, 0o6755)
    os.chown(f, a_uid, -1)
    assert stat.S_IMODE(os.stat(f).st_mode) == 0o755
    os.chmod(f, 0o6755)
    assert as_user("mc10a", "os.chown(f, -1, gid); out = 0", f=f, gid=a_gid) == 0
    assert stat.S_IMODE(os.stat(f).st_mode) == 0o755
    # chown of a file nobody has: ENOENT.
    with pytest.raises(FileNotFoundError):
        os.chown(m.p("nope"), 0, 0)


def test_write_by_unprivileged_user_clears_set_id(shared_mount, users):
    m = shared_mount()
    pub = world_dir(m.p("pub"))
    f = os.path.join(pub, "f")
    as_user("mc10a", "open(f, 'w').close(); os.chmod(f, 0o6777); out = 0", f=f)
    assert stat.S_IMODE(os.stat(f).st_mode) == 0o6777
    # The writer sees the bits gone as soon as its write returns.
    assert as_user("mc10b", """
with open(f, "r+") as fh:
    fh.write("x")
    fh.flush()
    out = [os.fstat(fh.fileno()).st_mode & 0o7777, os.stat(f).st_mode & 0o7777]
""", f=f) == [0o777, 0o777]
    assert stat.S_IMODE(os.stat(f).st_mode) == 0o777
    assert open(f).read() == "x"


def test_copy_by_unprivileged_user_clears_set_id(shared_mount, users):
    """copy_file_range into a file writes it (fs/copy.c): as a write."""
    m = shared_mount()
    pub = world_dir(m.p("pub"))
    f, src = os.path.join(pub, "f"), os.path.join(pub, "src")
    as_user("mc10a", "open(f, 'w').close(); os.chmod(f, 0o6777); out = 0", f=f)
    as_user("mc10b", "open(src, 'w').write('copied'); out = 0", src=src)
    assert as_user("mc10b", """
with open(src, "rb") as s, open(f, "r+b") as fh:
    n = os.copy_file_range(s.fileno(), fh.fileno(), 100, 0, 0)
    out = [n, os.fstat(fh.fileno()).st_mode & 0o7777]
""", f=f, src=src) == [6, 0o777]
    assert stat.S_IMODE(os.stat(f).st_mode) == 0o777
    assert open(f).read() == "copied"


def test_truncate_by_unprivileged_user_clears_set_id(shared_mount, users):
    m = shared_mount()
    pub = world_dir(m.p("pub"))
    f = os.path.join(pub, "f")
    as_user("mc10a", "open(f, 'w').write('abc'); os.chmod(f, 0o6777); out = 0", f=f)
    assert as_user("mc10b", """
os.truncate(f, 1)
out = os.stat(f).st_mode & 0o7777
""", f=f) == 0o777
    assert stat.S_IMODE(os.stat(f).st_mode) == 0o777
    assert open(f).read() == "a"
    # Root keeps them (CAP_FSETID), as on Linux.
    os.chmod(f, 0o6777)
    os.truncate(f, 0)
    assert stat.S_IMODE(os.stat(f).st_mode) == 0o6777


def test_allow_other_checks_permissions(shared_mount, users):
    m = shared_mount()
    pub = world_dir(m.p("pub"))
    secret = os.path.join(pub, "secret")
    mine = os.path.join(pub, "mine")
    as_user("mc10a", """
with open(secret, "w") as fh:
    fh.write("a's")
os.chmod(secret, 0o600)
os.mkdir(mine, 0o755)
out = 0
""", secret=secret, mine=mine)
    assert as_user("mc10b", "out = open(p).read()", p=secret) == {"errno": errno.EACCES}
    assert as_user("mc10b", "open(p, 'w').close(); out = 0",
                   p=os.path.join(mine, "x")) == {"errno": errno.EACCES}
    assert as_user("mc10b", "os.chmod(p, 0o644); out = 0", p=secret) == {"errno": errno.EPERM}
    assert as_user("mc10a", "out = open(p).read()", p=secret) == "a's"
    # The sticky world directory: b cannot remove a's file.
    assert as_user("mc10b", "os.unlink(p); out = 0", p=secret) == {"errno": errno.EPERM}


def test_o_creat_mode_0000(shared_mount, users):
    """Regression: open(O_CREAT, 0000) made mode 0644."""
    m = shared_mount()
    old = os.umask(0)
    try:
        fd = os.open(m.p("zero"), os.O_CREAT | os.O_WRONLY, 0)
        os.write(fd, b"data")
        os.close(fd)
        fd = os.open(m.p("six"), os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)
        os.mkdir(m.p("d"), 0o700)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(m.p("zero")).st_mode) == 0
    assert open(m.p("zero"), "rb").read() == b"data"  # root reads it anyway
    assert stat.S_IMODE(os.stat(m.p("six")).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(m.p("d")).st_mode) == 0o700
    # A rewrite keeps mode 0000.
    with open(m.p("zero"), "ab") as f:
        f.write(b"more")
    assert stat.S_IMODE(os.stat(m.p("zero")).st_mode) == 0


def test_timestamps(shared_mount, users):
    m = shared_mount()
    d = m.p("d")
    os.mkdir(d)
    f = os.path.join(d, "f")
    t0 = os.stat(d)
    clock_past(t0.st_mtime_ns)
    with open(f, "w") as fh:
        fh.write("x")
    t1 = os.stat(d)
    assert t1.st_mtime_ns > t0.st_mtime_ns and t1.st_ctime_ns > t0.st_ctime_ns, "create"
    st = os.stat(f)
    assert st.st_mtime_ns == st.st_ctime_ns
    # chmod: ctime moves, mtime does not; the directory stays.
    clock_past(st.st_ctime_ns)
    os.chmod(f, 0o600)
    st2 = os.stat(f)
    assert st2.st_ctime_ns > st.st_ctime_ns and st2.st_mtime_ns == st.st_mtime_ns
    assert os.stat(d).st_mtime_ns == t1.st_mtime_ns
    # Rewriting a file changes its mtime and ctime, not its directory's.
    clock_past(max(st2.st_mtime_ns, st2.st_ctime_ns))
    with open(f, "a") as fh:
        fh.write("y")
    st3 = os.stat(f)
    assert st3.st_mtime_ns > st2.st_mtime_ns and st3.st_ctime_ns > st2.st_ctime_ns
    assert os.stat(d).st_mtime_ns == t1.st_mtime_ns
    # utimensat: each field alone, UTIME_OMIT and UTIME_NOW.
    os.utime(f, ns=(1_000_000_000_123, 2_000_000_000_456))
    st4 = os.stat(f)
    assert (st4.st_atime_ns, st4.st_mtime_ns) == (1_000_000_000_123, 2_000_000_000_456)
    assert st4.st_ctime_ns >= st3.st_ctime_ns
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2

    class Ts(ctypes.Structure):
        _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]

    def utimensat(path, a, b):
        ts = (Ts * 2)(a, b)
        assert libc.utimensat(-100, path.encode(), ts, 0) == 0, ctypes.get_errno()

    utimensat(f, Ts(5, 0), Ts(0, UTIME_OMIT))
    st5 = os.stat(f)
    assert (st5.st_atime_ns, st5.st_mtime_ns) == (5 * 10**9, 2_000_000_000_456)
    utimensat(f, Ts(0, UTIME_OMIT), Ts(7, 0))
    st6 = os.stat(f)
    assert (st6.st_atime_ns, st6.st_mtime_ns) == (5 * 10**9, 7 * 10**9)
    before = time.time_ns()
    utimensat(f, Ts(0, UTIME_NOW), Ts(0, UTIME_OMIT))
    st7 = os.stat(f)
    assert st7.st_atime_ns >= before - 10**9 and st7.st_mtime_ns == 7 * 10**9
    # Reading moves atime when it is not after mtime and ctime (relatime).
    os.utime(f, ns=(1, 10**9))
    open(f).read()
    assert os.stat(f).st_atime_ns > 10**9
    # rename: both directories and the file's ctime; unlink: the directory.
    e = m.p("e")
    os.mkdir(e)
    te, td = os.stat(e), os.stat(d)
    cf = os.stat(f).st_ctime_ns
    clock_past(max(te.st_mtime_ns, td.st_mtime_ns, cf))
    os.rename(f, os.path.join(e, "f"))
    assert os.stat(e).st_mtime_ns > te.st_mtime_ns
    assert os.stat(d).st_mtime_ns > td.st_mtime_ns
    assert os.stat(os.path.join(e, "f")).st_ctime_ns > cf
    te = os.stat(e)
    clock_past(te.st_mtime_ns)
    os.unlink(os.path.join(e, "f"))
    assert os.stat(e).st_mtime_ns > te.st_mtime_ns
    # A user may touch (UTIME_NOW) a file it may write, not set explicit times.
    pub = world_dir(m.p("pub"))
    g = os.path.join(pub, "g")
    open(g, "w").close()
    os.chmod(g, 0o666)
    assert as_user("mc10a", "os.utime(p); out = 0", p=g) == 0
    assert as_user("mc10a", "os.utime(p, (1, 1)); out = 0", p=g) == {"errno": errno.EPERM}


def test_root_directory_counts_subdirectories_and_has_times(store_mount):
    """The root shows 2 + its subdirectories, and its mtime and ctime move
    when an entry is made or removed in it (the master keeps them)."""
    m = store_mount("64M")
    root = m.p()
    assert os.stat(root).st_nlink == 2
    t0 = os.stat(root).st_mtime_ns
    clock_past(t0)
    os.mkdir(m.p("a"))
    os.makedirs(m.p("b", "deep"))
    open(m.p("f"), "w").close()
    st = os.stat(root)
    assert st.st_nlink == 4
    assert st.st_mtime_ns > t0 and st.st_ctime_ns == st.st_mtime_ns
    clock_past(st.st_mtime_ns)
    os.unlink(m.p("f"))
    st2 = os.stat(root)
    assert st2.st_mtime_ns > st.st_mtime_ns
    clock_past(st2.st_mtime_ns)
    os.rmdir(m.p("a"))
    st3 = os.stat(root)
    assert st3.st_nlink == 3 and st3.st_mtime_ns > st2.st_mtime_ns
    os.mkdir(m.p("b", "other"))  # not in the root
    assert os.stat(root).st_mtime_ns == st3.st_mtime_ns


def test_directory_nlink_counts_subdirectories(shared_mount, users):
    m = shared_mount()
    os.mkdir(m.p("d"))
    assert os.stat(m.p("d")).st_nlink == 2
    for s in ("a", "b", "c"):
        os.mkdir(m.p("d", s))
    open(m.p("d", "file"), "w").close()
    os.makedirs(m.p("d", "a", "deep"))
    assert os.stat(m.p("d")).st_nlink == 5
    assert os.stat(m.p("d", "a")).st_nlink == 3
    # Through a listing (readdirplus) too.
    names = {e.name: e.stat().st_nlink for e in os.scandir(m.p("d")) if e.is_dir()}
    assert names == {"a": 3, "b": 2, "c": 2}
    os.rmdir(m.p("d", "b"))
    assert os.stat(m.p("d")).st_nlink == 4
    assert os.stat(m.p("d", "file")).st_nlink == 1


def test_set_group_id_directory_passes_its_group_on(shared_mount, users):
    """In a set-group-ID directory, what a user makes takes the directory's
    group (not the user's), and a directory made there the bit too."""
    m = shared_mount()
    uid, gid = users["mc10a"]
    _, other_gid = users["mc10b"]
    d = m.p("team")
    os.mkdir(d)
    os.chown(d, 0, other_gid)
    os.chmod(d, 0o2777)
    out = as_user("mc10a", """
with open(os.path.join(d, "f"), "w") as f:
    f.write("x")
os.mkdir(os.path.join(d, "sub"), 0o755)
os.symlink("f", os.path.join(d, "l"))
st, sd, sl = (os.lstat(os.path.join(d, n)) for n in ("f", "sub", "l"))
out = [st.st_uid, st.st_gid, sd.st_gid, sd.st_mode & 0o7777, sl.st_gid]
""", d=d)
    assert out == [uid, other_gid, other_gid, 0o2755, other_gid]
    # Without the bit, the creator's own group.
    os.chmod(d, 0o777)
    out = as_user("mc10a", """
with open(os.path.join(d, "g"), "w") as f:
    f.write("x")
out = os.stat(os.path.join(d, "g")).st_gid
""", d=d)
    assert out == gid
