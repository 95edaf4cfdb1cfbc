#!/bin/bash
# bench/stream.sh - the streaming cluster mount over loopback TCP next to
# iperf3 (one stream), in one run (called by bench/run.sh; runs alone too):
# a mooncake-master, one node (mooncake-cli node) and mooncake-fs client
# mounts with --no-shm and no segment of their own, so that every byte
# crosses a TCP connection to the node: a writer and a reader in each cache
# mode (pages, the default, and direct). Each run, interleaved with iperf3:
# SIZE_MB MiB written with dd bs=1M through the writer (timed to the end of
# close, i.e. published), then read through the reader (a fresh version,
# so nothing is in its page cache) with dd bs=1M and with dd bs=128K; the
# page cache is dropped before each (drop_caches, bench/lib.sh).
# Printed: medians of RUNS runs and their ratio to iperf3, and the CPU time
# the daemon doing the dd's work (a's for writes, b's for reads) spent per
# GiB (utime + stime of all its threads; less noisy than MiB/s on a shared
# machine: it counts the work, not the waiting), and the node's in the same
# dd (it copies a write's bytes in, sends a read's out).
#
# With STREAM_BASE_BUILD set to another tree's build directory (bench/
# compare.sh shows how to build one), a whole cluster of that build (its
# own master, node and mounts) is measured in the same runs ("before"),
# next to this one's ("after"), so that a change to the node counts too;
# each side's node touches its own segment once before the runs. With
# BENCH_RESULTS set, every value is appended to that file (keys
# "stream.*", for bench/report.py). Needs root (mounts).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${MC_BUILD:-build}
BASE=${STREAM_BASE_BUILD:-}
RUNS=${BENCH_RUNS:-3}
SIZE_MB=${STREAM_SIZE_MB:-1024}
IPERF_SECS=${STREAM_IPERF_SECONDS:-3}
PYTHON=${PYTHON:-/usr/bin/python3}
results=${BENCH_RESULTS:-}
out=bench/out
mkdir -p "$out"
command -v iperf3 >/dev/null || {
    echo "stream bench: iperf3 not found (apt-get install iperf3)" >&2
    exit 1
}

work=$(mktemp -d /tmp/mc-stream-bench.XXXXXX)
pids=()    # servers, stopped in reverse order
mounts=()  # "DIR PID" of each mount
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for m in "${mounts[@]}"; do
        set -- $m
        fusermount3 -u "$1" 2>/dev/null || true
        wait "$2" 2>/dev/null || true
    done
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill "${pids[i]}" 2>/dev/null || true
        wait "${pids[i]}" 2>/dev/null || true
    done
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

seg=$(((SIZE_MB * 2 + 512) / 1024 + 1))G
sides=(after)
declare -A bin=([after]=$BUILD)
if [ -n "$BASE" ]; then
    sides=(before after)
    bin[before]=$BASE
fi
declare -A maddr npid
for side in "${sides[@]}"; do
    mport=$(free_port)
    "${bin[$side]}/mooncake-master" --listen "127.0.0.1:$mport" >"$work/master-$side.log" 2>&1 &
    pids+=($!)
    wait_log $! "$work/master-$side.log" "listening on"
    "${bin[$side]}/mooncake-cli" --master "127.0.0.1:$mport" --segment-size "$seg" node \
        >"$work/node-$side.log" 2>&1 &
    pids+=($!)
    npid[$side]=$!
    wait_log $! "$work/node-$side.log" "node up"
    maddr[$side]=127.0.0.1:$mport
done
iport=$(free_port)
iperf3 -s -B 127.0.0.1 -p "$iport" --forceflush >"$work/iperf3.log" 2>&1 &
pids+=($!)
wait_log $! "$work/iperf3.log" "Server listening"
declare -A dir pid
for side in "${sides[@]}"; do
    for mode in pages direct; do
        for m in a b; do # a writes, b reads
            d=$work/$side-$mode-$m
            mkdir -p "$d"
            "${bin[$side]}/mooncake-fs" -f --master "${maddr[$side]}" --segment-size 0 --no-shm \
                --cache-mode "$mode" "$d" 2>>"$work/fs-$side-$mode-$m.log" &
            mounts+=("$d $!")
            wait_mount "$d" $!
            dir[$side.$mode.$m]=$d
            pid[$side.$mode.$m]=$!
        done
    done
done

declare -A v
add() {
    v[$1]="${v[$1]:-} $2"
    [ -z "$results" ] || echo "stream.$1 $2" >>"$results"
}
# cpu_ticks PID: utime + stime of the process so far, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# timed KEY PID NODE dd_mibps-ARGS...: adds dd_mibps's MiB/s as KEY and the
# CPU milliseconds PID and the node NODE spent per GiB during it as KEY.cpu
# and KEY.node_cpu.
timed() {
    local key=$1 p=$2 n=$3 t0 t1 n0 n1 hz
    shift 3
    hz=$(getconf CLK_TCK)
    t0=$(cpu_ticks "$p")
    n0=$(cpu_ticks "$n")
    add "$key" "$(dd_mibps "$@")"
    t1=$(cpu_ticks "$p")
    n1=$(cpu_ticks "$n")
    add "$key.cpu" $(((t1 - t0) * 1000 * 1024 / hz / SIZE_MB))
    add "$key.node_cpu" $(((n1 - n0) * 1000 * 1024 / hz / SIZE_MB))
}
# Each node's segment is touched once before the runs (both files of a
# run): its first writes pay for the pages (page faults), which later runs
# reuse.
for side in "${sides[@]}"; do
    w=${dir[$side.pages.a]}
    dd if=/dev/zero of="$w/warm" bs=1M count="$SIZE_MB" status=none
    cp "$w/warm" "$w/warm.2"
    rm "$w/warm" "$w/warm.2"
done
for r in $(seq "$RUNS"); do
    timeout $((IPERF_SECS + 10)) iperf3 -c 127.0.0.1 -p "$iport" -t "$IPERF_SECS" -J >"$work/iperf.json"
    add iperf3 "$("$PYTHON" -c 'import json,sys
d = json.load(open(sys.argv[1])); print("%.0f" % (d["end"]["sum_received"]["bits_per_second"] / 8 / 1048576))' "$work/iperf.json")"
    # Alternate which side goes first, so that drift falls on both.
    order=("${sides[@]}")
    [ $((r % 2)) = 0 ] && [ ${#sides[@]} = 2 ] && order=(after before)
    for side in "${order[@]}"; do
        for mode in pages direct; do
            a=${dir[$side.$mode.a]} b=${dir[$side.$mode.b]}
            # Every timed dd starts with the page cache dropped: the pages of
            # the files read before (kept by b, which never learns of their
            # removal) would otherwise make each run's cache take memory
            # the machine never touched; in this VM the first touch of such
            # memory is a host fault, and the copy into the page cache then
            # ran at a third of its speed from the second run on.
            pa=${pid[$side.$mode.a]} pb=${pid[$side.$mode.b]}
            drop_caches
            timed "$side.$mode.write" "$pa" "${npid[$side]}" "$a/f$r" write 1M "$SIZE_MB"
            drop_caches
            timed "$side.$mode.read.1M" "$pb" "${npid[$side]}" "$b/f$r" read 1M "$SIZE_MB"
            # A fresh version for the second read: b's page cache holds the first.
            cp "$a/f$r" "$a/f$r.2"
            drop_caches
            timed "$side.$mode.read.128K" "$pb" "${npid[$side]}" "$b/f$r.2" read 128K "$SIZE_MB"
            rm -f "$a/f$r" "$a/f$r.2"
        done
    done
done

m() { echo "${v[$1]:-}" | tr ' ' '\n' | grep . | median; }
for k in $(printf '%s\n' "${!v[@]}" | sort); do echo "$k:${v[$k]}"; done >"$out/stream-runs.txt"
ip=$(m iperf3)
ratio() { echo "$1 $2" | awk '{ if ($2 > 0) printf "%.2fx", $1 / $2; else print "n/a" }'; }
echo
echo "Cluster mount over loopback TCP (--no-shm; master + 1 node + client mounts), $SIZE_MB MiB,"
echo "median of $RUNS runs; iperf3 one stream: $ip MiB/s"
printf "%-60s" ""
for side in "${sides[@]}"; do printf "%12s %8s" "$side MiB/s" "÷iperf3"; done
echo
for mode in pages direct; do
    for what in "write:write, dd bs=1M (to the end of close)" "read.1M:read, dd bs=1M" \
        "read.128K:read, dd bs=128K"; do
        printf "%-60s" "--cache-mode $mode: ${what#*:}"
        for side in "${sides[@]}"; do
            x=$(m "$side.$mode.${what%%:*}")
            printf "%12s %8s" "$x" "$(ratio "$x" "$ip")"
        done
        echo
    done
done
# cpu_table TITLE KEY WHO-OF-WRITE WHO-OF-READ: the medians of KEY (cpu or
# node_cpu) of every row, one column a side.
cpu_table() {
    echo
    echo "$1 (ms per GiB), median of $RUNS runs"
    printf "%-60s" ""
    for side in "${sides[@]}"; do printf "%12s" "$side"; done
    echo
    for mode in pages direct; do
        for what in "write:write$3" "read.1M:read 1M$4" "read.128K:read 128K$4"; do
            printf "%-60s" "--cache-mode $mode: ${what#*:}"
            for side in "${sides[@]}"; do printf "%12s" "$(m "$side.$mode.${what%%:*}.$2")"; done
            echo
        done
    done
}
cpu_table "CPU time of the daemon doing the work" cpu " (a)" " (b)"
cpu_table "CPU time of the node during the same dd" node_cpu "" ""
echo "(every run: $out/stream-runs.txt)"
