"""Mooncake FS for Python.

    from mooncake.store import MooncakeDistributedStore
    from mooncake.async_store import MooncakeDistributedStoreAsync
    fsspec.open("mooncake://key", master_server_addr=...)   (mooncake.filesystem)

See docs/PYTHON.md.
"""

import importlib.util
import sys


def __getattr__(name):
    # mooncake.BufferPool and mooncake.RegisteredBufferPool (as Mooncake),
    # imported on first use: `import mooncake` stays light.
    if name in ("BufferPool", "RegisteredBufferPool"):
        from . import buffer_pool

        return getattr(buffer_pool, name)
    raise AttributeError(f"module 'mooncake' has no attribute {name!r}")

__version__ = "0.1.0"


def _register(fsspec):
    """Makes mooncake:// known to fsspec, by name: mooncake.filesystem is
    imported on first use only."""
    fsspec.register_implementation("mooncake", "mooncake.filesystem.MooncakeFileSystem",
                                   errtxt="mooncake:// needs mooncake.filesystem")


class _RegisterWithFsspec:
    """A meta path finder that registers mooncake:// once fsspec is
    imported: importing fsspec costs a scan of every installed package's
    entry points (a tenth of a second or more), which `import mooncake` should
    not pay for programs that never use it."""

    def find_spec(self, name, path=None, target=None):
        if name != "fsspec":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            exec_module = spec.loader.exec_module

            def exec_and_register(module):
                exec_module(module)
                _register(module)

            spec.loader.exec_module = exec_and_register
        return spec


if "fsspec" in sys.modules:
    _register(sys.modules["fsspec"])
else:
    sys.meta_path.insert(0, _RegisterWithFsspec())
