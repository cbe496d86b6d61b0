/* jobmux: the frames of many sources batched into one tensor buffer.
 *
 * Sink: request pads sink_%u (one per source), other/tensors, every source
 * with the same tensors (one frame each; framerates may differ).
 * Src:  other/tensors, every tensor's dim 0 grown batch-size times.
 *
 * Frames are taken from the sources in turn (round-robin, each source's in
 * its order) until a batch is full or its first frame has waited
 * max-latency; a partial batch is padded with zeros. Each batch carries a
 * JobflowBatchMeta (every frame's own pts, dts, duration, offset) and a
 * JobflowMuxMeta (jobmux_meta.h: source id = N of sink_N, the frame, its
 * caps and segment) so jobdemux can hand results back per source. Sources
 * may join (request a pad) and leave (EOS, or release the pad) while
 * PLAYING; EOS goes out once every source has ended. docs/elements.md has
 * the full reference. */
#pragma once

#include <gst/gst.h>

#include "jobbatch_meta.h"
#include "jobmux_meta.h"

G_BEGIN_DECLS

#define GST_TYPE_JOB_MUX (gst_job_mux_get_type())
G_DECLARE_FINAL_TYPE(GstJobMux, gst_job_mux, GST, JOB_MUX, GstElement)

/* The custom downstream event jobmux sends after the last frame of a source
 * (its EOS, or its pad released): structure name, and the guint field
 * "source"; the boolean "released" says which. jobdemux ends that source's
 * pad with EOS. */
#define JOBFLOW_MUX_SOURCE_EOS_EVENT "jobflow-mux-source-eos"

/* Registers the "jobmux" element in `plugin`. */
gboolean jobflow_register_jobmux(GstPlugin* plugin);

G_END_DECLS
