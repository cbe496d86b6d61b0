// ONNX sequences and optional values (issue 9): models built here with
// SplitToSequence, SequenceErase, ConcatFromSequence, SequenceAt and
// SequenceLength, a sequence as the model's input and output (packed,
// jobflow/sequence.h), an If whose branches return sequences; load errors
// that name the node and the input; a job with sequences refuses to be saved.
// ONNX's own cases (node/test_sequence_*, test_optional_*, loop13_seq, ...)
// run in the conformance suite.
#include "errors.h"
#include "onnx_test_util.h"

#include "jobflow/sequence.h"

namespace {

using namespace onnx_test;
namespace fl = jobflow;

Tensor f32(const Shape& s, float start = 0.f) {
  std::vector<float> v(static_cast<size_t>(fl::numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return Tensor::from<float>(s, v);
}
std::vector<float> values(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

// A graph input of type seq(tensor(elem)), with `rank` dims when >= 0.
void seq_input(Model& md, const std::string& name, int32_t elem, int rank) {
  auto* vi = md.m.mutable_graph()->add_input();
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  if (rank >= 0) {
    auto* sh = tt->mutable_shape();
    for (int d = 0; d < rank; ++d) sh->add_dim()->set_dim_param("d" + std::to_string(d));
  }
}
void drop_output(Model& md) { md.m.mutable_graph()->mutable_output()->RemoveLast(); }

TEST_F(OnnxOps, SplitEraseConcatFromSequence) {
  Model md(13);
  const Tensor x = f32({5, 2});
  md.input("x", x);
  md.init("sizes", Tensor::from<int64_t>({3}, {1, 3, 1}));
  md.init("last", Tensor::scalar<int64_t>(-1));
  md.node("SplitToSequence", {"x", "sizes"}, {"s"});
  drop_output(md);
  md.node("SequenceErase", {"s", "last"}, {"t"});  // rows 0 and 1..3
  drop_output(md);
  set_int(md.node("ConcatFromSequence", {"t"}, {"y"}), "axis", 0);
  const auto y = md.run(x);
  ASSERT_EQ(y[0].shape(), (Shape{4, 2}));
  EXPECT_EQ(values(y[0]), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
}

// The model's sequence input and output in their packed form; a position
// and the length computed per call.
TEST_F(OnnxOps, SequenceInputAndOutputArePacked) {
  Model md(12);
  seq_input(md, "s", ::onnx::TensorProto::FLOAT, 1);
  md.input("i", Tensor::scalar<int64_t>(0));
  md.node("SequenceAt", {"s", "i"}, {"item"});
  md.node("SequenceLength", {"s"}, {"n"});
  md.node("SequenceInsert", {"s", "item"}, {"more"});  // the item again at the end
  md.m.mutable_graph()->mutable_output(2)->mutable_type()->mutable_sequence_type();
  std::string bytes;
  ASSERT_TRUE(md.m.SerializeToString(&bytes));
  auto job = fl::onnx::load_bytes(bytes, {}, "model");
  EXPECT_EQ(job->signature().inputs[0].dtype, fl::DType::UInt8);
  {  // jobflow inspect says which values are packed sequences
    const fs::path d = tmp_dir("sequence_inspect");
    std::ofstream(d / "m.onnx", std::ios::binary) << bytes;
    const std::string text = fl::onnx::inspect((d / "m.onnx").string()).str();
    EXPECT_NE(text.find("packed values (sequences and optionals: jobflow/sequence.h; strings: jobflow/strings.h): "
                        "s = sequence(float32, rank 1); "
                        "more = sequence(float32, rank 1);"),
              std::string::npos)
        << text;
    fs::remove_all(d);
  }
  const Tensor s = fl::pack_sequence({f32({2}), f32({3}, 10.f), f32({1}, 20.f)}, fl::DType::Float32);
  for (int64_t i : {1, -1}) {
    const auto r = job->run({s, Tensor::scalar<int64_t>(i)});
    EXPECT_EQ(values(r[0]), i == 1 ? (std::vector<float>{10, 11, 12}) : (std::vector<float>{20}));
    EXPECT_EQ(r[1].data<int64_t>()[0], 3);
    const auto u = fl::unpack_sequence(r[2], "more");
    ASSERT_EQ(u.items.size(), 4u);
    EXPECT_TRUE(u.items[3].equal(r[0]));
  }
}

// An If whose condition is known per call, each branch a sequence of its
// own length.
TEST_F(OnnxOps, IfBranchesReturnSequences) {
  Model md(13);
  md.input("c", Tensor::scalar(true));
  md.input("x", f32({2}));
  auto branch = [](const std::string& name, int copies) {
    ::onnx::GraphProto g;
    g.set_name(name);
    auto* n = g.add_node();
    n->set_op_type("SequenceConstruct");
    for (int k = 0; k < copies; ++k) n->add_input("x");
    n->add_output(name + "_s");
    auto* o = g.add_output();
    o->set_name(name + "_s");
    o->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(
        ::onnx::TensorProto::FLOAT);
    return g;
  };
  auto* n = md.node("If", {"c"}, {"s"});
  drop_output(md);
  for (auto [attr, copies] : {std::pair<const char*, int>{"then_branch", 1}, {"else_branch", 3}}) {
    auto* a = n->add_attribute();
    a->set_name(attr);
    a->set_type(::onnx::AttributeProto::GRAPH);
    *a->mutable_g() = branch(attr, copies);
  }
  md.node("SequenceLength", {"s"}, {"n"});
  set_int(md.node("ConcatFromSequence", {"s"}, {"y"}), "axis", 0);
  std::string bytes;
  ASSERT_TRUE(md.m.SerializeToString(&bytes));
  auto job = fl::onnx::load_bytes(bytes, {}, "model");
  const Tensor x = f32({2}, 4.f);
  auto r = job->run({Tensor::scalar(true), x});
  EXPECT_EQ(r[0].data<int64_t>()[0], 1);
  EXPECT_EQ(values(r[1]), (std::vector<float>{4, 5}));
  r = job->run({Tensor::scalar(false), x});
  EXPECT_EQ(r[0].data<int64_t>()[0], 3);
  EXPECT_EQ(values(r[1]), (std::vector<float>{4, 5, 4, 5, 4, 5}));
  // Sequences have no export: saving names the op.
  const fs::path d = tmp_dir("if_sequences");
  EXPECT_CONTAINS(fl::testing::error_of([&] { fl::onnx::save(*job, (d / "job.onnx").string()); }),
                  "op 'sequence_construct' (node ");
  fs::remove_all(d);
}

// Ranks: a sequence of mixed ranks stays of unknown rank (an insert does
// not make one up), so SequenceAt takes the rank its output declares; a
// SequenceMap body's declared input rank serves for items whose sequence
// declares none.
TEST_F(OnnxOps, SequenceItemRanksComeFromDeclarations) {
  {
    Model md(13);
    md.input("a", f32({3}));
    md.input("b", f32({1, 2}));
    md.init("zero", Tensor::scalar<int64_t>(0));
    md.node("SequenceConstruct", {"a", "b"}, {"s"});
    drop_output(md);
    md.node("SequenceInsert", {"s", "b"}, {"t"});
    drop_output(md);
    md.node("SequenceAt", {"t", "zero"}, {"y"});
    auto* sh = md.m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type();
    sh->set_elem_type(::onnx::TensorProto::FLOAT);
    sh->mutable_shape()->add_dim()->set_dim_param("n");
    const Tensor a = f32({3}, 1.f);
    const auto y = md.run({a, f32({1, 2})});
    EXPECT_TRUE(y[0].equal(a));
  }
  {
    Model md(17);
    seq_input(md, "s", ::onnx::TensorProto::FLOAT, -1);
    auto* n = md.node("SequenceMap", {"s"}, {"doubled"});
    md.m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_sequence_type();
    ::onnx::GraphProto body;
    body.set_name("double");
    auto* x = body.add_input();
    x->set_name("x");
    x->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
    x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_param("len");
    auto* add = body.add_node();
    add->set_op_type("Add");
    add->add_input("x");
    add->add_input("x");
    add->add_output("y");
    auto* y = body.add_output();
    y->set_name("y");
    y->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
    auto* a = n->add_attribute();
    a->set_name("body");
    a->set_type(::onnx::AttributeProto::GRAPH);
    *a->mutable_g() = body;
    const auto r = md.run(fl::pack_sequence({f32({2}, 1.f), f32({3}, 5.f)}, fl::DType::Float32));
    const auto u = fl::unpack_sequence(r[0], "doubled");
    ASSERT_EQ(u.items.size(), 2u);
    EXPECT_EQ(values(u.items[0]), (std::vector<float>{2, 4}));
    EXPECT_EQ(values(u.items[1]), (std::vector<float>{10, 12, 14}));
  }
}

// SequenceMap over two sequences adds item by item; sequences of other
// lengths fail at the call, whichever is the longer (ONNX asks for equal
// lengths), instead of extra items being dropped.
TEST_F(OnnxOps, SequenceMapNeedsEqualLengths) {
  Model md(17);
  seq_input(md, "s", ::onnx::TensorProto::FLOAT, 1);
  seq_input(md, "t", ::onnx::TensorProto::FLOAT, 1);
  auto* n = md.node("SequenceMap", {"s", "t"}, {"sum"});
  md.m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_sequence_type();
  ::onnx::GraphProto body;
  body.set_name("add");
  for (const char* name : {"x", "y"}) {
    auto* in = body.add_input();
    in->set_name(name);
    in->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
    in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_param("len");
  }
  auto* add = body.add_node();
  add->set_op_type("Add");
  add->add_input("x");
  add->add_input("y");
  add->add_output("z");
  auto* z = body.add_output();
  z->set_name("z");
  z->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  auto* a = n->add_attribute();
  a->set_name("body");
  a->set_type(::onnx::AttributeProto::GRAPH);
  *a->mutable_g() = body;
  std::string bytes;
  ASSERT_TRUE(md.m.SerializeToString(&bytes));
  auto job = fl::onnx::load_bytes(bytes, {}, "model");
  const Tensor two = fl::pack_sequence({f32({2}, 1.f), f32({2}, 5.f)}, fl::DType::Float32);
  const Tensor three = fl::pack_sequence({f32({2}), f32({2}), f32({2})}, fl::DType::Float32);
  const auto u = fl::unpack_sequence(job->run({two, two})[0], "sum");
  ASSERT_EQ(u.items.size(), 2u);
  EXPECT_EQ(values(u.items[1]), (std::vector<float>{10, 12}));
  for (auto [s, t] : {std::pair{two, three}, std::pair{three, two}})
    EXPECT_CONTAINS(fl::testing::error_of([&] { job->run({s, t}); }),
                    "position 2 is out of range [-2, 1] for a sequence of 2 tensors");
}

// An optional carried through a Loop stays an optional: with no
// iteration, the none that entered comes out.
TEST_F(OnnxOps, LoopCarriesAnOptional) {
  Model md(16);
  md.input("m", Tensor::scalar<int64_t>(0));
  md.input("x", f32({2}));
  auto* opt = md.node("Optional", {}, {"none"});
  drop_output(md);
  auto* ta = opt->add_attribute();
  ta->set_name("type");
  ta->set_type(::onnx::AttributeProto::TYPE_PROTO);
  ta->mutable_tp()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(
      ::onnx::TensorProto::FLOAT);
  auto* loop = md.node("Loop", {"m", "", "none"}, {"out"});
  drop_output(md);
  ::onnx::GraphProto body;
  body.set_name("body");
  for (const char* i : {"i", "c", "v"}) body.add_input()->set_name(i);
  auto* v = body.mutable_input(2);
  *v->mutable_type()->mutable_optional_type()->mutable_elem_type() = ta->tp();
  auto* c = body.add_node();
  c->set_op_type("Identity");
  c->add_input("c");
  c->add_output("c_out");
  auto* sc = body.add_node();
  sc->set_op_type("SequenceConstruct");
  sc->add_input("x");
  sc->add_output("v_out");
  body.add_output()->set_name("c_out");
  body.add_output()->set_name("v_out");
  auto* a = loop->add_attribute();
  a->set_name("body");
  a->set_type(::onnx::AttributeProto::GRAPH);
  *a->mutable_g() = body;
  md.node("OptionalHasElement", {"out"}, {"has"});
  std::string bytes;
  ASSERT_TRUE(md.m.SerializeToString(&bytes));
  auto job = fl::onnx::load_bytes(bytes, {}, "model");
  EXPECT_FALSE(job->run({Tensor::scalar<int64_t>(0), f32({2})})[0].data<bool>()[0]);
  EXPECT_TRUE(job->run({Tensor::scalar<int64_t>(2), f32({2})})[0].data<bool>()[0]);
}

TEST_F(OnnxOps, SequenceLoadErrorsNameTheNodeAndInput) {
  {  // an op that takes tensors, given a sequence
    Model md(13);
    md.input("x", f32({3}));
    md.node("SequenceConstruct", {"x", "x"}, {"s"});
    drop_output(md);
    md.node("Relu", {"s"}, {"y"});
    const std::string e = md.load_error();
    EXPECT_NE(e.find("node 'Relu' (Relu): input 's' is a sequence(float32, rank 1); Relu takes tensors"),
              std::string::npos)
        << e;
  }
  {  // items whose rank nothing declares: SequenceAt cannot define its output
    Model md(13);
    seq_input(md, "s", ::onnx::TensorProto::FLOAT, -1);
    md.init("i", Tensor::scalar<int64_t>(0));
    md.node("SequenceAt", {"s", "i"}, {"y"});
    const std::string e = md.load_error();
    EXPECT_NE(e.find("unsupported op: SequenceAt(items of a rank unknown at load)"), std::string::npos) << e;
  }
  {  // a tensor of another dtype than the sequence's items
    Model md(13);
    seq_input(md, "s", ::onnx::TensorProto::FLOAT, 1);
    md.input("x", Tensor::from<int32_t>({2}, {1, 2}));
    md.node("SequenceInsert", {"s", "x"}, {"t"});
    md.m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_sequence_type();
    const std::string e = md.load_error();
    EXPECT_NE(e.find("node 'SequenceInsert' (SequenceInsert): the tensor is (2,) int32, the sequence holds float32"),
              std::string::npos)
        << e;
  }
  {  // scalars have no axis to join along (new_axis=0)
    Model md(13);
    md.input("a", Tensor::scalar<float>(1.f));
    md.node("SequenceConstruct", {"a", "a"}, {"s"});
    drop_output(md);
    set_int(md.node("ConcatFromSequence", {"s"}, {"y"}), "axis", 0);
    const std::string e = md.load_error();
    EXPECT_NE(e.find("[concat_from_sequence] axis 0 is out of range for tensors of rank 0"), std::string::npos) << e;
  }
  {  // a map input: named as what it is
    Model md(13);
    auto* vi = md.m.mutable_graph()->add_input();
    vi->set_name("m");
    vi->mutable_type()->mutable_map_type()->set_key_type(::onnx::TensorProto::INT64);
    md.node("Identity", {"m"}, {"y"});
    const std::string e = md.load_error();
    EXPECT_NE(e.find("input 'm': a map or sparse tensor is not supported"), std::string::npos) << e;
  }
}

}  // namespace
