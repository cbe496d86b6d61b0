#!/usr/bin/env bash
# The -Donnx=disabled configuration (no libonnx-dev/protobuf): configures
# with the GStreamer plugin and the jobflow tool left out, saying why in the
# summary, and the engine library builds and links without the ONNX sources.
# Only the engine is built (the rest is covered by the full build).
# Usage: onnx_disabled.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
src=$1 build=$2/tests/install/onnx-disabled
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -z "${JOBFLOW_SANITIZER:-}" ] || { echo "skipped: a $JOBFLOW_SANITIZER build: this configuration check builds" \
  "its own uninstrumented engine (the plain configuration runs it)"; exit 77; }
rm -rf "$build"
# -O0 without debug info: what is checked is that it configures, compiles and
# links; unoptimized it compiles in about a third of the release time.
out=$(meson setup "$build" "$src" -Donnx=disabled -Dcuda=disabled -Dtests=disabled -Doptimization=0 -Ddebug=false 2>&1) ||
  { echo "$out"; fail "meson setup -Donnx=disabled failed"; }
echo "$out" | sed -n '/^  Jobflow$/,/^$/p'
grep -Eq "^ +ONNX job files *: *(False|NO)" <<<"$out" || fail "the summary does not say ONNX job files: NO"
grep -Eq "^ +GStreamer plugin *: NO \(needs ONNX job files" <<<"$out" ||
  fail "the summary does not say the GStreamer plugin is off for lack of ONNX job files"
# "type name" per target, and the sources they compile.
targets=$(meson introspect "$build" --targets | /usr/bin/python3 -c '
import json, sys
for t in json.load(sys.stdin):
    print(t["type"], t["name"], *[s for src in t["target_sources"] for s in src.get("sources", [])])')
grep -q "^shared library jobflow " <<<"$targets" || fail "no engine library configured: $targets"
for t in "shared module gstjobflow" "shared library jobflow-gst" "executable jobflow"; do
  grep -q "^$t " <<<"$targets" && fail "$t is configured without ONNX job files"
done
grep -q "/src/onnx/" <<<"$targets" && fail "ONNX sources are compiled without ONNX job files"
echo "== building the engine without ONNX"
meson compile -C "$build" engine/jobflow:shared_library >"$build/compile.log" 2>&1 ||
  { tail -40 "$build/compile.log"; fail "the engine does not build with -Donnx=disabled"; }
echo "onnx-disabled configuration passed"
