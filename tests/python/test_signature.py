# OneFlow's signature tests (oneflow/python/test/ops/
# test_global_function_signature.py at tag v0.4.0) as Jobflow's own: one
# test per OneFlow case, named as OneFlow names it (test_annotation_*, all
# 28 of v0.4.0), then the ListListNumpy cases OneFlow added after v0.4.0
# and Jobflow's extras. Each job returns its input through one return form
# and the value must arrive intact through that form: synchronously,
# through tp.Callback[...], to flow.watch handlers. Written for Jobflow
# (not copied); the data is not all ones, so a mix-up of items shows, and
# the last three cases, which OneFlow's file calls without
# @flow.global_function, are real jobs here.
from typing import Dict, List, Tuple

import numpy as np
import pytest

import jobflow as flow
import jobflow.typing as oft

DATA = (1.0 + 0.5 * np.arange(10)).astype(np.float32)

# What one argument looks like for each placeholder kind, and how to get
# the array back out of one result of that kind.
ARG = {"Numpy": lambda: DATA, "ListNumpy": lambda: [DATA], "ListListNumpy": lambda: [[DATA]]}
UNWRAP = {"Numpy": lambda r: r, "ListNumpy": lambda r: r[0], "ListListNumpy": lambda r: r[0][0]}


def mirrored_config():
    flow.config.gpu_device_num(1)
    config = flow.FunctionConfig()
    config.default_logical_view(flow.scope.mirrored_view())
    return config


def same(got, want=DATA):
    assert isinstance(got, np.ndarray), type(got)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape)
    assert np.array_equal(got, want), got


def one_device(result):
    """A List* result: one entry per device, and Jobflow runs on one."""
    assert isinstance(result, list) and len(result) == 1, result
    return result


def define(kind, returns, body):
    """A job `foo(x: <kind>.Placeholder((10,))) -> returns` whose body is
    body(x), with OneFlow's config for the kind."""
    P = getattr(oft, kind).Placeholder((10,))

    def foo(x: P) -> returns:
        return body(x)

    config = mirrored_config() if kind != "Numpy" else None
    return flow.global_function(function_config=config)(foo)


def call_with_callback(job, *args):
    got = []
    job(*args)(got.append)
    job.sync()
    assert len(got) == 1  # one callback per call
    return got[0]


# ---- OneFlow v0.4.0, case by case ----

def test_annotation_return_None():
    flow.config.gpu_device_num(1)

    @flow.global_function()
    def foo(x: oft.Numpy.Placeholder((10,))) -> None:
        pass

    assert foo(DATA) is None


def test_annotation_Numpy():
    foo = define("Numpy", oft.Numpy, lambda x: x)
    same(foo(DATA))


def test_annotation_ListNumpy():
    foo = define("ListNumpy", oft.ListNumpy, lambda x: x)
    same(one_device(foo([DATA]))[0])


def watched(kind):
    seen = []

    def Watch(x: getattr(oft, kind)):  # the handler's annotation picks the form it gets
        seen.append(x)

    def body(x):
        flow.watch(x, Watch)
        return x

    foo = define(kind, getattr(oft, kind), body)
    foo(ARG[kind]())
    foo(ARG[kind]())
    assert len(seen) == 2  # after every call
    return seen


def test_annotation_watch_Numpy():
    seen = watched("Numpy")
    same(seen[0])
    same(seen[1])


def test_annotation_watch_ListNumpy():
    seen = watched("ListNumpy")
    same(one_device(seen[0])[0])


def test_annotation_Dict_Numpy():
    foo = define("Numpy", Dict[str, oft.Numpy], lambda x: {"x": x})
    r = foo(DATA)
    assert list(r) == ["x"]
    same(r["x"])


def test_annotation_Dict_ListNumpy():
    foo = define("ListNumpy", Dict[str, oft.ListNumpy], lambda x: {"x": x})
    same(one_device(foo([DATA])["x"])[0])


def test_annotation_Dict_Nesting_Numpy():
    foo = define("Numpy", Dict[str, Dict[str, oft.Numpy]], lambda x: {"x": {"x": x}})
    same(foo(DATA)["x"]["x"])


def test_annotation_Dict_Nesting_ListNumpy():
    foo = define("ListNumpy", Dict[str, Dict[str, oft.ListNumpy]], lambda x: {"x": {"x": x}})
    same(one_device(foo([DATA])["x"]["x"])[0])


def tuple_job(kind):
    """OneFlow's Tuple cases: a Tuple placeholder in, the same tuple out."""
    P = getattr(oft, kind).Placeholder((10,))

    def foo(x: Tuple[P]) -> Tuple[getattr(oft, kind)]:
        return x

    return flow.global_function(function_config=mirrored_config())(foo)


def test_annotation_Tuple_Numpy():
    r = tuple_job("Numpy")((DATA,))
    assert isinstance(r, tuple) and len(r) == 1
    same(r[0])


def test_annotation_Tuple_ListNumpy():
    r = tuple_job("ListNumpy")(([DATA],))
    assert isinstance(r, tuple) and len(r) == 1
    same(one_device(r[0])[0])


def test_annotation_Callback_Numpy():
    foo = define("Numpy", oft.Callback[oft.Numpy], lambda x: x)
    same(call_with_callback(foo, DATA))


def test_annotation_Callback_ListNumpy():
    foo = define("ListNumpy", oft.Callback[oft.ListNumpy], lambda x: x)
    same(one_device(call_with_callback(foo, [DATA]))[0])


def test_annotation_Callback_Tuple_Numpy():
    foo = define("Numpy", oft.Callback[Tuple[oft.Numpy]], lambda x: (x,))
    r = call_with_callback(foo, DATA)
    assert isinstance(r, tuple) and len(r) == 1
    same(r[0])


def test_annotation_Callback_Tuple_ListNumpy():
    foo = define("ListNumpy", oft.Callback[Tuple[oft.ListNumpy]], lambda x: (x,))
    r = call_with_callback(foo, [DATA])
    assert isinstance(r, tuple) and len(r) == 1
    same(one_device(r[0])[0])


def test_annotation_Bundle_Numpy():
    same(define("Numpy", oft.Bundle[oft.Numpy], lambda x: x)(DATA))


def test_annotation_Bundle_List_Numpy():
    r = define("Numpy", oft.Bundle[oft.Numpy], lambda x: [x])(DATA)
    assert isinstance(r, list) and len(r) == 1
    same(r[0])


def test_annotation_Bundle_Dict_Numpy():
    r = define("Numpy", oft.Bundle[oft.Numpy], lambda x: {"x": x})(DATA)
    assert list(r) == ["x"]
    same(r["x"])


def test_annotation_Bundle_Tuple_Numpy():
    r = define("Numpy", oft.Bundle[oft.Numpy], lambda x: (x,))(DATA)
    assert isinstance(r, tuple) and len(r) == 1
    same(r[0])


def mix_nesting(kind):
    """(x, (x,), [x, x, x], {"x": {256: x}}) through Bundle[<kind>]."""
    foo = define(kind, oft.Bundle[getattr(oft, kind)], lambda x: (x, (x,), [x, x, x], {"x": {256: x}}))
    r = foo(ARG[kind]())
    u = UNWRAP[kind]
    assert isinstance(r, tuple) and len(r) == 4
    assert isinstance(r[1], tuple) and isinstance(r[2], list) and len(r[2]) == 3
    same(u(r[0]))
    same(u(r[1][0]))
    for item in r[2]:
        same(u(item))
    assert list(r[3]["x"]) == [256]  # an int key stays an int
    same(u(r[3]["x"][256]))


def test_annotation_Bundle_Mix_Nesting_Numpy():
    mix_nesting("Numpy")


def test_annotation_Bundle_ListNumpy():
    r = define("ListNumpy", oft.Bundle[oft.ListNumpy], lambda x: x)([DATA])
    same(one_device(r)[0])


def test_annotation_Bundle_List_ListNumpy():
    r = define("ListNumpy", oft.Bundle[oft.ListNumpy], lambda x: [x])([DATA])
    assert isinstance(r, list) and len(r) == 1
    same(one_device(r[0])[0])


def test_annotation_Bundle_Dict_ListNumpy():
    r = define("ListNumpy", oft.Bundle[oft.ListNumpy], lambda x: {"x": x})([DATA])
    same(one_device(r["x"])[0])


def test_annotation_Bundle_Tuple_ListNumpy():
    r = define("ListNumpy", oft.Bundle[oft.ListNumpy], lambda x: (x,))([DATA])
    assert isinstance(r, tuple) and len(r) == 1
    same(one_device(r[0])[0])


def test_annotation_Bundle_Mix_Nesting_ListNumpy():
    mix_nesting("ListNumpy")


def test_annotation_return_List_Numpy():
    flow.clear_default_session()
    flow.config.gpu_device_num(1)

    @flow.global_function()
    def foo(x: oft.Numpy.Placeholder(shape=DATA.shape)) -> List[oft.Numpy]:
        return [x, x * 2.0, x]

    r = foo(DATA)
    assert isinstance(r, list) and len(r) == 3
    x, y, z = r
    same(x)
    same(y, DATA * 2)
    same(z)


def test_annotation_return_List_ListNumpy():
    flow.clear_default_session()

    @flow.global_function(function_config=mirrored_config())
    def foo(x: oft.ListNumpy.Placeholder(shape=DATA.shape)) -> List[oft.ListNumpy]:
        return [x, x]

    r = foo([DATA])
    assert isinstance(r, list) and len(r) == 2
    x, y = r
    same(one_device(x)[0])
    same(one_device(y)[0])


def test_annotation_return_List_Nesting_Tuple():
    rng = np.random.default_rng(4)
    x = rng.random(5, dtype=np.float32)
    y = rng.random(10, dtype=np.float32)
    flow.clear_default_session()

    @flow.global_function(function_config=mirrored_config())
    def foo(
        a: oft.Numpy.Placeholder(shape=x.shape),
        b: oft.ListNumpy.Placeholder(shape=y.shape),
    ) -> Tuple[List[oft.Numpy], List[oft.ListNumpy]]:
        return ([a, a, a], [b, b])

    x_list, y_list = foo(x, [y])
    assert len(x_list) == 3 and len(y_list) == 2
    for item in x_list:
        same(item, x)
    for item in y_list:
        same(one_device(item)[0], y)


def test_all_of_oneflow_v0_4_0_cases_are_here():
    # The 28 cases of OneFlow v0.4.0's file; a renamed or dropped one fails.
    cases = """return_None Numpy ListNumpy watch_Numpy watch_ListNumpy Dict_Numpy Dict_ListNumpy
        Dict_Nesting_Numpy Dict_Nesting_ListNumpy Tuple_Numpy Tuple_ListNumpy Callback_Numpy
        Callback_ListNumpy Callback_Tuple_Numpy Callback_Tuple_ListNumpy Bundle_Numpy Bundle_List_Numpy
        Bundle_Dict_Numpy Bundle_Tuple_Numpy Bundle_Mix_Nesting_Numpy Bundle_ListNumpy Bundle_List_ListNumpy
        Bundle_Dict_ListNumpy Bundle_Tuple_ListNumpy Bundle_Mix_Nesting_ListNumpy return_List_Numpy
        return_List_ListNumpy return_List_Nesting_Tuple""".split()
    assert len(cases) == 28
    missing = [c for c in cases if not callable(globals().get("test_annotation_" + c))]
    assert missing == []


# ---- the ListListNumpy cases OneFlow added after v0.4.0 ----

LL = "ListListNumpy"


def test_annotation_ListListNumpy():
    same(UNWRAP[LL](one_device(define(LL, oft.ListListNumpy, lambda x: x)([[DATA]]))))


def test_annotation_watch_ListListNumpy():
    seen = watched(LL)
    same(UNWRAP[LL](one_device(seen[0])))


def test_annotation_Dict_ListListNumpy():
    same(UNWRAP[LL](define(LL, Dict[str, oft.ListListNumpy], lambda x: {"x": x})([[DATA]])["x"]))


def test_annotation_Dict_Nesting_ListListNumpy():
    foo = define(LL, Dict[str, Dict[str, oft.ListListNumpy]], lambda x: {"x": {"x": x}})
    same(UNWRAP[LL](foo([[DATA]])["x"]["x"]))


def test_annotation_Tuple_ListListNumpy():
    r = tuple_job(LL)(([[DATA]],))
    same(UNWRAP[LL](r[0]))


def test_annotation_Callback_ListListNumpy():
    same(UNWRAP[LL](call_with_callback(define(LL, oft.Callback[oft.ListListNumpy], lambda x: x), [[DATA]])))


def test_annotation_Callback_Tuple_ListListNumpy():
    foo = define(LL, oft.Callback[Tuple[oft.ListListNumpy]], lambda x: (x,))
    same(UNWRAP[LL](call_with_callback(foo, [[DATA]])[0]))


@pytest.mark.parametrize("form", ["single", "list", "dict", "tuple"])
def test_annotation_Bundle_ListListNumpy(form):
    make, get = {"single": (lambda x: x, lambda r: r), "list": (lambda x: [x], lambda r: r[0]),
                 "dict": (lambda x: {"x": x}, lambda r: r["x"]), "tuple": (lambda x: (x,), lambda r: r[0])}[form]
    same(UNWRAP[LL](get(define(LL, oft.Bundle[oft.ListListNumpy], make)([[DATA]]))))


def test_annotation_Bundle_Mix_Nesting_ListListNumpy():
    mix_nesting(LL)


# ---- Jobflow's own ----

def test_tp_dict_is_typing_dict():
    @flow.global_function()
    def foo(x: oft.Numpy.Placeholder((10,))) -> oft.Dict[str, oft.Numpy]:
        return {"x": x, "y": x * 2.0}

    r = foo(DATA)
    assert sorted(r) == ["x", "y"]
    same(r["y"], DATA * 2)


def test_callback_bundle_mix():
    @flow.global_function()
    def foo(x: oft.Numpy.Placeholder((10,))) -> oft.Callback[oft.Bundle[oft.Numpy]]:
        return (x, [x, x], {"x": {256: x}})

    r = call_with_callback(foo, DATA)
    same(r[2]["x"][256])
    same(r[1][1])


def test_callback_of_each_result_type():
    # tp.Callback of every return annotation of the issue: Numpy, ListNumpy,
    # ListListNumpy (above), tp.Dict, tuples, lists; the callback gets
    # NumPy arrays in that structure.
    @flow.global_function(function_config=mirrored_config())
    def foo(x: oft.Numpy.Placeholder((10,)),
            y: oft.ListNumpy.Placeholder((10,))) -> oft.Callback[oft.Dict[str, Tuple[oft.Numpy, oft.ListNumpy]]]:
        return {"a": (x, y), "b": (x * 2.0, y)}

    r = call_with_callback(foo, DATA, [DATA * 3])
    assert sorted(r) == ["a", "b"]
    same(r["a"][0])
    same(one_device(r["a"][1])[0], DATA * 3)
    same(r["b"][0], DATA * 2)


def test_callback_list():
    @flow.global_function()
    def foo(x: oft.Numpy.Placeholder((10,))) -> oft.Callback[List[oft.Numpy]]:
        return [x, x * 2.0]

    r = call_with_callback(foo, DATA)
    assert isinstance(r, list) and len(r) == 2
    same(r[1], DATA * 2)


def test_list_list_numpy_of_several_items():
    @flow.global_function()
    def foo(x: oft.ListListNumpy.Placeholder((2, 3), items=4)) -> oft.ListListNumpy:
        return x * 2.0

    items = [np.full((2, 3), i, np.float32) for i in range(4)]
    r = foo([items])
    assert len(r) == 1 and len(r[0]) == 4
    for i in range(4):
        same(r[0][i], items[i] * 2)


def test_results_are_fresh_arrays():
    @flow.global_function()
    def foo(x: oft.Numpy.Placeholder((10,))) -> Tuple[oft.Numpy, oft.Numpy]:
        return x, x

    a, b = foo(DATA)
    a[0] = -1  # writable, owned by the caller, not shared with the input or each other
    assert DATA[0] == 1.0 and b[0] == 1.0
