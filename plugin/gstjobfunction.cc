/* jobfunction. See gstjobfunction.h and docs/elements.md.
 *
 * Threads:
 *   sink chain   wraps the buffer's memories as tensors (no copy) and
 *                appends an item to the queue; blocks while `max-in-flight`
 *                items are queued. Serialized events are queued as items
 *                too, so they keep their place among the results.
 *   src task     pops items in order, runs each buffer's call itself
 *                (CompiledJob::run_here: no hand-off to the engine's
 *                worker), builds the output buffer (the result tensors as
 *                memories, no copy; timestamps and metas of the input) and
 *                pushes it; train jobs save the checkpoint here too.
 * Upstream is never blocked by compute: only by a full queue. */
#include "gstjobfunction.h"

#include "element_util.h"
#include "jobflow_meta.h"
#include "tensor_caps.h"

#include <jobflow/backend.h>
#include <jobflow/onnx.h>
#include <jobflow/optimizer.h>
#include <jobflow/session.h>
#include <jobflow/summary.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

GST_DEBUG_CATEGORY_STATIC(jobfunction_debug);
#define GST_CAT_DEFAULT jobfunction_debug

namespace {

using jobflow::CompiledJob;
using jobflow::DType;
using jobflow::Tensor;
using jobflow::TensorSpec;
namespace fs = std::filesystem;

constexpr guint kDefaultMaxInFlight = 2;
constexpr guint kDefaultSaveInterval = 0;
constexpr guint kDefaultMessageInterval = 1;
constexpr const char* kDefaultDevice = "cpu";

GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE(
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS("other/tensors, format=(string)static"));
GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE(
    "src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS("other/tensors, format=(string)static"));

struct Settings {
  std::string job;
  std::string function;
  std::string checkpoint;
  std::string device = kDefaultDevice;
  std::string loss;
  std::string optimizer;
  guint max_in_flight = kDefaultMaxInFlight;
  guint save_interval = kDefaultSaveInterval;
  guint message_interval = kDefaultMessageInterval;
  guint num_threads = 0;
  std::string precision;  // "" (the file's), fp32, bf16
  std::string summary_dir;
};

/* A loaded job and what the element derived from its signature. */
struct Loaded {
  std::shared_ptr<CompiledJob> job;
  std::string job_path, checkpoint;  // what it was loaded from
  bool train = false;
  std::vector<size_t> in_ranks, out_ranks;
  int loss_index = -1;                     // train: the first float return
  int labels_index = -1, logits_index = -1;  // a (labels (B,), logits (B, C)) pair: accuracy
};

/* The result of one call, filled by the engine's callback thread. */
struct Pending {
  std::vector<Tensor> inputs;   // views of the input buffer's memories
  std::vector<Tensor> result;
  std::exception_ptr error;
  guint64 step = 0;
  int64_t job_step = 0;         // the job's step count after this call (summary-dir's x axis)
  gint64 submitted_us = 0;
  std::shared_ptr<const Loaded> loaded;
};

struct Item {
  GstBuffer* buffer = nullptr;  // the input: timestamps and metas for the output
  GstEvent* event = nullptr;
  std::shared_ptr<Pending> pending;
};

struct Queue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Item> items;
  guint queued_buffers = 0;
  guint limit = kDefaultMaxInFlight;
  bool flushing = true;
  GstFlowReturn srcresult = GST_FLOW_FLUSHING;
  GstClockTime step_time = 0;  // moving average of one call's compute + wait (LATENCY)
  bool busy = false;           // the task is computing or pushing a buffer's result
  std::atomic<uint64_t> changes{0};  // bumped by notify(): what a polling waiter watches

  /* Call with `mu` held after changing the queue's state. */
  void notify() {
    changes.fetch_add(1, std::memory_order_release);
    cv.notify_all();
  }
  /* cv.wait(lk, ready), but first polls for up to jobflow::spin_us(): a
   * result or a slot usually comes within microseconds for small jobs, and
   * a sleep + wake-up costs tens of them. */
  template <class Ready>
  void wait(std::unique_lock<std::mutex>& lk, Ready ready) {
    if (!ready() && jobflow::spin_us() > 0) {
      const uint64_t seen = changes.load(std::memory_order_acquire);
      lk.unlock();
      jobflow::poll_while([&] { return changes.load(std::memory_order_acquire) == seen; });
      lk.lock();
    }
    cv.wait(lk, ready);
  }
};

/* Task-only running totals for messages, and the summary-dir writer
 * (made when the element starts, closed when it stops: the task is not
 * running then). */
struct Stats {
  guint64 steps = 0, samples = 0, correct = 0, counted = 0, loss_steps = 0;
  double loss_sum = 0;
  gint64 start_us = 0, last_msg_us = 0;
  guint64 samples_since_msg = 0;
  std::unique_ptr<jobflow::summary::FileWriter> summary;
  std::string summary_dir;
};

void clear_items(std::deque<Item>* items) {
  for (Item& it : *items) {
    if (it.buffer) gst_buffer_unref(it.buffer);
    if (it.event) gst_event_unref(it.event);
  }
  items->clear();
}

bool is_float(DType t) { return t == DType::Float32 || t == DType::Float64; }
bool is_int(DType t) { return t == DType::Int32 || t == DType::Int64; }

double mean_of(const Tensor& t) {
  const int64_t n = t.numel();
  if (n == 0) return NAN;
  double s = 0;
  if (t.dtype() == DType::Float32) {
    const float* p = t.data<float>();
    for (int64_t i = 0; i < n; ++i) s += p[i];
  } else {
    const double* p = t.data<double>();
    for (int64_t i = 0; i < n; ++i) s += p[i];
  }
  return s / static_cast<double>(n);
}

int64_t label_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::Int32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i];
}

/* Rows of `logits` (B, C) whose argmax equals `labels` (B,). */
guint64 count_correct(const Tensor& labels, const Tensor& logits) {
  const int64_t B = logits.shape()[0], C = logits.shape()[1];
  guint64 correct = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t best = 0;
    if (logits.dtype() == DType::Float32) {
      const float* row = logits.data<float>() + b * C;
      for (int64_t c = 1; c < C; ++c)
        if (row[c] > row[best]) best = c;
    } else {
      const double* row = logits.data<double>() + b * C;
      for (int64_t c = 1; c < C; ++c)
        if (row[c] > row[best]) best = c;
    }
    if (best == label_at(labels, b)) ++correct;
  }
  return correct;
}

}  // namespace

struct _GstJobFunction {
  GstElement parent;
  GstPad* sinkpad;
  GstPad* srcpad;
  GMutex settings_lock;
  Settings* settings;
  std::atomic<bool>* reload_pending;
  /* The current job: replaced by the chain thread (reload) and by state
   * changes; read by queries. Under loaded_lock. */
  GMutex loaded_lock;
  std::shared_ptr<const Loaded>* loaded;
  /* Streaming (chain thread) only. */
  std::vector<TensorSpec>* in_specs;  // negotiated; empty before caps
  int fps_n, fps_d;
  guint64 submitted;
  /* Chain and src task; owned. */
  Queue* queue;
  Stats* stats;  // src task only
};

G_DEFINE_TYPE(GstJobFunction, gst_job_function, GST_TYPE_ELEMENT)

namespace {

enum {
  PROP_0,
  PROP_JOB,
  PROP_FUNCTION,
  PROP_CHECKPOINT,
  PROP_SAVE_INTERVAL,
  PROP_DEVICE,
  PROP_MAX_IN_FLIGHT,
  PROP_LOSS,
  PROP_OPTIMIZER,
  PROP_MESSAGE_INTERVAL,
  PROP_NUM_THREADS,
  PROP_SUMMARY_DIR,
  PROP_PRECISION,
  PROP_SIGNATURE,
  PROP_STEPS,
};

enum { SIGNAL_STEP_DONE, SIGNAL_CHECKPOINT_SAVED, SIGNAL_RELOADED, N_SIGNALS };
guint signals[N_SIGNALS];

Settings get_settings(GstJobFunction* self) {
  g_autoptr(GMutexLocker) locker = g_mutex_locker_new(&self->settings_lock);
  return *self->settings;
}

/* One numeric setting, without copying the strings (per-buffer reads). */
guint setting(GstJobFunction* self, guint Settings::*field) {
  g_autoptr(GMutexLocker) locker = g_mutex_locker_new(&self->settings_lock);
  return self->settings->*field;
}

std::shared_ptr<const Loaded> current(GstJobFunction* self) {
  g_autoptr(GMutexLocker) locker = g_mutex_locker_new(&self->loaded_lock);
  return *self->loaded;
}

void set_current(GstJobFunction* self, std::shared_ptr<const Loaded> l) {
  std::shared_ptr<const Loaded> old;
  {
    g_autoptr(GMutexLocker) locker = g_mutex_locker_new(&self->loaded_lock);
    old = std::move(*self->loaded);
    *self->loaded = std::move(l);
  }
  // `old` is released here, outside the lock (its destructor waits for its calls).
}

/* Which property an error is about, and the message. */
struct LoadError {
  const char* property;
  std::string value, message;
};

/* Loads the job of `s`; throws LoadError naming the property at fault. */
std::shared_ptr<Loaded> load_job(GstJobFunction* self, const Settings& s) {
  if (s.job.empty()) throw LoadError{"job", "", "no job file set (job=FILE.onnx)"};
  if (!fs::exists(s.job)) throw LoadError{"job", s.job, "no such file"};
  jobflow::onnx::LoadOptions opts;
  opts.device = s.device;
  opts.max_in_flight = s.max_in_flight;
  opts.num_threads = static_cast<int>(s.num_threads);
  if (!s.precision.empty() && s.precision != "fp32" && s.precision != "bf16")
    throw LoadError{"precision", s.precision, "is not fp32 or bf16"};
  opts.precision = s.precision;
  if (!s.loss.empty() || !s.optimizer.empty()) {
    if (s.loss.empty()) throw LoadError{"loss", "", "optimizer is set but loss is not: a train job needs both"};
    if (s.optimizer.empty()) throw LoadError{"optimizer", "", "loss is set but optimizer is not: a train job needs both"};
    opts.type = jobflow::Train;
    opts.loss = s.loss;
    opts.optimizer = s.optimizer;
  }
  jobflow::Device device;
  std::string why;
  if (!jobflow::parse_device(s.device, &device, &why)) throw LoadError{"device", s.device, why};

  /* One load in the normal case: with the checkpoint when there is one to
   * load. Only when that fails is the job loaded alone, to tell whether
   * the job (loss, optimizer) or the checkpoint is at fault. */
  auto load = [&](bool with_checkpoint) {
    opts.checkpoint = with_checkpoint ? s.checkpoint : "";
    return jobflow::onnx::load(s.job, opts);
  };
  auto job_error = [&](const std::exception& e) {
    const std::string what = e.what();
    if (!s.loss.empty() && what.find("loss") != std::string::npos) return LoadError{"loss", s.loss, what};
    if (!s.optimizer.empty() && what.find("optimizer") != std::string::npos)
      return LoadError{"optimizer", s.optimizer, what};
    return LoadError{"job", s.job, what};
  };
  const bool ckpt_dir = !s.checkpoint.empty() && fs::is_directory(s.checkpoint);
  if (!s.checkpoint.empty() && !ckpt_dir && fs::exists(s.checkpoint))
    throw LoadError{"checkpoint", s.checkpoint, "not a folder (a checkpoint is a folder, OneFlow's layout)"};
  const bool use_ckpt = ckpt_dir && !fs::is_empty(s.checkpoint);

  auto l = std::make_shared<Loaded>();
  l->job_path = s.job;
  try {
    l->job = load(use_ckpt);
  } catch (const std::exception& e) {
    if (!use_ckpt) throw job_error(e);
    try {
      load(false);
    } catch (const std::exception& alone) {
      throw job_error(alone);
    }
    throw LoadError{"checkpoint", s.checkpoint, e.what()};
  }
  if (use_ckpt) l->checkpoint = s.checkpoint;
  const jobflow::Signature& sig = l->job->signature();
  if (!s.function.empty() && s.function != sig.job_name)
    throw LoadError{"function", s.function, "the job file '" + s.job + "' holds the job function '" + sig.job_name +
                                                "' (a job file holds one job function)"};
  l->train = sig.type == jobflow::Train;
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
    GST_INFO_OBJECT(self, "checkpoint %s is %s: training starts from the job file's variables", s.checkpoint.c_str(),
                    ckpt_dir ? "an empty folder" : "not there yet");
  }
  if (sig.inputs.size() > static_cast<size_t>(jobflow::gst::kMaxTensors) ||
      sig.outputs.size() > static_cast<size_t>(jobflow::gst::kMaxTensors))
    throw LoadError{"job", s.job, "more than 16 placeholders or returns (other/tensors carries at most 16)"};
  if (sig.outputs.empty()) throw LoadError{"job", s.job, "the job returns nothing: there is nothing to push"};
  for (const TensorSpec& t : sig.inputs) l->in_ranks.push_back(t.shape.size());
  for (const TensorSpec& t : sig.outputs) l->out_ranks.push_back(t.shape.size());
  for (size_t i = 0; i < sig.outputs.size(); ++i) {
    const TensorSpec& o = sig.outputs[i];
    if (l->train && l->loss_index < 0 && is_float(o.dtype)) l->loss_index = static_cast<int>(i);
    if (l->labels_index < 0 && is_int(o.dtype) && o.shape.size() == 1) l->labels_index = static_cast<int>(i);
    if (l->logits_index < 0 && is_float(o.dtype) && o.shape.size() == 2) l->logits_index = static_cast<int>(i);
  }
  if (l->labels_index >= 0 && l->logits_index >= 0 &&
      sig.outputs[l->labels_index].shape[0] != sig.outputs[l->logits_index].shape[0])
    l->labels_index = l->logits_index = -1;
  if (l->labels_index < 0 || l->logits_index < 0) l->labels_index = l->logits_index = -1;
  bool fell_back = false;
  jobflow::backend_for(device.tag, &fell_back);
  if (fell_back)
    GST_ELEMENT_WARNING(self, RESOURCE, SETTINGS,
                        ("device=%s: this build or machine has no CUDA device; the job runs on the CPU",
                         s.device.c_str()),
                        (nullptr));
  GST_INFO_OBJECT(self, "loaded %s: %s", s.job.c_str(), sig.str().c_str());
  return l;
}

void post_load_error(GstJobFunction* self, const LoadError& e) {
  if (std::string(e.property) == "checkpoint")
    GST_ELEMENT_ERROR(self, RESOURCE, OPEN_READ, ("checkpoint=\"%s\": %s", e.value.c_str(), e.message.c_str()),
                      (nullptr));
  else if (std::string(e.property) == "job" && e.message == "no such file")
    GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND, ("job=\"%s\": no such file", e.value.c_str()), (nullptr));
  else
    GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS, ("%s=\"%s\": %s", e.property, e.value.c_str(), e.message.c_str()),
                      (nullptr));
}

/* Caps for specs, with the framerate field left open (nullptr fps). */
GstCaps* open_caps(const std::vector<TensorSpec>& specs) {
  GstCaps* caps = jobflow::gst::caps_from_specs(specs, 0, 0);
  return caps;
}

void post_structure(GstJobFunction* self, GstStructure* s) {
  gst_element_post_message(GST_ELEMENT(self), gst_message_new_element(GST_OBJECT(self), s));
}

/* Saves `job`'s variables to `dir` (atomic), announces it with the steps
 * `job` has run once the save has waited for its calls in flight. */
void save_checkpoint(GstJobFunction* self, const std::string& dir, const CompiledJob& job, bool final) {
  jobflow::CheckPoint().save(dir, job);  // only this job's variables: the folder restarts this job
  const guint64 step = static_cast<guint64>(job.steps_run());
  GST_INFO_OBJECT(self, "checkpoint saved to %s at step %" G_GUINT64_FORMAT, dir.c_str(), step);
  post_structure(self, gst_structure_new(JOBFLOW_CHECKPOINT_MESSAGE_NAME, "path", G_TYPE_STRING, dir.c_str(), "step",
                                         G_TYPE_UINT64, step, "final", G_TYPE_BOOLEAN, final, nullptr));
  g_signal_emit(self, signals[SIGNAL_CHECKPOINT_SAVED], 0, dir.c_str(), step);
}

/* ------------------------------------------------------------ src task */

void strip_tensor_meta(GstBuffer* buf) {
  gst_buffer_foreach_meta(
      buf,
      [](GstBuffer*, GstMeta** meta, gpointer) -> gboolean {
        if ((*meta)->info->api == JOBFLOW_TENSOR_META_API_TYPE) *meta = nullptr;  // removes it
        return TRUE;
      },
      nullptr);
}

GstBuffer* output_buffer(const Item& item) {
  GstBuffer* out = jobflow::gst::buffer_from_tensors(item.pending->result);
  gst_buffer_copy_into(out, item.buffer,
                       static_cast<GstBufferCopyFlags>(GST_BUFFER_COPY_FLAGS | GST_BUFFER_COPY_TIMESTAMPS |
                                                       GST_BUFFER_COPY_META),
                       0, static_cast<gsize>(-1));
  strip_tensor_meta(out);
  std::vector<TensorSpec> specs;
  for (const Tensor& t : item.pending->result) specs.push_back({t.shape(), t.dtype()});
  jobflow::gst::add_tensor_meta(out, specs);
  return out;
}

/* The step-done signal, the jobflow-step message every message-interval
 * calls and, with summary-dir, the step's scalars. FALSE (and an element
 * error) when the event file cannot be written. */
bool report_step(GstJobFunction* self, const Item& item, guint message_interval) {
  Stats& st = *self->stats;
  const Loaded& l = *item.pending->loaded;
  const std::vector<Tensor>& r = item.pending->result;
  const gint64 now = g_get_monotonic_time();
  const auto& in0 = l.job->signature().inputs[0].shape;
  const guint64 batch = in0.empty() ? 1 : static_cast<guint64>(in0[0]);
  if (st.steps == 0) {
    /* The rate in messages counts from the first result on: the first
     * call also pays for the kernels' set-up. The summary counts it all. */
    st.start_us = item.pending->submitted_us;
    st.last_msg_us = now;
  } else {
    st.samples_since_msg += batch;
  }
  st.steps++;
  st.samples += batch;
  double loss = NAN, accuracy = NAN;
  if (l.loss_index >= 0) {
    loss = mean_of(r[l.loss_index]);
    st.loss_sum += loss;
    st.loss_steps++;
  }
  if (l.labels_index >= 0) {
    const guint64 c = count_correct(r[l.labels_index], r[l.logits_index]);
    const guint64 n = static_cast<guint64>(r[l.labels_index].numel());
    st.correct += c;
    st.counted += n;
    accuracy = n ? static_cast<double>(c) / static_cast<double>(n) : NAN;
  }
  if (g_signal_has_handler_pending(self, signals[SIGNAL_STEP_DONE], 0, FALSE))
    g_signal_emit(self, signals[SIGNAL_STEP_DONE], 0, item.pending->step, loss, accuracy);
  const bool message = message_interval != 0 && item.pending->step % message_interval == 0;
  double rate = NAN;
  if (message) {
    const double secs = static_cast<double>(now - st.last_msg_us) / 1e6;
    rate = secs > 0 ? static_cast<double>(st.samples_since_msg) / secs : 0.0;
  }
  if (st.summary) {
    /* The numbers of the signal and the message, at the job's step. */
    std::vector<std::pair<std::string, double>> values;
    if (!std::isnan(loss)) values.emplace_back("loss", loss);
    const auto& opt = l.job->definition().optimizer;
    if (l.train && opt && opt->scheduler().impl())
      values.emplace_back("learning_rate", opt->scheduler().lr(item.pending->job_step - 1));
    if (!std::isnan(accuracy)) values.emplace_back("accuracy", accuracy);
    if (message) values.emplace_back("images_per_second", rate);
    try {
      if (!values.empty()) {
        st.summary->scalars(values, item.pending->job_step);
        st.summary->flush();
      }
    } catch (const std::exception& e) {
      GST_ELEMENT_ERROR(self, RESOURCE, WRITE, ("summary-dir=\"%s\": %s", st.summary_dir.c_str(), e.what()),
                        (nullptr));
      return false;
    }
  }
  if (!message) return true;
  GstStructure* s = gst_structure_new(JOBFLOW_STEP_MESSAGE_NAME, "step", G_TYPE_UINT64, item.pending->step, "samples",
                                      G_TYPE_UINT64, st.samples, "images-per-second", G_TYPE_DOUBLE, rate, nullptr);
  if (!std::isnan(loss)) gst_structure_set(s, "loss", G_TYPE_DOUBLE, loss, nullptr);
  if (!std::isnan(accuracy))
    gst_structure_set(s, "accuracy", G_TYPE_DOUBLE, accuracy, "total-accuracy", G_TYPE_DOUBLE,
                      static_cast<double>(st.correct) / static_cast<double>(st.counted), nullptr);
  post_structure(self, s);
  st.last_msg_us = now;
  st.samples_since_msg = 0;
  return true;
}

void post_summary(GstJobFunction* self) {
  const Stats& st = *self->stats;
  const double secs = st.steps ? static_cast<double>(g_get_monotonic_time() - st.start_us) / 1e6 : 0.0;
  GstStructure* s = gst_structure_new(JOBFLOW_SUMMARY_MESSAGE_NAME, "steps", G_TYPE_UINT64, st.steps, "samples",
                                      G_TYPE_UINT64, st.samples, "seconds", G_TYPE_DOUBLE, secs, "images-per-second",
                                      G_TYPE_DOUBLE, secs > 0 ? static_cast<double>(st.samples) / secs : 0.0, nullptr);
  if (st.loss_steps) gst_structure_set(s, "mean-loss", G_TYPE_DOUBLE, st.loss_sum / st.loss_steps, nullptr);
  if (st.counted)
    gst_structure_set(s, "accuracy", G_TYPE_DOUBLE, static_cast<double>(st.correct) / st.counted, "correct",
                      G_TYPE_UINT64, st.correct, "counted", G_TYPE_UINT64, st.counted, nullptr);
  post_structure(self, s);
}

GstFlowReturn push_item(GstJobFunction* self, Item& item) {
  if (item.buffer) {
    Pending& p = *item.pending;
    if (p.error) {
      std::string what = "unknown error";
      try {
        std::rethrow_exception(p.error);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      GST_ELEMENT_ERROR(self, STREAM, FAILED,
                        ("job '%s' failed at call %" G_GUINT64_FORMAT, p.loaded->job->signature().job_name.c_str(),
                         p.step),
                        ("%s", what.c_str()));
      return GST_FLOW_ERROR;
    }
    if (!report_step(self, item, setting(self, &Settings::message_interval))) return GST_FLOW_ERROR;
    GstBuffer* out = output_buffer(item);
    gst_buffer_unref(item.buffer);
    item.buffer = nullptr;
    item.pending.reset();
    return gst_pad_push(self->srcpad, out);
  }
  GstEvent* event = item.event;
  item.event = nullptr;
  const GstEventType type = GST_EVENT_TYPE(event);
  if (type == GST_EVENT_EOS) {
    std::shared_ptr<const Loaded> l = current(self);
    const Settings s = get_settings(self);
    if (l && l->train && !s.checkpoint.empty() && self->stats->steps > 0) {
      try {
        save_checkpoint(self, s.checkpoint, *l->job, true);
      } catch (const std::exception& e) {
        GST_ELEMENT_ERROR(self, RESOURCE, WRITE, ("checkpoint=\"%s\": saving failed: %s", s.checkpoint.c_str(), e.what()),
                          (nullptr));
      }
    }
    post_summary(self);
    gst_pad_push_event(self->srcpad, event);
    return GST_FLOW_EOS;
  }
  /* A sticky event pushed while a flush starts is refused by the flushing
   * pad (and may not be stored there): give it back to the queue, whose
   * FLUSH_STOP keeps sticky events on the pad, and stop as flushing, not
   * as a not-negotiated error. */
  GstEvent* keep = jobflow::gst::is_sticky(event) ? gst_event_ref(event) : nullptr;
  const bool ok = gst_pad_push_event(self->srcpad, event);
  if (!ok && GST_PAD_IS_FLUSHING(self->srcpad)) {
    if (keep) {
      Queue* q = self->queue;
      std::lock_guard<std::mutex> lk(q->mu);
      Item back;
      back.event = keep;
      q->items.push_front(std::move(back));
    }
    return GST_FLOW_FLUSHING;
  }
  if (keep) gst_event_unref(keep);
  if (type == GST_EVENT_CAPS && !ok) return GST_FLOW_NOT_NEGOTIATED;
  return GST_FLOW_OK;
}

/* Runs the call of a buffer item on this thread (the src task: the
 * element's own streaming thread), after the calls before it; then, for
 * train jobs, saves the checkpoint when the step is a save-interval one. */
GstFlowReturn compute_item(GstJobFunction* self, Item& item) {
  Pending& p = *item.pending;
  const Loaded& l = *p.loaded;
  try {
    p.result = l.job->run_here(std::move(p.inputs));
  } catch (...) {
    p.error = std::current_exception();
  }
  p.inputs.clear();
  if (!p.error && self->stats->summary) p.job_step = l.job->steps_run();  // this task is the job's only caller
  {
    Queue* q = self->queue;
    const GstClockTime t = static_cast<GstClockTime>(g_get_monotonic_time() - p.submitted_us) * 1000;
    std::lock_guard<std::mutex> lk(q->mu);
    q->step_time = q->step_time ? (q->step_time * 7 + t) / 8 : t;
  }
  if (p.error || !l.train) return GST_FLOW_OK;
  const guint interval = setting(self, &Settings::save_interval);
  if (interval == 0 || p.step % interval != 0) return GST_FLOW_OK;
  const Settings s = get_settings(self);
  if (!s.checkpoint.empty()) {
    try {
      save_checkpoint(self, s.checkpoint, *l.job, false);
    } catch (const std::exception& e) {
      GST_ELEMENT_ERROR(self, RESOURCE, WRITE, ("checkpoint=\"%s\": saving failed: %s", s.checkpoint.c_str(), e.what()),
                        (nullptr));
      return GST_FLOW_ERROR;
    }
  }
  return GST_FLOW_OK;
}

void loop(gpointer user_data) {
  GstJobFunction* self = GST_JOB_FUNCTION(user_data);
  Queue* q = self->queue;
  Item item;
  {
    std::unique_lock<std::mutex> lk(q->mu);
    q->wait(lk, [&] { return q->flushing || !q->items.empty(); });
    if (q->flushing) {
      lk.unlock();
      gst_pad_pause_task(self->srcpad);
      return;
    }
    item = std::move(q->items.front());
    q->items.pop_front();
    if (item.buffer) {
      q->queued_buffers--;
      q->busy = true;
    }
    q->notify();
  }

  GstFlowReturn ret = GST_FLOW_OK;
  const bool was_buffer = item.buffer != nullptr;  // push_item takes the item's buffer and result
  try {
    if (item.buffer) ret = compute_item(self, item);
    if (ret == GST_FLOW_OK) ret = push_item(self, item);
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(self, CORE, FAILED, ("jobfunction failed"), ("%s", e.what()));
    ret = GST_FLOW_ERROR;
  }
  if (item.buffer) gst_buffer_unref(item.buffer);
  if (item.event) gst_event_unref(item.event);
  if (was_buffer) {
    std::lock_guard<std::mutex> lk(q->mu);
    q->busy = false;
    q->notify();
  }

  if (ret != GST_FLOW_OK) {
    {
      std::lock_guard<std::mutex> lk(q->mu);
      if (!q->flushing) q->srcresult = ret;
      q->notify();
    }
    gst_pad_pause_task(self->srcpad);
    if (ret == GST_FLOW_NOT_LINKED || ret < GST_FLOW_EOS) {
      if (ret != GST_FLOW_ERROR) GST_ELEMENT_FLOW_ERROR(self, ret);
      gst_pad_push_event(self->srcpad, gst_event_new_eos());
    }
  }
}

/* ----------------------------------------------------------- sink side */

/* Appends an item for the task; buffers wait while the queue is full.
 * Takes the item's references. */
GstFlowReturn enqueue(GstJobFunction* self, Item item) {
  Queue* q = self->queue;
  std::unique_lock<std::mutex> lk(q->mu);
  if (item.buffer)
    q->wait(lk, [&] { return q->flushing || q->srcresult != GST_FLOW_OK || q->queued_buffers < q->limit; });
  const GstFlowReturn ret = q->srcresult;
  if (ret != GST_FLOW_OK) {
    lk.unlock();
    if (item.buffer) gst_buffer_unref(item.buffer);
    if (item.event) gst_event_unref(item.event);
    return ret;
  }
  if (item.buffer) q->queued_buffers++;
  q->items.push_back(std::move(item));
  q->notify();
  return GST_FLOW_OK;
}

/* Why tensors `given` do not fit the job's placeholders ("" when they do),
 * naming the count or the placeholder, expected vs given; `source` says
 * who gives them ("upstream", "the stream"). */
std::string inputs_mismatch(const jobflow::Signature& sig, const std::vector<TensorSpec>& given, const char* source) {
  std::string why;
  if (given.size() != sig.inputs.size())
    why = "job '" + sig.job_name + "' takes " + std::to_string(sig.inputs.size()) + " tensors (" + sig.str() + "), " +
          source + " gives " + std::to_string(given.size());
  for (size_t i = 0; i < given.size() && i < sig.inputs.size(); ++i)
    if (given[i].shape != sig.inputs[i].shape || given[i].dtype != sig.inputs[i].dtype) {
      why += std::string(why.empty() ? "job '" + sig.job_name + "': " : "; ") + "placeholder '" +
             sig.input_names[i] + "' expects " + jobflow::spec_str(sig.inputs[i]) + ", " + source + " gives " +
             jobflow::spec_str(given[i]);
      break;
    }
  return why;
}

/* Applies a `job`/`checkpoint` change made while streaming. Chain thread. */
bool apply_reload(GstJobFunction* self) {
  const Settings s = get_settings(self);
  std::shared_ptr<const Loaded> old = current(self);
  {
    /* The buffers before this one run with the old job and variables:
     * wait until the task has pushed them all. */
    Queue* q = self->queue;
    std::unique_lock<std::mutex> lk(q->mu);
    q->wait(lk, [&] { return q->flushing || (q->queued_buffers == 0 && !q->busy); });
    if (q->flushing) return false;
  }
  if (old) old->job->sync();  // and any call of another caller
  std::shared_ptr<Loaded> l;
  try {
    l = load_job(self, s);
  } catch (const LoadError& e) {
    post_load_error(self, e);
    return false;
  }
  const auto& sig = l->job->signature();
  if (!self->in_specs->empty()) {
    const std::string why = inputs_mismatch(sig, *self->in_specs, "the stream");
    if (!why.empty()) {
      GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("job=\"%s\": the new job does not fit: %s", s.job.c_str(), why.c_str()),
                        (nullptr));
      return false;
    }
    if (!old || old->job->signature().outputs != sig.outputs) {
      Item caps;
      GstCaps* c = jobflow::gst::caps_from_specs(sig.outputs, self->fps_n, self->fps_d);
      caps.event = gst_event_new_caps(c);
      gst_caps_unref(c);
      if (enqueue(self, std::move(caps)) != GST_FLOW_OK) return false;
    }
  }
  set_current(self, l);
  GST_INFO_OBJECT(self, "reloaded job %s, checkpoint %s", s.job.c_str(), s.checkpoint.c_str());
  post_structure(self, gst_structure_new(JOBFLOW_RELOAD_MESSAGE_NAME, "job", G_TYPE_STRING, s.job.c_str(), "checkpoint",
                                         G_TYPE_STRING, s.checkpoint.c_str(), nullptr));
  g_signal_emit(self, signals[SIGNAL_RELOADED], 0, s.job.c_str(), s.checkpoint.c_str());
  return true;
}

GstFlowReturn chain(GstPad*, GstObject* parent, GstBuffer* buf) {
  GstJobFunction* self = GST_JOB_FUNCTION(parent);
  try {
    if (self->reload_pending->exchange(false) && !apply_reload(self)) {
      gst_buffer_unref(buf);
      return GST_FLOW_ERROR;
    }
    std::shared_ptr<const Loaded> l = current(self);
    if (!l || self->in_specs->empty()) {
      gst_buffer_unref(buf);
      GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("No caps before the first buffer"), (nullptr));
      return GST_FLOW_NOT_NEGOTIATED;
    }
    std::vector<Tensor> inputs;
    std::string error;
    if (!jobflow::gst::tensors_from_buffer(buf, *self->in_specs, &inputs, &error)) {
      GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("Buffer does not fit job '%s': %s",
                                               l->job->signature().job_name.c_str(), error.c_str()),
                        (nullptr));
      gst_buffer_unref(buf);
      return GST_FLOW_ERROR;
    }
    try {
      l->job->check_inputs(inputs);
    } catch (const std::exception& e) {
      GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("%s", e.what()), (nullptr));
      gst_buffer_unref(buf);
      return GST_FLOW_ERROR;
    }
    auto pending = std::make_shared<Pending>();
    pending->step = ++self->submitted;
    pending->loaded = l;
    pending->inputs = std::move(inputs);
    pending->submitted_us = g_get_monotonic_time();
    Item item;
    item.buffer = buf;
    item.pending = std::move(pending);
    return enqueue(self, std::move(item));  // the task computes it
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("jobfunction: %s", e.what()), (nullptr));
    return GST_FLOW_ERROR;
  }
}

/* Checks upstream's caps against the job's placeholders; queues the src caps. */
gboolean set_sink_caps(GstJobFunction* self, GstCaps* caps) {
  std::shared_ptr<const Loaded> l = current(self);
  if (!l) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("No job loaded (set job=FILE.onnx)"), (nullptr));
    return FALSE;
  }
  const auto& sig = l->job->signature();
  std::vector<TensorSpec> specs;
  std::string error;
  /* Parsed with the job's ranks (NNStreamer's rank padding), a wrong tensor
   * count or rank fails before the checks below; parse such caps as given
   * so the error names the count or the placeholder. */
  const bool fits = jobflow::gst::specs_from_caps(caps, &specs, &error, l->in_ranks);
  if (!fits && !jobflow::gst::specs_from_caps(caps, &specs, nullptr)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Invalid tensor caps: %s", error.c_str()), ("%" GST_PTR_FORMAT, caps));
    return FALSE;
  }
  const std::string why = inputs_mismatch(sig, specs, "upstream");
  if (!why.empty()) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("%s", why.c_str()), ("%" GST_PTR_FORMAT, caps));
    return FALSE;
  }
  if (!fits) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Invalid tensor caps: %s", error.c_str()), ("%" GST_PTR_FORMAT, caps));
    return FALSE;
  }
  *self->in_specs = specs;
  int fps_n = 0, fps_d = 1;
  const GstStructure* st = gst_caps_get_structure(caps, 0);
  if (!gst_structure_get_fraction(st, "framerate", &fps_n, &fps_d)) fps_n = 0, fps_d = 1;
  self->fps_n = fps_n;
  self->fps_d = fps_d;
  GstCaps* out = jobflow::gst::caps_from_specs(sig.outputs, fps_n, fps_d);
  GST_DEBUG_OBJECT(self, "%" GST_PTR_FORMAT " -> %" GST_PTR_FORMAT, caps, out);
  Item item;
  item.event = gst_event_new_caps(out);
  gst_caps_unref(out);
  return enqueue(self, std::move(item)) == GST_FLOW_OK;
}

gboolean sink_event(GstPad* pad, GstObject* parent, GstEvent* event) {
  GstJobFunction* self = GST_JOB_FUNCTION(parent);
  Queue* q = self->queue;
  try {
    switch (GST_EVENT_TYPE(event)) {
      case GST_EVENT_FLUSH_START: {
        const gboolean ok = gst_pad_push_event(self->srcpad, event);
        {
          std::lock_guard<std::mutex> lk(q->mu);
          q->flushing = true;
          q->srcresult = GST_FLOW_FLUSHING;
          q->notify();
        }
        gst_pad_pause_task(self->srcpad);
        return ok;
      }
      case GST_EVENT_FLUSH_STOP: {
        {
          std::lock_guard<std::mutex> lk(q->mu);
          /* Sticky events still queued (caps, tags, stream-start) stay on the
           * src pad so they precede the next buffer; results in flight, the
           * segment and EOS are dropped with the data. */
          for (Item& it : q->items) {
            if (!it.event) continue;
            const GstEventType type = GST_EVENT_TYPE(it.event);
            if (!jobflow::gst::is_sticky(it.event) || type == GST_EVENT_SEGMENT || type == GST_EVENT_EOS) continue;
            gst_pad_store_sticky_event(self->srcpad, it.event);
          }
          clear_items(&q->items);
          q->queued_buffers = 0;
          q->flushing = false;
          q->srcresult = GST_FLOW_OK;
        }
        const gboolean ok = gst_pad_push_event(self->srcpad, event);
        gst_pad_start_task(self->srcpad, loop, self, nullptr);
        return ok;
      }
      case GST_EVENT_CAPS: {
        GstCaps* caps;
        gst_event_parse_caps(event, &caps);
        const gboolean ok = set_sink_caps(self, caps);
        gst_event_unref(event);
        return ok;
      }
      default:
        break;
    }
    if (jobflow::gst::is_serialized(event)) {
      Item item;
      item.event = event;
      return enqueue(self, std::move(item)) == GST_FLOW_OK;
    }
    return gst_pad_event_default(pad, parent, event);
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(self, CORE, FAILED, ("jobfunction: event handling failed"), ("%s", e.what()));
    return FALSE;
  }
}

gboolean sink_query(GstPad* pad, GstObject* parent, GstQuery* query) {
  GstJobFunction* self = GST_JOB_FUNCTION(parent);
  switch (GST_QUERY_TYPE(query)) {
    case GST_QUERY_CAPS: {
      std::shared_ptr<const Loaded> l = current(self);
      return jobflow::gst::answer_caps_query(query, l ? open_caps(l->job->signature().inputs) : gst_pad_get_pad_template_caps(pad));
    }
    case GST_QUERY_ALLOCATION:
      return FALSE;  // the outputs are new tensors: downstream's pool says nothing about our inputs
    default:
      return gst_pad_query_default(pad, parent, query);
  }
}

gboolean src_query(GstPad* pad, GstObject* parent, GstQuery* query) {
  GstJobFunction* self = GST_JOB_FUNCTION(parent);
  switch (GST_QUERY_TYPE(query)) {
    case GST_QUERY_CAPS: {
      GstCaps* current_caps = gst_pad_get_current_caps(pad);
      if (current_caps) return jobflow::gst::answer_caps_query(query, current_caps);
      std::shared_ptr<const Loaded> l = current(self);
      return jobflow::gst::answer_caps_query(query, l ? open_caps(l->job->signature().outputs) : gst_pad_get_pad_template_caps(pad));
    }
    case GST_QUERY_LATENCY: {
      if (!gst_pad_peer_query(self->sinkpad, query)) return FALSE;
      gboolean live;
      GstClockTime min, max;
      gst_query_parse_latency(query, &live, &min, &max);
      Queue* q = self->queue;
      GstClockTime step;
      guint limit;
      {
        std::lock_guard<std::mutex> lk(q->mu);
        step = q->step_time;
        limit = q->limit;
      }
      /* A result leaves one call's time after its input at best, and waits
       * behind at most max-in-flight - 1 others. */
      min += step;
      if (GST_CLOCK_TIME_IS_VALID(max)) max += step * limit;
      GST_DEBUG_OBJECT(self, "latency: adding %" GST_TIME_FORMAT, GST_TIME_ARGS(step));
      gst_query_set_latency(query, live, min, max);
      return TRUE;
    }
    default:
      return gst_pad_query_default(pad, parent, query);
  }
}

gboolean src_activate_mode(GstPad* pad, GstObject* parent, GstPadMode mode, gboolean active) {
  GstJobFunction* self = GST_JOB_FUNCTION(parent);
  if (mode != GST_PAD_MODE_PUSH) return FALSE;
  Queue* q = self->queue;
  if (active) {
    {
      std::lock_guard<std::mutex> lk(q->mu);
      q->flushing = false;
      q->srcresult = GST_FLOW_OK;
      q->limit = std::max(1u, get_settings(self).max_in_flight);
    }
    return gst_pad_start_task(pad, loop, self, nullptr);
  }
  {
    std::lock_guard<std::mutex> lk(q->mu);
    q->flushing = true;
    q->srcresult = GST_FLOW_FLUSHING;
    q->notify();
  }
  const gboolean ok = gst_pad_stop_task(pad);
  std::lock_guard<std::mutex> lk(q->mu);
  clear_items(&q->items);
  q->queued_buffers = 0;
  return ok;
}

/* ------------------------------------------------------------- GObject */

void set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  GstJobFunction* self = GST_JOB_FUNCTION(object);
  bool reload = false;
  {
    g_autoptr(GMutexLocker) locker = g_mutex_locker_new(&self->settings_lock);
    Settings& s = *self->settings;
    auto str = [&] { const char* v = g_value_get_string(value); return std::string(v ? v : ""); };
    switch (prop_id) {
      case PROP_JOB: {
        std::string v = str();
        reload = v != s.job;
        s.job = std::move(v);
        break;
      }
      case PROP_CHECKPOINT: {
        std::string v = str();
        reload = v != s.checkpoint;
        s.checkpoint = std::move(v);
        break;
      }
      case PROP_FUNCTION: s.function = str(); break;
      case PROP_DEVICE: s.device = str().empty() ? kDefaultDevice : str(); break;
      case PROP_LOSS: s.loss = str(); break;
      case PROP_OPTIMIZER: s.optimizer = str(); break;
      case PROP_SAVE_INTERVAL: s.save_interval = g_value_get_uint(value); break;
      case PROP_MAX_IN_FLIGHT: s.max_in_flight = g_value_get_uint(value); break;
      case PROP_MESSAGE_INTERVAL: s.message_interval = g_value_get_uint(value); break;
      case PROP_NUM_THREADS: s.num_threads = g_value_get_uint(value); break;
      case PROP_PRECISION: s.precision = str(); break;
      case PROP_SUMMARY_DIR: s.summary_dir = str(); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  }
  /* A job is loaded (READY or above): reload at the next buffer. */
  if (reload && current(self)) self->reload_pending->store(true);
}

void get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GstJobFunction* self = GST_JOB_FUNCTION(object);
  if (prop_id == PROP_SIGNATURE || prop_id == PROP_STEPS) {
    std::shared_ptr<const Loaded> l = current(self);
    if (prop_id == PROP_SIGNATURE)
      g_value_set_string(value, l ? l->job->signature().str().c_str() : nullptr);
    else
      g_value_set_uint64(value, l ? static_cast<guint64>(l->job->steps_run()) : 0);
    return;
  }
  g_autoptr(GMutexLocker) locker = g_mutex_locker_new(&self->settings_lock);
  const Settings& s = *self->settings;
  auto opt = [](const std::string& v) { return v.empty() ? nullptr : v.c_str(); };
  switch (prop_id) {
    case PROP_JOB: g_value_set_string(value, opt(s.job)); break;
    case PROP_FUNCTION: g_value_set_string(value, opt(s.function)); break;
    case PROP_CHECKPOINT: g_value_set_string(value, opt(s.checkpoint)); break;
    case PROP_DEVICE: g_value_set_string(value, s.device.c_str()); break;
    case PROP_LOSS: g_value_set_string(value, opt(s.loss)); break;
    case PROP_OPTIMIZER: g_value_set_string(value, opt(s.optimizer)); break;
    case PROP_SAVE_INTERVAL: g_value_set_uint(value, s.save_interval); break;
    case PROP_MAX_IN_FLIGHT: g_value_set_uint(value, s.max_in_flight); break;
    case PROP_MESSAGE_INTERVAL: g_value_set_uint(value, s.message_interval); break;
    case PROP_NUM_THREADS: g_value_set_uint(value, s.num_threads); break;
    case PROP_PRECISION: g_value_set_string(value, s.precision.c_str()); break;
    case PROP_SUMMARY_DIR: g_value_set_string(value, opt(s.summary_dir)); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
  }
}

GstStateChangeReturn change_state(GstElement* element, GstStateChange transition) {
  GstJobFunction* self = GST_JOB_FUNCTION(element);
  switch (transition) {
    case GST_STATE_CHANGE_NULL_TO_READY: {
      try {
        set_current(self, load_job(self, get_settings(self)));
        self->reload_pending->store(false);
      } catch (const LoadError& e) {
        post_load_error(self, e);
        return GST_STATE_CHANGE_FAILURE;
      } catch (const std::exception& e) {
        GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS, ("job: %s", e.what()), (nullptr));
        return GST_STATE_CHANGE_FAILURE;
      }
      break;
    }
    case GST_STATE_CHANGE_READY_TO_PAUSED: {
      self->in_specs->clear();
      self->submitted = 0;
      *self->stats = Stats();
      const std::string dir = get_settings(self).summary_dir;
      if (!dir.empty()) {
        try {
          self->stats->summary = std::make_unique<jobflow::summary::FileWriter>(dir);
          self->stats->summary_dir = dir;
          GST_INFO_OBJECT(self, "TensorBoard events go to %s", self->stats->summary->path().c_str());
        } catch (const std::exception& e) {
          GST_ELEMENT_ERROR(self, RESOURCE, OPEN_WRITE, ("summary-dir=\"%s\": %s", dir.c_str(), e.what()), (nullptr));
          return GST_STATE_CHANGE_FAILURE;
        }
      }
      break;
    }
    default:
      break;
  }
  const GstStateChangeReturn ret = GST_ELEMENT_CLASS(gst_job_function_parent_class)->change_state(element, transition);
  if (ret == GST_STATE_CHANGE_FAILURE) return ret;
  switch (transition) {
    case GST_STATE_CHANGE_PAUSED_TO_READY: {
      /* The task is stopped; let the calls in flight finish (their
       * completions only touch the queue) so a restart starts clean. */
      std::shared_ptr<const Loaded> l = current(self);
      if (l) {
        try {
          l->job->sync();
        } catch (const std::exception& e) {
          GST_WARNING_OBJECT(self, "a call in flight failed while stopping: %s", e.what());
        }
      }
      self->stats->summary.reset();  // the task is stopped: close the event file
      break;
    }
    case GST_STATE_CHANGE_READY_TO_NULL:
      set_current(self, nullptr);
      break;
    default:
      break;
  }
  return ret;
}

void finalize(GObject* object) {
  GstJobFunction* self = GST_JOB_FUNCTION(object);
  delete self->loaded;
  delete self->settings;
  delete self->reload_pending;
  delete self->in_specs;
  delete self->stats;
  {
    Queue* q = self->queue;
    std::lock_guard<std::mutex> lk(q->mu);
    clear_items(&q->items);
  }
  delete self->queue;
  g_mutex_clear(&self->settings_lock);
  g_mutex_clear(&self->loaded_lock);
  G_OBJECT_CLASS(gst_job_function_parent_class)->finalize(object);
}

}  // namespace

static void gst_job_function_class_init(GstJobFunctionClass* klass) {
  GObjectClass* gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  gobject_class->set_property = set_property;
  gobject_class->get_property = get_property;
  gobject_class->finalize = finalize;
  element_class->change_state = change_state;

  const auto rw = static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS);
  const auto rw_playing = static_cast<GParamFlags>(rw | GST_PARAM_MUTABLE_PLAYING);
  const auto rw_ready = static_cast<GParamFlags>(rw | GST_PARAM_MUTABLE_READY);
  const auto ro = static_cast<GParamFlags>(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  g_object_class_install_property(
      gobject_class, PROP_JOB,
      g_param_spec_string("job", "Job file",
                          "Job file (.onnx) holding the job function: a Jobflow job file or an ordinary ONNX model. "
                          "Loaded when the element goes to READY; changing it in PLAYING reloads at the next buffer "
                          "(\"reloaded\" signal)",
                          nullptr, rw_playing));
  g_object_class_install_property(
      gobject_class, PROP_FUNCTION,
      g_param_spec_string("function", "Function",
                          "Name of the job function to run; a job file holds one, and an error says which when the "
                          "names differ (NULL: the file's)",
                          nullptr, rw_ready));
  g_object_class_install_property(
      gobject_class, PROP_CHECKPOINT,
      g_param_spec_string("checkpoint", "Checkpoint",
                          "Checkpoint folder (OneFlow layout) whose variables replace the job file's when it exists. "
                          "Train jobs also save to it every save-interval steps and at EOS (atomically); predict jobs "
                          "need it to exist. Changing it in PLAYING reloads at the next buffer",
                          nullptr, rw_playing));
  g_object_class_install_property(
      gobject_class, PROP_SAVE_INTERVAL,
      g_param_spec_uint("save-interval", "Save interval",
                        "Train jobs: save the checkpoint every this many steps, besides at EOS (0 = only at EOS)", 0,
                        G_MAXUINT, kDefaultSaveInterval, rw_playing));
  g_object_class_install_property(
      gobject_class, PROP_DEVICE,
      g_param_spec_string("device", "Device",
                          "Where the job runs: cpu, gpu (or cuda), cuda:0 (device 0: the only one used for now; "
                          "a warning says when no CUDA device is present and the job runs on the CPU)",
                          kDefaultDevice, rw_ready));
  g_object_class_install_property(
      gobject_class, PROP_MAX_IN_FLIGHT,
      g_param_spec_uint("max-in-flight", "Max in flight",
                        "Buffers waiting in the queue besides the one the element's task computes and pushes; "
                        "upstream blocks beyond it",
                        1, 1024, kDefaultMaxInFlight, rw_ready));
  g_object_class_install_property(
      gobject_class, PROP_LOSS,
      g_param_spec_string("loss", "Loss",
                          "Train an ordinary ONNX model: the loss added after its first output, "
                          "sparse_softmax_cross_entropy (adds an int32 labels placeholder) or mse (adds targets). "
                          "Needs optimizer too",
                          nullptr, rw_ready));
  g_object_class_install_property(
      gobject_class, PROP_OPTIMIZER,
      g_param_spec_string("optimizer", "Optimizer",
                          "Train an ordinary ONNX model with this optimizer: \"sgd:lr=0.1,momentum=0.9\" or "
                          "\"adam:lr=0.001,beta1=0.9,beta2=0.999,eps=1e-8\". Needs loss too",
                          nullptr, rw_ready));
  g_object_class_install_property(
      gobject_class, PROP_MESSAGE_INTERVAL,
      g_param_spec_uint("message-interval", "Message interval",
                        "Post a jobflow-step element message every this many calls (0 = none)", 0, G_MAXUINT,
                        kDefaultMessageInterval, rw_playing));
  g_object_class_install_property(
      gobject_class, PROP_NUM_THREADS,
      g_param_spec_uint("num-threads", "Threads",
                        "CPU threads (OpenMP) of this job's kernels (0 = $JOBFLOW_NUM_THREADS or one per core). In "
                        "pipelines on few cores, 1 often wins for small per-frame jobs: the pipeline's own threads "
                        "then do not preempt the kernel's team",
                        0, 1024, 0, rw_ready));
  g_object_class_install_property(
      gobject_class, PROP_PRECISION,
      g_param_spec_string("precision", "Precision",
                          "fp32, or bf16: convolutions in bfloat16 with float32 accumulation where the CPU has AMX "
                          "or AVX512_BF16 (float32 after a one-line notice elsewhere). Empty: the job file's "
                          "jobflow.precision, else fp32",
                          nullptr, rw_ready));
  g_object_class_install_property(
      gobject_class, PROP_SUMMARY_DIR,
      g_param_spec_string("summary-dir", "Summary folder",
                          "Write TensorBoard event files into this folder (made when missing; a new file each time "
                          "the element starts): per call loss and learning_rate (train jobs), accuracy (jobs "
                          "returning labels and logits), and images_per_second every message-interval calls, at the "
                          "job's step. Watch with: tensorboard --logdir FOLDER (NULL: off)",
                          nullptr, rw_ready));
  g_object_class_install_property(
      gobject_class, PROP_SIGNATURE,
      g_param_spec_string("signature", "Signature", "The loaded job's signature (NULL before READY)", nullptr, ro));
  g_object_class_install_property(
      gobject_class, PROP_STEPS,
      g_param_spec_uint64("steps", "Steps", "Calls the loaded job has run (train jobs: optimizer steps)", 0,
                          G_MAXUINT64, 0, ro));

  /**
   * jobfunction::step-done:
   * @step: the call's number, from 1
   * @loss: the mean of the loss (train jobs), NaN otherwise
   * @accuracy: this call's accuracy when the job returns (labels, logits), NaN otherwise
   */
  signals[SIGNAL_STEP_DONE] =
      g_signal_new("step-done", G_TYPE_FROM_CLASS(klass), G_SIGNAL_RUN_LAST, 0, nullptr, nullptr, nullptr, G_TYPE_NONE,
                   3, G_TYPE_UINT64, G_TYPE_DOUBLE, G_TYPE_DOUBLE);
  signals[SIGNAL_CHECKPOINT_SAVED] =
      g_signal_new("checkpoint-saved", G_TYPE_FROM_CLASS(klass), G_SIGNAL_RUN_LAST, 0, nullptr, nullptr, nullptr,
                   G_TYPE_NONE, 2, G_TYPE_STRING, G_TYPE_UINT64);
  signals[SIGNAL_RELOADED] = g_signal_new("reloaded", G_TYPE_FROM_CLASS(klass), G_SIGNAL_RUN_LAST, 0, nullptr, nullptr,
                                          nullptr, G_TYPE_NONE, 2, G_TYPE_STRING, G_TYPE_STRING);

  gst_element_class_set_static_metadata(
      element_class, "Jobflow job function", "Filter/Tensor",
      "Runs a compiled Jobflow job function (a job file) on tensor buffers: placeholders in, returns out; train jobs "
      "step, report loss and save checkpoints",
      "Jobflow project");
  gst_element_class_add_static_pad_template(element_class, &sink_template);
  gst_element_class_add_static_pad_template(element_class, &src_template);
}

static void gst_job_function_init(GstJobFunction* self) {
  g_mutex_init(&self->settings_lock);
  g_mutex_init(&self->loaded_lock);
  self->settings = new Settings();
  self->reload_pending = new std::atomic<bool>(false);
  self->loaded = new std::shared_ptr<const Loaded>();
  self->in_specs = new std::vector<TensorSpec>();
  self->fps_n = 0;
  self->fps_d = 1;
  self->submitted = 0;
  self->queue = new Queue();
  self->stats = new Stats();

  self->sinkpad = gst_pad_new_from_static_template(&sink_template, "sink");
  /* Accept any static tensor caps: set_sink_caps then refuses a mismatch
   * with an error naming the placeholder (the default accept-caps check
   * against the job's caps would refuse it silently, as not-negotiated). */
  GST_PAD_SET_ACCEPT_TEMPLATE(self->sinkpad);
  gst_pad_set_chain_function(self->sinkpad, chain);
  gst_pad_set_event_function(self->sinkpad, sink_event);
  gst_pad_set_query_function(self->sinkpad, sink_query);
  gst_element_add_pad(GST_ELEMENT(self), self->sinkpad);

  self->srcpad = gst_pad_new_from_static_template(&src_template, "src");
  gst_pad_set_query_function(self->srcpad, src_query);
  gst_pad_set_activatemode_function(self->srcpad, src_activate_mode);
  gst_pad_use_fixed_caps(self->srcpad);
  gst_element_add_pad(GST_ELEMENT(self), self->srcpad);
}

gboolean jobflow_register_jobfunction(GstPlugin* plugin) {
  GST_DEBUG_CATEGORY_INIT(jobfunction_debug, "jobfunction", 0, "Jobflow job function element");
  return gst_element_register(plugin, "jobfunction", GST_RANK_NONE, GST_TYPE_JOB_FUNCTION);
}
