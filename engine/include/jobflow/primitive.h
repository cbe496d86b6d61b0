// jobflow/primitive.h — what an op is.
//
// Every op is a Primitive (MLX's design): one non-copyable class holding the
// op's attributes, with
//   kind()       its identity, an OpKind (below): what backends and the ONNX
//                importer/exporter key their tables by; name() derives from it;
//   infer()      shapes/dtypes of the outputs from those of the inputs; throws
//                Error("[opname] ...") naming the shapes when they do not fit;
//   eval_cpu()   the CPU kernel (writes into preallocated outputs);
//   vjp()        the gradient, written with other ops so it runs on every
//                backend;
//   attributes() every parameter, by name.
// Other backends (cuda/) run an op by its kind and attributes: they keep a
// table indexed by OpKind, so the engine's op files know nothing of them.
// An op's builder function (ops.h) validates arguments and adds a node
// holding its primitive to the current graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "jobflow/graph.h"

namespace jobflow {

// The identity of every op the engine has: one entry per distinct Primitive
// behaviour, grouped by the file under engine/src/ops/ that defines it.
// op_name(kind) is its name in errors, plans and node names ("add"). Tables
// keyed by it: the names (src/primitive.cpp, checked against this list at
// compile time), the CUDA backend's ops (cuda/ops*.cpp) and the ONNX rows
// (src/ops/*_onnx.cpp). Adding an op: an entry here, its name in
// src/primitive.cpp, then docs/architecture.md "Adding an op".
enum class OpKind : uint16_t {
  // Sources the compiler binds (no kernel): state_ops.h, ops/shape.cpp.
  Placeholder, Variable, Constant,
  // ops/elementwise.cpp
  Add, Sub, Mul, Div, EqualMask,
  Neg, Exp, Log, Sqrt, Rsqrt, Square, Sigmoid, Tanh, Relu, AddScalar, MulScalar,
  ReluGrad, SigmoidGrad, TanhGrad, Cast, AddN,
  // ops/activations.cpp: activations, their first and second derivatives
  LeakyRelu, Elu, Selu, Softplus, Softsign, HardSigmoid, Clip,
  LeakyReluGrad, EluGrad, SeluGrad, SoftplusGrad, SoftsignGrad, HardSigmoidGrad, ClipGrad,
  LeakyReluGrad2, EluGrad2, SeluGrad2, SoftplusGrad2, SoftsignGrad2, HardSigmoidGrad2, ClipGrad2,
  // ops/activations.cpp: broadcasting binary ops and their derivatives
  PRelu, Pow, Minimum, Maximum,
  PReluGradX, PReluGradSlope, PowGradBase, PowGradExponent, MinimumGradA, MinimumGradB, MaximumGradA, MaximumGradB,
  // ops/linalg.cpp
  MatMul, BiasAdd, BiasGrad, Einsum, Det,
  // ops/reduce.cpp
  ReduceSum, ReduceMean, ReduceMax, SumTo, ArgMax, BroadcastTo, ZerosLike, OnesLike, Expand, ReduceProd,
  CumSum, ReduceSumAxes,
  // ops/shape.cpp
  Reshape, Transpose, Concat, Slice, SliceGrad, Identity,
  // ops/shape.cpp: shapes as tensors (the input's shape; a reshape, a fill
  // or a sequence sized by values, known per call)
  ShapeOf, SizeOf, ReshapeTo, ConstantOfShape, Range,
  // ops/indexing.cpp
  Gather, GatherGrad, StridedSlice, StridedSliceGrad, Split, Pad, PadGrad, NonZero,
  GatherND, GatherNDGrad, ScatterElements, GatherElements, GatherElementsGrad, ScatterND, Unique,
  // ops/nn.cpp
  Softmax, LogSoftmax, SoftmaxGrad, LogSoftmaxGrad, SparseSoftmaxCrossEntropy, SparseSoftmaxCrossEntropyGrad,
  Dropout, DropoutGrad, BatchNormalization, BatchNormalizationGrad, BatchNormTrain, BatchNormTrainGrad,
  // ops/conv.cpp, ops/conv_transpose.cpp
  Conv2d, Conv2dBackwardData, Conv2dBackwardWeights, MaxPool2d, AvgPool2d, MaxPool2dGrad, AvgPool2dGrad,
  ConvTranspose2d, ConvTranspose2dGradInput, ConvTranspose2dGradWeight,
  // optimizer.cpp
  SgdUpdate, AdamUpdate,
  // ops/logic.cpp: comparisons, logical ops, where
  Equal, Less, Greater, LessEqual, GreaterEqual, LogicalNot, LogicalAnd, LogicalOr, LogicalXor, Where, IsNaN, IsInf,
  // ops/math.cpp: elementwise math of imported models
  Erf, Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Floor, Ceil, Round, Sign, Abs, Gelu, Mod,
  BitShift, MelWeightMatrix,
  // ops/resize.cpp
  Resize, ResizeGrad, GridSample,
  // ops/detection.cpp: top-k, non-maximum suppression, RoI align
  TopK, NonMaxSuppression, RoiAlign,
  // ops/sequence.cpp: sequences of tensors and optional values, each one
  // packed uint8 tensor (jobflow/sequence.h)
  SequenceConstruct, SequenceInsert, SequenceAt, SequenceErase, SequenceLength, ConcatFromSequence, SplitToSequence,
  OptionalHasElement, OptionalGetElement,
  // ops/text.cpp: n-gram counts of token ids
  TfIdfVectorizer,
  // ops/strings.cpp: string tensors, each one packed uint8 tensor
  // (jobflow/strings.h)
  StringNormalizer, StringFormat, StringParse, StringLookup,
  // ops/random.cpp: random draws
  RandomUniform, RandomNormal,
  // ops/control.cpp: control flow run at call time (ONNX If, Loop, Scan)
  If, Loop, Scan,
  // onnx/deferred.cpp: an ONNX node whose shape-giving inputs (Slice's
  // starts, Pad's pads, Tile's repeats, ...) are computed when the job runs,
  // imported again for each call's values
  OnnxNode,
  // compiler/layout.cpp: a change of memory format (oneDNN blocked <-> plain,
  // float32 <-> bfloat16) that only plans contain, never a job's definition.
  Reorder,
};
// How many kinds there are (tables indexed by OpKind have this size).
inline constexpr size_t kOpKindCount = static_cast<size_t>(OpKind::Reorder) + 1;
// The op's name ("add", "conv2d"): the same for every primitive of the kind.
const char* op_name(OpKind k);
// The kind of a name; false when no op has it.
bool op_kind_from_name(const std::string& name, OpKind* out);

// A primitive's attributes by name (for export to ONNX, other backends and
// inspection): every parameter that defines the op.
using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>, Tensor>;
using Attrs = std::vector<std::pair<std::string, AttrValue>>;
// The attribute `key` of `a`, or null.
const AttrValue* find_attr(const Attrs& a, const std::string& key);
// "axis=1 shape=(2, 3) value=(2, 3) float32": the text form used by
// Primitive::attrs().
std::string attrs_str(const Attrs& a);

// Per-step state handed to kernels.
struct ExecContext {
  int64_t step = 0;        // train step counter of the job (0-based)
  double lr = 0.0;         // learning rate of this step (train jobs)
  uint64_t seed = 0;       // job seed (dropout, etc.)
  bool training = false;   // train job
  // FunctionConfig::enable_auto_mixed_precision on a CPU with bfloat16
  // instructions: convolutions compute in bfloat16 (float32 accumulation).
  bool bf16 = false;
};

class Primitive {
 public:
  Primitive() = default;
  Primitive(const Primitive&) = delete;
  Primitive& operator=(const Primitive&) = delete;
  virtual ~Primitive() = default;

  virtual OpKind kind() const = 0;
  const char* name() const { return op_name(kind()); }
  virtual std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const = 0;
  virtual void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext& ctx) const = 0;
  // Gradients w.r.t. inputs[argnums[k]], given cotangents of every output
  // (undefined Blob = zero cotangent). Returns one Blob per argnum;
  // undefined = no gradient flows.
  virtual std::vector<Blob> vjp(const std::vector<Blob>& inputs, const std::vector<Blob>& outputs,
                                const std::vector<Blob>& cotangents, const std::vector<int>& argnums) const;
  // Ops that change state (optimizer updates, moving averages) are kept even
  // when no output is used.
  virtual bool has_side_effects() const { return false; }
  // Output `i` is a view of input `aliases_input(i)` (same bytes, e.g.
  // reshape): the memory plan gives it no buffer of its own. -1 = none.
  virtual int aliases_input(int /*out*/) const { return -1; }
  // eval_cpu writes every element of output `i` into whatever memory
  // out[i] holds at that call, reading none of it first and keeping no
  // pointer to it: a plan may then point a returned output at the
  // result's own memory (no copy out of the arena after the call).
  virtual bool writes_output_anywhere(int /*out*/) const { return false; }
  // Input `i` (of the inputs `in`) lands unchanged in output 0 as one run
  // of bytes starting at the returned byte offset, and eval_cpu copies
  // nothing where the input already is there (a concat whose axis has only
  // 1s before it); -1 otherwise. The memory plan may then bind the input
  // as that part of the output, so its producer writes it in place.
  virtual int64_t input_within_output(int /*i*/, const std::vector<TensorSpec>& /*in*/) const { return -1; }
  // The op only moves its inputs' bytes, whatever their dtype (the sequence
  // ops): it may read the 16-bit float storage types, which other ops
  // refuse (Graph::add).
  virtual bool stores_only() const { return false; }
  // The op draws random numbers (dropout, random_uniform): never folded
  // into a constant, even when every input is known.
  virtual bool draws_random() const { return false; }
  // Inputs that are not differentiable (labels, indices, masks).
  virtual bool differentiable_input(int /*i*/) const { return true; }
  // Fusion hooks for the compiler: a new primitive computing this op plus a
  // bias (appended as an extra last input, broadcast along axis 1), or plus
  // a relu of its first output. nullptr when not supported.
  virtual std::shared_ptr<Primitive> with_bias() const { return nullptr; }
  virtual std::shared_ptr<Primitive> with_relu() const { return nullptr; }
  // For weight-gradient ops reading a dy: a variant that also outputs the
  // bias gradient (dy summed over every axis but 1) as an extra last
  // output, replacing a separate bias_grad pass over the same dy.
  virtual std::shared_ptr<Primitive> with_bias_grad() const { return nullptr; }
  // For a max pooling's gradient: a variant that also applies relu's
  // gradient taken at the pooling's input, relu_grad(pool_grad(dy), x),
  // reading the pooling's output as an extra last input. A window passes
  // its gradient to its maximum, where x equals the output, so this is dy
  // masked by output > 0, and a pass over x's size is saved.
  virtual std::shared_ptr<Primitive> with_relu_grad() const { return nullptr; }
  // For train plans' layout pass (compiler/train_layout.cpp): a variant
  // that reads input i in oneDNN's nChw16c order where in_blocked[i] and
  // writes output j so where out_blocked[j] (4-D float32 blobs whose
  // channels are a multiple of 16; the pass checks that); nullptr when the
  // op cannot. The attributes then say "blocked=...".
  virtual std::shared_ptr<Primitive> with_blocked(const std::vector<bool>& /*in_blocked*/,
                                                  const std::vector<bool>& /*out_blocked*/) const {
    return nullptr;
  }
  // Every parameter that defines the op (axis, strides, pads, flags,
  // constant values...), so an exporter can write it, a loader can rebuild
  // an identical op through its builder function and another backend can
  // run it.
  virtual Attrs attributes() const { return {}; }
  // One attribute, typed: throws Error("[opname] ...") naming the attribute
  // when it is missing or of another type (an integer reads as a double).
  int64_t attr_int(const std::string& key) const;
  double attr_double(const std::string& key) const;
  std::string attr_string(const std::string& key) const;
  std::vector<int64_t> attr_ints(const std::string& key) const;
  std::vector<double> attr_doubles(const std::string& key) const;
  Tensor attr_tensor(const std::string& key) const;
  // The attributes as text (attrs_str), for plans, profiles and errors.
  std::string attrs() const { return attrs_str(attributes()); }

  // ---- shapes known at call time (docs/architecture.md) ----
  // infer() accepts kDynamic dims in its inputs and returns kDynamic where
  // it cannot know a dim; a job is specialized per call shape by running
  // infer() again with the concrete shapes.
  // Ops whose output shapes depend on the values of some inputs, not only on
  // their shapes (a shape given as a tensor: reshape_to, expand,
  // constant_of_shape; range's bounds; nonzero's data). infer() then gives
  // kDynamic where the values decide; infer_data() gives the real shapes.
  virtual bool output_shape_from_data() const { return false; }
  // Whether the values of input `i` decide the output shapes (default: every
  // input of an op whose output_shape_from_data()).
  virtual bool shape_reads_value(int /*i*/) const { return output_shape_from_data(); }
  // The output specs given the inputs' specs (static) and the values of the
  // inputs shape_reads_value() names (`values[i]` is defined for those).
  // The compiler calls it when those values are known while specializing
  // (constants, shapes), and at run time otherwise, where the call is cut
  // into segments at the op (the op's outputs then get their memory sized
  // by this). Default: infer(in).
  virtual std::vector<TensorSpec> infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>& values) const;
  // An op whose outputs only a run can size (a branch run at call time,
  // ops/control.cpp): where the call is cut at it, the compiler calls
  // eval_sized(), which returns the outputs it made, instead of infer_data()
  // then eval_cpu() on outputs sized by it.
  virtual bool sizes_outputs() const { return false; }
  virtual std::vector<Tensor> eval_sized(const std::vector<Tensor>& in, ExecContext& ctx) const;
};

// Dims that may be kDynamic (infer() of a job with dynamic dims): two dims
// agree when they are equal or one of them is dynamic.
inline bool dims_agree(int64_t a, int64_t b) { return a == b || a < 0 || b < 0; }
// Same rank and every dim agrees.
bool shapes_agree(const Shape& a, const Shape& b);
// Same dtype and shapes_agree.
bool specs_agree(const TensorSpec& a, const TensorSpec& b);
// Dim by dim, the known one of two agreeing shapes (a where both are known).
Shape merge_shapes(const Shape& a, const Shape& b);

// "[opname] " prefix helper for errors thrown by infer().
[[noreturn]] void op_error(const char* op, const std::string& what);
// Checks used by infer() implementations.
void expect_inputs(const char* op, const std::vector<TensorSpec>& in, size_t n);
void expect_float(const char* op, const TensorSpec& s, const char* arg);
void expect_same_dtype(const char* op, const TensorSpec& a, const TensorSpec& b);
// Arithmetic ops: "[op] <arg> must be numeric, got (2, 3) bool".
void expect_not_bool(const char* op, const TensorSpec& s, const char* arg);

}  // namespace jobflow
