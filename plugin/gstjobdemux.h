/* jobdemux: the inverse of jobmux. Splits each batch (jobmux's, through a
 * job) back into frames and pushes them on one src_%u pad per source
 * (src_N for jobmux's sink_N), created when the source's first frame comes
 * (sometimes pads), each source's frames in their order with their own
 * timestamps, caps and segment. jobmux's source-EOS event ends that pad
 * with EOS; EOS on the sink pad ends every pad.
 *
 * output=results (default): a frame's slice of every tensor of the batch
 * (no copy), other/tensors with dim 0 divided by the batch size and the
 * source's framerate. output=frames: the buffer as it entered jobmux, with
 * its caps. Either way the frame carries a one-slot JobflowMuxMeta (its
 * source), and the part of each batch meta that has a split function
 * (jobmux_meta.h). docs/elements.md has the full reference. */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_JOB_DEMUX (gst_job_demux_get_type())
G_DECLARE_FINAL_TYPE(GstJobDemux, gst_job_demux, GST, JOB_DEMUX, GstElement)

/* Registers the "jobdemux" element in `plugin`. */
gboolean jobflow_register_jobdemux(GstPlugin* plugin);

G_END_DECLS
