#!/usr/bin/python3
"""Models exported by torch.onnx.export, for tests/torch_onnx/test_torch_onnx.cpp.

    /usr/bin/python3 tests/torch_onnx/make_torch_onnx.py OUTDIR

(Debian's python3-torch: run it with /usr/bin/python3. torch.onnx.export of
torch 1.13 writes the protobuf itself; the `onnx` Python package is not
needed.)

The seeds' two networks written in PyTorch (the same layers as
engine/include/jobflow/models/seeds.h, without LeNet's training dropout):

  LeNet: conv 1->32 5x5 pad 2, relu, maxpool 2, conv 32->64 5x5 pad 2, relu,
         maxpool 2, flatten, linear 3136->512, relu, linear 512->10
  MLP:   flatten, linear 784->512, relu, linear 512->10

Fixed seed. Each is first trained a few SGD steps on random data (so the
weights are not just their initial values), then exported with a fixed batch
of 4 (no dynamic axes) at every opset of OPSETS the exporter supports, input
"images" (4, 1, 28, 28) float32, output "logits" (4, 10).

Writes OUTDIR/index.txt and OUTDIR/<name>.bin (raw little-endian, C order).
index.txt: '#' lines are comments; then

    onnx <case> <file.onnx> <net> <opset>
    tensor <name> <dtype> <shape>          (bytes in <name>.bin)

<shape> is comma-separated ('-' for a scalar). Tensors, per net:
    <net>.input        float32 (4,1,28,28)  the input every case runs on
    <net>.output       float32 (4,10)       PyTorch's float32 output for it
    <net>.output_f64   float64 (4,10)       the same computed in float64 (a
                                            diagnostic: how far float32 is
                                            from the truth)
    <net>.labels       int32   (4,)         labels for one train step
    <net>.step.loss    float32 (4,)         per-example cross-entropy before
                                            the step
    <net>.step.<param> float32              every parameter after one SGD step
                                            (lr 0.1, momentum 0) on the mean
                                            cross-entropy of (input, labels);
                                            <param> is the initializer name in
                                            the .onnx files ("conv1.weight")
"""
import io
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 20240611
BATCH = 4
OPSETS = (11, 13, 17)
PRETRAIN_STEPS = 5
OUT = None
INDEX = []


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.dense1 = nn.Linear(3136, 512)
        self.dense2 = nn.Linear(512, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.reshape(x.shape[0], -1)  # the seeds' reshape(pool2, {N, -1})
        return self.dense2(F.relu(self.dense1(x)))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.hidden = nn.Linear(784, 512)
        self.output = nn.Linear(512, 10)

    def forward(self, x):
        return self.output(F.relu(self.hidden(self.flatten(x))))


def shape_text(shape):
    return ",".join(str(int(d)) for d in shape) if len(shape) else "-"


def save(name, t):
    a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    dt = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64",
          np.dtype(np.int32): "int32", np.dtype(np.int64): "int64"}[a.dtype]
    a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
    with open(os.path.join(OUT, name + ".bin"), "wb") as f:
        f.write(a.tobytes(order="C"))
    INDEX.append(f"tensor {name} {dt} {shape_text(a.shape)}")


def init_like_seeds(model, g):
    """truncated_normal(0.1) weights as the seeds; small random biases."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight"):
                w = torch.randn(p.shape, generator=g) * 0.1
                while True:  # truncate at 2 std by redrawing
                    bad = w.abs() > 0.2
                    if not bad.any():
                        break
                    w[bad] = torch.randn(int(bad.sum()), generator=g) * 0.1
                p.copy_(w)
            else:
                p.copy_((torch.rand(p.shape, generator=g) - 0.5) * 0.02)


def pretrain(model, g):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(PRETRAIN_STEPS):
        x = torch.rand(BATCH * 4, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (BATCH * 4,), generator=g)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def export(model, net, x):
    """Exports at every opset in OPSETS that this torch supports."""
    done = []
    for opset in OPSETS:
        f = io.BytesIO()
        try:
            torch.onnx.export(model, (x,), f, opset_version=opset, input_names=["images"],
                              output_names=["logits"], do_constant_folding=True)
        except Exception as e:  # an opset this exporter does not know
            print(f"{net}: opset {opset} not exported: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        fname = f"{net}_opset{opset}.onnx"
        with open(os.path.join(OUT, fname), "wb") as out:
            out.write(f.getvalue())
        INDEX.append(f"onnx {net}.opset{opset} {fname} {net} {opset}")
        done.append(opset)
    if not done:
        raise SystemExit(f"{net}: torch.onnx.export failed at every opset of {OPSETS}")
    return done


def make(net, cls, seed):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    model = cls()
    init_like_seeds(model, g)
    pretrain(model, g)
    model.eval()

    x = torch.rand(BATCH, 1, 28, 28, generator=g)
    labels = torch.randint(0, 10, (BATCH,), generator=g)
    with torch.no_grad():
        y = model(x)
        y64 = cls().double()
        y64.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
        y64 = y64(x.double())
    save(f"{net}.input", x)
    save(f"{net}.output", y)
    save(f"{net}.output_f64", y64)
    save(f"{net}.labels", labels.to(torch.int32))
    opsets = export(model, net, x)

    # One train step as LoadOptions{Train, sparse_softmax_cross_entropy,
    # sgd:lr=0.1,momentum=0} does it: mean cross-entropy, plain SGD.
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0)
    opt.zero_grad()
    logits = model(x)
    per_example = F.cross_entropy(logits, labels, reduction="none")
    per_example.mean().backward()
    opt.step()
    save(f"{net}.step.loss", per_example)
    for name, p in model.named_parameters():
        save(f"{net}.step.{name}", p)
    print(f"{net}: opsets {opsets}, |logits| max {y.abs().max().item():.3f}, "
          f"loss {per_example.mean().item():.4f}", file=sys.stderr)


def main():
    global OUT
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    OUT = sys.argv[1]
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    make("lenet", LeNet, SEED)
    make("mlp", MLP, SEED + 1)
    tmp = os.path.join(OUT, "index.txt.tmp")
    with open(tmp, "w") as f:
        f.write(f"# tests/torch_onnx data: torch {torch.__version__}, seed {SEED}, batch {BATCH}\n")
        f.write("\n".join(INDEX) + "\n")
    os.replace(tmp, os.path.join(OUT, "index.txt"))


if __name__ == "__main__":
    main()
