#!/bin/sh
# Runs inside the RDMA test VM (see init), after the transport selftest
# (vm-selftest.sh): a master and two nodes with --protocol rdma over rxe0,
# then
#   (a) mooncake-cli put/get round trips of 1 KiB, 1 MiB, 64 MiB, 2 replicas;
#   (b) cp of a 64 MiB file into and out of a mooncake-fs mount (--protocol rdma);
#   (c) the first node killed: every read fails over to the other replica;
#   (d) the counters: RDMA carried every byte, TCP none;
#   (e) the zero-copy API (zc_check): a registered 64 MiB buffer moved by
#       the NIC itself (rdma_zero_copy_bytes), no staging, no TCP;
#   (f) a one-sided write landing after its lease (MC_FAULT_XFER sends a
#       copy 16 s late) is refused by the segment's fence and spoils no
#       object that took the space meanwhile: into a node's segment, into
#       a node's segment in a file (--segment-file), and into a master's
#       own;
#   (g) a writer stopped (SIGSTOP) in the middle of its one-sided writes
#       holds the fence's rise back until the node revokes its connection;
#       the space then goes to pinned objects, and when the writer goes on
#       nothing of it lands there;
#   (h) a reader over RDMA holding a replica set of before its node's
#       segment was dropped and mounted again (a descriptor of
#       mooncake-fs --cache-mode direct, the node stopped past its TTL)
#       never reads the bytes of the object that took the space since:
#       its read fails with ESTALE.
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
# cli ARGS: mooncake-cli of the master $CM (default $M); used: the bytes
# its cluster holds.
cli() { mooncake-cli --master ${CM:-$M} --auth-secret-file $K --protocol rdma --rdma-device "$RXE_DEV" "$@"; }
used() { cli stats --json | tr -d ' \n' | sed -n 's/.*"used_bytes":\([0-9]*\).*/\1/p'; }

echo "== transport selftest"
sh /usr/local/bin/vm-selftest.sh || die "rdma_selftest"

echo "== cluster: master, nodes A and B (--protocol rdma, segments 256 MiB)"
# start_master ADDR [ARGS]: a master at ADDR (its log master.ADDR.log),
# waited for until it listens: one with an RDMA segment opens its device
# first, which under TCG took more than the half second this once slept.
start_master() {
    a=$1
    shift
    mooncake-master --listen $a --auth-secret-file $K "$@" >$T/master.$a.log 2>&1 &
    mp=$!
    pids="$pids $mp"
    i=0
    until grep -q "listening on" $T/master.$a.log; do
        i=$((i + 1))
        [ $i -gt 300 ] && die "master $a did not come up: $(cat $T/master.$a.log)"
        kill -0 $mp 2>/dev/null || die "master $a exited: $(cat $T/master.$a.log)"
        sleep 0.1
    done
}
# start_node NAME [MASTER [SIZE [FILE]]]: node NAME (pid in $nodeNAME, log
# nodeNAME.log) of MASTER (default $M) with a segment of SIZE (256M), in
# FILE when given.
start_node() {
    # Not through cli(): $! must be mooncake-cli itself, for the kill -9.
    mooncake-cli --master ${2:-$M} --auth-secret-file $K --protocol rdma --rdma-device "$RXE_DEV" \
        --log-level info --segment-size ${3:-256M} ${4:+--segment-file $4} --listen $IP:0 \
        node >$T/node$1.log 2>&1 &
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
# A TTL longer than part (c) takes under emulation (each client's HELLO/AUTH
# adds round trips): the killed node must stay listed, for the failover.
start_master $M --node-ttl-ms 30000
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

# late_write TAG MNT: a mount at MNT of master $CM (the write lease: 1 s,
# and 8 MiB of space) whose fault injection fails its write at offset 0 at
# once and sends a copy of the bytes 16 s later, over RDMA: a writer
# frozen between its check and its post. By then the space is back and
# pinned objects hold all of it: they must keep their bytes, the copy be
# refused. Its files are named after TAG: three run at once.
late_write() {
    mkdir -p $2
    MC_FAULT_XFER="off=0,err=5,delay=16000" mooncake-fs -f --master $CM --auth-secret-file $K \
        --segment-size 0 --protocol rdma --rdma-device "$RXE_DEV" --cache-timeout 0 $2 \
        >$T/late.$1.log 2>&1 &
    fs=$!
    i=0
    until grep -q " $2 fuse" /proc/mounts; do
        i=$((i + 1))
        [ $i -gt 300 ] && die "mooncake-fs did not mount ($1)"
        kill -0 $fs 2>/dev/null || die "mooncake-fs exited ($1): $(cat $T/late.$1.log)"
        sleep 0.1
    done
    # A write that lands (not at offset 0): the RDMA connection is up.
    dd if=/dev/zero of=$2/probe bs=4096 count=1 seek=256 2>/dev/null || die "the probe write ($1)"
    rm -f $2/probe
    head -c 1048576 /dev/zero | tr '\0' L >$T/L.$1
    t0=$(now)
    cp $T/L.$1 $2/late 2>$T/late.$1.err && die "the faulted write succeeded ($1)"
    i=0
    until [ "$(used)" = 0 ]; do
        i=$((i + 1))
        [ $i -gt 300 ] && die "the failed write's space did not come back ($1: used $(used))"
        sleep 0.1
    done
    n=0
    vs=""
    for c in A B C D E F G H I J K M N O P Q; do
        head -c 2097152 /dev/zero | tr '\0' $c >$T/v$1$c
        cli --pin hard put v$1$c $T/v$1$c 2>/dev/null || break
        n=$((n + 1))
        vs="$vs $c"
    done
    [ $n -ge 3 ] || die "only $n pinned objects fit ($1)"
    t1=$(now)
    grep -q "late copy" $T/late.$1.log && die "the late bytes came before the objects: no test ($1)"
    i=0
    until grep -q "late copy" $T/late.$1.log; do
        i=$((i + 1))
        [ $i -gt 300 ] && die "the late copy never went out ($1)"
        sleep 0.1
    done
    for c in $vs; do
        cli get v$1$c $T/g$1$c 2>/dev/null || die "get v$1$c"
        cmp -s $T/v$1$c $T/g$1$c || die "object v$1$c was overwritten by the late write" \
            "($(head -c 8 $T/g$1$c))"
    done
    grep -q "the late copy reached the node: Stale file handle" $T/late.$1.log ||
        die "the late copy was not refused ($1): $(grep 'late copy' $T/late.$1.log)"
    kill -INT $fs
    wait $fs
    lr=$(fs_bytes $T/late.$1.log rdma)
    [ "${lr:-0}" -gt 0 ] ||
        die "the mount moved no bytes over RDMA: $(grep 'bytes moved' $T/late.$1.log)"
    ok "$1: $n pinned objects intact (in place $(echo "$t0 $t1" | awk '{printf "%.1f", $2-$1}') s" \
        "after the write failed, before its copy at 16 s); the late copy refused (Stale file" \
        "handle); rdma $lr"
}

echo "== (f) a one-sided write landing after its lease spoils no other object"
echo "   into a node's segment (node C, 8 MiB), one in a file (node E) and a master's own, at once"
M2=$IP:50052
start_master $M2 --put-ttl-ms 1000
start_node C $M2 8M
M5=$IP:50055
start_master $M5 --put-ttl-ms 1000
truncate -s 8M $T/segE
start_node E $M5 8M $T/segE
M4=$IP:50054
start_master $M4 --put-ttl-ms 1000 --segment-size 8M --protocol rdma --rdma-device "$RXE_DEV"
(CM=$M2; late_write node /mnt/mc) &
lw1=$!
(CM=$M5; late_write file /mnt/mc3) &
lw3=$!
(CM=$M4; late_write master /mnt/mc2) &
lw2=$!
wait $lw1 || die "(f) into a node's segment"
wait $lw3 || die "(f) into a node's segment in a file"
wait $lw2 || die "(f) into a master's own segment"

echo "== (g) a writer stopped in the middle of its RDMA writes is revoked"
# Its own master (the write lease: 1 s) and node D (40 MiB). A put of 32
# MiB is stopped once node D accepted its RDMA connection: its slot keeps
# the write's epoch, so the rise of the epoch that revokes it (its lease
# runs out while it is stopped) waits until the node revokes the
# connection (5 s). Its space then comes back and pinned objects take it;
# when the writer goes on, its queue pair is gone and nothing lands. A stop
# that came before the first write was marked proves nothing: try again.
M3=$IP:50053
start_master $M3 --put-ttl-ms 1000
start_node D $M3 40M
CM=$M3
head -c 33554432 $T/in.64M >$T/in.32M
held() { grep -q "RDMA peer .* torn down" $T/nodeD.log && [ "$(used)" = 0 ]; }
revoked=0
for attempt in 1 2 3; do
    acc=$(grep -c "rdma: accepted" $T/nodeD.log)
    # Not through cli(): $! must be mooncake-cli itself, for the SIGSTOP.
    mooncake-cli --master $M3 --auth-secret-file $K --protocol rdma --rdma-device "$RXE_DEV" \
        put big $T/in.32M >$T/big.log 2>&1 &
    w=$!
    i=0
    until [ "$(grep -c "rdma: accepted" $T/nodeD.log)" -gt "$acc" ]; do
        i=$((i + 1))
        [ $i -gt 600 ] && die "the writer never connected to node D: $(cat $T/big.log)"
        sleep 0.05
    done
    kill -STOP $w
    i=0
    until held; do
        i=$((i + 1))
        [ $i -gt 200 ] && break
        sleep 0.1
    done
    if held; then
        revoked=1
        break
    fi
    echo "     attempt $attempt: stopped before a write was marked (used $(used)); again"
    kill -CONT $w
    wait $w
    cli rm -f big >/dev/null 2>&1
done
[ $revoked = 1 ] || die "the stopped writer was never revoked: $(tail -n 5 $T/nodeD.log)"
vs=""
for c in a b c d; do
    head -c 8388608 /dev/zero | tr '\0' $c >$T/w$c
    cli --pin hard put w$c $T/w$c 2>/dev/null || die "pinned put w$c: the space did not come back"
    vs="$vs $c"
done
kill -CONT $w
wait $w && die "the revoked writer's put succeeded: $(cat $T/big.log)"
for c in $vs; do
    cli get w$c $T/h$c 2>/dev/null || die "get w$c"
    cmp -s $T/w$c $T/h$c || die "object w$c was overwritten by the revoked writer"
done
ok "the stopped writer was revoked ($(grep -o 'RDMA peer [^ ]*' $T/nodeD.log | head -n 1)), its" \
    "space went to 32 MiB of pinned objects, which kept their bytes when it went on"

echo "== (h) a reader over RDMA never reads another object's bytes after its node rejoins"
# Its own master (nodes silent 3 s expire) and node F (8 MiB): object a
# (1 MiB of A) is opened through a mount (--cache-mode direct: reads go
# to the node with the replica set the open got); node F is stopped past
# its TTL, its segment dropped and mounted again above that set's epoch,
# and object b (1 MiB of B) takes the emptied segment's space. The
# descriptor's read must then fail (ESTALE), never return b's bytes.
M6=$IP:50056
start_master $M6 --node-ttl-ms 3000
start_node F $M6 8M
CM=$M6
head -c 1048576 /dev/zero | tr '\0' A >$T/ra
head -c 1048576 /dev/zero | tr '\0' B >$T/rb
cli put a $T/ra 2>$T/ra.log || die "put a: $(cat $T/ra.log)"
mkdir -p /mnt/mc4
mooncake-fs -f --master $M6 --auth-secret-file $K --segment-size 0 --protocol rdma \
    --rdma-device "$RXE_DEV" --cache-mode direct --cache-timeout 0 --timeout-ms 2000 /mnt/mc4 \
    >$T/fs4.log 2>&1 &
fs=$!
i=0
until grep -q " /mnt/mc4 fuse" /proc/mounts; do
    i=$((i + 1))
    [ $i -gt 300 ] && die "mooncake-fs did not mount (h)"
    kill -0 $fs 2>/dev/null || die "mooncake-fs exited (h): $(cat $T/fs4.log)"
    sleep 0.1
done
exec 3</mnt/mc4/a || die "open a through the mount"
kill -STOP $nodeF
i=0
until grep -q "silent past their TTL" $T/master.$M6.log; do
    i=$((i + 1))
    [ $i -gt 300 ] && { kill -CONT $nodeF; die "node F did not expire"; }
    sleep 0.1
done
kill -CONT $nodeF
i=0
until cli put b $T/rb 2>$T/rb.log; do
    i=$((i + 1))
    [ $i -gt 120 ] && die "node F's segment took no new object: $(cat $T/rb.log)"
    sleep 0.5
done
grep -q "mounting the segment again" $T/nodeF.log || die "node F did not mount its segment again"
dd bs=4096 count=1 <&3 >$T/rgot 2>$T/rgot.err
rc=$?
exec 3<&-
kill -INT $fs
wait $fs
rr=$(fs_bytes $T/fs4.log rdma)
rt=$(fs_bytes $T/fs4.log tcp)
if [ $rc -eq 0 ]; then
    head -c 4096 $T/ra | cmp -s - $T/rgot ||
        die "the descriptor read another object's bytes over RDMA ($(head -c 8 $T/rgot)...;" \
            "rdma ${rr:-0} tcp ${rt:-0})"
    ok "the descriptor read its own bytes after the rejoin (rdma ${rr:-0}, tcp ${rt:-0})"
else
    grep -q "Stale file handle" $T/rgot.err ||
        die "the descriptor's read failed, but not with ESTALE: $(cat $T/rgot.err)"
    [ "${rt:-0}" = 0 ] || die "the mount read over TCP: tcp $rt"
    ok "the descriptor's read failed with ESTALE ($(head -n 1 $T/rgot.err)), tcp 0"
fi

kill $pids 2>/dev/null
wait 2>/dev/null
echo "cluster test: $fails failure(s)"
[ $fails -eq 0 ]
