#!/bin/bash
# Cluster benchmark, side by side in one run, printed as ratios (called by
# bench/run.sh; runs on its own too, no root needed):
#   - C API put/get of 1 KiB and 1 MiB objects over loopback TCP: a
#     mooncake-master, one node (mooncake-cli node) and bench/mc_bench as a
#     pure client keeping N requests in flight with the async API;
#   - baselines on the same loopback: iperf3 (one TCP stream) for 1 MiB,
#     Debian's memcached (driven by mc_bench --memcached: N connections, one
#     request in flight each, text protocol) for 1 KiB;
#   - the same-host path: the embedded (in-process) store vs plain memcpy,
#     and a client mapping a co-located node's segment (shared memory);
#   - 1 KiB ops/s and latency (p50, p99) by concurrency (CONC_SWEEP, and
#     N_SMALL from the rows above): over TCP, memcached, embedded.
# Every figure is the median of RUNS short runs, the runs interleaved so that
# noise falls on every column alike; with BENCH_RESULTS set, every run's
# value is appended to that file too (KEY VALUE, keys prefixed "cluster.",
# for bench/report.py). Loopback only; bounded by BUDGET seconds; every
# process it starts is stopped on exit, failure or signal.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${MC_BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
RUNS=${BENCH_RUNS:-3}
SECS=${CLUSTER_BENCH_SECONDS:-1.5} # per measured phase of mc_bench
IPERF_SECS=${CLUSTER_BENCH_IPERF_SECONDS:-3}
N_SMALL=${CLUSTER_BENCH_N_SMALL:-16} # requests in flight, 1 KiB
N_LARGE=${CLUSTER_BENCH_N_LARGE:-4}  # requests in flight, 1 MiB
CONC_SWEEP=${CLUSTER_BENCH_CONC:-1 4 64} # more concurrencies, 1 KiB
SWEEP_SECS=${CLUSTER_BENCH_SWEEP_SECONDS:-1}
BUDGET=${CLUSTER_BENCH_BUDGET:-240}
results=${BENCH_RESULTS:-}
out=bench/out
mkdir -p "$out"

for tool in iperf3 memcached; do
    command -v "$tool" >/dev/null || {
        echo "cluster bench: $tool not found (apt-get install iperf3 memcached)" >&2
        exit 1
    }
done
if ! [ -f "$BUILD/libmooncake.a" ] || ! [ -x "$BUILD/mooncake-master" ] ||
    ! [ -x "$BUILD/mooncake-cli" ]; then
    echo "cluster bench: run make all first ($BUILD/ is incomplete)" >&2
    exit 1
fi

# The client is built by the Makefile's own rule (it links what the library
# links); make bench passes it in MC_BENCH.
bench_bin=${MC_BENCH:-$BUILD/mc_bench}
[ -n "${MC_BENCH:-}" ] || make --no-print-directory -s BUILD="$BUILD" "$bench_bin"

work=$(mktemp -d /tmp/mc-cluster-bench.XXXXXX)
pids=() # long-lived servers, stopped in reverse order
cur=""  # the measurement running now
watchdog=""
stop_pid() { # SIGTERM, then SIGKILL after 3 s
    local p=$1
    kill "$p" 2>/dev/null || return 0
    for _ in $(seq 30); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    [ -n "$cur" ] && stop_pid "$cur"
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop_pid "${pids[i]}"; done
    [ -n "$watchdog" ] && stop_pid "$watchdog"
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "cluster bench: stopped (signal, or over the ${BUDGET} s budget)" >&2; exit 1' INT TERM

# The watchdog TERMs this script when the budget is spent; the trap above
# then stops everything. Its own sleep goes with it.
(
    trap 'kill $sp 2>/dev/null; wait $sp; exit 0' TERM
    sleep "$BUDGET" &
    sp=$!
    wait $sp
    kill -TERM $$
) &
watchdog=$!

# wait_port PID PORT LOG: until 127.0.0.1:PORT accepts a connection (10 s).
wait_port() {
    for _ in $(seq 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null && return 0
        kill -0 "$1" 2>/dev/null || break
        sleep 0.05
    done
    echo "cluster bench: nothing listening on port $2" >&2
    tail -5 "$3" >&2
    exit 1
}
# run TIMEOUT CMD...: a measurement in the background, so that a signal is
# handled at once; stdout to $work/last.
run() {
    local t=$1
    shift
    timeout "$t" "$@" >"$work/last" 2>"$work/last.err" &
    cur=$!
    if ! wait "$cur"; then
        cur=""
        echo "cluster bench: failed: $*" >&2
        cat "$work/last.err" >&2
        exit 1
    fi
    cur=""
    cat "$work/last.err" >&2
}
# kv KEY OP: KEY's value in the line of $work/last whose op= is OP
kv() { sed -n "/ op=$2 /s/.* $1=\([^ ]*\).*/\1/p" "$work/last"; }
# bytes per transport, from mc_bench's last line: xfer tcp_bytes
xfer() { sed -n "/^tcp_bytes=/s/.*$1=\([0-9]*\).*/\1/p" "$work/last"; }
ratio() { echo "$1 $2" | awk '{ if ($2 > 0) printf "%.2fx", $1 / $2; else print "n/a" }'; }

# ---- servers ----
mport=$(free_port)
master_and_node "$mport" 2G "$work/master.log" "$work/node.log"

cport=$(free_port)
# Debian's defaults (4 threads) but loopback, no UDP, and a fixed user so
# that it also starts as root.
memcached -l 127.0.0.1 -p "$cport" -U 0 -m 256 -u nobody >"$work/memcached.log" 2>&1 &
pids+=($!)
wait_port $! "$cport" "$work/memcached.log"

iport=$(free_port)
iperf3 -s -B 127.0.0.1 -p "$iport" --forceflush >"$work/iperf3.log" 2>&1 &
pids+=($!)
wait_log $! "$work/iperf3.log" "Server listening"

# ---- measurements, interleaved ----
declare -A v # name -> one value per run, space-separated
add() {
    v[$1]="${v[$1]:-} $2"
    [ -z "$results" ] || echo "cluster.$1 $2" >>"$results"
}
# addlat SYS OP N: the ops/s, p50 and p99 (us) of OP's line in $work/last as
# k1.SYS.OP.nN, .p50 and .p99 (the 1 KiB concurrency sweep)
addlat() {
    add "k1.$1.$2.n$3" "$(kv ops_s "$2")"
    add "k1.$1.$2.n$3.p50" "$(kv p50_us "$2")"
    add "k1.$1.$2.n$3.p99" "$(kv p99_us "$2")"
}
mc_timeout=$(awk -v s="$SECS" 'BEGIN { printf "%d", s * 2 + 20 }')
mc() { run "$mc_timeout" "$bench_bin" --seconds "$SECS" "$@"; }

for _ in $(seq "$RUNS"); do
    run $((IPERF_SECS + 10)) iperf3 -c 127.0.0.1 -p "$iport" -t "$IPERF_SECS" -J
    add iperf3 "$("$PYTHON" -c 'import json,sys
d = json.load(open(sys.argv[1])); print("%.0f" % (d["end"]["sum_received"]["bits_per_second"] / 8 / 1048576))' "$work/last")"

    mc --master "127.0.0.1:$mport" --size 1M --concurrency "$N_LARGE" --no-shm
    add tcp.put.1M "$(kv mib_s put)"
    add tcp.get.1M "$(kv mib_s get)"
    [ "$(xfer shm_bytes)" = 0 ] || { echo "cluster bench: --no-shm moved bytes through shm" >&2; exit 1; }

    mc --memcached "127.0.0.1:$cport" --size 1K --concurrency "$N_SMALL"
    add memcached.set "$(kv ops_s set)"
    add memcached.get "$(kv ops_s get)"
    addlat memcached set "$N_SMALL"
    addlat memcached get "$N_SMALL"

    mc --master "127.0.0.1:$mport" --size 1K --concurrency "$N_SMALL" --no-shm
    add tcp.put.1K "$(kv ops_s put)"
    add tcp.get.1K "$(kv ops_s get)"
    addlat tcp put "$N_SMALL"
    addlat tcp get "$N_SMALL"

    mc --memcpy --size 1M
    add memcpy.1M "$(kv mib_s memcpy)"
    mc --memcpy --size 1K
    add memcpy.1K "$(kv ops_s memcpy)"

    mc --embedded --size 1M --concurrency "$N_LARGE"
    add emb.put.1M "$(kv mib_s put)"
    add emb.get.1M "$(kv mib_s get)"
    mc --embedded --size 1K --concurrency "$N_SMALL"
    add emb.put.1K "$(kv ops_s put)"
    add emb.get.1K "$(kv ops_s get)"
    addlat emb put "$N_SMALL"
    addlat emb get "$N_SMALL"

    # The same-host path: the node's segment mapped into this client.
    mc --master "127.0.0.1:$mport" --size 1M --concurrency "$N_LARGE"
    add shm.put.1M "$(kv mib_s put)"
    add shm.get.1M "$(kv mib_s get)"
    [ "$(xfer tcp_bytes)" = 0 ] || { echo "cluster bench: the shm run used TCP" >&2; exit 1; }

    # 1 KiB at more concurrencies, shorter phases (N_SMALL is above).
    for n in $CONC_SWEEP; do
        mc --master "127.0.0.1:$mport" --size 1K --concurrency "$n" --no-shm --seconds "$SWEEP_SECS"
        addlat tcp put "$n"
        addlat tcp get "$n"
        mc --memcached "127.0.0.1:$cport" --size 1K --concurrency "$n" --seconds "$SWEEP_SECS"
        addlat memcached set "$n"
        addlat memcached get "$n"
        mc --embedded --size 1K --concurrency "$n" --seconds "$SWEEP_SECS"
        addlat emb put "$n"
        addlat emb get "$n"
    done
done

m() { echo "${v[$1]:-}" | tr ' ' '\n' | grep . | median; }
# Every run's value, to judge the noise behind a median.
for k in $(printf '%s\n' "${!v[@]}" | sort); do echo "$k:${v[$k]}"; done >"$out/cluster-runs.txt"
iperf=$(m iperf3)
mcd_set=$(m memcached.set) mcd_get=$(m memcached.get) cpy=$(m memcpy.1M) cpy1k=$(m memcpy.1K)

echo
echo "Cluster over loopback TCP (shared memory off): master + 1 node + mc_bench (C API, async), median of $RUNS runs"
printf "%-38s %12s   %-34s %12s %8s\n" "" "mooncake" "baseline" "" "ratio"
row() { # label value baseline-label baseline
    printf "%-38s %12.0f   %-34s %12.0f %8s\n" "$1" "$2" "$3" "$4" "$(ratio "$2" "$4")"
}
row "1 MiB put, N=$N_LARGE (MiB/s)" "$(m tcp.put.1M)" "iperf3, 1 stream (MiB/s)" "$iperf"
row "1 MiB get, N=$N_LARGE (MiB/s)" "$(m tcp.get.1M)" "iperf3, 1 stream (MiB/s)" "$iperf"
row "1 KiB put, N=$N_SMALL (ops/s)" "$(m tcp.put.1K)" "memcached set, N=$N_SMALL (ops/s)" "$mcd_set"
row "1 KiB get, N=$N_SMALL (ops/s)" "$(m tcp.get.1K)" "memcached get, N=$N_SMALL (ops/s)" "$mcd_get"
echo
echo "Same host: the embedded (in-process) store vs memcpy of the same size (one thread, 64 MiB source)"
row "embedded 1 MiB put, N=$N_LARGE (MiB/s)" "$(m emb.put.1M)" "memcpy 1 MiB (MiB/s)" "$cpy"
row "embedded 1 MiB get, N=$N_LARGE (MiB/s)" "$(m emb.get.1M)" "memcpy 1 MiB (MiB/s)" "$cpy"
row "embedded 1 KiB put, N=$N_SMALL (ops/s)" "$(m emb.put.1K)" "memcpy 1 KiB (ops/s)" "$cpy1k"
row "embedded 1 KiB get, N=$N_SMALL (ops/s)" "$(m emb.get.1K)" "memcpy 1 KiB (ops/s)" "$cpy1k"
if [ -n "${v[shm.get.1M]:-}" ]; then # SHM PATH
    row "shm 1 MiB put, N=$N_LARGE (MiB/s)" "$(m shm.put.1M)" "memcpy 1 MiB (MiB/s)" "$cpy"
    row "shm 1 MiB get, N=$N_LARGE (MiB/s)" "$(m shm.get.1M)" "memcpy 1 MiB (MiB/s)" "$cpy"
else
    printf "%-38s %12s\n" "shm 1 MiB put/get (other process)" "not measured"
fi
echo "(every run: $out/cluster-runs.txt)"
