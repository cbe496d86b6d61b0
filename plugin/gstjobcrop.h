/* jobcrop: the regions of a frame -> one tensor of crops for a second model.
 *
 * For every video frame, the regions (ODMtds of its
 * JobflowAnalyticsRelationMeta, e.g. from `jobdecode mode=boxes` or
 * `text-regions`) of the chosen `label` and at least `min-width` x
 * `min-height` pixels are cropped from the frame (a rotated region turned
 * upright, `deskew`), each fitted into the
 * model's input (`resize`: keep the aspect and pad right/bottom, letterbox,
 * or stretch), normalised like jobconvert's tensors, and stacked along
 * dim 0 of one tensor: (B, C, H, W) (or NHWC), B slots per buffer, padding
 * slots zero. The model's input size, channels, batch and dtype come from
 * downstream's caps (jobfunction answers with its job's placeholder) unless
 * the properties set them. Each tensor buffer carries a JobflowCropMeta
 * (jobflow_crop_meta.h): the frame and, per slot, its region id and the
 * crop geometry, so that `jobdecode per-region=true` after the model
 * attaches the results to the regions and pushes the frame on.
 *
 * Every frame gives at least one buffer, in order: a frame with more
 * crops than B gives several (chunks); a frame without crops (none fits,
 * `interval` skipped it) gives one empty GAP buffer that carries the frame
 * past the model. Late frames are dropped on downstream's QoS events
 * (`qos`, `max-lateness`), with a QoS message. docs/elements.md#jobcrop. */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_JOB_CROP (gst_job_crop_get_type())
G_DECLARE_FINAL_TYPE(GstJobCrop, gst_job_crop, GST, JOB_CROP, GstElement)

/* Registers the "jobcrop" element in `plugin`. */
gboolean jobflow_register_jobcrop(GstPlugin* plugin);

G_END_DECLS
