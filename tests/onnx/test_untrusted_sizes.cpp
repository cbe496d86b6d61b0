// Sizes computed from untrusted input (issue 14): an ONNX file whose shapes
// multiply past 64 bits is rejected with an error that names the node or
// tensor and the dims, never computed with a wrapped value (the sanitizer
// build's UBSan reports signed overflow, so these tests also guard the
// arithmetic itself). The checked helpers (jobflow/tensor.h) first.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "errors.h"
#include "jobflow/jobflow.h"
#include "jobflow/onnx.h"
#include "onnx/onnx_util.h"

namespace {

namespace flow = jobflow;
namespace u = jobflow::onnx_util;
using flow::DType;
using flow::Shape;
using flow::Tensor;
using flow::testing::error_of;

constexpr int64_t k2p40 = int64_t(1) << 40;  // 1099511627776: the dims
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// ---------------------------------------------------------------- helpers

TEST(CheckedSizes, CountsAndBytesThatFit) {
  int64_t n = -1;
  EXPECT_TRUE(flow::checked_numel({}, &n));
  EXPECT_EQ(n, 1);
  EXPECT_TRUE(flow::checked_numel({3, 0, k2p40}, &n));
  EXPECT_EQ(n, 0);
  EXPECT_TRUE(flow::checked_numel({k2p40, 1 << 22}, &n));
  EXPECT_EQ(n, int64_t(1) << 62);
  EXPECT_TRUE(flow::checked_nbytes({k2p40, 1 << 19}, DType::Float64, &n));
  EXPECT_EQ(n, int64_t(1) << 62);
}

TEST(CheckedSizes, OverflowAndNegativeDimsAreReasons) {
  int64_t n = 0;
  std::string why;
  EXPECT_FALSE(flow::checked_numel({k2p40, k2p40}, &n, &why));
  EXPECT_EQ(why, "the element count overflows 64 bits");
  EXPECT_FALSE(flow::checked_numel({2, -3}, &n, &why));
  EXPECT_EQ(why, "dimension 1 is -3");
  // 2^61 elements fit, 2^61 float32 = 2^63 bytes do not.
  EXPECT_TRUE(flow::checked_numel({int64_t(1) << 61}, &n));
  EXPECT_FALSE(flow::checked_nbytes({int64_t(1) << 61}, DType::Float32, &n, &why));
  EXPECT_CONTAINS(why, "byte size");
  EXPECT_FALSE(flow::checked_nbytes({kMax, 0, -1}, DType::UInt8, &n, &why));  // negative first, whatever the rest
  EXPECT_EQ(why, "dimension 2 is -1");
  int64_t r = 0;
  EXPECT_FALSE(flow::size_mul(k2p40, k2p40, &r));
  EXPECT_FALSE(flow::size_add(kMax, 1, &r));
  EXPECT_FALSE(flow::size_mul(-1, 2, &r));
  EXPECT_TRUE(flow::size_add(kMax - 1, 1, &r));
  EXPECT_EQ(r, kMax);
}

TEST(CheckedSizes, ThrowingFormsNameTheTensorAndDims) {
  EXPECT_EQ(error_of([] { flow::checked_numel({k2p40, k2p40}, "[where] tensor 'w'"); }),
            "[where] tensor 'w' (1099511627776, 1099511627776): the element count overflows 64 bits");
  EXPECT_EQ(error_of([] { flow::checked_nbytes({int64_t(1) << 61}, DType::Float32, "[where] tensor 'x'"); }),
            "[where] tensor 'x' (2305843009213693952,) float32: the byte size (2305843009213693952 elements of 4 "
            "bytes) overflows 64 bits");
  // A tensor that large is an error, not a wrapped allocation.
  EXPECT_CONTAINS(error_of([] { Tensor({k2p40, k2p40}, DType::Float32); }), "[Tensor] cannot allocate");
  EXPECT_CONTAINS(error_of([] { Tensor({int64_t(1) << 61}, DType::Float32); }), "overflows 64 bits");
}

// ----------------------------------------------------------------- models

// A one-node model: input "x", initializers, the node's outputs as graph outputs.
struct Model {
  ::onnx::ModelProto m;
  explicit Model(int64_t opset = 17) {
    m.set_ir_version(8);
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    m.mutable_graph()->set_name("g");
  }
  void input(const std::string& name, const Shape& shape, DType dt = DType::Float32) {
    auto* vi = m.mutable_graph()->add_input();
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(u::to_onnx_dtype(dt));
    for (int64_t d : shape) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  void init(const std::string& name, const Tensor& t) { u::tensor_to_proto(t, name, m.mutable_graph()->add_initializer()); }
  ::onnx::NodeProto* node(const std::string& type, const std::string& name, const std::vector<std::string>& ins,
                          const std::string& out) {
    auto* n = m.mutable_graph()->add_node();
    n->set_op_type(type);
    n->set_name(name);
    for (auto& i : ins) n->add_input(i);
    n->add_output(out);
    m.mutable_graph()->add_output()->set_name(out);
    return n;
  }
  std::string load_error() const {
    std::string bytes;
    EXPECT_TRUE(m.SerializeToString(&bytes));
    return error_of([&] { flow::onnx::load_bytes(bytes, {}, "sizes.onnx"); });
  }
};

void set_int(::onnx::NodeProto* n, const char* k, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(k);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}
void set_ints(::onnx::NodeProto* n, const char* k, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(k);
  a->set_type(::onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

Tensor i64(const std::vector<int64_t>& v) { return Tensor::from<int64_t>({static_cast<int64_t>(v.size())}, v); }

// The input: Reshape to (2^40, 2^40) (and with a -1, which divides
// by the product of the others) once computed 2^40 * 2^40 in a signed
// int64 (UB) before any check.
TEST(UntrustedSizes, ReshapeWhoseShapeOverflowsIsRejected) {
  for (const std::vector<int64_t>& want : {std::vector<int64_t>{k2p40, k2p40}, std::vector<int64_t>{k2p40, -1, k2p40}}) {
    Model M;
    M.input("x", {2, 3});
    M.init("shape", i64(want));
    M.node("Reshape", "r", {"x", "shape"}, "y");
    std::string dims = "(";
    for (size_t i = 0; i < want.size(); ++i) dims += (i ? ", " : "") + std::to_string(want[i]);
    EXPECT_EQ(M.load_error(), "[onnx.load] sizes.onnx: node 'r' (Reshape): shape 'shape' " + dims +
                                  ") for 'x' (2, 3): the element count overflows 64 bits");
  }
}

TEST(UntrustedSizes, ReshapeThatFitsStillLoads) {
  Model M;
  M.input("x", {2, 3});
  M.init("shape", i64({3, -1}));
  M.node("Reshape", "r", {"x", "shape"}, "y");
  std::string bytes;
  ASSERT_TRUE(M.m.SerializeToString(&bytes));
  const auto y = flow::onnx::load_bytes(bytes, {}, "sizes.onnx")->run({Tensor::from<float>({2, 3}, {1, 2, 3, 4, 5, 6})});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].shape(), (Shape{3, 2}));
}

TEST(UntrustedSizes, GraphInputWhoseSizeOverflowsIsRejected) {
  Model M;
  M.input("x", {k2p40, k2p40});
  M.node("Relu", "act", {"x"}, "y");
  EXPECT_EQ(M.load_error(),
            "[onnx.load] sizes.onnx: input 'x' (1099511627776, 1099511627776) float32: the element count overflows "
            "64 bits");
}

TEST(UntrustedSizes, ConstantOfShapeIsCheckedBeforeAllocating) {
  Model M;
  M.init("s", i64({k2p40, k2p40}));
  M.node("ConstantOfShape", "c", {"s"}, "y");
  const std::string e = M.load_error();
  EXPECT_CONTAINS(e, "node 'c' (ConstantOfShape): output (1099511627776, 1099511627776) float32: the element count "
                     "overflows 64 bits");
}

TEST(UntrustedSizes, ConstantOfShapeWithANegativeDimIsRejected) {
  Model M;
  M.init("s", i64({2, -1}));
  M.node("ConstantOfShape", "c", {"s"}, "y");
  // (check_size counts a -1 as a dynamic dim: the negative check comes first)
  EXPECT_EQ(M.load_error(), "[onnx.load] sizes.onnx: node 'c' (ConstantOfShape): negative dimension");
}

TEST(UntrustedSizes, PoolGeometryPast2To31IsRejected) {
  Model M;
  M.input("x", {1, 1, 8, 8});
  auto* n = M.node("AveragePool", "pool", {"x"}, "y");
  set_ints(n, "kernel_shape", {2, 2});
  set_ints(n, "pads", {kMax, 0, kMax, 0});
  set_int(n, "count_include_pad", 1);
  EXPECT_CONTAINS(M.load_error(), "node 'pool' (AveragePool): kernel (2, 2), strides (1, 1), dilations (1, 1) and pads");
}

TEST(UntrustedSizes, ConvTransposeGeometryThatOverflowsIsRejected) {
  Model M;
  M.input("x", {1, 1, 4, 4});
  M.init("w", Tensor({1, 1, 2, 2}, DType::Float32));
  auto* n = M.node("ConvTranspose", "ct", {"x", "w"}, "y");
  set_ints(n, "strides", {kMax / 2, 1});
  EXPECT_CONTAINS(M.load_error(), "strides, dilations or pads too large");
}

TEST(UntrustedSizes, SplitSizesThatOverflowAreRejected) {
  Model M(13);
  M.input("x", {4});
  M.init("parts", i64({kMax, kMax}));
  auto* n = M.m.mutable_graph()->add_node();
  n->set_op_type("Split");
  n->set_name("split");
  n->add_input("x");
  n->add_input("parts");
  for (const char* o : {"a", "b"}) {
    n->add_output(o);
    M.m.mutable_graph()->add_output()->set_name(o);
  }
  EXPECT_CONTAINS(M.load_error(), "node 'split' (Split): split size 9223372036854775807 is out of range");
}

TEST(UntrustedSizes, PadThatGrowsPast63BitsIsRejected) {
  Model M(13);
  M.input("x", {int64_t(1) << 62}, DType::UInt8);
  M.init("pads", i64({int64_t(1) << 61, int64_t(1) << 61}));
  M.node("Pad", "pad", {"x", "pads"}, "y");
  EXPECT_CONTAINS(M.load_error(), "node 'pad' (Pad): pads");
}

TEST(UntrustedSizes, DepthToSpaceBlocksizeIsBounded) {
  Model M;
  M.input("x", {1, 4, 2, 2});
  auto* n = M.node("DepthToSpace", "d2s", {"x"}, "y");
  set_int(n, "blocksize", int64_t(1) << 32);
  EXPECT_CONTAINS(M.load_error(), "node 'd2s' (DepthToSpace): blocksize 4294967296 is not in 1..65535");
}

}  // namespace
