"""The direct backend: a libmooncake store in this process, through the C
extension mooncake._store.

Sync methods are the extension's own (they release the GIL while they wait).
Async methods return asyncio futures resolved by a Completer: one per event
loop that uses this store, whose eventfd the loop watches with add_reader().
"""

import asyncio
import ctypes
import errno
import itertools
import os
import weakref

from . import _store
from ._loops import PerLoop, running_loop

TMP_PREFIX = b".mctmp-"  # as the mount backend's temporary names
_RENAME_NOREPLACE = 1  # MC_RENAME_NOREPLACE
_seq = itertools.count()


def key_bytes(key):
    """key (str or bytes) as bytes; None for a str that is no UTF-8."""
    if isinstance(key, bytes):
        return key
    if not isinstance(key, str):
        raise TypeError(f"key must be str or bytes, not {type(key).__name__}")
    try:
        return key.encode("utf-8")
    except UnicodeEncodeError:
        return None

# Methods with a native async twin in the extension (name + "_async").
NATIVE = (
    "get", "get_buffer", "get_batch", "get_buffer_batch", "get_into", "get_into_batch",
    "read_ranges", "put", "put_parts", "put_batch", "put_from", "put_from_batch",
    "exist", "exist_batch", "size", "remove", "remove_batch",
)


class DirectBackend:
    """One open libmooncake store: embedded when master is None, else a
    client of that master (and a node when segment_size > 0). Raises
    OSError(errno) when it cannot open, e.g. ECONNREFUSED or ETIMEDOUT (within
    timeout_ms) when the master does not answer."""

    kind = "direct"

    def __init__(self, segment_size=0, lease_ms=0, master=None, evict_high_pct=0,
                 evict_ratio_pct=0, listen=None, timeout_ms=0, protocol=None,
                 rdma_devices=None, secret_file=None, segment_file=None, segment_offset=0):
        self._s = _store.Store(segment_size, lease_ms, master, evict_high_pct, evict_ratio_pct,
                               listen, timeout_ms, protocol, rdma_devices,
                               secret_file=secret_file, segment_file=segment_file,
                               segment_offset=segment_offset)
        self._comps = PerLoop(_store.Completer, _store.Completer.close)  # event loop -> Completer
        # A process that exits (or drops the store) without close() still
        # closes the library store: a node then unmounts its segment at
        # once instead of leaving it on the master until the node TTL.
        # weakref.finalize runs at interpreter exit (atexit) for a backend
        # still alive, or when the backend is collected; close() runs it
        # itself. It holds the extension's Store, never self.
        self._fin = weakref.finalize(self, self._s.close)
        for name in NATIVE:
            setattr(self, name, getattr(self._s, name))
            setattr(self, "a_" + name, self._async_entry(getattr(self._s, name + "_async")))
        self.register = self._s.register
        self.unregister = self._s.unregister

    def _async_entry(self, native):
        completer = self._completer

        def call(*args):
            return native(completer(), *args)

        return call

    def _completer(self):
        return self._comps.get(asyncio.get_running_loop())

    def memory(self, target, size):
        """A read-only view of size bytes of caller memory: an int address
        inside a registered buffer, or an object with the buffer protocol;
        None when it is neither registered nor large enough."""
        if isinstance(target, int) and not isinstance(target, bool):
            if size < 0 or not self._s.registered(target, size):
                return None
            return memoryview((ctypes.c_char * size).from_address(target)).cast("B") if size \
                else memoryview(b"")
        mv = memoryview(target).cast("B")
        return mv[:size] if size <= len(mv) else None

    def put_with_xattrs(self, key, parts, xattrs, opts, upsert):
        """Publishes the concatenation of parts under key together with the
        extended attributes xattrs ({bytes name: bytes value}) in one step
        for readers: the object is written under a temporary key in the
        same directory (TMP_PREFIX), given its attributes, then renamed into
        place (without replacing unless upsert: write-once, an existing key
        keeps its value and attributes). Returns a code."""
        k = key_bytes(key)
        if k is None or not k or len(k) > _store.KEY_MAX or b"\0" in k:
            return _store.INVALID_KEY
        d = k[:k.rfind(b"/") + 1]
        tmp = d + TMP_PREFIX + b"%d-%d" % (os.getpid(), next(_seq))
        rc = self._s.put_parts(tmp, list(parts), opts, True)
        if rc != 0:
            return rc
        for name, value in xattrs.items():
            r = self._s.xattr_set(tmp, name, value, 0)
            if r < 0:
                self._s.remove(tmp, True)
                return _store.to_code(r)
        r = self._s.rename(tmp, k, 0 if upsert else _RENAME_NOREPLACE)
        if r < 0:
            self._s.remove(tmp, True)
            return 0 if r == -errno.EEXIST else _store.to_code(r)
        return 0

    def replicas(self, key):
        """(size, version, [(segment id, data address, offset, bytes,
        pieces)]) of key's current version, or a code."""
        k = key_bytes(key)
        if k is None or not k or len(k) > _store.KEY_MAX or b"\0" in k:
            return _store.INVALID_KEY
        r = self._s.replicas(k)
        return _store.to_code(r) if isinstance(r, int) else r

    def served_addr(self):
        """Where this store serves its segment (or, embedded, its listen):
        "host:port" as bound, or ""."""
        return self._s.served_addr()

    def pin(self, key):
        """Pins key's current version: (pin, size), or a code."""
        k = key_bytes(key)
        if k is None or not k or len(k) > _store.KEY_MAX or b"\0" in k:
            return _store.INVALID_KEY
        r = self._s.pin(k)
        return _store.to_code(r) if isinstance(r, int) else r

    def pin_read(self, pin, off, ptr, size):
        """Reads size bytes at off of a pinned version into registered
        memory at ptr: the bytes read, or a code."""
        return _store.to_code(self._s.pin_read(pin, off, ptr, size))

    def unpin(self, pin):
        self._s.unpin(pin)

    def keys(self, prefix=b"", markers=False):
        """Every key (bytes) starting with prefix (bytes) in byte order, or a
        negative code. Directory markers ("dir/", made by a mount's mkdir)
        are keys here, so markers changes nothing."""
        out, after = [], None
        while True:
            r = self._s.list(prefix, after, 1000)
            if isinstance(r, int):
                return r
            batch, more = r
            out.extend(batch)
            if not more or not batch:
                return out
            after = batch[-1]

    def health(self):
        """0 if a statfs of the store succeeds (with a master: one request to
        it, bounded by the timeout), 1 if the store is closing, else 2."""
        r = self._s.statfs()
        if isinstance(r, tuple):
            return 0
        return 1 if r == _store.UNAVAILABLE_IN_CURRENT_STATUS else 2

    def inflight(self):
        return self._s.inflight()

    def close(self):
        """Waits for operations in flight (those of event loops in other
        threads that still need their loop fail with STORE_CLOSED), closes
        the store, resolves the futures still queued and detaches from every
        event loop."""
        current = running_loop()
        local = self._comps.drainable(current)
        while True:
            # Large get()s come back once for their bytes object: feed them.
            self._s.wait_idle()
            if not sum(c.drain() for c in local):
                break
        self._fin()
        self._comps.close_all(current)
        return 0
