#!/bin/bash
# make bench: 1 GiB sequential write and read, side by side in one run:
#   tmpfs directly, Debian's libfuse passthrough_ll example over tmpfs (built
#   here, at bench time, as a peer to measure against), and mooncake-fs.
# Prints MiB/s and each result as a ratio to passthrough_ll. Needs root
# (tmpfs mount, drop_caches). Then bench/cluster.sh (the cluster over loopback
# TCP vs iperf3 and memcached); extra bench scripts in bench/*.py run last.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${MC_BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
SIZE_MB=${BENCH_SIZE_MB:-1024}
RUNS=${BENCH_RUNS:-3}
out=bench/out
mkdir -p "$out"

src=/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c
if [ ! -x "$out/passthrough_ll" ] || [ "$src" -nt "$out/passthrough_ll" ]; then
    gcc -O2 -w "$src" $(pkg-config fuse3 --cflags --libs) -o "$out/passthrough_ll"
fi

work=$(mktemp -d /tmp/mc-bench.XXXXXX)
tmpfs=$work/tmpfs pt=$work/passthrough mc=$work/mooncake
mkdir -p "$tmpfs" "$pt" "$mc"
pids=()
cleanup() {
    fusermount3 -u "$pt" 2>/dev/null || true
    fusermount3 -u "$mc" 2>/dev/null || true
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    umount "$tmpfs" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

mount -t tmpfs -o size=$((SIZE_MB * 2 + 256))M tmpfs "$tmpfs"
mkdir -p "$tmpfs/pt"
"$out/passthrough_ll" -f -o source="$tmpfs/pt" "$pt" 2>"$out/passthrough.log" &
pids+=($!)
"$BUILD/mooncake-fs" -f --segment-size $((SIZE_MB + 256))M "$mc" 2>"$out/mooncake-fs.log" &
pids+=($!)
for d in "$pt" "$mc"; do
    for _ in $(seq 100); do mountpoint -q "$d" && break; sleep 0.05; done
    mountpoint -q "$d" || { echo "bench: $d did not mount" >&2; exit 1; }
done

now() { date +%s.%N; }
# mibps DIR write|read: one timed run, prints MiB/s
mibps() {
    local f=$1/bench.dat t0 t1
    sync
    echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
    if [ "$2" = write ]; then
        rm -f "$f"
        t0=$(now)
        dd if=/dev/zero of="$f" bs=1M count="$SIZE_MB" status=none
    else
        t0=$(now)
        dd if="$f" of=/dev/null bs=1M status=none
    fi
    t1=$(now)
    echo "$SIZE_MB $t0 $t1" | awk '{printf "%.0f\n", $1 / ($3 - $2)}'
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A res
for op in write read; do
    for target in tmpfs passthrough mooncake; do
        case $target in
        tmpfs) dir=$tmpfs ;; passthrough) dir=$pt ;; mooncake) dir=$mc ;;
        esac
        res[$target.$op]=$(for _ in $(seq "$RUNS"); do mibps "$dir" "$op"; done | median)
    done
done

echo
echo "Sequential ${SIZE_MB} MiB, dd bs=1M, median of $RUNS runs (MiB/s; ratio to passthrough_ll)"
printf "%-10s %14s %14s %14s\n" "" "tmpfs" "passthrough_ll" "mooncake-fs"
for op in write read; do
    p=${res[passthrough.$op]}
    printf "%-10s %8s (%.2fx) %8s (%.2fx) %8s (%.2fx)\n" "$op" \
        "${res[tmpfs.$op]}" "$(echo "${res[tmpfs.$op]} $p" | awk '{print $1/$2}')" \
        "$p" 1 \
        "${res[mooncake.$op]}" "$(echo "${res[mooncake.$op]} $p" | awk '{print $1/$2}')"
done

fusermount3 -u "$mc"
# The cluster over loopback TCP vs iperf3 and memcached, the embedded store vs
# memcpy (bench/cluster.sh; about a minute).
echo
MC_BUILD=$BUILD PYTHON=$PYTHON bench/cluster.sh
for b in bench/*.py; do
    [ -e "$b" ] || continue
    echo
    MC_BUILD=$BUILD "$PYTHON" "$b"
done
