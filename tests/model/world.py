"""The processes the model checker drives, in three configurations, started
through the test harness (tests/harness.py) and always stopped again.

- embedded: one mooncake-fs with a small segment serving the protocol on a
  loopback port; a Python store (direct backend) is a client of it.
- cluster: a mooncake-master with a short node TTL, two nodes (mooncake-cli
  node), a mooncake-fs that is a pure client (--segment-size 0) writing two
  replicas, and a Python store (direct backend, pure client).
- ha: the cluster with two masters on one etcd member (Debian's
  etcd-server), a leader and a standby on a short lease; nodes, the mount
  and the Python store find the leader through an etcd:// address.

Faults (cluster and ha): kill -9 / SIGSTOP / SIGCONT a node, start a new
node; cluster: kill -9 and restart the master on its port; ha: kill -9 or
SIGSTOP the leader past its lease (the standby takes over), stop or pause
etcd.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "python"))

import harness  # noqa: E402  (tests/harness.py)
from harness import is_mounted  # noqa: E402
from mooncake.store import MooncakeDistributedStore, ReplicateConfig  # noqa: E402

MiB = 1 << 20
TIMEOUT_MS = 2000  # bound on every network wait of the mount and the Python store
NODE_TTL_MS = 4000  # the master's --node-ttl-ms in the cluster
LEASE_MS = 1000  # read leases (Python remove returns OBJECT_HAS_LEASE meanwhile)
EMBEDDED_SEGMENT = 64 * MiB
NODE_SEGMENT = 32 * MiB
HEARTBEAT_MS = 1000  # a node's heartbeat period (core/src/client/remote.c)
PUT_TTL_MS_DEFAULT = 60000  # core/src/master/service.c: an untouched write is revoked


def _help(binary):
    try:
        r = subprocess.run([binary, "--help"], capture_output=True, timeout=10)
        return (r.stdout + r.stderr).decode(errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return ""


def put_ttl_option(binary):
    """(args, put ttl in ms): --put-ttl-ms when the binary has it."""
    want = int(os.environ.get("MC_MODEL_PUT_TTL_MS", "3000"))
    if "--put-ttl-ms" in _help(binary):
        return ["--put-ttl-ms", str(want)], want
    return [], PUT_TTL_MS_DEFAULT


def cache_mode_option():
    """mooncake-fs options for the cache mode the model checks: --cache-mode
    direct (each open reads the version it opened, what model.py knows), on
    binaries that have the option. The default mode (the page cache: one
    content per file in a mount, writes in progress shown to readers on the
    same mount) is checked by tests/integration/test_page_cache.py and
    test_concurrency.py, not by the model."""
    return ["--cache-mode", "direct"] if "--cache-mode" in _help(harness.DAEMON) else []


# A process that died like this crashed (as opposed to exiting with an error).
CRASH = re.compile(r"AddressSanitizer|LeakSanitizer|runtime error|Segmentation|Assertion|"
                   r"abort|double free|corrupted", re.I)


class ProcessDied(AssertionError):
    pass


class World:
    """Common to both configurations: the mount, the Python store, the
    temporary directory (kept when the run fails)."""

    config = "?"
    clustered = False  # a master and nodes of their own (cluster, ha)

    def __init__(self):
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"mc-model-{self.config}-"))
        self.group = harness.Cluster(self.tmp)  # every process, for close()
        self.mount = None
        self.store = None
        self.master = None
        self.nodes = []  # live node processes (harness.Node), in start order
        self.dead = []  # nodes killed or stopped by the checker
        self.replicas = 1

    # ---- the two ways in ----

    def p(self, key):
        return os.path.join(self.mount.path, key)

    def open_store(self, addr):
        s = MooncakeDistributedStore()
        rc = s.setup({"master_server_addr": addr, "timeout_ms": TIMEOUT_MS})
        if rc != 0:
            raise AssertionError(f"Python setup({addr}) returned {rc}")
        self.store = s

    def master_counters(self):
        """The master's counters by name (mc_master_stats(), asked through
        the Python store's direct backend), or {} on an error."""
        c = self.store._b._s.master_stats()
        return c if isinstance(c, dict) else {}

    def rconfig(self):
        c = ReplicateConfig()
        c.replica_num = self.replicas
        return c

    # ---- health ----

    def procs(self):
        """(name, harness process) of every process that must be running."""
        out = [("mooncake-fs", self.mount)] if self.mount else []
        if self.master:
            out.append(("mooncake-master", self.master))
        out += [(f"node {n.addr}", n) for n in self.nodes]
        return out

    def check_alive(self):
        for name, p in self.procs():
            rc = p.proc.poll()
            if rc is not None:
                raise ProcessDied(f"{name} died (exit status {rc}); log tail:\n"
                                  f"{p.read_log()[-1500:]}")

    def logs(self):
        out = []
        for f in sorted(self.tmp.rglob("*.log")):
            out.append(f"---- {f}\n{f.read_text(errors='replace')[-2000:]}")
        return "\n".join(out)

    # ---- teardown ----

    def close(self, ok):
        """Stops everything (always). Returns problems: a process that did
        not exit 0 or whose log shows a crash. Removes the temporary
        directory when ok and no problem was found."""
        problems = []
        if self.store is not None:
            try:
                self.store.close()
            except Exception as e:  # noqa: BLE001 - teardown reports, never raises
                problems.append(f"Python store close: {e!r}")
            self.store = None
        problems += self.group.close(bad=CRASH)
        if ok and not problems:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return problems

    def describe(self):
        return f"{self.config}: mount {self.mount.reproduce() if self.mount else '-'}"


class Embedded(World):
    config = "embedded"

    def __init__(self):
        super().__init__()
        self.put_ttl_args, self.put_ttl_ms = put_ttl_option(harness.DAEMON)
        self.segment = EMBEDDED_SEGMENT
        try:
            self.addr = f"127.0.0.1:{harness.free_port()}"
            self.mount = self.group.mount("--segment-size", str(self.segment), "--listen",
                                          self.addr, "--timeout-ms", str(TIMEOUT_MS),
                                          "--cache-timeout", "0", "--lease-ms", str(LEASE_MS),
                                          *cache_mode_option(), *self.put_ttl_args)
            self.open_store(self.addr)
        except BaseException:
            self.close(False)
            raise


class Cluster(World):
    config = "cluster"
    clustered = True

    def __init__(self):
        super().__init__()
        self.put_ttl_args, self.put_ttl_ms = put_ttl_option(harness.MASTER)
        self.segment = NODE_SEGMENT
        self.replicas = 2
        self.restarts = 0
        try:
            self.master = self.start_master()
            for _ in range(2):
                self.add_node()
            self.mount = self.group.mount("--master", self.url(), "--replicas", "2",
                                          "--segment-size", "0", "--timeout-ms", str(TIMEOUT_MS),
                                          "--cache-timeout", "0", *cache_mode_option())
            self.open_store(self.url())
        except BaseException:
            self.close(False)
            raise

    def url(self):
        """The master address the nodes, the mount and the Python store use."""
        return self.master.addr

    def master_args(self):
        return ["--node-ttl-ms", str(NODE_TTL_MS), "--lease-ms", str(LEASE_MS),
                *self.put_ttl_args]

    def start_master(self, port=None):
        return self.group.master(*self.master_args(), port=port)

    def add_node(self):
        n = self.group.node(self.url(), str(self.segment), "--log-level", "info",
                            "--timeout-ms", str(TIMEOUT_MS))
        self.nodes.append(n)
        return n

    def kill_node(self, i):
        n = self.nodes.pop(i)
        n.kill9()
        self.dead.append(n)
        return n

    def stop_node(self, i):
        n = self.nodes[i]
        n.pause()
        return n

    def cont_node(self, n):
        n.resume()

    def remounts(self, n):
        return n.read_log().count("mounting the segment again")

    def restart_master(self, stopped=None):
        """kill -9 the master, start a new one on its port, wait (bounded)
        until every node (but stopped, a node SIGSTOPped) has mounted its
        segment again and the mount and the Python store answer."""
        waited = [n for n in self.nodes if n is not stopped]
        before = {id(n): self.remounts(n) for n in waited}
        old = self.master
        # The restart comes when the live nodes have fetched the notices of
        # what they hold (a second or two; a dead or stopped node's never
        # drain), so that what the new master rebuilds is what was published.
        self.notices_fetched()
        old.kill9()
        old.log.close()
        self.restarts += 1
        kept = self.tmp / f"master-{old.port}.before-restart-{self.restarts}.log"
        os.rename(old.log_path, kept)
        old.log_path = str(kept)
        deadline = time.time() + 20
        while True:
            try:
                self.master = self.start_master(port=old.port)
                break
            except AssertionError:  # the port may linger a moment
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        while time.time() < deadline:
            if all(self.remounts(n) > before[id(n)] for n in waited) and \
                    self.store.health_check() == 0:
                try:
                    os.statvfs(self.mount.path)
                    return
                except OSError:
                    pass
            time.sleep(0.05)
        raise AssertionError("after a master restart the nodes did not mount again within 20 s")

    def notices_fetched(self):
        """Waits (up to 3 s) until the nodes have fetched the notices of
        what they hold (a removal in the last moments before a restart may
        come back: SEMANTICS). A stopped or dead node's never drain."""
        def drained():
            try:
                return harness.cli_stats(self.master.addr)["counters"]["notices_waiting"] == 0
            except AssertionError:
                return True  # no master to ask
        try:
            harness.wait_for(drained, "the nodes to fetch their notices", timeout=3)
        except AssertionError:
            pass

    def segments_settled(self, nodes):
        """Waits (bounded) until the master has nodes' segments mounted and
        holds none (every report merged, no late write to wait out)."""
        def settled():
            try:
                st = harness.cli_stats(self.master.addr)
            except AssertionError:
                return False
            return st["segments"] == nodes and st["counters"]["segments_held"] == 0
        harness.wait_for(settled, f"{nodes} segments mounted at the master, none on hold")

    def stat_replicas(self, key):
        """Replica count of key's current version (mooncake-cli stat), or None."""
        r = harness.cli(self.master.addr, "--timeout-ms", str(TIMEOUT_MS), "stat", key, timeout=20)
        m = re.search(rb"replicas (\d+)", r.stdout)
        return int(m.group(1)) if r.returncode == 0 and m else None


def leads(master):
    """How many times master took the lead (its log says so each time)."""
    return master.read_log().count("leading cluster")


class HA(Cluster):
    """The cluster with a leader and a standby on etcd (SEMANTICS: "the
    leader of masters on etcd dies"): every change answered with success
    survives a failover, whatever the nodes reported."""

    config = "ha"
    etcd = None
    standby = None
    failovers = 0
    probes = 0

    def url(self):
        return self.etcd.url

    def master_args(self):
        # A short lease; the op log compacted into a snapshot every 8 keys,
        # so that a takeover reads a snapshot and a log after it.
        return ["--etcd", self.etcd.endpoint, "--etcd-ttl", str(ETCD_TTL_S), "--etcd-compact",
                "8", *super().master_args()]

    def start_master(self, port=None):
        """The leader (the first master started, once it leads) and a
        standby beside it."""
        self.etcd = self.group.etcd()
        leader = self.new_master()
        harness.wait_for(lambda: leads(leader) == 1, "the first master to lead")
        self.standby = self.new_master()
        return leader

    def new_master(self):
        # On a port of its own: a leader that steps down starts again
        # (execv) with the same arguments, so it listens there again.
        return self.group.master(*self.master_args(), port=harness.free_port())

    def procs(self):
        out = super().procs()
        if self.standby:
            out.append(("the standby mooncake-master", self.standby))
        if self.etcd:
            out.append(("etcd", self.etcd))
        return out

    def failover(self, stop, during=lambda: None, then=lambda: None):
        """kill -9 the leader (stop: SIGSTOP it past its lease, then SIGCONT:
        it steps down and stands by again), call during() (the cluster has
        no leader then, or only just a new one), wait (bounded) until the
        standby leads, call then(), wait until every live node mounted its
        segment there and the mount and the Python store answer; a killed
        leader's place is taken by a new standby. Returns the seconds from
        the fault to the new leader."""
        old, new = self.master, self.standby
        before = leads(new)
        t0 = time.time()
        self.failovers += 1
        if stop:
            old.pause()
        else:
            old.kill9()
        try:
            during()
            harness.wait_for(lambda: leads(new) > before, "the standby to take over",
                             timeout=ETCD_TTL_S * 5 + 10)
        finally:
            if stop:
                steps = old.read_log().count("stepping down")
                old.resume()
        took = time.time() - t0
        self.master = new
        then()
        if stop:
            self.stands_by(old, steps)
        else:
            self.standby = self.new_master()
        self.wait_serving()
        return took

    def stands_by(self, old, steps):
        """Waits (bounded) until old, a leader whose lease lapsed, has
        stepped down (its log said so `steps` times before) and listens
        again as a standby; it is the standby then."""
        harness.wait_for(lambda: old.read_log().count("stepping down") > steps and
                         old.read_log().rsplit("stepping down", 1)[1].count("listening on"),
                         "the old leader to step down and stand by")
        self.standby = old

    def etcd_outage(self, pause, during=lambda: None):
        """Stops etcd (SIGTERM; pause: SIGSTOP), calls during(), starts it
        again (SIGCONT) and waits (bounded) until a master takes changes
        and the nodes, the mount and the Python store answer. A stopped
        etcd keeps its leases (SEMANTICS: the leader goes on); a paused one
        may find them lapsed when it resumes, and the standby take over.
        Returns True when the leader changed."""
        old, new = self.master, self.standby
        before, steps = leads(new), old.read_log().count("stepping down")
        if pause:
            self.etcd.pause()
        else:
            self.etcd.stop()
        try:
            during()
        finally:
            if pause:
                self.etcd.resume()
            else:
                self.etcd.start()
        self.probes += 1
        key = f"etcd-probe-{self.probes}"  # not a model key

        def takes_changes():
            r = harness.cli(self.url(), "--timeout-ms", str(TIMEOUT_MS), "put", key, input=b"x",
                            timeout=20)
            return r.returncode == 0
        harness.wait_for(takes_changes, "changes to be taken again after etcd came back",
                         timeout=ETCD_TTL_S * 5 + 20)
        changed = leads(new) > before
        if changed:
            self.master = new
            self.stands_by(old, steps)
        self.wait_serving()
        return changed

    def wait_serving(self):
        """Waits (bounded) until every live node mounted its segment at the
        leader and the mount and the Python store answer."""
        new = self.master

        def answers():
            try:
                if harness.cli_stats(new.addr)["segments"] != len(self.nodes):
                    return False
            except AssertionError:
                return False
            if self.store.health_check() != 0:
                return False
            try:
                os.statvfs(self.mount.path)
            except OSError:
                return False
            return True
        harness.wait_for(answers, "the nodes, the mount and the Python store at the leader",
                         timeout=30)


ETCD_TTL_S = 2  # the leader's lease in etcd (--etcd-ttl)


def make(config):
    return {"embedded": Embedded, "cluster": Cluster, "ha": HA}[config]()


__all__ = ["make", "Embedded", "Cluster", "HA", "ProcessDied", "MiB", "NODE_TTL_MS",
           "HEARTBEAT_MS", "TIMEOUT_MS", "LEASE_MS", "ETCD_TTL_S", "is_mounted"]
