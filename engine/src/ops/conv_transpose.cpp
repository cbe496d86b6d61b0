// conv_transpose2d (ONNX ConvTranspose, NCHW, float32) on the oneDNN
// convolution kernels of cpu/dnnl_kernels.h.
//
// A transposed convolution of x (N, C_in, H, W) by w (C_in, C_out/g, kh, kw)
// is the data-gradient of the ordinary convolution that maps its output y
// (N, C_out, OH, OW) back to x's shape with the same w read as OIHW filters
// (O = C_in, I = C_out/g), strides, pads, dilations and groups. So
//   forward   y  = conv2d_backward_data(w, dy := x)
//   dL/dx     dx = conv2d_forward(dy, w)              (the conv itself)
//   dL/dw     dw = conv2d_backward_weights(x := dy, dy := x)
// and the three ops are closed under differentiation (each one's vjp is
// built from the other two), so second derivatives work as well.
//
// output_padding adds rows/columns at the bottom/right of y; it must stay
// below the stride so that the convolution of y still has exactly H x W
// outputs (ONNX also allows values up to the dilation, which this kernel
// mapping cannot express).
#include <algorithm>

#include "cpu/dnnl_kernels.h"
#include "jobflow/ops.h"
#include "kernel_util.h"
#include "ops_internal.h"

namespace jobflow {
namespace {

constexpr const char* kOp = "conv_transpose2d";

struct CtGeom {
  int64_t sh = 1, sw = 1;
  int64_t pt = 0, pl = 0, pb = 0, pr = 0;
  int64_t dh = 1, dw = 1;
  int64_t oph = 0, opw = 0;  // output_padding
  int64_t groups = 1;
  std::string str() const {
    auto s = [](int64_t v) { return std::to_string(v); };
    return "strides=(" + s(sh) + "," + s(sw) + ") pads=(" + s(pt) + "," + s(pl) + "," + s(pb) + "," + s(pr) +
           ") dilations=(" + s(dh) + "," + s(dw) + ") output_padding=(" + s(oph) + "," + s(opw) + ")" +
           (groups != 1 ? " groups=" + s(groups) : "");
  }
  // ONNX ConvTranspose attribute names and orders.
  void add_to(Attrs& a) const {
    a.push_back({"strides", std::vector<int64_t>{sh, sw}});
    a.push_back({"pads", std::vector<int64_t>{pt, pl, pb, pr}});
    a.push_back({"dilations", std::vector<int64_t>{dh, dw}});
    a.push_back({"output_padding", std::vector<int64_t>{oph, opw}});
    a.push_back({"group", groups});
  }
};

void expect_f32_nchw(const char* op, const TensorSpec& s, const char* arg) {
  if (s.shape.size() != 4) op_error(op, std::string(arg) + " must have rank 4, got " + spec_str(s));
  if (s.dtype != DType::Float32)
    op_error(op, std::string(arg) + " must be float32 (the oneDNN kernels are float32 only), got " + spec_str(s));
}

// Shape of y for x and w; every failed check names the shapes and geometry.
Shape ct_out_shape(const char* op, const TensorSpec& x, const TensorSpec& w, const CtGeom& g) {
  expect_f32_nchw(op, x, "x (N, C_in, H, W)");
  expect_f32_nchw(op, w, "w (C_in, C_out/groups, kh, kw)");
  if (g.sh <= 0 || g.sw <= 0 || g.dh <= 0 || g.dw <= 0 || g.groups <= 0)
    op_error(op, "strides, dilations and groups must be positive, got " + g.str());
  if (std::min({g.pt, g.pl, g.pb, g.pr, g.oph, g.opw}) < 0)
    op_error(op, "pads and output_padding must be >= 0, got " + g.str());
  if (g.oph >= g.sh || g.opw >= g.sw)
    op_error(op, "output_padding must be smaller than the strides, got " + g.str());
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t kh = w.shape[2], kw = w.shape[3];
  if (!dims_agree(w.shape[0], C))
    op_error(op, "x " + shape_str(x.shape) + " has " + std::to_string(C) + " channels but w " + shape_str(w.shape) +
                     " expects " + std::to_string(w.shape[0]) + " (w is (C_in, C_out/groups, kh, kw))");
  if (C >= 0 && C % g.groups != 0)
    op_error(op, "groups=" + std::to_string(g.groups) + " must divide the " + std::to_string(C) +
                     " input channels of x " + shape_str(x.shape));
  if (w.shape[1] <= 0 || kh <= 0 || kw <= 0) op_error(op, "w " + shape_str(w.shape) + " has an empty dimension");
  if (N == 0 || H == 0 || W == 0) op_error(op, "x " + shape_str(x.shape) + " has an empty dimension");
  // (in - 1) * s - p0 - p1 + d * (k - 1) + 1 + op, overflow-checked: the geometry may come from a file.
  auto out_len = [&](int64_t in, int64_t s, int64_t p0, int64_t p1, int64_t d, int64_t k, int64_t op_pad) {
    int64_t a = 0, b = 0, r = 0;
    if (__builtin_mul_overflow(in - 1, s, &a) || __builtin_mul_overflow(d, k - 1, &b) ||
        __builtin_sub_overflow(a, p0, &r) || __builtin_sub_overflow(r, p1, &r) || __builtin_add_overflow(r, b, &r) ||
        __builtin_add_overflow(r, 1 + op_pad, &r))
      op_error(op, "strides, dilations or pads too large: x " + shape_str(x.shape) + ", w " + shape_str(w.shape) +
                       ", " + g.str());
    return r;
  };
  // A dynamic spatial size (kDynamic) gives a dynamic output size.
  const int64_t OH = H < 0 ? kDynamic : out_len(H, g.sh, g.pt, g.pb, g.dh, kh, g.oph);
  const int64_t OW = W < 0 ? kDynamic : out_len(W, g.sw, g.pl, g.pr, g.dw, kw, g.opw);
  if ((H >= 0 && OH <= 0) || (W >= 0 && OW <= 0))
    op_error(op, "pads crop the whole output: x " + shape_str(x.shape) + ", w " + shape_str(w.shape) + ", " + g.str() +
                     " give an output of " + std::to_string(OH) + " x " + std::to_string(OW));
  return {N, w.shape[1] * g.groups, OH, OW};
}

// The convolution whose backward-data is this transposed convolution: its
// input is y, its output x, its OIHW filters w.
cpu::Conv2dParams ct_params(const Shape& x, const Shape& w, const Shape& y, const CtGeom& g) {
  cpu::Conv2dParams p{};
  p.N = y[0], p.C = y[1], p.H = y[2], p.W = y[3];
  p.K = w[0], p.R = w[2], p.S = w[3];
  p.OH = x[2], p.OW = x[3];
  p.stride_h = g.sh, p.stride_w = g.sw;
  p.pad_top = g.pt, p.pad_left = g.pl, p.pad_bottom = g.pb, p.pad_right = g.pr;
  p.dil_h = g.dh, p.dil_w = g.dw;
  p.groups = g.groups;
  return p;
}

Blob ct_forward(Blob x, Blob w, const CtGeom& g);
Blob ct_grad_input(Blob dy, Blob w, const Shape& x_shape, const CtGeom& g);
Blob ct_grad_weight(Blob x, Blob dy, const Shape& w_shape, const CtGeom& g);

// y = conv_transpose(x, w). Inputs x, w.
class ConvTranspose2d final : public Primitive {
 public:
  explicit ConvTranspose2d(CtGeom g) : g_(g) {}
  OpKind kind() const override { return OpKind::ConvTranspose2d; }
  Attrs attributes() const override {
    Attrs a;
    g_.add_to(a);
    return a;
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(kOp, in, 2);
    return {{ct_out_shape(kOp, in[0], in[1], g_), DType::Float32}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const auto p = ct_params(in[0].shape(), in[1].shape(), out[0].shape(), g_);
    cpu::conv2d_backward_data(p, in[1].data<float>(), in[0].data<float>(), out[0].data<float>());
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    std::vector<Blob> r;
    for (int a : argnums)
      r.push_back(a == 0 ? ct_grad_input(cot[0], in[1], in[0].shape(), g_)
                         : ct_grad_weight(in[0], cot[0], in[1].shape(), g_));
    return r;
  }

 private:
  CtGeom g_;
};

// dx = conv2d(dy, w): inputs dy (y's shape), w.
class ConvTranspose2dGradInput final : public Primitive {
 public:
  ConvTranspose2dGradInput(Shape x_shape, CtGeom g) : x_(std::move(x_shape)), g_(g) {}
  OpKind kind() const override { return OpKind::ConvTranspose2dGradInput; }
  Attrs attributes() const override {
    Attrs a{{"x_shape", x_}};
    g_.add_to(a);
    return a;
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 2);
    const Shape y = ct_out_shape(name(), {x_, DType::Float32}, in[1], g_);
    if (!shapes_agree(in[0].shape, y) || in[0].dtype != DType::Float32)
      op_error(name(), "dy must be " + spec_str({y, DType::Float32}) + " for x " + shape_str(x_) + " and w " +
                           shape_str(in[1].shape) + ", got " + spec_str(in[0]));
    return {{x_, DType::Float32}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const auto p = ct_params(x_, in[1].shape(), in[0].shape(), g_);
    cpu::conv2d_forward(p, in[0].data<float>(), in[1].data<float>(), nullptr, out[0].data<float>());
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    // Bilinear in (dy, w): the adjoint in dy is the transposed conv, in w the
    // conv's weight gradient.
    std::vector<Blob> r;
    for (int a : argnums)
      r.push_back(a == 0 ? ct_forward(cot[0], in[1], g_) : ct_grad_weight(cot[0], in[0], in[1].shape(), g_));
    return r;
  }

 private:
  Shape x_;
  CtGeom g_;
};

// dw = conv2d_backward_weights(input dy, output-gradient x): inputs x, dy.
class ConvTranspose2dGradWeight final : public Primitive {
 public:
  ConvTranspose2dGradWeight(Shape w_shape, CtGeom g) : w_(std::move(w_shape)), g_(g) {}
  OpKind kind() const override { return OpKind::ConvTranspose2dGradWeight; }
  Attrs attributes() const override {
    Attrs a{{"w_shape", w_}};
    g_.add_to(a);
    return a;
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 2);
    const Shape y = ct_out_shape(name(), in[0], {w_, DType::Float32}, g_);
    if (!shapes_agree(in[1].shape, y) || in[1].dtype != DType::Float32)
      op_error(name(), "dy must be " + spec_str({y, DType::Float32}) + " for x " + shape_str(in[0].shape) +
                           " and w " + shape_str(w_) + ", got " + spec_str(in[1]));
    return {{w_, DType::Float32}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const auto p = ct_params(in[0].shape(), w_, in[1].shape(), g_);
    cpu::conv2d_backward_weights(p, in[1].data<float>(), in[0].data<float>(), out[0].data<float>(), nullptr);
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    // <c, dw(x, dy)> = <x, conv(dy, c)> = <dy, conv_transpose(x, c)>.
    std::vector<Blob> r;
    for (int a : argnums)
      r.push_back(a == 0 ? ct_grad_input(in[1], cot[0], in[0].shape(), g_) : ct_forward(in[0], cot[0], g_));
    return r;
  }

 private:
  Shape w_;
  CtGeom g_;
};

Blob ct_forward(Blob x, Blob w, const CtGeom& g) {
  if (!x.defined() || !w.defined()) return Blob();
  return internal::add_node(std::make_shared<ConvTranspose2d>(g), {x, w})[0];
}
Blob ct_grad_input(Blob dy, Blob w, const Shape& x_shape, const CtGeom& g) {
  if (!dy.defined() || !w.defined()) return Blob();
  return internal::add_node(std::make_shared<ConvTranspose2dGradInput>(x_shape, g), {dy, w})[0];
}
Blob ct_grad_weight(Blob x, Blob dy, const Shape& w_shape, const CtGeom& g) {
  if (!x.defined() || !dy.defined()) return Blob();
  return internal::add_node(std::make_shared<ConvTranspose2dGradWeight>(w_shape, g), {x, dy})[0];
}

}  // namespace

namespace nn {
Blob conv_transpose2d(Blob x, Blob w, Size2 strides, const std::vector<int64_t>& pads, Size2 dilations,
                      Size2 output_padding, int64_t groups, const std::string& name) {
  if (pads.size() != 4)
    throw Error(std::string("[") + kOp + "] pads must be {top, left, bottom, right}, got " +
                std::to_string(pads.size()) + " values");
  CtGeom g;
  g.sh = strides.h, g.sw = strides.w;
  g.pt = pads[0], g.pl = pads[1], g.pb = pads[2], g.pr = pads[3];
  g.dh = dilations.h, g.dw = dilations.w;
  g.oph = output_padding.h, g.opw = output_padding.w;
  g.groups = groups;
  return internal::add_node(std::make_shared<ConvTranspose2d>(g), {x, w}, name)[0];
}
}  // namespace nn

}  // namespace jobflow
