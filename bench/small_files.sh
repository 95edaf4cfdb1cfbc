#!/bin/bash
# bench/small_files.sh BASE_BUILD [ROUNDS] [FILES]: issue 14's create row
# (bench/mount_table.sh's loop, in C: open(O_CREAT|O_EXCL), write 4 KiB,
# close, FILES fresh files in one directory, one process) on three mounts
# side by side: mooncake-fs of BASE_BUILD (another tree's build directory),
# this tree's ($MC_BUILD, default build), and libfuse's passthrough_ll over
# tmpfs. Rounds are interleaved (each visits the three in turn, in an order
# that rotates from round to round: on a loaded machine the target a round
# visits second ran up to 1.6x faster than the first, whichever it was);
# prints each target's median files/s and daemon CPU per file
# (/proc/PID/stat), the median of each round's ratio to passthrough_ll and
# of this / base.
#
# Each round measures every target three ways: as the scheduler places
# the daemon and the loop ("free", as in make bench), and pinned with
# taskset, daemon and loop on one CPU ("same") and on two ("cross"). On the
# 2-vCPU KVM guest this was written on a request's round trip cost about
# 10 times as much across CPUs (a sleeping vCPU woken) as on one, so the
# free figures follow where the scheduler put the two more than either
# daemon; the pinned ones say how each fares in either case. (Needs 2
# CPUs; on one, only "free" runs.) Needs root (tmpfs). Each round's files
# are removed after it: passthrough_ll keeps an open descriptor per file.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BASE=${1:?usage: bench/small_files.sh BASE_BUILD [ROUNDS] [FILES]}
ROUNDS=${2:-9}
FILES=${3:-2000}
BUILD=${MC_BUILD:-build}
out=bench/out
mkdir -p "$out"

src=/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c
if [ ! -x "$out/passthrough_ll" ] || [ "$src" -nt "$out/passthrough_ll" ]; then
    # shellcheck disable=SC2046 # the flags are words
    gcc -O2 -w "$src" $(pkg-config fuse3 --cflags --libs) -o "$out/passthrough_ll"
fi
cat >"$out/small_files.c" <<'C'
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv)
{
    char buf[4096], p[4096];
    int n = atoi(argv[2]);
    struct timespec a, b;
    memset(buf, 'x', sizeof(buf));
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof(p), "%s/f%06d", argv[1], i);
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0 || write(fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf) || close(fd) < 0) {
            perror(p);
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.0f\n", n / ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9));
    return 0;
}
C
gcc -O2 -o "$out/small_files" "$out/small_files.c"

work=$(mktemp -d /tmp/mc-small.XXXXXX)
declare -A pid=()
cleanup() {
    for t in base this pt; do
        fusermount3 -u "$work/$t" 2>/dev/null || true
        [ -n "${pid[$t]:-}" ] && { wait "${pid[$t]}" 2>/dev/null || true; }
    done
    umount "$work/tmpfs" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
mkdir -p "$work/tmpfs" "$work/base" "$work/this" "$work/pt"
mount -t tmpfs -o size=1G tmpfs "$work/tmpfs"
mkdir "$work/tmpfs/src"
"$BASE/mooncake-fs" -f --listen none "$work/base" 2>>"$out/small_files.log" &
pid[base]=$!
"$BUILD/mooncake-fs" -f --listen none "$work/this" 2>>"$out/small_files.log" &
pid[this]=$!
"$out/passthrough_ll" -f -o source="$work/tmpfs/src" "$work/pt" 2>>"$out/small_files.log" &
pid[pt]=$!
for t in base this pt; do wait_mount "$work/$t" "${pid[$t]}"; done

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
modes=(free)
[ "$(nproc)" -ge 2 ] && modes+=(same cross)
# one R T MODE: one run of target T in mode MODE in round R, into $raw.
one() {
    local r=$1 t=$2 mode=$3 d=$work/$2/r$1.$3 a b n c=() dcpu
    case $mode in
    same) dcpu=$((r % 2)) c=(taskset -c "$dcpu") ;;
    cross) dcpu=$((r % 2)) c=(taskset -c $((1 - r % 2))) ;;
    free) dcpu=0-$(($(nproc) - 1)) ;;
    esac
    taskset -a -p -c "$dcpu" "${pid[$t]}" >/dev/null
    mkdir "$d"
    a=$(cpu "${pid[$t]}")
    n=$("${c[@]}" "$out/small_files" "$d" "$FILES")
    b=$(cpu "${pid[$t]}")
    echo "$r $t $n $(((b - a) * 1000000 / $(getconf CLK_TCK) / FILES)) $mode" >>"$raw"
    rm -rf "$d"
}
raw=$work/raw
orders=("base this pt" "this pt base" "pt base this")
for r in $(seq "$ROUNDS"); do
    for mode in "${modes[@]}"; do
        for t in ${orders[$((r % 3))]}; do one "$r" "$t" "$mode"; done
    done
done
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
# ratio A B MODE: the median of the rounds' files/s of A / B in MODE.
ratio() {
    awk -v a="$1" -v b="$2" -v m="$3" '$5 == m && $2 == a {v[$1] = $3}
        $5 == m && $2 == b {p[$1] = $3} END {for (r in p) print v[r] / p[r]}' "$raw" | median
}
for mode in "${modes[@]}"; do
    echo "-- $mode"
    for t in base this pt; do
        echo "$t: $(awk -v t=$t -v m="$mode" '$2 == t && $5 == m {print $3}' "$raw" | median)" \
            "files/s, $(awk -v t=$t -v m="$mode" '$2 == t && $5 == m {print $4}' "$raw" | median)" \
            "us of daemon CPU per file"
    done
    for t in base this; do
        echo "$t / passthrough_ll, round by round: $(ratio $t pt "$mode")"
    done
    echo "this / base, round by round: $(ratio this base "$mode")"
done
cp "$raw" "$out/small_files.raw" # round, target, files/s, daemon us per file, mode
for t in base this pt; do
    unmount "$work/$t" "${pid[$t]}"
    pid[$t]=""
done
