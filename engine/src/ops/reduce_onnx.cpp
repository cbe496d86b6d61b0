// ONNX rows of the reductions, argmax, broadcast_to and the fills
// (ops/reduce.cpp) (registry.h).
#include <algorithm>
#include <limits>

#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "onnx/onnx_util.h"

namespace jobflow::onnx {
namespace {

namespace ou = onnx_util;

// ---- import ----

Shape reduce_shape(const Shape& s, const std::vector<int>& axes, bool keep) {
  Shape r;
  for (int d = 0; d < static_cast<int>(s.size()); ++d) {
    bool red = axes.empty() || std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!red) r.push_back(s[d]);
    else if (keep) r.push_back(1);
  }
  return r;
}

enum class Reduction { Sum, Mean, Max, Min, SumSquare, L1, L2, LogSumExp, LogSum, Prod };

void op_reduce(Importer& I, Reduction kind) {
  Blob x = I.in(0);
  const int r = x.ndim();
  std::vector<int64_t> axes;
  const bool axes_input = (kind == Reduction::Sum && I.opset >= 13) || I.opset >= 18;
  if (axes_input && I.has(1) && !I.is_const(1) &&
      (kind == Reduction::Sum || kind == Reduction::SumSquare || kind == Reduction::L1 || kind == Reduction::L2 ||
       kind == Reduction::LogSum)) {
    // Axes computed at run time: the sums' output dims are known per call.
    Blob a = I.in(1);
    if (a.dtype() != DType::Int64 || a.ndim() != 1) I.err("axes must be 1-D int64, got " + spec_str(a.spec()));
    const bool keep = I.attr_i("keepdims", 1) != 0, noop = I.attr_i("noop_with_empty_axes", 0) != 0;
    if (a.shape()[0] < 0 && !keep) I.unsupported(I.node->op_type() + "(axes of a length known per call, keepdims 0)");
    Blob v = kind == Reduction::SumSquare || kind == Reduction::L2 ? square(x) : kind == Reduction::L1 ? abs_of(x) : x;
    Blob y = reduce_sum_at(v, a, keep, noop);
    I.out(0, kind == Reduction::L2 ? sqrt(y) : kind == Reduction::LogSum ? log(y) : y);
    return;
  }
  if (axes_input) {
    if (I.has(1)) axes = I.ints_in(1);
  } else {
    axes = I.attr_ints("axes", {});
  }
  const bool keep = I.attr_i("keepdims", 1) != 0;
  if (axes.empty() && I.attr_i("noop_with_empty_axes", 0) != 0) {
    I.out(0, identity(x));
    return;
  }
  std::vector<int> ax;
  for (int64_t a : axes) ax.push_back(I.axis_of(a, r));
  std::sort(ax.begin(), ax.end());
  ax.erase(std::unique(ax.begin(), ax.end()), ax.end());
  if (ax.empty())
    for (int d = 0; d < r; ++d) ax.push_back(d);
  Blob y;
  switch (kind) {
    case Reduction::Sum: y = reduce_sum(x, ax, keep); break;
    case Reduction::Mean: y = reduce_mean(x, ax, keep); break;
    case Reduction::Max: y = reduce_max(x, ax, keep); break;
    case Reduction::Min: y = neg(reduce_max(neg(x), ax, keep)); break;
    case Reduction::SumSquare: y = reduce_sum(square(x), ax, keep); break;
    case Reduction::L1: y = reduce_sum(abs_of(x), ax, keep); break;
    case Reduction::L2: y = sqrt(reduce_sum(square(x), ax, keep)); break;
    case Reduction::LogSumExp: {
      Blob m = reduce_max(x, ax, true);
      y = add(log(reduce_sum(exp(sub(x, m)), ax, true)), m);
      if (!keep) {
        if (is_static(x.shape())) y = reshape(y, reduce_shape(x.shape(), ax, false));
        else y = squeeze(y, std::vector<int64_t>(ax.begin(), ax.end()));
      }
      break;
    }
    case Reduction::LogSum: y = log(reduce_sum(x, ax, keep)); break;
    case Reduction::Prod: y = reduce_prod(x, ax, keep); break;
  }
  I.out(0, y);
}

void op_argmax(Importer& I, bool min) {
  Blob x = I.in(0);
  const int ax = I.axis_of(I.attr_i("axis", 0), x.ndim());
  Blob v = min ? neg(x) : x;
  Blob y;
  if (I.attr_i("select_last_index", 0) != 0) {  // the first of the reversed axis, counted from the end
    const int64_t n = x.shape()[ax];
    if (n < 0) I.unsupported(std::string(min ? "ArgMin" : "ArgMax") + "(select_last_index over a dim known per call)");
    Blob first = cast(argmax(slice(v, {-1}, {std::numeric_limits<int64_t>::min()}, {ax}, {-1}), ax), DType::Int64);
    y = sub(scalar_blob(static_cast<double>(n - 1), DType::Int64), first);
  } else {
    y = cast(argmax(v, ax), DType::Int64);
  }
  if (I.attr_i("keepdims", 1) != 0) y = unsqueeze(y, {ax});
  I.out(0, y);
}

void op_expand(Importer& I) {
  Blob x = I.in(0);
  if (!I.is_const(1)) {  // a shape computed in the graph: known per call
    I.out(0, expand(x, I.in(1)));
    return;
  }
  auto want = I.ints_in(1);
  Shape s;
  if (!layout::broadcast_shape(x.shape(), Shape(want.begin(), want.end()), &s)) I.err("cannot expand " + shape_str(x.shape()) + " to " + shape_str(Shape(want.begin(), want.end())));
  I.out(0, s == x.shape() ? identity(x) : broadcast_to(x, s));
}

// A reduction whose axes are computed in the graph: keepdims keeps x's
// rank, else the axes' count goes (their places are known per call).
std::vector<TensorSpec> reduce_specs(Importer& I) {
  const TensorSpec x = I.spec(0);
  const int64_t r = static_cast<int64_t>(x.shape.size());
  const bool keep = I.attr_i("keepdims", 1) != 0;
  if (keep) return {dynamic_spec(static_cast<size_t>(r), x.dtype)};
  const int64_t n = static_length(I, 1);
  int64_t rank = r;
  if (!keep && n > 0) rank = std::max<int64_t>(r - n, 0);
  if (!keep && n == 0 && I.attr_i("noop_with_empty_axes", 0) == 0) rank = 0;
  return {dynamic_spec(static_cast<size_t>(rank), x.dtype)};
}

void op_cumsum(Importer& I) {
  Blob x = I.in(0);
  if (x.dtype() == DType::Bool) I.err("input must be numeric");
  const bool excl = I.attr_i("exclusive", 0) != 0, rev = I.attr_i("reverse", 0) != 0;
  if (!I.is_const(1)) {  // an axis computed at run time
    Blob a = I.in(1);
    if ((a.dtype() != DType::Int32 && a.dtype() != DType::Int64) || a.ndim() > 1)
      I.err("axis must be one int32 or int64 value, got " + spec_str(a.spec()));
    I.out(0, math::cumsum(x, a, excl, rev));
    return;
  }
  const std::vector<int64_t> a = I.ints_in(1);
  if (a.size() != 1) I.err("axis must hold one element");
  const int ax = I.axis_of(a[0], x.ndim());
  I.out(0, math::cumsum(x, ax, excl, rev));
}

// ---- export ----

// reduce_sum -> ReduceSum (axes as an input since opset 13); reduce_mean,
// reduce_max -> ReduceMean, ReduceMax (axes an attribute up to opset 17, an
// input from 18).
void export_reduce(Exporter& E, const char* type) {
  const std::vector<int64_t> axes = E.op().attr_ints("axes");
  const bool keep = E.op().attr_int("keepdims");
  if (E.op().kind() == OpKind::ReduceSum || E.opset() >= 18) {
    std::vector<std::string> ins{E.in(0)};
    if (!axes.empty()) ins.push_back(E.int64_init(E.name() + "/axes", axes));
    Exporter::set_int(E.add(type, ins, {E.out(0)}, E.name()), "keepdims", keep);
  } else {
    NodeProto* n = E.add_as(type);
    if (!axes.empty()) Exporter::set_ints(n, "axes", axes);
    Exporter::set_int(n, "keepdims", keep);
  }
}

// sum_to -> ReduceSum over the broadcast axes + Reshape to the target.
void export_sum_to(Exporter& E) {
  const std::string& nm = E.name();
  const Shape& x = E.in_spec(0).shape;
  const Shape target = E.op().attr_ints("shape");
  std::vector<int64_t> axes;
  const size_t lead = x.size() - target.size();
  for (size_t i = 0; i < x.size(); ++i)
    if (i < lead || (target[i - lead] == 1 && x[i] != 1)) axes.push_back(static_cast<int64_t>(i));
  std::string r = E.in(0);
  if (!axes.empty()) {
    r = E.fresh(nm + "/sum");
    std::vector<std::string> ins{E.in(0), E.int64_init(nm + "/axes", axes)};
    Exporter::set_int(E.add("ReduceSum", ins, {r}, r), "keepdims", 1);
  }
  E.add("Reshape", {r, E.int64_init(nm + "/shape", target)}, {E.out(0)}, nm);
}

// argmax -> ArgMax (keepdims 0) + Cast to the engine's int32.
void export_argmax(Exporter& E) {
  const std::string r = E.fresh(E.name() + "/int64");
  NodeProto* n = E.add("ArgMax", {E.in(0)}, {r}, E.name());
  Exporter::set_int(n, "axis", E.op().attr_int("axis"));
  Exporter::set_int(n, "keepdims", 0);
  Exporter::set_int(E.add("Cast", {r}, {E.out(0)}, E.fresh(E.name() + "/cast")), "to",
                    ou::to_onnx_dtype(E.out_spec(0).dtype));
}

// zeros_like, ones_like -> ConstantOfShape of the static shape.
void export_fill(Exporter& E, double v) {
  NodeProto* n = E.add("ConstantOfShape", {E.int64_init(E.name() + "/shape", E.out_spec(0).shape)}, {E.out(0)}, E.name());
  Exporter::set_tensor(n, "value", Exporter::filled({1}, E.out_spec(0).dtype, v));
}

}  // namespace

void reduce_onnx_rows(OpRows& r) {
  // Sums over axes computed in the graph are one op (reduce_sum_axes, op_reduce
  // above); the other reductions are imported per call with each call's axes.
  r.import_op("ReduceSum", [](Importer& I) { op_reduce(I, Reduction::Sum); }, true);
  r.import_op("CumSum", op_cumsum, true);
  r.import_op("ReduceMean", [](Importer& I) { op_reduce(I, Reduction::Mean); }, true).values_per_call({1}, reduce_specs);
  r.import_op("ReduceMax", [](Importer& I) { op_reduce(I, Reduction::Max); }, true).values_per_call({1}, reduce_specs);
  r.import_op("ReduceMin", [](Importer& I) { op_reduce(I, Reduction::Min); }, true).values_per_call({1}, reduce_specs);
  r.import_op("ReduceSumSquare", [](Importer& I) { op_reduce(I, Reduction::SumSquare); }, true);
  r.import_op("ReduceL1", [](Importer& I) { op_reduce(I, Reduction::L1); }, true);
  r.import_op("ReduceL2", [](Importer& I) { op_reduce(I, Reduction::L2); }, true);
  r.import_op("ReduceLogSumExp", [](Importer& I) { op_reduce(I, Reduction::LogSumExp); }, true).values_per_call({1}, reduce_specs);
  r.import_op("ReduceLogSum", [](Importer& I) { op_reduce(I, Reduction::LogSum); }, true);
  // Folded at load when its input is known (numel of a shape: Shape -> ReduceProd).
  r.import_op("ReduceProd", [](Importer& I) { op_reduce(I, Reduction::Prod); }, true).values_per_call({1}, reduce_specs);
  r.import_op("ArgMax", [](Importer& I) { op_argmax(I, false); }, true);
  r.import_op("ArgMin", [](Importer& I) { op_argmax(I, true); }, true);
  r.import_op("Expand", op_expand, true);

  r.export_op(OpKind::ReduceSum, [](Exporter& E) { export_reduce(E, "ReduceSum"); });
  r.export_op(OpKind::ReduceSumAxes, [](Exporter& E) {
    NodeProto* n = E.add_as("ReduceSum");
    Exporter::set_int(n, "keepdims", E.op().attr_int("keepdims"));
    if (E.op().attr_int("noop_with_empty_axes")) Exporter::set_int(n, "noop_with_empty_axes", 1);
  });
  r.export_op(OpKind::CumSum, [](Exporter& E) {
    const Primitive& p = E.op();
    const Attrs a = p.attributes();  // no "axis": the axis is the op's second input
    const std::string axis = find_attr(a, "axis") ? E.int64_init(E.name() + "/axis", {p.attr_int("axis")}) : E.in(1);
    NodeProto* n = E.add("CumSum", {E.in(0), axis}, {E.out(0)}, E.name());
    if (p.attr_int("exclusive")) Exporter::set_int(n, "exclusive", 1);
    if (p.attr_int("reverse")) Exporter::set_int(n, "reverse", 1);
  });
  r.export_op(OpKind::ReduceMean, [](Exporter& E) { export_reduce(E, "ReduceMean"); });
  r.export_op(OpKind::ReduceMax, [](Exporter& E) { export_reduce(E, "ReduceMax"); });
  r.export_op(OpKind::ReduceProd, [](Exporter& E) { export_reduce(E, "ReduceProd"); });
  r.export_op(OpKind::SumTo, export_sum_to);
  r.export_op(OpKind::ArgMax, export_argmax);
  r.export_op(OpKind::BroadcastTo, [](Exporter& E) {
    // A dynamic dim of the target keeps the input's: Expand's 1.
    std::vector<int64_t> s = E.op().attr_ints("shape");
    for (int64_t& d : s)
      if (d < 0) d = 1;
    E.add("Expand", {E.in(0), E.int64_init(E.name() + "/shape", s)}, {E.out(0)}, E.name());
  });
  r.export_op(OpKind::Expand, [](Exporter& E) { E.add_as("Expand"); });
  r.export_op(OpKind::ZerosLike, [](Exporter& E) { export_fill(E, 0.0); });
  r.export_op(OpKind::OnesLike, [](Exporter& E) { export_fill(E, 1.0); });
}

}  // namespace jobflow::onnx
