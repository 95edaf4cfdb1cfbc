"""libcurl (the etcd client) and libmicrohttpd (the metrics endpoint) are
loaded at their first use (core/src/runtime/dl.c), not linked: a command
that needs neither does not load their trees (41 shared libraries) at
start, and where one cannot be loaded, everything but the option that
needs it still works, and that option fails at once, naming the library.

A missing library is made for real: the command runs in a mount namespace
of its own (unshare) where the library's file is covered by an empty one
(a bind mount of /dev/null), so the dynamic loader finds a file it cannot
load, as on a machine where the package is broken or was removed."""

import glob
import os
import platform
import shlex
import shutil
import subprocess

import pytest

from harness import BUILD, CLI, MASTER, free_port

CURL = "libcurl.so.4"
MHD = "libmicrohttpd.so.12"
# The Python extension links the library too (python/setup.py), where built.
PROGRAMS = [MASTER, CLI, os.path.join(BUILD, "mooncake-fs"), os.path.join(BUILD, "libmooncake.so"),
            *glob.glob(os.path.join(BUILD, "python", "lib", "mooncake", "_store*.so"))]


def lib_path(soname):
    """Where the dynamic loader finds soname for this machine's ABI."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    r = subprocess.run([ldconfig, "-p"], capture_output=True, text=True)
    abi = {"x86_64": "x86-64", "aarch64": "AArch64"}.get(platform.machine(), "")
    for line in r.stdout.splitlines():
        if line.strip().startswith(soname + " ") and abi in line:
            return line.split("=>")[1].strip()
    pytest.skip(f"{soname} not found by {ldconfig} -p (make deps installs it)")


def without(sonames, tmp_path):
    """An argv prefix that runs a command where the libraries sonames cannot
    be loaded; skips when this machine cannot cover a file in a mount
    namespace of its own (tried for real on a file of tmp_path)."""
    probe_file = tmp_path / "probe"
    probe_file.write_text("x")
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            f"mount --bind /dev/null {shlex.quote(str(probe_file))} && "
                            f"! test -s {shlex.quote(str(probe_file))}"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("cannot cover a file in a mount namespace here (unshare, mount --bind: "
                    f"{probe.stderr.strip() or 'exit ' + str(probe.returncode)})")
    paths = [lib_path(s) for s in sonames]
    cover = " && ".join(f"mount --bind /dev/null {shlex.quote(p)}" for p in paths)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'{cover} && exec "$@"', "sh"]


def test_no_program_links_either_library():
    for prog in PROGRAMS:
        out = subprocess.run(["ldd", prog], capture_output=True, text=True, check=True).stdout
        for soname in (CURL, MHD):
            assert soname not in out, f"{prog} links {soname}:\n{out}"


def test_without_either_library_a_master_serves_and_a_client_puts(cluster, tmp_path):
    hide = without([CURL, MHD], tmp_path)
    m = cluster.master("--segment-size", "16M", prefix=hide)
    data = os.urandom(100_000)
    r = subprocess.run([*hide, CLI, "--master", m.addr, "put", "k"], input=data,
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*hide, CLI, "--master", m.addr, "get", "k"], capture_output=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == data


def test_metrics_without_libmicrohttpd_fail_the_start_naming_it(tmp_path):
    r = subprocess.run([*without([MHD], tmp_path), MASTER, "--listen", "127.0.0.1:0",
                        "--metrics", str(free_port())], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "cannot serve metrics" in r.stderr
    assert MHD in r.stderr


def test_etcd_without_libcurl_fails_the_start_naming_it(tmp_path):
    r = subprocess.run([*without([CURL], tmp_path), MASTER, "--listen", "127.0.0.1:0",
                        "--etcd", f"http://127.0.0.1:{free_port()}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert CURL in r.stderr, r.stderr
    # A client given the etcd form of a master address says the same.
    etcd = f"etcd://127.0.0.1:{free_port()}"
    r = subprocess.run([*without([CURL], tmp_path), CLI, "--master", etcd, "get", "k"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert CURL in r.stderr, r.stderr
