// Ops of detection models' heads and post-processing (ONNX TopK,
// NonMaxSuppression, RoiAlign), as torchvision's exports use them.
//
// top_k with a count known when the job is built is an ordinary op; with the
// count as a tensor (min(k, number of candidates) in a detector, computed in
// the graph) its output size depends on that value, and
// non_max_suppression's always on the data: the compiler then cuts the call
// at the op into segments (docs/architecture.md). The selection rules follow
// ONNX Runtime, the peer the model gallery compares with: top_k orders equal
// values by index; non-maximum suppression visits candidates by descending
// score (equal scores: lower index first), keeps boxes with a score above the
// threshold and drops a box whose IoU with a kept one is above the IoU
// threshold, in float32.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "jobflow/ops.h"
#include "kernel_util.h"
#include "ops_internal.h"

namespace jobflow {
namespace {

// ===========================================================================
// top_k

int64_t prod_of(const Shape& s, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) p *= s[i];
  return p;
}

// The k of a (1,) or scalar int tensor.
int64_t k_value(const Tensor& k) {
  if (k.numel() != 1) op_error("top_k", "k must hold one value, got " + shape_str(k.shape()));
  if (k.dtype() == DType::Int64) return k.data<int64_t>()[0];
  if (k.dtype() == DType::Int32) return k.data<int32_t>()[0];
  op_error("top_k", std::string("k must be int32 or int64, got ") + dtype_name(k.dtype()));
}

// The k largest (or smallest) elements along `axis` and their indices
// (int64). k_ >= 0: the count is fixed; k_ == -1: it is input 1, read when
// the call runs.
class TopK final : public Primitive {
 public:
  TopK(int64_t k, int axis, bool largest, bool sorted) : k_(k), axis_(axis), largest_(largest), sorted_(sorted) {}
  OpKind kind() const override { return OpKind::TopK; }
  Attrs attributes() const override {
    return {{"k", k_}, {"axis", int64_t{axis_}}, {"largest", int64_t{largest_}}, {"sorted", int64_t{sorted_}}};
  }
  bool differentiable_input(int i) const override { return i == 0; }
  bool output_shape_from_data() const override { return k_ < 0; }
  bool shape_reads_value(int i) const override { return k_ < 0 && i == 1; }

  std::vector<TensorSpec> specs(const std::vector<TensorSpec>& in, int64_t k) const {
    expect_inputs("top_k", in, k_ < 0 ? 2 : 1);
    const TensorSpec& x = in[0];
    kern::check_rank("top_k", x.shape);
    expect_not_bool("top_k", x, "x");
    if (x.shape.empty()) op_error("top_k", "x must have rank >= 1, got " + spec_str(x));
    const int ax = kern::norm_axis("top_k", axis_, static_cast<int>(x.shape.size()));
    if (k_ < 0 && in[1].dtype != DType::Int64 && in[1].dtype != DType::Int32)
      op_error("top_k", "k must be int32 or int64, got " + spec_str(in[1]));
    if (k >= 0 && x.shape[ax] >= 0 && k > x.shape[ax])
      op_error("top_k", "k = " + std::to_string(k) + " exceeds axis " + std::to_string(axis_) + " of x " +
                            shape_str(x.shape));
    Shape out = x.shape;
    out[ax] = k >= 0 ? k : kDynamic;
    return {{out, x.dtype}, {out, DType::Int64}};
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override { return specs(in, k_); }
  std::vector<TensorSpec> infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const override {
    if (k_ >= 0) return specs(in, k_);
    const int64_t k = k_value(v[1]);
    if (k < 0) op_error("top_k", "k must not be negative, got " + std::to_string(k));
    return specs(in, k);
  }

  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const Shape& xs = in[0].shape();
    const int ax = kern::norm_axis("top_k", axis_, in[0].ndim());
    const int64_t outer = prod_of(xs, 0, ax), n = xs[ax], inner = prod_of(xs, ax + 1, xs.size());
    const int64_t k = out[0].dim(ax);
    if (k > n) op_error("top_k", "k = " + std::to_string(k) + " exceeds axis " + std::to_string(axis_) + " of x " + shape_str(xs));
    if (k == 0 || outer * inner == 0) return;
    int64_t* yi = out[1].data<int64_t>();
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      if constexpr (!std::is_same_v<T, bool>) {
        const T* x = static_cast<const T*>(in[0].raw());
        T* yv = static_cast<T*>(out[0].raw());
        const bool largest = largest_;
        // NaN counts as the largest value (numpy's sort puts it last).
        auto before = [largest](T a, int64_t ia, T b, int64_t ib) {
          if (a != a || b != b) {
            if ((a != a) && (b != b)) return ia < ib;
            return largest ? (a != a) : (b != b);
          }
          if (a != b) return largest ? a > b : a < b;
          return ia < ib;
        };
        const int64_t rows = outer * inner;
#pragma omp parallel if (rows * n > kern::kParallelGrain)
        {
          std::vector<int64_t> order(static_cast<size_t>(n));
#pragma omp for
          for (int64_t row = 0; row < rows; ++row) {
            const int64_t o = row / inner, i = row % inner;
            const T* base = x + o * n * inner + i;
            std::iota(order.begin(), order.end(), int64_t{0});
            auto cmp = [&](int64_t a, int64_t b) { return before(base[a * inner], a, base[b * inner], b); };
            if (k < n) std::partial_sort(order.begin(), order.begin() + k, order.end(), cmp);
            else std::sort(order.begin(), order.end(), cmp);
            for (int64_t j = 0; j < k; ++j) {
              const int64_t dst = (o * k + j) * inner + i;
              yv[dst] = base[order[j] * inner];
              yi[dst] = order[j];
            }
          }
        }
      }
    });
  }

  // The values' gradient: dy scatter-added into zeros at the indices.
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>& outs, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    if (!cot[0].defined()) return {Blob()};
    return {scatter_elements(zeros_like(in[0]), outs[1], cot[0], axis_, "add")};
  }

 private:
  int64_t k_;
  int axis_;
  bool largest_, sorted_;
};

// ===========================================================================
// non_max_suppression

// ONNX Runtime's test, in float: whether boxes a and b overlap with an IoU
// above `thr`. Corners (y1, x1, y2, x2) in any order, or (xc, yc, w, h).
bool suppresses(const float* a, const float* b, bool center, float thr) {
  float ax0, ax1, ay0, ay1, bx0, bx1, by0, by1;
  if (!center) {
    ax0 = std::min(a[1], a[3]), ax1 = std::max(a[1], a[3]), ay0 = std::min(a[0], a[2]), ay1 = std::max(a[0], a[2]);
    bx0 = std::min(b[1], b[3]), bx1 = std::max(b[1], b[3]), by0 = std::min(b[0], b[2]), by1 = std::max(b[0], b[2]);
  } else {
    ax0 = a[0] - a[2] / 2.0f, ax1 = a[0] + a[2] / 2.0f, ay0 = a[1] - a[3] / 2.0f, ay1 = a[1] + a[3] / 2.0f;
    bx0 = b[0] - b[2] / 2.0f, bx1 = b[0] + b[2] / 2.0f, by0 = b[1] - b[3] / 2.0f, by1 = b[1] + b[3] / 2.0f;
  }
  const float ix0 = std::max(ax0, bx0), ix1 = std::min(ax1, bx1);
  if (ix1 <= ix0) return false;
  const float iy0 = std::max(ay0, by0), iy1 = std::min(ay1, by1);
  if (iy1 <= iy0) return false;
  const float inter = (ix1 - ix0) * (iy1 - iy0);
  if (inter <= 0.0f) return false;
  const float area_a = (ax1 - ax0) * (ay1 - ay0), area_b = (bx1 - bx0) * (by1 - by0);
  const float uni = area_a + area_b - inter;
  if (area_a <= 0.0f || area_b <= 0.0f || uni <= 0.0f) return false;
  return inter / uni > thr;
}

// Selected (batch, class, box) triples, int64 (count, 3). Inputs boxes
// (B, N, 4), scores (B, C, N), and optionally max_output_boxes_per_class
// (int64, 1 value; absent or 0: none), iou_threshold and score_threshold
// (float, 1 value each; absent: 0 and no threshold).
class NonMaxSuppression final : public Primitive {
 public:
  explicit NonMaxSuppression(bool center) : center_(center) {}
  OpKind kind() const override { return OpKind::NonMaxSuppression; }
  Attrs attributes() const override { return {{"center_point_box", int64_t{center_}}}; }
  bool differentiable_input(int) const override { return false; }
  bool output_shape_from_data() const override { return true; }

  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    if (in.size() < 2 || in.size() > 5)
      op_error("non_max_suppression", "takes 2 to 5 inputs (boxes, scores, max_output_boxes_per_class, "
                                      "iou_threshold, score_threshold), got " + std::to_string(in.size()));
    const TensorSpec &b = in[0], &s = in[1];
    if (b.dtype != DType::Float32 || s.dtype != DType::Float32)
      op_error("non_max_suppression", "boxes and scores must be float32, got " + spec_str(b) + " and " + spec_str(s));
    if (b.shape.size() != 3 || !dims_agree(b.shape[2], 4))
      op_error("non_max_suppression", "boxes must be (batch, boxes, 4), got " + spec_str(b));
    if (s.shape.size() != 3 || !dims_agree(s.shape[0], b.shape[0]) || !dims_agree(s.shape[2], b.shape[1]))
      op_error("non_max_suppression", "scores must be (batch, classes, boxes) for boxes " + shape_str(b.shape) +
                                          ", got " + spec_str(s));
    for (size_t i = 2; i < in.size(); ++i) {
      if (numel(in[i].shape) > 1 || (is_static(in[i].shape) && numel(in[i].shape) != 1))
        op_error("non_max_suppression", "input " + std::to_string(i) + " must hold one value, got " + spec_str(in[i]));
      if (i == 2 && in[i].dtype != DType::Int64)
        op_error("non_max_suppression", "max_output_boxes_per_class must be int64, got " + spec_str(in[i]));
      if (i > 2 && in[i].dtype != DType::Float32)
        op_error("non_max_suppression", "iou_threshold and score_threshold must be float32, got " + spec_str(in[i]));
    }
    return {{{kDynamic, 3}, DType::Int64}};
  }

  // Runs the selection (into `sel` when given) and returns the count.
  int64_t select(const std::vector<Tensor>& in, int64_t* sel) const {
    const int64_t B = in[0].dim(0), N = in[0].dim(1), C = in[1].dim(1);
    const int64_t max_out = in.size() > 2 && in[2].defined() && in[2].numel() ? in[2].data<int64_t>()[0] : 0;
    const float iou = in.size() > 3 && in[3].defined() && in[3].numel() ? in[3].data<float>()[0] : 0.0f;
    const bool has_thr = in.size() > 4 && in[4].defined() && in[4].numel();
    const float thr = has_thr ? in[4].data<float>()[0] : 0.0f;
    if (iou < 0.0f || iou > 1.0f)
      op_error("non_max_suppression", "iou_threshold must be in [0, 1], got " + std::to_string(iou));
    if (max_out <= 0) return 0;
    const float* boxes = in[0].data<float>();
    const float* scores = in[1].data<float>();
    int64_t count = 0;
    std::vector<int64_t> cand, kept;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < C; ++c) {
        const float* sc = scores + (b * C + c) * N;
        const float* bx = boxes + b * N * 4;
        cand.clear();
        for (int64_t i = 0; i < N; ++i)
          if (!has_thr || sc[i] > thr) cand.push_back(i);
        std::stable_sort(cand.begin(), cand.end(), [sc](int64_t a, int64_t d) { return sc[a] > sc[d]; });
        kept.clear();
        for (int64_t i : cand) {
          if (static_cast<int64_t>(kept.size()) >= max_out) break;
          bool drop = false;
          for (int64_t j : kept)
            if (suppresses(bx + i * 4, bx + j * 4, center_, iou)) {
              drop = true;
              break;
            }
          if (drop) continue;
          kept.push_back(i);
          if (sel) {
            sel[count * 3] = b;
            sel[count * 3 + 1] = c;
            sel[count * 3 + 2] = i;
          }
          ++count;
        }
      }
    return count;
  }

  std::vector<TensorSpec> infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const override {
    infer(in);
    return {{{select(v, nullptr), 3}, DType::Int64}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    select(in, out[0].data<int64_t>());
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }

 private:
  bool center_;
};

// ===========================================================================
// roi_align

// Pools each region of interest (x1, y1, x2, y2 in input pixels times
// spatial_scale) of the image its batch index names into an output_height x
// output_width grid, each bin the average (or max) of sampling_ratio^2
// bilinear samples (0: ceil(bin size) per side). half_pixel: the ROI's
// corners shift by -0.5 (ONNX coordinate_transformation_mode "half_pixel",
// torchvision's aligned=True); otherwise ("output_half_pixel") they do not,
// and a ROI is at least 1 x 1. As ONNX Runtime computes it, in float.
class RoiAlign final : public Primitive {
 public:
  RoiAlign(bool max_mode, int64_t oh, int64_t ow, int64_t sampling, double scale, bool half_pixel)
      : max_(max_mode), oh_(oh), ow_(ow), sampling_(sampling), scale_(scale), half_pixel_(half_pixel) {}
  OpKind kind() const override { return OpKind::RoiAlign; }
  Attrs attributes() const override {
    return {{"mode", std::string(max_ ? "max" : "avg")},
            {"output_height", oh_},
            {"output_width", ow_},
            {"sampling_ratio", sampling_},
            {"spatial_scale", scale_},
            {"coordinate_transformation_mode", std::string(half_pixel_ ? "half_pixel" : "output_half_pixel")}};
  }
  bool differentiable_input(int) const override { return false; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("roi_align", in, 3);
    const TensorSpec &x = in[0], &r = in[1], &bi = in[2];
    if (x.dtype != DType::Float32 || x.shape.size() != 4)
      op_error("roi_align", "x must be float32 (N, C, H, W), got " + spec_str(x));
    if (r.dtype != DType::Float32 || r.shape.size() != 2 || !dims_agree(r.shape[1], 4))
      op_error("roi_align", "rois must be float32 (num_rois, 4), got " + spec_str(r));
    if ((bi.dtype != DType::Int64 && bi.dtype != DType::Int32) || bi.shape.size() != 1 ||
        !dims_agree(bi.shape[0], r.shape[0]))
      op_error("roi_align", "batch_indices must be int64 (num_rois,) for rois " + shape_str(r.shape) + ", got " +
                                spec_str(bi));
    const int64_t rois = r.shape[0] >= 0 ? r.shape[0] : bi.shape[0];
    return {{{rois, x.shape[1], oh_, ow_}, DType::Float32}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const int64_t N = in[0].dim(0), C = in[0].dim(1), H = in[0].dim(2), W = in[0].dim(3), R = in[1].dim(0);
    const float* x = in[0].data<float>();
    const float* rois = in[1].data<float>();
    std::vector<int64_t> batch(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      batch[r] = in[2].dtype() == DType::Int64 ? in[2].data<int64_t>()[r] : in[2].data<int32_t>()[r];
      if (batch[r] < 0 || batch[r] >= N)
        op_error("roi_align", "batch index " + std::to_string(batch[r]) + " of roi " + std::to_string(r) +
                                  " is out of range for " + std::to_string(N) + " images");
    }
    float* y = out[0].data<float>();
    const float scale = static_cast<float>(scale_);
    const float offset = half_pixel_ ? 0.5f : 0.0f;
    const int64_t oh = oh_, ow = ow_;
#pragma omp parallel for if (R * C * oh * ow > 1024)
    for (int64_t r = 0; r < R; ++r) {
      const float* roi = rois + r * 4;
      const float x0 = roi[0] * scale - offset, y0 = roi[1] * scale - offset;
      const float x1 = roi[2] * scale - offset, y1 = roi[3] * scale - offset;
      float rw = x1 - x0, rh = y1 - y0;
      if (!half_pixel_) rw = std::max(rw, 1.0f), rh = std::max(rh, 1.0f);
      const float bh = rh / static_cast<float>(oh), bw = rw / static_cast<float>(ow);
      const int64_t gh = sampling_ > 0 ? sampling_ : static_cast<int64_t>(std::ceil(rh / static_cast<float>(oh)));
      const int64_t gw = sampling_ > 0 ? sampling_ : static_cast<int64_t>(std::ceil(rw / static_cast<float>(ow)));
      const float count = static_cast<float>(std::max<int64_t>(gh * gw, 1));
      for (int64_t c = 0; c < C; ++c) {
        const float* img = x + (batch[r] * C + c) * H * W;
        for (int64_t ph = 0; ph < oh; ++ph)
          for (int64_t pw = 0; pw < ow; ++pw) {
            float acc = 0.0f;
            bool first = true;
            for (int64_t iy = 0; iy < gh; ++iy) {
              float yy = y0 + static_cast<float>(ph) * bh +
                         (static_cast<float>(iy) + 0.5f) * bh / static_cast<float>(gh);
              for (int64_t ix = 0; ix < gw; ++ix) {
                float xx = x0 + static_cast<float>(pw) * bw +
                           (static_cast<float>(ix) + 0.5f) * bw / static_cast<float>(gw);
                float v = 0.0f;
                if (!(yy < -1.0f || yy > static_cast<float>(H) || xx < -1.0f || xx > static_cast<float>(W))) {
                  float sy = yy <= 0.0f ? 0.0f : yy, sx = xx <= 0.0f ? 0.0f : xx;
                  int64_t ylo = static_cast<int64_t>(sy), xlo = static_cast<int64_t>(sx), yhi, xhi;
                  if (ylo >= H - 1) yhi = ylo = H - 1, sy = static_cast<float>(ylo);
                  else yhi = ylo + 1;
                  if (xlo >= W - 1) xhi = xlo = W - 1, sx = static_cast<float>(xlo);
                  else xhi = xlo + 1;
                  const float ly = sy - static_cast<float>(ylo), lx = sx - static_cast<float>(xlo);
                  const float hy = 1.0f - ly, hx = 1.0f - lx;
                  const float a = hy * hx * img[ylo * W + xlo], b = hy * lx * img[ylo * W + xhi];
                  const float cc = ly * hx * img[yhi * W + xlo], d = ly * lx * img[yhi * W + xhi];
                  v = max_ ? std::max(std::max(std::max(a, b), cc), d) : a + b + cc + d;
                } else if (max_) {
                  v = 0.0f;
                }
                if (max_) acc = first ? v : std::max(acc, v);
                else acc += v;
                first = false;
              }
            }
            y[((r * C + c) * oh + ph) * ow + pw] = max_ ? acc : acc / count;
          }
      }
    }
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }

 private:
  bool max_;
  int64_t oh_, ow_, sampling_;
  double scale_;
  bool half_pixel_;
};

}  // namespace

std::vector<Blob> top_k(Blob x, int64_t k, int axis, bool largest, bool sorted, const std::string& name) {
  if (k < 0) throw Error("[top_k] k must not be negative, got " + std::to_string(k));
  return internal::add_node(std::make_shared<TopK>(k, axis, largest, sorted), {x}, name);
}

std::vector<Blob> top_k(Blob x, Blob k, int axis, bool largest, bool sorted, const std::string& name) {
  return internal::add_node(std::make_shared<TopK>(-1, axis, largest, sorted), {x, k}, name);
}

Blob non_max_suppression(Blob boxes, Blob scores, Blob max_output_boxes_per_class, Blob iou_threshold,
                         Blob score_threshold, bool center_point_box, const std::string& name) {
  std::vector<Blob> in{boxes, scores};
  for (Blob b : {max_output_boxes_per_class, iou_threshold, score_threshold}) {
    if (!b.defined()) break;
    in.push_back(b);
  }
  return internal::add_node(std::make_shared<NonMaxSuppression>(center_point_box), in, name)[0];
}

Blob roi_align(Blob x, Blob rois, Blob batch_indices, int64_t output_height, int64_t output_width,
               int64_t sampling_ratio, double spatial_scale, const std::string& mode, bool half_pixel,
               const std::string& name) {
  if (mode != "avg" && mode != "max") throw Error("[roi_align] mode must be \"avg\" or \"max\", got \"" + mode + "\"");
  if (output_height < 1 || output_width < 1)
    throw Error("[roi_align] output_height and output_width must be >= 1, got " + std::to_string(output_height) +
                " and " + std::to_string(output_width));
  if (sampling_ratio < 0) throw Error("[roi_align] sampling_ratio must be >= 0, got " + std::to_string(sampling_ratio));
  return internal::add_node(std::make_shared<RoiAlign>(mode == "max", output_height, output_width, sampling_ratio,
                                                       spatial_scale, half_pixel),
                            {x, rois, batch_indices}, name)[0];
}

}  // namespace jobflow
