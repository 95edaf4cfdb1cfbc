"""Copy and move tasks on masters with an op log on etcd (issue 12): the
replica a task adds and the one a move drops are changes the log keeps, so
a standby that takes over after kill -9 of the leader places the object
where the tasks left it; and the moved object outlives its source node.
Real processes: one etcd member (Debian's etcd; skipped without it), two
masters, two nodes, the Python client (the C extension)."""

import os
import sys
import uuid

import pytest

from harness import wait_for

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

MASTER_ARGS = ("--etcd-ttl", "2", "--put-ttl-ms", "3000")
EXPECT = r"lost the connection|cannot connect|cannot find the master|session with|" \
    r"stepping down|starting again|cannot append|op log|write.*failed|ESTALE|Stale"


def endpoints(s, key):
    return sorted(d.get_memory_descriptor().buffer_descriptor.transport_endpoint_
                  for d in s.get_replica_desc(key))


def run_task(s, tid_rc):
    from mooncake.store import TaskStatus

    tid, rc = tid_rc
    assert rc == 0 and tid != uuid.UUID(int=0)
    out = []

    def done():
        r, code = s.query_task(tid)
        assert code == 0
        out[:] = [r]
        return r.status in (TaskStatus.SUCCESS, TaskStatus.FAILED)

    wait_for(done, "the task to finish")
    assert out[0].status == TaskStatus.SUCCESS, out[0].message


def test_tasks_survive_a_failover_and_the_source_node(cluster):
    if os.environ.get("MC_SANITIZED"):
        pytest.skip("the Python C extension does not load under the sanitizers")
    from mooncake.store import MooncakeDistributedStore, ReplicateConfig

    etcd = cluster.etcd()
    ms = [cluster.master("--etcd", etcd.endpoint, *MASTER_ARGS, expect_log=EXPECT)
          for _ in range(2)]
    wait_for(lambda: any("leading cluster" in m.read_log() for m in ms), "a leader")
    leader, standby = sorted(ms, key=lambda m: "leading cluster" not in m.read_log())
    a, b = (cluster.node(etcd.url, "32M", expect_log=EXPECT) for _ in range(2))
    s = MooncakeDistributedStore()
    assert s.setup({"master_server_addr": etcd.url, "timeout_ms": 15000}) == 0
    try:
        moved, copied = os.urandom(300000), os.urandom(5 << 20)
        assert s.put("t/moved", moved, ReplicateConfig(preferred_segment=a.addr)) == 0
        assert s.put("t/copied", copied, ReplicateConfig(preferred_segment=a.addr)) == 0
        run_task(s, s.create_move_task("t/moved", a.addr, b.addr))
        run_task(s, s.create_copy_task("t/copied", [b.addr]))
        assert endpoints(s, "t/moved") == [b.addr]
        assert endpoints(s, "t/copied") == sorted([a.addr, b.addr])

        leader.kill9()
        wait_for(lambda: "leading cluster" in standby.read_log(), "the standby to lead",
                 timeout=30)
        # Both nodes mount again at the new leader; the log's records (and
        # the nodes' own) place the objects where the tasks left them: the
        # moved replica is not brought back on its source.
        wait_for(lambda: endpoints(s, "t/copied") == sorted([a.addr, b.addr]),
                 "both replicas of the copied object back", timeout=30)
        assert endpoints(s, "t/moved") == [b.addr]

        a.kill9()  # the source of the move, and one copy of the other
        assert s.get("t/moved") == moved
        assert s.get("t/copied") == copied
    finally:
        s.close()
