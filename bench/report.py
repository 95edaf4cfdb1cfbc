"""bench/report.py RESULTS OUTDIR - the report of one `make bench` run.

RESULTS holds one measured value a line, "KEY VALUE", every run of every
benchmark (bench/run.sh, bench/cluster.sh, bench/python_async.py and
bench/python_tensor.py append to it). This writes OUTDIR/report.md (medians, every ratio, what each row
compares, the commit and the machine) and three plots next to it:
throughput by block size (the mount), 1 KiB ops/s by concurrency and 1 KiB
latency percentiles (the cluster), each next to the baselines of the same
run. Run with /usr/bin/python3 (matplotlib from Debian: python3-matplotlib).
"""

import collections
import os
import platform
import statistics
import subprocess
import sys
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TARGETS = [("tmpfs", "tmpfs"), ("pt", "passthrough_ll (page cache)"),
           ("ptd", "passthrough_ll (direct I/O)"), ("mc", "mooncake-fs (page cache)"),
           ("mcd", "mooncake-fs (direct I/O)")]
SWEEP_TARGETS = [t for t in TARGETS if t[0] != "mcd"]
MOUNT_ROWS = [
    ("write.fresh", "write, fresh memory",
     "a new file on memory no file used before (mooncake-fs restarted: a new segment)"),
    ("write.warm", "write, warm memory",
     "over memory the previous write touched: tmpfs and passthrough_ll overwrite in place "
     "(conv=notrunc), mooncake-fs writes a new file after rm (the range just freed)"),
    ("read.cold", "read, cold",
     "after drop_caches: passthrough_ll (page cache) reads through its daemon, "
     "tmpfs keeps its pages (they are the file)"),
    ("read.again", "re-read",
     "the same file again right after: only a cache that outlives open() helps "
     "(passthrough_ll's default, cache=auto, drops the file's pages at each open; "
     "mooncake-fs (page cache) keeps them while the file's version is unchanged)"),
]
SYSTEMS = [("tcp", "mooncake over TCP", {"put": "put", "get": "get"}),
           ("memcached", "memcached", {"put": "set", "get": "get"}),
           ("emb", "mooncake embedded", {"put": "put", "get": "get"})]


def load(path):
    vals = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2 and parts[1] not in ("", "n/a"):
                vals[parts[0]].append(float(parts[1]))
    return vals


class Results:
    def __init__(self, vals):
        self.vals = vals

    def m(self, key):
        """The median of KEY's runs (the lower middle for an even count), or None."""
        v = self.vals.get(key)
        return statistics.median_low(v) if v else None


def fmt(v, digits=0):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}" if v >= 100 or digits == 0 else f"{v:.{digits}f}"


def ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b else "-"


def git(*args):
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def idle_setting():
    """How idle CPUs wait here: the cpuidle governor and, for haltpoll, how
    long an idle vCPU polls before it halts. At 0 every wakeup across CPUs
    wakes a halted vCPU, which is what the small-files row mostly measures
    then (docs/BENCHMARKS.md, "With the idle vCPUs polling before they
    halt"). "" where the kernel does not say."""
    def read(path):
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError:
            return ""
    gov = read("/sys/devices/system/cpu/cpuidle/current_governor")
    if not gov:
        return ""
    poll = read("/sys/module/haltpoll/parameters/guest_halt_poll_ns") if gov == "haltpoll" else ""
    return f", cpuidle governor {gov}" + (f" (guest_halt_poll_ns {poll})" if poll else "")


def header(runs):
    rev = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    subject = git("log", "-1", "--format=%s")[:90]
    load1, load5, load15 = os.getloadavg()
    return [
        "# make bench report",
        "",
        f"Commit {rev}{' (with uncommitted changes)' if dirty else ''}: {subject}  ",
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}, {platform.node()}, {os.cpu_count()} cores, "
        f"Linux {platform.release()}{idle_setting()}, load average at the end {load1:.2f} "
        f"{load5:.2f} {load15:.2f}  ",
        f"Every figure is the median of {runs} interleaved runs (every run's value: "
        "results.txt); compare within this report only.",
        "",
    ]


def log2_axes(ax, xs, labels, xlabel, title):
    """A log2 x axis ticked at xs, a log y axis, a grid."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(xs)
    ax.set_xticklabels(labels)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)


def save(fig, axes, ylabel, path, legend_size=8, legend_cols=1):
    """Labels the first of the side-by-side axes, writes the figure to path
    as a PNG and frees it."""
    axes[0].set_ylabel(ylabel)
    axes[0].legend(fontsize=legend_size, ncol=legend_cols, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def mount_section(r, out):
    size = r.m("mount.size_mb")
    if size is None:
        return []
    lines = [f"## The mount: {size:.0f} MiB sequential, dd bs=1M (MiB/s)", "",
             "Baselines: tmpfs directly, and Debian's libfuse passthrough_ll example over "
             "that tmpfs twice, with the page cache (its default, cache=auto) and with "
             "direct I/O (-o cache=never); mooncake-fs in both of its cache modes, "
             "--cache-mode pages (its default) and direct. Like for like: mooncake-fs "
             "(page cache) against passthrough_ll (page cache), mooncake-fs (direct I/O) "
             "against passthrough_ll (direct I/O): the same kernel path, each daemon "
             "serving the same requests.", "",
             "| | " + " | ".join(label for _, label in TARGETS) +
             " | mooncake / passthrough (page cache) | mooncake / passthrough (direct) "
             "| mooncake (page cache) / tmpfs |",
             "|---" * (len(TARGETS) + 4) + "|"]
    for key, label, _ in MOUNT_ROWS:
        v = {t: r.m(f"mount.{key}.{t}") for t, _ in TARGETS}
        lines.append(f"| {label} | " + " | ".join(fmt(v[t]) for t, _ in TARGETS) +
                     f" | {ratio(v['mc'], v['pt'])} | {ratio(v.get('mcd'), v['ptd'])} "
                     f"| {ratio(v['mc'], v['tmpfs'])} |")
    lines.append("")
    for _, label, what in MOUNT_ROWS:
        lines.append(f"- {label}: {what}.")
    lines.append("")

    sizes = sorted({int(k.split(".")[2]) for k in r.vals
                    if k.startswith("sweep.") and k.count(".") == 3})
    if not sizes:
        return lines
    lines += ["## The mount by block size (MiB/s)", "",
              f"A fresh write then a cold read of {fmt(r.m('sweep.size_mb'))} MiB, dd at each "
              "block size (mooncake-fs, in its default page-cache mode, restarted before "
              "each write, as in the fresh row above).", "",
              "![throughput by block size](throughput_vs_block_size.png)", "",
              "| | block | " + " | ".join(label for _, label in SWEEP_TARGETS) +
              " | mooncake / passthrough (page cache) |", "|---" * (len(SWEEP_TARGETS) + 3) + "|"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, op in zip(axes, ("write", "read")):
        for t, label in SWEEP_TARGETS:
            ys = [r.m(f"sweep.{op}.{b}.{t}") for b in sizes]
            ax.plot([b / 1024 for b in sizes], ys, marker="o", label=label)
        log2_axes(ax, [b / 1024 for b in sizes],
                  [f"{b // 1024}K" if b < 1 << 20 else f"{b >> 20}M" for b in sizes],
                  "dd block size", f"sequential {op}")
        for b in sizes:
            v = {t: r.m(f"sweep.{op}.{b}.{t}") for t, _ in SWEEP_TARGETS}
            lines.append(f"| {op} | {b // 1024} KiB | " +
                         " | ".join(fmt(v[t]) for t, _ in SWEEP_TARGETS) +
                         f" | {ratio(v['mc'], v['pt'])} |")
    save(fig, axes, "MiB/s", os.path.join(out, "throughput_vs_block_size.png"))
    lines.append("")
    return lines


def tar_section(r):
    n = r.m("tar.files")
    if n is None:
        return []
    v = {t: r.m(f"tar.files_per_s.{t}") for t, _ in TARGETS}
    return [f"## tar -xf of {n:.0f} small files (files/s)", "",
            "A tree of 1 to 16 KiB files in directories of 50 (a source tree's shape), "
            "extracted into an empty directory of each target: a create, a write and a "
            "close per file, plus the directories.", "",
            "| " + " | ".join(label for _, label in TARGETS) +
            " | mooncake / passthrough (page cache) | mooncake / passthrough (direct) "
            "| mooncake (page cache) / tmpfs |",
            "|---" * (len(TARGETS) + 3) + "|",
            "| " + " | ".join(fmt(v[t]) for t, _ in TARGETS) +
            f" | {ratio(v['mc'], v['pt'])} | {ratio(v['mcd'], v['ptd'])} "
            f"| {ratio(v['mc'], v['tmpfs'])} |", ""]


TABLE_ROWS = [
    ("read4", "{mb:.0f} MiB sequential read by 4 readers at once, 1 MiB blocks, cold (MiB/s)"),
    ("rand1", "4 KiB random reads, 1 in flight, after that read (IOPS)"),
    ("rand16", "4 KiB random reads, libaio 16 in flight, O_DIRECT (IOPS)"),
    ("cp", "cp of a {cp:.0f} MiB file within the file system, cold (MiB/s)"),
    ("create", "create + write 4 KiB + close, one process (files/s)"),
    ("stat", "stat of those files (per s)"),
]


def table_section(r):
    """Issue 14's table: tmpfs, passthrough_ll (page cache) and mooncake-fs
    (pages) doing the same fio jobs and small-file loop (bench/mount_table.sh)."""
    mb, files = r.m("table.size_mb"), r.m("table.files")
    if mb is None:
        return []
    lines = ["## The mount table (fio, small files)", "",
             f"Each target does the same work, one after the other in each run "
             f"({files:.0f} small files; fio's own counts); medians.", "",
             "| measure | tmpfs | passthrough_ll | mooncake-fs | ÷ passthrough_ll | ÷ tmpfs |",
             "|---|---|---|---|---|---|"]
    for key, label in TABLE_ROWS:
        v = {t: r.m(f"table.{key}.{t}") for t in ("tmpfs", "pt", "mc")}
        cp = r.m("table.cp_mb") or 0
        lines.append(f"| {label.format(mb=mb, cp=cp)} | {fmt(v['tmpfs'])} | {fmt(v['pt'])} | "
                     f"{fmt(v['mc'])} | {ratio(v['mc'], v['pt'])} | {ratio(v['mc'], v['tmpfs'])} |")
    return lines + [""] + threads_rows(r, mb)


def threads_rows(r, mb):
    """The 4 readers of the table on mooncake-fs --threads 1 .. nproc, in each
    cache mode (bench/mount_table.sh's mount_threads), next to passthrough_ll."""
    ns = sorted({int(k.rsplit(".t", 1)[1]) for k in r.vals if k.startswith("table.read4.pages.t")})
    if not ns:
        return []
    pt = r.m("table.read4.pt")
    lines = [f"{mb:.0f} MiB read by 4 readers at once (MiB/s) by `--threads` (a fresh mount "
             "each; the others answer reads straight from segment memory):", "",
             "| --cache-mode | " + " | ".join(f"--threads {n}" for n in ns) +
             f" | --threads {ns[-1]} ÷ 1 | --threads {ns[-1]} ÷ passthrough_ll |",
             "|---|" + "---|" * (len(ns) + 2)]
    for mode in ("pages", "direct"):
        v = [r.m(f"table.read4.{mode}.t{n}") for n in ns]
        lines.append(f"| {mode} | " + " | ".join(fmt(x) for x in v) +
                     f" | {ratio(v[-1], v[0])} | {ratio(v[-1], pt)} |")
    return lines + [""]


def scale_section(r):
    """Memory per key next to Redis, and the master's ops/s by connections
    (bench/scale.sh)."""
    keys = r.m("scale.mem.keys")
    if keys is None:
        return []
    lines = ["## Past this machine: memory per key, the master's ops/s", "",
             f"Memory per key: the growth of resident memory per key holding {keys:,.0f} "
             "keys with values of 100 bytes, an embedded store (its segment's pages and the "
             "master's metadata) next to redis-server holding the same keys (SETs through "
             "`redis-cli --pipe`, or `DEBUG POPULATE`; the growth of its VmRSS).", "",
             "| keys | mooncake (B/key) | redis (B/key) | mooncake / redis |",
             "|---|---|---|---|"]
    for what, k in (("mc_bench's, `mcb/100/SLOT/I` (11 to 16 bytes)", "scale.mem"),
                    ("redis's `DEBUG POPULATE` names, `key:0` on (5 to 10 bytes)",
                     "scale.mem_short")):
        mc, redis = r.m(f"{k}.mc"), r.m(f"{k}.redis")
        if mc is not None:
            lines.append(f"| {keys:,.0f}, {what} | {fmt(mc)} | {fmt(redis)} | "
                         f"{ratio(mc, redis)} |")
        pop = r.m(f"{k}.redis_populate")
        if mc is not None and pop is not None:
            lines.append(f"| the same, redis filled by `DEBUG POPULATE` (no SETs) | {fmt(mc)} | "
                         f"{fmt(pop)} | {ratio(mc, pop)} |")
    big = r.m("scale.mem_big.keys")
    if big is not None:
        lines.append(f"| {big:,.0f}, mc_bench's (mooncake alone, one run) | "
                     f"{fmt(r.m('scale.mem_big.mc'))} "
                     "| - | - |")
    conns = sorted(int(k.rsplit(".", 1)[1]) for k in r.vals if k.startswith("scale.master_ops."))
    if conns:
        one = r.m("scale.master_ops.1")
        lines += ["", "The master's ops/s: STATs (answered by the master alone) from that many "
                  "client processes, each one connection with 16 in flight, summed.", "",
                  "| connections | ops/s | ÷ 1 connection |", "|---|---|---|"]
        for n in conns:
            v = r.m(f"scale.master_ops.{n}")
            lines.append(f"| {n} | {fmt(v)} | {ratio(v, one)} |")
    return lines + [""]


def ratio_table(c, rows):
    """A markdown table of (label, key, baseline label, baseline key) rows,
    values from c(key), each with its ratio to the baseline."""
    lines = ["| | mooncake | baseline | | ratio |", "|---|---|---|---|---|"]
    for label, k, blabel, bk in rows:
        lines.append(f"| {label} | {fmt(c(k))} | {blabel} | {fmt(c(bk))} | "
                     f"{ratio(c(k), c(bk))} |")
    return lines + [""]


def cluster_section(r, out):
    if r.m("cluster.iperf3") is None:
        return []
    c = lambda k: r.m("cluster." + k)  # noqa: E731
    lines = ["## The cluster over loopback TCP", "",
             "A mooncake-master, one node (mooncake-cli node) and mc_bench, a pure client "
             "on the C API keeping N requests in flight (shared memory off: every byte "
             "crosses a socket), against iperf3 (one TCP stream) and Debian's memcached "
             "(4 threads; mc_bench opens N connections, one request in flight on each). "
             "A put is three round trips (start at the master, write to the node, commit); "
             "a get is one read from the node once the client has the key's replica list "
             "(cached since the first put or get of it; mc_bench writes every key once, "
             "untimed, before it measures).", ""]
    lines += ratio_table(c, [
        ("1 MiB put, N=4 (MiB/s)", "tcp.put.1M", "iperf3, 1 stream", "iperf3"),
        ("1 MiB get, N=4 (MiB/s)", "tcp.get.1M", "iperf3, 1 stream", "iperf3"),
        ("1 KiB put, N=16 (ops/s)", "tcp.put.1K", "memcached set, N=16", "memcached.set"),
        ("1 KiB get, N=16 (ops/s)", "tcp.get.1K", "memcached get, N=16", "memcached.get")])
    lines += ["## The same host", "",
              "The embedded store (master and segment in the mc_bench process) and a client "
              "mapping a co-located node's segment (shared memory), against one thread's "
              "memcpy of the same size out of a 64 MiB region.", ""]
    lines += ratio_table(c, [
        ("embedded 1 MiB put, N=4 (MiB/s)", "emb.put.1M", "memcpy 1 MiB", "memcpy.1M"),
        ("embedded 1 MiB get, N=4 (MiB/s)", "emb.get.1M", "memcpy 1 MiB", "memcpy.1M"),
        ("embedded 1 KiB put, N=16 (ops/s)", "emb.put.1K", "memcpy 1 KiB", "memcpy.1K"),
        ("embedded 1 KiB get, N=16 (ops/s)", "emb.get.1K", "memcpy 1 KiB", "memcpy.1K"),
        ("shm 1 MiB put, N=4 (MiB/s)", "shm.put.1M", "memcpy 1 MiB", "memcpy.1M"),
        ("shm 1 MiB get, N=4 (MiB/s)", "shm.get.1M", "memcpy 1 MiB", "memcpy.1M")])

    ns = sorted({int(k.rsplit(".n", 1)[1]) for k in r.vals
                 if k.startswith("cluster.k1.") and k.count(".") == 4})
    if not ns:
        return lines
    k1 = lambda s, op, n, q="": c(f"k1.{s}.{op}.n{n}{q}")  # noqa: E731
    lines += ["## 1 KiB by concurrency", "",
              "N requests in flight (ops/s; mooncake over TCP and memcached as above, the "
              "embedded store in process). N=16 comes from the rows above (1.5 s phases), "
              "the others from 1 s phases of the same runs.", "",
              "![ops/s by concurrency](ops_vs_concurrency.png)", "",
              "| N | mooncake put | memcached set | ratio | mooncake get | memcached get "
              "| ratio | embedded put | embedded get |", "|---" * 9 + "|"]
    for n in ns:
        tp, ms, tg, mg = (k1("tcp", "put", n), k1("memcached", "set", n),
                          k1("tcp", "get", n), k1("memcached", "get", n))
        lines.append(f"| {n} | {fmt(tp)} | {fmt(ms)} | {ratio(tp, ms)} | {fmt(tg)} | "
                     f"{fmt(mg)} | {ratio(tg, mg)} | {fmt(k1('emb', 'put', n))} | "
                     f"{fmt(k1('emb', 'get', n))} |")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, op in zip(axes, ("put", "get")):
        for s, label, names in SYSTEMS:
            ax.plot(ns, [k1(s, names[op], n) for n in ns], marker="o",
                    label=f"{label} ({names[op]})")
        log2_axes(ax, ns, [str(n) for n in ns], "requests in flight", f"1 KiB {op}")
    save(fig, axes, "ops/s", os.path.join(out, "ops_vs_concurrency.png"))

    lat_ns = [n for n in (1, 16) if n in ns]
    lines += ["", "## 1 KiB latency (microseconds, issue to completion)", "",
              "Per request, from mc_bench's histogram (buckets about 6% wide); at N=1 the "
              "latency of one request alone, at N=16 with the queueing of 16 in flight.", "",
              "![latency percentiles](latency_1k.png)", "",
              "| | N | p50 | p99 | memcached p50 | memcached p99 | p50 ratio |",
              "|---" * 7 + "|"]
    for s, label in (("tcp", "over TCP"), ("emb", "embedded")):
        for op, mop in (("put", "set"), ("get", "get")):
            for n in lat_ns:
                p50, p99 = k1(s, op, n, ".p50"), k1(s, op, n, ".p99")
                if s == "tcp":
                    m50, m99 = k1("memcached", mop, n, ".p50"), k1("memcached", mop, n, ".p99")
                    lines.append(f"| {op} {label} | {n} | {fmt(p50, 1)} | {fmt(p99, 1)} | "
                                 f"{fmt(m50, 1)} | {fmt(m99, 1)} | {ratio(p50, m50)} |")
                else:
                    lines.append(f"| {op} {label} | {n} | {fmt(p50, 1)} | {fmt(p99, 1)} "
                                 "| | | |")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, op in zip(axes, ("put", "get")):
        labels, width = [], 0.2
        for i, (s, label, names) in enumerate(SYSTEMS):
            for j, q in enumerate(("p50", "p99")):
                xs = [x + (i * 2 + j - 2.5) * width / 1.5 for x in range(len(lat_ns))]
                ax.bar(xs, [k1(s, names[op], n, "." + q) or 0 for n in lat_ns],
                       width=width / 1.5, label=f"{label.replace('mooncake ', '')} {q}",
                       color=f"C{i}", alpha=1.0 if q == "p50" else 0.5)
            labels.append(label)
        ax.set_xticks(range(len(lat_ns)))
        ax.set_xticklabels([f"N={n}" for n in lat_ns])
        ax.set_yscale("log")
        ax.set_ylim(0.1, 1e6)  # room above the bars for the legend
        ax.set_title(f"1 KiB {op} latency")
        ax.grid(True, axis="y", which="both", alpha=0.3)
    save(fig, axes, "microseconds", os.path.join(out, "latency_1k.png"), legend_size=7,
         legend_cols=3)
    lines.append("")
    return lines


def stream_section(r):
    ip = r.m("stream.iperf3")
    if ip is None:
        return []
    sides = [s for s in ("before", "after") if r.m(f"stream.{s}.direct.write") is not None]
    rows = []
    for mode in ("pages", "direct"):
        for what, label in (("write", "write, dd bs=1M (to the end of close)"),
                            ("read.1M", "read, dd bs=1M"), ("read.128K", "read, dd bs=128K")):
            row = [f"--cache-mode {mode}: {label}"]
            for side in sides:
                v = r.m(f"stream.{side}.{mode}.{what}")
                row += [fmt(v), ratio(v, ip)]
            rows.append(row)
    columns = ["MiB/s"] + [c for s in sides for c in (f"{s} (MiB/s)", f"{s} / iperf3")]
    return section(
        "The cluster mount over loopback TCP (bench/stream.sh)",
        f"A master, one node and client mounts with --no-shm and no segment (every byte "
        f"crosses a socket), one file of the run's size written through one mount and read "
        f"through another, against iperf3 on one stream ({fmt(ip)} MiB/s). \"before\" is "
        f"the master, node and mounts of STREAM_BASE_BUILD (make bench BENCH_STREAM_BASE=DIR), "
        f"when given.",
        columns, rows)


def section(title, intro, columns, rows):
    """A report section: a title, a paragraph and a table of rows (cells)."""
    return [f"## {title}", "", intro, "", "| " + " | ".join(columns) + " |",
            "|---" * len(columns) + "|", *("| " + " | ".join(row) + " |" for row in rows), ""]


def python_section(r):
    if r.m("python.1KiB.native") is None:
        return []
    rows = []
    for prefix, how in (("python", ""), ("python_kept", ", freed heap kept")):
        for size in ("1KiB", "1MiB"):
            v = {c: r.m(f"{prefix}.{size}.{c}") for c in ("native", "executor", "mount", "inproc")}
            if v["native"] is None:
                continue
            rows.append([f"{size[:-3]} {size[-3:]}{how}", *(fmt(v[c]) for c in v),
                         ratio(v["native"], v["executor"]), ratio(v["native"], v["mount"])])
    return section(
        "Python async_get (bench/python_async.py, one run)",
        "Like with like: native, executor and mount read the same bytes from one "
        "mooncake-fs daemon (native and executor as a pure client over its Unix "
        "socket, mount through its FUSE mount with the mount backend); in-process is an "
        "embedded store in the Python process, for reference (ops/s, 32 in flight). "
        "\"Freed heap kept\": the same run again with glibc keeping freed heap "
        "(GLIBC_TUNABLES trim and mmap thresholds), so that a 1 MiB bytes does not "
        "page-fault fresh memory on every get in any column.",
        ["value", "native", "executor", "mount", "in-process", "native / executor",
         "native / mount"], rows)


def tensor_section(r):
    if r.m("tensor.64MiB.put.mc") is None:
        return []
    rows = []
    for case, label in (("64MiB", "one 64 MiB float16 tensor (MiB/s)"),
                        ("small", "1,000 float16 tensors of 4 KiB (tensors/s)")):
        v = {k: r.m(f"tensor.{case}.{k}") for k in ("put.mc", "put.torch", "get.mc", "get.torch")}
        rows.append([label, fmt(v["put.mc"]), fmt(v["put.torch"]),
                     ratio(v["put.mc"], v["put.torch"]), fmt(v["get.mc"]), fmt(v["get.torch"]),
                     ratio(v["get.mc"], v["get.torch"])])
    return section(
        "Python tensors (bench/python_tensor.py)",
        "put_tensor/get_tensor on an embedded store in the Python process against "
        "torch.save/torch.load through io.BytesIO (what a user writes without the store: "
        "serializing into memory only). Median of the repeats; ratio above 1: the store is "
        "faster.",
        ["case", "put_tensor", "torch.save", "ratio", "get_tensor", "torch.load", "ratio"], rows)


def ha_section(r):
    """Masters on etcd (bench/ha.sh): the op log's cost, the failover time."""
    if r.m("ha.put.1K.etcd") is None:
        return []
    c = lambda k: r.m("ha." + k)  # noqa: E731
    return ["## Masters on etcd", "",
            "Two mooncake-masters on one etcd member (Debian's etcd-server, its data on this "
            "machine's disk), one node, mc_bench keeping 16 puts of 1 KiB in flight over "
            "loopback TCP: the leader writes every commit to the op log in etcd before it "
            "answers. The baseline is a master alone. The failover time runs from kill -9 of "
            "the leader to the first put that succeeds through etcd:// (lease 2 s; the hold of "
            "a segment mounted again at the new leader capped at 3 s by --put-ttl-ms).", "",
            "| | on etcd | baseline | | ratio |", "|---|---|---|---|---|",
            f"| 1 KiB put, N=16 (ops/s) | {fmt(c('put.1K.etcd'))} | a master alone | "
            f"{fmt(c('put.1K.alone'))} | {ratio(c('put.1K.etcd'), c('put.1K.alone'))} |",
            f"| failover, kill -9 to the next put (ms) | {fmt(c('failover_ms'))} | | | |", ""]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: report.py RESULTS OUTDIR")
    vals = load(sys.argv[1])
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    r = Results(vals)
    runs = max((len(v) for k, v in vals.items() if k.startswith("mount.")), default=0) or \
        max((len(v) for v in vals.values()), default=0)
    lines = header(runs)
    lines += mount_section(r, out)
    lines += tar_section(r)
    lines += table_section(r)
    lines += cluster_section(r, out)
    lines += stream_section(r)
    lines += ha_section(r)
    lines += scale_section(r)
    lines += python_section(r)
    lines += tensor_section(r)
    path = os.path.join(out, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"report: {path}")


if __name__ == "__main__":
    main()
