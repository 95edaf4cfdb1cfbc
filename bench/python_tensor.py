#!/usr/bin/env python3
"""put_tensor/get_tensor against what a user would write without them:
torch.save/torch.load through io.BytesIO (serializing into memory, no store).

Two cases, each timed REPEAT times: one 64 MiB float16 tensor, and 1,000
small float16 tensors of 4 KiB each (one call per tensor, as a loop over
keys). The store is an embedded one in this process (the direct backend: the
bytes are copied into its segment and read back from it). Prints the rates
and the ratios store / torch (above 1: the store is faster); with
BENCH_RESULTS set, appends "tensor.CASE.OP.COLUMN RATE" lines for
bench/report.py (RATE in MiB/s for the large tensor, tensors/s for the small
ones). About 10 s.

Usage: PYTHONPATH=python /usr/bin/python3 bench/python_tensor.py
       (after `make all python-ext`)
"""

import io
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

try:
    import torch
except ImportError:
    print("bench/python_tensor.py: skipped (python3-torch is not installed)")
    sys.exit(0)

from mooncake.store import MooncakeDistributedStore  # noqa: E402

REPEAT = int(os.environ.get("BENCH_TENSOR_REPEAT", "5"))
SMALL = 1000


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run_case(store, name, tensors, unit):
    """Times put/get of tensors (a list) both ways; returns {(op, col): rate}."""
    scale = sum(t.numel() * t.element_size() for t in tensors) / (1 << 20) \
        if unit == "MiB/s" else len(tensors)
    keys = [f"{name}/{i}" for i in range(len(tensors))]
    blobs = [None] * len(tensors)
    rates = {}

    def mc_put():
        for k, t in zip(keys, tensors):
            assert store.put_tensor(k, t) == 0

    def mc_get():
        for k in keys:
            assert store.get_tensor(k) is not None

    def torch_save():
        for i, t in enumerate(tensors):
            f = io.BytesIO()
            torch.save(t, f)
            blobs[i] = f.getvalue()

    def torch_load():
        for b in blobs:
            torch.load(io.BytesIO(b))

    samples = {k: [] for k in ("put.mc", "get.mc", "put.torch", "get.torch")}
    for _ in range(REPEAT):
        samples["put.mc"].append(timed(mc_put))
        samples["get.mc"].append(timed(mc_get))
        assert store.batch_remove(keys, True) == [0] * len(keys)
        samples["put.torch"].append(timed(torch_save))
        samples["get.torch"].append(timed(torch_load))
    for k, secs in samples.items():
        rates[k] = scale / statistics.median(secs)
    return rates


def main():
    store = MooncakeDistributedStore()
    assert store.setup({"global_segment_size": 512 << 20}) == 0
    cases = [
        ("64MiB", [torch.randn(32 << 20).to(torch.float16)], "MiB/s"),
        ("small", [torch.randn(32, 64).to(torch.float16) for _ in range(SMALL)], "tensors/s"),
    ]
    results = os.environ.get("BENCH_RESULTS")
    print(f"{'case':<26}{'put_tensor':>14}{'torch.save':>14}{'ratio':>8}"
          f"{'get_tensor':>14}{'torch.load':>14}{'ratio':>8}")
    for name, tensors, unit in cases:
        r = run_case(store, name, tensors, unit)
        label = "64 MiB float16" if name == "64MiB" else f"{SMALL} x 4 KiB float16"
        print(f"{label + ' (' + unit + ')':<26}{r['put.mc']:>14,.0f}{r['put.torch']:>14,.0f}"
              f"{r['put.mc'] / r['put.torch']:>7.2f}x{r['get.mc']:>14,.0f}"
              f"{r['get.torch']:>14,.0f}{r['get.mc'] / r['get.torch']:>7.2f}x")
        if results:
            with open(results, "a") as f:
                for k, v in r.items():
                    f.write(f"tensor.{name}.{k} {v:.1f}\n")
    store.close()


if __name__ == "__main__":
    main()
