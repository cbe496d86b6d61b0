// jobflow/onnx.h — job files: job functions saved and loaded as ONNX.
//
// A Jobflow job file is an ONNX ModelProto:
//   graph inputs  = the job's placeholders (names, shapes, dtypes), flat;
//   graph outputs = the job's returns, flat, in order;
//   initializers  = the job's variables, by their names ("conv1-weight"),
//                   embedded or as ONNX external data pointing into a
//                   OneFlow checkpoint folder beside the file;
//   metadata_props under "jobflow.*" keys = what ONNX has no field for: the
//                   job type, the return and input structure, Callback, the
//                   loss, optimizer, schedule, trainable variables, step.
// docs/job-files.md documents every key. Ordinary ONNX models (e.g. from
// torch.onnx.export) load as predict jobs, or as train jobs when a loss and
// an optimizer are given in LoadOptions.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jobflow/runtime.h"

namespace jobflow::onnx {

struct SaveOptions {
  // Empty: variables are embedded as initializers. Otherwise a folder
  // (relative to the file's folder) where a OneFlow-layout checkpoint of the
  // job's variables is written, and the initializers point into it as ONNX
  // external data (each variable's `out` file is exactly its raw bytes).
  std::string checkpoint_dir;
  int64_t opset = 17;
  std::string producer = "jobflow";
};

// Writes `job` (any job defined with global_function, or loaded) to `path`,
// atomically (temp file + rename). Throws Error naming the op of the job
// that has no ONNX form.
void save(const CompiledJob& job, const std::string& path, const SaveOptions& options = {});

struct LoadOptions {
  // Override or supply the job type. An ordinary ONNX model is a predict
  // job unless `type` is Train (then `loss` and `optimizer` are required).
  std::optional<JobType> type;
  // Train jobs from ordinary models: the loss added after the model's
  // output named `loss_output` (empty: the first output):
  //   "sparse_softmax_cross_entropy" (adds an int32 "labels" placeholder of
  //   the output's batch size), "mse" (adds a "targets" placeholder of the
  //   output's shape).
  std::string loss;
  std::string loss_output;
  // "sgd:lr=0.1,momentum=0.9" or "adam:lr=0.001,beta1=0.9,beta2=0.999,eps=1e-8".
  std::string optimizer;
  // Variables: a OneFlow-layout checkpoint folder that overrides the file's
  // initializers (names must match: error naming the variable otherwise).
  std::string checkpoint;
  // Where the job runs: "cpu", "gpu" (or "cuda"), "cuda:0" (parse_device(),
  // jobflow/backend.h; device 0 is the only one for now).
  std::string device = "cpu";
  size_t max_in_flight = 4;
  // OpenMP threads of the job's worker (0 = $JOBFLOW_NUM_THREADS or OpenMP's default).
  int num_threads = 0;
  // "fp32" or "bf16" (FunctionConfig::enable_auto_mixed_precision); empty:
  // the file's jobflow.precision, else fp32.
  std::string precision;
  // Job name (default: the graph's name, or the file's stem).
  std::string name;
  // Limits for untrusted files: checked before anything is allocated.
  uint64_t max_file_bytes = uint64_t(4) << 30;
  uint64_t max_tensor_bytes = uint64_t(2) << 30;
  int64_t max_nodes = 1 << 20;
};

// A load error caused by a LoadOptions field rather than by the file:
// `option()` names the field ("loss", "optimizer", "loss_output"), so a
// caller can tell its user which setting to change without reading the
// message (the GStreamer element names its property).
struct OptionError : Error {
  OptionError(std::string option, const std::string& what) : Error(what), option_(std::move(option)) {}
  const std::string& option() const { return option_; }

 private:
  std::string option_;
};

// Loads a job file or an ordinary ONNX model into a compiled job whose
// variables live in the session (shared by name with other jobs). Errors
// (Error) name the file and what is wrong; an OptionError names the
// LoadOptions field at fault; unsupported ops are listed all at once with
// the node names where they occur.
std::shared_ptr<CompiledJob> load(const std::string& path, const LoadOptions& options = {});
// Same, from bytes in memory (`what` names the source in errors).
std::shared_ptr<CompiledJob> load_bytes(const std::string& bytes, const LoadOptions& options = {},
                                        const std::string& what = "<memory>");

// What `jobflow inspect` prints: signature, ops, parameters, FLOPs per call.
struct Inspection {
  Signature signature;
  std::vector<std::pair<std::string, int64_t>> op_counts;  // ONNX op type -> count
  int64_t parameters = 0;                                  // elements of the float initializers (weights)
  int64_t flops = 0;  // forward, multiply-adds counted as 2; -1 when shapes known only at call time decide it
  int64_t opset = 0;
  std::vector<std::pair<std::string, std::string>> metadata;  // jobflow.* keys
  // Inputs and outputs that are sequences or optional values, each carried
  // as one packed uint8 tensor (jobflow/sequence.h): name -> its type
  // ("sequence(float32, rank 1)").
  std::vector<std::pair<std::string, std::string>> packed;
  std::string str() const;
};
Inspection inspect(const std::string& path);

// ONNX op types this build can load (sorted).
std::vector<std::string> supported_ops();

}  // namespace jobflow::onnx
