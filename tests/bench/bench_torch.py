#!/usr/bin/python3
"""bench_torch.py — PyTorch's side of tests/bench/run.

The same four measurements as bench_engine, with PyTorch eager on the same
data: Fashion-MNIST read from the same IDX files (gzip or plain), scaled to
[0, 1], cut into batches of 100 in file order, with the same architectures:

  LeNet: conv 1->32 5x5 pad 2 + relu, maxpool 2, conv 32->64 5x5 pad 2 +
         relu, maxpool 2, flatten, linear 3136->512 + relu, dropout 0.5
         (train only), linear 512->10
  MLP:   flatten, linear 784->512 + relu, linear 512->10

Train: CrossEntropyLoss (mean), SGD lr 0.1 momentum 0, zero_grad(set_to_none
=True), model.train(). Predict: model.eval() under torch.inference_mode(),
returning the logits. Each measurement runs at torch.set_num_threads(1) and
(2); the best is reported with the thread count that won.

The bf16 rows (torch.autocast) run only where the CPU has bfloat16
instructions (AVX512_BF16 or AMX, from /proc/cpuinfo): elsewhere PyTorch
emulates bf16 (LeNet training at 0.3 steps/s on an AVX2 Zen 3, over ten
minutes for the quick run) while Jobflow's bf16 jobs run in float32, so
there is nothing to compare; they are skipped with a line saying why.

Output: lines "name value unit threads" (threads: the winning count).
Run with Debian's interpreter: /usr/bin/python3 (python3-torch).
"""
import argparse
import gzip
import os
import struct
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn as nn
except ImportError as e:  # the runner checks for this exit code
    print(f"bench_torch: {e} (apt-get install python3-torch)", file=sys.stderr)
    sys.exit(3)

BATCH = 100
IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    zero, code, rank = struct.unpack(">HBB", raw[:4])
    if zero != 0 or code not in IDX_TYPES:
        raise ValueError(f"{path}: not an IDX file")
    dims = struct.unpack(f">{rank}I", raw[4:4 + 4 * rank])
    return np.frombuffer(raw, dtype=IDX_TYPES[code], offset=4 + 4 * rank).reshape(dims)


def find(folder, name):
    for p in (os.path.join(folder, name), os.path.join(folder, name + ".gz")):
        if os.path.exists(p):
            return p  # the plain file wins, as in load_mnist
    raise FileNotFoundError(f"{folder}/{name}[.gz] (install it with: apt-get install dataset-fashion-mnist)")


def load_split(folder, prefix):
    images = read_idx(find(folder, f"{prefix}-images-idx3-ubyte")).astype(np.float32) / np.float32(255.0)
    labels = read_idx(find(folder, f"{prefix}-labels-idx1-ubyte")).astype(np.int64)
    n = len(images) // BATCH
    x = torch.from_numpy(np.ascontiguousarray(images[: n * BATCH].reshape(n, BATCH, 1, 28, 28)))
    y = torch.from_numpy(np.ascontiguousarray(labels[: n * BATCH].reshape(n, BATCH)))
    return [x[i] for i in range(n)], [y[i] for i in range(n)]


def lenet():
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(512, 10))


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 10))


def time_median(step, nbatches, warmup, steps, repeats):
    nxt = 0
    def call():
        nonlocal nxt
        step(nxt)
        nxt = (nxt + 1) % nbatches
    for _ in range(warmup):
        call()
    secs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            call()
        secs.append(time.perf_counter() - t0)
    secs.sort()
    return secs[len(secs) // 2]


def bench_train(make, data, a, bf16=False):
    xs, ys = data
    torch.manual_seed(0)
    model = make()
    model.train()
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0)

    def step(i):
        opt.zero_grad(set_to_none=True)
        # bf16: torch.autocast on the CPU (float32 master weights, as Jobflow's bf16 jobs)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(xs[i]), ys[i])
        loss.backward()
        opt.step()
        loss.item()  # the loss comes back to the host, as in the engine's synchronous call

    return a.train_steps / time_median(step, len(xs), a.warmup, a.train_steps, a.repeats)


def bench_predict(make, data, a, bf16=False):
    xs, _ = data
    torch.manual_seed(0)
    model = make()
    model.eval()

    def step(i):
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            model(xs[i])

    return a.predict_steps * BATCH / time_median(step, len(xs), a.warmup, a.predict_steps, a.repeats)


def cpu_bf16():
    """The CPU's bfloat16 instructions ("amx_bf16", "avx512_bf16"), or None."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
    except OSError:
        return None
    return next((x for x in ("amx_bf16", "avx512_bf16") if x in flags), None)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="60 train / 30 predict steps")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--train-steps", type=int)
    p.add_argument("--predict-steps", type=int)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", default="1,2", help="thread counts to try (default 1,2)")
    p.add_argument("--only", default="", help="comma-separated subset of lenet_train,mlp_train,lenet_predict,mlp_predict,"
                   "lenet_train_bf16,lenet_predict_bf16")
    p.add_argument("--data", default=os.environ.get("JOBFLOW_DATA") or "/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    if a.train_steps is None:
        a.train_steps = 60 if a.quick else 300
    if a.predict_steps is None:
        a.predict_steps = 30 if a.quick else 100
    only = set(filter(None, a.only.split(",")))
    threads = [int(t) for t in a.threads.split(",") if t]

    train = load_split(a.data, "train")
    test = load_split(a.data, "t10k")
    print(f"bench_torch: torch {torch.__version__}, {len(train[0])} train / {len(test[0])} test batches of {BATCH}; "
          f"warm-up {a.warmup}, {a.train_steps} train / {a.predict_steps} predict steps, median of {a.repeats}, "
          f"threads {threads}", file=sys.stderr)

    benches = [
        ("lenet_train", "steps/s", lambda: bench_train(lenet, train, a)),
        ("lenet_predict", "images/s", lambda: bench_predict(lenet, test, a)),
        ("mlp_train", "steps/s", lambda: bench_train(mlp, train, a)),
        ("mlp_predict", "images/s", lambda: bench_predict(mlp, test, a)),
        ("lenet_train_bf16", "steps/s", lambda: bench_train(lenet, train, a, bf16=True)),
        ("lenet_predict_bf16", "images/s", lambda: bench_predict(lenet, test, a, bf16=True)),
    ]
    bf16_isa = cpu_bf16()
    for name, unit, fn in benches:
        if only and name not in only:
            continue
        if name.endswith("_bf16") and bf16_isa is None:
            print(f"bench_torch: {name} skipped: this CPU has neither AVX512_BF16 nor AMX (PyTorch would "
                  "emulate bf16 and Jobflow runs bf16 jobs in float32)", file=sys.stderr)
            continue
        best = None
        for t in threads:
            torch.set_num_threads(t)
            v = fn()
            print(f"bench_torch: {name} threads={t}: {v:.3f} {unit}", file=sys.stderr)
            if best is None or v > best[0]:
                best = (v, t)
        print(f"{name} {best[0]:.3f} {unit} {best[1]}", flush=True)


if __name__ == "__main__":
    main()
