"""The one test harness of Mooncake FS, used by tests/integration,
python/tests and tests/model: it starts mooncake-master, nodes
(mooncake-cli node) and mooncake-fs mounts as real processes in the
foreground, waits (bounded) until each is ready, and stops them again:
SIGTERM, or fusermount3 -u for a mount, after which each must exit 0 and
leave a log with no error in it (an allow-list per process names the
errors a test provokes on purpose). Every failure message ends with the
command that reproduces the process, and so does the report of a failing
test (pytest_exception_interact).

A process can run in a network namespace (`netns=`, made by
tests/integration/netns.py): under `nsenter --net`, which changes the
network namespace only, so a FUSE mount made there lands in our mount
table (`ip netns exec` would also unshare the mount namespace).

Who stops what: a Cluster owns the processes started through it; its
close() stops them all (mounts first, then nodes and masters together) and
returns the problems it found, for the fixture to assert on. A process
started on its own is the caller's to stop(). And if the test runner dies
without stopping them (killed by a CI job's timeout), each gets SIGTERM
from the kernel (_dies_with_us()): nothing outlives the run."""

import errno
import itertools
import json
import os
import pathlib
import random
import re
import shlex
import signal
import socket
import subprocess
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("MC_BUILD", "build"))
DAEMON = os.path.join(BUILD, "mooncake-fs")
MASTER = os.path.join(BUILD, "mooncake-master")
CLI = os.path.join(BUILD, "mooncake-cli")
MC_BENCH = os.path.join(BUILD, "mc_bench")  # a client of the C API with N requests in flight

# Lines in a log that mean something went wrong.
BAD_LOG = re.compile(r"error|AddressSanitizer|LeakSanitizer|runtime error|Segmentation", re.I)
READY_TIMEOUT = 20  # seconds a process may take to become ready
STOP_TIMEOUT = 30  # ... to exit on SIGTERM (a mount: 60, to flush and unmount)


def free_port():
    """A loopback port that was free a moment ago, below the ephemeral range
    (32768 up): the port the kernel gives a connect() or a bind to port 0
    never is one of these, so only another test's pick can take it before
    its process binds it. Where a process can listen on port 0 and say what
    it bound (Master, Node) the harness does that instead."""
    for _ in range(100):
        port = random.randrange(10000, 32000)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in 10000-32000 after 100 tries")


_seq = itertools.count()


class BoundAddr:
    """A process listening on host:0 (or the port given) whose log says the
    address it bound: addr and port read from the log, waiting until ready."""

    def _listen_on(self, host, port):
        self._addr = f"{host}:{port}" if port else None
        return self._addr or f"{host}:0"

    @property
    def addr(self):
        if self._addr is None:
            self.wait_ready()
            m = re.search(self.bound, self.read_log())
            assert m, self.fail("says no bound address")
            self._addr = m.group(1)
        return self._addr

    @property
    def port(self):
        return int(self.addr.rsplit(":", 1)[1])


def clock_past(ns, timeout=1.0):
    """Returns once the wall clock reads later than ns (a stamp the store
    took from the same clock), so that the next stamp differs from it: what
    a timestamp test needs, without a fixed sleep. Bounded by timeout."""
    deadline = time.monotonic() + timeout
    while time.time_ns() <= ns:
        assert time.monotonic() < deadline, f"the clock never passed {ns}"
        time.sleep(0.001)


def wait_for(cond, what, timeout=30, step=0.1):
    """Polls cond() every step seconds until it holds; fails saying what it
    waited for after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(step)


def revoked_writes(master):
    """How many writes master revoked because nobody renewed them for its
    put TTL, as its log says."""
    return sum(int(n) for n in re.findall(r"revoked (\d+) write", master.read_log()))


def stopped_till_revoked(master, mount):
    """Stops mount's daemon (SIGSTOP) until master logs that it revoked a
    write nobody renewed (the put TTL), then lets it go on."""
    before = revoked_writes(master)
    mount.pause()
    try:
        wait_for(lambda: revoked_writes(master) > before,
                 "a stopped writer to be revoked", timeout=30)
    finally:
        mount.resume()


def past_the_put_ttl(master, stopped):
    """Returns once the master's put TTL has passed, told by a writer that
    stops: opens and writes a file on `stopped` (a mount of master's, its
    log allowing "revoked|publishing"), stops its daemon (SIGSTOP) until
    the master logs that it revoked an idle write, and lets it go on. The
    stopped writer's bytes are lost, as SEMANTICS (Faults) says of a client
    that stops past the put TTL: its close fails with ESTALE, which is
    checked. No child process is started while the daemon is stopped: a
    child's exec would close its copy of the descriptor, and wait for the
    stopped daemon's answer to that FLUSH."""
    n = revoked_writes(master)
    fd = os.open(stopped.p(f"stopped-writer-{n}"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"s")
        stopped_till_revoked(master, stopped)
    except BaseException:
        os.close(fd)
        raise
    try:
        os.close(fd)
    except OSError as e:
        assert e.errno == errno.ESTALE, e
    else:
        raise AssertionError("the close of a writer revoked past the put TTL succeeded")


def is_mounted(path):
    """Whether a FUSE file system is mounted at path (/proc/self/mountinfo)."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path and " - fuse" in line for line in f)


def in_netns(ns, cmd):
    """cmd run in network namespace ns (in the caller's mount namespace)."""
    return ["nsenter", f"--net=/run/netns/{ns}", *cmd]


def cli(master, *args, input=None, netns=None, timeout=60, env=None):
    """Runs mooncake-cli --master MASTER ARGS (the public C API), in netns
    if given, with env if given; returns the CompletedProcess (stdout and
    stderr as bytes)."""
    cmd = [CLI, "--master", master, *args]
    return subprocess.run(in_netns(netns, cmd) if netns else cmd, input=input,
                          capture_output=True, timeout=timeout, env=env)


def cli_stats(master, netns=None):
    """The cluster's state as `mooncake-cli stats --json` prints it: a dict
    of nodes, segments, total_bytes, used_bytes, objects, evicted and
    counters (the master's, by name)."""
    r = cli(master, "stats", "--json", netns=netns)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# Every Proc started since the current test began (pytest_runtest_logstart).
STARTED = []


def pytest_runtest_logstart(nodeid, location):
    """A pytest hook (the conftests import it): a test starts afresh."""
    STARTED.clear()


def pytest_exception_interact(node, call, report):
    """A pytest hook (the conftests import it): the report of a test that
    failed (or errored in setup or teardown) lists the command that
    reproduces each process it started, and where its log is."""
    if STARTED:
        report.sections.append(("processes started (reproduce)", "\n".join(
            f"{p.name} (log {p.log_path}):\n    {p.reproduce()}" for p in STARTED)))


def _unmount_lazily(path):
    subprocess.run(["fusermount3", "-uz", path], check=False)


def _dies_with_us():
    """A prefix under which a process gets SIGTERM when the test runner
    dies, however it dies (a CI job's timeout: SIGTERM, then SIGKILL; no
    finally of ours runs then): a master, node or mount does not outlive
    the run, and a mount unmounts itself on the way out (test_harness.py).
    The kernel sends it when the thread that started the process ends, so
    only a process the main thread starts gets it: one started by another
    thread, which may end first, lives until it is stopped, as before;
    nor one started as another user (a prefix of setpriv --reuid: the
    change of credentials clears the signal)."""
    if threading.current_thread() is threading.main_thread():
        return ["setpriv", "--pdeathsig", "TERM", "--"]
    return []


class Proc:
    """A process in the foreground whose stdout and stderr go to log_path;
    ready once its log matches the regex `ready`. prefix runs before the
    command (prlimit, say); netns names a network namespace to run it in.
    expect_log is a regex of log lines the test provokes (not errors); env
    the environment (ours by default).
    Started by the constructor; waited for by wait_ready() (the subclasses
    wait unless wait=False)."""

    name = "process"
    stop_timeout = STOP_TIMEOUT

    def __init__(self, cmd, log_path, ready, prefix=(), netns=None, expect_log=None, env=None):
        self.cmd = [*prefix, *cmd]
        self.argv = in_netns(netns, self.cmd) if netns else self.cmd
        self.netns = netns
        self.log_path = str(log_path)
        self.ready = ready
        self.expect_log = expect_log
        self.killed = False  # by kill9(): its exit status means nothing
        self.paused = False
        self.stopping = False  # asked to exit once: asking again changes nothing
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([*_dies_with_us(), *self.argv], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)
        STARTED.append(self)

    @property
    def pid(self):
        return self.proc.pid

    def reproduce(self):
        """The command line that starts this process again."""
        return shlex.join(self.argv)

    def fail(self, what, tail=3000):
        """An AssertionError saying what, with the log's tail and the command."""
        return AssertionError(f"{self.name} {what}:\n{self.read_log()[-tail:]}\n"
                              f"reproduce: {self.reproduce()}")

    def read_log(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def is_ready(self):
        return re.search(self.ready, self.read_log()) is not None

    def wait_ready(self, timeout=READY_TIMEOUT):
        """Returns self once ready; raises (and kills it) when it exits first
        or is not ready within timeout seconds."""
        deadline = time.time() + timeout
        while not self.is_ready():
            if self.proc.poll() is not None:
                self.log.close()
                raise self.fail(f"exited {self.proc.returncode} before it was ready")
            if time.time() > deadline:
                self.abandon()
                raise self.fail(f"not ready after {timeout} s")
            time.sleep(0.01)
        return self

    def abandon(self):
        """kill -9 without a check (a process that cannot be stopped cleanly)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()

    def kill9(self):
        """SIGKILL: the test wants it dead, so its exit status is not checked."""
        self.killed = True
        self.proc.kill()
        self.proc.wait()

    def pause(self):
        """SIGSTOP."""
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        """SIGCONT."""
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def rss(self):
        """Resident set size in bytes (0 once it is gone)."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except FileNotFoundError:
            pass
        return 0

    def request_stop(self, how=None):
        """Asks a running process to exit, once: signal `how` (SIGTERM by
        default)."""
        if self.proc.poll() is None and not self.stopping:
            self.stopping = True
            if self.paused:
                self.resume()
            self.proc.send_signal(how or signal.SIGTERM)

    def wait_exit(self, timeout=None):
        """Waits for the exit; returns its status. Raises, after kill -9,
        when it takes longer than timeout (stop_timeout by default)."""
        timeout = timeout or self.stop_timeout
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.abandon()
            raise self.fail(f"did not exit within {timeout} s")
        self.log.close()
        return rc

    def stop(self, how=None, timeout=None):
        """request_stop(how) then wait_exit(timeout); returns the exit status.
        Once it has exited, returns that status again."""
        self.request_stop(how)
        return self.wait_exit(timeout)

    def log_errors(self, bad=BAD_LOG):
        """The lines of the log matching bad, but not expect_log."""
        return [line for line in self.read_log().splitlines() if bad.search(line) and
                not (self.expect_log and re.search(self.expect_log, line))]

    def check_log(self, bad=BAD_LOG):
        errors = self.log_errors(bad)
        assert not errors, f"{self.name} log has errors:\n" + "\n".join(errors) + \
            f"\nreproduce: {self.reproduce()}"

    def problems(self, bad=BAD_LOG):
        """Stops it if it runs; a list of problems: an exit status other
        than 0 (unless killed by kill9()), log lines matching bad."""
        out = []
        try:
            rc = self.stop()
            if rc != 0 and not self.killed:
                out.append(str(self.fail(f"exited {rc}", 2000)))
        except AssertionError as e:
            out.append(str(e))
        errors = self.log_errors(bad)
        if errors:
            out.append(f"{self.name} logged errors:\n" + "\n".join(errors[:40]) +
                       f"\nreproduce: {self.reproduce()}")
        return out


class Master(BoundAddr, Proc):
    """mooncake-master listening on host:port (unless given, a port the
    master binds itself: addr and port come from its log); its log is
    tmp/master-PORT.log with a port given, tmp/master-N.log otherwise."""

    name = "mooncake-master"

    bound = r"listening on (\S+) \(segment"

    def __init__(self, tmp, *args, port=None, host="127.0.0.1", wait=True, **kw):
        listen = self._listen_on(host, port)
        super().__init__([MASTER, "--listen", listen, *args],
                         pathlib.Path(tmp) / f"master-{port or next(_seq)}.log",
                         r"listening on .*segment", **kw)
        if wait:
            self.wait_ready()


def _need_etcd():
    import pytest
    import shutil
    if not shutil.which("etcd"):
        pytest.skip("etcd is not installed (Debian's etcd-server; packaging/deps.sh)")


class Etcd(Proc):
    """One etcd member (Debian's etcd-server) on loopback ports of its own,
    its data in tmp/etcd-PORT; log tmp/etcd-PORT.log. start() again after
    stop() brings the same member back with its data. Skips the test when
    etcd is not installed (packaging/deps.sh installs it). member and
    cluster (etcd's --initial-cluster) make it one of several (EtcdCluster)."""

    name = "etcd"

    def __init__(self, tmp, wait=True, member="t", port=None, peer=None, cluster=None):
        _need_etcd()
        self.tmp = pathlib.Path(tmp)
        self.port, self.peer = port or free_port(), peer or free_port()
        self.member = member
        self.cluster = cluster or f"{member}=http://127.0.0.1:{self.peer}"
        self.endpoint = f"127.0.0.1:{self.port}"
        self.url = f"etcd://{self.endpoint}"  # a master address that follows the leader
        self.start(wait)

    def start(self, wait=True):
        c, p = f"http://127.0.0.1:{self.port}", f"http://127.0.0.1:{self.peer}"
        self.stopping = False
        super().__init__(["etcd", "--name", self.member, "--data-dir",
                          str(self.tmp / f"etcd-{self.port}"),
                          "--listen-client-urls", c, "--advertise-client-urls", c,
                          "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
                          "--initial-cluster", self.cluster],
                         self.tmp / f"etcd-{self.port}.log", r"ready to serve client requests")
        if wait:
            self.wait_ready()
        return self

    def problems(self, bad=BAD_LOG):
        """Stops it; etcd's exit status and log are not ours to judge."""
        try:
            self.stop()
        except AssertionError as e:
            return [str(e)]
        return []


class EtcdCluster:
    """n etcd members of one cluster on loopback (started together: each
    waits for a quorum). endpoint and url name them all, for --etcd and for
    etcd:// master addresses; members are the Etcd processes."""

    def __init__(self, tmp, n=3):
        _need_etcd()
        ports = [(free_port(), free_port()) for _ in range(n)]
        cluster = ",".join(f"e{i}=http://127.0.0.1:{pp}" for i, (_, pp) in enumerate(ports))
        self.members = [Etcd(tmp, wait=False, member=f"e{i}", port=cp, peer=pp, cluster=cluster)
                        for i, (cp, pp) in enumerate(ports)]
        for m in self.members:
            m.wait_ready()
        self.endpoint = ",".join(m.endpoint for m in self.members)
        self.url = "etcd://" + ";".join(m.endpoint for m in self.members)


class Node(BoundAddr, Proc):
    """A process contributing a segment of `size` to master:
    mooncake-cli node, listening on a port it binds itself (addr and port
    come from its log); its log is tmp/node-N.log."""

    name = "node"

    bound = r"node up, serving (\S+)"

    def __init__(self, tmp, master, size="64M", *args, host="127.0.0.1", wait=True, **kw):
        listen = self._listen_on(host, 0)
        self.master = master
        super().__init__([CLI, "--master", master, "--segment-size", str(size), "--listen",
                          listen, *args, "node"],
                         pathlib.Path(tmp) / f"node-{next(_seq)}.log", r"node up", **kw)
        if wait:
            self.wait_ready()


class Mount(Proc):
    """mooncake-fs -f ARGS DIR/mnt, logging to DIR/daemon.log; ready once
    mounted and its store is open (it says "mounted" after both)."""

    name = "mooncake-fs"
    stop_timeout = 60

    def __init__(self, directory, *args, wait=True, **kw):
        directory = pathlib.Path(directory)
        self.path = str(directory / "mnt")
        os.makedirs(self.path, exist_ok=True)
        super().__init__([DAEMON, "-f", *args, self.path], directory / "daemon.log",
                         r"mooncake-fs: mounted", **kw)
        if wait:
            self.wait_ready()

    def p(self, *parts):
        """A path in the mount."""
        return os.path.join(self.path, *parts)

    def served_addr(self):
        """The address an embedded store serves the protocol on, from the log."""
        m = re.search(r"serving (\S+)\)", self.read_log())
        assert m, "the daemon serves no protocol:\n" + self.read_log()
        return m.group(1)

    def is_ready(self):
        return is_mounted(self.path) and super().is_ready()

    def abandon(self):
        super().abandon()
        if is_mounted(self.path):
            _unmount_lazily(self.path)

    def request_stop(self, how="fusermount"):
        """fusermount3 -u (the default), or the signal `how`."""
        if how == "fusermount":
            if self.proc.poll() is None and not self.stopping:
                self.stopping = True
                subprocess.run(["fusermount3", "-u", self.path], check=False)
        else:
            super().request_stop(how)

    def wait_exit(self, timeout=None):
        """As Proc.wait_exit; also raises when the mount outlives the daemon."""
        rc = super().wait_exit(timeout)
        if is_mounted(self.path):
            _unmount_lazily(self.path)
            raise self.fail("exited but the file system is still mounted")
        return rc


class Cluster:
    """The processes of one test, kept in tmp (mount directories from
    mktemp("fs") when given, else tmp/fsN). close() stops and checks them."""

    def __init__(self, tmp, mktemp=None):
        self.tmp = pathlib.Path(tmp)
        self.mktemp = mktemp
        self.procs = []  # masters and nodes, in start order
        self.mounts = []
        self.hung = False  # a request is stuck: close() kills the mounts

    def add(self, p):
        """Takes p (a Proc started elsewhere) into this cluster."""
        (self.mounts if isinstance(p, Mount) else self.procs).append(p)
        return p

    def master(self, *args, **kw):
        """A Master (see there for the options)."""
        return self.add(Master(self.tmp, *args, **kw))

    def etcd(self, n=1):
        """An Etcd member, or an EtcdCluster of n (skips the test without
        etcd)."""
        if n == 1:
            return self.add(Etcd(self.tmp))
        c = EtcdCluster(self.tmp, n)
        for m in c.members:
            self.add(m)
        return c

    def node(self, master, size="64M", *args, **kw):
        """A Node of master (a Master or an address)."""
        return self.add(Node(self.tmp, getattr(master, "addr", master), size, *args, **kw))

    def nodes(self, master, n, size="64M", *args, **kw):
        """n nodes, started together and then waited for (a node does not
        retry its first mount: the master must be up already)."""
        new = [self.node(master, size, *args, wait=False, **kw) for _ in range(n)]
        for p in new:
            p.wait_ready()
        return new

    def mount(self, *args, **kw):
        """A Mount (see there) in a fresh directory."""
        if self.mktemp:
            d = self.mktemp("fs")
        else:
            d = self.tmp / f"fs{len(self.mounts)}"
            d.mkdir()
        return self.add(Mount(d, *args, **kw))

    def close(self, bad=BAD_LOG):
        """Unmounts every mount, then stops nodes and masters together (each
        takes a moment to drain its connections). Returns the problems: an
        exit status other than 0, log lines matching bad (see Proc.problems)."""
        out = []
        for m in self.mounts:
            if self.hung and m.proc.poll() is None:
                m.abandon()  # fusermount -u would wait for the stuck request
                continue
            out += m.problems(bad)
        for p in reversed(self.procs):
            p.request_stop()
        for p in reversed(self.procs):
            out += p.problems(bad)
        return out

    def kill_all(self):
        """kill -9 whatever still runs and unmounts lazily (after a failure)."""
        for p in [*self.mounts, *self.procs]:
            if p.proc.poll() is None or (isinstance(p, Mount) and is_mounted(p.path)):
                p.abandon()
