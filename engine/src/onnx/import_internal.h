// Internal to the ONNX importer, its inspector and the conformance runner.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "jobflow/graph.h"
#include "jobflow/onnx.h"
#include "jobflow/tensor.h"

namespace jobflow::onnx_import {

// Thrown (as an Error) when a model uses ops, or forms of ops (a 3-D Conv,
// a bool tensor), that this build cannot load. `ops` holds one entry per
// missing op type or form, e.g. "Conv(3-D)", "dtype bool", with the nodes.
struct Unsupported : Error {
  Unsupported(const std::string& msg, std::vector<std::pair<std::string, std::vector<std::string>>> o)
      : Error(msg), ops(std::move(o)) {}
  std::vector<std::pair<std::string, std::vector<std::string>>> ops;  // op (form) -> node names
};

// What inspect() needs from a build: the signature and, per ONNX node, the
// specs of its inputs and outputs (empty spec where unknown).
struct NodeShapes {
  std::string op_type;
  std::vector<TensorSpec> inputs, outputs;
  std::map<std::string, int64_t> ints;  // a few attributes (group)
};
struct Analysis {
  Signature signature;
  std::vector<NodeShapes> nodes;
  int64_t parameters = 0;
  int64_t opset = 0;
  std::vector<std::pair<std::string, std::string>> metadata;
  std::vector<std::pair<std::string, int64_t>> op_counts;
  std::vector<std::pair<std::string, std::string>> packed;  // Inspection::packed
};
// Parses and builds the model without touching the session (initializers
// become constants, nothing is compiled).
Analysis analyze(const std::string& path);

}  // namespace jobflow::onnx_import
