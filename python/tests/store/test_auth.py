"""setup()'s auth_secret_file: a client (or node) of a cluster whose
master was started with --auth-secret-file proves it knows the secret;
without it, or with another one, setup() fails with RPC_FAIL."""

import os

import pytest

from conftest import TIMEOUT_MS
from mooncake.store import INVALID_PARAMS, RPC_FAIL, MooncakeDistributedStore


def secret(tmp_path, name, text, mode=0o600):
    p = tmp_path / name
    p.write_text(text + "\n")
    os.chmod(p, mode)
    return str(p)


@pytest.fixture
def secure(procs, tmp_path):
    """A master and one node that share a secret, and the secret's file."""
    f = secret(tmp_path, "secret", "correct horse battery staple")
    master = procs.master("--auth-secret-file", f)
    procs.node(master, "32M", "--auth-secret-file", f)
    return master, f


def store(request, **opts):
    s = MooncakeDistributedStore()
    request.addfinalizer(s.close)
    return s, s.setup({"timeout_ms": TIMEOUT_MS, **opts})


def test_the_secret_opens_the_cluster(request, secure):
    master, f = secure
    s, rc = store(request, master_server_addr=master.addr, auth_secret_file=f)
    assert rc == 0
    assert s.put("k", b"v" * 1000) == 0 and s.get("k") == b"v" * 1000
    # as a node too
    n, rc = store(request, master_server_addr=master.addr, auth_secret_file=f,
                  global_segment_size="16MB")
    assert rc == 0 and n.get("k") == b"v" * 1000


def test_no_secret_or_another_is_refused(request, secure, tmp_path):
    master, _ = secure
    s, rc = store(request, master_server_addr=master.addr)
    assert rc == RPC_FAIL and s.health_check() == 1
    other = secret(tmp_path, "other", "wrong")
    s, rc = store(request, master_server_addr=master.addr, auth_secret_file=other)
    assert rc == RPC_FAIL


def test_an_unusable_secret_file(request, secure, tmp_path):
    master, _ = secure
    for f in (str(tmp_path / "missing"), secret(tmp_path, "open", "x", 0o644), str(tmp_path)):
        s, rc = store(request, master_server_addr=master.addr, auth_secret_file=f)
        assert rc == INVALID_PARAMS, f
    s, rc = store(request, master_server_addr=master.addr, auth_secret_file=42)
    assert rc == INVALID_PARAMS
