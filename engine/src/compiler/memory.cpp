// The memory plan: where every blob's bytes live. Placeholders are the
// call's inputs, variables the session's tensors, constants the values
// folded while compiling; every other blob gets an offset in one arena
// (sized by the layouts pass where its format is not plain float32),
// reusing space between blobs whose lifetimes do not overlap.
#include <algorithm>
#include <map>

#include "compiler/passes.h"
#include "jobflow/primitive.h"
#include "state_ops.h"

namespace jobflow::compiler {
namespace {
constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

// A returned blob is written straight into the returned tensor (Plan::run)
// where its one writer, a CPU op, writes that output wherever it is told
// (Primitive::writes_output_anywhere: a returned map's reorder out of the
// chain's format, a resize, a concat) and nothing else in the plan touches
// the blob: returned once, its own storage (no view of it, no view it is),
// read by no step. Such a blob takes no arena space (the stem block of
// ssdlite320 returning its 256 x 160 x 160 map reserved 26 MB it never
// wrote) and is not copied out after the call (deeplabv3's 21 x 256 x 256
// upsampled scores, 5.5 MB).
static bool written_into_result(const PlanBuild& b, int o) {
  const Graph& G = *b.graph;
  const auto& bind = b.bind;
  if (bind[o].kind != BlobBinding::Arena || bind[o].root != o || std::count(b.outputs.begin(), b.outputs.end(), o) != 1)
    return false;
  for (size_t bl = 0; bl < bind.size(); ++bl)
    if (static_cast<int>(bl) != o && bind[bl].root == o) return false;
  int writer = -1;
  for (int n : b.order) {
    const Node& node = G.nodes[n];
    if (std::count(node.inputs.begin(), node.inputs.end(), o)) return false;
    for (int out : node.outputs)
      if (out == o) {
        if (writer >= 0) return false;
        writer = n;
      }
  }
  if (writer < 0) return false;
  const Node& w = G.nodes[writer];
  const int k = static_cast<int>(std::find(w.outputs.begin(), w.outputs.end(), o) - w.outputs.begin());
  return w.placement.device == "cpu" && w.op->writes_output_anywhere(k);
}

void plan_memory(PlanBuild& b) {
  const Graph& G = *b.graph;
  const size_t N = G.nodes.size();
  auto& bind = b.bind;
  bind.assign(G.blobs.size(), BlobBinding{});
  std::vector<int> step_of(N, -1);
  for (size_t s = 0; s < b.order.size(); ++s) step_of[b.order[s]] = static_cast<int>(s);
  // Bound before the walk: the call's inputs (their placeholder nodes may
  // come late in a segment's graph) and the constants.
  for (int in : b.inputs) {
    bind[in].kind = BlobBinding::Placeholder;
    bind[in].root = in;
  }
  for (auto& [id, t] : b.constants) {
    bind[id].kind = BlobBinding::Constant;
    bind[id].root = id;
  }
  for (int n : b.order) {
    const Node& node = G.nodes[n];
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const int bl = node.outputs[o];
      BlobBinding& bb = bind[bl];
      if (bb.kind == BlobBinding::Constant || bb.kind == BlobBinding::Placeholder) continue;
      const int alias = node.op->aliases_input(static_cast<int>(o));
      if (alias >= 0) {
        bb = bind[bind[node.inputs[alias]].root];
        bb.root = bind[node.inputs[alias]].root;
        continue;
      }
      bb.root = bl;
      if (dynamic_cast<const internal::VariableOp*>(node.op.get())) bb.kind = BlobBinding::Variable;
      else {
        bb.kind = BlobBinding::Arena;
        // A blob in a blocked or bfloat16 format (the layouts pass) has its own size.
        const size_t laid = static_cast<size_t>(bl) < b.layout_bytes.size() ? b.layout_bytes[bl] : 0;
        bb.bytes = align_up(laid ? laid
                                 : static_cast<size_t>(numel(G.blobs[bl].spec.shape)) * dtype_size(G.blobs[bl].spec.dtype));
        bb.first = bb.last = step_of[n];
      }
    }
  }
  // Lifetimes: a root lives until its last reader (through any alias).
  for (int n : b.order)
    for (int in : G.nodes[n].inputs) {
      BlobBinding& r = bind[bind[in].root];
      r.last = std::max(r.last, step_of[n]);
    }
  for (int o : b.outputs) bind[bind[o].root].last = static_cast<int>(b.order.size());
  for (int o : b.outputs)
    if (written_into_result(b, o)) {
      bind[o].kind = BlobBinding::Result;
      bind[o].bytes = 0;
    }
  // First fit, largest blobs first.
  std::vector<int> roots;
  for (size_t i = 0; i < bind.size(); ++i)
    if (bind[i].kind == BlobBinding::Arena && bind[i].root == static_cast<int>(i)) roots.push_back(static_cast<int>(i));
  std::sort(roots.begin(), roots.end(), [&](int a, int c) {
    return bind[a].bytes != bind[c].bytes ? bind[a].bytes > bind[c].bytes : a < c;
  });
  std::vector<int> placed;
  size_t arena = 0, unshared = 0;
  for (int r : roots) {
    BlobBinding& br = bind[r];
    unshared += br.bytes;
    std::vector<std::pair<size_t, size_t>> busy;
    for (int q : placed) {
      const BlobBinding& bq = bind[q];
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
  b.arena_bytes = arena;
  b.unshared_bytes = unshared;
}

}  // namespace jobflow::compiler
