#!/bin/sh
# Runs inside the RDMA test VM (see init), after the transport selftest
# (vm-selftest.sh): a master and two nodes with --protocol rdma over rxe0,
# then
#   (a) mooncake-cli put/get round trips of 1 KiB, 1 MiB, 64 MiB, 2 replicas;
#   (b) cp of a 64 MiB file into and out of a mooncake-fs mount (--protocol rdma);
#   (c) the first node killed: every read fails over to the other replica;
#   (d) the counters: RDMA carried every byte, TCP none;
#   (e) the zero-copy API (zc_check): a registered 64 MiB buffer moved by
#       the NIC itself (rdma_zero_copy_bytes), no staging, no TCP.
# Prints each check; exits non-zero on the first failure.
set -u
IP=$RXE_IP
M=$IP:50051
T=/tmp/mc
mkdir -p $T /mnt/mc
# Servers beyond loopback need the cluster's secret; every process gets it.
K=$T/secret
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >$K
chmod 600 $K
fails=0
pids=""
ok() { echo "ok   $*"; }
bad() {
    echo "FAIL $*"
    fails=$((fails + 1))
}
die() {
    bad "$*"
    for f in $T/*.log; do
        echo "--- $f"
        tail -n 20 "$f"
    done
    kill $pids 2>/dev/null
    exit 1
}
now() { cut -d' ' -f1 /proc/uptime; }
# field NAME FILE: the value after NAME in the last "stats:" line of FILE.
field() { grep 'stats:' "$2" | tail -n 1 | tr ' ' '\n' | grep -A1 -x "$1" | tail -n 1; }
cli() { mooncake-cli --master $M --auth-secret-file $K --protocol rdma --rdma-device "$RXE_DEV" "$@"; }

echo "== transport selftest"
sh /usr/local/bin/vm-selftest.sh || die "rdma_selftest"

echo "== cluster: master, nodes A and B (--protocol rdma, segments 256 MiB)"
# A TTL longer than part (c) takes under emulation (each client's HELLO/AUTH
# adds round trips): the killed node must stay listed, for the failover.
mooncake-master --listen $M --auth-secret-file $K --node-ttl-ms 30000 >$T/master.log 2>&1 &
pids="$pids $!"
sleep 0.5
start_node() {
    # Not through cli(): $! must be mooncake-cli itself, for the kill -9.
    mooncake-cli --master $M --auth-secret-file $K --protocol rdma --rdma-device "$RXE_DEV" --log-level info \
        --segment-size 256M --listen $IP:0 node >$T/node$1.log 2>&1 &
    eval "node$1=$!"
    pids="$pids $!"
    i=0
    until grep -q "node up" $T/node$1.log; do
        i=$((i + 1))
        [ $i -gt 300 ] && die "node $1 did not come up"
        kill -0 "$(eval echo \$node$1)" 2>/dev/null || die "node $1 exited"
        sleep 0.1
    done
}
start_node A # first: with equal free space it is every object's first replica
start_node B
ok "master and 2 nodes up (RDMA listeners: $(grep -ho 'rdma: listening on [^ ]*' $T/node*.log | tr '\n' ' '))"

echo "== (a) C API round trips, --replicas 2"
for sz in 1K 1M 64M; do
    case $sz in 1K) n=1024 ;; 1M) n=1048576 ;; 64M) n=67108864 ;; esac
    dd if=/dev/urandom of=$T/in.$sz bs=1024 count=$((n / 1024)) 2>/dev/null
    t0=$(now)
    cli --replicas 2 --stats put obj$sz $T/in.$sz 2>$T/put.$sz.log || die "put $sz: $(cat $T/put.$sz.log)"
    cli --stats get obj$sz $T/out.$sz 2>$T/get.$sz.log || die "get $sz: $(cat $T/get.$sz.log)"
    t1=$(now)
    cmp -s $T/in.$sz $T/out.$sz || die "get $sz: bytes differ"
    pr=$(field rdma_bytes $T/put.$sz.log)
    pt=$(field tcp_bytes $T/put.$sz.log)
    ps=$(field shm_bytes $T/put.$sz.log)
    gr=$(field rdma_bytes $T/get.$sz.log)
    gt=$(field tcp_bytes $T/get.$sz.log)
    gs=$(field shm_bytes $T/get.$sz.log)
    [ "$pr" = $((2 * n)) ] && [ "$pt" = 0 ] && [ "$ps" = 0 ] ||
        die "put $sz counters: rdma $pr (want $((2 * n))) tcp $pt shm $ps"
    [ "$gr" = $n ] && [ "$gt" = 0 ] && [ "$gs" = 0 ] ||
        die "get $sz counters: rdma $gr (want $n) tcp $gt shm $gs"
    ok "$sz: put+get in $(echo "$t0 $t1" | awk '{printf "%.1f", $2-$1}')s, bytes equal;" \
        "(d) rdma put $pr get $gr, tcp 0, shm 0"
done

echo "== (e) zero copy: a registered 64 MiB buffer, put_from / get_into (zc_check)"
zc_check $M "$RXE_DEV" $K >$T/zc.log 2>&1 || die "zc_check: $(cat $T/zc.log)"
sed 's/^/     /' $T/zc.log
ok "the NIC moved the registered buffer's bytes itself: rdma_zero_copy_bytes > 0, tcp 0"

echo "== (b) cp 64 MiB in and out of mooncake-fs --protocol rdma"
# fs_mount LOG: mounts /mnt/mc in the foreground, waits for it.
fs_mount() {
    mooncake-fs -f --master $M --auth-secret-file $K --segment-size 0 --protocol rdma --rdma-device "$RXE_DEV" \
        --replicas 2 /mnt/mc >"$1" 2>&1 &
    fs=$!
    i=0
    until grep -q " /mnt/mc fuse" /proc/mounts; do
        i=$((i + 1))
        [ $i -gt 300 ] && die "mooncake-fs did not mount ($1)"
        kill -0 $fs 2>/dev/null || die "mooncake-fs exited ($1): $(cat "$1")"
        sleep 0.1
    done
}
# fs_umount LOG: unmounts, requires exit 0, prints the bytes line.
fs_umount() {
    kill -INT $fs
    wait $fs
    rc=$?
    [ $rc -eq 0 ] || die "mooncake-fs exit $rc: $(cat "$1")"
    grep -i "error" "$1" && die "mooncake-fs logged an error"
    grep "bytes moved" "$1"
}
fs_bytes() { grep "bytes moved" "$1" | sed -n "s/.* $2 \([0-9]*\).*(ops.*/\1/p"; }
fs_mount $T/fs1.log
t0=$(now)
cp $T/in.64M /mnt/mc/file64 || die "cp into the mount"
t1=$(now)
fs_umount $T/fs1.log
fs_mount $T/fs2.log
cp /mnt/mc/file64 $T/out.fs || die "cp out of the mount"
t2=$(now)
[ "$(stat -c %s /mnt/mc/file64)" = 67108864 ] || die "size in the mount"
fs_umount $T/fs2.log
cmp -s $T/in.64M $T/out.fs || die "cp out: bytes differ"
w=$(fs_bytes $T/fs1.log rdma)
wt=$(fs_bytes $T/fs1.log tcp)
r=$(fs_bytes $T/fs2.log rdma)
rt=$(fs_bytes $T/fs2.log tcp)
[ "$w" -ge $((2 * 67108864)) ] && [ "$wt" = 0 ] || die "fs write counters: rdma $w tcp $wt"
[ "$r" -ge 67108864 ] && [ "$rt" = 0 ] || die "fs read counters: rdma $r tcp $rt"
ok "cp in $(echo "$t0 $t1" | awk '{printf "%.1f", $2-$1}')s, out (fresh mount)" \
    "$(echo "$t1 $t2" | awk '{printf "%.1f", $2-$1}')s, bytes equal; (d) rdma in $w out $r, tcp 0"

echo "== (c) node A killed: reads fail over to node B"
kill -9 $nodeA
wait $nodeA 2>/dev/null
for sz in 1K 1M 64M; do
    rm -f $T/out.$sz
    cli --log-level info --stats get obj$sz $T/out.$sz 2>$T/fo.$sz.log ||
        die "get $sz after the kill: $(cat $T/fo.$sz.log)"
    cmp -s $T/in.$sz $T/out.$sz || die "get $sz after the kill: bytes differ"
    fo=$(grep -c "trying the next replica" $T/fo.$sz.log)
    [ "$fo" -ge 1 ] || die "get $sz: no failover seen (replica order?): $(cat $T/fo.$sz.log)"
    gt=$(field tcp_bytes $T/fo.$sz.log)
    [ "$gt" = 0 ] || die "get $sz after the kill: tcp $gt"
    ok "$sz: read failed over ($(grep -o 'read from [^ ]* failed ([^)]*)' $T/fo.$sz.log | head -n 1))," \
        "bytes equal, rdma $(field rdma_bytes $T/fo.$sz.log) tcp 0"
done
fs_mount $T/fs3.log
cmp -s $T/in.64M /mnt/mc/file64 || die "mount after the kill: bytes differ"
fs_umount $T/fs3.log
ok "mooncake-fs reads the 64 MiB file after the kill"

kill -INT $nodeB 2>/dev/null
kill $pids 2>/dev/null
wait 2>/dev/null
echo "cluster test: $fails failure(s)"
[ $fails -eq 0 ]
