#!/usr/bin/env bash
# Runs the seeds' four example programs end to end on Fashion-MNIST for one
# epoch and checks what they print: loss lines, a saved checkpoint in
# OneFlow's layout, and a test accuracy above a floor that one epoch reaches
# (full training is measured in docs/performance.md).
# Usage: seed_examples.sh BUILD_PIPELINES_DIR {lenet|mlp|errors}
set -euo pipefail
bin=$1
what=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
data=/usr/share/datasets/fashion-mnist

fail() { echo "FAIL: $*"; exit 1; }
accuracy_of() { sed -n 's/^accuracy: \([0-9.]*\)%$/\1/p' "$1"; }
at_least() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }

case "$what" in
lenet|mlp)
  [ -d "$data" ] || { echo "SKIP: $data missing (apt-get install dataset-fashion-mnist)"; exit 77; }
  if [ "$what" = lenet ] && [ -n "${JOBFLOW_SANITIZER:-}" ]; then
    echo "skipped: a $JOBFLOW_SANITIZER build: an epoch of LeNet is a speed test (mlp runs the same code paths)"
    exit 77
  fi
  if [ "$what" = lenet ]; then
    train=synchronize_single_job; eval=synchronize_batch_job; floor=84.0; var=conv1-weight
  else
    train=async_single_job; eval=async_batch_job; floor=80.0; var=hidden-weight
  fi
  "$bin/$train" --epochs 1 --model-dir "$work/model" > "$work/train.txt"
  lines=$(grep -cE '^[0-9.e+-]+$' "$work/train.txt" || true)
  [ "$lines" -eq 30 ] || fail "expected 30 loss lines (600 steps / 20), got $lines"
  first=$(grep -E '^[0-9.e+-]+$' "$work/train.txt" | head -1)
  last=$(grep -E '^[0-9.e+-]+$' "$work/train.txt" | tail -1)
  at_least "$first" "$last" || fail "loss did not decrease: first $first, last $last"
  [ -f "$work/model/snapshot_done" ] || fail "no snapshot_done in the checkpoint"
  grep -q "data_type: kFloat" "$work/model/$var/meta" || fail "meta of $var is not OneFlow's"
  "$bin/$eval" --model-dir "$work/model" > "$work/eval.txt"
  acc=$(accuracy_of "$work/eval.txt")
  [ -n "$acc" ] || fail "no 'accuracy: N%' line: $(cat "$work/eval.txt")"
  at_least "$acc" "$floor" || fail "accuracy $acc% below $floor% after one epoch"
  # OneFlow 0.2/0.3 wrote no `meta`: the same checkpoint without them
  # evaluates the same (the job defines each variable's shape and dtype).
  cp -r "$work/model" "$work/model_no_meta"
  find "$work/model_no_meta" -name meta -delete
  "$bin/$eval" --model-dir "$work/model_no_meta" > "$work/eval_no_meta.txt"
  acc_no_meta=$(accuracy_of "$work/eval_no_meta.txt")
  [ "$acc_no_meta" = "$acc" ] || fail "without meta files: accuracy '$acc_no_meta', with them $acc"
  echo "$what: loss $first -> $last, accuracy $acc% after one epoch (the same without meta files)"
  ;;
errors)
  out=$("$bin/synchronize_batch_job" --model-dir "$work/none" 2>&1) && fail "loading a missing checkpoint succeeded"
  echo "$out" | grep -q "CheckPoint.load.*\(does not exist\|not a complete checkpoint\)" || fail "unclear error for a missing checkpoint: $out"
  out=$("$bin/async_single_job" --epochs 1 --data "$work/nodata" 2>&1) && fail "training without data succeeded"
  echo "$out" | grep -q "apt-get install dataset-fashion-mnist" || fail "missing-data error does not say how to install: $out"
  set +e
  "$bin/async_batch_job" --bogus >/dev/null 2>&1
  [ $? -eq 2 ] || fail "an unknown option should exit with status 2"
  set -e
  "$bin/synchronize_single_job" --help | grep -q -- "--epochs" || fail "--help does not list --epochs"
  out=$("$bin/synchronize_single_job" --precision fp16 2>&1) && fail "--precision fp16 was accepted"
  echo "$out" | grep -q "precision must be fp32 or bf16, got 'fp16'" || fail "unclear --precision error: $out"
  echo "errors: all clear"
  ;;
*) fail "unknown case $what" ;;
esac
