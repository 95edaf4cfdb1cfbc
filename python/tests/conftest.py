"""Fixtures of the Python suites: a store of each backend, on the one test
harness (tests/harness.py).

- direct: an embedded libmooncake store inside this process (the C extension);
- mount: the pure-Python backend over a real mooncake-fs daemon started for
  the test;
- cluster: the direct backend as a pure client of a real mooncake-master with
  two nodes (mooncake-cli node, 32 MiB each: SEGMENT in all), started for the
  test on loopback.

Every process is stopped at the end of its test (a mount unmounted) and must
then exit 0 with a clean log.

Run with `make python-test`, or PYTHONPATH=python /usr/bin/python3 -m pytest
python/tests after `make all python-ext`.
"""

import ctypes
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for d in (os.path.join(ROOT, "python"), os.path.join(ROOT, "tests")):
    if d not in sys.path:
        sys.path.insert(0, d)

import harness  # noqa: E402  (tests/harness.py)
from harness import pytest_exception_interact, pytest_runtest_logstart  # noqa: E402,F401 (hooks)
from mooncake.async_store import MooncakeDistributedStoreAsync  # noqa: E402

CLI = harness.CLI
free_port = harness.free_port
# Segment of every test store; values larger than this cannot be stored.
SEGMENT = 64 << 20
# Bound on every network wait of a cluster test store (setup option timeout_ms).
TIMEOUT_MS = 2000
# Setup options that are the store's: in a cluster, the master's options.
MASTER_OPTIONS = {"lease_ms": "--lease-ms", "evict_high_pct": "--evict-high",
                  "evict_ratio_pct": "--evict-ratio"}


def addr(buf):
    """The address of a writable buffer's first byte."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


def registered(store, n):
    """n bytes of ctypes memory registered with store: (the array, its
    address). The caller keeps the array alive while the store uses it."""
    buf = (ctypes.c_char * n)()
    a = ctypes.addressof(buf)
    assert store.register_buffer(a, n) == 0
    return buf, a


def python_env():
    """The environment of a child Python process that imports this tree's
    mooncake package."""
    return dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))


def shared_options(s):
    """setup() options with which another process reaches the store of the
    test store s (mode "mount" or "cluster")."""
    return {"mount_point": s.daemon.path} if s.mode == "mount" else \
        {"master_server_addr": s.cluster.addr, "timeout_ms": TIMEOUT_MS}


def numpy_or_skip():
    """numpy, or the calling test is skipped."""
    return pytest.importorskip("numpy", reason="python3-numpy is not installed")


def mount_args(*args, serve=False):
    """mooncake-fs options for a test store: SEGMENT unless --segment-size
    is given; the protocol served only when asked: on --listen, or with
    serve=True on the default (the daemon's own Unix socket)."""
    seg = [] if "--segment-size" in args else ["--segment-size", str(SEGMENT)]
    asked = serve or "--listen" in args or "--master" in args
    return [*seg, *([] if asked else ["--listen", "none"]), *args]


class MasterWithNodes:
    """A mooncake-master (extra options: master_args) and `nodes` nodes of
    node_size each (mooncake-cli node) on loopback, owned by procs (a
    harness.Cluster, which stops and checks them). .master is the master
    now running (start_master() replaces it), .nodes the nodes."""

    def __init__(self, procs, *master_args, nodes=2, node_size="32M"):
        self.procs = procs
        self.master = procs.master(*master_args)
        self.nodes = procs.nodes(self.master, nodes, node_size)

    @property
    def addr(self):
        return self.master.addr

    def start_master(self, *args, port=None):
        self.master = self.procs.master(*args, port=port)
        return self.master

    def add_nodes(self, n, size="32M"):
        new = self.procs.nodes(self.master, n, size)
        self.nodes += new
        return new

    def cli(self, *args, input=None):
        """mooncake-cli against the master (the public C API)."""
        return harness.cli(self.addr, *args, input=input)


@pytest.fixture
def procs(tmp_path_factory):
    """A harness.Cluster for the test's processes, stopped and checked at
    the end (after the stores, whose fixtures depend on this one)."""
    c = harness.Cluster(tmp_path_factory.mktemp("procs"), mktemp=tmp_path_factory.mktemp)
    yield c
    problems = c.close()
    assert not problems, "\n".join(problems)


@pytest.fixture
def make_cluster(procs):
    """make_cluster(*master_args, nodes=2, node_size="32M"): a MasterWithNodes."""
    return lambda *args, **kw: MasterWithNodes(procs, *args, **kw)


@pytest.fixture
def make_daemon(procs):
    """make_daemon(*args, serve=False): a harness.Mount with mount_args()."""
    return lambda *args, serve=False: procs.mount(*mount_args(*args, serve=serve))


def open_store(mode, request, procs, cluster=None, **options):
    """A set-up MooncakeDistributedStoreAsync: mode "direct" (embedded),
    "mount" or "cluster" (the direct backend, a pure client of `cluster` or
    of a new master with two nodes, which takes the MASTER_OPTIONS among
    options; its processes belong to procs). Closed at the end of the test.
    s.mode is the mode; s.daemon the mount's daemon, s.cluster the cluster."""
    s = MooncakeDistributedStoreAsync()
    if mode == "direct":
        rc = s.setup({"global_segment_size": SEGMENT, **options})
    elif mode == "cluster":
        if cluster is None:
            master_args = [a for k, flag in MASTER_OPTIONS.items() if k in options
                           for a in (flag, str(options.pop(k)))]
            cluster = MasterWithNodes(procs, *master_args)
        rc = s.setup({"master_server_addr": cluster.addr, "timeout_ms": TIMEOUT_MS, **options})
        s.cluster = cluster
    else:
        d = procs.mount(*mount_args())
        rc = s.setup({"mount_point": d.path, **options})
        s.daemon = d
    assert rc == 0, f"setup({mode}) returned {rc}"
    assert s.backend == ("mount" if mode == "mount" else "direct")
    s.mode = mode
    request.addfinalizer(lambda: s.close())
    return s


@pytest.fixture(params=["direct", "mount", "cluster"])
def store(request, procs):
    """A store of each backend: direct embedded, mount, and direct against a
    master and two nodes (the test runs once per mode)."""
    return open_store(request.param, request, procs)


@pytest.fixture
def cluster_store(request, procs):
    return open_store("cluster", request, procs)


@pytest.fixture(params=["direct", "cluster"])
def direct_mode(request):
    """The modes of the direct backend: embedded ("direct") and a client of
    a master with two nodes ("cluster"); the test runs once per mode."""
    return request.param


@pytest.fixture
def direct_store(request, procs, direct_mode):
    """A store of the direct backend, once per direct_mode."""
    return open_store(direct_mode, request, procs)


@pytest.fixture
def mount_store(request, procs):
    return open_store("mount", request, procs)


@pytest.fixture
def blank_store(request):
    """blank_store(): a MooncakeDistributedStore not set up yet, closed at
    the end of the test."""
    from mooncake.store import MooncakeDistributedStore

    def make():
        s = MooncakeDistributedStore()
        request.addfinalizer(s.close)
        return s

    return make


@pytest.fixture
def make_store(request, procs):
    """make_store(mode, cluster=None, **setup_options) for tests that need
    options."""
    return lambda backend, **options: open_store(backend, request, procs, **options)
