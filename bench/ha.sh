#!/bin/bash
# Standby masters on etcd, in one run (called by bench/run.sh; runs on its
# own too, no root needed):
#   - 1 KiB puts, 16 in flight (mc_bench, C API, over loopback TCP), to a
#     master alone and to the leader of two masters on etcd (every commit in
#     the op log before its answer): the ratio is the cost of durability;
#   - the failover time: kill -9 of the leader, then mooncake-cli puts
#     through etcd:// until one succeeds; the time from the kill to that
#     success (lease --etcd-ttl 2 s, the hold of a segment mounted again
#     capped by --put-ttl-ms 3000), then the killed master comes back as a
#     standby.
# Every figure is the median of RUNS runs; with BENCH_RESULTS set, every
# run's value is appended to that file (keys "ha.", for bench/report.py).
# Skips (exit 0, saying why) without Debian's etcd. Bounded by BUDGET s.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${MC_BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
RUNS=${BENCH_RUNS:-3}
SECS=${HA_BENCH_SECONDS:-1.5}
BUDGET=${HA_BENCH_BUDGET:-180}
results=${BENCH_RESULTS:-}
out=bench/out
mkdir -p "$out"

if ! command -v etcd >/dev/null; then
    echo "ha bench: skipped: etcd not found (apt-get install etcd-server)" >&2
    exit 0
fi
bench_bin=${MC_BENCH:-$BUILD/mc_bench}
[ -n "${MC_BENCH:-}" ] || make --no-print-directory -s BUILD="$BUILD" "$bench_bin"

work=$(mktemp -d /tmp/mc-ha-bench.XXXXXX)
pids=()
declare -A mpid=() # master port -> pid
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for p in "${mpid[@]}" "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${mpid[@]}" "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "ha bench: stopped (signal, or over the ${BUDGET} s budget)" >&2; exit 1' INT TERM
(
    trap 'kill $sp 2>/dev/null; wait $sp; exit 0' TERM
    sleep "$BUDGET" &
    sp=$!
    wait $sp
    kill -TERM $$
) &
pids+=($!)

declare -A v
add() {
    v[$1]="${v[$1]:-} $2"
    [ -z "$results" ] || echo "ha.$1 $2" >>"$results"
}
m() { echo "${v[$1]:-}" | tr ' ' '\n' | grep . | median; }
ops() { sed -n "/ op=put /s/.* ops_s=\([^ ]*\).*/\1/p" "$work/last"; }

# ---- servers: etcd, a master alone, two masters on etcd, a node each ----
ep=127.0.0.1:$(free_port)
pp=$(free_port)
etcd --name b --data-dir "$work/etcd" --listen-client-urls "http://$ep" \
    --advertise-client-urls "http://$ep" --listen-peer-urls "http://127.0.0.1:$pp" \
    --initial-advertise-peer-urls "http://127.0.0.1:$pp" --initial-cluster "b=http://127.0.0.1:$pp" \
    >"$work/etcd.log" 2>&1 &
pids+=($!)
wait_log $! "$work/etcd.log" "ready to serve client requests"

alone=$(free_port)
master_and_node "$alone" 1G "$work/alone.log" "$work/node0.log"

start_master() { # PORT: a master of the etcd cluster on 127.0.0.1:PORT
    "$BUILD/mooncake-master" --listen "127.0.0.1:$1" --etcd "$ep" --etcd-ttl 2 \
        --put-ttl-ms 3000 >>"$work/m$1.log" 2>&1 &
    mpid[$1]=$!
    wait_log $! "$work/m$1.log" "listening on"
}
ports=("$(free_port)" "$(free_port)")
start_master "${ports[0]}"
wait_log "${mpid[${ports[0]}]}" "$work/m${ports[0]}.log" "leading cluster"
start_master "${ports[1]}"
"$BUILD/mooncake-cli" --master "etcd://$ep" --segment-size 1G node >"$work/node1.log" 2>&1 &
pids+=($!)
wait_log $! "$work/node1.log" "node up"

leader() { # the port of the master whose log says it leads now
    for p in "${ports[@]}"; do
        [ "$(grep -c "leading cluster" "$work/m$p.log")" -gt "${led[$p]:-0}" ] && { echo "$p"; return; }
    done
}
declare -A led=()
led[${ports[0]}]=0
led[${ports[1]}]=0

for i in $(seq "$RUNS"); do
    timeout 60 "$bench_bin" --master "127.0.0.1:$alone" --size 1K --concurrency 16 --no-shm \
        --seconds "$SECS" >"$work/last"
    add put.1K.alone "$(ops)"
    timeout 60 "$bench_bin" --master "etcd://$ep" --size 1K --concurrency 16 --no-shm \
        --seconds "$SECS" >"$work/last"
    add put.1K.etcd "$(ops)"

    # kill -9 of the leader, then puts until one succeeds.
    l=$(leader)
    [ -n "$l" ] || { echo "ha bench: no leader" >&2; exit 1; }
    led[$l]=$(grep -c "leading cluster" "$work/m$l.log")
    t0=$(date +%s%N)
    kill -9 "${mpid[$l]}"
    wait "${mpid[$l]}" 2>/dev/null || true
    until echo x | "$BUILD/mooncake-cli" --master "etcd://$ep" --timeout-ms 20000 put "failover-$i" \
        >/dev/null 2>&1; do
        [ $(($(date +%s%N) - t0)) -lt 60000000000 ] || { echo "ha bench: no failover" >&2; exit 1; }
        sleep 0.05
    done
    add failover_ms $((($(date +%s%N) - t0) / 1000000))
    start_master "$l" # back, as the standby
done

echo
echo "Masters on etcd (one etcd member, loopback): median of $RUNS runs"
printf "%-46s %12s   %-30s %12s %8s\n" "" "on etcd" "baseline" "" "ratio"
a=$(m put.1K.alone) e=$(m put.1K.etcd)
printf "%-46s %12.0f   %-30s %12.0f %8s\n" "1 KiB put, N=16, op log on (ops/s)" "$e" \
    "a master alone (ops/s)" "$a" "$(echo "$e $a" | awk '{ printf "%.2fx", $1 / $2 }')"
printf "%-46s %12s\n" "failover, kill -9 to the next put (ms)" "$(m failover_ms)"
for k in $(printf '%s\n' "${!v[@]}" | sort); do echo "$k:${v[$k]}"; done >"$out/ha-runs.txt"
echo "(every run: $out/ha-runs.txt)"
