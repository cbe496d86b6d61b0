#!/usr/bin/env bash
# The GStreamer pipelines end to end, with the plugin from the build tree and
# a private registry (no GPU, no network):
#   pipelines/gst/train-lenet    a quick training run: loss lines, a checkpoint
#   pipelines/gst/eval-lenet     its test accuracy, above what a quick run reaches
#   pipelines/gst/plot-curves    the PNG of both runs' curves (--summary-dir event
#                                files; needs BUILD/venv, else skipped with a note)
#   pipelines/gst/classify-video 30 test-pattern frames (and a short clip):
#                                PNG files and a jobflow-labels message per frame
#   pipelines/apps/*             the C++ and Python apps, synchronous and
#                                asynchronous: the accuracy eval-lenet printed,
#                                to the last digit
# Usage: gst_pipelines.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/../sanitizer-preload.sh"  # LD_PRELOAD in a sanitizer build
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
gst=$src/pipelines/gst
apps=$src/pipelines/apps
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
data=/usr/share/datasets/fashion-mnist

fail() { echo "FAIL: $*"; exit 1; }
show() { sed 's/^/    /' "$1"; }
greater() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }

[ -d "$data" ] || { echo "SKIP: $data missing (apt-get install dataset-fashion-mnist)"; exit 77; }
[ -f "$build/plugin/libgstjobflow.so" ] || fail "no plugin in $build/plugin"
export GST_PLUGIN_PATH=$build/plugin
export GST_REGISTRY=$work/registry.bin JOBFLOW_GST_REGISTRY=$work/registry.bin
export LC_ALL=C

# (a) train: 60 steps of 100 images, the loss every 20 steps.
ck=$work/ck
"$gst/train-lenet" --build "$build" --epochs 1 --num-samples 6000 --checkpoint "$ck" --summary-dir "$work/runs/train" \
  > "$work/train.txt" 2>&1 ||
  { show "$work/train.txt"; fail "train-lenet failed"; }
losses=$(grep -cE '^step [0-9]+  loss [0-9]+\.[0-9]{4}  [0-9]+ images/s$' "$work/train.txt" || true)
[ "$losses" -eq 3 ] || { show "$work/train.txt"; fail "expected 3 loss lines (steps 20, 40, 60), got $losses"; }
first=$(grep -m1 '^step 20 ' "$work/train.txt" | awk '{ print $4 }')
last=$(grep -m1 '^step 60 ' "$work/train.txt" | awk '{ print $4 }')
greater "$first" "$last" || fail "loss did not decrease: step 20 $first, step 60 $last"
grep -qxF "checkpoint saved to $ck at step 60" "$work/train.txt" ||
  { show "$work/train.txt"; fail "no 'checkpoint saved to $ck at step 60' line"; }
[ -f "$ck/snapshot_done" ] || fail "no snapshot_done in the checkpoint"
grep -q "data_type: kFloat" "$ck/conv1-weight/meta" || fail "meta of conv1-weight is not OneFlow's"
out=$("$gst/train-lenet" --build "$build" --jobs "$work/nojobs" --checkpoint "$work/ck2" 2>&1) &&
  fail "train-lenet without job files succeeded"
echo "$out" | grep -q "no lenet_train.onnx" || fail "unclear error without job files: $out"
echo "train-lenet: loss $first -> $last, checkpoint saved"

# (b) evaluate it on the whole test set.
"$gst/eval-lenet" --build "$build" --checkpoint "$ck" --summary-dir "$work/runs/eval" > "$work/eval.txt" 2>&1 ||
  { show "$work/eval.txt"; fail "eval-lenet failed"; }
line=$(grep -E '^test accuracy: [01]\.[0-9]{4} \([0-9]+/10000\)$' "$work/eval.txt" || true)
[ -n "$line" ] || { show "$work/eval.txt"; fail "no 'test accuracy: 0.xxxx (N/10000)' line"; }
acc=$(echo "$line" | awk '{ print $3 }')
greater "$acc" 0.5 || fail "accuracy $acc not above 0.5 after 60 steps"
"$gst/eval-lenet" --build "$build" --checkpoint "$work/none" > "$work/none.txt" 2>&1 &&
  fail "eval-lenet of a missing checkpoint succeeded"
mkdir "$work/empty"
"$gst/eval-lenet" --build "$build" --checkpoint "$work/empty" > "$work/empty.txt" 2>&1 &&
  fail "eval-lenet of an empty checkpoint folder succeeded"
grep -q "not a complete checkpoint" "$work/empty.txt" || { show "$work/empty.txt"; fail "unclear error for an empty checkpoint"; }
echo "eval-lenet: $line"
ls "$work"/runs/train/events.out.tfevents.* "$work"/runs/eval/events.out.tfevents.* >/dev/null ||
  fail "--summary-dir wrote no event files"

# (b') the curves of (a) and (b) as a PNG (tests/summary checks the events' values).
if [ -x "$build/venv/bin/python3" ]; then
  "$gst/plot-curves" --build "$build" --train "$work/runs/train" --eval "$work/runs/eval" --out "$work/curves.png" \
    > "$work/plot.txt" 2>&1 || { show "$work/plot.txt"; fail "plot-curves failed"; }
  grep -qxF "training curves: $work/curves.png" "$work/plot.txt" || { show "$work/plot.txt"; fail "plot-curves: no path line"; }
  [ "$(head -c 8 "$work/curves.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "curves.png is not a PNG"
  echo "plot-curves: $(wc -c < "$work/curves.png") bytes of PNG"
else
  echo "plot-curves: not run (no $build/venv: scripts/setup makes it)"
fi

# (c) classify 30 frames of the test pattern.
"$gst/classify-video" --build "$build" --checkpoint "$ck" --frames 30 --out "$work/frames" > "$work/video.txt" 2>&1 ||
  { show "$work/video.txt"; fail "classify-video failed"; }
pngs=$(find "$work/frames" -name 'frame-*.png' -size +1k | wc -l)
[ "$pngs" -eq 30 ] || fail "expected 30 PNG frames, got $pngs"
[ "$(head -c 8 "$work/frames/frame-00000.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
  fail "frame-00000.png is not a PNG"
labels=$(grep -cE '^frame at +[0-9]+\.[0-9]{3} s: .+ \([01]\.[0-9]{2}\)$' "$work/video.txt" || true)
[ "$labels" -eq 30 ] || { show "$work/video.txt"; fail "expected 30 jobflow-labels lines, got $labels"; }
names=$(sed -n 's/^frame at .* s: \(.*\) ([01]\.[0-9]*)$/\1/p' "$work/video.txt" | sort -u)
while IFS= read -r name; do
  grep -qxF "$name" "$gst/fashion-mnist.labels" || fail "label '$name' is not a Fashion-MNIST class"
done <<< "$names"
grep -qxF "30 frames written to $work/frames (30 labelled)" "$work/video.txt" || { show "$work/video.txt"; fail "no totals line"; }
# a file source (decodebin), when the encoder to write one is there
if gst-inspect-1.0 jpegenc >/dev/null 2>&1 && gst-inspect-1.0 avimux >/dev/null 2>&1; then
  gst-launch-1.0 -q videotestsrc num-buffers=12 pattern=snow ! video/x-raw,width=160,height=120,framerate=10/1 \
    ! jpegenc ! avimux ! filesink location="$work/clip.avi" || fail "could not write a test clip"
  "$gst/classify-video" --build "$build" --checkpoint "$ck" --file "$work/clip.avi" --out "$work/clip" --quiet \
    > "$work/clip.txt" 2>&1 || { show "$work/clip.txt"; fail "classify-video --file failed"; }
  grep -qxF "12 frames written to $work/clip (12 labelled)" "$work/clip.txt" || { show "$work/clip.txt"; fail "--file: not 12 labelled frames"; }
fi
echo "classify-video: 30 frames labelled and written"

# The apps: the same accuracy as eval-lenet, synchronous and asynchronous.
/usr/bin/python3 -c "import gi, numpy; gi.require_version('Gst', '1.0')" 2>/dev/null ||
  fail "the Python apps need python3-gi, python3-gst-1.0 and python3-numpy (scripts/setup installs them)"
for app in "$build/pipelines/apps/pull_results" "$build/pipelines/apps/new_result" \
           "$apps/pull_results.py" "$apps/new_result.py"; do
  name=$(basename "$app")
  [ -x "$app" ] || fail "$app not built"
  args=(--checkpoint "$ck" --jobs "$build/pipelines/jobs")
  case $app in *.py) args+=(--build "$build") ;; esac
  "$app" "${args[@]}" > "$work/$name.txt" 2>&1 || { show "$work/$name.txt"; fail "$name failed"; }
  got=$(grep '^test accuracy: ' "$work/$name.txt" || true)
  [ "$got" = "$line" ] || { show "$work/$name.txt"; fail "$name printed '$got', eval-lenet '$line'"; }
  "$app" "${args[@]}" --num-samples 1000 > "$work/$name.1000.txt" 2>&1 || { show "$work/$name.1000.txt"; fail "$name --num-samples 1000 failed"; }
  grep -qE '^test accuracy: [01]\.[0-9]{4} \([0-9]+/1000\)$' "$work/$name.1000.txt" || { show "$work/$name.1000.txt"; fail "$name --num-samples 1000"; }
  bad=(--checkpoint "$work/none" "${args[@]:2}")
  "$app" "${bad[@]}" > "$work/$name.none.txt" 2>&1 && fail "$name with a missing checkpoint succeeded"
  grep -q 'checkpoint=.*no such folder' "$work/$name.none.txt" || { show "$work/$name.none.txt"; fail "$name: unclear error for a missing checkpoint"; }
  echo "$name: $got"
done
# sync and async agree with each other on a subset too
subset=$(sort -u "$work"/*.1000.txt | grep -c '^test accuracy' || true)
[ "$subset" -eq 1 ] || fail "the apps disagree on 1000 samples: $(cat "$work"/*.1000.txt)"
echo "all pipelines pass"
