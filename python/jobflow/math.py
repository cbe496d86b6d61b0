"""flow.math: elementwise math and reductions (OneFlow's names and arguments)."""
from . import _jobflow as _C
from ._ops import _axes, _blob_or_constant, add, subtract, multiply, divide  # noqa: F401


def negative(x, name=None):
    return _C.neg(x)


def exp(x, name=None):
    return _C.exp(x)


def log(x, name=None):
    return _C.log(x)


def sqrt(x, name=None):
    return _C.sqrt(x)


def rsqrt(x, name=None):
    return _C.rsqrt(x)


def square(x, name=None):
    return _C.square(x)


def relu(x, name=None):
    return _C.relu(x, name)


def sigmoid(x, name=None):
    return _C.sigmoid(x)


def tanh(x, name=None):
    return _C.tanh(x)


def pow(x, y, name=None):
    return _C.pow(x, _blob_or_constant(y, x), name)


def maximum(x, y, name=None):
    return _C.maximum(x, _blob_or_constant(y, x), name)


def minimum(x, y, name=None):
    return _C.minimum(x, _blob_or_constant(y, x), name)


def reduce_sum(input_tensor, axis=None, keepdims=False, name=None):
    return _C.reduce_sum(input_tensor, _axes(axis), bool(keepdims), name)


def reduce_mean(input_tensor, axis=None, keepdims=False, name=None):
    return _C.reduce_mean(input_tensor, _axes(axis), bool(keepdims), name)


def reduce_max(input_tensor, axis=None, keepdims=False, name=None):
    return _C.reduce_max(input_tensor, _axes(axis), bool(keepdims), name)


def argmax(input, axis=-1, name=None):
    return _C.argmax(input, int(axis), name)


def clip_by_value(values, min_value=None, max_value=None, name=None):
    from ._ops import clip_by_value as clip
    return clip(values, min_value, max_value, name)
