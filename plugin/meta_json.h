/* Frame metas as JSON (json-glib): what jobmetapublish writes, one JSON
 * object per frame, and the registry through which any meta adds itself.
 *
 *   {"pts": 1033333333, "dts": null, "duration": 33333333, "offset": 31,
 *    "running_time": 1033333333, "source": 2,
 *    "tensors": [{"name": "scores", "type": "float32", "dims": [1, 3], "values": [0.1, 0.7, 0.2]}],
 *    "metas": [ ... one value per registered meta on the frame ... ]}
 *
 * docs/elements.md (jobmetapublish) has the schema. A meta that should
 * appear in "metas" registers a writer once (e.g. when its element
 * registers):
 *
 *   static gboolean write_regions(const GstMeta* meta, guint slot, guint batch_size, JsonBuilder* b) {
 *     json_builder_begin_object(b);
 *     json_builder_set_member_name(b, "type");
 *     json_builder_add_string_value(b, "regions");
 *     ...
 *     json_builder_end_object(b);
 *     return TRUE;
 *   }
 *   jobflow_meta_json_register(MY_REGION_META_API_TYPE, write_regions);
 */
#pragma once

#include <gst/gst.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

/* Adds one JSON value (usually an object with a "type" member) for `meta`
 * to `builder`, which is inside the frame's "metas" array. `slot` is the
 * frame's slot in a batched buffer of `batch_size` slots (a jobmux batch;
 * 0 and 1 for a single frame): write only what belongs to that frame.
 * Return FALSE, having added nothing, when there is nothing to write. */
typedef gboolean (*JobflowMetaJsonWriter)(const GstMeta* meta, guint slot, guint batch_size, JsonBuilder* builder);

/* Registers `writer` for metas of API `meta_api` (a second registration
 * replaces the first; NULL removes it). Thread-safe. */
void jobflow_meta_json_register(GType meta_api, JobflowMetaJsonWriter writer);

/* What a frame's JSON holds beyond its metas. */
typedef struct {
  guint max_values;         /* tensor values written per tensor (0 = none) */
  const GstSegment* segment; /* for "running_time" when the frame has no JobflowMuxMeta (may be NULL) */
} JobflowMetaJsonOptions;

/* Number of frames in `buffer`: the valid slots of its JobflowMuxMeta when
 * it is a batch of several, else 1. */
guint jobflow_meta_json_frames(GstBuffer* buffer);

/* The JSON object (one line, no newline) of frame `frame` of `buffer`
 * (0 .. jobflow_meta_json_frames() - 1). g_free() it. */
gchar* jobflow_meta_json_frame(GstBuffer* buffer, guint frame, const JobflowMetaJsonOptions* options);

G_END_DECLS
