"""Packaging: the canonical module paths import from the source tree, and a
wheel built offline installs and exposes mooncake.async_store."""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.path.join(ROOT, os.environ.get("MC_BUILD", "build"))
LIB = os.path.join(BUILD, "libmooncake.a")

CHECK = r"""
import asyncio, os, sys
import mooncake, mooncake.store, mooncake.async_store
from mooncake.async_store import MooncakeDistributedStoreAsync
from mooncake.store import MooncakeDistributedStore, ReplicateConfig, SoftPinAction, OBJECT_NOT_FOUND
assert issubclass(MooncakeDistributedStoreAsync, MooncakeDistributedStore)
assert OBJECT_NOT_FOUND == -704
s = MooncakeDistributedStoreAsync()
assert s.setup("localhost", "", "16MB", "16MB", "tcp", "", "") == 0

async def main():
    assert await s.async_put("k", b"packaged") == 0
    assert await s.async_get("k") == b"packaged"
    await s.async_close()

asyncio.run(main())
print(os.path.realpath(mooncake.async_store.__file__))
print(os.path.realpath(mooncake._store.__file__))
"""


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(extra)
    return env


def run_check(tmp_path, pythonpath):
    r = subprocess.run([sys.executable, "-c", CHECK], cwd=tmp_path, capture_output=True,
                       text=True, env=clean_env(PYTHONPATH=pythonpath), timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_canonical_module_paths_in_the_source_tree(tmp_path):
    paths = run_check(tmp_path, os.path.join(ROOT, "python"))
    assert paths[0] == os.path.join(ROOT, "python", "mooncake", "async_store.py")
    assert paths[1].startswith(os.path.join(ROOT, "python", "mooncake", "_store"))


def test_wheel_builds_offline_installs_and_exposes_async_store(tmp_path):
    if not os.path.exists(LIB):
        pytest.fail(f"{LIB} is missing: run make all")
    # A copy of the tree as the wheel build sees it, without built files.
    src = tmp_path / "src"
    shutil.copytree(os.path.join(ROOT, "python"), src / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "*.so", "__pycache__",
                                                  "tests", ".pytest_cache"))
    shutil.copytree(os.path.join(ROOT, "core", "include"), src / "core" / "include")
    dist = tmp_path / "dist"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                        "--no-index", "-w", str(dist), "."], cwd=src / "python",
                       capture_output=True, text=True, env=clean_env(MC_LIBMOONCAKE=LIB),
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    wheels = list(dist.glob("*.whl"))
    assert len(wheels) == 1
    names = zipfile.ZipFile(wheels[0]).namelist()
    for module in ("__init__", "store", "async_store", "_errors", "_direct", "_mount",
                   "filesystem"):
        assert f"mooncake/{module}.py" in names
    eps = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert eps and "[fsspec.specs]\nmooncake = mooncake.filesystem:MooncakeFileSystem" in \
        zipfile.ZipFile(wheels[0]).read(eps[0]).decode()
    assert [n for n in names if n.startswith("mooncake/_store") and n.endswith(".so")]
    assert not [n for n in names if n.endswith(".c") or "/tests/" in n]

    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                        "--target", str(site), str(wheels[0])], capture_output=True, text=True,
                       env=clean_env(), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    paths = run_check(tmp_path, str(site))
    assert paths[0] == os.path.join(os.path.realpath(site), "mooncake", "async_store.py")
    # libmooncake is linked in: the extension needs no rpath nor libmooncake.so.
    so = paths[1]
    dyn = subprocess.run(["readelf", "-d", so], capture_output=True, text=True).stdout
    assert "libmooncake" not in dyn and "RPATH" not in dyn and "RUNPATH" not in dyn
    exported = subprocess.run(["nm", "-D", "--defined-only", so], capture_output=True,
                              text=True).stdout.split()
    assert "PyInit__store" in exported and not [s for s in exported if s.startswith("mc_")]


def test_sdist_builds_offline_and_builds_through_pkg_config(tmp_path):
    """setup.py sdist needs no libmooncake; a wheel built from the sdist
    finds libmooncake through pkg-config (the build tree's mooncake.pc)."""
    pc = os.path.join(BUILD, "mooncake.pc")
    if not os.path.exists(pc):
        pytest.fail(f"{pc} is missing: run make all")
    src = tmp_path / "python"
    shutil.copytree(os.path.join(ROOT, "python"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "*.so", "__pycache__",
                                                  "tests", ".pytest_cache"))
    r = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "sd")],
                       cwd=src, capture_output=True, text=True, timeout=120,
                       env=clean_env(PKG_CONFIG_PATH="/nonexistent"))
    assert r.returncode == 0, r.stdout + r.stderr
    (sdist,) = (tmp_path / "sd").glob("*.tar.gz")
    r = subprocess.run(["tar", "tzf", str(sdist)], capture_output=True, text=True, check=True)
    assert "mooncake-fs-0.1.0/mooncake/_store_i.h" in r.stdout.split()
    assert "mooncake-fs-0.1.0/mooncake/filesystem.py" in r.stdout.split()
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                        "--no-index", "-w", str(tmp_path / "dist"), str(sdist)],
                       capture_output=True, text=True, timeout=300,
                       env=clean_env(PKG_CONFIG_PATH=BUILD))
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert [n for n in zipfile.ZipFile(wheel).namelist()
            if n.startswith("mooncake/_store") and n.endswith(".so")]
