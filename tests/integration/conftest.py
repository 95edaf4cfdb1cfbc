"""Fixtures of the integration tests, on the one harness (tests/harness.py):
real mooncake-fs daemons on temporary mount points and real clusters
(mooncake-master, nodes), stopped at the end of each test; each must then
exit 0 and have logged no error. A failing test prints the command that
reproduces each process.

A test of the mount that asks for `mnt` or `store_mount` runs once per
`mode`: "embedded" (the store inside the mooncake-fs process) and "cluster"
(a mooncake-master with one node holding the same space; the mount a pure
client, --segment-size 0)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import Cluster  # noqa: E402
from harness import pytest_exception_interact, pytest_runtest_logstart  # noqa: E402,F401 (hooks)

# mooncake-fs options that belong to the store: in a cluster, the master's.
MASTER_OPTIONS = ("--lease-ms", "--evict-high", "--evict-ratio")


@pytest.fixture
def make_mount(tmp_path_factory):
    """make_mount(*args, expect_log=None) starts a daemon (harness.Mount);
    all are stopped and checked at the end."""
    mounts = Cluster(tmp_path_factory.getbasetemp(), mktemp=tmp_path_factory.mktemp)
    yield mounts.mount
    errors = mounts.close()
    assert not errors, "\n".join(errors)


@pytest.fixture
def cluster(tmp_path, tmp_path_factory):
    """A harness.Cluster: processes started through it (master(), node(),
    mount()) are stopped and checked at the end (mounts first): each must
    exit 0 and log no error."""
    c = Cluster(tmp_path, mktemp=tmp_path_factory.mktemp)
    yield c
    errors = c.close()
    assert not errors, "\n".join(errors)


@pytest.fixture(params=["embedded", "cluster"])
def mode(request):
    """Where the store of the test's mount lives (see the top of this file)."""
    return request.param


def split_master_options(args):
    """(the options in args that are the master's in a cluster, the rest)."""
    master, rest, i = [], [], 0
    while i < len(args):
        if args[i] in MASTER_OPTIONS:
            master += args[i:i + 2]
            i += 2
        else:
            rest.append(args[i])
            i += 1
    return master, rest


@pytest.fixture
def store_mount(mode, cluster):
    """store_mount(size, *args, expect_log=None): a mount of a store of
    `size` (None: mooncake-fs's default) in the test's mode, ARGS given to
    mooncake-fs (MASTER_OPTIONS to the master in a cluster). m.store_addr is
    where the C API reaches that store: the master, or the embedded store's
    socket; m.master the master (None when embedded)."""

    def make(size, *args, expect_log=None):
        if mode == "embedded":
            seg = ["--segment-size", size] if size else []
            m = cluster.mount(*seg, *args, expect_log=expect_log)
            m.master = None
            m.store_addr = m.served_addr() if "--listen" not in args else None
            return m
        master_args, mount_args = split_master_options(args)
        master = cluster.master(*master_args)
        cluster.node(master, size or "1G")
        m = cluster.mount("--master", master.addr, "--segment-size", "0", *mount_args,
                          expect_log=expect_log)
        m.master, m.store_addr = master, master.addr
        return m

    return make


@pytest.fixture
def mnt(store_mount):
    """A mount of a 512 MiB store, once per mode."""
    return store_mount("512M")
