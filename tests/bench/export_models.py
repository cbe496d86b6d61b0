#!/usr/bin/python3
"""export_models.py — the real CNNs of tests/bench/run --models, as ONNX files.

    /usr/bin/python3 tests/bench/export_models.py OUTDIR [--batches 1,8] [--models a,b]

Debian's python3-torch and python3-torchvision (model definitions, no
weights): each model gets seeded random weights (torch.manual_seed(0),
torchvision's own initialisers), is put in eval mode and exported with
torch.onnx.export (opset 17, a fixed batch: no dynamic axes) as
OUTDIR/<model>_b<batch>.onnx, input "images" float32 (B, 3, S, S):

  resnet18        224x224, logits (B, 1000)
  mobilenet_v2    224x224, logits (B, 1000)
  efficientnet_b0 224x224, logits (B, 1000)
  ssdlite320      ssdlite320_mobilenet_v3_large's backbone (the MobileNetV3
                  feature extractor with its extra blocks), 320x320, its six
                  feature maps

The exporter folds each batch norm into the convolution before it (eval
mode), as every deployed ONNX file of these models has it. A file already
there is kept (the cache lives in the build folder; delete it to re-export).
Prints one line per file: "<path> <model> <batch> <size>".
"""
import argparse
import os
import sys

import torch
import torchvision

SEED = 0
MODELS = ("resnet18", "mobilenet_v2", "efficientnet_b0", "ssdlite320")


def build(name):
    tv = torchvision.models
    if name == "resnet18":
        return tv.resnet18(weights=None), 224
    if name == "mobilenet_v2":
        return tv.mobilenet_v2(weights=None), 224
    if name == "efficientnet_b0":
        return tv.efficientnet_b0(weights=None), 224
    if name == "ssdlite320":
        det = tv.detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None)
        return det.backbone, 320
    raise SystemExit(f"export_models: unknown model '{name}' ({', '.join(MODELS)})")


class Outputs(torch.nn.Module):
    """A backbone returning a dict of feature maps, as a tuple (ONNX outputs)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        y = self.m(x)
        return tuple(y.values()) if isinstance(y, dict) else y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    torch.set_num_threads(1)
    for name in a.models.split(","):
        model = None
        for b in (int(x) for x in a.batches.split(",")):
            path = os.path.join(a.outdir, f"{name}_b{b}.onnx")
            if model is None:
                torch.manual_seed(SEED)
                model, size = build(name)
                model = Outputs(model).eval()
            if not os.path.exists(path):
                x = torch.randn(b, 3, size, size)
                tmp = path + ".tmp"
                with torch.no_grad():
                    torch.onnx.export(model, (x,), tmp, opset_version=17, input_names=["images"],
                                      do_constant_folding=True)
                os.replace(tmp, path)
            print(path, name, b, size, flush=True)


if __name__ == "__main__":
    sys.exit(main())
