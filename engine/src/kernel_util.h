// Internal helpers for CPU kernels (not installed).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "jobflow/primitive.h"
#include "jobflow/tensor.h"
#include "layout.h"

namespace jobflow::kern {

// Calls f(T{}) with T the C++ type of a floating dtype; throws otherwise.
template <class F>
void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32: f(float{}); return;
    case DType::Float64: f(double{}); return;
    default: op_error(op, std::string("unsupported dtype ") + dtype_name(t));
  }
}
// Any dtype the ops compute on, bool included (T = bool): data movement and
// comparisons run on it; arithmetic ops refuse bool in infer()
// (expect_not_bool). float16 and bfloat16 never get here: Graph::add
// refuses them to every op but cast (tensor.h).
template <class F>
void dispatch_all(DType t, F&& f) {
  switch (t) {
    case DType::Float32: f(float{}); return;
    case DType::Float64: f(double{}); return;
    case DType::Int32: f(int32_t{}); return;
    case DType::Int64: f(int64_t{}); return;
    case DType::Int8: f(int8_t{}); return;
    case DType::UInt8: f(uint8_t{}); return;
    case DType::Bool: f(bool{}); return;
    case DType::Int16: f(int16_t{}); return;
    case DType::UInt16: f(uint16_t{}); return;
    case DType::UInt32: f(uint32_t{}); return;
    case DType::UInt64: f(uint64_t{}); return;
    case DType::Float16:
    case DType::BFloat16: break;
  }
  throw Error(std::string("[kernel] internal: a ") + dtype_name(t) + " tensor reached a kernel that computes on it");
}

// Every dtype, the 16-bit floats included (T = float16 / bfloat16): for
// code that only stores or converts (cast, Tensor::astype).
template <class F>
void dispatch_storage(DType t, F&& f) {
  if (t == DType::Float16) f(float16{});
  else if (t == DType::BFloat16) f(bfloat16{});
  else dispatch_all(t, f);
}

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

// A 64-bit integer as a double rounded to odd: exact up to 2^53; above, the
// 53 leading bits with the last one set when any bit below was, so that
// rounding that double once more to a narrower float (bfloat16, float16)
// rounds as if from the integer itself (no double rounding at ties).
template <class I>
double round_to_odd_double(I x) {
  const bool neg = std::is_signed_v<I> && x < 0;
  uint64_t u = neg ? uint64_t{0} - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  const int bits = 64 - __builtin_clzll(u | 1);
  if (bits <= 53) return neg ? -static_cast<double>(u) : static_cast<double>(u);
  const int shift = bits - 53;
  const bool lost = (u & ((uint64_t{1} << shift) - 1)) != 0;
  u = (u >> shift) | (lost ? 1 : 0);
  const double d = std::ldexp(static_cast<double>(u), shift);
  return neg ? -d : d;
}

// One element as O, by cast's rules (numpy's astype): nonzero (NaN
// included) is true; float -> integer rounds toward zero, and narrow or
// unsigned targets go through int64 so that out-of-range (negative) values
// wrap instead of being undefined; the 16-bit floats are read as float
// (exact) and written rounding once from the source's value.
template <class O, class I>
O convert(I x) {
  if constexpr (is_half_v<I>) {
    return convert<O>(static_cast<float>(x));
  } else if constexpr (is_half_v<O>) {
    if constexpr (std::is_integral_v<I> && sizeof(I) == 8) return O(round_to_odd_double(x));
    return O(static_cast<double>(x));
  } else if constexpr (std::is_same_v<O, bool>) {
    return x != I(0);
  } else if constexpr (std::is_floating_point_v<I> && std::is_integral_v<O> &&
                       (sizeof(O) < 8 || std::is_unsigned_v<O>)) {
    return static_cast<O>(static_cast<int64_t>(x));
  } else {
    return static_cast<O>(x);
  }
}

// The type T's products are computed in: integers narrower than int are
// promoted to int by C++, and uint16 * uint16 overflows int (undefined);
// unsigned ones multiply as unsigned (wrapping, then narrowed to T).
template <class T>
using MulType = std::conditional_t<std::is_integral_v<T> && std::is_unsigned_v<T> && (sizeof(T) < sizeof(unsigned)),
                                   unsigned, T>;

// Element counts above which loops are split across threads (OpenMP).
inline constexpr int64_t kParallelGrain = 1 << 15;

// Kernels index shapes with fixed arrays of this many dims, so eval_cpu never
// allocates; infer() rejects higher ranks with check_rank.
using layout::kMaxRank;
inline void check_rank(const char* op, const Shape& s) {
  if (s.size() > static_cast<size_t>(kMaxRank))
    op_error(op, "rank " + std::to_string(s.size()) + " of " + shape_str(s) + " exceeds the supported maximum of " +
                     std::to_string(kMaxRank));
}

// Normalizes a possibly negative axis; throws naming the op (layout.h).
using layout::norm_axis;

// SplitMix64's output function: a bijective 64-bit mixer. Hashing a counter
// with it is a counter-based generator, so element i's random bits depend
// only on (key, i): reproducible and free to compute in parallel (dropout's
// masks, ops/nn.cpp; the random draws, ops/random.cpp).
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
inline constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;  // 2^64 / phi: SplitMix64's step

}  // namespace jobflow::kern
