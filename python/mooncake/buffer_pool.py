"""mooncake.buffer_pool - BufferPool: scratch buffers registered with a store
for zero-copy calls, leased and returned.

    pool = BufferPool(store)
    with pool.buffer(1 << 20) as lease:
        n = store.get_into("key", lease.ptr, lease.size)
        data = bytes(lease.buffer[:n])
    pool.close()

Mooncake leases these from the client's setup-time local buffer, falling
back to short-lived registered "overflow" buffers; this store has no such
local buffer, so every lease is such a buffer: an anonymous mapping
(page-aligned) registered with the store at acquire(), unmapped and
unregistered at release(). The limits are Mooncake's: max_regions leases at once,
max_bytes of them at once (default: no limit on either); acquire() waits
for a release (block=True, up to timeout seconds) or raises RuntimeError.
"""

import ctypes
import mmap
import threading
import time


class Lease:
    """One leased buffer: ptr (its address), size, buffer (a memoryview of
    those bytes) and release()."""

    __slots__ = ("ptr", "size", "buffer", "_pool", "_map")

    def __init__(self, pool, m, size):
        self._pool, self._map, self.size = pool, m, size
        probe = ctypes.c_char.from_buffer(m)
        self.ptr = ctypes.addressof(probe)
        del probe  # its export of the mapping ends here
        self.buffer = memoryview(m)[:size]

    def release(self):
        """Returns the buffer to the pool (unregistered and unmapped).
        Raises BufferError while views made from .buffer still exist (the
        lease then stays valid), as Mooncake's."""
        if self._pool is None:
            return
        self.buffer.release()
        try:
            self._map.close()  # BufferError while other views of it live
        except BufferError:
            self.buffer = memoryview(self._map)[:self.size]
            raise
        pool, self._pool = self._pool, None
        pool._give_back(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class BufferPool:
    """Registered scratch buffers of store (a set-up MooncakeDistributedStore)."""

    def __init__(self, store, max_regions=None, max_bytes=None):
        self._store = store
        self._max_regions, self._max_bytes = max_regions, max_bytes
        self._cv = threading.Condition()
        self._active = set()
        self._bytes = 0
        self._closed = False

    def _fits(self, size):
        return (self._max_regions is None or len(self._active) < self._max_regions) and \
            (self._max_bytes is None or self._bytes + size <= self._max_bytes)

    def acquire(self, size, block=True, timeout=None):
        """A Lease of size bytes. Raises ValueError (size not positive, or
        beyond max_bytes), RuntimeError (closed; limits reached and not
        block, or still after timeout seconds; the store refused to
        register the memory)."""
        if type(size) is not int or size <= 0 or \
                (self._max_bytes is not None and size > self._max_bytes):
            raise ValueError(f"cannot lease {size!r} bytes")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while not self._closed and not self._fits(size):
                left = None if deadline is None else deadline - time.monotonic()
                if not block or (left is not None and left <= 0):
                    raise RuntimeError("BufferPool: no capacity left")
                self._cv.wait(left)
            if self._closed:
                raise RuntimeError("BufferPool is closed")
            self._bytes += size
            lease = Lease(self, mmap.mmap(-1, size), size)
            if self._store.register_buffer(lease.ptr, size) != 0:
                lease.buffer.release()
                lease._map.close()
                self._bytes -= size
                raise RuntimeError("BufferPool: the store cannot register the buffer")
            self._active.add(lease)
            return lease

    def buffer(self, size, block=True, timeout=None):
        """acquire() for a with statement (released at its end)."""
        return self.acquire(size, block, timeout)

    def _give_back(self, lease):
        self._store.unregister_buffer(lease.ptr)
        with self._cv:
            self._active.discard(lease)
            self._bytes -= lease.size
            self._cv.notify_all()

    def close(self):
        """Closes the pool; RuntimeError while leases are active."""
        with self._cv:
            if self._active:
                raise RuntimeError(f"BufferPool.close(): {len(self._active)} leases active")
            self._closed = True
            self._cv.notify_all()


#: Mooncake's former name.
RegisteredBufferPool = BufferPool
