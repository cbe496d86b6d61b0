/* jobmux. See gstjobmux.h and docs/elements.md.
 *
 * Threads. Every sink pad's chain function (upstream's streaming thread)
 * queues its frames and serialized events in that pad's own queue (at most
 * batch-size frames waiting, then it blocks); one task on the src pad takes
 * them: first the events at the head of each queue (caps, segment, EOS:
 * they apply to that source's next frames), then one frame from each
 * source in turn into the batch being assembled, which it pushes when full
 * or when its first frame has waited max-latency. The queues, the batch
 * being assembled and the flags live under one mutex; the task pushes
 * without it.
 *
 * Flushing. A flush on one sink pad drops that source's waiting frames
 * (and its frames in the batch being assembled); it is not forwarded:
 * the other sources go on. A flushing seek on the src pad flushes
 * downstream itself (FLUSH_START, the task paused, the seek sent to every
 * source, the batch being assembled dropped, FLUSH_STOP, a new segment). */
#include "gstjobmux.h"

#include "element_util.h"
#include "jobflow_meta.h"
#include "tensor_caps.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_STATIC(jobmux_debug);
#define GST_CAT_DEFAULT jobmux_debug

namespace {

using jobflow::TensorSpec;

constexpr guint kDefaultBatchSize = 1;
constexpr guint64 kDefaultMaxLatency = 0;  // no bound: wait for a full batch

struct Settings {
  guint batch_size = kDefaultBatchSize;
  guint64 max_latency = kDefaultMaxLatency;
};

/* A frame or a serialized event in a source's queue (owns its reference). */
struct Item {
  GstBuffer* buffer = nullptr;
  GstEvent* event = nullptr;
  gint64 arrival_us = 0;
  Item() = default;
  Item(const Item&) = delete;
  Item& operator=(const Item&) = delete;
  Item(Item&& o) noexcept
      : buffer(std::exchange(o.buffer, nullptr)), event(std::exchange(o.event, nullptr)), arrival_us(o.arrival_us) {}
  Item& operator=(Item&& o) noexcept {
    if (this != &o) {
      release();
      buffer = std::exchange(o.buffer, nullptr);
      event = std::exchange(o.event, nullptr);
      arrival_us = o.arrival_us;
    }
    return *this;
  }
  ~Item() { release(); }
  void release() {
    if (buffer) gst_buffer_unref(buffer);
    if (event) gst_event_unref(event);
    buffer = nullptr;
    event = nullptr;
  }
};

/* One source: a sink pad and its queue. */
struct Source {
  guint id = 0;
  GstPad* pad = nullptr;  // not owned (the element holds it while it is a child)
  std::deque<Item> items;
  guint queued_buffers = 0;
  bool flushing = false;  // between FLUSH_START and FLUSH_STOP on this pad
  bool eos = false;       // its EOS left its queue: all its frames are in batches
  bool sent_frames = false;
  /* Task side (under the mutex): what applies to the source's next frame. */
  GstCaps* caps = nullptr;
  GstSegment segment{};
  Source() { gst_segment_init(&segment, GST_FORMAT_TIME); }
  ~Source() {
    items.clear();
    if (caps) gst_caps_unref(caps);
  }
};

/* A frame in the batch being assembled. */
struct Slot {
  guint source = 0;
  GstBuffer* frame = nullptr;
  GstCaps* caps = nullptr;
  GstSegment segment{};
  gint64 arrival_us = 0;
};
void release_slot(Slot& s) {
  if (s.frame) gst_buffer_unref(s.frame);
  if (s.caps) gst_caps_unref(s.caps);
  s.frame = nullptr;
  s.caps = nullptr;
}

/* What the task does next, decided under the mutex and done without it. */
struct Work {
  enum Kind { Wait, PushBatch, Events, Eos, Flushing } kind = Wait;
  std::vector<Slot> batch;
  std::vector<GstEvent*> events_before;  // source-EOS events whose frames were pushed already
  std::vector<GstEvent*> events_after;   // ... whose last frame is in `batch`
  gint64 until_us = 0;                   // Wait: deadline (0 = none)
};

GstEvent* source_eos_event(guint source, bool released) {
  return gst_event_new_custom(GST_EVENT_CUSTOM_DOWNSTREAM,
                              gst_structure_new(JOBFLOW_MUX_SOURCE_EOS_EVENT, "source", G_TYPE_UINT, source,
                                                "released", G_TYPE_BOOLEAN, released, nullptr));
}

struct Impl {
  ~Impl() { clear_all(); }
  /* Drops every queued item and the batch being assembled (mutex held or
   * nobody else running). */
  void clear_all() {
    for (auto& [id, s] : sources) {
      s->items.clear();
      s->queued_buffers = 0;
    }
    for (Slot& s : batch) release_slot(s);
    batch.clear();
    for (GstEvent* e : deferred) gst_event_unref(e);
    deferred.clear();
  }

  jobflow::gst::Locked<Settings> settings;

  std::mutex mu;  // guards what follows
  std::condition_variable cv;
  std::map<guint, std::shared_ptr<Source>> sources;
  std::vector<Slot> batch;            // being assembled
  std::vector<GstEvent*> deferred;    // source-EOS events to push after the batch being assembled
  guint next_source = 0;              // round-robin: the source to take a frame from first
  bool flushing = true;               // the src pad is inactive, or a seek flushes
  GstFlowReturn srcresult = GST_FLOW_FLUSHING;
  guint limit = 1;                    // frames a source may queue (batch-size)
  /* Fixed by the first source's caps; every source must give the same. */
  std::vector<TensorSpec> specs;
  std::string specs_from;             // the pad that fixed them

  /* Task only. */
  bool started = false;               // stream-start, caps and segment pushed
  bool need_segment = false;
  guint out_batch = 0;                // batch size of the pushed caps
  guint64 out_offset = 0;
};

}  // namespace

struct _GstJobMux {
  GstElement parent;
  GstPad* srcpad;
  Impl* impl;
};

G_DEFINE_TYPE(GstJobMux, gst_job_mux, GST_TYPE_ELEMENT)

namespace {

enum { PROP_0, PROP_BATCH_SIZE, PROP_MAX_LATENCY };

GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE(
    "sink_%u", GST_PAD_SINK, GST_PAD_REQUEST, GST_STATIC_CAPS("other/tensors, format=(string)static"));
GstStaticPadTemplate src_template =
    GST_STATIC_PAD_TEMPLATE("src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS("other/tensors, format=(string)static"));

std::string specs_str(const std::vector<TensorSpec>& specs) {
  std::string s;
  for (const TensorSpec& t : specs)
    s += (s.empty() ? "" : ", ") + jobflow::shape_str(t.shape) + " " + jobflow::gst::dtype_to_nns(t.dtype);
  return s;
}

bool same_specs(const std::vector<TensorSpec>& a, const std::vector<TensorSpec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].shape != b[i].shape || a[i].dtype != b[i].dtype) return false;
  return true;
}

/* ------------------------------------------------------------ src task */

/* Running time of a slot's frame (NONE when unknown). */
GstClockTime running_time(const Slot& s) {
  const GstClockTime pts = GST_BUFFER_PTS(s.frame);
  if (!GST_CLOCK_TIME_IS_VALID(pts) || s.segment.format != GST_FORMAT_TIME) return GST_CLOCK_TIME_NONE;
  return gst_segment_to_running_time(&s.segment, GST_FORMAT_TIME, pts);
}

/* Pushes stream-start, caps and segment before the first batch (and a
 * segment after a seek). False when downstream refuses the caps. */
bool push_stream_events(GstJobMux* self, guint batch_size, const std::vector<TensorSpec>& specs) {
  Impl& p = *self->impl;
  if (!p.started) {
    /* Ours (a muxer has no one upstream stream id to derive it from). */
    gchar* id = g_strdup_printf("%08x%08x%08x%08x/jobmux", g_random_int(), g_random_int(), g_random_int(),
                                g_random_int());
    GstEvent* ss = gst_event_new_stream_start(id);
    gst_event_set_group_id(ss, gst_util_group_id_next());
    g_free(id);
    gst_pad_push_event(self->srcpad, ss);
    p.started = true;
    p.out_batch = 0;
    p.need_segment = true;
  }
  if (p.out_batch != batch_size) {
    std::vector<TensorSpec> out = specs;
    for (TensorSpec& s : out) {
      if (s.shape.empty())
        s.shape = {static_cast<int64_t>(batch_size)};
      else
        s.shape[0] *= batch_size;
    }
    GstCaps* caps = jobflow::gst::caps_from_specs(out, 0, 1);
    GST_DEBUG_OBJECT(self, "output caps %" GST_PTR_FORMAT, caps);
    const bool ok = gst_pad_push_event(self->srcpad, gst_event_new_caps(caps));
    gst_caps_unref(caps);
    if (!ok) return false;
    p.out_batch = batch_size;
  }
  if (p.need_segment) {
    GstSegment seg;
    gst_segment_init(&seg, GST_FORMAT_TIME);
    gst_pad_push_event(self->srcpad, gst_event_new_segment(&seg));
    p.need_segment = false;
  }
  return true;
}

GstFlowReturn push_batch(GstJobMux* self, std::vector<Slot>& batch) {
  Impl& p = *self->impl;
  std::vector<TensorSpec> specs;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    specs = p.specs;
  }
  const guint n = p.settings.get(&Settings::batch_size);
  const guint valid = static_cast<guint>(batch.size());
  if (!push_stream_events(self, n, specs)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Downstream refused the batched tensors %s",
                                                specs_str(specs).c_str()),
                      ("batch-size=%u", n));
    return GST_FLOW_NOT_NEGOTIATED;
  }
  GstBuffer* out = gst_buffer_new();
  size_t offset = 0;
  for (const TensorSpec& spec : specs) {
    const size_t fb = jobflow::gst::spec_bytes(spec);
    GstBuffer* part = jobflow::gst::new_tensor_buffer(fb * n);
    GstMapInfo map;
    gst_buffer_map(part, &map, GST_MAP_WRITE);
    for (guint i = 0; i < valid; ++i) gst_buffer_extract(batch[i].frame, offset, map.data + i * fb, fb);
    if (valid < n) std::memset(map.data + valid * fb, 0, (n - valid) * fb);
    gst_buffer_unmap(part, &map);
    gst_buffer_append_memory(out, gst_buffer_get_memory(part, 0));
    gst_buffer_unref(part);
    offset += fb;
  }
  JobflowBatchMeta* bm = jobflow_buffer_add_batch_meta(out, n);
  JobflowMuxMeta* mm = jobflow_buffer_add_mux_meta(out, n);
  bm->valid = mm->valid = valid;
  GstClockTime first = GST_CLOCK_TIME_NONE;
  for (guint i = 0; i < valid; ++i) {
    const Slot& s = batch[i];
    bm->pts[i] = GST_BUFFER_PTS(s.frame);
    bm->dts[i] = GST_BUFFER_DTS(s.frame);
    bm->duration[i] = GST_BUFFER_DURATION(s.frame);
    bm->offset[i] = GST_BUFFER_OFFSET(s.frame);
    jobflow_mux_meta_set_slot(mm, i, s.source, s.frame, s.caps, &s.segment);
    const GstClockTime rt = running_time(s);
    if (GST_CLOCK_TIME_IS_VALID(rt) && (!GST_CLOCK_TIME_IS_VALID(first) || rt < first)) first = rt;
  }
  GST_BUFFER_PTS(out) = first;  // the earliest frame's running time (the output segment starts at 0)
  GST_BUFFER_OFFSET(out) = p.out_offset++;
  jobflow::gst::add_tensor_meta(out, [&] {
    std::vector<TensorSpec> o = specs;
    for (TensorSpec& s : o) {
      if (s.shape.empty())
        s.shape = {static_cast<int64_t>(n)};
      else
        s.shape[0] *= n;
    }
    return o;
  }());
  for (Slot& s : batch) release_slot(s);
  batch.clear();
  if (valid < n) GST_DEBUG_OBJECT(self, "pushing a partial batch: %u of %u frames, rest zero", valid, n);
  return gst_pad_push(self->srcpad, out);
}

/* Takes the events at the head of `s`'s queue (mutex held). */
void take_head_events(GstJobMux* self, Source& s, Work* w) {
  Impl& p = *self->impl;
  while (!s.items.empty() && s.items.front().event) {
    Item it = std::move(s.items.front());
    s.items.pop_front();
    switch (GST_EVENT_TYPE(it.event)) {
      case GST_EVENT_CAPS: {
        GstCaps* caps;
        gst_event_parse_caps(it.event, &caps);
        gst_caps_replace(&s.caps, caps);
        break;
      }
      case GST_EVENT_SEGMENT: {
        const GstSegment* seg;
        gst_event_parse_segment(it.event, &seg);
        gst_segment_copy_into(seg, &s.segment);
        break;
      }
      case GST_EVENT_STREAM_START:
        s.eos = false;  // a new stream on this pad
        break;
      case GST_EVENT_EOS: {
        s.eos = true;
        GST_DEBUG_OBJECT(self, "source %u ended", s.id);
        const bool in_batch =
            std::any_of(p.batch.begin(), p.batch.end(), [&](const Slot& sl) { return sl.source == s.id; });
        (in_batch ? p.deferred : w->events_before).push_back(source_eos_event(s.id, false));
        break;
      }
      default:
        GST_LOG_OBJECT(self, "source %u: dropping %s", s.id, GST_EVENT_TYPE_NAME(it.event));
        break;
    }
  }
}

/* Decides the next step (mutex held). */
Work next_work(GstJobMux* self) {
  Impl& p = *self->impl;
  Work w;
  if (p.flushing) {
    w.kind = Work::Flushing;
    return w;
  }
  const Settings settings = p.settings.copy();
  const guint n = settings.batch_size;
  for (auto& [id, s] : p.sources) take_head_events(self, *s, &w);
  if (!w.events_before.empty()) {
    w.kind = Work::Events;
    return w;
  }
  /* One frame from each source in turn, starting after the last one taken. */
  bool took = false;
  while (p.batch.size() < n) {
    auto it = p.sources.lower_bound(p.next_source);
    std::shared_ptr<Source> pick;
    for (size_t k = 0; k < p.sources.size(); ++k, ++it) {
      if (it == p.sources.end()) it = p.sources.begin();
      Source& s = *it->second;
      if (!s.items.empty() && s.items.front().buffer) {
        pick = it->second;
        break;
      }
    }
    if (!pick) break;
    Item item = std::move(pick->items.front());
    pick->items.pop_front();
    pick->queued_buffers--;
    pick->sent_frames = true;
    Slot slot;
    slot.source = pick->id;
    slot.frame = std::exchange(item.buffer, nullptr);
    slot.caps = pick->caps ? gst_caps_ref(pick->caps) : nullptr;
    gst_segment_copy_into(&pick->segment, &slot.segment);
    slot.arrival_us = item.arrival_us;
    p.batch.push_back(slot);
    p.next_source = pick->id + 1;
    took = true;
    take_head_events(self, *pick, &w);  // its EOS right after its last frame goes with this batch
  }
  if (took) p.cv.notify_all();  // room in the queues
  const bool all_ended = !p.sources.empty() && std::all_of(p.sources.begin(), p.sources.end(), [](const auto& e) {
    return e.second->eos && e.second->items.empty();
  });
  const gint64 deadline =
      p.batch.empty() || settings.max_latency == 0
          ? 0
          : p.batch.front().arrival_us + static_cast<gint64>(settings.max_latency / 1000);
  if (p.batch.size() >= n || (!p.batch.empty() && (all_ended || (deadline > 0 && g_get_monotonic_time() >= deadline)))) {
    w.kind = Work::PushBatch;
    w.batch.swap(p.batch);
    w.events_after.swap(p.deferred);
    return w;
  }
  if (!p.deferred.empty() && p.batch.empty()) {
    w.kind = Work::Events;
    w.events_before.swap(p.deferred);
    return w;
  }
  if (all_ended) {
    w.kind = Work::Eos;
    return w;
  }
  w.kind = Work::Wait;
  w.until_us = deadline;
  return w;
}

void stop_with(GstJobMux* self, GstFlowReturn ret) {
  Impl& p = *self->impl;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    if (!p.flushing) p.srcresult = ret;  // what the sources' next push gets
    p.cv.notify_all();
  }
  gst_pad_pause_task(self->srcpad);
  if (ret == GST_FLOW_NOT_LINKED || ret < GST_FLOW_EOS) {
    if (ret != GST_FLOW_ERROR) GST_ELEMENT_FLOW_ERROR(self, ret);
    gst_pad_push_event(self->srcpad, gst_event_new_eos());
  }
}

GstFlowReturn push_events(GstJobMux* self, std::vector<GstEvent*>& events) {
  GstFlowReturn ret = GST_FLOW_OK;
  for (GstEvent* e : events) {
    if (ret == GST_FLOW_OK && self->impl->started)
      gst_pad_push_event(self->srcpad, e);
    else
      gst_event_unref(e);  // nothing went out yet: nobody downstream knows the source
  }
  events.clear();
  return ret;
}

void task(gpointer data) {
  GstJobMux* self = GST_JOB_MUX(data);
  Impl& p = *self->impl;
  Work w;
  {
    std::unique_lock<std::mutex> lk(p.mu);
    for (;;) {
      w = next_work(self);
      if (w.kind != Work::Wait) break;
      if (w.until_us > 0)
        p.cv.wait_for(lk, std::chrono::microseconds(std::max<gint64>(0, w.until_us - g_get_monotonic_time())));
      else
        p.cv.wait(lk);
    }
  }
  GstFlowReturn ret = GST_FLOW_OK;
  jobflow::gst::guarded(GST_ELEMENT(self), "Multiplexing", false, [&] {
    switch (w.kind) {
      case Work::Flushing:
        ret = GST_FLOW_FLUSHING;
        break;
      case Work::Events:
        ret = push_events(self, w.events_before);
        break;
      case Work::PushBatch:
        push_events(self, w.events_before);
        ret = push_batch(self, w.batch);
        if (ret == GST_FLOW_OK) push_events(self, w.events_after);
        break;
      case Work::Eos:
        GST_DEBUG_OBJECT(self, "every source ended: EOS");
        if (!p.started) {
          std::vector<TensorSpec> specs;
          {
            std::lock_guard<std::mutex> lk(p.mu);
            specs = p.specs;
          }
          if (!specs.empty()) push_stream_events(self, p.settings.get(&Settings::batch_size), specs);
        }
        gst_pad_push_event(self->srcpad, gst_event_new_eos());
        ret = GST_FLOW_EOS;
        break;
      case Work::Wait:
        break;
    }
    return true;
  });
  for (Slot& s : w.batch) release_slot(s);
  for (GstEvent* e : w.events_before) gst_event_unref(e);
  for (GstEvent* e : w.events_after) gst_event_unref(e);
  if (ret == GST_FLOW_FLUSHING && w.kind == Work::Flushing) {
    gst_pad_pause_task(self->srcpad);
    return;
  }
  if (ret != GST_FLOW_OK) stop_with(self, ret);
}

/* ----------------------------------------------------------- sink side */

std::shared_ptr<Source> find_source(Impl& p, GstPad* pad) {
  const guint id = GPOINTER_TO_UINT(gst_pad_get_element_private(pad));
  auto it = p.sources.find(id);
  if (it == p.sources.end() || it->second->pad != pad) return nullptr;
  return it->second;
}

GstFlowReturn sink_chain(GstPad* pad, GstObject* parent, GstBuffer* buf) {
  GstJobMux* self = GST_JOB_MUX(parent);
  Impl& p = *self->impl;
  std::unique_lock<std::mutex> lk(p.mu);
  std::shared_ptr<Source> s = find_source(p, pad);
  size_t frame_bytes = 0;
  for (const TensorSpec& t : p.specs) frame_bytes += jobflow::gst::spec_bytes(t);
  if (s && (p.specs.empty() || !gst_pad_has_current_caps(pad))) {
    lk.unlock();
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Pad %s: no caps before the first buffer", GST_PAD_NAME(pad)),
                      (nullptr));
    gst_buffer_unref(buf);
    return GST_FLOW_NOT_NEGOTIATED;
  }
  if (s && gst_buffer_get_size(buf) != frame_bytes) {
    const std::string want = specs_str(p.specs);
    lk.unlock();
    GST_ELEMENT_ERROR(self, STREAM, FORMAT,
                      ("Pad %s: a frame of %" G_GSIZE_FORMAT " bytes, its caps say %zu (%s)", GST_PAD_NAME(pad),
                       gst_buffer_get_size(buf), frame_bytes, want.c_str()),
                      (nullptr));
    gst_buffer_unref(buf);
    return GST_FLOW_ERROR;
  }
  auto alive = [&] {
    auto it = p.sources.find(s->id);
    return it != p.sources.end() && it->second == s;
  };
  if (s)
    p.cv.wait(lk, [&] {
      return s->flushing || p.flushing || p.srcresult != GST_FLOW_OK || s->queued_buffers < p.limit || !alive();
    });
  GstFlowReturn ret = GST_FLOW_OK;
  if (!s || s->flushing || !alive() || p.flushing)
    ret = GST_FLOW_FLUSHING;
  else if (p.srcresult != GST_FLOW_OK)
    ret = p.srcresult;
  if (ret != GST_FLOW_OK) {
    lk.unlock();
    gst_buffer_unref(buf);
    return ret;
  }
  Item item;
  item.buffer = buf;
  item.arrival_us = g_get_monotonic_time();
  s->items.push_back(std::move(item));
  s->queued_buffers++;
  p.cv.notify_all();
  return GST_FLOW_OK;
}

/* Checks a source's caps against the other sources'; the first fixes them. */
bool check_caps(GstJobMux* self, GstPad* pad, GstCaps* caps) {
  std::vector<TensorSpec> specs;
  std::string error;
  if (!jobflow::gst::specs_from_caps(caps, &specs, &error)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Pad %s: invalid tensor caps: %s", GST_PAD_NAME(pad), error.c_str()),
                      ("%" GST_PTR_FORMAT, caps));
    return false;
  }
  Impl& p = *self->impl;
  std::lock_guard<std::mutex> lk(p.mu);
  if (p.specs.empty()) {
    p.specs = specs;
    p.specs_from = GST_PAD_NAME(pad);
    return true;
  }
  if (same_specs(p.specs, specs)) return true;
  GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                    ("Pad %s: tensors %s differ from %s's %s: every source must give the same tensors",
                     GST_PAD_NAME(pad), specs_str(specs).c_str(), p.specs_from.c_str(), specs_str(p.specs).c_str()),
                    ("%" GST_PTR_FORMAT, caps));
  return false;
}

gboolean sink_event(GstPad* pad, GstObject* parent, GstEvent* event) {
  GstJobMux* self = GST_JOB_MUX(parent);
  Impl& p = *self->impl;
  return jobflow::gst::guarded(GST_ELEMENT(self), "Event handling", FALSE, [&]() -> gboolean {
    const GstEventType type = GST_EVENT_TYPE(event);
    if (type == GST_EVENT_CAPS) {
      GstCaps* caps;
      gst_event_parse_caps(event, &caps);
      if (!check_caps(self, pad, caps)) {
        gst_event_unref(event);
        return FALSE;
      }
    }
    std::deque<Item> dropped;  // released outside the lock
    std::unique_lock<std::mutex> lk(p.mu);
    std::shared_ptr<Source> s = find_source(p, pad);
    if (!s) {
      lk.unlock();
      gst_event_unref(event);
      return FALSE;
    }
    switch (type) {
      case GST_EVENT_FLUSH_START: {
        /* This source only: its waiting frames and its frames in the batch. */
        s->flushing = true;
        dropped.swap(s->items);
        s->queued_buffers = 0;
        for (auto it = p.batch.begin(); it != p.batch.end();) {
          if (it->source == s->id) {
            release_slot(*it);
            it = p.batch.erase(it);
          } else {
            ++it;
          }
        }
        p.cv.notify_all();
        lk.unlock();
        gst_event_unref(event);
        return TRUE;
      }
      case GST_EVENT_FLUSH_STOP:
        s->flushing = false;
        s->eos = false;
        lk.unlock();
        gst_event_unref(event);
        return TRUE;
      default:
        break;
    }
    if (!jobflow::gst::is_serialized(event)) {
      lk.unlock();
      GST_LOG_OBJECT(pad, "dropping %s", GST_EVENT_TYPE_NAME(event));
      gst_event_unref(event);
      return TRUE;
    }
    if (s->flushing) {
      lk.unlock();
      gst_event_unref(event);
      return FALSE;
    }
    Item item;
    item.event = event;
    item.arrival_us = g_get_monotonic_time();
    s->items.push_back(std::move(item));
    p.cv.notify_all();
    return TRUE;
  });
}

gboolean sink_query(GstPad* pad, GstObject* parent, GstQuery* query) {
  GstJobMux* self = GST_JOB_MUX(parent);
  Impl& p = *self->impl;
  switch (GST_QUERY_TYPE(query)) {
    case GST_QUERY_CAPS: {
      /* Once a source fixed the tensors, the others are asked for the same
       * (any framerate). */
      std::vector<TensorSpec> specs;
      {
        std::lock_guard<std::mutex> lk(p.mu);
        specs = p.specs;
      }
      if (specs.empty()) return jobflow::gst::answer_caps_query(pad, query, false);
      GstCaps* caps = jobflow::gst::caps_from_specs(specs, 0, 1);
      gst_structure_remove_field(gst_caps_get_structure(caps, 0), "framerate");
      return jobflow::gst::answer_caps_query(query, caps);
    }
    case GST_QUERY_ACCEPT_CAPS: {
      /* The template decides; tensors that differ from the other sources'
       * are refused by the caps event, with an error naming the pad. */
      GstCaps* caps;
      gst_query_parse_accept_caps(query, &caps);
      GstCaps* templ = gst_pad_get_pad_template_caps(pad);
      gst_query_set_accept_caps_result(query, gst_caps_can_intersect(caps, templ));
      gst_caps_unref(templ);
      return TRUE;
    }
    case GST_QUERY_ALLOCATION:
      return FALSE;
    default:
      return gst_pad_query_default(pad, parent, query);
  }
}

/* ------------------------------------------------------------ src pad */

gboolean src_activate_mode(GstPad* pad, GstObject* parent, GstPadMode mode, gboolean active) {
  GstJobMux* self = GST_JOB_MUX(parent);
  Impl& p = *self->impl;
  if (mode != GST_PAD_MODE_PUSH) return FALSE;
  if (active) {
    {
      std::lock_guard<std::mutex> lk(p.mu);
      p.flushing = false;
      p.srcresult = GST_FLOW_OK;
      p.limit = std::max(1u, p.settings.get(&Settings::batch_size));
    }
    p.started = false;
    p.out_offset = 0;
    return gst_pad_start_task(pad, task, self, nullptr);
  }
  {
    std::lock_guard<std::mutex> lk(p.mu);
    p.flushing = true;
    p.srcresult = GST_FLOW_FLUSHING;
    p.cv.notify_all();
  }
  const gboolean ok = gst_pad_stop_task(pad);
  std::lock_guard<std::mutex> lk(p.mu);
  p.clear_all();
  for (auto& [id, s] : p.sources) {
    s->eos = false;
    s->sent_frames = false;
    gst_caps_replace(&s->caps, nullptr);
    gst_segment_init(&s->segment, GST_FORMAT_TIME);
  }
  p.specs.clear();
  p.specs_from.clear();
  p.next_source = 0;
  return ok;
}

/* A flushing seek: flush downstream, send the seek to every source, drop
 * the batch being assembled, restart with a new segment. */
gboolean flushing_seek(GstJobMux* self, GstEvent* event) {
  Impl& p = *self->impl;
  const guint32 seqnum = gst_event_get_seqnum(event);
  GstEvent* fs = gst_event_new_flush_start();
  gst_event_set_seqnum(fs, seqnum);
  gst_pad_push_event(self->srcpad, fs);
  {
    std::lock_guard<std::mutex> lk(p.mu);
    p.flushing = true;
    p.srcresult = GST_FLOW_FLUSHING;
    p.cv.notify_all();
  }
  gst_pad_pause_task(self->srcpad);  // waits for the task to leave its step
  std::vector<GstPad*> pads;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    for (auto& [id, s] : p.sources) pads.push_back(GST_PAD(gst_object_ref(s->pad)));
  }
  gboolean ok = TRUE;
  for (GstPad* pad : pads) {
    ok &= gst_pad_push_event(pad, gst_event_ref(event));
    gst_object_unref(pad);
  }
  gst_event_unref(event);
  {
    std::lock_guard<std::mutex> lk(p.mu);
    for (Slot& s : p.batch) release_slot(s);
    p.batch.clear();
    for (GstEvent* e : p.deferred) gst_event_unref(e);
    p.deferred.clear();
    for (auto& [id, s] : p.sources) s->eos = false;
    p.flushing = false;
    p.srcresult = GST_FLOW_OK;
    p.cv.notify_all();
  }
  GstEvent* stop = gst_event_new_flush_stop(TRUE);
  gst_event_set_seqnum(stop, seqnum);
  gst_pad_push_event(self->srcpad, stop);
  p.need_segment = true;  // the task is paused
  gst_pad_start_task(self->srcpad, task, self, nullptr);
  return ok;
}

gboolean src_event(GstPad* pad, GstObject* parent, GstEvent* event) {
  GstJobMux* self = GST_JOB_MUX(parent);
  return jobflow::gst::guarded(GST_ELEMENT(self), "Event handling", FALSE, [&]() -> gboolean {
    if (GST_EVENT_TYPE(event) == GST_EVENT_SEEK) {
      GstSeekFlags flags;
      gst_event_parse_seek(event, nullptr, nullptr, &flags, nullptr, nullptr, nullptr, nullptr);
      if (flags & GST_SEEK_FLAG_FLUSH) return flushing_seek(self, event);
    }
    return gst_pad_event_default(pad, parent, event);  // to every source
  });
}

gboolean src_query(GstPad* pad, GstObject* parent, GstQuery* query) {
  GstJobMux* self = GST_JOB_MUX(parent);
  Impl& p = *self->impl;
  switch (GST_QUERY_TYPE(query)) {
    case GST_QUERY_LATENCY: {
      /* The sources' latencies combined (live if any is; the largest
       * minimum, the smallest maximum), plus max-latency. */
      std::vector<GstPad*> pads;
      {
        std::lock_guard<std::mutex> lk(p.mu);
        for (auto& [id, s] : p.sources) pads.push_back(GST_PAD(gst_object_ref(s->pad)));
      }
      gboolean live = FALSE, any = FALSE;
      GstClockTime min = 0, max = GST_CLOCK_TIME_NONE;
      for (GstPad* sink : pads) {
        GstQuery* q = gst_query_new_latency();
        if (gst_pad_peer_query(sink, q)) {
          gboolean l;
          GstClockTime mn, mx;
          gst_query_parse_latency(q, &l, &mn, &mx);
          any = TRUE;
          live |= l;
          min = std::max(min, mn);
          if (GST_CLOCK_TIME_IS_VALID(mx)) max = GST_CLOCK_TIME_IS_VALID(max) ? std::min(max, mx) : mx;
        }
        gst_query_unref(q);
        gst_object_unref(sink);
      }
      const GstClockTime extra = p.settings.get(&Settings::max_latency);
      min += extra;
      if (GST_CLOCK_TIME_IS_VALID(max)) max += extra;
      gst_query_set_latency(query, live, min, max);
      return any || pads.empty();
    }
    case GST_QUERY_CAPS:
      return jobflow::gst::answer_caps_query(pad, query, true);
    default:
      return gst_pad_query_default(pad, parent, query);
  }
}

/* ------------------------------------------------------ request pads */

GstPad* request_new_pad(GstElement* element, GstPadTemplate* templ, const gchar* name, const GstCaps*) {
  GstJobMux* self = GST_JOB_MUX(element);
  Impl& p = *self->impl;
  guint id = 0;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    if (name && g_str_has_prefix(name, "sink_")) {
      gchar* end = nullptr;
      const guint64 v = g_ascii_strtoull(name + 5, &end, 10);
      if (end == name + 5 || *end != '\0' || v >= G_MAXUINT) {
        GST_WARNING_OBJECT(self, "pad name \"%s\" is not sink_<number>", name);
        return nullptr;
      }
      id = static_cast<guint>(v);
      if (p.sources.count(id)) {
        GST_WARNING_OBJECT(self, "pad %s exists already", name);
        return nullptr;
      }
    } else {
      while (p.sources.count(id)) ++id;
    }
  }
  gchar* pad_name = g_strdup_printf("sink_%u", id);
  GstPad* pad = gst_pad_new_from_template(templ, pad_name);
  g_free(pad_name);
  gst_pad_set_chain_function(pad, sink_chain);
  gst_pad_set_event_function(pad, sink_event);
  gst_pad_set_query_function(pad, sink_query);
  gst_pad_set_element_private(pad, GUINT_TO_POINTER(id));
  auto s = std::make_shared<Source>();
  s->id = id;
  s->pad = pad;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    p.sources[id] = s;
    p.cv.notify_all();
  }
  GST_DEBUG_OBJECT(self, "source %u joined", id);
  if (!gst_element_add_pad(element, pad)) {
    std::lock_guard<std::mutex> lk(p.mu);
    p.sources.erase(id);
    return nullptr;
  }
  return pad;
}

void release_pad(GstElement* element, GstPad* pad) {
  GstJobMux* self = GST_JOB_MUX(element);
  Impl& p = *self->impl;
  std::shared_ptr<Source> s;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    s = find_source(p, pad);
    if (s) {
      /* What waits is dropped; its frames in the batch being assembled go
       * out, then (when it sent any and had not ended) its source-EOS. */
      p.sources.erase(s->id);
      if (s->sent_frames && !s->eos) p.deferred.push_back(source_eos_event(s->id, true));
      p.cv.notify_all();  // a chain waiting for room, and the task (every source may have ended now)
    }
  }
  GST_DEBUG_OBJECT(self, "source %s left", GST_PAD_NAME(pad));
  gst_element_remove_pad(element, pad);  // waits for its chain function to return
  s.reset();
}

/* ------------------------------------------------------------- GObject */

void set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  GST_JOB_MUX(object)->impl->settings.with([&](Settings& s) {
    switch (prop_id) {
      case PROP_BATCH_SIZE: s.batch_size = g_value_get_uint(value); break;
      case PROP_MAX_LATENCY: s.max_latency = g_value_get_uint64(value); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

void get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GST_JOB_MUX(object)->impl->settings.with([&](const Settings& s) {
    switch (prop_id) {
      case PROP_BATCH_SIZE: g_value_set_uint(value, s.batch_size); break;
      case PROP_MAX_LATENCY: g_value_set_uint64(value, s.max_latency); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

}  // namespace

static void gst_job_mux_class_init(GstJobMuxClass* klass) {
  GObjectClass* gobject_class = jobflow::gst::init_object_class<GstJobMux>(klass, set_property, get_property);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  element_class->request_new_pad = request_new_pad;
  element_class->release_pad = release_pad;
  const auto flags = static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);
  g_object_class_install_property(
      gobject_class, PROP_BATCH_SIZE,
      g_param_spec_uint("batch-size", "Batch size",
                        "Frames per batch, from any sources: dim 0 of every tensor grows by this factor (set it to "
                        "the job's batch dimension)",
                        1, G_MAXINT, kDefaultBatchSize, flags));
  g_object_class_install_property(
      gobject_class, PROP_MAX_LATENCY,
      g_param_spec_uint64("max-latency", "Maximum latency",
                          "Longest time (ns, monotonic clock) the first frame of a batch waits before a partial "
                          "batch is pushed, padded with zeros (0 = wait for a full batch, or for every source to end)",
                          0, G_MAXUINT64, kDefaultMaxLatency, flags));
  gst_element_class_add_static_pad_template(element_class, &sink_template);
  gst_element_class_add_static_pad_template(element_class, &src_template);
  gst_element_class_set_static_metadata(element_class, "Jobflow stream multiplexer", "Muxer/Tensor",
                                        "Batches the frames of many sources into one tensor buffer, with a latency "
                                        "bound; jobdemux gives each source its results back",
                                        "Jobflow");
}

static void gst_job_mux_init(GstJobMux* self) {
  self->impl = new Impl();
  GstPad* src = gst_pad_new_from_static_template(&src_template, "src");
  gst_pad_set_event_function(src, src_event);
  gst_pad_set_query_function(src, src_query);
  gst_pad_set_activatemode_function(src, src_activate_mode);
  gst_pad_use_fixed_caps(src);
  gst_element_add_pad(GST_ELEMENT(self), src);
  self->srcpad = src;
}

gboolean jobflow_register_jobmux(GstPlugin* plugin) {
  GST_DEBUG_CATEGORY_INIT(jobmux_debug, "jobmux", 0, "Jobflow stream multiplexer");
  return gst_element_register(plugin, "jobmux", GST_RANK_NONE, GST_TYPE_JOB_MUX);
}
