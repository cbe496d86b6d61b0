#!/usr/bin/python3
"""export_models.py — the real CNNs of tests/bench/run --models, as ONNX files.

    /usr/bin/python3 tests/bench/export_models.py OUTDIR [--batches 1,8] [--models a,b]

A thin front of tests/models/zoo.py, the repository's one exporter (the
model gallery uses it too): the same seeded, calibrated weights (batch-norm
statistics measured on seeded images, so activations have the scales of a
trained model rather than shrinking towards denormal floats, which would
skew the timing), opset 17, batch norms folded into the convolutions, a
fixed batch (no dynamic axes). Each file is OUTDIR/<model>_b<batch>.onnx,
input "images" float32 (B, 3, S, S):

  resnet18        224x224, logits (B, 1000)
  mobilenet_v2    224x224, logits (B, 1000)
  efficientnet_b0 224x224, logits (B, 1000)
  ssdlite320      ssdlite320_mobilenet_v3_large's backbone (the MobileNetV3
                  feature extractor with its extra blocks), 320x320, its six
                  feature maps feat0..feat5 (zoo's "ssdlite320_backbone")

A file already there from the same exporter and torch version is kept (zoo's
fingerprint beside it); others are written again.
Prints one line per file: "<path> <model> <batch> <size>".
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
import zoo  # noqa: E402

# the benchmark's names -> zoo's
MODELS = {
    "resnet18": "resnet18",
    "mobilenet_v2": "mobilenet_v2",
    "efficientnet_b0": "efficientnet_b0",
    "ssdlite320": "ssdlite320_backbone",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    for name in a.models.split(","):
        if name not in MODELS:
            raise SystemExit(f"export_models: unknown model '{name}' ({', '.join(MODELS)})")
        model = None
        for b in (int(x) for x in a.batches.split(",")):
            path = os.path.join(a.outdir, f"{name}_b{b}.onnx")
            if not zoo.is_current(path) and model is None:
                model = zoo.build(MODELS[name])
            zoo.export(MODELS[name], path, batch=b, model=model)
            print(path, name, b, zoo.size_of(MODELS[name]), flush=True)


if __name__ == "__main__":
    sys.exit(main())
