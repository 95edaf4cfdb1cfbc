# shellcheck shell=bash
# bench/mount_table.sh - sourced by bench/run.sh: the measures of issue 14's
# table on each mounted target (fio from Debian, and a small-file loop in
# Python), while run.sh's mounts are up. Each value goes to results.txt as
# table.MEASURE.TARGET; bench/report.py puts them side by side.
#
#   read4   4 readers at once, each reading the whole TABLE_MB MiB file in
#           1 MiB blocks (psync), after drop_caches: MiB/s of all four
#   rand1   4 KiB random reads of that file, 1 in flight (psync), right
#           after read4 (a page cache that kept the file is used): IOPS
#   rand16  4 KiB random reads, 16 in flight (libaio, O_DIRECT): IOPS
#   create  open(O_CREAT) + write 4 KiB + close of TABLE_FILES new files,
#           one process: files/s
#   stat    os.stat of those files, 4 rounds: stats/s
# and mount_threads: read4 again on a fresh mooncake-fs with --threads 1 up
# to the machine's CPUs, in each cache mode, as table.read4.MODE.tN.
# Every target does the same work with the same client concurrency; what
# differs is only the file system under the directory.

TABLE_MB=${BENCH_TABLE_MB:-1024}
TABLE_CP_MB=${BENCH_TABLE_CP_MB:-256} # the file cp copies (twice that must fit)
TABLE_FILES=${BENCH_TABLE_FILES:-2000}
TABLE_SECONDS=${BENCH_TABLE_SECONDS:-3}

# fio_json ARGS...: runs fio with group reporting, prints its JSON.
fio_json() {
    fio --group_reporting --output-format=json "$@" 2>/dev/null
}

# json_field PATH: reads fio's JSON on stdin, prints jobs[0].read.PATH.
json_field() {
    "$PYTHON" -c 'import json, sys; print(round(json.load(sys.stdin)["jobs"][0]["read"][sys.argv[1]]))' "$1"
}

# small_files DIR N: prints "files/s stats/s" for N creates + 4 KiB writes +
# closes, then 4 rounds of stat over them.
small_files() {
    "$PYTHON" - "$1" "$2" <<'PY'
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
block = b"x" * 4096
names = [os.path.join(d, f"f{i:06d}") for i in range(n)]
t0 = time.perf_counter()
for p in names:
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, block)
    os.close(fd)
t1 = time.perf_counter()
for _ in range(4):
    for p in names:
        os.stat(p)
t2 = time.perf_counter()
print(round(n / (t1 - t0)), round(4 * n / (t2 - t1)))
PY
}

# cp_mibps SRC DST: cp of SRC to DST (after drop_caches: SRC cold), MiB/s
# of SRC's size. cp uses copy_file_range(2): each file system's own copy
# where it has one (passthrough_ll's and mooncake-fs's), else the kernel's.
cp_mibps() {
    local t0 t1
    drop_caches
    t0=$(now)
    cp "$1" "$2"
    t1=$(now)
    echo "$(stat -c %s "$1") $t0 $t1" | awk '{printf "%.0f\n", $1 / 1048576 / ($3 - $2)}'
}

# read4_mibps FILE: the read4 job on FILE (after drop_caches): MiB/s.
read4_mibps() {
    drop_caches
    fio_json --name=read4 --filename="$1" --rw=read --bs=1M --size="${TABLE_MB}M" \
        --numjobs=4 --ioengine=psync | json_field bw | awk '{printf "%.0f\n", $1 / 1024}'
}

# mount_threads T: read4 on mooncake-fs mounted on target T's directory with
# --threads 1 .. nproc, in --cache-mode pages and direct (a fresh daemon each
# time, pid[T] while it runs; $BUILD, $out and record are run.sh's).
# shellcheck disable=SC2154 # dir and out are run.sh's
mount_threads() {
    local mode n d=${dir[$1]}
    for mode in pages direct; do
        for n in $(seq 1 "$(nproc)"); do
            "$BUILD/mooncake-fs" -f --segment-size $((TABLE_MB + 256))M --cache-mode "$mode" \
                --threads "$n" "$d" 2>>"$out/mooncake-fs.log" &
            pid[$1]=$!
            wait_mount "$d" "${pid[$1]}"
            dd if=/dev/zero of="$d/table.dat" bs=1M count="$TABLE_MB" status=none
            record "table.read4.$mode.t$n" "$(read4_mibps "$d/table.dat")"
            unmount "$d" "${pid[$1]}"
            pid[$1]=""
        done
    done
}

# mount_table T: every measure once on target T's directory.
mount_table() {
    local d=${dir[$1]} f
    f=$d/table.dat
    dd if=/dev/zero of="$f" bs=1M count="$TABLE_MB" status=none
    record "table.read4.$1" "$(read4_mibps "$f")"
    record "table.rand1.$1" "$(fio_json --name=rand1 --filename="$f" --rw=randread --bs=4k \
        --size="${TABLE_MB}M" --ioengine=psync --runtime="$TABLE_SECONDS" --time_based |
        json_field iops)"
    record "table.rand16.$1" "$(fio_json --name=rand16 --filename="$f" --rw=randread --bs=4k \
        --size="${TABLE_MB}M" --ioengine=libaio --iodepth=16 --direct=1 \
        --runtime="$TABLE_SECONDS" --time_based | json_field iops)"
    rm -f "$f"
    dd if=/dev/urandom of="$d/cp.src" bs=1M count="$TABLE_CP_MB" status=none
    record "table.cp.$1" "$(cp_mibps "$d/cp.src" "$d/cp.dst")"
    rm -f "$d/cp.src" "$d/cp.dst"
    local fs st
    read -r fs st < <(small_files "$d/small" "$TABLE_FILES")
    record "table.create.$1" "$fs"
    record "table.stat.$1" "$st"
    rm -rf "$d/small"
}
