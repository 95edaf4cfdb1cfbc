"""Segments and the dummy client (a mixin of MooncakeDistributedStore):
setup_dummy(), init_all(), allocate_and_mount_segment(),
unmount_and_free_segment(), mount_segment(), unmount_segment().

A libmooncake store contributes at most one segment (global_segment_size
at setup). allocate_and_mount_segment() contributes more memory from this
process the way a cluster grows: it opens one more node of the same
cluster inside this process (a libmooncake store with that segment, its
data served on a loopback port of its own), whose data address is the
segment id; unmount_and_free_segment() closes it, which unmounts the
segment at the master and frees the memory. File-backed segments
(mount_segment() of a path) do not exist here.
"""

import socket

from ._errors import INVALID_PARAMS, STORE_CLOSED, UNAVAILABLE_IN_CURRENT_MODE


def _loopback_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SegmentMethods:
    """setup_dummy() and the segment calls; MooncakeDistributedStore
    inherits them."""

    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address):
        """Sets this store up as a lightweight client of the full client at
        server_address: a local mooncake-fs or store serving the protocol
        (its Unix socket, "unix:/path", or its listen address) or a master.
        It contributes no segment and reaches the segments of co-located
        nodes over shared memory. mem_pool_size and local_buffer_size are
        checked as sizes and unused (no staging pool is needed). 0 or a
        setup() code."""
        from .store import _size_arg

        if not isinstance(server_address, str) or not server_address or \
                _size_arg("mem_pool_size", mem_pool_size) is None:
            return INVALID_PARAMS
        return self.setup({"master_server_addr": server_address, "global_segment_size": 0,
                           "local_buffer_size": local_buffer_size})

    def init_all(self, protocol, device_name, mount_segment_size=16 << 20):
        """Mooncake's shorthand: setup("localhost:12345", "127.0.0.1:2379",
        mount_segment_size, 1 GiB, protocol, device_name,
        "127.0.0.1:50051"), i.e. a node contributing mount_segment_size
        bytes to the master on 127.0.0.1:50051. setup()'s codes, and
        INVALID_PARAMS when already set up (as Mooncake)."""
        if self._b is not None:
            return INVALID_PARAMS
        return self.setup({"local_hostname": "localhost:12345",
                           "metadata_server": "127.0.0.1:2379",
                           "global_segment_size": mount_segment_size,
                           "local_buffer_size": 1 << 30, "protocol": protocol,
                           "rdma_devices": device_name,
                           "master_server_addr": "127.0.0.1:50051"})

    def allocate_and_mount_segment(self, size, protocol="tcp", location=""):
        """Contributes size more bytes of this process's memory to the
        cluster as a new segment. {"ret": 0, "segment_ids": [its data
        address], "allocated_size": size}, or {"ret": code, "segment_ids":
        [], "allocated_size": 0}: INVALID_PARAMS (a bad size or protocol),
        UNAVAILABLE_IN_CURRENT_MODE (an embedded store or the mount: no
        cluster to grow), RPC_FAIL (the master refused or is gone)."""
        def fail(code):
            return {"ret": code, "segment_ids": [], "allocated_size": 0}

        from .store import _size_arg

        b = self._b
        if b is None:
            return fail(STORE_CLOSED)
        kw = getattr(self, "_direct_kw", None)
        if b.kind != "direct" or not kw or not kw.get("master"):
            return fail(UNAVAILABLE_IN_CURRENT_MODE)
        n = _size_arg("size", size)
        if not n or not isinstance(location, str) or protocol not in ("tcp", "rdma", "auto"):
            return fail(INVALID_PARAMS)
        addr = f"127.0.0.1:{_loopback_port()}"
        extra = self._open_direct(**dict(kw, segment_size=n, listen=addr, protocol=protocol))
        if isinstance(extra, int):
            return fail(extra)
        with self._lock:
            self.__dict__.setdefault("_extra_segments", {})[addr] = extra
        return {"ret": 0, "segment_ids": [addr], "allocated_size": n}

    def unmount_and_free_segment(self, segment_ids, grace_period_seconds=0):
        """Unmounts segments allocate_and_mount_segment() made (the master
        drops their replicas at once) and frees their memory. 0, or
        INVALID_PARAMS (an id not made here; nothing is unmounted),
        UNAVAILABLE_IN_CURRENT_MODE (a grace period: not supported)."""
        if grace_period_seconds:
            return UNAVAILABLE_IN_CURRENT_MODE
        with self._lock:
            extra = self.__dict__.get("_extra_segments", {})
            if isinstance(segment_ids, str) or not all(i in extra for i in segment_ids):
                return INVALID_PARAMS
            gone = [extra.pop(i) for i in dict.fromkeys(segment_ids)]
        for b in gone:
            b.close()
        return 0

    def mount_segment(self, path, size, offset=0, protocol="tcp", location=""):
        """File or shared-memory backed segments do not exist here:
        {"ret": UNAVAILABLE_IN_CURRENT_MODE, "segment_ids": []} (use
        allocate_and_mount_segment())."""
        return {"ret": STORE_CLOSED if self._b is None else UNAVAILABLE_IN_CURRENT_MODE,
                "segment_ids": []}

    def unmount_segment(self, segment_ids, grace_period_seconds=0):
        """Segments of allocate_and_mount_segment() (mount_segment() makes
        none): as unmount_and_free_segment()."""
        return self.unmount_and_free_segment(segment_ids, grace_period_seconds)

    def _close_extra_segments(self):
        with self._lock:
            extra = self.__dict__.pop("_extra_segments", {})
        for b in extra.values():
            b.close()
