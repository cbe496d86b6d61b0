// Forward values, error messages and gradients of the ops added for imported
// (ONNX) models: engine/src/ops/activations.cpp, indexing.cpp and
// conv_transpose.cpp. Values are hand-computed or come from naive reference
// loops; gradients are checked by finite differences (gradcheck.h), in
// float64 except conv_transpose2d (float32 only).
#include <gtest/gtest.h>

#include <jobflow/jobflow.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "jobflow/primitive.h"
#include "op_test.h"

namespace flow = jobflow;
using namespace flow::testing;

namespace {

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();

class OpsExtra : public OpTest {};

}  // namespace

// ===========================================================================
// Activations

TEST_F(OpsExtra, UnaryActivationValues) {
  Tensor x = f64({7}, {-30, -2, -0.5, 0, 0.5, 2, 30});
  const double sa = 1.6732632423543772, sg = 1.0507009873554805;
  expect_values(run1(x, [](Blob v) { return flow::nn::leaky_relu(v); }), {7},
                map_values(x, [](double v) { return v >= 0 ? v : 0.01 * v; }));
  expect_values(run1(x, [](Blob v) { return flow::nn::leaky_relu(v, 0.2); }), {7},
                {-6, -0.4, -0.1, 0, 0.5, 2, 30});
  expect_values(run1(x, [](Blob v) { return flow::nn::elu(v); }), {7},
                map_values(x, [](double v) { return v > 0 ? v : std::exp(v) - 1; }));
  expect_values(run1(x, [](Blob v) { return flow::nn::elu(v, 0.5); }), {7},
                map_values(x, [](double v) { return v > 0 ? v : 0.5 * (std::exp(v) - 1); }));
  expect_values(run1(x, [](Blob v) { return flow::nn::selu(v); }), {7},
                map_values(x, [&](double v) { return sg * (v > 0 ? v : sa * (std::exp(v) - 1)); }));
  expect_values(run1(x, [](Blob v) { return flow::nn::selu(v, 2.0, 3.0); }), {7},
                map_values(x, [&](double v) { return 3.0 * (v > 0 ? v : 2.0 * (std::exp(v) - 1)); }));
  expect_values(run1(x, [](Blob v) { return flow::nn::softplus(v); }), {7},
                map_values(x, [](double v) { return std::log(1 + std::exp(v)); }));
  expect_values(run1(x, [](Blob v) { return flow::nn::softsign(v); }), {7},
                {-30.0 / 31, -2.0 / 3, -0.5 / 1.5, 0, 0.5 / 1.5, 2.0 / 3, 30.0 / 31});
  expect_values(run1(x, [](Blob v) { return flow::nn::hard_sigmoid(v); }), {7}, {0, 0.1, 0.4, 0.5, 0.6, 0.9, 1});
  expect_values(run1(x, [](Blob v) { return flow::nn::hard_sigmoid(v, 1.0 / 6, 0.5); }), {7},
                map_values(x, [](double v) { return std::min(1.0, std::max(0.0, v / 6 + 0.5)); }));
  // softplus does not overflow where e^x does, in float32 too.
  Tensor sp = run1(f32({2}, {-200, 200}), [](Blob v) { return flow::nn::softplus(v); });
  EXPECT_EQ(sp.dtype(), flow::Float);
  expect_values(sp, {2}, {0, 200}, 1e-5);
}

TEST_F(OpsExtra, ClipValues) {
  Tensor x = f64({5}, {-3, -1, 0, 1, 3});
  expect_values(run1(x, [](Blob v) { return flow::clip(v, -1.5, 2.0); }), {5}, {-1.5, -1, 0, 1, 2});
  expect_values(run1(x, [](Blob v) { return flow::clip(v, 0.5); }), {5}, {0.5, 0.5, 0.5, 1, 3});
  expect_values(run1(x, [](Blob v) { return flow::clip(v, std::nullopt, -0.5); }), {5}, {-3, -1, -0.5, -0.5, -0.5});
  expect_values(run1(x, [](Blob v) { return flow::clip(v); }), {5}, {-3, -1, 0, 1, 3});
  // min > max gives max everywhere (ONNX).
  expect_values(run1(x, [](Blob v) { return flow::clip(v, 2.0, 1.0); }), {5}, {1, 1, 1, 1, 1});
  // NaN passes through.
  Tensor n = run1(f64({1}, {std::nan("")}), [](Blob v) { return flow::clip(v, 0.0, 1.0); });
  EXPECT_TRUE(std::isnan(n.at(0)));
  // Integers: bounds rounded inwards, infinite or out-of-range bounds saturate.
  Tensor ci = run1(i32({5}, {-5, -1, 0, 2, 7}), [](Blob v) { return flow::clip(v, -1.5, 2.5); });
  EXPECT_EQ(ci.dtype(), flow::Int32);
  expect_values(ci, {5}, {-1, -1, 0, 2, 2});
  expect_values(run1(i32({2}, {-5, 7}), [](Blob v) { return flow::clip(v, -1e30, 1e30); }), {2}, {-5, 7});
  expect_values(run1(i64({2}, {kI64Min, kI64Max}), [](Blob v) { return flow::clip(v, std::nullopt, 1e19); }), {2},
                {static_cast<double>(kI64Min), static_cast<double>(kI64Max)});
}

TEST_F(OpsExtra, PReluValues) {
  // NCHW with one slope per channel (ONNX's usual (C, 1, 1)).
  Tensor x = iota({2, 3, 2, 2}, 1.0, -12.0), s = f64({3, 1, 1}, {0.1, 0.2, 0.3});
  Tensor y = run2(x, s, [](Blob a, Blob b) { return flow::nn::prelu(a, b); });
  std::vector<double> want;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.at(i), sl = s.at((i / 4) % 3);
    want.push_back(v < 0 ? sl * v : v);
  }
  expect_values(y, {2, 3, 2, 2}, want);
  // A single shared slope.
  expect_values(run2(f64({4}, {-2, -1, 0, 3}), f64({1}, {0.25}), [](Blob a, Blob b) { return flow::nn::prelu(a, b); }),
                {4}, {-0.5, -0.25, 0, 3});
}

TEST_F(OpsExtra, PowMinimumMaximumValues) {
  Tensor a = f64({2, 3}, {1, 2, 3, 4, 0.5, 9}), b = f64({3}, {2, 0.5, -1});
  expect_values(run2(a, b, [](Blob p, Blob q) { return flow::pow(p, q); }), {2, 3},
                {1, std::sqrt(2.0), 1.0 / 3, 16, std::sqrt(0.5), 1.0 / 9});
  expect_values(run2(a, b, [](Blob p, Blob q) { return flow::minimum(p, q); }), {2, 3}, {1, 0.5, -1, 2, 0.5, -1});
  expect_values(run2(b, a, [](Blob p, Blob q) { return flow::maximum(p, q); }), {2, 3}, {2, 2, 3, 4, 0.5, 9});
  // Column against row: (2, 1) with (3,) -> (2, 3).
  expect_values(run2(f64({2, 1}, {1, 5}), f64({3}, {0, 3, 6}), [](Blob p, Blob q) { return flow::maximum(p, q); }),
                {2, 3}, {1, 3, 6, 5, 5, 6});
  // Integers.
  Tensor mi = run2(i32({3}, {1, -4, 7}), i32({1}, {2}), [](Blob p, Blob q) { return flow::minimum(p, q); });
  EXPECT_EQ(mi.dtype(), flow::Int32);
  expect_values(mi, {3}, {1, -4, 2});
  // NaN in either operand propagates.
  const double nan = std::nan("");
  Tensor m = run2(f64({2}, {nan, 1}), f64({2}, {0, nan}), [](Blob p, Blob q) { return flow::maximum(p, q); });
  EXPECT_TRUE(std::isnan(m.at(0)) && std::isnan(m.at(1)));
  m = run2(f64({2}, {nan, 1}), f64({2}, {0, nan}), [](Blob p, Blob q) { return flow::minimum(p, q); });
  EXPECT_TRUE(std::isnan(m.at(0)) && std::isnan(m.at(1)));
}

TEST_F(OpsExtra, LargeBroadcastsMatchAReferenceLoop) {
  // Big enough for the parallel and row-piece paths of the broadcast kernel.
  const int64_t B = 300, N = 257;
  Tensor a = random({B, N}, flow::Double, 1), v = random({N}, flow::Double, 2), c = random({B, 1}, flow::Double, 3);
  Tensor y1 = run2(a, v, [](Blob p, Blob q) { return flow::maximum(p, q); });
  Tensor y2 = run2(c, a, [](Blob p, Blob q) { return flow::minimum(p, q); });
  Tensor y3 = run2(v, c, [](Blob p, Blob q) { return flow::pow(flow::add_scalar(p, 2.0), q); });
  ASSERT_EQ(y3.shape(), (Shape{B, N}));
  for (int64_t i = 0; i < B; ++i)
    for (int64_t j = 0; j < N; ++j) {
      ASSERT_EQ(y1.at(i * N + j), std::max(a.at(i * N + j), v.at(j)));
      ASSERT_EQ(y2.at(i * N + j), std::min(c.at(i), a.at(i * N + j)));
      ASSERT_NEAR(y3.at(i * N + j), std::pow(v.at(j) + 2.0, c.at(i)), 1e-12);
    }
  // A long inner row with a broadcast middle dim: (3, 1, 40000) vs (2, 1).
  Tensor p = random({3, 1, 40000}, flow::Double, 4), q = random({2, 1}, flow::Double, 5);
  Tensor y4 = run2(p, q, [](Blob s, Blob t) { return flow::maximum(s, t); });
  ASSERT_EQ(y4.shape(), (Shape{3, 2, 40000}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 40000; k += 7)
        ASSERT_EQ(y4.at((i * 2 + j) * 40000 + k), std::max(p.at(i * 40000 + k), q.at(j)));
  // prelu on a big NCHW tensor with per-channel slopes.
  Tensor x = random({4, 16, 32, 32}, flow::Float, 6), s = random({16, 1, 1}, flow::Float, 7, 0.0, 0.5);
  Tensor y5 = run2(x, s, [](Blob u, Blob w) { return flow::nn::prelu(u, w); });
  for (int64_t i = 0; i < x.numel(); i += 3) {
    const float xv = x.data<float>()[i], sv = s.data<float>()[(i / 1024) % 16];
    ASSERT_EQ(y5.data<float>()[i], xv < 0 ? sv * xv : xv);
  }
  // A big unary activation (parallel path) against the scalar formula.
  Tensor big = random({1 << 17}, flow::Double, 8, -4, 4);
  Tensor y6 = run1(big, [](Blob u) { return flow::nn::elu(u, 0.7); });
  for (int64_t i = 0; i < big.numel(); i += 101) {
    const double t = big.at(i);
    ASSERT_NEAR(y6.at(i), t > 0 ? t : 0.7 * (std::exp(t) - 1), 1e-14);
  }
}

TEST_F(OpsExtra, GradUnaryActivations) {
  auto g = [](std::function<Blob(Blob)> act, GradCheckOptions o = {}) {
    return gradcheck([act](const Blobs& x) { return act(x[0]); }, {{2, 3, 4}}, o);
  };
  EXPECT_TRUE(g([](Blob v) { return flow::nn::leaky_relu(v, 0.1); }, away_from_zero()));
  EXPECT_TRUE(g([](Blob v) { return flow::nn::elu(v, 0.7); }, away_from_zero()));
  EXPECT_TRUE(g([](Blob v) { return flow::nn::selu(v); }, away_from_zero()));
  EXPECT_TRUE(g([](Blob v) { return flow::nn::softplus(v); }));
  EXPECT_TRUE(g([](Blob v) { return flow::nn::softsign(v); }, away_from_zero()));
  // Kinks at x = -0.625 and 0.625 fall inside the random inputs.
  EXPECT_TRUE(g([](Blob v) { return flow::nn::hard_sigmoid(v, 0.8, 0.5); }));
  EXPECT_TRUE(g([](Blob v) { return flow::clip(v, -0.4, 0.3); }));
  EXPECT_TRUE(g([](Blob v) { return flow::clip(v, std::nullopt, 0.2); }));
  EXPECT_TRUE(g([](Blob v) { return flow::clip(v, -0.2); }));
}

TEST_F(OpsExtra, GradSecondOrderActivations) {
  EXPECT_TRUE(gradcheck(second_order([](Blob v) { return flow::nn::elu(v, 0.7); }), {{2, 3}, {2, 3}},
                        away_from_zero()));
  EXPECT_TRUE(gradcheck(second_order([](Blob v) { return flow::nn::selu(v); }), {{2, 3}, {2, 3}}, away_from_zero()));
  EXPECT_TRUE(gradcheck(second_order([](Blob v) { return flow::nn::softplus(v); }), {{2, 3}, {2, 3}}));
  EXPECT_TRUE(gradcheck(second_order([](Blob v) { return flow::nn::softsign(v); }), {{2, 3}, {2, 3}},
                        away_from_zero()));
  EXPECT_TRUE(gradcheck(second_order([](Blob v) { return flow::nn::leaky_relu(v, 0.3); }), {{2, 3}, {2, 3}},
                        away_from_zero()));
  EXPECT_TRUE(gradcheck(second_order([](Blob v) { return flow::clip(v, -0.5, 0.5); }), {{2, 3}, {2, 3}}));
}

TEST_F(OpsExtra, GradBinaryOps) {
  // Random inputs are distinct, so min/max never tie here.
  for (auto op : std::vector<std::function<Blob(Blob, Blob)>>{
           [](Blob a, Blob b) { return flow::minimum(a, b); }, [](Blob a, Blob b) { return flow::maximum(a, b); },
           [](Blob a, Blob b) { return flow::pow(a, b); }}) {
    auto f = [op](const Blobs& x) { return op(x[0], x[1]); };
    EXPECT_TRUE(gradcheck(f, {{2, 3}, {2, 3}}, positive()));
    EXPECT_TRUE(gradcheck(f, {{2, 1, 3}, {4, 1}}, positive()));
    EXPECT_TRUE(gradcheck(f, {{3}, {2, 3}}, positive()));
    EXPECT_TRUE(gradcheck(f, {{2, 3}, {}}, positive()));
  }
  // pow with a negative base and integer-valued (constant) exponents.
  GradCheckOptions o;
  o.inputs = {f64({4}, {-1.5, -0.5, 0.7, 2})};
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::pow(x[0], flow::constant(f64({4}, {2, 3, -1, 4}))); },
                        {{4}}, o));
  // prelu: x away from the kink, slopes per channel or shared.
  auto pr = [](const Blobs& x) { return flow::nn::prelu(x[0], x[1]); };
  EXPECT_TRUE(gradcheck(pr, {{2, 3, 2, 2}, {3, 1, 1}}, away_from_zero()));
  EXPECT_TRUE(gradcheck(pr, {{2, 5}, {1}}, away_from_zero()));
  EXPECT_TRUE(gradcheck(pr, {{2, 5}, {5}}, away_from_zero()));
  // Second order through the gradient ops' linear (dy) input.
  EXPECT_TRUE(gradcheck(
      [](const Blobs& x) {
        Blob y = flow::maximum(x[0], x[1]);
        return flow::gradients(flow::reduce_sum(y * y), {x[0]})[0];
      },
      {{2, 3}, {3}}));
}

TEST_F(OpsExtra, MinMaxTiesSplitTheGradient) {
  auto grads = [](bool max) {
    return run_all({f64({3}, {1, 2, 3}), f64({3}, {1, 5, 0})}, [max](const Blobs& x) {
      Blob y = max ? flow::maximum(x[0], x[1]) : flow::minimum(x[0], x[1]);
      return flow::gradients(flow::reduce_sum(y), {x[0], x[1]});
    });
  };
  auto mn = grads(false);
  expect_values(mn[0], {3}, {0.5, 1, 0});
  expect_values(mn[1], {3}, {0.5, 0, 1});
  auto mx = grads(true);
  expect_values(mx[0], {3}, {0.5, 0, 1});
  expect_values(mx[1], {3}, {0.5, 1, 0});
  // pow's conventions at 0: no gradient to the base where the exponent is 0,
  // none to the exponent where the base is 0.
  auto pg = run_all({f64({2}, {0, 2}), f64({2}, {3, 0})}, [](const Blobs& x) {
    return flow::gradients(flow::reduce_sum(flow::pow(x[0], x[1])), {x[0], x[1]});
  });
  expect_values(pg[0], {2}, {0, 0});
  expect_values(pg[1], {2}, {0, std::log(2.0)});
}

// ===========================================================================
// gather

TEST_F(OpsExtra, GatherValues) {
  Tensor x = iota({3, 4});
  // 2-D int64 indices along axis 1, with a negative one.
  Tensor y = run2(x, i64({2, 2}, {0, -1, 2, 1}), [](Blob a, Blob i) { return flow::gather(a, i, 1); });
  expect_values(y, {3, 2, 2}, {0, 3, 2, 1, 4, 7, 6, 5, 8, 11, 10, 9});
  // int32 indices along axis 0 (also as axis -2), repeated.
  expect_values(run2(x, i32({3}, {2, 0, 2}), [](Blob a, Blob i) { return flow::gather(a, i, 0); }), {3, 4},
                {8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  expect_values(run2(x, i32({1}, {1}), [](Blob a, Blob i) { return flow::gather(a, i, -2); }), {1, 4},
                {4, 5, 6, 7});
  // A scalar index drops the axis.
  expect_values(run2(x, i64({}, {-1}), [](Blob a, Blob i) { return flow::gather(a, i, 0); }), {4}, {8, 9, 10, 11});
  expect_values(run2(x, i64({}, {2}), [](Blob a, Blob i) { return flow::gather(a, i, -1); }), {3}, {2, 6, 10});
  // Integer data.
  Tensor yi = run2(i32({4}, {10, 20, 30, 40}), i64({2}, {3, -4}), [](Blob a, Blob i) { return flow::gather(a, i); });
  EXPECT_EQ(yi.dtype(), flow::Int32);
  expect_values(yi, {2}, {40, 10});
}

TEST_F(OpsExtra, GatherLargeMatchesReference) {
  const int64_t A = 8, N = 50, C = 700, M = 37;
  Tensor x = random({A, N, C}, flow::Float, 11);
  std::vector<int64_t> idx;
  // Repeated (j * 17 % 20 cycles) and negative indices.
  for (int64_t j = 0; j < M; ++j) idx.push_back((j * 17) % 20 - (j % 3 == 0 ? N : 0));
  Tensor ind = i64({M}, idx);
  Tensor y = run2(x, ind, [](Blob a, Blob i) { return flow::gather(a, i, 1); });
  ASSERT_EQ(y.shape(), (Shape{A, M, C}));
  for (int64_t a = 0; a < A; ++a)
    for (int64_t j = 0; j < M; ++j) {
      const int64_t k = idx[j] < 0 ? idx[j] + N : idx[j];
      for (int64_t c = 0; c < C; c += 13)
        ASSERT_EQ(y.data<float>()[(a * M + j) * C + c], x.data<float>()[(a * N + k) * C + c]);
    }
  // The gradient (scatter-add with repeated indices) against a reference.
  Tensor g = random({A, M, C}, flow::Float, 12);
  Tensor dx = run_n({x, ind, g}, [](const Blobs& in) {
    return flow::gradients(flow::gather(in[0], in[1], 1), {in[0]}, in[2])[0];
  });
  std::vector<double> ref(x.numel(), 0.0);
  for (int64_t a = 0; a < A; ++a)
    for (int64_t j = 0; j < M; ++j) {
      const int64_t k = idx[j] < 0 ? idx[j] + N : idx[j];
      for (int64_t c = 0; c < C; ++c) ref[(a * N + k) * C + c] += g.data<float>()[(a * M + j) * C + c];
    }
  for (int64_t i = 0; i < x.numel(); i += 7) ASSERT_NEAR(dx.at(i), ref[i], 1e-5);
}

TEST_F(OpsExtra, GatherOutOfRangeIsARunTimeError) {
  // The job is defined fine (indices are data); running it names the op, the
  // value and the axis size.
  std::vector<flow::PlaceholderSpec> items{flow::Numpy::Placeholder({3, 4}, flow::Double),
                                           flow::Numpy::Placeholder({2}, flow::Int64)};
  auto job = flow::global_function(flow::Predict, {flow::TuplePlaceholder(items)},
                                   [](std::vector<Blob> in) -> Blob { return flow::gather(in[0], in[1], 1); });
  auto compiled = job.compiled();
  EXPECT_NO_THROW(compiled->run({iota({3, 4}), i64({2}, {3, -4})}));
  for (int64_t bad : {4, -5}) {
    std::string e;
    try {
      compiled->run({iota({3, 4}), i64({2}, {0, bad})});
    } catch (const std::exception& ex) {
      e = ex.what();
    }
    EXPECT_CONTAINS(e, "[gather]");
    EXPECT_CONTAINS(e, "index " + std::to_string(bad) + " is out of range for axis 1 of size 4");
  }
}

TEST_F(OpsExtra, GradGather) {
  // Repeated and negative indices add up in the gradient.
  GradCheckOptions o;
  auto f = [](std::vector<int64_t> idx, Shape ishape, int axis) {
    return [idx, ishape, axis](const Blobs& x) { return flow::gather(x[0], flow::constant(i64(ishape, idx)), axis); };
  };
  EXPECT_TRUE(gradcheck(f({0, 2, 0, -1}, {4}, 0), {{3, 2}}));
  EXPECT_TRUE(gradcheck(f({1, 1, 3, -4, 0, 2}, {2, 3}, 1), {{2, 4, 3}}));
  EXPECT_TRUE(gradcheck(f({2}, {}, -1), {{2, 3}}));
  // Second order: the gradient of gather_grad is a gather.
  EXPECT_TRUE(gradcheck(
      [](const Blobs& x) {
        Blob y = flow::gather(x[0], flow::constant(i64({3}, {1, 1, 0})), 0);
        return flow::gradients(flow::reduce_sum(y * y * x[1]), {x[0]})[0];
      },
      {{2, 3}, {3, 3}}));
}

// ===========================================================================
// slice

TEST_F(OpsExtra, SliceValues) {
  Tensor x = iota({3, 4});
  auto sl = [&](std::vector<int64_t> s, std::vector<int64_t> e, std::vector<int64_t> a = {},
                std::vector<int64_t> st = {}) {
    return run1(x, [&](Blob v) { return flow::slice(v, s, e, a, st); });
  };
  expect_values(sl({1}, {3}), {2, 4}, {4, 5, 6, 7, 8, 9, 10, 11});
  // Clamped end (INT64_MAX = "to the end") and a negative end.
  expect_values(sl({0, 1}, {kI64Max, -1}, {0, 1}), {3, 2}, {1, 2, 5, 6, 9, 10});
  // Step 2, and a negative axis.
  expect_values(sl({0}, {4}, {1}, {2}), {3, 2}, {0, 2, 4, 6, 8, 10});
  expect_values(sl({1}, {2}, {-1}), {3, 1}, {1, 5, 9});
  // Reversal: start -1, end INT64_MIN, step -1.
  expect_values(sl({-1}, {kI64Min}, {1}, {-1}), {3, 4}, {3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8});
  // Step -2 from row 2; the end clamps to "before row 0".
  expect_values(sl({2}, {-10}, {0}, {-2}), {2, 4}, {8, 9, 10, 11, 0, 1, 2, 3});
  // Both axes, negative steps, start past the end clamps to the last element.
  expect_values(sl({10, 3}, {0, 0}, {0, 1}, {-1, -2}), {2, 2}, {11, 9, 7, 5});
  // Empty results.
  expect_values(sl({3}, {1}, {1}), {3, 0}, {});
  expect_values(sl({10}, {20}), {0, 4}, {});
  expect_values(sl({0}, {2}, {0}, {-1}), {0, 4}, {});
  // Integer data, rank 3.
  Tensor xi = Tensor::from<int32_t>({2, 2, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  Tensor yi = run1(xi, [](Blob v) { return flow::slice(v, {1, 2}, {2, 0}, {0, 2}, {1, -1}); });
  EXPECT_EQ(yi.dtype(), flow::Int32);
  expect_values(yi, {1, 2, 2}, {8, 7, 11, 10});
}

TEST_F(OpsExtra, SliceLargeMatchesReference) {
  Tensor x = random({6, 70, 90}, flow::Float, 21);
  Tensor y = run1(x, [](Blob v) { return flow::slice(v, {-1, 5, 80}, {kI64Min, 65, 3}, {0, 1, 2}, {-2, 3, -5}); });
  // axis 0: 5, 3, 1; axis 1: 5, 8, ..., 62; axis 2: 80, 75, ..., 5.
  ASSERT_EQ(y.shape(), (Shape{3, 20, 16}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 20; ++j)
      for (int64_t k = 0; k < 16; ++k)
        ASSERT_EQ(y.data<float>()[(i * 20 + j) * 16 + k],
                  x.data<float>()[((5 - 2 * i) * 70 + (5 + 3 * j)) * 90 + (80 - 5 * k)]);
  // Contiguous rows (step 1 on the last axis) take the copy path.
  Tensor z = run1(x, [](Blob v) { return flow::slice(v, {1, 10}, {4, 89}, {1, 2}); });
  ASSERT_EQ(z.shape(), (Shape{6, 3, 79}));
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 79; ++k)
        ASSERT_EQ(z.data<float>()[(i * 3 + j) * 79 + k], x.data<float>()[(i * 70 + 1 + j) * 90 + 10 + k]);
}

TEST_F(OpsExtra, GradSlice) {
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::slice(x[0], {1}, {3}); }, {{4, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::slice(x[0], {0, -1}, {kI64Max, kI64Min}, {0, 2}, {2, -2}); },
                        {{3, 2, 5}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::slice(x[0], {2}, {0}, {1}, {-1}); }, {{2, 4}}));
  // Second order through strided_slice_grad.
  EXPECT_TRUE(gradcheck(
      [](const Blobs& x) {
        Blob y = flow::slice(x[0], {3}, {0}, {0}, {-2});
        return flow::gradients(flow::reduce_sum(y * y * x[1]), {x[0]})[0];
      },
      {{4, 2}, {2, 2}}));
}

// ===========================================================================
// split, squeeze, unsqueeze

TEST_F(OpsExtra, SplitValues) {
  auto parts = run_all({iota({2, 5})}, [](const Blobs& x) { return flow::split(x[0], {2, 0, 3}, 1); });
  ASSERT_EQ(parts.size(), 3u);
  expect_values(parts[0], {2, 2}, {0, 1, 5, 6});
  expect_values(parts[1], {2, 0}, {});
  expect_values(parts[2], {2, 3}, {2, 3, 4, 7, 8, 9});
  auto rows = run_all({iota({3, 2})}, [](const Blobs& x) { return flow::split(x[0], {1, 2}, -2); });
  expect_values(rows[0], {1, 2}, {0, 1});
  expect_values(rows[1], {2, 2}, {2, 3, 4, 5});
  // Big enough for the parallel path.
  Tensor big = random({64, 30, 40}, flow::Float, 31);
  auto bp = run_all({big}, [](const Blobs& x) { return flow::split(x[0], {7, 23}, 1); });
  ASSERT_EQ(bp[1].shape(), (Shape{64, 23, 40}));
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < 23; ++j)
      for (int64_t k = 0; k < 40; ++k)
        ASSERT_EQ(bp[1].data<float>()[(i * 23 + j) * 40 + k], big.data<float>()[(i * 30 + 7 + j) * 40 + k]);
}

TEST_F(OpsExtra, GradSplit) {
  // Every part used (in swapped order), and only some parts used (the others
  // contribute zeros).
  EXPECT_TRUE(gradcheck(
      [](const Blobs& x) {
        auto p = flow::split(x[0], {1, 3}, 1);
        return flow::concat({p[1] * 2.0, p[0]}, 1);
      },
      {{2, 4}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::split(x[0], {2, 1, 1}, 0)[1]; }, {{4, 3}}));
}

TEST_F(OpsExtra, SqueezeUnsqueeze) {
  Tensor x = iota({1, 3, 1, 2});
  auto shape_of = [&](const std::function<Blob(Blob)>& f) { return run1(x, f).shape(); };
  EXPECT_EQ(shape_of([](Blob v) { return flow::squeeze(v); }), (Shape{3, 2}));
  EXPECT_EQ(shape_of([](Blob v) { return flow::squeeze(v, {0}); }), (Shape{3, 1, 2}));
  EXPECT_EQ(shape_of([](Blob v) { return flow::squeeze(v, {-2, 0}); }), (Shape{3, 2}));
  EXPECT_EQ(shape_of([](Blob v) { return flow::unsqueeze(v, {0, -1}); }), (Shape{1, 1, 3, 1, 2, 1}));
  EXPECT_EQ(shape_of([](Blob v) { return flow::unsqueeze(flow::squeeze(v), {1}); }), (Shape{3, 1, 2}));
  expect_values(run1(x, [](Blob v) { return flow::unsqueeze(flow::squeeze(v), {2}); }), {3, 2, 1}, {0, 1, 2, 3, 4, 5});
  EXPECT_TRUE(gradcheck([](const Blobs& v) { return flow::unsqueeze(flow::squeeze(v[0], {2}), {0}) * 3.0; },
                        {{2, 3, 1}}));
}

// ===========================================================================
// pad

TEST_F(OpsExtra, PadValues) {
  Tensor v = f64({3}, {1, 2, 3});
  auto p1 = [&](std::vector<int64_t> pads, const std::string& mode, double value = 0.0) {
    return run1(v, [&](Blob b) { return flow::pad(b, pads, mode, value); });
  };
  expect_values(p1({2, 1}, "constant", 7), {6}, {7, 7, 1, 2, 3, 7});
  expect_values(p1({2, 2}, "reflect"), {7}, {3, 2, 1, 2, 3, 2, 1});
  expect_values(p1({2, 1}, "edge"), {6}, {1, 1, 1, 2, 3, 3});
  // Pads longer than the axis: reflection repeats (periodically), edge keeps going.
  expect_values(p1({5, 0}, "reflect"), {8}, {2, 1, 2, 3, 2, 1, 2, 3});
  expect_values(p1({0, 4}, "edge"), {7}, {1, 2, 3, 3, 3, 3, 3});
  // Negative pads crop.
  expect_values(p1({-1, 1}, "constant", 9), {3}, {2, 3, 9});
  expect_values(p1({-2, -1}, "reflect"), {0}, {});

  Tensor m = f64({2, 3}, {1, 2, 3, 4, 5, 6});
  auto p2 = [&](std::vector<int64_t> pads, const std::string& mode, double value = 0.0) {
    return run1(m, [&](Blob b) { return flow::pad(b, pads, mode, value); });
  };
  // pads = {begin axis 0, begin axis 1, end axis 0, end axis 1}.
  expect_values(p2({1, 0, 0, 2}, "constant", 9), {3, 5}, {9, 9, 9, 9, 9, 1, 2, 3, 9, 9, 4, 5, 6, 9, 9});
  expect_values(p2({1, 1, 1, 1}, "reflect"), {4, 5},
                {5, 4, 5, 6, 5, 2, 1, 2, 3, 2, 5, 4, 5, 6, 5, 2, 1, 2, 3, 2});
  expect_values(p2({1, 0, 0, 1}, "edge"), {3, 4}, {1, 2, 3, 3, 1, 2, 3, 3, 4, 5, 6, 6});
  expect_values(p2({0, -1, 1, 1}, "constant", -1), {3, 3}, {2, 3, -1, 5, 6, -1, -1, -1, -1});
  // Integer data and a rank-4 NCHW pad of the spatial dims only.
  Tensor pi = run1(i32({2}, {4, 5}), [](Blob b) { return flow::pad(b, {1, 1}, "constant", 3); });
  EXPECT_EQ(pi.dtype(), flow::Int32);
  expect_values(pi, {4}, {3, 4, 5, 3});
}

// Naive pad of x (any rank, float64) for the reference checks.
std::vector<double> naive_pad(const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode,
                              double value, Shape* out) {
  const Shape& xs = x.shape();
  const size_t r = xs.size();
  Shape ys(r);
  for (size_t d = 0; d < r; ++d) ys[d] = xs[d] + pads[d] + pads[r + d];
  *out = ys;
  std::vector<double> y(flow::numel(ys));
  std::vector<int64_t> idx(r);
  for (size_t i = 0; i < y.size(); ++i) {
    int64_t q = static_cast<int64_t>(i), src = 0;
    bool inside = true;
    for (size_t d = r; d-- > 0;) {
      int64_t s = q % ys[d] - pads[d];
      q /= ys[d];
      const int64_t n = xs[d];
      if (s < 0 || s >= n) {
        if (mode == "constant") inside = false;
        else if (mode == "edge") s = s < 0 ? 0 : n - 1;
        else if (n == 1) s = 0;
        else
          while (s < 0 || s >= n) s = s < 0 ? -s : 2 * (n - 1) - s;  // mirror until inside
      }
      int64_t stride = 1;
      for (size_t e = d + 1; e < r; ++e) stride *= xs[e];
      src += s * stride;
    }
    y[i] = inside ? x.at(src) : value;
  }
  return y;
}

TEST_F(OpsExtra, PadLargeMatchesReference) {
  Tensor x = random({3, 5, 40, 45}, flow::Double, 41);
  struct Case {
    std::vector<int64_t> pads;
    std::string mode;
  };
  for (const Case& c : {Case{{0, 0, 2, 3, 0, 0, 1, 4}, "reflect"}, Case{{0, 1, 3, 0, 0, 2, 2, 5}, "edge"},
                        Case{{1, 0, -3, 2, 0, 1, 4, -6}, "constant"}, Case{{0, 2, 1, 1, 1, 0, 1, 3}, "reflect"}}) {
    Shape ys;
    const std::vector<double> want = naive_pad(x, c.pads, c.mode, 0.5, &ys);
    Tensor y = run1(x, [&](Blob b) { return flow::pad(b, c.pads, c.mode, 0.5); });
    ASSERT_EQ(y.shape(), ys) << c.mode;
    for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.at(i), want[i]) << c.mode << " element " << i;
    // The gradient against the adjoint of the reference: each output's
    // cotangent added into its source.
    Tensor g = random(ys, flow::Double, 42);
    Tensor dx = run_n({x, g}, [&](const Blobs& in) {
      return flow::gradients(flow::pad(in[0], c.pads, c.mode, 0.5), {in[0]}, in[1])[0];
    });
    // Reference: pad the element ids (constant -1 marks padding) to learn
    // each output's source, then add every output's cotangent into it.
    std::vector<double> ref(x.numel(), 0.0);
    {
      Tensor ids(x.shape(), flow::Double);
      for (int64_t i = 0; i < ids.numel(); ++i) ids.data<double>()[i] = static_cast<double>(i);
      Shape s2;
      const std::vector<double> src = naive_pad(ids, c.pads, c.mode, -1.0, &s2);
      for (size_t i = 0; i < src.size(); ++i)
        if (src[i] >= 0) ref[static_cast<size_t>(src[i])] += g.at(static_cast<int64_t>(i));
    }
    for (int64_t i = 0; i < x.numel(); ++i) ASSERT_NEAR(dx.at(i), ref[i], 1e-12) << c.mode << " element " << i;
  }
}

TEST_F(OpsExtra, GradPad) {
  for (const std::string mode : {"constant", "reflect", "edge"}) {
    EXPECT_TRUE(gradcheck([mode](const Blobs& x) { return flow::pad(x[0], {1, 2, 2, 1}, mode, 0.25); }, {{3, 3}}))
        << mode;
    EXPECT_TRUE(gradcheck([mode](const Blobs& x) { return flow::pad(x[0], {0, 0, 1, 2, 0, 0, 2, 0}, mode); },
                          {{2, 1, 3, 3}}))
        << mode;
    EXPECT_TRUE(gradcheck([mode](const Blobs& x) { return flow::pad(x[0], {-1, 3}, mode); }, {{4}})) << mode;
    // Second order: the gradient of pad_grad is the pad.
    EXPECT_TRUE(gradcheck(
        [mode](const Blobs& x) {
          Blob y = flow::pad(x[0], {2, 1}, mode, 1.0);
          return flow::gradients(flow::reduce_sum(y * y * x[1]), {x[0]})[0];
        },
        {{3}, {6}}))
        << mode;
  }
}

// ===========================================================================
// conv_transpose2d

struct CtCase {
  int64_t N, Cin, H, W, Cog, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, oph, opw, G;
};

// Naive transposed convolution in double: every x element scatters
// x * w into the outputs its kernel window covers.
std::vector<double> naive_conv_transpose(const Tensor& x, const Tensor& w, const CtCase& c, Shape* out) {
  const int64_t OH = (c.H - 1) * c.sh - c.pt - c.pb + c.dh * (c.kh - 1) + 1 + c.oph;
  const int64_t OW = (c.W - 1) * c.sw - c.pl - c.pr + c.dw * (c.kw - 1) + 1 + c.opw;
  const int64_t Cout = c.Cog * c.G, Cig = c.Cin / c.G;
  *out = {c.N, Cout, OH, OW};
  std::vector<double> y(c.N * Cout * OH * OW, 0.0);
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t ci = 0; ci < c.Cin; ++ci)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t v = 0; v < c.W; ++v) {
          const double xv = x.at(((n * c.Cin + ci) * c.H + h) * c.W + v);
          const int64_t g = ci / Cig;
          for (int64_t co = 0; co < c.Cog; ++co)
            for (int64_t a = 0; a < c.kh; ++a)
              for (int64_t b = 0; b < c.kw; ++b) {
                const int64_t oh = h * c.sh - c.pt + a * c.dh, ow = v * c.sw - c.pl + b * c.dw;
                if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                y[((n * Cout + g * c.Cog + co) * OH + oh) * OW + ow] +=
                    xv * w.at(((ci * c.Cog + co) * c.kh + a) * c.kw + b);
              }
        }
  return y;
}

Blob ct_apply(Blob x, Blob w, const CtCase& c) {
  return flow::nn::conv_transpose2d(x, w, {c.sh, c.sw}, {c.pt, c.pl, c.pb, c.pr}, {c.dh, c.dw}, {c.oph, c.opw}, c.G);
}

const std::vector<CtCase> kCtCases = {
    {2, 3, 4, 5, 2, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1},  // plain "full" convolution
    {2, 4, 3, 4, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1},  // stride 2, pads, output_padding
    {1, 4, 5, 4, 2, 2, 3, 2, 1, 0, 1, 1, 0, 2, 2, 1, 0, 2},  // dilation, asymmetric pads, groups
    {2, 6, 3, 3, 1, 3, 2, 3, 2, 2, 0, 1, 1, 1, 2, 2, 1, 3},  // depthwise-like groups, stride 3
};

TEST_F(OpsExtra, ConvTransposeMatchesNaiveReference) {
  uint64_t seed = 50;
  for (const CtCase& c : kCtCases) {
    Tensor x = random({c.N, c.Cin, c.H, c.W}, flow::Float, ++seed);
    Tensor w = random({c.Cin, c.Cog, c.kh, c.kw}, flow::Float, ++seed);
    Shape ys;
    const std::vector<double> want = naive_conv_transpose(x, w, c, &ys);
    Tensor y = run2(x, w, [&](Blob a, Blob b) { return ct_apply(a, b, c); });
    EXPECT_EQ(y.dtype(), flow::Float);
    expect_values(y, ys, want, 1e-4);
  }
  // A bigger one (oneDNN's blocked kernels), DCGAN-like: 4x4 kernel, stride 2, pad 1.
  CtCase c{4, 32, 8, 8, 16, 4, 4, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, 1};
  Tensor x = random({c.N, c.Cin, c.H, c.W}, flow::Float, 70), w = random({c.Cin, c.Cog, c.kh, c.kw}, flow::Float, 71);
  Shape ys;
  const std::vector<double> want = naive_conv_transpose(x, w, c, &ys);
  EXPECT_EQ(ys, (Shape{4, 16, 16, 16}));
  expect_values(run2(x, w, [&](Blob a, Blob b) { return ct_apply(a, b, c); }), ys, want, 1e-4);
}

TEST_F(OpsExtra, GradConvTranspose) {
  for (const CtCase& c : {kCtCases[1], kCtCases[2], CtCase{1, 2, 2, 3, 2, 2, 2, 1, 2, 0, 1, 1, 0, 1, 1, 0, 1, 1}}) {
    EXPECT_TRUE(gradcheck([c](const Blobs& v) { return ct_apply(v[0], v[1], c); },
                          {{c.N, c.Cin, c.H, c.W}, {c.Cin, c.Cog, c.kh, c.kw}}, float32()));
  }
  // Second order: through conv_transpose2d_grad_input and _grad_weight.
  const CtCase c{1, 2, 3, 3, 1, 2, 2, 2, 2, 0, 0, 1, 1, 1, 1, 1, 0, 1};
  EXPECT_TRUE(gradcheck(
      [c](const Blobs& v) {
        Blob y = ct_apply(v[0], v[1], c);
        auto g = flow::gradients(flow::reduce_sum(y * y), {v[0], v[1]});
        return flow::reduce_sum(g[0] * g[0]) + flow::reduce_sum(g[1] * v[1]);
      },
      {{c.N, c.Cin, c.H, c.W}, {c.Cin, c.Cog, c.kh, c.kw}}, float32()));
}

// ===========================================================================
// Attributes (what an exporter writes) and error messages

TEST_F(OpsExtra, AttributesDescribeTheOps) {
  std::vector<std::pair<std::string, flow::Attrs>> seen;
  run_n({f32({1, 2, 3, 3}, std::vector<float>(18, 1.0f)), f32({2, 1, 2, 2}, std::vector<float>(8, 1.0f))},
        [&](const Blobs& x) {
          auto record = [&](Blob b) {
            const auto& node = b.graph()->nodes.at(b.graph()->blobs.at(b.id()).producer);
            seen.push_back({node.op->name(), node.op->attributes()});
            return b;
          };
          record(flow::nn::leaky_relu(x[0], 0.3));
          record(flow::nn::selu(x[0], 1.5, 2.5));
          record(flow::clip(x[0], std::nullopt, 6.0));
          record(flow::pad(x[0], {0, 0, 1, 2, 0, 0, 3, 4}, "reflect"));
          record(flow::slice(x[0], {1}, {-1}, {-1}, {2}));
          record(flow::gather(x[0], flow::constant(i64({1}, {0})), 2));
          record(flow::split(x[0], {1, 2}, 2)[0]);
          return record(flow::nn::conv_transpose2d(x[0], x[1], 2, {1, 0, 1, 0}, 1, {1, 0}, 2));
        });
  auto attr = [&](const std::string& op, const std::string& key) -> flow::AttrValue {
    for (const auto& [name, attrs] : seen)
      if (name == op)
        for (const auto& [k, v] : attrs)
          if (k == key) return v;
    ADD_FAILURE() << op << " has no attribute " << key;
    return int64_t{0};
  };
  EXPECT_EQ(std::get<double>(attr("leaky_relu", "alpha")), 0.3);
  EXPECT_EQ(std::get<double>(attr("selu", "alpha")), 1.5);
  EXPECT_EQ(std::get<double>(attr("selu", "gamma")), 2.5);
  EXPECT_EQ(std::get<double>(attr("clip", "max")), 6.0);
  EXPECT_TRUE(std::isinf(std::get<double>(attr("clip", "min"))));
  EXPECT_EQ(std::get<std::vector<int64_t>>(attr("pad", "pads")), (std::vector<int64_t>{0, 0, 1, 2, 0, 0, 3, 4}));
  EXPECT_EQ(std::get<std::string>(attr("pad", "mode")), "reflect");
  EXPECT_EQ(std::get<std::vector<int64_t>>(attr("strided_slice", "steps")), (std::vector<int64_t>{2}));
  EXPECT_EQ(std::get<std::vector<int64_t>>(attr("strided_slice", "axes")), (std::vector<int64_t>{-1}));
  EXPECT_EQ(std::get<int64_t>(attr("gather", "axis")), 2);
  EXPECT_EQ(std::get<std::vector<int64_t>>(attr("split", "split")), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(std::get<std::vector<int64_t>>(attr("conv_transpose2d", "output_padding")), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(std::get<std::vector<int64_t>>(attr("conv_transpose2d", "pads")), (std::vector<int64_t>{1, 0, 1, 0}));
  EXPECT_EQ(std::get<int64_t>(attr("conv_transpose2d", "group")), 2);
}

TEST_F(OpsExtra, ErrorMessages) {
  Tensor a = iota({2, 3});
  auto err1 = [&](const std::function<Blob(Blob)>& f) { return error_of({a}, [&](const Blobs& x) { return f(x[0]); }); };
  EXPECT_CONTAINS(err1([](Blob v) { return flow::nn::prelu(v, flow::constant(iota({4}))); }),
                  "[prelu] shapes (2, 3) and (4,) cannot broadcast");
  EXPECT_CONTAINS(err1([](Blob v) { return flow::nn::prelu(v, flow::constant(iota({2, 2, 3}))); }),
                  "[prelu] slope (2, 2, 3) must broadcast to x (2, 3)");
  EXPECT_CONTAINS(err1([](Blob v) { return flow::maximum(v, flow::constant(iota({2}))); }),
                  "[maximum] shapes (2, 3) and (2,) cannot broadcast");
  EXPECT_CONTAINS(error_of({i32({2}, {1, 2})}, [](const Blobs& x) { return flow::nn::elu(x[0]); }),
                  "[elu] x must be float32 or float64, got (2,) int32");
  EXPECT_CONTAINS(error_of({i32({2}, {1, 2}), i32({2}, {1, 2})}, [](const Blobs& x) { return flow::pow(x[0], x[1]); }),
                  "[pow] a must be float32 or float64");
  EXPECT_CONTAINS(err1([](Blob v) { return flow::pow(v, flow::cast(v, flow::Float)); }), "[pow] dtypes differ");
  EXPECT_CONTAINS(err1([](Blob v) { return flow::gather(v, flow::constant(iota({2}))); }),
                  "[gather] indices must be int32 or int64, got (2,) float64");
  EXPECT_CONTAINS(err1([](Blob v) { return flow::gather(v, flow::constant(i64({1}, {0})), 2); }),
                  "[gather] axis 2 out of range for rank 2");
  EXPECT_CONTAINS(err1([](Blob v) { return flow::slice(v, {0}, {1}, {1}, {0}); }), "[slice] steps must not be 0");
  EXPECT_CONTAINS(err1([](Blob v) { return flow::slice(v, {0, 0}, {1, 1}, {1, -1}); }),
                  "[slice] axis -1 appears twice in axes [1, -1]");
  EXPECT_CONTAINS(err1([](Blob v) { return flow::slice(v, {0}, {1}, {2}); }),
                  "[slice] axis 2 is out of range for x (2, 3)");
  EXPECT_CONTAINS(err1([](Blob v) { return flow::slice(v, {0, 1}, {1}); }), "[slice] starts [0, 1] and ends [1] differ");
  EXPECT_CONTAINS(err1([](Blob v) { return flow::split(v, {2, 2}, 1)[0]; }),
                  "[split] part sizes [2, 2] add up to 4 but axis 1 of x (2, 3) has 3");
  EXPECT_CONTAINS(err1([](Blob v) { return flow::pad(v, {1, 1}); }),
                  "[pad] pads must have 2 x rank = 4 values (begins then ends) for x (2, 3), got 2");
  EXPECT_CONTAINS(err1([](Blob v) { return flow::pad(v, {0, 0, 0, 1}, "wrap"); }),
                  "[pad] mode must be \"constant\", \"reflect\" or \"edge\", got \"wrap\"");
  EXPECT_CONTAINS(err1([](Blob v) { return flow::pad(v, {0, -2, 0, -2}); }), "[pad] pads [0, -2, 0, -2] crop more");
  EXPECT_CONTAINS(err1([](Blob v) { return flow::squeeze(v, {1}); }), "[squeeze] axis 1 of x (2, 3) has size 3, not 1");
  EXPECT_CONTAINS(err1([](Blob v) { return flow::squeeze(v, {2}); }), "[squeeze] axis 2 is out of range for x (2, 3)");
  EXPECT_CONTAINS(err1([](Blob v) { return flow::unsqueeze(v, {3}); }),
                  "[unsqueeze] axis 3 is out of range for a result of rank 3");
  EXPECT_CONTAINS(err1([](Blob v) { return flow::unsqueeze(v, {1, -3}); }), "[unsqueeze] axis -3 appears twice");

  Tensor x = random({1, 3, 4, 4}, flow::Float, 1);
  auto ct = [&](Tensor w, std::function<Blob(Blob, Blob)> f) {
    return error_of({x, w}, [&](const Blobs& v) { return f(v[0], v[1]); });
  };
  EXPECT_CONTAINS(ct(random({2, 2, 3, 3}, flow::Float, 2),
                     [](Blob p, Blob q) { return flow::nn::conv_transpose2d(p, q); }),
                  "[conv_transpose2d] x (1, 3, 4, 4) has 3 channels but w (2, 2, 3, 3) expects 2");
  EXPECT_CONTAINS(ct(random({3, 2, 3, 3}, flow::Float, 2),
                     [](Blob p, Blob q) { return flow::nn::conv_transpose2d(p, q, 2, {0, 0, 0, 0}, 1, 2); }),
                  "[conv_transpose2d] output_padding must be smaller than the strides");
  EXPECT_CONTAINS(ct(random({3, 2, 3, 3}, flow::Float, 2),
                     [](Blob p, Blob q) { return flow::nn::conv_transpose2d(p, q, 1, {0, 0, 0, 0}, 1, 0, 2); }),
                  "[conv_transpose2d] groups=2 must divide the 3 input channels");
  EXPECT_CONTAINS(ct(random({3, 2, 3, 3}, flow::Float, 2),
                     [](Blob p, Blob q) { return flow::nn::conv_transpose2d(p, q, 1, {3, 3, 3, 3}); }),
                  "[conv_transpose2d] pads crop the whole output");
  EXPECT_CONTAINS(ct(random({3, 2, 3, 3}, flow::Float, 2),
                     [](Blob p, Blob q) { return flow::nn::conv_transpose2d(p, q, 1, {0, 0}); }),
                  "[conv_transpose2d] pads must be {top, left, bottom, right}, got 2 values");
  EXPECT_CONTAINS(ct(random({3, 2, 3, 3}, flow::Double, 2),
                     [](Blob p, Blob q) { return flow::nn::conv_transpose2d(p, q); }),
                  "[conv_transpose2d] w (C_in, C_out/groups, kh, kw) must be float32");
}
