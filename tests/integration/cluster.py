"""Processes of a cluster for the integration tests: mooncake-master, nodes
(mooncake-cli node) and client calls through mooncake-cli (the public C
API). Every process is started for real and stopped by the fixture."""

import os
import re
import signal
import socket
import subprocess
import time

from conftest import BUILD

MASTER = os.path.join(BUILD, "mooncake-master")
CLI = os.path.join(BUILD, "mooncake-cli")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    def __init__(self, cmd, log_path, ready, netns=None, timeout=20):
        self.cmd = cmd
        if netns:
            cmd = ["ip", "netns", "exec", netns, *cmd]
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while not re.search(ready, self.read_log()):
            if self.proc.poll() is not None:
                raise AssertionError(f"{cmd[0]} exited {self.proc.returncode}:\n{self.read_log()}")
            if time.time() > deadline:
                self.proc.kill()
                raise AssertionError(f"{cmd} not ready after {timeout} s:\n{self.read_log()}")
            time.sleep(0.02)

    def read_log(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        """SIGTERM; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"{self.cmd[0]} did not exit on SIGTERM")
        self.log.close()
        return self.proc.returncode


class Master(Proc):
    def __init__(self, tmp, *args, port=None, netns=None, host="127.0.0.1"):
        self.port = port or free_port()
        self.addr = f"{host}:{self.port}"
        super().__init__([MASTER, "--listen", self.addr, *args], str(tmp / f"master-{self.port}.log"),
                         r"listening on .*segment", netns=netns)


class Node(Proc):
    """A process contributing a segment: mooncake-cli node."""

    def __init__(self, tmp, master, size="64M", *args, netns=None, host="127.0.0.1"):
        self.port = free_port()
        self.addr = f"{host}:{self.port}"
        super().__init__([CLI, "--master", master, "--segment-size", size, "--listen", self.addr,
                          *args, "node"],
                         str(tmp / f"node-{self.port}.log"), r"node up", netns=netns)


def cli(master, *args, input=None, netns=None, timeout=60):
    """Runs mooncake-cli against master; returns CompletedProcess."""
    cmd = [CLI, "--master", master, *args]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    return subprocess.run(cmd, input=input, capture_output=True, timeout=timeout)


class Cluster:
    """Owns the processes of one test and stops them at the end."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []

    def master(self, *args, **kw):
        m = Master(self.tmp, *args, **kw)
        self.procs.append(m)
        return m

    def node(self, master, size="64M", *args, **kw):
        n = Node(self.tmp, master.addr if hasattr(master, "addr") else master, size, *args, **kw)
        self.procs.append(n)
        return n

    def close(self):
        errors = []
        for p in reversed(self.procs):
            if p.proc.poll() is None:
                rc = p.stop()
                if rc != 0:
                    errors.append(f"{p.cmd[0]} exited {rc}:\n{p.read_log()[-2000:]}")
            bad = [l for l in p.read_log().splitlines()
                   if re.search(r"\berror\b|AddressSanitizer|runtime error", l)]
            if bad:
                errors.append(f"{p.cmd[0]} logged errors:\n" + "\n".join(bad))
        return errors
