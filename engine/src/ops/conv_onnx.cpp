// ONNX rows of convolution and pooling (ops/conv.cpp, ops/conv_transpose.cpp):
// 1-D and 2-D Conv, ConvTranspose and pooling (1-D as 2-D with H = 1),
// global pooling as reductions (registry.h).
#include <algorithm>
#include <limits>
#include <numeric>

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

// The forms of Conv and ConvTranspose the engine has: float32, 1-D or 2-D
// (and 3-D for Conv, `three_d`).
void check_conv_forms(Importer& I, const Blob& x, const Blob& w, bool three_d = false) {
  const int r = x.ndim();
  const std::string& op = I.node->op_type();
  if (x.dtype() != DType::Float32) I.unsupported(op + "(" + dtype_name(x.dtype()) + ")");
  if (r == 5 && !three_d) I.unsupported(op + "(3-D)");
  if (r != 3 && r != 4 && r != 5) I.err("input must be rank 3, 4 or 5, got " + spec_str(x.spec()));
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


// ---- 3-D as 2-D ----
// A 3-D convolution or pooling over (N, C, D, H, W) is the 2-D one over
// (H, W) of every depth its window reads: for each kernel depth kd, the
// depths kd * dd + od * sd (od = 0 .. Dout - 1) folded into the batch, run
// through the 2-D op, then summed (convolution), maxed (max pooling) or
// averaged (average pooling) over kd. KD 2-D ops, each a plain engine op
// (oneDNN), exact up to the order of the sums.

// The output depth, after D is padded by pb + pe, of a window of k with
// stride s and dilation d.
int64_t depth_out(Importer& I, int64_t D, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe) {
  const int64_t span = D + pb + pe - ((k - 1) * d + 1);
  if (span < 0) I.err("the window does not fit the padded depth " + std::to_string(D));
  return span / s + 1;
}

// x's depths kd * dd + od * sd for od < Dout, folded into the batch:
// (N, C, D, H, W) -> (N * Dout, C, H, W).
Blob depths_as_batch(Blob x, int64_t first, int64_t step, int64_t count) {
  const Shape s = x.shape();
  Blob t = slice(x, {first}, {first + (count - 1) * step + 1}, {2}, {step});
  t = transpose(t, {0, 2, 1, 3, 4});
  return reshape(t, {s[0] * count, s[1], s[3], s[4]});
}

// (N * Dout, C', H', W') back to (N, C', Dout, H', W').
Blob batch_as_depths(Blob y, int64_t N, int64_t count) {
  const Shape s = y.shape();
  return transpose(reshape(y, {N, count, s[1], s[2], s[3]}), {0, 2, 1, 3, 4});
}

void op_conv3d(Importer& I, Blob x, Blob w, const SpatialArgs& a, int64_t group) {
  I.need_static(x.shape());
  I.need_static(w.shape());
  const Shape xs = x.shape(), ws = w.shape();
  if (a.pb[0] || a.pe[0]) x = pad(x, {0, 0, a.pb[0], 0, 0, 0, 0, a.pe[0], 0, 0});
  const int64_t D = depth_out(I, xs[2], a.k[0], a.s[0], a.d[0], a.pb[0], a.pe[0]);
  Blob acc;
  for (int64_t kd = 0; kd < a.k[0]; ++kd) {
    Blob wk = reshape(slice(w, {kd}, {kd + 1}, {2}), {ws[0], ws[1], ws[3], ws[4]});
    Blob yk = nn::conv2d(depths_as_batch(x, kd * a.d[0], a.s[0], D), wk, nn::Size2(a.s[1], a.s[2]),
                         nn::Padding(std::vector<int64_t>{a.pb[1], a.pb[2], a.pe[1], a.pe[2]}),
                         nn::Size2(a.d[1], a.d[2]), group);
    acc = kd == 0 ? yk : add(acc, yk);
  }
  Blob y = batch_as_depths(acc, xs[0], D);
  if (I.has(2)) y = nn::bias_add(y, I.in(2), 1);
  I.out(0, y);
}

void op_conv(Importer& I) {
  Blob x = I.in(0), w = I.in(1);
  const int r = x.ndim();
  check_conv_forms(I, x, w, true);
  const Shape wsh = w.shape();
  std::vector<int64_t> kernel(wsh.begin() + 2, wsh.end());
  if (auto ks = I.attr_ints("kernel_shape"); ks && *ks != kernel) I.err("kernel_shape does not match the weight");
  SpatialArgs a = spatial_args(I, x.shape(), kernel, true);
  const int64_t group = I.attr_i("group", 1);
  if (r == 5) return op_conv3d(I, x, w, a, group);
  if (r == 3) {
    x = as_2d(x), w = as_2d(w);
    a.k.insert(a.k.begin(), 1), a.s.insert(a.s.begin(), 1), a.d.insert(a.d.begin(), 1);
    a.pb.insert(a.pb.begin(), 0), a.pe.insert(a.pe.begin(), 0);
  }
  Blob y = nn::conv2d(x, w, nn::Size2(a.s[0], a.s[1]), nn::Padding(std::vector<int64_t>{a.pb[0], a.pb[1], a.pe[0], a.pe[1]}),
                      nn::Size2(a.d[0], a.d[1]), group);
  if (I.has(2)) y = nn::bias_add(y, I.in(2), 1);
  I.out(0, r == 3 ? as_1d(y) : y);
}

void op_conv_transpose(Importer& I) {
  Blob x = I.in(0), w = I.in(1);
  const int r = x.ndim();
  check_conv_forms(I, x, w);
  if (I.has_attr("output_shape")) I.unsupported("ConvTranspose(output_shape)");
  const std::string auto_pad = I.attr_s("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") I.unsupported("ConvTranspose(auto_pad=" + auto_pad + ")");
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
  if (r == 3) {  // 1-D as 2-D with H = 1
    x = as_2d(x), w = as_2d(w);
    strides.insert(strides.begin(), 1), dil.insert(dil.begin(), 1), outpad.insert(outpad.begin(), 0);
    pads = {0, pads[0], 0, pads[1]};
  }
  Blob y = nn::conv_transpose2d(x, w, nn::Size2(strides[0], strides[1]), {pads[0], pads[1], pads[2], pads[3]},
                                nn::Size2(dil[0], dil[1]), nn::Size2(outpad[0], outpad[1]), group);
  if (I.has(2)) y = nn::bias_add(y, I.in(2), 1);
  I.out(0, r == 3 ? as_1d(y) : y);
}


// 3-D pooling as 2-D pooling per kernel depth (above); floor mode, and for
// average pooling no padding (its count would mix depths).
void op_pool3d(Importer& I, Blob x, const SpatialArgs& a, bool max) {
  const std::string opn = I.node->op_type();
  I.need_static(x.shape());
  if (I.attr_i("ceil_mode", 0) != 0) I.unsupported(opn + "(3-D, ceil_mode)");
  bool padded = false;
  for (size_t i = 0; i < 3; ++i) padded = padded || a.pb[i] || a.pe[i];
  if (!max && padded) I.unsupported("AveragePool(3-D with pads)");
  for (size_t i = 0; i < 3; ++i)
    if (max && (a.pb[i] >= a.k[i] || a.pe[i] >= a.k[i])) I.unsupported(opn + "(padding >= kernel)");
  const Shape xs = x.shape();
  if (a.pb[0] || a.pe[0])
    x = pad(x, {0, 0, a.pb[0], 0, 0, 0, 0, a.pe[0], 0, 0}, "constant", -std::numeric_limits<double>::infinity());
  const int64_t D = depth_out(I, xs[2], a.k[0], a.s[0], 1, a.pb[0], a.pe[0]);
  const nn::Padding hw(std::vector<int64_t>{a.pb[1], a.pb[2], a.pe[1], a.pe[2]});
  Blob acc;
  for (int64_t kd = 0; kd < a.k[0]; ++kd) {
    Blob xb = depths_as_batch(x, kd, a.s[0], D);
    Blob yk = max ? nn::max_pool2d(xb, nn::Size2(a.k[1], a.k[2]), nn::Size2(a.s[1], a.s[2]), hw)
                  : nn::avg_pool2d(xb, nn::Size2(a.k[1], a.k[2]), nn::Size2(a.s[1], a.s[2]), hw);
    acc = kd == 0 ? yk : max ? maximum(acc, yk) : add(acc, yk);
  }
  if (!max) acc = mul(acc, scalar_blob(1.0 / static_cast<double>(a.k[0]), acc.dtype()));
  I.out(0, batch_as_depths(acc, xs[0], D));
}

// One spatial axis (2 or 3) of a 4-D x, already padded, max-pooled with
// window k, stride s and dilation d. Output o reads o * s + i * d; with
// P = d / gcd(s, d) the outputs t, t + P, t + 2P, ... read every d-th element
// from t * s, pooled with stride lcm(s, d) / d: P plain poolings whose
// results are interleaved.
Blob max_pool_axis(Blob x, int axis, int64_t k, int64_t s, int64_t d) {
  if (k == 1 && s == 1) return x;  // nothing pooled along this axis
  const int64_t len = x.shape()[static_cast<size_t>(axis)];
  const int64_t out = (len - ((k - 1) * d + 1)) / s + 1;
  const int64_t P = d / std::gcd(s, d), stride = s / std::gcd(s, d);
  const int64_t Q = std::min(P, out), n0 = (out + P - 1) / P;
  auto pool = [&](Blob t) {
    return axis == 2 ? nn::max_pool2d(t, nn::Size2(k, 1), nn::Size2(stride, 1))
                     : nn::max_pool2d(t, nn::Size2(1, k), nn::Size2(1, stride));
  };
  std::vector<Blob> parts;
  for (int64_t t = 0; t < Q; ++t) {
    Blob y = pool(slice(x, {t * s}, {std::numeric_limits<int64_t>::max()}, {axis}, {d}));
    const int64_t nt = (out - t + P - 1) / P;
    y = slice(y, {0}, {nt}, {axis});
    if (nt < n0) {
      std::vector<int64_t> pads(8, 0);
      pads[static_cast<size_t>(4 + axis)] = n0 - nt;  // filler, cut below
      y = pad(y, pads);
    }
    parts.push_back(unsqueeze(y, {axis + 1}));
  }
  Blob y = parts.size() == 1 ? parts[0] : concat(parts, axis + 1);
  Shape sh = y.shape();
  sh[static_cast<size_t>(axis)] = n0 * Q;
  sh.erase(sh.begin() + axis + 1);
  return slice(reshape(y, sh), {0}, {out}, {axis});
}

// Max pooling with dilations d (static shape, floor mode), exact, the
// padding -inf taken first. Where each stride is a multiple of its
// dilation, the window of output o reads o * s + i * d: every d-th element
// pooled with stride s / d and no dilation (one pooling). Otherwise one
// spatial axis at a time (a max over a window is separable),
// max_pool_axis.
void op_max_pool_dilated(Importer& I, Blob x, SpatialArgs a) {
  const int r = x.ndim();
  const size_t n = static_cast<size_t>(r - 2);
  I.need_static(x.shape());
  if (I.attr_i("ceil_mode", 0) != 0) I.unsupported("MaxPool(dilations, ceil_mode)");
  std::vector<int64_t> pads(2 * static_cast<size_t>(r), 0), starts, ends, axes, steps;
  bool padded = false, multiples = true;
  for (size_t i = 0; i < n; ++i) {
    multiples = multiples && a.s[i] % a.d[i] == 0;
    pads[2 + i] = a.pb[i], pads[static_cast<size_t>(r) + 2 + i] = a.pe[i];
    padded = padded || a.pb[i] || a.pe[i];
    depth_out(I, x.shape()[2 + i], a.k[i], a.s[i], a.d[i], a.pb[i], a.pe[i]);  // the window fits
    starts.push_back(0), ends.push_back(std::numeric_limits<int64_t>::max());
    axes.push_back(static_cast<int64_t>(2 + i)), steps.push_back(a.d[i]);
  }
  if (!multiples && r == 5) I.unsupported("MaxPool(3-D, a stride that is not a multiple of its dilation)");
  if (padded) x = pad(x, pads, "constant", -std::numeric_limits<double>::infinity());
  if (r == 3) {
    x = as_2d(x);
    a.k.insert(a.k.begin(), 1), a.s.insert(a.s.begin(), 1), a.d.insert(a.d.begin(), 1);
    a.pb.insert(a.pb.begin(), 0), a.pe.insert(a.pe.begin(), 0);
  }
  if (!multiples) {
    for (int i = 0; i < 2; ++i) x = max_pool_axis(x, 2 + i, a.k[static_cast<size_t>(i)], a.s[static_cast<size_t>(i)], a.d[static_cast<size_t>(i)]);
    I.out(0, r == 3 ? as_1d(x) : x);
    return;
  }
  if (r == 3) axes = {3}, starts = {0}, ends = {std::numeric_limits<int64_t>::max()}, steps = {a.d[1]};
  x = slice(x, starts, ends, axes, steps);
  for (size_t i = 0; i < a.k.size(); ++i) a.s[i] /= a.d[i], a.d[i] = 1, a.pb[i] = a.pe[i] = 0;
  if (r == 5) return op_pool3d(I, x, a, true);
  Blob y = nn::max_pool2d(x, nn::Size2(a.k[0], a.k[1]), nn::Size2(a.s[0], a.s[1]));
  I.out(0, r == 3 ? as_1d(y) : y);
}

void op_pool(Importer& I, bool max) {
  Blob x = I.in(0);
  const int r = x.ndim();
  const std::string opn = I.node->op_type();
  if (x.dtype() != DType::Float32) I.unsupported(opn + "(" + dtype_name(x.dtype()) + ")");
  if (r != 3 && r != 4 && r != 5) I.err("input must be rank 3, 4 or 5, got " + spec_str(x.spec()));
  if (max && I.wants(1)) I.unsupported("MaxPool(Indices output)");
  auto kernel = I.attr_ints("kernel_shape");
  if (!kernel || static_cast<int>(kernel->size()) != r - 2) I.err("kernel_shape must have " + std::to_string(r - 2) + " values");
  SpatialArgs a = spatial_args(I, x.shape(), *kernel, max);
  if (max && I.attr_i("storage_order", 0) != 0 && I.wants(1)) I.unsupported("MaxPool(storage_order)");
  bool dilated = false;
  for (int64_t d : a.d) dilated = dilated || d != 1;
  if (dilated) return op_max_pool_dilated(I, x, a);
  if (r == 5) return op_pool3d(I, x, a, max);
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
