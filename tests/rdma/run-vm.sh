#!/bin/bash
# run-vm.sh - runs a test inside a throwaway Soft-RoCE VM: Debian's own kernel
# (which has rdma_rxe; the host's may not) booted by QEMU with software
# emulation, an initramfs holding the test's binaries, rxe0 on a dummy
# interface, output on the serial console.
#
#   tests/rdma/run-vm.sh --deps
#       installs the Debian packages the VM needs (the first time only);
#       exit 77 with the reason when they cannot be had.
#   tests/rdma/run-vm.sh [-w WORKDIR] [-t SECONDS] SCRIPT [BINARY...]
#       boots the VM, runs SCRIPT there with each BINARY in its PATH, and
#       exits with SCRIPT's status: 0 pass, 77 skip (QEMU or the kernel
#       cannot be had here), anything else fail. SECONDS bounds the test in
#       the VM (default 240); the whole VM gets 60 more.
#
# Environment: MC_VM_ACCEL (default tcg: this machine's KVM cannot boot a
# stock kernel), MC_VM_MEM (MiB, default 1536), KVER (a Debian kernel
# version; default the newest installed with rdma_rxe), MC_VM_SKIP_FILE
# (where a skip writes its reason).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PKGS="qemu-system-x86 linux-image-amd64 busybox-static ibverbs-providers ibverbs-utils rdma-core
rdmacm-utils perftest libibverbs-dev librdmacm-dev cpio kmod iproute2 python3"

# Exit 77 with the reason, printed and, when MC_VM_SKIP_FILE names a file,
# written there (make test-rdma reports it last).
skip() {
    echo "SKIP rdma VM: $*"
    [ -z "${MC_VM_SKIP_FILE:-}" ] || echo "$*" >"$MC_VM_SKIP_FILE"
    exit 77
}

deps() {
    [ "$(uname -s)/$(uname -m)" = Linux/x86_64 ] || skip "needs an x86_64 Linux host"
    local missing="" p
    for p in $PKGS; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing="$missing $p"
    done
    [ -z "$missing" ] && return 0
    command -v apt-get >/dev/null || skip "not Debian: missing$missing"
    [ "$(id -u)" -eq 0 ] || skip "missing Debian packages; as root: apt-get install$missing"
    echo "rdma VM: installing$missing (once; about a minute)"
    export DEBIAN_FRONTEND=noninteractive
    timeout 900 apt-get update -q >/dev/null 2>&1
    timeout 900 apt-get install -y -q --no-install-recommends $missing >/dev/null 2>&1 ||
        skip "apt-get install$missing failed"
}

pick_kernel() {
    local k
    if [ -n "${KVER:-}" ]; then
        echo "$KVER"
        return
    fi
    for k in $(ls /lib/modules 2>/dev/null | sort -rV); do
        if [ -r "/boot/vmlinuz-$k" ] &&
            [ -n "$(find "/lib/modules/$k" -name 'rdma_rxe.ko*' 2>/dev/null | head -1)" ]; then
            echo "$k"
            return
        fi
    done
}

if [ "${1:-}" = --deps ]; then
    deps
    exit 0
fi

WORK=${TMPDIR:-/tmp}/mc-rdma-vm
TEST_TIMEOUT=240
while getopts "w:t:" o; do
    case $o in
    w) WORK=$OPTARG ;;
    t) TEST_TIMEOUT=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
SCRIPT=${1:?usage: run-vm.sh [-w WORKDIR] [-t SECONDS] SCRIPT [BINARY...]}
shift
for b in "$@"; do
    [ -x "$b" ] || { echo "run-vm.sh: $b: not an executable" >&2; exit 2; }
done

deps
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 not found"
K=$(pick_kernel)
[ -n "$K" ] || skip "no Debian kernel with rdma_rxe under /lib/modules and /boot"
[ -r "/boot/vmlinuz-$K" ] && [ -d "/lib/modules/$K" ] || skip "kernel $K: no /boot/vmlinuz-$K or modules"
mkdir -p "$WORK" || exit 1

t0=$(date +%s.%N)
if [ ! -s "$WORK/vmlinux-$K" ]; then
    python3 "$HERE/extract-vmlinux.py" "/boot/vmlinuz-$K" "$WORK/vmlinux-$K" ||
        skip "cannot unpack /boot/vmlinuz-$K"
fi
"$HERE/mkinitramfs.sh" "$K" "$WORK/initramfs.cpio.gz" "$HERE/init" "$SCRIPT" "$@" || exit 1
t1=$(date +%s.%N)

LOG=$WORK/console.log
echo "rdma VM: booting $K (accel ${MC_VM_ACCEL:-tcg}), test timeout ${TEST_TIMEOUT}s, log $LOG"
timeout -k 10 $((TEST_TIMEOUT + 60)) qemu-system-x86_64 \
    -accel "${MC_VM_ACCEL:-tcg}" -cpu max -smp 2 -m "${MC_VM_MEM:-1536}" \
    -display none -monitor none -serial stdio -no-reboot -net none \
    -kernel "$WORK/vmlinux-$K" -initrd "$WORK/initramfs.cpio.gz" \
    -append "console=ttyS0 panic=-1 quiet loglevel=3 mc.timeout=$TEST_TIMEOUT" \
    </dev/null 2>&1 | tr -d '\r' | tee "$LOG"
qrc=${PIPESTATUS[0]}
t2=$(date +%s.%N)
echo "rdma VM: image built in $(echo "$t0 $t1" | awk '{printf "%.1f", $2-$1}')s," \
    "VM ran $(echo "$t1 $t2" | awk '{printf "%.1f", $2-$1}')s (qemu exit $qrc)"

rc=$(sed -n 's/^MC-VM-RESULT rc=\([0-9]*\).*/\1/p' "$LOG" | tail -n 1)
if [ -z "$rc" ]; then
    [ "$qrc" -eq 124 ] && echo "rdma VM: QEMU killed after $((TEST_TIMEOUT + 60))s"
    echo "rdma VM: FAIL: the VM gave no result (see $LOG)"
    exit 1
fi
exit "$rc"
