// Comparisons, logical ops, where, is_nan/is_inf and the bool dtype
// (ops/logic.cpp): values with broadcasting against hand computations, the
// errors, and where's gradient.
#include <limits>

#include "op_test.h"

namespace flow = jobflow;
using namespace flow::testing;

namespace {

Tensor bools(Shape s, std::vector<int> v) {
  Tensor t(std::move(s), DType::Bool);
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i] != 0;
  return t;
}

class LogicOps : public OpTest {};

TEST_F(LogicOps, ComparisonsBroadcastToBool) {
  const Tensor a = f64({2, 3}, {1, 2, 3, 4, 5, 6}), b = f64({3}, {2, 2, 7});
  const Tensor eq = run2(a, b, [](Blob x, Blob y) { return flow::equal(x, y); });
  EXPECT_EQ(eq.dtype(), DType::Bool);
  expect_values(eq, {2, 3}, {0, 1, 0, 0, 0, 0});
  expect_values(run2(a, b, [](Blob x, Blob y) { return flow::less(x, y); }), {2, 3}, {1, 0, 1, 0, 0, 1});
  expect_values(run2(a, b, [](Blob x, Blob y) { return flow::greater(x, y); }), {2, 3}, {0, 0, 0, 1, 1, 0});
  expect_values(run2(a, b, [](Blob x, Blob y) { return flow::less_equal(x, y); }), {2, 3}, {1, 1, 1, 0, 0, 1});
  expect_values(run2(a, b, [](Blob x, Blob y) { return flow::greater_equal(x, y); }), {2, 3}, {0, 1, 0, 1, 1, 0});
  // Integers, and NaN compares false (equal to nothing, itself included).
  expect_values(run2(i64({3}, {-1, 0, 5}), i64({1}, {0}), [](Blob x, Blob y) { return flow::less(x, y); }), {3},
                {1, 0, 0});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_values(run2(f64({2}, {nan, 1}), f64({2}, {nan, 1}), [](Blob x, Blob y) { return flow::equal(x, y); }), {2},
                {0, 1});
  // equal takes bools.
  expect_values(run2(bools({4}, {0, 0, 1, 1}), bools({4}, {0, 1, 0, 1}),
                     [](Blob x, Blob y) { return flow::equal(x, y); }),
                {4}, {1, 0, 0, 1});
}

TEST_F(LogicOps, LogicalOps) {
  const Tensor a = bools({2, 2}, {0, 0, 1, 1}), b = bools({2}, {0, 1});
  expect_values(run2(a, b, [](Blob x, Blob y) { return flow::logical_and(x, y); }), {2, 2}, {0, 0, 0, 1});
  expect_values(run2(a, b, [](Blob x, Blob y) { return flow::logical_or(x, y); }), {2, 2}, {0, 1, 1, 1});
  expect_values(run2(a, b, [](Blob x, Blob y) { return flow::logical_xor(x, y); }), {2, 2}, {0, 1, 1, 0});
  const Tensor n = run1(a, [](Blob x) { return flow::logical_not(x); });
  EXPECT_EQ(n.dtype(), DType::Bool);
  expect_values(n, {2, 2}, {1, 1, 0, 0});
}

TEST_F(LogicOps, WhereSelectsAndBroadcasts) {
  const Tensor c = bools({2, 1}, {1, 0}), x = f64({3}, {1, 2, 3}), y = f64({2, 3}, {-1, -2, -3, -4, -5, -6});
  expect_values(run_n({c, x, y}, [](const Blobs& v) { return flow::where(v[0], v[1], v[2]); }), {2, 3},
                {1, 2, 3, -4, -5, -6});
  // Any dtype of x and y, bool included.
  expect_values(run_n({bools({3}, {1, 0, 1}), i32({3}, {7, 8, 9}), i32({1}, {0})},
                      [](const Blobs& v) { return flow::where(v[0], v[1], v[2]); }),
                {3}, {7, 0, 9});
  expect_values(run_n({bools({2}, {1, 0}), bools({2}, {0, 0}), bools({2}, {1, 1})},
                      [](const Blobs& v) { return flow::where(v[0], v[1], v[2]); }),
                {2}, {0, 1});
}

TEST_F(LogicOps, NanAndInf) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = f64({5}, {1, inf, -inf, nan, 0});
  expect_values(run1(x, [](Blob v) { return flow::math::is_nan(v); }), {5}, {0, 0, 0, 1, 0});
  expect_values(run1(x, [](Blob v) { return flow::math::is_inf(v); }), {5}, {0, 1, 1, 0, 0});
  expect_values(run1(x, [](Blob v) { return flow::math::is_inf(v, true, false); }), {5}, {0, 1, 0, 0, 0});
  expect_values(run1(x, [](Blob v) { return flow::math::is_inf(v, false, true); }), {5}, {0, 0, 1, 0, 0});
}

TEST_F(LogicOps, BoolCastsAndMoves) {
  // float -> bool is "nonzero" (0.5 and NaN are true); bool -> float is 0/1.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor b = run1(f64({4}, {0, 0.5, -2, nan}), [](Blob v) { return flow::cast(v, DType::Bool); });
  EXPECT_EQ(b.dtype(), DType::Bool);
  expect_values(b, {4}, {0, 1, 1, 1});
  expect_values(run1(bools({3}, {1, 0, 1}), [](Blob v) { return flow::cast(v, DType::Float32); }), {3}, {1, 0, 1});
  // Shape ops move bools unchanged.
  const Tensor t = run1(bools({2, 3}, {1, 0, 0, 1, 1, 0}), [](Blob v) {
    return flow::concat({flow::transpose(v, {1, 0}), flow::reshape(v, {3, 2})}, 0);
  });
  EXPECT_EQ(t.dtype(), DType::Bool);
  expect_values(t, {6, 2}, {1, 1, 0, 1, 0, 0, 1, 0, 0, 1, 1, 0});
}

TEST_F(LogicOps, Errors) {
  const Tensor a = f64({2}, {1, 2}), b = bools({2}, {1, 0});
  EXPECT_CONTAINS(error_of({a, f32({2}, {1, 2})}, [](const Blobs& v) { return flow::less(v[0], v[1]); }),
                  "[less] dtypes differ: (2,) float64 vs (2,) float32");
  EXPECT_CONTAINS(error_of({b, b}, [](const Blobs& v) { return flow::greater(v[0], v[1]); }),
                  "[greater] operands must be numeric, got (2,) bool");
  EXPECT_CONTAINS(error_of({a, a}, [](const Blobs& v) { return flow::logical_and(v[0], v[1]); }),
                  "[logical_and] operands must be bool, got (2,) float64");
  EXPECT_CONTAINS(error_of({a}, [](const Blobs& v) { return flow::logical_not(v[0]); }),
                  "[logical_not] operand must be bool, got (2,) float64");
  EXPECT_CONTAINS(error_of({a, a, a}, [](const Blobs& v) { return flow::where(v[0], v[1], v[2]); }),
                  "[where] condition must be bool, got (2,) float64");
  EXPECT_CONTAINS(error_of({b, a, f64({3}, {1, 2, 3})}, [](const Blobs& v) { return flow::where(v[0], v[1], v[2]); }),
                  "[where] shapes (2,) and (3,) cannot broadcast");
  EXPECT_CONTAINS(error_of({i32({2}, {1, 2})}, [](const Blobs& v) { return flow::math::is_nan(v[0]); }),
                  "[is_nan] x must be float32 or float64");
  // Arithmetic refuses bool.
  EXPECT_CONTAINS(error_of({b, b}, [](const Blobs& v) { return flow::add(v[0], v[1]); }),
                  "[add] operands must be numeric, got (2,) bool");
  EXPECT_CONTAINS(error_of({b}, [](const Blobs& v) { return flow::reduce_sum(v[0]); }),
                  "[reduce_sum] x must be numeric, got (2,) bool");
}

TEST_F(LogicOps, WhereGradient) {
  // cond from the data (no gradient through it); x and y broadcast.
  EXPECT_TRUE(gradcheck(
      [](const Blobs& x) {
        Blob c = flow::greater(x[0], flow::zeros_like(x[0]));
        return flow::where(c, x[1], x[2]);
      },
      {{2, 3}, {3}, {2, 1}}));
}

}  // namespace
