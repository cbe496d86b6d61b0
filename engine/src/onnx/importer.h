// The ONNX importer's node-level interface (internal): what an import row
// (registry.h) sees of the model while it maps one ONNX node onto engine
// ops.
//
// The stages of a load:
//   model_check.cpp  file size, protobuf parse, structure (topological
//                    order, ranks, names), unsupported ops listed at once;
//   importer.cpp     the Importer: values by name, a node's inputs and
//                    attributes, constants folded with the engine's kernels;
//   ops/*_onnx.cpp   the rows: one handler per ONNX op type;
//   build.cpp        placeholders, variables, the job (detail::JobBuilder),
//                    its signature and metadata.
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "import_internal.h"
#include "jobflow/onnx.h"
#include "jobflow/ops.h"
#include "layout.h"
#include "registry.h"

namespace jobflow::onnx {

// The protobuf types every stage and row uses.
using ::onnx::AttributeProto;
using ::onnx::GraphProto;
using ::onnx::ModelProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;
using ::onnx::ValueInfoProto;
using onnx_import::Unsupported;

// The importer's rank limit (initializers, inputs, shapes it builds).
inline constexpr int kMaxImportRank = 8;

[[noreturn]] void fail(const std::string& file, const std::string& msg);
// An error of the LoadOptions field `option`, not of the file.
[[noreturn]] void fail_option(const char* option, const std::string& file, const std::string& msg);
std::string node_label(const ::onnx::NodeProto& n, int index);

// ---- host helpers for constants read at load (shapes, axes, parameters) ----
std::vector<int64_t> to_i64(const Tensor& t);  // int64 exactly; floats saturate
Tensor make_tensor(const Shape& s, DType dt, const std::vector<double>& v);
Tensor i64_tensor(const std::vector<int64_t>& v, bool scalar = false);
Tensor scalar_like(double v, DType dt);

// A TensorProto read with onnx_util's checks, plus bool (as uint8 0/1).
// Strings (packed, jobflow/strings.h) only where `strings` says the caller
// tracks their type (initializers, Constant): see proto_type(). Unsupported
// element types throw onnx_import::Unsupported naming `node_for_unsupported`.
Tensor read_tensor(const ::onnx::TensorProto& p, const std::string& base_dir, uint64_t max_bytes,
                   const std::string& what, const std::string& node_for_unsupported, bool strings = false);

// ONNX's types the engine carries packed, as the importer tracks them: a
// sequence of tensors or an optional value (jobflow/sequence.h), each one
// packed uint8 blob with the items' dtype and rank (-1: not known at load);
// a string tensor (jobflow/strings.h), packed too, with its rank.
struct SeqType {
  enum class Kind : uint8_t { Tensor, Sequence, OptionalTensor, OptionalSequence, Strings };
  Kind kind = Kind::Tensor;
  DType elem = DType::Float32;
  int rank = -1;       // -1: not known, or items of several ranks
  bool fresh = false;  // known to hold no items yet (SequenceEmpty): the first insert sets the rank
  bool is_tensor() const { return kind == Kind::Tensor; }
  bool is_strings() const { return kind == Kind::Strings; }
  bool optional() const { return kind == Kind::OptionalTensor || kind == Kind::OptionalSequence; }
  // "sequence(float32, rank 1)", "optional(sequence(int64))", "tensor",
  // "tensor(string, rank 2)"
  std::string str() const;
};
// The SeqType of a declared type: tensors, string tensors, sequences of
// tensors, optional tensors and optional sequences of tensors; other types (maps, sequences
// of sequences, sparse tensors) throw onnx_import::Unsupported naming `what`
// ("non-tensor input" for a graph input).
SeqType seq_type_of(const ::onnx::TypeProto& t, const std::string& what, const std::string& form);

// A string tensor of `rank` dims (-1: not known).
SeqType strings_type(int rank);
// The type of what read_tensor made of `p`: Strings for a TensorProto of
// strings (decided by the proto's element type, never by the bytes), else
// Tensor.
SeqType proto_type(const ::onnx::TensorProto& p);

// A named value of the model.
struct Value {
  Blob blob;              // defined once the value exists in the graph
  Tensor konst;           // value known at load time
  bool variable = false;  // a float initializer: a session variable when used as data
  // The output of Shape on a blob whose dims are not all known at load:
  // those dims (kDynamic where known per call), so that Gather picking
  // known ones gives a constant (torch's "squeeze if that dim is 1" If).
  std::optional<Shape> dims;
  SeqType type;  // a sequence or optional (the blob or constant is its packed form)
  bool pure_const() const { return konst.defined() && !variable; }
};

class Importer {
 public:
  Importer(std::string file, const LoadOptions& opts, const ::onnx::ModelProto& m, std::string base_dir)
      : file_(std::move(file)), opts_(opts), model_(m), base_dir_(std::move(base_dir)) {}

  std::string file_;
  const LoadOptions& opts_;
  const ::onnx::ModelProto& model_;
  std::string base_dir_;
  int64_t opset = 0;
  bool inspect_mode = false;  // initializers as constants, nothing in the session
  // Prefix of the session names of the model's variables (JobDefinition::
  // variable_scope): empty but for a model that must not share them.
  std::string var_scope;
  bool train = false;         // building a train job
  bool job_file = false;
  std::map<std::string, Value> values;
  std::set<std::string> trainable;
  std::map<std::string, std::string> bad_outputs;  // output name -> why it cannot be used
  // float16/bfloat16 values as the float32 their readers compute on (one
  // cast per value: run_in_float32, importer.cpp).
  std::map<std::string, Value> as_float32;

  const ::onnx::NodeProto* node = nullptr;
  int node_index = 0;

  // ---- errors: "[onnx.load] FILE: node 'N' (Op): ..." ----
  std::string where() const;
  [[noreturn]] void err(const std::string& msg) const;
  // A form of the op this build lacks ("Conv(3-D)"): onnx_import::Unsupported.
  [[noreturn]] void unsupported(const std::string& form) const;

  // ---- inputs ----
  int nin() const { return node->input_size(); }
  bool has(int i) const { return i < node->input_size() && !node->input(i).empty(); }
  // The name of input i; a node with fewer inputs is an error naming it.
  const std::string& iname(int i) const;
  // Checks that a tensor of `s` elements of `t` fits the load limits before
  // anything of that size is built (overflow-safe).
  void check_size(const Shape& s, DType t, const std::string& what) const;
  Value& value(const std::string& name);
  Blob blob_of(const std::string& name);
  Blob in(int i);  // input i as a blob (a constant or variable node when needed)
  TensorSpec spec(int i);
  Shape shape(int i) { return spec(i).shape; }
  bool is_const(int i);
  // Input i's value, which must be known at load time (else Unsupported:
  // "Op(runtime input i)").
  Tensor cin(int i);
  std::vector<int64_t> ints_in(int i);  // cin(i) of an integer tensor

  // ---- attributes (type-checked; old files without types inferred) ----
  const ::onnx::AttributeProto* attr(const std::string& name, ::onnx::AttributeProto::AttributeType want) const;
  bool has_attr(const std::string& name) const;
  int64_t attr_i(const std::string& name, int64_t def) const;
  double attr_f(const std::string& name, double def) const;
  std::string attr_s(const std::string& name, const std::string& def) const;
  std::optional<std::vector<int64_t>> attr_ints(const std::string& name) const;
  std::vector<int64_t> attr_ints(const std::string& name, std::vector<int64_t> def) const;
  // A TENSOR attribute read like an initializer; an empty Tensor when absent.
  Tensor attr_t(const std::string& name) const;

  // Input i's sequence/optional type (kind Tensor for a tensor).
  const SeqType& type_of(int i) { return value(iname(i)).type; }
  // The rank the graph being imported (then the model's main graph)
  // declares for the tensor `name` in its outputs or value_info; -1 when
  // none does.
  int declared_rank(const std::string& name) const;
  const ::onnx::GraphProto* graph = nullptr;  // the (sub)graph whose nodes run_node is importing

  // ---- outputs ----
  void out(int i, Blob b);
  // A sequence or optional output: its packed blob and type.
  void out_seq(int i, Blob b, const SeqType& t);
  // A value known at load; `type` Strings for a packed string tensor.
  void out_const(int i, Tensor t, const SeqType& type = {});
  bool wants(int i) const { return i < node->output_size() && !node->output(i).empty(); }

  // Rows that size what they build from a shape: a dim known only per call
  // (kDynamic) is onnx_import::Unsupported, "Op(dims known per call)".
  void need_static(const Shape& s) const;

  // `a` of a tensor of `rank` dims in [0, rank) (a scalar has no axis).
  int axis_of(int64_t a, int64_t rank) const;

  // ---- the build ----
  void run_node(const ::onnx::NodeProto& n, int index);
};

// A node whose row reads the values of inputs computed in the graph
// (ImportRow::value_inputs): built as an onnx_node op that imports it again
// per call (onnx/deferred.cpp). False when every such input is a constant.
bool defer_node(Importer& I, const ImportRow& row);
// For the rows' DeferredSpecsFn: a spec of `rank` dims all known per call;
// the length of the 1-D input i (an axes or pads tensor), which must be
// known at load (else the form is unsupported: the output rank would not
// be known).
TensorSpec dynamic_spec(size_t rank, DType dt);
int64_t static_length(Importer& I, int i);
// DeferredSpecsFn of ops whose output is input 0's spec (Trilu), or has its
// rank and dtype with every dim known per call (Tile, Pad, Resize).
std::vector<TensorSpec> input_spec(Importer& I);
std::vector<TensorSpec> input_rank(Importer& I);

// ---- shared by the rows ----
// Cast and CastLike where strings are involved (ops/strings_onnx.cpp): input
// 0 a string tensor (parsed as `to`), or `to` empty (input 0 formatted as
// strings). Its output 0 is set.
void import_string_cast(Importer& I, std::optional<DType> to);
Blob scalar_blob(double v, DType dt);  // a constant scalar of `dt`
Blob abs_of(Blob x);                   // |x| from engine ops (relu(x) + relu(-x))
// The two operands of a broadcasting binary op, checked to broadcast and to
// share a dtype; before opset 7, `broadcast` with `axis` aligns b at that
// axis of a.
std::pair<Blob, Blob> binary_operands(Importer& I);

}  // namespace jobflow::onnx
