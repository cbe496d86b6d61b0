// ONNX rows of the elementwise math (ops/math.cpp), and the activations ONNX
// has that the engine builds from other ops (ThresholdedRelu, Shrink)
// (registry.h).
#include <cmath>

#include "onnx/exporter.h"
#include "onnx/importer.h"

namespace jobflow::onnx {
namespace {

template <Blob (*F)(Blob, const std::string&)>
void op_float_unary(Importer& I) {
  Blob x = I.in(0);
  if (!is_floating(x.dtype())) I.unsupported(I.node->op_type() + "(" + dtype_name(x.dtype()) + ")");
  I.out(0, F(x, ""));
}

template <Blob (*F)(Blob, const std::string&)>
void op_any_unary(Importer& I) {
  Blob x = I.in(0);
  if (x.dtype() == DType::Bool) I.err("input must be numeric, got " + spec_str(x.spec()));
  I.out(0, F(x, ""));
}

void op_mod(Importer& I) {
  Blob a = I.in(0), b = I.in(1);
  if (a.dtype() != b.dtype()) I.err("input dtypes differ: " + spec_str(a.spec()) + " and " + spec_str(b.spec()));
  Shape s;
  if (!layout::broadcast_shape(a.shape(), b.shape(), &s))
    I.err("shapes " + shape_str(a.shape()) + " and " + shape_str(b.shape()) + " do not broadcast");
  const bool fmod = I.attr_i("fmod", 0) != 0;
  if (is_floating(a.dtype()) && !fmod) I.err("fmod must be 1 for floating-point inputs");
  I.out(0, math::mod(a, b, fmod));
}

void op_bitshift(Importer& I) {
  Blob a = I.in(0), b = I.in(1);
  if (a.dtype() != b.dtype()) I.err("input dtypes differ: " + spec_str(a.spec()) + " and " + spec_str(b.spec()));
  if (is_floating(a.dtype()) || a.dtype() == DType::Bool) I.err("inputs must be integers, got " + spec_str(a.spec()));
  const std::string dir = I.attr_s("direction", "");
  if (dir != "LEFT" && dir != "RIGHT") I.err("direction must be LEFT or RIGHT, got '" + dir + "'");
  I.out(0, math::bit_shift(a, b, dir == "LEFT"));
}

void op_gelu(Importer& I) {
  Blob x = I.in(0);
  if (!is_floating(x.dtype())) I.unsupported(std::string("Gelu(") + dtype_name(x.dtype()) + ")");
  const std::string a = I.attr_s("approximate", "none");
  if (a != "none" && a != "tanh") I.err("approximate must be none or tanh, got '" + a + "'");
  I.out(0, nn::gelu(x, a));
}

// x > alpha ? x : 0
void op_thresholded_relu(Importer& I) {
  Blob x = I.in(0);
  if (!is_floating(x.dtype())) I.unsupported(std::string("ThresholdedRelu(") + dtype_name(x.dtype()) + ")");
  Blob zero = scalar_blob(0.0, x.dtype());
  I.out(0, where(greater(x, scalar_blob(I.attr_f("alpha", 1.0), x.dtype())), x, zero));
}

// x < -lambd ? x + bias : x > lambd ? x - bias : 0
void op_shrink(Importer& I) {
  Blob x = I.in(0);
  if (x.dtype() == DType::Bool) I.err("input must be numeric");
  const double lambd = I.attr_f("lambd", 0.5), bias = I.attr_f("bias", 0.0);
  const DType dt = x.dtype();
  Blob up = add(x, scalar_blob(-bias, dt)), down = add(x, scalar_blob(bias, dt));
  if (!is_floating(dt)) {  // the float parameters act on the integer values, as ONNX computes
    up = cast(add(cast(x, DType::Float64), scalar_blob(-bias, DType::Float64)), dt);
    down = cast(add(cast(x, DType::Float64), scalar_blob(bias, DType::Float64)), dt);
  }
  Blob xf = is_floating(dt) ? x : cast(x, DType::Float64);
  const DType cdt = xf.dtype();
  Blob y = where(greater(xf, scalar_blob(lambd, cdt)), up, scalar_blob(0.0, dt));
  I.out(0, where(less(xf, scalar_blob(-lambd, cdt)), down, y));
}

// The model-local functions of ai.jobflow.Gelu and GeluTanh (opset < 20),
// constants cast like X:
//   Gelu(X)     = X / 2 * (1 + Erf(X / sqrt(2)))
//   GeluTanh(X) = X / 2 * (1 + Tanh(sqrt(2/pi) * (X + 0.044715 X^3)))
void gelu_constants(::onnx::FunctionProto& f, std::initializer_list<std::pair<const char*, double>> cs) {
  for (auto [name, v] : cs) {
    const std::string raw = std::string(name) + "_f";
    Exporter::set_float(Exporter::add_to(f, "Constant", {}, {raw}), "value_float", v);
    Exporter::add_to(f, "CastLike", {raw, "X"}, {name});
  }
}
void gelu_body(::onnx::FunctionProto& f) {
  f.add_input("X");
  f.add_output("Y");
  gelu_constants(f, {{"half", 0.5}, {"one", 1.0}, {"sqrt2", M_SQRT2}});
  Exporter::add_to(f, "Div", {"X", "sqrt2"}, {"h"});
  Exporter::add_to(f, "Erf", {"h"}, {"e"});
  Exporter::add_to(f, "Add", {"e", "one"}, {"s"});
  Exporter::add_to(f, "Mul", {"X", "half"}, {"xh"});
  Exporter::add_to(f, "Mul", {"xh", "s"}, {"Y"});
}
void gelu_tanh_body(::onnx::FunctionProto& f) {
  f.add_input("X");
  f.add_output("Y");
  gelu_constants(f, {{"half", 0.5}, {"one", 1.0}, {"c", std::sqrt(2.0 / M_PI)}, {"k", 0.044715}});
  Exporter::add_to(f, "Mul", {"X", "X"}, {"x2"});
  Exporter::add_to(f, "Mul", {"x2", "X"}, {"x3"});
  Exporter::add_to(f, "Mul", {"x3", "k"}, {"kx3"});
  Exporter::add_to(f, "Add", {"X", "kx3"}, {"u0"});
  Exporter::add_to(f, "Mul", {"u0", "c"}, {"u"});
  Exporter::add_to(f, "Tanh", {"u"}, {"t"});
  Exporter::add_to(f, "Add", {"t", "one"}, {"s"});
  Exporter::add_to(f, "Mul", {"X", "half"}, {"xh"});
  Exporter::add_to(f, "Mul", {"xh", "s"}, {"Y"});
}

}  // namespace

void math_onnx_rows(OpRows& r) {
  r.import_op("Erf", op_float_unary<math::erf>, true);
  r.import_op("Sin", op_float_unary<math::sin>, true);
  r.import_op("Cos", op_float_unary<math::cos>, true);
  r.import_op("Tan", op_float_unary<math::tan>, true);
  r.import_op("Asin", op_float_unary<math::asin>, true);
  r.import_op("Acos", op_float_unary<math::acos>, true);
  r.import_op("Atan", op_float_unary<math::atan>, true);
  r.import_op("Sinh", op_float_unary<math::sinh>, true);
  r.import_op("Cosh", op_float_unary<math::cosh>, true);
  r.import_op("Asinh", op_float_unary<math::asinh>, true);
  r.import_op("Acosh", op_float_unary<math::acosh>, true);
  r.import_op("Atanh", op_float_unary<math::atanh>, true);
  r.import_op("Floor", op_float_unary<math::floor>, true);
  r.import_op("Ceil", op_float_unary<math::ceil>, true);
  r.import_op("Round", op_float_unary<math::round>, true);
  r.import_op("Sign", op_any_unary<math::sign>, true);
  r.import_op("Abs", op_any_unary<math::abs>, true);
  r.import_op("Mod", op_mod, true);
  r.import_op("BitShift", op_bitshift, true);
  r.import_op("Gelu", op_gelu);
  r.import_jobflow_op("Gelu", [](Importer& I) { I.out(0, nn::gelu(I.in(0), "none")); });
  r.import_jobflow_op("GeluTanh", [](Importer& I) { I.out(0, nn::gelu(I.in(0), "tanh")); });
  r.import_op("ThresholdedRelu", op_thresholded_relu);
  r.import_op("Shrink", op_shrink);

  r.export_op(OpKind::Erf, [](Exporter& E) { E.add_as("Erf"); });
  r.export_op(OpKind::Sin, [](Exporter& E) { E.add_as("Sin"); });
  r.export_op(OpKind::Cos, [](Exporter& E) { E.add_as("Cos"); });
  r.export_op(OpKind::Tan, [](Exporter& E) { E.add_as("Tan"); });
  r.export_op(OpKind::Asin, [](Exporter& E) { E.add_as("Asin"); });
  r.export_op(OpKind::Acos, [](Exporter& E) { E.add_as("Acos"); });
  r.export_op(OpKind::Atan, [](Exporter& E) { E.add_as("Atan"); });
  r.export_op(OpKind::Sinh, [](Exporter& E) { E.add_as("Sinh"); });
  r.export_op(OpKind::Cosh, [](Exporter& E) { E.add_as("Cosh"); });
  r.export_op(OpKind::Asinh, [](Exporter& E) { E.add_as("Asinh"); });
  r.export_op(OpKind::Acosh, [](Exporter& E) { E.add_as("Acosh"); });
  r.export_op(OpKind::Atanh, [](Exporter& E) { E.add_as("Atanh"); });
  r.export_op(OpKind::Floor, [](Exporter& E) { E.add_as("Floor"); });
  r.export_op(OpKind::Ceil, [](Exporter& E) { E.add_as("Ceil"); });
  r.export_op(OpKind::Round, [](Exporter& E) { E.add_as("Round"); });
  r.export_op(OpKind::Sign, [](Exporter& E) { E.add_as("Sign"); });
  r.export_op(OpKind::Abs, [](Exporter& E) { E.add_as("Abs"); });
  r.export_op(OpKind::Mod, [](Exporter& E) { Exporter::set_int(E.add_as("Mod"), "fmod", E.op().attr_int("fmod")); });
  r.export_op(OpKind::BitShift,
              [](Exporter& E) { Exporter::set_string(E.add_as("BitShift"), "direction", E.op().attr_string("direction")); });
  // Gelu is an opset-20 op: earlier files get its formula in opset-17 ops.
  r.export_op(OpKind::Gelu, [](Exporter& E) {
    if (E.opset() >= 20) {
      Exporter::set_string(E.add_as("Gelu"), "approximate", E.op().attr_string("approximate"));
      return;
    }
    if (E.op().attr_string("approximate") == "tanh") E.add_jobflow("GeluTanh", {E.in(0)}, {E.out(0)}, E.name(), gelu_tanh_body);
    else E.add_jobflow("Gelu", {E.in(0)}, {E.out(0)}, E.name(), gelu_body);
  });
}

}  // namespace jobflow::onnx
