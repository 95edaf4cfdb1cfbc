#!/bin/sh
# Runs inside the RDMA test VM (see init): rdma_selftest as a node and a
# client over rxe0. The client kills the node itself, at the end.
set -u
ibv_devinfo -v -d "$RXE_DEV" | grep -E 'hca_id|transport:|state:|max_mr_size|max_qp_wr|max_qp_rd_atom:' |
    tr -s ' \t' ' '
pub=/tmp/node.pub
timeout 200 rdma_selftest node --listen "$RXE_IP:7471" --publish $pub >/tmp/node.log 2>&1 &
node=$!
start=$(cut -d' ' -f1 /proc/uptime)
timeout 180 rdma_selftest client --connect "$RXE_IP:7471" --publish $pub
rc=$?
end=$(cut -d' ' -f1 /proc/uptime)
echo "client exit $rc after $(echo "$start $end" | awk '{printf "%.1f", $2 - $1}')s"
kill -9 $node 2>/dev/null
wait $node 2>/dev/null
echo "--- node log:"
cat /tmp/node.log
if [ $rc -ne 0 ]; then
    echo "--- diagnostics: rping over $RXE_DEV"
    timeout 20 rping -s -a "$RXE_IP" -C 3 >/dev/null 2>&1 &
    sleep 0.5
    timeout 20 rping -c -a "$RXE_IP" -C 3 -v
    echo "rping rc=$?"
    dmesg | grep -iE 'rxe|rdma|infiniband' | tail -n 10
fi
exit $rc
