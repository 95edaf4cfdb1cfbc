#!/bin/sh
# Makes sure the Debian packages that build, run and test Mooncake FS are
# installed. As root it installs the missing ones with apt-get; otherwise it
# prints the exact command to run and fails. `deps.sh deb` also makes sure
# of the tools that build and check the Debian packages (make deb,
# make test-packaging).
set -eu
PKGS="scdoc build-essential pkg-config clang clang-format libclang-rt-14-dev fuse3 libfuse3-dev
liburing-dev libsodium-dev libcmocka-dev libjansson-dev python3 python3-dev python3-pytest python3-pytest-asyncio python3-pytest-xdist
python3-aiofiles python3-hypothesis python3-numpy python3-fsspec python3-pandas python3-pip python3-setuptools python3-wheel iperf3 memcached fio redis-server
python3-matplotlib python3-torch libibverbs-dev librdmacm-dev libmicrohttpd-dev libcurl4-openssl-dev
etcd-server etcd-client attr rsync libnuma1 faketime"
if [ "${1:-}" = deb ]; then
    PKGS="$PKGS debhelper dh-python dpkg-dev fakeroot lintian python3-all-dev"
fi
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages; run as root:" >&2
    echo "  apt-get update && apt-get install -y$missing" >&2
    exit 1
fi
echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q $missing >/dev/null
