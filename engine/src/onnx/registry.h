// The ONNX op registry (internal): the one table the importer and the
// exporter consult.
//
// Each op family keeps its rows next to its ops, in engine/src/ops/
// <family>_onnx.cpp (compiled when ONNX support is built):
//   * import rows: an ONNX op type (in the standard domain, or in Jobflow's
//     own `ai.jobflow` domain) -> a handler that builds engine ops through
//     their builder functions (Importer, importer.h);
//   * export rows: an OpKind -> a handler that writes the op as ONNX nodes
//     (Exporter, exporter.h).
// Ops the engine has and standard ONNX lacks (rsqrt, square, bias_add,
// equal_mask) are written as single nodes of the `ai.jobflow` domain, so a
// saved job loads back into the same ops one to one; the file also defines
// each of them as a model-local ONNX function in standard ops, so other
// runtimes can run it.
//
// A row is found by key only: no pattern matching across nodes.
#pragma once

#include <string>
#include <vector>

#include "jobflow/primitive.h"

namespace jobflow::onnx {

class Importer;
class Exporter;

// Jobflow's ONNX domain (and its opset version) for the ops standard ONNX
// does not have.
inline constexpr const char* kJobflowDomain = "ai.jobflow";
inline constexpr int kJobflowOpset = 1;

using ImportFn = void (*)(Importer&);
using ExportFn = void (*)(Exporter&);
// The output specs of a node imported per call (ImportRow::value_inputs),
// as its definition knows them: dtype and rank, kDynamic where the values
// decide.
using DeferredSpecsFn = std::vector<TensorSpec> (*)(Importer&);

struct ImportRow {
  std::string domain;  // "" (standard ONNX) or kJobflowDomain
  std::string op_type;
  ImportFn fn = nullptr;
  // Computed at load time, with the engine's own kernels, when every input
  // is a constant (shape arithmetic: Shape -> Gather -> Concat -> Reshape).
  bool fold = false;
  // Inputs that are the trained parameters (weights, biases, scales) when
  // an ordinary ONNX model is loaded as a train job.
  std::vector<int> weights;
  // Inputs whose values the row reads at load (Slice's starts and ends,
  // Pad's pads, Tile's repeats, an axes input). When one of them is
  // computed in the graph instead, the node becomes an onnx_node op
  // (onnx/deferred.cpp) that runs this row again with each call's values;
  // `deferred_specs` gives its outputs' specs at definition, and refuses
  // (Importer::unsupported) the forms the row refuses whatever the values
  // are, so that those still fail at load rather than at the first call.
  std::vector<int> value_inputs;
  DeferredSpecsFn deferred_specs = nullptr;
  // The row takes sequences and optional values (SeqType) as inputs; any
  // other row given one fails at load naming the input.
  bool sequences = false;
  ImportRow& takes_sequences() {
    sequences = true;
    return *this;
  }
  // The row takes string tensors (SeqType::Kind::Strings); any other row
  // given one fails at load naming the input.
  bool strings = false;
  ImportRow& takes_strings() {
    strings = true;
    return *this;
  }
  ImportRow& values_per_call(std::vector<int> inputs, DeferredSpecsFn specs) {
    value_inputs = std::move(inputs);
    deferred_specs = specs;
    return *this;
  }
};

struct ExportRow {
  OpKind kind;
  ExportFn fn = nullptr;
};

// What a family adds.
struct OpRows {
  std::vector<ImportRow> imports;
  std::vector<ExportRow> exports;
  // A standard ONNX op; `fold`: see ImportRow.
  ImportRow& import_op(const char* op_type, ImportFn fn, bool fold = false) {
    imports.push_back({"", op_type, fn, fold, {}, {}, nullptr});
    return imports.back();
  }
  // An op of the ai.jobflow domain.
  ImportRow& import_jobflow_op(const char* op_type, ImportFn fn) {
    imports.push_back({kJobflowDomain, op_type, fn, false, {}, {}, nullptr});
    return imports.back();
  }
  // An op of another domain (ai.onnx.preview.training).
  ImportRow& import_domain_op(const char* domain, const char* op_type, ImportFn fn) {
    imports.push_back({domain, op_type, fn, false, {}, {}, nullptr});
    return imports.back();
  }
  void export_op(OpKind k, ExportFn fn) { exports.push_back({k, fn}); }
};

// The families (one function per ops/<family>_onnx.cpp).
void elementwise_onnx_rows(OpRows& r);
void activation_onnx_rows(OpRows& r);
void linalg_onnx_rows(OpRows& r);
void reduce_onnx_rows(OpRows& r);
void shape_onnx_rows(OpRows& r);
void indexing_onnx_rows(OpRows& r);
void nn_onnx_rows(OpRows& r);
void conv_onnx_rows(OpRows& r);
void logic_onnx_rows(OpRows& r);
void math_onnx_rows(OpRows& r);
void resize_onnx_rows(OpRows& r);
void rnn_onnx_rows(OpRows& r);
void detection_onnx_rows(OpRows& r);
void control_onnx_rows(OpRows& r);
void sequence_onnx_rows(OpRows& r);  // import only: sequences have no export
void text_onnx_rows(OpRows& r);
void strings_onnx_rows(OpRows& r);  // import only: string ops have no export
void random_onnx_rows(OpRows& r);
void deferred_onnx_rows(OpRows& r);  // onnx/deferred.cpp: the export of onnx_node
void quant_onnx_rows(OpRows& r);     // import only: built from other ops
void training_onnx_rows(OpRows& r);  // import only: built from other ops

// The row of an ONNX node (domain "" and "ai.onnx" are the standard one),
// or null.
const ImportRow* find_import(const std::string& domain, const std::string& op_type);
// The row of an engine op, or null (the op has no ONNX form).
const ExportRow* find_export(OpKind k);
// Every importable op type, sorted: "Add", ..., "ai.jobflow.Rsqrt".
std::vector<std::string> importable_ops();

}  // namespace jobflow::onnx
