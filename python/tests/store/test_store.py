"""mooncake.store: every method of MooncakeDistributedStore, on both backends
(the `store` fixture runs each test once per mode: direct embedded, mount,
and direct against a master and two nodes; a test of the direct backend
alone, through `direct_store` or `direct_mode`, runs embedded and against a
master and two nodes; see conftest.py)."""

import os
import threading

import pytest

from conftest import SEGMENT, addr, numpy_or_skip
from mooncake import _errors, _store
from mooncake.store import (
    BUFFER_OVERFLOW,
    INVALID_KEY,
    INVALID_PARAMS,
    NO_AVAILABLE_HANDLE,
    OBJECT_HAS_LEASE,
    OBJECT_NOT_FOUND,
    RPC_FAIL,
    STORE_CLOSED,
    UNAVAILABLE_IN_CURRENT_STATUS,
    MooncakeDistributedStore,
    ReplicateConfig,
    SoftPinAction,
)


def test_network_errors_are_rpc_fail_on_both_backends():
    import errno
    for e in (errno.ECONNREFUSED, errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENETUNREACH,
              errno.ECONNRESET, errno.ECONNABORTED, errno.ENOTCONN, errno.EPIPE, errno.EPROTO):
        assert _store.to_code(-e) == RPC_FAIL, errno.errorcode[e]
        assert _errors.from_oserror(OSError(e, "x")) == RPC_FAIL, errno.errorcode[e]
    for e, code in _errors._ERRNO.items():
        if e not in (errno.EISDIR, errno.ENOTDIR):  # mount-only meanings
            assert _store.to_code(-e) == code, errno.errorcode[e]


def test_codes_match_mooncake_and_the_extension():
    expected = {"OBJECT_NOT_FOUND": -704, "OBJECT_ALREADY_EXISTS": -705, "OBJECT_HAS_LEASE": -706,
                "NO_AVAILABLE_HANDLE": -200, "INVALID_PARAMS": -600, "INVALID_KEY": -400,
                "RPC_FAIL": -900, "BUFFER_OVERFLOW": -10, "INTERNAL_ERROR": -1,
                "UNAVAILABLE_IN_CURRENT_STATUS": -1010, "UNAVAILABLE_IN_CURRENT_MODE": -1011}
    import mooncake.store as ms
    for name, value in expected.items():
        assert getattr(_errors, name) == value
        assert getattr(_store, name) == value
        assert getattr(ms, name) == value
        assert ms.ErrorCode[name] == value


# ---- setup ----


@pytest.mark.parametrize("size", [SEGMENT, "64MB", "64 MB", "64MiB", " 64 mb "])
def test_setup_sizes_as_int_or_string(size):
    s = MooncakeDistributedStore()
    assert s.setup("localhost", "", size, "16MB", "tcp", "", "") == 0
    assert s.put("k", b"v") == 0 and s.get("k") == b"v"
    assert s.close() == 0


@pytest.mark.parametrize("size", ["50%", "lots", "-1", -1, 1.5, "16 XB", True])
def test_setup_rejects_invalid_sizes(size):
    s = MooncakeDistributedStore()
    assert s.setup({"global_segment_size": size}) == INVALID_PARAMS
    assert s.health_check() == 1
    assert s.setup({"local_buffer_size": size}) == INVALID_PARAMS


def test_setup_forms_positional_keyword_dict():
    a = MooncakeDistributedStore()
    assert a.setup("hostA", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", "") == 0
    assert a.get_hostname() == "hostA"
    b = MooncakeDistributedStore()
    assert b.setup(local_hostname="hostB", metadata_server="", global_segment_size="16MB",
                   local_buffer_size="16MB", protocol="tcp", rdma_devices="",
                   master_server_addr="embedded") == 0
    c = MooncakeDistributedStore()
    assert c.setup({"local_hostname": "hostC", "global_segment_size": "16 MB",
                    "master_server_address": ""}) == 0
    for s, name in ((a, "hostA"), (b, "hostB"), (c, "hostC")):
        assert s.backend == "direct" and s.health_check() == 0
        assert s.put(name, name.encode()) == 0 and s.get(name) == name.encode()
        assert s.close() == 0
    # Each setup opened its own store.
    d = MooncakeDistributedStore()
    assert d.setup({}) == 0 and d.get("hostA") == b"" and d.close() == 0


def test_setup_with_an_unreachable_master_fails_cleanly():
    # Loopback only: nobody listens on port 1.
    s = MooncakeDistributedStore()
    assert s.setup("localhost", "P2PHANDSHAKE", "16MB", "16MB", "tcp", "",
                   "127.0.0.1:1") == RPC_FAIL
    assert s.health_check() == 1 and s.get("k") == b""


def test_setup_rejects_unknown_options_and_a_second_setup(direct_store):
    assert MooncakeDistributedStore().setup({"global_segment_sise": "1GB"}) == INVALID_PARAMS
    assert MooncakeDistributedStore().setup({"lease_ms": "soon"}) == INVALID_PARAMS
    assert direct_store.setup({}) == UNAVAILABLE_IN_CURRENT_STATUS
    assert direct_store.health_check() == 0


def test_setup_mount_point_must_be_a_mount(tmp_path):
    s = MooncakeDistributedStore()
    assert s.setup({"mount_point": str(tmp_path / "nowhere")}) == INVALID_PARAMS
    assert s.setup({"mount_point": str(tmp_path)}) != 0  # a plain directory
    assert s.health_check() == 1


def test_health_check_and_hostname(store):
    assert store.health_check() == 0
    assert store.get_hostname()
    assert store.close() == 0
    assert store.health_check() == 1 and store.get_hostname() == ""


def test_mount_health_check_reports_a_lost_daemon(mount_store):
    mount_store.daemon.stop()
    assert mount_store.health_check() == 2


# ---- put / get ----


def test_put_get_roundtrip_str_and_bytes_keys(store):
    assert store.put("alpha", b"one") == 0
    assert store.put(b"beta", bytearray(b"two")) == 0
    assert store.put("dir/gamma", memoryview(b"three")) == 0
    assert store.put("empty", b"") == 0
    assert store.get("alpha") == b"one"
    assert store.get(b"alpha") == b"one"
    assert store.get("beta") == b"two"
    assert store.get("dir/gamma") == b"three"
    assert store.get("empty") == b"" and store.is_exist("empty") == 1
    big = os.urandom(3 << 20)
    assert store.put("big", big) == 0
    assert store.get("big") == big
    assert type(store.get("big")) is bytes


def test_get_miss_returns_empty_bytes(store):
    assert store.get("missing") == b""
    assert store.get_batch(["missing", "missing2"]) == [b"", b""]
    assert store.get_buffer("missing") is None


def test_double_put_keeps_the_first_value_upsert_replaces(store):
    assert store.put("k", b"first") == 0
    assert store.put("k", b"second, longer") == 0
    assert store.get("k") == b"first"
    assert store.upsert("k", b"third") == 0
    assert store.get("k") == b"third"
    assert store.upsert("new", b"n") == 0 and store.get("new") == b"n"


def test_put_parts_and_upsert_parts(store):
    assert store.put_parts("p", b"Hello, ", bytearray(b"World"), memoryview(b"!")) == 0
    assert store.get("p") == b"Hello, World!"
    assert store.put_parts("p", b"x") == 0 and store.get("p") == b"Hello, World!"
    assert store.upsert_parts("p", b"a", b"b") == 0 and store.get("p") == b"ab"


def test_put_batch_get_batch_upsert_batch(store):
    keys = [f"b/{i}" for i in range(50)]
    values = [os.urandom(i * 37) for i in range(50)]
    assert store.put_batch(keys, values) == 0
    assert store.get_batch(keys) == values
    assert store.put_batch(keys[:2], [b"no", b"no"]) == 0
    assert store.get_batch(keys[:2]) == values[:2]
    assert store.upsert_batch(keys[:2], [b"y0", b"y1"]) == 0
    assert store.get_batch(keys[:3]) == [b"y0", b"y1", values[2]]
    assert store.put_batch(["a", "b"], [b"1"]) == INVALID_PARAMS
    assert store.put_batch(["ok", ""], [b"1", b"2"]) == INVALID_KEY


def test_get_buffer_exposes_the_bytes_without_copy(store):
    data = os.urandom(100_000)
    assert store.put("buf", data) == 0
    b = store.get_buffer("buf")
    assert len(b) == b.size() == len(data)
    m1, m2 = memoryview(b), memoryview(b)
    assert m1.nbytes == len(data) and bytes(m1) == data
    # Both views are the Buffer's own memory, at b.ptr(): no copy per view.
    assert addr(m1) == addr(m2) == b.ptr()
    m1[0] = m1[0] ^ 0xFF
    assert m2[0] == data[0] ^ 0xFF
    # Changing the Buffer does not change the store.
    assert store.get("buf") == data


def test_batch_get_buffer(store):
    assert store.put("x1", b"one") == 0 and store.put("x2", b"") == 0
    bufs = store.batch_get_buffer(["x1", "nope", "x2"])
    assert bytes(bufs[0]) == b"one" and bufs[1] is None and bytes(bufs[2]) == b""


# ---- registered buffers, put_from, get_into ----


def test_get_into_bytearray_in_place(store):
    data = os.urandom(10_000)
    assert store.put("k", data) == 0
    target = bytearray(16_384)
    p = addr(target)
    assert store.register_buffer(p, len(target)) == 0
    assert store.get_into("k", p, len(target)) == len(data)
    assert target[:len(data)] == data and target[len(data):] == bytes(16_384 - len(data))
    assert addr(target) == p  # the same memory, written in place
    # A buffer object is accepted directly (no registration needed).
    other = bytearray(len(data))
    assert store.get_into("k", other) == len(data) and other == data
    assert store.unregister_buffer(p) == 0


def test_get_into_numpy_array_in_place(store):
    numpy = numpy_or_skip()
    values = numpy.arange(1000, dtype=numpy.float32)
    assert store.put("np", values.tobytes()) == 0
    out = numpy.zeros(1000, dtype=numpy.float32)
    ptr = out.ctypes.data
    assert store.register_buffer(ptr, out.nbytes) == 0
    assert store.get_into("np", ptr, out.nbytes) == out.nbytes
    assert out.ctypes.data == ptr and numpy.array_equal(out, values)
    out2 = numpy.zeros(1000, dtype=numpy.float32)
    assert store.get_into("np", out2) == out2.nbytes and numpy.array_equal(out2, values)
    assert store.unregister_buffer(ptr) == 0


def test_get_into_rejects_unregistered_memory(store):
    assert store.put("k", b"data") == 0
    target = bytearray(64)
    p = addr(target)
    assert store.get_into("k", p, 64) == INVALID_PARAMS
    assert store.register_buffer(p, 32) == 0
    assert store.get_into("k", p, 64) == INVALID_PARAMS  # runs past the registration
    assert store.get_into("k", p + 16, 16) == 4
    assert store.register_buffer(p, 32) == INVALID_PARAMS  # already registered
    assert store.unregister_buffer(p) == 0
    assert store.unregister_buffer(p) == INVALID_PARAMS
    assert store.get_into("k", p, 32) == INVALID_PARAMS
    assert store.register_buffer(0, 10) == INVALID_PARAMS
    assert store.put_from("k2", p, 4) == INVALID_PARAMS


def test_get_into_buffer_too_small_is_not_written(store):
    assert store.put("k", b"0123456789") == 0
    target = bytearray(b"x" * 8)
    assert store.register_buffer(addr(target), 8) == 0
    assert store.get_into("k", addr(target), 8) == BUFFER_OVERFLOW
    assert target == b"x" * 8
    assert store.get_into("missing", addr(target), 8) == OBJECT_NOT_FOUND
    assert store.get_into("k", bytearray(4)) == BUFFER_OVERFLOW


def test_put_from_upsert_from_batch_put_from_batch_get_into(store):
    src = bytearray(os.urandom(4096))
    dst = bytearray(4096)
    ps, pd = addr(src), addr(dst)
    assert store.register_buffer(ps, len(src)) == 0
    assert store.register_buffer(pd, len(dst)) == 0
    assert store.put_from("f", ps, 1000) == 0
    assert store.get("f") == bytes(src[:1000])
    assert store.put_from("f", ps + 1000, 10) == 0 and store.get("f") == bytes(src[:1000])
    assert store.upsert_from("f", ps + 1000, 10) == 0 and store.get("f") == bytes(src[1000:1010])
    keys = ["g0", "g1", "g2"]
    assert store.batch_put_from(keys, [ps, ps + 100, ps + 200], [100, 100, 100]) == [0, 0, 0]
    assert store.batch_upsert_from(keys[:1], [ps + 300], [5]) == [0]
    got = store.batch_get_into(keys + ["nope"], [pd, pd + 100, pd + 200, pd + 300],
                               [100, 100, 100, 100])
    assert got == [5, 100, 100, OBJECT_NOT_FOUND]
    assert dst[:5] == src[300:305] and dst[100:300] == src[100:300]
    assert store.batch_get_into(keys, [pd], [1]) == [INVALID_PARAMS] * 3
    assert store.unregister_buffer(ps) == 0 and store.unregister_buffer(pd) == 0


def test_register_buffer_object_keeps_it_alive(store):
    target = bytearray(256)
    assert store.register_buffer(target) == 0
    assert store.put("k", b"abc") == 0
    assert store.get_into("k", addr(target), 256) == 3 and target[:3] == b"abc"
    assert store.unregister_buffer(addr(target)) == 0


def test_reads_never_write_into_a_registered_bytes_object(store):
    """A bytes object may be registered (put_from() reads it), but it is
    immutable: a read into its int address (get_into, get_into_ranges,
    batch_get_into_multi_buffers) must be refused with INVALID_PARAMS, as
    for memory that is not registered, and leave the bytes as they were."""
    import ctypes
    value = bytes(64) + os.urandom(4000)  # a new object of its own
    before = bytes(bytearray(value))
    p = ctypes.cast(ctypes.c_char_p(value), ctypes.c_void_p).value
    assert store.register_buffer(value) == 0
    assert store.put_from("src", p, len(value)) == 0  # reading it is fine
    assert store.upsert("k", b"x" * 64) == 0
    assert store.get_into("k", p, 64) == INVALID_PARAMS
    assert store.get_into_ranges([p], [["k"]], [[[0]]], [[[0]]], [[[64]]]) == \
        [[[INVALID_PARAMS]]]
    assert store.batch_get_into_multi_buffers(["k"], [[p]], [[64]]) == [INVALID_PARAMS]
    assert value == before, "a read wrote into an immutable bytes object"
    assert store.unregister_buffer(p) == 0


def test_get_into_ranges(store):
    assert store.put("key1", bytes(range(40))) == 0
    assert store.put("key2", bytes(range(100, 140))) == 0
    b0, b1 = bytearray(32), bytearray(32)
    p0, p1 = addr(b0), addr(b1)
    assert store.register_buffer(p0, 32) == 0 and store.register_buffer(p1, 32) == 0
    results = store.get_into_ranges(
        [p0, p1],
        [["key1", "key2"], ["key2", "key1"]],
        [[[0, 20], [8]], [[4], [16]]],
        [[[1, 30], [2]], [[0], [10]]],
        [[[4, 3], [5]], [[6], [4]]],
    )
    assert results == [[[4, 3], [5]], [[6], [4]]]
    assert b0[0:4] == bytes(range(1, 5)) and b0[20:23] == bytes(range(30, 33))
    assert b0[8:13] == bytes(range(102, 107))
    assert b1[4:10] == bytes(range(100, 106)) and b1[16:20] == bytes(range(10, 14))
    # Per-fragment failures: a missing key, a range past the end, bad shapes.
    r = store.get_into_ranges([p0], [["nope", "key1"]], [[[0], [0]]], [[[0], [38]]],
                              [[[1], [4]]])
    assert r == [[[OBJECT_NOT_FOUND], [INVALID_PARAMS]]]
    r = store.get_into_ranges([p0], [["key1"]], [[[0, 1]]], [[[0]]], [[[1, 1]]])
    assert r == [[[INVALID_PARAMS, INVALID_PARAMS]]]


# ---- existence, size, removal ----


def test_is_exist_batch_is_exist_get_size(store):
    assert store.put("e", b"12345") == 0
    assert store.is_exist("e") == 1 and store.is_exist("nope") == 0
    assert store.batch_is_exist(["e", "nope", "e"]) == [1, 0, 1]
    assert store.get_size("e") == 5
    assert store.get_size("nope") == OBJECT_NOT_FOUND


def test_remove_and_batch_remove(store):
    assert store.put("r1", b"1") == 0 and store.put("r2", b"2") == 0
    assert store.remove("r1") == 0
    assert store.remove("r1") == OBJECT_NOT_FOUND
    assert store.is_exist("r1") == 0 and store.get("r1") == b""
    assert store.batch_remove(["r2", "r1"]) == [0, OBJECT_NOT_FOUND]


def test_remove_by_regex_and_remove_all(store):
    for k in ("user_session_1", "user_session_2", "other", "nested/user_session_3"):
        assert store.put(k, b"v") == 0
    assert store.remove_by_regex("^user_session_.*") == 2
    assert store.is_exist("other") == 1 and store.is_exist("nested/user_session_3") == 1
    assert store.remove_by_regex("user_session_") == 1
    assert store.remove_by_regex("([") == INVALID_PARAMS
    assert store.put("last", b"v") == 0
    assert store.remove_all() == 2
    assert store.remove_all() == 0
    assert store.get("other") == b"" and store.get("last") == b""


def test_removal_under_lease_needs_force(make_store, direct_mode):
    s = make_store(direct_mode, lease_ms=60_000)
    assert s.put("leased", b"v") == 0
    assert s.remove("fresh-never-read") == OBJECT_NOT_FOUND
    assert s.get("leased") == b"v"  # grants a read lease
    assert s.remove("leased") == OBJECT_HAS_LEASE
    assert s.batch_remove(["leased"]) == [OBJECT_HAS_LEASE]
    assert s.remove_all() == 0 and s.is_exist("leased") == 1
    assert s.remove("leased", force=True) == 0
    assert s.is_exist("leased") == 0
    assert s.put("again", b"v") == 0 and s.get("again") == b"v"
    assert s.remove_all(force=True) == 1


def test_short_lease_expires(make_store, direct_mode):
    import time
    s = make_store(direct_mode, lease_ms=50)
    assert s.put("k", b"v") == 0 and s.get("k") == b"v"
    assert s.remove("k") == OBJECT_HAS_LEASE
    time.sleep(0.2)
    assert s.remove("k") == 0


# ---- errors ----


@pytest.mark.parametrize("key", ["", "a\0b", "x" * 5000])
def test_invalid_key(store, key):
    assert store.put(key, b"v") == INVALID_KEY
    assert store.upsert(key, b"v") == INVALID_KEY
    assert store.get(key) == b""
    assert store.get_buffer(key) is None
    assert store.is_exist(key) == INVALID_KEY
    assert store.get_size(key) == INVALID_KEY
    assert store.remove(key) == INVALID_KEY
    assert store.batch_is_exist(["ok", key]) == [0, INVALID_KEY]


@pytest.mark.parametrize("key", ["a//b", "/abs", "a/../b", "./a", "trailing/", "n" * 256])
def test_keys_the_mount_cannot_hold(mount_store, make_store, direct_mode, key):
    assert mount_store.put(key, b"v") == INVALID_KEY
    assert mount_store.get(key) == b""
    # The direct store takes them: they are valid keys.
    direct = make_store(direct_mode)
    assert direct.put(key, b"v") == 0 and direct.get(key) == b"v"


def test_key_types_are_checked(store):
    with pytest.raises(TypeError):
        store.put(42, b"v")
    with pytest.raises(TypeError):
        store.put("k", "a str is not bytes")
    with pytest.raises(TypeError):
        store.get(None)


def test_oversized_value(store):
    too_big = bytes(SEGMENT + (1 << 20))
    assert store.put("huge", too_big) == NO_AVAILABLE_HANDLE
    assert store.is_exist("huge") == 0
    # The store carries on.
    assert store.put("small", b"ok") == 0 and store.get("small") == b"ok"


def test_full_store_then_space_comes_back(store):
    chunk = bytes(8 << 20)
    n = 0
    while store.put(f"fill/{n}", chunk) == 0:
        n += 1
        assert n < 100
    assert 4 <= n <= 8
    assert store.put(f"fill/{n}", chunk) == NO_AVAILABLE_HANDLE
    assert store.remove_all(force=True) == n
    assert store.put("fill/again", chunk) == 0


def test_closed_store_returns_codes(store):
    assert store.put("k", b"v") == 0
    target = bytearray(8)
    assert store.close() == 0
    assert store.close() == 0
    C = STORE_CLOSED
    assert C == UNAVAILABLE_IN_CURRENT_STATUS < 0
    assert store.put("k", b"v") == C and store.upsert("k", b"v") == C
    assert store.put_parts("k", b"v") == C
    assert store.put_batch(["k"], [b"v"]) == C
    assert store.get("k") == b"" and store.get_batch(["k", "j"]) == [b"", b""]
    assert store.get_buffer("k") is None and store.batch_get_buffer(["k"]) == [None]
    assert store.get_into("k", target) == C
    assert store.batch_get_into(["k"], [addr(target)], [8]) == [C]
    assert store.get_into_ranges([addr(target)], [["k"]], [[[0]]], [[[0]]], [[[1]]]) == [[[C]]]
    assert store.put_from("k", addr(target), 8) == C
    assert store.batch_put_from(["k"], [addr(target)], [8]) == [C]
    assert store.is_exist("k") == C and store.batch_is_exist(["k"]) == [C]
    assert store.get_size("k") == C
    assert store.remove("k") == C and store.batch_remove(["k"]) == [C]
    assert store.remove_by_regex(".*") == C and store.remove_all() == C
    assert store.register_buffer(addr(target), 8) == C
    assert store.unregister_buffer(addr(target)) == C
    assert store.health_check() == 1
    # And it can be set up again.
    assert store.setup({"global_segment_size": "16MB"}) == 0
    assert store.get("k") == b"" and store.put("k", b"new") == 0 and store.get("k") == b"new"


def test_never_set_up_store():
    s = MooncakeDistributedStore()
    assert s.get("k") == b"" and s.put("k", b"v") == STORE_CLOSED
    assert s.health_check() == 1 and s.close() == 0


# ---- ReplicateConfig ----


def test_replicate_config_fields():
    c = ReplicateConfig()
    assert c.replica_num == 1 and not c.with_soft_pin and not c.with_hard_pin
    assert c.soft_pin_action == SoftPinAction.PRESERVE and c.soft_pin_ttl_ms is None
    c.with_soft_pin = True
    assert c.soft_pin_action == SoftPinAction.ENABLE
    c.soft_pin_action = SoftPinAction.DISABLE
    assert not c.with_soft_pin
    c.soft_pin_ttl_ms = 0
    c.soft_pin_ttl_ms = 60_000
    c.soft_pin_ttl_ms = None
    for bad in (-1, 1.5, "10", True):
        with pytest.raises(TypeError):
            c.soft_pin_ttl_ms = bad
    c.preferred_segment = "localhost:12345"
    c.preferred_segments = ["a", "b"]
    assert "replica_num=1" in str(c)


def test_put_with_replicate_config(store):
    c = ReplicateConfig()
    c.replica_num = 2
    c.with_soft_pin = True
    c.soft_pin_ttl_ms = 1000
    assert store.put("soft", b"v", c) == 0 and store.get("soft") == b"v"
    if store.mode == "cluster":  # two nodes: both replicas placed
        r = store.cluster.cli("stat", "soft")
        assert b"replicas 2" in r.stdout, r
    h = ReplicateConfig(with_hard_pin=True)
    assert store.put("hard", b"v", config=h) == 0 and store.upsert("hard", b"w", h) == 0
    assert store.get("hard") == b"w"
    assert store.put("bad", b"v", ReplicateConfig(replica_num=0)) == INVALID_PARAMS
    with pytest.raises(TypeError):
        store.put("k", b"v", {"replica_num": 1})


def test_hard_pinned_objects_survive_eviction(make_store, direct_mode):
    s = make_store(direct_mode, evict_high_pct=90, evict_ratio_pct=50, lease_ms=1)
    assert s.put("pinned", b"p" * 1000, ReplicateConfig(with_hard_pin=True)) == 0
    for i in range(40):
        assert s.put(f"filler/{i}", bytes(4 << 20)) == 0
    assert s.get("pinned") == b"p" * 1000
    assert sum(s.batch_is_exist([f"filler/{i}" for i in range(40)])) < 40  # some evicted


# ---- the two backends see one store ----


def test_mount_backend_keys_are_files(mount_store):
    root = mount_store.daemon.path
    assert mount_store.put("dir/sub/key", b"through the API") == 0
    with open(os.path.join(root, "dir", "sub", "key"), "rb") as f:
        assert f.read() == b"through the API"
    with open(os.path.join(root, "written-by-cp"), "wb") as f:
        f.write(b"through the mount")
    assert mount_store.get("written-by-cp") == b"through the mount"
    assert not [n for n in os.listdir(os.path.join(root, "dir", "sub")) if n != "key"]
    assert mount_store.remove("dir/sub/key") == 0
    assert not os.path.exists(os.path.join(root, "dir"))  # emptied directories go too
    assert mount_store.put("a", b"file") == 0
    assert mount_store.put("a/b", b"under a file") == INVALID_KEY


def test_mount_backend_links_and_special_files_are_not_objects(mount_store):
    root = mount_store.daemon.path
    assert mount_store.put("real", b"data") == 0
    os.symlink("real", os.path.join(root, "link"))
    os.symlink("/etc/passwd", os.path.join(root, "outside"))
    os.mkfifo(os.path.join(root, "fifo"))  # a get must not wait for a writer
    for k in ("link", "outside", "fifo"):
        assert mount_store.get(k) == b""
        assert mount_store.get_buffer(k) is None
        assert mount_store.is_exist(k) == 0
        assert mount_store.get_size(k) == OBJECT_NOT_FOUND
        assert mount_store.get_into(k, bytearray(100)) == OBJECT_NOT_FOUND
    assert mount_store.get("real") == b"data"


# ---- threads ----


def test_sync_calls_from_many_threads(direct_store):
    s = direct_store
    errors = []

    def work(t):
        try:
            for i in range(200):
                k = f"t{t}/{i}"
                assert s.put(k, k.encode() * 10) == 0
                assert s.get(k) == k.encode() * 10
        except AssertionError as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert s.remove_all(force=True) == 1600
