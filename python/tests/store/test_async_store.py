"""mooncake.async_store: async_<name> for every method, on both backends
(direct embedded, mount, direct against a master and two nodes; the tests
of the direct backend alone run embedded and against a master and nodes);
native futures (no thread per call), several event loops, cancellation,
close with operations in flight."""

import asyncio
import ctypes
import gc
import inspect
import os
import threading
import time
import weakref
import array

import pytest

from conftest import SEGMENT, addr, numpy_or_skip
from harness import wait_for
from mooncake.async_store import MooncakeDistributedStoreAsync
from mooncake.store import (
    BUFFER_OVERFLOW,
    INVALID_KEY,
    NO_AVAILABLE_HANDLE,
    OBJECT_HAS_LEASE,
    OBJECT_NOT_FOUND,
    STORE_CLOSED,
    MooncakeDistributedStore,
    ReplicateConfig,
)


def wait_none_in_flight(s):
    """Waits (bounded) until s has no group in flight on the C side. A
    group's result reaches its future (through the completer) just before
    the C thread stops counting it (group_done()), so a check right after
    the result may still see it for a moment."""
    wait_for(lambda: s._b.inflight() == 0, "nothing in flight on the C side", timeout=5,
             step=0.001)


def os_threads():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads: line")


def test_every_method_has_an_async_twin():
    public = [n for n, v in vars(MooncakeDistributedStore).items()
              if not n.startswith("_") and callable(v)]
    assert len(public) >= 30
    for name in public:
        fn = getattr(MooncakeDistributedStoreAsync, "async_" + name)
        assert inspect.iscoroutinefunction(fn), name
    s = MooncakeDistributedStoreAsync()
    with pytest.raises(AttributeError):
        s.async_no_such_method
    assert issubclass(MooncakeDistributedStoreAsync, MooncakeDistributedStore)


@pytest.mark.asyncio
async def test_async_methods_return_what_sync_ones_do(store):
    s = store
    assert await s.async_put("k", b"v1") == 0
    assert await s.async_put("k", b"v2") == 0  # write-once
    assert await s.async_get("k") == b"v1"
    assert await s.async_upsert("k", b"v3") == 0
    assert await s.async_get("k") == b"v3"
    assert await s.async_get("missing") == b""
    assert await s.async_put_parts("parts", b"a", b"b", b"c") == 0
    assert await s.async_upsert_parts("parts", b"x", b"y") == 0
    assert await s.async_get("parts") == b"xy"
    assert await s.async_put_batch(["b1", "b2"], [b"1", b"22"]) == 0
    assert await s.async_upsert_batch(["b1"], [b"one"]) == 0
    assert await s.async_get_batch(["b1", "b2", "nope"]) == [b"one", b"22", b""]
    buf = await s.async_get_buffer("b2")
    assert bytes(memoryview(buf)) == b"22"
    assert await s.async_get_buffer("nope") is None
    bufs = await s.async_batch_get_buffer(["b1", "nope"])
    assert bytes(bufs[0]) == b"one" and bufs[1] is None
    assert await s.async_is_exist("k") == 1 and await s.async_is_exist("nope") == 0
    assert await s.async_batch_is_exist(["k", "nope"]) == [1, 0]
    assert await s.async_get_size("b2") == 2
    assert await s.async_get_size("nope") == OBJECT_NOT_FOUND
    src, dst = bytearray(b"0123456789"), bytearray(10)
    assert await s.async_register_buffer(addr(src), 10) == 0
    assert await s.async_register_buffer(addr(dst), 10) == 0
    assert await s.async_put_from("f", addr(src), 4) == 0
    assert await s.async_upsert_from("f", addr(src) + 4, 3) == 0
    assert await s.async_batch_put_from(["f1", "f2"], [addr(src), addr(src) + 5], [5, 5]) == [0, 0]
    assert await s.async_batch_upsert_from(["f1"], [addr(src) + 9], [1]) == [0]
    assert await s.async_get_into("f", addr(dst), 10) == 3 and dst[:3] == b"456"
    assert await s.async_batch_get_into(["f1", "f2"], [addr(dst), addr(dst) + 5],
                                        [5, 5]) == [1, 5]
    assert dst == b"956" + bytes(2) + b"56789"
    assert await s.async_get_into("f2", addr(dst), 2) == BUFFER_OVERFLOW
    r = await s.async_get_into_ranges([addr(dst)], [["f2"]], [[[0]]], [[[1]]], [[[3]]])
    assert r == [[[3]]] and dst[:3] == b"678"
    assert await s.async_unregister_buffer(addr(src)) == 0
    assert await s.async_unregister_buffer(addr(dst)) == 0
    # Reads above hold read leases on the direct backend: removal needs force.
    assert await s.async_remove("k", force=True) == 0
    assert await s.async_remove("k") == OBJECT_NOT_FOUND
    assert await s.async_batch_remove(["b1", "nope"], force=True) == [0, OBJECT_NOT_FOUND]
    assert await s.async_remove_by_regex("^f", force=True) == 3
    assert await s.async_remove_all(force=True) == 2  # b2, parts
    assert await s.async_put("", b"v") == INVALID_KEY
    assert await s.async_put("huge", bytes(SEGMENT + 4096)) == NO_AVAILABLE_HANDLE
    assert await s.async_put("pinned", b"p", ReplicateConfig(with_hard_pin=True)) == 0
    assert await s.async_health_check() == 0
    assert await s.async_get_hostname() == s.get_hostname()
    assert await s.async_close() == 0
    assert await s.async_close() == 0
    assert await s.async_get("pinned") == b""
    assert await s.async_put("x", b"y") == STORE_CLOSED
    assert await s.async_batch_is_exist(["x", "y"]) == [STORE_CLOSED] * 2
    assert await s.async_health_check() == 1


@pytest.mark.asyncio
async def test_1000_concurrent_async_gets_on_a_fixed_thread_count(store):
    s = store
    keys = [f"c/{i}" for i in range(1000)]
    values = [os.urandom(i % 700 + (8192 if i % 10 == 0 else 0)) for i in range(1000)]
    assert await s.async_put_batch(keys, values) == 0
    await s.async_get("c/0")  # attach to this loop (direct) / start its FileReader (mount)
    py_before, os_before = threading.active_count(), os_threads()
    seen = []

    async def sample():
        while True:
            seen.append((threading.active_count(), os_threads()))
            await asyncio.sleep(0)

    sampler = asyncio.ensure_future(sample())
    for _ in range(3):
        got = await asyncio.gather(*[s.async_get(k) for k in keys])
        assert got == values
    sampler.cancel()
    assert seen
    if s.backend == "direct":
        # Native futures: not one thread more, not even briefly.
        assert all(p == py_before and o == os_before for p, o in seen), (py_before, os_before,
                                                                           seen[:5])
    else:
        # The mount backend's gets: on the C threads of the loop's
        # FileReader, which the first get started; not one thread more.
        assert all(p <= py_before and o <= os_before for p, o in seen), (py_before, os_before,
                                                                          seen[:5])
    assert threading.active_count() <= py_before + (0 if s.backend == "direct" else 32)


@pytest.mark.asyncio
async def test_concurrent_mixed_operations(direct_store):
    s = direct_store

    async def one(i):
        k = f"m/{i}"
        assert await s.async_put(k, k.encode() * 100) == 0
        assert await s.async_is_exist(k) == 1
        assert await s.async_get(k) == k.encode() * 100
        assert await s.async_upsert(k, b"z") == 0
        assert await s.async_remove(k, force=True) == 0
        return i

    assert await asyncio.gather(*[one(i) for i in range(500)]) == list(range(500))
    wait_none_in_flight(s)


def test_one_store_from_several_event_loops(store):
    s = store
    assert s.put("shared", b"value") == 0

    async def reads(n):
        return await asyncio.gather(*[s.async_get("shared") for _ in range(n)])

    # One loop after another (asyncio.run makes and closes a loop each time).
    for _ in range(3):
        assert asyncio.run(reads(50)) == [b"value"] * 50
    # Several loops at once, in threads.
    results, errors = [], []

    def run_loop():
        try:
            results.append(asyncio.run(reads(200)))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run_loop) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results == [[b"value"] * 200] * 4
    wait_none_in_flight(s)


@pytest.mark.asyncio
async def test_cancel_never_frees_a_buffer_in_use(direct_store):
    s = direct_store
    data = os.urandom(8 << 20)
    assert s.put("big", data) == 0
    target = array.array("B", bytes(len(data)))
    gone = weakref.ref(target)
    coro = s.async_get_into("big", target)
    fut = coro.send(None)  # submitted; the loop has not run since
    assert isinstance(fut, asyncio.Future)
    coro.close()
    fut.cancel()
    del target, coro
    gc.collect()
    # The operation still holds the target: it may still be writing into it.
    assert gone() is not None
    for _ in range(100):
        await asyncio.sleep(0.01)
        gc.collect()
        if gone() is None:
            break
    assert gone() is None  # released once the operation completed
    wait_none_in_flight(s)
    # A cancelled task behaves the same way, and the store carries on.
    t = asyncio.ensure_future(s.async_get("big"))
    await asyncio.sleep(0)
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    assert await s.async_get("big") == data


@pytest.mark.asyncio
async def test_unregister_during_an_operation_keeps_the_memory(direct_store):
    s = direct_store
    data = os.urandom(4 << 20)
    assert s.put("k", data) == 0
    target = bytearray(len(data))
    assert s.register_buffer(target) == 0
    pending = asyncio.ensure_future(s.async_get_into("k", addr(target), len(target)))
    await asyncio.sleep(0)
    assert s.unregister_buffer(addr(target)) == 0
    assert s.get_into("k", addr(target), len(target)) < 0  # no longer registered
    assert await pending == len(data) and target == data


@pytest.mark.asyncio
async def test_unregister_after_a_cancelled_get_into_waits_for_its_write(cluster_store):
    """A cancelled async_get_into() into an int address goes on in the
    library. unregister_buffer() says that operations already using the
    buffer finish first, and once it returned the caller may free or reuse
    the memory (BufferPool's Lease.release() unmaps it there): the store
    must not write into it afterwards."""
    s = cluster_store
    n = 1 << 20
    assert s.put("k", b"\xab" * n) == 0
    buf = (ctypes.c_char * n)()
    p = ctypes.addressof(buf)
    assert s.register_buffer(p, n) == 0
    s.cluster.master.pause()  # the get stays in flight
    try:
        t = asyncio.ensure_future(s.async_get_into("k", p, n))
        await until(lambda: s._b.inflight() > 0, "the get to go out")
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert s.unregister_buffer(p) == 0
        ctypes.memset(p, 0, n)  # the caller's memory again
    finally:
        s.cluster.master.resume()
    wait_for(lambda: not s._b.inflight(), "the get to end", timeout=10, step=0.01)
    assert buf.raw.count(b"\xab") == 0, \
        "the store wrote into the buffer after unregister_buffer() returned"


async def until(cond, what, timeout=10):
    """Yields to the event loop until cond() holds; fails saying what it
    waited for after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0)


@pytest.mark.asyncio
async def test_unregister_during_a_mount_read_keeps_the_memory(mount_store):
    """The mount backend reads into registered memory on a thread of its
    own: unregistered meanwhile and dropped by the caller, that memory must
    stay the read's until it ends (as the direct backend keeps it), never
    be handed to another object while the kernel still writes into it."""
    s = mount_store
    n = 64 << 20
    assert s.put("big", b"\xab" * n) == 0
    for _ in range(10):
        target = bytearray(n)
        assert s.register_buffer(target) == 0
        pending = asyncio.ensure_future(s.async_get_into("big", addr(target), n))
        await asyncio.sleep(0)  # a yield: the call queues its read
        await until(lambda: s._b._offload._jobs.empty() or pending.done(),
                    "an offload thread to take the read")  # the read is under way
        assert s.unregister_buffer(addr(target)) == 0
        del target
        gc.collect()
        other = bytearray(n)  # the same size: most likely the same memory
        # A read that began before the unregister reads it all; one that
        # began after finds the memory unregistered.
        r = await pending
        assert r == n or r < 0, r
        assert other.count(0xab) == 0, "the read landed in memory freed under it"


def test_a_loop_closed_with_a_call_in_flight_lets_go_of_its_buffer(cluster_store):
    """An event loop that ends while one of its calls is in flight (an
    asyncio.run() that returns first): the call's end finds nobody to tell,
    and the store lets go of what it held, the caller's buffer among them,
    by the time the store closes, so that the buffer can be resized again
    (it stayed exported for ever, the call's state never freed)."""
    s = cluster_store
    assert s.put("k", b"v" * 100) == 0
    buf = bytearray(100)

    async def first():
        asyncio.ensure_future(s.async_get_into("k", buf))
        await until(lambda: s._b.inflight() > 0, "the get to go out")

    async def second():
        return await s.async_get_size("nokey")

    s.cluster.master.pause()  # the get stays in flight
    try:
        asyncio.run(first())  # its loop closes with the get in flight
        asyncio.run(second())  # a new loop: the closed one's state is dropped
    finally:
        s.cluster.master.resume()
    wait_for(lambda: not s._b.inflight(), "the get to end", timeout=10, step=0.01)
    assert s.close() == 0
    buf.extend(b"x")  # BufferError while an export of it is held


@pytest.mark.asyncio
async def test_close_waits_for_operations_in_flight(direct_store):
    s = direct_store
    value = os.urandom(1 << 20)
    keys = [f"w/{i}" for i in range(64)]
    assert s.put_batch(keys, [value] * 64) == 0
    tasks = [asyncio.ensure_future(s.async_get(k)) for k in keys]
    await asyncio.sleep(0)  # every get is submitted
    assert s.close() == 0
    results = await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert results == [value] * 64
    assert await s.async_get(keys[0]) == b""


@pytest.mark.asyncio
async def test_async_with_closes_the_store(store):
    async with store as s:
        assert await s.async_put("k", b"v") == 0
        assert await s.async_get("k") == b"v"
    assert store.health_check() == 1
    assert await store.async_get("k") == b""


@pytest.mark.asyncio
async def test_async_get_into_numpy_in_place(store):
    numpy = numpy_or_skip()
    v = numpy.arange(4096, dtype=numpy.int64)
    assert await store.async_put("np", memoryview(v).cast("B")) == 0
    out = numpy.zeros_like(v)
    assert await store.async_register_buffer(out.ctypes.data, out.nbytes) == 0
    assert await store.async_get_into("np", out.ctypes.data, out.nbytes) == out.nbytes
    assert numpy.array_equal(out, v)
    buf = await store.async_get_buffer("np")
    view = numpy.frombuffer(buf, dtype=numpy.int64)
    assert numpy.array_equal(view, v) and view.ctypes.data == buf.ptr()


@pytest.mark.asyncio
async def test_async_lease_codes(make_store, direct_mode):
    s = make_store(direct_mode, lease_ms=60_000)
    assert await s.async_put("k", b"v") == 0
    assert await s.async_get("k") == b"v"
    assert await s.async_remove("k") == OBJECT_HAS_LEASE
    assert await s.async_batch_remove(["k"]) == [OBJECT_HAS_LEASE]
    assert await s.async_remove("k", force=True) == 0


@pytest.mark.asyncio
async def test_not_set_up_async_store():
    s = MooncakeDistributedStoreAsync()
    assert await s.async_get("k") == b""
    assert await s.async_get_buffer("k") is None
    assert await s.async_put("k", b"v") == STORE_CLOSED
    assert await s.async_remove_all() == STORE_CLOSED
    assert await s.async_setup({"global_segment_size": "16MB"}) == 0
    assert await s.async_put("k", b"v") == 0 and await s.async_get("k") == b"v"
    assert await s.async_close() == 0


@pytest.mark.asyncio
async def test_mount_calls_cancelled_or_failing_leave_the_others_alone(mount_store):
    s = mount_store
    assert await s.async_put("k", b"v") == 0
    gets = [asyncio.ensure_future(s.async_get("k")) for _ in range(100)]
    for g in gets[::2]:
        g.cancel()
    done = await asyncio.gather(*gets, return_exceptions=True)
    assert all(isinstance(d, asyncio.CancelledError) for d in done[::2])
    assert done[1::2] == [b"v"] * 50
    with pytest.raises(TypeError):  # raised in the backend's thread, as the sync call does
        await s.async_get(3.5)
    assert await s.async_get("k") == b"v"


@pytest.mark.asyncio
async def test_mount_async_get_reads_every_size_and_kind_of_file(mount_store):
    """The mount backend's async_get reads files on threads of its own
    (FileReader): files on both sides of its 64 KiB line (a large one is
    measured, then read into its bytes object) come back whole, many at
    once; what is not a regular file reads as missing (b""), a FIFO without
    blocking, as get() does."""
    s = mount_store
    sizes = [0, 1, 4095, 65535, 65536, 65537, (1 << 20) + 3]
    values = {f"sz/{n}": os.urandom(n) for n in sizes}
    for k, v in values.items():
        assert await s.async_put(k, v) == 0
    keys = list(values) * 8
    got = await asyncio.gather(*[s.async_get(k) for k in keys])
    assert [len(g) for g in got] == [len(values[k]) for k in keys]
    assert got == [values[k] for k in keys]
    # A batch's gets run at once too, in the batch's order.
    assert await s.async_get_batch(keys + ["a//b", "missing"]) == got + [b"", b""]
    with pytest.raises(TypeError):
        await s.async_get_batch(["sz/1", 3.5])
    root = s.daemon.path
    os.mkdir(os.path.join(root, "adir"))
    os.mkfifo(os.path.join(root, "fifo"))
    os.symlink("sz/1", os.path.join(root, "link"))
    for k in ("missing", "adir", "fifo", "link", "sz"):
        assert await s.async_get(k) == s.get(k) == b"", k


@pytest.mark.asyncio
async def test_mount_async_close_resolves_gets_in_flight(mount_store):
    """Closing the mount backend with async gets in flight (large and small)
    lets them finish: each resolves with the file's bytes, none hangs."""
    s = mount_store
    big, small = os.urandom(300_000), b"s" * 100
    assert await s.async_put("big", big) == 0
    assert await s.async_put("small", small) == 0
    b = s._b
    # The backend's own calls: each is queued on the reader when it returns.
    gets = [b.a_get("big" if i % 4 == 0 else "small") for i in range(200)]
    assert await s.async_close() == 0
    done = await asyncio.wait_for(asyncio.gather(*gets), timeout=60)
    assert done == [big if i % 4 == 0 else small for i in range(200)]
    # A get that raced close() into the backend is read on the spot; no
    # reader (and no thread) is made for it.
    threads = os_threads()
    assert await b.a_get("small") == small
    assert len(b._readers) == 0 and os_threads() == threads
