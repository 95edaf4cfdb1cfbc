"""Mooncake FS for Python.

    from mooncake.store import MooncakeDistributedStore
    from mooncake.async_store import MooncakeDistributedStoreAsync

See docs/PYTHON.md.
"""

__version__ = "0.1.0"
