// The last pass: the Plan itself. Allocates the arena, gives each node its
// backend and its input and output tensors as prebuilt views (into the
// arena, the variables, the constants), and records the slots that read the
// call's inputs as patches, the variables its steps write (their versions
// key the weights the layouts pass prepared) and the work of one call (the
// runtime's thread count).
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "compiler/passes.h"
#include "cpu/isa.h"
#include "cpu/layout_ops.h"
#include "jobflow/backend.h"
#include "session_internal.h"
#include "state_ops.h"

namespace jobflow::compiler {
namespace {
constexpr size_t kAlign = 64;
}  // namespace

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

void place(PlanBuild& b) {
  b.moved_to_cpu.assign(b.graph->nodes.size(), 0);
  for (size_t n = 0; n < b.graph->nodes.size(); ++n) {
    Node& node = b.graph->nodes[n];
    if (node.placement.device == "cpu") continue;
    bool fell_back = false;
    backend_for(node.placement.device, &fell_back);
    if (!fell_back) continue;
    // (At bind time this fallback kept the node's "gpu" placement, and the
    // layout passes, which take CPU nodes only, skipped the whole job: the
    // seeds' LeNet trained at half the speed of the same job on "cpu".)
    node.placement.device = "cpu";
    b.moved_to_cpu[n] = 1;
  }
}

std::shared_ptr<Plan> bind(PlanBuild& b) {
  std::shared_ptr<Plan> plan(new Plan());
  plan->g_ = b.graph;
  plan->opts_ = b.opts;
  plan->inputs_ = b.inputs;
  plan->outputs_ = b.outputs;
  plan->arena_bytes_ = b.arena_bytes;
  plan->unshared_bytes_ = b.unshared_bytes;
  plan->inputs_in_place_ = b.inputs_in_place;
  plan->arena_ = aligned_alloc_shared(std::max<size_t>(b.arena_bytes, kAlign));
  const Graph& G = *b.graph;
  const auto& bnd = b.bind;
  char* base = static_cast<char*>(plan->arena_.get());
  std::map<int, int> placeholder_index;
  for (size_t i = 0; i < b.inputs.size(); ++i) placeholder_index[b.inputs[i]] = static_cast<int>(i);

  auto view_of = [&](int bl) -> Tensor {
    const BlobBinding& bb = bnd[bl];
    const TensorSpec& s = G.blobs[bl].spec;
    switch (bb.kind) {
      case BlobBinding::Arena:
        return Tensor::wrap(base + bnd[bb.root].offset + bb.within, s.shape, s.dtype, plan->arena_);
      case BlobBinding::Variable: {
        auto* v = dynamic_cast<const internal::VariableOp*>(G.nodes[G.blobs[bb.root].producer].op.get());
        return v->entry()->value.reshape(s.shape);
      }
      case BlobBinding::Constant: return b.constants.at(bb.root).reshape(s.shape);
      // (Result: the step's slot is pointed at the returned tensor per call.)
      default: return Tensor();
    }
  };
  // (Of the nodes place() moved, only those this plan runs: a segment of a
  // job with dims known at call time, or a pruned node, says nothing. Once
  // per job name in a process: a job whose dims are known at call time
  // compiles a plan per shape and segment, and said it each time.)
  bool moved = false;
  for (int n : b.order) moved |= static_cast<size_t>(n) < b.moved_to_cpu.size() && b.moved_to_cpu[n];
  if (moved) {
    static std::mutex told_mutex;
    static std::set<std::string> told;
    bool first;
    {
      std::lock_guard<std::mutex> lock(told_mutex);
      first = told.insert(b.opts.job_name).second;
    }
    if (first)
      std::cerr << "jobflow: job '" << b.opts.job_name
                << "' places ops on \"gpu\" but this build has no usable CUDA backend; running them on the CPU\n";
  }
  for (size_t s = 0; s < b.order.size(); ++s) {
    const Node& node = G.nodes[b.order[s]];
    Plan::Step st;
    st.node = b.order[s];
    st.op = node.op.get();
    // (place() moved the nodes of devices without a backend to the CPU.)
    st.backend = &backend_for(node.placement.device);
    if (!st.backend->supports(*node.op)) st.backend = &backend_for("cpu");  // optional entry: this op on the CPU
    for (int in : node.inputs) st.in.push_back(view_of(in));
    for (int out : node.outputs) st.out.push_back(view_of(out));
    if (auto* v = dynamic_cast<const internal::VariableOp*>(node.op.get())) plan->variables_.push_back(v->entry());
    if (node.op->has_side_effects())  // updates variables in place: derived weights must see it
      for (int in : node.inputs)
        if (bnd[in].kind == BlobBinding::Variable)
          if (auto* v = dynamic_cast<const internal::VariableOp*>(G.nodes[G.blobs[bnd[in].root].producer].op.get()))
            plan->written_.push_back(v->entry());
    // Placeholders and variables do nothing at run time.
    if (dynamic_cast<const internal::PlaceholderOp*>(node.op.get()) ||
        dynamic_cast<const internal::VariableOp*>(node.op.get())) {
      st.op = nullptr;
    }
    plan->steps_.push_back(std::move(st));
  }
  for (int o : b.outputs) {
    plan->out_shapes_.push_back(G.blobs[o].spec.shape);
    plan->out_dtypes_.push_back(G.blobs[o].spec.dtype);
    if (bnd[o].kind == BlobBinding::Placeholder) {
      plan->out_views_.emplace_back();
      plan->out_from_input_.push_back(placeholder_index.at(bnd[o].root));
    } else {
      plan->out_views_.push_back(view_of(o));
      plan->out_from_input_.push_back(-1);
    }
  }
  // Drop no-op steps from the run loop, then record the slots that read or
  // write the call's inputs (patched per call).
  std::erase_if(plan->steps_, [](const Plan::Step& s) { return s.op == nullptr; });
  for (size_t s = 0; s < plan->steps_.size(); ++s) {
    const Node& node = G.nodes[plan->steps_[s].node];
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const int bl = node.inputs[k];
      if (bnd[bl].kind == BlobBinding::Placeholder)
        plan->patches_.push_back({static_cast<int>(s), static_cast<int>(k), placeholder_index.at(bnd[bl].root), false,
                                  G.blobs[bl].spec.shape});
    }
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      const int bl = node.outputs[k];
      if (bnd[bl].kind == BlobBinding::Placeholder)
        plan->patches_.push_back({static_cast<int>(s), static_cast<int>(k), placeholder_index.at(bnd[bl].root), true,
                                  G.blobs[bl].spec.shape});
    }
  }
  // A returned map's reorder out of the chain's format writes straight
  // into the returned tensor (plan_memory's BlobBinding::Result: no other
  // step touches the blob, which has no arena space). (ssdlite320's maps
  // at batch 8: 10 MB copied out of the arena after the reorders wrote
  // them; a 26 MB map cost 1 ms of copying per call.)
  plan->init_results();
  plan->out_direct_.assign(b.outputs.size(), {-1, -1});
  for (size_t i = 0; i < b.outputs.size(); ++i) {
    const int o = b.outputs[i];
    if (bnd[o].kind != BlobBinding::Result) continue;
    for (size_t st = 0; st < plan->steps_.size(); ++st) {
      const auto& outs = G.nodes[plan->steps_[st].node].outputs;
      for (size_t k = 0; k < outs.size(); ++k)
        if (outs[k] == o) plan->out_direct_[i] = {static_cast<int>(st), static_cast<int>(k)};
    }
    if (plan->out_direct_[i].first < 0)
      throw Error("[compile] job '" + b.opts.job_name + "': returned blob '" + G.blobs[o].name +
                  "' is to be written into its result, but no step writes it");
  }
  if (!plan->opts_.step_variable.empty()) {
    auto e = internal::VariableStore::get().find(plan->opts_.step_variable);
    if (!e || e->spec != TensorSpec{{1}, DType::Int64})
      throw Error("[compile] job '" + plan->opts_.job_name + "': step variable '" + plan->opts_.step_variable +
                  "' is not an int64 (1,) session variable");
    plan->step_var_ = e;
  }
  plan->bf16_ = b.opts.bf16;  // (Plan::compile: only where bf16 is usable)
  for (const Plan::Step& st : plan->steps_) plan->flops_ += step_flops(G.nodes[st.node], G);
  {
    std::vector<internal::VariableEntry*> held;
    for (auto& v : plan->variables_) held.push_back(static_cast<internal::VariableEntry*>(v.get()));
    if (plan->step_var_) held.push_back(static_cast<internal::VariableEntry*>(plan->step_var_.get()));
    plan->held_ = internal::HeldVariables::in_order(std::move(held));
  }
  const char* prof = std::getenv("JOBFLOW_PROFILE");
  plan->profile_ = prof && *prof && std::string(prof) != "0";
  plan->profile_cpu_ = plan->profile_ && std::string(prof) == "cpu";
  plan->prof_seconds_.assign(plan->steps_.size(), 0.0);
  return plan;
}

}  // namespace jobflow::compiler
