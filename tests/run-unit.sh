#!/bin/sh
# Runs every C unit test binary under BUILD/tests as its own process with a
# timeout, keeping each log under BUILD/tests/logs (a failed run's log is
# also kept under a name of its own, so that a rerun does not overwrite
# it). Exit 0 pass, 77 skip, anything else fail. Prints "N passed, N
# failed, N skipped".
set -u
build=${1:-build}
logs=$build/tests/logs
mkdir -p "$logs"
pass=0 fail=0 skip=0
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    timeout 300 "$t" >"$logs/$name.log" 2>&1
    rc=$?
    case $rc in
    0) pass=$((pass + 1)); echo "PASS $name" ;;
    77) skip=$((skip + 1)); echo "SKIP $name: $(tail -n 1 "$logs/$name.log")" ;;
    *) fail=$((fail + 1))
       kept=$logs/$name.failed-$(date +%Y%m%d-%H%M%S)-$$.log
       cp "$logs/$name.log" "$kept"
       echo "FAIL $name (exit $rc), log: $kept"
       tail -n 30 "$kept" ;;
    esac
done
echo "unit: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
