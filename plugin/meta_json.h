/* One frame's results as one JSON line: what jobmetapublish writes.
 *
 *   {"timestamp":1033333333,"stream-time":1033333333,"running-time":1033333333,"duration":33333333,
 *    "offset":31,"source":2,
 *    "tensors":[{"name":"scores","type":"float32","dims":[1,3],"values":[0.1,0.7,0.2]}],
 *    "regions":[{"id":0,"label":"car",...}], ...}
 *
 * The frame's own members come first; then, when the buffer has a
 * JobflowTensorMeta, "tensors"; then every member of the buffer's
 * JobflowAnalyticsRelationMeta as jobflow_analytics_relation_meta_write_json()
 * writes it ("regions" always, "classes", "texts", "masks", "tracks" when
 * not empty), so the regions have one JSON form in Jobflow, that of
 * jobflow_analytics.h. Numbers as jobflow_json_node_to_string() writes them.
 * docs/elements.md (jobmetapublish) has the schema. */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

/* What a frame's JSON holds beyond its results. */
typedef struct {
  guint max_values;          /* tensor values written per tensor (0 = none) */
  const GstSegment* segment; /* the element's segment, for "stream-time" and "running-time" of a frame without
                                JobflowMuxMeta (may be NULL) */
} JobflowMetaJsonOptions;

/* Number of frames in `buffer`: the valid slots of its JobflowMuxMeta when
 * it is a jobmux batch of several, else 1. */
guint jobflow_meta_json_frames(GstBuffer* buffer);

/* The JSON object (one line, no newline) of frame `frame` of `buffer`
 * (0 .. jobflow_meta_json_frames() - 1). g_free() it. */
gchar* jobflow_meta_json_frame(GstBuffer* buffer, guint frame, const JobflowMetaJsonOptions* options);

G_END_DECLS
