// Text detection and recognition post-processing in plain C++:
//  - DB (differentiable binarisation) probability maps, as PP-OCR's text
//    detectors output them, to rotated boxes;
//  - CTC greedy decoding of a recogniser's per-step class scores.
// jobdecode mode=text-regions and mode=ctc call these.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace jobflow::decode {

// A rotated rectangle: centre, size and the angle of its width axis in
// radians (positive turns +x towards +y: clockwise on screen), in
// (-pi/4, pi/4], so that text lines come out as w along the line.
struct RotatedBox {
  float cx = 0, cy = 0, w = 0, h = 0, angle = 0;
  float score = 0;
};

// The four corners of `b`, clockwise on screen from the one that is top-left
// when the angle is 0: (x0, y0, x1, y1, x2, y2, x3, y3).
void corners(const RotatedBox& b, float out[8]);

struct DbParams {
  float binary_threshold = 0.3f;  // pixels above it are text
  float box_threshold = 0.6f;     // mean probability inside a box to keep it
  float unclip_ratio = 1.5f;      // the box grows by area * ratio / perimeter on each side
  float min_size = 3.f;           // boxes with a shorter side are dropped (before unclipping; +2 after)
  size_t max_candidates = 1000;   // regions considered, largest first
};

// The text boxes of an (H, W) probability map, in map pixels (pixel
// centres are integer coordinates), ordered top to bottom, then left to
// right. Each 8-connected region of pixels above binary_threshold gives the
// minimum-area rectangle around its pixel centres; it is kept when its
// shorter side is at least min_size and the mean probability inside it is
// at least box_threshold, then grown by the unclip distance (the text
// detector's map is shrunk from the text by that much).
std::vector<RotatedBox> db_boxes(const float* prob, size_t height, size_t width, const DbParams& p);

// The minimum-area rectangle around a set of points (x, y pairs), score 0.
RotatedBox min_area_rect(const std::vector<float>& xy);

// CTC greedy decoding of T steps of C class scores (row-major (T, C)):
// the best class per step, repeats merged, `blank` dropped. `confidence` is
// the mean of the kept steps' best scores (after softmax when `softmax`,
// i.e. the input is logits), 0 when nothing is kept.
struct CtcResult {
  std::vector<int> classes;
  float confidence = 0;
};
CtcResult ctc_greedy(const float* scores, size_t steps, size_t classes, int blank, bool softmax);

// The text of `classes` with a dictionary: class i (i != blank) is
// dictionary[i - 1] when the blank is class 0 (PP-OCR's layout: blank,
// the characters, then " " when the model has one class more); an index
// without an entry becomes U+FFFD.
std::string ctc_text(const std::vector<int>& classes, const std::vector<std::string>& dictionary, int blank);

// Splits a dictionary file or ONNX metadata value: one entry per line
// (a "\r" before the newline is dropped; empty lines are entries too
// except a last one after the final newline).
std::vector<std::string> split_lines(const std::string& text);

}  // namespace jobflow::decode
