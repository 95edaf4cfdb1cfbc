"""The batch put and get sessions: objects written and read in byte ranges
over several calls (three modes, sync and async)."""

import asyncio
import ctypes
import os
import sys
import threading
import time

from conftest import registered
from mooncake.store import (
    INVALID_PARAMS,
    OBJECT_ALREADY_EXISTS,
    OBJECT_NOT_FOUND,
    STORE_CLOSED,
    MooncakeDistributedStore,
)



def test_put_session_in_ranges(store):
    src, s = registered(store, 8192)
    data = os.urandom(8192)
    ctypes.memmove(s, data, 8192)
    keys = ["ps/a", "ps/b"]
    assert store.batch_put_session_start(keys, [6000, 100]) == [0, 0]
    assert store.batch_put_session_start(["ps/a"], [1]) == [OBJECT_ALREADY_EXISTS]
    # layer by layer: two calls, pieces in any order
    assert store.batch_put_from_multi_buffer_ranges(
        keys, [[s + 3000], [s]], [[3000], [50]], [[3000], [0]]) == [0, 0]
    assert store.is_exist("ps/a") == 0  # nothing visible before the end
    assert store.batch_put_from_multi_buffer_ranges(
        keys, [[s], [s + 50]], [[3000], [50]], [[0], [50]]) == [0, 0]
    assert store.batch_put_session_end(keys) == [0, 0]
    assert store.get("ps/a") == data[:6000] and store.get("ps/b") == data[:100]
    assert store.batch_put_session_end(keys) == [OBJECT_NOT_FOUND] * 2


def test_put_session_errors_and_revoke(store):
    src, s = registered(store, 100)
    plain = (ctypes.c_char * 16)()
    assert store.batch_put_session_start(["pe/x", "pe/y", "pe/z"], [10, 10, -1]) == \
        [0, 0, INVALID_PARAMS]
    assert store.batch_put_from_multi_buffer_ranges(
        ["pe/x", "pe/y", "pe/none"], [[s], [ctypes.addressof(plain)], [s]],
        [[20], [5], [1]], [[0], [0], [0]]) == [INVALID_PARAMS, INVALID_PARAMS, OBJECT_NOT_FOUND]
    assert store.batch_put_session_end(["pe/x"]) == [INVALID_PARAMS]  # its ranges failed
    assert store.batch_put_session_revoke(["pe/y", "pe/y"]) == [0, OBJECT_NOT_FOUND]
    assert store.is_exist("pe/x") == 0 and store.is_exist("pe/y") == 0


def test_get_session_in_ranges(store):
    data = os.urandom(10000)
    assert store.put("gs/a", data) == 0
    dst, d = registered(store, 10000)
    assert store.batch_get_session_start(["gs/a", "gs/none"]) == [0, OBJECT_NOT_FOUND]
    assert store.batch_get_into_multi_buffer_ranges(
        ["gs/a", "gs/none"], [[d, d + 100], [d]], [[100, 900], [1]], [[9000, 0], [0]]) == \
        [1000, OBJECT_NOT_FOUND]
    assert dst.raw[:100] == data[9000:9100] and dst.raw[100:1000] == data[:900]
    assert store.batch_get_into_multi_buffer_ranges(["gs/a"], [[d]], [[100]], [[9950]]) == \
        [INVALID_PARAMS]  # past the end
    assert store.batch_get_into_multi_buffer_ranges(["gs/a"], [[d]], [[-1]], [[0]]) == \
        [INVALID_PARAMS]
    assert store.batch_get_session_end(["gs/a"]) == 0
    assert store.batch_get_into_multi_buffer_ranges(["gs/a"], [[d]], [[1]], [[0]]) == \
        [OBJECT_NOT_FOUND]


def test_async_sessions(store):
    src, s = registered(store, 64)
    ctypes.memmove(s, b"0123456789", 10)

    async def main():
        assert await store.async_batch_put_session_start(["as"], [10]) == [0]
        assert await store.async_batch_put_from_multi_buffer_ranges(
            ["as"], [[s]], [[10]], [[0]]) == [0]
        assert await store.async_batch_put_session_end(["as"]) == [0]
        assert await store.async_batch_get_session_start(["as"]) == [0]
        n = await store.async_batch_get_into_multi_buffer_ranges(["as"], [[s + 20]], [[4]],
                                                                  [[6]])
        assert await store.async_batch_get_session_end(["as"]) == 0
        return n

    assert asyncio.run(main()) == [4] and src.raw[20:24] == b"6789"


def test_sessions_on_a_closed_store():
    s = MooncakeDistributedStore()
    assert s.batch_put_session_start(["k"], [1]) == [STORE_CLOSED]
    assert s.batch_get_session_start(["k"]) == [STORE_CLOSED]
    assert s.batch_put_session_end(["k"]) == [STORE_CLOSED]


def test_get_session_pins_the_version(store):
    assert store.put("gv", b"old" * 100) == 0
    dst, d = registered(store, 300)
    assert store.batch_get_session_start(["gv"]) == [0]
    assert store.upsert("gv", b"new" * 50) == 0  # replaced (and shorter) meanwhile
    assert store.batch_get_into_multi_buffer_ranges(["gv"], [[d]], [[300]], [[0]]) == [300]
    assert dst.raw == b"old" * 100
    assert store.batch_get_session_end(["gv"]) == 0
    assert store.batch_get_session_start(["gv"]) == [0]
    assert store.batch_get_into_multi_buffer_ranges(["gv"], [[d]], [[150]], [[0]]) == [150]
    assert dst.raw[:150] == b"new" * 50
    assert store.remove("gv", force=True) == 0
    # the session's version outlives the remove; close() drops the pin
    assert store.batch_get_into_multi_buffer_ranges(["gv"], [[d]], [[3]], [[0]]) == [3]


def test_a_session_read_racing_its_end_never_reads_another_object(store):
    """One thread reads a get session while another ends it and starts a
    session of another key, over and over: a read finds its own object's
    bytes or no session (OBJECT_NOT_FOUND), never the other key's (the
    mount backend named a session by its file descriptor, which the other
    session's open could take over)."""
    assert store.put("own", b"A" * 16) == 0
    assert store.put("secret", b"S" * 16) == 0
    dst, d = registered(store, 16)
    stop = time.monotonic() + 3
    wrong = []

    def reader():
        while time.monotonic() < stop and not wrong:
            store.batch_get_session_start(["own"])
            r = store.batch_get_into_multi_buffer_ranges(["own"], [[d]], [[16]], [[0]])
            if r == [16] and dst.raw != b"A" * 16:
                wrong.append(dst.raw)

    def other():
        while time.monotonic() < stop and not wrong:
            store.batch_get_session_end(["own"])
            store.batch_get_session_start(["secret"])
            store.batch_get_session_end(["secret"])

    threads = [threading.Thread(target=reader), threading.Thread(target=other)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the threads interleave often
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not wrong, f"a session of 'own' read {wrong[0]!r}"
