"""Host memory for zero-copy calls: MooncakeHostMemAllocator (page-aligned
anonymous mappings), bind_to_numa_node() (libnuma), and the store's
alloc_from_mem_pool() (a mixin of MooncakeDistributedStore: memory
allocated and registered with the store, freed when it closes)."""

import ctypes
import ctypes.util
import threading

from ._errors import INVALID_PARAMS

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_PROT_RW, _MAP_PRIVATE_ANON = 0x1 | 0x2, 0x02 | 0x20
_MAP_FAILED = ctypes.c_void_p(-1).value


def _map(size):
    """size bytes of zeroed anonymous memory (page-aligned): its address, or
    0."""
    if type(size) is not int or size <= 0:
        return 0
    p = _libc.mmap(None, size, _PROT_RW, _MAP_PRIVATE_ANON, -1, 0)
    return 0 if p in (None, _MAP_FAILED) else p


class MooncakeHostMemAllocator:
    """Host memory for zero-copy buffers: alloc(size) -> address (0 on
    failure), free(address) -> 0 or INVALID_PARAMS (not from alloc()). The
    memory is zeroed and page-aligned; register it with a store before
    passing it to put_from()/get_into()."""

    def __init__(self):
        self._lock = threading.Lock()
        self._maps = {}  # address -> size

    def alloc(self, size):
        p = _map(size)
        if p:
            with self._lock:
                self._maps[p] = size
        return p

    def free(self, ptr):
        with self._lock:
            size = self._maps.pop(ptr, None)
        if size is None:
            return INVALID_PARAMS
        _libc.munmap(ptr, size)
        return 0

    def __del__(self):
        for p, size in self._maps.items():
            _libc.munmap(p, size)


_numa = None


def bind_to_numa_node(node):
    """Runs the calling thread on the CPUs of NUMA node `node` and prefers
    that node's memory for its allocations (libnuma's numa_run_on_node()
    and numa_set_preferred()). Raises ValueError for a node that does not
    exist, RuntimeError without NUMA support (libnuma1 missing, or a kernel
    without NUMA)."""
    global _numa
    if _numa is None:
        name = ctypes.util.find_library("numa") or "libnuma.so.1"
        try:
            _numa = ctypes.CDLL(name, use_errno=True)
        except OSError as e:
            raise RuntimeError(f"bind_to_numa_node needs libnuma (Debian's libnuma1): {e}")
    if _numa.numa_available() < 0:
        raise RuntimeError("bind_to_numa_node: this system has no NUMA support")
    if type(node) is not int or not 0 <= node <= _numa.numa_max_node():
        raise ValueError(f"no NUMA node {node!r} (nodes 0 to {_numa.numa_max_node()})")
    if _numa.numa_run_on_node(node) != 0:
        raise OSError(ctypes.get_errno(), f"numa_run_on_node({node}) failed")
    _numa.numa_set_preferred(node)


class MemPoolMethods:
    """alloc_from_mem_pool(); MooncakeDistributedStore inherits it."""

    def alloc_from_mem_pool(self, size):
        """size bytes of memory already registered with this store, for
        put_from()/get_into(): its address, or 0 (not set up, a bad size,
        no memory). It stays valid until close(), which frees it (Mooncake
        takes it from the client's local buffer, also freed with the
        client)."""
        b = self._b
        p = _map(size) if b is not None else 0
        if not p:
            return 0
        if b.register(p, size) != 0:
            _libc.munmap(p, size)
            return 0
        with self._lock:
            self.__dict__.setdefault("_pool_maps", []).append((p, size))
        return p

    def _free_pool(self):
        """After the backend is closed: unmaps alloc_from_mem_pool()'s
        memory."""
        with self._lock:
            maps = self.__dict__.pop("_pool_maps", [])
        for p, size in maps:
            _libc.munmap(p, size)
