/* jobbatch: batches single frames for throughput (other/tensors ->
 * other/tensors): collects batch-size buffers and concatenates every
 * tensor along dim 0, so a (1, C, H, W) frame becomes (B, C, H, W) (a
 * rank-0 tensor becomes (B,)). A batch is pushed when full, when its first
 * frame has waited max-latency (if set), or on EOS / new caps / new
 * segment; a partial batch is padded with zeros and JobflowBatchMeta says
 * how many slots are real, or with short-batches=true pushed with only its
 * frames under caps for that many (for a job with a dynamic batch; the
 * caps go back for the next full batch). jobunbatch (gstjobunbatch.h) is
 * the inverse.
 * Elements between them (jobfunction) must copy buffer metas from input to
 * output (GstBaseTransform does so for metas without tags, as this one). */
#pragma once

#include <gst/gst.h>

#include "jobbatch_meta.h"

G_BEGIN_DECLS

#define GST_TYPE_JOB_BATCH (gst_job_batch_get_type())
G_DECLARE_FINAL_TYPE(GstJobBatch, gst_job_batch, GST, JOB_BATCH, GstElement)

/* Registers "jobbatch" in `plugin`. */
gboolean jobflow_register_jobbatch(GstPlugin* plugin);

G_END_DECLS
