// The Importer (importer.h): a model's values by name, one node's inputs,
// attributes and outputs as its import row sees them, and the folding of
// constant nodes with the engine's own kernels.
#include "importer.h"

#include <algorithm>
#include <iterator>
#include <limits>

#include "jobflow/job.h"
#include "jobflow/session.h"
#include "onnx_util.h"

namespace jobflow::onnx {

namespace ou = onnx_util;

[[noreturn]] void fail(const std::string& file, const std::string& msg) {
  throw Error("[onnx.load] " + file + ": " + msg);
}
[[noreturn]] void fail_option(const char* option, const std::string& file, const std::string& msg) {
  throw OptionError(option, "[onnx.load] " + file + ": " + msg);
}

std::string node_label(const NodeProto& n, int index) {
  if (!n.name().empty()) return n.name();
  std::string label = "#";  // (not "#" + ...: GCC 12 warns falsely about that)
  return label.append(std::to_string(index));
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
Tensor make_tensor(const Shape& s, DType dt, const std::vector<double>& v) {
  Tensor d(s, DType::Float64);
  std::copy_n(v.begin(), d.numel(), d.data<double>());
  return d.astype(dt);  // cast's rules, every dtype
}
Tensor i64_tensor(const std::vector<int64_t>& v, bool scalar) {
  Tensor t(scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())}, DType::Int64);
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}
Tensor scalar_like(double v, DType dt) { return make_tensor({}, dt, {v}); }
Blob scalar_blob(double v, DType dt) { return constant(scalar_like(v, dt)); }
Blob abs_of(Blob x) { return math::abs(x); }

std::pair<Blob, Blob> binary_operands(Importer& I) {
  Blob a = I.in(0), b = I.in(1);
  if (I.opset < 7 && I.attr_i("broadcast", 0) && I.has_attr("axis")) {
    const int ax = I.axis_of(I.attr_i("axis", 0), a.ndim());
    Shape s(a.ndim() - ax, 1);
    for (int d = 0; d < b.ndim(); ++d) s[d] = b.shape()[d];
    b = reshape(b, s);
  }
  Shape bs;
  if (!layout::broadcast_shape(a.shape(), b.shape(), &bs))
    I.err("shapes " + shape_str(a.shape()) + " and " + shape_str(b.shape()) + " do not broadcast");
  if (a.dtype() != b.dtype()) I.err("input dtypes differ: " + spec_str(a.spec()) + " and " + spec_str(b.spec()));
  return {a, b};
}

// ---------------------------------------------------------------------------
// Reading tensors (TensorProto) with the checks of onnx_util plus bool.

Tensor read_tensor(const TensorProto& p, const std::string& base_dir, uint64_t max_bytes, const std::string& what,
                   const std::string& node_for_unsupported, bool strings) {
  if (p.dims_size() > kMaxImportRank)
    throw Error("[onnx] " + what + ": rank " + std::to_string(p.dims_size()) + " exceeds the limit of " +
                std::to_string(kMaxImportRank));
  for (int64_t d : p.dims())
    if (d < 0) throw Error("[onnx] " + what + ": negative dimension " + std::to_string(d));
  if (p.data_type() == TensorProto::BOOL) {
    // Bools (ONNX keeps them in raw_data bytes or int32_data); any nonzero
    // byte reads as true.
    uint64_t n = 1;
    for (int64_t d : p.dims()) {
      if (d != 0 && n > max_bytes / static_cast<uint64_t>(d))
        throw Error("[onnx] " + what + ": " + "tensor larger than the limit of " + std::to_string(max_bytes) + " bytes");
      n *= static_cast<uint64_t>(d);
    }
    if (n > max_bytes) throw Error("[onnx] " + what + ": tensor larger than the limit");
    if (p.has_raw_data() ? p.raw_data().size() != n : static_cast<uint64_t>(p.int32_data_size()) != n)
      throw Error("[onnx] " + what + ": bool tensor holds a wrong number of values for dims");
    Tensor t(Shape(p.dims().begin(), p.dims().end()), DType::Bool);
    for (uint64_t i = 0; i < n; ++i)
      t.data<bool>()[i] = p.has_raw_data() ? (p.raw_data()[i] != 0) : (p.int32_data(static_cast<int>(i)) != 0);
    return t;
  }
  switch (p.data_type()) {
    case TensorProto::FLOAT: case TensorProto::DOUBLE: case TensorProto::INT32: case TensorProto::INT64:
    case TensorProto::INT8: case TensorProto::UINT8: case TensorProto::INT16: case TensorProto::UINT16:
    case TensorProto::UINT32: case TensorProto::UINT64: case TensorProto::FLOAT16: case TensorProto::BFLOAT16:
      break;
    case TensorProto::STRING:  // packed (jobflow/strings.h), where the caller records its type
      if (strings) break;
      [[fallthrough]];
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
// Sequences and optional values (SeqType).

std::string SeqType::str() const {
  const std::string items =
      std::string(dtype_name(elem)) + (rank >= 0 ? ", rank " + std::to_string(rank) : std::string());
  switch (kind) {
    case Kind::Tensor: return "tensor";
    case Kind::Sequence: return "sequence(" + items + ")";
    case Kind::OptionalTensor: return "optional(tensor(" + items + "))";
    case Kind::OptionalSequence: return "optional(sequence(" + items + "))";
    case Kind::Strings: return "tensor(string" + (rank >= 0 ? ", rank " + std::to_string(rank) : std::string()) + ")";
  }
  return "?";
}

namespace {

// The items' dtype and rank of a tensor type (rank -1 without a shape).
void tensor_items(const ::onnx::TypeProto& t, SeqType& r, const std::string& what, const std::string& form) {
  if (!t.has_tensor_type())
    throw Unsupported("[onnx.load] " + what + ": only sequences and optionals of tensors are supported", {{form, {what}}});
  try {
    r.elem = ou::from_onnx_dtype(t.tensor_type().elem_type(), what);
  } catch (const Error& e) {
    throw Unsupported(std::string("[onnx.load] ") + e.what(), {{form, {what}}});
  }
  r.rank = t.tensor_type().has_shape() ? t.tensor_type().shape().dim_size() : -1;
}

}  // namespace

SeqType seq_type_of(const ::onnx::TypeProto& t, const std::string& what, const std::string& form) {
  SeqType r;
  if (t.has_tensor_type() && t.tensor_type().elem_type() == TensorProto::STRING) {
    r.kind = SeqType::Kind::Strings;
    r.elem = DType::UInt8;
    r.rank = t.tensor_type().has_shape() ? t.tensor_type().shape().dim_size() : -1;
    return r;
  }
  if (t.has_tensor_type() || t.value_case() == ::onnx::TypeProto::VALUE_NOT_SET) return r;
  if (t.has_sequence_type()) {
    r.kind = SeqType::Kind::Sequence;
    tensor_items(t.sequence_type().elem_type(), r, what, form);
    return r;
  }
  if (t.has_optional_type()) {
    const ::onnx::TypeProto& e = t.optional_type().elem_type();
    if (e.has_sequence_type()) {
      r.kind = SeqType::Kind::OptionalSequence;
      tensor_items(e.sequence_type().elem_type(), r, what, form);
    } else {
      r.kind = SeqType::Kind::OptionalTensor;
      tensor_items(e, r, what, form);
    }
    return r;
  }
  throw Unsupported("[onnx.load] " + what + ": a map or sparse tensor is not supported", {{form, {what}}});
}

SeqType strings_type(int rank) {
  SeqType r;
  r.kind = SeqType::Kind::Strings;
  r.elem = DType::UInt8;
  r.rank = rank;
  return r;
}

SeqType proto_type(const TensorProto& p) {
  return p.data_type() == TensorProto::STRING ? strings_type(p.dims_size()) : SeqType{};
}

int Importer::declared_rank(const std::string& name) const {
  auto look = [&](const GraphProto& g) {
    auto in = [&](const auto& list) {
      for (const auto& v : list)
        if (v.name() == name && v.type().has_tensor_type() && v.type().tensor_type().has_shape())
          return v.type().tensor_type().shape().dim_size();
      return -1;
    };
    const int r = in(g.output());
    return r >= 0 ? r : in(g.value_info());
  };
  const int r = graph ? look(*graph) : -1;
  return r >= 0 ? r : look(model_.graph());
}

void Importer::out_seq(int i, Blob b, const SeqType& t) {
  if (i >= node->output_size() || node->output(i).empty()) return;
  Value v;
  v.blob = b;
  v.type = t;
  values[node->output(i)] = v;
}

// ---------------------------------------------------------------------------
// The importer.

std::string Importer::where() const {
  return "node '" + node_label(*node, node_index) + "' (" + node->op_type() + ")";
}

void Importer::err(const std::string& msg) const { fail(file_, where() + ": " + msg); }

void Importer::unsupported(const std::string& form) const {
  throw Unsupported("[onnx.load] " + file_ + ": unsupported op: " + form + " (node " + node_label(*node, node_index) + ")",
                    {{form, {node_label(*node, node_index)}}});
}

const std::string& Importer::iname(int i) const {
  // Never an out-of-range read of the protobuf.
  if (i < 0 || i >= node->input_size())
    err("has " + std::to_string(node->input_size()) + " inputs; input " + std::to_string(i) + " is required");
  return node->input(i);
}

void Importer::check_size(const Shape& s, DType t, const std::string& what) const {
  // A dynamic dim is known per call (the plan of that shape checks its
  // memory): it counts as 1 here, every known dim is checked.
  Shape known(s);
  for (int64_t& d : known)
    if (d == kDynamic) d = 1;
  int64_t bytes = 0;
  std::string why;
  if (!checked_nbytes(known, t, &bytes, &why)) err(what + " " + shape_str(s) + " " + dtype_name(t) + ": " + why);
  if (static_cast<uint64_t>(bytes) > opts_.max_tensor_bytes)
    err(what + " " + shape_str(s) + " would need more than max_tensor_bytes (" + std::to_string(opts_.max_tensor_bytes) +
        ")");
}

Value& Importer::value(const std::string& name) {
  auto it = values.find(name);
  if (it == values.end()) {
    auto b = bad_outputs.find(name);
    if (b != bad_outputs.end()) throw Unsupported("[onnx.load] " + file_ + ": " + b->second, {{b->second, {name}}});
    err("input '" + name + "' is not defined");
  }
  return it->second;
}

Blob Importer::blob_of(const std::string& name) {
  Value& v = value(name);
  if (v.blob.defined()) return v.blob;
  if (v.variable && !inspect_mode) {
    const Tensor& t = v.konst;
    v.blob = get_variable(var_scope + name, t.shape(), t.dtype(), zeros_initializer(), trainable.count(name) > 0);
    session::assign(var_scope + name, t);
  } else {
    v.blob = constant(v.konst, name);
  }
  return v.blob;
}

Blob Importer::in(int i) {
  if (!has(i)) err("input " + std::to_string(i) + " is required");
  return blob_of(iname(i));
}

TensorSpec Importer::spec(int i) {
  Value& v = value(iname(i));
  if (v.blob.defined()) return v.blob.spec();
  return {v.konst.shape(), v.konst.dtype()};
}

bool Importer::is_const(int i) {
  if (!has(i)) return false;
  return value(node->input(i)).konst.defined();
}

Tensor Importer::cin(int i) {
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

std::vector<int64_t> Importer::ints_in(int i) {
  Tensor t = cin(i);
  if (is_floating(t.dtype())) err("input '" + node->input(i) + "' must be an integer tensor");
  return to_i64(t);
}

const AttributeProto* Importer::attr(const std::string& name, AttributeProto::AttributeType want) const {
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

bool Importer::has_attr(const std::string& name) const {
  for (const auto& a : node->attribute())
    if (a.name() == name) return true;
  return false;
}

int64_t Importer::attr_i(const std::string& name, int64_t def) const {
  auto* a = attr(name, AttributeProto::INT);
  return a ? a->i() : def;
}

double Importer::attr_f(const std::string& name, double def) const {
  auto* a = attr(name, AttributeProto::FLOAT);
  return a ? a->f() : def;
}

std::string Importer::attr_s(const std::string& name, const std::string& def) const {
  auto* a = attr(name, AttributeProto::STRING);
  return a ? a->s() : def;
}

std::optional<std::vector<int64_t>> Importer::attr_ints(const std::string& name) const {
  auto* a = attr(name, AttributeProto::INTS);
  if (!a) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::vector<int64_t> Importer::attr_ints(const std::string& name, std::vector<int64_t> def) const {
  auto v = attr_ints(name);
  return v ? *v : def;
}

Tensor Importer::attr_t(const std::string& name) const {
  auto* a = attr(name, AttributeProto::TENSOR);
  if (!a) return Tensor();
  return read_tensor(a->t(), base_dir_, opts_.max_tensor_bytes, where() + " " + name, node_label(*node, node_index));
}

void Importer::out(int i, Blob b) {
  if (i >= node->output_size() || node->output(i).empty()) return;
  check_size(b.shape(), b.dtype(), "output '" + node->output(i) + "'");
  values[node->output(i)].blob = b;
}

void Importer::out_const(int i, Tensor t, const SeqType& type) {
  if (i >= node->output_size() || node->output(i).empty()) return;
  Value v;
  v.konst = std::move(t);
  v.type = type;
  values[node->output(i)] = v;
}

void Importer::need_static(const Shape& s) const {
  if (!is_static(s)) unsupported(node->op_type() + "(dims known per call)");
}

int Importer::axis_of(int64_t a, int64_t rank) const {
  const int ax = rank > 0 ? layout::wrap_axis(a, rank) : -1;
  if (ax < 0) err("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
  return ax;
}

namespace {

// A foldable op whose inputs are all plain constants: its handler builds the
// engine ops on a scratch graph, and the engine's own kernels (eval_cpu)
// compute them now; the outputs become constants, the values the job would
// compute. Nothing of the scratch graph stays.
bool try_fold(Importer& I, const ImportRow& e) {
  if (!e.fold || I.nin() == 0) return false;
  for (int i = 0; i < I.nin(); ++i)
    if (I.has(i) && !I.value(I.iname(i)).pure_const()) return false;
  Graph scratch;
  // An input already used by the job has a blob in the job's graph: the
  // scratch graph gets a constant of its own (restored afterwards).
  std::vector<std::pair<std::string, Blob>> stashed;
  for (int i = 0; i < I.nin(); ++i) {
    if (!I.has(i)) continue;
    Value& v = I.value(I.iname(i));
    if (v.blob.defined()) {
      stashed.emplace_back(I.iname(i), v.blob);
      v.blob = Blob();
    }
  }
  auto forget_scratch = [&] {
    for (auto& [name, v] : I.values)
      if (v.blob.defined() && v.blob.graph() == &scratch) v.blob = Blob();
    for (auto& [name, b] : stashed) {
      auto it = I.values.find(name);
      if (it != I.values.end() && !it->second.blob.defined()) it->second.blob = b;
    }
  };
  try {
    detail::GraphScope scope(&scratch);
    e.fn(I);
    std::vector<Tensor> vals(scratch.blobs.size());
    ExecContext ctx;
    for (const Node& n : scratch.nodes) {
      std::vector<Tensor> ins, outs;
      for (int b : n.inputs) ins.push_back(vals[b]);
      if (n.op->sizes_outputs()) {  // its data gives its outputs' sizes
        outs = n.op->eval_sized(ins, ctx);
      } else {
        for (int b : n.outputs) outs.emplace_back(scratch.blobs[b].spec.shape, scratch.blobs[b].spec.dtype);
        n.op->eval_cpu(ins, outs, ctx);
      }
      for (size_t k = 0; k < outs.size(); ++k) vals[n.outputs[k]] = outs[k];
    }
    for (int i = 0; i < I.node->output_size(); ++i) {
      auto it = I.values.find(I.node->output(i));
      if (it == I.values.end() || !it->second.blob.defined() || it->second.blob.graph() != &scratch) continue;
      Value v;
      v.konst = vals[it->second.blob.id()];
      v.type = it->second.type;  // a packed value stays one
      it->second = v;
    }
  } catch (...) {
    forget_scratch();
    throw;
  }
  forget_scratch();
  return true;
}

// The row itself, or the folded or deferred node it makes.
void build_node(Importer& I, const ImportRow& row) {
  if (!try_fold(I, row) && !defer_node(I, row)) row.fn(I);
}

// float16 and bfloat16 are storage types in the engine (tensor.h): a node
// other than Cast/CastLike that reads them runs in float32 between casts.
// Its 16-bit inputs are seen as float32 while its row builds it, and its
// float32 outputs go back to the inputs' 16-bit type when no other input
// is a float and no attribute (`to`, `dtype`) picks the output type: then
// ONNX's type constraints give them the inputs' T (Pow(float32 X, float16
// Y) is float32, EyeLike(dtype=FLOAT) too). Exact for data movement, max/min and fmod;
// one float32 operation rounded once to 16 bits is what ONNX Runtime's CPU
// kernels for float16 compute as well.
bool run_in_float32(Importer& I, const ImportRow& row) {
  if (row.domain.empty() && (row.op_type == "Cast" || row.op_type == "CastLike")) return false;
  if (row.sequences) return false;  // they move bytes, whatever the dtype
  std::optional<DType> half;
  bool back = !I.has_attr("to") && !I.has_attr("dtype");
  std::vector<std::pair<std::string, Value>> stashed;
  // (Every input's dtype read before any is replaced: a node may read one
  // value twice, Add(v, v).)
  std::vector<DType> dts;
  for (int i = 0; i < I.nin(); ++i) dts.push_back(I.has(i) ? I.spec(i).dtype : DType::Float32);
  for (int i = 0; i < I.nin(); ++i) {
    if (!I.has(i)) continue;
    const std::string& name = I.iname(i);
    const DType dt = dts[static_cast<size_t>(i)];
    if (is_floating(dt)) back = false;
    if (!is_half(dt)) continue;
    if (half && *half != dt) I.err("inputs mix float16 and bfloat16");
    half = dt;
    if (std::any_of(stashed.begin(), stashed.end(), [&](const auto& s) { return s.first == name; })) continue;
    Value& v = I.value(name);
    Value f;
    auto cached = I.as_float32.find(name);
    if (cached != I.as_float32.end()) f = cached->second;  // one cast per value, whatever its consumers
    else if (v.pure_const()) f.konst = v.konst.astype(DType::Float32);
    else f.blob = cast(I.blob_of(name), DType::Float32);
    stashed.emplace_back(name, v);
    v = std::move(f);
  }
  if (!half) return false;
  auto restore = [&] {
    for (auto& [name, v] : stashed) I.values[name] = v;
  };
  try {
    build_node(I, row);
  } catch (...) {
    restore();
    throw;
  }
  for (auto& [name, v] : stashed) I.as_float32[name] = I.values[name];
  restore();
  for (int i = 0; back && i < I.node->output_size(); ++i) {
    auto it = I.values.find(I.node->output(i));
    if (I.node->output(i).empty() || it == I.values.end()) continue;
    Value& v = it->second;
    if (v.konst.defined() && v.konst.dtype() == DType::Float32) v.konst = v.konst.astype(*half);
    if (v.blob.defined() && v.blob.dtype() == DType::Float32) v.blob = cast(v.blob, *half);
  }
  return true;
}

}  // namespace

void Importer::run_node(const NodeProto& n, int index) {
  node = &n;
  node_index = index;
  const ImportRow* row = find_import(n.domain(), n.op_type());
  if (!row) unsupported(n.domain().empty() || n.domain() == "ai.onnx" ? n.op_type() : n.domain() + "." + n.op_type());
  // Sequences and optionals reach only the rows made for them.
  std::optional<SeqType> passed;
  for (int i = 0; i < nin(); ++i) {
    if (!has(i)) continue;
    const SeqType& t = type_of(i);
    if (t.is_tensor()) continue;
    if (t.is_strings() && !row->strings)
      err("input '" + iname(i) + "' is a " + t.str() + "; Jobflow's " + n.op_type() +
          " does not take strings (those that do: StringNormalizer, Cast, CastLike, TfIdfVectorizer, Identity)");
    if (!t.is_strings() && !row->sequences)
      err("input '" + iname(i) + "' is a " + t.str() + "; " + n.op_type() + " takes tensors");
    if (!passed) passed = t;
  }
  if (!run_in_float32(*this, *row)) build_node(*this, *row);
  // Identity passes a sequence or optional on as it is (a folded constant
  // included).
  if (passed && n.op_type() == "Identity" && n.output_size() > 0) {
    auto it = values.find(n.output(0));
    if (it != values.end()) it->second.type = *passed;
  }
  // Outputs the handler did not produce cannot be used later.
  for (int i = 0; i < n.output_size(); ++i)
    if (!n.output(i).empty() && !values.count(n.output(i)))
      bad_outputs[n.output(i)] = n.op_type() + "(output " + std::to_string(i) + ")";
}

}  // namespace jobflow::onnx
