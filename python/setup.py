"""Builds mooncake._store, the C extension of the direct backend.

The extension links libmooncake statically (no rpath in the wheel); its
symbols stay private to the extension. Where libmooncake is and what it
needs come from pkg-config's mooncake.pc: `make all` writes one for the
build tree (build/mooncake.pc), `make install` one for PREFIX. This file
looks in ../build first, then where pkg-config looks; MC_LIBMOONCAKE names
another archive (mooncake.pc beside it). An sdist needs none of it.
"""

import os
import shlex
import subprocess
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIB = os.environ.get("MC_LIBMOONCAKE") or os.path.join(ROOT, "build", "libmooncake.a")
if not os.path.isabs(LIB):
    LIB = os.path.join(ROOT, LIB)


def _pkg_config():
    """(include dirs, the static archive, libraries it needs) from
    `pkg-config --static mooncake`, or None when mooncake.pc is not found."""
    env = dict(os.environ)
    env["PKG_CONFIG_PATH"] = os.pathsep.join(
        p for p in (os.path.dirname(LIB), env.get("PKG_CONFIG_PATH")) if p)
    try:
        r = subprocess.run(["pkg-config", "--static", "--cflags", "--libs", "mooncake"],
                           capture_output=True, text=True, env=env, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    flags = shlex.split(r.stdout)
    incs = [f[2:] for f in flags if f.startswith("-I")]
    libdirs = [f[2:] for f in flags if f.startswith("-L")]
    libs = [f[2:] for f in flags if f.startswith("-l") and f != "-lmooncake"]
    archive = next((os.path.join(d, "libmooncake.a") for d in libdirs
                    if os.path.exists(os.path.join(d, "libmooncake.a"))), None)
    return incs, archive, libs


BUILDING = not {"sdist", "egg_info", "--version", "--name", "clean"} & set(sys.argv[1:])
found = _pkg_config()
if found is None or found[1] is None:
    if BUILDING:
        sys.exit(f"setup.py: no mooncake.pc with a libmooncake.a (looked beside {LIB} and on "
                 "PKG_CONFIG_PATH): run `make all` at the top of the repository, or install "
                 "libmooncake")
    found = ([os.path.join(ROOT, "core", "include")], LIB, [])
include_dirs, archive, libraries = found

store_ext = Extension(
    "mooncake._store",
    sources=["mooncake/_store.c", "mooncake/_store_methods.c", "mooncake/_store_group.c",
             "mooncake/_store_buffers.c", "mooncake/_store_completer.c",
             "mooncake/_store_meta.c", "mooncake/_store_pins.c", "mooncake/_store_files.c"],
    include_dirs=include_dirs,
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                        "-fvisibility=hidden", "-flto"],
    extra_objects=[archive],
    extra_link_args=["-Wl,--exclude-libs,ALL", "-flto"],
    libraries=libraries,
    depends=[archive, os.path.join(HERE, "mooncake", "_store_i.h")] +
    [os.path.join(d, "mooncake", h) for d in include_dirs for h in ("mooncake.h", "loop.h", "metrics.h")],
)

setup(ext_modules=[store_ext])
