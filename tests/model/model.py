"""The reference model of the model checker: what a read of each key may
return, given every operation the driver did and every fault it injected.

Contents identify themselves. A version `vid` (a number unique in the run) of
n bytes is the first n bytes of 16-byte records (b"mcv1", vid, record index);
a file built from pieces of several versions (an append) is their
concatenation. A read that matches no acceptable version is decoded record by
record, so a corrupted read names the versions whose bytes it holds.

Nothing here touches the store: the driver (machine.py) calls note_* after
each operation and check_* on each observation; check_* raise ModelError.
"""

import struct
import time

import numpy as np

MAGIC = 0x3176636D  # b"mcv1" little-endian
REC = 16
ABSENT = None  # a member of Key.vals: the key may not exist


class ModelError(AssertionError):
    """A read the model does not allow."""


def content(vid, size):
    """The n bytes of simple version vid (None: a hole, zeros)."""
    if vid is None:
        return bytes(size)
    n = (size + REC - 1) // REC
    a = np.empty((n, 2), dtype="<u8")
    a[:, 0] = np.uint64(MAGIC | (vid << 32))
    a[:, 1] = np.arange(n, dtype="<u8")
    return a.tobytes()[:size]


def describe(data, limit=8):
    """A short account of whose records `data` holds: runs of
    (vid, first record, last record) at their offsets, and foreign bytes."""
    out = []
    n = len(data) // REC
    if n:
        a = np.frombuffer(data[: n * REC], dtype="<u8").reshape(n, 2)
        magic = (a[:, 0] & np.uint64(0xFFFFFFFF)) == np.uint64(MAGIC)
        vids = a[:, 0] >> np.uint64(32)
        idx = a[:, 1]
        start = 0
        for i in range(1, n + 1):
            if i == n or magic[i] != magic[start] or vids[i] != vids[start] or \
                    (magic[i] and int(idx[i]) != int(idx[i - 1]) + 1):
                if magic[start]:
                    out.append(f"@{start * REC}: v{int(vids[start])} "
                               f"records {int(idx[start])}..{int(idx[i - 1])}")
                else:
                    blob = bytes(data[start * REC:min(i, start + 2) * REC])
                    zeros = not any(data[start * REC:i * REC])
                    out.append(f"@{start * REC}: {(i - start) * REC} bytes "
                               f"{'of zeros' if zeros else 'foreign ' + blob.hex()}")
                start = i
    if len(data) % REC:
        out.append(f"@{n * REC}: tail of {len(data) % REC} bytes")
    if len(out) > limit:
        out = out[:limit] + [f"... {len(out) - limit} more runs"]
    return "; ".join(out) if out else "empty"


class Version:
    """A published (or being written) version: pieces of (vid, size), vid
    None for a hole of a sparse file."""

    def __init__(self, vid, key, pieces, how):
        self.vid, self.key, self.pieces, self.how = vid, key, pieces, how
        self.size = sum(s for _, s in pieces)

    def data(self):
        return b"".join(content(v, s) for v, s in self.pieces)

    def __repr__(self):
        return f"v{self.vid}({self.key!r}, {self.size} B, {self.how})"


class Key:
    """What a read of one key may return: vals, a set of Version or ABSENT.
    `settled` is False while an asynchronous fault (a node's death not yet
    noticed by the master) may still change the answer; then reads must not
    narrow vals."""

    def __init__(self, name):
        self.name = name
        self.vals = {ABSENT}
        self.settle_at = 0.0  # time.time() from which the key is settled

    @property
    def settled(self):
        return time.time() >= self.settle_at

    @settled.setter
    def settled(self, value):
        self.settle_at = 0.0 if value else float("inf")

    def single(self):
        """The one acceptable Version, ABSENT, or raise if several."""
        assert len(self.vals) == 1
        return next(iter(self.vals))

    def present(self):
        return [v for v in self.vals if v is not ABSENT]


class Model:
    def __init__(self, keys):
        self.keys = {k: Key(k) for k in keys}
        self.next_vid = 1
        self.versions = {}
        self.notes = {}  # key -> what happened to it that a report should say

    def key(self, name):
        if name not in self.keys:
            self.keys[name] = Key(name)
        return self.keys[name]

    def new_version(self, key, size, how, base=None, hole=0):
        """A new version of key: size fresh bytes, after a hole of `hole`
        bytes, appended to base (a Version) when given."""
        vid = self.next_vid
        self.next_vid += 1
        pieces = (list(base.pieces) if base else []) + ([(None, hole)] if hole else [])
        pieces += [(vid, size)] if size else []
        v = Version(vid, key, pieces, how)
        self.versions[vid] = v
        return v

    def note(self, name, text):
        self.notes.setdefault(name, []).append(text)

    def history(self, name):
        n = self.notes.get(name, [])
        return ("\n  history of this key: " + "; ".join(n[-6:])) if n else ""

    def prefix(self, v, n, how):
        """A version holding the first n bytes of v (what a failed write
        had written)."""
        pieces, left = [], n
        for vid, size in v.pieces:
            if left <= 0:
                break
            pieces.append((vid, min(size, left)))
            left -= size
        p = Version(self.next_vid, v.key, pieces, how)
        self.versions[self.next_vid] = p
        self.next_vid += 1
        return p

    # ---- transitions ----

    def published(self, name, v):
        self.key(name).vals = {v}
        self.key(name).settled = True

    def removed(self, name):
        self.key(name).vals = {ABSENT}
        self.key(name).settled = True

    def may_be_lost(self, name, settled):
        """A node holding the only replicas of name's current version died:
        the key may be gone."""
        k = self.key(name)
        k.vals = k.vals | {ABSENT}
        # Not settled until then (a time, from time.time()): reads before
        # it must not narrow vals (the master may not have noticed yet).
        k.settle_at = max(k.settle_at, settled)

    # ---- observations ----

    def _match(self, data, cands):
        for v in cands:
            if v is ABSENT:
                continue
            if len(data) == v.size and data == v.data():
                return v
        return None

    def observe(self, name, data, how, extra=()):
        """A read of name returned data (bytes) or ABSENT (ENOENT).
        Returns the matched Version (or ABSENT); raises ModelError. extra:
        versions also acceptable this time (a file being created reads
        empty), which do not narrow the model."""
        k = self.key(name)
        if data is not ABSENT:
            v = self._match(data, extra)
            if v is not None:
                return v
        if data is ABSENT:
            if ABSENT not in k.vals:
                raise ModelError(f"{how} {name!r}: ENOENT, but the model has {self.show(k)}"
                                 f"{self.history(name)}")
            if k.settled:
                k.vals = {ABSENT}
            return ABSENT
        v = self._match(data, k.vals)
        if v is None:
            raise ModelError(f"{how} {name!r}: read {len(data)} bytes that are no acceptable "
                             f"version\n  acceptable: {self.show(k)}\n  read holds: "
                             f"{describe(data)}\n  {self.whose(data)}{self.history(name)}")
        if k.settled:
            k.vals = {v}
        return v

    def observe_held(self, name, data, cands, how):
        """A held reader (opened when cands were acceptable) read data."""
        v = self._match(data, cands)
        if v is None:
            raise ModelError(f"{how} {name!r} (held open): read {len(data)} bytes that are not "
                             f"the version it opened\n  opened: {sorted(cands, key=repr)}\n"
                             f"  read holds: {describe(data)}\n  {self.whose(data)}")
        return v

    def whose(self, data):
        n = len(data) // REC
        if not n:
            return ""
        a = np.frombuffer(data[: n * REC], dtype="<u8").reshape(n, 2)
        vids = {int(x) >> 32 for x in a[:, 0] if (int(x) & 0xFFFFFFFF) == MAGIC}
        names = [repr(self.versions[v]) for v in sorted(vids) if v in self.versions]
        return "versions found: " + ", ".join(names) if names else "no known version's bytes"

    def show(self, k):
        vals = sorted(("ABSENT" if v is ABSENT else repr(v)) for v in k.vals)
        return "{" + ", ".join(vals) + "}" + ("" if k.settled else " (unsettled)")


def _selftest():
    m = Model(["a", "b"])
    v1 = m.new_version("a", 100, "test")
    m.published("a", v1)
    assert m.observe("a", v1.data(), "t") is v1
    v2 = m.new_version("b", 50, "test")
    try:
        m.observe("a", v2.data(), "t")
    except ModelError as e:
        assert "v2" in str(e), e
    else:
        raise AssertionError("corruption not detected")
    v3 = m.new_version("a", 40, "append", base=v1)
    assert v3.size == 140 and v3.data()[:100] == v1.data()
    assert struct.unpack("<II", content(7, 8)) == (MAGIC, 7)
    assert "zeros" in describe(bytes(64))


if __name__ == "__main__":
    _selftest()
    print("model self-test ok")
