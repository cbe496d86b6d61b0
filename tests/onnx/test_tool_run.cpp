// `jobflow run MODEL --input A.npy [--input B.npy ...] --out DIR`: NumPy
// files in and out, inputs split into calls along dim 0 for a fixed batch
// and passed whole for a dynamic one, scalars, output names made file names;
// and read_npy/write_npy themselves.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jobflow/jobflow.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace flow = jobflow;
namespace fs = std::filesystem;
using flow::Shape;
using flow::Tensor;

namespace {

fs::path tmp_dir(const std::string& name) {
  const char* base = std::getenv("JOBFLOW_TEST_TMP");
  fs::path d = fs::path(base ? base : fs::temp_directory_path().string()) / ("run_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Runs the tool; returns its exit status, its output in *out.
int tool(const std::string& args, std::string* out) {
  const char* t = std::getenv("JOBFLOW_TOOL");
  const std::string cmd = std::string(t ? t : "jobflow") + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  out->clear();
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  const int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void add_input(::onnx::GraphProto* g, const std::string& name, int type, const std::vector<std::string>& dims) {
  auto* vi = g->add_input();
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(type);
  tt->mutable_shape();  // a scalar has a shape of no dims
  for (const std::string& d : dims) {
    auto* dim = tt->mutable_shape()->add_dim();
    if (std::isdigit(static_cast<unsigned char>(d[0]))) dim->set_dim_value(std::stoll(d));
    else dim->set_dim_param(d);
  }
}

void add_node(::onnx::GraphProto* g, const std::string& op, std::vector<std::string> in, std::string out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  for (auto& i : in) n->add_input(i);
  n->add_output(out);
  g->add_output()->set_name(out);
}

std::string save(::onnx::ModelProto& m, const fs::path& dir) {
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  const fs::path p = dir / "model.onnx";
  std::ofstream f(p, std::ios::binary);
  m.SerializeToOstream(&f);
  return p.string();
}

Tensor iota(Shape s, float scale) {
  Tensor t(s, flow::Float);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * static_cast<float>(i);
  return t;
}

}  // namespace

TEST(ToolRun, NpyRoundTripsEveryDtypeAndShape) {
  const fs::path d = tmp_dir("npy");
  for (const Tensor& t : {iota({2, 3}, 0.5f), Tensor::scalar<float>(2.5f), iota({4}, 1).astype(flow::Float64),
                          iota({2, 2}, 1).astype(flow::Int64), iota({3}, 1).astype(flow::Int32),
                          iota({2, 1, 2}, 1).astype(flow::UInt8), iota({0, 3}, 1).astype(flow::Int8)}) {
    flow::data::write_npy((d / "t.npy").string(), t);
    EXPECT_TRUE(flow::data::read_npy((d / "t.npy").string()).equal(t)) << flow::spec_str({t.shape(), t.dtype()});
  }
  std::ofstream((d / "bad.npy").string()) << "not numpy";
  try {
    flow::data::read_npy((d / "bad.npy").string());
    FAIL() << "no error";
  } catch (const flow::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[read_npy] " + (d / "bad.npy").string() + ": not a .npy file"), std::string::npos)
        << e.what();
  }
  fs::remove_all(d);
}

TEST(ToolRun, DynamicBatchIsPassedWholeAndScalarsWork) {
  const fs::path d = tmp_dir("dynamic");
  ::onnx::ModelProto m;
  auto* g = m.mutable_graph();
  g->set_name("scale");
  add_input(g, "x", ::onnx::TensorProto::FLOAT, {"batch", "3"});
  add_input(g, "s", ::onnx::TensorProto::FLOAT, {});
  add_node(g, "Mul", {"x", "s"}, "y/out:0");
  const std::string model = save(m, d);
  const Tensor x = iota({5, 3}, 1.0f);
  flow::data::write_npy((d / "x.npy").string(), x.astype(flow::Float64));  // numpy's default dtype, converted
  flow::data::write_npy((d / "s.npy").string(), Tensor::scalar<float>(2.0f));
  std::string out;
  ASSERT_EQ(tool("run " + model + " --input " + (d / "x.npy").string() + " --input " + (d / "s.npy").string() +
                     " --out " + (d / "out").string(),
                 &out),
            0)
      << out;
  EXPECT_NE(out.find("scale(x: (batch, 3) float32, s: () float32)"), std::string::npos) << out;
  const Tensor y = flow::data::read_npy((d / "out" / "y_out_0.npy").string());
  EXPECT_TRUE(y.equal(iota({5, 3}, 2.0f))) << y.str();
  fs::remove_all(d);
}

TEST(ToolRun, FixedBatchSplitsIntoCallsAndConcatenates) {
  const fs::path d = tmp_dir("fixed");
  ::onnx::ModelProto m;
  auto* g = m.mutable_graph();
  g->set_name("twice");
  add_input(g, "x", ::onnx::TensorProto::FLOAT, {"2", "3"});
  add_node(g, "Add", {"x", "x"}, "y");
  const std::string model = save(m, d);
  flow::data::write_npy((d / "x.npy").string(), iota({6, 3}, 1.0f));
  std::string out;
  ASSERT_EQ(tool("run " + model + " --input " + (d / "x.npy").string() + " --out " + (d / "out").string(), &out), 0)
      << out;
  EXPECT_NE(out.find("3/3 batches"), std::string::npos) << out;
  EXPECT_TRUE(flow::data::read_npy((d / "out" / "y.npy").string()).equal(iota({6, 3}, 2.0f)));
  // Rows that do not fill the last call are an error naming the input.
  flow::data::write_npy((d / "x5.npy").string(), iota({5, 3}, 1.0f));
  EXPECT_EQ(tool("run " + model + " --input " + (d / "x5.npy").string() + " --out " + (d / "out").string(), &out), 1);
  EXPECT_NE(out.find("x5.npy: 5 rows do not split into calls of 2 (placeholder (2, 3) float32)"), std::string::npos)
      << out;
  // A wrong count of inputs names the signature.
  EXPECT_EQ(tool("run " + model + " --input " + (d / "x.npy").string() + " --input " + (d / "x.npy").string(), &out), 1);
  EXPECT_NE(out.find("takes 1 inputs"), std::string::npos) << out;
  fs::remove_all(d);
}

// A model taking and returning sequences: the input a folder of its items,
// the output written item by item; an optional given as "none"; a plain
// file where a sequence is expected named as the mistake.
TEST(ToolRun, SequencesAreFoldersOfItems) {
  const fs::path d = tmp_dir("sequences");
  ::onnx::ModelProto m;
  auto* g = m.mutable_graph();
  g->set_name("append");
  auto* s = g->add_input();
  s->set_name("s");
  s->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(
      ::onnx::TensorProto::FLOAT);
  add_input(g, "x", ::onnx::TensorProto::FLOAT, {"n"});
  add_node(g, "SequenceInsert", {"s", "x"}, "t");
  g->mutable_output(0)->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(
      ::onnx::TensorProto::FLOAT);
  add_node(g, "SequenceLength", {"t"}, "count");
  const std::string model = save(m, d);
  fs::create_directories(d / "s");
  flow::data::write_npy((d / "s" / "0.npy").string(), iota({2}, 1));
  flow::data::write_npy((d / "s" / "1.npy").string(), iota({4}, 2).astype(flow::Float64));  // converted
  flow::data::write_npy((d / "x.npy").string(), iota({3}, 3));
  std::string out;
  ASSERT_EQ(tool("run " + model + " --input " + (d / "s").string() + " --input " + (d / "x.npy").string() + " --out " +
                     (d / "out").string(),
                 &out),
            0)
      << out;
  EXPECT_NE(out.find("/t: sequence(float32), 3 items"), std::string::npos) << out;
  EXPECT_TRUE(flow::data::read_npy((d / "out" / "t" / "0.npy").string()).equal(iota({2}, 1)));
  EXPECT_TRUE(flow::data::read_npy((d / "out" / "t" / "1.npy").string()).equal(iota({4}, 2)));
  EXPECT_TRUE(flow::data::read_npy((d / "out" / "t" / "2.npy").string()).equal(iota({3}, 3)));
  EXPECT_EQ(flow::data::read_npy((d / "out" / "count.npy").string()).data<int64_t>()[0], 3);
  // Without --out: printed item by item.
  ASSERT_EQ(tool("run " + model + " --input " + (d / "s").string() + " --input " + (d / "x.npy").string(), &out), 0)
      << out;
  EXPECT_NE(out.find("output 0 (last batch): sequence(float32), 3 items\n  item 0: "), std::string::npos) << out;
  EXPECT_NE(tool("run " + model + " --input " + (d / "x.npy").string() + " --input " + (d / "x.npy").string(), &out), 0);
  EXPECT_NE(out.find("input 's' is a sequence(float32): give a folder of its items as 0.npy, 1.npy, ..."),
            std::string::npos)
      << out;
  // A rerun into the same folder leaves only its own items; a stray file
  // in an input folder is named rather than ignored.
  fs::remove(d / "s" / "1.npy");
  ASSERT_EQ(tool("run " + model + " --input " + (d / "s").string() + " --input " + (d / "x.npy").string() + " --out " +
                     (d / "out").string(),
                 &out),
            0)
      << out;
  EXPECT_TRUE(fs::exists(d / "out" / "t" / "1.npy"));
  EXPECT_FALSE(fs::exists(d / "out" / "t" / "2.npy"));
  flow::data::write_npy((d / "s" / "item2.npy").string(), iota({2}, 1));
  EXPECT_NE(tool("run " + model + " --input " + (d / "s").string() + " --input " + (d / "x.npy").string(), &out), 0);
  EXPECT_NE(out.find("holds 2 files; a sequence(float32) is read from 0.npy, 1.npy, ... only (found 1 of them)"),
            std::string::npos)
      << out;
  EXPECT_NE(tool("run " + model + " --input none --input " + (d / "x.npy").string(), &out), 0);
  EXPECT_NE(out.find("input 's' is a sequence(float32), which always has a value"), std::string::npos) << out;
  fs::remove_all(d);
}

// A model taking and returning strings: a .npy of str in, a .npy of str out
// (and parsed numbers); printed without --out.
TEST(ToolRun, StringsAreNpyFilesOfStr) {
  const fs::path d = tmp_dir("strings");
  ::onnx::ModelProto m;
  auto* g = m.mutable_graph();
  g->set_name("upper");
  add_input(g, "words", ::onnx::TensorProto::STRING, {"n"});
  add_node(g, "StringNormalizer", {"words"}, "upper");
  auto* a = g->mutable_node(0)->add_attribute();
  a->set_name("case_change_action");
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s("UPPER");
  add_input(g, "numbers", ::onnx::TensorProto::STRING, {"2", "k"});
  add_node(g, "Cast", {"numbers"}, "parsed");
  auto* to = g->mutable_node(1)->add_attribute();
  to->set_name("to");
  to->set_type(::onnx::AttributeProto::INT);
  to->set_i(::onnx::TensorProto::DOUBLE);
  const std::string model = save(m, d);
  flow::data::write_npy_strings((d / "w.npy").string(), {{3}, {"straße", "éclair", "Monday"}});
  flow::data::write_npy_strings((d / "n.npy").string(), {{2, 2}, {"1.5", "-2", "1e3", "NaN"}});
  std::string out;
  ASSERT_EQ(tool("run " + model + " --input " + (d / "w.npy").string() + " --input " + (d / "n.npy").string() +
                     " --out " + (d / "out").string(),
                 &out),
            0)
      << out;
  EXPECT_NE(out.find("/upper.npy: (3,) strings"), std::string::npos) << out;
  const flow::UnpackedStrings up = flow::data::read_npy_strings((d / "out" / "upper.npy").string());
  EXPECT_EQ(up.shape, (flow::Shape{3}));
  EXPECT_EQ(up.items, (std::vector<std::string>{"STRAßE", "ÉCLAIR", "MONDAY"}));
  const Tensor parsed = flow::data::read_npy((d / "out" / "parsed.npy").string());
  ASSERT_EQ(parsed.shape(), (flow::Shape{2, 2}));
  EXPECT_EQ(parsed.at(0), 1.5);
  EXPECT_EQ(parsed.at(2), 1000);
  EXPECT_TRUE(std::isnan(parsed.at(3)));
  ASSERT_EQ(tool("run " + model + " --input " + (d / "w.npy").string() + " --input " + (d / "n.npy").string(), &out), 0)
      << out;
  EXPECT_NE(out.find("output 0 (last batch): (3,) strings \"STRAßE\", \"ÉCLAIR\", \"MONDAY\""), std::string::npos) << out;
  // A numeric .npy where strings are expected: named.
  flow::data::write_npy((d / "f.npy").string(), iota({3}, 1));
  EXPECT_NE(tool("run " + model + " --input " + (d / "f.npy").string() + " --input " + (d / "n.npy").string(), &out), 0);
  EXPECT_NE(out.find("element type '<f4' is not strings (<U or |S)"), std::string::npos) << out;
  fs::remove_all(d);
}
