"""mooncake.async_store - MooncakeDistributedStoreAsync: the store with an
async_<name> coroutine for every method, same arguments and results.

The hot methods (get, put, get_into, put_from, their batch forms, is_exist,
remove, upsert and friends) are native: on the direct backend the C extension
resolves an asyncio future from an eventfd that the running loop watches
(loop.add_reader), with no thread per call; on the mount backend async_get
(and async_get_batch, its keys at once) is read by C threads of the extension that never take the GIL (FileReader,
resolved from an eventfd in the same way), and the others are one hop each
to the backend's own few threads, whose results come back to the loop in
batches. The other methods run the sync method in the loop's default
executor.

Cancelling a task never frees or reuses memory the store is still writing:
the operation keeps its buffers until it completes, and its result is then
dropped.
"""

import asyncio
import functools

from .store import MooncakeDistributedStore, _start

__all__ = ["MooncakeDistributedStoreAsync"]


def _native(method):
    backend_method, closed, post, check, nargs = method._mc_op
    attr = "a_" + backend_method

    @functools.wraps(check)
    async def run(self, *a, **kw):
        b, args = _start(self, check, closed, a, kw)
        if b is None:
            return args
        r = await getattr(b, attr)(*(args if nargs is None else args[:nargs]))
        return post(r, args) if post else r

    run.__name__ = run.__qualname__ = "async_" + method.__name__
    return run


def _in_executor(method):
    @functools.wraps(method)
    async def run(self, *a, **kw):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(method, self, *a, **kw))

    run.__name__ = run.__qualname__ = "async_" + method.__name__
    return run


class MooncakeDistributedStoreAsync(MooncakeDistributedStore):
    """MooncakeDistributedStore plus async_<name>() for every method and
    `async with` (which closes the store on exit)."""

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.async_close()

    async def async_close(self):
        """Closes the store: operations in flight complete first and their
        futures are resolved; returns 0."""
        return self.close()

    def __getattr__(self, name):
        # Mooncake's client answers any async_<name>; so does this one.
        if name.startswith("async_"):
            method = getattr(type(self), name[6:], None)
            if callable(method):
                return _in_executor(method).__get__(self)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def _add_async_methods(cls):
    for base in MooncakeDistributedStore.__mro__:
        for name, method in list(vars(base).items()):
            if name.startswith("_") or not callable(method) or hasattr(cls, "async_" + name):
                continue
            wrapped = _native(method) if hasattr(method, "_mc_op") else _in_executor(method)
            setattr(cls, "async_" + name, wrapped)


_add_async_methods(MooncakeDistributedStoreAsync)
