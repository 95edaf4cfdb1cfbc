"""mooncake.mooncake_config - MooncakeConfig: a store's setup() arguments read
from a JSON file or from the environment, under Mooncake's names.

    cfg = MooncakeConfig.load_from_env()     # MOONCAKE_CONFIG_PATH, else MOONCAKE_*
    store.setup(cfg.local_hostname, cfg.metadata_server, cfg.global_segment_size,
                cfg.local_buffer_size, cfg.protocol, cfg.device_name or "",
                cfg.master_server_address)

The environment: MOONCAKE_CONFIG_PATH (a JSON file with the fields below)
or MOONCAKE_MASTER (required then), MOONCAKE_LOCAL_HOSTNAME ("localhost"),
MOONCAKE_TE_META_DATA_SERVER ("P2PHANDSHAKE"), MOONCAKE_GLOBAL_SEGMENT_SIZE,
MOONCAKE_LOCAL_BUFFER_SIZE, MOONCAKE_PROTOCOL ("tcp"), MOONCAKE_DEVICE,
MOONCAKE_OFFLOAD_ENABLED, MOONCAKE_OFFLOAD_FILE_STORAGE_PATH,
MOONCAKE_TENANT_ID ("default").
"""

import json
import os
import re
from dataclasses import dataclass
from typing import Optional

DEFAULT_GLOBAL_SEGMENT_SIZE = 3355443200  # 3.125 GiB, Mooncake's default
DEFAULT_LOCAL_BUFFER_SIZE = 1073741824  # 1 GiB

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40}


def parse_size(value):
    """A byte count from an int or a string such as "3355443200", "512MB",
    "1.5g" (binary units, any case); ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([kmgt]?b?)\s*", str(value), re.I)
    if not m:
        raise ValueError(f"not a size: {value!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def parse_bool(value):
    """A boolean from a bool, a number or a string ("true", "no", "1", "",
    ...); ValueError for any other string."""
    if value is None or isinstance(value, (bool, int, float)):
        return bool(value)
    s = str(value).strip().lower()
    if s in ("true", "1", "yes", "on"):
        return True
    if s in ("false", "0", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {value!r}")


@dataclass
class MooncakeConfig:
    """setup()'s arguments, under Mooncake's names."""

    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    device_name: Optional[str]
    master_server_address: str
    enable_ssd_offload: bool = False
    ssd_offload_path: str = ""
    tenant_id: str = "default"

    @staticmethod
    def from_file(file_path):
        """The config in a JSON file; local_hostname, metadata_server and
        master_server_address are required (ValueError without them)."""
        with open(file_path) as f:
            c = json.load(f)
        missing = [k for k in ("local_hostname", "metadata_server", "master_server_address")
                   if k not in c]
        if missing:
            raise ValueError(f"missing config field(s): {', '.join(missing)}")
        return MooncakeConfig(
            local_hostname=c["local_hostname"], metadata_server=c["metadata_server"],
            global_segment_size=parse_size(c.get("global_segment_size",
                                                 DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=parse_size(c.get("local_buffer_size", DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=c.get("protocol", "tcp"), device_name=c.get("device_name", ""),
            master_server_address=c["master_server_address"],
            enable_ssd_offload=parse_bool(c.get("enable_ssd_offload", False)),
            ssd_offload_path=str(c.get("ssd_offload_path") or ""),
            tenant_id=str(c.get("tenant_id") or "default"))

    @staticmethod
    def load_from_env():
        """The config of MOONCAKE_CONFIG_PATH, else of the MOONCAKE_*
        variables (ValueError when neither it nor MOONCAKE_MASTER is set)."""
        path = os.getenv("MOONCAKE_CONFIG_PATH")
        if path is not None:
            return MooncakeConfig.from_file(path)
        env = os.environ.get
        if not env("MOONCAKE_MASTER"):
            raise ValueError("set MOONCAKE_CONFIG_PATH or MOONCAKE_MASTER")
        return MooncakeConfig(
            local_hostname=env("MOONCAKE_LOCAL_HOSTNAME", "localhost"),
            metadata_server=env("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
            global_segment_size=parse_size(env("MOONCAKE_GLOBAL_SEGMENT_SIZE",
                                               DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=parse_size(env("MOONCAKE_LOCAL_BUFFER_SIZE",
                                             DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=env("MOONCAKE_PROTOCOL", "tcp"), device_name=env("MOONCAKE_DEVICE", ""),
            master_server_address=env("MOONCAKE_MASTER"),
            enable_ssd_offload=parse_bool(env("MOONCAKE_OFFLOAD_ENABLED", "false")),
            ssd_offload_path=env("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", ""),
            tenant_id=env("MOONCAKE_TENANT_ID", "default"))
