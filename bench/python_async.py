#!/usr/bin/env python3
"""async_get throughput of the Python client, side by side, in one run.

Like with like: the bytes live in one place, the embedded store of a
mooncake-fs daemon started for the run (a separate process), and every
column but the last reads them from there:

  native    MooncakeDistributedStoreAsync.async_get on the direct backend,
            a pure client of the daemon's store over its --listen Unix
            socket, through which it maps the daemon's segment (shared
            memory: the bytes do not cross the socket), futures resolved
            from an eventfd on the event loop;
  executor  what Mooncake's async wrapper does: loop.run_in_executor() of the
            sync get() per call, same client;
  mount     async_get on the mount backend (one hop per get to its own
            threads) through the daemon's mount;
  in-proc   for reference only (no ratio): native async_get on an embedded
            store in this process, which no other process can reach.

For 1 KiB and 1 MiB values, with CONCURRENCY coroutines each issuing gets in
a loop for SECONDS each; prints ops/s and the ratios native/executor and
native/mount. With BENCH_RESULTS set, appends each cell to that file
("python.SIZE.COLUMN OPS", for bench/report.py). About 20 s in all.

At 1 MiB the cost is the bytes object itself: glibc trims the main heap and
every get() page-faults fresh memory. So, unless GLIBC_TUNABLES is set
already, the script runs once more with glibc keeping freed heap
(KEEP_HEAP below: both thresholds, as setting the trim threshold alone
turns off glibc's dynamic mmap threshold and every 1 MiB bytes is then
mmap()ed and unmapped, slower still) and records that run as
"python_kept.SIZE.COLUMN": the same work on every column, without the page
faults that all columns pay alike.

Usage: PYTHONPATH=python /usr/bin/python3 bench/python_async.py
       (after `make all python-ext`; MC_BUILD picks the build directory)
"""

import asyncio
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
BUILD = os.path.join(ROOT, os.environ.get("MC_BUILD", "build"))

from mooncake.async_store import MooncakeDistributedStoreAsync  # noqa: E402

SECONDS = float(os.environ.get("BENCH_SECONDS", "2"))
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "32"))
SIZES = [("1 KiB", 1 << 10), ("1 MiB", 1 << 20)]
KEYS = 16
KEEP_HEAP = "glibc.malloc.trim_threshold=268435456:glibc.malloc.mmap_threshold=33554432"
KEPT = os.environ.get("GLIBC_TUNABLES") == KEEP_HEAP


async def measure(get, keys, expect_len):
    """ops/s of `get` over SECONDS with CONCURRENCY workers."""
    done = 0
    stop = time.perf_counter() + SECONDS

    async def worker(w):
        nonlocal done
        i = w
        while time.perf_counter() < stop:
            v = await get(keys[i % len(keys)])
            if len(v) != expect_len:
                raise AssertionError(f"got {len(v)} bytes, expected {expect_len}")
            i += 1
            done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*[worker(w) for w in range(CONCURRENCY)])
    return done / (time.perf_counter() - t0)


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


async def run(client, mount, inproc):
    loop = asyncio.get_running_loop()

    async def executor_get(key):
        return await loop.run_in_executor(None, client.get, key)

    rows = []
    for label, size in SIZES:
        keys = [f"bench/{size}/{i}" for i in range(KEYS)]
        for s in (client, mount, inproc):
            assert await s.async_upsert_batch(keys, [os.urandom(size)] * KEYS) == 0
        # Warm up each path (loop attachment, executor threads, mappings).
        for get in (client.async_get, executor_get, mount.async_get, inproc.async_get):
            await asyncio.gather(*[get(k) for k in keys])
        native = await measure(client.async_get, keys, size)
        execu = await measure(executor_get, keys, size)
        mnt = await measure(mount.async_get, keys, size)
        inp = await measure(inproc.async_get, keys, size)
        rows.append((label, native, execu, mnt, inp))
    return rows


def main():
    daemon = os.path.join(BUILD, "mooncake-fs")
    tmp = tempfile.mkdtemp(prefix="mc-bench-")
    mnt = os.path.join(tmp, "mnt")
    os.mkdir(mnt)
    sock = "unix:" + os.path.join(tmp, "store.sock")
    log = open(os.path.join(tmp, "daemon.log"), "w")
    proc = subprocess.Popen([daemon, "-f", "--segment-size", "512M", "--listen", sock, mnt],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 20
        while not mounted(os.path.realpath(mnt)):
            if proc.poll() is not None or time.time() > deadline:
                sys.exit(f"mooncake-fs did not mount (see {log.name})")
            time.sleep(0.01)
        client = MooncakeDistributedStoreAsync()
        mount = MooncakeDistributedStoreAsync()
        inproc = MooncakeDistributedStoreAsync()
        # A pure client (no segment of its own): its puts land in the daemon.
        assert client.setup({"master_server_address": sock, "global_segment_size": 0}) == 0
        assert mount.setup({"mount_point": mnt}) == 0
        assert inproc.setup({"global_segment_size": "512MB"}) == 0
        rows = asyncio.run(run(client, mount, inproc))
        for s in (client, mount, inproc):
            s.close()
    finally:
        subprocess.run(["fusermount3", "-u", mnt], check=False)
        rc = proc.wait(timeout=60)
        log.close()
    print(f"python async_get, {CONCURRENCY} in flight, {SECONDS:g} s per cell (ops/s); "
          "native, executor and mount read from the same mooncake-fs daemon")
    print(f"{'value':>6} {'native':>10} {'executor':>10} {'mount':>10} {'in-proc':>10}"
          f" {'native/executor':>16} {'native/mount':>13}")
    results = os.environ.get("BENCH_RESULTS")
    for label, native, execu, mnt_ops, inp in rows:
        print(f"{label:>6} {native:10.0f} {execu:10.0f} {mnt_ops:10.0f} {inp:10.0f}"
              f" {native / execu:15.2f}x {native / mnt_ops:12.2f}x")
        if results:
            with open(results, "a") as f:
                size = label.replace(" ", "")
                for col, v in (("native", native), ("executor", execu), ("mount", mnt_ops),
                               ("inproc", inp)):
                    f.write(f"{'python_kept' if KEPT else 'python'}.{size}.{col} {v:.0f}\n")
    print(f"GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')!r} (1 MiB gets allocate 1 MiB "
          "bytes each; see docs/PYTHON.md on malloc trimming)")
    if rc != 0:
        sys.exit(f"mooncake-fs exited {rc}")
    if "GLIBC_TUNABLES" not in os.environ:
        print("again, with glibc keeping freed heap:", flush=True)
        subprocess.run([sys.executable, os.path.abspath(__file__)], check=True,
                       env={**os.environ, "GLIBC_TUNABLES": KEEP_HEAP})


if __name__ == "__main__":
    main()
