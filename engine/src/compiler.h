// compiler.h (internal) — from a job's graph to a Plan that runs it.
//
// compile() runs once per job function:
//   1. prune: keep the nodes the returns and the updates need;
//   2. fuse: matmul/conv -> bias_add -> relu become one node (oneDNN
//      post-ops / a GEMM with bias), when the intermediate blobs have no
//      other reader;
//   3. order: optimizer updates run after every other node of the step;
//   4. plan memory: every intermediate blob gets an offset in one arena,
//      reusing space between blobs whose lifetimes do not overlap (views
//      such as reshape share their input's bytes); variables are bound to
//      the session's tensors and placeholders to the call's inputs;
//   5. bind: each node gets its backend and its preallocated tensor views,
//      so a call allocates nothing but the returned tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "jobflow/graph.h"
#include "jobflow/optimizer.h"
#include "jobflow/primitive.h"
#include "jobflow/runtime.h"

namespace jobflow {

class Backend;

struct PlanOptions {
  std::string job_name;
  JobType type = JobType::Predict;
  bool fusion = true;
  // FunctionConfig::enable_auto_mixed_precision: convolutions in bfloat16
  // (compiler/layout.cpp) where the CPU has AMX or AVX512_BF16.
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
};

class Plan {
 public:
  // `inputs`: placeholder blob ids in flat order; `outputs`: returned blob
  // ids; `updates`: node ids of optimizer updates.
  static std::shared_ptr<Plan> compile(std::shared_ptr<Graph> g, std::vector<int> inputs, std::vector<int> outputs,
                                       std::vector<int> updates, PlanOptions opts);
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
  struct Binding;  // per-blob storage decision (compiler.cpp)
  Plan() = default;

  std::shared_ptr<Graph> g_;
  PlanOptions opts_;
  std::vector<int> inputs_, outputs_;
  std::vector<Step> steps_;
  std::vector<Patch> patches_;
  std::vector<Tensor> out_views_;       // per output; undefined = from an input
  std::vector<int> out_from_input_;     // per output; -1 or placeholder index
  std::vector<Shape> out_shapes_;       // per output (a view of an input may reshape it)
  std::vector<std::shared_ptr<void>> variables_;  // entries kept alive (opaque)
  std::vector<std::shared_ptr<void>> written_;    // entries the steps change (their version is bumped per call)
  std::shared_ptr<void> step_var_;                // the step variable's entry (train jobs)
  std::shared_ptr<void> arena_;
  size_t arena_bytes_ = 0, unshared_bytes_ = 0;
  int64_t step_ = 0;  // calls run (the step of jobs without a step variable)
  bool profile_ = false;
  bool bf16_ = false;  // opts_.bf16 on a CPU with bfloat16 instructions
  double flops_ = 0;
  std::vector<double> prof_seconds_;  // per step
};

}  // namespace jobflow
