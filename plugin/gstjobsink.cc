/* jobsink: see gstjobsink.h, jobsink.h and docs/elements.md#jobsink.
 *
 * Threads: the streaming thread renders (queues a sample, then calls the
 * callbacks / emits new-result); application threads pull. Everything the
 * two share lives in Impl under `mu`; `cond` wakes a puller when a result,
 * EOS or stop arrives, and a blocked render when space frees up or the
 * sink is unlocked. Callbacks are a refcounted snapshot taken under `mu` and
 * called after it is released. */
#include "gstjobsink.h"

#include "tensor_caps.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>

GST_DEBUG_CATEGORY_STATIC(jobsink_debug);
#define GST_CAT_DEFAULT jobsink_debug

namespace {

constexpr gboolean kDefaultEmitSignals = FALSE;
constexpr guint kDefaultMaxResults = 16;
constexpr gboolean kDefaultDrop = FALSE;
constexpr gboolean kDefaultSync = FALSE;

enum {
  PROP_0,
  PROP_EMIT_SIGNALS,
  PROP_MAX_RESULTS,
  PROP_DROP,
  PROP_SYNC,
  PROP_EOS,
};

enum {
  SIGNAL_EOS,
  SIGNAL_NEW_RESULT,
  SIGNAL_PULL_RESULT,
  SIGNAL_TRY_PULL_RESULT,
  LAST_SIGNAL
};
guint signals[LAST_SIGNAL] = {0};

/* The user's callbacks; the notify runs when the last snapshot is gone, so
 * never while a callback runs. */
struct Callbacks {
  JobSinkCallbacks cb{};
  gpointer user_data = nullptr;
  GDestroyNotify notify = nullptr;
  ~Callbacks() {
    if (notify) notify(user_data);
  }
};

struct Impl {
  std::mutex mu;
  std::condition_variable cond;
  /* settings */
  bool emit_signals = kDefaultEmitSignals;
  guint max_results = kDefaultMaxResults;
  bool drop = kDefaultDrop;
  std::shared_ptr<Callbacks> callbacks;
  /* state */
  std::deque<GstSample*> queue;
  GstCaps* caps = nullptr;  // current caps, for the samples
  bool started = false;     // between start() and stop()
  bool unlocked = false;    // between unlock() and unlock_stop()
  bool is_eos = false;      // EOS reached the sink (reset by flush / start)
  guint64 dropped = 0;

  /* Call with mu held; returns the samples to unref (outside the lock). */
  std::deque<GstSample*> take_all() {
    std::deque<GstSample*> out;
    out.swap(queue);
    return out;
  }
};

void unref_all(std::deque<GstSample*>& q) {
  for (GstSample* s : q) gst_sample_unref(s);
  q.clear();
}

}  // namespace

struct _GstJobSink {
  GstBaseSink parent;
  Impl* impl;
};

G_DEFINE_TYPE(GstJobSink, gst_job_sink, GST_TYPE_BASE_SINK)

static GstStaticPadTemplate sink_template =
    GST_STATIC_PAD_TEMPLATE("sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS_ANY);

static GstSample* pull_locked(GstJobSink* self, GstClockTime timeout) {
  Impl* p = self->impl;
  std::unique_lock<std::mutex> lk(p->mu);
  const bool forever = !GST_CLOCK_TIME_IS_VALID(timeout);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(forever ? 0 : timeout);
  for (;;) {
    if (!p->queue.empty()) {
      GstSample* s = p->queue.front();
      p->queue.pop_front();
      p->cond.notify_all();  // space for a render waiting on a full queue
      return s;
    }
    if (p->is_eos || !p->started) return nullptr;
    if (forever) {
      p->cond.wait(lk);
    } else if (std::chrono::steady_clock::now() >= deadline) {
      /* Never sleep past the deadline: a timed wait whose deadline has
       * passed still costs the kernel's timer slack (~50 us), which made
       * try-pull-result(0) in a new-result callback cost ~80 us. */
      return nullptr;
    } else if (p->cond.wait_until(lk, deadline) == std::cv_status::timeout) {
      if (!p->queue.empty()) continue;
      return nullptr;
    }
  }
}

/* No C++ exception leaves the element (std::mutex and allocations could
 * throw in theory): the GObject-facing functions catch everything. */
static GstSample* pull_internal(GstJobSink* self, GstClockTime timeout) {
  try {
    return pull_locked(self, timeout);
  } catch (const std::exception& e) {
    GST_ERROR_OBJECT(self, "pull-result failed: %s", e.what());
    return nullptr;
  }
}

static GstSample* action_pull_result(GstJobSink* self) { return pull_internal(self, GST_CLOCK_TIME_NONE); }
static GstSample* action_try_pull_result(GstJobSink* self, guint64 timeout) {
  return pull_internal(self, timeout);
}

static void gst_job_sink_set_property(GObject* object, guint id, const GValue* value, GParamSpec* pspec) {
  auto* self = GST_JOB_SINK(object);
  Impl* p = self->impl;
  switch (id) {
    case PROP_EMIT_SIGNALS: {
      std::lock_guard<std::mutex> lk(p->mu);
      p->emit_signals = g_value_get_boolean(value);
      break;
    }
    case PROP_MAX_RESULTS: {
      std::lock_guard<std::mutex> lk(p->mu);
      p->max_results = g_value_get_uint(value);
      p->cond.notify_all();  // a render may fit now
      break;
    }
    case PROP_DROP: {
      std::lock_guard<std::mutex> lk(p->mu);
      p->drop = g_value_get_boolean(value);
      p->cond.notify_all();
      break;
    }
    case PROP_SYNC:
      gst_base_sink_set_sync(GST_BASE_SINK(self), g_value_get_boolean(value));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
}

static void gst_job_sink_get_property(GObject* object, guint id, GValue* value, GParamSpec* pspec) {
  auto* self = GST_JOB_SINK(object);
  Impl* p = self->impl;
  std::lock_guard<std::mutex> lk(p->mu);
  switch (id) {
    case PROP_EMIT_SIGNALS: g_value_set_boolean(value, p->emit_signals); break;
    case PROP_MAX_RESULTS: g_value_set_uint(value, p->max_results); break;
    case PROP_DROP: g_value_set_boolean(value, p->drop); break;
    case PROP_SYNC: g_value_set_boolean(value, gst_base_sink_get_sync(GST_BASE_SINK(self))); break;
    case PROP_EOS: g_value_set_boolean(value, p->is_eos && p->queue.empty()); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
}

static void gst_job_sink_finalize(GObject* object) {
  auto* self = GST_JOB_SINK(object);
  Impl* p = self->impl;
  unref_all(p->queue);
  gst_clear_caps(&p->caps);
  delete p;  // drops the callbacks (their notify runs here)
  self->impl = nullptr;
  G_OBJECT_CLASS(gst_job_sink_parent_class)->finalize(object);
}

/* Streaming runs between READY->PAUSED and PAUSED->READY (GstBaseSink's
 * start/stop vfuncs run at NULL<->READY, too early and too late). */
static GstStateChangeReturn gst_job_sink_change_state(GstElement* element, GstStateChange transition) {
  Impl* p = GST_JOB_SINK(element)->impl;
  std::deque<GstSample*> old;
  GstCaps* caps = nullptr;
  switch (transition) {
    case GST_STATE_CHANGE_READY_TO_PAUSED: {
      std::lock_guard<std::mutex> lk(p->mu);
      old = p->take_all();
      p->started = true;
      p->is_eos = false;
      p->unlocked = false;
      p->dropped = 0;
      break;
    }
    case GST_STATE_CHANGE_PAUSED_TO_READY: {
      /* Before chaining up: wake pull-result (returns NULL) and a render
       * waiting on a full queue (returns FLUSHING). */
      std::lock_guard<std::mutex> lk(p->mu);
      old = p->take_all();
      p->started = false;
      caps = p->caps;
      p->caps = nullptr;
      p->cond.notify_all();
      break;
    }
    default:
      break;
  }
  unref_all(old);
  gst_clear_caps(&caps);
  GST_DEBUG_OBJECT(element, "%s", gst_state_change_get_name(transition));
  return GST_ELEMENT_CLASS(gst_job_sink_parent_class)->change_state(element, transition);
}

static gboolean gst_job_sink_unlock(GstBaseSink* bsink) {
  Impl* p = GST_JOB_SINK(bsink)->impl;
  std::lock_guard<std::mutex> lk(p->mu);
  p->unlocked = true;
  p->cond.notify_all();
  return TRUE;
}

static gboolean gst_job_sink_unlock_stop(GstBaseSink* bsink) {
  Impl* p = GST_JOB_SINK(bsink)->impl;
  std::lock_guard<std::mutex> lk(p->mu);
  p->unlocked = false;
  p->cond.notify_all();
  return TRUE;
}

static gboolean gst_job_sink_set_caps(GstBaseSink* bsink, GstCaps* caps) {
  Impl* p = GST_JOB_SINK(bsink)->impl;
  GstCaps* old = nullptr;
  {
    std::lock_guard<std::mutex> lk(p->mu);
    old = p->caps;
    p->caps = gst_caps_ref(caps);
  }
  gst_clear_caps(&old);
  GST_DEBUG_OBJECT(bsink, "caps %" GST_PTR_FORMAT, caps);
  return TRUE;
}

static gboolean gst_job_sink_event(GstBaseSink* bsink, GstEvent* event) {
  auto* self = GST_JOB_SINK(bsink);
  Impl* p = self->impl;
  switch (GST_EVENT_TYPE(event)) {
    case GST_EVENT_EOS: {
      std::shared_ptr<Callbacks> cbs;
      {
        std::lock_guard<std::mutex> lk(p->mu);
        p->is_eos = true;
        cbs = p->callbacks;
        p->cond.notify_all();
      }
      GST_DEBUG_OBJECT(self, "EOS");
      if (cbs && cbs->cb.eos) cbs->cb.eos(GST_ELEMENT(self), cbs->user_data);
      g_signal_emit(self, signals[SIGNAL_EOS], 0);
      break;
    }
    case GST_EVENT_FLUSH_STOP: {
      /* A flushing seek: results from before it are stale. */
      std::deque<GstSample*> old;
      {
        std::lock_guard<std::mutex> lk(p->mu);
        old = p->take_all();
        p->is_eos = false;
      }
      unref_all(old);
      break;
    }
    default:
      break;
  }
  return GST_BASE_SINK_CLASS(gst_job_sink_parent_class)->event(bsink, event);
}

static GstFlowReturn render_impl(GstBaseSink* bsink, GstBuffer* buffer) {
  auto* self = GST_JOB_SINK(bsink);
  Impl* p = self->impl;
  std::shared_ptr<Callbacks> cbs;
  bool emit = false;
  GstSample* dropped = nullptr;
  {
    std::unique_lock<std::mutex> lk(p->mu);
    for (;;) {
      if (!p->started) return GST_FLOW_FLUSHING;
      if (p->unlocked) {
        /* Flushing or going to PAUSED: let the base class decide (returns
         * FLUSHING when flushing, waits for PLAYING otherwise). Called with
         * the preroll lock held, as render is. */
        lk.unlock();
        GstFlowReturn ret = gst_base_sink_wait_preroll(bsink);
        if (ret != GST_FLOW_OK) return ret;
        lk.lock();
        continue;
      }
      if (p->queue.size() < p->max_results) break;
      if (p->drop) {
        dropped = p->queue.front();
        p->queue.pop_front();
        p->dropped++;
        break;
      }
      GST_LOG_OBJECT(self, "queue full (%u), waiting", p->max_results);
      p->cond.wait(lk);
    }
    /* The segment is only written by the streaming thread (this one). */
    GstSample* sample = gst_sample_new(buffer, p->caps, &bsink->segment, nullptr);
    p->queue.push_back(sample);
    p->cond.notify_all();
    cbs = p->callbacks;
    emit = p->emit_signals;
  }
  if (dropped) {
    GST_DEBUG_OBJECT(self, "queue full: dropped the oldest result");
    gst_sample_unref(dropped);
  }
  GstFlowReturn ret = GST_FLOW_OK;
  if (cbs && cbs->cb.new_result) ret = cbs->cb.new_result(GST_ELEMENT(self), cbs->user_data);
  if (emit) {
    GstFlowReturn sret = GST_FLOW_OK;
    g_signal_emit(self, signals[SIGNAL_NEW_RESULT], 0, &sret);
    if (ret == GST_FLOW_OK) ret = sret;
  }
  return ret;
}

static GstFlowReturn gst_job_sink_render(GstBaseSink* bsink, GstBuffer* buffer) {
  try {
    return render_impl(bsink, buffer);
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(bsink, CORE, FAILED, ("jobsink: cannot queue the result: %s", e.what()), (nullptr));
    return GST_FLOW_ERROR;
  }
}

static void gst_job_sink_class_init(GstJobSinkClass* klass) {
  GST_DEBUG_CATEGORY_INIT(jobsink_debug, "jobsink", 0, "Jobflow result sink");
  GObjectClass* gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  GstBaseSinkClass* basesink_class = GST_BASE_SINK_CLASS(klass);

  gobject_class->set_property = gst_job_sink_set_property;
  gobject_class->get_property = gst_job_sink_get_property;
  gobject_class->finalize = gst_job_sink_finalize;

  const auto flags = static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS);
  g_object_class_install_property(
      gobject_class, PROP_EMIT_SIGNALS,
      g_param_spec_boolean("emit-signals", "Emit signals",
                           "Emit new-result signals (off by default: the callbacks struct or pull-result are cheaper)",
                           kDefaultEmitSignals, flags));
  g_object_class_install_property(
      gobject_class, PROP_MAX_RESULTS,
      g_param_spec_uint("max-results", "Max results",
                        "Results kept until pulled; when full, upstream blocks (drop=false) or the oldest is "
                        "dropped (drop=true)",
                        1, G_MAXUINT, kDefaultMaxResults, flags));
  g_object_class_install_property(
      gobject_class, PROP_DROP,
      g_param_spec_boolean("drop", "Drop", "When max-results are queued, drop the oldest instead of blocking upstream",
                           kDefaultDrop, flags));
  /* Shadows GstBaseSink's "sync" only to give it the default false: results
   * go to the application as soon as they are computed. */
  g_object_class_install_property(
      gobject_class, PROP_SYNC,
      g_param_spec_boolean("sync", "Sync", "Sync on the clock (default false: deliver results as soon as computed)",
                           kDefaultSync, flags));
  g_object_class_install_property(
      gobject_class, PROP_EOS,
      g_param_spec_boolean("eos", "EOS", "EOS reached the sink and every result was pulled", FALSE,
                           static_cast<GParamFlags>(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS)));

  /**
   * jobsink::eos: EOS reached the sink (streaming thread). Results still
   * queued can be pulled afterwards.
   */
  signals[SIGNAL_EOS] = g_signal_new("eos", G_TYPE_FROM_CLASS(klass), G_SIGNAL_RUN_LAST, 0, nullptr, nullptr,
                                     nullptr, G_TYPE_NONE, 0, G_TYPE_NONE);
  /**
   * jobsink::new-result: a result was queued (streaming thread, with
   * emit-signals=true only). Pull it with pull-result; return GST_FLOW_OK.
   */
  signals[SIGNAL_NEW_RESULT] = g_signal_new("new-result", G_TYPE_FROM_CLASS(klass), G_SIGNAL_RUN_LAST, 0,
                                            nullptr, nullptr, nullptr, GST_TYPE_FLOW_RETURN, 0, G_TYPE_NONE);
  /**
   * jobsink::pull-result: blocks until a result is queued; NULL at EOS or
   * when the sink stops.
   */
  signals[SIGNAL_PULL_RESULT] =
      g_signal_new_class_handler("pull-result", G_TYPE_FROM_CLASS(klass),
                                 static_cast<GSignalFlags>(G_SIGNAL_RUN_LAST | G_SIGNAL_ACTION),
                                 G_CALLBACK(action_pull_result), nullptr, nullptr, nullptr, GST_TYPE_SAMPLE, 0,
                                 G_TYPE_NONE);
  /**
   * jobsink::try-pull-result: as pull-result, waiting at most `timeout` ns;
   * NULL on timeout.
   */
  signals[SIGNAL_TRY_PULL_RESULT] =
      g_signal_new_class_handler("try-pull-result", G_TYPE_FROM_CLASS(klass),
                                 static_cast<GSignalFlags>(G_SIGNAL_RUN_LAST | G_SIGNAL_ACTION),
                                 G_CALLBACK(action_try_pull_result), nullptr, nullptr, nullptr, GST_TYPE_SAMPLE,
                                 1, G_TYPE_UINT64);

  gst_element_class_set_static_metadata(element_class, "Jobflow result sink", "Sink/Tensor",
                                        "Delivers results (tensors) to the application: pull-result / "
                                        "try-pull-result, new-result signal or callbacks",
                                        "Jobflow project");
  gst_element_class_add_static_pad_template(element_class, &sink_template);
  element_class->change_state = gst_job_sink_change_state;

  basesink_class->unlock = gst_job_sink_unlock;
  basesink_class->unlock_stop = gst_job_sink_unlock_stop;
  basesink_class->set_caps = gst_job_sink_set_caps;
  basesink_class->event = gst_job_sink_event;
  basesink_class->render = gst_job_sink_render;
}

static void gst_job_sink_init(GstJobSink* self) {
  self->impl = new Impl();
  gst_base_sink_set_sync(GST_BASE_SINK(self), kDefaultSync);
}

gboolean jobflow_register_jobsink(GstPlugin* plugin) {
  return gst_element_register(plugin, "jobsink", GST_RANK_NONE, GST_TYPE_JOB_SINK);
}

/* ---- application API (jobsink.h) ---- */

static GstJobSink* as_sink(GstElement* sink) {
  if (!sink || !G_TYPE_CHECK_INSTANCE_TYPE(sink, GST_TYPE_JOB_SINK)) {
    g_critical("jobsink: %s is not a jobsink", sink ? GST_ELEMENT_NAME(sink) : "(null)");
    return nullptr;
  }
  return GST_JOB_SINK(sink);
}

void job_sink_set_callbacks(GstElement* sink, const JobSinkCallbacks* callbacks, gpointer user_data,
                            GDestroyNotify notify) {
  GstJobSink* self = as_sink(sink);
  if (!self) return;
  std::shared_ptr<Callbacks> fresh;
  if (callbacks) {
    fresh = std::shared_ptr<Callbacks>(new (std::nothrow) Callbacks());
    if (!fresh) {
      if (notify) notify(user_data);
      return;
    }
    fresh->cb = *callbacks;
    fresh->user_data = user_data;
    fresh->notify = notify;
  } else if (notify) {
    notify(user_data);
  }
  std::shared_ptr<Callbacks> old;
  {
    std::lock_guard<std::mutex> lk(self->impl->mu);
    old = std::move(self->impl->callbacks);
    self->impl->callbacks = std::move(fresh);
  }
  /* `old` is released here, outside the lock: its notify runs now or when
   * a callback still running in the streaming thread returns. */
}

GstSample* job_sink_pull_result(GstElement* sink) {
  GstJobSink* self = as_sink(sink);
  return self ? pull_internal(self, GST_CLOCK_TIME_NONE) : nullptr;
}

GstSample* job_sink_try_pull_result(GstElement* sink, GstClockTime timeout) {
  GstJobSink* self = as_sink(sink);
  return self ? pull_internal(self, timeout) : nullptr;
}

gboolean job_sink_is_eos(GstElement* sink) {
  GstJobSink* self = as_sink(sink);
  if (!self) return FALSE;
  std::lock_guard<std::mutex> lk(self->impl->mu);
  return self->impl->is_eos && self->impl->queue.empty();
}

bool jobflow_sample_to_tensors(GstSample* sample, std::vector<jobflow::Tensor>* tensors, std::string* error) {
  try {
    if (!sample) {
      if (error) *error = "no sample";
      return false;
    }
    GstCaps* caps = gst_sample_get_caps(sample);
    GstBuffer* buf = gst_sample_get_buffer(sample);
    if (!caps || !buf) {
      if (error) *error = !caps ? "sample has no caps" : "sample has no buffer";
      return false;
    }
    std::vector<jobflow::TensorSpec> specs;
    std::string why;
    if (!jobflow::gst::specs_from_caps(caps, &specs, &why)) {
      if (error) *error = "caps: " + why;
      return false;
    }
    return jobflow::gst::tensors_from_buffer(buf, specs, tensors, error);
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    return false;
  } catch (...) {
    if (error) *error = "unknown error";
    return false;
  }
}
