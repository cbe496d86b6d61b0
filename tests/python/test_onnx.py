# Job files from Python: flow.onnx.export(job, path) writes what C++'s
# jobflow::onnx::save writes, flow.onnx.load gives back a callable job, and
# a job defined in Python runs unchanged in the GStreamer element
# `jobfunction` (the plugin of this build, when it was built).
import os
import shutil
import subprocess
from typing import Tuple

import numpy as np
import pytest

import jobflow as flow
import jobflow.typing as tp

from conftest import need_fashion

pytestmark = pytest.mark.skipif(not flow._jobflow.has_onnx, reason="built without ONNX support")


def mlp(data):
    initializer = flow.truncated_normal(0.1)
    reshape = flow.reshape(data, [data.shape[0], -1])
    hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=initializer, name="hidden")
    return flow.layers.dense(hidden, 10, kernel_initializer=initializer, name="output")


def define_train_job():
    @flow.global_function(type="train")
    def train_job(images: tp.Numpy.Placeholder((100, 1, 28, 28), dtype=flow.float),
                  labels: tp.Numpy.Placeholder((100,), dtype=flow.int32)) -> tp.Numpy:
        logits = mlp(images)
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="softmax_loss")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss

    return train_job


def batches(n):
    rng = np.random.default_rng(1)
    return [(rng.random((100, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 100).astype(np.int32))
            for _ in range(n)]


def test_export_and_load_a_predict_job(tmp_path):
    @flow.global_function()
    def eval_job(images: tp.Numpy.Placeholder((100, 1, 28, 28), dtype=flow.float),
                 labels: tp.Numpy.Placeholder((100,), dtype=flow.int32)) -> Tuple[tp.Numpy, tp.Numpy]:
        return (labels, mlp(images))

    flow.train.CheckPoint().init()
    path = str(tmp_path / "mlp_eval.onnx")
    flow.onnx.export(eval_job, path)
    loaded = flow.onnx.load(path)
    assert loaded.signature == "eval_job(images: (100, 1, 28, 28) float32, labels: (100,) int32) -> (Numpy, Numpy) [predict]"
    x, y = batches(1)[0]
    want_labels, want_logits = eval_job(x, y)
    got_labels, got_logits = loaded(x, y)
    np.testing.assert_array_equal(got_labels, want_labels)
    np.testing.assert_allclose(got_logits, want_logits, rtol=1e-5, atol=1e-6)
    assert "Gemm" in flow.onnx.inspect(path) or "MatMul" in flow.onnx.inspect(path)


def test_export_and_load_a_callback_train_job(tmp_path):
    @flow.global_function(type="train")
    def train_job(images: tp.Numpy.Placeholder((100, 1, 28, 28), dtype=flow.float),
                  labels: tp.Numpy.Placeholder((100,), dtype=flow.int32)) -> tp.Callback[tp.Numpy]:
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, mlp(images))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss

    flow.train.CheckPoint().init()
    path = str(tmp_path / "mlp_train.onnx")
    flow.onnx.export(train_job, path, checkpoint_dir="mlp_train_vars")
    assert (tmp_path / "mlp_train_vars" / "hidden-weight" / "out").exists()
    loaded = flow.onnx.load(path)
    assert loaded.signature.endswith("-> Callback[Numpy] [train]")
    got = []
    for x, y in batches(3):
        loaded(x, y)(got.append)
    loaded.sync()
    assert [g.shape for g in got] == [(100,)] * 3


def test_jobs_with_watches_do_not_export(tmp_path):
    @flow.global_function()
    def watched(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        flow.watch(x, print)
        return x

    with pytest.raises(flow.Error, match=r"\[onnx.export\] job 'watched' has flow.watch handlers"):
        flow.onnx.export(watched, str(tmp_path / "w.onnx"))


def gst_env(tmp_path):
    build = os.environ.get("JOBFLOW_BUILD_ROOT")
    if not build or not os.path.exists(os.path.join(build, "plugin", "libgstjobflow.so")):
        pytest.skip("no GStreamer plugin in this build (JOBFLOW_BUILD_ROOT)")
    if not shutil.which("gst-launch-1.0"):
        pytest.skip("gst-launch-1.0 missing (apt-get install gstreamer1.0-tools)")
    env = dict(os.environ)
    env.update(GST_PLUGIN_PATH=os.path.join(build, "plugin"), GST_REGISTRY=str(tmp_path / "registry.bin"),
               JOBFLOW_GST_REGISTRY=str(tmp_path / "registry.bin"))
    return env


def test_a_python_job_trains_in_a_pipeline(tmp_path):
    """The seeds' MLP train job, defined here, exported, trained for 20 steps
    by `jobdatasrc ! jobfunction job=... ! jobsink`, ends with the weights the
    same 20 steps give in Python."""
    need_fashion()
    env = gst_env(tmp_path)
    train_job = define_train_job()
    flow.train.CheckPoint().init()
    path = str(tmp_path / "mlp_train.onnx")
    flow.onnx.export(train_job, path)
    ckpt = str(tmp_path / "pipeline_model")
    cmd = ["gst-launch-1.0", "-q", "jobdatasrc", "set=train", "batch-size=100", "num-samples=2000", "!",
           "jobfunction", "job=" + path, "checkpoint=" + ckpt, "!", "jobsink", "drop=true", "max-results=1"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    trained_there = flow.checkpoint.get(ckpt)
    assert trained_there["System-Train-TrainStep-train_job"].tolist() == [20]

    (xs, ys), _ = flow.data.load_mnist(100)
    for i in range(20):  # the same batches, in file order
        train_job(xs[i], ys[i])
    here = flow.get_all_variables()
    for name in ("hidden-weight", "hidden-bias", "output-weight", "output-bias"):
        np.testing.assert_allclose(trained_there[name], here[name], rtol=1e-4, atol=1e-6, err_msg=name)
