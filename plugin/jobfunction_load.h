/* jobfunction's job loading (internal to the plugin): the element's
 * settings, the loaded job with what the element takes from its signature,
 * and load errors that name the property at fault. */
#pragma once

#include <gst/gst.h>

#include <jobflow/runtime.h>

#include <memory>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_EXTERN(jobfunction_debug);

namespace jobflow::gst {

/* The `loss` property: LoadOptions::loss's closed choices (GstJobFunctionLoss). */
enum FunctionLoss { kLossNone = 0, kLossSparseSoftmaxCrossEntropy = 1, kLossMse = 2 };
GType function_loss_get_type();
/* The choice's nick ("none", "mse", ...). */
const char* function_loss_nick(FunctionLoss loss);

/* The `device` property (GstJobFunctionDevice): every device string
 * parse_device() accepts (device 0 is the only one the CUDA backend uses,
 * so the choices are closed). The nick is the string given to the engine. */
enum FunctionDevice { kDeviceCpu = 0, kDeviceGpu = 1, kDeviceCuda = 2, kDeviceGpu0 = 3, kDeviceCuda0 = 4 };
GType function_device_get_type();
const char* function_device_nick(FunctionDevice device);

/* The `precision` property (GstJobFunctionPrecision): `auto` is the job
 * file's jobflow.precision (fp32 when it has none). */
enum FunctionPrecision { kPrecisionAuto = 0, kPrecisionFp32 = 1, kPrecisionBf16 = 2 };
GType function_precision_get_type();
const char* function_precision_nick(FunctionPrecision precision);

constexpr guint kDefaultMaxInFlight = 2;
constexpr guint kDefaultSaveInterval = 0;
constexpr guint kDefaultMessageInterval = 1;
constexpr guint kDefaultMaxBatch = 8;

/* jobfunction's properties. */
struct FunctionSettings {
  std::string job;
  std::string function;
  std::string checkpoint;
  FunctionDevice device = kDeviceCpu;
  FunctionLoss loss = kLossNone;
  std::string optimizer;
  guint max_in_flight = kDefaultMaxInFlight;
  guint max_batch = kDefaultMaxBatch;
  guint save_interval = kDefaultSaveInterval;
  guint message_interval = kDefaultMessageInterval;
  guint num_threads = 0;
  FunctionPrecision precision = kPrecisionAuto;
  std::string summary_dir;
};

/* A loaded job and what the element takes from its signature. */
struct LoadedJob {
  std::shared_ptr<CompiledJob> job;
  std::string job_path, checkpoint;  // what it was loaded from
  bool train = false;
  std::vector<size_t> in_ranks, out_ranks;
  /* A predict job whose placeholders and returns all have a dim 0 known
   * per call: buffers that queue up may run as one call (max-batch). */
  bool dynamic_batch = false;
  /* Train jobs: the return that is the loss (Signature::loss_output). */
  int loss_index = -1;
  /* The returns the job declares its accuracy (Signature::accuracy_*). */
  int labels_index = -1, logits_index = -1;
};

/* A load that failed: the property at fault, its value, and why. */
struct LoadError {
  const char* property;
  std::string value, message;
};

/* Loads the job `s` describes; throws LoadError naming the property at
 * fault. Posts a warning on `element` when the job falls back to the CPU,
 * and when it asks for bf16 and computes in float32 on this CPU
 * (jobflow::bf16_fallback()). */
std::shared_ptr<const LoadedJob> load_job(GstElement* element, const FunctionSettings& s);

/* Posts `e` as the element error: RESOURCE/NOT_FOUND for a missing job
 * file, RESOURCE/OPEN_READ for the checkpoint, RESOURCE/SETTINGS else. */
void post_load_error(GstElement* element, const LoadError& e);

}  // namespace jobflow::gst
