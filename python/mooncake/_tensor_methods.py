"""The tensor methods of MooncakeDistributedStore (a mixin): put/get_tensor,
their batch, pub, upsert, _into, _from and _with_tp forms, the *_into_cuda
forms and safetensors files. The layout and torch live in mooncake._tensor,
imported on the first tensor call."""

import ctypes
import logging
import os

from ._errors import (
    BUFFER_OVERFLOW,
    FILE_NOT_FOUND,
    INVALID_PARAMS,
    OBJECT_NOT_FOUND,
    STORE_CLOSED,
)
from ._ops import _Early, _closed_list, _op, _opts

log = logging.getLogger("mooncake")

_tensor_module = None


def _T():
    """mooncake._tensor, imported (with torch) on the first tensor call."""
    global _tensor_module
    if _tensor_module is None:
        from . import _tensor as _tensor_module
    return _tensor_module


def _tensor_put_args(key, tensor, config, upsert):
    """put_parts() arguments storing one tensor as a tensor object (its data
    not copied when contiguous), or _Early(INVALID_PARAMS) for what is not a
    storable tensor."""
    o = _opts(config)
    if type(o) is _Early:
        return o
    p = _T().parts(tensor)
    return _Early(INVALID_PARAMS) if p is None else (key, p, o, upsert)


def _tensor_writes(groups, config, upsert):
    """put_batch() arguments for tensor writes: groups is a list, one per
    result, of lists of (key, object bytes or None: not storable). The
    extra last argument tells _tensor_writes_post how to shape the codes."""
    o = _opts(config)
    if type(o) is _Early:
        return _Early([o.value] * len(groups))
    keys, values, where = [], [], []
    for g, items in enumerate(groups):
        for k, v in items:
            if v is not None:
                keys.append(k)
                values.append(v)
                where.append(g)
    return (keys, values, o, upsert, (where, [INVALID_PARAMS if any(v is None for _, v in items)
                                              else 0 for items in groups]))


def _tensor_writes_post(codes, args):
    """A code per group: its first error, else 0."""
    where, out = args[-1]
    out = list(out)
    for g, rc in zip(where, codes):
        if rc != 0 and out[g] == 0:
            out[g] = rc
    return out


def _tensor_writes_closed(args):
    return [STORE_CLOSED] * len(args[-1][1])


def _one(post):
    """The post of a method with one group: its code."""
    return lambda r, args: post(r, args)[0]


def _one_early(args):
    """_tensor_writes() arguments of one group, or its _Early code."""
    return _Early(args.value[0]) if type(args) is _Early else args


# The methods that store tensor objects through put_batch(): a code per
# tensor, or (_tensor_write_op) the one code of a single tensor's writes.
_tensor_writes_op = _op("put_batch", _tensor_writes_closed, _tensor_writes_post, nargs=4)
_tensor_write_op = _op("put_batch", STORE_CLOSED, _one(_tensor_writes_post), nargs=4)


def _tensor_batch(keys, tensors, config, upsert):
    if len(keys) != len(tensors):
        return _Early([INVALID_PARAMS] * len(keys))
    enc = _T().encode
    return _tensor_writes([[(k, enc(t))] for k, t in zip(keys, tensors)], config, upsert)


def _tp_writes(keys, tensors, config, tp_size, split_dim):
    """put_batch() arguments storing each tensor's TP shards (Mooncake
    writes all shards, whatever tp_rank)."""
    if len(keys) != len(tensors):
        return _Early([INVALID_PARAMS] * len(keys))
    T = _T()
    groups = [T.tp_items(k, t, tp_size, split_dim) or [(k, None)] for k, t in zip(keys, tensors)]
    return _tensor_writes(groups, config, False)


def _stored_tensor(target, size):
    """The tensor of a tensor object in caller memory (int address or
    buffer), or None."""
    mv = _T().memory(target, size)
    return None if mv is None else _T().to_tensor(mv)


def _readable(store, target, size):
    """Whether caller memory may be read to look for a tensor object: an
    object, or an int address inside memory registered with the store (any
    other address may be unmapped: reading it would kill the process)."""
    if not isinstance(target, int) or isinstance(target, bool):
        return True
    b = store._b
    return b is not None and type(size) is int and size > 0 and \
        b.memory(target, size) is not None


def _given_tensor(store, target, size):
    """_stored_tensor() of memory that _readable() allows, else None."""
    return _stored_tensor(target, size) if _readable(store, target, size) else None


def _from_writes(store, keys, ptrs, sizes, upsert):
    """put_from_batch() arguments storing tensor objects from caller memory
    as they are; an item that holds no valid tensor object fails with
    INVALID_PARAMS (nothing is stored for it)."""
    if not len(keys) == len(ptrs) == len(sizes):
        return _Early([INVALID_PARAMS] * len(keys))
    T = _T()
    ok = []
    for p, n in zip(ptrs, sizes):
        mv = T.memory(p, n) if _readable(store, p, n) else None
        ok.append(mv is not None and T.parse(mv) is not None)
    pick = [i for i, good in enumerate(ok) if good]
    return ([keys[i] for i in pick], [ptrs[i] for i in pick], [sizes[i] for i in pick], None,
            upsert, (pick, [0 if good else INVALID_PARAMS for good in ok]))


def _from_one(store, key, ptr, size, upsert):
    """put_from() arguments storing the tensor object in caller memory as it
    is, or _Early(INVALID_PARAMS) when it holds none."""
    if store._b is None and isinstance(ptr, int):
        return (key, ptr, size, None, upsert)  # closed: STORE_CLOSED, nothing read
    mv = _T().memory(ptr, size) if _readable(store, ptr, size) else None
    if mv is None or _T().parse(mv) is None:
        return _Early(INVALID_PARAMS)
    return (key, ptr, size, None, upsert)


def _tensors(bufs, args):
    T = _T()
    return [T.to_tensor(b) for b in bufs]


def _tensor_post(buf, args):
    return _T().to_tensor(buf)


def _into_post(n, args):
    """get_into's byte count -> the tensor in the caller's memory."""
    return None if n < 0 else _stored_tensor(args[1], n)


def _into_batch_post(counts, args):
    return [None if n < 0 else _stored_tensor(p, n) for n, p in zip(counts, args[1])]


def _nones(args):
    return [None] * len(args[0])


def _cuda_dest(tensor):
    """Checks a get_tensor_into_cuda() destination: a CPU tensor (CUDA is not
    available to this client)."""
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"destination must be a torch.Tensor, not {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise RuntimeError(
            f"destination on {tensor.device}: this client has no CUDA support (Mooncake FS "
            f"reads into CPU tensors only; torch.cuda.is_available() is "
            f"{torch.cuda.is_available()})")
    return tensor


def _copy_payload(buf, dest):
    """Copies a tensor object's data into dest (a CPU tensor); the bytes
    copied, OBJECT_NOT_FOUND (buf is None), INVALID_PARAMS (not a tensor
    object) or BUFFER_OVERFLOW (dest is smaller)."""
    if buf is None:
        return OBJECT_NOT_FOUND
    m = _T().parse(buf)
    if m is None:
        return INVALID_PARAMS
    if m.data_bytes > dest.numel() * dest.element_size() or not dest.is_contiguous():
        return BUFFER_OVERFLOW
    mv = memoryview(buf).cast("B")
    src = (ctypes.c_char * m.data_bytes).from_buffer_copy(mv[len(mv) - m.data_bytes:]) \
        if mv.readonly else (ctypes.c_char * m.data_bytes).from_buffer(mv, len(mv) - m.data_bytes)
    ctypes.memmove(dest.data_ptr(), src, m.data_bytes)
    return m.data_bytes


class TensorMethods:
    """The tensor methods; MooncakeDistributedStore inherits them."""

    @_op("put_parts", STORE_CLOSED)
    def put_tensor(self, key, tensor):
        """Stores a CPU torch.Tensor as a tensor object (Mooncake's header,
        then the data in C order; a non-contiguous tensor is made contiguous
        first), write-once like put(). 0 or a code: INVALID_PARAMS for
        anything else than a tensor of a supported dtype with 0 to 8
        dimensions, none of them 0."""
        return _tensor_put_args(key, tensor, None, False)

    @_op("put_parts", STORE_CLOSED)
    def pub_tensor(self, key, tensor, config=None):
        """put_tensor() with a ReplicateConfig."""
        return _tensor_put_args(key, tensor, config, False)

    @_op("put_parts", STORE_CLOSED)
    def upsert_tensor(self, key, tensor):
        """put_tensor() that replaces an existing value."""
        return _tensor_put_args(key, tensor, None, True)

    @_op("put_parts", STORE_CLOSED)
    def upsert_pub_tensor(self, key, tensor, config=None):
        return _tensor_put_args(key, tensor, config, True)

    @_tensor_writes_op
    def batch_put_tensor(self, keys, tensors_list):
        """put_tensor() of each pair; a list of codes."""
        return _tensor_batch(keys, tensors_list, None, False)

    @_tensor_writes_op
    def batch_pub_tensor(self, keys, tensors_list, config=None):
        return _tensor_batch(keys, tensors_list, config, False)

    @_tensor_writes_op
    def batch_upsert_tensor(self, keys, tensors_list):
        return _tensor_batch(keys, tensors_list, None, True)

    @_tensor_writes_op
    def batch_upsert_pub_tensor(self, keys, tensors_list, config=None):
        return _tensor_batch(keys, tensors_list, config, True)

    @_op("put_from", STORE_CLOSED)
    def put_tensor_from(self, key, buffer_ptr, size):
        """put_from() of a tensor object already in caller memory ([header]
        [data], as get_tensor_into() leaves it; size: its length).
        INVALID_PARAMS when those bytes are no valid tensor object."""
        return _from_one(self, key, buffer_ptr, size, False)

    @_op("put_from", STORE_CLOSED)
    def upsert_tensor_from(self, key, buffer_ptr, size):
        return _from_one(self, key, buffer_ptr, size, True)

    @_op("put_from_batch", _tensor_writes_closed, _tensor_writes_post, nargs=5)
    def batch_put_tensor_from(self, keys, buffer_ptrs, sizes):
        return _from_writes(self, keys, buffer_ptrs, sizes, False)

    @_op("put_from_batch", _tensor_writes_closed, _tensor_writes_post, nargs=5)
    def batch_upsert_tensor_from(self, keys, buffer_ptrs, sizes):
        return _from_writes(self, keys, buffer_ptrs, sizes, True)

    @_op("get_buffer", None, _tensor_post)
    def get_tensor(self, key):
        """The stored tensor (sharing the memory it was read into), or None
        when missing or not a tensor object."""
        return (key,)

    @_op("get_buffer_batch", _nones, _tensors)
    def batch_get_tensor(self, keys):
        return (keys,)

    @_op("get_into", None, _into_post)
    def get_tensor_into(self, key, buffer_ptr, size):
        """Reads the tensor object into caller memory (a registered int
        address, or a writable buffer) and returns the tensor there (the
        data after the header: no copy), or None."""
        return (key, buffer_ptr, size)

    @_op("get_into_batch", _nones, _into_batch_post)
    def batch_get_tensor_into(self, keys, buffer_ptrs, sizes):
        if not len(keys) == len(buffer_ptrs) == len(sizes):
            return _Early([None] * len(keys))
        return (keys, buffer_ptrs, sizes)

    @_op("get_buffer", STORE_CLOSED, lambda buf, args: _copy_payload(buf, args[1]), nargs=1)
    def get_tensor_into_cuda(self, key, tensor):
        """Copies the stored tensor's data into the CPU tensor `tensor`
        (contiguous, large enough); the bytes copied or a code. A tensor on
        another device raises RuntimeError: this client has no CUDA."""
        return (key, _cuda_dest(tensor))

    @_op("get_buffer_batch", _closed_list, nargs=1,
         post=lambda bufs, args: [_copy_payload(b, d) for b, d in zip(bufs, args[1])])
    def batch_get_tensor_into_cuda(self, keys, tensors):
        if len(keys) != len(tensors):
            return _Early([INVALID_PARAMS] * len(keys))
        return (keys, [_cuda_dest(t) for t in tensors])

    # ---- tensor parallelism: shard rank of tp_size is key_tp_<rank> ----

    @_tensor_write_op
    def put_tensor_with_tp(self, key, tensor, tp_rank=0, tp_size=1, split_dim=0):
        """Stores tensor split into tp_size shards along split_dim (sizes
        differing by at most one) under key_tp_0 ... key_tp_<tp_size-1>,
        every shard whatever tp_rank, as Mooncake does; tp_size <= 1:
        put_tensor(key). 0 or the first error."""
        return _one_early(_tp_writes([key], [tensor], None, tp_size, split_dim))

    @_tensor_write_op
    def pub_tensor_with_tp(self, key, tensor, config=None, tp_rank=0, tp_size=1, split_dim=0):
        return _one_early(_tp_writes([key], [tensor], config, tp_size, split_dim))

    @_tensor_writes_op
    def batch_put_tensor_with_tp(self, base_keys, tensors_list, tp_rank=0, tp_size=1,
                                 split_dim=0):
        return _tp_writes(base_keys, tensors_list, None, tp_size, split_dim)

    @_tensor_writes_op
    def batch_pub_tensor_with_tp(self, base_keys, tensors_list, config=None, tp_rank=0,
                                 tp_size=1, split_dim=0):
        return _tp_writes(base_keys, tensors_list, config, tp_size, split_dim)

    @_tensor_write_op
    def put_tensor_with_tp_from(self, key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0):
        """put_tensor_with_tp() of the full tensor object in caller memory."""
        t = _given_tensor(self, buffer_ptr, size)
        return _one_early(_tp_writes([key], [t], None, tp_size, split_dim))

    @_tensor_writes_op
    def batch_put_tensor_with_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank=0, tp_size=1,
                                      split_dim=0):
        if not len(base_keys) == len(buffer_ptrs) == len(sizes):
            return _Early([INVALID_PARAMS] * len(base_keys))
        tensors = [_given_tensor(self, p, n) for p, n in zip(buffer_ptrs, sizes)]
        return _tp_writes(base_keys, tensors, None, tp_size, split_dim)

    @_op("get_buffer", None, _tensor_post)
    def get_tensor_with_tp(self, key, tp_rank=0, tp_size=1, split_dim=0):
        """The shard tp_rank of tp_size (key_tp_<tp_rank>; tp_size <= 1: the
        tensor at key), or None."""
        return (_T().tp_key(key, tp_rank, tp_size),)

    @_op("get_buffer_batch", _nones, _tensors)
    def batch_get_tensor_with_tp(self, base_keys, tp_rank=0, tp_size=1):
        return ([_T().tp_key(k, tp_rank, tp_size) for k in base_keys],)

    @_op("get_into", None, _into_post)
    def get_tensor_with_tp_into(self, key, buffer_ptr, size, tp_rank=0, tp_size=1, split_dim=0):
        return (_T().tp_key(key, tp_rank, tp_size), buffer_ptr, size)

    @_op("get_into_batch", _nones, _into_batch_post)
    def batch_get_tensor_with_tp_into(self, base_keys, buffer_ptrs, sizes, tp_rank=0,
                                      tp_size=1):
        if not len(base_keys) == len(buffer_ptrs) == len(sizes):
            return _Early([None] * len(base_keys))
        return ([_T().tp_key(k, tp_rank, tp_size) for k in base_keys], buffer_ptrs, sizes)

    # ---- safetensors files ----

    def save_tensor_to_safetensor(self, key, file_name=None, filesystem="auto",
                                  storage_options=None, tensor_name=None):
        """Writes the tensor at key to a safetensors file (file_name, default
        the key) as its one entry tensor_name (default the key). 0, or
        FILE_NOT_FOUND (no tensor at key, or no such directory),
        INVALID_PARAMS (a file system other than local),
        PERSISTENT_FAIL (the file cannot be written)."""
        if filesystem not in ("auto", "file", "local", None) or storage_options:
            return INVALID_PARAMS
        t = self.get_tensor(key)
        if t is None:
            return FILE_NOT_FOUND
        name = tensor_name if tensor_name is not None else os.fsdecode(key)
        try:
            _T().save_safetensors(os.fspath(key if file_name is None else file_name), name, t)
        except OSError as e:
            log.error("mooncake save_tensor_to_safetensor %r: %s", key, e)
            return _T().code_of_oserror(e)
        return 0

    def load_tensor_from_safetensor(self, key=None, file_name=None, filesystem="auto",
                                    storage_options=None, tensor_name=None):
        """Reads a safetensors file, stores its entry tensor_name (else the
        one named key, else its only entry) with put_tensor() under key
        (default file_name), and returns the tensor; None on any error."""
        if file_name is None or filesystem not in ("auto", "file", "local", None) or \
                storage_options:
            return None
        try:
            t = _T().pick(_T().load_safetensors(os.fspath(file_name)), tensor_name, key)
        except (OSError, ValueError) as e:
            log.error("mooncake load_tensor_from_safetensor %r: %s", file_name, e)
            return None
        rc = self.put_tensor(os.fspath(file_name) if key is None else key, t)
        return t if rc == 0 else None
