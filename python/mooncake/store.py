"""mooncake.store - MooncakeDistributedStore, compatible with Mooncake's Python
client: the same method names, integer return codes, b"" on a miss.

Backends (chosen by setup(), see docs/PYTHON.md):

- direct: libmooncake in this process through the C extension
  mooncake._store. Embedded (master and segment in this process) when the
  master address is empty or "embedded"; with any other address
  ("host:port") a client of that mooncake-master (or of an embedded
  mooncake-fs serving the protocol), and a node contributing
  global_segment_size bytes when that is > 0. An unreachable master makes
  setup() return RPC_FAIL (-900) within timeout_ms.
- mount: setup({"mount_point": path}) works on the files of a mounted
  mooncake-fs (pure Python).
"""

import ctypes
import enum
import errno
import functools
import logging
import os
import re
import socket
import threading
from collections.abc import Mapping

from . import _errors
from ._errors import (  # noqa: F401  (re-exported constants)
    BUFFER_OVERFLOW,
    INTERNAL_ERROR,
    INVALID_KEY,
    INVALID_PARAMS,
    NO_AVAILABLE_HANDLE,
    OBJECT_ALREADY_EXISTS,
    OBJECT_HAS_LEASE,
    OBJECT_NOT_FOUND,
    OK,
    RPC_FAIL,
    STORE_CLOSED,
    UNAVAILABLE_IN_CURRENT_MODE,
    UNAVAILABLE_IN_CURRENT_STATUS,
    FILE_NOT_FOUND,
    PERSISTENT_FAIL,
)

try:
    from . import _store
except ImportError as e:  # the mount backend works without the extension
    _store = None
    _STORE_IMPORT_ERROR = e

__all__ = [
    "MooncakeDistributedStore", "ReplicateConfig", "SoftPinAction", "ErrorCode",
    "OK", "INTERNAL_ERROR", "BUFFER_OVERFLOW", "NO_AVAILABLE_HANDLE", "INVALID_KEY",
    "INVALID_PARAMS", "OBJECT_NOT_FOUND", "OBJECT_ALREADY_EXISTS", "OBJECT_HAS_LEASE",
    "RPC_FAIL", "UNAVAILABLE_IN_CURRENT_STATUS", "UNAVAILABLE_IN_CURRENT_MODE", "STORE_CLOSED",
    "FILE_NOT_FOUND", "PERSISTENT_FAIL",
]

log = logging.getLogger("mooncake")


class ErrorCode(enum.IntEnum):
    """The return codes, as an enum (the module constants are plain ints)."""

    OK = OK
    INTERNAL_ERROR = INTERNAL_ERROR
    BUFFER_OVERFLOW = BUFFER_OVERFLOW
    NO_AVAILABLE_HANDLE = NO_AVAILABLE_HANDLE
    INVALID_KEY = INVALID_KEY
    INVALID_PARAMS = INVALID_PARAMS
    OBJECT_NOT_FOUND = OBJECT_NOT_FOUND
    OBJECT_ALREADY_EXISTS = OBJECT_ALREADY_EXISTS
    OBJECT_HAS_LEASE = OBJECT_HAS_LEASE
    RPC_FAIL = RPC_FAIL
    UNAVAILABLE_IN_CURRENT_STATUS = UNAVAILABLE_IN_CURRENT_STATUS
    UNAVAILABLE_IN_CURRENT_MODE = UNAVAILABLE_IN_CURRENT_MODE
    FILE_NOT_FOUND = FILE_NOT_FOUND
    PERSISTENT_FAIL = PERSISTENT_FAIL


class SoftPinAction(enum.IntEnum):
    PRESERVE = 0  # new objects: no pin (this store does not carry pins across upserts)
    ENABLE = 1
    DISABLE = 2


#: TTL of a soft pin when soft_pin_ttl_ms is None (Mooncake's default, 30 min).
DEFAULT_SOFT_PIN_TTL_MS = 30 * 60 * 1000

_PIN_NONE, _PIN_SOFT, _PIN_HARD = 0, 1, 2


class ReplicateConfig:
    """How put()/upsert() place an object: replica_num replicas (at most one
    per segment; an embedded store has one), a soft pin (evicted last, for
    soft_pin_ttl_ms) or a hard pin (never evicted). preferred_segment, a
    node's data address ("host:port"), asks the master to place the first
    replica there when it has room (best effort; the direct backend only);
    without it, the first of preferred_segments is used."""

    __slots__ = ("replica_num", "soft_pin_action", "_soft_pin_ttl_ms", "with_hard_pin",
                 "preferred_segment", "preferred_segments", "prefer_alloc_in_same_node")

    def __init__(self, replica_num=1, soft_pin_action=SoftPinAction.PRESERVE,
                 soft_pin_ttl_ms=None, with_hard_pin=False, preferred_segment="",
                 preferred_segments=None):
        self.replica_num = replica_num
        self.soft_pin_action = SoftPinAction(soft_pin_action)
        self.soft_pin_ttl_ms = soft_pin_ttl_ms
        self.with_hard_pin = with_hard_pin
        self.preferred_segment = preferred_segment
        self.preferred_segments = list(preferred_segments or [])
        self.prefer_alloc_in_same_node = False

    @property
    def with_soft_pin(self):
        return self.soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, value):
        self.soft_pin_action = SoftPinAction.ENABLE if value else SoftPinAction.PRESERVE

    @property
    def soft_pin_ttl_ms(self):
        return self._soft_pin_ttl_ms

    @soft_pin_ttl_ms.setter
    def soft_pin_ttl_ms(self, value):
        if value is not None and (type(value) is not int or value < 0):
            raise TypeError("soft_pin_ttl_ms must be None or a non-negative int")
        self._soft_pin_ttl_ms = value

    def _opts(self):
        """(replica_num, pin, soft_pin_ttl_ms, preferred segment or None) for
        the backends, or None if replica_num is not a positive int or the
        preferred segment is not a string."""
        n = self.replica_num
        if type(n) is not int or n < 1:
            return None
        pref = self.preferred_segment
        if not pref and self.preferred_segments:
            pref = self.preferred_segments[0]
        if pref is not None and not isinstance(pref, str):
            return None
        pref = pref or None
        if self.with_hard_pin:
            return (n, _PIN_HARD, 0, pref)
        if self.soft_pin_action == SoftPinAction.ENABLE:
            ttl = self._soft_pin_ttl_ms
            return (n, _PIN_SOFT, DEFAULT_SOFT_PIN_TTL_MS if ttl is None else ttl, pref)
        return (n, _PIN_NONE, 0, pref)

    def __repr__(self):
        return (f"ReplicateConfig(replica_num={self.replica_num}, "
                f"soft_pin_action={self.soft_pin_action.name}, "
                f"soft_pin_ttl_ms={self._soft_pin_ttl_ms}, with_hard_pin={self.with_hard_pin}, "
                f"preferred_segment={self.preferred_segment!r}, "
                f"preferred_segments={self.preferred_segments!r})")

    __str__ = __repr__


class _Early:
    """What an argument check returns to end the call at once with `value`."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _opts(config):
    if config is None:
        return None
    if not isinstance(config, ReplicateConfig):
        raise TypeError(f"config must be a ReplicateConfig, not {type(config).__name__}")
    o = config._opts()
    return _Early(INVALID_PARAMS) if o is None else o


def _closed_list(args):
    return [STORE_CLOSED] * len(args[0])


def _first_error(results, args):
    return next((r for r in results if r != 0), 0)


def _start(self, check, closed, a, kw):
    """Runs an op's argument check (see _op) for the store self. Returns
    (None, result) when the call ends before the backend: the check gave an
    _Early, or the store is not set up (result: closed's); otherwise
    (backend, args) with the check's whole tuple."""
    args = check(self, *a, **kw)
    if type(args) is _Early:
        return None, args.value
    b = self._b  # read once: close() on another thread may clear it
    if b is None:
        return None, closed(args) if callable(closed) else closed
    return b, args


def _op(backend_method, closed, post=None, nargs=None):
    """Makes a store method from an argument check: `check(self, ...)` returns
    the backend method's arguments (a tuple; only the first nargs are passed
    when given) or an _Early. `closed` is the result on a store that is not
    set up (a value, or a function of the arguments); `post(result, args)`
    shapes the result. The async class builds its native async_<name> from the
    same parts."""

    def deco(check):
        @functools.wraps(check)
        def method(self, *a, **kw):
            b, args = _start(self, check, closed, a, kw)
            if b is None:
                return args
            r = getattr(b, backend_method)(*(args if nargs is None else args[:nargs]))
            return post(r, args) if post else r

        method._mc_op = (backend_method, closed, post, check, nargs)
        return method

    return deco


def _put_args(key, value, config, upsert):
    o = _opts(config)
    return o if type(o) is _Early else (key, value, o, upsert)


def _batch_put_args(keys, values, config, upsert):
    o = _opts(config)
    if type(o) is _Early:
        return o
    if len(keys) != len(values):
        return _Early(INVALID_PARAMS)
    return (keys, values, o, upsert)


def _from_args(key, ptr, size, config, upsert):
    o = _opts(config)
    return o if type(o) is _Early else (key, ptr, size, o, upsert)


def _batch_from_args(keys, ptrs, sizes, config, upsert):
    o = _opts(config)
    if type(o) is _Early:
        return _Early([INVALID_PARAMS] * len(keys))
    return (keys, ptrs, sizes, o, upsert)


def _ranges_args(buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets, all_sizes):
    """Flattens get_into_ranges()'s nested lists; marks each (buffer, key)
    whose shape does not match so that it reports INVALID_PARAMS."""
    keys, addrs, srcs, sizes, shape = [], [], [], [], []
    n = len(buffer_ptrs)
    top_ok = len(all_keys) == n and len(all_dst_offsets) == n and len(all_src_offsets) == n \
        and len(all_sizes) == n
    for i in range(len(all_keys)):
        row = []
        ks = all_keys[i]
        for j in range(len(ks)):
            try:
                d, s, z = all_dst_offsets[i][j], all_src_offsets[i][j], all_sizes[i][j]
                ok = top_ok and len(d) == len(s) == len(z) and len(all_dst_offsets[i]) == len(ks) \
                    and len(all_src_offsets[i]) == len(ks) and len(all_sizes[i]) == len(ks)
            except (IndexError, TypeError):
                ok, z = False, [0]
            if not ok:
                row.append(-max(len(z) if isinstance(z, (list, tuple)) else 1, 1))
                continue
            row.append(len(z))
            for k in range(len(z)):
                if type(buffer_ptrs[i]) is not int or d[k] < 0 or s[k] < 0 or z[k] < 0:
                    keys.append(ks[j])
                    addrs.append(0)  # never registered: INVALID_PARAMS
                    srcs.append(0)
                    sizes.append(0)
                    continue
                keys.append(ks[j])
                addrs.append(buffer_ptrs[i] + d[k])
                srcs.append(s[k])
                sizes.append(z[k])
        shape.append(row)
    return (keys, addrs, srcs, sizes, shape)


def _ranges_post(flat, args):
    out, at = [], 0
    for row in args[4]:
        r = []
        for count in row:
            if count < 0:
                r.append([INVALID_PARAMS] * -count)
            else:
                r.append(list(flat[at:at + count]))
                at += count
        out.append(r)
    return out


def _ranges_closed(args):
    return _ranges_post([STORE_CLOSED] * len(args[0]), args)


def _size_arg(name, value):
    """A size given as an int or a string ("16MB", "16 MB", "1G"); None if
    invalid."""
    if value is None:
        return 0
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str):
        if _store is not None:
            try:
                return _store.parse_size(value)
            except ValueError:
                return None
        m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)(i?b)?\s*", value, re.I)
        if not m or (m.group(3) and not m.group(2) and m.group(3).lower() != "b"):
            return None
        return int(m.group(1)) << (10 * " kmgt".index(m.group(2).lower() or " "))
    return None


# ---- tensors (the layout and torch live in _tensor, imported on first use) ----

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
        return _Early([INVALID_PARAMS] * len(groups))
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


def _from_writes(keys, ptrs, sizes, upsert):
    """put_from_batch() arguments storing tensor objects from caller memory
    as they are; an item that holds no valid tensor object fails with
    INVALID_PARAMS (nothing is stored for it)."""
    if not len(keys) == len(ptrs) == len(sizes):
        return _Early([INVALID_PARAMS] * len(keys))
    T = _T()
    ok = []
    for p, n in zip(ptrs, sizes):
        mv = T.memory(p, n)
        ok.append(mv is not None and T.parse(mv) is not None)
    pick = [i for i, good in enumerate(ok) if good]
    return ([keys[i] for i in pick], [ptrs[i] for i in pick], [sizes[i] for i in pick], None,
            upsert, (pick, [0 if good else INVALID_PARAMS for good in ok]))


def _from_one(key, ptr, size, upsert):
    """put_from() arguments storing the tensor object in caller memory as it
    is, or _Early(INVALID_PARAMS) when it holds none."""
    mv = _T().memory(ptr, size)
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


_SETUP_KEYS = {
    "local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
    "protocol", "rdma_devices", "device_name", "master_server_addr", "master_server_address",
    "mount_point", "lease_ms", "default_kv_lease_ttl", "evict_high_pct", "evict_ratio_pct",
    "engine", "timeout_ms", "listen",
}

_EMBEDDED = ("", "embedded", None)


class MooncakeDistributedStore:
    """A Mooncake store client. Create it, then setup(); every method returns
    Mooncake's integer codes (0 success, negative errors) unless it returns
    data. On a store that is not set up or is closed every method returns
    STORE_CLOSED (UNAVAILABLE_IN_CURRENT_STATUS, -1010), b"", None or a list of
    those."""

    def __init__(self):
        self._b = None  # the backend, None when not set up or closed
        self._hostname = ""
        self._lock = threading.Lock()

    # ---- setup and lifecycle ----

    def setup(self, local_hostname=None, metadata_server="", global_segment_size=None,
              local_buffer_size=None, protocol="tcp", rdma_devices="", master_server_addr="",
              engine=None, **options):
        """setup(local_hostname, metadata_server, global_segment_size,
        local_buffer_size, protocol, rdma_devices, master_server_addr) or
        setup(config: dict). Returns 0, or a negative code:
        INVALID_PARAMS (a bad size, option or address), RPC_FAIL (the master
        did not answer within timeout_ms), UNAVAILABLE_IN_CURRENT_STATUS
        (already set up)."""
        if isinstance(local_hostname, Mapping):
            cfg = dict(local_hostname)
            cfg.update(options)
        else:
            cfg = dict(local_hostname=local_hostname, metadata_server=metadata_server,
                       global_segment_size=global_segment_size,
                       local_buffer_size=local_buffer_size, protocol=protocol,
                       rdma_devices=rdma_devices, master_server_addr=master_server_addr,
                       engine=engine, **options)
        unknown = set(cfg) - _SETUP_KEYS
        if unknown:
            log.error("mooncake setup: unknown option(s) %s", ", ".join(sorted(unknown)))
            return INVALID_PARAMS
        sizes = {}
        for name in ("global_segment_size", "local_buffer_size"):
            sizes[name] = _size_arg(name, cfg.get(name))
            if sizes[name] is None:
                log.error("mooncake setup: %s=%r is not a size", name, cfg.get(name))
                return INVALID_PARAMS
        nums = {}
        for name in ("lease_ms", "default_kv_lease_ttl", "evict_high_pct", "evict_ratio_pct",
                     "timeout_ms"):
            v = cfg.get(name, 0) or 0
            if type(v) is not int or v < 0:
                log.error("mooncake setup: %s=%r is not a non-negative int", name, v)
                return INVALID_PARAMS
            nums[name] = v
        if cfg.get("engine") is not None:
            log.error("mooncake setup: a TransferEngine cannot be shared with this store")
            return INVALID_PARAMS
        master = cfg.get("master_server_addr")
        if master in (None, ""):
            master = cfg.get("master_server_address")
        listen = cfg.get("listen")
        for name, v in (("master_server_addr", master), ("listen", listen)):
            if v is not None and not isinstance(v, str):
                log.error("mooncake setup: %s=%r is not a str", name, v)
                return INVALID_PARAMS
        protocol = cfg.get("protocol") or "tcp"
        if protocol not in ("tcp", "rdma", "auto"):
            log.error("mooncake setup: protocol=%r: use tcp, rdma or auto", protocol)
            return INVALID_PARAMS
        rdma_devices = cfg.get("rdma_devices") or cfg.get("device_name") or ""
        if not isinstance(rdma_devices, str):
            log.error("mooncake setup: rdma_devices=%r is not a str", rdma_devices)
            return INVALID_PARAMS
        mount = cfg.get("mount_point")
        with self._lock:
            if self._b is not None:
                return UNAVAILABLE_IN_CURRENT_STATUS
            if mount:
                backend = self._open_mount(mount)
            else:
                backend = self._open_direct(
                    segment_size=sizes["global_segment_size"],
                    lease_ms=nums["lease_ms"] or nums["default_kv_lease_ttl"],
                    master=None if master in _EMBEDDED else str(master),
                    evict_high_pct=nums["evict_high_pct"],
                    evict_ratio_pct=nums["evict_ratio_pct"],
                    listen=listen or None,
                    timeout_ms=nums["timeout_ms"],
                    protocol=protocol,
                    rdma_devices=rdma_devices or None)
            if isinstance(backend, int):
                return backend
            self._b = backend
            self._hostname = cfg.get("local_hostname") or socket.gethostname()
        return 0

    @staticmethod
    def _open_direct(**kw):
        if _store is None:
            log.error("mooncake setup: the C extension is missing (%s)", _STORE_IMPORT_ERROR)
            return INTERNAL_ERROR
        from ._direct import DirectBackend

        try:
            return DirectBackend(**kw)
        except OSError as e:
            where = f" (master {kw['master']})" if kw.get("master") else ""
            log.error("mooncake setup: %s%s", e.strerror or e, where)
            if not e.errno:
                return INTERNAL_ERROR
            if kw.get("master") and e.errno == errno.ENOENT:
                return RPC_FAIL  # the master's host name does not resolve
            if e.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL) and \
                    kw.get("listen"):
                return INVALID_PARAMS  # the listen address cannot be bound
            return _store.to_code(-e.errno)
        except (OverflowError, ValueError) as e:
            log.error("mooncake setup: %s", e)
            return INVALID_PARAMS

    @staticmethod
    def _open_mount(path):
        path = os.fspath(path)
        if not os.path.isdir(path):
            log.error("mooncake setup: mount_point %s is not a directory", path)
            return INVALID_PARAMS
        if not os.path.ismount(path):
            log.error("mooncake setup: nothing is mounted at %s", path)
            return RPC_FAIL
        try:
            from ._mount import MountBackend
        except ImportError as e:
            log.error("mooncake setup: the mount backend needs aiofiles (%s)", e)
            return INTERNAL_ERROR
        return MountBackend(path)

    def close(self):
        """Waits for operations in flight and closes the store; 0, also when
        already closed."""
        with self._lock:
            b, self._b = self._b, None
        if b is not None:
            b.close()
        return 0

    def health_check(self):
        """0 healthy, 1 not set up (or closed), 2 the store does not answer.
        Direct backend: one statfs of the store, which with a master is a
        single request to it (at most timeout_ms); 2 when it fails (master
        unreachable, connection lost). Mount backend: a statvfs of the mount
        point; 2 when its daemon is gone."""
        b = self._b
        return 1 if b is None else b.health()

    def get_hostname(self):
        """The local_hostname given to setup() (the host name by default)."""
        return self._hostname if self._b is not None else ""

    @property
    def backend(self):
        """'direct', 'mount', or None when not set up."""
        b = self._b
        return None if b is None else b.kind

    # ---- writes ----

    @_op("put", STORE_CLOSED)
    def put(self, key, value, config=None):
        """Stores value (bytes-like) under key, once: if key exists the call
        succeeds and the old value stays (use upsert() to replace). Returns 0
        or a code (INVALID_KEY, NO_AVAILABLE_HANDLE when it does not fit)."""
        return _put_args(key, value, config, False)

    @_op("put", STORE_CLOSED)
    def upsert(self, key, value, config=None):
        """Stores value under key, replacing any previous value. Returns 0 or a
        code."""
        return _put_args(key, value, config, True)

    @_op("put_parts", STORE_CLOSED)
    def put_parts(self, key, *parts, config=None):
        """put() of the concatenation of parts (bytes-like), without joining
        them first."""
        return _put_args(key, parts, config, False)

    @_op("put_parts", STORE_CLOSED)
    def upsert_parts(self, key, *parts, config=None):
        return _put_args(key, parts, config, True)

    @_op("put_batch", STORE_CLOSED, _first_error)
    def put_batch(self, keys, values, config=None):
        """put() of every pair; 0 if all succeeded, else the first error."""
        return _batch_put_args(keys, values, config, False)

    @_op("put_batch", STORE_CLOSED, _first_error)
    def upsert_batch(self, keys, values, config=None):
        return _batch_put_args(keys, values, config, True)

    @_op("put_from", STORE_CLOSED)
    def put_from(self, key, buffer_ptr, size, config=None):
        """put() of size bytes at buffer_ptr, an address inside a registered
        buffer (INVALID_PARAMS otherwise), or of an object with the buffer
        protocol."""
        return _from_args(key, buffer_ptr, size, config, False)

    @_op("put_from", STORE_CLOSED)
    def upsert_from(self, key, buffer_ptr, size, config=None):
        return _from_args(key, buffer_ptr, size, config, True)

    @_op("put_from_batch", _closed_list)
    def batch_put_from(self, keys, buffer_ptrs, sizes, config=None):
        """put_from() of each; a list of codes."""
        return _batch_from_args(keys, buffer_ptrs, sizes, config, False)

    @_op("put_from_batch", _closed_list)
    def batch_upsert_from(self, keys, buffer_ptrs, sizes, config=None):
        return _batch_from_args(keys, buffer_ptrs, sizes, config, True)

    # ---- reads ----

    @_op("get", b"")
    def get(self, key):
        """The value of key as bytes; b"" when missing (or on any error)."""
        return (key,)

    @_op("get_batch", lambda args: [b""] * len(args[0]))
    def get_batch(self, keys):
        """get() of each key: a list of bytes."""
        return (keys,)

    @_op("get_buffer", None)
    def get_buffer(self, key):
        """The value as an object with the buffer protocol (and ptr(),
        size()), read once into memory it owns, with no further copy; None
        when missing."""
        return (key,)

    @_op("get_buffer_batch", lambda args: [None] * len(args[0]))
    def batch_get_buffer(self, keys):
        return (keys,)

    @_op("get_into", STORE_CLOSED)
    def get_into(self, key, buffer_ptr, size=None):
        """Reads the value into caller memory in place: buffer_ptr is an int
        address inside a registered buffer with room for size bytes, or a
        writable object with the buffer protocol (bytearray, numpy array).
        Returns the bytes read, or a code: OBJECT_NOT_FOUND, BUFFER_OVERFLOW
        (the value is larger than size; nothing written), INVALID_PARAMS
        (memory not registered)."""
        return (key, buffer_ptr, size)

    @_op("get_into_batch", _closed_list)
    def batch_get_into(self, keys, buffer_ptrs, sizes):
        """get_into() of each; a list of byte counts or codes."""
        if not len(keys) == len(buffer_ptrs) == len(sizes):
            return _Early([INVALID_PARAMS] * len(keys))
        return (keys, buffer_ptrs, sizes)

    @_op("read_ranges", _ranges_closed, _ranges_post, nargs=4)
    def get_into_ranges(self, buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets,
                        all_sizes):
        """Mooncake's buffer-major ranged read: results[i][j][k] is the bytes
        copied from all_keys[i][j] at all_src_offsets[i][j][k] to
        buffer_ptrs[i] + all_dst_offsets[i][j][k] (registered memory), or a
        code."""
        return _ranges_args(buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets, all_sizes)

    @_op("exist", STORE_CLOSED)
    def is_exist(self, key):
        """1 if key exists, 0 if not, or a negative code."""
        return (key,)

    @_op("exist_batch", _closed_list)
    def batch_is_exist(self, keys):
        return (keys,)

    @_op("size", STORE_CLOSED)
    def get_size(self, key):
        """The value's size in bytes, or a negative code."""
        return (key,)

    # ---- removal ----

    @_op("remove", STORE_CLOSED)
    def remove(self, key, force=False):
        """Removes key. OBJECT_HAS_LEASE while a recent get() holds its read
        lease, unless force."""
        return (key, force)

    @_op("remove_batch", _closed_list)
    def batch_remove(self, keys, force=False):
        return (keys, force)

    def remove_by_regex(self, regex_pattern, force=False):
        """Removes every key matching the regular expression (re.search).
        Returns how many were removed, or a negative code."""
        try:
            rx = re.compile(regex_pattern)
        except (re.error, TypeError):
            return INVALID_PARAMS
        return self._remove_matching(lambda k: rx.search(k) is not None, force)

    def remove_all(self, force=False):
        """Removes every key (leased ones only with force). Returns how many
        were removed, or a negative code."""
        return self._remove_matching(None, force)

    def _remove_matching(self, match, force):
        b = self._b
        if b is None:
            return STORE_CLOSED
        keys = b.keys()
        if isinstance(keys, int):
            return keys
        if match is not None:
            keys = [k for k in keys
                    if match(os.fsdecode(k) if isinstance(k, bytes) else k)]
        if not keys:
            return 0
        return sum(1 for r in b.remove_batch(keys, force) if r == 0)

    # ---- tensors (torch; the stored layout is Mooncake's, see _tensor) ----

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
        return _from_one(key, buffer_ptr, size, False)

    @_op("put_from", STORE_CLOSED)
    def upsert_tensor_from(self, key, buffer_ptr, size):
        return _from_one(key, buffer_ptr, size, True)

    @_op("put_from_batch", _tensor_writes_closed, _tensor_writes_post, nargs=5)
    def batch_put_tensor_from(self, keys, buffer_ptrs, sizes):
        return _from_writes(keys, buffer_ptrs, sizes, False)

    @_op("put_from_batch", _tensor_writes_closed, _tensor_writes_post, nargs=5)
    def batch_upsert_tensor_from(self, keys, buffer_ptrs, sizes):
        return _from_writes(keys, buffer_ptrs, sizes, True)

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
        t = _stored_tensor(buffer_ptr, size)
        return _one_early(_tp_writes([key], [t], None, tp_size, split_dim))

    @_tensor_writes_op
    def batch_put_tensor_with_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank=0, tp_size=1,
                                      split_dim=0):
        if not len(base_keys) == len(buffer_ptrs) == len(sizes):
            return _Early([INVALID_PARAMS] * len(base_keys))
        tensors = [_stored_tensor(p, n) for p, n in zip(buffer_ptrs, sizes)]
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

    # ---- registered buffers ----

    def register_buffer(self, buffer_ptr, size=None):
        """Registers memory for put_from()/get_into(): an int address and its
        size, or an object with the buffer protocol (kept alive until
        unregistered). 0 or INVALID_PARAMS."""
        b = self._b
        return STORE_CLOSED if b is None else b.register(buffer_ptr, size)

    def unregister_buffer(self, buffer_ptr):
        """0, or INVALID_PARAMS if buffer_ptr starts no registered buffer.
        Operations already using it finish first."""
        b = self._b
        return STORE_CLOSED if b is None else b.unregister(buffer_ptr)

    def __repr__(self):
        b = self._b
        return f"<{type(self).__name__} {b.kind if b else 'not set up'}>"
