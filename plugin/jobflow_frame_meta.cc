/* JobflowFrameMeta: see jobflow_frame_meta.h. */
#include "jobflow_frame_meta.h"

#include <gst/video/video.h>

namespace {

gboolean meta_init(GstMeta* meta, gpointer, GstBuffer*) {
  auto* m = reinterpret_cast<JobflowFrameMeta*>(meta);
  m->frame = nullptr;
  m->caps = nullptr;
  m->frame_width = m->frame_height = m->model_width = m->model_height = 0;
  m->scale_x = m->scale_y = 1.0;
  m->pad_x = m->pad_y = 0.0;
  return TRUE;
}

void meta_free(GstMeta* meta, GstBuffer*) {
  auto* m = reinterpret_cast<JobflowFrameMeta*>(meta);
  gst_clear_buffer(&m->frame);
  gst_clear_caps(&m->caps);
}

gboolean meta_transform(GstBuffer* dest, GstMeta* meta, GstBuffer*, GQuark type, gpointer data) {
  auto* src = reinterpret_cast<JobflowFrameMeta*>(meta);
  if (!GST_META_TRANSFORM_IS_COPY(type)) return FALSE;
  auto* copy = static_cast<GstMetaTransformCopy*>(data);
  if (copy->region) return FALSE;  // part of a tensor buffer: no longer one frame's tensor
  return jobflow_buffer_add_frame_meta(dest, src->frame, src->caps, src->model_width, src->model_height,
                                       src->scale_x, src->scale_y, src->pad_x, src->pad_y) != nullptr;
}

}  // namespace

extern "C" {

GType jobflow_frame_meta_api_get_type(void) {
  static GType type = 0;
  static const gchar* tags[] = {nullptr};
  if (g_once_init_enter(&type)) g_once_init_leave(&type, gst_meta_api_type_register("JobflowFrameMetaAPI", tags));
  return type;
}

const GstMetaInfo* jobflow_frame_meta_get_info(void) {
  static const GstMetaInfo* info = nullptr;
  if (g_once_init_enter(&info)) {
    const GstMetaInfo* i = gst_meta_register(JOBFLOW_FRAME_META_API_TYPE, "JobflowFrameMeta", sizeof(JobflowFrameMeta),
                                             meta_init, meta_free, meta_transform);
    g_once_init_leave(&info, i);
  }
  return info;
}

JobflowFrameMeta* jobflow_buffer_add_frame_meta(GstBuffer* buffer, GstBuffer* frame, GstCaps* caps, gint model_width,
                                                gint model_height, gdouble scale_x, gdouble scale_y, gdouble pad_x,
                                                gdouble pad_y) {
  g_return_val_if_fail(GST_IS_BUFFER(buffer) && GST_IS_BUFFER(frame) && GST_IS_CAPS(caps), nullptr);
  g_return_val_if_fail(scale_x > 0.0 && scale_y > 0.0, nullptr);
  auto* m = reinterpret_cast<JobflowFrameMeta*>(gst_buffer_add_meta(buffer, JOBFLOW_FRAME_META_INFO, nullptr));
  if (!m) return nullptr;
  m->frame = gst_buffer_ref(frame);
  m->caps = gst_caps_ref(caps);
  GstVideoInfo info;
  if (gst_video_info_from_caps(&info, caps)) {
    m->frame_width = GST_VIDEO_INFO_WIDTH(&info);
    m->frame_height = GST_VIDEO_INFO_HEIGHT(&info);
  }
  m->model_width = model_width;
  m->model_height = model_height;
  m->scale_x = scale_x;
  m->scale_y = scale_y;
  m->pad_x = pad_x;
  m->pad_y = pad_y;
  return m;
}

void jobflow_frame_meta_to_frame(const JobflowFrameMeta* meta, gdouble* x, gdouble* y) {
  g_return_if_fail(meta != nullptr);
  if (x) *x = (*x - meta->pad_x) / meta->scale_x;
  if (y) *y = (*y - meta->pad_y) / meta->scale_y;
}

}  // extern "C"
