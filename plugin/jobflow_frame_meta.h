/* JobflowFrameMeta: the video frame a tensor was made from, and how.
 *
 * jobconvert attaches it to every tensor it makes from one video frame
 * (frames-per-tensor=1): a reference to the original frame buffer (no
 * copy), that frame's caps, and the geometry of the conversion — the
 * frame was scaled by (scale_x, scale_y) and placed at (pad_x, pad_y) in a
 * model input of model_width x model_height (letterboxing pads around it;
 * stretching has pad 0). Tensor elements pass metas on (jobfunction keeps
 * its input's metas), so the decoder after the model finds the frame:
 * `jobdecode mode=boxes` maps the boxes back to frame pixels with
 * jobflow_frame_meta_to_frame(), attaches them to the frame and pushes the
 * frame itself downstream (to jobtrack, joboverlay, ...).
 *
 * Upstream equivalent: GstAnalyticsBatchMeta (GStreamer 1.28) carries the
 * original buffers of a batch with their caps (as sticky events); it has no
 * field for the scaling, which stays a Jobflow addition.
 *
 * API "JobflowFrameMetaAPI", no tags. Copying the meta references the same
 * frame. */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

typedef struct {
  GstMeta meta;
  GstBuffer* frame;      /* the original frame (a reference) */
  GstCaps* caps;         /* its caps (a reference) */
  gint frame_width, frame_height;
  gint model_width, model_height;  /* the tensor's spatial size */
  gdouble scale_x, scale_y;        /* model pixels per frame pixel */
  gdouble pad_x, pad_y;            /* model pixels before the scaled frame */
} JobflowFrameMeta;

GType jobflow_frame_meta_api_get_type(void);
#define JOBFLOW_FRAME_META_API_TYPE (jobflow_frame_meta_api_get_type())
const GstMetaInfo* jobflow_frame_meta_get_info(void);
#define JOBFLOW_FRAME_META_INFO (jobflow_frame_meta_get_info())

/* Attaches `frame` (referenced) with `caps` (referenced) and the geometry;
 * frame_width/height come from the caps. */
JobflowFrameMeta* jobflow_buffer_add_frame_meta(GstBuffer* buffer, GstBuffer* frame, GstCaps* caps, gint model_width,
                                                gint model_height, gdouble scale_x, gdouble scale_y, gdouble pad_x,
                                                gdouble pad_y);
#define jobflow_buffer_get_frame_meta(b) ((JobflowFrameMeta*)gst_buffer_get_meta((b), JOBFLOW_FRAME_META_API_TYPE))

/* Model pixel coordinates -> frame pixel coordinates (x and y in place). */
void jobflow_frame_meta_to_frame(const JobflowFrameMeta* meta, gdouble* x, gdouble* y);

G_END_DECLS
