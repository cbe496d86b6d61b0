// Reductions (sum, mean, max, argmax), broadcast_to and its gradient sum_to,
// zeros_like / ones_like.
//
// Every reduction runs on a collapsed view of the input: size-1 dims are
// dropped and neighbouring dims that are both reduced (or both kept) are
// merged, which leaves alternating groups. Two loop shapes cover all cases
// without per-element index arithmetic:
//   * innermost group reduced: each output sums contiguous runs (8 partial
//     accumulators, so the loop vectorizes and rounding error stays small);
//   * innermost group kept: each block of outputs accumulates whole input
//     rows into a stack buffer (e.g. (B, N) -> (N,) streams over B rows).
// float32 sums accumulate in double, integer sums in int64.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "jobflow/ops.h"
#include "kernel_util.h"
#include "ops_internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace jobflow {
namespace {

using kern::check_rank;
using kern::kMaxRank;
constexpr int64_t kColBlock = 256;  // outputs per stack accumulator block
constexpr int kMaxThreads = 256;    // partial sums of the full reduction

enum class RedOp { Sum, Mean, Max, SumTo, Prod };

// Unsigned values sum in uint64 (wrapping, as numpy's uint64 does; int64
// would overflow, undefined, on uint64 sums past 2^63).
template <class T>
using SumAcc = std::conditional_t<std::is_floating_point_v<T>, double,
                                  std::conditional_t<std::is_unsigned_v<T>, uint64_t, int64_t>>;

// Accumulation policies: Acc is the accumulator type, step() folds one value.
template <class T>
struct SumPolicy {
  using Acc = SumAcc<T>;
  static Acc init() { return Acc(0); }
  static Acc step(Acc a, T v) { return a + static_cast<Acc>(v); }
  static Acc merge(Acc a, Acc b) { return a + b; }
};
// Products accumulate like sums (float32 in double, integers in int64).
template <class T>
struct ProdPolicy {
  using Acc = SumAcc<T>;
  static Acc init() { return Acc(1); }
  static Acc step(Acc a, T v) { return a * static_cast<Acc>(v); }
  static Acc merge(Acc a, Acc b) { return a * b; }
};
template <class T>
struct MaxPolicy {
  using Acc = T;
  static Acc init() {
    if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  }
  // NaN wins and stays (v > NaN is false), as in PyTorch.
  static Acc step(Acc a, T v) { return (v > a || v != v) ? v : a; }
  static Acc merge(Acc a, Acc b) { return step(a, b); }
};

// Fold of a contiguous run with 8 independent lanes (vectorizable without
// -ffast-math, and pairwise-ish for accuracy).
template <class P, class T>
typename P::Acc fold_run(const T* p, int64_t n) {
  using Acc = typename P::Acc;
  Acc lane[8];
  for (auto& l : lane) l = P::init();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] = P::step(lane[k], p[i + k]);
  for (; i < n; ++i) lane[0] = P::step(lane[0], p[i]);
  return P::merge(P::merge(P::merge(lane[0], lane[1]), P::merge(lane[2], lane[3])),
                  P::merge(P::merge(lane[4], lane[5]), P::merge(lane[6], lane[7])));
}

// Collapsed reduction layout.
struct RedPlan {
  int nk = 0, nr = 0;                 // kept / reduced groups (outer to inner)
  int64_t kdim[kMaxRank], kstr[kMaxRank];
  int64_t rdim[kMaxRank], rstr[kMaxRank];
  bool inner_reduced = false;         // innermost group is reduced
  int64_t count = 1;                  // elements folded into each output
};

// `red[i]`: dim i of `shape` is reduced.
RedPlan make_plan(const Shape& shape, const bool* red) {
  const int r = static_cast<int>(shape.size());
  // Groups from inner to outer so strides accumulate naturally.
  int64_t gdim[kMaxRank], gstr[kMaxRank];
  bool gred[kMaxRank];
  int ng = 0;
  int64_t stride = 1;
  RedPlan p;
  for (int i = r - 1; i >= 0; --i) {
    const int64_t d = shape[i];
    if (red[i]) p.count *= d;
    if (d == 1) continue;
    if (ng > 0 && gred[ng - 1] == red[i]) {
      gdim[ng - 1] *= d;  // stride of the merged group stays that of its inner part
    } else {
      gdim[ng] = d;
      gstr[ng] = stride;
      gred[ng] = red[i];
      ++ng;
    }
    stride *= d;
  }
  p.inner_reduced = ng > 0 && gred[0];
  for (int g = ng - 1; g >= 0; --g) {  // outer to inner
    if (gred[g]) {
      p.rdim[p.nr] = gdim[g];
      p.rstr[p.nr++] = gstr[g];
    } else {
      p.kdim[p.nk] = gdim[g];
      p.kstr[p.nk++] = gstr[g];
    }
  }
  return p;
}

// Offset of kept index `o` (row-major over the first `nk` kept groups).
inline int64_t kept_offset(const RedPlan& p, int nk, int64_t o) {
  int64_t off = 0;
  for (int d = nk - 1; d >= 0; --d) {
    off += (o % p.kdim[d]) * p.kstr[d];
    o /= p.kdim[d];
  }
  return off;
}

// Calls f(offset) for every combination of the first `nr` reduced groups.
template <class F>
inline void for_each_reduced(const RedPlan& p, int nr, F f) {
  int64_t idx[kMaxRank] = {};
  int64_t reps = 1;
  for (int d = 0; d < nr; ++d) reps *= p.rdim[d];
  int64_t off = 0;
  for (int64_t rep = 0; rep < reps; ++rep) {
    f(off);
    for (int d = nr - 1; d >= 0; --d) {  // odometer increment
      off += p.rstr[d];
      if (++idx[d] < p.rdim[d]) break;
      off -= p.rstr[d] * p.rdim[d];
      idx[d] = 0;
    }
  }
}

// out[o] = fin(fold of the reduced elements of output o).
template <class P, class T, class Fin>
void reduce_kernel(const T* x, T* y, const RedPlan& p, int64_t n_out, Fin fin) {
  using Acc = typename P::Acc;
  const int64_t total = n_out * p.count;
  if (p.nr == 0) {  // nothing actually reduced (only size-1 dims)
    for (int64_t o = 0; o < n_out; ++o) y[o] = fin(P::step(P::init(), x[o]));
    return;
  }
  if (p.inner_reduced) {
    const int64_t run = p.rdim[p.nr - 1];
    if (p.nk == 0 && p.nr == 1) {
      // Full reduction of one contiguous run: split it across threads and
      // merge the partials in thread order (deterministic).
      Acc part[kMaxThreads];
      int used = 1;
      part[0] = P::init();
#pragma omp parallel if (total > kern::kParallelGrain)
      {
#ifdef _OPENMP
        const int nt = std::min(omp_get_num_threads(), kMaxThreads), t = omp_get_thread_num();
#else
        const int nt = 1, t = 0;
#endif
        if (t < nt) {
          const int64_t per = (run + nt - 1) / nt, b = std::min<int64_t>(run, t * per),
                        e = std::min<int64_t>(run, b + per);
          part[t] = fold_run<P>(x + b, e - b);
        }
#pragma omp single
        used = nt;
      }
      Acc a = part[0];
      for (int t = 1; t < used; ++t) a = P::merge(a, part[t]);
      y[0] = fin(a);
      return;
    }
#pragma omp parallel for if (total > kern::kParallelGrain)
    for (int64_t o = 0; o < n_out; ++o) {
      const T* base = x + kept_offset(p, p.nk, o);
      Acc a = P::init();
      for_each_reduced(p, p.nr - 1, [&](int64_t off) { a = P::merge(a, fold_run<P>(base + off, run)); });
      y[o] = fin(a);
    }
    return;
  }
  // Innermost group kept: contiguous rows of `cols` outputs.
  const int64_t cols = p.kdim[p.nk - 1];
  const int64_t outer = n_out / cols;
  const int64_t blocks = (cols + kColBlock - 1) / kColBlock;
#pragma omp parallel for if (total > kern::kParallelGrain)
  for (int64_t t = 0; t < outer * blocks; ++t) {
    const int64_t ko = t / blocks, c0 = (t % blocks) * kColBlock, len = std::min(kColBlock, cols - c0);
    const T* base = x + kept_offset(p, p.nk - 1, ko) + c0;
    Acc acc[kColBlock];
    for (int64_t c = 0; c < len; ++c) acc[c] = P::init();
    for_each_reduced(p, p.nr, [&](int64_t off) {
      const T* row = base + off;
      for (int64_t c = 0; c < len; ++c) acc[c] = P::step(acc[c], row[c]);
    });
    T* out = y + ko * cols + c0;
    for (int64_t c = 0; c < len; ++c) out[c] = fin(acc[c]);
  }
}

OpKind red_kind(RedOp op) {
  switch (op) {
    case RedOp::Sum: return OpKind::ReduceSum;
    case RedOp::Mean: return OpKind::ReduceMean;
    case RedOp::Max: return OpKind::ReduceMax;
    case RedOp::SumTo: return OpKind::SumTo;
    case RedOp::Prod: return OpKind::ReduceProd;
  }
  return OpKind::ReduceSum;
}

std::string axes_str(const std::vector<int>& axes) {
  std::string s = "(";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", " : "") + std::to_string(axes[i]);
  return s + (axes.size() == 1 ? ",)" : ")");
}

// Checks that `small` broadcasts to `big` (numpy rules, one direction).
// A kDynamic dim of either shape may be anything at the call; a kDynamic
// dim of a target (broadcast_to, sum_to) means "the input's size there".
bool broadcastable_to(const Shape& small, const Shape& big) {
  if (small.size() > big.size()) return false;
  const size_t off = big.size() - small.size();
  for (size_t i = 0; i < small.size(); ++i)
    if (small[i] != 1 && !dims_agree(small[i], big[off + i])) return false;
  return true;
}
// broadcast_to's result: `target`, its kDynamic dims replaced by the input's.
Shape resolve_target(const Shape& target, const Shape& x) {
  Shape r = target;
  const int off = static_cast<int>(target.size()) - static_cast<int>(x.size());
  for (int i = 0; i < static_cast<int>(r.size()); ++i)
    if (r[i] < 0 && i - off >= 0) r[i] = x[i - off];
  return r;
}

// reduce_sum / reduce_mean / reduce_max over `axes`, or sum_to `target`.
class Reduce final : public Primitive {
 public:
  Reduce(RedOp op, std::vector<int> axes, bool keepdims, Shape target = {})
      : op_(op), axes_(std::move(axes)), keepdims_(keepdims), target_(std::move(target)) {}
  OpKind kind() const override { return red_kind(op_); }
  // axes empty = all axes; sum_to: the target shape.
  Attrs attributes() const override {
    if (op_ == RedOp::SumTo) return {{"shape", target_}};
    return {{"axes", std::vector<int64_t>(axes_.begin(), axes_.end())}, {"keepdims", int64_t{keepdims_}}};
  }

  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 1);
    const TensorSpec& x = in[0];
    check_rank(name(), x.shape);
    expect_not_bool(name(), x, "x");
    if (op_ == RedOp::Mean) expect_float(name(), x, "x");
    if (op_ == RedOp::SumTo) {
      if (!broadcastable_to(target_, x.shape))
        op_error("sum_to", "cannot sum " + shape_str(x.shape) + " to " + shape_str(target_) + ": " +
                               shape_str(target_) + " does not broadcast to " + shape_str(x.shape));
      // A dynamic target dim keeps the input's size.
      Shape out = target_;
      const int lead = static_cast<int>(x.shape.size() - target_.size());
      for (size_t i = 0; i < out.size(); ++i)
        if (out[i] < 0) out[i] = x.shape[i + lead];
      return {{out, x.dtype}};
    }
    const int r = static_cast<int>(x.shape.size());
    bool red[kMaxRank] = {};
    for (int a : axes_) {
      const int n = a < 0 ? a + r : a;
      if (n < 0 || n >= r)
        op_error(name(), "axis " + std::to_string(a) + " is out of range for input " + shape_str(x.shape));
      if (red[n]) op_error(name(), "axis " + std::to_string(a) + " repeats in axes " + axes_str(axes_));
      red[n] = true;
    }
    if (axes_.empty()) std::fill(red, red + r, true);
    Shape out;
    for (int i = 0; i < r; ++i) {
      if (op_ == RedOp::Max && red[i] && x.shape[i] == 0)
        op_error(name(), "cannot take the max over the empty axis " + std::to_string(i) + " of " + shape_str(x.shape));
      if (!red[i]) out.push_back(x.shape[i]);
      else if (keepdims_) out.push_back(1);
    }
    return {{out, x.dtype}};
  }

  // Which dims of `shape` this op folds (shared by eval and vjp).
  void reduced_dims(const Shape& shape, bool* red) const {
    const int r = static_cast<int>(shape.size());
    std::fill(red, red + r, false);
    if (op_ == RedOp::SumTo) {
      const int lead = r - static_cast<int>(target_.size());
      for (int i = 0; i < r; ++i) red[i] = i < lead || (target_[i - lead] == 1 && shape[i] != 1);
      return;
    }
    if (axes_.empty()) std::fill(red, red + r, true);
    for (int a : axes_) red[a < 0 ? a + r : a] = true;
  }

  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    bool red[kMaxRank];
    reduced_dims(in[0].shape(), red);
    const RedPlan p = make_plan(in[0].shape(), red);
    const int64_t n_out = out[0].numel();
    if (n_out == 0) return;
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      const T* x = static_cast<const T*>(in[0].raw());
      T* y = static_cast<T*>(out[0].raw());
      if (op_ == RedOp::Max) {
        reduce_kernel<MaxPolicy<T>>(x, y, p, n_out, [](T a) { return a; });
      } else if (op_ == RedOp::Prod) {
        reduce_kernel<ProdPolicy<T>>(x, y, p, n_out, [](SumAcc<T> a) { return static_cast<T>(a); });
      } else if (op_ == RedOp::Mean) {
        // count 0 gives 0 * inf = NaN, numpy's mean of nothing.
        const double inv = 1.0 / static_cast<double>(p.count);
        reduce_kernel<SumPolicy<T>>(x, y, p, n_out, [inv](SumAcc<T> a) { return static_cast<T>(a * inv); });
      } else {
        reduce_kernel<SumPolicy<T>>(x, y, p, n_out, [](SumAcc<T> a) { return static_cast<T>(a); });
      }
    });
  }

  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>& outs, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    const Blob &x = in[0], &g = cot[0];
    const Shape& xs = x.shape();
    if (op_ == RedOp::SumTo) return {broadcast_to(g, xs)};
    // The output with reduced dims kept as 1 broadcasts against x.
    bool red[kMaxRank];
    reduced_dims(xs, red);
    Shape keep(xs);
    int64_t count = 1;
    for (size_t i = 0; i < xs.size(); ++i)
      if (red[i]) {
        keep[i] = 1;
        count *= xs[i];
      }
    Blob gk = keepdims_ ? g : reshape(g, keep);
    switch (op_) {
      case RedOp::Sum: return {broadcast_to(gk, xs)};
      case RedOp::Mean: return {broadcast_to(mul_scalar(gk, 1.0 / static_cast<double>(count)), xs)};
      case RedOp::Max: {
        // Split evenly between tied maxima (so the gradient of max over
        // equal values is the gradient of their mean).
        Blob yk = keepdims_ ? outs[0] : reshape(outs[0], keep);
        Blob mask = internal::equal_mask(x, yk);
        std::vector<int> axes;
        for (size_t i = 0; i < xs.size(); ++i)
          if (red[i]) axes.push_back(static_cast<int>(i));
        Blob ties = reduce_sum(mask, axes, true);
        return {mul(mask, div(gk, ties))};
      }
      case RedOp::Prod: {
        // d prod / d x_i = prod / x_i: cheap, exact away from zeros (at a
        // zero element it is inf or NaN; docs/job-files.md).
        Blob yk = keepdims_ ? outs[0] : reshape(outs[0], keep);
        return {div(mul(broadcast_to(gk, xs), yk), x)};
      }
      default: return {Blob()};
    }
  }

 private:
  RedOp op_;
  std::vector<int> axes_;
  bool keepdims_;
  Shape target_;
};

// Index of the first maximum along `axis` (int32). NaN counts as the
// maximum (first NaN wins), like numpy.
class ArgMax final : public Primitive {
 public:
  explicit ArgMax(int axis) : axis_(axis) {}
  OpKind kind() const override { return OpKind::ArgMax; }
  Attrs attributes() const override { return {{"axis", int64_t{axis_}}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("argmax", in, 1);
    expect_not_bool("argmax", in[0], "x");
    const Shape& s = in[0].shape;
    const int r = static_cast<int>(s.size());
    if (r == 0) op_error("argmax", "input must have rank >= 1, got a scalar");
    if (axis_ < -r || axis_ >= r)
      op_error("argmax", "axis " + std::to_string(axis_) + " is out of range for input " + shape_str(s));
    const int ax = axis_ < 0 ? axis_ + r : axis_;
    if (s[ax] == 0) op_error("argmax", "axis " + std::to_string(axis_) + " of " + shape_str(s) + " is empty");
    Shape out(s);
    out.erase(out.begin() + ax);
    return {{out, DType::Int32}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const int r = in[0].ndim();
    const int ax = axis_ < 0 ? axis_ + r : axis_;
    int64_t outer = 1, inner = 1;
    const int64_t n = in[0].dim(ax);
    for (int i = 0; i < ax; ++i) outer *= in[0].dim(i);
    for (int i = ax + 1; i < r; ++i) inner *= in[0].dim(i);
    int32_t* y = out[0].data<int32_t>();
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      const T* x = static_cast<const T*>(in[0].raw());
      auto better = [](T v, T best) { return v > best || (v != v && best == best); };
      const int64_t blocks = (inner + kColBlock - 1) / kColBlock;
#pragma omp parallel for if (outer * n * inner > kern::kParallelGrain)
      for (int64_t t = 0; t < outer * blocks; ++t) {
        const int64_t o = t / blocks, c0 = (t % blocks) * kColBlock, len = std::min(kColBlock, inner - c0);
        const T* base = x + o * n * inner + c0;
        int32_t* dst = y + o * inner + c0;
        if (inner == 1) {  // contiguous scan
          T best = base[0];
          int32_t bi = 0;
          for (int64_t j = 1; j < n; ++j)
            if (better(base[j], best)) {
              best = base[j];
              bi = static_cast<int32_t>(j);
            }
          dst[0] = bi;
          continue;
        }
        // Strided axis: sweep whole rows of `len` columns at a time.
        T best[kColBlock];
        std::memcpy(best, base, sizeof(T) * len);
        for (int64_t c = 0; c < len; ++c) dst[c] = 0;
        for (int64_t j = 1; j < n; ++j) {
          const T* row = base + j * inner;
          for (int64_t c = 0; c < len; ++c)
            if (better(row[c], best[c])) {
              best[c] = row[c];
              dst[c] = static_cast<int32_t>(j);
            }
        }
      }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());  // integer output: no gradient
  }
  bool differentiable_input(int) const override { return false; }

 private:
  int axis_;
};

// y = x broadcast to y's shape (numpy): copies rows, or fills them where the
// inner dim is broadcast.
void broadcast_into(const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  const int64_t n = out[0].numel();
  if (n == 0) return;
  const Shape& ts = out[0].shape();  // the target with its dynamic dims resolved
  // Collapse: drop output dims of 1, stride 0 where x is broadcast, merge
  // neighbours contiguous in x.
  const Shape& xs = in[0].shape();
  const int r = static_cast<int>(ts.size()), off = r - static_cast<int>(xs.size());
  int64_t st[kMaxRank];
  int64_t acc = 1;
  for (int i = r - 1; i >= 0; --i) {
    const int64_t d = i >= off ? xs[i - off] : 1;
    st[i] = d == 1 ? 0 : acc;
    acc *= d;
  }
  int64_t dim[kMaxRank], str[kMaxRank];
  int nd = 0;
  for (int i = 0; i < r; ++i) {
    if (ts[i] == 1) continue;
    if (nd > 0 && str[nd - 1] == st[i] * ts[i]) {
      dim[nd - 1] *= ts[i];
      str[nd - 1] = st[i];
    } else {
      dim[nd] = ts[i];
      str[nd++] = st[i];
    }
  }
  if (nd == 0) {
    dim[0] = 1;
    str[0] = 0;
    nd = 1;
  }
  const int64_t inner = dim[nd - 1], rows = n / inner;
  const bool fill = str[nd - 1] == 0;
  kern::dispatch_all(in[0].dtype(), [&](auto z) {
    using T = decltype(z);
    const T* x = static_cast<const T*>(in[0].raw());
    T* y = static_cast<T*>(out[0].raw());
#pragma omp parallel for if (n > kern::kParallelGrain)
    for (int64_t row = 0; row < rows; ++row) {
      int64_t src = 0, q = row;
      for (int d = nd - 2; d >= 0; --d) {
        src += (q % dim[d]) * str[d];
        q /= dim[d];
      }
      T* dst = y + row * inner;
      if (fill) std::fill(dst, dst + inner, x[src]);
      else std::memcpy(dst, x + src, sizeof(T) * inner);
    }
  });
}

// numpy broadcast_to: copies rows, or fills them where the inner dim is
// broadcast.
class BroadcastTo final : public Primitive {
 public:
  explicit BroadcastTo(Shape shape) : shape_(std::move(shape)) {}
  OpKind kind() const override { return OpKind::BroadcastTo; }
  Attrs attributes() const override { return {{"shape", shape_}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("broadcast_to", in, 1);
    check_rank("broadcast_to", shape_);
    if (!broadcastable_to(in[0].shape, shape_))
      op_error("broadcast_to", "cannot broadcast " + shape_str(in[0].shape) + " to " + shape_str(shape_));
    return {{resolve_target(shape_, in[0].shape), in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    broadcast_into(in, out);
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    return {sum_to(cot[0], in[0].shape())};
  }

 private:
  Shape shape_;
};

// ONNX Expand: x broadcast both ways with the values of an int64 shape
// tensor (known per call).
class Expand final : public Primitive {
 public:
  OpKind kind() const override { return OpKind::Expand; }
  bool differentiable_input(int i) const override { return i == 0; }
  bool output_shape_from_data() const override { return true; }
  bool shape_reads_value(int i) const override { return i == 1; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("expand", in, 2);
    const TensorSpec& s = in[1];
    if ((s.dtype != DType::Int64 && s.dtype != DType::Int32) || s.shape.size() != 1 || s.shape[0] < 0)
      op_error("expand", "the shape must be a 1-D int64 tensor of known length, got " + spec_str(s));
    // Every dim of the result may depend on the shape's values.
    if (s.shape[0] > kMaxRank) op_error("expand", "the shape " + spec_str(s) + " has more than " + std::to_string(kMaxRank) + " dims");
    const size_t r = std::max(in[0].shape.size(), static_cast<size_t>(s.shape[0]));
    return {{Shape(r, kDynamic), in[0].dtype}};
  }
  std::vector<TensorSpec> infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const override {
    infer(in);
    Shape want(static_cast<size_t>(v[1].numel()));
    kern::dispatch_all(v[1].dtype(), [&](auto z) {
      using T = decltype(z);
      for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<int64_t>(static_cast<const T*>(v[1].raw())[i]);
    });
    return {{layout::broadcast_shape("expand", in[0].shape, want), in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    broadcast_into(in, out);
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    if (!is_static(in[0].shape())) op_error("expand", "the gradient needs x's shape to be known when the job is defined");
    return {sum_to(cot[0], in[0].shape())};
  }
};

// zeros_like / ones_like: the input only supplies the spec.
class FillLike final : public Primitive {
 public:
  explicit FillLike(double v) : v_(v) {}
  OpKind kind() const override { return v_ == 0.0 ? OpKind::ZerosLike : OpKind::OnesLike; }
  Attrs attributes() const override { return {{"value", v_}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 1);
    return {in[0]};
  }
  void eval_cpu(const std::vector<Tensor>&, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_all(out[0].dtype(), [&](auto z) {
      using T = decltype(z);
      T* y = static_cast<T*>(out[0].raw());
      const int64_t n = out[0].numel();
      const T v = static_cast<T>(v_);
#pragma omp parallel for if (n > kern::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) y[i] = v;
    });
  }
  bool differentiable_input(int) const override { return false; }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }

 private:
  double v_;
};

Blob reduce(RedOp op, Blob x, const std::vector<int>& axes, bool keepdims, const std::string& name) {
  return internal::add_node(std::make_shared<Reduce>(op, axes, keepdims), {x}, name)[0];
}

// ===========================================================================
// cumsum (ONNX CumSum)

// Running sums along `axis`: y[i] = x[0] + ... + x[i] (exclusive: up to
// x[i - 1]; reverse: from the end). Any numeric dtype, summed in it. With
// axis_input, the axis is a second input (one int32/int64 value, read at
// run time) instead of the attribute.
class CumSum final : public Primitive {
 public:
  CumSum(int axis, bool exclusive, bool reverse, bool axis_input = false)
      : axis_(axis), exclusive_(exclusive), reverse_(reverse), axis_input_(axis_input) {}
  OpKind kind() const override { return OpKind::CumSum; }
  Attrs attributes() const override {
    Attrs a{{"exclusive", int64_t{exclusive_}}, {"reverse", int64_t{reverse_}}};
    if (!axis_input_) a.emplace_back("axis", int64_t{axis_});
    return a;
  }
  bool differentiable_input(int i) const override { return i == 0; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("cumsum", in, axis_input_ ? 2 : 1);
    check_rank("cumsum", in[0].shape);
    expect_not_bool("cumsum", in[0], "x");
    if (in[0].shape.empty()) op_error("cumsum", "x must have rank >= 1, got " + spec_str(in[0]));
    if (axis_input_) {
      const TensorSpec& a = in[1];
      if ((a.dtype != DType::Int32 && a.dtype != DType::Int64) || !dims_agree(numel_or_dynamic(a.shape), 1))
        op_error("cumsum", "axis must be one int32 or int64 value, got " + spec_str(a));
    } else {
      kern::norm_axis("cumsum", axis_, static_cast<int>(in[0].shape.size()));
    }
    return {in[0]};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const Shape& xs = in[0].shape();
    int64_t axis = axis_;
    if (axis_input_) {
      if (in[1].numel() != 1) op_error("cumsum", "axis must hold one value, got " + shape_str(in[1].shape()));
      axis = static_cast<int64_t>(in[1].at(0));
      if (axis < -in[0].ndim() || axis >= in[0].ndim())
        op_error("cumsum", "axis " + std::to_string(axis) + " is out of range for x " + shape_str(xs));
    }
    const int ax = kern::norm_axis("cumsum", static_cast<int>(axis), in[0].ndim());
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < ax; ++d) outer *= xs[d];
    for (int d = ax + 1; d < in[0].ndim(); ++d) inner *= xs[d];
    const int64_t n = xs[ax], lines = outer * inner;
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      if constexpr (!std::is_same_v<T, bool>) {
        const T* x = static_cast<const T*>(in[0].raw());
        T* y = static_cast<T*>(out[0].raw());
#pragma omp parallel for if (lines * n > kern::kParallelGrain)
        for (int64_t l = 0; l < lines; ++l) {
          const int64_t base = (l / inner) * n * inner + l % inner;
          T acc = T(0);
          for (int64_t k = 0; k < n; ++k) {
            const int64_t i = base + (reverse_ ? n - 1 - k : k) * inner;
            if (exclusive_) {
              y[i] = acc;
              acc = static_cast<T>(acc + x[i]);
            } else {
              acc = static_cast<T>(acc + x[i]);
              y[i] = acc;
            }
          }
        }
      }
    });
  }
  // Each x[j] enters every y[i] after it (before it, reversed): the
  // gradient is the cumsum of dy the other way.
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    auto op = std::make_shared<CumSum>(axis_, exclusive_, !reverse_, axis_input_);
    return {internal::add_node(op, axis_input_ ? std::vector<Blob>{cot[0], in[1]} : std::vector<Blob>{cot[0]})[0]};
  }

 private:
  static int64_t numel_or_dynamic(const Shape& s) {
    int64_t n = 1;
    for (int64_t d : s) {
      if (d < 0) return kDynamic;
      n *= d;
    }
    return n;
  }
  int axis_;
  bool exclusive_, reverse_, axis_input_;
};

// ===========================================================================
// reduce_sum_axes (ONNX ReduceSum with its axes computed at run time)

// Which axes of a rank-r tensor `axes` (int64 values, negative from the
// end) reduces; empty axes reduce all of them unless noop.
std::vector<char> reduced_axes(const Tensor& axes, int r, bool noop) {
  std::vector<char> red(static_cast<size_t>(r), 0);
  const int64_t* a = axes.data<int64_t>();
  if (axes.numel() == 0) {
    if (!noop) std::fill(red.begin(), red.end(), 1);
    return red;
  }
  for (int64_t i = 0; i < axes.numel(); ++i) {
    const int64_t v = a[i] < 0 ? a[i] + r : a[i];
    if (v < 0 || v >= r)
      op_error("reduce_sum_axes", "axis " + std::to_string(a[i]) + " is out of range for rank " + std::to_string(r));
    if (red[static_cast<size_t>(v)])
      op_error("reduce_sum_axes", "axis " + std::to_string(a[i]) + " appears twice in the axes");
    red[static_cast<size_t>(v)] = 1;
  }
  return red;
}

// Sum over the axes given by the int64 (k,) tensor `axes`. Inputs x, axes.
// The output's dims depend on the axes' values (kDynamic until known).
class ReduceSumAxes final : public Primitive {
 public:
  ReduceSumAxes(bool keepdims, bool noop) : keepdims_(keepdims), noop_(noop) {}
  OpKind kind() const override { return OpKind::ReduceSumAxes; }
  Attrs attributes() const override {
    return {{"keepdims", int64_t{keepdims_}}, {"noop_with_empty_axes", int64_t{noop_}}};
  }
  bool differentiable_input(int i) const override { return i == 0; }
  bool output_shape_from_data() const override { return true; }
  bool shape_reads_value(int i) const override { return i == 1; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("reduce_sum_axes", in, 2);
    const TensorSpec &x = in[0], &axes = in[1];
    check_rank("reduce_sum_axes", x.shape);
    expect_not_bool("reduce_sum_axes", x, "x");
    if (axes.dtype != DType::Int64 || axes.shape.size() != 1)
      op_error("reduce_sum_axes", "axes must be 1-D int64, got " + spec_str(axes));
    const int r = static_cast<int>(x.shape.size());
    const int64_t k = axes.shape[0];
    if (k < 0 && !keepdims_)  // the rank of the result would depend on it
      op_error("reduce_sum_axes", "axes of a length known per call need keepdims, got " + spec_str(axes));
    if (k > r) op_error("reduce_sum_axes", std::to_string(k) + " axes for x " + spec_str(x));
    int rank = r;
    if (!keepdims_) rank = k == 0 ? (noop_ ? r : 0) : r - static_cast<int>(k);
    if (k == 0) {  // no axis value to read: all or nothing
      Shape out = x.shape;
      if (!noop_) out = keepdims_ ? Shape(static_cast<size_t>(r), 1) : Shape{};
      return {{out, x.dtype}};
    }
    return {{Shape(static_cast<size_t>(rank), kDynamic), x.dtype}};
  }
  std::vector<TensorSpec> infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const override {
    infer(in);
    return {{out_shape(in[0].shape, reduced_axes(v[1], static_cast<int>(in[0].shape.size()), noop_)), in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const Shape& xs = in[0].shape();
    const int r = in[0].ndim();
    const std::vector<char> red = reduced_axes(in[1], r, noop_);
    // Each input element adds into the output element of its kept coordinates.
    int64_t ost[kMaxRank] = {}, xst[kMaxRank] = {};
    int64_t acc = 1;
    for (int d = r - 1; d >= 0; --d) {
      xst[d] = acc;
      acc *= xs[d];
    }
    acc = 1;
    for (int d = r - 1; d >= 0; --d)
      if (!red[static_cast<size_t>(d)]) {
        ost[d] = acc;
        acc *= xs[d];
      }
    const int64_t n = in[0].numel(), m = out[0].numel();
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      if constexpr (!std::is_same_v<T, bool>) {
        using Acc = SumAcc<T>;
        const T* x = static_cast<const T*>(in[0].raw());
        std::vector<Acc> sums(static_cast<size_t>(m), Acc(0));
        for (int64_t i = 0; i < n; ++i) {
          int64_t o = 0;
          for (int d = 0; d < r; ++d) o += ((i / xst[d]) % xs[d]) * ost[d];
          sums[static_cast<size_t>(o)] += static_cast<Acc>(x[i]);
        }
        T* y = static_cast<T*>(out[0].raw());
        for (int64_t j = 0; j < m; ++j) y[j] = static_cast<T>(sums[static_cast<size_t>(j)]);
      }
    });
  }
  // dy, with the reduced axes put back as 1s, broadcast to x's shape.
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    Blob x = in[0], dy = cot[0];
    const int64_t k = in[1].shape()[0];  // kDynamic only with keepdims
    if (k == 0 && noop_) return {dy};
    if (k == 0) return {broadcast_to(keepdims_ ? dy : reshape(dy, Shape(static_cast<size_t>(x.ndim()), 1)), x.shape())};
    if (!keepdims_) {  // 1 where an axis was reduced, else x's dim
      const int r = x.ndim();
      std::vector<int64_t> iota(static_cast<size_t>(r));
      for (int d = 0; d < r; ++d) iota[static_cast<size_t>(d)] = d;
      Blob rr = constant(Tensor::from<int64_t>({}, {static_cast<int64_t>(r)}));
      Blob zero = constant(Tensor::from<int64_t>({}, {0}));
      Blob ax = where(less(in[1], zero), add(in[1], rr), in[1]);
      Blob hit = equal(constant(Tensor::from<int64_t>({static_cast<int64_t>(r), 1}, iota)), reshape(ax, {1, k}));
      Blob reduced = greater(reduce_sum(cast(hit, DType::Int64), {1}), zero);
      Blob keep = where(reduced, constant(Tensor::from<int64_t>({}, {1})), shape_of(x));
      dy = reshape_to(dy, keep);
    }
    // expand's dims are known per call: x's static ones restored.
    Shape request;
    for (int d = 0; d < x.ndim(); ++d) request.push_back(x.shape()[d] >= 0 ? x.shape()[d] : internal::same_dim(d));
    return {internal::reshape_request(expand(dy, shape_of(x)), request)};
  }

 private:
  Shape out_shape(const Shape& xs, const std::vector<char>& red) const {
    Shape o;
    for (size_t d = 0; d < xs.size(); ++d) {
      if (!red[d]) o.push_back(xs[d]);
      else if (keepdims_) o.push_back(1);
    }
    return o;
  }
  bool keepdims_, noop_;
};

}  // namespace

Blob reduce_sum(Blob x, const std::vector<int>& axes, bool keepdims, const std::string& name) {
  return reduce(RedOp::Sum, x, axes, keepdims, name);
}
Blob reduce_mean(Blob x, const std::vector<int>& axes, bool keepdims, const std::string& name) {
  return reduce(RedOp::Mean, x, axes, keepdims, name);
}
Blob reduce_prod(Blob x, const std::vector<int>& axes, bool keepdims, const std::string& name) {
  return internal::add_node(std::make_shared<Reduce>(RedOp::Prod, axes, keepdims), {x}, name)[0];
}

Blob reduce_max(Blob x, const std::vector<int>& axes, bool keepdims, const std::string& name) {
  return reduce(RedOp::Max, x, axes, keepdims, name);
}
Blob argmax(Blob x, int axis, const std::string& name) {
  return internal::add_node(std::make_shared<ArgMax>(axis), {x}, name)[0];
}

Blob broadcast_to(Blob x, const Shape& shape) {
  if (x.defined() && x.shape() == shape) return x;  // nothing to do
  return internal::add_node(std::make_shared<BroadcastTo>(shape), {x})[0];
}

Blob sum_to(Blob x, const Shape& shape) {
  if (x.defined() && x.shape() == shape) return x;  // the common same-shape gradient
  return internal::add_node(std::make_shared<Reduce>(RedOp::SumTo, std::vector<int>{}, false, shape), {x})[0];
}

Blob expand(Blob x, Blob shape, const std::string& name) {
  return internal::add_node(std::make_shared<Expand>(), {x, shape}, name)[0];
}

Blob zeros_like(Blob x) { return internal::add_node(std::make_shared<FillLike>(0.0), {x})[0]; }
Blob ones_like(Blob x) { return internal::add_node(std::make_shared<FillLike>(1.0), {x})[0]; }

Blob reduce_sum_at(Blob x, Blob axes, bool keepdims, bool noop_with_empty_axes, const std::string& name) {
  // Constant axes: the reduce_sum of those axes, whose shapes are known now.
  if (x.defined() && axes.defined()) {
    const BlobDesc& d = axes.graph()->blobs[static_cast<size_t>(axes.id())];
    const Primitive* p = d.producer >= 0 ? axes.graph()->nodes[static_cast<size_t>(d.producer)].op.get() : nullptr;
    if (p && p->kind() == OpKind::Constant && axes.dtype() == DType::Int64 && x.ndim() > 0) {
      const Tensor v = p->attr_tensor("value");
      const std::vector<char> red = reduced_axes(v, x.ndim(), noop_with_empty_axes);
      std::vector<int> ax;
      for (int i = 0; i < x.ndim(); ++i)
        if (red[static_cast<size_t>(i)]) ax.push_back(i);
      if (ax.empty()) return identity(x, name);
      return reduce_sum(x, ax, keepdims, name);
    }
  }
  return internal::add_node(std::make_shared<ReduceSumAxes>(keepdims, noop_with_empty_axes), {x, axes}, name)[0];
}

namespace math {
Blob cumsum(Blob x, int axis, bool exclusive, bool reverse, const std::string& name) {
  return internal::add_node(std::make_shared<CumSum>(axis, exclusive, reverse), {x}, name)[0];
}
Blob cumsum(Blob x, Blob axis, bool exclusive, bool reverse, const std::string& name) {
  return internal::add_node(std::make_shared<CumSum>(0, exclusive, reverse, true), {x, axis}, name)[0];
}
}  // namespace math

}  // namespace jobflow
