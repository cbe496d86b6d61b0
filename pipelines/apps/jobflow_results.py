"""Shared by pull_results.py and new_result.py: the options, the evaluation
pipeline they both run, and reading jobsink's results as numpy arrays.

    jobdatasrc name=data set=test batch-size=100
      ! jobfunction name=eval job=lenet_eval.onnx checkpoint=DIR message-interval=0
      ! jobsink name=out

lenet_eval returns (labels (100,) int32, logits (100, 10) float32) for every
batch: other/tensors caps, one GstMemory per tensor.
"""
import argparse
import contextlib
import os
import sys

import gi

gi.require_version('Gst', '1.0')
from gi.repository import Gst  # noqa: E402

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument('--checkpoint', default='./lenet_models_1', help='the LeNet checkpoint (default %(default)s)')
    p.add_argument('--jobs', help='folder with lenet_eval.onnx (default BUILD/pipelines/jobs)')
    p.add_argument('--build', help='the Jobflow build tree, for the plugin and the job files '
                   '(default ./build, else the build next to this checkout)')
    p.add_argument('--num-samples', type=int, default=0,
                   help='the first N test samples only (0 = all; whole batches of 100)')
    p.add_argument('--data', help="IDX data set folder (default: jobdatasrc's)")
    args = p.parse_args()
    if args.num_samples < 0:
        p.error('--num-samples needs a whole number >= 0')
    if args.build is None:
        args.build = 'build'
        if not os.path.isfile(os.path.join(args.build, 'plugin', 'libgstjobflow.so')):
            args.build = os.path.join(HERE, '..', '..', 'build')
    if args.jobs is None:
        args.jobs = os.path.join(args.build, 'pipelines', 'jobs')
    return args


def ensure_plugin(args):
    """The jobflow plugin: from GST_PLUGIN_PATH, else from the build tree."""
    if Gst.ElementFactory.find('jobfunction') is None:
        Gst.Registry.get().scan_path(os.path.join(args.build, 'plugin'))
    if Gst.ElementFactory.find('jobfunction') is None:
        sys.exit('the jobflow GStreamer plugin was not found (pass --build DIR, or set GST_PLUGIN_PATH '
                 'to the folder of libgstjobflow.so)')


def make_pipeline(args):
    """The pipeline above; paths are set as properties (no launch-line quoting)."""
    pipeline = Gst.parse_launch('jobdatasrc name=data set=test batch-size=100 '
                                '! jobfunction name=eval message-interval=0 '
                                '! jobsink name=out')
    data = pipeline.get_by_name('data')
    data.set_property('num-samples', args.num_samples)
    if args.data:
        data.set_property('location', args.data)
    pipeline.get_by_name('eval').set_property('job', os.path.join(args.jobs, 'lenet_eval.onnx'))
    pipeline.get_by_name('eval').set_property('checkpoint', args.checkpoint)
    return pipeline


def error_text(msg):
    err, debug = msg.parse_error()
    return 'from %s: %s%s' % (msg.src.get_name(), err.message, ' (%s)' % debug if debug else '')


def _split(s):
    return s.replace('.', ',').split(',')


@contextlib.contextmanager
def mapped_tensors(sample):
    """numpy views of the sample's tensors (one GstMemory each), valid in the
    `with` block only: the memories are unmapped after it."""
    st = sample.get_caps().get_structure(0)
    if st.get_name() != 'other/tensors':
        raise ValueError('not other/tensors: %s' % sample.get_caps().to_string())
    types = _split(st.get_value('types'))
    dims = _split(st.get_value('dimensions'))
    buf = sample.get_buffer()
    if len(types) != len(dims) or buf.n_memory() != len(types):
        raise ValueError('%d memories for caps %s' % (buf.n_memory(), sample.get_caps().to_string()))
    mapped = []
    try:
        arrays = []
        for i, (t, d) in enumerate(zip(types, dims)):
            shape = tuple(int(x) for x in reversed(d.split(':')))  # innermost first in the caps
            mem = buf.peek_memory(i)
            ok, info = mem.map(Gst.MapFlags.READ)
            if not ok:
                raise ValueError('cannot map memory %d' % i)
            mapped.append((mem, info))
            a = np.frombuffer(info.data, dtype=np.dtype(t))
            arrays.append(a.reshape(shape))  # raises when the size does not match
        yield arrays
    finally:
        for mem, info in mapped:
            mem.unmap(info)


class Accuracy:
    def __init__(self):
        self.correct = 0
        self.counted = 0

    def add(self, sample):
        """Adds one result of lenet_eval: (labels (B,) int32, logits (B, C) float32)."""
        with mapped_tensors(sample) as tensors:
            if len(tensors) != 2:
                raise ValueError('expected (labels, logits) from lenet_eval, got %d tensors' % len(tensors))
            labels, logits = tensors
            logits = logits.reshape(-1, logits.shape[-1])
            labels = labels.reshape(-1)
            # argmax takes the first of equal maxima, as the C++ apps do
            self.correct += int(np.sum(np.argmax(logits, axis=1) == labels))
            self.counted += labels.size

    def line(self):
        return 'test accuracy: %.4f (%d/%d)' % (self.correct / self.counted if self.counted else 0.0,
                                                self.correct, self.counted)
