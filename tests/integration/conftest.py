"""Fixtures of the integration tests, on the one harness (tests/harness.py):
real mooncake-fs daemons on temporary mount points and real clusters
(mooncake-master, nodes), stopped at the end of each test; each must then
exit 0 and have logged no error. A failing test prints the command that
reproduces each process."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import Cluster  # noqa: E402


@pytest.fixture
def make_mount(tmp_path_factory):
    """make_mount(*args, expect_log=None) starts a daemon (harness.Mount);
    all are stopped and checked at the end."""
    mounts = Cluster(tmp_path_factory.getbasetemp(), mktemp=tmp_path_factory.mktemp)
    yield mounts.mount
    errors = mounts.close()
    assert not errors, "\n".join(errors)


@pytest.fixture
def mnt(make_mount):
    """A mount with a 512 MiB embedded segment."""
    return make_mount("--segment-size", "512M")


@pytest.fixture
def cluster(tmp_path):
    """A harness.Cluster: processes started through it (master(), node(),
    mount()) are stopped and checked at the end: each must exit 0 and log
    no error."""
    c = Cluster(tmp_path)
    yield c
    errors = c.close()
    assert not errors, "\n".join(errors)
