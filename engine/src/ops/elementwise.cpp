// Elementwise ops: binary arithmetic with numpy broadcasting, unary math,
// activations (relu/sigmoid/tanh) with their fused gradient kernels, cast and
// add_n (the gradient accumulator of autodiff).
//
// Kernel layout. Binary ops pick the cheapest of three loops:
//   * same shape (or both operands already the output's size): one flat loop;
//   * one operand has a single element: flat loop against a register value;
//   * anything else: the iteration space is collapsed first (size-1 output
//     dims dropped, neighbouring dims merged where both operands stay
//     contiguous), so (B, N) + (N,) becomes B rows of a contiguous N-vector
//     loop and a general broadcast only pays one index decomposition per
//     row, never per element.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "jobflow/ops.h"
#include "cpu/broadcast.h"
#include "kernel_util.h"
#include "ops_internal.h"

namespace jobflow {
namespace internal {
// (a == b) as 1/0 of the operands' dtype, with broadcasting; no gradient.
// Used by reduce_max's gradient (reduce.cpp declares it too).
Blob equal_mask(Blob a, Blob b);
}  // namespace internal

namespace {

// numpy broadcasting and its kernels: cpu/broadcast.h.
using kern::broadcast_binary;
using kern::check_rank;

template <class T, class F>
void unary_kernel(const Tensor& X, const Tensor& Y, F f) {
  const int64_t n = Y.numel();
  const T* x = static_cast<const T*>(X.raw());
  T* y = static_cast<T*>(Y.raw());
#pragma omp parallel for if (n > kern::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

// ---------------------------------------------------------------------------
enum class BinOp { Add, Sub, Mul, Div, EqMask };

class Binary final : public Primitive {
 public:
  explicit Binary(BinOp op) : op_(op) {}
  OpKind kind() const override {
    switch (op_) {
      case BinOp::Add: return OpKind::Add;
      case BinOp::Sub: return OpKind::Sub;
      case BinOp::Mul: return OpKind::Mul;
      case BinOp::Div: return OpKind::Div;
      case BinOp::EqMask: return OpKind::EqualMask;
    }
    return OpKind::Add;
  }

  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 2);
    expect_same_dtype(name(), in[0], in[1]);
    expect_not_bool(name(), in[0], "operands");
    check_rank(name(), in[0].shape);
    check_rank(name(), in[1].shape);
    return {{kern::broadcast_shape(name(), in[0].shape, in[1].shape), in[0].dtype}};
  }

  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      switch (op_) {
        case BinOp::Add: broadcast_binary<T>(in[0], in[1], out[0], [](T a, T b) { return T(a + b); }); break;
        case BinOp::Sub: broadcast_binary<T>(in[0], in[1], out[0], [](T a, T b) { return T(a - b); }); break;
        case BinOp::Mul:
          broadcast_binary<T>(in[0], in[1], out[0], [](T a, T b) { return T(kern::MulType<T>(a) * b); });
          break;
        case BinOp::Div:
          if constexpr (std::is_floating_point_v<T>)
            broadcast_binary<T>(in[0], in[1], out[0], [](T a, T b) { return a / b; });
          else  // integer division by zero would trap: define it as 0
            broadcast_binary<T>(in[0], in[1], out[0], [](T a, T b) { return b == 0 ? T(0) : T(a / b); });
          break;
        case BinOp::EqMask:
          broadcast_binary<T>(in[0], in[1], out[0], [](T a, T b) { return a == b ? T(1) : T(0); });
          break;
      }
    });
  }

  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>& outs, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    const Blob& g = cot[0];
    const Blob &a = in[0], &b = in[1];
    std::vector<Blob> r;
    if (op_ == BinOp::EqMask) return std::vector<Blob>(argnums.size());  // piecewise constant
    // Div: both gradients use g / b.
    Blob q;
    if (op_ == BinOp::Div) q = div(g, b);
    for (int arg : argnums) {
      const Shape& target = arg == 0 ? a.shape() : b.shape();
      Blob full;  // gradient in the broadcast (output) shape
      switch (op_) {
        case BinOp::Add: full = g; break;
        case BinOp::Sub: full = arg == 0 ? g : neg(g); break;
        case BinOp::Mul: full = mul(g, arg == 0 ? b : a); break;
        case BinOp::Div: full = arg == 0 ? q : neg(mul(q, outs[0])); break;  // d(a/b)/db = -(a/b)/b
        case BinOp::EqMask: break;
      }
      r.push_back(sum_to(full, target));
    }
    return r;
  }

 private:
  BinOp op_;
};

// ---------------------------------------------------------------------------
enum class UnOp { Neg, Exp, Log, Sqrt, Rsqrt, Square, Sigmoid, Tanh, Relu, AddScalar, MulScalar };

bool float_only(UnOp op) {
  return op == UnOp::Exp || op == UnOp::Log || op == UnOp::Sqrt || op == UnOp::Rsqrt || op == UnOp::Sigmoid ||
         op == UnOp::Tanh;
}

// Activation gradients from the activation's output y (fused, one pass):
//   relu_grad(dy, y)    = dy * (y > 0)
//   sigmoid_grad(dy, y) = dy * y * (1 - y)
//   tanh_grad(dy, y)    = dy * (1 - y^2)
class ActGrad final : public Primitive {
 public:
  explicit ActGrad(UnOp act) : act_(act) {}
  OpKind kind() const override {
    return act_ == UnOp::Relu ? OpKind::ReluGrad : act_ == UnOp::Sigmoid ? OpKind::SigmoidGrad : OpKind::TanhGrad;
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 2);
    expect_float(name(), in[0], "dy");
    if (!specs_agree(in[0], in[1])) op_error(name(), "dy " + spec_str(in[0]) + " and y " + spec_str(in[1]) + " must match");
    return {{merge_shapes(in[0].shape, in[1].shape), in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_float(in[0].dtype(), name(), [&](auto z) {
      using T = decltype(z);
      switch (act_) {
        case UnOp::Relu:
          broadcast_binary<T>(in[0], in[1], out[0], [](T g, T y) { return y > T(0) ? g : T(0); });
          break;
        case UnOp::Sigmoid:
          broadcast_binary<T>(in[0], in[1], out[0], [](T g, T y) { return g * y * (T(1) - y); });
          break;
        default:
          broadcast_binary<T>(in[0], in[1], out[0], [](T g, T y) { return g * (T(1) - y * y); });
          break;
      }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    const Blob &g = cot[0], &dy = in[0], &y = in[1];
    std::vector<Blob> r;
    for (int arg : argnums) {
      if (arg == 0) {  // linear in dy
        r.push_back(internal::add_node(std::make_shared<ActGrad>(act_), {g, y})[0]);
      } else if (act_ == UnOp::Relu) {
        r.push_back(Blob());  // piecewise constant in y
      } else if (act_ == UnOp::Sigmoid) {
        r.push_back(mul(mul(g, dy), add_scalar(mul_scalar(y, -2.0), 1.0)));  // d/dy y(1-y) = 1 - 2y
      } else {
        r.push_back(mul(mul(g, dy), mul_scalar(y, -2.0)));  // d/dy (1-y^2) = -2y
      }
    }
    return r;
  }

 private:
  UnOp act_;
};

class Unary final : public Primitive {
 public:
  explicit Unary(UnOp op, double s = 0.0) : op_(op), s_(s) {}
  OpKind kind() const override {
    switch (op_) {
      case UnOp::Neg: return OpKind::Neg;
      case UnOp::Exp: return OpKind::Exp;
      case UnOp::Log: return OpKind::Log;
      case UnOp::Sqrt: return OpKind::Sqrt;
      case UnOp::Rsqrt: return OpKind::Rsqrt;
      case UnOp::Square: return OpKind::Square;
      case UnOp::Sigmoid: return OpKind::Sigmoid;
      case UnOp::Tanh: return OpKind::Tanh;
      case UnOp::Relu: return OpKind::Relu;
      case UnOp::AddScalar: return OpKind::AddScalar;
      case UnOp::MulScalar: return OpKind::MulScalar;
    }
    return OpKind::Neg;
  }
  Attrs attributes() const override {
    if (op_ == UnOp::AddScalar || op_ == UnOp::MulScalar) return {{"scalar", s_}};
    return {};
  }

  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 1);
    if (float_only(op_)) expect_float(name(), in[0], "x");
    expect_not_bool(name(), in[0], "x");
    return {in[0]};
  }

  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      const Tensor &x = in[0], &y = out[0];
      switch (op_) {
        case UnOp::Neg: unary_kernel<T>(x, y, [](T v) { return T(-v); }); return;
        case UnOp::Square: unary_kernel<T>(x, y, [](T v) { return T(kern::MulType<T>(v) * v); }); return;
        // max(v, 0) keeps NaN (v < 0 is false), like PyTorch.
        case UnOp::Relu: unary_kernel<T>(x, y, [](T v) { return v < T(0) ? T(0) : v; }); return;
        case UnOp::AddScalar:
          if constexpr (std::is_floating_point_v<T>) {
            const T s = static_cast<T>(s_);
            unary_kernel<T>(x, y, [s](T v) { return v + s; });
          } else if (integral_scalar()) {  // exact, wrapping as integer arithmetic does
            const auto s = static_cast<uint64_t>(static_cast<int64_t>(s_));
            unary_kernel<T>(x, y, [s](T v) { return static_cast<T>(static_cast<uint64_t>(v) + s); });
          } else {
            const double s = s_;
            unary_kernel<T>(x, y, [s](T v) { return static_cast<T>(static_cast<double>(v) + s); });
          }
          return;
        case UnOp::MulScalar:
          if constexpr (std::is_floating_point_v<T>) {
            const T s = static_cast<T>(s_);
            unary_kernel<T>(x, y, [s](T v) { return v * s; });
          } else if (integral_scalar()) {
            const auto s = static_cast<uint64_t>(static_cast<int64_t>(s_));
            unary_kernel<T>(x, y, [s](T v) { return static_cast<T>(static_cast<uint64_t>(v) * s); });
          } else {
            const double s = s_;
            unary_kernel<T>(x, y, [s](T v) { return static_cast<T>(static_cast<double>(v) * s); });
          }
          return;
        default: break;
      }
      if constexpr (std::is_floating_point_v<T>) {  // infer() keeps ints away from these
        switch (op_) {
          case UnOp::Exp: unary_kernel<T>(x, y, [](T v) { return std::exp(v); }); return;
          case UnOp::Log: unary_kernel<T>(x, y, [](T v) { return std::log(v); }); return;
          case UnOp::Sqrt: unary_kernel<T>(x, y, [](T v) { return std::sqrt(v); }); return;
          case UnOp::Rsqrt: unary_kernel<T>(x, y, [](T v) { return T(1) / std::sqrt(v); }); return;
          // exp(-v) overflows to inf for very negative v, giving exactly 0.
          case UnOp::Sigmoid: unary_kernel<T>(x, y, [](T v) { return T(1) / (T(1) + std::exp(-v)); }); return;
          case UnOp::Tanh: unary_kernel<T>(x, y, [](T v) { return std::tanh(v); }); return;
          default: break;
        }
      }
      op_error(name(), std::string("unsupported dtype ") + dtype_name(x.dtype()));
    });
  }

  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>& outs, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    const Blob &g = cot[0], &x = in[0], &y = outs[0];
    switch (op_) {
      case UnOp::Neg: return {neg(g)};
      case UnOp::Exp: return {mul(g, y)};
      case UnOp::Log: return {div(g, x)};
      case UnOp::Sqrt: return {mul_scalar(div(g, y), 0.5)};                       // 1 / (2 sqrt x)
      case UnOp::Rsqrt: return {mul_scalar(mul(g, mul(y, square(y))), -0.5)};    // -x^(-3/2) / 2
      case UnOp::Square: return {mul(g, mul_scalar(x, 2.0))};
      case UnOp::Sigmoid: return {internal::add_node(std::make_shared<ActGrad>(UnOp::Sigmoid), {g, y})[0]};
      case UnOp::Tanh: return {internal::add_node(std::make_shared<ActGrad>(UnOp::Tanh), {g, y})[0]};
      case UnOp::Relu: return {internal::relu_grad(g, y)};
      case UnOp::AddScalar: return {g};
      case UnOp::MulScalar: return {mul_scalar(g, s_)};
    }
    return {Blob()};
  }

 private:
  UnOp op_;
  double s_;
  // The scalar is a whole number an int64 holds: integer tensors then add
  // or multiply in integers (exact above 2^53, where a double would round
  // the tensor's values), wrapping as integer arithmetic does.
  bool integral_scalar() const { return std::trunc(s_) == s_ && s_ >= -0x1p63 && s_ < 0x1p63; }
};

// ---------------------------------------------------------------------------
// Converts between any two dtypes (the 16-bit floats included), by
// kern::convert's rules (Tensor::astype follows the same).
class Cast final : public Primitive {
 public:
  explicit Cast(DType to) : to_(to) {}
  OpKind kind() const override { return OpKind::Cast; }
  Attrs attributes() const override { return {{"dtype", std::string(dtype_name(to_))}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("cast", in, 1);
    return {{in[0].shape, to_}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const int64_t n = in[0].numel();
    if (in[0].dtype() == to_) {
      std::memcpy(out[0].raw(), in[0].raw(), in[0].nbytes());
      return;
    }
    kern::dispatch_storage(in[0].dtype(), [&](auto zi) {
      using I = decltype(zi);
      kern::dispatch_storage(to_, [&](auto zo) {
        using O = decltype(zo);
        const I* x = static_cast<const I*>(in[0].raw());
        O* y = static_cast<O*>(out[0].raw());
#pragma omp parallel for if (n > kern::kParallelGrain)
        for (int64_t i = 0; i < n; ++i) y[i] = kern::convert<O>(x[i]);
      });
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    // Only float -> float carries a gradient (back in the input's dtype).
    if (!is_floating(to_) || !is_floating(in[0].dtype())) return {Blob()};
    return {cast(cot[0], in[0].dtype())};
  }

 private:
  DType to_;
};

// ---------------------------------------------------------------------------
// Sum of N same-spec inputs in one pass over memory: the output is produced
// block by block, each block summing every input while it is in cache.
class AddN final : public Primitive {
 public:
  OpKind kind() const override { return OpKind::AddN; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    if (in.empty()) op_error("add_n", "needs at least one input");
    expect_not_bool("add_n", in[0], "inputs");
    for (size_t i = 1; i < in.size(); ++i)
      if (!specs_agree(in[i], in[0]))
        op_error("add_n", "input " + std::to_string(i) + " is " + spec_str(in[i]) + " but input 0 is " +
                              spec_str(in[0]) + "; all inputs must have the same shape and dtype");
    return {in[0]};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      constexpr int64_t kBlock = 2048;
      const int64_t n = out[0].numel();
      const int64_t blocks = (n + kBlock - 1) / kBlock;
      const size_t k = in.size();
      T* y = static_cast<T*>(out[0].raw());
#pragma omp parallel for if (n > kern::kParallelGrain)
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t b0 = blk * kBlock, len = std::min(kBlock, n - b0);
        T* o = y + b0;
        const T* p0 = static_cast<const T*>(in[0].raw()) + b0;
        if (k == 1) {
          std::memcpy(o, p0, sizeof(T) * len);
          continue;
        }
        const T* p1 = static_cast<const T*>(in[1].raw()) + b0;
        for (int64_t i = 0; i < len; ++i) o[i] = T(p0[i] + p1[i]);
        for (size_t j = 2; j < k; ++j) {
          const T* pj = static_cast<const T*>(in[j].raw()) + b0;
          for (int64_t i = 0; i < len; ++i) o[i] = T(o[i] + pj[i]);
        }
      }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size(), cot[0]);
  }
};

Blob unary(UnOp op, Blob x, const std::string& name = "", double s = 0.0) {
  return internal::add_node(std::make_shared<Unary>(op, s), {x}, name)[0];
}
Blob binary(BinOp op, Blob a, Blob b) { return internal::add_node(std::make_shared<Binary>(op), {a, b})[0]; }

}  // namespace

Blob add(Blob a, Blob b) { return binary(BinOp::Add, a, b); }
Blob sub(Blob a, Blob b) { return binary(BinOp::Sub, a, b); }
Blob mul(Blob a, Blob b) { return binary(BinOp::Mul, a, b); }
Blob div(Blob a, Blob b) { return binary(BinOp::Div, a, b); }
Blob add_scalar(Blob a, double s) { return unary(UnOp::AddScalar, a, "", s); }
Blob mul_scalar(Blob a, double s) { return unary(UnOp::MulScalar, a, "", s); }
Blob neg(Blob a) { return unary(UnOp::Neg, a); }
Blob exp(Blob a) { return unary(UnOp::Exp, a); }
Blob log(Blob a) { return unary(UnOp::Log, a); }
Blob sqrt(Blob a) { return unary(UnOp::Sqrt, a); }
Blob rsqrt(Blob a) { return unary(UnOp::Rsqrt, a); }
Blob square(Blob a) { return unary(UnOp::Square, a); }

Blob cast(Blob x, DType dtype, const std::string& name) {
  return internal::add_node(std::make_shared<Cast>(dtype), {x}, name)[0];
}

namespace math {
Blob sigmoid(Blob x) { return unary(UnOp::Sigmoid, x); }
Blob tanh(Blob x) { return unary(UnOp::Tanh, x); }
}  // namespace math

namespace nn {
Blob ReluFn::operator()(Blob x, const std::string& name) const { return unary(UnOp::Relu, x, name); }
Blob SigmoidFn::operator()(Blob x, const std::string& name) const { return unary(UnOp::Sigmoid, x, name); }
Blob TanhFn::operator()(Blob x, const std::string& name) const { return unary(UnOp::Tanh, x, name); }
}  // namespace nn

namespace internal {
Blob relu_grad(Blob dy, Blob y) { return add_node(std::make_shared<ActGrad>(UnOp::Relu), {dy, y})[0]; }
Blob add_n(const std::vector<Blob>& xs) {
  if (xs.empty()) throw Error("[add_n] needs at least one input");
  if (xs.size() == 1) return xs[0];
  return add_node(std::make_shared<AddN>(), xs)[0];
}
Blob equal_mask(Blob a, Blob b) { return binary(BinOp::EqMask, a, b); }
}  // namespace internal

}  // namespace jobflow
