#!/usr/bin/env bash
# Text in video frames read back exactly, end to end in one pipeline, with
# PP-OCRv4's real weights (BUILD/models/rapidocr, from scripts/setup):
#   pipelines/gst/read-text          the demo: 40 frames of three texts rendered
#                                    by textoverlay (Sans Bold 36 at the top left,
#                                    Serif 26 in the centre, Monospace 18 at the
#                                    bottom right), changing every second: 12
#                                    strings, each read exactly in all of its 10
#                                    frames, in reading order, in its part of the
#                                    frame; printed once each when it appears;
#                                    40 PNG frames with the overlay (a sanitizer
#                                    build: the first 20 frames, 6 strings)
#   read-text --file IMAGE           a still image (PNG, 800x600, letterboxed into
#                                    the detector): its two texts exactly, with
#                                    each line at its own width (the default:
#                                    jobcrop dynamic-width=true) and at a fixed
#                                    width of 320 (--rec-width 320)
# Usage: read_text.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/../sanitizer-preload.sh"  # LD_PRELOAD in a sanitizer build
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*"; exit 1; }
show() { sed 's/^/    /' "$1"; }

models=$build/models/rapidocr
for m in ch_PP-OCRv4_det_infer.onnx ch_PP-OCRv4_rec_infer.onnx; do
  [ -f "$models/$m" ] || { echo "SKIP: $models/$m missing (scripts/setup $build unzips PP-OCRv4's models from the rapidocr-onnxruntime wheel)"; exit 77; }
done
[ -f "$build/plugin/libgstjobflow.so" ] || fail "no plugin in $build/plugin"
export GST_PLUGIN_PATH=$build/plugin
export GST_REGISTRY=$work/registry.bin JOBFLOW_GST_REGISTRY=$work/registry.bin
export LC_ALL=C
read_text=$src/pipelines/gst/read-text

# The demo: what it renders (pipelines/gst/read-text), second by second, in
# reading order (top left, centre, bottom right). In a sanitizer build (ten
# times slower) its first two seconds: 6 strings.
frames=40
[ -z "${JOBFLOW_SANITIZER:-}" ] || frames=20
"$read_text" --build "$build" --frames $frames --json "$work/demo.jsonl" --out "$work/frames" \
  > "$work/demo.txt" 2> "$work/demo.err" || { show "$work/demo.txt"; show "$work/demo.err"; fail "read-text (the demo) failed"; }
grep -qxF "read-text: $frames frames, $((frames * 3)) texts read" "$work/demo.err" || { show "$work/demo.err"; fail "no totals line"; }
pngs=$(find "$work/frames" -name 'frame-*.png' | wc -l)
[ "$pngs" -eq $frames ] || fail "read-text wrote $pngs PNG files, expected $frames"
/usr/bin/python3 - "$work/demo.jsonl" "$work/demo.txt" $frames <<'EOF' || fail "the demo's texts were not read back exactly"
import json, sys
scenes = [["Jobflow 2026", "read text in video", "frame one"],
          ["Hello World", "Exit 12B", "Bus 505 to Airport"],
          ["OPEN 24 HOURS", "Gate 42 closed", "Room 1234"],
          ["Platform 9", "Track 7 departs", "Total 35.80"]]
assert len({t for s in scenes for t in s}) == 12
# where each overlay is in the 640x480 frame: (x0, y0, x1, y1) the region's
# centre must be in
places = [(0, 0, 320, 160), (220, 200, 420, 280), (320, 360, 640, 480)]
n = int(sys.argv[3])
scenes = scenes[:n // 10]
frames = [json.loads(l) for l in open(sys.argv[1])]
assert len(frames) == n, '%d JSON lines, expected %d' % (len(frames), n)
for i, f in enumerate(frames):
    assert abs(f['timestamp'] - i * 100000000) < 2, 'frame %d: timestamp %s' % (i, f['timestamp'])
    want = scenes[i // 10]
    got = [r.get('text') for r in f['regions']]
    assert got == want, 'frame %d: read %s, rendered %s' % (i, got, want)
    for r, (x0, y0, x1, y1) in zip(f['regions'], places):
        cx, cy = r['x'] + r['w'] / 2, r['y'] + r['h'] / 2
        assert r['label'] == 'text' and x0 <= cx <= x1 and y0 <= cy <= y1, \
            'frame %d: "%s" at %s, expected its centre in %s' % (i, r['text'], r, (x0, y0, x1, y1))
        assert r['text-confidence'] > 0.5, 'frame %d: %s' % (i, r)
printed = open(sys.argv[2]).read().splitlines()
assert printed == [t for s in scenes for t in s], 'printed:\n%s' % '\n'.join(printed)
print('read-text demo: %d strings in 3 fonts, sizes and places, each read exactly in all of its 10 frames' % (3 * len(scenes)))
EOF

# A still image (PNG through decodebin, letterboxed into 640x640).
gst-launch-1.0 -q videotestsrc pattern=solid-color foreground-color=0xffffffff num-buffers=1 \
  ! video/x-raw,width=800,height=600 \
  ! textoverlay "text=Parking 2 hours" "font-desc=Sans 40" halignment=left valignment=top xpad=60 ypad=80 color=0xff000000 \
  ! textoverlay "text=Price 12.90" "font-desc=Serif Bold 30" halignment=right valignment=bottom xpad=60 ypad=100 color=0xff000080 \
  ! videoconvert ! pngenc ! filesink "location=$work/still.png" || fail "could not write the still image"
want=$'Parking 2 hours\nPrice 12.90'
for width in 0 320; do
  "$read_text" --build "$build" --file "$work/still.png" --rec-width $width > "$work/still.txt" 2> "$work/still.err" ||
    { show "$work/still.txt"; show "$work/still.err"; fail "read-text --file (a PNG) --rec-width $width failed"; }
  [ "$(cat "$work/still.txt")" = "$want" ] ||
    { show "$work/still.txt"; fail "the still image, --rec-width $width: expected '$want'"; }
  grep -qxF "read-text: 1 frames, 2 texts read" "$work/still.err" ||
    { show "$work/still.err"; fail "no totals line (still image, --rec-width $width)"; }
done
echo "read-text --file: the still image's 2 texts exactly, each line at its own width and at 320"

# Usage errors end with one line and status 2.
out=$("$read_text" --build "$build" --size 100x48 2>&1) && fail "--size 100x48 was accepted"
[ "$out" = "read-text: --size needs WxH, both multiples of 32 (the detector halves its input five times), got '100x48' (try --help)" ] ||
  fail "unclear --size error: $out"
out=$("$read_text" --build "$build" --models "$work/none" 2>&1) && fail "--models without the models was accepted"
[ "$out" = "read-text: no ch_PP-OCRv4_det_infer.onnx in '$work/none' (scripts/setup $build fetches PP-OCRv4's models, or pass --models DIR)" ] ||
  fail "unclear --models error: $out"
echo "read-text: ok"
