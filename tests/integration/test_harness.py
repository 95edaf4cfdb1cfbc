"""The harness's own promise: a test run that is killed (a CI job's
timeout sends SIGTERM, then SIGKILL) leaves no daemon, master or node
running and no file system mounted behind it, where the next run would
trip over a dead mount ("Transport endpoint is not connected") and a
machine full of stores."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import harness  # noqa: E402

# A runner that starts what a test starts (through the harness, as every
# test does), says their pids, and waits to be killed.
RUNNER = textwrap.dedent("""
    import signal, sys
    sys.path.insert(0, sys.argv[1])
    import harness
    m = harness.Master(sys.argv[2])
    n = harness.Node(sys.argv[2], m.addr, "16M")
    f = harness.Mount(sys.argv[2] + "/fs", "--master", m.addr, "--segment-size", "0")
    print(m.pid, n.pid, f.pid, f.path, flush=True)
    signal.pause()  # until killed
""")


def alive(pid):
    """Whether pid runs (a zombie has exited: its new parent reaps it when
    it gets to it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_runner_leaves_nothing_behind(tmp_path, sig):
    tests_dir = os.path.dirname(harness.__file__)
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, tests_dir, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    pids = []
    path = None
    try:
        line = runner.stdout.readline().split()
        assert len(line) == 4, "the runner did not start its processes"
        pids, path = [int(p) for p in line[:3]], line[3]
        assert harness.is_mounted(path)
        runner.send_signal(sig)
        runner.wait(timeout=30)
        try:
            harness.wait_for(lambda: not any(alive(p) for p in pids)
                             and not harness.is_mounted(path), "the runner's processes to go",
                             timeout=60, step=0.05)
        except AssertionError:
            pass  # said precisely below
        left = [p for p in pids if alive(p)]
        assert not left, f"still running after the runner died of {sig.name}: {left}"
        assert not harness.is_mounted(path), f"{path} still mounted"
        # The mount went because its daemon unmounted it on the way out
        # (SIGTERM), not because it died: its log says so and no error.
        log = open(os.path.join(tmp_path, "fs", "daemon.log")).read()
        assert "Terminated, unmounting" in log, log[-2000:]
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        for p in pids:
            if alive(p):
                os.kill(p, signal.SIGKILL)
        if path and harness.is_mounted(path):
            subprocess.run(["fusermount3", "-uz", path], check=False)
