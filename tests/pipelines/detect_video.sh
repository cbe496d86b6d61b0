#!/usr/bin/env bash
# Detection, tracking, counting and overlay end to end, against ground truth:
#   pipelines/gst/detect-video   --detector ball (the fixed-weight ball detector;
#                                detect_video_ssdlite.sh runs the default, ssdlite):
#                                90 frames of videotestsrc pattern=ball: one
#                                region per frame, labelled "ball", track 1
#                                throughout, its box within 2 pixels of the
#                                ball's bright pixels (measured here from the
#                                same frames), the two line crossings (in at
#                                frame 20, out at frame 81), 90 PNG files
#   pipelines/apps/read_regions  (C++, the region metas) and read_regions.py
#                                (Python, their JSON): the same lines
# Usage: detect_video.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/../sanitizer-preload.sh"  # LD_PRELOAD in a sanitizer build
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*"; exit 1; }
show() { sed 's/^/    /' "$1"; }

[ -f "$build/plugin/libgstjobflow.so" ] || fail "no plugin in $build/plugin"
[ -f "$build/pipelines/jobs/ball_detector.onnx" ] || fail "no ball_detector.onnx in $build/pipelines/jobs"
export GST_PLUGIN_PATH=$build/plugin
export GST_REGISTRY=$work/registry.bin JOBFLOW_GST_REGISTRY=$work/registry.bin
export LC_ALL=C
frames=90

"$src/pipelines/gst/detect-video" --detector ball --build "$build" --frames $frames --out "$work/frames" > "$work/detect.txt" 2>&1 ||
  { show "$work/detect.txt"; fail "detect-video failed"; }
pngs=$(find "$work/frames" -name 'frame-*.png' | wc -l)
[ "$pngs" -eq $frames ] || fail "detect-video wrote $pngs PNG files, expected $frames"
grep -qxF "$frames frames written to $work/frames ($frames with regions messages)" "$work/detect.txt" ||
  { show "$work/detect.txt"; fail "no totals line"; }
crossings=$(grep '^crossing' "$work/detect.txt" || true)
want=$'crossing at    0.667 s: track 1 in\ncrossing at    2.700 s: track 1 out'
[ "$crossings" = "$want" ] || { show "$work/detect.txt"; fail "crossings: got '$crossings', expected '$want'"; }

# The ball's bright pixels in the same frames, and the boxes detect-video printed.
gst-launch-1.0 -q videotestsrc pattern=ball num-buffers=$frames \
  ! video/x-raw,width=320,height=240,framerate=30/1 ! videoconvert ! video/x-raw,format=RGB \
  ! filesink "location=$work/frames.rgb" || fail "could not write the reference frames"
/usr/bin/python3 - "$work/frames.rgb" "$work/detect.txt" $frames <<'EOF' || fail "boxes do not match the ball"
import json, re, sys
import numpy as np
raw, log, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
video = np.fromfile(raw, dtype=np.uint8).reshape(n, 240, 320, 3).mean(axis=3)
lines = [l for l in open(log) if l.startswith('frame at')]
assert len(lines) == n, '%d frame lines, expected %d' % (len(lines), n)
worst = 0
for i, line in enumerate(lines):
    regions = json.loads(line.split(': ', 1)[1])['regions']
    assert len(regions) == 1, 'frame %d: %d regions: %s' % (i, len(regions), line)
    r = regions[0]
    assert r['label'] == 'ball' and r['track']['id'] == 1, 'frame %d: %s' % (i, line)
    ys, xs = np.nonzero(video[i] > 128)
    truth = (xs.min(), ys.min(), xs.max() + 1 - xs.min(), ys.max() + 1 - ys.min())
    got = (r['x'], r['y'], r['w'], r['h'])
    err = max(abs(a - b) for a, b in zip(got, truth))
    worst = max(worst, err)
    assert err <= 2, 'frame %d: box %s, the ball %s' % (i, got, truth)
print('%d frames: one ball, track 1, boxes within %d px of the ball' % (n, worst))
EOF

# The apps: the metas (C++) and their JSON (Python) give the same lines.
"$build/pipelines/apps/read_regions" --frames 20 > "$work/cpp.txt" 2>&1 ||
  { show "$work/cpp.txt"; fail "read_regions failed"; }
/usr/bin/python3 "$src/pipelines/apps/read_regions.py" --build "$build" --frames 20 > "$work/py.txt" 2>&1 ||
  { show "$work/py.txt"; fail "read_regions.py failed"; }
diff "$work/cpp.txt" "$work/py.txt" > "$work/diff.txt" || { show "$work/diff.txt"; fail "the apps disagree"; }
[ "$(grep -c '^frame [0-9]* at [0-9.]* s: ball #1 ([0-9.]*) at [0-9]*,[0-9]* [0-9]*x[0-9]*$' "$work/cpp.txt")" -eq 20 ] ||
  { show "$work/cpp.txt"; fail "read_regions: expected 20 'ball #1' lines"; }
tail -n1 "$work/cpp.txt" | grep -qx '20 frames' || { show "$work/cpp.txt"; fail "read_regions: no '20 frames' line"; }
echo "read_regions (C++) and read_regions.py: the same 20 regions"

# Usage errors end with one line and status 2.
out=$("$src/pipelines/gst/detect-video" --build "$build" --line 1,2 2>&1) && fail "--line 1,2 was accepted"
[ "$out" = "detect-video: --line needs X1,Y1,X2,Y2, got '1,2' (try --help)" ] || fail "unclear --line error: $out"
out=$("$src/pipelines/gst/detect-video" --build "$build" --detector yolo 2>&1) && fail "--detector yolo was accepted"
[ "$out" = "detect-video: --detector is ssdlite or ball, got 'yolo' (try --help)" ] || fail "unclear --detector error: $out"
echo "detect-video: ok"
