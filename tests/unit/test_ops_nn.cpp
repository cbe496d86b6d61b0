// Tests of the neural-network ops (engine/src/ops/nn.cpp and conv.cpp):
// forward values against naive double-precision references, padding
// resolution, run-time and definition-time errors, dropout statistics and
// reproducibility, batch-norm moving statistics, and gradients (finite
// differences through gradcheck.h in predict jobs; a small train-job variant
// here for the ops that behave differently in train jobs).
#include <gtest/gtest.h>

#include "compiler.h"
#include <jobflow/jobflow.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "op_test.h"

namespace flow = jobflow;
using namespace flow::testing;

namespace {

// Distinct values (a shuffled ramp, 0.05 apart) so max pooling has no
// near-ties that a finite difference could flip.
Tensor distinct(Shape s, uint64_t seed = 3) {
  Tensor t(std::move(s), flow::Float);
  std::vector<int64_t> p(t.numel());
  std::iota(p.begin(), p.end(), 0);
  std::shuffle(p.begin(), p.end(), std::mt19937_64(seed));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 0.05f * static_cast<float>(p[i] - t.numel() / 2);
  return t;
}

// The minimize() a train job needs, with a learning rate of 0 so the
// variables stay put, and a dummy trainable variable so there is one.
void minimize_nothing(Blob loss, const std::string& dummy) {
  Blob v = flow::get_variable(dummy, {1}, loss.dtype(), flow::zeros_initializer(), true);
  flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.0}), 0.0)
      .minimize(flow::add(loss, flow::reduce_sum(v)));
}

// ---- naive references (double precision) ----

double at4(const Tensor& t, int64_t a, int64_t b, int64_t c, int64_t d) {
  const auto& s = t.shape();
  return t.at(((a * s[1] + b) * s[2] + c) * s[3] + d);
}

struct ConvCase {
  Shape x, w;
  int64_t sh, sw, pt, pl, pb, pr, dh, dw, groups;
};

std::vector<double> naive_conv(const Tensor& x, const Tensor& w, const ConvCase& c, Shape* out_shape,
                               const Tensor* bias = nullptr, bool relu = false) {
  const int64_t N = c.x[0], C = c.x[1], H = c.x[2], W = c.x[3], K = c.w[0], Cg = c.w[1], R = c.w[2], S = c.w[3];
  const int64_t OH = (H + c.pt + c.pb - ((R - 1) * c.dh + 1)) / c.sh + 1;
  const int64_t OW = (W + c.pl + c.pr - ((S - 1) * c.dw + 1)) / c.sw + 1;
  const int64_t Kg = K / c.groups;
  (void)C;
  *out_shape = {N, K, OH, OW};
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = bias ? bias->at(k) : 0.0;
          const int64_t g = k / Kg;
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t r = 0; r < R; ++r)
              for (int64_t q = 0; q < S; ++q) {
                const int64_t h = oh * c.sh - c.pt + r * c.dh, ww = ow * c.sw - c.pl + q * c.dw;
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                s += at4(x, n, g * Cg + ci, h, ww) * at4(w, k, ci, r, q);
              }
          y.push_back(relu ? std::max(s, 0.0) : s);
        }
  return y;
}

std::vector<double> naive_pool(const Tensor& x, bool max, int64_t k, int64_t s, const std::vector<int64_t>& pads,
                               Shape* out_shape) {
  const auto& sh = x.shape();
  const int64_t N = sh[0], C = sh[1], H = sh[2], W = sh[3];
  const int64_t OH = (H + pads[0] + pads[2] - k) / s + 1, OW = (W + pads[1] + pads[3] - k) / s + 1;
  *out_shape = {N, C, OH, OW};
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = max ? -INFINITY : 0.0;
          int count = 0;
          for (int64_t r = 0; r < k; ++r)
            for (int64_t q = 0; q < k; ++q) {
              const int64_t h = oh * s - pads[0] + r, w = ow * s - pads[1] + q;
              if (h < 0 || h >= H || w < 0 || w >= W) continue;
              const double v = at4(x, n, c, h, w);
              acc = max ? std::max(acc, v) : acc + v;
              ++count;
            }
          y.push_back(max ? acc : acc / count);  // average excludes the padding
        }
  return y;
}

// Softmax of x viewed as (outer, C, inner) along `axis`.
std::vector<double> naive_softmax(const Tensor& x, int axis, bool log) {
  const auto& s = x.shape();
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= s[i];
  for (size_t i = axis + 1; i < s.size(); ++i) inner *= s[i];
  const int64_t C = s[axis];
  std::vector<double> y(x.numel());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double den = 0;
      for (int64_t c = 0; c < C; ++c) den += std::exp(x.at((o * C + c) * inner + j));
      for (int64_t c = 0; c < C; ++c) {
        const double v = x.at((o * C + c) * inner + j);
        y[(o * C + c) * inner + j] = log ? v - std::log(den) : std::exp(v) / den;
      }
    }
  return y;
}

class NnOps : public OpTest {};

}  // namespace

// ---------------------------------------------------------------------------
// Padding

TEST(Padding, SameLowerPutsTheExtraAtTheStart) {
  // in 5, k 2, s 1: total 1 -> top/left 1, bottom/right 0.
  EXPECT_EQ(flow::nn::Padding("SAME").resolve("conv2d", 5, 5, 2, 1, 1), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(flow::nn::Padding("SAME_LOWER").resolve("conv2d", 5, 5, 2, 1, 1), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(flow::nn::Padding("SAME_UPPER").resolve("conv2d", 5, 5, 2, 1, 1), (std::vector<int64_t>{0, 0, 1, 1}));
  // Different h and w: in (6, 7), k (3, 4), s 2 -> out (3, 4);
  // total h = 2*2+3-6 = 1, total w = 3*2+4-7 = 3.
  EXPECT_EQ(flow::nn::Padding("SAME").resolve("conv2d", 6, 7, {3, 4}, 2, 1), (std::vector<int64_t>{1, 2, 0, 1}));
  EXPECT_EQ(flow::nn::Padding("SAME_UPPER").resolve("conv2d", 6, 7, {3, 4}, 2, 1),
            (std::vector<int64_t>{0, 1, 1, 2}));
}

TEST(Padding, SameCases) {
  // 28x28, k 5, s 1 (LeNet): total 4, symmetric.
  EXPECT_EQ(flow::nn::Padding("SAME").resolve("conv2d", 28, 28, 5, 1, 1), (std::vector<int64_t>{2, 2, 2, 2}));
  // Pooling 28x28 k2 s2: no padding needed.
  EXPECT_EQ(flow::nn::Padding("SAME").resolve("max_pool2d", 28, 28, 2, 2, 1), (std::vector<int64_t>{0, 0, 0, 0}));
  // Dilation: effective kernel (3-1)*2+1 = 5 on 7, stride 1: total 4.
  EXPECT_EQ(flow::nn::Padding("SAME").resolve("conv2d", 7, 7, 3, 1, 2), (std::vector<int64_t>{2, 2, 2, 2}));
  // Kernel smaller than the stride: never negative.
  EXPECT_EQ(flow::nn::Padding("SAME").resolve("conv2d", 8, 8, 1, 3, 1), (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(flow::nn::Padding("same").resolve("conv2d", 5, 5, 2, 1, 1), (std::vector<int64_t>{1, 1, 0, 0}));
}

TEST(Padding, ValidAndExplicit) {
  EXPECT_EQ(flow::nn::Padding("VALID").resolve("conv2d", 9, 9, 3, 2, 1), (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(flow::nn::Padding(std::vector<int64_t>{1, 2, 3, 4}).resolve("conv2d", 9, 9, 3, 1, 1),
            (std::vector<int64_t>{1, 2, 3, 4}));
}

TEST(Padding, ErrorsNameTheOp) {
  std::string e = error_of([] { flow::nn::Padding("FULL").resolve("conv2d", 5, 5, 2, 1, 1); });
  EXPECT_NE(e.find("[conv2d]"), std::string::npos) << e;
  EXPECT_NE(e.find("FULL"), std::string::npos) << e;
  e = error_of([] { flow::nn::Padding(std::vector<int64_t>{1, 2}).resolve("max_pool2d", 5, 5, 2, 1, 1); });
  EXPECT_NE(e.find("[max_pool2d]"), std::string::npos) << e;
  e = error_of([] { flow::nn::Padding(std::vector<int64_t>{0, -1, 0, 0}).resolve("conv2d", 5, 5, 2, 1, 1); });
  EXPECT_NE(e.find("[conv2d]"), std::string::npos) << e;
  e = error_of([] { flow::nn::Padding("SAME").resolve("conv2d", 5, 5, 2, 0, 1); });
  EXPECT_NE(e.find("stride"), std::string::npos) << e;
}

// ---------------------------------------------------------------------------
// softmax / log_softmax / cross-entropy

TEST_F(NnOps, SoftmaxRowsSumToOneAndMatchNaive) {
  for (auto dt : {flow::Float, flow::Double}) {
    Tensor x = random({6, 11}, dt, 1, -4, 4);
    Tensor y = run1(x, [](Blob b) { return flow::nn::softmax(b); });
    expect_near_all(y, naive_softmax(x, 1, false), dt == flow::Float ? 1e-6 : 1e-14, "softmax");
    for (int r = 0; r < 6; ++r) {
      double s = 0;
      for (int c = 0; c < 11; ++c) s += y.at(r * 11 + c);
      EXPECT_NEAR(s, 1.0, 1e-6);
    }
  }
}

TEST_F(NnOps, SoftmaxAnyAxis) {
  Tensor x = random({3, 4, 5}, flow::Double, 2, -3, 3);
  for (int axis : {0, 1, 2, -1, -2}) {
    const int a = axis < 0 ? axis + 3 : axis;
    expect_near_all(run1(x, [&](Blob b) { return flow::nn::softmax(b, axis); }), naive_softmax(x, a, false), 1e-14,
                    "softmax axis " + std::to_string(axis));
    expect_near_all(run1(x, [&](Blob b) { return flow::nn::log_softmax(b, axis); }), naive_softmax(x, a, true),
                    1e-13, "log_softmax axis " + std::to_string(axis));
  }
  std::string e = error_of([&] { run1(x, [](Blob b) { return flow::nn::softmax(b, 3); }); });
  EXPECT_NE(e.find("[softmax]"), std::string::npos) << e;
}

TEST_F(NnOps, SoftmaxIsStableForLargeLogits) {
  Tensor x = Tensor::from<float>({2, 3}, {1000, 1001, 1002, -1000, -1001, -1002});
  Tensor y = run1(x, [](Blob b) { return flow::nn::softmax(b); });
  Tensor ly = run1(x, [](Blob b) { return flow::nn::log_softmax(b); });
  for (int i = 0; i < 6; ++i) {
    EXPECT_TRUE(std::isfinite(y.at(i)));
    EXPECT_TRUE(std::isfinite(ly.at(i)));
  }
  EXPECT_NEAR(y.at(2), 0.66524096, 1e-6);
  EXPECT_NEAR(ly.at(3), -0.40760596, 1e-5);
}

TEST_F(NnOps, SparseCrossEntropyIsMinusLogSoftmaxOfTheLabel) {
  Tensor logits = random({5, 7}, flow::Double, 4, -3, 3);
  const std::vector<int> lab{0, 6, 3, 3, 1};
  const auto lsm = naive_softmax(logits, 1, true);
  std::vector<double> want;
  for (int b = 0; b < 5; ++b) want.push_back(-lsm[b * 7 + lab[b]]);
  for (auto ldt : {flow::Int32, flow::Int64}) {
    Tensor labels = Tensor::from<int32_t>({5}, {lab.begin(), lab.end()}).astype(ldt);
    auto job = flow::global_function(
        flow::Predict, {flow::Numpy::Placeholder({5}, ldt), flow::Numpy::Placeholder({5, 7}, flow::Double)},
        [](Blob l, Blob x) -> Blob { return flow::nn::sparse_softmax_cross_entropy_with_logits(l, x); });
    Tensor loss = job(labels, logits);
    EXPECT_EQ(loss.shape(), (Shape{5}));
    expect_near_all(loss, want, 1e-13, "xent");
  }
}

TEST_F(NnOps, SparseCrossEntropyOutOfRangeLabelIsARunTimeError) {
  auto job = flow::global_function(
      flow::Predict, {flow::Numpy::Placeholder({4}, flow::Int32), flow::Numpy::Placeholder({4, 3}, flow::Float)},
      [](Blob l, Blob x) -> Blob { return flow::nn::sparse_softmax_cross_entropy_with_logits(l, x); });
  Tensor x = random({4, 3});
  EXPECT_NO_THROW(job(Tensor::from<int32_t>({4}, {0, 1, 2, 0}), x));
  std::string e = error_of([&] { job(Tensor::from<int32_t>({4}, {0, 1, 7, 0}), x); });
  EXPECT_NE(e.find("sparse_softmax_cross_entropy"), std::string::npos) << e;
  EXPECT_NE(e.find("label 7"), std::string::npos) << e;
  EXPECT_NE(e.find("row 2"), std::string::npos) << e;
  e = error_of([&] { job(Tensor::from<int32_t>({4}, {0, -1, 1, 0}), x); });
  EXPECT_NE(e.find("label -1"), std::string::npos) << e;
}

TEST_F(NnOps, SparseCrossEntropyShapeErrors) {
  std::string e = error_of([] {
    flow::global_function(
        flow::Predict, {flow::Numpy::Placeholder({4}, flow::Int32), flow::Numpy::Placeholder({5, 3}, flow::Float)},
        [](Blob l, Blob x) -> Blob { return flow::nn::sparse_softmax_cross_entropy_with_logits(l, x); });
  });
  EXPECT_NE(e.find("[sparse_softmax_cross_entropy]"), std::string::npos) << e;
  EXPECT_NE(e.find("(4,)"), std::string::npos) << e;
  EXPECT_NE(e.find("(5, 3)"), std::string::npos) << e;
  e = error_of([] {
    flow::global_function(
        flow::Predict, {flow::Numpy::Placeholder({5}, flow::Float), flow::Numpy::Placeholder({5, 3}, flow::Float)},
        [](Blob l, Blob x) -> Blob { return flow::nn::sparse_softmax_cross_entropy_with_logits(l, x); });
  });
  EXPECT_NE(e.find("int32 or int64"), std::string::npos) << e;
}

// ---------------------------------------------------------------------------
// conv2d

TEST_F(NnOps, Conv2dMatchesNaiveLoop) {
  struct Case {
    ConvCase c;
    flow::nn::Padding pad;
    const char* what;
  };
  // Pads in ConvCase are what the Padding below resolves to.
  std::vector<Case> cases = {
      {{{2, 3, 7, 6}, {4, 3, 3, 2}, 2, 1, 1, 1, 1, 0, 1, 1, 1}, "SAME", "same stride (2,1)"},
      {{{1, 2, 9, 8}, {3, 2, 3, 3}, 1, 1, 0, 0, 0, 0, 2, 2, 1}, "VALID", "dilation 2"},
      {{{2, 4, 6, 6}, {6, 2, 3, 3}, 2, 2, 1, 0, 2, 1, 1, 1, 2}, std::vector<int64_t>{1, 0, 2, 1}, "groups 2 explicit"},
      {{{3, 1, 28, 28}, {8, 1, 5, 5}, 1, 1, 2, 2, 2, 2, 1, 1, 1}, "SAME", "lenet conv1"},
  };
  for (const auto& k : cases) {
    Tensor x = random(k.c.x, flow::Float, 11), w = random(k.c.w, flow::Float, 12);
    auto job = flow::global_function(
        flow::Predict, {flow::Numpy::Placeholder(k.c.x), flow::Numpy::Placeholder(k.c.w)}, [&](Blob xb, Blob wb) -> Blob {
          return flow::nn::conv2d(xb, wb, {k.c.sh, k.c.sw}, k.pad, {k.c.dh, k.c.dw}, k.c.groups);
        });
    Tensor y = job(x, w);
    Shape ys;
    auto want = naive_conv(x, w, k.c, &ys);
    EXPECT_EQ(y.shape(), ys) << k.what;
    expect_near_all(y, want, 1e-4, k.what);
  }
}

TEST_F(NnOps, Conv2dBiasReluAreFusedAndCorrect) {
  ConvCase c{{2, 3, 8, 8}, {5, 3, 3, 3}, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  Tensor x = random(c.x, flow::Float, 21), w = random(c.w, flow::Float, 22), b = random({5}, flow::Float, 23);
  Shape ys;
  auto want = naive_conv(x, w, c, &ys, &b, true);
  for (bool fusion : {true, false}) {
    auto job = flow::global_function(
        flow::Predict, flow::function_config().enable_fusion(fusion),
        {flow::Numpy::Placeholder(c.x), flow::Numpy::Placeholder(c.w), flow::Numpy::Placeholder({5})},
        [](Blob xb, Blob wb, Blob bb) -> Blob {
          return flow::nn::relu(flow::nn::bias_add(flow::nn::conv2d(xb, wb, 1, "SAME"), bb, 1));
        });
    expect_near_all(job(x, w, b), want, 1e-4, fusion ? "fused" : "unfused");
    auto ops = job.compiled()->plan().op_sequence();
    int convs = 0;
    bool fused = false;
    for (auto& o : ops) {
      convs += o.rfind("conv2d", 0) == 0;
      fused |= o.rfind("conv2d", 0) == 0 && o.find("bias=1") != std::string::npos && o.find("relu=1") != std::string::npos;
    }
    EXPECT_EQ(convs, 1);
    EXPECT_EQ(fused, fusion);
    if (fusion) {
      EXPECT_EQ(ops.size(), 1u) << ::testing::PrintToString(ops);  // conv + bias + relu in one node
    }
  }
}

TEST_F(NnOps, Conv2dWrongChannelsNamesBothShapes) {
  std::string e = error_of([] {
    flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 3, 7, 6}), flow::Numpy::Placeholder({4, 2, 3, 3})},
                          [](Blob x, Blob w) -> Blob { return flow::nn::conv2d(x, w); });
  });
  EXPECT_NE(e.find("[conv2d]"), std::string::npos) << e;
  EXPECT_NE(e.find("(2, 3, 7, 6)"), std::string::npos) << e;
  EXPECT_NE(e.find("(4, 2, 3, 3)"), std::string::npos) << e;
}

TEST_F(NnOps, Conv2dOtherErrors) {
  std::string e = error_of([] {
    flow::global_function(flow::Predict,
                          {flow::Numpy::Placeholder({1, 2, 5, 5}, flow::Double), flow::Numpy::Placeholder({2, 2, 3, 3}, flow::Double)},
                          [](Blob x, Blob w) -> Blob { return flow::nn::conv2d(x, w); });
  });
  EXPECT_NE(e.find("[conv2d]"), std::string::npos) << e;
  EXPECT_NE(e.find("float64"), std::string::npos) << e;
  e = error_of([] {
    flow::global_function(flow::Predict, {flow::Numpy::Placeholder({1, 2, 5, 5}), flow::Numpy::Placeholder({2, 2, 7, 7})},
                          [](Blob x, Blob w) -> Blob { return flow::nn::conv2d(x, w); });
  });
  EXPECT_NE(e.find("do not fit"), std::string::npos) << e;
  e = error_of([] {
    flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 5, 5}), flow::Numpy::Placeholder({2, 2, 3, 3})},
                          [](Blob x, Blob w) -> Blob { return flow::nn::conv2d(x, w); });
  });
  EXPECT_NE(e.find("rank 4"), std::string::npos) << e;
  e = error_of([] {
    flow::global_function(flow::Predict, {flow::Numpy::Placeholder({1, 4, 5, 5}), flow::Numpy::Placeholder({3, 2, 3, 3})},
                          [](Blob x, Blob w) -> Blob { return flow::nn::conv2d(x, w, 1, "VALID", 1, 2); });
  });
  EXPECT_NE(e.find("groups=2"), std::string::npos) << e;
}

// ---------------------------------------------------------------------------
// pooling

TEST_F(NnOps, PoolingMatchesNaive) {
  Tensor x = random({2, 3, 7, 5}, flow::Float, 31);
  for (const char* pad : {"VALID", "SAME", "SAME_UPPER"}) {
    const auto pads = flow::nn::Padding(pad).resolve("max_pool2d", 7, 5, 3, 2, 1);
    Shape ys;
    auto want_max = naive_pool(x, true, 3, 2, pads, &ys);
    Tensor y = run1(x, [&](Blob b) { return flow::nn::max_pool2d(b, 3, 2, pad); });
    EXPECT_EQ(y.shape(), ys) << pad;
    expect_near_all(y, want_max, 0, std::string("max ") + pad);
    auto want_avg = naive_pool(x, false, 3, 2, pads, &ys);
    y = run1(x, [&](Blob b) { return flow::nn::avg_pool2d(b, 3, 2, pad); });
    EXPECT_EQ(y.shape(), ys) << pad;
    expect_near_all(y, want_avg, 1e-6, std::string("avg ") + pad);
  }
}

TEST_F(NnOps, PoolSame28By2Gives14) {
  Tensor x = random({2, 4, 28, 28}, flow::Float, 32);
  Tensor y = run1(x, [](Blob b) { return flow::nn::max_pool2d(b, 2, 2, "SAME"); });
  EXPECT_EQ(y.shape(), (Shape{2, 4, 14, 14}));
  Shape ys;
  expect_near_all(y, naive_pool(x, true, 2, 2, {0, 0, 0, 0}, &ys), 0, "max 28");
}

TEST_F(NnOps, PoolErrors) {
  std::string e = error_of([] {
    flow::global_function(flow::Predict, {flow::Numpy::Placeholder({1, 8, 8, 3})},
                          [](Blob x) -> Blob { return flow::nn::max_pool2d(x, 2, 2, "VALID", "NHWC"); });
  });
  EXPECT_NE(e.find("[max_pool2d]"), std::string::npos) << e;
  EXPECT_NE(e.find("NHWC"), std::string::npos) << e;
  e = error_of([] {
    flow::global_function(flow::Predict, {flow::Numpy::Placeholder({1, 3, 8, 8}, flow::Double)},
                          [](Blob x) -> Blob { return flow::nn::avg_pool2d(x, 2, 2); });
  });
  EXPECT_NE(e.find("[avg_pool2d]"), std::string::npos) << e;
  EXPECT_NE(e.find("float64"), std::string::npos) << e;
  e = error_of([] {
    flow::global_function(flow::Predict, {flow::Numpy::Placeholder({1, 3, 8})},
                          [](Blob x) -> Blob { return flow::nn::max_pool2d(x, 2, 2); });
  });
  EXPECT_NE(e.find("rank 4"), std::string::npos) << e;
}

// The train-job path (oneDNN workspace) and the predict-job path (windows
// searched again) give the same max-pool gradient.
TEST_F(NnOps, MaxPoolGradientSameInTrainAndPredictJobs) {
  Tensor x = distinct({2, 3, 9, 7});
  Tensor c = random({2, 3, 5, 4}, flow::Float, 41);
  auto body = [&](Blob xb) {
    Blob y = flow::nn::max_pool2d(xb, 3, 2, "SAME");
    return flow::reduce_sum(flow::mul(y, flow::constant(c)));
  };
  auto pred = flow::global_function(flow::Predict, {flow::Numpy::Placeholder(x.shape())},
                                    [&](Blob xb) -> Blob { return flow::gradients(body(xb), {xb})[0]; });
  auto train = flow::global_function(flow::Train, {flow::Numpy::Placeholder(x.shape())}, [&](Blob xb) -> Blob {
    Blob L = body(xb);
    minimize_nothing(L, "maxpool_dummy");
    return flow::gradients(L, {xb})[0];
  });
  bool has_ws = false;
  for (auto& o : train.compiled()->plan().op_sequence()) has_ws |= o.find("workspace=1") != std::string::npos;
  EXPECT_TRUE(has_ws) << train.compiled()->plan().describe();
  Tensor gp = pred(x), gt = train(x);
  std::vector<double> want(gp.numel());
  for (int64_t i = 0; i < gp.numel(); ++i) want[i] = gp.at(i);
  expect_near_all(gt, want, 1e-6, "train vs predict max-pool gradient");
  double total = 0;
  for (int64_t i = 0; i < c.numel(); ++i) total += c.at(i);
  double got = 0;
  for (int64_t i = 0; i < gt.numel(); ++i) got += gt.at(i);
  EXPECT_NEAR(got, total, 1e-4);  // every dy lands on exactly one x
}

// ---------------------------------------------------------------------------
// dropout

namespace {
auto dropout_train_job(double rate, uint64_t seed, const Shape& s, const std::string& dummy) {
  return flow::global_function(flow::Train, flow::function_config().seed(seed), {flow::Numpy::Placeholder(s)},
                               [=](Blob x) -> Blob {
                                 Blob y = flow::nn::dropout(x, rate);
                                 minimize_nothing(flow::reduce_sum(y), dummy);
                                 return y;
                               });
}
}  // namespace

TEST_F(NnOps, DropoutKeepsTheRightFractionAndPreservesTheMean) {
  const double rate = 0.3;
  const Shape s{400, 500};
  auto job = dropout_train_job(rate, 5, s, "dropout_stats_dummy");
  Tensor ones(s, flow::Float);
  std::fill(ones.data<float>(), ones.data<float>() + ones.numel(), 1.0f);
  Tensor y = job(ones);
  const int64_t n = y.numel();
  int64_t kept = 0;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = y.data<float>()[i];
    ASSERT_TRUE(v == 0.0f || std::fabs(v - 1.0f / 0.7f) < 1e-6) << v;
    kept += v != 0.0f;
    sum += v;
  }
  const double p = 1 - rate, sigma = std::sqrt(p * (1 - p) / n);
  EXPECT_NEAR(static_cast<double>(kept) / n, p, 3 * sigma);
  EXPECT_NEAR(sum / n, 1.0, 3 * sigma / p);
}

TEST_F(NnOps, DropoutIsTheIdentityInPredictJobs) {
  Tensor x = random({10, 20});
  auto job = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({10, 20})},
                                   [](Blob b) -> Blob { return flow::nn::dropout(b, 0.5); });
  EXPECT_TRUE(job(x).equal(x));
  for (auto& o : job.compiled()->plan().op_sequence()) EXPECT_EQ(o.find("dropout"), std::string::npos) << o;
}

TEST_F(NnOps, DropoutMaskIsReproducible) {
  const Shape s{64, 33};
  Tensor x = random(s, flow::Float, 51, 0.5, 1.5);
  auto a = dropout_train_job(0.5, 42, s, "dropout_rep_a");
  auto b = dropout_train_job(0.5, 42, s, "dropout_rep_b");
  auto other = dropout_train_job(0.5, 43, s, "dropout_rep_c");
  Tensor a0 = a(x), a1 = a(x), b0 = b(x), b1 = b(x), o0 = other(x);
  EXPECT_TRUE(a0.equal(b0)) << "same seed and step, same mask";
  EXPECT_TRUE(a1.equal(b1));
  EXPECT_FALSE(a0.equal(a1)) << "the next step draws a new mask";
  EXPECT_FALSE(a0.equal(o0)) << "another seed draws another mask";
}

TEST_F(NnOps, DropoutTwoLayersDrawDifferentMasks) {
  const Shape s{32, 32};
  Tensor x = random(s, flow::Float, 52, 0.5, 1.5);
  auto job = flow::global_function(flow::Train, {flow::Numpy::Placeholder(s)}, [](Blob xb) -> std::tuple<Blob, Blob> {
    Blob y1 = flow::nn::dropout(xb, 0.5), y2 = flow::nn::dropout(xb, 0.5);
    minimize_nothing(flow::add(flow::reduce_sum(y1), flow::reduce_sum(y2)), "dropout_two_dummy");
    return {y1, y2};
  });
  auto [y1, y2] = job(x);
  EXPECT_FALSE(y1.equal(y2));
}

TEST_F(NnOps, DropoutGradientUsesTheSameMask) {
  const Shape s{50, 40};
  Tensor c = random(s, flow::Double, 53);
  auto job = flow::global_function(flow::Train, {flow::Numpy::Placeholder(s, flow::Double)},
                                   [&](Blob x) -> std::tuple<Blob, Blob> {
                                     Blob y = flow::nn::dropout(x, 0.25);
                                     Blob L = flow::reduce_sum(flow::mul(y, flow::constant(c)));
                                     minimize_nothing(L, "dropout_grad_dummy");
                                     return {y, flow::gradients(L, {x})[0]};
                                   });
  Tensor ones(s, flow::Double);
  std::fill(ones.data<double>(), ones.data<double>() + ones.numel(), 1.0);
  auto [y, g] = job(ones);
  // With x = 1, y = mask / (1 - rate), so dL/dx = c * y.
  std::vector<double> want(g.numel());
  for (int64_t i = 0; i < g.numel(); ++i) want[i] = c.at(i) * y.at(i);
  expect_near_all(g, want, 1e-15, "dropout grad");
}

TEST_F(NnOps, DropoutRateMustBeInRange) {
  for (double r : {1.0, -0.1, 1.5}) {
    std::string e = error_of([r] {
      flow::global_function(flow::Predict, {flow::Numpy::Placeholder({4})},
                            [r](Blob x) -> Blob { return flow::nn::dropout(x, r); });
    });
    EXPECT_NE(e.find("[dropout]"), std::string::npos) << e;
    EXPECT_NE(e.find("rate"), std::string::npos) << e;
  }
}

// ---------------------------------------------------------------------------
// batch normalization

TEST_F(NnOps, FunctionalBatchNormMatchesFormula) {
  Tensor x = random({4, 3, 2, 5}, flow::Double, 61);
  Tensor mean = random({3}, flow::Double, 62), var = random({3}, flow::Double, 63, 0.5, 2);
  Tensor off = random({3}, flow::Double, 64), sc = random({3}, flow::Double, 65);
  auto job = flow::global_function(
      flow::Predict,
      {flow::Numpy::Placeholder(x.shape(), flow::Double), flow::Numpy::Placeholder({3}, flow::Double),
       flow::Numpy::Placeholder({3}, flow::Double), flow::Numpy::Placeholder({3}, flow::Double),
       flow::Numpy::Placeholder({3}, flow::Double)},
      [](Blob x, Blob m, Blob v, Blob o, Blob s) -> Blob { return flow::nn::batch_normalization(x, m, v, o, s, 1e-3); });
  Tensor y = job(x, mean, var, off, sc);
  std::vector<double> want(x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = (i / 10) % 3;
    want[i] = (x.at(i) - mean.at(c)) / std::sqrt(var.at(c) + 1e-3) * sc.at(c) + off.at(c);
  }
  expect_near_all(y, want, 1e-13, "batch_normalization axis 1");

  // Last axis, no offset and no scale.
  Tensor x2 = random({5, 3}, flow::Double, 66);
  auto job2 = flow::global_function(
      flow::Predict,
      {flow::Numpy::Placeholder({5, 3}, flow::Double), flow::Numpy::Placeholder({3}, flow::Double),
       flow::Numpy::Placeholder({3}, flow::Double)},
      [](Blob x, Blob m, Blob v) -> Blob { return flow::nn::batch_normalization(x, m, v, Blob(), Blob(), 1e-5, -1); });
  Tensor y2 = job2(x2, mean, var);
  std::vector<double> want2(15);
  for (int64_t i = 0; i < 15; ++i) want2[i] = (x2.at(i) - mean.at(i % 3)) / std::sqrt(var.at(i % 3) + 1e-5);
  expect_near_all(y2, want2, 1e-13, "batch_normalization axis -1");
}

TEST_F(NnOps, FunctionalBatchNormShapeError) {
  std::string e = error_of([] {
    flow::global_function(flow::Predict,
                          {flow::Numpy::Placeholder({4, 3, 2, 2}), flow::Numpy::Placeholder({4}), flow::Numpy::Placeholder({3})},
                          [](Blob x, Blob m, Blob v) -> Blob {
                            return flow::nn::batch_normalization(x, m, v, Blob(), Blob(), 1e-5);
                          });
  });
  EXPECT_NE(e.find("[batch_normalization]"), std::string::npos) << e;
  EXPECT_NE(e.find("(4, 3, 2, 2)"), std::string::npos) << e;
}

TEST_F(NnOps, BatchNormLayerTrainStepUpdatesMovingStatistics) {
  const Shape s{6, 3, 2, 2};
  Tensor x = random(s, flow::Float, 71, -1, 3);
  auto job = flow::global_function(flow::Train, {flow::Numpy::Placeholder(s)}, [](Blob xb) -> Blob {
    Blob y = flow::layers::batch_normalization(xb, {.axis = 1, .momentum = 0.9, .epsilon = 1e-5, .name = "bn"});
    minimize_nothing(flow::reduce_mean(y), "bn_dummy");
    return y;
  });
  for (const char* v : {"bn-gamma", "bn-beta", "bn-moving_mean", "bn-moving_variance"})
    EXPECT_TRUE(flow::session::has_variable(v)) << v;
  Tensor y = job(x);
  const int64_t M = 6 * 4;
  std::vector<double> mean(3, 0), var(3, 0);
  for (int64_t i = 0; i < x.numel(); ++i) mean[(i / 4) % 3] += x.at(i) / M;
  for (int64_t i = 0; i < x.numel(); ++i) var[(i / 4) % 3] += std::pow(x.at(i) - mean[(i / 4) % 3], 2) / M;
  Tensor mm = flow::session::variable("bn-moving_mean"), mv = flow::session::variable("bn-moving_variance");
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(mm.at(c), 0.1 * mean[c], 1e-6);
    // Unbiased batch variance, as cuDNN and OneFlow keep it.
    EXPECT_NEAR(mv.at(c), 0.9 * 1.0 + 0.1 * var[c] * M / (M - 1), 1e-6);
  }
  // y is normalized with the batch statistics (gamma 1, beta 0).
  std::vector<double> want(x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = (i / 4) % 3;
    want[i] = (x.at(i) - mean[c]) / std::sqrt(var[c] + 1e-5);
  }
  expect_near_all(y, want, 1e-5, "train-mode batch norm");
  // A second step moves the statistics again.
  job(x);
  mm = flow::session::variable("bn-moving_mean");
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(mm.at(c), 0.9 * 0.1 * mean[c] + 0.1 * mean[c], 1e-6);
}

TEST_F(NnOps, BatchNormLayerPredictUsesMovingStatistics) {
  const Shape s{4, 5};
  Tensor x = random(s, flow::Float, 81);
  auto job = flow::global_function(flow::Predict, {flow::Numpy::Placeholder(s)}, [](Blob xb) -> Blob {
    return flow::layers::batch_normalization(xb, {.axis = -1, .name = "bnp"});
  });
  Tensor mm = random({5}, flow::Float, 82), mv = random({5}, flow::Float, 83, 0.5, 2);
  Tensor g = random({5}, flow::Float, 84), b = random({5}, flow::Float, 85);
  flow::session::assign("bnp-moving_mean", mm);
  flow::session::assign("bnp-moving_variance", mv);
  flow::session::assign("bnp-gamma", g);
  flow::session::assign("bnp-beta", b);
  Tensor y = job(x);
  std::vector<double> want(20);
  for (int64_t i = 0; i < 20; ++i) {
    const int64_t c = i % 5;
    want[i] = (x.at(i) - mm.at(c)) / std::sqrt(mv.at(c) + 0.001) * g.at(c) + b.at(c);
  }
  expect_near_all(y, want, 1e-5, "predict-mode batch norm");
  Tensor mm_after = flow::session::variable("bnp-moving_mean");
  EXPECT_TRUE(mm_after.equal(mm)) << "a predict job must not move the statistics";
}

TEST_F(NnOps, BatchNormLayerUnnamedGetsUniqueNames) {
  auto job = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 3})}, [](Blob xb) -> Blob {
    return flow::layers::batch_normalization(flow::layers::batch_normalization(xb, {.axis = -1, .name = ""}),
                                             {.axis = -1, .name = ""});
  });
  EXPECT_TRUE(flow::session::has_variable("BatchNorm_0-gamma"));
  EXPECT_TRUE(flow::session::has_variable("BatchNorm_1-moving_variance"));
}

// Train-mode gradients: L = sum(y * c); dL/dx by autodiff against central
// differences (each call is a train step; with a learning rate of 0 nothing
// the output depends on changes), and dgamma/dbeta against their closed forms.
TEST_F(NnOps, BatchNormLayerTrainGradients) {
  const Shape s{4, 3, 2, 3};
  Tensor x = random(s, flow::Double, 91, -1, 2);
  Tensor c = random(s, flow::Double, 92);
  const double eps_bn = 1e-3;
  auto job = flow::global_function(
      flow::Train, {flow::Numpy::Placeholder(s, flow::Double)}, [&](Blob xb) -> std::tuple<Blob, Blob, Blob, Blob, Blob> {
        Blob y = flow::layers::batch_normalization(xb, {.axis = 1, .epsilon = eps_bn, .name = "bng"});
        Blob L = flow::reduce_sum(flow::mul(y, flow::constant(c)));
        minimize_nothing(L, "bng_dummy");
        Blob gamma = flow::get_variable("bng-gamma", {3}, flow::Double, flow::ones_initializer());
        Blob beta = flow::get_variable("bng-beta", {3}, flow::Double, flow::zeros_initializer());
        auto g = flow::gradients(L, {xb, gamma, beta});
        return {L, y, g[0], g[1], g[2]};
      });
  flow::session::assign("bng-gamma", Tensor::from<double>({3}, {0.5, 2.0, -1.5}));
  auto [L0, y0, gx, ggamma, gbeta] = job(x);
  const double h = 1e-6;
  double worst = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    Tensor xp = x.clone(), xm = x.clone();
    xp.data<double>()[i] += h;
    xm.data<double>()[i] -= h;
    const double num = (std::get<0>(job(xp)).at(0) - std::get<0>(job(xm)).at(0)) / (2 * h);
    worst = std::max(worst, std::fabs(num - gx.at(i)) / (1e-6 + 1e-5 * std::fabs(num)));
  }
  EXPECT_LE(worst, 1.0) << "dL/dx of train-mode batch norm";
  // dgamma = sum(c * xhat), dbeta = sum(c); xhat = (y - beta) / gamma.
  const double gam[3] = {0.5, 2.0, -1.5};
  for (int ch = 0; ch < 3; ++ch) {
    double dg = 0, db = 0;
    for (int64_t i = 0; i < x.numel(); ++i)
      if ((i / 6) % 3 == ch) {
        dg += c.at(i) * y0.at(i) / gam[ch];
        db += c.at(i);
      }
    EXPECT_NEAR(ggamma.at(ch), dg, 1e-10);
    EXPECT_NEAR(gbeta.at(ch), db, 1e-10);
  }
}

// ---------------------------------------------------------------------------
// gradient checks (predict jobs, finite differences)

TEST_F(NnOps, GradSoftmax) {
  EXPECT_TRUE(gradcheck([](const std::vector<Blob>& x) { return flow::nn::softmax(x[0]); }, {{3, 5}}));
  EXPECT_TRUE(gradcheck([](const std::vector<Blob>& x) { return flow::nn::softmax(x[0], 1); }, {{2, 4, 3}}));
}

TEST_F(NnOps, GradLogSoftmax) {
  EXPECT_TRUE(gradcheck([](const std::vector<Blob>& x) { return flow::nn::log_softmax(x[0]); }, {{3, 5}}));
  EXPECT_TRUE(gradcheck([](const std::vector<Blob>& x) { return flow::nn::log_softmax(x[0], 0); }, {{4, 2, 3}}));
}

TEST_F(NnOps, GradSparseCrossEntropy) {
  for (auto ldt : {flow::Int32, flow::Int64}) {
    Tensor labels = Tensor::from<int32_t>({4}, {2, 0, 4, 1}).astype(ldt);
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Blob>& x) {
          return flow::nn::sparse_softmax_cross_entropy_with_logits(flow::constant(labels), x[0]);
        },
        {{4, 5}}));
  }
}

TEST_F(NnOps, GradFunctionalBatchNorm) {
  GradCheckOptions o;
  o.positive = true;  // the variance input must stay positive
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Blob>& x) { return flow::nn::batch_normalization(x[0], x[1], x[2], x[3], x[4], 1e-3, 1); },
      {{2, 3, 2, 2}, {3}, {3}, {3}, {3}}, o));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Blob>& x) {
        return flow::nn::batch_normalization(x[0], x[1], x[2], Blob(), x[3], 1e-3, -1);
      },
      {{4, 3}, {3}, {3}, {3}}, o));
}

TEST_F(NnOps, GradConv2d) {
  GradCheckOptions o;
  o.dtype = flow::Float;
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Blob>& x) {
        return flow::nn::bias_add(flow::nn::conv2d(x[0], x[1], 1, "SAME"), x[2], 1);
      },
      {{2, 3, 5, 5}, {4, 3, 3, 3}, {4}}, o));
  // Strides, dilation, groups and asymmetric SAME padding.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Blob>& x) { return flow::nn::conv2d(x[0], x[1], {2, 1}, "SAME", {1, 2}, 2); },
      {{1, 4, 6, 7}, {4, 2, 2, 3}}, o));
}

TEST_F(NnOps, GradPooling) {
  GradCheckOptions o;
  o.dtype = flow::Float;
  o.inputs = {distinct({2, 2, 7, 6})};
  EXPECT_TRUE(gradcheck([](const std::vector<Blob>& x) { return flow::nn::max_pool2d(x[0], 3, 2, "SAME"); },
                        {{2, 2, 7, 6}}, o));
  EXPECT_TRUE(gradcheck([](const std::vector<Blob>& x) { return flow::nn::avg_pool2d(x[0], 3, 2, "SAME"); },
                        {{2, 2, 7, 6}}, o));
  EXPECT_TRUE(gradcheck([](const std::vector<Blob>& x) { return flow::nn::avg_pool2d(x[0], 2, 2, "VALID"); },
                        {{2, 2, 7, 6}}, o));
}
