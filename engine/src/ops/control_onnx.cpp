// ONNX rows of If, Loop and Scan (ops/control.cpp) (registry.h).
//
// A condition known at load time (a constant, or folded from shapes known
// when the model loads: torchvision's numel checks) takes its branch: the
// branch's nodes are imported in place, as if the model had only them. A
// condition computed when the job runs makes each branch a predict job of
// its own (the values it reads from the outer graph become its
// placeholders, outer constants stay constants), and an if_else node runs
// one of them per call. A Loop's or Scan's body is such a job too, taking
// its formal inputs (iteration, condition, carried values; states and
// slices) before the outer values, run once per iteration.
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
  const GraphProto* outer = S.graph;
  S.graph = &g;  // its own declarations first (Importer::declared_rank)
  for (const auto& t : g.initializer()) {
    Value v;
    v.konst = read_tensor(t, S.base_dir_, S.opts_.max_tensor_bytes, "initializer '" + t.name() + "'", t.name(),
                          /*strings=*/true);
    v.type = proto_type(t);
    S.values[t.name()] = v;
  }
  try {
    for (int k = 0; k < g.node_size(); ++k) S.run_node(g.node(k), k);
  } catch (...) {
    S.graph = outer;
    throw;
  }
  S.graph = outer;
  std::vector<Value> outs;
  for (const auto& o : g.output()) outs.push_back(S.value(o.name()));
  return outs;
}

// A subgraph as a predict job of its own: its formal inputs (g.input(), with
// the specs `formal`) then the outer values `fed` (their blobs `fed_blobs`)
// are its placeholders; the other outer values it reads (`names`) that are
// constants stay constants. The importer's node is restored afterwards.
// Sequences and optionals keep their SeqType across the boundary: a formal
// input's is `formal_types[k]` (when given) or the subgraph's declared one,
// an outer value's its own; `out_types` receives those of the outputs.
std::shared_ptr<CompiledJob> body_job(Importer& I, const GraphProto& g, const std::string& job_name,
                                      const std::vector<TensorSpec>& formal, const std::vector<std::string>& names,
                                      const std::vector<std::string>& fed, const std::vector<Blob>& fed_blobs,
                                      const std::vector<SeqType>& formal_types = {},
                                      std::vector<SeqType>* out_types = nullptr) {
  const NodeProto* node = I.node;
  const int node_index = I.node_index;
  if (static_cast<size_t>(g.input_size()) != formal.size())
    I.err("the subgraph '" + g.name() + "' has " + std::to_string(g.input_size()) + " inputs, " +
          std::to_string(formal.size()) + " are given");
  std::vector<PlaceholderSpec> specs;
  for (size_t k = 0; k < formal.size(); ++k)
    specs.push_back(Numpy::Placeholder(formal[k].shape, formal[k].dtype, "in" + std::to_string(specs.size())));
  for (size_t k = 0; k < fed.size(); ++k)
    specs.push_back(Numpy::Placeholder(fed_blobs[k].shape(), fed_blobs[k].dtype(), "in" + std::to_string(specs.size())));
  FunctionConfig cfg;
  cfg.name(job_name);
  detail::JobBuilder B(JobType::Predict, cfg, specs);
  Importer S(I.file_, I.opts_, I.model_, I.base_dir_);
  S.opset = I.opset;
  S.inspect_mode = I.inspect_mode;
  for (const auto& n : names) {
    const Value& v = I.value(n);
    if (v.konst.defined()) {
      Value c;
      c.konst = v.konst;
      c.type = v.type;
      S.values[n] = c;
    }
  }
  std::vector<Blob> outs;
  if (out_types) out_types->clear();
  B.enter();
  try {
    for (size_t k = 0; k < formal.size(); ++k) {
      const auto& gi = g.input(static_cast<int>(k));
      Value& v = S.values[gi.name()];
      v.blob = B.input(static_cast<int>(k));
      v.type = k < formal_types.size() && !formal_types[k].is_tensor()
                   ? formal_types[k]
                   : seq_type_of(gi.type(), "subgraph input '" + gi.name() + "'", "non-tensor input");
    }
    for (size_t k = 0; k < fed.size(); ++k) {
      Value& v = S.values[fed[k]];
      v.blob = B.input(static_cast<int>(formal.size() + k));
      v.type = I.value(fed[k]).type;
    }
    for (Value& v : run_branch(S, g)) {
      if (v.blob.defined()) outs.push_back(v.blob);
      else outs.push_back(constant(v.konst));
      if (out_types) out_types->push_back(v.type);
    }
    // Every output a node of its own in the body's graph (a body that
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
}

// The values a subgraph reads from outside, split into those computed in
// the graph (`fed`, with their blobs: the body's extra placeholders) and
// constants (`names` holds both).
void outer_values(Importer& I, const std::vector<const GraphProto*>& gs, std::vector<std::string>& names,
                  std::vector<std::string>& fed, std::vector<Blob>& fed_blobs) {
  std::set<std::string> seen;
  for (const GraphProto* g : gs) outer_names(*g, {}, names, seen);
  for (const auto& n : names) {
    Value& v = I.value(n);
    if (v.konst.defined()) continue;
    fed.push_back(n);
    fed_blobs.push_back(I.blob_of(n));
  }
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
  std::vector<std::string> names, fed;
  std::vector<Blob> fed_blobs;
  outer_values(I, {&then_g, &else_g}, names, fed, fed_blobs);
  const std::string label = node_label(*node, node_index);
  std::vector<SeqType> then_types, else_types;
  std::shared_ptr<CompiledJob> then_job = body_job(I, then_g, label + "/then", {}, names, fed, fed_blobs, {}, &then_types);
  std::shared_ptr<CompiledJob> else_job = body_job(I, else_g, label + "/else", {}, names, fed, fed_blobs, {}, &else_types);
  for (size_t k = 0; k < then_types.size() && k < else_types.size(); ++k)
    if (then_types[k].kind != else_types[k].kind || then_types[k].elem != else_types[k].elem)
      I.err("output " + std::to_string(k) + " is a " + then_types[k].str() + " in then_branch and a " +
            else_types[k].str() + " in else_branch");
  std::vector<Blob> ys;
  try {
    ys = if_else(cond, fed_blobs, then_job, else_job);
  } catch (const Error& e) {
    I.err(e.what());
  }
  for (int i = 0; i < node->output_size(); ++i) {
    SeqType t = then_types[static_cast<size_t>(i)];
    if (t.is_tensor()) {
      I.out(i, ys[static_cast<size_t>(i)]);
      continue;
    }
    if (t.rank != else_types[static_cast<size_t>(i)].rank) t.rank = -1;
    I.out_seq(i, ys[static_cast<size_t>(i)], t);
  }
}


// The body of a Loop or Scan, built until the specs of its carried values
// (states) are a fixed point: a dim whose size the body changes from one
// iteration to the next becomes kDynamic in its placeholder (at most one
// rebuild per dim). `carried_out` is the index of the first carried output.
std::shared_ptr<CompiledJob> loop_body_job(Importer& I, const GraphProto& g, const std::string& job_name,
                                           std::vector<TensorSpec> formal, size_t carried_in, size_t carried_out,
                                           size_t carried, const std::vector<std::string>& names,
                                           const std::vector<std::string>& fed, const std::vector<Blob>& fed_blobs,
                                           std::vector<SeqType> formal_types = {},
                                           std::vector<SeqType>* out_types = nullptr) {
  std::vector<SeqType> outs;
  formal_types.resize(formal.size());
  for (int tries = 0;; ++tries) {
    std::shared_ptr<CompiledJob> job = body_job(I, g, job_name, formal, names, fed, fed_blobs, formal_types, &outs);
    const Signature& sig = job->signature();
    if (sig.outputs.size() < carried_out + carried)
      I.err("the body returns " + std::to_string(sig.outputs.size()) + " values, fewer than its " +
            std::to_string(carried) + " carried ones need");
    if (out_types) {
      *out_types = outs;
      // A carried optional stays one (the body may return its value: a
      // trip count of 0 returns what entered, none included).
      for (size_t j = 0; j < carried; ++j)
        if (formal_types[carried_in + j].optional()) {
          SeqType& t = (*out_types)[carried_out + j];
          t.kind = formal_types[carried_in + j].kind;
          if (t.rank != formal_types[carried_in + j].rank) t.rank = -1;
        }
    }
    bool changed = false;
    for (size_t j = 0; j < carried; ++j) {
      // A carried sequence: the same kind and items' dtype; a rank the body
      // reveals (an empty sequence entering, filled by the body) is taken.
      SeqType& tin = formal_types[carried_in + j];
      const SeqType& tout = outs[carried_out + j];
      // (An optional sequence may come back as a sequence: the same bytes.)
      const bool same_kind = tin.kind == tout.kind || (tin.kind == SeqType::Kind::OptionalSequence &&
                                                       tout.kind == SeqType::Kind::Sequence);
      if (!same_kind || (!tin.is_tensor() && tin.elem != tout.elem))
        I.err("the body returns a " + tout.str() + " for carried value " + std::to_string(j) + " ('" +
              g.input(static_cast<int>(carried_in + j)).name() + "'), which enters as a " + tin.str());
      // An empty sequence entering takes the rank the body gives its items;
      // a rank the body changes becomes unknown.
      if (!tin.is_tensor() && tin.fresh && tout.rank >= 0) {
        tin.rank = tout.rank;
        tin.fresh = false;
        changed = true;
      } else if (!tin.is_tensor() && tin.rank >= 0 && tout.rank != tin.rank) {
        tin.rank = -1;
        tin.fresh = false;
        changed = true;
      }
      TensorSpec& in = formal[carried_in + j];
      const TensorSpec& out = sig.outputs[carried_out + j];
      if (out.dtype != in.dtype || out.shape.size() != in.shape.size())
        I.err("the body returns " + spec_str(out) + " for carried value " + std::to_string(j) + " ('" +
              g.input(static_cast<int>(carried_in + j)).name() + "'), which enters as " + spec_str(in) +
              ": dtype and rank must stay");
      for (size_t d = 0; d < in.shape.size(); ++d)
        if (in.shape[d] >= 0 && out.shape[d] != in.shape[d]) {
          in.shape[d] = kDynamic;
          changed = true;
        }
    }
    if (!changed) return job;
    if (tries > kMaxImportRank * static_cast<int>(carried)) I.err("the body's carried shapes do not settle");
  }
}

const GraphProto& body_graph(Importer& I) { return branch_graph(I, "body"); }

void op_loop(Importer& I) {
  const GraphProto& body = body_graph(I);
  const NodeProto* node = I.node;
  const int node_index = I.node_index;
  if (I.nin() < 2) I.err("needs the inputs M and cond (each may be empty)");
  const size_t carried = static_cast<size_t>(I.nin() - 2);
  if (static_cast<size_t>(body.input_size()) != 2 + carried)
    I.err("the body has " + std::to_string(body.input_size()) + " inputs; the node's " + std::to_string(carried) +
          " carried values need " + std::to_string(2 + carried) + " (iteration, condition, carried)");
  if (static_cast<size_t>(body.output_size()) < 1 + carried ||
      static_cast<size_t>(node->output_size()) != carried + (static_cast<size_t>(body.output_size()) - 1 - carried))
    I.err("the body has " + std::to_string(body.output_size()) + " outputs and the node " +
          std::to_string(node->output_size()) + ": the body returns the condition, the " + std::to_string(carried) +
          " carried values and the scan outputs, the node the carried values and the scan outputs");
  Blob max_trips, cond;
  if (I.has(0)) {
    max_trips = I.in(0);
    if (max_trips.dtype() != DType::Int64) I.err("M must be int64, got " + spec_str(max_trips.spec()));
  }
  if (I.has(1)) {
    cond = I.in(1);
    if (cond.dtype() != DType::Bool) I.err("cond must be bool, got " + spec_str(cond.spec()));
  }
  if (!max_trips.defined() && !cond.defined()) I.unsupported("Loop(without M and cond: it never ends)");
  std::vector<TensorSpec> formal{{{}, DType::Int64}, {{}, DType::Bool}};
  std::vector<SeqType> formal_types(2);
  std::vector<Blob> init;
  for (size_t j = 0; j < carried; ++j) {
    const int i = static_cast<int>(2 + j);
    if (!I.has(i)) I.err("carried value " + std::to_string(j) + " is empty");
    init.push_back(I.in(i));
    formal.push_back(init.back().spec());
    formal_types.push_back(I.type_of(i));
  }
  std::vector<std::string> names, fed;
  std::vector<Blob> fed_blobs;
  outer_values(I, {&body}, names, fed, fed_blobs);
  std::vector<SeqType> out_types;
  auto job = loop_body_job(I, body, node_label(*node, node_index) + "/body", formal, 2, 1, carried, names, fed,
                           fed_blobs, formal_types, &out_types);
  for (size_t k = 1 + carried; k < out_types.size(); ++k)
    if (!out_types[k].is_tensor())
      I.unsupported(out_types[k].is_strings() ? "Loop(scan output of strings)" : "Loop(scan output of sequences)");
  const TensorSpec& c = job->signature().outputs[0];
  if (c.dtype != DType::Bool || (is_static(c.shape) && numel(c.shape) != 1))
    I.err("the body's condition output must be one bool, got " + spec_str(c));
  std::vector<Blob> ys;
  try {
    ys = loop(max_trips, cond, init, fed_blobs, job);
  } catch (const Error& e) {
    I.err(e.what());
  }
  for (int i = 0; i < node->output_size(); ++i) {
    const SeqType& t = static_cast<size_t>(i) < carried ? out_types[1 + static_cast<size_t>(i)] : SeqType();
    if (t.is_tensor()) I.out(i, ys[static_cast<size_t>(i)]);
    else I.out_seq(i, ys[static_cast<size_t>(i)], t);
  }
}

// Scan (opset 9 on: states then scanned inputs). Opset 8's form (an
// optional sequence_lens first, a batch axis 0 on every input and output)
// runs one scan per batch item (a batch known at load, no sequence_lens).
void op_scan(Importer& I) {
  const GraphProto& body = body_graph(I);
  const NodeProto* node = I.node;
  const int node_index = I.node_index;
  const bool v8 = I.opset < 9;
  const int first = v8 ? 1 : 0;
  if (v8 && I.has(0)) I.unsupported("Scan(sequence_lens)");
  const int64_t m = I.attr_i("num_scan_inputs", -1);
  const int64_t n_in = I.nin() - first;
  if (m < 1 || m > n_in) I.err("num_scan_inputs " + std::to_string(m) + " is not in 1.." + std::to_string(n_in));
  const size_t states = static_cast<size_t>(n_in - m), scanned = static_cast<size_t>(m);
  if (static_cast<size_t>(node->output_size()) < states || body.output_size() != node->output_size() ||
      static_cast<size_t>(body.input_size()) != states + scanned)
    I.err("the body has " + std::to_string(body.input_size()) + " inputs and " + std::to_string(body.output_size()) +
          " outputs; the node " + std::to_string(states) + " states, " + std::to_string(scanned) +
          " scanned inputs and " + std::to_string(node->output_size()) + " outputs");
  const size_t outs = static_cast<size_t>(node->output_size()) - states;
  ScanOptions o;
  auto dirs = [](const std::vector<int64_t>& v) {
    std::vector<bool> r;
    for (int64_t d : v) r.push_back(d != 0);
    return r;
  };
  if (v8) {
    o.input_reverse = dirs(I.attr_ints("directions", {}));
  } else {
    o.input_axes = I.attr_ints("scan_input_axes", {});
    o.input_reverse = dirs(I.attr_ints("scan_input_directions", {}));
    o.output_axes = I.attr_ints("scan_output_axes", {});
    o.output_reverse = dirs(I.attr_ints("scan_output_directions", {}));
  }
  auto sized = [&](size_t got, size_t want, const char* what) {
    if (got != 0 && got != want)
      I.err(std::string(what) + " has " + std::to_string(got) + " values for " + std::to_string(want));
  };
  sized(o.input_axes.size(), scanned, "scan_input_axes");
  sized(o.input_reverse.size(), scanned, v8 ? "directions" : "scan_input_directions");
  sized(o.output_axes.size(), outs, "scan_output_axes");
  sized(o.output_reverse.size(), outs, "scan_output_directions");
  std::vector<Blob> ins;
  for (int i = first; i < I.nin(); ++i) {
    if (!I.has(i)) I.err("input " + std::to_string(i) + " is empty");
    ins.push_back(I.in(i));
  }
  int64_t batch = 1;
  if (v8) {  // one scan per batch item: drop axis 0 here, stack it back below
    for (const Blob& b : ins) {
      if (b.ndim() < 1 || b.shape()[0] < 0) I.unsupported("Scan(opset 8, a batch known per call)");
      if (b.shape()[0] != ins[0].shape()[0])
        I.err("the inputs' batch dims differ: " + shape_str(b.shape()) + " and " + shape_str(ins[0].shape()));
    }
    batch = ins[0].shape()[0];
  }
  auto item = [&](const Blob& b, int64_t k) {
    Shape s = b.shape();
    s.erase(s.begin());
    return reshape(slice(b, {k}, {k + 1}, {0}), s);
  };
  std::vector<TensorSpec> formal;
  for (size_t j = 0; j < states + scanned; ++j) {
    TensorSpec s = ins[j].spec();
    if (v8) s.shape.erase(s.shape.begin());
    if (j >= states) {
      const size_t k = j - states;
      const int64_t a = k < o.input_axes.size() ? o.input_axes[k] : 0;
      s.shape.erase(s.shape.begin() + I.axis_of(a, static_cast<int64_t>(s.shape.size())));
    }
    formal.push_back(s);
  }
  std::vector<std::string> names, fed;
  std::vector<Blob> fed_blobs;
  outer_values(I, {&body}, names, fed, fed_blobs);
  std::vector<SeqType> scan_types;
  auto job = loop_body_job(I, body, node_label(*node, node_index) + "/body", formal, 0, 0, states, names, fed,
                           fed_blobs, {}, &scan_types);
  for (const SeqType& t : scan_types)
    if (!t.is_tensor()) I.unsupported(t.is_strings() ? "Scan(strings)" : "Scan(sequences)");
  std::vector<std::vector<Blob>> per_item;
  try {
    for (int64_t k = 0; k < batch; ++k) {
      std::vector<Blob> st, sc;
      for (size_t j = 0; j < states + scanned; ++j) (j < states ? st : sc).push_back(v8 ? item(ins[j], k) : ins[j]);
      per_item.push_back(scan(st, sc, fed_blobs, job, o));
    }
  } catch (const Error& e) {
    I.err(e.what());
  }
  for (int i = 0; i < node->output_size(); ++i) {
    if (!v8) {
      I.out(i, per_item[0][static_cast<size_t>(i)]);
      continue;
    }
    std::vector<Blob> parts;
    for (auto& ys : per_item) parts.push_back(unsqueeze(ys[static_cast<size_t>(i)], {0}));
    I.out(i, parts.size() == 1 ? identity(parts[0]) : concat(parts, 0));
  }
}

// ---- export ----

// A body job's graph as an ONNX subgraph named `prefix`: its first `formal`
// inputs stay the subgraph's inputs, the others are renamed to `outer` (the
// node's inputs, read by their outer-scope names), every other name gets
// the prefix so that names stay unique in the file.
::onnx::GraphProto subgraph(Exporter& E, const CompiledJob& job, const std::string& prefix, int formal,
                            const std::vector<std::string>& outer) {
  SaveOptions so;
  so.opset = E.opset();
  ::onnx::ModelProto m = Exporter(job, so).run("");
  ::onnx::GraphProto g = m.graph();
  if (g.input_size() != formal + static_cast<int>(outer.size()))
    E.no_form("the body '" + job.signature().job_name + "' has " + std::to_string(g.input_size()) + " inputs, not " +
              std::to_string(formal + outer.size()));
  std::map<std::string, std::string> rename;
  for (int k = formal; k < g.input_size(); ++k) rename[g.input(k).name()] = outer[static_cast<size_t>(k - formal)];
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
  g.mutable_input()->DeleteSubrange(formal, g.input_size() - formal);
  for (auto& i : *g.mutable_input()) fix(i.mutable_name());
  g.clear_value_info();
  g.set_name(prefix);
  return g;
}

void set_graph(NodeProto* n, const char* name, ::onnx::GraphProto g) {
  AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(AttributeProto::GRAPH);
  *a->mutable_g() = std::move(g);
}

std::vector<std::string> outputs_of(Exporter& E) {
  std::vector<std::string> o;
  for (size_t i = 0; i < E.num_outputs(); ++i) o.push_back(E.out(static_cast<int>(i)));
  return o;
}

// if_else -> If with each branch job's graph as a subgraph reading the If
// node's inputs by their outer names.
void export_if(Exporter& E) {
  NodeProto* n = E.add("If", {E.in(0)}, outputs_of(E), E.name());
  std::vector<std::string> outer;
  for (size_t k = 1; k < E.num_inputs(); ++k) outer.push_back(E.in(static_cast<int>(k)));
  for (const bool then : {true, false}) {
    const CompiledJob* job = internal::if_branch(E.op(), then);
    if (!job) E.no_form("not an if_else node");
    set_graph(n, then ? "then_branch" : "else_branch", subgraph(E, *job, E.name() + (then ? "/then/" : "/else/"), 0, outer));
  }
}

// loop -> Loop (M and cond empty where the node has none); its body reads
// the node's other inputs by their outer names.
void export_loop(Exporter& E) {
  bool has_max = false, has_cond = false;
  const CompiledJob* job = internal::loop_body(E.op(), &has_max, &has_cond);
  if (!job) E.no_form("not a loop node");
  const size_t lead = static_cast<size_t>(has_max) + has_cond;
  const size_t carried = static_cast<size_t>(E.op().attr_int("carried"));
  std::vector<std::string> ins{has_max ? E.in(0) : "", has_cond ? E.in(static_cast<int>(has_max)) : ""};
  std::vector<std::string> outer;
  for (size_t k = lead; k < E.num_inputs(); ++k) (k < lead + carried ? ins : outer).push_back(E.in(static_cast<int>(k)));
  NodeProto* n = E.add("Loop", ins, outputs_of(E), E.name());
  set_graph(n, "body", subgraph(E, *job, E.name() + "/body/", static_cast<int>(2 + carried), outer));
}

// scan -> Scan (opset 9 on) with its axes and directions.
void export_scan(Exporter& E) {
  ScanOptions o;
  const CompiledJob* job = internal::scan_body(E.op(), &o);
  if (!job) E.no_form("not a scan node");
  const size_t states = static_cast<size_t>(E.op().attr_int("states")), scanned = static_cast<size_t>(E.op().attr_int("scanned"));
  std::vector<std::string> ins, outer;
  for (size_t k = 0; k < E.num_inputs(); ++k) (k < states + scanned ? ins : outer).push_back(E.in(static_cast<int>(k)));
  NodeProto* n = E.add("Scan", ins, outputs_of(E), E.name());
  Exporter::set_int(n, "num_scan_inputs", static_cast<int64_t>(scanned));
  auto ints = [](const std::vector<bool>& v) { return std::vector<int64_t>(v.begin(), v.end()); };
  if (!o.input_axes.empty()) Exporter::set_ints(n, "scan_input_axes", o.input_axes);
  if (!o.input_reverse.empty()) Exporter::set_ints(n, "scan_input_directions", ints(o.input_reverse));
  if (!o.output_axes.empty()) Exporter::set_ints(n, "scan_output_axes", o.output_axes);
  if (!o.output_reverse.empty()) Exporter::set_ints(n, "scan_output_directions", ints(o.output_reverse));
  set_graph(n, "body", subgraph(E, *job, E.name() + "/body/", static_cast<int>(states + scanned), outer));
}

}  // namespace

void control_onnx_rows(OpRows& r) {
  r.import_op("If", op_if).takes_sequences();
  r.import_op("Loop", op_loop).takes_sequences();
  r.import_op("Scan", op_scan);
  r.export_op(OpKind::If, export_if);
  r.export_op(OpKind::Loop, export_loop);
  r.export_op(OpKind::Scan, export_scan);
}

}  // namespace jobflow::onnx
