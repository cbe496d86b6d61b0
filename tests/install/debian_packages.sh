#!/usr/bin/env bash
# The Debian packages (debian/): copies the source tree (the files git
# knows, tracked or not ignored; without git, everything but build folders)
# and runs `dpkg-buildpackage -us -uc -b` on it without the tests, then
# checks that the five packages exist and hold what they should
# (dpkg-deb -c), and that the library was built with TensorBoard event
# files (protoc, a build dependency). Skips (77) when dpkg-buildpackage or
# debhelper is missing.
# A full build on 2 cores: a few minutes.
# Usage: debian_packages.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
src=$1 work=$2/tests/install/debian-packages
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "skipped: $*"; exit 77; }
[ -z "${JOBFLOW_SANITIZER:-}" ] ||
  skip "a $JOBFLOW_SANITIZER build: packaging builds its own uninstrumented tree (the plain configuration runs it)"
command -v dpkg-buildpackage >/dev/null || skip "dpkg-buildpackage not found (apt-get install dpkg-dev)"
command -v dh >/dev/null || skip "debhelper not found (apt-get install debhelper)"
# Fails with the list of unmet build dependencies (scripts/setup installs them).
(cd "$src" && dpkg-checkbuilddeps -Pnocheck) || fail "build dependencies missing (above; scripts/setup installs them)"

# A fixed folder (not mktemp), so that ccache finds the same paths next time.
rm -rf "$work"
mkdir -p "$work/jobflow"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$src" && git ls-files -z --cached --others --exclude-standard |
     tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$work/jobflow"
else
  (cd "$src" && tar --exclude='./build*' --exclude='./obj-*' --exclude=./.git -cf - .) | tar -xf - -C "$work/jobflow"
fi
[[ -f $work/jobflow/debian/rules ]] || fail "no debian/rules in the copied tree"

# debhelper points HOME into the build tree, where ccache would start an
# empty cache every time: keep the caller's.
if command -v ccache >/dev/null && [[ -z ${CCACHE_DIR:-} ]]; then
  CCACHE_DIR=$(ccache -k cache_dir) && export CCACHE_DIR
fi

echo "== dpkg-buildpackage -us -uc -b (nocheck noopt: packaging is checked, not speed) in $work/jobflow"
start=$SECONDS
(cd "$work/jobflow" &&
   DEB_BUILD_OPTIONS="nocheck noopt parallel=2" DEB_BUILD_PROFILES=nocheck dpkg-buildpackage -us -uc -b) \
  >"$work/build.log" 2>&1 || { tail -60 "$work/build.log"; fail "dpkg-buildpackage failed (log: $work/build.log)"; }
echo "built in $((SECONDS - start)) s"

version=$(cd "$work/jobflow" && dpkg-parsechangelog -S Version)
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
plugins=$(pkg-config --variable=pluginsdir gstreamer-1.0)
# package: files it must hold (as dpkg-deb -c lists them, without the leading .)
declare -A expect=(
  [libjobflow0]="/usr/lib/$multiarch/libjobflow.so.0 /usr/lib/$multiarch/libjobflow-gst.so.0"
  [libjobflow-dev]="/usr/include/jobflow/jobflow.h /usr/include/jobflow/gst/jobsink.h
                    /usr/include/jobflow/gst/tensor_caps.h /usr/include/jobflow/gst/jobflow_analytics.h
                    /usr/lib/$multiarch/libjobflow.so
                    /usr/lib/$multiarch/libjobflow-gst.so /usr/lib/$multiarch/pkgconfig/jobflow.pc
                    /usr/lib/$multiarch/pkgconfig/jobflow-gst.pc /usr/share/doc/jobflow/installing.md"
  [gstreamer1.0-jobflow]="$plugins/libgstjobflow.so"
  [jobflow-tools]="/usr/bin/jobflow /usr/share/jobflow/jobs/lenet_predict.onnx /usr/libexec/jobflow/async_batch_job"
  [python3-jobflow]="/usr/lib/python3/dist-packages/jobflow/__init__.py /usr/lib/python3/dist-packages/jobflow/typing.py"
)
for pkg in "${!expect[@]}"; do
  deb=$work/${pkg}_${version}_$arch.deb
  [[ -f $deb ]] || fail "$pkg: $deb was not built (built: $(find "$work" -maxdepth 1 -name '*.deb' -printf '%f '))"
  contents=$(dpkg-deb -c "$deb" | awk '{print substr($6, 2)}')
  for f in ${expect[$pkg]}; do
    grep -qxF "$f" <<<"$contents" || fail "$pkg does not hold $f; it holds:"$'\n'"$contents"
  done
  echo "$pkg: $(wc -l <<<"$contents") entries, $(wc -w <<<"${expect[$pkg]}") checked"
done
# The packaged engine writes TensorBoard event files: built with protoc
# (protobuf-compiler in Build-Depends), not the stub a build without it gets
# (engine/meson.build), which only throws.
unpacked=$work/unpacked-libjobflow0
rm -rf "$unpacked"
dpkg-deb -x "$work/libjobflow0_${version}_$arch.deb" "$unpacked"
grep -q "TensorBoard event files disabled" "$work/build.log" &&
  fail "the package build configured without TensorBoard event files (protoc missing): $(grep -m1 'TensorBoard' "$work/build.log")"
symbols=$(nm -DC --defined-only "$unpacked/usr/lib/$multiarch/libjobflow.so.0")  # not piped into grep -q (SIGPIPE under pipefail)
grep -qF 'jobflow::tb::Event::' <<<"$symbols" ||
  fail "libjobflow0's libjobflow.so.0 has no TensorBoard Event code (built without protoc?)"
echo "libjobflow0: writes TensorBoard event files (jobflow::tb::Event)"
# The library package depends on OpenBLAS's OpenMP build (its rpath).
depends=$(dpkg-deb -f "$work/libjobflow0_${version}_$arch.deb" Depends)
grep -q "libopenblas0-openmp" <<<"$depends" || fail "libjobflow0 does not depend on libopenblas0-openmp: $depends"
echo "debian packages passed"
