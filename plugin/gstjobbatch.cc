/* jobbatch / jobunbatch. See gstjobbatch.h and docs/elements.md.
 *
 * jobbatch decouples threads like a small queue: the sink pad's chain
 * function appends frames to a bounded queue (at most batch-size frames
 * waiting, then it blocks); a task on the src pad takes them in order,
 * assembles batches and pushes them, waking up at the max-latency deadline
 * of the oldest waiting frame. Serialized events travel through the same
 * queue so they keep their place relative to the frames; EOS, caps and
 * segment events first push the partial batch. */
#include "gstjobbatch.h"

#include "element_util.h"
#include "jobflow_meta.h"
#include "tensor_caps.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_STATIC(jobbatch_debug);
#define GST_CAT_DEFAULT jobbatch_debug

/* ---------------------------------------------------------------- meta */

namespace {

void meta_alloc(JobflowBatchMeta* m, guint batch_size) {
  m->batch_size = batch_size;
  m->valid = 0;
  m->pts = g_new(GstClockTime, batch_size);
  m->dts = g_new(GstClockTime, batch_size);
  m->duration = g_new(GstClockTime, batch_size);
  m->offset = g_new(guint64, batch_size);
  for (guint i = 0; i < batch_size; ++i) {
    m->pts[i] = m->dts[i] = m->duration[i] = GST_CLOCK_TIME_NONE;
    m->offset[i] = GST_BUFFER_OFFSET_NONE;
  }
}

gboolean meta_init(GstMeta* meta, gpointer, GstBuffer*) {
  JobflowBatchMeta* m = reinterpret_cast<JobflowBatchMeta*>(meta);
  m->batch_size = m->valid = 0;
  m->pts = m->dts = m->duration = nullptr;
  m->offset = nullptr;
  return TRUE;
}

void meta_free(GstMeta* meta, GstBuffer*) {
  JobflowBatchMeta* m = reinterpret_cast<JobflowBatchMeta*>(meta);
  g_free(m->pts);
  g_free(m->dts);
  g_free(m->duration);
  g_free(m->offset);
}

gboolean meta_transform(GstBuffer* dest, GstMeta* meta, GstBuffer*, GQuark type, gpointer data) {
  if (!GST_META_TRANSFORM_IS_COPY(type)) return FALSE;
  const auto* copy = static_cast<const GstMetaTransformCopy*>(data);
  if (copy->region) return TRUE;  // a part of the batch: the bookkeeping does not apply
  const JobflowBatchMeta* src = reinterpret_cast<const JobflowBatchMeta*>(meta);
  JobflowBatchMeta* dst = jobflow_buffer_add_batch_meta(dest, src->batch_size);
  if (!dst) return FALSE;
  dst->valid = src->valid;
  const size_t n = src->batch_size;
  std::memcpy(dst->pts, src->pts, n * sizeof(GstClockTime));
  std::memcpy(dst->dts, src->dts, n * sizeof(GstClockTime));
  std::memcpy(dst->duration, src->duration, n * sizeof(GstClockTime));
  std::memcpy(dst->offset, src->offset, n * sizeof(guint64));
  return TRUE;
}

}  // namespace

GType jobflow_batch_meta_api_get_type(void) {
  static GType type = 0;
  static const gchar* tags[] = {nullptr};  // no tags: survives any transform that copies metas
  if (g_once_init_enter(&type)) g_once_init_leave(&type, gst_meta_api_type_register("JobflowBatchMetaAPI", tags));
  return type;
}

const GstMetaInfo* jobflow_batch_meta_get_info(void) {
  static const GstMetaInfo* info = nullptr;
  if (g_once_init_enter(&info)) {
    const GstMetaInfo* mi = gst_meta_register(JOBFLOW_BATCH_META_API_TYPE, "JobflowBatchMeta",
                                              sizeof(JobflowBatchMeta), meta_init, meta_free, meta_transform);
    g_once_init_leave(&info, mi);
  }
  return info;
}

JobflowBatchMeta* jobflow_buffer_add_batch_meta(GstBuffer* buffer, guint batch_size) {
  g_return_val_if_fail(GST_IS_BUFFER(buffer), nullptr);
  g_return_val_if_fail(batch_size > 0, nullptr);
  auto* m = reinterpret_cast<JobflowBatchMeta*>(gst_buffer_add_meta(buffer, jobflow_batch_meta_get_info(), nullptr));
  if (m) meta_alloc(m, batch_size);
  return m;
}

/* ------------------------------------------------------------- helpers */

namespace {

using jobflow::Shape;
using jobflow::TensorSpec;

GstStaticPadTemplate tensors_sink_template = GST_STATIC_PAD_TEMPLATE(
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS("other/tensors, format=(string)static"));
GstStaticPadTemplate tensors_src_template = GST_STATIC_PAD_TEMPLATE(
    "src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS("other/tensors, format=(string)static"));

size_t spec_bytes(const TensorSpec& s) {
  return static_cast<size_t>(jobflow::numel(s.shape)) * jobflow::dtype_size(s.dtype);
}

GstBuffer* new_aligned(size_t bytes) {
  GstAllocationParams params;
  gst_allocation_params_init(&params);
  params.align = 63;
  return gst_buffer_new_allocate(nullptr, bytes, &params);
}

gboolean caps_query_reply(GstPad* pad, GstQuery* query, bool current_first) {
  GstCaps* caps = current_first ? gst_pad_get_current_caps(pad) : nullptr;
  if (!caps) caps = gst_pad_get_pad_template_caps(pad);
  return jobflow::gst::answer_caps_query(query, caps);
}

/* ------------------------------------------------------------ jobbatch */

constexpr guint kDefaultBatchSize = 1;
constexpr guint64 kDefaultMaxLatency = 0;  // no bound: wait for a full batch

struct BatchSettings {
  guint batch_size = kDefaultBatchSize;
  guint64 max_latency = kDefaultMaxLatency;
  gboolean short_batches = FALSE;  // a partial batch is pushed short, not padded
};

/* Built from caps + settings; travels with the caps through the queue. */
struct BatchConfig {
  std::vector<TensorSpec> in_specs;
  std::vector<TensorSpec> out_specs;
  std::vector<size_t> frame_bytes;  // per tensor, one frame
  size_t total_frame_bytes = 0;
  guint batch_size = 1;
  GstClockTime frame_duration = GST_CLOCK_TIME_NONE;
  int out_fps_n = 0, out_fps_d = 1;  // the batches' framerate

  /* The specs of a batch of `rows` frames (dim 0 grown by that factor). */
  std::vector<TensorSpec> specs_of(guint rows) const {
    std::vector<TensorSpec> out = in_specs;
    for (TensorSpec& s : out) {
      if (s.shape.empty()) s.shape = {static_cast<int64_t>(rows)};
      else s.shape[0] *= rows;
    }
    return out;
  }
};

struct Item {
  GstBuffer* buffer = nullptr;
  GstEvent* event = nullptr;
  gint64 arrival_us = 0;
  std::shared_ptr<const BatchConfig> config;  // with the output caps event
};

struct BatchState {
  /* under queue_lock */
  std::deque<Item> items;
  guint queued_buffers = 0;
  guint queue_limit = kDefaultBatchSize;
  bool flushing = true;
  GstFlowReturn srcresult = GST_FLOW_FLUSHING;
  GstClockTime latency = 0;  // this element's latency (LATENCY query)
  /* task only (and flush-stop, with the task paused) */
  std::shared_ptr<const BatchConfig> config;
  std::vector<GstBuffer*> batch;
  gint64 deadline_us = 0;  // of the current batch; 0 = none
  guint caps_rows = 0;     // frames per batch of the caps last pushed (0 = none)
};

}  // namespace

struct _GstJobBatch {
  GstElement parent;
  GstPad* sinkpad;
  GstPad* srcpad;
  GMutex settings_lock;
  BatchSettings* settings;
  GMutex queue_lock;
  GCond queue_cond;
  BatchState* state;
};

G_DEFINE_TYPE(GstJobBatch, gst_job_batch, GST_TYPE_ELEMENT)

namespace {

enum { PROP_B_0, PROP_B_BATCH_SIZE, PROP_B_MAX_LATENCY, PROP_B_SHORT_BATCHES };

/* Copies the settings; the lock is released even if the copy throws. */
BatchSettings batch_settings(GstJobBatch* self) {
  g_autoptr(GMutexLocker) locker = g_mutex_locker_new(&self->settings_lock);  // unlocks on return or throw
  return *self->settings;
}

void clear_items(std::deque<Item>* items) {
  for (Item& it : *items) {
    if (it.buffer) gst_buffer_unref(it.buffer);
    if (it.event) gst_event_unref(it.event);
  }
  items->clear();
}

void clear_batch(BatchState* st) {
  for (GstBuffer* b : st->batch) gst_buffer_unref(b);
  st->batch.clear();
  st->deadline_us = 0;
}

/* Assembles and pushes the current (possibly partial) batch. Task thread. */
GstFlowReturn push_batch(GstJobBatch* self) {
  BatchState* st = self->state;
  if (st->batch.empty()) return GST_FLOW_OK;
  const BatchConfig& cfg = *st->config;
  const guint valid = static_cast<guint>(st->batch.size());
  /* A partial batch: padded to batch-size frames, or with short-batches
   * only its frames, under caps for that many (renegotiated both ways). */
  const guint n = valid < cfg.batch_size && batch_settings(self).short_batches ? valid : cfg.batch_size;
  if (n != st->caps_rows) {
    GstCaps* caps = jobflow::gst::caps_from_specs(cfg.specs_of(n), cfg.out_fps_n, cfg.out_fps_d);
    GST_DEBUG_OBJECT(self, "caps for a batch of %u: %" GST_PTR_FORMAT, n, caps);
    const bool ok = gst_pad_push_event(self->srcpad, gst_event_new_caps(caps));
    gst_caps_unref(caps);
    if (!ok) {
      clear_batch(st);
      return GST_PAD_IS_FLUSHING(self->srcpad) ? GST_FLOW_FLUSHING : GST_FLOW_NOT_NEGOTIATED;
    }
    st->caps_rows = n;
  }
  GstBuffer* out = gst_buffer_new();
  for (size_t t = 0; t < cfg.frame_bytes.size(); ++t) {
    const size_t fb = cfg.frame_bytes[t];
    GstBuffer* part = new_aligned(fb * n);
    GstMapInfo map;
    gst_buffer_map(part, &map, GST_MAP_WRITE);
    size_t offset = 0;
    for (size_t u = 0; u < t; ++u) offset += cfg.frame_bytes[u];
    for (guint i = 0; i < valid; ++i) gst_buffer_extract(st->batch[i], offset, map.data + i * fb, fb);
    if (valid < n) std::memset(map.data + valid * fb, 0, (n - valid) * fb);
    gst_buffer_unmap(part, &map);
    gst_buffer_append_memory(out, gst_buffer_get_memory(part, 0));
    gst_buffer_unref(part);
  }
  JobflowBatchMeta* meta = jobflow_buffer_add_batch_meta(out, n);
  meta->valid = valid;
  GstClockTime end = GST_CLOCK_TIME_NONE;
  for (guint i = 0; i < valid; ++i) {
    GstBuffer* f = st->batch[i];
    meta->pts[i] = GST_BUFFER_PTS(f);
    meta->dts[i] = GST_BUFFER_DTS(f);
    meta->duration[i] = GST_BUFFER_DURATION(f);
    meta->offset[i] = GST_BUFFER_OFFSET(f);
    if (GST_BUFFER_PTS_IS_VALID(f)) {
      const GstClockTime d = GST_BUFFER_DURATION_IS_VALID(f) ? GST_BUFFER_DURATION(f) : cfg.frame_duration;
      end = GST_CLOCK_TIME_IS_VALID(d) ? GST_BUFFER_PTS(f) + d : GST_BUFFER_PTS(f);
    }
  }
  GST_BUFFER_PTS(out) = GST_BUFFER_PTS(st->batch[0]);
  GST_BUFFER_DTS(out) = GST_BUFFER_DTS(st->batch[0]);
  if (GST_BUFFER_PTS_IS_VALID(out) && GST_CLOCK_TIME_IS_VALID(end) && end >= GST_BUFFER_PTS(out))
    GST_BUFFER_DURATION(out) = end - GST_BUFFER_PTS(out);
  GST_BUFFER_OFFSET(out) = GST_BUFFER_OFFSET(st->batch[0]);
  jobflow::gst::add_tensor_meta(out, n == cfg.batch_size ? cfg.out_specs : cfg.specs_of(n));
  if (valid < n) GST_DEBUG_OBJECT(self, "pushing a partial batch: %u of %u frames, rest zero", valid, n);
  else if (n < cfg.batch_size) GST_DEBUG_OBJECT(self, "pushing a short batch of %u frames", n);
  clear_batch(st);
  return gst_pad_push(self->srcpad, out);
}

bool frame_fits(GstJobBatch* self, GstBuffer* buf) {
  const BatchConfig& cfg = *self->state->config;
  const size_t size = gst_buffer_get_size(buf);
  if (size == cfg.total_frame_bytes) return true;
  GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("Frame of %" G_GSIZE_FORMAT " bytes, the caps say %zu", size,
                                           cfg.total_frame_bytes),
                    (nullptr));
  return false;
}

void loop(gpointer user_data) {
  GstJobBatch* self = GST_JOB_BATCH(user_data);
  BatchState* st = self->state;
  GstFlowReturn ret = GST_FLOW_OK;
  Item item;
  bool timed_out = false;
  g_mutex_lock(&self->queue_lock);
  for (;;) {
    if (st->flushing) {
      g_mutex_unlock(&self->queue_lock);
      gst_pad_pause_task(self->srcpad);
      return;
    }
    if (!st->batch.empty() && st->deadline_us > 0 && g_get_monotonic_time() >= st->deadline_us) {
      timed_out = true;
      break;
    }
    if (!st->items.empty()) {
      item = std::move(st->items.front());
      st->items.pop_front();
      if (item.buffer) st->queued_buffers--;
      g_cond_broadcast(&self->queue_cond);
      break;
    }
    if (!st->batch.empty() && st->deadline_us > 0)
      g_cond_wait_until(&self->queue_cond, &self->queue_lock, st->deadline_us);
    else
      g_cond_wait(&self->queue_cond, &self->queue_lock);
  }
  g_mutex_unlock(&self->queue_lock);

  try {
    if (timed_out) {
      GST_DEBUG_OBJECT(self, "max-latency reached with %zu frame(s)", st->batch.size());
      ret = push_batch(self);
    } else if (item.buffer) {
      if (!st->config) {
        GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("No caps before the first buffer"), (nullptr));
        gst_buffer_unref(item.buffer);
        ret = GST_FLOW_NOT_NEGOTIATED;
      } else if (!frame_fits(self, item.buffer)) {
        gst_buffer_unref(item.buffer);
        ret = GST_FLOW_ERROR;
      } else {
        st->batch.push_back(item.buffer);
        if (st->batch.size() == 1) {
          const guint64 max_latency = batch_settings(self).max_latency;
          st->deadline_us = max_latency > 0 ? item.arrival_us + static_cast<gint64>(max_latency / 1000) : 0;
        }
        if (st->batch.size() >= st->config->batch_size) ret = push_batch(self);
      }
    } else if (item.event) {
      const GstEventType type = GST_EVENT_TYPE(item.event);
      if (type == GST_EVENT_EOS || type == GST_EVENT_CAPS || type == GST_EVENT_SEGMENT ||
          type == GST_EVENT_GAP)
        ret = push_batch(self);
      if (type == GST_EVENT_CAPS) st->config = item.config;
      if (ret == GST_FLOW_OK) {
        const bool ok = gst_pad_push_event(self->srcpad, item.event);
        if (type == GST_EVENT_CAPS && ok) st->caps_rows = st->config->batch_size;
        if (type == GST_EVENT_EOS) ret = GST_FLOW_EOS;
        else if (type == GST_EVENT_CAPS && !ok) ret = GST_FLOW_NOT_NEGOTIATED;
      } else {
        gst_event_unref(item.event);
      }
    }
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(self, CORE, FAILED, ("Batching failed"), ("%s", e.what()));
    ret = GST_FLOW_ERROR;
  }

  if (ret != GST_FLOW_OK) {
    g_mutex_lock(&self->queue_lock);
    if (!st->flushing) st->srcresult = ret;
    g_cond_broadcast(&self->queue_cond);
    g_mutex_unlock(&self->queue_lock);
    gst_pad_pause_task(self->srcpad);
    if (ret == GST_FLOW_NOT_LINKED || ret < GST_FLOW_EOS) {
      GST_ELEMENT_FLOW_ERROR(self, ret);
      gst_pad_push_event(self->srcpad, gst_event_new_eos());
    }
  }
}

/* Enqueues a buffer or serialized event for the task (blocks while the
 * queue is full for buffers). Returns the flow state. */
GstFlowReturn enqueue(GstJobBatch* self, Item item) {  // takes the item's references
  BatchState* st = self->state;
  g_mutex_lock(&self->queue_lock);
  if (item.buffer)
    while (!st->flushing && st->srcresult == GST_FLOW_OK && st->queued_buffers >= st->queue_limit)
      g_cond_wait(&self->queue_cond, &self->queue_lock);
  const GstFlowReturn ret = st->srcresult;
  if (ret != GST_FLOW_OK) {
    g_mutex_unlock(&self->queue_lock);
    if (item.buffer) gst_buffer_unref(item.buffer);
    if (item.event) gst_event_unref(item.event);
    return ret;
  }
  item.arrival_us = g_get_monotonic_time();
  try {
    st->items.push_back(item);
  } catch (...) {
    g_mutex_unlock(&self->queue_lock);
    throw;  // the caller owns the item again and reports the error
  }
  if (item.buffer) st->queued_buffers++;
  g_cond_broadcast(&self->queue_cond);
  g_mutex_unlock(&self->queue_lock);
  return GST_FLOW_OK;
}

GstFlowReturn batch_chain(GstPad*, GstObject* parent, GstBuffer* buf) {
  GstJobBatch* self = GST_JOB_BATCH(parent);
  try {
    Item item;
    item.buffer = buf;
    return enqueue(self, item);
  } catch (const std::exception& e) {
    gst_buffer_unref(buf);
    GST_ELEMENT_ERROR(self, CORE, FAILED, ("Batching failed"), ("%s", e.what()));
    return GST_FLOW_ERROR;
  }
}

/* Output caps for input caps; posts an error and returns null on failure. */
GstEvent* batch_caps_event(GstJobBatch* self, GstCaps* caps, std::shared_ptr<const BatchConfig>* out_cfg) {
  auto cfg = std::make_shared<BatchConfig>();
  std::string error;
  if (!jobflow::gst::specs_from_caps(caps, &cfg->in_specs, &error)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Invalid tensor caps: %s", error.c_str()), ("%" GST_PTR_FORMAT, caps));
    return nullptr;
  }
  const BatchSettings settings = batch_settings(self);
  cfg->batch_size = settings.batch_size;
  std::vector<TensorSpec> out_specs = cfg->in_specs;
  for (TensorSpec& s : out_specs) {
    if (s.shape.empty())
      s.shape = {static_cast<int64_t>(cfg->batch_size)};
    else
      s.shape[0] *= cfg->batch_size;
  }
  for (const TensorSpec& s : cfg->in_specs) {
    cfg->frame_bytes.push_back(spec_bytes(s));
    cfg->total_frame_bytes += spec_bytes(s);
  }
  int fps_n = 0, fps_d = 1, out_n = 0, out_d = 1;
  const GstStructure* s = gst_caps_get_structure(caps, 0);
  if (gst_structure_get_fraction(s, "framerate", &fps_n, &fps_d) && fps_n > 0) {
    cfg->frame_duration = gst_util_uint64_scale_int(GST_SECOND, fps_d, fps_n);
    gst_util_fraction_multiply(fps_n, fps_d, 1, static_cast<gint>(cfg->batch_size), &out_n, &out_d);
  }
  cfg->out_fps_n = out_n;
  cfg->out_fps_d = out_d;
  GstCaps* out = jobflow::gst::caps_from_specs(out_specs, out_n, out_d);
  cfg->out_specs = std::move(out_specs);
  GST_DEBUG_OBJECT(self, "%" GST_PTR_FORMAT " -> %" GST_PTR_FORMAT, caps, out);
  GstEvent* event = gst_event_new_caps(out);
  gst_caps_unref(out);

  /* Latency added: a frame waits for batch-size - 1 more, or max-latency. */
  GstClockTime latency = 0;
  if (GST_CLOCK_TIME_IS_VALID(cfg->frame_duration)) latency = cfg->frame_duration * (cfg->batch_size - 1);
  if (settings.max_latency > 0)
    latency = GST_CLOCK_TIME_IS_VALID(cfg->frame_duration) ? std::min<GstClockTime>(latency, settings.max_latency)
                                                           : settings.max_latency;
  g_mutex_lock(&self->queue_lock);
  self->state->queue_limit = cfg->batch_size;
  self->state->latency = latency;
  g_cond_broadcast(&self->queue_cond);
  g_mutex_unlock(&self->queue_lock);
  *out_cfg = cfg;
  return event;
}

gboolean batch_sink_event(GstPad* pad, GstObject* parent, GstEvent* event) {
  GstJobBatch* self = GST_JOB_BATCH(parent);
  BatchState* st = self->state;
  try {
    switch (GST_EVENT_TYPE(event)) {
      case GST_EVENT_FLUSH_START: {
        const gboolean ok = gst_pad_push_event(self->srcpad, event);
        g_mutex_lock(&self->queue_lock);
        st->flushing = true;
        st->srcresult = GST_FLOW_FLUSHING;
        g_cond_broadcast(&self->queue_cond);
        g_mutex_unlock(&self->queue_lock);
        gst_pad_pause_task(self->srcpad);  // waits for the loop to leave
        return ok;
      }
      case GST_EVENT_FLUSH_STOP: {
        g_mutex_lock(&self->queue_lock);
        /* As queue does: sticky events still waiting (stream-start, caps,
         * tags...) are kept on the src pad so they precede the next buffer;
         * segments and EOS are dropped with the data. */
        for (Item& it : st->items) {
          if (!it.event) continue;
          const GstEventType type = GST_EVENT_TYPE(it.event);
          if (!jobflow::gst::is_sticky(it.event) || type == GST_EVENT_SEGMENT || type == GST_EVENT_EOS) continue;
          if (type == GST_EVENT_CAPS) st->config = it.config, st->caps_rows = it.config->batch_size;
          gst_pad_store_sticky_event(self->srcpad, it.event);
        }
        clear_items(&st->items);
        st->queued_buffers = 0;
        clear_batch(st);
        st->flushing = false;
        st->srcresult = GST_FLOW_OK;
        g_mutex_unlock(&self->queue_lock);
        const gboolean ok = gst_pad_push_event(self->srcpad, event);
        gst_pad_start_task(self->srcpad, loop, self, nullptr);
        return ok;
      }
      case GST_EVENT_CAPS: {
        GstCaps* caps;
        gst_event_parse_caps(event, &caps);
        Item item;
        item.event = batch_caps_event(self, caps, &item.config);
        gst_event_unref(event);
        if (!item.event) return FALSE;
        return enqueue(self, item) == GST_FLOW_OK;
      }
      default:
        break;
    }
    if (jobflow::gst::is_serialized(event)) {
      Item item;
      item.event = event;
      return enqueue(self, item) == GST_FLOW_OK;
    }
    return gst_pad_event_default(pad, parent, event);
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(self, CORE, FAILED, ("Event handling failed"), ("%s", e.what()));
    return FALSE;
  }
}

gboolean batch_src_query(GstPad* pad, GstObject* parent, GstQuery* query) {
  GstJobBatch* self = GST_JOB_BATCH(parent);
  switch (GST_QUERY_TYPE(query)) {
    case GST_QUERY_LATENCY: {
      if (!gst_pad_peer_query(self->sinkpad, query)) return FALSE;
      gboolean live;
      GstClockTime min, max;
      gst_query_parse_latency(query, &live, &min, &max);
      g_mutex_lock(&self->queue_lock);
      const GstClockTime extra = self->state->latency;
      g_mutex_unlock(&self->queue_lock);
      GST_DEBUG_OBJECT(self, "latency: adding %" GST_TIME_FORMAT, GST_TIME_ARGS(extra));
      min += extra;
      if (GST_CLOCK_TIME_IS_VALID(max)) max += extra;
      gst_query_set_latency(query, live, min, max);
      return TRUE;
    }
    case GST_QUERY_CAPS:
      return caps_query_reply(pad, query, true);
    default:
      return gst_pad_query_default(pad, parent, query);
  }
}

gboolean batch_sink_query(GstPad* pad, GstObject* parent, GstQuery* query) {
  if (GST_QUERY_TYPE(query) == GST_QUERY_CAPS) return caps_query_reply(pad, query, false);
  return gst_pad_query_default(pad, parent, query);
}

gboolean batch_src_activate_mode(GstPad* pad, GstObject* parent, GstPadMode mode, gboolean active) {
  GstJobBatch* self = GST_JOB_BATCH(parent);
  BatchState* st = self->state;
  if (mode != GST_PAD_MODE_PUSH) return FALSE;
  if (active) {
    g_mutex_lock(&self->queue_lock);
    st->flushing = false;
    st->srcresult = GST_FLOW_OK;
    g_mutex_unlock(&self->queue_lock);
    return gst_pad_start_task(pad, loop, self, nullptr);
  }
  g_mutex_lock(&self->queue_lock);
  st->flushing = true;
  st->srcresult = GST_FLOW_FLUSHING;
  g_cond_broadcast(&self->queue_cond);
  g_mutex_unlock(&self->queue_lock);
  const gboolean ok = gst_pad_stop_task(pad);
  g_mutex_lock(&self->queue_lock);
  clear_items(&st->items);
  st->queued_buffers = 0;
  clear_batch(st);
  st->config.reset();
  st->caps_rows = 0;
  st->latency = 0;
  g_mutex_unlock(&self->queue_lock);
  return ok;
}

void batch_set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  GstJobBatch* self = GST_JOB_BATCH(object);
  g_mutex_lock(&self->settings_lock);
  switch (prop_id) {
    case PROP_B_BATCH_SIZE: self->settings->batch_size = g_value_get_uint(value); break;
    case PROP_B_MAX_LATENCY: self->settings->max_latency = g_value_get_uint64(value); break;
    case PROP_B_SHORT_BATCHES: self->settings->short_batches = g_value_get_boolean(value); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
  }
  g_mutex_unlock(&self->settings_lock);
}

void batch_get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GstJobBatch* self = GST_JOB_BATCH(object);
  g_mutex_lock(&self->settings_lock);
  switch (prop_id) {
    case PROP_B_BATCH_SIZE: g_value_set_uint(value, self->settings->batch_size); break;
    case PROP_B_MAX_LATENCY: g_value_set_uint64(value, self->settings->max_latency); break;
    case PROP_B_SHORT_BATCHES: g_value_set_boolean(value, self->settings->short_batches); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
  }
  g_mutex_unlock(&self->settings_lock);
}

void batch_finalize(GObject* object) {
  GstJobBatch* self = GST_JOB_BATCH(object);
  clear_items(&self->state->items);
  clear_batch(self->state);
  delete self->state;
  delete self->settings;
  g_mutex_clear(&self->settings_lock);
  g_mutex_clear(&self->queue_lock);
  g_cond_clear(&self->queue_cond);
  G_OBJECT_CLASS(gst_job_batch_parent_class)->finalize(object);
}

}  // namespace

static void gst_job_batch_class_init(GstJobBatchClass* klass) {
  GObjectClass* gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  gobject_class->set_property = batch_set_property;
  gobject_class->get_property = batch_get_property;
  gobject_class->finalize = batch_finalize;
  const auto flags = static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);
  g_object_class_install_property(
      gobject_class, PROP_B_BATCH_SIZE,
      g_param_spec_uint("batch-size", "Batch size",
                        "Frames per batch: dim 0 of every tensor grows by this factor (set it to the job's batch "
                        "dimension)",
                        1, G_MAXINT, kDefaultBatchSize, flags));
  g_object_class_install_property(
      gobject_class, PROP_B_MAX_LATENCY,
      g_param_spec_uint64("max-latency", "Maximum latency",
                          "Longest time (ns, monotonic clock) the first frame of a batch waits before a partial "
                          "batch is pushed, padded with zeros (0 = wait for a full batch)",
                          0, G_MAXUINT64, kDefaultMaxLatency, flags));
  g_object_class_install_property(
      gobject_class, PROP_B_SHORT_BATCHES,
      g_param_spec_boolean("short-batches", "Short batches",
                           "Push a partial batch (max-latency, EOS, new caps or segment) with only its frames, "
                           "under caps for that many, instead of padding it with zeros (for jobs with a dynamic "
                           "batch dimension)",
                           FALSE, flags));
  gst_element_class_add_static_pad_template(element_class, &tensors_sink_template);
  gst_element_class_add_static_pad_template(element_class, &tensors_src_template);
  gst_element_class_set_static_metadata(element_class, "Jobflow tensor batcher", "Filter/Tensor",
                                        "Concatenates frames along dim 0 into batches, with a latency bound",
                                        "Jobflow");
}

static void gst_job_batch_init(GstJobBatch* self) {
  g_mutex_init(&self->settings_lock);
  g_mutex_init(&self->queue_lock);
  g_cond_init(&self->queue_cond);
  self->settings = new BatchSettings();
  self->state = new BatchState();
  self->sinkpad = gst_pad_new_from_static_template(&tensors_sink_template, "sink");
  gst_pad_set_chain_function(self->sinkpad, batch_chain);
  gst_pad_set_event_function(self->sinkpad, batch_sink_event);
  gst_pad_set_query_function(self->sinkpad, batch_sink_query);
  gst_element_add_pad(GST_ELEMENT(self), self->sinkpad);
  self->srcpad = gst_pad_new_from_static_template(&tensors_src_template, "src");
  gst_pad_set_activatemode_function(self->srcpad, batch_src_activate_mode);
  gst_pad_set_query_function(self->srcpad, batch_src_query);
  gst_element_add_pad(GST_ELEMENT(self), self->srcpad);
}

/* ---------------------------------------------------------- jobunbatch */

namespace {

constexpr guint kDefaultUnbatchSize = 0;  // 0 = from JobflowBatchMeta

struct UnbatchState {
  std::vector<TensorSpec> in_specs;
  std::vector<TensorSpec> out_specs;  // for caps_batch_size
  bool have_caps = false;
  guint caps_batch_size = 0;  // batch size the pushed output caps are for (0 = none pushed)
  /* Serialized events (segment, tags, ...) that arrive before the first
   * output caps: held and pushed after them, so the src pad never sees a
   * segment before caps. */
  std::vector<GstEvent*> pending_events;
};

}  // namespace

struct _GstJobUnbatch {
  GstElement parent;
  GstPad* sinkpad;
  GstPad* srcpad;
  GMutex settings_lock;
  guint batch_size;  // property, under settings_lock
  UnbatchState* state;
};

G_DEFINE_TYPE(GstJobUnbatch, gst_job_unbatch, GST_TYPE_ELEMENT)

namespace {

enum { PROP_U_0, PROP_U_BATCH_SIZE };

void unbatch_push_pending_events(GstJobUnbatch* self) {
  std::vector<GstEvent*> events;
  events.swap(self->state->pending_events);
  for (GstEvent* e : events) gst_pad_push_event(self->srcpad, e);
}

void unbatch_drop_pending_events(UnbatchState* st) {
  for (GstEvent* e : st->pending_events) gst_event_unref(e);
  st->pending_events.clear();
}

bool unbatch_check_split(GstJobUnbatch* self, guint n) {
  for (size_t t = 0; t < self->state->in_specs.size(); ++t) {
    const TensorSpec& s = self->state->in_specs[t];
    if (s.shape.empty() || s.shape[0] % n != 0) {
      GST_ELEMENT_ERROR(self, STREAM, FORMAT,
                        ("Tensor %zu of shape %s cannot be split into %u frames along dim 0", t,
                         jobflow::shape_str(s.shape).c_str(), n),
                        ("batch size from %s", "JobflowBatchMeta or the batch-size property"));
      return false;
    }
  }
  return true;
}

bool unbatch_push_caps(GstJobUnbatch* self, guint n) {
  UnbatchState* st = self->state;
  std::vector<TensorSpec> out = st->in_specs;
  for (TensorSpec& s : out) s.shape[0] /= n;
  int fps_n = 0, fps_d = 1, out_n = 0, out_d = 1;
  GstCaps* in_caps = gst_pad_get_current_caps(self->sinkpad);
  if (in_caps) {
    const GstStructure* s = gst_caps_get_structure(in_caps, 0);
    if (gst_structure_get_fraction(s, "framerate", &fps_n, &fps_d) && fps_n > 0)
      gst_util_fraction_multiply(fps_n, fps_d, static_cast<gint>(n), 1, &out_n, &out_d);
    gst_caps_unref(in_caps);
  }
  GstCaps* caps = jobflow::gst::caps_from_specs(out, out_n, out_d);
  GST_DEBUG_OBJECT(self, "output caps %" GST_PTR_FORMAT, caps);
  const bool ok = gst_pad_push_event(self->srcpad, gst_event_new_caps(caps));
  gst_caps_unref(caps);
  if (ok) {
    st->caps_batch_size = n;
    st->out_specs = std::move(out);
  }
  unbatch_push_pending_events(self);
  return ok;
}

GstFlowReturn unbatch_chain(GstPad*, GstObject* parent, GstBuffer* buf) {
  GstJobUnbatch* self = GST_JOB_UNBATCH(parent);
  UnbatchState* st = self->state;
  try {
    if (!st->have_caps) {
      GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("No caps before the first buffer"), (nullptr));
      gst_buffer_unref(buf);
      return GST_FLOW_NOT_NEGOTIATED;
    }
    const JobflowBatchMeta* meta = jobflow_buffer_get_batch_meta(buf);
    g_mutex_lock(&self->settings_lock);
    const guint prop_n = self->batch_size;
    g_mutex_unlock(&self->settings_lock);
    const guint n = meta ? meta->batch_size : prop_n;
    if (n == 0) {
      GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("Buffer has no JobflowBatchMeta and property 'batch-size' is 0"),
                        ("set batch-size, or make the elements between jobbatch and jobunbatch copy metas"));
      gst_buffer_unref(buf);
      return GST_FLOW_ERROR;
    }
    if (meta && prop_n != 0 && prop_n != n)
      GST_WARNING_OBJECT(self, "batch-size=%u but the buffer's meta says %u: using the meta", prop_n, n);
    if (!unbatch_check_split(self, n)) {
      gst_buffer_unref(buf);
      return GST_FLOW_ERROR;
    }
    std::vector<size_t> bytes;
    size_t total = 0;
    for (const TensorSpec& s : st->in_specs) {
      bytes.push_back(spec_bytes(s));
      total += bytes.back();
    }
    if (gst_buffer_get_size(buf) != total) {
      GST_ELEMENT_ERROR(self, STREAM, FORMAT,
                        ("Buffer has %" G_GSIZE_FORMAT " bytes, the caps say %zu", gst_buffer_get_size(buf), total),
                        (nullptr));
      gst_buffer_unref(buf);
      return GST_FLOW_ERROR;
    }
    if (st->caps_batch_size != n && !unbatch_push_caps(self, n)) {
      gst_buffer_unref(buf);
      return GST_FLOW_NOT_NEGOTIATED;
    }
    const guint valid = meta ? std::min(meta->valid, n) : n;
    const GstClockTime pts = GST_BUFFER_PTS(buf), dur = GST_BUFFER_DURATION(buf);
    GstFlowReturn ret = GST_FLOW_OK;
    for (guint i = 0; i < valid && ret == GST_FLOW_OK; ++i) {
      GstBuffer* out = gst_buffer_new();
      size_t offset = 0;
      for (size_t t = 0; t < bytes.size(); ++t) {
        const size_t fb = bytes[t] / n;
        GstBuffer* region = gst_buffer_copy_region(buf, GST_BUFFER_COPY_MEMORY, offset + i * fb, fb);
        gst_buffer_append_memory(out, gst_buffer_get_all_memory(region));  // shares, or merges when split
        gst_buffer_unref(region);
        offset += bytes[t];
      }
      if (meta) {
        GST_BUFFER_PTS(out) = meta->pts[i];
        GST_BUFFER_DTS(out) = meta->dts[i];
        GST_BUFFER_DURATION(out) = meta->duration[i];
        GST_BUFFER_OFFSET(out) = meta->offset[i];
      } else if (GST_CLOCK_TIME_IS_VALID(pts)) {
        const GstClockTime step = GST_CLOCK_TIME_IS_VALID(dur) ? dur / n : 0;
        GST_BUFFER_PTS(out) = pts + step * i;
        if (GST_CLOCK_TIME_IS_VALID(dur)) GST_BUFFER_DURATION(out) = step;
      }
      jobflow::gst::add_tensor_meta(out, st->out_specs);
      ret = gst_pad_push(self->srcpad, out);
    }
    gst_buffer_unref(buf);
    return ret;
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(self, CORE, FAILED, ("Unbatching failed"), ("%s", e.what()));
    return GST_FLOW_ERROR;
  }
}

gboolean unbatch_sink_event(GstPad* pad, GstObject* parent, GstEvent* event) {
  GstJobUnbatch* self = GST_JOB_UNBATCH(parent);
  UnbatchState* st = self->state;
  try {
    switch (GST_EVENT_TYPE(event)) {
      case GST_EVENT_CAPS: {
        GstCaps* caps;
        gst_event_parse_caps(event, &caps);
        std::vector<TensorSpec> specs;
        std::string error;
        const bool ok = jobflow::gst::specs_from_caps(caps, &specs, &error);
        gst_event_unref(event);
        if (!ok) {
          GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Invalid tensor caps: %s", error.c_str()), (nullptr));
          return FALSE;
        }
        /* The output caps depend on each buffer's batch size: sent before
         * the first buffer. */
        st->in_specs = std::move(specs);
        st->have_caps = true;
        st->caps_batch_size = 0;
        return TRUE;
      }
      case GST_EVENT_STREAM_START:
      case GST_EVENT_FLUSH_STOP:
        break;
      case GST_EVENT_EOS:
        unbatch_push_pending_events(self);
        break;
      default:
        if (jobflow::gst::is_serialized(event) && st->have_caps && !gst_pad_has_current_caps(self->srcpad)) {
          st->pending_events.push_back(event);
          return TRUE;
        }
        break;
    }
    return gst_pad_event_default(pad, parent, event);
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(self, CORE, FAILED, ("Event handling failed"), ("%s", e.what()));
    return FALSE;
  }
}

gboolean unbatch_src_query(GstPad* pad, GstObject* parent, GstQuery* query) {
  if (GST_QUERY_TYPE(query) == GST_QUERY_CAPS) return caps_query_reply(pad, query, true);
  return gst_pad_query_default(pad, parent, query);
}

gboolean unbatch_sink_query(GstPad* pad, GstObject* parent, GstQuery* query) {
  if (GST_QUERY_TYPE(query) == GST_QUERY_CAPS) return caps_query_reply(pad, query, false);
  return gst_pad_query_default(pad, parent, query);
}

GstStateChangeReturn unbatch_change_state(GstElement* element, GstStateChange transition) {
  GstJobUnbatch* self = GST_JOB_UNBATCH(element);
  GstStateChangeReturn ret = GST_ELEMENT_CLASS(gst_job_unbatch_parent_class)->change_state(element, transition);
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY) {
    unbatch_drop_pending_events(self->state);
    *self->state = UnbatchState{};
  }
  return ret;
}

void unbatch_set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  GstJobUnbatch* self = GST_JOB_UNBATCH(object);
  g_mutex_lock(&self->settings_lock);
  if (prop_id == PROP_U_BATCH_SIZE)
    self->batch_size = g_value_get_uint(value);
  else
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
  g_mutex_unlock(&self->settings_lock);
}

void unbatch_get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GstJobUnbatch* self = GST_JOB_UNBATCH(object);
  g_mutex_lock(&self->settings_lock);
  if (prop_id == PROP_U_BATCH_SIZE)
    g_value_set_uint(value, self->batch_size);
  else
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
  g_mutex_unlock(&self->settings_lock);
}

void unbatch_finalize(GObject* object) {
  GstJobUnbatch* self = GST_JOB_UNBATCH(object);
  unbatch_drop_pending_events(self->state);
  delete self->state;
  g_mutex_clear(&self->settings_lock);
  G_OBJECT_CLASS(gst_job_unbatch_parent_class)->finalize(object);
}

}  // namespace

static void gst_job_unbatch_class_init(GstJobUnbatchClass* klass) {
  GObjectClass* gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  gobject_class->set_property = unbatch_set_property;
  gobject_class->get_property = unbatch_get_property;
  gobject_class->finalize = unbatch_finalize;
  element_class->change_state = unbatch_change_state;
  g_object_class_install_property(
      gobject_class, PROP_U_BATCH_SIZE,
      g_param_spec_uint("batch-size", "Batch size",
                        "Frames per batch when a buffer carries no JobflowBatchMeta (0 = take it from the meta; "
                        "the meta wins when both are there)",
                        0, G_MAXINT, kDefaultUnbatchSize,
                        static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                                 GST_PARAM_MUTABLE_PLAYING)));
  gst_element_class_add_static_pad_template(element_class, &tensors_sink_template);
  gst_element_class_add_static_pad_template(element_class, &tensors_src_template);
  gst_element_class_set_static_metadata(element_class, "Jobflow tensor unbatcher", "Filter/Tensor",
                                        "Splits batched tensors back into frames with their own timestamps",
                                        "Jobflow");
}

static void gst_job_unbatch_init(GstJobUnbatch* self) {
  g_mutex_init(&self->settings_lock);
  self->batch_size = kDefaultUnbatchSize;
  self->state = new UnbatchState();
  self->sinkpad = gst_pad_new_from_static_template(&tensors_sink_template, "sink");
  gst_pad_set_chain_function(self->sinkpad, unbatch_chain);
  gst_pad_set_event_function(self->sinkpad, unbatch_sink_event);
  gst_pad_set_query_function(self->sinkpad, unbatch_sink_query);
  gst_element_add_pad(GST_ELEMENT(self), self->sinkpad);
  self->srcpad = gst_pad_new_from_static_template(&tensors_src_template, "src");
  gst_pad_set_query_function(self->srcpad, unbatch_src_query);
  gst_element_add_pad(GST_ELEMENT(self), self->srcpad);
}

gboolean jobflow_register_jobbatch(GstPlugin* plugin) {
  GST_DEBUG_CATEGORY_INIT(jobbatch_debug, "jobbatch", 0, "Jobflow batcher and unbatcher");
  return gst_element_register(plugin, "jobbatch", GST_RANK_NONE, GST_TYPE_JOB_BATCH) &&
         gst_element_register(plugin, "jobunbatch", GST_RANK_NONE, GST_TYPE_JOB_UNBATCH);
}
