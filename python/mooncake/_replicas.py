"""Replica and task control (a mixin of MooncakeDistributedStore):
get_replica_desc(), batch_get_replica_desc(), batch_replica_clear(),
create_copy_task(), create_move_task(), query_task(), and the classes they
return, with Mooncake's names.

Where replicas are comes from the master's answer to an OPEN of the
current version (libmooncake's mc_obj_replicas()): each replica is a memory
replica on one segment, named by its node's data address ("host:port";
"" for an embedded store's own segment), which is the name
ReplicateConfig.preferred_segment and the task targets use.

Copy and move tasks run in this client, not in the master: the master's
repair machinery re-replicates only versions that lost replicas, onto
segments it picks, and has no request to place a replica on a named
segment. A task reads the object and writes it again as a new version
placed with the target as preferred segment (see docs/PYTHON.md for what
that means), then checks where the replicas went.
"""

import enum
import queue
import threading
import time
import uuid

from ._config import ReplicateConfig
from ._errors import (
    INVALID_PARAMS,
    OBJECT_NOT_FOUND,
    STORE_CLOSED,
    TASK_NOT_FOUND,
    TASK_PENDING_LIMIT_EXCEEDED,
    UNAVAILABLE_IN_CURRENT_MODE,
)

MAX_PENDING = 1024  # tasks waiting before create_*_task() refuses more
MAX_FINISHED = 1024  # finished tasks kept for query_task()
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


class _Task:
    __slots__ = ("resp", "key", "targets", "source")


class _Tasks:
    """The copy and move tasks of one store: a queue and one worker thread
    that runs them in order, started on first use."""

    def __init__(self, store):
        self.store = store
        self.lock = threading.Lock()
        self.all = {}  # id -> _Task
        self.finished = []  # ids, oldest first
        self.q = queue.Queue()
        self.pending = 0
        self.thread = None
        self.client = uuid.uuid4()

    def submit(self, kind, key, targets, source=None):
        t = _Task()
        r = t.resp = QueryTaskResponse()
        r.id, r.type, r.status, r.message = uuid.uuid4(), kind, TaskStatus.PENDING, ""
        r.created_at_ms_epoch = r.last_updated_at_ms_epoch = int(time.time() * 1000)
        r.assigned_client = NIL
        t.key, t.targets, t.source = key, list(targets), source
        with self.lock:
            if self.pending >= MAX_PENDING:
                return NIL, TASK_PENDING_LIMIT_EXCEEDED
            self.pending += 1
            self.all[r.id] = t
            if self.thread is None:
                self.thread = threading.Thread(target=self.run, name="mooncake-tasks",
                                               daemon=True)
                self.thread.start()
        self.q.put(t)
        return r.id, 0

    def set(self, t, status, message=""):
        with self.lock:
            r = t.resp
            r.status, r.message = status, message
            r.last_updated_at_ms_epoch = int(time.time() * 1000)
            if status == TaskStatus.PROCESSING:
                r.assigned_client = self.client
                self.pending -= 1
            elif status in (TaskStatus.SUCCESS, TaskStatus.FAILED):
                self.finished.append(r.id)
                while len(self.finished) > MAX_FINISHED:
                    self.all.pop(self.finished.pop(0), None)

    def query(self, task_id):
        with self.lock:
            t = self.all.get(task_id)
            if t is None:
                return None
            r, c = t.resp, QueryTaskResponse()
            for name in QueryTaskResponse.__slots__:
                setattr(c, name, getattr(r, name))
            return c

    def run(self):
        while True:
            t = self.q.get()
            self.set(t, TaskStatus.PROCESSING)
            try:
                status, message = self.execute(t)
            except Exception as e:  # the task fails, the worker goes on
                status, message = TaskStatus.FAILED, f"{type(e).__name__}: {e}"
            self.set(t, status, message)

    def execute(self, t):
        """Rewrites t's object placed on each target in turn; (status,
        message)."""
        s, key = self.store, t.key
        b = s._b
        if b is None:
            return TaskStatus.FAILED, "the store is closed"
        info = b.replicas(key)
        if isinstance(info, int):
            return TaskStatus.FAILED, f"the object cannot be read ({info})"
        have = _addrs(info)
        todo = [x for x in t.targets if x not in have]
        if t.source is None and not todo:
            return TaskStatus.SUCCESS, "the targets already hold replicas"
        value = s.get(key)
        again = b.replicas(key)
        if isinstance(again, int) or again[1] != info[1] or len(value) != info[0]:
            return TaskStatus.FAILED, "the object changed or went while it was read"
        n = len(info[2])
        for x in todo:
            cfg = ReplicateConfig(replica_num=n if t.source is not None else len(have) + 1,
                                  preferred_segment=x)
            rc = s.upsert(key, value, cfg)
            if rc != 0:
                return TaskStatus.FAILED, f"writing the object placed on {x!r} failed ({rc})"
            now = b.replicas(key)
            if isinstance(now, int):
                return TaskStatus.FAILED, f"the object went meanwhile ({now})"
            have = _addrs(now)
        missing = [x for x in t.targets if x not in have]
        if missing:
            return TaskStatus.FAILED, (f"no replica on {missing!r}: no room there, or no "
                                       f"node's data address")
        if t.source is not None and t.source in have:
            return TaskStatus.FAILED, f"a replica is still on the source {t.source!r}"
        return TaskStatus.SUCCESS, ""


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
        name (a node's data address): the object when its only replicas
        are there; an object that also has replicas elsewhere is skipped
        (this store cannot drop one replica of a published version)."""
        b = self._b
        if b is None:
            return []
        out = []
        for k in keys:
            if segment_name:
                info = b.replicas(k)
                if not isinstance(info, tuple) or _addrs(info) != {segment_name}:
                    continue
            if b.remove(k, False) == 0:
                out.append(k)
        return out

    def _tasks(self):
        b = self._b
        if b is None:
            return None, STORE_CLOSED
        if b.kind != "direct":
            return None, UNAVAILABLE_IN_CURRENT_MODE
        with self._lock:
            t = getattr(self, "_task_table", None)
            if t is None:
                t = self._task_table = _Tasks(self)
        return t, 0

    def create_copy_task(self, key, targets):
        """Starts copying key's object to the segments targets (data
        addresses) in the background; (task UUID, 0), or (UUID(int=0),
        code): OBJECT_NOT_FOUND, INVALID_PARAMS (no targets),
        UNAVAILABLE_IN_CURRENT_MODE (mount backend)."""
        t, rc = self._tasks()
        if t is None:
            return NIL, rc
        if not targets or not all(isinstance(x, str) for x in targets):
            return NIL, INVALID_PARAMS
        if isinstance(self._b.replicas(key), int):
            return NIL, OBJECT_NOT_FOUND
        return t.submit(TaskType.REPLICA_COPY, key, targets)

    def create_move_task(self, key, source, target):
        """Starts moving key's replica from segment source to segment
        target; (task UUID, 0) or (UUID(int=0), code): OBJECT_NOT_FOUND,
        INVALID_PARAMS (source holds no replica, or is the target)."""
        t, rc = self._tasks()
        if t is None:
            return NIL, rc
        if not isinstance(source, str) or not isinstance(target, str) or source == target:
            return NIL, INVALID_PARAMS
        info = self._b.replicas(key)
        if isinstance(info, int):
            return NIL, OBJECT_NOT_FOUND
        if source not in _addrs(info):
            return NIL, INVALID_PARAMS
        return t.submit(TaskType.REPLICA_MOVE, key, [target], source)

    def query_task(self, task_id):
        """(QueryTaskResponse, 0), or (None, TASK_NOT_FOUND)."""
        t, rc = self._tasks()
        if t is None:
            return None, rc
        r = t.query(task_id)
        return (r, 0) if r is not None else (None, TASK_NOT_FOUND)

