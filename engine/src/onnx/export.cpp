// jobflow::onnx::save(): a job's forward graph as a standard ONNX model
// (opset 17) plus the jobflow.* metadata that makes it a job file
// (docs/job-files.md).
//
// Tensor names: placeholders keep their names ("images"), variables are
// initializers named by the variable ("conv1-weight"), every other value is
// named by its blob ("<node name>/out<i>"). Graph outputs are the job's
// returns in flat order; a return that is a placeholder, a variable or
// returned twice goes through an Identity named "output<i>".
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "jobflow/checkpoint_io.h"
#include "jobflow/onnx.h"
#include "jobflow/optimizer.h"
#include "jobflow/primitive.h"
#include "onnx/onnx_util.h"
#include "session_internal.h"
#include "state_ops.h"

namespace jobflow::onnx {
namespace {

namespace fs = std::filesystem;
using ::onnx::AttributeProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;

const AttrValue* find_attr(const Attrs& a, const char* key) {
  for (auto& [k, v] : a)
    if (k == key) return &v;
  return nullptr;
}

class Exporter {
 public:
  Exporter(const CompiledJob& job, const SaveOptions& opts) : job_(job), def_(job.definition()), opts_(opts) {}

  ::onnx::ModelProto run(const std::string& path);

 private:
  const CompiledJob& job_;
  const JobDefinition& def_;
  const SaveOptions& opts_;
  const Graph* g_ = nullptr;
  ::onnx::GraphProto* gp_ = nullptr;
  std::vector<std::string> names_;        // blob id -> ONNX tensor name
  std::set<std::string> used_names_;
  std::vector<char> live_;                // forward node -> exported
  std::vector<char> folded_;              // bias_add folded into its producer
  std::vector<std::vector<int>> consumers_;
  std::set<int> kept_blobs_;              // outputs and the loss: never folded away
  std::map<std::string, std::shared_ptr<internal::VariableEntry>> vars_;  // exported variables
  const Node* node_ = nullptr;            // node being exported (errors)

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("[onnx.save] job '" + job_.signature().job_name + "': " + what);
  }
  [[noreturn]] void no_form(const std::string& why = "") const {
    fail("op '" + std::string(node_->op->name()) + "' (node '" + node_->name + "') has no ONNX form" +
         (why.empty() ? "" : ": " + why));
  }

  std::string fresh(const std::string& base) {
    std::string n = base;
    for (int k = 1; used_names_.count(n); ++k) n = base + "_" + std::to_string(k);
    used_names_.insert(n);
    return n;
  }
  const std::string& in(int i) const { return names_[node_->inputs.at(i)]; }
  const std::string& out(int i) const { return names_[node_->outputs.at(i)]; }
  const TensorSpec& spec(int blob) const { return g_->blobs[blob].spec; }
  const TensorSpec& in_spec(int i) const { return spec(node_->inputs.at(i)); }
  const TensorSpec& out_spec(int i) const { return spec(node_->outputs.at(i)); }

  int64_t iattr(const Attrs& a, const char* k) const {
    const AttrValue* v = find_attr(a, k);
    if (!v || !std::holds_alternative<int64_t>(*v)) no_form(std::string("missing attribute ") + k);
    return std::get<int64_t>(*v);
  }
  double dattr(const Attrs& a, const char* k) const {
    const AttrValue* v = find_attr(a, k);
    if (!v || !std::holds_alternative<double>(*v)) no_form(std::string("missing attribute ") + k);
    return std::get<double>(*v);
  }
  std::vector<int64_t> vattr(const Attrs& a, const char* k) const {
    const AttrValue* v = find_attr(a, k);
    if (!v || !std::holds_alternative<std::vector<int64_t>>(*v)) no_form(std::string("missing attribute ") + k);
    return std::get<std::vector<int64_t>>(*v);
  }
  std::string sattr(const Attrs& a, const char* k) const {
    const AttrValue* v = find_attr(a, k);
    if (!v || !std::holds_alternative<std::string>(*v)) no_form(std::string("missing attribute ") + k);
    return std::get<std::string>(*v);
  }
  // Whether a parameter of an activation survives an ONNX float attribute
  // (float32) exactly for the op's data: the engine's float32 kernels use
  // the parameter as a float32 anyway; float64 kernels need every bit.
  bool float_attr_exact(double v) const {
    return in_spec(0).dtype != DType::Float64 || std::isnan(v) || static_cast<double>(static_cast<float>(v)) == v;
  }
  // No form when a float64 job's parameter is not a float32 (the loaded file
  // would compute something else).
  void check_param(const char* k, double v) const {
    if (!float_attr_exact(v))
      no_form(std::string("its ") + k + " = " + onnx_util::number_to_text(v) +
              " is not exactly a float32 (the type of ONNX's attribute) and the data is float64");
  }

  NodeProto* add(const std::string& type, std::vector<std::string> inputs, std::vector<std::string> outputs,
                 const std::string& name) {
    NodeProto* n = gp_->add_node();
    n->set_op_type(type);
    n->set_name(name);
    for (auto& i : inputs) n->add_input(i);
    for (auto& o : outputs) n->add_output(o);
    return n;
  }
  static void set_int(NodeProto* n, const char* k, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(k);
    a->set_type(AttributeProto::INT);
    a->set_i(v);
  }
  static void set_float(NodeProto* n, const char* k, double v) {
    auto* a = n->add_attribute();
    a->set_name(k);
    a->set_type(AttributeProto::FLOAT);
    a->set_f(static_cast<float>(v));
  }
  static void set_ints(NodeProto* n, const char* k, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(k);
    a->set_type(AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void set_string(NodeProto* n, const char* k, const std::string& v) {
    auto* a = n->add_attribute();
    a->set_name(k);
    a->set_type(AttributeProto::STRING);
    a->set_s(v);
  }
  static void set_tensor(NodeProto* n, const char* k, const Tensor& t) {
    auto* a = n->add_attribute();
    a->set_name(k);
    a->set_type(AttributeProto::TENSOR);
    onnx_util::tensor_to_proto(t, "", a->mutable_t());
  }
  // An int64 initializer (shapes, axes, starts): constants, never variables.
  std::string int64_init(const std::string& base, const std::vector<int64_t>& v) {
    const std::string name = fresh(base);
    onnx_util::tensor_to_proto(Tensor::from<int64_t>({static_cast<int64_t>(v.size())}, v), name, gp_->add_initializer());
    return name;
  }
  // Any other synthetic constant: a Constant node (so loaders never take it
  // for a variable).
  std::string constant(const std::string& base, const Tensor& t) {
    const std::string name = fresh(base);
    set_tensor(add("Constant", {}, {name}, name), "value", t);
    return name;
  }
  static Tensor scalar_of(DType dt, double v) {
    Tensor t({}, dt);
    switch (dt) {
      case DType::Float32: t.data<float>()[0] = static_cast<float>(v); break;
      case DType::Float64: t.data<double>()[0] = v; break;
      case DType::Int32: t.data<int32_t>()[0] = static_cast<int32_t>(v); break;
      case DType::Int64: t.data<int64_t>()[0] = static_cast<int64_t>(v); break;
      case DType::Int8: t.data<int8_t>()[0] = static_cast<int8_t>(v); break;
      case DType::UInt8: t.data<uint8_t>()[0] = static_cast<uint8_t>(v); break;
    }
    return t;
  }
  static Tensor filled(const Shape& s, DType dt, double v) {
    Tensor t(s, dt);
    for (int64_t i = 0; i < t.numel(); ++i) {
      Tensor one = scalar_of(dt, v);
      std::memcpy(static_cast<char*>(t.raw()) + i * dtype_size(dt), one.raw(), dtype_size(dt));
    }
    return t;
  }

  // Only output 0 of the node is representable: the others must be unused.
  void only_first_output() const {
    for (size_t k = 1; k < node_->outputs.size(); ++k) {
      const int b = node_->outputs[k];
      if (kept_blobs_.count(b)) no_form("its output " + std::to_string(k) + " is returned");
      for (int c : consumers_[b])
        if (c < static_cast<int>(live_.size()) && live_[c]) no_form("its output " + std::to_string(k) + " is used");
    }
  }
  // The live bias_add (axis 1) reading output 0 of the current node alone,
  // whose bias is defined before it: folded into Gemm/Conv. -1 when none.
  int foldable_bias_add(bool conv) const {
    if (node_->outputs.size() != 1) return -1;
    const int y = node_->outputs[0];
    if (kept_blobs_.count(y)) return -1;
    int reader = -1, n = 0;
    for (int c : consumers_[y])
      if (c < static_cast<int>(live_.size()) && live_[c]) ++n, reader = c;
    if (n != 1) return -1;
    const Node& b = g_->nodes[reader];
    if (std::string(b.op->name()) != "bias_add" || b.inputs[0] != y) return -1;
    const Attrs a = b.op->attributes();
    const AttrValue* ax = find_attr(a, "axis");
    if (!ax || !std::holds_alternative<int64_t>(*ax)) return -1;
    const int64_t rank = static_cast<int64_t>(spec(y).shape.size());
    int64_t axis = std::get<int64_t>(*ax);
    if (axis < 0) axis += rank;
    if (axis != 1 || rank != (conv ? 4 : 2)) return -1;
    const TensorSpec& bs = spec(b.inputs[1]);
    if (bs.dtype != spec(y).dtype || bs.shape != Shape{spec(y).shape[1]}) return -1;
    // A fused bias_add+relu keeps its relu after the folded bias.
    if (const AttrValue* r = find_attr(a, "relu"); r && std::holds_alternative<int64_t>(*r) && std::get<int64_t>(*r))
      return -1;
    // The bias must be available where the Gemm/Conv goes: a graph input or
    // initializer (placeholder, variable), or computed before it.
    const int bp = g_->blobs[b.inputs[1]].producer;
    const int self = g_->blobs[y].producer;
    const Primitive* bop = bp >= 0 ? g_->nodes[bp].op.get() : nullptr;
    const bool source = !bop || dynamic_cast<const internal::VariableOp*>(bop) ||
                        dynamic_cast<const internal::PlaceholderOp*>(bop);
    if (!source && bp >= self) return -1;
    return reader;
  }

  void export_node(int index);
  void export_matmul(const Attrs& a);
  void export_conv(const Attrs& a);
  void export_conv_transpose(const Attrs& a);
  void export_activation(const std::string& op, const Attrs& a);
  void export_clip(const Attrs& a);
  void add_metadata(::onnx::ModelProto& m);
};

void Exporter::export_matmul(const Attrs& a) {
  const bool ta = iattr(a, "transpose_a"), tb = iattr(a, "transpose_b");
  const bool bias = iattr(a, "bias"), relu = iattr(a, "relu");
  const TensorSpec &A = in_spec(0), &B = in_spec(1);
  std::string y = out(0);
  const std::string base = node_->name;
  int fold = -1;
  std::string bias_name;
  if (bias) {
    bias_name = in(2);
  } else if (A.shape.size() == 2 && B.shape.size() == 2) {
    fold = foldable_bias_add(false);
    if (fold >= 0) {
      bias_name = names_[g_->nodes[fold].inputs[1]];
      folded_[fold] = 1;
      y = names_[g_->nodes[fold].outputs[0]];
    }
  }
  // With a fused relu the Gemm result is an intermediate.
  const std::string mm_out = relu ? fresh(base + "/matmul") : y;
  if (A.shape.size() == 2 && B.shape.size() == 2) {
    std::vector<std::string> ins{in(0), in(1)};
    if (!bias_name.empty()) ins.push_back(bias_name);
    NodeProto* n = add("Gemm", ins, {mm_out}, base);
    if (ta) set_int(n, "transA", 1);
    if (tb) set_int(n, "transB", 1);
  } else {
    auto tr = [&](const std::string& x, size_t rank) {
      std::vector<int64_t> perm(rank);
      for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int64_t>(i);
      std::swap(perm[rank - 1], perm[rank - 2]);
      const std::string t = fresh(x + "/T");
      set_ints(add("Transpose", {x}, {t}, t), "perm", perm);
      return t;
    };
    const std::string a_in = ta ? tr(in(0), A.shape.size()) : in(0);
    const std::string b_in = tb ? tr(in(1), B.shape.size()) : in(1);
    if (bias) {
      const std::string mm = fresh(base + "/matmul_nobias");
      add("MatMul", {a_in, b_in}, {mm}, base);
      add("Add", {mm, bias_name}, {mm_out}, fresh(base + "/bias"));
    } else {
      add("MatMul", {a_in, b_in}, {mm_out}, base);
    }
  }
  if (relu) add("Relu", {mm_out}, {y}, fresh(base + "/relu"));
}

void Exporter::export_conv(const Attrs& a) {
  const bool bias = iattr(a, "bias"), relu = iattr(a, "relu");
  std::string y = out(0);
  std::string bias_name;
  if (bias) {
    bias_name = in(2);
  } else {
    const int fold = foldable_bias_add(true);
    if (fold >= 0) {
      bias_name = names_[g_->nodes[fold].inputs[1]];
      folded_[fold] = 1;
      y = names_[g_->nodes[fold].outputs[0]];
    }
  }
  const std::string conv_out = relu ? fresh(node_->name + "/conv") : y;
  std::vector<std::string> ins{in(0), in(1)};
  if (!bias_name.empty()) ins.push_back(bias_name);
  NodeProto* n = add("Conv", ins, {conv_out}, node_->name);
  const Shape& w = in_spec(1).shape;
  set_ints(n, "kernel_shape", {w.at(2), w.at(3)});
  set_ints(n, "strides", vattr(a, "strides"));
  set_ints(n, "pads", vattr(a, "pads"));
  set_ints(n, "dilations", vattr(a, "dilations"));
  set_int(n, "group", iattr(a, "group"));
  if (relu) add("Relu", {conv_out}, {y}, fresh(node_->name + "/relu"));
}

// conv_transpose2d -> ConvTranspose (same weight layout (C_in, C_out/group,
// kh, kw) and attributes); a bias_add along the channels that only it reads
// becomes the B input, as for Conv.
void Exporter::export_conv_transpose(const Attrs& a) {
  std::string y = out(0);
  std::vector<std::string> ins{in(0), in(1)};
  const int fold = foldable_bias_add(true);
  if (fold >= 0) {
    ins.push_back(names_[g_->nodes[fold].inputs[1]]);
    folded_[fold] = 1;
    y = names_[g_->nodes[fold].outputs[0]];
  }
  NodeProto* n = add("ConvTranspose", ins, {y}, node_->name);
  const Shape& w = in_spec(1).shape;
  set_ints(n, "kernel_shape", {w.at(2), w.at(3)});
  set_ints(n, "strides", vattr(a, "strides"));
  set_ints(n, "pads", vattr(a, "pads"));
  set_ints(n, "dilations", vattr(a, "dilations"));
  set_ints(n, "output_padding", vattr(a, "output_padding"));
  set_int(n, "group", iattr(a, "group"));
}

// The parameterized activations of engine/src/ops/activations.cpp, each the
// ONNX op of the same definition (the importer maps them back).
void Exporter::export_activation(const std::string& op, const Attrs& a) {
  const std::string& nm = node_->name;
  const DType dt = in_spec(0).dtype;
  if (op == "leaky_relu") {
    const double alpha = dattr(a, "alpha");
    if (float_attr_exact(alpha)) {
      set_float(add("LeakyRelu", {in(0)}, {out(0)}, nm), "alpha", alpha);
    } else {
      // x >= 0 ? x : alpha x is PRelu with a scalar slope, which a float64
      // tensor holds exactly.
      add("PRelu", {in(0), constant(nm + "/alpha", scalar_of(dt, alpha))}, {out(0)}, nm);
    }
  } else if (op == "elu") {
    check_param("alpha", dattr(a, "alpha"));
    set_float(add("Elu", {in(0)}, {out(0)}, nm), "alpha", dattr(a, "alpha"));
  } else if (op == "selu") {
    const double alpha = dattr(a, "alpha"), gamma = dattr(a, "gamma");
    check_param("alpha", alpha);
    check_param("gamma", gamma);
    NodeProto* n = add("Selu", {in(0)}, {out(0)}, nm);
    set_float(n, "alpha", alpha);
    set_float(n, "gamma", gamma);
  } else if (op == "hard_sigmoid") {
    const double alpha = dattr(a, "alpha"), beta = dattr(a, "beta");
    if (float_attr_exact(alpha) && float_attr_exact(beta)) {
      NodeProto* n = add("HardSigmoid", {in(0)}, {out(0)}, nm);
      set_float(n, "alpha", alpha);
      set_float(n, "beta", beta);
    } else {
      // min(max(alpha x + beta, 0), 1) with exact float64 constants: the
      // same operations in the same order.
      const std::string ax = fresh(nm + "/scaled"), axb = fresh(nm + "/shifted");
      add("Mul", {in(0), constant(nm + "/alpha", scalar_of(dt, alpha))}, {ax}, ax);
      add("Add", {ax, constant(nm + "/beta", scalar_of(dt, beta))}, {axb}, axb);
      add("Clip", {axb, constant(nm + "/zero", scalar_of(dt, 0.0)), constant(nm + "/one", scalar_of(dt, 1.0))},
          {out(0)}, nm);
    }
  } else {
    no_form();
  }
}

template <class T>
Tensor int_bound(double v, bool upper) {
  // As the engine's integer clip: rounded inwards, saturated to T's range.
  constexpr T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
  const double r = upper ? std::floor(v) : std::ceil(v);
  return Tensor::scalar<T>(r <= static_cast<double>(lo) ? lo : r >= static_cast<double>(hi) ? hi : static_cast<T>(r));
}

// clip -> Clip(x, min, max) with the bounds as scalars of x's dtype (inputs
// since opset 11, so float64 bounds stay exact); an infinite bound is absent.
void Exporter::export_clip(const Attrs& a) {
  const DType dt = in_spec(0).dtype;
  auto bound = [&](double v, bool upper) -> std::string {
    if (std::isinf(v) && (v > 0) == upper) return "";
    const std::string name = node_->name + (upper ? "/max" : "/min");
    if (is_floating(dt)) return constant(name, scalar_of(dt, v));
    if (std::isnan(v)) no_form("a NaN bound on integer data");
    switch (dt) {
      case DType::Int32: return constant(name, int_bound<int32_t>(v, upper));
      case DType::Int64: return constant(name, int_bound<int64_t>(v, upper));
      case DType::Int8: return constant(name, int_bound<int8_t>(v, upper));
      case DType::UInt8: return constant(name, int_bound<uint8_t>(v, upper));
      default: no_form(std::string("dtype ") + dtype_name(dt));
    }
  };
  std::vector<std::string> ins{in(0), bound(dattr(a, "min"), false), bound(dattr(a, "max"), true)};
  while (ins.back().empty()) ins.pop_back();
  add("Clip", ins, {out(0)}, node_->name);
}

void Exporter::export_node(int index) {
  node_ = &g_->nodes[index];
  const std::string op = node_->op->name();
  const Attrs a = node_->op->attributes();
  const std::string& nm = node_->name;
  const bool train = def_.optimizer != nullptr && job_.signature().type == JobType::Train;

  static const std::map<std::string, std::string> unary = {
      {"neg", "Neg"},   {"exp", "Exp"},   {"log", "Log"},           {"sqrt", "Sqrt"},         {"sigmoid", "Sigmoid"},
      {"tanh", "Tanh"}, {"relu", "Relu"}, {"identity", "Identity"}, {"softplus", "Softplus"}, {"softsign", "Softsign"}};
  // Same dtypes, numpy broadcasting (Min/Max: NaN propagates, as the engine's
  // minimum/maximum); prelu's slope broadcasts to x.
  static const std::map<std::string, std::string> binary = {
      {"add", "Add"}, {"sub", "Sub"},     {"mul", "Mul"},     {"div", "Div"},
      {"pow", "Pow"}, {"minimum", "Min"}, {"maximum", "Max"}, {"prelu", "PRelu"}};

  if (auto it = unary.find(op); it != unary.end()) {
    add(it->second, {in(0)}, {out(0)}, nm);
  } else if (auto it2 = binary.find(op); it2 != binary.end()) {
    add(it2->second, {in(0), in(1)}, {out(0)}, nm);
  } else if (op == "rsqrt") {
    const std::string s = fresh(nm + "/sqrt");
    add("Sqrt", {in(0)}, {s}, s);
    add("Reciprocal", {s}, {out(0)}, nm);
  } else if (op == "square") {
    add("Mul", {in(0), in(0)}, {out(0)}, nm);
  } else if (op == "add_scalar" || op == "mul_scalar") {
    const std::string c = constant(nm + "/scalar", scalar_of(in_spec(0).dtype, dattr(a, "scalar")));
    add(op == "add_scalar" ? "Add" : "Mul", {in(0), c}, {out(0)}, nm);
  } else if (op == "equal_mask") {
    const std::string e = fresh(nm + "/equal");
    add("Equal", {in(0), in(1)}, {e}, e);
    set_int(add("Cast", {e}, {out(0)}, nm), "to", onnx_util::to_onnx_dtype(out_spec(0).dtype));
  } else if (op == "add_n") {
    std::vector<std::string> ins;
    for (size_t i = 0; i < node_->inputs.size(); ++i) ins.push_back(in(static_cast<int>(i)));
    add("Sum", ins, {out(0)}, nm);
  } else if (op == "cast") {
    const AttrValue* v = find_attr(a, "dtype");
    if (!v || !std::holds_alternative<std::string>(*v)) no_form("missing attribute dtype");
    set_int(add("Cast", {in(0)}, {out(0)}, nm), "to", onnx_util::to_onnx_dtype(dtype_from_name(std::get<std::string>(*v))));
  } else if (op == "matmul") {
    export_matmul(a);
  } else if (op == "bias_add") {
    const int64_t rank = static_cast<int64_t>(in_spec(0).shape.size());
    int64_t axis = iattr(a, "axis");
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) no_form("axis out of range");
    const bool relu = iattr(a, "relu");
    std::string b = in(1);
    if (axis != rank - 1) {
      std::vector<int64_t> shape(static_cast<size_t>(rank - axis), 1);
      shape[0] = -1;
      b = fresh(nm + "/bias_reshaped");
      add("Reshape", {in(1), int64_init(nm + "/bias_shape", shape)}, {b}, b);
    }
    const std::string sum = relu ? fresh(nm + "/sum") : out(0);
    add("Add", {in(0), b}, {sum}, nm);
    if (relu) add("Relu", {sum}, {out(0)}, fresh(nm + "/relu"));
  } else if (op == "conv2d") {
    export_conv(a);
  } else if (op == "conv_transpose2d") {
    export_conv_transpose(a);
  } else if (op == "leaky_relu" || op == "elu" || op == "selu" || op == "hard_sigmoid") {
    export_activation(op, a);
  } else if (op == "clip") {
    export_clip(a);
  } else if (op == "max_pool2d" || op == "avg_pool2d") {
    only_first_output();
    NodeProto* n = add(op == "max_pool2d" ? "MaxPool" : "AveragePool", {in(0)}, {out(0)}, nm);
    set_ints(n, "kernel_shape", vattr(a, "kernel_shape"));
    set_ints(n, "strides", vattr(a, "strides"));
    set_ints(n, "pads", vattr(a, "pads"));
    if (op == "avg_pool2d") set_int(n, "count_include_pad", 0);
  } else if (op == "reshape") {
    add("Reshape", {in(0), int64_init(nm + "/shape", out_spec(0).shape)}, {out(0)}, nm);
  } else if (op == "transpose") {
    set_ints(add("Transpose", {in(0)}, {out(0)}, nm), "perm", vattr(a, "perm"));
  } else if (op == "concat") {
    std::vector<std::string> ins;
    for (size_t i = 0; i < node_->inputs.size(); ++i) ins.push_back(in(static_cast<int>(i)));
    set_int(add("Concat", ins, {out(0)}, nm), "axis", iattr(a, "axis"));
  } else if (op == "slice") {
    const int64_t axis = iattr(a, "axis"), start = iattr(a, "start"), len = iattr(a, "len");
    add("Slice",
        {in(0), int64_init(nm + "/starts", {start}), int64_init(nm + "/ends", {start + len}),
         int64_init(nm + "/axes", {axis})},
        {out(0)}, nm);
  } else if (op == "strided_slice") {
    // ONNX Slice itself (the engine's slice follows its clamping rules).
    add("Slice",
        {in(0), int64_init(nm + "/starts", vattr(a, "starts")), int64_init(nm + "/ends", vattr(a, "ends")),
         int64_init(nm + "/axes", vattr(a, "axes")), int64_init(nm + "/steps", vattr(a, "steps"))},
        {out(0)}, nm);
  } else if (op == "gather") {
    set_int(add("Gather", {in(0), in(1)}, {out(0)}, nm), "axis", iattr(a, "axis"));
  } else if (op == "split") {
    std::vector<std::string> outs;
    for (size_t i = 0; i < node_->outputs.size(); ++i) outs.push_back(out(static_cast<int>(i)));
    set_int(add("Split", {in(0), int64_init(nm + "/split", vattr(a, "split"))}, outs, nm), "axis", iattr(a, "axis"));
  } else if (op == "pad") {
    const std::string mode = sattr(a, "mode");
    std::vector<std::string> ins{in(0), int64_init(nm + "/pads", vattr(a, "pads"))};
    const double value = dattr(a, "value");
    // ONNX's default constant_value is 0 (+0.0).
    if (mode == "constant" && (value != 0.0 || std::signbit(value)))
      ins.push_back(constant(nm + "/value", scalar_of(in_spec(0).dtype, value)));
    set_string(add("Pad", ins, {out(0)}, nm), "mode", mode);
  } else if (op == "constant") {
    const AttrValue* v = find_attr(a, "value");
    if (!v || !std::holds_alternative<Tensor>(*v)) no_form("missing attribute value");
    set_tensor(add("Constant", {}, {out(0)}, nm), "value", std::get<Tensor>(*v));
  } else if (op == "reduce_sum" || op == "reduce_mean" || op == "reduce_max") {
    const std::vector<int64_t> axes = vattr(a, "axes");
    const bool keep = iattr(a, "keepdims");
    const char* type = op == "reduce_sum" ? "ReduceSum" : op == "reduce_mean" ? "ReduceMean" : "ReduceMax";
    if (op == "reduce_sum" || opts_.opset >= 18) {  // axes an input (ReduceSum-13; every Reduce* from 18)
      std::vector<std::string> ins{in(0)};
      if (!axes.empty()) ins.push_back(int64_init(nm + "/axes", axes));
      set_int(add(type, ins, {out(0)}, nm), "keepdims", keep);
    } else {
      NodeProto* n = add(type, {in(0)}, {out(0)}, nm);
      if (!axes.empty()) set_ints(n, "axes", axes);
      set_int(n, "keepdims", keep);
    }
  } else if (op == "sum_to") {
    const Shape& x = in_spec(0).shape;
    const Shape target = vattr(a, "shape");
    std::vector<int64_t> axes;
    const size_t lead = x.size() - target.size();
    for (size_t i = 0; i < x.size(); ++i)
      if (i < lead || (target[i - lead] == 1 && x[i] != 1)) axes.push_back(static_cast<int64_t>(i));
    std::string r = in(0);
    if (!axes.empty()) {
      r = fresh(nm + "/sum");
      std::vector<std::string> ins{in(0), int64_init(nm + "/axes", axes)};
      set_int(add("ReduceSum", ins, {r}, r), "keepdims", 1);
    }
    add("Reshape", {r, int64_init(nm + "/shape", target)}, {out(0)}, nm);
  } else if (op == "argmax") {
    const std::string r = fresh(nm + "/int64");
    NodeProto* n = add("ArgMax", {in(0)}, {r}, nm);
    set_int(n, "axis", iattr(a, "axis"));
    set_int(n, "keepdims", 0);
    set_int(add("Cast", {r}, {out(0)}, fresh(nm + "/cast")), "to", onnx_util::to_onnx_dtype(out_spec(0).dtype));
  } else if (op == "broadcast_to") {
    add("Expand", {in(0), int64_init(nm + "/shape", vattr(a, "shape"))}, {out(0)}, nm);
  } else if (op == "zeros_like" || op == "ones_like") {
    NodeProto* n = add("ConstantOfShape", {int64_init(nm + "/shape", out_spec(0).shape)}, {out(0)}, nm);
    set_tensor(n, "value", filled({1}, out_spec(0).dtype, op == "ones_like" ? 1.0 : 0.0));
  } else if (op == "softmax" || op == "log_softmax") {
    set_int(add(op == "softmax" ? "Softmax" : "LogSoftmax", {in(0)}, {out(0)}, nm), "axis", iattr(a, "axis"));
  } else if (op == "sparse_softmax_cross_entropy") {
    only_first_output();
    std::string labels = in(0);
    if (in_spec(0).dtype != DType::Int64) {
      labels = fresh(nm + "/labels_int64");
      set_int(add("Cast", {in(0)}, {labels}, labels), "to", TensorProto::INT64);
    }
    set_string(add("SoftmaxCrossEntropyLoss", {in(1), labels}, {out(0)}, nm), "reduction", "none");
  } else if (op == "dropout") {
    only_first_output();
    std::vector<std::string> ins{in(0), constant(nm + "/ratio", scalar_of(DType::Float64, dattr(a, "rate")))};
    if (train) {
      const std::string t = fresh(nm + "/training_mode");
      NodeProto* c = add("Constant", {}, {t}, t);
      auto* at = c->add_attribute();
      at->set_name("value");
      at->set_type(AttributeProto::TENSOR);
      at->mutable_t()->set_data_type(TensorProto::BOOL);
      at->mutable_t()->set_raw_data(std::string(1, '\1'));
      ins.push_back(t);
    }
    add("Dropout", ins, {out(0)}, nm);
  } else if (op == "batch_normalization" || op == "batch_norm_train") {
    // ONNX: BatchNormalization(X, scale, B, mean, var), channels on axis 1.
    const int64_t rank = static_cast<int64_t>(in_spec(0).shape.size());
    int64_t axis = iattr(a, "axis");
    if (axis < 0) axis += rank;
    if (axis != 1 || rank < 2) no_form("ONNX BatchNormalization normalizes along axis 1 only (axis=" +
                                       std::to_string(iattr(a, "axis")) + ", rank " + std::to_string(rank) + ")");
    const bool functional = op == "batch_normalization";
    const bool has_scale = iattr(a, functional ? "scale" : "gamma");
    const bool has_offset = iattr(a, functional ? "offset" : "beta");
    const int64_t C = in_spec(0).shape[1];
    const DType dt = in_spec(0).dtype;
    // functional inputs: x, mean, var, [offset], [scale]; train: x, mm, mv, [gamma], [beta].
    std::string scale, offset;
    if (functional) {
      if (has_offset) offset = in(3);
      if (has_scale) scale = in(3 + has_offset);
    } else {
      if (has_scale) scale = in(3);
      if (has_offset) offset = in(3 + has_scale);
    }
    if (scale.empty()) scale = constant(nm + "/scale", filled({C}, dt, 1.0));
    if (offset.empty()) offset = constant(nm + "/offset", filled({C}, dt, 0.0));
    std::vector<std::string> outs{out(0)};
    if (!functional) {
      only_first_output();
      // The updated running statistics (written back into the moving
      // variables by a loader's batch_norm_train).
      outs.push_back(fresh(nm + "/running_mean"));
      outs.push_back(fresh(nm + "/running_var"));
    }
    NodeProto* n = add("BatchNormalization", {in(0), scale, offset, in(1), in(2)}, outs, nm);
    set_float(n, "epsilon", dattr(a, "epsilon"));
    if (!functional) {
      set_float(n, "momentum", dattr(a, "momentum"));
      set_int(n, "training_mode", 1);
    }
  } else {
    no_form();
  }
  node_ = nullptr;
}

void Exporter::add_metadata(::onnx::ModelProto& m) {
  const Signature& sig = job_.signature();
  auto put = [&](const char* k, const std::string& v) {
    auto* p = m.add_metadata_props();
    p->set_key(k);
    p->set_value(v);
  };
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + v[i];
    return s;
  };
  put(onnx_util::kVersion, "1");
  put(onnx_util::kJobType, sig.type == JobType::Train ? "train" : "predict");
  put(onnx_util::kJobName, sig.job_name);
  put(onnx_util::kInputStructure, onnx_util::structure_to_text(sig.input_structure));
  put(onnx_util::kOutputStructure, onnx_util::structure_to_text(sig.output_structure));
  put(onnx_util::kCallback, sig.callback ? "1" : "0");
  if (sig.accuracy_labels >= 0)
    put(onnx_util::kAccuracy, std::to_string(sig.accuracy_labels) + "," + std::to_string(sig.accuracy_logits));
  if (sig.type == JobType::Train) {
    if (def_.loss < 0 || !def_.optimizer) fail("train job without a loss or optimizer in its definition");
    put(onnx_util::kLoss, names_[def_.loss]);
    put(onnx_util::kOptimizer, onnx_util::optimizer_to_text(*def_.optimizer));
    put(onnx_util::kSchedule, onnx_util::schedule_to_text(def_.optimizer->scheduler()));
    put(onnx_util::kTrainable, join(def_.trainable));
    std::vector<std::string> state;
    for (size_t i = def_.forward_nodes; i < g_->nodes.size(); ++i)
      if (auto* v = dynamic_cast<const internal::VariableOp*>(g_->nodes[i].op.get())) state.push_back(v->entry()->name);
    std::sort(state.begin(), state.end());
    state.erase(std::unique(state.begin(), state.end()), state.end());
    put(onnx_util::kState, join(state));
  }
  put(onnx_util::kStep, std::to_string(job_.steps_run()));
  put(onnx_util::kSeed, std::to_string(def_.seed));
  put(onnx_util::kDevice, def_.default_device);
}

::onnx::ModelProto Exporter::run(const std::string& path) {
  if (!def_.graph) fail("the job has no definition to export (was it defined with global_function or loaded?)");
  g_ = def_.graph.get();
  const Signature& sig = job_.signature();
  const size_t F = std::min(def_.forward_nodes, g_->nodes.size());

  ::onnx::ModelProto m;
  m.set_ir_version(8);  // opset 17
  m.set_producer_name(opts_.producer);
  m.set_producer_version("1");
  m.set_model_version(1);
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(opts_.opset);
  gp_ = m.mutable_graph();
  gp_->set_name(sig.job_name);

  // Live forward nodes: what the returns, the loss and stateful forward ops
  // (moving statistics) depend on. The compiler's fusion leaves the nodes it
  // absorbed in the graph, dead.
  consumers_ = g_->consumers();
  live_.assign(F, 0);
  folded_.assign(F, 0);
  std::vector<int> stack;
  auto push_blob = [&](int b) {
    const int p = g_->blobs[b].producer;
    if (p >= static_cast<int>(F)) fail("a return depends on a node outside the forward graph");
    if (p >= 0) stack.push_back(p);
  };
  for (int b : def_.outputs) push_blob(b), kept_blobs_.insert(b);
  if (def_.loss >= 0) push_blob(def_.loss), kept_blobs_.insert(def_.loss);
  for (int b : def_.inputs) push_blob(b);
  for (size_t i = 0; i < F; ++i)
    if (g_->nodes[i].op->has_side_effects()) stack.push_back(static_cast<int>(i));
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (live_[n]) continue;
    live_[n] = 1;
    for (int b : g_->nodes[n].inputs) push_blob(b);
  }

  // Names.
  names_.assign(g_->blobs.size(), "");
  for (size_t i = 0; i < def_.inputs.size(); ++i) {
    const std::string& n = i < sig.input_names.size() ? sig.input_names[i] : g_->blobs[def_.inputs[i]].name;
    if (used_names_.count(n)) fail("two placeholders named '" + n + "'");
    names_[def_.inputs[i]] = n;
    used_names_.insert(n);
  }
  for (size_t i = 0; i < F; ++i) {
    if (!live_[i]) continue;
    const Node& nd = g_->nodes[i];
    if (auto* v = dynamic_cast<const internal::VariableOp*>(nd.op.get())) {
      const std::string& vn = v->entry()->name;
      if (used_names_.count(vn)) fail("variable '" + vn + "' has the name of another tensor");
      used_names_.insert(vn);
      names_[nd.outputs[0]] = vn;
      vars_[vn] = v->entry();
    }
  }
  // Optimizer state (and any other variable of the train step) travels too.
  if (sig.type == JobType::Train)
    for (size_t i = F; i < g_->nodes.size(); ++i)
      if (auto* v = dynamic_cast<const internal::VariableOp*>(g_->nodes[i].op.get())) {
        const std::string& vn = v->entry()->name;
        if (vars_.count(vn)) continue;
        if (used_names_.count(vn)) fail("variable '" + vn + "' has the name of another tensor");
        used_names_.insert(vn);
        vars_[vn] = v->entry();
      }
  for (size_t i = 0; i < F; ++i) {
    if (!live_[i]) continue;
    const Node& nd = g_->nodes[i];
    if (dynamic_cast<const internal::PlaceholderOp*>(nd.op.get()) ||
        dynamic_cast<const internal::VariableOp*>(nd.op.get()))
      continue;
    for (int b : nd.outputs) names_[b] = fresh(g_->blobs[b].name.empty() ? nd.name + "/out" : g_->blobs[b].name);
  }

  // Graph inputs.
  auto set_type = [](::onnx::ValueInfoProto* vi, const std::string& name, const TensorSpec& s) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx_util::to_onnx_dtype(s.dtype));
    auto* sh = tt->mutable_shape();
    for (int64_t d : s.shape) sh->add_dim()->set_dim_value(d);
  };
  for (int b : def_.inputs) set_type(gp_->add_input(), names_[b], g_->blobs[b].spec);

  // Nodes.
  for (size_t i = 0; i < F; ++i) {
    if (!live_[i] || folded_[i]) continue;
    const Node& nd = g_->nodes[i];
    if (dynamic_cast<const internal::PlaceholderOp*>(nd.op.get()) ||
        dynamic_cast<const internal::VariableOp*>(nd.op.get()))
      continue;
    export_node(static_cast<int>(i));
  }

  // Outputs.
  std::set<std::string> out_names;
  std::set<std::string> graph_inputs;
  for (int b : def_.inputs) graph_inputs.insert(names_[b]);
  for (size_t k = 0; k < def_.outputs.size(); ++k) {
    const int b = def_.outputs[k];
    std::string n = names_[b];
    if (graph_inputs.count(n) || vars_.count(n) || out_names.count(n)) {
      const std::string id = fresh("output" + std::to_string(k));
      add("Identity", {n}, {id}, id);
      n = id;
    }
    out_names.insert(n);
    set_type(gp_->add_output(), n, g_->blobs[b].spec);
  }
  // Shapes of the intermediate values the graph produces.
  std::set<std::string> produced;
  for (const auto& n : gp_->node())
    for (const auto& o : n.output()) produced.insert(o);
  for (size_t i = 0; i < F; ++i) {
    if (!live_[i] || folded_[i]) continue;
    const Node& nd = g_->nodes[i];
    if (dynamic_cast<const internal::PlaceholderOp*>(nd.op.get()) ||
        dynamic_cast<const internal::VariableOp*>(nd.op.get()))
      continue;
    for (int b : nd.outputs)
      if (produced.count(names_[b]) && !out_names.count(names_[b]))
        set_type(gp_->add_value_info(), names_[b], g_->blobs[b].spec);
  }

  // Variables: current values (initialized first when never used).
  internal::VariableStore::get().sync_all();
  std::map<std::string, Tensor> values;
  for (auto& [name, e] : vars_) {
    internal::VariableStore::get().ensure_initialized(*e);
    values[name] = e->value;
  }
  if (opts_.checkpoint_dir.empty()) {
    for (auto& [name, t] : values) onnx_util::tensor_to_proto(t, name, gp_->add_initializer());
  } else {
    const fs::path rel(opts_.checkpoint_dir);
    if (rel.is_absolute() || rel.has_root_name())
      fail("checkpoint_dir '" + opts_.checkpoint_dir + "' must be relative to the file's folder");
    for (const auto& part : rel)
      if (part == "..") fail("checkpoint_dir '" + opts_.checkpoint_dir + "' must stay inside the file's folder");
    const fs::path dir = fs::path(path).parent_path() / rel;
    checkpoint_io::save(dir.string(), values);
    for (auto& [name, t] : values) {
      TensorProto* p = gp_->add_initializer();
      p->set_name(name);
      p->set_data_type(onnx_util::to_onnx_dtype(t.dtype()));
      for (int64_t d : t.shape()) p->add_dims(d);
      p->set_data_location(TensorProto::EXTERNAL);
      auto kv = [&](const char* k, const std::string& v) {
        auto* e = p->add_external_data();
        e->set_key(k);
        e->set_value(v);
      };
      kv("location", (rel / name / "out").generic_string());
      kv("offset", "0");
      kv("length", std::to_string(t.nbytes()));
    }
  }

  add_metadata(m);
  return m;
}

void write_atomically(const std::string& path, const std::string& bytes) {
  static std::atomic<int> counter{0};
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("[onnx.save] cannot create " + tmp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error("[onnx.save] cannot write " + tmp + ": " + std::strerror(e));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw Error("[onnx.save] cannot write " + tmp + ": " + std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw Error("[onnx.save] cannot rename " + tmp + " to " + path + ": " + std::strerror(e));
  }
}

}  // namespace

void save(const CompiledJob& job, const std::string& path, const SaveOptions& options) {
  if (path.empty()) throw Error("[onnx.save] empty path");
  if (options.opset < 17) throw Error("[onnx.save] opset " + std::to_string(options.opset) + " is not supported (17 or later)");
  Exporter ex(job, options);
  const ::onnx::ModelProto m = ex.run(path);
  std::string bytes;
  if (!m.SerializeToString(&bytes)) throw Error("[onnx.save] cannot serialize the model for " + path);
  write_atomically(path, bytes);
}

}  // namespace jobflow::onnx
