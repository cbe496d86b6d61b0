/* jobbatch / jobunbatch: batch single frames for throughput, and split the
 * results back per frame with their own timestamps.
 *
 * jobbatch   other/tensors -> other/tensors: collects batch-size buffers
 *            and concatenates every tensor along dim 0, so a (1, C, H, W)
 *            frame becomes (B, C, H, W) (a rank-0 tensor becomes (B,)).
 *            A batch is pushed when full, when its first frame has waited
 *            max-latency (if set), or on EOS / new caps / new segment; a
 *            partial batch is padded with zeros and JobflowBatchMeta says
 *            how many slots are real, or with short-batches=true pushed
 *            with only its frames under caps for that many (for a job with
 *            a dynamic batch; the caps go back for the next full batch).
 * jobunbatch other/tensors -> other/tensors: the inverse: splits dim 0 of
 *            every tensor into batch_size parts (from JobflowBatchMeta, or
 *            the batch-size property when the meta is absent), drops the
 *            padding and restores each frame's pts/dts/duration/offset.
 * Elements between them (jobfunction) must copy buffer metas from input to
 * output (GstBaseTransform does so for metas without tags, as this one). */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

/* Per-frame bookkeeping of a batched buffer. Arrays have batch_size
 * entries; slots >= valid are padding (GST_CLOCK_TIME_NONE / offset NONE). */
typedef struct {
  GstMeta meta;
  guint batch_size;  /* slots along dim 0 (dim 0 grew by this factor) */
  guint valid;       /* the first `valid` slots hold frames */
  GstClockTime* pts;
  GstClockTime* dts;
  GstClockTime* duration;
  guint64* offset;
} JobflowBatchMeta;

GType jobflow_batch_meta_api_get_type(void);
#define JOBFLOW_BATCH_META_API_TYPE (jobflow_batch_meta_api_get_type())
const GstMetaInfo* jobflow_batch_meta_get_info(void);
/* Adds a meta with `batch_size` slots, all padding, valid = 0. */
JobflowBatchMeta* jobflow_buffer_add_batch_meta(GstBuffer* buffer, guint batch_size);
#define jobflow_buffer_get_batch_meta(b) \
  ((JobflowBatchMeta*)gst_buffer_get_meta((b), JOBFLOW_BATCH_META_API_TYPE))

#define GST_TYPE_JOB_BATCH (gst_job_batch_get_type())
G_DECLARE_FINAL_TYPE(GstJobBatch, gst_job_batch, GST, JOB_BATCH, GstElement)
#define GST_TYPE_JOB_UNBATCH (gst_job_unbatch_get_type())
G_DECLARE_FINAL_TYPE(GstJobUnbatch, gst_job_unbatch, GST, JOB_UNBATCH, GstElement)

/* Registers "jobbatch" and "jobunbatch" in `plugin`. */
gboolean jobflow_register_jobbatch(GstPlugin* plugin);

G_END_DECLS
