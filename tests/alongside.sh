#!/bin/bash
# alongside.sh LOG BG... -- FG... - runs the command BG in the background,
# its output into LOG, and the command FG, at a lower priority (nice 10) so
# that BG, which waits on timers, is not kept from its CPU; once FG ends,
# waits for BG, prints LOG, and exits with the first failure's status
# (FG's first). make test runs the model checker, which mostly waits,
# alongside stages that keep the CPUs busy (the Makefile says which).
# SIGINT, SIGTERM or SIGHUP ends both: FG, and BG's whole process group
# (BG gets SIGINT, so that it cleans up as after a Ctrl-C).
set -u
log=$1
shift
bg=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    bg+=("$1")
    shift
done
if [ ${#bg[@]} -eq 0 ] || [ $# -lt 2 ]; then
    echo "usage: alongside.sh LOG BG... -- FG..." >&2
    exit 2
fi
shift
bg_pid= fg_pid=
stop() {
    [ -z "$fg_pid" ] || kill -"$1" "$fg_pid" 2>/dev/null
    [ -z "$bg_pid" ] || kill -INT -- -"$bg_pid" 2>/dev/null
    wait
    echo "alongside.sh: stopped by SIG$1; ${bg[*]} wrote $log" >&2
    exit "$2"
}
trap 'stop INT 130' INT
trap 'stop TERM 143' TERM
trap 'stop HUP 129' HUP
set -m # BG in a process group of its own, so that it can be ended whole
"${bg[@]}" </dev/null >"$log" 2>&1 &
bg_pid=$!
set +m
echo "alongside.sh: ${bg[*]} runs alongside, its output in $log"
# In the background too, so that a trapped signal interrupts the wait.
nice -n 10 "$@" &
fg_pid=$!
wait "$fg_pid"
rc=$?
fg_pid=
wait "$bg_pid"
bg_rc=$?
trap - INT TERM HUP
echo "== ${bg[*]} (alongside; its output)"
cat "$log"
[ "$rc" -ne 0 ] || rc=$bg_rc
exit "$rc"
