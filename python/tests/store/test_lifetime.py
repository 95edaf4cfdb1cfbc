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
