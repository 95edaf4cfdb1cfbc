#!/bin/bash
# make bench: every benchmark next to its baselines, in one run, then one
# report with every ratio and its plots (bench/out/report.md, *.png):
#   1. the mount, sequential dd of SIZE_MB MiB in 1 MiB blocks: tmpfs
#      directly, Debian's libfuse passthrough_ll example over tmpfs (built
#      here) with the kernel's page cache (its default, cache=auto) and with
#      direct I/O (-o cache=never), and mooncake-fs in both cache modes:
#      --cache-mode pages (its default) and direct. Four rows: a write to
#      fresh memory, a write over memory already written, a cold read
#      (after drop_caches) and a re-read (what the page cache keeps);
#   2. the same targets (mooncake-fs in its default mode) at block sizes from
#      4 KiB to 1 MiB (SWEEP_MB each);
#   2b. tar -xf of a tree of TAR_FILES small files (made here, the same
#      every run) into each target of 1., files/s;
#   2c. the table of issue 14 on tmpfs, passthrough_ll and mooncake-fs:
#      4 parallel readers, 4 KiB random reads (1 and 16 in flight), small
#      files created and stat'ed (bench/mount_table.sh, with fio), and the
#      4 readers on mooncake-fs --threads 1 .. nproc in each cache mode;
#   3. bench/cluster.sh: the cluster over loopback vs iperf3 and memcached,
#      the embedded store vs memcpy, ops/s and latency by concurrency;
#      bench/ha.sh: masters on etcd, 1 KiB puts with the op log vs a master
#      alone, and the failover time;
#   3b. bench/scale.sh: memory per key next to redis-server, the master's
#      ops/s at 1, 8 and 64 client connections;
#   3c. bench/stream.sh: a cluster mount over loopback TCP vs iperf3 (write,
#      1 MiB and 128 KiB reads, both cache modes);
#   4. the Python client (bench/python_async.py and any other bench/*.py).
# Every value of every run goes to bench/out/results.txt; bench/report.py
# turns them into medians, ratios and plots. Runs are interleaved (each
# run visits every target in turn) so that noise falls on every column
# alike. Needs root (tmpfs mount, drop_caches); 6 to 9 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
. bench/mount_table.sh
BUILD=${MC_BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
SIZE_MB=${BENCH_SIZE_MB:-1024}
SWEEP_MB=${BENCH_SWEEP_MB:-64}
SWEEP_BS=${BENCH_SWEEP_BS:-4K 16K 64K 256K 1M}
RUNS=${BENCH_RUNS:-3}
out=bench/out
results=$out/results.txt
mkdir -p "$out"
: >"$results"
# record KEY VALUE: one run's value, for bench/report.py
record() { echo "$1 $2" >>"$results"; }

src=/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c
if [ ! -x "$out/passthrough_ll" ] || [ "$src" -nt "$out/passthrough_ll" ]; then
    # shellcheck disable=SC2046 # the flags are words
    gcc -O2 -w "$src" $(pkg-config fuse3 --cflags --libs) -o "$out/passthrough_ll"
fi

# The kernel grants a FUSE daemon requests of at most max_pages_limit pages
# (6.13 and later; 256 by default): mooncake-fs asks for 512 (README,
# "mooncake-fs options"), as a tuned host would let it; passthrough_ll
# (libfuse 3.14) asks for 256 either way. Put back at the end.
pages_limit=/proc/sys/fs/fuse/max_pages_limit
old_pages_limit=$(cat "$pages_limit" 2>/dev/null || true)
if [ -n "$old_pages_limit" ] && [ "$old_pages_limit" -lt 512 ]; then
    echo 512 >"$pages_limit"
else
    old_pages_limit=""
fi
work=$(mktemp -d /tmp/mc-bench.XXXXXX)
tmpfs=$work/tmpfs
declare -A dir=([tmpfs]=$tmpfs/direct [pt]=$work/pt [ptd]=$work/ptd [mc]=$work/mc [mcd]=$work/mcd [mct]=$work/mct)
declare -A pid=()
targets="tmpfs pt ptd mc mcd"
sweep_targets="tmpfs pt ptd mc"
TAR_FILES=${BENCH_TAR_FILES:-5000}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for t in pt ptd mc mcd mct; do
        fusermount3 -u "${dir[$t]}" 2>/dev/null || true
        [ -n "${pid[$t]:-}" ] && { wait "${pid[$t]}" 2>/dev/null || true; }
    done
    umount "$tmpfs" 2>/dev/null || true
    rm -rf "$work"
    [ -z "$old_pages_limit" ] || echo "$old_pages_limit" >"$pages_limit"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

mkdir -p "$tmpfs" "${dir[pt]}" "${dir[ptd]}" "${dir[mc]}" "${dir[mcd]}" "${dir[mct]}"
mount -t tmpfs -o size=$((SIZE_MB + 512))M tmpfs "$tmpfs"
mkdir -p "${dir[tmpfs]}" "$tmpfs/pt"
# Both passthrough_ll mounts serve the same tmpfs directory.
"$out/passthrough_ll" -f -o source="$tmpfs/pt" "${dir[pt]}" 2>"$out/passthrough.log" &
pid[pt]=$!
"$out/passthrough_ll" -f -o source="$tmpfs/pt",cache=never "${dir[ptd]}" 2>"$out/passthrough-direct.log" &
pid[ptd]=$!
wait_mount "${dir[pt]}" "${pid[pt]}"
wait_mount "${dir[ptd]}" "${pid[ptd]}"

# mc_start T: a fresh mooncake-fs for target T, mc (--cache-mode pages, the
# default) or mcd (--cache-mode direct), on a new segment memfd (no page of
# it touched yet); mc_stop T unmounts it and checks that it exited 0.
mc_start() {
    local mode=pages
    [ "$1" = mcd ] && mode=direct
    "$BUILD/mooncake-fs" -f --segment-size $((SIZE_MB + 256))M --cache-mode $mode "${dir[$1]}" \
        2>>"$out/mooncake-fs.log" &
    pid[$1]=$!
    wait_mount "${dir[$1]}" "${pid[$1]}"
}
mc_stop() {
    unmount "${dir[$1]}" "${pid[$1]}"
    pid[$1]=""
}
: >"$out/mooncake-fs.log"
mc_start mc
mc_start mcd

# The three measurements below run in this shell (not in $(...)): the mount
# restarts mooncake-fs, whose pid this shell must hold to wait for it.
# fresh_write KEY T MIB BS: a timed write of a new file to memory no file
# used before: tmpfs and passthrough_ll free the old file's pages at rm and
# take fresh ones; mooncake-fs restarts (a new memfd), because a removed
# file's range of the segment keeps its pages.
fresh_write() {
    local f=${dir[$2]}/bench.dat
    if [ "$2" = mc ] || [ "$2" = mcd ]; then
        mc_stop "$2"
        mc_start "$2"
    else
        rm -f "$f"
    fi
    drop_caches
    record "$1" "$(dd_mibps "$f" write "$4" "$3")"
}
# warm_write KEY T MIB BS: a timed write over memory the previous write
# touched: tmpfs and passthrough_ll overwrite the file's blocks in place
# (conv=notrunc); mooncake-fs writes a new file after rm (the allocator hands
# out the range just freed; an overwrite in place would be copy-on-write).
warm_write() {
    local f=${dir[$2]}/bench.dat
    drop_caches
    if [ "$2" = mc ] || [ "$2" = mcd ]; then
        rm -f "$f"
        record "$1" "$(dd_mibps "$f" write "$4" "$3")"
    else
        record "$1" "$(dd_mibps "$f" overwrite "$4" "$3")"
    fi
}
# cold_read KEY T MIB BS: the page cache dropped first (tmpfs's own pages
# stay: they are the file).
cold_read() {
    drop_caches
    record "$1" "$(dd_mibps "${dir[$2]}/bench.dat" read "$4" "$3")"
}

echo "bench: the mount, ${SIZE_MB} MiB in 1 MiB blocks, $RUNS runs ..."
record mount.size_mb "$SIZE_MB"
record sweep.size_mb "$SWEEP_MB"
for _ in $(seq "$RUNS"); do
    for t in $targets; do
        fresh_write "mount.write.fresh.$t" "$t" "$SIZE_MB" 1M
        warm_write "mount.write.warm.$t" "$t" "$SIZE_MB" 1M
        cold_read "mount.read.cold.$t" "$t" "$SIZE_MB" 1M
        # Right after the cold read: what a cache kept is used now.
        record "mount.read.again.$t" "$(dd_mibps "${dir[$t]}/bench.dat" read 1M "$SIZE_MB")"
        rm -f "${dir[$t]}/bench.dat"
    done
done

echo "bench: block sizes $SWEEP_BS, ${SWEEP_MB} MiB each, $RUNS runs ..."
for _ in $(seq "$RUNS"); do
    for bs in $SWEEP_BS; do
        b=$(numfmt --from=iec "$bs")
        for t in $sweep_targets; do
            fresh_write "sweep.write.$b.$t" "$t" "$SWEEP_MB" "$bs"
            cold_read "sweep.read.$b.$t" "$t" "$SWEEP_MB" "$bs"
            rm -f "${dir[$t]}/bench.dat"
        done
    done
done

# tar_tree FILE: a tar of TAR_FILES files of 1 to 16 KiB in directories of
# 50 (a source tree's shape), the same bytes every run.
tar_tree() {
    local src=$work/tree
    "$PYTHON" - "$src" "$TAR_FILES" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(10)
for i in range(n):
    d = os.path.join(root, f"d{i // 50:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:05d}.c"), "wb") as f:
        f.write(rng.randbytes(rng.randint(1024, 16384)))
PY
    tar -C "$src" -cf "$1" .
    rm -rf "$src"
}
echo "bench: tar -xf of $TAR_FILES files, $RUNS runs ..."
tar_tree "$work/tree.tar"
record tar.files "$TAR_FILES"
for _ in $(seq "$RUNS"); do
    for t in $targets; do
        mkdir "${dir[$t]}/x"
        t0=$(now)
        tar -C "${dir[$t]}/x" -xf "$work/tree.tar"
        t1=$(now)
        record "tar.files_per_s.$t" "$(echo "$TAR_FILES $t0 $t1" | awk '{printf "%.0f\n", $1 / ($3 - $2)}')"
        rm -rf "${dir[$t]}/x"
    done
done
echo "bench: the mount table (fio, small files), $RUNS runs ..."
record table.size_mb "$TABLE_MB"
record table.cp_mb "$TABLE_CP_MB"
record table.files "$TABLE_FILES"
for _ in $(seq "$RUNS"); do
    for t in tmpfs pt mc; do
        mount_table "$t"
    done
done
mc_stop mc
mc_stop mcd
echo "bench: 4 parallel readers by --threads, $RUNS runs ..."
for _ in $(seq "$RUNS"); do
    mount_threads mct
done

# The cluster over loopback TCP vs iperf3 and memcached, the embedded store vs
# memcpy, the concurrency sweep (bench/cluster.sh; about two minutes).
echo "bench: the cluster (bench/cluster.sh) ..."
MC_BUILD=$BUILD PYTHON=$PYTHON BENCH_RESULTS=$results bench/cluster.sh
# Masters on etcd: the op log's cost and the failover time (bench/ha.sh;
# under a minute; skipped without etcd).
echo "bench: masters on etcd (bench/ha.sh) ..."
MC_BUILD=$BUILD PYTHON=$PYTHON BENCH_RESULTS=$results bench/ha.sh
# Memory per key next to Redis, the master's ops/s by connections
# (bench/scale.sh; about a minute).
echo "bench: memory per key and the master's ops/s (bench/scale.sh) ..."
MC_BUILD=$BUILD PYTHON=$PYTHON BENCH_RESULTS=$results bench/scale.sh
# The cluster mount streaming over TCP vs iperf3 (bench/stream.sh; about a
# minute, two with BENCH_STREAM_BASE, another build's directory, as before).
echo "bench: the cluster mount (bench/stream.sh) ..."
MC_BUILD=$BUILD PYTHON=$PYTHON BENCH_RESULTS=$results STREAM_BASE_BUILD=${BENCH_STREAM_BASE:-} \
    bench/stream.sh
for b in bench/*.py; do
    case $b in bench/report.py) continue ;; esac
    echo "bench: $b ..."
    MC_BUILD=$BUILD BENCH_RESULTS=$results "$PYTHON" "$b"
done

"$PYTHON" bench/report.py "$results" "$out"
