# The package's API beyond the signatures: arguments (zero-copy, errors
# naming the placeholder), the builder (blobs, ops, layers, placement),
# training, checkpoints, flow.checkpoint, data, settings.
import os
from typing import Tuple

import numpy as np
import pytest

import jobflow as flow
import jobflow.typing as tp
from jobflow import _jobflow

from conftest import make_subset, need_fashion


def identity_job(shape=(4, 3), dtype=flow.float, name="shape_job"):
    config = flow.function_config().name(name)

    @flow.global_function(function_config=config)
    def job(images: tp.Numpy.Placeholder(shape, dtype=dtype)) -> tp.Numpy:
        return images

    return job


# ---- arguments ----

def test_c_contiguous_arrays_are_wrapped_without_a_copy():
    for dt, fdt in ((np.float32, flow.float32), (np.int32, flow.int32)):
        a = np.arange(12, dtype=dt).reshape(3, 4)
        addr, copied = _jobflow._wrap_info(a, fdt)
        assert addr == a.ctypes.data and not copied
        batch = np.zeros((5, 3, 4), dt)[2]  # a batch of a bigger array, as load_mnist gives them
        addr, copied = _jobflow._wrap_info(batch, fdt)
        assert addr == batch.ctypes.data and not copied


def test_a_call_hands_the_engine_the_arrays_own_memory():
    # Through the path every call takes (the job's argument packing): the
    # tensors the engine gets point into the callers' arrays.
    @flow.global_function()
    def job(images: tp.Numpy.Placeholder((4, 1, 2, 2), dtype=flow.float),
            labels: tp.Numpy.Placeholder((4,), dtype=flow.int32),
            pair: Tuple[tp.Numpy.Placeholder((3,), dtype=flow.float),
                        tp.ListNumpy.Placeholder((2,), dtype=flow.int32)]) -> tp.Numpy:
        return labels

    images = np.zeros((3, 4, 1, 2, 2), np.float32)[1]  # one batch of a bigger array, as load_mnist gives
    labels = np.arange(4, dtype=np.int32)
    a, b = np.ones(3, np.float32), np.ones(2, np.int32)
    got = _jobflow._packed_addresses(job._job, (images, labels, (a, [b])))
    assert got == [images.ctypes.data, labels.ctypes.data, a.ctypes.data, b.ctypes.data]
    # A strided array cannot be read in place: it is copied, once.
    strided = np.zeros((4, 1, 2, 4), np.float32)[..., ::2]
    got = _jobflow._packed_addresses(job._job, (strided, labels, (a, [b])))
    assert got[0] != strided.ctypes.data and got[1:] == [labels.ctypes.data, a.ctypes.data, b.ctypes.data]
    np.testing.assert_array_equal(job(images, labels, (a, [b])), labels)


def test_other_arrays_are_converted_once():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    addr, copied = _jobflow._wrap_info(a.T, flow.float32)  # not C-contiguous
    assert copied and addr != a.ctypes.data
    addr, copied = _jobflow._wrap_info([[1.0, 2.0]], flow.float32)  # a list
    assert copied
    addr, copied = _jobflow._wrap_info(a.astype(">f4"), flow.float32)  # big-endian
    assert copied


def test_non_contiguous_and_list_arguments_give_the_same_result():
    job = identity_job((3, 4))
    a = np.arange(12, dtype=np.float32).reshape(4, 3).T
    np.testing.assert_array_equal(job(a), a)
    np.testing.assert_array_equal(job(a.tolist()), a)


def test_an_argument_stays_alive_while_its_call_needs_it():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((1000,))) -> tp.Callback[tp.Numpy]:
        return x * 2.0

    got = []
    for i in range(20):
        job(np.full(1000, i, np.float32))(got.append)  # the array's only reference is the call's
    job.sync()
    assert [float(g[0]) for g in got] == [2.0 * i for i in range(20)]


def test_wrong_dtype_names_the_placeholder():
    job = identity_job((100,), flow.int32, name="train_job")
    with pytest.raises(flow.Error, match=r"^\[train_job\] argument 'images': expected \(100,\) int32, got \(100,\) float32$"):
        job(np.zeros(100, np.float32))


def test_wrong_shape_names_the_placeholder():
    job = identity_job((4, 3))
    with pytest.raises(flow.Error, match=r"\[shape_job\] argument 'images': expected \(4, 3\) float32, got \(4, 2\) float32"):
        job(np.zeros((4, 2), np.float32))


def test_dtype_the_engine_lacks():
    job = identity_job((4, 3))
    with pytest.raises(flow.Error, match=r"\[shape_job\] argument 'images': expected \(4, 3\) float32, got \(4, 3\) float16"):
        job(np.zeros((4, 3), np.float16))


def test_arity_and_kinds():
    job = identity_job((4, 3))
    with pytest.raises(flow.Error, match=r"\[shape_job\] takes 1 arguments, got 2"):
        job(np.zeros((4, 3), np.float32), np.zeros((4, 3), np.float32))
    with pytest.raises(flow.Error, match="a list of tensors was given but the placeholder is Numpy"):
        job([np.zeros((4, 3), np.float32)])

    @flow.global_function(function_config=flow.function_config().name("kind_job"))
    def lists(x: tp.ListNumpy.Placeholder((3,))) -> tp.ListNumpy:
        return x

    with pytest.raises(flow.Error, match="a Tensor was given but the placeholder is ListNumpy"):
        lists(np.zeros(3, np.float32))
    with pytest.raises(flow.Error, match=r"ListNumpy takes one tensor per device \(1 device\), got 2"):
        lists([np.zeros(3, np.float32)] * 2)

    @flow.global_function(function_config=flow.function_config().name("pair_job"))
    def pair(ab: Tuple[tp.Numpy.Placeholder((2, 3)), tp.Numpy.Placeholder((2, 3))]) -> tp.Numpy:
        a, b = ab
        return a + b

    one = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(pair((one, one)), one * 2)
    with pytest.raises(flow.Error, match="a tuple of 1 tensors was given for placeholder tuple of 2"):
        pair((one,))


def test_keyword_arguments():
    @flow.global_function()
    def job(a: tp.Numpy.Placeholder((2,)), b: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return a - b

    a, b = np.array([5, 7], np.float32), np.array([1, 2], np.float32)
    np.testing.assert_array_equal(job(b=b, a=a), a - b)


def test_default_data_type():
    config = flow.function_config()
    config.default_data_type(flow.double)

    @flow.global_function(function_config=config)
    def job(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        return x

    assert job(np.ones(3, np.float64)).dtype == np.float64


# ---- the body ----

def test_the_body_runs_once():
    traced = []

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        traced.append(x)
        assert isinstance(x, flow.Blob) and x.shape == (3,) and x.dtype == flow.float
        return x * 2.0

    np.testing.assert_array_equal(job(np.array([1, 2, 3], np.float32)), [2, 4, 6])
    np.testing.assert_array_equal(job(np.array([4, 5, 6], np.float32)), [8, 10, 12])
    assert len(traced) == 1


def test_ops_match_numpy():
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)

    @flow.global_function()
    def job(a: tp.Numpy.Placeholder((3, 4))) -> Tuple[tp.Numpy, tp.Numpy, tp.Numpy, tp.Numpy, tp.Numpy, tp.Numpy]:
        return (flow.math.reduce_mean(a, axis=1), flow.nn.relu(a), flow.reshape(a, [4, -1]),
                flow.math.add(flow.math.multiply(a, 2.0), 1.0), 10.0 - a, flow.transpose(a, perm=[1, 0]))

    mean, relu, reshaped, affine, rsub, tr = job(x)
    np.testing.assert_allclose(mean, x.mean(axis=1), rtol=1e-6)
    np.testing.assert_array_equal(relu, np.maximum(x, 0))
    assert reshaped.shape == (4, 3)
    np.testing.assert_allclose(affine, x * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(rsub, 10 - x, rtol=1e-6)
    np.testing.assert_array_equal(tr, x.T)


def test_ops_outside_a_body():
    with pytest.raises(flow.Error, match=r"called outside a job function body"):
        flow.constant(1.0, shape=(2,))
    with pytest.raises(flow.Error, match=r"\[losses.add_loss\] called outside a job function body"):
        flow.losses.add_loss(None)


def test_placement_scope():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            return flow.nn.relu(x)

    np.testing.assert_array_equal(job(np.array([-1, 0, 2], np.float32)), [0, 0, 2])
    with pytest.raises(flow.Error, match=r'\[scope.placement\] device must be "cpu" or "gpu", got "tpu"'):
        @flow.global_function()
        def bad(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
            with flow.scope.placement("tpu", "0:0"):
                return x


def test_definition_errors():
    with pytest.raises(flow.Error, match=r"parameter 'x' of job 'nohint' needs a placeholder annotation"):
        @flow.global_function()
        def nohint(x) -> tp.Numpy:
            return x
    with pytest.raises(flow.Error, match=r"job 'twice' is declared -> a Tuple of 2 but returns 1 values"):
        @flow.global_function()
        def twice(x: tp.Numpy.Placeholder((3,))) -> Tuple[tp.Numpy, tp.Numpy]:
            return (x,)
    with pytest.raises(flow.Error, match=r"never called optimizer.minimize\(loss\)"):
        @flow.global_function(type="train")
        def lazy(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
            return x
    with pytest.raises(flow.Error, match=r'type must be "train" or "predict"'):
        @flow.global_function(type="eval")
        def typo(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
            return x
    with pytest.raises(flow.Error, match=r"\[matmul\]"):
        @flow.global_function()
        def shapes(x: tp.Numpy.Placeholder((3, 4))) -> tp.Numpy:
            return flow.matmul(x, x)


def test_jobs_are_named_after_their_function():
    jobs = [identity_job((2,), name="same") for _ in range(2)]
    assert [j.name for j in jobs] == ["same", "same"]

    @flow.global_function()
    def my_job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return x

    assert my_job.name == "my_job" and my_job.__name__ == "my_job"


# ---- training, variables, checkpoints ----

def linear_regression_job(momentum=0.0):
    @flow.global_function(type="train")
    def fit(x: tp.Numpy.Placeholder((64, 3)), y: tp.Numpy.Placeholder((64, 1))) -> tp.Numpy:
        pred = flow.layers.dense(x, 1, kernel_initializer=flow.zeros_initializer(), name="lin")
        loss = flow.math.reduce_mean(flow.math.square(pred - y))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=momentum).minimize(loss)
        return loss

    return fit


def regression_data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.25).astype(np.float32)
    return x, y


def test_training_fits_a_line():
    fit = linear_regression_job()
    x, y = regression_data()
    flow.train.CheckPoint().init()
    losses = [float(fit(x, y)) for _ in range(200)]
    assert losses[-1] < 1e-4 < losses[0]
    w = flow.get_all_variables()["lin-weight"]
    np.testing.assert_allclose(w, [[1.0, -2.0, 0.5]], atol=1e-2)
    np.testing.assert_allclose(flow.get_all_variables()["lin-bias"], [0.25], atol=1e-2)


def test_checkpoint_save_load_and_flow_checkpoint(tmp_path):
    fit = linear_regression_job()
    x, y = regression_data()
    ckpt = flow.train.CheckPoint()
    ckpt.init()
    for _ in range(50):
        fit(x, y)
    trained = flow.get_all_variables()["lin-weight"]
    ckpt.save(str(tmp_path / "model"))
    assert (tmp_path / "model" / "snapshot_done").exists()
    assert "data_type: kFloat" in (tmp_path / "model" / "lin-weight" / "meta").read_text()

    on_disk = flow.checkpoint.get(str(tmp_path / "model"))
    np.testing.assert_array_equal(on_disk["lin-weight"], trained)
    assert on_disk["System-Train-TrainStep-fit"].tolist() == [50]

    ckpt.init()  # back to zeros
    assert not flow.get_all_variables()["lin-weight"].any()
    flow.load_variables(on_disk)
    np.testing.assert_array_equal(flow.get_all_variables()["lin-weight"], trained)

    ckpt.init()
    ckpt.load(str(tmp_path / "model"))
    np.testing.assert_array_equal(flow.get_all_variables()["lin-weight"], trained)
    flow.checkpoint.save(str(tmp_path / "again"))
    np.testing.assert_array_equal(flow.checkpoint.get(str(tmp_path / "again"))["lin-weight"], trained)

    with pytest.raises(flow.Error, match=r"\[load_variables\] no variable named 'nope'"):
        flow.checkpoint.load_variables({"nope": np.zeros(1, np.float32)}, ignore_mismatch=False)
    with pytest.raises(flow.Error, match=r"\[CheckPoint.load\] .*does not exist"):
        ckpt.load(str(tmp_path / "missing"))


def test_adam_and_schedules():
    @flow.global_function(type="train")
    def fit(x: tp.Numpy.Placeholder((64, 3)), y: tp.Numpy.Placeholder((64, 1))) -> tp.Numpy:
        pred = flow.layers.dense(x, 1, name="adam_lin")
        loss = flow.math.reduce_mean(flow.math.square(pred - y))
        sched = flow.optimizer.CosineScheduler(0.1, 300, warmup=flow.optimizer.warmup.linear(10, 0.1))
        flow.optimizer.Adam(sched).minimize(loss)
        return loss

    x, y = regression_data()
    losses = [float(fit(x, y)) for _ in range(300)]
    assert losses[-1] < 0.01 * losses[0]
    assert "adam_lin-weight-m" in flow.get_all_variables()
    sched = flow.optimizer.PiecewiseConstantScheduler([10, 20], [1.0, 0.5, 0.25])
    assert [sched.lr(s) for s in (0, 10, 25)] == [1.0, 0.5, 0.25]
    scaling = flow.optimizer.PiecewiseScalingScheduler(1.0, [10, 20], 0.1)
    assert [round(scaling.lr(s), 6) for s in (0, 10, 25)] == [1.0, 0.1, 0.01]


def test_variables_are_shared_between_jobs_by_name():
    fit = linear_regression_job()

    @flow.global_function()
    def predict(x: tp.Numpy.Placeholder((64, 3))) -> tp.Numpy:
        return flow.layers.dense(x, 1, name="lin")

    x, y = regression_data()
    flow.train.CheckPoint().init()
    for _ in range(200):
        fit(x, y)
    np.testing.assert_allclose(predict(x), y, atol=0.05)


def test_get_variable_and_initializers():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        w = flow.get_variable("w", shape=(2, 3), initializer=flow.constant_initializer(2.0))
        return x * w

    np.testing.assert_array_equal(job(np.ones((2, 3), np.float32)), np.full((2, 3), 2, np.float32))
    for init in (flow.truncated_normal(0.1), flow.random_normal_initializer(), flow.random_uniform_initializer(),
                 flow.xavier_uniform_initializer(), flow.glorot_normal_initializer(), flow.kaiming_initializer()):
        assert isinstance(init, _jobflow.Initializer)


# ---- data and settings ----

def test_load_mnist_shapes(tmp_path):
    need_fashion()
    make_subset(str(tmp_path), 250, 120)
    os.environ["JOBFLOW_DATA"] = str(tmp_path)
    try:
        (train_x, train_y), (test_x, test_y) = flow.data.load_mnist(100)
    finally:
        del os.environ["JOBFLOW_DATA"]
    assert train_x.shape == (2, 100, 1, 28, 28) and train_x.dtype == np.float32
    assert train_y.shape == (2, 100) and train_y.dtype == np.int32
    assert test_x.shape == (1, 100, 1, 28, 28)
    assert 0.0 <= train_x.min() and train_x.max() <= 1.0
    raw = flow.data.read_idx(os.path.join(str(tmp_path), "train-images-idx3-ubyte"))
    np.testing.assert_array_equal(train_x[1, 0, 0], raw[100].astype(np.float32) / np.float32(255))
    (nhwc, _), _ = flow.data.load_mnist(100, 100, data_format="NHWC", out_dir=str(tmp_path))
    assert nhwc.shape == (2, 100, 28, 28, 1)


def test_missing_data_says_how_to_install(tmp_path):
    os.environ["JOBFLOW_DATA"] = str(tmp_path / "none")
    try:
        with pytest.raises(flow.Error, match="apt-get install dataset-fashion-mnist"):
            flow.data.load_mnist(100)
    finally:
        del os.environ["JOBFLOW_DATA"]


def test_env_says_what_this_cpu_gives_bf16_jobs(monkeypatch):
    isa = flow.env.cpu_isa()
    assert isa.endswith(")") and "(" in isa, isa
    monkeypatch.setenv("JOBFLOW_BF16", "always")
    why = flow.env.bf16_fallback()
    # With "always": float32 exactly where the instructions are missing.
    assert (why != "") == ("no bfloat16 instructions" in isa), (why, isa)
    if why:
        assert why.startswith("this CPU has neither AMX nor AVX512_BF16 ("), why
    monkeypatch.setenv("JOBFLOW_BF16", "auto")
    why = flow.env.bf16_fallback()
    # By the rule: float32 where cpu_isa() says so (no instructions, or slow ones).
    assert (why != "") == ("no bfloat16 instructions" in isa or "bf16 jobs run in float32" in isa), (why, isa)
    monkeypatch.setenv("JOBFLOW_BF16", "yes")
    with pytest.raises(flow.Error, match="JOBFLOW_BF16='yes': expected auto"):
        flow.env.bf16_fallback()


def test_settings_are_accepted():
    flow.config.gpu_device_num(1)
    flow.config.enable_debug_mode(True)
    assert flow.env.init()
    config = flow.FunctionConfig()
    assert config.default_data_type(flow.float) is config
    config.default_logical_view(flow.scope.consistent_view())
    config.enable_auto_mixed_precision(True)
    config.max_in_flight(2).num_threads(1).seed(3).enable_fusion(False).name("cfg_job")
    with pytest.raises(AttributeError, match="no setting 'not_a_setting'"):
        config.not_a_setting(1)

    @flow.global_function(function_config=config)
    def job(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        return x

    assert job.name == "cfg_job"
    assert "cfg_job(x: (3,) float32) -> Numpy [predict]" == job.signature


# ---- the older API's rules ----

def test_older_api_rules():
    config = flow.function_config()
    config.train.primary_lr(0.1)
    config.train.model_update_conf({"momentum_conf": {"beta": 0.9}})
    with pytest.raises(flow.Error, match=r"\[flow.function\] train job 'no_loss' never called flow.losses.add_loss"):
        @flow.function(config)
        def no_loss(x=flow.FixedTensorDef((3,))):
            return x

    with pytest.raises(flow.Error, match=r"\[losses.add_loss\] job 'new_api': add_loss needs config.train.primary_lr"):
        @flow.global_function(type="train")
        def new_api(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
            flow.losses.add_loss(flow.math.reduce_sum(x))
            return x

    with pytest.raises(flow.Error, match=r"model_update_conf\] expected one of"):
        flow.function_config().train.model_update_conf("sgd")

    @flow.function(config)
    def fit(x=flow.FixedTensorDef((8, 2)), y=flow.FixedTensorDef((8, 1))):
        loss = flow.math.reduce_mean(flow.math.square(flow.layers.dense(x, 1, name="old_lin") - y))
        flow.losses.add_loss(loss)
        return loss

    x = np.arange(16, dtype=np.float32).reshape(8, 2) / 16
    y = x @ np.array([[2.0], [-1.0]], np.float32)
    flow.train.CheckPoint().init()
    losses = [float(fit(x, y).get()) for _ in range(100)]
    assert losses[-1] < 0.01 * losses[0]
    assert "old_lin-weight-momentum" in flow.get_all_variables()  # momentum_conf: SGD with momentum
    r = fit(x, y).get()
    assert isinstance(r, np.ndarray) and isinstance(r.ndarray(), np.ndarray) and type(r.ndarray()) is np.ndarray


def test_sixteen_bit_floats_and_wide_unsigned_integers_cross_the_boundary():
    # float16 is a storage type: fed and fetched as NumPy's float16, computed
    # on after a cast; uint64 keeps values a float64 would round.
    config = flow.function_config().name("half_job")

    @flow.global_function(function_config=config)
    def half_job(x: tp.Numpy.Placeholder((3,), dtype=flow.float16)) -> tp.Numpy:
        return flow.cast(flow.cast(x, flow.float32) * 3.0, flow.float16)

    x = np.array([1.5, -0.25, 30000.0], np.float16)
    y = half_job(x)
    assert y.dtype == np.float16 and y.shape == (3,)
    np.testing.assert_array_equal(y, np.array([4.5, -0.75, np.inf], np.float16))  # 90000 overflows

    @flow.global_function(function_config=flow.function_config().name("u64_job"))
    def u64_job(a: tp.Numpy.Placeholder((2,), dtype=flow.uint64),
                b: tp.Numpy.Placeholder((2,), dtype=flow.uint64)) -> tp.Numpy:
        return flow.math.maximum(a, b)

    big = np.array([2**63 + 3, 7], np.uint64)
    r = u64_job(big, np.array([2**63 + 2, 9], np.uint64))
    assert r.dtype == np.uint64 and r.tolist() == [2**63 + 3, 9]

    # Arithmetic on float16 is refused where the job is defined, naming the op.
    with pytest.raises(flow.Error, match=r"\[add\] input 0 is \(3,\) float16.*cast\(x, Float32\) first"):
        @flow.global_function(function_config=flow.function_config().name("half_add_job"))
        def bad(x: tp.Numpy.Placeholder((3,), dtype=flow.float16)) -> tp.Numpy:
            return x + x


def test_onnx_strings_pack_and_unpack():
    # String tensors: str (UTF-8) or bytes in, str out, any shape; ONNX's
    # own StringNormalizer model (Debian's libonnx-testdata) run on them.
    words = np.array([["Monday", "éclair"], ["", "x"]])
    packed = flow.onnx.pack_strings(words)
    assert packed.dtype == np.uint8 and packed.ndim == 1
    back = flow.onnx.unpack_strings(packed)
    assert back.shape == (2, 2) and back.dtype.kind == "U"
    np.testing.assert_array_equal(back, words)
    assert flow.onnx.unpack_strings(flow.onnx.pack_strings([b"ab", b"\xff"])).tolist() == [b"ab", b"\xff"]
    assert flow.onnx.unpack_strings(flow.onnx.pack_strings(np.zeros((0, 2), dtype="<U1"))).shape == (0, 2)
    assert flow.onnx.unpack_strings(flow.onnx.pack_strings([])).shape == (0,)
    with pytest.raises(flow.Error, match=r"\[pack_strings\] strings: an array of str or bytes, got dtype float32"):
        flow.onnx.pack_strings(np.zeros(2, np.float32))
    with pytest.raises(flow.Error, match=r"\[pack_strings\] element 1 is int, not str or bytes"):
        flow.onnx.pack_strings(np.array(["a", 3], dtype=object))
    with pytest.raises(flow.Error, match=r"\[unpack_strings\] packed: not a packed string tensor"):
        flow.onnx.unpack_strings(np.zeros(30, np.uint8))
    model = "/usr/share/libonnx-testdata/data/node/test_strnormalizer_export_monday_insensintive_upper_twodim/model.onnx"
    if not _jobflow.has_onnx or not os.path.exists(model):
        pytest.skip("needs ONNX support and libonnx-testdata")
    job = flow.onnx.load(model)
    out = flow.onnx.unpack_strings(job(flow.onnx.pack_strings([["Monday", "straße", "MONDAY", "éclair"]])))
    assert out.tolist() == [["STRAßE", "ÉCLAIR"]]


def test_onnx_sequences_pack_and_unpack():
    # An ONNX model with a sequence input and output (ONNX's own test
    # model, from Debian's libonnx-testdata): fed and read through
    # flow.onnx.pack_sequence / unpack_sequence.
    items = [np.arange(3, dtype=np.int64), np.arange(5, dtype=np.int64).reshape(1, 5)]
    packed = flow.onnx.pack_sequence(items)
    assert packed.dtype == np.uint8 and packed.ndim == 1
    back = flow.onnx.unpack_sequence(packed)
    assert len(back) == 2 and back[1].shape == (1, 5) and back[1].dtype == np.int64
    np.testing.assert_array_equal(back[0], items[0])
    assert flow.onnx.unpack_sequence(flow.onnx.pack_sequence([], dtype=np.float32, none=True)) is None
    assert flow.onnx.unpack_sequence(flow.onnx.pack_sequence([], dtype=np.float32)) == []
    with pytest.raises(flow.Error, match=r"an empty sequence needs its dtype"):
        flow.onnx.pack_sequence([])
    with pytest.raises(flow.Error, match=r"\[pack_sequence\] item 1 \(<class 'list'>\) is not convertible"):
        flow.onnx.pack_sequence([np.zeros(2, np.float32), [[1], [1, 2]]])
    with pytest.raises(flow.Error, match=r"\[unpack_sequence\] packed: not a packed sequence"):
        flow.onnx.unpack_sequence(np.zeros(30, np.uint8))
    model = "/usr/share/libonnx-testdata/data/node/test_sequence_insert_at_back/model.onnx"
    if not _jobflow.has_onnx or not os.path.exists(model):
        pytest.skip("needs ONNX support and libonnx-testdata")
    job = flow.onnx.load(model)
    seq = [np.array([1, 2, 3], np.int64), np.array([4, 5, 6], np.int64)]
    out = flow.onnx.unpack_sequence(job(flow.onnx.pack_sequence(seq), np.array([7, 8, 9], np.int64)))
    assert [a.tolist() for a in out] == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
