// matmul and bias_add (engine/src/ops/linalg.cpp): forward values, gradient
// checks in float64 for every transpose combination, and the fused forms the
// compiler makes (matmul + bias + relu) against the unfused graph.
#include <gtest/gtest.h>

#include "compiler.h"
#include <jobflow/jobflow.h>

#include "op_test.h"

namespace flow = jobflow;
using namespace flow::testing;

class Linalg : public OpTest {};  // a fresh session per test

TEST_F(Linalg, MatmulValuesAllTransposes) {
  // a = [[1,2,3],[4,5,6]] (2x3), b = [[1,0],[0,1],[1,1]] (3x2)
  Tensor a = Tensor::from<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::from<float>({3, 2}, {1, 0, 0, 1, 1, 1});
  auto nn = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 3}), flow::Numpy::Placeholder({3, 2})},
                                  [](Blob x, Blob y) -> flow::Numpy { return flow::matmul(x, y); });
  EXPECT_EQ(nn(a, b).to_vector<float>(), (std::vector<float>{4, 5, 10, 11}));
  // a^T (3x2) x a (2x3) = 3x3 Gram matrix of columns
  auto tn = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 3})},
                                  [](Blob x) -> flow::Numpy { return flow::matmul(x, x, true, false); });
  EXPECT_EQ(tn(a).to_vector<float>(), (std::vector<float>{17, 22, 27, 22, 29, 36, 27, 36, 45}));
  // a x a^T = 2x2 Gram matrix of rows
  auto nt = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 3})},
                                  [](Blob x) -> flow::Numpy { return flow::matmul(x, x, false, true); });
  EXPECT_EQ(nt(a).to_vector<float>(), (std::vector<float>{14, 32, 32, 77}));
  // b^T (2x3) x a^T (3x2) = (a b)^T
  auto tt = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 3}), flow::Numpy::Placeholder({3, 2})},
                                  [](Blob x, Blob y) -> flow::Numpy { return flow::matmul(y, x, true, true); });
  EXPECT_EQ(tt(a, b).to_vector<float>(), (std::vector<float>{4, 10, 5, 11}));
}

TEST_F(Linalg, BatchedMatmul) {
  Tensor a = Tensor::from<double>({2, 1, 2}, {1, 2, 3, 4});
  Tensor b = Tensor::from<double>({2, 2, 1}, {1, 1, 2, 0});
  auto job = flow::global_function(flow::Predict,
                                   {flow::Numpy::Placeholder({2, 1, 2}, flow::Double), flow::Numpy::Placeholder({2, 2, 1}, flow::Double)},
                                   [](Blob x, Blob y) -> flow::Numpy { return flow::matmul(x, y); });
  Tensor c = job(a, b);
  EXPECT_EQ(c.shape(), (flow::Shape{2, 1, 1}));
  EXPECT_EQ(c.to_vector<double>(), (std::vector<double>{3, 6}));
}

TEST_F(Linalg, MatmulErrorsNameShapes) {
  try {
    flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 3}), flow::Numpy::Placeholder({2, 3})},
                          [](Blob x, Blob y) -> flow::Numpy { return flow::matmul(x, y, false, false); });
    FAIL() << "no error";
  } catch (const flow::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[matmul] inner dimensions differ: (2, 3) x (2, 3) (3 vs 2)"), std::string::npos)
        << e.what();
  }
}

TEST_F(Linalg, GradMatmulAllTransposes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const flow::Shape as = ta ? flow::Shape{4, 3} : flow::Shape{3, 4};
      const flow::Shape bs = tb ? flow::Shape{5, 4} : flow::Shape{4, 5};
      EXPECT_TRUE(gradcheck([ta, tb](const Blobs& x) { return flow::matmul(x[0], x[1], ta, tb); }, {as, bs}))
          << "transpose_a=" << ta << " transpose_b=" << tb;
    }
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::matmul(x[0], x[1]); }, {{2, 3, 4}, {2, 4, 2}}));
}

TEST_F(Linalg, GradBiasAdd) {
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::nn::bias_add(x[0], x[1], 1); }, {{3, 4}, {4}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::nn::bias_add(x[0], x[1], 1); }, {{2, 3, 2, 2}, {3}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::nn::bias_add(x[0], x[1], -1); }, {{2, 2, 5}, {5}}));
}

TEST_F(Linalg, FusedDenseTrainsExactlyLikeUnfused) {
  // The same train job with and without fusion: identical losses and
  // identical variables after several steps (fusion changes no arithmetic
  // order for bias + relu).
  auto define = [](bool fuse, const std::string& prefix) {
    return flow::global_function(
        flow::Train, flow::function_config().enable_fusion(fuse),
        {flow::Numpy::Placeholder({8, 6}), flow::Numpy::Placeholder({8}, flow::Int32)},
        [prefix](Blob x, Blob labels) -> flow::Numpy {
          auto h = flow::layers::dense(x, 16, {.activation = flow::nn::relu,
                                               .kernel_initializer = flow::truncated_normal(0.3), .name = prefix + "h"});
          auto logits = flow::layers::dense(h, 4, {.kernel_initializer = flow::truncated_normal(0.3), .name = prefix + "o"});
          auto loss = flow::nn::sparse_softmax_cross_entropy_with_logits(labels, logits);
          flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.5}), 0.9).minimize(loss);
          return loss;
        });
  };
  auto fused = define(true, "f_");
  auto plain = define(false, "p_");
  EXPECT_LT(fused.compiled()->plan().num_nodes(), plain.compiled()->plan().num_nodes());
  flow::CheckPoint().init();
  // Same initial values for both copies.
  for (const char* v : {"h-weight", "h-bias", "o-weight", "o-bias"})
    flow::session::assign(std::string("p_") + v, flow::session::variable(std::string("f_") + v));
  Tensor x({8, 6}, flow::Float);
  for (int i = 0; i < 48; ++i) x.data<float>()[i] = static_cast<float>((i * 7) % 11) / 11.0f - 0.4f;
  Tensor labels = Tensor::from<int32_t>({8}, {0, 1, 2, 3, 3, 2, 1, 0});
  for (int step = 0; step < 5; ++step) EXPECT_TRUE(fused(x, labels).equal(plain(x, labels))) << "step " << step;
  for (const char* v : {"h-weight", "h-bias", "o-weight", "o-bias", "h-weight-momentum"})
    EXPECT_TRUE(flow::session::variable(std::string("f_") + v).equal(flow::session::variable(std::string("p_") + v))) << v;
}

TEST_F(Linalg, EmptyInnerDimensionGivesZerosAndKeepsTheBias) {
  // (3, 0) x (0, 4), the inner dimension sliced away in the body: an empty
  // sum in every element, in float32 (oneDNN) and float64 (OpenBLAS), plain
  // and with a fused bias + relu.
  for (flow::DType dt : {flow::Float, flow::Float64}) {
    auto mm = flow::global_function(
        flow::Predict, {flow::Numpy::Placeholder({3, 2}, dt), flow::Numpy::Placeholder({2, 4}, dt)},
        [](Blob x, Blob y) -> flow::Numpy {
          return flow::matmul(flow::slice(x, {0, 1}, {3, 1}), flow::slice(y, {1, 0}, {1, 4}));
        });
    Tensor out = mm(Tensor(flow::Shape{3, 2}, dt), Tensor(flow::Shape{2, 4}, dt));
    ASSERT_EQ(out.shape(), (flow::Shape{3, 4}));
    ASSERT_EQ(out.dtype(), dt);
    for (int64_t i = 0; i < 12; ++i)
      EXPECT_EQ(dt == flow::Float ? out.data<float>()[i] : out.data<double>()[i], 0.0) << i;
  }
  auto dense = flow::global_function(
      flow::Predict, {flow::Numpy::Placeholder({2, 1}), flow::Numpy::Placeholder({1, 3}), flow::Numpy::Placeholder({3})},
      [](Blob x, Blob w, Blob b) -> flow::Numpy {
        Blob y = flow::matmul(flow::slice(x, {0, 0}, {2, 0}), flow::slice(w, {0, 0}, {0, 3}));
        return flow::nn::relu(flow::nn::bias_add(y, b, 1));
      });
  Tensor ones = Tensor::from<float>({2, 1}, {1, 1});
  EXPECT_EQ(dense(ones, Tensor::from<float>({1, 3}, {1, 1, 1}), Tensor::from<float>({3}, {1.5f, -2.f, 0.25f}))
                .to_vector<float>(),
            (std::vector<float>{1.5f, 0, 0.25f, 1.5f, 0, 0.25f}));
}
