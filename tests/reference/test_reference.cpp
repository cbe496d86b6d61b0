// Reference-value tests: forward results and gradients of the seeds' LeNet and
// MLP, of layers.batch_normalization in a train job and of single ops with
// awkward shapes, against values computed independently by PyTorch
// (tests/reference/make_reference.py; see its docstring for the file format).
//
// The data folder comes from JOBFLOW_REFERENCE_DIR (meson sets it to the
// folder generated at build time); without it every test is skipped.
//
// Tolerances. The engine's float32 results are compared with PyTorch's
// float64 results computed from the same float32 inputs and weights, element
// by element: |got - want| <= atol + rtol * |want| with
//   float32 forward values (logits, losses, op outputs, moving statistics):
//       rtol 1e-4, atol 1e-5
//   float32 gradients:  rtol 1e-3, atol 1e-5
//   float64 (the MLP and the ops that run in float64): rtol 1e-9, atol 1e-12
// PyTorch's own float32 results are stored too; the test
// TorchFloat32IsWithinTheTolerances checks that an honest float32 computation
// meets these bounds (it does with a margin of 10x or more), and every failure
// message shows, next to the engine's worst element, what float32 PyTorch got
// there. The generator avoids inputs where float32 rounding could flip a ReLU
// mask or a max-pool choice (it retries seeds until every such margin is
// >= 1e-5 of the tensor's std), so a failure is a real difference.
#include <gtest/gtest.h>

#include <jobflow/jobflow.h>

#include "raw_tensor.h"
#include "seed_models.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace flow = jobflow;
using flow::Blob;
using flow::Tensor;
namespace fs = std::filesystem;
using flow::testing::all_close;
using flow::testing::Tolerance;

namespace {

// --------------------------------------------------------------- tolerances

constexpr Tolerance kForward32{1e-4, 1e-5};
constexpr Tolerance kGrad32{1e-3, 1e-5};
constexpr Tolerance kExact64{1e-9, 1e-12};

// ------------------------------------------------------------ the data folder

struct Entry {
  flow::DType dtype;
  flow::Shape shape;
  std::string kind;               // raw | gen | lowrank
  std::vector<std::string> args;  // gen: seed scale; lowrank: A B
};

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Reference {
 public:
  // The folder's data, or nullptr with `why` set.
  static const Reference* get(std::string& why) {
    return flow::testing::load_data_dir<Reference>(
        "JOBFLOW_REFERENCE_DIR",
        " Generate it with: /usr/bin/python3 tests/reference/make_reference.py DIR (needs Debian's python3-torch), "
        "then run with JOBFLOW_REFERENCE_DIR=DIR (meson does both when torch is found at configure time).",
        why);
  }

  explicit Reference(std::string dir) : dir_(std::move(dir)) {
    flow::testing::for_each_index_line(fs::path(dir_) / "index.txt", [this](std::istringstream& s, const std::string&) {
      std::string name, dtype, shape;
      Entry e;
      s >> name >> dtype >> shape >> e.kind;
      for (std::string a; s >> a;) e.args.push_back(a);
      e.dtype = flow::dtype_from_name(dtype);
      e.shape = flow::testing::parse_shape(shape);
      entries_[name] = e;
    });
  }

  bool has(const std::string& name) const { return entries_.count(name) != 0; }

  // Loads (and caches) tensor `name`; throws if it is not there.
  Tensor operator[](const std::string& name) const {
    auto c = cache_.find(name);
    if (c != cache_.end()) return c->second;
    auto it = entries_.find(name);
    if (it == entries_.end()) throw std::runtime_error("reference data has no tensor '" + name + "' in " + dir_);
    const Entry& e = it->second;
    Tensor t(e.shape, e.dtype);
    if (e.kind == "raw") {
      t = flow::testing::read_raw(fs::path(dir_) / (name + ".bin"), e.dtype, e.shape);
    } else if (e.kind == "gen") {
      generate(name, e, t);
    } else if (e.kind == "lowrank") {
      // value = A^T B, A (r, m), B (r, n), in double.
      Tensor a = (*this)[e.args.at(0)], b = (*this)[e.args.at(1)];
      const int64_t r = a.dim(0), m = a.dim(1), n = b.dim(1);
      if (b.dim(0) != r || e.shape != flow::Shape{m, n} || e.dtype != flow::Float64)
        throw std::runtime_error("bad low-rank entry '" + name + "'");
      const double* A = a.data<double>();
      const double* B = b.data<double>();
      double* out = t.data<double>();
      for (int64_t k = 0; k < r; ++k)
        for (int64_t i = 0; i < m; ++i) {
          const double s = A[k * m + i];
          for (int64_t j = 0; j < n; ++j) out[i * n + j] += s * B[k * n + j];
        }
    } else {
      throw std::runtime_error("unknown kind '" + e.kind + "' of '" + name + "'");
    }
    cache_[name] = t;
    return t;
  }

  std::vector<std::string> names() const {
    std::vector<std::string> r;
    for (const auto& [n, e] : entries_) r.push_back(n);
    return r;
  }

 private:
  void generate(const std::string& name, const Entry& e, Tensor& t) const {
    const uint64_t seed = std::stoull(e.args.at(0));
    const double scale = std::strtod(e.args.at(1).c_str(), nullptr);
    float* p = t.data<float>();
    double sum = 0, sumsq = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double u = static_cast<double>(splitmix64((seed << 32) + static_cast<uint64_t>(i)) >> 11) * 0x1p-53;
      p[i] = static_cast<float>(scale * (2.0 * u - 1.0));
      sum += p[i];
      sumsq += static_cast<double>(p[i]) * p[i];
    }
    // The generator must agree with the Python one bit for bit.
    const Tensor c = (*this)[name + ".checksum"];
    const double* ck = c.data<double>();
    const double n = static_cast<double>(t.numel());
    if (std::abs(sum - ck[0]) > 1e-12 * n * scale || std::abs(sumsq - ck[1]) > 1e-9 * ck[1] || p[0] != ck[2] ||
        p[t.numel() - 1] != ck[3])
      throw std::runtime_error("regenerated '" + name + "' does not match its checksum (sum " + std::to_string(sum) +
                               " vs " + std::to_string(ck[0]) + ")");
  }

  std::string dir_;
  std::map<std::string, Entry> entries_;
  mutable std::map<std::string, Tensor> cache_;
};

class ReferenceTest : public ::testing::Test {
 public:
  void SetUp() override {
    std::string why;
    ref_ = Reference::get(why);
    if (!ref_) GTEST_SKIP() << why;
    flow::session::reset();
  }
  void TearDown() override { flow::session::reset(); }
  const Reference& ref() const { return *ref_; }
  Tensor opt(const std::string& name) const { return ref_->has(name) ? (*ref_)[name] : Tensor(); }
  // Compares the engine's `got` with "<prefix>.f64.<key>" (float32 PyTorch
  // "<prefix>.f32.<key>" shown on failure), or with the float64 tolerance.
  // `label` names the check in messages (default: the prefix).
  void expect_close(const std::string& prefix, const std::string& key, const Tensor& got, bool f64 = false,
                    const std::string& label = "") const {
    const bool grad = key.rfind("grad.", 0) == 0;
    const Tolerance tol = f64 ? kExact64 : grad ? kGrad32 : kForward32;
    auto r = all_close((label.empty() ? prefix : label) + " " + key + (f64 ? " (float64)" : ""), got,
                       ref()[prefix + ".f64." + key], tol, opt(prefix + ".f32." + key), "float32 PyTorch");
    if (!r) ADD_FAILURE() << r.message();
  }

 private:
  const Reference* ref_ = nullptr;
};

// PyTorch in float32 meets the tolerances the engine is held to.
TEST_F(ReferenceTest, TorchFloat32IsWithinTheTolerances) {
  int checked = 0;
  for (const std::string& n : ref().names()) {
    const auto pos = n.find(".f32.");
    if (pos == std::string::npos) continue;
    std::string n64 = n;
    n64.replace(pos, 5, ".f64.");
    ASSERT_TRUE(ref().has(n64)) << n;
    const bool grad = n.find(".grad.") != std::string::npos;
    auto ok = all_close("float32 PyTorch " + n, ref()[n], ref()[n64], grad ? kGrad32 : kForward32);
    if (!ok) ADD_FAILURE() << ok.message();
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

// ------------------------------------------------------------------ networks

using VarList = std::vector<std::pair<std::string, flow::Shape>>;
const VarList kLenetVars = {{"conv1-weight", {32, 1, 5, 5}}, {"conv1-bias", {32}},
                            {"conv2-weight", {64, 32, 5, 5}}, {"conv2-bias", {64}},
                            {"dense1-weight", {512, 3136}}, {"dense1-bias", {512}},
                            {"dense2-weight", {10, 512}}, {"dense2-bias", {10}}};
const VarList kMlpVars = {{"hidden-weight", {512, 784}}, {"hidden-bias", {512}},
                          {"output-weight", {10, 512}}, {"output-bias", {10}}};
constexpr int64_t kBatch = 4;

using Outputs = std::map<std::string, Blob>;
using Results = std::map<std::string, Tensor>;

// logits, per-sample loss, mean loss and the gradient of the mean loss with
// respect to every variable, as the map the jobs return.
Outputs loss_and_grads(Blob logits, Blob labels, const VarList& vars, flow::DType dt) {
  Blob loss = flow::nn::sparse_softmax_cross_entropy_with_logits(labels, logits);
  Blob mean = flow::reduce_mean(loss);
  std::vector<Blob> xs;
  for (const auto& [name, shape] : vars) xs.push_back(flow::get_variable(name, shape, dt));
  std::vector<Blob> g = flow::gradients(mean, xs);
  Outputs out{{"logits", logits}, {"loss", loss}, {"mean_loss", mean}};
  for (size_t i = 0; i < vars.size(); ++i) out["grad." + vars[i].first] = g[i];
  return out;
}

void assign_weights(const Reference& ref, const std::string& prefix, const VarList& vars, flow::DType dt) {
  for (const auto& [name, shape] : vars) flow::session::assign(name, ref[prefix + "." + name].astype(dt));
}

std::vector<flow::PlaceholderSpec> image_specs(flow::DType dt) {
  return {flow::Numpy::Placeholder({kBatch, 1, 28, 28}, dt, "images"),
          flow::Numpy::Placeholder({kBatch}, flow::Int32, "labels")};
}

void check_all(const ReferenceTest& t, const std::string& prefix, const VarList& vars, const Results& r,
               bool f64 = false, const std::string& label = "") {
  for (const char* k : {"logits", "loss", "mean_loss"}) t.expect_close(prefix, k, r.at(k), f64, label);
  for (const auto& [name, shape] : vars) t.expect_close(prefix, "grad." + name, r.at("grad." + name), f64, label);
}

struct NetworkTest : ReferenceTest {};

TEST_F(NetworkTest, LeNetForwardAndGradients) {
  auto job = flow::global_function(flow::Predict, flow::function_config().name("lenet_reference"),
                                   image_specs(flow::Float), [](Blob images, Blob labels) -> Outputs {
                                     return loss_and_grads(seeds::lenet(images, false), labels, kLenetVars, flow::Float);
                                   });
  assign_weights(ref(), "lenet", kLenetVars, flow::Float);
  Results r = job(ref()["images"], ref()["labels"]);
  check_all(*this, "lenet", kLenetVars, r);
}

// The same in a train job: max pooling keeps oneDNN's workspace for its
// backward there, and one SGD step must move each weight by -lr * gradient.
TEST_F(NetworkTest, LeNetTrainStepMatchesGradients) {
  constexpr double kLr = 0.1;
  auto job = flow::global_function(
      flow::Train, flow::function_config().name("lenet_reference_train"), image_specs(flow::Float),
      [](Blob images, Blob labels) -> Outputs {
        Outputs out = loss_and_grads(seeds::lenet(images, false), labels, kLenetVars, flow::Float);
        flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {kLr}), 0).minimize(out.at("loss"));
        return out;
      });
  assign_weights(ref(), "lenet", kLenetVars, flow::Float);
  Results r = job(ref()["images"], ref()["labels"]);
  check_all(*this, "lenet", kLenetVars, r, false, "lenet (train job)");
  for (const auto& [name, shape] : kLenetVars) {
    // (w_before - w_after) / lr, in double; float32 rounding of the update
    // adds at most ~1e-8 / lr, far inside the gradient tolerance.
    const Tensor before = ref()["lenet." + name];
    const Tensor after = flow::session::variable(name);
    Tensor step(shape, flow::Float64);
    for (int64_t i = 0; i < step.numel(); ++i)
      step.data<double>()[i] = (before.at(i) - after.at(i)) / kLr;
    auto ok = all_close("lenet SGD step (w_before - w_after) / lr of " + name, step,
                        ref()["lenet.f64.grad." + name], kGrad32, opt("lenet.f32.grad." + name), "float32 PyTorch");
    if (!ok) ADD_FAILURE() << ok.message();
  }
}

TEST_F(NetworkTest, MlpForwardAndGradients) {
  auto job = flow::global_function(flow::Predict, flow::function_config().name("mlp_reference"),
                                   image_specs(flow::Float), [](Blob images, Blob labels) -> Outputs {
                                     return loss_and_grads(seeds::mlp(images), labels, kMlpVars, flow::Float);
                                   });
  assign_weights(ref(), "mlp", kMlpVars, flow::Float);
  Results r = job(ref()["images"], ref()["labels"]);
  check_all(*this, "mlp", kMlpVars, r);
}

// The MLP's ops all run in float64: held to float64 precision.
TEST_F(NetworkTest, MlpFloat64ForwardAndGradients) {
  auto job = flow::global_function(flow::Predict,
                                   flow::function_config().name("mlp_reference_f64").default_data_type(flow::Float64),
                                   image_specs(flow::Float64), [](Blob images, Blob labels) -> Outputs {
                                     return loss_and_grads(seeds::mlp(images), labels, kMlpVars, flow::Float64);
                                   });
  assign_weights(ref(), "mlp", kMlpVars, flow::Float64);
  Results r = job(ref()["images"].astype(flow::Float64), ref()["labels"]);
  check_all(*this, "mlp", kMlpVars, r, true);
}

// ---------------------------------------------------------------- single ops

using Body = std::function<Blob(const std::vector<Blob>&)>;
struct OpCase {
  std::string name;
  std::vector<std::string> inputs;  // as stored: op.<name>.<input>
  Body body;
  bool f64 = true;  // also run in float64 (conv and pooling are float32-only)
};

flow::nn::Padding pads(int64_t top, int64_t left, int64_t bottom, int64_t right) {
  return flow::nn::Padding(std::vector<int64_t>{top, left, bottom, right});
}

const std::vector<OpCase>& op_cases() {
  namespace nn = flow::nn;
  static const std::vector<OpCase> cases = {
      {"conv_s2_pad", {"x", "w", "b"},
       [](auto& in) { return nn::bias_add(nn::conv2d(in[0], in[1], 2, pads(1, 2, 0, 1)), in[2], 1); }, false},
      {"conv_group_dil_same", {"x", "w"},
       [](auto& in) { return nn::conv2d(in[0], in[1], nn::Size2(1, 2), "SAME", 2, 2); }, false},
      {"avg_pool_same", {"x"}, [](auto& in) { return nn::avg_pool2d(in[0], 3, 2, "SAME"); }, false},
      {"avg_pool_explicit", {"x"},
       [](auto& in) { return nn::avg_pool2d(in[0], nn::Size2(2, 3), nn::Size2(2, 1), pads(1, 0, 0, 2)); }, false},
      {"max_pool_same", {"x"}, [](auto& in) { return nn::max_pool2d(in[0], 3, 2, "SAME"); }, false},
      {"log_softmax_axis1", {"x"}, [](auto& in) { return nn::log_softmax(in[0], 1); }},
      {"softmax_last", {"x"}, [](auto& in) { return nn::softmax(in[0], -1); }},
      {"sparse_xent", {"labels", "logits"},
       [](auto& in) { return nn::sparse_softmax_cross_entropy_with_logits(in[0], in[1]); }},
      {"add_bcast", {"a", "b"}, [](auto& in) { return in[0] + in[1]; }},
      {"sub_bcast", {"a", "b"}, [](auto& in) { return in[0] - in[1]; }},
      {"mul_bcast", {"a", "b"}, [](auto& in) { return in[0] * in[1]; }},
      {"div_bcast", {"a", "b"}, [](auto& in) { return in[0] / in[1]; }},
      {"div_scalar_like", {"a", "b"}, [](auto& in) { return in[0] / in[1]; }},
      {"matmul_tt", {"a", "b"}, [](auto& in) { return flow::matmul(in[0], in[1], true, true); }},
      {"matmul_tb", {"a", "b"}, [](auto& in) { return flow::matmul(in[0], in[1], false, true); }},
      {"matmul_batched_ta", {"a", "b"}, [](auto& in) { return flow::matmul(in[0], in[1], true, false); }},
      {"transpose_2031", {"x"}, [](auto& in) { return flow::transpose(in[0], {2, 0, 3, 1}); }},
      {"concat_axis1", {"a", "b", "c"}, [](auto& in) { return flow::concat({in[0], in[1], in[2]}, 1); }},
      {"concat_last", {"a", "b"}, [](auto& in) { return flow::concat({in[0], in[1]}, -1); }},
      {"reduce_mean_keep", {"x"}, [](auto& in) { return flow::reduce_mean(in[0], {0, 2}, true); }},
      {"reduce_sum_last", {"x"}, [](auto& in) { return flow::reduce_sum(in[0], {-1}); }},
      // Training-mode batch normalization from batch statistics (biased
      // variance), gradients flowing through the statistics too.
      {"batch_norm_train", {"x", "gamma", "beta"},
       [](auto& in) {
         const int64_t C = in[0].shape()[1];
         Blob mean = flow::reduce_mean(in[0], {0, 2, 3});
         Blob centered = in[0] - flow::reshape(mean, {1, C, 1, 1});
         Blob var = flow::reduce_mean(flow::square(centered), {0, 2, 3});
         return nn::batch_normalization(in[0], mean, var, in[2], in[1], 1e-3, 1);
       }},
  };
  return cases;
}

using OpJob = flow::Job<std::vector<Blob>>;

// A predict job taking the case's inputs and the cotangent dy, returning y and
// the gradient (vjp with dy) for each floating input.
OpJob make_op_job(const OpCase& c, const std::vector<Tensor>& in, flow::DType dt) {
  std::vector<flow::PlaceholderSpec> specs;
  for (size_t i = 0; i < in.size(); ++i)
    specs.push_back(flow::Numpy::Placeholder(in[i].shape(), in[i].dtype(), i < c.inputs.size() ? c.inputs[i] : "dy"));
  auto cfg = flow::function_config().name("op_" + c.name).default_data_type(dt);
  Body body = c.body;
  auto run = [body](const std::vector<Blob>& all) -> std::vector<Blob> {
    std::vector<Blob> xs(all.begin(), all.end() - 1);
    Blob y = body(xs);
    std::vector<Blob> wrt;
    for (const Blob& x : xs)
      if (flow::is_floating(x.dtype())) wrt.push_back(x);
    std::vector<Blob> out{y};
    for (const Blob& g : flow::gradients(y, wrt, all.back())) out.push_back(g);
    return out;
  };
  using V = std::vector<Blob>;
  switch (in.size()) {
    case 2: return flow::global_function(flow::Predict, cfg, specs, [run](Blob a, Blob d) -> V { return run({a, d}); });
    case 3:
      return flow::global_function(flow::Predict, cfg, specs,
                                   [run](Blob a, Blob b, Blob d) -> V { return run({a, b, d}); });
    case 4:
      return flow::global_function(flow::Predict, cfg, specs,
                                   [run](Blob a, Blob b, Blob c, Blob d) -> V { return run({a, b, c, d}); });
  }
  throw std::runtime_error("op case with " + std::to_string(in.size()) + " placeholders");
}

std::vector<Tensor> call(OpJob& job, const std::vector<Tensor>& in) {
  switch (in.size()) {
    case 2: return job(in[0], in[1]);
    case 3: return job(in[0], in[1], in[2]);
    case 4: return job(in[0], in[1], in[2], in[3]);
  }
  throw std::runtime_error("bad arity");
}

class OpReference : public ReferenceTest, public ::testing::WithParamInterface<OpCase> {};

TEST_P(OpReference, ForwardAndGradients) {
  const OpCase& c = GetParam();
  const std::string prefix = "op." + c.name;
  for (flow::DType dt : {flow::Float32, flow::Float64}) {
    if (dt == flow::Float64 && !c.f64) continue;
    SCOPED_TRACE(flow::dtype_name(dt));
    std::vector<Tensor> in;
    for (const std::string& n : c.inputs) {
      Tensor t = ref()[prefix + "." + n];
      in.push_back(flow::is_floating(t.dtype()) ? t.astype(dt) : t);
    }
    in.push_back(ref()[prefix + ".dy"].astype(dt));
    OpJob job = make_op_job(c, in, dt);
    std::vector<Tensor> out = call(job, in);
    const bool f64 = dt == flow::Float64;
    expect_close(prefix, "y", out.at(0), f64);
    size_t k = 1;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (!flow::is_floating(in[i].dtype())) continue;
      ASSERT_LT(k, out.size());
      expect_close(prefix, "grad." + c.inputs[i], out[k++], f64);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, OpReference, ::testing::ValuesIn(op_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& p) { return p.param.name; });

// layers.batch_normalization in a train job: batch statistics, gradients of
// x, gamma and beta, and the moving statistics' update (momentum 0.99, the
// moving variance from the unbiased batch variance, as PyTorch).
TEST_F(ReferenceTest, BatchNormLayerTrainMode) {
  const Tensor x = ref()["bn_layer.x"];
  auto job = flow::global_function(
      flow::Train, flow::function_config().name("bn_layer_reference"),
      {flow::Numpy::Placeholder(x.shape(), flow::Float, "x"), flow::Numpy::Placeholder(x.shape(), flow::Float, "dy")},
      [](Blob x, Blob dy) -> Outputs {
        Blob y = flow::layers::batch_normalization(x, {.axis = 1, .momentum = 0.99, .epsilon = 1e-3, .name = "bn"});
        Blob gamma = flow::get_variable("bn-gamma", {x.shape()[1]});
        Blob beta = flow::get_variable("bn-beta", {x.shape()[1]});
        auto g = flow::gradients(y, {x, gamma, beta}, dy);
        // lr 0: the step leaves gamma and beta alone; only the moving
        // statistics change.
        flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.0}), 0)
            .minimize(flow::reduce_sum(y * dy));
        return {{"y", y}, {"grad.x", g[0]}, {"grad.gamma", g[1]}, {"grad.beta", g[2]}};
      });
  for (const char* v : {"gamma", "beta", "moving_mean", "moving_variance"})
    flow::session::assign(std::string("bn-") + v, ref()[std::string("bn_layer.") + v]);
  Results r = job(x, ref()["bn_layer.dy"]);
  for (const char* k : {"y", "grad.x", "grad.gamma", "grad.beta"}) expect_close("bn_layer", k, r.at(k));
  expect_close("bn_layer", "moving_mean", flow::session::variable("bn-moving_mean"));
  expect_close("bn_layer", "moving_variance", flow::session::variable("bn-moving_variance"));
}

}  // namespace
