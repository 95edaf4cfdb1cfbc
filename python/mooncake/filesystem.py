"""mooncake.filesystem - the store as an fsspec file system: mooncake://KEY.

    import fsspec, pandas
    fs = fsspec.filesystem("mooncake", master_server_addr="10.0.0.1:50051")
    with fsspec.open("mooncake://data/a.csv", "w",
                     master_server_addr="10.0.0.1:50051") as f:
        f.write("x,y\\n1,2\\n")
    pandas.read_csv("mooncake://data/a.csv",
                    storage_options={"master_server_addr": "10.0.0.1:50051"})

Keys are paths, "/" the directory separator, as the mount shows them:
mooncake://a/b/c is the key "a/b/c", and "a" and "a/b" are directories
while some key lies under them (a directory made through the mount is the
marker key "a/b/", listed as a directory and otherwise hidden). Directories
are implicit here, as on object stores: makedirs() and mkdir() make
nothing.

MooncakeFileSystem is an fsspec AsyncFileSystem: the async methods (_cat_file,
_pipe_file, _info, _ls, _rm_file, ...) await the store's own futures
(MooncakeDistributedStoreAsync.async_*, native on the direct backend), and
fsspec runs them on its I/O loop for the sync methods. Listing runs in the
loop's executor (the store lists synchronously).

The store comes from the arguments: store= (a set-up MooncakeDistributedStore,
left open: the caller closes it), or setup() options (master_server_addr=,
mount_point=, global_segment_size=, ...; storage_options in pandas, or
FSSPEC_MOONCAKE_<OPTION> in the environment), which open a store that
close() closes. A value is written whole when its file closes (values are
immutable, as in the store); a file read in full once per open.

Importing mooncake registers the protocol with fsspec (and the installed
package declares it as an fsspec.specs entry point).
"""

import asyncio
import errno
import os

from fsspec.asyn import AsyncFileSystem
from fsspec.spec import AbstractBufferedFile

from . import _errors
from .async_store import MooncakeDistributedStoreAsync

__all__ = ["MooncakeFileSystem"]

_ERRNO = {
    _errors.OBJECT_NOT_FOUND: errno.ENOENT,
    _errors.INVALID_KEY: errno.EINVAL,
    _errors.INVALID_PARAMS: errno.EINVAL,
    _errors.NO_AVAILABLE_HANDLE: errno.ENOSPC,
    _errors.OBJECT_HAS_LEASE: errno.EBUSY,
    _errors.OBJECT_ALREADY_EXISTS: errno.EEXIST,
    _errors.RPC_FAIL: errno.EIO,
    _errors.STORE_CLOSED: errno.EBADF,
}


def _oserror(code, path):
    """The OSError for a store's code (FileNotFoundError for a miss)."""
    e = _ERRNO.get(code, errno.EIO)
    return OSError(e, f"{os.strerror(e)} ({_errors.name(code)})", path)


class _Meta(type(AsyncFileSystem)):
    # fsspec caches instances by their arguments' str(); two stores print
    # alike, so a file system of a given store is never taken from the cache.
    def __call__(cls, *args, **kwargs):
        if kwargs.get("store") is not None:
            kwargs["skip_instance_cache"] = True
        return super().__call__(*args, **kwargs)


class MooncakeFileSystem(AsyncFileSystem, metaclass=_Meta):
    """fsspec's view of a Mooncake store (see the module's doc)."""

    protocol = "mooncake"
    root_marker = ""
    sep = "/"

    def __init__(self, store=None, asynchronous=False, loop=None, batch_size=None,
                 **setup_options):
        super().__init__(asynchronous=asynchronous, loop=loop, batch_size=batch_size)
        self._owned = store is None
        if store is None:
            if not setup_options.get("master_server_addr") and \
                    not setup_options.get("mount_point"):
                raise ValueError("mooncake://: give master_server_addr= (\"embedded\" for a "
                                 "store in this process), mount_point= or store=")
            store = MooncakeDistributedStoreAsync()
            rc = store.setup(setup_options)
            if rc != 0:
                raise _oserror(rc, setup_options.get("master_server_addr") or
                               setup_options.get("mount_point"))
        elif not isinstance(store, MooncakeDistributedStoreAsync):
            raise TypeError("store must be a MooncakeDistributedStoreAsync")
        self.store = store

    def close(self):
        """Closes the store if this file system opened it, and forgets the
        instance (fsspec would hand it out again)."""
        if self._owned:
            self.store.close()
        type(self)._cache.pop(getattr(self, "_fs_token_", None), None)

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith("mooncake://"):
            path = path[len("mooncake://"):]
        elif path.startswith("mooncake:"):
            path = path[len("mooncake:"):]
        return path.strip("/")

    # ---- listing ----

    async def _keys(self, prefix):
        """Every key under prefix ("" or "dir/") as str; markers included."""
        b = self.store._b
        if b is None:
            raise _oserror(_errors.STORE_CLOSED, prefix)
        loop = asyncio.get_running_loop()
        keys = await loop.run_in_executor(None, lambda: b.keys(prefix.encode(), markers=True))
        if isinstance(keys, int):
            raise _oserror(keys, prefix)
        return [os.fsdecode(k) for k in keys]

    async def _size(self, path):
        """The size of the value at path, or None when there is none."""
        if not path:
            return None
        r = await self.store.async_get_size(path)
        if r == _errors.OBJECT_NOT_FOUND or r == _errors.INVALID_KEY:
            return None
        if r < 0:
            raise _oserror(r, path)
        return r

    async def _ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        prefix = path + "/" if path else ""
        entries, dirs = [], set()
        for key in await self._keys(prefix):
            rest = key[len(prefix):]
            if not rest:
                continue  # the directory's own marker
            if "/" in rest:
                name = prefix + rest.split("/", 1)[0]
                if name not in dirs:
                    dirs.add(name)
                    entries.append({"name": name, "size": 0, "type": "directory"})
            else:
                entries.append({"name": key, "type": "file"})
        files = [e for e in entries if e["type"] == "file"]
        sizes = await asyncio.gather(*(self._size(e["name"]) for e in files))
        for e, size in zip(files, sizes):
            e["size"] = size
        entries = [e for e in entries if e["size"] is not None]  # gone meanwhile
        if not entries and path:
            size = await self._size(path)
            if size is not None:
                entries = [{"name": path, "size": size, "type": "file"}]
            elif not await self._keys(prefix):
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        entries.sort(key=lambda e: e["name"])
        return entries if detail else [e["name"] for e in entries]

    async def _info(self, path, **kwargs):
        path = self._strip_protocol(path)
        # A directory shadows a file of the same name, as in the mount.
        if not path or await self._keys(path + "/"):
            return {"name": path, "size": 0, "type": "directory"}
        size = await self._size(path)
        if size is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        return {"name": path, "size": size, "type": "file"}

    # ---- whole values ----

    async def _cat_file(self, path, start=None, end=None, **kwargs):
        path = self._strip_protocol(path)
        data = await self.store.async_get(path)
        if not data and await self._size(path) is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        return data if start is None and end is None else data[start:end]

    async def _pipe_file(self, path, value, **kwargs):
        path = self._strip_protocol(path)
        rc = await self.store.async_upsert(path, value)
        if rc != 0:
            raise _oserror(rc, path)

    async def _rm_file(self, path, **kwargs):
        path = self._strip_protocol(path)
        # Forced, as the mount's unlink: readers finish on the old version.
        rc = await self.store.async_remove(path, True)
        if rc == _errors.OBJECT_NOT_FOUND:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        if rc != 0:
            raise _oserror(rc, path)

    async def _rm(self, path, recursive=False, **kwargs):
        paths = await self._expand_path(path, recursive=recursive)
        for p in sorted(paths, reverse=True):
            if await self._size(p) is not None:
                await self._rm_file(p)
            elif recursive:
                await self.store.async_remove(p + "/", True)  # a marker, if any

    async def _get_file(self, rpath, lpath, **kwargs):
        if os.path.isdir(lpath):
            return
        data = await self._cat_file(rpath)
        with open(lpath, "wb") as f:
            f.write(data)

    async def _put_file(self, lpath, rpath, **kwargs):
        if os.path.isdir(lpath):
            return
        with open(lpath, "rb") as f:
            data = f.read()
        await self._pipe_file(rpath, data)

    async def _cp_file(self, path1, path2, **kwargs):
        await self._pipe_file(path2, await self._cat_file(path1))

    async def _mkdir(self, path, create_parents=True, **kwargs):
        pass  # directories are implicit: a key under one makes it

    async def _makedirs(self, path, exist_ok=False):
        pass

    # ---- files ----

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None,
              **kwargs):
        if mode not in ("rb", "wb"):
            raise ValueError(f"mooncake://: mode {mode!r}: values are read or written whole "
                             "(rb, wb)")
        return MooncakeFile(self, path, mode, block_size or "default", autocommit,
                            cache_options=cache_options, **kwargs)


class MooncakeFile(AbstractBufferedFile):
    """A value opened as a file: read once, whole, at the first read ("rb");
    or gathered in parts and stored under its key at close ("wb")."""

    def __init__(self, fs, path, mode="rb", block_size="default", autocommit=True,
                 cache_type="all", **kwargs):
        super().__init__(fs, path, mode, block_size, autocommit, cache_type=cache_type, **kwargs)

    def _fetch_range(self, start, end):
        return self.fs.cat_file(self.path, start, end)

    def _initiate_upload(self):
        self._parts = []

    def _upload_chunk(self, final=False):
        self._parts.append(self.buffer.getvalue())
        if final:
            rc = self.fs.store.upsert_parts(self.path, *self._parts)
            self._parts = []
            if rc != 0:
                raise _oserror(rc, self.path)
        return True
