/* jobdemux. See gstjobdemux.h and docs/elements.md. One buffer in, its
 * frames out on their sources' pads, on the streaming thread; the pads'
 * flows are combined (GstFlowCombiner: a source nobody links does not stop
 * the others). */
#include "gstjobdemux.h"

#include "element_util.h"
#include "gstjobmux.h"
#include "jobbatch_meta.h"
#include "jobflow_meta.h"
#include "jobmux_meta.h"
#include "tensor_caps.h"

#include <gst/base/gstflowcombiner.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_STATIC(jobdemux_debug);
#define GST_CAT_DEFAULT jobdemux_debug

namespace {

using jobflow::TensorSpec;

enum Output { kOutputResults = 0, kOutputFrames = 1 };

struct Settings {
  Output output = kOutputResults;
};

/* One source's src pad. */
struct SourcePad {
  GstPad* pad = nullptr;   // owned by the element while it is a child
  bool eos = false;        // EOS pushed (a new stream-start reopens it)
  bool need_segment = true;
  GstSegment segment{};    // the last one pushed
};

/* Streaming thread only (and state changes). */
struct State {
  std::vector<TensorSpec> in_specs;
  bool have_caps = false;
  std::map<guint, SourcePad> pads;
};

struct Impl {
  Impl() : combiner(gst_flow_combiner_new()) {}
  ~Impl() { gst_flow_combiner_free(combiner); }
  jobflow::gst::Locked<Settings> settings;
  State state;
  GstFlowCombiner* combiner;
};

}  // namespace

struct _GstJobDemux {
  GstElement parent;
  GstPad* sinkpad;
  Impl* impl;
};

G_DEFINE_TYPE(GstJobDemux, gst_job_demux, GST_TYPE_ELEMENT)

namespace {

enum { PROP_0, PROP_OUTPUT };

GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE(
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS("other/tensors, format=(string)static"));
GstStaticPadTemplate src_template =
    GST_STATIC_PAD_TEMPLATE("src_%u", GST_PAD_SRC, GST_PAD_SOMETIMES, GST_STATIC_CAPS_ANY);

GType output_get_type() {
  static GType type = 0;
  static const GEnumValue values[] = {
      {kOutputResults, "Each frame's slice of the batch's tensors (the job's results)", "results"},
      {kOutputFrames, "Each frame as it entered jobmux, with its caps", "frames"},
      {0, nullptr, nullptr}};
  return jobflow::gst::enum_type(&type, "GstJobDemuxOutput", values);
}

/* The pad of `source`, made (and announced) on its first frame. */
SourcePad& source_pad(GstJobDemux* self, guint source) {
  State& st = self->impl->state;
  auto it = st.pads.find(source);
  if (it != st.pads.end()) {
    SourcePad& sp = it->second;
    if (sp.eos) {  // the source streams again: a new stream on its pad
      gchar* id = gst_pad_create_stream_id_printf(sp.pad, GST_ELEMENT(self), "%u", source);
      gst_pad_push_event(sp.pad, gst_event_new_stream_start(id));
      g_free(id);
      sp.eos = false;
      sp.need_segment = true;
      gst_flow_combiner_reset(self->impl->combiner);
    }
    return sp;
  }
  gchar* name = g_strdup_printf("src_%u", source);
  GstPad* pad = gst_pad_new_from_static_template(&src_template, name);
  g_free(name);
  gst_pad_set_query_function(pad, jobflow::gst::current_caps_query);
  gst_pad_use_fixed_caps(pad);
  gst_pad_set_active(pad, TRUE);
  gchar* id = gst_pad_create_stream_id_printf(pad, GST_ELEMENT(self), "%u", source);
  gst_pad_push_event(pad, gst_event_new_stream_start(id));  // stored (sticky) until linked
  g_free(id);
  SourcePad& sp = st.pads[source];
  sp.pad = pad;
  gst_segment_init(&sp.segment, GST_FORMAT_TIME);
  gst_flow_combiner_add_pad(self->impl->combiner, pad);
  GST_DEBUG_OBJECT(self, "new pad for source %u", source);
  gst_element_add_pad(GST_ELEMENT(self), pad);  // pad-added: the application links it
  return sp;
}

/* The caps of a result frame of `source`: the batch's tensors with dim 0
 * divided by `n`, at the framerate of the source's own caps. */
GstCaps* result_caps(const std::vector<TensorSpec>& frame_specs, const GstCaps* source_caps) {
  int fps_n = 0, fps_d = 1;
  if (source_caps && !gst_caps_is_empty(source_caps))
    gst_structure_get_fraction(gst_caps_get_structure(source_caps, 0), "framerate", &fps_n, &fps_d);
  return jobflow::gst::caps_from_specs(frame_specs, fps_n, fps_d);
}

/* Frame `i` of `batch` for its source's pad. */
GstBuffer* frame_buffer(GstBuffer* batch, const JobflowMuxMeta* mm, const JobflowBatchMeta* bm,
                        guint i, Output output, const jobflow::gst::BatchSplit& split) {
  const guint n = mm->batch_size;
  GstBuffer* out;
  if (output == kOutputFrames) {
    out = gst_buffer_copy(mm->frames[i]);  // shares the memories; its metas and timestamps as they were
  } else {
    out = jobflow::gst::frame_slices(batch, split, i, n);
    if (bm && i < bm->batch_size) {
      GST_BUFFER_PTS(out) = bm->pts[i];
      GST_BUFFER_DTS(out) = bm->dts[i];
      GST_BUFFER_DURATION(out) = bm->duration[i];
      GST_BUFFER_OFFSET(out) = bm->offset[i];
    } else if (mm->frames[i]) {
      gst_buffer_copy_into(out, mm->frames[i], GST_BUFFER_COPY_TIMESTAMPS, 0, -1);
    }
    /* The metas of the frame as it entered jobmux go with its results: its
     * JobflowFrameMeta above all (the video frame and the scaling that
     * jobdecode's frame modes put the regions back on; after jobdecode on
     * the batch, the slot's frame is the video frame, and its regions come
     * along); not its tensors' description (the results have their own)
     * nor jobmux's bookkeeping (nor, as copy_metas_except() skips metas
     * tied to the memory, a video frame's GstVideoMeta). */
    if (mm->frames[i])
      jobflow::gst::copy_metas_except(out, mm->frames[i], {JOBFLOW_TENSOR_META_API_TYPE, JOBFLOW_MUX_META_API_TYPE,
                                                            JOBFLOW_BATCH_META_API_TYPE});
    jobflow::gst::add_tensor_meta(out, split.frame_specs);
  }
  JobflowMuxMeta* one = jobflow_buffer_get_mux_meta(out);
  if (one) gst_buffer_remove_meta(out, reinterpret_cast<GstMeta*>(one));
  one = jobflow_buffer_add_mux_meta(out, 1);
  one->valid = 1;
  jobflow_mux_meta_set_slot(one, 0, mm->source_id[i], mm->frames[i], mm->caps[i], &mm->segments[i]);
  jobflow_meta_split_slot(batch, i, n, out);
  return out;
}

GstFlowReturn split(GstJobDemux* self, GstBuffer* batch) {
  Impl& p = *self->impl;
  State& st = p.state;
  if (!st.have_caps) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("No caps before the first buffer"), (nullptr));
    return GST_FLOW_NOT_NEGOTIATED;
  }
  const JobflowMuxMeta* mm = jobflow_buffer_get_mux_meta(batch);
  if (!mm) {
    GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("Buffer has no JobflowMuxMeta: jobdemux splits what jobmux batched"),
                      ("the elements between jobmux and jobdemux must copy buffer metas"));
    return GST_FLOW_ERROR;
  }
  const JobflowBatchMeta* bm = jobflow_buffer_get_batch_meta(batch);
  const Output output = p.settings.get(&Settings::output);
  const guint n = mm->batch_size;
  jobflow::gst::BatchSplit split;
  if (output == kOutputResults) {
    const std::string why = jobflow::gst::plan_split(batch, st.in_specs, n, &split);
    if (!why.empty()) {
      GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("%s", why.c_str()), ("batch size from JobflowMuxMeta"));
      return GST_FLOW_ERROR;
    }
  }
  GstFlowReturn ret = GST_FLOW_OK;
  for (guint i = 0; i < std::min(mm->valid, n) && ret == GST_FLOW_OK; ++i) {
    if (output == kOutputFrames && !mm->frames[i]) continue;
    SourcePad& sp = source_pad(self, mm->source_id[i]);
    GstCaps* caps = output == kOutputFrames ? (mm->caps[i] ? gst_caps_ref(mm->caps[i]) : nullptr)
                                            : result_caps(split.frame_specs, mm->caps[i]);
    if (caps) {
      GstCaps* cur = gst_pad_get_current_caps(sp.pad);
      if (!cur || !gst_caps_is_equal(cur, caps)) gst_pad_push_event(sp.pad, gst_event_new_caps(caps));
      if (cur) gst_caps_unref(cur);
      gst_caps_unref(caps);
    }
    const GstSegment& seg = mm->segments[i];
    if (sp.need_segment || !gst_segment_is_equal(&seg, &sp.segment)) {
      gst_segment_copy_into(&seg, &sp.segment);
      gst_pad_push_event(sp.pad, gst_event_new_segment(&seg));
      sp.need_segment = false;
    }
    GstBuffer* out = frame_buffer(batch, mm, bm, i, output, split);
    const GstFlowReturn r = gst_pad_push(sp.pad, out);
    ret = gst_flow_combiner_update_pad_flow(p.combiner, sp.pad, r);
  }
  return ret;
}

GstFlowReturn chain(GstPad*, GstObject* parent, GstBuffer* buf) {
  GstJobDemux* self = GST_JOB_DEMUX(parent);
  const GstFlowReturn ret =
      jobflow::gst::guarded(GST_ELEMENT(self), "Demultiplexing", GST_FLOW_ERROR, [&] { return split(self, buf); });
  gst_buffer_unref(buf);
  return ret;
}

void end_source(GstJobDemux* self, SourcePad& sp) {
  if (sp.eos) return;
  GST_DEBUG_OBJECT(self, "source pad %s: EOS", GST_PAD_NAME(sp.pad));
  sp.eos = true;
  gst_pad_push_event(sp.pad, gst_event_new_eos());
}

gboolean sink_event(GstPad* pad, GstObject* parent, GstEvent* event) {
  GstJobDemux* self = GST_JOB_DEMUX(parent);
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
        st.in_specs = std::move(specs);  // each pad's caps follow from them and the frame's source
        st.have_caps = true;
        return TRUE;
      }
      case GST_EVENT_STREAM_START:
      case GST_EVENT_SEGMENT:  // each source's own segment goes out with its frames
        gst_event_unref(event);
        return TRUE;
      case GST_EVENT_CUSTOM_DOWNSTREAM: {
        const GstStructure* s = gst_event_get_structure(event);
        if (s && gst_structure_has_name(s, JOBFLOW_MUX_SOURCE_EOS_EVENT)) {
          guint source = 0;
          gst_structure_get_uint(s, "source", &source);
          auto it = st.pads.find(source);
          if (it != st.pads.end()) end_source(self, it->second);
          gst_event_unref(event);
          return TRUE;
        }
        break;
      }
      case GST_EVENT_EOS:
        for (auto& [id, sp] : st.pads) end_source(self, sp);
        gst_event_unref(event);
        return TRUE;
      case GST_EVENT_FLUSH_STOP:
        for (auto& [id, sp] : st.pads) {
          sp.eos = false;
          sp.need_segment = true;  // the flush dropped the pads' segments
        }
        gst_flow_combiner_reset(self->impl->combiner);
        break;
      default:
        break;
    }
    return gst_pad_event_default(pad, parent, event);  // to every src pad
  });
}

GstStateChangeReturn change_state(GstElement* element, GstStateChange transition) {
  GstJobDemux* self = GST_JOB_DEMUX(element);
  const GstStateChangeReturn ret = GST_ELEMENT_CLASS(gst_job_demux_parent_class)->change_state(element, transition);
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY) {  // the streaming thread is gone: the pads go too
    State& st = self->impl->state;
    for (auto& [id, sp] : st.pads) {
      gst_flow_combiner_remove_pad(self->impl->combiner, sp.pad);
      gst_pad_set_active(sp.pad, FALSE);
      gst_element_remove_pad(element, sp.pad);
    }
    st = State{};
    gst_flow_combiner_reset(self->impl->combiner);
  }
  return ret;
}

void set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  GST_JOB_DEMUX(object)->impl->settings.with([&](Settings& s) {
    if (prop_id == PROP_OUTPUT)
      s.output = static_cast<Output>(g_value_get_enum(value));
    else
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
  });
}

void get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GST_JOB_DEMUX(object)->impl->settings.with([&](const Settings& s) {
    if (prop_id == PROP_OUTPUT)
      g_value_set_enum(value, s.output);
    else
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
  });
}

}  // namespace

static void gst_job_demux_class_init(GstJobDemuxClass* klass) {
  GObjectClass* gobject_class = jobflow::gst::init_object_class<GstJobDemux>(klass, set_property, get_property);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  element_class->change_state = change_state;
  g_object_class_install_property(
      gobject_class, PROP_OUTPUT,
      g_param_spec_enum("output", "Output",
                        "What each source's pad gets: its frames' slices of the batch (results), or its frames as "
                        "they entered jobmux (frames)",
                        output_get_type(), kOutputResults,
                        static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                                 GST_PARAM_MUTABLE_READY)));
  gst_element_class_add_static_pad_template(element_class, &sink_template);
  gst_element_class_add_static_pad_template(element_class, &src_template);
  gst_element_class_set_static_metadata(element_class, "Jobflow stream demultiplexer", "Demuxer/Tensor",
                                        "Gives each source of a jobmux batch its frames or results back, on a pad "
                                        "of its own, in its order",
                                        "Jobflow");
  gst_type_mark_as_plugin_api(output_get_type(), static_cast<GstPluginAPIFlags>(0));
}

static void gst_job_demux_init(GstJobDemux* self) {
  self->impl = new Impl();
  GstPad* sink = gst_pad_new_from_static_template(&sink_template, "sink");
  gst_pad_set_chain_function(sink, chain);
  gst_pad_set_event_function(sink, sink_event);
  gst_pad_set_query_function(sink, jobflow::gst::template_caps_query);
  gst_element_add_pad(GST_ELEMENT(self), sink);
  self->sinkpad = sink;
}

gboolean jobflow_register_jobdemux(GstPlugin* plugin) {
  GST_DEBUG_CATEGORY_INIT(jobdemux_debug, "jobdemux", 0, "Jobflow stream demultiplexer");
  return gst_element_register(plugin, "jobdemux", GST_RANK_NONE, GST_TYPE_JOB_DEMUX);
}
