// bf16 (FunctionConfig::enable_auto_mixed_precision) against float32, per
// op and for a train step. Tolerances (docs/performance.md, "bf16"):
// bfloat16 keeps 8 bits of mantissa, so each product's inputs are rounded
// by up to 2^-9 relative; summed over a convolution's window the result
// differs from float32 by well under 1% of the output's largest magnitude.
// The tests allow 2% (largest |bf16 - fp32| / largest |fp32|) per op and
// for a chain, 3% for the gradient step of a train job. On a CPU without
// AMX or AVX512_BF16 the job runs in float32: the results are then equal;
// so it does where the dot products are slower than float32 FMAs, unless
// JOBFLOW_BF16=always (as `meson test` sets it: the bf16 kernels are
// checked on every CPU that has them).
#include <gtest/gtest.h>
#include <omp.h>

#include <jobflow/backend.h>
#include <jobflow/jobflow.h>
#include <jobflow/onnx.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "compiler.h"
#include "tensor_compare.h"
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

constexpr double kOpTolerance = 2e-2;
constexpr double kStepTolerance = 3e-2;

// Whether a bf16 job computes in bf16 here (the CPU's instructions, their
// speed, JOBFLOW_BF16).
bool have_bf16() { return flow::cpu::bf16_pays(); }

// A bf16 plan's output `got` against the float32 plan's `want`: the same
// bits on CPUs without bfloat16 (the plan computes float32 there), within
// kOpTolerance otherwise. Whether the plan computed in bf16.
bool bf16_agrees(const Tensor& got, const Tensor& want, const std::string& what) {
  if (!have_bf16()) {
    EXPECT_TRUE(got.equal(want)) << what;
    return false;
  }
  EXPECT_LE(rel_diff(got, want), kOpTolerance) << what;
  return true;
}

Blob var(const std::string& name, Shape s, bool trainable = false) {
  return flow::get_variable(name, s, flow::Float, flow::random_uniform_initializer(-0.3, 0.3), trainable);
}

class Precision : public ::testing::Test {
 protected:
  void SetUp() override { flow::session::reset(); }

  // Runs body in float32 and in bf16 on the same variables; checks the
  // agreement and that the bf16 plan computes in bf16 where it can.
  void check(const std::string& name, const Tensor& x, const std::function<Blob(Blob)>& body) {
    auto define = [&](bool bf16) {
      return flow::global_function(flow::Predict,
                                   flow::function_config().name(name + (bf16 ? "_bf16" : "")).enable_auto_mixed_precision(bf16),
                                   {flow::Numpy::Placeholder(x.shape())}, [&](Blob b) -> flow::Numpy { return body(b); });
    };
    auto f32 = define(false), b16 = define(true);
    const Tensor want = f32(x), got = b16(x);
    const std::string plan = b16.compiled()->describe();
    if (!have_bf16()) {
      EXPECT_TRUE(got.equal(want)) << plan;
      return;
    }
    EXPECT_NE(plan.find("precision=bf16"), std::string::npos) << plan;
    EXPECT_LE(rel_diff(got, want), kOpTolerance) << name << "\n" << plan;
    EXPECT_GT(rel_diff(got, want), 0.0) << name << ": bf16 gave float32's bits\n" << plan;
  }
};

Blob conv(Blob x, const std::string& name, int64_t k, int64_t ks, int64_t groups = 1) {
  return flow::nn::conv2d(x, var(name, {k, x.shape()[1] / groups, ks, ks}), 1, "SAME", 1, groups);
}

// The helpers every check here leans on: a NaN or an infinity on one side
// only is an infinite difference, not one std::max drops.
TEST(Compare, DifferencesCountANaNOrInfinityOnOneSideAsInfinite) {
  const float nan = std::nanf(""), inf = INFINITY;
  auto t = [](std::vector<float> v) { return Tensor::from<float>({static_cast<int64_t>(v.size())}, v); };
  EXPECT_DOUBLE_EQ(jobflow::testing::max_abs_diff(t({1, 2, 3}), t({1, 2.5f, 3})), 0.5);
  EXPECT_DOUBLE_EQ(rel_diff(t({1, 2, 3}), t({1, 2, 4})), 0.25);
  EXPECT_EQ(jobflow::testing::max_abs_diff(t({1, nan, 3}), t({1, 2, 3})), INFINITY);
  EXPECT_EQ(rel_diff(t({1, 2, 3}), t({1, nan, 3})), INFINITY);
  EXPECT_EQ(rel_diff(t({1, inf, 3}), t({1, 2, 3})), INFINITY);
  EXPECT_EQ(rel_diff(t({1, inf, 3}), t({1, -inf, 3})), INFINITY);
  // The same NaN or infinity on both sides is no difference; the scale is
  // the largest finite |b|.
  EXPECT_DOUBLE_EQ(rel_diff(t({1, nan, inf, 2}), t({1, nan, inf, 4})), 0.5);
}

// Which CPUs plan bf16: AMX always; AVX512_BF16 where its dot products
// reach kBf16MinRate of the float32 FMA rate (an Intel Xeon whose AMX the
// hypervisor hides: 0.49x), or anyway with
// JOBFLOW_BF16=always; never without the instructions.
TEST(Bf16Choice, TilesAlwaysDotProductsWhenFastEnoughOrAskedFor) {
  using flow::cpu::Bf16Support;
  using flow::cpu::bf16_pays_at;
  for (const char* env : {static_cast<const char*>(nullptr), "", "auto"}) {
    const std::string e = env ? env : "(unset)";
    EXPECT_TRUE(bf16_pays_at(Bf16Support::Amx, 0.0, env)) << e;
    EXPECT_TRUE(bf16_pays_at(Bf16Support::Avx512Bf16, 2.0, env)) << e;
    EXPECT_TRUE(bf16_pays_at(Bf16Support::Avx512Bf16, flow::cpu::kBf16MinRate, env)) << e;
    EXPECT_FALSE(bf16_pays_at(Bf16Support::Avx512Bf16, 0.49, env)) << e;
    EXPECT_FALSE(bf16_pays_at(Bf16Support::None, 2.0, env)) << e;
  }
  EXPECT_TRUE(bf16_pays_at(Bf16Support::Avx512Bf16, 0.49, "always"));
  EXPECT_FALSE(bf16_pays_at(Bf16Support::None, 2.0, "always"));
  try {
    bf16_pays_at(Bf16Support::Avx512Bf16, 2.0, "yes");
    ADD_FAILURE() << "JOBFLOW_BF16=yes accepted";
  } catch (const flow::Error& e) {
    EXPECT_STREQ(e.what(), "JOBFLOW_BF16='yes': expected auto (bf16 where it is faster) or always");
  }
  // The rates measured here: both where the CPU has AVX512_BF16, none
  // elsewhere; cpu_isa() states the slow case.
  const auto r = flow::cpu::bf16_rates();
  if (__builtin_cpu_supports("avx512bf16")) {
    EXPECT_GT(r.dot_gflops, 0.0);
    EXPECT_GT(r.fma_gflops, 0.0);
    const bool slow = r.dot_gflops < flow::cpu::kBf16MinRate * r.fma_gflops;
    EXPECT_EQ(flow::cpu_isa().find("bf16 jobs run in float32") != std::string::npos,
              slow && flow::cpu::bf16_support() == Bf16Support::Avx512Bf16)
        << flow::cpu_isa();
  } else {
    EXPECT_EQ(r.dot_gflops, 0.0);
    EXPECT_EQ(r.fma_gflops, 0.0);
  }
  // The public reason: empty exactly where bf16 is planned, else the cause
  // (no instructions, or the two rates).
  const std::string why = flow::bf16_fallback();
  EXPECT_EQ(why.empty(), flow::cpu::bf16_pays()) << why;
  if (flow::cpu::bf16_support() == Bf16Support::None) {
    EXPECT_EQ(why, std::string("this CPU has neither AMX nor AVX512_BF16 (") + flow::cpu::isa_name() + ")");
  } else if (!why.empty()) {
    EXPECT_EQ(why.find("this CPU's bfloat16 dot products (AVX512_BF16, no AMX) run at "), 0u) << why;
  }
}

// A bad JOBFLOW_BF16 fails the compile of a job that asks for bf16, with
// the job's name; a float32 job does not read it.
TEST_F(Precision, ABadJobflowBf16IsACompileErrorNamingTheJob) {
  const char* old = std::getenv("JOBFLOW_BF16");
  const std::string saved = old ? old : "";
  ::setenv("JOBFLOW_BF16", "yes", 1);
  const Tensor x = random_float32({1, 16, 8, 8}, 3);
  auto define = [&](bool bf16) {
    return flow::global_function(flow::Predict,
                                 flow::function_config().name(bf16 ? "net_bf16" : "net").enable_auto_mixed_precision(bf16),
                                 {flow::Numpy::Placeholder(x.shape())},
                                 [&](Blob b) -> flow::Numpy { return conv(b, bf16 ? "w_bf16" : "w", 16, 3); });
  };
  std::string error;
  try {
    auto job = define(true);
    job(x);
  } catch (const flow::Error& e) {
    error = e.what();
  }
  Tensor y;
  EXPECT_NO_THROW(y = define(false)(x));
  if (old) ::setenv("JOBFLOW_BF16", saved.c_str(), 1); else ::unsetenv("JOBFLOW_BF16");
  EXPECT_EQ(error, "[compile] job 'net_bf16': JOBFLOW_BF16='yes': expected auto (bf16 where it is faster) or always");
  EXPECT_EQ(y.shape(), (Shape{1, 16, 8, 8}));
}

TEST_F(Precision, Convolution) {
  check("p_conv", random_float32({2, 16, 12, 12}, 1), [](Blob b) { return conv(b, "p_conv_w", 32, 3); });
}

// Every plan of a job with dims known at call time computes in bf16.
TEST_F(Precision, PlansCompiledPerCallShape) {
  auto define = [&](bool bf16) {
    return flow::global_function(
        flow::Predict, flow::function_config().name(bf16 ? "p_dyn_bf16" : "p_dyn").enable_auto_mixed_precision(bf16),
        {flow::Numpy::Placeholder({-1, 8, 12, -1}, flow::Float, "x")}, [&](Blob b) -> flow::Numpy {
          Blob a = flow::nn::relu(conv(b, "p_dyn_w0", 16, 3));
          return conv(flow::nn::max_pool2d(a, 2, 2), "p_dyn_w1", 8, 3);
        });
  };
  auto f32 = define(false), b16 = define(true);
  for (const Shape& s : {Shape{1, 8, 12, 12}, Shape{3, 8, 12, 16}}) {
    const Tensor x = random_float32(s, 40 + static_cast<uint64_t>(s[0]));
    const Tensor want = f32(x), got = b16(x);
    const std::string plan = b16.compiled()->plan().describe();
    ASSERT_EQ(got.shape(), (Shape{s[0], 8, 6, s[3] / 2}));
    if (!have_bf16()) {
      EXPECT_TRUE(got.equal(want)) << plan;
      continue;
    }
    EXPECT_NE(plan.find("precision=bf16"), std::string::npos) << plan;
    EXPECT_LE(rel_diff(got, want), kOpTolerance) << plan;
    EXPECT_GT(rel_diff(got, want), 0.0) << "bf16 gave float32's bits\n" << plan;
  }
  EXPECT_EQ(b16.compiled()->plan_cache_stats().plans, 2u);
}

TEST_F(Precision, ConvolutionWithBiasAndRelu) {
  check("p_convb", random_float32({2, 8, 12, 12}, 2), [](Blob b) {
    return flow::nn::relu(flow::nn::bias_add(conv(b, "p_convb_w", 16, 3), var("p_convb_b", {16}), 1));
  });
}

TEST_F(Precision, DepthwiseAndPointwise) {
  check("p_dw", random_float32({2, 32, 10, 10}, 3), [](Blob b) {
    return conv(flow::clip(conv(b, "p_dw_w", 32, 3, 32), 0.0, 6.0), "p_pw_w", 24, 1);
  });
}

// Inverted residual blocks in a bf16 plan run on Jobflow's expansion +
// depthwise kernel in bfloat16 (ExpandDepthwise with bf16: dot products of
// bfloat16 pairs for the first convolution and the projection, the
// depthwise convolution in float32): one node per block where the float32
// plan has one, "precision=bf16 algo=expand_dw". Against float32 within
// the ops' tolerance: a network's stem (3x3, stride 2, on 3 channels: an
// odd 9 values per window row, the last paired with a zero) with the
// projection and without it (a short image: the depthwise output rounded
// to bfloat16 for the projection's node), 1x1 expansions of an odd channel
// count (7) and to an odd one (21: the projection's last pair), a residual
// input, the stem's output added from the kept rows (mobilenet_v3's first
// block), a block whose output goes on in bfloat16 to another convolution,
// relu6, hardswish and swish. Every first convolution writes at least 28 x
// 28 pixels (with AMX the fusion takes those only). A returned block writes
// float32, as every bf16 convolution does there (values finer than
// bfloat16's 8 bits). The same bits at 1 and 2 threads (one image: bands of
// rows at 2). An infinite input value at the third pixel of the second
// row (what a stem window's odd last pair would take from the next pixel:
// SAME puts the odd pad first, so windows start at odd columns) gives NaN
// exactly where float32 does, and none at all with relu6.
TEST_F(Precision, InvertedResidualBlocksOnTheBf16ExpansionKernel) {
  auto act = [](int k, Blob y) {
    if (k == 0) return flow::clip(y, 0.0, 6.0);
    if (k == 1) return flow::mul(y, flow::nn::hard_sigmoid(y, 1.0 / 6, 0.5));
    return flow::mul(y, flow::math::sigmoid(y));
  };
  struct Case {
    Shape x;
    int64_t e, k1, k, stride, out;  // first convolution (channels, size), depthwise (size, stride), projection
    int act;                        // 0 relu6, 1 hardswish, 2 swish
    bool residual;  // the projection adds the block's input (x, or the stem's output with k1 = 3)
    bool then;      // a 1x1 convolution reads the block's output (not returned)
    int nodes;      // convolutions in the bf16 plan (a short image alone keeps its projection apart)
  };
  const std::vector<Case> cases = {
      {{1, 3, 40, 80}, 32, 3, 3, 1, 8, 0, false, false, 2},   {{2, 3, 56, 58}, 16, 3, 3, 1, 8, 1, false, false, 1},
      {{2, 7, 30, 28}, 40, 1, 5, 2, 24, 0, false, false, 1},  {{1, 8, 28, 28}, 21, 1, 3, 1, 8, 0, true, false, 1},
      {{1, 24, 28, 30}, 144, 1, 3, 1, 24, 2, true, false, 1}, {{1, 3, 64, 66}, 16, 3, 3, 1, 16, 1, true, false, 1},
      {{1, 16, 56, 56}, 96, 1, 3, 2, 24, 0, false, true, 2},
  };
  flow::cpu::ScopedThreads restore(0);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string n = "p_xdw" + std::to_string(i);
    const Tensor x = random_float32(c.x, 300 + i, -2.f, 2.f);
    auto define = [&](bool bf16) {
      return flow::global_function(
          flow::Predict, flow::function_config().name(n + (bf16 ? "_bf16" : "")).enable_auto_mixed_precision(bf16).num_threads(2),
          {flow::Numpy::Placeholder(x.shape())}, [&](Blob b) -> flow::Numpy {
            Blob w1 = var(n + "_e", {c.e, c.x[1], c.k1, c.k1});
            Blob e = act(c.act, flow::nn::bias_add(flow::nn::conv2d(b, w1, c.k1 > 1 ? 2 : 1, "SAME"), var(n + "_eb", {c.e}), 1));
            Blob d = flow::nn::conv2d(e, var(n + "_d", {c.e, 1, c.k, c.k}), c.stride, "SAME", 1, c.e);
            d = act(c.act, flow::nn::bias_add(d, var(n + "_db", {c.e}), 1));
            Blob y = flow::nn::bias_add(flow::nn::conv2d(d, var(n + "_p", {c.out, c.e, 1, 1}), 1, "SAME"), var(n + "_pb", {c.out}), 1);
            if (c.residual) y = flow::add(y, c.k1 > 1 ? e : b);
            return c.then ? flow::nn::conv2d(y, var(n + "_t", {8, c.out, 1, 1}), 1, "SAME") : y;
          });
    };
    auto f32 = define(false), b16 = define(true);
    const Tensor want = f32(x), got = b16(x);
    const std::string plan = b16.compiled()->describe();
    ASSERT_EQ(got.shape(), want.shape()) << n;
    if (!bf16_agrees(got, want, n + "\n" + plan)) continue;
    EXPECT_GT(rel_diff(got, want), 0.0) << n << ": bf16 gave float32's bits\n" << plan;
    if (!flow::cpu::LayoutConv::own_expand_dw_bf16()) continue;
    const auto ops = b16.compiled()->plan().op_sequence();
    int64_t convs = 0, fused = 0;
    for (const std::string& op : ops) {
      if (op.rfind("conv2d", 0) != 0) continue;
      ++convs;
      fused += op.find("precision=bf16") != std::string::npos && op.find("algo=expand_dw") != std::string::npos;
    }
    EXPECT_EQ(convs, c.nodes) << n << "\n" << plan;
    EXPECT_EQ(fused, 1) << n << "\n" << plan;
    if (c.nodes == 1) {  // the block's own output, returned: float32 from the kernel
      int64_t finer = 0;
      for (int64_t k = 0; k < got.numel(); ++k) {
        uint32_t u;
        std::memcpy(&u, got.data<float>() + k, sizeof u);
        finer += (u & 0xFFFF) != 0;
      }
      EXPECT_GT(finer, got.numel() / 2) << n << ": a returned block rounded to bfloat16\n" << plan;
    }
    auto& p = const_cast<flow::Plan&>(b16.compiled()->plan());
    for (int t : {1, 2}) {
      omp_set_num_threads(t);
      EXPECT_TRUE(p.run({x})[0].equal(got)) << n << " at " << t << " threads";
    }
    omp_set_num_threads(2);
    // Infinite: relu6 keeps everything finite, hardswish and swish give
    // infinities or NaN where one meets its negative; each as in float32.
    Tensor xi = x.clone();
    xi.data<float>()[c.x[3] + 2] = INFINITY;
    const Tensor yf = f32(xi), yb = b16(xi);
    int64_t nan_f = 0, nan_b = 0;
    for (int64_t k = 0; k < yf.numel(); ++k) nan_f += std::isnan(yf.data<float>()[k]);
    for (int64_t k = 0; k < yb.numel(); ++k) nan_b += std::isnan(yb.data<float>()[k]);
    EXPECT_EQ(nan_b, nan_f) << n << " with an infinite input";
    if (c.act == 0) {
      EXPECT_EQ(nan_f, 0) << n;
    }
  }
}

// A squeeze-and-excitation block in a bf16 plan: the global pool of the
// depthwise output is the expansion + depthwise node's second output
// ("+gap", no reduce_mean node: the float32 values summed before their
// rounding), the excitation, its mul and the projection after it; against
// float32 within the ops' tolerance, 1 and 3 images (the excitation's
// factors returned as well: they hang on the pooled means alone).
TEST_F(Precision, SqueezeAndExcitationPoolsInTheBf16ExpansionKernel) {
  flow::cpu::ScopedThreads restore(0);
  for (int64_t batch : {1, 3}) {
    const std::string n = "p_se" + std::to_string(batch);
    const Tensor x = random_float32({batch, 16, 30, 28}, 330 + static_cast<unsigned>(batch), -2.f, 2.f);
    auto define = [&](bool bf16) {
      return flow::global_function(
          flow::Predict, flow::function_config().name(n + (bf16 ? "_bf16" : "")).enable_auto_mixed_precision(bf16).num_threads(2),
          {flow::Numpy::Placeholder(x.shape())}, [&](Blob b) -> std::tuple<flow::Numpy, flow::Numpy> {
            auto swish = [](Blob y) { return flow::mul(y, flow::math::sigmoid(y)); };
            Blob e = swish(flow::nn::bias_add(conv(b, n + "_e", 96, 1), var(n + "_eb", {96}), 1));
            Blob d = flow::nn::conv2d(e, var(n + "_d", {96, 1, 3, 3}), 2, "SAME", 1, 96);
            d = swish(flow::nn::bias_add(d, var(n + "_db", {96}), 1));
            Blob g = flow::reduce_mean(d, {2, 3}, true);
            Blob s = flow::math::sigmoid(conv(swish(conv(g, n + "_r", 8, 1)), n + "_x", 96, 1));
            return {conv(flow::mul(d, s), n + "_p", 24, 1), s};
          });
    };
    auto f32 = define(false), b16 = define(true);
    const auto [want, want_s] = f32(x);
    const auto [got, got_s] = b16(x);
    const std::string plan = b16.compiled()->describe();
    ASSERT_EQ(got.shape(), want.shape()) << n;
    if (!bf16_agrees(got, want, n + "\n" + plan)) continue;
    EXPECT_LE(rel_diff(got_s, want_s), kOpTolerance) << n << "\n" << plan;
    if (!flow::cpu::LayoutConv::own_expand_dw_bf16()) continue;
    const auto ops = b16.compiled()->plan().op_sequence();
    bool pooled = false;
    int64_t means = 0;
    for (const std::string& op : ops) {
      pooled |= op.rfind("conv2d", 0) == 0 && op.find("+gap") != std::string::npos &&
                op.find("precision=bf16") != std::string::npos;
      means += op.rfind("reduce_mean", 0) == 0;
    }
    EXPECT_TRUE(pooled) << n << "\n" << plan;
    EXPECT_EQ(means, 0) << n << "\n" << plan;
  }
}

TEST_F(Precision, PoolingBinaryAndGlobalAverageInTheChain) {
  check("p_chain", random_float32({2, 8, 16, 16}, 4), [](Blob b) {
    Blob a = flow::nn::relu(conv(b, "p_ch_w0", 16, 3));
    Blob p = flow::nn::max_pool2d(a, 2, 2);
    Blob e = conv(p, "p_ch_w1", 16, 3);
    Blob s = flow::math::sigmoid(conv(flow::reduce_mean(e, {2, 3}, true), "p_ch_se", 16, 1));
    return flow::nn::relu(flow::add(flow::mul(e, s), p));
  });
}

// x.mean((2, 3)) (no kept dims) of a chain's blob, then a classifier: in a
// bf16 plan the pool runs as written (the layouts pass lowers it in float32
// plans only; a bf16 chain's pool would write bfloat16), on the
// convolution's float32 output. 32 channels: nChw16c and channels-last
// alike; 24: a padded block.
TEST_F(Precision, GlobalAverageWithoutKeptDimsThenAClassifier) {
  for (int64_t k : {32, 24}) {
    const std::string n = "p_gapnk" + std::to_string(k);
    check(n, random_float32({2, 8, 12, 11}, 11 + static_cast<int>(k)), [&](Blob b) {
      Blob a = flow::nn::relu(conv(b, n + "_w0", k, 3));
      Blob c = flow::nn::relu(conv(a, n + "_w1", k, 3));
      return flow::matmul(flow::reduce_mean(c, {2, 3}, false), var(n + "_fc", {10, k}), false, true);
    });
  }
}

// efficientnet's block: expansion + swish, depthwise + swish (Jobflow's own
// bf16 swish after the convolution), squeeze-and-excitation (its bf16
// channel-wise mul, in place), projection.
TEST_F(Precision, SwishAndSqueezeExcitationInTheChain) {
  check("p_mb", random_float32({2, 16, 14, 14}, 9), [](Blob b) {
    auto swish = [](Blob y) { return flow::mul(y, flow::math::sigmoid(y)); };
    Blob e = swish(conv(b, "p_mb_exp", 48, 1));
    Blob d = swish(conv(e, "p_mb_dw", 48, 3, 48));
    Blob s = flow::math::sigmoid(conv(swish(conv(flow::reduce_mean(d, {2, 3}, true), "p_mb_se1", 12, 1)), "p_mb_se2", 48, 1));
    return conv(flow::mul(d, s), "p_mb_proj", 16, 1);
  });
}

// A bf16 convolution + swish whose output is returned writes float32: the
// swish after it must treat the buffer as float32 (a bf16 loop over it
// halved every value's precision and scrambled it).
// So the result is swish of the bf16 convolution's float32 output, to
// float32 precision (checked against the same convolution returned as is).
TEST_F(Precision, SwishOnAReturnedOutput) {
  const Tensor x = random_float32({2, 16, 10, 10}, 10);
  auto swish = [](Blob y) { return flow::mul(y, flow::math::sigmoid(y)); };
  check("p_swret", x, [&](Blob b) { return swish(conv(b, "p_swret_w", 24, 3)); });
  auto define = [&](const std::string& name, bool with_swish) {
    return flow::global_function(flow::Predict, flow::function_config().name(name).enable_auto_mixed_precision(true),
                                 {flow::Numpy::Placeholder(x.shape())}, [&](Blob b) -> flow::Numpy {
                                   Blob y = conv(b, "p_swret_w", 24, 3);
                                   return with_swish ? swish(y) : y;
                                 });
  };
  auto fused = define("p_swret_fused", true), bare = define("p_swret_bare", false);
  const Tensor got = fused(x), y = bare(x);
  Tensor want(y.shape(), flow::Float);
  for (int64_t i = 0; i < y.numel(); ++i) {
    const double v = y.data<float>()[i];
    want.data<float>()[i] = static_cast<float>(v / (1.0 + std::exp(-v)));
  }
  EXPECT_LE(rel_diff(got, want), 1e-5) << fused.compiled()->describe();
}

TEST_F(Precision, MatrixProductWithBiasAndRelu) {
  check("p_mm", random_float32({8, 64}, 8), [](Blob b) {
    Blob h = flow::nn::relu(flow::nn::bias_add(flow::matmul(b, var("p_mm_w", {64, 32})), var("p_mm_b", {32}), 1));
    return flow::matmul(h, var("p_mm_w2", {10, 32}), false, true);
  });
}

TEST_F(Precision, TrainStepKeepsFloat32MasterWeights) {
  const Tensor x = random_float32({4, 3, 10, 10}, 5);
  const Tensor w0 = random_float32({16, 3, 3, 3}, 6, -0.3f, 0.3f);
  // The first convolution (3 input channels) stays float32 in every pass
  // (too few channels for the bf16 kernels' blocks); the second (16) runs
  // in bf16, and p_tw's update goes through its backward-data.
  auto step = [&](bool bf16) {
    flow::session::reset();
    auto job = flow::global_function(
        flow::Train, flow::function_config().name(bf16 ? "p_train_bf16" : "p_train").enable_auto_mixed_precision(bf16),
        {flow::Numpy::Placeholder(x.shape())}, [](Blob b) -> flow::Numpy {
          Blob h = flow::nn::relu(flow::nn::conv2d(b, var("p_tw", {16, 3, 3, 3}, true), 1, "SAME"));
          Blob y = flow::nn::conv2d(h, var("p_tw2", {4, 16, 3, 3}, true), 1, "SAME");
          Blob loss = flow::reduce_mean(flow::square(y));
          flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {1.0}), 0).minimize(loss);
          return loss;
        });
    flow::session::assign("p_tw", w0);
    flow::session::assign("p_tw2", random_float32({4, 16, 3, 3}, 7, -0.3f, 0.3f));
    Tensor loss = job(x);
    Tensor w1 = flow::session::variable("p_tw").clone();
    EXPECT_EQ(w1.dtype(), flow::Float);  // master weights stay float32
    return std::make_pair(loss, w1);
  };
  auto [l32, w32] = step(false);
  auto [l16, w16] = step(true);
  auto delta = [&](const Tensor& w) {
    Tensor d(w.shape(), flow::Float);
    for (int64_t i = 0; i < w.numel(); ++i) d.data<float>()[i] = w.data<float>()[i] - w0.data<float>()[i];
    return d;
  };
  if (!have_bf16()) {
    EXPECT_TRUE(w16.equal(w32));
    return;
  }
  EXPECT_LE(rel_diff(l16, l32), kOpTolerance);
  EXPECT_LE(rel_diff(delta(w16), delta(w32)), kStepTolerance);
  EXPECT_GT(rel_diff(delta(w16), delta(w32)), 0.0);
}

// Matrix products of a train job (forward, and both products of the
// backward) in bf16 with float32 accumulation: the update differs from the
// float32 one, within the step tolerance; the weights stay float32. The
// sizes are just at the bf16 threshold (2^18 multiply-adds each).
TEST_F(Precision, TrainStepMatrixProductsInBf16) {
  const Tensor x = random_float32({32, 128}, 11);
  const Tensor w0 = random_float32({128, 64}, 12, -0.2f, 0.2f);
  auto step = [&](bool bf16) {
    flow::session::reset();
    auto job = flow::global_function(
        flow::Train, flow::function_config().name(bf16 ? "p_mlp_bf16" : "p_mlp").enable_auto_mixed_precision(bf16),
        {flow::Numpy::Placeholder(x.shape())}, [](Blob b) -> flow::Numpy {
          Blob h = flow::nn::relu(flow::matmul(b, var("p_mw", {128, 64}, true)));
          Blob y = flow::matmul(h, var("p_mw2", {64, 128}, true));
          Blob loss = flow::reduce_mean(flow::square(y));
          flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {1.0}), 0).minimize(loss);
          return loss;
        });
    flow::session::assign("p_mw", w0);
    flow::session::assign("p_mw2", random_float32({64, 128}, 13, -0.2f, 0.2f));
    Tensor loss = job(x);
    Tensor w1 = flow::session::variable("p_mw").clone();
    EXPECT_EQ(w1.dtype(), flow::Float);
    for (int64_t i = 0; i < w1.numel(); ++i) w1.data<float>()[i] -= w0.data<float>()[i];
    return std::make_pair(loss, w1);
  };
  auto [l32, d32] = step(false);
  auto [l16, d16] = step(true);
  if (!have_bf16()) {
    EXPECT_TRUE(d16.equal(d32));
    return;
  }
  EXPECT_LE(rel_diff(l16, l32), kOpTolerance);
  EXPECT_LE(rel_diff(d16, d32), kStepTolerance);
  EXPECT_GT(rel_diff(d16, d32), 0.0);
}

TEST_F(Precision, JobFilesCarryThePrecision) {
  auto job = flow::global_function(flow::Predict, flow::function_config().name("p_file").enable_auto_mixed_precision(true),
                                   {flow::Numpy::Placeholder({1, 4, 6, 6})},
                                   [](Blob b) -> flow::Numpy { return conv(b, "p_file_w", 4, 3); });
  EXPECT_TRUE(job.compiled()->definition().bf16);
  const char* tmp = std::getenv("JOBFLOW_TEST_TMP");
  const std::filesystem::path dir = std::filesystem::path(tmp ? tmp : "/tmp") / "precision";
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "p_file.onnx").string();
  flow::onnx::save(*job.compiled(), file);
  EXPECT_TRUE(flow::onnx::load(file)->definition().bf16);  // jobflow.precision = bf16
  flow::onnx::LoadOptions lo;
  lo.precision = "fp32";
  EXPECT_FALSE(flow::onnx::load(file, lo)->definition().bf16);  // the option wins
  lo.precision = "fp16";
  try {
    flow::onnx::load(file, lo);
    ADD_FAILURE() << "precision fp16 was accepted";
  } catch (const flow::Error& e) {
    EXPECT_NE(std::string(e.what()).find("precision is \"fp16\" (fp32 or bf16)"), std::string::npos) << e.what();
  }
}

}  // namespace
