"""mooncake.mooncake_config.MooncakeConfig: Mooncake's names, from a JSON
file and from the environment, and a store set up from it."""

import json

import pytest

from mooncake.mooncake_config import MooncakeConfig


def test_from_file_and_setup(tmp_path, cluster_store, blank_store):
    f = tmp_path / "mooncake.json"
    f.write_text(json.dumps({
        "local_hostname": "node-a", "metadata_server": "P2PHANDSHAKE",
        "global_segment_size": "16MB", "local_buffer_size": "0.5g", "protocol": "tcp",
        "device_name": "", "master_server_address": cluster_store.cluster.addr,
        "enable_ssd_offload": "false"}))
    c = MooncakeConfig.from_file(str(f))
    assert (c.global_segment_size, c.local_buffer_size) == (16 << 20, 512 << 20)
    assert c.enable_ssd_offload is False and c.tenant_id == "default"
    s = blank_store()
    assert s.setup(c.local_hostname, c.metadata_server, c.global_segment_size,
                   c.local_buffer_size, c.protocol, c.device_name or "",
                   c.master_server_address, None, c.enable_ssd_offload, c.ssd_offload_path,
                   c.tenant_id) == 0
    assert s.get_hostname().startswith("127.0.0.1:")  # a node: its data address
    assert s.put("cfg", b"v") == 0 and cluster_store.get("cfg") == b"v"


def test_load_from_env(monkeypatch, tmp_path):
    for k in ("MOONCAKE_CONFIG_PATH", "MOONCAKE_MASTER"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(ValueError):
        MooncakeConfig.load_from_env()
    monkeypatch.setenv("MOONCAKE_MASTER", "10.0.0.1:50051")
    monkeypatch.setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "1GB")
    monkeypatch.setenv("MOONCAKE_OFFLOAD_ENABLED", "yes")
    c = MooncakeConfig.load_from_env()
    assert (c.master_server_address, c.global_segment_size, c.local_buffer_size) == \
        ("10.0.0.1:50051", 1 << 30, 1 << 30)
    assert (c.local_hostname, c.metadata_server, c.protocol, c.enable_ssd_offload) == \
        ("localhost", "P2PHANDSHAKE", "tcp", True)
    monkeypatch.setenv("MOONCAKE_OFFLOAD_ENABLED", "perhaps")
    with pytest.raises(ValueError):
        MooncakeConfig.load_from_env()
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"local_hostname": "h", "metadata_server": "m"}))
    monkeypatch.setenv("MOONCAKE_CONFIG_PATH", str(f))
    with pytest.raises(ValueError):  # master_server_address missing
        MooncakeConfig.load_from_env()
