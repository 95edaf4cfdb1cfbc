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
    SEGMENT_NOT_FOUND,
    STORE_CLOSED,
    TASK_NOT_FOUND,
    TASK_PENDING_LIMIT_EXCEEDED,
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
    # a target that is no node: Mooncake's SEGMENT_NOT_FOUND, the value stays
    assert s.create_copy_task("r/m", ["127.0.0.1:1"]) == (uuid.UUID(int=0), SEGMENT_NOT_FOUND)
    assert s.get("r/m") == VALUE


def version(s, key):
    return s._b.replicas(key)[1]


def test_the_master_copies_without_a_new_version(cluster_store):
    """The copy is the master's: the replica joins the same version, and
    the bytes on the new node are the object's (read after the first node
    is gone)."""
    s = cluster_store
    a, b = (n.addr for n in s.cluster.nodes)
    big = bytes(range(256)) * (5 * 4096 + 7)  # > one 4 MiB piece
    assert s.put("r/v", big, ReplicateConfig(preferred_segment=a)) == 0
    before = version(s, "r/v")
    tid, rc = s.create_copy_task("r/v", [b])
    assert rc == 0
    r = finished(s, tid)
    assert r.status == TaskStatus.SUCCESS, r.message
    assert r.assigned_client != uuid.UUID(int=0)  # the target node did the copy
    assert version(s, "r/v") == before and endpoints(s, "r/v") == sorted([a, b])
    # a query later still finds the finished task
    assert s.query_task(tid)[0].status == TaskStatus.SUCCESS


def test_a_moved_object_survives_its_source_node(cluster_store):
    s = cluster_store
    nodes = s.cluster.nodes
    a, b = nodes[0].addr, nodes[1].addr
    big = bytes(range(251)) * 40000
    assert s.put("r/mv", big, ReplicateConfig(preferred_segment=a)) == 0
    before = version(s, "r/mv")
    tid, rc = s.create_move_task("r/mv", a, b)
    assert rc == 0
    r = finished(s, tid)
    assert (r.type, r.status) == (TaskType.REPLICA_MOVE, TaskStatus.SUCCESS), r.message
    assert endpoints(s, "r/mv") == [b] and version(s, "r/mv") == before
    nodes[0].kill9()  # the source: nothing of the object is left there
    assert s.get("r/mv") == big and endpoints(s, "r/mv") == [b]


def test_a_copy_never_joins_a_newer_version(cluster_store):
    """A version published while the copy runs: the copied bytes (the old
    version's) never become a replica of the new one; the task fails, or
    succeeded on the old version before the new one came."""
    s = cluster_store
    a, b = (n.addr for n in s.cluster.nodes)
    old, new = b"o" * 300000, b"n" * 300000
    assert s.put("r/w", old, ReplicateConfig(preferred_segment=a)) == 0
    tid, rc = s.create_copy_task("r/w", [b])
    assert rc == 0
    assert s.upsert("r/w", new, ReplicateConfig(preferred_segment=a)) == 0
    r = finished(s, tid)
    if r.status == TaskStatus.FAILED:
        assert "replaced" in r.message, r.message
        assert endpoints(s, "r/w") == [a]
    assert s.get("r/w") == new


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
    assert store.create_move_task("r/e", "not-a-source:1", here) == (nil, SEGMENT_NOT_FOUND)
    assert store.create_copy_task("r/e", ["nowhere:1"]) == (nil, SEGMENT_NOT_FOUND)
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


def test_clear_one_replica_of_two(cluster_store):
    # The replica on one node goes; the object stays, read from the other,
    # and no repair brings the replica back.
    s = cluster_store
    a, b = (n.addr for n in s.cluster.nodes)
    assert s.put("r/two", VALUE, ReplicateConfig(replica_num=2)) == 0
    assert sorted(endpoints(s, "r/two")) == sorted([a, b])
    assert s.batch_replica_clear(["r/two"], a) == ["r/two"]
    assert endpoints(s, "r/two") == [b]
    assert s.get("r/two") == VALUE
    assert s.batch_replica_clear(["r/two"], a) == []  # none there any more
    # (that no repair brings it back is test_tasks.c's test_drop_one_replica,
    # with the master's tick driven explicitly)
    assert endpoints(s, "r/two") == [b]
    assert s.get("r/two") == VALUE


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
        assert len(descs) == 1 and len(many["r/as"]) == 1 and rc == SEGMENT_NOT_FOUND
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


def test_a_target_node_dying_fails_the_copy(cluster_store):
    """The target's node dies before it copies: once the master drops it
    (node TTL) the task fails, and no replica of it was ever visible."""
    s = cluster_store
    a, b = s.cluster.nodes
    value = b"d" * 200000
    assert s.put("r/dead", value, ReplicateConfig(preferred_segment=a.addr)) == 0
    tid, rc = s.create_copy_task("r/dead", [b.addr])
    assert rc == 0
    b.kill9()  # at once: the node takes tasks on its next heartbeat
    r = finished(s, tid)
    if r.status == TaskStatus.FAILED:  # else it copied within those moments
        assert "went away" in r.message or "failed" in r.message, r.message
    harness.wait_for(lambda: endpoints(s, "r/dead") == [a.addr], "the dead node dropped")
    assert s.get("r/dead") == value


def test_the_masters_queue_is_bounded(cluster_store):
    """Mooncake's TASK_PENDING_LIMIT_EXCEEDED once 1,024 tasks wait on the
    master (16 more run); the tasks queued still end. One object per task,
    so that no task is done at once (the target copies 16 a heartbeat)."""
    s = cluster_store
    a, b = (n.addr for n in s.cluster.nodes)
    keys = [f"r/q{i}" for i in range(1500)]
    assert s.put_batch(keys, [b"q" * 100] * len(keys),
                       ReplicateConfig(preferred_segment=a)) == 0
    made = []
    for k in keys:
        tid, rc = s.create_copy_task(k, [b])
        if rc != 0:
            break
        made.append(tid)
    assert rc == TASK_PENDING_LIMIT_EXCEEDED and len(made) >= 1024, (rc, len(made))
    assert finished(s, made[0]).status == TaskStatus.SUCCESS
