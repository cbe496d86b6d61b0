// ONNX rows of the quantization ops, built from other ops (registry.h):
// QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger and
// QLinearMatMul. (ConvInteger and QLinearConv are in conv_onnx.cpp.)
//
// Integer products are computed in float64, whose integers are exact far
// beyond any int32 result; rounding is to the nearest even (math::round), as
// ONNX specifies.
#include "onnx/exporter.h"
#include "onnx/importer.h"

namespace jobflow::onnx {
namespace {

bool is_q8(DType t) { return t == DType::UInt8 || t == DType::Int8; }

// A scale or zero point of a rank-`rank` x: a scalar, or 1-D along the
// node's `axis` (per axis).
Blob per_axis(Importer& I, Blob p, int rank, const char* what) {
  const Shape s = p.shape();
  if (numel(s) == 1) return reshape(p, {});
  if (s.size() != 1) I.err(std::string(what) + " must be a scalar or 1-D, got " + spec_str(p.spec()));
  const int axis = I.axis_of(I.attr_i("axis", 1), rank);
  Shape r(static_cast<size_t>(rank), 1);
  r[static_cast<size_t>(axis)] = s[0];
  return reshape(p, r);
}

// round(v) + zero point, saturated to the range of `to` and cast.
Blob saturate(Blob v, DType to) {
  const double lo = to == DType::UInt8 ? 0 : -128, hi = to == DType::UInt8 ? 255 : 127;
  return cast(clip(v, lo, hi), to);
}

// y = saturate(round(x / y_scale) + y_zero_point), uint8 without a zero point.
void op_quantize(Importer& I) {
  Blob x = I.in(0), scale = I.in(1);
  if (!is_floating(x.dtype())) I.unsupported(std::string("QuantizeLinear(") + dtype_name(x.dtype()) + ")");
  if (scale.dtype() != x.dtype()) I.err("y_scale " + spec_str(scale.spec()) + " must have x's dtype");
  const int r = x.ndim();
  if (I.attr_i("saturate", 1) != 1) I.unsupported("QuantizeLinear(saturate)");
  if (I.has_attr("block_size") && I.attr_i("block_size", 0) != 0) I.unsupported("QuantizeLinear(block_size)");
  DType to = DType::UInt8;
  Blob q = math::round(div(x, per_axis(I, scale, r, "y_scale")));
  if (I.has(2)) {
    Blob zp = I.in(2);
    to = zp.dtype();
    if (!is_q8(to)) I.unsupported(std::string("QuantizeLinear(") + dtype_name(to) + ")");
    q = add(q, cast(per_axis(I, zp, r, "y_zero_point"), x.dtype()));
  }
  I.out(0, saturate(q, to));
}

// y = (x - x_zero_point) * x_scale in the scale's dtype.
void op_dequantize(Importer& I) {
  Blob x = I.in(0), scale = I.in(1);
  if (!is_q8(x.dtype()) && x.dtype() != DType::Int32) I.unsupported(std::string("DequantizeLinear(") + dtype_name(x.dtype()) + ")");
  if (!is_floating(scale.dtype())) I.err("x_scale must be float, got " + spec_str(scale.spec()));
  const int r = x.ndim();
  if (I.has_attr("block_size") && I.attr_i("block_size", 0) != 0) I.unsupported("DequantizeLinear(block_size)");
  const DType ft = scale.dtype();
  Blob v = cast(x, ft);
  if (I.has(2)) {
    Blob zp = I.in(2);
    if (zp.dtype() != x.dtype()) I.err("x_zero_point " + spec_str(zp.spec()) + " must have x's dtype");
    v = sub(v, cast(per_axis(I, zp, r, "x_zero_point"), ft));
  }
  I.out(0, mul(v, per_axis(I, scale, r, "x_scale")));
}

// uint8 quantization with the scale and zero point that map [min(x, 0),
// max(x, 0)] onto [0, 255].
void op_dynamic_quantize(Importer& I) {
  Blob x = I.in(0);
  if (x.dtype() != DType::Float32) I.unsupported(std::string("DynamicQuantizeLinear(") + dtype_name(x.dtype()) + ")");
  const DType f = DType::Float32;
  Blob zero = scalar_blob(0, f);
  Blob hi = maximum(reduce_max(x), zero), lo = minimum(neg(reduce_max(neg(x))), zero);
  Blob range = where(equal(hi, lo), scalar_blob(1, f), sub(hi, lo));
  Blob scale = div(range, scalar_blob(255, f));
  Blob zp = math::round(clip(sub(zero, div(lo, scale)), 0.0, 255.0));
  I.out(0, saturate(add(math::round(div(x, scale)), zp), DType::UInt8));
  if (I.wants(1)) I.out(1, scale);
  if (I.wants(2)) I.out(2, cast(zp, DType::UInt8));
}

// a - zero point in float64; the zero point a scalar, or 1-D per row of a
// (M) or per column of b (N).
Blob centred(Importer& I, Blob a, int zp_input, bool rows) {
  Blob f = cast(a, DType::Float64);
  if (!I.has(zp_input)) return f;
  Blob zp = I.in(zp_input);
  if (zp.dtype() != a.dtype()) I.err("zero point " + spec_str(zp.spec()) + " must have its input's dtype " + dtype_name(a.dtype()));
  Blob z = cast(zp, DType::Float64);
  if (numel(zp.shape()) == 1) return sub(f, reshape(z, {}));
  if (zp.ndim() != 1) I.err("zero point must be a scalar or 1-D, got " + spec_str(zp.spec()));
  return sub(f, rows ? unsqueeze(z, {1}) : z);
}

// (a - a_zero_point) @ (b - b_zero_point), exact in float64.
Blob integer_matmul(Importer& I, Blob a, int azp, Blob b, int bzp) {
  for (const Blob& t : {a, b})
    if (!is_q8(t.dtype())) I.unsupported(I.node->op_type() + "(" + dtype_name(t.dtype()) + ")");
  if (a.ndim() < 2 || b.ndim() < 2) I.unsupported(I.node->op_type() + "(1-D operands)");
  return matmul(centred(I, a, azp, true), centred(I, b, bzp, false));
}

void op_matmul_integer(Importer& I) { I.out(0, cast(integer_matmul(I, I.in(0), 2, I.in(1), 3), DType::Int32)); }

// saturate(round(((a - a_zp) @ (b - b_zp)) * a_scale * b_scale / y_scale) + y_zp)
void op_qlinear_matmul(Importer& I) {
  Blob prod = integer_matmul(I, I.in(0), 2, I.in(3), 5);
  Blob as = I.in(1), bs = I.in(4), ys = I.in(6);
  for (const Blob& s : {as, bs, ys})
    if (s.dtype() != DType::Float32 || numel(s.shape()) != 1)
      I.unsupported("QLinearMatMul(scale " + spec_str(s.spec()) + ")");
  Blob k = cast(div(mul(reshape(as, {}), reshape(bs, {})), reshape(ys, {})), DType::Float64);
  Blob y = mul(prod, k);
  Blob zp = I.in(7);
  if (!is_q8(zp.dtype()) || numel(zp.shape()) != 1) I.unsupported("QLinearMatMul(y_zero_point " + spec_str(zp.spec()) + ")");
  y = add(y, cast(reshape(zp, {}), DType::Float64));
  I.out(0, saturate(math::round(y), zp.dtype()));
}

}  // namespace

void quant_onnx_rows(OpRows& r) {
  r.import_op("QuantizeLinear", op_quantize, true);
  r.import_op("DequantizeLinear", op_dequantize, true);
  r.import_op("DynamicQuantizeLinear", op_dynamic_quantize);
  r.import_op("MatMulInteger", op_matmul_integer);
  r.import_op("QLinearMatMul", op_qlinear_matmul);
}

}  // namespace jobflow::onnx
