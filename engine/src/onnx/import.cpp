// The ONNX importer: job files written by onnx::save and ordinary ONNX models
// (opsets 6-17) -> a compiled job whose variables live in the session.
//
// Order of work (untrusted input is validated before anything big is
// allocated):
//   1. file size cap, protobuf parse (protobuf's own recursion limit);
//   2. structure: node count cap, opset, every node input defined before use
//      (topological order; cycles and undefined names are errors), tensor
//      ranks <= 8, attribute types, initializer byte counts vs dims;
//   3. every op type checked against the table: one error lists all the
//      unsupported ones with the nodes where they occur;
//   4. the job is built with detail::JobBuilder: graph inputs that are not
//      initializers become placeholders, float initializers become session
//      variables (get_variable + session::assign), the rest are constants
//      read at load time; each node maps to engine op builders.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "import_internal.h"
#include "jobflow/checkpoint_io.h"
#include "jobflow/job.h"
#include "jobflow/ops.h"
#include "jobflow/optimizer.h"
#include "jobflow/session.h"
#include "onnx_util.h"

namespace jobflow::onnx {
namespace {

namespace fs = std::filesystem;
namespace ou = onnx_util;
using ::onnx::AttributeProto;
using ::onnx::GraphProto;
using ::onnx::ModelProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;
using ::onnx::ValueInfoProto;
using onnx_import::Unsupported;

constexpr int kMaxRank = 8;

[[noreturn]] void fail(const std::string& file, const std::string& msg) {
  throw Error("[onnx.load] " + file + ": " + msg);
}
// An error of the LoadOptions field `option`, not of the file.
[[noreturn]] void fail_option(const char* option, const std::string& file, const std::string& msg) {
  throw OptionError(option, "[onnx.load] " + file + ": " + msg);
}

std::string node_label(const NodeProto& n, int index) {
  return n.name().empty() ? "#" + std::to_string(index) : n.name();
}

// ---------------------------------------------------------------------------
// Host helpers for constants (shape arithmetic, parameters read at load).

std::vector<int64_t> to_i64(const Tensor& t) {
  std::vector<int64_t> r(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::Int64) {  // exactly: INT64_MAX ("to the end" of a Slice) is no double
    std::copy_n(t.data<int64_t>(), t.numel(), r.begin());
    return r;
  }
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = t.at(i);  // integers below 2^53 exactly; floats saturate
    r[i] = !(v > -9.2233720368547758e18) ? std::numeric_limits<int64_t>::min()
           : v >= 9.2233720368547758e18  ? std::numeric_limits<int64_t>::max()
                                         : static_cast<int64_t>(v);
  }
  return r;
}
std::vector<double> to_f64(const Tensor& t) {
  std::vector<double> r(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) r[i] = t.at(i);
  return r;
}
Tensor make_tensor(const Shape& s, DType dt, const std::vector<double>& v) {
  Tensor t(s, dt);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    const double x = v[static_cast<size_t>(i)];
    switch (dt) {
      case DType::Float32: t.data<float>()[i] = static_cast<float>(x); break;
      case DType::Float64: t.data<double>()[i] = x; break;
      case DType::Int32: t.data<int32_t>()[i] = static_cast<int32_t>(x); break;
      case DType::Int64: t.data<int64_t>()[i] = static_cast<int64_t>(x); break;
      case DType::Int8: t.data<int8_t>()[i] = static_cast<int8_t>(x); break;
      case DType::UInt8: t.data<uint8_t>()[i] = static_cast<uint8_t>(x); break;
    }
  }
  return t;
}
Tensor i64_tensor(const std::vector<int64_t>& v, bool scalar = false) {
  Tensor t(scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())}, DType::Int64);
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}
Tensor scalar_like(double v, DType dt) { return make_tensor({}, dt, {v}); }

Shape broadcast_shapes(const Shape& a, const Shape& b, bool* ok) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  *ok = true;
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i + a.size() >= r ? a[i + a.size() - r] : 1;
    const int64_t db = i + b.size() >= r ? b[i + b.size() - r] : 1;
    if (da != db && da != 1 && db != 1) *ok = false;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Index of flat output element `i` of shape `out` in an input of shape `in`
// broadcast to it.
int64_t bcast_index(int64_t i, const Shape& out, const Shape& in) {
  int64_t idx = 0, stride = 1;
  for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
    const int64_t coord = i % out[d];
    i /= out[d];
    const int k = d - static_cast<int>(out.size() - in.size());
    if (k >= 0) {
      if (in[k] != 1) idx += coord * stride;
      stride *= in[k];
    }
  }
  return idx;
}

int64_t norm_axis(int64_t axis, int64_t rank, const std::function<void(const std::string&)>& err) {
  if (axis < -rank || axis >= rank)
    err("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

// ---------------------------------------------------------------------------
// Reading tensors (TensorProto) with the checks of onnx_util plus bool.

Tensor read_tensor(const TensorProto& p, const std::string& base_dir, uint64_t max_bytes, const std::string& what,
                   const std::string& node_for_unsupported) {
  if (p.dims_size() > kMaxRank)
    throw Error("[onnx] " + what + ": rank " + std::to_string(p.dims_size()) + " exceeds the limit of " +
                std::to_string(kMaxRank));
  for (int64_t d : p.dims())
    if (d < 0) throw Error("[onnx] " + what + ": negative dimension " + std::to_string(d));
  if (p.data_type() == TensorProto::BOOL) {
    // Bools as uint8 0/1 (ONNX keeps them in raw_data bytes or int32_data).
    uint64_t n = 1;
    for (int64_t d : p.dims()) {
      if (d != 0 && n > max_bytes / static_cast<uint64_t>(d))
        throw Error("[onnx] " + what + ": " + "tensor larger than the limit of " + std::to_string(max_bytes) + " bytes");
      n *= static_cast<uint64_t>(d);
    }
    if (n > max_bytes) throw Error("[onnx] " + what + ": tensor larger than the limit");
    if (p.has_raw_data() ? p.raw_data().size() != n : static_cast<uint64_t>(p.int32_data_size()) != n)
      throw Error("[onnx] " + what + ": bool tensor holds a wrong number of values for dims");
    Tensor t(Shape(p.dims().begin(), p.dims().end()), DType::UInt8);
    for (uint64_t i = 0; i < n; ++i)
      t.data<uint8_t>()[i] = p.has_raw_data() ? (p.raw_data()[i] != 0) : (p.int32_data(static_cast<int>(i)) != 0);
    return t;
  }
  switch (p.data_type()) {
    case TensorProto::FLOAT: case TensorProto::DOUBLE: case TensorProto::INT32: case TensorProto::INT64:
    case TensorProto::INT8: case TensorProto::UINT8:
      break;
    default: {
      std::string dt = TensorProto::DataType_IsValid(p.data_type())
                           ? TensorProto::DataType_Name(static_cast<TensorProto::DataType>(p.data_type()))
                           : std::to_string(p.data_type());
      std::transform(dt.begin(), dt.end(), dt.begin(), [](unsigned char c) { return std::tolower(c); });
      throw Unsupported("[onnx] " + what + ": element type " + dt + " is not supported",
                        {{"dtype " + dt, {node_for_unsupported}}});
    }
  }
  return ou::tensor_from_proto(p, base_dir, max_bytes, what);
}

// ---------------------------------------------------------------------------
// The importer.

struct Value {
  Blob blob;            // defined once the value exists in the graph
  Tensor konst;         // value known at load time
  bool variable = false;  // a float initializer: a session variable when used as data
  bool pure_const() const { return konst.defined() && !variable; }
};

class Importer;
using Handler = std::function<void(Importer&)>;

struct OpEntry {
  Handler fn;
  bool foldable = false;  // computed on the host when every input is constant
};
const std::map<std::string, OpEntry>& op_table();

class Importer {
 public:
  Importer(std::string file, const LoadOptions& opts, const ModelProto& m, std::string base_dir)
      : file_(std::move(file)), opts_(opts), model_(m), base_dir_(std::move(base_dir)) {}

  std::string file_;
  const LoadOptions& opts_;
  const ModelProto& model_;
  std::string base_dir_;
  int64_t opset = 0;
  bool inspect_mode = false;   // initializers as constants, nothing in the session
  bool train = false;          // building a train job
  bool job_file = false;
  std::map<std::string, Value> values;
  std::map<std::string, Tensor> init_values;  // initializer name -> value (after checkpoint override)
  std::set<std::string> trainable;
  std::map<std::string, std::string> bad_outputs;  // output name -> why it cannot be used
  std::vector<onnx_import::NodeShapes>* shapes = nullptr;
  std::map<std::string, Blob> sqrt_of;   // Sqrt output -> its input
  std::map<std::string, Blob> reshaped;  // Reshape output -> its input

  const NodeProto* node = nullptr;
  int node_index = 0;

  // ---- errors ----
  std::string where() const {
    return "node '" + node_label(*node, node_index) + "' (" + node->op_type() + ")";
  }
  [[noreturn]] void err(const std::string& msg) const { fail(file_, where() + ": " + msg); }
  [[noreturn]] void unsupported(const std::string& form) const {
    throw Unsupported("[onnx.load] " + file_ + ": unsupported op: " + form + " (node " +
                          node_label(*node, node_index) + ")",
                      {{form, {node_label(*node, node_index)}}});
  }

  // ---- inputs ----
  int nin() const { return node->input_size(); }
  bool has(int i) const { return i < node->input_size() && !node->input(i).empty(); }
  // The name of input i; a node with fewer inputs is an error naming it
  // (never an out-of-range read of the protobuf).
  const std::string& iname(int i) const {
    if (i < 0 || i >= node->input_size())
      err("has " + std::to_string(node->input_size()) + " inputs; input " + std::to_string(i) + " is required");
    return node->input(i);
  }
  // Checks that a tensor of `s` elements of `t` fits the load limits before
  // anything of that size is built (overflow-safe).
  void check_size(const Shape& s, DType t, const std::string& what) const {
    uint64_t n = 1;
    for (int64_t d : s) {
      if (d < 0) err(what + " has a negative dimension");
      if (d != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) err(what + " is too large");
      n *= static_cast<uint64_t>(d);
    }
    const uint64_t sz = dtype_size(t);
    if (n > opts_.max_tensor_bytes / std::max<uint64_t>(sz, 1))
      err(what + " " + shape_str(s) + " would need more than max_tensor_bytes (" + std::to_string(opts_.max_tensor_bytes) +
          ")");
  }
  Value& value(const std::string& name) {
    auto it = values.find(name);
    if (it == values.end()) {
      auto b = bad_outputs.find(name);
      if (b != bad_outputs.end()) throw Unsupported("[onnx.load] " + file_ + ": " + b->second, {{b->second, {name}}});
      err("input '" + name + "' is not defined");
    }
    return it->second;
  }
  Blob blob_of(const std::string& name) {
    Value& v = value(name);
    if (v.blob.defined()) return v.blob;
    if (v.variable && !inspect_mode) {
      const Tensor& t = v.konst;
      v.blob = get_variable(name, t.shape(), t.dtype(), zeros_initializer(), trainable.count(name) > 0);
      session::assign(name, t);
    } else {
      v.blob = constant(v.konst, name);
    }
    return v.blob;
  }
  Blob in(int i) {
    if (!has(i)) err("input " + std::to_string(i) + " is required");
    return blob_of(iname(i));
  }
  TensorSpec spec(int i) {
    Value& v = value(iname(i));
    if (v.blob.defined()) return v.blob.spec();
    return {v.konst.shape(), v.konst.dtype()};
  }
  Shape shape(int i) { return spec(i).shape; }
  bool is_const(int i) {
    if (!has(i)) return false;
    return value(node->input(i)).konst.defined();
  }
  Tensor cin(int i) {
    if (!has(i)) err("input " + std::to_string(i) + " is required");
    Value& v = value(node->input(i));
    if (!v.konst.defined()) {
      // A static engine needs it at load time: a form of the op we lack.
      const std::string form = node->op_type() + "(runtime input " + std::to_string(i) + ")";
      throw Unsupported("[onnx.load] " + file_ + ": " + where() + ": input '" + node->input(i) +
                            "' must be a constant (an initializer or a Constant): its value is only known when the "
                            "job runs",
                        {{form, {node_label(*node, node_index)}}});
    }
    return v.konst;
  }
  std::vector<int64_t> ints_in(int i) {
    Tensor t = cin(i);
    if (is_floating(t.dtype())) err("input '" + node->input(i) + "' must be an integer tensor");
    return to_i64(t);
  }

  // ---- attributes ----
  const AttributeProto* attr(const std::string& name, AttributeProto::AttributeType want) const {
    for (const auto& a : node->attribute()) {
      if (a.name() != name) continue;
      AttributeProto::AttributeType t = a.type();
      if (t == AttributeProto::UNDEFINED) {  // old files: infer from the field set
        if (a.has_i()) t = AttributeProto::INT;
        else if (a.has_f()) t = AttributeProto::FLOAT;
        else if (a.has_s()) t = AttributeProto::STRING;
        else if (a.has_t()) t = AttributeProto::TENSOR;
        else if (a.ints_size()) t = AttributeProto::INTS;
        else if (a.floats_size()) t = AttributeProto::FLOATS;
        else t = want;
      }
      if (t != want)
        err("attribute '" + name + "' has type " + AttributeProto::AttributeType_Name(t) + ", expected " +
            AttributeProto::AttributeType_Name(want));
      return &a;
    }
    return nullptr;
  }
  bool has_attr(const std::string& name) const {
    for (const auto& a : node->attribute())
      if (a.name() == name) return true;
    return false;
  }
  int64_t attr_i(const std::string& name, int64_t def) const {
    auto* a = attr(name, AttributeProto::INT);
    return a ? a->i() : def;
  }
  double attr_f(const std::string& name, double def) const {
    auto* a = attr(name, AttributeProto::FLOAT);
    return a ? a->f() : def;
  }
  std::string attr_s(const std::string& name, const std::string& def) const {
    auto* a = attr(name, AttributeProto::STRING);
    return a ? a->s() : def;
  }
  std::optional<std::vector<int64_t>> attr_ints(const std::string& name) const {
    auto* a = attr(name, AttributeProto::INTS);
    if (!a) return std::nullopt;
    return std::vector<int64_t>(a->ints().begin(), a->ints().end());
  }
  std::vector<int64_t> attr_ints(const std::string& name, std::vector<int64_t> def) const {
    auto v = attr_ints(name);
    return v ? *v : def;
  }
  std::optional<std::vector<float>> attr_floats(const std::string& name) const {
    auto* a = attr(name, AttributeProto::FLOATS);
    if (!a) return std::nullopt;
    return std::vector<float>(a->floats().begin(), a->floats().end());
  }

  // ---- outputs ----
  void out(int i, Blob b) {
    if (i >= node->output_size() || node->output(i).empty()) return;
    check_size(b.shape(), b.dtype(), "output '" + node->output(i) + "'");
    values[node->output(i)].blob = b;
  }
  void out_const(int i, Tensor t) {
    if (i >= node->output_size() || node->output(i).empty()) return;
    Value v;
    v.konst = std::move(t);
    values[node->output(i)] = v;
  }
  bool wants(int i) const { return i < node->output_size() && !node->output(i).empty(); }

  int axis_of(int64_t a, int64_t rank) {
    return static_cast<int>(norm_axis(a, rank, [this](const std::string& m) { err(m); }));
  }

  // ---- the build ----
  void run_node(const NodeProto& n, int index);
};

// ---------------------------------------------------------------------------
// Composite helpers (engine ops).

Blob abs_(Blob x) { return add(nn::relu(x), nn::relu(neg(x))); }
Blob scalar_blob(double v, DType dt) { return constant(scalar_like(v, dt)); }

Shape reduce_shape(const Shape& s, const std::vector<int>& axes, bool keep) {
  Shape r;
  for (int d = 0; d < static_cast<int>(s.size()); ++d) {
    bool red = axes.empty() || std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!red) r.push_back(s[d]);
    else if (keep) r.push_back(1);
  }
  return r;
}

// ---------------------------------------------------------------------------
// Op handlers.

void unary(Importer& I, Blob (*f)(Blob)) { I.out(0, f(I.in(0))); }

void op_binary(Importer& I, int kind) {
  if (kind == 2 && I.iname(0) == I.iname(1)) {  // x * x (a saved square)
    I.out(0, square(I.in(0)));
    return;
  }
  if (kind == 0) {  // x + reshape(b, (-1, 1, ..)): a saved bias_add along an inner axis
    auto it = I.reshaped.find(I.iname(1));
    if (it != I.reshaped.end() && it->second.ndim() == 1) {
      Blob x = I.in(0), rb = I.in(1);
      const Shape rs = rb.shape();
      bool ones = !rs.empty() && rs[0] == it->second.shape()[0];
      for (size_t d = 1; d < rs.size(); ++d) ones &= rs[d] == 1;
      const int axis = x.ndim() - static_cast<int>(rs.size());
      if (ones && rs.size() >= 2 && axis >= 0 && x.shape()[axis] == rs[0] && x.dtype() == rb.dtype()) {
        I.out(0, nn::bias_add(x, it->second, axis));
        return;
      }
    }
  }
  Blob a = I.in(0), b = I.in(1);
  if (I.opset < 7 && I.attr_i("broadcast", 0) && I.has_attr("axis")) {
    // Legacy broadcast: b aligned at `axis` of a.
    const int ax = I.axis_of(I.attr_i("axis", 0), a.ndim());
    Shape s(a.ndim() - ax, 1);
    for (int d = 0; d < b.ndim(); ++d) s[d] = b.shape()[d];
    b = reshape(b, s);
  }
  bool ok;
  broadcast_shapes(a.shape(), b.shape(), &ok);
  if (!ok) I.err("shapes " + shape_str(a.shape()) + " and " + shape_str(b.shape()) + " do not broadcast");
  if (a.dtype() != b.dtype()) I.err("input dtypes differ: " + spec_str(a.spec()) + " and " + spec_str(b.spec()));
  Blob y;
  switch (kind) {
    case 0: y = add(a, b); break;
    case 1: y = sub(a, b); break;
    case 2: y = mul(a, b); break;
    case 3: y = div(a, b); break;
    case 4: y = jobflow::maximum(a, b); break;
    case 5: y = jobflow::minimum(a, b); break;
  }
  I.out(0, y);
}

void op_variadic(Importer& I, int kind) {  // Sum, Mean, Max, Min
  Blob y = I.in(0);
  for (int i = 1; i < I.nin(); ++i) {
    Blob b = I.in(i);
    if (b.dtype() != y.dtype()) I.err("input dtypes differ: " + spec_str(y.spec()) + " and " + spec_str(b.spec()));
    switch (kind) {
      case 0: case 1: y = add(y, b); break;
      case 2: y = jobflow::maximum(y, b); break;  // any dtype; NaN propagates
      case 3: y = jobflow::minimum(y, b); break;
    }
  }
  if (kind == 1 && I.nin() > 1) y = mul_scalar(y, 1.0 / I.nin());
  if (I.nin() == 1) y = identity(y);
  I.out(0, y);
}

void op_pow(Importer& I) {
  Blob a = I.in(0);
  if (is_floating(a.dtype())) {
    // The engine's pow: any exponent tensor (broadcast), known at run time or
    // not. ONNX lets the exponent have another numeric type: it is cast to
    // the base's.
    bool ok;
    broadcast_shapes(a.shape(), I.shape(1), &ok);
    if (!ok) I.err("shapes " + shape_str(a.shape()) + " and " + shape_str(I.shape(1)) + " do not broadcast");
    Blob b;
    if (I.spec(1).dtype == a.dtype()) b = I.in(1);
    else if (I.value(I.iname(1)).pure_const()) b = constant(I.cin(1).astype(a.dtype()));
    else b = cast(I.in(1), a.dtype());
    I.out(0, jobflow::pow(a, b));
    return;
  }
  // Integer bases: the exponents that have exact integer forms.
  if (!I.is_const(1) || I.cin(1).numel() != 1) I.unsupported("Pow(non-scalar or runtime exponent)");
  const double e = I.cin(1).at(0);
  Blob y;
  if (e == 1.0) y = identity(a);
  else if (e == 2.0) y = square(a);
  else if (e == 3.0) y = mul(square(a), a);
  else if (e == 0.5) y = sqrt(a);
  else if (e == -0.5) y = rsqrt(a);
  else if (e == -1.0) y = div(scalar_blob(1.0, a.dtype()), a);
  else if (e == 0.0) y = ones_like(a);
  else I.unsupported("Pow(exponent " + ou::number_to_text(e) + ")");
  bool ok;
  Shape s = broadcast_shapes(a.shape(), I.shape(1), &ok);
  if (y.shape() != s) y = broadcast_to(y, s);
  I.out(0, y);
}

// The activations map onto the engine's ops (engine/src/ops/activations.cpp),
// as onnx::save writes them, so that a saved job loads back to the same ops.
void op_leaky(Importer& I) { I.out(0, nn::leaky_relu(I.in(0), I.attr_f("alpha", 0.01))); }
void op_elu(Importer& I) { I.out(0, nn::elu(I.in(0), I.attr_f("alpha", 1.0))); }
void op_celu(Importer& I) {
  const double a = I.attr_f("alpha", 1.0);
  Blob x = I.in(0);
  // max(0,x) + min(0, a*(exp(x/a)-1)) = relu(x) + a*(exp(-relu(-x)/a) - 1)
  I.out(0, add(nn::relu(x), mul_scalar(add_scalar(exp(mul_scalar(neg(nn::relu(neg(x))), 1.0 / a)), -1.0), a)));
}
void op_selu(Importer& I) {
  const double alpha = I.attr_f("alpha", 1.67326319217681884765625);
  const double gamma = I.attr_f("gamma", 1.05070102214813232421875);
  I.out(0, nn::selu(I.in(0), alpha, gamma));
}
void op_prelu(Importer& I) {
  Blob x = I.in(0), s = I.in(1);
  // Legacy (opset < 7, or a per-channel slope that does not broadcast from
  // the right): slope of shape (C,) applies along axis 1.
  bool ok;
  broadcast_shapes(x.shape(), s.shape(), &ok);
  if (s.ndim() == 1 && x.ndim() >= 2 && s.shape()[0] == x.shape()[1] && s.shape()[0] != 1 &&
      (I.opset < 7 || !ok || x.shape().back() != s.shape()[0])) {
    Shape sh(x.ndim() - 1, 1);
    sh[0] = s.shape()[0];
    s = reshape(s, sh);
  }
  if (!is_floating(x.dtype())) I.unsupported(std::string("PRelu(") + dtype_name(x.dtype()) + ")");
  I.out(0, nn::prelu(x, s));
}
void op_softsign(Importer& I) { I.out(0, nn::softsign(I.in(0))); }
void op_hardsigmoid(Importer& I) {
  I.out(0, nn::hard_sigmoid(I.in(0), I.attr_f("alpha", 0.2), I.attr_f("beta", 0.5)));
}
void op_hardswish(Importer& I) {  // x * max(0, min(1, x / 6 + 1 / 2))
  Blob x = I.in(0);
  I.out(0, mul(x, nn::hard_sigmoid(x, 1.0 / 6, 0.5)));
}
void op_mish(Importer& I) {
  Blob x = I.in(0);
  I.out(0, mul(x, math::tanh(nn::softplus(x))));
}
void op_clip(Importer& I) {
  std::optional<double> lo, hi;
  if (I.opset < 11) {
    if (I.has_attr("min")) lo = I.attr_f("min", 0);
    if (I.has_attr("max")) hi = I.attr_f("max", 0);
  } else {
    if ((I.has(1) && !I.is_const(1)) || (I.has(2) && !I.is_const(2))) {
      // Bounds known only at run time: max then min (min > max gives max).
      Blob x = I.in(0);
      Blob y = x;
      for (int i : {1, 2}) {
        if (!I.has(i)) continue;
        Blob b = I.in(i);
        if (b.dtype() != x.dtype()) I.err("bound " + spec_str(b.spec()) + " differs from the input " + spec_str(x.spec()));
        y = i == 1 ? jobflow::maximum(y, b) : jobflow::minimum(y, b);
      }
      I.out(0, y);
      return;
    }
    for (int i : {1, 2}) {
      if (!I.has(i)) continue;
      const Tensor b = I.cin(i);
      if (b.numel() != 1) I.err("bound '" + I.iname(i) + "' must be a scalar, got " + shape_str(b.shape()));
      (i == 1 ? lo : hi) = b.at(0);
    }
  }
  // The engine's clip: min(max(x, min), max) for any numeric dtype (so
  // min > max gives max, as ONNX says); integer bounds are exact up to 2^53.
  I.out(0, jobflow::clip(I.in(0), lo, hi));
}

void op_softmax(Importer& I, bool log_) {
  Blob x = I.in(0);
  const int r = x.ndim();
  auto f = [&](Blob v, int axis) { return log_ ? nn::log_softmax(v, axis) : nn::softmax(v, axis); };
  if (I.opset >= 13) {
    I.out(0, f(x, I.axis_of(I.attr_i("axis", -1), r)));
    return;
  }
  const int ax = I.axis_of(I.attr_i("axis", 1), std::max(r, 1));
  if (ax == r - 1) {
    I.out(0, f(x, ax));
    return;
  }
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < r; ++d) (d < ax ? outer : inner) *= x.shape()[d];
  I.out(0, reshape(f(reshape(x, {outer, inner}), 1), x.shape()));
}

void op_relu(Importer& I) { I.out(0, nn::relu(I.in(0))); }
void op_sigmoid(Importer& I) { I.out(0, nn::sigmoid(I.in(0))); }
void op_tanh(Importer& I) { I.out(0, nn::tanh(I.in(0))); }

void op_reciprocal(Importer& I) {
  auto it = I.sqrt_of.find(I.iname(0));
  if (it != I.sqrt_of.end()) {  // 1 / sqrt(x): a saved rsqrt
    I.out(0, rsqrt(it->second));
    return;
  }
  Blob x = I.in(0);
  I.out(0, div(scalar_blob(1.0, x.dtype()), x));
}

// ---- convolution and pooling ----

struct SpatialArgs {
  std::vector<int64_t> k, s, d, pb, pe;
};

// Explicit pads for auto_pad, as ONNX defines them.
void resolve_auto_pad(Importer& I, const std::string& mode, const Shape& in, SpatialArgs& a) {
  const size_t n = a.k.size();
  if (mode == "NOTSET" || mode.empty()) return;
  for (size_t i = 0; i < n; ++i) {
    if (mode == "VALID") {
      a.pb[i] = a.pe[i] = 0;
    } else if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
      const int64_t out = (in[i] + a.s[i] - 1) / a.s[i];
      const int64_t total = std::max<int64_t>((out - 1) * a.s[i] + (a.k[i] - 1) * a.d[i] + 1 - in[i], 0);
      const int64_t small = total / 2;
      a.pb[i] = mode == "SAME_UPPER" ? small : total - small;
      a.pe[i] = total - a.pb[i];
    } else {
      I.err("auto_pad \"" + mode + "\" is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER");
    }
  }
}

SpatialArgs spatial_args(Importer& I, const Shape& x, const std::vector<int64_t>& kernel, bool dil_ok) {
  const size_t n = kernel.size();
  SpatialArgs a;
  a.k = kernel;
  a.s = I.attr_ints("strides", std::vector<int64_t>(n, 1));
  a.d = I.attr_ints("dilations", std::vector<int64_t>(n, 1));
  auto pads = I.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  if (a.s.size() != n || a.d.size() != n || pads.size() != 2 * n)
    I.err("strides/dilations/pads do not match " + std::to_string(n) + " spatial dims");
  for (size_t i = 0; i < n; ++i) {
    if (a.k[i] <= 0 || a.s[i] <= 0 || a.d[i] <= 0) I.err("kernel, strides and dilations must be positive");
    if (pads[i] < 0 || pads[n + i] < 0) I.err("pads must be >= 0");
    if (!dil_ok && a.d[i] != 1) I.unsupported(I.node->op_type() + "(dilations)");
  }
  a.pb.assign(pads.begin(), pads.begin() + n);
  a.pe.assign(pads.begin() + n, pads.end());
  Shape sp(x.begin() + 2, x.end());
  resolve_auto_pad(I, I.attr_s("auto_pad", "NOTSET"), sp, a);
  return a;
}

void op_conv(Importer& I) {
  Blob x = I.in(0), w = I.in(1);
  const int r = x.ndim();
  if (x.dtype() != DType::Float32) I.unsupported(std::string("Conv(") + dtype_name(x.dtype()) + ")");
  if (r == 5) I.unsupported("Conv(3-D)");
  if (r != 3 && r != 4) I.err("input must be rank 3 or 4, got " + spec_str(x.spec()));
  if (w.ndim() != r) I.err("weight rank " + std::to_string(w.ndim()) + " differs from input rank");
  const Shape wsh = w.shape();
  std::vector<int64_t> kernel(wsh.begin() + 2, wsh.end());
  if (auto ks = I.attr_ints("kernel_shape"); ks && *ks != kernel) I.err("kernel_shape does not match the weight");
  SpatialArgs a = spatial_args(I, x.shape(), kernel, true);
  const int64_t group = I.attr_i("group", 1);
  const Shape xs = x.shape();
  if (r == 3) {
    x = reshape(x, {xs[0], xs[1], 1, xs[2]});
    w = reshape(w, {w.shape()[0], w.shape()[1], 1, w.shape()[2]});
    a.k.insert(a.k.begin(), 1), a.s.insert(a.s.begin(), 1), a.d.insert(a.d.begin(), 1);
    a.pb.insert(a.pb.begin(), 0), a.pe.insert(a.pe.begin(), 0);
  }
  Blob y = nn::conv2d(x, w, nn::Size2(a.s[0], a.s[1]), nn::Padding(std::vector<int64_t>{a.pb[0], a.pb[1], a.pe[0], a.pe[1]}),
                      nn::Size2(a.d[0], a.d[1]), group);
  if (I.has(2)) y = nn::bias_add(y, I.in(2), 1);
  if (r == 3) y = reshape(y, {y.shape()[0], y.shape()[1], y.shape()[3]});
  I.out(0, y);
}

void op_pool(Importer& I, bool max) {
  Blob x = I.in(0);
  const int r = x.ndim();
  const std::string opn = I.node->op_type();
  if (x.dtype() != DType::Float32) I.unsupported(opn + "(" + dtype_name(x.dtype()) + ")");
  if (r == 5) I.unsupported(opn + "(3-D)");
  if (r != 3 && r != 4) I.err("input must be rank 3 or 4, got " + spec_str(x.spec()));
  if (max && I.wants(1)) I.unsupported("MaxPool(Indices output)");
  auto kernel = I.attr_ints("kernel_shape");
  if (!kernel || static_cast<int>(kernel->size()) != r - 2) I.err("kernel_shape must have " + std::to_string(r - 2) + " values");
  SpatialArgs a = spatial_args(I, x.shape(), *kernel, false);
  if (max && I.attr_i("storage_order", 0) != 0 && I.wants(1)) I.unsupported("MaxPool(storage_order)");
  const bool ceil_mode = I.attr_i("ceil_mode", 0) != 0;
  const bool include_pad = !max && I.attr_i("count_include_pad", 0) != 0;
  const Shape xs = x.shape();
  Shape sp(xs.begin() + 2, xs.end());
  const size_t n = sp.size();
  std::vector<int64_t> outl(n), pe_orig = a.pe;
  for (size_t i = 0; i < n; ++i) {
    const int64_t span = sp[i] + a.pb[i] + a.pe[i] - a.k[i];
    if (span < 0) I.err("the window does not fit the padded input " + shape_str(xs));
    int64_t o = (ceil_mode ? (span + a.s[i] - 1) / a.s[i] : span / a.s[i]) + 1;
    if (ceil_mode && (o - 1) * a.s[i] >= sp[i] + a.pb[i]) --o;
    outl[i] = o;
    a.pe[i] = std::max<int64_t>(a.pe[i], (o - 1) * a.s[i] + a.k[i] - sp[i] - a.pb[i]);
    if (a.pb[i] >= a.k[i] || a.pe[i] >= a.k[i]) {
      if (max) I.unsupported(opn + "(padding >= kernel)");
    }
  }
  if (r == 3) {
    x = reshape(x, {xs[0], xs[1], 1, xs[2]});
    a.k.insert(a.k.begin(), 1), a.s.insert(a.s.begin(), 1);
    a.pb.insert(a.pb.begin(), 0), a.pe.insert(a.pe.begin(), 0), pe_orig.insert(pe_orig.begin(), 0);
    sp.insert(sp.begin(), 1), outl.insert(outl.begin(), 1);
  }
  nn::Padding pad(std::vector<int64_t>{a.pb[0], a.pb[1], a.pe[0], a.pe[1]});
  Blob y = max ? nn::max_pool2d(x, nn::Size2(a.k[0], a.k[1]), nn::Size2(a.s[0], a.s[1]), pad)
               : nn::avg_pool2d(x, nn::Size2(a.k[0], a.k[1]), nn::Size2(a.s[0], a.s[1]), pad);
  bool any_pad = false;
  for (size_t i = 0; i < 2; ++i) any_pad |= a.pb[i] || pe_orig[i];
  if (include_pad && any_pad) {
    // The engine divides by the count of real elements; ONNX by the window
    // clipped to the padded input: scale by excl / incl per output.
    Tensor f({1, 1, outl[0], outl[1]}, y.dtype());
    std::vector<double> fv(static_cast<size_t>(outl[0] * outl[1]));
    auto counts = [&](int i, int64_t o, int64_t* excl, int64_t* incl) {
      const int64_t st = o * a.s[i] - a.pb[i];
      const int64_t en = st + a.k[i];
      *excl = std::min(en, sp[i]) - std::max<int64_t>(st, 0);
      *incl = std::min(en, sp[i] + pe_orig[i]) - st;
    };
    for (int64_t oh = 0; oh < outl[0]; ++oh)
      for (int64_t ow = 0; ow < outl[1]; ++ow) {
        int64_t eh, ih, ew, iw;
        counts(0, oh, &eh, &ih);
        counts(1, ow, &ew, &iw);
        fv[oh * outl[1] + ow] = static_cast<double>(eh * ew) / static_cast<double>(ih * iw);
      }
    y = mul(y, constant(make_tensor(f.shape(), y.dtype(), fv)));
  }
  if (r == 3) y = reshape(y, {xs[0], xs[1], y.shape()[3]});
  I.out(0, y);
}

void op_global_pool(Importer& I, bool max) {
  Blob x = I.in(0);
  std::vector<int> axes;
  for (int d = 2; d < x.ndim(); ++d) axes.push_back(d);
  if (axes.empty()) I.err("input must have rank >= 3");
  I.out(0, max ? reduce_max(x, axes, true) : reduce_mean(x, axes, true));
}

void op_batchnorm(Importer& I) {
  Blob x = I.in(0);
  const double eps = I.attr_f("epsilon", 1e-5);
  const double momentum = I.attr_f("momentum", 0.9);
  bool training = false;
  if (I.opset >= 14) training = I.attr_i("training_mode", 0) != 0;
  else if (I.opset >= 7) training = I.wants(1) || I.wants(2);
  else training = I.attr_i("is_test", 0) == 0 && (I.wants(1) || I.wants(2));
  if (x.ndim() < 2) I.err("input must have rank >= 2");
  if (!training) {
    for (int i = 1; i < I.node->output_size(); ++i)
      if (I.wants(i)) I.unsupported("BatchNormalization(statistics outputs in inference)");
    I.out(0, nn::batch_normalization(x, I.in(3), I.in(4), I.in(2), I.in(1), eps, 1));
    return;
  }
  if (I.job_file && !I.inspect_mode) {
    // A Jobflow batch normalization layer: batch statistics in train jobs,
    // the moving ones in predict jobs; variables "<name>-gamma" etc.
    std::string mname = I.iname(3);
    const std::string suf = "-moving_mean";
    std::string prefix = mname.size() > suf.size() && mname.compare(mname.size() - suf.size(), suf.size(), suf) == 0
                             ? mname.substr(0, mname.size() - suf.size())
                             : node_label(*I.node, I.node_index);
    const std::pair<int, const char*> parts[] = {{1, "-gamma"}, {2, "-beta"}, {3, "-moving_mean"}, {4, "-moving_variance"}};
    bool present[5] = {false, false, false, false, false};
    for (auto& [i, s] : parts) {
      Value& v = I.value(I.iname(i));
      present[i] = v.variable;
      // Without gamma/beta the saved job has constant ones/zeros there.
      if (!v.variable && (i >= 3 || !v.konst.defined()))
        I.err("input '" + I.iname(i) + "' of a training batch normalization must be an initializer");
    }
    layers::BatchNormOptions o;
    o.scale = present[1];
    o.center = present[2];
    o.axis = 1;
    o.momentum = momentum;
    o.epsilon = eps;
    o.name = prefix;
    o.trainable = I.trainable.count(I.iname(1)) > 0 || I.trainable.count(I.iname(2)) > 0;
    Blob y = layers::batch_normalization(x, o);
    for (auto& [i, s] : parts) {
      if (!present[i]) continue;
      Value& v = I.value(I.iname(i));
      session::assign(prefix + s, v.konst);
    }
    I.out(0, y);
    return;
  }
  // ONNX training mode in any job: batch statistics, running stats as outputs.
  std::vector<int> axes;
  for (int d = 0; d < x.ndim(); ++d)
    if (d != 1) axes.push_back(d);
  Blob mean = reduce_mean(x, axes, true);
  Blob xc = sub(x, mean);
  Blob var = reduce_mean(square(xc), axes, true);
  Shape cs(x.ndim(), 1);
  cs[1] = x.shape()[1];
  Blob y = mul(xc, rsqrt(add_scalar(var, eps)));
  y = add(mul(y, reshape(I.in(1), cs)), reshape(I.in(2), cs));
  I.out(0, y);
  const int64_t C = x.shape()[1];
  if (I.wants(1)) I.out(1, add(mul_scalar(I.in(3), momentum), mul_scalar(reshape(mean, {C}), 1 - momentum)));
  if (I.wants(2)) I.out(2, add(mul_scalar(I.in(4), momentum), mul_scalar(reshape(var, {C}), 1 - momentum)));
}

void op_instancenorm(Importer& I) {
  Blob x = I.in(0);
  const double eps = I.attr_f("epsilon", 1e-5);
  if (x.ndim() < 3) I.err("input must have rank >= 3");
  std::vector<int> axes;
  for (int d = 2; d < x.ndim(); ++d) axes.push_back(d);
  Blob xc = sub(x, reduce_mean(x, axes, true));
  Blob y = mul(xc, rsqrt(add_scalar(reduce_mean(square(xc), axes, true), eps)));
  Shape cs(x.ndim(), 1);
  cs[1] = x.shape()[1];
  I.out(0, add(mul(y, reshape(I.in(1), cs)), reshape(I.in(2), cs)));
}

void op_layernorm(Importer& I) {
  Blob x = I.in(0);
  const double eps = I.attr_f("epsilon", 1e-5);
  const int ax = I.axis_of(I.attr_i("axis", -1), x.ndim());
  if (I.attr_i("stash_type", 1) != 1) I.unsupported("LayerNormalization(stash_type)");
  std::vector<int> axes;
  for (int d = ax; d < x.ndim(); ++d) axes.push_back(d);
  Blob mean = reduce_mean(x, axes, true);
  Blob xc = sub(x, mean);
  Blob inv = rsqrt(add_scalar(reduce_mean(square(xc), axes, true), eps));
  Blob y = mul(mul(xc, inv), I.in(1));
  if (I.has(2)) y = add(y, I.in(2));
  I.out(0, y);
  I.out(1, mean);
  I.out(2, inv);
}

void op_gemm(Importer& I) {
  Blob a = I.in(0), b = I.in(1);
  if (a.ndim() != 2 || b.ndim() != 2) I.err("A and B must be 2-D, got " + spec_str(a.spec()) + " and " + spec_str(b.spec()));
  const bool ta = I.attr_i("transA", 0) != 0, tb = I.attr_i("transB", 0) != 0;
  const double alpha = I.attr_f("alpha", 1.0), beta = I.attr_f("beta", 1.0);
  Blob y = matmul(a, b, ta, tb);
  if (alpha != 1.0) y = mul_scalar(y, alpha);
  if (I.has(2) && beta != 0.0) {
    Blob c = I.in(2);
    if (beta != 1.0) c = mul_scalar(c, beta);
    if (c.ndim() == 1 && c.shape()[0] == y.shape()[1]) y = nn::bias_add(y, c, 1);
    else y = add(y, c);
  }
  I.out(0, y);
}

void op_matmul(Importer& I) {
  Blob a = I.in(0), b = I.in(1);
  if (a.ndim() == 0 || b.ndim() == 0) I.err("inputs must not be scalars");
  const bool a1 = a.ndim() == 1, b1 = b.ndim() == 1;
  if (a1) a = reshape(a, {1, a.shape()[0]});
  if (b1) b = reshape(b, {b.shape()[0], 1});
  Shape as = a.shape(), bs = b.shape();
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  if (bs[bs.size() - 2] != K) I.err("inner dimensions differ: " + shape_str(as) + " x " + shape_str(bs));
  Blob y;
  Shape batch;
  if (bs.size() == 2) {
    Shape lead(as.begin(), as.end() - 2);
    y = matmul(as.size() == 2 ? a : reshape(a, {numel(lead) * M, K}), b);
    batch = lead;
  } else {
    bool ok;
    batch = broadcast_shapes(Shape(as.begin(), as.end() - 2), Shape(bs.begin(), bs.end() - 2), &ok);
    if (!ok) I.err("batch dimensions do not broadcast: " + shape_str(as) + " x " + shape_str(bs));
    Shape fa = batch, fb = batch;
    fa.push_back(M), fa.push_back(K), fb.push_back(K), fb.push_back(N);
    if (as != fa) a = broadcast_to(a, fa);
    if (bs != fb) b = broadcast_to(b, fb);
    const int64_t nb = numel(batch);
    y = matmul(reshape(a, {nb, M, K}), reshape(b, {nb, K, N}));
  }
  Shape os = batch;
  if (!a1) os.push_back(M);
  if (!b1) os.push_back(N);
  if (y.shape() != os) y = reshape(y, os);
  I.out(0, y);
}

// ---- shape ops (runtime) ----

void op_reshape(Importer& I) {
  const Shape xs = I.shape(0);
  std::vector<int64_t> want;
  if (I.opset < 5 || I.has_attr("shape")) want = I.attr_ints("shape", {});
  else want = I.ints_in(1);
  const bool allowzero = I.attr_i("allowzero", 0) != 0;
  Shape s;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < want.size(); ++i) {
    int64_t d = want[i];
    if (d == 0 && !allowzero) {
      if (i >= xs.size()) I.err("shape has 0 at " + std::to_string(i) + " beyond the input rank");
      d = xs[i];
    }
    if (d == -1) {
      if (infer >= 0) I.err("shape has more than one -1");
      infer = static_cast<int>(i);
      s.push_back(1);
      continue;
    }
    if (d < 0) I.err("invalid shape value " + std::to_string(d));
    s.push_back(d);
    known *= d;
  }
  if (s.size() > kMaxRank) I.err("rank exceeds 8");
  const int64_t total = numel(xs);
  if (infer >= 0) {
    if (known == 0 || total % known) I.err("cannot reshape " + shape_str(xs) + " with -1");
    s[infer] = total / known;
  }
  if (numel(s) != total) I.err("cannot reshape " + shape_str(xs) + " to " + shape_str(s));
  if (I.is_const(0) && I.value(I.iname(0)).pure_const()) {
    I.out_const(0, I.cin(0).clone().reshape(s));
    return;
  }
  Blob x = I.in(0);
  I.out(0, reshape(x, s));
  I.reshaped[I.node->output(0)] = x;
}

void reshape_out(Importer& I, const Shape& s) {
  if (I.is_const(0) && I.value(I.iname(0)).pure_const()) I.out_const(0, I.cin(0).clone().reshape(s));
  else I.out(0, reshape(I.in(0), s));
}

void op_flatten(Importer& I) {
  const Shape xs = I.shape(0);
  const int r = static_cast<int>(xs.size());
  int64_t ax = I.attr_i("axis", 1);
  if (ax < -r || ax > r) I.err("axis out of range");
  if (ax < 0) ax += r;
  int64_t a = 1, b = 1;
  for (int d = 0; d < r; ++d) (d < ax ? a : b) *= xs[d];
  reshape_out(I, {a, b});
}

std::vector<int64_t> axes_arg(Importer& I, int input) {
  if (I.opset >= 13 && I.has(input)) return I.ints_in(input);
  if (I.has_attr("axes")) return I.attr_ints("axes", {});
  return {};
}

void op_squeeze(Importer& I) {
  const Shape xs = I.shape(0);
  const int r = static_cast<int>(xs.size());
  auto axes = axes_arg(I, 1);
  std::vector<bool> drop(r, false);
  if (axes.empty()) {
    for (int d = 0; d < r; ++d) drop[d] = xs[d] == 1;
  } else {
    for (int64_t a : axes) {
      int d = I.axis_of(a, r);
      if (xs[d] != 1) I.err("cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(xs[d]));
      drop[d] = true;
    }
  }
  Shape s;
  for (int d = 0; d < r; ++d)
    if (!drop[d]) s.push_back(xs[d]);
  reshape_out(I, s);
}

void op_unsqueeze(Importer& I) {
  const Shape xs = I.shape(0);
  auto axes = axes_arg(I, 1);
  const int r = static_cast<int>(xs.size() + axes.size());
  if (r > kMaxRank) I.err("rank exceeds 8");
  std::vector<bool> ins(r, false);
  for (int64_t a : axes) {
    int d = I.axis_of(a, r);
    if (ins[d]) I.err("axes repeat");
    ins[d] = true;
  }
  Shape s;
  size_t k = 0;
  for (int d = 0; d < r; ++d) s.push_back(ins[d] ? 1 : xs[k++]);
  reshape_out(I, s);
}

void op_transpose(Importer& I) {
  const int r = static_cast<int>(I.shape(0).size());
  std::vector<int64_t> perm = I.attr_ints("perm", {});
  if (perm.empty())
    for (int d = r - 1; d >= 0; --d) perm.push_back(d);
  if (static_cast<int>(perm.size()) != r) I.err("perm has " + std::to_string(perm.size()) + " values for rank " + std::to_string(r));
  std::vector<int> p;
  std::vector<bool> seen(r, false);
  for (int64_t v : perm) {
    if (v < 0 || v >= r || seen[v]) I.err("perm is not a permutation");
    seen[v] = true;
    p.push_back(static_cast<int>(v));
  }
  I.out(0, transpose(I.in(0), p));
}

void op_concat(Importer& I) {
  std::vector<Blob> xs;
  const int r = static_cast<int>(I.shape(0).size());
  const int ax = I.axis_of(I.attr_i("axis", I.opset < 4 ? 1 : 0), r);
  for (int i = 0; i < I.nin(); ++i)
    if (I.has(i) && numel(I.shape(i)) > 0) xs.push_back(I.in(i));
  if (xs.empty()) I.err("all inputs are empty");
  I.out(0, xs.size() == 1 ? identity(xs[0]) : concat(xs, ax));
}

void op_identity(Importer& I) { I.out(0, identity(I.in(0))); }

void op_dropout(Importer& I) {
  Blob x = I.in(0);
  double ratio = I.attr_f("ratio", 0.5);
  bool training = I.train;
  if (I.opset >= 12) {
    ratio = I.has(1) ? I.cin(1).at(0) : 0.5;
    if (I.has(2)) training = I.cin(2).at(0) != 0;
  }
  if (I.wants(1)) I.unsupported("Dropout(mask output)");
  // The node name keys the mask stream (as in the job that was saved).
  if (training && I.train && ratio > 0) I.out(0, nn::dropout(x, ratio, I.node->name()));
  else if (training && !I.train && ratio > 0 && !I.job_file) I.unsupported("Dropout(training_mode in a predict job)");
  else I.out(0, identity(x));
}

void op_cast(Importer& I) {
  const int64_t to = I.attr_i("to", 0);
  DType dt;
  if (to == TensorProto::BOOL) I.unsupported("Cast(to bool)");
  try {
    dt = ou::from_onnx_dtype(static_cast<int32_t>(to), "Cast 'to'");
  } catch (const Error&) {
    std::string n = TensorProto::DataType_IsValid(static_cast<int>(to))
                        ? TensorProto::DataType_Name(static_cast<TensorProto::DataType>(to)) : std::to_string(to);
    I.unsupported("Cast(to " + n + ")");
  }
  if (I.is_const(0) && I.value(I.iname(0)).pure_const()) {
    I.out_const(0, I.cin(0).astype(dt));
    return;
  }
  Blob x = I.in(0);
  I.out(0, x.dtype() == dt ? identity(x) : cast(x, dt));
}

void op_castlike(Importer& I) {
  const DType dt = I.spec(1).dtype;
  if (I.is_const(0) && I.value(I.iname(0)).pure_const()) {
    I.out_const(0, I.cin(0).astype(dt));
    return;
  }
  Blob x = I.in(0);
  I.out(0, x.dtype() == dt ? identity(x) : cast(x, dt));
}

void op_reduce(Importer& I, int kind) {  // 0 sum 1 mean 2 max 3 min 4 sumsq 5 l1 6 l2 7 logsumexp 8 logsum
  Blob x = I.in(0);
  const int r = x.ndim();
  std::vector<int64_t> axes;
  const bool axes_input = (kind == 0 && I.opset >= 13) || I.opset >= 18;
  if (axes_input) {
    if (I.has(1)) axes = I.ints_in(1);
  } else {
    axes = I.attr_ints("axes", {});
  }
  const bool keep = I.attr_i("keepdims", 1) != 0;
  if (axes.empty() && I.attr_i("noop_with_empty_axes", 0) != 0) {
    I.out(0, identity(x));
    return;
  }
  std::vector<int> ax;
  for (int64_t a : axes) ax.push_back(I.axis_of(a, r));
  std::sort(ax.begin(), ax.end());
  ax.erase(std::unique(ax.begin(), ax.end()), ax.end());
  if (ax.empty())
    for (int d = 0; d < r; ++d) ax.push_back(d);
  Blob y;
  switch (kind) {
    case 0: y = reduce_sum(x, ax, keep); break;
    case 1: y = reduce_mean(x, ax, keep); break;
    case 2: y = reduce_max(x, ax, keep); break;
    case 3: y = neg(reduce_max(neg(x), ax, keep)); break;
    case 4: y = reduce_sum(square(x), ax, keep); break;
    case 5: y = reduce_sum(abs_(x), ax, keep); break;
    case 6: y = sqrt(reduce_sum(square(x), ax, keep)); break;
    case 7: {
      Blob m = reduce_max(x, ax, true);
      y = add(log(reduce_sum(exp(sub(x, m)), ax, true)), m);
      if (!keep) y = reshape(y, reduce_shape(x.shape(), ax, false));
      break;
    }
    case 8: y = log(reduce_sum(x, ax, keep)); break;
  }
  I.out(0, y);
}

void op_argmax(Importer& I, bool min) {
  Blob x = I.in(0);
  const int ax = I.axis_of(I.attr_i("axis", 0), x.ndim());
  if (I.attr_i("select_last_index", 0) != 0) I.unsupported(std::string(min ? "ArgMin" : "ArgMax") + "(select_last_index)");
  Blob y = cast(argmax(min ? neg(x) : x, ax), DType::Int64);
  if (I.attr_i("keepdims", 1) != 0) {
    Shape s = x.shape();
    s[ax] = 1;
    y = reshape(y, s);
  }
  I.out(0, y);
}

void op_sce_loss(Importer& I) {
  Blob scores = I.in(0), labels = I.in(1);
  if (I.has(2)) I.unsupported("SoftmaxCrossEntropyLoss(weights)");
  if (I.has_attr("ignore_index")) I.unsupported("SoftmaxCrossEntropyLoss(ignore_index)");
  const std::string red = I.attr_s("reduction", "mean");
  const Shape ss = scores.shape();
  if (ss.size() < 2) I.err("scores must have rank >= 2");
  const int64_t C = ss[1];
  Blob logits = scores;
  Shape lshape = labels.shape();
  if (ss.size() > 2) {
    std::vector<int> perm{0};
    for (int d = 2; d < static_cast<int>(ss.size()); ++d) perm.push_back(d);
    perm.push_back(1);
    logits = reshape(transpose(scores, perm), {-1, C});
    labels = reshape(labels, {numel(lshape)});
  }
  Blob l = nn::sparse_softmax_cross_entropy_with_logits(labels, logits);
  if (ss.size() > 2) l = reshape(l, lshape);
  if (red == "mean") l = reduce_mean(l);
  else if (red == "sum") l = reduce_sum(l);
  else if (red != "none") I.err("reduction must be none, mean or sum");
  I.out(0, l);
  if (I.wants(1)) I.out(1, nn::log_softmax(scores, 1));
}

void op_pad(Importer& I) {
  // The engine's pad: constant / reflect / edge for every dtype, negative
  // pads crop (ONNX allows both).
  Blob x = I.in(0);
  const int r = x.ndim();
  std::vector<int64_t> pads;
  double value = 0.0;
  if (I.opset < 11) {
    pads = I.attr_ints("pads", I.attr_ints("paddings", {}));
    value = I.attr_f("value", 0.0);
  } else {
    pads = I.ints_in(1);
    if (I.has(2)) {
      const Tensor v = I.cin(2);
      if (v.numel() != 1) I.err("constant_value must hold one value, got " + shape_str(v.shape()));
      value = v.at(0);
    }
    if (I.has(3)) {
      auto axes = I.ints_in(3);
      std::vector<int64_t> full(2 * r, 0);
      if (pads.size() != 2 * axes.size()) I.err("pads must have 2 values per axis");
      std::vector<bool> seen(r, false);
      for (size_t i = 0; i < axes.size(); ++i) {
        int d = I.axis_of(axes[i], r);
        if (seen[d]) I.err("axes repeat");
        seen[d] = true;
        full[d] = pads[i], full[r + d] = pads[axes.size() + i];
      }
      pads = full;
    }
  }
  const std::string mode = I.attr_s("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge") I.unsupported("Pad(" + mode + ")");
  if (static_cast<int>(pads.size()) != 2 * r) I.err("pads must have " + std::to_string(2 * r) + " values");
  {  // the padded result must fit the limits (overflow-safe) before the op is built
    Shape grown = x.shape();
    for (int d = 0; d < r; ++d) {
      const int64_t lim = std::numeric_limits<int64_t>::max() / 4;
      for (int64_t p : {pads[d], pads[r + d]})
        if (p > lim || p < -lim) I.err("pads too large");
      grown[d] += pads[d] + pads[r + d];
      if (grown[d] < 0) I.err("pads crop more than axis " + std::to_string(d) + " of " + shape_str(x.shape()) + " has");
    }
    I.check_size(grown, x.dtype(), "Pad result");
  }
  I.out(0, pad(x, pads, mode, value));
}

void op_expand(Importer& I) {
  Blob x = I.in(0);
  auto want = I.ints_in(1);
  bool ok;
  Shape s = broadcast_shapes(x.shape(), Shape(want.begin(), want.end()), &ok);
  if (!ok) I.err("cannot expand " + shape_str(x.shape()) + " to " + shape_str(Shape(want.begin(), want.end())));
  I.out(0, s == x.shape() ? identity(x) : broadcast_to(x, s));
}

void op_tile(Importer& I) {
  Blob y = I.in(0);
  auto reps = I.ints_in(1);
  if (static_cast<int>(reps.size()) != y.ndim()) I.err("repeats must have one value per dim");
  for (int d = 0; d < y.ndim(); ++d) {
    if (reps[d] < 1) I.unsupported("Tile(repeats < 1)");
    if (reps[d] == 1) continue;
    Shape grown = y.shape();
    if (grown[d] > 0 && reps[d] > std::numeric_limits<int64_t>::max() / grown[d]) I.err("repeats too large");
    grown[d] *= reps[d];
    I.check_size(grown, y.dtype(), "Tile result");
    y = concat(std::vector<Blob>(static_cast<size_t>(reps[d]), y), d);
  }
  I.out(0, identity(y));
}

void op_depth_space(Importer& I, bool to_space) {
  Blob x = I.in(0);
  if (x.ndim() != 4) I.err("input must be 4-D");
  const int64_t b = I.attr_i("blocksize", 0);
  if (b <= 0) I.err("blocksize must be > 0");
  const Shape s = x.shape();
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
  if (to_space) {
    if (C % (b * b)) I.err("channels not divisible by blocksize^2");
    const bool crd = I.attr_s("mode", "DCR") == "CRD";
    Blob t = crd ? transpose(reshape(x, {N, C / (b * b), b, b, H, W}), {0, 1, 4, 2, 5, 3})
                 : transpose(reshape(x, {N, b, b, C / (b * b), H, W}), {0, 3, 4, 1, 5, 2});
    I.out(0, reshape(t, {N, C / (b * b), H * b, W * b}));
  } else {
    if (H % b || W % b) I.err("spatial dims not divisible by blocksize");
    Blob t = transpose(reshape(x, {N, C, H / b, b, W / b, b}), {0, 3, 5, 1, 2, 4});
    I.out(0, reshape(t, {N, C * b * b, H / b, W / b}));
  }
}

void op_trilu(Importer& I) {
  Blob x = I.in(0);
  if (x.ndim() < 2) I.err("input must have rank >= 2");
  const int64_t k = I.has(1) ? I.ints_in(1).at(0) : 0;
  const bool upper = I.attr_i("upper", 1) != 0;
  const int64_t R = x.shape()[x.ndim() - 2], C = x.shape().back();
  std::vector<double> m(static_cast<size_t>(R * C));
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) m[i * C + j] = upper ? (j - i >= k) : (j - i <= k);
  I.out(0, mul(x, constant(make_tensor({R, C}, x.dtype(), m))));
}

// ---- constants ----

void op_constant(Importer& I) {
  int n = 0;
  Tensor t;
  for (const auto& a : I.node->attribute()) {
    const std::string& k = a.name();
    if (k == "value") {
      t = read_tensor(a.t(), I.base_dir_, I.opts_.max_tensor_bytes, I.where() + " value", node_label(*I.node, I.node_index));
    } else if (k == "value_float") {
      t = Tensor::scalar<float>(a.f());
    } else if (k == "value_floats") {
      t = Tensor::from<float>({a.floats_size()}, std::vector<float>(a.floats().begin(), a.floats().end()));
    } else if (k == "value_int") {
      t = Tensor::scalar<int64_t>(a.i());
    } else if (k == "value_ints") {
      t = Tensor::from<int64_t>({a.ints_size()}, std::vector<int64_t>(a.ints().begin(), a.ints().end()));
    } else if (k == "sparse_value" || k == "value_string" || k == "value_strings") {
      I.unsupported("Constant(" + k + ")");
    } else {
      continue;
    }
    ++n;
  }
  if (n != 1) I.err("needs exactly one value attribute");
  I.out_const(0, t);
}

void op_constant_of_shape(Importer& I) {
  auto s = I.ints_in(0);
  if (s.size() > kMaxRank) I.err("rank exceeds 8");
  for (int64_t d : s)
    if (d < 0) I.err("negative dimension");
  Tensor v = Tensor::scalar<float>(0.0f);
  if (auto* a = I.attr("value", AttributeProto::TENSOR))
    v = read_tensor(a->t(), I.base_dir_, I.opts_.max_tensor_bytes, I.where() + " value", node_label(*I.node, I.node_index));
  if (v.numel() != 1) I.err("value must hold one element");
  Shape sh(s.begin(), s.end());
  uint64_t bytes = dtype_size(v.dtype());
  for (int64_t d : sh) {
    if (d && bytes > I.opts_.max_tensor_bytes / static_cast<uint64_t>(d)) I.err("tensor too large");
    bytes *= static_cast<uint64_t>(d);
  }
  I.out_const(0, make_tensor(sh, v.dtype(), std::vector<double>(static_cast<size_t>(numel(sh)), v.at(0))));
}

void op_shape(Importer& I) {
  const Shape s = I.shape(0);
  const int64_t r = static_cast<int64_t>(s.size());
  int64_t st = I.attr_i("start", 0), en = I.attr_i("end", r);
  if (st < 0) st += r;
  if (en < 0) en += r;
  st = std::clamp<int64_t>(st, 0, r), en = std::clamp<int64_t>(en, 0, r);
  std::vector<int64_t> v;
  for (int64_t d = st; d < en; ++d) v.push_back(s[d]);
  I.out_const(0, i64_tensor(v));
}

void op_size(Importer& I) { I.out_const(0, i64_tensor({numel(I.shape(0))}, true)); }

// ---- host folding of constant subgraphs (shape arithmetic) ----

void fold_binary(Importer& I) {
  const std::string& op = I.node->op_type();
  Tensor a = I.cin(0), b = I.cin(1);
  bool ok;
  Shape s = broadcast_shapes(a.shape(), b.shape(), &ok);
  if (!ok) I.err("shapes do not broadcast");
  if (numel(s) > (int64_t(1) << 20)) I.err("constant too large to fold");
  auto av = to_f64(a), bv = to_f64(b);
  std::vector<double> r(static_cast<size_t>(numel(s)));
  const bool integer = !is_floating(a.dtype());
  for (int64_t i = 0; i < numel(s); ++i) {
    double x = av[bcast_index(i, s, a.shape())], y = bv[bcast_index(i, s, b.shape())];
    double v = 0;
    if (op == "Add") v = x + y;
    else if (op == "Sub") v = x - y;
    else if (op == "Mul") v = x * y;
    else if (op == "Div") v = integer ? (y == 0 ? 0 : std::trunc(x / y)) : x / y;
    r[i] = v;
  }
  I.out_const(0, make_tensor(s, a.dtype(), r));
}

void fold_gather(Importer& I) {
  Tensor d = I.cin(0), idx = I.cin(1);
  const int r = d.ndim();
  if (r == 0) I.err("data must have rank >= 1");
  const int ax = I.axis_of(I.attr_i("axis", 0), r);
  Shape ds = d.shape();
  Shape os(ds.begin(), ds.begin() + ax);
  os.insert(os.end(), idx.shape().begin(), idx.shape().end());
  os.insert(os.end(), ds.begin() + ax + 1, ds.end());
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < ax; ++i) outer *= ds[i];
  for (int i = ax + 1; i < r; ++i) inner *= ds[i];
  auto iv = to_i64(idx);
  auto dv = to_f64(d);
  std::vector<double> out;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k : iv) {
      if (k < 0) k += ds[ax];
      if (k < 0 || k >= ds[ax]) I.err("index out of range");
      for (int64_t j = 0; j < inner; ++j) out.push_back(dv[(o * ds[ax] + k) * inner + j]);
    }
  I.out_const(0, make_tensor(os, d.dtype(), out));
}

void fold_concat(Importer& I) {
  Tensor a = I.cin(0);
  const int ax = I.axis_of(I.attr_i("axis", 0), a.ndim());
  std::vector<Tensor> ts;
  for (int i = 0; i < I.nin(); ++i) ts.push_back(I.cin(i));
  Shape os = ts[0].shape();
  os[ax] = 0;
  for (auto& t : ts) {
    if (t.ndim() != a.ndim()) I.err("ranks differ");
    os[ax] += t.shape()[ax];
  }
  int64_t outer = 1;
  for (int i = 0; i < ax; ++i) outer *= os[i];
  std::vector<double> out;
  for (int64_t o = 0; o < outer; ++o)
    for (auto& t : ts) {
      const int64_t chunk = t.numel() / std::max<int64_t>(outer, 1);
      auto v = to_f64(t);
      out.insert(out.end(), v.begin() + o * chunk, v.begin() + (o + 1) * chunk);
    }
  I.out_const(0, make_tensor(os, a.dtype(), out));
}

// Slice's starts, ends, axes and steps as the node gives them (attributes
// before opset 10, inputs after), defaults filled in.
struct SliceArgs {
  std::vector<int64_t> starts, ends, axes, steps;
};
SliceArgs read_slice_args(Importer& I) {
  SliceArgs a;
  if (I.opset < 10) {
    a.starts = I.attr_ints("starts", {}), a.ends = I.attr_ints("ends", {}), a.axes = I.attr_ints("axes", {});
  } else {
    a.starts = I.ints_in(1), a.ends = I.ints_in(2);
    if (I.has(3)) a.axes = I.ints_in(3);
    if (I.has(4)) a.steps = I.ints_in(4);
  }
  if (a.axes.empty())
    for (size_t i = 0; i < a.starts.size(); ++i) a.axes.push_back(static_cast<int64_t>(i));
  if (a.steps.empty()) a.steps.assign(a.starts.size(), 1);
  if (a.ends.size() != a.starts.size() || a.axes.size() != a.starts.size() || a.steps.size() != a.starts.size())
    I.err("starts, ends, axes and steps differ in length");
  return a;
}

void slice_params(Importer& I, const Shape& xs, std::vector<int64_t>& st, std::vector<int64_t>& en,
                  std::vector<int64_t>& step) {
  const int r = static_cast<int>(xs.size());
  const SliceArgs sa = read_slice_args(I);
  const auto &starts = sa.starts, &ends = sa.ends, &axes = sa.axes, &steps = sa.steps;
  st.assign(r, 0), en = xs, step.assign(r, 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int d = I.axis_of(axes[i], r);
    const int64_t n = xs[d], s = steps[i];
    if (s == 0) I.err("step 0");
    int64_t b = starts[i], e = ends[i];
    if (b < 0) b += n;
    if (e < 0) e += n;
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, n), e = std::clamp<int64_t>(e, 0, n);
    } else {
      b = std::clamp<int64_t>(b, 0, n - 1), e = std::clamp<int64_t>(e, -1, n - 1);
    }
    st[d] = b, en[d] = e, step[d] = s;
  }
}

void fold_slice(Importer& I) {
  Tensor x = I.cin(0);
  std::vector<int64_t> st, en, step;
  slice_params(I, x.shape(), st, en, step);
  const int r = x.ndim();
  Shape os(r);
  for (int d = 0; d < r; ++d) {
    // Overflow-safe for any step (INT64_MIN included).
    int64_t len = 0;
    if (step[d] > 0) {
      if (en[d] > st[d]) len = (en[d] - st[d] - 1) / step[d] + 1;
    } else {
      const uint64_t astep = static_cast<uint64_t>(-(step[d] + 1)) + 1;
      if (st[d] > en[d]) len = static_cast<int64_t>(static_cast<uint64_t>(st[d] - en[d] - 1) / astep + 1);
    }
    os[d] = len;
  }
  auto xv = to_f64(x);
  std::vector<double> out(static_cast<size_t>(numel(os)));
  for (int64_t i = 0; i < numel(os); ++i) {
    int64_t rem = i, src = 0, stride = 1;
    for (int d = r - 1; d >= 0; --d) {
      const int64_t c = rem % os[d];
      rem /= os[d];
      src += (st[d] + c * step[d]) * stride;
      stride *= x.shape()[d];
    }
    out[i] = xv[src];
  }
  I.out_const(0, make_tensor(os, x.dtype(), out));
}

void fold_unary(Importer& I) {
  const std::string& op = I.node->op_type();
  Tensor x = I.cin(0);
  if (op == "Identity") {
    I.out_const(0, x);
    return;
  }
  auto v = to_f64(x);
  for (auto& e : v) {
    if (op == "Neg") e = -e;
    else if (op == "Abs") e = std::fabs(e);
    else if (op == "Sqrt") e = std::sqrt(e);
    else if (op == "Reciprocal") e = 1.0 / e;
    else if (op == "Exp") e = std::exp(e);
    else if (op == "Log") e = std::log(e);
    else if (op == "Floor") e = std::floor(e);
    else if (op == "Ceil") e = std::ceil(e);
  }
  I.out_const(0, make_tensor(x.shape(), x.dtype(), v));
}

void fold_range(Importer& I) {
  const double s = I.cin(0).at(0), l = I.cin(1).at(0), d = I.cin(2).at(0);
  if (d == 0) I.err("delta is 0");
  const double n = std::max(std::ceil((l - s) / d), 0.0);
  if (n > (1 << 24)) I.err("range too long");
  std::vector<double> v;
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) v.push_back(s + i * d);
  I.out_const(0, make_tensor({static_cast<int64_t>(v.size())}, I.cin(0).dtype(), v));
}

void op_range(Importer& I) {
  if (!I.is_const(0) || !I.is_const(1) || !I.is_const(2)) I.unsupported("Range(runtime bounds)");
  fold_range(I);
}

void op_slice(Importer& I) {
  // ONNX Slice maps one to one onto the engine's slice (ONNX semantics:
  // negative and out-of-range starts/ends clamp, negative steps), whose
  // index arithmetic is overflow-safe for hostile values.
  Blob x = I.in(0);
  const SliceArgs a = read_slice_args(I);
  I.out(0, slice(x, a.starts, a.ends, a.axes, a.steps));
}

void op_split(Importer& I) {
  Blob x = I.in(0);
  const int ax = I.axis_of(I.attr_i("axis", 0), x.ndim());
  const int64_t D = x.shape()[ax];
  std::vector<int64_t> parts;
  if (I.opset >= 13 && I.has(1)) parts = I.ints_in(1);
  else if (I.has_attr("split")) parts = I.attr_ints("split", {});
  else if (I.opset < 13 && I.has(1)) parts = I.ints_in(1);
  const int n = I.node->output_size();
  if (parts.empty()) {
    const int64_t ns = I.attr_i("num_outputs", n);
    if (ns <= 0) I.err("no outputs");
    const int64_t chunk = (D + ns - 1) / ns;
    for (int64_t i = 0, left = D; i < ns; ++i, left -= chunk) parts.push_back(std::min(chunk, std::max<int64_t>(left, 0)));
  }
  if (static_cast<int>(parts.size()) != n) I.err("split has " + std::to_string(parts.size()) + " parts for " + std::to_string(n) + " outputs");
  int64_t sum = 0;
  for (int64_t p : parts) {
    if (p < 0 || p > D) I.err("split size " + std::to_string(p) + " is out of range for an axis of " + std::to_string(D));
    sum += p;
  }
  if (sum != D) I.err("split sizes add up to " + std::to_string(sum) + ", not " + std::to_string(D));
  // The engine's split: consecutive parts, any dtype, values copied exactly.
  // (The axis as the node gives it, checked above: a saved job loads back
  // to the same op.)
  const std::vector<Blob> ys = split(x, parts, static_cast<int>(I.attr_i("axis", 0)));
  for (int i = 0; i < n; ++i)
    if (I.wants(i)) I.out(i, ys[static_cast<size_t>(i)]);
}

void op_gather(Importer& I) {
  // The engine's gather: numpy.take semantics, negative indices wrap,
  // out-of-range indices are a run-time error; indices may be computed
  // (Embedding) or constant.
  Blob x = I.in(0);
  const int64_t axis = I.attr_i("axis", 0);
  I.axis_of(axis, x.ndim());  // in range; the engine takes a negative axis as it is (as saved)
  Blob idx = I.in(1);
  if (idx.dtype() != DType::Int32 && idx.dtype() != DType::Int64)
    I.err(std::string("indices must be int32 or int64, got ") + dtype_name(idx.dtype()));
  I.out(0, gather(x, idx, static_cast<int>(axis)));
}

void op_conv_transpose(Importer& I) {
  Blob x = I.in(0), w = I.in(1);
  const int r = x.ndim();
  if (x.dtype() != DType::Float32) I.unsupported(std::string("ConvTranspose(") + dtype_name(x.dtype()) + ")");
  if (r == 5) I.unsupported("ConvTranspose(3-D)");
  if (r != 3 && r != 4) I.err("input must be rank 3 or 4, got " + spec_str(x.spec()));
  if (w.ndim() != r) I.err("weight rank " + std::to_string(w.ndim()) + " differs from input rank");
  if (I.has_attr("output_shape")) I.unsupported("ConvTranspose(output_shape)");
  const std::string auto_pad = I.attr_s("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") I.unsupported("ConvTranspose(auto_pad=" + auto_pad + ")");
  const size_t n = static_cast<size_t>(r - 2);
  auto ints = [&](const char* name, int64_t dflt) {
    auto v = I.attr_ints(name, std::vector<int64_t>(n, dflt));
    if (v.size() != n) I.err(std::string(name) + " must have " + std::to_string(n) + " values");
    return v;
  };
  std::vector<int64_t> strides = ints("strides", 1), dil = ints("dilations", 1), outpad = ints("output_padding", 0);
  std::vector<int64_t> pads = I.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  if (pads.size() != 2 * n) I.err("pads must have " + std::to_string(2 * n) + " values");
  const int64_t group = I.attr_i("group", 1);
  const Shape xs = x.shape();
  if (r == 3) {  // 1-D as 2-D with H = 1
    x = reshape(x, {xs[0], xs[1], 1, xs[2]});
    w = reshape(w, {w.shape()[0], w.shape()[1], 1, w.shape()[2]});
    strides.insert(strides.begin(), 1), dil.insert(dil.begin(), 1), outpad.insert(outpad.begin(), 0);
    pads = {0, pads[0], 0, pads[1]};
  }
  Blob y = nn::conv_transpose2d(x, w, nn::Size2(strides[0], strides[1]), {pads[0], pads[1], pads[2], pads[3]},
                                nn::Size2(dil[0], dil[1]), nn::Size2(outpad[0], outpad[1]), group);
  if (I.has(2)) y = nn::bias_add(y, I.in(2), 1);
  if (r == 3) y = reshape(y, {y.shape()[0], y.shape()[1], y.shape()[3]});
  I.out(0, y);
}

const std::map<std::string, OpEntry>& op_table() {
  static const std::map<std::string, OpEntry> t = [] {
    std::map<std::string, OpEntry> m;
    auto bin = [](int k) { return [k](Importer& I) { op_binary(I, k); }; };
    m["Add"] = {bin(0), true};
    m["Sub"] = {bin(1), true};
    m["Mul"] = {bin(2), true};
    m["Div"] = {bin(3), true};
    m["Sum"] = {[](Importer& I) { op_variadic(I, 0); }};
    m["Mean"] = {[](Importer& I) { op_variadic(I, 1); }};
    m["Max"] = {[](Importer& I) { op_variadic(I, 2); }};
    m["Min"] = {[](Importer& I) { op_variadic(I, 3); }};
    m["Pow"] = {op_pow};
    m["Neg"] = {[](Importer& I) { unary(I, neg); }, true};
    m["Exp"] = {[](Importer& I) { unary(I, exp); }, true};
    m["Log"] = {[](Importer& I) { unary(I, log); }, true};
    m["Sqrt"] = {[](Importer& I) {
                   Blob x = I.in(0);
                   I.out(0, sqrt(x));
                   I.sqrt_of[I.node->output(0)] = x;
                 }, true};
    m["Abs"] = {[](Importer& I) { unary(I, abs_); }, true};
    m["Reciprocal"] = {op_reciprocal, true};
    m["Relu"] = {op_relu};
    m["Sigmoid"] = {op_sigmoid};
    m["Tanh"] = {op_tanh};
    m["LeakyRelu"] = {op_leaky};
    m["Elu"] = {op_elu};
    m["Celu"] = {op_celu};
    m["Selu"] = {op_selu};
    m["PRelu"] = {op_prelu};
    m["Softplus"] = {[](Importer& I) { I.out(0, nn::softplus(I.in(0))); }};
    m["Softsign"] = {op_softsign};
    m["HardSigmoid"] = {op_hardsigmoid};
    m["HardSwish"] = {op_hardswish};
    m["Mish"] = {op_mish};
    m["Clip"] = {op_clip};
    m["Softmax"] = {[](Importer& I) { op_softmax(I, false); }};
    m["LogSoftmax"] = {[](Importer& I) { op_softmax(I, true); }};
    m["Conv"] = {op_conv};
    m["ConvTranspose"] = {op_conv_transpose};
    m["MaxPool"] = {[](Importer& I) { op_pool(I, true); }};
    m["AveragePool"] = {[](Importer& I) { op_pool(I, false); }};
    m["GlobalAveragePool"] = {[](Importer& I) { op_global_pool(I, false); }};
    m["GlobalMaxPool"] = {[](Importer& I) { op_global_pool(I, true); }};
    m["BatchNormalization"] = {op_batchnorm};
    m["InstanceNormalization"] = {op_instancenorm};
    m["LayerNormalization"] = {op_layernorm};
    m["Gemm"] = {op_gemm};
    m["MatMul"] = {op_matmul};
    m["Reshape"] = {op_reshape};
    m["Flatten"] = {op_flatten};
    m["Squeeze"] = {op_squeeze};
    m["Unsqueeze"] = {op_unsqueeze};
    m["Transpose"] = {op_transpose};
    m["Concat"] = {op_concat, true};
    m["Identity"] = {op_identity, true};
    m["Dropout"] = {op_dropout};
    m["Cast"] = {op_cast};
    m["CastLike"] = {op_castlike};
    m["Constant"] = {op_constant};
    m["ConstantOfShape"] = {op_constant_of_shape};
    m["Shape"] = {op_shape};
    m["Size"] = {op_size};
    m["Range"] = {op_range};
    m["ReduceSum"] = {[](Importer& I) { op_reduce(I, 0); }};
    m["ReduceMean"] = {[](Importer& I) { op_reduce(I, 1); }};
    m["ReduceMax"] = {[](Importer& I) { op_reduce(I, 2); }};
    m["ReduceMin"] = {[](Importer& I) { op_reduce(I, 3); }};
    m["ReduceSumSquare"] = {[](Importer& I) { op_reduce(I, 4); }};
    m["ReduceL1"] = {[](Importer& I) { op_reduce(I, 5); }};
    m["ReduceL2"] = {[](Importer& I) { op_reduce(I, 6); }};
    m["ReduceLogSumExp"] = {[](Importer& I) { op_reduce(I, 7); }};
    m["ReduceLogSum"] = {[](Importer& I) { op_reduce(I, 8); }};
    m["ArgMax"] = {[](Importer& I) { op_argmax(I, false); }};
    m["ArgMin"] = {[](Importer& I) { op_argmax(I, true); }};
    m["SoftmaxCrossEntropyLoss"] = {op_sce_loss};
    m["Pad"] = {op_pad};
    m["Expand"] = {op_expand};
    m["Tile"] = {op_tile};
    m["DepthToSpace"] = {[](Importer& I) { op_depth_space(I, true); }};
    m["SpaceToDepth"] = {[](Importer& I) { op_depth_space(I, false); }};
    m["Trilu"] = {op_trilu};
    m["Slice"] = {op_slice};
    m["Split"] = {op_split};
    m["Gather"] = {op_gather};
    return m;
  }();
  return t;
}

// Host folding when every input is a plain constant.
bool try_fold(Importer& I) {
  const std::string& op = I.node->op_type();
  for (int i = 0; i < I.nin(); ++i)
    if (I.has(i) && !I.value(I.iname(i)).pure_const()) return false;
  if (I.nin() == 0) return false;
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") fold_binary(I);
  else if (op == "Gather") fold_gather(I);
  else if (op == "Concat") fold_concat(I);
  else if (op == "Slice") fold_slice(I);
  else if (op == "Range") fold_range(I);
  else if (op == "Identity" || op == "Neg" || op == "Abs" || op == "Sqrt" || op == "Reciprocal" || op == "Exp" ||
           op == "Log" || op == "Floor" || op == "Ceil")
    fold_unary(I);
  else return false;
  return true;
}

void Importer::run_node(const NodeProto& n, int index) {
  node = &n;
  node_index = index;
  if (try_fold(*this)) return;
  auto it = op_table().find(n.op_type());
  if (it == op_table().end()) unsupported(n.op_type());
  it->second.fn(*this);
  // Outputs the handler did not produce cannot be used later.
  for (int i = 0; i < n.output_size(); ++i)
    if (!n.output(i).empty() && !values.count(n.output(i)))
      bad_outputs[n.output(i)] = n.op_type() + "(output " + std::to_string(i) + ")";
}

// ---------------------------------------------------------------------------
// Model-level checks and the build.

struct Parsed {
  ModelProto model;
  std::string what, base_dir;
  int64_t opset = 0;
  std::map<std::string, std::string> meta;
};

void parse_model(const std::string& bytes, const LoadOptions& opts, const std::string& what, const std::string& base_dir,
                 Parsed& P) {
  P.what = what;
  P.base_dir = base_dir;
  if (bytes.size() > opts.max_file_bytes)
    fail(what, "the model is " + std::to_string(bytes.size()) + " bytes, over the limit of " +
                   std::to_string(opts.max_file_bytes));
  if (bytes.empty()) fail(what, "the file is empty");
  if (!P.model.ParseFromString(bytes)) fail(what, "not an ONNX model (the protobuf does not parse)");
  const ModelProto& m = P.model;
  if (!m.has_graph()) fail(what, "the model has no graph");
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") P.opset = o.version();
  if (P.opset == 0) P.opset = 1;
  if (P.opset > 18) fail(what, "opset " + std::to_string(P.opset) + " is newer than this importer knows (<= 18)");
  for (const auto& kv : m.metadata_props()) P.meta[kv.key()] = kv.value();
  const GraphProto& g = m.graph();
  if (g.node_size() > opts.max_nodes)
    fail(what, "the graph has " + std::to_string(g.node_size()) + " nodes, over the limit of " +
                   std::to_string(opts.max_nodes));
  // Names defined before use: graph inputs, initializers, then node outputs
  // in order. A use of a later or unknown name is a cycle or a bad graph.
  std::set<std::string> defined;
  for (const auto& t : g.initializer()) {
    if (t.name().empty()) fail(what, "an initializer has no name");
    if (!defined.insert(t.name()).second) fail(what, "initializer '" + t.name() + "' is defined twice");
    if (t.dims_size() > kMaxRank) fail(what, "initializer '" + t.name() + "' has rank " + std::to_string(t.dims_size()) + " (max 8)");
  }
  for (const auto& i : g.input()) {
    if (i.name().empty()) fail(what, "a graph input has no name");
    defined.insert(i.name());
    if (i.type().has_tensor_type() && i.type().tensor_type().shape().dim_size() > kMaxRank)
      fail(what, "input '" + i.name() + "' has rank > 8");
  }
  std::set<std::string> producers;
  std::map<std::string, int> later;
  for (int k = 0; k < g.node_size(); ++k)
    for (const auto& o : g.node(k).output())
      if (!o.empty()) later.emplace(o, k);
  for (int k = 0; k < g.node_size(); ++k) {
    const NodeProto& n = g.node(k);
    if (n.op_type().empty()) fail(what, "node '" + node_label(n, k) + "' has no op_type");
    for (const auto& a : n.attribute())
      if (a.has_g() || a.graphs_size()) {
        // Subgraphs (If/Loop/Scan) are not supported; the op check reports it.
      }
    for (const auto& in : n.input()) {
      if (in.empty() || defined.count(in)) continue;
      auto l = later.find(in);
      if (l != later.end())
        fail(what, "node '" + node_label(n, k) + "' (" + n.op_type() + ") uses '" + in + "', produced by node '" +
                       node_label(g.node(l->second), l->second) +
                       "' after it: the nodes are not in topological order or form a cycle");
      fail(what, "node '" + node_label(n, k) + "' (" + n.op_type() + ") uses '" + in + "', which is never defined");
    }
    for (const auto& o : n.output()) {
      if (o.empty()) continue;
      if (defined.count(o)) fail(what, "'" + o + "' is defined twice (node '" + node_label(n, k) + "')");
      defined.insert(o);
    }
  }
  for (const auto& o : g.output())
    if (!defined.count(o.name())) fail(what, "graph output '" + o.name() + "' is never defined");
  // Unsupported ops, all at once.
  std::map<std::string, std::vector<std::string>> missing;
  for (int k = 0; k < g.node_size(); ++k) {
    const NodeProto& n = g.node(k);
    const bool std_domain = n.domain().empty() || n.domain() == "ai.onnx";
    const std::string key = std_domain ? n.op_type() : n.domain() + "." + n.op_type();
    if (!std_domain || !op_table().count(n.op_type())) {
      missing[key].push_back(node_label(n, k));
    }
  }
  if (!missing.empty()) {
    std::string msg = "unsupported ops: ";
    std::vector<std::pair<std::string, std::vector<std::string>>> list;
    bool first = true;
    for (auto& [op, nodes] : missing) {
      msg += (first ? "" : "; ") + op + " (node" + (nodes.size() > 1 ? "s " : " ");
      for (size_t i = 0; i < nodes.size() && i < 10; ++i) msg += (i ? ", " : "") + nodes[i];
      if (nodes.size() > 10) msg += ", ... " + std::to_string(nodes.size() - 10) + " more";
      msg += ")";
      first = false;
      list.emplace_back(op, nodes);
    }
    throw Unsupported("[onnx.load] " + what + ": " + msg, list);
  }
}

TensorSpec input_spec(const Parsed& P, const ValueInfoProto& vi) {
  if (!vi.type().has_tensor_type())
    throw Unsupported("[onnx.load] " + P.what + ": input '" + vi.name() + "' is not a tensor", {{"non-tensor input", {vi.name()}}});
  const auto& tt = vi.type().tensor_type();
  TensorSpec s;
  if (tt.elem_type() == TensorProto::BOOL) {
    throw Unsupported("[onnx.load] " + P.what + ": input '" + vi.name() + "' is bool", {{"dtype bool", {vi.name()}}});
  }
  try {
    s.dtype = ou::from_onnx_dtype(tt.elem_type(), "input '" + vi.name() + "'");
  } catch (const Error& e) {
    std::string dt = TensorProto::DataType_IsValid(tt.elem_type())
                         ? TensorProto::DataType_Name(static_cast<TensorProto::DataType>(tt.elem_type()))
                         : std::to_string(tt.elem_type());
    std::transform(dt.begin(), dt.end(), dt.begin(), [](unsigned char c) { return std::tolower(c); });
    throw Unsupported("[onnx.load] " + P.what + ": input '" + vi.name() + "' has element type " + dt,
                      {{"dtype " + dt, {vi.name()}}});
  }
  if (!tt.has_shape()) fail(P.what, "input '" + vi.name() + "' has no shape; export the model with fixed input shapes");
  for (int d = 0; d < tt.shape().dim_size(); ++d) {
    const auto& dim = tt.shape().dim(d);
    if (!dim.has_dim_value() || dim.dim_value() <= 0)
      throw Unsupported("[onnx.load] " + P.what + ": input '" + vi.name() + "' has no fixed size for dimension " +
                            std::to_string(d) + (dim.has_dim_param() ? " ('" + dim.dim_param() + "')" : "") +
                            "; export the model with a fixed batch size (e.g. torch.onnx.export without "
                            "dynamic_axes)",
                        {{"dynamic input shape", {vi.name()}}});
    s.shape.push_back(dim.dim_value());
  }
  return s;
}

PlaceholderSpec spec_from_structure(const Structure& s, const std::vector<std::string>& names,
                                    const std::vector<TensorSpec>& specs, const std::string& what) {
  if (s.kind == Structure::Kind::Tuple) {
    std::vector<PlaceholderSpec> ch;
    for (auto& c : s.children) ch.push_back(spec_from_structure(c, names, specs, what));
    return TuplePlaceholder(std::move(ch));
  }
  if (s.kind != Structure::Kind::Leaf || s.index < 0 || s.index >= static_cast<int>(specs.size()))
    fail(what, "jobflow.input_structure does not match the graph inputs");
  const TensorSpec& t = specs[s.index];
  if (s.leaf == Structure::Leaf::ListListNumpy) {
    if (t.shape.empty()) fail(what, "ListListNumpy input '" + names[s.index] + "' has rank 0");
    return ListListNumpy::Placeholder(Shape(t.shape.begin() + 1, t.shape.end()), t.dtype, names[s.index], t.shape[0]);
  }
  if (s.leaf == Structure::Leaf::ListNumpy) return ListNumpy::Placeholder(t.shape, t.dtype, names[s.index]);
  return Numpy::Placeholder(t.shape, t.dtype, names[s.index]);
}

void count_leaves(const Structure& s, int& n, std::vector<int>& idx) {
  if (s.kind == Structure::Kind::Leaf) {
    ++n;
    idx.push_back(s.index);
  }
  for (auto& c : s.children) count_leaves(c, n, idx);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> r;
  std::string cur;
  for (char c : s) {
    if (c == ',') {
      if (!cur.empty()) r.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) r.push_back(cur);
  return r;
}

// Which initializers an ordinary model trains: weights, biases and scales.
std::set<std::string> param_inputs(const GraphProto& g) {
  static const std::map<std::string, std::vector<int>> roles = {
      {"Conv", {1, 2}}, {"ConvTranspose", {1, 2}}, {"Gemm", {0, 1, 2}}, {"MatMul", {0, 1}},
      {"BatchNormalization", {1, 2}}, {"PRelu", {1}}, {"InstanceNormalization", {1, 2}},
      {"LayerNormalization", {1, 2}}, {"Add", {0, 1}}, {"Mul", {0, 1}}, {"Gather", {0}}};
  std::set<std::string> r;
  for (const auto& n : g.node()) {
    auto it = roles.find(n.op_type());
    if (it == roles.end()) continue;
    for (int i : it->second)
      if (i < n.input_size() && !n.input(i).empty()) r.insert(n.input(i));
  }
  return r;
}

std::string file_stem(const std::string& what) { return fs::path(what).stem().string(); }

struct BuildResult {
  std::shared_ptr<CompiledJob> job;
  onnx_import::Analysis analysis;
};

BuildResult build(Parsed& P, const LoadOptions& opts, bool inspect) {
  const ModelProto& m = P.model;
  const GraphProto& g = m.graph();
  const std::string& what = P.what;
  auto meta = [&](const char* k) -> std::string {
    auto it = P.meta.find(k);
    return it == P.meta.end() ? "" : it->second;
  };
  const bool job_file = !meta(ou::kVersion).empty() || !meta(ou::kJobType).empty();

  // Initializers (validated and read; a checkpoint may override them).
  std::map<std::string, Tensor> inits;
  for (const auto& t : g.initializer())
    inits[t.name()] = read_tensor(t, P.base_dir, opts.max_tensor_bytes, "initializer '" + t.name() + "'", t.name());
  // Train step counters in the checkpoint (System-Train-TrainStep-<job>):
  // the one of this job sets its step once the job exists.
  std::map<std::string, int64_t> ckpt_steps;
  if (!opts.checkpoint.empty() && !inspect) {
    // Variables saved without `meta` (OneFlow 0.2/0.3) take the initializer's spec.
    checkpoint_io::Contents c = checkpoint_io::load_any(
        opts.checkpoint, [&inits](const std::string& n) -> std::optional<std::pair<Shape, DType>> {
          auto it = inits.find(n);
          if (it == inits.end()) return std::nullopt;
          return std::make_pair(it->second.shape(), it->second.dtype());
        });
    for (auto& [name, v] : c.untyped)
      fail(what, "checkpoint '" + opts.checkpoint + "' has variable '" + name + "', which the model does not have");
    const std::string step_prefix = session::train_step_variable("");
    for (auto& [name, v] : c.typed) {
      if (name.rfind(step_prefix, 0) == 0 && !inits.count(name)) {
        if (v.dtype() != DType::Int64 || numel(v.shape()) != 1)
          fail(what, "checkpoint variable '" + name + "' is " + spec_str({v.shape(), v.dtype()}) +
                         ", expected a train step: int64 (1,)");
        ckpt_steps[name] = v.data<int64_t>()[0];
        continue;
      }
      auto it = inits.find(name);
      if (it == inits.end())
        fail(what, "checkpoint '" + opts.checkpoint + "' has variable '" + name + "', which the model does not have");
      if (it->second.shape() != v.shape() || it->second.dtype() != v.dtype())
        fail(what, "checkpoint variable '" + name + "' is " + spec_str({v.shape(), v.dtype()}) + " but the model has " +
                       spec_str({it->second.shape(), it->second.dtype()}));
      it->second = v;
    }
  }

  // Placeholders: graph inputs that are not initializers.
  std::vector<std::string> in_names;
  std::vector<TensorSpec> in_specs;
  for (const auto& i : g.input()) {
    if (inits.count(i.name())) continue;
    in_names.push_back(i.name());
    in_specs.push_back(input_spec(P, i));
  }

  // Job type, loss, optimizer.
  JobType type = JobType::Predict;
  if (meta(ou::kJobType) == "train") type = JobType::Train;
  else if (!meta(ou::kJobType).empty() && meta(ou::kJobType) != "predict")
    fail(what, "jobflow.job_type is \"" + meta(ou::kJobType) + "\" (train or predict)");
  if (opts.type) type = *opts.type;
  if (inspect) type = JobType::Predict;
  const bool file_loss = job_file && !meta(ou::kLoss).empty();
  const bool added_loss = type == JobType::Train && !file_loss;
  if (added_loss) {
    if (opts.loss.empty() || opts.optimizer.empty())
      fail_option(opts.loss.empty() ? "loss" : "optimizer", what,
                  "loading as a train job needs LoadOptions.loss and LoadOptions.optimizer");
    if (opts.loss != "sparse_softmax_cross_entropy" && opts.loss != "mse")
      fail_option("loss", what, "loss \"" + opts.loss + "\" is not sparse_softmax_cross_entropy or mse");
  }
  std::string loss_output = opts.loss_output;
  TensorSpec loss_out_spec;
  if (added_loss) {
    const ValueInfoProto* vi = nullptr;
    for (const auto& o : g.output())
      if (loss_output.empty() ? true : o.name() == loss_output) {
        vi = &o;
        break;
      }
    if (!vi) fail_option("loss_output", what, "loss_output '" + loss_output + "' is not a graph output");
    loss_output = vi->name();
    loss_out_spec = input_spec(P, *vi);
    if (loss_out_spec.shape.empty())
      fail_option("loss", what, "output '" + loss_output + "' is a scalar; a loss needs a batch");
    if (!is_floating(loss_out_spec.dtype))
      fail_option("loss", what, "loss " + opts.loss + " needs a float output; '" + loss_output + "' is " +
                                    spec_str(loss_out_spec));
    if (opts.loss == "sparse_softmax_cross_entropy") {
      in_names.push_back("labels");
      in_specs.push_back({{loss_out_spec.shape[0]}, DType::Int32});
    } else {
      in_names.push_back("targets");
      in_specs.push_back(loss_out_spec);
    }
  }

  std::vector<PlaceholderSpec> specs;
  Structure in_struct;
  bool have_in_struct = false;
  if (job_file && !meta(ou::kInputStructure).empty() && !added_loss) {
    Structure s;
    try {
      s = ou::structure_from_text(meta(ou::kInputStructure));
    } catch (const Error& e) {
      fail(what, std::string("jobflow.input_structure: ") + e.what());
    }
    int n = 0;
    std::vector<int> idx;
    count_leaves(s, n, idx);
    std::sort(idx.begin(), idx.end());
    for (int i = 0; i < n; ++i)
      if (idx[i] != i) fail(what, "jobflow.input_structure leaves do not index the inputs 0..n-1");
    if (n != static_cast<int>(in_names.size()))
      fail(what, "jobflow.input_structure has " + std::to_string(n) + " leaves but the graph has " +
                     std::to_string(in_names.size()) + " inputs");
    if (s.kind != Structure::Kind::Tuple) fail(what, "jobflow.input_structure must be a tuple of the arguments");
    for (auto& c : s.children) specs.push_back(spec_from_structure(c, in_names, in_specs, what));
    in_struct = s;
    have_in_struct = true;
  } else {
    for (size_t i = 0; i < in_names.size(); ++i) specs.push_back(Numpy::Placeholder(in_specs[i].shape, in_specs[i].dtype, in_names[i]));
  }
  (void)have_in_struct;

  FunctionConfig cfg;
  std::string name = opts.name;
  if (name.empty()) name = meta(ou::kJobName);
  if (name.empty()) name = g.name();
  if (name.empty()) name = file_stem(what);
  cfg.name(name);
  cfg.max_in_flight(opts.max_in_flight == 0 ? 1 : opts.max_in_flight);
  if (opts.num_threads < 0) fail(what, "num_threads must be >= 0, got " + std::to_string(opts.num_threads));
  cfg.num_threads(opts.num_threads);
  std::string dev = opts.device;
  if (dev == "cpu" || dev.empty()) cfg.default_placement("cpu");
  else if (dev == "gpu" || dev == "cuda") cfg.default_placement("gpu");
  else if (dev.rfind("cuda:", 0) == 0 || dev.rfind("gpu:", 0) == 0) {
    const std::string id = dev.substr(dev.find(':') + 1);
    cfg.default_placement("gpu", "0:" + id);
  } else {
    fail(what, "device \"" + dev + "\" is not cpu, gpu or cuda:<n>");
  }
  if (!meta(ou::kSeed).empty()) {
    try {
      cfg.seed(static_cast<uint64_t>(std::stoull(meta(ou::kSeed))));
    } catch (...) {
      fail(what, "jobflow.seed is not a number");
    }
  }
  // The returns the job declares its accuracy (not when a loss given at
  // load replaces the returns); finish() checks them against the returns.
  if (job_file && !added_loss && !meta(ou::kAccuracy).empty()) {
    const std::vector<std::string> ab = split_list(meta(ou::kAccuracy));
    int idx[2] = {-1, -1};
    for (size_t i = 0; i < ab.size() && i < 2; ++i) {
      size_t used = 0;
      try {
        idx[i] = std::stoi(ab[i], &used);
      } catch (...) {
        used = 0;
      }
      if (used != ab[i].size()) idx[i] = -1;
    }
    if (ab.size() != 2 || idx[0] < 0 || idx[1] < 0)
      fail(what, "jobflow.accuracy is \"" + meta(ou::kAccuracy) + "\", not two return indices \"LABELS,LOGITS\"");
    cfg.accuracy(idx[0], idx[1]);
  }

  Importer I(what, opts, m, P.base_dir);
  I.opset = P.opset;
  I.inspect_mode = inspect;
  I.train = type == JobType::Train;
  I.job_file = job_file;
  // A Jobflow predict file trained with a loss given at load (LoadOptions)
  // has no jobflow.trainable: like an ordinary model, its float weights are.
  const bool file_trainable = job_file && !(type == JobType::Train && !file_loss && meta(ou::kTrainable).empty());
  if (file_trainable) {
    for (auto& n : split_list(meta(ou::kTrainable))) I.trainable.insert(n);
  } else {
    for (auto& n : param_inputs(g))
      if (inits.count(n) && is_floating(inits[n].dtype())) I.trainable.insert(n);
  }

  std::shared_ptr<optimizer::Optimizer> opt;
  if (type == JobType::Train && !inspect) {
    try {
      if (file_loss) {
        optimizer::Scheduler sched;
        if (!meta(ou::kSchedule).empty()) sched = ou::schedule_from_text(meta(ou::kSchedule));
        opt = ou::optimizer_from_text(opts.optimizer.empty() ? meta(ou::kOptimizer) : opts.optimizer, sched);
      } else {
        opt = ou::optimizer_from_text(opts.optimizer, optimizer::Scheduler());
      }
    } catch (const Error& e) {
      // LoadOptions.optimizer replaces the file's; the file is at fault only for its own.
      if (!opts.optimizer.empty()) fail_option("optimizer", what, std::string("optimizer: ") + e.what());
      fail(what, std::string("optimizer: ") + e.what());
    }
    if (!opt) fail(what, "no optimizer");
  }

  detail::JobBuilder B(type, cfg, specs);
  B.enter();
  BuildResult R;
  std::vector<Blob> outs;
  Structure out_struct;
  try {
    for (size_t i = 0; i < in_names.size(); ++i) I.values[in_names[i]].blob = B.input(static_cast<int>(i));
    for (auto& [n, t] : inits) {
      if (I.values.count(n)) continue;
      Value v;
      v.konst = t;
      v.variable = is_floating(t.dtype());
      I.values[n] = v;
    }
    for (int k = 0; k < g.node_size(); ++k) {
      const NodeProto& n = g.node(k);
      const size_t before = I.values.size();
      (void)before;
      I.run_node(n, k);
      if (inspect) {
        onnx_import::NodeShapes ns;
        ns.op_type = n.op_type();
        for (const auto& a : n.attribute())
          if (a.type() == AttributeProto::INT) ns.ints[a.name()] = a.i();
        for (const auto& in : n.input()) {
          TensorSpec s;
          auto it = I.values.find(in);
          if (!in.empty() && it != I.values.end())
            s = it->second.blob.defined() ? it->second.blob.spec() : TensorSpec{it->second.konst.shape(), it->second.konst.dtype()};
          ns.inputs.push_back(s);
        }
        for (const auto& o : n.output()) {
          TensorSpec s;
          auto it = I.values.find(o);
          if (!o.empty() && it != I.values.end())
            s = it->second.blob.defined() ? it->second.blob.spec() : TensorSpec{it->second.konst.shape(), it->second.konst.dtype()};
          ns.outputs.push_back(s);
        }
        R.analysis.nodes.push_back(std::move(ns));
      }
    }
    I.node = nullptr;
    auto out_blob = [&](const std::string& name, const ValueInfoProto* vi) {
      auto b = I.bad_outputs.find(name);
      if (b != I.bad_outputs.end())
        throw Unsupported("[onnx.load] " + what + ": " + b->second, {{b->second, {name}}});
      auto it = I.values.find(name);
      if (it == I.values.end()) fail(what, "graph output '" + name + "' is not defined");
      Value& v = it->second;
      Blob bl;
      if (v.blob.defined()) bl = v.blob;
      else if (v.variable && !inspect) {
        bl = get_variable(name, v.konst.shape(), v.konst.dtype(), zeros_initializer(), I.trainable.count(name) > 0);
        session::assign(name, v.konst);
        v.blob = bl;
      } else {
        bl = constant(v.konst, name);
      }
      if (vi && vi->type().has_tensor_type()) {
        const int32_t et = vi->type().tensor_type().elem_type();
        if (et != 0 && et != TensorProto::BOOL) {
          try {
            DType want = ou::from_onnx_dtype(et, "output");
            if (want != bl.dtype()) bl = cast(bl, want);
          } catch (const Error&) {
          }
        }
      }
      return bl;
    };
    if (job_file && !meta(ou::kOutputStructure).empty() && !added_loss) {
      for (const auto& o : g.output()) outs.push_back(out_blob(o.name(), &o));
      try {
        out_struct = ou::structure_from_text(meta(ou::kOutputStructure));
      } catch (const Error& e) {
        fail(what, std::string("jobflow.output_structure: ") + e.what());
      }
      int n = 0;
      std::vector<int> idx;
      count_leaves(out_struct, n, idx);
      if (n != static_cast<int>(outs.size()))
        fail(what, "jobflow.output_structure has " + std::to_string(n) + " leaves but the graph has " +
                       std::to_string(outs.size()) + " outputs");
      for (int i : idx)
        if (i < 0 || i >= n) fail(what, "jobflow.output_structure has a bad leaf index");
    } else if (added_loss) {
      Blob y = out_blob(loss_output, nullptr);
      Blob l;
      if (opts.loss == "sparse_softmax_cross_entropy") {
        if (y.ndim() != 2)
          fail_option("loss", what,
                      "sparse_softmax_cross_entropy needs a (batch, classes) output, got " + spec_str(y.spec()));
        l = nn::sparse_softmax_cross_entropy_with_logits(B.input(static_cast<int>(in_names.size()) - 1), y);
      } else {
        l = reduce_mean(square(sub(y, B.input(static_cast<int>(in_names.size()) - 1))));
      }
      if (!inspect) detail::set_objective(l, opt);
      outs.push_back(l);
      out_struct.kind = Structure::Kind::Leaf;
      out_struct.index = 0;
    } else {
      for (const auto& o : g.output()) outs.push_back(out_blob(o.name(), &o));
      if (outs.size() == 1) {
        out_struct.kind = Structure::Kind::Leaf;
        out_struct.index = 0;
      } else {
        out_struct.kind = Structure::Kind::Tuple;
        for (size_t i = 0; i < outs.size(); ++i) {
          Structure c;
          c.kind = Structure::Kind::Leaf;
          c.index = static_cast<int>(i);
          out_struct.children.push_back(c);
        }
      }
    }
    if (file_loss && type == JobType::Train && !inspect) {
      auto it = I.values.find(meta(ou::kLoss));
      if (it == I.values.end() || !it->second.blob.defined())
        fail(what, "jobflow.loss names '" + meta(ou::kLoss) + "', which is not a tensor of the graph");
      detail::set_objective(it->second.blob, opt);
    }
  } catch (...) {
    B.leave();
    throw;
  }
  B.leave();

  if (inspect) {
    Signature& s = R.analysis.signature;
    s.job_name = name;
    s.type = type;
    s.input_names = in_names;
    s.inputs = in_specs;
    int next = 0;
    s.input_structure.kind = Structure::Kind::Tuple;
    if (have_in_struct) s.input_structure = in_struct;
    else
      for (size_t i = 0; i < in_names.size(); ++i) {
        Structure c;
        c.kind = Structure::Kind::Leaf;
        c.index = next++;
        s.input_structure.children.push_back(c);
      }
    for (auto& b : outs) s.outputs.push_back(b.spec());
    s.output_structure = out_struct;
    s.callback = meta(ou::kCallback) == "1";
    return R;
  }

  R.job = B.finish(outs, out_struct, meta(ou::kCallback) == "1");

  // The step the saved job had reached: the checkpoint's step variable,
  // else the file's jobflow.step, else 0 (a train job's step is a session
  // variable: a job loaded again starts where its file or checkpoint says,
  // not where an earlier load of it stopped).
  int64_t step = 0;
  if (job_file && !meta(ou::kStep).empty()) {
    try {
      size_t used = 0;
      step = std::stoll(meta(ou::kStep), &used);
      if (used != meta(ou::kStep).size() || step < 0) throw Error("");
    } catch (...) {
      fail(what, "jobflow.step is not a non-negative integer: \"" + meta(ou::kStep) + "\"");
    }
  }
  if (auto it = ckpt_steps.find(session::train_step_variable(name)); it != ckpt_steps.end()) step = it->second;
  if (type == JobType::Train || step > 0) R.job->set_steps_run(step);  // schedules, dropout masks, Adam continue from here
  // Optimizer state saved with the job (after finish() created it).
  if (type == JobType::Train) {
    for (const auto& n : split_list(meta(ou::kState))) {
      auto it = inits.find(n);
      if (it == inits.end()) fail(what, "jobflow.optimizer_state names '" + n + "', which is not an initializer");
      if (session::has_variable(n)) session::assign(n, it->second);
    }
  }
  return R;
}

std::string read_file_capped(const std::string& path, uint64_t cap) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) fail(path, ec ? ec.message() : "no such file");
  const uint64_t size = fs::file_size(path, ec);
  if (ec) fail(path, ec.message());
  if (size > cap)
    fail(path, "the file is " + std::to_string(size) + " bytes, over the limit of " + std::to_string(cap) + " bytes");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot open the file");
  std::string bytes(static_cast<size_t>(size), '\0');
  if (size && !f.read(bytes.data(), static_cast<std::streamsize>(size))) fail(path, "cannot read the file");
  return bytes;
}

std::string base_dir_of(const std::string& path) {
  fs::path p = fs::path(path).parent_path();
  return p.empty() ? "." : p.string();
}

std::shared_ptr<CompiledJob> load_impl(const std::string& bytes, const LoadOptions& options, const std::string& what,
                                       const std::string& base_dir) {
  Parsed P;
  try {
    parse_model(bytes, options, what, base_dir, P);
    return build(P, options, false).job;
  } catch (const Unsupported& e) {
    const std::string m = e.what();
    if (m.rfind("[onnx.load]", 0) == 0) throw;
    throw Unsupported("[onnx.load] " + what + ": " + m, e.ops);
  } catch (const Error& e) {
    const std::string m = e.what();
    if (m.rfind("[onnx.load]", 0) == 0) throw;
    // Engine errors (shape inference of an op) get the file prefix.
    throw Error("[onnx.load] " + what + ": " + m);
  } catch (const std::exception& e) {
    throw Error("[onnx.load] " + what + ": " + e.what());
  }
}

}  // namespace

std::shared_ptr<CompiledJob> load(const std::string& path, const LoadOptions& options) {
  return load_impl(read_file_capped(path, options.max_file_bytes), options, path, base_dir_of(path));
}

std::shared_ptr<CompiledJob> load_bytes(const std::string& bytes, const LoadOptions& options, const std::string& what) {
  // No folder: bytes from memory may not reference external data (they
  // would otherwise read files relative to the working directory).
  return load_impl(bytes, options, what, "");
}

std::vector<std::string> supported_ops() {
  std::vector<std::string> r;
  for (auto& [k, v] : op_table()) r.push_back(k);
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

}  // namespace jobflow::onnx

namespace jobflow::onnx_import {

Analysis analyze(const std::string& path) {
  onnx::LoadOptions opts;
  using namespace jobflow::onnx;
  onnx::Parsed P;
  const std::string bytes = onnx::read_file_capped(path, opts.max_file_bytes);
  onnx::parse_model(bytes, opts, path, onnx::base_dir_of(path), P);
  auto R = onnx::build(P, opts, true);
  Analysis A = std::move(R.analysis);
  A.opset = P.opset;
  for (auto& [k, v] : P.meta) {
    if (k.rfind("jobflow.", 0) == 0) A.metadata.emplace_back(k, v);
    // The analysis builds the graph as a predict job; report what the file says.
    if (k == onnx_util::kJobType) A.signature.type = v == "train" ? JobType::Train : JobType::Predict;
  }
  for (const auto& t : P.model.graph().initializer()) {
    // Parameters are the float weights; int64 shapes/axes are not.
    if (t.data_type() != ::onnx::TensorProto::FLOAT && t.data_type() != ::onnx::TensorProto::DOUBLE &&
        t.data_type() != ::onnx::TensorProto::FLOAT16 && t.data_type() != ::onnx::TensorProto::BFLOAT16)
      continue;
    int64_t n = 1;
    for (int64_t d : t.dims()) n *= d;
    A.parameters += n;
  }
  std::map<std::string, int64_t> counts;
  for (const auto& n : P.model.graph().node()) counts[n.op_type()]++;
  A.op_counts.assign(counts.begin(), counts.end());
  return A;
}

}  // namespace jobflow::onnx_import
