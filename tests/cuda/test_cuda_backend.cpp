// The CUDA backend against the CPU backend: every op it implements, on
// random inputs, output by output; then whole jobs placed on "gpu" against
// the same jobs on the CPU.
//
// Without a usable device (no driver, no GPU, or one older than sm_90) the
// program prints "skipped: no CUDA device" and exits 77, Meson's skip code.
//
// How an op is checked: a small graph is built with the ops' own builder
// functions (and their vjp() for the gradient ops), then evaluated node by
// node. Each node runs eval_cpu() on the reference values of its inputs;
// every node the CUDA backend supports also runs on the CUDA backend, on
// copies of the same inputs, and each output (and each input, for ops that
// update inputs in place) must match the CPU's. Outputs are pre-filled with
// NaN / 0x5A bytes so an output the device never writes cannot pass. The
// backend's counters must show that the op really ran on the device (not
// through eval()'s own CPU fallback).
//
// Tolerances (|gpu - cpu| <= atol + rtol * |cpu|):
//   exact          integers, copies, comparisons, max, relu, casts, fills,
//                  argmax, pooling max and its gradient: bitwise equal;
//   elementwise    float32 rtol 1e-6 atol 1e-7, float64 1e-14 / 1e-15
//                  (CUDA's expf/logf/tanhf are within 2 ulp of glibc's, and
//                  nvcc contracts a * b + c into one fma);
//   reductions     float32 rtol 1e-5 atol 1e-6, float64 1e-12 / 1e-13
//                  (another summation order: a tree instead of a loop);
//   GEMM, conv     float32 rtol 1e-4 atol 1e-4, float64 1e-10 / 1e-10
//                  (cuBLAS / cuDNN block the K sum differently; FP32 math,
//                  no TF32 unless JOBFLOW_CUDA_TF32=1, which this test does
//                  not set).
#include <gtest/gtest.h>

#include <jobflow/backend.h>
#include "compiler.h"
#include <jobflow/jobflow.h>
#include <jobflow/session.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "jobflow_cuda.h"
#include "ops_internal.h"

namespace flow = jobflow;
using flow::Blob;
using flow::DType;
using flow::Shape;
using flow::Tensor;

namespace {

const flow::Backend& gpu() { return *jobflow_cuda_backend(); }

struct Tol {
  double rtol = 0, atol = 0;
};
constexpr Tol kExact{0, 0};

Tol elementwise(DType t) { return t == DType::Float64 ? Tol{1e-14, 1e-15} : Tol{1e-6, 1e-7}; }
Tol reduction(DType t) { return t == DType::Float64 ? Tol{1e-12, 1e-13} : Tol{1e-5, 1e-6}; }
Tol gemm(DType t) { return t == DType::Float64 ? Tol{1e-10, 1e-10} : Tol{1e-4, 1e-4}; }

// The tolerance of an op's float outputs (integer outputs are always exact).
Tol tol_for(const std::string& op, DType t) {
  static const std::set<std::string> exact = {"neg", "relu", "relu_grad", "equal_mask", "cast", "zeros_like",
                                              "ones_like", "broadcast_to", "transpose", "argmax", "reduce_max",
                                              "max_pool2d", "max_pool2d_grad", "add", "sub", "mul", "div", "square",
                                              "sqrt", "rsqrt", "add_scalar", "mul_scalar"};
  static const std::set<std::string> reductions = {"reduce_sum", "reduce_mean", "sum_to", "bias_grad", "softmax",
                                                   "log_softmax", "softmax_grad", "log_softmax_grad",
                                                   "sparse_softmax_cross_entropy", "avg_pool2d", "avg_pool2d_grad"};
  static const std::set<std::string> gemms = {"matmul", "conv2d", "conv2d_backward_data", "conv2d_backward_weights"};
  if (!flow::is_floating(t) || exact.count(op)) return kExact;
  if (reductions.count(op)) return reduction(t);
  if (gemms.count(op)) return gemm(t);
  return elementwise(t);
}

// "" when equal within tol, else a description of the worst element.
std::string compare(const Tensor& got, const Tensor& want, Tol tol) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) return "shape/dtype differ";
  const int64_t n = want.numel();
  if (!flow::is_floating(want.dtype())) {
    if (std::memcmp(got.raw(), want.raw(), want.nbytes()) == 0) return "";
    for (int64_t i = 0; i < n; ++i)
      if (got.at(i) != want.at(i))
        return "element " + std::to_string(i) + ": " + std::to_string(got.at(i)) + " vs " + std::to_string(want.at(i));
    return "bytes differ";
  }
  int64_t worst = -1;
  double worst_excess = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double g = got.at(i), w = want.at(i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    const double err = std::fabs(g - w), allowed = tol.atol + tol.rtol * std::fabs(w);
    if (!(err <= allowed) && (worst < 0 || !(err - allowed <= worst_excess))) {
      worst = i;
      worst_excess = std::isnan(err) ? INFINITY : err - allowed;
    }
  }
  if (worst < 0) return "";
  char buf[256];
  std::snprintf(buf, sizeof buf, "element %lld: gpu %.9g vs cpu %.9g (rtol %g, atol %g)",
                static_cast<long long>(worst), got.at(worst), want.at(worst), tol.rtol, tol.atol);
  return buf;
}

// A graph leaf holding a test value.
class Input final : public flow::Primitive {
 public:
  explicit Input(flow::TensorSpec s) : s_(std::move(s)) {}
  // A leaf like a placeholder: the harness gives it a value.
  flow::OpKind kind() const override { return flow::OpKind::Placeholder; }
  std::vector<flow::TensorSpec> infer(const std::vector<flow::TensorSpec>&) const override { return {s_}; }
  void eval_cpu(const std::vector<Tensor>&, const std::vector<Tensor>&, flow::ExecContext&) const override {}

 private:
  flow::TensorSpec s_;
};

Tensor filled_with_garbage(const flow::TensorSpec& s) {
  Tensor t(s.shape, s.dtype);
  if (s.dtype == DType::Float32)
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = NAN;
  else if (s.dtype == DType::Float64)
    for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = NAN;
  else
    std::memset(t.raw(), 0x5A, t.nbytes());
  return t;
}

// Builds a graph in its scope, then checks it node by node (see the top).
class Harness {
 public:
  explicit Harness(uint64_t seed = 1) : scope_(&g_), rng_(seed) {
    ctx_.lr = 0.05;
    ctx_.training = true;
  }

  Blob input(const Tensor& v) {
    Blob b = g_.add(std::make_shared<Input>(flow::TensorSpec{v.shape(), v.dtype()}), {})[0];
    values_[b.id()] = v;
    return b;
  }
  Tensor random(const Shape& s, DType t, double lo = -1, double hi = 1) {
    Tensor v(s, t);
    std::uniform_real_distribution<double> u(lo, hi);
    for (int64_t i = 0; i < v.numel(); ++i) {
      const double x = u(rng_);
      switch (t) {
        case DType::Float32: v.data<float>()[i] = static_cast<float>(x); break;
        case DType::Float64: v.data<double>()[i] = x; break;
        case DType::Int32: v.data<int32_t>()[i] = static_cast<int32_t>(std::lround(x)); break;
        case DType::Int64: v.data<int64_t>()[i] = std::llround(x); break;
        case DType::Int8: v.data<int8_t>()[i] = static_cast<int8_t>(std::lround(x)); break;
        case DType::UInt8: v.data<uint8_t>()[i] = static_cast<uint8_t>(std::lround(x)); break;
        case DType::Bool: v.data<uint8_t>()[i] = x > 0; break;
        default: throw flow::Error(std::string("random: no ") + dtype_name(t) + " inputs on the CUDA backend");
      }
    }
    return v;
  }
  Blob rand(const Shape& s, DType t = DType::Float32, double lo = -1, double hi = 1) { return input(random(s, t, lo, hi)); }

  // Gradient nodes of the node producing `y`: calls its vjp() with random
  // cotangents for every float output.
  std::vector<Blob> vjp(Blob y, const std::vector<int>& argnums) {
    const flow::Node node = g_.nodes.at(g_.blobs.at(y.id()).producer);
    std::vector<Blob> in, out, cot;
    for (int b : node.inputs) in.push_back(g_.blob(b));
    for (int b : node.outputs) {
      out.push_back(g_.blob(b));
      const flow::TensorSpec s = g_.blobs.at(b).spec;
      cot.push_back(flow::is_floating(s.dtype) && flow::numel(s.shape) > 0 ? rand(s.shape, s.dtype) : Blob());
    }
    return node.op->vjp(in, out, cot, argnums);
  }
  // Adds a node running `op` (e.g. a fused variant from with_bias()).
  std::vector<Blob> add(std::shared_ptr<flow::Primitive> op, const std::vector<Blob>& inputs) {
    return g_.add(std::move(op), inputs);
  }
  const flow::Primitive& op_of(Blob b) const { return *g_.nodes.at(g_.blobs.at(b.id()).producer).op; }

  // Evaluates the graph; every op named in `required` must have been checked
  // on the device at least once.
  void run(const std::set<std::string>& required) {
    std::set<std::string> checked;
    for (const flow::Node& node : g_.nodes) {
      if (dynamic_cast<const Input*>(node.op.get())) continue;
      const std::string name = node.op->name();
      std::vector<Tensor> cpu_in, gpu_in, cpu_out, gpu_out;
      for (int b : node.inputs) {
        cpu_in.push_back(values_.at(b).clone());
        gpu_in.push_back(values_.at(b).clone());
      }
      for (int b : node.outputs) {
        cpu_out.push_back(Tensor(g_.blobs[b].spec.shape, g_.blobs[b].spec.dtype));
        gpu_out.push_back(filled_with_garbage(g_.blobs[b].spec));
      }
      flow::ExecContext c1 = ctx_;
      node.op->eval_cpu(cpu_in, cpu_out, c1);
      for (size_t k = 0; k < node.outputs.size(); ++k) values_[node.outputs[k]] = cpu_out[k];
      if (!gpu().supports(*node.op)) {
        EXPECT_FALSE(required.count(name)) << name << " is required but the CUDA backend does not support it";
        continue;
      }
      const auto before = flow::cuda::stats();
      flow::ExecContext c2 = ctx_;
      gpu().eval(*node.op, gpu_in, gpu_out, c2);
      const auto after = flow::cuda::stats();
      EXPECT_EQ(after.device_evals, before.device_evals + 1) << name << " (" << node.op->attrs() << ") did not run on the device";
      for (size_t k = 0; k < cpu_out.size(); ++k) {
        const std::string d = compare(gpu_out[k], cpu_out[k], tol_for(name, cpu_out[k].dtype()));
        EXPECT_EQ(d, "") << name << " (" << node.op->attrs() << ") output " << k << " "
                         << flow::spec_str(g_.blobs[node.outputs[k]].spec);
      }
      for (size_t k = 0; k < cpu_in.size(); ++k) {  // inputs updated in place (optimizer updates)
        const std::string d = compare(gpu_in[k], cpu_in[k], tol_for(name, cpu_in[k].dtype()));
        EXPECT_EQ(d, "") << name << " input " << k << " after the op";
      }
      checked.insert(name);
    }
    for (const std::string& r : required) EXPECT_TRUE(checked.count(r)) << r << " was never checked";
  }

 private:
  flow::Graph g_;
  flow::detail::GraphScope scope_;
  std::mt19937_64 rng_;
  std::map<int, Tensor> values_;
  flow::ExecContext ctx_;
};

const std::vector<DType> kAllTypes = {DType::Float32, DType::Float64, DType::Int32,
                                      DType::Int64,   DType::Int8,    DType::UInt8};
const std::vector<DType> kFloatTypes = {DType::Float32, DType::Float64};

// ---------------------------------------------------------------------------

TEST(CudaOps, BinaryWithBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 4, 5}, {3, 4, 5}}, {{3, 4, 5}, {5}}, {{3, 1, 5}, {1, 4, 1}}, {{}, {3, 4}},
      {{6, 1}, {}},           {{2, 3, 1, 7}, {3, 5, 1}}, {{1000}, {1000}}};
  for (DType t : kAllTypes) {
    Harness h(static_cast<uint64_t>(t) + 1);
    const bool fl = flow::is_floating(t);
    for (const auto& [sa, sb] : shapes) {
      Blob a = h.rand(sa, t, fl ? -2 : -5, fl ? 2 : 5);
      Blob b = h.rand(sb, t, fl ? -2 : -5, fl ? 2 : 5);
      flow::add(a, b);
      flow::sub(a, b);
      flow::mul(a, b);
      // Floats: divisors away from 0; integers: zeros included (x / 0 = 0).
      flow::div(a, fl ? h.rand(sb, t, 0.5, 2) : b);
      flow::internal::equal_mask(a, b);
    }
    h.run({"add", "sub", "mul", "div", "equal_mask"});
  }
}

TEST(CudaOps, Unary) {
  for (DType t : kFloatTypes) {
    Harness h(11);
    Blob x = h.rand({7, 33}, t, -4, 4);
    Blob pos = h.rand({7, 33}, t, 0.01, 5);
    flow::neg(x);
    flow::exp(x);
    flow::log(pos);
    flow::sqrt(pos);
    flow::rsqrt(pos);
    flow::square(x);
    flow::math::sigmoid(x);
    flow::math::tanh(x);
    flow::nn::relu(x);
    flow::add_scalar(x, 0.3);
    flow::mul_scalar(x, -1.7);
    h.run({"neg", "exp", "log", "sqrt", "rsqrt", "square", "sigmoid", "tanh", "relu", "add_scalar", "mul_scalar"});
  }
  for (DType t : {DType::Int32, DType::Int64, DType::Int8, DType::UInt8}) {
    Harness h(12);
    Blob x = h.rand({5, 9}, t, t == DType::UInt8 ? 0 : -9, 9);
    flow::neg(x);
    flow::square(x);
    flow::nn::relu(x);
    flow::add_scalar(x, 3.0);
    flow::mul_scalar(x, 2.0);
    h.run({"neg", "square", "relu", "add_scalar", "mul_scalar"});
  }
}

TEST(CudaOps, ActivationGradients) {
  for (DType t : kFloatTypes) {
    Harness h(13);
    Blob x = h.rand({6, 50}, t, -3, 3);
    h.vjp(flow::math::sigmoid(x), {0});
    h.vjp(flow::math::tanh(x), {0});
    h.vjp(flow::nn::relu(x), {0});
    h.run({"sigmoid_grad", "tanh_grad", "relu_grad"});
  }
}

TEST(CudaOps, AddNCastFill) {
  Harness h(14);
  std::vector<Blob> three, many;
  for (int i = 0; i < 3; ++i) three.push_back(h.rand({4, 5}));
  for (int i = 0; i < 40; ++i) many.push_back(h.rand({300}, DType::Float64));  // more than one 32-input chunk
  flow::internal::add_n(three);
  flow::internal::add_n(many);
  flow::internal::add_n({h.rand({10}, DType::Int8, -100, 100), h.rand({10}, DType::Int8, -100, 100)});  // wraps
  Blob f = h.rand({3, 7}, DType::Float32, -100, 100);
  for (DType to : kAllTypes)
    if (to != DType::UInt8) flow::cast(f, to);
  flow::cast(h.rand({3, 7}, DType::Float32, 0, 255), DType::UInt8);
  flow::cast(h.rand({3, 7}, DType::Int64, -1000, 1000), DType::Int8);  // wraps
  flow::cast(h.rand({3, 7}, DType::Int32, -1000, 1000), DType::Float64);
  flow::zeros_like(f);
  flow::ones_like(h.rand({2, 2}, DType::Int32));
  h.run({"add_n", "cast", "zeros_like", "ones_like"});
}

TEST(CudaOps, BiasAddAndBiasGrad) {
  for (DType t : kFloatTypes) {
    Harness h(15);
    Blob x4 = h.rand({2, 3, 4, 5}, t), b3 = h.rand({3}, t);
    Blob x2 = h.rand({8, 6}, t), b6 = h.rand({6}, t);
    Blob y4 = flow::nn::bias_add(x4, b3, 1);
    Blob y2 = flow::nn::bias_add(x2, b6, -1);
    h.add(h.op_of(y4).with_relu(), {x4, b3});  // fused relu
    flow::internal::bias_grad(x4, 1);
    flow::internal::bias_grad(x2, -1);
    flow::internal::bias_grad(h.rand({100, 3, 40}, t), 1);
    (void)y2;
    h.run({"bias_add", "bias_grad"});
  }
}

TEST(CudaOps, Reductions) {
  for (DType t : {DType::Float32, DType::Float64, DType::Int32, DType::Int8}) {
    Harness h(16);
    const bool fl = flow::is_floating(t);
    Blob x = h.rand({4, 5, 6}, t, fl ? -3 : -9, fl ? 3 : 9);
    for (const std::vector<int>& axes : std::vector<std::vector<int>>{{}, {0}, {1}, {2}, {0, 2}, {-1}, {0, 1, 2}}) {
      for (bool keep : {false, true}) {
        flow::reduce_sum(x, axes, keep);
        flow::reduce_max(x, axes, keep);
        if (fl) flow::reduce_mean(x, axes, keep);
      }
    }
    flow::sum_to(x, {5, 1});
    flow::sum_to(x, {6});
    flow::broadcast_to(h.rand({5, 1}, t), {4, 5, 6});
    flow::argmax(x, -1);
    flow::argmax(x, 1);
    h.run({"reduce_sum", "reduce_max", "sum_to", "broadcast_to", "argmax"});
  }
  Harness big(17);  // the block-per-output paths: long runs, few outputs
  Blob y = big.rand({1 << 20});
  flow::reduce_sum(y);
  flow::reduce_mean(y);
  flow::reduce_max(y);
  Blob cols = big.rand({4096, 3});
  flow::reduce_sum(cols, {0});
  flow::reduce_max(cols, {0});
  flow::reduce_sum(big.rand({3, 0, 2}), {1});  // empty sums are 0
  big.run({"reduce_sum", "reduce_mean", "reduce_max"});
}

TEST(CudaOps, ReductionGradients) {
  Harness h(18);
  Blob x = h.rand({3, 4, 5});
  h.vjp(flow::reduce_sum(x, {1}), {0});
  h.vjp(flow::reduce_mean(x, {0, 2}, true), {0});
  h.vjp(flow::reduce_max(x, {2}), {0});
  h.run({"broadcast_to"});
}

TEST(CudaOps, Transpose) {
  for (DType t : {DType::Float32, DType::Float64, DType::Int8}) {
    Harness h(19);
    Blob x = h.rand({2, 3, 4, 5}, t, -50, 50);
    flow::transpose(x, {0, 3, 1, 2});
    flow::transpose(x, {3, 2, 1, 0});
    flow::transpose(h.rand({7, 9}, t, -50, 50), {1, 0});
    h.run({"transpose"});
  }
}

TEST(CudaOps, SoftmaxAndGradients) {
  for (DType t : kFloatTypes) {
    Harness h(20);
    Blob rows = h.rand({16, 10}, t, -5, 5);
    Blob wide = h.rand({3, 1000}, t, -5, 5);
    Blob mid = h.rand({4, 5, 6}, t, -5, 5);
    for (Blob x : {rows, wide}) {
      h.vjp(flow::nn::softmax(x, -1), {0});
      h.vjp(flow::nn::log_softmax(x, -1), {0});
    }
    h.vjp(flow::nn::softmax(mid, 1), {0});  // strided lanes
    h.vjp(flow::nn::log_softmax(mid, 0), {0});
    h.run({"softmax", "log_softmax", "softmax_grad", "log_softmax_grad"});
  }
}

TEST(CudaOps, SparseSoftmaxCrossEntropy) {
  for (DType t : kFloatTypes)
    for (DType lt : {DType::Int32, DType::Int64}) {
      Harness h(21);
      Blob logits = h.rand({32, 10}, t, -4, 4);
      Blob labels = h.rand({32}, lt, 0, 9);
      Blob loss = flow::nn::sparse_softmax_cross_entropy_with_logits(labels, logits);
      h.vjp(loss, {1});
      Blob wide = h.rand({5, 700}, t, -4, 4);
      h.vjp(flow::nn::sparse_softmax_cross_entropy_with_logits(h.rand({5}, lt, 0, 699), wide), {1});
      h.run({"sparse_softmax_cross_entropy", "sparse_softmax_cross_entropy_grad"});
    }
}

TEST(CudaOps, CrossEntropyRejectsBadLabels) {
  Harness h(22);
  Blob logits = h.rand({2, 3});
  Blob labels = h.input(Tensor::from<int32_t>({2}, {1, 3}));
  Blob loss = flow::nn::sparse_softmax_cross_entropy_with_logits(labels, logits);
  std::vector<Tensor> in{Tensor::from<int32_t>({2}, {1, 3}), h.random({2, 3}, DType::Float32)};
  std::vector<Tensor> out{Tensor({2}, DType::Float32), Tensor({2, 3}, DType::Float32)};
  flow::ExecContext ctx;
  try {
    gpu().eval(h.op_of(loss), in, out, ctx);
    FAIL() << "no error for label 3 of 3 classes";
  } catch (const flow::Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

TEST(CudaOps, MatMul) {
  for (DType t : kFloatTypes) {
    Harness h(23);
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Blob a = h.rand(ta ? Shape{37, 19} : Shape{19, 37}, t);
        Blob b = h.rand(tb ? Shape{23, 37} : Shape{37, 23}, t);
        flow::matmul(a, b, ta, tb);
        Blob ba = h.rand(ta ? Shape{2, 3, 8, 5} : Shape{2, 3, 5, 8}, t);
        Blob bb = h.rand(tb ? Shape{2, 3, 6, 8} : Shape{2, 3, 8, 6}, t);
        flow::matmul(ba, bb, ta, tb);
      }
    Blob a = h.rand({64, 300}, t), w = h.rand({10, 300}, t), bias = h.rand({10}, t);
    Blob y = flow::matmul(a, w, false, true);
    auto with_bias = h.op_of(y).with_bias();
    Blob yb = h.add(with_bias, {a, w, bias})[0];
    h.add(with_bias->with_relu(), {a, w, bias});
    h.add(h.op_of(y).with_relu(), {a, w});
    (void)yb;
    h.run({"matmul"});
  }
}

TEST(CudaOps, Conv2dAndGradients) {
  struct G {
    Shape x, w;
    int64_t stride, dil, groups;
    flow::nn::Padding pad;
  };
  const std::vector<G> geoms = {
      {{2, 3, 9, 9}, {4, 3, 3, 3}, 1, 1, 1, "VALID"},
      {{2, 3, 9, 9}, {4, 3, 3, 3}, 1, 1, 1, "SAME"},
      {{2, 3, 8, 8}, {5, 3, 2, 2}, 1, 1, 1, "SAME"},   // odd total padding: asymmetric
      {{1, 2, 10, 7}, {4, 2, 3, 3}, 2, 1, 1, "SAME"},  // stride 2, asymmetric
      {{2, 4, 11, 11}, {6, 2, 3, 3}, 1, 2, 2, "SAME"}, // dilation 2, 2 groups
      {{1, 1, 6, 6}, {2, 1, 3, 3}, 1, 1, 1, flow::nn::Padding(std::vector<int64_t>{0, 2, 1, 0})},
  };
  for (const G& g : geoms) {
    Harness h(24);
    Blob x = h.rand(g.x), w = h.rand(g.w);
    Blob y = flow::nn::conv2d(x, w, g.stride, g.pad, g.dil, g.groups);
    h.vjp(y, {0, 1});
    Blob bias = h.rand({g.w[0]});
    auto fused = h.op_of(y).with_bias();
    Blob yb = h.add(fused, {x, w, bias})[0];
    h.add(fused->with_relu(), {x, w, bias});
    h.vjp(yb, {0, 1, 2});  // backward weights with the bias gradient
    h.run({"conv2d", "conv2d_backward_data", "conv2d_backward_weights"});
  }
}

TEST(CudaOps, Pooling) {
  struct G {
    Shape x;
    int64_t k, s;
    flow::nn::Padding pad;
  };
  for (const G& g : std::vector<G>{{{2, 3, 8, 8}, 2, 2, "VALID"},
                                   {{2, 3, 9, 9}, 3, 2, "VALID"},
                                   {{1, 2, 7, 7}, 3, 1, "SAME"},                 // symmetric pads
                                   {{1, 2, 6, 6}, 3, 2, flow::nn::Padding(std::vector<int64_t>{1, 1, 1, 1})}}) {
    Harness h(25);
    Blob x = h.rand(g.x, DType::Float32, -3, 3);
    h.vjp(flow::nn::max_pool2d(x, g.k, g.s, g.pad), {0});  // predict-style: gradient from x
    h.vjp(flow::nn::avg_pool2d(x, g.k, g.s, g.pad), {0});
    h.run({"max_pool2d", "max_pool2d_grad", "avg_pool2d", "avg_pool2d_grad"});
  }
  Harness h(26);  // asymmetric pads: max pooling pads by hand; average pooling stays on the CPU
  Blob x = h.rand({1, 2, 8, 8}, DType::Float32, -3, 3);
  Blob avg = flow::nn::avg_pool2d(x, 3, 2, "SAME");
  EXPECT_FALSE(gpu().supports(h.op_of(avg)));
  h.vjp(avg, {0});  // its gradient runs here for any pads
  h.vjp(flow::nn::max_pool2d(x, 3, 2, "SAME"), {0});
  h.run({"max_pool2d", "max_pool2d_grad", "avg_pool2d_grad"});
}

// ---------------------------------------------------------------------------
// Whole jobs

Blob small_net(Blob x, const std::string& p) {
  auto w1 = flow::get_variable(p + "conv-w", {4, 1, 3, 3}, flow::Float, flow::random_normal_initializer(0, 0.3));
  auto b1 = flow::get_variable(p + "conv-b", {4}, flow::Float, flow::constant_initializer(0.1));
  Blob h = flow::nn::relu(flow::nn::bias_add(flow::nn::conv2d(x, w1, 1, "SAME"), b1));
  h = flow::nn::avg_pool2d(h, 2, 2);
  h = flow::reshape(h, {x.shape()[0], -1});
  auto w2 = flow::get_variable(p + "fc-w", {10, 64}, flow::Float, flow::random_normal_initializer(0, 0.2));
  auto b2 = flow::get_variable(p + "fc-b", {10}, flow::Float, flow::constant_initializer(0.0));
  return flow::nn::bias_add(flow::matmul(h, w2, false, true), b2);
}

TEST(CudaJobs, PredictJobMatchesCpu) {
  auto make = [](const char* device) {
    return flow::global_function(flow::Predict, {flow::Numpy::Placeholder({8, 1, 8, 8})},
                                 [device](Blob x) -> flow::Numpy {
                                   auto s = flow::scope::placement(device, "0:0");
                                   return flow::nn::softmax(small_net(x, "predict-"));  // shared variables
                                 });
  };
  auto on_gpu = make("gpu");
  auto on_cpu = make("cpu");
  const std::string plan = on_gpu.compiled()->plan().describe();
  EXPECT_NE(plan.find("on cuda"), std::string::npos) << plan;
  Harness h(30);
  Tensor x = h.random({8, 1, 8, 8}, DType::Float32);
  EXPECT_EQ(compare(on_gpu(x), on_cpu(x), gemm(DType::Float32)), "") << plan;
}

TEST(CudaJobs, TrainStepsMatchCpu) {
  // Two copies of one model (variables "g-*" and "c-*", made equal), trained
  // on the same batches with SGD + momentum, on the device and on the CPU.
  auto make = [](const char* device, const std::string& prefix) {
    // The default placement covers the nodes added after the body (the
    // optimizer's updates), not only the body's.
    return flow::global_function(flow::Train, flow::function_config().default_placement(device, "0:0"),
                                 {flow::Numpy::Placeholder({8, 1, 8, 8}), flow::Numpy::Placeholder({8}, flow::Int32)},
                                 [prefix](Blob x, Blob labels) -> flow::Numpy {
                                   Blob loss = flow::nn::sparse_softmax_cross_entropy_with_logits(
                                       labels, small_net(x, prefix));
                                   flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.1}), 0.9)
                                       .minimize(loss);
                                   return loss;
                                 });
  };
  auto on_gpu = make("gpu", "g-");
  auto on_cpu = make("cpu", "c-");
  for (const std::string& name : flow::session::variable_names())
    if (name.rfind("c-", 0) == 0) flow::session::assign("g-" + name.substr(2), flow::session::variable(name).clone());
  const std::string plan = on_gpu.compiled()->plan().describe();
  EXPECT_NE(plan.find("sgd_update"), std::string::npos) << plan;
  for (const char* op : {"= conv2d", "= conv2d_backward_weights", "= matmul", "= sgd_update"}) {
    const size_t at = plan.find(op);
    ASSERT_NE(at, std::string::npos) << op << " not in\n" << plan;
    EXPECT_NE(plan.substr(at, plan.find('\n', at) - at).find("on cuda"), std::string::npos) << op << "\n" << plan;
  }
  Harness h(31);
  for (int step = 0; step < 4; ++step) {
    Tensor x = h.random({8, 1, 8, 8}, DType::Float32);
    Tensor labels = h.random({8}, DType::Int32, 0, 9);
    EXPECT_EQ(compare(on_gpu(x, labels), on_cpu(x, labels), Tol{1e-4, 1e-5}), "") << "loss of step " << step;
  }
  for (const std::string& name : flow::session::variable_names()) {
    if (name.rfind("c-", 0) != 0) continue;
    EXPECT_EQ(compare(flow::session::variable("g-" + name.substr(2)), flow::session::variable(name), Tol{1e-4, 1e-5}),
              "")
        << name;
  }

  // The sgd_update primitive itself, with and without momentum state.
  for (const flow::Node& n : on_gpu.compiled()->plan().graph().nodes)
    if (std::string(n.op->name()) == "sgd_update") {
      Harness u(32);
      const Shape s{257};
      std::vector<Blob> in{u.rand(s), u.rand(s), u.rand(s)};
      in.resize(n.inputs.size());
      u.add(n.op, in);
      u.run({"sgd_update"});
      break;
    }

  // Max pooling in a train job keeps a oneDNN workspace: it stays on the CPU.
  auto pooled = flow::global_function(flow::Train, flow::function_config().default_placement("gpu", "0:0"),
                                      {flow::Numpy::Placeholder({2, 1, 4, 4})}, [](Blob x) -> flow::Numpy {
                                        auto w = flow::get_variable("pool-w", {1, 1, 4, 4}, flow::Float,
                                                                    flow::constant_initializer(0.5));
                                        Blob loss = flow::reduce_mean(flow::nn::max_pool2d(flow::mul(x, w), 2, 2));
                                        flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.1}), 0)
                                            .minimize(loss);
                                        return loss;
                                      });
  const std::string pplan = pooled.compiled()->plan().describe();
  const size_t at = pplan.find("= max_pool2d");
  ASSERT_NE(at, std::string::npos) << pplan;
  EXPECT_NE(pplan.substr(at, pplan.find('\n', at) - at).find("on cpu"), std::string::npos) << pplan;
  Tensor loss = pooled(Harness(33).random({2, 1, 4, 4}, DType::Float32));
  EXPECT_TRUE(std::isfinite(loss.at(0)));
}

}  // namespace

int main(int argc, char** argv) {
  if (flow::cuda::device_count() == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
