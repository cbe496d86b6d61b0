// conv2d and its two gradients, max/avg pooling and their gradients, on
// cuDNN (NCHW, float32, like the CPU's oneDNN kernels in
// engine/src/ops/conv.cpp).
//
// * Convolution algorithms are chosen once per shape and geometry with
//   cudnnFind*AlgorithmEx (timed on the real buffers) and cached for the
//   process; later calls only look the choice up.
// * cuDNN pads symmetrically. Asymmetric pads (OneFlow's "SAME" with an odd
//   total) are split into the symmetric part, which cuDNN applies, and the
//   remainder, applied by copying x into a larger zero-padded buffer (and,
//   for the data gradient, cropping the result back).
// * float32 math is exact FP32 (CUDNN_FMA_MATH) unless JOBFLOW_CUDA_TF32=1.
// * Max pooling in train jobs keeps a workspace (Jobflow's own indices: a
//   byte per output, an int32 for windows of over 256 taps) whose format
//   the CPU gradient reads; those two ops stay on the CPU (supports() is
//   false), so a forward and a backward on different backends never
//   disagree about it.
//   Predict-job max pooling and its gradient from x run here.
#include <climits>
#include <mutex>

#include "ops.h"

namespace jobflow::cuda {
namespace {

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }
int ci(int64_t v) {
  if (!fits_int(v)) throw Error("[cuda] dimension " + std::to_string(v) + " does not fit cuDNN's int");
  return static_cast<int>(v);
}

// ---- RAII descriptors ----

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(int64_t n, int64_t c, int64_t h, int64_t w) {
    check(cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor");
    check(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, ci(n), ci(c), ci(h), ci(w)),
          "cudnnSetTensor4dDescriptor");
  }
  explicit TensorDesc(const Shape& s) : TensorDesc(s[0], s[1], s[2], s[3]) {}
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  explicit FilterDesc(const Shape& s) {
    check(cudnnCreateFilterDescriptor(&d), "cudnnCreateFilterDescriptor");
    check(cudnnSetFilter4dDescriptor(d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, ci(s[0]), ci(s[1]), ci(s[2]), ci(s[3])),
          "cudnnSetFilter4dDescriptor");
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

// Strides, pads {top, left, bottom, right}, dilations and groups of a conv.
struct ConvGeom {
  int64_t sh = 1, sw = 1, pt = 0, pl = 0, pb = 0, pr = 0, dh = 1, dw = 1, groups = 1;
};
ConvGeom conv_geom(const Primitive& p) {
  ConvGeom g;
  const auto st = p.attr_ints("strides"), pads = p.attr_ints("pads"), dil = p.attr_ints("dilations");
  if (st.size() == 2) g.sh = st[0], g.sw = st[1];
  if (pads.size() == 4) g.pt = pads[0], g.pl = pads[1], g.pb = pads[2], g.pr = pads[3];
  if (dil.size() == 2) g.dh = dil[0], g.dw = dil[1];
  g.groups = p.attr_int("group");
  return g;
}

// The symmetric part of the pads (cuDNN's) and the remainder applied by hand.
struct PadSplit {
  int64_t ph = 0, pw = 0;              // symmetric, given to cuDNN
  int64_t top = 0, left = 0, bottom = 0, right = 0;  // explicit extra rows/cols
  bool explicit_pad() const { return top || left || bottom || right; }
};
PadSplit split_pads(int64_t pt, int64_t pl, int64_t pb, int64_t pr) {
  PadSplit s;
  s.ph = std::min(pt, pb), s.pw = std::min(pl, pr);
  s.top = pt - s.ph, s.bottom = pb - s.ph, s.left = pl - s.pw, s.right = pr - s.pw;
  return s;
}

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(const ConvGeom& g, const PadSplit& ps) {
    check(cudnnCreateConvolutionDescriptor(&d), "cudnnCreateConvolutionDescriptor");
    check(cudnnSetConvolution2dDescriptor(d, ci(ps.ph), ci(ps.pw), ci(g.sh), ci(g.sw), ci(g.dh), ci(g.dw),
                                          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          "cudnnSetConvolution2dDescriptor");
    check(cudnnSetConvolutionGroupCount(d, ci(g.groups)), "cudnnSetConvolutionGroupCount");
    math(tf32_enabled() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
  }
  void math(cudnnMathType_t m) { check(cudnnSetConvolutionMathType(d, m), "cudnnSetConvolutionMathType"); }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// Everything a convolution call needs, for x (as padded by hand), w and y.
struct ConvSetup {
  ConvGeom g;
  PadSplit ps;
  Shape x, xp, w, y;  // xp: x with the explicit extra padding
  std::string key(const char* kind) const {
    std::string k = kind;
    auto put = [&k](int64_t v) {
      k += ',';
      k += std::to_string(v);
    };
    for (const Shape* s : {&xp, &w, &y})
      for (int64_t d : *s) put(d);
    for (int64_t v : {ps.ph, ps.pw, g.sh, g.sw, g.dh, g.dw, g.groups}) put(v);
    if (tf32_enabled()) k += ",tf32";
    return k;
  }
};
ConvSetup conv_setup(const Primitive& p, const Shape& x, const Shape& w, const Shape& y) {
  ConvSetup s;
  s.g = conv_geom(p);
  s.ps = split_pads(s.g.pt, s.g.pl, s.g.pb, s.g.pr);
  s.x = x, s.w = w, s.y = y;
  s.xp = {x[0], x[1], x[2] + s.ps.top + s.ps.bottom, x[3] + s.ps.left + s.ps.right};
  return s;
}

// x copied into a zero-padded buffer when the pads are asymmetric; else x.
const float* padded_input(Launch& L, const ConvSetup& s, const float* x, DevBuf& keep) {
  if (!s.ps.explicit_pad()) return x;
  keep = L.scratch(static_cast<size_t>(numel(s.xp)) * sizeof(float));
  L.check(k::window_copy(x, keep.as<float>(), s.x[0] * s.x[1], s.x[2], s.x[3], s.xp[2], s.xp[3], -s.ps.top,
                         -s.ps.left, 0.f, L.stream()));
  return keep.as<float>();
}

// ---- algorithm cache ----

struct Algo {
  int algo = 0;
  size_t workspace = 0;
  cudnnMathType_t math = CUDNN_FMA_MATH;
};
std::mutex g_algo_mu;
std::map<std::string, Algo>& algo_cache() {
  static auto* m = new std::map<std::string, Algo>;
  return *m;
}
bool cached_algo(const std::string& key, Algo* a) {
  std::lock_guard<std::mutex> lock(g_algo_mu);
  auto it = algo_cache().find(key);
  if (it == algo_cache().end()) return false;
  *a = it->second;
  return true;
}
void store_algo(const std::string& key, const Algo& a) {
  std::lock_guard<std::mutex> lock(g_algo_mu);
  algo_cache()[key] = a;
}

// Workspace offered to the algorithm search: the largest any algorithm asks
// for, up to 512 MiB and half the free device memory.
size_t workspace_limit() {
  size_t free_b = 0, total = 0;
  if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return std::min<size_t>(size_t{512} << 20, free_b / 2);
}

// Picks the fastest successful result of a cudnnFind*AlgorithmEx call.
template <class Perf>
Algo pick(const Perf* perf, int n, size_t offered, const char* what) {
  for (int i = 0; i < n; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= offered)
      return Algo{static_cast<int>(perf[i].algo), perf[i].memory, perf[i].mathType};
  throw Error(std::string("[cuda] ") + what + ": cuDNN found no usable algorithm");
}

Algo fwd_algo(Launch& L, const ConvSetup& s, const TensorDesc& xd, const float* x, const FilterDesc& wd,
              const float* w, const ConvDesc& cd, const TensorDesc& yd, float* y) {
  const std::string key = s.key("fwd");
  Algo a;
  if (cached_algo(key, &a)) return a;
  cudnnHandle_t h = L.c.dnn();
  const size_t limit = workspace_limit();
  size_t offered = 0;
  for (int i = 0; i < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++i) {
    size_t sz = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(h, xd.d, wd.d, cd.d, yd.d, static_cast<cudnnConvolutionFwdAlgo_t>(i),
                                                &sz) == CUDNN_STATUS_SUCCESS &&
        sz <= limit)
      offered = std::max(offered, sz);
  }
  DevBuf ws = L.scratch(offered);
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int n = 0;
  L.check(cudnnFindConvolutionForwardAlgorithmEx(h, xd.d, x, wd.d, w, cd.d, yd.d, y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                 &n, perf, ws.get(), offered));
  a = pick(perf, n, offered, "conv2d");
  store_algo(key, a);
  return a;
}

Algo bwd_data_algo(Launch& L, const ConvSetup& s, const FilterDesc& wd, const float* w, const TensorDesc& dyd,
                   const float* dy, const ConvDesc& cd, const TensorDesc& dxd, float* dx) {
  const std::string key = s.key("bwd_data");
  Algo a;
  if (cached_algo(key, &a)) return a;
  cudnnHandle_t h = L.c.dnn();
  const size_t limit = workspace_limit();
  size_t offered = 0;
  for (int i = 0; i < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT; ++i) {
    size_t sz = 0;
    if (cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd.d, dyd.d, cd.d, dxd.d,
                                                     static_cast<cudnnConvolutionBwdDataAlgo_t>(i),
                                                     &sz) == CUDNN_STATUS_SUCCESS &&
        sz <= limit)
      offered = std::max(offered, sz);
  }
  DevBuf ws = L.scratch(offered);
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int n = 0;
  L.check(cudnnFindConvolutionBackwardDataAlgorithmEx(h, wd.d, w, dyd.d, dy, cd.d, dxd.d, dx,
                                                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf, ws.get(),
                                                      offered));
  a = pick(perf, n, offered, "conv2d_backward_data");
  store_algo(key, a);
  return a;
}

Algo bwd_filter_algo(Launch& L, const ConvSetup& s, const TensorDesc& xd, const float* x, const TensorDesc& dyd,
                     const float* dy, const ConvDesc& cd, const FilterDesc& dwd, float* dw) {
  const std::string key = s.key("bwd_filter");
  Algo a;
  if (cached_algo(key, &a)) return a;
  cudnnHandle_t h = L.c.dnn();
  const size_t limit = workspace_limit();
  size_t offered = 0;
  for (int i = 0; i < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT; ++i) {
    size_t sz = 0;
    if (cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xd.d, dyd.d, cd.d, dwd.d,
                                                       static_cast<cudnnConvolutionBwdFilterAlgo_t>(i),
                                                       &sz) == CUDNN_STATUS_SUCCESS &&
        sz <= limit)
      offered = std::max(offered, sz);
  }
  DevBuf ws = L.scratch(offered);
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int n = 0;
  L.check(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, xd.d, x, dyd.d, dy, cd.d, dwd.d, dw,
                                                        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf, ws.get(),
                                                        offered));
  a = pick(perf, n, offered, "conv2d_backward_weights");
  store_algo(key, a);
  return a;
}

void expect_out_dims(Launch& L, const ConvDesc& cd, const TensorDesc& xd, const FilterDesc& wd, const Shape& y) {
  int n = 0, c = 0, h = 0, w = 0;
  L.check(cudnnGetConvolution2dForwardOutputDim(cd.d, xd.d, wd.d, &n, &c, &h, &w));
  if (Shape{n, c, h, w} != y)
    throw Error(std::string("[cuda] ") + L.p.name() + ": cuDNN's output " + shape_str({n, c, h, w}) +
                " differs from the op's " + shape_str(y));
}

// ---- convolution ops ----

// Inputs x, w [, bias]; output y.
void run_conv2d(Launch& L) {
  const ConvSetup s = conv_setup(L.p, L.in[0].shape(), L.in[1].shape(), L.out[0].shape());
  const bool bias = L.p.attr_int("bias") != 0, relu = L.p.attr_int("relu") != 0;
  DevBuf xpad;
  const float* x = padded_input(L, s, L.i<float>(0), xpad);
  TensorDesc xd(s.xp), yd(s.y);
  FilterDesc wd(s.w);
  ConvDesc cd(s.g, s.ps);
  expect_out_dims(L, cd, xd, wd, s.y);
  const Algo a = fwd_algo(L, s, xd, x, wd, L.i<float>(1), cd, yd, L.o<float>(0));
  cd.math(a.math);
  DevBuf ws = L.scratch(a.workspace);
  const float one = 1.f, zero = 0.f;
  L.check(cudnnConvolutionForward(L.c.dnn(), &one, xd.d, x, wd.d, L.i<float>(1), cd.d,
                                  static_cast<cudnnConvolutionFwdAlgo_t>(a.algo), ws.get(), a.workspace, &zero, yd.d,
                                  L.o<float>(0)));
  const int64_t N = s.y[0], K = s.y[1], HW = s.y[2] * s.y[3];
  if (bias) L.check(k::bias_add(k::DT::F32, L.o(0), L.i(2), L.o(0), N, K, HW, relu, L.stream()));
  else if (relu) L.check(k::unary(k::Un::Relu, k::DT::F32, L.o(0), L.o(0), N * K * HW, 0.0, L.stream()));
}

// Inputs w, dy; output dx (shape attribute x_shape).
void run_conv2d_backward_data(Launch& L) {
  const ConvSetup s = conv_setup(L.p, L.out[0].shape(), L.in[0].shape(), L.in[1].shape());
  DevBuf dxpad;
  float* dx = L.o<float>(0);
  if (s.ps.explicit_pad()) {
    dxpad = L.scratch(static_cast<size_t>(numel(s.xp)) * sizeof(float));
    dx = dxpad.as<float>();
  }
  TensorDesc dxd(s.xp), dyd(s.y);
  FilterDesc wd(s.w);
  ConvDesc cd(s.g, s.ps);
  expect_out_dims(L, cd, dxd, wd, s.y);
  const Algo a = bwd_data_algo(L, s, wd, L.i<float>(0), dyd, L.i<float>(1), cd, dxd, dx);
  cd.math(a.math);
  DevBuf ws = L.scratch(a.workspace);
  const float one = 1.f, zero = 0.f;
  L.check(cudnnConvolutionBackwardData(L.c.dnn(), &one, wd.d, L.i<float>(0), dyd.d, L.i<float>(1), cd.d,
                                       static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo), ws.get(), a.workspace,
                                       &zero, dxd.d, dx));
  if (s.ps.explicit_pad())  // crop the gradient of the padded input back to x
    L.check(k::window_copy(dx, L.o<float>(0), s.x[0] * s.x[1], s.xp[2], s.xp[3], s.x[2], s.x[3], s.ps.top, s.ps.left,
                           0.f, L.stream()));
}

// Inputs x, dy; outputs dw [, dbias].
void run_conv2d_backward_weights(Launch& L) {
  const ConvSetup s = conv_setup(L.p, L.in[0].shape(), L.out[0].shape(), L.in[1].shape());
  DevBuf xpad;
  const float* x = padded_input(L, s, L.i<float>(0), xpad);
  TensorDesc xd(s.xp), dyd(s.y);
  FilterDesc wd(s.w);
  ConvDesc cd(s.g, s.ps);
  expect_out_dims(L, cd, xd, wd, s.y);
  const Algo a = bwd_filter_algo(L, s, xd, x, dyd, L.i<float>(1), cd, wd, L.o<float>(0));
  cd.math(a.math);
  DevBuf ws = L.scratch(a.workspace);
  const float one = 1.f, zero = 0.f;
  L.check(cudnnConvolutionBackwardFilter(L.c.dnn(), &one, xd.d, x, dyd.d, L.i<float>(1), cd.d,
                                         static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo), ws.get(), a.workspace,
                                         &zero, wd.d, L.o<float>(0)));
  if (L.out.size() > 1 && L.dout[1].get()) {  // dbias: dy summed over N, H, W
    const k::RView v = reduce_view(s.y, {true, false, true, true});
    L.check(k::reduce(k::Red::Sum, k::DT::F32, L.i(1), L.o(1), v, s.y[1], L.stream()));
  }
}

// ---- pooling ----

struct PoolAttrs {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, pt = 0, pl = 0, pb = 0, pr = 0;
};
PoolAttrs pool_attrs(const Primitive& p) {
  PoolAttrs a;
  const auto ks = p.attr_ints("kernel_shape"), st = p.attr_ints("strides"), pads = p.attr_ints("pads");
  if (ks.size() == 2) a.kh = ks[0], a.kw = ks[1];
  if (st.size() == 2) a.sh = st[0], a.sw = st[1];
  if (pads.size() == 4) a.pt = pads[0], a.pl = pads[1], a.pb = pads[2], a.pr = pads[3];
  return a;
}

struct PoolDesc {
  cudnnPoolingDescriptor_t d = nullptr;
  PoolDesc(cudnnPoolingMode_t mode, const PoolAttrs& a, int64_t ph, int64_t pw) {
    check(cudnnCreatePoolingDescriptor(&d), "cudnnCreatePoolingDescriptor");
    check(cudnnSetPooling2dDescriptor(d, mode, CUDNN_PROPAGATE_NAN, ci(a.kh), ci(a.kw), ci(ph), ci(pw), ci(a.sh),
                                      ci(a.sw)),
          "cudnnSetPooling2dDescriptor");
  }
  ~PoolDesc() { cudnnDestroyPoolingDescriptor(d); }
  PoolDesc(const PoolDesc&) = delete;
  PoolDesc& operator=(const PoolDesc&) = delete;
};

// max_pool2d (predict jobs: no workspace; output 1 is an empty placeholder)
// and avg_pool2d (padding excluded from the count). Max pooling pads by
// hand with -inf, so padding never wins whatever cuDNN does with its own;
// average pooling needs symmetric pads (supports()).
void run_pool(Launch& L, bool max) {
  const PoolAttrs a = pool_attrs(L.p);
  const Shape &xs = L.in[0].shape(), &ys = L.out[0].shape();
  const float* x = L.i<float>(0);
  Shape xp = xs;
  int64_t ph = a.pt, pw = a.pl;
  DevBuf xpad;
  if (max && (a.pt || a.pl || a.pb || a.pr)) {
    xp = {xs[0], xs[1], xs[2] + a.pt + a.pb, xs[3] + a.pl + a.pr};
    xpad = L.scratch(static_cast<size_t>(numel(xp)) * sizeof(float));
    L.check(k::window_copy(x, xpad.as<float>(), xs[0] * xs[1], xs[2], xs[3], xp[2], xp[3], -a.pt, -a.pl,
                           -std::numeric_limits<float>::infinity(), L.stream()));
    x = xpad.as<float>();
    ph = pw = 0;
  }
  TensorDesc xd(xp), yd(ys);
  PoolDesc pd(max ? CUDNN_POOLING_MAX : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, a, ph, pw);
  int n = 0, c = 0, h = 0, w = 0;
  L.check(cudnnGetPooling2dForwardOutputDim(pd.d, xd.d, &n, &c, &h, &w));
  if (Shape{n, c, h, w} != ys)
    throw Error(std::string("[cuda] ") + L.p.name() + ": cuDNN's output " + shape_str({n, c, h, w}) +
                " differs from the op's " + shape_str(ys));
  const float one = 1.f, zero = 0.f;
  L.check(cudnnPoolingForward(L.c.dnn(), pd.d, &one, xd.d, x, &zero, yd.d, L.o<float>(0)));
}

k::PoolGeom pool_geom(const PoolAttrs& a, const Shape& x, const Shape& y) {
  return k::PoolGeom{x[0] * x[1], x[2], x[3], y[2], y[3], a.kh, a.kw, a.sh, a.sw, a.pt, a.pl};
}

bool float32_nchw(const std::vector<Tensor>& in, size_t i) {
  return in[i].dtype() == DType::Float32 && in[i].ndim() == 4;
}

}  // namespace

void add_dnn_ops(OpTable& t) {
  const auto all_f32 = [](const Primitive&, const std::vector<Tensor>& in) {
    for (const Tensor& x : in)
      if (x.defined() && x.dtype() != DType::Float32) return false;
    return true;
  };
  {
    OpDef d;
    d.accepts = all_f32;
    d.run = run_conv2d;
    t[OpKind::Conv2d] = d;
  }
  {
    OpDef d;
    d.accepts = all_f32;
    d.run = run_conv2d_backward_data;
    t[OpKind::Conv2dBackwardData] = d;
  }
  {
    OpDef d;
    d.accepts = all_f32;
    d.run = run_conv2d_backward_weights;
    t[OpKind::Conv2dBackwardWeights] = d;
  }
  {
    OpDef d;
    d.supports = [](const Primitive& p) { return p.attr_int("workspace") == 0; };
    d.accepts = [](const Primitive&, const std::vector<Tensor>& in) { return float32_nchw(in, 0); };
    d.run = [](Launch& L) { run_pool(L, true); };
    t[OpKind::MaxPool2d] = d;
  }
  {
    OpDef d;
    d.supports = [](const Primitive& p) {
      const PoolAttrs a = pool_attrs(p);
      return a.pt == a.pb && a.pl == a.pr;
    };
    d.accepts = [](const Primitive&, const std::vector<Tensor>& in) { return float32_nchw(in, 0); };
    d.run = [](Launch& L) { run_pool(L, false); };
    t[OpKind::AvgPool2d] = d;
  }
  {  // input dy; output dx
    OpDef d;
    d.accepts = [](const Primitive&, const std::vector<Tensor>& in) { return float32_nchw(in, 0); };
    d.run = [](Launch& L) {
      const k::PoolGeom g = pool_geom(pool_attrs(L.p), L.out[0].shape(), L.in[0].shape());
      L.check(k::avg_pool_grad(g, L.i<float>(0), L.o<float>(0), L.stream()));
    };
    t[OpKind::AvgPool2dGrad] = d;
  }
  {  // inputs dy, workspace (empty), x; output dx. With a workspace: CPU.
    OpDef d;
    d.supports = [](const Primitive& p) { return p.attr_int("from_input") != 0; };
    d.accepts = [](const Primitive&, const std::vector<Tensor>& in) {
      return in.size() == 3 && float32_nchw(in, 0) && float32_nchw(in, 2);
    };
    d.skip_inputs = 0b010;
    d.run = [](Launch& L) {
      const k::PoolGeom g = pool_geom(pool_attrs(L.p), L.out[0].shape(), L.in[0].shape());
      L.check(k::max_pool_grad_from_x(g, L.i<float>(0), L.i<float>(2), L.o<float>(0), L.stream()));
    };
    t[OpKind::MaxPool2dGrad] = d;
  }
}

}  // namespace jobflow::cuda
