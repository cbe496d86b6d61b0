// A job's Program and its plan cache.
//
// A static job has one Plan, compiled at definition. A job with dynamic dims
// (or an op whose output shape depends on values) compiles a Plan on the
// first call with each new combination of input shapes: specialize()
// (specialize.cpp) makes the graph concrete and folds shape arithmetic,
// then Plan::compile runs the other passes. Plans are kept in an LRU cache
// bounded by count and by the sum of their arenas; an evicted plan frees its
// arena (once no call uses it). Variables are bound by reference, so every
// plan of a job shares the weights.
//
// A data-dependent op whose inputs are not known while specializing cuts
// the call into segments: the plan of the nodes before it runs, then the op
// itself (its output sized by infer_data() on the real values), then the
// rest of the graph, specialized with that size through the same cache (its
// key extends the first segment's with the op's output shapes).
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <list>
#include <set>
#include <sstream>
#include <unordered_map>

#include "compiler.h"
#include "compiler/passes.h"
#include "jobflow/backend.h"
#include "state_ops.h"

namespace jobflow {
namespace {

// One cached compilation: the plan of a segment of the graph.
struct Segment {
  std::shared_ptr<Plan> plan;
  std::vector<int> in_blobs;   // program blob ids feeding the plan's inputs, in order
  std::vector<int> out_blobs;  // program blob ids of the plan's outputs, in order
  compiler::Specialized spec;  // the specialized graph (for continuing after the cut)
  int cut = -1;                // the data-dependent node after this segment; -1: the last segment
  size_t bytes = 0;            // the plan's arena
  std::string key;
};

void append_shape(std::string& key, const Shape& s) {
  for (int64_t d : s) {
    key += std::to_string(d);
    key += ',';
  }
  key += ';';
}

std::string variant_of(const std::vector<std::string>& names, const std::vector<Shape>& shapes) {
  std::string v = "at ";
  for (size_t i = 0; i < shapes.size(); ++i) v += (i ? ", " : "") + names[i] + "=" + shape_str(shapes[i]);
  return v;
}

}  // namespace

struct Program::Dynamic {
  std::shared_ptr<Graph> graph;
  std::vector<int> inputs, outputs, updates;
  PlanOptions opts;
  PlanCacheLimits limits;
  std::vector<std::string> input_names;
  std::list<std::shared_ptr<Segment>> lru;  // most recently used first
  std::unordered_map<std::string, std::list<std::shared_ptr<Segment>>::iterator> index;
  size_t bytes = 0;
  PlanCacheStats stats;
  int64_t calls = 0;
  std::shared_ptr<Plan> last;  // the plan of the latest call's last segment
  bool profile = false;

  std::shared_ptr<Segment> find(const std::string& key) {
    auto it = index.find(key);
    if (it == index.end()) {
      ++stats.misses;
      return nullptr;
    }
    ++stats.hits;
    lru.splice(lru.begin(), lru, it->second);
    return *it->second;
  }

  void insert(const std::shared_ptr<Segment>& s) {
    lru.push_front(s);
    index[s->key] = lru.begin();
    bytes += s->bytes;
    // Evict the least recently used beyond the limits, never the new one.
    while (lru.size() > 1 && (lru.size() > limits.max_plans || bytes > limits.max_bytes)) {
      const std::shared_ptr<Segment>& old = lru.back();
      bytes -= old->bytes;
      index.erase(old->key);
      lru.pop_back();
      ++stats.evictions;
    }
    stats.plans = lru.size();
    stats.bytes = bytes;
  }

  // Compiles the segment of `sp` that starts at node `start`, reading
  // `in_blobs` (the placeholders of the first segment; else every value an
  // earlier segment or a cut op made that this one reads).
  std::shared_ptr<Segment> compile(compiler::Specialized sp, const std::string& key, const std::string& variant) {
    const auto t0 = std::chrono::steady_clock::now();
    auto seg = std::make_shared<Segment>();
    seg->key = key;
    seg->cut = sp.cut;
    const Graph& G = *sp.graph;
    const int N = static_cast<int>(G.nodes.size());
    const int start = sp.start, end = sp.cut < 0 ? N : sp.cut;
    auto producer = [&](int b) { return G.blobs[b].producer; };
    auto is_variable = [&](int b) {
      return producer(b) >= 0 && G.nodes[producer(b)].op->kind() == OpKind::Variable;
    };
    // Inputs: the first segment's are the job's placeholders; a later one's
    // every blob it reads that an earlier segment, a cut op or a placeholder
    // made (not variables, not values folded while specializing).
    std::vector<int> in_blobs;
    if (start == 0) {
      in_blobs = inputs;
    } else {
      std::set<int> seen;
      for (int n = start; n < end; ++n)
        for (int b : G.nodes[n].inputs)
          if (producer(b) < start && !is_variable(b) && !sp.known.count(b) && seen.insert(b).second) in_blobs.push_back(b);
    }
    // Outputs: the job's returns made here, and what later nodes read.
    std::vector<int> out_blobs;
    if (sp.cut < 0 && start == 0) {
      out_blobs = outputs;  // the whole job: the plan returns what the job returns
    } else {
      std::set<int> seen;
      for (int o : outputs) {
        const int p = producer(o);
        if (p >= start && p < end && G.nodes[p].op->kind() != OpKind::Placeholder && seen.insert(o).second)
          out_blobs.push_back(o);
      }
      if (sp.cut >= 0)
        for (int n = sp.cut; n < N; ++n)
          for (int b : G.nodes[n].inputs) {
            const int p = producer(b);
            if (p >= start && p < end && !is_variable(b) && !sp.known.count(b) &&
                G.nodes[p].op->kind() != OpKind::Placeholder && seen.insert(b).second)
              out_blobs.push_back(b);
          }
    }
    compiler::PlanBuild b;
    b.graph = std::make_shared<Graph>(G);  // the passes rewrite their graph
    b.opts = opts;
    b.opts.variant = variant;
    b.constants = sp.known;
    b.node_limit = sp.cut;
    b.outputs = out_blobs;
    if (sp.cut < 0 && start == 0) b.updates = updates;
    if (start == 0) {
      b.inputs = in_blobs;
    } else {
      // The values made before this segment come in as placeholders.
      Graph& g = *b.graph;
      std::map<int, int> moved;
      for (size_t i = 0; i < in_blobs.size(); ++i) {
        const int old = in_blobs[i];
        auto op = std::make_shared<internal::PlaceholderOp>(static_cast<int>(i), g.blobs[old].spec,
                                                            g.blobs[old].name);
        Node n;
        n.name = g.blobs[old].name;
        n.op = op;
        const int id = static_cast<int>(g.blobs.size());
        BlobDesc d;
        d.spec = g.blobs[old].spec;
        d.producer = static_cast<int>(g.nodes.size());
        d.name = n.name;
        g.blobs.push_back(d);
        n.outputs = {id};
        g.nodes.push_back(std::move(n));
        moved[old] = id;
        b.inputs.push_back(id);
      }
      for (int n = start; n < N; ++n)
        for (int& in : g.nodes[n].inputs)
          if (auto it = moved.find(in); it != moved.end()) in = it->second;
      for (int& o : b.outputs)
        if (auto it = moved.find(o); it != moved.end()) o = it->second;
    }
    seg->plan = Plan::compile(b);
    seg->in_blobs = in_blobs;
    seg->out_blobs = out_blobs;
    seg->bytes = seg->plan->arena_bytes();
    seg->spec = std::move(sp);
    ++stats.compiles;
    stats.compile_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    insert(seg);
    return seg;
  }

  std::vector<Tensor> run(const std::vector<Tensor>& in, const std::function<void(const Plan&)>& before) {
    std::string key;
    for (const Tensor& t : in) append_shape(key, t.shape());
    std::shared_ptr<Segment> seg = find(key);
    if (!seg) {
      std::map<int, TensorSpec> given;
      std::vector<Shape> shapes;
      for (size_t i = 0; i < inputs.size(); ++i) {
        given[inputs[i]] = {in[i].shape(), in[i].dtype()};
        shapes.push_back(in[i].shape());
      }
      seg = compile(compiler::specialize(*graph, {}, 0, given), key, variant_of(input_names, shapes));
    }
    const int64_t call = calls;
    auto run_plan = [&](Segment& s, const std::vector<Tensor>& args) {
      if (opts.step_variable.empty()) s.plan->set_steps_run(call);
      last = s.plan;
      if (before) before(*s.plan);
      return s.plan->run(args);
    };
    if (seg->cut < 0) {  // one segment: the plan's inputs and outputs are the job's
      std::vector<Tensor> r = run_plan(*seg, in);
      ++calls;
      return r;
    }
    std::map<int, Tensor> vals;
    for (size_t i = 0; i < inputs.size(); ++i) vals[inputs[i]] = in[i];
    for (;;) {
      std::vector<Tensor> args;
      for (int b : seg->in_blobs) args.push_back(vals.at(b));
      std::vector<Tensor> outs = run_plan(*seg, args);
      for (size_t k = 0; k < outs.size(); ++k) vals[seg->out_blobs[k]] = std::move(outs[k]);
      if (seg->cut < 0) break;
      // The data-dependent op: its outputs sized from the values.
      const Graph& G = *seg->spec.graph;
      const Node& node = G.nodes[seg->cut];
      std::vector<Tensor> ins;
      std::vector<TensorSpec> specs;
      for (int b : node.inputs) {
        auto it = vals.find(b);
        auto kt = seg->spec.known.find(b);
        const int p = G.blobs[b].producer;
        if (it != vals.end()) ins.push_back(it->second);
        else if (kt != seg->spec.known.end()) ins.push_back(kt->second);
        else if (auto* v = dynamic_cast<const internal::VariableOp*>(G.nodes[p].op.get())) {
          internal::VariableStore::get().ensure_initialized(*v->entry());
          ins.push_back(v->entry()->value);
        } else {
          throw Error("[" + opts.job_name + "] internal: input of node '" + node.name + "' not computed");
        }
        specs.push_back({ins.back().shape(), ins.back().dtype()});
      }
      std::vector<TensorSpec> out_specs;
      std::vector<Tensor> res;
      ExecContext ctx;
      ctx.step = call;
      ctx.seed = opts.seed;
      try {
        if (node.op->sizes_outputs()) {  // its kernel makes its outputs (a branch run now)
          res = node.op->eval_sized(ins, ctx);
          for (const Tensor& t : res) out_specs.push_back({t.shape(), t.dtype()});
        } else {
          out_specs = node.op->infer_data(specs, ins);
        }
      } catch (const Error& e) {
        throw Error("[" + opts.job_name + "] node '" + node.name + "' (" + node.op->name() + "): " + e.what());
      }
      if (!node.op->sizes_outputs()) {
        for (const TensorSpec& s : out_specs) res.emplace_back(s.shape, s.dtype);
        backend_for(node.placement.device).eval(*node.op, ins, res, ctx);
      }
      std::map<int, TensorSpec> given;
      for (size_t k = 0; k < res.size(); ++k) {
        given[node.outputs[k]] = out_specs[k];
        append_shape(key += '|', out_specs[k].shape);
        vals[node.outputs[k]] = res[k];
      }
      std::shared_ptr<Segment> next = find(key);
      if (!next) {
        std::string variant = seg->plan->options().variant + ", after " + node.name;
        next = compile(compiler::specialize(G, seg->spec.known, seg->cut + 1, given), key, variant);
      }
      seg = next;
    }
    ++calls;
    std::vector<Tensor> r;
    for (int o : outputs) {
      auto it = vals.find(o);
      if (it == vals.end()) throw Error("[" + opts.job_name + "] internal: return value not computed");
      r.push_back(it->second);
    }
    return r;
  }

  std::string report() const {
    std::ostringstream o;
    o << "plan cache of job '" << opts.job_name << "': " << stats.hits << " hits, " << stats.misses << " misses, "
      << stats.compiles << " compiles (" << stats.compile_seconds * 1e3 << " ms), " << stats.evictions
      << " evictions, " << stats.plans << " plans held (" << stats.bytes << " bytes; limits " << limits.max_plans
      << " plans, " << limits.max_bytes << " bytes)\n";
    return o.str();
  }
};

// ---------------------------------------------------------------- Program

std::shared_ptr<Program> Program::of_plan(std::shared_ptr<Plan> plan) {
  std::shared_ptr<Program> p(new Program());
  p->static_ = std::move(plan);
  return p;
}

bool Program::needs_specialization(const Graph& g, const std::vector<int>& inputs) {
  for (int b : inputs)
    if (!is_static(g.blobs[b].spec.shape)) return true;
  for (const Node& n : g.nodes)
    if (n.op->output_shape_from_data()) return true;
  return false;
}

std::shared_ptr<Program> Program::dynamic(std::shared_ptr<Graph> g, std::vector<int> inputs, std::vector<int> outputs,
                                          std::vector<int> updates, PlanOptions opts, PlanCacheLimits limits) {
  if (limits.max_plans == 0) throw Error("[" + opts.job_name + "] plan_cache_size must be at least 1");
  if (opts.type == JobType::Train)
    for (const Node& n : g->nodes)
      if (n.op->output_shape_from_data())
        throw Error("[" + opts.job_name + "] train jobs cannot have ops whose output shape depends on values (node '" +
                    n.name + "', " + n.op->name() + ")");
  std::shared_ptr<Program> p(new Program());
  p->dyn_ = std::make_unique<Dynamic>();
  Dynamic& d = *p->dyn_;
  d.graph = std::move(g);
  d.inputs = std::move(inputs);
  d.outputs = std::move(outputs);
  d.updates = std::move(updates);
  d.opts = std::move(opts);
  d.limits = limits;
  for (int b : d.inputs) d.input_names.push_back(d.graph->blobs[b].name);
  d.stats.dynamic = true;
  const char* prof = std::getenv("JOBFLOW_PROFILE");
  d.profile = prof && *prof && std::string(prof) != "0";
  return p;
}

Program::~Program() {
  if (dyn_ && dyn_->profile && dyn_->calls > 0) std::cerr << dyn_->report();
}

std::vector<Tensor> Program::run(const std::vector<Tensor>& inputs, const std::function<void(const Plan&)>& before) {
  if (static_) {
    if (before) before(*static_);
    return static_->run(inputs);
  }
  return dyn_->run(inputs, before);
}

const Plan& Program::plan() const {
  if (static_) return *static_;
  if (!dyn_->last)
    throw Error("[" + dyn_->opts.job_name + "] has shapes known at call time: its plans are compiled per call "
                "shape, and it has not been called yet");
  return *dyn_->last;
}

const PlanOptions& Program::options() const { return static_ ? static_->options() : dyn_->opts; }

int64_t Program::steps_run() const { return static_ ? static_->steps_run() : dyn_->calls; }

void Program::set_steps_run(int64_t s) {
  if (static_) static_->set_steps_run(s);
  else dyn_->calls = s;
}

PlanCacheStats Program::cache_stats() const {
  if (static_) {
    PlanCacheStats s;
    s.compiles = 1;
    s.plans = 1;
    s.bytes = static_->arena_bytes();
    return s;
  }
  return dyn_->stats;
}

std::string Program::describe() const {
  if (static_) return static_->describe();
  const Dynamic& d = *dyn_;
  std::ostringstream o;
  o << "program of job '" << d.opts.job_name << "' (" << job_type_name(d.opts.type) << "): " << d.graph->nodes.size()
    << " nodes, shapes known at call time; a plan per call shape (" << d.stats.plans << " of at most "
    << d.limits.max_plans << " cached)\n";
  for (const Node& n : d.graph->nodes) {
    o << "  " << n.name << " = " << n.op->name();
    const std::string a = n.op->attrs();
    if (!a.empty()) o << "[" << a << "]";
    o << "(";
    for (size_t i = 0; i < n.inputs.size(); ++i) o << (i ? ", " : "") << spec_str(d.graph->blobs[n.inputs[i]].spec);
    o << ") -> (";
    for (size_t i = 0; i < n.outputs.size(); ++i) o << (i ? ", " : "") << spec_str(d.graph->blobs[n.outputs[i]].spec);
    o << ")" << (n.op->output_shape_from_data() ? " [shape from data]" : "") << "\n";
  }
  if (d.last) o << "latest " << d.last->describe();
  return o.str();
}

}  // namespace jobflow
