// Shared by the ONNX importer and exporter (internal): dtype mapping, tensor
// <-> TensorProto, the jobflow.* metadata keys and the text forms of the
// structures and optimizers stored under them. docs/job-files.md is the
// user-facing description of the same format.
#pragma once

#include <onnx/onnx_pb.h>

#include <memory>
#include <string>

#include "jobflow/optimizer.h"
#include "jobflow/runtime.h"
#include "jobflow/tensor.h"

namespace jobflow::onnx_util {

inline constexpr const char* kVersion = "jobflow.version";            // "1"
inline constexpr const char* kJobType = "jobflow.job_type";           // "train" | "predict"
inline constexpr const char* kJobName = "jobflow.job_name";
inline constexpr const char* kInputStructure = "jobflow.input_structure";
inline constexpr const char* kOutputStructure = "jobflow.output_structure";
inline constexpr const char* kCallback = "jobflow.callback";          // "1" | "0"
inline constexpr const char* kLoss = "jobflow.loss";                  // tensor name of the objective
inline constexpr const char* kOptimizer = "jobflow.optimizer";        // optimizer_to_text()
inline constexpr const char* kSchedule = "jobflow.lr_schedule";       // schedule_to_text()
inline constexpr const char* kTrainable = "jobflow.trainable";        // comma-separated variable names
inline constexpr const char* kState = "jobflow.optimizer_state";      // comma-separated state variable names
inline constexpr const char* kStep = "jobflow.step";                  // train steps already run
inline constexpr const char* kSeed = "jobflow.seed";
inline constexpr const char* kDevice = "jobflow.device";
inline constexpr const char* kAccuracy = "jobflow.accuracy";          // "LABELS,LOGITS": flat return indices
inline constexpr const char* kPrecision = "jobflow.precision";        // "fp32" | "bf16"

// ONNX TensorProto.DataType <-> DType; unsupported types throw naming `what`.
int32_t to_onnx_dtype(DType t);
DType from_onnx_dtype(int32_t t, const std::string& what);

// Writes `t` as raw_data.
void tensor_to_proto(const Tensor& t, const std::string& name, ::onnx::TensorProto* out);
// Reads raw_data, typed repeated fields, or external data (location must
// stay inside `base_dir`; offset/length checked against the file). Sizes
// are validated against the dims before allocating; max_bytes caps it.
Tensor tensor_from_proto(const ::onnx::TensorProto& p, const std::string& base_dir, uint64_t max_bytes,
                         const std::string& what);

// Text forms kept in metadata_props. Round trip exactly.
//   structure: "(Numpy,[ListNumpy,Numpy],{x:{256:Numpy}})" with leaf indices
//   implied by order; None is "None".
std::string structure_to_text(const Structure& s);
Structure structure_from_text(const std::string& text);  // throws Error on bad text
//   optimizer: "sgd:momentum=0" / "adam:beta1=0.9,beta2=0.999,epsilon=1e-08"
//   schedule:  "piecewise_constant:boundaries=;values=0.1" / "cosine:base_lr=..,decay_steps=..,alpha=.."
//              / "linear_warmup:steps=..,start=..;then=<schedule>"
std::string optimizer_to_text(const optimizer::Optimizer& o);
std::string schedule_to_text(const optimizer::Scheduler& s);
optimizer::Scheduler schedule_from_text(const std::string& text);
//   Also accepts "lr=<x>" (a constant schedule, when `schedule` is empty) and
//   "eps" for "epsilon" (LoadOptions.optimizer); missing parameters take
//   OneFlow's defaults (SGD momentum 0.9; Adam 0.9, 0.999, 1e-8).
std::shared_ptr<optimizer::Optimizer> optimizer_from_text(const std::string& text, optimizer::Scheduler schedule);

// Shortest decimal text that parses back to the same double ("0.1", "1e-08",
// "nan", "inf"), and its inverse (throws Error naming `what`).
std::string number_to_text(double v);
double number_from_text(const std::string& s, const std::string& what);

}  // namespace jobflow::onnx_util
