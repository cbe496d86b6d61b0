/* JobflowMuxMeta: where each frame of a jobmux batch came from, so that
 * jobdemux can give every source its own frames back (gstjobmux.h,
 * gstjobdemux.h). It sits beside JobflowBatchMeta (jobbatch_meta.h), which
 * jobmux also attaches with each frame's own pts, dts, duration and offset.
 * No tags: elements that copy metas (GstBaseTransform, jobfunction) carry
 * it through.
 *
 * Also here: the per-slot split registry. A meta that describes all frames
 * of a batch (e.g. the regions a detector found in each) registers a
 * function that copies the part of one slot onto a frame's buffer; jobdemux
 * calls it for every meta of that API on a batch it splits. */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

/* Arrays have batch_size entries; slots >= valid are padding (source
 * G_MAXUINT, frame and caps NULL). jobdemux's output frames carry a meta
 * with one slot: the frame's own. */
typedef struct {
  GstMeta meta;
  guint batch_size;
  guint valid;
  guint* source_id;      /* the source: N of jobmux's sink_N pad */
  GstBuffer** frames;    /* the buffer as it entered jobmux (a reference) */
  GstCaps** caps;        /* that pad's caps at the time (a reference) */
  GstSegment* segments;  /* that pad's segment at the time */
} JobflowMuxMeta;

GType jobflow_mux_meta_api_get_type(void);
#define JOBFLOW_MUX_META_API_TYPE (jobflow_mux_meta_api_get_type())
const GstMetaInfo* jobflow_mux_meta_get_info(void);
/* Adds a meta with `batch_size` slots, all padding, valid = 0. */
JobflowMuxMeta* jobflow_buffer_add_mux_meta(GstBuffer* buffer, guint batch_size);
/* Fills slot `slot` (takes new references to frame and caps; either may be
 * NULL). Does not change `valid`. */
void jobflow_mux_meta_set_slot(JobflowMuxMeta* meta, guint slot, guint source_id, GstBuffer* frame, GstCaps* caps,
                               const GstSegment* segment);
#define jobflow_buffer_get_mux_meta(b) ((JobflowMuxMeta*)gst_buffer_get_meta((b), JOBFLOW_MUX_META_API_TYPE))

/* jobflow_analytics_regions_message_new() (jobflow_analytics.h) for a
 * frame of jobmux source `source`: with a "source" (guint) field, unless
 * `source` is G_MAXUINT (a frame that did not come through jobmux). */
GstMessage* jobflow_mux_regions_message_new(GstObject* src, GstBuffer* frame, const GstSegment* segment, guint source);

/* Copies the part of `meta` (on a batch of `batch_size` slots) that belongs
 * to slot `slot` onto `dest` (a writable frame buffer). Returns FALSE when
 * nothing was added. */
typedef gboolean (*JobflowMetaSplitFunc)(GstBuffer* dest, const GstMeta* meta, guint slot, guint batch_size);
/* Registers `split` for metas of API `meta_api` (once per API; a second
 * registration replaces the first). Thread-safe. */
void jobflow_meta_split_register(GType meta_api, JobflowMetaSplitFunc split);
/* Calls the registered split of every meta on `batch` whose API has one. */
void jobflow_meta_split_slot(GstBuffer* batch, guint slot, guint batch_size, GstBuffer* dest);

G_END_DECLS
