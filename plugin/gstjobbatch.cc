/* jobbatch. See gstjobbatch.h and docs/elements.md.
 *
 * jobbatch decouples threads like a small queue (the plugin's SerialQueue,
 * serial_queue.h): the sink pad's chain function queues frames (at most
 * batch-size frames waiting, then it blocks); the task on the src pad takes
 * them in order, assembles batches and pushes them, woken at the
 * max-latency deadline of the batch's first frame. Serialized events travel
 * through the same queue so they keep their place relative to the frames;
 * EOS, caps, segment and gap events first push the partial batch. */
#include "gstjobbatch.h"

#include "element_util.h"
#include "jobflow_meta.h"
#include "serial_queue.h"
#include "tensor_caps.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_STATIC(jobbatch_debug);
#define GST_CAT_DEFAULT jobbatch_debug

namespace {

using jobflow::TensorSpec;
using jobflow::gst::SerialQueue;

constexpr guint kDefaultBatchSize = 1;
constexpr guint64 kDefaultMaxLatency = 0;  // no bound: wait for a full batch

struct Settings {
  guint batch_size = kDefaultBatchSize;
  guint64 max_latency = kDefaultMaxLatency;
  bool short_batches = false;  // a partial batch is pushed short, not padded
};

/* Built from caps + settings; travels with the caps event through the queue. */
struct BatchConfig : jobflow::gst::ItemData {
  std::vector<TensorSpec> in_specs;
  std::vector<TensorSpec> out_specs;
  std::vector<size_t> frame_bytes;  // per tensor, one frame
  size_t total_frame_bytes = 0;
  guint batch_size = 1;
  guint64 max_latency = 0;
  bool short_batches = false;
  GstClockTime frame_duration = GST_CLOCK_TIME_NONE;
  int out_fps_n = 0, out_fps_d = 1;  // the batches' framerate

  /* The specs of a batch of `rows` frames (dim 0 grown by that factor). */
  std::vector<TensorSpec> specs_of(guint rows) const {
    std::vector<TensorSpec> out = in_specs;
    for (TensorSpec& s : out) {
      if (s.shape.empty())
        s.shape = {static_cast<int64_t>(rows)};
      else
        s.shape[0] *= rows;
    }
    return out;
  }
};

struct Impl {
  Impl(GstElement* element, GstPad* srcpad, SerialQueue::Handler handler)
      : queue(element, srcpad, std::move(handler)) {}
  ~Impl() { clear_batch(); }
  void clear_batch() {
    for (GstBuffer* b : batch) gst_buffer_unref(b);
    batch.clear();
    queue.wake_at(0);
  }
  jobflow::gst::Locked<Settings> settings;
  std::atomic<GstClockTime> latency{0};  // what this element adds (LATENCY query)
  /* Task only (and flush-stop / deactivation, with the task stopped). */
  std::shared_ptr<const BatchConfig> config;
  std::vector<GstBuffer*> batch;
  guint caps_rows = 0;  // frames per batch of the caps last pushed (0 = none)
  SerialQueue queue;
};

}  // namespace

struct _GstJobBatch {
  GstElement parent;
  GstPad* sinkpad;
  GstPad* srcpad;
  Impl* impl;
};

G_DEFINE_TYPE(GstJobBatch, gst_job_batch, GST_TYPE_ELEMENT)

namespace {

enum { PROP_0, PROP_BATCH_SIZE, PROP_MAX_LATENCY, PROP_SHORT_BATCHES };

/* ------------------------------------------------------------ src task */

/* Assembles and pushes the current (possibly partial) batch. */
GstFlowReturn push_batch(GstJobBatch* self) {
  Impl& p = *self->impl;
  if (p.batch.empty()) return GST_FLOW_OK;
  const BatchConfig& cfg = *p.config;
  const guint valid = static_cast<guint>(p.batch.size());
  /* A partial batch: padded to batch-size frames, or with short-batches
   * only its frames, under caps for that many (renegotiated both ways). */
  const guint n = valid < cfg.batch_size && cfg.short_batches ? valid : cfg.batch_size;
  if (n != p.caps_rows) {
    GstCaps* caps = jobflow::gst::caps_from_specs(cfg.specs_of(n), cfg.out_fps_n, cfg.out_fps_d);
    GST_DEBUG_OBJECT(self, "caps for a batch of %u: %" GST_PTR_FORMAT, n, caps);
    const bool ok = gst_pad_push_event(self->srcpad, gst_event_new_caps(caps));
    gst_caps_unref(caps);
    if (!ok) {
      p.clear_batch();
      return GST_PAD_IS_FLUSHING(self->srcpad) ? GST_FLOW_FLUSHING : GST_FLOW_NOT_NEGOTIATED;
    }
    p.caps_rows = n;
  }
  GstBuffer* out = gst_buffer_new();
  size_t offset = 0;
  for (const size_t fb : cfg.frame_bytes) {
    GstBuffer* part = jobflow::gst::new_tensor_buffer(fb * n);
    GstMapInfo map;
    gst_buffer_map(part, &map, GST_MAP_WRITE);
    for (guint i = 0; i < valid; ++i) gst_buffer_extract(p.batch[i], offset, map.data + i * fb, fb);
    if (valid < n) std::memset(map.data + valid * fb, 0, (n - valid) * fb);
    gst_buffer_unmap(part, &map);
    gst_buffer_append_memory(out, gst_buffer_get_memory(part, 0));
    gst_buffer_unref(part);
    offset += fb;
  }
  JobflowBatchMeta* meta = jobflow_buffer_add_batch_meta(out, n);
  meta->valid = valid;
  GstClockTime end = GST_CLOCK_TIME_NONE;
  for (guint i = 0; i < valid; ++i) {
    GstBuffer* f = p.batch[i];
    meta->pts[i] = GST_BUFFER_PTS(f);
    meta->dts[i] = GST_BUFFER_DTS(f);
    meta->duration[i] = GST_BUFFER_DURATION(f);
    meta->offset[i] = GST_BUFFER_OFFSET(f);
    if (GST_BUFFER_PTS_IS_VALID(f)) {
      const GstClockTime d = GST_BUFFER_DURATION_IS_VALID(f) ? GST_BUFFER_DURATION(f) : cfg.frame_duration;
      end = GST_CLOCK_TIME_IS_VALID(d) ? GST_BUFFER_PTS(f) + d : GST_BUFFER_PTS(f);
    }
  }
  GST_BUFFER_PTS(out) = GST_BUFFER_PTS(p.batch[0]);
  GST_BUFFER_DTS(out) = GST_BUFFER_DTS(p.batch[0]);
  if (GST_BUFFER_PTS_IS_VALID(out) && GST_CLOCK_TIME_IS_VALID(end) && end >= GST_BUFFER_PTS(out))
    GST_BUFFER_DURATION(out) = end - GST_BUFFER_PTS(out);
  GST_BUFFER_OFFSET(out) = GST_BUFFER_OFFSET(p.batch[0]);
  jobflow::gst::add_tensor_meta(out, n == cfg.batch_size ? cfg.out_specs : cfg.specs_of(n));
  if (valid < n)
    GST_DEBUG_OBJECT(self, "pushing a partial batch: %u of %u frames, rest zero", valid, n);
  else if (n < cfg.batch_size)
    GST_DEBUG_OBJECT(self, "pushing a short batch of %u frames", n);
  p.clear_batch();
  return gst_pad_push(self->srcpad, out);
}

GstFlowReturn handle_frame(GstJobBatch* self, SerialQueue::Item& item) {
  Impl& p = *self->impl;
  if (!p.config) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("No caps before the first buffer"), (nullptr));
    return GST_FLOW_NOT_NEGOTIATED;
  }
  const size_t size = gst_buffer_get_size(item.buffer);
  if (size != p.config->total_frame_bytes) {
    GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("Frame of %" G_GSIZE_FORMAT " bytes, the caps say %zu", size,
                                             p.config->total_frame_bytes),
                      (nullptr));
    return GST_FLOW_ERROR;
  }
  p.batch.push_back(std::exchange(item.buffer, nullptr));
  if (p.batch.size() == 1 && p.config->max_latency > 0)
    p.queue.wake_at(item.arrival_us + static_cast<gint64>(p.config->max_latency / 1000));
  return p.batch.size() >= p.config->batch_size ? push_batch(self) : GST_FLOW_OK;
}

GstFlowReturn handle_item(GstJobBatch* self, SerialQueue::Item& item) {
  if (item.buffer) return handle_frame(self, item);
  Impl& p = *self->impl;
  const GstEventType type = GST_EVENT_TYPE(item.event);
  if (type == GST_EVENT_EOS || type == GST_EVENT_CAPS || type == GST_EVENT_SEGMENT || type == GST_EVENT_GAP) {
    const GstFlowReturn ret = push_batch(self);
    if (ret != GST_FLOW_OK) return ret;
  }
  if (type == GST_EVENT_CAPS) p.config = std::static_pointer_cast<const BatchConfig>(item.data);
  const GstFlowReturn ret = p.queue.forward_event(std::exchange(item.event, nullptr), item.data);
  if (type == GST_EVENT_CAPS && ret == GST_FLOW_OK) p.caps_rows = p.config->batch_size;
  return ret;
}

GstFlowReturn handle_wake(GstJobBatch* self) {
  GST_DEBUG_OBJECT(self, "max-latency reached with %zu frame(s)", self->impl->batch.size());
  return push_batch(self);
}

/* ----------------------------------------------------------- sink side */

GstFlowReturn chain(GstPad*, GstObject* parent, GstBuffer* buf) {
  GstJobBatch* self = GST_JOB_BATCH(parent);
  SerialQueue::Item item;
  item.buffer = buf;
  return jobflow::gst::guarded(GST_ELEMENT(self), "Batching", GST_FLOW_ERROR,
                               [&] { return self->impl->queue.push(std::move(item)); });
}

/* The output caps event for input caps, with the configuration it starts;
 * posts an error and returns null on failure. */
GstEvent* caps_event(GstJobBatch* self, GstCaps* caps, std::shared_ptr<const BatchConfig>* out_cfg) {
  Impl& p = *self->impl;
  auto cfg = std::make_shared<BatchConfig>();
  std::string error;
  if (!jobflow::gst::specs_from_caps(caps, &cfg->in_specs, &error)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Invalid tensor caps: %s", error.c_str()), ("%" GST_PTR_FORMAT, caps));
    return nullptr;
  }
  const Settings settings = p.settings.copy();
  cfg->batch_size = settings.batch_size;
  cfg->max_latency = settings.max_latency;
  cfg->short_batches = settings.short_batches;
  cfg->out_specs = cfg->in_specs;
  for (size_t i = 0; i < cfg->out_specs.size(); ++i) {
    /* The caps' dims times batch-size: checked, never a wrapped product. */
    TensorSpec& s = cfg->out_specs[i];
    int64_t bytes = 0;
    std::string why = "the element count overflows 64 bits";
    bool fits = true;
    if (s.shape.empty())
      s.shape = {static_cast<int64_t>(cfg->batch_size)};
    else
      fits = jobflow::size_mul(s.shape[0], static_cast<int64_t>(cfg->batch_size), &s.shape[0]);
    if (!fits || !jobflow::checked_nbytes(s.shape, s.dtype, &bytes, &why)) {
      GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                        ("A batch of %u frames of tensor %zu %s is too large: %s", cfg->batch_size, i,
                         jobflow::spec_str(cfg->in_specs[i]).c_str(), why.c_str()),
                        ("%" GST_PTR_FORMAT, caps));
      return nullptr;
    }
  }
  for (const TensorSpec& s : cfg->in_specs) {
    cfg->frame_bytes.push_back(jobflow::gst::spec_bytes(s));
    cfg->total_frame_bytes += cfg->frame_bytes.back();
  }
  int fps_n = 0, fps_d = 1, out_n = 0, out_d = 1;
  const GstStructure* s = gst_caps_get_structure(caps, 0);
  if (gst_structure_get_fraction(s, "framerate", &fps_n, &fps_d) && fps_n > 0) {
    cfg->frame_duration = gst_util_uint64_scale_int(GST_SECOND, fps_d, fps_n);
    gst_util_fraction_multiply(fps_n, fps_d, 1, static_cast<gint>(cfg->batch_size), &out_n, &out_d);
  }
  cfg->out_fps_n = out_n;
  cfg->out_fps_d = out_d;
  GstCaps* out = jobflow::gst::caps_from_specs(cfg->out_specs, out_n, out_d);
  GST_DEBUG_OBJECT(self, "%" GST_PTR_FORMAT " -> %" GST_PTR_FORMAT, caps, out);
  GstEvent* event = gst_event_new_caps(out);
  gst_caps_unref(out);

  /* Latency added: a frame waits for batch-size - 1 more, or max-latency. */
  GstClockTime latency = 0;
  if (GST_CLOCK_TIME_IS_VALID(cfg->frame_duration)) latency = cfg->frame_duration * (cfg->batch_size - 1);
  if (settings.max_latency > 0)
    latency = GST_CLOCK_TIME_IS_VALID(cfg->frame_duration) ? std::min<GstClockTime>(latency, settings.max_latency)
                                                           : settings.max_latency;
  p.latency.store(latency);
  p.queue.set_limit(cfg->batch_size);
  *out_cfg = std::move(cfg);
  return event;
}

gboolean sink_event(GstPad* pad, GstObject* parent, GstEvent* event) {
  GstJobBatch* self = GST_JOB_BATCH(parent);
  Impl& p = *self->impl;
  return jobflow::gst::guarded(GST_ELEMENT(self), "Event handling", FALSE, [&]() -> gboolean {
    switch (GST_EVENT_TYPE(event)) {
      case GST_EVENT_FLUSH_START:
        return p.queue.flush_start(event);
      case GST_EVENT_FLUSH_STOP:
        p.clear_batch();  // the task is paused
        return p.queue.flush_stop(event, [&](const SerialQueue::Item& kept) {
          if (GST_EVENT_TYPE(kept.event) == GST_EVENT_CAPS) {
            p.config = std::static_pointer_cast<const BatchConfig>(kept.data);
            p.caps_rows = p.config->batch_size;
          }
        });
      case GST_EVENT_CAPS: {
        GstCaps* caps;
        gst_event_parse_caps(event, &caps);
        std::shared_ptr<const BatchConfig> cfg;
        GstEvent* out = caps_event(self, caps, &cfg);
        gst_event_unref(event);
        return out && p.queue.push_event(out, std::move(cfg)) == GST_FLOW_OK;
      }
      default:
        break;
    }
    if (jobflow::gst::is_serialized(event)) return p.queue.push_event(event) == GST_FLOW_OK;
    return gst_pad_event_default(pad, parent, event);
  });
}

gboolean src_query(GstPad* pad, GstObject* parent, GstQuery* query) {
  GstJobBatch* self = GST_JOB_BATCH(parent);
  return jobflow::gst::current_caps_latency_query(pad, parent, query, self->sinkpad, self->impl->latency.load());
}

gboolean src_activate_mode(GstPad*, GstObject* parent, GstPadMode mode, gboolean active) {
  Impl& p = *GST_JOB_BATCH(parent)->impl;
  const gboolean ok = p.queue.activate(mode, active);
  if (!active) {  // the task is stopped
    p.clear_batch();
    p.config.reset();
    p.caps_rows = 0;
    p.latency.store(0);
  }
  return ok;
}

/* ------------------------------------------------------------- GObject */

void set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  GST_JOB_BATCH(object)->impl->settings.with([&](Settings& s) {
    switch (prop_id) {
      case PROP_BATCH_SIZE: s.batch_size = g_value_get_uint(value); break;
      case PROP_MAX_LATENCY: s.max_latency = g_value_get_uint64(value); break;
      case PROP_SHORT_BATCHES: s.short_batches = g_value_get_boolean(value); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

void get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GST_JOB_BATCH(object)->impl->settings.with([&](const Settings& s) {
    switch (prop_id) {
      case PROP_BATCH_SIZE: g_value_set_uint(value, s.batch_size); break;
      case PROP_MAX_LATENCY: g_value_set_uint64(value, s.max_latency); break;
      case PROP_SHORT_BATCHES: g_value_set_boolean(value, s.short_batches); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

}  // namespace

static void gst_job_batch_class_init(GstJobBatchClass* klass) {
  GObjectClass* gobject_class = jobflow::gst::init_object_class<GstJobBatch>(klass, set_property, get_property);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  const auto flags = static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);
  g_object_class_install_property(
      gobject_class, PROP_BATCH_SIZE,
      g_param_spec_uint("batch-size", "Batch size",
                        "Frames per batch: dim 0 of every tensor grows by this factor (set it to the job's batch "
                        "dimension)",
                        1, G_MAXINT, kDefaultBatchSize, flags));
  g_object_class_install_property(
      gobject_class, PROP_MAX_LATENCY,
      g_param_spec_uint64("max-latency", "Maximum latency",
                          "Longest time (ns, monotonic clock) the first frame of a batch waits before a partial "
                          "batch is pushed, padded with zeros (0 = wait for a full batch)",
                          0, G_MAXUINT64, kDefaultMaxLatency, flags));
  g_object_class_install_property(
      gobject_class, PROP_SHORT_BATCHES,
      g_param_spec_boolean("short-batches", "Short batches",
                           "Push a partial batch (max-latency, EOS, new caps or segment) with only its frames, "
                           "under caps for that many, instead of padding it with zeros (for jobs with a dynamic "
                           "batch dimension)",
                           FALSE, flags));
  jobflow::gst::add_tensors_pad_templates(element_class);
  gst_element_class_set_static_metadata(element_class, "Jobflow tensor batcher", "Filter/Tensor",
                                        "Concatenates frames along dim 0 into batches, with a latency bound",
                                        "Jobflow");
}

static void gst_job_batch_init(GstJobBatch* self) {
  self->sinkpad =
      jobflow::gst::add_pad(GST_ELEMENT(self), "sink", chain, sink_event, jobflow::gst::template_caps_query);
  self->srcpad = jobflow::gst::add_pad(GST_ELEMENT(self), "src", nullptr, nullptr, src_query, src_activate_mode);

  SerialQueue::Handler handler;
  handler.item = [self](SerialQueue::Item& item) { return handle_item(self, item); };
  handler.wake = [self] { return handle_wake(self); };
  self->impl = new Impl(GST_ELEMENT(self), self->srcpad, std::move(handler));
}

gboolean jobflow_register_jobbatch(GstPlugin* plugin) {
  GST_DEBUG_CATEGORY_INIT(jobbatch_debug, "jobbatch", 0, "Jobflow batcher");
  return gst_element_register(plugin, "jobbatch", GST_RANK_NONE, GST_TYPE_JOB_BATCH);
}
