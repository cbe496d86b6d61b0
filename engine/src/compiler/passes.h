// compiler/passes.h (internal) — passes Plan::compile runs on the plan under
// construction (docs/architecture.md, "Design: shapes known at call time,
// the plan cache and layouts").
#pragma once

#include <cstddef>
#include <vector>

#include "compiler.h"

namespace jobflow::compiler {

// Layouts, rewrites and precision for predict jobs on the CPU (layout.cpp).
// `order` is the plan's node order after pruning and fusion; the pass
//   1. rewrites: folds a batch norm into the convolution before it, and
//      fuses into each convolution the element-wise ops and the residual
//      add that follow it (relu, clip, sigmoid, x * sigmoid(x),
//      hard_sigmoid, x * hard_sigmoid(x), + residual) as oneDNN post-ops;
//   2. layouts: gives each blob a memory format, the one oneDNN's
//      convolution prefers (nChw16c, ...) kept through pooling, global
//      average pooling, element-wise and binary ops, with a reorder node
//      where a blocked blob meets a kernel that reads plain memory and
//      before a job return;
//   3. precision (opts.bf16): convolutions in bfloat16 with float32
//      accumulation, their outputs kept in bfloat16 along the chain,
//      float32 wherever a blob leaves it.
// It replaces nodes' primitives with cpu/layout_ops.h kernels, appends the
// new nodes and blobs to `g`, rewrites `order`, and sets `bytes[b]` (sized
// to g.blobs) to the arena bytes of each blob whose format is not plain
// (0 for the others). With opts.fusion off, or for train jobs, it does
// nothing: the graph as written is the reference its tests compare with.
void assign_layouts(Graph& g, std::vector<int>& order, const std::vector<int>& outputs, const PlanOptions& opts,
                    std::vector<size_t>& bytes);

}  // namespace jobflow::compiler
