// resize (ONNX Resize / Upsample): nearest, linear and cubic interpolation
// over any axes, with ONNX's coordinate transformation modes and nearest
// rounding modes; its gradient resize_grad scatters dy back with the same
// weights.
//
// Each axis gets a table: for every output coordinate, the input indices it
// reads (1 tap for nearest, 2 for linear, 4 for cubic) and their weights,
// indices clamped to the axis (edge padding) or, with exclude_outside,
// dropped with the remaining weights renormalized. An output element is the
// weighted sum over the product of its axes' taps. With
// tf_crop_and_resize, an element whose coordinate falls outside the input
// on some axis is extrapolation_value.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <type_traits>
#include <vector>

#include "jobflow/ops.h"
#include "cpu/simd_kernels.h"
#include "kernel_util.h"
#include "ops_internal.h"

namespace jobflow {
namespace {

using kern::check_rank;

enum class Mode { Nearest, Linear, Cubic };
enum class Coord { HalfPixel, HalfPixelSymmetric, PytorchHalfPixel, AlignCorners, Asymmetric, TfHalfPixelForNn, TfCropAndResize };
enum class Near { RoundPreferFloor, RoundPreferCeil, Floor, Ceil };

const char* mode_name(Mode m) { return m == Mode::Nearest ? "nearest" : m == Mode::Linear ? "linear" : "cubic"; }
const char* const kCoordNames[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                   "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
const char* const kNearNames[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};

struct Params {
  Mode mode = Mode::Nearest;
  Coord coord = Coord::HalfPixel;
  Near nearest = Near::RoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0.0;
  std::vector<double> roi;     // tf_crop_and_resize: starts, then ends (2 * rank)
  std::vector<double> scales;  // given scales (output = floor(input * scale)); empty when sizes are
  Shape sizes;                 // given output sizes; empty when scales are
  // 1: the scales, 2: the sizes are input 1, known at the call (then both
  // vectors above are empty until with_values fills them).
  int shape_input = 0;

  Attrs attrs() const {
    return {{"mode", std::string(mode_name(mode))},
            {"coordinate_transformation_mode", std::string(kCoordNames[static_cast<int>(coord)])},
            {"nearest_mode", std::string(kNearNames[static_cast<int>(nearest)])},
            {"cubic_coeff_a", cubic_a},
            {"exclude_outside", int64_t{exclude_outside}},
            {"extrapolation_value", extrapolation},
            {"roi", roi},
            {"scales", scales},
            {"sizes", sizes},
            {"shape_input", int64_t{shape_input}}};
  }
  // The parameters of one call: the scales or sizes from input 1's values.
  Params with_values(const Tensor& t) const {
    Params q = *this;
    if (shape_input == 1) {
      q.scales.resize(static_cast<size_t>(t.numel()));
      for (int64_t i = 0; i < t.numel(); ++i) q.scales[i] = t.at(i);
    } else if (shape_input == 2) {
      q.sizes.resize(static_cast<size_t>(t.numel()));
      for (int64_t i = 0; i < t.numel(); ++i) q.sizes[i] = static_cast<int64_t>(t.at(i));
    }
    return q;
  }
  // Input 1 (runtime scales or sizes): one value per axis of x.
  void check_shape_input(const char* op, const TensorSpec& x, const TensorSpec& t) const {
    const bool sc = shape_input == 1;
    if (sc ? t.dtype != DType::Float32 : t.dtype != DType::Int64)
      op_error(op, std::string(sc ? "scales must be float32" : "sizes must be int64") + ", got " + spec_str(t));
    if (t.shape.size() != 1 || !dims_agree(t.shape[0], static_cast<int64_t>(x.shape.size())))
      op_error(op, std::string(sc ? "scales" : "sizes") + " must have one value per axis of x " + shape_str(x.shape) +
                       ", got " + spec_str(t));
  }
  int taps() const { return mode == Mode::Nearest ? 1 : mode == Mode::Linear ? 2 : 4; }

  // The output shape for x (dynamic dims of x stay dynamic with scales).
  Shape out_shape(const char* op, const Shape& xs) const {
    const size_t r = xs.size();
    if (!sizes.empty()) {
      if (sizes.size() != r)
        op_error(op, "sizes " + shape_str(sizes) + " must have one value per axis of x " + shape_str(xs));
      return sizes;
    }
    if (scales.size() != r)
      op_error(op, "scales (" + std::to_string(scales.size()) + " values) must have one value per axis of x " +
                       shape_str(xs));
    Shape out(r);
    for (size_t d = 0; d < r; ++d) {
      if (xs[d] < 0) {
        out[d] = -1;  // known at the call
        continue;
      }
      // ONNX: floor(input * scale).
      out[d] = static_cast<int64_t>(std::floor(static_cast<double>(xs[d]) * scales[d]));
      if (out[d] < 1 && xs[d] > 0)
        op_error(op, "scale " + onnx_number(scales[d]) + " of axis " + std::to_string(d) + " leaves no element of " +
                         std::to_string(xs[d]));
    }
    return out;
  }
  static std::string onnx_number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
  }
  void check(const char* op, const TensorSpec& x) const {
    check_rank(op, x.shape);
    if (x.dtype == DType::Bool && mode != Mode::Nearest)
      op_error(op, std::string(mode_name(mode)) + " interpolation needs numeric data, got " + spec_str(x));
    if (mode != Mode::Nearest && !is_floating(x.dtype))
      op_error(op, std::string(mode_name(mode)) + " interpolation needs float32 or float64 data, got " + spec_str(x));
    if (coord == Coord::TfCropAndResize && roi.size() != 2 * x.shape.size())
      op_error(op, "tf_crop_and_resize needs a roi of " + std::to_string(2 * x.shape.size()) + " values for x " +
                       shape_str(x.shape) + ", got " + std::to_string(roi.size()));
  }
};

// One axis's table: for output coordinate i, taps k < K read input index
// idx[i*K+k] with weight w[i*K+k]; valid[i] is false where the coordinate
// lies outside the input (tf_crop_and_resize: extrapolation_value).
struct AxisTable {
  int K = 1;
  std::vector<int64_t> idx;
  std::vector<double> w;
  std::vector<char> valid;
  bool identity = false;  // output i reads input i with weight 1
};

void cubic_coeffs(double t, double A, double c[4]) {
  const double s = 1.0 - t;
  c[0] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
  c[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
  c[2] = ((A + 2) * s - (A + 3)) * s * s + 1;
  c[3] = ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A;
}

AxisTable axis_table(const Params& p, int d, int rank, int64_t in, int64_t out) {
  AxisTable t;
  t.K = p.taps();
  t.idx.resize(static_cast<size_t>(out * t.K));
  t.w.resize(static_cast<size_t>(out * t.K));
  t.valid.assign(static_cast<size_t>(out), 1);
  const double scale = p.scales.empty() ? static_cast<double>(out) / static_cast<double>(in) : p.scales[d];
  const double L = static_cast<double>(in);
  // ONNX's length_resized: input * scale, which is not the integer output
  // size when scales are given (align_corners divides by it).
  const double Lr = L * scale;
  bool identity = out == in;
  for (int64_t i = 0; i < out; ++i) {
    const double xr = static_cast<double>(i);
    double x = 0;
    switch (p.coord) {
      case Coord::HalfPixel: x = (xr + 0.5) / scale - 0.5; break;
      case Coord::HalfPixelSymmetric: {
        const double adj = static_cast<double>(out) / Lr;
        const double center = L / 2;
        x = center * (1 - adj) + (xr + 0.5) / scale - 0.5;
        break;
      }
      case Coord::PytorchHalfPixel: x = Lr > 1 ? (xr + 0.5) / scale - 0.5 : 0.0; break;
      case Coord::AlignCorners: x = Lr == 1 ? 0.0 : xr * (L - 1) / (Lr - 1); break;
      case Coord::Asymmetric: x = xr / scale; break;
      case Coord::TfHalfPixelForNn: x = (xr + 0.5) / scale; break;
      case Coord::TfCropAndResize: {
        const double s = p.roi[d], e = p.roi[rank + d];
        x = Lr > 1 ? s * (L - 1) + xr * (e - s) * (L - 1) / (Lr - 1) : 0.5 * (s + e) * (L - 1);
        if (x < 0 || x > L - 1) t.valid[i] = 0;
        break;
      }
    }
    int64_t* ix = &t.idx[i * t.K];
    double* w = &t.w[i * t.K];
    const double f = std::floor(x), r = x - f;
    const int64_t fi = static_cast<int64_t>(f);
    if (p.mode == Mode::Nearest) {
      int64_t n = fi;
      switch (p.nearest) {
        case Near::RoundPreferFloor: n = r <= 0.5 ? fi : fi + 1; break;
        case Near::RoundPreferCeil: n = r < 0.5 ? fi : fi + 1; break;
        case Near::Floor: n = fi; break;
        case Near::Ceil: n = r > 0 ? fi + 1 : fi; break;
      }
      ix[0] = std::min<int64_t>(std::max<int64_t>(n, 0), in - 1);
      w[0] = 1.0;
    } else {
      double c[4];
      int64_t first;
      if (p.mode == Mode::Linear) {
        c[0] = 1 - r, c[1] = r;
        first = fi;
      } else {
        cubic_coeffs(r, p.cubic_a, c);
        first = fi - 1;
      }
      double sum = 0;
      for (int k = 0; k < t.K; ++k) {
        const int64_t j = first + k;
        if (p.exclude_outside && (j < 0 || j >= in)) c[k] = 0;
        sum += c[k];
      }
      for (int k = 0; k < t.K; ++k) {
        ix[k] = std::min<int64_t>(std::max<int64_t>(first + k, 0), in - 1);
        w[k] = p.exclude_outside && sum != 0 ? c[k] / sum : c[k];
      }
    }
    if (identity) {
      double wi = 0, wo = 0;
      for (int k = 0; k < t.K; ++k) (ix[k] == i ? wi : wo) += std::fabs(w[k]);
      identity = t.valid[i] && wi == 1.0 && wo == 0.0;
    }
  }
  t.identity = identity;
  return t;
}

// The tables of every axis and how the work splits: `planes` = the product
// of the leading axes whose tables are the identity (disjoint blocks of x
// and y), the rest interpolated.
struct Plan {
  int rank = 0;
  std::vector<AxisTable> axes;
  int lead = 0;  // leading identity axes
  int64_t planes = 1, x_plane = 1, y_plane = 1;
  int64_t xst[kern::kMaxRank] = {}, yst[kern::kMaxRank] = {};
  Shape xs, ys;
};

Plan make_plan(const Params& p, const Shape& xs, const Shape& ys) {
  Plan P;
  P.rank = static_cast<int>(xs.size());
  P.xs = xs, P.ys = ys;
  for (int d = 0; d < P.rank; ++d) P.axes.push_back(axis_table(p, d, P.rank, xs[d], ys[d]));
  while (P.lead < P.rank - 1 && P.axes[P.lead].identity) P.planes *= xs[P.lead++];
  int64_t sx = 1, sy = 1;
  for (int d = P.rank - 1; d >= 0; --d) {
    P.xst[d] = sx, P.yst[d] = sy;
    sx *= xs[d], sy *= ys[d];
  }
  P.x_plane = P.lead > 0 ? P.xst[P.lead - 1] : sx;
  P.y_plane = P.lead > 0 ? P.yst[P.lead - 1] : sy;
  return P;
}

// Visits the taps of one output row: the axes lead..rank-2 at the row's
// coordinates `o`, as (x offset, weight) pairs in `combos` (`valid` false
// when one of them is outside the input).
void row_combos(const Plan& P, const int64_t* o, std::vector<std::pair<int64_t, double>>& combos, bool& valid) {
  combos.assign(1, {0, 1.0});
  valid = true;
  for (int d = P.lead; d < P.rank - 1; ++d) {
    const AxisTable& t = P.axes[d];
    if (!t.valid[o[d]]) valid = false;
    const size_t n = combos.size();
    if (t.K == 1) {
      const int64_t off = t.idx[o[d]] * P.xst[d];
      for (size_t c = 0; c < n; ++c) combos[c].first += off;
      continue;
    }
    combos.resize(n * t.K);
    for (int k = t.K - 1; k >= 0; --k)
      for (size_t c = 0; c < n; ++c) {
        const auto base = combos[c];
        combos[k * n + c] = {base.first + t.idx[o[d] * t.K + k] * P.xst[d], base.second * t.w[o[d] * t.K + k]};
      }
  }
}

// Rows of the interpolated part: every output coordinate of the axes
// lead..rank-2 (the last axis is the inner loop).
int64_t rows_per_plane(const Plan& P) {
  int64_t rows = 1;
  for (int d = P.lead; d < P.rank - 1; ++d) rows *= P.ys[d];
  return rows;
}
void row_coords(const Plan& P, int64_t row, int64_t* o) {
  for (int d = P.rank - 2; d >= P.lead; --d) {
    o[d] = row % P.ys[d];
    row /= P.ys[d];
  }
}

// Float32 linear interpolation of the last two axes, every leading axis
// kept and every coordinate inside (the bilinear upsampling of a
// segmentation head): each output row blends its two input rows once into
// a row of the input's width, then each output pixel blends its two
// neighbours there, summing in float32 as ONNX Runtime and PyTorch do
// (the general loop below sums every tap in float64: lraspp's 21 x 32 x
// 32 logits to 256 x 256 took 3.5 ms). False where the plan is not that.
bool bilinear_rows(const Plan& P, const float* x, float* y) {
  const int r = P.rank;
  if (r < 2 || P.lead != r - 2) return false;
  const AxisTable &th = P.axes[r - 2], &tw = P.axes[r - 1];
  if (th.K != 2 || tw.K != 2 ||
      std::find(th.valid.begin(), th.valid.end(), 0) != th.valid.end() ||
      std::find(tw.valid.begin(), tw.valid.end(), 0) != tw.valid.end())
    return false;
  const int64_t H = P.xs[r - 2], W = P.xs[r - 1], OH = P.ys[r - 2], OW = P.ys[r - 1];
  if (W > INT32_MAX) return false;
  std::vector<int32_t> i0(static_cast<size_t>(OW)), i1(static_cast<size_t>(OW));
  std::vector<float> w0(static_cast<size_t>(OW)), w1(static_cast<size_t>(OW));
  for (int64_t j = 0; j < OW; ++j) {
    i0[j] = static_cast<int32_t>(tw.idx[2 * j]), i1[j] = static_cast<int32_t>(tw.idx[2 * j + 1]);
    w0[j] = static_cast<float>(tw.w[2 * j]), w1[j] = static_cast<float>(tw.w[2 * j + 1]);
  }
  const int64_t total = P.planes * OH;
#pragma omp parallel if (total * OW > kern::kParallelGrain)
  {
    std::vector<float> blend(static_cast<size_t>(W));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < total; ++t) {
      const int64_t plane = t / OH, oy = t % OH;
      const float* r0 = x + (plane * H + th.idx[2 * oy]) * W;
      const float* r1 = x + (plane * H + th.idx[2 * oy + 1]) * W;
      const float a = static_cast<float>(th.w[2 * oy]), b = static_cast<float>(th.w[2 * oy + 1]);
      for (int64_t i = 0; i < W; ++i) blend[i] = a * r0[i] + b * r1[i];
      float* yr = y + (plane * OH + oy) * OW;
      cpu::lerp_row(blend.data(), i0.data(), i1.data(), w0.data(), w1.data(), yr, OW);
    }
  }
  return true;
}

template <class T>
void resize_forward(const Params& p, const Tensor& X, const Tensor& Y) {
  if (Y.numel() == 0) return;
  const T* x = static_cast<const T*>(X.raw());
  T* y = static_cast<T*>(Y.raw());
  if (X.numel() == 0) {  // nothing to read: only extrapolation could say something
    for (int64_t i = 0; i < Y.numel(); ++i) y[i] = static_cast<T>(p.extrapolation);
    return;
  }
  const Plan P = make_plan(p, X.shape(), Y.shape());
  if constexpr (std::is_same_v<T, float>) {
    if (p.mode == Mode::Linear && bilinear_rows(P, x, y)) return;
  }
  const AxisTable& last = P.axes[P.rank - 1];
  const int64_t W = P.ys[P.rank - 1], rows = rows_per_plane(P), total = P.planes * rows;
  const T extra = static_cast<T>(p.extrapolation);
#pragma omp parallel if (Y.numel() > kern::kParallelGrain)
  {
    std::vector<std::pair<int64_t, double>> combos;
    int64_t o[kern::kMaxRank] = {};
#pragma omp for
    for (int64_t t = 0; t < total; ++t) {
      const int64_t plane = t / rows, row = t % rows;
      row_coords(P, row, o);
      bool valid;
      row_combos(P, o, combos, valid);
      const T* xp = x + plane * P.x_plane;
      T* yr = y + plane * P.y_plane + row * W;
      if (!valid) {
        for (int64_t j = 0; j < W; ++j) yr[j] = extra;
        continue;
      }
      if (p.mode == Mode::Nearest) {
        const int64_t base = combos[0].first;
        for (int64_t j = 0; j < W; ++j) yr[j] = last.valid[j] ? xp[base + last.idx[j]] : extra;
        continue;
      }
      const int K = last.K;
      for (int64_t j = 0; j < W; ++j) {
        if (!last.valid[j]) {
          yr[j] = extra;
          continue;
        }
        double acc = 0;
        for (const auto& [off, wc] : combos) {
          const T* xr = xp + off;
          double a = 0;
          for (int k = 0; k < K; ++k) a += last.w[j * K + k] * static_cast<double>(xr[last.idx[j * K + k]]);
          acc += wc * a;
        }
        yr[j] = static_cast<T>(acc);
      }
    }
  }
}

// dx = the transpose of the forward map applied to dy. Planes are disjoint
// and run in parallel; inside one plane several outputs read one input.
template <class T>
void resize_backward(const Params& p, const Tensor& DY, const Tensor& DX) {
  T* dx = static_cast<T*>(DX.raw());
  for (int64_t i = 0; i < DX.numel(); ++i) dx[i] = T(0);
  if (DY.numel() == 0 || DX.numel() == 0) return;
  const T* dy = static_cast<const T*>(DY.raw());
  const Plan P = make_plan(p, DX.shape(), DY.shape());
  const AxisTable& last = P.axes[P.rank - 1];
  const int64_t W = P.ys[P.rank - 1], rows = rows_per_plane(P);
#pragma omp parallel if (DY.numel() > kern::kParallelGrain && P.planes > 1)
  {
    std::vector<std::pair<int64_t, double>> combos;
    int64_t o[kern::kMaxRank] = {};
#pragma omp for
    for (int64_t plane = 0; plane < P.planes; ++plane) {
      T* xp = dx + plane * P.x_plane;
      for (int64_t row = 0; row < rows; ++row) {
        row_coords(P, row, o);
        bool valid;
        row_combos(P, o, combos, valid);
        if (!valid) continue;
        const T* g = dy + plane * P.y_plane + row * W;
        const int K = last.K;
        for (int64_t j = 0; j < W; ++j) {
          if (!last.valid[j]) continue;
          for (const auto& [off, wc] : combos)
            for (int k = 0; k < K; ++k)
              xp[off + last.idx[j * K + k]] += static_cast<T>(wc * last.w[j * K + k] * static_cast<double>(g[j]));
        }
      }
    }
  }
}

Blob resize_grad(Blob dy, Blob x, Blob shape_input, const Params& p);

class Resize final : public Primitive {
 public:
  explicit Resize(Params p) : p_(std::move(p)) {}
  OpKind kind() const override { return OpKind::Resize; }
  Attrs attributes() const override { return p_.attrs(); }
  bool differentiable_input(int i) const override { return i == 0; }
  bool output_shape_from_data() const override { return p_.shape_input != 0; }
  bool shape_reads_value(int i) const override { return p_.shape_input != 0 && i == 1; }
  bool writes_output_anywhere(int) const override { return true; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, p_.shape_input ? 2 : 1);
    p_.check(name(), in[0]);
    if (!p_.shape_input) return {{p_.out_shape(name(), in[0].shape), in[0].dtype}};
    p_.check_shape_input(name(), in[0], in[1]);
    return {{Shape(in[0].shape.size(), kDynamic), in[0].dtype}};
  }
  std::vector<TensorSpec> infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const override {
    infer(in);
    return {{p_.with_values(v[1]).out_shape(name(), in[0].shape), in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const Params q = p_.shape_input ? p_.with_values(in[1]) : p_;
    kern::dispatch_all(in[0].dtype(), [&](auto z) { resize_forward<decltype(z)>(q, in[0], out[0]); });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    std::vector<Blob> r;
    for (int a : argnums) r.push_back(a == 0 ? resize_grad(cot[0], in[0], p_.shape_input ? in[1] : Blob(), p_) : Blob());
    return r;
  }

 private:
  Params p_;
};

// resize_grad(dy, x): the gradient of resize with respect to x (x gives
// its shape only).
class ResizeGrad final : public Primitive {
 public:
  explicit ResizeGrad(Params p) : p_(std::move(p)) {}
  OpKind kind() const override { return OpKind::ResizeGrad; }
  Attrs attributes() const override { return p_.attrs(); }
  bool differentiable_input(int i) const override { return i == 0; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, p_.shape_input ? 3 : 2);
    expect_float(name(), in[0], "dy");
    expect_same_dtype(name(), in[0], in[1]);
    p_.check(name(), in[1]);
    if (p_.shape_input) {  // dy's shape follows the call's values
      p_.check_shape_input(name(), in[1], in[2]);
      if (in[0].shape.size() != in[1].shape.size())
        op_error(name(), "dy must have the rank of x " + shape_str(in[1].shape) + ", got " + spec_str(in[0]));
      return {in[1]};
    }
    const Shape y = p_.out_shape(name(), in[1].shape);
    bool agree = y.size() == in[0].shape.size();
    for (size_t d = 0; agree && d < y.size(); ++d) agree = y[d] == in[0].shape[d] || y[d] < 0 || in[0].shape[d] < 0;
    if (!agree)
      op_error(name(), "dy must be " + shape_str(y) + " for x " + shape_str(in[1].shape) + ", got " + spec_str(in[0]));
    return {in[1]};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const Params q = p_.shape_input ? p_.with_values(in[2]) : p_;
    kern::dispatch_float(in[0].dtype(), name(), [&](auto z) { resize_backward<decltype(z)>(q, in[0], out[0]); });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    // Linear in dy: its adjoint is the forward resize (x gives a shape only).
    std::vector<Blob> r;
    for (int a : argnums) {
      if (a != 0) {
        r.push_back(Blob());
        continue;
      }
      std::vector<Blob> ins{cot[0]};
      if (p_.shape_input) ins.push_back(in[2]);
      r.push_back(internal::add_node(std::make_shared<Resize>(p_), ins)[0]);
    }
    return r;
  }

 private:
  Params p_;
};

Blob resize_grad(Blob dy, Blob x, Blob shape_input, const Params& p) {
  if (!dy.defined()) return Blob();
  std::vector<Blob> ins{dy, x};
  if (shape_input.defined()) ins.push_back(shape_input);
  return internal::add_node(std::make_shared<ResizeGrad>(p), ins)[0];
}

template <class E, size_t N>
E pick(const char* op, const char* what, const std::string& v, const char* const (&names)[N]) {
  for (size_t i = 0; i < N; ++i)
    if (v == names[i]) return static_cast<E>(i);
  std::string all;
  for (size_t i = 0; i < N; ++i) all += (i ? ", \"" : "\"") + std::string(names[i]) + "\"";
  throw Error(std::string("[") + op + "] " + what + " must be one of " + all + ", got \"" + v + "\"");
}

Params params_of(const nn::ResizeOptions& o) {
  Params p;
  const char* const modes[] = {"nearest", "linear", "cubic"};
  p.mode = pick<Mode>("resize", "mode", o.mode, modes);
  p.coord = pick<Coord>("resize", "coordinate_transformation_mode", o.coordinate_transformation_mode, kCoordNames);
  p.nearest = pick<Near>("resize", "nearest_mode", o.nearest_mode, kNearNames);
  p.cubic_a = o.cubic_coeff_a;
  p.exclude_outside = o.exclude_outside;
  p.extrapolation = o.extrapolation_value;
  p.roi = o.roi;
  return p;
}

// ===========================================================================
// grid_sample (ONNX GridSample, 2-D)

enum class GsMode { Bilinear, Nearest, Bicubic };
enum class GsPad { Zeros, Border, Reflection };
const char* gs_mode_name(GsMode m) {
  return m == GsMode::Bilinear ? "bilinear" : m == GsMode::Nearest ? "nearest" : "bicubic";
}
const char* gs_pad_name(GsPad p) { return p == GsPad::Zeros ? "zeros" : p == GsPad::Border ? "border" : "reflection"; }

// x folded back into [lo, hi] by mirroring at the bounds.
double gs_reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const double d = lo - x;
    const int64_t n = static_cast<int64_t>(d / range);
    const double r = d - static_cast<double>(n) * range;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double d = x - hi;
    const int64_t n = static_cast<int64_t>(d / range);
    const double r = d - static_cast<double>(n) * range;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

// Keys' cubic kernel (a = -0.75) at the distances of the taps x0 - 1 ..
// x0 + 2 from x, t = x - x0 in [0, 1).
void gs_cubic(double t, double* w) {
  const double a = -0.75;
  auto near = [&](double d) { return ((a + 2) * d - (a + 3)) * d * d + 1; };
  auto far = [&](double d) { return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a; };
  w[0] = far(t + 1);
  w[1] = near(t);
  w[2] = near(1 - t);
  w[3] = far(2 - t);
}

// y[n, c, i, j] = x[n, c] read at grid[n, i, j] = (x, y) in [-1, 1].
// Inputs x (N, C, H, W), grid (N, Ho, Wo, 2).
class GridSample final : public Primitive {
 public:
  GridSample(GsMode mode, GsPad pad, bool align) : mode_(mode), pad_(pad), align_(align) {}
  OpKind kind() const override { return OpKind::GridSample; }
  Attrs attributes() const override {
    return {{"mode", std::string(gs_mode_name(mode_))},
            {"padding_mode", std::string(gs_pad_name(pad_))},
            {"align_corners", int64_t{align_}}};
  }
  // No gradient: vjp() is Primitive's, an error naming the op.
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("grid_sample", in, 2);
    const TensorSpec &x = in[0], &g = in[1];
    expect_float("grid_sample", x, "x");
    if (x.shape.size() != 4) op_error("grid_sample", "x must be (N, C, H, W), got " + spec_str(x));
    if (g.dtype != x.dtype) op_error("grid_sample", "grid " + spec_str(g) + " must have x's dtype " + dtype_name(x.dtype));
    if (g.shape.size() != 4 || !dims_agree(g.shape[3], 2) || !dims_agree(g.shape[0], x.shape[0]))
      op_error("grid_sample", "grid must be (N, Ho, Wo, 2) with x's N, got " + spec_str(g) + " for x " + spec_str(x));
    return {{{x.shape[0], x.shape[1], g.shape[1], g.shape[2]}, x.dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const Shape& xs = in[0].shape();
    const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], Ho = out[0].dim(2), Wo = out[0].dim(3);
    kern::dispatch_float(in[0].dtype(), "grid_sample", [&](auto z) {
      using T = decltype(z);
      const T* x = in[0].data<T>();
      const T* grid = in[1].data<T>();
      T* y = out[0].data<T>();
      const double xlo = align_ ? 0.0 : -0.5, xhi = align_ ? W - 1.0 : W - 0.5;
      const double ylo = align_ ? 0.0 : -0.5, yhi = align_ ? H - 1.0 : H - 0.5;
      // The pixel index i of an axis of size n as the padding reads it; -1
      // for a zero (outside, padding "zeros").
      auto index = [&](int64_t i, int64_t n, double lo, double hi) -> int64_t {
        switch (pad_) {
          case GsPad::Zeros: return i >= 0 && i < n ? i : -1;
          case GsPad::Border: return std::clamp<int64_t>(i, 0, n - 1);
          case GsPad::Reflection:
            return std::clamp<int64_t>(static_cast<int64_t>(gs_reflect(static_cast<double>(i), lo, hi)), 0, n - 1);
        }
        return -1;
      };
      // A coordinate outside [lo, hi] moved in (border, reflection).
      auto inside = [&](double v, int64_t n, double lo, double hi) {
        if (v >= lo && v <= hi) return v;
        if (pad_ == GsPad::Border) return std::clamp(v, 0.0, n - 1.0);
        if (pad_ == GsPad::Reflection) return gs_reflect(v, lo, hi);
        return v;
      };
      const int64_t points = N * Ho * Wo;
#pragma omp parallel for if (points * C * 16 > kern::kParallelGrain)
      for (int64_t p = 0; p < points; ++p) {
        const int64_t n = p / (Ho * Wo), o = p % (Ho * Wo);
        const double gx = grid[p * 2], gy = grid[p * 2 + 1];
        double fx = align_ ? (gx + 1) / 2 * (W - 1) : ((gx + 1) * W - 1) / 2;
        double fy = align_ ? (gy + 1) / 2 * (H - 1) : ((gy + 1) * H - 1) / 2;
        if (mode_ == GsMode::Nearest) {
          fx = std::nearbyint(fx);  // halves to even (the default rounding mode)
          fy = std::nearbyint(fy);
        }
        fx = inside(fx, W, xlo, xhi);
        fy = inside(fy, H, ylo, yhi);
        int64_t xi[4], yi[4];
        double wx[4], wy[4];
        int taps = 1;
        if (mode_ == GsMode::Nearest) {
          xi[0] = index(static_cast<int64_t>(fx), W, xlo, xhi);
          yi[0] = index(static_cast<int64_t>(fy), H, ylo, yhi);
          wx[0] = wy[0] = 1;
        } else {
          const double x0 = std::floor(fx), y0 = std::floor(fy);
          if (mode_ == GsMode::Bilinear) {
            taps = 2;
            wx[0] = 1 - (fx - x0), wx[1] = fx - x0;
            wy[0] = 1 - (fy - y0), wy[1] = fy - y0;
          } else {
            taps = 4;
            gs_cubic(fx - x0, wx);
            gs_cubic(fy - y0, wy);
          }
          const int64_t first = mode_ == GsMode::Bilinear ? 0 : -1;
          for (int t = 0; t < taps; ++t) {
            xi[t] = index(static_cast<int64_t>(x0) + first + t, W, xlo, xhi);
            yi[t] = index(static_cast<int64_t>(y0) + first + t, H, ylo, yhi);
          }
        }
        for (int64_t c = 0; c < C; ++c) {
          const T* img = x + (n * C + c) * H * W;
          double acc = 0;
          for (int a = 0; a < taps; ++a) {
            if (yi[a] < 0) continue;
            double row = 0;
            for (int b = 0; b < taps; ++b)
              if (xi[b] >= 0) row += wx[b] * static_cast<double>(img[yi[a] * W + xi[b]]);
            acc += wy[a] * row;
          }
          y[(n * C + c) * Ho * Wo + o] = static_cast<T>(acc);
        }
      }
    });
  }

 private:
  GsMode mode_;
  GsPad pad_;
  bool align_;
};

}  // namespace

namespace nn {
Blob resize(Blob x, const Shape& sizes, const ResizeOptions& o, const std::string& name) {
  Params p = params_of(o);
  for (int64_t s : sizes)
    if (s < 0) throw Error("[resize] sizes " + shape_str(sizes) + " must not be negative");
  p.sizes = sizes;
  return internal::add_node(std::make_shared<Resize>(std::move(p)), {x}, name)[0];
}
Blob resize_scales(Blob x, const std::vector<double>& scales, const ResizeOptions& o, const std::string& name) {
  Params p = params_of(o);
  for (double s : scales)
    if (!(s > 0) || !std::isfinite(s))
      throw Error("[resize] scales must be positive and finite, got " + Params::onnx_number(s));
  p.scales = scales;
  return internal::add_node(std::make_shared<Resize>(std::move(p)), {x}, name)[0];
}
Blob resize(Blob x, Blob sizes, const ResizeOptions& o, const std::string& name) {
  Params p = params_of(o);
  p.shape_input = 2;
  return internal::add_node(std::make_shared<Resize>(std::move(p)), {x, sizes}, name)[0];
}
Blob resize_scales(Blob x, Blob scales, const ResizeOptions& o, const std::string& name) {
  Params p = params_of(o);
  p.shape_input = 1;
  return internal::add_node(std::make_shared<Resize>(std::move(p)), {x, scales}, name)[0];
}

Blob grid_sample(Blob x, Blob grid, const std::string& mode, const std::string& padding_mode, bool align_corners,
                 const std::string& name) {
  GsMode m;
  if (mode == "bilinear") m = GsMode::Bilinear;
  else if (mode == "nearest") m = GsMode::Nearest;
  else if (mode == "bicubic") m = GsMode::Bicubic;
  else throw Error("[grid_sample] mode must be \"bilinear\", \"nearest\" or \"bicubic\", got \"" + mode + "\"");
  GsPad pd;
  if (padding_mode == "zeros") pd = GsPad::Zeros;
  else if (padding_mode == "border") pd = GsPad::Border;
  else if (padding_mode == "reflection") pd = GsPad::Reflection;
  else
    throw Error("[grid_sample] padding_mode must be \"zeros\", \"border\" or \"reflection\", got \"" + padding_mode +
                "\"");
  return internal::add_node(std::make_shared<GridSample>(m, pd, align_corners), {x, grid}, name)[0];
}
}  // namespace nn

}  // namespace jobflow
