"""Metrics and health over HTTP (--metrics): a master, a node and a mount,
each serving /metrics and /health on a loopback port, scraped before and
after a workload through the mount; the counters must move by exactly what
the workload did. Every process is real; every wait is bounded."""

import os
import re
import subprocess
import urllib.error
import urllib.request

import pytest

from harness import MASTER, cli, free_port

KiB = 1 << 10
SIZE = 64 * KiB  # a multiple of the master's allocation unit: used bytes are exact
PUTS = 5
GETS = 3

# A sample line of the text format 0.0.4: name{labels} value
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
                    r'(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*)?\})? (\S+)$')


def get(port, path):
    """(status, body) of GET http://127.0.0.1:port/path."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def scrape(port):
    """The samples of /metrics as {(name, labels): value}, after checking
    that every line is a comment or a sample, and that every family has one
    TYPE line before its samples."""
    status, text = get(port, "/metrics")
    assert status == 200, text
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in types, f"two TYPE lines for {name}"
            assert kind in ("counter", "gauge", "histogram"), line
            types[name] = kind
            continue
        if line.startswith("# HELP "):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample: {line!r}"
        name, labels, value = m.group(1), m.group(3) or "", float(m.group(5))
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in types else name
        assert family in types, f"{name} has no TYPE line before it"
        samples[(name, labels)] = value
    return samples


def fuse_requests(port, op):
    """A mount's count of FUSE requests of opcode op (its --metrics port)."""
    return scrape(port).get(("mooncake_fuse_requests_total", f'opcode="{op}"'), 0)


def delta(before, after, name, labels=""):
    return after.get((name, labels), 0) - before.get((name, labels), 0)


def test_counters_move_by_the_workload(cluster):
    mport = free_port()
    master = cluster.master("--metrics", str(mport))
    nport = free_port()
    cluster.node(master, "64M", "--no-shm", "--metrics", str(nport))
    fport = free_port()
    mnt = cluster.mount("--master", master.addr, "--segment-size", "0", "--no-shm",
                        "--metrics", f"127.0.0.1:{fport}")
    for port in (mport, nport, fport):
        assert get(port, "/health") == (200, "ok\n")
        assert get(port, "/nothing")[0] == 404

    before = {p: scrape(p) for p in (mport, nport, fport)}
    data = [os.urandom(SIZE) for _ in range(PUTS)]
    for i, d in enumerate(data):
        with open(mnt.p(f"obj{i}"), "wb") as f:
            f.write(d)
    for i in range(GETS):
        with open(mnt.p(f"obj{i}"), "rb") as f:
            assert f.read() == data[i]
    after = {p: scrape(p) for p in (mport, nport, fport)}
    # An error: the lookup of a missing file (a create looks its name up
    # first, so it gets a phase of its own).
    with pytest.raises(FileNotFoundError):
        os.stat(mnt.p("missing"))
    errors = {p: scrape(p) for p in (mport, fport)}

    # The mount: FUSE requests, the client's operations, bytes over TCP
    # (a pure client, no shared memory: every byte goes to the node).
    b, a = before[fport], after[fport]
    assert delta(b, a, "mooncake_fuse_requests_total", 'opcode="CREATE"') == PUTS
    assert delta(b, a, "mooncake_fuse_requests_total", 'opcode="WRITE"') >= PUTS
    assert delta(b, a, "mooncake_fuse_requests_total", 'opcode="READ"') >= GETS
    assert delta(b, a, "mooncake_client_ops_total", 'op="writer_commit"') == PUTS
    assert delta(b, a, "mooncake_client_op_errors_total", 'op="writer_commit"') == 0
    assert delta(a, errors[fport], "mooncake_fuse_requests_total", 'opcode="LOOKUP"') == 1
    assert delta(a, errors[fport], "mooncake_client_ops_total", 'op="lookup"') == 1
    assert delta(a, errors[fport], "mooncake_client_op_errors_total", 'op="lookup"') == 1
    assert delta(b, a, "mooncake_client_op_duration_seconds_count", 'op="writer_commit"') == PUTS
    assert delta(b, a, "mooncake_client_op_duration_seconds_bucket",
                 'op="writer_commit",le="+Inf"') == PUTS
    assert delta(b, a, "mooncake_transport_bytes_total", 'transport="tcp"') == (PUTS + GETS) * SIZE
    for t in ("local", "shm", "rdma"):
        assert delta(b, a, "mooncake_transport_bytes_total", f'transport="{t}"') == 0
    buckets = [v for (n, l), v in sorted(a.items()) if n.endswith("_bucket")
               and l.startswith('op="writer_commit"')]
    assert len(buckets) == 17
    assert a[("mooncake_segment_capacity_bytes", "")] == 0

    # The master: objects, space, requests and their errors.
    b, a = before[mport], after[mport]
    assert delta(b, a, "mooncake_master_objects") == PUTS
    assert delta(b, a, "mooncake_master_used_bytes") == PUTS * SIZE
    assert a[("mooncake_master_capacity_bytes", "")] == 64 << 20
    assert a[("mooncake_master_nodes", "")] == 1
    # Every publish the mount made (a create publishes an empty file, the
    # close the data) is one PUT_COMMIT here.
    fb, fa = before[fport], after[fport]
    publishes = sum(delta(fb, fa, "mooncake_client_ops_total", f'op="{op}"')
                    for op in ("put", "writer_commit"))
    assert publishes >= PUTS
    assert delta(b, a, "mooncake_server_requests_total", 'op="PUT_COMMIT"') == publishes
    assert delta(b, a, "mooncake_server_request_errors_total", 'op="PUT_COMMIT"') == 0
    assert delta(a, errors[mport], "mooncake_server_request_errors_total", 'op="LOOKUP"') == 1
    assert a[("mooncake_master_evictions_total", "")] == 0
    assert a[("mooncake_server_connections", "")] >= 2  # the node and the mount

    # The node: the bytes its segment took and gave over TCP.
    b, a = before[nport], after[nport]
    assert delta(b, a, "mooncake_server_segment_bytes_total", 'direction="write"') == PUTS * SIZE
    assert delta(b, a, "mooncake_server_segment_bytes_total", 'direction="read"') == GETS * SIZE
    assert delta(b, a, "mooncake_server_requests_total", 'op="WRITE"') == PUTS
    assert a[("mooncake_segment_capacity_bytes", "")] == 64 << 20


def test_an_embedded_mount_reports_its_master(cluster):
    port = free_port()
    mnt = cluster.mount("--segment-size", "16M", "--metrics", str(port))
    before = scrape(port)
    with open(mnt.p("a"), "wb") as f:
        f.write(b"x" * SIZE)
    r = cli(mnt.served_addr(), "get", "missing")
    assert r.returncode != 0
    after = scrape(port)
    assert delta(before, after, "mooncake_master_objects") == 1
    assert delta(before, after, "mooncake_master_used_bytes") == SIZE
    assert delta(before, after, "mooncake_transport_bytes_total", 'transport="local"') == SIZE
    assert after[("mooncake_segment_capacity_bytes", "")] == 16 << 20
    assert after[("mooncake_master_segment_capacity_bytes", 'segment="0"')] == 16 << 20
    # The other process's failed get reached this process's master.
    assert sum(delta(before, after, "mooncake_server_request_errors_total", f'op="{op}"')
               for op in ("STAT", "GET_REPLICAS")) == 1
    assert get(port, "/health") == (200, "ok\n")


def test_a_taken_metrics_port_fails_the_start(cluster):
    port = free_port()
    cluster.master("--metrics", str(port))
    r = subprocess.run([MASTER, "--port", str(free_port()), "--metrics", str(port)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "cannot serve metrics" in r.stderr
