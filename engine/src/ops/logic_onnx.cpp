// ONNX rows of the comparisons, logical ops and where (ops/logic.cpp)
// (registry.h).
#include "onnx/exporter.h"
#include "onnx/importer.h"

namespace jobflow::onnx {
namespace {

template <Blob (*F)(Blob, Blob, const std::string&)>
void op_compare(Importer& I) {
  auto [a, b] = binary_operands(I);
  I.out(0, F(a, b, ""));
}

template <Blob (*F)(Blob, Blob, const std::string&)>
void op_logical(Importer& I) {
  auto [a, b] = binary_operands(I);
  if (a.dtype() != DType::Bool) I.err("inputs must be bool, got " + spec_str(a.spec()));
  I.out(0, F(a, b, ""));
}

void op_where(Importer& I) {
  Blob c = I.in(0), x = I.in(1), y = I.in(2);
  if (c.dtype() != DType::Bool) I.err("condition must be bool, got " + spec_str(c.spec()));
  if (x.dtype() != y.dtype()) I.err("X and Y differ in dtype: " + spec_str(x.spec()) + " and " + spec_str(y.spec()));
  Shape s;
  if (!layout::broadcast_shape(x.shape(), y.shape(), &s) || !layout::broadcast_shape(c.shape(), s, &s))
    I.err("shapes " + shape_str(c.shape()) + ", " + shape_str(x.shape()) + " and " + shape_str(y.shape()) +
          " do not broadcast");
  I.out(0, where(c, x, y));
}

void op_isinf(Importer& I) {
  Blob x = I.in(0);
  if (!is_floating(x.dtype())) I.unsupported(std::string("IsInf(") + dtype_name(x.dtype()) + ")");
  I.out(0, math::is_inf(x, I.attr_i("detect_positive", 1) != 0, I.attr_i("detect_negative", 1) != 0));
}

void op_isnan(Importer& I) {
  Blob x = I.in(0);
  if (!is_floating(x.dtype())) I.unsupported(std::string("IsNaN(") + dtype_name(x.dtype()) + ")");
  I.out(0, math::is_nan(x));
}

void op_not(Importer& I) {
  Blob x = I.in(0);
  if (x.dtype() != DType::Bool) I.err("input must be bool, got " + spec_str(x.spec()));
  I.out(0, logical_not(x));
}

}  // namespace

void logic_onnx_rows(OpRows& r) {
  r.import_op("Equal", op_compare<equal>, true);
  r.import_op("Less", op_compare<less>, true);
  r.import_op("Greater", op_compare<greater>, true);
  r.import_op("LessOrEqual", op_compare<less_equal>, true);
  r.import_op("GreaterOrEqual", op_compare<greater_equal>, true);
  r.import_op("And", op_logical<logical_and>, true);
  r.import_op("Or", op_logical<logical_or>, true);
  r.import_op("Xor", op_logical<logical_xor>, true);
  r.import_op("Not", op_not, true);
  r.import_op("Where", op_where, true);
  r.import_op("IsNaN", op_isnan, true);
  r.import_op("IsInf", op_isinf, true);

  r.export_op(OpKind::Equal, [](Exporter& E) { E.add_as("Equal"); });
  r.export_op(OpKind::Less, [](Exporter& E) { E.add_as("Less"); });
  r.export_op(OpKind::Greater, [](Exporter& E) { E.add_as("Greater"); });
  r.export_op(OpKind::LessEqual, [](Exporter& E) { E.add_as("LessOrEqual"); });
  r.export_op(OpKind::GreaterEqual, [](Exporter& E) { E.add_as("GreaterOrEqual"); });
  r.export_op(OpKind::LogicalAnd, [](Exporter& E) { E.add_as("And"); });
  r.export_op(OpKind::LogicalOr, [](Exporter& E) { E.add_as("Or"); });
  r.export_op(OpKind::LogicalXor, [](Exporter& E) { E.add_as("Xor"); });
  r.export_op(OpKind::LogicalNot, [](Exporter& E) { E.add_as("Not"); });
  r.export_op(OpKind::Where, [](Exporter& E) { E.add_as("Where"); });
  r.export_op(OpKind::IsNaN, [](Exporter& E) { E.add_as("IsNaN"); });
  r.export_op(OpKind::IsInf, [](Exporter& E) {
    NodeProto* n = E.add_as("IsInf");
    Exporter::set_int(n, "detect_positive", E.op().attr_int("detect_positive"));
    Exporter::set_int(n, "detect_negative", E.op().attr_int("detect_negative"));
  });
}

}  // namespace jobflow::onnx
