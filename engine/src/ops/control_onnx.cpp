// ONNX rows of If (ops/control.cpp) (registry.h).
//
// A condition known at load time (a constant, or folded from shapes known
// when the model loads: torchvision's numel checks) takes its branch: the
// branch's nodes are imported in place, as if the model had only them. A
// condition computed when the job runs makes each branch a predict job of
// its own (the values it reads from the outer graph become its
// placeholders, outer constants stay constants), and an if_else node runs
// one of them per call.
#include <functional>
#include <set>

#include "jobflow/job.h"
#include "jobflow/runtime.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "onnx/onnx_util.h"
#include "ops_internal.h"

namespace jobflow::onnx {
namespace {

const GraphProto& branch_graph(Importer& I, const char* name) {
  for (const auto& a : I.node->attribute())
    if (a.name() == name) {
      if (a.type() != AttributeProto::GRAPH && !a.has_g()) I.err(std::string("attribute '") + name + "' must be a graph");
      return a.g();
    }
  I.err(std::string("attribute '") + name + "' is required");
}

// The names a graph reads from enclosing scopes (its own nested subgraphs
// included), in first-use order.
void outer_names(const GraphProto& g, std::set<std::string> defined, std::vector<std::string>& out,
                 std::set<std::string>& seen) {
  for (const auto& t : g.initializer()) defined.insert(t.name());
  for (const auto& i : g.input()) defined.insert(i.name());
  auto use = [&](const std::string& n) {
    if (!n.empty() && !defined.count(n) && seen.insert(n).second) out.push_back(n);
  };
  for (const auto& n : g.node()) {
    for (const auto& in : n.input()) use(in);
    for (const auto& a : n.attribute()) {
      std::vector<const GraphProto*> subs;
      if (a.has_g()) subs.push_back(&a.g());
      for (const auto& sg : a.graphs()) subs.push_back(&sg);
      for (const GraphProto* sg : subs) {
        std::vector<std::string> inner;
        std::set<std::string> inner_seen;
        outer_names(*sg, defined, inner, inner_seen);
        for (const auto& nm : inner) use(nm);
      }
    }
    for (const auto& o : n.output()) defined.insert(o);
  }
  for (const auto& o : g.output()) use(o.name());
}

// The branch's initializers and nodes run by `S`; its outputs' values.
std::vector<Value> run_branch(Importer& S, const GraphProto& g) {
  for (const auto& t : g.initializer()) {
    Value v;
    v.konst = read_tensor(t, S.base_dir_, S.opts_.max_tensor_bytes, "initializer '" + t.name() + "'", t.name());
    S.values[t.name()] = v;
  }
  for (int k = 0; k < g.node_size(); ++k) S.run_node(g.node(k), k);
  std::vector<Value> outs;
  for (const auto& o : g.output()) outs.push_back(S.value(o.name()));
  return outs;
}

void op_if(Importer& I) {
  const GraphProto& then_g = branch_graph(I, "then_branch");
  const GraphProto& else_g = branch_graph(I, "else_branch");
  const NodeProto* node = I.node;
  const int node_index = I.node_index;
  if (then_g.output_size() != node->output_size() || else_g.output_size() != node->output_size())
    I.err("the branches have " + std::to_string(then_g.output_size()) + " and " +
          std::to_string(else_g.output_size()) + " outputs, the node " + std::to_string(node->output_size()));
  if (I.is_const(0)) {
    // Known now: import the branch taken in place.
    const Tensor c = I.cin(0);
    if (c.numel() != 1) I.err("the condition must hold one value, got " + shape_str(c.shape()));
    const GraphProto& g = c.at(0) != 0.0 ? then_g : else_g;
    std::vector<Value> outs = run_branch(I, g);
    I.node = node;
    I.node_index = node_index;
    for (int i = 0; i < node->output_size(); ++i)
      if (!node->output(i).empty()) I.values[node->output(i)] = outs[static_cast<size_t>(i)];
    return;
  }
  Blob cond = I.in(0);
  // The values both branches read from outside: blobs become the branch
  // jobs' placeholders (the same list for both), constants stay constants.
  std::vector<std::string> names;
  std::set<std::string> seen;
  outer_names(then_g, {}, names, seen);
  outer_names(else_g, {}, names, seen);
  std::vector<std::string> fed;
  std::vector<Blob> fed_blobs;
  for (const auto& n : names) {
    Value& v = I.value(n);
    if (v.konst.defined()) continue;
    fed.push_back(n);
    fed_blobs.push_back(I.blob_of(n));
  }
  auto build = [&](const GraphProto& g, const char* which) {
    std::vector<PlaceholderSpec> specs;
    for (size_t k = 0; k < fed.size(); ++k)
      specs.push_back(Numpy::Placeholder(fed_blobs[k].shape(), fed_blobs[k].dtype(), "in" + std::to_string(k)));
    FunctionConfig cfg;
    cfg.name(node_label(*node, node_index) + "/" + which);
    detail::JobBuilder B(JobType::Predict, cfg, specs);
    Importer S(I.file_, I.opts_, I.model_, I.base_dir_);
    S.opset = I.opset;
    S.inspect_mode = I.inspect_mode;
    for (const auto& n : names) {
      const Value& v = I.value(n);
      if (v.konst.defined()) {
        Value c;
        c.konst = v.konst;
        S.values[n] = c;
      }
    }
    std::vector<Blob> outs;
    B.enter();
    try {
      for (size_t k = 0; k < fed.size(); ++k) S.values[fed[k]].blob = B.input(static_cast<int>(k));
      for (Value& v : run_branch(S, g)) {
        if (v.blob.defined()) outs.push_back(v.blob);
        else outs.push_back(constant(v.konst));
      }
      // Every output a node of its own in the branch's graph (a branch that
      // returns its input unchanged).
      for (Blob& b : outs) b = identity(b);
    } catch (...) {
      B.leave();
      I.node = node;
      I.node_index = node_index;
      throw;
    }
    B.leave();
    I.node = node;
    I.node_index = node_index;
    Structure st;
    st.kind = Structure::Kind::Tuple;
    for (size_t k = 0; k < outs.size(); ++k) {
      Structure c;
      c.kind = Structure::Kind::Leaf;
      c.index = static_cast<int>(k);
      st.children.push_back(c);
    }
    std::vector<std::string> out_names;
    for (const auto& o : g.output()) out_names.push_back(o.name());
    return B.finish(outs, st, false, out_names);
  };
  std::shared_ptr<CompiledJob> then_job = build(then_g, "then"), else_job = build(else_g, "else");
  std::vector<Blob> ys;
  try {
    ys = if_else(cond, fed_blobs, then_job, else_job);
  } catch (const Error& e) {
    I.err(e.what());
  }
  for (int i = 0; i < node->output_size(); ++i) I.out(i, ys[static_cast<size_t>(i)]);
}

// ---- export ----

// if_else -> If with each branch job's graph as a subgraph: its
// placeholders renamed to the If node's inputs (outer-scope names), every
// other name prefixed with the node's, so the names stay unique in the file.
void export_if(Exporter& E) {
  NodeProto* n = E.add("If", {E.in(0)}, [&] {
    std::vector<std::string> o;
    for (size_t i = 0; i < E.num_outputs(); ++i) o.push_back(E.out(static_cast<int>(i)));
    return o;
  }(), E.name());
  for (const bool then : {true, false}) {
    const CompiledJob* job = internal::if_branch(E.op(), then);
    if (!job) E.no_form("not an if_else node");
    SaveOptions so;
    so.opset = E.opset();
    ::onnx::ModelProto m = Exporter(*job, so).run("");
    ::onnx::GraphProto g = m.graph();
    const std::string prefix = E.name() + (then ? "/then/" : "/else/");
    std::map<std::string, std::string> rename;
    for (int k = 0; k < g.input_size(); ++k) rename[g.input(k).name()] = E.in(k + 1);
    auto fix = [&](std::string* s) {
      if (s->empty()) return;
      auto it = rename.find(*s);
      *s = it != rename.end() ? it->second : prefix + *s;
    };
    for (auto& t : *g.mutable_initializer()) fix(t.mutable_name());
    for (auto& nd : *g.mutable_node()) {
      for (auto& s : *nd.mutable_input()) fix(&s);
      for (auto& s : *nd.mutable_output()) fix(&s);
      if (!nd.name().empty()) nd.set_name(prefix + nd.name());
    }
    for (auto& o : *g.mutable_output()) fix(o.mutable_name());
    g.clear_input();
    g.clear_value_info();
    g.set_name(prefix);
    AttributeProto* a = n->add_attribute();
    a->set_name(then ? "then_branch" : "else_branch");
    a->set_type(AttributeProto::GRAPH);
    *a->mutable_g() = std::move(g);
  }
}

}  // namespace

void control_onnx_rows(OpRows& r) {
  r.import_op("If", op_if);
  r.export_op(OpKind::If, export_if);
}

}  // namespace jobflow::onnx
