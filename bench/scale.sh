#!/bin/bash
# bench/scale.sh - what the master holds and serves, for the paper estimate
# in docs/BENCHMARKS.md ("Past this machine"); called by bench/run.sh, runs
# on its own too (no root needed). Side by side in one run:
#   - memory per key: an embedded store (mc_bench --memory: the growth of
#     the process's resident memory per key, segment pages and the master's
#     metadata included) holding MEM_KEYS keys of 100 bytes, next to Debian's
#     redis-server holding the same keys with values of 100 bytes (SETs
#     through redis-cli --pipe; the growth of its VmRSS), twice: mc_bench's
#     own keys (mcb/100/SLOT/I, 11 to 16 bytes) and redis's DEBUG POPULATE
#     names (key:0 on, 5 to 10 bytes; also made by DEBUG POPULATE itself,
#     which leaves redis's allocator less fragmented than SETs do); and the
#     store alone with MEM_KEYS_BIG keys of mc_bench's (0: skipped);
#   - the master's ops/s at 1, 8 and 64 client connections (CONNS): that
#     many mc_bench processes, each a pure client with 16 STATs in flight
#     (a STAT is answered by the master alone, no byte moves), their ops/s
#     summed.
# Every value goes to BENCH_RESULTS (KEY VALUE, keys "scale.") when set.
# Loopback only; every process it starts is stopped on exit.
set -euo pipefail
shopt -s inherit_errexit # a failure inside $(...) ends that subshell (record then has no value)
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${MC_BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
RUNS=${BENCH_RUNS:-3}
MEM_KEYS=${BENCH_MEM_KEYS:-1000000}
MEM_KEYS_BIG=${BENCH_MEM_KEYS_BIG:-10000000}
CONNS=${BENCH_MASTER_CONNS:-1 8 64}
SECS=${BENCH_MASTER_SECONDS:-2}
results=${BENCH_RESULTS:-}
bench_bin=${MC_BENCH:-$BUILD/mc_bench}
[ -x "$bench_bin" ] || make --no-print-directory -s BUILD="$BUILD" "$bench_bin"
[ $((MEM_KEYS % 16)) -eq 0 ] && [ $((MEM_KEYS_BIG % 16)) -eq 0 ] || {
    echo "scale bench: BENCH_MEM_KEYS and BENCH_MEM_KEYS_BIG must be multiples of 16 (mc_bench's slots)" >&2
    exit 2
}
command -v redis-server >/dev/null || {
    echo "scale bench: redis-server not found (apt-get install redis-server)" >&2
    exit 1
}

work=$(mktemp -d /tmp/mc-scale-bench.XXXXXX)
pids=()
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

record() {
    [ -n "$2" ] || {
        echo "scale bench: no value for $1 (see above)" >&2
        exit 1
    }
    echo "$1 $2"
    [ -z "$results" ] || echo "$1 $2" >>"$results"
}
# vmrss_kb PID: the resident memory of process PID (kB, its /proc status)
vmrss_kb() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/status"; }
# field KEY: KEY's value in mc_bench's output on stdin
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" | head -1; }

# mc_memory KEYS [PREFIX]: bytes per key of an embedded store holding KEYS
# keys: mc_bench's own (16 slots of KEYS/16), or PREFIX:0 to PREFIX:KEYS-1.
mc_memory() {
    "$bench_bin" --embedded --size 100 --concurrency 16 --keys $(($1 / 16)) --memory \
        ${2:+--key-prefix "$2"} | field rss_bytes_per_key
}
# redis_memory KEYS [PREFIX [populate]]: bytes per key of a fresh
# redis-server (no persistence) holding the keys mc_memory's store holds,
# with values of 100 bytes: SETs, as clients load it, or with populate its
# DEBUG POPULATE (PREFIX:0 on, in the server itself: no query buffers in
# between, so its allocator is less fragmented). The growth of its VmRSS
# (INFO's used_memory_rss is a sample of the server's last cron, and may
# predate the last SETs).
redis_memory() {
    local port before after n
    port=$(free_port)
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
        --enable-debug-command local --daemonize no >"$work/redis.log" 2>&1 &
    local pid=$!
    # Called in $(...): however this subshell ends, the server goes with it
    # (the script's cleanup does not know its pid).
    # shellcheck disable=SC2064 # this port and pid, now: the function's locals are gone by then
    trap "redis-cli -p $port shutdown nosave >/dev/null 2>&1 || kill $pid 2>/dev/null
        wait $pid 2>/dev/null || true" EXIT
    failed() {
        echo "scale bench: $1; redis-server's log and redis-cli's output:" >&2
        cat "$work/redis.log" "$work/pipe.out" >&2 2>/dev/null || true
        exit 1
    }
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
    before=$(vmrss_kb "$pid")
    [ -n "$before" ] || failed "redis-server's VmRSS is unknown"
    if [ "${3:-}" = populate ]; then
        redis-cli -p "$port" debug populate "$1" "$2" 100 >"$work/pipe.out" ||
            failed "DEBUG POPULATE failed"
    else
        # The keys as mc_bench makes them (make_key()), each SET in redis's
        # protocol; the replies are read as they come (--pipe).
        awk -v n="$1" -v prefix="${2:-}" 'BEGIN {
            v = sprintf("%100s", ""); gsub(/ /, "v", v)
            for (k = 0; k < n; k++) {
                key = prefix != "" ? prefix ":" k : "mcb/100/" int(k / (n / 16)) "/" k % (n / 16)
                printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$100\r\n%s\r\n", length(key), key, v
            }
        }' | redis-cli -p "$port" --pipe >"$work/pipe.out" || failed "the SETs failed"
    fi
    n=$(redis-cli -p "$port" dbsize) || failed "DBSIZE failed"
    after=$(vmrss_kb "$pid")
    [ "$n" = "$1" ] || failed "redis-server holds $n keys, not $1"
    echo "$before $after $1" | awk '{printf "%.0f\n", ($2 - $1) * 1024 / $3}'
}

echo "scale bench: memory per key, $MEM_KEYS keys of 100 B, $RUNS runs ..."
record scale.mem.keys "$MEM_KEYS"
for _ in $(seq "$RUNS"); do
    record scale.mem.mc "$(mc_memory "$MEM_KEYS")"
    record scale.mem.redis "$(redis_memory "$MEM_KEYS")"
    record scale.mem_short.mc "$(mc_memory "$MEM_KEYS" key)"
    record scale.mem_short.redis "$(redis_memory "$MEM_KEYS" key)"
    record scale.mem_short.redis_populate "$(redis_memory "$MEM_KEYS" key populate)"
done
if [ "$MEM_KEYS_BIG" -gt 0 ]; then
    echo "scale bench: memory per key, $MEM_KEYS_BIG keys (the store alone, once) ..."
    record scale.mem_big.keys "$MEM_KEYS_BIG"
    record scale.mem_big.mc "$(mc_memory "$MEM_KEYS_BIG")"
fi

echo "scale bench: the master's STAT ops/s at $CONNS connections, $RUNS runs ..."
mport=$(free_port)
"$BUILD/mooncake-master" --listen "127.0.0.1:$mport" --segment-size 64M >"$work/master.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do grep -q "listening on" "$work/master.log" && break; sleep 0.05; done
# The keys the STATs ask about (one put phase, untimed).
"$bench_bin" --master "127.0.0.1:$mport" --size 64 --concurrency 16 --keys 1 --ops put \
    --seconds 0.1 >/dev/null
for _ in $(seq "$RUNS"); do
    for n in $CONNS; do
        for i in $(seq "$n"); do
            "$bench_bin" --master "127.0.0.1:$mport" --size 64 --concurrency 16 --keys 1 \
                --ops stat --seconds "$SECS" >"$work/c$i.out" 2>&1 &
        done
        wait $(jobs -p | grep -v -x -F "$(printf '%s\n' "${pids[@]}")") 2>/dev/null || true
        total=0
        for i in $(seq "$n"); do
            v=$(field ops_s <"$work/c$i.out")
            [ -n "$v" ] || {
                echo "scale bench: client $i of $n failed:" >&2
                cat "$work/c$i.out" >&2
                exit 1
            }
            total=$((total + v))
        done
        record "scale.master_ops.$n" "$total"
    done
done
