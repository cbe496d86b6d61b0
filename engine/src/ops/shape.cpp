// Shape ops: reshape/flatten (views), transpose, concat (+ the slice used by
// its gradient), identity and constant.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "jobflow/ops.h"
#include "kernel_util.h"
#include "ops_internal.h"

namespace jobflow {
namespace {

using kern::kMaxRank;
constexpr int64_t kTile = 32;  // transpose tile edge (elements)

std::string ints_str(const std::vector<int>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

// Copies bytes unless the memory plan already made the output the input.
void copy_bytes(const Tensor& in, const Tensor& out) {
  if (out.raw() != in.raw() && in.nbytes() > 0) std::memcpy(out.raw(), in.raw(), in.nbytes());
}

// Calls f(U{}) with an unsigned type of the dtype's size: data movement ops
// do not care about the element type, only its width.
template <class F>
void dispatch_width(DType t, F&& f) {
  switch (dtype_size(t)) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(uint64_t{}); return;
  }
  throw Error(std::string("[kernel] internal: no copy width for ") + dtype_name(t));
}

// ---------------------------------------------------------------------------
// Same bytes, new shape. The memory plan makes the output alias the input
// (aliases_input), in which case eval has nothing to do.
// The shape is concrete when the input's is; an input with dynamic dims
// keeps the request: -1 (one at most) is inferred from the element count,
// internal::same_dim(j) takes the input's dim j.
class Reshape final : public Primitive {
 public:
  explicit Reshape(Shape shape) : shape_(std::move(shape)) {}
  OpKind kind() const override { return OpKind::Reshape; }
  Attrs attributes() const override { return {{"shape", shape_}}; }
  int aliases_input(int) const override { return 0; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("reshape", in, 1);
    const Shape& xs = in[0].shape;
    if (is_static(shape_)) {
      if (is_static(xs) && numel(xs) != numel(shape_))
        op_error("reshape", "cannot reshape " + shape_str(xs) + " (" + std::to_string(numel(xs)) +
                                " elements) to " + shape_str(shape_) + " (" + std::to_string(numel(shape_)) +
                                " elements)");
      return {{shape_, in[0].dtype}};
    }
    return {{internal::resolve_reshape("reshape", xs, shape_), in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    copy_bytes(in[0], out[0]);
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    return {reshape(cot[0], in[0].shape())};
  }

 private:
  Shape shape_;
};

// ---------------------------------------------------------------------------
// y = x.transpose(perm): y.shape[i] = x.shape[perm[i]].
// The permutation is first collapsed (size-1 dims dropped, dims that stay
// adjacent in both layouts merged). If the output's innermost dim is also
// contiguous in x, rows are memcpy'd; otherwise the two dims that are
// contiguous in x and in y are walked in kTile x kTile tiles so both reads
// and writes stay in cache.
class Transpose final : public Primitive {
 public:
  explicit Transpose(std::vector<int> perm) : perm_(std::move(perm)) {}
  OpKind kind() const override { return OpKind::Transpose; }
  Attrs attributes() const override { return {{"perm", std::vector<int64_t>(perm_.begin(), perm_.end())}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("transpose", in, 1);
    const Shape& s = in[0].shape;
    const int r = static_cast<int>(s.size());
    if (r > kMaxRank)
      op_error("transpose", "rank " + std::to_string(r) + " of " + shape_str(s) + " exceeds the supported maximum of " +
                                std::to_string(kMaxRank));
    bool seen[kMaxRank] = {};
    bool ok = static_cast<int>(perm_.size()) == r;
    for (size_t i = 0; ok && i < perm_.size(); ++i) {
      const int p = perm_[i] < 0 ? perm_[i] + r : perm_[i];
      ok = p >= 0 && p < r && !seen[p];
      if (ok) seen[p] = true;
    }
    if (!ok)
      op_error("transpose", "perm " + ints_str(perm_) + " is not a permutation of the " + std::to_string(r) +
                                " dims of input " + shape_str(s));
    Shape out(r);
    for (int i = 0; i < r; ++i) out[i] = s[perm_[i] < 0 ? perm_[i] + r : perm_[i]];
    return {{out, in[0].dtype}};
  }

  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const Shape& xs = in[0].shape();
    const int r = static_cast<int>(xs.size());
    const int64_t n = in[0].numel();
    if (n == 0) return;
    int64_t xstr[kMaxRank];
    for (int i = r - 1; i >= 0; --i) xstr[i] = i == r - 1 ? 1 : xstr[i + 1] * xs[i + 1];
    // Output dims with their stride in x, collapsed.
    int64_t dim[kMaxRank], str[kMaxRank];
    int nd = 0;
    for (int i = 0; i < r; ++i) {
      const int p = perm_[i] < 0 ? perm_[i] + r : perm_[i];
      const int64_t d = xs[p], s = xstr[p];
      if (d == 1) continue;
      if (nd > 0 && str[nd - 1] == s * d) {
        dim[nd - 1] *= d;
        str[nd - 1] = s;
      } else {
        dim[nd] = d;
        str[nd++] = s;
      }
    }
    if (nd == 0 || str[nd - 1] == 1) {
      rows_copy(in[0], out[0], dim, str, nd);
      return;
    }
    dispatch_width(in[0].dtype(), [&](auto z) {
      using U = decltype(z);
      tiled<U>(static_cast<const U*>(in[0].raw()), static_cast<U*>(out[0].raw()), dim, str, nd, n);
    });
  }

  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    const int r = in[0].ndim();
    std::vector<int> inv(r);
    for (int i = 0; i < r; ++i) inv[perm_[i] < 0 ? perm_[i] + r : perm_[i]] = i;
    return {transpose(cot[0], inv)};
  }

 private:
  // Innermost output dim contiguous in x: copy rows.
  static void rows_copy(const Tensor& in, const Tensor& out, const int64_t* dim, const int64_t* str, int nd) {
    const size_t es = dtype_size(in.dtype());
    if (nd <= 1) {  // identity permutation after collapsing
      std::memcpy(out.raw(), in.raw(), in.nbytes());
      return;
    }
    const int64_t inner = dim[nd - 1], rows = in.numel() / inner;
    const auto* x = static_cast<const char*>(in.raw());
    auto* y = static_cast<char*>(out.raw());
#pragma omp parallel for if (in.numel() > kern::kParallelGrain)
    for (int64_t row = 0; row < rows; ++row) {
      int64_t src = 0, q = row;
      for (int d = nd - 2; d >= 0; --d) {
        src += (q % dim[d]) * str[d];
        q /= dim[d];
      }
      std::memcpy(y + row * inner * es, x + src * es, inner * es);
    }
  }

  // General case: j = the output dim that is contiguous in x, l = nd - 1 the
  // output's contiguous dim. Tasks are (index over the other dims, tile).
  template <class U>
  static void tiled(const U* x, U* y, const int64_t* dim, const int64_t* str, int nd, int64_t n) {
    int j = 0;
    while (str[j] != 1) ++j;  // exists: x's innermost non-1 dim has stride 1
    const int l = nd - 1;
    int64_t ystr[kMaxRank];
    ystr[l] = 1;
    for (int d = l - 1; d >= 0; --d) ystr[d] = ystr[d + 1] * dim[d + 1];
    int64_t odim[kMaxRank], oxs[kMaxRank], oys[kMaxRank];
    int no = 0;
    for (int d = 0; d < l; ++d)
      if (d != j) {
        odim[no] = dim[d];
        oxs[no] = str[d];
        oys[no++] = ystr[d];
      }
    int64_t others = 1;
    for (int d = 0; d < no; ++d) others *= odim[d];
    const int64_t tj = (dim[j] + kTile - 1) / kTile, tl = (dim[l] + kTile - 1) / kTile;
    const int64_t xs_l = str[l], ys_j = ystr[j];
#pragma omp parallel for if (n > kern::kParallelGrain)
    for (int64_t t = 0; t < others * tj * tl; ++t) {
      int64_t q = t / (tj * tl);
      const int64_t a0 = ((t / tl) % tj) * kTile, b0 = (t % tl) * kTile;
      int64_t xo = 0, yo = 0;
      for (int d = no - 1; d >= 0; --d) {
        const int64_t i = q % odim[d];
        q /= odim[d];
        xo += i * oxs[d];
        yo += i * oys[d];
      }
      const int64_t a1 = std::min(dim[j], a0 + kTile), b1 = std::min(dim[l], b0 + kTile);
      for (int64_t a = a0; a < a1; ++a) {
        const U* src = x + xo + a;
        U* dst = y + yo + a * ys_j;
        for (int64_t b = b0; b < b1; ++b) dst[b] = src[b * xs_l];
      }
    }
  }

  std::vector<int> perm_;
};

// ---------------------------------------------------------------------------
// Shared outer/inner view of an op that works along one axis.
struct AxisView {
  int64_t outer = 1, inner = 1;
};
AxisView axis_view(const Shape& s, int ax) {
  AxisView v;
  for (int i = 0; i < ax; ++i) v.outer *= s[i];
  for (size_t i = ax + 1; i < s.size(); ++i) v.inner *= s[i];
  return v;
}

class Concat final : public Primitive {
 public:
  explicit Concat(int axis) : axis_(axis) {}
  OpKind kind() const override { return OpKind::Concat; }
  Attrs attributes() const override { return {{"axis", int64_t{axis_}}}; }
  bool writes_output_anywhere(int) const override { return true; }
  int64_t input_within_output(int i, const std::vector<TensorSpec>& in) const override {
    const Shape& s0 = in.at(0).shape;
    const int r = static_cast<int>(s0.size());
    const int ax = axis_ < 0 ? axis_ + r : axis_;
    for (int d = 0; d < ax; ++d)
      if (s0[d] != 1) return -1;
    int64_t at = 0;
    for (int k = 0; k < i; ++k) {
      if (!is_static(in[k].shape)) return -1;
      at += numel(in[k].shape) * static_cast<int64_t>(dtype_size(in[k].dtype));
    }
    return at;
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    if (in.empty()) op_error("concat", "needs at least one input");
    const Shape& s0 = in[0].shape;
    const int r = static_cast<int>(s0.size());
    if (r == 0) op_error("concat", "cannot concatenate scalars (input 0 is " + spec_str(in[0]) + ")");
    if (axis_ < -r || axis_ >= r)
      op_error("concat", "axis " + std::to_string(axis_) + " is out of range for input " + shape_str(s0));
    const int ax = axis_ < 0 ? axis_ + r : axis_;
    Shape out = s0;
    out[ax] = 0;
    for (size_t k = 0; k < in.size(); ++k) {
      const Shape& s = in[k].shape;
      if (static_cast<int>(s.size()) == r) {
        // The other dims: the known one of each pair. (Not the axis: there
        // the lengths add up; merging would take an input's length for the
        // running sum when that sum is dynamic.)
        const int64_t sum = out[ax];
        out = merge_shapes(out, s);
        out[ax] = sum;
      }
      if (in[k].dtype != in[0].dtype)
        op_error("concat", "input " + std::to_string(k) + " is " + spec_str(in[k]) + " but input 0 is " +
                               spec_str(in[0]) + "; dtypes must match");
      bool ok = static_cast<int>(s.size()) == r;
      for (int i = 0; ok && i < r; ++i) ok = i == ax || dims_agree(s[i], s0[i]);
      if (!ok)
        op_error("concat", "input " + std::to_string(k) + " has shape " + shape_str(s) + " but input 0 has " +
                               shape_str(s0) + "; all dims but axis " + std::to_string(axis_) + " must match");
      if (out[ax] < 0 || s[ax] < 0)
        out[ax] = kDynamic;
      else if (!size_add(out[ax], s[ax], &out[ax]))
        op_error("concat", "the inputs' axis " + std::to_string(axis_) + " lengths add up to more than 2^63 - 1");
    }
    return {{out, in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const Shape& os = out[0].shape();
    const int ax = axis_ < 0 ? axis_ + static_cast<int>(os.size()) : axis_;
    const AxisView v = axis_view(os, ax);
    const size_t es = dtype_size(out[0].dtype());
    const int64_t row = os[ax] * v.inner * es;  // bytes of one output slab
    auto* y = static_cast<char*>(out[0].raw());
    // Each (outer, input) pair is one contiguous piece of the output. The
    // threads take even byte ranges of the whole output, whatever the
    // pieces (deeplabv3's ASPP at batch 1: one outer, five 256 KB pieces,
    // were copied by one thread while the other waited).
    const int64_t total = v.outer * row;
#pragma omp parallel if (out[0].numel() > kern::kParallelGrain)
    {
      const int64_t nth = omp_get_num_threads(), me = omp_get_thread_num();
      const int64_t begin = total * me / nth, end = total * (me + 1) / nth;
      for (int64_t o = begin / std::max<int64_t>(row, 1); o < v.outer && o * row < end; ++o) {
        int64_t at = o * row;
        for (const Tensor& t : in) {
          const int64_t chunk = t.shape()[ax] * v.inner * es;
          const int64_t lo = std::max(at, begin), hi = std::min(at + chunk, end);
          if (lo < hi) {
            const char* src = static_cast<const char*>(t.raw()) + o * chunk + (lo - at);
            // (Not onto itself: an input the memory plan put in place, see
            // input_within_output.)
            if (src != y + lo) std::memcpy(y + lo, src, hi - lo);
          }
          at += chunk;
        }
      }
    }
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override;

 private:
  int axis_;
};

// x[..., start:start+len, ...] along one axis (the gradient of concat).
class Slice final : public Primitive {
 public:
  Slice(int axis, int64_t start, int64_t len) : axis_(axis), start_(start), len_(len) {}
  OpKind kind() const override { return OpKind::Slice; }
  Attrs attributes() const override {
    return {{"axis", int64_t{axis_}}, {"start", start_}, {"len", len_}};
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("slice", in, 1);
    const Shape& s = in[0].shape;
    const int r = static_cast<int>(s.size());
    if (axis_ < 0 || axis_ >= r)
      op_error("slice", "axis " + std::to_string(axis_) + " is out of range for input " + shape_str(s));
    if (start_ < 0 || len_ < 0 || (s[axis_] >= 0 && (len_ > s[axis_] || start_ > s[axis_] - len_)))
      op_error("slice", "start " + std::to_string(start_) + ", length " + std::to_string(len_) +
                            " is outside axis " + std::to_string(axis_) + " of " + shape_str(s));
    Shape out = s;
    out[axis_] = len_;
    return {{out, in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const AxisView v = axis_view(in[0].shape(), axis_);
    const size_t es = dtype_size(in[0].dtype());
    const int64_t full = in[0].shape()[axis_] * v.inner * es, part = len_ * v.inner * es, skip = start_ * v.inner * es;
    const auto* x = static_cast<const char*>(in[0].raw());
    auto* y = static_cast<char*>(out[0].raw());
#pragma omp parallel for if (out[0].numel() > kern::kParallelGrain && v.outer > 1)
    for (int64_t o = 0; o < v.outer; ++o) std::memcpy(y + o * part, x + o * full + skip, part);
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override;

 private:
  int axis_;
  int64_t start_, len_;
};

// The gradient of Slice: dy placed at [start, start+len) of a zero tensor of
// axis length `full`.
class SliceGrad final : public Primitive {
 public:
  SliceGrad(int axis, int64_t start, int64_t full) : axis_(axis), start_(start), full_(full) {}
  OpKind kind() const override { return OpKind::SliceGrad; }
  Attrs attributes() const override {
    return {{"axis", int64_t{axis_}}, {"start", start_}, {"full", full_}};
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("slice_grad", in, 1);
    const Shape& s = in[0].shape;
    if (axis_ < 0 || axis_ >= static_cast<int>(s.size()) || start_ < 0 || (s[axis_] >= 0 && start_ > full_ - s[axis_]))
      op_error("slice_grad", "cannot place " + shape_str(s) + " at " + std::to_string(start_) + " of axis " +
                                 std::to_string(axis_) + " with length " + std::to_string(full_));
    Shape out = s;
    out[axis_] = full_;
    return {{out, in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const AxisView v = axis_view(in[0].shape(), axis_);
    const size_t es = dtype_size(in[0].dtype());
    const int64_t len = in[0].shape()[axis_];
    const int64_t full = full_ * v.inner * es, part = len * v.inner * es, before = start_ * v.inner * es;
    const auto* x = static_cast<const char*>(in[0].raw());
    auto* y = static_cast<char*>(out[0].raw());
#pragma omp parallel for if (out[0].numel() > kern::kParallelGrain && v.outer > 1)
    for (int64_t o = 0; o < v.outer; ++o) {
      char* dst = y + o * full;
      std::memset(dst, 0, before);
      std::memcpy(dst + before, x + o * part, part);
      std::memset(dst + before + part, 0, full - before - part);
    }
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    return {internal::add_node(std::make_shared<Slice>(axis_, start_, in[0].shape()[axis_]), {cot[0]})[0]};
  }

 private:
  int axis_;
  int64_t start_, full_;
};

Blob slice(Blob x, int axis, int64_t start, int64_t len) {
  return internal::add_node(std::make_shared<Slice>(axis, start, len), {x})[0];
}

std::vector<Blob> Slice::vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                             const std::vector<int>&) const {
  return {internal::add_node(std::make_shared<SliceGrad>(axis_, start_, in[0].shape()[axis_]), {cot[0]})[0]};
}

std::vector<Blob> Concat::vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                              const std::vector<int>& argnums) const {
  const int ax = axis_ < 0 ? axis_ + in[0].ndim() : axis_;
  std::vector<Blob> g;
  for (int arg : argnums) {
    int64_t start = 0;
    for (int k = 0; k < arg; ++k) start += in[k].shape()[ax];
    g.push_back(slice(cot[0], ax, start, in[arg].shape()[ax]));
  }
  return g;
}

// ---------------------------------------------------------------------------
class Identity final : public Primitive {
 public:
  OpKind kind() const override { return OpKind::Identity; }
  bool stores_only() const override { return true; }  // a copy: float16 passes
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("identity", in, 1);
    return {in[0]};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    copy_bytes(in[0], out[0]);
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    return {cot[0]};
  }
};

// A tensor baked into the plan (deep-copied at definition so later writes
// to the caller's tensor do not change the job).
class Constant final : public Primitive {
 public:
  explicit Constant(Tensor value) : value_(std::move(value)) {}
  OpKind kind() const override { return OpKind::Constant; }
  Attrs attributes() const override { return {{"value", value_}}; }
  const Tensor& value() const { return value_; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("constant", in, 0);
    return {{value_.shape(), value_.dtype()}};
  }
  void eval_cpu(const std::vector<Tensor>&, const std::vector<Tensor>& out, ExecContext&) const override {
    if (value_.nbytes() > 0) std::memcpy(out[0].raw(), value_.raw(), value_.nbytes());
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }

 private:
  Tensor value_;
};

// ---------------------------------------------------------------------------
// Shapes as tensors. Their outputs' sizes are known from shapes alone
// (shape, size) or from input values (reshape_to, constant_of_shape, range):
// the compiler folds them when it specializes a job for a call's shapes.

std::vector<int64_t> ints_of(const Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  kern::dispatch_all(t.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* p = static_cast<const T*>(t.raw());
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(p[i]);
  });
  return v;
}
// A shape tensor's spec: integer, rank 1 of a known length.
int64_t shape_input_rank(const char* op, const TensorSpec& s) {
  if (s.dtype != DType::Int64 && s.dtype != DType::Int32)
    op_error(op, "the shape must be an int64 tensor, got " + spec_str(s));
  if (s.shape.size() != 1 || s.shape[0] < 0)
    op_error(op, "the shape must be a 1-D tensor of known length, got " + spec_str(s));
  if (s.shape[0] > kMaxRank) op_error(op, "the shape " + spec_str(s) + " has more than " + std::to_string(kMaxRank) + " dims");
  return s.shape[0];
}

class ShapeOf final : public Primitive {
 public:
  ShapeOf(int64_t start, int64_t end) : start_(start), end_(end) {}
  OpKind kind() const override { return OpKind::ShapeOf; }
  Attrs attributes() const override { return {{"start", start_}, {"end", end_}}; }
  bool differentiable_input(int) const override { return false; }
  std::pair<int64_t, int64_t> range_of(int64_t r) const {
    int64_t st = start_ < 0 ? start_ + r : start_, en = end_ < 0 ? end_ + r : end_;
    st = std::clamp<int64_t>(st, 0, r), en = std::clamp<int64_t>(en, 0, r);
    return {st, std::max(st, en)};
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("shape", in, 1);
    auto [st, en] = range_of(static_cast<int64_t>(in[0].shape.size()));
    return {{{en - st}, DType::Int64}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    auto [st, en] = range_of(in[0].ndim());
    int64_t* y = out[0].data<int64_t>();
    for (int64_t d = st; d < en; ++d) y[d - st] = in[0].shape()[d];
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }

 private:
  int64_t start_, end_;
};

class SizeOf final : public Primitive {
 public:
  OpKind kind() const override { return OpKind::SizeOf; }
  bool differentiable_input(int) const override { return false; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("size", in, 1);
    return {{{}, DType::Int64}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    out[0].data<int64_t>()[0] = in[0].numel();
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }
};

// x reshaped to the values of an int64 shape tensor (ONNX Reshape with a
// computed shape): 0 copies x's dim (unless allowzero), -1 is inferred.
class ReshapeTo final : public Primitive {
 public:
  explicit ReshapeTo(bool allowzero) : allowzero_(allowzero) {}
  OpKind kind() const override { return OpKind::ReshapeTo; }
  Attrs attributes() const override { return {{"allowzero", int64_t{allowzero_}}}; }
  int aliases_input(int) const override { return 0; }
  bool differentiable_input(int i) const override { return i == 0; }
  bool output_shape_from_data() const override { return true; }
  bool shape_reads_value(int i) const override { return i == 1; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("reshape_to", in, 2);
    return {{Shape(static_cast<size_t>(shape_input_rank("reshape_to", in[1])), kDynamic), in[0].dtype}};
  }
  std::vector<TensorSpec> infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const override {
    infer(in);
    Shape req = ints_of(v[1]);
    for (int64_t d : req)
      if (d < -1) op_error("reshape_to", "negative dimension in shape " + shape_str(req));
    if (!allowzero_)
      for (size_t i = 0; i < req.size(); ++i)
        if (req[i] == 0) req[i] = internal::same_dim(static_cast<int64_t>(i));
    return {{internal::resolve_reshape("reshape_to", in[0].shape, req), in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    copy_bytes(in[0], out[0]);
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    return {is_static(in[0].shape()) ? reshape(cot[0], in[0].shape()) : reshape_to(cot[0], shape_of(in[0]))};
  }

 private:
  bool allowzero_;
};

// A tensor of a computed shape filled with one value.
class ConstantOfShape final : public Primitive {
 public:
  explicit ConstantOfShape(Tensor value) : value_(std::move(value)) {}
  OpKind kind() const override { return OpKind::ConstantOfShape; }
  Attrs attributes() const override { return {{"value", value_}}; }
  bool differentiable_input(int) const override { return false; }
  bool output_shape_from_data() const override { return true; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("constant_of_shape", in, 1);
    return {{Shape(static_cast<size_t>(shape_input_rank("constant_of_shape", in[0])), kDynamic), value_.dtype()}};
  }
  std::vector<TensorSpec> infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const override {
    infer(in);
    Shape s = ints_of(v[0]);
    for (int64_t d : s)
      if (d < 0) op_error("constant_of_shape", "negative dimension in shape " + shape_str(s));
    return {{s, value_.dtype()}};
  }
  void eval_cpu(const std::vector<Tensor>&, const std::vector<Tensor>& out, ExecContext&) const override {
    const size_t es = dtype_size(value_.dtype());
    const int64_t n = out[0].numel();
    auto* y = static_cast<char*>(out[0].raw());
    for (int64_t i = 0; i < n; ++i) std::memcpy(y + i * es, value_.raw(), es);
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }

 private:
  Tensor value_;
};

// start, start + delta, ... while before limit (ONNX Range): scalar inputs.
class Range final : public Primitive {
 public:
  OpKind kind() const override { return OpKind::Range; }
  bool differentiable_input(int) const override { return false; }
  bool output_shape_from_data() const override { return true; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("range", in, 3);
    for (size_t i = 0; i < 3; ++i) {
      if (numel(in[i].shape) != 1 && is_static(in[i].shape))
        op_error("range", "start, limit and delta must be scalars, got " + spec_str(in[i]));
      if (in[i].dtype != in[0].dtype) op_error("range", "start, limit and delta must have one dtype, got " +
                                                             spec_str(in[0]) + " and " + spec_str(in[i]));
    }
    return {{{kDynamic}, in[0].dtype}};
  }
  static int64_t count(double s, double l, double d) {
    if (d == 0) op_error("range", "delta is 0");
    const double n = std::ceil((l - s) / d);
    if (!(n < 1e12)) op_error("range", "the sequence is too long");
    return n > 0 ? static_cast<int64_t>(n) : 0;
  }
  std::vector<TensorSpec> infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const override {
    infer(in);
    return {{{count(v[0].at(0), v[1].at(0), v[2].at(0))}, in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const int64_t n = out[0].numel();
    kern::dispatch_all(out[0].dtype(), [&](auto z) {
      using T = decltype(z);
      const T s = static_cast<const T*>(in[0].raw())[0], d = static_cast<const T*>(in[2].raw())[0];
      T* y = static_cast<T*>(out[0].raw());
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(s + static_cast<T>(i) * d);
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }
};

}  // namespace

namespace internal {
Shape resolve_reshape(const char* op, const Shape& xs, const Shape& request) {
  Shape out = request;
  int infer_at = -1;
  int64_t known = 1;                     // product of the literal dims
  std::vector<char> copied(xs.size(), 0);  // input dims copied to the output
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t d = out[i];
    if (d <= -2) {  // same_dim(j)
      const int64_t j = -2 - d;
      if (j >= static_cast<int64_t>(xs.size()))
        op_error(op, "shape " + shape_str(request) + " copies dim " + std::to_string(j) + " beyond the rank of input " +
                         shape_str(xs));
      out[i] = xs[j];
      ++copied[j];
    } else if (d == -1) {
      if (infer_at >= 0) op_error(op, "only one -1 is allowed in shape " + shape_str(request));
      infer_at = static_cast<int>(i);
    } else if (__builtin_mul_overflow(known, d, &known)) {  // the request may come from a file
      op_error(op, "shape " + shape_str(request) + " for input " + shape_str(xs) + ": the element count overflows 64 bits");
    }
  }
  if (infer_at >= 0) {
    // The copied dims appear on both sides: the inferred dim is the product
    // of the other input dims over the literal ones, known when those are.
    int64_t rest = 1;
    bool rest_known = true;
    for (size_t j = 0; j < xs.size(); ++j) {
      if (copied[j] == 1) continue;
      if (xs[j] < 0 || copied[j] > 1) rest_known = false;
      else if (__builtin_mul_overflow(rest, xs[j], &rest))
        op_error(op, "input " + shape_str(xs) + ": the element count overflows 64 bits");
    }
    if (rest_known) {
      if (known == 0 || rest % known != 0)
        op_error(op, "cannot reshape " + shape_str(xs) + " to " + shape_str(request) + ": the other dims hold " +
                         std::to_string(rest) + " elements, not a multiple of " + std::to_string(known));
      out[infer_at] = rest / known;
    }
  }
  const int64_t total = numel(xs);  // kDynamic when unknown
  if (is_static(out) && total >= 0 && numel(out) != total)
    op_error(op, "cannot reshape " + shape_str(xs) + " (" + std::to_string(total) + " elements) to " + shape_str(out) +
                     " (" + std::to_string(numel(out)) + " elements)");
  return out;
}

Blob reshape_request(Blob x, const Shape& request, const std::string& name) {
  const Shape xs = x.shape();
  if (is_static(xs)) return reshape(x, resolve_reshape("reshape", xs, request), name);
  resolve_reshape("reshape", xs, request);  // the checks
  return add_node(std::make_shared<Reshape>(request), {x}, name)[0];
}
}  // namespace internal

Blob reshape(Blob x, const Shape& shape, const std::string& name) {
  const Shape& xs = x.shape();  // throws "[Blob] use of an undefined blob"
  if (!is_static(xs)) {
    for (int64_t d : shape)
      if (d < -1) throw Error("[reshape] negative dimension in shape " + shape_str(shape) + " (input " + shape_str(xs) + ")");
    return internal::reshape_request(x, shape, name);
  }
  Shape s = shape;
  int infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer_at >= 0)
        throw Error("[reshape] only one -1 is allowed in shape " + shape_str(shape) + " (input " + shape_str(xs) + ")");
      infer_at = static_cast<int>(i);
    } else if (s[i] < 0) {
      throw Error("[reshape] negative dimension in shape " + shape_str(shape) + " (input " + shape_str(xs) + ")");
    } else {
      known *= s[i];
    }
  }
  const int64_t total = numel(xs);
  if (infer_at >= 0) {
    if (known == 0 || total % known != 0)
      throw Error("[reshape] cannot reshape " + shape_str(xs) + " (" + std::to_string(total) + " elements) to " +
                  shape_str(shape));
    s[infer_at] = total / known;
  }
  if (s == xs && name.empty()) return x;  // already that shape: no node
  return internal::add_node(std::make_shared<Reshape>(s), {x}, name)[0];
}

Blob flatten(Blob x, int start_dim, int end_dim) {
  const Shape& xs = x.shape();
  const int r = static_cast<int>(xs.size());
  if (r == 0) return reshape(x, {1});
  const int s = start_dim < 0 ? start_dim + r : start_dim, e = end_dim < 0 ? end_dim + r : end_dim;
  if (s < 0 || s >= r || e < 0 || e >= r || s > e)
    throw Error("[flatten] dims " + std::to_string(start_dim) + ".." + std::to_string(end_dim) +
                " are invalid for input " + shape_str(xs));
  if (!is_static(xs)) {
    // The dims around the range are copied from the input
    // (internal::same_dim), the range's product is inferred (-1).
    Shape req;
    for (int i = 0; i < s; ++i) req.push_back(internal::same_dim(i));
    req.push_back(-1);
    for (int i = e + 1; i < r; ++i) req.push_back(internal::same_dim(i));
    return internal::reshape_request(x, req, "");
  }
  Shape out(xs.begin(), xs.begin() + s);
  int64_t m = 1;
  for (int i = s; i <= e; ++i) m *= xs[i];
  out.push_back(m);
  out.insert(out.end(), xs.begin() + e + 1, xs.end());
  return reshape(x, out);
}

Blob transpose(Blob x, const std::vector<int>& perm, const std::string& name) {
  return internal::add_node(std::make_shared<Transpose>(perm), {x}, name)[0];
}

Blob concat(const std::vector<Blob>& xs, int axis, const std::string& name) {
  if (xs.empty()) throw Error("[concat] needs at least one input");
  return internal::add_node(std::make_shared<Concat>(axis), xs, name)[0];
}

Blob identity(Blob x, const std::string& name) {
  return internal::add_node(std::make_shared<Identity>(), {x}, name)[0];
}

Blob shape_of(Blob x, int64_t start, int64_t end, const std::string& name) {
  return internal::add_node(std::make_shared<ShapeOf>(start, end), {x}, name)[0];
}
Blob size_of(Blob x, const std::string& name) { return internal::add_node(std::make_shared<SizeOf>(), {x}, name)[0]; }
Blob reshape_to(Blob x, Blob shape, bool allowzero, const std::string& name) {
  return internal::add_node(std::make_shared<ReshapeTo>(allowzero), {x, shape}, name)[0];
}
Blob constant_of_shape(Blob shape, const Tensor& value, const std::string& name) {
  if (!value.defined() || value.numel() != 1)
    throw Error("[constant_of_shape] the value must be a tensor of one element");
  return internal::add_node(std::make_shared<ConstantOfShape>(value.clone().reshape({1})), {shape}, name)[0];
}
Blob range(Blob start, Blob limit, Blob delta, const std::string& name) {
  return internal::add_node(std::make_shared<Range>(), {start, limit, delta}, name)[0];
}

Blob constant(const Tensor& value, const std::string& name) {
  if (!value.defined()) throw Error("[constant] the tensor is undefined");
  return internal::add_node(std::make_shared<Constant>(value.clone()), {}, name)[0];
}

}  // namespace jobflow
