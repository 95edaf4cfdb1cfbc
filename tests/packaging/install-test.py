#!/usr/bin/python3
"""install-test.py DEBDIR: installs the built packages in a clean root and
runs them the way the system would.

The root is this machine's Debian system seen through an overlay (writes go
to a tmpfs) with no Mooncake in it: no /work, no /usr/local build, a fresh
/run, /tmp and /root. It lives in new mount, network and PID namespaces
(unshare), so nothing leaks: when this process, PID 1 there, ends, every
process, mount and file it made goes with it. In the root:

  1. dpkg -i the five packages (dpkg checks their dependencies);
  2. man -w finds the four man pages, pkg-config finds mooncake;
  3. mooncake-master runs with the ExecStart of the installed
     mooncake-master.service (its EnvironmentFile expanded as systemd does),
     and mooncake-fs with that of mooncake-fs@mnt-mooncake.service (%f, %i,
     both EnvironmentFiles): cp and cat through the mount;
  4. mount -a mounts two /etc/fstab lines (fuse.mooncake-fs: a client of the
     master, an embedded store) through mount.fuse3, and a second mount -a
     mounts nothing more; umount ends their daemons;
  5. the man page's libmooncake(3) EXAMPLE compiles with pkg-config and
     runs; python3-mooncake reads what the mount wrote;
  6. SIGTERM (systemctl stop) unmounts and ends both units' processes with
     status 0.

Exit status: 0 pass, 1 fail, 77 skip (not root, no unshare, no overlayfs;
the reason is printed). Bounded: every wait has a timeout, the whole run a
few seconds beyond the package installation.
"""

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

PACKAGES = ["libmooncake0", "libmooncake-dev", "mooncake-fs", "mooncake-master", "python3-mooncake"]
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8",
       "DEBIAN_FRONTEND": "noninteractive"}
MASTER = "127.0.0.1:50051"
TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def say(msg):
    print(f"install-test: {msg}", flush=True)


def skip(reason):
    say(f"skipped: {reason}")
    sys.exit(77)


class Failure(Exception):
    pass


def run(*cmd, check=True, timeout=120, **kw):
    """Runs cmd (in the root, once chrooted); raises Failure with its output
    when it fails."""
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV, **kw)
    if check and out.returncode != 0:
        raise Failure(f"{shlex.join(cmd)} exited {out.returncode}:\n{out.stdout}{out.stderr}")
    return out


# ---- systemd's command lines ----

def unit_escape_path(path):
    """systemd-escape --path: /mnt/mooncake -> mnt-mooncake."""
    out = []
    for i, ch in enumerate(path.strip("/")):
        if ch == "/":
            out.append("-")
        elif ch.isalnum() or ch in ":_" or (ch == "." and i > 0):
            out.append(ch)
        else:
            out.append("\\x%02x" % ord(ch))
    return "".join(out)


def unit_unescape_path(instance):
    """%f: the instance unescaped, as an absolute path."""
    s = re.sub(r"\\x([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)),
               instance.replace("-", "/"))
    return "/" + s


def read_unit(path):
    """The [Service] settings of a unit file: name -> list of values."""
    settings, section = {}, None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                section = line
                continue
            if section == "[Service]":
                k, v = line.split("=", 1)
                settings.setdefault(k.strip(), []).append(v.strip())
    return settings


def read_env_file(path):
    """VAR=value lines of an EnvironmentFile (shell-style quotes)."""
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and line[0] not in "#;" and "=" in line:
                k, v = line.split("=", 1)
                words = shlex.split(v)
                env[k.strip()] = " ".join(words)
    return env


def command_lines(unit_path, instance=None):
    """The argv of each ExecStartPre and ExecStart of a unit, expanded as
    systemd does: %i, %I, %f; Environment= then each EnvironmentFile= (a
    leading '-': may be missing) in order; $VAR splits into words, ${VAR}
    stays one. Returns (pre: [argv], start: argv)."""
    s = read_unit(unit_path)
    spec = {"%i": instance or "", "%I": (instance or "").replace("-", "/"),
            "%f": unit_unescape_path(instance or ""), "%%": "%"}

    def specifiers(text):
        return re.sub(r"%[iIf%]", lambda m: spec[m.group(0)], text)

    env = {}
    for e in s.get("Environment", []):
        for word in shlex.split(specifiers(e)):
            k, v = word.split("=", 1)
            env[k] = v
    for ef in s.get("EnvironmentFile", []):
        ef = specifiers(ef)
        optional = ef.startswith("-")
        ef = ef.lstrip("-")
        if os.path.exists(ef):
            env.update(read_env_file(ef))
        elif not optional:
            raise Failure(f"{unit_path}: EnvironmentFile {ef} is missing")

    def argv(line):
        line = line.lstrip("-@:+!")
        words = []
        for w in shlex.split(specifiers(line)):
            m = re.fullmatch(r"\$(\w+)", w)
            if m:
                words += env.get(m.group(1), "").split()
            else:
                words.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), w))
        return words

    starts = s.get("ExecStart", [])
    if len(starts) != 1:
        raise Failure(f"{unit_path}: {len(starts)} ExecStart lines")
    return [argv(p) for p in s.get("ExecStartPre", [])], argv(starts[0])


# ---- waiting ----

def wait_for(what, cond, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise Failure(f"timed out after {timeout} s waiting for {what}")


def mounts(kind="fuse.mooncake-fs"):
    """[(source, mount point)] of the mounts whose type starts with kind
    (/proc/self/mountinfo)."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            tail = fields[fields.index("-") + 1:]
            if tail[0].startswith(kind):
                found.append((tail[1], fields[4]))
    return found


def port_open(addr):
    host, port = addr.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        return True
    except OSError:
        return False


def daemons(name):
    """PIDs of the live processes named name (this PID namespace: all
    ours). Daemons that exited stay zombies of this process, PID 1 here,
    which leaves them to the namespace's end (reaping them here could take
    a Popen's status)."""
    pids = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    comm, state = re.match(r"\d+ \((.*)\) (\S)", f.read()).groups()
                if comm == name and state != "Z":
                    pids.append(int(p))
            except (OSError, AttributeError):
                pass
    return pids


class Service:
    """A unit's ExecStart as a process, logging to /var/log/NAME.log."""

    def __init__(self, name, argv):
        self.name, self.argv = name, argv
        self.log = f"/var/log/{name}.log"
        say(f"{name}: {shlex.join(argv)}")
        self.proc = subprocess.Popen(argv, stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                                     env=ENV, start_new_session=True)

    def check_alive(self):
        if self.proc.poll() is not None:
            raise Failure(f"{self.name} exited {self.proc.returncode}:\n{self.read_log()}")
        return False

    def read_log(self):
        with open(self.log) as f:
            return f.read()

    def stop(self, timeout=60):
        """SIGTERM, as systemctl stop; it must exit 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise Failure(f"{self.name} did not exit within {timeout} s of SIGTERM")
        if rc != 0:
            raise Failure(f"{self.name} exited {rc} on SIGTERM:\n{self.read_log()}")
        if re.search(r"error|Segmentation|Sanitizer", self.read_log(), re.I):
            raise Failure(f"{self.name} logged an error:\n{self.read_log()}")


# ---- the clean root ----

def make_root(debdir, base):
    """Mounts the overlay root, on a tmpfs at base, and what a system needs
    in it; copies the packages to /tmp/debs there. Returns the root's
    path."""
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2g", "tmpfs", base], check=True)
    for d in ("upper", "work", "root"):
        os.mkdir(os.path.join(base, d))
    root = os.path.join(base, "root")
    out = subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                          f"lowerdir=/,upperdir={base}/upper,workdir={base}/work", root],
                         capture_output=True, text=True)
    if out.returncode != 0:
        skip(f"cannot mount an overlay over / ({out.stderr.strip()})")
    subprocess.run(["mount", "--rbind", "/dev", f"{root}/dev"], check=True)
    subprocess.run(["mount", "--rbind", "/sys", f"{root}/sys"], check=True)
    subprocess.run(["mount", "-t", "proc", "proc", f"{root}/proc"], check=True)
    for d in ("run", "tmp", "root", "work"):
        if os.path.isdir(f"{root}/{d}"):
            subprocess.run(["mount", "-t", "tmpfs", "tmpfs", f"{root}/{d}"], check=True)
    # Whatever an earlier `make install` left under /usr/local is not there.
    for d in ("bin", "lib", "include", "lib/pkgconfig", "share/man/man1", "share/man/man3",
              "share/man/man8", "lib/systemd/system"):
        path = f"{root}/usr/local/{d}"
        if os.path.isdir(path):
            for f in os.listdir(path):
                if re.match(r"(lib)?mooncake", f):
                    p = os.path.join(path, f)
                    shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
    os.makedirs(f"{root}/tmp/debs")
    for p in PACKAGES:
        shutil.copy(os.path.join(debdir, f"{p}_{version()}_{arch()}.deb"), f"{root}/tmp/debs/")
    return root


def version():
    with open(os.path.join(TOP, "packaging", "debian", "changelog")) as f:
        return re.match(r"mooncake \(([^)]+)\)", f.readline()).group(1)


def arch():
    return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                          check=True).stdout.strip()


# ---- the steps, in the root ----

def install():
    run("dpkg", "-i", *sorted(f"/tmp/debs/{f}" for f in os.listdir("/tmp/debs")), timeout=300)
    for p in PACKAGES:
        st = run("dpkg-query", "-W", "-f=${Status}", p).stdout
        if st != "install ok installed":
            raise Failure(f"{p}: {st}")
    for page in ("mooncake-fs", "mooncake-master", "mooncake-cli", "libmooncake"):
        run("man", "-w", page)
    run("pkg-config", "--exists", "mooncake")
    if shutil.which("systemd-analyze"):
        run("systemd-analyze", "verify", "/lib/systemd/system/mooncake-master.service",
            "/lib/systemd/system/mooncake-fs@.service")
    say("installed: " + ", ".join(PACKAGES) + "; man pages and mooncake.pc found")


def start_master(services):
    with open("/etc/default/mooncake-master", "w") as f:
        f.write(f'MOONCAKE_MASTER_OPTS="--listen {MASTER} --node-ttl-ms 5000"\n')
    pre, argv = command_lines("/lib/systemd/system/mooncake-master.service")
    if argv[0] != "/usr/bin/mooncake-master":
        raise Failure(f"mooncake-master.service runs {argv[0]}")
    for p in pre:
        run(*p)
    m = Service("mooncake-master", argv)
    services.append(m)
    wait_for("the master to listen", lambda: m.check_alive() or port_open(MASTER))
    return m


def start_fs_unit(services):
    mnt = "/mnt/mooncake"
    instance = unit_escape_path(mnt)
    with open("/etc/default/mooncake-fs", "a") as f:
        f.write('MOONCAKE_FS_OPTS="--segment-size 1G"\n')
    os.makedirs("/etc/mooncake", exist_ok=True)
    with open(f"/etc/mooncake/fs-{instance}.conf", "w") as f:
        f.write(f'MOONCAKE_FS_OPTS="--master {MASTER} --segment-size 64M"\n')
    pre, argv = command_lines("/lib/systemd/system/mooncake-fs@.service", instance)
    if argv[0] != "/usr/bin/mooncake-fs" or argv[-1] != mnt or "64M" not in argv:
        raise Failure(f"mooncake-fs@{instance}.service runs {argv}")
    for p in pre:
        run(*p)
    fs = Service(f"mooncake-fs@{instance}", argv)
    services.append(fs)
    wait_for(f"the mount at {mnt}",
             lambda: fs.check_alive() or mnt in [m for _, m in mounts("fuse")])
    return mnt


def through_the_mount(mnt):
    run("cp", "/etc/services", f"{mnt}/services")
    run("mkdir", "-p", f"{mnt}/a/b")
    run("cp", "/etc/services", f"{mnt}/a/b/copy")
    run("cmp", "/etc/services", f"{mnt}/a/b/copy")
    with open("/etc/services", "rb") as f:
        want = f.read()
    if run("cat", f"{mnt}/services").stdout.encode() != want:
        raise Failure("cat through the mount differs from /etc/services")
    got = subprocess.run(["mooncake-cli", "--master", MASTER, "get", "a/b/copy"],
                         capture_output=True, env=ENV, timeout=60)
    if got.returncode != 0 or got.stdout != want:
        raise Failure(f"mooncake-cli get a/b/copy: {got.returncode} {got.stderr!r}")
    say(f"cp, cat, cmp through {mnt} and mooncake-cli get: the same bytes")


def fstab():
    lines = (f"{MASTER} /mnt/client fuse.mooncake-fs _netdev,segment-size=0,timeout-ms=5000 0 0\n"
             "embedded /mnt/embedded fuse.mooncake-fs segment-size=64M,listen=none 0 0\n")
    with open("/etc/fstab", "a") as f:
        f.write(lines)
    os.makedirs("/mnt/client", exist_ok=True)
    os.makedirs("/mnt/embedded", exist_ok=True)
    run("mount", "-a", "-t", "fuse.mooncake-fs", timeout=60)
    want = [(MASTER, "/mnt/client"), ("embedded", "/mnt/embedded")]
    for m in want:
        if m not in mounts():
            raise Failure(f"mount -a did not mount {m}: {mounts()}")
    first = mounts()
    run("mount", "-a", "-t", "fuse.mooncake-fs", timeout=60)
    if mounts() != first:
        raise Failure(f"a second mount -a mounted again: {mounts()}")
    run("cmp", "/etc/services", "/mnt/client/a/b/copy")
    run("cp", "/etc/services", "/mnt/embedded/services")
    run("cmp", "/etc/services", "/mnt/embedded/services")
    before = set(daemons("mooncake-fs"))
    run("umount", "/mnt/client", "/mnt/embedded")
    try:
        wait_for("the fstab mounts' daemons to exit",
                 lambda: len(set(daemons("mooncake-fs")) & before) == 1, timeout=30)
    except Failure as e:
        left = [open(f"/proc/{p}/cmdline").read().replace("\0", " ") for p in daemons("mooncake-fs")]
        raise Failure(f"{e}: {left}, mounts {mounts('')}")
    say("mount -a: both /etc/fstab lines mounted once, used, unmounted; daemons gone")


def library_and_python():
    with open(os.path.join("/tmp", "libmooncake.3.scd")) as f:
        page = f.read()
    example = page.split("# EXAMPLE", 1)[1].split("```", 2)[1]
    with open("/tmp/example.c", "w") as f:
        f.write(example.replace("\\\\", "\\"))
    flags = run("pkg-config", "--cflags", "--libs", "mooncake").stdout.split()
    run("cc", "-Wall", "-Werror", "-o", "/tmp/example", "/tmp/example.c", *flags)
    if not re.search(r"libmooncake\.so\.0 => (/usr)?/lib/", run("ldd", "/tmp/example").stdout):
        raise Failure("the example does not use the installed libmooncake.so.0")
    out = run("/tmp/example").stdout
    if out != "world\n":
        raise Failure(f"libmooncake(3)'s example printed {out!r}")
    code = ("import mooncake\n"
            "assert mooncake.__file__.startswith('/usr/lib/python3/dist-packages/')\n"
            "from mooncake.store import MooncakeDistributedStore as S\n"
            "s = S()\n"
            f"assert s.setup('localhost', 'P2PHANDSHAKE', 0, '16MB', 'tcp', '', '{MASTER}') == 0\n"
            "with open('/etc/services', 'rb') as f:\n"
            "    assert s.get('a/b/copy') == f.read()\n"
            "s.close()\n")
    run("/usr/bin/python3", "-c", code, timeout=60)
    say("libmooncake(3)'s example built with pkg-config ran; python3-mooncake read the file")


def inside(debdir, base, manpage):
    root = make_root(debdir, base)
    shutil.copy(manpage, f"{root}/tmp/libmooncake.3.scd")
    os.chroot(root)
    os.chdir("/")
    run("ip", "link", "set", "lo", "up")
    services = []
    try:
        install()
        master = start_master(services)
        mnt = start_fs_unit(services)
        fs = services[-1]
        through_the_mount(mnt)
        fstab()
        library_and_python()
        fs.stop()
        if mnt in [m for _, m in mounts("fuse")]:
            raise Failure(f"{mnt} is still mounted after SIGTERM")
        master.stop()
        services.clear()
        say("SIGTERM: the unit's mount unmounted, both exited 0")
    finally:
        for s in services:
            if s.proc.poll() is None:
                s.proc.kill()
            say(f"{s.name} log:\n{s.read_log()}")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--inside":
        try:
            inside(sys.argv[2], sys.argv[3], os.path.join(TOP, "docs", "man", "libmooncake.3.scd"))
        except (Failure, subprocess.TimeoutExpired) as e:
            say(f"FAILED: {e}")
            sys.exit(1)
        say("passed")
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    debdir = os.path.abspath(sys.argv[1])
    if os.geteuid() != 0:
        skip("needs root (namespaces, an overlay, dpkg -i, FUSE)")
    for tool in ("unshare", "ip", "mount"):
        if not shutil.which(tool):
            skip(f"no {tool}")
    if not os.path.exists("/dev/fuse"):
        skip("no /dev/fuse")
    base = tempfile.mkdtemp(prefix="mc-install-")  # mounted on in the namespace only
    cmd = ["unshare", "--mount", "--net", "--pid", "--fork", "--kill-child",
           sys.executable, os.path.abspath(__file__), "--inside", debdir, base]
    try:
        rc = subprocess.run(cmd, timeout=480).returncode
    except subprocess.TimeoutExpired:
        say("FAILED: timed out after 480 s (the namespace and all in it are gone)")
        rc = 1
    os.rmdir(base)
    sys.exit(rc)


if __name__ == "__main__":
    main()
