// ONNX rows of convolution and pooling (ops/conv.cpp, ops/conv_transpose.cpp):
// 1-D and 2-D Conv, ConvTranspose and pooling (1-D as 2-D with H = 1),
// global pooling as reductions (registry.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "onnx/onnx_util.h"
#include "ops_internal.h"

namespace jobflow::onnx {
namespace {

namespace ou = onnx_util;

// ---- import ----

struct SpatialArgs {
  std::vector<int64_t> k, s, d, pb, pe;
};

// Explicit pads for auto_pad, as ONNX defines them.
void resolve_auto_pad(Importer& I, const std::string& mode, const Shape& in, SpatialArgs& a) {
  const size_t n = a.k.size();
  if (mode == "NOTSET" || mode.empty()) return;
  for (size_t i = 0; i < n; ++i) {
    if (mode == "VALID") {
      a.pb[i] = a.pe[i] = 0;
    } else if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
      if (in[i] < 0 && a.s[i] != 1) I.unsupported(I.node->op_type() + "(auto_pad " + mode + ", stride > 1, dynamic size)");
      if (in[i] < 0) {  // stride 1: the total pad does not depend on the size
        const int64_t total = (a.k[i] - 1) * a.d[i];
        a.pb[i] = mode == "SAME_UPPER" ? total / 2 : total - total / 2;
        a.pe[i] = total - a.pb[i];
        continue;
      }
      const int64_t out = (in[i] + a.s[i] - 1) / a.s[i];
      const int64_t total = std::max<int64_t>((out - 1) * a.s[i] + (a.k[i] - 1) * a.d[i] + 1 - in[i], 0);
      const int64_t small = total / 2;
      a.pb[i] = mode == "SAME_UPPER" ? small : total - small;
      a.pe[i] = total - a.pb[i];
    } else {
      I.err("auto_pad \"" + mode + "\" is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER");
    }
  }
}

SpatialArgs spatial_args(Importer& I, const Shape& x, const std::vector<int64_t>& kernel, bool dil_ok) {
  const size_t n = kernel.size();
  SpatialArgs a;
  a.k = kernel;
  a.s = I.attr_ints("strides", std::vector<int64_t>(n, 1));
  a.d = I.attr_ints("dilations", std::vector<int64_t>(n, 1));
  auto pads = I.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  if (a.s.size() != n || a.d.size() != n || pads.size() != 2 * n)
    I.err("strides/dilations/pads do not match " + std::to_string(n) + " spatial dims");
  constexpr int64_t kMax = int64_t(1) << 31;  // keeps the size arithmetic below (and the engine's) in int64
  for (size_t i = 0; i < n; ++i) {
    if (a.k[i] <= 0 || a.s[i] <= 0 || a.d[i] <= 0) I.err("kernel, strides and dilations must be positive");
    if (pads[i] < 0 || pads[n + i] < 0) I.err("pads must be >= 0");
    if (a.k[i] >= kMax || a.s[i] >= kMax || a.d[i] >= kMax || pads[i] >= kMax || pads[n + i] >= kMax)
      I.err("kernel " + shape_str(a.k) + ", strides " + shape_str(a.s) + ", dilations " + shape_str(a.d) +
            " and pads " + shape_str(pads) + " must be below 2^31");
    if (!dil_ok && a.d[i] != 1) I.unsupported(I.node->op_type() + "(dilations)");
  }
  a.pb.assign(pads.begin(), pads.begin() + n);
  a.pe.assign(pads.begin() + n, pads.end());
  Shape sp(x.begin() + 2, x.end());
  resolve_auto_pad(I, I.attr_s("auto_pad", "NOTSET"), sp, a);
  return a;
}

// The forms of Conv and ConvTranspose the engine has: float32, 1-D or 2-D.
void check_conv_forms(Importer& I, const Blob& x, const Blob& w) {
  const int r = x.ndim();
  const std::string& op = I.node->op_type();
  if (x.dtype() != DType::Float32) I.unsupported(op + "(" + dtype_name(x.dtype()) + ")");
  if (r == 5) I.unsupported(op + "(3-D)");
  if (r != 3 && r != 4) I.err("input must be rank 3 or 4, got " + spec_str(x.spec()));
  if (w.ndim() != r) I.err("weight rank " + std::to_string(w.ndim()) + " differs from input rank");
}

// A 1-D (N, C, L) tensor as 2-D (N, C, 1, L), and back.
// (Dynamic dims are copied from the input: internal::same_dim.)
Blob as_2d(Blob t) {
  return internal::reshape_request(t, {internal::same_dim(0), internal::same_dim(1), 1, internal::same_dim(2)});
}
Blob as_1d(Blob t) {
  return internal::reshape_request(t, {internal::same_dim(0), internal::same_dim(1), internal::same_dim(3)});
}

// A 3-D convolution as 2-D ones: for each depth tap a of the kernel, the
// strided depth slices it reads (folded into the batch) convolved with the
// kernel's slice a, summed over the taps. Static shapes.
Blob conv3d_by_slices(Importer& I, Blob x, Blob w, const SpatialArgs& a, int64_t group) {
  const Shape xs = x.shape(), ws = w.shape();
  I.need_static(xs);
  I.need_static(ws);
  const int64_t N = xs[0], C = xs[1], K = ws[0], Cg = ws[1], kd = ws[2];
  const int64_t effd = (kd - 1) * a.d[0] + 1;
  const int64_t Dp = xs[2] + a.pb[0] + a.pe[0];
  if (Dp < effd) I.err("the kernel does not fit the padded input " + shape_str(xs));
  const int64_t Do = (Dp - effd) / a.s[0] + 1;
  Blob xp = pad(x, {0, 0, a.pb[0], 0, 0, 0, 0, a.pe[0], 0, 0});
  Blob acc;
  for (int64_t t = 0; t < kd; ++t) {
    Blob sl = slice(xp, {t * a.d[0]}, {t * a.d[0] + (Do - 1) * a.s[0] + 1}, {2}, {a.s[0]});  // (N, C, Do, H, W)
    Blob x2 = reshape(transpose(sl, {0, 2, 1, 3, 4}), {N * Do, C, xs[3], xs[4]});
    Blob w2 = reshape(slice(w, {t}, {t + 1}, {2}), {K, Cg, ws[3], ws[4]});
    Blob y = nn::conv2d(x2, w2, nn::Size2(a.s[1], a.s[2]), nn::Padding(std::vector<int64_t>{a.pb[1], a.pb[2], a.pe[1], a.pe[2]}),
                        nn::Size2(a.d[1], a.d[2]), group);
    acc = acc.defined() ? add(acc, y) : y;
  }
  const Shape ys = acc.shape();  // (N * Do, K, Ho, Wo)
  return transpose(reshape(acc, {N, Do, K, ys[2], ys[3]}), {0, 2, 1, 3, 4});
}

// Conv of x and w by the node's attributes (no bias).
Blob conv_of(Importer& I, Blob x, Blob w) {
  const int r = x.ndim();
  const bool conv3d = r == 5 && x.dtype() == DType::Float32 && w.ndim() == 5;
  if (!conv3d) check_conv_forms(I, x, w);
  const Shape wsh = w.shape();
  std::vector<int64_t> kernel(wsh.begin() + 2, wsh.end());
  if (auto ks = I.attr_ints("kernel_shape"); ks && *ks != kernel) I.err("kernel_shape does not match the weight");
  SpatialArgs a = spatial_args(I, x.shape(), kernel, true);
  const int64_t group = I.attr_i("group", 1);
  if (conv3d) return conv3d_by_slices(I, x, w, a, group);
  if (r == 3) {
    x = as_2d(x), w = as_2d(w);
    a.k.insert(a.k.begin(), 1), a.s.insert(a.s.begin(), 1), a.d.insert(a.d.begin(), 1);
    a.pb.insert(a.pb.begin(), 0), a.pe.insert(a.pe.begin(), 0);
  }
  Blob y = nn::conv2d(x, w, nn::Size2(a.s[0], a.s[1]), nn::Padding(std::vector<int64_t>{a.pb[0], a.pb[1], a.pe[0], a.pe[1]}),
                      nn::Size2(a.d[0], a.d[1]), group);
  return r == 3 ? as_1d(y) : y;
}

void op_conv(Importer& I) {
  Blob y = conv_of(I, I.in(0), I.in(1));
  I.out(0, I.has(2) ? nn::bias_add(y, I.in(2), 1) : y);
}

// a - zero_point in float32 (zero_point a scalar, or per output channel:
// axis 0 of a rank-`rank` weight).
Blob minus_zero_point(Importer& I, Blob a, int zp_input, int rank) {
  Blob f = cast(a, DType::Float32);
  if (!I.has(zp_input)) return f;
  Blob zp = I.in(zp_input);
  if (zp.dtype() != a.dtype()) I.err("zero point " + spec_str(zp.spec()) + " must have its input's dtype " + dtype_name(a.dtype()));
  Blob zf = cast(zp, DType::Float32);
  const int64_t n = numel(zp.shape());
  if (n == 1) return sub(f, reshape(zf, {}));
  Shape s(rank, 1);
  s[0] = n;
  return sub(f, reshape(zf, s));
}

// The forms ConvInteger and QLinearConv share: 8-bit x and w, and a kernel
// short enough that the float32 convolution's sums stay exact integers.
void check_integer_conv(Importer& I, const char* op, const Blob& x, const Blob& w) {
  for (const Blob& b : {x, w})
    if (b.dtype() != DType::UInt8 && b.dtype() != DType::Int8)
      I.unsupported(std::string(op) + "(" + dtype_name(b.dtype()) + ")");
  const Shape ws = w.shape();
  I.need_static(ws);
  const int64_t terms = numel(Shape(ws.begin() + 1, ws.end()));
  if (terms > (int64_t(1) << 24) / (255 * 255)) I.unsupported(std::string(op) + "(sums of more than 258 products)");
}

// ConvInteger: the convolution of (x - x_zero_point) and (w -
// w_zero_point) as int32. The float32 convolution computes it exactly while
// no sum can leave float32's integers (|sum| < 2^24), which the load checks
// from the kernel's size.
void op_conv_integer(Importer& I) {
  Blob x = I.in(0), w = I.in(1);
  check_integer_conv(I, "ConvInteger", x, w);
  Blob xf = minus_zero_point(I, x, 2, x.ndim()), wf = minus_zero_point(I, w, 3, w.ndim());
  I.out(0, cast(conv_of(I, xf, wf), DType::Int32));
}

// QLinearConv: saturate(round(conv(x - x_zp, w - w_zp) + B) * x_scale *
// w_scale / y_scale + y_zp), the integer convolution exact as ConvInteger's;
// w_scale and w_zp may be per output channel.
void op_qlinear_conv(Importer& I) {
  Blob x = I.in(0), w = I.in(3);
  check_integer_conv(I, "QLinearConv", x, w);
  Blob xf = minus_zero_point(I, x, 2, x.ndim()), wf = minus_zero_point(I, w, 5, w.ndim());
  Blob y = conv_of(I, xf, wf);
  if (I.has(8)) y = nn::bias_add(y, cast(I.in(8), DType::Float32), 1);
  Blob xs = I.in(1), wsc = I.in(4), ys = I.in(6);
  for (const Blob& sc : {xs, wsc, ys})
    if (sc.dtype() != DType::Float32) I.err("scales must be float32, got " + spec_str(sc.spec()));
  Blob k = div(mul(reshape(xs, {}), numel(wsc.shape()) == 1 ? reshape(wsc, {}) : wsc), reshape(ys, {}));
  if (numel(wsc.shape()) != 1) {  // per output channel
    Shape cs(static_cast<size_t>(y.ndim()), 1);
    cs[1] = numel(wsc.shape());
    k = reshape(k, cs);
  }
  Blob zp = I.in(7);
  if (zp.dtype() != DType::UInt8 && zp.dtype() != DType::Int8) I.unsupported(std::string("QLinearConv(") + dtype_name(zp.dtype()) + ")");
  Blob v = add(mul(cast(y, DType::Float64), cast(k, DType::Float64)), cast(reshape(zp, {}), DType::Float64));
  const double lo = zp.dtype() == DType::UInt8 ? 0 : -128, hi = zp.dtype() == DType::UInt8 ? 255 : 127;
  I.out(0, cast(math::round(clip(v, lo, hi)), zp.dtype()));
}

// Python's floor division (pads of a ConvTranspose may be negative).
int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

// A 3-D transposed convolution as 2-D ones: for each depth tap t of the
// kernel, the depth slices (folded into the batch) transposed-convolved with
// the kernel's slice t, spread to every s-th output depth from t * dilation,
// summed over the taps; then the depth pads crop. Static shapes.
Blob conv_transpose3d_by_slices(Importer& I, Blob x, Blob w, const std::vector<int64_t>& st,
                                const std::vector<int64_t>& dil, const std::vector<int64_t>& outpad,
                                const std::vector<int64_t>& pads, int64_t group) {
  const Shape xs = x.shape(), ws = w.shape();
  I.need_static(xs);
  I.need_static(ws);
  const int64_t N = xs[0], C = xs[1], D = xs[2], kd = ws[2];
  const int64_t spread = (D - 1) * st[0] + 1, full = spread + (kd - 1) * dil[0] + outpad[0];
  Blob x2 = reshape(transpose(x, {0, 2, 1, 3, 4}), {N * D, C, xs[3], xs[4]});
  Blob acc;
  for (int64_t t = 0; t < kd; ++t) {
    Blob w2 = reshape(slice(w, {t}, {t + 1}, {2}), {ws[0], ws[1], ws[3], ws[4]});
    Blob y = nn::conv_transpose2d(x2, w2, nn::Size2(st[1], st[2]), {pads[1], pads[2], pads[4], pads[5]},
                                  nn::Size2(dil[1], dil[2]), nn::Size2(outpad[1], outpad[2]), group);
    const Shape ys = y.shape();  // (N * D, K, Ho, Wo)
    const int64_t K = ys[1];
    // (N, K, D, 1, Ho, Wo), s - 1 zeros after each depth, then placed at t * dilation
    Blob z = unsqueeze(transpose(reshape(y, {N, D, K, ys[2], ys[3]}), {0, 2, 1, 3, 4}), {3});
    z = reshape(pad(z, {0, 0, 0, 0, 0, 0, 0, 0, 0, st[0] - 1, 0, 0}), {N, K, D * st[0], ys[2], ys[3]});
    z = slice(z, {0}, {spread}, {2});
    z = pad(z, {0, 0, t * dil[0], 0, 0, 0, 0, full - spread - t * dil[0], 0, 0});
    acc = acc.defined() ? add(acc, z) : z;
  }
  return pad(acc, {0, 0, -pads[0], 0, 0, 0, 0, -pads[3], 0, 0});  // negative pads crop
}

void op_conv_transpose(Importer& I) {
  Blob x = I.in(0), w = I.in(1);
  const int r = x.ndim();
  const bool three_d = r == 5 && x.dtype() == DType::Float32 && w.ndim() == 5;
  if (!three_d) check_conv_forms(I, x, w);
  const std::string auto_pad = I.attr_s("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    I.err("auto_pad \"" + auto_pad + "\" is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER");
  const size_t n = static_cast<size_t>(r - 2);
  auto ints = [&](const char* name, int64_t dflt) {
    auto v = I.attr_ints(name, std::vector<int64_t>(n, dflt));
    if (v.size() != n) I.err(std::string(name) + " must have " + std::to_string(n) + " values");
    return v;
  };
  std::vector<int64_t> strides = ints("strides", 1), dil = ints("dilations", 1), outpad = ints("output_padding", 0);
  std::vector<int64_t> pads = I.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  if (pads.size() != 2 * n) I.err("pads must have " + std::to_string(2 * n) + " values");
  const int64_t group = I.attr_i("group", 1);
  // output_shape, or SAME padding: the full result without pads (or output
  // padding), cut or extended with zeros to the output's window, as ONNX's
  // reference places it; the bias covers the whole output.
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  const bool window = I.has_attr("output_shape") || (same && !I.has_attr("pads"));
  std::vector<int64_t> begin(n, 0), out(n, 0);
  if (window) {
    const Shape xs = x.shape(), wsh = w.shape();
    I.need_static(xs);
    I.need_static(wsh);
    std::vector<int64_t> os = I.attr_ints("output_shape", {});
    if (os.size() > n) os.erase(os.begin(), os.end() - static_cast<std::ptrdiff_t>(n));  // the full shape: its spatial dims
    if (!os.empty() && os.size() != n) I.err("output_shape must have " + std::to_string(n) + " values");
    for (size_t i = 0; i < n; ++i) {
      const int64_t in = xs[2 + i], k = wsh[2 + i];
      const int64_t natural = strides[i] * (in - 1) + outpad[i] + (k - 1) * dil[i] + 1;
      out[i] = os.empty() ? in * strides[i] : os[i];
      if (out[i] <= 0 || out[i] > (int64_t(1) << 31)) I.err("output_shape " + shape_str(os) + " is out of range");
      const int64_t total = natural - out[i];
      if (I.has_attr("pads")) begin[i] = pads[i];
      else if (!same) begin[i] = 0;
      else begin[i] = auto_pad == "SAME_UPPER" ? floor_div(total, 2) : total - floor_div(total, 2);
    }
    pads.assign(2 * n, 0);
  }
  Blob y;
  if (three_d) {
    y = conv_transpose3d_by_slices(I, x, w, strides, dil, outpad, pads, group);
  } else {
    if (r == 3) {  // 1-D as 2-D with H = 1
      x = as_2d(x), w = as_2d(w);
      strides.insert(strides.begin(), 1), dil.insert(dil.begin(), 1), outpad.insert(outpad.begin(), 0);
      pads = {0, pads[0], 0, pads[1]};
    }
    y = nn::conv_transpose2d(x, w, nn::Size2(strides[0], strides[1]), {pads[0], pads[1], pads[2], pads[3]},
                             nn::Size2(dil[0], dil[1]), nn::Size2(outpad[0], outpad[1]), group);
    if (r == 3) y = as_1d(y);
  }
  if (window) {  // negative pads crop
    std::vector<int64_t> p(2 * static_cast<size_t>(r), 0);
    const Shape ys = y.shape();
    for (size_t i = 0; i < n; ++i) {
      p[2 + i] = -begin[i];
      p[static_cast<size_t>(r) + 2 + i] = out[i] + begin[i] - ys[2 + i];
    }
    y = pad(y, p);
  }
  if (I.has(2)) y = nn::bias_add(y, I.in(2), 1);
  I.out(0, y);
}

// MaxUnpool: x's values written into zeros at the flat indices (into the
// (N, C, ...) output MaxPool's Indices count in), the output padded with
// zeros to output_shape when given (a constant, or a value computed at run
// time: the output's size is then known per call).
void op_max_unpool(Importer& I) {
  Blob x = I.in(0), idx = I.in(1);
  const Shape xs = x.shape();
  I.need_static(xs);
  if (xs.size() < 3) I.err("input must have rank >= 3, got " + spec_str(x.spec()));
  if (idx.dtype() != DType::Int64 || idx.shape() != xs) I.err("indices must be int64 of the input's shape, got " + spec_str(idx.spec()));
  const size_t n = xs.size() - 2;
  const auto k = I.attr_ints("kernel_shape", {});
  if (k.size() != n) I.err("kernel_shape must have " + std::to_string(n) + " values");
  const auto st = I.attr_ints("strides", std::vector<int64_t>(n, 1));
  const auto pads = I.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  if (st.size() != n || pads.size() != 2 * n) I.err("strides/pads do not match " + std::to_string(n) + " spatial dims");
  Shape inferred{xs[0], xs[1]};
  for (size_t i = 0; i < n; ++i) {
    const int64_t d = (xs[2 + i] - 1) * st[i] - (pads[i] + pads[n + i]) + k[i];
    if (d <= 0 || d > (int64_t(1) << 31)) I.err("the output size " + std::to_string(d) + " is out of range");
    inferred.push_back(d);
  }
  I.check_size(inferred, x.dtype(), "MaxUnpool's output");
  if (I.has(2) && !I.is_const(2)) {
    // output_shape computed at run time: each index's coordinates in the
    // inferred shape, flattened again in output_shape, into zeros of it.
    Blob os = I.in(2);
    if (os.dtype() != DType::Int64 || os.shape() != Shape{static_cast<int64_t>(xs.size())})
      I.err("output_shape must be (" + std::to_string(xs.size()) + ",) int64, got " + spec_str(os.spec()));
    const int64_t r = static_cast<int64_t>(xs.size());
    Blob i = reshape(idx, {-1}), at;
    int64_t stride = numel(inferred);
    for (int64_t d = 0; d < r; ++d) {
      stride /= inferred[static_cast<size_t>(d)];
      Blob coord = math::mod(div(i, scalar_blob(static_cast<double>(stride), DType::Int64)),
                             scalar_blob(static_cast<double>(inferred[static_cast<size_t>(d)]), DType::Int64));
      Blob term = mul(coord, reduce_prod(slice(os, {d + 1}, {r})));  // the product of the dims after d
      at = at.defined() ? add(at, term) : term;
    }
    Blob zeros = constant_of_shape(reshape(reduce_prod(os), {1}), Tensor({1}, x.dtype()));
    I.out(0, reshape_to(scatter_elements(zeros, at, reshape(x, {-1}), 0), os));
    return;
  }
  Blob flat = scatter_elements(constant(Tensor({numel(inferred)}, x.dtype())), reshape(idx, {-1}), reshape(x, {-1}), 0);
  Blob y = reshape(flat, inferred);
  if (I.has(2)) {
    const auto os = I.ints_in(2);
    if (os.size() != xs.size()) I.err("output_shape must have " + std::to_string(xs.size()) + " values");
    std::vector<int64_t> p(2 * xs.size(), 0);
    for (size_t i = 0; i < xs.size(); ++i) {
      if (os[i] < inferred[i]) I.err("output_shape " + shape_str(Shape(os.begin(), os.end())) + " is smaller than " + shape_str(inferred));
      p[xs.size() + i] = os[i] - inferred[i];
    }
    y = pad(y, p);
  }
  I.out(0, y);
}

// Pooling as the maximum (sum) of strided slices of the padded input, one
// spatial dim after the other (both are separable: a window's maximum is
// the maximum over its rows of the maxima along them): any number of
// spatial dims, dilations, any numeric dtype for MaxPool (padding with the
// dtype's lowest value), float32/float64 for AveragePool (the sum divided
// by a constant count of the taps that fall in the input, or in the padded
// input with count_include_pad). Needs static spatial sizes.
// With `indices` (MaxPool's second output): also the flat index into x of
// each maximum (row-major, or column-major over the spatial dims with
// storage_order 1), the first one in row-major order where several are equal
// (a NaN is the maximum: the first NaN where there are any).
Blob pool_by_slices(Importer& I, Blob x, bool max, SpatialArgs a, bool ceil_mode, bool include_pad,
                    Blob* indices = nullptr, bool column_major = false) {
  const std::string opn = I.node->op_type();
  const Shape xs = x.shape();
  const int r = x.ndim();
  const size_t n = static_cast<size_t>(r - 2);
  I.need_static(Shape(xs.begin() + 2, xs.end()));
  if (!max && !is_floating(x.dtype())) I.unsupported(opn + "(" + dtype_name(x.dtype()) + ")");
  if (x.dtype() == DType::Bool) I.err("input must be numeric");
  std::vector<int64_t> o(n), pe(n), eff(n);
  int64_t taps = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t in = xs[2 + i];
    eff[i] = (a.k[i] - 1) * a.d[i] + 1;
    const int64_t span = in + a.pb[i] + a.pe[i] - eff[i];
    if (span < 0) I.err("the window does not fit the padded input " + shape_str(xs));
    o[i] = (ceil_mode ? (span + a.s[i] - 1) / a.s[i] : span / a.s[i]) + 1;
    if (ceil_mode && (o[i] - 1) * a.s[i] >= in + a.pb[i]) --o[i];
    pe[i] = std::max<int64_t>(a.pe[i], (o[i] - 1) * a.s[i] + eff[i] - in - a.pb[i]);
    if (a.pb[i] >= eff[i] || pe[i] >= eff[i]) I.unsupported(opn + "(padding >= kernel)");
    taps += a.k[i];
  }
  if (taps > 4096) I.unsupported(opn + "(kernel sides of more than 4096 taps in all)");
  double fill = 0;
  if (max) {
    switch (x.dtype()) {
      case DType::Float32: case DType::Float64: fill = -INFINITY; break;
      case DType::Int8: fill = -128; break;
      case DType::Int16: fill = -32768; break;
      case DType::Int32: fill = static_cast<double>(std::numeric_limits<int32_t>::min()); break;
      case DType::Int64: fill = static_cast<double>(std::numeric_limits<int64_t>::min()); break;
      default: fill = 0; break;  // the unsigned types: 0 is their lowest
    }
  }
  std::vector<int64_t> pads(2 * static_cast<size_t>(r), 0);
  for (size_t i = 0; i < n; ++i) pads[2 + i] = a.pb[i], pads[static_cast<size_t>(r) + 2 + i] = pe[i];
  Blob cur = pad(x, pads, "constant", fill), cur_idx;
  // The last dim first, so that the first maximum along it wins within a
  // row, and then the first row: the first maximum in row-major order.
  for (size_t i = n; i-- > 0;) {
    const int64_t ax = static_cast<int64_t>(2 + i);
    // the stride of this dim in the flat index
    int64_t stride = 1;
    for (size_t j = column_major ? 0 : i + 1; j < (column_major ? i : n); ++j) stride *= xs[2 + j];
    Blob acc, acc_idx;
    for (int64_t t = 0; t < a.k[i]; ++t) {
      const int64_t st = t * a.d[i], en = st + (o[i] - 1) * a.s[i] + 1;
      Blob sl = slice(cur, {st}, {en}, {ax}, {a.s[i]});
      Blob cand;  // the flat index each candidate has so far (padding clamped in: never the maximum)
      if (indices) {
        Shape hs(static_cast<size_t>(r), 1);
        hs[2 + i] = o[i];
        std::vector<double> v(static_cast<size_t>(o[i]));
        for (int64_t q = 0; q < o[i]; ++q)
          v[static_cast<size_t>(q)] =
              static_cast<double>(std::clamp<int64_t>(q * a.s[i] - a.pb[i] + st, 0, xs[2 + i] - 1) * stride);
        cand = constant(make_tensor(hs, DType::Int64, v));
        if (cur_idx.defined()) cand = add(slice(cur_idx, {st}, {en}, {ax}, {a.s[i]}), cand);
      }
      if (!acc.defined()) {
        acc = sl, acc_idx = cand;
      } else if (indices) {  // strictly greater: the first maximum keeps its index
        Blob better = greater(sl, acc);
        // A NaN is the maximum (as maximum() and max_pool2d have it): the
        // first NaN takes the place of any number.
        if (is_floating(x.dtype()))
          better = logical_or(better, logical_and(math::is_nan(sl), logical_not(math::is_nan(acc))));
        acc = where(better, sl, acc);
        acc_idx = where(better, cand, acc_idx);
      } else {
        acc = max ? maximum(acc, sl) : add(acc, sl);
      }
    }
    cur = acc, cur_idx = acc_idx;
    // The passes over the dims before read the index over their whole padded
    // extent: broadcast it there.
    if (indices && i > 0) cur_idx = broadcast_to(cur_idx, cur.shape());
  }
  if (indices) {  // plus (n C + c) times the spatial size
    const int64_t N = xs[0], C = xs[1], plane = numel(Shape(xs.begin() + 2, xs.end()));
    I.check_size({N, C}, DType::Int64, "MaxPool's indices");
    std::vector<double> base(static_cast<size_t>(N * C));
    for (int64_t i = 0; i < N * C; ++i) base[static_cast<size_t>(i)] = static_cast<double>(i * plane);
    Shape bs(static_cast<size_t>(r), 1);
    bs[0] = N, bs[1] = C;
    *indices = add(cur_idx, constant(make_tensor(bs, DType::Int64, base)));
  }
  if (max) return cur;
  // The taps of each output that count: inside the input (or, with
  // count_include_pad, inside the declared padding).
  Shape cs(static_cast<size_t>(r), 1);
  for (size_t i = 0; i < n; ++i) cs[2 + i] = o[i];
  I.check_size(cs, DType::Float64, "the pooling counts");
  std::vector<std::vector<int64_t>> per(n);  // count along each dim per output index
  for (size_t i = 0; i < n; ++i)
    for (int64_t oi = 0; oi < o[i]; ++oi) {
      int64_t c = 0;
      for (int64_t j = 0; j < a.k[i]; ++j) {
        const int64_t p = oi * a.s[i] - a.pb[i] + j * a.d[i];
        c += include_pad ? (p < xs[2 + i] + a.pe[i]) : (p >= 0 && p < xs[2 + i]);
      }
      per[i].push_back(c);
    }
  std::vector<double> count(static_cast<size_t>(numel(cs)));
  for (size_t e = 0; e < count.size(); ++e) {
    double c = 1;
    for (size_t i = n, q = e; i-- > 0;) {
      c *= static_cast<double>(per[i][q % static_cast<size_t>(o[i])]);
      q /= static_cast<size_t>(o[i]);
    }
    count[e] = c;
  }
  return div(cur, constant(make_tensor(cs, x.dtype(), count)));
}

void op_pool(Importer& I, bool max) {
  Blob x = I.in(0);
  const int r = x.ndim();
  const std::string opn = I.node->op_type();
  if (r < 3) I.err("input must have rank >= 3, got " + spec_str(x.spec()));
  auto kernel = I.attr_ints("kernel_shape");
  if (!kernel || static_cast<int>(kernel->size()) != r - 2) I.err("kernel_shape must have " + std::to_string(r - 2) + " values");
  SpatialArgs a = spatial_args(I, x.shape(), *kernel, true);
  bool dilated = false;
  for (int64_t d : a.d) dilated |= d != 1;
  const bool want_indices = max && I.wants(1);
  if (max && I.attr_i("storage_order", 0) != 0 && I.attr_i("storage_order", 0) != 1)
    I.err("storage_order must be 0 or 1, got " + std::to_string(I.attr_i("storage_order", 0)));
  if (r > 4 || dilated || x.dtype() != DType::Float32 || want_indices) {  // beyond oneDNN's 2-D float32 pooling here
    Blob idx;
    I.out(0, pool_by_slices(I, x, max, a, I.attr_i("ceil_mode", 0) != 0, !max && I.attr_i("count_include_pad", 0) != 0,
                            want_indices ? &idx : nullptr, max && I.attr_i("storage_order", 0) != 0));
    if (want_indices) I.out(1, idx);
    return;
  }
  const bool ceil_mode = I.attr_i("ceil_mode", 0) != 0;
  const bool include_pad = !max && I.attr_i("count_include_pad", 0) != 0;
  const Shape xs = x.shape();
  Shape sp(xs.begin() + 2, xs.end());
  const size_t n = sp.size();
  std::vector<int64_t> outl(n), pe_orig = a.pe;
  for (size_t i = 0; i < n; ++i) {
    if (sp[i] < 0) {  // a dynamic size: floor mode needs nothing of it
      if (ceil_mode) I.unsupported(opn + "(ceil_mode, dynamic size)");
      if (include_pad && (a.pb[i] || a.pe[i])) I.unsupported(opn + "(count_include_pad, dynamic size)");
      if (max && (a.pb[i] >= a.k[i] || a.pe[i] >= a.k[i])) I.unsupported(opn + "(padding >= kernel)");
      outl[i] = kDynamic;
      continue;
    }
    const int64_t span = sp[i] + a.pb[i] + a.pe[i] - a.k[i];
    if (span < 0) I.err("the window does not fit the padded input " + shape_str(xs));
    int64_t o = (ceil_mode ? (span + a.s[i] - 1) / a.s[i] : span / a.s[i]) + 1;
    if (ceil_mode && (o - 1) * a.s[i] >= sp[i] + a.pb[i]) --o;
    outl[i] = o;
    a.pe[i] = std::max<int64_t>(a.pe[i], (o - 1) * a.s[i] + a.k[i] - sp[i] - a.pb[i]);
    if (a.pb[i] >= a.k[i] || a.pe[i] >= a.k[i]) {
      if (max) I.unsupported(opn + "(padding >= kernel)");
    }
  }
  if (r == 3) {
    x = as_2d(x);
    a.k.insert(a.k.begin(), 1), a.s.insert(a.s.begin(), 1);
    a.pb.insert(a.pb.begin(), 0), a.pe.insert(a.pe.begin(), 0), pe_orig.insert(pe_orig.begin(), 0);
    sp.insert(sp.begin(), 1), outl.insert(outl.begin(), 1);
  }
  nn::Padding pad(std::vector<int64_t>{a.pb[0], a.pb[1], a.pe[0], a.pe[1]});
  Blob y = max ? nn::max_pool2d(x, nn::Size2(a.k[0], a.k[1]), nn::Size2(a.s[0], a.s[1]), pad)
               : nn::avg_pool2d(x, nn::Size2(a.k[0], a.k[1]), nn::Size2(a.s[0], a.s[1]), pad);
  bool any_pad = false;
  for (size_t i = 0; i < 2; ++i) any_pad |= a.pb[i] || pe_orig[i];
  if (include_pad && any_pad) {
    // The engine divides by the count of real elements; ONNX by the window
    // clipped to the padded input: scale by excl / incl per output.
    I.check_size({1, 1, outl[0], outl[1]}, y.dtype(), "the count_include_pad scale");
    Tensor f({1, 1, outl[0], outl[1]}, y.dtype());
    std::vector<double> fv(static_cast<size_t>(outl[0] * outl[1]));
    auto counts = [&](int i, int64_t o, int64_t* excl, int64_t* incl) {
      const int64_t st = o * a.s[i] - a.pb[i];
      const int64_t en = st + a.k[i];
      *excl = std::min(en, sp[i]) - std::max<int64_t>(st, 0);
      *incl = std::min(en, sp[i] + pe_orig[i]) - st;
    };
    for (int64_t oh = 0; oh < outl[0]; ++oh)
      for (int64_t ow = 0; ow < outl[1]; ++ow) {
        int64_t eh, ih, ew, iw;
        counts(0, oh, &eh, &ih);
        counts(1, ow, &ew, &iw);
        fv[oh * outl[1] + ow] = static_cast<double>(eh * ew) / static_cast<double>(ih * iw);
      }
    y = mul(y, constant(make_tensor(f.shape(), y.dtype(), fv)));
  }
  if (r == 3) y = as_1d(y);
  I.out(0, y);
}

void op_global_pool(Importer& I, bool max) {
  Blob x = I.in(0);
  std::vector<int> axes;
  for (int d = 2; d < x.ndim(); ++d) axes.push_back(d);
  if (axes.empty()) I.err("input must have rank >= 3");
  I.out(0, max ? reduce_max(x, axes, true) : reduce_mean(x, axes, true));
}

// ---- export ----

// The attributes Conv and ConvTranspose share: the kernel from the weight
// (.., .., kh, kw), strides, pads (top, left, bottom, right), dilations,
// group.
void set_conv_attributes(Exporter& E, NodeProto* n) {
  const Primitive& p = E.op();
  const Shape& w = E.in_spec(1).shape;
  Exporter::set_ints(n, "kernel_shape", {w.at(2), w.at(3)});
  Exporter::set_ints(n, "strides", p.attr_ints("strides"));
  Exporter::set_ints(n, "pads", p.attr_ints("pads"));
  Exporter::set_ints(n, "dilations", p.attr_ints("dilations"));
  Exporter::set_int(n, "group", p.attr_int("group"));
}

// conv2d -> Conv (a bias_add along the channels that alone reads it becomes
// B) [+ Relu when fused].
void export_conv(Exporter& E) {
  const Primitive& p = E.op();
  const bool bias = p.attr_int("bias"), relu = p.attr_int("relu");
  std::string y = E.out(0);
  std::string bias_name;
  if (bias) bias_name = E.in(2);
  else E.fold_bias_add(true, &bias_name, &y);
  const std::string conv_out = relu ? E.fresh(E.name() + "/conv") : y;
  std::vector<std::string> ins{E.in(0), E.in(1)};
  if (!bias_name.empty()) ins.push_back(bias_name);
  set_conv_attributes(E, E.add("Conv", ins, {conv_out}, E.name()));
  if (relu) E.add("Relu", {conv_out}, {y}, E.fresh(E.name() + "/relu"));
}

// conv_transpose2d -> ConvTranspose (same weight layout (C_in, C_out/group,
// kh, kw) and attributes); a bias_add along the channels that only it reads
// becomes the B input, as for Conv.
void export_conv_transpose(Exporter& E) {
  std::string y = E.out(0), bias;
  std::vector<std::string> ins{E.in(0), E.in(1)};
  if (E.fold_bias_add(true, &bias, &y)) ins.push_back(bias);
  NodeProto* n = E.add("ConvTranspose", ins, {y}, E.name());
  set_conv_attributes(E, n);
  Exporter::set_ints(n, "output_padding", E.op().attr_ints("output_padding"));
}

// max_pool2d, avg_pool2d -> MaxPool, AveragePool (count_include_pad = 0);
// the pooling's workspace output is not exported.
void export_pool(Exporter& E, const char* type) {
  E.only_first_output();
  NodeProto* n = E.add(type, {E.in(0)}, {E.out(0)}, E.name());
  Exporter::set_ints(n, "kernel_shape", E.op().attr_ints("kernel_shape"));
  Exporter::set_ints(n, "strides", E.op().attr_ints("strides"));
  Exporter::set_ints(n, "pads", E.op().attr_ints("pads"));
  if (E.op().kind() == OpKind::AvgPool2d) Exporter::set_int(n, "count_include_pad", 0);
}

}  // namespace

void conv_onnx_rows(OpRows& r) {
  r.import_op("Conv", op_conv).weights = {1, 2};
  r.import_op("ConvTranspose", op_conv_transpose).weights = {1, 2};
  r.import_op("ConvInteger", op_conv_integer);
  r.import_op("QLinearConv", op_qlinear_conv);
  r.import_op("MaxUnpool", op_max_unpool);
  r.import_op("MaxPool", [](Importer& I) { op_pool(I, true); });
  r.import_op("AveragePool", [](Importer& I) { op_pool(I, false); });
  r.import_op("GlobalAveragePool", [](Importer& I) { op_global_pool(I, false); });
  r.import_op("GlobalMaxPool", [](Importer& I) { op_global_pool(I, true); });

  r.export_op(OpKind::Conv2d, export_conv);
  r.export_op(OpKind::ConvTranspose2d, export_conv_transpose);
  r.export_op(OpKind::MaxPool2d, [](Exporter& E) { export_pool(E, "MaxPool"); });
  r.export_op(OpKind::AvgPool2d, [](Exporter& E) { export_pool(E, "AveragePool"); });
}

}  // namespace jobflow::onnx
