// ONNX rows of convolution and pooling (ops/conv.cpp, ops/conv_transpose.cpp):
// 1-D and 2-D Conv, ConvTranspose and pooling (1-D as 2-D with H = 1),
// global pooling as reductions (registry.h).
#include <algorithm>

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

void op_conv(Importer& I) {
  Blob x = I.in(0), w = I.in(1);
  const int r = x.ndim();
  check_conv_forms(I, x, w);
  const Shape wsh = w.shape();
  std::vector<int64_t> kernel(wsh.begin() + 2, wsh.end());
  if (auto ks = I.attr_ints("kernel_shape"); ks && *ks != kernel) I.err("kernel_shape does not match the weight");
  SpatialArgs a = spatial_args(I, x.shape(), kernel, true);
  const int64_t group = I.attr_i("group", 1);
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

void op_pool(Importer& I, bool max) {
  Blob x = I.in(0);
  const int r = x.ndim();
  const std::string opn = I.node->op_type();
  if (x.dtype() != DType::Float32) I.unsupported(opn + "(" + dtype_name(x.dtype()) + ")");
  if (r == 5) I.unsupported(opn + "(3-D)");
  if (r != 3 && r != 4) I.err("input must be rank 3 or 4, got " + spec_str(x.spec()));
  if (max && I.wants(1)) I.unsupported("MaxPool(Indices output)");
  auto kernel = I.attr_ints("kernel_shape");
  if (!kernel || static_cast<int>(kernel->size()) != r - 2) I.err("kernel_shape must have " + std::to_string(r - 2) + " values");
  SpatialArgs a = spatial_args(I, x.shape(), *kernel, false);
  if (max && I.attr_i("storage_order", 0) != 0 && I.wants(1)) I.unsupported("MaxPool(storage_order)");
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
