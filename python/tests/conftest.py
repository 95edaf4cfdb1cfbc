"""Fixtures of the Python suites: a store of each backend.

- direct: an embedded libmooncake store inside this process (the C extension);
- mount: the pure-Python backend over a real mooncake-fs daemon started for
  the test, unmounted at teardown, which must then exit 0 with a clean log.

Run with `make python-test`, or PYTHONPATH=python /usr/bin/python3 -m pytest
python/tests after `make all python-ext`.
"""

import os
import re
import shlex
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("MC_BUILD", "build"))
DAEMON = os.path.join(BUILD, "mooncake-fs")
PYDIR = os.path.join(ROOT, "python")
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)

from mooncake.async_store import MooncakeDistributedStoreAsync  # noqa: E402

# Segment of every test store; values larger than this cannot be stored.
SEGMENT = 64 << 20
BAD_LOG = re.compile(r"error|AddressSanitizer|LeakSanitizer|runtime error|Segmentation", re.I)


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path and " - fuse" in line for line in f)


class Daemon:
    """A mooncake-fs daemon in the foreground, mounted at self.path."""

    def __init__(self, tmp_path, *args):
        self.path = str(tmp_path / "mnt")
        os.makedirs(self.path, exist_ok=True)
        self.log_path = str(tmp_path / "daemon.log")
        self.cmd = [DAEMON, "-f", "--segment-size", str(SEGMENT), *args, self.path]
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
            time.sleep(0.01)

    def reproduce(self):
        return " ".join(shlex.quote(a) for a in self.cmd)

    def read_log(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        """Unmounts; asserts the daemon exits 0 and logged no error."""
        if self.proc.poll() is None:
            subprocess.run(["fusermount3", "-u", self.path], check=False)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            subprocess.run(["fusermount3", "-uz", self.path], check=False)
            raise AssertionError(f"daemon did not exit in 60 s\nreproduce: {self.reproduce()}")
        self.log.close()
        assert not is_mounted(self.path), "still mounted after the daemon exited"
        assert rc == 0, f"daemon exited {rc}:\n{self.read_log()[-3000:]}\n" \
                        f"reproduce: {self.reproduce()}"
        bad = [line for line in self.read_log().splitlines() if BAD_LOG.search(line)]
        assert not bad, "daemon log has errors:\n" + "\n".join(bad)


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path)
    yield d
    d.stop()


def open_store(backend, request, tmp_path_factory, **options):
    """A set-up MooncakeDistributedStoreAsync of the given backend; closed
    (and its daemon stopped and checked) at the end of the test."""
    s = MooncakeDistributedStoreAsync()
    if backend == "direct":
        rc = s.setup({"global_segment_size": SEGMENT, **options})
    else:
        d = Daemon(tmp_path_factory.mktemp("fs"))
        request.addfinalizer(d.stop)
        rc = s.setup({"mount_point": d.path, **options})
        s.daemon = d
    assert rc == 0, f"setup({backend}) returned {rc}"
    assert s.backend == backend
    request.addfinalizer(lambda: s.close())
    return s


@pytest.fixture(params=["direct", "mount"])
def store(request, tmp_path_factory):
    """A store of each backend (the test runs once per backend)."""
    return open_store(request.param, request, tmp_path_factory)


@pytest.fixture
def direct_store(request, tmp_path_factory):
    return open_store("direct", request, tmp_path_factory)


@pytest.fixture
def mount_store(request, tmp_path_factory):
    return open_store("mount", request, tmp_path_factory)


@pytest.fixture
def make_store(request, tmp_path_factory):
    """make_store(backend, **setup_options) for tests that need options."""
    return lambda backend, **options: open_store(backend, request, tmp_path_factory, **options)
