"""Whole-object gets past their first read (8 KiB), on every path a value
takes: the get opens the version and copies it on the caller's thread from
where its bytes lie in this process (the embedded segment, or a co-located
node's mapped over shared memory; an async caller shares the copy with the
store's loop thread), or has the loop thread read it into the result when
the node is reached over a socket. Each must give exactly the value put,
sync and async, one key or a batch, bytes or a Buffer, also while another
client replaces the key; and the mount backend's reads of the same values.
Real processes: a master and nodes on loopback, one of them without shared
memory (--no-shm), and embedded mooncake-fs daemons (a mount, and one
reached through its Unix socket)."""

import asyncio
import os
import threading

import pytest

from mooncake.async_store import MooncakeDistributedStoreAsync
from mooncake.store import ReplicateConfig

KiB, MiB = 1 << 10, 1 << 20
# Around the first read, around the async share (256 KiB), and past the
# 4 MiB pieces a transfer moves at once.
SIZES = [0, 8 * KiB, 8 * KiB + 1, 256 * KiB - 1, 256 * KiB, 256 * KiB + 4097, 5 * MiB + 3]


def values():
    return {f"v/{n}": os.urandom(n) for n in SIZES}


async def check_all(s, vals):
    keys = list(vals)
    want = [vals[k] for k in keys]
    assert [s.get(k) for k in keys] == want
    assert s.get_batch(keys) == want
    assert [bytes(s.get_buffer(k)) if vals[k] else b"" for k in keys] == want
    assert await asyncio.gather(*[s.async_get(k) for k in keys]) == want
    assert await s.async_get_batch(keys) == want
    bufs = await asyncio.gather(*[s.async_get_buffer(k) for k in keys])
    assert [bytes(b) for b in bufs] == want
    # A batch of the same large key many times over: each is its own copy.
    big = keys[-1]
    assert await s.async_get_batch([big] * 8) == [vals[big]] * 8


@pytest.mark.asyncio
async def test_large_gets_from_shared_memory_and_over_tcp(make_cluster, procs, make_store):
    c = make_cluster(nodes=1, node_size="64M")  # this host: mapped
    far = procs.node(c.master, "64M", "--no-shm")  # read with READ requests
    s = make_store("cluster", cluster=c)
    for node in (c.nodes[0], far):
        vals = values()
        for k, v in vals.items():
            assert s.upsert(k, v, ReplicateConfig(preferred_segment=node.addr)) == 0
        await check_all(s, vals)


@pytest.mark.asyncio
async def test_more_in_flight_than_a_node_queues(make_cluster, procs, make_store):
    # 160 MiB of gets at once from one node over TCP, past the 64 MiB a
    # connection may queue for sending: the node stops taking requests
    # while its replies queue (backpressure) instead of hanging up.
    c = make_cluster(nodes=0)
    far = procs.node(c.master, "64M", "--no-shm")
    s = make_store("cluster", cluster=c)
    vals = {f"big/{i}": os.urandom(5 * MiB + i) for i in range(8)}
    for k, v in vals.items():
        assert s.upsert(k, v, ReplicateConfig(preferred_segment=far.addr)) == 0
    keys = list(vals) * 4
    got = await asyncio.gather(*[s.async_get(k) for k in keys])
    assert [len(g) for g in got] == [len(vals[k]) for k in keys]
    assert got == [vals[k] for k in keys]
    assert "cannot queue a reply" not in far.read_log()


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", ["direct", "mount"])
async def test_large_gets_embedded_and_on_the_mount_backend(make_store, mode):
    # Embedded: views of the store's own segment. The mount backend reads a
    # file of up to 64 KiB with the GIL released once, a larger one straight
    # into its bytes. The same values either way.
    s = make_store(mode)
    vals = values()
    assert s.upsert_batch(list(vals), list(vals.values())) == 0
    await check_all(s, vals)


@pytest.mark.asyncio
async def test_large_gets_through_a_mounts_socket(make_daemon, make_store):
    # The bench's setup: a pure client of an embedded mooncake-fs, whose
    # segment it maps through the daemon's Unix socket.
    d = make_daemon(serve=True)
    vals = values()
    for k, v in vals.items():
        os.makedirs(os.path.dirname(d.p(k)), exist_ok=True)
        with open(d.p(k), "wb") as f:
            f.write(v)
    s = MooncakeDistributedStoreAsync()
    assert s.setup({"master_server_address": d.served_addr(), "global_segment_size": 0}) == 0
    try:
        await check_all(s, vals)
    finally:
        s.close()


@pytest.mark.asyncio
async def test_large_get_while_the_key_is_replaced(make_cluster, make_store):
    # Every get returns one whole version, never a mix nor a failure,
    # however the replacements fall between its first read and the rest.
    c = make_cluster(nodes=1, node_size="64M")
    s = make_store("cluster", cluster=c)
    writer = make_store("cluster", cluster=c)
    versions = [bytes([i]) * (MiB + i * 4099) for i in range(1, 4)]
    assert s.upsert("hot", versions[0]) == 0
    stop = threading.Event()

    def replace():
        i = 0
        while not stop.is_set():
            i += 1
            assert writer.upsert("hot", versions[i % len(versions)]) == 0

    t = threading.Thread(target=replace)
    t.start()
    try:
        for _ in range(20):
            got = await asyncio.gather(*[s.async_get("hot") for _ in range(8)])
            got.append(s.get("hot"))
            for v in got:
                assert v in versions, (len(v), v[:1])
    finally:
        stop.set()
        t.join()
