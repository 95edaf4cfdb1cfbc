"""Host memory for zero-copy calls: alloc_from_mem_pool(),
MooncakeHostMemAllocator, mooncake.buffer_pool.BufferPool (three modes,
sync and async) and bind_to_numa_node()."""

import asyncio
import ctypes
import os
import threading

import pytest

import mooncake
from mooncake.buffer_pool import BufferPool, RegisteredBufferPool
from mooncake.store import (
    INVALID_PARAMS,
    MooncakeDistributedStore,
    MooncakeHostMemAllocator,
    bind_to_numa_node,
)


def test_alloc_from_mem_pool_is_registered_memory(store):
    p = store.alloc_from_mem_pool(1 << 20)
    assert p and p % 4096 == 0
    ctypes.memmove(p, b"pool bytes", 10)
    assert store.put_from("mp", p, 10) == 0 and store.get("mp") == b"pool bytes"
    q = store.alloc_from_mem_pool(4096)
    assert store.get_into("mp", q, 4096) == 10 and ctypes.string_at(q, 10) == b"pool bytes"
    assert store.alloc_from_mem_pool(0) == 0 and store.alloc_from_mem_pool(-1) == 0


def test_async_alloc_from_mem_pool(store):
    p = asyncio.run(store.async_alloc_from_mem_pool(8192))
    assert p and store.put_from("ap", p, 8192) == 0
    assert MooncakeDistributedStore().alloc_from_mem_pool(4096) == 0  # not set up


def test_host_mem_allocator(store):
    a = MooncakeHostMemAllocator()
    p = a.alloc(3 << 20)
    assert p and p % 4096 == 0 and ctypes.string_at(p, 16) == bytes(16)
    assert store.register_buffer(p, 3 << 20) == 0
    ctypes.memset(p, 7, 100)
    assert store.put_from("ha", p, 100) == 0 and store.get("ha") == b"\7" * 100
    assert store.unregister_buffer(p) == 0
    assert a.free(p) == 0 and a.free(p) == INVALID_PARAMS
    assert a.alloc(0) == 0


def test_buffer_pool_leases(store):
    assert mooncake.BufferPool is BufferPool and mooncake.RegisteredBufferPool is BufferPool
    assert RegisteredBufferPool is BufferPool
    assert store.put("bp", os.urandom(5000)) == 0
    pool = BufferPool(store, max_regions=1)
    with pool.buffer(1 << 16) as lease:
        n = store.get_into("bp", lease.ptr, lease.size)
        assert n == 5000 and bytes(lease.buffer[:n]) == store.get("bp")
        with pytest.raises(RuntimeError):
            pool.acquire(10, block=False)  # max_regions
        with pytest.raises(RuntimeError):
            pool.acquire(10, timeout=0.01)
        with pytest.raises(RuntimeError):
            pool.close()  # a lease is active
    # the memory went back: unregistered
    assert store.get_into("bp", lease.ptr, 1 << 16) == INVALID_PARAMS
    lease2 = pool.acquire(100)
    view = lease2.buffer[:10]
    with pytest.raises(BufferError):
        lease2.release()  # a view still exists
    view.release()
    lease2.release()
    pool.close()
    with pytest.raises(RuntimeError):
        pool.acquire(10)


def test_buffer_pool_waits_for_a_release(store):
    pool = BufferPool(store, max_bytes=4096)
    first = pool.acquire(4096)
    got = []
    t = threading.Thread(target=lambda: got.append(pool.acquire(4096)))
    t.start()
    first.release()
    t.join(30)
    assert len(got) == 1
    got[0].release()
    with pytest.raises(ValueError):
        pool.acquire(8192)  # beyond max_bytes: never fits
    pool.close()


def test_bind_to_numa_node():
    try:
        bind_to_numa_node(0)
    except RuntimeError as e:
        pytest.skip(f"no NUMA here: {e}")
    assert os.sched_getaffinity(0)
    with pytest.raises(ValueError):
        bind_to_numa_node(4096)
