// The layout pass of predict plans (engine/src/compiler/layout.cpp): every
// rewrite (batch norm folded into the convolution, element-wise ops and the
// residual add as post-ops, blocked formats kept through pooling, global
// average pooling and binary ops, reorders at the boundaries, prepared
// weights following their variables) is checked by running the same graph
// with the pass (enable_fusion(true), the default) and without it
// (enable_fusion(false): the graph as written), on the same variables.
#include <gtest/gtest.h>
#include <omp.h>

#include <jobflow/jobflow.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "compiler.h"
#include "tensor_compare.h"
#include "cpu/aligned.h"
#include "cpu/simd_kernels.h"
#include "cpu/dnnl_common.h"
#include "cpu/isa.h"
#include "cpu/layout_ops.h"
#include "cpu/threads.h"

namespace flow = jobflow;
using flow::Blob;
using flow::Shape;
using flow::Tensor;

namespace {

using jobflow::testing::random_float32;
using jobflow::testing::rel_diff;

int count(const std::vector<std::string>& ops, const std::string& prefix) {
  return static_cast<int>(std::count_if(ops.begin(), ops.end(), [&](const std::string& o) { return o.rfind(prefix, 0) == 0; }));
}

// An op whose output keeps a non-plain format (blocked, or channels-last:
// oneDNN picks per shape).
bool keeps_format(const std::vector<std::string>& ops, const std::string& prefix) {
  return std::any_of(ops.begin(), ops.end(), [&](const std::string& o) {
    return o.rfind(prefix, 0) == 0 && o.find("layout=f32:") != std::string::npos &&
           o.find("layout=f32:abcd") == std::string::npos;
  });
}

bool any_has(const std::vector<std::string>& ops, const std::string& prefix, const std::string& text) {
  return std::any_of(ops.begin(), ops.end(),
                     [&](const std::string& o) { return o.rfind(prefix, 0) == 0 && o.find(text) != std::string::npos; });
}

Blob var(const std::string& name, Shape s, float lo = -0.3f, float hi = 0.3f) {
  return flow::get_variable(name, s, flow::Float, flow::random_uniform_initializer(lo, hi), false);
}

Blob conv(Blob x, const std::string& name, int64_t k, int64_t ksize, int64_t groups = 1, int64_t stride = 1) {
  return flow::nn::conv2d(x, var(name, {k, x.shape()[1] / groups, ksize, ksize}), stride, "SAME", 1, groups);
}

struct Both {
  Tensor fused, ref;
  std::vector<std::string> ops;  // the fused plan's
  std::string plan;
};

// Defines the body twice, with and without the pass, and runs both on x.
Both run_both(const std::string& name, const Tensor& x, const std::function<Blob(Blob)>& body) {
  auto define = [&](bool fusion) {
    return flow::global_function(flow::Predict, flow::function_config().name(name + (fusion ? "" : "_ref")).enable_fusion(fusion),
                                 {flow::Numpy::Placeholder(x.shape())},
                                 [&](Blob b) -> flow::Numpy { return body(b); });
  };
  auto f = define(true), r = define(false);
  Both out{f(x), r(x), f.compiled()->plan().op_sequence(), f.compiled()->describe()};
  return out;
}

class Layout : public ::testing::Test {
 protected:
  void SetUp() override { flow::session::reset(); }
};

TEST_F(Layout, BatchNormFoldsIntoTheConvolution) {
  const Tensor x = random_float32({2, 8, 10, 10}, 1);
  auto r = run_both("bn_fold", x, [](Blob b) {
    Blob y = flow::nn::bias_add(conv(b, "bn_w", 16, 3), var("bn_b", {16}), 1);
    return flow::nn::batch_normalization(y, var("bn_mean", {16}), var("bn_var", {16}, 0.5f, 1.5f),
                                         var("bn_offset", {16}), var("bn_scale", {16}, 0.5f, 2.f), 1e-3, 1);
  });
  EXPECT_EQ(count(r.ops, "batch_normalization"), 0) << r.plan;
  EXPECT_TRUE(any_has(r.ops, "conv2d", "fused=bn")) << r.plan;
  EXPECT_LE(rel_diff(r.fused, r.ref), 1e-5) << r.plan;
}

TEST_F(Layout, ResidualAddAndReluAreConvolutionPostOps) {
  const Tensor x = random_float32({2, 16, 8, 8}, 2);
  auto r = run_both("residual", x, [](Blob b) {
    Blob a = flow::nn::relu(conv(b, "res_w0", 32, 3));
    Blob h = flow::nn::relu(conv(a, "res_w1", 32, 3));
    return flow::nn::relu(flow::add(conv(h, "res_w2", 32, 3), a));
  });
  EXPECT_EQ(count(r.ops, "conv2d"), 3) << r.plan;
  EXPECT_EQ(count(r.ops, "add"), 0) << r.plan;
  EXPECT_EQ(count(r.ops, "relu"), 0) << r.plan;
  EXPECT_TRUE(any_has(r.ops, "conv2d", "fused=sum+relu")) << r.plan;
  // The chain stays blocked: the last convolution writes the return plainly.
  EXPECT_EQ(count(r.ops, "reorder"), 0) << r.plan;
  EXPECT_LE(rel_diff(r.fused, r.ref), 1e-5) << r.plan;
}

TEST_F(Layout, ActivationsBecomeConvolutionPostOps) {
  struct Case {
    const char* name;
    std::function<Blob(Blob)> act;
    const char* fused;
  };
  const std::vector<Case> cases = {
      {"clip", [](Blob y) { return flow::clip(y, 0.0, 6.0); }, "fused=clip"},
      {"sigmoid", [](Blob y) { return flow::math::sigmoid(y); }, "fused=logistic"},
      {"swish", [](Blob y) { return flow::mul(y, flow::math::sigmoid(y)); }, "fused=swish"},
      {"hardswish", [](Blob y) { return flow::mul(y, flow::nn::hard_sigmoid(y, 1.0 / 6, 0.5)); }, "fused=hardswish"},
      {"hard_sigmoid", [](Blob y) { return flow::nn::hard_sigmoid(y, 0.2, 0.5); }, "fused=linear+clip"},
  };
  const Tensor x = random_float32({2, 8, 9, 9}, 3, -3.f, 3.f);
  for (const Case& c : cases) {
    const std::string n = c.name;
    auto r = run_both("act_" + n, x, [&](Blob b) {
      Blob h = c.act(conv(b, "act_w0_" + n, 24, 3));
      return c.act(conv(h, "act_w1_" + n, 16, 1));
    });
    EXPECT_EQ(r.ops.size(), 2u) << n << "\n" << r.plan;
    EXPECT_TRUE(any_has(r.ops, "conv2d", c.fused)) << n << "\n" << r.plan;
    EXPECT_LE(rel_diff(r.fused, r.ref), 1e-5) << n << "\n" << r.plan;
  }
}

// 1x1 convolutions of 1 x 1 images (a squeeze-and-excitation's reduce and
// expand, after a global pool) run Jobflow's loop ("algo=small_1x1"): each
// step it takes (relu, clip, sigmoid, swish, hardswish, hard sigmoid as
// linear + clip), a folded batch norm, output channels that are not
// multiples of 16 and over 64 (blocks of 4 vectors and of 1), 1 and 3
// images, the second convolution's output returned (row-major) or read on
// by a mul; a NaN in the pooled values stays NaN in its row; against the
// graph as written. A convolution whose images are larger is oneDNN's.
TEST_F(Layout, SmallOneByOneConvolutionsRunJobflowsLoop) {
  struct Case {
    const char* name;
    std::function<Blob(Blob)> act;
  };
  const std::vector<Case> acts = {
      {"relu", [](Blob y) { return flow::nn::relu(y); }},
      {"clip", [](Blob y) { return flow::clip(y, -0.5, 0.7); }},
      {"sigmoid", [](Blob y) { return flow::math::sigmoid(y); }},
      {"swish", [](Blob y) { return flow::mul(y, flow::math::sigmoid(y)); }},
      {"hardswish", [](Blob y) { return flow::mul(y, flow::nn::hard_sigmoid(y, 1.0 / 6, 0.5)); }},
      {"hard_sigmoid", [](Blob y) { return flow::nn::hard_sigmoid(y, 0.2, 0.5); }},
  };
  for (int64_t batch : {1, 3}) {
    for (size_t a = 0; a < acts.size(); ++a) {
      const Case& c = acts[a];
      const std::string n = "small_" + std::string(c.name) + std::to_string(batch);
      Tensor x = random_float32({batch, 40, 6, 5}, 140 + static_cast<unsigned>(a) + 10 * batch, -3.f, 3.f);
      const bool returned = a % 2 == 0;
      Tensor nan_value = random_float32({batch, 85, 1, 1}, 1);
      std::fill(nan_value.data<float>(), nan_value.data<float>() + nan_value.numel(), 0.f);
      if (batch == 3) nan_value.data<float>()[2 * 85 + 7] = std::nanf("");
      auto define = [&](bool fusion) {
        return flow::global_function(
            flow::Predict, flow::function_config().name(n + (fusion ? "" : "_ref")).enable_fusion(fusion),
            {flow::Numpy::Placeholder(x.shape())}, [&](Blob b) -> std::tuple<flow::Numpy, flow::Numpy> {
              Blob d = flow::nn::relu(conv(b, n + "_a", 85, 1));
              Blob g = flow::reduce_mean(d, {2, 3}, true);
              // A NaN in image 2's pooled channel 7 (in the graph: the pool is the convolution's input).
              if (batch == 3) g = flow::add(g, flow::constant(nan_value));
              Blob r = flow::nn::bias_add(conv(g, n + "_r", 21, 1), var(n + "_rb", {21}), 1);
              if (a == 1) r = flow::nn::batch_normalization(r, var(n + "_m", {21}), var(n + "_v", {21}, 0.5f, 1.5f),
                                                            var(n + "_o", {21}), var(n + "_s", {21}, 0.5f, 2.f), 1e-3, 1);
              Blob e = c.act(flow::nn::bias_add(conv(c.act(r), n + "_e", 85, 1), var(n + "_eb", {85}), 1));
              Blob m = conv(flow::mul(d, e), n + "_p", 8, 1);
              return {returned ? e : flow::reduce_mean(e), m};
            });
      };
      auto f = define(true), ref = define(false);
      const auto [e1, m1] = f(x);
      const auto [e2, m2] = ref(x);
      const std::string plan = f.compiled()->describe();
      EXPECT_EQ(e1.shape(), e2.shape()) << n;
      EXPECT_EQ(std::isnan(e1.data<float>()[0]), std::isnan(e2.data<float>()[0])) << n;
      EXPECT_LE(rel_diff(e1, e2), 1e-5) << n << "\n" << plan;
      EXPECT_LE(rel_diff(m1, m2), 1e-5) << n << "\n" << plan;
      int64_t nans = 0;
      for (int64_t i = 0; i < e1.numel(); ++i) {
        nans += std::isnan(e1.data<float>()[i]);
        EXPECT_EQ(std::isnan(e1.data<float>()[i]), std::isnan(e2.data<float>()[i])) << n << " at " << i;
      }
      EXPECT_EQ(nans > 0, batch == 3) << n;
      if (!flow::cpu::own_avx512_kernels()) continue;
      const auto ops = f.compiled()->plan().op_sequence();
      int64_t small = 0, convs = 0;
      for (const std::string& op : ops) {
        convs += op.rfind("conv2d", 0) == 0;
        small += op.rfind("conv2d", 0) == 0 && op.find("algo=small_1x1") != std::string::npos;
      }
      EXPECT_EQ(small, 2) << n << "\n" << plan;
      EXPECT_EQ(convs, 4) << n << "\n" << plan;
    }
  }
}

// Jobflow's channels-last to row-major transposes (cpu::nhwc_to_nchw):
// exact, for channel and pixel counts below, at and across 16 and over 128
// pixels (several items of a channel block), 1 and 2 images, 1 and 2
// threads, with whole output lines streamed (an output on a 64-byte line)
// and not; NaN and infinities carried as they are.
TEST(Kernels, ChannelsLastToRowMajorTransposesExactly) {
  if (!flow::cpu::own_avx512_kernels()) GTEST_SKIP() << "no AVX512F on this CPU";
  flow::cpu::ScopedThreads restore(0);
  for (int64_t n : {1, 2})
    for (int64_t c : {1, 5, 16, 17, 40})
      for (int64_t hw : {1, 7, 16, 33, 130}) {
        const int64_t total = n * c * hw;
        std::vector<float> x(static_cast<size_t>(total)), y_buf;
        float* y = flow::cpu::align64(y_buf, static_cast<size_t>(total));
        for (int64_t i = 0; i < total; ++i) x[i] = static_cast<float>(i) * 0.5f - 3.f;
        x[0] = std::nanf("");
        x[total - 1] = INFINITY;
        for (int t : {1, 2, 3, 4}) {
          omp_set_num_threads(t % 2 + 1);
          std::fill(y, y + total, -1.f);
          flow::cpu::nhwc_to_nchw(x.data(), n, c, hw, y, t > 2);
          for (int64_t b = 0; b < n; ++b)
            for (int64_t k = 0; k < c; ++k)
              for (int64_t p = 0; p < hw; ++p) {
                const float want = x[(b * hw + p) * c + k], got = y[(b * c + k) * hw + p];
                ASSERT_TRUE(std::memcmp(&want, &got, sizeof got) == 0)
                    << n << "x" << c << "x" << hw << " at image " << b << " channel " << k << " pixel " << p;
              }
        }
      }
}

// A channels-last feature map that is both returned and read on by the
// chain (ssdlite320's backbone outputs) leaves it through Jobflow's
// transposes ("algo=nhwc_to_nchw"); against the graph as written.
TEST_F(Layout, ReturnedChannelsLastMapsLeaveByTransposes) {
  const Tensor x = random_float32({2, 16, 9, 11}, 160);
  auto define = [&](bool fusion) {
    return flow::global_function(
        flow::Predict, flow::function_config().name(std::string("nhwc_out") + (fusion ? "" : "_ref")).enable_fusion(fusion),
        {flow::Numpy::Placeholder(x.shape())}, [&](Blob b) -> std::tuple<flow::Numpy, flow::Numpy> {
          Blob f = flow::clip(conv(b, "nhwc_out_a", 40, 1), 0.0, 6.0);
          return {f, conv(f, "nhwc_out_b", 24, 1)};
        });
  };
  auto f = define(true), ref = define(false);
  const auto [f1, y1] = f(x);
  const auto [f2, y2] = ref(x);
  const std::string plan = f.compiled()->describe();
  EXPECT_LE(rel_diff(f1, f2), 1e-5) << plan;
  EXPECT_LE(rel_diff(y1, y2), 1e-5) << plan;
  // (oneDNN's 1x1 convolutions write channels-last with AVX-512.)
  if (flow::cpu::own_avx512_kernels()) {
    EXPECT_TRUE(any_has(f.compiled()->plan().op_sequence(), "reorder", "from=f32:acdb")) << plan;
    EXPECT_TRUE(any_has(f.compiled()->plan().op_sequence(), "reorder", "algo=nhwc_to_nchw")) << plan;
  }
}

TEST_F(Layout, BlockedFormatsStayPutWithReordersOnlyAtTheBoundaries) {
  // A mobile block: conv, max pool, depthwise conv, pointwise conv, a
  // squeeze-and-excitation (global average pool, 1x1 conv, sigmoid, mul
  // broadcast over H and W), a residual add of two blocked blobs, and a
  // plain kernel at the end (reshape + matmul). (8 input channels: a
  // network's first convolution on 3 would take the pool into its node,
  // AStemAndTheMaxPoolAfterItAreOneNode.)
  const Tensor x = random_float32({2, 8, 20, 20}, 4);
  auto r = run_both("chain", x, [](Blob b) {
    Blob a = flow::nn::relu(conv(b, "ch_w0", 32, 3, 1, 2));
    Blob p = flow::nn::max_pool2d(a, 3, 2, "SAME");
    Blob d = flow::clip(conv(p, "ch_dw", 32, 3, 32), 0.0, 6.0);
    Blob e = conv(d, "ch_pw", 32, 1);
    Blob g = flow::reduce_mean(e, {2, 3}, true);
    Blob s = flow::math::sigmoid(conv(g, "ch_se", 32, 1));
    Blob m = flow::add(flow::mul(e, s), p);
    Blob f = flow::reshape(flow::reduce_mean(m, {2, 3}, true), {2, 32});
    return flow::matmul(f, var("ch_fc", {32, 5}));
  });
  EXPECT_TRUE(keeps_format(r.ops, "max_pool2d")) << r.plan;
  EXPECT_TRUE(keeps_format(r.ops, "reduce_mean")) << r.plan;
  EXPECT_TRUE(keeps_format(r.ops, "mul")) << r.plan;
  EXPECT_TRUE(keeps_format(r.ops, "add")) << r.plan;
  // One reorder: the pooled features before the reshape, one pixel per
  // image, whose bytes are the same in both formats: a copy.
  EXPECT_EQ(count(r.ops, "reorder"), 1) << r.plan;
  EXPECT_TRUE(any_has(r.ops, "reorder", "algo=copy")) << r.plan;
  // The add writes over the product, which nothing else reads, and the mul
  // over e, which the global pool read before it (its last reader).
  EXPECT_TRUE(any_has(r.ops, "add", "in_place=1")) << r.plan;
  EXPECT_TRUE(any_has(r.ops, "mul", "in_place=1")) << r.plan;
  EXPECT_LE(rel_diff(r.fused, r.ref), 1e-5) << r.plan;
}

TEST_F(Layout, ABlockedBlobReturnedAndReadFurther) {
  const Tensor x = random_float32({1, 8, 12, 12}, 5);
  auto define = [&](bool fusion) {
    return flow::global_function(flow::Predict, flow::function_config().name(fusion ? "ret" : "ret_ref").enable_fusion(fusion),
                                 {flow::Numpy::Placeholder(x.shape())}, [](Blob b) -> std::tuple<flow::Numpy, flow::Numpy> {
                                   Blob y = flow::nn::relu(conv(b, "ret_w", 16, 3));
                                   return {y, flow::nn::max_pool2d(flow::nn::relu(conv(y, "ret_w2", 16, 3)), 2, 2)};
                                 });
  };
  auto f = define(true), r = define(false);
  auto [a1, b1] = f(x);
  auto [a2, b2] = r(x);
  EXPECT_LE(rel_diff(a1, a2), 1e-5) << f.compiled()->describe();
  EXPECT_LE(rel_diff(b1, b2), 1e-5) << f.compiled()->describe();
}

TEST_F(Layout, PreparedWeightsFollowTheirVariables) {
  const Tensor x = random_float32({2, 4, 6, 6}, 6);
  auto body = [](Blob b) -> flow::Numpy { return flow::nn::relu(flow::nn::conv2d(b, var("pw_w", {8, 4, 3, 3}), 1, "SAME")); };
  auto f = flow::global_function(flow::Predict, flow::function_config().name("pw"), {flow::Numpy::Placeholder(x.shape())}, body);
  auto r = flow::global_function(flow::Predict, flow::function_config().name("pw_ref").enable_fusion(false),
                                 {flow::Numpy::Placeholder(x.shape())}, body);
  EXPECT_LE(rel_diff(f(x), r(x)), 1e-5);
  // session::assign: the prepared (reordered) weights are rebuilt.
  flow::session::assign("pw_w", random_float32({8, 4, 3, 3}, 7));
  const Tensor after = r(x);
  EXPECT_GT(rel_diff(f(x), random_float32({2, 8, 6, 6}, 8)), 0.1);
  EXPECT_LE(rel_diff(f(x), after), 1e-5);
  // A train job updating the variable: the predict job sees every step.
  auto train = flow::global_function(flow::Train, flow::function_config().name("pw_train"),
                                     {flow::Numpy::Placeholder(x.shape())}, [](Blob b) -> flow::Numpy {
                                       Blob w = flow::get_variable("pw_w", {8, 4, 3, 3}, flow::Float,
                                                                   flow::random_uniform_initializer(-0.3, 0.3), true);
                                       Blob loss = flow::reduce_mean(flow::square(flow::nn::conv2d(b, w, 1, "SAME")));
                                       flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.5}), 0)
                                           .minimize(loss);
                                       return loss;
                                     });
  train(x);
  const Tensor stepped = r(x);
  EXPECT_GT(rel_diff(stepped, after), 1e-4);
  EXPECT_LE(rel_diff(f(x), stepped), 1e-5);
}

// A weight seen through Identity nodes (torch.onnx.export writes one where
// layers share a weight) is still a variable's: prepared once per version,
// not at every call, and still following the variable.
TEST_F(Layout, WeightsThroughIdentityArePreparedOncePerVersion) {
  const Tensor x = random_float32({2, 4, 6, 6}, 11);
  auto body = [](Blob b) -> flow::Numpy {
    Blob w = flow::identity(flow::identity(var("idw_w", {8, 4, 3, 3})));
    return flow::nn::relu(flow::nn::conv2d(b, w, 1, "SAME"));
  };
  auto f = flow::global_function(flow::Predict, flow::function_config().name("idw"), {flow::Numpy::Placeholder(x.shape())}, body);
  auto r = flow::global_function(flow::Predict, flow::function_config().name("idw_ref").enable_fusion(false),
                                 {flow::Numpy::Placeholder(x.shape())}, body);
  EXPECT_LE(rel_diff(f(x), r(x)), 1e-5);
  const std::string plan = f.compiled()->describe();
  const auto ops = f.compiled()->plan().op_sequence();
  EXPECT_EQ(count(ops, "conv2d"), 1) << plan;
  EXPECT_FALSE(any_has(ops, "conv2d", "weights=per_call")) << plan;
  flow::session::assign("idw_w", random_float32({8, 4, 3, 3}, 12));
  EXPECT_LE(rel_diff(f(x), r(x)), 1e-5);
  // A weight computed in the graph is prepared at every call, and says so.
  auto g = flow::global_function(flow::Predict, flow::function_config().name("idw_computed"),
                                 {flow::Numpy::Placeholder(x.shape())}, [](Blob b) -> flow::Numpy {
                                   Blob w = flow::mul(var("idw_w", {8, 4, 3, 3}), flow::constant(Tensor::scalar<float>(2.f)));
                                   return flow::nn::conv2d(b, w, 1, "SAME");
                                 });
  g(x);
  EXPECT_TRUE(any_has(g.compiled()->plan().op_sequence(), "conv2d", "weights=per_call")) << g.compiled()->describe();
}

}  // namespace

namespace {

// A job whose batch is known at call time compiles a plan per call shape
// (the plan cache): each of them gets the pass (batch norm folded, post-ops,
// the blocked chain, one reorder before the plain kernels), computes what the
// graph as written computes, and has its own work per call, from which the
// runtime picks the call's thread count.
TEST_F(Layout, PlansCompiledPerCallShapeGetThePass) {
  auto body = [](Blob b) {
    Blob y = conv(b, "dyn_w0", 16, 3);
    y = flow::nn::batch_normalization(y, var("dyn_mean", {16}), var("dyn_var", {16}, 0.5f, 1.5f), var("dyn_off", {16}),
                                      var("dyn_scale", {16}, 0.5f, 2.f), 1e-3, 1);
    Blob p = flow::nn::max_pool2d(flow::nn::relu(y), 2, 2);
    Blob m = flow::nn::relu(flow::add(conv(p, "dyn_w1", 16, 3), p));
    Blob f = flow::reshape(flow::reduce_mean(m, {2, 3}, true), {-1, 16});
    return flow::matmul(f, var("dyn_fc", {16, 5}));
  };
  auto define = [&](bool fusion) {
    return flow::global_function(flow::Predict, flow::function_config().name(fusion ? "dyn" : "dyn_ref").enable_fusion(fusion),
                                 {flow::Numpy::Placeholder({-1, 8, 12, 12}, flow::Float, "x")},
                                 [&](Blob b) -> flow::Numpy { return body(b); });
  };
  auto f = define(true), r = define(false);
  std::map<int64_t, double> flops;
  for (int64_t n : {1, 3, 2, 3}) {
    const Tensor x = random_float32({n, 8, 12, 12}, 20 + static_cast<uint64_t>(n));
    const Tensor got = f(x), want = r(x);
    ASSERT_EQ(got.shape(), (Shape{n, 5}));
    const flow::Plan& plan = f.compiled()->plan();
    const auto ops = plan.op_sequence();
    const std::string text = plan.describe();
    EXPECT_LE(rel_diff(got, want), 1e-5) << text;
    EXPECT_EQ(count(ops, "batch_normalization"), 0) << text;
    EXPECT_TRUE(any_has(ops, "conv2d", "fused=bn+relu")) << text;
    EXPECT_TRUE(any_has(ops, "conv2d", "fused=sum+relu")) << text;
    EXPECT_TRUE(keeps_format(ops, "reduce_mean")) << text;
    EXPECT_EQ(count(ops, "reorder"), 1) << text;
    flops[n] = plan.flops_per_call();
  }
  EXPECT_EQ(f.compiled()->plan_cache_stats().plans, 3u);
  EXPECT_GT(flops[1], 0.0);
  EXPECT_NEAR(flops[3] / flops[1], 3.0, 1e-9);
  EXPECT_NEAR(flops[2] / flops[1], 2.0, 1e-9);
}

// The thread count of a call whose job does not fix it (cpu/threads.h), from
// the plan's work per call above: one thread for small work; for a train
// job the cores, whatever the load, so that training is reproducible; for a
// predict job the cores other processes leave free.
TEST(CallThreads, TrainJobsDoNotFollowTheLoad) {
  using flow::cpu::auto_threads;
  using flow::cpu::kSmallWorkFlops;
  EXPECT_EQ(auto_threads(kSmallWorkFlops / 2, 4, false), 1);
  EXPECT_EQ(auto_threads(kSmallWorkFlops / 2, 4, true), 1);
  EXPECT_EQ(auto_threads(kSmallWorkFlops * 20, 4, false), 4);
  EXPECT_EQ(auto_threads(kSmallWorkFlops * 20, 1, false), 1);
  const int predict = auto_threads(kSmallWorkFlops * 20, 4, true);
  EXPECT_GE(predict, 1);
  EXPECT_LE(predict, 4);
  // The most a job may use is OpenMP's default for a new thread, not the
  // count last set on the defining thread (which run_here sets per call).
  const int procs = omp_get_num_procs();
  const char* env = std::getenv("OMP_NUM_THREADS");
  const int want = std::min(env && std::atoi(env) > 0 ? std::atoi(env) : procs, omp_get_thread_limit());
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  EXPECT_EQ(flow::cpu::default_threads(), want);
  omp_set_num_threads(before);
}

// The same through a job: one defined on a thread whose OpenMP count is 1
// (as run_here leaves it after a small job's call) still runs its large
// calls on every core. run_here sets the calling thread's count to the
// call's, which is what the test reads back. A train job: its count does
// not follow the machine's load, so the test does not either.
TEST(CallThreads, AJobDefinedAfterASmallCallKeepsItsCores) {
  if (const char* env = std::getenv("JOBFLOW_NUM_THREADS"); env && *env) GTEST_SKIP() << "JOBFLOW_NUM_THREADS fixes the count";
  if (flow::cpu::default_threads() < 2) GTEST_SKIP() << "one core: nothing to tell apart";
  flow::session::reset();
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  const Tensor x = random_float32({8, 16, 32, 32}, 14);
  auto train = flow::global_function(flow::Train, flow::function_config().name("ceiling_train"),
                                     {flow::Numpy::Placeholder(x.shape())}, [](Blob b) -> flow::Numpy {
                                       Blob w = flow::get_variable("ceiling_w", {32, 16, 3, 3}, flow::Float,
                                                                   flow::random_uniform_initializer(-0.1, 0.1), true);
                                       Blob loss = flow::reduce_mean(flow::square(flow::nn::conv2d(b, w, 1, "SAME")));
                                       flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.1}), 0)
                                           .minimize(loss);
                                       return loss;
                                     });
  ASSERT_GT(train.compiled()->plan().flops_per_call(), flow::cpu::kSmallWorkFlops);
  train.compiled()->run_here({x});
  EXPECT_EQ(omp_get_max_threads(), flow::cpu::default_threads());
  omp_set_num_threads(before);
}

// LayoutBinary's own channel-wise loop on channel-blocked memory (oneDNN
// picks channels-last for the shapes above; aBcd16b with padded channels
// here), against the plain product.
TEST_F(Layout, ChannelwiseMulOnBlockedMemory) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  auto job = flow::global_function(flow::Predict, flow::function_config().name("cw").enable_fusion(false),
                                   {flow::Numpy::Placeholder({2, 20, 5, 5}), flow::Numpy::Placeholder({2, 20, 1, 1})},
                                   [](Blob a, Blob b) -> flow::Numpy { return flow::mul(a, b); });
  std::shared_ptr<const flow::Primitive> mul;
  for (const auto& n : job.compiled()->plan().graph().nodes)
    if (n.op->kind() == flow::OpKind::Mul) mul = n.op;
  ASSERT_TRUE(mul);
  const Tensor x = random_float32({2, 20, 5, 5}, 9), s = random_float32({2, 20, 1, 1}, 10);
  const Tensor want = job(x, s);
  for (tag t : {tag::aBcd16b, tag::aBcd8b, tag::acdb}) {
    const dnnl::memory::desc bx({2, 20, 5, 5}, dt::f32, t), bs({2, 20, 1, 1}, dt::f32, t);
    auto& eng = flow::cpu::dnnl_engine();
    auto to = [&](const Tensor& v, const dnnl::memory::desc& md) {
      dnnl::memory user(flow::cpu::plain_desc(v.shape()), eng, v.raw()), m(md, eng);
      dnnl::reorder(user, m).execute(flow::cpu::dnnl_stream(), user, m);
      return m;
    };
    dnnl::memory mx = to(x, bx), ms = to(s, bs), my(bx, eng);
    flow::cpu::LayoutBinary op(mul, {{2, 20, 5, 5}, flow::Float}, dnnl::algorithm::binary_mul, 0, bx, bs);
    EXPECT_TRUE(op.channelwise()) << static_cast<int>(t);
    flow::ExecContext ctx;
    op.eval_cpu({Tensor::wrap(mx.get_data_handle(), {2, 20, 5, 5}, flow::Float, nullptr),
                 Tensor::wrap(ms.get_data_handle(), {2, 20, 1, 1}, flow::Float, nullptr)},
                {Tensor::wrap(my.get_data_handle(), {2, 20, 5, 5}, flow::Float, nullptr)}, ctx);
    Tensor got({2, 20, 5, 5}, flow::Float);
    dnnl::memory back(flow::cpu::plain_desc(got.shape()), eng, got.raw());
    dnnl::reorder(my, back).execute(flow::cpu::dnnl_stream(), my, back);
    flow::cpu::dnnl_stream().wait();
    EXPECT_TRUE(got.equal(want)) << static_cast<int>(t);
  }
  // bfloat16 (CPUs with AVX512_BF16): the product of the bf16 operands,
  // rounded once to bf16 (C = 20: a full 16-lane span and a masked tail).
  if (!__builtin_cpu_supports("avx512bf16")) return;
  for (tag t : {tag::aBcd16b, tag::acdb}) {
    const dnnl::memory::desc bx({2, 20, 5, 5}, dt::bf16, t), bs({2, 20, 1, 1}, dt::bf16, t);
    auto& eng = flow::cpu::dnnl_engine();
    auto convert = [&](const dnnl::memory& from, const dnnl::memory::desc& md) {
      dnnl::memory m(md, eng);
      dnnl::reorder(from, m).execute(flow::cpu::dnnl_stream(), const_cast<dnnl::memory&>(from), m);
      flow::cpu::dnnl_stream().wait();
      return m;
    };
    const dnnl::memory ux(flow::cpu::plain_desc(x.shape()), eng, x.raw()), us(flow::cpu::plain_desc(s.shape()), eng, s.raw());
    dnnl::memory mx = convert(ux, bx), ms = convert(us, bs), my(bx, eng);
    flow::cpu::LayoutBinary op(mul, {{2, 20, 5, 5}, flow::Float}, dnnl::algorithm::binary_mul, 0, bx, bs);
    EXPECT_TRUE(op.channelwise()) << "bf16 " << static_cast<int>(t);
    flow::ExecContext ctx;
    op.eval_cpu({Tensor::wrap(mx.get_data_handle(), {2, 20, 5, 5}, flow::Float, nullptr),
                 Tensor::wrap(ms.get_data_handle(), {2, 20, 1, 1}, flow::Float, nullptr)},
                {Tensor::wrap(my.get_data_handle(), {2, 20, 5, 5}, flow::Float, nullptr)}, ctx);
    Tensor got({2, 20, 5, 5}, flow::Float), xr({2, 20, 5, 5}, flow::Float), sr({2, 20, 1, 1}, flow::Float);
    auto back = [&](dnnl::memory& from, Tensor& to) {
      dnnl::memory m(flow::cpu::plain_desc(to.shape()), eng, to.raw());
      dnnl::reorder(from, m).execute(flow::cpu::dnnl_stream(), from, m);
      flow::cpu::dnnl_stream().wait();
    };
    back(my, got), back(mx, xr), back(ms, sr);
    const float* g = got.data<float>();
    const float *xv = xr.data<float>(), *sv = sr.data<float>();
    for (int64_t i = 0; i < got.numel(); ++i) {
      const float exact = xv[i] * sv[i / 25];
      ASSERT_NEAR(g[i], exact, std::abs(exact) * (1.f / 256.f) + 1e-30f) << "bf16 " << static_cast<int>(t) << " at " << i;
    }
  }
}

// The mul does not write over an input that a later node still reads.
TEST_F(Layout, NotInPlaceOverAnInputReadLater) {
  const Tensor x = random_float32({2, 3, 12, 12}, 13);
  auto r = run_both("late", x, [](Blob b) {
    Blob e = conv(b, "late_w", 16, 3);
    Blob s = flow::math::sigmoid(conv(flow::reduce_mean(e, {2, 3}, true), "late_se", 16, 1));
    return flow::add(flow::mul(e, s), e);
  });
  EXPECT_FALSE(any_has(r.ops, "mul", "in_place=1")) << r.plan;
  EXPECT_LE(rel_diff(r.fused, r.ref), 1e-5) << r.plan;
}

}  // namespace

namespace {

// Jobflow's Winograd kernels, F(4x4, 3x3) and F(2x2, 5x5) (cpu/winograd.h),
// against a direct convolution in double precision: odd sizes (partial
// tiles at the right and bottom edges), pads from 0 to r - 1, batches, a
// last block of 8 output channels, bias, a residual (separate and in place)
// and each clamp.
TEST(Winograd, MatchesTheDirectConvolution) {
  if (!flow::cpu::Winograd::supported()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  struct Case {
    int64_t r, N, C, K, H, W, pad;
    bool bias, residual, in_place;
    float lo, hi;
  };
  const float inf = INFINITY;
  const std::vector<Case> cases = {
      {3, 1, 8, 8, 4, 4, 1, false, false, false, -inf, inf},  {3, 2, 16, 24, 9, 13, 1, true, false, false, 0.f, inf},
      {3, 1, 32, 40, 11, 7, 0, true, true, false, -inf, inf}, {3, 3, 8, 16, 6, 5, 2, false, true, true, 0.f, 6.f},
      {3, 1, 64, 64, 14, 14, 1, true, true, false, 0.f, inf}, {5, 2, 32, 64, 14, 14, 2, true, false, false, 0.f, inf},
      {5, 1, 8, 16, 9, 6, 4, false, true, true, -inf, inf},   {5, 1, 16, 8, 7, 11, 0, true, true, false, 0.f, 6.f},
      {3, 3, 16, 48, 6, 5, 2, false, true, true, 0.f, 6.f},   {5, 1, 16, 16, 9, 6, 4, false, true, true, -inf, inf},
  };
  // Each case at 8 lanes (AVX2, nChw8c) and, where the CPU has AVX-512 and
  // the channels are multiples of 16, at 16 (nChw16c).
  const bool avx512 = __builtin_cpu_supports("avx512f");
  int runs16 = 0;
  for (const Case& c : cases)
  for (const int64_t L : {8, 16}) {
    if (L == 16 && (!avx512 || c.C % 16 != 0 || c.K % 16 != 0)) continue;
    runs16 += L == 16;
    const std::string name = std::to_string(c.r) + "x" + std::to_string(c.r) + " N" + std::to_string(c.N) + " C" + std::to_string(c.C) + " K" + std::to_string(c.K) +
                             " " + std::to_string(c.H) + "x" + std::to_string(c.W) + " pad " + std::to_string(c.pad) +
                             " lanes " + std::to_string(L);
    const int64_t OH = c.H + 2 * c.pad - (c.r - 1), OW = c.W + 2 * c.pad - (c.r - 1);
    flow::cpu::Conv2dParams p{c.N, c.C, c.H, c.W, c.K, c.r, c.r, OH, OW, 1, 1, c.pad, c.pad, c.pad, c.pad, 1, 1, 1};
    ASSERT_TRUE(flow::cpu::Winograd::fits(p)) << name;
    const Tensor x = random_float32({c.N, c.C, c.H, c.W}, 30), w = random_float32({c.K, c.C, c.r, c.r}, 31, -0.5f, 0.5f);
    const Tensor b = random_float32({c.K}, 32), r = random_float32({c.N, c.K, OH, OW}, 33, -2.f, 2.f);
    // nChw<L>c offsets (channels are multiples of L).
    auto blk = [L](int64_t C, int64_t H, int64_t W, int64_t n, int64_t ch, int64_t h, int64_t w_) {
      return (((n * (C / L) + ch / L) * H + h) * W + w_) * L + ch % L;
    };
    std::vector<float> xb(static_cast<size_t>(x.numel())), yb(static_cast<size_t>(c.N * c.K * OH * OW)), rb(yb.size());
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t ch = 0; ch < c.C; ++ch)
        for (int64_t h = 0; h < c.H; ++h)
          for (int64_t q = 0; q < c.W; ++q)
            xb[blk(c.C, c.H, c.W, n, ch, h, q)] = x.data<float>()[((n * c.C + ch) * c.H + h) * c.W + q];
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t k = 0; k < c.K; ++k)
        for (int64_t h = 0; h < OH; ++h)
          for (int64_t q = 0; q < OW; ++q)
            rb[blk(c.K, OH, OW, n, k, h, q)] = r.data<float>()[((n * c.K + k) * OH + h) * OW + q];
    flow::cpu::Winograd wg(p, static_cast<int>(L));
    ASSERT_EQ(wg.lanes(), L);
    wg.set_weights(w.data<float>());
    // At 1, 2 and 3 threads (other splits into tile blocks): the same bits.
    std::vector<float> first;
    for (int t : {3, 2, 1}) {
      flow::cpu::ScopedThreads at(t);
      if (c.in_place) yb = rb;
      wg.run(xb.data(), yb.data(), c.bias ? b.data<float>() : nullptr,
             c.residual ? (c.in_place ? yb.data() : rb.data()) : nullptr, c.lo, c.hi);
      if (first.empty()) first = yb;
      EXPECT_TRUE(yb == first) << name << " at " << t << " threads";
    }
    if (c.residual && !c.in_place) {
      // The residual channels-last (acdb) instead: the same sums, the same bits.
      std::vector<float> rn(yb.size()), yn(yb.size());
      for (int64_t n = 0; n < c.N; ++n)
        for (int64_t k = 0; k < c.K; ++k)
          for (int64_t h = 0; h < OH; ++h)
            for (int64_t q = 0; q < OW; ++q)
              rn[((n * OH + h) * OW + q) * c.K + k] = r.data<float>()[((n * c.K + k) * OH + h) * OW + q];
      wg.run(xb.data(), yn.data(), c.bias ? b.data<float>() : nullptr, rn.data(), c.lo, c.hi, true);
      EXPECT_TRUE(yn == first) << name << " with a channels-last residual";
    }
    double worst = 0, scale = 1e-30;
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t k = 0; k < c.K; ++k)
        for (int64_t h = 0; h < OH; ++h)
          for (int64_t q = 0; q < OW; ++q) {
            double s = c.bias ? b.data<float>()[k] : 0.0;
            for (int64_t ch = 0; ch < c.C; ++ch)
              for (int64_t i = 0; i < c.r; ++i)
                for (int64_t j = 0; j < c.r; ++j) {
                  const int64_t hh = h + i - c.pad, ww = q + j - c.pad;
                  if (hh < 0 || hh >= c.H || ww < 0 || ww >= c.W) continue;
                  s += static_cast<double>(x.data<float>()[((n * c.C + ch) * c.H + hh) * c.W + ww]) *
                       w.data<float>()[((k * c.C + ch) * c.r + i) * c.r + j];
                }
            if (c.residual) s += r.data<float>()[((n * c.K + k) * OH + h) * OW + q];
            s = std::min<double>(std::max<double>(s, c.lo), c.hi);
            scale = std::max(scale, std::abs(s));
            worst = std::max(worst, std::abs(s - yb[blk(c.K, OH, OW, n, k, h, q)]));
          }
    EXPECT_LE(worst / scale, (c.r == 3 ? 2e-6 : 4e-6) * std::sqrt(static_cast<double>(c.C))) << name;
    if (c.lo == 0.f) {
      const float lowest = *std::min_element(yb.begin(), yb.end());
      EXPECT_EQ(lowest, 0.f) << name;  // relu / relu6 clamped
    }
  }
  if (avx512) {
    EXPECT_EQ(runs16, 4);
  }
  // Shapes it does not take.
  flow::cpu::Conv2dParams s2{1, 8, 8, 8, 8, 3, 3, 4, 4, 2, 2, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_FALSE(flow::cpu::Winograd::fits(s2));  // stride 2
  flow::cpu::Conv2dParams c12{1, 12, 8, 8, 8, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_FALSE(flow::cpu::Winograd::fits(c12));  // 12 input channels
}

// A residual block of 3x3 convolutions (batch norm folded, relu, the
// residual add) big enough for the Winograd kernel: on CPUs where the layout
// pass prefers it the convolutions run it, and the plan computes what the
// graph as written computes.
TEST_F(Layout, ResidualBlockOnTheWinogradKernel) {
  const Tensor x = random_float32({2, 64, 14, 14}, 40);
  auto r = run_both("wino", x, [](Blob b) {
    Blob a = flow::nn::relu(conv(b, "wino_w0", 64, 3));
    Blob h = conv(a, "wino_w1", 64, 3);
    h = flow::nn::batch_normalization(h, var("wino_mean", {64}), var("wino_var", {64}, 0.5f, 1.5f),
                                      var("wino_off", {64}), var("wino_scale", {64}, 0.5f, 2.f), 1e-5, 1);
    Blob y = flow::nn::relu(flow::add(conv(flow::clip(h, 0.0, 6.0), "wino_w2", 64, 3), a));
    return flow::nn::max_pool2d(y, 2, 2);
  });
  if (flow::cpu::Winograd::preferred()) {
    EXPECT_EQ(count(r.ops, "conv2d"), 3) << r.plan;
    for (const std::string& o : r.ops) {
      if (o.rfind("conv2d", 0) == 0) {
        EXPECT_NE(o.find("algo=winograd"), std::string::npos) << o << "\n" << r.plan;
      }
    }
    EXPECT_TRUE(any_has(r.ops, "conv2d", "fused=bn+clip")) << r.plan;
    EXPECT_TRUE(any_has(r.ops, "conv2d", "fused=sum+relu")) << r.plan;
    EXPECT_EQ(count(r.ops, "reorder"), 1) << r.plan;  // the pooled result only
  }
  if (flow::cpu::Winograd::preferred() && __builtin_cpu_supports("avx512f")) {
    // 16 lanes in oneDNN's nChw16c, the residual taken as it is.
    EXPECT_TRUE(any_has(r.ops, "conv2d", "fused=sum+relu in_place=1 layout=f32:aBcd16b algo=winograd")) << r.plan;
  } else if (flow::cpu::LayoutConv::oneDNN_winograd(flow::cpu::Conv2dParams{2, 64, 14, 14, 64, 3, 3, 14, 14, 1, 1, 1, 1,
                                                                             1, 1, 1, 1, 1})) {
    // oneDNN's Winograd kernel (AVX-512) where it takes the fusion (relu,
    // the residual sum); its direct kernel for the clip it does not take.
    EXPECT_TRUE(any_has(r.ops, "conv2d", "relu=1 layout=f32:aBcd16b algo=onednn_winograd")) << r.plan;
    EXPECT_TRUE(any_has(r.ops, "conv2d", "fused=sum+relu in_place=1 layout=f32:aBcd16b algo=onednn_winograd")) << r.plan;
    // The clip's convolution takes the Winograd one's nChw16c as it is.
    EXPECT_TRUE(any_has(r.ops, "conv2d", "fused=bn+clip layout=f32:aBcd16b]")) << r.plan;
    EXPECT_EQ(count(r.ops, "reorder"), 1) << r.plan;  // the pooled result only
  }
  EXPECT_LE(rel_diff(r.fused, r.ref), 2e-5) << r.plan;
}

// resnet18's first residual block: the stem (7x7, stride 2, on 3 channels)
// and the max pool after it (one node on Jobflow's kernel) write
// channels-last, and the block's second convolution adds the pool's
// output. Where Jobflow's Winograd kernel runs at 16 lanes it reads that
// residual channels-last as it is (it had gone to oneDNN's Winograd
// kernel, 0.51 against 0.35 ms in resnet18 at batch 1).
TEST_F(Layout, WinogradTakesAChannelsLastResidual) {
  const Tensor x = random_float32({1, 3, 64, 64}, 45);
  auto r = run_both("wino_nhwc", x, [](Blob b) {
    Blob s = flow::nn::relu(flow::nn::conv2d(b, var("wnh_stem", {64, 3, 7, 7}), 2, std::vector<int64_t>{3, 3, 3, 3}));
    Blob p = flow::nn::max_pool2d(s, 3, 2, std::vector<int64_t>{1, 1, 1, 1});
    Blob h = flow::nn::relu(conv(p, "wnh_w1", 64, 3));
    return flow::nn::max_pool2d(flow::nn::relu(flow::add(conv(h, "wnh_w2", 64, 3), p)), 2, 2);
  });
  EXPECT_LE(rel_diff(r.fused, r.ref), 2e-5) << r.plan;
  if (flow::cpu::Winograd::preferred() && __builtin_cpu_supports("avx512f") && !flow::cpu::avx2_at_most()) {
    EXPECT_TRUE(any_has(r.ops, "conv2d", "fused=maxpool layout=f32:acdb algo=expand_dw")) << r.plan;
    EXPECT_TRUE(any_has(r.ops, "conv2d", "fused=sum+relu layout=f32:aBcd16b algo=winograd")) << r.plan;
    EXPECT_FALSE(any_has(r.ops, "conv2d", "onednn_winograd")) << r.plan;
  }
}

// oneDNN's Winograd kernel is made for one thread count (its weights' format
// depends on it) and always runs with it: a plan called on a thread whose
// OpenMP count differs from the one its formats were chosen for runs, and
// gives the same bits at every count (at 256 channels, 14x14, oneDNN could
// not make the primitive for another count from the formats chosen for
// one: resnet18 failed in `jobflow run` before the count was fixed).
TEST_F(Layout, WinogradConvolutionsRunAtAnyCallingCount) {
  const Tensor x = random_float32({1, 256, 14, 14}, 41);
  auto f = flow::global_function(flow::Predict, flow::function_config().name("wino_counts"),
                                 {flow::Numpy::Placeholder(x.shape())}, [](Blob b) -> flow::Numpy {
                                   Blob a = flow::nn::relu(conv(b, "wc_w0", 256, 3));
                                   return flow::nn::relu(conv(a, "wc_w1", 256, 3));
                                 });
  auto r = flow::global_function(flow::Predict, flow::function_config().name("wino_counts_ref").enable_fusion(false),
                                 {flow::Numpy::Placeholder(x.shape())}, [](Blob b) -> flow::Numpy {
                                   Blob a = flow::nn::relu(conv(b, "wc_w0", 256, 3));
                                   return flow::nn::relu(conv(a, "wc_w1", 256, 3));
                                 });
  const Tensor want = r(x), got = f(x);
  EXPECT_LE(rel_diff(got, want), 2e-5) << f.compiled()->describe();
  if (!flow::cpu::avx2_at_most()) {
    EXPECT_EQ(count(f.compiled()->plan().op_sequence(), "conv2d"), 2) << f.compiled()->describe();
    EXPECT_TRUE(any_has(f.compiled()->plan().op_sequence(), "conv2d", "algo=onednn_winograd")) << f.compiled()->describe();
  }
  auto& plan = const_cast<flow::Plan&>(f.compiled()->plan());
  flow::cpu::ScopedThreads restore(0);  // the OpenMP count back, even when a call throws
  std::vector<Tensor> outs;
  for (int t : {1, 2, 1}) {
    omp_set_num_threads(t);
    outs.push_back(plan.run({x})[0]);
  }
  for (const Tensor& o : outs) EXPECT_TRUE(o.equal(got));
}

}  // namespace

namespace {

// Jobflow's AVX2 swish (run after oneDNN's convolution instead of its swish
// post-op) against x / (1 + exp(-x)) in double: the whole float range that
// matters, odd lengths (the scalar tail), NaN kept.
TEST(Avx2Kernels, SwishMatchesTheFormula) {
  if (!flow::cpu::Winograd::supported()) GTEST_SKIP() << "no AVX2/FMA on this CPU";  // AVX-512 CPUs run them too
  for (int64_t n : {1, 7, 8, 13, 40000}) {
    std::vector<float> y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) y[i] = -100.f + 200.f * static_cast<float>(i) / static_cast<float>(std::max<int64_t>(n - 1, 1));
    if (n > 8) y[3] = std::nanf("");
    const std::vector<float> x = y;
    flow::cpu::swish_inplace(y.data(), n);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(y[i])) << i;
        continue;
      }
      const double want = x[i] / (1.0 + std::exp(-static_cast<double>(x[i])));
      if (std::abs(want) < 1e-30) {  // x below -70: relative to nothing, near 0
        EXPECT_LT(std::abs(y[i]), 1e-30) << x[i];
      } else {
        worst = std::max(worst, std::abs(y[i] - want) / std::abs(want));
      }
    }
    EXPECT_LT(worst, 1e-6) << n;
  }
}

// The bfloat16 swish (AVX512_BF16): each value widened, swish in float32,
// rounded to nearest even, so within bf16's unit roundoff (2^-8 relative:
// 8 significant bits) of the formula on the bf16 input; odd lengths (the
// masked tail), NaN kept.
TEST(Avx2Kernels, Bf16SwishMatchesTheFormula) {
  if (!flow::cpu::own_swish(true)) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  auto to_float = [](uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  };
  for (int64_t n : {1, 15, 16, 17, 40000}) {
    std::vector<uint16_t> y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const float f = -60.f + 120.f * static_cast<float>(i) / static_cast<float>(std::max<int64_t>(n - 1, 1));
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      y[i] = static_cast<uint16_t>(bits >> 16);  // truncated: an exact bf16 input
    }
    if (n > 16) y[3] = 0x7FC0;  // NaN
    const std::vector<uint16_t> x = y;
    flow::cpu::swish_inplace_bf16(y.data(), n);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double xi = to_float(x[i]), yi = to_float(y[i]);
      if (std::isnan(xi)) {
        EXPECT_TRUE(std::isnan(yi)) << i;
        continue;
      }
      const double want = xi / (1.0 + std::exp(-xi));
      if (std::abs(want) < 1e-20) EXPECT_LT(std::abs(yi), 1e-20) << xi;
      else worst = std::max(worst, std::abs(yi - want) / std::abs(want));
    }
    EXPECT_LE(worst, 1.0 / 256 + 1e-6) << n;
    if (n > 1) {
      EXPECT_GT(worst, 1e-4) << n;  // rounded to bf16, not left in float32
    }
  }
}

}  // namespace

namespace {

// Jobflow's nChw8c pooling (max, average over the window's elements inside
// the input, global average) against a direct loop: pads, strides, windows
// cut by the edges, a padded channel block; a NaN in a window is its
// maximum (and its average).
TEST(Avx2Kernels, PoolingMatchesADirectLoop) {
  if (!flow::cpu::Winograd::supported()) GTEST_SKIP() << "no AVX2/FMA on this CPU";  // AVX-512 CPUs run them too
  struct Case {
    int64_t N, C, H, W, kh, kw, s, pad, OH, OW;
  };
  const std::vector<Case> cases = {
      {1, 16, 12, 12, 3, 3, 2, 1, 6, 6},  // resnet's max pool
      {2, 12, 7, 9, 2, 2, 2, 0, 3, 4},    // 12 channels: a padded block
      {1, 8, 5, 5, 3, 3, 1, 1, 5, 5},     // every window cut at the border
      {3, 24, 7, 7, 7, 7, 1, 0, 1, 1},    // global average pool
      {1, 8, 6, 6, 3, 3, 2, 0, 3, 3},     // the last window past the edge (ceil mode)
  };
  for (const Case& c : cases) {
    const int64_t CB = (c.C + 7) / 8;
    Tensor x = random_float32({c.N, CB * 8, c.H, c.W}, 50, -3.f, 3.f);  // already nChw8c-shaped storage
    // Some NaN: a max pooling's window holding one gives NaN.
    for (int64_t i = 3; i < x.numel(); i += 29) x.data<float>()[i] = NAN;
    int64_t nan_windows = 0;
    for (bool max : {true, false}) {
      const std::string name = (max ? "max " : "avg ") + std::to_string(c.H) + "x" + std::to_string(c.W) + " k" +
                               std::to_string(c.kh) + " s" + std::to_string(c.s) + " pad " + std::to_string(c.pad);
      flow::cpu::Pool8cParams p{c.N, CB, c.H, c.W, c.OH, c.OW, c.kh, c.kw, c.s, c.s, c.pad, c.pad, max};
      std::vector<float> y(static_cast<size_t>(c.N * CB * c.OH * c.OW * 8), 12345.f);
      flow::cpu::pool_nchw8c(p, x.data<float>(), y.data());
      double worst = 0;
      for (int64_t q = 0; q < c.N * CB; ++q)
        for (int64_t oh = 0; oh < c.OH; ++oh)
          for (int64_t ow = 0; ow < c.OW; ++ow)
            for (int64_t l = 0; l < 8; ++l) {
              double acc = max ? -INFINITY : 0.0;
              int64_t n = 0;
              for (int64_t i = 0; i < c.kh; ++i)
                for (int64_t j = 0; j < c.kw; ++j) {
                  const int64_t h = oh * c.s - c.pad + i, w = ow * c.s - c.pad + j;
                  if (h < 0 || h >= c.H || w < 0 || w >= c.W) continue;
                  const double v = x.data<float>()[((q * c.H + h) * c.W + w) * 8 + l];
                  acc = !max ? acc + v : std::isnan(acc) ? acc : std::isnan(v) || v > acc ? v : acc;
                  ++n;
                }
              if (!max) acc /= static_cast<double>(n);
              const float got = y[((q * c.OH + oh) * c.OW + ow) * 8 + l];
              if (std::isnan(acc)) {
                nan_windows += max;
                EXPECT_TRUE(std::isnan(got)) << name << " at " << q << ", " << oh << ", " << ow << ", " << l;
              } else {
                worst = std::max(worst, std::abs(acc - got));
              }
            }
      EXPECT_LE(worst, max ? 0.0 : 1e-6) << name;
    }
    EXPECT_GT(nan_windows, 0);
  }
}

}  // namespace

namespace {

// An inverted residual's expansion (1x1 + relu6) and its stride-2
// depthwise convolution (3x3 or 5x5, + relu6, bias) become one node: the
// depthwise one as oneDNN's "dw" post-op. Not with a stride-1 depthwise
// convolution (no gain measured), nor when the depthwise output is returned.
// (oneDNN 2.6 fuses on AVX2 from about 56x56; below it offers only a
// "ref_fused" sequence of the two kernels, which the pass leaves alone.)
TEST_F(Layout, ExpansionAndStride2DepthwiseFuse) {
  const Tensor x = random_float32({2, 16, 56, 55}, 60);
  for (int64_t k : {3, 5}) {
    for (int64_t stride : {2, 1}) {
      // (Appended, not "k" + ...: GCC 12 warned -Wrestrict about that one.)
      std::string n = "k";
      n += std::to_string(k) + "s" + std::to_string(stride);
      auto r = run_both("dwf_" + n, x, [&](Blob b) {
        Blob e = flow::clip(conv(b, "dwf_e_" + n, 48, 1), 0.0, 6.0);
        const int64_t p = k / 2;
        Blob d = flow::nn::conv2d(e, var("dwf_d_" + n, {48, 1, k, k}), stride, std::vector<int64_t>{p, p, p, p}, 1, 48);
        d = flow::clip(flow::nn::bias_add(d, var("dwf_db_" + n, {48}), 1), 0.0, 6.0);
        return conv(d, "dwf_p_" + n, 24, 1);
      });
      if (flow::cpu::own_avx2_kernels()) {  // oneDNN's AVX2 1x1 kernel fuses it
        EXPECT_EQ(count(r.ops, "conv2d"), stride == 2 ? 2 : 3) << n << "\n" << r.plan;
        EXPECT_EQ(any_has(r.ops, "conv2d", "fused=clip+dw+clip"), stride == 2) << n << "\n" << r.plan;
      }
      EXPECT_LE(rel_diff(r.fused, r.ref), 1e-5) << n << "\n" << r.plan;
    }
  }
  // The depthwise output returned: two convolutions as written.
  auto define = [&](bool fusion) {
    return flow::global_function(flow::Predict, flow::function_config().name(fusion ? "dwr" : "dwr_ref").enable_fusion(fusion),
                                 {flow::Numpy::Placeholder(x.shape())}, [](Blob b) -> std::tuple<flow::Numpy, flow::Numpy> {
                                   Blob e = flow::nn::relu(conv(b, "dwr_e", 32, 1));
                                   Blob d = flow::nn::conv2d(e, var("dwr_d", {32, 1, 3, 3}), 2,
                                                             std::vector<int64_t>{1, 1, 1, 1}, 1, 32);
                                   return {d, conv(flow::nn::relu(d), "dwr_p", 8, 1)};
                                 });
  };
  auto f = define(true), rf = define(false);
  auto [d1, y1] = f(x);
  auto [d2, y2] = rf(x);
  EXPECT_FALSE(any_has(f.compiled()->plan().op_sequence(), "conv2d", "+dw")) << f.compiled()->describe();
  EXPECT_LE(rel_diff(d1, d2), 1e-5);
  EXPECT_LE(rel_diff(y1, y2), 1e-5);
}

}  // namespace

namespace {

// Where oneDNN has AVX-512 kernels, an expansion (1x1) and the depthwise
// convolution that alone reads it run as one node on Jobflow's own kernel
// (cpu/expand_dw.h, "algo=expand_dw"), row by row: stride 1 and 2, 3x3
// and 5x5, symmetric and SAME pads, a network's first convolution (3x3,
// stride 2, on 3 channels, its padding made around the image) in place
// of the 1x1, the activations of mobilenet_v2
// (relu6), ssdlite320 (hardswish) and efficientnet_b0 (swish) or none,
// channel counts that are not multiples of 16, rows that are not a
// multiple of the kernel's pixel tiles, one to three images, a
// squeeze-and-excitation reading the depthwise output; each against the
// graph as written. Every output element is summed by one thread in one
// order, so the bits do not depend on the thread count (bands of rows or
// groups of channels per image at 2 threads, whole images at 1); new
// weights are packed again.
TEST_F(Layout, ExpansionAndDepthwiseRunTogetherOnAvx512) {
  struct Act {
    const char* name;
    std::function<Blob(Blob)> f;
  };
  const std::vector<Act> acts = {
      {"relu6", [](Blob y) { return flow::clip(y, 0.0, 6.0); }},
      {"hardswish", [](Blob y) { return flow::mul(y, flow::nn::hard_sigmoid(y, 1.0 / 6, 0.5)); }},
      {"swish", [](Blob y) { return flow::mul(y, flow::math::sigmoid(y)); }},
      {"none", [](Blob y) { return y; }},
  };
  struct Case {
    Shape x;
    int64_t e, k, stride;
    bool same;
    size_t act;
    bool se;         // a squeeze-and-excitation after the depthwise convolution
    int64_t k1 = 1;  // the first convolution: 1x1, or a network's first layer (3x3, stride 2, SAME)
  };
  const std::vector<Case> cases = {
      {{1, 16, 40, 37}, 40, 3, 1, false, 0, false},    {{1, 16, 40, 37}, 40, 3, 2, false, 0, false},
      {{2, 12, 21, 23}, 72, 5, 1, false, 1, false},    {{3, 12, 22, 22}, 72, 5, 2, true, 1, true},
      {{1, 24, 7, 7}, 144, 3, 1, false, 2, true},      {{1, 24, 16, 16}, 96, 3, 2, true, 3, false},
      {{1, 3, 34, 33}, 32, 3, 1, false, 0, false, 3},  {{2, 3, 30, 30}, 16, 3, 1, false, 1, false, 3},
      {{1, 3, 27, 32}, 24, 3, 2, true, 2, true, 3},
  };
  flow::cpu::ScopedThreads restore(0);  // the OpenMP count back, even when a call throws
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const Act& a = acts[c.act];
    const std::string n = "xdw" + std::to_string(i);
    const std::string what = n + " (" + a.name + ")";
    const Tensor x = random_float32(c.x, 70 + static_cast<int>(i), -2.f, 2.f);
    int64_t dw_rows = 0;
    auto define = [&](bool fusion) {
      return flow::global_function(
          flow::Predict, flow::function_config().name(n + (fusion ? "" : "_ref")).enable_fusion(fusion).num_threads(2),
          {flow::Numpy::Placeholder(x.shape())}, [&](Blob b) -> flow::Numpy {
            Blob e = a.f(flow::nn::bias_add(conv(b, n + "_e", c.e, c.k1, 1, c.k1 > 1 ? 2 : 1), var(n + "_eb", {c.e}), 1));
            const int64_t p = c.k / 2;
            Blob w = var(n + "_d", {c.e, 1, c.k, c.k});
            Blob d = c.same ? flow::nn::conv2d(e, w, c.stride, "SAME", 1, c.e)
                            : flow::nn::conv2d(e, w, c.stride, std::vector<int64_t>{p, p, p, p}, 1, c.e);
            d = a.f(flow::nn::bias_add(d, var(n + "_db", {c.e}), 1));
            if (c.se) d = flow::mul(d, flow::math::sigmoid(flow::reduce_mean(d, {2, 3}, true)));
            dw_rows = d.shape()[2];
            return conv(d, n + "_p", 8, 1);
          });
    };
    auto f = define(true), ref = define(false);
    const Tensor got = f(x);
    EXPECT_LE(rel_diff(got, ref(x)), 1e-5) << what << "\n" << f.compiled()->describe();
    if (!flow::cpu::LayoutConv::own_expand_dw()) continue;
    const auto ops = f.compiled()->plan().op_sequence();
    // The 1x1 convolution after it joins too with an image per thread or on
    // tall images (see the next test).
    const bool projected = !c.se && (c.x[0] >= 2 || dw_rows >= 28);
    EXPECT_EQ(count(ops, "conv2d"), projected ? 1 : 2) << what << "\n" << f.compiled()->describe();
    EXPECT_TRUE(any_has(ops, "conv2d", "algo=expand_dw")) << what << "\n" << f.compiled()->describe();
    auto& plan = const_cast<flow::Plan&>(f.compiled()->plan());
    for (int t : {1, 2}) {
      omp_set_num_threads(t);
      EXPECT_TRUE(plan.run({x})[0].equal(got)) << what << " at " << t << " threads";
    }
    flow::session::assign(n + "_d", random_float32({c.e, 1, c.k, c.k}, 90 + static_cast<int>(i)));
    flow::session::assign(n + "_e", random_float32({c.e, c.x[1], c.k1, c.k1}, 95 + static_cast<int>(i)));
    EXPECT_LE(rel_diff(f(x), ref(x)), 1e-5) << what << " after new weights";
  }
}

// Inverted residual blocks (mobilenet_v2's: 1x1 expansion + relu6,
// depthwise + relu6, a linear 1x1 projection, the residual add when the
// shapes allow) on tall images: the projection joins the expansion +
// depthwise node ("fused=clip+dw+clip+pw", one node per block), computed
// from each depthwise row while it is in cache; against the graph as
// written, with the residual in another format (the placeholder, plain) and
// in the kernel's own (a second block after the first), projections to
// channel counts that are not multiples of 16 and with an activation, 1-3
// images, the same bits at 1 and 2 threads, new weights. A short image
// alone (fewer than 14 depthwise rows per thread: plans of 2 threads here)
// keeps the projection as its own node.
TEST_F(Layout, ExpansionDepthwiseAndProjectionRunTogetherOnAvx512) {
  struct Case {
    Shape x;
    int64_t e, k, stride, out;  // expansion channels, depthwise size and stride, projection channels
    bool relu_after;            // a relu after the projection (and no residual)
    int blocks;                 // blocks in a row (the second one stride 1, its residual the first's output)
    bool joins;
  };
  const std::vector<Case> cases = {
      {{1, 24, 56, 56}, 144, 3, 1, 24, false, 1, true},  {{1, 16, 60, 58}, 96, 3, 2, 24, false, 1, true},
      {{2, 32, 28, 28}, 192, 5, 1, 32, false, 1, true},  {{3, 8, 30, 31}, 40, 3, 1, 20, true, 1, true},
      {{1, 16, 64, 57}, 64, 3, 2, 16, false, 2, true},   {{1, 24, 14, 14}, 144, 3, 1, 24, false, 1, false},
  };
  flow::cpu::ScopedThreads restore(0);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string n = "xdwp" + std::to_string(i);
    const Tensor x = random_float32(c.x, 160 + static_cast<int>(i), -2.f, 2.f);
    auto block = [&](Blob b, const std::string& m, int64_t stride) {
      const int64_t cin = b.shape()[1];
      Blob e = flow::clip(flow::nn::bias_add(conv(b, m + "_e", c.e, 1), var(m + "_eb", {c.e}), 1), 0.0, 6.0);
      Blob d = flow::clip(flow::nn::bias_add(conv(e, m + "_d", c.e, c.k, c.e, stride), var(m + "_db", {c.e}), 1), 0.0, 6.0);
      Blob y = flow::nn::bias_add(conv(d, m + "_p", c.out, 1), var(m + "_pb", {c.out}), 1);
      if (c.relu_after) return flow::nn::relu(y);
      return stride == 1 && cin == c.out ? flow::add(y, b) : y;
    };
    auto define = [&](bool fusion) {
      return flow::global_function(
          flow::Predict, flow::function_config().name(n + (fusion ? "" : "_ref")).enable_fusion(fusion).num_threads(2),
          {flow::Numpy::Placeholder(x.shape())}, [&](Blob b) -> flow::Numpy {
            Blob y = block(b, n + "a", c.stride);
            if (c.blocks == 2) y = block(y, n + "b", 1);
            return y;
          });
    };
    auto f = define(true), ref = define(false);
    const Tensor got = f(x);
    const std::string plan = f.compiled()->describe();
    EXPECT_LE(rel_diff(got, ref(x)), 1e-5) << n << "\n" << plan;
    if (!flow::cpu::LayoutConv::own_expand_dw()) continue;
    const auto ops = f.compiled()->plan().op_sequence();
    EXPECT_EQ(count(ops, "conv2d"), c.joins ? c.blocks : 2 * c.blocks) << n << "\n" << plan;
    EXPECT_EQ(any_has(ops, "conv2d", "+pw"), c.joins) << n << "\n" << plan;
    if (c.joins) {
      EXPECT_TRUE(any_has(ops, "conv2d", c.relu_after ? "fused=clip+dw+clip+pw+relu" : "algo=expand_dw")) << n << "\n" << plan;
    }
    auto& p = const_cast<flow::Plan&>(f.compiled()->plan());
    for (int t : {1, 2}) {
      omp_set_num_threads(t);
      EXPECT_TRUE(p.run({x})[0].equal(got)) << n << " at " << t << " threads";
    }
    if (c.e % 16 != 0) {
      // An infinite input: relu6 makes it finite in the graph as written; the
      // kernel's padding channels (40 of 48) must not turn it into NaN.
      Tensor xi = x.clone();
      xi.data<float>()[5] = INFINITY;
      const Tensor yf = f(xi), yr = ref(xi);
      int64_t nan_f = 0, nan_r = 0;
      for (int64_t k = 0; k < yf.numel(); ++k) nan_f += std::isnan(yf.data<float>()[k]);
      for (int64_t k = 0; k < yr.numel(); ++k) nan_r += std::isnan(yr.data<float>()[k]);
      EXPECT_EQ(nan_f, nan_r) << n << " with an infinite input";
    }
    omp_set_num_threads(2);
    flow::session::assign(n + "a_p", random_float32({c.out, c.e, 1, 1}, 170 + static_cast<int>(i)));
    flow::session::assign(n + "a_pb", random_float32({c.out}, 175 + static_cast<int>(i)));
    EXPECT_LE(rel_diff(f(x), ref(x)), 1e-5) << n << " after new weights";
  }
}

// A block whose shortcut starts at the first convolution's output, before
// the depthwise one (mobilenet_v3's first block after its stem, as in
// ssdlite320's backbone: stem -> depthwise -> projection + stem): the three
// convolutions become one node ("+pw+sum") that adds the first one's output
// from the rows the kernel keeps, so that output never reaches memory,
// though two convolutions read it. Against the graph as written, with the
// stem (3x3, stride 2, on the image) or a 1x1 expansion first, 1-2 images,
// the same bits at 1 and 2 threads, new weights. Not joined: channels that
// are not a multiple of 16 (the kept rows are padded to 16), a first output
// also returned.
TEST_F(Layout, AShortcutFromTheFirstConvolutionIsAddedFromTheKeptRows) {
  struct Case {
    Shape x;
    int64_t e, k1, k;   // first convolution's channels and size, depthwise size
    bool returned;      // the first convolution's output is returned too
    bool joins;
  };
  const std::vector<Case> cases = {
      {{1, 3, 64, 66}, 16, 3, 3, false, true},   {{2, 16, 30, 31}, 32, 1, 5, false, true},
      {{1, 8, 60, 58}, 24, 1, 3, false, false},  {{1, 3, 64, 64}, 16, 3, 3, true, false},
  };
  flow::cpu::ScopedThreads restore(0);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string n = "xsc" + std::to_string(i);
    const Tensor x = random_float32(c.x, 190 + static_cast<int>(i), -2.f, 2.f);
    auto define = [&](bool fusion) {
      return flow::global_function(
          flow::Predict, flow::function_config().name(n + (fusion ? "" : "_ref")).enable_fusion(fusion).num_threads(2),
          {flow::Numpy::Placeholder(x.shape())}, [&](Blob b) -> std::tuple<flow::Numpy, flow::Numpy> {
            Blob e = flow::nn::bias_add(conv(b, n + "_e", c.e, c.k1, 1, c.k1 > 1 ? 2 : 1), var(n + "_eb", {c.e}), 1);
            e = flow::mul(e, flow::nn::hard_sigmoid(e, 1.0 / 6, 0.5));  // hardswish
            Blob d = flow::nn::relu(flow::nn::bias_add(conv(e, n + "_d", c.e, c.k, c.e), var(n + "_db", {c.e}), 1));
            Blob y = flow::add(flow::nn::bias_add(conv(d, n + "_p", c.e, 1), var(n + "_pb", {c.e}), 1), e);
            return {y, c.returned ? e : flow::reduce_mean(y)};
          });
    };
    auto f = define(true), ref = define(false);
    auto [got, other] = f(x);
    auto [want, other_ref] = ref(x);
    const std::string plan = f.compiled()->describe();
    EXPECT_LE(rel_diff(got, want), 1e-5) << n << "\n" << plan;
    EXPECT_LE(rel_diff(other, other_ref), 1e-5) << n << "\n" << plan;
    if (!flow::cpu::LayoutConv::own_expand_dw()) continue;
    const auto ops = f.compiled()->plan().op_sequence();
    EXPECT_EQ(count(ops, "conv2d"), c.joins ? 1 : 3) << n << "\n" << plan;
    EXPECT_EQ(any_has(ops, "conv2d", "fused=hardswish+dw+relu+pw+sum"), c.joins) << n << "\n" << plan;
    auto& p = const_cast<flow::Plan&>(f.compiled()->plan());
    for (int t : {1, 2}) {
      omp_set_num_threads(t);
      EXPECT_TRUE(p.run({x})[0].equal(got)) << n << " at " << t << " threads";
    }
    omp_set_num_threads(2);
    flow::session::assign(n + "_e", random_float32({c.e, c.x[1], c.k1, c.k1}, 200 + static_cast<int>(i)));
    flow::session::assign(n + "_p", random_float32({c.e, c.e, 1, 1}, 205 + static_cast<int>(i)));
    EXPECT_LE(rel_diff(std::get<0>(f(x)), std::get<0>(ref(x))), 1e-5) << n << " after new weights";
  }
}

// A global average pool of a channels-last image: after an expansion +
// depthwise node on Jobflow's kernel (a squeeze-and-excitation's squeeze)
// it is that node's second output, summed while the rows are written
// ("fused=...+gap": each output row's sums, then the rows in order);
// after a oneDNN convolution writing channels-last it runs Jobflow's loop
// with AVX-512 ("algo=gap_nhwc": each image's pixels in 8 runs of rows
// summed apart and added in order). Either way the bits are the same at
// 1, 2 and 3 threads; channel counts that are not multiples of 16 and over
// 128 (two blocks of registers), fewer pixels than runs, 1-3 images, the
// pooled tensor also returned; against the graph as written.
TEST_F(Layout, GlobalAveragePoolOfChannelsLastSumsRowsInOrder) {
  struct Case {
    Shape x;
    int64_t e, stride;
    bool dw = true;               // the pool reads a depthwise output (else a 1x1 convolution's)
    bool also_returned = false;  // the pooled tensor is returned too (instead of a mean of the means)
  };
  const std::vector<Case> cases = {{{1, 16, 40, 37}, 40, 1},
                                   {{3, 12, 7, 7}, 144, 1},
                                   {{1, 8, 4, 4}, 200, 2},
                                   {{2, 16, 30, 30}, 24, 2},
                                   {{2, 16, 30, 30}, 24, 2, true, true},
                                   {{1, 32, 7, 7}, 160, 1, false},
                                   {{1, 16, 9, 11}, 200, 1, false}};
  flow::cpu::ScopedThreads restore(0);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string n = "gap" + std::to_string(i);
    const Tensor x = random_float32(c.x, 220 + static_cast<int>(i), -2.f, 2.f);
    auto define = [&](bool fusion) {
      return flow::global_function(
          flow::Predict, flow::function_config().name(n + (fusion ? "" : "_ref")).enable_fusion(fusion).num_threads(2),
          {flow::Numpy::Placeholder(x.shape())}, [&](Blob b) -> std::tuple<flow::Numpy, flow::Numpy> {
            Blob d = flow::clip(conv(b, n + "_e", c.e, 1), 0.0, 6.0);
            if (c.dw) d = flow::clip(conv(d, n + "_d", c.e, 3, c.e, c.stride), 0.0, 6.0);
            Blob g = flow::reduce_mean(d, {2, 3}, true);
            return {g, c.also_returned ? d : flow::reduce_mean(g)};
          });
    };
    auto f = define(true), ref = define(false);
    const auto [got, other] = f(x);
    const auto [want, other_ref] = ref(x);
    const std::string plan = f.compiled()->describe();
    EXPECT_EQ(got.shape(), (Shape{c.x[0], c.e, 1, 1})) << n;
    EXPECT_LE(rel_diff(got, want), 1e-6) << n << "\n" << plan;
    EXPECT_LE(rel_diff(other, other_ref), 1e-6) << n << "\n" << plan;
    if (!flow::cpu::LayoutConv::own_expand_dw()) continue;
    const auto ops = f.compiled()->plan().op_sequence();
    if (c.dw) {
      // (A returned depthwise output keeps its pair apart: no kernel to pool in.)
      EXPECT_EQ(any_has(ops, "conv2d", "+gap"), !c.also_returned) << n << "\n" << plan;
      EXPECT_EQ(count(ops, "reduce_mean"), 1) << n << "\n" << plan;  // the other return's, or the pool's
    } else {
      EXPECT_TRUE(any_has(ops, "reduce_mean", "algo=gap_nhwc")) << n << "\n" << plan;
    }
    auto& p = const_cast<flow::Plan&>(f.compiled()->plan());
    for (int t : {1, 2, 3}) {
      omp_set_num_threads(t);
      EXPECT_TRUE(p.run({x})[0].equal(got)) << n << " at " << t << " threads";
    }
  }
}

// A global average pool without the dims kept (x.mean((2, 3)) in PyTorch:
// (N, C)) of a blob in the chain's format is lowered too where the pool
// writes (N, C)'s row-major bytes (32 channels: channels-last, nChw16c and
// nChw8c alike), so the convolution before it stays in the chain; 24
// channels may run as written (nChw16c's padding). A convolution with a
// relu whose output only leaves the job (a return) computes in the chain's
// format and is reordered after when its output is large (oneDNN's
// row-major gemm convolution applies the relu in a scalar loop), row-major
// straight when small or on 1 x 1 images. Against the graph as written.
TEST_F(Layout, PoolWithoutKeptDimsAndReturnedMapsStayInTheChain) {
  struct Case {
    Shape x;
    int64_t k, rk;  // the pooled blob's channels, the returned convolution's
    bool lowered;   // the pool is lowered whatever format the chain has
    bool chain;     // the returned convolution writes the chain's format (> 16K elements)
  };
  const std::vector<Case> cases = {{{1, 16, 20, 19}, 32, 64, true, true},
                                   {{2, 8, 9, 9}, 32, 40, true, false},
                                   {{1, 16, 12, 10}, 24, 160, false, true}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string n = "gapnk" + std::to_string(i);
    const Tensor x = random_float32(c.x, 330 + static_cast<int>(i), -2.f, 2.f);
    auto define = [&](bool fusion) {
      return flow::global_function(
          flow::Predict, flow::function_config().name(n + (fusion ? "" : "_ref")).enable_fusion(fusion),
          {flow::Numpy::Placeholder(x.shape())}, [&](Blob b) -> std::tuple<flow::Numpy, flow::Numpy, flow::Numpy> {
            Blob d = flow::nn::relu(conv(b, n + "_a", c.k, 3));
            Blob r = flow::nn::relu(conv(d, n + "_r", c.rk, 1));  // returned only
            // 1 x 1 images, over 16K outputs in all: still row-major straight
            Blob h = flow::nn::relu(conv(flow::reduce_mean(d, {2, 3}, true), n + "_h", 9000, 1));
            return {flow::reduce_mean(d, {2, 3}, false), r, h};
          });
    };
    auto f = define(true), ref = define(false);
    const auto [g, r, h] = f(x);
    const auto [g_ref, r_ref, h_ref] = ref(x);
    const std::string plan = f.compiled()->describe();
    EXPECT_EQ(g.shape(), (Shape{c.x[0], c.k})) << n;
    EXPECT_EQ(r.shape(), (Shape{c.x[0], c.rk, c.x[2], c.x[3]})) << n;
    EXPECT_LE(rel_diff(g, g_ref), 1e-5) << n << "\n" << plan;
    EXPECT_LE(rel_diff(r, r_ref), 1e-5) << n << "\n" << plan;
    EXPECT_LE(rel_diff(h, h_ref), 1e-5) << n << "\n" << plan;
    // The plan's first line holding `text`.
    auto line_with = [&](const std::string& text) {
      const size_t at = plan.find(text);
      if (at == std::string::npos) return std::string();
      const size_t from = plan.rfind('\n', at) + 1;
      return plan.substr(from, plan.find('\n', at) - from);
    };
    auto line = [&](const std::string& out) { return line_with("-> ((" + out + ") float32)"); };
    auto dims = [](std::initializer_list<int64_t> v) {
      std::string s;
      for (int64_t d : v) s += (s.empty() ? "" : ", ") + std::to_string(d);
      return s;
    };
    const std::string pool = line(dims({c.x[0], c.k}));
    ASSERT_FALSE(pool.empty()) << n << "\n" << plan;
    // Lowered: a layout of its own, read from the chain (no row-major copy first).
    if (c.lowered) {
      EXPECT_NE(pool.find("layout="), std::string::npos) << n << "\n" << plan;
    }
    // The returned convolution (its weights' shape) and a reorder to its output.
    const std::string returned = line_with("(" + dims({c.rk, c.k, 1, 1}) + ") float32)");
    ASSERT_FALSE(returned.empty()) << n << "\n" << plan;
    const std::string head = line_with("(9000, " + std::to_string(c.k) + ", 1, 1) float32)");
    EXPECT_NE(head.find("layout=f32:abcd"), std::string::npos) << n << "\n" << plan;
    bool reordered = false;  // a reorder node writes the returned tensor
    std::istringstream lines(plan);
    for (std::string l; std::getline(lines, l);)
      reordered |= l.find("= reorder[") != std::string::npos &&
                   l.find("-> ((" + dims({c.x[0], c.rk, c.x[2], c.x[3]}) + ") float32)") != std::string::npos;
    EXPECT_EQ(returned.find("layout=f32:abcd") == std::string::npos, c.chain) << n << "\n" << plan;
    EXPECT_EQ(reordered, c.chain) << n << "\n" << plan;
  }
}

// A returned map the chain also reads leaves through a reorder that
// writes straight into the returned tensor (Plan::run): each result right,
// a result the caller holds never written again, a released one's memory
// used for a later result; against the graph as written.
TEST_F(Layout, ReturnedMapsAreWrittenIntoTheResults) {
  const Shape xs{2, 8, 12, 11};
  auto define = [&](bool fusion) {
    return flow::global_function(
        flow::Predict, flow::function_config().name(fusion ? "rmap" : "rmap_ref").enable_fusion(fusion),
        {flow::Numpy::Placeholder(xs)}, [&](Blob b) -> std::tuple<flow::Numpy, flow::Numpy> {
          Blob d = flow::nn::relu(conv(b, "rmap_a", 32, 3));
          return {d, flow::nn::relu(conv(d, "rmap_b", 16, 3))};
        });
  };
  auto f = define(true), ref = define(false);
  // The same job without the map among its returns.
  auto second_only = flow::global_function(flow::Predict, flow::function_config().name("rmap_second"),
                                           {flow::Numpy::Placeholder(xs)}, [&](Blob b) -> flow::Numpy {
                                             Blob d = flow::nn::relu(conv(b, "rmap_a", 32, 3));
                                             return flow::nn::relu(conv(d, "rmap_b", 16, 3));
                                           });
  std::vector<Tensor> xs_, want;
  for (int i = 0; i < 3; ++i) {
    xs_.push_back(random_float32(xs, 400 + i));
    want.push_back(std::get<0>(ref(xs_.back())));
  }
  const std::string plan = f.compiled()->describe();
  // The map leaves the chain's format through a reorder made for the return,
  // written straight into the result: the arena holds no space for it.
  if (keeps_format(f.compiled()->plan().op_sequence(), "conv2d")) {
    EXPECT_NE(plan.find("= reorder["), std::string::npos) << plan;
    EXPECT_EQ(f.compiled()->plan().outputs_written_directly(), 1) << plan;
    EXPECT_EQ(f.compiled()->plan().unshared_bytes(), second_only.compiled()->plan().unshared_bytes())
        << plan << second_only.compiled()->describe();
  }
  // Held: three results, each its own call's.
  std::vector<Tensor> held;
  for (const Tensor& x : xs_) held.push_back(std::get<0>(f(x)));
  for (int i = 0; i < 3; ++i) EXPECT_LE(rel_diff(held[i], want[i]), 1e-5) << "result " << i << "\n" << plan;
  held.clear();
  // Released: its memory holds the next result (not a tensor made between).
  const void* at = std::get<0>(f(xs_[0])).raw();
  Tensor between(xs, flow::Float);
  Tensor y = std::get<0>(f(xs_[1]));
  EXPECT_EQ(y.raw(), at);
  EXPECT_NE(between.raw(), at);
  for (int i = 0; i < 5; ++i) {
    y = std::get<0>(f(xs_[i % 3]));
    EXPECT_LE(rel_diff(y, want[i % 3]), 1e-5) << "call " << i;
  }
}

// Max pooling of a channels-last blob (resnet18's 3x3 stride-2 pool after
// its stem) runs Jobflow's loop with AVX-512 ("algo=max_nhwc"): windows
// over the edges (pads never win), odd sizes, channel counts that are not
// multiples of 16 and over 128, two images; a NaN in a window is the
// output (as max_pool_2x2 and PyTorch have it), in the graph as written
// too (cpu::max_pool_plain; oneDNN's pooling, which ran it before, dropped
// the NaN).
TEST_F(Layout, MaxPoolOfChannelsLastRunsJobflowsLoop) {
  struct Case {
    Shape x;
    int64_t k, ksize, stride, pad;
  };
  const std::vector<Case> cases = {{{1, 3, 41, 37}, 24, 3, 2, 1}, {{2, 3, 20, 21}, 200, 2, 2, 0}, {{1, 4, 15, 15}, 64, 3, 1, 1}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string n = "mpn" + std::to_string(i);
    Tensor x = random_float32(c.x, 240 + static_cast<int>(i), -2.f, 2.f);
    // (A clip from -1: the stem's outputs go below zero, so the pool stays
    // a node of its own and the padding must never win.)
    auto r = run_both(n, x, [&](Blob b) {
      Blob s = flow::clip(conv(b, n + "_stem", c.k, 3, 1, 2), -1.0, 6.0);
      const std::vector<int64_t> pads{c.pad, c.pad, c.pad, c.pad};
      return conv(flow::nn::max_pool2d(s, c.ksize, c.stride, pads), n + "_after", 16, 1);
    });
    EXPECT_LE(rel_diff(r.fused, r.ref), 1e-5) << n << "\n" << r.plan;
    if (__builtin_cpu_supports("avx512f") && !flow::cpu::avx2_at_most()) {
      EXPECT_TRUE(any_has(r.ops, "max_pool2d", "algo=max_nhwc")) << n << "\n" << r.plan;
    }
  }
  // A NaN pixel: every window that holds one of its outputs gives NaN.
  const std::string n = "mpn_nan";
  Tensor x = random_float32({1, 3, 16, 16}, 250, -2.f, 2.f);
  x.data<float>()[5 * 16 + 7] = NAN;
  auto r = run_both(n, x, [&](Blob b) {
    Blob s = conv(b, n + "_stem", 32, 3, 1, 2);
    return flow::nn::max_pool2d(s, 3, 2, std::vector<int64_t>{1, 1, 1, 1});
  });
  int64_t nan_f = 0, nan_r = 0;
  for (int64_t k = 0; k < r.fused.numel(); ++k) nan_f += std::isnan(r.fused.data<float>()[k]);
  for (int64_t k = 0; k < r.ref.numel(); ++k) nan_r += std::isnan(r.ref.data<float>()[k]);
  if (__builtin_cpu_supports("avx512f") && !flow::cpu::avx2_at_most()) {
    // The stem's outputs from the NaN pixel: 32 channels at each of the
    // 2 x 2 output pixels whose 3x3 stride-2 windows hold pixel (5, 7); the
    // pool's windows over them.
    EXPECT_GT(nan_f, 0) << r.plan;
    EXPECT_EQ(nan_f, nan_r) << r.plan;
    int64_t windows = 0;  // pool outputs whose window holds a stem output with a NaN
    for (int64_t ph = 0; ph < 4; ++ph)
      for (int64_t pw = 0; pw < 4; ++pw) {
        bool hit = false;
        for (int64_t sh : {2, 3})
          for (int64_t sw : {3, 4}) hit |= sh >= 2 * ph - 1 && sh <= 2 * ph + 1 && sw >= 2 * pw - 1 && sw <= 2 * pw + 1;
        windows += hit;
      }
    EXPECT_EQ(nan_f, 32 * windows) << r.plan;
  }
}

// A network's first convolution (at most 4 input channels) whose
// activation is never negative and the max pool that alone reads it become
// one node on Jobflow's kernel (fused=maxpool, algo=expand_dw): resnet18's
// stem and pool, odd sizes, channel counts that are not multiples of 16, a
// 5x5 stride-1 pool, two images; a NaN pixel gives NaN in every pool window
// over it, as the nodes as written do. Not fused: an activation that goes
// below zero (the kept rows' zero padding would win), and a stem output
// read elsewhere too.
TEST_F(Layout, AStemAndTheMaxPoolAfterItAreOneNode) {
  struct Case {
    Shape x;
    int64_t k, ksize, stride, pool, pool_stride, pool_pad;
    bool clip6;  // clip(0, 6) instead of relu
  };
  const std::vector<Case> cases = {{{1, 3, 64, 64}, 64, 7, 2, 3, 2, 1, false},
                                   {{2, 3, 41, 37}, 24, 3, 2, 3, 2, 1, true},
                                   {{1, 4, 15, 17}, 40, 3, 1, 5, 1, 2, false},
                                   {{2, 1, 23, 19}, 16, 5, 2, 3, 1, 1, true}};
  const bool own = flow::cpu::LayoutConv::own_expand_dw();
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string n = "stem_pool" + std::to_string(i);
    Tensor x = random_float32(c.x, 270 + static_cast<int>(i), -2.f, 2.f);
    auto r = run_both(n, x, [&](Blob b) {
      const int64_t h = c.ksize / 2;
      Blob y = flow::nn::conv2d(b, var(n + "_w", {c.k, c.x[1], c.ksize, c.ksize}), c.stride,
                                std::vector<int64_t>{h, h, h, h});
      y = flow::nn::bias_add(y, var(n + "_b", {c.k}), 1);
      y = c.clip6 ? flow::clip(y, 0.0, 6.0) : flow::nn::relu(y);
      const int64_t q = c.pool_pad;
      return flow::nn::max_pool2d(y, c.pool, c.pool_stride, std::vector<int64_t>{q, q, q, q});
    });
    EXPECT_LE(rel_diff(r.fused, r.ref), 1e-5) << n << "\n" << r.plan;
    if (own) {
      EXPECT_TRUE(any_has(r.ops, "conv2d", "maxpool layout=f32:acdb algo=expand_dw")) << n << "\n" << r.plan;
      EXPECT_EQ(count(r.ops, "max_pool2d"), 0) << n << "\n" << r.plan;
    }
  }
  // A NaN pixel.
  {
    Tensor x = random_float32({1, 3, 16, 16}, 280, -2.f, 2.f);
    x.data<float>()[5 * 16 + 7] = NAN;
    auto r = run_both("stem_pool_nan", x, [&](Blob b) {
      Blob y = flow::nn::relu(conv(b, "stem_pool_nan_w", 32, 3, 1, 2));
      return flow::nn::max_pool2d(y, 3, 2, std::vector<int64_t>{1, 1, 1, 1});
    });
    int64_t nan_f = 0, nan_r = 0;
    for (int64_t k = 0; k < r.fused.numel(); ++k) nan_f += std::isnan(r.fused.data<float>()[k]);
    for (int64_t k = 0; k < r.ref.numel(); ++k) nan_r += std::isnan(r.ref.data<float>()[k]);
    EXPECT_GT(nan_r, 0) << r.plan;
    EXPECT_EQ(nan_f, nan_r) << r.plan;
    EXPECT_LE(rel_diff(r.fused, r.ref), 1e-5) << r.plan;  // (the same NaNs on both sides: no difference)
    if (own) EXPECT_TRUE(any_has(r.ops, "conv2d", "fused=maxpool")) << r.plan;
  }
  // Not fused: values below zero; the stem's output returned as well.
  {
    const Tensor x = random_float32({1, 3, 20, 20}, 281, -2.f, 2.f);
    auto r = run_both("stem_pool_neg", x, [&](Blob b) {
      Blob y = flow::clip(conv(b, "stem_pool_neg_w", 16, 3, 1, 2), -1.0, 6.0);
      return flow::nn::max_pool2d(y, 3, 2, std::vector<int64_t>{1, 1, 1, 1});
    });
    EXPECT_LE(rel_diff(r.fused, r.ref), 1e-5) << r.plan;
    EXPECT_EQ(count(r.ops, "max_pool2d"), 1) << r.plan;
    EXPECT_FALSE(any_has(r.ops, "conv2d", "maxpool")) << r.plan;
  }
  {
    const Tensor x = random_float32({1, 3, 20, 20}, 282, -2.f, 2.f);
    auto f = flow::global_function(flow::Predict, flow::function_config().name("stem_pool_two"),
                                   {flow::Numpy::Placeholder(x.shape())},
                                   [&](Blob b) -> std::tuple<flow::Numpy, flow::Numpy> {
                                     Blob y = flow::nn::relu(conv(b, "stem_pool_two_w", 16, 3, 1, 2));
                                     return {y, flow::nn::max_pool2d(y, 3, 2, std::vector<int64_t>{1, 1, 1, 1})};
                                   });
    f(x);
    const auto ops = f.compiled()->plan().op_sequence();
    EXPECT_EQ(count(ops, "max_pool2d"), 1) << f.compiled()->describe();
    EXPECT_FALSE(any_has(ops, "conv2d", "maxpool")) << f.compiled()->describe();
  }
}

// LayoutPool's max pooling on every format a chain may hand it
// (channels-last, nChw16c and nChw8c with a padded channel block; float32
// and bfloat16): Jobflow's loop, never oneDNN's (which drops a NaN), with
// the output in the input's format; against the plain pooling of the same
// values (bfloat16: the maximum is one of the inputs, so exact). A format
// without the loop is refused (the layout pass then runs the node as
// written).
TEST_F(Layout, MaxPoolOnEveryChainFormatKeepsNaN) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  if (!flow::cpu::own_max_pool_nhwc()) GTEST_SKIP() << "no AVX-512 (F, BW, VL) on this CPU";
  const Shape xs{2, 20, 9, 9}, ys{2, 20, 5, 5};
  auto job = flow::global_function(flow::Predict, flow::function_config().name("mp_formats").enable_fusion(false),
                                   {flow::Numpy::Placeholder(xs)}, [](Blob a) -> flow::Numpy {
                                     return flow::nn::max_pool2d(a, 3, 2, std::vector<int64_t>{1, 1, 1, 1});
                                   });
  std::shared_ptr<const flow::Primitive> mp;
  for (const auto& n : job.compiled()->plan().graph().nodes)
    if (n.op->kind() == flow::OpKind::MaxPool2d) mp = n.op;
  ASSERT_TRUE(mp);
  Tensor x = random_float32(xs, 77, -3.f, 3.f);
  for (int64_t i = 5; i < x.numel(); i += 41) x.data<float>()[i] = NAN;
  const flow::cpu::Pool2dParams p{2, 20, 9, 9, 5, 5, 3, 3, 2, 2, 1, 1, 1, 1, flow::cpu::PoolKind::Max};
  auto& eng = flow::cpu::dnnl_engine();
  auto reorder = [&](dnnl::memory& from, dnnl::memory& to) {
    dnnl::reorder(from, to).execute(flow::cpu::dnnl_stream(), from, to);
    flow::cpu::dnnl_stream().wait();
  };
  EXPECT_FALSE(flow::cpu::LayoutPool::supports(p, dnnl::memory::desc({2, 20, 9, 9}, dt::f32, tag::abcd)));
  EXPECT_THROW(flow::cpu::LayoutPool(mp, {{ys, flow::Float}}, p, dnnl::memory::desc({2, 20, 9, 9}, dt::f32, tag::abcd)),
               std::invalid_argument);
  for (dt type : {dt::f32, dt::bf16}) {
    for (tag t : {tag::acdb, tag::aBcd16b, tag::aBcd8b}) {
      std::string name = type == dt::bf16 ? "bf16 " : "f32 ";
      name += t == tag::acdb ? "acdb" : t == tag::aBcd16b ? "aBcd16b" : "aBcd8b";
      const dnnl::memory::desc bx(xs, type, t);
      ASSERT_TRUE(flow::cpu::LayoutPool::supports(p, bx)) << name;
      dnnl::memory ux(flow::cpu::plain_desc(xs), eng, x.raw()), mx(bx, eng);
      reorder(ux, mx);
      // The values the pooling sees, back in plain float32 (bf16: rounded).
      Tensor xr(xs, flow::Float);
      dnnl::memory uxr(flow::cpu::plain_desc(xs), eng, xr.raw());
      reorder(mx, uxr);
      Tensor want(ys, flow::Float);
      flow::cpu::pool2d_forward(p, xr.data<float>(), want.data<float>(), nullptr);
      flow::cpu::LayoutPool op(mp, {{ys, flow::Float}}, p, bx);
      ASSERT_EQ(op.dst_desc(), dnnl::memory::desc(ys, type, t)) << name;
      dnnl::memory my(op.dst_desc(), eng);
      flow::ExecContext ctx;
      op.eval_cpu({Tensor::wrap(mx.get_data_handle(), xs, flow::Float, nullptr)},
                  {Tensor::wrap(my.get_data_handle(), ys, flow::Float, nullptr)}, ctx);
      Tensor got(ys, flow::Float);
      dnnl::memory ug(flow::cpu::plain_desc(ys), eng, got.raw());
      reorder(my, ug);
      int64_t nans = 0, wrong = 0;
      for (int64_t i = 0; i < got.numel(); ++i) {
        const float g = got.data<float>()[i], w = want.data<float>()[i];
        nans += std::isnan(w);
        wrong += std::isnan(w) ? !std::isnan(g) : !(g == w);
      }
      EXPECT_EQ(wrong, 0) << name << " of " << got.numel();
      EXPECT_GT(nans, 0) << name;
    }
  }
}

// A chain of 1-channel 3x3 convolutions: each fits both as a depthwise
// stage and as a first stage on an image; each joins one pair at most
// (a node taken twice once threw out of the compile).
TEST_F(Layout, AChainOfSingleChannelConvolutionsPairsEachOnce) {
  const Tensor x = random_float32({1, 1, 32, 32}, 150);
  for (int len : {2, 3, 4}) {
    const std::string n = "chain1_" + std::to_string(len);
    auto r = run_both(n, x, [&](Blob b) {
      for (int i = 0; i < len; ++i) b = flow::nn::relu(conv(b, n + "_w" + std::to_string(i), 1, 3));
      return conv(b, n + "_p", 4, 1);
    });
    EXPECT_LE(rel_diff(r.fused, r.ref), 1e-5) << n << "\n" << r.plan;
    if (flow::cpu::LayoutConv::own_expand_dw()) {
      // (With an even count the last pair also takes the 1x1 after it: 32 rows.)
      EXPECT_EQ(count(r.ops, "conv2d"), len / 2 + len % 2 + (len % 2 == 0 ? 0 : 1)) << n << "\n" << r.plan;
    }
  }
}

// efficientnet_b0's block whole, float32: expansion + depthwise with swish
// and the squeeze as the pair's second output ("+gap"), the excitation's
// two convolutions on Jobflow's loop ("algo=small_1x1"), the mul folded
// into the projection ("fused=scale", image by image at batch 3), the
// block's input (a 1x1 convolution's output) added in place; no
// reduce_mean or mul node left. Against the graph as written, again after
// new weights for every convolution.
TEST_F(Layout, SqueezeAndExcitationBlockRunsAsThreeNodes) {
  for (int64_t batch : {1, 3}) {
    const std::string n = "seb" + std::to_string(batch);
    const Tensor x = random_float32({batch, 24, 28, 26}, 170 + static_cast<unsigned>(batch), -2.f, 2.f);
    auto swish = [](Blob y) { return flow::mul(y, flow::math::sigmoid(y)); };
    auto define = [&](bool fusion) {
      return flow::global_function(
          flow::Predict, flow::function_config().name(n + (fusion ? "" : "_ref")).enable_fusion(fusion),
          {flow::Numpy::Placeholder(x.shape())}, [&](Blob i) -> flow::Numpy {
            Blob b = flow::nn::relu(conv(i, n + "_i", 24, 1));
            Blob e = swish(flow::nn::bias_add(conv(b, n + "_e", 144, 1), var(n + "_eb", {144}), 1));
            Blob d = swish(flow::nn::bias_add(conv(e, n + "_d", 144, 3, 144), var(n + "_db", {144}), 1));
            Blob g = flow::reduce_mean(d, {2, 3}, true);
            Blob r = swish(flow::nn::bias_add(conv(g, n + "_r", 6, 1), var(n + "_rb", {6}), 1));
            Blob s = flow::math::sigmoid(flow::nn::bias_add(conv(r, n + "_x", 144, 1), var(n + "_xb", {144}), 1));
            return conv(flow::add(conv(flow::mul(d, s), n + "_p", 24, 1), b), n + "_o", 8, 1);
          });
    };
    auto f = define(true), ref = define(false);
    EXPECT_LE(rel_diff(f(x), ref(x)), 1e-5) << n << "\n" << f.compiled()->describe();
    for (const char* w : {"_i", "_e", "_d", "_r", "_x", "_p", "_o"}) {
      const Shape shape = flow::session::variable(n + w).shape();
      flow::session::assign(n + w, random_float32(shape, 180 + static_cast<unsigned>(shape[0])));
    }
    EXPECT_LE(rel_diff(f(x), ref(x)), 1e-5) << n << " after new weights\n" << f.compiled()->describe();
    if (!flow::cpu::LayoutConv::own_expand_dw()) continue;
    const auto ops = f.compiled()->plan().op_sequence();
    const std::string plan = f.compiled()->describe();
    EXPECT_TRUE(any_has(ops, "conv2d", "swish+dw+swish+gap")) << n << "\n" << plan;
    int64_t small = 0;
    for (const std::string& op : ops) small += op.find("algo=small_1x1") != std::string::npos;
    EXPECT_EQ(small, 2) << n << "\n" << plan;
    EXPECT_TRUE(any_has(ops, "conv2d", "fused=scale+sum")) << n << "\n" << plan;
    EXPECT_TRUE(any_has(ops, "conv2d", "in_place=1")) << n << "\n" << plan;
    EXPECT_EQ(count(ops, "reduce_mean") + count(ops, "mul"), 0) << n << "\n" << plan;
    EXPECT_EQ(count(ops, "conv2d"), 6) << n << "\n" << plan;
  }
}

// A squeeze-and-excitation's channel-wise mul feeding a 1x1 convolution
// (efficientnet_b0's project convolutions) folds into that convolution
// ("fused=scale": its weights scaled per call by the mul's other input;
// at batch N > 1 image by image, each on its own factors), computed per
// call (a new input, a new scale), a residual added after it as before;
// not when an image of the activation is smaller than four times the
// weights, nor when something else reads the mul's output.
TEST_F(Layout, ChannelScaleFoldsIntoTheNextConvolution) {
  struct Case {
    Shape x;
    int64_t k;
    bool also_returned;  // the mul's output is returned as well
    bool folds;
    bool residual = false;  // the convolution adds the block's input (k = channels)
  };
  const std::vector<Case> cases = {
      {{1, 24, 20, 19}, 16, false, true},
      {{2, 24, 20, 19}, 16, false, true},
      {{1, 24, 4, 4}, 16, false, false},  // 16 pixels < 4 x 16 output channels
      {{3, 24, 4, 4}, 16, false, false},  // (per image, not per batch)
      {{1, 24, 20, 19}, 16, true, false},
      {{3, 24, 20, 19}, 16, true, false},
      {{3, 32, 13, 11}, 32, false, true, true},
      {{4, 24, 20, 19}, 40, false, true},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string n = "sef" + std::to_string(i);
    auto define = [&](bool fusion) {
      return flow::global_function(
          flow::Predict, flow::function_config().name(n + (fusion ? "" : "_ref")).enable_fusion(fusion),
          {flow::Numpy::Placeholder(c.x)}, [&](Blob b) -> std::tuple<flow::Numpy, flow::Numpy> {
            Blob d = flow::nn::relu(conv(b, n + "_a", c.x[1], 3));
            Blob g = flow::reduce_mean(d, {2, 3}, true);
            Blob s = flow::math::sigmoid(conv(flow::nn::relu(conv(g, n + "_r", 8, 1)), n + "_e", c.x[1], 1));
            Blob m = flow::mul(d, s);
            Blob y = flow::nn::bias_add(conv(m, n + "_p", c.k, 1), var(n + "_pb", {c.k}), 1);
            if (c.residual) y = flow::add(y, b);
            return {y, c.also_returned ? m : flow::reduce_mean(y)};
          });
    };
    auto f = define(true), ref = define(false);
    for (int call = 0; call < 2; ++call) {
      const Tensor x = random_float32(c.x, 110 + static_cast<int>(i) * 2 + call);
      auto [y1, o1] = f(x);
      auto [y2, o2] = ref(x);
      EXPECT_LE(rel_diff(y1, y2), 1e-5) << n << " call " << call << "\n" << f.compiled()->describe();
      EXPECT_LE(rel_diff(o1, o2), 1e-5) << n << " call " << call;
    }
    const auto ops = f.compiled()->plan().op_sequence();
    EXPECT_EQ(any_has(ops, "conv2d", "fused=scale"), c.folds) << n << "\n" << f.compiled()->describe();
    EXPECT_EQ(count(ops, "mul"), c.folds ? 0 : 1) << n << "\n" << f.compiled()->describe();
    // The scale is written plain for the convolution that reads it plain.
    if (c.folds) {
      EXPECT_EQ(count(ops, "reorder"), 0) << n << "\n" << f.compiled()->describe();
    }
  }
}

}  // namespace

namespace {

// Two residual blocks: each block's input is read by its first convolution
// and then by the add fused into its last one, which therefore writes into
// the residual's buffer (no copy of the residual before oneDNN's sum); a
// residual still read later keeps its buffer.
TEST_F(Layout, ResidualSumWritesIntoTheResidualsBuffer) {
  const Tensor x = random_float32({2, 16, 10, 10}, 80);
  auto r = run_both("inplace_sum", x, [](Blob b) {
    Blob a = flow::nn::relu(conv(b, "ips_w0", 16, 3));
    Blob h = flow::nn::relu(conv(a, "ips_w1", 16, 3));
    Blob b2 = flow::nn::relu(flow::add(conv(h, "ips_w2", 16, 3), a));
    Blob h2 = flow::nn::relu(conv(b2, "ips_w3", 16, 3));
    Blob y = flow::nn::relu(flow::add(conv(h2, "ips_w4", 16, 3), b2));
    Blob z = flow::nn::relu(flow::add(conv(y, "ips_w5", 16, 3), y));  // y read by the pool below too
    return flow::add(flow::nn::max_pool2d(z, 2, 2), flow::nn::max_pool2d(y, 2, 2));
  });
  int in_place_sums = 0;
  for (const std::string& o : r.ops)
    if (o.rfind("conv2d", 0) == 0 && o.find("fused=sum") != std::string::npos && o.find("in_place=1") != std::string::npos)
      ++in_place_sums;
  EXPECT_EQ(in_place_sums, 2) << r.plan;
  EXPECT_LE(rel_diff(r.fused, r.ref), 1e-5) << r.plan;
}

}  // namespace

namespace {

// Dense layers run as oneDNN inner products on packed weights in float32
// plans where oneDNN has AVX-512, from 4 rows on; at fewer rows, and on
// AVX2-only CPUs, the GEMM as written. The inner product always runs the
// primitive made for the job's most threads, so its bits do not follow the
// calling thread's count (which follows the machine's load). Either way
// the plan computes what the graph as written computes.
TEST_F(Layout, DenseLayersRunOnPackedWeights) {
  auto define = [&](bool fusion) {
    return flow::global_function(
        flow::Predict, flow::function_config().name(fusion ? "dense" : "dense_ref").enable_fusion(fusion),
        {flow::Numpy::Placeholder({-1, 3136}, flow::Float, "x")}, [](Blob b) -> flow::Numpy {
          Blob h = flow::nn::relu(flow::nn::bias_add(flow::matmul(b, var("dn_w1", {512, 3136}), false, true),
                                                     var("dn_b1", {512}), 1));
          return flow::matmul(h, var("dn_w2", {10, 512}), false, true);
        });
  };
  auto f = define(true), r = define(false);
  for (int64_t n : {1, 4, 8, 33}) {
    const Tensor x = random_float32({n, 3136}, 90 + static_cast<uint64_t>(n));
    const Tensor got = f(x), want = r(x);
    ASSERT_EQ(got.shape(), (Shape{n, 10}));
    const auto ops = f.compiled()->plan().op_sequence();
    const std::string text = f.compiled()->describe();
    EXPECT_LE(rel_diff(got, want), 1e-5) << text;
    EXPECT_EQ(count(ops, "matmul"), 2) << text;
    const bool packed = n >= 4 && !flow::cpu::avx2_at_most();
    const int n_packed = static_cast<int>(std::count_if(
        ops.begin(), ops.end(), [](const std::string& o) { return o.find("weights=packed") != std::string::npos; }));
    EXPECT_EQ(n_packed, packed ? 2 : 0) << n << "\n" << text;
    if (packed) {
      EXPECT_TRUE(any_has(ops, "matmul", "relu=1")) << text;  // the first one's bias and relu in it
    }
    // The plan called on a thread whose OpenMP count is 1, then 2: the same bits.
    auto& plan = const_cast<flow::Plan&>(f.compiled()->plan());
    flow::cpu::ScopedThreads restore(0);  // the OpenMP count back, even when a call throws
    omp_set_num_threads(1);
    const Tensor one = plan.run({x})[0];
    omp_set_num_threads(2);
    const Tensor two = plan.run({x})[0];
    EXPECT_TRUE(one.equal(two)) << n;
    EXPECT_TRUE(one.equal(got)) << n;
  }
  // A new value of the weights is packed again.
  const Tensor x = random_float32({8, 3136}, 99);
  const Tensor old = f(x);
  flow::session::assign("dn_w2", random_float32({10, 512}, 100, -0.3f, 0.3f));
  EXPECT_LE(rel_diff(f(x), r(x)), 1e-5);
  EXPECT_GT(rel_diff(f(x), old), 1e-2);
}

}  // namespace
