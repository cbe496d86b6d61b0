#!/usr/bin/python3
"""What a call from Python costs over the same call from C++.

The same compiled job is called N times from C++ (the binding's
_time_cpp_calls: arguments packed per call, CompiledJob::run, as
flow::Job::operator() does) and N times from Python (job(x): NumPy in,
NumPy out), interleaved, median of R repeats. Cases:
  tiny   x * 2 on (10,) float32, synchronous: the per-call overhead itself
  mlp    the seeds' MLP train step (batch 100, one OpenMP thread so that the
         two sides are not at the mercy of OpenMP's spin-waits on a shared
         machine): the overhead within a real step, for reference
  async  the tiny job declared tp.Callback[tp.Numpy]: job(x)(cb) per call,
         then sync() (no C++ counterpart: per call, for reference)

usage: PYTHONPATH=build/python tests/bench/bench_python_call.py [--quick] [--json FILE]
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

import jobflow as flow
import jobflow.typing as tp
from jobflow import _jobflow


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def tiny_job(callback=False):
    if callback:
        @flow.global_function()
        def tiny_async(x: tp.Numpy.Placeholder((10,))) -> tp.Callback[tp.Numpy]:
            return x * 2.0
        return tiny_async

    @flow.global_function()
    def tiny(x: tp.Numpy.Placeholder((10,))) -> tp.Numpy:
        return x * 2.0
    return tiny


def mlp_job():
    @flow.global_function(type="train", function_config=flow.function_config().num_threads(1))
    def mlp_train(images: tp.Numpy.Placeholder((100, 1, 28, 28), dtype=flow.float),
                  labels: tp.Numpy.Placeholder((100,), dtype=flow.int32)) -> tp.Numpy:
        initializer = flow.truncated_normal(0.1)
        reshape = flow.reshape(images, [images.shape[0], -1])
        hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=initializer,
                                   name="hidden")
        logits = flow.layers.dense(hidden, 10, kernel_initializer=initializer, name="output")
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="softmax_loss")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    return mlp_train


def time_python(job, args, n):
    t0 = time.perf_counter()
    for _ in range(n):
        job(*args)
    return time.perf_counter() - t0


def time_python_async(job, args, n):
    def cb(r):
        pass
    t0 = time.perf_counter()
    for _ in range(n):
        job(*args)(cb)
    job.sync()
    return time.perf_counter() - t0


def measure(job, args, n, repeats):
    cpp, py = [], []
    for r in range(repeats):  # interleaved, in alternating order
        first, second = (cpp, py) if r % 2 == 0 else (py, cpp)
        for out in (first, second):
            if out is cpp:
                cpp.append(_jobflow._time_cpp_calls(job._job, tuple(args), n) / n * 1e6)
            else:
                py.append(time_python(job, args, n) / n * 1e6)
    return statistics.median(cpp), statistics.median(py)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls (a smoke run)")
    ap.add_argument("--json", help="write the results to this file")
    a = ap.parse_args()
    n_tiny, n_mlp, repeats = (2000, 100, 3) if a.quick else (20000, 500, 5)

    print("machine: %s, %d cores; Python %s; %s" % (cpu_model(), os.cpu_count(), platform.python_version(),
                                                     "OMP_NUM_THREADS=" + os.environ.get("OMP_NUM_THREADS", "unset")))
    results = []
    x = np.arange(10, dtype=np.float32)
    tiny = tiny_job()
    time_python(tiny, (x,), 1000)  # warm-up
    cpp, py = measure(tiny, (x,), n_tiny, repeats)
    results.append({"name": "tiny", "cpp_us": cpp, "python_us": py, "overhead_us": py - cpp})

    rng = np.random.default_rng(0)
    images = rng.random((100, 1, 28, 28), dtype=np.float32)
    labels = rng.integers(0, 10, 100).astype(np.int32)
    mlp = mlp_job()
    flow.train.CheckPoint().init()
    time_python(mlp, (images, labels), 20)
    cpp, py = measure(mlp, (images, labels), n_mlp, repeats)
    results.append({"name": "mlp_train", "cpp_us": cpp, "python_us": py, "overhead_us": py - cpp})

    tiny_async = tiny_job(callback=True)
    time_python_async(tiny_async, (x,), 1000)
    per_call = statistics.median(time_python_async(tiny_async, (x,), n_tiny) / n_tiny * 1e6 for _ in range(repeats))
    results.append({"name": "tiny_async", "cpp_us": None, "python_us": per_call, "overhead_us": None})

    print("%-12s %12s %12s %14s" % ("case", "C++ us/call", "Python us", "overhead us"))
    for r in results:
        print("%-12s %12s %12.2f %14s" % (r["name"], "-" if r["cpp_us"] is None else "%.2f" % r["cpp_us"],
                                         r["python_us"], "-" if r["overhead_us"] is None else "%.2f" % r["overhead_us"]))
    tiny_overhead = results[0]["overhead_us"]
    print("target: a Python call costs < 20 us over the C++ call (tiny): %s (%.2f us)"
          % ("met" if tiny_overhead < 20 else "NOT met", tiny_overhead))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
