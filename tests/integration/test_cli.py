"""mooncake-cli for people: --help of every command, the progress line of
put and get (on a terminal only), and `stats` as a table and as JSON,
checked against what a workload did to a real master and its nodes."""

import os
import re
import pty
import subprocess

import pytest

from harness import CLI, cli, cli_stats

MiB = 1 << 20

# Every command and an option or argument its --help must name.
COMMANDS = {"put": "--replicas", "get": "--repeat", "stat": "KEY", "rm": "-f", "ls": "PREFIX",
            "stats": "--json", "node": "--segment-size"}


def test_help_names_every_command_and_option():
    r = subprocess.run([CLI, "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and r.stderr == ""
    for name in COMMANDS:
        assert f"\n    {name}" in r.stdout, name
    for opt in ("--master", "--replicas", "--no-progress", "--stats", "--protocol"):
        assert opt in r.stdout, opt


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_of_each_command(name):
    # No store is opened (no --master, and nothing listens): help only.
    for flag in ("--help", "-h"):
        r = subprocess.run([CLI, name, flag], capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, (flag, r.stderr)
        assert r.stdout.startswith(f"usage: mooncake-cli [OPTIONS] {name}"), r.stdout
        assert COMMANDS[name] in r.stdout


def test_unknown_command_is_a_usage_error():
    r = subprocess.run([CLI, "frobnicate"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "no command 'frobnicate'" in r.stderr


def run_on_pty(args, **kw):
    """Runs mooncake-cli ARGS with stderr on a new pseudo-terminal; returns
    (exit status, what it wrote to the terminal)."""
    master, slave = pty.openpty()
    try:
        p = subprocess.Popen([CLI, *args], stderr=slave, **kw)
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the last writer closed the terminal
                break
            if not chunk:
                break
            out += chunk
        return p.wait(timeout=60), out
    finally:
        os.close(master)


@pytest.fixture
def one_node(cluster):
    master = cluster.master()
    cluster.node(master, "64M")
    return master


def test_progress_on_a_terminal_and_none_in_a_pipe(one_node, tmp_path):
    m = one_node.addr
    src, dst = tmp_path / "big", tmp_path / "back"
    data = os.urandom(8 * MiB)
    src.write_bytes(data)

    rc, tty = run_on_pty(["--master", m, "put", "big", str(src)])
    assert rc == 0, tty
    # The last state: bytes, time and rate (MiB/s, or GiB/s on a fast
    # machine), on a line redrawn with \r.
    assert b"\rput big  8.0 MiB in " in tty, tty
    assert re.search(rb" [0-9.]+ [MG]iB/s", tty), tty

    # Reads repeated with a pause redraw the line on the way: done, total, ETA.
    rc, tty = run_on_pty(["--master", m, "--repeat", "3", "--interval-ms", "150", "get", "big",
                          str(dst)])
    assert rc == 0, tty
    assert dst.read_bytes() == data
    assert b" / 24.0 MiB " in tty and b"ETA " in tty, tty
    assert b"\rget big  24.0 MiB in " in tty, tty

    # Piped, or --no-progress: no line at all; nor for a small value.
    r = cli(m, "put", "big2", str(src))
    assert r.returncode == 0 and r.stderr == b""
    r = cli(m, "get", "big2")
    assert r.returncode == 0 and r.stderr == b"" and r.stdout == data
    (tmp_path / "small").write_bytes(b"x" * 1000)
    with open(tmp_path / "small", "rb") as f:
        rc, tty = run_on_pty(["--master", m, "put", "small"], stdin=f)
    assert rc == 0 and tty == b"", tty
    rc, tty = run_on_pty(["--master", m, "--no-progress", "get", "big", str(dst)])
    assert rc == 0 and tty == b"", tty


def test_stats_table_and_json_follow_a_workload(cluster):
    master = cluster.master()
    cluster.nodes(master, 2, "32M")
    m = master.addr
    before = cli_stats(m)
    assert (before["nodes"], before["segments"], before["objects"]) == (2, 2, 0)
    assert before["total_bytes"] == 64 * MiB and before["used_bytes"] == 0
    assert before["counters"]["nodes"] == 2 and "repair_done" in before["counters"]

    sizes = {"a/1": 1 * MiB, "a/2": 3 * MiB, "b": 2 * MiB}
    for key, size in sizes.items():
        assert cli(m, "put", key, input=os.urandom(size)).returncode == 0
    assert cli(m, "--replicas", "2", "put", "twice", input=os.urandom(MiB)).returncode == 0
    assert cli(m, "rm", "b").returncode == 0

    st = cli_stats(m)
    assert (st["nodes"], st["segments"], st["objects"]) == (2, 2, 3)
    # The live objects' bytes, a replica each, two for "twice".
    live = sizes["a/1"] + sizes["a/2"] + 2 * MiB
    assert live <= st["used_bytes"] < live + MiB
    assert st["total_bytes"] == 64 * MiB and st["evicted"] == 0
    assert st["counters"]["puts"] == 0 and st["counters"]["objects_lost"] == 0

    r = cli(m, "stats")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    head, row = lines[0].split(), lines[1].split()
    assert head == ["NODES", "SEGMENTS", "CAPACITY", "USED", "OBJECTS", "EVICTED"]
    assert row[:2] == ["2", "2"] and row[2:4] == ["64.0", "MiB"] and row[-2:] == ["3", "0"]
    used_pct = 100.0 * st["used_bytes"] / st["total_bytes"]
    assert f"({used_pct:.1f}%)" in lines[1]
    counters = dict(line.split() for line in lines[lines.index("") + 2:])
    assert counters.keys() == st["counters"].keys() - {"nodes", "segments"}
    assert counters["objects_lost"] == "0"
