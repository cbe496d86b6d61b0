// Forward values, error messages and gradients of the elementwise, reduction
// and shape ops (engine/src/ops/{elementwise,reduce,shape}.cpp).
#include <gtest/gtest.h>

#include <jobflow/jobflow.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "op_test.h"
#include "ops_internal.h"

namespace flow = jobflow;
using namespace flow::testing;

class OpsMath : public OpTest {};  // a fresh session per test

// ---------------------------------------------------------------------------
// Binary arithmetic

TEST_F(OpsMath, SameShapeArithmetic) {
  Tensor a = f64({2, 3}, {1, 2, 3, 4, 5, 6}), b = f64({2, 3}, {6, 5, 4, 3, 2, 1});
  expect_values(run2(a, b, [](Blob x, Blob y) { return x + y; }), {2, 3}, {7, 7, 7, 7, 7, 7});
  expect_values(run2(a, b, [](Blob x, Blob y) { return x - y; }), {2, 3}, {-5, -3, -1, 1, 3, 5});
  expect_values(run2(a, b, [](Blob x, Blob y) { return x * y; }), {2, 3}, {6, 10, 12, 12, 10, 6});
  expect_values(run2(a, b, [](Blob x, Blob y) { return x / y; }), {2, 3}, {1.0 / 6, 0.4, 0.75, 4.0 / 3, 2.5, 6});
}

TEST_F(OpsMath, BroadcastRank3WithRank2) {
  // (2,1,3) + (4,1) -> (2,4,3): out[i][j][k] = a[i][0][k] + b[j][0]
  Tensor a = iota({2, 1, 3}), b = iota({4, 1}, 10.0);
  Tensor y = run2(a, b, [](Blob x, Blob z) { return flow::add(x, z); });
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k) want.push_back((i * 3 + k) + 10.0 * j);
  expect_values(y, {2, 4, 3}, want);
  // And the other way round, with sub (not commutative).
  Tensor z = run2(b, a, [](Blob x, Blob w) { return flow::sub(x, w); });
  for (double& v : want) v = 0;
  int n = 0;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k) want[n++] = 10.0 * j - (i * 3 + k);
  expect_values(z, {2, 4, 3}, want);
}

TEST_F(OpsMath, BroadcastTrailingVectorColumnAndScalar) {
  Tensor m = f64({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_values(run2(m, f64({3}, {10, 20, 30}), [](Blob x, Blob v) { return x + v; }), {2, 3},
                {11, 22, 33, 14, 25, 36});
  expect_values(run2(f64({3}, {10, 20, 30}), m, [](Blob v, Blob x) { return v - x; }), {2, 3},
                {9, 18, 27, 6, 15, 24});
  expect_values(run2(m, f64({2, 1}, {2, 3}), [](Blob x, Blob c) { return x * c; }), {2, 3}, {2, 4, 6, 12, 15, 18});
  expect_values(run2(m, f64({}, {2}), [](Blob x, Blob s) { return x / s; }), {2, 3}, {0.5, 1, 1.5, 2, 2.5, 3});
  expect_values(run2(f64({}, {6}), m, [](Blob s, Blob x) { return s / x; }), {2, 3}, {6, 3, 2, 1.5, 1.2, 1});
  expect_values(run2(f64({}, {6}), f64({}, {4}), [](Blob s, Blob t) { return s - t; }), {}, {2});
  // (1,) with (1, 1, 1): leading 1s only.
  expect_values(run2(f64({1}, {2}), f64({1, 1, 1}, {5}), [](Blob s, Blob t) { return s * t; }), {1, 1, 1}, {10});
}

TEST_F(OpsMath, LargeBroadcastsMatchAReferenceLoop) {
  // Big enough for the parallel and chunked paths.
  const int64_t B = 300, N = 257;
  Tensor a = iota({B, N}, 0.001), v = iota({N}, -0.5), c = iota({B, 1}, 2.0);
  Tensor y1 = run2(a, v, [](Blob x, Blob z) { return x + z; });
  Tensor y2 = run2(a, c, [](Blob x, Blob z) { return x * z; });
  Tensor y3 = run2(v, c, [](Blob x, Blob z) { return x - z; });  // (N,) - (B,1) -> (B,N)
  ASSERT_EQ(y3.shape(), (Shape{B, N}));
  for (int64_t i = 0; i < B; ++i)
    for (int64_t j = 0; j < N; ++j) {
      ASSERT_DOUBLE_EQ(y1.at(i * N + j), a.at(i * N + j) + v.at(j));
      ASSERT_DOUBLE_EQ(y2.at(i * N + j), a.at(i * N + j) * c.at(i));
      ASSERT_DOUBLE_EQ(y3.at(i * N + j), v.at(j) - c.at(i));
    }
  Tensor big = iota({1 << 17}, 1e-3);
  Tensor y4 = run2(big, big, [](Blob x, Blob z) { return x * z; });
  for (int64_t i = 0; i < big.numel(); i += 997) ASSERT_DOUBLE_EQ(y4.at(i), big.at(i) * big.at(i));
  // A general broadcast with a long inner row: (3, 1, 40000) + (2, 1).
  Tensor p = iota({3, 1, 40000}, 1.0), q = iota({2, 1}, 1e6);
  Tensor y5 = run2(p, q, [](Blob x, Blob z) { return x + z; });
  ASSERT_EQ(y5.shape(), (Shape{3, 2, 40000}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 40000; k += 1111)
        ASSERT_DOUBLE_EQ(y5.at((i * 2 + j) * 40000 + k), (i * 40000 + k) + 1e6 * j);
}

TEST_F(OpsMath, FloatAndIntDtypes) {
  Tensor y = run2(f32({3}, {1.5f, 2.5f, -1}), f32({1}, {2}), [](Blob x, Blob z) { return x * z; });
  EXPECT_EQ(y.dtype(), flow::Float);
  expect_values(y, {3}, {3, 5, -2});
  Tensor yi = run2(i32({4}, {7, -7, 9, 5}), i32({4}, {2, 2, 0, 5}), [](Blob x, Blob z) { return x / z; });
  EXPECT_EQ(yi.dtype(), flow::Int32);
  expect_values(yi, {4}, {3, -3, 0, 1});  // C++ truncation; division by 0 gives 0
  expect_values(run2(i32({2}, {1, 2}), i32({2, 1}, {10, 20}), [](Blob x, Blob z) { return x + z; }), {2, 2},
                {11, 12, 21, 22});
}

// ---------------------------------------------------------------------------
// Unary math and activations

TEST_F(OpsMath, UnaryMath) {
  Tensor x = f64({4}, {0.25, 1, 2, 4});
  expect_values(run1(x, [](Blob v) { return flow::exp(v); }), {4}, {std::exp(0.25), std::exp(1.0), std::exp(2.0), std::exp(4.0)});
  expect_values(run1(x, [](Blob v) { return flow::log(v); }), {4}, {std::log(0.25), 0, std::log(2.0), std::log(4.0)});
  expect_values(run1(x, [](Blob v) { return flow::sqrt(v); }), {4}, {0.5, 1, std::sqrt(2.0), 2});
  expect_values(run1(x, [](Blob v) { return flow::rsqrt(v); }), {4}, {2, 1, 1 / std::sqrt(2.0), 0.5});
  expect_values(run1(x, [](Blob v) { return flow::square(v); }), {4}, {0.0625, 1, 4, 16});
  expect_values(run1(x, [](Blob v) { return flow::neg(v); }), {4}, {-0.25, -1, -2, -4});
  expect_values(run1(x, [](Blob v) { return -v; }), {4}, {-0.25, -1, -2, -4});
  expect_values(run1(x, [](Blob v) { return flow::add_scalar(v, 1.5); }), {4}, {1.75, 2.5, 3.5, 5.5});
  expect_values(run1(x, [](Blob v) { return flow::mul_scalar(v, -2); }), {4}, {-0.5, -2, -4, -8});
  expect_values(run1(x, [](Blob v) { return 3.0 * v - 1.0; }), {4}, {-0.25, 2, 5, 11});
  expect_values(run1(x, [](Blob v) { return v / 4.0 + 1.0; }), {4}, {1.0625, 1.25, 1.5, 2});
  Tensor yi = run1(i32({3}, {-2, 0, 3}), [](Blob v) { return flow::square(flow::neg(v)); });
  EXPECT_EQ(yi.dtype(), flow::Int32);
  expect_values(yi, {3}, {4, 0, 9});
}

TEST_F(OpsMath, Activations) {
  Tensor x = f64({5}, {-2, -0.5, 0, 0.5, 2});
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  expect_values(run1(x, [](Blob v) { return flow::nn::relu(v); }), {5}, {0, 0, 0, 0.5, 2});
  expect_values(run1(x, [](Blob v) { return flow::math::sigmoid(v); }), {5}, {sig(-2), sig(-0.5), 0.5, sig(0.5), sig(2)});
  expect_values(run1(x, [](Blob v) { return flow::nn::sigmoid(v); }), {5}, {sig(-2), sig(-0.5), 0.5, sig(0.5), sig(2)});
  expect_values(run1(x, [](Blob v) { return flow::math::tanh(v); }), {5},
                {std::tanh(-2.0), std::tanh(-0.5), 0, std::tanh(0.5), std::tanh(2.0)});
  expect_values(run1(x, [](Blob v) { return flow::nn::tanh(v); }), {5},
                {std::tanh(-2.0), std::tanh(-0.5), 0, std::tanh(0.5), std::tanh(2.0)});
  // Saturation does not produce NaN.
  Tensor s = run1(f32({2}, {-1000, 1000}), [](Blob v) { return flow::math::sigmoid(v); });
  expect_values(s, {2}, {0, 1});
  // relu keeps NaN.
  Tensor r = run1(f64({1}, {std::nan("")}), [](Blob v) { return flow::nn::relu(v); });
  EXPECT_TRUE(std::isnan(r.at(0)));
}

TEST_F(OpsMath, ReluPrimitiveIsNamedRelu) {
  std::string name;
  run1(f32({2}, {1, -1}), [&](Blob v) {
    Blob y = flow::nn::relu(v, "my_relu");
    name = y.graph()->nodes[y.graph()->blobs[y.id()].producer].op->name();
    EXPECT_EQ(y.name(), "my_relu");
    return y;
  });
  EXPECT_EQ(name, "relu");
}

TEST_F(OpsMath, ReluGradAndAddN) {
  Tensor dy = f64({4}, {1, 2, 3, 4}), y = f64({4}, {0, 0.5, -1, 2});
  expect_values(run2(dy, y, [](Blob g, Blob o) { return flow::internal::relu_grad(g, o); }), {4}, {0, 2, 0, 4});
  Tensor a = iota({2, 3}), b = iota({2, 3}, 10), c = iota({2, 3}, 100);
  expect_values(run_n({a, b, c}, [](const Blobs& x) { return flow::internal::add_n(x); }), {2, 3},
                {0, 111, 222, 333, 444, 555});
  Tensor big = iota({50000}, 1.0);
  Tensor s = run_n({big, big, big, big}, [](const Blobs& x) { return flow::internal::add_n(x); });
  for (int64_t i = 0; i < big.numel(); i += 101) ASSERT_DOUBLE_EQ(s.at(i), 4.0 * i);
}

TEST_F(OpsMath, Cast) {
  // float -> int rounds toward zero.
  Tensor yi = run1(f32({5}, {1.7f, -1.7f, 2.5f, -0.5f, 3.0f}), [](Blob v) { return flow::cast(v, flow::Int32); });
  EXPECT_EQ(yi.dtype(), flow::Int32);
  EXPECT_EQ(yi.to_vector<int32_t>(), (std::vector<int32_t>{1, -1, 2, 0, 3}));
  Tensor y64 = run1(f64({2}, {-2.9, 2.9}), [](Blob v) { return flow::cast(v, flow::Int64); });
  EXPECT_EQ(y64.to_vector<int64_t>(), (std::vector<int64_t>{-2, 2}));
  Tensor yu = run1(f64({3}, {-1, 255.9, 7.2}), [](Blob v) { return flow::cast(v, flow::UInt8); });
  EXPECT_EQ(yu.to_vector<uint8_t>(), (std::vector<uint8_t>{255, 255, 7}));  // wraps like numpy
  Tensor yf = run1(i32({3}, {-3, 0, 7}), [](Blob v) { return flow::cast(v, flow::Double); });
  EXPECT_EQ(yf.to_vector<double>(), (std::vector<double>{-3, 0, 7}));
  Tensor y32 = run1(f64({2}, {0.1, 1e40}), [](Blob v) { return flow::cast(v, flow::Float); });
  EXPECT_EQ(y32.data<float>()[0], 0.1f);
  EXPECT_TRUE(std::isinf(y32.data<float>()[1]));
  Tensor same = run1(i32({2}, {5, 6}), [](Blob v) { return flow::cast(v, flow::Int32); });
  EXPECT_EQ(same.to_vector<int32_t>(), (std::vector<int32_t>{5, 6}));
}

// ---------------------------------------------------------------------------
// Reductions

TEST_F(OpsMath, ReduceSumMeanMax) {
  // x = [[0 1 2] [3 4 5]]
  Tensor x = iota({2, 3});
  expect_values(run1(x, [](Blob v) { return flow::reduce_sum(v); }), {}, {15});
  expect_values(run1(x, [](Blob v) { return flow::reduce_sum(v, {0}); }), {3}, {3, 5, 7});
  expect_values(run1(x, [](Blob v) { return flow::reduce_sum(v, {1}); }), {2}, {3, 12});
  expect_values(run1(x, [](Blob v) { return flow::reduce_sum(v, {-1}, true); }), {2, 1}, {3, 12});
  expect_values(run1(x, [](Blob v) { return flow::reduce_sum(v, {}, true); }), {1, 1}, {15});
  expect_values(run1(x, [](Blob v) { return flow::reduce_mean(v); }), {}, {2.5});
  expect_values(run1(x, [](Blob v) { return flow::reduce_mean(v, {0}, true); }), {1, 3}, {1.5, 2.5, 3.5});
  expect_values(run1(x, [](Blob v) { return flow::reduce_max(v, {-2}); }), {3}, {3, 4, 5});
  expect_values(run1(x, [](Blob v) { return flow::reduce_max(v, {1}, true); }), {2, 1}, {2, 5});
  expect_values(run1(f64({3}, {-5, -2, -9}), [](Blob v) { return flow::reduce_max(v); }), {}, {-2});
  // Rank 3, several axes, middle axis (innermost kept), size-1 dims.
  Tensor z = iota({2, 3, 4});
  std::vector<double> w02(3, 0), w1(8, 0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        w02[j] += i * 12 + j * 4 + k;
        w1[i * 4 + k] += i * 12 + j * 4 + k;
      }
  expect_values(run1(z, [](Blob v) { return flow::reduce_sum(v, {0, 2}); }), {3}, w02);
  expect_values(run1(z, [](Blob v) { return flow::reduce_sum(v, {-1, 0}, true); }), {1, 3, 1}, w02);
  expect_values(run1(z, [](Blob v) { return flow::reduce_sum(v, {1}); }), {2, 4}, w1);
  expect_values(run1(iota({2, 1, 3}), [](Blob v) { return flow::reduce_sum(v, {1}); }), {2, 3}, {0, 1, 2, 3, 4, 5});
  // Integers accumulate exactly.
  Tensor s = run1(i32({2, 2}, {1, 2, 3, 4}), [](Blob v) { return flow::reduce_sum(v, {0}); });
  EXPECT_EQ(s.to_vector<int32_t>(), (std::vector<int32_t>{4, 6}));
  Tensor m = run1(i32({3}, {-7, 4, 2}), [](Blob v) { return flow::reduce_max(v); });
  EXPECT_EQ(m.item<int32_t>(), 4);
}

TEST_F(OpsMath, ReduceLargeIsAccurateAndMatchesReference) {
  // 2^21 float32 values of 0.1: a float accumulator would be off by ~1%.
  const int64_t n = 1 << 21;
  Tensor x(Shape{n}, flow::Float);
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = 0.1f;
  Tensor s = run1(x, [](Blob v) { return flow::reduce_sum(v); });
  EXPECT_NEAR(s.at(0), n * static_cast<double>(0.1f), 1.0);
  Tensor mean = run1(x, [](Blob v) { return flow::reduce_mean(v); });
  EXPECT_NEAR(mean.at(0), 0.1, 1e-6);
  // Column and row sums of a (B, N) matrix.
  const int64_t B = 500, N = 300;
  Tensor a = iota({B, N}, 1e-3, -50);
  Tensor cols = run1(a, [](Blob v) { return flow::reduce_sum(v, {0}); });
  Tensor rows = run1(a, [](Blob v) { return flow::reduce_max(v, {1}); });
  for (int64_t j = 0; j < N; ++j) {
    double want = 0;
    for (int64_t i = 0; i < B; ++i) want += a.at(i * N + j);
    ASSERT_NEAR(cols.at(j), want, 1e-9);
  }
  for (int64_t i = 0; i < B; ++i) ASSERT_DOUBLE_EQ(rows.at(i), a.at(i * N + N - 1));
}

TEST_F(OpsMath, ArgmaxTiesPickTheFirstIndex) {
  Tensor x = f64({2, 4}, {1, 3, 3, 0, 5, 5, 5, 5});
  Tensor y = run1(x, [](Blob v) { return flow::argmax(v); });
  EXPECT_EQ(y.dtype(), flow::Int32);
  EXPECT_EQ(y.shape(), (Shape{2}));
  EXPECT_EQ(y.to_vector<int32_t>(), (std::vector<int32_t>{1, 0}));
  // Along axis 0 (the strided path): columns (1,5) (5,5) (3,2) (2,2).
  Tensor y0 = run1(f64({2, 4}, {1, 5, 3, 2, 5, 5, 2, 2}), [](Blob v) { return flow::argmax(v, 0); });
  EXPECT_EQ(y0.to_vector<int32_t>(), (std::vector<int32_t>{1, 0, 0, 0}));
  Tensor yi = run1(i32({3, 2}, {4, 1, 9, 1, 9, 0}), [](Blob v) { return flow::argmax(v, -2); });
  EXPECT_EQ(yi.to_vector<int32_t>(), (std::vector<int32_t>{1, 0}));
}

TEST_F(OpsMath, BroadcastToSumToFills) {
  expect_values(run1(f64({3}, {1, 2, 3}), [](Blob v) { return flow::broadcast_to(v, {2, 3}); }), {2, 3},
                {1, 2, 3, 1, 2, 3});
  expect_values(run1(f64({2, 1}, {1, 2}), [](Blob v) { return flow::broadcast_to(v, {2, 3}); }), {2, 3},
                {1, 1, 1, 2, 2, 2});
  expect_values(run1(f64({}, {7}), [](Blob v) { return flow::broadcast_to(v, {2, 2}); }), {2, 2}, {7, 7, 7, 7});
  expect_values(run1(f64({2, 1}, {1, 2}), [](Blob v) { return flow::broadcast_to(v, {2, 2, 3}); }), {2, 2, 3},
                {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2});
  Tensor x = iota({2, 3});
  expect_values(run1(x, [](Blob v) { return flow::sum_to(v, {3}); }), {3}, {3, 5, 7});
  expect_values(run1(x, [](Blob v) { return flow::sum_to(v, {2, 1}); }), {2, 1}, {3, 12});
  expect_values(run1(x, [](Blob v) { return flow::sum_to(v, {}); }), {}, {15});
  expect_values(run1(iota({4, 2, 3}), [](Blob v) { return flow::sum_to(v, {1, 3}); }), {1, 3}, {84, 92, 100});
  expect_values(run1(x, [](Blob v) { return flow::sum_to(v, {2, 3}); }), {2, 3}, {0, 1, 2, 3, 4, 5});
  expect_values(run1(x, [](Blob v) { return flow::zeros_like(v); }), {2, 3}, {0, 0, 0, 0, 0, 0});
  Tensor ones = run1(i32({2}, {5, 6}), [](Blob v) { return flow::ones_like(v); });
  EXPECT_EQ(ones.to_vector<int32_t>(), (std::vector<int32_t>{1, 1}));
}

// ---------------------------------------------------------------------------
// Shape ops

TEST_F(OpsMath, ReshapeAndFlatten) {
  Tensor x = iota({2, 3, 4});
  Tensor y = run1(x, [](Blob v) { return flow::reshape(v, {4, -1}); });
  expect_values(y, {4, 6}, x.to_vector<double>());
  EXPECT_EQ(run1(x, [](Blob v) { return flow::reshape(v, {-1}); }).shape(), (Shape{24}));
  EXPECT_EQ(run1(x, [](Blob v) { return flow::flatten(v); }).shape(), (Shape{2, 12}));
  EXPECT_EQ(run1(x, [](Blob v) { return flow::flatten(v, 0, 1); }).shape(), (Shape{6, 4}));
  EXPECT_EQ(run1(x, [](Blob v) { return flow::flatten(v, 0); }).shape(), (Shape{24}));
  // The same on a computed (arena) input rather than a placeholder.
  Tensor y2 = run1(x, [](Blob v) { return flow::reshape(v * 1.0, {4, -1}); });
  expect_values(y2, {4, 6}, x.to_vector<double>());
  EXPECT_EQ(run1(x, [](Blob v) { return flow::flatten(v * 1.0, 1, 2); }).shape(), (Shape{2, 12}));
  // A reshape followed by compute reads the same bytes.
  expect_values(run1(x, [](Blob v) { return flow::reshape(v, {6, 4}) * 2.0; }), {6, 4},
                run1(x, [](Blob v) { return v * 2.0; }).to_vector<double>());
}

TEST_F(OpsMath, TransposePerms) {
  Tensor x = iota({2, 3, 4});  // x[i][j][k] = 12i + 4j + k
  auto check = [&](std::vector<int> perm) {
    Tensor y = run1(x, [&](Blob v) { return flow::transpose(v, perm); });
    std::vector<int> p(perm);
    for (int& q : p)
      if (q < 0) q += 3;
    const Shape xs{2, 3, 4};
    ASSERT_EQ(y.shape(), (Shape{xs[p[0]], xs[p[1]], xs[p[2]]}));
    int64_t n = 0;
    int64_t idx[3];
    for (idx[0] = 0; idx[0] < xs[p[0]]; ++idx[0])
      for (idx[1] = 0; idx[1] < xs[p[1]]; ++idx[1])
        for (idx[2] = 0; idx[2] < xs[p[2]]; ++idx[2]) {
          int64_t src[3];
          for (int d = 0; d < 3; ++d) src[p[d]] = idx[d];
          ASSERT_EQ(y.at(n++), 12 * src[0] + 4 * src[1] + src[2]) << "perm " << perm[0] << perm[1] << perm[2];
        }
  };
  check({0, 1, 2});
  check({1, 0, 2});
  check({0, 2, 1});
  check({2, 0, 1});
  check({1, 2, 0});
  check({2, 1, 0});
  check({-1, 0, -2});
  // A 2-D transpose larger than one tile, and float32.
  Tensor m(Shape{70, 45}, flow::Float);
  for (int64_t i = 0; i < m.numel(); ++i) m.data<float>()[i] = static_cast<float>(i);
  Tensor t = run1(m, [](Blob v) { return flow::transpose(v, {1, 0}); });
  ASSERT_EQ(t.shape(), (Shape{45, 70}));
  for (int64_t i = 0; i < 45; ++i)
    for (int64_t j = 0; j < 70; ++j) ASSERT_EQ(t.at(i * 70 + j), m.at(j * 45 + i));
  // Batched (B, M, N) -> (B, N, M) with size-1 dims mixed in.
  Tensor b = iota({3, 1, 40, 33});
  Tensor bt = run1(b, [](Blob v) { return flow::transpose(v, {0, 3, 1, 2}); });
  ASSERT_EQ(bt.shape(), (Shape{3, 33, 1, 40}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t k = 0; k < 33; ++k)
      for (int64_t j = 0; j < 40; ++j) ASSERT_EQ(bt.at((i * 33 + k) * 40 + j), b.at((i * 40 + j) * 33 + k));
}

TEST_F(OpsMath, ConcatAxes) {
  Tensor a = f64({2, 1}, {1, 2}), b = f64({2, 2}, {3, 4, 5, 6}), c = f64({2, 3}, {7, 8, 9, 10, 11, 12});
  expect_values(run_n({a, b, c}, [](const Blobs& x) { return flow::concat(x, 1); }), {2, 6},
                {1, 3, 4, 7, 8, 9, 2, 5, 6, 10, 11, 12});
  expect_values(run_n({a, b, c}, [](const Blobs& x) { return flow::concat(x, -1); }), {2, 6},
                {1, 3, 4, 7, 8, 9, 2, 5, 6, 10, 11, 12});
  expect_values(run_n({b, f64({1, 2}, {0, -1})}, [](const Blobs& x) { return flow::concat(x, 0); }), {3, 2},
                {3, 4, 5, 6, 0, -1});
  Tensor i = run_n({i32({2}, {1, 2}), i32({1}, {3})}, [](const Blobs& x) { return flow::concat(x); });
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3}));
}

TEST_F(OpsMath, IdentityAndConstant) {
  expect_values(run1(f64({2}, {1, 2}), [](Blob v) { return flow::identity(v, "same"); }), {2}, {1, 2});
  Tensor k = f64({2}, {10, 20});
  Tensor y = run1(f64({2}, {1, 2}), [&](Blob v) { return v + flow::constant(k); });
  expect_values(y, {2}, {11, 22});
  auto job = flow::global_function(flow::Predict, {}, []() -> Blob { return flow::constant(i32({3}, {4, 5, 6}), "consts"); });
  Tensor c = job();
  EXPECT_EQ(c.to_vector<int32_t>(), (std::vector<int32_t>{4, 5, 6}));
}

// ---------------------------------------------------------------------------
// Error messages name the op and the shapes

TEST_F(OpsMath, ErrorMessages) {
  Tensor a = iota({2, 3});
  EXPECT_CONTAINS(error_of({a, iota({4})}, [](const Blobs& x) { return flow::add(x[0], x[1]); }),
                  "[add] shapes (2, 3) and (4,) cannot broadcast");
  EXPECT_CONTAINS(error_of({a, iota({2, 2})}, [](const Blobs& x) { return x[0] * x[1]; }),
                  "[mul] shapes (2, 3) and (2, 2) cannot broadcast");
  std::string e = error_of({a, f32({3}, {1, 2, 3})}, [](const Blobs& x) { return x[0] - x[1]; });
  EXPECT_CONTAINS(e, "[sub] dtypes differ");
  EXPECT_CONTAINS(e, "(2, 3) float64");
  EXPECT_CONTAINS(e, "(3,) float32");
  e = error_of({i32({2}, {1, 2})}, [](const Blobs& x) { return flow::exp(x[0]); });
  EXPECT_CONTAINS(e, "[exp]");
  EXPECT_CONTAINS(e, "(2,) int32");
  e = error_of({a}, [](const Blobs& x) { return flow::reshape(x[0], {4, -1}); });
  EXPECT_CONTAINS(e, "[reshape]");
  EXPECT_CONTAINS(e, "(2, 3)");
  EXPECT_CONTAINS(e, "(4, -1)");
  e = error_of({a}, [](const Blobs& x) { return flow::reshape(x[0], {5}); });
  EXPECT_CONTAINS(e, "[reshape] cannot reshape (2, 3) (6 elements) to (5,)");
  e = error_of({a}, [](const Blobs& x) { return flow::transpose(x[0], {0, 0}); });
  EXPECT_CONTAINS(e, "[transpose] perm (0, 0) is not a permutation");
  EXPECT_CONTAINS(e, "(2, 3)");
  EXPECT_CONTAINS(error_of({a}, [](const Blobs& x) { return flow::transpose(x[0], {1, 0, 2}); }), "[transpose]");
  e = error_of({a, iota({3, 3})}, [](const Blobs& x) { return flow::concat(x, 1); });
  EXPECT_CONTAINS(e, "[concat]");
  EXPECT_CONTAINS(e, "(3, 3)");
  EXPECT_CONTAINS(e, "(2, 3)");
  EXPECT_CONTAINS(error_of({a}, [](const Blobs& x) { return flow::concat({x[0]}, 2); }),
                  "[concat] axis 2 is out of range for input (2, 3)");
  EXPECT_CONTAINS(error_of({a}, [](const Blobs& x) { return flow::reduce_sum(x[0], {2}); }),
                  "[reduce_sum] axis 2 is out of range for input (2, 3)");
  EXPECT_CONTAINS(error_of({a}, [](const Blobs& x) { return flow::reduce_max(x[0], {1, -1}); }),
                  "[reduce_max] axis -1 repeats");
  EXPECT_CONTAINS(error_of({i32({2}, {1, 2})}, [](const Blobs& x) { return flow::reduce_mean(x[0]); }),
                  "[reduce_mean]");
  EXPECT_CONTAINS(error_of({a}, [](const Blobs& x) { return flow::argmax(x[0], 2); }),
                  "[argmax] axis 2 is out of range for input (2, 3)");
  EXPECT_CONTAINS(error_of({a}, [](const Blobs& x) { return flow::broadcast_to(x[0], {3, 3}); }),
                  "[broadcast_to] cannot broadcast (2, 3) to (3, 3)");
  EXPECT_CONTAINS(error_of({a}, [](const Blobs& x) { return flow::sum_to(x[0], {4}); }),
                  "[sum_to] cannot sum (2, 3) to (4,)");
  EXPECT_CONTAINS(error_of({a, iota({3, 2})}, [](const Blobs& x) { return flow::internal::add_n(x); }),
                  "[add_n] input 1 is (3, 2) float64 but input 0 is (2, 3) float64");
  EXPECT_CONTAINS(error_of({a}, [](const Blobs& x) { return flow::flatten(x[0], 1, 0); }), "[flatten]");
}

// ---------------------------------------------------------------------------
// Gradients (float64, central differences)

TEST_F(OpsMath, GradBinarySameShape) {
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return x[0] + x[1]; }, {{2, 3}, {2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return x[0] - x[1]; }, {{2, 3}, {2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return x[0] * x[1]; }, {{2, 3}, {2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return x[0] / x[1]; }, {{2, 3}, {2, 3}}, positive()));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return x[0] * x[0]; }, {{4}}));  // same blob twice
}

TEST_F(OpsMath, GradBinaryBroadcasting) {
  for (auto op : std::vector<std::function<Blob(Blob, Blob)>>{
           [](Blob a, Blob b) { return a + b; }, [](Blob a, Blob b) { return a - b; },
           [](Blob a, Blob b) { return a * b; }, [](Blob a, Blob b) { return a / b; }}) {
    auto f = [op](const Blobs& x) { return op(x[0], x[1]); };
    EXPECT_TRUE(gradcheck(f, {{2, 1, 3}, {4, 1}}, positive()));
    EXPECT_TRUE(gradcheck(f, {{4, 1}, {2, 1, 3}}, positive()));
    EXPECT_TRUE(gradcheck(f, {{2, 3}, {3}}, positive()));
    EXPECT_TRUE(gradcheck(f, {{2, 3}, {2, 1}}, positive()));
    EXPECT_TRUE(gradcheck(f, {{2, 3}, {}}, positive()));
    EXPECT_TRUE(gradcheck(f, {{}, {3}}, positive()));
  }
}

TEST_F(OpsMath, GradUnary) {
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::add_scalar(x[0], 2.5); }, {{2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::mul_scalar(x[0], -1.5); }, {{2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::neg(x[0]); }, {{2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::exp(x[0]); }, {{2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::log(x[0]); }, {{2, 3}}, positive()));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::sqrt(x[0]); }, {{2, 3}}, positive()));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::rsqrt(x[0]); }, {{2, 3}}, positive()));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::square(x[0]); }, {{2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::math::sigmoid(x[0]); }, {{2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::math::tanh(x[0]); }, {{2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::nn::relu(x[0]); }, {{2, 3}}, away_from_zero()));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::identity(x[0]); }, {{2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::internal::add_n({x[0], x[1], x[0]}); }, {{2, 3}, {2, 3}}));
  // cast float32 -> float64 -> (gradient back in float32).
  GradCheckOptions o32;
  o32.dtype = flow::Float;
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::square(flow::cast(x[0], flow::Double)); }, {{3}}, o32));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::cast(flow::cast(x[0], flow::Double), flow::Float) * 2.0; },
                        {{3}}, o32));
}

TEST_F(OpsMath, GradSecondOrderActivations) {
  // d/dx of (dL/dx) exercises the vjps of sigmoid_grad, tanh_grad and
  // relu_grad.
  EXPECT_TRUE(gradcheck(second_order([](Blob v) { return flow::math::sigmoid(v); }), {{2, 3}, {2, 3}}));
  EXPECT_TRUE(gradcheck(second_order([](Blob v) { return flow::math::tanh(v); }), {{2, 3}, {2, 3}}));
  EXPECT_TRUE(gradcheck(second_order([](Blob v) { return flow::nn::relu(v); }), {{2, 3}, {2, 3}}, away_from_zero()));
}

TEST_F(OpsMath, GradReductions) {
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::reduce_sum(x[0]); }, {{2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::reduce_sum(x[0], {1}); }, {{2, 3, 4}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::reduce_sum(x[0], {0, -1}, true); }, {{2, 3, 4}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::reduce_mean(x[0]); }, {{2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::reduce_mean(x[0], {-1}); }, {{2, 3, 4}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::reduce_mean(x[0], {0}, true); }, {{2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::reduce_max(x[0]); }, {{2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::reduce_max(x[0], {1}); }, {{2, 3, 4}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::reduce_max(x[0], {0, 2}, true); }, {{2, 3, 4}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::broadcast_to(x[0], {2, 4, 3}); }, {{4, 1}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::sum_to(x[0], {1, 3}); }, {{4, 2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::sum_to(x[0], {2, 1}); }, {{2, 3}}));
  // Ties in max split the gradient evenly (the gradient of the mean of the
  // tied values), so the analytic gradient of max([1, 3, 3]) is (0, .5, .5).
  // Finite differences are one-sided at a tie, so only check the value.
  Tensor g = run1(f64({3}, {1, 3, 3}), [](Blob v) { return flow::gradients(flow::reduce_max(v), {v})[0]; });
  expect_values(g, {3}, {0, 0.5, 0.5});
}

TEST_F(OpsMath, GradShapeOps) {
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::reshape(x[0], {3, -1}) * x[1]; }, {{2, 3}, {3, 2}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::flatten(x[0]); }, {{2, 3, 2}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::transpose(x[0], {2, 0, 1}); }, {{2, 3, 4}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::transpose(x[0], {1, 0}); }, {{3, 5}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::concat(x, 1); }, {{2, 1}, {2, 2}, {2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::concat(x, 0); }, {{1, 3}, {2, 3}}));
  // Second order through concat's slices (and slice_grad).
  EXPECT_TRUE(gradcheck(
      [](const Blobs& x) {
        Blob y = flow::concat({x[0], x[1]}, 1);
        return flow::gradients(flow::reduce_sum(flow::square(y) * flow::concat({x[1], x[0]}, 1)), {x[1]})[0];
      },
      {{2, 2}, {2, 2}}));
  // Constants have no gradient; the other input still gets one.
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return x[0] * flow::constant(f64({3}, {1, 2, 3})); }, {{2, 3}}));
}
