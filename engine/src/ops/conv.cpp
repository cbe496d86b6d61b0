// conv2d, max_pool2d and avg_pool2d (NCHW, float32) on the oneDNN kernels of
// cpu/dnnl_kernels.h, their gradients, and the resolution of OneFlow's
// padding modes into explicit pads.
//
// Padding is resolved once, when the op is built (shapes are static in a job
// function), so each primitive holds explicit {top, left, bottom, right} pads
// and infer() only has to check them against the input it is given.
#include <algorithm>
#include <cctype>
#include <vector>

#include "cpu/dnnl_kernels.h"
#include "jobflow/job.h"
#include "jobflow/ops.h"
#include "kernel_util.h"
#include "ops_internal.h"

namespace jobflow {

namespace nn {

std::vector<int64_t> Padding::resolve(const char* op, int64_t h, int64_t w, Size2 k, Size2 stride,
                                      Size2 dilation) const {
  if (k.h <= 0 || k.w <= 0)
    op_error(op, "kernel size must be positive, got (" + std::to_string(k.h) + ", " + std::to_string(k.w) + ")");
  if (stride.h <= 0 || stride.w <= 0)
    op_error(op, "strides must be positive, got (" + std::to_string(stride.h) + ", " + std::to_string(stride.w) + ")");
  if (dilation.h <= 0 || dilation.w <= 0)
    op_error(op, "dilations must be positive, got (" + std::to_string(dilation.h) + ", " +
                     std::to_string(dilation.w) + ")");
  if (h == 0 || w == 0 || h < kDynamic || w < kDynamic)
    op_error(op, "input spatial size must be positive, got (" + std::to_string(h) + ", " + std::to_string(w) + ")");

  std::string m = mode;
  for (char& c : m) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));

  if (m == "EXPLICIT") {
    if (pads.size() != 4)
      op_error(op, "explicit padding needs 4 values {top, left, bottom, right}, got " + std::to_string(pads.size()));
    for (int64_t p : pads)
      if (p < 0) op_error(op, "explicit padding values must be >= 0, got " + std::to_string(p));
    return pads;
  }
  if (m == "VALID") return {0, 0, 0, 0};
  if (m != "SAME" && m != "SAME_LOWER" && m != "SAME_UPPER")
    op_error(op, "padding must be \"SAME\", \"SAME_LOWER\", \"SAME_UPPER\", \"VALID\" or 4 explicit values, got \"" +
                     mode + "\"");
  // A dynamic size (kDynamic) is fine with stride 1: the total is then
  // (k - 1) * d whatever the size; with a larger stride it depends on it.
  if ((h < 0 && stride.h != 1) || (w < 0 && stride.w != 1))
    op_error(op, "padding \"" + mode + "\" with stride > 1 needs a known input size, got (" + std::to_string(h) +
                     ", " + std::to_string(w) + "); give explicit pads");
  if (h < 0) h = 1;
  if (w < 0) w = 1;
  // The smallest total pad that makes the output ceil(in / stride) long.
  auto total = [](int64_t in, int64_t kk, int64_t s, int64_t d) {
    const int64_t out = (in + s - 1) / s;
    return std::max<int64_t>((out - 1) * s + (kk - 1) * d + 1 - in, 0);
  };
  const int64_t th = total(h, k.h, stride.h, dilation.h), tw = total(w, k.w, stride.w, dilation.w);
  // OneFlow's "SAME" is SAME_LOWER: when the total is odd the extra row/column
  // goes to the start (top/left); SAME_UPPER puts it at the end.
  if (m == "SAME_UPPER") return {th / 2, tw / 2, th - th / 2, tw - tw / 2};
  return {th - th / 2, tw - tw / 2, th / 2, tw / 2};
}

}  // namespace nn

namespace {

// Strides, explicit pads, dilations and groups of a convolution or pooling.
struct Geom {
  int64_t sh = 1, sw = 1;
  int64_t pt = 0, pl = 0, pb = 0, pr = 0;
  int64_t dh = 1, dw = 1;
  int64_t groups = 1;
  std::string str() const {
    auto s = [](int64_t v) { return std::to_string(v); };
    return "strides=(" + s(sh) + "," + s(sw) + ") pads=(" + s(pt) + "," + s(pl) + "," + s(pb) + "," + s(pr) +
           ") dilations=(" + s(dh) + "," + s(dw) + ")" + (groups != 1 ? " groups=" + s(groups) : "");
  }
  // ONNX-style: strides (h, w), pads (top, left, bottom, right), dilations (h, w), group.
  void add_to(Attrs& a) const {
    a.push_back({"strides", std::vector<int64_t>{sh, sw}});
    a.push_back({"pads", std::vector<int64_t>{pt, pl, pb, pr}});
    a.push_back({"dilations", std::vector<int64_t>{dh, dw}});
    a.push_back({"group", groups});
  }
};

// Output length along one axis; 0 or less when the (dilated) kernel does not
// fit in the padded input.
int64_t out_len(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
  // Overflow-checked: kernel sizes, dilations and pads may come from files.
  int64_t ext = 0, padded = 0, span = 0;
  if (__builtin_mul_overflow(k - 1, d, &ext) || __builtin_add_overflow(in, p0, &padded) ||
      __builtin_add_overflow(padded, p1, &padded) || __builtin_sub_overflow(padded, ext + 1, &span))
    op_error("conv2d", "kernel, dilation or padding too large (kernel " + std::to_string(k) + ", dilation " +
                           std::to_string(d) + ", pads " + std::to_string(p0) + "+" + std::to_string(p1) + ")");
  return span < 0 ? 0 : span / s + 1;
}

void expect_float32(const char* op, const TensorSpec& s, const char* arg) {
  if (s.dtype != DType::Float32)
    op_error(op, std::string(arg) + " must be float32 (the oneDNN kernels are float32 only), got " + spec_str(s));
}

void expect_nchw(const char* op, const TensorSpec& s, const char* arg) {
  if (s.shape.size() != 4) op_error(op, std::string(arg) + " must be NCHW (rank 4), got " + spec_str(s));
}

// Output spec of a convolution of x (N, C, H, W) by w (K, C/groups, R, S);
// every mismatch names both shapes.
Shape conv_out_shape(const char* op, const TensorSpec& x, const TensorSpec& w, const Geom& g) {
  expect_nchw(op, x, "x");
  if (w.shape.size() != 4)
    op_error(op, "filters must be (K, C/groups, R, S) (rank 4), got " + spec_str(w) + " for x " + spec_str(x));
  expect_float32(op, x, "x");
  expect_float32(op, w, "filters");
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t K = w.shape[0], Cg = w.shape[1], R = w.shape[2], S = w.shape[3];
  if (g.groups <= 0) op_error(op, "groups must be >= 1, got " + std::to_string(g.groups));
  if ((C >= 0 && C % g.groups != 0) || K % g.groups != 0)
    op_error(op, "groups=" + std::to_string(g.groups) + " must divide the input channels of x " + shape_str(x.shape) +
                     " and the output channels of filters " + shape_str(w.shape));
  if (C >= 0 && Cg * g.groups != C)
    op_error(op, "x " + shape_str(x.shape) + " has " + std::to_string(C) + " input channels but filters " +
                     shape_str(w.shape) + " expect " + std::to_string(Cg * g.groups) +
                     (g.groups != 1 ? " (" + std::to_string(Cg) + " x groups=" + std::to_string(g.groups) + ")" : ""));
  if (R <= 0 || S <= 0 || K <= 0) op_error(op, "filters " + shape_str(w.shape) + " have an empty dimension");
  // A dynamic spatial size gives a dynamic output size.
  const int64_t OH = H < 0 ? kDynamic : out_len(H, R, g.sh, g.dh, g.pt, g.pb);
  const int64_t OW = W < 0 ? kDynamic : out_len(W, S, g.sw, g.dw, g.pl, g.pr);
  if ((H >= 0 && OH <= 0) || (W >= 0 && OW <= 0))
    op_error(op, "filters " + shape_str(w.shape) + " (" + g.str() + ") do not fit in x " + shape_str(x.shape));
  return {N, K, OH, OW};
}

// "blocked=x,y": the activations a train plan keeps in nChw16c (only when any).
void add_formats(Attrs& a, cpu::ConvFormats f, const char* src, const char* dst) {
  if (!f.src_blocked && !f.dst_blocked) return;
  std::string s = f.src_blocked ? src : "";
  if (f.dst_blocked) s += (s.empty() ? "" : ",") + std::string(dst);
  a.push_back({"blocked", s});
}

cpu::Conv2dParams conv_params(const Shape& x, const Shape& w, const Shape& y, const Geom& g) {
  cpu::Conv2dParams p{};
  p.N = x[0], p.C = x[1], p.H = x[2], p.W = x[3];
  p.K = w[0], p.R = w[2], p.S = w[3];
  p.OH = y[2], p.OW = y[3];
  p.stride_h = g.sh, p.stride_w = g.sw;
  p.pad_top = g.pt, p.pad_left = g.pl, p.pad_bottom = g.pb, p.pad_right = g.pr;
  p.dil_h = g.dh, p.dil_w = g.dw;
  p.groups = g.groups;
  return p;
}

Blob conv_backward_data(Blob w, Blob dy, const Shape& x_shape, const Geom& g);
Blob conv_backward_weights(Blob x, Blob dy, const Shape& w_shape, const Geom& g, Blob* dbias);
Blob conv_forward(Blob x, Blob w, const Geom& g);

// y = conv(x, w) [+ bias along channels] [relu]. Inputs x, w [, bias].
class Conv2d final : public Primitive {
 public:
  Conv2d(Geom g, bool bias = false, bool relu = false, cpu::ConvFormats f = {})
      : g_(g), bias_(bias), relu_(relu), f_(f) {}
  OpKind kind() const override { return OpKind::Conv2d; }
  Attrs attributes() const override {
    Attrs a;
    g_.add_to(a);
    a.push_back({"bias", int64_t{bias_}});
    a.push_back({"relu", int64_t{relu_}});
    add_formats(a, f_, "x", "y");
    return a;
  }
  std::shared_ptr<Primitive> with_blocked(const std::vector<bool>& in, const std::vector<bool>& out) const override {
    for (size_t i = 1; i < in.size(); ++i)
      if (in[i]) return nullptr;
    return std::make_shared<Conv2d>(g_, bias_, relu_, cpu::ConvFormats{in.at(0), out.at(0)});
  }

  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("conv2d", in, bias_ ? 3 : 2);
    Shape y = conv_out_shape("conv2d", in[0], in[1], g_);
    if (bias_ && (!shapes_agree(in[2].shape, Shape{y[1]}) || in[2].dtype != DType::Float32))
      op_error("conv2d", "bias must be " + spec_str({{y[1]}, DType::Float32}) + " for filters " +
                             shape_str(in[1].shape) + ", got " + spec_str(in[2]));
    return {{y, DType::Float32}};
  }

  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext& ctx) const override {
    const auto p = conv_params(in[0].shape(), in[1].shape(), out[0].shape(), g_);
    cpu::conv2d_forward(p, in[0].data<float>(), in[1].data<float>(), bias_ ? in[2].data<float>() : nullptr,
                        out[0].data<float>(), relu_, ctx.bf16, f_);
  }

  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>& outs, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    if (!cot[0].defined()) return std::vector<Blob>(argnums.size());
    // With a fused relu the cotangent first goes through relu's gradient.
    Blob dy = relu_ ? internal::relu_grad(cot[0], outs[0]) : cot[0];
    const bool want_w = std::find(argnums.begin(), argnums.end(), 1) != argnums.end();
    const bool want_b = std::find(argnums.begin(), argnums.end(), 2) != argnums.end();
    Blob dw, db;
    // When both are wanted one oneDNN backward-weights call also gives dbias.
    if (want_w) dw = conv_backward_weights(in[0], dy, in[1].shape(), g_, want_b ? &db : nullptr);
    else if (want_b) db = internal::bias_grad(dy, 1);
    std::vector<Blob> g;
    for (int a : argnums) g.push_back(a == 0 ? conv_backward_data(in[1], dy, in[0].shape(), g_) : a == 1 ? dw : db);
    return g;
  }

  std::shared_ptr<Primitive> with_bias() const override {
    return bias_ || relu_ ? nullptr : std::make_shared<Conv2d>(g_, true, false, f_);
  }
  std::shared_ptr<Primitive> with_relu() const override {
    return relu_ ? nullptr : std::make_shared<Conv2d>(g_, bias_, true, f_);
  }

 private:
  Geom g_;
  bool bias_, relu_;
  cpu::ConvFormats f_;
};

// dx of a convolution: inputs w, dy. Linear in both, so its own gradient is a
// convolution (w.r.t. dy) and a backward-weights (w.r.t. w).
class Conv2dBackwardData final : public Primitive {
 public:
  Conv2dBackwardData(Shape x_shape, Geom g, cpu::ConvFormats f = {}) : x_(std::move(x_shape)), g_(g), f_(f) {}
  OpKind kind() const override { return OpKind::Conv2dBackwardData; }
  Attrs attributes() const override {
    Attrs a{{"x_shape", x_}};
    g_.add_to(a);
    add_formats(a, f_, "dx", "dy");
    return a;
  }
  // Inputs w, dy; output dx.
  std::shared_ptr<Primitive> with_blocked(const std::vector<bool>& in, const std::vector<bool>& out) const override {
    if (in.at(0)) return nullptr;
    return std::make_shared<Conv2dBackwardData>(x_, g_, cpu::ConvFormats{out.at(0), in.at(1)});
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("conv2d_backward_data", in, 2);
    expect_float32("conv2d_backward_data", in[1], "dy");
    Shape y = conv_out_shape("conv2d_backward_data", {x_, DType::Float32}, in[0], g_);
    if (!shapes_agree(in[1].shape, y))
      op_error("conv2d_backward_data", "dy must be " + shape_str(y) + " for x " + shape_str(x_) + " and filters " +
                                           shape_str(in[0].shape) + ", got " + spec_str(in[1]));
    return {{x_, DType::Float32}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext& ctx) const override {
    const auto p = conv_params(x_, in[0].shape(), in[1].shape(), g_);
    cpu::conv2d_backward_data(p, in[0].data<float>(), in[1].data<float>(), out[0].data<float>(), ctx.bf16, f_);
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    std::vector<Blob> g;
    for (int a : argnums) {
      if (!cot[0].defined()) g.emplace_back();
      else if (a == 0) g.push_back(conv_backward_weights(cot[0], in[1], in[0].shape(), g_, nullptr));
      else g.push_back(conv_forward(cot[0], in[0], g_));
    }
    return g;
  }

 private:
  Shape x_;
  Geom g_;
  cpu::ConvFormats f_;
};

// dw [and dbias] of a convolution: inputs x, dy.
class Conv2dBackwardWeights final : public Primitive {
 public:
  Conv2dBackwardWeights(Shape w_shape, Geom g, bool bias, cpu::ConvFormats f = {})
      : w_(std::move(w_shape)), g_(g), bias_(bias), f_(f) {}
  OpKind kind() const override { return OpKind::Conv2dBackwardWeights; }
  Attrs attributes() const override {
    Attrs a{{"w_shape", w_}};
    g_.add_to(a);
    a.push_back({"bias", int64_t{bias_}});
    add_formats(a, f_, "x", "dy");
    return a;
  }
  // Inputs x, dy; outputs dw [, dbias] (plain).
  std::shared_ptr<Primitive> with_blocked(const std::vector<bool>& in, const std::vector<bool>& out) const override {
    for (bool b : out)
      if (b) return nullptr;
    return std::make_shared<Conv2dBackwardWeights>(w_, g_, bias_, cpu::ConvFormats{in.at(0), in.at(1)});
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("conv2d_backward_weights", in, 2);
    expect_float32("conv2d_backward_weights", in[1], "dy");
    Shape y = conv_out_shape("conv2d_backward_weights", in[0], {w_, DType::Float32}, g_);
    if (!shapes_agree(in[1].shape, y))
      op_error("conv2d_backward_weights", "dy must be " + shape_str(y) + " for x " + shape_str(in[0].shape) +
                                              " and filters " + shape_str(w_) + ", got " + spec_str(in[1]));
    std::vector<TensorSpec> o{{w_, DType::Float32}};
    if (bias_) o.push_back({{w_[0]}, DType::Float32});
    return o;
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext& ctx) const override {
    const auto p = conv_params(in[0].shape(), w_, in[1].shape(), g_);
    cpu::conv2d_backward_weights(p, in[0].data<float>(), in[1].data<float>(), out[0].data<float>(),
                                 bias_ ? out[1].data<float>() : nullptr, ctx.bf16, f_);
  }
  std::shared_ptr<Primitive> with_bias_grad() const override {
    return bias_ ? nullptr : std::make_shared<Conv2dBackwardWeights>(w_, g_, true, f_);
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    // dw is bilinear in (x, dy); dbias is linear in dy alone.
    std::vector<Blob> g;
    for (int a : argnums) {
      Blob r;
      if (cot[0].defined())
        r = a == 0 ? conv_backward_data(cot[0], in[1], in[0].shape(), g_) : conv_forward(in[0], cot[0], g_);
      if (a == 1 && bias_ && cot.size() > 1 && cot[1].defined()) {
        Shape s{1, w_[0], 1, 1};
        Blob b = broadcast_to(reshape(cot[1], s), in[1].shape());
        r = r.defined() ? add(r, b) : b;
      }
      g.push_back(r);
    }
    return g;
  }

 private:
  Shape w_;
  Geom g_;
  bool bias_;
  cpu::ConvFormats f_;
};

Blob conv_forward(Blob x, Blob w, const Geom& g) {
  return internal::add_node(std::make_shared<Conv2d>(g), {x, w})[0];
}
Blob conv_backward_data(Blob w, Blob dy, const Shape& x_shape, const Geom& g) {
  return internal::add_node(std::make_shared<Conv2dBackwardData>(x_shape, g), {w, dy})[0];
}
Blob conv_backward_weights(Blob x, Blob dy, const Shape& w_shape, const Geom& g, Blob* dbias) {
  auto r = internal::add_node(std::make_shared<Conv2dBackwardWeights>(w_shape, g, dbias != nullptr), {x, dy});
  if (dbias) *dbias = r[1];
  return r[0];
}

// ---- pooling ----

struct PoolGeom {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1;
  int64_t pt = 0, pl = 0, pb = 0, pr = 0;
  std::string str() const {
    auto s = [](int64_t v) { return std::to_string(v); };
    return "ksize=(" + s(kh) + "," + s(kw) + ") strides=(" + s(sh) + "," + s(sw) + ") pads=(" + s(pt) + "," + s(pl) +
           "," + s(pb) + "," + s(pr) + ")";
  }
  // ONNX-style: kernel_shape (h, w), strides (h, w), pads (top, left, bottom, right).
  void add_to(Attrs& a) const {
    a.push_back({"kernel_shape", std::vector<int64_t>{kh, kw}});
    a.push_back({"strides", std::vector<int64_t>{sh, sw}});
    a.push_back({"pads", std::vector<int64_t>{pt, pl, pb, pr}});
  }
};

const char* pool_name(cpu::PoolKind k) { return k == cpu::PoolKind::Max ? "max_pool2d" : "avg_pool2d"; }

Shape pool_out_shape(const char* op, const TensorSpec& x, const PoolGeom& g) {
  expect_nchw(op, x, "x");
  expect_float32(op, x, "x");
  const int64_t OH = x.shape[2] < 0 ? kDynamic : out_len(x.shape[2], g.kh, g.sh, 1, g.pt, g.pb);
  const int64_t OW = x.shape[3] < 0 ? kDynamic : out_len(x.shape[3], g.kw, g.sw, 1, g.pl, g.pr);
  if ((x.shape[2] >= 0 && OH <= 0) || (x.shape[3] >= 0 && OW <= 0)) op_error(op, "window " + g.str() + " does not fit in x " + spec_str(x));
  return {x.shape[0], x.shape[1], OH, OW};
}

// Whether this pooling runs on Jobflow's own 2x2 stride-2 max loop
// (cpu::pool2d_own_max_2x2: the geometry alone decides).
bool own_2x2(cpu::PoolKind kind, const PoolGeom& g) {
  cpu::Pool2dParams p{};
  p.kh = g.kh, p.kw = g.kw, p.sh = g.sh, p.sw = g.sw;
  p.pad_top = g.pt, p.pad_left = g.pl, p.pad_bottom = g.pb, p.pad_right = g.pr, p.kind = kind;
  return cpu::pool2d_own_max_2x2(p);
}

cpu::Pool2dParams pool_params(const Shape& x, const Shape& y, const PoolGeom& g, cpu::PoolKind kind) {
  cpu::Pool2dParams p{};
  p.N = x[0], p.C = x[1], p.H = x[2], p.W = x[3], p.OH = y[2], p.OW = y[3];
  p.kh = g.kh, p.kw = g.kw, p.sh = g.sh, p.sw = g.sw;
  p.pad_top = g.pt, p.pad_left = g.pl, p.pad_bottom = g.pb, p.pad_right = g.pr;
  p.kind = kind;
  return p;
}

// Max pooling has a second output: the workspace (each output's argmax, from
// Jobflow's own loops: cpu::pool2d_workspace_bytes) as raw bytes, which the
// backward reads instead of searching the windows again. It is only filled in
// train jobs; predict jobs get a (0,) placeholder. Average pooling (padding
// excluded from the count, as TensorFlow/OneFlow do) runs oneDNN's and needs
// no workspace.
class Pool2d final : public Primitive {
 public:
  Pool2d(cpu::PoolKind kind, PoolGeom g, bool workspace, bool blocked = false)
      : kind_(kind), g_(g), ws_(workspace), blocked_(blocked) {}
  OpKind kind() const override { return kind_ == cpu::PoolKind::Max ? OpKind::MaxPool2d : OpKind::AvgPool2d; }
  // Average pooling excludes the padding from the count (ONNX count_include_pad=0).
  Attrs attributes() const override {
    Attrs a;
    g_.add_to(a);
    a.push_back({"workspace", int64_t{ws_}});
    if (blocked_) a.push_back({"blocked", std::string("x,y")});
    return a;
  }
  // x and y together (the workspace's indices follow their order), on
  // Jobflow's own 2x2 stride-2 max pooling.
  std::shared_ptr<Primitive> with_blocked(const std::vector<bool>& in, const std::vector<bool>& out) const override {
    if (blocked_ || !in.at(0) || !out.at(0) || (out.size() > 1 && out[1]) || !own_2x2(kind_, g_)) return nullptr;
    return std::make_shared<Pool2d>(kind_, g_, ws_, true);
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 1);
    Shape y = pool_out_shape(name(), in[0], g_);
    std::vector<TensorSpec> o{{y, DType::Float32}};
    if (kind_ == cpu::PoolKind::Max) {
      // The workspace's size follows the shapes: dynamic until they are known.
      const int64_t bytes = !ws_                     ? 0
                            : !is_static(in[0].shape) ? kDynamic
                                                      : static_cast<int64_t>(cpu::pool2d_workspace_bytes(
                                                            pool_params(in[0].shape, y, g_, kind_)));
      o.push_back({{bytes}, DType::UInt8});
    }
    return o;
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const auto p = pool_params(in[0].shape(), out[0].shape(), g_, kind_);
    cpu::pool2d_forward(p, in[0].data<float>(), out[0].data<float>(), ws_ ? out[1].raw() : nullptr, blocked_);
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>& outs, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override;

 private:
  cpu::PoolKind kind_;
  PoolGeom g_;
  bool ws_, blocked_;
};

// dx of a pooling. Inputs: dy, then for max pooling the workspace, and in
// predict jobs (empty workspace) the forward input x, whose windows are then
// searched again for their maxima. relu_mask (made by the fusion pass,
// with_relu_grad): relu's gradient at the pooling's input folded in, the
// forward's output y an extra last input.
class Pool2dGrad final : public Primitive {
 public:
  Pool2dGrad(cpu::PoolKind kind, PoolGeom g, Shape x_shape, bool from_input, bool relu_mask = false,
             bool blocked = false)
      : kind_(kind), g_(g), x_(std::move(x_shape)), from_input_(from_input), relu_mask_(relu_mask),
        blocked_(blocked) {}
  OpKind kind() const override { return kind_ == cpu::PoolKind::Max ? OpKind::MaxPool2dGrad : OpKind::AvgPool2dGrad; }
  Attrs attributes() const override {
    Attrs a{{"x_shape", x_}};
    g_.add_to(a);
    a.push_back({"from_input", int64_t{from_input_}});
    a.push_back({"relu_mask", int64_t{relu_mask_}});
    if (blocked_) a.push_back({"blocked", std::string("dy,dx")});
    return a;
  }
  std::shared_ptr<Primitive> with_relu_grad() const override {
    // Only Jobflow's own 2x2 loop masks as it scatters.
    if (from_input_ || relu_mask_ || !own_2x2(kind_, g_)) return nullptr;
    return std::make_shared<Pool2dGrad>(kind_, g_, x_, false, true, blocked_);
  }
  // dy, dx (and the mask) together, with a workspace from a blocked
  // forward: the pass pairs them.
  std::shared_ptr<Primitive> with_blocked(const std::vector<bool>& in, const std::vector<bool>& out) const override {
    if (blocked_ || from_input_ || !own_2x2(kind_, g_) || !in.at(0) || in.at(1) || !out.at(0)) return nullptr;
    if (relu_mask_ && !in.at(2)) return nullptr;
    return std::make_shared<Pool2dGrad>(kind_, g_, x_, false, relu_mask_, true);
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    const bool max = kind_ == cpu::PoolKind::Max;
    expect_inputs(name(), in, max ? (from_input_ || relu_mask_ ? 3 : 2) : 1);
    Shape y = pool_out_shape(name(), {x_, DType::Float32}, g_);
    if (!shapes_agree(in[0].shape, y) || in[0].dtype != DType::Float32)
      op_error(name(), "dy must be " + spec_str({y, DType::Float32}) + " for x " + shape_str(x_) + ", got " +
                           spec_str(in[0]));
    if (max && in[1].dtype != DType::UInt8)
      op_error(name(), "the workspace must be uint8, got " + spec_str(in[1]));
    if (from_input_ && !shapes_agree(in[2].shape, x_))
      op_error(name(), "x must be " + shape_str(x_) + ", got " + spec_str(in[2]));
    if (relu_mask_ && (!shapes_agree(in[2].shape, y) || in[2].dtype != DType::Float32))
      op_error(name(), "the pooling's output must be " + spec_str({y, DType::Float32}) + ", got " + spec_str(in[2]));
    return {{x_, DType::Float32}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const auto p = pool_params(x_, in[0].shape(), g_, kind_);
    if (relu_mask_) {
      cpu::pool2d_backward_relu_masked(p, in[0].data<float>(), in[1].raw(), in[2].data<float>(),
                                       out[0].data<float>(), blocked_);
      return;
    }
    if (!from_input_) {
      cpu::pool2d_backward(p, in[0].data<float>(), kind_ == cpu::PoolKind::Max ? in[1].raw() : nullptr,
                           out[0].data<float>(), blocked_);
      return;
    }
    // No workspace (gradient taken in a predict job): the forward again with
    // its indices, into this thread's scratch, then the backward through
    // them, so each dy goes where the forward took its output (the first
    // NaN, else the first maximum; padding never wins) by the same loops.
    thread_local std::vector<float> y;
    thread_local std::vector<unsigned char> ws;
    y.resize(static_cast<size_t>(p.N * p.C * p.OH * p.OW));
    ws.resize(cpu::pool2d_workspace_bytes(p));
    cpu::pool2d_forward(p, in[2].data<float>(), y.data(), ws.data());
    cpu::pool2d_backward(p, in[0].data<float>(), ws.data(), out[0].data<float>());
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    // Average pooling's backward is linear in dy and its adjoint is the
    // forward pooling itself; max pooling's second derivative is not provided.
    if (kind_ != cpu::PoolKind::Max) {
      std::vector<Blob> g;
      for (size_t i = 0; i < argnums.size(); ++i)
        g.push_back(cot[0].defined() ? internal::add_node(std::make_shared<Pool2d>(kind_, g_, false), {cot[0]})[0]
                                     : Blob());
      return g;
    }
    return Primitive::vjp({}, {}, cot, argnums);
  }
  bool differentiable_input(int i) const override { return i == 0; }

 private:
  cpu::PoolKind kind_;
  PoolGeom g_;
  Shape x_;
  bool from_input_, relu_mask_, blocked_;
};

std::vector<Blob> Pool2d::vjp(const std::vector<Blob>& in, const std::vector<Blob>& outs,
                              const std::vector<Blob>& cot, const std::vector<int>& argnums) const {
  if (!cot[0].defined()) return std::vector<Blob>(argnums.size());
  std::vector<Blob> grad_in{cot[0]};
  const bool max = kind_ == cpu::PoolKind::Max;
  if (max) grad_in.push_back(outs[1]);
  if (max && !ws_) grad_in.push_back(in[0]);
  Blob dx = internal::add_node(std::make_shared<Pool2dGrad>(kind_, g_, in[0].shape(), max && !ws_), grad_in)[0];
  return std::vector<Blob>(argnums.size(), dx);
}

Blob pool2d(cpu::PoolKind kind, Blob x, nn::Size2 ksize, nn::Size2 strides, const nn::Padding& padding,
            const std::string& data_format, const std::string& name) {
  const char* op = pool_name(kind);
  require_graph(op);
  if (data_format == "NHWC" || data_format == "channels_last")
    op_error(op, "data_format \"" + data_format +
                     "\" is not supported yet; pooling runs on NCHW tensors (transpose x with perm {0, 3, 1, 2})");
  if (data_format != "NCHW" && data_format != "channels_first")
    op_error(op, "data_format must be \"NCHW\", got \"" + data_format + "\"");
  if (!x.defined()) op_error(op, "x is an undefined blob");
  expect_nchw(op, x.spec(), "x");
  const auto pads = padding.resolve(op, x.shape()[2], x.shape()[3], ksize, strides, 1);
  PoolGeom g{ksize.h, ksize.w, strides.h, strides.w, pads[0], pads[1], pads[2], pads[3]};
  // A window lying wholly in the padding would have no element to reduce.
  if (g.pt >= g.kh || g.pb >= g.kh || g.pl >= g.kw || g.pr >= g.kw)
    op_error(op, "padding must be smaller than the window, got " + g.str());
  const bool ws = kind == cpu::PoolKind::Max && defining_train_job();
  return internal::add_node(std::make_shared<Pool2d>(kind, g, ws), {x}, name)[0];
}

}  // namespace

namespace nn {

Blob conv2d(Blob x, Blob filters, Size2 strides, Padding padding, Size2 dilations, int64_t groups,
            const std::string& name) {
  require_graph("conv2d");
  if (!x.defined() || !filters.defined()) op_error("conv2d", "x and filters must be defined blobs");
  expect_nchw("conv2d", x.spec(), "x");
  if (filters.ndim() != 4)
    op_error("conv2d", "filters must be (K, C/groups, R, S) (rank 4), got " + spec_str(filters.spec()) + " for x " +
                           spec_str(x.spec()));
  const auto pads =
      padding.resolve("conv2d", x.shape()[2], x.shape()[3], Size2(filters.shape()[2], filters.shape()[3]), strides,
                      dilations);
  Geom g;
  g.sh = strides.h, g.sw = strides.w;
  g.pt = pads[0], g.pl = pads[1], g.pb = pads[2], g.pr = pads[3];
  g.dh = dilations.h, g.dw = dilations.w;
  g.groups = groups;
  return internal::add_node(std::make_shared<Conv2d>(g), {x, filters}, name)[0];
}

Blob max_pool2d(Blob x, Size2 ksize, Size2 strides, Padding padding, const std::string& data_format,
                const std::string& name) {
  return pool2d(cpu::PoolKind::Max, x, ksize, strides, padding, data_format, name);
}

Blob avg_pool2d(Blob x, Size2 ksize, Size2 strides, Padding padding, const std::string& data_format,
                const std::string& name) {
  return pool2d(cpu::PoolKind::AvgExcludePad, x, ksize, strides, padding, data_format, name);
}

}  // namespace nn
}  // namespace jobflow
