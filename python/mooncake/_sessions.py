"""Mooncake's batch put and get sessions (a mixin of MooncakeDistributedStore):
objects written and read in byte ranges over several calls, as a layer-wise
KV-cache connector does.

Put: batch_put_session_start(keys, object_sizes, config) opens a session per
key; batch_put_from_multi_buffer_ranges() copies pieces of registered
memory to offsets of the object; batch_put_session_end() publishes each
(write-once, as put()), batch_put_session_revoke() drops it. Mooncake
allocates the object's space at start and writes the pieces straight into
it; here the pieces are staged in this process (a buffer of object_size
bytes per open session) and the object is stored at end, so a full store
shows at end (NO_AVAILABLE_HANDLE), not at start.

Get: batch_get_session_start(keys) pins each key's current version (a
libmooncake handle; on the mount, an open file), which stays readable
however the key changes until batch_get_session_end();
batch_get_into_multi_buffer_ranges() reads byte ranges of it into
registered memory.
"""

from ._errors import INVALID_PARAMS, OBJECT_ALREADY_EXISTS, OBJECT_NOT_FOUND, STORE_CLOSED
from ._ops import _Early, _opts


def _ranges_ok(keys, a, z, o):
    return len(keys) == len(a) == len(z) == len(o) and all(
        isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)) and
        isinstance(w, (list, tuple)) and len(x) == len(y) == len(w) for x, y, w in zip(a, z, o))


class _PutSession:
    __slots__ = ("buf", "opts", "err")

    def __init__(self, size, opts):
        self.buf, self.opts, self.err = bytearray(size), opts, 0


class SessionMethods:
    """The batch put and get sessions; MooncakeDistributedStore inherits
    them (their async_ forms run in the executor)."""

    def _table(self, name):
        with self._lock:
            return self.__dict__.setdefault(name, {})

    # ---- put sessions ----

    def batch_put_session_start(self, keys, object_sizes, config=None):
        """Opens a write session of object_sizes[i] bytes per key. A code per
        key: OBJECT_ALREADY_EXISTS (a session of that key is open),
        INVALID_PARAMS (a bad size)."""
        o = _opts(config)
        if type(o) is _Early:
            return [o.value] * len(keys)
        if self._b is None:
            return [STORE_CLOSED] * len(keys)
        if len(keys) != len(object_sizes):
            return [INVALID_PARAMS] * len(keys)
        t = self._table("_put_sessions")
        out = []
        for k, n in zip(keys, object_sizes):
            if type(n) is not int or n < 0:
                out.append(INVALID_PARAMS)
            elif k in t:
                out.append(OBJECT_ALREADY_EXISTS)
            else:
                t[k] = _PutSession(n, o)
                out.append(0)
        return out

    def batch_put_from_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes,
                                           all_dst_offsets):
        """Copies all_sizes[i][j] bytes of registered memory at
        all_buffer_ptrs[i][j] to offset all_dst_offsets[i][j] of key i's
        open session. A code per key: OBJECT_NOT_FOUND (no session),
        INVALID_PARAMS (memory not registered, a range past the object's
        size; the session's end then fails too)."""
        b = self._b
        if b is None:
            return [STORE_CLOSED] * len(keys)
        if not _ranges_ok(keys, all_buffer_ptrs, all_sizes, all_dst_offsets):
            return [INVALID_PARAMS] * len(keys)
        t = self._table("_put_sessions")
        out = []
        for k, ptrs, sizes, offs in zip(keys, all_buffer_ptrs, all_sizes, all_dst_offsets):
            s = t.get(k)
            if s is None:
                out.append(OBJECT_NOT_FOUND)
                continue
            rc = 0
            for p, n, off in zip(ptrs, sizes, offs):
                mv = b.memory(p, n) if type(n) is int and n >= 0 else None
                if mv is None or type(off) is not int or off < 0 or off + n > len(s.buf):
                    rc = INVALID_PARAMS
                    continue
                s.buf[off:off + n] = mv
            s.err = s.err or rc
            out.append(rc)
        return out

    def batch_put_session_end(self, keys):
        """Publishes each key's session (write-once, as put()) and closes
        it. A code per key: OBJECT_NOT_FOUND (no session), the first error
        of its ranges, or put()'s."""
        b = self._b
        t = self._table("_put_sessions")
        out = []
        for k in keys:
            s = t.pop(k, None)
            if b is None:
                out.append(STORE_CLOSED)
            elif s is None:
                out.append(OBJECT_NOT_FOUND)
            else:
                out.append(s.err or b.put(k, s.buf, s.opts, False))
        return out

    def batch_put_session_revoke(self, keys):
        """Drops each key's session, storing nothing. 0 or OBJECT_NOT_FOUND
        per key."""
        t = self._table("_put_sessions")
        return [0 if t.pop(k, None) is not None else OBJECT_NOT_FOUND for k in keys]

    # ---- get sessions ----

    def batch_get_session_start(self, keys):
        """Opens a read session per key, pinning its current version (a
        session already open for the key starts again). 0, or the
        object's code (OBJECT_NOT_FOUND)."""
        b = self._b
        if b is None:
            return [STORE_CLOSED] * len(keys)
        t = self._table("_get_sessions")
        out = []
        for k in keys:
            old = t.pop(k, None)
            if old is not None:
                b.unpin(old)
            r = b.pin(k)
            if isinstance(r, tuple):
                t[k] = r[0]
            out.append(r if isinstance(r, int) else 0)
        return out

    def batch_get_into_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes,
                                           all_src_offsets):
        """Reads all_sizes[i][j] bytes at offset all_src_offsets[i][j] of key
        i into registered memory at all_buffer_ptrs[i][j]. The bytes read per
        key, or a code: OBJECT_NOT_FOUND (no session, or gone),
        INVALID_PARAMS (memory not registered, a range past the end)."""
        b = self._b
        if b is None:
            return [STORE_CLOSED] * len(keys)
        if not _ranges_ok(keys, all_buffer_ptrs, all_sizes, all_src_offsets):
            return [INVALID_PARAMS] * len(keys)
        t = self._table("_get_sessions")
        out = []
        for k, ptrs, sizes, offs in zip(keys, all_buffer_ptrs, all_sizes, all_src_offsets):
            pin = t.get(k)
            total = 0 if pin is not None else OBJECT_NOT_FOUND
            for p, n, off in zip(ptrs, sizes, offs):
                if total < 0:
                    break
                if not all(type(v) is int and v >= 0 for v in (p, n, off)):
                    total = INVALID_PARAMS
                    break
                r = b.pin_read(pin, off, p, n)
                total = r if r < 0 else total + r
            out.append(total)
        return out

    def batch_get_session_end(self, keys):
        """Ends the read sessions of keys (their versions are unpinned); 0,
        also for keys without one."""
        b = self._b
        t = self._table("_get_sessions")
        for k in keys:
            pin = t.pop(k, None)
            if pin is not None and b is not None:
                b.unpin(pin)
        return 0

