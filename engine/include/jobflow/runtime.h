// jobflow/runtime.h — a compiled job function, type-erased.
//
// CompiledJob is what the typed Job<> (job.h) and the GStreamer plugin call:
// flat lists of input and output tensors plus a Signature that says how they
// nest. One worker thread runs calls in order on the job's Plan; a callback
// thread delivers asynchronous results in call order. At most
// `max_in_flight` calls are queued or running: a new call blocks the caller
// beyond that (backpressure). sync() waits for every call made so far and
// rethrows the first error of an asynchronous call or callback.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "jobflow/graph.h"
#include "jobflow/tensor.h"

namespace jobflow {

enum class JobType { Train, Predict };
inline constexpr JobType Train = JobType::Train;
inline constexpr JobType Predict = JobType::Predict;
const char* job_type_name(JobType t);

// The nesting of placeholders and returns: a tree whose leaves index the
// flat tensor lists.
struct Structure {
  enum class Kind { Leaf, Tuple, List, Dict, None };
  // Leaf flavours mirror oneflow.typing: Numpy (one tensor), ListNumpy (one
  // tensor per device), ListListNumpy (per device, a list of tensors split
  // from dim 0 of the blob).
  enum class Leaf { Numpy, ListNumpy, ListListNumpy };
  Kind kind = Kind::None;
  Leaf leaf = Leaf::Numpy;
  int index = -1;                      // Leaf: flat position
  std::vector<Structure> children;     // Tuple/List/Dict
  std::vector<std::string> keys;       // Dict keys (ints are written as decimal text)
  std::string str() const;             // "(Numpy, [Numpy, Numpy], {x: Numpy})"
};

struct Signature {
  std::string job_name;
  JobType type = JobType::Predict;
  std::vector<std::string> input_names;   // placeholder names, flat
  std::vector<TensorSpec> inputs;         // flat; a dim not known before the call is kDynamic
  // Per input, per dim: the name of a dynamic dim (a symbolic ONNX dim such
  // as "batch"), or empty. Either empty or one entry per input.
  std::vector<std::vector<std::string>> input_dim_names;
  Structure input_structure;              // Tuple of the arguments
  std::vector<TensorSpec> outputs;        // flat
  // The returns' names where the job has them (an ONNX model's graph
  // outputs), one per flat output; empty otherwise.
  std::vector<std::string> output_names;
  Structure output_structure;
  bool callback = false;                  // declared Callback<T>
  // Train jobs: the flat index of the return that is the loss (the blob
  // given to minimize(); a job file's jobflow.loss), -1 when the job does
  // not return it.
  int loss_output = -1;
  // The returns that score an accuracy, when the job declares them
  // (FunctionConfig::accuracy; a job file's jobflow.accuracy): integer
  // labels (B,) and float logits (B, C), flat indices; -1 when not declared.
  int accuracy_labels = -1, accuracy_logits = -1;
  std::string str() const;
  // Input i's spec as str() prints it: dynamic dims by name, or "?".
  std::string input_str(size_t i) const;
};

// A job's plan cache (docs/architecture.md): a job with dynamic dims (or an
// op whose output shape depends on values) compiles a plan on the first call
// with each combination of input shapes and keeps the plans in an LRU cache
// bounded by FunctionConfig::plan_cache_size and the sum of their arenas.
// A static job has one plan, compiled at definition (dynamic = false).
struct PlanCacheStats {
  bool dynamic = false;
  uint64_t hits = 0, misses = 0, compiles = 0, evictions = 0;
  size_t plans = 0;  // held now
  size_t bytes = 0;  // their arenas
  double compile_seconds = 0;
};

class Plan;   // compiler.h
class Program;
struct PlanOptions;
struct CallState;
namespace detail { struct CompiledJobImpl; }
namespace optimizer { class Optimizer; }

// What a job was defined as, kept for export (job files) and inspection:
// the graph's first `forward_nodes` nodes are the body as written (before
// gradients and updates), `inputs`/`outputs` are blob ids in flat order.
struct JobDefinition {
  std::shared_ptr<const Graph> graph;
  size_t forward_nodes = 0;
  std::vector<int> inputs, outputs;
  int loss = -1;                                      // train jobs: the objective blob (before any mean)
  std::shared_ptr<const optimizer::Optimizer> optimizer;
  std::vector<std::string> trainable;                 // variables updated by the optimizer
  uint64_t seed = 0;
  std::string default_device = "cpu";
  bool bf16 = false;  // FunctionConfig::enable_auto_mixed_precision (the file's jobflow.precision)
  // An ordinary ONNX model loaded while the session holds other values under
  // its initializers' names (onnx::load) has variables of its own, named
  // "<variable_scope><initializer>" in the session, and so is its train step
  // counter when another job of its name has one; checkpoints and saved
  // files name them without the scope, and they leave the session when the
  // job is destroyed. Empty for every other job.
  std::string variable_scope;
  // The name a checkpoint or a saved file gives session variable `variable`.
  std::string saved_name(const std::string& variable) const {
    return !variable_scope.empty() && variable.rfind(variable_scope, 0) == 0 ? variable.substr(variable_scope.size())
                                                                              : variable;
  }
};

class CompiledJob {
 public:
  using Result = std::vector<Tensor>;
  using Done = std::function<void(Result)>;
  // Called with the result, or with the call's error (then the result is
  // empty); the error is the callee's to handle and is not kept for sync().
  using Finished = std::function<void(Result, std::exception_ptr)>;
  // Sees every successful call's result (by reference: no copy) and the
  // job's step count after it (from 1), on the thread that ran the call,
  // before the result goes to the caller. An exception it throws is the
  // call's error. Keep it short: the next call waits for it.
  using StepObserver = std::function<void(int64_t step, const Result& result)>;

  // num_threads: OpenMP threads of the worker (0 = $JOBFLOW_NUM_THREADS or
  // OpenMP's default).
  CompiledJob(std::shared_ptr<Plan> plan, Signature sig, size_t max_in_flight, int num_threads = 0);
  // A job whose plans are compiled per call shape (compiler.h).
  CompiledJob(std::shared_ptr<Program> program, Signature sig, size_t max_in_flight, int num_threads = 0);
  ~CompiledJob();  // delivers every pending result first
  CompiledJob(const CompiledJob&) = delete;
  CompiledJob& operator=(const CompiledJob&) = delete;

  const Signature& signature() const;
  const JobDefinition& definition() const;
  void set_definition(JobDefinition d);
  // The engine's own view (engine/src/compiler.h): the plan, or for a job
  // with shapes known at call time the plan of its latest call (valid until
  // the next call; an Error before the first).
  const Plan& plan() const;
  // The plan cache's counters (JOBFLOW_PROFILE=1 prints them when the job
  // is destroyed).
  PlanCacheStats plan_cache_stats() const;
  // What was compiled: one line per node after pruning and fusion (op,
  // attributes, shapes, backend), the header line giving the memory arena.
  // A job with shapes known at call time lists its program's nodes with
  // their symbolic shapes, then its latest plan.
  std::string describe() const;
  // Installs the step observer (FunctionConfig::summary_dir uses it). Set it
  // before the first call; it is not synchronized with calls.
  void set_step_observer(StepObserver o);

  // Checks count, shapes and dtypes; the error names the placeholder.
  void check_inputs(const std::vector<Tensor>& inputs) const;
  // Blocking call: runs after every earlier call, returns host tensors.
  Result run(std::vector<Tensor> inputs);
  // Returns at once (or when a slot frees); `finished` receives the result
  // or the call's error, so a caller that waits for each result is never
  // left waiting for one that failed. Runs in call order on the worker
  // (when no older result awaits delivery) or the callback thread: keep it
  // short. Inputs are held by reference until the step runs.
  void submit(std::vector<Tensor> inputs, Finished finished);
  // Lower level: the result is delivered when `attach` is given a callback
  // or abandoned; used by Callback<T> where the callback comes after the call.
  std::shared_ptr<CallState> launch(std::vector<Tensor> inputs);
  // Runs the call on the calling thread, after every call made before it
  // (and after every earlier submit()'s `finished` returned), and returns
  // its result (or throws its error). It counts as in flight
  // (sync() and CheckPoint.save wait for it) and as a step. For a caller
  // that already has a thread of its own for the job (the GStreamer
  // element's streaming task): no hand-off to the worker and back. The
  // calling thread's OpenMP thread count is set to the job's. The calling
  // thread keeps the OpenMP threads it started until it exits or calls
  // release_calling_thread() (below).
  Result run_here(std::vector<Tensor> inputs);
  static void attach(const std::shared_ptr<CallState>& c, Done done);
  static void abandon(const std::shared_ptr<CallState>& c);
  void sync();
  // As sync(), but waits at most `timeout`: false if calls are still in
  // flight then (nothing rethrown), true once every call has ended (after
  // rethrowing a stored error). For callers that must stay responsive while
  // they wait: the Python binding checks for Ctrl-C between two waits.
  bool sync_for(std::chrono::microseconds timeout);
  size_t max_in_flight() const;
  int num_threads() const;
  // Calls queued, running or awaiting their callback.
  size_t in_flight() const;
  // Callers blocked in run()/submit()/launch() because max_in_flight was reached.
  size_t blocked_callers() const;
  int64_t steps_run() const;
  // Continues a job saved after `steps` train steps (schedules, dropout
  // masks and Adam's bias correction depend on the step). Waits for calls
  // in flight first.
  void set_steps_run(int64_t steps);

 private:
  friend const PlanOptions& job_plan_options(const CompiledJob& job);
  std::unique_ptr<detail::CompiledJobImpl> impl_;  // the queue, threads and locks (runtime.cpp)
};

// Frees the OpenMP threads the calling thread started for the calls it ran
// itself (CompiledJob::run_here): they wait for its next parallel region,
// and libgomp lets every waiting thread spin only briefly once a process
// holds more OpenMP threads than the machine has cores, so a pooled
// thread that will not compute again (a GStreamer task going back to its
// pool when its element stops) would slow every job in the process that
// still computes (measured, 2 cores: LeNet batch 8 at 1.04 ms per call
// instead of 0.52). A later call builds the team anew. Call it outside any
// call of a job; a no-op with an OpenMP runtime other than GCC's libgomp.
void release_calling_thread();
// The calling thread, which runs calls itself (run_here), is about to wait
// for its next work: frees its OpenMP threads (release_calling_thread) if
// another thread of the process started a call with a team of its own
// since, once 50 ms have passed since that and since this thread's last
// call. Returns -1 when there is nothing to free (freed now, or never
// asked), else the microseconds until it is due: wait at most that long
// and call it again. A job's own worker does this by itself, so that a
// job that has gone quiet does not slow a busy one; GStreamer's
// jobfunction does it while its queue is dry. The thread that started a
// team last keeps it, and two jobs called in turn keep theirs (rebuilding
// teams at every turn costs more).
int64_t idle_calling_thread();

}  // namespace jobflow
