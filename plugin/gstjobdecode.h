/* jobdecode: a model's output tensors -> results people and elements use.
 *
 * Modes (property "mode", docs/elements.md#jobdecode):
 *   labels        classifier scores -> text/x-raw "label (0.93)" lines and
 *                 "jobflow-labels" bus messages
 *   ctc           a text recogniser's per-step class scores -> text/x-raw
 *                 lines (CTC greedy decoding with a dictionary) and
 *                 "jobflow-text" bus messages
 *   boxes         a detector's output (schemes yolov8, yolov5, ssd,
 *                 detections) -> regions (JobflowAnalyticsRelationMeta
 *                 ODMtds) after a score threshold and per-class NMS
 *   text-regions  a DB text detector's probability map -> rotated regions
 *   segmentation  per-class scores or a class map -> a mask
 *                 (SegmentationMtd), optionally a mask video
 *
 * In the last three ("frame modes") the output buffer is the video frame
 * the tensor was made from when the input carries jobconvert's
 * JobflowFrameMeta (results mapped back to frame pixels through its
 * scaling), else the input tensor buffer itself; the results are metas on
 * it, and a "jobflow-regions" message with their JSON goes on the bus.
 * The output caps are known at the first buffer (the frame's caps), so in
 * frame modes the element negotiates downstream then, holding the segment
 * until the caps are out.
 *
 * per-region=true (labels, ctc, boxes): the input is a second model's
 * output on jobcrop's crops (JobflowCropMeta); each crop's results (a
 * ClsMtd, a TextMtd, ODMtds) are attached to its region on the frame —
 * the region CONTAINs them, they are IS_PART_OF it — and the output is the
 * frame, after the last of its crop buffers. A GstBaseTransform: one
 * buffer in, one out (a frame's earlier crop buffers give none). */
#pragma once

#include <gst/base/gstbasetransform.h>
#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_JOB_DECODE (gst_job_decode_get_type())
G_DECLARE_FINAL_TYPE(GstJobDecode, gst_job_decode, GST, JOB_DECODE, GstBaseTransform)

/* Name of the element message posted for every decoded row (labels). */
#define JOBFLOW_LABELS_MESSAGE_NAME "jobflow-labels"
/* Name of the element message posted for every decoded row (ctc). */
#define JOBFLOW_TEXT_MESSAGE_NAME "jobflow-text"

/* Registers the "jobdecode" element in `plugin`. */
gboolean jobflow_register_jobdecode(GstPlugin* plugin);

G_END_DECLS
