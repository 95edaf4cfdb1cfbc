#!/bin/bash
# alongside.sh LOG BG... -- FG... - runs the command BG in the background,
# its output into LOG, and the command FG in the foreground; once FG ends,
# waits for BG, prints LOG, and exits with the first failure's status (FG's
# first). make test runs the model checker, which mostly waits, alongside
# stages that keep the CPUs busy (the Makefile says which). An interrupt
# ends BG's whole process group with FG.
set -u
log=$1
shift
bg=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    bg+=("$1")
    shift
done
[ $# -gt 0 ] || {
    echo "usage: alongside.sh LOG BG... -- FG..." >&2
    exit 2
}
shift
set -m # BG in a process group of its own, so that it can be ended whole
"${bg[@]}" >"$log" 2>&1 &
pid=$!
set +m
trap 'kill -TERM -- -$pid 2>/dev/null; exit 130' INT TERM
"$@"
rc=$?
wait "$pid"
bg_rc=$?
trap - INT TERM
echo "== ${bg[*]} (alongside; its output)"
cat "$log"
[ "$rc" -ne 0 ] || rc=$bg_rc
exit "$rc"
