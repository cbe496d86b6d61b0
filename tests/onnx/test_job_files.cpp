// Job files (docs/job-files.md): the text forms of onnx_util, what save()
// writes (read back with protobuf), and with the importer, job -> file ->
// job round trips that give bit-identical results.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "jobflow/checkpoint_io.h"
#include "jobflow/jobflow.h"
#include "jobflow/models/seeds.h"
#include "jobflow/onnx.h"
#include "jobflow/primitive.h"
#include "onnx/onnx_util.h"
#include "ops_internal.h"
#include "temp_dir.h"


namespace {

namespace flow = jobflow;
namespace fs = std::filesystem;
namespace u = jobflow::onnx_util;
namespace models = jobflow::models;
using flow::Structure;
using flow::Tensor;

fs::path tmp_dir(const std::string& name) { return flow::testing::test_tmp_dir("job_files_" + name); }

::onnx::ModelProto read_model(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  ::onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromIstream(&in)) << p;
  return m;
}

std::map<std::string, std::string> metadata(const ::onnx::ModelProto& m) {
  std::map<std::string, std::string> r;
  for (auto& kv : m.metadata_props()) r[kv.key()] = kv.value();
  return r;
}

Tensor random_images(uint32_t seed, int64_t n = models::BATCH_SIZE) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(0.f, 1.f);
  Tensor t({n, 1, 28, 28}, flow::Float32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = d(g);
  return t;
}
Tensor random_labels(uint32_t seed, int64_t n = models::BATCH_SIZE) {
  std::mt19937 g(seed);
  Tensor t({n}, flow::Int32);
  for (int64_t i = 0; i < n; ++i) t.data<int32_t>()[i] = static_cast<int32_t>(g() % 10);
  return t;
}

// ------------------------------------------------------------------ text forms

Structure leaf(int i, Structure::Leaf l = Structure::Leaf::Numpy) {
  Structure s;
  s.kind = Structure::Kind::Leaf;
  s.leaf = l;
  s.index = i;
  return s;
}
Structure node(Structure::Kind k, std::vector<Structure> c, std::vector<std::string> keys = {}) {
  Structure s;
  s.kind = k;
  s.children = std::move(c);
  s.keys = std::move(keys);
  return s;
}
bool same(const Structure& a, const Structure& b) {
  if (a.kind != b.kind || a.children.size() != b.children.size() || a.keys != b.keys) return false;
  if (a.kind == Structure::Kind::Leaf && (a.leaf != b.leaf || a.index != b.index)) return false;
  for (size_t i = 0; i < a.children.size(); ++i)
    if (!same(a.children[i], b.children[i])) return false;
  return true;
}

TEST(OnnxUtil, StructureText) {
  using K = Structure::Kind;
  const Structure s = node(K::Tuple, {leaf(0), node(K::List, {leaf(1, Structure::Leaf::ListNumpy), leaf(2)}),
                                      node(K::Dict, {node(K::Dict, {leaf(3)}, {"256"})}, {"x"})});
  EXPECT_EQ(u::structure_to_text(s), "(Numpy,[ListNumpy,Numpy],{x:{256:Numpy}})");
  EXPECT_TRUE(same(u::structure_from_text(u::structure_to_text(s)), s));

  Structure none;
  EXPECT_EQ(u::structure_to_text(none), "None");
  EXPECT_EQ(u::structure_from_text("None").kind, K::None);

  // Keys that need quoting, empty containers, a one-element tuple, leaves
  // out of order, ListListNumpy.
  const Structure odd = node(K::Tuple, {node(K::Dict, {leaf(1), leaf(0, Structure::Leaf::ListListNumpy)},
                                             {"a b", "q\"uote,:{}"}),
                                        node(K::List, {}), node(K::Tuple, {}), node(K::Tuple, {leaf(2)}), none});
  const std::string t = u::structure_to_text(odd);
  EXPECT_TRUE(same(u::structure_from_text(t), odd)) << t;
  EXPECT_EQ(u::structure_to_text(u::structure_from_text(t)), t);

  for (const char* bad : {"", "(", "(Numpy", "Numpy)", "{x Numpy}", "Foo", "(Numpy,)", "[Numpy Numpy]", "Numpy#x"})
    EXPECT_THROW(u::structure_from_text(bad), flow::Error) << bad;
}

TEST(OnnxUtil, Numbers) {
  for (double v : {0.0, 0.1, 1e-8, 0.999, 1.0 / 3.0, -2.5e300, 5e-324, 123456789.0})
    EXPECT_EQ(u::number_from_text(u::number_to_text(v), "t"), v) << u::number_to_text(v);
  EXPECT_EQ(u::number_to_text(0.1), "0.1");
  EXPECT_EQ(u::number_to_text(1e-8), "1e-08");
  EXPECT_TRUE(std::isnan(u::number_from_text("nan", "t")));
  EXPECT_THROW(u::number_from_text("0.1x", "t"), flow::Error);
}

TEST(OnnxUtil, ScheduleText) {
  namespace opt = flow::optimizer;
  const opt::Scheduler cases[] = {
      opt::PiecewiseConstantScheduler({}, {0.1}),
      opt::PiecewiseConstantScheduler({100, 2000}, {0.1, 0.01, 1.0 / 3.0}),
      opt::CosineScheduler(0.05, 1000, 0.01),
      opt::LinearWarmupScheduler(opt::CosineScheduler(0.1, 500), 50, 0.1),
      opt::LinearWarmupScheduler(opt::LinearWarmupScheduler(opt::PiecewiseConstantScheduler({3}, {1, 2}), 2), 4),
  };
  EXPECT_EQ(u::schedule_to_text(cases[0]), "piecewise_constant:boundaries=;values=0.1");
  EXPECT_EQ(u::schedule_to_text(cases[2]), "cosine:base_lr=0.05,decay_steps=1000,alpha=0.01");
  for (const auto& s : cases) {
    const std::string t = u::schedule_to_text(s);
    const opt::Scheduler back = u::schedule_from_text(t);
    EXPECT_EQ(u::schedule_to_text(back), t);
    for (int64_t step : {0, 1, 2, 3, 10, 49, 50, 51, 100, 499, 500, 501, 1000, 5000})
      EXPECT_EQ(back.lr(step), s.lr(step)) << t << " step " << step;
  }
  for (const char* bad : {"", "piecewise", "piecewise_constant:values=", "cosine:base_lr=1", "linear_warmup:steps=1",
                          "piecewise_constant:boundaries=1;values=1", "cosine:base_lr=1,decay_steps=5,beta=2"})
    EXPECT_THROW(u::schedule_from_text(bad), flow::Error) << bad;
}

TEST(OnnxUtil, OptimizerText) {
  namespace opt = flow::optimizer;
  opt::PiecewiseConstantScheduler s({}, {0.1});
  EXPECT_EQ(u::optimizer_to_text(opt::SGD(s, 0)), "sgd:momentum=0");
  EXPECT_EQ(u::optimizer_to_text(opt::SGD(s, 0.9)), "sgd:momentum=0.9");
  EXPECT_EQ(u::optimizer_to_text(opt::Adam(s)), "adam:beta1=0.9,beta2=0.999,epsilon=1e-08");
  for (std::string t : {"sgd:momentum=0", "sgd:momentum=0.875", "adam:beta1=0.8,beta2=0.99,epsilon=1e-07"}) {
    auto o = u::optimizer_from_text(t, s);
    EXPECT_EQ(u::optimizer_to_text(*o), t);
    EXPECT_EQ(o->scheduler().lr(0), 0.1);
  }
  // LoadOptions' form: lr= gives a constant schedule, eps is epsilon.
  auto o = u::optimizer_from_text("adam:lr=0.001,beta1=0.9,beta2=0.999,eps=1e-8", {});
  EXPECT_EQ(u::optimizer_to_text(*o), "adam:beta1=0.9,beta2=0.999,epsilon=1e-08");
  EXPECT_EQ(o->scheduler().lr(7), 0.001);
  EXPECT_EQ(u::optimizer_to_text(*u::optimizer_from_text("sgd:lr=0.1,momentum=0.9", {})), "sgd:momentum=0.9");
  EXPECT_THROW(u::optimizer_from_text("rmsprop:lr=1", {}), flow::Error);
  EXPECT_THROW(u::optimizer_from_text("sgd:lr=1,nesterov=1", {}), flow::Error);
  EXPECT_THROW(u::optimizer_from_text("sgd:lr=1", s), flow::Error);  // two schedules
}

TEST(OnnxUtil, TensorProto) {
  const Tensor ts[] = {Tensor::from<float>({2, 3}, {1, -2, 3.5f, 0, 1e-30f, 7}), Tensor::from<double>({1}, {0.1}),
                       Tensor::from<int32_t>({3}, {1, -2, 3}), Tensor::from<int64_t>({}, {1LL << 40}),
                       Tensor::from<int8_t>({2}, {-1, 5}), Tensor::from<uint8_t>({2, 1}, {255, 0}),
                       Tensor({0, 4}, flow::Float32)};
  for (const Tensor& t : ts) {
    ::onnx::TensorProto p;
    u::tensor_to_proto(t, "t", &p);
    EXPECT_EQ(p.name(), "t");
    EXPECT_TRUE(u::tensor_from_proto(p, "", 1 << 20, "t").equal(t)) << t.str();
  }
  // Typed fields.
  ::onnx::TensorProto p;
  p.set_data_type(::onnx::TensorProto::FLOAT);
  p.add_dims(2);
  p.add_float_data(1.5f);
  p.add_float_data(-2.f);
  EXPECT_TRUE(u::tensor_from_proto(p, "", 1 << 20, "t").equal(Tensor::from<float>({2}, {1.5f, -2.f})));
  p.add_float_data(3.f);
  EXPECT_THROW(u::tensor_from_proto(p, "", 1 << 20, "t"), flow::Error);  // 3 values for 2
  // Limits before allocation.
  ::onnx::TensorProto big;
  big.set_data_type(::onnx::TensorProto::FLOAT);
  big.add_dims(1LL << 40);
  big.add_dims(1LL << 40);
  EXPECT_THROW(u::tensor_from_proto(big, "", uint64_t(1) << 30, "big"), flow::Error);
  ::onnx::TensorProto neg;
  neg.set_data_type(::onnx::TensorProto::FLOAT);
  neg.add_dims(-1);
  EXPECT_THROW(u::tensor_from_proto(neg, "", 1 << 20, "neg"), flow::Error);
  ::onnx::TensorProto str;
  str.set_data_type(::onnx::TensorProto::STRING);
  EXPECT_THROW(u::tensor_from_proto(str, "", 1 << 20, "str"), flow::Error);
}

TEST(OnnxUtil, ExternalDataStaysInside) {
  const fs::path d = tmp_dir("external");
  fs::create_directories(d / "model" / "w");
  {
    std::ofstream o(d / "model" / "w" / "out", std::ios::binary);
    const float v[3] = {1, 2, 3};
    o.write(reinterpret_cast<const char*>(v), sizeof v);
  }
  { std::ofstream o(d / "secret"); o << "xxxxxxxxxxxx"; }
  auto proto = [](const std::string& loc, int64_t n, const std::string& offset = "0") {
    ::onnx::TensorProto p;
    p.set_data_type(::onnx::TensorProto::FLOAT);
    p.add_dims(n);
    p.set_data_location(::onnx::TensorProto::EXTERNAL);
    auto* e = p.add_external_data();
    e->set_key("location");
    e->set_value(loc);
    e = p.add_external_data();
    e->set_key("offset");
    e->set_value(offset);
    return p;
  };
  const std::string base = (d / "model").string();
  EXPECT_TRUE(u::tensor_from_proto(proto("w/out", 3), base, 1 << 20, "w").equal(Tensor::from<float>({3}, {1, 2, 3})));
  EXPECT_TRUE(u::tensor_from_proto(proto("w/out", 2, "4"), base, 1 << 20, "w").equal(Tensor::from<float>({2}, {2, 3})));
  EXPECT_THROW(u::tensor_from_proto(proto("w/out", 4), base, 1 << 20, "w"), flow::Error);        // past the end
  EXPECT_THROW(u::tensor_from_proto(proto("w/out", 3, "8"), base, 1 << 20, "w"), flow::Error);   // past the end
  EXPECT_THROW(u::tensor_from_proto(proto("../secret", 3), base, 1 << 20, "w"), flow::Error);    // outside
  EXPECT_THROW(u::tensor_from_proto(proto((d / "secret").string(), 3), base, 1 << 20, "w"), flow::Error);
  EXPECT_THROW(u::tensor_from_proto(proto("missing", 3), base, 1 << 20, "w"), flow::Error);
  EXPECT_THROW(u::tensor_from_proto(proto("w/out", 3), "", 1 << 20, "w"), flow::Error);         // no folder
  fs::create_directory_symlink(d, d / "model" / "up");
  EXPECT_THROW(u::tensor_from_proto(proto("up/secret", 3), base, 1 << 20, "w"), flow::Error);   // symlink out
}

// ------------------------------------------------------------------ export

class JobFiles : public ::testing::Test {
 protected:
  void SetUp() override { flow::session::reset(); }
};

TEST_F(JobFiles, PredictFileContents) {
  auto job = models::predict_job(models::Net::LeNet, "lenet_predict");
  flow::CheckPoint().init();
  const fs::path d = tmp_dir("predict");
  flow::onnx::save(*job, (d / "lenet_predict.onnx").string());
  const auto m = read_model(d / "lenet_predict.onnx");
  EXPECT_EQ(m.ir_version(), 8);
  ASSERT_EQ(m.opset_import_size(), 1);
  EXPECT_EQ(m.opset_import(0).version(), 17);
  const auto& g = m.graph();
  EXPECT_EQ(g.name(), "lenet_predict");
  ASSERT_EQ(g.input_size(), 1);
  EXPECT_EQ(g.input(0).name(), "images");
  const auto& it = g.input(0).type().tensor_type();
  EXPECT_EQ(it.elem_type(), ::onnx::TensorProto::FLOAT);
  ASSERT_EQ(it.shape().dim_size(), 4);
  EXPECT_EQ(it.shape().dim(0).dim_value(), 100);
  EXPECT_EQ(it.shape().dim(1).dim_value(), 1);
  ASSERT_EQ(g.output_size(), 1);
  EXPECT_EQ(g.output(0).type().tensor_type().shape().dim(1).dim_value(), 10);

  std::multiset<std::string> ops;
  for (auto& n : g.node()) ops.insert(n.op_type());
  EXPECT_EQ(ops.count("Conv"), 2u);
  EXPECT_EQ(ops.count("MaxPool"), 2u);
  EXPECT_EQ(ops.count("Relu"), 3u);
  EXPECT_EQ(ops.count("Gemm"), 2u);
  EXPECT_EQ(ops.count("Reshape"), 1u);
  EXPECT_EQ(ops.count("Dropout"), 0u);  // predict: the seeds' lenet(train=false)
  EXPECT_EQ(ops.size(), 10u) << "no other nodes (fusion leftovers, bias adds folded into Conv/Gemm)";

  // Initializers: the variables with their current values, plus the reshape's shape.
  std::set<std::string> vars;
  for (auto& p : g.initializer()) {
    if (p.data_type() == ::onnx::TensorProto::INT64) continue;
    vars.insert(p.name());
    const Tensor v = u::tensor_from_proto(p, "", uint64_t(1) << 30, p.name());
    EXPECT_TRUE(v.equal(flow::session::variable(p.name()))) << p.name();
  }
  EXPECT_EQ(vars, (std::set<std::string>{"conv1-weight", "conv1-bias", "conv2-weight", "conv2-bias", "dense1-weight",
                                         "dense1-bias", "dense2-weight", "dense2-bias"}));

  auto md = metadata(m);
  EXPECT_EQ(md[u::kVersion], "1");
  EXPECT_EQ(md[u::kJobType], "predict");
  EXPECT_EQ(md[u::kJobName], "lenet_predict");
  EXPECT_EQ(md[u::kInputStructure], "(Numpy)");
  EXPECT_EQ(md[u::kOutputStructure], "Numpy");
  EXPECT_EQ(md[u::kCallback], "0");
  EXPECT_EQ(md[u::kStep], "0");
  EXPECT_EQ(md.count(u::kLoss), 0u);
  EXPECT_EQ(md.count(u::kOptimizer), 0u);
  // Every value a node reads is defined before it (topological order).
  std::set<std::string> defined{"images"};
  for (auto& p : g.initializer()) defined.insert(p.name());
  for (auto& n : g.node()) {
    for (auto& i : n.input()) EXPECT_TRUE(i.empty() || defined.count(i)) << n.name() << " reads " << i;
    for (auto& o : n.output()) EXPECT_TRUE(defined.insert(o).second) << o << " defined twice";
  }
  for (auto& o : g.output()) EXPECT_TRUE(defined.count(o.name()));
}

TEST_F(JobFiles, FusionDoesNotChangeTheFile) {
  // The compiler fuses matmul/conv + bias_add + relu in place; the exporter
  // folds an unfused bias_add into Gemm/Conv itself: the same nodes either way.
  auto fused = models::predict_job(models::Net::LeNet, "fused");
  auto unfused = flow::global_function(flow::Predict, flow::function_config().name("unfused").enable_fusion(false),
                                       {flow::Numpy::Placeholder({100, 1, 28, 28}, flow::Float, "images")},
                                       [](flow::Blob images) -> flow::Numpy { return models::lenet(images); });
  flow::CheckPoint().init();
  const fs::path d = tmp_dir("fusion");
  flow::onnx::save(*fused, (d / "a.onnx").string());
  flow::onnx::save(*unfused.compiled(), (d / "b.onnx").string());
  const auto a = read_model(d / "a.onnx"), b = read_model(d / "b.onnx");
  ASSERT_EQ(a.graph().node_size(), b.graph().node_size());
  for (int i = 0; i < a.graph().node_size(); ++i) {
    EXPECT_EQ(a.graph().node(i).op_type(), b.graph().node(i).op_type()) << i;
    EXPECT_EQ(a.graph().node(i).input_size(), b.graph().node(i).input_size()) << i;
  }
  auto loaded = flow::onnx::load((d / "b.onnx").string(), {});
  const Tensor x = random_images(11);
  // The loaded predict plan runs the layout pass (blocked formats, fused
  // post-ops, prepared weights): its oneDNN kernels sum in another order
  // than the unfused plan's, so the two agree to float32 rounding.
  const Tensor want = unfused(x), got = loaded->run({x})[0];
  ASSERT_EQ(want.shape(), got.shape());
  double scale = 0, worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::abs(want.at(i)));
  for (int64_t i = 0; i < want.numel(); ++i) worst = std::max(worst, std::abs(want.at(i) - got.at(i)));
  EXPECT_LE(worst, 1e-5 * scale) << "largest difference " << worst << " for outputs up to " << scale;
}

TEST_F(JobFiles, EvalReturnsPlaceholderThroughIdentity) {
  auto job = models::eval_job(models::Net::MLP, "mlp_eval");
  const fs::path d = tmp_dir("eval");
  flow::onnx::save(*job, (d / "e.onnx").string());  // variables never initialized: save initializes them
  const auto m = read_model(d / "e.onnx");
  const auto& g = m.graph();
  ASSERT_EQ(g.input_size(), 2);
  EXPECT_EQ(g.input(1).name(), "labels");
  EXPECT_EQ(g.input(1).type().tensor_type().elem_type(), ::onnx::TensorProto::INT32);
  ASSERT_EQ(g.output_size(), 2);
  EXPECT_EQ(g.output(0).name(), "output0");
  bool identity = false;
  for (auto& n : g.node())
    if (n.op_type() == "Identity" && n.input(0) == "labels" && n.output(0) == "output0") identity = true;
  EXPECT_TRUE(identity);
  auto md = metadata(m);
  EXPECT_EQ(md[u::kOutputStructure], "(Numpy,Numpy)");
  EXPECT_EQ(md[u::kInputStructure], "(Numpy,Numpy)");
  for (auto& p : g.initializer())
    if (p.data_type() == ::onnx::TensorProto::FLOAT) {
      EXPECT_TRUE(u::tensor_from_proto(p, "", uint64_t(1) << 30, p.name()).equal(flow::session::variable(p.name())));
    }
}

TEST_F(JobFiles, TrainMetadataAndOptimizerState) {
  // SGD with momentum: "<var>-momentum" state travels as initializers.
  auto job = models::train_job(models::Net::MLP, "mlp_train", 0.05, 0.9);
  flow::CheckPoint().init();
  for (int i = 0; i < 3; ++i) job->run({random_images(i), random_labels(i)});
  const fs::path d = tmp_dir("train");
  flow::onnx::save(*job, (d / "t.onnx").string());
  const auto m = read_model(d / "t.onnx");
  auto md = metadata(m);
  EXPECT_EQ(md[u::kJobType], "train");
  EXPECT_EQ(md[u::kStep], "3");
  EXPECT_EQ(md[u::kOptimizer], "sgd:momentum=0.9");
  EXPECT_EQ(md[u::kSchedule], "piecewise_constant:boundaries=;values=0.05");
  EXPECT_EQ(md[u::kTrainable], "hidden-bias,hidden-weight,output-bias,output-weight");
  EXPECT_EQ(md[u::kState], "hidden-bias-momentum,hidden-weight-momentum,output-bias-momentum,output-weight-momentum");
  EXPECT_EQ(md[u::kSeed], "0");
  EXPECT_EQ(md[u::kDevice], "cpu");
  // The loss names the per-example loss the SoftmaxCrossEntropyLoss produces.
  bool found = false;
  for (auto& n : m.graph().node())
    if (n.op_type() == "SoftmaxCrossEntropyLoss") {
      found = true;
      EXPECT_EQ(n.output(0), md[u::kLoss]);
      ASSERT_EQ(n.attribute_size(), 1);
      EXPECT_EQ(n.attribute(0).s(), "none");
    }
  EXPECT_TRUE(found);
  std::set<std::string> inits;
  for (auto& p : m.graph().initializer()) {
    inits.insert(p.name());
    if (p.name().find("-momentum") != std::string::npos) {
      const Tensor v = u::tensor_from_proto(p, "", uint64_t(1) << 30, p.name());
      EXPECT_TRUE(v.equal(flow::session::variable(p.name())));
      bool nonzero = false;
      for (int64_t i = 0; i < v.numel(); ++i) nonzero |= v.at(i) != 0.0;
      EXPECT_TRUE(nonzero) << p.name() << ": momentum after 3 steps";
    }
  }
  EXPECT_TRUE(inits.count("hidden-weight-momentum"));
  EXPECT_TRUE(inits.count("output-bias-momentum"));
}

TEST_F(JobFiles, LeNetTrainHasDropoutInTrainingMode) {
  auto job = models::train_job(models::Net::LeNet, "lenet_train");
  const fs::path d = tmp_dir("lenet_train");
  flow::onnx::save(*job, (d / "t.onnx").string());
  const auto m = read_model(d / "t.onnx");
  int dropouts = 0;
  for (auto& n : m.graph().node())
    if (n.op_type() == "Dropout") {
      ++dropouts;
      EXPECT_EQ(n.name(), "dropout");  // the node name keys its mask stream
      EXPECT_EQ(n.input_size(), 3);
    }
  EXPECT_EQ(dropouts, 1);
  EXPECT_EQ(metadata(m)[u::kOptimizer], "sgd:momentum=0");
  EXPECT_EQ(metadata(m)[u::kState], "");
}

TEST_F(JobFiles, ExternalDataCheckpoint) {
  auto job = models::predict_job(models::Net::MLP, "mlp_predict");
  flow::CheckPoint().init();
  const fs::path d = tmp_dir("external_ckpt");
  flow::onnx::SaveOptions so;
  so.checkpoint_dir = "weights";
  flow::onnx::save(*job, (d / "m.onnx").string(), so);
  ASSERT_TRUE(fs::exists(d / "weights" / "snapshot_done"));
  const auto ck = flow::checkpoint_io::load((d / "weights").string());
  EXPECT_EQ(ck.size(), 4u);
  const auto m = read_model(d / "m.onnx");
  int external = 0;
  for (auto& p : m.graph().initializer()) {
    if (p.data_type() == ::onnx::TensorProto::INT64) continue;
    ++external;
    EXPECT_EQ(p.data_location(), ::onnx::TensorProto::EXTERNAL);
    EXPECT_FALSE(p.has_raw_data());
    std::map<std::string, std::string> kv;
    for (auto& e : p.external_data()) kv[e.key()] = e.value();
    EXPECT_EQ(kv["location"], "weights/" + p.name() + "/out");
    const Tensor v = u::tensor_from_proto(p, d.string(), uint64_t(1) << 30, p.name());
    EXPECT_TRUE(v.equal(flow::session::variable(p.name())));
    EXPECT_TRUE(v.equal(ck.at(p.name())));
  }
  EXPECT_EQ(external, 4);
  // The file is small: the weights are beside it.
  EXPECT_LT(fs::file_size(d / "m.onnx"), 64u * 1024);
  so.checkpoint_dir = "../escape";
  EXPECT_THROW(flow::onnx::save(*job, (d / "m2.onnx").string(), so), flow::Error);
}

// An op without an ONNX form (a gradient op: only forward graphs are saved).
class Mystery final : public flow::Primitive {
 public:
  flow::OpKind kind() const override { return flow::OpKind::ReluGrad; }
  std::vector<flow::TensorSpec> infer(const std::vector<flow::TensorSpec>& in) const override { return {in[0]}; }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, flow::ExecContext&) const override {
    std::memcpy(out[0].raw(), in[0].raw(), in[0].nbytes());
  }
};

TEST_F(JobFiles, OpWithoutOnnxFormIsNamed) {
  auto job = flow::global_function(flow::Predict, flow::function_config().name("mystery_job"),
                                   {flow::Numpy::Placeholder({4}, flow::Float, "x")}, [](flow::Blob x) -> flow::Numpy {
                                     return flow::internal::add_node(std::make_shared<Mystery>(), {x}, "the_node")[0];
                                   });
  const fs::path d = tmp_dir("mystery");
  try {
    flow::onnx::save(*job.compiled(), (d / "x.onnx").string());
    FAIL() << "save() accepted an op with no ONNX form";
  } catch (const flow::Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("relu_grad"), std::string::npos) << w;
    EXPECT_NE(w.find("the_node"), std::string::npos) << w;
    EXPECT_NE(w.find("mystery_job"), std::string::npos) << w;
  }
  EXPECT_FALSE(fs::exists(d / "x.onnx"));
  // A form ONNX lacks: batch normalization along the last axis.
  auto bn = flow::global_function(flow::Predict, flow::function_config().name("bn_job"),
                                  {flow::Numpy::Placeholder({2, 3, 4, 5}, flow::Float, "x")},
                                  [](flow::Blob x) -> flow::Numpy {
                                    return flow::layers::batch_normalization(x, {.axis = -1, .name = "bn_last"});
                                  });
  try {
    flow::onnx::save(*bn.compiled(), (d / "bn.onnx").string());
    FAIL();
  } catch (const flow::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bn_last"), std::string::npos) << e.what();
  }
  // No temporary files are left behind.
  for (auto& f : fs::directory_iterator(d)) ADD_FAILURE() << "left behind: " << f.path();
}

TEST_F(JobFiles, MoreOps) {
  // Ops beyond the seeds' nets export with standard ONNX ops.
  auto job = flow::global_function(
      flow::Predict, flow::function_config().name("ops_job"),
      {flow::Numpy::Placeholder({2, 3, 4, 4}, flow::Float, "x"), flow::Numpy::Placeholder({2}, flow::Int32, "y")},
      [](flow::Blob x, flow::Blob y) -> std::tuple<flow::Numpy, flow::Numpy, flow::Numpy, flow::Numpy> {
        auto a = flow::nn::avg_pool2d(x, 2, 2, "VALID");
        auto b = flow::layers::batch_normalization(a, {.name = "bn"});
        auto c = flow::transpose(flow::reshape(b, {2, -1}), {1, 0});
        auto s = flow::nn::softmax(flow::concat({c, c}, 0), 0);
        auto r = flow::reduce_mean(flow::math::tanh(flow::math::sigmoid(s) * 2.0 + 1.0), {1}, true);
        auto eye = flow::constant(Tensor::from<float>({3, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1}));
        auto l = flow::nn::log_softmax(flow::matmul(flow::reduce_sum(x, {2, 3}), eye));
        auto xent = flow::nn::sparse_softmax_cross_entropy_with_logits(y, l);
        return {r, flow::argmax(l), xent, flow::cast(flow::reduce_max(x, {}), flow::Float64)};
      });
  const fs::path d = tmp_dir("more_ops");
  flow::onnx::save(*job.compiled(), (d / "ops.onnx").string());
  const auto m = read_model(d / "ops.onnx");
  std::set<std::string> ops;
  for (auto& n : m.graph().node()) ops.insert(n.op_type());
  for (const char* want : {"AveragePool", "BatchNormalization", "Transpose", "Reshape", "Softmax", "Concat", "Mul",
                           "Add", "Tanh", "Sigmoid", "ReduceMean", "ReduceSum", "Gemm", "LogSoftmax", "ArgMax", "Cast",
                           "SoftmaxCrossEntropyLoss", "ReduceMax", "Constant"})
    EXPECT_TRUE(ops.count(want)) << want;
  for (auto& n : m.graph().node())
    if (n.op_type() == "AveragePool")
      for (auto& a : n.attribute())
        if (a.name() == "count_include_pad") {
          EXPECT_EQ(a.i(), 0);
        }
  EXPECT_EQ(metadata(m)[u::kOutputStructure], "(Numpy,Numpy,Numpy,Numpy)");
}

// ------------------------------------------------------------------ round trips (importer)


void expect_same_outputs(flow::CompiledJob& a, flow::CompiledJob& b, const std::vector<Tensor>& in) {
  auto ra = a.run(in), rb = b.run(in);
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i) EXPECT_TRUE(ra[i].equal(rb[i])) << "output " << i;
}

TEST_F(JobFiles, PredictAndEvalRoundTrip) {
  for (auto net : {models::Net::LeNet, models::Net::MLP}) {
    flow::session::reset();
    auto p = models::predict_job(net);
    auto e = models::eval_job(net);
    flow::CheckPoint().init();
    const fs::path d = tmp_dir(std::string("roundtrip_") + models::net_name(net));
    flow::onnx::save(*p, (d / "p.onnx").string());
    flow::onnx::save(*e, (d / "e.onnx").string());
    auto p2 = flow::onnx::load((d / "p.onnx").string(), {});
    auto e2 = flow::onnx::load((d / "e.onnx").string(), {});
    EXPECT_EQ(p2->signature().str(), p->signature().str());
    EXPECT_EQ(e2->signature().str(), e->signature().str());
    expect_same_outputs(*p, *p2, {random_images(7)});
    expect_same_outputs(*e, *e2, {random_images(8), random_labels(8)});
    // And again through a file written by the loaded job.
    flow::onnx::save(*p2, (d / "p2.onnx").string());
    auto p3 = flow::onnx::load((d / "p2.onnx").string(), {});
    expect_same_outputs(*p, *p3, {random_images(9)});
  }
}

TEST_F(JobFiles, ExternalDataRoundTrip) {
  auto p = models::predict_job(models::Net::MLP);
  flow::CheckPoint().init();
  const fs::path d = tmp_dir("external_roundtrip");
  flow::onnx::SaveOptions so;
  so.checkpoint_dir = "ckpt";
  flow::onnx::save(*p, (d / "p.onnx").string(), so);
  auto p2 = flow::onnx::load((d / "p.onnx").string(), {});
  expect_same_outputs(*p, *p2, {random_images(3)});
}

// A train file and an eval file of the same net share their variables by
// name in the session (a tee into a train and an eval jobfunction), and the
// train job trains them whichever file is loaded first: the eval file
// declares them frozen (no jobflow.trainable), and that is its own use.
void train_and_eval_files(bool eval_first) {
  SCOPED_TRACE(eval_first ? "eval file loaded first" : "train file loaded first");
  const fs::path d = tmp_dir(eval_first ? "eval_then_train" : "train_then_eval");
  {
    flow::session::reset();
    auto t = models::train_job(models::Net::MLP);
    auto e = models::eval_job(models::Net::MLP);
    flow::CheckPoint().init();
    flow::onnx::save(*t, (d / "mlp_train.onnx").string());
    flow::onnx::save(*e, (d / "mlp_eval.onnx").string());
  }
  flow::session::reset();
  std::shared_ptr<flow::CompiledJob> train, eval;
  if (eval_first) {
    eval = flow::onnx::load((d / "mlp_eval.onnx").string(), {});
    train = flow::onnx::load((d / "mlp_train.onnx").string(), {});
  } else {
    train = flow::onnx::load((d / "mlp_train.onnx").string(), {});
    eval = flow::onnx::load((d / "mlp_eval.onnx").string(), {});
  }
  ASSERT_EQ(train->signature().type, flow::JobType::Train);
  EXPECT_EQ(train->definition().trainable,
            (std::vector<std::string>{"hidden-bias", "hidden-weight", "output-bias", "output-weight"}));
  EXPECT_TRUE(eval->definition().trainable.empty());

  const std::vector<Tensor> batch{random_images(21), random_labels(21)};
  const Tensor logits0 = eval->run(batch)[1].clone();
  std::map<std::string, Tensor> before;
  for (auto& n : train->definition().trainable) before[n] = flow::session::variable(n).clone();
  train->run(batch);
  train->sync();
  for (auto& [n, v] : before) EXPECT_FALSE(flow::session::variable(n).equal(v)) << n << " did not change in a step";
  // The eval job reads the trained values: its logits are those of the new
  // weights, and the old weights give the old logits back.
  std::map<std::string, Tensor> after;
  for (auto& [n, v] : before) after[n] = flow::session::variable(n).clone();
  const Tensor logits1 = eval->run(batch)[1].clone();
  EXPECT_FALSE(logits1.equal(logits0));
  for (auto& [n, v] : before) flow::session::assign(n, v);
  EXPECT_TRUE(eval->run(batch)[1].equal(logits0));
  for (auto& [n, v] : after) flow::session::assign(n, v);
  EXPECT_TRUE(eval->run(batch)[1].equal(logits1));
  fs::remove_all(d);
}

TEST_F(JobFiles, EvalFileLoadedFirstDoesNotFreezeTheTrainFile) {
  train_and_eval_files(true);
}
TEST_F(JobFiles, TrainFileLoadedFirstThenEvalFile) {
  train_and_eval_files(false);
}

void train_round_trip(models::Net net, double momentum) {
  flow::session::reset();
  auto t = models::train_job(net, "", 0.1, momentum);
  flow::CheckPoint().init();
  for (int i = 0; i < 2; ++i) t->run({random_images(i), random_labels(i)});
  const fs::path d = tmp_dir(std::string("train_roundtrip_") + models::net_name(net));
  flow::onnx::save(*t, (d / "t.onnx").string());
  // Variables at the save, to restore after the original continues.
  std::map<std::string, Tensor> at_save;
  for (auto& n : flow::session::variable_names()) at_save[n] = flow::session::variable(n).clone();

  std::vector<Tensor> losses;
  for (int i = 2; i < 5; ++i) losses.push_back(t->run({random_images(i), random_labels(i)})[0]);
  t->sync();
  std::map<std::string, Tensor> after;
  for (auto& n : flow::session::variable_names()) after[n] = flow::session::variable(n).clone();

  for (auto& [n, v] : at_save) flow::session::assign(n, v);
  auto t2 = flow::onnx::load((d / "t.onnx").string(), {});
  ASSERT_EQ(t2->signature().type, flow::JobType::Train);
  EXPECT_EQ(t2->steps_run(), 2) << "the loaded job continues at the saved step";
  for (int i = 2; i < 5; ++i) {
    auto l = t2->run({random_images(i), random_labels(i)})[0];
    EXPECT_TRUE(l.equal(losses[i - 2])) << "step " << i;
  }
  t2->sync();
  for (auto& [n, v] : after) EXPECT_TRUE(flow::session::variable(n).equal(v)) << n;
}

TEST_F(JobFiles, TrainContinuesIdenticallyMlp) {
  train_round_trip(models::Net::MLP, 0.0);
}
TEST_F(JobFiles, TrainContinuesIdenticallyWithMomentumState) {
  train_round_trip(models::Net::MLP, 0.9);
}
TEST_F(JobFiles, TrainContinuesIdenticallyLeNetWithDropout) {
  train_round_trip(models::Net::LeNet, 0.0);
}

}  // namespace

TEST_F(JobFiles, InspectReportsTheFilesJobType) {
  fs::path d = tmp_dir("inspect_type");
  auto train = flow::models::train_job(flow::models::Net::MLP, "mlp_train_inspect");
  auto predict = flow::models::predict_job(flow::models::Net::MLP, "mlp_predict_inspect");
  flow::onnx::save(*train, (d / "t.onnx").string());
  flow::onnx::save(*predict, (d / "p.onnx").string());
  auto ti = flow::onnx::inspect((d / "t.onnx").string());
  auto pi = flow::onnx::inspect((d / "p.onnx").string());
  EXPECT_EQ(ti.signature.type, flow::JobType::Train);
  EXPECT_EQ(pi.signature.type, flow::JobType::Predict);
  EXPECT_NE(ti.str().find("[train]"), std::string::npos) << ti.str();
  EXPECT_GT(ti.flops, 0);
  EXPECT_EQ(ti.parameters, 784 * 512 + 512 + 512 * 10 + 10);
  fs::remove_all(d);
}

// ------------------------------------------------- what a job declares

namespace {

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const flow::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_F(JobFiles, TheDeclaredLossAndAccuracyTravelWithTheFile) {
  fs::path d = tmp_dir("declared");
  auto e = models::eval_job(models::Net::MLP, "mlp_eval_declared");
  auto t = models::train_job(models::Net::MLP, "mlp_train_declared");
  // A train job whose loss is not its first float return.
  auto second = flow::global_function(
      flow::Train, flow::function_config().name("loss_second"), {flow::Numpy::Placeholder({2, 3}, flow::Float, "x")},
      [](flow::Blob x) -> std::tuple<flow::Numpy, flow::Numpy> {
        auto y = flow::layers::dense(x, 2, {.name = "loss_second_dense", .trainable = true});
        auto loss = flow::reduce_sum(flow::square(y), {1});
        flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.1}), 0.0).minimize(loss);
        return {y, loss};
      });
  flow::CheckPoint().init();
  auto check = [](const flow::Signature& s, int loss, int labels, int logits) {
    EXPECT_EQ(s.loss_output, loss) << s.str();
    EXPECT_EQ(s.accuracy_labels, labels) << s.str();
    EXPECT_EQ(s.accuracy_logits, logits) << s.str();
  };
  check(e->signature(), -1, 0, 1);  // the seeds' eval_job declares (labels, logits)
  check(t->signature(), 0, -1, -1);
  check(second.compiled()->signature(), 1, -1, -1);
  flow::onnx::save(*e, (d / "e.onnx").string());
  flow::onnx::save(*t, (d / "t.onnx").string());
  flow::onnx::save(*second.compiled(), (d / "s.onnx").string());
  EXPECT_EQ(metadata(read_model(d / "e.onnx"))[u::kAccuracy], "0,1");
  EXPECT_EQ(metadata(read_model(d / "t.onnx")).count(u::kAccuracy), 0u);
  check(flow::onnx::load((d / "e.onnx").string())->signature(), -1, 0, 1);
  check(flow::onnx::load((d / "t.onnx").string())->signature(), 0, -1, -1);
  check(flow::onnx::load((d / "s.onnx").string())->signature(), 1, -1, -1);
  // A model trained with a loss given at load returns that loss.
  flow::onnx::LoadOptions o;
  o.type = flow::Train;
  o.loss = "sparse_softmax_cross_entropy";
  o.optimizer = "sgd:lr=0.1";
  auto p = models::predict_job(models::Net::MLP, "mlp_predict_declared");
  flow::onnx::save(*p, (d / "p.onnx").string());
  check(flow::onnx::load((d / "p.onnx").string(), o)->signature(), 0, -1, -1);
}

TEST_F(JobFiles, AccuracyDeclarationsAreChecked) {
  auto define = [](int labels, int logits) {
    return error_of([&] {
      flow::global_function(
          flow::Predict, flow::function_config().name("acc_check").accuracy(labels, logits),
          {flow::Numpy::Placeholder({4, 3}, flow::Float, "scores"), flow::Numpy::Placeholder({4}, flow::Int32, "labels")},
          [](flow::Blob scores, flow::Blob labels) -> std::tuple<flow::Numpy, flow::Numpy, flow::Numpy> {
            return {flow::identity(labels), scores * 1.0, flow::reshape(scores, {3, 4})};
          });
    });
  };
  EXPECT_EQ(define(0, 1), "");
  EXPECT_NE(define(1, 0).find("accuracy(1, 0): return 1 is (4, 3) float32, not (B,) integer labels"), std::string::npos)
      << define(1, 0);
  EXPECT_NE(define(0, 0).find("two different returns"), std::string::npos) << define(0, 0);
  EXPECT_NE(define(0, 3).find("two different returns of the 3"), std::string::npos) << define(0, 3);
  EXPECT_NE(define(0, 2).find("differ in the batch"), std::string::npos) << define(0, 2);
}

TEST_F(JobFiles, LoadOptionErrorsNameTheField) {
  fs::path d = tmp_dir("option_errors");
  auto p = models::predict_job(models::Net::MLP, "mlp_predict_options");
  flow::CheckPoint().init();
  const std::string file = (d / "p.onnx").string();
  flow::onnx::save(*p, file);
  // The field at fault, from the error's type.
  auto field = [&](const std::string& loss, const std::string& optimizer) -> std::string {
    flow::onnx::LoadOptions o;
    o.type = flow::Train;
    o.loss = loss;
    o.optimizer = optimizer;
    try {
      flow::onnx::load(file, o);
    } catch (const flow::onnx::OptionError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[onnx.load] " + file + ": ", 0), 0u) << e.what();
      return e.option();
    } catch (const flow::Error& e) {
      return std::string("(not an option: ") + e.what() + ")";
    }
    return "(loaded)";
  };
  EXPECT_EQ(field("mse", "rmsprop:lr=0.1"), "optimizer");
  EXPECT_EQ(field("mse", "sgd:lr=x"), "optimizer");
  EXPECT_EQ(field("hinge", "sgd:lr=0.1"), "loss");
  EXPECT_EQ(field("", "sgd:lr=0.1"), "loss");
  EXPECT_EQ(field("mse", ""), "optimizer");
  EXPECT_EQ(field("mse", "sgd:lr=0.1"), "(loaded)");
  // An output the loss cannot take: (B,) scores for a cross-entropy.
  auto scores = flow::global_function(flow::Predict, flow::function_config().name("flat_scores"),
                                      {flow::Numpy::Placeholder({4}, flow::Float, "x")},
                                      [](flow::Blob x) -> flow::Numpy { return x * 2.0; });
  flow::onnx::save(*scores.compiled(), file);
  EXPECT_EQ(field("sparse_softmax_cross_entropy", "sgd:lr=0.1"), "loss");
  // The file's own faults are plain errors.
  std::ofstream(file, std::ios::trunc) << "not a model";
  EXPECT_EQ(field("mse", "sgd:lr=0.1").rfind("(not an option: ", 0), 0u);
}

// ------------------------------------------------------------------ ordinary models' variables

namespace {

// An ordinary ONNX model as exporters write them: y = x (2, 3) . W, with W
// an initializer named by a counter ("onnx::MatMul_7") that another model
// may use for another tensor. W: (3, cols) holding scale * (i + 1).
std::string counter_named_model(const fs::path& dir, const std::string& file, int64_t cols, float scale,
                                const std::string& weight = "onnx::MatMul_7") {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("torch_jit");
  auto* x = g->add_input();
  x->set_name("x");
  auto* xt = x->mutable_type()->mutable_tensor_type();
  xt->set_elem_type(::onnx::TensorProto::FLOAT);
  for (int64_t d : {2, 3}) xt->mutable_shape()->add_dim()->set_dim_value(d);
  auto* w = g->add_initializer();
  w->set_name(weight);
  w->set_data_type(::onnx::TensorProto::FLOAT);
  w->add_dims(3);
  w->add_dims(cols);
  for (int64_t i = 0; i < 3 * cols; ++i) w->add_float_data(scale * static_cast<float>(i + 1));
  auto* n = g->add_node();
  n->set_op_type("MatMul");
  n->add_input("x");
  n->add_input(weight);
  n->add_output("y");
  auto* y = g->add_output();
  y->set_name("y");
  auto* yt = y->mutable_type()->mutable_tensor_type();
  yt->set_elem_type(::onnx::TensorProto::FLOAT);
  for (int64_t d : {int64_t(2), cols}) yt->mutable_shape()->add_dim()->set_dim_value(d);
  const fs::path p = dir / file;
  std::ofstream f(p, std::ios::binary);
  m.SerializeToOstream(&f);
  return p.string();
}

// x . W for the model above.
Tensor expected_product(const Tensor& x, int64_t cols, float scale) {
  Tensor y({2, cols}, flow::Float32);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float s = 0.f;
      for (int64_t k = 0; k < 3; ++k) s += x.data<float>()[r * 3 + k] * scale * static_cast<float>(k * cols + c + 1);
      y.data<float>()[r * cols + c] = s;
    }
  return y;
}

}  // namespace

TEST_F(JobFiles, OrdinaryModelsWithTheSameInitializerNamesKeepTheirOwnWeights) {
  const fs::path d = tmp_dir("ordinary_names");
  const Tensor x = Tensor::from<float>({2, 3}, {0.5f, -1.f, 2.f, 1.5f, 0.25f, -3.f});
  // Two models of one architecture with different weights (two fine-tuned
  // checkpoints), and a third whose tensor of that name has another shape.
  auto a = flow::onnx::load(counter_named_model(d, "a.onnx", 2, 1.f));
  auto b = flow::onnx::load(counter_named_model(d, "b.onnx", 2, -0.5f));
  // Each runs with its own weights, whatever was loaded after it.
  auto y = [&](flow::CompiledJob& job) {
    std::vector<Tensor> r = job.run({x});
    EXPECT_EQ(r.size(), 1u);
    return r.empty() ? Tensor({0}, flow::Float32) : r[0];
  };
  EXPECT_TRUE(y(*a).equal(expected_product(x, 2, 1.f))) << "a ran with b's weights";
  auto c = flow::onnx::load(counter_named_model(d, "c.onnx", 4, 2.f));
  auto again = flow::onnx::load(counter_named_model(d, "a_copy.onnx", 2, 1.f));
  for (int pass = 0; pass < 2; ++pass) {
    EXPECT_TRUE(y(*a).equal(expected_product(x, 2, 1.f)));
    EXPECT_TRUE(y(*b).equal(expected_product(x, 2, -0.5f)));
    EXPECT_TRUE(y(*c).equal(expected_product(x, 4, 2.f)));
    EXPECT_TRUE(y(*again).equal(expected_product(x, 2, 1.f)));
  }
  // The first keeps the initializer's name in the session (the same weights
  // loaded again share it); the others have a scope of their own.
  EXPECT_EQ(a->definition().variable_scope, "");
  EXPECT_EQ(again->definition().variable_scope, "");
  EXPECT_EQ(b->definition().variable_scope.rfind("torch_jit#", 0), 0u) << b->definition().variable_scope;
  EXPECT_NE(c->definition().variable_scope, b->definition().variable_scope);
  const Tensor wa = flow::session::variable("onnx::MatMul_7");
  EXPECT_EQ(wa.at(1), 2.0);
  const Tensor wb = flow::session::variable(b->definition().variable_scope + "onnx::MatMul_7");
  EXPECT_EQ(wb.at(1), -1.0);

  // A scoped model's checkpoints and saved files use the file's names: a
  // checkpoint of b loads into b's file in a fresh process (session).
  flow::onnx::LoadOptions train;
  train.type = flow::Train;
  train.loss = "mse";
  train.optimizer = "sgd:lr=0.01,momentum=0.9";
  auto bt = flow::onnx::load((d / "b.onnx").string(), train);
  ASSERT_NE(bt->definition().variable_scope, "");
  bt->run({x, Tensor::from<float>({2, 2}, {1.f, 2.f, 3.f, 4.f})});
  const Tensor trained = flow::session::variable(bt->definition().variable_scope + "onnx::MatMul_7").clone();
  const Tensor velocity = flow::session::variable(bt->definition().variable_scope + "onnx::MatMul_7-momentum").clone();
  EXPECT_FALSE(trained.equal(wb));
  // Its train step counter is its own too: a train job of the same name on
  // a's weights counts its steps apart.
  auto at = flow::onnx::load((d / "a.onnx").string(), train);
  EXPECT_EQ(at->definition().variable_scope, "");
  at->run({x, Tensor::from<float>({2, 2}, {1.f, 2.f, 3.f, 4.f})});
  at->run({x, Tensor::from<float>({2, 2}, {1.f, 2.f, 3.f, 4.f})});
  const std::string step = flow::session::train_step_variable("torch_jit");
  EXPECT_EQ(flow::session::variable(bt->definition().variable_scope + step).at(0), 1.0);
  EXPECT_EQ(flow::session::variable(step).at(0), 2.0);
  flow::CheckPoint().save((d / "ckpt").string(), *bt);
  EXPECT_TRUE(fs::exists(d / "ckpt" / "onnx::MatMul_7" / "out"));
  EXPECT_TRUE(fs::exists(d / "ckpt" / step / "out"));
  flow::onnx::save(*bt, (d / "bt.onnx").string());
  const ::onnx::ModelProto saved = read_model(d / "bt.onnx");
  std::set<std::string> inits;
  for (const auto& t : saved.graph().initializer()) inits.insert(t.name());
  EXPECT_TRUE(inits.count("onnx::MatMul_7")) << "initializers of the saved file are the model's names";
  EXPECT_EQ(metadata(saved)[u::kTrainable], "onnx::MatMul_7");
  // With the optimizer's state (it used to refuse "onnx::MatMul_7-momentum"
  // as a variable the model does not have); a predict load takes the
  // weights alone.
  flow::session::reset();
  flow::onnx::LoadOptions from_ckpt = train;
  from_ckpt.checkpoint = (d / "ckpt").string();
  auto restored = flow::onnx::load((d / "b.onnx").string(), from_ckpt);
  EXPECT_EQ(restored->definition().variable_scope, "");
  EXPECT_TRUE(flow::session::variable("onnx::MatMul_7").equal(trained));
  EXPECT_TRUE(flow::session::variable("onnx::MatMul_7-momentum").equal(velocity));
  EXPECT_EQ(restored->steps_run(), 1);
  EXPECT_FALSE(velocity.equal(Tensor::from<float>({3, 2}, std::vector<float>(6, 0.f))));
  flow::session::reset();
  flow::onnx::LoadOptions predict_ckpt;
  predict_ckpt.checkpoint = (d / "ckpt").string();
  auto served = flow::onnx::load((d / "b.onnx").string(), predict_ckpt);
  EXPECT_TRUE(flow::session::variable("onnx::MatMul_7").equal(trained));
  EXPECT_FALSE(flow::session::has_variable("onnx::MatMul_7-momentum"));
  fs::remove_all(d);
}

// What the scopes of ordinary models must also keep working: a checkpoint
// of the whole session (variable names are folder names), train step
// counters of same-named models whose weights have other names, and the
// session letting go of a scoped job's variables with the job (an element
// that reloads a trained model would otherwise keep every copy).
TEST_F(JobFiles, OrdinaryModelScopesKeepCheckpointsStepsAndMemoryRight) {
  const fs::path d = tmp_dir("ordinary_scopes");
  const Tensor x = Tensor::from<float>({2, 3}, {0.5f, -1.f, 2.f, 1.5f, 0.25f, -3.f});
  const Tensor t = Tensor::from<float>({2, 2}, {1.f, 2.f, 3.f, 4.f});
  auto a = flow::onnx::load(counter_named_model(d, "a.onnx", 2, 1.f));
  auto b = flow::onnx::load(counter_named_model(d, "b.onnx", 2, -0.5f));
  ASSERT_NE(b->definition().variable_scope, "");
  const std::string wb = b->definition().variable_scope + "onnx::MatMul_7";
  flow::CheckPoint().save((d / "all").string());
  EXPECT_TRUE(fs::exists(d / "all" / wb / "out"));
  flow::session::assign(wb, Tensor::from<float>({3, 2}, std::vector<float>(6, 7.f)));
  flow::CheckPoint().load((d / "all").string());
  EXPECT_EQ(flow::session::variable(wb).at(1), -1.0);

  // Same graph name (torch_jit), weights of other names: no variable scope,
  // but a step counter of its own for the second.
  flow::onnx::LoadOptions train;
  train.type = flow::Train;
  train.loss = "mse";
  train.optimizer = "sgd:lr=0.01";
  auto p = flow::onnx::load(counter_named_model(d, "p.onnx", 2, 1.f, "fc.weight"), train);
  auto q = flow::onnx::load(counter_named_model(d, "q.onnx", 2, 2.f, "head.weight"), train);
  EXPECT_EQ(p->definition().variable_scope, "");
  ASSERT_NE(q->definition().variable_scope, "");
  EXPECT_TRUE(flow::session::has_variable("head.weight"));  // the weights keep their names
  for (int i = 0; i < 3; ++i) p->run({x, t});
  q->run({x, t});
  EXPECT_EQ(p->steps_run(), 3);
  EXPECT_EQ(q->steps_run(), 1);
  flow::CheckPoint().save((d / "q").string(), *q);
  EXPECT_TRUE(fs::exists(d / "q" / flow::session::train_step_variable("torch_jit") / "out"));

  // A scoped job's own variables leave the session with it.
  const std::string wq = q->definition().variable_scope + flow::session::train_step_variable("torch_jit");
  EXPECT_TRUE(flow::session::has_variable(wq));
  q.reset();
  EXPECT_FALSE(flow::session::has_variable(wq));
  EXPECT_TRUE(flow::session::has_variable("head.weight"));
  b.reset();
  EXPECT_FALSE(flow::session::has_variable(wb));
  EXPECT_TRUE(a->run({x})[0].equal(expected_product(x, 2, 1.f)));
  fs::remove_all(d);
}
