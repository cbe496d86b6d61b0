/* JobflowCropMeta: see jobflow_crop_meta.h. */
#include "jobflow_crop_meta.h"

#include <cmath>
#include <cstring>

namespace {

gboolean meta_init(GstMeta* meta, gpointer, GstBuffer*) {
  auto* m = reinterpret_cast<JobflowCropMeta*>(meta);
  m->frame = nullptr;
  m->caps = nullptr;
  m->model_width = m->model_height = 0;
  m->batch_size = m->n_crops = m->chunk = 0;
  m->crops = nullptr;
  m->last = TRUE;
  return TRUE;
}

void meta_free(GstMeta* meta, GstBuffer*) {
  auto* m = reinterpret_cast<JobflowCropMeta*>(meta);
  gst_clear_buffer(&m->frame);
  gst_clear_caps(&m->caps);
  g_free(m->crops);
  m->crops = nullptr;
}

gboolean meta_transform(GstBuffer* dest, GstMeta* meta, GstBuffer*, GQuark type, gpointer data) {
  auto* src = reinterpret_cast<JobflowCropMeta*>(meta);
  if (!GST_META_TRANSFORM_IS_COPY(type)) return FALSE;
  if (static_cast<GstMetaTransformCopy*>(data)->region) return FALSE;  // a part of the tensors: not the crops any more
  return jobflow_buffer_add_crop_meta(dest, src->frame, src->caps, src->model_width, src->model_height,
                                      src->batch_size, src->crops, src->n_crops, src->chunk, src->last) != nullptr;
}

}  // namespace

extern "C" {

GType jobflow_crop_meta_api_get_type(void) {
  static GType type = 0;
  static const gchar* tags[] = {nullptr};
  if (g_once_init_enter(&type)) g_once_init_leave(&type, gst_meta_api_type_register("JobflowCropMetaAPI", tags));
  return type;
}

const GstMetaInfo* jobflow_crop_meta_get_info(void) {
  static const GstMetaInfo* info = nullptr;
  if (g_once_init_enter(&info)) {
    const GstMetaInfo* i = gst_meta_register(JOBFLOW_CROP_META_API_TYPE, "JobflowCropMeta", sizeof(JobflowCropMeta),
                                             meta_init, meta_free, meta_transform);
    g_once_init_leave(&info, i);
  }
  return info;
}

JobflowCropMeta* jobflow_buffer_add_crop_meta(GstBuffer* buffer, GstBuffer* frame, GstCaps* caps, gint model_width,
                                              gint model_height, guint batch_size, const JobflowCrop* crops,
                                              guint n_crops, guint chunk, gboolean last) {
  g_return_val_if_fail(GST_IS_BUFFER(buffer) && GST_IS_BUFFER(frame) && GST_IS_CAPS(caps), nullptr);
  g_return_val_if_fail(n_crops <= batch_size && (n_crops == 0 || crops != nullptr), nullptr);
  auto* m = reinterpret_cast<JobflowCropMeta*>(gst_buffer_add_meta(buffer, JOBFLOW_CROP_META_INFO, nullptr));
  if (!m) return nullptr;
  m->frame = gst_buffer_ref(frame);
  m->caps = gst_caps_ref(caps);
  m->model_width = model_width;
  m->model_height = model_height;
  m->batch_size = batch_size;
  m->n_crops = n_crops;
  m->crops = n_crops ? static_cast<JobflowCrop*>(g_memdup2(crops, sizeof(JobflowCrop) * n_crops)) : nullptr;
  m->chunk = chunk;
  m->last = last;
  return m;
}

void jobflow_crop_to_frame(const JobflowCrop* crop, gdouble* x, gdouble* y) {
  g_return_if_fail(crop != nullptr && x != nullptr && y != nullptr);
  const double lx = (*x - crop->pad_x) / crop->scale_x, ly = (*y - crop->pad_y) / crop->scale_y;
  if (crop->rotation == 0.0) {
    *x = crop->x + lx;
    *y = crop->y + ly;
    return;
  }
  /* about the centre, clockwise on screen (y down) */
  const double dx = lx - crop->w / 2.0, dy = ly - crop->h / 2.0;
  const double c = std::cos(crop->rotation), s = std::sin(crop->rotation);
  *x = crop->x + crop->w / 2.0 + dx * c - dy * s;
  *y = crop->y + crop->h / 2.0 + dx * s + dy * c;
}

}  // extern "C"
