"""setup() takes Mooncake's whole argument list, positionally and by
keyword (and in the dict form, with its string values): each option works
or returns a documented code, never a TypeError. ReplicateConfig has
Mooncake's fields with its range checks."""

import os
import urllib.request

import pytest

from mooncake.store import (
    INVALID_PARAMS,
    UNAVAILABLE_IN_CURRENT_MODE,
    ObjectDataType,
    ReplicateConfig,
    SoftPinAction,
)


def test_mooncakes_positional_and_keyword_forms(blank_store):
    s = blank_store()
    assert s.setup("localhost", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", "", None,
                   False, "", "default") == 0
    s = blank_store()
    assert s.setup(local_hostname="h", metadata_server="", global_segment_size="16MB",
                   local_buffer_size="0", protocol="tcp", rdma_devices="",
                   master_server_addr="", engine=None, enable_ssd_offload=False,
                   ssd_offload_path="/unused", tenant_id="default") == 0
    s = blank_store()
    assert s.setup({"global_segment_size": str(16 << 20), "local_buffer_size": "0",
                    "enable_ssd_offload": "false", "enable_egm_store_pool": "false",
                    "egm_numa_nodes": "auto", "tenant_id": ""}) == 0


@pytest.mark.parametrize("opts, code", [
    ({"enable_ssd_offload": True}, UNAVAILABLE_IN_CURRENT_MODE),
    ({"enable_egm_store_pool": "true"}, UNAVAILABLE_IN_CURRENT_MODE),
    ({"tenant_id": "team-a"}, UNAVAILABLE_IN_CURRENT_MODE),
    ({"enable_ssd_offload": "maybe"}, INVALID_PARAMS),
    ({"tenant_id": 7}, INVALID_PARAMS),
    ({"client_http_port": 70000, "enable_client_http_server": True}, INVALID_PARAMS),
    ({"ipc_socket_path": "/tmp/x.sock", "listen": "127.0.0.1:0"}, INVALID_PARAMS),
    ({"ipc_socket_path": "/tmp/x.sock", "master_server_addr": "127.0.0.1:1"},
     UNAVAILABLE_IN_CURRENT_MODE),
])
def test_options_without_a_tier_here(blank_store, opts, code):
    s = blank_store()
    assert s.setup({"global_segment_size": 16 << 20, **opts}) == code
    assert s.health_check() == 1


def test_client_http_server_serves_metrics_and_health(blank_store):
    s = blank_store()
    assert s.setup({"global_segment_size": 16 << 20, "enable_client_http_server": "true",
                    "client_http_port": "0"}) == 0
    port = s.client_http_port
    assert port > 0
    assert s.put("k", b"v") == 0
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
        assert r.status == 200
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert b"# TYPE" in r.read()
    # a second store cannot take the same port
    t = blank_store()
    assert t.setup({"global_segment_size": 16 << 20, "enable_client_http_server": True,
                    "client_http_port": port}) == INVALID_PARAMS
    s.close()
    assert s.client_http_port == 0


def test_ipc_socket_path_serves_an_embedded_store(blank_store, tmp_path):
    s = blank_store()
    path = str(tmp_path / "ipc.sock")
    assert s.setup({"global_segment_size": 16 << 20, "ipc_socket_path": path}) == 0
    assert os.path.exists(path)
    d = blank_store()
    assert d.setup_dummy(0, 0, "unix:" + path) == 0
    assert d.put("via-ipc", b"x") == 0 and s.get("via-ipc") == b"x"


def test_replicate_config_has_mooncakes_fields_and_ranges():
    c = ReplicateConfig()
    assert (c.nof_replica_num, c.dfs_replica_num, c.preferred_nof_segments, c.group_ids) == \
        (0, 0, [], None)
    assert c.data_type == ObjectDataType.UNKNOWN and not c.prefer_alloc_in_same_node
    c.data_type = ObjectDataType.KVCACHE
    c.group_ids = ["session-a"]
    c.replica_num = 2 ** 32 - 1
    for bad, exc in ((2 ** 32, OverflowError), (-1, TypeError), (1.0, TypeError),
                     ("2", TypeError)):
        with pytest.raises(exc):
            c.replica_num = bad
        with pytest.raises(exc):
            c.nof_replica_num = bad
    with pytest.raises(OverflowError):
        c.soft_pin_ttl_ms = 2 ** 64
    c.soft_pin_ttl_ms = 2 ** 64 - 1
    assert "data_type=KVCACHE" in str(c)


def test_replicate_config_codes(store):
    c = ReplicateConfig()
    c.soft_pin_ttl_ms = 1000  # a TTL without SoftPinAction.ENABLE
    assert store.put("k", b"v", c) == INVALID_PARAMS
    c.soft_pin_action = SoftPinAction.ENABLE
    assert store.put("k", b"v", c) == 0
    n = ReplicateConfig()
    n.nof_replica_num = 1
    assert store.put("n", b"v", n) == UNAVAILABLE_IN_CURRENT_MODE
    assert store.batch_put_from(["n"], [bytearray(1)], [1], n) == [UNAVAILABLE_IN_CURRENT_MODE]
    d = ReplicateConfig()
    d.dfs_replica_num = 1
    assert store.upsert("n", b"v", d) == UNAVAILABLE_IN_CURRENT_MODE
    g = ReplicateConfig()
    g.group_ids = ["grp"]
    g.data_type = ObjectDataType.TENSOR
    assert store.put("g", b"v", g) == 0 and store.get("g") == b"v"


def test_options_on_the_mount_and_in_a_cluster(blank_store, make_daemon, make_cluster):
    d = make_daemon()
    assert blank_store().setup({"mount_point": d.path, "enable_client_http_server": True}) == \
        UNAVAILABLE_IN_CURRENT_MODE
    assert blank_store().setup({"mount_point": d.path, "tenant_id": "t"}) == \
        UNAVAILABLE_IN_CURRENT_MODE
    m = blank_store()
    assert m.setup({"mount_point": d.path, "tenant_id": "default",
                    "enable_ssd_offload": False}) == 0 and m.backend == "mount"
    c = make_cluster(nodes=1)
    s = blank_store()
    assert s.setup("h", "P2PHANDSHAKE", 0, 0, "tcp", "", c.addr, None, False, "",
                   "default", enable_client_http_server=True, timeout_ms=2000) == 0
    assert s.client_http_port > 0 and s.put("k", b"v") == 0
