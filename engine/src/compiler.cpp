#include "compiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "compiler/passes.h"
#include "cpu/isa.h"
#include "cpu/threads.h"

#include <omp.h>
#include "jobflow/backend.h"
#include "kernel_util.h"
#include "session_internal.h"
#include "state_ops.h"

namespace jobflow {
namespace {

constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Merges producer -> consumer pairs the producer's primitive can absorb.
// The fused node takes the consumer's place in the order (all its inputs
// are defined by then) and the consumer's output blob.
void fuse(Graph& g, std::vector<char>& alive, const std::set<int>& keep_blobs) {
  auto consumers = g.consumers();
  auto single_reader = [&](int blob) {
    int n = 0;
    for (int c : consumers[blob]) n += alive[c] ? 1 : 0;
    return n == 1 && !keep_blobs.count(blob);
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!alive[i]) continue;
    Node& n = g.nodes[i];
    const OpKind op = n.op->kind();
    if (op == OpKind::BiasGrad) {
      // A weight-gradient op reading the same dy computes the bias gradient
      // in the same pass: merge into it, at the later of the two positions.
      const int dy = n.inputs[0];
      const int rank = static_cast<int>(g.blobs[dy].spec.shape.size());
      const int64_t axis = n.op->attr_int("axis");
      if (!(axis == 1 || (rank == 2 && axis == -1))) continue;
      for (int c : consumers[dy]) {
        if (c == static_cast<int>(i) || !alive[c] || g.nodes[c].outputs.size() != 1) continue;
        if (g.nodes[c].inputs.size() < 2 || g.nodes[c].inputs[1] != dy) continue;
        if (g.nodes[c].placement.device != n.placement.device) continue;
        auto fused = g.nodes[c].op->with_bias_grad();
        if (!fused) continue;
        // The earlier node moves to the later position: none of its outputs
        // may be read in between.
        const int lo = std::min(c, static_cast<int>(i)), hi = std::max(c, static_cast<int>(i));
        bool read_between = false;
        for (int b : g.nodes[lo].outputs)
          for (int r : consumers[b]) read_between |= alive[r] && r > lo && r <= hi;
        if (read_between) continue;
        Node merged = g.nodes[c];
        merged.op = fused;
        merged.outputs.push_back(n.outputs[0]);
        const int at = std::max(c, static_cast<int>(i));
        const int other = std::min(c, static_cast<int>(i));
        for (size_t k = 0; k < merged.outputs.size(); ++k) {
          g.blobs[merged.outputs[k]].producer = at;
          g.blobs[merged.outputs[k]].out_index = static_cast<int>(k);
        }
        alive[other] = 0;
        g.nodes[at] = std::move(merged);
        break;
      }
      continue;
    }
    if (op != OpKind::BiasAdd && op != OpKind::Relu) continue;
    const int src = n.inputs[0];
    const int p = g.blobs[src].producer;
    if (p < 0 || !alive[p] || g.nodes[p].outputs.size() != 1 || !single_reader(src)) continue;
    if (g.nodes[p].placement.device != n.placement.device) continue;
    std::shared_ptr<Primitive> fused;
    if (op == OpKind::BiasAdd) {
      const int rank = static_cast<int>(g.blobs[src].spec.shape.size());
      const int64_t axis = n.op->attr_int("axis");
      const bool axis1 = axis == 1 || (rank == 2 && axis == -1);
      if (!axis1 || !(g.nodes[p].op->kind() == OpKind::Conv2d || rank == 2)) continue;
      fused = g.nodes[p].op->with_bias();
    } else {
      fused = g.nodes[p].op->with_relu();
    }
    if (!fused) continue;
    Node merged = g.nodes[p];
    merged.op = fused;
    if (op == OpKind::BiasAdd) merged.inputs.push_back(n.inputs[1]);
    merged.outputs = n.outputs;
    merged.name = g.nodes[p].name;
    for (size_t k = 0; k < merged.outputs.size(); ++k) {
      g.blobs[merged.outputs[k]].producer = static_cast<int>(i);
      g.blobs[merged.outputs[k]].out_index = static_cast<int>(k);
    }
    alive[p] = 0;
    g.nodes[i] = std::move(merged);
  }
}


// Work of one node (Plan::flops_per_call).
double step_flops(const Node& n, const Graph& g) {
  auto numel_of = [&](int b) { return static_cast<double>(numel(g.blobs[b].spec.shape)); };
  double out = 0;
  for (int b : n.outputs) out += numel_of(b);
  const OpKind k = n.op->kind();
  if ((k == OpKind::Conv2d || k == OpKind::Conv2dBackwardData || k == OpKind::Conv2dBackwardWeights) &&
      n.inputs.size() >= 2) {
    // Each element of the larger side (y, or dy) is a sum over C/groups x R x S products.
    const Shape& w = k == OpKind::Conv2d ? g.blobs[n.inputs[1]].spec.shape
                                         : (k == OpKind::Conv2dBackwardData ? g.blobs[n.inputs[0]].spec.shape : Shape{});
    const int dy = k == OpKind::Conv2d ? n.outputs[0] : n.inputs[1];
    double per = 0;
    if (w.size() == 4) per = static_cast<double>(w[1] * w[2] * w[3]);
    else if (k == OpKind::Conv2dBackwardWeights) per = numel_of(n.outputs[0]) / std::max<double>(1, g.blobs[dy].spec.shape.at(1));
    return 2 * numel_of(dy) * per;
  }
  if (k == OpKind::MatMul && n.inputs.size() >= 2) {
    const Shape& a = g.blobs[n.inputs[0]].spec.shape;
    if (a.size() >= 2) {
      const int64_t K = n.op->attr_int("transpose_a") ? a[a.size() - 2] : a.back();
      return 2 * numel_of(n.outputs[0]) * static_cast<double>(K);
    }
  }
  return out;
}

}  // namespace

struct Plan::Binding {
  enum Kind { Arena, Placeholder, Variable, Unused } kind = Unused;
  int root = -1;
  size_t offset = 0, bytes = 0;
  int first = -1, last = -1;  // step range of the root's lifetime
};

std::shared_ptr<Plan> Plan::compile(std::shared_ptr<Graph> g, std::vector<int> inputs, std::vector<int> outputs,
                                    std::vector<int> updates, PlanOptions opts) {
  std::shared_ptr<Plan> plan(new Plan());
  plan->g_ = g;
  plan->opts_ = opts;
  plan->inputs_ = inputs;
  plan->outputs_ = outputs;
  Graph& G = *g;
  const size_t N = G.nodes.size();

  // 1. prune
  std::vector<char> alive(N, 0);
  std::vector<int> stack;
  for (int b : outputs)
    if (G.blobs[b].producer >= 0) stack.push_back(G.blobs[b].producer);
  for (size_t i = 0; i < N; ++i)
    if (G.nodes[i].op->has_side_effects()) stack.push_back(static_cast<int>(i));
  while (!stack.empty()) {
    int n = stack.back();
    stack.pop_back();
    if (alive[n]) continue;
    alive[n] = 1;
    for (int b : G.nodes[n].inputs) stack.push_back(G.blobs[b].producer);
  }
  // Placeholders are always bound, even when unused.
  for (int b : inputs) alive[G.blobs[b].producer] = 1;

  // 2. fuse
  std::set<int> keep(outputs.begin(), outputs.end());
  if (opts.fusion) fuse(G, alive, keep);

  // 3. order: updates last.
  std::set<int> upd(updates.begin(), updates.end());
  std::vector<int> order;
  for (size_t i = 0; i < N; ++i)
    if (alive[i] && !upd.count(static_cast<int>(i))) order.push_back(static_cast<int>(i));
  for (size_t i = 0; i < N; ++i)
    if (alive[i] && upd.count(static_cast<int>(i))) order.push_back(static_cast<int>(i));

  // 3b. layouts, rewrites and precision of predict plans (compiler/layout.cpp)
  std::vector<size_t> layout_bytes;
  {
    // oneDNN picks formats (and kernels) for the creating thread's OpenMP
    // count: choose them for the job's count when it is fixed, else for one
    // thread. A kernel run with a count for which oneDNN has only its
    // reference implementation of those formats runs with the count they
    // were chosen for (cpu/layout_ops.h, PerThreadCount): with one, that
    // never makes a team whose partner a busy machine keeps away.
    const int before = omp_get_max_threads();
    const int want = opts.threads > 0 ? opts.threads : 1;
    if (want != before) omp_set_num_threads(want);
    try {
      compiler::assign_layouts(G, order, outputs, opts, layout_bytes);
    } catch (...) {
      if (want != before) omp_set_num_threads(before);
      throw;
    }
    if (want != before) omp_set_num_threads(before);
  }

  // 4. memory plan
  std::vector<Binding> bind(G.blobs.size());
  std::vector<int> step_of(G.nodes.size(), -1);
  for (size_t s = 0; s < order.size(); ++s) step_of[order[s]] = static_cast<int>(s);
  std::map<int, int> placeholder_index;
  for (size_t i = 0; i < inputs.size(); ++i) placeholder_index[inputs[i]] = static_cast<int>(i);
  for (int n : order) {
    const Node& node = G.nodes[n];
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const int b = node.outputs[o];
      Binding& bb = bind[b];
      const int alias = node.op->aliases_input(static_cast<int>(o));
      if (alias >= 0) {
        bb = bind[bind[node.inputs[alias]].root];
        bb.root = bind[node.inputs[alias]].root;
        continue;
      }
      bb.root = b;
      if (dynamic_cast<const internal::PlaceholderOp*>(node.op.get())) bb.kind = Binding::Placeholder;
      else if (dynamic_cast<const internal::VariableOp*>(node.op.get())) bb.kind = Binding::Variable;
      else {
        bb.kind = Binding::Arena;
        bb.bytes = align_up(layout_bytes[b] ? layout_bytes[b]
                                            : static_cast<size_t>(numel(G.blobs[b].spec.shape)) * dtype_size(G.blobs[b].spec.dtype));
        bb.first = bb.last = step_of[n];
      }
    }
  }
  // Lifetimes: a root lives until its last reader (through any alias).
  for (int n : order)
    for (int b : G.nodes[n].inputs) {
      Binding& r = bind[bind[b].root];
      r.last = std::max(r.last, step_of[n]);
    }
  for (int b : outputs) bind[bind[b].root].last = static_cast<int>(order.size());
  // First fit, largest blobs first.
  std::vector<int> roots;
  for (size_t b = 0; b < bind.size(); ++b)
    if (bind[b].kind == Binding::Arena && bind[b].root == static_cast<int>(b)) roots.push_back(static_cast<int>(b));
  std::sort(roots.begin(), roots.end(), [&](int a, int c) {
    return bind[a].bytes != bind[c].bytes ? bind[a].bytes > bind[c].bytes : a < c;
  });
  std::vector<int> placed;
  size_t arena = 0, unshared = 0;
  for (int r : roots) {
    Binding& br = bind[r];
    unshared += br.bytes;
    std::vector<std::pair<size_t, size_t>> busy;
    for (int q : placed) {
      const Binding& bq = bind[q];
      if (bq.first <= br.last && br.first <= bq.last) busy.emplace_back(bq.offset, bq.offset + bq.bytes);
    }
    std::sort(busy.begin(), busy.end());
    size_t off = 0;
    for (auto& [s, e] : busy) {
      if (off + br.bytes <= s) break;
      off = std::max(off, e);
    }
    br.offset = off;
    arena = std::max(arena, off + br.bytes);
    placed.push_back(r);
  }
  plan->arena_bytes_ = arena;
  plan->unshared_bytes_ = unshared;
  plan->arena_ = aligned_alloc_shared(std::max<size_t>(arena, kAlign));
  char* base = static_cast<char*>(plan->arena_.get());

  // 5. bind views
  auto view_of = [&](int b) -> Tensor {
    const Binding& bb = bind[b];
    const TensorSpec& s = G.blobs[b].spec;
    switch (bb.kind) {
      case Binding::Arena: return Tensor::wrap(base + bind[bb.root].offset, s.shape, s.dtype, plan->arena_);
      case Binding::Variable: {
        auto* v = dynamic_cast<const internal::VariableOp*>(G.nodes[G.blobs[bb.root].producer].op.get());
        return v->entry()->value.reshape(s.shape);
      }
      default: return Tensor();
    }
  };
  bool warned_here = false;
  for (size_t s = 0; s < order.size(); ++s) {
    const Node& node = G.nodes[order[s]];
    Step st;
    st.node = order[s];
    st.op = node.op.get();
    bool fell_back = false;
    st.backend = &backend_for(node.placement.device, &fell_back);
    if (!st.backend->supports(*node.op)) {  // optional entry: run this op on the CPU
      st.backend = &backend_for("cpu");
      fell_back = node.placement.device != "cpu";
    }
    if (fell_back && !warned_here) {  // once per job
      warned_here = true;
      std::cerr << "jobflow: job '" << opts.job_name
                << "' places ops on \"gpu\" but this build has no usable CUDA backend; running them on the CPU\n";
    }
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const int b = node.inputs[k];
      st.in.push_back(view_of(b));
      if (bind[b].kind == Binding::Placeholder)
        plan->patches_.push_back({static_cast<int>(s), static_cast<int>(k), placeholder_index.at(bind[b].root), false,
                                  G.blobs[b].spec.shape});
    }
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      const int b = node.outputs[k];
      st.out.push_back(view_of(b));
      if (bind[b].kind == Binding::Placeholder && !dynamic_cast<const internal::PlaceholderOp*>(node.op.get()))
        plan->patches_.push_back({static_cast<int>(s), static_cast<int>(k), placeholder_index.at(bind[b].root), true,
                                  G.blobs[b].spec.shape});
    }
    if (auto* v = dynamic_cast<const internal::VariableOp*>(node.op.get())) plan->variables_.push_back(v->entry());
    if (node.op->has_side_effects())  // updates variables in place: derived weights must see it
      for (int b : node.inputs)
        if (bind[b].kind == Binding::Variable)
          if (auto* v = dynamic_cast<const internal::VariableOp*>(G.nodes[G.blobs[bind[b].root].producer].op.get()))
            plan->written_.push_back(v->entry());
    // Placeholders and variables do nothing at run time.
    if (dynamic_cast<const internal::PlaceholderOp*>(node.op.get()) ||
        dynamic_cast<const internal::VariableOp*>(node.op.get())) {
      st.op = nullptr;
    }
    plan->steps_.push_back(std::move(st));
  }
  for (int b : outputs) {
    plan->out_shapes_.push_back(G.blobs[b].spec.shape);
    if (bind[b].kind == Binding::Placeholder) {
      plan->out_views_.emplace_back();
      plan->out_from_input_.push_back(placeholder_index.at(bind[b].root));
    } else {
      plan->out_views_.push_back(view_of(b));
      plan->out_from_input_.push_back(-1);
    }
  }
  // Drop no-op steps from the run loop.
  std::erase_if(plan->steps_, [](const Step& s) { return s.op == nullptr; });
  // Patches recorded step indices before the erase: recompute them.
  plan->patches_.clear();
  for (size_t s = 0; s < plan->steps_.size(); ++s) {
    const Node& node = G.nodes[plan->steps_[s].node];
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const int b = node.inputs[k];
      if (bind[b].kind == Binding::Placeholder)
        plan->patches_.push_back({static_cast<int>(s), static_cast<int>(k), placeholder_index.at(bind[b].root), false,
                                  G.blobs[b].spec.shape});
    }
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      const int b = node.outputs[k];
      if (bind[b].kind == Binding::Placeholder)
        plan->patches_.push_back({static_cast<int>(s), static_cast<int>(k), placeholder_index.at(bind[b].root), true,
                                  G.blobs[b].spec.shape});
    }
  }
  if (!plan->opts_.step_variable.empty()) {
    auto e = internal::VariableStore::get().find(plan->opts_.step_variable);
    if (!e || e->spec != TensorSpec{{1}, DType::Int64})
      throw Error("[compile] job '" + plan->opts_.job_name + "': step variable '" + plan->opts_.step_variable +
                  "' is not an int64 (1,) session variable");
    plan->step_var_ = e;
  }
  plan->bf16_ = opts.bf16 && cpu::bf16_usable(opts.job_name);
  for (const Step& st : plan->steps_) plan->flops_ += step_flops(G.nodes[st.node], G);
  const char* prof = std::getenv("JOBFLOW_PROFILE");
  plan->profile_ = prof && *prof && std::string(prof) != "0";
  plan->prof_seconds_.assign(plan->steps_.size(), 0.0);
  return plan;
}

std::vector<Tensor> Plan::run(const std::vector<Tensor>& inputs) {
  for (auto& v : variables_) {
    auto* e = static_cast<internal::VariableEntry*>(v.get());
    if (!e->initialized.load(std::memory_order_acquire)) internal::VariableStore::get().ensure_initialized(*e);
  }
  int64_t* step_var = nullptr;
  if (step_var_) {
    auto* e = static_cast<internal::VariableEntry*>(step_var_.get());
    if (!e->initialized.load(std::memory_order_acquire)) internal::VariableStore::get().ensure_initialized(*e);
    step_var = e->value.data<int64_t>();
  }
  const int64_t step = step_var ? *step_var : step_;
  for (const Patch& p : patches_) {
    Tensor t = inputs[p.input].reshape(p.shape);
    (p.is_output ? steps_[p.step].out : steps_[p.step].in)[p.slot] = std::move(t);
  }
  ExecContext ctx;
  ctx.step = step;
  ctx.seed = opts_.seed;
  ctx.training = opts_.type == JobType::Train;
  ctx.bf16 = bf16_;
  ctx.lr = opts_.schedule.impl() ? opts_.schedule.lr(step) : 0.0;
  if (!profile_) {
    for (Step& s : steps_) s.backend->eval(*s.op, s.in, s.out, ctx);
  } else {
    for (size_t i = 0; i < steps_.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      steps_[i].backend->eval(*steps_[i].op, steps_[i].in, steps_[i].out, ctx);
      prof_seconds_[i] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  for (auto& v : written_) static_cast<internal::VariableEntry*>(v.get())->version.fetch_add(1, std::memory_order_acq_rel);
  // Drop the references to the caller's tensors.
  for (const Patch& p : patches_) (p.is_output ? steps_[p.step].out : steps_[p.step].in)[p.slot] = Tensor();
  ++step_;
  if (step_var) *step_var = step + 1;
  std::vector<Tensor> out;
  out.reserve(out_views_.size());
  for (size_t i = 0; i < out_views_.size(); ++i)
    out.push_back(out_from_input_[i] >= 0 ? inputs[out_from_input_[i]].reshape(out_shapes_[i]).clone()
                                          : out_views_[i].clone());
  return out;
}

int64_t Plan::steps_run() const {
  if (step_var_) {
    auto* e = static_cast<internal::VariableEntry*>(step_var_.get());
    if (e->initialized.load(std::memory_order_acquire)) return e->value.data<int64_t>()[0];
    return 0;
  }
  return step_;
}

void Plan::set_steps_run(int64_t s) {
  if (step_var_) {
    auto* e = static_cast<internal::VariableEntry*>(step_var_.get());
    internal::VariableStore::get().ensure_initialized(*e);
    e->value.data<int64_t>()[0] = s;
  } else {
    step_ = s;
  }
}

Plan::~Plan() {
  if (profile_ && step_ > 0) std::cerr << profile_report();
}

std::string Plan::profile_report() const {
  std::ostringstream o;
  double total = 0;
  for (double t : prof_seconds_) total += t;
  o << "profile of job '" << opts_.job_name << "': " << step_ << " calls, " << (total / std::max<int64_t>(step_, 1)) * 1e3
    << " ms per call in nodes\n";
  std::vector<size_t> idx(steps_.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return prof_seconds_[a] > prof_seconds_[b]; });
  for (size_t i : idx) {
    const Node& n = g_->nodes[steps_[i].node];
    char line[256];
    std::snprintf(line, sizeof line, "  %8.3f ms %5.1f%%  %s (%s)\n", prof_seconds_[i] / std::max<int64_t>(step_, 1) * 1e3,
                  total > 0 ? 100.0 * prof_seconds_[i] / total : 0.0, n.name.c_str(), steps_[i].op->name());
    o << line;
  }
  return o.str();
}

std::vector<std::string> Plan::op_sequence() const {
  std::vector<std::string> r;
  for (const Step& s : steps_) {
    std::string a = s.op->attrs();
    r.push_back(std::string(s.op->name()) + (a.empty() ? "" : "[" + a + "]"));
  }
  return r;
}

std::string Plan::describe() const {
  std::ostringstream o;
  o << "plan of job '" << opts_.job_name << "' (" << job_type_name(opts_.type) << "): " << steps_.size()
    << " nodes, arena " << arena_bytes_ << " bytes (" << unshared_bytes_ << " without reuse)\n";
  for (const Step& s : steps_) {
    const Node& n = g_->nodes[s.node];
    o << "  " << n.name << " = " << s.op->name();
    std::string a = s.op->attrs();
    if (!a.empty()) o << "[" << a << "]";
    o << "(";
    for (size_t i = 0; i < n.inputs.size(); ++i) o << (i ? ", " : "") << spec_str(g_->blobs[n.inputs[i]].spec);
    o << ") -> (";
    for (size_t i = 0; i < n.outputs.size(); ++i) o << (i ? ", " : "") << spec_str(g_->blobs[n.outputs[i]].spec);
    o << ") on " << s.backend->name() << "\n";
  }
  return o.str();
}

}  // namespace jobflow
