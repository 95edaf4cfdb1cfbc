"""setup_dummy() (a pure client of a local full client: an embedded store
or mooncake-fs serving the protocol, or a master), and the segment calls:
allocate_and_mount_segment() / unmount_and_free_segment() grow a cluster
by a node inside this process; mount_segment() of a file is unavailable."""

import asyncio

import pytest

import harness
from conftest import SEGMENT
from mooncake.store import (
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
    assert store.mount_segment("/dev/shm/x", 1 << 20) == \
        {"ret": UNAVAILABLE_IN_CURRENT_MODE, "segment_ids": []}
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
    assert rc == 0 and m["ret"] == UNAVAILABLE_IN_CURRENT_MODE


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
