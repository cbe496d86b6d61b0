/* jobunbatch: the inverse of jobbatch (gstjobbatch.h), other/tensors ->
 * other/tensors: splits dim 0 of every tensor into batch_size parts (from
 * JobflowBatchMeta, or the batch-size property when the meta is absent),
 * drops the padding and restores each frame's pts/dts/duration/offset. */
#pragma once

#include <gst/gst.h>

#include "jobbatch_meta.h"

G_BEGIN_DECLS

#define GST_TYPE_JOB_UNBATCH (gst_job_unbatch_get_type())
G_DECLARE_FINAL_TYPE(GstJobUnbatch, gst_job_unbatch, GST, JOB_UNBATCH, GstElement)

/* Registers "jobunbatch" in `plugin`. */
gboolean jobflow_register_jobunbatch(GstPlugin* plugin);

G_END_DECLS
