// tests/common/gradcheck.h — finite-difference check of an op's gradient.
//
//   EXPECT_TRUE(jobflow::testing::gradcheck(
//       [](const std::vector<flow::Blob>& x) { return flow::mul(x[0], x[1]); },
//       {{2, 1, 3}, {4, 1}}));
//
// Builds two predict jobs over the same seeded random inputs:
//   1. (y, L, dL/dx_0, ..., dL/dx_n) with L = sum(y * c), c a fixed random
//      cotangent baked in as a constant, gradients by jobflow::gradients;
//   2. L alone, called twice per input element for the central difference
//      (L(x + eps) - L(x - eps)) / (2 eps).
// Each analytic element must satisfy |a - n| <= atol + rtol * max(|a|, |n|);
// a failure names the input, the worst element's index and both values.
//
// positive(), away_from_zero() and float32() are the usual options;
// second_order(act) checks the gradient of act's gradient.
#pragma once

#include <gtest/gtest.h>

#include <jobflow/jobflow.h>

#include "tensor_compare.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace jobflow::testing {

struct GradCheckOptions {
  DType dtype = DType::Float64;
  uint64_t seed = 1234;
  // Inputs are uniform in [-1, 1]; `positive` makes them uniform in
  // [0.5, 2] (log, sqrt, rsqrt, div denominators).
  bool positive = false;
  // When > 0, every input satisfies |x| >= min_abs (keeps relu and friends
  // away from their kink at 0; eps must stay well below it).
  double min_abs = 0.0;
  // Explicit inputs instead of random ones (must match the shapes/dtype).
  std::vector<Tensor> inputs;
  // 0 = defaults: eps 1e-6 / 1e-2, rtol 1e-5 / 5e-2, atol 1e-6 / 1e-2 for
  // float64 / float32.
  double eps = 0.0, rtol = 0.0, atol = 0.0;
};

namespace gradcheck_detail {

inline void set_elem(Tensor& t, int64_t i, double v) {
  if (t.dtype() == DType::Float64) t.data<double>()[i] = v;
  else t.data<float>()[i] = static_cast<float>(v);
}

inline Tensor random_tensor(const Shape& s, DType dt, std::mt19937_64& rng, const GradCheckOptions& o) {
  Tensor t(s, dt);
  std::uniform_real_distribution<double> u(-1.0, 1.0), pos(0.5, 2.0), mag(0.0, 1.0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v;
    if (o.positive) {
      v = pos(rng);
    } else if (o.min_abs > 0) {
      const double m = o.min_abs + (1.0 - o.min_abs) * mag(rng);
      v = u(rng) < 0 ? -m : m;
    } else {
      v = u(rng);
    }
    set_elem(t, i, v);
  }
  return t;
}

}  // namespace gradcheck_detail

// Inputs uniform in [0.5, 2] (log, sqrt, rsqrt, div denominators).
inline GradCheckOptions positive() {
  GradCheckOptions o;
  o.positive = true;
  return o;
}
// Inputs with |x| >= m (relu and friends, away from their kink at 0).
inline GradCheckOptions away_from_zero(double m = 0.1) {
  GradCheckOptions o;
  o.min_abs = m;
  return o;
}
// float32 inputs, with the float32 defaults for eps and the tolerances.
inline GradCheckOptions float32() {
  GradCheckOptions o;
  o.dtype = DType::Float32;
  return o;
}

inline ::testing::AssertionResult gradcheck(const std::function<Blob(const std::vector<Blob>&)>& f,
                                            const std::vector<Shape>& shapes, GradCheckOptions o = {}) {
  namespace gd = gradcheck_detail;
  const bool f64 = o.dtype == DType::Float64;
  const double eps = o.eps > 0 ? o.eps : (f64 ? 1e-6 : 1e-2);
  const double rtol = o.rtol > 0 ? o.rtol : (f64 ? 1e-5 : 5e-2);
  const double atol = o.atol > 0 ? o.atol : (f64 ? 1e-6 : 1e-2);

  std::mt19937_64 rng(o.seed);
  std::vector<Tensor> xs = o.inputs;
  if (xs.empty())
    for (const Shape& s : shapes) xs.push_back(gd::random_tensor(s, o.dtype, rng, o));
  if (xs.size() != shapes.size())
    return ::testing::AssertionFailure() << "gradcheck: " << xs.size() << " inputs for " << shapes.size() << " shapes";

  // One tuple placeholder so the body can take any number of inputs.
  std::vector<PlaceholderSpec> items;
  for (size_t i = 0; i < shapes.size(); ++i)
    items.push_back(Numpy::Placeholder(shapes[i], o.dtype, "x" + std::to_string(i)));
  const std::vector<PlaceholderSpec> specs{TuplePlaceholder(items, "xs")};

  // The cotangent c depends only on y's spec and the seed, so both jobs
  // build the same one.
  const uint64_t cot_seed = o.seed * 7919 + 17;
  auto loss_of = [cot_seed](Blob y) {
    std::mt19937_64 r(cot_seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    Tensor c(y.shape(), y.dtype());
    for (int64_t i = 0; i < c.numel(); ++i) gd::set_elem(c, i, u(r));
    return reduce_sum(mul(y, constant(c, "gradcheck_cotangent")));
  };

  std::vector<Tensor> analytic;
  double base_loss = 0.0;
  std::shared_ptr<CompiledJob> loss_job;
  try {
    auto grad_job = global_function(Predict, specs, [&](std::vector<Blob> in) -> std::vector<Blob> {
      Blob y = f(in);
      Blob L = loss_of(y);
      std::vector<Blob> out{y, L};
      for (const Blob& g : gradients(L, in)) out.push_back(g);
      return out;
    });
    std::vector<Tensor> r = grad_job.compiled()->run(xs);
    base_loss = r.at(1).at(0);
    analytic.assign(r.begin() + 2, r.end());
    loss_job = global_function(Predict, specs, [&](std::vector<Blob> in) -> Blob { return loss_of(f(in)); })
                   .compiled();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "gradcheck: building or running the jobs threw: " << e.what();
  }
  if (analytic.size() != xs.size())
    return ::testing::AssertionFailure() << "gradcheck: got " << analytic.size() << " gradients for " << xs.size()
                                         << " inputs";

  std::ostringstream report;
  bool ok = true;
  for (size_t k = 0; k < xs.size(); ++k) {
    const Tensor& g = analytic[k];
    if (g.shape() != xs[k].shape() || g.dtype() != xs[k].dtype()) {
      return ::testing::AssertionFailure() << "gradcheck: gradient " << k << " is " << shape_str(g.shape()) << " "
                                           << dtype_name(g.dtype()) << " but input " << k << " is "
                                           << shape_str(xs[k].shape()) << " " << dtype_name(xs[k].dtype());
    }
    double worst = -1.0, worst_a = 0, worst_n = 0;
    int64_t worst_i = -1;
    for (int64_t i = 0; i < xs[k].numel(); ++i) {
      const double x0 = xs[k].at(i);
      std::vector<Tensor> in = xs;
      in[k] = xs[k].clone();
      gd::set_elem(in[k], i, x0 + eps);
      const double lp = loss_job->run(in).at(0).at(0);
      gd::set_elem(in[k], i, x0 - eps);
      const double lm = loss_job->run(in).at(0).at(0);
      const double num = (lp - lm) / (2 * eps);
      const double an = g.at(i);
      const double bound = atol + rtol * std::max(std::fabs(an), std::fabs(num));
      const double ratio = std::isfinite(an) && std::isfinite(num) ? std::fabs(an - num) / bound : INFINITY;
      if (ratio > worst) {
        worst = ratio;
        worst_i = i;
        worst_a = an;
        worst_n = num;
      }
    }
    if (worst > 1.0) {
      ok = false;
      report << "\n  input " << k << " " << shape_str(xs[k].shape()) << ": worst element "
             << index_str(xs[k].shape(), worst_i) << " (x = " << xs[k].at(worst_i) << "): analytic " << worst_a
             << " vs numeric " << worst_n << ", |diff| " << std::fabs(worst_a - worst_n) << " is " << worst
             << "x the tolerance (atol " << atol << ", rtol " << rtol << ", eps " << eps << ")";
    }
  }
  if (!ok) return ::testing::AssertionFailure() << "gradcheck failed (L = " << base_loss << "):" << report.str();
  return ::testing::AssertionSuccess();
}

// For gradcheck(second_order(act), {s, s}): x0 * dL/dx0 with
// L = sum(act(x0) * x1), which exercises the gradient of act's gradient op.
inline std::function<Blob(const std::vector<Blob>&)> second_order(std::function<Blob(Blob)> act) {
  return [act](const std::vector<Blob>& x) { return gradients(reduce_sum(act(x[0]) * x[1]), {x[0]})[0] * x[0]; };
}

}  // namespace jobflow::testing
