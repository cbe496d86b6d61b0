/* jobfunction's job loading. See jobfunction_load.h. */
#include "jobfunction_load.h"

#include "element_util.h"
#include "tensor_caps.h"

#include <jobflow/backend.h>
#include <jobflow/onnx.h>

#include <algorithm>
#include <exception>
#include <filesystem>

#define GST_CAT_DEFAULT jobfunction_debug

namespace jobflow::gst {

namespace fs = std::filesystem;

GType function_loss_get_type() {
  static GType type = 0;
  static const GEnumValue values[] = {
      {kLossNone, "No loss: the job as its file defines it (a train job file brings its own)", "none"},
      {kLossSparseSoftmaxCrossEntropy,
       "Softmax cross-entropy after the first output; adds an int32 labels placeholder",
       "sparse_softmax_cross_entropy"},
      {kLossMse, "Mean squared error after the first output; adds a targets placeholder", "mse"},
      {0, nullptr, nullptr}};
  return enum_type(&type, "GstJobFunctionLoss", values);
}

const char* function_loss_nick(FunctionLoss loss) {
  switch (loss) {
    case kLossSparseSoftmaxCrossEntropy: return "sparse_softmax_cross_entropy";
    case kLossMse: return "mse";
    case kLossNone: break;
  }
  return "none";
}

namespace {

const GEnumValue kDeviceValues[] = {
    {kDeviceCpu, "The CPU", "cpu"},
    {kDeviceGpu, "The CUDA device (the CPU, with a warning, when there is none)", "gpu"},
    {kDeviceCuda, "The same as gpu", "cuda"},
    {kDeviceGpu0, "CUDA device 0 (the only one used for now)", "gpu:0"},
    {kDeviceCuda0, "The same as gpu:0", "cuda:0"},
    {0, nullptr, nullptr}};

const GEnumValue kPrecisionValues[] = {
    {kPrecisionAuto, "The job file's jobflow.precision, else fp32", "auto"},
    {kPrecisionFp32, "float32 throughout", "fp32"},
    {kPrecisionBf16, "Convolutions in bfloat16 with float32 accumulation where it is faster (AMX, fast AVX512_BF16)", "bf16"},
    {0, nullptr, nullptr}};

/* The nick of `v` in `values`, whose entries are 0, 1, ... in order. */
template <size_t N>
const char* nick_of(const GEnumValue (&values)[N], int v) {
  return v >= 0 && static_cast<size_t>(v) + 1 < N ? values[v].value_nick : values[0].value_nick;
}

}  // namespace

GType function_device_get_type() {
  static GType type = 0;
  return enum_type(&type, "GstJobFunctionDevice", kDeviceValues);
}

const char* function_device_nick(FunctionDevice device) { return nick_of(kDeviceValues, device); }

GType function_precision_get_type() {
  static GType type = 0;
  return enum_type(&type, "GstJobFunctionPrecision", kPrecisionValues);
}

const char* function_precision_nick(FunctionPrecision precision) { return nick_of(kPrecisionValues, precision); }

namespace {

/* The property that sets LoadOptions field `option`, and its value. */
LoadError option_error(const FunctionSettings& s, const onnx::OptionError& e) {
  const std::string& o = e.option();
  if (o == "loss") return {"loss", function_loss_nick(s.loss), e.what()};
  if (o == "optimizer") return {"optimizer", s.optimizer, e.what()};
  if (o == "checkpoint") return {"checkpoint", s.checkpoint, e.what()};
  if (o == "device") return {"device", function_device_nick(s.device), e.what()};
  if (o == "precision") return {"precision", function_precision_nick(s.precision), e.what()};
  return {"job", s.job, e.what()};  // a field the element does not set
}

LoadError job_error(const FunctionSettings& s, const std::exception& e) {
  if (const auto* o = dynamic_cast<const onnx::OptionError*>(&e)) return option_error(s, *o);
  return {"job", s.job, e.what()};
}

}  // namespace

std::shared_ptr<const LoadedJob> load_job(GstElement* element, const FunctionSettings& s) {
  if (s.job.empty()) throw LoadError{"job", "", "no job file set (job=FILE.onnx)"};
  if (!fs::exists(s.job)) throw LoadError{"job", s.job, "no such file"};
  onnx::LoadOptions opts;
  opts.device = function_device_nick(s.device);
  opts.max_in_flight = s.max_in_flight;
  opts.num_threads = static_cast<int>(s.num_threads);
  opts.precision = s.precision == kPrecisionAuto ? "" : function_precision_nick(s.precision);
  if (s.loss != kLossNone || !s.optimizer.empty()) {
    if (s.loss == kLossNone)
      throw LoadError{"loss", function_loss_nick(s.loss), "optimizer is set but loss is not: a train job needs both"};
    if (s.optimizer.empty()) throw LoadError{"optimizer", "", "loss is set but optimizer is not: a train job needs both"};
    opts.type = Train;
    opts.loss = function_loss_nick(s.loss);
    opts.optimizer = s.optimizer;
  }
  /* A bad JOBFLOW_BF16 is the precision's error, before any load. */
  if (s.precision == kPrecisionBf16) {
    try {
      bf16_fallback();
    } catch (const std::exception& e) {
      throw LoadError{"precision", "bf16", e.what()};
    }
  }
  Device device;
  if (std::string why; !parse_device(opts.device, &device, &why))
    throw LoadError{"device", opts.device, why};  // a choice parse_device() refuses: the enum and it disagree

  /* One load in the normal case: with the checkpoint when there is one to
   * load. Only when that fails is the job loaded alone, to tell whether
   * the job (or the setting the error names) or the checkpoint is at fault. */
  auto load = [&](bool with_checkpoint) {
    opts.checkpoint = with_checkpoint ? s.checkpoint : "";
    return onnx::load(s.job, opts);
  };
  const bool ckpt_dir = !s.checkpoint.empty() && fs::is_directory(s.checkpoint);
  if (!s.checkpoint.empty() && !ckpt_dir && fs::exists(s.checkpoint))
    throw LoadError{"checkpoint", s.checkpoint, "not a folder (a checkpoint is a folder, OneFlow's layout)"};
  const bool use_ckpt = ckpt_dir && !fs::is_empty(s.checkpoint);

  auto l = std::make_shared<LoadedJob>();
  l->job_path = s.job;
  try {
    l->job = load(use_ckpt);
  } catch (const std::exception& e) {
    if (!use_ckpt) throw job_error(s, e);
    try {
      load(false);
    } catch (const std::exception& alone) {
      throw job_error(s, alone);
    }
    throw LoadError{"checkpoint", s.checkpoint, e.what()};
  }
  if (use_ckpt) l->checkpoint = s.checkpoint;
  const Signature& sig = l->job->signature();
  if (!s.function.empty() && s.function != sig.job_name)
    throw LoadError{"function", s.function, "the job file '" + s.job + "' holds the job function '" + sig.job_name +
                                                "' (a job file holds one job function)"};
  l->train = sig.type == Train;
  if (!s.checkpoint.empty() && !use_ckpt) {
    if (!l->train && ckpt_dir) {
      try {
        load(true);  // the engine says what the empty folder lacks
      } catch (const std::exception& e) {
        throw LoadError{"checkpoint", s.checkpoint, e.what()};
      }
    }
    if (!l->train)
      throw LoadError{"checkpoint", s.checkpoint,
                      std::string(ckpt_dir ? "an empty folder" : "no such folder") +
                          "; a predict job needs trained variables (train first, or unset checkpoint to use the job "
                          "file's own)"};
    GST_INFO_OBJECT(element, "checkpoint %s is %s: training starts from the job file's variables",
                    s.checkpoint.c_str(), ckpt_dir ? "an empty folder" : "not there yet");
  }
  if (sig.inputs.size() > static_cast<size_t>(kMaxTensors) || sig.outputs.size() > static_cast<size_t>(kMaxTensors))
    throw LoadError{"job", s.job, "more than 16 placeholders or returns (other/tensors carries at most 16)"};
  if (sig.outputs.empty()) throw LoadError{"job", s.job, "the job returns nothing: there is nothing to push"};
  for (const TensorSpec& t : sig.inputs) l->in_ranks.push_back(t.shape.size());
  for (const TensorSpec& t : sig.outputs) l->out_ranks.push_back(t.shape.size());
  /* Adaptive batching: a predict job whose placeholders and returns all
   * have dim 0 known per call (the batch). */
  auto dynamic_batch = [](const std::vector<TensorSpec>& specs) {
    return !specs.empty() && std::all_of(specs.begin(), specs.end(), [](const TensorSpec& t) {
      return !t.shape.empty() && t.shape[0] == kDynamic;
    });
  };
  l->dynamic_batch = !l->train && dynamic_batch(sig.inputs) && dynamic_batch(sig.outputs);
  /* What the job declares, not what its returns look like. */
  if (l->train) l->loss_index = sig.loss_output;
  l->labels_index = sig.accuracy_labels;
  l->logits_index = sig.accuracy_logits;
  bool fell_back = false;
  backend_for(device.tag, &fell_back);
  if (fell_back)
    GST_ELEMENT_WARNING(element, RESOURCE, SETTINGS,
                        ("device=%s: this build or machine has no CUDA device; the job runs on the CPU",
                         opts.device.c_str()),
                        (nullptr));
  /* bf16 asked for (the property, or the job file under auto) but float32
   * here: the engine's one stderr line is not enough for an application
   * that reads the bus. */
  if (l->job->definition().bf16) {
    std::string why;
    try {
      why = bf16_fallback();
    } catch (const std::exception& e) {
      throw LoadError{"precision", function_precision_nick(s.precision), e.what()};
    }
    if (!why.empty())
      GST_ELEMENT_WARNING(element, RESOURCE, SETTINGS,
                          ("%s: %s; the job runs in float32",
                           s.precision == kPrecisionBf16 ? "precision=bf16" : "the job file's jobflow.precision=bf16",
                           why.c_str()),
                          (nullptr));
  }
  GST_INFO_OBJECT(element, "loaded %s: %s", s.job.c_str(), sig.str().c_str());
  return l;
}

void post_load_error(GstElement* element, const LoadError& e) {
  if (std::string(e.property) == "checkpoint")
    GST_ELEMENT_ERROR(element, RESOURCE, OPEN_READ, ("checkpoint=\"%s\": %s", e.value.c_str(), e.message.c_str()),
                      (nullptr));
  else if (std::string(e.property) == "job" && e.message == "no such file")
    GST_ELEMENT_ERROR(element, RESOURCE, NOT_FOUND, ("job=\"%s\": no such file", e.value.c_str()), (nullptr));
  else
    GST_ELEMENT_ERROR(element, RESOURCE, SETTINGS, ("%s=\"%s\": %s", e.property, e.value.c_str(), e.message.c_str()),
                      (nullptr));
}

}  // namespace jobflow::gst
