/* joboverlay: draws the analytics results on the frames — region boxes
 * (rotated ones too), their labels, confidences, track ids and texts, and
 * masks — with cairo and pango, as textoverlay draws text: everything is
 * drawn into a transparent ARGB layer and blended onto the frame
 * (GstVideoOverlayComposition), so RGB, BGRx and I420 frames (and the other
 * formats of the template) are drawn on the same way. Each label has its
 * own colour. A GstVideoFilter (GstBaseTransform), in place.
 * docs/elements.md#joboverlay. */
#pragma once

#include <gst/gst.h>
#include <gst/video/gstvideofilter.h>

G_BEGIN_DECLS

#define GST_TYPE_JOB_OVERLAY (gst_job_overlay_get_type())
G_DECLARE_FINAL_TYPE(GstJobOverlay, gst_job_overlay, GST, JOB_OVERLAY, GstVideoFilter)

/* Registers the "joboverlay" element in `plugin`. */
gboolean jobflow_register_joboverlay(GstPlugin* plugin);

/* The colour joboverlay gives `label` (8-bit R, G, B): a hue from a hash
 * of the label's text, so a label keeps its colour across frames and runs. */
void jobflow_overlay_label_color(const gchar* label, guint8 rgb[3]);

G_END_DECLS
