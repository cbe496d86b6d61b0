/* Small helpers the plugin's elements share (internal to the plugin). */
#pragma once

#include <gst/gst.h>

namespace jobflow::gst {

/* Events that keep their place among buffers (queued with them). */
inline bool is_serialized(GstEvent* e) {
  return (static_cast<int>(GST_EVENT_TYPE(e)) & static_cast<int>(GST_EVENT_TYPE_SERIALIZED)) != 0;
}
inline bool is_sticky(GstEvent* e) {
  return (static_cast<int>(GST_EVENT_TYPE(e)) & static_cast<int>(GST_EVENT_TYPE_STICKY)) != 0;
}

/* Answers a CAPS query with `caps` (taken) intersected with its filter. */
inline gboolean answer_caps_query(GstQuery* query, GstCaps* caps) {
  GstCaps* filter = nullptr;
  gst_query_parse_caps(query, &filter);
  if (filter) {
    GstCaps* tmp = gst_caps_intersect_full(filter, caps, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref(caps);
    caps = tmp;
  }
  gst_query_set_caps_result(query, caps);
  gst_caps_unref(caps);
  return TRUE;
}

}  // namespace jobflow::gst
