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

// ------------------------------------------------------------ math

TEST_F(OnnxOps, MathRoundTrip) {
  const Tensor x = specials({3, 4}, 5), y = specials<double>({3, 4}, 6);
  const Tensor ai = ints<int32_t>({3, 4}, 7, -9, 9), bi = ints<int32_t>({4}, 8, 1, 4);
  const Tensor bu = ints<uint8_t>({3, 4}, 9, 0, 9), su = ints<uint8_t>({4}, 10, 0, 8);
  auto job = define("math", {x, y, ai, bi, bu, su}, [](const Blobs& v) {
    namespace m = flow::math;
    return Blobs{m::erf(v[0]),   m::sin(v[0]),   m::cos(v[1]),   m::tan(v[0]),   m::asin(v[0]),
                 m::acos(v[1]),  m::atan(v[0]),  m::sinh(v[1]),  m::cosh(v[0]),  m::asinh(v[0]),
                 m::acosh(v[1]), m::atanh(v[0]), m::floor(v[0]), m::ceil(v[1]),  m::round(v[0]),
                 m::sign(v[2]),  m::abs(v[2]),   m::abs(v[1]),   m::mod(v[2], v[3]), m::mod(v[1], v[1], true),
                 m::bit_shift(v[4], v[5], true), m::bit_shift(v[4], v[5], false),
                 flow::nn::gelu(v[0]), flow::nn::gelu(v[1], "tanh")};
  });
  std::shared_ptr<flow::CompiledJob> back;
  const auto m = round_trip(*job, {x, y, ai, bi, bu, su}, &back);
  const auto ops = onnx_ops(m);
  for (const char* op : {"Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
                         "Atanh", "Floor", "Ceil", "Round", "Sign", "Gelu", "GeluTanh"})
    EXPECT_EQ(ops.count(op), 1u) << op;
  EXPECT_EQ(ops.count("Abs"), 2u);
  EXPECT_EQ(ops.count("Mod"), 2u);
  EXPECT_EQ(ops.count("BitShift"), 2u);
  // Gelu is opset 20: an opset-17 file holds it as ai.jobflow.Gelu with its
  // formula as a model-local function.
  std::set<std::string> functions;
  for (const auto& f : m.functions()) functions.insert(f.domain() + "." + f.name());
  EXPECT_TRUE(functions.count("ai.jobflow.Gelu"));
  EXPECT_TRUE(functions.count("ai.jobflow.GeluTanh"));
  expect_same_ops(*job, *back,
                  {"erf", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                   "floor", "ceil", "round", "sign", "abs", "mod", "bit_shift", "gelu"});
}

TEST_F(OnnxOps, ImportedMathForms) {
  // ThresholdedRelu and Shrink (built from where/greater).
  const Tensor x = Tensor::from<float>({4}, {-2.f, -0.5f, 0.5f, 3.f});
  Model t(17);
  t.input("x", Tensor({4}, flow::Float32));
  set_float(t.node("ThresholdedRelu", {"x"}, {"y"}), "alpha", 0.5f);
  EXPECT_TRUE(t.run(x)[0].equal(Tensor::from<float>({4}, {0.f, 0.f, 0.f, 3.f})));
  Model s(17);
  s.input("x", Tensor({4}, flow::Float32));
  auto* n = s.node("Shrink", {"x"}, {"y"});
  set_float(n, "lambd", 1.f);
  set_float(n, "bias", 0.5f);
  EXPECT_TRUE(s.run(x)[0].equal(Tensor::from<float>({4}, {-1.5f, 0.f, 0.f, 2.5f})));
  // Mod of floats needs fmod=1 (ONNX's rule).
  Model md(17);
  md.input("a", Tensor({2}, flow::Float32));
  md.input("b", Tensor({2}, flow::Float32));
  md.node("Mod", {"a", "b"}, {"c"});
  EXPECT_CONTAINS(md.load_error(), "node 'Mod' (Mod): fmod must be 1 for floating-point inputs");
  Model me(17);
  me.input("x", Tensor({2}, flow::Int32));
  me.node("Sin", {"x"}, {"y"});
  EXPECT_CONTAINS(me.load_error(), "unsupported op: Sin(int32) (node Sin)");
}

}  // namespace
