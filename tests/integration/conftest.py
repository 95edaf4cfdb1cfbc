"""Integration test harness: starts the real mooncake-fs daemon on a
temporary mount point, waits for the mount, and on teardown unmounts it,
requires the daemon to exit 0 and scans its log for errors.

A failing test prints the command that reproduces its mount."""

import os
import re
import shlex
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("MC_BUILD", "build"))
DAEMON = os.path.join(BUILD, "mooncake-fs")

# Lines in the daemon's log that mean something went wrong.
BAD_LOG = re.compile(r"error|AddressSanitizer|LeakSanitizer|runtime error|Segmentation", re.I)


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path and " - fuse" in line:
                return True
    return False


class Mount:
    """A running mooncake-fs daemon mounted at self.path."""

    def __init__(self, tmp_path, *args, expect_log=None):
        self.path = str(tmp_path / "mnt")
        os.makedirs(self.path, exist_ok=True)
        self.log_path = str(tmp_path / "daemon.log")
        self.cmd = [DAEMON, "-f", *args, self.path]
        self.expect_log = expect_log  # regex of error lines this test provokes
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while not is_mounted(self.path):
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited {self.proc.returncode}: {self.read_log()}"
                                     f"\nreproduce: {self.reproduce()}")
            if time.time() > deadline:
                self.proc.kill()
                raise AssertionError(f"not mounted after 20 s\nreproduce: {self.reproduce()}")
            time.sleep(0.02)

    def reproduce(self):
        return " ".join(shlex.quote(a) for a in self.cmd)

    def read_log(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def p(self, *parts):
        return os.path.join(self.path, *parts)

    def rss(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def stop(self, how="fusermount"):
        """Unmounts; returns the daemon's exit status."""
        if self.proc.poll() is None:
            if how == "fusermount":
                subprocess.run(["fusermount3", "-u", self.path], check=False)
            else:
                self.proc.send_signal(how)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            subprocess.run(["fusermount3", "-uz", self.path], check=False)
            raise AssertionError(f"daemon did not exit within 60 s\nreproduce: {self.reproduce()}")
        if is_mounted(self.path):
            subprocess.run(["fusermount3", "-uz", self.path], check=False)
            raise AssertionError("still mounted after the daemon exited")
        self.log.close()
        return rc

    def check_log(self):
        bad = [l for l in self.read_log().splitlines() if BAD_LOG.search(l)]
        if self.expect_log:
            bad = [l for l in bad if not re.search(self.expect_log, l)]
        assert not bad, "daemon log has errors:\n" + "\n".join(bad) + \
            f"\nreproduce: {self.reproduce()}"


@pytest.fixture
def make_mount(tmp_path_factory):
    """make_mount(*args) starts a daemon; all are stopped and checked at the end."""
    mounts = []

    def make(*args, expect_log=None):
        m = Mount(tmp_path_factory.mktemp("fs"), *args, expect_log=expect_log)
        mounts.append(m)
        return m

    yield make
    errors = []
    for m in mounts:
        try:
            if m.proc.poll() is None:
                rc = m.stop()
                if rc != 0:
                    errors.append(f"daemon exited {rc}; log:\n{m.read_log()[-3000:]}"
                                  f"\nreproduce: {m.reproduce()}")
            m.check_log()
        except AssertionError as e:
            errors.append(str(e))
    assert not errors, "\n".join(errors)


@pytest.fixture
def mnt(make_mount):
    """A mount with a 512 MiB embedded segment."""
    return make_mount("--segment-size", "512M")


@pytest.fixture
def cluster(tmp_path):
    """A cluster.Cluster whose processes are stopped and checked at the end
    (test files that define their own cluster fixture use theirs)."""
    from cluster import Cluster  # cluster.py imports this module

    c = Cluster(tmp_path)
    yield c
    errors = c.close()
    assert not errors, "\n".join(errors)
