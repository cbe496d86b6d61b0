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

// Per blob, after the walk below: the steps reading it (a step reading it
// twice counts twice) and the other blobs bound to its storage (views,
// inputs placed inside it).
namespace {
struct Uses {
  std::vector<int> readers, sharing;
  explicit Uses(const PlanBuild& b) : readers(b.graph->blobs.size(), 0), sharing(b.graph->blobs.size(), 0) {
    for (int n : b.order)
      for (int in : b.graph->nodes[n].inputs) ++readers[in];
    for (size_t bl = 0; bl < b.bind.size(); ++bl)
      if (b.bind[bl].root >= 0 && b.bind[bl].root != static_cast<int>(bl)) ++sharing[b.bind[bl].root];
  }
};
}  // namespace

// A returned blob is written straight into the returned tensor (Plan::run)
// where its writer, a CPU op of this plan, writes that output wherever it
// is told (Primitive::writes_output_anywhere: a returned map's reorder out
// of the chain's format, a resize, a concat) and nothing else in the plan
// touches the blob: returned once, plain, its own storage (no view of it,
// no view it is), read by no step. Such a blob takes no arena space (the
// stem block of ssdlite320 returning its 256 x 160 x 160 map reserved 26 MB
// it never wrote) and is not copied out after the call (deeplabv3's 21 x
// 256 x 256 upsampled scores, 5.5 MB).
static bool written_into_result(const PlanBuild& b, const Uses& u, const std::vector<int>& step_of, int o) {
  const Graph& G = *b.graph;
  const BlobBinding& bo = b.bind[o];
  const size_t laid = static_cast<size_t>(o) < b.layout_bytes.size() ? b.layout_bytes[o] : 0;
  const int w = G.blobs[o].producer;
  if (bo.kind != BlobBinding::Arena || bo.root != o || laid != 0 || u.readers[o] || u.sharing[o] ||
      std::count(b.outputs.begin(), b.outputs.end(), o) != 1 || w < 0 || step_of[w] < 0)
    return false;
  const Node& node = G.nodes[w];
  const int k = static_cast<int>(std::find(node.outputs.begin(), node.outputs.end(), o) - node.outputs.begin());
  return node.placement.device == "cpu" && node.op->writes_output_anywhere(k);
}

// An input its consumer copies unchanged into one run of its output
// (Primitive::input_within_output: a concat along an axis with only 1s
// before it, deeplabv3's ASPP at batch 1) is bound as that part of the
// output, so its producer writes it in place and the consumer copies
// nothing: where the input is a plain arena blob of its own (no view of
// it, not returned), read by that consumer alone and once, made by a CPU
// node, and the part starts on a 64-byte line (the kernels' vector
// stores). The output's storage then lives from the first such
// producer's step.
static void place_inputs_within_outputs(PlanBuild& b, Uses& u, const std::vector<int>& step_of) {
  const Graph& G = *b.graph;
  auto& bind = b.bind;
  for (int n : b.order) {
    const Node& node = G.nodes[n];
    if (node.placement.device != "cpu" || node.outputs.size() != 1) continue;
    const int o = node.outputs[0];
    if (bind[o].kind != BlobBinding::Arena || bind[o].root != o) continue;
    std::vector<TensorSpec> specs;
    for (int in : node.inputs) specs.push_back(G.blobs[in].spec);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const int in = node.inputs[i];
      const int64_t at = node.op->input_within_output(static_cast<int>(i), specs);
      if (at < 0 || at % 64 != 0) continue;
      const BlobBinding& bi = bind[in];
      const int p = G.blobs[in].producer;
      const size_t laid = static_cast<size_t>(in) < b.layout_bytes.size() ? b.layout_bytes[in] : 0;
      // (A blob in a format of its own, even one of the plain size such as
      // nChw16c of whole blocks, is not the concat's bytes.)
      if (bi.kind != BlobBinding::Arena || bi.root != in || u.sharing[in] || u.readers[in] != 1 || laid != 0 ||
          std::count(b.outputs.begin(), b.outputs.end(), in) || p < 0 || G.nodes[p].placement.device != "cpu" ||
          step_of[p] < 0 || step_of[p] >= step_of[n])
        continue;
      bind[in].root = o;
      bind[in].within = static_cast<size_t>(at);
      bind[in].bytes = 0;
      bind[o].first = std::min(bind[o].first, step_of[p]);
      ++u.sharing[o];
      ++b.inputs_in_place;
    }
  }
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
  Uses uses(b);
  place_inputs_within_outputs(b, uses, step_of);
  // Lifetimes: a root lives until its last reader (through any alias).
  for (int n : b.order)
    for (int in : G.nodes[n].inputs) {
      BlobBinding& r = bind[bind[in].root];
      r.last = std::max(r.last, step_of[n]);
    }
  for (int o : b.outputs) bind[bind[o].root].last = static_cast<int>(b.order.size());
  for (int o : b.outputs)
    if (written_into_result(b, uses, step_of, o)) {
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
