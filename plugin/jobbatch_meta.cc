/* JobflowBatchMeta. See jobbatch_meta.h. */
#include "jobbatch_meta.h"

#include <cstring>

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
