#!/usr/bin/python3
"""train_epoch_torch.py — PyTorch's side of the training memory comparison
(docs/performance.md, "Memory"): the seeds' LeNet trained for whole epochs
as pipelines/seeds/synchronize_single_job does (Fashion-MNIST train and
test splits loaded as bench_torch.py loads them: float32 in [0, 1], batches
of 100; SGD lr 0.1; the training set reshuffled every epoch by indexing
each batch, no reshuffled copy). Run it under `/usr/bin/time -v` and read
"Maximum resident set size"; compare with
`/usr/bin/time -v build/pipelines/seeds/synchronize_single_job --epochs N`.
usage: /usr/bin/python3 tests/bench/train_epoch_torch.py [--epochs N] [--threads T] [--data DIR]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch  # noqa: E402  (read_idx, load_split, lenet: the same data and model)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data", default=os.environ.get("JOBFLOW_DATA") or "/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    xs, ys = bench_torch.load_split(a.data, "train")
    test = bench_torch.load_split(a.data, "t10k")  # held, as the seed holds both splits
    x_all, y_all = torch.stack(xs), torch.stack(ys)  # (n, B, 1, 28, 28): views joined once
    del xs, ys
    n, B = x_all.shape[0], x_all.shape[1]
    x_all = x_all.reshape(n * B, 1, 28, 28)
    y_all = y_all.reshape(n * B)
    torch.manual_seed(0)
    model = bench_torch.lenet()
    model.train()
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0)
    for epoch in range(a.epochs):
        t0 = time.perf_counter()
        perm = torch.randperm(n * B, generator=torch.Generator().manual_seed(epoch))
        for i in range(n):
            idx = perm[i * B:(i + 1) * B]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x_all[idx]), y_all[idx])
            loss.backward()
            opt.step()
            if i % 20 == 0:
                print(f"{loss.item():g}")
        secs = time.perf_counter() - t0
        print(f"epoch {epoch + 1}/{a.epochs} done in {secs:.1f} s ({n * B / secs:.0f} images/s)", flush=True)
    del test


if __name__ == "__main__":
    main()
