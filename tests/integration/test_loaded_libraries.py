"""libcurl (the etcd client) and libmicrohttpd (the metrics endpoint) are
loaded at their first use (core/src/runtime/dl.c), not linked: a command
that needs neither does not load their trees (41 shared libraries) at
start, and where one cannot be loaded, everything but the option that
needs it still works, and that option fails at once, naming the library.

A missing library is made for real: the command runs in a mount namespace
of its own (unshare) where the library's file is covered by an empty one
(a bind mount of /dev/null), so the dynamic loader finds a file it cannot
load, as on a machine where the package is broken or was removed."""

import os
import shlex
import subprocess

import pytest

from harness import BUILD, CLI, MASTER, cli_env, free_port

CURL = "libcurl.so.4"
MHD = "libmicrohttpd.so.12"
PROGRAMS = [MASTER, CLI, os.path.join(BUILD, "mooncake-fs"), os.path.join(BUILD, "libmooncake.so")]


def lib_path(soname):
    """Where the dynamic loader finds soname (ldconfig's cache)."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.strip().startswith(soname + " ") and "x86-64" in line:
            return line.split("=>")[1].strip()
    pytest.skip(f"{soname} is not installed (make deps installs it)")


def without(sonames):
    """An argv prefix that runs a command where the libraries sonames cannot
    be loaded; skips when this machine cannot make mount namespaces."""
    paths = [lib_path(s) for s in sonames]
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here (unshare: {probe.stderr.strip()})")
    cover = " && ".join(f"mount --bind /dev/null {shlex.quote(p)}" for p in paths)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'{cover} && exec "$@"', "sh"]


def test_no_program_links_either_library():
    for prog in PROGRAMS:
        out = subprocess.run(["ldd", prog], capture_output=True, text=True, check=True).stdout
        for soname in (CURL, MHD):
            assert soname not in out, f"{prog} links {soname}:\n{out}"


def test_without_either_library_a_master_serves_and_a_client_puts(cluster):
    hide = without([CURL, MHD])
    m = cluster.master("--segment-size", "16M", prefix=hide)
    data = os.urandom(100_000)
    r = subprocess.run([*hide, CLI, "--master", m.addr, "put", "k"], input=data,
                       capture_output=True, timeout=60, env=cli_env())
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*hide, CLI, "--master", m.addr, "get", "k"], capture_output=True,
                       timeout=60, env=cli_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout == data


def test_metrics_without_libmicrohttpd_fail_the_start_naming_it():
    r = subprocess.run([*without([MHD]), MASTER, "--port", str(free_port()),
                        "--metrics", str(free_port())], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "cannot serve metrics" in r.stderr
    assert MHD in r.stderr


def test_etcd_without_libcurl_fails_the_start_naming_it():
    r = subprocess.run([*without([CURL]), MASTER, "--port", str(free_port()),
                        "--etcd", f"http://127.0.0.1:{free_port()}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert CURL in r.stderr, r.stderr
    # A client given the etcd form of a master address says the same.
    r = subprocess.run([*without([CURL]), CLI, "--master", f"etcd://127.0.0.1:{free_port()}",
                        "get", "k"], capture_output=True, text=True, timeout=60, env=cli_env())
    assert r.returncode != 0
    assert CURL in r.stderr, r.stderr
