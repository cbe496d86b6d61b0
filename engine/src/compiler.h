// compiler.h (internal) — from a job's graph to the Plans that run it.
//
// A job is a Program: its graph, whose dims may be kDynamic. A job whose
// inputs are all static and whose ops all know their output shapes from
// their input shapes has exactly one Plan, compiled at definition. Any
// other job compiles a Plan per combination of call shapes, kept in an LRU
// cache (plan_cache.cpp): the graph is specialized to the call's shapes
// first (compiler/specialize.cpp), and a data-dependent op (nonzero, a
// reshape to a computed shape) cuts the call into segments, each a Plan.
//
// Plan::compile runs the passes of compiler/passes.h:
//   0. place: nodes placed on a device without a usable backend ("gpu"
//      without CUDA) are placed on the CPU, so the passes below treat
//      them as CPU nodes;
//   1. prune: keep the nodes the returns and the updates need;
//   2. fuse: matmul/conv -> bias_add -> relu become one node (oneDNN
//      post-ops / a GEMM with bias), when the intermediate blobs have no
//      other reader;
//   3. order: optimizer updates run after every other node of the step;
//   4. layouts (predict jobs on the CPU): batch norm folded into the
//      convolution before it, element-wise ops and residual adds fused as
//      post-ops, oneDNN's blocked formats kept along chains with reorders
//      where they end, and with FunctionConfig::enable_auto_mixed_precision
//      convolutions in bfloat16 (compiler/layout.cpp). A plan compiled per
//      call shape gets them too: the passes see concrete shapes there;
//   5. plan memory: every intermediate blob gets an offset in one arena,
//      reusing space between blobs whose lifetimes do not overlap (views
//      such as reshape share their input's bytes); variables are bound to
//      the session's tensors and placeholders to the call's inputs;
//   6. bind: each node gets its backend and its preallocated tensor views,
//      so a call allocates nothing but the returned tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "jobflow/graph.h"
#include "jobflow/optimizer.h"
#include "jobflow/primitive.h"
#include "jobflow/runtime.h"

namespace jobflow {

class Backend;
class Plan;
namespace compiler {
struct PlanBuild;
std::shared_ptr<Plan> bind(PlanBuild& b);
}  // namespace compiler
namespace internal { struct VariableEntry; }

struct PlanOptions {
  std::string job_name;
  JobType type = JobType::Predict;
  bool fusion = true;
  // FunctionConfig::enable_auto_mixed_precision: convolutions in bfloat16
  // (compiler/layout.cpp) where bf16 is usable here (cpu::bf16_usable:
  // Plan::compile clears it elsewhere).
  bool bf16 = false;
  // The job's fixed OpenMP thread count (FunctionConfig::num_threads or
  // $JOBFLOW_NUM_THREADS); 0: chosen per call (cpu/threads.h).
  int threads = 0;
  uint64_t seed = 0;
  optimizer::Scheduler schedule;  // train jobs
  // Train jobs: the session variable that counts their steps (OneFlow's
  // "System-Train-TrainStep-<job>", int64 (1,)); the schedule reads it, each
  // step adds one, and checkpoints save and restore it with the weights.
  std::string step_variable;
  // A plan of the plan cache: the call shapes it was compiled for, as
  // describe() and the profile print them ("at x=(3, 1, 28, 28)").
  std::string variant;
};

class Plan {
 public:
  // `inputs`: placeholder blob ids in flat order; `outputs`: returned blob
  // ids; `updates`: node ids of optimizer updates.
  static std::shared_ptr<Plan> compile(std::shared_ptr<Graph> g, std::vector<int> inputs, std::vector<int> outputs,
                                       std::vector<int> updates, PlanOptions opts);
  // The same passes on a plan under construction (the plan cache's
  // specialized graphs: constants folded, a node limit).
  static std::shared_ptr<Plan> compile(compiler::PlanBuild& b);
  // One call: binds inputs, runs every node, copies the returns out. Not
  // reentrant: the runtime calls it from one thread.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);

  const Graph& graph() const { return *g_; }
  size_t arena_bytes() const { return arena_bytes_; }
  // Sum of all intermediate blob sizes (what a plan without reuse needs).
  size_t unshared_bytes() const { return unshared_bytes_; }
  size_t num_nodes() const { return steps_.size(); }
  // Floating-point operations of one call, estimated from the convolutions
  // and matrix products (2 per multiply-add) and one per element written
  // by the other nodes: what the runtime sizes a job's thread team by.
  double flops_per_call() const { return flops_; }
  // Steps run: the step variable's value for train jobs, else the calls.
  int64_t steps_run() const;
  void set_steps_run(int64_t s);
  // One line per node: name, op, attributes, shapes, backend; the header
  // line gives the arena size.
  std::string describe() const;
  // Ops executed, in order (for tests: fusion results).
  std::vector<std::string> op_sequence() const;
  const PlanOptions& options() const { return opts_; }
  // Outputs a step writes straight into the returned tensor (for tests).
  int outputs_written_directly() const;
  // Inputs their producers write in place inside their consumer's output
  // (Primitive::input_within_output; for tests).
  int inputs_in_place() const { return inputs_in_place_; }
  // With JOBFLOW_PROFILE=1 in the environment, time spent per node is
  // accumulated and printed to stderr when the plan is destroyed.
  ~Plan();
  std::string profile_report() const;

 private:
  struct Step {
    int node = -1;
    const Primitive* op = nullptr;
    const Backend* backend = nullptr;
    std::vector<Tensor> in, out;
  };
  struct Patch {  // a placeholder's tensor is set per call
    int step, slot, input;
    bool is_output;
    Shape shape;
  };
  friend std::shared_ptr<Plan> compiler::bind(compiler::PlanBuild& b);
  Plan() = default;

  std::shared_ptr<Graph> g_;
  PlanOptions opts_;
  std::vector<int> inputs_, outputs_;
  std::vector<Step> steps_;
  std::vector<Patch> patches_;
  std::vector<Tensor> out_views_;       // per output; undefined = from an input, or written directly (out_direct_)
  std::vector<int> out_from_input_;     // per output; -1 or placeholder index
  // The memory of results their callers have let go of (at most two
  // buffers per output), handed back by the results' own deleters:
  // result_memory() takes from it.
  struct ResultPool;
  std::shared_ptr<ResultPool> results_;
  // Per output written by its step straight into the returned tensor (a
  // returned map's reorder out of the chain's format: no copy out of the
  // arena after it): that step and output slot, else {-1, -1}.
  std::vector<std::pair<int, int>> out_direct_;
  // A tensor for output i's result: in the memory of a result of that
  // output its caller has let go of, else fresh (uninitialized).
  Tensor result_memory(size_t i, const Shape& shape, DType dtype);
  void init_results();  // an empty pool for outputs_
  std::vector<Shape> out_shapes_;       // per output (a view of an input may reshape it)
  std::vector<DType> out_dtypes_;       // per output
  std::vector<std::shared_ptr<void>> variables_;  // entries kept alive (opaque)
  std::vector<std::shared_ptr<void>> written_;    // entries the steps change (their version is bumped per call)
  std::vector<internal::VariableEntry*> held_;  // what a step holds (HeldVariables), step variable included
  std::shared_ptr<void> step_var_;                // the step variable's entry (train jobs)
  std::shared_ptr<void> arena_;
  size_t arena_bytes_ = 0, unshared_bytes_ = 0;
  int inputs_in_place_ = 0;
  int64_t step_ = 0;  // calls run (the step of jobs without a step variable)
  int64_t runs_ = 0;  // calls of this plan (profiles)
  bool profile_ = false;
  bool profile_cpu_ = false;  // JOBFLOW_PROFILE=cpu: the process's CPU time, not the wall clock
  bool bf16_ = false;  // opts.bf16 after Plan::compile's cpu::bf16_usable()
  double flops_ = 0;
  std::vector<double> prof_seconds_;  // per step
};

// ---------------------------------------------------------------------------
// A job's program: the Plan of a static job, or its graph and the cache of
// the Plans compiled per call shape (plan_cache.cpp).
struct PlanCacheLimits {
  size_t max_plans = 16;               // FunctionConfig::plan_cache_size
  size_t max_bytes = size_t{1} << 31;  // the sum of the cached plans' arenas
};

// The options of a job's plans (CheckPoint.save reads its step variable).
const PlanOptions& job_plan_options(const CompiledJob& job);

class Program {
 public:
  // A static job: one plan, compiled at definition.
  static std::shared_ptr<Program> of_plan(std::shared_ptr<Plan> plan);
  // A job with dynamic dims or data-dependent shapes: plans compiled per call
  // shape. `g` is the program's graph (kDynamic dims allowed).
  static std::shared_ptr<Program> dynamic(std::shared_ptr<Graph> g, std::vector<int> inputs, std::vector<int> outputs,
                                          std::vector<int> updates, PlanOptions opts, PlanCacheLimits limits);
  // Whether a job over `g` needs plans per call shape: a placeholder with a
  // dynamic dim, or an op whose output shapes depend on values.
  static bool needs_specialization(const Graph& g, const std::vector<int>& inputs);
  ~Program();

  // One call: picks (or compiles) the plan of the inputs' shapes and runs it.
  // `before` (may be empty) is called with each plan about to run (every
  // segment's): the runtime picks the call's thread count from its work.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs,
                          const std::function<void(const Plan&)>& before = nullptr);
  bool is_dynamic() const { return static_cast<bool>(dyn_); }
  // The static plan, or the plan of the latest call; Error when a dynamic
  // job has not been called yet.
  const Plan& plan() const;
  const PlanOptions& options() const;
  int64_t steps_run() const;
  void set_steps_run(int64_t s);
  std::string describe() const;
  PlanCacheStats cache_stats() const;

  struct Dynamic;  // plan_cache.cpp

 private:
  Program() = default;
  std::shared_ptr<Plan> static_;
  std::unique_ptr<Dynamic> dyn_;
};

}  // namespace jobflow
