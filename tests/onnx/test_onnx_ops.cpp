// The ONNX forms of the ops added for imported models (activations, clip,
// pow, minimum/maximum, prelu, gather, strided_slice, split, pad,
// conv_transpose2d):
//   * job -> onnx::save -> onnx::load gives the same engine ops and
//     bit-identical outputs (Inf, NaN and -0 inputs included);
//   * the importer's Pad and Split (hand-built ONNX models) move values
//     exactly for any dtype: NaN appears only where it was.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "jobflow/jobflow.h"
#include "jobflow/onnx.h"
#include "jobflow/primitive.h"
#include "onnx/onnx_util.h"
#include "onnx/registry.h"
#include "onnx_test_util.h"
#include "ops_internal.h"

namespace {
using namespace onnx_test;

// ------------------------------------------------------------ activations

TEST_F(OnnxOps, ActivationsFloat32RoundTrip) {
  const Tensor x = specials({2, 3, 4, 5}, 1);
  const Tensor slope = Tensor::from<float>({3, 1, 1}, {0.25f, -0.5f, 0.1f});
  auto job = define("acts32", {x, slope}, [](const Blobs& v) {
    const Blob x = v[0];
    return Blobs{flow::nn::leaky_relu(x),                   // alpha 0.01: not exact in float32
                 flow::nn::leaky_relu(x, 0.25),
                 flow::nn::elu(x, 0.5),
                 flow::nn::selu(x),                         // OneFlow's double defaults
                 flow::nn::softplus(x),
                 flow::nn::softsign(x),
                 flow::nn::hard_sigmoid(x),                 // 0.2, 0.5
                 flow::nn::hard_sigmoid(x, 0.375, -0.25),
                 flow::nn::prelu(x, v[1]),
                 flow::math::sigmoid(x),
                 flow::math::tanh(x)};
  });
  std::shared_ptr<flow::CompiledJob> back;
  const auto m = round_trip(*job, {x, slope}, &back);
  const auto ops = onnx_ops(m);
  for (const char* op : {"LeakyRelu", "Elu", "Selu", "Softplus", "Softsign", "HardSigmoid", "PRelu"})
    EXPECT_TRUE(ops.count(op)) << op;
  EXPECT_EQ(ops.count("LeakyRelu"), 2u);
  EXPECT_EQ(ops.count("HardSigmoid"), 2u);
  expect_same_ops(*job, *back,
                  {"leaky_relu", "elu", "selu", "softplus", "softsign", "hard_sigmoid", "prelu", "sigmoid", "tanh"},
                  /*as_float=*/true);
}

TEST_F(OnnxOps, ActivationsFloat64RoundTrip) {
  const Tensor x = specials<double>({3, 7}, 2);
  auto job = define("acts64", {x}, [](const Blobs& v) {
    const Blob x = v[0];
    return Blobs{flow::nn::leaky_relu(x, 0.125),            // exact as a float32: LeakyRelu
                 flow::nn::leaky_relu(x),                   // 0.01: PRelu with a float64 slope
                 flow::nn::elu(x, 1.5),
                 flow::nn::selu(x, 1.5, 0.75),
                 flow::nn::hard_sigmoid(x, 0.25, 0.5),      // HardSigmoid
                 flow::nn::hard_sigmoid(x),                 // 0.2: Mul, Add, Clip in float64
                 flow::nn::softplus(x),
                 flow::nn::softsign(x)};
  });
  std::shared_ptr<flow::CompiledJob> back;
  const auto m = round_trip(*job, {x}, &back);
  const auto ops = onnx_ops(m);
  EXPECT_EQ(ops.count("LeakyRelu"), 1u);
  EXPECT_EQ(ops.count("PRelu"), 1u);
  EXPECT_EQ(ops.count("HardSigmoid"), 1u);
  EXPECT_EQ(ops.count("Clip"), 1u);
  expect_same_ops(*job, *back, {"elu", "selu", "softplus", "softsign"});
}

TEST_F(OnnxOps, Float64ParameterThatNoOnnxFormHoldsIsNamed) {
  // selu's default alpha/gamma are not float32 values: a float64 job cannot
  // be written without changing its results.
  auto job = define("selu64", {specials<double>({4}, 3)}, [](const Blobs& v) {
    return Blobs{flow::nn::selu(v[0], 1.6732632423543772848170429916717, 1.0, "the_selu")};
  });
  const fs::path d = tmp_dir("selu64");
  try {
    flow::onnx::save(*job, (d / "s.onnx").string());
    FAIL() << "saved a float64 selu whose alpha is not a float32";
  } catch (const flow::Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("the_selu"), std::string::npos) << w;
    EXPECT_NE(w.find("alpha"), std::string::npos) << w;
  }
  EXPECT_FALSE(fs::exists(d / "s.onnx"));
  fs::remove_all(d);
}

TEST_F(OnnxOps, ClipRoundTrip) {
  const Tensor f = specials({5, 6}, 4);
  const Tensor d = specials<double>({5, 6}, 5);
  const Tensor i32 = ints<int32_t>({5, 6}, 6, -100, 100);
  const Tensor i8 = ints<int8_t>({5, 6}, 7, -128, 127);
  const Tensor u8 = ints<uint8_t>({5, 6}, 8, 0, 255);
  const Tensor i64 = ints<int64_t>({5, 6}, 9, -1000, 1000);
  auto job = define("clips", {f, d, i32, i8, u8, i64}, [](const Blobs& v) {
    return Blobs{flow::clip(v[0], -0.5, 0.75),
                 flow::clip(v[0], std::nullopt, 0.1),      // 0.1 rounds to a float32 the same way
                 flow::clip(v[0], 1.0),                    // no max
                 flow::clip(v[0], 2.0, -1.0),              // min > max: max everywhere (NaN stays)
                 flow::clip(v[1], 0.1, 0.7),               // float64 bounds stay exact
                 flow::clip(v[2], -2.5, 1e10),             // rounded inwards, saturated
                 flow::clip(v[3], -300.0, 7.9),
                 flow::clip(v[4], -5.0, 200.5),
                 flow::clip(v[5], -1e300, 3.0),
                 flow::clip(v[2])};                        // no bounds
  });
  std::shared_ptr<flow::CompiledJob> back;
  const auto m = round_trip(*job, {f, d, i32, i8, u8, i64}, &back);
  EXPECT_EQ(onnx_ops(m).count("Clip"), 10u);
  for (auto& n : m.graph().node())
    if (n.op_type() == "Clip" && n.name().empty()) ADD_FAILURE() << "unnamed Clip";
  int inputs = 0;
  for (auto& n : m.graph().node())
    if (n.op_type() == "Clip") inputs += n.input_size();
  EXPECT_EQ(inputs, 10 + 9 + 8) << "absent bounds are absent inputs";
}

TEST_F(OnnxOps, PowMinimumMaximumRoundTrip) {
  const Tensor a = specials({3, 4}, 10), b = specials({4}, 11);
  const Tensor ai = ints<int32_t>({3, 4}, 12, -9, 9), bi = ints<int32_t>({3, 1}, 13, -9, 9);
  const Tensor au = ints<uint8_t>({3, 4}, 14, 0, 255), bu = ints<uint8_t>({4}, 15, 0, 255);
  auto job = define("binaries", {a, b, ai, bi, au, bu}, [](const Blobs& v) {
    return Blobs{flow::pow(flow::clip(v[0], 0.0), v[1]), flow::pow(v[0], v[0]),
                 flow::minimum(v[0], v[1]),              flow::maximum(v[1], v[0]),
                 flow::minimum(v[2], v[3]),              flow::maximum(v[2], v[3]),
                 flow::minimum(v[4], v[5]),              flow::maximum(v[4], v[5])};
  });
  std::shared_ptr<flow::CompiledJob> back;
  const auto m = round_trip(*job, {a, b, ai, bi, au, bu}, &back);
  const auto ops = onnx_ops(m);
  EXPECT_EQ(ops.count("Pow"), 2u);
  EXPECT_EQ(ops.count("Min"), 3u);
  EXPECT_EQ(ops.count("Max"), 3u);
  expect_same_ops(*job, *back, {"pow", "minimum", "maximum"});
}

// ------------------------------------------------------------ indexing

TEST_F(OnnxOps, GatherRoundTrip) {
  const Tensor x = specials({4, 5, 3}, 20);
  const Tensor xi = ints<int64_t>({6, 2}, 21, -1000000, 1000000);
  const Tensor i64 = Tensor::from<int64_t>({2, 3}, {0, -1, 4, 2, -5, 1});
  const Tensor i32 = Tensor::from<int32_t>({4}, {3, 0, -4, 3});
  const Tensor i32b = Tensor::from<int32_t>({4}, {2, 0, -3, 1});
  auto job = define("gathers", {x, xi, i64, i32, i32b}, [](const Blobs& v) {
    return Blobs{flow::gather(v[0], v[2], 1), flow::gather(v[0], v[3], 0), flow::gather(v[1], v[3], -2),
                 flow::gather(v[0], v[4], -1), flow::gather(v[1], v[4], 0)};
  });
  std::shared_ptr<flow::CompiledJob> back;
  const auto m = round_trip(*job, {x, xi, i64, i32, i32b}, &back);
  EXPECT_EQ(onnx_ops(m).count("Gather"), 5u);
  expect_same_ops(*job, *back, {"gather"});
}

// ------------------------------------------------------------ detection

TEST_F(OnnxOps, DetectionOpsRoundTrip) {
  const Tensor x = Tensor::from<float>({2, 4}, {3, 1, 4, 1, 5, 9, 2, 6});
  const Tensor img = Tensor::from<float>({1, 1, 4, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  const Tensor boxes = Tensor::from<float>({1, 3, 4}, {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 10, 1, 11});
  const Tensor scores = Tensor::from<float>({1, 1, 3}, {0.9f, 0.8f, 0.7f});
  const Tensor k = Tensor::from<int64_t>({1}, {3});
  auto job = define("detect_ops", {x, img, boxes, scores, k}, [](const Blobs& v) {
    const std::vector<Blob> tk = flow::top_k(v[0], 2, 1);
    return Blobs{tk[0], tk[1], flow::top_k(v[0], v[4], 1, false)[0], flow::reduce_prod(v[0], {1}),
                 flow::gather_nd(v[0], flow::constant(Tensor::from<int64_t>({2, 2}, {1, 2, 0, 3}))),
                 flow::scatter_elements(v[0], tk[1], tk[0], 1, "add"),
                 flow::roi_align(v[1], flow::constant(Tensor::from<float>({1, 4}, {0, 0, 2, 2})),
                                 flow::constant(Tensor::from<int64_t>({1}, {0})), 2, 2, 2, 1.0, "avg", false),
                 flow::non_max_suppression(v[2], v[3], flow::constant(Tensor::from<int64_t>({1}, {10})),
                                           flow::constant(Tensor::from<float>({1}, {0.5f})))};
  });
  std::shared_ptr<flow::CompiledJob> back;
  const auto m = round_trip(*job, {x, img, boxes, scores, k}, &back);
  const auto ops = onnx_ops(m);
  for (const char* op : {"TopK", "ReduceProd", "GatherND", "ScatterElements", "RoiAlign", "NonMaxSuppression"})
    EXPECT_TRUE(ops.count(op)) << op;
  expect_same_ops(*job, *back, {"top_k", "reduce_prod", "gather_nd", "scatter_elements", "roi_align", "non_max_suppression"});
}

// ------------------------------------------------------------ ops of ONNX's node tests

TEST_F(OnnxOps, ImportedOpsRoundTrip) {
  const Tensor x = Tensor::from<float>({2, 3}, {3, 1, 4, 1, 5, 9});
  const Tensor sq = Tensor::from<float>({2, 2, 2}, {1, 2, 3, 4, 2, 0, 1, 5});
  const Tensor img = Tensor::from<float>({1, 1, 2, 3}, {0, 1, 2, 3, 4, 5});
  const Tensor grid = Tensor::from<float>({1, 2, 2, 2}, {-1, -1, 0.3f, 0.2f, 1, 1, -0.7f, 0.9f});
  const Tensor axes = Tensor::from<int64_t>({1}, {1});
  auto job = define("imported_ops", {x, sq, img, grid, axes}, [](const Blobs& v) {
    const flow::UniqueResult u = flow::unique(v[0], 1, false);
    return Blobs{flow::gather_elements(v[0], flow::constant(Tensor::from<int64_t>({2, 2}, {2, 0, 1, 1})), 1),
                 flow::scatter_nd(v[0], flow::constant(Tensor::from<int64_t>({1, 2}, {1, 2})),
                                  flow::constant(Tensor::from<float>({1}, {7})), "add"),
                 flow::math::cumsum(v[0], 1, true, true),
                 flow::einsum("ij,kj->ik", {v[0], v[0]}),
                 flow::math::det(v[1]),
                 flow::nn::grid_sample(v[2], v[3], "bicubic", "reflection", false),
                 u.y, u.inverse_indices,
                 flow::unique(v[0]).counts,
                 flow::reduce_sum_at(v[0], v[4], false)};
  });
  std::shared_ptr<flow::CompiledJob> back;
  const auto m = round_trip(*job, {x, sq, img, grid, axes}, &back);
  const auto ops = onnx_ops(m);
  for (const char* op : {"GatherElements", "ScatterND", "CumSum", "Einsum", "Det", "GridSample", "Unique", "ReduceSum"})
    EXPECT_TRUE(ops.count(op)) << op;
  expect_same_ops(*job, *back, {"gather_elements", "scatter_nd", "cumsum", "einsum", "det", "grid_sample", "unique",
                                "reduce_sum_axes"});
}

TEST_F(OnnxOps, IfElseRoundTrip) {
  // Branches of different sizes: the loaded job's If runs the branch saved
  // as its subgraph.
  auto twice = flow::global_function(flow::Predict, flow::function_config().name("twice"),
                                     {flow::Numpy::Placeholder({3}, flow::Float, "x")},
                                     [](Blob x) -> flow::Numpy { return flow::mul_scalar(x, 2.0); })
                   .compiled();
  auto first = flow::global_function(flow::Predict, flow::function_config().name("first"),
                                     {flow::Numpy::Placeholder({3}, flow::Float, "x")},
                                     [](Blob x) -> flow::Numpy { return flow::slice(x, {0}, {1}); })
                   .compiled();
  const Tensor x = Tensor::from<float>({3}, {1, 2, 3});
  for (float c : {1.0f, -1.0f}) {
    const Tensor cv = Tensor::from<float>({}, {c});
    auto job = define(c > 0 ? "if_then" : "if_else", {x, cv}, [&](const Blobs& v) {
      Blob cond = flow::greater(v[1], flow::constant(Tensor::from<float>({}, {0.0f})));
      return Blobs{flow::if_else(cond, {v[0]}, twice, first)[0]};
    });
    std::shared_ptr<flow::CompiledJob> back;
    const auto m = round_trip(*job, {x, cv}, &back);
    EXPECT_EQ(onnx_ops(m).count("If"), 1u);
    const Tensor y = back->run({x, cv})[0];
    EXPECT_EQ(y.numel(), c > 0 ? 3 : 1);
  }
}

TEST_F(OnnxOps, StridedSliceRoundTrip) {
  const Tensor x = specials({6, 7, 3}, 30);
  const Tensor xi = ints<int64_t>({6, 7}, 31, -50, 50);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  auto job = define("slices", {x, xi}, [](const Blobs& v) {
    return Blobs{flow::slice(v[0], {1, -1}, {kMax, 0}, {0, 1}, {2, -2}),
                 flow::slice(v[0], {-100}, {100}, {-1}),
                 flow::slice(v[1], {5, 0}, {kMin, 7}, {0, 1}, {-3, 3}),
                 flow::slice(v[1], {2}, {2})};  // empty
  });
  std::shared_ptr<flow::CompiledJob> back;
  const auto m = round_trip(*job, {x, xi}, &back);
  EXPECT_EQ(onnx_ops(m).count("Slice"), 4u);
  for (auto& n : m.graph().node())
    if (n.op_type() == "Slice") {
      EXPECT_EQ(n.input_size(), 5) << "starts, ends, axes and steps";
    }
  expect_same_ops(*job, *back, {"strided_slice"});
}

TEST_F(OnnxOps, SplitRoundTrip) {
  const Tensor x = specials({4, 6}, 40);
  const Tensor xi = ints<int32_t>({4, 6}, 41, -1000, 1000);
  auto job = define("splits", {x, xi}, [](const Blobs& v) {
    auto a = flow::split(v[0], {1, 0, 5}, -1);
    auto b = flow::split(v[1], {3, 1}, 0);
    auto c = flow::split(v[1], {2, 2, 2}, 1);  // only the middle part is used
    return Blobs{a[0], a[1], a[2], b[1], b[0], flow::add(c[1], c[1])};
  });
  std::shared_ptr<flow::CompiledJob> back;
  const auto m = round_trip(*job, {x, xi}, &back);
  EXPECT_EQ(onnx_ops(m).count("Split"), 3u);
  for (auto& n : m.graph().node())
    if (n.op_type() == "Split") {
      EXPECT_TRUE(n.output_size() == 3 || n.output_size() == 2);
    }
  expect_same_ops(*job, *back, {"split"});
}

TEST_F(OnnxOps, PadRoundTrip) {
  const Tensor x = specials({3, 4}, 50);
  const Tensor xd = specials<double>({2, 3, 2}, 51);
  const Tensor xi = ints<int32_t>({3, 4}, 52, -1000, 1000);
  const Tensor xu = ints<uint8_t>({5}, 53, 0, 255);
  auto job = define("pads", {x, xd, xi, xu}, [](const Blobs& v) {
    return Blobs{flow::pad(v[0], {1, 2, 0, 3}),                       // zeros
                 flow::pad(v[0], {0, -1, 2, 1}, "constant", 2.5),     // crop and pad
                 flow::pad(v[0], {1, 1, 1, 1}, "constant", -0.0),     // -0 is not the default
                 flow::pad(v[0], {2, 5, 2, 7}, "reflect"),            // pads longer than the axis
                 flow::pad(v[0], {0, 3, 4, 0}, "edge"),
                 flow::pad(v[1], {1, 0, 1, 0, 2, 1}, "constant", 0.1),
                 flow::pad(v[1], {1, 1, 1, 1, 1, 1}, "reflect"),
                 flow::pad(v[2], {2, 2, 2, 2}, "reflect"),
                 flow::pad(v[2], {1, 0, 0, 3}, "edge"),
                 flow::pad(v[2], {1, 1, -1, 1}, "constant", -7.0),
                 flow::pad(v[3], {3, 2}, "constant", 200.0),
                 flow::pad(v[3], {0, 0})};
  });
  std::shared_ptr<flow::CompiledJob> back;
  const auto m = round_trip(*job, {x, xd, xi, xu}, &back);
  EXPECT_EQ(onnx_ops(m).count("Pad"), 12u);
  int with_value = 0;
  for (auto& n : m.graph().node())
    if (n.op_type() == "Pad") with_value += n.input_size() == 3;
  EXPECT_EQ(with_value, 5) << "constant_value only where it is not +0";
  expect_same_ops(*job, *back, {"pad"});
}

TEST_F(OnnxOps, ConvTransposeRoundTrip) {
  std::mt19937 g(60);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  auto rnd = [&](const Shape& s) {
    Tensor t(s, flow::Float32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(g);
    return t;
  };
  const Tensor x = rnd({2, 4, 5, 6}), w = rnd({4, 3, 3, 2}), b = rnd({6});
  auto job = define("convt", {x, w, b}, [](const Blobs& v) {
    // groups 2: C_out = 2 * 3; bias_add along the channels folds into B.
    Blob y = flow::nn::conv_transpose2d(v[0], v[1], {2, 3}, {1, 0, 2, 1}, {2, 1}, {1, 2}, 2);
    Blob yb = flow::nn::bias_add(y, v[2], 1);
    Blob z = flow::nn::conv_transpose2d(v[0], v[1], 1, {0, 0, 0, 0}, 1, 0, 2);  // no bias
    return Blobs{yb, z, flow::nn::conv_transpose2d(v[0], v[1], 2, {1, 1, 1, 1}, 1, 1, 2)};
  });
  std::shared_ptr<flow::CompiledJob> back;
  const auto m = round_trip(*job, {x, w, b}, &back);
  int with_bias = 0, n_ct = 0;
  for (auto& n : m.graph().node()) {
    if (n.op_type() != "ConvTranspose") continue;
    ++n_ct;
    with_bias += n.input_size() == 3;
    std::set<std::string> attrs;
    for (auto& a : n.attribute()) attrs.insert(a.name());
    EXPECT_EQ(attrs, (std::set<std::string>{"kernel_shape", "strides", "pads", "dilations", "output_padding", "group"}));
  }
  EXPECT_EQ(n_ct, 3);
  EXPECT_EQ(with_bias, 1);
  EXPECT_EQ(onnx_ops(m).count("Add"), 0u) << "the bias_add is folded into ConvTranspose";
  expect_same_ops(*job, *back, {"conv_transpose2d", "bias_add"});
}

TEST_F(OnnxOps, SavedTwiceIsTheSameFile) {
  // load(save(job)) saves to the same nodes: the ops map back one to one.
  const Tensor x = specials({2, 3, 4}, 70);
  auto job = define("twice", {x}, [](const Blobs& v) {
    auto parts = flow::split(flow::pad(v[0], {0, 1, 1, 0, 0, 2}, "reflect"), {1, 3}, 1);
    return Blobs{flow::nn::elu(flow::slice(parts[1], {0}, {-1}, {2}), 0.5),
                 flow::clip(flow::nn::softplus(parts[0]), -1.0, 2.0)};
  });
  const fs::path d = tmp_dir("twice");
  flow::onnx::save(*job, (d / "a.onnx").string());
  auto back = flow::onnx::load((d / "a.onnx").string(), {});
  flow::onnx::save(*back, (d / "b.onnx").string());
  const auto a = read_model(d / "a.onnx"), b = read_model(d / "b.onnx");
  ASSERT_EQ(a.graph().node_size(), b.graph().node_size());
  for (int i = 0; i < a.graph().node_size(); ++i) {
    EXPECT_EQ(a.graph().node(i).op_type(), b.graph().node(i).op_type()) << i;
    EXPECT_EQ(a.graph().node(i).input_size(), b.graph().node(i).input_size()) << i;
    EXPECT_EQ(a.graph().node(i).attribute_size(), b.graph().node(i).attribute_size()) << i;
  }
  fs::remove_all(d);
}

TEST_F(OnnxOps, Opset18FileLoadsTheSame) {
  // From opset 18 every Reduce* takes its axes as an input.
  const Tensor x = specials({3, 4, 5}, 80);
  auto job = define("opset18", {x}, [](const Blobs& v) {
    auto parts = flow::split(v[0], {2, 3}, 2);
    return Blobs{flow::reduce_mean(parts[0], {1}), flow::reduce_max(parts[1], {0, 2}, true),
                 flow::reduce_sum(flow::pad(v[0], {0, 1, 0, 0, 0, 1}, "edge"), {-1})};
  });
  const fs::path d = tmp_dir("opset18");
  flow::onnx::SaveOptions so;
  so.opset = 18;
  flow::onnx::save(*job, (d / "j.onnx").string(), so);
  const auto m = read_model(d / "j.onnx");
  EXPECT_EQ(m.opset_import(0).version(), 18);
  for (auto& n : m.graph().node())
    if (n.op_type().rfind("Reduce", 0) == 0) {
      EXPECT_EQ(n.input_size(), 2) << n.op_type();
      for (auto& a : n.attribute()) EXPECT_NE(a.name(), "axes") << n.op_type();
    }
  auto back = flow::onnx::load((d / "j.onnx").string(), {});
  const auto want = job->run({x}), got = back->run({x});
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(want[i].equal(got[i])) << i;
  fs::remove_all(d);
}

// ------------------------------------------------------------ Jobflow's own ops

// rsqrt, square, bias_add and equal_mask have no standard ONNX op: they are
// saved as nodes of the ai.jobflow domain (with model-local functions for
// other runtimes) and load back one to one.
TEST_F(OnnxOps, JobflowDomainOpsRoundTripOneToOne) {
  const Tensor x = specials({2, 3, 4}, 11);
  const Tensor b = Tensor::from<float>({4}, {0.5f, -1.0f, 2.0f, 0.0f});
  const Tensor c = Tensor::from<float>({3}, {1.0f, -2.0f, 0.25f});
  auto job = define("jobflow_ops", {x, b, c}, [](const Blobs& v) {
    return Blobs{flow::rsqrt(v[0]), flow::square(v[0]), flow::nn::bias_add(v[0], v[1], -1),
                 flow::nn::bias_add(v[0], v[2], 1), flow::internal::equal_mask(v[0], flow::nn::relu(v[0]))};
  });
  std::shared_ptr<flow::CompiledJob> back;
  const auto m = round_trip(*job, {x, b, c}, &back);
  std::multiset<std::string> jobflow_nodes;
  for (auto& n : m.graph().node())
    if (n.domain() == "ai.jobflow") jobflow_nodes.insert(n.op_type());
  EXPECT_EQ(jobflow_nodes, (std::multiset<std::string>{"BiasAdd", "BiasAdd", "EqualMask", "Rsqrt", "Square"}));
  bool declared = false;
  for (auto& o : m.opset_import()) declared |= o.domain() == "ai.jobflow" && o.version() == 1;
  EXPECT_TRUE(declared) << "no opset_import for ai.jobflow";
  // One model-local function per op, in standard ops.
  std::set<std::string> functions;
  for (auto& f : m.functions()) {
    EXPECT_EQ(f.domain(), "ai.jobflow");
    EXPECT_TRUE(functions.insert(f.name()).second) << f.name() << " defined twice";
    for (auto& n : f.node()) EXPECT_EQ(n.domain(), "") << f.name() << ": " << n.op_type();
  }
  EXPECT_EQ(functions, (std::set<std::string>{"BiasAdd", "EqualMask", "Rsqrt", "Square"}));
  expect_same_ops(*job, *back, {"rsqrt", "square", "bias_add", "equal_mask"});
  // The standard forms these ops had before are gone.
  for (auto& n : m.graph().node()) EXPECT_NE(n.op_type(), "Reciprocal");
}

// Files written before the ai.jobflow domain spelled these ops in standard
// ops (Sqrt + Reciprocal, Mul(x, x), Reshape + Add): they still load and
// compute the same values. (equal_mask's Equal + Cast never loaded.)
TEST_F(OnnxOps, StandardFormsOfJobflowOpsStillLoad) {
  const Tensor x = specials({2, 3, 4}, 12);
  const Tensor c = Tensor::from<float>({3}, {1.0f, -2.0f, 0.25f});
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("old");
  auto* vi = g->add_input();
  vi->set_name("x");
  vi->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  for (int64_t d : x.shape()) vi->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  u::tensor_to_proto(c, "c", g->add_initializer());
  u::tensor_to_proto(Tensor::from<int64_t>({2}, {-1, 1}), "c_shape", g->add_initializer());
  auto node = [&](const char* type, std::vector<std::string> ins, const std::string& out) {
    auto* n = g->add_node();
    n->set_op_type(type);
    n->set_name(out);
    for (auto& i : ins) n->add_input(i);
    n->add_output(out);
    return n;
  };
  node("Sqrt", {"x"}, "s");
  node("Reciprocal", {"s"}, "rsqrt");
  node("Mul", {"x", "x"}, "square");
  node("Reshape", {"c", "c_shape"}, "c2");
  node("Add", {"x", "c2"}, "bias_add");
  for (const char* o : {"rsqrt", "square", "bias_add"}) g->add_output()->set_name(o);
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  const auto got = flow::onnx::load_bytes(bytes, {}, "old")->run({x});
  auto want_job = define("engine_ops", {x, c}, [](const Blobs& v) {
    return Blobs{flow::rsqrt(v[0]), flow::square(v[0]), flow::nn::bias_add(v[0], v[1], 1)};
  });
  const auto want = want_job->run({x, c});
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(got[i].equal(want[i])) << "output " << i;
}

// A train job with batch normalization layers (with and without scale and
// offset) continues identically from its file: batch_norm_train maps to
// BatchNormalization in training mode and back, on the same variables.
TEST_F(OnnxOps, BatchNormLayersTrainRoundTrip) {
  auto define_train = [] {
    return flow::global_function(
        flow::Train, flow::function_config().name("bn_train"),
        {flow::Numpy::Placeholder({4, 3, 2, 2}, flow::Float, "x"), flow::Numpy::Placeholder({4, 3, 2, 2}, flow::Float, "t")},
        [](Blob x, Blob t) -> flow::Numpy {
          Blob h = flow::layers::batch_normalization(x, {.momentum = 0.5, .name = "bn1"});
          h = flow::layers::batch_normalization(h, {.momentum = 0.75, .center = false, .scale = false, .name = "bn2"});
          Blob loss = flow::reduce_mean(flow::square(flow::sub(h, t)));
          flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.1}), 0).minimize(loss);
          return loss;
        });
  };
  auto job = define_train();
  flow::CheckPoint().init();
  auto batch = [](uint32_t i) { return std::vector<Tensor>{specials({4, 3, 2, 2}, 100 + i), specials({4, 3, 2, 2}, 200 + i)}; };
  auto finite = [](std::vector<Tensor> v) {  // training on NaN/Inf would compare NaN losses
    for (auto& t : v)
      for (int64_t i = 0; i < t.numel(); ++i)
        if (!std::isfinite(t.data<float>()[i])) t.data<float>()[i] = 0.5f;
    return v;
  };
  for (uint32_t i = 0; i < 2; ++i) job.compiled()->run(finite(batch(i)));
  const fs::path d = tmp_dir("bn_train");
  flow::onnx::save(*job.compiled(), (d / "t.onnx").string());
  std::map<std::string, Tensor> at_save;
  for (auto& n : flow::session::variable_names()) at_save[n] = flow::session::variable(n).clone();
  std::vector<Tensor> losses;
  for (uint32_t i = 2; i < 4; ++i) losses.push_back(job.compiled()->run(finite(batch(i)))[0]);
  job.compiled()->sync();
  std::map<std::string, Tensor> after;
  for (auto& n : flow::session::variable_names()) after[n] = flow::session::variable(n).clone();
  EXPECT_TRUE(after.count("bn2-moving_mean"));
  EXPECT_FALSE(after.count("bn2-gamma"));

  for (auto& [n, v] : at_save) flow::session::assign(n, v);
  auto loaded = flow::onnx::load((d / "t.onnx").string(), {});
  for (uint32_t i = 2; i < 4; ++i)
    EXPECT_TRUE(loaded->run(finite(batch(i)))[0].equal(losses[i - 2])) << "step " << i;
  loaded->sync();
  for (auto& [n, v] : after) EXPECT_TRUE(flow::session::variable(n).equal(v)) << n;
  fs::remove_all(d);
}

// ------------------------------------------------------------ importer: Pad, Split

// numpy.pad of a 2-D tensor (pads: begin0, begin1, end0, end1; negative ones
// crop), by element copies: the bits of every value are kept.
template <class T>
Tensor ref_pad(const Tensor& x, const std::vector<int64_t>& p, const std::string& mode, T value) {
  const int64_t R = x.shape()[0], C = x.shape()[1];
  const int64_t OR = R + p[0] + p[2], OC = C + p[1] + p[3];
  Tensor y = Tensor::from<T>({OR, OC}, std::vector<T>(static_cast<size_t>(OR * OC), value));
  auto src = [&](int64_t s, int64_t n) -> int64_t {
    if (s >= 0 && s < n) return s;
    if (mode == "constant") return -1;
    if (mode == "edge" || n == 1) return s < 0 ? 0 : n - 1;
    const int64_t period = 2 * (n - 1);
    int64_t t = ((s % period) + period) % period;
    return t < n ? t : period - t;
  };
  const T* xv = static_cast<const T*>(x.raw());
  T* yv = static_cast<T*>(y.raw());
  for (int64_t i = 0; i < OR; ++i)
    for (int64_t j = 0; j < OC; ++j) {
      const int64_t si = src(i - p[0], R), sj = src(j - p[1], C);
      if (si >= 0 && sj >= 0) yv[i * OC + j] = xv[si * C + sj];
    }
  return y;
}

int64_t count_nan(const Tensor& t) {
  int64_t n = 0;
  for (int64_t i = 0; i < t.numel(); ++i) n += std::isnan(t.at(i));
  return n;
}

TEST_F(OnnxOps, ImportedPadIsExactForEveryMode) {
  const Tensor xf = Tensor::from<float>({3, 4}, {1.5f, kInf, kNaN, -kInf, -0.0f, 2.f, 3.f, kNaN, 4.f, -5.f, 6.f, 7.f});
  const Tensor xi = Tensor::from<int32_t>({3, 4}, {1, 2, 3, 4, 5, -6, 7, 8, 2147483647, -2147483647 - 1, 11, 12});
  const std::vector<std::vector<int64_t>> pad_sets = {{1, 2, 2, 1}, {0, 3, 0, 3}, {2, 0, 1, 5}, {-1, 1, 0, -2}};
  for (const std::string mode : {"constant", "reflect", "edge"}) {
    for (const auto& pads : pad_sets) {
      for (int opset : {2, 11, 13, 18}) {
        for (const Tensor& x : {xf, xi}) {
          SCOPED_TRACE(mode + " opset " + std::to_string(opset) + " " + flow::dtype_name(x.dtype()) + " pads " +
                       std::to_string(pads[0]) + "," + std::to_string(pads[1]) + "," + std::to_string(pads[2]) + "," +
                       std::to_string(pads[3]));
          flow::session::reset();
          const bool fl = x.dtype() == flow::Float32;
          Model M(opset);
          M.input("x", x);
          ::onnx::NodeProto* n;
          if (opset < 11) {
            n = M.node("Pad", {"x"}, {"y"});
            set_ints(n, "pads", pads);
            if (mode == "constant") set_float(n, "value", fl ? 2.5f : 9.f);
          } else {
            // From opset 18 with axes (-1, 0): pads per listed axis, begins then ends.
            M.init("pads", opset >= 18 ? Tensor::from<int64_t>({4}, {pads[1], pads[0], pads[3], pads[2]})
                                       : Tensor::from<int64_t>({4}, pads));
            std::vector<std::string> ins{"x", "pads", ""};
            if (mode == "constant") {
              M.init("value", fl ? Tensor::scalar<float>(2.5f) : Tensor::scalar<int32_t>(9));
              ins[2] = "value";
            }
            if (opset >= 18) {
              M.init("axes", Tensor::from<int64_t>({2}, {-1, 0}));
              ins.push_back("axes");
            }
            while (ins.back().empty()) ins.pop_back();
            n = M.node("Pad", ins, {"y"});
          }
          if (mode != "constant" || opset % 2) set_string(n, "mode", mode);
          const Tensor y = M.run(x).at(0);
          const Tensor want = fl ? ref_pad<float>(x, pads, mode, 2.5f) : ref_pad<int32_t>(x, pads, mode, 9);
          EXPECT_TRUE(y.equal(want)) << "got  " << y.str(100) << "\nwant " << want.str(100);
          if (fl) {
            EXPECT_EQ(count_nan(y), count_nan(want));
          }
        }
      }
    }
  }
}

TEST_F(OnnxOps, ImportedPadKeepsEveryDtype) {
  // int64 beyond 2^53, uint8, int8 and float64 move through reflect/edge
  // untouched (the old matmul form was float-only).
  const Tensor x64 = Tensor::from<int64_t>({2, 3}, {(1LL << 62) + 1, -((1LL << 60) + 3), 5, 7, 9, 11});
  const Tensor xu8 = Tensor::from<uint8_t>({2, 3}, {0, 255, 128, 1, 2, 3});
  const Tensor xi8 = Tensor::from<int8_t>({2, 3}, {-128, 127, 0, 1, -1, 5});
  const Tensor xd = Tensor::from<double>({2, 3}, {1e300, -0.0, std::nan(""), -1e-300, HUGE_VAL, 3.0});
  const std::vector<int64_t> pads{1, 2, 1, 2};
  for (const std::string mode : {"reflect", "edge"})
    for (const Tensor& x : {x64, xu8, xi8, xd}) {
      SCOPED_TRACE(mode + " " + flow::dtype_name(x.dtype()));
      flow::session::reset();
      Model M(13);
      M.input("x", x);
      M.init("pads", Tensor::from<int64_t>({4}, pads));
      set_string(M.node("Pad", {"x", "pads"}, {"y"}), "mode", mode);
      const Tensor y = M.run(x).at(0);
      Tensor want;
      switch (x.dtype()) {
        case flow::DType::Int64: want = ref_pad<int64_t>(x, pads, mode, 0); break;
        case flow::DType::UInt8: want = ref_pad<uint8_t>(x, pads, mode, 0); break;
        case flow::DType::Int8: want = ref_pad<int8_t>(x, pads, mode, 0); break;
        default: want = ref_pad<double>(x, pads, mode, 0.0); break;
      }
      EXPECT_TRUE(y.equal(want)) << "got  " << y.str(100) << "\nwant " << want.str(100);
    }
}

// Columns [c0, c0 + n) of a 2-D tensor, by element copies.
template <class T>
Tensor ref_columns(const Tensor& x, int64_t c0, int64_t n) {
  const int64_t R = x.shape()[0], C = x.shape()[1];
  std::vector<T> v;
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = c0; j < c0 + n; ++j) v.push_back(static_cast<const T*>(x.raw())[i * C + j]);
  return Tensor::from<T>({R, n}, v);
}

TEST_F(OnnxOps, ImportedSplitIsExact) {
  const Tensor xf = Tensor::from<float>({2, 5}, {kNaN, 1.f, kInf, -0.0f, 2.f, -kInf, kNaN, 3.f, 4.f, 1e-40f});
  const Tensor xi = Tensor::from<int32_t>({2, 5}, {1, -2, 2147483647, 4, 5, -2147483647 - 1, 7, 8, 9, 10});
  struct Case {
    int opset;
    std::vector<int64_t> sizes;  // empty: equal parts (num_outputs from opset 18)
    int outputs;
    std::vector<int64_t> want;
  };
  const Case cases[] = {{11, {2, 3}, 2, {2, 3}},       {13, {1, 0, 4}, 3, {1, 0, 4}}, {13, {5}, 1, {5}},
                        {18, {3, 2}, 2, {3, 2}},       {18, {}, 2, {3, 2}},           {13, {}, 1, {5}},
                        {11, {1, 1, 1, 1, 1}, 5, {1, 1, 1, 1, 1}}};
  for (const Case& c : cases)
    for (const Tensor& x : {xf, xi}) {
      SCOPED_TRACE("opset " + std::to_string(c.opset) + " " + flow::dtype_name(x.dtype()) + " parts " +
                   std::to_string(c.want.size()));
      flow::session::reset();
      Model M(c.opset);
      M.input("x", x);
      std::vector<std::string> ins{"x"}, outs;
      for (int i = 0; i < c.outputs; ++i) outs.push_back(std::string("y").append(std::to_string(i)));
      if (!c.sizes.empty() && c.opset >= 13) {
        M.init("split", Tensor::from<int64_t>({static_cast<int64_t>(c.sizes.size())}, c.sizes));
        ins.push_back("split");
      }
      auto* n = M.node("Split", ins, outs);
      set_int(n, "axis", -1);
      if (!c.sizes.empty() && c.opset < 13) set_ints(n, "split", c.sizes);
      if (c.sizes.empty() && c.opset >= 18) set_int(n, "num_outputs", c.outputs);
      const auto ys = M.run(x);
      ASSERT_EQ(ys.size(), c.want.size());
      int64_t at = 0, nans = 0;
      for (size_t i = 0; i < ys.size(); ++i) {
        const Tensor want = x.dtype() == flow::Float32 ? ref_columns<float>(x, at, c.want[i])
                                                       : ref_columns<int32_t>(x, at, c.want[i]);
        EXPECT_TRUE(ys[i].equal(want)) << "part " << i << ": got " << ys[i].str(20) << "\nwant " << want.str(20);
        at += c.want[i];
        if (x.dtype() == flow::Float32) nans += count_nan(ys[i]);
      }
      if (x.dtype() == flow::Float32) {
        EXPECT_EQ(nans, 2);
      }
    }
}

TEST_F(OnnxOps, ImportedSplitOfOneOutputOfSeveral) {
  // Unused outputs (empty names) are fine; the used one is exact.
  const Tensor x = Tensor::from<float>({4, 1}, {kNaN, kInf, -0.0f, 5.f});
  Model M(13);
  M.input("x", x);
  M.init("split", Tensor::from<int64_t>({2}, {1, 3}));
  auto* n = M.m.mutable_graph()->add_node();
  n->set_op_type("Split");
  n->add_input("x");
  n->add_input("split");
  n->add_output("");
  n->add_output("tail");
  M.m.mutable_graph()->add_output()->set_name("tail");
  const auto ys = M.run(x);
  ASSERT_EQ(ys.size(), 1u);
  EXPECT_TRUE(ys[0].equal(Tensor::from<float>({3, 1}, {kInf, -0.0f, 5.f}))) << ys[0].str();
}

TEST_F(OnnxOps, ImportedPadErrors) {
  const Tensor x = Tensor::from<float>({2, 2}, {1, 2, 3, 4});
  auto load_pad = [&](const std::vector<int64_t>& pads, const std::string& mode) {
    Model M(13);
    M.input("x", x);
    M.init("pads", Tensor::from<int64_t>({static_cast<int64_t>(pads.size())}, pads));
    set_string(M.node("Pad", {"x", "pads"}, {"y"}), "mode", mode);
    std::string bytes;
    M.m.SerializeToString(&bytes);
    return flow::onnx::load_bytes(bytes, {}, "pad_model");
  };
  EXPECT_THROW(load_pad({1, 1, 1}, "constant"), flow::Error);       // 3 values for rank 2
  EXPECT_THROW(load_pad({-3, 0, 0, 0}, "constant"), flow::Error);   // crops more than the axis has
  EXPECT_THROW(load_pad({1, 0, 0, 0}, "wrap"), flow::Error);
  EXPECT_THROW(load_pad({int64_t(1) << 62, 0, 0, 0}, "edge"), flow::Error);  // past max_tensor_bytes
  EXPECT_NO_THROW(load_pad({3, 3, 3, 3}, "reflect"));               // longer than the axis: numpy's reflect
}

// ------------------------------------------------------------ constant folding, the registry

// Constant nodes are folded with the engine's own kernels: int64 arithmetic
// is exact past 2^53, and a folded float op gives the bits the engine
// computes at run time.
TEST_F(OnnxOps, ConstantsFoldWithTheEnginesKernels) {
  const int64_t big = (int64_t(1) << 53) + 1;  // no double holds it
  const Tensor x = Tensor::from<float>({4}, {-3.5f, 0.1f, 1.0f, 20.25f});
  Model M(17);
  M.input("x", x);
  M.init("big", Tensor::from<int64_t>({1}, {big}));
  M.init("three", Tensor::from<int64_t>({1}, {3}));
  auto* k = M.m.mutable_graph()->add_node();
  k->set_op_type("Constant");
  k->add_output("kx");
  auto* v = k->add_attribute();
  v->set_name("value");
  v->set_type(::onnx::AttributeProto::TENSOR);
  u::tensor_to_proto(x, "", v->mutable_t());
  M.node("Mul", {"big", "three"}, {"product"});
  M.node("Exp", {"kx"}, {"folded_exp"});
  M.node("Exp", {"x"}, {"runtime_exp"});
  const auto ys = M.run(x);
  ASSERT_EQ(ys.size(), 3u);
  EXPECT_EQ(ys[0].data<int64_t>()[0], big * 3);
  EXPECT_TRUE(ys[1].equal(ys[2])) << ys[1].str() << " vs " << ys[2].str();
}

// Every forward op (what a job's body can contain) has an ONNX form; only
// the ops autodiff, the optimizers and the compiler add have none.
TEST(OnnxRegistry, EveryForwardOpHasAnExportRow) {
  using K = flow::OpKind;
  const std::set<K> no_form = {
      K::Placeholder, K::Variable,  // graph inputs and initializers
      K::ReluGrad, K::SigmoidGrad, K::TanhGrad,
      K::LeakyReluGrad, K::EluGrad, K::SeluGrad, K::SoftplusGrad, K::SoftsignGrad, K::HardSigmoidGrad, K::ClipGrad,
      K::LeakyReluGrad2, K::EluGrad2, K::SeluGrad2, K::SoftplusGrad2, K::SoftsignGrad2, K::HardSigmoidGrad2, K::ClipGrad2,
      K::PReluGradX, K::PReluGradSlope, K::PowGradBase, K::PowGradExponent, K::MinimumGradA, K::MinimumGradB,
      K::MaximumGradA, K::MaximumGradB, K::BiasGrad, K::SliceGrad, K::GatherGrad, K::GatherNDGrad, K::GatherElementsGrad, K::StridedSliceGrad, K::PadGrad,
      K::SoftmaxGrad, K::LogSoftmaxGrad, K::SparseSoftmaxCrossEntropyGrad, K::DropoutGrad, K::BatchNormalizationGrad,
      K::BatchNormTrainGrad, K::Conv2dBackwardData, K::Conv2dBackwardWeights, K::MaxPool2dGrad, K::AvgPool2dGrad,
      K::ConvTranspose2dGradInput, K::ConvTranspose2dGradWeight, K::ResizeGrad, K::SgdUpdate, K::AdamUpdate,
      K::Reorder,  // plans only
      // sequences: the exporter writes tensors only
      K::SequenceConstruct, K::SequenceInsert, K::SequenceAt, K::SequenceErase, K::SequenceLength,
      K::ConcatFromSequence, K::SplitToSequence, K::OptionalHasElement, K::OptionalGetElement,
      // strings likewise (tests/onnx/test_onnx_strings.cpp)
      K::StringNormalizer, K::StringFormat, K::StringParse, K::StringLookup};
  for (size_t i = 0; i < flow::kOpKindCount; ++i) {
    const auto k = static_cast<K>(i);
    EXPECT_EQ(flow::onnx::find_export(k) != nullptr, !no_form.count(k)) << flow::op_name(k);
  }
  // Jobflow's own ops import from their domain; "ai.onnx" is the standard one.
  for (const char* op : {"Rsqrt", "Square", "BiasAdd", "EqualMask", "GeluTanh"}) {
    EXPECT_NE(flow::onnx::find_import("ai.jobflow", op), nullptr) << op;
    EXPECT_EQ(flow::onnx::find_import("", op), nullptr) << op;
  }
  EXPECT_EQ(flow::onnx::find_import("ai.onnx", "Conv"), flow::onnx::find_import("", "Conv"));
  EXPECT_EQ(flow::onnx::find_import("com.example", "Conv"), nullptr);
}

}  // namespace
