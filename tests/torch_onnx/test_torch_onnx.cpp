// Ordinary ONNX models from torch.onnx.export (tests/torch_onnx/
// make_torch_onnx.py: the seeds' LeNet and MLP in PyTorch, briefly trained,
// exported with a fixed batch of 4 at opsets 11, 13 and 17):
//   * each .onnx loads with jobflow::onnx::load as a predict job and gives
//     PyTorch's float32 output for the saved input, element by element within
//     |got - want| <= max(1e-5 * |want|, 1e-6);
//   * each also loads as a train job (LoadOptions{Train,
//     sparse_softmax_cross_entropy, "sgd:lr=0.1,momentum=0"}): one step
//     returns PyTorch's per-example loss, finite, changes every weight and
//     moves it to where PyTorch's SGD step puts it (same tolerance).
//
// The data folder comes from JOBFLOW_TORCH_ONNX_DIR (meson generates it at
// build time when /usr/bin/python3 can import torch); without it every test
// skips, saying how to generate it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "jobflow/jobflow.h"
#include "jobflow/onnx.h"
#include "jobflow/session.h"
#include "raw_tensor.h"

namespace {

namespace flow = jobflow;
namespace fs = std::filesystem;
using flow::Tensor;
using flow::testing::all_close;
using flow::testing::Tolerance;

// Forward outputs: what the task asks (PyTorch float32 vs the engine's
// float32, both from the same weights and input).
constexpr Tolerance kForward{1e-5, 1e-6, Tolerance::Max};
// The per-example loss of the train step.
constexpr Tolerance kLoss{1e-5, 1e-6, Tolerance::Max};
// Weights after one SGD step, w - 0.1 * g: g's float32 rounding is scaled by
// the learning rate (measured: the worst element uses ~6% of this bound).
constexpr Tolerance kStep{1e-5, 1e-6, Tolerance::Max};

struct Case {
  std::string name, file, net;
  int opset = 0;
};

class Data {
 public:
  static const Data* get(std::string& why) {
    return flow::testing::load_data_dir<Data>(
        "JOBFLOW_TORCH_ONNX_DIR",
        " Generate it with: /usr/bin/python3 tests/torch_onnx/make_torch_onnx.py DIR (needs Debian's "
        "python3-torch), then set JOBFLOW_TORCH_ONNX_DIR=DIR; meson does this at build time when "
        "/usr/bin/python3 can import torch.",
        why);
  }

  explicit Data(const std::string& dir) : dir_(dir) { read_index(); }

  const std::vector<Case>& cases() const { return cases_; }
  std::string path(const std::string& file) const { return (dir_ / file).string(); }
  bool has(const std::string& name) const { return specs_.count(name) > 0; }

  Tensor tensor(const std::string& name) const {
    auto it = specs_.find(name);
    if (it == specs_.end()) throw std::runtime_error("index.txt has no tensor '" + name + "'");
    return flow::testing::read_raw(dir_ / (name + ".bin"), it->second.first, it->second.second);
  }

  // Parameter names stored for `net` ("conv1.weight"), from "<net>.step.<param>".
  std::vector<std::string> step_params(const std::string& net) const {
    std::vector<std::string> r;
    const std::string prefix = net + ".step.";
    for (auto& [name, spec] : specs_)
      if (name.rfind(prefix, 0) == 0 && name != prefix + "loss") r.push_back(name.substr(prefix.size()));
    return r;
  }

 private:
  void read_index() {
    flow::testing::for_each_index_line(dir_ / "index.txt", [this](std::istringstream& ls, const std::string& line) {
      std::string kind;
      ls >> kind;
      if (kind == "onnx") {
        Case c;
        ls >> c.name >> c.file >> c.net >> c.opset;
        cases_.push_back(c);
      } else if (kind == "tensor") {
        std::string name, dtype, shape;
        ls >> name >> dtype >> shape;
        specs_[name] = {flow::dtype_from_name(dtype), flow::testing::parse_shape(shape)};
      } else {
        throw std::runtime_error("index.txt: unknown line: " + line);
      }
    });
  }

  fs::path dir_;
  std::vector<Case> cases_;
  std::map<std::string, std::pair<flow::DType, flow::Shape>> specs_;
};

class TorchOnnx : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    data_ = Data::get(why);
    if (!data_) GTEST_SKIP() << why;
    if (data_->cases().empty()) GTEST_SKIP() << "index.txt lists no .onnx files";
    // Loaded models share variables by name ("conv1.weight"): start each test
    // from an empty session so one test's train step cannot leak into another.
    flow::session::reset();
  }
  const Data* data_ = nullptr;
};

TEST_F(TorchOnnx, ExportsEveryOpset) {
  // make_torch_onnx.py exports opsets 11, 13, 17 (torch 1.13 knows them all).
  for (const char* net : {"lenet", "mlp"}) {
    std::vector<int> opsets;
    for (auto& c : data_->cases())
      if (c.net == net) opsets.push_back(c.opset);
    EXPECT_EQ(opsets, (std::vector<int>{11, 13, 17})) << net;
  }
}

TEST_F(TorchOnnx, PredictMatchesPyTorch) {
  for (const Case& c : data_->cases()) {
    SCOPED_TRACE(c.name + " (" + c.file + ")");
    flow::session::reset();
    std::shared_ptr<flow::CompiledJob> job;
    ASSERT_NO_THROW(job = flow::onnx::load(data_->path(c.file)));
    const auto& sig = job->signature();
    EXPECT_EQ(sig.type, flow::JobType::Predict);
    ASSERT_EQ(sig.inputs.size(), 1u);
    EXPECT_EQ(sig.input_names[0], "images");
    EXPECT_EQ(sig.inputs[0].shape, (flow::Shape{4, 1, 28, 28}));
    ASSERT_EQ(sig.outputs.size(), 1u);
    EXPECT_EQ(sig.outputs[0].shape, (flow::Shape{4, 10}));

    const Tensor x = data_->tensor(c.net + ".input");
    auto out = job->run({x});
    ASSERT_EQ(out.size(), 1u);
    const auto r = all_close(c.name + " logits", out[0], data_->tensor(c.net + ".output"), kForward,
                             data_->tensor(c.net + ".output_f64"), "float64 PyTorch");
    EXPECT_TRUE(r);
    if (r) std::printf("  %s: %s\n", c.name.c_str(), r.message());
    // Repeatable: a second call gives the same bits.
    auto again = job->run({x});
    EXPECT_TRUE(again[0].equal(out[0])) << c.name;
  }
}

TEST_F(TorchOnnx, TrainStepMatchesPyTorch) {
  for (const Case& c : data_->cases()) {
    SCOPED_TRACE(c.name + " (" + c.file + ") as a train job");
    flow::session::reset();
    flow::onnx::LoadOptions o;
    o.type = flow::JobType::Train;
    o.loss = "sparse_softmax_cross_entropy";
    o.optimizer = "sgd:lr=0.1,momentum=0";
    std::shared_ptr<flow::CompiledJob> job;
    ASSERT_NO_THROW(job = flow::onnx::load(data_->path(c.file), o));
    const auto& sig = job->signature();
    EXPECT_EQ(sig.type, flow::JobType::Train);
    ASSERT_EQ(sig.inputs.size(), 2u);
    EXPECT_EQ(sig.input_names[1], "labels");
    EXPECT_EQ(sig.inputs[1].shape, (flow::Shape{4}));
    EXPECT_EQ(sig.inputs[1].dtype, flow::DType::Int32);

    const auto params = data_->step_params(c.net);
    ASSERT_FALSE(params.empty());
    std::map<std::string, Tensor> before;
    for (auto& p : params) {
      ASSERT_TRUE(flow::session::has_variable(p)) << "the loaded model has no variable '" << p << "'";
      before[p] = flow::session::variable(p).clone();
    }

    auto out = job->run({data_->tensor(c.net + ".input"), data_->tensor(c.net + ".labels")});
    job->sync();
    ASSERT_EQ(out.size(), 1u);
    const Tensor& loss = out[0];
    for (int64_t i = 0; i < loss.numel(); ++i) EXPECT_TRUE(std::isfinite(loss.at(i))) << "loss[" << i << "]";
    const auto rl = all_close(c.name + " loss", loss, data_->tensor(c.net + ".step.loss"), kLoss);
    EXPECT_TRUE(rl);
    if (rl) std::printf("  %s\n", rl.message());

    for (auto& p : params) {
      const Tensor after = flow::session::variable(p);
      EXPECT_FALSE(after.equal(before[p])) << "one step did not change '" << p << "'";
      const auto rp =
          all_close(c.name + " " + p + " after one step", after, data_->tensor(c.net + ".step." + p), kStep);
      EXPECT_TRUE(rp);
      if (rp) std::printf("  %s\n", rp.message());
    }
  }
}

}  // namespace
