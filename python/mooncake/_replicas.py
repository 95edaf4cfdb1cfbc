"""Replica and task control (a mixin of MooncakeDistributedStore):
get_replica_desc(), batch_get_replica_desc(), batch_replica_clear(),
create_copy_task(), create_move_task(), query_task(), and the classes they
return, with Mooncake's names.

Where replicas are comes from the master's answer to an OPEN of the
current version (libmooncake's mc_obj_replicas()): each replica is a memory
replica on one segment, named by its node's data address ("host:port";
"" for an embedded store's own segment), which is the name
ReplicateConfig.preferred_segment and the task targets use.

Copy and move tasks run in the master (libmooncake's mc_task_copy(),
mc_task_move(), mc_task_query()): it allocates space on each target
segment, the target node copies the bytes from a replica over the data
plane, and the master adds the replica to the same version (a move then
drops the source replica). The task id is the master's 64-bit id as a
UUID (UUID(int=id)); the master keeps its last 1,024 finished tasks.
"""

import enum
import errno
import uuid

from ._errors import (
    INVALID_PARAMS,
    SEGMENT_NOT_FOUND,
    STORE_CLOSED,
    TASK_NOT_FOUND,
    TASK_PENDING_LIMIT_EXCEEDED,
    UNAVAILABLE_IN_CURRENT_MODE,
)

NIL = uuid.UUID(int=0)


class ReplicaStatus(enum.IntEnum):
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class TaskType(enum.IntEnum):
    REPLICA_COPY = 0
    REPLICA_MOVE = 1


class TaskStatus(enum.IntEnum):
    PENDING = 0
    PROCESSING = 1
    SUCCESS = 2
    FAILED = 3


class BufferDescriptor:
    """Where a memory replica lies: size_ (bytes of its pieces),
    buffer_address_ (the first piece's offset in its segment),
    transport_endpoint_ (the node's data address), as Mooncake's
    AllocatedBuffer::Descriptor; also segment_id and extents (pieces)."""

    __slots__ = ("size_", "buffer_address_", "transport_endpoint_", "segment_id", "extents")

    def __init__(self, size, address, endpoint, segment_id, extents):
        self.size_, self.buffer_address_, self.transport_endpoint_ = size, address, endpoint
        self.segment_id, self.extents = segment_id, extents

    size = property(lambda self: self.size_)
    buffer_address = property(lambda self: self.buffer_address_)
    transport_endpoint = property(lambda self: self.transport_endpoint_)

    def __repr__(self):
        return (f"BufferDescriptor(size_={self.size_}, buffer_address_={self.buffer_address_}, "
                f"transport_endpoint_={self.transport_endpoint_!r}, "
                f"segment_id={self.segment_id}, extents={self.extents})")


class MemoryDescriptor:
    __slots__ = ("buffer_descriptor",)

    def __init__(self, buffer_descriptor):
        self.buffer_descriptor = buffer_descriptor

    def __repr__(self):
        return f"MemoryDescriptor({self.buffer_descriptor!r})"


class DiskDescriptor:
    """Mooncake's disk replica (file_path, object_size). This store keeps
    no disk replicas: none is ever returned."""

    __slots__ = ("file_path", "object_size")

    def __init__(self, file_path="", object_size=0):
        self.file_path, self.object_size = file_path, object_size


class ReplicaDescriptor:
    """One replica: status (ReplicaStatus; COMPLETE for a published
    version's) and its MemoryDescriptor."""

    __slots__ = ("status", "_mem")

    def __init__(self, status, mem):
        self.status, self._mem = status, mem

    def is_memory_replica(self):
        return True

    def is_disk_replica(self):
        return False

    def get_memory_descriptor(self):
        return self._mem

    def get_disk_descriptor(self):
        raise RuntimeError("not a disk replica (this store keeps replicas in memory only)")

    def __repr__(self):
        return f"ReplicaDescriptor(status={self.status.name}, {self._mem!r})"


class QueryTaskResponse:
    __slots__ = ("id", "type", "status", "created_at_ms_epoch", "last_updated_at_ms_epoch",
                 "assigned_client", "message")

    def __repr__(self):
        return (f"QueryTaskResponse(id={self.id}, type={self.type.name}, "
                f"status={self.status.name}, message={self.message!r})")


def _descs(info):
    """ReplicaDescriptors of a backend's replicas() answer."""
    _, _, reps = info
    return [ReplicaDescriptor(ReplicaStatus.COMPLETE, MemoryDescriptor(
        BufferDescriptor(nbytes, off, addr, seg, ext))) for seg, addr, off, nbytes, ext in reps]


def _addrs(info):
    return {r[1] for r in info[2]}


def _create_code(r):
    """Mooncake's code for a failed task creation (-errno)."""
    from . import _store

    return {-errno.EBUSY: TASK_PENDING_LIMIT_EXCEEDED, -errno.ENXIO: SEGMENT_NOT_FOUND,
            -errno.EOPNOTSUPP: UNAVAILABLE_IN_CURRENT_MODE}.get(r, None) or _store.to_code(r)


class ReplicaMethods:
    """Replica and task control; MooncakeDistributedStore inherits it."""

    def get_replica_desc(self, key):
        """The ReplicaDescriptors of key's current version (memory replicas,
        COMPLETE); [] when missing, on any error, and on the mount backend
        (the mount shows no placement)."""
        b = self._b
        info = b.replicas(key) if b is not None else None
        return _descs(info) if isinstance(info, tuple) else []

    def batch_get_replica_desc(self, keys):
        """{key: get_replica_desc(key)} for the keys that exist."""
        b = self._b
        out = {}
        for k in keys:
            info = b.replicas(k) if b is not None else None
            if isinstance(info, tuple):
                out[k] = _descs(info)
        return out

    def batch_replica_clear(self, keys, segment_name=""):
        """Drops replicas, returning the keys cleared. segment_name "": the
        whole object, unless a read lease holds it (skipped). A segment
        name (a node's data address): the object's replica there; the
        object goes when that was its only one (unless a read lease holds
        it), and keeps its other replicas otherwise (skipped while a handle
        has it open)."""
        b = self._b
        if b is None:
            return []
        out = []
        for k in keys:
            if segment_name:
                info = b.replicas(k)
                if not isinstance(info, tuple) or segment_name not in _addrs(info):
                    continue
                if _addrs(info) != {segment_name}:  # placement: the direct backend
                    from ._direct import key_bytes

                    if b._s.replica_drop(key_bytes(k), segment_name) == 0:
                        out.append(k)
                    continue
            if b.remove(k, False) == 0:
                out.append(k)
        return out

    def _task_backend(self):
        b = self._b
        if b is None:
            return None, STORE_CLOSED
        if b.kind != "direct":
            return None, UNAVAILABLE_IN_CURRENT_MODE
        return b, 0

    def _create_task(self, key, *args):
        from ._direct import key_bytes  # the direct backend: the extension is there

        b, rc = self._task_backend()
        if b is None:
            return NIL, rc
        k = key_bytes(key)
        if k is None or not k:
            return NIL, INVALID_PARAMS
        r = b._s.task_create(k, *args)
        return (uuid.UUID(int=r), 0) if r >= 0 else (NIL, _create_code(r))

    def create_copy_task(self, key, targets):
        """Asks the master to copy key's object to the segments targets
        (data addresses; "" an embedded store's own segment); (task UUID, 0),
        or (UUID(int=0), code): OBJECT_NOT_FOUND, INVALID_PARAMS (no targets,
        more than 8), SEGMENT_NOT_FOUND (a target is no segment),
        TASK_PENDING_LIMIT_EXCEEDED (1,024 tasks wait),
        UNAVAILABLE_IN_CURRENT_MODE (mount backend; a master's own segment
        as the target of a copy)."""
        if isinstance(targets, str) or not targets or \
                not all(isinstance(x, str) for x in targets):
            return (NIL, STORE_CLOSED) if self._b is None else (NIL, INVALID_PARAMS)
        return self._create_task(key, list(targets))

    def create_move_task(self, key, source, target):
        """Asks the master to move key's replica from segment source to
        segment target; (task UUID, 0) or (UUID(int=0), code): as
        create_copy_task(), and INVALID_PARAMS when source holds no replica
        or is the target."""
        if not isinstance(source, str) or not isinstance(target, str):
            return (NIL, STORE_CLOSED) if self._b is None else (NIL, INVALID_PARAMS)
        return self._create_task(key, target, source)

    def query_task(self, task_id):
        """(QueryTaskResponse, 0), or (None, TASK_NOT_FOUND)."""
        b, rc = self._task_backend()
        if b is None:
            return None, rc
        if not isinstance(task_id, uuid.UUID) or task_id.int >> 64:
            return None, TASK_NOT_FOUND
        r = b._s.task_query(task_id.int)
        if isinstance(r, int):
            return None, TASK_NOT_FOUND if r == -errno.ENOENT else _create_code(r)
        kind, status, _err, created, updated, node, message = r
        q = QueryTaskResponse()
        q.id, q.type, q.status, q.message = task_id, TaskType(kind), TaskStatus(status), message
        q.created_at_ms_epoch, q.last_updated_at_ms_epoch = created, updated
        q.assigned_client = uuid.UUID(int=node)
        return q, 0
