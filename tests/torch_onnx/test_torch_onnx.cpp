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
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "jobflow/jobflow.h"
#include "jobflow/onnx.h"
#include "jobflow/session.h"

namespace {

namespace flow = jobflow;
namespace fs = std::filesystem;
using flow::Tensor;

struct Tol {
  double rtol, atol;
};
// Forward outputs: what the task asks (PyTorch float32 vs the engine's
// float32, both from the same weights and input).
constexpr Tol kForward{1e-5, 1e-6};
// The per-example loss of the train step.
constexpr Tol kLoss{1e-5, 1e-6};
// Weights after one SGD step, w - 0.1 * g: g's float32 rounding is scaled by
// the learning rate (measured: the worst element uses ~6% of this bound).
constexpr Tol kStep{1e-5, 1e-6};

struct Case {
  std::string name, file, net;
  int opset = 0;
};

class Data {
 public:
  static const Data* get(std::string& why) {
    static std::string reason;
    static std::unique_ptr<Data> data = [] {
      const char* dir = std::getenv("JOBFLOW_TORCH_ONNX_DIR");
      const std::string how =
          " Generate it with: /usr/bin/python3 tests/torch_onnx/make_torch_onnx.py DIR (needs Debian's "
          "python3-torch), then set JOBFLOW_TORCH_ONNX_DIR=DIR; meson does this at build time when "
          "/usr/bin/python3 can import torch.";
      if (!dir || !*dir) {
        reason = "JOBFLOW_TORCH_ONNX_DIR is not set: no PyTorch-exported models." + how;
        return std::unique_ptr<Data>();
      }
      if (!fs::exists(fs::path(dir) / "index.txt")) {
        reason = std::string("JOBFLOW_TORCH_ONNX_DIR=") + dir + " has no index.txt." + how;
        return std::unique_ptr<Data>();
      }
      auto d = std::make_unique<Data>();
      d->dir_ = dir;
      d->read_index();
      return d;
    }();
    why = reason;
    return data.get();
  }

  const std::vector<Case>& cases() const { return cases_; }
  std::string path(const std::string& file) const { return (dir_ / file).string(); }
  bool has(const std::string& name) const { return specs_.count(name) > 0; }

  Tensor tensor(const std::string& name) const {
    auto it = specs_.find(name);
    if (it == specs_.end()) throw std::runtime_error("index.txt has no tensor '" + name + "'");
    Tensor t(it->second.second, it->second.first);
    const fs::path p = dir_ / (name + ".bin");
    std::ifstream in(p, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + p.string());
    in.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
    if (!in || in.peek() != EOF) throw std::runtime_error(p.string() + " does not hold " + std::to_string(t.nbytes()) + " bytes");
    return t;
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
    std::ifstream in(dir_ / "index.txt");
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ls(line);
      std::string kind;
      ls >> kind;
      if (kind == "onnx") {
        Case c;
        ls >> c.name >> c.file >> c.net >> c.opset;
        cases_.push_back(c);
      } else if (kind == "tensor") {
        std::string name, dtype, shape;
        ls >> name >> dtype >> shape;
        flow::Shape s;
        if (shape != "-") {
          std::istringstream ss(shape);
          std::string d;
          while (std::getline(ss, d, ',')) s.push_back(std::stoll(d));
        }
        specs_[name] = {flow::dtype_from_name(dtype), s};
      } else {
        throw std::runtime_error("index.txt: unknown line: " + line);
      }
    }
  }

  fs::path dir_;
  std::vector<Case> cases_;
  std::map<std::string, std::pair<flow::DType, flow::Shape>> specs_;
};

std::string index_str(const flow::Shape& s, int64_t flat) {
  std::vector<int64_t> idx(s.size());
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
  std::string r = "[";
  for (size_t i = 0; i < idx.size(); ++i) r += (i ? ", " : "") + std::to_string(idx[i]);
  return r + "]";
}

// Element-wise |got - want| <= max(rtol * |want|, atol); on failure names the
// worst element (by how far past its bound it is) and how many failed.
// `f64` (optional): the float64 truth, shown next to the worst element.
::testing::AssertionResult close(const std::string& what, const Tensor& got, const Tensor& want, Tol tol,
                                 const Tensor& f64 = Tensor()) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << what << ": shape " << flow::shape_str(got.shape()) << ", want "
                                         << flow::shape_str(want.shape());
  int64_t worst = -1, failed = 0;
  double worst_ratio = 0, max_abs = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.at(i), w = want.at(i);
    const double bound = std::max(tol.rtol * std::fabs(w), tol.atol);
    const double err = std::fabs(g - w);
    max_abs = std::max(max_abs, std::isnan(err) ? INFINITY : err);
    const double ratio = std::isfinite(err) ? err / bound : INFINITY;
    if (!(err <= bound)) ++failed;
    if (worst < 0 || ratio > worst_ratio || std::isnan(g)) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (failed == 0) {
    std::ostringstream m;
    m.precision(3);
    m << what << ": max |diff| " << max_abs << ", worst at " << worst_ratio << "x its bound";
    return ::testing::AssertionSuccess() << m.str();
  }
  std::ostringstream r;
  r.precision(9);
  r << what << ": " << failed << " of " << want.numel() << " elements differ by more than max(" << tol.rtol
    << " * |want|, " << tol.atol << "); worst " << index_str(want.shape(), worst) << ": got " << got.at(worst)
    << ", want " << want.at(worst) << " (|diff| " << std::fabs(got.at(worst) - want.at(worst)) << ", "
    << worst_ratio << "x its bound)";
  if (f64.defined()) r << "; float64 truth " << f64.at(worst);
  return ::testing::AssertionFailure() << r.str();
}

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
    const auto r = close(c.name + " logits", out[0], data_->tensor(c.net + ".output"), kForward,
                         data_->tensor(c.net + ".output_f64"));
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
    const auto rl = close(c.name + " loss", loss, data_->tensor(c.net + ".step.loss"), kLoss);
    EXPECT_TRUE(rl);
    if (rl) std::printf("  %s\n", rl.message());

    for (auto& p : params) {
      const Tensor after = flow::session::variable(p);
      EXPECT_FALSE(after.equal(before[p])) << "one step did not change '" << p << "'";
      const auto rp = close(c.name + " " + p + " after one step", after, data_->tensor(c.net + ".step." + p), kStep);
      EXPECT_TRUE(rp);
      if (rp) std::printf("  %s\n", rp.message());
    }
  }
}

}  // namespace
