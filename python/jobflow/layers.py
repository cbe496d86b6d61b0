"""flow.layers: dense, conv2d, batch_normalization with their variables,
named as OneFlow names them ("<name>-weight", "<name>-bias"). Without a
name, a layer is named "Dense_<n>" / "Conv2d_<n>" in order of definition
within its job (so a train and an eval script defining the same network
name its variables alike)."""
from . import _jobflow as _C


def _no_regularizer(what, *regs):
    if any(r is not None for r in regs):
        raise _C.Error("[layers.%s] regularizers are not supported" % what)


def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None, bias_initializer=None,
          kernel_regularizer=None, bias_regularizer=None, trainable=True, name=None, model_distribute=None):
    """y = activation(inputs @ weight.T + bias), weight (units, in); inputs of
    rank > 2 are flattened from dim 1. Default initializers: zeros (OneFlow's)."""
    _no_regularizer("dense", kernel_regularizer, bias_regularizer)
    y = _C.dense(inputs, int(units), bool(use_bias), kernel_initializer, bias_initializer, name, bool(trainable))
    return activation(y) if activation is not None else y


def conv2d(inputs, filters, kernel_size=1, strides=1, padding="VALID", data_format="NCHW", dilation_rate=1,
           groups=1, activation=None, use_bias=True, kernel_initializer=None, bias_initializer=None,
           kernel_regularizer=None, bias_regularizer=None, trainable=True, name=None, weight_name=None,
           bias_name=None):
    """NCHW convolution with weight (filters, C/groups, kh, kw) and bias (filters,)."""
    _no_regularizer("conv2d", kernel_regularizer, bias_regularizer)
    if weight_name is not None or bias_name is not None:
        raise _C.Error("[layers.conv2d] weight_name/bias_name are not supported; the variables are "
                       "'<name>-weight' and '<name>-bias'")
    pad = padding.upper() if isinstance(padding, str) else [int(p) for p in padding]
    y = _C.conv2d_layer(inputs, int(filters), kernel_size, strides, pad, data_format, dilation_rate, int(groups),
                        bool(use_bias), kernel_initializer, bias_initializer, name, bool(trainable))
    return activation(y) if activation is not None else y


def batch_normalization(inputs, axis=-1, momentum=0.99, epsilon=0.001, center=True, scale=True,
                        beta_initializer=None, gamma_initializer=None, beta_regularizer=None,
                        gamma_regularizer=None, moving_mean_initializer=None, moving_variance_initializer=None,
                        trainable=True, training=True, name=None):
    """Batch statistics (and moving-average updates) in train jobs, the moving
    statistics in predict jobs. Variables "<name>-gamma", "-beta",
    "-moving_mean", "-moving_variance"."""
    _no_regularizer("batch_normalization", beta_regularizer, gamma_regularizer)
    return _C.batch_normalization_layer(inputs, int(axis) % inputs.ndim, float(momentum), float(epsilon),
                                        bool(center), bool(scale), name, bool(trainable))
