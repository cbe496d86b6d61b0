// Object-detection post-processing in plain C++ (no GStreamer types):
// decoding the output tensors of the common detection heads into boxes,
// and per-class non-maximum suppression. jobdecode mode=boxes calls these;
// tests/elements/test_decode.cc checks them on hand-made tensors.
//
// Coordinates are in pixels of the model input (the element maps them back
// to the frame); a Box is its corners, x1 <= x2, y1 <= y2.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace jobflow::decode {

struct Box {
  float x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  float score = 0;
  int label = 0;
};

// A read-only 2-D view of floats: element (r, c) is data[r * row_stride +
// c * col_stride]. Detection heads come in both orientations ((N, 4 + C)
// and (4 + C, N)); a view reads either without copying.
struct Table {
  const float* data = nullptr;
  size_t rows = 0, cols = 0;
  size_t row_stride = 0, col_stride = 1;
  float at(size_t r, size_t c) const { return data[r * row_stride + c * col_stride]; }
  // rows x cols stored row-major.
  static Table row_major(const float* d, size_t rows, size_t cols) { return {d, rows, cols, cols, 1}; }
  // rows x cols stored as its transpose (cols x rows, row-major).
  static Table transposed(const float* d, size_t rows, size_t cols) { return {d, rows, cols, 1, rows}; }
};

float area(const Box& b);
float iou(const Box& a, const Box& b);

// Keeps the best boxes: sorted by score (ties keep their input order), a
// box is dropped when its IoU with a kept box of the same label (any label
// when !per_class) exceeds iou_threshold. At most top_k boxes (0 = all).
std::vector<Box> nms(std::vector<Box> boxes, float iou_threshold, size_t top_k, bool per_class = true);

// YOLOv8 (and later ultralytics heads): one row per candidate,
// (cx, cy, w, h, score of class 0, ..., score of class C-1); the box's
// label is its best class, kept when that score >= threshold.
std::vector<Box> decode_yolov8(const Table& t, float threshold);

// YOLOv5: (cx, cy, w, h, objectness, class scores...); score = objectness x
// best class score.
std::vector<Box> decode_yolov5(const Table& t, float threshold);

// SSD: per anchor, box deltas (dx, dy, dw, dh) and class scores (class 0 is
// the background and never reported). Anchors are (cx, cy, w, h) normalised
// to the model input (0..1); the box is
//   cx = acx + dx / scale[0] * aw,  cy = acy + dy / scale[1] * ah,
//   w = aw * exp(dw / scale[2]),    h = ah * exp(dh / scale[3])
// times the input size. With `softmax` the scores are logits (softmax over
// the classes of each anchor), otherwise probabilities. A box per class
// scoring >= threshold.
struct Anchor {
  float cx = 0, cy = 0, w = 0, h = 0;
};
struct SsdParams {
  float scale[4] = {10.f, 10.f, 5.f, 5.f};
  bool softmax = true;
  float input_width = 1, input_height = 1;
};
std::vector<Box> decode_ssd(const Table& deltas, const Table& scores, const std::vector<Anchor>& anchors,
                            const SsdParams& p, float threshold);

// Models that already give boxes (x1, y1, x2, y2), scores and labels (e.g.
// torchvision's detection models exported with their post-processing).
// `labels` may be null (every box label 0).
std::vector<Box> decode_detections(const Table& boxes, const float* scores, const float* labels, float threshold);

// Anchors from text: one anchor per line, four numbers "cx cy w h"
// (spaces, tabs or commas between). Returns false with a message naming
// the line on a malformed line.
bool parse_anchors(const std::string& text, std::vector<Anchor>* anchors, std::string* error);

}  // namespace jobflow::decode
