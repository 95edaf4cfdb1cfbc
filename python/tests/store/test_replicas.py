"""Replica and task control: get_replica_desc(), batch_get_replica_desc(),
batch_replica_clear(), create_copy_task(), create_move_task(), query_task(),
in the three modes (placement is real only with nodes: the cluster mode's
two nodes; embedded, one local segment; the mount shows none)."""

import asyncio
import uuid

import pytest

import harness
from mooncake.store import (
    INVALID_PARAMS,
    OBJECT_NOT_FOUND,
    STORE_CLOSED,
    TASK_NOT_FOUND,
    UNAVAILABLE_IN_CURRENT_MODE,
    MooncakeDistributedStore,
    ReplicaStatus,
    ReplicateConfig,
    TaskStatus,
    TaskType,
)

VALUE = b"r" * 10000


def endpoints(store, key):
    return sorted(d.get_memory_descriptor().buffer_descriptor.transport_endpoint_
                  for d in store.get_replica_desc(key))


def finished(store, task_id):
    """The task's final QueryTaskResponse (polled until it is done)."""
    out = []

    def done():
        r, rc = store.query_task(task_id)
        assert rc == 0
        out[:] = [r]
        return r.status in (TaskStatus.SUCCESS, TaskStatus.FAILED)

    harness.wait_for(done, "the task to finish")
    return out[0]


def test_replica_desc(store):
    assert store.put("r/a", VALUE) == 0
    descs = store.get_replica_desc("r/a")
    assert store.get_replica_desc("r/missing") == []
    if store.mode == "mount":
        assert descs == [] and store.batch_get_replica_desc(["r/a"]) == {}
        return
    assert len(descs) == 1
    d = descs[0]
    assert d.status == ReplicaStatus.COMPLETE and d.is_memory_replica()
    assert not d.is_disk_replica()
    buf = d.get_memory_descriptor().buffer_descriptor
    assert buf.size_ >= len(VALUE) and buf.extents >= 1
    if store.mode == "direct":
        assert buf.transport_endpoint_ == ""  # the embedded store's own segment
    else:
        assert buf.transport_endpoint_ in {n.addr for n in store.cluster.nodes}
    got = store.batch_get_replica_desc(["r/a", "r/missing"])
    assert list(got) == ["r/a"] and len(got["r/a"]) == 1
    # no read lease: the object can be removed at once
    assert store.remove("r/a") == 0


def test_two_replicas_on_two_nodes(cluster_store):
    s = cluster_store
    assert s.put("r/two", VALUE, ReplicateConfig(replica_num=2)) == 0
    assert endpoints(s, "r/two") == sorted(n.addr for n in s.cluster.nodes)


def test_copy_and_move_tasks(cluster_store):
    s = cluster_store
    a, b = (n.addr for n in s.cluster.nodes)
    assert s.put("r/c", VALUE, ReplicateConfig(preferred_segment=a)) == 0
    assert endpoints(s, "r/c") == [a]
    tid, rc = s.create_copy_task("r/c", [b])
    assert rc == 0 and isinstance(tid, uuid.UUID)
    r = finished(s, tid)
    assert (r.type, r.status, r.id) == (TaskType.REPLICA_COPY, TaskStatus.SUCCESS, tid), r.message
    assert r.created_at_ms_epoch <= r.last_updated_at_ms_epoch
    assert endpoints(s, "r/c") == sorted([a, b]) and s.get("r/c") == VALUE
    # move: one replica on a goes to b
    assert s.put("r/m", VALUE, ReplicateConfig(preferred_segment=a)) == 0
    tid, rc = s.create_move_task("r/m", a, b)
    assert rc == 0
    r = finished(s, tid)
    assert (r.type, r.status) == (TaskType.REPLICA_MOVE, TaskStatus.SUCCESS), r.message
    assert endpoints(s, "r/m") == [b] and s.get("r/m") == VALUE
    # a target that is no node fails the task, the value stays
    tid, rc = s.create_copy_task("r/m", ["127.0.0.1:1"])
    assert rc == 0 and finished(s, tid).status == TaskStatus.FAILED
    assert s.get("r/m") == VALUE


def test_task_errors(store):
    assert store.put("r/e", VALUE) == 0
    if store.mode == "mount":
        assert store.create_copy_task("r/e", ["x"])[1] == UNAVAILABLE_IN_CURRENT_MODE
        assert store.query_task(uuid.uuid4()) == (None, UNAVAILABLE_IN_CURRENT_MODE)
        return
    nil = uuid.UUID(int=0)
    assert store.create_copy_task("r/none", ["x"]) == (nil, OBJECT_NOT_FOUND)
    assert store.create_copy_task("r/e", []) == (nil, INVALID_PARAMS)
    here = endpoints(store, "r/e")[0]
    assert store.create_move_task("r/e", "not-a-source", here) == (nil, INVALID_PARAMS)
    assert store.create_move_task("r/e", here, here) == (nil, INVALID_PARAMS)
    assert store.query_task(uuid.uuid4()) == (None, TASK_NOT_FOUND)
    # copying to where it already is succeeds at once
    tid, rc = store.create_copy_task("r/e", [here])
    assert rc == 0 and finished(store, tid).status == TaskStatus.SUCCESS


def test_batch_replica_clear(store):
    for k in ("r/x", "r/y", "r/z"):
        assert store.put(k, VALUE) == 0
    assert store.get("r/y") == VALUE  # a read lease: clearing skips it
    if store.mode == "mount":  # the mount has no read leases
        assert store.batch_replica_clear(["r/x", "r/y", "r/missing"]) == ["r/x", "r/y"]
        return
    assert store.batch_replica_clear(["r/x", "r/y", "r/missing"]) == ["r/x"]
    assert store.is_exist("r/x") == 0 and store.is_exist("r/y") == 1
    here = endpoints(store, "r/z")[0]
    assert store.batch_replica_clear(["r/z"], "elsewhere:1") == []
    assert store.batch_replica_clear(["r/z"], here) == ["r/z"]


def test_clear_skips_an_object_with_replicas_elsewhere(cluster_store):
    s = cluster_store
    a, _ = (n.addr for n in s.cluster.nodes)
    assert s.put("r/two", VALUE, ReplicateConfig(replica_num=2)) == 0
    assert s.batch_replica_clear(["r/two"], a) == []
    assert len(s.get_replica_desc("r/two")) == 2


def test_async_forms(store):
    async def main():
        assert await store.async_put("r/as", VALUE) == 0
        descs = await store.async_get_replica_desc("r/as")
        many = await store.async_batch_get_replica_desc(["r/as"])
        tid, rc = await store.async_create_copy_task("r/as", ["somewhere:1"])
        q = await store.async_query_task(uuid.uuid4())
        assert await store.async_put("r/as2", VALUE) == 0  # the task may be reading r/as
        cleared = await store.async_batch_replica_clear(["r/as2"])
        return descs, many, rc, q, cleared

    descs, many, rc, q, cleared = asyncio.run(main())
    assert cleared == ["r/as2"]
    if store.mode == "mount":
        assert descs == [] and rc == UNAVAILABLE_IN_CURRENT_MODE
    else:
        assert len(descs) == 1 and len(many["r/as"]) == 1 and rc == 0
        assert q == (None, TASK_NOT_FOUND)


def test_on_a_closed_store():
    s = MooncakeDistributedStore()
    assert s.get_replica_desc("k") == [] and s.batch_get_replica_desc(["k"]) == {}
    assert s.batch_replica_clear(["k"]) == []
    assert s.create_copy_task("k", ["x"])[1] == STORE_CLOSED
    assert s.query_task(uuid.uuid4()) == (None, STORE_CLOSED)


@pytest.mark.parametrize("mode", ["direct"])
def test_desc_classes_have_mooncakes_names(mode):
    from mooncake.store import DiskDescriptor, MemoryDescriptor, QueryTaskResponse
    assert [s.name for s in ReplicaStatus] == ["UNDEFINED", "INITIALIZED", "PROCESSING",
                                               "COMPLETE", "REMOVED", "FAILED"]
    assert [s.name for s in TaskStatus] == ["PENDING", "PROCESSING", "SUCCESS", "FAILED"]
    assert [t.name for t in TaskType] == ["REPLICA_COPY", "REPLICA_MOVE"]
    assert DiskDescriptor().file_path == "" and MemoryDescriptor(None).buffer_descriptor is None
    assert "message" in QueryTaskResponse.__slots__


def test_preferred_segment_is_get_hostname_of_a_node(cluster_store, blank_store):
    """Mooncake's way to keep data local: preferred_segment =
    store.get_hostname() on a node."""
    node = blank_store()
    assert node.setup({"master_server_addr": cluster_store.cluster.addr,
                       "global_segment_size": "16MB", "timeout_ms": 2000}) == 0
    me = node.get_hostname()
    assert me not in {n.addr for n in cluster_store.cluster.nodes}
    for i in range(4):  # whatever else the master would pick
        assert node.put(f"r/local{i}", VALUE, ReplicateConfig(preferred_segment=me)) == 0
        assert endpoints(node, f"r/local{i}") == [me]
