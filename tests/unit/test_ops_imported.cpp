// Ops of imported models that ONNX's node tests brought in: gather_elements,
// scatter_nd, unique, cumsum, reduce_sum over run-time axes, einsum, det,
// grid_sample, and the losses nll_loss and softmax_cross_entropy_loss (built
// from other ops): values against hand computations, the errors, and
// finite-difference gradients.
#include <cmath>

#include "op_test.h"

namespace flow = jobflow;
using namespace flow::testing;

namespace {

class ImportedOps : public OpTest {};

Blob const_i64(Shape s, std::vector<int64_t> v) { return flow::constant(i64(std::move(s), std::move(v))); }

TEST_F(ImportedOps, GatherElementsPicksAlongTheAxis) {
  const Tensor x = f64({2, 2}, {1, 2, 3, 4});
  auto ge = [](int axis) { return [axis](Blob a, Blob i) { return flow::gather_elements(a, i, axis); }; };
  expect_values(run2(x, i64({2, 2}, {0, 0, 1, 0}), ge(1)), {2, 2}, {1, 1, 4, 3});
  expect_values(run2(x, i64({2, 2}, {1, 0, 0, 1}), ge(0)), {2, 2}, {3, 2, 1, 4});
  // indices smaller than data, and counting from the end
  expect_values(run2(f64({2, 3}, {1, 2, 3, 4, 5, 6}), i32({2, 1}, {-1, 0}), ge(1)), {2, 1}, {3, 4});
  EXPECT_CONTAINS(error_of({x, i64({2, 2}, {0, 2, 0, 0})}, [](const Blobs& b) { return flow::gather_elements(b[0], b[1], 1); }),
                  "[gather_elements] index 2 is out of range for axis 1 of size 2");
  EXPECT_CONTAINS(error_of({x, i64({2}, {0, 0})}, [](const Blobs& b) { return flow::gather_elements(b[0], b[1], 1); }),
                  "[gather_elements] indices (2,) int64 must have data's rank (data (2, 2))");
  EXPECT_CONTAINS(error_of({x, i64({3, 1}, {0, 0, 0})}, [](const Blobs& b) { return flow::gather_elements(b[0], b[1], 1); }),
                  "[gather_elements] indices (3, 1) exceed data (2, 2) in dim 0");
  EXPECT_CONTAINS(error_of({x, f64({2, 2}, {0, 0, 0, 0})}, [](const Blobs& b) { return flow::gather_elements(b[0], b[1], 1); }),
                  "[gather_elements] indices must be int32 or int64");
  // Repeated indices add their gradients up; the gradient's own gradient.
  auto f = [](const Blobs& v) { return flow::gather_elements(v[0], const_i64({2, 3}, {0, 0, 2, 1, 1, 1}), 1); };
  EXPECT_TRUE(gradcheck(f, {{2, 3}}));
  EXPECT_TRUE(gradcheck([&](const Blobs& v) { return flow::gradients(flow::reduce_sum(flow::square(f(v))), {v[0]})[0]; },
                        {{2, 3}}));
}

TEST_F(ImportedOps, ScatterNDWritesSlicesAtIndexTuples) {
  const Tensor data = f64({8}, {1, 2, 3, 4, 5, 6, 7, 8});
  auto sc = [](const char* red) {
    return [red](const Blobs& b) { return flow::scatter_nd(b[0], b[1], b[2], red); };
  };
  expect_values(run_n({data, i64({4, 1}, {4, 3, 1, 7}), f64({4}, {9, 10, 11, 12})}, sc("none")), {8},
                {1, 11, 3, 10, 9, 6, 7, 12});
  expect_values(run_n({data, i64({2, 1}, {0, 0}), f64({2}, {10, 20})}, sc("add")), {8}, {31, 2, 3, 4, 5, 6, 7, 8});
  expect_values(run_n({data, i64({2, 1}, {1, 1}), f64({2}, {3, 4})}, sc("mul")), {8}, {1, 24, 3, 4, 5, 6, 7, 8});
  // whole rows of a matrix
  expect_values(run_n({iota({2, 3}), i64({1, 1}, {1}), f64({1, 3}, {7, 8, 9})}, sc("none")), {2, 3}, {0, 1, 2, 7, 8, 9});
  EXPECT_CONTAINS(error_of({data, i64({1, 1}, {8}), f64({1}, {0})}, sc("none")),
                  "[scatter_nd] index 8 is out of range for a dim of size 8");
  EXPECT_CONTAINS(error_of({data, i64({2, 1}, {0, 1}), f64({3}, {0, 0, 0})}, sc("none")),
                  "[scatter_nd] updates must have shape (2,) for data (8,) and indices (2, 1), got (3,) float64");
  EXPECT_CONTAINS(error_of({data}, [](const Blobs& b) { return flow::scatter_nd(b[0], const_i64({1, 1}, {0}), b[0], "sub"); }),
                  "[scatter_nd] reduction must be \"none\", \"add\", \"mul\", \"max\" or \"min\", got \"sub\"");
  for (const char* red : {"none", "add"}) {
    SCOPED_TRACE(red);
    EXPECT_TRUE(gradcheck([red](const Blobs& v) { return flow::scatter_nd(v[0], const_i64({2, 1}, {2, 0}), v[1], red); },
                          {{3, 2}, {2, 2}}));
  }
}

TEST_F(ImportedOps, UniqueSortedOrByFirstOccurrence) {
  const Tensor x = f64({6}, {2, 1, 1, 3, 4, 3});
  auto run = [&](const Tensor& t, std::optional<int> axis, bool sorted) {
    return run_all({t}, [&](const Blobs& b) {
      const flow::UniqueResult u = flow::unique(b[0], axis, sorted);
      return Blobs{u.y, u.indices, u.inverse_indices, u.counts};
    });
  };
  auto s = run(x, std::nullopt, true);
  expect_values(s[0], {4}, {1, 2, 3, 4});
  expect_values(s[1], {4}, {1, 0, 3, 4});
  expect_values(s[2], {6}, {1, 0, 0, 2, 3, 2});
  expect_values(s[3], {4}, {2, 1, 2, 1});
  auto u = run(x, std::nullopt, false);
  expect_values(u[0], {4}, {2, 1, 3, 4});
  expect_values(u[1], {4}, {0, 1, 3, 4});
  expect_values(u[2], {6}, {0, 1, 1, 2, 3, 2});
  expect_values(u[3], {4}, {1, 2, 2, 1});
  // rows, sorted lexicographically
  auto r = run(f64({3, 3}, {2, 3, 4, 1, 0, 0, 1, 0, 0}), 0, true);
  expect_values(r[0], {2, 3}, {1, 0, 0, 2, 3, 4});
  expect_values(r[1], {2}, {1, 0});
  expect_values(r[2], {3}, {1, 0, 0});
  expect_values(r[3], {2}, {2, 1});
  // columns (axis 1)
  auto c = run(f64({2, 3}, {5, 1, 5, 6, 2, 6}), 1, true);
  expect_values(c[0], {2, 2}, {1, 5, 2, 6});
  expect_values(c[2], {3}, {1, 0, 1});
  EXPECT_EQ(s[1].dtype(), DType::Int64);
}

TEST_F(ImportedOps, CumSum) {
  const Tensor x = f64({4}, {1, 2, 3, 4});
  auto cs = [](bool excl, bool rev) { return [=](Blob v) { return flow::math::cumsum(v, 0, excl, rev); }; };
  expect_values(run1(x, cs(false, false)), {4}, {1, 3, 6, 10});
  expect_values(run1(x, cs(true, false)), {4}, {0, 1, 3, 6});
  expect_values(run1(x, cs(false, true)), {4}, {10, 9, 7, 4});
  expect_values(run1(x, cs(true, true)), {4}, {9, 7, 4, 0});
  expect_values(run1(i32({2, 3}, {1, 2, 3, 4, 5, 6}), [](Blob v) { return flow::math::cumsum(v, -1); }), {2, 3},
                {1, 3, 6, 4, 9, 15});
  expect_values(run1(iota({2, 3}), [](Blob v) { return flow::math::cumsum(v, 0); }), {2, 3}, {0, 1, 2, 3, 5, 7});
  EXPECT_CONTAINS(error_of({x}, [](const Blobs& b) { return flow::math::cumsum(b[0], 1); }), "[cumsum] axis 1");
  for (bool excl : {false, true})
    for (bool rev : {false, true})
      EXPECT_TRUE(gradcheck([=](const Blobs& v) { return flow::math::cumsum(v[0], 1, excl, rev); }, {{2, 4}}));
}

TEST_F(ImportedOps, ReduceSumOverAxesGivenAtRunTime) {
  const Tensor x = iota({2, 3, 2});  // 0..11
  auto rs = [](bool keep, bool noop) { return [=](Blob v, Blob a) { return flow::reduce_sum_at(v, a, keep, noop); }; };
  expect_values(run2(x, i64({1}, {1}), rs(false, false)), {2, 2}, {6, 9, 24, 27});
  expect_values(run2(x, i64({2}, {-1, 0}), rs(true, false)), {1, 3, 1}, {14, 22, 30});
  // no axes: all of them, or none with noop_with_empty_axes (placeholders cannot be empty)
  expect_values(run1(x, [](Blob v) { return flow::reduce_sum_at(v, const_i64({0}, {}), false); }), {}, {66});
  expect_values(run1(x, [](Blob v) { return flow::reduce_sum_at(v, const_i64({0}, {}), true, true); }), {2, 3, 2},
                map_values(x, [](double v) { return v; }));
  EXPECT_CONTAINS(error_of({x, i64({2}, {1, -2})}, [](const Blobs& b) { return flow::reduce_sum_at(b[0], b[1], false); }),
                  "[reduce_sum_axes] axis -2 appears twice in the axes");
  EXPECT_CONTAINS(error_of({x, i64({1}, {3})}, [](const Blobs& b) { return flow::reduce_sum_at(b[0], b[1], false); }),
                  "[reduce_sum_axes] axis 3 is out of range for rank 3");
  EXPECT_CONTAINS(error_of({x, i32({1}, {0})}, [](const Blobs& b) { return flow::reduce_sum_at(b[0], b[1], false); }),
                  "[reduce_sum_axes] axes must be 1-D int64, got (1,) int32");
  // The gradient: dy broadcast back over the reduced axes (dy = y^2 here, of
  // the output's shape known per call).
  for (bool keep : {false, true}) {
    SCOPED_TRACE(keep);
    const Tensor g = run2(x, i64({2}, {2, 0}), [keep](Blob v, Blob a) {
      Blob y = flow::reduce_sum_at(v, a, keep);
      return flow::gradients(y, {v}, flow::square(y))[0];
    });
    // y[c] = sum over n, d of x = 8 c + 14 (c = 0, 1, 2): 14, 22, 30
    std::vector<double> want;
    for (int64_t i = 0; i < 12; ++i) want.push_back(std::pow(8.0 * static_cast<double>((i / 2) % 3) + 14, 2));
    expect_values(g, {2, 3, 2}, want);
  }
  // Constant axes are an ordinary reduce_sum, with its gradients.
  EXPECT_TRUE(gradcheck([](const Blobs& v) { return flow::reduce_sum_at(v[0], const_i64({2}, {2, 0}), false); }, {{2, 3, 2}}));
}

TEST_F(ImportedOps, EinsumContractsLabels) {
  const Tensor a = iota({2, 3}, 1, 1), b = iota({3, 2}, 0.5);  // 1..6; 0, 0.5, ..., 2.5
  auto e = [](const char* eq) { return [eq](const Blobs& v) { return flow::einsum(eq, v); }; };
  const Tensor mm = run_n({a, b}, [](const Blobs& v) { return flow::matmul(v[0], v[1]); });
  expect_values(run_n({a, b}, e("ij,jk->ik")), {2, 2}, map_values(mm, [](double v) { return v; }));
  expect_values(run_n({a, b}, e("ij,jk")), {2, 2}, map_values(mm, [](double v) { return v; }));  // implicit output
  const Tensor sq = iota({3, 3});
  expect_values(run_n({sq}, e("ii->i")), {3}, {0, 4, 8});
  expect_values(run_n({sq}, e("ii")), {}, {12});  // the trace
  expect_values(run_n({f64({3}, {1, 2, 3}), f64({3}, {4, 5, 6})}, e("i,i")), {}, {32});
  expect_values(run_n({a}, e("...ij->...ji")), {3, 2}, {1, 4, 2, 5, 3, 6});
  expect_values(run_n({iota({2, 2, 2}), iota({2, 2})}, e("bij,jk->bik")), {2, 2, 2}, {2, 3, 6, 11, 10, 19, 14, 27});
  expect_values(run_n({i64({2}, {1, 2}), i64({3}, {1, 10, 100})}, e("i,j->ij")), {2, 3}, {1, 10, 100, 2, 20, 200});
  EXPECT_CONTAINS(error_of({a}, e("ij,jk->ik")), "[einsum] equation 'ij,jk->ik' has 2 input terms for 1 operands");
  EXPECT_CONTAINS(error_of({a, a}, e("ij,jk->ik")), "[einsum] equation 'ij,jk->ik': a label has sizes 3 and 2");
  EXPECT_CONTAINS(error_of({a}, e("ijk->i")), "the term 'ijk' does not fit operand 0 of shape (2, 3)");
  EXPECT_CONTAINS(error_of({a}, e("ij->k")), "an output label appears in no input");
  EXPECT_CONTAINS(error_of({a}, e("i2->i")), "'2' is not a letter");
  for (const char* eq : {"ij,jk->ik", "bij,bjk->bik", "ij->", "i,j->ij", "...ij->...ji", "ij,ij->i"}) {
    SCOPED_TRACE(eq);
    const std::string s(eq);
    std::vector<Shape> shapes;
    if (s == "ij,jk->ik") shapes = {{2, 3}, {3, 2}};
    else if (s == "bij,bjk->bik") shapes = {{2, 2, 3}, {2, 3, 2}};
    else if (s == "ij->" || s == "...ij->...ji") shapes = {{2, 3}};
    else if (s == "i,j->ij") shapes = {{2}, {3}};
    else shapes = {{2, 3}, {2, 3}};
    EXPECT_TRUE(gradcheck([eq](const Blobs& v) { return flow::einsum(eq, v); }, shapes));
  }
  EXPECT_CONTAINS(error_of({sq}, [](const Blobs& v) { return flow::gradients(flow::einsum("ii->i", v), {v[0]})[0]; }),
                  "[einsum] no gradient for operand 0 of 'ii->i': it repeats a label or broadcasts a dim");
}

TEST_F(ImportedOps, Det) {
  expect_values(run1(f64({2, 2}, {1, 2, 3, 4}), [](Blob v) { return flow::math::det(v); }), {}, {-2}, 1e-12);
  expect_values(run1(f64({2, 3, 3}, {2, 0, 1, 1, 3, 2, 1, 1, 2, 1, 2, 3, 2, 4, 6, 0, 1, 1}),
                     [](Blob v) { return flow::math::det(v); }),
                {2}, {6, 0}, 1e-12);
  EXPECT_CONTAINS(error_of({f64({2, 3}, {1, 2, 3, 4, 5, 6})}, [](const Blobs& v) { return flow::math::det(v[0]); }),
                  "[det] x must be (..., n, n), got (2, 3) float64");
  EXPECT_CONTAINS(error_of({f64({2, 2}, {1, 2, 3, 4})},
                           [](const Blobs& v) { return flow::gradients(flow::math::det(v[0]), {v[0]})[0]; }),
                  "[det] has no gradient");
}

TEST_F(ImportedOps, GridSample) {
  const Tensor img = f64({1, 1, 2, 2}, {1, 2, 3, 4});
  // (x, y) pairs: the corners' centres and the middle
  const Tensor grid = f64({1, 1, 3, 2}, {-1, -1, 1, 1, 0, 0});
  auto gs = [](const char* mode, const char* pad, bool align) {
    return [=](Blob x, Blob g) { return flow::nn::grid_sample(x, g, mode, pad, align); };
  };
  expect_values(run2(img, grid, gs("bilinear", "zeros", true)), {1, 1, 1, 3}, {1, 4, 2.5});
  // without align_corners, -1 and 1 are the outer edges: half of the pixel is padding
  expect_values(run2(img, grid, gs("bilinear", "zeros", false)), {1, 1, 1, 3}, {0.25, 1, 2.5});
  expect_values(run2(img, grid, gs("bilinear", "border", false)), {1, 1, 1, 3}, {1, 4, 2.5});
  expect_values(run2(img, grid, gs("nearest", "zeros", true)), {1, 1, 1, 3}, {1, 4, 1});  // 0.5 rounds to 0
  // outside the image: zeros, the edge, or the mirror image
  const Tensor out = f64({1, 1, 2, 2}, {-3, -1, 3, 1});
  expect_values(run2(img, out, gs("bilinear", "zeros", true)), {1, 1, 1, 2}, {0, 0});
  expect_values(run2(img, out, gs("bilinear", "border", true)), {1, 1, 1, 2}, {1, 4});
  // x = -1 mirrors to 1 (at y = 0), x = 2 to 0 (at y = 1)
  expect_values(run2(img, out, gs("bilinear", "reflection", true)), {1, 1, 1, 2}, {2, 3});
  // bicubic reproduces a linear ramp inside the image
  const Tensor ramp = iota({1, 1, 4, 4});
  expect_values(run2(ramp, f64({1, 1, 1, 2}, {0, 0}), gs("bicubic", "border", true)), {1, 1, 1, 1}, {7.5}, 1e-12);
  EXPECT_CONTAINS(error_of({img, f64({1, 3, 2}, {0, 0, 0, 0, 0, 0})},
                           [](const Blobs& v) { return flow::nn::grid_sample(v[0], v[1]); }),
                  "[grid_sample] grid must be (N, Ho, Wo, 2) with x's N");
  EXPECT_CONTAINS(error_of({img, grid}, [](const Blobs& v) { return flow::nn::grid_sample(v[0], v[1], "area"); }),
                  "[grid_sample] mode must be \"bilinear\", \"nearest\" or \"bicubic\", got \"area\"");
}

TEST_F(ImportedOps, NllLoss) {
  // log-probabilities of 2 samples over 3 classes
  const Tensor lp = f64({2, 3}, {-1, -2, -3, -4, -5, -6});
  const Tensor t = i64({2}, {2, 0});
  auto nll = [](Blob w, std::optional<int64_t> ii, const char* red) {
    return [=](const Blobs& v) { return flow::nn::nll_loss(v[0], v[1], w, ii, red); };
  };
  expect_values(run_n({lp, t}, nll(Blob(), std::nullopt, "none")), {2}, {3, 4});
  expect_values(run_n({lp, t}, nll(Blob(), std::nullopt, "sum")), {}, {7});
  expect_values(run_n({lp, t}, nll(Blob(), std::nullopt, "mean")), {}, {3.5});
  // weights by class: the mean divides by the weights of the targets
  auto weighted = [](const char* red, std::optional<int64_t> ii) {
    return [=](const Blobs& v) {
      return flow::nn::nll_loss(v[0], v[1], flow::constant(f64({3}, {0.5, 1, 2})), ii, red);
    };
  };
  expect_values(run_n({lp, t}, weighted("none", std::nullopt)), {2}, {6, 2});
  expect_values(run_n({lp, t}, weighted("mean", std::nullopt)), {}, {8 / 2.5});
  // an ignored target (here a negative one) counts nowhere
  expect_values(run_n({lp, i64({2}, {-1, 1})}, nll(Blob(), -1, "none")), {2}, {0, 5});
  expect_values(run_n({lp, i64({2}, {-1, 1})}, nll(Blob(), -1, "mean")), {}, {5});
  EXPECT_TRUE(std::isnan(run_n({lp, i64({2}, {2, 2})}, weighted("mean", 2)).at(0)));  // all ignored: 0 / 0
  // (N, C, d1): the class axis stays 1
  expect_values(run_n({iota({1, 2, 2}), i32({1, 2}, {1, 0})}, nll(Blob(), std::nullopt, "none")), {1, 2}, {-2, -1});
  EXPECT_CONTAINS(error_of({lp, i64({2}, {3, 0})}, nll(Blob(), std::nullopt, "none")),
                  "[gather_elements] index 3 is out of range for axis 1 of size 3");
  EXPECT_CONTAINS(error_of({lp, i64({3}, {0, 0, 0})}, nll(Blob(), std::nullopt, "none")),
                  "[nll_loss] target must have shape (2,) for input (2, 3), got (3,) int64");
  EXPECT_CONTAINS(error_of({lp, t}, nll(Blob(), std::nullopt, "max")),
                  "[nll_loss] reduction must be \"none\", \"sum\" or \"mean\", got \"max\"");
  EXPECT_CONTAINS(error_of({lp, t}, [](const Blobs& v) { return flow::nn::nll_loss(v[0], v[1], v[0]); }),
                  "[nll_loss] weight must be (3,) float64, got (2, 3) float64");
  for (const char* red : {"none", "sum", "mean"}) {
    SCOPED_TRACE(red);
    EXPECT_TRUE(gradcheck(
        [red](const Blobs& v) {
          return flow::nn::nll_loss(v[0], const_i64({2, 2}, {0, 2, -100, 1}), flow::constant(f64({3}, {0.5, 1, 2})),
                                    -100, red);
        },
        {{2, 3, 2}}));
  }
}

TEST_F(ImportedOps, SoftmaxCrossEntropyLossIsNllOfLogSoftmax) {
  const Tensor x = random({3, 4, 2}, DType::Float64, 3), t = i64({3, 2}, {0, 3, 1, -1, 2, 2});
  const auto got = run_all({x, t}, [](const Blobs& v) {
    const auto r = flow::nn::softmax_cross_entropy_loss(v[0], v[1], flow::constant(f64({4}, {1, 2, 3, 4})), -1, "mean");
    return Blobs{r.loss, r.log_prob};
  });
  // by hand: log_softmax over axis 1, the weighted mean over the targets not ignored
  double num = 0, den = 0;
  const double w[4] = {1, 2, 3, 4};
  for (int n = 0; n < 3; ++n)
    for (int d = 0; d < 2; ++d) {
      const int64_t c = t.data<int64_t>()[n * 2 + d];
      if (c < 0) continue;
      double s = 0;
      for (int k = 0; k < 4; ++k) s += std::exp(x.data<double>()[(n * 4 + k) * 2 + d]);
      const double lp = x.data<double>()[(n * 4 + c) * 2 + d] - std::log(s);
      num += -lp * w[c];
      den += w[c];
      EXPECT_NEAR(got[1].data<double>()[(n * 4 + c) * 2 + d], lp, 1e-12);
    }
  expect_values(got[0], {}, {num / den}, 1e-12);
  EXPECT_TRUE(gradcheck(
      [](const Blobs& v) {
        return flow::nn::softmax_cross_entropy_loss(v[0], const_i64({3, 2}, {0, 3, 1, -1, 2, 2}), Blob(), -1, "sum").loss;
      },
      {{3, 4, 2}}));
}

}  // namespace
