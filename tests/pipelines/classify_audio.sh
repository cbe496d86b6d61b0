#!/usr/bin/env bash
# A model over audio windows end to end, against the tones played:
#   pipelines/gst/classify-audio --tones 250,500,1000,2000,4000   one second
#       each through concat: 19 windows (100 ms every 50 ms) per tone, every
#       one labelled with its own tone at share 1.00, none straddling two
#       tones; the --json lines (jobmetapublish) hold the same windows' running
#       times and scores
#   --file a WAV file of 2000 Hz (44.1 kHz stereo, resampled by the script)
# Usage: classify_audio.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../sanitizer-preload.sh"  # LD_PRELOAD in a sanitizer build

fail() { echo "FAIL: $*"; exit 1; }
show() { sed 's/^/    /' "$1"; }

[ -f "$build/pipelines/jobs/tone_classifier.onnx" ] || fail "no tone_classifier.onnx in $build/pipelines/jobs"
export JOBFLOW_GST_REGISTRY=$work/registry.bin LC_ALL=C

"$src/pipelines/gst/classify-audio" --build "$build" --tones 250,500,1000,2000,4000 --json "$work/scores.jsonl" \
  > "$work/tones.txt" 2>&1 || { show "$work/tones.txt"; fail "classify-audio failed"; }
/usr/bin/python3 - "$work/tones.txt" "$work/scores.jsonl" <<'EOF' || { show "$work/tones.txt"; fail "wrong labels"; }
import json, re, sys
tones = [250, 500, 1000, 2000, 4000]
lines = [l for l in open(sys.argv[1]) if l.startswith('window at')]
assert len(lines) == 5 * 19, '%d windows, expected 95' % len(lines)
times = []
for i, line in enumerate(lines):
    m = re.fullmatch(r'window at +([0-9.]+) s: (\d+) Hz \(([0-9.]+)\)\n', line)
    assert m, line
    t, tone, share = float(m.group(1)), int(m.group(2)), m.group(3)
    part, k = divmod(i, 19)
    assert abs(t - (part + 0.05 * k)) < 1e-6, 'window %d at %s s, expected %.3f' % (i, t, part + 0.05 * k)
    assert tone == tones[part] and share == '1.00', 'window %d: %s' % (i, line)
    times.append(round(t * 1e9))
scores = [json.loads(l) for l in open(sys.argv[2])]
got = [s['running-time'] for s in scores]
assert got == times, 'JSON running times differ from the labels: %d lines, first differences %s' % (
    len(got), [(i, a, b) for i, (a, b) in enumerate(zip(got, times)) if a != b][:5])
for i, s in enumerate(scores):
    (tensor,) = s['tensors']
    assert tensor['type'] == 'float32' and tensor['dims'] == [1, 5], s
    v = tensor['values']
    assert v.index(max(v)) == i // 19 and max(v) > 0.99, 'window %d: %s' % (i, v)
    assert s['regions'] == [], s
EOF
grep -qxF "95 windows classified" "$work/tones.txt" || { show "$work/tones.txt"; fail "no totals line"; }

gst-launch-1.0 -q audiotestsrc wave=sine freq=2000 num-buffers=20 samplesperbuffer=4410 \
  ! audio/x-raw,format=S16LE,rate=44100,channels=2 ! wavenc ! filesink "location=$work/tone.wav" ||
  fail "could not write the WAV file"
"$src/pipelines/gst/classify-audio" --build "$build" --file "$work/tone.wav" > "$work/file.txt" 2>&1 ||
  { show "$work/file.txt"; fail "classify-audio --file failed"; }
labels=$(grep '^window at' "$work/file.txt" | sed 's/.*: //' | sort | uniq -c | sed 's/^ *//')
[ "$labels" = "39 2000 Hz (1.00)" ] || { show "$work/file.txt"; fail "--file: got '$labels', expected 39 windows of 2000 Hz"; }
# Usage errors: one line, status 2; a missing file: status 1.
set +e
"$src/pipelines/gst/classify-audio" --build "$build" --tones 250,x > "$work/bad.txt" 2>&1; st=$?
"$src/pipelines/gst/classify-audio" --build "$build" --file "$work/none.wav" > "$work/none.txt" 2>&1; st2=$?
set -e
[ $st -eq 2 ] && grep -qxF "classify-audio: --tones needs frequencies in Hz separated by commas, got '250,x' (try --help)" \
  "$work/bad.txt" || { show "$work/bad.txt"; fail "--tones 250,x: status $st"; }
[ $st2 -eq 1 ] && grep -qxF "classify-audio: no audio file '$work/none.wav'" "$work/none.txt" ||
  { show "$work/none.txt"; fail "--file of a missing file: status $st2"; }
echo "classify-audio: 95 windows of 5 tones and 39 of a WAV file, each its tone"
