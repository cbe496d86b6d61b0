// DB text boxes and CTC decoding: see text.h.
#include "decode/text.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>

namespace jobflow::decode {

namespace {

constexpr float kPi = 3.14159265358979323846f;

struct Pt {
  float x, y;
};

float cross(const Pt& o, const Pt& a, const Pt& b) { return (a.x - o.x) * (b.y - o.y) - (a.y - o.y) * (b.x - o.x); }

// Andrew's monotone chain; collinear points dropped.
std::vector<Pt> convex_hull(std::vector<Pt> p) {
  std::sort(p.begin(), p.end(), [](const Pt& a, const Pt& b) { return a.x < b.x || (a.x == b.x && a.y < b.y); });
  p.erase(std::unique(p.begin(), p.end(), [](const Pt& a, const Pt& b) { return a.x == b.x && a.y == b.y; }),
          p.end());
  if (p.size() < 3) return p;
  std::vector<Pt> h(2 * p.size());
  size_t k = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    while (k >= 2 && cross(h[k - 2], h[k - 1], p[i]) <= 0) --k;
    h[k++] = p[i];
  }
  for (size_t i = p.size() - 1, t = k + 1; i > 0; --i) {
    while (k >= t && cross(h[k - 2], h[k - 1], p[i - 1]) <= 0) --k;
    h[k++] = p[i - 1];
  }
  h.resize(k - 1);
  return h;
}

// Turns the angle into (-pi/4, pi/4], swapping w and h per quarter turn.
void normalise(RotatedBox* b) {
  while (b->angle > kPi / 4 + 1e-6f) {
    b->angle -= kPi / 2;
    std::swap(b->w, b->h);
  }
  while (b->angle <= -kPi / 4 + 1e-6f) {
    b->angle += kPi / 2;
    std::swap(b->w, b->h);
  }
}

}  // namespace

void corners(const RotatedBox& b, float out[8]) {
  const float c = std::cos(b.angle), s = std::sin(b.angle);
  const float hw = b.w / 2, hh = b.h / 2;
  const float du[4] = {-hw, hw, hw, -hw}, dv[4] = {-hh, -hh, hh, hh};
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = b.cx + du[i] * c - dv[i] * s;
    out[2 * i + 1] = b.cy + du[i] * s + dv[i] * c;
  }
}

RotatedBox min_area_rect(const std::vector<float>& xy) {
  std::vector<Pt> pts(xy.size() / 2);
  for (size_t i = 0; i < pts.size(); ++i) pts[i] = {xy[2 * i], xy[2 * i + 1]};
  RotatedBox best;
  if (pts.empty()) return best;
  const std::vector<Pt> h = convex_hull(pts);
  if (h.size() == 1) {
    best.cx = h[0].x;
    best.cy = h[0].y;
    return best;
  }
  double best_area = -1;
  for (size_t i = 0; i < h.size(); ++i) {
    const Pt& a = h[i];
    const Pt& b = h[(i + 1) % h.size()];
    const double len = std::hypot(b.x - a.x, b.y - a.y);
    if (len == 0) continue;
    const double ux = (b.x - a.x) / len, uy = (b.y - a.y) / len;  // along the edge
    const double vx = -uy, vy = ux;                                  // across it
    double minu = 1e30, maxu = -1e30, minv = 1e30, maxv = -1e30;
    for (const Pt& p : h) {
      const double u = p.x * ux + p.y * uy, v = p.x * vx + p.y * vy;
      minu = std::min(minu, u);
      maxu = std::max(maxu, u);
      minv = std::min(minv, v);
      maxv = std::max(maxv, v);
    }
    const double ar = (maxu - minu) * (maxv - minv);
    if (best_area >= 0 && ar >= best_area - 1e-9) continue;
    best_area = ar;
    const double cu = (minu + maxu) / 2, cv = (minv + maxv) / 2;
    best.cx = static_cast<float>(cu * ux + cv * vx);
    best.cy = static_cast<float>(cu * uy + cv * vy);
    best.w = static_cast<float>(maxu - minu);
    best.h = static_cast<float>(maxv - minv);
    best.angle = static_cast<float>(std::atan2(uy, ux));
  }
  normalise(&best);
  return best;
}

std::vector<RotatedBox> db_boxes(const float* prob, size_t height, size_t width, const DbParams& p) {
  const size_t n = height * width;
  std::vector<int32_t> comp(n, -1);
  std::vector<std::vector<uint32_t>> regions;  // pixel indices per region
  std::vector<uint32_t> stack;
  for (size_t start = 0; start < n; ++start) {
    if (comp[start] >= 0 || !(prob[start] > p.binary_threshold)) continue;
    const int32_t id = static_cast<int32_t>(regions.size());
    regions.emplace_back();
    comp[start] = id;
    stack.assign(1, static_cast<uint32_t>(start));
    while (!stack.empty()) {
      const uint32_t i = stack.back();
      stack.pop_back();
      regions[id].push_back(i);
      const long y = static_cast<long>(i / width), x = static_cast<long>(i % width);
      for (long dy = -1; dy <= 1; ++dy) {
        for (long dx = -1; dx <= 1; ++dx) {
          const long yy = y + dy, xx = x + dx;
          if ((dx == 0 && dy == 0) || yy < 0 || xx < 0 || yy >= static_cast<long>(height) ||
              xx >= static_cast<long>(width))
            continue;
          const size_t j = static_cast<size_t>(yy) * width + static_cast<size_t>(xx);
          if (comp[j] >= 0 || !(prob[j] > p.binary_threshold)) continue;
          comp[j] = id;
          stack.push_back(static_cast<uint32_t>(j));
        }
      }
    }
  }
  std::vector<size_t> order(regions.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return regions[a].size() > regions[b].size(); });
  if (order.size() > p.max_candidates) order.resize(p.max_candidates);

  std::vector<RotatedBox> out;
  std::vector<float> xy;
  for (size_t r : order) {
    xy.clear();
    for (uint32_t i : regions[r]) {
      xy.push_back(static_cast<float>(i % width));
      xy.push_back(static_cast<float>(i / width));
    }
    RotatedBox b = min_area_rect(xy);
    if (std::min(b.w, b.h) < p.min_size) continue;
    /* mean probability over the pixels whose centres are in the box */
    float c8[8];
    corners(b, c8);
    float minx = c8[0], maxx = c8[0], miny = c8[1], maxy = c8[1];
    for (int i = 1; i < 4; ++i) {
      minx = std::min(minx, c8[2 * i]);
      maxx = std::max(maxx, c8[2 * i]);
      miny = std::min(miny, c8[2 * i + 1]);
      maxy = std::max(maxy, c8[2 * i + 1]);
    }
    const long x0 = std::max(0L, static_cast<long>(std::floor(minx))),
               x1 = std::min(static_cast<long>(width) - 1, static_cast<long>(std::ceil(maxx)));
    const long y0 = std::max(0L, static_cast<long>(std::floor(miny))),
               y1 = std::min(static_cast<long>(height) - 1, static_cast<long>(std::ceil(maxy)));
    const float ca = std::cos(b.angle), sa = std::sin(b.angle);
    double sum = 0;
    size_t count = 0;
    for (long y = y0; y <= y1; ++y) {
      for (long x = x0; x <= x1; ++x) {
        const float dx = static_cast<float>(x) - b.cx, dy = static_cast<float>(y) - b.cy;
        const float u = dx * ca + dy * sa, v = -dx * sa + dy * ca;
        if (std::abs(u) <= b.w / 2 + 1e-3f && std::abs(v) <= b.h / 2 + 1e-3f) {
          sum += prob[static_cast<size_t>(y) * width + static_cast<size_t>(x)];
          ++count;
        }
      }
    }
    b.score = count ? static_cast<float>(sum / count) : 0.f;
    if (b.score < p.box_threshold) continue;
    const float perimeter = 2 * (b.w + b.h);
    const float d = perimeter > 0 ? b.w * b.h * p.unclip_ratio / perimeter : 0.f;
    b.w += 2 * d;
    b.h += 2 * d;
    if (std::min(b.w, b.h) < p.min_size + 2) continue;
    out.push_back(b);
  }
  /* reading order: top to bottom; boxes on one line (centres within 10
   * pixels) left to right */
  std::stable_sort(out.begin(), out.end(), [](const RotatedBox& a, const RotatedBox& b) {
    return a.cy < b.cy || (a.cy == b.cy && a.cx < b.cx);
  });
  for (size_t i = 1; i < out.size(); ++i)
    for (size_t j = i; j > 0 && std::abs(out[j].cy - out[j - 1].cy) < 10 && out[j].cx < out[j - 1].cx; --j)
      std::swap(out[j], out[j - 1]);
  return out;
}

CtcResult ctc_greedy(const float* scores, size_t steps, size_t classes, int blank, bool softmax) {
  CtcResult r;
  if (classes == 0) return r;
  double sum = 0;
  int prev = -1;
  for (size_t t = 0; t < steps; ++t) {
    const float* row = scores + t * classes;
    size_t best = 0;
    for (size_t c = 1; c < classes; ++c)
      if (row[c] > row[best]) best = c;
    const int cls = static_cast<int>(best);
    if (cls != blank && cls != prev) {
      double p = row[best];
      if (softmax) {
        double z = 0;
        for (size_t c = 0; c < classes; ++c) z += std::exp(static_cast<double>(row[c]) - row[best]);
        p = 1.0 / z;
      }
      r.classes.push_back(cls);
      sum += p;
    }
    prev = cls;
  }
  r.confidence = r.classes.empty() ? 0.f : static_cast<float>(sum / r.classes.size());
  return r;
}

std::string ctc_text(const std::vector<int>& classes, const std::vector<std::string>& dictionary, int blank) {
  std::string s;
  for (int c : classes) {
    const long i = c < blank ? c : c - 1;
    if (i >= 0 && static_cast<size_t>(i) < dictionary.size())
      s += dictionary[static_cast<size_t>(i)];
    else
      s += "\xEF\xBF\xBD";  // U+FFFD
  }
  return s;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(std::move(line));
    pos = end + 1;
  }
  return out;
}

}  // namespace jobflow::decode
