// ONNX rows of the activations and broadcasting binary ops
// (ops/activations.cpp): leaky_relu, elu, selu, softplus, softsign,
// hard_sigmoid, clip, prelu, pow, minimum, maximum (registry.h).
#include <cmath>
#include <limits>

#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "onnx/onnx_util.h"

namespace jobflow::onnx {
namespace {

namespace ou = onnx_util;

// ---- import ----

void op_pow(Importer& I) {
  Blob a = I.in(0);
  if (is_floating(a.dtype())) {
    // The engine's pow: any exponent tensor (broadcast), known at run time or
    // not. ONNX lets the exponent have another numeric type: it is cast to
    // the base's.
    Shape bs;
    if (!layout::broadcast_shape(a.shape(), I.shape(1), &bs)) I.err("shapes " + shape_str(a.shape()) + " and " + shape_str(I.shape(1)) + " do not broadcast");
    Blob b;
    if (I.spec(1).dtype == a.dtype()) b = I.in(1);
    else if (I.value(I.iname(1)).pure_const()) b = constant(I.cin(1).astype(a.dtype()));
    else b = cast(I.in(1), a.dtype());
    I.out(0, jobflow::pow(a, b));
    return;
  }
  // Integer bases: a constant scalar exponent with an exact integer form is
  // that form; any other exponent goes through float64 (exact for the
  // integers float64 holds), truncated back to the base's dtype.
  if (!I.is_const(1) || I.cin(1).numel() != 1) {
    if (a.dtype() == DType::Bool || I.spec(1).dtype == DType::Bool) I.err("inputs must be numeric");
    Shape s;
    if (!layout::broadcast_shape(a.shape(), I.shape(1), &s)) I.err("shapes " + shape_str(a.shape()) + " and " + shape_str(I.shape(1)) + " do not broadcast");
    Blob e = I.in(1);
    I.out(0, cast(jobflow::pow(cast(a, DType::Float64), e.dtype() == DType::Float64 ? e : cast(e, DType::Float64)), a.dtype()));
    return;
  }
  const double e = I.cin(1).at(0);
  Blob y;
  if (e == 1.0) y = identity(a);
  else if (e == 2.0) y = square(a);
  else if (e == 3.0) y = mul(square(a), a);
  else if (e == 0.5) y = sqrt(a);
  else if (e == -0.5) y = rsqrt(a);
  else if (e == -1.0) y = div(scalar_blob(1.0, a.dtype()), a);
  else if (e == 0.0) y = ones_like(a);
  else I.unsupported("Pow(exponent " + ou::number_to_text(e) + ")");
  Shape s;
  layout::broadcast_shape(a.shape(), I.shape(1), &s);
  if (y.shape() != s) y = broadcast_to(y, s);
  I.out(0, y);
}

void op_celu(Importer& I) {
  const double a = I.attr_f("alpha", 1.0);
  Blob x = I.in(0);
  // max(0,x) + min(0, a*(exp(x/a)-1)) = relu(x) + a*(exp(-relu(-x)/a) - 1)
  I.out(0, add(nn::relu(x), mul_scalar(add_scalar(exp(mul_scalar(neg(nn::relu(neg(x))), 1.0 / a)), -1.0), a)));
}

void op_selu(Importer& I) {
  const double alpha = I.attr_f("alpha", 1.67326319217681884765625);
  const double gamma = I.attr_f("gamma", 1.05070102214813232421875);
  I.out(0, nn::selu(I.in(0), alpha, gamma));
}

void op_prelu(Importer& I) {
  Blob x = I.in(0), s = I.in(1);
  // Legacy (opset < 7, or a per-channel slope that does not broadcast from
  // the right): slope of shape (C,) applies along axis 1.
  Shape bs;
  const bool ok = layout::broadcast_shape(x.shape(), s.shape(), &bs);
  if (s.ndim() == 1 && x.ndim() >= 2 && s.shape()[0] == x.shape()[1] && s.shape()[0] != 1 &&
      (I.opset < 7 || !ok || x.shape().back() != s.shape()[0])) {
    Shape sh(x.ndim() - 1, 1);
    sh[0] = s.shape()[0];
    s = reshape(s, sh);
  }
  if (!is_floating(x.dtype())) I.unsupported(std::string("PRelu(") + dtype_name(x.dtype()) + ")");
  I.out(0, nn::prelu(x, s));
}

void op_hardsigmoid(Importer& I) {
  I.out(0, nn::hard_sigmoid(I.in(0), I.attr_f("alpha", 0.2), I.attr_f("beta", 0.5)));
}

void op_hardswish(Importer& I) {  // x * max(0, min(1, x / 6 + 1 / 2))
  Blob x = I.in(0);
  I.out(0, mul(x, nn::hard_sigmoid(x, 1.0 / 6, 0.5)));
}

void op_mish(Importer& I) {
  Blob x = I.in(0);
  I.out(0, mul(x, math::tanh(nn::softplus(x))));
}

void op_clip(Importer& I) {
  std::optional<double> lo, hi;
  if (I.opset < 11) {
    if (I.has_attr("min")) lo = I.attr_f("min", 0);
    if (I.has_attr("max")) hi = I.attr_f("max", 0);
  } else {
    if ((I.has(1) && !I.is_const(1)) || (I.has(2) && !I.is_const(2))) {
      // Bounds known only at run time: max then min (min > max gives max).
      Blob x = I.in(0);
      Blob y = x;
      for (int i : {1, 2}) {
        if (!I.has(i)) continue;
        Blob b = I.in(i);
        if (b.dtype() != x.dtype()) I.err("bound " + spec_str(b.spec()) + " differs from the input " + spec_str(x.spec()));
        y = i == 1 ? jobflow::maximum(y, b) : jobflow::minimum(y, b);
      }
      I.out(0, y);
      return;
    }
    for (int i : {1, 2}) {
      if (!I.has(i)) continue;
      const Tensor b = I.cin(i);
      if (b.numel() != 1) I.err("bound '" + I.iname(i) + "' must be a scalar, got " + shape_str(b.shape()));
      (i == 1 ? lo : hi) = b.at(0);
    }
  }
  // The engine's clip: min(max(x, min), max) for any numeric dtype (so
  // min > max gives max, as ONNX says); integer bounds are exact up to 2^53.
  I.out(0, jobflow::clip(I.in(0), lo, hi));
}

// ---- export ----

void export_leaky_relu(Exporter& E) {
  const double alpha = E.op().attr_double("alpha");
  if (E.float_attr_exact(alpha)) {
    Exporter::set_float(E.add_as("LeakyRelu"), "alpha", alpha);
  } else {
    // x >= 0 ? x : alpha x is PRelu with a scalar slope, which a float64
    // tensor holds exactly.
    E.add("PRelu", {E.in(0), E.constant(E.name() + "/alpha", Exporter::scalar_of(E.in_spec(0).dtype, alpha))}, {E.out(0)},
          E.name());
  }
}

void export_elu(Exporter& E) {
  const double alpha = E.op().attr_double("alpha");
  E.check_param("alpha", alpha);
  Exporter::set_float(E.add_as("Elu"), "alpha", alpha);
}

void export_selu(Exporter& E) {
  const double alpha = E.op().attr_double("alpha"), gamma = E.op().attr_double("gamma");
  E.check_param("alpha", alpha);
  E.check_param("gamma", gamma);
  NodeProto* n = E.add_as("Selu");
  Exporter::set_float(n, "alpha", alpha);
  Exporter::set_float(n, "gamma", gamma);
}

void export_hard_sigmoid(Exporter& E) {
  const double alpha = E.op().attr_double("alpha"), beta = E.op().attr_double("beta");
  if (E.float_attr_exact(alpha) && E.float_attr_exact(beta)) {
    NodeProto* n = E.add_as("HardSigmoid");
    Exporter::set_float(n, "alpha", alpha);
    Exporter::set_float(n, "beta", beta);
    return;
  }
  // min(max(alpha x + beta, 0), 1) with exact float64 constants: the same
  // operations in the same order.
  const std::string& nm = E.name();
  const DType dt = E.in_spec(0).dtype;
  const std::string ax = E.fresh(nm + "/scaled"), axb = E.fresh(nm + "/shifted");
  E.add("Mul", {E.in(0), E.constant(nm + "/alpha", Exporter::scalar_of(dt, alpha))}, {ax}, ax);
  E.add("Add", {ax, E.constant(nm + "/beta", Exporter::scalar_of(dt, beta))}, {axb}, axb);
  E.add("Clip",
        {axb, E.constant(nm + "/zero", Exporter::scalar_of(dt, 0.0)), E.constant(nm + "/one", Exporter::scalar_of(dt, 1.0))},
        {E.out(0)}, nm);
}

template <class T>
Tensor int_bound(double v, bool upper) {
  // As the engine's integer clip: rounded inwards, saturated to T's range.
  constexpr T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
  const double r = upper ? std::floor(v) : std::ceil(v);
  return Tensor::scalar<T>(r <= static_cast<double>(lo) ? lo : r >= static_cast<double>(hi) ? hi : static_cast<T>(r));
}

// clip -> Clip(x, min, max) with the bounds as scalars of x's dtype (inputs
// since opset 11, so float64 bounds stay exact); an infinite bound is absent.
void export_clip(Exporter& E) {
  const DType dt = E.in_spec(0).dtype;
  auto bound = [&](double v, bool upper) -> std::string {
    if (std::isinf(v) && (v > 0) == upper) return "";
    const std::string name = E.name() + (upper ? "/max" : "/min");
    if (is_floating(dt)) return E.constant(name, Exporter::scalar_of(dt, v));
    if (std::isnan(v)) E.no_form("a NaN bound on integer data");
    switch (dt) {
      case DType::Int32: return E.constant(name, int_bound<int32_t>(v, upper));
      case DType::Int64: return E.constant(name, int_bound<int64_t>(v, upper));
      case DType::Int8: return E.constant(name, int_bound<int8_t>(v, upper));
      case DType::UInt8: return E.constant(name, int_bound<uint8_t>(v, upper));
      case DType::Int16: return E.constant(name, int_bound<int16_t>(v, upper));
      case DType::UInt16: return E.constant(name, int_bound<uint16_t>(v, upper));
      case DType::UInt32: return E.constant(name, int_bound<uint32_t>(v, upper));
      case DType::UInt64: return E.constant(name, int_bound<uint64_t>(v, upper));
      default: E.no_form(std::string("dtype ") + dtype_name(dt));
    }
  };
  std::vector<std::string> ins{E.in(0), bound(E.op().attr_double("min"), false), bound(E.op().attr_double("max"), true)};
  while (ins.back().empty()) ins.pop_back();
  E.add("Clip", ins, {E.out(0)}, E.name());
}

}  // namespace

void activation_onnx_rows(OpRows& r) {
  // The activations map onto the engine's ops, as save() writes them, so
  // that a saved job loads back to the same ops.
  r.import_op("LeakyRelu", [](Importer& I) { I.out(0, nn::leaky_relu(I.in(0), I.attr_f("alpha", 0.01))); });
  r.import_op("Elu", [](Importer& I) { I.out(0, nn::elu(I.in(0), I.attr_f("alpha", 1.0))); });
  r.import_op("Celu", op_celu);
  r.import_op("Selu", op_selu);
  r.import_op("PRelu", op_prelu).weights = {1};
  r.import_op("Softplus", [](Importer& I) { I.out(0, nn::softplus(I.in(0))); });
  r.import_op("Softsign", [](Importer& I) { I.out(0, nn::softsign(I.in(0))); });
  r.import_op("HardSigmoid", op_hardsigmoid);
  r.import_op("HardSwish", op_hardswish);
  r.import_op("Mish", op_mish);
  r.import_op("Clip", op_clip);
  r.import_op("Pow", op_pow);

  r.export_op(OpKind::LeakyRelu, export_leaky_relu);
  r.export_op(OpKind::Elu, export_elu);
  r.export_op(OpKind::Selu, export_selu);
  r.export_op(OpKind::HardSigmoid, export_hard_sigmoid);
  r.export_op(OpKind::Softplus, [](Exporter& E) { E.add_as("Softplus"); });
  r.export_op(OpKind::Softsign, [](Exporter& E) { E.add_as("Softsign"); });
  r.export_op(OpKind::Clip, export_clip);
  // Same dtypes, numpy broadcasting (Min/Max: NaN propagates, as the
  // engine's minimum/maximum); prelu's slope broadcasts to x.
  r.export_op(OpKind::PRelu, [](Exporter& E) { E.add_as("PRelu"); });
  r.export_op(OpKind::Pow, [](Exporter& E) { E.add_as("Pow"); });
  r.export_op(OpKind::Minimum, [](Exporter& E) { E.add_as("Min"); });
  r.export_op(OpKind::Maximum, [](Exporter& E) { E.add_as("Max"); });
}

}  // namespace jobflow::onnx
