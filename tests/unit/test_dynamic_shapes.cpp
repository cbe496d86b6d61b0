// Shapes known at call time: placeholders with -1 dims, the plan cache, shape
// arithmetic folded per call shape, data-dependent ops run in segments, and
// every op's infer() on a dynamic batch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <jobflow/jobflow.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>

#include "compiler.h"
#include "ops_internal.h"
#include "errors.h"
#include "tensor_compare.h"

#if defined(__SANITIZE_ADDRESS__)
// The sanitizer allocator's count of live heap bytes (libasan exports it;
// GCC ships no header for it, clang's is sanitizer/allocator_interface.h).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

namespace flow = jobflow;
using flow::Blob;
using flow::Shape;
using flow::Tensor;

namespace {

using jobflow::testing::error_of;
using jobflow::testing::max_abs_diff;
using jobflow::testing::rows;

// Seeded values in [-1, 1).
Tensor random_tensor(Shape s, uint64_t seed) {
  Tensor t(s, flow::Float);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    t.data<float>()[i] = static_cast<float>(x % 20001) / 10000.0f - 1.0f;
  }
  return t;
}

// A small LeNet-like classifier: conv, pool, dense layers, softmax. Its
// variables are named, so every job built by it shares the same weights.
Blob lenet(Blob x) {
  namespace L = flow::layers;
  auto init = flow::random_uniform_initializer(-0.3, 0.3);
  Blob h = L::conv2d(x, 6, 5, {.padding = "SAME", .activation = flow::nn::relu, .kernel_initializer = init,
                               .bias_initializer = init, .name = "c1"});
  h = flow::nn::max_pool2d(h, 2, 2);
  h = L::conv2d(h, 8, 3, {.activation = flow::nn::relu, .kernel_initializer = init, .bias_initializer = init,
                          .name = "c2"});
  h = L::dense(h, 32, {.activation = flow::nn::relu, .kernel_initializer = init, .bias_initializer = init, .name = "d1"});
  h = L::dense(h, 10, {.kernel_initializer = init, .bias_initializer = init, .name = "d2"});
  return flow::nn::softmax(h);
}

auto lenet_job(int64_t batch, const std::string& name, size_t cache = 16) {
  return flow::global_function(flow::Predict, flow::function_config().name(name).plan_cache_size(cache),
                               {flow::Numpy::Placeholder({batch, 1, 16, 16}, flow::Float, "images")},
                               [](Blob x) -> flow::Numpy { return lenet(x); });
}

// The memory the process holds. Under AddressSanitizer resident memory
// keeps growing by what its quarantine holds back from reuse (up to 256 MiB
// of freed blocks) and by shadow memory, neither of them a leak; there the
// bytes the program has allocated and not freed are measured instead (the
// sanitizer's allocator counts them), under the same bound.
size_t memory_bytes() {
#if defined(__SANITIZE_ADDRESS__)
  return __sanitizer_get_current_allocated_bytes();
#else
  std::ifstream f("/proc/self/statm");
  size_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
#endif
}

class DynamicShapes : public ::testing::Test {
 protected:
  void SetUp() override { flow::session::reset(); }
};

}  // namespace

TEST_F(DynamicShapes, DynamicBatchGivesTheRowsOfStaticJobs) {
  auto dyn = lenet_job(-1, "dyn");
  EXPECT_EQ(dyn.compiled()->signature().str(), "dyn(images: (?, 1, 16, 16) float32) -> Numpy [predict]");
  auto one = lenet_job(1, "static1");
  const Tensor x = random_tensor({8, 1, 16, 16}, 7);
  for (int64_t b : {1, 3, 8}) {
    auto fixed = lenet_job(b, "static" + std::to_string(b) + "b");
    const Tensor in = rows(x, 0, b);
    const Tensor y = dyn(in);
    ASSERT_EQ(y.shape(), (Shape{b, 10}));
    // The same plan as a job defined at this batch: the same bits.
    EXPECT_TRUE(y.equal(fixed(in))) << "batch " << b;
    // Row by row as batch-1 calls (another GEMM blocking: float order).
    for (int64_t r = 0; r < b; ++r) EXPECT_LT(max_abs_diff(rows(y, r, 1), one(rows(x, r, 1))), 1e-6) << b << " " << r;
  }
  const flow::PlanCacheStats s = dyn.compiled()->plan_cache_stats();
  EXPECT_TRUE(s.dynamic);
  EXPECT_EQ(s.compiles, 3u);
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.hits, 0u);
  dyn(rows(x, 0, 3));
  EXPECT_EQ(dyn.compiled()->plan_cache_stats().hits, 1u);
  EXPECT_EQ(dyn.compiled()->plan_cache_stats().plans, 3u);
  // A static job: one plan compiled at definition.
  const flow::PlanCacheStats st = one.compiled()->plan_cache_stats();
  EXPECT_FALSE(st.dynamic);
  EXPECT_EQ(st.compiles, 1u);
}

TEST_F(DynamicShapes, TheLatestPlanIsTheCallsShape) {
  auto dyn = lenet_job(-1, "latest");
  EXPECT_NE(error_of([&] { dyn.compiled()->plan(); }).find("has not been called yet"), std::string::npos);
  EXPECT_NE(dyn.compiled()->describe().find("shapes known at call time"), std::string::npos);
  dyn(random_tensor({5, 1, 16, 16}, 1));
  const std::string d = dyn.compiled()->plan().describe();
  EXPECT_NE(d.find("at images=(5, 1, 16, 16)"), std::string::npos) << d;
  EXPECT_NE(d.find("(5, 10) float32"), std::string::npos) << d;
}

TEST_F(DynamicShapes, CallTimeChecksNameThePlaceholderAndDim) {
  auto dyn = lenet_job(-1, "checks");
  std::string e = error_of([&] { dyn(Tensor({2, 1, 16, 15}, flow::Float)); });
  EXPECT_NE(e.find("[checks] argument 'images': expected (?, 1, 16, 16) float32, got (2, 1, 16, 15) float32 (dim 3 "
                   "is 15, expected 16)"),
            std::string::npos)
      << e;
  e = error_of([&] { dyn(Tensor({1, 16, 16}, flow::Float)); });
  EXPECT_NE(e.find("expected (?, 1, 16, 16) float32, got (1, 16, 16) float32"), std::string::npos) << e;
  // A dynamic dim takes any size, 0 too: the layout pass's convolutions
  // (oneDNN on zero-sized memory) give an empty result; an op that cannot
  // work on an empty tensor says so (the plain convolution kernel of the
  // graph as written, enable_fusion(false)).
  EXPECT_EQ(dyn(Tensor({0, 1, 16, 16}, flow::Float)).shape(), (Shape{0, 10}));
  auto plain = flow::global_function(flow::Predict, flow::function_config().name("checks_plain").enable_fusion(false),
                                     {flow::Numpy::Placeholder({-1, 1, 16, 16}, flow::Float, "images")},
                                     [](Blob x) -> flow::Numpy { return lenet(x); });
  e = error_of([&] { plain(Tensor({0, 1, 16, 16}, flow::Float)); });
  EXPECT_NE(e.find("[conv2d]"), std::string::npos) << e;
}

TEST_F(DynamicShapes, TheCacheIsBoundedAndLeastRecentlyUsedGoesFirst) {
  auto dyn = lenet_job(-1, "lru", 2);
  const Tensor x = random_tensor({4, 1, 16, 16}, 3);
  dyn(rows(x, 0, 1));
  dyn(rows(x, 0, 2));
  dyn(rows(x, 0, 1));  // hit: 1 is now the most recent
  dyn(rows(x, 0, 3));  // evicts 2
  dyn(rows(x, 0, 1));  // hit
  dyn(rows(x, 0, 2));  // compiled again, evicts 3
  const flow::PlanCacheStats s = dyn.compiled()->plan_cache_stats();
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 4u);
  EXPECT_EQ(s.compiles, 4u);
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(s.plans, 2u);
  EXPECT_GT(s.bytes, 0u);
  // Bounded by bytes too: one plan's arena keeps one plan.
  auto tight = flow::global_function(
      flow::Predict, flow::function_config().name("tight").plan_cache_bytes(1),
      {flow::Numpy::Placeholder({-1, 1, 16, 16}, flow::Float, "images")}, [](Blob x) -> flow::Numpy { return lenet(x); });
  tight(rows(x, 0, 1));
  tight(rows(x, 0, 2));
  EXPECT_EQ(tight.compiled()->plan_cache_stats().plans, 1u);
  EXPECT_EQ(tight.compiled()->plan_cache_stats().evictions, 1u);
}

TEST_F(DynamicShapes, BatchOneToSixtyFourKeepsMemoryFlat) {
  auto dyn = lenet_job(-1, "rss", 16);
  const Tensor x = random_tensor({64, 1, 16, 16}, 11);
  std::vector<Tensor> batches;
  for (int64_t b = 1; b <= 64; ++b) batches.push_back(rows(x, 0, b));
  auto pass = [&] {
    for (int64_t b = 1; b <= 64; ++b) ASSERT_EQ(dyn(batches[b - 1]).dim(0), b);
  };
  pass();  // warm-up: oneDNN's primitives and the allocator's pools for every shape
  const size_t warm = memory_bytes();
  for (int i = 0; i < 2; ++i) pass();
  const size_t after = memory_bytes();
  // Every call compiles (64 shapes through 16 slots) and evicts, yet memory
  // stays where the warm-up left it.
  EXPECT_LT(after, warm + (8u << 20)) << "memory grew from " << warm << " to " << after << " bytes";
  const flow::PlanCacheStats s = dyn.compiled()->plan_cache_stats();
  EXPECT_EQ(s.compiles, 3u * 64u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.evictions, 3u * 64u - 16u);
  EXPECT_EQ(s.plans, 16u);
}

TEST_F(DynamicShapes, RepeatedShapesHitTheCache) {
  auto dyn = lenet_job(-1, "hits", 16);
  const Tensor x = random_tensor({8, 1, 16, 16}, 5);
  for (int i = 0; i < 5; ++i)
    for (int64_t b : {8, 8, 8, 3}) dyn(rows(x, 0, b));
  const flow::PlanCacheStats s = dyn.compiled()->plan_cache_stats();
  EXPECT_EQ(s.compiles, 2u);
  EXPECT_EQ(s.hits, 18u);
  EXPECT_EQ(s.evictions, 0u);
}

TEST_F(DynamicShapes, ProfilePrintsTheCacheCounters) {
  ::setenv("JOBFLOW_PROFILE", "1", 1);
  testing::internal::CaptureStderr();
  {
    auto dyn = lenet_job(-1, "profiled");
    dyn(random_tensor({2, 1, 16, 16}, 1));
    dyn(random_tensor({2, 1, 16, 16}, 2));
  }
  const std::string err = testing::internal::GetCapturedStderr();
  ::unsetenv("JOBFLOW_PROFILE");
  EXPECT_NE(err.find("plan cache of job 'profiled': 1 hits, 1 misses, 1 compiles"), std::string::npos) << err;
  EXPECT_NE(err.find("0 evictions, 1 plans held"), std::string::npos) << err;
  EXPECT_NE(err.find("profile of job 'profiled' at images=(2, 1, 16, 16): 2 calls"), std::string::npos) << err;
}

TEST_F(DynamicShapes, TrainJobsNeedFixedShapes) {
  const std::string e = error_of([] {
    flow::global_function(flow::Train, flow::function_config().name("t"), {flow::Numpy::Placeholder({-1, 4}, flow::Float, "x")},
                          [](Blob x) -> flow::Numpy {
                            Blob l = flow::reduce_mean(flow::layers::dense(x, 1, {.name = "td"}));
                            flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.1}), 0).minimize(l);
                            return l;
                          });
  });
  EXPECT_NE(e.find("[global_function] train job 't': placeholder 'x' has shape (-1, 4); train jobs need fixed shapes"),
            std::string::npos)
      << e;
  const std::string v = error_of([] {
    flow::global_function(flow::Predict, {flow::Numpy::Placeholder({-1, 4})}, [](Blob x) -> flow::Numpy {
      return flow::matmul(x, flow::get_variable("w", x.shape(), flow::Float, flow::zeros_initializer()), false, true);
    });
  });
  EXPECT_NE(v.find("[get_variable] variable 'w' has shape (-1, 4); a variable's shape is fixed"), std::string::npos) << v;
}

// Concat along an axis whose length one input knows only per call: the
// sum is known per call too. (It once took a later input's length for the
// running sum: (?, ?) ++ (?, 4) was (?, 8), and Faster R-CNN's RoIs, (150, 5)
// at the call, failed to specialize.)
TEST_F(DynamicShapes, ConcatAlongADynamicAxisStaysDynamic) {
  auto job = flow::global_function(
      flow::Predict, flow::function_config().name("concat_dyn"),
      {flow::Numpy::Placeholder({-1, -1}, flow::Float, "a"), flow::Numpy::Placeholder({-1, 4}, flow::Float, "b")},
      [](Blob a, Blob b) -> flow::Numpy {
        Blob c = flow::concat({a, b}, 1);
        EXPECT_EQ(c.shape(), (Shape{-1, -1}));
        return c;
      });
  const auto y = job.compiled()->run({Tensor::from<float>({3, 1}, {1, 2, 3}), Tensor::from<float>({3, 4}, std::vector<float>(12, 0.f))});
  EXPECT_EQ(y[0].shape(), (Shape{3, 5}));
  EXPECT_EQ(y[0].data<float>()[5], 2.f);
}

TEST_F(DynamicShapes, ShapeArithmeticFoldsPerCallShape) {
  // (B, 3, 4) -> reshape to (B, 12) through shape -> slice -> concat, an
  // expand to (2, B, 12), a constant_of_shape (B,) of 2s and a range 0..B.
  auto job = flow::global_function(
      flow::Predict, flow::function_config().name("shapes"), {flow::Numpy::Placeholder({-1, 3, 4}, flow::Float, "x")},
      [](Blob x) -> std::tuple<flow::Numpy, flow::Numpy, flow::Numpy, flow::Numpy, flow::Numpy> {
        Blob s = flow::shape_of(x);
        Blob b = flow::slice(s, std::vector<int64_t>{0}, std::vector<int64_t>{1});
        Blob target = flow::concat({b, flow::constant(Tensor::from<int64_t>({1}, {12}))}, 0);
        Blob y = flow::reshape_to(x, target);
        Blob two = flow::constant(Tensor::from<int64_t>({1}, {2}));
        Blob e = flow::expand(y, flow::concat({two, flow::shape_of(y)}, 0));
        Blob fill = flow::constant_of_shape(b, Tensor::scalar<float>(2.0f));
        Blob r = flow::range(flow::constant(Tensor::scalar<int64_t>(0)), flow::reshape(b, {}),
                             flow::constant(Tensor::scalar<int64_t>(1)));
        return {y, e, fill, r, flow::size_of(x)};
      });
  EXPECT_EQ(job.compiled()->signature().outputs[0].shape, (Shape{-1, -1}));
  for (int64_t B : {1, 5}) {
    const Tensor x = random_tensor({B, 3, 4}, B);
    auto [y, e, fill, r, n] = job(x);
    EXPECT_EQ(y.shape(), (Shape{B, 12}));
    EXPECT_TRUE(y.equal(x.reshape({B, 12})));
    ASSERT_EQ(e.shape(), (Shape{2, B, 12}));
    for (int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(e.at(y.numel() + i), y.at(i));
    EXPECT_EQ(fill.shape(), (Shape{B}));
    EXPECT_EQ(fill.at(B - 1), 2.0);
    ASSERT_EQ(r.shape(), (Shape{B}));
    EXPECT_EQ(r.at(B - 1), static_cast<double>(B - 1));
    EXPECT_EQ(n.item<int64_t>(), B * 12);
  }
  // Specialized: the shape ops are constants of the plan, nothing runs them.
  for (const std::string& op : job.compiled()->plan().op_sequence()) {
    const std::string kind = op.substr(0, op.find('['));
    EXPECT_TRUE(kind != "shape" && kind != "size" && kind != "range" && kind != "constant_of_shape" && kind != "concat")
        << op;
  }
}

TEST_F(DynamicShapes, NonZeroRunsInSegments) {
  // nonzero's count depends on the data: the call is cut after it, and the
  // rest of the job (a gather by its indices, scaled) is specialized with
  // that count through the same cache.
  auto job = flow::global_function(flow::Predict, flow::function_config().name("nz"),
                                   {flow::Numpy::Placeholder({-1}, flow::Float, "x")},
                                   [](Blob x) -> std::tuple<flow::Numpy, flow::Numpy> {
                                     Blob idx = flow::nonzero(x);  // (1, n)
                                     Blob picked = flow::gather(x, flow::reshape(idx, {-1}));
                                     return {idx, flow::mul_scalar(picked, 10.0)};
                                   });
  EXPECT_EQ(job.compiled()->signature().outputs[0].shape, (Shape{1, -1}));
  auto run = [&](std::vector<float> v) { return job(Tensor::from<float>({static_cast<int64_t>(v.size())}, v)); };
  auto [i1, p1] = run({0, 2, 0, 3, 4});
  EXPECT_EQ(i1.shape(), (Shape{1, 3}));
  EXPECT_EQ(i1.to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(p1.to_vector<float>(), (std::vector<float>{20, 30, 40}));
  auto [i2, p2] = run({5, 0, 0, 0, 1});
  EXPECT_EQ(i2.to_vector<int64_t>(), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(p2.to_vector<float>(), (std::vector<float>{50, 10}));
  auto [i3, p3] = run({0, 0, 0});
  EXPECT_EQ(i3.shape(), (Shape{1, 0}));
  EXPECT_EQ(p3.shape(), (Shape{0}));
  run({1, 0, 1, 0, 1});  // 5 elements, 3 nonzero: both segments hit
  const flow::PlanCacheStats s = job.compiled()->plan_cache_stats();
  // Segments: (5,) and its tail after 3 and 2 nonzeros, (3,) and its tail
  // after 0; the last call finds both of its segments.
  EXPECT_EQ(s.compiles, 5u);
  EXPECT_EQ(s.hits, 3u);
}

TEST_F(DynamicShapes, NonZeroOfAStaticInputAndMultiDim) {
  auto job = flow::global_function(flow::Predict, flow::function_config().name("nz2"),
                                   {flow::Numpy::Placeholder({2, 3}, flow::Int32, "m")},
                                   [](Blob m) -> flow::Numpy { return flow::nonzero(m); });
  EXPECT_TRUE(job.compiled()->plan_cache_stats().dynamic);  // the output's size is known per call
  const Tensor y = job(Tensor::from<int32_t>({2, 3}, {0, 7, 0, 1, 0, 9}));
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1, 1, 0, 2}));
}

// Every op kind's infer() accepts a dynamic batch: graphs holding every
// forward op, their first and second derivatives and the updates have their
// placeholders' batch set to kDynamic and every node inferred again. The
// results agree with the shapes defined (the batch dynamic where it flows).
namespace {

void reinfer_with_dynamic_batch(const flow::Graph& g, std::set<flow::OpKind>& seen) {
  std::vector<flow::TensorSpec> dyn(g.blobs.size());
  std::vector<char> done(g.blobs.size(), 0);
  for (const flow::Node& n : g.nodes) {
    std::vector<flow::TensorSpec> in;
    for (int b : n.inputs) in.push_back(done[b] ? dyn[b] : g.blobs[b].spec);
    std::vector<flow::TensorSpec> out;
    if (n.op->kind() == flow::OpKind::Placeholder) {
      flow::TensorSpec s = g.blobs[n.outputs[0]].spec;
      s.shape[0] = flow::kDynamic;
      out = {s};
    } else {
      ASSERT_NO_THROW(out = n.op->infer(in)) << n.name << " (" << n.op->name() << ")";
    }
    seen.insert(n.op->kind());
    ASSERT_EQ(out.size(), n.outputs.size()) << n.name;
    for (size_t k = 0; k < out.size(); ++k) {
      const flow::TensorSpec& was = g.blobs[n.outputs[k]].spec;
      EXPECT_TRUE(flow::specs_agree(out[k], was))
          << n.name << " (" << n.op->name() << "): " << flow::spec_str(out[k]) << " vs " << flow::spec_str(was);
      dyn[n.outputs[k]] = out[k];
      done[n.outputs[k]] = 1;
    }
  }
}

// Forward ops on x (B, 6) and img (B, 1, 8, 8), most through variables so
// that gradients reach them; returns a scalar.
Blob every_forward_op(Blob x, Blob img, Blob labels, bool train) {
  namespace L = flow::layers;
  auto init = flow::random_uniform_initializer(-0.5, 0.5);
  Blob h = L::dense(x, 6, {.activation = flow::nn::relu, .kernel_initializer = init, .name = "e_d1"});
  h = flow::add(h, flow::sub(h, flow::mul(h, flow::div(h, flow::add_scalar(flow::square(h), 1.0)))));
  h = flow::internal::add_n({flow::neg(h), flow::exp(flow::mul_scalar(h, 0.1)), flow::log(flow::add_scalar(flow::square(h), 1)),
                             flow::sqrt(flow::add_scalar(flow::square(h), 1)),
                             flow::rsqrt(flow::add_scalar(flow::square(h), 1)), flow::math::sigmoid(h),
                             flow::math::tanh(h)});
  Blob slope = flow::get_variable("e_slope", {6}, flow::Float, init);
  Blob ex = flow::add_scalar(flow::square(flow::get_variable("e_ex", {6}, flow::Float, init)), 1.0);
  h = flow::internal::add_n({flow::nn::leaky_relu(h), flow::nn::elu(h), flow::nn::selu(h), flow::nn::softplus(h),
                             flow::nn::softsign(h), flow::nn::hard_sigmoid(h), flow::clip(h, -2, 2),
                             flow::nn::prelu(h, slope), flow::pow(flow::add_scalar(flow::square(h), 1), ex),
                             flow::minimum(h, slope), flow::maximum(h, slope)});
  h = flow::cast(flow::cast(h, flow::Double), flow::Float);
  h = flow::add(h, flow::internal::equal_mask(h, h));
  Blob t = flow::transpose(flow::reshape(h, {-1, 2, 3}), {0, 2, 1});
  t = flow::concat({t, t}, 2);
  t = flow::slice(t, std::vector<int64_t>{0}, std::vector<int64_t>{3}, std::vector<int64_t>{2});
  t = flow::identity(flow::pad(t, {0, 1, 0, 0, 0, 0}));
  t = flow::gather(t, flow::constant(Tensor::from<int32_t>({2}, {0, 3})), 1);
  std::vector<Blob> parts = flow::split(t, {1, 2}, 2);
  Blob r = flow::add(flow::reduce_sum(parts[0], {2}), flow::reduce_mean(parts[1], {2}));
  r = flow::add(r, flow::reduce_max(t, {2}));
  r = flow::add(r, flow::mul(flow::zeros_like(r), flow::ones_like(r)));
  Blob logits = L::dense(flow::nn::dropout(flow::nn::log_softmax(flow::nn::softmax(flow::flatten(r))), 0.1), 5,
                         {.kernel_initializer = init, .name = "e_d2"});
  Blob c = flow::mul(img, flow::get_variable("e_scale", {1, 1, 8, 8}, flow::Float, init));
  c = L::conv2d(c, 4, 3, {.padding = "SAME", .activation = flow::nn::relu, .kernel_initializer = init, .name = "e_c1"});
  c = flow::nn::max_pool2d(c, 2, 2);
  c = flow::nn::avg_pool2d(c, 2, 1, "SAME");
  c = L::batch_normalization(c, {.axis = 1, .name = "e_bn"});
  c = flow::nn::conv_transpose2d(c, flow::get_variable("e_ct", {4, 2, 2, 2}, flow::Float, init), 2);
  Blob cl = L::dense(c, 5, {.kernel_initializer = init, .name = "e_d3"});
  Blob all = flow::add(logits, flow::nn::bias_add(cl, flow::get_variable("e_b", {5}, flow::Float, init)));
  all = flow::add(all, flow::broadcast_to(flow::reshape(flow::reduce_sum(all, {1}), {-1, 1}), {4, 5}));
  Blob loss = flow::nn::sparse_softmax_cross_entropy_with_logits(labels, all);
  flow::argmax(all, 1);
  (void)train;
  return flow::reduce_mean(loss);
}

}  // namespace

TEST_F(DynamicShapes, EveryOpKindInfersWithADynamicBatch) {
  constexpr int64_t B = 4;
  const std::vector<flow::PlaceholderSpec> ph = {flow::Numpy::Placeholder({B, 6}, flow::Float, "x"),
                                                 flow::Numpy::Placeholder({B, 1, 8, 8}, flow::Float, "img"),
                                                 flow::Numpy::Placeholder({B}, flow::Int32, "labels")};
  std::set<flow::OpKind> seen;
  // Forward, gradients and second derivatives, in a predict job.
  auto grads = flow::global_function(flow::Predict, flow::function_config().name("every_grad"), ph,
                                     [](Blob x, Blob img, Blob labels) -> flow::Numpy {
                                       Blob loss = every_forward_op(x, img, labels, false);
                                       flow::gradients(loss, {x, img});
                                       // Second derivatives of the activations.
                                       Blob a = flow::internal::add_n(
                                           {flow::nn::leaky_relu(x), flow::nn::elu(x), flow::nn::selu(x),
                                            flow::nn::softplus(x), flow::nn::softsign(x), flow::nn::hard_sigmoid(x),
                                            flow::clip(x, -0.5, 0.5)});
                                       a = flow::concat({a, a}, 1);  // its gradient slices, whose gradient is slice_grad
                                       Blob g = flow::gradients(flow::reduce_sum(flow::square(a)), {x})[0];
                                       flow::gradients(flow::reduce_sum(flow::square(g)), {x});
                                       return loss;
                                     });
  reinfer_with_dynamic_batch(*grads.compiled()->definition().graph, seen);
  // Train steps: batch statistics and the updates.
  for (bool adam : {true, false}) {
    auto train = flow::global_function(flow::Train, flow::function_config().name(adam ? "every_adam" : "every_sgd"), ph,
                                       [adam](Blob x, Blob img, Blob labels) -> flow::Numpy {
                                         Blob loss = every_forward_op(x, img, labels, true);
                                         flow::optimizer::PiecewiseConstantScheduler lr({}, {0.01});
                                         if (adam) flow::optimizer::Adam(lr).minimize(loss);
                                         else flow::optimizer::SGD(lr, 0.9).minimize(loss);
                                         return loss;
                                       });
    reinfer_with_dynamic_batch(*train.compiled()->definition().graph, seen);
  }
  // The ops of imported models: comparisons and logic, elementwise math,
  // resize, with their gradients.
  auto more = flow::global_function(
      flow::Predict, flow::function_config().name("every_more"), ph, [](Blob x, Blob img, Blob labels) -> flow::Numpy {
        namespace m = flow::math;
        const Blob small = flow::mul_scalar(x, 0.1), big = flow::add_scalar(flow::square(x), 2.0);
        Blob y = flow::internal::add_n(
            {m::erf(x), m::sin(x), m::cos(x), m::tan(x), m::asin(small), m::acos(small), m::atan(x), m::sinh(x),
             m::cosh(x), m::asinh(x), m::acosh(big), m::atanh(small), m::floor(x), m::ceil(x), m::round(x),
             m::sign(x), m::abs(x), flow::nn::gelu(x), m::mod(x, big, true)});
        Blob c = flow::logical_xor(flow::logical_or(flow::logical_and(flow::equal(x, y), flow::less(x, y)),
                                                    flow::greater(x, y)),
                                   flow::logical_not(flow::less_equal(x, y)));
        c = flow::logical_or(flow::logical_or(c, flow::greater_equal(x, y)), flow::logical_or(m::is_nan(x), m::is_inf(x)));
        y = flow::where(c, y, x);
        flow::nn::ResizeOptions o;
        o.mode = "linear";
        Blob r = flow::nn::resize_scales(img, {1, 1, 2, 0.5}, o);
        Blob bits = flow::cast(m::bit_shift(labels, labels, true), flow::Float);
        Blob loss = flow::add(flow::add(flow::reduce_sum(y), flow::reduce_sum(r)), flow::reduce_sum(bits));
        flow::gradients(loss, {x, img});
        return loss;
      });
  reinfer_with_dynamic_batch(*more.compiled()->definition().graph, seen);
  // The ops ONNX's node tests brought in (unique's and reduce_sum over
  // run-time axes' sizes known per call), with their gradients.
  auto node_ops = flow::global_function(
      flow::Predict, flow::function_config().name("every_node_op"), ph, [](Blob x, Blob img, Blob labels) -> flow::Numpy {
        const Blob idx = flow::constant(flow::Tensor::from<int64_t>({1, 2}, {0, 1}));
        Blob y = flow::add(flow::gather_elements(x, flow::broadcast_to(idx, {B, 2}), 1), flow::math::cumsum(flow::slice(x, {0}, {2}, {1}), 1));
        Blob s = flow::scatter_nd(x, flow::constant(flow::Tensor::from<int64_t>({1, 1}, {0})), flow::slice(x, {0}, {1}));
        Blob e = flow::einsum("bi,bj->ij", {x, x});
        Blob d = flow::math::det(flow::reshape(flow::slice(x, {0}, {4}, {1}), {-1, 2, 2}));
        Blob g = flow::nn::grid_sample(img, flow::reshape(flow::slice(x, {0}, {2}, {1}), {-1, 1, 1, 2}));
        Blob r = flow::reduce_sum_at(x, flow::reshape(flow::slice(flow::cast(labels, flow::Int64), {0}, {1}), {1}), true);
        Blob u = flow::cast(flow::unique(labels).counts, flow::Float);
        flow::text::NgramOptions ngrams;
        ngrams.ngram_counts = {0};
        ngrams.pool = {1, 2};
        ngrams.ngram_indexes = {0, 1};
        Blob t = flow::text::tfidf_vectorizer(flow::reshape(labels, {-1, 1}), ngrams);  // (B, 2)
        u = flow::add(u, flow::reduce_sum(t));
        Blob l = flow::nn::nll_loss(flow::nn::log_softmax(x), labels);
        Blob loss = flow::internal::add_n({flow::reduce_sum(y), flow::reduce_sum(s), flow::reduce_sum(e), l});
        flow::gradients(loss, {x});
        flow::gradients(r, {x}, flow::square(r));
        return flow::add(flow::add(loss, flow::reduce_sum(u)), flow::add(flow::reduce_sum(d), flow::reduce_sum(g)));
      });
  reinfer_with_dynamic_batch(*node_ops.compiled()->definition().graph, seen);
  // Detection models' ops (their output sizes known per call, except
  // top_k's with a fixed k), with their gradients, and if_else.
  auto branch = flow::global_function(flow::Predict, flow::function_config().name("every_branch"),
                                      {flow::Numpy::Placeholder({-1, 6}, flow::Float, "x")},
                                      [](Blob x) -> flow::Numpy { return flow::reduce_sum(x, {1}); })
                    .compiled();
  // Bodies of a loop (iteration, condition, carried) and a scan (state, slice).
  auto loop_body =
      flow::global_function(flow::Predict, flow::function_config().name("every_loop_body"),
                            {flow::Numpy::Placeholder({}, flow::Int64, "i"), flow::Numpy::Placeholder({}, flow::Bool, "c"),
                             flow::Numpy::Placeholder({-1, 6}, flow::Float, "v")},
                            [](Blob, Blob c, Blob v) -> std::tuple<flow::Numpy, flow::Numpy, flow::Numpy> {
                              return {flow::identity(c), flow::mul_scalar(v, 0.5), flow::reduce_sum(v, {1})};
                            })
          .compiled();
  auto scan_body = flow::global_function(flow::Predict, flow::function_config().name("every_scan_body"),
                                         {flow::Numpy::Placeholder({-1}, flow::Float, "s"),
                                          flow::Numpy::Placeholder({-1}, flow::Float, "col")},
                                         [](Blob st, Blob col) -> std::tuple<flow::Numpy, flow::Numpy> {
                                           return {flow::add(st, col), flow::mul_scalar(col, 2.0)};
                                         })
                       .compiled();
  auto detect = flow::global_function(
      flow::Predict, flow::function_config().name("every_detect"), ph, [&](Blob x, Blob img, Blob /*labels*/) -> flow::Numpy {
        const Blob idx = flow::constant(flow::Tensor::from<int64_t>({2, 1}, {1, 0}));
        Blob g = flow::gather_nd(x, idx);
        Blob t = flow::top_k(x, 3, 1)[0];
        const std::vector<Blob> t2 = flow::top_k(x, 2, 1);
        Blob s = flow::scatter_elements(x, t2[1], flow::mul_scalar(t2[0], 0.0), 1);
        Blob p = flow::reduce_prod(x, {1});
        Blob loss = flow::add(flow::add(flow::reduce_sum(g), flow::reduce_sum(t)),
                              flow::add(flow::reduce_sum(s), flow::reduce_sum(p)));
        flow::gradients(loss, {x});
        Blob boxes = flow::reshape(flow::slice(x, {0}, {1}), {1, 1, 6});
        Blob nms = flow::non_max_suppression(flow::slice(boxes, {0}, {4}, {2}), flow::slice(boxes, {0}, {1}, {2}));
        Blob ra = flow::roi_align(img, flow::constant(flow::Tensor::from<float>({1, 4}, {0, 0, 4, 4})),
                                  flow::constant(flow::Tensor::from<int64_t>({1}, {0})), 2, 2);
        Blob c = flow::greater(flow::reduce_sum(x), flow::constant(flow::Tensor::from<float>({}, {0.0f})));
        Blob iff = flow::if_else(c, {x}, branch, branch)[0];
        const std::vector<Blob> lo =
            flow::loop(flow::constant(flow::Tensor::from<int64_t>({}, {2})), Blob(), {x}, {}, loop_body);
        flow::ScanOptions so;
        so.input_axes = {1};
        const std::vector<Blob> sc = flow::scan({flow::reduce_sum(x, {1})}, {x}, {}, scan_body, so);
        Blob flow_loss = flow::add(flow::add(flow::reduce_sum(lo[0]), flow::reduce_sum(lo[1])),
                                   flow::add(flow::reduce_sum(sc[0]), flow::reduce_sum(sc[1])));
        return flow::add(flow::add(flow::add(loss, flow::cast(flow::reduce_sum(nms), flow::Float)),
                                   flow::add(flow::reduce_sum(ra), flow::reduce_sum(iff))),
                         flow_loss);
      });
  reinfer_with_dynamic_batch(*detect.compiled()->definition().graph, seen);
  // The shape ops and nonzero have their own tests above (they take their
  // shapes from values); the second derivatives of piecewise linear
  // activations are 0 and never made; reorder exists only in plans (the
  // layout pass makes it); onnx_node only the ONNX importer makes
  // (tests/onnx/test_onnx_control.cpp); the sequence ops have their own
  // tests (tests/unit/test_sequences.cpp), the string ops theirs
  // (tests/onnx/test_onnx_strings.cpp); every other kind is here.
  const std::set<flow::OpKind> elsewhere = {flow::OpKind::ShapeOf,        flow::OpKind::SizeOf,
                                            flow::OpKind::ReshapeTo,      flow::OpKind::ConstantOfShape,
                                            flow::OpKind::Range,          flow::OpKind::Expand,
                                            flow::OpKind::NonZero,        flow::OpKind::LeakyReluGrad2,
                                            flow::OpKind::HardSigmoidGrad2, flow::OpKind::ClipGrad2,
                                            flow::OpKind::Reorder,        flow::OpKind::OnnxNode,
                                            // tests/onnx/test_onnx_ops_more.cpp
                                            flow::OpKind::MelWeightMatrix, flow::OpKind::RandomUniform,
                                            flow::OpKind::RandomNormal,
                                            // tests/unit/test_sequences.cpp
                                            flow::OpKind::SequenceConstruct, flow::OpKind::SequenceInsert,
                                            flow::OpKind::SequenceAt,     flow::OpKind::SequenceErase,
                                            flow::OpKind::SequenceLength, flow::OpKind::ConcatFromSequence,
                                            flow::OpKind::SplitToSequence, flow::OpKind::OptionalHasElement,
                                            flow::OpKind::OptionalGetElement,
                                            // tests/onnx/test_onnx_strings.cpp
                                            flow::OpKind::StringNormalizer, flow::OpKind::StringFormat,
                                            flow::OpKind::StringParse,    flow::OpKind::StringLookup};
  for (size_t k = 0; k < flow::kOpKindCount; ++k) {
    const auto kind = static_cast<flow::OpKind>(k);
    if (!elsewhere.count(kind)) {
      EXPECT_TRUE(seen.count(kind)) << "no " << flow::op_name(kind) << " in the graphs";
    }
  }
}
