// The ONNX forms of the ops real models need (issue 9): comparisons and
// logic, ...:
//   * job -> onnx::save -> onnx::load gives the same engine ops and
//     bit-identical outputs;
//   * import-only forms through hand-built one-node models;
//   * unsupported forms fail at load naming the node, the op and what is
//     missing.
#include "errors.h"
#include "onnx_test_util.h"

namespace {
using namespace onnx_test;

Tensor bools(Shape s, std::vector<int> v) {
  Tensor t(std::move(s), flow::DType::Bool);
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i] != 0;
  return t;
}

// ------------------------------------------------------------ logic

TEST_F(OnnxOps, ComparisonsAndLogicRoundTrip) {
  const Tensor a = specials({3, 4}, 1), b = specials({4}, 2);
  const Tensor ai = ints<int64_t>({3, 4}, 3, -3, 3), bi = ints<int64_t>({3, 1}, 4, -3, 3);
  const Tensor c = bools({3, 4}, {1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 1}), d = bools({4}, {0, 1, 1, 0});
  auto job = define("logic", {a, b, ai, bi, c, d}, [](const Blobs& v) {
    return Blobs{flow::equal(v[0], v[1]),          flow::less(v[0], v[1]),        flow::greater(v[2], v[3]),
                 flow::less_equal(v[2], v[3]),     flow::greater_equal(v[0], v[1]), flow::equal(v[4], v[5]),
                 flow::logical_and(v[4], v[5]),    flow::logical_or(v[4], v[5]),  flow::logical_xor(v[4], v[5]),
                 flow::logical_not(v[4]),          flow::where(v[4], v[0], v[1]), flow::where(v[5], v[2], v[3]),
                 flow::math::is_nan(v[0]),         flow::math::is_inf(v[0]),      flow::math::is_inf(v[0], false, true)};
  });
  std::shared_ptr<flow::CompiledJob> back;
  const auto m = round_trip(*job, {a, b, ai, bi, c, d}, &back);
  const auto ops = onnx_ops(m);
  for (const char* op : {"Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not", "IsNaN"})
    EXPECT_EQ(ops.count(op), 1u) << op;
  EXPECT_EQ(ops.count("Equal"), 2u);
  EXPECT_EQ(ops.count("Where"), 2u);
  EXPECT_EQ(ops.count("IsInf"), 2u);
  expect_same_ops(*job, *back,
                  {"equal", "less", "greater", "less_equal", "greater_equal", "logical_and", "logical_or",
                   "logical_xor", "logical_not", "where", "is_nan", "is_inf"});
  // Bool inputs and outputs keep their ONNX type.
  EXPECT_EQ(m.graph().input(4).type().tensor_type().elem_type(), ::onnx::TensorProto::BOOL);
  EXPECT_EQ(m.graph().output(0).type().tensor_type().elem_type(), ::onnx::TensorProto::BOOL);
}

TEST_F(OnnxOps, ImportedLogicErrorsNameTheNode) {
  Model md(17);
  md.input("x", Tensor({2}, flow::Float32));
  md.input("y", Tensor({2}, flow::Float32));
  md.node("And", {"x", "y"}, {"z"});
  EXPECT_CONTAINS(md.load_error(), "node 'And' (And): inputs must be bool, got (2,) float32");
  Model mi(17);
  mi.input("x", Tensor({2}, flow::Int32));
  mi.node("IsNaN", {"x"}, {"z"});
  EXPECT_CONTAINS(mi.load_error(), "unsupported op: IsNaN(int32) (node IsNaN)");
}

}  // namespace
