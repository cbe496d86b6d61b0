// ONNX rows of softmax, the cross-entropy, dropout and batch normalization
// (ops/nn.cpp), and the normalizations ONNX has that the engine builds from
// other ops (InstanceNormalization, LayerNormalization) (registry.h).
#include <utility>

#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "onnx/onnx_util.h"
#include "ops_internal.h"

namespace jobflow::onnx {
namespace {

namespace ou = onnx_util;

// ---- import ----

void op_softmax(Importer& I, bool log_) {
  Blob x = I.in(0);
  const int r = x.ndim();
  auto f = [&](Blob v, int axis) { return log_ ? nn::log_softmax(v, axis) : nn::softmax(v, axis); };
  if (I.opset >= 13) {
    I.out(0, f(x, I.axis_of(I.attr_i("axis", -1), r)));
    return;
  }
  const int ax = I.axis_of(I.attr_i("axis", 1), std::max(r, 1));
  if (ax == r - 1) {
    I.out(0, f(x, ax));
    return;
  }
  const Shape xs = x.shape();
  if (!is_static(xs)) {  // (outer, inner) and back to x's shape, known per call
    const Shape in(xs.begin() + ax, xs.end());
    if (!is_static(in)) I.unsupported(I.node->op_type() + "(axis " + std::to_string(ax) + " before the last with dynamic dims after it)");
    I.out(0, reshape_to(f(internal::reshape_request(x, {-1, numel(in)}), 1), shape_of(x)));
    return;
  }
  // numel throws where the product overflows
  const int64_t outer = numel(Shape(xs.begin(), xs.begin() + ax)), inner = numel(Shape(xs.begin() + ax, xs.end()));
  I.out(0, reshape(f(reshape(x, {outer, inner}), 1), xs));
}

std::optional<int64_t> ignore_index_of(Importer& I) {
  if (!I.has_attr("ignore_index")) return std::nullopt;
  return I.attr_i("ignore_index", 0);
}

std::string loss_reduction(Importer& I) {
  const std::string red = I.attr_s("reduction", "mean");
  if (red != "none" && red != "mean" && red != "sum") I.err("reduction must be none, mean or sum, got '" + red + "'");
  return red;
}

void op_nll_loss(Importer& I) {
  Blob x = I.in(0), target = I.in(1);
  if (x.ndim() < 2) I.err("input must have rank >= 2, got " + spec_str(x.spec()));
  if (!is_floating(x.dtype())) I.unsupported(std::string("NegativeLogLikelihoodLoss(") + dtype_name(x.dtype()) + ")");
  I.need_static({x.shape()[1]});
  I.out(0, nn::nll_loss(x, target, I.has(2) ? I.in(2) : Blob(), ignore_index_of(I), loss_reduction(I)));
}

void op_sce_loss(Importer& I) {
  Blob scores = I.in(0), labels = I.in(1);
  const std::string red = loss_reduction(I);
  const Shape ss = scores.shape();
  if (ss.size() < 2) I.err("scores must have rank >= 2");
  if (!is_floating(scores.dtype())) I.unsupported(std::string("SoftmaxCrossEntropyLoss(") + dtype_name(scores.dtype()) + ")");
  I.need_static({ss[1]});
  if (I.has(2) || I.has_attr("ignore_index")) {  // weights or ignored labels: log_softmax + nll_loss
    const auto r = nn::softmax_cross_entropy_loss(scores, labels, I.has(2) ? I.in(2) : Blob(), ignore_index_of(I), red);
    I.out(0, r.loss);
    if (I.wants(1)) I.out(1, r.log_prob);
    return;
  }
  // The engine's fused op (which a saved job's loss exports as), with the
  // class axis moved last for more than 2 dims.
  I.need_static(ss);
  const int64_t C = ss[1];
  Blob logits = scores;
  Shape lshape = labels.shape();
  if (ss.size() > 2) {
    std::vector<int> perm{0};
    for (int d = 2; d < static_cast<int>(ss.size()); ++d) perm.push_back(d);
    perm.push_back(1);
    logits = reshape(transpose(scores, perm), {-1, C});
    labels = reshape(labels, {numel(lshape)});
  }
  Blob l = nn::sparse_softmax_cross_entropy_with_logits(labels, logits);
  if (ss.size() > 2) l = reshape(l, lshape);
  if (red == "mean") l = reduce_mean(l);
  else if (red == "sum") l = reduce_sum(l);
  I.out(0, l);
  if (I.wants(1)) I.out(1, nn::log_softmax(scores, 1));
}

// 1 at the first largest element along the axis (before opset 13: of the
// input flattened to 2-D there), else 0.
void op_hardmax(Importer& I) {
  Blob x = I.in(0);
  if (!is_floating(x.dtype())) I.unsupported(std::string("Hardmax(") + dtype_name(x.dtype()) + ")");
  const int r = x.ndim();
  auto hardmax = [&](Blob v, int ax) {
    const int64_t n = v.shape()[ax];
    if (n < 0) I.unsupported("Hardmax(dims known per call)");
    Shape cs(v.ndim(), 1);
    cs[ax] = n;
    std::vector<double> iota(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) iota[static_cast<size_t>(i)] = static_cast<double>(i);
    Blob hot = equal(unsqueeze(argmax(v, ax), {ax}), constant(make_tensor(cs, DType::Int32, iota)));
    return cast(hot, v.dtype());
  };
  if (I.opset >= 13) {
    I.out(0, hardmax(x, I.axis_of(I.attr_i("axis", -1), r)));
    return;
  }
  const int ax = I.axis_of(I.attr_i("axis", 1), std::max(r, 1));
  const Shape xs = x.shape();
  I.need_static(xs);
  const int64_t outer = numel(Shape(xs.begin(), xs.begin() + ax)), inner = numel(Shape(xs.begin() + ax, xs.end()));
  I.out(0, reshape(hardmax(reshape(x, {outer, inner}), 1), xs));
}

void op_dropout(Importer& I) {
  Blob x = I.in(0);
  double ratio = I.attr_f("ratio", 0.5);
  bool training = I.train;
  bool mode_per_call = false;  // training_mode a graph value: decided per call
  Blob ratio_blob;             // a ratio computed in the graph
  if (I.opset >= 12) {
    if (I.has(2) && !I.is_const(2)) mode_per_call = true;
    else if (I.has(2)) training = I.cin(2).at(0) != 0;
    ratio = 0.5;
    if (I.has(1) && I.is_const(1)) ratio = I.cin(1).at(0);
    else if (I.has(1)) ratio_blob = I.in(1);
    // Without training the ratio does not matter: it may be computed at run time.
    if (!training && !mode_per_call) ratio = 0.0, ratio_blob = Blob();
  }
  // A train job's dropout: the node name keys the mask stream (as in the
  // job that was saved).
  if (training && I.train && ratio > 0 && !ratio_blob.defined() && !mode_per_call) {
    if (I.wants(1)) I.unsupported("Dropout(mask output)");
    I.out(0, nn::dropout(x, ratio, I.node->name()));
    return;
  }
  if ((training || mode_per_call) && (ratio > 0 || ratio_blob.defined())) {
    // Dropout asked for by the model itself (training_mode true, or given
    // per call): kept where a uniform draw is at least the ratio, scaled by
    // 1 / (1 - ratio); with the mode per call, the input itself otherwise.
    if (!is_floating(x.dtype())) I.err("data must be a float tensor, got " + spec_str(x.spec()));
    Blob r = ratio_blob.defined() ? cast(reshape(ratio_blob, {}), x.dtype()) : scalar_blob(ratio, x.dtype());
    const double seed = static_cast<double>(I.attr_i("seed", 0));  // (an int for Dropout)
    Blob keep = greater_equal(random::uniform_like(x, 0.0, 1.0, x.dtype(), seed), r);
    Blob dropped = div(mul(x, cast(keep, x.dtype())), sub(scalar_blob(1.0, x.dtype()), r));
    if (mode_per_call) {
      Blob t = cast(reshape(I.in(2), {}), DType::Bool);
      I.out(0, where(t, dropped, x));
      if (I.wants(1)) I.out(1, logical_or(keep, logical_not(t)));
    } else {
      I.out(0, dropped);
      if (I.wants(1)) I.out(1, keep);
    }
    return;
  }
  I.out(0, identity(x));
  // Nothing dropped: the mask keeps every element.
  if (I.wants(1)) I.out(1, cast(ones_like(x), DType::Bool));
}

void op_batchnorm(Importer& I) {
  Blob x = I.in(0);
  const double eps = I.attr_f("epsilon", 1e-5);
  const double momentum = I.attr_f("momentum", 0.9);
  bool training = false;
  if (I.opset >= 14) training = I.attr_i("training_mode", 0) != 0;
  else if (I.opset >= 7) training = I.wants(1) || I.wants(2);
  else training = I.attr_i("is_test", 0) == 0 && (I.wants(1) || I.wants(2));
  if (x.ndim() < 2) I.err("input must have rank >= 2");
  if (!training) {
    for (int i = 1; i < I.node->output_size(); ++i)
      if (I.wants(i)) I.unsupported("BatchNormalization(statistics outputs in inference)");
    I.out(0, nn::batch_normalization(x, I.in(3), I.in(4), I.in(2), I.in(1), eps, 1));
    return;
  }
  if (I.job_file && !I.inspect_mode) {
    // A Jobflow batch normalization layer (batch_norm_train, saved in
    // training mode): batch statistics in train jobs, the moving ones in
    // predict jobs. Inputs 3 and 4 are its moving statistics: variables the
    // job updates in place. A layer without scale or offset was saved with
    // constant ones or zeros there, which compute the same.
    for (int i : {3, 4})
      if (!I.value(I.iname(i)).variable)
        I.err("input '" + I.iname(i) + "' of a training batch normalization must be a float initializer (a variable)");
    I.out(0, internal::batch_norm_layer(x, I.in(3), I.in(4), I.in(1), I.in(2), 1, eps, momentum, I.node->name()));
    return;
  }
  // ONNX training mode in any job: batch statistics, running stats as outputs.
  std::vector<int> axes;
  for (int d = 0; d < x.ndim(); ++d)
    if (d != 1) axes.push_back(d);
  Blob mean = reduce_mean(x, axes, true);
  Blob xc = sub(x, mean);
  Blob var = reduce_mean(square(xc), axes, true);
  Shape cs(x.ndim(), 1);
  if (x.ndim() < 2) I.err("input must have rank >= 2");
  I.need_static({x.shape()[1]});
  cs[1] = x.shape()[1];
  Blob y = mul(xc, rsqrt(add_scalar(var, eps)));
  y = add(mul(y, reshape(I.in(1), cs)), reshape(I.in(2), cs));
  I.out(0, y);
  const int64_t C = x.shape()[1];
  if (I.wants(1)) I.out(1, add(mul_scalar(I.in(3), momentum), mul_scalar(reshape(mean, {C}), 1 - momentum)));
  if (I.wants(2)) I.out(2, add(mul_scalar(I.in(4), momentum), mul_scalar(reshape(var, {C}), 1 - momentum)));
}

void op_instancenorm(Importer& I) {
  Blob x = I.in(0);
  const double eps = I.attr_f("epsilon", 1e-5);
  if (x.ndim() < 3) I.err("input must have rank >= 3");
  std::vector<int> axes;
  for (int d = 2; d < x.ndim(); ++d) axes.push_back(d);
  Blob xc = sub(x, reduce_mean(x, axes, true));
  Blob y = mul(xc, rsqrt(add_scalar(reduce_mean(square(xc), axes, true), eps)));
  Shape cs(x.ndim(), 1);
  I.need_static({x.shape()[1]});
  cs[1] = x.shape()[1];
  I.out(0, add(mul(y, reshape(I.in(1), cs)), reshape(I.in(2), cs)));
}

void op_layernorm(Importer& I) {
  Blob x = I.in(0);
  const double eps = I.attr_f("epsilon", 1e-5);
  const int ax = I.axis_of(I.attr_i("axis", -1), x.ndim());
  if (I.attr_i("stash_type", 1) != 1) I.unsupported("LayerNormalization(stash_type)");
  std::vector<int> axes;
  for (int d = ax; d < x.ndim(); ++d) axes.push_back(d);
  Blob mean = reduce_mean(x, axes, true);
  Blob xc = sub(x, mean);
  Blob inv = rsqrt(add_scalar(reduce_mean(square(xc), axes, true), eps));
  Blob y = mul(mul(xc, inv), I.in(1));
  if (I.has(2)) y = add(y, I.in(2));
  I.out(0, y);
  I.out(1, mean);
  I.out(2, inv);
}

// LRN: x / (bias + alpha / size * (sum of x^2 over the channels c -
// floor((size-1)/2) .. c + ceil((size-1)/2)))^beta, the sum as slices of
// the zero-padded squares.
void op_lrn(Importer& I) {
  Blob x = I.in(0);
  if (!is_floating(x.dtype())) I.unsupported(std::string("LRN(") + dtype_name(x.dtype()) + ")");
  if (x.ndim() < 3) I.err("input must have rank >= 3, got " + spec_str(x.spec()));
  if (!I.has_attr("size")) I.err("needs the attribute 'size'");
  const int64_t size = I.attr_i("size", 1), C = x.shape()[1];
  if (size < 1 || size > 1024) I.err("size must be in 1..1024, got " + std::to_string(size));
  I.need_static({C});
  const double alpha = I.attr_f("alpha", 1e-4), beta = I.attr_f("beta", 0.75), bias = I.attr_f("bias", 1.0);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  std::vector<int64_t> p(2 * static_cast<size_t>(x.ndim()), 0);
  p[1] = before;
  p[static_cast<size_t>(x.ndim()) + 1] = after;
  Blob sq = pad(square(x), p);
  std::vector<Blob> parts;
  for (int64_t i = 0; i < size; ++i) parts.push_back(slice(sq, {i}, {i + C}, {1}));
  Blob sum = parts.size() == 1 ? parts[0] : internal::add_n(parts);
  const DType dt = x.dtype();
  Blob den = pow(add(mul(sum, scalar_blob(alpha / static_cast<double>(size), dt)), scalar_blob(bias, dt)), scalar_blob(beta, dt));
  I.out(0, div(x, den));
}

// MeanVarianceNormalization: (x - mean) / (sqrt(mean(x^2) - mean^2) + 1e-9)
// over `axes`.
void op_mvn(Importer& I) {
  Blob x = I.in(0);
  if (!is_floating(x.dtype())) I.unsupported(std::string("MeanVarianceNormalization(") + dtype_name(x.dtype()) + ")");
  std::vector<int> axes;
  for (int64_t a : I.attr_ints("axes", {0, 2, 3})) axes.push_back(I.axis_of(a, x.ndim()));
  Blob mean = reduce_mean(x, axes, true);
  Blob sd = sqrt(sub(reduce_mean(square(x), axes, true), square(mean)));
  I.out(0, div(sub(x, mean), add(sd, scalar_blob(1e-9, x.dtype()))));
}

// ---- export ----

// sparse_softmax_cross_entropy -> SoftmaxCrossEntropyLoss (reduction
// "none"), the labels through a Cast to int64.
void export_sparse_xent(Exporter& E) {
  E.only_first_output();
  std::string labels = E.in(0);
  if (E.in_spec(0).dtype != DType::Int64) {
    labels = E.fresh(E.name() + "/labels_int64");
    Exporter::set_int(E.add("Cast", {E.in(0)}, {labels}, labels), "to", TensorProto::INT64);
  }
  Exporter::set_string(E.add("SoftmaxCrossEntropyLoss", {E.in(1), labels}, {E.out(0)}, E.name()), "reduction", "none");
}

// dropout -> Dropout with a float64 ratio Constant and, in train jobs,
// training_mode = true; the node name keys the mask stream.
void export_dropout(Exporter& E) {
  E.only_first_output();
  const std::string& nm = E.name();
  std::vector<std::string> ins{E.in(0), E.constant(nm + "/ratio", Exporter::scalar_of(DType::Float64, E.op().attr_double("rate")))};
  if (E.train()) {
    const std::string t = E.fresh(nm + "/training_mode");
    NodeProto* c = E.add("Constant", {}, {t}, t);
    auto* at = c->add_attribute();
    at->set_name("value");
    at->set_type(AttributeProto::TENSOR);
    at->mutable_t()->set_data_type(TensorProto::BOOL);
    at->mutable_t()->set_raw_data(std::string(1, '\1'));
    ins.push_back(t);
  }
  E.add("Dropout", ins, {E.out(0)}, nm);
}

// batch_normalization (functional) and batch_norm_train (the layer in a
// train job) -> BatchNormalization(X, scale, B, mean, var), channels on
// axis 1; a missing scale/offset as ones/zeros. batch_norm_train is written
// in training mode with its momentum: the running statistics outputs are
// the moving variables a loader's batch_norm_train updates in place.
void export_batch_norm(Exporter& E) {
  const Primitive& p = E.op();
  const std::string& nm = E.name();
  const int64_t rank = static_cast<int64_t>(E.in_spec(0).shape.size());
  int64_t axis = p.attr_int("axis");
  if (axis < 0) axis += rank;
  if (axis != 1 || rank < 2)
    E.no_form("ONNX BatchNormalization normalizes along axis 1 only (axis=" + std::to_string(p.attr_int("axis")) +
              ", rank " + std::to_string(rank) + ")");
  const bool functional = p.kind() == OpKind::BatchNormalization;
  const bool has_scale = p.attr_int(functional ? "scale" : "gamma");
  const bool has_offset = p.attr_int(functional ? "offset" : "beta");
  const int64_t C = E.in_spec(0).shape[1];
  const DType dt = E.in_spec(0).dtype;
  // functional inputs: x, mean, var, [offset], [scale]; train: x, mm, mv, [gamma], [beta].
  std::string scale, offset;
  if (functional) {
    if (has_offset) offset = E.in(3);
    if (has_scale) scale = E.in(3 + has_offset);
  } else {
    if (has_scale) scale = E.in(3);
    if (has_offset) offset = E.in(3 + has_scale);
  }
  if (scale.empty()) scale = E.constant(nm + "/scale", Exporter::filled({C}, dt, 1.0));
  if (offset.empty()) offset = E.constant(nm + "/offset", Exporter::filled({C}, dt, 0.0));
  std::vector<std::string> outs{E.out(0)};
  if (!functional) {
    E.only_first_output();
    outs.push_back(E.fresh(nm + "/running_mean"));
    outs.push_back(E.fresh(nm + "/running_var"));
  }
  NodeProto* n = E.add("BatchNormalization", {E.in(0), scale, offset, E.in(1), E.in(2)}, outs, nm);
  Exporter::set_float(n, "epsilon", p.attr_double("epsilon"));
  if (!functional) {
    Exporter::set_float(n, "momentum", p.attr_double("momentum"));
    Exporter::set_int(n, "training_mode", 1);
  }
}

}  // namespace

void nn_onnx_rows(OpRows& r) {
  r.import_op("Softmax", [](Importer& I) { op_softmax(I, false); });
  r.import_op("LogSoftmax", [](Importer& I) { op_softmax(I, true); });
  r.import_op("SoftmaxCrossEntropyLoss", op_sce_loss);
  r.import_op("NegativeLogLikelihoodLoss", op_nll_loss);
  r.import_op("Hardmax", op_hardmax);
  r.import_op("LRN", op_lrn);
  r.import_op("MeanVarianceNormalization", op_mvn);
  r.import_op("Dropout", op_dropout);
  r.import_op("BatchNormalization", op_batchnorm).weights = {1, 2};
  r.import_op("InstanceNormalization", op_instancenorm).weights = {1, 2};
  r.import_op("LayerNormalization", op_layernorm).weights = {1, 2};

  r.export_op(OpKind::Softmax, [](Exporter& E) { Exporter::set_int(E.add_as("Softmax"), "axis", E.op().attr_int("axis")); });
  r.export_op(OpKind::LogSoftmax,
              [](Exporter& E) { Exporter::set_int(E.add_as("LogSoftmax"), "axis", E.op().attr_int("axis")); });
  r.export_op(OpKind::SparseSoftmaxCrossEntropy, export_sparse_xent);
  r.export_op(OpKind::Dropout, export_dropout);
  r.export_op(OpKind::BatchNormalization, export_batch_norm);
  r.export_op(OpKind::BatchNormTrain, export_batch_norm);
}

}  // namespace jobflow::onnx
