#!/usr/bin/python3
"""Reference values for tests/reference/test_reference.cpp, computed with PyTorch.

    /usr/bin/python3 tests/reference/make_reference.py OUTDIR

(Debian's python3-torch: run it with /usr/bin/python3.) Writes OUTDIR/index.txt
and one OUTDIR/<name>.bin per stored tensor (raw little-endian, C order).

Everything is deterministic (fixed seeds). All inputs and weights are float32
values; the references are computed twice from those same values: in float64
(the "truth" the engine's float32 results are compared with) and in float32
(kept as a diagnostic: it shows how far an honest float32 computation lands
from the truth, and the test checks that the tolerances admit it).

index.txt: a '#' header line, then one line per tensor:

    <name> <dtype> <shape> raw
    <name> float32 <shape> gen <seed> <scale>
    <name> float64 <shape> lowrank <A> <B>

<shape> is a comma-separated list, '-' for a scalar.
  raw      the bytes are in <name>.bin.
  gen      not stored (too big: dense1-weight alone is 1.6M values): element i
           is float32(scale * (2 * u - 1)) with u = splitmix64(seed * 2^32 + i)
           >> 11, times 2^-53 (computed in double, then rounded to float32).
           <name>.checksum (float64: sum, sum of squares, element 0, last
           element) lets the reader confirm it regenerated the same values.
  lowrank  not stored: the value is A^T B (A: (r, m), B: (r, n), both raw
           float64). Used for gradients of the big dense weights, which are
           dy^T x with a batch of r = 4 rows; the script asserts that the
           product equals the autograd gradient.
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

BATCH = 4
OUT = None
INDEX = []


# ---------------------------------------------------------------- writing ---

def _shape_text(shape):
    return ",".join(str(int(d)) for d in shape) if len(shape) else "-"


def save(name, t, dtype=None):
    """Stores tensor/array `t` (as `dtype`, default: its own) as raw bytes."""
    a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    if dtype is not None:
        a = a.astype(dtype)
    dt = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64",
          np.dtype(np.int32): "int32", np.dtype(np.int64): "int64"}[a.dtype]
    a = np.array(a, dtype=a.dtype.newbyteorder("<"), order="C")  # keeps 0-d shapes
    with open(os.path.join(OUT, name + ".bin"), "wb") as f:
        f.write(a.tobytes(order="C"))
    INDEX.append(f"{name} {dt} {_shape_text(a.shape)} raw")


def splitmix_uniform(seed, n, scale):
    """The 'gen' generator (see the module docstring), as float32."""
    with np.errstate(over="ignore"):
        z = (np.uint64(seed) << np.uint64(32)) + np.arange(n, dtype=np.uint64)
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(11)).astype(np.float64) * (2.0 ** -53)
    return (scale * (2.0 * u - 1.0)).astype(np.float32)


def gen(name, shape, seed, scale):
    n = int(np.prod(shape))
    v = splitmix_uniform(seed, n, scale)
    INDEX.append(f"{name} float32 {_shape_text(shape)} gen {seed} {scale!r}")
    d = v.astype(np.float64)
    save(name + ".checksum", np.array([d.sum(), (d * d).sum(), d[0], d[-1]], dtype=np.float64))
    return torch.from_numpy(v.reshape(shape))


def save_lowrank(name, a, b, full):
    """Stores `full` (m, n) as A^T B after checking that they agree."""
    a = a.detach().to(torch.float64)
    b = b.detach().to(torch.float64)
    prod = a.t() @ b
    err = (prod - full.detach()).abs().max().item()
    scale = full.abs().max().item()
    assert err <= 1e-12 * max(scale, 1e-300), f"{name}: low-rank form is off by {err} (max {scale})"
    save(name + ".A", a)
    save(name + ".B", b)
    INDEX.append(f"{name} float64 {_shape_text(full.shape)} lowrank {name}.A {name}.B")


# ----------------------------------------------------------------- random ---

def uniform(g, shape, lo, hi):
    return (torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(torch.float32)


def away_from_zero(g, shape, lo, hi):
    """Values with |v| in [lo, hi] and a random sign (denominators)."""
    mag = uniform(g, shape, lo, hi)
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0).to(torch.float32)
    return mag * sign


# --------------------------------------------------------------- networks ---

def relu_margin(pre):
    """Smallest |pre-activation| relative to its std: a float32 result that
    lands on the other side of 0 would change the ReLU mask."""
    return (pre.abs().min() / pre.std()).item()


def pool_margin(x, k, s):
    """Smallest gap between the two largest values of a pooling window whose
    maximum is positive (ties at 0 come from ReLU and carry no gradient)."""
    n, c, h, w = x.shape
    win = x.unfold(2, k, s).unfold(3, k, s).reshape(n, c, h // s, w // s, k * k)
    top = win.topk(2, dim=-1).values
    pos = top[..., 0] > 0
    gap = (top[..., 0] - top[..., 1])[pos]
    return (gap.min() / x.std()).item() if gap.numel() else math.inf


def lenet_forward(p, x, labels, check=False):
    c1 = F.conv2d(x, p["conv1-weight"], p["conv1-bias"], padding=2)
    a1 = F.relu(c1)
    p1 = F.max_pool2d(a1, 2, 2)
    c2 = F.conv2d(p1, p["conv2-weight"], p["conv2-bias"], padding=2)
    a2 = F.relu(c2)
    p2 = F.max_pool2d(a2, 2, 2)
    flat = p2.reshape(p2.shape[0], -1)
    h_pre = flat @ p["dense1-weight"].t() + p["dense1-bias"]
    h_pre.retain_grad()
    h = F.relu(h_pre)
    logits = h @ p["dense2-weight"].t() + p["dense2-bias"]
    loss = F.cross_entropy(logits, labels, reduction="none")
    margins = None
    if check:
        margins = {
            "relu conv1": relu_margin(c1), "pool1": pool_margin(a1, 2, 2),
            "relu conv2": relu_margin(c2), "pool2": pool_margin(a2, 2, 2),
            "relu dense1": relu_margin(h_pre),
        }
    return logits, loss, flat, h_pre, margins


def mlp_forward(p, x, labels, check=False):
    flat = x.reshape(x.shape[0], -1)
    h_pre = flat @ p["hidden-weight"].t() + p["hidden-bias"]
    h_pre.retain_grad()
    h = F.relu(h_pre)
    logits = h @ p["output-weight"].t() + p["output-bias"]
    loss = F.cross_entropy(logits, labels, reduction="none")
    margins = {"relu hidden": relu_margin(h_pre)} if check else None
    return logits, loss, flat, h_pre, margins


LENET_SHAPES = [("conv1-weight", (32, 1, 5, 5)), ("conv1-bias", (32,)),
                ("conv2-weight", (64, 32, 5, 5)), ("conv2-bias", (64,)),
                ("dense1-weight", (512, 3136)), ("dense1-bias", (512,)),
                ("dense2-weight", (10, 512)), ("dense2-bias", (10,))]
MLP_SHAPES = [("hidden-weight", (512, 784)), ("hidden-bias", (512,)),
              ("output-weight", (10, 512)), ("output-bias", (10,))]
BIG = 100_000  # weights with more elements are 'gen', their gradients 'lowrank'


def make_params(prefix, shapes, seed, relu_layers):
    """He-uniform weights (the scale keeps logits O(1) so the softmax is not
    saturated and every gradient is informative); small random biases."""
    g = torch.Generator().manual_seed(seed)
    params = {}
    for i, (name, shape) in enumerate(shapes):
        if name.endswith("-weight"):
            fan_in = int(np.prod(shape[1:]))
            gain = 6.0 if name.split("-")[0] in relu_layers else 3.0
            scale = math.sqrt(gain / fan_in)
            if int(np.prod(shape)) > BIG:
                v = gen(f"{prefix}.{name}", shape, seed * 100 + i, scale)
            else:
                v = uniform(g, shape, -scale, scale)
                save(f"{prefix}.{name}", v)
        else:
            v = uniform(g, shape, -0.1, 0.1)
            save(f"{prefix}.{name}", v)
        params[name] = v
    return params


def network(prefix, shapes, forward, relu_layers, images, labels, seed, dense_big):
    """Stores the inputs, then logits / loss / mean loss / gradients of the
    mean loss in float64 and float32. Retries seeds until every ReLU input and
    max-pool window is far (>= 1e-5 std) from a tie, so float32 rounding
    cannot flip a mask and move a gradient elsewhere."""
    for attempt in range(50):
        start = len(INDEX)
        params = make_params(prefix, shapes, seed + attempt, relu_layers)
        p64 = {k: v.to(torch.float64).requires_grad_() for k, v in params.items()}
        x64 = images.to(torch.float64)
        logits, loss, flat, h_pre, margins = forward(p64, x64, labels, check=True)
        worst = min(margins.values())
        if worst >= 1e-5:
            break
        print(f"{prefix}: seed {seed + attempt} has margins {margins}; trying the next", file=sys.stderr)
        del INDEX[start:]
    else:
        raise SystemExit(f"{prefix}: no seed with safe margins")
    print(f"{prefix}: margins {', '.join(f'{k} {v:.2e}' for k, v in margins.items())}", file=sys.stderr)

    mean = loss.mean()
    mean.backward()
    save(f"{prefix}.f64.logits", logits)
    save(f"{prefix}.f64.loss", loss)
    save(f"{prefix}.f64.mean_loss", mean)
    for name, _ in shapes:
        if name == dense_big:
            save_lowrank(f"{prefix}.f64.grad.{name}", h_pre.grad, flat, p64[name].grad)
        else:
            save(f"{prefix}.f64.grad.{name}", p64[name].grad)

    p32 = {k: v.clone().requires_grad_() for k, v in params.items()}
    logits32, loss32, _, _, _ = forward(p32, images, labels)
    mean32 = loss32.mean()
    mean32.backward()
    save(f"{prefix}.f32.logits", logits32)
    save(f"{prefix}.f32.loss", loss32)
    save(f"{prefix}.f32.mean_loss", mean32)
    for name, _ in shapes:
        if name != dense_big:  # the big ones are checked against float64 only
            save(f"{prefix}.f32.grad.{name}", p32[name].grad)
    print(f"{prefix}: logits std {logits.std().item():.3f}, mean loss {mean.item():.4f}", file=sys.stderr)


# -------------------------------------------------------------- op cases ---

def same_lower(size, k, s, d=1):
    """OneFlow's SAME (SAME_LOWER): (start, end) pads, the odd one at the start."""
    keff = (k - 1) * d + 1
    out = -(-size // s)
    total = max((out - 1) * s + keff - size, 0)
    return total - total // 2, total // 2


def pad_nchw(x, top, left, bottom, right, value=0.0):
    return F.pad(x, (left, right, top, bottom), value=value)


def avg_pool_exclude(x, k, s, pads):
    """Average pooling over explicit {top, left, bottom, right} padding, the
    padding excluded from each window's count (TensorFlow / OneFlow)."""
    kh, kw = k
    total = F.avg_pool2d(pad_nchw(x, *pads), k, s) * (kh * kw)
    ones = torch.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype)
    count = F.avg_pool2d(pad_nchw(ones, *pads), k, s) * (kh * kw)
    return total / count


def op_cases(g):
    """name -> (inputs (name -> tensor), function of the inputs). Integer
    inputs are not differentiated."""
    c = {}
    # conv2d, stride 2, explicit asymmetric pads {top 1, left 2, bottom 0, right 1},
    # then bias_add on axis 1.
    c["conv_s2_pad"] = (
        {"x": uniform(g, (2, 3, 9, 10), -1, 1), "w": uniform(g, (4, 3, 3, 3), -0.5, 0.5),
         "b": uniform(g, (4,), -0.5, 0.5)},
        lambda x, w, b: F.conv2d(pad_nchw(x, 1, 2, 0, 1), w, b, stride=2))
    # conv2d, strides (1, 2), dilation 2, groups 2, "SAME" (odd total pad on W:
    # the extra column goes to the left).
    th, bh = same_lower(8, 3, 1, 2)
    tl, br = same_lower(8, 3, 2, 2)
    assert (th, bh, tl, br) == (2, 2, 2, 1)
    c["conv_group_dil_same"] = (
        {"x": uniform(g, (2, 4, 8, 8), -1, 1), "w": uniform(g, (6, 2, 3, 3), -0.5, 0.5)},
        lambda x, w: F.conv2d(pad_nchw(x, th, tl, bh, br), w, stride=(1, 2), dilation=2, groups=2))
    # avg_pool2d 3x3 stride 2 "SAME" on 7x8: pads {1, 1, 1, 0}, padding not counted.
    ph = same_lower(7, 3, 2)
    pw = same_lower(8, 3, 2)
    assert ph == (1, 1) and pw == (1, 0)
    c["avg_pool_same"] = (
        {"x": uniform(g, (2, 3, 7, 8), -1, 1)},
        lambda x: avg_pool_exclude(x, (3, 3), (2, 2), (ph[0], pw[0], ph[1], pw[1])))
    # avg_pool2d ksize (2, 3), strides (2, 1), explicit pads {top 1, left 0, bottom 0, right 2}.
    c["avg_pool_explicit"] = (
        {"x": uniform(g, (2, 2, 6, 7), -1, 1)},
        lambda x: avg_pool_exclude(x, (2, 3), (2, 1), (1, 0, 0, 2)))
    # max_pool2d 3x3 stride 2 "SAME" on 7x8 (padding never wins).
    c["max_pool_same"] = (
        {"x": uniform(g, (2, 3, 7, 8), -1, 1)},
        lambda x: F.max_pool2d(pad_nchw(x, ph[0], pw[0], ph[1], pw[1], value=-math.inf), 3, 2))
    # log_softmax along a middle axis; softmax along the last, large logits.
    c["log_softmax_axis1"] = ({"x": uniform(g, (3, 5, 4), -3, 3)}, lambda x: F.log_softmax(x, dim=1))
    c["softmax_last"] = ({"x": uniform(g, (4, 7), -20, 20)}, lambda x: F.softmax(x, dim=-1))
    # sparse softmax cross-entropy alone, logits up to 90: exp overflows float32
    # unless the maximum is subtracted first.
    labels = torch.randint(0, 7, (5,), generator=g, dtype=torch.int64).to(torch.int32)
    c["sparse_xent"] = (
        {"labels": labels, "logits": uniform(g, (5, 7), -60, 60) + 30.0},
        lambda labels, logits: F.cross_entropy(logits, labels.long(), reduction="none"))
    # broadcasting arithmetic
    c["add_bcast"] = ({"a": uniform(g, (2, 1, 4), -1, 1), "b": uniform(g, (3, 1), -1, 1)}, lambda a, b: a + b)
    c["sub_bcast"] = ({"a": uniform(g, (1, 4), -1, 1), "b": uniform(g, (3, 2, 1), -1, 1)}, lambda a, b: a - b)
    c["mul_bcast"] = ({"a": uniform(g, (4, 1, 3), -1, 1), "b": uniform(g, (1, 5, 1), -1, 1)}, lambda a, b: a * b)
    c["div_bcast"] = ({"a": uniform(g, (2, 3, 4), -1, 1), "b": away_from_zero(g, (3, 1), 0.5, 2.0)},
                      lambda a, b: a / b)
    c["div_scalar_like"] = ({"a": uniform(g, (3, 4), -1, 1), "b": away_from_zero(g, (1,), 0.5, 2.0)},
                            lambda a, b: a / b)
    # matmul with transposes, 2-D and batched
    c["matmul_tt"] = ({"a": uniform(g, (5, 3), -1, 1), "b": uniform(g, (4, 5), -1, 1)},
                      lambda a, b: a.t() @ b.t())
    c["matmul_tb"] = ({"a": uniform(g, (3, 5), -1, 1), "b": uniform(g, (4, 5), -1, 1)}, lambda a, b: a @ b.t())
    c["matmul_batched_ta"] = ({"a": uniform(g, (2, 6, 3), -1, 1), "b": uniform(g, (2, 6, 4), -1, 1)},
                              lambda a, b: a.transpose(1, 2) @ b)
    # shape ops
    c["transpose_2031"] = ({"x": uniform(g, (2, 3, 4, 5), -1, 1)}, lambda x: x.permute(2, 0, 3, 1))
    c["concat_axis1"] = (
        {"a": uniform(g, (2, 3, 4), -1, 1), "b": uniform(g, (2, 1, 4), -1, 1), "c": uniform(g, (2, 2, 4), -1, 1)},
        lambda a, b, c_: torch.cat([a, b, c_], dim=1))
    c["concat_last"] = ({"a": uniform(g, (3, 2), -1, 1), "b": uniform(g, (3, 5), -1, 1)},
                        lambda a, b: torch.cat([a, b], dim=-1))
    # reductions with axes
    c["reduce_mean_keep"] = ({"x": uniform(g, (3, 4, 5), -1, 1)}, lambda x: x.mean(dim=(0, 2), keepdim=True))
    c["reduce_sum_last"] = ({"x": uniform(g, (3, 4, 5), -1, 1)}, lambda x: x.sum(dim=-1))
    # batch normalization in training mode (batch statistics, biased variance),
    # composed in the engine from reduce_mean + nn.batch_normalization.
    c["batch_norm_train"] = (
        {"x": uniform(g, (4, 3, 5, 5), -2, 3), "gamma": uniform(g, (3,), 0.5, 1.5), "beta": uniform(g, (3,), -0.5, 0.5)},
        lambda x, gamma, beta: F.batch_norm(x, None, None, gamma, beta, training=True, eps=1e-3))
    return c


def write_ops(seed):
    g = torch.Generator().manual_seed(seed)
    names = []
    for name, (inputs, fn) in op_cases(g).items():
        names.append(name)
        for k, v in inputs.items():
            save(f"op.{name}.{k}", v)
        for dt, tag in ((torch.float64, "f64"), (torch.float32, "f32")):
            args = {k: (v.to(dt).requires_grad_() if v.is_floating_point() else v) for k, v in inputs.items()}
            y = fn(*args.values())
            if dt == torch.float64:
                dy = uniform(g, y.shape, -1, 1)
                save(f"op.{name}.dy", dy)
            y.backward(dy.to(dt))
            save(f"op.{name}.{tag}.y", y)
            for k, v in args.items():
                if v.is_floating_point():
                    save(f"op.{name}.{tag}.grad.{k}", v.grad)
    return names


def write_layer_batch_norm(seed):
    """layers.batch_normalization in a train job: momentum 0.99 (PyTorch's
    0.01), epsilon 1e-3; the moving variance takes the unbiased variance."""
    g = torch.Generator().manual_seed(seed)
    x = uniform(g, (4, 3, 5, 5), -2, 3)
    gamma = uniform(g, (3,), 0.5, 1.5)
    beta = uniform(g, (3,), -0.5, 0.5)
    mm = uniform(g, (3,), -0.5, 0.5)
    mv = uniform(g, (3,), 0.5, 1.5)
    for k, v in (("x", x), ("gamma", gamma), ("beta", beta), ("moving_mean", mm), ("moving_variance", mv)):
        save(f"bn_layer.{k}", v)
    for dt, tag in ((torch.float64, "f64"), (torch.float32, "f32")):
        xd, gd, bd = (v.to(dt).requires_grad_() for v in (x, gamma, beta))
        rm, rv = mm.to(dt).clone(), mv.to(dt).clone()
        y = F.batch_norm(xd, rm, rv, gd, bd, training=True, momentum=0.01, eps=1e-3)
        if dt == torch.float64:
            dy = uniform(g, y.shape, -1, 1)
            save("bn_layer.dy", dy)
        y.backward(dy.to(dt))
        save(f"bn_layer.{tag}.y", y)
        save(f"bn_layer.{tag}.grad.x", xd.grad)
        save(f"bn_layer.{tag}.grad.gamma", gd.grad)
        save(f"bn_layer.{tag}.grad.beta", bd.grad)
        save(f"bn_layer.{tag}.moving_mean", rm)
        save(f"bn_layer.{tag}.moving_variance", rv)


def main():
    global OUT
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} OUTDIR")
    OUT = sys.argv[1]
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(1)  # same bits on every machine
    torch.use_deterministic_algorithms(True)

    g = torch.Generator().manual_seed(20240601)
    images = torch.rand((BATCH, 1, 28, 28), generator=g, dtype=torch.float32)
    labels = torch.randint(0, 10, (BATCH,), generator=g, dtype=torch.int64)
    save("images", images)
    save("labels", labels.to(torch.int32))

    network("lenet", LENET_SHAPES, lenet_forward, {"conv1", "conv2", "dense1"}, images, labels, 1000,
            "dense1-weight")
    network("mlp", MLP_SHAPES, mlp_forward, {"hidden"}, images, labels, 2000, "hidden-weight")
    write_ops(3000)
    write_layer_batch_norm(4000)

    tmp = os.path.join(OUT, "index.txt.tmp")
    with open(tmp, "w") as f:
        f.write(f"# jobflow reference v1, torch {torch.__version__}, numpy {np.__version__}\n")
        f.write("\n".join(INDEX) + "\n")
    os.replace(tmp, os.path.join(OUT, "index.txt"))  # index last: a complete folder has one


if __name__ == "__main__":
    main()
