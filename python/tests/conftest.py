"""Fixtures of the Python suites: a store of each backend.

- direct: an embedded libmooncake store inside this process (the C extension);
- mount: the pure-Python backend over a real mooncake-fs daemon started for
  the test, unmounted at teardown, which must then exit 0 with a clean log;
- cluster: the direct backend as a pure client of a real mooncake-master with
  two nodes (mooncake-cli node, 32 MiB each: SEGMENT in all), started for the
  test on loopback and stopped at teardown, each required to exit 0 with a
  clean log.

Run with `make python-test`, or PYTHONPATH=python /usr/bin/python3 -m pytest
python/tests after `make all python-ext`.
"""

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("MC_BUILD", "build"))
DAEMON = os.path.join(BUILD, "mooncake-fs")
MASTER = os.path.join(BUILD, "mooncake-master")
CLI = os.path.join(BUILD, "mooncake-cli")
PYDIR = os.path.join(ROOT, "python")
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)

from mooncake.async_store import MooncakeDistributedStoreAsync  # noqa: E402

# Segment of every test store; values larger than this cannot be stored.
SEGMENT = 64 << 20
BAD_LOG = re.compile(r"error|AddressSanitizer|LeakSanitizer|runtime error|Segmentation", re.I)
# Bound on every network wait of a cluster test store (setup option timeout_ms).
TIMEOUT_MS = 2000


def free_port():
    """A loopback port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path and " - fuse" in line for line in f)


class Daemon:
    """A mooncake-fs daemon in the foreground, mounted at self.path. args
    come before the mount point (without --segment-size in them, SEGMENT is
    given). Ready once mounted and its store is open (it mounts first)."""

    def __init__(self, tmp_path, *args, serve=False):
        self.path = str(tmp_path / "mnt")
        os.makedirs(self.path, exist_ok=True)
        self.log_path = str(tmp_path / "daemon.log")
        seg = [] if "--segment-size" in args else ["--segment-size", str(SEGMENT)]
        # Serve the protocol only when asked: on --listen, or with serve=True
        # on the default (the daemon's own Unix socket, see served_addr()).
        asked = serve or "--listen" in args or "--master" in args
        listen = [] if asked else ["--listen", "none"]
        self.cmd = [DAEMON, "-f", *seg, *listen, *args, self.path]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while not (is_mounted(self.path) and "mooncake-fs: mounted" in self.read_log()):
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited {self.proc.returncode}: {self.read_log()}"
                                     f"\nreproduce: {self.reproduce()}")
            if time.time() > deadline:
                self.proc.kill()
                raise AssertionError(f"not mounted after 20 s\nreproduce: {self.reproduce()}")
            time.sleep(0.01)

    def reproduce(self):
        return " ".join(shlex.quote(a) for a in self.cmd)

    def served_addr(self):
        """The address the embedded store serves the protocol on, from the log."""
        m = re.search(r"serving (\S+)\)", self.read_log())
        assert m, "the daemon serves no protocol:\n" + self.read_log()
        return m.group(1)

    def read_log(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        """Unmounts; asserts the daemon exits 0 and logged no error."""
        if self.proc.poll() is None:
            subprocess.run(["fusermount3", "-u", self.path], check=False)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            subprocess.run(["fusermount3", "-uz", self.path], check=False)
            raise AssertionError(f"daemon did not exit in 60 s\nreproduce: {self.reproduce()}")
        self.log.close()
        assert not is_mounted(self.path), "still mounted after the daemon exited"
        assert rc == 0, f"daemon exited {rc}:\n{self.read_log()[-3000:]}\n" \
                        f"reproduce: {self.reproduce()}"
        bad = [line for line in self.read_log().splitlines() if BAD_LOG.search(line)]
        assert not bad, "daemon log has errors:\n" + "\n".join(bad)


class Proc:
    """A process of a cluster (mooncake-master, mooncake-cli node), ready
    once its log matches `ready`."""

    def __init__(self, cmd, log_path, ready):
        self.cmd = cmd
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.ready = ready
        self.killed = False

    def wait_ready(self, timeout=20):
        deadline = time.time() + timeout
        while not re.search(self.ready, self.read_log()):
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.reproduce()} exited {self.proc.returncode}:\n"
                                     f"{self.read_log()}")
            if time.time() > deadline:
                self.proc.kill()
                raise AssertionError(f"{self.reproduce()} not ready after {timeout} s:\n"
                                     f"{self.read_log()}")
            time.sleep(0.005)
        return self

    def reproduce(self):
        return " ".join(shlex.quote(a) for a in self.cmd)

    def served_addr(self):
        """The address the embedded store serves the protocol on, from the log."""
        m = re.search(r"serving (\S+)\)", self.read_log())
        assert m, "the daemon serves no protocol:\n" + self.read_log()
        return m.group(1)

    def read_log(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def kill9(self):
        """SIGKILL (the test wants it dead: no exit status is checked)."""
        self.killed = True
        self.proc.kill()
        self.proc.wait()

    def terminate(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def check(self):
        """Waits for the exit after terminate(); a list of problems."""
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return [f"{self.reproduce()} did not exit on SIGTERM"]
        self.log.close()
        out = []
        if rc != 0 and not self.killed:
            out.append(f"{self.reproduce()} exited {rc}:\n{self.read_log()[-2000:]}")
        bad = [line for line in self.read_log().splitlines() if BAD_LOG.search(line)]
        if bad:
            out.append(f"{self.reproduce()} logged errors:\n" + "\n".join(bad))
        return out


class Cluster:
    """A mooncake-master (extra options: master_args) and `nodes` nodes of
    node_size each (mooncake-cli node), on loopback ports picked by binding
    port 0. stop() terminates them all and asserts that each exited 0 with
    no error in its log (a process a test killed is only checked for its
    log)."""

    def __init__(self, tmp_path, *master_args, nodes=2, node_size="32M"):
        self.tmp = tmp_path
        self.master = None
        self.masters, self.nodes = [], []
        try:
            self.start_master(*master_args)
            self.add_nodes(nodes, node_size)
        except BaseException:
            for p in self.nodes + self.masters:
                p.kill9()
            raise

    @property
    def addr(self):
        return self.master.addr

    def start_master(self, *args, port=None):
        port = port or free_port()
        m = Proc([MASTER, "--listen", f"127.0.0.1:{port}", *args],
                 str(self.tmp / f"master-{port}.log"), r"listening on .*segment")
        m.addr, m.port = f"127.0.0.1:{port}", port
        self.masters.append(m)
        self.master = m.wait_ready()
        return m

    def add_nodes(self, n, size="32M"):
        # Started together, then waited for (a node does not retry its
        # first mount: the master is up by now).
        new = []
        for _ in range(n):
            port = free_port()
            new.append(Proc([CLI, "--master", self.addr, "--segment-size", size, "--listen",
                             f"127.0.0.1:{port}", "node"],
                            str(self.tmp / f"node-{port}.log"), r"node up"))
        self.nodes += new
        for p in new:
            p.wait_ready()
        return new

    def cli(self, *args, input=None):
        """mooncake-cli against the master (the public C API)."""
        return subprocess.run([CLI, "--master", self.addr, *args], input=input,
                              capture_output=True, timeout=60)

    def stop(self):
        # All at once: each process takes a moment to drain its connections.
        procs = self.nodes + self.masters
        for p in procs:
            p.terminate()
        problems = [msg for p in procs for msg in p.check()]
        assert not problems, "\n".join(problems)


@pytest.fixture
def make_cluster(request, tmp_path_factory):
    """make_cluster(*master_args, nodes=2, node_size="32M"): a Cluster,
    stopped and checked at the end of the test."""

    def make(*args, **kw):
        c = Cluster(tmp_path_factory.mktemp("cluster"), *args, **kw)
        request.addfinalizer(c.stop)
        return c

    return make


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path)
    yield d
    d.stop()


def open_store(mode, request, tmp_path_factory, cluster=None, **options):
    """A set-up MooncakeDistributedStoreAsync: mode "direct" (embedded),
    "mount" or "cluster" (the direct backend, a pure client of `cluster` or
    of a new master with two nodes). Closed (and its processes stopped and
    checked) at the end of the test. s.mode is the mode; s.daemon the mount's
    daemon, s.cluster the cluster."""
    s = MooncakeDistributedStoreAsync()
    if mode == "direct":
        rc = s.setup({"global_segment_size": SEGMENT, **options})
    elif mode == "cluster":
        if cluster is None:
            cluster = Cluster(tmp_path_factory.mktemp("cluster"))
            request.addfinalizer(cluster.stop)
        rc = s.setup({"master_server_addr": cluster.addr, "timeout_ms": TIMEOUT_MS, **options})
        s.cluster = cluster
    else:
        d = Daemon(tmp_path_factory.mktemp("fs"))
        request.addfinalizer(d.stop)
        rc = s.setup({"mount_point": d.path, **options})
        s.daemon = d
    assert rc == 0, f"setup({mode}) returned {rc}"
    assert s.backend == ("mount" if mode == "mount" else "direct")
    s.mode = mode
    request.addfinalizer(lambda: s.close())
    return s


@pytest.fixture(params=["direct", "mount", "cluster"])
def store(request, tmp_path_factory):
    """A store of each backend: direct embedded, mount, and direct against a
    master and two nodes (the test runs once per mode)."""
    return open_store(request.param, request, tmp_path_factory)


@pytest.fixture
def cluster_store(request, tmp_path_factory):
    return open_store("cluster", request, tmp_path_factory)


@pytest.fixture
def direct_store(request, tmp_path_factory):
    return open_store("direct", request, tmp_path_factory)


@pytest.fixture
def mount_store(request, tmp_path_factory):
    return open_store("mount", request, tmp_path_factory)


@pytest.fixture
def make_store(request, tmp_path_factory):
    """make_store(mode, cluster=None, **setup_options) for tests that need
    options."""
    return lambda backend, **options: open_store(backend, request, tmp_path_factory, **options)
