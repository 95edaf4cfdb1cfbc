"""The mount backend: the same API over a mounted mooncake-fs, in pure Python.

A key is a path under the mount point (key "a/b" is MOUNT/a/b). Writes go to
a temporary name in the same directory and are renamed into place: put()
with RENAME_NOREPLACE (write-once: an existing key keeps its value), upsert()
with os.replace(). Each async method is one hop to the backend's own threads
(_Offload) running the sync method, whatever files it touches; results come
back to the event loop in batches.
"""

import asyncio
import ctypes
import errno
import itertools
import os
import queue
import stat
import threading
import weakref

from . import _errors as E
from ._loops import PerLoop, running_loop

_NAME_MAX = 255
_KEY_MAX = 4095  # MC_KEY_MAX - 1 through the mount (see docs/SEMANTICS.md)
TMP_PREFIX = ".mctmp-"
# Opening a key for reading: a symbolic link is not followed (ELOOP) and a
# FIFO does not block; both, and every other special file, read as missing.
_RDONLY = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK


def _not_an_object(e):
    """The code for an OSError of opening a key with _RDONLY."""
    return E.OBJECT_NOT_FOUND if e.errno == errno.ELOOP else E.from_oserror(e)

NATIVE = (
    "get", "get_buffer", "get_batch", "get_buffer_batch", "get_into", "get_into_batch",
    "read_ranges", "put", "put_parts", "put_batch", "put_from", "put_from_batch",
    "exist", "exist_batch", "size", "remove", "remove_batch",
)

try:  # the whole of a small get in one call without the GIL
    from ._store import read_file as _read_file
except ImportError:  # the extension is not built: os calls do it
    _read_file = None
try:  # async gets on C threads that never take the GIL
    from ._store import FileReader as _FileReader
except ImportError:  # the extension is not built: the backend's threads do them
    _FileReader = None

_libc = ctypes.CDLL(None, use_errno=True)
_renameat2 = getattr(_libc, "renameat2", None)
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


class _BadKey(Exception):
    pass


class _BadMemory(Exception):
    pass


class MountBuffer(bytearray):
    """get_buffer()'s result on the mount: the bytes, with Mooncake's
    BufferHandle methods."""

    def ptr(self):
        if not self:
            return 0
        return ctypes.addressof(ctypes.c_char.from_buffer(self))

    def size(self):
        return len(self)


def _rename_noreplace(src, dst):
    if _renameat2 is not None:
        r = _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE)
        if r == 0:
            return
        e = ctypes.get_errno()
        if e not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(e, os.strerror(e), dst)
    # No renameat2: check, then replace (a race with another writer remains).
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, "exists", dst)
    os.replace(src, dst)


class MountBackend:
    """Keys as files under `root`, a mooncake-fs mount point."""

    kind = "mount"

    def __init__(self, root):
        self.root = os.path.realpath(root)
        self._regions = {}  # start address -> (length, object kept alive or None)
        self._lock = threading.Lock()
        # pin id -> [fd, reads in flight, ended]: ids are never reused (an
        # fd number is, by the next open), and an ended pin's fd is closed
        # once its last read is done
        self._pins = {}
        self._pin_ids = itertools.count(1)
        self._seq = itertools.count()
        self._offload = _Offload()
        for name in NATIVE:
            setattr(self, "a_" + name, self._offload.wrap(getattr(self, name)))
        # event loop -> FileReader (async_get); none is made after close()
        self._readers = PerLoop(_FileReader, lambda r: r.close(False), refuse_after_close=True)
        if _FileReader is not None:
            self.a_get = self._a_get
            self.a_get_batch = self._a_get_batch

    # ---- keys and memory ----

    def _path(self, key):
        if isinstance(key, bytes):
            key = os.fsdecode(key)
        elif not isinstance(key, str):
            raise TypeError(f"key must be str or bytes, not {type(key).__name__}")
        try:
            raw = key.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            raise _BadKey(key)
        if not raw or len(raw) > _KEY_MAX or b"\0" in raw:
            raise _BadKey(key)
        for part in raw.split(b"/"):
            if part in (b"", b".", b"..") or len(part) > _NAME_MAX:
                raise _BadKey(key)
        return os.path.join(self.root, key)

    def _memory(self, target, size, writable):
        """A memoryview of caller memory: an int address inside a registered
        buffer, or an object exporting a buffer. The view of a region
        registered as a buffer object holds that object's export, so that
        the memory stays the caller's operation's until the view goes, even
        if the region is unregistered and the object dropped meanwhile (the
        direct backend keeps it so too)."""
        if isinstance(target, int) and not isinstance(target, bool):
            if size is None or size < 0:
                raise TypeError("an int address needs a size")
            with self._lock:
                # A read never goes into a region registered read-only (a
                # bytes object, which is immutable), as the direct backend.
                keep = next((k for start, (length, k) in self._regions.items()
                             if start <= target and target + size <= start + length
                             and not (writable and k is not None and k.readonly)), False)
            if keep is False:
                raise _BadMemory()
            if size == 0:
                return memoryview(bytearray())
            view = (ctypes.c_char * size).from_address(target)
            view.keep = keep  # the registered object's export, or None (raw memory)
            return memoryview(view).cast("B")
        try:
            mv = memoryview(target).cast("B")
        except TypeError:
            raise
        except Exception:  # not contiguous
            raise _BadMemory()
        if writable and mv.readonly:
            raise _BadMemory()
        if size is not None:
            if size > len(mv):
                raise _BadMemory()
            mv = mv[:size]
        return mv

    def register(self, target, size=None):
        keep = None
        if isinstance(target, int) and not isinstance(target, bool):
            if size is None:
                raise TypeError("register_buffer(ptr, size) needs a size")
            start, length = target, size
        else:
            mv = memoryview(target).cast("B")
            keep = mv
            length = len(mv) if size is None else size
            if length > len(mv):
                return E.INVALID_PARAMS
            if mv.readonly:
                if not isinstance(target, bytes):
                    return E.INVALID_PARAMS
                start = ctypes.cast(ctypes.c_char_p(target), ctypes.c_void_p).value
            else:
                start = ctypes.addressof(ctypes.c_char.from_buffer(mv)) if len(mv) else 0
        with self._lock:
            if start <= 0 or length <= 0 or start in self._regions:
                return E.INVALID_PARAMS
            self._regions[start] = (length, keep)
        return 0

    def unregister(self, ptr):
        if not isinstance(ptr, int):
            mv = memoryview(ptr).cast("B")
            ptr = ctypes.addressof(ctypes.c_char.from_buffer(mv)) if not mv.readonly else \
                ctypes.cast(ctypes.c_char_p(ptr), ctypes.c_void_p).value
        with self._lock:
            return 0 if self._regions.pop(ptr, None) is not None else E.INVALID_PARAMS

    # ---- reads ----

    def _read(self, key):
        """The object's bytes as a MountBuffer; raises OSError or _BadKey."""
        fd = os.open(self._path(key), _RDONLY)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "not an object", key)
            buf = MountBuffer(st.st_size)
            mv = memoryview(buf)
            n = 0
            while n < len(buf):
                got = os.readv(fd, [mv[n:]])
                if got == 0:
                    break
                n += got
            del mv
            if n < len(buf):
                del buf[n:]
            else:
                rest = os.read(fd, 1 << 20)  # grown meanwhile (not with versions)
                while rest:
                    buf += rest
                    rest = os.read(fd, 1 << 20)
            return buf
        finally:
            os.close(fd)

    def get(self, key):
        """The object's bytes, read straight into the bytes returned: one
        read of size + 1 bytes (a longer answer means it grew meanwhile,
        which a version of the mount never does; a shorter one is read on
        from) instead of _read()'s buffer and copy. With the extension, in
        one call that releases the GIL once or twice (_read_file)."""
        try:
            path = self._path(key)
        except _BadKey:
            return b""
        if _read_file is not None:
            r = _read_file(path, _RDONLY)
            return b"" if isinstance(r, int) else r
        try:
            fd = os.open(path, _RDONLY)
        except OSError:
            return b""
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return b""
            data = os.read(fd, st.st_size + 1)
            if len(data) == st.st_size:
                return data
            parts = [data]
            more = os.read(fd, 1 << 20)
            while more:
                parts.append(more)
                more = os.read(fd, 1 << 20)
            return b"".join(parts)
        except OSError:
            return b""
        finally:
            os.close(fd)

    def _a_get(self, key):
        """async get(): a future that the loop's FileReader resolves with
        what get() returns, read on the reader's own C threads (no GIL)."""
        loop = asyncio.get_running_loop()
        r = self._readers.get(loop)
        try:
            path = self._path(key)
        except _BadKey:
            path = None
        if r is None or path is None:  # closed meanwhile (as the thread hop does), or no file
            fut = loop.create_future()
            fut.set_result(self.get(key) if path is not None else b"")
            return fut
        return r.get(path, _RDONLY)

    def _a_get_batch(self, keys):
        """async get_batch(): the gets of the keys at once, on the
        FileReader's threads (the thread hop read them one after another)."""
        return asyncio.gather(*[self._a_get(k) for k in keys])

    def get_buffer(self, key):
        try:
            return self._read(key)
        except (OSError, _BadKey):
            return None

    def get_batch(self, keys):
        return [self.get(k) for k in keys]

    def get_buffer_batch(self, keys):
        return [self.get_buffer(k) for k in keys]

    def get_into(self, key, target, size=None):
        try:
            mv = self._memory(target, size, True)
            fd = os.open(self._path(key), _RDONLY)
        except _BadKey:
            return E.INVALID_KEY
        except _BadMemory:
            return E.INVALID_PARAMS
        except OSError as e:
            return _not_an_object(e)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return E.OBJECT_NOT_FOUND
            if st.st_size > len(mv):
                return E.BUFFER_OVERFLOW
            n = 0
            while n < st.st_size:
                got = os.readv(fd, [mv[n:st.st_size]])
                if got == 0:
                    break
                n += got
            return n
        except OSError as e:
            return E.from_oserror(e)
        finally:
            os.close(fd)

    def get_into_batch(self, keys, targets, sizes):
        if not len(keys) == len(targets) == len(sizes):
            return [E.INVALID_PARAMS] * len(keys)
        return [self.get_into(k, t, s) for k, t, s in zip(keys, targets, sizes)]

    def read_ranges(self, keys, addrs, src_offsets, sizes):
        out = []
        fds = {}
        try:
            for key, addr, off, size in zip(keys, addrs, src_offsets, sizes):
                try:
                    mv = self._memory(addr, size, True)
                    if key not in fds:
                        fds[key] = os.open(self._path(key), _RDONLY)
                    fd = fds[key]
                    if off + size > os.fstat(fd).st_size:
                        out.append(E.INVALID_PARAMS)
                        continue
                    out.append(os.preadv(fd, [mv], off))
                except _BadKey:
                    out.append(E.INVALID_KEY)
                except _BadMemory:
                    out.append(E.INVALID_PARAMS)
                except OSError as e:
                    out.append(_not_an_object(e))
        finally:
            for fd in fds.values():
                os.close(fd)
        return out

    def exist(self, key):
        try:
            return 1 if stat.S_ISREG(os.lstat(self._path(key)).st_mode) else 0
        except _BadKey:
            return E.INVALID_KEY
        except (FileNotFoundError, NotADirectoryError):
            return 0
        except OSError as e:
            return E.from_oserror(e)

    def exist_batch(self, keys):
        return [self.exist(k) for k in keys]

    def size(self, key):
        try:
            st = os.lstat(self._path(key))
        except _BadKey:
            return E.INVALID_KEY
        except OSError as e:
            return E.from_oserror(e)
        return st.st_size if stat.S_ISREG(st.st_mode) else E.OBJECT_NOT_FOUND

    # ---- writes ----

    def _write(self, key, parts, upsert, xattrs=None):
        """Writes parts (memoryviews) under key, with the extended
        attributes xattrs ({bytes name: bytes value}) set on the temporary
        file before it is renamed into place; returns a code."""
        try:
            path = self._path(key)
        except _BadKey:
            return E.INVALID_KEY
        if os.path.isdir(path):
            return E.INVALID_KEY  # "a" while "a/..." exists: the mount cannot hold both
        if not upsert and os.path.lexists(path):
            return 0  # write-once: the existing value stays
        d = os.path.dirname(path)
        tmp = os.path.join(d, f"{TMP_PREFIX}{os.getpid()}-{next(self._seq)}")
        try:
            for attempt in range(3):
                try:
                    os.makedirs(d, exist_ok=True)
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                    break
                except FileNotFoundError:  # a remove pruned the directory meanwhile
                    if attempt == 2:
                        raise
            try:
                for p in parts:
                    mv = memoryview(p).cast("B")
                    while mv:
                        mv = mv[os.write(fd, mv):]
                for name, value in (xattrs or {}).items():
                    os.setxattr(fd, name, value)
            finally:
                os.close(fd)
            if upsert:
                os.replace(tmp, path)
            else:
                try:
                    _rename_noreplace(tmp, path)
                except FileExistsError:
                    os.unlink(tmp)
                    return 0
            return 0
        except (NotADirectoryError, FileExistsError, IsADirectoryError):
            # a key is a prefix of another ("a" and "a/b"): the mount cannot hold both
            _unlink_quietly(tmp)
            return E.INVALID_KEY
        except OSError as e:
            _unlink_quietly(tmp)
            return E.from_oserror(e)

    def put(self, key, value, opts, upsert):
        if isinstance(value, int):
            raise TypeError("value must be a bytes-like object")
        return self._write(key, [value], upsert)

    def put_parts(self, key, parts, opts, upsert):
        return self._write(key, list(parts), upsert)

    def put_with_xattrs(self, key, parts, xattrs, opts, upsert):
        """put_parts() that publishes the file with extended attributes."""
        return self._write(key, list(parts), upsert, xattrs)

    def pin(self, key):
        """Pins key's current version: an open file of the mount keeps the
        version it opened. (pin id, size), or a code."""
        try:
            fd = os.open(self._path(key), _RDONLY)
        except _BadKey:
            return E.INVALID_KEY
        except OSError as e:
            return _not_an_object(e)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            return E.OBJECT_NOT_FOUND
        with self._lock:
            pin = next(self._pin_ids)
            self._pins[pin] = [fd, 0, False]
        return pin, st.st_size

    def pin_read(self, pin, off, ptr, size):
        with self._lock:
            p = self._pins.get(pin)
            if p is None:
                return E.OBJECT_NOT_FOUND  # ended
            p[1] += 1
        try:
            mv = self._memory(ptr, size, True)
            if off + size > os.fstat(p[0]).st_size:
                return E.INVALID_PARAMS
            return os.preadv(p[0], [mv], off) if size else 0
        except _BadMemory:
            return E.INVALID_PARAMS
        except OSError as e:
            return E.from_oserror(e)
        finally:
            with self._lock:
                p[1] -= 1
                last = p[2] and not p[1]
            if last:
                os.close(p[0])

    def _unpin(self, p):
        """Ends pin p (taken out of self._pins under the lock): its fd is
        closed now, or by its last read in flight."""
        with self._lock:
            p[2] = True
            last = not p[1]
        if last:
            os.close(p[0])

    def unpin(self, pin):
        with self._lock:
            p = self._pins.pop(pin, None)
        if p is not None:
            self._unpin(p)

    def replicas(self, key):
        """Placement is not visible through the mount."""
        return E.UNAVAILABLE_IN_CURRENT_MODE

    def memory(self, target, size):
        """A view of size bytes of caller memory (a registered int address
        or a buffer object), or None."""
        try:
            return self._memory(target, size, False)
        except _BadMemory:
            return None

    def put_batch(self, keys, values, opts, upsert):
        if len(keys) != len(values):
            return [E.INVALID_PARAMS] * len(keys)
        return [self.put(k, v, opts, upsert) for k, v in zip(keys, values)]

    def put_from(self, key, ptr, size, opts, upsert):
        try:
            mv = self._memory(ptr, size, False)
        except _BadMemory:
            return E.INVALID_PARAMS
        return self._write(key, [mv], upsert)

    def put_from_batch(self, keys, ptrs, sizes, opts, upsert):
        if not len(keys) == len(ptrs) == len(sizes):
            return [E.INVALID_PARAMS] * len(keys)
        return [self.put_from(k, p, s, opts, upsert) for k, p, s in zip(keys, ptrs, sizes)]

    def remove(self, key, force=False):
        try:
            path = self._path(key)
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return E.OBJECT_NOT_FOUND
            os.unlink(path)
        except _BadKey:
            return E.INVALID_KEY
        except OSError as e:
            return E.from_oserror(e)
        # Drop the directories only this key needed.
        d = os.path.dirname(path)
        while d != self.root and d.startswith(self.root):
            try:
                os.rmdir(d)
            except OSError:
                break
            d = os.path.dirname(d)
        return 0

    def remove_batch(self, keys, force=False):
        return [self.remove(k, force) for k in keys]

    # ---- the rest ----

    def keys(self, prefix=b"", markers=False):
        """Every file's key (str) under the directory prefix names (bytes,
        "" or ending in "/"; none when it is no directory); with markers,
        also every directory's as "dir/", the key the store keeps for a
        directory made through the mount."""
        top = os.path.join(self.root, os.fsdecode(prefix))
        out = []
        for d, _, files in os.walk(top):
            rel = os.path.relpath(d, self.root)
            if markers and rel != ".":
                out.append(rel + "/")
            for f in files:
                if not f.startswith(TMP_PREFIX):
                    out.append(f if rel == "." else os.path.join(rel, f))
        return out

    def health(self):
        try:
            os.statvfs(self.root)
        except OSError:
            return 2
        return 0 if os.path.ismount(self.root) else 2

    def inflight(self):
        return 0

    def close(self):
        self._offload.close()
        self._readers.close_all(running_loop())
        with self._lock:
            self._regions.clear()
            pins, self._pins = self._pins, {}
        for p in pins.values():
            self._unpin(p)
        return 0


class _Offload:
    """Runs the blocking calls of async methods on a few threads of their own.

    One hop per call, as run_in_executor() gives, without its per-call
    costs: a call is a tuple on a SimpleQueue that an idle thread takes (no
    concurrent.futures.Future to chain to the asyncio one), and the results
    that threads finish meanwhile go back to their event loop together, one
    call_soon_threadsafe() per batch rather than a wake-up of the loop per
    call. Any number of event loops may use it. A cancelled call still runs
    (like an executor's); its result is dropped."""

    THREADS = 4

    def __init__(self):
        self._fresh()
        self._closed = False
        _OFFLOADS.add(self)

    def _fresh(self):
        """No threads, no calls queued, no results waiting: at the start,
        and in a child of fork(), which has none of its parent's threads
        (nor their calls; a lock one of them held stays locked there)."""
        self._jobs = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._done = {}  # event loop -> [(future, result, exception)]; guarded by _lock
        self._threads = []

    def wrap(self, fn):
        def call(*args):
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            if not self._threads:
                self._start_threads()
            with self._lock:
                if not self._closed:
                    self._jobs.put((loop, fut, fn, args))
                    return fut
            try:  # closed (a call racing close()): run it here
                fut.set_result(fn(*args))
            except Exception as e:  # noqa: BLE001 (the caller's, as from a thread)
                fut.set_exception(e)
            return fut

        call.__name__ = call.__qualname__ = fn.__name__
        return call

    def _start_threads(self):
        """Starts the threads, all at the first call (a fixed count)."""
        with self._lock:
            if self._closed or self._threads:
                return
            self._threads = [threading.Thread(target=self._work, name="mooncake-mount", daemon=True)
                             for _ in range(self.THREADS)]
            for t in self._threads:
                t.start()

    def _work(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            loop, fut, fn, args = job
            try:
                res, exc = fn(*args), None
            except BaseException as e:  # handed to the caller, as an executor does
                res, exc = None, e
            if loop.is_closed():
                continue  # nobody waits (a batch left for it goes at close())
            with self._lock:
                batch = self._done.setdefault(loop, [])
                batch.append((fut, res, exc))
                first = len(batch) == 1
            if first:
                try:
                    loop.call_soon_threadsafe(self._deliver, loop)
                except RuntimeError:  # the loop is closed: nobody waits
                    with self._lock:
                        self._done.pop(loop, None)

    def _deliver(self, loop):
        with self._lock:
            batch = self._done.pop(loop, [])
        for fut, res, exc in batch:
            if fut.cancelled():
                continue
            if exc is None:
                fut.set_result(res)
            else:
                fut.set_exception(exc)

    def close(self):
        """Stops the threads once the calls queued before have run."""
        with self._lock:
            self._closed, threads = True, self._threads
            for _ in threads:
                self._jobs.put(None)  # after every call queued before
        for t in threads:
            if t is not threading.current_thread():
                t.join()
        with self._lock:
            for loop in [lp for lp in self._done if lp.is_closed()]:
                del self._done[loop]  # its _deliver() never ran


_OFFLOADS = weakref.WeakSet()


def _offloads_forked():
    for o in list(_OFFLOADS):
        o._fresh()  # its threads start again at the child's first call


os.register_at_fork(after_in_child=_offloads_forked)


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass
