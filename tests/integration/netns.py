"""Private networks of network namespaces for the multi-host tests.

Net() makes one namespace holding a bridge and, per host(), one namespace
joined to the bridge by a veth pair, with an address in 10.200.0.0/24 and no
route anywhere else: traffic flows only between this run's namespaces and
never touches the host's own network namespace (every command runs with
`ip -n`, so even the veth ends are created inside the namespaces).

Names carry this process's id, so parallel runs do not collide, and
namespaces left behind by a run that died are removed by the next one.

Note: `ip netns exec` also unshares the mount namespace (so that /sys
describes the network namespace), which hides a FUSE mount made inside it
from everyone else. A mount daemon therefore runs under
`nsenter --net=/run/netns/NAME` (host.wrap(), harness.in_netns()), which
changes the network namespace only; the mount then appears in the host's
mount table."""

import json
import os
import re
import shutil
import subprocess
import sys

from harness import in_netns

PREFIX = "mcmh"  # namespaces are PREFIX-<pid>-<n>-<role>
SUBNET = "10.200.0"


class NetnsUnavailable(Exception):
    """Namespaces cannot be made here; the message says why."""


def ip(*args, check=True, timeout=10):
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def _remove_stale():
    """Deletes namespaces of earlier runs whose process is gone."""
    r = ip("netns", "list", check=False)
    for line in r.stdout.splitlines():
        m = re.match(rf"({PREFIX}-(\d+)-\S+)", line)
        if m and not os.path.exists(f"/proc/{m.group(2)}"):
            ip("netns", "del", m.group(1), check=False)


def probe():
    """Raises NetnsUnavailable with the reason when namespaces cannot be made."""
    for tool in ("ip", "nsenter"):
        if not shutil.which(tool):
            raise NetnsUnavailable(f"{tool} not found (iproute2 / util-linux)")
    name = f"{PREFIX}-{os.getpid()}-probe"
    try:
        r = ip("netns", "add", name, check=False)
    except OSError as e:
        raise NetnsUnavailable(f"ip netns add: {e}")
    if r.returncode != 0:
        raise NetnsUnavailable(f"ip netns add failed: {r.stderr.strip()}")
    try:
        r = ip("-n", name, "link", "add", "p0", "type", "veth", "peer", "name", "p1", check=False)
        if r.returncode != 0:
            raise NetnsUnavailable(f"cannot create a veth pair: {r.stderr.strip()}")
        r = ip("-n", name, "link", "add", "br0", "type", "bridge", check=False)
        if r.returncode != 0:
            raise NetnsUnavailable(f"cannot create a bridge: {r.stderr.strip()}")
    finally:
        ip("netns", "del", name, check=False)


class Host:
    """One namespace on the private network."""

    def __init__(self, net, role, index):
        self.net = net
        self.ns = f"{net.tag}-{role}"
        self.addr = f"{SUBNET}.{index}"
        self.port = f"p{index}"  # its veth end in the bridge namespace

    def wrap(self, cmd):
        """cmd run in this host's network namespace, in the caller's mount namespace."""
        return in_netns(self.ns, cmd)

    def run(self, *cmd, timeout=10):
        return subprocess.run(self.wrap(list(cmd)), capture_output=True, text=True, timeout=timeout)

    def counters(self):
        """(rx bytes, tx bytes) of this host's interface."""
        r = ip("-n", self.ns, "-s", "-j", "link", "show", "dev", "eth0")
        stats = json.loads(r.stdout)[0]["stats64"]
        return stats["rx"]["bytes"], stats["tx"]["bytes"]

    def cut(self):
        """Pulls the cable: the bridge drops everything to and from this host."""
        ip("-n", self.net.bridge, "link", "set", self.port, "down")

    def mend(self):
        ip("-n", self.net.bridge, "link", "set", self.port, "up")

    def limit(self, mbit):
        """Slows this host's link to mbit Mbit/s each way: a token bucket
        (tc's tbf) on both ends of its veth pair. Raises NetnsUnavailable
        when this kernel or iproute2 cannot (no tc, no sch_tbf)."""
        if not shutil.which("tc"):
            raise NetnsUnavailable("tc not found (iproute2)")
        for ns, dev in ((self.ns, "eth0"), (self.net.bridge, self.port)):
            r = subprocess.run(in_netns(ns, ["tc", "qdisc", "add", "dev", dev, "root", "tbf",
                                             "rate", f"{mbit}mbit", "burst", "256kb",
                                             "latency", "50ms"]),
                               capture_output=True, text=True, timeout=10)
            if r.returncode != 0:
                raise NetnsUnavailable(f"tc qdisc tbf on {dev}: {r.stderr.strip()}")


class Net:
    """A bridge namespace and hosts joined to it; close() removes them all."""

    _count = 0

    def __init__(self):
        _remove_stale()
        Net._count += 1
        self.tag = f"{PREFIX}-{os.getpid()}-{Net._count}"
        self.bridge = f"{self.tag}-br"
        self.hosts = []
        self.namespaces = []
        try:
            self._add_ns(self.bridge)
            ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
            ip("-n", self.bridge, "link", "set", "br0", "up")
        except Exception:
            self.close()
            raise

    def _add_ns(self, name):
        ip("netns", "add", name)
        self.namespaces.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    def host(self, role):
        """A new namespace named after role, at the next address."""
        h = Host(self, role, len(self.hosts) + 1)
        self._add_ns(h.ns)
        ip("-n", self.bridge, "link", "add", h.port, "type", "veth",
           "peer", "name", "eth0", "netns", h.ns)
        ip("-n", self.bridge, "link", "set", h.port, "master", "br0", "up")
        ip("-n", h.ns, "addr", "add", f"{h.addr}/24", "dev", "eth0")
        ip("-n", h.ns, "link", "set", "eth0", "up")
        self.hosts.append(h)
        return h

    def check(self):
        """Every host is reachable from the first: a connect to a closed port
        on it is refused (a reset came back) rather than timing out."""
        probe = ("import socket, sys\n"
                 "for a in sys.argv[1:]:\n"
                 "    try:\n"
                 "        socket.create_connection((a, 9), timeout=3)\n"
                 "    except ConnectionRefusedError:\n"
                 "        continue\n"
                 "    except OSError as e:\n"
                 "        sys.exit(f'{a}: {e}')\n")
        first = self.hosts[0]
        r = first.run(sys.executable, "-c", probe, *(h.addr for h in self.hosts[1:]))
        if r.returncode != 0:
            raise RuntimeError(f"{first.ns} cannot reach its peers: {r.stdout}{r.stderr}")

    def pids(self):
        """Processes still running in this net's namespaces."""
        out = []
        for ns in self.namespaces:
            r = ip("netns", "pids", ns, check=False)
            out += [int(p) for p in r.stdout.split()]
        return out

    def close(self):
        for ns in reversed(self.namespaces):
            ip("netns", "del", ns, check=False)
        self.namespaces = []
