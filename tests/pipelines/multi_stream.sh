#!/usr/bin/env bash
# Many streams through one job, results out per stream, against each stream
# run alone: three test-pattern sources (the ball at 320x240; from 0.5 s on;
# at 400x300) -> jobconvert (letterbox into 320x320, the frame attached)
# -> jobmux -> jobfunction job=ball_detector.onnx -> jobdemux -> per source:
# queue -> jobdecode mode=boxes -> jobtrack -> jobmetapublish (JSON lines).
# Each source's lines must be exactly those of the same source through the
# single-stream pipeline (same regions, tracks, timestamps), plus its
# "source" (N of jobmux's sink_N), all frames delivered, in order.
# Then the same decoded and tracked before jobdemux (the issue's order).
# Then pipelines/gst/multi-stream: its four streams batched four to a call
# (ball_detector_x4.onnx) give each stream's PNG frames and JSON lines, the
# same regions as the stream alone through the one-frame detector.
# Usage: multi_stream.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../sanitizer-preload.sh"  # LD_PRELOAD in a sanitizer build

fail() { echo "FAIL: $*"; exit 1; }
show() { sed 's/^/    /' "$1"; }

job=$build/pipelines/jobs/ball_detector.onnx
[ -f "$build/plugin/libgstjobflow.so" ] || fail "no plugin in $build/plugin"
[ -f "$job" ] || fail "no ball_detector.onnx in $build/pipelines/jobs"
export GST_PLUGIN_PATH=$build/plugin GST_REGISTRY=$work/registry.bin LC_ALL=C
labels=$src/pipelines/gst/ball.labels

sources=("videotestsrc pattern=ball num-buffers=30 ! video/x-raw,width=320,height=240,framerate=30/1"
         "videotestsrc pattern=ball num-buffers=20 timestamp-offset=500000000 ! video/x-raw,width=320,height=240,framerate=30/1"
         "videotestsrc pattern=ball num-buffers=25 ! video/x-raw,width=400,height=300,framerate=30/1")
frames=(30 20 25)
starts=(0 500000000 0)
to_tensor="videoconvert ! video/x-raw,format=RGB ! jobconvert width=320 height=320 resize=letterbox"
decode="jobdecode mode=boxes scheme=yolov8 labels=$labels score-threshold=0.5 message=false ! jobtrack"

# Each source alone.
for s in 0 1 2; do
  # shellcheck disable=SC2086
  gst-launch-1.0 -q ${sources[$s]} ! $to_tensor ! jobfunction "job=$job" ! $decode \
    ! jobmetapublish "location=$work/alone_$s.jsonl" max-queue=100000 ! fakesink > "$work/alone_$s.txt" 2>&1 ||
    { show "$work/alone_$s.txt"; fail "source $s alone: the pipeline failed"; }
done

# All three through one job.
launch="jobmux name=mux batch-size=1 max-latency=0 ! jobfunction job=$job ! jobdemux name=demux"
for s in 0 1 2; do
  launch+=" ${sources[$s]} ! $to_tensor ! mux.sink_$s"
  launch+=" demux.src_$s ! queue ! $decode ! jobmetapublish location=$work/mux_$s.jsonl max-queue=100000 ! fakesink"
done
# shellcheck disable=SC2086
gst-launch-1.0 -q $launch > "$work/mux.txt" 2>&1 || { show "$work/mux.txt"; fail "the multi-stream pipeline failed"; }

/usr/bin/python3 - "$work" "${frames[*]}" "${starts[*]}" <<'EOF'
import json, sys
work = sys.argv[1]
frames, starts = [int(n) for n in sys.argv[2].split()], [int(t) for t in sys.argv[3].split()]
for s, n in enumerate(frames):
    alone = [json.loads(l) for l in open('%s/alone_%d.jsonl' % (work, s))]
    mux = [json.loads(l) for l in open('%s/mux_%d.jsonl' % (work, s))]
    assert len(alone) == n, 'source %d alone: %d lines, expected %d' % (s, len(alone), n)
    assert len(mux) == n, 'source %d through jobmux: %d lines, expected %d' % (s, len(mux), n)
    for i, (a, m) in enumerate(zip(alone, mux)):
        assert m.pop('source') == s, 'source %d frame %d: %s' % (s, i, m)
        assert m == a, 'source %d frame %d:\n  alone %s\n  mux   %s' % (s, i, a, m)
        assert abs(a['timestamp'] - starts[s] - i * 1e9 / 30) < 1, 'source %d frame %d: %s' % (s, i, a)
        assert len(a['regions']) == 1 and a['regions'][0]['label'] == 'ball', 'source %d frame %d: %s' % (s, i, a)
    # one ball, one track, from the frame tracks are confirmed on
    assert [r['track']['id'] for a in alone[3:] for r in a['regions']] == [1] * (n - 3), 'source %d: tracks' % s
print('3 sources through jobmux/jobdemux: %s frames, each as when run alone' % '+'.join(map(str, frames)))
EOF

# The issue's order, jobmux ! jobfunction ! jobdecode ! jobtrack ! jobdemux:
# the batch decoded and tracked as it is (a tracker per source), the
# sources' frames with their regions out of jobdemux output=frames. Four
# slots a call (ball_detector_x4.onnx) for the three sources: batches
# padded, sources joining late and ending early. Each source's lines match
# its lines alone: the same tracks and timestamps, boxes to a pixel and
# scores to 1e-3 (four frames a call may sum in another order than one).
launch="jobmux name=mux batch-size=4 max-latency=0 ! jobfunction job=$build/pipelines/jobs/ball_detector_x4.onnx"
launch+=" ! $decode ! jobdemux name=demux output=frames"
for s in 0 1 2; do
  launch+=" ${sources[$s]} ! $to_tensor ! mux.sink_$s"
  launch+=" demux.src_$s ! queue ! jobmetapublish location=$work/batch_$s.jsonl max-queue=100000 ! fakesink"
done
# shellcheck disable=SC2086
gst-launch-1.0 -q $launch > "$work/batch.txt" 2>&1 ||
  { show "$work/batch.txt"; fail "jobmux ! jobfunction ! jobdecode ! jobtrack ! jobdemux failed"; }
/usr/bin/python3 - "$work" "${frames[*]}" <<'EOF'
import json, sys
work = sys.argv[1]
frames = [int(n) for n in sys.argv[2].split()]
for s, n in enumerate(frames):
    alone = [json.loads(l) for l in open('%s/alone_%d.jsonl' % (work, s))]
    got = [json.loads(l) for l in open('%s/batch_%d.jsonl' % (work, s))]
    assert len(got) == n, 'source %d decoded in the batch: %d lines, expected %d' % (s, len(got), n)
    for i, (a, m) in enumerate(zip(alone, got)):
        assert m.pop('source') == s, 'source %d frame %d: %s' % (s, i, m)
        ra, rm = a.pop('regions'), m.pop('regions')
        assert m == a, 'source %d frame %d:\n  alone %s\n  batch %s' % (s, i, a, m)
        assert len(rm) == len(ra) == 1, 'source %d frame %d:\n  alone %s\n  batch %s' % (s, i, ra, rm)
        ta, tm = ra[0].pop('track', None), rm[0].pop('track', None)
        assert ta == tm, 'source %d frame %d: track %s, alone %s' % (s, i, tm, ta)
        assert rm[0]['label'] == 'ball' and all(abs(rm[0][k] - ra[0][k]) <= 1 for k in 'xywh') and \
            abs(rm[0]['confidence'] - ra[0]['confidence']) < 1e-3, 'source %d frame %d:\n  alone %s\n  batch %s' % (s, i, ra, rm)
print('3 sources through jobmux ! jobfunction ! jobdecode ! jobtrack ! jobdemux: each as when run alone')
EOF

# pipelines/gst/multi-stream: four streams, one call of the x4 detector for a
# frame of each; its sources (the script's test patterns) alone through the
# one-frame detector give the same regions.
"$src/pipelines/gst/multi-stream" --build "$build" --frames 30 --out "$work/script" > "$work/script.txt" 2>&1 ||
  { show "$work/script.txt"; fail "multi-stream failed"; }
patterns=("videotestsrc pattern=ball num-buffers=30 ! video/x-raw,width=320,height=240,framerate=30/1"
          "videotestsrc pattern=ball num-buffers=30 foreground-color=0xffc0ffc0 ! video/x-raw,width=360,height=270,framerate=30/1"
          "videotestsrc pattern=ball num-buffers=30 ! video/x-raw,width=400,height=300,framerate=30/1"
          "videotestsrc pattern=ball num-buffers=30 ! video/x-raw,width=480,height=360,framerate=30/1")
for s in 0 1 2 3; do
  pngs=$(find "$work/script/stream-$s" -name 'frame-*.png' | wc -l)
  [ "$pngs" -eq 30 ] || { show "$work/script.txt"; fail "multi-stream: stream $s wrote $pngs PNG files, expected 30"; }
  grep -qxF "stream $s: 30 frames written to $work/script/stream-$s, 30 JSON lines in $work/script/stream-$s.jsonl (30 with regions messages)" \
    "$work/script.txt" || { show "$work/script.txt"; fail "multi-stream: no totals line for stream $s"; }
  [ "$(grep -c "^stream $s at " "$work/script.txt")" -eq 30 ] || { show "$work/script.txt"; fail "multi-stream: stream $s: expected 30 frame lines"; }
  # shellcheck disable=SC2086
  gst-launch-1.0 -q ${patterns[$s]} ! $to_tensor ! jobfunction "job=$job" ! $decode \
    ! jobmetapublish "location=$work/pattern_$s.jsonl" max-queue=100000 ! fakesink > "$work/pattern_$s.txt" 2>&1 ||
    { show "$work/pattern_$s.txt"; fail "pattern $s alone: the pipeline failed"; }
done
/usr/bin/python3 - "$work" <<'EOF2'
import json, sys
work = sys.argv[1]
for s in range(4):
    alone = [json.loads(l) for l in open('%s/pattern_%d.jsonl' % (work, s))]
    got = [json.loads(l) for l in open('%s/script/stream-%d.jsonl' % (work, s))]
    assert len(alone) == len(got) == 30, 'stream %d: %d lines, alone %d, expected 30' % (s, len(got), len(alone))
    for i, (a, m) in enumerate(zip(alone, got)):
        assert m.pop('source') == s, 'stream %d frame %d: %s' % (s, i, m)
        assert m['timestamp'] == a['timestamp'] and abs(a['timestamp'] - i * 1e9 / 30) < 1, 'stream %d frame %d' % (s, i)
        assert len(m['regions']) == len(a['regions']) == 1, 'stream %d frame %d:\n  alone %s\n  x4    %s' % (s, i, a, m)
        ra, rm = a['regions'][0], m['regions'][0]
        # four frames a call may sum in another order than one: the same
        # boxes to a pixel, scores to 1e-3
        assert rm['label'] == 'ball' and rm['track']['id'] == ra['track']['id'] == 1, 'stream %d frame %d: %s' % (s, i, m)
        assert all(abs(rm[k] - ra[k]) <= 1 for k in 'xywh') and abs(rm['confidence'] - ra['confidence']) < 1e-3, \
            'stream %d frame %d:\n  alone %s\n  x4    %s' % (s, i, ra, rm)
print('pipelines/gst/multi-stream: 4 streams x 30 frames, one call for four, each as when run alone')
EOF2
