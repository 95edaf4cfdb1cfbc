#!/bin/sh
# Runs every C unit test binary under BUILD/tests as its own process with a
# timeout, keeping each log under BUILD/tests/logs (a failed run's log is
# also kept under a name of its own, so that a rerun does not overwrite
# it). Exit 0 pass, 77 skip, anything else fail. Prints each test's result
# in name order, then "N passed, N failed, N skipped".
#
# UNIT_JOBS (default 4) tests run at once (GNU xargs -P): the suite mostly
# waits (its timeouts and timers; on 2 cores, 50 s of clock for 15 s of
# CPU one at a time), and every test makes its own loops, sockets, files
# and ports (unit.h's free_port() picks them below the ephemeral range).
set -u
if [ "${1:-}" = "--one" ]; then
    # run-unit.sh --one TEST LOGS: runs one test, writes its result lines
    # to LOGS/NAME.result (read back by the run that started it).
    t=$2 logs=$3
    name=$(basename "$t")
    timeout 300 "$t" >"$logs/$name.log" 2>&1
    rc=$?
    case $rc in
    0) echo "PASS $name" ;;
    77) echo "SKIP $name: $(tail -n 1 "$logs/$name.log")" ;;
    *) kept=$logs/$name.failed-$(date +%Y%m%d-%H%M%S)-$$.log
       cp "$logs/$name.log" "$kept"
       echo "FAIL $name (exit $rc), log: $kept"
       tail -n 30 "$kept" ;;
    esac >"$logs/$name.result"
    exit 0
fi
build=${1:-build}
logs=$build/tests/logs
mkdir -p "$logs"
rm -f "$logs"/*.result
for t in "$build"/tests/test_*; do
    [ -x "$t" ] && echo "$t"
done | xargs -d '\n' -P "${UNIT_JOBS:-4}" -I{} sh "$0" --one {} "$logs"
pass=0 fail=0 skip=0
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    r=$logs/$(basename "$t").result
    if [ ! -f "$r" ]; then
        fail=$((fail + 1))
        echo "FAIL $(basename "$t"): no result (the runner failed)"
        continue
    fi
    case $(head -c 4 "$r") in
    PASS) pass=$((pass + 1)) ;;
    SKIP) skip=$((skip + 1)) ;;
    FAIL) fail=$((fail + 1)) ;;
    *) fail=$((fail + 1))
       echo "FAIL $(basename "$t"): an empty result (the runner failed)" ;;
    esac
    cat "$r"
done
echo "unit: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
