// Specialization: a program's graph (dims may be kDynamic) made concrete for
// one call's shapes. Every node's infer() runs again with the real input
// shapes; nodes whose inputs are all known (constants, the shapes of
// blobs) and whose results are small are evaluated here with the engine's
// own kernels, so shape arithmetic (shape -> gather -> concat -> reshape_to,
// constant_of_shape, range, expand) becomes constants; an op whose output
// shapes depend on values still unknown (nonzero on data, a reshape to a
// shape computed from data) stops the walk: the call is cut there into
// segments (plan_cache.cpp).
#include <string>

#include "compiler/passes.h"
#include "jobflow/primitive.h"

namespace jobflow::compiler {
namespace {
// Results folded while specializing are at most this many elements: shape
// arithmetic, not weights.
constexpr int64_t kFoldElements = 1 << 16;
}  // namespace

bool reads_only_shapes(const Primitive& op) { return op.kind() == OpKind::ShapeOf || op.kind() == OpKind::SizeOf; }

Specialized specialize(const Graph& from, const std::map<int, Tensor>& known, int start,
                       const std::map<int, TensorSpec>& given) {
  Specialized r;
  r.graph = std::make_shared<Graph>(from);  // nodes share their primitives
  r.known = known;
  r.start = start;
  Graph& G = *r.graph;
  for (const auto& [id, spec] : given) G.blobs[id].spec = spec;
  for (size_t i = static_cast<size_t>(start); i < G.nodes.size(); ++i) {
    Node& n = G.nodes[i];
    const Primitive& op = *n.op;
    const OpKind k = op.kind();
    if (k == OpKind::Placeholder) {
      auto it = given.find(n.outputs[0]);
      if (it == given.end()) throw Error("[specialize] placeholder '" + n.name + "' has no shape for this call");
      const TensorSpec& was = from.blobs[n.outputs[0]].spec;
      if (!is_static(it->second.shape) || !specs_agree(it->second, was))
        throw Error("[specialize] placeholder '" + n.name + "' is " + spec_str(was) + ", given " + spec_str(it->second));
      continue;
    }
    std::vector<TensorSpec> in;
    in.reserve(n.inputs.size());
    for (int b : n.inputs) in.push_back(G.blobs[b].spec);
    std::vector<TensorSpec> out;
    try {
      if (op.output_shape_from_data()) {
        std::vector<Tensor> vals(n.inputs.size());
        bool have = true;
        for (size_t j = 0; j < n.inputs.size(); ++j) {
          if (!op.shape_reads_value(static_cast<int>(j))) continue;
          auto it = r.known.find(n.inputs[j]);
          if (it == r.known.end()) have = false;
          else vals[j] = it->second;
        }
        if (!have) {  // values known only when the call reaches this node
          r.cut = static_cast<int>(i);
          return r;
        }
        out = op.infer_data(in, vals);
        // An op that sizes its outputs when it runs may need more than those
        // values (an ONNX node imported per call whose ops read data): cut.
        if (op.sizes_outputs())
          for (const TensorSpec& s : out)
            if (!is_static(s.shape)) {
              r.cut = static_cast<int>(i);
              return r;
            }
      } else {
        out = op.infer(in);
      }
    } catch (const Error& e) {
      throw Error("[specialize] node '" + n.name + "' (" + op.name() + "): " + e.what());
    }
    if (out.size() != n.outputs.size())
      throw Error("[specialize] node '" + n.name + "' (" + op.name() + ") gives " + std::to_string(out.size()) +
                  " outputs for this call's shapes, the graph has " + std::to_string(n.outputs.size()));
    int64_t elements = 0;
    for (size_t j = 0; j < out.size(); ++j) {
      const TensorSpec& was = G.blobs[n.outputs[j]].spec;
      if (!is_static(out[j].shape) || !specs_agree(out[j], was))
        throw Error("[specialize] node '" + n.name + "' (" + op.name() + ") output " + std::to_string(j) + " is " +
                    spec_str(out[j]) + " for this call's shapes, but the job was defined with " + spec_str(was));
      G.blobs[n.outputs[j]].spec = out[j];
      elements += numel(out[j].shape);
    }
    // Fold: every value this node reads is known, it changes nothing else
    // and draws no random numbers, and its results are small.
    if (k == OpKind::Variable || op.draws_random() || op.has_side_effects() || elements > kFoldElements) continue;
    bool all_known = true;
    if (!reads_only_shapes(op))
      for (int b : n.inputs) all_known = all_known && r.known.count(b) > 0;
    if (!all_known) continue;
    std::vector<Tensor> ins, outs;
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      auto it = r.known.find(n.inputs[j]);
      const TensorSpec& s = G.blobs[n.inputs[j]].spec;  // shape-only ops read no data
      ins.push_back(it != r.known.end() ? it->second : Tensor::wrap(nullptr, s.shape, s.dtype, nullptr));
    }
    for (const TensorSpec& s : out) outs.emplace_back(s.shape, s.dtype);
    ExecContext ctx;
    try {
      op.eval_cpu(ins, outs, ctx);
    } catch (const std::exception& e) {
      throw Error("[specialize] node '" + n.name + "' (" + op.name() + "): " + e.what());
    }
    for (size_t j = 0; j < outs.size(); ++j) r.known[n.outputs[j]] = outs[j];
  }
  return r;
}

}  // namespace jobflow::compiler
