"""The direct backend against a cluster: real mooncake-master, node and
mooncake-fs processes on loopback (ports picked by binding port 0), each
stopped at the end and required to exit 0 with a clean log (conftest.py).

The method tests of test_store.py and test_async_store.py also run against a
master and two nodes (their `store` and `direct_store` fixtures and
`direct_mode` parameter, which give the lease and eviction options to the
master); this file covers what only a cluster has: setup with a master
address (client or node), an unreachable or silent master, health_check,
replicas across a node's death, and one store seen through a mount and
through the direct backend."""

import asyncio
import os
import shutil
import socket
import subprocess
import time

import pytest

import harness
from conftest import CLI, free_port
from mooncake.async_store import MooncakeDistributedStoreAsync
from mooncake.store import (
    INVALID_PARAMS,
    NO_AVAILABLE_HANDLE,
    RPC_FAIL,
    MooncakeDistributedStore,
    ReplicateConfig,
)


def replicas(cluster, key):
    """The replica count the master reports for key (through the C API)."""
    r = cluster.cli("stat", key)
    assert r.returncode == 0, r.stderr
    fields = r.stdout.split()
    return int(fields[fields.index(b"replicas") + 1])


# ---- setup ----


def test_setup_as_a_pure_client_and_as_a_node(make_cluster, make_store):
    c = make_cluster("--node-ttl-ms", "1000", nodes=0)  # a master with no memory at all
    client = make_store("cluster", cluster=c)
    assert client.health_check() == 0
    assert client.put("k", b"nowhere to go") == NO_AVAILABLE_HANDLE
    # Mooncake's positional form; global_segment_size > 0 makes this process a
    # node: its memory now takes the other client's puts.
    node = MooncakeDistributedStore()
    assert node.setup("localhost", "P2PHANDSHAKE", "16MB", "16MB", "tcp", "", c.addr) == 0
    try:
        # a node's host name is its data address, the name of its segment
        me = node.get_hostname()
        assert me.startswith("127.0.0.1:") and node.backend == "direct"
        assert client.put("k", b"on the python node") == 0
        assert node.get("k") == b"on the python node"
        ends = [d.get_memory_descriptor().buffer_descriptor.transport_endpoint_
                for d in client.get_replica_desc("k")]
        assert ends == [me]
        r = c.cli("get", "k")
        assert r.returncode == 0 and r.stdout == b"on the python node"
        assert client.put("big", bytes(17 << 20)) == NO_AVAILABLE_HANDLE  # > the 16 MB segment
    finally:
        assert node.close() == 0
    # The node's segment goes with it. (libmooncake's close does not get its
    # unmount to the master yet: until the node TTL the master still places
    # puts there, and they fail with RPC_FAIL; none succeeds.)
    deadline = time.monotonic() + 10
    while (r := client.put("k2", b"v")) != NO_AVAILABLE_HANDLE:
        assert r == RPC_FAIL, r
        assert time.monotonic() < deadline, "the closed node's segment is still used"
        time.sleep(0.05)
    assert client.get("k") == b""  # its only replica was there


def test_setup_keyword_and_dict_forms_with_a_master(make_cluster):
    c = make_cluster(nodes=1)
    a = MooncakeDistributedStore()
    assert a.setup(local_hostname="h", metadata_server="", global_segment_size=0,
                   local_buffer_size="16MB", protocol="tcp", rdma_devices="",
                   master_server_addr=c.addr, timeout_ms=1000) == 0
    b = MooncakeDistributedStore()
    assert b.setup({"master_server_address": c.addr, "global_segment_size": "8 MB",
                    "listen": "127.0.0.1:0"}) == 0
    assert a.put("from-a", b"1") == 0 and b.get("from-a") == b"1"
    assert b.put("from-b", b"2") == 0 and a.get("from-b") == b"2"
    assert a.close() == 0 and b.close() == 0


def test_unreachable_master_is_rpc_fail():
    port = free_port()  # nobody listens there
    for seg in (0, "16MB"):
        s = MooncakeDistributedStore()
        t0 = time.monotonic()
        assert s.setup({"master_server_addr": f"127.0.0.1:{port}",
                        "global_segment_size": seg, "timeout_ms": 500}) == RPC_FAIL
        assert time.monotonic() - t0 < 3
        assert s.health_check() == 1 and s.put("k", b"v") != 0


def test_silent_master_fails_within_the_timeout():
    # Accepts connections (the kernel's backlog) and never answers.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        addr = "127.0.0.1:%d" % silent.getsockname()[1]
        for seg in (0, 4 << 20):
            s = MooncakeDistributedStore()
            t0 = time.monotonic()
            assert s.setup({"master_server_addr": addr, "global_segment_size": seg,
                            "timeout_ms": 300}) == RPC_FAIL
            took = time.monotonic() - t0
            assert 0.25 <= took < 3, took
            assert s.health_check() == 1


def test_embedded_store_serves_the_protocol_on_listen(make_store, tmp_path):
    # This process is the one-node cluster; a C API client sees its objects.
    addr = f"127.0.0.1:{free_port()}"
    host = make_store("direct", listen=addr)
    assert host.put("served", b"by python") == 0
    client = MooncakeDistributedStore()
    assert client.setup({"master_server_addr": addr, "timeout_ms": 1000}) == 0
    try:
        assert client.get("served") == b"by python"
        assert client.put("from-client", b"c") == 0 and host.get("from-client") == b"c"
    finally:
        assert client.close() == 0
    r = subprocess.run([CLI, "--master", addr, "get", "served"], capture_output=True, timeout=30)
    assert r.returncode == 0 and r.stdout == b"by python", r.stderr
    # The address is taken now.
    again = MooncakeDistributedStore()
    assert again.setup({"listen": addr}) == INVALID_PARAMS and again.health_check() == 1


@pytest.mark.parametrize("addr", ["127.0.0.1:notaport", "127.0.0.1:99999", "[::1", ":1"])
def test_bad_master_address_is_invalid_params(addr):
    s = MooncakeDistributedStore()
    assert s.setup({"master_server_addr": addr}) == INVALID_PARAMS
    assert s.health_check() == 1


@pytest.mark.parametrize("options", [{"timeout_ms": -1}, {"timeout_ms": "1s"},
                                     {"timeout_ms": 1.5}, {"master_server_addr": 50051},
                                     {"listen": 0}])
def test_bad_cluster_options_are_invalid_params(options):
    assert MooncakeDistributedStore().setup(options) == INVALID_PARAMS


# ---- health_check and a lost master ----


@pytest.mark.asyncio
async def test_master_killed_then_restarted(make_cluster, make_store):
    c = make_cluster()
    s = make_store("cluster", cluster=c, timeout_ms=1000)
    assert s.put("before", b"x") == 0 and s.health_check() == 0
    # Once the nodes hold its record, "before" survives the restart.
    deadline = time.monotonic() + 10
    while harness.cli_stats(c.addr)["counters"]["notices_waiting"]:
        assert time.monotonic() < deadline, "the nodes did not fetch their records"
        time.sleep(0.05)
    c.master.kill9()
    t0 = time.monotonic()
    assert s.health_check() == 2
    assert s.put("k", b"v") == RPC_FAIL
    assert s.upsert("k", b"v") == RPC_FAIL
    assert s.get("before") == b"" and s.get_buffer("before") is None
    assert s.is_exist("before") == RPC_FAIL and s.get_size("before") == RPC_FAIL
    assert s.remove("before") == RPC_FAIL
    assert s.batch_is_exist(["before", "k"]) == [RPC_FAIL, RPC_FAIL]
    assert s.get_into("before", bytearray(8)) == RPC_FAIL
    assert s.remove_all() == RPC_FAIL
    assert await s.async_put("k", b"v") == RPC_FAIL
    assert await s.async_get("before") == b""
    assert await s.async_health_check() == 2
    assert time.monotonic() - t0 < 5 * 1.0 + 2  # nothing waited past its timeout
    # A new master on the same address: the client reconnects, the nodes
    # mount their segments again and report what they hold, writes succeed.
    c.start_master(port=c.master.port)
    deadline = time.monotonic() + 15
    while s.health_check() != 0 or s.put("after", b"back") != 0:
        assert time.monotonic() < deadline, "the store did not come back"
        await asyncio.sleep(0.05)
    assert s.get("after") == b"back" and await s.async_get("after") == b"back"
    assert s.is_exist("before") == 1 and s.get("before") == b"x"


def test_hung_master_health_check_is_bounded(make_cluster, make_store):
    c = make_cluster(nodes=1)
    s = make_store("cluster", cluster=c, timeout_ms=300)
    assert s.put("k", b"v") == 0
    c.master.pause()
    try:
        t0 = time.monotonic()
        assert s.health_check() == 2
        assert s.is_exist("k") == RPC_FAIL
        assert time.monotonic() - t0 < 2
    finally:
        c.master.resume()
    deadline = time.monotonic() + 10
    while s.health_check() != 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert s.get("k") == b"v"


# ---- replicas ----


@pytest.mark.asyncio
async def test_two_replicas_survive_a_node_kill(make_cluster, make_store):
    c = make_cluster(nodes=2)
    s = make_store("cluster", cluster=c)
    two = ReplicateConfig(replica_num=2)
    blobs = {f"r/{i}": os.urandom(1 + (i * 7919) % 300_000) for i in range(20)}
    keys = list(blobs)
    assert s.put_batch(keys[:10], [blobs[k] for k in keys[:10]], two) == 0
    for k in keys[10:]:
        assert await s.async_put(k, blobs[k], two) == 0
    assert s.put("single", b"one replica") == 0
    assert replicas(c, keys[0]) == 2 and replicas(c, keys[-1]) == 2
    assert replicas(c, "single") == 1
    # Best effort: more replicas than segments places one per segment.
    assert s.put("three", b"3", ReplicateConfig(replica_num=3)) == 0
    assert replicas(c, "three") == 2
    c.nodes[0].kill9()
    # Every read fails over to the surviving replica.
    for k in keys:
        assert s.get(k) == blobs[k], k
    assert await asyncio.gather(*[s.async_get(k) for k in keys]) == [blobs[k] for k in keys]
    target = bytearray(300_000)
    assert s.get_into(keys[3], target) == len(blobs[keys[3]])
    assert bytes(target[:len(blobs[keys[3]])]) == blobs[keys[3]]
    assert s.get("three") == b"3"


# ---- one store, seen through a mount and through the direct backend ----


@pytest.fixture(params=["embedded-mount", "mount-of-a-master"])
def mount_and_store(request, make_daemon, make_cluster, make_store):
    """(mount daemon, direct store on the same objects):
    - embedded-mount: mooncake-fs with its own store, serving the master
      protocol on its default Unix socket (unix:/...); the direct backend
      uses that address as master_server_addr;
    - mount-of-a-master: mooncake-fs --master (a pure client) of a master
      with two nodes; the direct backend a client of the same master."""
    if request.param == "embedded-mount":
        d = make_daemon("--cache-timeout", "0", serve=True)
        addr = d.served_addr()
        assert addr.startswith("unix:/"), addr
        s = MooncakeDistributedStoreAsync()
        assert s.setup({"master_server_addr": addr, "timeout_ms": 2000}) == 0
        request.addfinalizer(s.close)
    else:
        c = make_cluster(nodes=2)
        d = make_daemon("--master", c.addr, "--segment-size", "0", "--cache-timeout", "0")
        s = make_store("cluster", cluster=c)
    return d, s


def test_xattrs_are_the_objects_metadata(mount_and_store):
    """An object's extended attributes are its metadata in the master: set
    on the mount, kept by a Python upsert (a new version), gone with a
    Python remove; Python reads them through the mount (os.getxattr)."""
    d, s = mount_and_store
    f = os.path.join(d.path, "meta-obj")
    assert s.put("meta-obj", b"one") == 0
    os.setxattr(f, "user.tag", b"kv-cache")
    assert s.upsert("meta-obj", b"two, from python") == 0
    assert open(f, "rb").read() == b"two, from python"
    assert os.getxattr(f, "user.tag") == b"kv-cache"
    assert os.listxattr(f) == ["user.tag"]
    assert s.remove("meta-obj", force=True) == 0
    assert s.put("meta-obj", b"three") == 0
    assert os.listxattr(f) == []


@pytest.mark.asyncio
async def test_files_in_the_mount_are_objects_of_the_direct_backend(mount_and_store, tmp_path):
    d, s = mount_and_store
    mnt = d.path
    # A file copied into the mount is returned by get().
    src = tmp_path / "src.bin"
    data = os.urandom(3 * 1024 * 1024 + 17)
    src.write_bytes(data)
    shutil.copyfile(src, os.path.join(mnt, "copied.bin"))
    os.makedirs(os.path.join(mnt, "dir", "sub"))
    with open(os.path.join(mnt, "dir", "sub", "small"), "wb") as f:
        f.write(b"small file")
    assert s.get("copied.bin") == data
    assert await s.async_get("copied.bin") == data
    assert s.get_size("copied.bin") == len(data) and s.is_exist("copied.bin") == 1
    assert s.get("dir/sub/small") == b"small file"
    # A symbolic link is an object holding its target; a FIFO an empty one.
    os.symlink("dir/sub/small", os.path.join(mnt, "link"))
    os.mkfifo(os.path.join(mnt, "fifo"))
    assert s.get("link") == b"dir/sub/small"
    assert s.get("fifo") == b"" and s.is_exist("fifo") == 1
    buf = s.get_buffer("dir/sub/small")
    assert bytes(buf) == b"small file"
    target = bytearray(len(data))
    assert s.get_into("copied.bin", target) == len(data) and target == data
    # A put() from Python appears as a file (and its directories) in the mount.
    value = os.urandom(200_000)
    assert s.put("from-python/nested/obj", value) == 0
    assert await s.async_put("from-python/async", b"async value") == 0
    with open(os.path.join(mnt, "from-python", "nested", "obj"), "rb") as f:
        assert f.read() == value
    with open(os.path.join(mnt, "from-python", "async"), "rb") as f:
        assert f.read() == b"async value"
    assert sorted(os.listdir(os.path.join(mnt, "from-python"))) == ["async", "nested"]
    assert os.path.getsize(os.path.join(mnt, "from-python", "nested", "obj")) == len(value)
    # Write-once put leaves the file alone; upsert replaces it.
    assert s.put("dir/sub/small", b"ignored") == 0
    assert open(os.path.join(mnt, "dir", "sub", "small"), "rb").read() == b"small file"
    assert s.upsert("dir/sub/small", b"replaced from python") == 0
    assert open(os.path.join(mnt, "dir", "sub", "small"), "rb").read() == \
        b"replaced from python"
    # Removal either way.
    assert s.remove("from-python/async", force=True) == 0
    assert not os.path.exists(os.path.join(mnt, "from-python", "async"))
    os.unlink(os.path.join(mnt, "copied.bin"))
    assert s.get("copied.bin") == b"" and s.is_exist("copied.bin") == 0

