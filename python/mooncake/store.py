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

import enum
import errno
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
    SEGMENT_NOT_FOUND,
    STORE_CLOSED,
    UNAVAILABLE_IN_CURRENT_MODE,
    UNAVAILABLE_IN_CURRENT_STATUS,
    FILE_NOT_FOUND,
    PERSISTENT_FAIL,
    TASK_NOT_FOUND,
    TASK_PENDING_LIMIT_EXCEEDED,
)

from ._config import (  # noqa: F401
    DEFAULT_SOFT_PIN_TTL_MS, ObjectDataType, ReplicateConfig, SoftPinAction)
from ._ops import _Early, _closed_list, _first_error, _op, _opts, _start  # noqa: F401
from ._parallel import ParallelAxis, ReadTarget, TensorParallelism, ParallelMethods  # noqa: F401
from ._replicas import (  # noqa: F401
    BufferDescriptor, DiskDescriptor, MemoryDescriptor, QueryTaskResponse, ReplicaDescriptor,
    ReplicaMethods, ReplicaStatus, TaskStatus, TaskType)
from ._buffers import BufferMethods
from ._memory import MemPoolMethods, MooncakeHostMemAllocator, bind_to_numa_node  # noqa: F401
from ._segments import SegmentMethods
from ._sessions import SessionMethods
from ._tensor_methods import TensorMethods

try:
    from . import _store
except ImportError as e:  # the mount backend works without the extension
    _store = None
    _STORE_IMPORT_ERROR = e

__all__ = [
    "MooncakeDistributedStore", "ReplicateConfig", "SoftPinAction", "ErrorCode", "ObjectDataType",
    "OK", "INTERNAL_ERROR", "BUFFER_OVERFLOW", "NO_AVAILABLE_HANDLE", "INVALID_KEY",
    "INVALID_PARAMS", "OBJECT_NOT_FOUND", "OBJECT_ALREADY_EXISTS", "OBJECT_HAS_LEASE",
    "RPC_FAIL", "UNAVAILABLE_IN_CURRENT_STATUS", "UNAVAILABLE_IN_CURRENT_MODE", "STORE_CLOSED",
    "FILE_NOT_FOUND", "PERSISTENT_FAIL", "ParallelAxis", "TensorParallelism", "ReadTarget",
    "METADATA_SIZE_XATTR", "TASK_NOT_FOUND", "TASK_PENDING_LIMIT_EXCEEDED", "ReplicaStatus",
    "ReplicaDescriptor", "MemoryDescriptor", "DiskDescriptor", "BufferDescriptor", "TaskType",
    "TaskStatus", "QueryTaskResponse", "MooncakeHostMemAllocator",
    "bind_to_numa_node",
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
    TASK_NOT_FOUND = TASK_NOT_FOUND
    TASK_PENDING_LIMIT_EXCEEDED = TASK_PENDING_LIMIT_EXCEEDED


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
        return _Early([o.value] * len(keys))
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



#: The extended attribute of an object stored by put_from_with_metadata():
#: the length of the metadata its value starts with (decimal ASCII).
METADATA_SIZE_XATTR = b"user.mooncake.metadata_size"

_SETUP_KEYS = {
    "local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
    "protocol", "rdma_devices", "device_name", "master_server_addr", "master_server_address",
    "mount_point", "lease_ms", "default_kv_lease_ttl", "evict_high_pct", "evict_ratio_pct",
    "engine", "timeout_ms", "listen", "auth_secret_file",
    # Mooncake's further options (_mooncake_options() says what each does here)
    "enable_ssd_offload", "ssd_offload_path", "tenant_id", "enable_client_http_server",
    "client_http_port", "ipc_socket_path", "enable_egm_store_pool", "egm_numa_nodes",
}


def _flag(v):
    """A boolean option as Mooncake takes it (a bool, or in the dict form a
    string such as "true" or "0"); None when it is neither."""
    if v is None or isinstance(v, bool):
        return bool(v)
    if isinstance(v, int):
        return v != 0
    if isinstance(v, str) and v.strip().lower() in ("true", "1", "yes", "on"):
        return True
    if isinstance(v, str) and v.strip().lower() in ("false", "0", "no", "off", ""):
        return False
    return None


def _mooncake_options(cfg, embedded):
    """Checks Mooncake's options that this store has no tier or service
    for, or serves its own way. Returns a code, or (HTTP port to serve the
    metrics on or None, Unix socket path to serve the protocol on or
    None)."""
    ssd, egm, http = (_flag(cfg.get(k)) for k in (
        "enable_ssd_offload", "enable_egm_store_pool", "enable_client_http_server"))
    tenant = cfg.get("tenant_id")
    ipc = cfg.get("ipc_socket_path") or None
    port = cfg.get("client_http_port") or 0
    if isinstance(port, str) and port.strip().isdigit():
        port = int(port)
    if None in (ssd, egm, http) or type(port) is not int or not 0 <= port < 65536 or \
            any(v is not None and not isinstance(v, str) for v in (
                tenant, ipc, cfg.get("ssd_offload_path"), cfg.get("egm_numa_nodes"))):
        log.error("mooncake setup: a Mooncake option has the wrong type")
        return INVALID_PARAMS
    if ssd or egm or tenant not in (None, "", "default") or (ipc and not embedded):
        log.error("mooncake setup: SSD offload, EGM pools, tenants other than 'default' and "
                  "an ipc_socket_path beyond an embedded store are not available here")
        return UNAVAILABLE_IN_CURRENT_MODE
    if ipc and cfg.get("listen"):
        log.error("mooncake setup: ipc_socket_path and listen both say where to serve")
        return INVALID_PARAMS
    return (port if http else None), ipc

_EMBEDDED = ("", "embedded", None)


class MooncakeDistributedStore(TensorMethods, ParallelMethods, ReplicaMethods, SegmentMethods,
                               BufferMethods, MemPoolMethods, SessionMethods):
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
              engine=None, enable_ssd_offload=False, ssd_offload_path="", tenant_id="default",
              **options):
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
                       engine=engine, enable_ssd_offload=enable_ssd_offload,
                       ssd_offload_path=ssd_offload_path, tenant_id=tenant_id, **options)
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
        secret = cfg.get("auth_secret_file") or None
        for name, v in (("master_server_addr", master), ("listen", listen),
                        ("auth_secret_file", secret)):
            if v is not None and not isinstance(v, str):
                log.error("mooncake setup: %s=%r is not a str", name, v)
                return INVALID_PARAMS
        if secret is not None and not os.path.isfile(secret):
            log.error("mooncake setup: auth_secret_file %s is no file", secret)
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
        extra = _mooncake_options(cfg, not mount and master in _EMBEDDED)
        if isinstance(extra, int):
            return extra
        http_port, ipc = extra
        if ipc:
            listen = "unix:" + ipc
        if mount and http_port is not None:
            log.error("mooncake setup: the mount backend serves no HTTP")
            return UNAVAILABLE_IN_CURRENT_MODE
        with self._lock:
            if self._b is not None:
                return UNAVAILABLE_IN_CURRENT_STATUS
            if mount:
                backend = self._open_mount(mount)
            else:
                self._direct_kw = kw = dict(
                    segment_size=sizes["global_segment_size"],
                    lease_ms=nums["lease_ms"] or nums["default_kv_lease_ttl"],
                    master=None if master in _EMBEDDED else str(master),
                    evict_high_pct=nums["evict_high_pct"],
                    evict_ratio_pct=nums["evict_ratio_pct"],
                    listen=listen or None,
                    secret_file=secret,
                    timeout_ms=nums["timeout_ms"],
                    protocol=protocol,
                    rdma_devices=rdma_devices or None)
                backend = self._open_direct(**kw)
                if http_port is not None and not isinstance(backend, int):
                    backend = self._serve_http(backend, http_port)
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
            if kw.get("secret_file") and e.errno in (errno.EPERM, errno.EISDIR, errno.EINVAL):
                return INVALID_PARAMS  # the secret file cannot be used (mode, content)
            if e.errno == errno.EACCES:
                return RPC_FAIL  # the master refused: another secret, or none
            if e.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL) and \
                    kw.get("listen"):
                return INVALID_PARAMS  # the listen address cannot be bound
            return _store.to_code(-e.errno)
        except (OverflowError, ValueError) as e:
            log.error("mooncake setup: %s", e)
            return INVALID_PARAMS

    def _serve_http(self, backend, port):
        """Serves the store's metrics and /health on 127.0.0.1:port (0: any
        free port; client_http_port tells which); backend, or
        INVALID_PARAMS (closed) when the port cannot be bound."""
        got = backend._s.serve_metrics(f"127.0.0.1:{port}")
        if got < 0:
            log.error("mooncake setup: client HTTP server on port %d: %s", port,
                      os.strerror(-got))
            backend.close()
            return INVALID_PARAMS
        self._http_port = got
        return backend

    @property
    def client_http_port(self):
        """The port of the HTTP server (enable_client_http_server), or 0."""
        return getattr(self, "_http_port", 0) if self._b is not None else 0

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
            log.error("mooncake setup: cannot load the mount backend (%s)", e)
            return INTERNAL_ERROR
        return MountBackend(path)

    def close(self):
        """Waits for operations in flight and closes the store; 0, also when
        already closed. A close while another thread closes the store
        returns when that one has finished."""
        self._close_extra_segments()
        me = threading.get_ident()
        with self._lock:
            b, self._b = self._b, None
            if b is not None:
                self._closing = (threading.Event(), me)
            closing = self.__dict__.get("_closing")
        if b is None:
            if closing is not None and closing[1] != me:  # not from within the close itself
                closing[0].wait()
            return 0
        try:
            b.close()
            self._free_pool()  # the operations that used it are done
            with self._lock:
                self.__dict__.pop("_put_sessions", None)  # open sessions end with the store
                self.__dict__.pop("_get_sessions", None)
        finally:
            closing[0].set()
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
        """A node of a cluster: its data address ("host:port" as bound), the
        name of its segment in replica descriptors, which
        ReplicateConfig.preferred_segment takes (as Mooncake's host:port).
        Otherwise the local_hostname given to setup() (the host name by
        default); "" when not set up."""
        b = self._b
        if b is None:
            return ""
        kw = getattr(self, "_direct_kw", None) or {}
        if b.kind == "direct" and kw.get("master") and kw.get("segment_size"):
            return b.served_addr() or self._hostname
        return self._hostname

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

    def put_from_with_metadata(self, key, buffer_ptr, metadata_buffer_ptr, size, metadata_size,
                               config=None):
        """Stores metadata_size bytes at metadata_buffer_ptr followed by size
        bytes at buffer_ptr as key's value (Mooncake's layout: metadata
        first), write-once like put_from(), and records where the data
        starts as the object's extended attribute METADATA_SIZE_XATTR (the
        decimal metadata_size), published with the value in one step. Both
        addresses are registered memory (or buffer objects). size 0 stores
        nothing and returns 0, as Mooncake. 0 or a code: INVALID_PARAMS
        (memory not registered, bad sizes), INTERNAL_ERROR (-1, as Mooncake:
        config.prefer_alloc_in_same_node)."""
        o = _opts(config)
        if type(o) is _Early:
            return o.value
        if config is not None and config.prefer_alloc_in_same_node:
            return INTERNAL_ERROR
        for n in (size, metadata_size):
            if type(n) is not int or n < 0:
                return INVALID_PARAMS
        b = self._b
        if b is None:
            return STORE_CLOSED
        if size == 0:
            return 0
        data = b.memory(buffer_ptr, size)
        meta = b.memory(metadata_buffer_ptr, metadata_size)
        if data is None or meta is None:
            return INVALID_PARAMS
        return b.put_with_xattrs(key, [meta, data],
                                 {METADATA_SIZE_XATTR: b"%d" % metadata_size}, o, False)

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
