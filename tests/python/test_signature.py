# OneFlow's signature tests (test_global_function_signature.py, v0.4) as
# Jobflow's own: every job returns its input through one return form, and
# the value must arrive intact through that form, synchronously, through
# tp.Callback[...], and to flow.watch handlers. The cases are OneFlow's;
# the data is not all ones, so a mix-up of items shows.
from typing import Dict, Tuple

import numpy as np
import pytest

import jobflow as flow
import jobflow.typing as tp

DATA = (1.0 + 0.5 * np.arange(10)).astype(np.float32)


def mirrored_config():
    config = flow.FunctionConfig()
    config.default_logical_view(flow.scope.mirrored_view())
    return config


def same(got, want=DATA):
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)


# What one argument looks like for each placeholder kind, and how to get
# the array back out of one result of that kind.
ARG = {"Numpy": lambda: DATA, "ListNumpy": lambda: [DATA], "ListListNumpy": lambda: [[DATA]]}
UNWRAP = {"Numpy": lambda r: r, "ListNumpy": lambda r: r[0], "ListListNumpy": lambda r: r[0][0]}
KINDS = ["Numpy", "ListNumpy", "ListListNumpy"]


def placeholder(kind):
    return getattr(tp, kind).Placeholder((10,))


def call_with_callback(job, *args):
    got = []
    job(*args)(got.append)
    job.sync()
    assert len(got) == 1
    return got[0]


def test_return_None():
    flow.config.gpu_device_num(1)

    @flow.global_function()
    def foo(x: tp.Numpy.Placeholder((10,))) -> None:
        pass

    assert foo(DATA) is None


@pytest.mark.parametrize("kind", KINDS)
def test_plain(kind):
    P, R = placeholder(kind), getattr(tp, kind)

    @flow.global_function(function_config=mirrored_config())
    def foo(x: P) -> R:
        return x

    result = foo(ARG[kind]())
    if kind != "Numpy":
        assert isinstance(result, list) and len(result) == 1  # one device
    same(UNWRAP[kind](result))


@pytest.mark.parametrize("kind", KINDS)
def test_watch(kind):
    P, R = placeholder(kind), getattr(tp, kind)
    seen = []

    def Watch(x: R):
        seen.append(UNWRAP[kind](x))

    @flow.global_function(function_config=mirrored_config())
    def foo(x: P) -> R:
        flow.watch(x, Watch)
        return x

    foo(ARG[kind]())
    foo(ARG[kind]())
    assert len(seen) == 2  # after every call
    same(seen[0])


@pytest.mark.parametrize("kind", KINDS)
def test_dict(kind):
    P, R = placeholder(kind), getattr(tp, kind)

    @flow.global_function(function_config=mirrored_config())
    def foo(x: P) -> Dict[str, R]:
        return {"x": x}

    same(UNWRAP[kind](foo(ARG[kind]())["x"]))


@pytest.mark.parametrize("kind", KINDS)
def test_dict_nesting(kind):
    P, R = placeholder(kind), getattr(tp, kind)

    @flow.global_function(function_config=mirrored_config())
    def foo(x: P) -> Dict[str, Dict[str, R]]:
        return {"x": {"x": x}}

    same(UNWRAP[kind](foo(ARG[kind]())["x"]["x"]))


def test_tp_dict_is_typing_dict():
    @flow.global_function()
    def foo(x: tp.Numpy.Placeholder((10,))) -> tp.Dict[str, tp.Numpy]:
        return {"x": x, "y": x * 2.0}

    r = foo(DATA)
    assert sorted(r) == ["x", "y"]
    same(r["y"], DATA * 2)


@pytest.mark.parametrize("kind", KINDS)
def test_tuple(kind):
    P, R = placeholder(kind), getattr(tp, kind)

    @flow.global_function(function_config=mirrored_config())
    def foo(x: Tuple[P]) -> Tuple[R]:
        return x

    r = foo((ARG[kind](),))
    assert isinstance(r, tuple) and len(r) == 1
    same(UNWRAP[kind](r[0]))


@pytest.mark.parametrize("kind", KINDS)
def test_callback(kind):
    P, R = placeholder(kind), getattr(tp, kind)

    @flow.global_function(function_config=mirrored_config())
    def foo(x: P) -> tp.Callback[R]:
        return x

    same(UNWRAP[kind](call_with_callback(foo, ARG[kind]())))


@pytest.mark.parametrize("kind", KINDS)
def test_callback_tuple(kind):
    P, R = placeholder(kind), getattr(tp, kind)

    @flow.global_function(function_config=mirrored_config())
    def foo(x: P) -> tp.Callback[Tuple[R]]:
        return (x,)

    r = call_with_callback(foo, ARG[kind]())
    assert isinstance(r, tuple)
    same(UNWRAP[kind](r[0]))


BUNDLES = {
    "single": (lambda x: x, lambda r: r),
    "list": (lambda x: [x], lambda r: r[0]),
    "dict": (lambda x: {"x": x}, lambda r: r["x"]),
    "tuple": (lambda x: (x,), lambda r: r[0]),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("form", sorted(BUNDLES))
def test_bundle(kind, form):
    P, R = placeholder(kind), getattr(tp, kind)
    make, get = BUNDLES[form]

    @flow.global_function(function_config=mirrored_config())
    def foo(x: P) -> tp.Bundle[R]:
        return make(x)

    same(UNWRAP[kind](get(foo(ARG[kind]()))))


@pytest.mark.parametrize("kind", KINDS)
def test_bundle_mix_nesting(kind):
    P, R = placeholder(kind), getattr(tp, kind)

    @flow.global_function(function_config=mirrored_config())
    def foo(x: P) -> tp.Bundle[R]:
        return (x, (x,), [x, x, x], {"x": {256: x}})

    r = foo(ARG[kind]())
    u = UNWRAP[kind]
    same(u(r[0]))
    same(u(r[1][0]))
    for i in range(3):
        same(u(r[2][i]))
    same(u(r[3]["x"][256]))  # an int key stays an int


def test_callback_bundle_mix():
    @flow.global_function()
    def foo(x: tp.Numpy.Placeholder((10,))) -> tp.Callback[tp.Bundle[tp.Numpy]]:
        return (x, [x, x], {"x": {256: x}})

    r = call_with_callback(foo, DATA)
    same(r[2]["x"][256])
    same(r[1][1])


def test_list_list_numpy_of_several_items():
    @flow.global_function()
    def foo(x: tp.ListListNumpy.Placeholder((2, 3), items=4)) -> tp.ListListNumpy:
        return x * 2.0

    items = [np.full((2, 3), i, np.float32) for i in range(4)]
    r = foo([items])
    assert len(r) == 1 and len(r[0]) == 4
    for i in range(4):
        same(r[0][i], items[i] * 2)


def test_results_are_fresh_arrays():
    @flow.global_function()
    def foo(x: tp.Numpy.Placeholder((10,))) -> Tuple[tp.Numpy, tp.Numpy]:
        return x, x

    a, b = foo(DATA)
    a[0] = -1  # writable, owned by the caller, not shared with the input or each other
    assert DATA[0] == 1.0 and b[0] == 1.0
