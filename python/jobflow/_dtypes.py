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
int16 = DType.int16
uint16 = DType.uint16
uint32 = DType.uint32
uint64 = DType.uint64
# Storage types: placeholders, returns and cast take them; other ops need a
# cast to float32 first. bfloat16 has no NumPy dtype: a Python job cannot take
# or return it (cast inside the job from and to float32).
float16 = DType.float16
bfloat16 = DType.bfloat16

_BY_NAME = {
    "float": float32, "float32": float32, "double": float64, "float64": float64,
    "int32": int32, "int64": int64, "int8": int8, "char": int8, "uint8": uint8,
    "bool": bool_, "int16": int16, "uint16": uint16, "uint32": uint32, "uint64": uint64,
    "float16": float16, "half": float16, "bfloat16": bfloat16,
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
        raise _C.Error("[jobflow] no engine dtype for %r (float16/32/64, int8/16/32/64, uint8/16/32/64, bool)" % (x,))
    return d


def numpy_dtype(x):
    return _np.dtype(_C.numpy_dtype(as_dtype(x)))
