# shellcheck shell=bash
# bench/lib.sh - shell helpers the bench scripts share (sourced, not run):
# timing dd through a directory, medians, free ports, waiting for a
# process's log, mounts.

now() { date +%s.%N; }

# drop_caches: writes dirty pages back and drops the page cache (root), so
# that a read that follows comes from the file system, not from memory.
drop_caches() {
    sync
    echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
}

# dd_mibps FILE write|overwrite|read BS MIB: one timed dd of MIB MiB in
# blocks of BS (1M, 4K, ...) to or from FILE; prints MiB/s. write creates
# FILE afresh (O_TRUNC), overwrite writes over its blocks in place
# (conv=notrunc), read reads it. The caller sets up the cache state first.
dd_mibps() {
    local f=$1 op=$2 bs=$3 mib=$4 t0 t1 count
    count=$((mib * 1048576 / $(numfmt --from=iec "$bs")))
    t0=$(now)
    case $op in
    write) dd if=/dev/zero of="$f" bs="$bs" count="$count" status=none ;;
    overwrite) dd if=/dev/zero of="$f" bs="$bs" count="$count" conv=notrunc status=none ;;
    read) dd if="$f" of=/dev/null bs="$bs" count="$count" status=none ;;
    esac
    t1=$(now)
    echo "$mib $t0 $t1" | awk '{printf "%.0f\n", $1 / ($3 - $2)}'
}

# median: the median of the numbers on stdin, one a line (the lower middle
# for an even count).
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# free_port: a TCP port on 127.0.0.1 that nothing listens on now ($PYTHON).
free_port() {
    "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_log PID LOG REGEX: until REGEX is in LOG (20 s); exits 1 with LOG's
# tail when it is not, or when PID died first.
wait_log() {
    for _ in $(seq 400); do
        grep -qE "$3" "$2" 2>/dev/null && return 0
        kill -0 "$1" 2>/dev/null || break
        sleep 0.05
    done
    echo "bench: not ready: $2" >&2
    tail -5 "$2" >&2
    exit 1
}

# master_and_node PORT SIZE MASTER_LOG NODE_LOG: a mooncake-master on
# 127.0.0.1:PORT and one node (mooncake-cli node) with a SIZE segment, each
# ready (wait_log) and its PID added to the caller's array pids.
master_and_node() {
    "$BUILD/mooncake-master" --listen "127.0.0.1:$1" >"$3" 2>&1 &
    pids+=($!)
    wait_log $! "$3" "listening on"
    "$BUILD/mooncake-cli" --master "127.0.0.1:$1" --segment-size "$2" node >"$4" 2>&1 &
    pids+=($!)
    wait_log $! "$4" "node up"
}

# wait_mount DIR PID: until DIR is a mount point (10 s), or fail if PID died.
wait_mount() {
    for _ in $(seq 200); do
        mountpoint -q "$1" && return 0
        kill -0 "$2" 2>/dev/null || break
        sleep 0.05
    done
    echo "bench: $1 did not mount" >&2
    return 1
}

# unmount DIR PID: unmounts a FUSE mount and waits for its daemon, which
# must exit 0.
unmount() {
    local rc=0
    fusermount3 -u "$1"
    wait "$2" || rc=$?
    [ "$rc" = 0 ] || echo "bench: the daemon of $1 exited $rc" >&2
    return "$rc"
}
