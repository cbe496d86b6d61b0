// Indexing ops of imported (ONNX) models: gather (numpy.take), ONNX-style
// slice with steps, split, pad (constant / reflect / edge), and squeeze /
// unsqueeze (reshapes). Every one moves data of any dtype; gradients (float)
// are the matching scatter into zeros, and each scatter's own gradient is the
// forward gather again, so higher derivatives work.
//
// Kernels walk the output (or, for scatters, the gradient input) row by row,
// a row being the innermost dim: one index decomposition per row, then a
// contiguous copy or a short strided loop. Only the slice geometry (fixed
// arrays of kMaxRank entries) is computed in eval_cpu, so nothing allocates.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "jobflow/ops.h"
#include "kernel_util.h"
#include "ops_internal.h"

namespace jobflow {
namespace {

using kern::kMaxRank;
// Scatter-add tasks cover this many elements of a row, so that a gradient of
// a gather with few outer slices still spreads over the threads.
constexpr int64_t kScatterBlock = 1024;

void check_rank(const char* op, const Shape& s, const char* what) {
  if (s.size() > static_cast<size_t>(kMaxRank))
    op_error(op, std::string(what) + " " + shape_str(s) + " has rank " + std::to_string(s.size()) +
                     ", above the supported maximum of " + std::to_string(kMaxRank));
}

std::string ints_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Row-major strides of `s` into `st`.
void strides_of(const Shape& s, int64_t* st) {
  int64_t acc = 1;
  for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
}

// Product of s[b, e).
int64_t span(const Shape& s, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) p *= s[i];
  return p;
}

template <class T>
void zero_fill(T* p, int64_t n) {
#pragma omp parallel for if (n > kern::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) p[i] = T(0);
}

// ===========================================================================
// gather

template <class F>
void dispatch_index(DType t, const char* op, F&& f) {
  if (t == DType::Int32) f(int32_t{});
  else if (t == DType::Int64) f(int64_t{});
  else op_error(op, std::string("indices must be int32 or int64, got ") + dtype_name(t));
}

// Every index is checked before any data moves: an error cannot be thrown
// out of the OpenMP loops that follow, and a bad index must not write.
template <class I>
void check_indices(const char* op, const I* ind, int64_t m, int64_t n, int axis) {
  for (int64_t j = 0; j < m; ++j)
    if (ind[j] < -n || ind[j] >= n)
      op_error(op, "index " + std::to_string(ind[j]) + " is out of range for axis " + std::to_string(axis) +
                       " of size " + std::to_string(n) + " (valid: " + std::to_string(-n) + " to " +
                       std::to_string(n - 1) + ")");
}

TensorSpec gather_spec(const char* op, const TensorSpec& x, const TensorSpec& idx, int axis) {
  if (x.shape.empty()) op_error(op, "x must have at least one dim, got " + spec_str(x));
  if (idx.dtype != DType::Int32 && idx.dtype != DType::Int64)
    op_error(op, "indices must be int32 or int64, got " + spec_str(idx));
  const int ax = kern::norm_axis(op, axis, static_cast<int>(x.shape.size()));
  Shape out(x.shape.begin(), x.shape.begin() + ax);
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), x.shape.begin() + ax + 1, x.shape.end());
  return {out, x.dtype};
}

Blob gather_grad(Blob dy, Blob indices, int axis, const Shape& x_shape);

// y = numpy.take(x, indices, axis). Inputs x, indices.
class Gather final : public Primitive {
 public:
  explicit Gather(int axis) : axis_(axis) {}
  OpKind kind() const override { return OpKind::Gather; }
  Attrs attributes() const override { return {{"axis", int64_t{axis_}}}; }
  bool differentiable_input(int i) const override { return i == 0; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("gather", in, 2);
    return {gather_spec("gather", in[0], in[1], axis_)};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const Shape& xs = in[0].shape();
    const int ax = kern::norm_axis("gather", axis_, in[0].ndim());
    const int64_t outer = span(xs, 0, ax), n = xs[ax], inner = span(xs, ax + 1, xs.size());
    const int64_t m = in[1].numel(), tasks = outer * m;
    dispatch_index(in[1].dtype(), "gather", [&](auto zi) {
      using I = decltype(zi);
      const I* ind = static_cast<const I*>(in[1].raw());
      check_indices("gather", ind, m, n, axis_);
      kern::dispatch_all(in[0].dtype(), [&](auto z) {
        using T = decltype(z);
        const T* x = static_cast<const T*>(in[0].raw());
        T* y = static_cast<T*>(out[0].raw());
        // Task t = (outer slice o, index j) copies one row of `inner` elements.
#pragma omp parallel for if (tasks * inner > kern::kParallelGrain)
        for (int64_t t = 0; t < tasks; ++t) {
          const int64_t o = t / m, j = t % m;
          const int64_t k = ind[j] < 0 ? ind[j] + n : ind[j];
          const T* src = x + (o * n + k) * inner;
          T* dst = y + t * inner;
          if (inner == 1) *dst = *src;
          else std::copy_n(src, inner, dst);
        }
      });
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    return {gather_grad(cot[0], in[1], axis_, in[0].shape())};
  }

 private:
  int axis_;
};

// dx = zeros(x_shape); dx[..., indices[j], ...] += dy[..., j, ...]. Inputs dy, indices.
class GatherGrad final : public Primitive {
 public:
  GatherGrad(int axis, Shape x_shape) : axis_(axis), x_(std::move(x_shape)) {}
  OpKind kind() const override { return OpKind::GatherGrad; }
  Attrs attributes() const override { return {{"axis", int64_t{axis_}}, {"x_shape", x_}}; }
  bool differentiable_input(int i) const override { return i == 0; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("gather_grad", in, 2);
    expect_float("gather_grad", in[0], "dy");
    const TensorSpec y = gather_spec("gather_grad", {x_, in[0].dtype}, in[1], axis_);
    if (!specs_agree(in[0], y))
      op_error("gather_grad", "dy must be " + spec_str(y) + " for x " + shape_str(x_) + " and indices " +
                                  spec_str(in[1]) + ", got " + spec_str(in[0]));
    return {{x_, in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const int ax = kern::norm_axis("gather_grad", axis_, static_cast<int>(x_.size()));
    const int64_t outer = span(x_, 0, ax), n = x_[ax], inner = span(x_, ax + 1, x_.size());
    const int64_t m = in[1].numel();
    const int64_t blocks = (inner + kScatterBlock - 1) / kScatterBlock, tasks = outer * blocks;
    dispatch_index(in[1].dtype(), "gather_grad", [&](auto zi) {
      using I = decltype(zi);
      const I* ind = static_cast<const I*>(in[1].raw());
      check_indices("gather_grad", ind, m, n, axis_);
      kern::dispatch_float(in[0].dtype(), "gather_grad", [&](auto z) {
        using T = decltype(z);
        const T* dy = in[0].data<T>();
        T* dx = out[0].data<T>();
        zero_fill(dx, out[0].numel());
        // Repeated indices add into the same dx row, so a task owns a whole
        // column block (o, b) of dx and loops over every j: no two threads
        // ever write the same element, without atomics.
#pragma omp parallel for if (outer * m * inner > kern::kParallelGrain && tasks > 1)
        for (int64_t t = 0; t < tasks; ++t) {
          const int64_t o = t / blocks, b0 = (t % blocks) * kScatterBlock;
          const int64_t len = std::min(kScatterBlock, inner - b0);
          for (int64_t j = 0; j < m; ++j) {
            const int64_t k = ind[j] < 0 ? ind[j] + n : ind[j];
            const T* src = dy + (o * m + j) * inner + b0;
            T* dst = dx + (o * n + k) * inner + b0;
            for (int64_t i = 0; i < len; ++i) dst[i] += src[i];
          }
        }
      });
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    // Linear in dy; the adjoint of scatter-add is the gather.
    return {internal::add_node(std::make_shared<Gather>(axis_), {cot[0], in[1]})[0]};
  }

 private:
  int axis_;
  Shape x_;
};

Blob gather_grad(Blob dy, Blob indices, int axis, const Shape& x_shape) {
  if (!dy.defined()) return Blob();
  return internal::add_node(std::make_shared<GatherGrad>(axis, x_shape), {dy, indices})[0];
}

// ===========================================================================
// slice (ONNX Slice)

struct SliceArgs {
  std::vector<int64_t> starts, ends, axes, steps;  // equal lengths, defaults filled in
  void add_to(Attrs& a) const {
    a.push_back({"starts", starts});
    a.push_back({"ends", ends});
    a.push_back({"axes", axes});
    a.push_back({"steps", steps});
  }
  std::string str() const {
    return "starts=" + ints_str(starts) + " ends=" + ints_str(ends) + " axes=" + ints_str(axes) +
           " steps=" + ints_str(steps);
  }
};

// Per-dim first element, step and count of a slice of a given input shape
// (dims not named in axes: 0, 1, full length).
struct SliceGeom {
  int r = 0;
  int64_t start[kMaxRank], step[kMaxRank], len[kMaxRank];
};

// ONNX's normalization: negative starts/ends count from the end, then they
// are clamped to [0, d] (positive steps) or [-1, d-1] (negative steps, where
// -1 is "before the first element"). Throws naming `op` on bad arguments.
SliceGeom slice_geom(const char* op, const SliceArgs& a, const Shape& xs) {
  check_rank(op, xs, "x");
  SliceGeom g;
  g.r = static_cast<int>(xs.size());
  for (int d = 0; d < g.r; ++d) g.start[d] = 0, g.step[d] = 1, g.len[d] = xs[d];
  bool seen[kMaxRank] = {};
  for (size_t i = 0; i < a.axes.size(); ++i) {
    const int64_t ax0 = a.axes[i], ax = ax0 < 0 ? ax0 + g.r : ax0;
    if (ax < 0 || ax >= g.r)
      op_error(op, "axis " + std::to_string(ax0) + " is out of range for x " + shape_str(xs));
    if (seen[ax]) op_error(op, "axis " + std::to_string(ax0) + " appears twice in axes " + ints_str(a.axes));
    seen[ax] = true;
    const int64_t step = a.steps[i], d = xs[ax];
    if (step == 0) op_error(op, "steps must not be 0, got " + ints_str(a.steps));
    if (d < 0) {  // a dynamic dim: the length is known at the call
      g.len[ax] = kDynamic;
      continue;
    }
    int64_t s = a.starts[i], e = a.ends[i];
    if (s < 0) s += d;
    if (e < 0) e += d;
    int64_t len = 0;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
      if (e > s) len = (e - s - 1) / step + 1;
    } else if (d > 0) {
      s = std::clamp<int64_t>(s, 0, d - 1);
      e = std::clamp<int64_t>(e, -1, d - 1);
      // -step overflows for INT64_MIN; count in unsigned arithmetic.
      const uint64_t astep = static_cast<uint64_t>(-(step + 1)) + 1;
      if (s > e) len = static_cast<int64_t>(static_cast<uint64_t>(s - e - 1) / astep + 1);
    }
    g.start[ax] = len > 0 ? s : 0;
    g.step[ax] = step;
    g.len[ax] = len;
  }
  return g;
}

Shape slice_shape(const SliceGeom& g) { return Shape(g.len, g.len + g.r); }

// Copies between the slice (dense, shape g.len) and its positions in the full
// tensor x (shape xs): Scatter = false gathers x -> part, true writes part -> x.
template <bool Scatter, class T>
void slice_copy(const SliceGeom& g, const Shape& xs, T* full, T* part) {
  const int r = g.r;
  if (r == 0) {  // a scalar: the slice is the element
    if (Scatter) *full = *part;
    else *part = *full;
    return;
  }
  int64_t xst[kMaxRank];
  strides_of(xs, xst);
  int64_t base = 0;
  for (int d = 0; d < r; ++d) base += g.start[d] * xst[d];
  const int64_t inner = g.len[r - 1], step = g.step[r - 1];
  int64_t total = 1;
  for (int d = 0; d < r; ++d) total *= g.len[d];
  if (total == 0) return;
  const int64_t rows = total / inner;
#pragma omp parallel for if (total > kern::kParallelGrain)
  for (int64_t row = 0; row < rows; ++row) {
    int64_t q = row, off = base;
    for (int d = r - 2; d >= 0; --d) {
      off += (q % g.len[d]) * g.step[d] * xst[d];
      q /= g.len[d];
    }
    T* f = full + off;
    T* p = part + row * inner;
    if (step == 1) {
      if (Scatter) std::copy_n(p, inner, f);
      else std::copy_n(f, inner, p);
    } else {
      for (int64_t i = 0; i < inner; ++i) {
        if (Scatter) f[i * step] = p[i];
        else p[i] = f[i * step];
      }
    }
  }
}

Blob slice_grad(Blob dy, const SliceArgs& a, const Shape& x_shape);

class StridedSlice final : public Primitive {
 public:
  explicit StridedSlice(SliceArgs a) : a_(std::move(a)) {}
  // Not "slice": that name is concat's single-axis slice (shape.cpp).
  OpKind kind() const override { return OpKind::StridedSlice; }
  Attrs attributes() const override {
    Attrs r;
    a_.add_to(r);
    return r;
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("slice", in, 1);
    return {{slice_shape(slice_geom("slice", a_, in[0].shape)), in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const SliceGeom g = slice_geom("slice", a_, in[0].shape());
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      slice_copy<false, T>(g, in[0].shape(), static_cast<T*>(in[0].raw()), static_cast<T*>(out[0].raw()));
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    return {slice_grad(cot[0], a_, in[0].shape())};
  }

 private:
  SliceArgs a_;
};

// dx = zeros(x_shape) with dy written at the sliced positions (each position
// is written once: a slice never repeats an element).
class StridedSliceGrad final : public Primitive {
 public:
  StridedSliceGrad(SliceArgs a, Shape x_shape) : a_(std::move(a)), x_(std::move(x_shape)) {}
  OpKind kind() const override { return OpKind::StridedSliceGrad; }
  Attrs attributes() const override {
    Attrs r;
    a_.add_to(r);
    r.push_back({"x_shape", x_});
    return r;
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("slice_grad", in, 1);
    expect_float("slice_grad", in[0], "dy");
    const Shape y = slice_shape(slice_geom("slice_grad", a_, x_));
    if (!shapes_agree(in[0].shape, y))
      op_error("slice_grad", "dy must be " + shape_str(y) + " for x " + shape_str(x_) + " and " + a_.str() +
                                 ", got " + spec_str(in[0]));
    return {{x_, in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const SliceGeom g = slice_geom("slice_grad", a_, x_);
    kern::dispatch_float(in[0].dtype(), "slice_grad", [&](auto z) {
      using T = decltype(z);
      T* dx = out[0].data<T>();
      zero_fill(dx, out[0].numel());
      slice_copy<true, T>(g, x_, dx, in[0].data<T>());
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    return {internal::add_node(std::make_shared<StridedSlice>(a_), {cot[0]})[0]};
  }

 private:
  SliceArgs a_;
  Shape x_;
};

Blob slice_grad(Blob dy, const SliceArgs& a, const Shape& x_shape) {
  if (!dy.defined()) return Blob();
  return internal::add_node(std::make_shared<StridedSliceGrad>(a, x_shape), {dy})[0];
}

// ===========================================================================
// split

class Split final : public Primitive {
 public:
  Split(int axis, std::vector<int64_t> sizes) : axis_(axis), sizes_(std::move(sizes)) {}
  OpKind kind() const override { return OpKind::Split; }
  Attrs attributes() const override { return {{"axis", int64_t{axis_}}, {"split", sizes_}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("split", in, 1);
    const Shape& xs = in[0].shape;
    if (xs.empty()) op_error("split", "cannot split a scalar (x is " + spec_str(in[0]) + ")");
    const int ax = kern::norm_axis("split", axis_, static_cast<int>(xs.size()));
    if (sizes_.empty()) op_error("split", "needs at least one part size");
    int64_t sum = 0;
    for (int64_t s : sizes_) {
      if (s < 0) op_error("split", "part sizes must be >= 0, got " + ints_str(sizes_));
      sum += s;
    }
    if (xs[ax] >= 0 && sum != xs[ax])
      op_error("split", "part sizes " + ints_str(sizes_) + " add up to " + std::to_string(sum) + " but axis " +
                            std::to_string(axis_) + " of x " + shape_str(xs) + " has " + std::to_string(xs[ax]));
    std::vector<TensorSpec> out;
    for (int64_t s : sizes_) {
      Shape o = xs;
      o[ax] = s;
      out.push_back({o, in[0].dtype});
    }
    return out;
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const Shape& xs = in[0].shape();
    const int ax = kern::norm_axis("split", axis_, in[0].ndim());
    const int64_t outer = span(xs, 0, ax), es = static_cast<int64_t>(dtype_size(in[0].dtype()));
    const int64_t slab = xs[ax] * span(xs, ax + 1, xs.size()) * es;  // bytes of x per outer index
    const auto* x = static_cast<const char*>(in[0].raw());
    const size_t k = out.size();
    // For each outer index the parts are consecutive runs of x's slab.
#pragma omp parallel for if (in[0].numel() > kern::kParallelGrain && outer > 1)
    for (int64_t o = 0; o < outer; ++o) {
      int64_t at = o * slab;
      for (size_t p = 0; p < k; ++p) {
        const int64_t bytes = static_cast<int64_t>(out[p].nbytes()) / std::max<int64_t>(outer, 1);
        if (bytes > 0) std::memcpy(static_cast<char*>(out[p].raw()) + o * bytes, x + at, bytes);
        at += bytes;
      }
    }
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>& outs, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    // Parts without a cotangent contribute zeros.
    std::vector<Blob> parts;
    for (size_t p = 0; p < outs.size(); ++p) parts.push_back(cot[p].defined() ? cot[p] : zeros_like(outs[p]));
    return {concat(parts, axis_)};
  }

 private:
  int axis_;
  std::vector<int64_t> sizes_;
};

// ===========================================================================
// pad

enum class PadMode { Constant, Reflect, Edge };

const char* pad_mode_name(PadMode m) {
  return m == PadMode::Constant ? "constant" : m == PadMode::Reflect ? "reflect" : "edge";
}

// Index of x feeding padded position s (s = output index - begin pad) along
// an axis of length n > 0 (or any n for Constant); -1 = the constant value.
// Reflect mirrors about the end elements without repeating them, periodically
// (numpy's "reflect", also for pads longer than the axis).
inline int64_t pad_source(int64_t s, int64_t n, PadMode m) {
  if (s >= 0 && s < n) return s;
  if (m == PadMode::Constant) return -1;
  if (m == PadMode::Edge || n == 1) return s < 0 ? 0 : n - 1;
  const int64_t period = 2 * (n - 1);
  int64_t t = s % period;
  if (t < 0) t += period;
  return t < n ? t : period - t;
}

Shape pad_out_shape(const char* op, const Shape& xs, const std::vector<int64_t>& pads, PadMode m) {
  const size_t r = xs.size();
  check_rank(op, xs, "x");
  if (pads.size() != 2 * r)
    op_error(op, "pads must have 2 x rank = " + std::to_string(2 * r) + " values (begins then ends) for x " +
                     shape_str(xs) + ", got " + std::to_string(pads.size()) + ": " + ints_str(pads));
  Shape out(r);
  for (size_t d = 0; d < r; ++d) {
    if (xs[d] < 0) {  // a dynamic dim: known at the call
      out[d] = kDynamic;
      continue;
    }
    out[d] = xs[d] + pads[d] + pads[r + d];
    if (out[d] < 0)
      op_error(op, "pads " + ints_str(pads) + " crop more than the " + std::to_string(xs[d]) + " elements of axis " +
                       std::to_string(d) + " of x " + shape_str(xs));
    if (m != PadMode::Constant && xs[d] == 0 && out[d] > 0)
      op_error(op, std::string("cannot ") + pad_mode_name(m) + "-pad the empty axis " + std::to_string(d) +
                       " of x " + shape_str(xs));
  }
  return out;
}

// The innermost-dim geometry shared by the pad kernels: output positions
// [j0, j1) of a row copy x[j - b] (the interior); the rest is padding.
struct PadRow {
  int64_t b, n, len, j0, j1;  // begin pad, x length, output length
};
PadRow pad_row(const Shape& xs, const Shape& ys, const std::vector<int64_t>& pads) {
  const int r = static_cast<int>(xs.size());
  PadRow p;
  p.b = pads[r - 1], p.n = xs[r - 1], p.len = ys[r - 1];
  p.j0 = std::clamp<int64_t>(p.b, 0, p.len);
  p.j1 = std::clamp<int64_t>(p.b + p.n, p.j0, p.len);
  return p;
}

// Offset in x of the row feeding output row `row` (over dims 0..r-2), or -1
// when that row lies in constant padding.
inline int64_t pad_row_source(int64_t row, const Shape& xs, const Shape& ys, const int64_t* xst,
                              const std::vector<int64_t>& pads, PadMode m) {
  int64_t off = 0;
  for (int d = static_cast<int>(xs.size()) - 2; d >= 0; --d) {
    const int64_t s = pad_source(row % ys[d] - pads[d], xs[d], m);
    row /= ys[d];
    if (s < 0) return -1;
    off += s * xst[d];
  }
  return off;
}

template <class T>
void pad_forward(const Tensor& X, const Tensor& Y, const std::vector<int64_t>& pads, PadMode m, T value) {
  const Shape &xs = X.shape(), &ys = Y.shape();
  const T* x = static_cast<const T*>(X.raw());
  T* y = static_cast<T*>(Y.raw());
  const int64_t total = Y.numel();
  if (total == 0) return;
  if (xs.empty()) {
    *y = *x;
    return;
  }
  int64_t xst[kMaxRank];
  strides_of(xs, xst);
  const PadRow p = pad_row(xs, ys, pads);
  const int64_t rows = total / p.len;
#pragma omp parallel for if (total > kern::kParallelGrain)
  for (int64_t row = 0; row < rows; ++row) {
    T* out = y + row * p.len;
    const int64_t src = pad_row_source(row, xs, ys, xst, pads, m);
    if (src < 0) {
      std::fill_n(out, p.len, value);
      continue;
    }
    const T* in = x + src;
    for (int64_t j = 0; j < p.j0; ++j) {
      const int64_t s = pad_source(j - p.b, p.n, m);
      out[j] = s < 0 ? value : in[s];
    }
    std::copy_n(in + (p.j0 - p.b), p.j1 - p.j0, out + p.j0);
    for (int64_t j = p.j1; j < p.len; ++j) {
      const int64_t s = pad_source(j - p.b, p.n, m);
      out[j] = s < 0 ? value : in[s];
    }
  }
}

// dx = the adjoint of pad: every output element adds its dy into the x
// element it was copied from (constant padding feeds nothing back).
template <class T>
void pad_backward(const Tensor& DY, const Tensor& DX, const std::vector<int64_t>& pads, PadMode m) {
  const Shape &xs = DX.shape(), &ys = DY.shape();
  const T* dy = static_cast<const T*>(DY.raw());
  T* dx = static_cast<T*>(DX.raw());
  zero_fill(dx, DX.numel());
  const int64_t total = DY.numel();
  if (total == 0 || DX.numel() == 0) return;
  if (xs.empty()) {
    *dx = *dy;
    return;
  }
  const int r = static_cast<int>(xs.size());
  int64_t xst[kMaxRank];
  strides_of(xs, xst);
  const PadRow p = pad_row(xs, ys, pads);
  const int64_t rows = total / p.len;
  // With constant padding every output row comes from its own x row. With
  // reflect/edge several output rows read the same x row, so their adds must
  // not race: rows that differ in a leading unpadded dim never share one, and
  // each task takes a whole block of such rows (serial inside the block).
  int64_t blocks = rows;
  if (m != PadMode::Constant) {
    blocks = 1;
    for (int d = 0; d < r - 1 && pads[d] == 0 && pads[r + d] == 0; ++d) blocks *= xs[d];
  }
  const int64_t per = rows / blocks;
#pragma omp parallel for if (total > kern::kParallelGrain && blocks > 1)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    for (int64_t row = blk * per; row < (blk + 1) * per; ++row) {
      const int64_t src = pad_row_source(row, xs, ys, xst, pads, m);
      if (src < 0) continue;
      const T* g = dy + row * p.len;
      T* o = dx + src;
      for (int64_t j = 0; j < p.j0; ++j) {
        const int64_t s = pad_source(j - p.b, p.n, m);
        if (s >= 0) o[s] += g[j];
      }
      T* oi = o - p.b;  // output j reads x[j - b]
      for (int64_t j = p.j0; j < p.j1; ++j) oi[j] += g[j];
      for (int64_t j = p.j1; j < p.len; ++j) {
        const int64_t s = pad_source(j - p.b, p.n, m);
        if (s >= 0) o[s] += g[j];
      }
    }
  }
}

Blob pad_grad(Blob dy, const std::vector<int64_t>& pads, PadMode m, const Shape& x_shape);

class Pad final : public Primitive {
 public:
  Pad(std::vector<int64_t> pads, PadMode m, double value) : pads_(std::move(pads)), m_(m), value_(value) {}
  OpKind kind() const override { return OpKind::Pad; }
  Attrs attributes() const override {
    return {{"pads", pads_}, {"mode", std::string(pad_mode_name(m_))}, {"value", value_}};
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("pad", in, 1);
    return {{pad_out_shape("pad", in[0].shape, pads_, m_), in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      pad_forward<T>(in[0], out[0], pads_, m_, static_cast<T>(value_));
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    return {pad_grad(cot[0], pads_, m_, in[0].shape())};
  }

 private:
  std::vector<int64_t> pads_;
  PadMode m_;
  double value_;
};

class PadGrad final : public Primitive {
 public:
  PadGrad(std::vector<int64_t> pads, PadMode m, Shape x_shape) : pads_(std::move(pads)), m_(m), x_(std::move(x_shape)) {}
  OpKind kind() const override { return OpKind::PadGrad; }
  Attrs attributes() const override {
    return {{"pads", pads_}, {"mode", std::string(pad_mode_name(m_))}, {"x_shape", x_}};
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("pad_grad", in, 1);
    expect_float("pad_grad", in[0], "dy");
    const Shape y = pad_out_shape("pad_grad", x_, pads_, m_);
    if (!shapes_agree(in[0].shape, y))
      op_error("pad_grad", "dy must be " + shape_str(y) + " for x " + shape_str(x_) + " and pads " + ints_str(pads_) +
                               ", got " + spec_str(in[0]));
    return {{x_, in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_float(in[0].dtype(), "pad_grad", [&](auto z) { pad_backward<decltype(z)>(in[0], out[0], pads_, m_); });
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    // Linear in dy; the adjoint of the scatter is the pad itself (value 0).
    return {internal::add_node(std::make_shared<Pad>(pads_, m_, 0.0), {cot[0]})[0]};
  }

 private:
  std::vector<int64_t> pads_;
  PadMode m_;
  Shape x_;
};

Blob pad_grad(Blob dy, const std::vector<int64_t>& pads, PadMode m, const Shape& x_shape) {
  if (!dy.defined()) return Blob();
  return internal::add_node(std::make_shared<PadGrad>(pads, m, x_shape), {dy})[0];
}

// ONNX NonZero: the indices of the nonzero elements, int64 (rank, count),
// row-major. The count depends on the data: infer() gives it as kDynamic,
// infer_data() counts, and the compiler cuts the call at this op.
class NonZero final : public Primitive {
 public:
  OpKind kind() const override { return OpKind::NonZero; }
  bool differentiable_input(int) const override { return false; }
  bool output_shape_from_data() const override { return true; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("nonzero", in, 1);
    check_rank("nonzero", in[0].shape, "x");
    return {{{static_cast<int64_t>(std::max<size_t>(in[0].shape.size(), 1)), kDynamic}, DType::Int64}};
  }
  static int64_t count(const Tensor& x) {
    int64_t n = 0;
    kern::dispatch_all(x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* p = static_cast<const T*>(x.raw());
      const int64_t m = x.numel();
#pragma omp parallel for reduction(+ : n) if (m > kern::kParallelGrain)
      for (int64_t i = 0; i < m; ++i) n += p[i] != T(0);
    });
    return n;
  }
  std::vector<TensorSpec> infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const override {
    infer(in);
    return {{{static_cast<int64_t>(std::max<size_t>(in[0].shape.size(), 1)), count(v[0])}, DType::Int64}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const Tensor& x = in[0];
    const int r = x.ndim();
    const int64_t cnt = out[0].dim(1);
    int64_t* y = out[0].data<int64_t>();
    int64_t st[kMaxRank];
    strides_of(x.shape(), st);
    kern::dispatch_all(x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* p = static_cast<const T*>(x.raw());
      const int64_t m = x.numel();
      int64_t k = 0;
      for (int64_t i = 0; i < m && k < cnt; ++i) {
        if (p[i] == T(0)) continue;
        if (r == 0) y[k] = 0;  // a scalar: one row of index 0 (numpy's nonzero of a 0-d array as 1-d)
        for (int d = 0; d < r; ++d) y[d * cnt + k] = (i / st[d]) % x.dim(d);
        ++k;
      }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }
};


// ===========================================================================
// gather_nd (ONNX GatherND) and its gradient

// Output of gather_nd: indices.shape[:-1] + data.shape[b + m:], m the last
// dim of indices, b the batch dims.
TensorSpec gather_nd_spec(const char* op, const TensorSpec& x, const TensorSpec& idx, int b) {
  check_rank(op, x.shape, "data");
  check_rank(op, idx.shape, "indices");
  if (idx.dtype != DType::Int32 && idx.dtype != DType::Int64)
    op_error(op, "indices must be int32 or int64, got " + spec_str(idx));
  const int r = static_cast<int>(x.shape.size()), q = static_cast<int>(idx.shape.size());
  if (q < 1) op_error(op, "indices must have rank >= 1, got " + spec_str(idx));
  if (b < 0 || b >= std::min(r, q))
    op_error(op, "batch_dims " + std::to_string(b) + " must be below the ranks of data " + shape_str(x.shape) +
                     " and indices " + shape_str(idx.shape));
  for (int i = 0; i < b; ++i)
    if (!dims_agree(x.shape[i], idx.shape[i]))
      op_error(op, "batch dim " + std::to_string(i) + " differs: data " + shape_str(x.shape) + ", indices " +
                       shape_str(idx.shape));
  const int64_t m = idx.shape.back();
  if (m < 0) op_error(op, "the last dim of indices " + shape_str(idx.shape) + " must be known");
  if (m < 1 || m > r - b)
    op_error(op, "the last dim of indices " + shape_str(idx.shape) + " must be in 1.." + std::to_string(r - b) +
                     " for data " + shape_str(x.shape) + " and batch_dims " + std::to_string(b));
  Shape out(idx.shape.begin(), idx.shape.end() - 1);
  out.insert(out.end(), x.shape.begin() + b + m, x.shape.end());
  return {out, x.dtype};
}

// The geometry of one gather_nd: `batches` blocks, each of `per` index
// tuples of m entries picking slices of `slice` elements from a data block
// of `block` elements whose first m dims are dims[0..m).
struct NdGeom {
  int64_t batches = 1, per = 1, m = 0, slice = 1, block = 1;
  int64_t dims[kMaxRank], strides[kMaxRank];
};
NdGeom nd_geom(const Shape& xs, const Shape& is, int b) {
  NdGeom g;
  const int r = static_cast<int>(xs.size());
  g.m = is.back();
  g.batches = span(xs, 0, b);
  g.per = span(is, b, is.size() - 1);
  g.slice = span(xs, b + g.m, r);
  g.block = span(xs, b, r);
  for (int64_t i = 0; i < g.m; ++i) {
    g.dims[i] = xs[b + i];
    g.strides[i] = span(xs, b + i + 1, r);
  }
  return g;
}

// The offsets (in elements, within a data block) of every index tuple,
// checked before any data moves.
template <class I>
void nd_offsets(const char* op, const NdGeom& g, const I* ind, int64_t* off) {
  for (int64_t t = 0; t < g.batches * g.per; ++t) {
    int64_t o = 0;
    for (int64_t k = 0; k < g.m; ++k) {
      int64_t v = ind[t * g.m + k];
      const int64_t n = g.dims[k];
      if (v < -n || v >= n)
        op_error(op, "index " + std::to_string(v) + " is out of range for a dim of size " + std::to_string(n) +
                         " (valid: " + std::to_string(-n) + " to " + std::to_string(n - 1) + ")");
      if (v < 0) v += n;
      o += v * g.strides[k];
    }
    off[t] = o;
  }
}

Blob gather_nd_grad(Blob dy, Blob indices, int batch_dims, const Shape& x_shape);

// y = data[indices] per ONNX GatherND. Inputs data, indices.
class GatherND final : public Primitive {
 public:
  explicit GatherND(int batch_dims) : b_(batch_dims) {}
  OpKind kind() const override { return OpKind::GatherND; }
  Attrs attributes() const override { return {{"batch_dims", int64_t{b_}}}; }
  bool differentiable_input(int i) const override { return i == 0; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("gather_nd", in, 2);
    return {gather_nd_spec("gather_nd", in[0], in[1], b_)};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const NdGeom g = nd_geom(in[0].shape(), in[1].shape(), b_);
    const int64_t tuples = g.batches * g.per;
    std::vector<int64_t> off(static_cast<size_t>(tuples));
    dispatch_index(in[1].dtype(), "gather_nd", [&](auto zi) {
      using I = decltype(zi);
      nd_offsets("gather_nd", g, static_cast<const I*>(in[1].raw()), off.data());
    });
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      const T* x = static_cast<const T*>(in[0].raw());
      T* y = static_cast<T*>(out[0].raw());
#pragma omp parallel for if (tuples * g.slice > kern::kParallelGrain)
      for (int64_t t = 0; t < tuples; ++t)
        std::copy_n(x + (t / g.per) * g.block + off[t], g.slice, y + t * g.slice);
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    return {gather_nd_grad(cot[0], in[1], b_, in[0].shape())};
  }

 private:
  int b_;
};

// dx = zeros(x_shape); dx[indices[t]] += dy[t]. Inputs dy, indices.
class GatherNDGrad final : public Primitive {
 public:
  GatherNDGrad(int batch_dims, Shape x_shape) : b_(batch_dims), x_(std::move(x_shape)) {}
  OpKind kind() const override { return OpKind::GatherNDGrad; }
  Attrs attributes() const override { return {{"batch_dims", int64_t{b_}}, {"x_shape", x_}}; }
  bool differentiable_input(int i) const override { return i == 0; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("gather_nd_grad", in, 2);
    expect_float("gather_nd_grad", in[0], "dy");
    const TensorSpec y = gather_nd_spec("gather_nd_grad", {x_, in[0].dtype}, in[1], b_);
    if (!specs_agree(in[0], y))
      op_error("gather_nd_grad", "dy must be " + spec_str(y) + " for data " + shape_str(x_) + " and indices " +
                                     spec_str(in[1]) + ", got " + spec_str(in[0]));
    return {{x_, in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const NdGeom g = nd_geom(x_, in[1].shape(), b_);
    const int64_t tuples = g.batches * g.per;
    std::vector<int64_t> off(static_cast<size_t>(tuples));
    dispatch_index(in[1].dtype(), "gather_nd_grad", [&](auto zi) {
      using I = decltype(zi);
      nd_offsets("gather_nd_grad", g, static_cast<const I*>(in[1].raw()), off.data());
    });
    kern::dispatch_float(in[0].dtype(), "gather_nd_grad", [&](auto z) {
      using T = decltype(z);
      const T* dy = in[0].data<T>();
      T* dx = out[0].data<T>();
      zero_fill(dx, out[0].numel());
      // Repeated index tuples add into the same slice: a task owns one batch
      // block of dx (tuples of other batches never reach it).
#pragma omp parallel for if (tuples * g.slice > kern::kParallelGrain && g.batches > 1)
      for (int64_t bb = 0; bb < g.batches; ++bb)
        for (int64_t t = bb * g.per; t < (bb + 1) * g.per; ++t) {
          const T* src = dy + t * g.slice;
          T* dst = dx + bb * g.block + off[t];
          for (int64_t i = 0; i < g.slice; ++i) dst[i] += src[i];
        }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    return {internal::add_node(std::make_shared<GatherND>(b_), {cot[0], in[1]})[0]};
  }

 private:
  int b_;
  Shape x_;
};

Blob gather_nd_grad(Blob dy, Blob indices, int batch_dims, const Shape& x_shape) {
  if (!dy.defined()) return Blob();
  return internal::add_node(std::make_shared<GatherNDGrad>(batch_dims, x_shape), {dy, indices})[0];
}

// ===========================================================================
// scatter_elements (ONNX ScatterElements)

enum class ScatterRed { None, Add, Mul, Max, Min };
const char* scatter_red_name(ScatterRed r) {
  switch (r) {
    case ScatterRed::None: return "none";
    case ScatterRed::Add: return "add";
    case ScatterRed::Mul: return "mul";
    case ScatterRed::Max: return "max";
    case ScatterRed::Min: return "min";
  }
  return "none";
}

// y = data; y[..., indices[i, j, ...], ...] (op)= updates[i, j, ...] along
// `axis`. Inputs data, indices, updates.
class ScatterElements final : public Primitive {
 public:
  ScatterElements(int axis, ScatterRed red) : axis_(axis), red_(red) {}
  OpKind kind() const override { return OpKind::ScatterElements; }
  Attrs attributes() const override {
    return {{"axis", int64_t{axis_}}, {"reduction", std::string(scatter_red_name(red_))}};
  }
  // The gradient flows to data for "none" and "add" (the engine's own use:
  // top_k's gradient scatter-adds dy into zeros).
  bool differentiable_input(int i) const override {
    return i == 0 && (red_ == ScatterRed::None || red_ == ScatterRed::Add);
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("scatter_elements", in, 3);
    const TensorSpec &x = in[0], &idx = in[1], &u = in[2];
    check_rank("scatter_elements", x.shape, "data");
    if (idx.dtype != DType::Int32 && idx.dtype != DType::Int64)
      op_error("scatter_elements", "indices must be int32 or int64, got " + spec_str(idx));
    if (u.dtype != x.dtype)
      op_error("scatter_elements", "updates " + spec_str(u) + " must have data's dtype " + dtype_name(x.dtype));
    if (!shapes_agree(idx.shape, u.shape))
      op_error("scatter_elements", "indices " + spec_str(idx) + " and updates " + spec_str(u) + " differ in shape");
    if (idx.shape.size() != x.shape.size())
      op_error("scatter_elements", "indices " + spec_str(idx) + " must have data's rank (data " + spec_str(x) + ")");
    if (x.shape.empty()) op_error("scatter_elements", "data must have rank >= 1");
    kern::norm_axis("scatter_elements", axis_, static_cast<int>(x.shape.size()));
    if (red_ != ScatterRed::None) expect_not_bool("scatter_elements", x, "data");
    return {x};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const Shape &xs = in[0].shape(), &is = in[1].shape();
    const int r = static_cast<int>(xs.size());
    const int ax = kern::norm_axis("scatter_elements", axis_, r);
    for (int d = 0; d < r; ++d)
      if (d != ax && is[d] > xs[d])
        op_error("scatter_elements", "indices " + shape_str(is) + " exceed data " + shape_str(xs) + " in dim " +
                                         std::to_string(d));
    int64_t xst[kMaxRank], ist[kMaxRank];
    strides_of(xs, xst);
    strides_of(is, ist);
    const int64_t m = in[1].numel(), n = xs[ax];
    dispatch_index(in[1].dtype(), "scatter_elements", [&](auto zi) {
      using I = decltype(zi);
      const I* ind = static_cast<const I*>(in[1].raw());
      check_indices("scatter_elements", ind, m, n, ax);
      kern::dispatch_all(in[0].dtype(), [&](auto z) {
        using T = decltype(z);
        const T* x = static_cast<const T*>(in[0].raw());
        const T* u = static_cast<const T*>(in[2].raw());
        T* y = static_cast<T*>(out[0].raw());
        std::copy_n(x, in[0].numel(), y);
        // In index order, so that repeated indices without a reduction keep
        // the last update (as ONNX Runtime does).
        for (int64_t e = 0; e < m; ++e) {
          int64_t off = 0, q = e;
          for (int d = 0; d < r; ++d) {
            const int64_t i = q / ist[d];
            q %= ist[d];
            int64_t k = i;
            if (d == ax) k = ind[e] < 0 ? ind[e] + n : ind[e];
            off += k * xst[d];
          }
          T& dst = y[off];
          const T v = u[e];
          if constexpr (std::is_same_v<T, bool>) {
            dst = v;
          } else {
            switch (red_) {
              case ScatterRed::None: dst = v; break;
              case ScatterRed::Add: dst = static_cast<T>(dst + v); break;
              case ScatterRed::Mul: dst = static_cast<T>(dst * v); break;
              case ScatterRed::Max: dst = std::max(dst, v); break;
              case ScatterRed::Min: dst = std::min(dst, v); break;
            }
          }
        }
      });
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    if (red_ == ScatterRed::Add) return {cot[0]};
    // Overwritten positions get no gradient: dy with zeros scattered there.
    return {internal::add_node(std::make_shared<ScatterElements>(axis_, ScatterRed::None),
                               {cot[0], in[1], zeros_like(in[2])})[0]};
  }

 private:
  int axis_;
  ScatterRed red_;
};

// ===========================================================================
// gather_elements (ONNX GatherElements) and its gradient

// indices must have data's rank, and no dim but axis larger than data's.
void gather_elements_check(const char* op, const Shape& xs, const TensorSpec& idx, int axis) {
  check_rank(op, xs, "data");
  if (idx.dtype != DType::Int32 && idx.dtype != DType::Int64)
    op_error(op, "indices must be int32 or int64, got " + spec_str(idx));
  if (xs.empty()) op_error(op, "data must have rank >= 1");
  if (idx.shape.size() != xs.size())
    op_error(op, "indices " + spec_str(idx) + " must have data's rank (data " + shape_str(xs) + ")");
  const int ax = kern::norm_axis(op, axis, static_cast<int>(xs.size()));
  for (size_t d = 0; d < xs.size(); ++d)
    if (static_cast<int>(d) != ax && idx.shape[d] >= 0 && xs[d] >= 0 && idx.shape[d] > xs[d])
      op_error(op, "indices " + shape_str(idx.shape) + " exceed data " + shape_str(xs) + " in dim " + std::to_string(d));
}

// For every element e of indices (row-major), the offset into data of the
// element it picks; indices are checked before anything moves.
template <class I>
void elements_offsets(const char* op, const Shape& xs, const Shape& is, int ax, const I* ind, int64_t* off) {
  const int r = static_cast<int>(xs.size());
  int64_t xst[kMaxRank], ist[kMaxRank];
  strides_of(xs, xst);
  strides_of(is, ist);
  const int64_t m = numel(is), n = xs[ax];
  check_indices(op, ind, m, n, ax);
  for (int64_t e = 0; e < m; ++e) {
    int64_t o = 0, q = e;
    for (int d = 0; d < r; ++d) {
      const int64_t i = q / ist[d];
      q %= ist[d];
      o += (d == ax ? (ind[e] < 0 ? ind[e] + n : ind[e]) : i) * xst[d];
    }
    off[e] = o;
  }
}

Blob gather_elements_grad(Blob dy, Blob indices, int axis, const Shape& x_shape);

// y[i, j, ...] = data[..., indices[i, j, ...], ...] along `axis`; y has
// indices' shape. Inputs data, indices.
class GatherElements final : public Primitive {
 public:
  explicit GatherElements(int axis) : axis_(axis) {}
  OpKind kind() const override { return OpKind::GatherElements; }
  Attrs attributes() const override { return {{"axis", int64_t{axis_}}}; }
  bool differentiable_input(int i) const override { return i == 0; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("gather_elements", in, 2);
    gather_elements_check("gather_elements", in[0].shape, in[1], axis_);
    return {{in[1].shape, in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const Shape &xs = in[0].shape(), &is = in[1].shape();
    const int ax = kern::norm_axis("gather_elements", axis_, in[0].ndim());
    for (size_t d = 0; d < xs.size(); ++d)  // dims known per call
      if (static_cast<int>(d) != ax && is[d] > xs[d])
        op_error("gather_elements", "indices " + shape_str(is) + " exceed data " + shape_str(xs) + " in dim " +
                                        std::to_string(d));
    const int64_t m = in[1].numel();
    std::vector<int64_t> off(static_cast<size_t>(m));
    dispatch_index(in[1].dtype(), "gather_elements", [&](auto zi) {
      using I = decltype(zi);
      elements_offsets("gather_elements", xs, is, ax, static_cast<const I*>(in[1].raw()), off.data());
    });
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      const T* x = static_cast<const T*>(in[0].raw());
      T* y = static_cast<T*>(out[0].raw());
#pragma omp parallel for if (m > kern::kParallelGrain)
      for (int64_t e = 0; e < m; ++e) y[e] = x[off[e]];
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    return {gather_elements_grad(cot[0], in[1], axis_, in[0].shape())};
  }

 private:
  int axis_;
};

// dx = zeros(x_shape); dx[..., indices[e], ...] += dy[e] along `axis`.
// Inputs dy, indices. Its own gradient is gather_elements again.
class GatherElementsGrad final : public Primitive {
 public:
  GatherElementsGrad(int axis, Shape x_shape) : axis_(axis), x_(std::move(x_shape)) {}
  OpKind kind() const override { return OpKind::GatherElementsGrad; }
  Attrs attributes() const override { return {{"axis", int64_t{axis_}}, {"x_shape", x_}}; }
  bool differentiable_input(int i) const override { return i == 0; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("gather_elements_grad", in, 2);
    expect_float("gather_elements_grad", in[0], "dy");
    gather_elements_check("gather_elements_grad", x_, in[1], axis_);
    if (!shapes_agree(in[0].shape, in[1].shape))
      op_error("gather_elements_grad", "dy " + spec_str(in[0]) + " must have the shape of indices " + spec_str(in[1]));
    return {{x_, in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const Shape& is = in[1].shape();
    const int ax = kern::norm_axis("gather_elements_grad", axis_, static_cast<int>(x_.size()));
    const int64_t m = in[1].numel();
    std::vector<int64_t> off(static_cast<size_t>(m));
    dispatch_index(in[1].dtype(), "gather_elements_grad", [&](auto zi) {
      using I = decltype(zi);
      elements_offsets("gather_elements_grad", x_, is, ax, static_cast<const I*>(in[1].raw()), off.data());
    });
    kern::dispatch_float(in[0].dtype(), "gather_elements_grad", [&](auto z) {
      using T = decltype(z);
      const T* dy = in[0].data<T>();
      T* dx = out[0].data<T>();
      zero_fill(dx, out[0].numel());
      for (int64_t e = 0; e < m; ++e) dx[off[e]] += dy[e];  // repeated indices add up
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    return {internal::add_node(std::make_shared<GatherElements>(axis_), {cot[0], in[1]})[0]};
  }

 private:
  int axis_;
  Shape x_;
};

Blob gather_elements_grad(Blob dy, Blob indices, int axis, const Shape& x_shape) {
  if (!dy.defined()) return Blob();
  return internal::add_node(std::make_shared<GatherElementsGrad>(axis, x_shape), {dy, indices})[0];
}

// ===========================================================================
// scatter_nd (ONNX ScatterND)

// y = data; y[indices[t]] (op)= updates[t] for every index tuple t (the last
// dim of indices), in order. Inputs data, indices, updates
// (indices.shape[:-1] + data.shape[m:]).
class ScatterND final : public Primitive {
 public:
  explicit ScatterND(ScatterRed red) : red_(red) {}
  OpKind kind() const override { return OpKind::ScatterND; }
  Attrs attributes() const override { return {{"reduction", std::string(scatter_red_name(red_))}}; }
  // Gradients for "none" and "add": dy to data (zero where "none"
  // overwrote), dy at the indices to updates.
  bool differentiable_input(int i) const override {
    return i != 1 && (red_ == ScatterRed::None || red_ == ScatterRed::Add);
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("scatter_nd", in, 3);
    const TensorSpec &x = in[0], &idx = in[1], &u = in[2];
    if (x.shape.empty()) op_error("scatter_nd", "data must have rank >= 1");
    const TensorSpec want = gather_nd_spec("scatter_nd", x, idx, 0);
    if (u.dtype != x.dtype)
      op_error("scatter_nd", "updates " + spec_str(u) + " must have data's dtype " + dtype_name(x.dtype));
    if (!shapes_agree(u.shape, want.shape))
      op_error("scatter_nd", "updates must have shape " + shape_str(want.shape) + " for data " + shape_str(x.shape) +
                                 " and indices " + shape_str(idx.shape) + ", got " + spec_str(u));
    if (red_ != ScatterRed::None) expect_not_bool("scatter_nd", x, "data");
    return {x};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const NdGeom g = nd_geom(in[0].shape(), in[1].shape(), 0);
    const int64_t tuples = g.per;
    std::vector<int64_t> off(static_cast<size_t>(tuples));
    dispatch_index(in[1].dtype(), "scatter_nd", [&](auto zi) {
      using I = decltype(zi);
      nd_offsets("scatter_nd", g, static_cast<const I*>(in[1].raw()), off.data());
    });
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      const T* u = static_cast<const T*>(in[2].raw());
      T* y = static_cast<T*>(out[0].raw());
      std::copy_n(static_cast<const T*>(in[0].raw()), in[0].numel(), y);
      for (int64_t t = 0; t < tuples; ++t) {  // in order: a repeated tuple without reduction keeps the last
        T* dst = y + off[t];
        const T* src = u + t * g.slice;
        for (int64_t i = 0; i < g.slice; ++i) {
          if constexpr (std::is_same_v<T, bool>) {
            dst[i] = src[i];
          } else {
            switch (red_) {
              case ScatterRed::None: dst[i] = src[i]; break;
              case ScatterRed::Add: dst[i] = static_cast<T>(dst[i] + src[i]); break;
              case ScatterRed::Mul: dst[i] = static_cast<T>(dst[i] * src[i]); break;
              case ScatterRed::Max: dst[i] = std::max(dst[i], src[i]); break;
              case ScatterRed::Min: dst[i] = std::min(dst[i], src[i]); break;
            }
          }
        }
      }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    std::vector<Blob> r;
    for (int a : argnums) {
      if (a == 2) r.push_back(gather_nd(cot[0], in[1], 0));
      else if (red_ == ScatterRed::Add) r.push_back(cot[0]);
      else  // overwritten slices get no gradient
        r.push_back(internal::add_node(std::make_shared<ScatterND>(ScatterRed::None), {cot[0], in[1], zeros_like(in[2])})[0]);
    }
    return r;
  }

 private:
  ScatterRed red_;
};

// ===========================================================================
// unique (ONNX Unique)

// The distinct slices of x along axis (axis < 0: its elements flattened),
// found by sorting the slices: for each distinct one (in ascending order, or
// by first occurrence), the index of its first occurrence and its count, and
// for each slice of x, the distinct one it equals.
struct UniqueSets {
  std::vector<int64_t> first, inverse, counts;
};

UniqueSets unique_sets(const Tensor& x, int axis, bool sorted) {
  const Shape& xs = x.shape();
  int64_t n = x.numel(), outer = 1, inner = 1;
  if (axis >= 0) {
    n = xs[axis];
    outer = span(xs, 0, axis);
    inner = span(xs, axis + 1, xs.size());
  }
  UniqueSets u;
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  kern::dispatch_all(x.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* p = static_cast<const T*>(x.raw());
    // Slice a against slice b, element by element in row-major order.
    auto cmp = [&](int64_t a, int64_t b) {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const T va = p[(o * n + a) * inner + i], vb = p[(o * n + b) * inner + i];
          if (va < vb) return -1;
          if (vb < va) return 1;
        }
      return 0;
    };
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return cmp(a, b) < 0; });
    std::vector<int64_t> group(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = order[static_cast<size_t>(k)];
      if (k == 0 || cmp(order[static_cast<size_t>(k - 1)], i) != 0) {
        u.first.push_back(i);  // stable: the first occurrence leads its group
        u.counts.push_back(0);
      }
      group[static_cast<size_t>(i)] = static_cast<int64_t>(u.first.size()) - 1;
      u.counts.back()++;
    }
    std::vector<int64_t> rank(u.first.size());  // a group's position in the output
    for (size_t g = 0; g < rank.size(); ++g) rank[g] = static_cast<int64_t>(g);
    if (!sorted) {
      std::vector<int64_t> by_first(u.first.size());
      for (size_t g = 0; g < by_first.size(); ++g) by_first[g] = static_cast<int64_t>(g);
      std::sort(by_first.begin(), by_first.end(), [&](int64_t a, int64_t b) { return u.first[a] < u.first[b]; });
      std::vector<int64_t> f, c;
      for (size_t r = 0; r < by_first.size(); ++r) {
        rank[static_cast<size_t>(by_first[r])] = static_cast<int64_t>(r);
        f.push_back(u.first[static_cast<size_t>(by_first[r])]);
        c.push_back(u.counts[static_cast<size_t>(by_first[r])]);
      }
      u.first = f, u.counts = c;
    }
    for (int64_t i = 0; i < n; ++i) u.inverse.push_back(rank[static_cast<size_t>(group[static_cast<size_t>(i)])]);
  });
  return u;
}

// Outputs y, indices, inverse_indices, counts. Their size depends on the
// data: infer() gives it as kDynamic, infer_data() counts.
class Unique final : public Primitive {
 public:
  Unique(int axis, bool sorted) : axis_(axis), sorted_(sorted) {}
  OpKind kind() const override { return OpKind::Unique; }
  // "axis" only when the op has one.
  Attrs attributes() const override {
    Attrs a{{"sorted", int64_t{sorted_}}};
    if (axis_ != kNoAxis) a.emplace_back("axis", int64_t{axis_});
    return a;
  }
  bool differentiable_input(int) const override { return false; }
  bool output_shape_from_data() const override { return true; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("unique", in, 1);
    check_rank("unique", in[0].shape, "x");
    return specs(in[0], kDynamic);
  }
  std::vector<TensorSpec> infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const override {
    infer(in);
    return specs(in[0], static_cast<int64_t>(unique_sets(v[0], ax(in[0].shape), sorted_).first.size()));
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const int a = ax(in[0].shape());
    const UniqueSets u = unique_sets(in[0], a, sorted_);
    const Shape& xs = in[0].shape();
    const int64_t outer = a < 0 ? 1 : span(xs, 0, a), inner = a < 0 ? 1 : span(xs, a + 1, xs.size());
    const int64_t n = a < 0 ? in[0].numel() : xs[a], K = static_cast<int64_t>(u.first.size());
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      const T* x = static_cast<const T*>(in[0].raw());
      T* y = static_cast<T*>(out[0].raw());
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < K; ++k)
          std::copy_n(x + (o * n + u.first[static_cast<size_t>(k)]) * inner, inner, y + (o * K + k) * inner);
    });
    std::copy(u.first.begin(), u.first.end(), out[1].data<int64_t>());
    std::copy(u.inverse.begin(), u.inverse.end(), out[2].data<int64_t>());
    std::copy(u.counts.begin(), u.counts.end(), out[3].data<int64_t>());
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }

 private:
  int ax(const Shape& xs) const { return axis_ == kNoAxis ? -1 : kern::norm_axis("unique", axis_, static_cast<int>(xs.size())); }
  std::vector<TensorSpec> specs(const TensorSpec& x, int64_t K) const {
    const int a = ax(x.shape);
    Shape y{K};
    int64_t n = 1;
    if (a >= 0) {
      y = x.shape;
      y[a] = K;
      n = x.shape[a];
    } else {
      for (int64_t d : x.shape) n = d < 0 || n < 0 ? kDynamic : n * d;
    }
    return {{y, x.dtype}, {{K}, DType::Int64}, {{n}, DType::Int64}, {{K}, DType::Int64}};
  }

 public:
  static constexpr int kNoAxis = INT32_MIN;

 private:
  int axis_;
  bool sorted_;
};

ScatterRed scatter_red_of(const char* op, const std::string& reduction) {
  if (reduction == "none") return ScatterRed::None;
  if (reduction == "add") return ScatterRed::Add;
  if (reduction == "mul") return ScatterRed::Mul;
  if (reduction == "max") return ScatterRed::Max;
  if (reduction == "min") return ScatterRed::Min;
  throw Error(std::string("[") + op + "] reduction must be \"none\", \"add\", \"mul\", \"max\" or \"min\", got \"" +
              reduction + "\"");
}

}  // namespace

// ---------------------------------------------------------------------------
// Builders

Blob gather(Blob x, Blob indices, int axis, const std::string& name) {
  return internal::add_node(std::make_shared<Gather>(axis), {x, indices}, name)[0];
}

Blob slice(Blob x, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
           const std::vector<int64_t>& axes, const std::vector<int64_t>& steps, const std::string& name) {
  const Shape xs = x.shape();  // throws on an undefined blob
  if (ends.size() != starts.size())
    throw Error("[slice] starts " + ints_str(starts) + " and ends " + ints_str(ends) + " differ in length (x " +
                shape_str(xs) + ")");
  SliceArgs a{starts, ends, axes, steps};
  if (a.axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) a.axes.push_back(static_cast<int64_t>(i));
  if (a.steps.empty()) a.steps.assign(starts.size(), 1);
  if (a.axes.size() != starts.size() || a.steps.size() != starts.size())
    throw Error("[slice] starts " + ints_str(starts) + ", axes " + ints_str(axes) + " and steps " + ints_str(steps) +
                " must have the same length (x " + shape_str(xs) + ")");
  return internal::add_node(std::make_shared<StridedSlice>(std::move(a)), {x}, name)[0];
}

std::vector<Blob> split(Blob x, const std::vector<int64_t>& sizes, int axis, const std::string& name) {
  return internal::add_node(std::make_shared<Split>(axis, sizes), {x}, name);
}

Blob pad(Blob x, const std::vector<int64_t>& pads, const std::string& mode, double value, const std::string& name) {
  PadMode m;
  if (mode == "constant") m = PadMode::Constant;
  else if (mode == "reflect") m = PadMode::Reflect;
  else if (mode == "edge") m = PadMode::Edge;
  else throw Error("[pad] mode must be \"constant\", \"reflect\" or \"edge\", got \"" + mode + "\"");
  return internal::add_node(std::make_shared<Pad>(pads, m, value), {x}, name)[0];
}

Blob nonzero(Blob x, const std::string& name) { return internal::add_node(std::make_shared<NonZero>(), {x}, name)[0]; }

Blob gather_nd(Blob data, Blob indices, int batch_dims, const std::string& name) {
  return internal::add_node(std::make_shared<GatherND>(batch_dims), {data, indices}, name)[0];
}

Blob scatter_elements(Blob data, Blob indices, Blob updates, int axis, const std::string& reduction,
                      const std::string& name) {
  return internal::add_node(std::make_shared<ScatterElements>(axis, scatter_red_of("scatter_elements", reduction)),
                            {data, indices, updates}, name)[0];
}

Blob gather_elements(Blob data, Blob indices, int axis, const std::string& name) {
  return internal::add_node(std::make_shared<GatherElements>(axis), {data, indices}, name)[0];
}

UniqueResult unique(Blob x, std::optional<int> axis, bool sorted, const std::string& name) {
  if (axis && *axis == Unique::kNoAxis) throw Error("[unique] axis " + std::to_string(*axis) + " is out of range");
  auto o = internal::add_node(std::make_shared<Unique>(axis ? *axis : Unique::kNoAxis, sorted), {x}, name);
  return {o[0], o[1], o[2], o[3]};
}

Blob scatter_nd(Blob data, Blob indices, Blob updates, const std::string& reduction, const std::string& name) {
  return internal::add_node(std::make_shared<ScatterND>(scatter_red_of("scatter_nd", reduction)), {data, indices, updates},
                            name)[0];
}

Blob squeeze(Blob x, const std::vector<int64_t>& axes, const std::string& name) {
  const Shape xs = x.shape();
  const int r = static_cast<int>(xs.size());
  std::vector<char> drop(r, 0);
  if (axes.empty()) {
    for (int d = 0; d < r; ++d) drop[d] = xs[d] == 1;
  }
  for (int64_t a0 : axes) {
    const int64_t a = a0 < 0 ? a0 + r : a0;
    if (a < 0 || a >= r) throw Error("[squeeze] axis " + std::to_string(a0) + " is out of range for x " + shape_str(xs));
    if (drop[a]) throw Error("[squeeze] axis " + std::to_string(a0) + " appears twice in axes " + ints_str(axes));
    if (xs[a] != 1 && xs[a] >= 0)
      throw Error("[squeeze] axis " + std::to_string(a0) + " of x " + shape_str(xs) + " has size " +
                  std::to_string(xs[a]) + ", not 1");
    drop[a] = 1;
  }
  Shape out;  // a dynamic dim kept is copied from x (internal::same_dim)
  for (int d = 0; d < r; ++d)
    if (!drop[d]) out.push_back(xs[d] < 0 ? internal::same_dim(d) : xs[d]);
  return internal::reshape_request(x, out, name);
}

Blob unsqueeze(Blob x, const std::vector<int64_t>& axes, const std::string& name) {
  const Shape xs = x.shape();
  const int r = static_cast<int>(xs.size() + axes.size());  // rank of the result
  std::vector<char> add(r, 0);
  for (int64_t a0 : axes) {
    const int64_t a = a0 < 0 ? a0 + r : a0;
    if (a < 0 || a >= r)
      throw Error("[unsqueeze] axis " + std::to_string(a0) + " is out of range for a result of rank " +
                  std::to_string(r) + " (x " + shape_str(xs) + ")");
    if (add[a]) throw Error("[unsqueeze] axis " + std::to_string(a0) + " appears twice in axes " + ints_str(axes));
    add[a] = 1;
  }
  Shape out;  // a dynamic dim is copied from x (internal::same_dim)
  size_t next = 0;
  for (int d = 0; d < r; ++d) {
    if (add[d]) out.push_back(1);
    else {
      out.push_back(xs[next] < 0 ? internal::same_dim(static_cast<int64_t>(next)) : xs[next]);
      ++next;
    }
  }
  return internal::reshape_request(x, out, name);
}

}  // namespace jobflow
