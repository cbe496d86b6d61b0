// compiler/passes.h (internal) — the passes that turn a job's graph into a
// Plan, each a function from the plan under construction to itself.
//
//   specialize  (jobs with dynamic dims or data-dependent shapes, once per
//               call shape) a copy of the program's graph with concrete
//               shapes: infer() again, shape arithmetic folded into
//               constants, cut before an op whose output shape depends on
//               values not known yet (specialize.cpp);
//   prune       keep what the returns and the side effects need (prune.cpp);
//   fuse        matmul/conv -> bias_add -> relu as one node, a bias gradient
//               into the weight gradient, relu's gradient into a 2x2 max
//               pooling's gradient (fuse.cpp);
//   order       optimizer updates after every other node (prune.cpp);
//   layouts     (on the CPU) for predict jobs rewrites, memory formats and
//               precision: batch norm folded into convolutions, post-ops
//               fused, oneDNN's blocked formats kept along chains, bfloat16
//               (layout.cpp); for train jobs nChw16c kept between
//               convolutions and poolings (train_layout.cpp);
//   memory      every intermediate blob an offset in one arena (memory.cpp);
//   bind        each node its backend and preallocated views: the Plan
//               (bind.cpp).
// Plan::compile (compiler.cpp) runs place, prune, fuse, order, layouts,
// memory and bind; the plan cache (plan_cache.cpp) runs specialize first, so a plan
// compiled for a call shape gets the same layouts and precision as a static
// job's plan (docs/architecture.md, "Design: shapes known at call time, the
// plan cache and layouts").
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "compiler.h"

namespace jobflow::compiler {

// Where a blob's bytes live in a plan.
struct BlobBinding {
  // Result: a returned blob its writer (Primitive::writes_output_anywhere)
  // writes straight into the returned tensor; it has no arena space.
  enum Kind { Arena, Placeholder, Variable, Constant, Result, Unused } kind = Unused;
  int root = -1;              // the blob whose storage this one shares (views: aliases_input)
  size_t offset = 0, bytes = 0;
  size_t within = 0;          // bytes into the root's storage (an input placed in its concat's output)
  int first = -1, last = -1;  // step range of the root's lifetime (arena roots)
};

// The plan under construction.
struct PlanBuild {
  std::shared_ptr<Graph> graph;     // owned copy: passes rewrite it
  std::vector<int> inputs;          // blob ids bound per call, in the plan's input order
  std::vector<int> outputs;         // blob ids returned
  std::vector<int> updates;         // node ids of optimizer updates (run last)
  PlanOptions opts;
  std::map<int, Tensor> constants;  // blob id -> value known when compiling (bound, never computed)
  int node_limit = -1;              // nodes at or after it are not part of this plan (-1: none)
  // place
  std::vector<char> moved_to_cpu;   // per node: placed on a device without a backend, now on "cpu"
  // prune / fuse
  std::vector<char> alive;          // per node
  // order
  std::vector<int> order;           // node ids in run order
  // layouts
  std::vector<size_t> layout_bytes; // per blob: arena bytes of a blob in a non-plain format (0: plain)
  // memory
  std::vector<BlobBinding> bind;    // per blob
  size_t arena_bytes = 0, unshared_bytes = 0;
  int inputs_in_place = 0;          // inputs bound inside their consumer's output (input_within_output)
};

// Nodes placed on a device whose backend this build or machine lacks (a
// seeds' job placed on "gpu" without CUDA) are placed on the CPU before the
// other passes, so the CPU's fusions, layouts and kernels apply to them;
// bind prints one notice per plan that runs any of them.
void place(PlanBuild& b);
void prune(PlanBuild& b);
void fuse(PlanBuild& b);
void order(PlanBuild& b);
void layouts(PlanBuild& b);
void plan_memory(PlanBuild& b);
std::shared_ptr<Plan> bind(PlanBuild& b);
// The work of one node, in floating-point operations (a product's multiply
// and add count two): summed over a plan's steps it is
// Plan::flops_per_call, which picks a call's thread count (cpu/threads.h).
double step_flops(const Node& n, const Graph& g);

// The layouts pass (layout.cpp), for predict jobs; `b.order` is the order
// after pruning and fusion. It
//   1. rewrites: folds a batch norm into the convolution before it, and
//      fuses into each convolution the element-wise ops and the residual
//      add that follow it (relu, clip, sigmoid, x * sigmoid(x),
//      hard_sigmoid, x * hard_sigmoid(x), + residual) as oneDNN post-ops;
//   2. layouts: gives each blob a memory format, the one oneDNN's
//      convolution prefers (nChw16c, ...) kept through pooling, global
//      average pooling, element-wise and binary ops, with a reorder node
//      where a blocked blob meets a kernel that reads plain memory and
//      before a return (of the job, or of a segment);
//   3. precision (opts.bf16): convolutions in bfloat16 with float32
//      accumulation, their outputs kept in bfloat16 along the chain,
//      float32 wherever a blob leaves it.
// It replaces nodes' primitives with cpu/layout_ops.h kernels, appends the
// new nodes and blobs to the graph, rewrites `b.order`, and sets
// `b.layout_bytes`. Weights are variables, Constant ops or values folded
// while specializing (b.constants): prepared once (again when a variable
// changes). With opts.fusion off it does nothing: the graph as written is
// the reference its tests compare with; for train jobs it runs
// train_layouts instead. oneDNN picks
// formats for the job's thread count when it is fixed, else for one thread.
// Shared by the two layout passes: a new blob with `like`'s spec, named
// after it plus `suffix`; and a one-input node `op` computing blob `to`
// from `from`, appended to the graph and to `order`.
int add_blob_like(Graph& g, int like, const std::string& suffix);
void append_node(Graph& g, std::shared_ptr<Primitive> op, int from, int to, std::vector<int>& order);

// The layouts pass of train jobs (train_layout.cpp, run by layouts() when
// opts.fusion is on): keeps the activations between convolutions (their
// three passes) and 2x2 stride-2 max poolings (forward and gradient) in
// oneDNN's nChw16c, where their channels are a multiple of 16, by giving
// those nodes the with_blocked variants of their primitives; a reorder
// node where a blocked blob meets an op that reads plain memory, or a
// plain blob enters a blocked pooling gradient. Returns and the blobs of
// other ops stay plain.
void train_layouts(PlanBuild& b);

// ---- specialization (jobs whose shapes are known at call time) ----

// A program's graph specialized for concrete shapes, up to the first node
// whose output shapes depend on values not known yet (`cut`).
struct Specialized {
  std::shared_ptr<Graph> graph;  // the nodes before `cut` have concrete specs
  std::map<int, Tensor> known;   // blob id -> value folded while specializing
  int cut = -1;                  // node id where specialization stopped; -1: the whole graph
  int start = 0;                 // the first node this specialization walked
};

// Specializes `from` (the program's graph, or an earlier specialization that
// stopped at `start - 1`) from node `start` on, `given` holding the concrete
// specs of blobs already decided (placeholders, a cut op's outputs).
// Errors name the node and its op.
Specialized specialize(const Graph& from, const std::map<int, Tensor>& known, int start,
                       const std::map<int, TensorSpec>& given);

// Whether the ops of a node kind are folded even when their inputs' values
// are unknown (they read only shapes: shape, size).
bool reads_only_shapes(const Primitive& op);

}  // namespace jobflow::compiler
