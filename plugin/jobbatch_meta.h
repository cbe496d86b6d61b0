/* JobflowBatchMeta: what jobbatch records on a batch so jobunbatch can
 * split it back into frames with their own timestamps (gstjobbatch.h,
 * gstjobunbatch.h). No tags: elements that copy metas (GstBaseTransform,
 * jobfunction) carry it through. */
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

G_END_DECLS
