/* JobflowCropMeta: the regions of one frame that a tensor holds, cropped.
 *
 * jobcrop crops regions (ODMtds of the frame's JobflowAnalyticsRelationMeta)
 * out of a video frame, fits each into the second model's input and stacks
 * them along dim 0 of one tensor (slot i = crop i). It attaches this meta
 * to that tensor buffer: a reference to the frame (no copy of its pixels)
 * with its caps, and per crop the id of the region it came from and the
 * geometry of the fit — the frame rectangle x, y, w, h that was cropped
 * (turned upright first when the region is rotated by `rotation`), scaled
 * by (scale_x, scale_y) and placed at (pad_x, pad_y) in the model input of
 * model_width x model_height. Tensor elements pass metas on
 * (jobfunction keeps its input's), so after the second model
 * `jobdecode per-region=true` finds the frame and the regions again,
 * attaches each crop's result to its region (the region CONTAINs the
 * result, the result IS_PART_OF the region) and pushes the frame.
 *
 * A frame with more crops than the tensor has slots (batch_size) gives
 * several tensors in a row: `chunk` counts them from 0 and `last` marks the
 * frame's final one (the frame goes downstream after it). A frame with no
 * crop (no region of the label, the interval skipped it, all too small)
 * still gives one buffer — empty, flagged GST_BUFFER_FLAG_GAP, n_crops 0,
 * last TRUE — so it keeps its place in the stream; jobfunction passes such
 * buffers on without a call.
 *
 * Upstream equivalent: none yet (GStreamer 1.28's GstAnalyticsBatchMeta
 * carries whole frames, not regions); the meta stays a Jobflow type.
 *
 * API "JobflowCropMetaAPI", no tags. Copying the meta references the same
 * frame. */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

typedef struct {
  guint region_id;          /* the ODMtd's id in the frame's JobflowAnalyticsRelationMeta */
  gint x, y, w, h;          /* the cropped frame rectangle (pixels); of a rotated crop, the
                             * rectangle before the rotation (as the ODMtd's) */
  gdouble scale_x, scale_y; /* model pixels per (upright) crop pixel */
  gdouble pad_x, pad_y;     /* model pixels before the scaled crop */
  gdouble rotation;         /* radians, clockwise about the rectangle's centre: the crop was
                             * the rotated rectangle, turned upright (0: axis-aligned) */
} JobflowCrop;

typedef struct {
  GstMeta meta;
  GstBuffer* frame;       /* the frame (a reference) */
  GstCaps* caps;          /* its caps (a reference) */
  gint model_width, model_height;
  guint batch_size;       /* slots of the tensor (its dim 0) */
  guint n_crops;          /* the first n_crops slots hold crops; the rest are padding */
  JobflowCrop* crops;     /* n_crops entries */
  guint chunk;            /* this buffer's index among the frame's buffers, from 0 */
  gboolean last;          /* the frame's last buffer */
} JobflowCropMeta;

GType jobflow_crop_meta_api_get_type(void);
#define JOBFLOW_CROP_META_API_TYPE (jobflow_crop_meta_api_get_type())
const GstMetaInfo* jobflow_crop_meta_get_info(void);
#define JOBFLOW_CROP_META_INFO (jobflow_crop_meta_get_info())

/* Attaches `frame` (referenced) with `caps` (referenced) and `n_crops`
 * crops (copied). */
JobflowCropMeta* jobflow_buffer_add_crop_meta(GstBuffer* buffer, GstBuffer* frame, GstCaps* caps, gint model_width,
                                              gint model_height, guint batch_size, const JobflowCrop* crops,
                                              guint n_crops, guint chunk, gboolean last);
#define jobflow_buffer_get_crop_meta(b) ((JobflowCropMeta*)gst_buffer_get_meta((b), JOBFLOW_CROP_META_API_TYPE))

/* Model pixel coordinates of crop `crop` -> frame pixel coordinates
 * (through the scaling, then the rotation about the rectangle's centre). */
void jobflow_crop_to_frame(const JobflowCrop* crop, gdouble* x, gdouble* y);

G_END_DECLS
