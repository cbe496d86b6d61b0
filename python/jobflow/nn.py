"""flow.nn: activations, losses, convolution and pooling (OneFlow's names and
arguments). Activations can be given to layers: activation=flow.nn.relu."""
from . import _jobflow as _C
from ._ops import _blob_or_constant


def _pad(padding):
    return padding.upper() if isinstance(padding, str) else [int(p) for p in padding]


def relu(x, name=None):
    return _C.relu(x, name)


def sigmoid(x, name=None):
    return _C.nn_sigmoid(x, name)


def tanh(x, name=None):
    return _C.nn_tanh(x, name)


def leaky_relu(x, alpha=0.2, name=None):
    return _C.leaky_relu(x, float(alpha), name)


def elu(x, alpha=1.0, name=None):
    return _C.elu(x, float(alpha), name)


def selu(x, name=None):
    return _C.selu(x, name)


def softplus(x, name=None):
    return _C.softplus(x, name)


def softsign(x, name=None):
    return _C.softsign(x, name)


def hardsigmoid(x, name=None):
    return _C.hard_sigmoid(x, 1.0 / 6.0, 0.5, name)


def softmax(logits, axis=None, name=None):
    return _C.softmax(logits, -1 if axis is None else int(axis), name)


def log_softmax(logits, axis=None, name=None):
    return _C.log_softmax(logits, -1 if axis is None else int(axis), name)


def sparse_softmax_cross_entropy_with_logits(labels, logits, name=None):
    """labels int32/int64 (B,), logits (B, C) -> loss (B,)."""
    return _C.sparse_softmax_cross_entropy_with_logits(labels, logits, name)


def softmax_cross_entropy_with_logits(labels, logits, name=None):
    """labels (B, C) probabilities, logits (B, C) -> loss (B,)."""
    return _C.neg(_C.reduce_sum(_C.mul(labels, _C.log_softmax(logits, -1, None)), [-1], False, name))


def dropout(x, rate, noise_shape=None, seed=None, name=None):
    """Inverted dropout in train jobs (kept values scaled by 1/(1-rate)); the
    identity in predict jobs."""
    if noise_shape is not None:
        raise _C.Error("[nn.dropout] noise_shape is not supported")
    return _C.dropout(x, float(rate), name)


def bias_add(value, bias, data_format=None, name=None):
    axis = value.ndim - 1 if data_format in ("NHWC", "channels_last") else 1
    return _C.bias_add(value, bias, axis, name)


def conv2d(input, filters, strides, padding, data_format="NCHW", dilations=None, groups=1, name=None):
    if data_format != "NCHW":
        raise _C.Error("[nn.conv2d] data_format \"%s\" is not supported; use \"NCHW\"" % data_format)
    return _C.conv2d(input, filters, strides, _pad(padding), 1 if dilations is None else dilations, int(groups), name)


def max_pool2d(input, ksize, strides, padding, data_format="NCHW", name=None):
    return _C.max_pool2d(input, ksize, strides, _pad(padding), data_format, name)


def avg_pool2d(input, ksize, strides, padding, data_format="NCHW", name=None):
    return _C.avg_pool2d(input, ksize, strides, _pad(padding), data_format, name)


def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, axis=-1, name=None):
    axis = int(axis) % x.ndim
    offset = _blob_or_constant(0.0 if offset is None else offset, x)
    scale = _blob_or_constant(1.0 if scale is None else scale, x)
    return _C.batch_normalization(x, mean, variance, offset, scale, float(variance_epsilon), axis, name)
