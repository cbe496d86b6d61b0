"""Data types: OneFlow's spellings (flow.float, flow.int32, ...) of the engine's."""
import numpy as _np

from . import _jobflow as _C

DType = _C.DType
float32 = DType.float32
float64 = DType.float64
int32 = DType.int32
int64 = DType.int64
int8 = DType.int8
uint8 = DType.uint8
bool_ = DType.bool

_BY_NAME = {
    "float": float32, "float32": float32, "double": float64, "float64": float64,
    "int32": int32, "int64": int64, "int8": int8, "char": int8, "uint8": uint8,
    "bool": bool_,
}


def as_dtype(x):
    """A DType from a DType, a NumPy dtype (or type) or a name."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in _BY_NAME:
        return _BY_NAME[x]
    try:
        d = _C.dtype_of_numpy(_np.dtype(x))
    except TypeError:
        d = None
    if d is None:
        raise _C.Error("[jobflow] no engine dtype for %r (float32, float64, int32, int64, int8, uint8, bool)" % (x,))
    return d


def numpy_dtype(x):
    return _np.dtype(_C.numpy_dtype(as_dtype(x)))
