// Elementwise math of imported models:
//   unary   erf, sin, cos, tan, asin, acos, atan, sinh, cosh, asinh, acosh,
//           atanh, floor, ceil, round (half to even), sign, abs, gelu;
//   binary  mod (Python's or C's remainder), bit_shift (numpy broadcasting).
// Gradients are built from other ops (the derivative of each is a line of
// math); floor, ceil, round and sign are piecewise constant (no gradient).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>

#include "jobflow/ops.h"
#include "kernel_util.h"
#include "nary.h"
#include "ops_internal.h"

namespace jobflow {
namespace {

using kern::check_rank;

enum class Fn { Erf, Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Floor, Ceil, Round, Sign, Abs };

constexpr OpKind fn_kind(Fn f) { return static_cast<OpKind>(static_cast<int>(OpKind::Erf) + static_cast<int>(f)); }
static_assert(fn_kind(Fn::Abs) == OpKind::Abs && fn_kind(Fn::Round) == OpKind::Round, "Fn follows OpKind's order");

bool any_dtype(Fn f) { return f == Fn::Sign || f == Fn::Abs; }

template <class T>
inline T apply(Fn f, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (f) {
      case Fn::Erf: return std::erf(v);
      case Fn::Sin: return std::sin(v);
      case Fn::Cos: return std::cos(v);
      case Fn::Tan: return std::tan(v);
      case Fn::Asin: return std::asin(v);
      case Fn::Acos: return std::acos(v);
      case Fn::Atan: return std::atan(v);
      case Fn::Sinh: return std::sinh(v);
      case Fn::Cosh: return std::cosh(v);
      case Fn::Asinh: return std::asinh(v);
      case Fn::Acosh: return std::acosh(v);
      case Fn::Atanh: return std::atanh(v);
      case Fn::Floor: return std::floor(v);
      case Fn::Ceil: return std::ceil(v);
      case Fn::Round: return std::nearbyint(v);  // the default rounding mode: half to even
      case Fn::Sign: return v > T(0) ? T(1) : v < T(0) ? T(-1) : v;  // keeps NaN and -0
      case Fn::Abs: return std::fabs(v);
    }
    return v;
  } else if constexpr (std::is_signed_v<T>) {
    if (f == Fn::Sign) return v > T(0) ? T(1) : v < T(0) ? T(-1) : T(0);
    return v < T(0) ? T(-v) : v;  // abs; the most negative value wraps, as numpy
  } else {
    if (f == Fn::Sign) return v > T(0) ? T(1) : T(0);
    return v;
  }
}

template <class T>
void unary_loop(Fn f, const T* x, T* y, int64_t n) {
#define JF_LOOP(F)                                          \
  case F:                                                   \
    _Pragma("omp parallel for if (n > kern::kParallelGrain)") \
    for (int64_t i = 0; i < n; ++i) y[i] = apply<T>(F, x[i]); \
    return;
  switch (f) {
    JF_LOOP(Fn::Erf) JF_LOOP(Fn::Sin) JF_LOOP(Fn::Cos) JF_LOOP(Fn::Tan) JF_LOOP(Fn::Asin) JF_LOOP(Fn::Acos)
    JF_LOOP(Fn::Atan) JF_LOOP(Fn::Sinh) JF_LOOP(Fn::Cosh) JF_LOOP(Fn::Asinh) JF_LOOP(Fn::Acosh) JF_LOOP(Fn::Atanh)
    JF_LOOP(Fn::Floor) JF_LOOP(Fn::Ceil) JF_LOOP(Fn::Round) JF_LOOP(Fn::Sign) JF_LOOP(Fn::Abs)
  }
#undef JF_LOOP
}

class MathUnary final : public Primitive {
 public:
  explicit MathUnary(Fn f) : f_(f) {}
  OpKind kind() const override { return fn_kind(f_); }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 1);
    if (any_dtype(f_)) expect_not_bool(name(), in[0], "x");
    else expect_float(name(), in[0], "x");
    return {in[0]};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      if constexpr (!std::is_same_v<T, bool>)
        unary_loop<T>(f_, static_cast<const T*>(in[0].raw()), static_cast<T*>(out[0].raw()), in[0].numel());
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>& outs, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    const Blob &g = cot[0], &x = in[0], &y = outs[0];
    auto one_minus_sq = [&] { return add_scalar(neg(square(x)), 1.0); };  // 1 - x^2
    switch (f_) {
      case Fn::Erf: return {mul(g, mul_scalar(exp(neg(square(x))), 2.0 / std::sqrt(M_PI)))};
      case Fn::Sin: return {mul(g, math::cos(x))};
      case Fn::Cos: return {neg(mul(g, math::sin(x)))};
      case Fn::Tan: return {mul(g, add_scalar(square(y), 1.0))};
      case Fn::Asin: return {mul(g, rsqrt(one_minus_sq()))};
      case Fn::Acos: return {neg(mul(g, rsqrt(one_minus_sq())))};
      case Fn::Atan: return {div(g, add_scalar(square(x), 1.0))};
      case Fn::Sinh: return {mul(g, math::cosh(x))};
      case Fn::Cosh: return {mul(g, math::sinh(x))};
      case Fn::Asinh: return {mul(g, rsqrt(add_scalar(square(x), 1.0)))};
      case Fn::Acosh: return {mul(g, rsqrt(add_scalar(square(x), -1.0)))};
      case Fn::Atanh: return {div(g, one_minus_sq())};
      case Fn::Abs: return {mul(g, math::sign(x))};
      default: return {Blob()};  // floor, ceil, round, sign: piecewise constant
    }
  }

 private:
  Fn f_;
};

// gelu(x) = x Phi(x) (approximate "none"), or with Phi(x) ~ (1 + tanh(sqrt(2/pi)
// (x + 0.044715 x^3))) / 2 ("tanh").
class Gelu final : public Primitive {
 public:
  explicit Gelu(bool tanh_approx) : tanh_(tanh_approx) {}
  OpKind kind() const override { return OpKind::Gelu; }
  Attrs attributes() const override { return {{"approximate", std::string(tanh_ ? "tanh" : "none")}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 1);
    expect_float(name(), in[0], "x");
    return {in[0]};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_float(in[0].dtype(), name(), [&](auto z) {
      using T = decltype(z);
      const T* x = static_cast<const T*>(in[0].raw());
      T* y = static_cast<T*>(out[0].raw());
      const int64_t n = in[0].numel();
      if (tanh_) {
        const T c = static_cast<T>(std::sqrt(2.0 / M_PI));
#pragma omp parallel for if (n > kern::kParallelGrain)
        for (int64_t i = 0; i < n; ++i) {
          const T v = x[i];
          y[i] = T(0.5) * v * (T(1) + std::tanh(c * (v + T(0.044715) * v * v * v)));
        }
      } else {
        const T r = static_cast<T>(M_SQRT1_2);
#pragma omp parallel for if (n > kern::kParallelGrain)
        for (int64_t i = 0; i < n; ++i) y[i] = T(0.5) * x[i] * (T(1) + std::erf(x[i] * r));
      }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    const Blob &g = cot[0], &x = in[0];
    if (!tanh_) {
      // Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi)
      Blob cdf = mul_scalar(add_scalar(math::erf(mul_scalar(x, M_SQRT1_2)), 1.0), 0.5);
      Blob pdf = mul_scalar(exp(mul_scalar(square(x), -0.5)), 1.0 / std::sqrt(2.0 * M_PI));
      return {mul(g, add(cdf, mul(x, pdf)))};
    }
    // t = tanh(u), u = c (x + a x^3): d/dx = (1 + t) / 2 + x (1 - t^2) c (1 + 3 a x^2) / 2
    const double c = std::sqrt(2.0 / M_PI), a = 0.044715;
    Blob x2 = square(x);
    Blob t = math::tanh(mul_scalar(add(x, mul_scalar(mul(x2, x), a)), c));
    Blob du = mul_scalar(add_scalar(mul_scalar(x2, 3 * a), 1.0), c);
    Blob d = add(mul_scalar(add_scalar(t, 1.0), 0.5), mul_scalar(mul(mul(x, add_scalar(neg(square(t)), 1.0)), du), 0.5));
    return {mul(g, d)};
  }

 private:
  bool tanh_;
};

// mod(a, b): a - floor(a / b) b (the divisor's sign, Python's %), or with
// fmod the C remainder a - trunc(a / b) b (the dividend's sign). Integer
// division by zero gives 0.
class Mod final : public Primitive {
 public:
  explicit Mod(bool fmod) : fmod_(fmod) {}
  OpKind kind() const override { return OpKind::Mod; }
  Attrs attributes() const override { return {{"fmod", int64_t{fmod_}}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 2);
    expect_same_dtype(name(), in[0], in[1]);
    expect_not_bool(name(), in[0], "operands");
    check_rank(name(), in[0].shape);
    check_rank(name(), in[1].shape);
    return {{layout::broadcast_shape(name(), in[0].shape, in[1].shape), in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      if constexpr (std::is_floating_point_v<T>) {
        if (fmod_) {
          kern::broadcast_map2<T, T>(in[0], in[1], out[0], [](T a, T b) { return std::fmod(a, b); });
        } else {
          kern::broadcast_map2<T, T>(in[0], in[1], out[0], [](T a, T b) {
            T r = std::fmod(a, b);
            if (r != T(0) && ((r < T(0)) != (b < T(0)))) r += b;
            return r;
          });
        }
      } else if constexpr (!std::is_same_v<T, bool>) {
        const bool c = fmod_;
        kern::broadcast_map2<T, T>(in[0], in[1], out[0], [c](T a, T b) -> T {
          if (b == T(0)) return T(0);
          if constexpr (std::is_signed_v<T>) {
            if (b == T(-1)) return T(0);  // INT_MIN % -1 would trap
          }
          T r = static_cast<T>(a % b);
          if constexpr (std::is_signed_v<T>)
            if (!c && r != T(0) && ((r < T(0)) != (b < T(0)))) r = static_cast<T>(r + b);
          return r;
        });
      }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>& outs, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    // a = q b + y with q = floor or trunc of a / b, constant almost
    // everywhere: dy/da = 1, dy/db = -q = -(a - y) / b.
    const Blob& g = cot[0];
    std::vector<Blob> r;
    for (int arg : argnums) {
      Blob full = arg == 0 ? g : neg(mul(g, div(sub(in[0], outs[0]), in[1])));
      if (arg == 0 && full.shape() != in[0].shape()) full = sum_to(full, in[0].shape());
      if (arg == 1 && full.shape() != in[1].shape()) full = sum_to(full, in[1].shape());
      r.push_back(full);
    }
    return r;
  }

 private:
  bool fmod_;
};

// mel_weight_matrix (ONNX MelWeightMatrix): triangular filters, peak 1, on
// the mel scale mel(f) = 2595 log10(1 + f / 700) between two edges, as a
// (dft_length / 2 + 1, num_mel_bins) matrix that maps a one-sided
// spectrogram's bins to mel bands. num_mel_bins + 2 points equally spaced
// in mel from the lower edge (the step is the range over num_mel_bins + 2),
// each turned into a bin floor((dft_length + 1) f / sample_rate); band i
// rises from point i to point i + 1 and falls to point i + 2. Its inputs
// are scalars whose values size the output: known at load (the usual
// model), it is an ordinary node; computed in the graph, the call is cut.
std::string hz_str(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

class MelWeightMatrix final : public Primitive {
 public:
  explicit MelWeightMatrix(DType out) : out_(out) {}
  OpKind kind() const override { return OpKind::MelWeightMatrix; }
  Attrs attributes() const override { return {{"dtype", std::string(dtype_name(out_))}}; }
  bool differentiable_input(int) const override { return false; }
  bool output_shape_from_data() const override { return true; }
  bool shape_reads_value(int i) const override { return i < 2; }  // num_mel_bins, dft_length
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("mel_weight_matrix", in, 5);
    const char* names[] = {"num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz"};
    for (int i = 0; i < 5; ++i) {
      const bool integer = in[i].dtype == DType::Int32 || in[i].dtype == DType::Int64;
      if ((i < 3 && !integer) || (i >= 3 && !is_floating(in[i].dtype)))
        op_error("mel_weight_matrix", std::string(names[i]) + " must be " + (i < 3 ? "an integer" : "a float") +
                                          ", got " + spec_str(in[i]));
      if (is_static(in[i].shape) && numel(in[i].shape) != 1)
        op_error("mel_weight_matrix", std::string(names[i]) + " must hold one value, got " + spec_str(in[i]));
    }
    return {{{kDynamic, kDynamic}, out_}};
  }
  std::vector<TensorSpec> infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const override {
    infer(in);
    const double b = v[0].at(0), d = v[1].at(0);  // (integers: exact in range, anything else refused)
    if (!(b >= 1 && b <= double(int64_t{1} << 20)))
      op_error("mel_weight_matrix", "num_mel_bins " + hz_str(b) + " is out of range 1 .. 2^20");
    if (!(d >= 1 && d <= double(int64_t{1} << 24)))
      op_error("mel_weight_matrix", "dft_length " + hz_str(d) + " is out of range 1 .. 2^24");
    const int64_t bins = static_cast<int64_t>(b), dft = static_cast<int64_t>(d);
    return {{{dft / 2 + 1, bins}, out_}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const int64_t bins = out[0].dim(1), spectrum = out[0].dim(0), dft = static_cast<int64_t>(in[1].at(0));
    const double rate = in[2].at(0), lo = in[3].at(0), hi = in[4].at(0);
    if (rate <= 0) op_error("mel_weight_matrix", "sample_rate must be positive, got " + hz_str(rate));
    if (!(lo >= 0 && lo <= hi && std::isfinite(hi)))
      op_error("mel_weight_matrix", "the edges must satisfy 0 <= lower (" + hz_str(lo) + ") <= upper (" +
                                        hz_str(hi) + ")");
    const double mlo = 2595 * std::log10(1 + lo / 700), mhi = 2595 * std::log10(1 + hi / 700);
    const double step = (mhi - mlo) / static_cast<double>(bins + 2);
    std::vector<int64_t> point(static_cast<size_t>(bins + 2));
    for (int64_t k = 0; k < bins + 2; ++k) {
      const double hz = 700 * (std::pow(10.0, (static_cast<double>(k) * step + mlo) / 2595) - 1);
      const double b = std::floor(static_cast<double>(dft + 1) * hz / rate);
      if (!(b >= 0 && b < static_cast<double>(spectrum)))
        op_error("mel_weight_matrix", "band edge " + std::to_string(k) + " (" + hz_str(hz) + " Hz) falls outside the " +
                                          std::to_string(spectrum) + " bins of a " + std::to_string(dft) +
                                          "-point DFT at " + hz_str(rate) + " Hz");
      point[static_cast<size_t>(k)] = static_cast<int64_t>(b);
    }
    Tensor w({spectrum, bins}, DType::Float64);
    double* p = w.data<double>();
    std::fill(p, p + w.numel(), 0.0);
    for (int64_t i = 0; i < bins; ++i) {
      const int64_t left = point[i], center = point[i + 1], right = point[i + 2];
      if (center == left) {
        p[center * bins + i] = 1;
      } else {
        for (int64_t j = left; j <= center; ++j)
          p[j * bins + i] = static_cast<double>(j - left) / static_cast<double>(center - left);
      }
      for (int64_t j = center; j < right; ++j)
        p[j * bins + i] = static_cast<double>(right - j) / static_cast<double>(right - center);
    }
    const Tensor c = w.astype(out_);
    std::memcpy(out[0].raw(), c.raw(), c.nbytes());
  }

 private:
  DType out_;
};

// bit_shift(a, b): a << b or a >> b of integers (a shift by the width or
// more gives 0, as for unsigned values in ONNX).
class BitShift final : public Primitive {
 public:
  explicit BitShift(bool left) : left_(left) {}
  OpKind kind() const override { return OpKind::BitShift; }
  Attrs attributes() const override { return {{"direction", std::string(left_ ? "LEFT" : "RIGHT")}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 2);
    expect_same_dtype(name(), in[0], in[1]);
    if (is_floating(in[0].dtype) || in[0].dtype == DType::Bool)
      op_error(name(), "operands must be integers, got " + spec_str(in[0]));
    check_rank(name(), in[0].shape);
    check_rank(name(), in[1].shape);
    return {{layout::broadcast_shape(name(), in[0].shape, in[1].shape), in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        using U = std::make_unsigned_t<T>;
        constexpr int bits = sizeof(T) * 8;
        const bool left = left_;
        kern::broadcast_map2<T, T>(in[0], in[1], out[0], [left](T a, T b) -> T {
          if (b < T(0) || static_cast<int64_t>(b) >= bits) return T(0);
          const U ua = static_cast<U>(a);
          return static_cast<T>(left ? static_cast<U>(ua << b) : static_cast<U>(ua >> b));
        });
      }
    });
  }
  bool differentiable_input(int) const override { return false; }

 private:
  bool left_;
};

Blob fn(Fn f, Blob x, const std::string& name) { return internal::add_node(std::make_shared<MathUnary>(f), {x}, name)[0]; }

}  // namespace

namespace math {
Blob mel_weight_matrix(Blob num_mel_bins, Blob dft_length, Blob sample_rate, Blob lower_edge_hertz,
                       Blob upper_edge_hertz, DType dtype, const std::string& name) {
  return internal::add_node(std::make_shared<MelWeightMatrix>(dtype),
                            {num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz}, name)[0];
}
Blob erf(Blob x, const std::string& name) { return fn(Fn::Erf, x, name); }
Blob sin(Blob x, const std::string& name) { return fn(Fn::Sin, x, name); }
Blob cos(Blob x, const std::string& name) { return fn(Fn::Cos, x, name); }
Blob tan(Blob x, const std::string& name) { return fn(Fn::Tan, x, name); }
Blob asin(Blob x, const std::string& name) { return fn(Fn::Asin, x, name); }
Blob acos(Blob x, const std::string& name) { return fn(Fn::Acos, x, name); }
Blob atan(Blob x, const std::string& name) { return fn(Fn::Atan, x, name); }
Blob sinh(Blob x, const std::string& name) { return fn(Fn::Sinh, x, name); }
Blob cosh(Blob x, const std::string& name) { return fn(Fn::Cosh, x, name); }
Blob asinh(Blob x, const std::string& name) { return fn(Fn::Asinh, x, name); }
Blob acosh(Blob x, const std::string& name) { return fn(Fn::Acosh, x, name); }
Blob atanh(Blob x, const std::string& name) { return fn(Fn::Atanh, x, name); }
Blob floor(Blob x, const std::string& name) { return fn(Fn::Floor, x, name); }
Blob ceil(Blob x, const std::string& name) { return fn(Fn::Ceil, x, name); }
Blob round(Blob x, const std::string& name) { return fn(Fn::Round, x, name); }
Blob sign(Blob x, const std::string& name) { return fn(Fn::Sign, x, name); }
Blob abs(Blob x, const std::string& name) { return fn(Fn::Abs, x, name); }
Blob mod(Blob a, Blob b, bool fmod, const std::string& name) {
  return internal::add_node(std::make_shared<Mod>(fmod), {a, b}, name)[0];
}
Blob bit_shift(Blob a, Blob b, bool left, const std::string& name) {
  return internal::add_node(std::make_shared<BitShift>(left), {a, b}, name)[0];
}
}  // namespace math

namespace nn {
Blob gelu(Blob x, const std::string& approximate, const std::string& name) {
  if (approximate != "none" && approximate != "tanh")
    throw Error("[gelu] approximate must be \"none\" or \"tanh\", got \"" + approximate + "\"");
  return internal::add_node(std::make_shared<Gelu>(approximate == "tanh"), {x}, name)[0];
}
}  // namespace nn

}  // namespace jobflow
