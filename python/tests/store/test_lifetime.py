"""A store's lifetime: a process that set up as a node and exits without
close() (or drops its store) still unmounts its segment, so the master stops
counting it at once instead of after the node TTL. Seen through the
master's own view (mooncake-cli stats), with a node TTL far longer than the
test so that only the unmount can explain a segment gone."""

import subprocess
import sys

import harness
from conftest import python_env

# The child: a node of the master at argv[1] with a 16 MiB segment that
# stores a key, then ends as argv[2] says, never calling close().
CHILD = r"""
import gc, os, sys
from mooncake.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
assert s.setup({"master_server_addr": sys.argv[1], "global_segment_size": 16 << 20,
                "timeout_ms": 5000}) == 0
assert s.put("from-child", b"x" * 1000) == 0
print("ready", flush=True)
if sys.argv[2] == "drop":
    del s
    gc.collect()
    print("dropped", flush=True)
    sys.stdin.read()  # stays alive until the test has looked
elif sys.argv[2] == "thread":
    # A daemon thread still uses the store when the process exits: nothing
    # frees it at exit, only the exit handler closes it.
    import threading
    threading.Thread(target=lambda st: sys.stdin.read() and st, args=(s,), daemon=True).start()
    del s
elif sys.argv[2] == "kill":
    sys.stdin.read()
"""


def child(master, how):
    return subprocess.Popen([sys.executable, "-c", CHILD, master, how], env=python_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def segments(master):
    return harness.cli_stats(master)["segments"]


def test_exit_without_close_unmounts_the_segment(make_cluster):
    c = make_cluster("--node-ttl-ms", "600000", nodes=1)
    assert segments(c.addr) == 1
    p = child(c.addr, "exit")
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and "ready" in out
    # The process is gone and so is its segment, 10 minutes before its TTL.
    assert segments(c.addr) == 1


def test_exit_while_a_thread_holds_the_store_unmounts_the_segment(make_cluster):
    c = make_cluster("--node-ttl-ms", "600000", nodes=1)
    p = child(c.addr, "thread")
    assert p.stdout.readline().strip() == "ready"
    assert p.wait(timeout=60) == 0  # exits with the thread still blocked on stdin
    assert segments(c.addr) == 1
    p.stdin.close()


def test_dropped_store_unmounts_the_segment(make_cluster):
    c = make_cluster("--node-ttl-ms", "600000", nodes=1)
    p = child(c.addr, "drop")
    try:
        assert p.stdout.readline().strip() == "ready"
        assert p.stdout.readline().strip() == "dropped"
        assert segments(c.addr) == 1  # the process still runs; its store is gone
    finally:
        p.communicate("", timeout=60)
    assert p.returncode == 0


def test_killed_process_keeps_its_segment_until_the_ttl(make_cluster):
    """The contrast: SIGKILL runs no exit handler, so the segment stays on
    the master (until the node TTL) - the tests above do measure the
    handler."""
    c = make_cluster("--node-ttl-ms", "600000", nodes=1)
    p = child(c.addr, "kill")
    assert p.stdout.readline().strip() == "ready"
    assert segments(c.addr) == 2
    p.kill()
    p.wait(timeout=60)
    assert segments(c.addr) == 2


# The child for fork(): a store set up as argv[1] says ("cluster ADDR": a
# pure client of the master at ADDR; "mount DIR": the mount at DIR) with an
# operation in flight, then fork(): the forked child must get answers and
# close its copy at once (an alarm kills it if it hangs), while the parent's
# store goes on. Prints what each side saw.
FORKER = r"""
import asyncio, os, signal, sys, threading, time
from mooncake.async_store import MooncakeDistributedStoreAsync
s = MooncakeDistributedStoreAsync()
key = {"cluster": "master_server_addr", "mount": "mount_point"}[sys.argv[1]]
assert s.setup({key: sys.argv[2], "global_segment_size": 0, "timeout_ms": 5000}) == 0
assert asyncio.run(s.async_put("k", b"v")) == 0  # the mount: its threads start
assert asyncio.run(s.async_get("k")) == b"v"  # and its reader's
print("ready", flush=True)
sys.stdin.readline()  # the test paused the master (cluster)
t = threading.Thread(target=s.get, args=("k",))
t.start()
deadline = time.monotonic() + 10
while sys.argv[1] == "cluster" and s._b.inflight() == 0:
    assert time.monotonic() < deadline, "the get never went out"
    time.sleep(0.01)
pid = os.fork()
if pid == 0:
    signal.alarm(20)  # a hang fails the test instead of stalling it
    got = asyncio.run(s.async_is_exist("k")) if sys.argv[1] == "mount" else None
    if sys.argv[1] == "mount":
        assert asyncio.run(s.async_get("k")) == b"v"
    s.close()
    print(f"child closed {got}", flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print(f"child status {status}", flush=True)
sys.stdin.readline()  # the test let the master go on
t.join()
print("parent", s.get("k"), flush=True)
s.close()
"""


def forker(mode, where):
    return subprocess.Popen([sys.executable, "-c", FORKER, mode, where], env=python_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def test_a_forked_child_closes_its_inherited_client_at_once(make_cluster):
    """A process forked while its store has a call in flight (multiprocessing's
    fork start method, say) closes its copy at once: the parent's calls are
    not the child's to wait for. The parent's store goes on."""
    c = make_cluster(nodes=1)
    p = forker("cluster", c.addr)
    try:
        assert p.stdout.readline().strip() == "ready"
        c.master.pause()  # the get stays in flight
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "child closed None"
        assert p.stdout.readline().strip() == "child status 0"
    finally:
        c.master.resume()
        out, _ = p.communicate("\n", timeout=60)
    assert p.returncode == 0 and "parent b'v'" in out, out


def test_a_forked_child_uses_its_inherited_mount_store(make_daemon):
    """The mount backend runs async calls on threads of its own, which a
    forked child does not have: the child starts its own, and its call is
    answered."""
    d = make_daemon()
    p = forker("mount", d.path)
    assert p.stdout.readline().strip() == "ready"
    out, _ = p.communicate("\n\n", timeout=60)
    assert p.returncode == 0, out
    assert "child closed 1" in out and "child status 0" in out and "parent b'v'" in out, out


def test_a_second_close_waits_for_the_first(cluster_store):
    """Two threads close one store while a call is in flight: the second
    close() returns only after the first has finished (it returned at
    once, so its caller could free a buffer the call still wrote into)."""
    import threading

    s = cluster_store
    order = []
    s.cluster.master.pause()  # the call stays in flight until resumed
    try:
        call = threading.Thread(target=lambda: s.get_size("nokey"))
        call.start()
        harness.wait_for(lambda: s._b.inflight() > 0, "the call to go out")
        free_pool = s._free_pool  # the last step of the close that drains

        def freed():
            free_pool()
            order.append("first")

        s._free_pool = freed
        first = threading.Thread(target=s.close)
        first.start()
        harness.wait_for(lambda: s._b is None, "the first close to begin")
        later = threading.Thread(target=lambda: (s.close(), order.append("second")))
        later.start()
        later.join(1.0)  # a second close that returns at once does so now
    finally:
        s.cluster.master.resume()
    for t in (call, first, later):
        t.join(30)
    assert order == ["first", "second"]
