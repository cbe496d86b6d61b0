/* jobunbatch. See gstjobunbatch.h and docs/elements.md. One buffer in,
 * its frames out, on the streaming thread: the output memories share the
 * batch's (no copy). */
#include "gstjobunbatch.h"

#include "element_util.h"
#include "jobflow_meta.h"
#include "tensor_caps.h"

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_STATIC(jobunbatch_debug);
#define GST_CAT_DEFAULT jobunbatch_debug

namespace {

using jobflow::TensorSpec;

constexpr guint kDefaultBatchSize = 0;  // 0 = from JobflowBatchMeta

struct Settings {
  guint batch_size = kDefaultBatchSize;
};

/* Streaming thread only (and PAUSED->READY). */
struct State {
  std::vector<TensorSpec> in_specs;
  std::vector<TensorSpec> out_specs;  // for caps_batch_size
  bool have_caps = false;
  guint caps_batch_size = 0;  // batch size the pushed output caps are for (0 = none pushed)
  /* Serialized events (segment, tags, ...) that arrive before the first
   * output caps: held and pushed after them, so the src pad never sees a
   * segment before caps. */
  std::vector<GstEvent*> pending_events;
};

struct Impl {
  ~Impl() { drop_pending_events(); }
  void drop_pending_events() {
    for (GstEvent* e : state.pending_events) gst_event_unref(e);
    state.pending_events.clear();
  }
  jobflow::gst::Locked<Settings> settings;
  State state;
};

}  // namespace

struct _GstJobUnbatch {
  GstElement parent;
  GstPad* sinkpad;
  GstPad* srcpad;
  Impl* impl;
};

G_DEFINE_TYPE(GstJobUnbatch, gst_job_unbatch, GST_TYPE_ELEMENT)

namespace {

enum { PROP_0, PROP_BATCH_SIZE };

void push_pending_events(GstJobUnbatch* self) {
  std::vector<GstEvent*> events;
  events.swap(self->impl->state.pending_events);
  for (GstEvent* e : events) gst_pad_push_event(self->srcpad, e);
}

bool push_caps(GstJobUnbatch* self, guint n, std::vector<TensorSpec> out) {
  State& st = self->impl->state;
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
    st.caps_batch_size = n;
    st.out_specs = std::move(out);
  }
  push_pending_events(self);
  return ok;
}

/* The frames of `buf` (n slots, the first `valid` real), pushed in order. */
GstFlowReturn push_frames(GstJobUnbatch* self, GstBuffer* buf, const JobflowBatchMeta* meta, guint n, guint valid,
                          const jobflow::gst::BatchSplit& split) {
  const GstClockTime pts = GST_BUFFER_PTS(buf), dur = GST_BUFFER_DURATION(buf);
  GstFlowReturn ret = GST_FLOW_OK;
  for (guint i = 0; i < valid && ret == GST_FLOW_OK; ++i) {
    GstBuffer* out = jobflow::gst::frame_slices(buf, split, i, n);
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
    jobflow::gst::add_tensor_meta(out, split.frame_specs);
    ret = gst_pad_push(self->srcpad, out);
  }
  return ret;
}

/* Checks `buf` against the caps and the batch size; posts the error. */
GstFlowReturn split(GstJobUnbatch* self, GstBuffer* buf) {
  State& st = self->impl->state;
  if (!st.have_caps) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("No caps before the first buffer"), (nullptr));
    return GST_FLOW_NOT_NEGOTIATED;
  }
  const JobflowBatchMeta* meta = jobflow_buffer_get_batch_meta(buf);
  const guint prop_n = self->impl->settings.get(&Settings::batch_size);
  const guint n = meta ? meta->batch_size : prop_n;
  if (n == 0) {
    GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("Buffer has no JobflowBatchMeta and property 'batch-size' is 0"),
                      ("set batch-size, or make the elements between jobbatch and jobunbatch copy metas"));
    return GST_FLOW_ERROR;
  }
  if (meta && prop_n != 0 && prop_n != n)
    GST_WARNING_OBJECT(self, "batch-size=%u but the buffer's meta says %u: using the meta", prop_n, n);
  jobflow::gst::BatchSplit split;
  const std::string why = jobflow::gst::plan_split(buf, st.in_specs, n, &split);
  if (!why.empty()) {
    GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("%s", why.c_str()),
                      ("batch size from %s", meta ? "JobflowBatchMeta" : "the batch-size property"));
    return GST_FLOW_ERROR;
  }
  if (st.caps_batch_size != n && !push_caps(self, n, split.frame_specs)) return GST_FLOW_NOT_NEGOTIATED;
  return push_frames(self, buf, meta, n, meta ? std::min(meta->valid, n) : n, split);
}

GstFlowReturn chain(GstPad*, GstObject* parent, GstBuffer* buf) {
  GstJobUnbatch* self = GST_JOB_UNBATCH(parent);
  const GstFlowReturn ret =
      jobflow::gst::guarded(GST_ELEMENT(self), "Unbatching", GST_FLOW_ERROR, [&] { return split(self, buf); });
  gst_buffer_unref(buf);
  return ret;
}

gboolean sink_event(GstPad* pad, GstObject* parent, GstEvent* event) {
  GstJobUnbatch* self = GST_JOB_UNBATCH(parent);
  State& st = self->impl->state;
  return jobflow::gst::guarded(GST_ELEMENT(self), "Event handling", FALSE, [&]() -> gboolean {
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
        st.in_specs = std::move(specs);
        st.have_caps = true;
        st.caps_batch_size = 0;
        return TRUE;
      }
      case GST_EVENT_STREAM_START:
      case GST_EVENT_FLUSH_STOP:
        break;
      case GST_EVENT_EOS:
        push_pending_events(self);
        break;
      default:
        if (jobflow::gst::is_serialized(event) && st.have_caps && !gst_pad_has_current_caps(self->srcpad)) {
          st.pending_events.push_back(event);
          return TRUE;
        }
        break;
    }
    return gst_pad_event_default(pad, parent, event);
  });
}

GstStateChangeReturn change_state(GstElement* element, GstStateChange transition) {
  Impl& p = *GST_JOB_UNBATCH(element)->impl;
  const GstStateChangeReturn ret = GST_ELEMENT_CLASS(gst_job_unbatch_parent_class)->change_state(element, transition);
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY) {  // the streaming thread is gone
    p.drop_pending_events();
    p.state = State{};
  }
  return ret;
}

void set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  GST_JOB_UNBATCH(object)->impl->settings.with([&](Settings& s) {
    if (prop_id == PROP_BATCH_SIZE)
      s.batch_size = g_value_get_uint(value);
    else
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
  });
}

void get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GST_JOB_UNBATCH(object)->impl->settings.with([&](const Settings& s) {
    if (prop_id == PROP_BATCH_SIZE)
      g_value_set_uint(value, s.batch_size);
    else
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
  });
}

}  // namespace

static void gst_job_unbatch_class_init(GstJobUnbatchClass* klass) {
  GObjectClass* gobject_class = jobflow::gst::init_object_class<GstJobUnbatch>(klass, set_property, get_property);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  element_class->change_state = change_state;
  g_object_class_install_property(
      gobject_class, PROP_BATCH_SIZE,
      g_param_spec_uint("batch-size", "Batch size",
                        "Frames per batch when a buffer carries no JobflowBatchMeta (0 = take it from the meta; "
                        "the meta wins when both are there)",
                        0, G_MAXINT, kDefaultBatchSize,
                        static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                                 GST_PARAM_MUTABLE_PLAYING)));
  jobflow::gst::add_tensors_pad_templates(element_class);
  gst_element_class_set_static_metadata(element_class, "Jobflow tensor unbatcher", "Filter/Tensor",
                                        "Splits batched tensors back into frames with their own timestamps",
                                        "Jobflow");
}

static void gst_job_unbatch_init(GstJobUnbatch* self) {
  self->impl = new Impl();
  self->sinkpad =
      jobflow::gst::add_pad(GST_ELEMENT(self), "sink", chain, sink_event, jobflow::gst::template_caps_query);
  self->srcpad = jobflow::gst::add_pad(GST_ELEMENT(self), "src", nullptr, nullptr, jobflow::gst::current_caps_query);
}

gboolean jobflow_register_jobunbatch(GstPlugin* plugin) {
  GST_DEBUG_CATEGORY_INIT(jobunbatch_debug, "jobunbatch", 0, "Jobflow unbatcher");
  return gst_element_register(plugin, "jobunbatch", GST_RANK_NONE, GST_TYPE_JOB_UNBATCH);
}
