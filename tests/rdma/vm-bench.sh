#!/bin/sh
# Runs inside the RDMA test VM (see init) for make bench-rdma: one master,
# one node serving its segment over RDMA (and, as every node, over TCP),
# then mc_bench's 1 MiB gets from a pure client over RDMA and over TCP
# (--no-shm: no shared-memory shortcut), and their ratio.
# Soft-RoCE under QEMU's emulation proves behaviour, not speed: both paths
# are CPU copies in an emulated kernel, so the ratio says little about
# RDMA hardware.
set -u
IP=$RXE_IP
M=$IP:50051
SECS=${BENCH_SECONDS:-3}
# Servers beyond loopback need the cluster's secret; every process gets it.
K=/tmp/secret
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >$K
chmod 600 $K
mooncake-master --listen $M --auth-secret-file $K >/tmp/master.log 2>&1 &
p1=$!
sleep 0.5
mooncake-cli --master $M --auth-secret-file $K --protocol rdma --rdma-device "$RXE_DEV" --segment-size 512M \
    --listen $IP:0 node >/tmp/node.log 2>&1 &
p2=$!
i=0
until grep -q "node up" /tmp/node.log; do
    i=$((i + 1))
    [ $i -gt 300 ] && { cat /tmp/node.log; exit 1; }
    sleep 0.1
done
rc=0
for proto in rdma tcp; do
    mc_bench --master $M --auth-secret-file $K --protocol $proto --rdma-device "$RXE_DEV" --no-shm --size 1M \
        -n 4 --keys 8 --seconds "$SECS" --ops put,get >/tmp/bench.$proto 2>&1 || rc=1
    echo "$proto: $(grep 'op=get' /tmp/bench.$proto) $(grep '^tcp_bytes' /tmp/bench.$proto)"
done
r=$(sed -n 's/.*op=get.* mib_s=\([0-9.]*\).*/\1/p' /tmp/bench.rdma)
t=$(sed -n 's/.*op=get.* mib_s=\([0-9.]*\).*/\1/p' /tmp/bench.tcp)
echo "1 MiB gets: rdma ${r:-?} MiB/s, tcp ${t:-?} MiB/s, ratio rdma/tcp" \
    "$(echo "${r:-0} ${t:-0}" | awk '{ if ($2 > 0) printf "%.2f", $1 / $2; else print "?" }')"
echo "(Soft-RoCE in a QEMU TCG VM: proves behaviour, not speed)"
kill $p2 $p1 2>/dev/null
wait 2>/dev/null
exit $rc
