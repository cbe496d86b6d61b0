// Stage 1 of a load: the model file read and checked (model_check.h).
#include "model_check.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "import_internal.h"
#include "importer.h"
#include "onnx_util.h"
#include "registry.h"

namespace jobflow::onnx {

namespace fs = std::filesystem;
namespace ou = onnx_util;

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
    if (t.dims_size() > kMaxImportRank) fail(what, "initializer '" + t.name() + "' has rank " + std::to_string(t.dims_size()) + " (max 8)");
  }
  for (const auto& i : g.input()) {
    if (i.name().empty()) fail(what, "a graph input has no name");
    defined.insert(i.name());
    if (i.type().has_tensor_type() && i.type().tensor_type().shape().dim_size() > kMaxImportRank)
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
  // Nodes of subgraphs (If's branches) count too.
  std::map<std::string, std::vector<std::string>> missing;
  std::function<void(const GraphProto&)> find_missing = [&](const GraphProto& gr) {
    for (int k = 0; k < gr.node_size(); ++k) {
      const NodeProto& n = gr.node(k);
      const bool std_domain = n.domain().empty() || n.domain() == "ai.onnx";
      const std::string key = std_domain ? n.op_type() : n.domain() + "." + n.op_type();
      if (!find_import(n.domain(), n.op_type())) missing[key].push_back(node_label(n, k));
      for (const auto& a : n.attribute()) {
        if (a.has_g()) find_missing(a.g());
        for (const auto& sg : a.graphs()) find_missing(sg);
      }
    }
  };
  find_missing(g);
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

TensorSpec input_spec(const Parsed& P, const ValueInfoProto& vi, std::vector<std::string>* dim_names) {
  if (!vi.type().has_tensor_type())
    throw Unsupported("[onnx.load] " + P.what + ": input '" + vi.name() + "' is not a tensor", {{"non-tensor input", {vi.name()}}});
  const auto& tt = vi.type().tensor_type();
  TensorSpec s;
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
  if (tt.shape().dim_size() > kMaxImportRank)
    fail(P.what, "input '" + vi.name() + "' has rank " + std::to_string(tt.shape().dim_size()) + ", over " +
                     std::to_string(kMaxImportRank));
  // A dim without a positive size (a symbolic dim_param such as "batch", or
  // none at all) is known at each call: kDynamic, its name kept.
  if (dim_names) dim_names->clear();
  bool named = false;
  for (int d = 0; d < tt.shape().dim_size(); ++d) {
    const auto& dim = tt.shape().dim(d);
    const bool fixed = dim.has_dim_value() && dim.dim_value() > 0;
    s.shape.push_back(fixed ? dim.dim_value() : kDynamic);
    const std::string name = !fixed && dim.has_dim_param() ? dim.dim_param() : "";
    named = named || !name.empty();
    if (dim_names) dim_names->push_back(name);
  }
  if (dim_names && !named) dim_names->clear();
  Shape known(s.shape);  // a dynamic dim counts as 1: the known dims' product must fit
  for (int64_t& d : known)
    if (d == kDynamic) d = 1;
  int64_t bytes = 0;
  std::string why;
  if (!checked_nbytes(known, s.dtype, &bytes, &why))
    fail(P.what, "input '" + vi.name() + "' " + spec_str(s) + ": " + why);
  return s;
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

}  // namespace jobflow::onnx
