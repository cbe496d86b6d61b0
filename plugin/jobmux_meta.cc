/* JobflowMuxMeta and the per-slot split registry. See jobmux_meta.h. */
#include "jobmux_meta.h"

#include "jobflow_analytics.h"

#include <mutex>
#include <utility>
#include <vector>

namespace {

void meta_alloc(JobflowMuxMeta* m, guint batch_size) {
  m->batch_size = batch_size;
  m->valid = 0;
  m->source_id = g_new(guint, batch_size);
  m->frames = g_new0(GstBuffer*, batch_size);
  m->caps = g_new0(GstCaps*, batch_size);
  m->segments = g_new(GstSegment, batch_size);
  for (guint i = 0; i < batch_size; ++i) {
    m->source_id[i] = G_MAXUINT;
    gst_segment_init(&m->segments[i], GST_FORMAT_TIME);
  }
}

gboolean meta_init(GstMeta* meta, gpointer, GstBuffer*) {
  JobflowMuxMeta* m = reinterpret_cast<JobflowMuxMeta*>(meta);
  m->batch_size = m->valid = 0;
  m->source_id = nullptr;
  m->frames = nullptr;
  m->caps = nullptr;
  m->segments = nullptr;
  return TRUE;
}

void meta_free(GstMeta* meta, GstBuffer*) {
  JobflowMuxMeta* m = reinterpret_cast<JobflowMuxMeta*>(meta);
  for (guint i = 0; i < m->batch_size; ++i) {
    if (m->frames[i]) gst_buffer_unref(m->frames[i]);
    if (m->caps[i]) gst_caps_unref(m->caps[i]);
  }
  g_free(m->source_id);
  g_free(m->frames);
  g_free(m->caps);
  g_free(m->segments);
}

gboolean meta_transform(GstBuffer* dest, GstMeta* meta, GstBuffer*, GQuark type, gpointer data) {
  if (!GST_META_TRANSFORM_IS_COPY(type)) return FALSE;
  const auto* copy = static_cast<const GstMetaTransformCopy*>(data);
  if (copy->region) return TRUE;  // a part of the batch: the bookkeeping does not apply
  const JobflowMuxMeta* src = reinterpret_cast<const JobflowMuxMeta*>(meta);
  JobflowMuxMeta* dst = jobflow_buffer_add_mux_meta(dest, src->batch_size);
  if (!dst) return FALSE;
  dst->valid = src->valid;
  for (guint i = 0; i < src->batch_size; ++i)
    jobflow_mux_meta_set_slot(dst, i, src->source_id[i], src->frames[i], src->caps[i], &src->segments[i]);
  return TRUE;
}

struct Splitter {
  GType api;
  JobflowMetaSplitFunc split;
};
std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}
std::vector<Splitter>& registry() {
  static std::vector<Splitter> r;
  return r;
}

}  // namespace

GType jobflow_mux_meta_api_get_type(void) {
  static GType type = 0;
  static const gchar* tags[] = {nullptr};  // no tags: survives any transform that copies metas
  if (g_once_init_enter(&type)) g_once_init_leave(&type, gst_meta_api_type_register("JobflowMuxMetaAPI", tags));
  return type;
}

const GstMetaInfo* jobflow_mux_meta_get_info(void) {
  static const GstMetaInfo* info = nullptr;
  if (g_once_init_enter(&info)) {
    const GstMetaInfo* mi = gst_meta_register(JOBFLOW_MUX_META_API_TYPE, "JobflowMuxMeta", sizeof(JobflowMuxMeta),
                                              meta_init, meta_free, meta_transform);
    g_once_init_leave(&info, mi);
  }
  return info;
}

JobflowMuxMeta* jobflow_buffer_add_mux_meta(GstBuffer* buffer, guint batch_size) {
  g_return_val_if_fail(GST_IS_BUFFER(buffer), nullptr);
  g_return_val_if_fail(batch_size > 0, nullptr);
  auto* m = reinterpret_cast<JobflowMuxMeta*>(gst_buffer_add_meta(buffer, jobflow_mux_meta_get_info(), nullptr));
  if (m) meta_alloc(m, batch_size);
  return m;
}

void jobflow_mux_meta_set_slot(JobflowMuxMeta* meta, guint slot, guint source_id, GstBuffer* frame, GstCaps* caps,
                               const GstSegment* segment) {
  g_return_if_fail(meta != nullptr && slot < meta->batch_size);
  meta->source_id[slot] = source_id;
  gst_buffer_replace(&meta->frames[slot], frame);
  gst_caps_replace(&meta->caps[slot], caps);
  if (segment)
    gst_segment_copy_into(segment, &meta->segments[slot]);
  else
    gst_segment_init(&meta->segments[slot], GST_FORMAT_TIME);
}

GstMessage* jobflow_mux_regions_message_new(GstObject* src, GstBuffer* frame, const GstSegment* segment, guint source) {
  GstMessage* m = jobflow_analytics_regions_message_new(src, frame, segment);
  if (source != G_MAXUINT)
    gst_structure_set(gst_message_writable_structure(m), "source", G_TYPE_UINT, source, nullptr);
  return m;
}

void jobflow_meta_split_register(GType meta_api, JobflowMetaSplitFunc split) {
  std::lock_guard<std::mutex> lk(registry_mutex());
  for (Splitter& s : registry())
    if (s.api == meta_api) {
      s.split = split;
      return;
    }
  registry().push_back({meta_api, split});
}

void jobflow_meta_split_slot(GstBuffer* batch, guint slot, guint batch_size, GstBuffer* dest) {
  std::vector<Splitter> splitters;
  {
    std::lock_guard<std::mutex> lk(registry_mutex());
    splitters = registry();
  }
  if (splitters.empty()) return;
  gpointer state = nullptr;
  while (GstMeta* m = gst_buffer_iterate_meta(batch, &state))
    for (const Splitter& s : splitters)
      if (m->info->api == s.api && s.split) s.split(dest, m, slot, batch_size);
}
