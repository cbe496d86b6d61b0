"""Ops at the top level of the package (flow.reshape, flow.concat, ...) and
helpers shared by flow.math and flow.nn. Every op adds a node to the job
being defined and returns a Blob; errors start with "[opname]"."""
import numbers

import numpy as np

from . import _jobflow as _C
from ._dtypes import as_dtype

Blob = _C.Blob


def _axes(axis):
    if axis is None:
        return []
    if isinstance(axis, numbers.Integral):
        return [int(axis)]
    return [int(a) for a in axis]


def _blob_or_constant(x, like):
    """x as a Blob: numbers become constants of like's dtype."""
    if isinstance(x, Blob):
        return x
    return _C.constant(np.asarray(x, dtype=_C.numpy_dtype(like.dtype)), like.dtype, None)


def reshape(x, shape, name=None):
    return _C.reshape(x, [int(d) for d in shape], name)


def flatten(input, start_dim=0, end_dim=-1, name=None):
    return _C.flatten(input, int(start_dim), int(end_dim))


def transpose(a, perm=None, conjugate=False, batch_axis_non_change=False, name=None):
    if perm is None:
        perm = list(range(a.ndim))[::-1]
    return _C.transpose(a, [int(p) for p in perm], name)


def concat(inputs, axis=0, max_dim_size=None, name=None):
    return _C.concat(list(inputs), int(axis), name)


def cast(x, dtype, name=None):
    return _C.cast(x, as_dtype(dtype), name)


def identity(x, name=None):
    return _C.identity(x, name)


def constant(value, dtype=None, shape=None, name=None):
    """A constant blob: `value` (a number or an array) broadcast to `shape`."""
    dt = as_dtype(dtype) if dtype is not None else _C.DType.float32
    arr = np.asarray(value, dtype=_C.numpy_dtype(dt))
    if shape is not None:
        arr = np.broadcast_to(arr, tuple(int(d) for d in shape))
    return _C.constant(np.ascontiguousarray(arr), dt, name)


def zeros_like(like, dtype=None, name=None):
    b = _C.zeros_like(like)
    return b if dtype is None or as_dtype(dtype) == like.dtype else _C.cast(b, as_dtype(dtype), name)


def ones_like(like, dtype=None, name=None):
    b = _C.ones_like(like)
    return b if dtype is None or as_dtype(dtype) == like.dtype else _C.cast(b, as_dtype(dtype), name)


def squeeze(input, axis=None, name=None):
    return _C.squeeze(input, _axes(axis), name)


def expand_dims(input, axis, name=None):
    return _C.unsqueeze(input, [int(axis)], name)


def gather(params, indices, validate_indices=None, axis=None, batch_dims=0, name=None):
    return _C.gather(params, indices, 0 if axis is None else int(axis), name)


def matmul(a, b, transpose_a=False, transpose_b=False, alpha=1.0, name=None):
    y = _C.matmul(a, b, bool(transpose_a), bool(transpose_b), name)
    return y if alpha == 1.0 else _C.mul_scalar(y, float(alpha))


def clip_by_value(values, min_value=None, max_value=None, name=None):
    return _C.clip(values, None if min_value is None else float(min_value),
                   None if max_value is None else float(max_value), name)


def pad(x, paddings, constant_value=0, name=None):
    """paddings: one (before, after) pair per dimension."""
    pairs = [tuple(int(v) for v in p) for p in paddings]
    return _C.pad(x, [p[0] for p in pairs] + [p[1] for p in pairs], "constant", float(constant_value), name)


def get_variable(name, shape=None, dtype=None, initializer=None, regularizer=None, trainable=True,
                 model_name=None, random_seed=None, distribute=None, reuse=True):
    """flow.get_variable: a variable of the session, shared by name between jobs."""
    if regularizer is not None:
        raise _C.Error("[get_variable] regularizers are not supported (variable '%s')" % name)
    if initializer is None:
        initializer = _C.zeros_initializer()
    return _C.get_variable(str(name), [int(d) for d in shape], as_dtype(dtype) if dtype is not None
                           else _C.DType.float32, initializer, bool(trainable))


def _binary(fn, scalar_fn):
    def op(x, y, name=None):
        if isinstance(x, Blob) and isinstance(y, Blob):
            return fn(x, y)
        if isinstance(x, Blob):
            return scalar_fn(x, y)
        if isinstance(y, Blob):
            return fn(_blob_or_constant(x, y), y)
        raise _C.Error("[math] at least one operand must be a Blob")
    return op


add = _binary(_C.add, lambda x, s: _C.add_scalar(x, float(s)))
subtract = _binary(_C.sub, lambda x, s: _C.add_scalar(x, -float(s)))
multiply = _binary(_C.mul, lambda x, s: _C.mul_scalar(x, float(s)))
divide = _binary(_C.div, lambda x, s: _C.mul_scalar(x, 1.0 / float(s)))
