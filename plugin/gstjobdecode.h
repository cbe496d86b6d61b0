/* jobdecode: classifier scores -> text people read.
 *
 * Sink: other/tensors, num_tensors=1, one float32/float64 tensor of scores
 *       or logits, shape (N, C) or (C,) (any leading dims: the innermost
 *       dim is the classes, every other element is a row/frame).
 * Src:  text/x-raw, format=utf8: one line per row, the top-k labels as
 *       "label (0.93)" joined by ", " (textoverlay can draw it).
 * Each row is also posted on the bus as an element message named
 * "jobflow-labels" (see docs/elements.md for its fields), so applications
 * need no tensor parsing. A GstBaseTransform: one buffer in, one out. */
#pragma once

#include <gst/base/gstbasetransform.h>
#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_JOB_DECODE (gst_job_decode_get_type())
G_DECLARE_FINAL_TYPE(GstJobDecode, gst_job_decode, GST, JOB_DECODE, GstBaseTransform)

/* Name of the element message posted for every decoded row. */
#define JOBFLOW_LABELS_MESSAGE_NAME "jobflow-labels"

/* Registers the "jobdecode" element in `plugin`. */
gboolean jobflow_register_jobdecode(GstPlugin* plugin);

G_END_DECLS
