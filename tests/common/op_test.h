// tests/common/op_test.h — running ops as jobs on given tensors and checking
// what they give.
//
// How to write an op test (tests/unit/test_ops_*.cpp; a new file is one line
// in tests/unit/meson.build):
//
//   #include "op_test.h"
//   namespace flow = jobflow;
//   using namespace flow::testing;  // these helpers, Blob, Shape and Tensor
//
//   class MyOps : public OpTest {};  // a fresh session for every test
//
//   TEST_F(MyOps, Values) {
//     // The op as a predict job on given tensors (run1, run2, run_n; run_all
//     // for every output), compared element by element with a tolerance.
//     Tensor x = f64({2, 3}, {-2, -1, 0, 1, 2, 3});
//     expect_values(run1(x, [](Blob v) { return flow::nn::relu(v); }), {2, 3}, {0, 0, 0, 1, 2, 3});
//     expect_values(run2(x, f64({}, {2}), [](Blob a, Blob s) { return a * s; }), {2, 3},
//                   map_values(x, [](double v) { return 2 * v; }), 1e-12);
//   }
//   TEST_F(MyOps, ErrorMessages) {
//     // The message of the error that defining or running the job throws.
//     Tensor x = f64({2, 3}, {1, 2, 3, 4, 5, 6});
//     EXPECT_CONTAINS(error_of({x, i64({1}, {0})}, [](const Blobs& b) { return flow::gather(b[0], b[1], 2); }),
//                     "[gather]");
//   }
//   TEST_F(MyOps, Gradients) {
//     // jobflow::gradients against central differences (gradcheck.h), float64
//     // by default; positive(), away_from_zero(), float32() set the inputs.
//     EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::math::sqrt(x[0]); }, {{2, 3}}, positive()));
//   }
//
// Inputs: f32/f64/i32/i64 (given values), iota (0, 1, 2, ... in float64),
// random (seeded uniform). Outputs: expect_values (shape and every element),
// expect_near_all (the worst element), all_close (tensor_compare.h, a tensor
// of expected values with a relative tolerance).
#pragma once

#include <gtest/gtest.h>

#include <jobflow/jobflow.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "errors.h"
#include "gradcheck.h"
#include "tensor_compare.h"

namespace jobflow::testing {

// What an op test names, for `using namespace jobflow::testing`.
using jobflow::Blob;
using jobflow::DType;
using jobflow::Shape;
using jobflow::Tensor;
using Blobs = std::vector<Blob>;

// A fresh session (no variables, no jobs) before every test.
class OpTest : public ::testing::Test {
 protected:
  void SetUp() override { session::reset(); }
};

// ---- running ops

// Runs body(x...) as a predict job on the given tensors; all its outputs.
inline std::vector<Tensor> run_all(const std::vector<Tensor>& args, const std::function<Blobs(const Blobs&)>& body) {
  std::vector<PlaceholderSpec> items;
  for (const Tensor& t : args) items.push_back(Numpy::Placeholder(t.shape(), t.dtype()));
  auto job = global_function(Predict, {TuplePlaceholder(items)}, [&](std::vector<Blob> in) -> Blobs { return body(in); });
  return job.compiled()->run(args);
}
// Its one output.
inline Tensor run_n(const std::vector<Tensor>& args, const std::function<Blob(const Blobs&)>& body) {
  return run_all(args, [&](const Blobs& x) { return Blobs{body(x)}; }).at(0);
}
inline Tensor run1(const Tensor& a, const std::function<Blob(Blob)>& f) {
  return run_n({a}, [&](const Blobs& x) { return f(x[0]); });
}
inline Tensor run2(const Tensor& a, const Tensor& b, const std::function<Blob(Blob, Blob)>& f) {
  return run_n({a, b}, [&](const Blobs& x) { return f(x[0], x[1]); });
}

// The message of the exception thrown while defining or running `body` on
// args, or "(no error)".
inline std::string error_of(const std::vector<Tensor>& args, const std::function<Blob(const Blobs&)>& body) {
  return error_of([&] { run_n(args, body); });
}

// ---- making tensors

inline Tensor f64(Shape s, std::vector<double> v) { return Tensor::from<double>(std::move(s), v); }
inline Tensor f32(Shape s, std::vector<float> v) { return Tensor::from<float>(std::move(s), v); }
inline Tensor i32(Shape s, std::vector<int32_t> v) { return Tensor::from<int32_t>(std::move(s), v); }
inline Tensor i64(Shape s, std::vector<int64_t> v) { return Tensor::from<int64_t>(std::move(s), v); }

// 0, 1, 2, ... (times scale, plus offset) in float64.
inline Tensor iota(Shape s, double scale = 1.0, double offset = 0.0) {
  Tensor t(s, Double);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = offset + scale * static_cast<double>(i);
  return t;
}

// Uniform in [lo, hi), float32 or float64, the same for the same seed.
inline Tensor random(Shape s, DType dt = Float, uint64_t seed = 7, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Tensor t(std::move(s), dt);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dt == Double) t.data<double>()[i] = u(rng);
    else t.data<float>()[i] = static_cast<float>(u(rng));
  }
  return t;
}

// ---- checking values

// t has `shape` and every element is within tol of `want`.
inline void expect_values(const Tensor& t, const Shape& shape, const std::vector<double>& want, double tol = 1e-12) {
  ASSERT_EQ(t.shape(), shape) << shape_str(t.shape());
  ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_NEAR(t.at(i), want[i], tol) << "element " << i;
}

// Every element of got is within tol of `want`; a failure names the worst one.
inline void expect_near_all(const Tensor& got, const std::vector<double>& want, double tol,
                            const std::string& what = "") {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  double worst = 0;
  int64_t wi = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double d = std::fabs(got.at(i) - want[i]);
    if (d > worst) worst = d, wi = i;
  }
  EXPECT_LE(worst, tol) << what << ": element " << wi << " is " << got.at(wi) << ", want " << want[wi];
}

// The value `f` gives each element of x (an elementwise reference).
inline std::vector<double> map_values(const Tensor& x, const std::function<double(double)>& f) {
  std::vector<double> r;
  for (int64_t i = 0; i < x.numel(); ++i) r.push_back(f(x.at(i)));
  return r;
}

}  // namespace jobflow::testing
