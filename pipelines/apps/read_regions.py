#!/usr/bin/python3
"""Reads the analytics results on the frames of a detection pipeline from
Python (PyGObject), through their JSON form: jobtrack message=true posts a
"jobflow-regions" element message per frame whose "json" field holds the
frame's regions (docs/elements.md, "Analytics metadata"), so no C API is
needed.

    videotestsrc num-buffers=N pattern=ball ! video/x-raw,width=320,height=240
      ! videoconvert ! video/x-raw,format=RGB
      ! jobconvert width=320 height=320 resize=letterbox
      ! jobfunction job=ball_detector.onnx
      ! jobdecode mode=boxes labels=ball.labels ! jobtrack message=true ! fakesink

Prints one line per region, "frame F at T s: LABEL #TRACK (SCORE) at X,Y WxH",
the same lines as the C++ read_regions (which reads the metas themselves).
"""
import argparse
import json
import os
import sys

import gi

gi.require_version('Gst', '1.0')
from gi.repository import Gst  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = 'read_regions.py'


def parse_args():
    p = argparse.ArgumentParser(prog=PROG, description='Runs the ball detector on test-pattern frames and prints '
                                'each region read from the jobflow-regions messages.')
    p.add_argument('--frames', type=int, default=30, help='frames of videotestsrc pattern=ball (default 30)')
    p.add_argument('--build', help='the Jobflow build tree (default ./build, else the build next to this checkout)')
    p.add_argument('--jobs', help='folder with ball_detector.onnx (default BUILD/pipelines/jobs)')
    p.add_argument('--labels', default=os.path.join(HERE, '..', 'gst', 'ball.labels'),
                   help="the detector's labels (default pipelines/gst/ball.labels)")
    a = p.parse_args()
    if a.frames < 1:
        p.error('--frames needs a whole number >= 1')
    if a.build is None:
        a.build = 'build'
        if not os.path.isfile(os.path.join(a.build, 'plugin', 'libgstjobflow.so')):
            a.build = os.path.join(HERE, '..', '..', 'build')
    if a.jobs is None:
        a.jobs = os.path.join(a.build, 'pipelines', 'jobs')
    return a


def print_regions(frame, message):
    s = message.get_structure()
    t = s.get_value('timestamp') / 1e9
    for r in json.loads(s.get_value('json'))['regions']:
        track = '#%d' % r['track']['id'] if 'track' in r else '-'
        print('frame %d at %.3f s: %s %s (%.2f) at %d,%d %dx%d'
              % (frame, t, r['label'], track, r['confidence'], r['x'], r['y'], r['w'], r['h']))


def main():
    args = parse_args()
    Gst.init(None)
    if Gst.ElementFactory.find('jobfunction') is None:
        Gst.Registry.get().scan_path(os.path.join(args.build, 'plugin'))
    try:
        pipeline = Gst.parse_launch(
            'videotestsrc name=src pattern=ball ! video/x-raw,width=320,height=240,framerate=30/1 '
            '! videoconvert ! video/x-raw,format=RGB ! jobconvert width=320 height=320 resize=letterbox '
            '! jobfunction name=detect message-interval=0 '
            '! jobdecode name=decode mode=boxes scheme=yolov8 score-threshold=0.5 message=false '
            '! jobtrack name=track message=true ! fakesink')
    except gi.repository.GLib.Error as e:
        sys.exit('%s: %s (is the jobflow plugin in %s?)' % (PROG, e.message, os.path.join(args.build, 'plugin')))
    pipeline.get_by_name('src').set_property('num-buffers', args.frames)
    pipeline.get_by_name('detect').set_property('job', os.path.join(args.jobs, 'ball_detector.onnx'))
    pipeline.get_by_name('decode').set_property('labels', args.labels)
    track = pipeline.get_by_name('track')
    bus = pipeline.get_bus()
    pipeline.set_state(Gst.State.PLAYING)
    frame, status = 0, 0
    while True:
        msg = bus.timed_pop_filtered(Gst.CLOCK_TIME_NONE,
                                     Gst.MessageType.ELEMENT | Gst.MessageType.ERROR | Gst.MessageType.EOS)
        if msg.type == Gst.MessageType.ERROR:
            err, _ = msg.parse_error()
            print('%s: from %s: %s' % (PROG, msg.src.get_name(), err.message), file=sys.stderr)
            status = 1
            break
        if msg.type == Gst.MessageType.EOS:
            print('%d frames' % frame)
            break
        if msg.src == track and msg.get_structure().get_name() == 'jobflow-regions':
            print_regions(frame, msg)
            frame += 1
    pipeline.set_state(Gst.State.NULL)
    return status


if __name__ == '__main__':
    sys.exit(main())
