#!/bin/bash
# mkinitramfs.sh KVER OUT.cpio.gz INIT SCRIPT [BINARY...]
#
# Builds the test VM's whole root file system as an initramfs: static
# busybox, iproute2 (ip, rdma), the verbs tools, the rxe provider that
# libibverbs dlopen()s, the kernel modules for Soft-RoCE, a dummy netdev and
# FUSE (in load order, from the host's modprobe for KVER), INIT as /init,
# SCRIPT as /test/run.sh, and each BINARY into /usr/local/bin, each program
# with the shared libraries ldd lists (a script has none).
set -euo pipefail
K=${1:?usage: mkinitramfs.sh KVER OUT INIT SCRIPT [BINARY...]}
OUT=${2:?out}
INIT=${3:?init}
SCRIPT=${4:?script}
shift 4
EXTRA=("$@")

R=$(mktemp -d "${TMPDIR:-/tmp}/mc-rdma-root.XXXXXX")
trap 'rm -rf "$R"' EXIT
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,proc,sys,dev,tmp,run,etc,root,mnt,test}

cp /bin/busybox "$R/bin/busybox"
for a in $("$R/bin/busybox" --list); do
    [ -e "$R/bin/$a" ] || ln -s busybox "$R/bin/$a"
done

# Copies program or library $1 to the same path under $R, with its libraries.
copy_with_libs() {
    local f=$1
    mkdir -p "$R$(dirname "$f")"
    cp -L "$f" "$R$f"
    { ldd "$f" 2>/dev/null || true; } | awk '/=> \//{print $3} /^\t\/lib/{print $1}' | while read -r l; do
        [ -e "$R$l" ] && continue
        mkdir -p "$R$(dirname "$l")"
        cp -L "$l" "$R$l"
    done
}

for b in /usr/sbin/ip /usr/bin/rdma /usr/bin/ibv_devinfo /usr/bin/ibv_devices /usr/bin/rping; do
    [ -x "$b" ] && copy_with_libs "$b"
done
for b in "${EXTRA[@]}"; do
    copy_with_libs "$(readlink -f "$b")"
    mv "$R$(readlink -f "$b")" "$R/usr/local/bin/$(basename "$b")"
done

# The rxe provider is dlopen()ed by libibverbs, found through its .driver file.
for p in /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so; do copy_with_libs "$p"; done
mkdir -p "$R/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$R/etc/libibverbs.d/"
# glibc dlopen()s libgcc_s for thread cancellation (librdmacm's threads).
copy_with_libs /lib/x86_64-linux-gnu/libgcc_s.so.1

# Kernel modules, each once, in dependency order.
TOPMODS=${TOPMODS:-"crc32_generic ib_uverbs rdma_rxe rdma_ucm dummy fuse"}
mkdir -p "$R/lib/modules/$K"
: >"$R/etc/modules.order"
for top in $TOPMODS; do
    modprobe -S "$K" --show-depends "$top" | awk '$1=="insmod"' | while read -r _ path opts; do
        grep -q "^$path\b" "$R/etc/modules.order" && continue
        mkdir -p "$R$(dirname "$path")"
        cp "$path" "$R$path"
        echo "$path $opts" >>"$R/etc/modules.order"
    done
done

cp "$INIT" "$R/init"
cp "$SCRIPT" "$R/test/run.sh"
chmod +x "$R/init" "$R/test/run.sh"
echo "root:x:0:0:root:/root:/bin/sh" >"$R/etc/passwd"
echo "root:x:0:" >"$R/etc/group"
printf '127.0.0.1 localhost\n' >"$R/etc/hosts"

(cd "$R" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "initramfs: $OUT $(du -h "$OUT" | cut -f1) ($(find "$R" -type f | wc -l) files)"
