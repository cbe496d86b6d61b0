"""Jobflow for Python: OneFlow's job functions on Jobflow's C++ engine.

    import jobflow as flow
    import jobflow.typing as tp

stands in for ``import oneflow as flow`` / ``import oneflow.typing as tp``:

    @flow.global_function(type="train")
    def train_job(images: tp.Numpy.Placeholder((100, 1, 28, 28), dtype=flow.float),
                  labels: tp.Numpy.Placeholder((100,), dtype=flow.int32)) -> tp.Numpy:
        logits = ...
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss

    loss = train_job(images, labels)          # NumPy in, NumPy out

The body runs once, at definition, under the engine's job builder; each
call runs the compiled plan. See docs/user-guide/python.md.
"""
from . import _jobflow
from ._jobflow import Blob, Error
from ._dtypes import (DType, float32, float64, int32, int64, int8, uint8, bool_, int16, uint16, uint32, uint64,
                      float16, bfloat16, as_dtype)

float = float32  # noqa: A001  (OneFlow's spelling: flow.float)
double = float64
half = float16
char = int8

from . import typing  # noqa: E402
from . import config, env, scope, layers, nn, math, optimizer, losses, train, checkpoint, data, onnx  # noqa: E402
from ._job import (  # noqa: E402
    FunctionConfig, function_config, global_function, function, watch,
    FixedTensorDef, MirroredTensorDef, MirroredTensorListDef, GlobalFunction,
)
from ._ops import (  # noqa: E402
    reshape, flatten, transpose, concat, cast, identity, constant, zeros_like, ones_like, squeeze, expand_dims,
    gather, matmul, clip_by_value, pad, get_variable,
)
from .scope import fixed_placement  # noqa: E402
from .checkpoint import load_variables, get_all_variables  # noqa: E402

# ---- initializers (OneFlow's names and arguments) ----
constant_initializer = lambda value=0, dtype=None: _jobflow.constant_initializer(value)  # noqa: E731
zeros_initializer = lambda dtype=None: _jobflow.zeros_initializer()  # noqa: E731
ones_initializer = lambda dtype=None: _jobflow.ones_initializer()  # noqa: E731


def truncated_normal(stddev=1.0):
    """flow.truncated_normal(0.1): normal(0, stddev), redrawn beyond 2 stddev."""
    return _jobflow.truncated_normal(stddev, 0.0)


def truncated_normal_initializer(mean=0.0, stddev=1.0):
    return _jobflow.truncated_normal(stddev, mean)


def random_normal_initializer(mean=0.0, stddev=1.0, seed=None, dtype=None):
    return _jobflow.random_normal_initializer(mean, stddev)


def random_uniform_initializer(minval=0, maxval=1, dtype=None):
    return _jobflow.random_uniform_initializer(minval, maxval)


def xavier_uniform_initializer(data_format=""):
    return _jobflow.xavier_uniform_initializer()


def xavier_normal_initializer(data_format=""):
    return _jobflow.xavier_normal_initializer()


glorot_uniform_initializer = xavier_uniform_initializer
glorot_normal_initializer = xavier_normal_initializer


def kaiming_initializer(shape=None, distribution="random_normal", mode="fan_in", nonlinearity="leaky_relu",
                        negative_slope=0.0, data_format="NCHW"):
    if distribution == "random_uniform":
        return _jobflow.kaiming_uniform_initializer()
    return _jobflow.kaiming_normal_initializer()


# ---- the session ----

def sync_default_session():
    """Waits for every call of every job and their callbacks (Ctrl-C interrupts)."""
    _jobflow.sync_all()


def clear_default_session():
    """Forgets every variable (jobs defined before keep theirs). For tests."""
    _jobflow.reset_session()


__version__ = "0.1.0"
