/* jobtrack: stable ids for the regions of consecutive frames.
 *
 * For every buffer, the regions (ODMtds of its JobflowAnalyticsRelationMeta,
 * from jobdecode mode=boxes) are matched to the tracks of the previous
 * frames — SORT: IoU with each track's Kalman-predicted box, the Hungarian
 * method (plugin/track/sort.h) — and each region of a confirmed track gets
 * a TrackingMtd (its id, first and last seen) related to it. Optionally
 * counts the tracks crossing a line ("jobflow-line-crossing" messages,
 * count-in / count-out). Any caps: the frame passes in place (a
 * GstBaseTransform). docs/elements.md#jobtrack. */
#pragma once

#include <gst/base/gstbasetransform.h>
#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_JOB_TRACK (gst_job_track_get_type())
G_DECLARE_FINAL_TYPE(GstJobTrack, gst_job_track, GST, JOB_TRACK, GstBaseTransform)

/* The element message posted for every track crossing the line. */
#define JOBFLOW_LINE_CROSSING_MESSAGE_NAME "jobflow-line-crossing"

/* Registers the "jobtrack" element in `plugin`. */
gboolean jobflow_register_jobtrack(GstPlugin* plugin);

G_END_DECLS
