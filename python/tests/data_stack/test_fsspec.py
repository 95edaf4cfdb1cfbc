"""mooncake:// through fsspec (mooncake.filesystem) against live stores:
the direct backend embedded and as a cluster client, and the mount
backend; keys are paths with "/" between directories, as in the mount."""

import asyncio
import os
import subprocess
import sys

import pytest

fsspec = pytest.importorskip("fsspec", reason="python3-fsspec is not installed")

from mooncake.filesystem import MooncakeFileSystem  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))


def test_files_through_every_backend(store):
    fs = MooncakeFileSystem(store=store)
    fs.pipe("mooncake://d/a.bin", b"A" * 1000)
    with fs.open("d/sub/b.txt", "wb") as f:  # written in parts, stored at close
        f.write(b"first,")
        f.write(b"second")
    assert store.get("d/sub/b.txt") == b"first,second"  # the key is the path
    if store.mode == "mount":
        with open(store.daemon.p("d", "sub", "b.txt"), "rb") as f:
            assert f.read() == b"first,second"

    assert fs.cat("d/a.bin") == b"A" * 1000
    assert fs.cat_file("d/sub/b.txt", start=6) == b"second"
    with fs.open("mooncake://d/sub/b.txt", "rb") as f:
        assert f.read(5) == b"first" and f.read() == b",second"
    assert fs.ls("d", detail=False) == ["d/a.bin", "d/sub"]
    assert fs.ls("d") == [{"name": "d/a.bin", "size": 1000, "type": "file"},
                          {"name": "d/sub", "size": 0, "type": "directory"}]
    assert fs.info("d/sub") == {"name": "d/sub", "size": 0, "type": "directory"}
    assert fs.info("d/sub/b.txt")["size"] == 12
    assert fs.find("d") == ["d/a.bin", "d/sub/b.txt"]
    assert fs.glob("d/*.bin") == ["d/a.bin"]
    assert fs.exists("d/a.bin") and not fs.exists("d/none")
    with pytest.raises(FileNotFoundError):
        fs.cat("d/none")
    with pytest.raises(FileNotFoundError):
        fs.ls("nowhere")

    fs.rm("d/a.bin")
    assert not fs.exists("d/a.bin") and store.is_exist("d/a.bin") == 0
    fs.rm("d", recursive=True)
    assert fs.ls("") == [] and not fs.exists("d")


def test_async_methods_await_the_stores_futures(direct_store):
    async def main():
        fs = MooncakeFileSystem(store=direct_store, asynchronous=True)
        await asyncio.gather(*(fs._pipe_file(f"p/{i}", bytes([i]) * 100) for i in range(20)))
        got = await asyncio.gather(*(fs._cat_file(f"p/{i}") for i in range(20)))
        assert got == [bytes([i]) * 100 for i in range(20)]
        assert len(await fs._ls("p")) == 20
        await fs._rm("p", recursive=True)
        assert await fs._ls("") == []

    asyncio.run(main())


# A fresh interpreter: fsspec finds mooncake:// by name once mooncake is
# imported, before or after fsspec, and opens the store from storage options.
REGISTERED = r"""
import sys
first, addr = sys.argv[1], sys.argv[2]
if first == "fsspec":
    import fsspec, mooncake
else:
    import mooncake, fsspec
opts = {"master_server_addr": addr, "timeout_ms": 2000}
with fsspec.open("mooncake://reg/k", "wb", **opts) as f:
    f.write(b"through fsspec.open")
with fsspec.open("mooncake://reg/k", "rb", **opts) as f:
    assert f.read() == b"through fsspec.open"
print(type(fsspec.filesystem("mooncake", **opts)).__module__)
"""


@pytest.mark.parametrize("first", ["fsspec", "mooncake"])
def test_protocol_is_registered_on_import(make_cluster, first):
    c = make_cluster(nodes=1)
    r = subprocess.run([sys.executable, "-c", REGISTERED, first, c.addr], capture_output=True,
                       text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "python")})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["mooncake.filesystem"]
    assert c.cli("get", "reg/k").stdout == b"through fsspec.open"


def test_pandas_reads_and_writes_csv(direct_store):
    pd = pytest.importorskip("pandas", reason="python3-pandas is not installed")
    fs = MooncakeFileSystem(store=direct_store)
    df = pd.DataFrame({"x": [1, 2, 3], "y": ["a", "b", "c"]})
    with fs.open("tables/t.csv", "wb") as f:
        df.to_csv(f, index=False)
    assert direct_store.get("tables/t.csv") == b"x,y\n1,a\n2,b\n3,c\n"
    with fs.open("tables/t.csv", "rb") as f:
        assert pd.read_csv(f).equals(df)


def test_pandas_opens_mooncake_urls(make_cluster):
    pd = pytest.importorskip("pandas", reason="python3-pandas is not installed")
    c = make_cluster(nodes=1)
    opts = {"master_server_addr": c.addr, "timeout_ms": 2000}
    df = pd.DataFrame({"n": range(100), "sq": [i * i for i in range(100)]})
    df.to_csv("mooncake://csv/squares.csv", index=False, storage_options=opts)
    assert c.cli("get", "csv/squares.csv").stdout.startswith(b"n,sq\n0,0\n1,1\n")
    assert pd.read_csv("mooncake://csv/squares.csv", storage_options=opts).equals(df)
    fsspec.filesystem("mooncake", **opts).close()


def test_pyarrow_dataset(direct_store):
    pytest.importorskip("pyarrow", reason="python3-pyarrow is not packaged in Debian 12")
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    fs = MooncakeFileSystem(store=direct_store)
    with fs.open("pq/part-0.parquet", "wb") as f:
        pq.write_table(pa.table({"v": [1, 2, 3]}), f)
    assert ds.dataset("pq", filesystem=fs, format="parquet").to_table()["v"].to_pylist() == \
        [1, 2, 3]
