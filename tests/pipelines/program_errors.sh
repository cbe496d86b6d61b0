#!/usr/bin/env bash
# Every program the project ships or benchmarks with turns an error into one
# line on stderr ("<program>: <what>", after any notices) and status 1 (2 for
# a bad command line, with its usage), never an abort ("terminate called
# ...", status 134).
# Usage: program_errors.sh BUILD_DIR
set -uo pipefail
. "$(dirname "$0")/../sanitizer-preload.sh"  # LD_PRELOAD in a sanitizer build
build=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# expect_error NAME WANT_STATUS CMD...: runs CMD, checks status and stderr.
expect_error() {
  local name=$1 want=$2
  shift 2
  if [ ! -x "$1" ]; then
    echo "skip $name: $1 not built"
    return
  fi
  GST_PLUGIN_PATH="$build/plugin" GST_REGISTRY="$work/registry.bin" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  local prog errors last
  prog=$(basename "$1")
  errors=$(grep -c "^$prog: " "$work/err")
  last=$(grep . "$work/err" | tail -1)
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL $name: status $rc, expected $want; stderr: $(cat "$work/err")"; failures=$((failures + 1))
  elif grep -q "terminate called\|Aborted\|core dumped" "$work/err"; then
    echo "FAIL $name: aborted: $(cat "$work/err")"; failures=$((failures + 1))
  elif [ "$want" -eq 2 ] && [ -z "$last" ]; then
    echo "FAIL $name: a bad command line printed nothing"; failures=$((failures + 1))
  elif [ "$want" -ne 2 ] && { [ "$errors" -ne 1 ] || [ "${last#"$prog: "}" = "$last" ]; }; then
    echo "FAIL $name: expected the error as one last line '$prog: ...' on stderr, got: $(cat "$work/err")"
    failures=$((failures + 1))
  else
    echo "ok   $name: $last"
  fi
}

expect_error "jobflow run, missing file" 1 "$build/engine/jobflow" run "$work/missing.onnx"
expect_error "jobflow inspect, not ONNX" 1 "$build/engine/jobflow" inspect /etc/hostname
JOBFLOW_DATA="$work/nodata" expect_error "bench_engine, missing data" 1 "$build/tests/bench/bench_engine" --quick
expect_error "bench_pipeline, missing job files" 1 "$build/tests/bench/bench_pipeline" --jobs "$work/nojobs" \
  --plugin "$build/plugin" --quick
expect_error "bench_pipeline, bad option" 2 "$build/tests/bench/bench_pipeline" --bogus
expect_error "pull_results, missing checkpoint" 1 "$build/pipelines/apps/pull_results" --checkpoint "$work/none" \
  --jobs "$build/pipelines/jobs"
expect_error "new_result, missing job file" 1 "$build/pipelines/apps/new_result" --jobs "$work/nojobs"
expect_error "read_regions, missing job file" 1 "$build/pipelines/apps/read_regions" --jobs "$work/nojobs"
expect_error "read_regions, bad option" 2 "$build/pipelines/apps/read_regions" --frames 0
expect_error "ball_detector, bad size" 1 "$build/pipelines/jobs/ball_detector" "$work/b.onnx" 7
expect_error "ball_detector, bad batch" 1 "$build/pipelines/jobs/ball_detector" "$work/b.onnx" 320 0
expect_error "tone_classifier, bad window" 1 "$build/pipelines/jobs/tone_classifier" "$work/t.onnx" 8
expect_error "synchronize_batch_job, missing checkpoint" 1 "$build/pipelines/seeds/synchronize_batch_job" \
  --model-dir "$work/none"

[ "$failures" -eq 0 ] || { echo "$failures program(s) failed badly"; exit 1; }
echo "every program failed cleanly"
