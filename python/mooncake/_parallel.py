"""Mooncake's unified parallel tensor IO: ParallelAxis, TensorParallelism,
ReadTarget and the *_tensor_with_parallelism methods (a mixin of
MooncakeDistributedStore), in Mooncake's storage layout:

- no parallelism: the full tensor object under key;
- one TP axis: a shard object under key_tp_<rank> (the legacy TP key; the
  tensor given is the shard, the full shape is its shape times the TP size
  along split_dim), plus the manifest key__parallelism_manifest;
- several axes with a TP axis: the full tensor is given, the TP rank's
  shard is stored under key__<axis>__<axis>... (axes in the order dp, tp,
  ep, pp; each "<kind>_<rank>of<size>[_sd<d>][_eid<e>][_sid<s>]"), plus the
  manifest;
- axes without TP (dp, ep, pp): the tensor as given, as a shard object of
  those axes under that key, no manifest;
- writer_partition (rank, size, split_dim): the full tensor is given, the
  writer's shard goes under key__writer_<rank>of<size>_sd<d> with one TP
  axis, its manifest under key__writer_manifest.

A manifest is Mooncake's WriterShardManifest: u32 magic 0x574d414e, u16
version 1, u16 header_size 96, i32 dtype, ndim, split_dim, shard_count,
reserved0, 4 bytes of padding, i64 global_shape[8] (-1 past ndim). Shards
are uniform (the split dimension divisible by the count), as Mooncake
requires on these paths.
"""

import struct

from ._errors import INVALID_PARAMS
from ._ops import _Early
from ._tensor_methods import (
    _T,
    _one_early,
    _stored_tensor,
    _tensor_write_op,
    _tensor_writes,
    _tensor_writes_op,
)

_KINDS = {"dp": 0, "tp": 1, "ep": 2, "pp": 3}  # LayoutAxisKind, also the key order
_NAMES = {v: k for k, v in _KINDS.items()}
_MODES = ("as_stored", "shard", "full")
MANIFEST_MAGIC = 0x574D414E
_MANIFEST = struct.Struct("<IHHiiiii4x8q")


class ParallelAxis:
    """One axis of a shard's identity: kind ("tp", "dp", "ep" or "pp"),
    rank of size, split_dim (TP: required; DP, EP, PP: none), expert_id (EP:
    required), stage_id (PP: required)."""

    __slots__ = ("kind", "rank", "size", "split_dim", "expert_id", "stage_id")

    def __init__(self, kind="tp", rank=0, size=1, split_dim=None, expert_id=None,
                 stage_id=None):
        self.kind, self.rank, self.size = kind, rank, size
        self.split_dim, self.expert_id, self.stage_id = split_dim, expert_id, stage_id

    def __repr__(self):
        return (f"ParallelAxis(kind={self.kind!r}, rank={self.rank}, size={self.size}, "
                f"split_dim={self.split_dim}, expert_id={self.expert_id}, "
                f"stage_id={self.stage_id})")


class TensorParallelism:
    """The ordered axes (ParallelAxis) that identify a stored or requested
    shard."""

    __slots__ = ("axes",)

    def __init__(self, axes=None):
        self.axes = list(axes or [])

    def __repr__(self):
        return f"TensorParallelism(axes={self.axes!r})"


class ReadTarget:
    """What a read returns: mode "as_stored" (the object stored under the
    key, or under the parallelism's key when given), "shard" (the shard
    that parallelism names; required) or "full" (the whole tensor, put
    together from its shards when it was stored sharded)."""

    __slots__ = ("mode", "parallelism")

    def __init__(self, mode="as_stored", parallelism=None):
        self.mode, self.parallelism = mode, parallelism

    def __repr__(self):
        return f"ReadTarget(mode={self.mode!r}, parallelism={self.parallelism!r})"


def _int(v):
    return type(v) is int


def _axes(p):
    """A TensorParallelism's axes as (kind, rank, size, split_dim,
    expert_id, stage_id) tuples, kind lower-case; None when Mooncake's
    validate_parallelism_spec() refuses them."""
    axes = getattr(p, "axes", None)
    if not isinstance(axes, (list, tuple)) or not 0 < len(axes) <= 4:
        return None
    out, seen = [], set()
    for a in axes:
        kind = getattr(a, "kind", None)
        kind = kind.lower() if isinstance(kind, str) else None
        t = (kind, getattr(a, "rank", None), getattr(a, "size", None),
             getattr(a, "split_dim", None), getattr(a, "expert_id", None),
             getattr(a, "stage_id", None))
        if kind not in _KINDS or kind in seen or not _int(t[1]) or not _int(t[2]) or \
                not 0 <= t[1] < t[2] or any(v is not None and not _int(v) for v in t[3:]):
            return None
        seen.add(kind)
        sd, eid, sid = t[3:]
        if (kind == "tp") != (sd is not None) or (kind == "ep") != (eid is not None) or \
                (kind == "pp") != (sid is not None):
            return None
        out.append(t)
    return out


def _cat(key, suffix):
    return key + suffix.encode() if isinstance(key, bytes) else key + suffix


def parallel_key(key, axes):
    """Mooncake's get_parallelism_key_name()."""
    if len(axes) == 1 and axes[0][0] == "tp":
        return _cat(key, f"_tp_{axes[0][1]}")
    s = ""
    for kind, rank, size, sd, eid, sid in sorted(axes, key=lambda a: _KINDS[a[0]]):
        s += f"__{kind}_{rank}of{size}"
        s += "" if sd is None else f"_sd{sd}"
        s += "" if eid is None else f"_eid{eid}"
        s += "" if sid is None else f"_sid{sid}"
    return _cat(key, s)


def _writer_key(key, rank, size, sd):
    return _cat(key, f"__writer_{rank}of{size}_sd{sd}")


def _header_axes(axes, local_shape):
    """_tensor.header() axes: (kind, rank, count, split_dim, extent along
    it, expert or stage id)."""
    return [(_KINDS[k], r, n, -1 if sd is None else sd,
             0 if sd is None else local_shape[sd], eid if k == "ep" else sid if k == "pp" else 0)
            for k, r, n, sd, eid, sid in axes]


def manifest(global_shape, code, split_dim, count):
    """A WriterShardManifest (96 bytes)."""
    pad = [-1] * (8 - len(global_shape))
    return _MANIFEST.pack(MANIFEST_MAGIC, 1, _MANIFEST.size, code, len(global_shape), split_dim,
                          count, 0, *global_shape, *pad)


def parse_manifest(buf):
    """(dtype code, global shape, split_dim, count) of a manifest, or None."""
    if buf is None or len(buf) != _MANIFEST.size:
        return None
    magic, ver, size, code, ndim, sd, count, _, *shape = _MANIFEST.unpack(bytes(buf))
    if (magic, ver, size) != (MANIFEST_MAGIC, 1, _MANIFEST.size) or not 0 <= sd < ndim <= 8 \
            or count <= 0 or any(d <= 0 for d in shape[:ndim]):
        return None
    return code, tuple(shape[:ndim]), sd, count


def _uniform(shape, sd, count):
    return _int(sd) and 0 <= sd < len(shape) and count > 0 and shape[sd] % count == 0


def _shard(t, sd, rank, count):
    n = t.shape[sd] // count
    return t.narrow(sd, n * rank, n)


def write_items(key, tensor, parallelism, writer_partition):
    """[(key, object bytes)] storing tensor as the request says (see the
    module's text), or [(key, None)] when it cannot be stored so."""
    T = _T()
    bad = [(key, None)]
    if T._writable(tensor) is None or (parallelism is not None and writer_partition is not None):
        return bad
    code, shape = T._CODE[tensor.dtype], tuple(tensor.shape)
    if writer_partition is not None:
        w = writer_partition
        w = tuple(w) if isinstance(w, (tuple, list)) else \
            tuple(getattr(w, a, None) for a in ("rank", "size", "split_dim"))
        if len(w) != 3 or not all(_int(v) for v in w) or not 0 <= w[0] < w[1] or \
                not _uniform(shape, w[2], w[1]):
            return bad
        rank, size, sd = w
        s = _shard(tensor, sd, rank, size)
        axes = _header_axes([("tp", rank, size, sd, None, None)], tuple(s.shape))
        return [(_writer_key(key, rank, size, sd), T.encode(s, shape, axes)),
                (_cat(key, "__writer_manifest"), manifest(shape, code, sd, size))]
    if parallelism is None:
        return [(key, T.encode(tensor))]
    axes = _axes(parallelism)
    if axes is None:
        return bad
    tp = next((a for a in axes if a[0] == "tp"), None)
    if tp is None:  # dp, ep, pp: the tensor as given
        return [(parallel_key(key, axes), T.encode(tensor, shape, _header_axes(axes, shape)))]
    _, rank, size, sd = tp[:4]
    if sd >= len(shape):
        return bad
    if len(axes) == 1:  # the shard is given
        gshape = shape[:sd] + (shape[sd] * size,) + shape[sd + 1:]
        s = tensor
    else:  # the full tensor is given
        if not _uniform(shape, sd, size):
            return bad
        gshape, s = shape, _shard(tensor, sd, rank, size)
    obj = T.encode(s, gshape, _header_axes(axes, tuple(s.shape)))
    return [(parallel_key(key, axes), obj),
            (_cat(key, "__parallelism_manifest"), manifest(gshape, code, sd, size))]


def _target(target):
    """(mode, axes or None) of a ReadTarget (None: as_stored), or None when
    it is not valid."""
    if target is None:
        return "as_stored", None
    mode = getattr(target, "mode", None)
    mode = mode.lower() if isinstance(mode, str) else None
    p = getattr(target, "parallelism", None)
    axes = None if p is None else _axes(p)
    if mode not in _MODES or (p is not None and axes is None) or (mode == "shard" and not axes):
        return None
    return mode, axes


def _matches(m, axes):
    """Whether a parsed object is the shard axes name (Mooncake's
    parallelism_matches_metadata())."""
    if m is None or m.layout_kind != 1 or len(m.axes) != len(axes):
        return False
    stored = sorted((_NAMES.get(a[0]), a[2], a[3], a[4] if a[4] >= 0 else None, a[5])
                    for a in m.axes)
    want = sorted((k, r, n, sd, eid if k == "ep" else sid if k == "pp" else 0)
                  for k, r, n, sd, eid, sid in axes)
    return stored == want


class _Reader:
    """Reads for one request through the store's get_buffer()."""

    def __init__(self, store):
        self.s = store

    def obj(self, key):
        """(buffer, Meta) of the tensor object at key, or (None, None)."""
        buf = self.s.get_buffer(key)
        m = None if buf is None else _T().parse(buf)
        return (buf, m) if m is not None else (None, None)

    def shard(self, key, axes):
        """The buffer of the stored shard axes name, or None."""
        buf, m = self.obj(parallel_key(key, axes))
        if _matches(m, axes):
            return buf
        if len(axes) == 1 and axes[0][0] == "tp":  # a writer_partition shard
            _, rank, size, sd = axes[0][:4]
            buf, m = self.obj(_writer_key(key, rank, size, sd))
            if _matches(m, axes):
                return buf
        return None

    def full(self, key, axes):
        """The whole tensor (torch) at key, put together from its shards
        when stored sharded, or None."""
        T = _T()
        buf, m = self.obj(key)
        if m is not None and m.layout_kind == 0:
            return T.to_tensor(buf)
        keys, want = self.shard_keys(key, axes)
        if keys is None:
            return None
        bufs = self.s.batch_get_buffer(keys)
        parts = [T.to_tensor(b) for b in bufs]
        if any(p is None for p in parts):
            return None
        gshape, sd = want
        t = T.torch.cat(parts, sd)
        return t if tuple(t.shape) == gshape else None

    def shard_keys(self, key, axes):
        """([shard keys in rank order], (global shape, split_dim)) of a
        sharded tensor at key, from its manifest or (a put_tensor_with_tp()
        tensor) its first shard; (None, None) when unknown."""
        for name, writer in (("__parallelism_manifest", False), ("__writer_manifest", True)):
            mf = parse_manifest(self.s.get_buffer(_cat(key, name)))
            if mf is None:
                continue
            _, gshape, sd, count = mf
            if writer:
                return [_writer_key(key, r, count, sd) for r in range(count)], (gshape, sd)
            if axes is None:
                axes = [("tp", 0, count, sd, None, None)]
            if not any(a[0] == "tp" for a in axes):
                return None, None
            return [parallel_key(key, [(a[0], r) + a[2:] if a[0] == "tp" else a for a in axes])
                    for r in range(count)], (gshape, sd)
        _, m = self.obj(_cat(key, "_tp_0"))
        tp = [a for a in m.axes if a[0] == 1] if m is not None else []
        if len(tp) != 1:
            return None, None
        count, sd = tp[0][3], tp[0][4]
        return [_cat(key, f"_tp_{r}") for r in range(count)], (tuple(m.global_shape), sd)


def read(store, key, target):
    """get_tensor_with_parallelism(): (the tensor or None, the raw object
    it is when it is one stored object, else None)."""
    t = _target(target)
    if t is None:
        return None, None
    mode, axes = t
    r = _Reader(store)
    if mode == "as_stored":
        buf, _ = r.obj(key if axes is None else parallel_key(key, axes))
        return _T().to_tensor(buf), buf
    if mode == "shard":
        buf = r.shard(key, axes)
        return _T().to_tensor(buf), buf
    return r.full(key, axes), None


def read_into(store, key, target, buffer_ptr, size):
    """get_tensor_with_parallelism_into(): the tensor object (the stored
    one, or a full one made of the shards) copied into caller memory and
    the tensor there, or None (too small, not registered, not found)."""
    b = store._b
    if b is None:
        return None
    t, raw = read(store, key, target)
    if t is None:
        return None
    obj = raw if raw is not None else _T().encode(t)
    mv = b.memory(buffer_ptr, size) if _int(size) and size >= len(obj) else None
    if mv is None or mv.readonly:
        return None
    mv[:len(obj)] = memoryview(obj).cast("B")
    return _stored_tensor(buffer_ptr if isinstance(buffer_ptr, int) else mv, len(obj))


def _writes(keys, tensors, parallelisms, config, writer_partitions, upsert):
    """put_batch() arguments for the batch writes (a code per tensor)."""
    n = len(keys)
    ps = [None] * n if parallelisms is None else parallelisms
    ws = [None] * n if writer_partitions is None else writer_partitions
    if not n == len(tensors) == len(ps) == len(ws):
        return _Early([INVALID_PARAMS] * n)
    return _tensor_writes([write_items(k, t, p, w) for k, t, p, w in zip(keys, tensors, ps, ws)],
                          config, upsert)


def _from_tensors(ptrs, sizes):
    return [_stored_tensor(p, n) for p, n in zip(ptrs, sizes)]


class ParallelMethods:
    """The *_tensor_with_parallelism methods; MooncakeDistributedStore
    inherits them. Writes are native async (one put_batch of the shard and
    its manifest); reads run in the executor from async_*."""

    @_tensor_write_op
    def put_tensor_with_parallelism(self, key, tensor, parallelism=None, config=None,
                                    writer_partition=None):
        """Stores tensor as a full object (parallelism None) or as the shard
        parallelism or writer_partition names (see mooncake._parallel),
        write-once. 0 or a code: INVALID_PARAMS for an invalid request."""
        return _one_early(_writes([key], [tensor], [parallelism], config, [writer_partition],
                                  False))

    @_tensor_write_op
    def upsert_tensor_with_parallelism(self, key, tensor, parallelism=None, config=None,
                                       writer_partition=None):
        return _one_early(_writes([key], [tensor], [parallelism], config, [writer_partition],
                                  True))

    @_tensor_writes_op
    def batch_put_tensor_with_parallelism(self, keys, tensors, parallelisms=None, config=None,
                                          writer_partitions=None):
        """put_tensor_with_parallelism() of each; a code per tensor."""
        return _writes(keys, tensors, parallelisms, config, writer_partitions, False)

    @_tensor_writes_op
    def batch_upsert_tensor_with_parallelism(self, keys, tensors, parallelisms=None,
                                             config=None, writer_partitions=None):
        return _writes(keys, tensors, parallelisms, config, writer_partitions, True)

    @_tensor_write_op
    def put_tensor_with_parallelism_from(self, key, buffer_ptr, size, parallelism=None,
                                         config=None, writer_partition=None):
        """put_tensor_with_parallelism() of the full tensor object in
        caller memory (INVALID_PARAMS when it holds none)."""
        return _one_early(_writes([key], _from_tensors([buffer_ptr], [size]), [parallelism],
                                  config, [writer_partition], False))

    @_tensor_write_op
    def upsert_tensor_with_parallelism_from(self, key, buffer_ptr, size, parallelism=None,
                                            config=None, writer_partition=None):
        return _one_early(_writes([key], _from_tensors([buffer_ptr], [size]), [parallelism],
                                  config, [writer_partition], True))

    @_tensor_writes_op
    def batch_put_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes, parallelisms=None,
                                               config=None, writer_partitions=None):
        if not len(keys) == len(buffer_ptrs) == len(sizes):
            return _Early([INVALID_PARAMS] * len(keys))
        return _writes(keys, _from_tensors(buffer_ptrs, sizes), parallelisms, config,
                       writer_partitions, False)

    @_tensor_writes_op
    def batch_upsert_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes,
                                                  parallelisms=None, config=None,
                                                  writer_partitions=None):
        if not len(keys) == len(buffer_ptrs) == len(sizes):
            return _Early([INVALID_PARAMS] * len(keys))
        return _writes(keys, _from_tensors(buffer_ptrs, sizes), parallelisms, config,
                       writer_partitions, True)

    def get_tensor_with_parallelism(self, key, target=None):
        """The tensor target asks for (None: as stored), or None."""
        return read(self, key, target)[0]

    def batch_get_tensor_with_parallelism(self, keys, targets=None):
        ts = [None] * len(keys) if targets is None else targets
        if len(ts) != len(keys):
            return [None] * len(keys)
        return [read(self, k, t)[0] for k, t in zip(keys, ts)]

    def get_tensor_with_parallelism_into(self, key, buffer_ptr, size, target=None):
        """get_tensor_with_parallelism() into caller memory (a registered
        address, or a writable buffer): the tensor there, or None."""
        return read_into(self, key, target, buffer_ptr, size)

    def batch_get_tensor_with_parallelism_into(self, keys, buffer_ptrs, sizes, targets=None):
        ts = [None] * len(keys) if targets is None else targets
        if not len(keys) == len(buffer_ptrs) == len(sizes) == len(ts):
            return [None] * len(keys)
        return [read_into(self, k, t, p, n) for k, p, n, t in zip(keys, buffer_ptrs, sizes, ts)]
