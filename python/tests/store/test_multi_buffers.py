"""batch_put_from_multi_buffers() and batch_get_into_multi_buffers():
scatter/gather between registered memory and objects, in the three modes,
sync and async."""

import asyncio
import ctypes
import os

from conftest import registered
from mooncake.store import (
    BUFFER_OVERFLOW,
    INVALID_PARAMS,
    OBJECT_NOT_FOUND,
    STORE_CLOSED,
    UNAVAILABLE_IN_CURRENT_MODE,
    MooncakeDistributedStore,
    ReplicateConfig,
)



def test_gather_put_and_scatter_get(store):
    src, s = registered(store, 3 * 4096)
    data = os.urandom(3 * 4096)
    ctypes.memmove(s, data, len(data))
    # key 0: pieces 2 then 0; key 1: piece 1 split in two
    keys = ["mb/0", "mb/1"]
    ptrs = [[s + 8192, s], [s + 4096, s + 6144]]
    sizes = [[4096, 4096], [2048, 2048]]
    assert store.batch_put_from_multi_buffers(keys, ptrs, sizes) == [0, 0]
    assert store.get("mb/0") == data[8192:] + data[:4096]
    assert store.get("mb/1") == data[4096:8192]
    dst, d = registered(store, 4 * 4096)
    got = store.batch_get_into_multi_buffers(keys, [[d, d + 5000], [d + 10000, d + 13000]],
                                             [[5000, 5000], [3000, 2000]])
    assert got == [8192, 4096]
    assert dst.raw[:8192] == data[8192:] + data[:4096]
    assert dst.raw[10000:13000] == data[4096:7096]
    assert dst.raw[13000:13000 + 1096] == data[7096:8192]  # the rest of the buffer untouched
    assert dst.raw[13000 + 1096:15000] == bytes(2000 - 1096)
    # an object larger than its buffers: nothing is read
    assert store.batch_get_into_multi_buffers(["mb/1"], [[d]], [[100]]) == [BUFFER_OVERFLOW]


def test_errors(store):
    src, s = registered(store, 1024)
    plain = (ctypes.c_char * 64)()
    p = ctypes.addressof(plain)
    assert store.batch_put_from_multi_buffers(["e/0", "e/1"], [[s], [p]], [[10], [10]]) == \
        [0, INVALID_PARAMS]
    assert store.batch_put_from_multi_buffers(["e/2"], [[s, s]], [[10]]) == [INVALID_PARAMS]
    c = ReplicateConfig()
    c.nof_replica_num = 1
    assert store.batch_put_from_multi_buffers(["e/3"], [[s]], [[1]], c) == \
        [UNAVAILABLE_IN_CURRENT_MODE]
    assert store.batch_get_into_multi_buffers(["e/0", "e/none", "e/0"], [[s + 100], [s], [p]],
                                              [[10], [10], [10]]) == \
        [10, OBJECT_NOT_FOUND, INVALID_PARAMS]


def test_async_forms(store):
    src, s = registered(store, 64)
    ctypes.memmove(s, b"abcdefgh", 8)

    async def main():
        rc = await store.async_batch_put_from_multi_buffers(["am"], [[s + 4, s]], [[4, 4]])
        n = await store.async_batch_get_into_multi_buffers(["am"], [[s + 32]], [[8]])
        return rc, n

    assert asyncio.run(main()) == ([0], [8])
    assert src.raw[32:40] == b"efghabcd"


def test_on_a_closed_store():
    s = MooncakeDistributedStore()
    assert s.batch_put_from_multi_buffers(["k"], [[1]], [[1]]) == [STORE_CLOSED]
    assert s.batch_get_into_multi_buffers(["k"], [[1]], [[1]]) == [STORE_CLOSED]


def test_scatter_get_of_a_key_replaced_meanwhile_reads_one_whole_version(store):
    """batch_get_into_multi_buffers() takes each key's size, then reads its
    ranges. A writer that replaces the key with a larger value between the
    two (simulated here: the upsert runs right after the size is taken) must
    not make it report the old size with the first bytes of the new value:
    a mix of the two versions, returned as success. Either version whole
    (both fit the buffers) or an error is right."""
    old, new = b"o" * 4096, b"n" * 8192
    assert store.put("mb/race", old) == 0
    dst, d = registered(store, 8192)
    b = store._b
    real_size = b.size

    def size_then_replaced(key):
        n = real_size(key)
        assert store.upsert("mb/race", new) == 0  # another writer, just now
        return n

    b.size = size_then_replaced
    try:
        got = store.batch_get_into_multi_buffers(["mb/race"], [[d, d + 4096]], [[4096, 4096]])
    finally:
        b.size = real_size
    n = got[0]
    assert n < 0 or dst.raw[:n] in (old, new), \
        f"returned {n} bytes {dst.raw[:n][:8]!r}..., neither version whole"
