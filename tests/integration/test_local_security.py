"""Local security: another local user gets from the store exactly what it
gets from the mount (issue 8, item 7).

The embedded mount serves the protocol on a Unix socket in a directory only
its owner can enter; a Unix socket without a secret serves only the
daemon's own user (and root), whatever its path's mode (SO_PEERCRED); a
mount with allow_other checks mode bits (default_permissions); TCP beyond
loopback needs the shared secret, and loopback without one is served with a
warning. The other user is `nobody`, the clients run under setpriv."""

import os
import pathlib
import re
import shutil
import stat
import subprocess
import tempfile

import pytest

from harness import CLI, DAEMON, MASTER, Cluster, Mount, free_port, is_mounted

AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
SECRET_BYTES = b"root's private bytes\n"


@pytest.fixture(autouse=True)
def need_root_and_setpriv():
    if os.geteuid() != 0:
        pytest.skip("needs root, to run clients as another user")
    if not shutil.which("setpriv"):
        pytest.skip("needs setpriv (util-linux)")


@pytest.fixture
def open_mount():
    """open_mount(*args): a mount whose path every user may reach (the
    pytest directories are root's alone), stopped and checked at the end."""
    dirs = []

    def mktemp(_name):
        d = pathlib.Path(tempfile.mkdtemp(prefix="mc-local-"))
        os.chmod(d, 0o755)
        dirs.append(d)  # removed at the end even if the mount fails
        return d

    mounts = Cluster(tempfile.gettempdir(), mktemp=mktemp)
    yield mounts.mount
    errors = mounts.close()
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    assert not errors, "\n".join(errors)


def cli(addr, *args, user=None, input=None):
    cmd = [CLI, "--master", addr, "--timeout-ms", "3000", *args]
    if user == "nobody":
        cmd = AS_NOBODY + cmd
    return subprocess.run(cmd, input=input, capture_output=True, timeout=30)


def refused(r):
    """The call failed the way a stranger should fail: not let in."""
    return r.returncode != 0 and re.search(rb"Permission denied|Connection refused", r.stderr)


def write_private(mnt, name="private", data=SECRET_BYTES):
    with open(mnt.p(name), "wb") as f:
        f.write(data)
    os.chmod(mnt.p(name), 0o600)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def tcp_listen_ports(pid):
    """The TCP ports process pid listens on (from /proc: its socket inodes
    against the kernel's table of listening sockets)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_other_user_cannot_read_or_replace_private_file_through_the_store(open_mount):
    """The issue as reported: root's `chmod 600 mnt/private`, then as nobody
    `mooncake-cli --master ADDR get private` printed it and `put private`
    replaced it."""
    mnt = open_mount("--segment-size", "64M")
    write_private(mnt)
    addr = mnt.served_addr()

    r = cli(addr, "get", "private", user="nobody")
    assert refused(r), r
    assert SECRET_BYTES not in r.stdout
    r = cli(addr, "put", "private", user="nobody", input=b"replaced by nobody")
    assert refused(r), r
    for args in (["rm", "-f", "private"], ["ls"], ["stat", "private"]):
        r = cli(addr, *args, user="nobody")
        assert refused(r), (args, r)
        assert b"private" not in r.stdout, (args, r)
    assert read(mnt.p("private")) == SECRET_BYTES
    # nobody gets nothing from the mount either (no allow_other).
    r = subprocess.run(AS_NOBODY + ["cat", mnt.p("private")], capture_output=True, timeout=30)
    assert r.returncode != 0 and r.stdout == b"", r


def test_default_listener_is_a_unix_socket_in_a_private_directory(make_mount):
    mnt = make_mount("--segment-size", "64M")
    addr = mnt.served_addr()
    assert addr.startswith("unix:/"), addr
    path = addr[5:]
    assert stat.S_ISSOCK(os.lstat(path).st_mode), path
    d = os.lstat(os.path.dirname(path))
    assert stat.S_ISDIR(d.st_mode) and d.st_uid == os.geteuid(), d
    assert stat.S_IMODE(d.st_mode) == 0o700, oct(d.st_mode)
    # Named after the mount point, so that it can be found without the log.
    assert os.path.basename(path) == mnt.path.strip("/").replace("/", "-") + ".sock", path
    # Nothing on TCP (the old default was 127.0.0.1:50051).
    assert tcp_listen_ports(mnt.proc.pid) == set()
    assert mnt.stop() == 0
    assert not os.path.exists(path), "the socket outlived the mount"


def test_owner_uses_the_store_over_the_unix_socket(make_mount):
    mnt = make_mount("--segment-size", "64M")
    write_private(mnt)
    addr = mnt.served_addr()
    r = cli(addr, "get", "private")
    assert r.returncode == 0 and r.stdout == SECRET_BYTES, r
    r = cli(addr, "put", "from-cli", input=b"put over the unix socket")
    assert r.returncode == 0, r
    assert read(mnt.p("from-cli")) == b"put over the unix socket"


def test_unix_listen_anyone_can_reach_serves_only_its_owner(make_mount):
    """An explicit --listen unix:/path in a directory everybody may enter:
    the socket itself checks who connects (SO_PEERCRED)."""
    d = tempfile.mkdtemp(prefix="mc-open-")
    try:
        os.chmod(d, 0o777)
        path = os.path.join(d, "store.sock")
        mnt = make_mount("--segment-size", "64M", "--listen", "unix:" + path)
        os.chmod(path, 0o777)
        write_private(mnt)
        r = cli("unix:" + path, "get", "private", user="nobody")
        assert refused(r), r
        assert b"Permission denied" in r.stderr, r.stderr
        r = cli("unix:" + path, "put", "new", user="nobody", input=b"x")
        assert refused(r), r
        assert not os.path.exists(mnt.p("new"))
        r = cli("unix:" + path, "get", "private")
        assert r.returncode == 0 and r.stdout == SECRET_BYTES, r
        assert re.search(r"warn:.*uid 65534", mnt.read_log()), mnt.read_log()
        assert mnt.stop() == 0
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_allow_other_mount_checks_modes_and_the_socket_stays_its_owners(open_mount):
    mnt = open_mount("--segment-size", "64M", "-o", "allow_other")
    write_private(mnt)
    with open(mnt.p("public"), "wb") as f:
        f.write(b"for everyone")
    os.chmod(mnt.p("public"), 0o644)
    # Through the mount: what the modes allow, nothing more.
    r = subprocess.run(AS_NOBODY + ["cat", mnt.p("public")], capture_output=True, timeout=30)
    assert r.returncode == 0 and r.stdout == b"for everyone", r
    r = subprocess.run(AS_NOBODY + ["cat", mnt.p("private")], capture_output=True, timeout=30)
    assert r.returncode != 0 and b"Permission denied" in r.stderr, r
    r = subprocess.run(AS_NOBODY + ["sh", "-c", f"echo x > {mnt.p('public')}"],
                       capture_output=True, timeout=30)
    assert r.returncode != 0 and read(mnt.p("public")) == b"for everyone", r
    # Through the store: nothing (other users use the mount).
    addr = mnt.served_addr()
    for key in ("public", "private"):
        r = cli(addr, "get", key, user="nobody")
        assert refused(r), r


def mount_as_nobody(d):
    """Mounts an embedded store as nobody (without XDG_RUNTIME_DIR) at d/mnt;
    returns the harness.Mount."""
    d.mkdir()
    shutil.chown(d, "nobody", "nogroup")
    os.mkdir(d / "mnt")
    shutil.chown(d / "mnt", "nobody", "nogroup")
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    return Mount(d, "--segment-size", "16M", prefix=AS_NOBODY, env=env)


def unmount_as_nobody(m):
    subprocess.run(AS_NOBODY + ["fusermount3", "-u", m.path], check=False)
    assert m.wait_exit(30) == 0
    m.check_log()


def test_unprivileged_mount_serves_in_its_own_tmp_directory():
    """A mount by nobody (no XDG_RUNTIME_DIR): the socket goes to
    /tmp/mooncake-fs-65534, made with mode 700; when someone else holds
    that name, to a fresh private directory, removed at exit."""
    own = pathlib.Path("/tmp/mooncake-fs-65534")
    if own.exists():
        pytest.skip(f"{own} exists already")
    if not os.stat("/dev/fuse").st_mode & 0o006:
        # Debian's udev rule (fuse3) makes it 0666; a machine without udev
        # keeps the kernel's 0600, and only root may mount.
        pytest.skip("/dev/fuse is not open to every user here: no unprivileged mounts")
    base = pathlib.Path(tempfile.mkdtemp(prefix="mc-nobody-"))
    os.chmod(base, 0o755)
    try:
        m = mount_as_nobody(base / "a")
        try:
            addr = m.served_addr()
            assert os.path.dirname(addr) == "unix:" + str(own), addr
            st = os.lstat(own)
            assert st.st_uid == 65534 and stat.S_IMODE(st.st_mode) == 0o700, st
            assert cli(addr, "put", "k", user="nobody", input=b"nobody's").returncode == 0
            r = cli(addr, "get", "k")  # root may
            assert r.returncode == 0 and r.stdout == b"nobody's", r
        finally:
            unmount_as_nobody(m)
        os.rmdir(own)

        own.mkdir()  # root's, open to all: not to be used
        os.chmod(own, 0o777)
        m = mount_as_nobody(base / "b")
        try:
            log = m.read_log()
            assert f"not using {own}" in log, log
            addr = m.served_addr()
            temp = os.path.dirname(addr[5:])
            assert temp.startswith(f"{own}-"), addr
            st = os.lstat(temp)
            assert st.st_uid == 65534 and stat.S_IMODE(st.st_mode) == 0o700, st
            assert cli(addr, "ls", user="nobody").returncode == 0
        finally:
            unmount_as_nobody(m)
        assert not os.path.exists(temp), "the private directory outlived the mount"
    finally:
        if own.exists():
            shutil.rmtree(own, ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)


def wait_exit(proc, timeout=15):
    """proc's exit status, or None (and proc killed) if it kept running."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


def test_listening_beyond_loopback_needs_a_secret(cluster, tmp_path):
    # mooncake-fs (embedded): refuses to start, mounts nothing.
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = subprocess.Popen([DAEMON, "-f", "--segment-size", "16M", "--listen",
                          f"0.0.0.0:{free_port()}", str(mnt)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    rc = wait_exit(p)
    out = p.stdout.read()
    if is_mounted(str(mnt)):
        subprocess.run(["fusermount3", "-u", str(mnt)], check=False)
    assert rc not in (None, 0), out
    assert b"without a shared secret" in out and b"--auth-secret-file" in out, out

    # mooncake-master.
    r = subprocess.run([MASTER, "--listen", f"0.0.0.0:{free_port()}"], capture_output=True,
                       timeout=15)
    assert r.returncode != 0, r
    assert b"without a shared secret" in r.stderr and b"--auth-secret-file" in r.stderr, r

    # A node (mooncake-cli node) of a loopback master.
    m = cluster.master("--segment-size", "16M")
    r = subprocess.run([CLI, "--master", m.addr, "--segment-size", "16M", "--listen",
                        "0.0.0.0:0", "node"], capture_output=True, timeout=15)
    assert r.returncode != 0, r
    assert b"without a shared secret" in r.stderr, r

    # With the secret, the same addresses serve.
    key = tmp_path / "secret"
    key.write_bytes(b"local-security-secret\n")
    os.chmod(key, 0o600)
    wide = cluster.master("--auth-secret-file", str(key), host="0.0.0.0")
    cluster.node(wide, "16M", "--auth-secret-file", str(key), host="0.0.0.0")
    r = subprocess.run([CLI, "--master", wide.addr, "--auth-secret-file", str(key), "put", "k"],
                       input=b"v", capture_output=True, timeout=30)
    assert r.returncode == 0, r
    assert "without a shared secret" not in wide.read_log()


def test_loopback_without_a_secret_warns(cluster):
    m = cluster.master()
    log = m.read_log()
    assert re.search(r"warn:.*without a shared secret.*any local user", log), log
