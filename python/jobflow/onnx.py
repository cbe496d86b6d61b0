"""flow.onnx: job files (ONNX with Jobflow's metadata, docs/job-files.md).

    flow.onnx.export(train_job, "lenet_train.onnx")   # any job defined here
    job = flow.onnx.load("lenet_train.onnx")          # callable like the original

A job exported from Python runs unchanged in a `jobfunction` element
(`jobfunction job=lenet_train.onnx`) and in C++ (jobflow::onnx::load).
"""
from . import _jobflow as _C
from ._job import GlobalFunction


def export(job, path, checkpoint_dir="", opset=17):
    """Writes `job` to `path` (atomically). With checkpoint_dir, the variables
    go to that folder (OneFlow's layout, relative to the file) instead of
    into the file."""
    if not _C.has_onnx:
        raise _C.Error("[onnx.export] this build has no ONNX support (libonnx-dev, libprotobuf-dev)")
    inner = job._job if isinstance(job, GlobalFunction) else job
    _C.onnx_save(inner, str(path), str(checkpoint_dir), int(opset))


def load(path, type=None, loss="", loss_output="", optimizer="", checkpoint="", device="cpu", max_in_flight=4,
         num_threads=0, name="", precision=""):
    """A job file (or an ordinary ONNX model: a predict job, or with type="train",
    `loss` and `optimizer` a train job) as a callable job. A job file's
    variables join the session, shared by name with the jobs defined here; an
    ordinary model's keep their initializer names unless the session holds
    other values under them, then they are the model's own, named
    "<job>#<n>:<initializer>" (docs/job-files.md, "Whose variables").
    `precision`: "fp32" or "bf16" (LoadOptions::precision; empty: the
    file's)."""
    if not _C.has_onnx:
        raise _C.Error("[onnx.load] this build has no ONNX support (libonnx-dev, libprotobuf-dev)")
    t = None if type is None else (_C.JobType.train if type == "train" else _C.JobType.predict)
    job = _C.onnx_load(str(path), t, loss, loss_output, optimizer, str(checkpoint), device, int(max_in_flight),
                       int(num_threads), name, str(precision))
    return GlobalFunction(job, None)


def inspect(path):
    """What `jobflow inspect` prints: signature, ops, parameters, FLOPs."""
    return _C.onnx_inspect(str(path))


def pack_sequence(items, dtype=None, none=False):
    """An ONNX sequence (a list of arrays of one dtype, shapes free) or
    optional value as the one packed uint8 array a model's sequence input
    takes (docs/job-files.md, "Sequences and optional values"). dtype: the
    items' (default: the first item's; required for an empty list);
    none=True: an optional without a value."""
    return _C.pack_sequence(list(items), dtype, bool(none))


def unpack_sequence(packed):
    """A packed sequence output as a list of arrays (None for an optional
    without a value)."""
    return _C.unpack_sequence(packed)


def pack_strings(strings):
    """A string tensor (an array of str or bytes, any shape) as the one packed
    uint8 array a model's string input takes (docs/job-files.md, "String
    tensors"); str is written as UTF-8."""
    import numpy as np
    a = np.asarray(strings)
    if a.size == 0:  # [] reads as float64: no strings either way
        return _C.pack_strings([], list(a.shape))
    if a.dtype.kind not in "USO":
        raise _C.Error("[pack_strings] strings: an array of str or bytes, got dtype %s" % a.dtype)
    items = []
    for i, s in enumerate(a.reshape(-1).tolist()):
        if isinstance(s, str):
            items.append(s.encode("utf-8"))
        elif isinstance(s, bytes):
            items.append(s)
        else:
            raise _C.Error("[pack_strings] element %d is %s, not str or bytes" % (i, type(s).__name__))
    return _C.pack_strings(items, list(a.shape))


def unpack_strings(packed):
    """A packed string output as a NumPy array of str (of bytes when some
    element is not UTF-8), with the tensor's shape. (NumPy's str and bytes
    arrays drop NULs at the end of an element.)"""
    import numpy as np
    items, shape = _C.unpack_strings(packed)
    try:
        values = [b.decode("utf-8") for b in items]
    except UnicodeDecodeError:
        values = items
    if not values:
        return np.zeros(shape, dtype="<U1")
    return np.array(values).reshape(shape)
