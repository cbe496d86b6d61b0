"""flow.data.load_mnist: (Fashion-)MNIST in batches, from local IDX files.

Jobflow downloads nothing: the files come from Debian's package
(apt-get install dataset-fashion-mnist, /usr/share/datasets/fashion-mnist),
or from $JOBFLOW_DATA, or from `out_dir` when it holds the four files.
"""
import os

import numpy as np

from . import _jobflow as _C

_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def _has_files(d):
    return all(os.path.exists(os.path.join(d, f)) or os.path.exists(os.path.join(d, f + ".gz")) for f in _FILES)


def load_mnist(train_batch_size=100, test_batch_size=100, data_format="NCHW", url=None, hash_check=None,
               out_dir=None):
    """((train_images, train_labels), (test_images, test_labels)).

    Images are float32 in [0, 1], shaped (batches, batch, 1, 28, 28) (NHWC:
    (batches, batch, 28, 28, 1)); labels int32 (batches, batch). Each split
    is cut into full batches in file order; the remainder is dropped.
    """
    folder = out_dir if out_dir is not None and _has_files(out_dir) else ""
    (train_x, train_y), (test_x, test_y) = _C.load_mnist(int(train_batch_size), int(test_batch_size), folder)
    if data_format == "NHWC":
        train_x = np.ascontiguousarray(train_x.transpose(0, 1, 3, 4, 2))
        test_x = np.ascontiguousarray(test_x.transpose(0, 1, 3, 4, 2))
    elif data_format != "NCHW":
        raise _C.Error("[load_mnist] data_format must be \"NCHW\" or \"NHWC\", got %r" % (data_format,))
    return (train_x, train_y), (test_x, test_y)


load_fashion_mnist = load_mnist


def default_dir():
    """The folder load_mnist reads: $JOBFLOW_DATA, else Debian's."""
    return _C.default_mnist_dir()


def read_idx(path):
    """One IDX file (plain or gzip'd) as a NumPy array."""
    return _C.read_idx(str(path))
