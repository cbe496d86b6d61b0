"""zoo.py — torchvision models as ONNX files with seeded random weights.

The one exporter of the repository: the model gallery (tests/models/gallery.py)
and the models benchmark (tests/bench/export_models.py) both call it. Debian's
python3-torch and python3-torchvision give the model definitions; no weights
are downloaded (weights=None): torch.manual_seed(SEED) before the model is
built gives every parameter a seeded value from torchvision's own
initialisers. Models are put in eval mode; torch.onnx.export (opset 17,
constant folding on) folds each batch norm into the convolution before it,
as deployed ONNX files of these models have it.

    export(name, path, batch=1, dynamic=False) -> path

writes one file, input "images": (batch, 3, S, S) float32 (dynamic=True: dim
0 is the symbolic "batch", and so is dim 0 of every output), or for a
detector one image (3, S, S) as torchvision's detection models take a list of
images. Output names are fixed per kind (MODELS below). A file is written
only when it is missing or was written by another version of this module or
of torch/torchvision (a "<path>.key" file beside it holds fingerprint()), so
the cache in a build folder regenerates itself when the exporter changes.
"""
import functools
import hashlib
import os

SEED = 0

# name -> (kind, input size S, constructor (its torchvision.models path)[,
# constructor arguments]). convnext_tiny's layer scales (learned per
# channel) start at 0.1 instead of 1e-6, where trained ones lie: at 1e-6 its
# residual branches hardly reach the output, and errors there would hide.
# retinanet_resnet50_fpn resizes its images to 320 (min_size, max_size)
# instead of 800: 6x less work, the same graph.
#   classify: logits (B, 1000)
#   segment:  "out" (B, 21, S, S), the classifier's upsampled scores
#   detect:   boxes (N, 4), scores (N,), labels (N,) of one (3, S, S) image,
#             with the model's own resize, NMS and top-k as exported
#   features: the backbone's feature maps, feat0..featK (the benchmark's
#             ssdlite320 backbone)
MODELS = {
    "resnet18": ("classify", 224, "resnet18"),
    "mobilenet_v2": ("classify", 224, "mobilenet_v2"),
    "mobilenet_v3_small": ("classify", 224, "mobilenet_v3_small"),
    "efficientnet_b0": ("classify", 224, "efficientnet_b0"),
    "squeezenet1_1": ("classify", 224, "squeezenet1_1"),
    "shufflenet_v2_x1_0": ("classify", 224, "shufflenet_v2_x1_0"),
    "regnet_y_400mf": ("classify", 224, "regnet_y_400mf"),
    "convnext_tiny": ("classify", 224, "convnext_tiny", {"layer_scale": 0.1}),
    "vit_b_16": ("classify", 224, "vit_b_16"),
    "lraspp_mobilenet_v3_large": ("segment", 256, "segmentation.lraspp_mobilenet_v3_large"),
    "deeplabv3_mobilenet_v3_large": ("segment", 256, "segmentation.deeplabv3_mobilenet_v3_large"),
    "fcn_resnet50": ("segment", 256, "segmentation.fcn_resnet50"),
    "ssdlite320_mobilenet_v3_large": ("detect", 320, "detection.ssdlite320_mobilenet_v3_large"),
    "fasterrcnn_mobilenet_v3_large_320_fpn": ("detect", 320, "detection.fasterrcnn_mobilenet_v3_large_320_fpn"),
    "retinanet_resnet50_fpn": ("detect", 320, "detection.retinanet_resnet50_fpn", {"min_size": 320, "max_size": 320}),
    "ssdlite320_backbone": ("features", 320, "detection.ssdlite320_mobilenet_v3_large"),
}

OUTPUTS = {"classify": ["logits"], "segment": ["out"], "detect": ["boxes", "scores", "labels"]}


@functools.lru_cache(maxsize=None)
def fingerprint():
    """This module's source and the torch/torchvision versions, hashed."""
    import torch
    import torchvision
    h = hashlib.sha256()
    with open(__file__, "rb") as f:
        h.update(f.read())
    h.update(f"torch {torch.__version__} torchvision {torchvision.__version__}".encode())
    return h.hexdigest()[:16]


def kind_of(name):
    if name not in MODELS:
        raise SystemExit(f"zoo: unknown model '{name}' (known: {', '.join(MODELS)})")
    return MODELS[name][0]


def size_of(name):
    kind_of(name)
    return MODELS[name][1]


def input_shape(name, batch):
    s = size_of(name)
    return (3, s, s) if kind_of(name) == "detect" else (batch, 3, s, s)


def build(name):
    """The model in eval mode, wrapped so that its outputs are a tuple."""
    import torch
    import torchvision
    kind, _, ctor = MODELS[name][:3]
    kwargs = MODELS[name][3] if len(MODELS[name]) > 3 else {}
    mod = torchvision.models
    for part in ctor.split(".")[:-1]:
        mod = getattr(mod, part)
    make = getattr(mod, ctor.split(".")[-1])
    torch.manual_seed(SEED)
    if kind in ("segment", "detect", "features"):
        m = make(weights=None, weights_backbone=None, **kwargs)
    else:
        m = make(weights=None, **kwargs)
    calibrate(m, kind)
    if kind == "features":
        m = m.backbone
    m.eval()

    class Outputs(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            if kind == "detect":
                r = self.m([x])[0]
                return r["boxes"], r["scores"], r["labels"]
            y = self.m(x)
            if isinstance(y, dict):
                return y["out"] if kind == "segment" else tuple(y.values())
            return y

    return Outputs(m).eval()


def calibrate(m, kind):
    """Gives a randomly initialised model the activation scales of a trained
    one, so that the gallery compares meaningful numbers. With torchvision's
    initialisers and batch norms at their initial statistics (mean 0,
    variance 1), activations shrink layer after layer (ssdlite's heads see
    values near 1e-20: denormal floats, every score 1/91), and a few layers
    start at zero (vit_b_16's head: every logit 0). So:
    - weights (rank >= 2) that are all zero get seeded normal values of
      standard deviation 1/sqrt(fan-in);
    - each batch norm's running statistics are measured on two seeded
      random images (cumulative average, as over a calibration set);
    - a detector's score layers are scaled so that their logits have the
      standard deviation SCORE_STD: otherwise the scores all but tie, and
      which boxes survive TopK and NMS is decided by rounding."""
    import torch
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() >= 2 and not p.any():
                p.copy_(torch.randn(p.shape, generator=g) / (p[0].numel() ** 0.5))
    bns = [b for b in m.modules() if isinstance(b, torch.nn.modules.batchnorm._BatchNorm)]
    detector = kind in ("detect", "features")
    size = 320 if detector else 224
    x = torch.rand(2, 3, size, size, generator=g)
    feed = list(x) if detector else x
    m.eval()
    for b in bns:
        b.reset_running_stats()
        b.momentum = None
        b.train()
    with torch.no_grad():
        if bns:
            m(feed)
        for b in bns:
            b.eval()
        if not detector:
            return
        # One pass per stage: Faster R-CNN's class scores depend on which
        # proposals the scaled objectness picks.
        stages = score_layers(m)
        for layers in stages:
            outs = {}
            hooks = [l.register_forward_hook(lambda mod, i, o, k=k: outs.setdefault(k, []).append(o.flatten()))
                     for k, l in enumerate(layers)]
            m(feed)
            for h in hooks:
                h.remove()
            for k, l in enumerate(layers):
                std = float(torch.cat(outs[k]).std())
                if std > 0:
                    l.weight.mul_(SCORE_STD / std)


SCORE_STD = 2.0


def score_layers(m):
    """The layers whose outputs are a detector's class logits, in stages."""
    import torch
    if hasattr(m, "rpn"):  # Faster R-CNN: objectness, then class scores
        return [[m.rpn.head.cls_logits], [m.roi_heads.box_predictor.cls_score]]
    head = m.head.classification_head
    if hasattr(head, "cls_logits"):  # RetinaNet
        return [[head.cls_logits]]
    return [[s[-1] if isinstance(s, torch.nn.Sequential) else s for s in head.module_list]]  # SSD


def output_names(name, model=None):
    kind = kind_of(name)
    if kind in OUTPUTS:
        return OUTPUTS[kind]
    import torch
    with torch.no_grad():
        y = model(torch.zeros(input_shape(name, 1)))
    return [f"feat{i}" for i in range(len(y))]


def is_current(path):
    """Whether PATH is there, written by this exporter and torch."""
    if not (os.path.exists(path) and os.path.exists(path + ".key")):
        return False
    with open(path + ".key") as f:
        return f.read().strip() == fingerprint()


def export(name, path, batch=1, dynamic=False, model=None):
    """Writes PATH unless it is there with this exporter's fingerprint.
    `model` (from build(name)) saves building it again for a second file."""
    if is_current(path):
        return path
    # One exporter per file: the gallery's test and detect-video may want
    # the same file at once (a minute or more each); the second waits for
    # the first and finds the file current.
    import fcntl
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_current(path):
            return path
        return _export(name, path, batch, dynamic, model)


def _export(name, path, batch, dynamic, model):
    key = fingerprint()
    import torch
    torch.set_num_threads(1)
    if model is None:
        model = build(name)
    if kind_of(name) == "detect" and (dynamic or batch != 1):
        raise SystemExit(f"zoo: {name} is a detector: one (3, S, S) image per call, no batch")
    names = output_names(name, model)
    x = torch.rand(input_shape(name, batch), generator=torch.Generator().manual_seed(SEED))
    axes = {n: {0: "batch"} for n in ["images"] + names} if dynamic else None
    tmp = f"{path}.tmp-{os.getpid()}"
    # No torch.no_grad(): under it (and eval mode) torch 1.13's multi-head
    # attention takes its fused fast path, which has no ONNX form (vit_b_16).
    torch.onnx.export(model, (x,), tmp, opset_version=17, input_names=["images"], output_names=names,
                      dynamic_axes=axes, do_constant_folding=True)
    os.replace(tmp, path)
    with open(path + ".key", "w") as f:
        f.write(key + "\n")
    return path
