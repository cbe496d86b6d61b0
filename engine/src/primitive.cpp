// What every op shares: the names of the op kinds, the attribute helpers,
// the Primitive defaults and the checks infer() implementations use.
#include "jobflow/primitive.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>


namespace jobflow {
namespace {

struct OpRow {
  OpKind kind;
  const char* name;
};

// One row per OpKind, in the enum's order (checked below).
constexpr OpRow kOps[] = {
    {OpKind::Placeholder, "placeholder"},
    {OpKind::Variable, "variable"},
    {OpKind::Constant, "constant"},
    {OpKind::Add, "add"},
    {OpKind::Sub, "sub"},
    {OpKind::Mul, "mul"},
    {OpKind::Div, "div"},
    {OpKind::EqualMask, "equal_mask"},
    {OpKind::Neg, "neg"},
    {OpKind::Exp, "exp"},
    {OpKind::Log, "log"},
    {OpKind::Sqrt, "sqrt"},
    {OpKind::Rsqrt, "rsqrt"},
    {OpKind::Square, "square"},
    {OpKind::Sigmoid, "sigmoid"},
    {OpKind::Tanh, "tanh"},
    {OpKind::Relu, "relu"},
    {OpKind::AddScalar, "add_scalar"},
    {OpKind::MulScalar, "mul_scalar"},
    {OpKind::ReluGrad, "relu_grad"},
    {OpKind::SigmoidGrad, "sigmoid_grad"},
    {OpKind::TanhGrad, "tanh_grad"},
    {OpKind::Cast, "cast"},
    {OpKind::AddN, "add_n"},
    {OpKind::LeakyRelu, "leaky_relu"},
    {OpKind::Elu, "elu"},
    {OpKind::Selu, "selu"},
    {OpKind::Softplus, "softplus"},
    {OpKind::Softsign, "softsign"},
    {OpKind::HardSigmoid, "hard_sigmoid"},
    {OpKind::Clip, "clip"},
    {OpKind::LeakyReluGrad, "leaky_relu_grad"},
    {OpKind::EluGrad, "elu_grad"},
    {OpKind::SeluGrad, "selu_grad"},
    {OpKind::SoftplusGrad, "softplus_grad"},
    {OpKind::SoftsignGrad, "softsign_grad"},
    {OpKind::HardSigmoidGrad, "hard_sigmoid_grad"},
    {OpKind::ClipGrad, "clip_grad"},
    {OpKind::LeakyReluGrad2, "leaky_relu_grad2"},
    {OpKind::EluGrad2, "elu_grad2"},
    {OpKind::SeluGrad2, "selu_grad2"},
    {OpKind::SoftplusGrad2, "softplus_grad2"},
    {OpKind::SoftsignGrad2, "softsign_grad2"},
    {OpKind::HardSigmoidGrad2, "hard_sigmoid_grad2"},
    {OpKind::ClipGrad2, "clip_grad2"},
    {OpKind::PRelu, "prelu"},
    {OpKind::Pow, "pow"},
    {OpKind::Minimum, "minimum"},
    {OpKind::Maximum, "maximum"},
    {OpKind::PReluGradX, "prelu_grad_x"},
    {OpKind::PReluGradSlope, "prelu_grad_slope"},
    {OpKind::PowGradBase, "pow_grad_base"},
    {OpKind::PowGradExponent, "pow_grad_exponent"},
    {OpKind::MinimumGradA, "minimum_grad_a"},
    {OpKind::MinimumGradB, "minimum_grad_b"},
    {OpKind::MaximumGradA, "maximum_grad_a"},
    {OpKind::MaximumGradB, "maximum_grad_b"},
    {OpKind::MatMul, "matmul"},
    {OpKind::BiasAdd, "bias_add"},
    {OpKind::BiasGrad, "bias_grad"},
    {OpKind::Einsum, "einsum"},
    {OpKind::Det, "det"},
    {OpKind::ReduceSum, "reduce_sum"},
    {OpKind::ReduceMean, "reduce_mean"},
    {OpKind::ReduceMax, "reduce_max"},
    {OpKind::SumTo, "sum_to"},
    {OpKind::ArgMax, "argmax"},
    {OpKind::BroadcastTo, "broadcast_to"},
    {OpKind::ZerosLike, "zeros_like"},
    {OpKind::OnesLike, "ones_like"},
    {OpKind::Expand, "expand"},
    {OpKind::ReduceProd, "reduce_prod"},
    {OpKind::CumSum, "cumsum"},
    {OpKind::ReduceSumAxes, "reduce_sum_axes"},
    {OpKind::Reshape, "reshape"},
    {OpKind::Transpose, "transpose"},
    {OpKind::Concat, "concat"},
    {OpKind::Slice, "slice"},
    {OpKind::SliceGrad, "slice_grad"},
    {OpKind::Identity, "identity"},
    {OpKind::ShapeOf, "shape"},
    {OpKind::SizeOf, "size"},
    {OpKind::ReshapeTo, "reshape_to"},
    {OpKind::ConstantOfShape, "constant_of_shape"},
    {OpKind::Range, "range"},
    {OpKind::Gather, "gather"},
    {OpKind::GatherGrad, "gather_grad"},
    {OpKind::StridedSlice, "strided_slice"},
    {OpKind::StridedSliceGrad, "strided_slice_grad"},
    {OpKind::Split, "split"},
    {OpKind::Pad, "pad"},
    {OpKind::PadGrad, "pad_grad"},
    {OpKind::NonZero, "nonzero"},
    {OpKind::GatherND, "gather_nd"},
    {OpKind::GatherNDGrad, "gather_nd_grad"},
    {OpKind::ScatterElements, "scatter_elements"},
    {OpKind::GatherElements, "gather_elements"},
    {OpKind::GatherElementsGrad, "gather_elements_grad"},
    {OpKind::ScatterND, "scatter_nd"},
    {OpKind::Unique, "unique"},
    {OpKind::Softmax, "softmax"},
    {OpKind::LogSoftmax, "log_softmax"},
    {OpKind::SoftmaxGrad, "softmax_grad"},
    {OpKind::LogSoftmaxGrad, "log_softmax_grad"},
    {OpKind::SparseSoftmaxCrossEntropy, "sparse_softmax_cross_entropy"},
    {OpKind::SparseSoftmaxCrossEntropyGrad, "sparse_softmax_cross_entropy_grad"},
    {OpKind::Dropout, "dropout"},
    {OpKind::DropoutGrad, "dropout_grad"},
    {OpKind::BatchNormalization, "batch_normalization"},
    {OpKind::BatchNormalizationGrad, "batch_normalization_grad"},
    {OpKind::BatchNormTrain, "batch_norm_train"},
    {OpKind::BatchNormTrainGrad, "batch_norm_train_grad"},
    {OpKind::Conv2d, "conv2d"},
    {OpKind::Conv2dBackwardData, "conv2d_backward_data"},
    {OpKind::Conv2dBackwardWeights, "conv2d_backward_weights"},
    {OpKind::MaxPool2d, "max_pool2d"},
    {OpKind::AvgPool2d, "avg_pool2d"},
    {OpKind::MaxPool2dGrad, "max_pool2d_grad"},
    {OpKind::AvgPool2dGrad, "avg_pool2d_grad"},
    {OpKind::ConvTranspose2d, "conv_transpose2d"},
    {OpKind::ConvTranspose2dGradInput, "conv_transpose2d_grad_input"},
    {OpKind::ConvTranspose2dGradWeight, "conv_transpose2d_grad_weight"},
    {OpKind::SgdUpdate, "sgd_update"},
    {OpKind::AdamUpdate, "adam_update"},
    {OpKind::Equal, "equal"},
    {OpKind::Less, "less"},
    {OpKind::Greater, "greater"},
    {OpKind::LessEqual, "less_equal"},
    {OpKind::GreaterEqual, "greater_equal"},
    {OpKind::LogicalNot, "logical_not"},
    {OpKind::LogicalAnd, "logical_and"},
    {OpKind::LogicalOr, "logical_or"},
    {OpKind::LogicalXor, "logical_xor"},
    {OpKind::Where, "where"},
    {OpKind::IsNaN, "is_nan"},
    {OpKind::IsInf, "is_inf"},
    {OpKind::Erf, "erf"},
    {OpKind::Sin, "sin"},
    {OpKind::Cos, "cos"},
    {OpKind::Tan, "tan"},
    {OpKind::Asin, "asin"},
    {OpKind::Acos, "acos"},
    {OpKind::Atan, "atan"},
    {OpKind::Sinh, "sinh"},
    {OpKind::Cosh, "cosh"},
    {OpKind::Asinh, "asinh"},
    {OpKind::Acosh, "acosh"},
    {OpKind::Atanh, "atanh"},
    {OpKind::Floor, "floor"},
    {OpKind::Ceil, "ceil"},
    {OpKind::Round, "round"},
    {OpKind::Sign, "sign"},
    {OpKind::Abs, "abs"},
    {OpKind::Gelu, "gelu"},
    {OpKind::Mod, "mod"},
    {OpKind::BitShift, "bit_shift"},
    {OpKind::MelWeightMatrix, "mel_weight_matrix"},
    {OpKind::Resize, "resize"},
    {OpKind::ResizeGrad, "resize_grad"},
    {OpKind::GridSample, "grid_sample"},
    {OpKind::TopK, "top_k"},
    {OpKind::NonMaxSuppression, "non_max_suppression"},
    {OpKind::RoiAlign, "roi_align"},
    {OpKind::SequenceConstruct, "sequence_construct"},
    {OpKind::SequenceInsert, "sequence_insert"},
    {OpKind::SequenceAt, "sequence_at"},
    {OpKind::SequenceErase, "sequence_erase"},
    {OpKind::SequenceLength, "sequence_length"},
    {OpKind::ConcatFromSequence, "concat_from_sequence"},
    {OpKind::SplitToSequence, "split_to_sequence"},
    {OpKind::OptionalHasElement, "optional_has_element"},
    {OpKind::OptionalGetElement, "optional_get_element"},
    {OpKind::TfIdfVectorizer, "tfidf_vectorizer"},
    {OpKind::StringNormalizer, "string_normalizer"},
    {OpKind::StringFormat, "string_format"},
    {OpKind::StringParse, "string_parse"},
    {OpKind::StringLookup, "string_lookup"},
    {OpKind::RandomUniform, "random_uniform"},
    {OpKind::RandomNormal, "random_normal"},
    {OpKind::If, "if"},
    {OpKind::Loop, "loop"},
    {OpKind::Scan, "scan"},
    {OpKind::OnnxNode, "onnx_node"},
    {OpKind::Reorder, "reorder"},
};

// As ggml's GGML_OP_COUNT check: a kind added to the enum needs its row
// here, and the rows must follow the enum (op_name indexes by kind).
static_assert(std::size(kOps) == kOpKindCount, "kOps needs exactly one row per OpKind");
constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < std::size(kOps); ++i)
    if (static_cast<size_t>(kOps[i].kind) != i) return false;
  return true;
}
static_assert(rows_in_enum_order(), "kOps rows must be in OpKind order");
// The count itself, so that adding a kind is a deliberate edit of this line
// too: check the CUDA table (cuda/ops*.cpp) and the ONNX rows
// (src/ops/*_onnx.cpp) for the new op.
static_assert(kOpKindCount == 184, "a new OpKind: see the comment above");

std::string number_str(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  // Shortest of %.6g .. %.17g that reads back the same.
  for (int p = 6; p < 17; ++p) {
    char b[32];
    std::snprintf(b, sizeof b, "%.*g", p, v);
    if (std::strtod(b, nullptr) == v || std::isnan(v)) return b;
  }
  return buf;
}

}  // namespace

const char* op_name(OpKind k) {
  const size_t i = static_cast<size_t>(k);
  return i < kOpKindCount ? kOps[i].name : "?";
}

bool op_kind_from_name(const std::string& name, OpKind* out) {
  for (const OpRow& r : kOps)
    if (name == r.name) {
      *out = r.kind;
      return true;
    }
  return false;
}

// ---- attributes ----

const AttrValue* find_attr(const Attrs& a, const std::string& key) {
  for (const auto& [k, v] : a)
    if (k == key) return &v;
  return nullptr;
}

std::string attrs_str(const Attrs& a) {
  std::string s;
  for (const auto& [k, v] : a) {
    s += (s.empty() ? "" : " ") + k + "=";
    if (auto* i = std::get_if<int64_t>(&v)) s += std::to_string(*i);
    else if (auto* d = std::get_if<double>(&v)) s += number_str(*d);
    else if (auto* t = std::get_if<std::string>(&v)) s += *t;
    else if (auto* l = std::get_if<std::vector<int64_t>>(&v)) s += shape_str(*l);
    else if (auto* ds = std::get_if<std::vector<double>>(&v)) {
      s += "(";
      for (size_t i = 0; i < ds->size(); ++i) s += (i ? ", " : "") + number_str((*ds)[i]);
      s += ")";
    } else {
      const Tensor& t = std::get<Tensor>(v);
      s += spec_str({t.shape(), t.dtype()});
    }
  }
  return s;
}

namespace {
template <class T>
const T& typed_attr(const Primitive& p, const Attrs& a, const std::string& key, const char* type) {
  const AttrValue* v = find_attr(a, key);
  if (!v) op_error(p.name(), "has no attribute '" + key + "'");
  const T* t = std::get_if<T>(v);
  if (!t) op_error(p.name(), "attribute '" + key + "' is not " + type);
  return *t;
}
}  // namespace

int64_t Primitive::attr_int(const std::string& key) const {
  return typed_attr<int64_t>(*this, attributes(), key, "an integer");
}
double Primitive::attr_double(const std::string& key) const {
  const Attrs a = attributes();
  if (const AttrValue* v = find_attr(a, key))
    if (auto* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  return typed_attr<double>(*this, a, key, "a number");
}
std::string Primitive::attr_string(const std::string& key) const {
  return typed_attr<std::string>(*this, attributes(), key, "a string");
}
std::vector<int64_t> Primitive::attr_ints(const std::string& key) const {
  return typed_attr<std::vector<int64_t>>(*this, attributes(), key, "a list of integers");
}
std::vector<double> Primitive::attr_doubles(const std::string& key) const {
  return typed_attr<std::vector<double>>(*this, attributes(), key, "a list of numbers");
}
Tensor Primitive::attr_tensor(const std::string& key) const {
  return typed_attr<Tensor>(*this, attributes(), key, "a tensor");
}

// ---- Primitive defaults and infer() helpers ----

std::vector<Blob> Primitive::vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                                 const std::vector<int>&) const {
  op_error(name(), "has no gradient");
}

std::vector<Tensor> Primitive::eval_sized(const std::vector<Tensor>&, ExecContext&) const {
  op_error(name(), "internal: eval_sized() of an op that does not size its outputs");
}

std::vector<TensorSpec> Primitive::infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>&) const {
  return infer(in);
}

bool shapes_agree(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!dims_agree(a[i], b[i])) return false;
  return true;
}
bool specs_agree(const TensorSpec& a, const TensorSpec& b) { return a.dtype == b.dtype && shapes_agree(a.shape, b.shape); }
Shape merge_shapes(const Shape& a, const Shape& b) {
  Shape r = a;
  for (size_t i = 0; i < r.size() && i < b.size(); ++i)
    if (r[i] < 0) r[i] = b[i];
  return r;
}

void op_error(const char* op, const std::string& what) { throw Error(std::string("[") + op + "] " + what); }

void expect_inputs(const char* op, const std::vector<TensorSpec>& in, size_t n) {
  if (in.size() != n)
    op_error(op, "expects " + std::to_string(n) + " inputs, got " + std::to_string(in.size()));
}
void expect_float(const char* op, const TensorSpec& s, const char* arg) {
  if (!is_floating(s.dtype))
    op_error(op, std::string(arg) + " must be float32 or float64, got " + spec_str(s));
}
void expect_not_bool(const char* op, const TensorSpec& s, const char* arg) {
  if (s.dtype == DType::Bool) op_error(op, std::string(arg) + " must be numeric, got " + spec_str(s));
}
void expect_same_dtype(const char* op, const TensorSpec& a, const TensorSpec& b) {
  if (a.dtype != b.dtype)
    op_error(op, std::string("dtypes differ: ") + spec_str(a) + " vs " + spec_str(b));
}

}  // namespace jobflow
