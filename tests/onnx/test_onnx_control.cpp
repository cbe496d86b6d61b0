// ONNX nodes that run at call time (issue 9): shape-giving inputs computed
// in the graph (Slice, Unsqueeze, Squeeze, Tile, Pad, Split and reductions
// with run-time values: an onnx_node imported again per call), and Loop and
// Scan with subgraphs reading outer-scope names. Hand-built models against
// values computed here, save/load round trips, errors naming the node.
#include "onnx_test_util.h"

namespace {

using namespace onnx_test;
namespace fl = jobflow;

Tensor i64(const std::vector<int64_t>& v) { return Tensor::from<int64_t>({static_cast<int64_t>(v.size())}, v); }
Tensor seq(const Shape& s, float start = 0.f) {
  std::vector<float> v(static_cast<size_t>(fl::numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return Tensor::from<float>(s, v);
}
std::vector<float> values(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}
std::shared_ptr<fl::CompiledJob> load(const Model& md) {
  std::string bytes;
  EXPECT_TRUE(md.m.SerializeToString(&bytes));
  return fl::onnx::load_bytes(bytes, {}, "model");
}
bool has_op(const fl::CompiledJob& job, const std::string& op) {
  for (const fl::Node& n : job.definition().graph->nodes)
    if (n.op->name() == op) return true;
  return false;
}

class OnnxRuntimeValues : public OnnxOps {};

TEST_F(OnnxRuntimeValues, SliceWithStartsAndEndsGivenPerCall) {
  Model md(13);
  const Tensor x = seq({3, 4});
  md.input("x", x);
  md.input("starts", i64({0, 1}));
  md.input("ends", i64({2, 3}));
  md.node("Slice", {"x", "starts", "ends"}, {"y"});
  auto job = load(md);
  EXPECT_TRUE(has_op(*job, "onnx_node"));
  // Each call its own values; an earlier combination again (the cached expansion).
  auto y = job->run({x, i64({0, 1}), i64({2, 3})});
  EXPECT_EQ(y[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values(y[0]), (std::vector<float>{1, 2, 5, 6}));
  y = job->run({x, i64({1, -1}), i64({3, 100})});
  EXPECT_EQ(y[0].shape(), (Shape{2, 1}));
  EXPECT_EQ(values(y[0]), (std::vector<float>{7, 11}));
  y = job->run({x, i64({0, 1}), i64({2, 3})});
  EXPECT_EQ(values(y[0]), (std::vector<float>{1, 2, 5, 6}));
}

// Ends computed in the graph from an input (n + 0): not known while the
// plan is compiled, so the call is cut at the Slice; the rest of the graph
// (a Mul) runs on the sliced size.
TEST_F(OnnxRuntimeValues, SliceOfASizeComputedInTheGraphCutsTheCall) {
  Model md(13);
  const Tensor x = seq({6});
  md.input("x", x);
  md.input("n", i64({0}));
  md.init("zero", i64({0}));
  md.init("two", Tensor::scalar<float>(2.f));
  md.node("Add", {"n", "zero"}, {"k"});
  md.m.mutable_graph()->mutable_output()->RemoveLast();  // k is not an output
  md.node("Slice", {"x", "zero", "k"}, {"s"});
  md.m.mutable_graph()->mutable_output()->RemoveLast();
  md.node("Mul", {"s", "two"}, {"y"});
  auto job = load(md);
  for (int64_t k : {4, 2, 6, 0}) {
    auto y = job->run({x, i64({k})});
    ASSERT_EQ(y[0].shape(), (Shape{k})) << k;
    for (int64_t i = 0; i < k; ++i) EXPECT_EQ(y[0].data<float>()[i], 2.f * static_cast<float>(i));
  }
}

TEST_F(OnnxRuntimeValues, UnsqueezeSqueezeTilePadSplitReduceWithValuesPerCall) {
  const Tensor x = seq({2, 3});
  {
    Model md(13);
    md.input("x", x);
    md.input("axes", i64({0, 3}));
    md.node("Unsqueeze", {"x", "axes"}, {"y"});
    auto y = load(md)->run({x, i64({0, 3})});
    EXPECT_EQ(y[0].shape(), (Shape{1, 2, 3, 1}));
    EXPECT_EQ(values(y[0]), values(x));
  }
  {
    Model md(13);
    const Tensor x1 = seq({2, 1, 3});
    md.input("x", x1);
    md.input("axes", i64({1}));
    md.node("Squeeze", {"x", "axes"}, {"y"});
    auto y = load(md)->run({x1, i64({-2})});
    EXPECT_EQ(y[0].shape(), (Shape{2, 3}));
  }
  {
    Model md(13);
    md.input("x", x);
    md.input("reps", i64({2, 1}));
    md.node("Tile", {"x", "reps"}, {"y"});
    auto job = load(md);
    auto y = job->run({x, i64({2, 1})});
    EXPECT_EQ(y[0].shape(), (Shape{4, 3}));
    EXPECT_EQ(values(y[0]), (std::vector<float>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}));
    y = job->run({x, i64({1, 2})});
    EXPECT_EQ(values(y[0]), (std::vector<float>{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}));
  }
  {
    Model md(13);
    md.input("x", x);
    md.input("pads", i64({0, 1, 0, 0}));
    md.input("value", Tensor::scalar<float>(0.f));
    md.node("Pad", {"x", "pads", "value"}, {"y"});
    auto y = load(md)->run({x, i64({0, 1, 1, 0}), Tensor::scalar<float>(-1.f)});
    EXPECT_EQ(y[0].shape(), (Shape{3, 4}));
    EXPECT_EQ(values(y[0]), (std::vector<float>{-1, 0, 1, 2, -1, 3, 4, 5, -1, -1, -1, -1}));
  }
  {
    Model md(13);
    md.input("x", x);
    md.input("split", i64({1, 2}));
    auto* n = md.node("Split", {"x", "split"}, {"a", "b"});
    set_int(n, "axis", 1);
    auto y = load(md)->run({x, i64({2, 1})});
    EXPECT_EQ(y[0].shape(), (Shape{2, 2}));
    EXPECT_EQ(values(y[1]), (std::vector<float>{2, 5}));
  }
  {
    Model md(13);
    md.input("x", x);
    md.input("axes", i64({0}));
    auto* n = md.node("ReduceSum", {"x", "axes"}, {"y"});
    set_int(n, "keepdims", 0);
    auto job = load(md);
    auto y = job->run({x, i64({0})});
    EXPECT_EQ(values(y[0]), (std::vector<float>{3, 5, 7}));
    y = job->run({x, i64({1})});
    EXPECT_EQ(values(y[0]), (std::vector<float>{3, 12}));
  }
}

// The node is saved as it was read (its attributes, its inputs) and loads
// back into the same form.
TEST_F(OnnxRuntimeValues, SavedAsTheNodeItWas) {
  Model md(13);
  const Tensor x = seq({4, 5});
  md.input("x", x);
  md.input("starts", i64({1}));
  md.init("ends", i64({100}));
  md.init("axes", i64({1}));
  md.node("Slice", {"x", "starts", "ends", "axes"}, {"y"});
  auto job = load(md);
  std::shared_ptr<fl::CompiledJob> loaded;
  auto saved = round_trip(*job, {x, i64({2})}, &loaded);
  EXPECT_EQ(onnx_ops(saved).count("Slice"), 1u);
  EXPECT_TRUE(has_op(*loaded, "onnx_node"));
  auto y = loaded->run({x, i64({3})});
  EXPECT_EQ(y[0].shape(), (Shape{4, 2}));
}

TEST_F(OnnxRuntimeValues, BadValuesAtTheCallNameTheNode) {
  Model md(13);
  const Tensor x = seq({2, 3});
  md.input("x", x);
  md.input("axes", i64({0}));
  md.node("Unsqueeze", {"x", "axes"}, {"y"});
  auto job = load(md);
  try {
    job->run({x, i64({7})});
    FAIL() << "an axis out of range ran";
  } catch (const fl::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("Unsqueeze"), std::string::npos) << m;
    EXPECT_NE(m.find("out of range"), std::string::npos) << m;
  }
}

// A form the row refuses whatever the values are still fails at load.
TEST_F(OnnxRuntimeValues, UnsupportedFormsFailAtLoad) {
  Model md(13);
  const Tensor x = seq({2, 3});
  md.input("x", x);
  md.input("pads", i64({0, 1, 0, 0}));
  set_string(md.node("Pad", {"x", "pads"}, {"y"}), "mode", "wrap");
  const std::string e = md.load_error();
  EXPECT_NE(e.find("Pad(wrap)"), std::string::npos) << e;
}

// ---- Loop and Scan ----

// A subgraph's value info: a name, an element type, a shape (empty: none).
void vi(::onnx::ValueInfoProto* v, const std::string& name, int elem, const std::vector<int64_t>* shape = nullptr) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  if (shape) {
    auto* s = tt->mutable_shape();
    for (int64_t d : *shape) s->add_dim()->set_dim_value(d);
  }
}
::onnx::NodeProto* add(::onnx::GraphProto* g, const std::string& type, const std::vector<std::string>& ins,
                       const std::vector<std::string>& outs) {
  auto* n = g->add_node();
  n->set_op_type(type);
  for (auto& i : ins) n->add_input(i);
  for (auto& o : outs) n->add_output(o);
  return n;
}
::onnx::GraphProto* graph_attr(::onnx::NodeProto* n, const char* name) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::GRAPH);
  return a->mutable_g();
}
constexpr int kF = ::onnx::TensorProto::FLOAT, kI = ::onnx::TensorProto::INT64, kB = ::onnx::TensorProto::BOOL;

// Loop with M, cond and one carried value: acc += x * (i + 1) while acc <
// limit (the outer `limit` read inside the body), scan output the acc of
// each iteration.
Model loop_model(bool with_cond) {
  Model md(13);
  const Tensor x = seq({2}, 1.f);
  md.input("x", x);
  md.input("m", Tensor::scalar<int64_t>(0));
  md.input("limit", Tensor::scalar<float>(0.f));
  md.init("acc0", Tensor::from<float>({2}, {0.f, 0.f}));
  md.init("cond0", Tensor::from<bool>({}, {true}));
  auto* n = md.node("Loop", {"m", with_cond ? "cond0" : "", "acc0"}, {"acc", "accs"});
  auto* g = graph_attr(n, "body");
  g->set_name("body");
  vi(g->add_input(), "i", kI);
  vi(g->add_input(), "c", kB);
  vi(g->add_input(), "a", kF);
  g->add_initializer()->CopyFrom([] {
    ::onnx::TensorProto t;
    u::tensor_to_proto(Tensor::scalar<int64_t>(1), "one", &t);
    return t;
  }());
  add(g, "Add", {"i", "one"}, {"i1"});
  add(g, "Cast", {"i1"}, {"f"})->add_attribute()->CopyFrom([] {
    ::onnx::AttributeProto a;
    a.set_name("to");
    a.set_type(::onnx::AttributeProto::INT);
    a.set_i(kF);
    return a;
  }());
  add(g, "Mul", {"x", "f"}, {"xf"});
  add(g, "Add", {"a", "xf"}, {"a2"});
  add(g, "ReduceSum", {"a2"}, {"sum"});
  add(g, "Less", {"sum", "limit"}, {"c2"});
  add(g, "Identity", {"a2"}, {"a2_scan"});
  vi(g->add_output(), "c2", kB);
  vi(g->add_output(), "a2", kF);
  vi(g->add_output(), "a2_scan", kF);
  return md;
}

// The reference: the same loop in C++.
void loop_ref(int64_t m, float limit, bool with_cond, std::vector<float>* acc, std::vector<std::vector<float>>* accs) {
  *acc = {0.f, 0.f};
  accs->clear();
  bool c = true;
  for (int64_t i = 0; i < m && (c || !with_cond); ++i) {
    (*acc)[0] += 1.f * static_cast<float>(i + 1);
    (*acc)[1] += 2.f * static_cast<float>(i + 1);
    accs->push_back(*acc);
    c = (*acc)[0] + (*acc)[1] < limit;
  }
}

TEST_F(OnnxOps, LoopRunsItsBodyPerIterationWithOuterValues) {
  for (bool with_cond : {true, false}) {
    auto job = load(loop_model(with_cond));
    EXPECT_TRUE(has_op(*job, "loop"));
    for (auto [m, limit] : std::vector<std::pair<int64_t, float>>{{5, 10.f}, {5, 1000.f}, {0, 10.f}, {3, 0.f}}) {
      std::vector<float> acc;
      std::vector<std::vector<float>> accs;
      loop_ref(m, limit, with_cond, &acc, &accs);
      auto y = job->run({seq({2}, 1.f), Tensor::scalar<int64_t>(m), Tensor::scalar<float>(limit)});
      const std::string at = "cond " + std::to_string(with_cond) + " M " + std::to_string(m) + " limit " +
                             std::to_string(limit);
      EXPECT_EQ(values(y[0]), acc) << at;
      ASSERT_EQ(y[1].shape(), (Shape{static_cast<int64_t>(accs.size()), 2})) << at;
      for (size_t t = 0; t < accs.size(); ++t)
        for (size_t j = 0; j < 2; ++j) EXPECT_EQ(y[1].data<float>()[t * 2 + j], accs[t][j]) << at;
    }
  }
}

TEST_F(OnnxOps, LoopRoundTrip) {
  auto job = load(loop_model(true));
  std::shared_ptr<fl::CompiledJob> loaded;
  auto saved = round_trip(*job, {seq({2}, 1.f), Tensor::scalar<int64_t>(4), Tensor::scalar<float>(20.f)}, &loaded);
  EXPECT_EQ(onnx_ops(saved).count("Loop"), 1u);
  EXPECT_TRUE(has_op(*loaded, "loop"));
}

// A carried value that grows each iteration (a Concat): its size is known
// per call.
TEST_F(OnnxOps, LoopCarriedValueMayChangeItsSize) {
  Model md(13);
  md.input("m", Tensor::scalar<int64_t>(0));
  md.init("v0", Tensor::from<float>({1}, {7.f}));
  auto* n = md.node("Loop", {"m", "", "v0"}, {"v"});
  auto* g = graph_attr(n, "body");
  vi(g->add_input(), "i", kI);
  vi(g->add_input(), "c", kB);
  vi(g->add_input(), "a", kF);
  add(g, "Concat", {"a", "a"}, {"a2"})->add_attribute()->CopyFrom([] {
    ::onnx::AttributeProto a;
    a.set_name("axis");
    a.set_type(::onnx::AttributeProto::INT);
    a.set_i(0);
    return a;
  }());
  add(g, "Identity", {"c"}, {"c2"});
  vi(g->add_output(), "c2", kB);
  vi(g->add_output(), "a2", kF);
  auto job = load(md);
  for (int64_t m : {0, 1, 3}) {
    auto y = job->run({Tensor::scalar<int64_t>(m)});
    EXPECT_EQ(y[0].shape(), (Shape{int64_t{1} << m})) << m;
    EXPECT_EQ(y[0].data<float>()[0], 7.f);
  }
}

// Scan (opset 9): a running sum over axis 1 of x, scanned in reverse, the
// sums stacked along output axis 1.
TEST_F(OnnxOps, ScanOverAnAxisInReverse) {
  Model md(11);
  const Tensor x = seq({2, 3});
  md.input("x", x);
  md.init("s0", Tensor::from<float>({2}, {0.f, 0.f}));
  auto* n = md.node("Scan", {"s0", "x"}, {"s", "sums"});
  set_int(n, "num_scan_inputs", 1);
  set_ints(n, "scan_input_axes", {1});
  set_ints(n, "scan_input_directions", {1});
  set_ints(n, "scan_output_axes", {1});
  auto* g = graph_attr(n, "body");
  vi(g->add_input(), "acc", kF);
  vi(g->add_input(), "col", kF);
  add(g, "Add", {"acc", "col"}, {"acc2"});
  add(g, "Identity", {"acc2"}, {"out"});
  vi(g->add_output(), "acc2", kF);
  vi(g->add_output(), "out", kF);
  auto job = load(md);
  EXPECT_TRUE(has_op(*job, "scan"));
  auto y = job->run({x});
  // Rows (0 1 2) and (3 4 5) from the end: 2, 3, 3 and 5, 9, 12.
  EXPECT_EQ(values(y[0]), (std::vector<float>{3, 12}));
  EXPECT_EQ(y[1].shape(), (Shape{2, 3}));
  EXPECT_EQ(values(y[1]), (std::vector<float>{2, 3, 3, 5, 9, 12}));
  std::shared_ptr<fl::CompiledJob> loaded;
  auto saved = round_trip(*job, {x}, &loaded);
  EXPECT_EQ(onnx_ops(saved).count("Scan"), 1u);
}

// Scan of opset 8: a batch axis 0 on every input and output, one scan per item.
TEST_F(OnnxOps, ScanOfOpset8RunsPerBatchItem) {
  Model md(8);
  const Tensor x = seq({2, 3, 1});
  md.input("x", x);
  md.init("s0", Tensor::from<float>({2, 1}, {0.f, 100.f}));
  auto* n = md.node("Scan", {"", "s0", "x"}, {"s", "sums"});
  set_int(n, "num_scan_inputs", 1);
  auto* g = graph_attr(n, "body");
  vi(g->add_input(), "acc", kF);
  vi(g->add_input(), "v", kF);
  add(g, "Add", {"acc", "v"}, {"acc2"});
  add(g, "Identity", {"acc2"}, {"out"});
  vi(g->add_output(), "acc2", kF);
  vi(g->add_output(), "out", kF);
  auto y = load(md)->run({x});
  EXPECT_EQ(values(y[0]), (std::vector<float>{3, 112}));
  EXPECT_EQ(y[1].shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(values(y[1]), (std::vector<float>{0, 1, 3, 103, 107, 112}));
}

TEST_F(OnnxOps, LoopErrorsNameTheNode) {
  Model md = loop_model(true);
  // The body returns an int64 for the float carried value.
  auto* g = md.m.mutable_graph()->mutable_node(0)->mutable_attribute(0)->mutable_g();
  g->mutable_output(1)->set_name("i1");
  const std::string e = md.load_error();
  EXPECT_NE(e.find("Loop"), std::string::npos) << e;
  EXPECT_NE(e.find("carried value 0"), std::string::npos) << e;
}

}  // namespace
