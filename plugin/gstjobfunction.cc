/* jobfunction. See gstjobfunction.h and docs/elements.md.
 *
 * Files: this one is the element (pads, properties, signals, threads);
 * jobfunction_load.{h,cc} loads the job and names the property at fault;
 * jobfunction_metrics.{h,cc} computes what the element reports; the queue
 * between the threads is the plugin's SerialQueue (serial_queue.h).
 *
 * Threads:
 *   sink chain   wraps the buffer's memories as tensors (no copy), checks
 *                them against the job and queues a call; blocks while
 *                `max-in-flight` buffers are queued. Serialized events are
 *                queued too, so they keep their place among the results.
 *   src task     takes the items in order and runs each call itself
 *                (CompiledJob::run_here: no hand-off to the engine's
 *                worker), builds the output buffer (the result tensors as
 *                memories, no copy; timestamps and metas of the input) and
 *                pushes it; train jobs save the checkpoint here too.
 * Upstream is never blocked by compute: only by a full queue.
 *
 * Dims known at call time: new sink caps mid-stream renegotiate (the calls
 * take the new shapes); the src caps follow the results (OutFormat). */
#include "gstjobfunction.h"

#include "element_util.h"
#include "jobflow_meta.h"
#include "jobfunction_load.h"
#include "jobfunction_metrics.h"
#include "serial_queue.h"
#include "tensor_caps.h"

#include <jobflow/primitive.h>
#include <jobflow/session.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY(jobfunction_debug);
#define GST_CAT_DEFAULT jobfunction_debug

namespace {

using jobflow::Tensor;
using jobflow::TensorSpec;
using jobflow::gst::FunctionSettings;
using jobflow::gst::LoadedJob;
using jobflow::gst::LoadError;
using jobflow::gst::SerialQueue;

/* One call: a queued buffer's inputs and the job they were checked against. */
struct Call : jobflow::gst::ItemData {
  std::vector<Tensor> inputs;  // views of the input buffer's memories
  guint64 step = 0;            // the call's number, from 1
  guint64 batch = 1;           // dim 0 of the first input (samples of the call)
  std::shared_ptr<const LoadedJob> loaded;
};

/* How results go out, decided when caps arrive: static caps of the job's
 * outputs (pushed then), static caps per result shape (a job whose outputs
 * have dims known per call: new caps before a result of another shape), or
 * NNStreamer's flexible format (headers in the memories, when downstream
 * takes only that). Queued alone (an item without buffer or event): the
 * output format from there on. */
struct OutFormat : jobflow::gst::ItemData {
  enum Mode { StaticFixed, StaticPerResult, Flexible } mode = StaticFixed;
  int fps_n = 0, fps_d = 1;
};

struct EventUnref {
  void operator()(GstEvent* e) const { gst_event_unref(e); }
};

struct Impl {
  Impl(GstElement* element, GstPad* srcpad, SerialQueue::Handler handler)
      : queue(element, srcpad, std::move(handler)) {}
  jobflow::gst::Locked<FunctionSettings> settings;
  /* The current job: replaced by the chain thread (reload) and by state
   * changes, read by queries and the task. */
  jobflow::gst::Locked<std::shared_ptr<const LoadedJob>> loaded;
  std::atomic<bool> reload_pending{false};
  std::atomic<GstClockTime> step_time{0};  // moving average of one call's wait + compute (LATENCY)
  /* Chain thread only. */
  std::vector<TensorSpec> in_specs;  // negotiated; empty before caps
  bool in_flexible = false;          // format=flexible: shapes from each memory's header
  int fps_n = 0, fps_d = 1;
  guint64 submitted = 0;
  std::shared_ptr<const OutFormat> last_format;  // the last one queued (in force after a flush)
  /* Task only (and flush-stop / READY_TO_PAUSED, with the task paused). */
  jobflow::gst::FunctionMetrics metrics;
  /* The output format in force and the specs of the caps last pushed. */
  std::shared_ptr<const OutFormat> out;
  std::vector<TensorSpec> pushed;
  bool pushed_any = false;
  /* Sticky events (segment, tags) that came before the src pad had caps
   * (caps per result): pushed after the first result's caps. */
  std::vector<std::unique_ptr<GstEvent, EventUnref>> held;
  SerialQueue queue;
};

}  // namespace

struct _GstJobFunction {
  GstElement parent;
  GstPad* sinkpad;
  GstPad* srcpad;
  Impl* impl;
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
  PROP_MAX_BATCH,
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

std::shared_ptr<const LoadedJob> current(GstJobFunction* self) { return self->impl->loaded.copy(); }

/* `old` is released outside the lock (its destructor waits for its calls). */
void set_current(GstJobFunction* self, std::shared_ptr<const LoadedJob> l) {
  std::shared_ptr<const LoadedJob> old = self->impl->loaded.exchange(std::move(l));
}

void post_structure(GstJobFunction* self, GstStructure* s) {
  gst_element_post_message(GST_ELEMENT(self), gst_message_new_element(GST_OBJECT(self), s));
}

/* ------------------------------------------------------------ src task */

/* Saves `job`'s variables to `dir` (atomic), announces it with the steps
 * `job` has run once the save has waited for its calls in flight. */
void save_checkpoint(GstJobFunction* self, const std::string& dir, const jobflow::CompiledJob& job, bool final) {
  jobflow::CheckPoint().save(dir, job);  // only this job's variables: the folder restarts this job
  const guint64 step = static_cast<guint64>(job.steps_run());
  GST_INFO_OBJECT(self, "checkpoint saved to %s at step %" G_GUINT64_FORMAT, dir.c_str(), step);
  post_structure(self, gst_structure_new(JOBFLOW_CHECKPOINT_MESSAGE_NAME, "path", G_TYPE_STRING, dir.c_str(), "step",
                                         G_TYPE_UINT64, step, "final", G_TYPE_BOOLEAN, final, nullptr));
  g_signal_emit(self, signals[SIGNAL_CHECKPOINT_SAVED], 0, dir.c_str(), step);
}

/* save_checkpoint, posting RESOURCE/WRITE when it fails. */
bool save_or_post(GstJobFunction* self, const jobflow::CompiledJob& job, bool final) {
  const std::string dir = self->impl->settings.get(&FunctionSettings::checkpoint);
  if (dir.empty()) return true;
  try {
    save_checkpoint(self, dir, job, final);
    return true;
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(self, RESOURCE, WRITE, ("checkpoint=\"%s\": saving failed: %s", dir.c_str(), e.what()),
                      (nullptr));
    return false;
  }
}

void strip_tensor_meta(GstBuffer* buf) {
  gst_buffer_foreach_meta(
      buf,
      [](GstBuffer*, GstMeta** meta, gpointer) -> gboolean {
        if ((*meta)->info->api == JOBFLOW_TENSOR_META_API_TYPE) *meta = nullptr;  // removes it
        return TRUE;
      },
      nullptr);
}

/* The results as a buffer (static, or flexible: headers in the memories)
 * with the input's timestamps, flags and metas. */
GstBuffer* output_buffer(GstBuffer* input, const std::vector<Tensor>& result, bool flexible) {
  GstBuffer* out = flexible ? jobflow::gst::flexible_buffer_from_tensors(result)
                            : jobflow::gst::buffer_from_tensors(result);
  if (!out) throw std::bad_alloc();
  gst_buffer_copy_into(out, input,
                       static_cast<GstBufferCopyFlags>(GST_BUFFER_COPY_FLAGS | GST_BUFFER_COPY_TIMESTAMPS |
                                                       GST_BUFFER_COPY_META),
                       0, static_cast<gsize>(-1));
  strip_tensor_meta(out);
  std::vector<TensorSpec> specs;
  for (const Tensor& t : result) specs.push_back({t.shape(), t.dtype()});
  jobflow::gst::add_tensor_meta(out, specs);
  return out;
}

/* The step-done signal, the jobflow-step message every message-interval
 * calls and, with summary-dir, the step's scalars. False (and an element
 * error) when the event file cannot be written. */
bool report_step(GstJobFunction* self, const Call& call, const std::vector<Tensor>& result, gint64 submitted_us,
                 int64_t job_step) {
  Impl& p = *self->impl;
  const LoadedJob& l = *call.loaded;
  const auto s = p.metrics.add(l, result, call.step, call.batch, submitted_us,
                               p.settings.get(&FunctionSettings::message_interval));
  if (g_signal_has_handler_pending(self, signals[SIGNAL_STEP_DONE], 0, FALSE))
    g_signal_emit(self, signals[SIGNAL_STEP_DONE], 0, s.step, s.loss, s.accuracy);
  const std::string error = p.metrics.write(l, s, job_step);
  if (!error.empty()) {
    GST_ELEMENT_ERROR(self, RESOURCE, WRITE, ("summary-dir=\"%s\": %s", p.metrics.summary_dir().c_str(),
                                              error.c_str()),
                      (nullptr));
    return false;
  }
  if (s.message) post_structure(self, p.metrics.step_message(s));
  return true;
}

/* Before a result: the caps it needs when they are not those in force (a
 * result of a new shape from a job with dims known per call; flexible caps
 * once). */
GstFlowReturn push_result_caps(GstJobFunction* self, const std::vector<Tensor>& result) {
  Impl& p = *self->impl;
  if (!p.out || p.out->mode == OutFormat::StaticFixed) return GST_FLOW_OK;
  std::vector<TensorSpec> specs;
  for (const Tensor& t : result) specs.push_back({t.shape(), t.dtype()});
  if (p.pushed_any && (p.out->mode == OutFormat::Flexible || specs == p.pushed)) return GST_FLOW_OK;
  GstCaps* caps = p.out->mode == OutFormat::Flexible ? jobflow::gst::flexible_caps(p.out->fps_n, p.out->fps_d)
                                                     : jobflow::gst::caps_from_specs(specs, p.out->fps_n, p.out->fps_d);
  GST_DEBUG_OBJECT(self, "caps for the result: %" GST_PTR_FORMAT, caps);
  const bool ok = gst_pad_push_event(self->srcpad, gst_event_new_caps(caps));
  gst_caps_unref(caps);
  if (!ok) return GST_PAD_IS_FLUSHING(self->srcpad) ? GST_FLOW_FLUSHING : GST_FLOW_NOT_NEGOTIATED;
  p.pushed = std::move(specs);
  p.pushed_any = true;
  for (auto& e : p.held) gst_pad_push_event(self->srcpad, e.release());
  p.held.clear();
  return GST_FLOW_OK;
}

/* The output format from here on (flexible: its caps go out now, before
 * any segment). */
GstFlowReturn handle_format(GstJobFunction* self, std::shared_ptr<const OutFormat> format) {
  Impl& p = *self->impl;
  p.out = std::move(format);
  p.pushed_any = false;
  if (p.out->mode != OutFormat::Flexible) return GST_FLOW_OK;
  GstCaps* caps = jobflow::gst::flexible_caps(p.out->fps_n, p.out->fps_d);
  const bool ok = gst_pad_push_event(self->srcpad, gst_event_new_caps(caps));
  gst_caps_unref(caps);
  if (!ok) return GST_PAD_IS_FLUSHING(self->srcpad) ? GST_FLOW_FLUSHING : GST_FLOW_NOT_NEGOTIATED;
  p.pushed_any = true;
  return GST_FLOW_OK;
}

/* Adaptive batching: whether `next` may run in one call with `first` and
 * the buffers taken after it (`rows` rows so far): the same job, the same
 * dtypes and dims but dim 0, every placeholder's dim 0 its call's batch,
 * at most `max_batch` rows in all. */
bool joins(const Call& first, const Call& next, guint64 rows, guint max_batch) {
  if (next.loaded != first.loaded || next.inputs.size() != first.inputs.size() || next.batch == 0 ||
      rows + next.batch > max_batch)
    return false;
  for (size_t i = 0; i < next.inputs.size(); ++i) {
    const Tensor& a = first.inputs[i];
    const Tensor& b = next.inputs[i];
    if (a.dtype() != b.dtype() || a.ndim() != b.ndim() || a.ndim() == 0) return false;
    // Every placeholder's dim 0 is the call's batch (rows), in both.
    if (a.dim(0) != static_cast<int64_t>(first.batch) || b.dim(0) != static_cast<int64_t>(next.batch)) return false;
    for (int d = 1; d < a.ndim(); ++d)
      if (a.dim(d) != b.dim(d)) return false;
  }
  return true;
}

/* The calls' inputs, one tensor per placeholder, concatenated along dim 0
 * (`rows` rows in all; a copy). */
std::vector<Tensor> concat_inputs(const std::vector<const Call*>& calls, guint64 rows) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < calls[0]->inputs.size(); ++i) {
    jobflow::Shape shape = calls[0]->inputs[i].shape();
    shape[0] = static_cast<int64_t>(rows);
    Tensor t(shape, calls[0]->inputs[i].dtype());
    auto* dst = static_cast<unsigned char*>(t.raw());
    for (const Call* c : calls) {
      const size_t n = c->inputs[i].nbytes();
      if (n) std::memcpy(dst, c->inputs[i].raw(), n);
      dst += n;
    }
    out.push_back(std::move(t));
  }
  return out;
}

/* Rows [begin, begin + n) of each result of a call of `rows` rows: views
 * sharing the result's storage (no copy). */
std::vector<Tensor> result_rows(const std::vector<Tensor>& result, guint64 begin, guint64 n, guint64 rows) {
  std::vector<Tensor> out;
  for (const Tensor& r : result) {
    jobflow::Shape shape = r.shape();
    shape[0] = static_cast<int64_t>(n);
    const size_t row_bytes = r.nbytes() / rows;
    out.push_back(Tensor::wrap(static_cast<unsigned char*>(r.raw()) + begin * row_bytes, std::move(shape), r.dtype(),
                               r.storage()));
  }
  return out;
}

/* Runs a buffer's call on this thread (after the calls before it), saves
 * the checkpoint on a train job's save-interval steps, reports the step
 * and pushes the result. With a dynamic-batch job (LoadedJob::
 * dynamic_batch) and max-batch > 1, the buffers queued behind it that fit
 * join the call (adaptive batching): their inputs are concatenated along
 * dim 0, and each gets its rows of the results, reported and pushed as if
 * it had run alone. */
GstFlowReturn handle_buffer(GstJobFunction* self, SerialQueue::Item& item) {
  Impl& p = *self->impl;
  if (!item.data) return gst_pad_push(self->srcpad, std::exchange(item.buffer, nullptr));  // an empty GAP buffer
  const Call& call = static_cast<const Call&>(*item.data);
  const LoadedJob& l = *call.loaded;
  std::vector<SerialQueue::Item> more;
  guint64 rows = call.batch;
  const guint max_batch = p.settings.get(&FunctionSettings::max_batch);
  if (l.dynamic_batch && max_batch > 1 && call.batch > 0 && call.batch < max_batch)
    more = p.queue.take_buffers([&](const SerialQueue::Item& next) {
      if (!next.data) return false;  // an empty GAP buffer
      const Call& c = static_cast<const Call&>(*next.data);
      if (!joins(call, c, rows, max_batch)) return false;
      rows += c.batch;
      return true;
    });
  std::vector<SerialQueue::Item*> frames{&item};
  std::vector<const Call*> calls{&call};
  for (SerialQueue::Item& m : more) {
    frames.push_back(&m);
    calls.push_back(static_cast<const Call*>(m.data.get()));
  }
  GST_LOG_OBJECT(self, "call of %" G_GUINT64_FORMAT " rows: buffers %" G_GUINT64_FORMAT " to %" G_GUINT64_FORMAT,
                 rows, call.step, calls.back()->step);
  std::vector<Tensor> result;
  try {
    result = l.job->run_here(more.empty() ? call.inputs : concat_inputs(calls, rows));
    for (size_t i = 0; i < result.size() && !more.empty(); ++i)
      if (result[i].ndim() == 0 || static_cast<guint64>(result[i].dim(0)) != rows)
        throw std::runtime_error("[jobfunction] adaptive batching: return '" + l.job->signature().output_names.at(i) +
                                 "' has shape " + jobflow::shape_str(result[i].shape()) + " for a call of " +
                                 std::to_string(rows) + " rows: its dim 0 is not the batch (set max-batch=1)");
  } catch (const std::exception& e) {
    if (more.empty())
      GST_ELEMENT_ERROR(self, STREAM, FAILED,
                        ("job '%s' failed at call %" G_GUINT64_FORMAT, l.job->signature().job_name.c_str(), call.step),
                        ("%s", e.what()));
    else
      GST_ELEMENT_ERROR(self, STREAM, FAILED,
                        ("job '%s' failed at buffers %" G_GUINT64_FORMAT " to %" G_GUINT64_FORMAT
                         " (one call of %" G_GUINT64_FORMAT " rows, max-batch=%u)",
                         l.job->signature().job_name.c_str(), call.step, calls.back()->step, rows, max_batch),
                        ("%s", e.what()));
    return GST_FLOW_ERROR;
  }
  const int64_t job_step = p.metrics.writing() ? l.job->steps_run() : 0;  // this task is the job's only caller
  const GstClockTime t = static_cast<GstClockTime>(g_get_monotonic_time() - item.arrival_us) * 1000;
  const GstClockTime avg = p.step_time.load();
  p.step_time.store(avg ? (avg * 7 + t) / 8 : t);
  if (l.train) {
    const guint interval = p.settings.get(&FunctionSettings::save_interval);
    if (interval != 0 && call.step % interval == 0 && !save_or_post(self, *l.job, false)) return GST_FLOW_ERROR;
  }
  const bool flexible = p.out && p.out->mode == OutFormat::Flexible;
  guint64 begin = 0;
  for (size_t f = 0; f < frames.size(); ++f) {
    const Call& c = *calls[f];
    const std::vector<Tensor> mine = more.empty() ? std::move(result) : result_rows(result, begin, c.batch, rows);
    begin += c.batch;
    if (!report_step(self, c, mine, frames[f]->arrival_us, job_step)) return GST_FLOW_ERROR;
    const GstFlowReturn caps_ret = push_result_caps(self, mine);
    if (caps_ret != GST_FLOW_OK) return caps_ret;
    GstBuffer* out = output_buffer(frames[f]->buffer, mine, flexible);
    frames[f]->release();  // the input's memories (and the call's views of them)
    const GstFlowReturn ret = gst_pad_push(self->srcpad, out);
    if (ret != GST_FLOW_OK) return ret;
  }
  return GST_FLOW_OK;
}

GstFlowReturn handle_item(GstJobFunction* self, SerialQueue::Item& item) {
  if (item.buffer) return handle_buffer(self, item);
  Impl& p = *self->impl;
  if (!item.event) return handle_format(self, std::static_pointer_cast<const OutFormat>(item.data));
  GstEvent* event = std::exchange(item.event, nullptr);
  const GstEventType type = GST_EVENT_TYPE(event);
  /* Caps per result: a segment or tags before the first result's caps wait
   * for them (GStreamer wants caps first). */
  if (p.out && p.out->mode == OutFormat::StaticPerResult && type != GST_EVENT_EOS && type > GST_EVENT_CAPS &&
      jobflow::gst::is_sticky(event) && !gst_pad_has_current_caps(self->srcpad)) {
    p.held.emplace_back(event);
    return GST_FLOW_OK;
  }
  if (type == GST_EVENT_EOS) p.held.clear();  // no result ever gave caps: nothing to put them after
  if (type == GST_EVENT_EOS) {
    /* After the last step: the final checkpoint, then the summary. */
    std::shared_ptr<const LoadedJob> l = current(self);
    if (l && l->train && self->impl->metrics.steps() > 0) save_or_post(self, *l->job, true);
    post_structure(self, self->impl->metrics.summary_message());
  }
  return self->impl->queue.forward_event(event);
}

/* ----------------------------------------------------------- sink side */

/* Why tensors `given` do not fit the job's placeholders ("" when they do),
 * naming the count or the placeholder, expected vs given; `source` says
 * who gives them ("upstream", "the stream"). */
std::string inputs_mismatch(const jobflow::Signature& sig, const std::vector<TensorSpec>& given, const char* source) {
  std::string why;
  if (given.size() != sig.inputs.size())
    why = "job '" + sig.job_name + "' takes " + std::to_string(sig.inputs.size()) + " tensors (" + sig.str() + "), " +
          source + " gives " + std::to_string(given.size());
  /* A dim known per call (kDynamic) takes any size. */
  for (size_t i = 0; i < given.size() && i < sig.inputs.size(); ++i)
    if (!jobflow::specs_agree(given[i], sig.inputs[i])) {
      why += std::string(why.empty() ? "job '" + sig.job_name + "': " : "; ") + "placeholder '" +
             sig.input_names[i] + "' expects " + sig.input_str(i) + ", " + source + " gives " +
             jobflow::spec_str(given[i]);
      break;
    }
  return why;
}

/* How results go out from caps with framerate fps (OutFormat): static
 * caps when downstream takes them (fixed ones when the job's outputs are
 * static, pushed now), else flexible when downstream takes that. Queues
 * the format (and the fixed caps) for the task. */
bool enqueue_out_format(GstJobFunction* self, const jobflow::Signature& sig, int fps_n, int fps_d) {
  Impl& p = *self->impl;
  auto f = std::make_shared<OutFormat>();
  f->fps_n = fps_n;
  f->fps_d = fps_d;
  bool fixed = true;
  for (const TensorSpec& o : sig.outputs) fixed = fixed && jobflow::is_static(o.shape);
  GstCaps* statics = fixed ? jobflow::gst::caps_from_specs(sig.outputs, fps_n, fps_d) : nullptr;
  if (!statics) {
    GstCaps* open = jobflow::gst::caps_accepting(sig.outputs);
    statics = gst_caps_copy_nth(open, 0);
    gst_caps_unref(open);
  }
  f->mode = fixed ? OutFormat::StaticFixed : OutFormat::StaticPerResult;
  GstCaps* peer = gst_pad_peer_query_caps(self->srcpad, nullptr);
  if (peer && !gst_caps_can_intersect(peer, statics)) {
    GstCaps* flex = jobflow::gst::flexible_caps(fps_n, fps_d);
    if (gst_caps_can_intersect(peer, flex)) f->mode = OutFormat::Flexible;
    gst_caps_unref(flex);
  }
  if (peer) gst_caps_unref(peer);
  GST_DEBUG_OBJECT(self, "results go out as %s", f->mode == OutFormat::Flexible        ? "flexible tensors"
                                                   : f->mode == OutFormat::StaticFixed ? "static tensors"
                                                                                       : "static tensors, caps per result");
  p.last_format = f;
  SerialQueue::Item fmt;
  fmt.data = f;
  if (p.queue.push(std::move(fmt)) != GST_FLOW_OK) {
    gst_caps_unref(statics);
    return false;
  }
  if (f->mode != OutFormat::StaticFixed) {
    gst_caps_unref(statics);
    return true;
  }
  GstEvent* caps = gst_event_new_caps(statics);
  gst_caps_unref(statics);
  return p.queue.push_event(caps) == GST_FLOW_OK;
}

/* Buffers that may wait in the queue: max-in-flight, or max-batch when
 * larger and the job `l` batches adaptively (so that a batch can fill up
 * while a call runs). */
guint queue_limit(GstJobFunction* self, const std::shared_ptr<const LoadedJob>& l) {
  const FunctionSettings s = self->impl->settings.copy();
  return l && l->dynamic_batch ? std::max(s.max_in_flight, s.max_batch) : s.max_in_flight;
}

/* Applies a `job`/`checkpoint` change made while streaming. Chain thread. */
bool apply_reload(GstJobFunction* self) {
  Impl& p = *self->impl;
  const FunctionSettings s = p.settings.copy();
  std::shared_ptr<const LoadedJob> old = current(self);
  /* The buffers before this one run with the old job and variables: wait
   * until the task has pushed them all. */
  if (!p.queue.wait_idle()) return false;
  if (old) old->job->sync();  // and any call of another caller
  std::shared_ptr<const LoadedJob> l;
  try {
    l = jobflow::gst::load_job(GST_ELEMENT(self), s);
  } catch (const LoadError& e) {
    jobflow::gst::post_load_error(GST_ELEMENT(self), e);
    return false;
  }
  const auto& sig = l->job->signature();
  if (!p.in_specs.empty()) {
    const std::string why = inputs_mismatch(sig, p.in_specs, "the stream");
    if (!why.empty()) {
      GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("job=\"%s\": the new job does not fit: %s", s.job.c_str(), why.c_str()),
                        (nullptr));
      return false;
    }
    if ((!old || old->job->signature().outputs != sig.outputs) && !enqueue_out_format(self, sig, p.fps_n, p.fps_d))
      return false;
  }
  p.queue.set_limit(queue_limit(self, l));
  set_current(self, l);
  GST_INFO_OBJECT(self, "reloaded job %s, checkpoint %s", s.job.c_str(), s.checkpoint.c_str());
  post_structure(self, gst_structure_new(JOBFLOW_RELOAD_MESSAGE_NAME, "job", G_TYPE_STRING, s.job.c_str(), "checkpoint",
                                         G_TYPE_STRING, s.checkpoint.c_str(), nullptr));
  g_signal_emit(self, signals[SIGNAL_RELOADED], 0, s.job.c_str(), s.checkpoint.c_str());
  return true;
}

GstFlowReturn chain(GstPad*, GstObject* parent, GstBuffer* buf) {
  GstJobFunction* self = GST_JOB_FUNCTION(parent);
  Impl& p = *self->impl;
  return jobflow::gst::guarded(GST_ELEMENT(self), "Queueing the call", GST_FLOW_ERROR, [&]() -> GstFlowReturn {
    if (p.reload_pending.exchange(false) && !apply_reload(self)) {
      gst_buffer_unref(buf);
      return GST_FLOW_ERROR;
    }
    std::shared_ptr<const LoadedJob> l = current(self);
    if (!l || p.in_specs.empty()) {
      gst_buffer_unref(buf);
      GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("No caps before the first buffer"), (nullptr));
      return GST_FLOW_NOT_NEGOTIATED;
    }
    if (GST_BUFFER_FLAG_IS_SET(buf, GST_BUFFER_FLAG_GAP) && gst_buffer_get_size(buf) == 0) {
      /* No data (jobcrop's frame without crops): passed on in its place,
       * with its metas, without a call. */
      SerialQueue::Item item;
      item.buffer = buf;
      return p.queue.push(std::move(item));
    }
    auto call = std::make_shared<Call>();
    std::string error;
    const bool fits = p.in_flexible
                          ? jobflow::gst::tensors_from_flexible_buffer(buf, &call->inputs, &error, l->in_ranks)
                          : jobflow::gst::tensors_from_buffer(buf, p.in_specs, &call->inputs, &error);
    if (!fits) {
      GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("Buffer does not fit job '%s': %s",
                                               l->job->signature().job_name.c_str(), error.c_str()),
                        (nullptr));
      gst_buffer_unref(buf);
      return GST_FLOW_ERROR;
    }
    try {
      l->job->check_inputs(call->inputs);
    } catch (const std::exception& e) {
      GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("%s", e.what()), (nullptr));
      gst_buffer_unref(buf);
      return GST_FLOW_ERROR;
    }
    call->step = ++p.submitted;
    call->batch = !call->inputs.empty() && call->inputs[0].ndim() > 0 ? static_cast<guint64>(call->inputs[0].dim(0)) : 1;
    call->loaded = std::move(l);
    SerialQueue::Item item;
    item.buffer = buf;
    item.data = std::move(call);
    return p.queue.push(std::move(item));  // the task computes it
  });
}

/* Checks upstream's caps against the job's placeholders; queues the src caps. */
gboolean set_sink_caps(GstJobFunction* self, GstCaps* caps) {
  Impl& p = *self->impl;
  std::shared_ptr<const LoadedJob> l = current(self);
  if (!l) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("No job loaded (set job=FILE.onnx)"), (nullptr));
    return FALSE;
  }
  const auto& sig = l->job->signature();
  std::vector<TensorSpec> specs;
  std::string error;
  int fps_n = 0, fps_d = 1;
  const GstStructure* st = gst_caps_get_structure(caps, 0);
  if (!st || !gst_structure_get_fraction(st, "framerate", &fps_n, &fps_d)) fps_n = 0, fps_d = 1;
  if (jobflow::gst::caps_are_flexible(caps)) {
    /* Shapes come with each buffer (its memories' headers) and are checked
     * against the placeholders there. */
    p.in_specs = sig.inputs;
    p.in_flexible = true;
    p.fps_n = fps_n;
    p.fps_d = fps_d;
    GST_DEBUG_OBJECT(self, "flexible tensors in: %" GST_PTR_FORMAT, caps);
    return enqueue_out_format(self, sig, fps_n, fps_d);
  }
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
  /* New caps mid-stream (a new size of a dim known per call, a short last
   * batch) renegotiate: the calls take the new shapes, the src caps follow
   * the results. */
  p.in_specs = specs;
  p.in_flexible = false;
  p.fps_n = fps_n;
  p.fps_d = fps_d;
  GST_DEBUG_OBJECT(self, "static tensors in: %" GST_PTR_FORMAT, caps);
  return enqueue_out_format(self, sig, fps_n, fps_d);
}

gboolean sink_event(GstPad* pad, GstObject* parent, GstEvent* event) {
  GstJobFunction* self = GST_JOB_FUNCTION(parent);
  Impl& p = *self->impl;
  SerialQueue& q = p.queue;
  return jobflow::gst::guarded(GST_ELEMENT(self), "Event handling", FALSE, [&]() -> gboolean {
    switch (GST_EVENT_TYPE(event)) {
      case GST_EVENT_FLUSH_START:
        return q.flush_start(event);
      case GST_EVENT_FLUSH_STOP:
        /* The task is paused: the output format last queued is in force
         * (queued formats are dropped with the items), held events go with
         * the data. */
        p.held.clear();
        if (p.last_format != p.out) {
          p.out = p.last_format;
          p.pushed_any = false;
        }
        return q.flush_stop(event);
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
    if (jobflow::gst::is_serialized(event)) return q.push_event(event) == GST_FLOW_OK;
    return gst_pad_event_default(pad, parent, event);
  });
}

/* Caps of the job's placeholders or returns, framerate left open: static
 * (dims left open where they are known per call) or flexible. */
GstCaps* job_caps(GstJobFunction* self, GstPad* pad, bool inputs) {
  std::shared_ptr<const LoadedJob> l = current(self);
  if (!l) return gst_pad_get_pad_template_caps(pad);
  const jobflow::Signature& sig = l->job->signature();
  return jobflow::gst::caps_accepting(inputs ? sig.inputs : sig.outputs);
}

gboolean sink_query(GstPad* pad, GstObject* parent, GstQuery* query) {
  GstJobFunction* self = GST_JOB_FUNCTION(parent);
  switch (GST_QUERY_TYPE(query)) {
    case GST_QUERY_CAPS:
      return jobflow::gst::answer_caps_query(query, job_caps(self, pad, true));
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
      return jobflow::gst::answer_caps_query(query, current_caps ? current_caps : job_caps(self, pad, false));
    }
    case GST_QUERY_LATENCY: {
      /* A result leaves one call's time after its input at best, and waits
       * behind at most max-in-flight - 1 others. */
      const GstClockTime step = self->impl->step_time.load();
      return jobflow::gst::answer_latency_query(self->sinkpad, query, step, step * self->impl->queue.limit());
    }
    default:
      return gst_pad_query_default(pad, parent, query);
  }
}

gboolean src_activate_mode(GstPad*, GstObject* parent, GstPadMode mode, gboolean active) {
  GstJobFunction* self = GST_JOB_FUNCTION(parent);
  Impl& p = *self->impl;
  if (active) p.queue.set_limit(queue_limit(self, current(self)));
  return p.queue.activate(mode, active);
}

/* ------------------------------------------------------------- GObject */

void set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  GstJobFunction* self = GST_JOB_FUNCTION(object);
  auto str = [&] {
    const char* v = g_value_get_string(value);
    return std::string(v ? v : "");
  };
  /* Sets a string; true when it changed. */
  auto change = [&](std::string& field) {
    std::string v = str();
    if (v == field) return false;
    field = std::move(v);
    return true;
  };
  const bool reload = self->impl->settings.with([&](FunctionSettings& s) {
    switch (prop_id) {
      case PROP_JOB: return change(s.job);
      case PROP_CHECKPOINT: return change(s.checkpoint);
      case PROP_FUNCTION: s.function = str(); break;
      case PROP_DEVICE: s.device = static_cast<jobflow::gst::FunctionDevice>(g_value_get_enum(value)); break;
      case PROP_LOSS: s.loss = static_cast<jobflow::gst::FunctionLoss>(g_value_get_enum(value)); break;
      case PROP_OPTIMIZER: s.optimizer = str(); break;
      case PROP_SAVE_INTERVAL: s.save_interval = g_value_get_uint(value); break;
      case PROP_MAX_IN_FLIGHT: s.max_in_flight = g_value_get_uint(value); break;
      case PROP_MAX_BATCH: s.max_batch = g_value_get_uint(value); break;
      case PROP_MESSAGE_INTERVAL: s.message_interval = g_value_get_uint(value); break;
      case PROP_NUM_THREADS: s.num_threads = g_value_get_uint(value); break;
      case PROP_PRECISION:
        s.precision = static_cast<jobflow::gst::FunctionPrecision>(g_value_get_enum(value));
        break;
      case PROP_SUMMARY_DIR: s.summary_dir = str(); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
    return false;
  });
  /* A job is loaded (READY or above): reload at the next buffer. */
  if (reload && current(self)) self->impl->reload_pending.store(true);
}

void get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GstJobFunction* self = GST_JOB_FUNCTION(object);
  if (prop_id == PROP_SIGNATURE || prop_id == PROP_STEPS) {
    std::shared_ptr<const LoadedJob> l = current(self);
    if (prop_id == PROP_SIGNATURE)
      g_value_set_string(value, l ? l->job->signature().str().c_str() : nullptr);
    else
      g_value_set_uint64(value, l ? static_cast<guint64>(l->job->steps_run()) : 0);
    return;
  }
  self->impl->settings.with([&](const FunctionSettings& s) {
    auto opt = [](const std::string& v) { return v.empty() ? nullptr : v.c_str(); };
    switch (prop_id) {
      case PROP_JOB: g_value_set_string(value, opt(s.job)); break;
      case PROP_FUNCTION: g_value_set_string(value, opt(s.function)); break;
      case PROP_CHECKPOINT: g_value_set_string(value, opt(s.checkpoint)); break;
      case PROP_DEVICE: g_value_set_enum(value, s.device); break;
      case PROP_LOSS: g_value_set_enum(value, s.loss); break;
      case PROP_OPTIMIZER: g_value_set_string(value, opt(s.optimizer)); break;
      case PROP_SAVE_INTERVAL: g_value_set_uint(value, s.save_interval); break;
      case PROP_MAX_IN_FLIGHT: g_value_set_uint(value, s.max_in_flight); break;
      case PROP_MAX_BATCH: g_value_set_uint(value, s.max_batch); break;
      case PROP_MESSAGE_INTERVAL: g_value_set_uint(value, s.message_interval); break;
      case PROP_NUM_THREADS: g_value_set_uint(value, s.num_threads); break;
      case PROP_PRECISION: g_value_set_enum(value, s.precision); break;
      case PROP_SUMMARY_DIR: g_value_set_string(value, opt(s.summary_dir)); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

GstStateChangeReturn change_state(GstElement* element, GstStateChange transition) {
  GstJobFunction* self = GST_JOB_FUNCTION(element);
  Impl& p = *self->impl;
  switch (transition) {
    case GST_STATE_CHANGE_NULL_TO_READY: {
      try {
        set_current(self, jobflow::gst::load_job(element, p.settings.copy()));
        p.reload_pending.store(false);
      } catch (const LoadError& e) {
        jobflow::gst::post_load_error(element, e);
        return GST_STATE_CHANGE_FAILURE;
      } catch (const std::exception& e) {
        GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS, ("job: %s", e.what()), (nullptr));
        return GST_STATE_CHANGE_FAILURE;
      }
      break;
    }
    case GST_STATE_CHANGE_READY_TO_PAUSED: {
      p.in_specs.clear();
      p.in_flexible = false;
      p.submitted = 0;
      p.last_format.reset();  // the task is not running yet
      p.out.reset();
      p.pushed.clear();
      p.pushed_any = false;
      p.held.clear();
      const std::string dir = p.settings.get(&FunctionSettings::summary_dir);
      try {
        p.metrics.start(dir);  // the task is not running yet
        if (p.metrics.writing()) GST_INFO_OBJECT(self, "TensorBoard events go to %s", dir.c_str());
      } catch (const std::exception& e) {
        GST_ELEMENT_ERROR(self, RESOURCE, OPEN_WRITE, ("summary-dir=\"%s\": %s", dir.c_str(), e.what()), (nullptr));
        return GST_STATE_CHANGE_FAILURE;
      }
      break;
    }
    default:
      break;
  }
  const GstStateChangeReturn ret = GST_ELEMENT_CLASS(gst_job_function_parent_class)->change_state(element, transition);
  if (ret == GST_STATE_CHANGE_FAILURE) return ret;
  switch (transition) {
    case GST_STATE_CHANGE_PAUSED_TO_READY:
      p.metrics.stop();  // the task is stopped (it ran every call itself): close the event file
      break;
    case GST_STATE_CHANGE_READY_TO_NULL:
      set_current(self, nullptr);
      break;
    default:
      break;
  }
  return ret;
}

}  // namespace

static void gst_job_function_class_init(GstJobFunctionClass* klass) {
  GObjectClass* gobject_class = jobflow::gst::init_object_class<GstJobFunction>(klass, set_property, get_property);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
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
                        G_MAXUINT, jobflow::gst::kDefaultSaveInterval, rw_playing));
  g_object_class_install_property(
      gobject_class, PROP_DEVICE,
      g_param_spec_enum("device", "Device",
                        "Where the job runs: cpu, gpu (or cuda), gpu:0 (or cuda:0; device 0 is the only one used "
                        "for now). A warning says when no CUDA device is present and the job runs on the CPU",
                        jobflow::gst::function_device_get_type(), jobflow::gst::kDeviceCpu, rw_ready));
  g_object_class_install_property(
      gobject_class, PROP_MAX_IN_FLIGHT,
      g_param_spec_uint("max-in-flight", "Max in flight",
                        "Buffers waiting in the queue besides the one the element's task computes and pushes; "
                        "upstream blocks beyond it",
                        1, 1024, jobflow::gst::kDefaultMaxInFlight, rw_ready));
  g_object_class_install_property(
      gobject_class, PROP_MAX_BATCH,
      g_param_spec_uint("max-batch", "Max batch",
                        "Adaptive batching, for predict jobs whose placeholders and returns all have a dim 0 known "
                        "per call: the buffers queued while a call runs are taken as one call of at most this many "
                        "rows (dim 0) in all, and each gets its rows of the results with its own timestamps and "
                        "metas. Only what is queued already is taken (no waiting). Up to this many buffers may then "
                        "queue (max-in-flight when larger). 1 = one call per buffer; other jobs ignore it",
                        1, 65536, jobflow::gst::kDefaultMaxBatch, rw_ready));
  g_object_class_install_property(
      gobject_class, PROP_LOSS,
      g_param_spec_enum("loss", "Loss",
                        "Train an ordinary ONNX model: the loss added after its first output, "
                        "sparse_softmax_cross_entropy (adds an int32 labels placeholder) or mse (adds targets). "
                        "Needs optimizer too",
                        jobflow::gst::function_loss_get_type(), jobflow::gst::kLossNone, rw_ready));
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
                        jobflow::gst::kDefaultMessageInterval, rw_playing));
  g_object_class_install_property(
      gobject_class, PROP_NUM_THREADS,
      g_param_spec_uint("num-threads", "Threads",
                        "CPU threads (OpenMP) of this job's kernels (0 = $JOBFLOW_NUM_THREADS, else chosen per call: "
                        "one for small jobs, else one per core not kept busy by other processes)",
                        0, 1024, 0, rw_ready));
  g_object_class_install_property(
      gobject_class, PROP_PRECISION,
      g_param_spec_enum("precision", "Precision",
                        "auto: the job file's jobflow.precision, else fp32; fp32; or bf16: convolutions in bfloat16 "
                        "with float32 accumulation where the CPU has AMX, or AVX512_BF16 dot products at least 0.75x as "
                        "fast as its float32 FMAs (elsewhere float32, and a warning message that says why; "
                        "JOBFLOW_BF16=always keeps bf16 wherever the instructions exist)",
                        jobflow::gst::function_precision_get_type(), jobflow::gst::kPrecisionAuto, rw_ready));
  g_object_class_install_property(
      gobject_class, PROP_SUMMARY_DIR,
      g_param_spec_string("summary-dir", "Summary folder",
                          "Write TensorBoard event files into this folder (made when missing; a new file each time "
                          "the element starts): per call loss and learning_rate (train jobs), accuracy (jobs "
                          "declaring it, as eval jobs do), and images_per_second every message-interval calls, at "
                          "the job's step. Watch with: tensorboard --logdir FOLDER (NULL: off)",
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
   * @loss: the mean of the loss return (train jobs), NaN otherwise
   * @accuracy: this call's accuracy when the job declares one, NaN otherwise
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
  jobflow::gst::add_tensors_pad_templates(element_class, true);
  gst_type_mark_as_plugin_api(jobflow::gst::function_loss_get_type(), static_cast<GstPluginAPIFlags>(0));
  gst_type_mark_as_plugin_api(jobflow::gst::function_device_get_type(), static_cast<GstPluginAPIFlags>(0));
  gst_type_mark_as_plugin_api(jobflow::gst::function_precision_get_type(), static_cast<GstPluginAPIFlags>(0));
}

static void gst_job_function_init(GstJobFunction* self) {
  self->sinkpad = jobflow::gst::add_pad(GST_ELEMENT(self), "sink", chain, sink_event, sink_query);
  /* Accept any tensor caps: set_sink_caps then refuses a mismatch
   * with an error naming the placeholder (the default accept-caps check
   * against the job's caps would refuse it silently, as not-negotiated). */
  GST_PAD_SET_ACCEPT_TEMPLATE(self->sinkpad);
  self->srcpad = jobflow::gst::add_pad(GST_ELEMENT(self), "src", nullptr, nullptr, src_query, src_activate_mode);
  gst_pad_use_fixed_caps(self->srcpad);

  SerialQueue::Handler handler;
  handler.item = [self](SerialQueue::Item& item) { return handle_item(self, item); };
  /* The calls ran on the task's thread (run_here): its OpenMP threads go
   * with it, not back to GStreamer's thread pool, where they would make
   * libgomp wait briefly in every other job of the process (see
   * jobflow::release_calling_thread). */
  handler.leave = [] { jobflow::release_calling_thread(); };
  /* And while it waits for buffers, once another thread of the process
   * computes with a team of its own and this one has been quiet for a
   * while (jobflow::idle_calling_thread says when to look again). */
  handler.idle = []() -> gint64 { return jobflow::idle_calling_thread(); };
  self->impl = new Impl(GST_ELEMENT(self), self->srcpad, std::move(handler));
}

gboolean jobflow_register_jobfunction(GstPlugin* plugin) {
  GST_DEBUG_CATEGORY_INIT(jobfunction_debug, "jobfunction", 0, "Jobflow job function element");
  return gst_element_register(plugin, "jobfunction", GST_RANK_NONE, GST_TYPE_JOB_FUNCTION);
}
