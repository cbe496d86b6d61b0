// Forward values, error messages and gradients of the ops detection models
// need (issue 9): reduce_prod (ops/reduce.cpp), gather_nd and
// scatter_elements (ops/indexing.cpp), top_k, non_max_suppression and
// roi_align (ops/detection.cpp), and if_else (ops/control.cpp). Values are
// hand-computed; gradients by finite differences (gradcheck.h).
#include <gtest/gtest.h>

#include <jobflow/jobflow.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "op_test.h"

namespace flow = jobflow;
using namespace flow::testing;

namespace {

class OpsDetection : public OpTest {};

}  // namespace

// ===========================================================================
// reduce_prod

TEST_F(OpsDetection, ReduceProdValues) {
  Tensor x = f64({2, 3}, {1, 2, 3, -4, 5, 0.5});
  expect_values(run1(x, [](Blob v) { return flow::reduce_prod(v, {1}); }), {2}, {6, -10});
  expect_values(run1(x, [](Blob v) { return flow::reduce_prod(v, {0}, true); }), {1, 3}, {-4, 10, 1.5});
  expect_values(run1(x, [](Blob v) { return flow::reduce_prod(v); }), {}, {-60});
  // Integers multiply in int64: the numel of a shape.
  Tensor s = i64({4}, {1, 3, 320, 320});
  Tensor p = run1(s, [](Blob v) { return flow::reduce_prod(v); });
  EXPECT_EQ(p.dtype(), DType::Int64);
  expect_values(p, {}, {307200});
  // The empty product is 1.
  expect_values(run1(x, [](Blob v) { return flow::reduce_prod(flow::constant(f64({2, 0}, {})), {1}, true) + v * 0.0; }),
                {2, 3}, {1, 1, 1, 1, 1, 1});
  EXPECT_CONTAINS(error_of({x}, [](const Blobs& b) { return flow::reduce_prod(b[0], {2}); }),
                  "[reduce_prod] axis 2 is out of range for input (2, 3)");
}

TEST_F(OpsDetection, ReduceProdGradient) {
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::reduce_prod(x[0], {1}); }, {{3, 4}}, away_from_zero()));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::reduce_prod(x[0], {0, 2}, true); }, {{2, 3, 2}},
                        away_from_zero()));
}

// ===========================================================================
// gather_nd

TEST_F(OpsDetection, GatherNDValues) {
  Tensor x = iota({2, 3, 2});  // x[i][j][k] = 6i + 2j + k
  // Whole elements: indices (2, 3).
  expect_values(run2(x, i64({2, 3}, {0, 1, 1, 1, 2, 0}), [](Blob a, Blob i) { return flow::gather_nd(a, i); }), {2},
                {3, 10});
  // Slices: indices (2, 1) pick rows of dim 0; negative indices count back.
  expect_values(run2(x, i64({2, 1}, {1, -2}), [](Blob a, Blob i) { return flow::gather_nd(a, i); }), {2, 3, 2},
                {6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5});
  // batch_dims 1: per batch, rows of its (3, 2) block.
  expect_values(run2(x, i64({2, 2, 1}, {2, 0, 1, 1}), [](Blob a, Blob i) { return flow::gather_nd(a, i, 1); }),
                {2, 2, 2}, {4, 5, 0, 1, 8, 9, 8, 9});
  // ONNX's own example: data (2, 2), indices [[0, 0], [1, 1]] -> [0, 3].
  expect_values(run2(iota({2, 2}), i64({2, 2}, {0, 0, 1, 1}), [](Blob a, Blob i) { return flow::gather_nd(a, i); }),
                {2}, {0, 3});
  EXPECT_CONTAINS(error_of({x, i64({1, 2}, {0, 3})}, [](const Blobs& b) { return flow::gather_nd(b[0], b[1]); }),
                  "[gather_nd] index 3 is out of range for a dim of size 3");
  EXPECT_CONTAINS(error_of({x, i64({1, 4}, {0, 0, 0, 0})}, [](const Blobs& b) { return flow::gather_nd(b[0], b[1]); }),
                  "[gather_nd] the last dim of indices (1, 4) must be in 1..3");
  EXPECT_CONTAINS(error_of({x, f64({1, 1}, {0})}, [](const Blobs& b) { return flow::gather_nd(b[0], b[1]); }),
                  "[gather_nd] indices must be int32 or int64");
}

TEST_F(OpsDetection, GatherNDGradient) {
  // Repeated tuples add up.
  Tensor idx = i64({3, 2}, {0, 1, 2, 0, 0, 1});
  GradCheckOptions o;
  EXPECT_TRUE(gradcheck([idx](const Blobs& x) { return flow::gather_nd(x[0], flow::constant(idx)); }, {{3, 2, 2}}, o));
  Tensor idx_b = i64({2, 1}, {1, 0});
  EXPECT_TRUE(gradcheck([idx_b](const Blobs& x) { return flow::gather_nd(x[0], flow::constant(idx_b), 1); },
                        {{2, 3}}, o));
}

// ===========================================================================
// scatter_elements

TEST_F(OpsDetection, ScatterElementsValues) {
  // ONNX's example: data zeros (3, 3), axis 0.
  Tensor data = f64({3, 3}, {0, 0, 0, 0, 0, 0, 0, 0, 0});
  Tensor idx = i64({2, 3}, {1, 0, 2, 0, 2, 1});
  Tensor upd = f64({2, 3}, {1.0, 1.1, 1.2, 2.0, 2.1, 2.2});
  auto run = [&](const Tensor& d, const Tensor& i, const Tensor& u, int axis, const std::string& red) {
    return run_n({d, i, u}, [&](const Blobs& b) { return flow::scatter_elements(b[0], b[1], b[2], axis, red); });
  };
  expect_values(run(data, idx, upd, 0, "none"), {3, 3}, {2.0, 1.1, 0.0, 1.0, 0.0, 2.2, 0.0, 2.1, 1.2});
  // axis 1, a negative index: [[1, 2, 3, 4, 5]] with [[1, -2]] <- [[1.1, 2.1]].
  expect_values(run(f64({1, 5}, {1, 2, 3, 4, 5}), i64({1, 2}, {1, -2}), f64({1, 2}, {1.1, 2.1}), 1, "none"), {1, 5},
                {1, 1.1, 3, 2.1, 5});
  // Reductions at a repeated index.
  Tensor d1 = f64({1, 3}, {1, 2, 3}), i1 = i64({1, 2}, {1, 1}), u1 = f64({1, 2}, {4, 5});
  expect_values(run(d1, i1, u1, 1, "none"), {1, 3}, {1, 5, 3});
  expect_values(run(d1, i1, u1, 1, "add"), {1, 3}, {1, 11, 3});
  expect_values(run(d1, i1, u1, 1, "mul"), {1, 3}, {1, 40, 3});
  expect_values(run(d1, i1, f64({1, 2}, {4, -5}), 1, "max"), {1, 3}, {1, 4, 3});
  expect_values(run(d1, i1, f64({1, 2}, {4, -5}), 1, "min"), {1, 3}, {1, -5, 3});
  EXPECT_CONTAINS(error_of({d1, i64({1, 1}, {3}), f64({1, 1}, {0})},
                           [](const Blobs& b) { return flow::scatter_elements(b[0], b[1], b[2], 1); }),
                  "[scatter_elements] index 3 is out of range for axis 1 of size 3");
  EXPECT_CONTAINS(error_of({d1, i64({1, 2}, {0, 1}), f64({1, 1}, {0})},
                           [](const Blobs& b) { return flow::scatter_elements(b[0], b[1], b[2], 1); }),
                  "[scatter_elements] indices (1, 2) int64 and updates (1, 1) float64 differ in shape");
  EXPECT_CONTAINS(error_of({d1}, [](const Blobs& b) {
                    return flow::scatter_elements(b[0], flow::constant(i64({1, 1}, {0})),
                                                  flow::constant(f64({1, 1}, {0})), 1, "sum");
                  }),
                  "[scatter_elements] reduction must be");
}

TEST_F(OpsDetection, ScatterElementsGradient) {
  Tensor idx = i64({2, 2}, {1, 0, 2, 0});
  // data: dy, zero where written ("none"); dy itself ("add").
  EXPECT_TRUE(gradcheck(
      [idx](const Blobs& x) { return flow::scatter_elements(x[0], flow::constant(idx), x[1] * 0.0 + 1.0, 0); },
      {{3, 2}, {2, 2}}));
  EXPECT_TRUE(gradcheck(
      [idx](const Blobs& x) {
        return flow::scatter_elements(x[0], flow::constant(idx), flow::constant(f64({2, 2}, {1, 2, 3, 4})), 0, "add");
      },
      {{3, 2}}));
}

// ===========================================================================
// top_k

TEST_F(OpsDetection, TopKValues) {
  Tensor x = f64({2, 4}, {3, 1, 4, 1, 5, 9, 2, 6});
  auto vi = run_all({x}, [](const Blobs& b) { return flow::top_k(b[0], 2); });
  expect_values(vi[0], {2, 2}, {4, 3, 9, 6});
  EXPECT_EQ(vi[1].dtype(), DType::Int64);
  expect_values(vi[1], {2, 2}, {2, 0, 1, 3});
  // Smallest, along axis 0; equal values in index order.
  auto sm = run_all({x}, [](const Blobs& b) { return flow::top_k(b[0], 1, 0, false); });
  expect_values(sm[0], {1, 4}, {3, 1, 2, 1});
  expect_values(sm[1], {1, 4}, {0, 0, 1, 0});
  auto ties = run_all({f64({5}, {2, 7, 7, 2, 7})}, [](const Blobs& b) { return flow::top_k(b[0], 4); });
  expect_values(ties[0], {4}, {7, 7, 7, 2});
  expect_values(ties[1], {4}, {1, 2, 4, 0});
  // k computed in the graph: the job runs in segments, the size per call.
  for (int64_t k : {0, 3}) {
    auto dyn = run_all({x, i64({1}, {k})}, [](const Blobs& b) { return flow::top_k(b[0], b[1]); });
    ASSERT_EQ(dyn[0].shape(), (Shape{2, k}));
    if (k == 3) {
      expect_values(dyn[0], {2, 3}, {4, 3, 1, 9, 6, 5});
      expect_values(dyn[1], {2, 3}, {2, 0, 1, 1, 3, 0});
    }
  }
  EXPECT_CONTAINS(error_of({x}, [](const Blobs& b) { return flow::top_k(b[0], 5)[0]; }),
                  "[top_k] k = 5 exceeds axis -1 of x (2, 4)");
  EXPECT_CONTAINS(error_of({x, i64({1}, {7})}, [](const Blobs& b) { return flow::top_k(b[0], b[1])[0]; }),
                  "[top_k] k = 7 exceeds axis -1 of x (2, 4)");
  EXPECT_CONTAINS(error_of({x}, [](const Blobs& b) { return flow::top_k(b[0], 1, 2)[0]; }), "[top_k]");
}

TEST_F(OpsDetection, TopKGradient) {
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::top_k(x[0], 2, 1)[0]; }, {{3, 5}}));
  EXPECT_TRUE(gradcheck([](const Blobs& x) { return flow::top_k(x[0], 1, 0, false)[0]; }, {{4, 2}}));
}

// ===========================================================================
// non_max_suppression

TEST_F(OpsDetection, NonMaxSuppressionValues) {
  // ONNX's test "suppress_by_IOU": six boxes (y1, x1, y2, x2), one class.
  Tensor boxes = f32({1, 6, 4}, {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, -0.1f, 1, 0.9f,
                                 0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100, 1, 101});
  Tensor scores = f32({1, 1, 6}, {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f});
  auto nms = [&](int64_t max_out, float iou, float thr) {
    return run_n({boxes, scores, i64({1}, {max_out}), f32({1}, {iou}), f32({1}, {thr})}, [](const Blobs& b) {
      return flow::non_max_suppression(b[0], b[1], b[2], b[3], b[4]);
    });
  };
  Tensor r = nms(3, 0.5f, 0.0f);
  EXPECT_EQ(r.dtype(), DType::Int64);
  expect_values(r, {3, 3}, {0, 0, 3, 0, 0, 0, 0, 0, 5});
  // The score threshold drops boxes 4 and 5, a limit of 2 keeps the first two.
  expect_values(nms(3, 0.5f, 0.4f), {2, 3}, {0, 0, 3, 0, 0, 0});
  expect_values(nms(2, 0.5f, 0.0f), {2, 3}, {0, 0, 3, 0, 0, 0});
  // Nothing selected: (0, 3).
  EXPECT_EQ(nms(0, 0.5f, 0.0f).shape(), (Shape{0, 3}));
  EXPECT_EQ(nms(3, 0.5f, 0.99f).shape(), (Shape{0, 3}));
  // Center format (xc, yc, w, h), two classes.
  Tensor cb = f32({1, 3, 4}, {0.5f, 0.5f, 1, 1, 0.6f, 0.5f, 1, 1, 5, 5, 1, 1});
  Tensor cs = f32({1, 2, 3}, {0.9f, 0.8f, 0.7f, 0.1f, 0.2f, 0.3f});
  Tensor c = run_n({cb, cs, i64({1}, {10}), f32({1}, {0.5f})}, [](const Blobs& b) {
    return flow::non_max_suppression(b[0], b[1], b[2], b[3], flow::Blob(), true);
  });
  expect_values(c, {4, 3}, {0, 0, 0, 0, 0, 2, 0, 1, 2, 0, 1, 1});
  EXPECT_CONTAINS(error_of({boxes, f32({1, 1, 5}, {1, 1, 1, 1, 1})},
                           [](const Blobs& b) { return flow::non_max_suppression(b[0], b[1]); }),
                  "[non_max_suppression] scores must be (batch, classes, boxes) for boxes (1, 6, 4)");
}

// ===========================================================================
// roi_align

TEST_F(OpsDetection, RoiAlignValues) {
  // x[0, 0] = 4 x 4 ramp: v(y, x) = 4y + x, so bilinear samples are exact:
  // a bin's average is the ramp at the bin's center.
  Tensor x = f32({1, 1, 4, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  Tensor rois = f32({1, 4}, {0, 0, 2, 2});  // x1, y1, x2, y2
  Tensor bi = i64({1}, {0});
  auto ra = [&](const Tensor& r, bool half, const std::string& mode, int64_t sr) {
    return run_n({x, r, bi}, [&](const Blobs& b) { return flow::roi_align(b[0], b[1], b[2], 2, 2, sr, 1.0, mode, half); });
  };
  // output_half_pixel: bins of 1 x 1 from (0, 0); sample centers (0.5, 0.5) ...
  expect_values(ra(rois, false, "avg", 2), {1, 1, 2, 2}, {2.5, 3.5, 6.5, 7.5}, 1e-5);
  // half_pixel: the ROI shifts by -0.5; samples below 0 clamp to 0.
  // Bin (0, 0) samples y, x in {-0.25, 0.25} -> {0, 0.25}: mean ramp 4 * 0.125 + 0.125.
  expect_values(ra(rois, true, "avg", 2), {1, 1, 2, 2}, {0.625, 1.5, 4.125, 5.0}, 1e-5);
  // Adaptive sampling (0): ceil(bin size) = 1 sample per bin side.
  expect_values(ra(rois, false, "avg", 0), {1, 1, 2, 2}, {2.5, 3.5, 6.5, 7.5}, 1e-5);
  // max: the largest weighted corner of each sample, then the largest sample.
  Tensor mx = ra(f32({1, 4}, {0, 0, 4, 4}), false, "max", 1);
  ASSERT_EQ(mx.shape(), (Shape{1, 1, 2, 2}));
  // Bin (1, 1): its sample at (3, 3) falls on a pixel (15 with weight 1... *0.25 at the corner split).
  EXPECT_GT(mx.at(3), mx.at(0));
  EXPECT_CONTAINS(error_of({x, rois, i64({1}, {1})},
                           [](const Blobs& b) { return flow::roi_align(b[0], b[1], b[2], 2, 2); }),
                  "[roi_align] batch index 1 of roi 0 is out of range for 1 images");
  EXPECT_CONTAINS(error_of({x, rois, bi}, [](const Blobs& b) { return flow::roi_align(b[0], b[1], b[2], 2, 2, 0, 1.0, "min"); }),
                  "[roi_align] mode must be \"avg\" or \"max\", got \"min\"");
}

// ===========================================================================
// if_else: a branch per call

namespace {
std::shared_ptr<flow::CompiledJob> branch(const std::string& name, const std::function<Blob(Blob)>& f) {
  auto job = flow::global_function(flow::Predict, flow::FunctionConfig().name(name),
                                   {flow::Numpy::Placeholder({-1}, DType::Float64, "x")},
                                   [&](Blob x) { return f(x); });
  return job.compiled();
}
}  // namespace

TEST_F(OpsDetection, IfElseRunsTheBranchTheConditionNames) {
  auto then_job = branch("then", [](Blob x) { return x * 2.0; });
  // The other branch returns fewer elements: the size is known per call.
  auto else_job = branch("else", [](Blob x) { return flow::slice(x, {0}, {1}); });
  Tensor x = f64({3}, {1, 2, 3});
  for (bool c : {true, false}) {
    Tensor cond(Shape{}, DType::Bool);
    cond.data<bool>()[0] = c;
    Tensor y = run_n({cond, x}, [&](const Blobs& b) { return flow::if_else(b[0], {b[1]}, then_job, else_job)[0]; });
    if (c) expect_values(y, {3}, {2, 4, 6});
    else expect_values(y, {1}, {1});
  }
  auto int_job = flow::global_function(flow::Predict, flow::FunctionConfig().name("ints"),
                                       {flow::Numpy::Placeholder({-1}, DType::Float64, "x")},
                                       [](Blob x) { return flow::cast(x, DType::Int64); })
                     .compiled();
  EXPECT_CONTAINS(error_of({x}, [&](const Blobs& b) {
                    return flow::if_else(flow::constant(Tensor(Shape{}, DType::Bool)), {b[0]}, then_job, int_job)[0];
                  }),
                  "[if] output 0 is (-1,) float64 in 'then' and (-1,) int64 in 'ints'");
}
