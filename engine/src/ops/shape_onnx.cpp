// ONNX rows of the shape ops and constants (ops/shape.cpp): reshape and its
// ONNX relatives (Flatten, Squeeze, Unsqueeze), transpose, concat, slice,
// identity, constants and the load-time shape ops (Shape, Size, Range,
// ConstantOfShape) (registry.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "jobflow/strings.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "onnx/onnx_util.h"
#include "ops_internal.h"

namespace jobflow::onnx {
namespace {

namespace ou = onnx_util;

// ---- import ----

// A copied dim (ONNX Reshape's 0, a dim kept by Squeeze/Unsqueeze/Flatten)
// of an input whose dim is dynamic: internal::same_dim.
int64_t dim_or_copy(const Shape& xs, size_t i) { return xs[i] >= 0 ? xs[i] : internal::same_dim(static_cast<int64_t>(i)); }

// x reshaped by a request (internal::reshape_request: -1 inferred,
// same_dim copied); a load-time constant stays one.
void reshape_out(Importer& I, const Shape& req) {
  if (I.is_const(0) && I.value(I.iname(0)).pure_const()) {
    const Tensor c = I.cin(0);
    I.out_const(0, c.clone().reshape(internal::resolve_reshape("reshape", c.shape(), req)));
    return;
  }
  I.out(0, internal::reshape_request(I.in(0), req));
}

void op_reshape(Importer& I) {
  const Shape xs = I.shape(0);
  const bool allowzero = I.attr_i("allowzero", 0) != 0;
  if (I.opset >= 5 && !I.has_attr("shape") && !I.is_const(1)) {  // a shape computed in the graph
    I.out(0, reshape_to(I.in(0), I.in(1), allowzero));
    return;
  }
  std::vector<int64_t> want;
  const bool from_attr = I.opset < 5 || I.has_attr("shape");
  if (from_attr) want = I.attr_ints("shape", {});
  else want = I.ints_in(1);
  Shape req;
  int infer = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    int64_t d = want[i];
    if (d == 0 && !allowzero) {
      if (i >= xs.size()) I.err("shape has 0 at " + std::to_string(i) + " beyond the input rank");
      d = dim_or_copy(xs, i);
    } else if (d == -1) {
      if (infer >= 0) I.err("shape has more than one -1");
      infer = static_cast<int>(i);
    } else if (d < 0) {
      I.err("invalid shape value " + std::to_string(d));
    }
    req.push_back(d);
  }
  if (req.size() > kMaxImportRank) I.err("rank exceeds 8");
  {
    // The dims come from the file: their product is checked before any use
    // (the -1 and the dims copied from a dynamic x count as 1).
    Shape literal(req);
    for (int64_t& d : literal)
      if (d < 0) d = 1;
    int64_t known = 0;
    std::string why;
    if (!checked_numel(literal, &known, &why))
      I.err("shape " + (from_attr ? std::string("attribute") : "'" + I.iname(1) + "'") + " " +
            shape_str(Shape(want.begin(), want.end())) + " for '" + I.iname(0) + "' " + shape_str(xs) + ": " + why);
  }
  Shape s;
  try {
    s = internal::resolve_reshape("reshape", xs, req);
  } catch (const Error&) {
    I.err("cannot reshape " + shape_str(xs) + " to " + shape_str(Shape(want.begin(), want.end())));
  }
  if (is_static(xs)) I.check_size(s, I.spec(0).dtype, "Reshape result");
  reshape_out(I, req);
}

void op_flatten(Importer& I) {
  const Shape xs = I.shape(0);
  const int r = static_cast<int>(xs.size());
  int64_t ax = I.attr_i("axis", 1);
  if (ax < -r || ax > r) I.err("axis out of range");
  if (ax < 0) ax += r;
  // Each side's product, or for a dynamic side its one dim copied, or -1.
  auto side = [&](int b, int e) -> int64_t {
    const Shape part(xs.begin() + b, xs.begin() + e);
    if (is_static(part)) return numel(part);
    return e - b == 1 ? internal::same_dim(b) : -1;
  };
  const int64_t a = side(0, static_cast<int>(ax)), b = side(static_cast<int>(ax), r);
  if (a == -1 && b == -1) I.unsupported("Flatten(dynamic dims on both sides of the axis)");
  reshape_out(I, {a, b});
}

std::vector<int64_t> axes_arg(Importer& I, int input) {
  if (I.opset >= 13 && I.has(input)) return I.ints_in(input);
  if (I.has_attr("axes")) return I.attr_ints("axes", {});
  return {};
}

void op_squeeze(Importer& I) {
  const Shape xs = I.shape(0);
  const int r = static_cast<int>(xs.size());
  auto axes = axes_arg(I, 1);
  std::vector<bool> drop(r, false);
  if (axes.empty()) {
    for (int d = 0; d < r; ++d) drop[d] = xs[d] == 1;
  } else {
    for (int64_t a : axes) {
      int d = I.axis_of(a, r);
      if (xs[d] != 1 && xs[d] >= 0) I.err("cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(xs[d]));
      drop[d] = true;
    }
  }
  Shape s;
  for (int d = 0; d < r; ++d)
    if (!drop[d]) s.push_back(dim_or_copy(xs, d));
  reshape_out(I, s);
}

void op_unsqueeze(Importer& I) {
  const Shape xs = I.shape(0);
  auto axes = axes_arg(I, 1);
  const int r = static_cast<int>(xs.size() + axes.size());
  if (r > kMaxImportRank) I.err("rank exceeds 8");
  std::vector<bool> ins(r, false);
  for (int64_t a : axes) {
    int d = I.axis_of(a, r);
    if (ins[d]) I.err("axes repeat");
    ins[d] = true;
  }
  Shape s;
  size_t k = 0;
  for (int d = 0; d < r; ++d) s.push_back(ins[d] ? 1 : dim_or_copy(xs, k++));
  reshape_out(I, s);
}

void op_transpose(Importer& I) {
  const int r = static_cast<int>(I.shape(0).size());
  std::vector<int64_t> perm = I.attr_ints("perm", {});
  if (perm.empty())
    for (int d = r - 1; d >= 0; --d) perm.push_back(d);
  if (static_cast<int>(perm.size()) != r) I.err("perm has " + std::to_string(perm.size()) + " values for rank " + std::to_string(r));
  std::vector<int> p;
  std::vector<bool> seen(r, false);
  for (int64_t v : perm) {
    if (v < 0 || v >= r || seen[v]) I.err("perm is not a permutation");
    seen[v] = true;
    p.push_back(static_cast<int>(v));
  }
  I.out(0, transpose(I.in(0), p));
}

void op_concat(Importer& I) {
  std::vector<Blob> xs;
  const int r = static_cast<int>(I.shape(0).size());
  const int ax = I.axis_of(I.attr_i("axis", I.opset < 4 ? 1 : 0), r);
  for (int i = 0; i < I.nin(); ++i)
    if (I.has(i) && numel(I.shape(i)) != 0) xs.push_back(I.in(i));  // kDynamic: known per call
  if (xs.empty()) I.err("all inputs are empty");
  I.out(0, xs.size() == 1 ? identity(xs[0]) : concat(xs, ax));
}

void op_identity(Importer& I) { I.out(0, identity(I.in(0))); }

void op_constant(Importer& I) {
  int n = 0;
  Tensor t;
  SeqType type;
  for (const auto& a : I.node->attribute()) {
    const std::string& k = a.name();
    if (k == "value") {
      t = read_tensor(a.t(), I.base_dir_, I.opts_.max_tensor_bytes, I.where() + " value", node_label(*I.node, I.node_index),
                      /*strings=*/true);
      type = proto_type(a.t());
    } else if (k == "value_float") {
      t = Tensor::scalar<float>(a.f());
    } else if (k == "value_floats") {
      t = Tensor::from<float>({a.floats_size()}, std::vector<float>(a.floats().begin(), a.floats().end()));
    } else if (k == "value_int") {
      t = Tensor::scalar<int64_t>(a.i());
    } else if (k == "value_ints") {
      t = Tensor::from<int64_t>({a.ints_size()}, std::vector<int64_t>(a.ints().begin(), a.ints().end()));
    } else if (k == "value_string") {  // packed (jobflow/strings.h)
      t = pack_strings({a.s()}, {});
      type = strings_type(0);
    } else if (k == "value_strings") {
      t = pack_strings(std::vector<std::string>(a.strings().begin(), a.strings().end()), {a.strings_size()});
      type = strings_type(1);
    } else if (k == "sparse_value") {
      I.unsupported("Constant(" + k + ")");
    } else {
      continue;
    }
    ++n;
  }
  if (n != 1) I.err("needs exactly one value attribute");
  I.out_const(0, t, type);
}

void op_constant_of_shape(Importer& I) {
  if (!I.is_const(0)) {  // a shape computed in the graph: known per call
    Tensor v = I.attr_t("value");
    if (!v.defined()) v = Tensor::scalar<float>(0.0f);
    if (v.numel() != 1) I.err("value must hold one element");
    I.out(0, constant_of_shape(I.in(0), v));
    return;
  }
  auto s = I.ints_in(0);
  if (s.size() > kMaxImportRank) I.err("rank exceeds 8");
  for (int64_t d : s)
    if (d < 0) I.err("negative dimension");
  Tensor v = I.attr_t("value");
  if (!v.defined()) v = Tensor::scalar<float>(0.0f);
  if (v.numel() != 1) I.err("value must hold one element");
  Shape sh(s.begin(), s.end());
  I.check_size(sh, v.dtype(), "output");
  I.out_const(0, make_tensor(sh, v.dtype(), std::vector<double>(static_cast<size_t>(numel(sh)), v.at(0))));
}

void op_shape(Importer& I) {
  const Shape s = I.shape(0);
  const int64_t r = static_cast<int64_t>(s.size());
  int64_t st = I.attr_i("start", 0), en = I.attr_i("end", r);
  if (!is_static(s)) {  // known per call: folded when the job is specialized to the call's shapes
    I.out(0, shape_of(I.in(0), st, en));
    if (st < 0) st += r;
    if (en < 0) en += r;
    st = std::clamp<int64_t>(st, 0, r), en = std::clamp<int64_t>(en, std::min(st, r), r);
    if (I.wants(0)) I.values[I.node->output(0)].dims = Shape(s.begin() + st, s.begin() + en);
    return;
  }
  if (st < 0) st += r;
  if (en < 0) en += r;
  st = std::clamp<int64_t>(st, 0, r), en = std::clamp<int64_t>(en, 0, r);
  std::vector<int64_t> v;
  for (int64_t d = st; d < en; ++d) v.push_back(s[d]);
  I.out_const(0, i64_tensor(v));
}

void op_size(Importer& I) {
  if (!is_static(I.shape(0))) I.out(0, size_of(I.in(0)));
  else I.out_const(0, i64_tensor({numel(I.shape(0))}, true));
}

// Bounds known at load time make the sequence a constant computed here;
// bounds computed in the graph make a range op (its length known per call).
void op_range(Importer& I) {
  if (!I.is_const(0) || !I.is_const(1) || !I.is_const(2)) {
    I.out(0, range(I.in(0), I.in(1), I.in(2)));
    return;
  }
  const double s = I.cin(0).at(0), l = I.cin(1).at(0), d = I.cin(2).at(0);
  if (d == 0) I.err("delta is 0");
  const double n = std::max(std::ceil((l - s) / d), 0.0);
  if (n > (1 << 24)) I.err("range too long");
  std::vector<double> v;
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) v.push_back(s + i * d);
  I.out_const(0, make_tensor({static_cast<int64_t>(v.size())}, I.cin(0).dtype(), v));
}

void op_tile(Importer& I) {
  Blob y = I.in(0);
  I.need_static(y.shape());
  auto reps = I.ints_in(1);
  if (static_cast<int>(reps.size()) != y.ndim()) I.err("repeats must have one value per dim");
  for (int d = 0; d < y.ndim(); ++d) {
    if (reps[d] < 1) I.unsupported("Tile(repeats < 1)");
    if (reps[d] == 1) continue;
    Shape grown = y.shape();
    if (grown[d] > 0 && reps[d] > std::numeric_limits<int64_t>::max() / grown[d]) I.err("repeats too large");
    grown[d] *= reps[d];
    I.check_size(grown, y.dtype(), "Tile result");
    y = concat(std::vector<Blob>(static_cast<size_t>(reps[d]), y), d);
  }
  I.out(0, identity(y));
}

void op_depth_space(Importer& I, bool to_space) {
  Blob x = I.in(0);
  if (x.ndim() != 4) I.err("input must be 4-D");
  const int64_t b = I.attr_i("blocksize", 0);
  if (b <= 0 || b >= (int64_t(1) << 16)) I.err("blocksize " + std::to_string(b) + " is not in 1..65535");
  const Shape s = x.shape();
  I.need_static(s);
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
  if (to_space) {
    if (C % (b * b)) I.err("channels not divisible by blocksize^2");
    const bool crd = I.attr_s("mode", "DCR") == "CRD";
    Blob t = crd ? transpose(reshape(x, {N, C / (b * b), b, b, H, W}), {0, 1, 4, 2, 5, 3})
                 : transpose(reshape(x, {N, b, b, C / (b * b), H, W}), {0, 3, 4, 1, 5, 2});
    I.out(0, reshape(t, {N, C / (b * b), H * b, W * b}));
  } else {
    if (H % b || W % b) I.err("spatial dims not divisible by blocksize");
    Blob t = transpose(reshape(x, {N, C, H / b, b, W / b, b}), {0, 3, 5, 1, 2, 4});
    I.out(0, reshape(t, {N, C * b * b, H / b, W / b}));
  }
}

// ---- outputs at definition when values are computed in the graph ----
// (ImportRow::values_per_call: the node is imported again per call.)

std::vector<TensorSpec> unsqueeze_specs(Importer& I) {
  const TensorSpec x = I.spec(0);
  return {dynamic_spec(x.shape.size() + static_cast<size_t>(static_length(I, 1)), x.dtype)};
}

std::vector<TensorSpec> squeeze_specs(Importer& I) {
  const TensorSpec x = I.spec(0);
  const int64_t n = static_length(I, 1);
  if (n > static_cast<int64_t>(x.shape.size())) I.err("axes has more values than x " + shape_str(x.shape) + " has dims");
  return {dynamic_spec(x.shape.size() - static_cast<size_t>(n), x.dtype)};
}

// ---- export ----

// slice (one axis, start, len) -> Slice.
void export_slice(Exporter& E) {
  const std::string& nm = E.name();
  const int64_t axis = E.op().attr_int("axis"), start = E.op().attr_int("start"), len = E.op().attr_int("len");
  E.add("Slice",
        {E.in(0), E.int64_init(nm + "/starts", {start}), E.int64_init(nm + "/ends", {start + len}),
         E.int64_init(nm + "/axes", {axis})},
        {E.out(0)}, nm);
}

}  // namespace

void shape_onnx_rows(OpRows& r) {
  r.import_op("Reshape", op_reshape);
  r.import_op("Flatten", op_flatten, true);
  r.import_op("Squeeze", op_squeeze, true).values_per_call({1}, squeeze_specs);
  r.import_op("Unsqueeze", op_unsqueeze, true).values_per_call({1}, unsqueeze_specs);
  r.import_op("Transpose", op_transpose, true);
  r.import_op("Concat", op_concat, true);
  r.import_op("Identity", op_identity, true).takes_sequences().takes_strings();
  r.import_op("Constant", op_constant);
  r.import_op("ConstantOfShape", op_constant_of_shape);
  r.import_op("Shape", op_shape);
  r.import_op("Size", op_size);
  r.import_op("Range", op_range);
  r.import_op("Tile", op_tile, true).values_per_call({1}, input_rank);
  r.import_op("DepthToSpace", [](Importer& I) { op_depth_space(I, true); });
  r.import_op("SpaceToDepth", [](Importer& I) { op_depth_space(I, false); });

  // The static output shape as an int64 initializer; with dynamic dims the
  // request: -1 inferred, 0 for a dim copied from the same position (else
  // -1 when there is none yet).
  r.export_op(OpKind::Reshape, [](Exporter& E) {
    Shape s = E.out_spec(0).shape;
    if (!is_static(s)) {
      s = E.op().attr_ints("shape");
      bool inferred = std::find(s.begin(), s.end(), -1) != s.end();
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] > -2) continue;
        if (s[i] == internal::same_dim(static_cast<int64_t>(i))) s[i] = 0;
        else if (!inferred) s[i] = -1, inferred = true;
        else throw Error("[onnx.save] node '" + E.name() + "': reshape " + shape_str(E.op().attr_ints("shape")) +
                         " moves dynamic dims; ONNX Reshape cannot say it");
      }
    }
    E.add("Reshape", {E.in(0), E.int64_init(E.name() + "/shape", s)}, {E.out(0)}, E.name());
  });
  r.export_op(OpKind::ShapeOf, [](Exporter& E) {
    NodeProto* n = E.add_as("Shape");
    if (E.op().attr_int("start") != 0) Exporter::set_int(n, "start", E.op().attr_int("start"));
    if (E.op().attr_int("end") != INT64_MAX) Exporter::set_int(n, "end", E.op().attr_int("end"));
  });
  r.export_op(OpKind::SizeOf, [](Exporter& E) { E.add_as("Size"); });
  r.export_op(OpKind::ReshapeTo, [](Exporter& E) {
    NodeProto* n = E.add_as("Reshape");
    if (E.op().attr_int("allowzero")) Exporter::set_int(n, "allowzero", 1);
  });
  r.export_op(OpKind::ConstantOfShape, [](Exporter& E) {
    Exporter::set_tensor(E.add_as("ConstantOfShape"), "value", E.op().attr_tensor("value"));
  });
  r.export_op(OpKind::Range, [](Exporter& E) { E.add_as("Range"); });
  r.export_op(OpKind::Transpose, [](Exporter& E) { Exporter::set_ints(E.add_as("Transpose"), "perm", E.op().attr_ints("perm")); });
  r.export_op(OpKind::Concat, [](Exporter& E) { Exporter::set_int(E.add_as("Concat"), "axis", E.op().attr_int("axis")); });
  r.export_op(OpKind::Slice, export_slice);
  r.export_op(OpKind::Identity, [](Exporter& E) { E.add_as("Identity"); });
  r.export_op(OpKind::Constant, [](Exporter& E) { Exporter::set_tensor(E.add_as("Constant"), "value", E.op().attr_tensor("value")); });
}

}  // namespace jobflow::onnx
