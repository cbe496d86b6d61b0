// Neural-network ops: softmax / log_softmax, the fused sparse softmax
// cross-entropy, inverted dropout, and batch normalization (functional, and
// the layer with its moving statistics).
//
// Each forward op keeps what its backward needs as extra outputs (softmax
// probabilities, the dropout mask, the batch statistics) so that the backward
// is one cheap pass, and each backward is a dedicated primitive instead of a
// chain of elementwise ops: that is the difference between one and five
// passes over the activations.
//
// Tensors are viewed as (outer, C, inner) around the reduced / per-channel
// axis: a "lane" is the C elements of one (outer, inner) position, `inner`
// apart in memory.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "jobflow/job.h"
#include "jobflow/ops.h"
#include "kernel_util.h"
#include "ops_internal.h"

namespace jobflow {
namespace {

using layout::Lanes;  // (outer, C, inner) around an axis
using layout::lanes_of;

// Runs f(base) for every lane start (element offset; lane stride = inner),
// splitting lanes across threads when the tensor is big. For inner == 1 the
// lanes are the contiguous rows and f sees a stride of 1 it can vectorize.
template <class F>
void for_each_lane(const Lanes& l, F&& f) {
  const int64_t n_lanes = l.outer * l.inner;
  const bool par = n_lanes > 1 && l.outer * l.C * l.inner > kern::kParallelGrain;
  if (l.inner == 1) {
#pragma omp parallel for if (par)
    for (int64_t o = 0; o < l.outer; ++o) f(o * l.C, int64_t{1});
  } else {
#pragma omp parallel for collapse(2) if (par)
    for (int64_t o = 0; o < l.outer; ++o)
      for (int64_t j = 0; j < l.inner; ++j) f(o * l.C * l.inner + j, l.inner);
  }
}

// ---------------------------------------------------------------------------
// softmax / log_softmax

template <class T, bool Log>
inline void softmax_lane(const T* x, T* y, int64_t C, int64_t st) {
  // Subtracting the lane maximum keeps exp() from overflowing.
  T m = x[0];
  for (int64_t c = 1; c < C; ++c) m = std::max(m, x[c * st]);
  T s = 0;
  if constexpr (Log) {
    for (int64_t c = 0; c < C; ++c) s += std::exp(x[c * st] - m);
    // (x - m) - log(s), not x - (m + log(s)): the latter loses the small
    // log(s) against a large m.
    const T ls = std::log(s);
    for (int64_t c = 0; c < C; ++c) y[c * st] = (x[c * st] - m) - ls;
  } else {
    for (int64_t c = 0; c < C; ++c) {
      const T e = std::exp(x[c * st] - m);
      y[c * st] = e;
      s += e;
    }
    const T inv = T(1) / s;
    for (int64_t c = 0; c < C; ++c) y[c * st] *= inv;
  }
}

// softmax:     dx = y * (dy - sum(dy * y))
// log_softmax: dx = dy - exp(y) * sum(dy)
template <class T, bool Log>
inline void softmax_grad_lane(const T* y, const T* dy, T* dx, int64_t C, int64_t st) {
  T s = 0;
  if constexpr (Log) {
    for (int64_t c = 0; c < C; ++c) s += dy[c * st];
    for (int64_t c = 0; c < C; ++c) dx[c * st] = dy[c * st] - std::exp(y[c * st]) * s;
  } else {
    for (int64_t c = 0; c < C; ++c) s += dy[c * st] * y[c * st];
    for (int64_t c = 0; c < C; ++c) dx[c * st] = y[c * st] * (dy[c * st] - s);
  }
}

Blob softmax_grad(Blob y, Blob dy, int axis, bool log);

class Softmax final : public Primitive {
 public:
  Softmax(int axis, bool log) : axis_(axis), log_(log) {}
  OpKind kind() const override { return log_ ? OpKind::LogSoftmax : OpKind::Softmax; }
  Attrs attributes() const override { return {{"axis", int64_t{axis_}}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 1);
    expect_float(name(), in[0], "logits");
    if (in[0].shape.empty()) op_error(name(), "logits must have rank >= 1, got " + spec_str(in[0]));
    kern::norm_axis(name(), axis_, static_cast<int>(in[0].shape.size()));
    return {in[0]};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_float(in[0].dtype(), name(), [&](auto z) {
      using T = decltype(z);
      const Lanes l = lanes_of(in[0].shape(), kern::norm_axis(name(), axis_, in[0].ndim()));
      const T* x = in[0].data<T>();
      T* y = out[0].data<T>();
      if (l.C == 0) return;
      for_each_lane(l, [&](int64_t b, int64_t st) {
        if (log_) softmax_lane<T, true>(x + b, y + b, l.C, st);
        else softmax_lane<T, false>(x + b, y + b, l.C, st);
      });
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>& outs, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    Blob g = cot[0].defined() ? softmax_grad(outs[0], cot[0], axis_, log_) : Blob();
    return std::vector<Blob>(argnums.size(), g);
  }

 private:
  int axis_;
  bool log_;
};

// Inputs y (the forward output), dy.
class SoftmaxGrad final : public Primitive {
 public:
  SoftmaxGrad(int axis, bool log) : axis_(axis), log_(log) {}
  OpKind kind() const override { return log_ ? OpKind::LogSoftmaxGrad : OpKind::SoftmaxGrad; }
  Attrs attributes() const override { return {{"axis", int64_t{axis_}}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 2);
    if (!specs_agree(in[0], in[1])) op_error(name(), "y and dy differ: " + spec_str(in[0]) + " vs " + spec_str(in[1]));
    kern::norm_axis(name(), axis_, static_cast<int>(in[0].shape.size()));
    return {in[0]};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_float(in[0].dtype(), name(), [&](auto z) {
      using T = decltype(z);
      const Lanes l = lanes_of(in[0].shape(), kern::norm_axis(name(), axis_, in[0].ndim()));
      const T* y = in[0].data<T>();
      const T* dy = in[1].data<T>();
      T* dx = out[0].data<T>();
      if (l.C == 0) return;
      for_each_lane(l, [&](int64_t b, int64_t st) {
        if (log_) softmax_grad_lane<T, true>(y + b, dy + b, dx + b, l.C, st);
        else softmax_grad_lane<T, false>(y + b, dy + b, dx + b, l.C, st);
      });
    });
  }

 private:
  int axis_;
  bool log_;
};

Blob softmax_grad(Blob y, Blob dy, int axis, bool log) {
  return internal::add_node(std::make_shared<SoftmaxGrad>(axis, log), {y, dy})[0];
}

// ---------------------------------------------------------------------------
// sparse softmax cross-entropy: inputs labels (B,) int, logits (B, C);
// outputs loss (B,) and the probabilities (B, C) for the backward.

constexpr const char* kXent = "sparse_softmax_cross_entropy";

template <class L>
void check_labels(const L* lab, int64_t B, int64_t C) {
  for (int64_t b = 0; b < B; ++b)
    if (lab[b] < 0 || lab[b] >= C)
      op_error(kXent, "label " + std::to_string(static_cast<int64_t>(lab[b])) + " of row " + std::to_string(b) +
                          " is out of range [0, " + std::to_string(C) + ")");
}

// Calls f(labels pointer) with the labels' integer type.
template <class F>
void with_labels(const Tensor& t, F&& f) {
  if (t.dtype() == DType::Int32) f(t.data<int32_t>());
  else f(t.data<int64_t>());
}

class SparseXent final : public Primitive {
 public:
  OpKind kind() const override { return OpKind::SparseSoftmaxCrossEntropy; }
  bool differentiable_input(int i) const override { return i == 1; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(kXent, in, 2);
    const TensorSpec &lab = in[0], &lg = in[1];
    if (lab.dtype != DType::Int32 && lab.dtype != DType::Int64)
      op_error(kXent, "labels must be int32 or int64, got " + spec_str(lab));
    expect_float(kXent, lg, "logits");
    if (lg.shape.size() != 2 || lab.shape.size() != 1 || !dims_agree(lab.shape[0], lg.shape[0]))
      op_error(kXent, "needs labels (B,) and logits (B, C), got labels " + spec_str(lab) + " and logits " +
                          spec_str(lg));
    if (lg.shape[1] <= 0) op_error(kXent, "logits " + spec_str(lg) + " have no classes");
    const int64_t B = lg.shape[0] >= 0 ? lg.shape[0] : lab.shape[0];
    return {{{B}, lg.dtype}, {{B, lg.shape[1]}, lg.dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const int64_t B = in[1].dim(0), C = in[1].dim(1);
    // Checked before any work, on one thread, so the error is deterministic
    // (the first bad row) and never thrown from inside a parallel region.
    with_labels(in[0], [&](const auto* lab) { check_labels(lab, B, C); });
    kern::dispatch_float(in[1].dtype(), kXent, [&](auto z) {
      using T = decltype(z);
      const T* x = in[1].data<T>();
      T* loss = out[0].data<T>();
      T* p = out[1].data<T>();
      with_labels(in[0], [&](const auto* lab) {
#pragma omp parallel for if (B * C > kern::kParallelGrain)
        for (int64_t b = 0; b < B; ++b) {
          const T* xr = x + b * C;
          T* pr = p + b * C;
          T m = xr[0];
          for (int64_t c = 1; c < C; ++c) m = std::max(m, xr[c]);
          T s = 0;
          for (int64_t c = 0; c < C; ++c) {
            const T e = std::exp(xr[c] - m);
            pr[c] = e;
            s += e;
          }
          const T inv = T(1) / s;
          for (int64_t c = 0; c < C; ++c) pr[c] *= inv;
          // -log softmax[label] = log(sum exp(x - m)) - (x[label] - m)
          loss[b] = std::log(s) - (xr[lab[b]] - m);
        }
      });
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>& outs, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override;
};

// Inputs prob (B, C), labels (B,), dloss (B,): dlogits = (prob - onehot) * dloss.
class SparseXentGrad final : public Primitive {
 public:
  OpKind kind() const override { return OpKind::SparseSoftmaxCrossEntropyGrad; }
  bool differentiable_input(int i) const override { return i != 1; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 3);
    if (in[0].shape.size() != 2 || !shapes_agree(in[1].shape, Shape{in[0].shape[0]}) ||
        !shapes_agree(in[2].shape, Shape{in[0].shape[0]}) ||
        in[2].dtype != in[0].dtype)
      op_error(name(), "needs prob (B, C), labels (B,), dloss (B,); got " + spec_str(in[0]) + ", " +
                           spec_str(in[1]) + ", " + spec_str(in[2]));
    return {in[0]};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const int64_t B = in[0].dim(0), C = in[0].dim(1);
    kern::dispatch_float(in[0].dtype(), name(), [&](auto z) {
      using T = decltype(z);
      const T* p = in[0].data<T>();
      const T* dl = in[2].data<T>();
      T* dx = out[0].data<T>();
      with_labels(in[1], [&](const auto* lab) {
#pragma omp parallel for if (B * C > kern::kParallelGrain)
        for (int64_t b = 0; b < B; ++b) {
          const T d = dl[b];
          for (int64_t c = 0; c < C; ++c) dx[b * C + c] = p[b * C + c] * d;
          dx[b * C + lab[b]] -= d;  // labels were range-checked by the forward
        }
      });
    });
  }
};

std::vector<Blob> SparseXent::vjp(const std::vector<Blob>& in, const std::vector<Blob>& outs,
                                  const std::vector<Blob>& cot, const std::vector<int>& argnums) const {
  Blob g;
  if (cot[0].defined()) g = internal::add_node(std::make_shared<SparseXentGrad>(), {outs[1], in[0], cot[0]})[0];
  // The probabilities are an internal output, but stay correct if read.
  if (cot.size() > 1 && cot[1].defined()) {
    Blob gp = softmax_grad(outs[1], cot[1], 1, false);
    g = g.defined() ? add(g, gp) : gp;
  }
  std::vector<Blob> r;
  for (int a : argnums) r.push_back(a == 1 ? g : Blob());
  return r;
}

// ---------------------------------------------------------------------------
// dropout

using kern::kGolden;
using kern::mix64;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ULL;
  return h;
}

// Inputs x; outputs y = x * mask / (1 - rate) and mask (uint8, 1 = kept).
class Dropout final : public Primitive {
 public:
  Dropout(double rate, uint64_t salt) : rate_(rate), salt_(salt) {}
  OpKind kind() const override { return OpKind::Dropout; }
  bool draws_random() const override { return true; }
  Attrs attributes() const override { return {{"rate", rate_}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("dropout", in, 1);
    expect_float("dropout", in[0], "x");
    return {in[0], {in[0].shape, DType::UInt8}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext& ctx) const override {
    // One key per (job seed, step, node); each 64-bit draw serves two
    // elements, kept when its 32-bit half is below (1 - rate) * 2^32.
    const uint64_t key = mix64(mix64(mix64(ctx.seed + kGolden) ^ salt_) + static_cast<uint64_t>(ctx.step) * kGolden);
    const uint64_t thr = static_cast<uint64_t>(std::ldexp(1.0 - rate_, 32));
    kern::dispatch_float(in[0].dtype(), "dropout", [&](auto z) {
      using T = decltype(z);
      const T* x = in[0].data<T>();
      T* y = out[0].data<T>();
      uint8_t* m = out[1].data<uint8_t>();
      const T scale = static_cast<T>(1.0 / (1.0 - rate_));
      const int64_t n = in[0].numel(), pairs = n / 2;
#pragma omp parallel for if (n > kern::kParallelGrain)
      for (int64_t j = 0; j < pairs; ++j) {
        const uint64_t r = mix64(key + static_cast<uint64_t>(j + 1) * kGolden);
        const bool k0 = (r & 0xFFFFFFFFULL) < thr, k1 = (r >> 32) < thr;
        m[2 * j] = k0;
        m[2 * j + 1] = k1;
        y[2 * j] = k0 ? x[2 * j] * scale : T(0);
        y[2 * j + 1] = k1 ? x[2 * j + 1] * scale : T(0);
      }
      if (n % 2) {
        const bool k = (mix64(key + static_cast<uint64_t>(pairs + 1) * kGolden) & 0xFFFFFFFFULL) < thr;
        m[n - 1] = k;
        y[n - 1] = k ? x[n - 1] * scale : T(0);
      }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>& outs, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override;

 private:
  double rate_;
  uint64_t salt_;
};

// Inputs dy, mask: dx = dy * mask / (1 - rate). Linear in dy.
class DropoutGrad final : public Primitive {
 public:
  explicit DropoutGrad(double rate) : rate_(rate) {}
  OpKind kind() const override { return OpKind::DropoutGrad; }
  Attrs attributes() const override { return {{"rate", rate_}}; }
  bool differentiable_input(int i) const override { return i == 0; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("dropout_grad", in, 2);
    expect_float("dropout_grad", in[0], "dy");
    if (!shapes_agree(in[1].shape, in[0].shape) || in[1].dtype != DType::UInt8)
      op_error("dropout_grad", "mask must be " + spec_str({in[0].shape, DType::UInt8}) + ", got " + spec_str(in[1]));
    return {in[0]};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_float(in[0].dtype(), "dropout_grad", [&](auto z) {
      using T = decltype(z);
      const T* dy = in[0].data<T>();
      const uint8_t* m = in[1].data<uint8_t>();
      T* dx = out[0].data<T>();
      const T scale = static_cast<T>(1.0 / (1.0 - rate_));
      const int64_t n = in[0].numel();
#pragma omp parallel for if (n > kern::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) dx[i] = m[i] ? dy[i] * scale : T(0);
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    Blob g = cot[0].defined() ? internal::add_node(std::make_shared<DropoutGrad>(rate_), {cot[0], in[1]})[0] : Blob();
    return std::vector<Blob>(argnums.size(), g);
  }

 private:
  double rate_;
};

std::vector<Blob> Dropout::vjp(const std::vector<Blob>&, const std::vector<Blob>& outs, const std::vector<Blob>& cot,
                               const std::vector<int>& argnums) const {
  Blob g = cot[0].defined() ? internal::add_node(std::make_shared<DropoutGrad>(rate_), {cot[0], outs[1]})[0] : Blob();
  return std::vector<Blob>(argnums.size(), g);
}

// ---------------------------------------------------------------------------
// batch normalization

void check_stat(const char* op, const TensorSpec& x, const TensorSpec& s, int64_t C, const char* what) {
  if (!shapes_agree(s.shape, Shape{C}) || s.dtype != x.dtype)
    op_error(op, std::string(what) + " must be " + spec_str({{C}, x.dtype}) + " for x " + spec_str(x) + ", got " +
                     spec_str(s));
}

// Functional: inputs x, mean, variance [, offset] [, scale]; each statistic
// (C,) along `axis`. y = (x - mean) * rsqrt(variance + eps) * scale + offset.
class BatchNorm final : public Primitive {
 public:
  BatchNorm(int axis, double eps, bool offset, bool scale) : axis_(axis), eps_(eps), offset_(offset), scale_(scale) {}
  OpKind kind() const override { return OpKind::BatchNormalization; }
  // Inputs: x, mean, variance, then offset when `offset`, then scale when `scale`.
  Attrs attributes() const override {
    return {{"axis", int64_t{axis_}}, {"epsilon", eps_}, {"offset", int64_t{offset_}}, {"scale", int64_t{scale_}}};
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 3 + offset_ + scale_);
    expect_float(name(), in[0], "x");
    const int ax = kern::norm_axis(name(), axis_, static_cast<int>(in[0].shape.size()));
    const int64_t C = in[0].shape.empty() ? 1 : in[0].shape[ax];
    const char* names[] = {"mean", "variance", offset_ ? "offset" : "scale", "scale"};
    for (size_t i = 1; i < in.size(); ++i) check_stat(name(), in[0], in[i], C, names[i - 1]);
    return {in[0]};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_float(in[0].dtype(), name(), [&](auto z) {
      using T = decltype(z);
      const Lanes l = lanes_of(in[0].shape(), kern::norm_axis(name(), axis_, in[0].ndim()));
      const T* x = in[0].data<T>();
      const T* mean = in[1].data<T>();
      const T* var = in[2].data<T>();
      const T* off = offset_ ? in[3].data<T>() : nullptr;
      const T* sc = scale_ ? in[3 + offset_].data<T>() : nullptr;
      T* y = out[0].data<T>();
      const T eps = static_cast<T>(eps_);
      // Folded into y = x * a + b per channel.
#pragma omp parallel for collapse(2) if (l.outer * l.C * l.inner > kern::kParallelGrain)
      for (int64_t o = 0; o < l.outer; ++o)
        for (int64_t c = 0; c < l.C; ++c) {
          const T a = (sc ? sc[c] : T(1)) / std::sqrt(var[c] + eps);
          const T b = (off ? off[c] : T(0)) - mean[c] * a;
          const int64_t base = (o * l.C + c) * l.inner;
          for (int64_t i = 0; i < l.inner; ++i) y[base + i] = x[base + i] * a + b;
        }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>& outs, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override;

 private:
  int axis_;
  double eps_;
  bool offset_, scale_;
};

// Inputs dy, x, mean, variance [, scale]; outputs dx, dmean, dvariance,
// doffset, dscale, all from the two per-channel sums S1 = sum(dy) and
// S2 = sum(dy * (x - mean)):
//   dx = dy * a (a = scale * inv_std)     doffset = S1      dscale = S2 * inv_std
//   dmean = -a * S1                       dvariance = -0.5 * scale * inv_std^3 * S2
class BatchNormGrad final : public Primitive {
 public:
  BatchNormGrad(int axis, double eps, bool scale) : axis_(axis), eps_(eps), scale_(scale) {}
  OpKind kind() const override { return OpKind::BatchNormalizationGrad; }
  Attrs attributes() const override {
    return {{"axis", int64_t{axis_}}, {"epsilon", eps_}, {"scale", int64_t{scale_}}};
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 4 + scale_);
    if (!specs_agree(in[0], in[1])) op_error(name(), "dy and x differ: " + spec_str(in[0]) + " vs " + spec_str(in[1]));
    const int ax = kern::norm_axis(name(), axis_, static_cast<int>(in[1].shape.size()));
    const int64_t C = in[1].shape.empty() ? 1 : in[1].shape[ax];
    for (size_t i = 2; i < in.size(); ++i) check_stat(name(), in[1], in[i], C, "statistic");
    const TensorSpec c{{C}, in[1].dtype};
    return {in[1], c, c, c, c};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_float(in[1].dtype(), name(), [&](auto z) {
      using T = decltype(z);
      const Lanes l = lanes_of(in[1].shape(), kern::norm_axis(name(), axis_, in[1].ndim()));
      const T* dy = in[0].data<T>();
      const T* x = in[1].data<T>();
      const T* mean = in[2].data<T>();
      const T* var = in[3].data<T>();
      const T* sc = scale_ ? in[4].data<T>() : nullptr;
      T* dx = out[0].data<T>();
      T *dmean = out[1].data<T>(), *dvar = out[2].data<T>(), *doff = out[3].data<T>(), *dsc = out[4].data<T>();
#pragma omp parallel for if (l.outer * l.C * l.inner > kern::kParallelGrain)
      for (int64_t c = 0; c < l.C; ++c) {
        const double inv = 1.0 / std::sqrt(static_cast<double>(var[c]) + eps_);
        const double s = sc ? static_cast<double>(sc[c]) : 1.0;
        const T a = static_cast<T>(s * inv), mu = mean[c];
        double s1 = 0, s2 = 0;
        for (int64_t o = 0; o < l.outer; ++o) {
          const int64_t base = (o * l.C + c) * l.inner;
          for (int64_t i = 0; i < l.inner; ++i) {
            const T d = dy[base + i];
            s1 += d;
            s2 += d * (x[base + i] - mu);
            dx[base + i] = d * a;
          }
        }
        doff[c] = static_cast<T>(s1);
        dsc[c] = static_cast<T>(s2 * inv);
        dmean[c] = static_cast<T>(-s * inv * s1);
        dvar[c] = static_cast<T>(-0.5 * s * inv * inv * inv * s2);
      }
    });
  }

 private:
  int axis_;
  double eps_;
  bool scale_;
};

std::vector<Blob> BatchNorm::vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                                 const std::vector<int>& argnums) const {
  if (!cot[0].defined()) return std::vector<Blob>(argnums.size());
  std::vector<Blob> gin{cot[0], in[0], in[1], in[2]};
  if (scale_) gin.push_back(in[3 + offset_]);
  auto g = internal::add_node(std::make_shared<BatchNormGrad>(axis_, eps_, scale_), gin);
  // Input index -> output of the grad node: x, mean, variance, then the
  // optional offset and scale.
  std::vector<Blob> r;
  for (int a : argnums) {
    if (a < 3) r.push_back(g[a]);
    else if (offset_ && a == 3) r.push_back(g[3]);
    else r.push_back(g[4]);
  }
  return r;
}

// Training: inputs x, moving_mean, moving_variance [, gamma] [, beta];
// outputs y, the batch mean and the batch inv_std (C,). Normalizes with the
// batch statistics and updates the moving ones in place:
//   moving = momentum * moving + (1 - momentum) * batch,
// with the unbiased (M / (M - 1)) batch variance, as cuDNN and OneFlow do.
class BatchNormTrain final : public Primitive {
 public:
  BatchNormTrain(int axis, double eps, double momentum, bool gamma, bool beta)
      : axis_(axis), eps_(eps), momentum_(momentum), gamma_(gamma), beta_(beta) {}
  OpKind kind() const override { return OpKind::BatchNormTrain; }
  // Inputs: x, moving_mean, moving_variance, then gamma when `gamma`, then beta when `beta`.
  Attrs attributes() const override {
    return {{"axis", int64_t{axis_}}, {"epsilon", eps_}, {"momentum", momentum_}, {"gamma", int64_t{gamma_}},
            {"beta", int64_t{beta_}}};
  }
  bool has_side_effects() const override { return true; }
  bool differentiable_input(int i) const override { return i != 1 && i != 2; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 3 + gamma_ + beta_);
    expect_float(name(), in[0], "x");
    const int ax = kern::norm_axis(name(), axis_, static_cast<int>(in[0].shape.size()));
    const int64_t C = in[0].shape.empty() ? 1 : in[0].shape[ax];
    const char* names[] = {"moving_mean", "moving_variance", gamma_ ? "gamma" : "beta", "beta"};
    for (size_t i = 1; i < in.size(); ++i) check_stat(name(), in[0], in[i], C, names[i - 1]);
    const TensorSpec c{{C}, in[0].dtype};
    return {in[0], c, c};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_float(in[0].dtype(), name(), [&](auto z) {
      using T = decltype(z);
      const Lanes l = lanes_of(in[0].shape(), kern::norm_axis(name(), axis_, in[0].ndim()));
      const T* x = in[0].data<T>();
      T* mm = in[1].data<T>();  // updated in place: the variables' own buffers
      T* mv = in[2].data<T>();
      const T* gamma = gamma_ ? in[3].data<T>() : nullptr;
      const T* beta = beta_ ? in[3 + gamma_].data<T>() : nullptr;
      T* y = out[0].data<T>();
      T* smean = out[1].data<T>();
      T* sinv = out[2].data<T>();
      const int64_t M = l.outer * l.inner;
      const double mom = momentum_;
      const double bessel = M > 1 ? static_cast<double>(M) / (M - 1) : 1.0;
#pragma omp parallel for if (l.outer * l.C * l.inner > kern::kParallelGrain)
      for (int64_t c = 0; c < l.C; ++c) {
        // One pass for sum and sum of squares, accumulated in double so the
        // E[x^2] - E[x]^2 difference keeps its precision.
        double s = 0, ss = 0;
        for (int64_t o = 0; o < l.outer; ++o) {
          const T* p = x + (o * l.C + c) * l.inner;
          for (int64_t i = 0; i < l.inner; ++i) {
            const double v = p[i];
            s += v;
            ss += v * v;
          }
        }
        const double mean = M ? s / M : 0.0;
        const double var = M ? std::max(ss / M - mean * mean, 0.0) : 0.0;
        const double inv = 1.0 / std::sqrt(var + eps_);
        const T a = static_cast<T>(inv * (gamma ? gamma[c] : 1.0));
        const T b = static_cast<T>((beta ? beta[c] : 0.0) - mean * inv * (gamma ? gamma[c] : 1.0));
        for (int64_t o = 0; o < l.outer; ++o) {
          const int64_t base = (o * l.C + c) * l.inner;
          for (int64_t i = 0; i < l.inner; ++i) y[base + i] = x[base + i] * a + b;
        }
        smean[c] = static_cast<T>(mean);
        sinv[c] = static_cast<T>(inv);
        mm[c] = static_cast<T>(mom * mm[c] + (1 - mom) * mean);
        mv[c] = static_cast<T>(mom * mv[c] + (1 - mom) * var * bessel);
      }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>& outs, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override;

 private:
  int axis_;
  double eps_, momentum_;
  bool gamma_, beta_;
};

// Inputs dy, x, batch mean, batch inv_std [, gamma]; outputs dx, dgamma,
// dbeta. With xhat = (x - mean) * inv_std, S1 = sum(dy), S2 = sum(dy * xhat)
// over the M elements of a channel:
//   dx = gamma * inv_std * (dy - S1 / M - xhat * S2 / M), dgamma = S2, dbeta = S1.
class BatchNormTrainGrad final : public Primitive {
 public:
  BatchNormTrainGrad(int axis, bool gamma) : axis_(axis), gamma_(gamma) {}
  OpKind kind() const override { return OpKind::BatchNormTrainGrad; }
  Attrs attributes() const override { return {{"axis", int64_t{axis_}}, {"gamma", int64_t{gamma_}}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 4 + gamma_);
    if (!specs_agree(in[0], in[1])) op_error(name(), "dy and x differ: " + spec_str(in[0]) + " vs " + spec_str(in[1]));
    const int ax = kern::norm_axis(name(), axis_, static_cast<int>(in[1].shape.size()));
    const int64_t C = in[1].shape.empty() ? 1 : in[1].shape[ax];
    for (size_t i = 2; i < in.size(); ++i) check_stat(name(), in[1], in[i], C, "statistic");
    const TensorSpec c{{C}, in[1].dtype};
    return {in[1], c, c};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_float(in[1].dtype(), name(), [&](auto z) {
      using T = decltype(z);
      const Lanes l = lanes_of(in[1].shape(), kern::norm_axis(name(), axis_, in[1].ndim()));
      const T* dy = in[0].data<T>();
      const T* x = in[1].data<T>();
      const T* mean = in[2].data<T>();
      const T* invs = in[3].data<T>();
      const T* gamma = gamma_ ? in[4].data<T>() : nullptr;
      T* dx = out[0].data<T>();
      T* dgamma = out[1].data<T>();
      T* dbeta = out[2].data<T>();
      const int64_t M = l.outer * l.inner;
#pragma omp parallel for if (l.outer * l.C * l.inner > kern::kParallelGrain)
      for (int64_t c = 0; c < l.C; ++c) {
        const T mu = mean[c], inv = invs[c];
        double s1 = 0, s2 = 0;
        for (int64_t o = 0; o < l.outer; ++o) {
          const int64_t base = (o * l.C + c) * l.inner;
          for (int64_t i = 0; i < l.inner; ++i) {
            const T d = dy[base + i];
            s1 += d;
            s2 += d * ((x[base + i] - mu) * inv);
          }
        }
        dbeta[c] = static_cast<T>(s1);
        dgamma[c] = static_cast<T>(s2);
        if (M == 0) continue;
        const T k = static_cast<T>((gamma ? gamma[c] : 1.0) * inv);
        const T m1 = static_cast<T>(s1 / M), m2 = static_cast<T>(s2 / M);
        for (int64_t o = 0; o < l.outer; ++o) {
          const int64_t base = (o * l.C + c) * l.inner;
          for (int64_t i = 0; i < l.inner; ++i) {
            const T xhat = (x[base + i] - mu) * inv;
            dx[base + i] = k * (dy[base + i] - m1 - xhat * m2);
          }
        }
      }
    });
  }

 private:
  int axis_;
  bool gamma_;
};

std::vector<Blob> BatchNormTrain::vjp(const std::vector<Blob>& in, const std::vector<Blob>& outs,
                                      const std::vector<Blob>& cot, const std::vector<int>& argnums) const {
  // Only y carries a cotangent; the saved statistics are internal outputs.
  if (!cot[0].defined()) return std::vector<Blob>(argnums.size());
  std::vector<Blob> gin{cot[0], in[0], outs[1], outs[2]};
  if (gamma_) gin.push_back(in[3]);
  auto g = internal::add_node(std::make_shared<BatchNormTrainGrad>(axis_, gamma_), gin);
  std::vector<Blob> r;
  for (int a : argnums) {
    if (a == 0) r.push_back(g[0]);
    else if (gamma_ && a == 3) r.push_back(g[1]);
    else if (beta_ && a == 3 + gamma_) r.push_back(g[2]);
    else r.emplace_back();  // moving statistics: not differentiable
  }
  return r;
}

}  // namespace

// ---------------------------------------------------------------------------
// builders

namespace nn {

Blob softmax(Blob logits, int axis, const std::string& name) {
  return internal::add_node(std::make_shared<Softmax>(axis, false), {logits}, name)[0];
}

Blob log_softmax(Blob logits, int axis, const std::string& name) {
  return internal::add_node(std::make_shared<Softmax>(axis, true), {logits}, name)[0];
}

Blob sparse_softmax_cross_entropy_with_logits(Blob labels, Blob logits, const std::string& name) {
  return internal::add_node(std::make_shared<SparseXent>(), {labels, logits}, name)[0];
}

namespace {
Blob scalar_const(double v, DType dt) { return constant(Tensor::scalar<double>(v).astype(dt)); }
}  // namespace

Blob nll_loss(Blob input, Blob target, Blob weight, std::optional<int64_t> ignore_index, const std::string& reduction,
              const std::string& name) {
  const char* op = "nll_loss";
  require_graph(op);
  if (!input.defined() || !target.defined()) op_error(op, "input and target must be defined blobs");
  const TensorSpec in = input.spec(), tg = target.spec();
  expect_float(op, in, "input");
  if (tg.dtype != DType::Int32 && tg.dtype != DType::Int64)
    op_error(op, "target must be int32 or int64, got " + spec_str(tg));
  if (in.shape.size() < 2) op_error(op, "input must be (N, C, d1, ...), got " + spec_str(in));
  Shape want = in.shape;
  want.erase(want.begin() + 1);
  if (!shapes_agree(tg.shape, want))
    op_error(op, "target must have shape " + shape_str(want) + " for input " + shape_str(in.shape) + ", got " +
                     spec_str(tg));
  const int64_t C = in.shape[1];
  if (C < 0) op_error(op, "the class dim of input " + shape_str(in.shape) + " must be known");
  if (weight.defined() && !specs_agree(weight.spec(), {{C}, in.dtype}))
    op_error(op, "weight must be " + spec_str({{C}, in.dtype}) + ", got " + spec_str(weight.spec()));
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    op_error(op, "reduction must be \"none\", \"sum\" or \"mean\", got \"" + reduction + "\"");
  const DType it = tg.dtype, ft = in.dtype;
  // The index each target picks: an ignored target picks class 0 (its loss
  // is zeroed below); a negative one is moved below -C, so that
  // gather_elements rejects it rather than counting from the end.
  Blob t = target;
  Blob ignored;
  if (ignore_index) {
    ignored = equal(target, scalar_const(static_cast<double>(*ignore_index), it));
    t = where(ignored, scalar_const(0, it), t);
  }
  t = where(less(t, scalar_const(0, it)), sub(t, scalar_const(static_cast<double>(C), it)), t);
  Blob picked = squeeze(gather_elements(input, unsqueeze(t, {1}), 1), {1});
  Blob w;  // the weight of each target (undefined: all ones)
  if (weight.defined()) w = gather(weight, t, 0);
  if (ignored.defined()) w = where(ignored, scalar_const(0, ft), w.defined() ? w : scalar_const(1, ft));
  Blob loss = neg(picked);
  if (w.defined()) loss = mul(loss, w);
  Blob r;
  if (reduction == "none") r = loss;
  else if (reduction == "sum") r = reduce_sum(loss);
  else if (!w.defined()) r = reduce_mean(loss);
  else r = div(reduce_sum(loss), reduce_sum(w));
  return name.empty() ? r : identity(r, name);
}

SoftmaxCrossEntropyResult softmax_cross_entropy_loss(Blob scores, Blob labels, Blob weight,
                                                     std::optional<int64_t> ignore_index, const std::string& reduction,
                                                     const std::string& name) {
  require_graph("softmax_cross_entropy_loss");
  if (!scores.defined()) op_error("softmax_cross_entropy_loss", "scores must be a defined blob");
  if (scores.ndim() < 2)
    op_error("softmax_cross_entropy_loss", "scores must be (N, C, d1, ...), got " + spec_str(scores.spec()));
  Blob lp = log_softmax(scores, 1);
  return {nll_loss(lp, labels, weight, ignore_index, reduction, name), lp};
}

Blob dropout(Blob x, double rate, const std::string& name) {
  Graph& g = require_graph("dropout");
  if (!(rate >= 0.0 && rate < 1.0)) op_error("dropout", "rate must be in [0, 1), got " + std::to_string(rate));
  if (!x.defined()) op_error("dropout", "x is an undefined blob");
  expect_float("dropout", x.spec(), "x");
  // Predict jobs (and rate 0) leave x untouched: no node at all.
  if (!defining_train_job() || rate == 0.0) return x;
  // The salt comes from the node's name, so two jobs defining the same net
  // draw the same masks for the same seed and step, and two dropout layers
  // of one net draw different ones.
  const std::string n = name.empty() ? g.unique_name("dropout") : name;
  return internal::add_node(std::make_shared<Dropout>(rate, fnv1a(n)), {x}, n)[0];
}

Blob batch_normalization(Blob x, Blob mean, Blob variance, Blob offset, Blob scale, double epsilon, int axis,
                         const std::string& name) {
  if (!(epsilon >= 0.0)) op_error("batch_normalization", "epsilon must be >= 0, got " + std::to_string(epsilon));
  std::vector<Blob> in{x, mean, variance};
  if (offset.defined()) in.push_back(offset);
  if (scale.defined()) in.push_back(scale);
  return internal::add_node(std::make_shared<BatchNorm>(axis, epsilon, offset.defined(), scale.defined()), in,
                            name)[0];
}

}  // namespace nn

namespace layers {

Blob batch_normalization(Blob x, const BatchNormOptions& o) {
  const char* op = "layers.batch_normalization";
  Graph& g = require_graph(op);
  if (!x.defined()) op_error(op, "x is an undefined blob");
  expect_float(op, x.spec(), "x");
  if (x.ndim() < 1) op_error(op, "x must have rank >= 1, got " + spec_str(x.spec()));
  const int ax = kern::norm_axis(op, o.axis, x.ndim());
  if (!(o.momentum >= 0.0 && o.momentum <= 1.0))
    op_error(op, "momentum must be in [0, 1], got " + std::to_string(o.momentum));
  if (!(o.epsilon > 0.0)) op_error(op, "epsilon must be > 0, got " + std::to_string(o.epsilon));
  const std::string name = o.name.empty() ? g.unique_name("BatchNorm") : o.name;
  const int64_t C = x.shape()[ax];
  const DType dt = x.dtype();
  Blob gamma = o.scale ? get_variable(name + "-gamma", {C}, dt, ones_initializer(), o.trainable) : Blob();
  Blob beta = o.center ? get_variable(name + "-beta", {C}, dt, zeros_initializer(), o.trainable) : Blob();
  Blob mm = get_variable(name + "-moving_mean", {C}, dt, zeros_initializer(), false);
  Blob mv = get_variable(name + "-moving_variance", {C}, dt, ones_initializer(), false);
  // A frozen layer (trainable = false) is used in inference mode in train
  // jobs too, as OneFlow and Keras do, so its moving statistics stay put.
  if (o.trainable) return internal::batch_norm_layer(x, mm, mv, gamma, beta, ax, o.epsilon, o.momentum, name);
  return nn::batch_normalization(x, mm, mv, beta, gamma, o.epsilon, ax, name);
}

}  // namespace layers

namespace internal {

Blob batch_norm_layer(Blob x, Blob moving_mean, Blob moving_variance, Blob gamma, Blob beta, int axis, double epsilon,
                      double momentum, const std::string& name) {
  if (defining_train_job()) {
    std::vector<Blob> in{x, moving_mean, moving_variance};
    if (gamma.defined()) in.push_back(gamma);
    if (beta.defined()) in.push_back(beta);
    return add_node(std::make_shared<BatchNormTrain>(axis, epsilon, momentum, gamma.defined(), beta.defined()), in,
                    name)[0];
  }
  return nn::batch_normalization(x, moving_mean, moving_variance, beta, gamma, epsilon, axis, name);
}

}  // namespace internal
}  // namespace jobflow
