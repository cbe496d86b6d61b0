// Reverse-mode autodiff on the graph: walks nodes from y back to xs and asks
// each primitive for its vjp, which adds gradient nodes built from other ops.
#include <map>

#include "jobflow/ops.h"
#include "jobflow/primitive.h"
#include "ops_internal.h"

namespace jobflow {

std::vector<Blob> gradients(Blob y, const std::vector<Blob>& xs, Blob dy) {
  if (!y.defined()) throw Error("[gradients] y is undefined");
  Graph& g = *y.graph();
  for (const Blob& x : xs)
    if (x.graph() != &g) throw Error("[gradients] '" + x.name() + "' belongs to another job function");
  if (!is_floating(y.dtype())) throw Error("[gradients] y must be float, got " + spec_str(y.spec()));
  if (dy.defined() && dy.spec() != y.spec())
    throw Error("[gradients] dy is " + spec_str(dy.spec()) + " but y is " + spec_str(y.spec()));

  const size_t n_nodes = g.nodes.size();  // gradient nodes appended below are not visited
  const size_t n_blobs = g.blobs.size();
  // Blobs that depend on some x (forward reachability).
  std::vector<char> depends(n_blobs, 0);
  for (const Blob& x : xs) depends[x.id()] = 1;
  for (size_t i = 0; i < n_nodes; ++i) {
    const Node& n = g.nodes[i];
    bool any = false;
    for (int b : n.inputs) any |= depends[b] != 0;
    if (any)
      for (int b : n.outputs) depends[b] = 1;
  }

  std::map<int, std::vector<Blob>> cot;
  cot[y.id()].push_back(dy.defined() ? dy : ones_like(y));
  auto total = [&](int b) -> Blob {
    auto it = cot.find(b);
    if (it == cot.end() || it->second.empty()) return Blob();
    if (it->second.size() == 1) return it->second[0];
    Blob s = internal::add_n(it->second);
    it->second = {s};
    return s;
  };

  for (size_t k = n_nodes; k-- > 0;) {
    // Copy: vjp() appends to g.nodes, which may reallocate.
    const Node n = g.nodes[k];
    std::vector<Blob> outs_cot;
    bool any = false;
    for (int b : n.outputs) {
      outs_cot.push_back(total(b));
      any |= outs_cot.back().defined();
    }
    if (!any) continue;
    std::vector<int> argnums;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const int b = n.inputs[i];
      if (depends[b] && n.op->differentiable_input(static_cast<int>(i)) && is_floating(g.blobs[b].spec.dtype))
        argnums.push_back(static_cast<int>(i));
    }
    if (argnums.empty()) continue;
    std::vector<Blob> ins, outs;
    for (int b : n.inputs) ins.push_back(g.blob(b));
    for (int b : n.outputs) outs.push_back(g.blob(b));
    std::vector<Blob> grads;
    {
      detail::push_placement(n.placement);  // gradient ops run where the forward op ran
      try {
        grads = n.op->vjp(ins, outs, outs_cot, argnums);
      } catch (...) {
        detail::pop_placement();
        throw;
      }
      detail::pop_placement();
    }
    if (grads.size() != argnums.size())
      throw Error(std::string("[gradients] vjp of '") + n.op->name() + "' returned " + std::to_string(grads.size()) +
                  " gradients for " + std::to_string(argnums.size()) + " inputs");
    for (size_t j = 0; j < argnums.size(); ++j) {
      if (!grads[j].defined()) continue;
      const int b = n.inputs[argnums[j]];
      if (grads[j].spec() != g.blobs[b].spec)
        throw Error(std::string("[gradients] vjp of '") + n.op->name() + "' (node " + n.name + ") gave " +
                    spec_str(grads[j].spec()) + " for input " + std::to_string(argnums[j]) + " of " +
                    spec_str(g.blobs[b].spec));
      cot[b].push_back(grads[j]);
    }
  }

  std::vector<Blob> result;
  for (const Blob& x : xs) {
    Blob t = total(x.id());
    result.push_back(t.defined() ? t : zeros_like(x));
  }
  return result;
}

}  // namespace jobflow
