// ONNX models with dims known at call time: symbolic input dims load as
// dynamic placeholders (their names kept), shape arithmetic and NonZero
// import as engine ops, a dynamic job saves and loads back, and PP-OCRv4's
// real text recognizer and direction classifier (rapidocr-onnxruntime's
// wheel, unzipped by scripts/setup into BUILD/models/rapidocr) load and
// agree with ONNX Runtime's outputs recorded below.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <jobflow/jobflow.h>
#include <jobflow/onnx.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "errors.h"
#include "temp_dir.h"
#include "tensor_compare.h"

namespace flow = jobflow;
namespace fs = std::filesystem;
using flow::Blob;
using flow::Shape;
using flow::Tensor;

namespace {

using jobflow::testing::error_of;
using jobflow::testing::max_abs_diff;
using jobflow::testing::rows;

// A fresh folder for one test's files (kept after the test: temp_dir.h).
fs::path tmp_dir(const std::string& name) {
  const fs::path d = jobflow::testing::test_tmp_path("dyn_" + name);
  fs::create_directories(d);
  return d;
}

// sin(0.013 i + phase): the inputs the reference values below were made with.
Tensor sine(Shape s, double phase) {
  Tensor t(s, flow::Float);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(std::sin(i * 0.013 + phase));
  return t;
}

void add_input(::onnx::GraphProto* g, const std::string& name, int type, const std::vector<std::string>& dims) {
  auto* vi = g->add_input();
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(type);
  for (const std::string& d : dims) {
    auto* dim = tt->mutable_shape()->add_dim();
    if (!d.empty() && std::isdigit(static_cast<unsigned char>(d[0]))) dim->set_dim_value(std::stoll(d));
    else if (!d.empty()) dim->set_dim_param(d);
  }
}

::onnx::NodeProto* add_node(::onnx::GraphProto* g, const std::string& op, std::vector<std::string> in,
                            std::vector<std::string> out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(out[0]);
  for (auto& i : in) n->add_input(i);
  for (auto& o : out) n->add_output(o);
  return n;
}

void add_ints(::onnx::GraphProto* g, const std::string& name, const std::vector<int64_t>& v) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(::onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(v.size()));
  for (int64_t x : v) t->add_int64_data(x);
}

std::string save_model(::onnx::ModelProto& m, const std::string& name) {
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_version(17);
  const fs::path p = tmp_dir(name) / "model.onnx";
  std::ofstream f(p, std::ios::binary);
  m.SerializeToOstream(&f);
  return p.string();
}

fs::path models_dir() {
  const char* d = std::getenv("JOBFLOW_MODELS");
  return fs::path(d ? d : "models") / "rapidocr";
}

class DynamicModels : public ::testing::Test {
 protected:
  void SetUp() override { flow::session::reset(); }
};

}  // namespace

TEST_F(DynamicModels, SymbolicDimsLoadWithTheirNamesAndShapeArithmeticRuns) {
  // y = Reshape(x, Concat(Shape(x)[0:1], [2, 2])); idx = NonZero(x).
  ::onnx::ModelProto m;
  auto* g = m.mutable_graph();
  g->set_name("symbolic");
  add_input(g, "x", ::onnx::TensorProto::FLOAT, {"batch", "4"});
  add_ints(g, "starts", {0});
  add_ints(g, "ends", {1});
  add_ints(g, "tail", {2, 2});
  add_node(g, "Shape", {"x"}, {"s"});
  add_node(g, "Slice", {"s", "starts", "ends"}, {"b"});
  auto* c = add_node(g, "Concat", {"b", "tail"}, {"target"});
  auto* ax = c->add_attribute();
  ax->set_name("axis");
  ax->set_type(::onnx::AttributeProto::INT);
  ax->set_i(0);
  add_node(g, "Reshape", {"x", "target"}, {"y"});
  add_node(g, "NonZero", {"x"}, {"idx"});
  g->add_output()->set_name("y");
  g->add_output()->set_name("idx");
  const std::string path = save_model(m, "symbolic");
  auto job = flow::onnx::load(path, {});
  EXPECT_EQ(job->signature().str(), "symbolic(x: (batch, 4) float32) -> (Numpy, Numpy) [predict]");
  EXPECT_EQ(job->signature().output_names, (std::vector<std::string>{"y", "idx"}));
  EXPECT_NE(flow::onnx::inspect(path).str().find("x: (batch, 4) float32"), std::string::npos);
  for (int64_t B : {1, 3}) {
    Tensor x({B, 4}, flow::Float);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = i % 3 == 0 ? 0.0f : static_cast<float>(i);
    const auto out = job->run({x});
    EXPECT_EQ(out[0].shape(), (Shape{B, 2, 2}));
    EXPECT_TRUE(out[0].equal(x.reshape({B, 2, 2})));
    int64_t nz = 0;
    for (int64_t i = 0; i < x.numel(); ++i) nz += i % 3 != 0;
    EXPECT_EQ(out[1].shape(), (Shape{2, nz}));
    EXPECT_EQ(out[1].at(nz), 1.0);  // the first nonzero is x[0, 1]
  }
}

TEST_F(DynamicModels, ADynamicJobSavesAndLoadsBack) {
  flow::PlaceholderSpec ph = flow::Numpy::Placeholder({-1, 1, 8, 8}, flow::Float, "images");
  ph.dim_names = {"batch", "", "", ""};
  auto job = flow::global_function(flow::Predict, flow::function_config().name("dyn_save"), {ph},
                                   [](Blob x) -> flow::Numpy {
                                     auto init = flow::random_uniform_initializer(-0.5, 0.5);
                                     Blob h = flow::layers::conv2d(x, 3, 3, {.padding = "SAME", .activation = flow::nn::relu,
                                                                             .kernel_initializer = init, .name = "c"});
                                     h = flow::nn::max_pool2d(h, 2, 2);
                                     h = flow::layers::dense(h, 4, {.kernel_initializer = init, .name = "d"});
                                     return flow::nn::softmax(h);
                                   });
  EXPECT_EQ(job.compiled()->signature().str(), "dyn_save(images: (batch, 1, 8, 8) float32) -> Numpy [predict]");
  const fs::path d = tmp_dir("dyn_save");
  flow::onnx::save(*job.compiled(), (d / "job.onnx").string());
  ::onnx::ModelProto m;
  std::ifstream in(d / "job.onnx", std::ios::binary);
  ASSERT_TRUE(m.ParseFromIstream(&in));
  EXPECT_EQ(m.graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
  auto loaded = flow::onnx::load((d / "job.onnx").string(), {});
  EXPECT_EQ(loaded->signature().str(), job.compiled()->signature().str());
  const Tensor x = sine({5, 1, 8, 8}, 0.1);
  for (int64_t b : {2, 5}) EXPECT_TRUE(loaded->run({rows(x, 0, b)})[0].equal(job(rows(x, 0, b)))) << b;
  fs::remove_all(d);
}

TEST_F(DynamicModels, PPOCRv4ClassifierAgreesWithOnnxRuntime) {
  const fs::path p = models_dir() / "ch_ppocr_mobile_v2.0_cls_infer.onnx";
  if (!fs::exists(p)) GTEST_SKIP() << p << " is missing: run scripts/setup (it unzips rapidocr-onnxruntime's models)";
  auto job = flow::onnx::load(p.string(), {});
  EXPECT_EQ(job->signature().str(), "paddle-onnx(x: (?, 3, ?, ?) float32) -> Numpy [predict]");
  const Tensor x = sine({3, 3, 48, 192}, 0.5);
  const Tensor y = job->run({x})[0];
  ASSERT_EQ(y.shape(), (Shape{3, 2}));
  // ONNX Runtime 1.23 on the same input.
  const double ort[] = {0.4596792459487915, 0.5403207540512085, 0.4087914228439331,
                        0.5912085771560669, 0.3527856469154358, 0.647214412689209};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(y.at(i), ort[i], 1e-5) << i;
  // Batch 1 gives the rows of batch 3.
  for (int64_t r = 0; r < 3; ++r) EXPECT_LT(max_abs_diff(job->run({rows(x, r, 1)})[0], rows(y, r, 1)), 1e-6) << r;
  EXPECT_EQ(job->plan_cache_stats().compiles, 2u);
  // Saved as a job file (dims known per call as dim_params, the shape
  // arithmetic as Shape/Slice/Concat/Reshape) and loaded back: the same
  // results (to float rounding: threads are chosen per call, so the order
  // of a sum may differ between two runs).
  const fs::path d = tmp_dir("cls_save");
  flow::onnx::save(*job, (d / "cls.onnx").string());
  auto back = flow::onnx::load((d / "cls.onnx").string(), {});
  EXPECT_EQ(back->signature().str(), job->signature().str());
  const Tensor y_back = back->run({x})[0];
  ASSERT_EQ(y_back.shape(), y.shape());
  EXPECT_LT(max_abs_diff(y_back, y), 1e-6);
  fs::remove_all(d);
}

TEST_F(DynamicModels, PPOCRv4RecognizerAgreesWithOnnxRuntime) {
  const fs::path p = models_dir() / "ch_PP-OCRv4_rec_infer.onnx";
  if (!fs::exists(p)) GTEST_SKIP() << p << " is missing: run scripts/setup (it unzips rapidocr-onnxruntime's models)";
  auto job = flow::onnx::load(p.string(), {});
  EXPECT_EQ(job->signature().str(),
            "Model from PaddlePaddle.(x: (p2o.DynamicDimension.0, 3, ?, p2o.DynamicDimension.1) float32) -> Numpy "
            "[predict]");
  const Tensor x = sine({2, 3, 48, 160}, 0.25);
  const Tensor y = job->run({x})[0];
  ASSERT_EQ(y.shape(), (Shape{2, 20, 6625}));  // width / 8 steps, 6625 characters
  // ONNX Runtime 1.23: the best probability at steps 0..4 of both rows.
  const double ort[] = {0.6097371578216553, 0.7755239009857178, 0.7655259966850281, 0.8803966641426086,
                        0.870320737361908,  0.4882715046405792, 0.6530848741531372, 0.7951362729072571,
                        0.8553348779678345, 0.8493648171424866};
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 5; ++t) {
      double best = 0;
      for (int c = 0; c < 6625; ++c) best = std::max(best, y.at((b * 20 + t) * 6625 + c));
      EXPECT_NEAR(best, ort[b * 5 + t], 1e-4) << b << " " << t;
    }
  // Another width and a batch of one: another plan from the same job.
  const Tensor x1 = sine({1, 3, 48, 320}, 0.75);
  EXPECT_EQ(job->run({x1})[0].shape(), (Shape{1, 40, 6625}));
  EXPECT_LT(max_abs_diff(job->run({rows(x, 1, 1)})[0], rows(y, 1, 1)), 1e-5);
}

TEST_F(DynamicModels, PPOCRv4DetectorNamesWhatIsMissing) {
  const fs::path p = models_dir() / "ch_PP-OCRv4_det_infer.onnx";
  if (!fs::exists(p)) GTEST_SKIP() << p << " is missing: run scripts/setup (it unzips rapidocr-onnxruntime's models)";
  // Its symbolic dims load; Resize is another piece of work (issue 9's
  // operator set): until it lands, the error names it and its nodes.
  const std::string e = error_of([&] { flow::onnx::load(p.string(), {}); });
  if (e != "(no error)") {
    EXPECT_NE(e.find("unsupported ops: Resize (nodes p2o.Resize.0"), std::string::npos) << e;
  }
}
