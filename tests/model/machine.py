"""The driver: a hypothesis RuleBasedStateMachine that runs random
operations and faults against a real store (world.py) and checks every read
against the reference model (model.py).

Operations go through the mount (open/write/close with and without O_TRUNC,
O_APPEND, a sparse write past a hole, a write left open across other steps, a reader held open across
overwrites, rename, unlink, a temporary file unlinked while open) and through the Python store (put, upsert, get,
is_exist, remove) on one namespace. Faults, each a class that can be switched
off (MC_MODEL_FAULTS): enospc (fill the store), idle (a writer idle past the
put TTL while its mount runs: it must not be revoked), nodekill, nodestop (SIGSTOP within and past the node TTL),
masterrestart (kill -9 and restart the master), latereport (a node stopped
across a master restart), mountstop (SIGSTOP the mount in the middle of a
write, past the put TTL: it may be inside a copy into a node's segment it
maps), failover (kill -9 or SIGSTOP the leader of two masters on etcd, while
the mount and the Python store go on), etcdstop (etcd stopped or paused
for a moment: changes are refused with EROFS, and a refused change is not
made). Node, master and mount faults need the cluster configuration;
failover and etcdstop need ha (the cluster with a standby on etcd), which
runs them with the node faults only.

What the model allows is what docs/SEMANTICS.md promises:
- a read returns a whole published version, the last one (close-to-open);
  while a write is in progress the previous one; a reader held open reads the
  version it opened, even after an overwrite, rename or unlink;
- a failed write (any errno) leaves the previous version;
- a node silent past the TTL takes the files with no other copy with it
  (ENOENT); the others keep serving;
- a restarted master rebuilds what it had from the nodes' records: each key
  keeps its version or, where its nodes died meanwhile, may be lost;
- a standby that takes over from a leader lost loses nothing: every change
  answered with success is there; a change that failed while there was no
  leader may have been made (its answer lost with the leader);
- errors other than ENOENT (EIO, ETIMEDOUT, ENOTCONN, ...) only while a fault
  is in effect (a node dead or stopped and not yet dropped, a master just
  restarted); ENOSPC only once the store was filled.
Bytes that are not a whole acceptable version are always a failure.
"""

import errno
import os
import sys
import threading
import time

from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import world as W  # first: it puts tests/ on sys.path
import harness  # noqa: E402  (tests/harness.py)
from model import ABSENT, Model, ModelError

# Known bugs the model may be told to put up with while they are being fixed
# (MC_MODEL_ALLOW=a,b), so that a run can get past them to the next one:
# failed-write-publishes: a write that failed (ENOSPC, ENOTCONN, ...) is
#   still published at close with the bytes written before the failure.
# enoent-after-restart: after a master restart, a file created through the
#   mount in a directory the mount knew fails to publish with ENOENT.
ALLOW = frozenset(x for x in os.environ.get("MC_MODEL_ALLOW", "").split(",") if x)

KEYS = ["d0/k0", "d0/k1", "d1/k0", "d1/k1", "k2"]
ALL_FAULTS = ("enospc", "idle", "nodekill", "nodestop", "masterrestart", "latereport",
              "mountstop", "failover", "etcdstop")
# An embedded store has no put TTL: its own writers are never revoked.
CLUSTER_FAULTS = ("idle", "nodekill", "nodestop", "masterrestart", "latereport", "mountstop",
                  "failover", "etcdstop")
# A standby taking over, etcd away (the ha configuration only).
HA_FAULTS = ("failover", "etcdstop")
# Faults that need a put TTL short enough to wait out (--put-ttl-ms).
PUT_TTL_FAULTS = ("idle", "mountstop")

# Python return codes (docs/PYTHON.md).
NO_AVAILABLE_HANDLE, OBJECT_NOT_FOUND, OBJECT_HAS_LEASE, RPC_FAIL = -200, -704, -706, -900

NET_ERRNOS = {errno.EIO, errno.ETIMEDOUT, errno.ENOTCONN, errno.ECONNREFUSED, errno.ECONNRESET,
              errno.EPIPE, errno.EHOSTUNREACH, errno.ESTALE, errno.ECONNABORTED, errno.EAGAIN}

sizes = st.one_of(st.sampled_from([1, 15, 16, 17, 4095, 4096, 65536, 65537, 131072 + 7]),
                  st.integers(1, 300_000))
keys = st.sampled_from(KEYS)


# The hole a "sparse" mount write leaves before its bytes: more than the
# store's writer punches rather than zeroes (1 MiB), not a multiple of 64.
SPARSE_HOLE = 3 * (1 << 20) + 5


def ename(e):
    return errno.errorcode.get(e, str(e))


class Held:
    """A file opened for reading and kept open."""

    def __init__(self, fd, key, cands, epoch):
        self.fd, self.key, self.cands, self.epoch = fd, key, cands, epoch

    def __repr__(self):
        return f"reader({self.key})"


class Writer:
    """A file opened for writing through the mount, not closed yet."""

    def __init__(self, fd, key, version, epoch):
        self.fd, self.key, self.v, self.epoch = fd, key, version, epoch
        self.data = version.data()
        self.off = 0  # bytes of self.data written so far
        self.discarded = False  # unlinked or renamed over through the mount
        self.failed = None  # the errno of a failed write
        self.failed_excused = False  # a fault in effect then allowed that error
        # The store was full while it was open: a write of it answered before
        # it landed (write-behind, on a cluster mount) may have failed with
        # ENOSPC then, and the next write reports it, after the store emptied.
        self.saw_full = False

    def __repr__(self):
        return f"writer({self.key}, {self.v!r})"


class StoreMachine(RuleBasedStateMachine):
    """Subclassed per run with CONFIG and FAULTS set (see make_machine)."""

    CONFIG = "embedded"
    FAULTS = frozenset()
    SLOW_BUDGET = 2  # slow fault rules per example (deterministic, not timed)

    def __init__(self):
        super().__init__()
        self.ok = False
        self.w = W.make(self.CONFIG)
        self.m = Model(KEYS)
        self.held = []
        self.writers = []
        self.fillers = []
        self.full = False
        self.epoch = 0  # faults so far (node death, restart): held handles may fail after one
        self.degraded_until = 0.0  # network errors are allowed until then
        self.slow = self.SLOW_BUDGET
        self.restarts = 0
        self.etcd_down = False  # changes may be refused with EROFS
        self.inc = {}  # id(node) -> incarnation: a node's segment, renumbered when dropped
        self.next_inc = 1
        for n in self.w.nodes:
            self.new_incarnation(n)

    # ---- helpers ----

    def new_incarnation(self, n):
        self.inc[id(n)] = self.next_inc
        self.next_inc += 1

    def alive(self):
        return frozenset(self.inc[id(n)] for n in self.w.nodes)

    def degraded(self):
        return time.time() < self.degraded_until or not self.clean()

    def clean(self):
        """No node dead or stopped that the master may still count."""
        return time.time() >= self.degraded_until

    def fault(self, seconds):
        self.epoch += 1
        self.degraded_until = max(self.degraded_until, time.time() + seconds)

    def publish(self, key, v):
        """v was published: remember where its replicas are (cluster)."""
        v.placed = self.alive() if (self.w.clustered and self.clean()) else None
        self.m.published(key, v)

    def allow_write_error(self, e, what, key=None):
        """A write failed with errno e: fine (the key keeps its previous
        version) while the store is full or a fault is in effect."""
        if key:
            self.m.note(key, f"{what}: {ename(e)}")
        if e == errno.ENOSPC and (self.full or self.degraded()):
            return
        if e == errno.ENOENT and self.restarts and "enoent-after-restart" in ALLOW:
            return
        if e == errno.ENOENT and self.mkdir_failed and self.degraded():
            return
        if e in NET_ERRNOS and self.degraded():
            return
        if e == errno.EROFS and self.etcd_down:
            return
        if e == errno.ENOSPC:
            raise ModelError(f"{what}: ENOSPC although the store was not filled "
                             f"(at most ~{self.live_bytes() >> 20} MiB of model data)")
        raise ModelError(f"{what}: unexpected {ename(e)}")

    def allow_read_error(self, key, e, what):
        if e in NET_ERRNOS and (self.degraded() or not self.m.key(key).settled):
            return
        raise ModelError(f"{what} {key!r}: {ename(e)} with no fault in effect; model has "
                         f"{self.m.show(self.m.key(key))}")

    def live_bytes(self):
        n = sum(v.size for k in self.m.keys.values() for v in k.present())
        return n + sum(v.size for h in self.held for v in h.cands)

    mkdir_failed = False  # the last ensure_dir() could not make the directory

    def ensure_dir(self, key):
        """Makes key's directory. When that fails with an error a fault
        allows (EAGAIN while the segments are on hold after a remount), the
        create that follows may fail with ENOENT: the directory is not
        there."""
        d = os.path.dirname(key)
        if d:
            try:
                os.makedirs(self.w.p(d), exist_ok=True)
                self.mkdir_failed = False
            except OSError as e:
                self.allow_write_error(e.errno, f"mkdir {d}")
                self.mkdir_failed = True

    def read_path(self, key):
        """Whole content of key through the mount; ABSENT on ENOENT."""
        try:
            fd = os.open(self.w.p(key), os.O_RDONLY)
        except FileNotFoundError:
            return ABSENT
        try:
            parts = []
            while True:
                b = os.read(fd, 1 << 20)
                if not b:
                    return b"".join(parts)
                parts.append(b)
        finally:
            os.close(fd)

    def write_all(self, fd, data, off=None):
        """Writes data (at off, or the file position); raises OSError."""
        mv = memoryview(data)
        while mv:
            n = os.pwrite(fd, mv, off) if off is not None else os.write(fd, mv)
            if n <= 0:
                raise OSError(errno.EIO, "short write")
            mv = mv[n:]
            if off is not None:
                off += n

    def failed_write(self, key, v, n):
        """A write of v failed after n bytes: with MC_MODEL_ALLOW=
        failed-write-publishes, those n bytes may have been published."""
        if "failed-write-publishes" in ALLOW and self.m.key(key).vals != {ABSENT}:
            self.m.key(key).vals.add(self.m.prefix(v, n, f"first {n} B of v{v.vid}"))

    def close_writer(self, fd, err):
        """Closes a file open for writing (close publishes); returns the
        first errno of the writes (err) or of the close, or None."""
        try:
            os.close(fd)
        except OSError as e:
            return err or e.errno
        return err

    def vulnerable(self, victim_inc):
        """Keys whose current version may have had its only copy on
        victim_inc (asks mooncake-cli stat for the replica count)."""
        out = []
        for name, k in self.m.keys.items():
            for v in k.present():
                placed = getattr(v, "placed", None)
                if placed is not None and len(k.vals) == 1:
                    if self.w.stat_replicas(name) != len(placed):
                        v.placed = placed = None
                if placed is None or not ((placed - {victim_inc}) & self.alive()):
                    out.append(name)
                    break
        return out

    def lose(self, victim_inc, settle_after):
        """victim_inc's segment is (or will be, within settle_after s) gone."""
        for name in self.vulnerable(victim_inc):
            self.m.may_be_lost(name, time.time() + settle_after)

    # ---- operations through the mount ----

    @rule(key=keys, size=st.one_of(st.just(0), sizes),
          how=st.sampled_from(["trunc", "over", "append", "sparse"]),
          chunks=st.integers(1, 3))
    def mount_write(self, key, size, how, chunks):
        """open, write in chunks, close: publishes a new version ("sparse":
        truncated, then written past a hole of SPARSE_HOLE bytes)."""
        k = self.m.key(key)
        if self.busy(key):
            return
        cur = k.single() if len(k.vals) == 1 else None
        if len(k.vals) != 1 or (how == "over" and cur is not ABSENT and cur.size > size):
            how = "trunc"
        flags = os.O_WRONLY | os.O_CREAT
        if how in ("trunc", "sparse"):
            flags |= os.O_TRUNC
        elif how == "append":
            flags |= os.O_APPEND
        v = self.m.new_version(key, size, f"mount {how}",
                               base=cur if how == "append" and cur is not ABSENT else None,
                               hole=SPARSE_HOLE if how == "sparse" and size else 0)
        data = v.data()[v.size - size:] if how in ("append", "sparse") else v.data()
        at = v.size - len(data) if how == "sparse" else None  # pwrite past the hole
        self.ensure_dir(key)
        try:
            fd = os.open(self.w.p(key), flags, 0o644)
        except OSError as e:
            return self.allow_write_error(e.errno, f"open {key} for writing")
        self.created(key)
        err, done = None, 0
        try:
            step = max(1, -(-len(data) // chunks))
            for i in range(0, len(data), step):
                self.write_all(fd, data[i:i + step], None if at is None else at + i)
                done = min(len(data), i + step)
        except OSError as e:
            err = e.errno
        err = self.close_writer(fd, err)
        if err:
            if how != "over" or cur is ABSENT or done >= cur.size:
                self.failed_write(key, v, v.size - len(data) + done)
            return self.allow_write_error(err, f"write {key} ({v!r})", key)
        self.publish(key, v)

    @rule(key=keys)
    def mount_read(self, key):
        try:
            data = self.read_path(key)
        except OSError as e:
            return self.allow_read_error(key, e.errno, "mount read")
        self.m.observe(key, data, "mount read")

    @rule(key=keys)
    def mount_unlink(self, key):
        try:
            os.unlink(self.w.p(key))
        except FileNotFoundError:
            return self.m.observe(key, ABSENT, "unlink")
        except OSError as e:
            return self.allow_write_error(e.errno, f"unlink {key}")
        if not self.m.key(key).present():
            raise ModelError(f"unlink {key!r} succeeded, the model has {self.m.show(self.m.key(key))}")
        for wr in self.writers:
            if wr.key == key:
                wr.discarded = True
        self.m.removed(key)

    @rule(src=keys, dst=keys)
    def mount_rename(self, src, dst):
        if src == dst or any(wr.key == src for wr in self.writers):
            return
        s = self.m.key(src)
        self.ensure_dir(dst)
        try:
            os.rename(self.w.p(src), self.w.p(dst))
        except FileNotFoundError:
            if self.mkdir_failed:  # the destination's directory is not there
                return self.allow_write_error(errno.ENOENT, f"rename {src} {dst}")
            return self.m.observe(src, ABSENT, "rename source")
        except OSError as e:
            return self.allow_write_error(e.errno, f"rename {src} {dst}")
        if not s.present():
            raise ModelError(f"rename {src!r} succeeded, the model has {self.m.show(s)}")
        for wr in self.writers:
            if wr.key == dst:
                wr.discarded = True
        d = self.m.key(dst)
        d.vals, d.settle_at = set(s.present()), s.settle_at
        self.m.removed(src)

    @rule(src=keys, dst=keys)
    def mount_copy(self, src, dst):
        """cp: copy_file_range(2) from src into dst (created or truncated),
        then close: dst publishes src's bytes, the bytes copied before an
        error (a read of src failed: the call returns what it copied, the
        next one the error) or nothing (a write failed the version)."""
        s = self.m.key(src)
        if src == dst or self.busy(dst) or self.busy(src) or len(s.vals) != 1 or \
                s.single() is ABSENT or not s.settled:
            return
        sv = s.single()
        try:
            fin = os.open(self.w.p(src), os.O_RDONLY)
        except OSError as e:
            if e.errno == errno.ENOENT:
                return self.m.observe(src, ABSENT, "copy source")
            return self.allow_read_error(src, e.errno, "copy source open")
        self.ensure_dir(dst)
        try:
            fout = os.open(self.w.p(dst), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            os.close(fin)
            return self.allow_write_error(e.errno, f"open {dst} for a copy")
        self.created(dst)
        done, err, read_err = 0, None, None
        try:
            while True:
                n = os.copy_file_range(fin, fout, 1 << 30)
                if n == 0:
                    break
                done += n
        except OSError as e:
            err = e.errno
        finally:
            os.close(fin)
        if err and done < sv.size:
            read_err = err  # if the close publishes, a read of src failed
        err = self.close_writer(fout, err if read_err is None else None)
        if err:
            return self.allow_write_error(err, f"copy {src} -> {dst}", dst)
        v = self.m.prefix(sv, done, f"copy of v{sv.vid}, {done} B")
        if read_err is not None:
            self.allow_read_error(src, read_err, f"copy {src} -> {dst}")
        elif done != sv.size:
            raise ModelError(f"copy {src!r} -> {dst!r}: {done} bytes of {sv!r}")
        self.publish(dst, v)

    @rule(key=keys, size=sizes)
    def mount_tmpfile(self, key, size):
        """A temporary file: made, unlinked at once, written, a dup of its
        descriptor closed (the kernel sends a FLUSH for it), read back and
        closed. It reads what was written until its last close, and leaves
        nothing under its name (SEMANTICS: a file unlinked while open lives
        on until its last descriptor closes)."""
        k = self.m.key(key)
        if self.busy(key) or k.present() or not k.settled:
            return
        self.ensure_dir(key)
        try:
            fd = os.open(self.w.p(key), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as e:
            return self.allow_write_error(e.errno, f"create {key} for a temporary file")
        self.created(key)
        try:
            os.unlink(self.w.p(key))
        except OSError as e:
            os.close(fd)
            return self.allow_write_error(e.errno, f"unlink {key}")
        self.m.removed(key)
        data = os.urandom(size)
        got, err = b"", None
        try:
            self.write_all(fd, data, 0)
            os.close(os.dup(fd))
            while len(got) <= size:
                b = os.pread(fd, size + 1 - len(got), len(got))
                if not b:
                    break
                got += b
        except OSError as e:
            err = e.errno
        err = self.close_writer(fd, err)
        if err:
            return self.allow_write_error(err, f"temporary file {key} ({size} B)")
        if got != data:
            raise ModelError(f"temporary file {key!r}: wrote {size} B, read back {len(got)} B"
                             f"{' (other bytes)' if len(got) == size else ''}")

    # ---- readers held open ----

    @precondition(lambda self: len(self.held) < 3)
    @rule(key=keys)
    def open_reader(self, key):
        k = self.m.key(key)
        try:
            fd = os.open(self.w.p(key), os.O_RDONLY)
        except FileNotFoundError:
            return self.m.observe(key, ABSENT, "open for reading")
        except OSError as e:
            return self.allow_read_error(key, e.errno, "open for reading")
        cands = set(k.present())
        if not cands:
            os.close(fd)
            raise ModelError(f"open {key!r} succeeded, the model has {self.m.show(k)}")
        self.held.append(Held(fd, key, cands, self.epoch))

    @precondition(lambda self: self.held)
    @rule(i=st.integers(0, 2), off=st.sampled_from([0, 0, 1, 4096, 65536]))
    def read_held(self, i, off):
        h = self.held[i % len(self.held)]
        top = max(v.size for v in h.cands)
        try:
            data = os.pread(h.fd, top + 1, 0)
            if len(data) == top + 1 or (data and len(data) >= (1 << 20)):
                more = os.pread(h.fd, 1 << 24, len(data))
                data += more
        except OSError as e:
            if e.errno in NET_ERRNOS and (h.epoch != self.epoch or self.degraded()):
                return
            raise ModelError(f"read of {h.key!r} held open: {ename(e.errno)}")
        v = self.m.observe_held(h.key, data, h.cands, "read")
        h.cands = {v}
        if off and off < v.size:  # a read at an offset returns the same bytes
            try:
                part = os.pread(h.fd, 4096, off)
            except OSError as e:
                if e.errno in NET_ERRNOS and (h.epoch != self.epoch or self.degraded()):
                    return
                raise
            if part != data[off:off + 4096]:
                raise ModelError(f"pread({h.key!r} held open, 4096, {off}) differs from the "
                                 f"whole read of {v!r}")

    @precondition(lambda self: self.held)
    @rule(i=st.integers(0, 2))
    def close_reader(self, i):
        h = self.held.pop(i % len(self.held))
        os.close(h.fd)

    # ---- writers left open across other steps ----

    def created(self, key):
        """An open with O_CREAT succeeded: a new file exists at once, empty,
        for every client (the mount publishes an empty version at create);
        an existing one keeps its content until close."""
        k = self.m.key(key)
        if ABSENT in k.vals:
            e = self.m.new_version(key, 0, "created empty")
            e.placed = self.alive() if (self.w.clustered and self.clean()) else None
            k.vals = {e if x is ABSENT else x for x in k.vals}

    def busy(self, key):
        return any(wr.key == key for wr in self.writers)

    @precondition(lambda self: len(self.writers) < 2)
    @rule(key=keys, size=sizes, trunc=st.booleans())
    def begin_write(self, key, size, trunc):
        """Open for writing and write the first half (a byte at least); the
        version is not published until finish_write. Without O_TRUNC the
        version in progress copies the file as of its first write
        (SEMANTICS): that write comes now, so that a put by another client
        before finish_write is not in its base. (A version of 1 byte whose
        write waited for finish_write copied a 15-byte put made meanwhile,
        as documented, where this model expected 1 byte: soak seed
        1431599098.) An empty version truncates: without a write, a close
        publishes nothing."""
        if self.busy(key):
            return
        k = self.m.key(key)
        cur = k.single() if len(k.vals) == 1 else None
        if cur is None or (cur is not ABSENT and cur.size > size) or size == 0:
            trunc = True
        v = self.m.new_version(key, size, "mount write left open")
        self.ensure_dir(key)
        try:
            fd = os.open(self.w.p(key), os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if trunc else 0),
                         0o644)
        except OSError as e:
            return self.allow_write_error(e.errno, f"open {key} for writing")
        self.created(key)
        wr = Writer(fd, key, v, self.epoch)
        self.writers.append(wr)
        self.write_some(wr, max(1, size // 2) if size else 0)

    def write_some(self, wr, n):
        if wr.failed:
            return
        wr.saw_full = wr.saw_full or self.full
        try:
            self.write_all(wr.fd, wr.data[wr.off:wr.off + n], wr.off)
            wr.off = min(len(wr.data), wr.off + n)
        except OSError as e:
            wr.failed = e.errno
            # The version failed now; its close reports the same error
            # later (SEMANTICS), when the store may no longer be full.
            what = f"{wr!r}: write of {n} bytes at {wr.off}"
            if e.errno == errno.ENOSPC and wr.saw_full:
                self.m.note(wr.key, f"{what}: ENOSPC (the store was full while it was open)")
            elif wr.epoch == self.epoch:  # else any errno: a fault since open
                self.allow_write_error(e.errno, what, wr.key)
            wr.failed_excused = True

    @precondition(lambda self: self.writers)
    @rule(i=st.integers(0, 1))
    def finish_write(self, i):
        wr = self.writers.pop(i % len(self.writers))
        self.write_some(wr, len(wr.data) - wr.off)
        err = self.close_writer(wr.fd, wr.failed)
        if wr.discarded:
            return  # unlinked or renamed over: discarded at its last close (SEMANTICS)
        if err:
            self.failed_write(wr.key, wr.v, wr.off)
            if err == wr.failed and wr.failed_excused:
                return self.m.note(wr.key, f"{wr!r} failed: {ename(err)} (as its write did)")
            if wr.epoch != self.epoch:  # any errno: e.g. ENOENT for a put the restarted
                # master does not know
                return self.m.note(wr.key, f"{wr!r} failed: {ename(err)} (a fault since open)")
            return self.allow_write_error(err, f"{wr!r} failed", wr.key)
        self.publish(wr.key, wr.v)

    # ---- the Python store ----

    @rule(key=keys, size=sizes, once=st.booleans())
    def py_put(self, key, size, once):
        """upsert (replace) or put (write-once: an existing key keeps its value)."""
        v = self.m.new_version(key, size, "python " + ("put" if once else "upsert"))
        s = self.w.store
        rc = (s.put if once else s.upsert)(key, v.data(), self.w.rconfig())
        if rc == NO_AVAILABLE_HANDLE:
            return self.allow_write_error(errno.ENOSPC, f"python put {key}")
        if rc == RPC_FAIL:
            return self.allow_write_error(errno.EIO, f"python put {key} (RPC_FAIL)")
        if rc != 0:
            raise ModelError(f"python {'put' if once else 'upsert'}({key!r}) returned {rc}")
        k = self.m.key(key)
        if once and k.present():
            if ABSENT in k.vals:  # it existed (kept) or not (v published)
                v.placed = self.alive() if self.clean() else None
                k.vals = {v if x is ABSENT else x for x in k.vals}
            if self.busy(key):
                pass
            return
        self.publish(key, v)

    @rule(key=keys)
    def py_get(self, key):
        s = self.w.store
        n = s.get_size(key)
        if n == OBJECT_NOT_FOUND:
            return self.m.observe(key, ABSENT, "python get_size")
        if n < 0:
            return self.allow_read_error(key, errno.EIO, f"python get_size ({n})")
        data = s.get(key)
        if n > 0 and data == b"":
            return self.allow_read_error(key, errno.EIO, "python get (b'')")
        self.m.observe(key, data, "python get")

    @rule(key=keys)
    def py_exist(self, key):
        rc = self.w.store.is_exist(key)
        k = self.m.key(key)
        if rc == 0:
            return self.m.observe(key, ABSENT, "python is_exist")
        if rc == 1:
            if not k.present():
                raise ModelError(f"is_exist({key!r}) is 1, the model has {self.m.show(k)}")
            if k.settled:
                k.vals.discard(ABSENT)
            return
        self.allow_read_error(key, errno.EIO, f"python is_exist ({rc})")

    @rule(key=keys, force=st.booleans())
    def py_remove(self, key, force):
        rc = self.w.store.remove(key, force=force)
        k = self.m.key(key)
        if rc == OBJECT_NOT_FOUND:
            return self.m.observe(key, ABSENT, "python remove")
        if rc == OBJECT_HAS_LEASE and not force:
            if not k.present():
                raise ModelError(f"remove({key!r}): OBJECT_HAS_LEASE, model has {self.m.show(k)}")
            return
        if rc != 0:
            return self.allow_write_error(errno.EIO, f"python remove {key} ({rc})")
        if not k.present():
            raise ModelError(f"remove({key!r}) succeeded, the model has {self.m.show(k)}")
        self.m.removed(key)

    # ---- faults: space ----

    @precondition(lambda self: "enospc" in self.FAULTS and not self.full and self.slow > 0)
    @rule()
    def fill(self):
        """Writes files through the mount until ENOSPC: 4 MiB ones, then
        64 KiB ones. They are model keys too (fill/N)."""
        self.slow -= 1
        self.ensure_dir("fill/x")
        if self.mkdir_failed:
            return  # no directory to fill (a fault allowed that): not now
        for size, limit in ((4 * W.MiB, 40), (64 << 10, 400)):
            for _ in range(limit):
                key = f"fill/{len(self.fillers)}"
                v = self.m.new_version(key, size, "filler")
                fd, done = None, 0
                try:
                    fd = os.open(self.w.p(key), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    self.created(key)
                    data = v.data()
                    while done < len(data):
                        done += os.write(fd, memoryview(data)[done:done + W.MiB])
                    os.close(fd)
                except OSError as e:
                    if fd is not None:
                        self.close_writer(fd, e.errno)
                        self.failed_write(key, v, done)
                    if e.errno != errno.ENOSPC and not (e.errno in NET_ERRNOS and self.degraded()):
                        raise ModelError(f"filling: {key}: {ename(e.errno)}")
                    self.full = True
                    for wr in self.writers:
                        wr.saw_full = True
                    self.m.note(key, f"filler write of {v!r}: {ename(e.errno)}")
                    self.fillers.append(key)  # created empty, the write failed
                    break
                self.publish(key, v)
                self.fillers.append(key)
        if not self.full:
            raise ModelError(f"no ENOSPC after {len(self.fillers)} files")

    @precondition(lambda self: self.fillers)
    @rule()
    def unfill(self):
        for key in self.fillers:
            try:
                os.unlink(self.w.p(key))
            except FileNotFoundError:
                self.m.observe(key, ABSENT, "unlink filler")
                continue
            except OSError as e:
                self.allow_write_error(e.errno, f"unlink {key}")
                continue
            self.m.removed(key)
        self.fillers = []
        self.full = False

    # ---- faults: an idle writer ----

    def wait_master(self, cond, timeout, what):
        """Polls the master's counters until cond(them) holds; a ModelError
        after timeout seconds. Asked in this process, through the Python
        store's C extension (mc_master_stats()): a child process (the CLI)
        would inherit our descriptors of files on the mount, and closing
        them sends the daemon a FLUSH, which a stopped daemon never
        answers."""
        try:
            harness.wait_for(lambda: cond(self.w.master_counters()), what, timeout=timeout)
        except AssertionError as e:
            raise ModelError(f"{e} (after {timeout:.0f} s)") from None

    def stay_idle(self, keys, seconds):
        """Lets seconds pass (idle is what the rule tests: past the put
        TTL) with the writers of keys idle, polling the master's counters
        all along: it must keep their writes, its puts in progress, unless
        a fault is in effect or the store is full (a write that returned
        may fail behind it, in the page cache's write-back or the mount's
        write-behind, and its put end with ENOSPC, which the writer's next
        write or close then returns: allow_write_error() checks that)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if (self.w.master_counters().get("puts", 0) < len(keys) and not self.degraded() and
                    not self.full):
                raise ModelError(f"idle writers {keys}: the master dropped a write")
            time.sleep(0.1)

    def open_new_version(self, key, size, what):
        """Opens key through the mount for a new version of size bytes
        (O_TRUNC): (the version, its bytes, the descriptor), or None when
        the open failed as a fault allows."""
        self.ensure_dir(key)
        v = self.m.new_version(key, size, what)
        try:
            fd = os.open(self.w.p(key), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            self.allow_write_error(e.errno, f"open {key}")
            return None
        self.created(key)
        return v, v.data(), fd

    @precondition(lambda self: "idle" in self.FAULTS and self.slow > 0 and not self.writers)
    @rule(idle=st.lists(keys, min_size=1, max_size=3, unique=True),
          others=st.lists(st.tuples(keys, sizes), min_size=1, max_size=4))
    def idle_writer(self, idle, others):
        """Open one to three keys, write a little to each, stay idle past
        the put TTL, write other keys, write more, close. The mount runs
        all along, so it renews the idle writes' leases (together, in one
        call) and the master must not revoke them: a write fails only as a
        fault in effect or a full store allows; then every key must still
        read right. (A writer whose mount stops past the put TTL, and is
        revoked, is the mountstop fault's.)"""
        self.slow -= 1
        open_ = []  # (key, version, bytes, fd, errno, bytes written)
        for key in idle:
            opened = self.open_new_version(key, 3 * 4096 + 100, "idle writer")
            if opened:
                open_.append([key, *opened, None, 0])
        for w in open_:
            try:
                self.write_all(w[3], w[2][:4096], 0)
                w[5] = 4096
            except OSError as e:
                w[4] = e.errno
        if open_:
            self.stay_idle([w[0] for w in open_ if w[4] is None],
                           self.w.put_ttl_ms / 1000 * 1.5 + 0.5)
        for k2, n in others:
            if k2 not in idle:
                self.py_put(k2, n, False)
        for key, v, data, fd, err, done in open_:
            if err is None:
                try:
                    self.write_all(fd, data[4096:], 4096)
                except OSError as e:
                    err = e.errno
            err = self.close_writer(fd, err)
            if err is None:
                self.publish(key, v)
            else:
                self.failed_write(key, v, done)
                self.allow_write_error(err, f"idle writer {key}")
        self.check_all("after the idle writers")

    # ---- faults: a writer stopped mid-write ----

    @precondition(lambda self: self.cluster_fault("mountstop") and self.slow > 0 and
                  not self.writers)
    @rule(key=keys, others=st.lists(st.tuples(keys, sizes), min_size=1, max_size=4),
          after=st.integers(0, 7))
    def stop_mount_mid_write(self, key, others, after):
        """A thread writes 8 MiB to the mount in 1 MiB writes; once `after`
        of them returned the mount daemon is stopped (SIGSTOP: wherever it
        is, maybe in the middle of a copy into a node's segment it maps)
        until the master revoked the write (the put TTL), while the Python
        store writes other keys (they may get the space of the revoked
        write); then SIGCONT. The write fails or completes; every key must
        still read right."""
        self.slow -= 1
        size = 8 * 1024 * 1024
        opened = self.open_new_version(key, size, "writer stopped mid-write")
        if not opened:
            return
        v, data, fd = opened
        result = {}
        written = threading.Semaphore(0)

        def write():
            try:
                for off in range(0, size, 1 << 20):
                    self.write_all(fd, data[off:off + (1 << 20)], off)
                    written.release()
            except OSError as e:
                result["err"] = e.errno
            written.release(8)  # whatever is left to wait for

        t = threading.Thread(target=write)
        t.start()
        for _ in range(after):
            if not written.acquire(timeout=30):
                raise ModelError(f"stopped writer {key}: a 1 MiB write took over 30 s")
        self.w.mount.pause()
        try:
            self.wait_master(lambda c: c.get("puts") == 0, self.w.put_ttl_ms / 1000 + 15,
                             "the stopped write to be revoked")
            for k2, n in others:
                if k2 != key:
                    self.py_put(k2, n, False)
        finally:
            self.w.mount.resume()
        t.join(60)
        if t.is_alive():
            raise ModelError(f"stopped writer {key}: a write still blocked 60 s after SIGCONT")
        err = self.close_writer(fd, result.get("err"))
        if err is None:
            self.publish(key, v)
        else:
            self.failed_write(key, v, 0)
        if err is not None and err not in NET_ERRNOS | {errno.ENOSPC}:
            raise ModelError(f"stopped writer {key}: unexpected {ename(err)}")
        self.check_all("after the stopped writer")

    # ---- faults: nodes ----

    def cluster_fault(self, name):
        return self.w.clustered and name in self.FAULTS

    @precondition(lambda self: self.cluster_fault("nodekill") and len(self.w.nodes) == 2 and
                  self.slow > 0)
    @rule(which=st.integers(0, 1), wait=st.booleans())
    def kill_node(self, which, wait):
        """kill -9 a node; with wait, until past the node TTL (its files with
        no other copy are then gone)."""
        self.slow -= 1
        n = self.w.nodes[which]
        victim = self.inc[id(n)]
        settle = (W.NODE_TTL_MS + W.HEARTBEAT_MS + 2000) / 1000
        self.w.kill_node(which)
        self.lose(victim, settle)
        self.fault(settle)
        if wait:
            time.sleep(settle)

    @precondition(lambda self: self.w.clustered and len(self.w.nodes) < 2)
    @rule()
    def add_node(self):
        self.new_incarnation(self.w.add_node())

    @precondition(lambda self: self.cluster_fault("nodestop") and len(self.w.nodes) == 2 and
                  self.slow > 0)
    @rule(which=st.integers(0, 1), past_ttl=st.booleans(), reads=st.lists(keys, max_size=2))
    def stop_node(self, which, past_ttl, reads):
        """SIGSTOP a node, read a little, SIGCONT: within the TTL nothing is
        lost; past it, the node's segment is dropped (files with no other
        copy go) and the node mounts an empty one again."""
        self.slow -= 1
        n = self.w.nodes[which]
        victim = self.inc[id(n)]
        t0 = time.time()
        settle = (W.NODE_TTL_MS + W.HEARTBEAT_MS + 2000) / 1000
        if past_ttl:
            self.lose(victim, settle)
            self.fault(settle + 1)
        else:
            self.fault(1.5)
        before = self.w.remounts(n)
        self.w.stop_node(which)
        try:
            for key in reads:
                self.mount_read(key)
        finally:
            stop_for = settle if past_ttl else 1.0
            time.sleep(max(0.0, t0 + stop_for - time.time()))
            self.w.cont_node(n)
        if past_ttl:
            self.new_incarnation(n)
            deadline = time.time() + 15
            while self.w.remounts(n) == before and time.time() < deadline:
                time.sleep(0.05)
            self.fault(2 + self.w.put_ttl_ms / 1000)  # its segment's hold
        elif time.time() - t0 > (W.NODE_TTL_MS - W.HEARTBEAT_MS) / 1000:
            # The reads took too long to call this "within the TTL".
            self.lose(victim, 0)
            self.new_incarnation(n)

    # ---- faults: the master ----

    @precondition(lambda self: self.cluster_fault("masterrestart") and self.slow > 0)
    @rule()
    def restart_master(self):
        """kill -9 and restart the master: it rebuilds its namespace from the
        nodes' records (SEMANTICS)."""
        self.slow -= 1
        self.restarts += 1
        self.fault(3)
        self.w.restart_master()
        for name, k in self.m.keys.items():
            self.m.may_be_lost(name, 0)
            for v in k.present():
                v.placed = None
        # self.full stays: the objects, and the space they take, are back.
        for n in self.w.nodes:
            self.new_incarnation(n)
        # The nodes mount their segments again within a heartbeat; the master
        # holds them for one write lease (late writers of before): puts may
        # fail with EAGAIN until then.
        self.fault(3 + self.w.put_ttl_ms / 1000)

    @precondition(lambda self: self.cluster_fault("latereport") and len(self.w.nodes) == 2 and
                  self.slow > 0)
    @rule(which=st.integers(0, 1), only_there=st.lists(st.tuples(keys, sizes), max_size=2),
          ops=st.lists(st.tuples(st.sampled_from(["write", "rename", "unlink", "read"]), keys,
                                 keys, sizes, st.booleans()), min_size=1, max_size=4))
    def restart_master_past_a_stopped_node(self, which, only_there, ops):
        """Put only_there's keys on one node alone (mooncake-cli put
        --replicas 1 --preferred), SIGSTOP that node, kill -9 and restart
        the master, change files through the mount while the stopped node
        has not reported (its files are not there yet; a rename's `over`
        sends it onto one of them), SIGCONT: its records come late. What
        this run wrote, or renamed onto a name, wins over them (SEMANTICS,
        the first seconds after a restart); what it removed or renamed away
        may come back from them (a version the other node did not hold);
        what it left alone is back as it was."""
        self.slow -= 1
        self.restarts += 1
        n = self.w.nodes[which]
        if only_there:
            self.w.segments_settled(2)  # n takes the puts: it is not on hold
        for key, size in only_there:
            if self.busy(key):
                continue
            v = self.m.new_version(key, size, "cli put, one replica")
            r = harness.cli(self.w.master.addr, "--timeout-ms", str(W.TIMEOUT_MS), "--replicas",
                            "1", "--preferred", n.addr, "put", key, input=v.data(), timeout=20)
            if r.returncode != 0:  # the CLI prints strerror()
                e = errno.ENOSPC if b"No space left" in r.stderr else \
                    errno.EAGAIN if b"temporarily unavailable" in r.stderr else errno.EIO
                self.allow_write_error(e, f"cli put {key}: {r.stderr!r}", key)
                continue
            self.publish(key, v)
        before = {name: (set(k.vals), k.settle_at) for name, k in self.m.keys.items()}
        touched = set()
        self.fault(3)
        self.w.notices_fetched()  # the stopped node's records are not stale
        self.w.stop_node(which)
        try:
            self.w.restart_master(stopped=n)
            for name, k in self.m.keys.items():
                self.m.may_be_lost(name, float("inf"))  # until the late report
                for v in k.present():
                    v.placed = None
            for other in self.w.nodes:
                if other is not n:
                    self.new_incarnation(other)
            self.w.segments_settled(1)  # writes are taken again
            self.fault(10)  # the ops below may fail: a file's one node is stopped
            for kind, a, b, size, over in ops:
                if kind == "rename" and over and only_there:
                    b = only_there[size % len(only_there)][0]
                touched |= {a, b} if kind == "rename" else {a} if kind != "read" else set()
                if kind == "write":
                    self.mount_write(a, size, "trunc", 1)
                elif kind == "rename":
                    self.mount_rename(a, b)
                elif kind == "unlink":
                    self.mount_unlink(a)
                else:
                    self.mount_read(a)
                for name in (a,) if kind in ("rename", "unlink") else ():
                    k = self.m.key(name)
                    if k.vals == {ABSENT} and name in before:
                        k.vals |= before[name][0]
                        k.settled = False
        finally:
            self.w.cont_node(n)
        self.new_incarnation(n)
        self.w.segments_settled(2)
        for name, k in self.m.keys.items():
            if name not in touched and name in before:
                k.vals, k.settle_at = set(before[name][0]), before[name][1]
            elif k.settle_at == float("inf"):
                k.settled = True
        self.fault(2)

    def failover(self, stop, ops, kill):
        """kill -9 the leading master (stop: SIGSTOP it past its lease, then
        SIGCONT), run ops through the mount and the Python store while the
        standby takes over, wait until it serves: every change answered
        with success before, during or after is there (SEMANTICS: the
        leader of masters on etcd dies). A change that failed in between
        may have been made: the leader may have logged it and died before
        answering. With kill, a node is killed first (its segment's records
        in the log wait for a report that never comes) and a fresh node
        joins as soon as the standby leads, before the other node has
        reported (it must not take the dead node's segment and records)."""
        self.slow -= 1
        takeover = W.ETCD_TTL_S * 5 + 10
        prior = self.degraded_until
        self.fault(takeover)  # writes in progress, held readers: ESTALE
        after = 3 + self.w.put_ttl_ms / 1000  # degraded once the standby serves
        if kill is not None and len(self.w.nodes) == 2:
            victim = self.inc[id(self.w.nodes[kill])]
            self.w.kill_node(kill)
            # Dropped by the new leader once it has waited for its report
            # (5 s) and its node TTL passed: not settled until well after,
            # and new versions may take a replica there until then.
            settle = (W.NODE_TTL_MS + W.HEARTBEAT_MS + 2000) / 1000 + 5
            after = max(after, settle)
            self.lose(victim, takeover + settle)

        def during():
            for kind, key, size in ops:
                if not self.busy(key):
                    self.change_without_a_leader(kind, key, size)

        def then():
            if len(self.w.nodes) < 2:
                self.new_incarnation(self.w.add_node())

        took = self.w.failover(stop, during, then)
        for name in self.m.keys:
            self.m.note(name, f"failover {self.w.failovers} ({'SIGSTOP' if stop else 'kill -9'},"
                              f" {took:.1f} s)")
        # As after a restart, the nodes' segments are held for a write lease
        # at the new leader (late writers of the old one): puts may fail
        # with EAGAIN meanwhile. The bound of the takeover is over: what is
        # published from then on is placed on the live nodes (publish()),
        # so that a node's death later may take only what it alone held.
        self.degraded_until = max(prior, time.time() + after)
        self.fault(0)
        self.check_all("after a failover")

    # The ha configuration is there for the failover: three rules of their
    # own names run it (hypothesis switches rules off by name for a whole
    # example, and picks among the others alike), so that an example runs
    # it about as often as the cluster's fault rules together.
    def _failover_rule(name):
        def run(self, stop, ops, kill):
            self.failover(stop, ops, kill)
        run.__name__ = run.__qualname__ = name
        return precondition(lambda self: self.cluster_fault("failover") and self.slow > 0)(rule(
            stop=st.booleans(),
            ops=st.lists(st.tuples(st.sampled_from(["write", "unlink", "put", "remove", "read"]),
                                   keys, sizes), max_size=3),
            kill=st.sampled_from([None, None, 0, 1]))(run))

    failover_a = _failover_rule("failover_a")
    failover_b = _failover_rule("failover_b")
    failover_c = _failover_rule("failover_c")
    del _failover_rule

    def change_without_a_leader(self, kind, key, size, why="no leader"):
        """One change (or read) while the leader is gone (or etcd is): on
        success the model takes it as usual; on an error (which the fault
        allows) its key may hold the change or not, until a read tells,
        unless the error was EROFS (refused: not made)."""
        k = self.m.key(key)
        before = set(k.vals)
        if kind == "read":
            return self.mount_read(key)
        if kind == "write":
            # Created empty at the open, or written and published at the close.
            empty = self.m.new_version(key, 0, f"created empty ({why})")
            v = self.m.new_version(key, size, f"mount write ({why})")
            self.ensure_dir(key)
            try:
                fd = os.open(self.w.p(key), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            except OSError as e:
                self.allow_write_error(e.errno, f"open {key} ({why})", key)
                if e.errno != errno.EROFS:
                    k.vals = before | ({empty} if ABSENT in before else set())
                return
            self.created(key)
            err = None
            try:
                self.write_all(fd, v.data())
            except OSError as e:
                err = e.errno
            err = self.close_writer(fd, err)
            if err is None:
                return self.publish(key, v)
            self.allow_write_error(err, f"write {key} ({v!r}, {why})", key)
            if err != errno.EROFS:
                k.vals |= {v}  # created() added the empty version
            return
        if kind == "unlink":
            try:
                os.unlink(self.w.p(key))
            except FileNotFoundError:
                return self.m.observe(key, ABSENT, f"unlink ({why})")
            except OSError as e:
                self.allow_write_error(e.errno, f"unlink {key} ({why})", key)
                if e.errno != errno.EROFS:
                    k.vals |= {ABSENT}
                return
            if not k.present():
                raise ModelError(f"unlink {key!r} succeeded, the model has {self.m.show(k)}")
            return self.m.removed(key)
        if kind == "put":
            v = self.m.new_version(key, size, "python upsert (no leader)")
            rc = self.w.store.upsert(key, v.data(), self.w.rconfig())
            if rc == 0:
                return self.publish(key, v)
            self.allow_write_error(errno.EIO, f"python upsert {key} ({rc}, {why})", key)
            k.vals |= {v}
            return
        rc = self.w.store.remove(key, force=True)
        if rc == OBJECT_NOT_FOUND:
            return self.m.observe(key, ABSENT, f"python remove ({why})")
        if rc == 0:
            if not k.present():
                raise ModelError(f"remove({key!r}) succeeded, the model has {self.m.show(k)}")
            return self.m.removed(key)
        self.allow_write_error(errno.EIO, f"python remove {key} ({rc}, {why})", key)
        k.vals |= {ABSENT}

    @precondition(lambda self: self.cluster_fault("etcdstop") and self.slow > 0)
    @rule(pause=st.booleans(),
          ops=st.lists(st.tuples(st.sampled_from(["write", "unlink", "put", "remove", "read"]),
                                 keys, sizes), min_size=1, max_size=3))
    def etcd_outage(self, pause, ops):
        """Stop etcd (pause: SIGSTOP it), run ops through the mount and the
        Python store, start it again (SIGCONT): the leader answers reads
        from its memory meanwhile and refuses changes with EROFS; a change
        refused so is not made, one that failed otherwise (ETIMEDOUT: made,
        its log write pending) may be there or not (SEMANTICS: etcd
        unavailable). A paused etcd's leases may have lapsed when it
        resumes: the standby may take over then, and nothing answered
        with success may be lost either way."""
        self.slow -= 1
        prior = self.degraded_until
        self.fault(W.ETCD_TTL_S * 5 + 30)
        self.etcd_down = True

        def during():
            for kind, key, size in ops:
                if not self.busy(key):
                    self.change_without_a_leader(kind, key, size, "etcd away")

        try:
            changed = self.w.etcd_outage(pause, during)
        finally:
            self.etcd_down = False
        for name in self.m.keys:
            self.m.note(name, f"etcd {'paused' if pause else 'stopped'}"
                              f"{', the standby took over' if changed else ''}")
        self.degraded_until = max(prior, time.time() + 3 + self.w.put_ttl_ms / 1000)
        self.fault(0)
        self.check_all("after etcd came back")

    # ---- checks ----

    @invariant()
    def processes_alive(self):
        self.w.check_alive()

    def check_all(self, why):
        for key in list(self.m.keys):
            try:
                data = self.read_path(key)
            except OSError as e:
                self.allow_read_error(key, e.errno, f"mount read ({why})")
                continue
            self.m.observe(key, data, f"mount read ({why})")

    def teardown(self):
        ok = False
        failing = sys.exc_info()[0] is not None  # a step failed: only clean up
        try:
            if not failing:
                while self.held:
                    self.read_held(0, 0)
                    self.close_reader(0)
                while self.writers:
                    self.finish_write(0)
                self.w.check_alive()
                self.check_all("at the end")
            ok = True
        finally:
            for h in self.held:
                try:
                    os.close(h.fd)
                except OSError:
                    pass
            for wr in self.writers:
                try:
                    os.close(wr.fd)
                except OSError:
                    pass
            self.held, self.writers = [], []
            keep = current_build_context().is_final and (failing or not ok)
            problems = self.w.close(not keep)
            if problems and ok:
                raise W.ProcessDied("at teardown:\n" + "\n".join(problems))
            if problems and not ok:
                print("  at teardown:\n" + "\n".join(problems))
            if keep:
                print(f"  processes' logs kept in {self.w.tmp}")


def make_machine(config, faults):
    """A StoreMachine subclass for config with the fault classes faults."""
    if config == "ha":  # the failover, and the node faults around it; the rest is cluster's
        faults = [f for f in faults if f in HA_FAULTS + ("nodekill", "nodestop")]
    else:
        drop = CLUSTER_FAULTS if config == "embedded" else HA_FAULTS
        faults = [f for f in faults if f not in drop]
    return type(f"StoreMachine_{config}", (StoreMachine,),
                {"CONFIG": config, "FAULTS": frozenset(faults)})
