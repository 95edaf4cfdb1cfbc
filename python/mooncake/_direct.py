"""The direct backend: a libmooncake store in this process, through the C
extension mooncake._store.

Sync methods are the extension's own (they release the GIL while they wait).
Async methods return asyncio futures resolved by a Completer: one per event
loop that uses this store, whose eventfd the loop watches with add_reader().
"""

import asyncio
import threading

from . import _store

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
                 rdma_devices=None):
        self._s = _store.Store(segment_size, lease_ms, master, evict_high_pct, evict_ratio_pct,
                               listen, timeout_ms, protocol, rdma_devices)
        self._comps = {}  # event loop -> Completer
        self._lock = threading.Lock()
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
        loop = asyncio.get_running_loop()
        c = self._comps.get(loop)
        return c if c is not None else self._attach(loop)

    def _attach(self, loop):
        with self._lock:
            c = self._comps.get(loop)
            if c is not None:
                return c
            for old in [lp for lp in self._comps if lp.is_closed()]:
                self._comps.pop(old).close()  # its loop is gone: drop what it left
            c = _store.Completer(loop)
            loop.add_reader(c.fileno(), c.drain)
            self._comps[loop] = c
            return c

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
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        with self._lock:
            local = [c for lp, c in self._comps.items()
                     if lp is current or (not lp.is_running() and not lp.is_closed())]
        while True:
            # Large get()s come back once for their bytes object: feed them.
            self._s.wait_idle()
            if not sum(c.drain() for c in local):
                break
        self._s.close()
        with self._lock:
            comps, self._comps = self._comps, {}
        for loop, c in comps.items():
            if loop.is_closed():
                c.close()
            elif loop is current or not loop.is_running():
                _detach(loop, c)
            else:
                loop.call_soon_threadsafe(_detach, loop, c)
        return 0


def _detach(loop, c):
    c.drain()
    loop.remove_reader(c.fileno())
    c.close()
