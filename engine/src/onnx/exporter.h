// The ONNX exporter's node-level interface (internal): what an export row
// (registry.h) sees while it writes one engine node as ONNX nodes.
//
// onnx::save() (export.cpp) walks the job's forward graph, names every
// value, and for each live node calls the row of the node's kind; a node
// whose kind has no row makes save() throw naming the op and the node.
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "jobflow/onnx.h"
#include "jobflow/primitive.h"
#include "registry.h"
#include "session_internal.h"

namespace jobflow::onnx {

using ::onnx::AttributeProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;

class Exporter {
 public:
  Exporter(const CompiledJob& job, const SaveOptions& opts) : job_(job), def_(job.definition()), opts_(opts) {}

  ::onnx::ModelProto run(const std::string& path);

  // ---- the node being exported ----
  const Node& node() const { return *node_; }
  const Primitive& op() const { return *node_->op; }
  const std::string& name() const { return node_->name; }
  size_t num_inputs() const { return node_->inputs.size(); }
  size_t num_outputs() const { return node_->outputs.size(); }
  // ONNX names of its inputs and outputs.
  const std::string& in(int i) const { return names_[node_->inputs.at(i)]; }
  const std::string& out(int i) const { return names_[node_->outputs.at(i)]; }
  const TensorSpec& in_spec(int i) const { return spec(node_->inputs.at(i)); }
  const TensorSpec& out_spec(int i) const { return spec(node_->outputs.at(i)); }
  // A train job (with an optimizer): Dropout is written in training mode.
  bool train() const;
  int64_t opset() const { return opts_.opset; }

  // ---- writing ----
  ::onnx::NodeProto* add(const std::string& type, std::vector<std::string> inputs, std::vector<std::string> outputs,
                         const std::string& name);
  // A node of the ai.jobflow domain (registry.h). `define` writes, once per
  // file, the op's model-local ONNX function: its body in standard ONNX ops
  // (on the function's inputs and outputs, attributes referenced with
  // set_ref), so that other runtimes can run the file.
  using FunctionBody = void (*)(::onnx::FunctionProto& f);
  ::onnx::NodeProto* add_jobflow(const std::string& type, std::vector<std::string> inputs,
                                 std::vector<std::string> outputs, const std::string& name, FunctionBody define);
  // A node of a function body.
  static ::onnx::NodeProto* add_to(::onnx::FunctionProto& f, const std::string& type, std::vector<std::string> inputs,
                                   std::vector<std::string> outputs);
  // The node as one ONNX node of `type`: the same inputs, outputs and name.
  ::onnx::NodeProto* add_as(const std::string& type);
  // A tensor name not used yet, from `base`.
  std::string fresh(const std::string& base);
  // An int64 initializer (shapes, axes, starts): constants, never variables.
  std::string int64_init(const std::string& base, const std::vector<int64_t>& v);
  // Any other synthetic constant: a Constant node (so loaders never take it
  // for a variable).
  std::string constant(const std::string& base, const Tensor& t);
  static void set_int(::onnx::NodeProto* n, const char* k, int64_t v);
  static void set_float(::onnx::NodeProto* n, const char* k, double v);
  static void set_ints(::onnx::NodeProto* n, const char* k, const std::vector<int64_t>& v);
  static void set_string(::onnx::NodeProto* n, const char* k, const std::string& v);
  static void set_tensor(::onnx::NodeProto* n, const char* k, const Tensor& t);
  // An attribute that takes the value of the calling node's attribute `ref`
  // (in a function body).
  static void set_ref(::onnx::NodeProto* n, const char* k, AttributeProto::AttributeType type, const char* ref);
  static Tensor scalar_of(DType dt, double v);
  static Tensor filled(const Shape& s, DType dt, double v);

  // ---- forms ----
  // Throws "[onnx.save] job 'J': op 'OP' (node 'N') has no ONNX form[: why]".
  [[noreturn]] void no_form(const std::string& why = "") const;
  // Only output 0 of the node is representable: the others must be unused.
  void only_first_output() const;
  // Whether a parameter of an activation survives an ONNX float attribute
  // (float32) exactly for the op's data: float32 kernels use it as a float32
  // anyway; float64 kernels need every bit.
  bool float_attr_exact(double v) const;
  // No form when a float64 job's parameter is not a float32.
  void check_param(const char* k, double v) const;
  // The live bias_add (axis 1) that alone reads output 0 of this node, with
  // its bias defined before this node: folded into Gemm/Conv (it is then not
  // exported itself). Sets the bias's name and the bias_add's output name;
  // false when there is none.
  bool fold_bias_add(bool conv, std::string* bias, std::string* y);

 private:
  const CompiledJob& job_;
  const JobDefinition& def_;
  const SaveOptions& opts_;
  const Graph* g_ = nullptr;
  ::onnx::ModelProto* model_ = nullptr;
  ::onnx::GraphProto* gp_ = nullptr;
  std::vector<std::string> names_;  // blob id -> ONNX tensor name
  std::set<std::string> used_names_;
  std::vector<char> live_;    // forward node -> exported
  std::vector<char> folded_;  // bias_add folded into its producer
  std::vector<std::vector<int>> consumers_;
  std::set<int> kept_blobs_;  // outputs and the loss: never folded away
  std::map<std::string, std::shared_ptr<internal::VariableEntry>> vars_;  // exported variables
  std::set<std::string> functions_;  // ai.jobflow ops whose function the file has
  const Node* node_ = nullptr;       // node being exported (errors)

  [[noreturn]] void fail(const std::string& what) const;
  const TensorSpec& spec(int blob) const { return g_->blobs[blob].spec; }
  void export_node(int index);
  void add_metadata(::onnx::ModelProto& m);
};

}  // namespace jobflow::onnx
