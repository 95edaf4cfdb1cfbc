"""Builds mooncake._store, the C extension of the direct backend.

The extension links libmooncake statically (no rpath in the wheel); its
symbols stay private to the extension. MC_LIBMOONCAKE overrides the archive
(default ../build/libmooncake.a, relative to this file); `make all` at the top
of the repository builds it.
"""

import os

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIB = os.environ.get("MC_LIBMOONCAKE") or os.path.join(ROOT, "build", "libmooncake.a")
if not os.path.isabs(LIB):
    LIB = os.path.join(ROOT, LIB)


def _system_libraries():
    """The shared libraries libmooncake.a needs: liburing, pthread,
    libsodium when the archive refers to it (its authentication), and
    libibverbs + librdmacm when it was built with RDMA."""
    libs = ["uring"]
    try:
        with open(LIB, "rb") as f:
            data = f.read()
            if b"sodium_init" in data:
                libs.append("sodium")
            if b"rdma_create_id" in data:
                libs += ["ibverbs", "rdmacm"]
    except OSError:
        pass  # the build fails below with a clear message about LIB
    return libs + ["pthread"]


store_ext = Extension(
    "mooncake._store",
    sources=["mooncake/_store.c", "mooncake/_store_methods.c", "mooncake/_store_group.c",
             "mooncake/_store_buffers.c", "mooncake/_store_completer.c"],
    include_dirs=[os.path.join(ROOT, "core", "include")],
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                        "-fvisibility=hidden", "-flto"],
    extra_objects=[LIB],
    extra_link_args=["-Wl,--exclude-libs,ALL", "-flto"],
    libraries=_system_libraries(),
    depends=[LIB, os.path.join(HERE, "mooncake", "_store_i.h"),
             os.path.join(ROOT, "core", "include", "mooncake", "mooncake.h"),
             os.path.join(ROOT, "core", "include", "mooncake", "loop.h")],
)

setup(ext_modules=[store_ext])
