"""Tensors as stored objects: Mooncake's tensor object layout, torch dtypes,
tensor-parallel shards and safetensors files.

A tensor object is a 304-byte header followed by the tensor's bytes (C order),
as Mooncake's Python client (mooncake-integration/integration_utils.h,
TensorMetadata) writes it, so that either client reads what the other
wrote. All fields are little-endian:

  TensorObjectHeader (40 bytes)
    u32 magic 0x4d4f4f4e, u16 version 1, u16 header_size 304,
    i32 dtype (TensorDtype), i32 ndim (0 to 8),
    u32 layout_kind (0 full, 1 shard), u32 reserved_flags 0,
    u64 data_offset 304, u64 data_bytes
  TensorLayoutMetadata (264 bytes)
    i64 global_shape[8], i64 local_shape[8] (-1 past ndim),
    u32 axis_count (0 to 4), u32 reserved0,
    4 x LayoutAxis: i32 kind (0 dp, 1 tp, 2 ep, 3 pp), i32 axis_index,
      i32 shard_rank, i32 shard_count, i32 split_dim (-1: none),
      i32 reserved0, i64 reserved1 (the shard's extent along split_dim)

A global dimension of 0 is invalid in that layout, so an empty tensor cannot
be stored (INVALID_PARAMS, as in Mooncake); a 0-d tensor can.

This module imports torch; mooncake.store imports it on the first tensor
call only.
"""

import ctypes
import json
import os
import struct

import torch

from . import _errors as E

MAGIC = 0x4D4F4F4E
VERSION = 1
MAX_DIMS = 8
MAX_AXES = 4
LAYOUT_FULL, LAYOUT_SHARD = 0, 1
AXIS_TP = 1

_HEADER = struct.Struct("<IHHiiIIQQ")
_SHAPE = struct.Struct("<8q")
_COUNTS = struct.Struct("<II")
_AXIS = struct.Struct("<iiiiiiq")
HEADER_SIZE = _HEADER.size + 2 * _SHAPE.size + _COUNTS.size + MAX_AXES * _AXIS.size
assert HEADER_SIZE == 304

# Mooncake's TensorDtype, by value: (torch attribute, safetensors name).
# A dtype this torch lacks (uint16 before torch 2.3, float8) is None.
_DTYPES = [
    ("float32", "F32"), ("float64", "F64"), ("int8", "I8"), ("uint8", "U8"),
    ("int16", "I16"), ("uint16", "U16"), ("int32", "I32"), ("uint32", "U32"),
    ("int64", "I64"), ("uint64", "U64"), ("bool", "BOOL"), ("float16", "F16"),
    ("bfloat16", "BF16"), ("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2"),
]
TORCH_DTYPES = [getattr(torch, name, None) for name, _ in _DTYPES]
_CODE = {dt: code for code, dt in enumerate(TORCH_DTYPES) if dt is not None}
_ST_NAME = {dt: st for dt, (_, st) in zip(TORCH_DTYPES, _DTYPES) if dt is not None}
_ST_DTYPE = {st: dt for dt, st in _ST_NAME.items()}
_ITEMSIZE = {dt: torch.empty((), dtype=dt).element_size() for dt in _CODE}


class Meta:
    """A parsed, valid header: dtype (a torch dtype, or None when this
    torch lacks it), shape (the stored tensor's, i.e. the local shape),
    global_shape, layout_kind, axes and data_bytes."""

    __slots__ = ("code", "dtype", "shape", "global_shape", "layout_kind", "axes",
                 "data_bytes")


# ---- writing ----

def header(code, global_shape, local_shape, data_bytes, axes=()):
    """The 304 header bytes of a tensor object. axes: (kind, rank, count,
    split_dim, extent[, reserved0: an EP axis's expert id, a PP axis's
    stage id]) tuples; none makes a full (unsharded) tensor."""
    ndim = len(global_shape)
    pad = [-1] * (MAX_DIMS - ndim)
    out = bytearray(HEADER_SIZE)
    _HEADER.pack_into(out, 0, MAGIC, VERSION, HEADER_SIZE, code, ndim,
                      LAYOUT_SHARD if axes else LAYOUT_FULL, 0, HEADER_SIZE, data_bytes)
    at = _HEADER.size
    _SHAPE.pack_into(out, at, *global_shape, *pad)
    _SHAPE.pack_into(out, at + _SHAPE.size, *local_shape, *pad)
    at += 2 * _SHAPE.size
    _COUNTS.pack_into(out, at, len(axes), 0)
    at += _COUNTS.size
    for i, a in enumerate(axes):
        kind, rank, count, split_dim, extent = a[:5]
        _AXIS.pack_into(out, at + i * _AXIS.size, kind, i, rank, count, split_dim,
                        a[5] if len(a) > 5 else 0, extent)
    return out


def _payload(t):
    """The bytes of a CPU tensor, C-contiguous (a view when t already is),
    as a memoryview."""
    flat = t.detach().contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else memoryview(b"")


def _writable(t, global_shape=None):
    """(dtype code, global shape) of a tensor that Mooncake's layout can
    hold, or None: not a CPU torch.Tensor, a dtype outside TensorDtype, more
    than 8 dimensions or a dimension of 0."""
    if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.is_sparse:
        return None
    code = _CODE.get(t.dtype)
    shape = tuple(t.shape) if global_shape is None else global_shape
    if code is None or len(shape) > MAX_DIMS or 0 in shape:
        return None
    return code, shape


def parts(t):
    """(header, payload) of tensor t as a full tensor object, the payload a
    view of t's memory when t is contiguous; None if t cannot be stored."""
    w = _writable(t)
    if w is None:
        return None
    data = _payload(t)
    return header(w[0], w[1], w[1], len(data)), data


def encode(t, global_shape=None, axes=()):
    """Tensor t as one tensor object (a bytearray: one copy of the data), a
    shard of global_shape when axes are given; None if it cannot be stored."""
    w = _writable(t, global_shape)
    if w is None:
        return None
    data = _payload(t)
    out = header(w[0], w[1], tuple(t.shape), len(data), axes)
    out += data
    return out


def tp_key(key, rank, size):
    """The key of TP shard rank of key (key itself when size <= 1)."""
    if size <= 1:
        return key
    if isinstance(key, bytes):
        return key + b"_tp_%d" % rank
    return f"{key}_tp_{rank}"


def shard_range(dim, rank, count):
    """(start, length) of shard rank of count along a dimension of dim
    elements: shards differ by at most one element, as Mooncake's
    calculate_shard_range()."""
    start = dim * rank // count
    return start, dim * (rank + 1) // count - start


def tp_items(key, t, tp_size, split_dim):
    """[(shard key, shard object bytes)] of storing t split into tp_size
    shards along split_dim, each under key_tp_<rank> with a TP axis in its
    header (tp_size <= 1: t itself under key); None if t cannot be split."""
    if tp_size <= 1:
        return [(key, encode(t))]
    if _writable(t) is None or type(split_dim) is not int or \
            not 0 <= split_dim < t.dim() or type(tp_size) is not int:
        return None
    out = []
    for rank in range(tp_size):
        start, n = shard_range(t.shape[split_dim], rank, tp_size)
        shard = t.narrow(split_dim, start, n)
        axes = [(AXIS_TP, rank, tp_size, split_dim, n)]
        out.append((tp_key(key, rank, tp_size), encode(shard, tuple(t.shape), axes)))
    return out


# ---- reading ----

def parse(buf):
    """The Meta of a tensor object in buf (any buffer), or None when it is
    not one: the checks of Mooncake's ValidateTensorMetadata()."""
    mv = memoryview(buf).cast("B")
    if len(mv) < HEADER_SIZE:
        return None
    magic, version, hsize, code, ndim, kind, _, off, nbytes = _HEADER.unpack_from(mv, 0)
    at = _HEADER.size
    gshape = _SHAPE.unpack_from(mv, at)
    lshape = _SHAPE.unpack_from(mv, at + _SHAPE.size)
    naxes, _ = _COUNTS.unpack_from(mv, at + 2 * _SHAPE.size)
    if (magic, version, hsize) != (MAGIC, VERSION, HEADER_SIZE) or \
            not 0 <= code < len(_DTYPES) or not 0 <= ndim <= MAX_DIMS or \
            naxes > MAX_AXES or kind > LAYOUT_SHARD or \
            not HEADER_SIZE <= off <= len(mv) or nbytes != len(mv) - off:
        return None
    if any(d <= 0 for d in gshape[:ndim]) or any(d < 0 for d in lshape[:ndim]) or \
            any(d != -1 for d in gshape[ndim:] + lshape[ndim:]):
        return None
    axes = []
    for i in range(naxes):
        a = _AXIS.unpack_from(mv, HEADER_SIZE - MAX_AXES * _AXIS.size + i * _AXIS.size)
        if not 0 <= a[0] <= 4 or a[3] <= 0 or not 0 <= a[2] < a[3] or not -1 <= a[4] < ndim:
            return None
        axes.append(a)
    m = Meta()
    m.code, m.dtype = code, TORCH_DTYPES[code]
    m.shape, m.global_shape = lshape[:ndim], gshape[:ndim]
    m.layout_kind, m.axes, m.data_bytes = kind, axes, nbytes
    return m


def to_tensor(buf):
    """The tensor in a tensor object (any buffer; the tensor shares its
    memory and keeps it alive), or None when buf is None, not a tensor
    object, or of a dtype this torch lacks."""
    if buf is None:
        return None
    m = parse(buf)
    if m is None or m.dtype is None:
        return None
    n = 1
    for d in m.shape:
        n *= d
    if n * _ITEMSIZE[m.dtype] != m.data_bytes:
        return None
    if n == 0:  # a shard can be empty (more shards than rows)
        return torch.empty(m.shape, dtype=m.dtype)
    mv = memoryview(buf).cast("B")
    if mv.readonly:
        mv = memoryview(bytearray(mv))  # torch.frombuffer wants writable memory
    t = torch.frombuffer(mv, dtype=m.dtype, count=n, offset=len(mv) - m.data_bytes)
    return t.reshape(m.shape)


def memory(target, size):
    """A memoryview of caller memory: an int address (size bytes at it), or
    an object with the buffer protocol (its first size bytes, or all)."""
    if isinstance(target, int) and not isinstance(target, bool):
        if not target or size is None or size <= 0:
            return None
        return memoryview((ctypes.c_char * size).from_address(target)).cast("B")
    try:
        mv = memoryview(target).cast("B")
    except (TypeError, ValueError):
        return None
    return mv if size is None else mv[:size]


# ---- safetensors files ----

def save_safetensors(path, name, t):
    """Writes tensor t as the only entry `name` of a safetensors file (8-byte
    little-endian header length, a JSON header padded with spaces to a
    multiple of 8, the data), through a temporary file renamed into place."""
    data = _payload(t)
    head = json.dumps({name: {"dtype": _ST_NAME[t.dtype], "shape": list(t.shape),
                              "data_offsets": [0, len(data)]}}, separators=(",", ":"))
    head = head.encode() + b" " * (-len(head) % 8)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(head)))
            f.write(head)
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def load_safetensors(path):
    """{name: tensor} of a safetensors file; raises ValueError when it is not
    one (or holds a dtype this torch lacks), OSError when it cannot be read."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: not a safetensors file")
    (n,) = struct.unpack_from("<Q", raw)
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header past the end of the file")
    try:
        head = json.loads(raw[8:8 + n])
    except ValueError as e:
        raise ValueError(f"{path}: bad header: {e}") from None
    data = memoryview(bytearray(raw[8 + n:]))
    out = {}
    for name, entry in head.items():
        if name == "__metadata__":
            continue
        dt = _ST_DTYPE.get(entry.get("dtype"))
        begin, end = entry.get("data_offsets", (0, -1))
        shape = tuple(entry.get("shape", ()))
        if dt is None or not 0 <= begin <= end <= len(data):
            raise ValueError(f"{path}: entry {name!r} cannot be read")
        t = torch.frombuffer(data[begin:end], dtype=dt) if end > begin else \
            torch.empty(0, dtype=dt)
        out[name] = t.reshape(shape)
    return out


def pick(tensors, *names):
    """The entry of the first of names present, else the only entry; raises
    ValueError (Mooncake's choice, too)."""
    for n in names:
        if n is not None and n in tensors:
            return tensors[n]
    if len(tensors) == 1:
        return next(iter(tensors.values()))
    raise ValueError(f"no entry {names[0]!r} among {sorted(tensors)}")


def code_of_oserror(e):
    """Mooncake's code for a file error of save_tensor_to_safetensor."""
    return E.FILE_NOT_FOUND if isinstance(e, FileNotFoundError) else E.PERSISTENT_FAIL
