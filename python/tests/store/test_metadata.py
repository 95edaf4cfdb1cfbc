"""put_from_with_metadata(): the value is Mooncake's layout (metadata, then
data) and the metadata's length is the object's extended attribute
user.mooncake.metadata_size, the one model of metadata that mounts, the C
API and Python share (in the three modes of the `store` fixture)."""

import asyncio
import ctypes
import os

import pytest

from conftest import addr
from mooncake.store import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METADATA_SIZE_XATTR,
    STORE_CLOSED,
    MooncakeDistributedStore,
    ReplicateConfig,
)


def metadata_size(store, make_daemon, key):
    """The object's metadata_size attribute as another client sees it:
    through a mount (the mount's own, or a mooncake-fs client of the
    cluster's master), or, embedded, through the C API (mc_xattr_get)."""
    if store.mode == "mount":
        return os.getxattr(os.path.join(store.daemon.path, key), METADATA_SIZE_XATTR)
    if store.mode == "cluster":
        d = make_daemon("--master", store.cluster.addr, "--segment-size", "0",
                        "--cache-timeout", "0")
        return os.getxattr(os.path.join(d.path, key), METADATA_SIZE_XATTR)
    return store._b._s.xattr_get(os.fsencode(key), METADATA_SIZE_XATTR)


def test_put_from_with_metadata_stores_metadata_then_data(store, make_daemon):
    data = bytearray(os.urandom(3000))
    meta = bytearray(b"HDR:" + bytes(range(28)))
    assert store.register_buffer(data) == 0 and store.register_buffer(meta) == 0
    assert store.put_from_with_metadata("m/obj", addr(data), addr(meta), len(data),
                                        len(meta)) == 0
    assert store.get("m/obj") == bytes(meta) + bytes(data)
    assert store.get_size("m/obj") == len(meta) + len(data)
    assert metadata_size(store, make_daemon, "m/obj") == b"32"
    # Nothing else appeared (the temporary name is gone).
    assert store.remove_by_regex("^m/", force=True) == 1


def test_put_from_with_metadata_is_write_once(store):
    a, m = bytearray(b"a" * 10), bytearray(b"M")
    assert store.put_from_with_metadata("k", a, m, 10, 1) == 0
    assert store.put_from_with_metadata("k", bytearray(b"b" * 20), bytearray(b"NN"), 20, 2) == 0
    assert store.get("k") == b"M" + b"a" * 10  # the first value and its metadata stay


def test_put_from_with_metadata_errors(store):
    data = (ctypes.c_char * 64)()
    meta = bytearray(b"meta")
    # an unregistered int address
    assert store.put_from_with_metadata("e", ctypes.addressof(data), meta, 64, 4) == \
        INVALID_PARAMS
    assert store.register_buffer(ctypes.addressof(data), 64) == 0
    assert store.put_from_with_metadata("e", ctypes.addressof(data), meta, 65, 4) == \
        INVALID_PARAMS
    assert store.put_from_with_metadata("e", ctypes.addressof(data), meta, 64, 5) == \
        INVALID_PARAMS
    assert store.put_from_with_metadata("e", ctypes.addressof(data), meta, -1, 4) == \
        INVALID_PARAMS
    # Mooncake: size 0 stores nothing and succeeds
    assert store.put_from_with_metadata("e", ctypes.addressof(data), meta, 0, 4) == 0
    assert store.is_exist("e") == 0
    c = ReplicateConfig()
    c.prefer_alloc_in_same_node = True  # Mooncake refuses it here with -1
    assert store.put_from_with_metadata("e", ctypes.addressof(data), meta, 64, 4, c) == \
        INTERNAL_ERROR
    c = ReplicateConfig(replica_num=2)
    assert store.put_from_with_metadata("e", ctypes.addressof(data), meta, 64, 4, c) == 0
    assert store.get_size("e") == 68
    assert store.unregister_buffer(ctypes.addressof(data)) == 0


def test_async_put_from_with_metadata(store):
    async def main():
        d, m = bytearray(b"payload"), bytearray(b"md")
        assert await store.async_put_from_with_metadata("ak", d, m, len(d), len(m)) == 0
        return await store.async_get("ak")

    assert asyncio.run(main()) == b"mdpayload"


def test_put_from_with_metadata_on_a_closed_store():
    s = MooncakeDistributedStore()
    assert s.put_from_with_metadata("k", bytearray(1), bytearray(1), 1, 1) == STORE_CLOSED


@pytest.mark.parametrize("key", ["", "a\0b", "x" * 5000])
def test_put_from_with_metadata_invalid_key(store, key):
    from mooncake.store import INVALID_KEY
    assert store.put_from_with_metadata(key, bytearray(1), bytearray(1), 1, 1) == INVALID_KEY
