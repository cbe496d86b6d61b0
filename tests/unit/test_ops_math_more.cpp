// Elementwise math of imported models (ops/math.cpp): erf, trigonometric
// and hyperbolic functions, rounding, sign, abs, gelu, mod, bit_shift:
// values against <cmath>, the errors, and finite-difference gradients.
#include <cmath>
#include <limits>

#include "op_test.h"

namespace flow = jobflow;
using namespace flow::testing;

namespace {

class MathOps : public OpTest {};

TEST_F(MathOps, UnaryFunctionsMatchCmath) {
  const Tensor x = f64({6}, {-0.9, -0.5, -0.1, 0.0, 0.3, 0.8});
  const Tensor big = f64({4}, {1.0, 1.5, 2.0, 7.25});  // acosh's domain
  struct Case {
    const char* name;
    Blob (*op)(Blob, const std::string&);
    double (*ref)(double);
    const Tensor* in;
  };
  const Case cases[] = {
      {"erf", flow::math::erf, [](double v) { return std::erf(v); }, &x},
      {"sin", flow::math::sin, [](double v) { return std::sin(v); }, &x},
      {"cos", flow::math::cos, [](double v) { return std::cos(v); }, &x},
      {"tan", flow::math::tan, [](double v) { return std::tan(v); }, &x},
      {"asin", flow::math::asin, [](double v) { return std::asin(v); }, &x},
      {"acos", flow::math::acos, [](double v) { return std::acos(v); }, &x},
      {"atan", flow::math::atan, [](double v) { return std::atan(v); }, &x},
      {"sinh", flow::math::sinh, [](double v) { return std::sinh(v); }, &x},
      {"cosh", flow::math::cosh, [](double v) { return std::cosh(v); }, &x},
      {"asinh", flow::math::asinh, [](double v) { return std::asinh(v); }, &x},
      {"acosh", flow::math::acosh, [](double v) { return std::acosh(v); }, &big},
      {"atanh", flow::math::atanh, [](double v) { return std::atanh(v); }, &x},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    expect_values(run1(*c.in, [&](Blob v) { return c.op(v, ""); }), c.in->shape(), map_values(*c.in, c.ref), 1e-15);
  }
}

TEST_F(MathOps, RoundingSignAbs) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = f64({8}, {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.4, -2.6});
  expect_values(run1(x, [](Blob v) { return flow::math::round(v); }), {8}, {-2, -2, -0, 0, 2, 2, 2, -3});
  expect_values(run1(x, [](Blob v) { return flow::math::floor(v); }), {8}, {-3, -2, -1, 0, 1, 2, 2, -3});
  expect_values(run1(x, [](Blob v) { return flow::math::ceil(v); }), {8}, {-2, -1, -0, 1, 2, 3, 3, -2});
  const Tensor s = run1(f64({4}, {-3, 0, 2, nan}), [](Blob v) { return flow::math::sign(v); });
  EXPECT_EQ(s.at(0), -1);
  EXPECT_EQ(s.at(1), 0);
  EXPECT_EQ(s.at(2), 1);
  EXPECT_TRUE(std::isnan(s.at(3)));
  expect_values(run1(i32({4}, {-7, 0, 3, -1}), [](Blob v) { return flow::math::sign(v); }), {4}, {-1, 0, 1, -1});
  expect_values(run1(i64({3}, {-7, 0, 3}), [](Blob v) { return flow::math::abs(v); }), {3}, {7, 0, 3});
  expect_values(run1(f64({3}, {-7.5, -0.0, 3}), [](Blob v) { return flow::math::abs(v); }), {3}, {7.5, 0, 3});
}

TEST_F(MathOps, Gelu) {
  const Tensor x = f64({5}, {-3, -1, 0, 0.5, 2});
  expect_values(run1(x, [](Blob v) { return flow::nn::gelu(v); }), {5},
                map_values(x, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }), 1e-15);
  expect_values(run1(x, [](Blob v) { return flow::nn::gelu(v, "tanh"); }), {5}, map_values(x, [](double v) {
                  return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
                }),
                1e-15);
  EXPECT_CONTAINS(error_of({x}, [](const Blobs& v) { return flow::nn::gelu(v[0], "fast"); }),
                  "[gelu] approximate must be \"none\" or \"tanh\", got \"fast\"");
}

TEST_F(MathOps, ModFollowsPythonOrC) {
  const Tensor a = i32({6}, {7, -7, 7, -7, 5, 3}), b = i32({6}, {3, 3, -3, -3, 0, -1});
  // Python's %: the divisor's sign; division by zero gives 0 (defined here).
  expect_values(run2(a, b, [](Blob x, Blob y) { return flow::math::mod(x, y); }), {6}, {1, 2, -2, -1, 0, 0});
  // C's fmod: the dividend's sign.
  expect_values(run2(a, b, [](Blob x, Blob y) { return flow::math::mod(x, y, true); }), {6}, {1, -1, 1, -1, 0, 0});
  const Tensor af = f64({4}, {7.5, -7.5, 7.5, -7.5}), bf = f64({1}, {-2});
  expect_values(run2(af, bf, [](Blob x, Blob y) { return flow::math::mod(x, y, true); }), {4}, {1.5, -1.5, 1.5, -1.5});
  expect_values(run2(af, bf, [](Blob x, Blob y) { return flow::math::mod(x, y); }), {4}, {-0.5, -1.5, -0.5, -1.5});
  // The most negative int32 mod -1 does not trap.
  expect_values(run2(i32({1}, {std::numeric_limits<int32_t>::min()}), i32({1}, {-1}),
                     [](Blob x, Blob y) { return flow::math::mod(x, y); }),
                {1}, {0});
}

TEST_F(MathOps, BitShift) {
  Tensor a({4}, DType::UInt8), b({4}, DType::UInt8);
  const uint8_t av[] = {16, 4, 1, 255}, bv[] = {1, 2, 3, 8};
  for (int i = 0; i < 4; ++i) a.data<uint8_t>()[i] = av[i], b.data<uint8_t>()[i] = bv[i];
  expect_values(run2(a, b, [](Blob x, Blob y) { return flow::math::bit_shift(x, y, false); }), {4}, {8, 1, 0, 0});
  expect_values(run2(a, b, [](Blob x, Blob y) { return flow::math::bit_shift(x, y, true); }), {4}, {32, 16, 8, 0});
  EXPECT_CONTAINS(error_of({f64({1}, {1}), f64({1}, {1})},
                           [](const Blobs& v) { return flow::math::bit_shift(v[0], v[1], true); }),
                  "[bit_shift] operands must be integers, got (1,) float64");
}

TEST_F(MathOps, Errors) {
  EXPECT_CONTAINS(error_of({i32({2}, {1, 2})}, [](const Blobs& v) { return flow::math::sin(v[0]); }),
                  "[sin] x must be float32 or float64, got (2,) int32");
  EXPECT_CONTAINS(error_of({f64({2}, {1, 2}), f64({3}, {1, 2, 3})},
                           [](const Blobs& v) { return flow::math::mod(v[0], v[1]); }),
                  "[mod] shapes (2,) and (3,) cannot broadcast");
}

TEST_F(MathOps, Gradients) {
  using F = Blob (*)(Blob, const std::string&);
  for (F f : {F(flow::math::erf), F(flow::math::sin), F(flow::math::cos), F(flow::math::tan), F(flow::math::asin),
              F(flow::math::acos), F(flow::math::atan), F(flow::math::sinh), F(flow::math::cosh), F(flow::math::asinh),
              F(flow::math::atanh)}) {
    GradCheckOptions o;  // inputs in [-1, 1]: keep away from asin/acos/atanh's poles
    o.inputs = {f64({2, 3}, {-0.7, -0.3, 0.1, 0.2, 0.5, 0.8})};
    EXPECT_TRUE(gradcheck([f](const Blobs& x) { return f(x[0], ""); }, {{2, 3}}, o));
  }
  GradCheckOptions pos;
  pos.inputs = {f64({3}, {1.5, 2, 3})};
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::math::acosh(x[0]); }, {{3}}, pos));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::math::abs(x[0]); }, {{2, 3}}, away_from_zero()));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::nn::gelu(x[0]); }, {{2, 3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::nn::gelu(x[0], "tanh"); }, {{2, 3}}));
  // mod: a = q b + y, q constant between the jumps.
  GradCheckOptions m;
  m.inputs = {f64({2, 2}, {7.3, -5.1, 2.2, 9.9}), f64({2}, {2.5, -3.25})};
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::math::mod(x[0], x[1], true); }, {{2, 2}, {2}}, m));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::math::mod(x[0], x[1]); }, {{2, 2}, {2}}, m));
}

}  // namespace
