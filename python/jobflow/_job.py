"""Defining and calling job functions: @flow.global_function, FunctionConfig,
the older @flow.function API, flow.watch.

A job function's body runs once, at definition, under the engine's
JobBuilder (the one the C++ flow::global_function uses): its parameters are
placeholder Blobs, every op adds a node, and the graph is compiled. Calls
then pass NumPy arrays to the compiled job; the body never runs again.
"""
import inspect
import itertools
import threading
import typing as _typing

import numpy as np

from . import _jobflow as _C
from . import typing as tp
from ._dtypes import as_dtype

_LEAVES = {tp.Numpy: "numpy", tp.ListNumpy: "list", tp.ListListNumpy: "listlist"}


class _TrainConfig:
    """The older API's training settings: config.train.primary_lr(0.1),
    config.train.model_update_conf({"naive_conf": {}})."""

    def __init__(self):
        self._lr = None
        self._update = None

    def primary_lr(self, lr):
        self._lr = float(lr)
        return self

    def model_update_conf(self, conf):
        if not isinstance(conf, dict) or len(conf) != 1:
            raise _C.Error("[function_config.train.model_update_conf] expected one of {'naive_conf': {}}, "
                           "{'momentum_conf': {'beta': 0.9}}, {'adam_conf': {...}}, got %r" % (conf,))
        self._update = dict(conf)
        return self

    @property
    def enabled(self):
        return self._lr is not None or self._update is not None

    def optimizer(self):
        from . import optimizer
        sched = optimizer.PiecewiseConstantScheduler([], [self._lr if self._lr is not None else 0.1])
        (kind, args), = (self._update or {"naive_conf": {}}).items()
        args = args or {}
        if kind == "naive_conf":
            return optimizer.SGD(sched, momentum=0)
        if kind == "momentum_conf":
            return optimizer.SGD(sched, momentum=args.get("beta", 0.9))
        if kind == "adam_conf":
            return optimizer.Adam(sched, beta1=args.get("beta1", 0.9), beta2=args.get("beta2", 0.999),
                                  epsilon=args.get("epsilon", 1e-8))
        raise _C.Error("[function_config.train.model_update_conf] unknown '%s' (naive_conf, momentum_conf, adam_conf)"
                       % kind)


class FunctionConfig:
    """flow.FunctionConfig() / flow.function_config(): the settings of a job.

    OneFlow's: default_data_type, default_logical_view,
    enable_auto_mixed_precision (convolutions in bfloat16 where the CPU runs
    them faster than float32: AMX, or fast AVX512_BF16 dot products, as in
    C++), and for the older API train.primary_lr /
    train.model_update_conf. Jobflow's (as in C++): default_placement,
    max_in_flight, num_threads, seed, enable_fusion, name, summary_dir.
    Every setter returns the config.
    """

    def __init__(self):
        self._dtype = None
        self._logical_view = None
        self._amp = False
        self._placement = None
        self._max_in_flight = None
        self._num_threads = None
        self._seed = None
        self._fusion = None
        self._name = None
        self._summary_dir = None
        self.train = _TrainConfig()

    def default_data_type(self, dtype):
        self._dtype = as_dtype(dtype)
        return self

    def default_logical_view(self, view):
        self._logical_view = view
        return self

    def enable_auto_mixed_precision(self, enabled=True):
        self._amp = bool(enabled)
        return self

    def default_placement(self, device, ids="0:0"):
        self._placement = (device, ids)
        return self

    def max_in_flight(self, n):
        self._max_in_flight = int(n)
        return self

    def num_threads(self, n):
        self._num_threads = int(n)
        return self

    def seed(self, s):
        self._seed = int(s)
        return self

    def enable_fusion(self, enabled=True):
        self._fusion = bool(enabled)
        return self

    def name(self, name):
        self._name = str(name)
        return self

    def summary_dir(self, path):
        self._summary_dir = str(path)
        return self

    def __getattr__(self, attr):
        raise AttributeError("[FunctionConfig] Jobflow has no setting '%s' (it has default_data_type, "
                             "default_logical_view, enable_auto_mixed_precision, train.primary_lr, "
                             "train.model_update_conf, default_placement, max_in_flight, num_threads, seed, "
                             "enable_fusion, name, summary_dir)" % attr)

    def _cpp(self, name):
        c = _C.FunctionConfig()
        if self._dtype is not None:
            c.set_default_data_type(self._dtype)
        if self._placement is not None:
            c.set_default_placement(*self._placement)
        if self._max_in_flight is not None:
            c.set_max_in_flight(self._max_in_flight)
        if self._num_threads is not None:
            c.set_num_threads(self._num_threads)
        if self._seed is not None:
            c.set_seed(self._seed)
        if self._fusion is not None:
            c.set_enable_fusion(self._fusion)
        if self._amp:
            c.set_enable_auto_mixed_precision(True)
        if self._summary_dir is not None:
            c.set_summary_dir(self._summary_dir)
        c.set_name(name)
        return c


def function_config():
    return FunctionConfig()


# ---- the body being defined ----

class _Definition:
    def __init__(self, name, legacy, config):
        self.name = name
        self.legacy = legacy
        self.config = config
        self.watches = []
        self.losses = []


_local = threading.local()  # bodies being defined on this thread (jobs may be defined on several)


def _defining():
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def current_definition(what):
    stack = _defining()
    if not stack:
        raise _C.Error("[%s] called outside a job function body" % what)
    return stack[-1]


def watch(blob, handler):
    """flow.watch(blob, handler): after every call, handler receives the
    blob's value (a NumPy array; a list if its annotation is tp.ListNumpy)."""
    d = current_definition("watch")
    if not isinstance(blob, _C.Blob):
        raise _C.Error("[watch] expected a Blob, got %s" % type(blob).__name__)
    kind = "numpy"
    try:
        params = list(inspect.signature(handler).parameters.values())
        if params and params[0].annotation in _LEAVES:
            kind = _LEAVES[params[0].annotation]
    except (TypeError, ValueError):
        pass
    d.watches.append((blob, kind, handler))


# ---- annotations -> placeholders and result structure ----

class FixedTensorDef:
    """The older API's placeholder, given as a parameter's default value."""

    leaf = "numpy"

    def __init__(self, shape, dtype=None, batch_axis=0, name=None):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = None if dtype is None else as_dtype(dtype)
        self.name = name
        self.items = 1


class MirroredTensorDef(FixedTensorDef):
    leaf = "list"


class MirroredTensorListDef(FixedTensorDef):
    leaf = "listlist"


def _spec(ann, name, job):
    if isinstance(ann, type) and issubclass(ann, tp.PlaceholderDef):
        return _C.placeholder(ann.leaf, list(ann.shape), ann.dtype, name, ann.items)
    if isinstance(ann, FixedTensorDef):
        return _C.placeholder(ann.leaf, list(ann.shape), ann.dtype, ann.name or name, ann.items)
    if _typing.get_origin(ann) is tuple:
        items = [a for a in _typing.get_args(ann)]
        return _C.tuple_placeholder([_spec(a, "%s[%d]" % (name, i), job) for i, a in enumerate(items)], name)
    if ann is inspect.Parameter.empty:
        raise _C.Error("[global_function] parameter '%s' of job '%s' needs a placeholder annotation, e.g. "
                       "tp.Numpy.Placeholder((10,), dtype=flow.float)" % (name, job))
    raise _C.Error("[global_function] parameter '%s' of job '%s': %r is not a placeholder "
                   "(tp.Numpy.Placeholder, tp.ListNumpy.Placeholder, tp.ListListNumpy.Placeholder, a Tuple of them)"
                   % (name, job, ann))


def _arg_of(spec_ann, builder, counter):
    """The body's argument: a Blob, or a tuple of them for a Tuple placeholder."""
    if _typing.get_origin(spec_ann) is tuple:
        return tuple(_arg_of(a, builder, counter) for a in _typing.get_args(spec_ann))
    return builder.input(next(counter))


# A result annotation, parsed: ("leaf", kind) | ("tuple", [..]) | ("tuple*", t)
# | ("list", t) | ("dict", t) | ("bundle", kind) | ("none",) | ("any",)
def _result_kind(ann, job):
    if ann is inspect.Signature.empty:
        return ("any",)
    if ann is None or ann is type(None):
        return ("none",)
    if ann in _LEAVES:
        return ("leaf", _LEAVES[ann])
    origin = _typing.get_origin(ann)
    args = _typing.get_args(ann)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return ("tuple*", _result_kind(args[0], job))
        return ("tuple", [_result_kind(a, job) for a in args])
    if origin is list:
        return ("list", _result_kind(args[0], job) if args else ("any",))
    if origin is dict:
        return ("dict", _result_kind(args[1], job) if len(args) == 2 else ("any",))
    if origin is tp.Bundle:
        leaf = _LEAVES.get(args[0]) if args else "numpy"
        if leaf is None:
            raise _C.Error("[global_function] job '%s': tp.Bundle[...] takes tp.Numpy, tp.ListNumpy or "
                           "tp.ListListNumpy, got %r" % (job, args[0]))
        return ("bundle", leaf)
    raise _C.Error("[global_function] job '%s': the return annotation %r is not one of tp.Numpy, tp.ListNumpy, "
                   "tp.ListListNumpy, Tuple[...], Dict[str, ...], List[...], tp.Bundle[...], tp.Callback[...], None"
                   % (job, ann))


def _describe(kind):
    tag = kind[0]
    if tag == "leaf":
        return {"numpy": "tp.Numpy", "list": "tp.ListNumpy", "listlist": "tp.ListListNumpy"}[kind[1]]
    return {"tuple": "a Tuple", "tuple*": "a Tuple", "list": "a List", "dict": "a Dict", "bundle": "a tp.Bundle",
            "none": "None", "any": "anything"}[tag]


def _what(value):
    if isinstance(value, _C.Blob):
        return "a Blob"
    if value is None:
        return "None"
    return "a " + type(value).__name__


def _flatten(value, kind, outputs, job):
    def leaf(v, k):
        if not isinstance(v, _C.Blob):
            raise _C.Error("[global_function] job '%s' returns %s where a Blob was declared (%s)"
                           % (job, _what(v), _describe(("leaf", k))))
        outputs.append(v)
        return ("leaf", k, len(outputs) - 1)

    def nested(v, k):  # bundle / undeclared: any nesting of blobs
        if isinstance(v, _C.Blob):
            return leaf(v, k)
        if isinstance(v, tuple):
            return ("tuple", [nested(x, k) for x in v])
        if isinstance(v, list):
            return ("list", [nested(x, k) for x in v])
        if isinstance(v, dict):
            return ("dict", [(key, nested(x, k)) for key, x in v.items()])
        raise _C.Error("[global_function] job '%s' returns %s; a job returns Blobs, or tuples, lists and dicts "
                       "of them" % (job, _what(v)))

    tag = kind[0]
    if tag == "any":
        return ("none",) if value is None else nested(value, "numpy")
    if tag == "none":
        if value is not None:
            raise _C.Error("[global_function] job '%s' is declared -> None but returns %s" % (job, _what(value)))
        return ("none",)
    if tag == "leaf":
        return leaf(value, kind[1])
    if tag == "bundle":
        return nested(value, kind[1])
    if tag in ("tuple", "tuple*"):
        if not isinstance(value, (tuple, list)):
            raise _C.Error("[global_function] job '%s' is declared -> Tuple but returns %s" % (job, _what(value)))
        kinds = kind[1] if tag == "tuple" else [kind[1]] * len(value)
        if len(kinds) != len(value):
            raise _C.Error("[global_function] job '%s' is declared -> a Tuple of %d but returns %d values"
                           % (job, len(kinds), len(value)))
        return ("tuple", [_flatten(v, k, outputs, job) for v, k in zip(value, kinds)])
    if tag == "list":
        if not isinstance(value, (list, tuple)):
            raise _C.Error("[global_function] job '%s' is declared -> List but returns %s" % (job, _what(value)))
        return ("list", [_flatten(v, kind[1], outputs, job) for v in value])
    if tag == "dict":
        if not isinstance(value, dict):
            raise _C.Error("[global_function] job '%s' is declared -> Dict but returns %s" % (job, _what(value)))
        return ("dict", [(k, _flatten(v, kind[1], outputs, job)) for k, v in value.items()])
    raise AssertionError(kind)


def _define(func, job_type, config, legacy):
    if config is None:
        config = FunctionConfig()
    if not isinstance(config, FunctionConfig):
        raise _C.Error("[global_function] function_config must be a flow.FunctionConfig(), got %s"
                       % type(config).__name__)
    # The job is named after the function, as in OneFlow (names need not be
    # unique: two train jobs of one name share their step counter).
    name = config._name or getattr(func, "__name__", "job")
    sig = inspect.signature(func, eval_str=True)
    params = list(sig.parameters.values())
    anns = [(p.default if legacy and p.annotation is inspect.Parameter.empty else p.annotation) for p in params]
    specs = [_spec(a, p.name, name) for a, p in zip(anns, params)]

    ret = sig.return_annotation
    callback = _typing.get_origin(ret) is tp.Callback
    if callback:
        args = _typing.get_args(ret)
        ret = args[0] if args else inspect.Signature.empty
    if ret is tp.Callback:
        callback, ret = True, inspect.Signature.empty
    kind = _result_kind(ret, name)

    if legacy:
        job_type = "train" if config.train.enabled else "predict"
    if job_type not in ("train", "predict"):
        raise _C.Error("[global_function] type must be \"train\" or \"predict\", got %r" % (job_type,))
    builder = _C.JobBuilder(_C.JobType.train if job_type == "train" else _C.JobType.predict,
                            config._cpp(name), specs)
    d = _Definition(name, legacy, config)
    _defining().append(d)
    builder.enter()
    try:
        counter = itertools.count()
        value = func(*[_arg_of(a, builder, counter) for a in anns])
        if d.losses:
            if not config.train.enabled:
                raise _C.Error("[losses.add_loss] job '%s': add_loss needs config.train.primary_lr(...) and "
                               "config.train.model_update_conf(...); or call "
                               "flow.optimizer.SGD(...).minimize(loss) in the body" % name)
            loss = d.losses[0]
            for extra in d.losses[1:]:
                loss = loss + extra
            config.train.optimizer().minimize(loss)
        elif legacy and job_type == "train":
            raise _C.Error("[flow.function] train job '%s' never called flow.losses.add_loss(loss) in its body"
                           % name)
    finally:
        builder.leave()
        _defining().pop()
    outputs = []
    structure = _flatten(value, kind, outputs, name)
    job = builder.finish(outputs, structure, callback, d.watches)
    return job


class GlobalFunction:
    """A job function: call it with NumPy arrays (one per placeholder).

    ``job.sync()`` waits for every call and callback so far; ``job.signature``,
    ``job.plan()`` describe what was compiled.
    """

    def __init__(self, job, func, legacy=False):
        self._job = job
        self._call = job.__call__
        self._legacy = legacy
        self.__wrapped__ = func
        self.__name__ = getattr(func, "__name__", job.name)
        self.__qualname__ = getattr(func, "__qualname__", self.__name__)
        self.__doc__ = getattr(func, "__doc__", None)

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = self._bind(args, kwargs)
        return self._call(*args)

    def _bind(self, args, kwargs):
        return tuple(inspect.signature(self.__wrapped__).bind(*args, **kwargs).args)

    def sync(self):
        self._job.sync()

    @property
    def name(self):
        return self._job.name

    @property
    def signature(self):
        return self._job.signature

    def plan(self):
        return self._job.plan()

    def __repr__(self):
        return "<jobflow job %s>" % self._job.signature


class LegacyArray(np.ndarray):
    """The older API's result: an ndarray that also answers .ndarray()."""

    def ndarray(self):
        return self.view(np.ndarray)


def _legacy(value):
    if isinstance(value, np.ndarray):
        return value.view(LegacyArray)
    if isinstance(value, tuple):
        return tuple(_legacy(v) for v in value)
    if isinstance(value, list):
        return [_legacy(v) for v in value]
    if isinstance(value, dict):
        return {k: _legacy(v) for k, v in value.items()}
    return value


class LegacyResult:
    """What a call of an @flow.function job returns: .get() blocks for the
    result, .async_get(callback) hands it to callback later (in call order)."""

    __slots__ = ("_cb",)

    def __init__(self, callbacker):
        self._cb = callbacker

    def get(self):
        return _legacy(self._cb.get())

    def async_get(self, callback):
        self._cb(lambda r: callback(_legacy(r)))


class LegacyFunction(GlobalFunction):
    def __call__(self, *args, **kwargs):
        if kwargs:
            args = self._bind(args, kwargs)
        return LegacyResult(self._job.call_async(*args))


def global_function(type="predict", function_config=None):
    """@flow.global_function(type="train"|"predict", function_config=None).

    Placeholders are the parameters' annotations (tp.Numpy.Placeholder,
    ...), the result is the return annotation (tp.Numpy, Tuple[...],
    tp.Callback[...], ...). The body runs once, now, and the job compiles.
    """
    if callable(type) and not isinstance(type, str):  # @flow.global_function without ()
        return GlobalFunction(_define(type, "predict", function_config, False), type)

    def decorate(func):
        return GlobalFunction(_define(func, type, function_config, False), func)

    return decorate


def function(function_config=None):
    """The older API (OneFlow 0.1): @flow.function(config) with placeholders
    as defaults (flow.FixedTensorDef); a train job when the config sets
    train.primary_lr / model_update_conf and the body calls
    flow.losses.add_loss(loss). A call returns an object with .get() and
    .async_get(callback)."""
    if callable(function_config) and not isinstance(function_config, FunctionConfig):
        f = function_config
        return LegacyFunction(_define(f, "predict", None, True), f, legacy=True)

    def decorate(func):
        return LegacyFunction(_define(func, "predict", function_config, True), func, legacy=True)

    return decorate
