#!/bin/bash
# bench/compare.sh REV: the working tree against git revision REV, in one run
# (also `make bench BENCH_BASE=REV`). REV is built in a temporary git
# worktree with its own build directory, removed on exit. Both sides run the
# same benchmark program: this tree's bench/mc_bench.c (public API only),
# built by each side's Makefile rule against that side's libmooncake.
# Measured, interleaved (old then new, then new then old, ...), RUNS times:
#   - the embedded store: mc_bench --embedded --size 1K --concurrency 16,
#     put then get ops/s;
#   - the mount: a fresh mooncake-fs, SIZE_MB MiB written with dd bs=1M to a
#     new file, then read back after drop_caches (cold; mooncake-fs with
#     direct I/O on both sides, --cache-mode direct where the option exists).
# Prints each side's median, the ratio of the medians (new/old) and the
# median of each run's ratio (the two sides of a run ran back to back, so
# this one cancels slow drift in the machine's load), and writes them to
# bench/out/compare.md (every run's value: bench/out/compare-runs.txt).
# Needs root (mount, drop_caches); about 2 minutes, building REV included.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
[ $# = 1 ] || {
    echo "usage: bench/compare.sh REV" >&2
    exit 2
}
BUILD=${MC_BUILD:-build}
RUNS=${COMPARE_RUNS:-5}
SIZE_MB=${COMPARE_SIZE_MB:-1024}
SECS=${COMPARE_SECONDS:-1.5} # per mc_bench phase
out=bench/out
mkdir -p "$out"
old_rev=$(git rev-parse --short "$1^{commit}")
new_rev="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo '+changes')"

work=$(mktemp -d /tmp/mc-compare.XXXXXX)
mnt=$work/mnt
mkdir -p "$mnt"
fs_pid=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$fs_pid" ]; then
        fusermount3 -u "$mnt" 2>/dev/null || true
        wait "$fs_pid" 2>/dev/null || true
    fi
    git worktree remove --force "$work/src" 2>/dev/null || true
    rm -rf "$work"
    git worktree prune
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

echo "compare: building $old_rev in a temporary worktree ..."
git worktree add -q --detach "$work/src" "$old_rev"
cp bench/mc_bench.c "$work/src/bench/mc_bench.c"
targets="build/libmooncake.a build/mooncake-fs build/mc_bench"
# shellcheck disable=SC2086 # the targets are words
make -C "$work/src" -s -j2 BUILD=build $targets >"$work/build-old.log" 2>&1 || {
    tail -20 "$work/build-old.log" >&2
    echo "compare: $old_rev does not build (with this tree's bench/mc_bench.c?)" >&2
    exit 1
}
# shellcheck disable=SC2086
make -s -j2 BUILD="$BUILD" ${targets//build\//$BUILD/}
declare -A bin=([old]=$work/src/build [new]=$BUILD)

runs=$out/compare-runs.txt
: >"$runs"
record() { echo "$1 $2" >>"$runs"; }
# kv KEY OP: KEY's value in mc_bench's line for OP
kv() { sed -n "/ op=$2 /s/.* $1=\([^ ]*\).*/\1/p" "$work/last"; }

# measure SIDE: one run of every measurement on SIDE's binaries.
measure() {
    local b=${bin[$1]}
    timeout 60 "$b/mc_bench" --embedded --size 1K --concurrency 16 --seconds "$SECS" >"$work/last"
    record "$1.emb.put" "$(kv ops_s put)"
    record "$1.emb.get" "$(kv ops_s get)"

    # Direct I/O on both sides: what every revision before --cache-mode did.
    local mode=()
    "$b/mooncake-fs" --help 2>&1 | grep -q -- --cache-mode && mode=(--cache-mode direct)
    "$b/mooncake-fs" -f --segment-size $((SIZE_MB + 256))M "${mode[@]}" "$mnt" 2>>"$work/fs-$1.log" &
    fs_pid=$!
    wait_mount "$mnt" "$fs_pid"
    drop_caches
    record "$1.mount.write" "$(dd_mibps "$mnt/bench.dat" write 1M "$SIZE_MB")"
    drop_caches
    record "$1.mount.read" "$(dd_mibps "$mnt/bench.dat" read 1M "$SIZE_MB")"
    unmount "$mnt" "$fs_pid"
    fs_pid=""
}

echo "compare: $RUNS runs, $old_rev (old) and $new_rev (new) interleaved ..."
for i in $(seq "$RUNS"); do
    if [ $((i % 2)) = 1 ]; then order="old new"; else order="new old"; fi
    for side in $order; do measure "$side"; done
done

m() { sed -n "s/^$1 //p" "$runs" | median; }
# run_ratio KEY: the median over runs of new/old (the runs' values pair up
# in order)
run_ratio() {
    paste <(sed -n "s/^new.$1 //p" "$runs") <(sed -n "s/^old.$1 //p" "$runs") |
        awk '{print $1 / $2}' | median | awk '{printf "%.2fx", $1}'
}
{
    echo "## $new_rev (new) against $old_rev (old)"
    echo
    echo "Median of $RUNS runs, interleaved; the same mc_bench.c on both sides; the"
    echo "mount is a fresh mooncake-fs each run, ${SIZE_MB} MiB with dd bs=1M, the read"
    echo "after drop_caches."
    echo
    echo "| | old ($old_rev) | new ($new_rev) | new / old | median of each run's new / old |"
    echo "|---|---|---|---|---|"
    for row in "emb.put:embedded 1 KiB put, N=16 (ops/s)" "emb.get:embedded 1 KiB get, N=16 (ops/s)" \
        "mount.write:mount ${SIZE_MB} MiB write (MiB/s)" "mount.read:mount ${SIZE_MB} MiB read (MiB/s)"; do
        k=${row%%:*}
        o=$(m "old.$k") n=$(m "new.$k")
        echo "| ${row#*:} | $o | $n | $(echo "$n $o" | awk '{printf "%.2fx", $1 / $2}') | $(run_ratio "$k") |"
    done
} >"$out/compare.md"
echo
cat "$out/compare.md"
echo "(every run: $runs)"
