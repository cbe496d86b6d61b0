// The compiler's passes one by one (engine/src/compiler/passes.h), each on a
// plan under construction built from a job's definition.
#include <gtest/gtest.h>

#include <jobflow/jobflow.h>

#include "compiler.h"
#include "compiler/passes.h"
#include "errors.h"
#include "tensor_compare.h"

namespace flow = jobflow;
namespace C = jobflow::compiler;
using flow::Blob;
using flow::Shape;
using flow::Tensor;

namespace {

using jobflow::testing::error_of;
using jobflow::testing::random_float32;
using jobflow::testing::rel_diff;

// The plan under construction of a job's graph as defined.
C::PlanBuild build_of(const flow::CompiledJob& job) {
  const flow::JobDefinition& d = job.definition();
  C::PlanBuild b;
  b.graph = std::make_shared<flow::Graph>(*d.graph);
  b.inputs = d.inputs;
  b.outputs = d.outputs;
  b.opts.job_name = job.signature().job_name;
  return b;
}

std::vector<std::string> alive_ops(const C::PlanBuild& b) {
  std::vector<std::string> r;
  for (size_t i = 0; i < b.graph->nodes.size(); ++i)
    if (b.alive[i]) r.push_back(b.graph->nodes[i].op->name());
  return r;
}

int node_of(const flow::Graph& g, flow::OpKind k) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].op->kind() == k) return static_cast<int>(i);
  return -1;
}

class CompilerPasses : public ::testing::Test {
 protected:
  void SetUp() override { flow::session::reset(); }
};

}  // namespace

TEST_F(CompilerPasses, PruneKeepsWhatTheReturnsReadAndStopsAtConstants) {
  auto job = flow::global_function(flow::Predict, flow::function_config().name("prune"),
                                   {flow::Numpy::Placeholder({2, 3}), flow::Numpy::Placeholder({3})},
                                   [](Blob x, Blob) -> flow::Numpy {
                                     flow::exp(x);  // read by nothing returned
                                     return flow::add(flow::neg(x), x);
                                   });
  C::PlanBuild b = build_of(*job.compiled());
  C::prune(b);
  EXPECT_EQ(alive_ops(b), (std::vector<std::string>{"placeholder", "placeholder", "neg", "add"}));
  // A blob known when compiling needs no producer.
  const int neg = node_of(*b.graph, flow::OpKind::Neg);
  b.constants[b.graph->nodes[neg].outputs[0]] = Tensor({2, 3}, flow::Float);
  C::prune(b);
  EXPECT_EQ(alive_ops(b), (std::vector<std::string>{"placeholder", "placeholder", "add"}));
}

TEST_F(CompilerPasses, FuseMergesBiasAndReluIntoTheMatmul) {
  auto job = flow::global_function(flow::Predict, flow::function_config().name("fuse"), {flow::Numpy::Placeholder({2, 3})},
                                   [](Blob x) -> flow::Numpy {
                                     return flow::layers::dense(x, 4, {.activation = flow::nn::relu, .name = "d"});
                                   });
  C::PlanBuild b = build_of(*job.compiled());
  C::prune(b);
  C::fuse(b);
  std::vector<std::string> ops;
  for (size_t i = 0; i < b.graph->nodes.size(); ++i)
    if (b.alive[i] && b.graph->nodes[i].op->kind() != flow::OpKind::Variable)
      ops.push_back(b.graph->nodes[i].op->name() + std::string("[") + b.graph->nodes[i].op->attrs() + "]");
  EXPECT_EQ(ops, (std::vector<std::string>{"placeholder[index=0 name=arg0 shape=(2, 3) dtype=float32]",
                                           "matmul[transpose_a=0 transpose_b=1 bias=1 relu=1]"}));
  C::PlanBuild off = build_of(*job.compiled());
  off.opts.fusion = false;
  C::prune(off);
  C::fuse(off);
  EXPECT_EQ(alive_ops(off).size(), 6u);  // placeholder, 2 variables, matmul, bias_add, relu
}

TEST_F(CompilerPasses, OrderRunsUpdatesLast) {
  auto job = flow::global_function(flow::Train, flow::function_config().name("order"), {flow::Numpy::Placeholder({2, 3})},
                                   [](Blob x) -> flow::Numpy {
                                     Blob l = flow::reduce_mean(flow::layers::dense(x, 1, {.name = "od"}));
                                     flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.1}), 0).minimize(l);
                                     return l;
                                   });
  C::PlanBuild b = build_of(*job.compiled());
  for (size_t i = 0; i < b.graph->nodes.size(); ++i)
    if (b.graph->nodes[i].op->has_side_effects()) b.updates.push_back(static_cast<int>(i));
  ASSERT_EQ(b.updates.size(), 2u);  // weight and bias
  C::prune(b);
  C::order(b);
  ASSERT_GE(b.order.size(), 2u);
  EXPECT_EQ(std::vector<int>(b.order.end() - 2, b.order.end()), b.updates);
}

TEST_F(CompilerPasses, MemoryReusesTheBytesOfBlobsThatAreDead) {
  auto job = flow::global_function(flow::Predict, flow::function_config().name("memory"),
                                   {flow::Numpy::Placeholder({64, 64})}, [](Blob x) -> flow::Numpy {
                                     Blob a = flow::exp(x), b = flow::neg(a), c = flow::exp(b), d = flow::neg(c);
                                     return flow::reshape(d, {4096});
                                   });
  C::PlanBuild b = build_of(*job.compiled());
  C::prune(b);
  C::fuse(b);
  C::order(b);
  C::plan_memory(b);
  const size_t blob = 64 * 64 * 4;
  EXPECT_EQ(b.unshared_bytes, 4 * blob);
  EXPECT_EQ(b.arena_bytes, 2 * blob);  // each blob lives from its producer to its reader
  const int reshape = node_of(*b.graph, flow::OpKind::Reshape);
  const int out = b.graph->nodes[reshape].outputs[0], in = b.graph->nodes[reshape].inputs[0];
  EXPECT_EQ(b.bind[out].root, in);  // a view shares its input's bytes
  EXPECT_EQ(b.bind[b.inputs[0]].kind, C::BlobBinding::Placeholder);
  auto plan = C::bind(b);
  EXPECT_EQ(plan->op_sequence(), (std::vector<std::string>{"exp", "neg", "exp", "neg", "reshape[shape=(4096,)]"}));
  EXPECT_EQ(plan->arena_bytes(), 2 * blob);
}

TEST_F(CompilerPasses, SpecializeFoldsShapesAndStopsAtDataDependentOps) {
  auto job = flow::global_function(flow::Predict, flow::function_config().name("spec"),
                                   {flow::Numpy::Placeholder({-1, 6}, flow::Float, "x")},
                                   [](Blob x) -> std::tuple<flow::Numpy, flow::Numpy> {
                                     Blob s = flow::shape_of(x);
                                     Blob y = flow::reshape_to(x, flow::concat({s, flow::constant(Tensor::from<int64_t>({1}, {1}))}, 0));
                                     return {y, flow::nonzero(x)};
                                   });
  const flow::JobDefinition& d = job.compiled()->definition();
  C::Specialized sp = C::specialize(*d.graph, {}, 0, {{d.inputs[0], {{3, 6}, flow::Float}}});
  const flow::Graph& g = *sp.graph;
  const int shape = node_of(g, flow::OpKind::ShapeOf), concat = node_of(g, flow::OpKind::Concat);
  EXPECT_EQ(sp.known.at(g.nodes[shape].outputs[0]).to_vector<int64_t>(), (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(sp.known.at(g.nodes[concat].outputs[0]).to_vector<int64_t>(), (std::vector<int64_t>{3, 6, 1}));
  EXPECT_EQ(g.blobs[g.nodes[node_of(g, flow::OpKind::ReshapeTo)].outputs[0]].spec.shape, (Shape{3, 6, 1}));
  // nonzero's count needs x's values: the walk stops there.
  EXPECT_EQ(sp.cut, node_of(g, flow::OpKind::NonZero));
  // Shapes that do not fit the definition name the placeholder.
  const std::string e = error_of([&] { C::specialize(*d.graph, {}, 0, {{d.inputs[0], {{3, 5}, flow::Float}}}); });
  EXPECT_NE(e.find("[specialize] placeholder 'x' is (-1, 6) float32, given (3, 5) float32"), std::string::npos) << e;
}

// relu_grad(max_pool2d_grad(dy), x) at the pooling's input x folds into one
// masked pooling gradient (with_relu_grad) where Jobflow's own 2x2/2 loop
// runs it; a 3x3 pooling keeps both nodes. Either way one train step gives
// the same loss and updates as the graph as written (enable_fusion(false)),
// with windows whose maximum is 0 (relu's zeros) in the mix.
TEST_F(CompilerPasses, FuseFoldsReluGradientIntoTheMaxPoolingGradient) {
  for (int k : {2, 3}) {
    SCOPED_TRACE("pool " + std::to_string(k) + "x" + std::to_string(k));
    const Tensor x = random_float32({4, 3, 12, 12}, 7);
    auto step = [&](bool fusion) {
      flow::session::reset();
      auto job = flow::global_function(
          flow::Train, flow::function_config().name(std::string("fold") + (fusion ? "" : "_ref")).enable_fusion(fusion),
          {flow::Numpy::Placeholder(x.shape())}, [k](Blob b) -> flow::Numpy {
            Blob w = flow::get_variable("fold_w", {8, 3, 3, 3}, flow::Float,
                                        flow::random_uniform_initializer(-0.5, 0.5), true);
            Blob h = flow::nn::relu(flow::nn::conv2d(b, w, 1, "SAME"));
            Blob p = flow::nn::max_pool2d(h, k, 2, k == 2 ? "VALID" : "SAME");
            Blob loss = flow::reduce_mean(flow::square(flow::add_scalar(p, -0.25)));
            flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {1.0}), 0).minimize(loss);
            return loss;
          });
      Tensor loss = job(x);
      return std::make_tuple(loss, flow::session::variable("fold_w").clone(), job.compiled()->describe());
    };
    auto [l_on, w_on, plan_on] = step(true);
    auto [l_off, w_off, plan_off] = step(false);
    EXPECT_EQ(plan_on.find("relu_grad") == std::string::npos, k == 2) << plan_on;
    EXPECT_EQ(plan_on.find("relu_mask=1") != std::string::npos, k == 2) << plan_on;
    EXPECT_NE(plan_off.find("relu_grad"), std::string::npos) << plan_off;
    EXPECT_NEAR(l_on.data<float>()[0], l_off.data<float>()[0], 1e-6);
    EXPECT_LE(rel_diff(w_on, w_off), 1e-5);
  }
}

// Train plans keep the activations between convolutions and 2x2 max
// poolings in nChw16c (train_layouts): the plan's convolutions and
// poolings say so, a reorder remains only at the flatten (the second
// pooling's output to plain, its gradient back to blocked), and one step
// gives the loss and updates of the graph as written (enable_fusion(false)).
// conv1 reads 3 channels (its input stays plain); the blocks hold 16 and 32.
TEST_F(CompilerPasses, TrainLayoutsKeepConvolutionChainsBlocked) {
  const Tensor x = random_float32({4, 3, 12, 12}, 11);
  const std::vector<std::string> vars = {"tl_w1", "tl_b1", "tl_w2", "tl_b2", "tl_d"};
  auto step = [&](bool fusion) {
    flow::session::reset();
    auto job = flow::global_function(
        flow::Train, flow::function_config().name(std::string("tl") + (fusion ? "" : "_ref")).enable_fusion(fusion),
        {flow::Numpy::Placeholder(x.shape())}, [](Blob b) -> flow::Numpy {
          auto var = [](const char* name, Shape s) {
            return flow::get_variable(name, s, flow::Float, flow::random_uniform_initializer(-0.4, 0.4), true);
          };
          Blob h = flow::nn::relu(flow::nn::bias_add(flow::nn::conv2d(b, var("tl_w1", {16, 3, 3, 3}), 1, "SAME"),
                                                     var("tl_b1", {16}), 1));
          h = flow::nn::max_pool2d(h, 2, 2, "VALID");
          h = flow::nn::relu(flow::nn::bias_add(flow::nn::conv2d(h, var("tl_w2", {32, 16, 3, 3}), 1, "SAME"),
                                                var("tl_b2", {32}), 1));
          h = flow::nn::max_pool2d(h, 2, 2, "VALID");
          Blob y = flow::matmul(flow::reshape(h, {4, 32 * 3 * 3}), var("tl_d", {32 * 3 * 3, 5}));
          Blob loss = flow::reduce_mean(flow::square(flow::add_scalar(y, -0.5)));
          flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.5}), 0).minimize(loss);
          return loss;
        });
    Tensor loss = job(x);
    std::vector<Tensor> w;
    for (const auto& v : vars) w.push_back(flow::session::variable(v).clone());
    return std::make_tuple(loss, w, job.compiled()->describe());
  };
  auto [l_on, w_on, plan] = step(true);
  auto [l_off, w_off, plan_off] = step(false);
  auto count = [](const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(plan, "blocked=x,y]"), 3u) << plan;    // conv2, and both poolings
  EXPECT_EQ(count(plan, "blocked=y]"), 1u) << plan;      // conv1: x plain (3 channels)
  EXPECT_EQ(count(plan, "blocked=dy,dx]"), 2u) << plan;  // both pooling gradients
  EXPECT_EQ(count(plan, "blocked=x,dy]"), 1u) << plan;   // conv2's weight gradient
  EXPECT_EQ(count(plan, "blocked=dx,dy]"), 1u) << plan;  // conv2's data gradient
  EXPECT_EQ(count(plan, "blocked=dy]"), 1u) << plan;     // conv1's weight gradient (x plain)
  EXPECT_EQ(count(plan, "= reorder["), 2u) << plan;
  EXPECT_EQ(count(plan_off, "blocked="), 0u) << plan_off;
  EXPECT_NEAR(l_on.data<float>()[0], l_off.data<float>()[0], 1e-5 * std::abs(l_off.data<float>()[0]));
  for (size_t v = 0; v < vars.size(); ++v) EXPECT_LE(rel_diff(w_on[v], w_off[v]), 1e-5) << vars[v];
}
