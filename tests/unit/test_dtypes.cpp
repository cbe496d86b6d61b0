// The dtypes beyond the first seven (tensor.h): int16, uint16, uint32 and
// uint64 through the ops, and float16 / bfloat16 as storage types: their
// conversions bit for bit, cast() both ways, the error of any other op, and
// .npy files.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "op_test.h"

namespace flow = jobflow;
using namespace flow::testing;

namespace {

template <class T>
Tensor of(Shape s, std::vector<T> v) {
  return Tensor::from<T>(std::move(s), v);
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Float16, RoundsToNearestEvenWithSubnormalsAndInfinity) {
  EXPECT_EQ(flow::float16(1.0).bits, 0x3C00);
  EXPECT_EQ(flow::float16(-2.0).bits, 0xC000);
  EXPECT_EQ(flow::float16(-0.0).bits, 0x8000);
  EXPECT_EQ(flow::float16(65504.0).bits, 0x7BFF);   // the largest finite
  EXPECT_EQ(flow::float16(65519.99).bits, 0x7BFF);  // below the halfway point to 2^16
  EXPECT_EQ(flow::float16(65520.0).bits, 0x7C00);   // the halfway point rounds to even: infinity
  EXPECT_EQ(flow::float16(1e9).bits, 0x7C00);
  EXPECT_EQ(flow::float16(-INFINITY).bits, 0xFC00);
  EXPECT_EQ(flow::float16(std::nan("")).bits & 0x7E00, 0x7E00);  // a quiet NaN
  EXPECT_EQ(flow::float16(std::ldexp(1.0, -24)).bits, 0x0001);     // the smallest subnormal
  EXPECT_EQ(flow::float16(std::ldexp(1.0, -25)).bits, 0x0000);     // half of it: ties to even (0)
  EXPECT_EQ(flow::float16(std::ldexp(3.0, -25)).bits, 0x0002);     // 1.5 units: ties to even (2)
  EXPECT_EQ(flow::float16(std::ldexp(1023.5, -24)).bits, 0x0400);  // rounds up into the smallest normal
  EXPECT_EQ(flow::float16(1.0 + std::ldexp(1.0, -11)).bits, 0x3C00);  // tie: even
  EXPECT_EQ(flow::float16(1.0 + std::ldexp(3.0, -11)).bits, 0x3C02);  // tie: even (up)
  // A double is rounded once: through float32 this one would land on the
  // tie 1 + 2^-11 and round down to 1.0.
  EXPECT_EQ(flow::float16(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)).bits, 0x3C01);
}

TEST(Float16, EveryValueRoundTripsThroughFloat) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto h = flow::float16::from_bits(static_cast<uint16_t>(b));
    const float f = static_cast<float>(h);
    if ((b & 0x7C00) == 0x7C00 && (b & 0x3FF)) {
      EXPECT_TRUE(std::isnan(f)) << b;
      continue;
    }
    ASSERT_EQ(flow::float16(f).bits, b) << "bits " << b << " read as " << f;
  }
  EXPECT_EQ(static_cast<float>(flow::float16::from_bits(0x0001)), std::ldexp(1.0f, -24));
  EXPECT_EQ(static_cast<float>(flow::float16::from_bits(0x3555)), 0.333251953125f);
}

TEST(BFloat16, RoundsToNearestEvenAndRoundTrips) {
  EXPECT_EQ(flow::bfloat16(1.0).bits, 0x3F80);
  // 0x3EF5EEB0: the low half 0xEEB0 is above the halfway point (ONNX's old
  // test data truncates it to 0x3EF5).
  EXPECT_EQ(flow::bfloat16(bits_float(0x3EF5EEB0)).bits, 0x3EF6);
  EXPECT_EQ(flow::bfloat16(bits_float(0x3F808000)).bits, 0x3F80);  // tie: even (down)
  EXPECT_EQ(flow::bfloat16(bits_float(0x3F818000)).bits, 0x3F82);  // tie: even (up)
  EXPECT_EQ(flow::bfloat16(INFINITY).bits, 0x7F80);
  EXPECT_EQ(flow::bfloat16(bits_float(0x7F7FFFFF)).bits, 0x7F80);  // FLT_MAX rounds to infinity
  EXPECT_EQ(flow::bfloat16(std::nan("")).bits & 0x7FC0, 0x7FC0);
  EXPECT_EQ(flow::bfloat16(bits_float(0x00000001)).bits, 0x0000);  // float's smallest subnormal: to 0
  EXPECT_EQ(flow::bfloat16(bits_float(0x00018000)).bits, 0x0002);  // a subnormal tie: even
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = static_cast<float>(flow::bfloat16::from_bits(static_cast<uint16_t>(b)));
    EXPECT_EQ(float_bits(f), b << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(flow::bfloat16(f).bits, b) << b;
    }
  }
}

class Dtypes : public OpTest {};

TEST_F(Dtypes, CastToAndFromTheSixteenBitFloats) {
  const Tensor x = f32({6}, {1.0f, -2.5f, 65504.0f, 1e6f, 3.0e-8f, 0.1f});
  const Tensor h = run1(x, [](Blob v) { return flow::cast(v, DType::Float16); });
  ASSERT_EQ(h.dtype(), DType::Float16);
  ASSERT_EQ(h.shape(), Shape({6}));
  const uint16_t want_h[] = {0x3C00, 0xC100, 0x7BFF, 0x7C00, 0x0001, 0x2E66};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(h.data<flow::float16>()[i].bits, want_h[i]) << i;
  // Back to float32 and to int32 (through the float value, truncated).
  const Tensor back = run1(h, [](Blob v) { return flow::cast(v, DType::Float32); });
  const std::vector<float> want_back = {1.0f, -2.5f, 65504.0f, INFINITY, std::ldexp(1.0f, -24), 0.0999755859375f};
  EXPECT_EQ(back.to_vector<float>(), want_back);
  const Tensor b = run1(x, [](Blob v) { return flow::cast(v, DType::BFloat16); });
  ASSERT_EQ(b.dtype(), DType::BFloat16);
  expect_values(run1(b, [](Blob v) { return flow::cast(v, DType::Float64); }), {6},
                {1.0, -2.5, 65536.0, 999424.0, static_cast<double>(bits_float(0x33010000)), 0.10009765625});
  const Tensor finite = f32({4}, {1.0f, -2.5f, 65504.0f, 0.1f}).astype(DType::Float16);
  expect_values(run1(finite, [](Blob v) { return flow::cast(v, DType::Int32); }), {4}, {1, -2, 65504, 0}, 0);
  // float16 -> bfloat16 goes through the exact float value.
  const Tensor hb = run1(h, [](Blob v) { return flow::cast(v, DType::BFloat16); });
  EXPECT_EQ(hb.data<flow::bfloat16>()[2].bits, flow::bfloat16(65504.0).bits);
  // Tensor::astype and at() agree with cast.
  EXPECT_TRUE(x.astype(DType::Float16).equal(h));
  EXPECT_DOUBLE_EQ(h.at(1), -2.5);
}

TEST_F(Dtypes, OtherOpsRefuseTheSixteenBitFloatsNamingTheInput) {
  const Tensor h = f32({2}, {1, 2}).astype(DType::Float16);
  const std::string e = error_of({h, h}, [](const Blobs& v) { return v[0] + v[1]; });
  EXPECT_CONTAINS(e, "[add]");
  EXPECT_CONTAINS(e, "input 0 is (2,) float16");
  EXPECT_CONTAINS(e, "cast(x, Float32) first");
  const Tensor b = f32({2}, {1, 2}).astype(DType::BFloat16);
  EXPECT_CONTAINS(error_of({b}, [](const Blobs& v) { return flow::nn::relu(v[0]); }), "(2,) bfloat16");
}

TEST_F(Dtypes, WideUnsignedValuesStayExact) {
  // Above 2^53, where a double would round: max, min, add and mod on uint64.
  const uint64_t big = (uint64_t(1) << 63) + 3, other = (uint64_t(1) << 63) + 2;
  const Tensor a = of<uint64_t>({2}, {big, 7}), c = of<uint64_t>({2}, {other, 9});
  const Tensor mx = run2(a, c, [](Blob x, Blob y) { return flow::maximum(x, y); });
  ASSERT_EQ(mx.dtype(), DType::UInt64);
  EXPECT_EQ(mx.data<uint64_t>()[0], big);
  EXPECT_EQ(mx.data<uint64_t>()[1], 9u);
  const Tensor mn = run2(a, c, [](Blob x, Blob y) { return flow::minimum(x, y); });
  EXPECT_EQ(mn.data<uint64_t>()[0], other);
  const Tensor md = run2(a, of<uint64_t>({1}, {10}), [](Blob x, Blob y) { return flow::math::mod(x, y); });
  EXPECT_EQ(md.data<uint64_t>()[0], big % 10);
  EXPECT_EQ(md.data<uint64_t>()[1], 7u);
  // uint32 and uint16 shifts (logical), int16 wrapping like numpy.
  const Tensor sh = run2(of<uint32_t>({2}, {0x80000000u, 1}), of<uint32_t>({2}, {31, 31}),
                         [](Blob x, Blob y) { return flow::math::bit_shift(x, y, /*left=*/false); });
  EXPECT_EQ(sh.data<uint32_t>()[0], 1u);
  EXPECT_EQ(sh.data<uint32_t>()[1], 0u);
  const Tensor sl = run2(of<uint16_t>({1}, {0x00FF}), of<uint16_t>({1}, {8}),
                         [](Blob x, Blob y) { return flow::math::bit_shift(x, y, /*left=*/true); });
  EXPECT_EQ(sl.data<uint16_t>()[0], 0xFF00);
  const Tensor s16 = run2(of<int16_t>({1}, {32767}), of<int16_t>({1}, {1}), [](Blob x, Blob y) { return x + y; });
  ASSERT_EQ(s16.dtype(), DType::Int16);
  EXPECT_EQ(s16.data<int16_t>()[0], -32768);
  // Casts between them: uint64 -> int64 keeps the bits, float -> uint16 truncates.
  const Tensor ci = run1(a, [](Blob v) { return flow::cast(v, DType::Int64); });
  EXPECT_EQ(static_cast<uint64_t>(ci.data<int64_t>()[0]), big);
  expect_values(run1(f64({2}, {65535.9, 3.2}), [](Blob v) { return flow::cast(v, DType::UInt16); }), {2},
                {65535, 3}, 0);
}

// add_scalar / mul_scalar on integers (what imported Gemm alpha, Mean and
// C++ callers make): a whole-number scalar adds and multiplies in integers,
// exact above 2^53 and wrapping like integer arithmetic; a fraction still
// goes through double and truncates.
TEST_F(Dtypes, IntegerScalarArithmeticIsExact) {
  const int64_t big = (int64_t{1} << 60) + 1;
  const Tensor a = of<int64_t>({3}, {big, -big, 5});
  const Tensor p = run1(a, [](Blob v) { return flow::add_scalar(v, 2); });
  ASSERT_EQ(p.dtype(), DType::Int64);
  EXPECT_EQ(p.to_vector<int64_t>(), (std::vector<int64_t>{big + 2, -big + 2, 7}));
  const Tensor m = run1(a, [](Blob v) { return flow::mul_scalar(v, -3); });
  EXPECT_EQ(m.to_vector<int64_t>(), (std::vector<int64_t>{-3 * big, 3 * big, -15}));
  const Tensor u = run1(of<uint64_t>({1}, {~uint64_t{0} - 1}), [](Blob v) { return flow::add_scalar(v, 1); });
  EXPECT_EQ(u.data<uint64_t>()[0], ~uint64_t{0});
  const Tensor w = run1(of<uint8_t>({2}, {250, 3}), [](Blob v) { return flow::add_scalar(v, 10); });
  EXPECT_EQ(w.to_vector<uint8_t>(), (std::vector<uint8_t>{4, 13}));  // 260 wraps to 4
  const Tensor h = run1(of<int32_t>({2}, {7, -7}), [](Blob v) { return flow::mul_scalar(v, 0.5); });
  EXPECT_EQ(h.to_vector<int32_t>(), (std::vector<int32_t>{3, -3}));
}

// int64 -> bfloat16 rounds once, from the integer: 2^62 + 2^54 + 1 is just
// above the halfway point between two bfloat16 values (2^62 and 2^62 +
// 2^55) and rounds up; through a double it would first become the exact
// halfway point and round to even (down).
TEST_F(Dtypes, WideIntegersRoundOnceToBFloat16) {
  const int64_t v = (int64_t{1} << 62) + (int64_t{1} << 54) + 1;
  const Tensor y = run1(of<int64_t>({2}, {v, -v}), [](Blob x) { return flow::cast(x, DType::BFloat16); });
  ASSERT_EQ(y.dtype(), DType::BFloat16);
  EXPECT_EQ(static_cast<float>(y.data<flow::bfloat16>()[0]), std::ldexp(1.0f, 62) + std::ldexp(1.0f, 55));
  EXPECT_EQ(static_cast<float>(y.data<flow::bfloat16>()[1]), -(std::ldexp(1.0f, 62) + std::ldexp(1.0f, 55)));
  const uint64_t u = (uint64_t{1} << 63) + (uint64_t{1} << 55) + 1;  // likewise for uint64
  const Tensor z = run1(of<uint64_t>({1}, {u}), [](Blob x) { return flow::cast(x, DType::BFloat16); });
  EXPECT_EQ(static_cast<float>(z.data<flow::bfloat16>()[0]), std::ldexp(1.0f, 63) + std::ldexp(1.0f, 56));
  // Exact values stay exact.
  const Tensor w = run1(of<int64_t>({1}, {-256}), [](Blob x) { return flow::cast(x, DType::BFloat16); });
  EXPECT_EQ(static_cast<float>(w.data<flow::bfloat16>()[0]), -256.0f);
}

TEST_F(Dtypes, TwoByteDataMovementProductsSumsAndUnsignedCasts) {
  // Data movement moves 2-byte elements as 2 bytes (a transpose of int16
  // once copied 8-byte elements over 2-byte buffers).
  const Tensor t = of<int16_t>({2, 3}, {1, -2, 3, -4, 5, -6});
  const Tensor tt = run1(t, [](Blob v) { return flow::transpose(v, {1, 0}); });
  ASSERT_EQ(tt.dtype(), DType::Int16);
  EXPECT_EQ(tt.to_vector<int16_t>(), (std::vector<int16_t>{1, -4, -2, 5, 3, -6}));
  const Tensor u = run1(of<uint16_t>({3, 1}, {7, 65535, 9}), [](Blob v) { return flow::transpose(v, {1, 0}); });
  EXPECT_EQ(u.shape(), Shape({1, 3}));
  EXPECT_EQ(u.to_vector<uint16_t>(), (std::vector<uint16_t>{7, 65535, 9}));
  // uint16 products wrap in unsigned arithmetic (C++ would multiply in int,
  // where 65535 * 65535 overflows).
  const Tensor m = run2(of<uint16_t>({2}, {65535, 300}), of<uint16_t>({2}, {65535, 300}),
                        [](Blob x, Blob y) { return x * y; });
  EXPECT_EQ(m.to_vector<uint16_t>(), (std::vector<uint16_t>{1, static_cast<uint16_t>(90000 % 65536)}));
  // uint64 sums past 2^63 and uint32 products past 2^32 wrap, as numpy's do.
  const uint64_t half = uint64_t(1) << 63;
  const Tensor s = run1(of<uint64_t>({3}, {half, half - 1, 5}), [](Blob v) { return flow::reduce_sum(v); });
  EXPECT_EQ(s.to_vector<uint64_t>(), (std::vector<uint64_t>{uint64_t(half + half - 1 + 5)}));
  const Tensor p = run1(of<uint32_t>({2}, {0xFFFFFFFFu, 3}), [](Blob v) { return flow::reduce_prod(v); });
  EXPECT_EQ(p.to_vector<uint32_t>(), (std::vector<uint32_t>{static_cast<uint32_t>(0xFFFFFFFFull * 3)}));
  // float -> uint64 of a negative value wraps through int64 (numpy's astype).
  const Tensor c = run1(f64({2}, {-1.0, 7.9}), [](Blob v) { return flow::cast(v, DType::UInt64); });
  EXPECT_EQ(c.to_vector<uint64_t>(), (std::vector<uint64_t>{~uint64_t(0), 7}));
  // Tensor::astype (what the ONNX loader folds a constant Cast with) follows
  // the same rules as the cast op.
  EXPECT_TRUE(f64({2}, {-1.0, 7.9}).astype(DType::UInt64).equal(c));
  const Tensor wide = f64({2}, {300.0, -1.0});
  EXPECT_TRUE(wide.astype(DType::UInt8).equal(run1(wide, [](Blob v) { return flow::cast(v, DType::UInt8); })));
  EXPECT_EQ(wide.astype(DType::UInt8).to_vector<uint8_t>(), (std::vector<uint8_t>{44, 255}));
}

TEST(DtypeNames, RoundTripAndSizes) {
  for (int i = 0; i < flow::kDTypeCount; ++i) {
    const auto t = static_cast<DType>(i);
    EXPECT_EQ(flow::dtype_from_name(flow::dtype_name(t)), t);
  }
  EXPECT_EQ(flow::dtype_from_name("half"), DType::Float16);
  EXPECT_EQ(flow::dtype_size(DType::Float16), 2u);
  EXPECT_EQ(flow::dtype_size(DType::BFloat16), 2u);
  EXPECT_EQ(flow::dtype_size(DType::UInt64), 8u);
  EXPECT_EQ(flow::dtype_size(DType::Int16), 2u);
}

TEST(DtypeNpy, SixteenBitAndUnsignedFilesRoundTrip) {
  const std::string dir = ::testing::TempDir();
  const Tensor h = Tensor::from<float>({3}, {1.5f, -0.25f, 1e5f}).astype(DType::Float16);
  const Tensor u = of<uint64_t>({2}, {~uint64_t(0), 1});
  const Tensor s = of<int16_t>({2}, {-300, 300});
  for (const Tensor& t : {h, u, s}) {
    const std::string p = dir + "/dtypes_" + flow::dtype_name(t.dtype()) + ".npy";
    flow::data::write_npy(p, t);
    const Tensor r = flow::data::read_npy(p);
    EXPECT_TRUE(r.equal(t)) << flow::dtype_name(t.dtype());
    std::remove(p.c_str());
  }
  const Tensor b = Tensor::from<float>({1}, {1.0f}).astype(DType::BFloat16);
  try {
    flow::data::write_npy(dir + "/dtypes_bf16.npy", b);
    ADD_FAILURE() << "write_npy took bfloat16";
  } catch (const flow::Error& e) {
    EXPECT_CONTAINS(std::string(e.what()), "bfloat16 has no .npy element type");
  }
}

}  // namespace
