#!/bin/sh
# packaging/build-deb.sh OUTDIR: builds the Debian packages of this tree
# into OUTDIR (.deb, .changes, .buildinfo). The tree keeps its layout, so
# the sources (the files git knows, committed or not) are staged in
# OUTDIR/src/mooncake-VERSION with packaging/debian as debian/, and
# dpkg-buildpackage builds there, binary packages only, unsigned. The
# environment is Debian's: PATH of the system's directories only (so
# pybuild finds /usr/bin/python3), DEB_BUILD_OPTIONS parallel=2 unless set.
set -eu
out=${1:?usage: build-deb.sh OUTDIR}
top=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n 's/^#define MC_VERSION_STRING "\(.*\)"/\1/p' "$top/core/include/mooncake/mooncake.h")
changelog=$(sed -n '1s/^mooncake (\([^)]*\)).*/\1/p' "$top/packaging/debian/changelog")
if [ "$version" != "$changelog" ]; then
    echo "build-deb: MC_VERSION_STRING is $version but packaging/debian/changelog says $changelog" >&2
    exit 1
fi
rm -rf "$out"
stage="$out/src/mooncake-$version"
mkdir -p "$stage"
if git -C "$top" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # Tracked and new files (not the ignored build trees); none deleted.
    (cd "$top" && git ls-files -z -co --exclude-standard | xargs -0 sh -c \
        'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
        tar --null -T - -cf -) | tar -xf - -C "$stage"
else
    (cd "$top" && tar --exclude='./build*' --exclude=./mnt --exclude='*.so' \
        --exclude=__pycache__ --exclude=.pytest_cache --exclude='*.egg-info' -cf - .) |
        tar -xf - -C "$stage"
fi
cp -a "$top/packaging/debian" "$stage/debian"
echo "build-deb: building in $stage"
(cd "$stage" &&
    env PATH=/usr/sbin:/usr/bin:/sbin:/bin DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS:-parallel=2}" \
        dpkg-buildpackage -b -us -uc) >"$out/build.log" 2>&1 || {
    tail -40 "$out/build.log" >&2
    echo "build-deb: dpkg-buildpackage failed; the whole log: $out/build.log" >&2
    exit 1
}
mv "$out"/src/*.deb "$out"/src/*.changes "$out"/src/*.buildinfo "$out"/
echo "build-deb: $(cd "$out" && ls *.deb | tr '\n' ' ')"
