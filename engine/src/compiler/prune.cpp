// The shape-free passes around fusion: prune (keep what the returns and the
// side effects need) and order (optimizer updates last).
#include <set>

#include "compiler/passes.h"
#include "jobflow/primitive.h"

namespace jobflow::compiler {

// Starting from the producers of the returned blobs and every node with
// side effects, keeps what they transitively read. A blob known when
// compiling (b.constants) needs no producer. Placeholders are always kept.
void prune(PlanBuild& b) {
  const Graph& G = *b.graph;
  const size_t N = G.nodes.size();
  const size_t limit = b.node_limit < 0 ? N : static_cast<size_t>(b.node_limit);
  b.alive.assign(N, 0);
  std::vector<int> stack;
  for (int o : b.outputs)
    if (G.blobs[o].producer >= 0 && !b.constants.count(o)) stack.push_back(G.blobs[o].producer);
  for (size_t i = 0; i < limit; ++i)
    if (G.nodes[i].op->has_side_effects()) stack.push_back(static_cast<int>(i));
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (b.alive[n]) continue;
    b.alive[n] = 1;
    for (int in : G.nodes[n].inputs)
      if (!b.constants.count(in)) stack.push_back(G.blobs[in].producer);
  }
  for (int in : b.inputs) b.alive[G.blobs[in].producer] = 1;
}

// Graph order, with the optimizer updates moved after every other node so
// no op sees a half-updated variable.
void order(PlanBuild& b) {
  const size_t N = b.graph->nodes.size();
  const std::set<int> upd(b.updates.begin(), b.updates.end());
  b.order.clear();
  for (size_t i = 0; i < N; ++i)
    if (b.alive[i] && !upd.count(static_cast<int>(i))) b.order.push_back(static_cast<int>(i));
  for (size_t i = 0; i < N; ++i)
    if (b.alive[i] && upd.count(static_cast<int>(i))) b.order.push_back(static_cast<int>(i));
}

}  // namespace jobflow::compiler
