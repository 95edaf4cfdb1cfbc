"""Mooncake's scatter/gather zero-copy calls (a mixin of
MooncakeDistributedStore): batch_put_from_multi_buffers() stores each key
as the concatenation of several pieces of caller memory, and
batch_get_into_multi_buffers() reads each object back spread over several
buffers, in order. They are built on the calls above: put_parts() of the
pieces (no joining copy), and reads of each key's pinned version (the
pins of the get sessions), so that one call never mixes two versions."""

from ._errors import BUFFER_OVERFLOW, INVALID_PARAMS, STORE_CLOSED
from ._ops import _Early, _opts


def _shape_ok(keys, all_ptrs, all_sizes):
    return len(keys) == len(all_ptrs) == len(all_sizes) and all(
        isinstance(p, (list, tuple)) and isinstance(z, (list, tuple)) and len(p) == len(z)
        for p, z in zip(all_ptrs, all_sizes))


class BufferMethods:
    """The multi-buffer calls; MooncakeDistributedStore inherits them. Their
    async_ forms run in the executor."""

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=None):
        """Stores keys[i] as the bytes of all_buffer_ptrs[i][0..] (sizes
        all_sizes[i][0..]) one after the other, write-once as put_from().
        A code per key: INVALID_PARAMS for memory that is not registered (or
        a shape that does not match)."""
        o = _opts(config)
        if type(o) is _Early:
            return [o.value] * len(keys)
        b = self._b
        if b is None:
            return [STORE_CLOSED] * len(keys)
        if not _shape_ok(keys, all_buffer_ptrs, all_sizes):
            return [INVALID_PARAMS] * len(keys)
        out = []
        for key, ptrs, sizes in zip(keys, all_buffer_ptrs, all_sizes):
            parts = [b.memory(p, n) if type(n) is int and n >= 0 else None
                     for p, n in zip(ptrs, sizes)]
            out.append(INVALID_PARAMS if None in parts else b.put_parts(key, parts, o, False))
        return out

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes,
                                     prefer_same_node=True):
        """Reads each object into its buffers in order (registered memory):
        the first all_sizes[i][0] bytes into all_buffer_ptrs[i][0], the next
        into the second, and so on. The bytes read per key, or a code:
        OBJECT_NOT_FOUND, BUFFER_OVERFLOW (the object is larger than its
        buffers; nothing is read), INVALID_PARAMS (memory not registered).
        Each key's current version is pinned while its pieces are read, so
        they are all of that one version, whatever writers do meanwhile.
        prefer_same_node is accepted (reads go to the nearest replica
        anyway)."""
        b = self._b
        if b is None:
            return [STORE_CLOSED] * len(keys)
        if not _shape_ok(keys, all_buffer_ptrs, all_sizes):
            return [INVALID_PARAMS] * len(keys)
        out = []
        for key, ptrs, zs in zip(keys, all_buffer_ptrs, all_sizes):
            r = b.pin(key)
            if isinstance(r, int):
                out.append(r)
                continue
            pin, total = r
            try:
                if any(type(z) is not int or z < 0 or type(p) is not int
                       for p, z in zip(ptrs, zs)):
                    out.append(INVALID_PARAMS)
                    continue
                out.append(_read_pinned(b, pin, total, ptrs, zs))
            finally:
                b.unpin(pin)
        return out


def _read_pinned(b, pin, total, ptrs, sizes):
    """Reads the pinned version's total bytes into the pieces in order: total,
    or a code."""
    if total > sum(sizes):
        return BUFFER_OVERFLOW
    at = 0
    for p, z in zip(ptrs, sizes):
        n = min(z, total - at)
        if n <= 0:
            break
        r = b.pin_read(pin, at, p, n)
        if r < 0:
            return r
        at += n
    return total
