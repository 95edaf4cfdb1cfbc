"""The tensor methods (put_tensor, get_tensor and their batch, pub, upsert,
_into, _from, _with_tp and safetensors forms), sync and async, in the three
modes (embedded, mount, a client of a master with two nodes).

The stored bytes are checked against Mooncake's tensor object layout
(mooncake-integration/integration_utils.h: TensorObjectHeader +
TensorLayoutMetadata, 304 bytes, then the data) by a reader written here
with struct, independent of mooncake._tensor; safetensors files by one
written with json, struct and numpy.
"""

import asyncio
import json
import os
import struct
import subprocess
import sys

import pytest

from conftest import addr, python_env, shared_options
from mooncake.store import (
    BUFFER_OVERFLOW,
    FILE_NOT_FOUND,
    INVALID_PARAMS,
    OBJECT_NOT_FOUND,
    STORE_CLOSED,
    MooncakeDistributedStore,
    ReplicateConfig,
)

torch = pytest.importorskip("torch", reason="python3-torch is not installed")
np = pytest.importorskip("numpy", reason="python3-numpy is not installed")

# Mooncake's TensorDtype values.
DTYPE_CODE = {torch.float32: 0, torch.float64: 1, torch.int8: 2, torch.uint8: 3,
              torch.int16: 4, torch.int32: 6, torch.int64: 8, torch.bool: 10,
              torch.float16: 11, torch.bfloat16: 12}
DTYPES = list(DTYPE_CODE)
HEADER = 304


def sample(dtype, shape=(3, 5)):
    n = 1
    for d in shape:
        n *= d
    if dtype == torch.bool:
        return (torch.arange(n) % 3 == 0).reshape(shape)
    return (torch.arange(n) - n // 2).to(dtype).reshape(shape)


def same(a, b):
    return a is not None and b is not None and a.dtype == b.dtype and \
        tuple(a.shape) == tuple(b.shape) and torch.equal(a, b)


def read_header(raw):
    """Mooncake's header fields, read with struct (little-endian, no
    padding: the C structs' natural layout on x86-64)."""
    f = dict(zip(["magic", "version", "header_size", "dtype", "ndim", "layout_kind",
                  "reserved_flags", "data_offset", "data_bytes"],
                 struct.unpack_from("<IHHiiIIQQ", raw, 0)))
    f["global_shape"] = struct.unpack_from("<8q", raw, 40)
    f["local_shape"] = struct.unpack_from("<8q", raw, 104)
    f["axis_count"], _ = struct.unpack_from("<II", raw, 168)
    f["axes"] = [struct.unpack_from("<iiiiiiq", raw, 176 + 32 * i) for i in range(4)]
    return f


def mooncake_object(dtype_code, shape, data, global_shape=None, axes=()):
    """A tensor object built field by field as Mooncake's C++ client does."""
    g = tuple(shape if global_shape is None else global_shape)
    pad = (-1,) * (8 - len(shape))
    raw = struct.pack("<IHHiiIIQQ", 0x4D4F4F4E, 1, HEADER, dtype_code, len(shape),
                      1 if axes else 0, 0, HEADER, len(data))
    raw += struct.pack("<8q", *g, *pad) + struct.pack("<8q", *shape, *pad)
    raw += struct.pack("<II", len(axes), 0)
    for i in range(4):
        raw += struct.pack("<iiiiiiq", *(axes[i] if i < len(axes) else (0,) * 7))
    return raw + data


# ---- the layout ----

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_put_tensor_writes_mooncakes_layout(store, dtype):
    t = sample(dtype, (2, 3, 4))
    assert store.put_tensor("t", t) == 0
    raw = store.get("t")
    h = read_header(raw)
    nbytes = t.numel() * t.element_size()
    assert (h["magic"], h["version"], h["header_size"]) == (0x4D4F4F4E, 1, HEADER)
    assert raw[:4] == b"NOOM"
    assert (h["dtype"], h["ndim"], h["layout_kind"], h["reserved_flags"]) == \
        (DTYPE_CODE[dtype], 3, 0, 0)
    assert (h["data_offset"], h["data_bytes"]) == (HEADER, nbytes)
    assert h["global_shape"] == h["local_shape"] == (2, 3, 4, -1, -1, -1, -1, -1)
    assert h["axis_count"] == 0 and h["axes"] == [(0,) * 7] * 4
    assert len(raw) == HEADER + nbytes
    assert raw[HEADER:] == t.reshape(-1).view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_get_tensor_reads_an_object_built_as_mooncake_does(store, dtype):
    t = sample(dtype, (4, 2))
    data = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    assert store.put("m", mooncake_object(DTYPE_CODE[dtype], (4, 2), data)) == 0
    assert same(store.get_tensor("m"), t)


def test_get_tensor_rejects_what_is_no_tensor_object(store):
    good = mooncake_object(0, (2,), struct.pack("<2f", 1, 2))
    bad = {
        "plain": b"hello",
        "short": good[:HEADER - 1],
        "magic": b"X" + good[1:],
        "version": good[:4] + b"\x02" + good[5:],
        "dtype": mooncake_object(15, (2,), b"\0" * 8),
        "ndim": good[:12] + struct.pack("<i", 9) + good[16:],
        "bytes": good + b"\0",
        "zero_dim": mooncake_object(0, (0,), b""),
    }
    for k, v in bad.items():
        assert store.put(k, v) == 0, k
        assert store.get_tensor(k) is None, k
    assert store.get_tensor("missing") is None
    assert store.batch_get_tensor(list(bad) + ["missing"]) == [None] * (len(bad) + 1)


# ---- put and get ----

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_put_get_tensor_every_dtype(store, dtype):
    t = sample(dtype)
    assert store.put_tensor("k", t) == 0
    got = store.get_tensor("k")
    assert same(got, t)
    got.add_(1) if dtype != torch.bool else got.logical_not_()  # a tensor of its own
    assert same(store.get_tensor("k"), t)


@pytest.mark.parametrize("shape", [(), (1,), (7,), (2, 3), (1, 2, 1, 3), (2,) * 8], ids=str)
def test_shapes_up_to_eight_dimensions(store, shape):
    t = sample(torch.float32, shape)
    assert store.put_tensor("s", t) == 0
    got = store.get_tensor("s")
    assert got.shape == t.shape and torch.equal(got, t)


def test_non_contiguous_input_is_stored_in_c_order(store):
    base = torch.arange(24, dtype=torch.int32).reshape(4, 6)
    views = {"t": base.t(), "step": base[:, ::2], "expand": torch.ones(3, 1).expand(3, 4)}
    for k, v in views.items():
        assert not v.is_contiguous()
        assert store.put_tensor(k, v) == 0
        assert same(store.get_tensor(k), v.contiguous()), k
    assert store.get(k)[HEADER:] == v.contiguous().numpy().tobytes()


def test_what_cannot_be_stored_is_invalid_params(store):
    cases = [torch.empty(0), torch.zeros(3, 0), torch.zeros((1,) * 9), [1.0, 2.0], b"bytes",
             np.zeros(3), None, torch.zeros(2, dtype=torch.complex64),
             torch.empty(2, device="meta")]
    for c in cases:
        assert store.put_tensor("bad", c) == INVALID_PARAMS, c
        assert store.upsert_tensor("bad", c) == INVALID_PARAMS
        assert store.pub_tensor("bad", c, ReplicateConfig()) == INVALID_PARAMS
    assert store.is_exist("bad") == 0
    bad_config = ReplicateConfig()
    bad_config.replica_num = 0
    assert store.pub_tensor("bad", torch.ones(1), bad_config) == INVALID_PARAMS
    with pytest.raises(TypeError):
        store.put_tensor(5, torch.ones(1))


def test_put_tensor_is_write_once_upsert_replaces(store):
    a, b = torch.ones(3), torch.zeros(2, 2, dtype=torch.int8)
    assert store.put_tensor("w", a) == 0
    assert store.put_tensor("w", b) == 0
    assert same(store.get_tensor("w"), a)
    assert store.upsert_tensor("w", b) == 0
    assert same(store.get_tensor("w"), b)
    assert store.upsert_pub_tensor("w", a, ReplicateConfig()) == 0
    assert same(store.get_tensor("w"), a)


def test_pub_tensor_with_replication_and_pins(store):
    c = ReplicateConfig()
    c.replica_num = 2
    c.with_soft_pin = True
    t = sample(torch.float16)
    assert store.pub_tensor("p", t, c) == 0
    assert same(store.get_tensor("p"), t)
    h = ReplicateConfig()
    h.with_hard_pin = True
    assert store.pub_tensor("h", t, config=h) == 0
    assert same(store.get_tensor("h"), t)


def test_batch_put_get_and_upsert(store):
    keys = ["b0", "b1", "b2", "b3"]
    ts = [sample(torch.float32), "not a tensor", sample(torch.bfloat16, ()), torch.empty(0)]
    assert store.batch_put_tensor(keys, ts) == [0, INVALID_PARAMS, 0, INVALID_PARAMS]
    got = store.batch_get_tensor(keys + ["missing"])
    assert same(got[0], ts[0]) and same(got[2], ts[2])
    assert got[1] is None and got[3] is None and got[4] is None
    new = [torch.ones(2), torch.zeros(1, dtype=torch.int64)]
    assert store.batch_put_tensor(keys[:2], new) == [0, 0]
    assert same(store.get_tensor("b0"), ts[0])  # write-once
    assert store.batch_upsert_tensor(keys[:2], new) == [0, 0]
    assert all(same(a, b) for a, b in zip(store.batch_get_tensor(keys[:2]), new))
    c = ReplicateConfig()
    c.replica_num = 2
    assert store.batch_pub_tensor(["c0", "c1"], new, c) == [0, 0]
    assert store.batch_upsert_pub_tensor(["c0"], [ts[0]], c) == [0]
    assert same(store.get_tensor("c0"), ts[0])
    assert store.batch_put_tensor(["x", "y"], [torch.ones(1)]) == [INVALID_PARAMS] * 2
    assert store.batch_put_tensor([], []) == []


# ---- zero copy: _into and _from ----

def test_get_tensor_into_reads_into_caller_memory(store):
    t = sample(torch.float32, (4, 4))
    assert store.put_tensor("i", t) == 0
    buf = bytearray(HEADER + 64)
    got = store.get_tensor_into("i", buf, len(buf))
    assert same(got, t)
    assert bytes(buf) == store.get("i")
    got.fill_(7)  # the tensor is the caller's memory after the header
    assert buf[HEADER:HEADER + 4] == struct.pack("<f", 7)
    assert store.get_tensor_into("i", bytearray(HEADER + 63), HEADER + 63) is None  # too small
    assert store.get_tensor_into("missing", buf, len(buf)) is None
    assert store.put("plain", b"x" * 400) == 0
    assert store.get_tensor_into("plain", buf, len(buf)) is None


def test_get_tensor_into_registered_address(store):
    t = sample(torch.int16, (3, 3))
    assert store.put_tensor("r", t) == 0
    buf = bytearray(1024)
    assert store.get_tensor_into("r", addr(buf), len(buf)) is None  # not registered
    assert store.register_buffer(addr(buf), len(buf)) == 0
    got = store.get_tensor_into("r", addr(buf), len(buf))
    assert same(got, t)
    assert store.unregister_buffer(addr(buf)) == 0


def test_batch_get_tensor_into(store):
    ts = [sample(torch.float64, (2,)), sample(torch.uint8, (5, 1))]
    assert store.batch_put_tensor(["x0", "x1"], ts) == [0, 0]
    bufs = [bytearray(512) for _ in range(3)]
    got = store.batch_get_tensor_into(["x0", "x1", "missing"], bufs, [512] * 3)
    assert same(got[0], ts[0]) and same(got[1], ts[1]) and got[2] is None
    assert store.batch_get_tensor_into(["x0"], bufs, [512]) == [None]


def test_put_tensor_from_stores_a_tensor_object_as_it_is(store):
    t = sample(torch.bfloat16, (3, 2))
    assert store.put_tensor("src", t) == 0
    buf = bytearray(HEADER + 12)
    assert store.get_tensor_into("src", buf, len(buf)) is not None
    assert store.put_tensor_from("dst", buf, len(buf)) == 0
    assert store.get("dst") == store.get("src")
    assert same(store.get_tensor("dst"), t)
    assert store.upsert_tensor_from("dst", buf, len(buf)) == 0
    assert store.put_tensor_from("junk", bytearray(b"x" * 400), 400) == INVALID_PARAMS
    assert store.put_tensor_from("cut", buf, len(buf) - 1) == INVALID_PARAMS
    assert store.is_exist("junk") == 0 and store.is_exist("cut") == 0
    # An int address must be registered, as for put_from().
    assert store.put_tensor_from("unreg", addr(buf), len(buf)) == INVALID_PARAMS
    assert store.register_buffer(addr(buf), len(buf)) == 0
    assert store.put_tensor_from("reg", addr(buf), len(buf)) == 0
    assert store.unregister_buffer(addr(buf)) == 0
    assert same(store.get_tensor("reg"), t)


def test_tensor_from_an_address_never_read_unless_registered():
    """put_tensor_from() and the other _from forms of an int address that
    is no registered memory (here one that nothing maps) return
    INVALID_PARAMS, as put_from(): they must not read there to check for a
    tensor object first, which kills the process (SIGSEGV) instead."""
    code = """if 1:
        import mmap, ctypes
        from mooncake.store import MooncakeDistributedStore
        m = mmap.mmap(-1, 1 << 16)
        bad = ctypes.addressof(ctypes.c_char.from_buffer(m))
        m.close()  # unmapped now: nothing is there
        s = MooncakeDistributedStore()
        assert s.setup({"global_segment_size": 1 << 24}) == 0
        print(s.put_tensor_from("a", bad, 4096), s.upsert_tensor_from("a", bad, 4096),
              s.batch_put_tensor_from(["b"], [bad], [4096]),
              s.put_tensor_with_tp_from("c", bad, 4096),
              s.batch_put_tensor_with_tp_from(["d"], [bad], [4096]), flush=True)
        s.close()
    """
    r = subprocess.run([sys.executable, "-c", code], env=python_env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, f"the process died ({r.returncode}): {r.stderr[-2000:]}"
    assert r.stdout.split()[:2] == [str(INVALID_PARAMS)] * 2, r.stdout


def test_batch_put_tensor_from(store):
    ts = [sample(torch.int32, (4,)), sample(torch.float16, (2, 2))]
    bufs = []
    for i, t in enumerate(ts):
        assert store.put_tensor(f"s{i}", t) == 0
        bufs.append(bytearray(store.get(f"s{i}")))
    bufs.append(bytearray(b"junk" * 100))
    sizes = [len(b) for b in bufs]
    assert store.batch_put_tensor_from(["f0", "f1", "f2"], bufs, sizes) == [0, 0, INVALID_PARAMS]
    assert same(store.get_tensor("f0"), ts[0]) and same(store.get_tensor("f1"), ts[1])
    assert store.batch_upsert_tensor_from(["f0", "f1"], bufs[::-1][1:], sizes[1::-1]) == [0, 0]
    assert same(store.get_tensor("f0"), ts[1]) and same(store.get_tensor("f1"), ts[0])
    assert store.batch_put_tensor_from(["a"], bufs, sizes) == [INVALID_PARAMS]


def test_get_tensor_into_cuda_forms_fill_a_cpu_tensor(store):
    t = sample(torch.float32, (8,))
    assert store.put_tensor("c", t) == 0
    dest = torch.full((8,), -1.0)
    assert store.get_tensor_into_cuda("c", dest) == 32
    assert torch.equal(dest, t)
    dests = [torch.zeros(8), torch.zeros(8), torch.zeros(2)]
    assert store.batch_get_tensor_into_cuda(["missing", "c", "c"], dests) == \
        [OBJECT_NOT_FOUND, 32, BUFFER_OVERFLOW]
    assert torch.equal(dests[1], t)
    with pytest.raises(RuntimeError, match="CUDA"):
        store.get_tensor_into_cuda("c", torch.empty(8, device="meta"))
    with pytest.raises(TypeError):
        store.get_tensor_into_cuda("c", bytearray(32))


# ---- tensor parallelism ----

@pytest.mark.parametrize("split_dim", [0, 1])
def test_put_tensor_with_tp_stores_every_shard(store, split_dim):
    full = sample(torch.float32, (5, 7))
    assert store.put_tensor_with_tp("w", full, tp_rank=1, tp_size=3, split_dim=split_dim) == 0
    assert store.is_exist("w") == 0
    n = full.shape[split_dim]
    bounds = [n * r // 3 for r in range(4)]  # Mooncake's calculate_shard_range
    for r in range(3):
        want = full.narrow(split_dim, bounds[r], bounds[r + 1] - bounds[r])
        assert same(store.get_tensor(f"w_tp_{r}"), want.contiguous())
        assert same(store.get_tensor_with_tp("w", tp_rank=r, tp_size=3, split_dim=split_dim),
                    want.contiguous())
        h = read_header(store.get(f"w_tp_{r}"))
        assert h["layout_kind"] == 1 and h["axis_count"] == 1
        assert h["global_shape"][:2] == (5, 7) and h["local_shape"][:2] == tuple(want.shape)
        assert h["axes"][0] == (1, 0, r, 3, split_dim, 0, want.shape[split_dim])
    # tp_size 1 is put_tensor under the key itself.
    assert store.put_tensor_with_tp("one", full) == 0
    assert same(store.get_tensor_with_tp("one"), full)


def test_tp_reads_an_object_built_as_mooncake_does(store):
    shard = sample(torch.int8, (2, 3))
    raw = mooncake_object(2, (2, 3), shard.numpy().tobytes(), global_shape=(4, 3),
                          axes=[(1, 0, 1, 2, 0, 0, 2)])
    assert store.put("m_tp_1", raw) == 0
    assert same(store.get_tensor_with_tp("m", 1, 2), shard)


def test_tp_errors(store):
    t = sample(torch.float32, (4, 4))
    assert store.put_tensor_with_tp("e", t, tp_size=2, split_dim=2) == INVALID_PARAMS
    assert store.put_tensor_with_tp("e", "x", tp_size=2) == INVALID_PARAMS
    assert store.put_tensor_with_tp("e", torch.tensor(1.0), tp_size=2) == INVALID_PARAMS
    assert store.is_exist("e_tp_0") == 0
    assert store.get_tensor_with_tp("e", 0, 2) is None
    # More shards than rows: some shards are empty, as in Mooncake.
    assert store.put_tensor_with_tp("e", t, tp_size=5) == 0
    assert store.get_tensor_with_tp("e", 0, 5).shape == (0, 4)
    assert same(store.get_tensor_with_tp("e", 4, 5), t[3:])


def test_pub_and_batch_forms_with_tp(store):
    ts = [sample(torch.float16, (4, 2)), sample(torch.int64, (2, 6))]
    c = ReplicateConfig()
    c.replica_num = 2
    assert store.pub_tensor_with_tp("p", ts[0], c, 0, 2, 0) == 0
    assert same(store.get_tensor_with_tp("p", 1, 2), ts[0][2:])
    assert store.batch_put_tensor_with_tp(["a", "b", "c"], ts + [None], tp_size=2,
                                          split_dim=1) == [0, 0, INVALID_PARAMS]
    assert store.batch_pub_tensor_with_tp(["d"], ts[:1], c, tp_size=2) == [0]
    got = store.batch_get_tensor_with_tp(["a", "b", "missing"], tp_rank=1, tp_size=2)
    assert same(got[0], ts[0][:, 1:].contiguous()) and same(got[1], ts[1][:, 3:].contiguous())
    assert got[2] is None
    buf = bytearray(1024)
    assert same(store.get_tensor_with_tp_into("b", buf, len(buf), 0, 2, 1),
                ts[1][:, :3].contiguous())
    bufs = [bytearray(1024), bytearray(1024)]
    got = store.batch_get_tensor_with_tp_into(["a", "d"], bufs, [1024, 1024], 0, 2)
    assert same(got[0], ts[0][:, :1].contiguous()) and same(got[1], ts[0][:2])


def test_put_tensor_with_tp_from(store):
    full = sample(torch.int32, (6, 2))
    assert store.put_tensor("full", full) == 0
    raw = bytearray(store.get("full"))
    assert store.put_tensor_with_tp_from("f", raw, len(raw), 0, 3, 0) == 0
    for r in range(3):
        assert same(store.get_tensor_with_tp("f", r, 3), full[2 * r:2 * r + 2])
    assert store.put_tensor_with_tp_from("g", raw, len(raw)) == 0  # tp_size 1
    assert same(store.get_tensor("g"), full)
    assert store.batch_put_tensor_with_tp_from(["h", "i"], [raw, bytearray(400)],
                                               [len(raw), 400], 0, 2, 1) == [0, INVALID_PARAMS]
    assert same(store.get_tensor_with_tp("h", 1, 2), full[:, 1:].contiguous())
    assert store.put_tensor_with_tp_from("j", bytearray(400), 400, 0, 2) == INVALID_PARAMS


# ---- safetensors ----

ST_NAMES = {torch.float32: ("F32", "<f4"), torch.float64: ("F64", "<f8"),
            torch.int8: ("I8", "i1"), torch.uint8: ("U8", "u1"), torch.int16: ("I16", "<i2"),
            torch.int32: ("I32", "<i4"), torch.int64: ("I64", "<i8"),
            torch.bool: ("BOOL", "?"), torch.float16: ("F16", "<f2"),
            torch.bfloat16: ("BF16", "<u2")}


def read_safetensors(path):
    """{name: (dtype name, numpy array)}, read with json, struct and numpy
    only (bfloat16 as its raw uint16 bits)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack_from("<Q", raw)
    assert n % 8 == 0
    head = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    ends = []
    for name, e in head.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        ends.append(end)
        np_type = {v[0]: v[1] for v in ST_NAMES.values()}[e["dtype"]]
        out[name] = (e["dtype"], np.frombuffer(data[begin:end], np_type).reshape(e["shape"]))
    assert max(ends) == len(data)
    return out


def as_numpy(t):
    return t.view(torch.int16).numpy().view("<u2") if t.dtype == torch.bfloat16 else t.numpy()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_save_tensor_to_safetensor_read_independently(store, tmp_path, dtype):
    t = sample(dtype, (3, 4))
    assert store.put_tensor("w", t) == 0
    path = str(tmp_path / "w.safetensors")
    assert store.save_tensor_to_safetensor("w", path) == 0
    (name, (st_dtype, arr)), = read_safetensors(path).items()
    assert name == "w" and st_dtype == ST_NAMES[dtype][0]
    assert np.array_equal(arr, as_numpy(t))
    assert store.save_tensor_to_safetensor("w", path, tensor_name="other") == 0
    assert list(read_safetensors(path)) == ["other"]


def test_save_tensor_to_safetensor_errors(store, tmp_path):
    assert store.save_tensor_to_safetensor("missing", str(tmp_path / "m")) == FILE_NOT_FOUND
    assert store.put_tensor("w", torch.ones(2)) == 0
    assert store.save_tensor_to_safetensor("w", str(tmp_path / "no" / "dir")) == FILE_NOT_FOUND
    assert store.save_tensor_to_safetensor("w", "x", filesystem="s3") == INVALID_PARAMS
    assert not os.path.exists(tmp_path / "m")


def test_save_tensor_to_safetensor_default_file_name(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert store.put_tensor("w.safetensors", torch.arange(3)) == 0
    assert store.save_tensor_to_safetensor("w.safetensors") == 0
    assert list(read_safetensors(tmp_path / "w.safetensors")) == ["w.safetensors"]


def write_safetensors(path, entries):
    """A safetensors file written with json and struct only."""
    head, data = {}, b""
    for name, (dtype, shape, payload) in entries.items():
        head[name] = {"dtype": dtype, "shape": shape,
                      "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    h = json.dumps(head).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def test_load_tensor_from_safetensor_written_independently(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = str(tmp_path / "x.safetensors")
    a = np.arange(6, dtype="<f4").reshape(2, 3)
    bf = np.array([0x3F80, 0x4000], dtype="<u2")  # bfloat16 1.0, 2.0
    write_safetensors(path, {"a": ("F32", [2, 3], a.tobytes()),
                             "b": ("BF16", [2], bf.tobytes())})
    got = store.load_tensor_from_safetensor("b", path)
    assert got.dtype == torch.bfloat16 and got.tolist() == [1.0, 2.0]
    assert same(store.get_tensor("b"), got)
    got = store.load_tensor_from_safetensor("k", path, tensor_name="a")
    assert np.array_equal(got.numpy(), a) and same(store.get_tensor("k"), got)
    assert store.load_tensor_from_safetensor("k2", path) is None  # two entries, none named k2
    # key None: stored under the file name (relative: the mount holds no absolute key)
    one = "one.safetensors"
    write_safetensors(one, {"only": ("I64", [], struct.pack("<q", -5))})
    assert store.load_tensor_from_safetensor(file_name=one).item() == -5
    assert store.get_tensor(one).item() == -5  # stored under the file name
    assert store.load_tensor_from_safetensor("m", str(tmp_path / "missing")) is None
    (tmp_path / "junk").write_bytes(b"\xff" * 20)
    assert store.load_tensor_from_safetensor("j", str(tmp_path / "junk")) is None
    assert store.load_tensor_from_safetensor("k") is None


def test_safetensor_round_trip(store, tmp_path):
    for dtype in DTYPES:
        t = sample(dtype, (2, 2, 2))
        assert store.upsert_tensor("r", t) == 0
        path = str(tmp_path / "r.safetensors")
        assert store.save_tensor_to_safetensor("r", path) == 0
        assert store.remove("r", force=True) == 0
        assert same(store.load_tensor_from_safetensor("r", path), t)
        assert same(store.get_tensor("r"), t)


# ---- closed store, async, other processes ----

def test_tensor_methods_on_a_closed_store():
    s = MooncakeDistributedStore()
    t = torch.ones(2)
    assert s.put_tensor("k", t) == STORE_CLOSED
    assert s.put_tensor_with_tp("k", t, 0, 2) == STORE_CLOSED
    assert s.batch_put_tensor(["a", "b"], [t, t]) == [STORE_CLOSED] * 2
    assert s.batch_put_tensor_from(["a"], [bytearray(400)], [400]) == [STORE_CLOSED]
    assert s.get_tensor("k") is None
    assert s.batch_get_tensor(["a"]) == [None]
    assert s.get_tensor_into("k", bytearray(400), 400) is None
    assert s.get_tensor_into_cuda("k", t) == STORE_CLOSED
    assert s.save_tensor_to_safetensor("k", "/nonexistent/x") == FILE_NOT_FOUND


@pytest.mark.asyncio
async def test_async_tensor_methods(store, tmp_path):
    s = store
    t = sample(torch.bfloat16, (4, 3))
    assert await s.async_put_tensor("a", t) == 0
    assert same(await s.async_get_tensor("a"), t)
    assert await s.async_put_tensor("bad", []) == INVALID_PARAMS
    assert await s.async_pub_tensor("p", t, ReplicateConfig()) == 0
    assert await s.async_upsert_tensor("a", t * 2) == 0
    assert await s.async_upsert_pub_tensor("a", t, ReplicateConfig()) == 0
    assert await s.async_batch_put_tensor(["b", "c"], [t, 1]) == [0, INVALID_PARAMS]
    assert await s.async_batch_pub_tensor(["d"], [t], ReplicateConfig()) == [0]
    assert await s.async_batch_upsert_tensor(["b"], [t + 1]) == [0]
    assert await s.async_batch_upsert_pub_tensor(["b"], [t], None) == [0]
    got = await s.async_batch_get_tensor(["a", "b", "missing"])
    assert same(got[0], t) and same(got[1], t) and got[2] is None
    buf = bytearray(HEADER + 24)
    assert same(await s.async_get_tensor_into("a", buf, len(buf)), t)
    assert await s.async_put_tensor_from("e", buf, len(buf)) == 0
    assert await s.async_upsert_tensor_from("e", buf, len(buf)) == 0
    assert await s.async_batch_put_tensor_from(["f"], [buf], [len(buf)]) == [0]
    assert await s.async_batch_upsert_tensor_from(["f"], [buf], [len(buf)]) == [0]
    got = await s.async_batch_get_tensor_into(["e", "f"], [bytearray(400)] * 2, [400] * 2)
    assert same(got[0], t) and same(got[1], t)
    dest = torch.empty(4, 3, dtype=torch.bfloat16)
    assert await s.async_get_tensor_into_cuda("a", dest) == 24 and torch.equal(dest, t)
    assert await s.async_batch_get_tensor_into_cuda(["a"], [dest]) == [24]
    assert await s.async_put_tensor_with_tp("tp", t, 0, 2, 0) == 0
    assert await s.async_pub_tensor_with_tp("tq", t, None, 0, 2, 1) == 0
    assert await s.async_batch_put_tensor_with_tp(["tr"], [t], 0, 2) == [0]
    assert await s.async_batch_pub_tensor_with_tp(["ts"], [t], None, 0, 2) == [0]
    assert await s.async_put_tensor_with_tp_from("tt", buf, len(buf), 0, 2) == 0
    assert await s.async_batch_put_tensor_with_tp_from(["tu"], [buf], [len(buf)], 0, 2) == [0]
    for k in ("tp", "tr", "ts", "tt", "tu"):
        assert same(await s.async_get_tensor_with_tp(k, 1, 2), t[2:]), k
    assert same(await s.async_get_tensor_with_tp("tq", 1, 2), t[:, 1:].contiguous())
    got = await s.async_batch_get_tensor_with_tp(["tp", "tr"], 0, 2)
    assert same(got[0], t[:2]) and same(got[1], t[:2])
    assert same(await s.async_get_tensor_with_tp_into("tp", bytearray(400), 400, 1, 2), t[2:])
    got = await s.async_batch_get_tensor_with_tp_into(["tp"], [bytearray(400)], [400], 1, 2)
    assert same(got[0], t[2:])
    path = str(tmp_path / "a.safetensors")
    assert await s.async_save_tensor_to_safetensor("a", path) == 0
    assert same(await s.async_load_tensor_from_safetensor("z", path), t)
    # Many at once, on one event loop.
    keys = [f"many{i}" for i in range(64)]
    ts = [torch.full((16,), i, dtype=torch.int32) for i in range(64)]
    assert await asyncio.gather(*(s.async_put_tensor(k, x) for k, x in zip(keys, ts))) == \
        [0] * 64
    got = await asyncio.gather(*(s.async_get_tensor(k) for k in keys))
    assert all(same(a, b) for a, b in zip(got, ts))


WRITER = """
import sys, torch
from mooncake.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
assert s.setup(eval(sys.argv[1])) == 0
dtypes = [torch.float16, torch.bfloat16, torch.float32, torch.int8, torch.bool]
for i, dt in enumerate(dtypes):
    t = (torch.arange(24) % 5 - 2).to(dt).reshape(2, 3, 4)
    assert s.put_tensor(f"x/{i}", t.transpose(0, 2)) == 0
assert s.put_tensor_with_tp("x/tp", torch.arange(12.).reshape(4, 3), 0, 2, 1) == 0
s.close()
"""


@pytest.mark.parametrize("mode", ["mount", "cluster"])
def test_a_tensor_put_by_another_process(make_store, mode):
    s = make_store(mode)
    opts, env = shared_options(s), python_env()
    subprocess.run([sys.executable, "-c", WRITER, repr(opts)], check=True, env=env, timeout=60)
    for i, dt in enumerate([torch.float16, torch.bfloat16, torch.float32, torch.int8,
                            torch.bool]):
        want = (torch.arange(24) % 5 - 2).to(dt).reshape(2, 3, 4).transpose(0, 2).contiguous()
        assert same(s.get_tensor(f"x/{i}"), want), dt
    assert same(s.get_tensor_with_tp("x/tp", 1, 2),
                torch.arange(12.).reshape(4, 3)[:, 1:].contiguous())
