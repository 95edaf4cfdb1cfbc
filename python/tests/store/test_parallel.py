"""The unified parallel tensor IO (ParallelAxis, TensorParallelism,
ReadTarget, *_tensor_with_parallelism and their batch, upsert, _into and
_from forms), sync and async, in the three modes; the keys, shard headers
and manifests are checked with struct against Mooncake's layout
(mooncake-integration/store: get_parallelism_key_name(),
WriterShardManifest), and a sharded tensor written by other processes is
read whole here."""

import asyncio
import struct
import subprocess
import sys

import pytest

from conftest import addr, python_env, shared_options
from mooncake.store import (
    INVALID_PARAMS,
    STORE_CLOSED,
    MooncakeDistributedStore,
    ParallelAxis,
    ReadTarget,
    ReplicateConfig,
    TensorParallelism,
)

torch = pytest.importorskip("torch", reason="python3-torch is not installed")
from test_tensor import HEADER, read_header, same  # noqa: E402

FULL = torch.arange(48, dtype=torch.float32).reshape(4, 12)


def tp(rank, size=3, split_dim=1):
    return TensorParallelism([ParallelAxis("tp", rank, size, split_dim=split_dim)])


def dp_tp(dp_rank, tp_rank):
    return TensorParallelism([ParallelAxis("tp", tp_rank, 2, split_dim=0),
                              ParallelAxis("dp", dp_rank, 2)])


def manifest(raw):
    """Mooncake's WriterShardManifest, read with struct."""
    assert len(raw) == 96
    magic, ver, size, dtype, ndim, sd, count, _ = struct.unpack_from("<IHHiiiii", raw, 0)
    return (magic, ver, size, dtype, ndim, sd, count), struct.unpack_from("<8q", raw, 32)


def test_full_tensor_without_parallelism(store):
    assert store.put_tensor_with_parallelism("p/full", FULL) == 0
    assert same(store.get_tensor("p/full"), FULL)
    assert same(store.get_tensor_with_parallelism("p/full"), FULL)
    assert same(store.get_tensor_with_parallelism("p/full", ReadTarget("full")), FULL)


def test_single_tp_axis_stores_the_given_shard_under_key_tp_rank(store):
    for r in range(3):
        assert store.put_tensor_with_parallelism("p/w", FULL[:, 4 * r:4 * r + 4], tp(r)) == 0
    h = read_header(store.get("p/w_tp_2"))
    assert (h["layout_kind"], h["axis_count"]) == (1, 1)
    assert h["global_shape"][:2] == (4, 12) and h["local_shape"][:2] == (4, 4)
    assert h["axes"][0] == (1, 0, 2, 3, 1, 0, 4)  # tp, index 0, rank 2 of 3, dim 1, extent 4
    head, shape = manifest(store.get("p/w__parallelism_manifest"))
    assert head == (0x574D414E, 1, 96, 0, 2, 1, 3) and shape == (4, 12, -1, -1, -1, -1, -1, -1)
    assert same(store.get_tensor_with_parallelism("p/w", ReadTarget("shard", tp(1))),
                FULL[:, 4:8].contiguous())
    assert same(store.get_tensor_with_parallelism("p/w", ReadTarget("full")), FULL)
    # the legacy TP reader sees the same shards
    assert same(store.get_tensor_with_tp("p/w", 2, 3), FULL[:, 8:].contiguous())
    # a shard named differently is not this one
    assert store.get_tensor_with_parallelism("p/w", ReadTarget("shard", tp(1, 3, 0))) is None


def test_dp_tp_stores_the_tp_shard_of_the_full_tensor(store):
    for d in range(2):
        for t in range(2):
            assert store.put_tensor_with_parallelism("p/m", FULL + d, dp_tp(d, t)) == 0
    raw = store.get("p/m__dp_1of2__tp_0of2_sd0")  # axes in Mooncake's key order: dp, tp
    h = read_header(raw)
    assert h["axis_count"] == 2 and h["local_shape"][:2] == (2, 12)
    assert h["axes"][0][:5] == (1, 0, 0, 2, 0) and h["axes"][1][:5] == (0, 1, 1, 2, -1)
    assert same(store.get_tensor_with_parallelism("p/m", ReadTarget("shard", dp_tp(1, 1))),
                (FULL + 1)[2:].contiguous())
    assert same(store.get_tensor_with_parallelism("p/m", ReadTarget("full", dp_tp(1, 0))),
                FULL + 1)
    assert same(store.get_tensor_with_parallelism("p/m", ReadTarget("as_stored", dp_tp(0, 0))),
                FULL[:2].contiguous())


def test_axes_without_tp_and_their_ids(store):
    ep = TensorParallelism([ParallelAxis("ep", 1, 4, expert_id=7)])
    pp = TensorParallelism([ParallelAxis("PP", 0, 2, stage_id=3)])
    assert store.put_tensor_with_parallelism("p/e", FULL, ep) == 0
    assert store.put_tensor_with_parallelism("p/e", FULL * 2, pp) == 0
    assert read_header(store.get("p/e__ep_1of4_eid7"))["axes"][0][:6] == (2, 0, 1, 4, -1, 7)
    assert read_header(store.get("p/e__pp_0of2_sid3"))["axes"][0][:6] == (3, 0, 0, 2, -1, 3)
    assert same(store.get_tensor_with_parallelism("p/e", ReadTarget("shard", pp)), FULL * 2)
    assert store.get_tensor_with_parallelism("p/e", ReadTarget("full")) is None


def test_writer_partition(store):
    for r in range(2):
        assert store.put_tensor_with_parallelism("p/wp", FULL, writer_partition=(r, 2, 0)) == 0
    assert read_header(store.get("p/wp__writer_1of2_sd0"))["local_shape"][:2] == (2, 12)
    assert manifest(store.get("p/wp__writer_manifest"))[0][5:] == (0, 2)
    assert same(store.get_tensor_with_parallelism("p/wp", ReadTarget("full")), FULL)
    # a single-TP shard request finds a writer's shard
    assert same(store.get_tensor_with_parallelism("p/wp", ReadTarget("shard", tp(1, 2, 0))),
                FULL[2:].contiguous())


@pytest.mark.parametrize("bad", [
    dict(parallelism=tp(0), writer_partition=(0, 2, 0)),              # both
    dict(parallelism=TensorParallelism([])),                           # no axes
    dict(parallelism=tp(3)),                                           # rank >= size
    dict(parallelism=TensorParallelism([ParallelAxis("tp", 0, 2)])),   # TP without split_dim
    dict(parallelism=TensorParallelism([ParallelAxis("dp", 0, 2, split_dim=0)])),
    dict(parallelism=TensorParallelism([ParallelAxis("ep", 0, 2)])),   # EP without expert_id
    dict(parallelism=TensorParallelism([ParallelAxis("xp", 0, 2)])),
    dict(parallelism=TensorParallelism([ParallelAxis("dp", 0, 2), ParallelAxis("dp", 1, 2)])),
    dict(parallelism=TensorParallelism([ParallelAxis("dp", 0, 2),
                                        ParallelAxis("tp", 0, 5, split_dim=1)])),  # 12 % 5
    dict(writer_partition=(2, 2, 0)),
    dict(writer_partition=(0, 5, 1)),
])
def test_invalid_requests(store, bad):
    assert store.put_tensor_with_parallelism("p/bad", FULL, **bad) == INVALID_PARAMS
    assert store.is_exist("p/bad") == 0


def test_invalid_read_targets(store):
    assert store.put_tensor("p/r", FULL) == 0
    assert store.get_tensor_with_parallelism("p/r", ReadTarget("shard")) is None
    assert store.get_tensor_with_parallelism("p/r", ReadTarget("sideways")) is None
    assert store.get_tensor_with_parallelism("p/missing", ReadTarget("full")) is None


def test_batch_upsert_from_and_into(store):
    keys = ["p/b0", "p/b1", "p/b2"]
    ps = [tp(0, 2, 0), None, TensorParallelism([ParallelAxis("dp", 1, 2)])]
    assert store.batch_put_tensor_with_parallelism(keys, [FULL[:2], FULL, FULL], ps) == [0, 0, 0]
    assert store.batch_put_tensor_with_parallelism(keys, [FULL], ps) == [INVALID_PARAMS] * 3
    assert store.upsert_tensor_with_parallelism("p/b1", FULL * 3) == 0
    assert store.batch_upsert_tensor_with_parallelism(["p/b3"], [FULL], None,
                                                      ReplicateConfig(replica_num=2)) == [0]
    got = store.batch_get_tensor_with_parallelism(
        keys, [ReadTarget("shard", tp(0, 2, 0)), None, ReadTarget("shard", ps[2])])
    assert same(got[0], FULL[:2].contiguous()) and same(got[1], FULL * 3) and same(got[2], FULL)
    # _from: a full tensor object in caller memory
    obj = bytearray(store.get("p/b1"))
    assert store.register_buffer(obj) == 0
    assert store.put_tensor_with_parallelism_from("p/f", obj, len(obj), tp(1, 2, 1)) == 0
    assert store.upsert_tensor_with_parallelism_from("p/f", obj, len(obj), tp(1, 2, 1)) == 0
    assert store.batch_put_tensor_with_parallelism_from(["p/g"], [obj], [len(obj)],
                                                        [tp(0, 2, 1)]) == [0]
    assert store.batch_upsert_tensor_with_parallelism_from(["p/h"], [obj], [len(obj)]) == [0]
    assert store.put_tensor_with_parallelism_from("p/x", bytearray(8), 8) == INVALID_PARAMS
    # single TP takes the shard itself: the object becomes shard 1 of a (4, 24) tensor
    assert same(store.get_tensor_with_parallelism("p/f_tp_1"), FULL * 3)
    assert read_header(store.get("p/f_tp_1"))["global_shape"][:2] == (4, 24)
    assert same(store.get_tensor("p/h"), FULL * 3)
    # _into: the object (shard, or full made of shards) lands in caller memory
    buf = bytearray(HEADER + FULL.numel() * 4)
    t = store.get_tensor_with_parallelism_into("p/f", buf, len(buf), ReadTarget("shard",
                                                                                 tp(1, 2, 1)))
    assert same(t, FULL * 3) and read_header(buf)["layout_kind"] == 1
    assert t.data_ptr() == addr(buf) + HEADER  # the tensor is the caller's memory
    assert store.get_tensor_with_parallelism_into("p/b0", bytearray(10), 10) is None
    bufs = [bytearray(len(buf)) for _ in range(2)]
    out = store.batch_get_tensor_with_parallelism_into(
        ["p/wnone", "p/b1"], bufs, [len(buf)] * 2, [ReadTarget("full"), None])
    assert out[0] is None and same(out[1], FULL * 3)


def test_async_forms(store):
    async def main():
        assert await store.async_put_tensor_with_parallelism("p/a", FULL[:, :6],
                                                             tp(0, 2, 1)) == 0
        assert await store.async_batch_upsert_tensor_with_parallelism(
            ["p/a"], [FULL[:, 6:]], [tp(1, 2, 1)]) == [0]
        full = await store.async_get_tensor_with_parallelism("p/a", ReadTarget("full"))
        both = await store.async_batch_get_tensor_with_parallelism(["p/a", "p/a"], [
            ReadTarget("shard", tp(0, 2, 1)), ReadTarget("shard", tp(1, 2, 1))])
        buf = bytearray(HEADER + FULL.numel() * 4)
        into = await store.async_get_tensor_with_parallelism_into("p/a", buf, len(buf),
                                                                  ReadTarget("full"))
        return full, both, into

    full, both, into = asyncio.run(main())
    assert same(full, FULL) and same(into, FULL)
    assert same(torch.cat(both, 1), FULL)


def test_on_a_closed_store():
    s = MooncakeDistributedStore()
    assert s.put_tensor_with_parallelism("k", FULL) == STORE_CLOSED
    assert s.batch_put_tensor_with_parallelism(["k"], [FULL]) == [STORE_CLOSED]
    assert s.get_tensor_with_parallelism("k") is None


SHARD_WRITER = """
import sys, torch
from mooncake.store import MooncakeDistributedStore, ParallelAxis, TensorParallelism
s = MooncakeDistributedStore()
assert s.setup(eval(sys.argv[1])) == 0
rank = int(sys.argv[2])
full = torch.arange(48, dtype=torch.float32).reshape(4, 12)
p = TensorParallelism([ParallelAxis("tp", rank, 2, split_dim=1)])
assert s.put_tensor_with_parallelism("x/w", full[:, 6 * rank:6 * rank + 6], p) == 0
assert s.put_tensor_with_parallelism("x/wp", full, writer_partition=(rank, 2, 0)) == 0
"""


@pytest.mark.parametrize("mode", ["mount", "cluster"])
def test_shards_written_by_two_processes_read_whole(make_store, mode):
    s = make_store(mode)
    opts, env = shared_options(s), python_env()
    procs = [subprocess.Popen([sys.executable, "-c", SHARD_WRITER, repr(opts), str(r)], env=env)
             for r in range(2)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    assert same(s.get_tensor_with_parallelism("x/w", ReadTarget("full")), FULL)
    assert same(s.get_tensor_with_parallelism("x/wp", ReadTarget("full")), FULL)
    assert same(s.get_tensor_with_parallelism("x/w", ReadTarget("shard", tp(1, 2, 1))),
                FULL[:, 6:].contiguous())
