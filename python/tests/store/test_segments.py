"""setup_dummy() (a pure client of a local full client: an embedded store
or mooncake-fs serving the protocol, or a master), and the segment calls:
allocate_and_mount_segment() / unmount_and_free_segment() grow a cluster
by a node inside this process; mount_segment() does it with a file's
bytes as the segment."""

import asyncio
import os

import pytest

import harness
from conftest import SEGMENT
from mooncake.store import (
    FILE_NOT_FOUND,
    INVALID_PARAMS,
    STORE_CLOSED,
    UNAVAILABLE_IN_CURRENT_MODE,
    MooncakeDistributedStore,
    ReplicateConfig,
)


def test_setup_dummy_attaches_to_a_local_store(blank_store, tmp_path):
    full = blank_store()
    sock = f"unix:{tmp_path}/full.sock"
    assert full.setup({"global_segment_size": SEGMENT, "listen": sock}) == 0
    dummy = blank_store()
    assert dummy.setup_dummy(256 << 20, "64MB", sock) == 0
    assert dummy.put("d/k", b"from the dummy") == 0
    assert full.get("d/k") == b"from the dummy"
    assert full.put("d/j", b"from the full client") == 0
    assert dummy.get("d/j") == b"from the full client"
    assert dummy.setup_dummy(1, 1, sock) == -1010  # already set up


def test_setup_dummy_attaches_to_a_mount(blank_store, make_daemon):
    d = make_daemon("--cache-timeout", "0", serve=True)
    dummy = blank_store()
    assert dummy.setup_dummy(0, 0, d.served_addr()) == 0
    assert dummy.put("seen-as-a-file", b"x" * 100) == 0
    with open(f"{d.path}/seen-as-a-file", "rb") as f:
        assert f.read() == b"x" * 100


def test_setup_dummy_errors(blank_store):
    s = blank_store()
    assert s.setup_dummy(1 << 20, 1 << 20, "") == INVALID_PARAMS
    assert s.setup_dummy("50%", 1 << 20, "unix:/nowhere") == INVALID_PARAMS
    assert s.setup_dummy(1 << 20, "lots", "unix:/nowhere") == INVALID_PARAMS


def segments(cluster):
    return harness.cli_stats(cluster.addr)["segments"]


def test_allocate_and_mount_segment_grows_the_cluster(cluster_store):
    s = cluster_store
    assert segments(s.cluster) == 2
    r = s.allocate_and_mount_segment(16 << 20)
    assert r["ret"] == 0 and r["allocated_size"] == 16 << 20 and len(r["segment_ids"]) == 1
    seg = r["segment_ids"][0]
    assert segments(s.cluster) == 3
    assert s.put("g/k", b"y" * 4096, ReplicateConfig(preferred_segment=seg)) == 0
    ends = [d.get_memory_descriptor().buffer_descriptor.transport_endpoint_
            for d in s.get_replica_desc("g/k")]
    assert ends == [seg]
    assert s.unmount_and_free_segment([seg]) == 0
    assert segments(s.cluster) == 2
    assert s.is_exist("g/k") == 0  # its only replica went with the segment
    assert s.unmount_and_free_segment([seg]) == INVALID_PARAMS


def test_segments_are_closed_with_the_store(cluster_store):
    s = cluster_store
    assert s.allocate_and_mount_segment("8MB")["ret"] == 0
    assert segments(s.cluster) == 3
    s.close()
    assert segments(s.cluster) == 2


def test_segment_calls_elsewhere(store):
    r = store.allocate_and_mount_segment(1 << 20)
    if store.mode != "cluster":
        assert r == {"ret": UNAVAILABLE_IN_CURRENT_MODE, "segment_ids": [], "allocated_size": 0}
    else:
        assert r["ret"] == 0
        assert store.unmount_segment(r["segment_ids"], grace_period_seconds=5) == \
            UNAVAILABLE_IN_CURRENT_MODE
        assert store.unmount_segment(r["segment_ids"]) == 0
        assert store.allocate_and_mount_segment(0)["ret"] == INVALID_PARAMS
    assert store.mount_segment("/dev/shm/no-such-mooncake-file", 1 << 20) == \
        {"ret": FILE_NOT_FOUND if store.mode == "cluster" else UNAVAILABLE_IN_CURRENT_MODE,
         "segment_ids": []}
    assert store.unmount_segment(["no-such-segment"]) == INVALID_PARAMS
    assert store.unmount_and_free_segment("a-string") == INVALID_PARAMS


def test_async_forms(store):
    async def main():
        r = await store.async_allocate_and_mount_segment(1 << 20)
        rc = await store.async_unmount_and_free_segment(r["segment_ids"])
        m = await store.async_mount_segment("/x", 1)
        return r, rc, m

    r, rc, m = asyncio.run(main())
    assert r["ret"] == (0 if store.mode == "cluster" else UNAVAILABLE_IN_CURRENT_MODE)
    assert rc == 0
    assert m["ret"] == (FILE_NOT_FOUND if store.mode == "cluster" else UNAVAILABLE_IN_CURRENT_MODE)


def segment_file(tmp_path, size):
    """A file of size bytes of zeros: on /dev/shm when there is one (the
    usual place for a shared segment), else in tmp_path."""
    d = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tmp_path
    fd, path = __import__("tempfile").mkstemp(prefix="mooncake-test-seg-", dir=d)
    os.ftruncate(fd, size)
    os.close(fd)
    return path


def test_mount_segment_of_a_file(cluster_store, blank_store, tmp_path):
    """The segment is the file's bytes: a value put there is in the file, at
    the replica's offset past the segment's start, and another client reads
    it; unmount_segment() drops it."""
    s = cluster_store
    off, size = 2 * 4096, 16 << 20
    path = segment_file(tmp_path, off + size + 100)
    try:
        r = s.mount_segment(path, size, off)
        assert r["ret"] == 0 and len(r["segment_ids"]) == 1, r
        seg = r["segment_ids"][0]
        assert segments(s.cluster) == 3
        value = bytes(range(256)) * 300 + b"end"
        assert s.put("f/k", value, ReplicateConfig(preferred_segment=seg)) == 0
        (d,) = s.get_replica_desc("f/k")
        buf = d.get_memory_descriptor().buffer_descriptor
        assert buf.transport_endpoint_ == seg and buf.extents == 1
        with open(path, "rb") as f:
            f.seek(off + buf.buffer_address_)
            assert f.read(len(value)) == value
        other = blank_store()
        assert other.setup({"master_server_addr": s.cluster.addr, "global_segment_size": 0,
                            "timeout_ms": 5000}) == 0
        assert other.get("f/k") == value
        assert s.unmount_segment([seg]) == 0
        assert segments(s.cluster) == 2
        assert other.is_exist("f/k") == 0  # its only replica went with the segment
        with open(path, "rb") as f:  # unmapped, the file keeps its bytes
            f.seek(off + buf.buffer_address_)
            assert f.read(len(value)) == value
    finally:
        os.unlink(path)


def test_mount_segment_errors(cluster_store, tmp_path):
    s = cluster_store
    path = segment_file(tmp_path, 1 << 20)
    try:
        assert s.mount_segment(str(tmp_path / "missing"), 1 << 20)["ret"] == FILE_NOT_FOUND
        assert s.mount_segment(path, 1 << 20, 100)["ret"] == INVALID_PARAMS  # not page-aligned
        assert s.mount_segment(path, 1 << 20, 4096)["ret"] == INVALID_PARAMS  # past its end
        assert s.mount_segment(path, 2 << 20)["ret"] == INVALID_PARAMS  # the file is smaller
        assert s.mount_segment(str(tmp_path), 1 << 20)["ret"] == INVALID_PARAMS  # a directory
        assert s.mount_segment(path, 0)["ret"] == INVALID_PARAMS
        assert s.mount_segment(path, 1 << 20, protocol="udp")["ret"] == INVALID_PARAMS
        assert segments(s.cluster) == 2
    finally:
        os.unlink(path)


@pytest.mark.parametrize("call", ["allocate", "mount", "dummy_twice"])
def test_on_a_closed_store(call):
    s = MooncakeDistributedStore()
    if call == "allocate":
        assert s.allocate_and_mount_segment(1 << 20)["ret"] == STORE_CLOSED
    elif call == "mount":
        assert s.mount_segment("/x", 1)["ret"] == STORE_CLOSED
    else:
        assert s.unmount_and_free_segment([]) == 0


def test_init_all_errors(blank_store, direct_store):
    """init_all() joins the master on 127.0.0.1:50051 as a node; only its
    errors are tested (a master on that fixed port may belong to someone
    else on this machine)."""
    assert direct_store.init_all("tcp", "") == INVALID_PARAMS  # already set up
    s = blank_store()
    assert s.init_all("carrier-pigeon", "") == INVALID_PARAMS
    assert s.init_all("tcp", "", "lots") == INVALID_PARAMS
    assert s.health_check() == 1
