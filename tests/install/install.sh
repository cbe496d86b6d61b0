#!/usr/bin/env bash
# `meson install` into a DESTDIR, then use the installed tree as a user
# would (docs/installing.md): the expected files are there, a program built
# out of tree with `pkg-config --cflags --libs jobflow` runs a job, a
# GStreamer application built with jobflow-gst.pc pulls tensors from the
# installed jobsink, the installed `jobflow` tool runs, `gst-inspect-1.0
# jobflow` lists every element from the installed plugin (private registry,
# no other plugin folders), and installed binaries load OpenBLAS's OpenMP
# build (OPENBLAS_DIR, empty when the build uses the default one).
#
# Usage: install.sh BUILD PREFIX LIBDIR BINDIR INCLUDEDIR DATADIR PLUGINDIR OPENBLAS_DIR TOOL(yes|no) PLUGIN(yes|no)
# (install folders as Meson's options: relative to PREFIX, or absolute)
set -euo pipefail
. "$(dirname "$0")/../sanitizer-preload.sh"  # LD_PRELOAD in a sanitizer build
build=$1 prefix=$2 libdir=$3 bindir=$4 includedir=$5 datadir=$6 plugindir=$7 openblas_dir=$8 tool=$9 plugin=${10}
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
unset LD_LIBRARY_PATH GST_PLUGIN_PATH GST_PLUGIN_PATH_1_0
export LC_ALL=C

work=$build/tests/install/install-test
rm -rf "$work"
mkdir -p "$work"
dest=$work/destdir
in_dest() { case $1 in /*) echo "$dest$1" ;; *) echo "$dest$prefix/$1" ;; esac; }
lib=$(in_dest "$libdir") bin=$(in_dest "$bindir") inc=$(in_dest "$includedir") share=$(in_dest "$datadir")
plugins=$(in_dest "$plugindir")

echo "== meson install --destdir $dest"
meson install -C "$build" --destdir "$dest" --no-rebuild >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "meson install failed"; }

echo "== installed files"
expect=("$lib/libjobflow.so" "$lib/libjobflow.so.0" "$lib/pkgconfig/jobflow.pc"
        "$inc/jobflow/jobflow.h" "$inc/jobflow/tensor.h" "$inc/jobflow/onnx.h" "$inc/jobflow/models/seeds.h"
        "$share/doc/jobflow/README.md" "$share/doc/jobflow/installing.md" "$share/doc/jobflow/user-guide/job-functions.md")
[[ $tool == yes ]] && expect+=("$bin/jobflow" "$share/jobflow/jobs/mlp_predict.onnx")
[[ $plugin == yes ]] && expect+=("$lib/libjobflow-gst.so" "$lib/libjobflow-gst.so.0" "$lib/pkgconfig/jobflow-gst.pc"
                                 "$inc/jobflow/gst/jobsink.h" "$inc/jobflow/gst/tensor_caps.h"
                                 "$inc/jobflow/gst/jobflow_meta.h" "$inc/jobflow/gst/jobflow_analytics.h"
                                 "$inc/jobflow/gst/jobflow_frame_meta.h" "$inc/jobflow/gst/jobflow_crop_meta.h"
                                 "$plugins/libgstjobflow.so")
for f in "${expect[@]}"; do
  [[ -e $f ]] || fail "not installed: ${f#"$dest"}"
done
[[ ! -e $share/doc/jobflow/meson.build ]] || fail "docs/meson.build was installed with the docs"
# Nothing outside the prefix (a plugin folder taken from GStreamer's own prefix would be).
outside=$(find "$dest" -type f -printf '/%P\n' | grep -v "^$prefix/" || true)
[[ -z $outside ]] || fail "installed outside the prefix $prefix: $outside"
echo "${#expect[@]} files checked"

# pkg-config on copies of the installed .pc files with the prefix moved into
# the DESTDIR (everything else in them is relative to the prefix).
mkdir -p "$work/pkgconfig"
for pc in "$lib"/pkgconfig/jobflow*.pc; do
  grep -qx "prefix=$prefix" "$pc" || fail "${pc#"$dest"} does not say prefix=$prefix: $(grep '^prefix=' "$pc")"
  sed "s|^prefix=.*|prefix=$dest$prefix|" "$pc" >"$work/pkgconfig/${pc##*/}"
done
export PKG_CONFIG_PATH=$work/pkgconfig
cflags=$(pkg-config --cflags jobflow) || fail "pkg-config --cflags jobflow failed"
libs=$(pkg-config --libs jobflow) || fail "pkg-config --libs jobflow failed"
echo "pkg-config jobflow: $cflags $libs"
[[ " $cflags " == *" -I$inc "* ]] || fail "pkg-config --cflags jobflow gives '$cflags', expected -I$inc"
[[ " $libs " == *" -L$lib "* && " $libs " == *" -ljobflow "* ]] ||
  fail "pkg-config --libs jobflow gives '$libs', expected -L$lib -ljobflow"

# check_resolves FILE LIBRARY DIR: the loader finds LIBRARY (a soname) for
# FILE in DIR. Installed OpenBLAS users must resolve it in OPENBLAS_DIR (the
# rpath); a wrong or missing rpath picks the default (pthread) build.
check_resolves() {
  local got
  got=$(ldd "$1" | awk -v l="$2" '$1 == l {print $3}')
  [[ -n $got && $(realpath "$(dirname "$got")") == $(realpath "$3") ]] ||
    fail "${1#"$dest"} resolves $2 to '${got:-nothing}', expected a file in ${3#"$dest"}"
}
check_openblas() {  # FILE
  [[ -z $openblas_dir ]] || check_resolves "$1" libopenblas.so.0 "$openblas_dir"
}
check_openblas "$lib/libjobflow.so.0"
# Outside /usr, installed programs find libjobflow through an rpath relative
# to themselves; in /usr the system path would find another copy: point at ours.
[[ $prefix == /usr ]] && export LD_LIBRARY_PATH=$lib

echo "== a program built out of tree with pkg-config jobflow"
read -ra cxx <<<"${CXX:-c++}"  # may be a command line (ccache c++)
# shellcheck disable=SC2086  # pkg-config output is a list of flags
"${cxx[@]}" -std=c++20 -o "$work/app" "$here/app.cpp" $cflags $libs "-Wl,-rpath,$lib" ||
  fail "the out-of-tree program does not compile against the installed headers"
out=$("$work/app") || fail "the out-of-tree program failed: $out"
echo "$out"
[[ $(tail -1 <<<"$out") == ok ]] || fail "the out-of-tree program did not print ok"
grep -qx "loaded $lib/libjobflow.so.0.*" <<<"$out" || fail "the program did not load libjobflow from $lib"
if [[ -n $openblas_dir ]]; then
  grep -q "^loaded $openblas_dir/libopenblas" <<<"$out" || fail "the program did not load OpenBLAS from $openblas_dir"
fi

if [[ $tool == yes ]]; then
  echo "== the installed jobflow tool"
  check_openblas "$bin/jobflow"
  check_resolves "$bin/jobflow" libjobflow.so.0 "$lib"
  out=$("$bin/jobflow" inspect "$share/jobflow/jobs/mlp_predict.onnx" 2>&1) || fail "jobflow inspect failed: $out"
  grep -q "mlp_predict" <<<"$out" || fail "jobflow inspect does not name the job: $out"
  echo "jobflow inspect: $(head -1 <<<"$out")"
fi

if [[ $plugin == yes ]]; then
  # Only the installed plugin folder, a private registry, no fork.
  export GST_PLUGIN_SYSTEM_PATH_1_0="" GST_PLUGIN_SYSTEM_PATH="" GST_PLUGIN_PATH_1_0=$plugins GST_PLUGIN_PATH=$plugins
  export GST_REGISTRY_1_0=$work/registry.bin GST_REGISTRY=$work/registry.bin GST_REGISTRY_FORK=no

  echo "== gst-inspect-1.0 jobflow (installed plugin)"
  check_resolves "$plugins/libgstjobflow.so" libjobflow-gst.so.0 "$lib"
  check_resolves "$plugins/libgstjobflow.so" libjobflow.so.0 "$lib"
  check_openblas "$plugins/libgstjobflow.so"
  out=$(gst-inspect-1.0 jobflow 2>&1) || fail "gst-inspect-1.0 jobflow failed: $out"
  grep -Eq "^  Filename +$plugins/libgstjobflow.so$" <<<"$out" ||
    fail "gst-inspect-1.0 did not load the installed plugin: $(grep Filename <<<"$out")"
  elements=(jobfunction jobsink jobdatasrc jobconvert jobdecode jobbatch jobunbatch jobmux jobdemux jobtrack joboverlay jobmetapublish jobcrop)
  for e in "${elements[@]}"; do
    grep -Eq "^  $e: " <<<"$out" || fail "gst-inspect-1.0 jobflow does not list $e:"$'\n'"$out"
  done
  grep -Eq "^  \+-- ${#elements[@]} elements$" <<<"$out" ||
    fail "gst-inspect-1.0 jobflow lists another number of elements than ${#elements[@]}:"$'\n'"$out"
  echo "${#elements[@]} elements: ${elements[*]}"

  echo "== a GStreamer application built out of tree with pkg-config jobflow-gst"
  gst_flags=$(pkg-config --cflags --libs jobflow-gst gstreamer-app-1.0) || fail "pkg-config jobflow-gst failed"
  # shellcheck disable=SC2086
  "${cxx[@]}" -std=c++20 -o "$work/app_gst" "$here/app_gst.cpp" $gst_flags "-Wl,-rpath,$lib" ||
    fail "the GStreamer application does not compile against the installed headers"
  out=$("$work/app_gst" 2>&1) || fail "the GStreamer application failed: $out"
  [[ $(tail -1 <<<"$out") == ok ]] || fail "the GStreamer application did not print ok: $out"
  echo "$out"
fi
echo "install test passed"
