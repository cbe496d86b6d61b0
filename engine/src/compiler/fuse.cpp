// The fusion pass: producer -> consumer pairs the producer's primitive can
// absorb (a bias add or a relu into a conv/matmul, a bias gradient into the
// conv's weight gradient) become one node.
#include <algorithm>
#include <set>

#include "compiler/passes.h"
#include "jobflow/primitive.h"

namespace jobflow::compiler {

// relu_grad(max_pool2d_grad(dy, ws), x) where x is that pooling's input:
// one pooling gradient masked by the pooling's output (with_relu_grad),
// taking node i's place; otherwise nothing changes.
void fold_relu_grad(Graph& g, std::vector<char>& alive, size_t i, std::vector<std::vector<int>>& consumers,
                    const std::set<int>& keep_blobs) {
  const Node& n = g.nodes[i];
  if (n.inputs.size() != 2) return;
  const int d = n.inputs[0], x = n.inputs[1];
  const int p = g.blobs[d].producer;
  if (p < 0 || !alive[p] || g.nodes[p].op->kind() != OpKind::MaxPool2dGrad || keep_blobs.count(d)) return;
  int readers = 0;
  for (int c : consumers[d]) readers += alive[c] ? 1 : 0;
  if (readers != 1 || g.nodes[p].placement.device != n.placement.device || g.nodes[p].inputs.size() != 2)
    return;
  if (g.blobs[d].spec != g.blobs[n.outputs[0]].spec) return;  // no broadcasting in the relu gradient
  const int f = g.blobs[g.nodes[p].inputs[1]].producer;                 // the forward pooling (its workspace)
  if (f < 0 || g.nodes[f].op->kind() != OpKind::MaxPool2d || g.nodes[f].inputs.empty() || g.nodes[f].inputs[0] != x)
    return;
  auto fused = g.nodes[p].op->with_relu_grad();
  if (!fused) return;
  Node merged = g.nodes[p];
  merged.op = fused;
  merged.inputs.push_back(g.nodes[f].outputs[0]);
  merged.outputs = n.outputs;
  g.blobs[merged.outputs[0]].producer = static_cast<int>(i);
  g.blobs[merged.outputs[0]].out_index = 0;
  alive[p] = 0;
  // Node i now reads the pooling's output, not x (later fusions look).
  auto& cx = consumers[x];
  cx.erase(std::remove(cx.begin(), cx.end(), static_cast<int>(i)), cx.end());
  consumers[g.nodes[f].outputs[0]].push_back(static_cast<int>(i));
  g.nodes[i] = std::move(merged);
}

// Merges producer -> consumer pairs the producer's primitive can absorb.
// The fused node takes the consumer's place in the order (all its inputs
// are defined by then) and the consumer's output blob.
void fuse(PlanBuild& b) {
  if (!b.opts.fusion) return;
  Graph& g = *b.graph;
  std::vector<char>& alive = b.alive;
  const std::set<int> keep_blobs(b.outputs.begin(), b.outputs.end());
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
    if (op == OpKind::ReluGrad) {
      fold_relu_grad(g, alive, i, consumers, keep_blobs);
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



}  // namespace jobflow::compiler
