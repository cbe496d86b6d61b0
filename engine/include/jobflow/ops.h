// jobflow/ops.h — the ops a job function body calls.
//
// Each function validates its arguments (errors start with "[opname]"),
// adds one node to the graph being built and returns its output Blob(s).
// Names follow OneFlow (flow.reshape, flow.layers.dense, flow.nn.relu, ...).
// Every op with a float output has a gradient (see vjp in its op file).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "jobflow/graph.h"

namespace jobflow {

class CompiledJob;  // jobflow/runtime.h (if_else's branches)

// ---- Initializers (OneFlow's flow.truncated_normal(0.1), ...) ----
struct Initializer {
  enum class Kind { Constant, RandomNormal, TruncatedNormal, RandomUniform, XavierUniform, XavierNormal, KaimingUniform, KaimingNormal };
  Kind kind = Kind::Constant;
  double a = 0.0;  // constant value | mean | min | gain
  double b = 0.0;  // stddev | max
  // Fills `t` (float32/float64; ints for Constant). fan_in/fan_out come from
  // the shape as OneFlow computes them for (out, in, kh, kw) weights.
  void fill(Tensor& t, uint64_t seed) const;
  std::string str() const;
};
Initializer constant_initializer(double value);
Initializer zeros_initializer();
Initializer ones_initializer();
Initializer random_normal_initializer(double mean = 0.0, double stddev = 1.0);
Initializer truncated_normal(double stddev = 1.0, double mean = 0.0);  // OneFlow: flow.truncated_normal(stddev)
inline Initializer truncated_normal_initializer(double stddev = 1.0, double mean = 0.0) { return truncated_normal(stddev, mean); }
Initializer random_uniform_initializer(double minval = 0.0, double maxval = 1.0);
Initializer xavier_uniform_initializer();
Initializer xavier_normal_initializer();
Initializer kaiming_uniform_initializer();
Initializer kaiming_normal_initializer();

// flow.get_variable: creates (or reuses, by name) a variable of the session.
// A second job using the same name shares the variable (shape must match).
Blob get_variable(const std::string& name, const Shape& shape, DType dtype = Float,
                  const Initializer& initializer = zeros_initializer(), bool trainable = true);

// ---- Arithmetic (numpy broadcasting) ----
Blob add(Blob a, Blob b);
Blob sub(Blob a, Blob b);
Blob mul(Blob a, Blob b);
Blob div(Blob a, Blob b);
Blob add_scalar(Blob a, double s);
Blob mul_scalar(Blob a, double s);
Blob neg(Blob a);
Blob exp(Blob a);
Blob log(Blob a);
Blob sqrt(Blob a);
Blob rsqrt(Blob a);
Blob square(Blob a);
inline Blob operator+(Blob a, Blob b) { return add(a, b); }
inline Blob operator-(Blob a, Blob b) { return sub(a, b); }
inline Blob operator*(Blob a, Blob b) { return mul(a, b); }
inline Blob operator/(Blob a, Blob b) { return div(a, b); }
inline Blob operator+(Blob a, double s) { return add_scalar(a, s); }
inline Blob operator-(Blob a, double s) { return add_scalar(a, -s); }
inline Blob operator*(Blob a, double s) { return mul_scalar(a, s); }
inline Blob operator*(double s, Blob a) { return mul_scalar(a, s); }
inline Blob operator/(Blob a, double s) { return mul_scalar(a, 1.0 / s); }
inline Blob operator-(Blob a) { return neg(a); }

// a (.., M, K) x b (.., K, N); 2-D, or batched with equal leading dims.
Blob matmul(Blob a, Blob b, bool transpose_a = false, bool transpose_b = false, const std::string& name = "");

// ---- Shape ops ----
Blob reshape(Blob x, const Shape& shape, const std::string& name = "");  // one -1 allowed
Blob flatten(Blob x, int start_dim = 1, int end_dim = -1);
Blob transpose(Blob x, const std::vector<int>& perm, const std::string& name = "");
Blob concat(const std::vector<Blob>& xs, int axis = 0, const std::string& name = "");
Blob cast(Blob x, DType dtype, const std::string& name = "");
Blob identity(Blob x, const std::string& name = "");
Blob broadcast_to(Blob x, const Shape& shape);
// Sums a broadcast result back to `shape` (the gradient of broadcasting).
Blob sum_to(Blob x, const Shape& shape);
Blob zeros_like(Blob x);
Blob ones_like(Blob x);
// A constant tensor baked into the plan.
Blob constant(const Tensor& value, const std::string& name = "");

// ---- Shapes as tensors (ONNX Shape, Size, Reshape, Expand, ConstantOfShape,
// Range). With dynamic dims (kDynamic) these are known per call: the
// compiler folds them into constants when it specializes a job for the
// call's shapes (docs/architecture.md). ----
// x's shape as int64 (rank,), dims [start, end) (negative count from the end).
Blob shape_of(Blob x, int64_t start = 0, int64_t end = INT64_MAX, const std::string& name = "");
// x's element count, an int64 scalar.
Blob size_of(Blob x, const std::string& name = "");
// x reshaped to the int64 (rank,) tensor `shape`: 0 copies x's dim there
// (unless allowzero), one -1 is inferred from the element count.
Blob reshape_to(Blob x, Blob shape, bool allowzero = false, const std::string& name = "");
// x broadcast (numpy, both ways) with the int64 (rank,) tensor `shape`.
Blob expand(Blob x, Blob shape, const std::string& name = "");
// A tensor of the int64 (rank,) shape `shape` filled with the one element of
// `value` (its dtype).
Blob constant_of_shape(Blob shape, const Tensor& value, const std::string& name = "");
// start, start + delta, ... below limit (above, for delta < 0): scalars of
// one dtype.
Blob range(Blob start, Blob limit, Blob delta, const std::string& name = "");

// ---- Reductions (axes empty = all; negative axes count from the end) ----
Blob reduce_sum(Blob x, const std::vector<int>& axes = {}, bool keepdims = false, const std::string& name = "");
Blob reduce_mean(Blob x, const std::vector<int>& axes = {}, bool keepdims = false, const std::string& name = "");
Blob reduce_max(Blob x, const std::vector<int>& axes = {}, bool keepdims = false, const std::string& name = "");
Blob argmax(Blob x, int axis = -1, const std::string& name = "");  // int32
// The product (float32 accumulates in double, integers in int64; the empty
// product is 1). Gradient: dy * prod / x (exact away from zero elements).
Blob reduce_prod(Blob x, const std::vector<int>& axes = {}, bool keepdims = false, const std::string& name = "");
// reduce_sum over the axes an int64 (k,) tensor computed in the graph gives
// (ONNX ReduceSum with runtime axes; negative ones count from the end;
// none: every axis, or none with noop_with_empty_axes). The output's dims
// are known per call (constant axes: the reduce_sum above). Gradient: dy
// broadcast back.
Blob reduce_sum_at(Blob x, Blob axes, bool keepdims, bool noop_with_empty_axes = false, const std::string& name = "");

using Activation = std::function<Blob(Blob)>;

// Gradients of y w.r.t. each of xs, as new blobs of the graph (like
// tf.gradients); dy is the cotangent of y (undefined = ones). A gradient
// that does not depend on y is zeros. Usable inside any job body.
std::vector<Blob> gradients(Blob y, const std::vector<Blob>& xs, Blob dy = Blob());

namespace math {
using jobflow::add;
using jobflow::argmax;
using jobflow::exp;
using jobflow::log;
using jobflow::reduce_mean;
using jobflow::reduce_sum;
using jobflow::square;
using jobflow::sqrt;
Blob sigmoid(Blob x);
Blob tanh(Blob x);
}  // namespace math

namespace nn {
// Callable objects so they can be passed as `activation=flow::nn::relu`.
struct ReluFn { Blob operator()(Blob x, const std::string& name = "") const; };
inline constexpr ReluFn relu{};
struct SigmoidFn { Blob operator()(Blob x, const std::string& name = "") const; };
inline constexpr SigmoidFn sigmoid{};
struct TanhFn { Blob operator()(Blob x, const std::string& name = "") const; };
inline constexpr TanhFn tanh{};

Blob bias_add(Blob x, Blob bias, int axis = 1, const std::string& name = "");
Blob softmax(Blob logits, int axis = -1, const std::string& name = "");
Blob log_softmax(Blob logits, int axis = -1, const std::string& name = "");
// labels int32/int64 (B,), logits (B, C) -> loss (B,)
Blob sparse_softmax_cross_entropy_with_logits(Blob labels, Blob logits, const std::string& name = "");
// Inverted dropout: scales kept values by 1/(1-rate) in train jobs; the
// identity in predict jobs.
Blob dropout(Blob x, double rate, const std::string& name = "");

// Two spatial values (h, w); one number means both.
struct Size2 {
  int64_t h = 1, w = 1;
  Size2(int64_t v) : h(v), w(v) {}
  Size2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
};

// "SAME" (OneFlow: SAME_LOWER, extra padding at the start), "SAME_UPPER",
// "VALID", or explicit {top, left, bottom, right}.
struct Padding {
  std::string mode = "VALID";
  std::vector<int64_t> pads;  // explicit: top, left, bottom, right
  Padding(const char* m) : mode(m) {}
  Padding(std::string m) : mode(std::move(m)) {}
  Padding(std::vector<int64_t> p) : mode("EXPLICIT"), pads(std::move(p)) {}
  // Resolves to {top, left, bottom, right} for an input of h x w.
  std::vector<int64_t> resolve(const char* op, int64_t h, int64_t w, Size2 k, Size2 stride, Size2 dilation) const;
};

// NCHW input x (N, C, H, W), filters (K, C/groups, R, S).
Blob conv2d(Blob x, Blob filters, Size2 strides = 1, Padding padding = "VALID", Size2 dilations = 1,
            int64_t groups = 1, const std::string& name = "");
Blob max_pool2d(Blob x, Size2 ksize, Size2 strides, Padding padding = "VALID",
                const std::string& data_format = "NCHW", const std::string& name = "");
Blob avg_pool2d(Blob x, Size2 ksize, Size2 strides, Padding padding = "VALID",
                const std::string& data_format = "NCHW", const std::string& name = "");
// y = (x - mean) / sqrt(variance + epsilon) * scale + offset, statistics of
// shape (C,) broadcast along `axis`.
Blob batch_normalization(Blob x, Blob mean, Blob variance, Blob offset, Blob scale, double epsilon, int axis = 1,
                         const std::string& name = "");
}  // namespace nn

// Keyword arguments of the layers, as C++20 designated initializers:
//   flow::layers::dense(x, 512, {.activation = flow::nn::relu,
//                                .kernel_initializer = init, .name = "hidden"});
namespace layers {
struct DenseOptions {
  Activation activation = nullptr;
  bool use_bias = true;
  std::optional<Initializer> kernel_initializer = std::nullopt;  // OneFlow default when empty (see docs)
  std::optional<Initializer> bias_initializer = std::nullopt;    // zeros when empty
  std::string name;
  bool trainable = true;
};
// OneFlow's flow.layers.dense: weight "<name>-weight" of shape (units, in),
// bias "<name>-bias" (units,). Inputs of rank > 2 are flattened from dim 1.
Blob dense(Blob x, int64_t units, const DenseOptions& o = {});

struct Conv2dOptions {
  nn::Size2 strides = 1;
  nn::Padding padding = "VALID";
  std::string data_format = "NCHW";
  nn::Size2 dilation_rate = 1;
  int64_t groups = 1;
  Activation activation = nullptr;
  bool use_bias = true;
  std::optional<Initializer> kernel_initializer = std::nullopt;
  std::optional<Initializer> bias_initializer = std::nullopt;
  std::string name;
  bool trainable = true;
};
// OneFlow's flow.layers.conv2d: NCHW, weight "<name>-weight" (filters,
// C/groups, kh, kw), bias "<name>-bias" (filters,).
Blob conv2d(Blob x, int64_t filters, nn::Size2 kernel_size, const Conv2dOptions& o = {});

struct BatchNormOptions {
  int axis = 1;
  double momentum = 0.99;
  double epsilon = 0.001;
  bool center = true;
  bool scale = true;
  std::string name;
  bool trainable = true;
};
// Variables "<name>-gamma", "-beta", "-moving_mean", "-moving_variance". In
// train jobs normalizes with the batch statistics and updates the moving
// ones (moving = momentum * moving + (1 - momentum) * batch); in predict
// jobs uses the moving ones.
Blob batch_normalization(Blob x, const BatchNormOptions& o = {});
}  // namespace layers

// ---- Ops for imported models (ONNX) ----
// Elementwise (numpy broadcasting for the two-operand ops; same dtype).
// clip: min(max(x, min), max); an absent bound is -inf / +inf. Any numeric
// dtype; the gradient passes where min <= x <= max.
Blob clip(Blob x, std::optional<double> min = std::nullopt, std::optional<double> max = std::nullopt,
          const std::string& name = "");
// a ** b (float). Gradient: b a^(b-1) to a (0 where b == 0), a^b ln a to b (0 where a == 0).
Blob pow(Blob a, Blob b, const std::string& name = "");
// Any numeric dtype; NaN propagates. The gradient goes to the selected
// operand, split evenly on ties.
Blob minimum(Blob a, Blob b, const std::string& name = "");
Blob maximum(Blob a, Blob b, const std::string& name = "");

// numpy.take(x, indices, axis): indices int32/int64 of any shape (negative
// ones count from the end); output x.shape[:axis] + indices.shape +
// x.shape[axis+1:]. An index out of range throws at run time, naming it and
// the axis size. Gradient: scatter-add into zeros.
Blob gather(Blob x, Blob indices, int axis = 0, const std::string& name = "");
// ONNX Slice: for each axes[i] (default 0, 1, ...), elements starts[i],
// starts[i] + steps[i], ... up to ends[i] exclusive (steps default 1, may be
// negative). Negative starts/ends count from the end; out-of-range ones are
// clamped (so INT64_MAX means "to the end").
Blob slice(Blob x, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
           const std::vector<int64_t>& axes = {}, const std::vector<int64_t>& steps = {},
           const std::string& name = "");
// Consecutive parts of the given sizes (summing to x.shape[axis]).
std::vector<Blob> split(Blob x, const std::vector<int64_t>& sizes, int axis = 0, const std::string& name = "");
// ONNX Pad: pads = {begin of every axis..., end of every axis...}; negative
// values crop. mode "constant" (fills `value`), "reflect" (mirror without
// repeating the edge) or "edge" (repeat the edge).
Blob pad(Blob x, const std::vector<int64_t>& pads, const std::string& mode = "constant", double value = 0.0,
         const std::string& name = "");
// Drop the given size-1 axes (empty = every size-1 axis) / insert size-1
// axes at the given positions of the output. Both are reshapes (no copy).
Blob squeeze(Blob x, const std::vector<int64_t>& axes = {}, const std::string& name = "");
Blob unsqueeze(Blob x, const std::vector<int64_t>& axes, const std::string& name = "");
// ONNX NonZero: the indices of x's nonzero elements, int64 (rank, count), in
// row-major order. Its output's size depends on the data: a job calling it
// is run in segments (docs/architecture.md).
Blob nonzero(Blob x, const std::string& name = "");
// ONNX GatherND: slices of data picked by the index tuples in the last dim
// of indices (int32/int64, negative ones count from the end), the first
// batch_dims dims of both shared; output indices.shape[:-1] +
// data.shape[batch_dims + m:]. Gradient (data): scatter-add into zeros.
Blob gather_nd(Blob data, Blob indices, int batch_dims = 0, const std::string& name = "");
// ONNX ScatterElements: a copy of data with updates written along `axis` at
// the positions indices (same shape as updates) give; reduction "none"
// (repeated positions keep the last update), "add", "mul", "max" or "min".
// Gradient (data, for "none" and "add"): dy, zero where "none" overwrote.
Blob scatter_elements(Blob data, Blob indices, Blob updates, int axis = 0, const std::string& reduction = "none",
                      const std::string& name = "");
// ONNX GatherElements: y[i, j, ...] = data[..., indices[i, j, ...], ...]
// along `axis` (the other coordinates those of the output); indices
// (int32/int64, negative ones count from the end) have data's rank and no
// dim but axis above data's; y has indices' shape. Gradient (data):
// scatter-add into zeros.
Blob gather_elements(Blob data, Blob indices, int axis = 0, const std::string& name = "");
// ONNX ScatterND: a copy of data with updates (indices.shape[:-1] +
// data.shape[m:]) written at the index tuples in the last dim (m) of
// indices, in order; reduction "none" (a repeated tuple keeps its last
// update), "add", "mul", "max" or "min". Gradients for "none" and "add":
// dy to data (zero where "none" overwrote), dy at the tuples to updates.
Blob scatter_nd(Blob data, Blob indices, Blob updates, const std::string& reduction = "none",
                const std::string& name = "");
// ONNX Unique: the distinct elements of x (flattened), or the distinct
// slices along `axis`, sorted ascending (or in order of first occurrence),
// with the index of each one's first occurrence, the index in y of every
// element (slice) of x, and the counts; the indices int64. The number of
// distinct values depends on the data (the job runs in segments). No
// gradient.
struct UniqueResult {
  Blob y, indices, inverse_indices, counts;
};
UniqueResult unique(Blob x, std::optional<int> axis = std::nullopt, bool sorted = true, const std::string& name = "");
// ONNX Einsum: "ij,jk->ik" style (letters, "..." for broadcast dims; an
// equation without "->" sums the letters that appear twice and keeps the
// others in alphabetical order); operands of one numeric dtype. Gradient
// (float) for operands without a repeated letter: einsum of dy with the
// other operands.
Blob einsum(const std::string& equation, const std::vector<Blob>& operands, const std::string& name = "");

// ---- Detection (ONNX TopK, NonMaxSuppression, RoiAlign) ----
// The k largest (largest = false: smallest) elements along `axis`, sorted,
// equal values in index order, and their indices (int64): {values, indices}.
// Gradient (values): dy scatter-added at the indices.
std::vector<Blob> top_k(Blob x, int64_t k, int axis = -1, bool largest = true, bool sorted = true,
                        const std::string& name = "");
// The same with k a one-element int64 tensor computed in the graph: the
// output size is known per call (the job runs in segments).
std::vector<Blob> top_k(Blob x, Blob k, int axis = -1, bool largest = true, bool sorted = true,
                        const std::string& name = "");
// ONNX NonMaxSuppression: boxes (B, N, 4) float32 as (y1, x1, y2, x2)
// (center_point_box: (xc, yc, w, h)), scores (B, C, N); the optional
// one-element tensors max_output_boxes_per_class (int64; absent or 0 selects
// nothing), iou_threshold and score_threshold (float32). Per batch and
// class, boxes with a score above score_threshold by descending score (ties:
// lower index first), dropping a box whose IoU with a kept one exceeds
// iou_threshold. Returns (count, 3) int64 rows (batch, class, box); the
// count depends on the data (segments).
Blob non_max_suppression(Blob boxes, Blob scores, Blob max_output_boxes_per_class = Blob(),
                         Blob iou_threshold = Blob(), Blob score_threshold = Blob(), bool center_point_box = false,
                         const std::string& name = "");
// ONNX RoiAlign: x (N, C, H, W) float32, rois (R, 4) as (x1, y1, x2, y2) in
// input pixels (times spatial_scale), batch_indices (R,) int64 -> (R, C,
// output_height, output_width), each bin the average ("avg") or max ("max")
// of sampling_ratio^2 bilinear samples (0: adaptive). half_pixel shifts the
// ROI by -0.5 (ONNX "half_pixel", torchvision's aligned=True); false is ONNX
// "output_half_pixel". No gradient.
Blob roi_align(Blob x, Blob rois, Blob batch_indices, int64_t output_height = 1, int64_t output_width = 1,
               int64_t sampling_ratio = 0, double spatial_scale = 1.0, const std::string& mode = "avg",
               bool half_pixel = true, const std::string& name = "");

// ---- Control flow ----
// ONNX If with a condition known per call: runs then_job (cond true) or
// else_job on `inputs` when the call reaches it and returns that branch's
// results. Both are predict jobs taking `inputs`' specs and returning as
// many tensors of the same dtypes and ranks; their sizes may differ (the
// job then runs in segments). No gradient.
std::vector<Blob> if_else(Blob cond, const std::vector<Blob>& inputs, std::shared_ptr<CompiledJob> then_job,
                          std::shared_ptr<CompiledJob> else_job, const std::string& name = "");
// ONNX Loop: `body` is a predict job taking (the iteration, an int64 scalar;
// the condition, a bool scalar; the carried values...; `outer`...) and
// returning (the next condition; the next carried values...; one element of
// each scan output...). It runs while the iteration is below `max_trips`
// (int64 scalar; undefined Blob: no limit) and the condition holds (`cond`,
// bool scalar; undefined: the body's condition is not read, and max_trips
// is required). Returns the last carried values, then each scan output's
// elements stacked along a new axis 0. The body runs when the call reaches
// the op, so its output sizes are known per call (the job runs in
// segments); a carried value may change its size from one iteration to the
// next. No gradient.
std::vector<Blob> loop(Blob max_trips, Blob cond, const std::vector<Blob>& carried, const std::vector<Blob>& outer,
                       std::shared_ptr<CompiledJob> body, const std::string& name = "");
// ONNX Scan (opset 9 on): `body` is a predict job taking (the states...; one
// slice of each scanned input...; `outer`...) and returning (the next
// states...; one element of each scan output...). Each scanned input is cut
// along its axis (input_axes, default 0), last slice first where
// input_reverse is set; all have the same length, the iteration count.
// Returns the last states, then each scan output's elements stacked along
// its output_axes (default 0), in reverse where output_reverse is set. No
// gradient.
struct ScanOptions {
  std::vector<int64_t> input_axes, output_axes;      // one per scanned input / scan output; empty: all 0
  std::vector<bool> input_reverse, output_reverse;  // empty: all forward
};
std::vector<Blob> scan(const std::vector<Blob>& states, const std::vector<Blob>& scanned, const std::vector<Blob>& outer,
                       std::shared_ptr<CompiledJob> body, const ScanOptions& options = {}, const std::string& name = "");

namespace nn {
// x >= 0 ? x : alpha x
Blob leaky_relu(Blob x, double alpha = 0.01, const std::string& name = "");
// x > 0 ? x : alpha (e^x - 1)
Blob elu(Blob x, double alpha = 1.0, const std::string& name = "");
// gamma * elu(x, alpha)
Blob selu(Blob x, double alpha = 1.6732632423543772848170429916717,
          double gamma = 1.0507009873554804934193349852946, const std::string& name = "");
// x >= 0 ? x : slope x, slope broadcast to x (e.g. (C, 1, 1) for NCHW).
Blob prelu(Blob x, Blob slope, const std::string& name = "");
// ln(1 + e^x)
Blob softplus(Blob x, const std::string& name = "");
// x / (1 + |x|)
Blob softsign(Blob x, const std::string& name = "");
// max(0, min(1, alpha x + beta))
Blob hard_sigmoid(Blob x, double alpha = 0.2, double beta = 0.5, const std::string& name = "");
// Transposed convolution (the data-gradient of conv2d), NCHW float32:
// x (N, C_in, H, W), w (C_in, C_out/groups, kh, kw) -> (N, C_out, OH, OW) with
// OH = (H - 1) stride_h - pad_top - pad_bottom + dilation_h (kh - 1) + 1 + output_padding_h.
// pads {top, left, bottom, right}; output_padding < strides.
Blob conv_transpose2d(Blob x, Blob w, Size2 strides = 1, const std::vector<int64_t>& pads = {0, 0, 0, 0},
                      Size2 dilations = 1, Size2 output_padding = 0, int64_t groups = 1,
                      const std::string& name = "");
}  // namespace nn

// ---- Comparisons, logic and selection (numpy broadcasting) ----
// a == b, a < b, ... of two operands of one dtype -> bool (equal also takes
// bool operands). No gradient.
Blob equal(Blob a, Blob b, const std::string& name = "");
Blob less(Blob a, Blob b, const std::string& name = "");
Blob greater(Blob a, Blob b, const std::string& name = "");
Blob less_equal(Blob a, Blob b, const std::string& name = "");
Blob greater_equal(Blob a, Blob b, const std::string& name = "");
// bool operands -> bool.
Blob logical_not(Blob x, const std::string& name = "");
Blob logical_and(Blob a, Blob b, const std::string& name = "");
Blob logical_or(Blob a, Blob b, const std::string& name = "");
Blob logical_xor(Blob a, Blob b, const std::string& name = "");
// x where cond else y (cond bool; x, y of one dtype; the three broadcast).
// Gradient: to x where cond, to y elsewhere.
Blob where(Blob cond, Blob x, Blob y, const std::string& name = "");

namespace math {
// float -> bool: NaN; +inf and/or -inf.
Blob is_nan(Blob x, const std::string& name = "");
Blob is_inf(Blob x, bool detect_positive = true, bool detect_negative = true, const std::string& name = "");

// ---- Elementwise math (float unless said; gradients where differentiable) ----
Blob erf(Blob x, const std::string& name = "");
Blob sin(Blob x, const std::string& name = "");
Blob cos(Blob x, const std::string& name = "");
Blob tan(Blob x, const std::string& name = "");
Blob asin(Blob x, const std::string& name = "");
Blob acos(Blob x, const std::string& name = "");
Blob atan(Blob x, const std::string& name = "");
Blob sinh(Blob x, const std::string& name = "");
Blob cosh(Blob x, const std::string& name = "");
Blob asinh(Blob x, const std::string& name = "");
Blob acosh(Blob x, const std::string& name = "");
Blob atanh(Blob x, const std::string& name = "");
// No gradient (piecewise constant). round: halves to even.
Blob floor(Blob x, const std::string& name = "");
Blob ceil(Blob x, const std::string& name = "");
Blob round(Blob x, const std::string& name = "");
// -1, 0 or 1 (NaN stays NaN); any numeric dtype, no gradient.
Blob sign(Blob x, const std::string& name = "");
// Running sums along `axis` (ONNX CumSum): y[i] = x[0] + ... + x[i];
// exclusive leaves x[i] out, reverse sums from the end. Any numeric dtype.
// Gradient: the cumsum of dy the other way.
Blob cumsum(Blob x, int axis, bool exclusive = false, bool reverse = false, const std::string& name = "");
// The same with the axis one int32/int64 value computed in the graph.
Blob cumsum(Blob x, Blob axis, bool exclusive = false, bool reverse = false, const std::string& name = "");
// The determinants of the (..., n, n) matrices of x (float; LU with partial
// pivoting in float64). No gradient.
Blob det(Blob x, const std::string& name = "");
// |x|, any numeric dtype; gradient sign(x).
Blob abs(Blob x, const std::string& name = "");
// a - floor(a / b) b (the sign of b, Python's %), or with fmod the C
// remainder a - trunc(a / b) b; any numeric dtype (integer division by zero
// gives 0); broadcasting.
Blob mod(Blob a, Blob b, bool fmod = false, const std::string& name = "");
// a << b (left) or a >> b of integers (logical shift of the bits; shifts by
// the width or more give 0); broadcasting; no gradient.
Blob bit_shift(Blob a, Blob b, bool left, const std::string& name = "");
// ONNX MelWeightMatrix: a (dft_length / 2 + 1, num_mel_bins) matrix of
// triangular mel filters (peak 1) between the two edges, for a one-sided
// spectrogram's bins; the first three are integer scalars, the edges float
// scalars. The values of num_mel_bins and dft_length size the output.
Blob mel_weight_matrix(Blob num_mel_bins, Blob dft_length, Blob sample_rate, Blob lower_edge_hertz,
                       Blob upper_edge_hertz, DType dtype = DType::Float32, const std::string& name = "");
}  // namespace math

namespace nn {
// x Phi(x); approximate "tanh": x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2.
Blob gelu(Blob x, const std::string& approximate = "none", const std::string& name = "");

// ONNX NegativeLogLikelihoodLoss: input (N, C, d1, ...) of log-probabilities,
// target (N, d1, ...) int32/int64 class indices; loss[n, d...] =
// -input[n, target[n, d...], d...] * weight[target] (weight (C,), absent:
// ones), 0 where target == ignore_index. reduction "none" (the losses),
// "sum", or "mean" (the sum over the sum of the weights of the targets not
// ignored). A target outside [0, C) that is not ignore_index is an error at
// run time. Built from gather_elements, where and reductions: gradient to
// input.
Blob nll_loss(Blob input, Blob target, Blob weight = Blob(), std::optional<int64_t> ignore_index = std::nullopt,
              const std::string& reduction = "mean", const std::string& name = "");
// ONNX SoftmaxCrossEntropyLoss: nll_loss of log_softmax(scores, axis 1),
// with the same options; also returns the log-probabilities.
struct SoftmaxCrossEntropyResult {
  Blob loss, log_prob;
};
SoftmaxCrossEntropyResult softmax_cross_entropy_loss(Blob scores, Blob labels, Blob weight = Blob(),
                                                     std::optional<int64_t> ignore_index = std::nullopt,
                                                     const std::string& reduction = "mean",
                                                     const std::string& name = "");

// ONNX GridSample: x (N, C, H, W) sampled at grid (N, Ho, Wo, 2) of (x, y)
// coordinates in [-1, 1] (align_corners: -1 and 1 are the centres of the
// corner pixels, else their outer edges) -> (N, C, Ho, Wo). mode
// "bilinear", "nearest" (halves to even) or "bicubic" (Keys, a = -0.75);
// padding_mode "zeros", "border" (clamped) or "reflection" (mirrored at
// the edges). float32/float64; no gradient.
Blob grid_sample(Blob x, Blob grid, const std::string& mode = "bilinear", const std::string& padding_mode = "zeros",
                 bool align_corners = false, const std::string& name = "");

// ONNX Resize over any axes (ops/resize.cpp). The output coordinate i of
// an axis maps to an input coordinate by coordinate_transformation_mode
// ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
// "align_corners", "asymmetric", "tf_half_pixel_for_nn",
// "tf_crop_and_resize" with `roi` = the start of every axis, then the end,
// as fractions of the axis), read by mode "nearest" (rounded by
// nearest_mode: "round_prefer_floor", "round_prefer_ceil", "floor",
// "ceil"), "linear" or "cubic" (Keys' kernel with cubic_coeff_a; with
// exclude_outside the taps outside the input get weight 0 and the others are
// renormalized; otherwise the edge repeats). tf_crop_and_resize gives
// extrapolation_value where the coordinate leaves the input. Nearest works
// on any dtype; linear and cubic on float32/float64. Gradient: the same
// weights scattered back.
struct ResizeOptions {
  std::string mode = "nearest";
  std::string coordinate_transformation_mode = "half_pixel";
  std::string nearest_mode = "round_prefer_floor";
  double cubic_coeff_a = -0.75;
  bool exclude_outside = false;
  double extrapolation_value = 0.0;
  std::vector<double> roi;
};
// To the output shape `sizes` (one per axis; the scale of an axis is
// sizes[d] / x.shape[d]).
Blob resize(Blob x, const Shape& sizes, const ResizeOptions& options = {}, const std::string& name = "");
// By `scales` (one per axis): the output is floor(x.shape[d] * scales[d])
// and coordinates use the scale itself.
Blob resize_scales(Blob x, const std::vector<double>& scales, const ResizeOptions& options = {},
                   const std::string& name = "");
// The same with the sizes (int64) or scales (float32, one per axis) a
// tensor computed at run time: the output's dims are known per call (the
// call is cut at the op, docs/architecture.md).
Blob resize(Blob x, Blob sizes, const ResizeOptions& options = {}, const std::string& name = "");
Blob resize_scales(Blob x, Blob scales, const ResizeOptions& options = {}, const std::string& name = "");

// ONNX's recurrent layers (ops/rnn.cpp), built from other ops unrolled over
// the sequence (X's sequence length is static); float32/float64. X is
// (seq, batch, input) (batch_first: (batch, seq, input)); W (dirs, G*H,
// input) and R (dirs, G*H, H) with G = 4 (LSTM: gates i, o, f, c), 3 (GRU:
// z, r, h) or 1 (RNN); B (dirs, 2*G*H) = the input biases then the
// recurrent ones; sequence_lens (batch,) int32/int64; initial_h and
// initial_c (dirs, batch, H) (batch_first: (batch, dirs, H)); P (dirs, 3H)
// the LSTM's peepholes (i, o, f). Undefined blobs are absent (zeros).
// Outputs: y (seq, dirs, batch, H) (batch_first: (batch, seq, dirs, H)), the
// last hidden state y_h and (LSTM) cell state y_c (dirs, batch, H).
struct RnnOptions {
  std::string direction = "forward";  // "forward", "reverse", "bidirectional"
  // ONNX names (Sigmoid, Tanh, Relu, Affine, LeakyRelu, ThresholdedRelu,
  // ScaledTanh, HardSigmoid, Elu, Softsign, Softplus), per direction; empty:
  // the cell's defaults. The alphas and betas go, in order, to the
  // activations that take one.
  std::vector<std::string> activations;
  std::vector<double> activation_alpha, activation_beta;
  std::optional<double> clip;        // gate pre-activations clipped to [-clip, clip]
  bool input_forget = false;         // LSTM: f = 1 - i
  bool linear_before_reset = false;  // GRU: r (Ht-1 Rh + Rbh) instead of (r Ht-1) Rh + Rbh
  bool batch_first = false;          // ONNX layout = 1
  int64_t hidden_size = 0;           // checked against W when > 0
};
struct RnnOutputs {
  Blob y, y_h, y_c;
};
RnnOutputs lstm(Blob x, Blob w, Blob r, Blob b = Blob(), Blob sequence_lens = Blob(), Blob initial_h = Blob(),
                Blob initial_c = Blob(), Blob p = Blob(), const RnnOptions& options = {});
RnnOutputs gru(Blob x, Blob w, Blob r, Blob b = Blob(), Blob sequence_lens = Blob(), Blob initial_h = Blob(),
               const RnnOptions& options = {});
RnnOutputs rnn(Blob x, Blob w, Blob r, Blob b = Blob(), Blob sequence_lens = Blob(), Blob initial_h = Blob(),
               const RnnOptions& options = {});
}  // namespace nn

// ---- Sequences of tensors and optional values (ops/sequence.cpp) ----
// A sequence is one packed uint8 tensor of rank 1 (jobflow/sequence.h:
// pack_sequence / unpack_sequence); these ops read and make it on the host.
// An op whose output is a sequence, or an item of one, is sized when the
// job runs. Positions are int32/int64 scalars, negative from the end, as
// ONNX's sequence ops take them; an undefined position is the end.
namespace seq {
Blob construct(const std::vector<Blob>& xs, DType elem, const std::string& name = "");  // all of dtype elem
Blob empty(DType elem, const std::string& name = "");  // a constant: no items
Blob none(DType elem, const std::string& name = "");   // a constant: an optional without a value
Blob insert(Blob s, Blob x, Blob position = Blob(), const std::string& name = "");
// Item `position`, which the job declares as a `rank`-dim tensor of `elem`
// (checked per call).
Blob at(Blob s, Blob position, DType elem, int rank, const std::string& name = "");
Blob erase(Blob s, Blob position = Blob(), const std::string& name = "");
Blob length(Blob s, const std::string& name = "");  // int64 scalar
// The items joined along `axis` (new_axis: stacked along a new axis), each
// a `rank`-dim tensor of `elem`.
Blob concat(Blob s, int64_t axis, bool new_axis, DType elem, int rank, const std::string& name = "");
// x cut along `axis` into a sequence: by `sizes` (an int scalar: pieces of
// that size, the last shorter; 1-D: each piece's size) or into pieces of
// one, squeezed unless keepdims.
Blob split(Blob x, Blob sizes = Blob(), int64_t axis = 0, bool keepdims = true, const std::string& name = "");
Blob has_element(Blob s, const std::string& name = "");  // bool scalar: an optional with a value
// An optional's value (an error per call when it has none): its tensor
// (of_tensor, a `rank`-dim tensor of `elem`) or its sequence.
Blob get_element(Blob s, bool of_tensor, DType elem, int rank, const std::string& name = "");
}  // namespace seq

// ---- String tensors (ops/strings.cpp) ----
// A string tensor is one packed uint8 tensor of rank 1 (jobflow/strings.h:
// pack_strings / unpack_strings); these ops read and make it on the host,
// and are sized when the job runs. No gradients.
namespace str {
enum class CaseChange { None, Lower, Upper };
struct NormalizeOptions {
  CaseChange case_change = CaseChange::None;
  bool case_sensitive = false;  // how stopwords match
  std::vector<std::string> stopwords;
  // ONNX's locale attribute. Case mapping is Unicode's default one, the
  // same for every locale; languages with their own rules (tr, az, lt) are
  // refused rather than mapped the default way.
  std::string locale = "en_US";
};
// ONNX StringNormalizer: x (C,) or (1, C) strings without the stopwords,
// then case-changed; (1,) or (1, 1) holding "" when nothing is left.
Blob normalize(Blob x, const NormalizeOptions& options, const std::string& name = "");
// Numbers of any dtype as strings, as NumPy's str() writes them: the
// shortest digits that read back as the value in its own type (float16's
// 65504 is "65500.0"), positional for 1e-4 <= |v| < 1e16, else scientific
// ("1e-05", "1.5e+16"); "nan", "inf", "-inf"; bools "True"/"False". The
// result has x's shape.
Blob format(Blob x, const std::string& name = "");
// Strings parsed as `dtype` (a `rank`-dim tensor of x's shape): decimal or
// scientific numbers, "INF"/"+INF"/"-INF"/"NaN" in any case (floats);
// integers take a fractional number truncated toward zero and refuse one
// out of range; bools: "true"/"false" in any case or a number (nonzero is
// true). A string that is none of these is an error naming its element.
Blob parse(Blob x, DType dtype, int rank, const std::string& name = "");
// Each string's position in `vocabulary` (int64, x's shape), -1 when absent
// (TfIdfVectorizer's pool_strings).
Blob lookup(Blob x, const std::vector<std::string>& vocabulary, int rank, const std::string& name = "");
}  // namespace str

// ---- Text features (ops/text.cpp) ----
namespace text {
enum class NgramMode { TF, IDF, TFIDF };
// ONNX TfIdfVectorizer over token ids: the pool holds the n-grams to count,
// 1-grams first (ngram_counts[n - 1] is where the n-grams start), and
// ngram_indexes[j] the output coordinate of the j-th of them.
struct NgramOptions {
  int64_t min_gram_length = 1, max_gram_length = 1;
  int64_t max_skip_count = 0;  // n-grams of items up to max_skip_count + 1 apart
  NgramMode mode = NgramMode::TF;
  std::vector<int64_t> ngram_counts, ngram_indexes, pool;
  std::vector<double> weights;  // per pooled n-gram (IDF, TFIDF); empty: ones
};
// x (C,) or (N, C) int32/int64 token ids -> float32 (max(ngram_indexes) + 1,)
// or (N, max + 1): per row, each pooled n-gram's count (TF), weight if found
// (IDF) or count x weight (TFIDF). No gradient.
Blob tfidf_vectorizer(Blob x, const NgramOptions& options, const std::string& name = "");
}  // namespace text

// ---- Random draws (ops/random.cpp) ----
// Float tensors of `shape` (or of like's shape, known per call) drawn
// uniformly from [low, high) or normally; each call draws anew, reproducibly
// for the job's seed (FunctionConfig::seed). A nonzero `seed` (ONNX's float
// attribute) fixes the node's stream: nodes given the same seed draw alike;
// without one each node draws its own. No gradient.
namespace random {
Blob uniform(const Shape& shape, double low = 0.0, double high = 1.0, DType dtype = DType::Float32, double seed = 0,
             const std::string& name = "");
Blob uniform_like(Blob like, double low = 0.0, double high = 1.0, DType dtype = DType::Float32, double seed = 0,
                  const std::string& name = "");
Blob normal(const Shape& shape, double mean = 0.0, double scale = 1.0, DType dtype = DType::Float32, double seed = 0,
            const std::string& name = "");
Blob normal_like(Blob like, double mean = 0.0, double scale = 1.0, DType dtype = DType::Float32, double seed = 0,
                 const std::string& name = "");
}  // namespace random

}  // namespace jobflow
