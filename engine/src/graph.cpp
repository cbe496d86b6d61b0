#include "jobflow/graph.h"

#include <iostream>
#include <sstream>

#include "jobflow/backend.h"
#include "jobflow/primitive.h"

namespace jobflow {

std::string spec_str(const TensorSpec& s) { return shape_str(s.shape) + " " + dtype_name(s.dtype); }

Shape Blob::shape() const { return spec().shape; }
DType Blob::dtype() const { return spec().dtype; }
int Blob::ndim() const { return static_cast<int>(spec().shape.size()); }
TensorSpec Blob::spec() const {
  if (!g_) throw Error("[Blob] use of an undefined blob");
  return g_->blobs.at(id_).spec;
}
std::string Blob::name() const {
  if (!g_) throw Error("[Blob] use of an undefined blob");
  return g_->blobs.at(id_).name;
}

std::string Graph::unique_name(const std::string& prefix) {
  for (auto& [p, n] : name_counts_)
    if (p == prefix) return prefix + "_" + std::to_string(n++);
  name_counts_.emplace_back(prefix, 1);
  return prefix + "_0";
}

std::vector<Blob> Graph::add(std::shared_ptr<Primitive> op, const std::vector<Blob>& inputs, std::string name) {
  std::vector<TensorSpec> in;
  in.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Blob& b = inputs[i];
    if (!b.defined()) op_error(op->name(), "input " + std::to_string(i) + " is an undefined blob");
    // (The other graph may be gone: nothing of it is read here.)
    if (b.graph() != this)
      op_error(op->name(), "input " + std::to_string(i) + " belongs to another job function; blobs cannot cross job functions");
    in.push_back(b.spec());
    // The 16-bit floats are storage types (tensor.h): only cast reads them.
    if (is_half(in.back().dtype) && op->kind() != OpKind::Cast && !op->stores_only())
      op_error(op->name(), "input " + std::to_string(i) + " is " + spec_str(in.back()) + ": " +
                               dtype_name(in.back().dtype) +
                               " tensors are stored, not computed on; cast(x, Float32) first");
  }
  std::vector<TensorSpec> out = op->infer(in);
  if (name.empty()) name = unique_name(op->name());
  Node n;
  n.name = name;
  n.op = std::move(op);
  for (const Blob& b : inputs) n.inputs.push_back(b.id());
  n.placement = detail::current_placement();
  const int node_id = static_cast<int>(nodes.size());
  std::vector<Blob> result;
  for (size_t i = 0; i < out.size(); ++i) {
    BlobDesc d;
    d.spec = out[i];
    d.producer = node_id;
    d.out_index = static_cast<int>(i);
    d.name = out.size() == 1 ? name : name + "/out" + std::to_string(i);
    blobs.push_back(d);
    n.outputs.push_back(static_cast<int>(blobs.size()) - 1);
    result.emplace_back(this, static_cast<int>(blobs.size()) - 1);
  }
  nodes.push_back(std::move(n));
  return result;
}

std::vector<std::vector<int>> Graph::consumers() const {
  std::vector<std::vector<int>> c(blobs.size());
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int b : nodes[i].inputs) c[b].push_back(static_cast<int>(i));
  return c;
}

namespace {
thread_local Graph* t_graph = nullptr;
thread_local std::vector<Placement> t_placements;
const Placement kDefaultPlacement{};
}  // namespace

Graph* current_graph() { return t_graph; }
Graph& require_graph(const char* op) {
  if (!t_graph)
    op_error(op, "called outside a job function body; ops build the graph of a job defined with global_function");
  return *t_graph;
}

namespace detail {
GraphScope::GraphScope(Graph* g) : prev(t_graph) { t_graph = g; }
GraphScope::~GraphScope() { t_graph = prev; }
const Placement& current_placement() { return t_placements.empty() ? kDefaultPlacement : t_placements.back(); }
void push_placement(Placement p) { t_placements.push_back(std::move(p)); }
void pop_placement() {
  if (!t_placements.empty()) t_placements.pop_back();
}
}  // namespace detail

namespace scope {
static Placement check_placement(const std::string& device, std::string ids) {
  return Placement{parse_device(device, "scope::placement").tag, std::move(ids)};
}
placement::placement(std::string device, std::string ids) {
  detail::push_placement(check_placement(std::move(device), std::move(ids)));
  active_ = true;
}
placement::placement(std::string device, std::string ids, const std::function<void()>& body) {
  detail::push_placement(check_placement(std::move(device), std::move(ids)));
  try {
    body();
  } catch (...) {
    detail::pop_placement();
    throw;
  }
  detail::pop_placement();
}
placement::~placement() {
  if (active_) detail::pop_placement();
}
}  // namespace scope


}  // namespace jobflow
