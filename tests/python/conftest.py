# Shared fixtures of the Python package's tests (run by meson test with
# Debian's /usr/bin/python3 -m pytest and PYTHONPATH=build/python).
import os

import numpy as np
import pytest

import jobflow as flow

# Scripts run as subprocesses from other folders: the package's path must
# not be relative.
os.environ["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                           if p)

FASHION = os.environ.get("JOBFLOW_DATA") or "/usr/share/datasets/fashion-mnist"


@pytest.fixture(autouse=True)
def fresh_session():
    """Each test starts with no variables (jobs share variables by name)."""
    flow.clear_default_session()
    yield
    flow.sync_default_session()


def write_idx(path, array):
    """An IDX file (MNIST's format) of a uint8 array."""
    a = np.ascontiguousarray(array, dtype=np.uint8)
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 0x08, a.ndim]))
        f.write(np.asarray(a.shape, dtype=">u4").tobytes())
        f.write(a.tobytes())


def make_subset(folder, train, test):
    """The first `train` / `test` samples of Fashion-MNIST as IDX files in
    `folder` (what flow.data.load_mnist reads through $JOBFLOW_DATA)."""
    os.makedirs(folder, exist_ok=True)
    for split, n in (("train", train), ("t10k", test)):
        for kind in ("images-idx3", "labels-idx1"):
            name = "%s-%s-ubyte" % (split, kind)
            src = os.path.join(FASHION, name)
            if not os.path.exists(src):
                src += ".gz"
            write_idx(os.path.join(folder, name), flow.data.read_idx(src)[:n])
    return folder


def need_fashion():
    if not os.path.isdir(FASHION):
        pytest.skip("%s missing (apt-get install dataset-fashion-mnist)" % FASHION)
