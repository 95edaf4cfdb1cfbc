#!/bin/sh
# tests/fuzz/run.sh [SECONDS] - builds the libFuzzer targets (tests/fuzz/fuzz_*.c)
# with clang into build/fuzz/ and runs them for SECONDS in all (default 30),
# split evenly between targets, which build and run at once (2 targets on
# 2 cores take SECONDS / 2 of the clock; more targets than cores share
# them). Each target starts from its seed corpus in
# tests/fuzz/corpus/NAME/ (left untouched) and keeps what it learns in
# build/fuzz/corpus/NAME/. Prints each run's libFuzzer summary; exits 1 if a
# target crashed (the input is saved under build/fuzz/artifacts/NAME/ and the
# command that replays it is printed), 2 if a build failed.
#
# Environment: CLANG (default clang), FUZZ_BUILD (default build/fuzz).
set -u

budget=${1:-30}
case $budget in
'' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${FUZZ_BUILD:-$root/build/fuzz}
clang=${CLANG:-clang}
flags="-std=gnu11 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
       -D_GNU_SOURCE -I$root/core/include -I$root/core/src"

# Target NAME is tests/fuzz/fuzz_NAME.c linked with core/src/LAYER/NAME.c (the
# one file of that name in a layer folder), or with what tests/fuzz/NAME.link
# lists.
targets=
for src in "$root"/tests/fuzz/fuzz_*.c; do
    name=$(basename "$src" .c)
    targets="$targets ${name#fuzz_}"
done
set -- $targets
count=$#
[ "$count" -gt 0 ] || { echo "fuzz: no targets" >&2; exit 2; }
per=$((budget / count))
[ "$per" -ge 1 ] || per=1

mkdir -p "$out"
# The targets build at once (a clang each: one core apiece), then run at
# once, each for its share of the budget: with as many cores as targets,
# the stage takes about half as long as one after the other, with the same
# work.
build() {
    t=$1
    # tests/fuzz/NAME.link, if present, replaces core/src/LAYER/NAME.c with its
    # own sources and libraries (paths relative to the repository).
    srcs=$(echo "$root"/core/src/*/"$t".c)
    if [ -f "$root/tests/fuzz/$t.link" ]; then
        srcs=$(cd "$root" && eval "echo $(cat "tests/fuzz/$t.link")" | sed "s|\(^\| \)core/|\1$root/core/|g")
    fi
    # shellcheck disable=SC2086
    "$clang" $flags -o "$out/fuzz_$t" "$root/tests/fuzz/fuzz_$t.c" $srcs || {
        echo "fuzz: building fuzz_$t failed" >&2
        return 1
    }
}
pids=
for t in $targets; do
    echo "  CLANG   tests/fuzz/fuzz_$t.c"
    build "$t" &
    pids="$pids $!"
done
built=0
for p in $pids; do
    wait "$p" || built=1
done
if [ "$built" -ne 0 ]; then
    echo "fuzz: a build failed (its compiler's messages are above)" >&2
    exit 2
fi

# run NAME: one target for its share of the budget; its exit status is
# libFuzzer's (0: no crash).
run() {
    t=$1
    corpus=$out/corpus/$t
    artifacts=$out/artifacts/$t/
    log=$out/fuzz_$t.log
    mkdir -p "$corpus" "$artifacts"
    touch "$out/.start_$t" # artifacts newer than this are this run's
    dict=
    [ -f "$root/tests/fuzz/$t.dict" ] && dict=-dict=$root/tests/fuzz/$t.dict
    # -max_total_time stops libFuzzer; timeout is only a backstop.
    timeout -k 10 $((per + 60)) "$out/fuzz_$t" -max_total_time="$per" -print_final_stats=1 \
        -timeout=10 -rss_limit_mb=2048 -max_len=16384 -artifact_prefix="$artifacts" \
        $dict "$corpus" "$root/tests/fuzz/corpus/$t" >"$log" 2>&1
}

pids=
for t in $targets; do
    echo "fuzz_$t: ${per}s, log $out/fuzz_$t.log"
    run "$t" &
    pids="$pids $!"
done
failed=0
set -- $pids
for t in $targets; do
    wait "$1"
    rc=$?
    shift
    artifacts=$out/artifacts/$t/
    grep -E '^(Done [0-9]+ runs|stat::)' "$out/fuzz_$t.log" | sed "s/^/  /"
    if [ "$rc" -ne 0 ]; then
        failed=1
        echo "fuzz_$t: FAILED (exit $rc)"
        grep -E -A 30 'ERROR: |runtime error|check failed|deadly signal' "$out/fuzz_$t.log" | head -n 60
        find "$artifacts" -type f -newer "$out/.start_$t" | while read -r a; do
            echo "  replay: $out/fuzz_$t $a"
        done
    else
        echo "fuzz_$t: ok"
    fi
done
exit "$failed"
