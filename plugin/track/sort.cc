// SORT: see sort.h.
#include "track/sort.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace jobflow::track {

float iou(const Rect& a, const Rect& b) {
  const float ix = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
  const float iy = std::min(a.y2, b.y2) - std::max(a.y1, b.y1);
  if (ix <= 0 || iy <= 0) return 0.f;
  const float inter = ix * iy;
  const float ua = std::max(0.f, a.x2 - a.x1) * std::max(0.f, a.y2 - a.y1);
  const float ub = std::max(0.f, b.x2 - b.x1) * std::max(0.f, b.y2 - b.y1);
  return inter / (ua + ub - inter);
}

std::vector<int> assign_min_cost(const std::vector<double>& cost, size_t rows, size_t cols) {
  std::vector<int> result(rows, -1);
  if (rows == 0 || cols == 0) return result;
  if (rows > cols) {  // solve the transpose: every column gets a row
    std::vector<double> t(cost.size());
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) t[c * rows + r] = cost[r * cols + c];
    const std::vector<int> by_col = assign_min_cost(t, cols, rows);
    for (size_t c = 0; c < cols; ++c)
      if (by_col[c] >= 0) result[static_cast<size_t>(by_col[c])] = static_cast<int>(c);
    return result;
  }
  // rows <= cols: rows are added one at a time along shortest augmenting
  // paths, keeping dual potentials u (rows) and v (columns) feasible.
  // Index 0 is a virtual column/row; real ones are 1-based here.
  const double inf = std::numeric_limits<double>::infinity();
  const size_t n = rows, m = cols;
  std::vector<double> u(n + 1, 0), v(m + 1, 0), slack(m + 1);
  std::vector<size_t> owner(m + 1, 0), prev(m + 1, 0);  // owner[j]: row holding column j
  std::vector<char> done(m + 1);
  auto a = [&](size_t i, size_t j) { return cost[(i - 1) * m + (j - 1)]; };
  for (size_t i = 1; i <= n; ++i) {
    owner[0] = i;
    size_t j0 = 0;
    std::fill(slack.begin(), slack.end(), inf);
    std::fill(done.begin(), done.end(), 0);
    do {
      done[j0] = 1;
      const size_t i0 = owner[j0];
      double delta = inf;
      size_t j1 = 0;
      for (size_t j = 1; j <= m; ++j) {
        if (done[j]) continue;
        const double reduced = a(i0, j) - u[i0] - v[j];
        if (reduced < slack[j]) {
          slack[j] = reduced;
          prev[j] = j0;
        }
        if (slack[j] < delta) {
          delta = slack[j];
          j1 = j;
        }
      }
      for (size_t j = 0; j <= m; ++j) {
        if (done[j]) {
          u[owner[j]] += delta;
          v[j] -= delta;
        } else {
          slack[j] -= delta;
        }
      }
      j0 = j1;
    } while (owner[j0] != 0);
    do {  // flip the path
      const size_t j1 = prev[j0];
      owner[j0] = owner[j1];
      j0 = j1;
    } while (j0 != 0);
  }
  for (size_t j = 1; j <= m; ++j)
    if (owner[j] != 0) result[owner[j] - 1] = static_cast<int>(j - 1);
  return result;
}

/* ------------------------------------------------------------ Kalman */

namespace {

constexpr int N = 7;

std::array<double, 4> measure(const Rect& r) {
  const double w = r.x2 - r.x1, h = r.y2 - r.y1;
  return {r.x1 + w / 2, r.y1 + h / 2, w * h, h > 0 ? w / h : 1.0};
}

// Inverse of a symmetric positive-definite 4 x 4 matrix (Gauss-Jordan).
bool invert4(std::array<double, 16> m, std::array<double, 16>* inv) {
  std::array<double, 16>& r = *inv;
  r.fill(0);
  for (int i = 0; i < 4; ++i) r[i * 4 + i] = 1;
  for (int c = 0; c < 4; ++c) {
    int piv = c;
    for (int k = c + 1; k < 4; ++k)
      if (std::abs(m[k * 4 + c]) > std::abs(m[piv * 4 + c])) piv = k;
    if (std::abs(m[piv * 4 + c]) < 1e-12) return false;
    if (piv != c)
      for (int k = 0; k < 4; ++k) {
        std::swap(m[c * 4 + k], m[piv * 4 + k]);
        std::swap(r[c * 4 + k], r[piv * 4 + k]);
      }
    const double d = m[c * 4 + c];
    for (int k = 0; k < 4; ++k) {
      m[c * 4 + k] /= d;
      r[c * 4 + k] /= d;
    }
    for (int row = 0; row < 4; ++row) {
      if (row == c) continue;
      const double f = m[row * 4 + c];
      if (f == 0) continue;
      for (int k = 0; k < 4; ++k) {
        m[row * 4 + k] -= f * m[c * 4 + k];
        r[row * 4 + k] -= f * r[c * 4 + k];
      }
    }
  }
  return true;
}

}  // namespace

BoxKalman::BoxKalman(const Rect& r) {
  const auto z = measure(r);
  for (int i = 0; i < 4; ++i) x_[i] = z[i];
  // SORT's initial uncertainty: large for the unseen velocities.
  const double diag[N] = {10, 10, 10, 10, 1e4, 1e4, 1e4};
  for (int i = 0; i < N; ++i) p_[i * N + i] = diag[i];
}

void BoxKalman::predict() {
  if (x_[6] + x_[2] <= 0) x_[6] = 0;  // the area cannot go negative
  x_[0] += x_[4];
  x_[1] += x_[5];
  x_[2] += x_[6];
  // P = F P F^T + Q, F = I with F[k][k + 4] = 1 for k < 3
  std::array<double, 49> fp = p_;
  for (int k = 0; k < 3; ++k)
    for (int c = 0; c < N; ++c) fp[k * N + c] += p_[(k + 4) * N + c];
  std::array<double, 49> fpf = fp;
  for (int r = 0; r < N; ++r)
    for (int k = 0; k < 3; ++k) fpf[r * N + k] += fp[r * N + k + 4];
  const double q[N] = {1, 1, 1, 1, 0.01, 0.01, 1e-4};
  for (int i = 0; i < N; ++i) fpf[i * N + i] += q[i];
  p_ = fpf;
}

void BoxKalman::update(const Rect& r) {
  const auto z = measure(r);
  const double rdiag[4] = {1, 1, 10, 10};
  std::array<double, 16> s{};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) s[i * 4 + j] = p_[i * N + j] + (i == j ? rdiag[i] : 0);
  std::array<double, 16> si{};
  if (!invert4(s, &si)) return;
  // K = P H^T S^-1 (7 x 4); H^T picks P's first four columns
  double k[N][4];
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < 4; ++j) {
      double acc = 0;
      for (int t = 0; t < 4; ++t) acc += p_[i * N + t] * si[t * 4 + j];
      k[i][j] = acc;
    }
  double y[4];
  for (int i = 0; i < 4; ++i) y[i] = z[i] - x_[i];
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < 4; ++j) x_[i] += k[i][j] * y[j];
  // P = (I - K H) P: subtract K times P's first four rows
  std::array<double, 49> np = p_;
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < N; ++c) {
      double acc = 0;
      for (int j = 0; j < 4; ++j) acc += k[i][j] * p_[j * N + c];
      np[i * N + c] -= acc;
    }
  p_ = np;
}

Rect BoxKalman::rect() const {
  const double s = std::max(x_[2], 1e-6), ratio = std::max(x_[3], 1e-6);
  const double w = std::sqrt(s * ratio), h = s / w;
  return Rect{static_cast<float>(x_[0] - w / 2), static_cast<float>(x_[1] - h / 2), static_cast<float>(x_[0] + w / 2),
              static_cast<float>(x_[1] + h / 2)};
}

/* ------------------------------------------------------------ Sort */

std::vector<size_t> Sort::update(const std::vector<Detection>& dets) {
  ++frames_;
  for (Track& t : tracks_) {
    t.filter.predict();
    ++t.age;
    if (t.misses > 0) t.streak = 0;
    ++t.misses;
  }
  const size_t nd = dets.size(), nt = tracks_.size();
  std::vector<double> cost(nd * nt);
  std::vector<Rect> predicted(nt);
  for (size_t j = 0; j < nt; ++j) predicted[j] = tracks_[j].filter.rect();
  for (size_t i = 0; i < nd; ++i)
    for (size_t j = 0; j < nt; ++j) {
      const bool same = !p_.per_label || dets[i].label == tracks_[j].label;
      cost[i * nt + j] = same ? 1.0 - iou(dets[i].rect, predicted[j]) : 1.0;
    }
  std::vector<int> match = assign_min_cost(cost, nd, nt);
  for (size_t i = 0; i < nd; ++i)
    if (match[i] >= 0 && 1.0 - cost[i * nt + static_cast<size_t>(match[i])] < p_.iou_threshold) match[i] = -1;

  const bool warming_up = frames_ <= static_cast<uint64_t>(std::max(p_.min_hits, 0));
  auto confirm = [&](Track& t) {
    if (!t.confirmed && (t.streak >= p_.min_hits || warming_up)) {
      t.confirmed = true;
      t.id = next_id_++;
    }
  };
  for (size_t i = 0; i < nd; ++i) {
    if (match[i] < 0) continue;
    Track& t = tracks_[static_cast<size_t>(match[i])];
    t.filter.update(dets[i].rect);
    ++t.hits;
    ++t.streak;
    t.misses = 0;
    t.last = dets[i].rect;
    confirm(t);
  }
  // Drop tracks unseen for too long (never one matched just now).
  std::vector<size_t> new_index(nt, SIZE_MAX);
  std::vector<Track> kept;
  kept.reserve(nt + nd);
  for (size_t j = 0; j < nt; ++j) {
    if (tracks_[j].misses > p_.max_age) continue;
    new_index[j] = kept.size();
    kept.push_back(std::move(tracks_[j]));
  }
  tracks_ = std::move(kept);
  std::vector<size_t> out(nd);
  for (size_t i = 0; i < nd; ++i) {
    if (match[i] >= 0) {
      out[i] = new_index[static_cast<size_t>(match[i])];
      continue;
    }
    Track t{0, dets[i].label, 1, 1, 0, 0, false, dets[i].rect, BoxKalman(dets[i].rect)};
    confirm(t);
    out[i] = tracks_.size();
    tracks_.push_back(std::move(t));
  }
  return out;
}

void Sort::reset() {
  tracks_.clear();
  frames_ = 0;
  next_id_ = 1;
}

}  // namespace jobflow::track
