// ONNX rows of gather, strided_slice, split and pad (ops/indexing.cpp), and
// Trilu (a mask) (registry.h).
#include <cmath>
#include <limits>
#include <optional>

#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "onnx/onnx_util.h"

namespace jobflow::onnx {
namespace {

namespace ou = onnx_util;

// ---- import ----

// Slice's starts, ends, axes and steps as the node gives them (attributes
// before opset 10, inputs after), defaults filled in.
struct SliceArgs {
  std::vector<int64_t> starts, ends, axes, steps;
};

SliceArgs read_slice_args(Importer& I) {
  SliceArgs a;
  if (I.opset < 10) {
    a.starts = I.attr_ints("starts", {}), a.ends = I.attr_ints("ends", {}), a.axes = I.attr_ints("axes", {});
  } else {
    a.starts = I.ints_in(1), a.ends = I.ints_in(2);
    if (I.has(3)) a.axes = I.ints_in(3);
    if (I.has(4)) a.steps = I.ints_in(4);
  }
  if (a.axes.empty())
    for (size_t i = 0; i < a.starts.size(); ++i) a.axes.push_back(static_cast<int64_t>(i));
  if (a.steps.empty()) a.steps.assign(a.starts.size(), 1);
  if (a.ends.size() != a.starts.size() || a.axes.size() != a.starts.size() || a.steps.size() != a.starts.size())
    I.err("starts, ends, axes and steps differ in length");
  return a;
}

void op_slice(Importer& I) {
  // ONNX Slice maps one to one onto the engine's slice (ONNX semantics:
  // negative and out-of-range starts/ends clamp, negative steps), whose
  // index arithmetic is overflow-safe for hostile values.
  Blob x = I.in(0);
  const SliceArgs a = read_slice_args(I);
  I.out(0, slice(x, a.starts, a.ends, a.axes, a.steps));
}

void op_split(Importer& I) {
  Blob x = I.in(0);
  const int ax = I.axis_of(I.attr_i("axis", 0), x.ndim());
  const int64_t D = x.shape()[ax];
  std::vector<int64_t> parts;
  if (I.opset >= 13 && I.has(1)) parts = I.ints_in(1);
  else if (I.has_attr("split")) parts = I.attr_ints("split", {});
  else if (I.opset < 13 && I.has(1)) parts = I.ints_in(1);
  const int n = I.node->output_size();
  if (D < 0) {  // an axis known per call: the given sizes as slices (equal parts need its size)
    if (parts.empty()) I.need_static(x.shape());
    if (static_cast<int>(parts.size()) != n)
      I.err("split has " + std::to_string(parts.size()) + " parts for " + std::to_string(n) + " outputs");
    int64_t start = 0;
    for (int i = 0; i < n; ++i) {
      const int64_t p = parts[static_cast<size_t>(i)];
      if (p < 0 || p > std::numeric_limits<int64_t>::max() / 4 - start) I.err("split size " + std::to_string(p) + " is out of range");
      if (I.wants(i)) I.out(i, slice(x, {start}, {start + p}, {ax}));
      start += p;
    }
    return;
  }
  if (parts.empty()) {
    const int64_t ns = I.attr_i("num_outputs", n);
    if (ns <= 0) I.err("no outputs");
    const int64_t chunk = D / ns + (D % ns != 0);
    for (int64_t i = 0, left = D; i < ns; ++i, left -= chunk) parts.push_back(std::min(chunk, std::max<int64_t>(left, 0)));
  }
  if (static_cast<int>(parts.size()) != n) I.err("split has " + std::to_string(parts.size()) + " parts for " + std::to_string(n) + " outputs");
  int64_t sum = 0;
  for (int64_t p : parts) {
    if (p < 0 || p > D) I.err("split size " + std::to_string(p) + " is out of range for an axis of " + std::to_string(D));
    if (!size_add(sum, p, &sum)) I.err("split sizes add up to more than 2^63 - 1");
  }
  if (sum != D) I.err("split sizes add up to " + std::to_string(sum) + ", not " + std::to_string(D));
  // The engine's split: consecutive parts, any dtype, values copied exactly.
  // (The axis as the node gives it, checked above: a saved job loads back
  // to the same op.)
  const std::vector<Blob> ys = split(x, parts, static_cast<int>(I.attr_i("axis", 0)));
  for (int i = 0; i < n; ++i)
    if (I.wants(i)) I.out(i, ys[static_cast<size_t>(i)]);
}

void op_gather(Importer& I) {
  // The engine's gather: numpy.take semantics, negative indices wrap,
  // out-of-range indices are a run-time error; indices may be computed
  // (Embedding) or constant.
  {  // dims of a shape known at load, picked from Shape of a blob with others known per call
    const Value& v = I.value(I.iname(0));
    if (v.dims && I.is_const(1) && I.attr_i("axis", 0) == 0) {
      const Tensor it = I.cin(1);
      if (!is_floating(it.dtype())) {
        const std::vector<int64_t> idx = to_i64(it);
        const int64_t n = static_cast<int64_t>(v.dims->size());
        std::vector<int64_t> picked;
        for (int64_t j : idx) {
          if (j < -n || j >= n) break;
          const int64_t d = (*v.dims)[static_cast<size_t>(j < 0 ? j + n : j)];
          if (d < 0) break;
          picked.push_back(d);
        }
        if (picked.size() == idx.size()) {
          Tensor t(it.shape(), DType::Int64);
          std::copy(picked.begin(), picked.end(), t.data<int64_t>());
          I.out_const(0, t);
          return;
        }
      }
    }
  }
  Blob x = I.in(0);
  const int64_t axis = I.attr_i("axis", 0);
  I.axis_of(axis, x.ndim());  // in range; the engine takes a negative axis as it is (as saved)
  Blob idx = I.in(1);
  if (idx.dtype() != DType::Int32 && idx.dtype() != DType::Int64)
    I.err(std::string("indices must be int32 or int64, got ") + dtype_name(idx.dtype()));
  I.out(0, gather(x, idx, static_cast<int>(axis)));
}

void op_pad(Importer& I) {
  // The engine's pad: constant / reflect / edge for every dtype, negative
  // pads crop (ONNX allows both).
  Blob x = I.in(0);
  const int r = x.ndim();
  std::vector<int64_t> pads;
  double value = 0.0;
  if (I.opset < 11) {
    pads = I.attr_ints("pads", I.attr_ints("paddings", {}));
    value = I.attr_f("value", 0.0);
  } else {
    pads = I.ints_in(1);
    if (I.has(2)) {
      const Tensor v = I.cin(2);
      if (v.numel() != 1) I.err("constant_value must hold one value, got " + shape_str(v.shape()));
      value = v.at(0);
    }
    if (I.has(3)) {
      auto axes = I.ints_in(3);
      std::vector<int64_t> full(2 * r, 0);
      if (pads.size() != 2 * axes.size()) I.err("pads must have 2 values per axis");
      std::vector<bool> seen(r, false);
      for (size_t i = 0; i < axes.size(); ++i) {
        int d = I.axis_of(axes[i], r);
        if (seen[d]) I.err("axes repeat");
        seen[d] = true;
        full[d] = pads[i], full[r + d] = pads[axes.size() + i];
      }
      pads = full;
    }
  }
  const std::string mode = I.attr_s("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge") I.unsupported("Pad(" + mode + ")");
  if (static_cast<int>(pads.size()) != 2 * r) I.err("pads must have " + std::to_string(2 * r) + " values");
  {  // the padded result must fit the limits (overflow-safe) before the op is built
    Shape grown = x.shape();
    for (int d = 0; d < r; ++d) {
      const int64_t lim = std::numeric_limits<int64_t>::max() / 4;
      for (int64_t p : {pads[d], pads[r + d]})
        if (p > lim || p < -lim) I.err("pads too large");
      if (grown[d] < 0) continue;  // a dim known per call
      if (__builtin_add_overflow(grown[d], pads[d] + pads[r + d], &grown[d]))
        I.err("pads " + shape_str(pads) + " grow axis " + std::to_string(d) + " of " + shape_str(x.shape()) +
              " past 2^63 - 1");
      if (grown[d] < 0) I.err("pads crop more than axis " + std::to_string(d) + " of " + shape_str(x.shape()) + " has");
    }
    I.check_size(grown, x.dtype(), "Pad result");
  }
  I.out(0, pad(x, pads, mode, value));
}

// The triangle of the last two dims: where, not a product, so that an inf
// or NaN outside it still gives 0.
void op_trilu(Importer& I) {
  Blob x = I.in(0);
  if (x.ndim() < 2) I.err("input must have rank >= 2");
  const bool upper = I.attr_i("upper", 1) != 0;
  const Shape xs = x.shape();
  const int r = x.ndim();
  Blob zero = scalar_blob(0, x.dtype());
  const bool runtime_k = I.has(1) && !I.is_const(1);
  if (!runtime_k && is_static(Shape(xs.end() - 2, xs.end()))) {  // a constant mask
    const int64_t k = I.has(1) ? I.ints_in(1).at(0) : 0;
    const int64_t R = xs[xs.size() - 2], C = xs.back();
    I.check_size({R, C}, DType::Bool, "the Trilu mask");
    std::vector<double> m(static_cast<size_t>(R * C));
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j) m[static_cast<size_t>(i * C + j)] = upper ? (j - i >= k) : (j - i <= k);
    I.out(0, where(constant(make_tensor({R, C}, DType::Bool, m)), x, zero));
    return;
  }
  // j - i over the last two dims (ranges when their sizes are known per
  // call), compared with k (a value computed at run time, or a constant).
  Blob k;
  if (runtime_k) {
    k = I.in(1);
    if (k.dtype() != DType::Int64 || numel(k.shape()) != 1) I.err("k must be one int64, got " + spec_str(k.spec()));
    k = reshape(k, {});
  } else {
    k = scalar_blob(I.has(1) ? static_cast<double>(I.ints_in(1).at(0)) : 0.0, DType::Int64);
  }
  auto iota = [&](int d) {
    if (xs[static_cast<size_t>(d)] >= 0) {
      const int64_t n = xs[static_cast<size_t>(d)];
      std::vector<double> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i);
      return constant(make_tensor({n}, DType::Int64, v));
    }
    return range(scalar_blob(0, DType::Int64), reshape(shape_of(x, d, d + 1), {}), scalar_blob(1, DType::Int64));
  };
  Blob diag = sub(iota(r - 1), unsqueeze(iota(r - 2), {1}));
  I.out(0, where(upper ? greater_equal(diag, k) : less_equal(diag, k), x, zero));
}

void op_gather_nd(Importer& I) {
  Blob x = I.in(0), idx = I.in(1);
  if (idx.dtype() != DType::Int64) I.err(std::string("indices must be int64, got ") + dtype_name(idx.dtype()));
  I.out(0, gather_nd(x, idx, static_cast<int>(I.attr_i("batch_dims", 0))));
}

void op_scatter_elements(Importer& I) {
  Blob x = I.in(0), idx = I.in(1), u = I.in(2);
  const int64_t axis = I.attr_i("axis", 0);
  I.axis_of(axis, x.ndim());
  const std::string red = I.attr_s("reduction", "none");
  if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min")
    I.err("reduction must be none, add, mul, max or min, got '" + red + "'");
  if (idx.dtype() != DType::Int32 && idx.dtype() != DType::Int64)
    I.err(std::string("indices must be int32 or int64, got ") + dtype_name(idx.dtype()));
  I.out(0, scatter_elements(x, idx, u, static_cast<int>(axis), red));
}

void op_gather_elements(Importer& I) {
  Blob x = I.in(0), idx = I.in(1);
  const int64_t axis = I.attr_i("axis", 0);
  I.axis_of(axis, x.ndim());
  if (idx.dtype() != DType::Int32 && idx.dtype() != DType::Int64)
    I.err(std::string("indices must be int32 or int64, got ") + dtype_name(idx.dtype()));
  I.out(0, gather_elements(x, idx, static_cast<int>(axis)));
}

void op_scatter_nd(Importer& I) {
  Blob x = I.in(0), idx = I.in(1), u = I.in(2);
  const std::string red = I.attr_s("reduction", "none");
  if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min")
    I.err("reduction must be none, add, mul, max or min, got '" + red + "'");
  if (idx.dtype() != DType::Int64) I.err(std::string("indices must be int64, got ") + dtype_name(idx.dtype()));
  I.out(0, scatter_nd(x, idx, u, red));
}

// One-hot along a new axis: where(equal(indices, 0..depth-1), on, off),
// negative indices counting from depth; a depth computed at run time makes
// a range whose size is known per call.
void op_onehot(Importer& I) {
  Blob idx = I.in(0), values = I.in(2);
  if (idx.dtype() == DType::Bool) I.err("indices must be numeric");
  const int r = idx.ndim();
  const int64_t axis = I.attr_i("axis", -1);
  if (axis < -(r + 1) || axis > r) I.err("axis " + std::to_string(axis) + " is out of range for indices of rank " + std::to_string(r));
  const int ax = static_cast<int>(axis < 0 ? axis + r + 1 : axis);
  if (numel(values.shape()) != 2)
    I.err("values must hold 2 elements (off, on), got " + spec_str(values.spec()));
  Blob depth, classes;
  if (I.is_const(1)) {
    const Tensor dt = I.cin(1);
    if (dt.numel() != 1) I.err("depth must hold one element, got " + shape_str(dt.shape()));
    const double dv = dt.at(0);
    if (!(dv >= 1) || dv > 1e9) I.err("depth must be a positive count, got " + std::to_string(dv));
    const int64_t D = static_cast<int64_t>(dv);
    I.check_size({D}, DType::Int64, "OneHot's classes");
    std::vector<double> iota(static_cast<size_t>(D));
    for (int64_t i = 0; i < D; ++i) iota[static_cast<size_t>(i)] = static_cast<double>(i);
    classes = constant(make_tensor({D}, DType::Int64, iota));
    depth = scalar_blob(static_cast<double>(D), DType::Int64);
  } else {
    Blob d = I.in(1);
    if (numel(d.shape()) != 1) I.err("depth must hold one element, got " + spec_str(d.spec()));
    depth = cast(reshape(d, {}), DType::Int64);
    classes = range(scalar_blob(0, DType::Int64), depth, scalar_blob(1, DType::Int64));
  }
  Blob i64 = cast(idx, DType::Int64);
  i64 = where(less(i64, scalar_blob(0, DType::Int64)), add(i64, depth), i64);
  std::vector<int64_t> trailing;
  for (int d = 1; d <= r - ax; ++d) trailing.push_back(d);
  if (!trailing.empty()) classes = unsqueeze(classes, trailing);
  Blob hot = equal(unsqueeze(i64, {ax}), classes);
  Blob v = reshape(values, {2});
  Blob off = reshape(slice(v, {0}, {1}), {}), on = reshape(slice(v, {1}, {2}), {});
  I.out(0, where(hot, on, off));
}

// The elements (slices along axis) where condition is true: gather of the
// nonzero positions, whose count is known per call.
void op_compress(Importer& I) {
  Blob x = I.in(0), cond = I.in(1);
  if (cond.dtype() != DType::Bool) I.err("condition must be bool, got " + spec_str(cond.spec()));
  if (cond.ndim() != 1) I.err("condition must be 1-D, got " + spec_str(cond.spec()));
  Blob pos = squeeze(nonzero(cond), {0});
  if (!I.has_attr("axis")) {
    I.out(0, gather(reshape(x, {-1}), pos, 0));
    return;
  }
  const int ax = I.axis_of(I.attr_i("axis", 0), x.ndim());
  I.out(0, gather(x, pos, ax));
}

// Each batch entry's first sequence_lens[b] steps reversed: gather_elements
// along the time axis with indices len - 1 - t (t < len) or t.
void op_reverse_sequence(Importer& I) {
  Blob x = I.in(0), lens = I.in(1);
  const int r = x.ndim();
  if (r < 2) I.err("input must have rank >= 2, got " + spec_str(x.spec()));
  const int ta = I.axis_of(I.attr_i("time_axis", 0), r), ba = I.axis_of(I.attr_i("batch_axis", 1), r);
  if (ta == ba || ta > 1 || ba > 1) I.err("time_axis and batch_axis must be 0 and 1 in either order");
  if (lens.dtype() != DType::Int64) I.err("sequence_lens must be int64, got " + spec_str(lens.spec()));
  I.need_static(x.shape());
  const int64_t T = x.shape()[ta], B = x.shape()[ba];
  if (lens.shape() != Shape{B}) I.err("sequence_lens must be (" + std::to_string(B) + "), got " + spec_str(lens.spec()));
  Shape ts(r, 1), bs(r, 1);
  ts[ta] = T;
  bs[ba] = B;
  std::vector<double> iota(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) iota[static_cast<size_t>(t)] = static_cast<double>(t);
  Blob t = constant(make_tensor(ts, DType::Int64, iota)), len = reshape(lens, bs);
  Blob rev = sub(sub(len, scalar_blob(1, DType::Int64)), t);
  Blob idx = where(less(t, len), rev, t);
  I.out(0, gather_elements(x, broadcast_to(idx, x.shape()), ta));
}

// A constant identity-like matrix of the input's (static) shape: ones on the
// diagonal k.
void op_eyelike(Importer& I) {
  const TensorSpec s = I.spec(0);
  if (s.shape.size() != 2) I.err("input must be 2-D, got " + spec_str(s));
  I.need_static(s.shape);
  DType dt = s.dtype;
  if (I.has_attr("dtype")) {
    const int64_t t = I.attr_i("dtype", 0);
    try {
      dt = ou::from_onnx_dtype(static_cast<int32_t>(t), "EyeLike 'dtype'");
    } catch (const Error&) {
      I.unsupported("EyeLike(dtype " + std::to_string(t) + ")");
    }
  }
  const int64_t R = s.shape[0], C = s.shape[1], k = I.attr_i("k", 0);
  I.check_size(s.shape, dt, "EyeLike's output");
  std::vector<double> v(static_cast<size_t>(R * C), 0.0);
  for (int64_t i = 0; i < R; ++i)
    if (i + k >= 0 && i + k < C) v[static_cast<size_t>(i * C + i + k)] = 1;
  I.out(0, constant(make_tensor(s.shape, dt, v)));
}

void op_unique(Importer& I) {
  Blob x = I.in(0);
  std::optional<int> axis;
  if (I.has_attr("axis")) axis = I.axis_of(I.attr_i("axis", 0), x.ndim());
  const UniqueResult u = unique(x, axis, I.attr_i("sorted", 1) != 0);
  const Blob outs[] = {u.y, u.indices, u.inverse_indices, u.counts};
  for (int i = 0; i < 4; ++i)
    if (I.wants(i)) I.out(i, outs[i]);
}

// ---- export ----

// strided_slice -> ONNX Slice itself (the engine's slice follows its
// clamping rules).
void export_strided_slice(Exporter& E) {
  const std::string& nm = E.name();
  const Primitive& p = E.op();
  E.add("Slice",
        {E.in(0), E.int64_init(nm + "/starts", p.attr_ints("starts")), E.int64_init(nm + "/ends", p.attr_ints("ends")),
         E.int64_init(nm + "/axes", p.attr_ints("axes")), E.int64_init(nm + "/steps", p.attr_ints("steps"))},
        {E.out(0)}, nm);
}

// split -> Split with the part sizes as an input.
void export_split(Exporter& E) {
  std::vector<std::string> outs;
  for (size_t i = 0; i < E.num_outputs(); ++i) outs.push_back(E.out(static_cast<int>(i)));
  NodeProto* n = E.add("Split", {E.in(0), E.int64_init(E.name() + "/split", E.op().attr_ints("split"))}, outs, E.name());
  Exporter::set_int(n, "axis", E.op().attr_int("axis"));
}

// pad -> Pad (constant, reflect, edge); a constant value other than +0 as
// a scalar of x's dtype.
void export_pad(Exporter& E) {
  const std::string& nm = E.name();
  const std::string mode = E.op().attr_string("mode");
  std::vector<std::string> ins{E.in(0), E.int64_init(nm + "/pads", E.op().attr_ints("pads"))};
  const double value = E.op().attr_double("value");
  // ONNX's default constant_value is 0 (+0.0).
  if (mode == "constant" && (value != 0.0 || std::signbit(value)))
    ins.push_back(E.constant(nm + "/value", Exporter::scalar_of(E.in_spec(0).dtype, value)));
  Exporter::set_string(E.add("Pad", ins, {E.out(0)}, nm), "mode", mode);
}

// ---- outputs at definition when values are computed in the graph ----
// (ImportRow::values_per_call: the node is imported again per call.)

// Slice: x's rank; the sliced axes (all, unless axes is a constant) known
// per call.
std::vector<TensorSpec> slice_specs(Importer& I) {
  const TensorSpec x = I.spec(0);
  const int r = static_cast<int>(x.shape.size());
  if (!I.has(3) || !I.is_const(3)) return {dynamic_spec(static_cast<size_t>(r), x.dtype)};
  TensorSpec y = x;
  for (int64_t a : I.ints_in(3)) y.shape[static_cast<size_t>(I.axis_of(a, r))] = kDynamic;
  return {y};
}

// Split with sizes computed in the graph: the axis known per call.
std::vector<TensorSpec> split_specs(Importer& I) {
  TensorSpec y = I.spec(0);
  y.shape[static_cast<size_t>(I.axis_of(I.attr_i("axis", 0), static_cast<int64_t>(y.shape.size())))] = kDynamic;
  return std::vector<TensorSpec>(static_cast<size_t>(I.node->output_size()), y);
}

// Pad with pads (or its value, axes) computed in the graph: x's rank; an
// unsupported mode is refused now, at load.
std::vector<TensorSpec> pad_specs(Importer& I) {
  const std::string mode = I.attr_s("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge") I.unsupported("Pad(" + mode + ")");
  return input_rank(I);
}

}  // namespace

void indexing_onnx_rows(OpRows& r) {
  r.import_op("Slice", op_slice, true).values_per_call({1, 2, 3, 4}, slice_specs);
  r.import_op("Split", op_split, true).values_per_call({1}, split_specs);
  r.import_op("Gather", op_gather, true).weights = {0};  // an embedding table
  r.import_op("Pad", op_pad, true).values_per_call({1, 2, 3}, pad_specs);
  r.import_op("Trilu", op_trilu).values_per_call({1}, input_spec);
  // The count of nonzero elements is known per call (the job runs in segments).
  r.import_op("NonZero", [](Importer& I) { I.out(0, nonzero(I.in(0))); });
  r.import_op("GatherND", op_gather_nd, true);
  r.import_op("ScatterElements", op_scatter_elements, true);
  r.import_op("Scatter", op_scatter_elements, true);  // its name before opset 11
  r.import_op("GatherElements", op_gather_elements, true);
  r.import_op("ScatterND", op_scatter_nd, true);
  r.import_op("OneHot", op_onehot);
  r.import_op("Compress", op_compress);
  r.import_op("ReverseSequence", op_reverse_sequence, true);
  r.import_op("EyeLike", op_eyelike);
  // The number of distinct values is known per call (the job runs in segments).
  r.import_op("Unique", op_unique);

  r.export_op(OpKind::StridedSlice, export_strided_slice);
  r.export_op(OpKind::Gather, [](Exporter& E) { Exporter::set_int(E.add_as("Gather"), "axis", E.op().attr_int("axis")); });
  r.export_op(OpKind::Split, export_split);
  r.export_op(OpKind::Pad, export_pad);
  r.export_op(OpKind::NonZero, [](Exporter& E) { E.add_as("NonZero"); });
  r.export_op(OpKind::GatherND, [](Exporter& E) {
    Exporter::set_int(E.add_as("GatherND"), "batch_dims", E.op().attr_int("batch_dims"));
  });
  r.export_op(OpKind::Unique, [](Exporter& E) {
    NodeProto* n = E.add("Unique", {E.in(0)}, {E.out(0), E.out(1), E.out(2), E.out(3)}, E.name());
    Exporter::set_int(n, "sorted", E.op().attr_int("sorted"));
    const Attrs a = E.op().attributes();
    if (const AttrValue* ax = find_attr(a, "axis")) Exporter::set_int(n, "axis", std::get<int64_t>(*ax));
  });
  r.export_op(OpKind::GatherElements, [](Exporter& E) {
    Exporter::set_int(E.add_as("GatherElements"), "axis", E.op().attr_int("axis"));
  });
  r.export_op(OpKind::ScatterND, [](Exporter& E) {
    NodeProto* n = E.add_as("ScatterND");
    const std::string red = E.op().attr_string("reduction");
    if (red != "none") Exporter::set_string(n, "reduction", red);
  });
  r.export_op(OpKind::ScatterElements, [](Exporter& E) {
    NodeProto* n = E.add_as("ScatterElements");
    Exporter::set_int(n, "axis", E.op().attr_int("axis"));
    const std::string red = E.op().attr_string("reduction");
    if (red != "none") Exporter::set_string(n, "reduction", red);
  });
}

}  // namespace jobflow::onnx
