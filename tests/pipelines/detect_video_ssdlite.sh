#!/usr/bin/env bash
# pipelines/gst/detect-video with torchvision's ssdlite320_mobilenet_v3_large
# (the default detector), end to end: jobconvert (640x360 letterboxed into
# 320x320) -> jobfunction (the model as torchvision exports it, NMS and all)
# -> jobdecode mode=boxes scheme=detections -> jobtrack (line counting) ->
# joboverlay -> PNG files.
#
# There are no pretrained weights offline (Debian's torchvision, nothing
# downloaded): the model has zoo.py's seeded random weights, so what it
# finds means nothing, and nothing here pretends it does. What is known,
# and checked:
#   1. the boxes are the model's: every frame's regions (labels, boxes,
#      scores) are the best 20 (--max-detections) of what ONNX Runtime
#      gives for the very input tensors of the pipeline (saved by
#      --save-input) above the threshold, mapped from model pixels to the
#      frame by the letterbox computed here (scale 0.5, 70 rows of padding
#      on top; not read from the pipeline), clamped to the frame and
#      rounded: labels equal, boxes within a pixel, scores within 1e-3;
#   2. the same frame gives the same regions with the same track ids: on a
#      still scene (pattern colors, every frame alike; --threads 1, so that
#      every call sums in the same order) every frame has exactly the first
#      frame's regions, each keeps one track id throughout, ids distinct,
#      and no line is crossed;
#   3. every frame is written as PNG, and each has its regions message.
# Scores within 1e-3 of the threshold or of the 20th score may fall on
# either side (the engine and ONNX Runtime round differently, and random
# weights score many boxes alike, near 1): which of those are kept is not
# checked, only that each region kept is one of ONNX Runtime's.
# The model is exported once per build folder (BUILD/tests/models/cache,
# shared with the model gallery; a minute or two, far more on a loaded
# machine). Skipped (77) without BUILD/venv's onnxruntime and torchvision.
# Usage: detect_video_ssdlite.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/../sanitizer-preload.sh"  # LD_PRELOAD in a sanitizer build
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*"; exit 1; }
show() { sed 's/^/    /' "$1"; }

[ -z "${JOBFLOW_SANITIZER:-}" ] || { echo "SKIP: a sanitizer build (the plain configuration runs the model)"; exit 77; }
python=$build/venv/bin/python3
"$python" -c 'import onnxruntime, torchvision' 2>/dev/null ||
  { echo "SKIP: $python with onnxruntime and torchvision is needed (scripts/setup $build; apt-get install python3-torchvision)"; exit 77; }
[ -f "$build/plugin/libgstjobflow.so" ] || fail "no plugin in $build/plugin"
export GST_PLUGIN_PATH=$build/plugin
export GST_REGISTRY=$work/registry.bin JOBFLOW_GST_REGISTRY=$work/registry.bin
export LC_ALL=C
model=$build/tests/models/cache/ssdlite320_mobilenet_v3_large_b1.onnx
threshold=0.5 keep=20  # detect-video's defaults for ssdlite

# 1. The ball pattern: the regions against ONNX Runtime on the same inputs.
frames=8
"$src/pipelines/gst/detect-video" --build "$build" --frames $frames \
  --save-input "$work/input.f32" --out "$work/ball" > "$work/ball.txt" 2> "$work/ball.err" ||
  { show "$work/ball.txt"; show "$work/ball.err"; fail "detect-video (ssdlite, pattern ball) failed"; }
[ -f "$model" ] || fail "detect-video did not export $model"
pngs=$(find "$work/ball" -name 'frame-*.png' | wc -l)
[ "$pngs" -eq $frames ] || fail "detect-video wrote $pngs PNG files, expected $frames"
grep -qxF "$frames frames written to $work/ball ($frames with regions messages)" "$work/ball.txt" ||
  { show "$work/ball.txt"; fail "no totals line"; }
"$python" - "$model" "$work/input.f32" "$work/ball.txt" $frames $threshold $keep "$src/pipelines/gst/coco91.labels" <<'EOF' ||
import json, sys
import numpy as np
import onnxruntime as ort
model, raw, log, labels_file = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[7]
n, thr, keep = int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
labels = open(labels_file).read().splitlines()
assert len(labels) == 91, labels_file
inputs = np.fromfile(raw, dtype=np.float32)
assert inputs.size == n * 3 * 320 * 320, '%d input values, expected %d frames of (3, 320, 320)' % (inputs.size, n)
inputs = inputs.reshape(n, 3, 320, 320)
# jobconvert's letterbox of 640x360 into 320x320: scale 0.5, the picture in
# rows 70..249, padding 0 above and below
assert np.all(inputs[:, :, :70] == 0) and np.all(inputs[:, :, 250:] == 0), 'no letterbox padding where expected'
assert inputs[:, :, 70:250].max() > 0.9, 'the ball is not in the picture rows'
scale, pad_x, pad_y = 0.5, 0.0, 70.0
lines = [l for l in open(log) if l.startswith('frame at')]
assert len(lines) == n, '%d frame lines, expected %d' % (len(lines), n)
sess = ort.InferenceSession(model, providers=['CPUExecutionProvider'])
eps = 1e-3
total = 0
for i, line in enumerate(lines):
    got = json.loads(line.split(': ', 1)[1])['regions']
    boxes, scores, classes = sess.run(None, {'images': inputs[i]})  # best first
    ranked = []  # at or above the threshold, best first, in frame pixels (jobdecode keeps its best, then
    for b, s, c in zip(boxes, scores, classes):  # drops those that clamping to the frame leaves empty)
        if s < thr - eps:
            continue
        x1, y1, x2, y2 = ((b[0] - pad_x) / scale, (b[1] - pad_y) / scale, (b[2] - pad_x) / scale, (b[3] - pad_y) / scale)
        x1, x2 = np.clip([x1, x2], 0, 640)
        y1, y2 = np.clip([y1, y2], 0, 360)
        x, y = round(float(x1)), round(float(y1))
        ranked.append(dict(label=labels[int(c)], x=x, y=y, w=round(float(x2)) - x, h=round(float(y2)) - y,
                           confidence=float(s)))
    last = ranked[keep - 1]['confidence'] if len(ranked) >= keep else thr - eps  # the last one kept
    want = [q for q in ranked if q['w'] > 0 and q['h'] > 0]
    assert len(got) <= keep, 'frame %d: %d regions, more than %d' % (i, len(got), keep)
    def same(r, q):
        return (r['label'] == q['label'] and abs(r['confidence'] - q['confidence']) <= eps and
                all(abs(r[k] - q[k]) <= 1 for k in 'xywh'))
    for r in got:  # every region is one of the model's best
        assert any(same(r, q) for q in want if q['confidence'] >= last - eps), \
            'frame %d: region %s is not among ONNX Runtime\'s best %d' % (i, r, keep)
    for q in want:  # the model's clearly best are regions
        assert q['confidence'] <= last + eps or q['confidence'] < thr + eps or any(same(r, q) for r in got), \
            'frame %d: ONNX Runtime\'s %s is missing' % (i, q)
    total += len(got)
assert total >= n, 'only %d regions in %d frames: a test that sees nothing checks nothing' % (total, n)
print('%d frames: %d regions, each one of the best %d ONNX Runtime detections scoring >= %g, mapped to the 640x360 '
      'frame' % (n, total, keep, thr))
EOF
  { show "$work/ball.txt"; fail "the pipeline's regions are not the model's"; }

# 2. A still scene: the same regions in every frame, each with one track id.
frames=6
"$src/pipelines/gst/detect-video" --build "$build" --frames $frames --pattern colors --threads 1 \
  --out "$work/still" > "$work/still.txt" 2> "$work/still.err" ||
  { show "$work/still.txt"; show "$work/still.err"; fail "detect-video (ssdlite, pattern colors) failed"; }
pngs=$(find "$work/still" -name 'frame-*.png' | wc -l)
[ "$pngs" -eq $frames ] || fail "detect-video wrote $pngs PNG files, expected $frames"
! grep -q '^crossing' "$work/still.txt" || { show "$work/still.txt"; fail "a still scene crossed the line"; }
/usr/bin/python3 - "$work/still.txt" $frames $keep <<'EOF' || { show "$work/still.txt"; fail "the still scene's regions or tracks are not stable"; }
import json, sys
log, n, keep = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
frames = [json.loads(l.split(': ', 1)[1])['regions'] for l in open(log) if l.startswith('frame at')]
assert len(frames) == n, '%d frame lines, expected %d' % (len(frames), n)
region = lambda r: {k: v for k, v in r.items() if k != 'track'}
first = [region(r) for r in frames[0]]
assert len(first) == keep, 'the first frame has %d regions, expected %d' % (len(first), keep)
ids = [r.get('track', {}).get('id') for r in frames[0]]
assert None not in ids and len(set(ids)) == keep, 'the first frame\'s track ids: %s' % ids
for i, regions in enumerate(frames[1:], 1):
    assert [region(r) for r in regions] == first, 'frame %d has other regions than frame 0:\n  %s\n  %s' % (
        i, [region(r) for r in regions], first)
    got = [r.get('track', {}).get('id') for r in regions]
    assert got == ids, 'frame %d: track ids %s, in frame 0 %s' % (i, got, ids)
print('%d still frames: the same %d regions in each, each with its own track id throughout' % (n, keep))
EOF
echo "detect-video (ssdlite): ok"
