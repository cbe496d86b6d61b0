// Activations and elementwise math of imported (ONNX) models:
//   unary   leaky_relu, elu, selu, softplus, softsign, hard_sigmoid, clip;
//   binary  prelu, pow, minimum, maximum (numpy broadcasting).
//
// Gradients are fused kernels rather than chains of generic ops, so that a
// backward pass reads each tensor once:
//   * a unary op's gradient is one ActDeriv node computing g * f'(x) from the
//     forward input x (the derivative of every op here is cheap to re-derive
//     from x, and x is live anyway); ActDeriv's own gradient w.r.t. x is an
//     ActDeriv of order 2 (g * f''(x)), so second derivatives work too;
//   * a binary op's gradient w.r.t. one side is one BinaryDeriv node that
//     computes g * d f/d side in the broadcast (output) shape, followed by
//     sum_to() when that side was broadcast.
//
// Broadcast kernels run on a collapsed iteration space: size-1 output dims are
// dropped and neighbouring dims merged while both operands stay contiguous, so
// e.g. (N, C, H, W) x (1, C, 1, 1) becomes N*C rows of H*W and pays one index
// decomposition per row, never per element.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "jobflow/ops.h"
#include "cpu/broadcast.h"
#include "kernel_util.h"
#include "ops_internal.h"

namespace jobflow {
namespace {

using kern::broadcast_binary;
using kern::broadcast_ternary;
using kern::check_rank;
using kern::broadcast_shape;  // numpy broadcasting: cpu/broadcast.h

// ===========================================================================
// Unary activations

enum class Act { LeakyRelu, Elu, Selu, Softplus, Softsign, HardSigmoid, Clip };

// The kinds of an activation (order 0) and of its derivatives (1, 2): the
// OpKind enum lists each family in Act's order.
constexpr OpKind act_kind(Act k, int order) {
  const OpKind first = order == 0 ? OpKind::LeakyRelu : order == 1 ? OpKind::LeakyReluGrad : OpKind::LeakyReluGrad2;
  return static_cast<OpKind>(static_cast<int>(first) + static_cast<int>(k));
}
static_assert(act_kind(Act::Clip, 0) == OpKind::Clip && act_kind(Act::Clip, 1) == OpKind::ClipGrad &&
              act_kind(Act::Clip, 2) == OpKind::ClipGrad2 && act_kind(Act::Softplus, 1) == OpKind::SoftplusGrad);

// Piecewise linear: the second derivative is 0 almost everywhere.
bool piecewise_linear(Act k) { return k == Act::LeakyRelu || k == Act::HardSigmoid || k == Act::Clip; }

// The parameters of an activation: (alpha) of leaky_relu/elu, (alpha, gamma)
// of selu, (alpha, beta) of hard_sigmoid, (min, max) of clip.
struct ActParams {
  double p = 0.0, q = 0.0;
};

Attrs act_attrs(Act k, ActParams a) {
  switch (k) {
    case Act::LeakyRelu:
    case Act::Elu: return {{"alpha", a.p}};
    case Act::Selu: return {{"alpha", a.p}, {"gamma", a.q}};
    case Act::HardSigmoid: return {{"alpha", a.p}, {"beta", a.q}};
    case Act::Clip: return {{"min", a.p}, {"max", a.q}};
    default: return {};
  }
}

// f^(order)(x) for order 0 (the activation), 1 and 2, in T. The branch on the
// kind sits outside the loops that call this (see act_loop), so each
// instantiation is a straight-line elementwise body.
template <Act K, int Order, class T>
inline T act_eval(T x, T p, T q) {
  if constexpr (K == Act::LeakyRelu) {
    if constexpr (Order == 0) return x >= T(0) ? x : p * x;
    else if constexpr (Order == 1) return x > T(0) ? T(1) : p;
    else return T(0);
  } else if constexpr (K == Act::Elu || K == Act::Selu) {
    // selu = gamma * elu(alpha); elu has gamma = 1.
    const T gamma = K == Act::Selu ? q : T(1);
    if constexpr (Order == 0) return gamma * (x > T(0) ? x : p * std::expm1(x));
    else if constexpr (Order == 1) return gamma * (x > T(0) ? T(1) : p * std::exp(x));
    else return x > T(0) ? T(0) : gamma * p * std::exp(x);
  } else if constexpr (K == Act::Softplus) {
    // log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow for large |x|.
    if constexpr (Order == 0) return std::max(x, T(0)) + std::log1p(std::exp(-std::fabs(x)));
    const T s = T(1) / (T(1) + std::exp(-x));  // sigmoid(x) = softplus'(x)
    if constexpr (Order == 1) return s;
    else return s * (T(1) - s);
  } else if constexpr (K == Act::Softsign) {
    const T d = T(1) + std::fabs(x);
    if constexpr (Order == 0) return x / d;
    else if constexpr (Order == 1) return T(1) / (d * d);
    else return (x > T(0) ? T(-2) : x < T(0) ? T(2) : T(0)) / (d * d * d);
  } else if constexpr (K == Act::HardSigmoid) {
    const T v = p * x + q;
    if constexpr (Order == 0) return std::min(std::max(v, T(0)), T(1));
    else if constexpr (Order == 1) return v > T(0) && v < T(1) ? p : T(0);
    else return T(0);
  } else {  // Clip: p = min, q = max. std::max/min keep NaN (compare is false).
    if constexpr (Order == 0) return std::min(std::max(x, p), q);
    else if constexpr (Order == 1) return x >= p && x <= q ? T(1) : T(0);
    else return T(0);
  }
}

// y[i] = f(x[i]) (g == nullptr) or y[i] = g[i] * f^(Order)(x[i]).
template <Act K, int Order, class T>
void act_loop(const T* x, const T* g, T* y, int64_t n, T p, T q) {
  if (g == nullptr) {
#pragma omp parallel for if (n > kern::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) y[i] = act_eval<K, Order, T>(x[i], p, q);
  } else {
#pragma omp parallel for if (n > kern::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) y[i] = g[i] * act_eval<K, Order, T>(x[i], p, q);
  }
}

template <int Order, class T>
void act_dispatch(Act k, const T* x, const T* g, T* y, int64_t n, T p, T q) {
  switch (k) {
    case Act::LeakyRelu: act_loop<Act::LeakyRelu, Order>(x, g, y, n, p, q); return;
    case Act::Elu: act_loop<Act::Elu, Order>(x, g, y, n, p, q); return;
    case Act::Selu: act_loop<Act::Selu, Order>(x, g, y, n, p, q); return;
    case Act::Softplus: act_loop<Act::Softplus, Order>(x, g, y, n, p, q); return;
    case Act::Softsign: act_loop<Act::Softsign, Order>(x, g, y, n, p, q); return;
    case Act::HardSigmoid: act_loop<Act::HardSigmoid, Order>(x, g, y, n, p, q); return;
    case Act::Clip: act_loop<Act::Clip, Order>(x, g, y, n, p, q); return;
  }
}

// clip on integers: the bounds are rounded into the dtype's range first (an
// infinite bound means "no bound").
template <class T>
void clip_int(const T* x, T* y, int64_t n, double lo, double hi) {
  // Saturate in double before converting: casting an out-of-range double
  // (e.g. 2^63 for int64, 300 for int8) to T is undefined.
  constexpr T tlo = std::numeric_limits<T>::lowest(), thi = std::numeric_limits<T>::max();
  auto bound = [&](double v) {
    return v <= static_cast<double>(tlo) ? tlo : v >= static_cast<double>(thi) ? thi : static_cast<T>(v);
  };
  const T l = bound(std::ceil(lo)), h = bound(std::floor(hi));
#pragma omp parallel for if (n > kern::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) y[i] = std::min(std::max(x[i], l), h);
}

Blob act_deriv(Act k, ActParams a, int order, Blob g, Blob x);

// y = f(x), one input.
class Activation final : public Primitive {
 public:
  Activation(Act k, ActParams a) : k_(k), a_(a) {}
  OpKind kind() const override { return act_kind(k_, 0); }
  Attrs attributes() const override { return act_attrs(k_, a_); }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 1);
    if (k_ != Act::Clip) expect_float(name(), in[0], "x");  // clip also takes integers (ONNX Clip)
    expect_not_bool(name(), in[0], "x");
    return {in[0]};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const int64_t n = in[0].numel();
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      const T* x = static_cast<const T*>(in[0].raw());
      T* y = static_cast<T*>(out[0].raw());
      if constexpr (std::is_floating_point_v<T>)
        act_dispatch<0, T>(k_, x, nullptr, y, n, static_cast<T>(a_.p), static_cast<T>(a_.q));
      else if (k_ == Act::Clip)
        clip_int<T>(x, y, n, a_.p, a_.q);
      else
        op_error(name(), std::string("unsupported dtype ") + dtype_name(in[0].dtype()));
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    return {act_deriv(k_, a_, 1, cot[0], in[0])};
  }

 private:
  Act k_;
  ActParams a_;
};

// g * f^(order)(x) for order 1 or 2; inputs g, x (same spec).
class ActDeriv final : public Primitive {
 public:
  ActDeriv(Act k, ActParams a, int order) : k_(k), a_(a), order_(order) {}
  OpKind kind() const override { return act_kind(k_, order_); }
  Attrs attributes() const override {
    Attrs r = act_attrs(k_, a_);
    r.push_back({"order", int64_t{order_}});
    return r;
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 2);
    expect_float(name(), in[0], "dy");
    if (!specs_agree(in[0], in[1])) op_error(name(), "dy " + spec_str(in[0]) + " and x " + spec_str(in[1]) + " must match");
    return {{merge_shapes(in[0].shape, in[1].shape), in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_float(in[0].dtype(), name(), [&](auto z) {
      using T = decltype(z);
      const T* g = in[0].data<T>();
      const T* x = in[1].data<T>();
      T* y = out[0].data<T>();
      const T p = static_cast<T>(a_.p), q = static_cast<T>(a_.q);
      if (order_ == 1) act_dispatch<1, T>(k_, x, g, y, in[0].numel(), p, q);
      else act_dispatch<2, T>(k_, x, g, y, in[0].numel(), p, q);
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    std::vector<Blob> r;
    for (int arg : argnums) {
      if (arg == 0) {  // linear in g
        r.push_back(act_deriv(k_, a_, order_, cot[0], in[1]));
      } else if (piecewise_linear(k_)) {
        r.push_back(Blob());  // f^(order) is piecewise constant in x
      } else if (order_ == 1) {
        r.push_back(act_deriv(k_, a_, 2, mul(cot[0], in[0]), in[1]));
      } else {
        op_error(name(), "the third derivative is not implemented");
      }
    }
    return r;
  }

 private:
  Act k_;
  ActParams a_;
  int order_;
};

Blob act_deriv(Act k, ActParams a, int order, Blob g, Blob x) {
  if (!g.defined()) return Blob();
  return internal::add_node(std::make_shared<ActDeriv>(k, a, order), {g, x})[0];
}

Blob activation(Act k, ActParams a, Blob x, const std::string& name) {
  return internal::add_node(std::make_shared<Activation>(k, a), {x}, name)[0];
}

// ===========================================================================
// Binary ops with broadcasting

enum class Bin { PRelu, Pow, Minimum, Maximum };

// OpKind lists the binary ops in Bin's order, and their derivatives by
// (op, side).
constexpr OpKind bin_kind(Bin k) { return static_cast<OpKind>(static_cast<int>(OpKind::PRelu) + static_cast<int>(k)); }
constexpr OpKind bin_deriv_kind(Bin k, int side) {
  return static_cast<OpKind>(static_cast<int>(OpKind::PReluGradX) + 2 * static_cast<int>(k) + side);
}
static_assert(bin_kind(Bin::Maximum) == OpKind::Maximum && bin_deriv_kind(Bin::Pow, 1) == OpKind::PowGradExponent &&
              bin_deriv_kind(Bin::Maximum, 1) == OpKind::MaximumGradB);

// Weight of `a` in the gradient of min/max: 1 where a is selected, 0 where b
// is, 1/2 on ties (the gradient is split evenly between equal operands).
template <bool Max, class T>
inline T select_weight(T a, T b) {
  const bool win = Max ? a > b : a < b;
  return win ? T(1) : a == b ? T(0.5) : T(0);
}

Blob binary_deriv(Bin k, int side, Blob g, Blob a, Blob b);

// y = f(a, b); prelu's slope (b) must broadcast to x (a) without growing it.
class Binary final : public Primitive {
 public:
  explicit Binary(Bin k) : k_(k) {}
  OpKind kind() const override { return bin_kind(k_); }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 2);
    if (k_ == Bin::PRelu || k_ == Bin::Pow) expect_float(name(), in[0], k_ == Bin::PRelu ? "x" : "a");
    expect_same_dtype(name(), in[0], in[1]);
    expect_not_bool(name(), in[0], "operands");
    check_rank(name(), in[0].shape);
    check_rank(name(), in[1].shape);
    Shape out = broadcast_shape(name(), in[0].shape, in[1].shape);
    if (k_ == Bin::PRelu && !shapes_agree(out, in[0].shape))
      op_error(name(), "slope " + shape_str(in[1].shape) + " must broadcast to x " + shape_str(in[0].shape) +
                           " (it would make the output " + shape_str(out) + ")");
    return {{out, in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      switch (k_) {
        case Bin::Minimum:
          // A NaN in either operand is the result (numpy, PyTorch); b != b is
          // only true for NaN and folds away for integers.
          broadcast_binary<T>(in[0], in[1], out[0], [](T a, T b) { return b < a || b != b ? b : a; });
          return;
        case Bin::Maximum:
          broadcast_binary<T>(in[0], in[1], out[0], [](T a, T b) { return b > a || b != b ? b : a; });
          return;
        default: break;
      }
      if constexpr (std::is_floating_point_v<T>) {  // infer() keeps ints away from these
        if (k_ == Bin::Pow) broadcast_binary<T>(in[0], in[1], out[0], [](T a, T b) { return std::pow(a, b); });
        else broadcast_binary<T>(in[0], in[1], out[0], [](T x, T s) { return x < T(0) ? s * x : x; });
      }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    std::vector<Blob> r;
    for (int arg : argnums) r.push_back(sum_to(binary_deriv(k_, arg, cot[0], in[0], in[1]), in[arg].shape()));
    return r;
  }

 private:
  Bin k_;
};

// g * d f(a, b) / d side, in the broadcast shape; inputs g, a, b.
class BinaryDeriv final : public Primitive {
 public:
  BinaryDeriv(Bin k, int side) : k_(k), side_(side) {}
  OpKind kind() const override { return bin_deriv_kind(k_, side_); }
  Attrs attributes() const override { return {{"side", int64_t{side_}}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 3);
    expect_float(name(), in[0], "dy");
    expect_same_dtype(name(), in[0], in[1]);
    expect_same_dtype(name(), in[0], in[2]);
    const Shape out = broadcast_shape(name(), in[1].shape, in[2].shape);
    if (!shapes_agree(in[0].shape, out))
      op_error(name(), "dy " + spec_str(in[0]) + " must have the broadcast shape " + shape_str(out) + " of " +
                           shape_str(in[1].shape) + " and " + shape_str(in[2].shape));
    return {in[0]};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_float(in[0].dtype(), name(), [&](auto z) {
      using T = decltype(z);
      const Tensor &G = in[0], &A = in[1], &B = in[2], &O = out[0];
      const bool s0 = side_ == 0;
      switch (k_) {
        case Bin::PRelu:  // a = x, b = slope
          if (s0) broadcast_ternary<T>(G, A, B, O, [](T g, T x, T s) { return x < T(0) ? g * s : g; });
          else broadcast_ternary<T>(G, A, B, O, [](T g, T x, T) { return x < T(0) ? g * x : T(0); });
          return;
        case Bin::Pow:
          // As PyTorch: where the exponent is 0 the base gets no gradient
          // (b * a^(b-1) would be 0 * inf at a = 0), and where the base is 0
          // the exponent gets none (a^b log a -> 0 as a -> 0+).
          if (s0)
            broadcast_ternary<T>(G, A, B, O,
                                 [](T g, T a, T b) { return b == T(0) ? T(0) : g * b * std::pow(a, b - T(1)); });
          else
            broadcast_ternary<T>(G, A, B, O,
                                 [](T g, T a, T b) { return a == T(0) ? T(0) : g * std::pow(a, b) * std::log(a); });
          return;
        case Bin::Minimum:
          if (s0) broadcast_ternary<T>(G, A, B, O, [](T g, T a, T b) { return g * select_weight<false>(a, b); });
          else broadcast_ternary<T>(G, A, B, O, [](T g, T a, T b) { return g * select_weight<false>(b, a); });
          return;
        case Bin::Maximum:
          if (s0) broadcast_ternary<T>(G, A, B, O, [](T g, T a, T b) { return g * select_weight<true>(a, b); });
          else broadcast_ternary<T>(G, A, B, O, [](T g, T a, T b) { return g * select_weight<true>(b, a); });
          return;
      }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    std::vector<Blob> r;
    for (int arg : argnums) {
      if (arg == 0) {  // linear in g
        r.push_back(binary_deriv(k_, side_, cot[0], in[1], in[2]));
      } else if (k_ == Bin::Minimum || k_ == Bin::Maximum || (k_ == Bin::PRelu && arg == 1 + side_)) {
        // Piecewise constant in the operands: min/max weights; prelu's
        // d/dx in x and d/dslope in slope.
        r.push_back(Blob());
      } else {
        op_error(name(), "the second derivative with respect to input " + std::to_string(arg) + " is not implemented");
      }
    }
    return r;
  }

 private:
  Bin k_;
  int side_;
};

Blob binary_deriv(Bin k, int side, Blob g, Blob a, Blob b) {
  if (!g.defined()) return Blob();
  return internal::add_node(std::make_shared<BinaryDeriv>(k, side), {g, a, b})[0];
}

Blob binary(Bin k, Blob a, Blob b, const std::string& name) {
  return internal::add_node(std::make_shared<Binary>(k), {a, b}, name)[0];
}

}  // namespace

Blob clip(Blob x, std::optional<double> min, std::optional<double> max, const std::string& name) {
  const double inf = std::numeric_limits<double>::infinity();
  if (min && max && std::isnan(*min + *max)) throw Error("[clip] min and max must not be NaN");
  return activation(Act::Clip, {min.value_or(-inf), max.value_or(inf)}, x, name);
}
Blob pow(Blob a, Blob b, const std::string& name) { return binary(Bin::Pow, a, b, name); }
Blob minimum(Blob a, Blob b, const std::string& name) { return binary(Bin::Minimum, a, b, name); }
Blob maximum(Blob a, Blob b, const std::string& name) { return binary(Bin::Maximum, a, b, name); }

namespace nn {
Blob leaky_relu(Blob x, double alpha, const std::string& name) {
  return activation(Act::LeakyRelu, {alpha, 0.0}, x, name);
}
Blob elu(Blob x, double alpha, const std::string& name) { return activation(Act::Elu, {alpha, 0.0}, x, name); }
Blob selu(Blob x, double alpha, double gamma, const std::string& name) {
  return activation(Act::Selu, {alpha, gamma}, x, name);
}
Blob prelu(Blob x, Blob slope, const std::string& name) { return binary(Bin::PRelu, x, slope, name); }
Blob softplus(Blob x, const std::string& name) { return activation(Act::Softplus, {}, x, name); }
Blob softsign(Blob x, const std::string& name) { return activation(Act::Softsign, {}, x, name); }
Blob hard_sigmoid(Blob x, double alpha, double beta, const std::string& name) {
  return activation(Act::HardSigmoid, {alpha, beta}, x, name);
}
}  // namespace nn

}  // namespace jobflow
