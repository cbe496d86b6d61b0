// Detection heads and NMS: see boxes.h.
#include "decode/boxes.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <sstream>

namespace jobflow::decode {

float area(const Box& b) { return std::max(0.f, b.x2 - b.x1) * std::max(0.f, b.y2 - b.y1); }

float iou(const Box& a, const Box& b) {
  const float ix = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
  const float iy = std::min(a.y2, b.y2) - std::max(a.y1, b.y1);
  if (ix <= 0 || iy <= 0) return 0.f;
  const float inter = ix * iy;
  const float uni = area(a) + area(b) - inter;
  return uni > 0 ? inter / uni : 0.f;
}

std::vector<Box> nms(std::vector<Box> boxes, float iou_threshold, size_t top_k, bool per_class) {
  std::stable_sort(boxes.begin(), boxes.end(), [](const Box& a, const Box& b) { return a.score > b.score; });
  std::vector<Box> kept;
  for (const Box& b : boxes) {
    if (top_k && kept.size() >= top_k) break;
    bool keep = true;
    for (const Box& k : kept) {
      if (per_class && k.label != b.label) continue;
      if (iou(k, b) > iou_threshold) {
        keep = false;
        break;
      }
    }
    if (keep) kept.push_back(b);
  }
  return kept;
}

namespace {

Box centre_box(float cx, float cy, float w, float h, float score, int label) {
  return Box{cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, score, label};
}

}  // namespace

std::vector<Box> decode_yolov8(const Table& t, float threshold) {
  std::vector<Box> out;
  if (t.cols < 5) return out;
  for (size_t r = 0; r < t.rows; ++r) {
    size_t best = 4;
    for (size_t c = 5; c < t.cols; ++c)
      if (t.at(r, c) > t.at(r, best)) best = c;
    const float s = t.at(r, best);
    if (s < threshold) continue;
    out.push_back(centre_box(t.at(r, 0), t.at(r, 1), t.at(r, 2), t.at(r, 3), s, static_cast<int>(best - 4)));
  }
  return out;
}

std::vector<Box> decode_yolov5(const Table& t, float threshold) {
  std::vector<Box> out;
  if (t.cols < 6) return out;
  for (size_t r = 0; r < t.rows; ++r) {
    const float obj = t.at(r, 4);
    if (obj < threshold) continue;  // the product cannot reach it either (scores <= 1)
    size_t best = 5;
    for (size_t c = 6; c < t.cols; ++c)
      if (t.at(r, c) > t.at(r, best)) best = c;
    const float s = obj * t.at(r, best);
    if (s < threshold) continue;
    out.push_back(centre_box(t.at(r, 0), t.at(r, 1), t.at(r, 2), t.at(r, 3), s, static_cast<int>(best - 5)));
  }
  return out;
}

std::vector<Box> decode_ssd(const Table& deltas, const Table& scores, const std::vector<Anchor>& anchors,
                            const SsdParams& p, float threshold) {
  std::vector<Box> out;
  const size_t n = std::min({deltas.rows, scores.rows, anchors.size()});
  std::vector<float> prob(scores.cols);
  for (size_t i = 0; i < n; ++i) {
    for (size_t c = 0; c < scores.cols; ++c) prob[c] = scores.at(i, c);
    if (p.softmax && !prob.empty()) {
      const float mx = *std::max_element(prob.begin(), prob.end());
      float sum = 0;
      for (float& v : prob) sum += (v = std::exp(v - mx));
      for (float& v : prob) v /= sum;
    }
    const Anchor& a = anchors[i];
    bool decoded = false;
    Box b;
    for (size_t c = 1; c < scores.cols; ++c) {
      if (prob[c] < threshold) continue;
      if (!decoded) {
        const float cx = a.cx + deltas.at(i, 0) / p.scale[0] * a.w;
        const float cy = a.cy + deltas.at(i, 1) / p.scale[1] * a.h;
        const float w = a.w * std::exp(deltas.at(i, 2) / p.scale[2]);
        const float h = a.h * std::exp(deltas.at(i, 3) / p.scale[3]);
        b = centre_box(cx * p.input_width, cy * p.input_height, w * p.input_width, h * p.input_height, 0, 0);
        decoded = true;
      }
      b.score = prob[c];
      b.label = static_cast<int>(c);
      out.push_back(b);
    }
  }
  return out;
}

std::vector<Box> decode_detections(const Table& boxes, const float* scores, const float* labels, float threshold) {
  std::vector<Box> out;
  for (size_t i = 0; i < boxes.rows; ++i) {
    if (scores[i] < threshold) continue;
    Box b{boxes.at(i, 0), boxes.at(i, 1), boxes.at(i, 2), boxes.at(i, 3), scores[i],
          labels ? static_cast<int>(std::lround(labels[i])) : 0};
    if (b.x2 < b.x1) std::swap(b.x1, b.x2);
    if (b.y2 < b.y1) std::swap(b.y1, b.y2);
    out.push_back(b);
  }
  return out;
}

bool parse_anchors(const std::string& text, std::vector<Anchor>* anchors, std::string* error) {
  anchors->clear();
  std::istringstream in(text);
  std::string line;
  for (size_t no = 1; std::getline(in, line); ++no) {
    for (char& ch : line)
      if (ch == ',' || ch == '\t' || ch == '\r') ch = ' ';
    if (line.find_first_not_of(' ') == std::string::npos) continue;
    float v[4];
    const char* p = line.c_str();
    int got = 0;
    for (; got < 4; ++got) {
      char* end = nullptr;
      v[got] = std::strtof(p, &end);
      if (end == p) break;
      p = end;
    }
    while (*p == ' ') ++p;
    if (got != 4 || *p != '\0') {
      if (error) *error = "line " + std::to_string(no) + ": expected four numbers \"cx cy w h\", got \"" + line + "\"";
      return false;
    }
    anchors->push_back(Anchor{v[0], v[1], v[2], v[3]});
  }
  return true;
}

}  // namespace jobflow::decode
