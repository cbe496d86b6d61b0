// ONNX rows of the elementwise math (ops/math.cpp), and the activations ONNX
// has that the engine builds from other ops (ThresholdedRelu, Shrink)
// (registry.h).
#include <cmath>

#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "onnx/onnx_util.h"

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

// The windows of signal processing, sum_j a_j cos(2 pi j n / N) for n =
// 0..size-1 (N = size, or size - 1 when not periodic), computed in float64
// and given in output_datatype (float32 by default). A size computed at run
// time makes a range whose length is known per call.
void op_mel_weight_matrix(Importer& I) {
  DType out = DType::Float32;
  if (I.has_attr("output_datatype")) {
    try {
      out = onnx_util::from_onnx_dtype(static_cast<int32_t>(I.attr_i("output_datatype", 1)), "output_datatype");
    } catch (const Error&) {
      I.unsupported("MelWeightMatrix(output_datatype " + std::to_string(I.attr_i("output_datatype", 1)) + ")");
    }
  }
  Blob in[5], y;
  for (int i = 0; i < 5; ++i) in[i] = I.in(i);
  try {
    y = math::mel_weight_matrix(in[0], in[1], in[2], in[3], in[4], out);
  } catch (const Error& e) {
    I.err(e.what());
  }
  I.out(0, y);
}

void op_window(Importer& I, std::initializer_list<double> a) {
  DType out = DType::Float32;
  if (I.has_attr("output_datatype")) {
    try {
      out = onnx_util::from_onnx_dtype(static_cast<int32_t>(I.attr_i("output_datatype", 1)), "output_datatype");
    } catch (const Error&) {
      I.unsupported(I.node->op_type() + "(output_datatype " + std::to_string(I.attr_i("output_datatype", 1)) + ")");
    }
  }
  Blob size = I.in(0);
  if (size.dtype() != DType::Int64 && size.dtype() != DType::Int32) I.err("size must be an integer, got " + spec_str(size.spec()));
  if (numel(size.shape()) != 1) I.err("size must hold one element, got " + spec_str(size.spec()));
  const DType f = DType::Float64;
  Blob n;
  Blob N = cast(reshape(size, {}), f);
  if (I.is_const(0)) {
    const int64_t len = to_i64(I.cin(0)).at(0);
    if (len < 0 || len > (int64_t(1) << 31)) I.err("size " + std::to_string(len) + " is out of range");
    I.check_size({len}, f, "the window");
    std::vector<double> iota(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) iota[static_cast<size_t>(i)] = static_cast<double>(i);
    n = constant(make_tensor({len}, f, iota));
  } else {
    Blob s64 = cast(reshape(size, {}), DType::Int64);
    n = cast(range(scalar_blob(0, DType::Int64), s64, scalar_blob(1, DType::Int64)), f);
  }
  if (I.attr_i("periodic", 1) == 0) N = sub(N, scalar_blob(1, f));
  Blob phase = div(mul(n, scalar_blob(2 * M_PI, f)), N);
  Blob w;
  int j = 0;
  for (double c : a) {
    Blob term = j == 0 ? mul(ones_like(n), scalar_blob(c, f)) : mul(math::cos(mul(phase, scalar_blob(j, f))), scalar_blob(c, f));
    w = w.defined() ? add(w, term) : term;
    ++j;
  }
  I.out(0, cast(w, out));
}

// DFT: the discrete Fourier transform along `axis` of a real (..., 1) or
// complex (..., 2) signal, as products with constant cosine and sine
// matrices (einsum); dft_length pads with zeros or cuts the signal there,
// onesided keeps the first N/2 + 1 frequencies, inverse divides by N.
void op_dft(Importer& I) {
  Blob x = I.in(0);
  if (!is_floating(x.dtype())) I.unsupported(std::string("DFT(") + dtype_name(x.dtype()) + ")");
  const Shape xs = x.shape();
  const int r = x.ndim();
  if (r < 2 || (xs.back() != 1 && xs.back() != 2)) I.err("input must be (..., 1) or (..., 2), got " + spec_str(x.spec()));
  if (I.opset >= 20) I.unsupported("DFT(opset 20)");
  const int ax = I.axis_of(I.attr_i("axis", 1), r);
  if (ax == r - 1) I.err("axis must not be the last (the real and imaginary parts)");
  const bool inverse = I.attr_i("inverse", 0) != 0, onesided = I.attr_i("onesided", 0) != 0;
  if (onesided && (inverse || xs.back() == 2)) I.err("onesided needs a real signal and a forward transform");
  I.need_static(xs);
  int64_t N = xs[static_cast<size_t>(ax)];
  if (I.has(1)) {
    const std::vector<int64_t> len = I.ints_in(1);
    if (len.size() != 1 || len[0] < 1 || len[0] > (int64_t(1) << 24)) I.err("dft_length must be one positive count");
    std::vector<int64_t> p(2 * static_cast<size_t>(r), 0);
    p[static_cast<size_t>(r + ax)] = len[0] - N;  // negative cuts
    x = pad(x, p);
    N = len[0];
  }
  const int64_t K = onesided ? N / 2 + 1 : N;
  I.check_size({K, N}, DType::Float64, "DFT's matrices");
  std::vector<double> c(static_cast<size_t>(K * N)), sn(static_cast<size_t>(K * N));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) {
      const double a = 2 * M_PI * static_cast<double>((k * n) % N) / static_cast<double>(N);
      c[static_cast<size_t>(k * N + n)] = std::cos(a);
      sn[static_cast<size_t>(k * N + n)] = (inverse ? 1 : -1) * std::sin(a);
    }
  const DType dt = x.dtype();
  Blob C = constant(make_tensor({K, N}, dt, c)), S = constant(make_tensor({K, N}, dt, sn));
  const Shape ps = x.shape();  // after dft_length
  Blob re = squeeze(slice(x, {0}, {1}, {r - 1}), {r - 1});
  Blob im = ps.back() == 2 ? squeeze(slice(x, {1}, {2}, {r - 1}), {r - 1}) : Blob();
  std::string term, outt;
  for (int d = 0; d < r - 1; ++d) {
    term += d == ax ? 'Z' : static_cast<char>('A' + d);
    outt += d == ax ? 'Y' : static_cast<char>('A' + d);
  }
  const std::string eq = term + ",YZ->" + outt;
  // (re + i im)(cos + i sin) = re cos - im sin + i (re sin + im cos)
  Blob yr = einsum(eq, {re, C}), yi = einsum(eq, {re, S});
  if (im.defined()) {
    yr = sub(yr, einsum(eq, {im, S}));
    yi = add(yi, einsum(eq, {im, C}));
  }
  if (inverse) {
    yr = div(yr, scalar_blob(static_cast<double>(N), dt));
    yi = div(yi, scalar_blob(static_cast<double>(N), dt));
  }
  I.out(0, concat({unsqueeze(yr, {r - 1}), unsqueeze(yi, {r - 1})}, r - 1));
}

// STFT (opset 17): frames of frame_length samples every frame_step along
// the signal (batch, length, 1 or 2), weighted by the window, each
// transformed as DFT does (the first L/2 + 1 frequencies when onesided) ->
// (batch, frames, frequencies, 2). A frame step or length computed at run
// time makes ranges and a gather whose sizes are known per call.
void op_stft(Importer& I) {
  Blob x = I.in(0);
  if (!is_floating(x.dtype())) I.unsupported(std::string("STFT(") + dtype_name(x.dtype()) + ")");
  const Shape xs = x.shape();
  if (xs.size() != 3 || (xs[2] != 1 && xs[2] != 2)) I.err("signal must be (batch, length, 1 or 2), got " + spec_str(x.spec()));
  I.need_static(xs);
  const bool onesided = I.attr_i("onesided", 1) != 0;
  if (onesided && xs[2] == 2) I.err("onesided needs a real signal");
  const DType i64 = DType::Int64, dt = x.dtype();
  auto count = [&](int i, const char* what) {
    Blob b = I.in(i);
    if ((b.dtype() != DType::Int64 && b.dtype() != DType::Int32) || numel(b.shape()) != 1)
      I.err(std::string(what) + " must be one integer, got " + spec_str(b.spec()));
    return cast(reshape(b, {}), i64);
  };
  Blob step = count(1, "frame_step"), window, len;
  if (I.has(2)) {
    window = I.in(2);
    if (window.ndim() != 1 || window.dtype() != dt) I.err("window must be 1-D of the signal's dtype, got " + spec_str(window.spec()));
    I.need_static(window.shape());
    len = scalar_blob(static_cast<double>(window.shape()[0]), i64);
  }
  if (I.has(3)) len = count(3, "frame_length");
  if (!len.defined()) I.err("needs a window or a frame_length");
  Blob one = scalar_blob(1, i64), zero = scalar_blob(0, i64);
  Blob frames = add(div(sub(scalar_blob(static_cast<double>(xs[1]), i64), len), step), one);
  Blob n = range(zero, len, one), f = range(zero, frames, one);
  Blob idx = add(unsqueeze(mul(f, step), {1}), unsqueeze(n, {0}));  // (frames, L)
  Blob fr = gather(x, idx, 1);                                      // (batch, frames, L, 1 or 2)
  if (window.defined()) fr = mul(fr, unsqueeze(window, {1}));
  Blob bins = onesided ? add(div(len, scalar_blob(2, i64)), one) : len;
  Blob k = range(zero, bins, one);
  Blob kn = cast(math::mod(mul(unsqueeze(k, {1}), unsqueeze(n, {0})), len), dt);  // (k n) mod L
  Blob angle = div(mul(kn, scalar_blob(2 * M_PI, dt)), cast(len, dt));
  Blob C = math::cos(angle), S = neg(math::sin(angle));
  Blob re = squeeze(slice(fr, {0}, {1}, {3}), {3});
  Blob yr = einsum("bfn,kn->bfk", {re, C}), yi = einsum("bfn,kn->bfk", {re, S});
  if (xs[2] == 2) {
    Blob im = squeeze(slice(fr, {1}, {2}, {3}), {3});
    yr = sub(yr, einsum("bfn,kn->bfk", {im, S}));
    yi = add(yi, einsum("bfn,kn->bfk", {im, C}));
  }
  I.out(0, concat({unsqueeze(yr, {3}), unsqueeze(yi, {3})}, 3));
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
  r.import_op("DFT", op_dft);
  r.import_op("STFT", op_stft);
  r.import_op("HannWindow", [](Importer& I) { op_window(I, {0.5, -0.5}); });
  r.import_op("HammingWindow", [](Importer& I) { op_window(I, {25.0 / 46.0, -21.0 / 46.0}); });
  r.import_op("BlackmanWindow", [](Importer& I) { op_window(I, {0.42, -0.5, 0.08}); });
  r.import_op("MelWeightMatrix", op_mel_weight_matrix);

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
  r.export_op(OpKind::MelWeightMatrix, [](Exporter& E) {
    const DType dt = dtype_from_name(E.op().attr_string("dtype"));
    Exporter::set_int(E.add_as("MelWeightMatrix"), "output_datatype", onnx_util::to_onnx_dtype(dt));
  });
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
