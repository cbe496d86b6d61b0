// tests/common/tensor_compare.h — a tensor against expected values, element
// by element, naming the worst element when they differ.
//
//   constexpr Tolerance kForward{1e-4, 1e-5};  // |got - want| <= 1e-5 + 1e-4 * |want|
//   EXPECT_TRUE(all_close("logits", got, want, kForward));
//   // Also show what another computation gave at the worst element:
//   EXPECT_TRUE(all_close("logits", got, want, kForward, want_f32, "float32 PyTorch"));
#pragma once

#include <gtest/gtest.h>

#include <jobflow/tensor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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

}  // namespace jobflow::testing
