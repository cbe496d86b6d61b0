#!/usr/bin/env python3
"""bench_ort.py — ONNX Runtime's side of `tests/bench/run --models`.

    BUILD/venv/bin/python3 tests/bench/bench_ort.py [--threads N] [--seconds S]
        [--repeats N] [--warmup N] [--clock wall|cpu] [--compare DIR] FILE.onnx...

Each file runs in an InferenceSession on the CPU execution provider with
graph optimizations on (ORT_ENABLE_ALL), sequential execution,
intra_op_num_threads=N (the same count Jobflow is given) and one inter-op
thread. The input: DIR/<stem>.input.bin written by bench_models --dump when
--compare is given (the same input Jobflow ran), else a seeded uniform one
in [0, 1) (as bench_models: the distribution the exporter calibrated on).
Warm-up calls, then calls for at least S seconds per repeat; the best repeat
counts (as in bench_models: load from other processes only slows a repeat).
--clock cpu times by the process's CPU time instead of the wall clock (as
bench_models --clock cpu): on a machine other processes keep busy, a
one-thread run's CPU time is the time its kernels took, whatever share of a
core it got (with more threads it also counts their spinning). Prints one line per file:

    <stem> <images/s> img/s <threads> [<max relative difference> <top1 agreement>]

The last two (with --compare) measure Jobflow's outputs DIR/<stem>.out<k>.bin
against ONNX Runtime's on the same input: the largest |a - b| / max(|b|)
over all outputs (relative to each output's largest magnitude), and the
share of rows whose argmax agrees for an output of rank 2 (else "-").
"""
import argparse
import os
import sys
import time

try:
    import numpy as np
    import onnxruntime as ort
except ImportError as e:  # the runner checks for this exit code
    print(f"bench_ort: {e} (scripts/setup installs onnxruntime into BUILD/venv)", file=sys.stderr)
    sys.exit(3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--compare", default="")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    a = ap.parse_args()
    print(f"bench_ort: onnxruntime {ort.__version__}", file=sys.stderr)
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    for path in a.files:
        stem = os.path.splitext(os.path.basename(path))[0]
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.intra_op_num_threads = a.threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        inp = sess.get_inputs()[0]
        shape = [int(d) for d in inp.shape]
        src = os.path.join(a.compare, stem + ".input.bin") if a.compare else ""
        if src and os.path.exists(src):
            x = np.fromfile(src, dtype=np.float32).reshape(shape)
        else:
            x = np.random.default_rng(0).random(shape, dtype=np.float32)
        feed = {inp.name: x}
        out = None
        for _ in range(a.warmup):
            out = sess.run(None, feed)
        rates = []
        for _ in range(a.repeats):
            t0 = clock()
            calls = 0
            while True:
                out = sess.run(None, feed)
                calls += 1
                s = clock() - t0
                if s >= a.seconds:
                    break
            rates.append(calls * shape[0] / s)
        rates.sort()
        line = f"{stem} {rates[-1]:.2f} img/s {a.threads}"
        if src and os.path.exists(src):
            worst, top1 = 0.0, "-"
            for k, ref in enumerate(out):
                got = np.fromfile(os.path.join(a.compare, f"{stem}.out{k}.bin"), dtype=np.float32)
                got = got.reshape(ref.shape)
                scale = max(float(np.abs(ref).max()), 1e-30)
                worst = max(worst, float(np.abs(got - ref).max()) / scale)
                if k == 0 and ref.ndim == 2:
                    top1 = f"{float((got.argmax(1) == ref.argmax(1)).mean()):.3f}"
            line += f" {worst:.3g} {top1}"
        print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
