// ONNX rows of the elementwise ops (ops/elementwise.cpp): arithmetic with
// broadcasting, unary math, relu/sigmoid/tanh, cast, add_n (registry.h).
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "onnx/onnx_util.h"
#include "ops_internal.h"

namespace jobflow::onnx {
namespace {

namespace ou = onnx_util;

// ---- import ----

void unary(Importer& I, Blob (*f)(Blob)) { I.out(0, f(I.in(0))); }

enum class Arith { Add, Sub, Mul, Div };

void op_binary(Importer& I, Arith kind) {
  auto [a, b] = binary_operands(I);
  Blob y;
  switch (kind) {
    case Arith::Add: y = add(a, b); break;
    case Arith::Sub: y = sub(a, b); break;
    case Arith::Mul: y = mul(a, b); break;
    case Arith::Div: y = div(a, b); break;
  }
  I.out(0, y);
}

enum class Variadic { Sum, Mean, Max, Min };

void op_variadic(Importer& I, Variadic kind) {
  Blob y = I.in(0);
  for (int i = 1; i < I.nin(); ++i) {
    Blob b = I.in(i);
    if (b.dtype() != y.dtype()) I.err("input dtypes differ: " + spec_str(y.spec()) + " and " + spec_str(b.spec()));
    switch (kind) {
      case Variadic::Sum: case Variadic::Mean: y = add(y, b); break;
      case Variadic::Max: y = jobflow::maximum(y, b); break;  // any dtype; NaN propagates
      case Variadic::Min: y = jobflow::minimum(y, b); break;
    }
  }
  if (kind == Variadic::Mean && I.nin() > 1) y = mul_scalar(y, 1.0 / I.nin());
  if (I.nin() == 1) y = identity(y);
  I.out(0, y);
}

void op_reciprocal(Importer& I) {
  Blob x = I.in(0);
  I.out(0, div(scalar_blob(1.0, x.dtype()), x));
}

void op_cast(Importer& I) {
  const int64_t to = I.attr_i("to", 0);
  if (to == TensorProto::STRING || I.type_of(0).is_strings()) {  // ops/strings_onnx.cpp
    std::optional<DType> dt;
    if (to != TensorProto::STRING) {
      try {
        dt = ou::from_onnx_dtype(static_cast<int32_t>(to), "Cast 'to'");
      } catch (const Error& e) {
        I.err(e.what());
      }
    }
    import_string_cast(I, dt);
    return;
  }
  DType dt;
  try {
    dt = ou::from_onnx_dtype(static_cast<int32_t>(to), "Cast 'to'");
  } catch (const Error&) {
    std::string n = TensorProto::DataType_IsValid(static_cast<int>(to))
                        ? TensorProto::DataType_Name(static_cast<TensorProto::DataType>(to)) : std::to_string(to);
    I.unsupported("Cast(to " + n + ")");
  }
  if (I.is_const(0) && I.value(I.iname(0)).pure_const()) {
    I.out_const(0, I.cin(0).astype(dt));
    return;
  }
  Blob x = I.in(0);
  I.out(0, x.dtype() == dt && !is_half(dt) ? identity(x) : cast(x, dt));  // cast alone takes float16
}

void op_castlike(Importer& I) {
  if (I.type_of(0).is_strings() || I.type_of(1).is_strings()) {  // ops/strings_onnx.cpp
    import_string_cast(I, I.type_of(1).is_strings() ? std::nullopt : std::optional<DType>(I.spec(1).dtype));
    return;
  }
  const DType dt = I.spec(1).dtype;
  if (I.is_const(0) && I.value(I.iname(0)).pure_const()) {
    I.out_const(0, I.cin(0).astype(dt));
    return;
  }
  Blob x = I.in(0);
  I.out(0, x.dtype() == dt && !is_half(dt) ? identity(x) : cast(x, dt));
}

// ---- export ----

// The ops standard ONNX lacks, as nodes of the ai.jobflow domain; their
// model-local functions, for other runtimes:
//   Rsqrt(X) = Reciprocal(Sqrt(X)),  Square(X) = Mul(X, X),
//   EqualMask(A, B) = CastLike(Equal(A, B), A).
void rsqrt_body(::onnx::FunctionProto& f) {
  f.add_input("X");
  f.add_output("Y");
  Exporter::add_to(f, "Sqrt", {"X"}, {"S"});
  Exporter::add_to(f, "Reciprocal", {"S"}, {"Y"});
}

void square_body(::onnx::FunctionProto& f) {
  f.add_input("X");
  f.add_output("Y");
  Exporter::add_to(f, "Mul", {"X", "X"}, {"Y"});
}

// add_scalar, mul_scalar: the scalar as a Constant of the operand's dtype.
void export_scalar_op(Exporter& E, const char* type) {
  const std::string c = E.constant(E.name() + "/scalar", Exporter::scalar_of(E.in_spec(0).dtype, E.op().attr_double("scalar")));
  E.add(type, {E.in(0), c}, {E.out(0)}, E.name());
}

void equal_mask_body(::onnx::FunctionProto& f) {
  f.add_input("A");
  f.add_input("B");
  f.add_output("Y");
  Exporter::add_to(f, "Equal", {"A", "B"}, {"E"});
  Exporter::add_to(f, "CastLike", {"E", "A"}, {"Y"});
}

void export_cast(Exporter& E) {
  Exporter::set_int(E.add_as("Cast"), "to", ou::to_onnx_dtype(dtype_from_name(E.op().attr_string("dtype"))));
}

}  // namespace

void elementwise_onnx_rows(OpRows& r) {
  // Same dtypes, numpy broadcasting; Add and Mul take the weights of an
  // ordinary model's affine layers.
  r.import_op("Add", [](Importer& I) { op_binary(I, Arith::Add); }, true).weights = {0, 1};
  r.import_op("Sub", [](Importer& I) { op_binary(I, Arith::Sub); }, true);
  r.import_op("Mul", [](Importer& I) { op_binary(I, Arith::Mul); }, true).weights = {0, 1};
  r.import_op("Div", [](Importer& I) { op_binary(I, Arith::Div); }, true);
  r.import_op("Sum", [](Importer& I) { op_variadic(I, Variadic::Sum); }, true);
  r.import_op("Mean", [](Importer& I) { op_variadic(I, Variadic::Mean); }, true);
  r.import_op("Max", [](Importer& I) { op_variadic(I, Variadic::Max); }, true);
  r.import_op("Min", [](Importer& I) { op_variadic(I, Variadic::Min); }, true);
  r.import_op("Neg", [](Importer& I) { unary(I, neg); }, true);
  r.import_op("Exp", [](Importer& I) { unary(I, exp); }, true);
  r.import_op("Log", [](Importer& I) { unary(I, log); }, true);
  r.import_op("Sqrt", [](Importer& I) { unary(I, sqrt); }, true);
  r.import_op("Reciprocal", op_reciprocal, true);
  r.import_op("Relu", [](Importer& I) { I.out(0, nn::relu(I.in(0))); });
  r.import_op("Sigmoid", [](Importer& I) { I.out(0, nn::sigmoid(I.in(0))); });
  r.import_op("Tanh", [](Importer& I) { I.out(0, nn::tanh(I.in(0))); });
  r.import_op("Cast", op_cast).takes_strings();
  r.import_op("CastLike", op_castlike).takes_strings();
  r.import_jobflow_op("Rsqrt", [](Importer& I) { unary(I, rsqrt); });
  r.import_jobflow_op("Square", [](Importer& I) { unary(I, square); });
  r.import_jobflow_op("EqualMask", [](Importer& I) { I.out(0, internal::equal_mask(I.in(0), I.in(1))); });

  r.export_op(OpKind::Add, [](Exporter& E) { E.add_as("Add"); });
  r.export_op(OpKind::Sub, [](Exporter& E) { E.add_as("Sub"); });
  r.export_op(OpKind::Mul, [](Exporter& E) { E.add_as("Mul"); });
  r.export_op(OpKind::Div, [](Exporter& E) { E.add_as("Div"); });
  r.export_op(OpKind::Neg, [](Exporter& E) { E.add_as("Neg"); });
  r.export_op(OpKind::Exp, [](Exporter& E) { E.add_as("Exp"); });
  r.export_op(OpKind::Log, [](Exporter& E) { E.add_as("Log"); });
  r.export_op(OpKind::Sqrt, [](Exporter& E) { E.add_as("Sqrt"); });
  r.export_op(OpKind::Sigmoid, [](Exporter& E) { E.add_as("Sigmoid"); });
  r.export_op(OpKind::Tanh, [](Exporter& E) { E.add_as("Tanh"); });
  r.export_op(OpKind::Relu, [](Exporter& E) { E.add_as("Relu"); });
  r.export_op(OpKind::Rsqrt, [](Exporter& E) { E.add_jobflow("Rsqrt", {E.in(0)}, {E.out(0)}, E.name(), rsqrt_body); });
  r.export_op(OpKind::Square, [](Exporter& E) { E.add_jobflow("Square", {E.in(0)}, {E.out(0)}, E.name(), square_body); });
  r.export_op(OpKind::AddScalar, [](Exporter& E) { export_scalar_op(E, "Add"); });
  r.export_op(OpKind::MulScalar, [](Exporter& E) { export_scalar_op(E, "Mul"); });
  r.export_op(OpKind::EqualMask, [](Exporter& E) {
    E.add_jobflow("EqualMask", {E.in(0), E.in(1)}, {E.out(0)}, E.name(), equal_mask_body);
  });
  r.export_op(OpKind::AddN, [](Exporter& E) { E.add_as("Sum"); });
  r.export_op(OpKind::Cast, export_cast);
}

}  // namespace jobflow::onnx
