// Stage 1 of a load (internal): the model file read and checked before
// anything big is allocated (importer.h lists the stages).
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <string>

#include "jobflow/onnx.h"

namespace jobflow::onnx {

struct Parsed {
  ::onnx::ModelProto model;
  std::string what, base_dir;
  int64_t opset = 0;
  std::map<std::string, std::string> meta;
};

// Parses `bytes` into P and checks the model: file size cap, protobuf parse
// (protobuf's own recursion limit), node count cap, opset, every node input
// defined before use (topological order; cycles and undefined names are
// errors), ranks, and every op against the registry: one
// onnx_import::Unsupported lists all the missing ones with their nodes.
void parse_model(const std::string& bytes, const LoadOptions& opts, const std::string& what, const std::string& base_dir,
                 Parsed& P);
// The spec of a graph input (or output): a tensor of a supported element
// type with a fixed shape, else Unsupported naming it.
// A graph input's spec; symbolic dims are kDynamic and `dim_names` (when
// given) gets their names, one per dim ("" when unnamed; empty when none is
// named).
TensorSpec input_spec(const Parsed& P, const ::onnx::ValueInfoProto& vi, std::vector<std::string>* dim_names = nullptr);
// The file's bytes, refused over `cap` before reading.
std::string read_file_capped(const std::string& path, uint64_t cap);
// The folder external data is relative to ("." for a bare file name).
std::string base_dir_of(const std::string& path);

}  // namespace jobflow::onnx
