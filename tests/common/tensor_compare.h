// tests/common/tensor_compare.h — a tensor against expected values, element
// by element, naming the worst element when they differ.
//
//   constexpr Tolerance kForward{1e-4, 1e-5};  // |got - want| <= 1e-5 + 1e-4 * |want|
//   EXPECT_TRUE(all_close("logits", got, want, kForward));
//   // Also show what another computation gave at the worst element:
//   EXPECT_TRUE(all_close("logits", got, want, kForward, want_f32, "float32 PyTorch"));
//   EXPECT_LT(rel_diff(bf16_out, f32_out), 2e-2);
//   EXPECT_LT(max_abs_diff(rows(batched, 2, 1), single), 1e-6);
#pragma once

#include <gtest/gtest.h>

#include <jobflow/tensor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace jobflow::testing {

// "[i, j, k]": the index of element `flat` (row-major) of a tensor of shape s.
inline std::string index_str(const Shape& s, int64_t flat) {
  std::vector<int64_t> idx(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
  std::string r = "[";
  for (size_t i = 0; i < idx.size(); ++i) r += (i ? ", " : "") + std::to_string(idx[i]);
  return r + "]";
}

// How far an element may be from the value wanted: |got - want| <= limit(want),
// either atol + rtol * |want| (Sum, numpy's isclose) or max(rtol * |want|,
// atol) (Max).
struct Tolerance {
  enum Bound { Sum, Max };
  double rtol = 0, atol = 0;
  Bound bound = Sum;

  double limit(double want) const {
    return bound == Sum ? atol + rtol * std::fabs(want) : std::max(rtol * std::fabs(want), atol);
  }
  std::string str() const {
    std::ostringstream o;
    o.precision(9);
    if (bound == Sum) o << atol << " + " << rtol << " * |want|";
    else o << "max(" << rtol << " * |want|, " << atol << ")";
    return o.str();
  }
};

// got against want, element by element (NaN is never close). On success the
// message gives the largest |diff| and how much of its bound the worst element
// used; on failure it names how many elements are out, the worst one (by how
// far past its bound) with both values and, when `also` (same size) is given,
// what `also_label` has there.
inline ::testing::AssertionResult all_close(const std::string& what, const Tensor& got, const Tensor& want,
                                            const Tolerance& tol, const Tensor& also = Tensor(),
                                            const std::string& also_label = "") {
  if (!got.defined()) return ::testing::AssertionFailure() << what << ": got no tensor";
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << what << ": shape " << shape_str(got.shape()) << ", want "
                                         << shape_str(want.shape());
  int64_t bad = 0, worst = -1;
  double worst_ratio = 0, max_abs = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.at(i), w = want.at(i);
    const double diff = std::fabs(g - w), limit = tol.limit(w);
    const bool ok = diff <= limit;  // false for NaN
    if (!ok) ++bad;
    max_abs = std::max(max_abs, std::isnan(diff) ? INFINITY : diff);
    const double ratio = ok ? (limit > 0 ? diff / limit : 0.0) : std::isfinite(diff) && limit > 0 ? diff / limit
                                                                                                  : INFINITY;
    if (worst < 0 || ratio > worst_ratio) worst = i, worst_ratio = ratio;
  }
  std::ostringstream m;
  if (bad == 0) {
    m.precision(3);
    m << what << ": max |diff| " << max_abs << ", worst at " << worst_ratio << "x its bound";
    return ::testing::AssertionSuccess() << m.str();
  }
  m.precision(9);
  m << what << " " << shape_str(want.shape()) << " " << dtype_name(got.dtype()) << ": " << bad << " of "
    << want.numel() << " elements outside |got - want| <= " << tol.str() << "; worst at "
    << index_str(want.shape(), worst) << ": got " << got.at(worst) << ", want " << want.at(worst) << " (|diff| "
    << std::fabs(got.at(worst) - want.at(worst)) << ", " << worst_ratio << "x its bound)";
  if (also.defined() && also.numel() == want.numel()) m << ", " << also_label << " there: " << also.at(worst);
  m << "; max |diff| over the tensor " << max_abs;
  return ::testing::AssertionFailure() << m.str();
}

// Seeded uniform float32 values in [lo, hi) (std::mt19937_64).
inline Tensor random_float32(Shape s, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t(std::move(s), Float);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  return t;
}

// |x - y| where two NaNs, or two infinities of one sign, are the same value
// (0) and a NaN against anything else, or an infinity against anything
// else, is infinitely far: a NaN or an overflow on one side only is never
// hidden (std::max would drop a NaN difference).
inline double elem_diff(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y) ? 0.0 : INFINITY;
  if (std::isinf(x) || std::isinf(y)) return x == y ? 0.0 : INFINITY;
  return std::fabs(x - y);
}

// The largest |a - b| (the shapes must match; elem_diff's rules for NaN
// and infinities).
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double m = 0;
  for (int64_t i = 0; i < a.numel() && i < b.numel(); ++i) m = std::max(m, elem_diff(a.at(i), b.at(i)));
  return m;
}

// The largest |a - b| (elem_diff) relative to the largest finite |b|.
inline double rel_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double scale = 1e-30, worst = 0;
  for (int64_t i = 0; i < b.numel(); ++i)
    if (std::isfinite(b.at(i))) scale = std::max(scale, std::fabs(b.at(i)));
  for (int64_t i = 0; i < a.numel() && i < b.numel(); ++i) worst = std::max(worst, elem_diff(a.at(i), b.at(i)));
  return worst / scale;
}

// Rows [b, b + n) of t (along dim 0), copied.
inline Tensor rows(const Tensor& t, int64_t b, int64_t n) {
  Shape s = t.shape();
  s[0] = n;
  Tensor r(s, t.dtype());
  const size_t row = t.nbytes() / static_cast<size_t>(t.dim(0));
  std::memcpy(r.raw(), static_cast<const char*>(t.raw()) + b * row, n * row);
  return r;
}

}  // namespace jobflow::testing
