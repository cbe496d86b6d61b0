/* One frame's results as one JSON line. See meta_json.h. */
#include "meta_json.h"

#include "jobbatch_meta.h"
#include "jobflow_analytics.h"
#include "jobflow_meta.h"
#include "jobmux_meta.h"
#include "tensor_caps.h"

#include <json-glib/json-glib.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>

namespace {

void set_time(JsonObject* o, const char* name, GstClockTime t) {
  if (GST_CLOCK_TIME_IS_VALID(t))
    json_object_set_int_member(o, name, static_cast<gint64>(t));
  else
    json_object_set_null_member(o, name);
}

/* A float32 as the double of its shortest decimal form (0.1f is written
 * 0.1, not 0.10000000149011612). */
double short_double(float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf - 1, v);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

void add_value(JsonArray* a, const guint8* p, jobflow::DType t) {
  switch (t) {
    case jobflow::DType::Int8: json_array_add_int_element(a, static_cast<gint8>(*p)); break;
    case jobflow::DType::UInt8: json_array_add_int_element(a, *p); break;
    case jobflow::DType::Bool: json_array_add_boolean_element(a, *p != 0); break;
    case jobflow::DType::Int32: { gint32 v; std::memcpy(&v, p, 4); json_array_add_int_element(a, v); break; }
    case jobflow::DType::Int64: { gint64 v; std::memcpy(&v, p, 8); json_array_add_int_element(a, v); break; }
    case jobflow::DType::Float32: { float v; std::memcpy(&v, p, 4); json_array_add_double_element(a, short_double(v)); break; }
    case jobflow::DType::Float64: { double v; std::memcpy(&v, p, 8); json_array_add_double_element(a, v); break; }
    case jobflow::DType::Int16: { gint16 v; std::memcpy(&v, p, 2); json_array_add_int_element(a, v); break; }
    case jobflow::DType::UInt16: { guint16 v; std::memcpy(&v, p, 2); json_array_add_int_element(a, v); break; }
    case jobflow::DType::UInt32: { guint32 v; std::memcpy(&v, p, 4); json_array_add_int_element(a, v); break; }
    // JSON numbers above 2^63 do not fit json-glib's gint64: written as doubles.
    case jobflow::DType::UInt64: {
      guint64 v;
      std::memcpy(&v, p, 8);
      if (v <= static_cast<guint64>(G_MAXINT64)) json_array_add_int_element(a, static_cast<gint64>(v));
      else json_array_add_double_element(a, static_cast<double>(v));
      break;
    }
    case jobflow::DType::Float16: {
      jobflow::float16 v;
      std::memcpy(&v.bits, p, 2);
      json_array_add_double_element(a, short_double(static_cast<float>(v)));
      break;
    }
    case jobflow::DType::BFloat16: {
      jobflow::bfloat16 v;
      std::memcpy(&v.bits, p, 2);
      json_array_add_double_element(a, short_double(static_cast<float>(v)));
      break;
    }
  }
}

/* "tensors": the buffer's JobflowTensorMeta for frame `slot` of `n` (dim 0
 * divided by n, values from that frame's part of each memory). */
JsonArray* tensors(GstBuffer* buffer, const JobflowTensorMeta* tm, guint slot, guint n, guint max_values) {
  JsonArray* arr = json_array_new();
  for (gsize i = 0; i < tm->num_tensors; ++i) {
    const JobflowTensorInfo& ti = tm->tensors[i];
    JsonObject* o = json_object_new();
    if (ti.id)
      json_object_set_string_member(o, "name", g_quark_to_string(ti.id));
    else
      json_object_set_null_member(o, "name");
    jobflow::DType dt{};
    const bool known = jobflow::gst::dtype_from_meta(ti.data_type, &dt);
    if (known)
      json_object_set_string_member(o, "type", jobflow::gst::dtype_to_nns(dt));
    else
      json_object_set_null_member(o, "type");
    JsonArray* dims = json_array_new();
    gsize count = 1;
    for (gsize d = 0; d < ti.num_dims; ++d) {
      const gsize dim = d == 0 && n > 1 ? ti.dims[0] / n : ti.dims[d];
      json_array_add_int_element(dims, static_cast<gint64>(dim));
      count *= dim;
    }
    json_object_set_array_member(o, "dims", dims);
    if (max_values > 0 && known && i < gst_buffer_n_memory(buffer)) {
      const size_t esz = jobflow::dtype_size(dt);
      GstMemory* mem = gst_buffer_peek_memory(buffer, static_cast<guint>(i));
      GstMapInfo map;
      if (gst_memory_map(mem, &map, GST_MAP_READ)) {
        const size_t begin = count * esz * slot;
        const size_t k = std::min<size_t>(count, max_values);
        if (begin + k * esz <= map.size) {
          JsonArray* values = json_array_new();
          for (size_t v = 0; v < k; ++v) add_value(values, map.data + begin + v * esz, dt);
          json_object_set_array_member(o, "values", values);
        }
        gst_memory_unmap(mem, &map);
      }
    }
    json_array_add_object_element(arr, o);
  }
  return arr;
}

}  // namespace

guint jobflow_meta_json_frames(GstBuffer* buffer) {
  const JobflowMuxMeta* mm = jobflow_buffer_get_mux_meta(buffer);
  return mm && mm->batch_size > 1 ? std::min(mm->valid, mm->batch_size) : 1;
}

gchar* jobflow_meta_json_frame(GstBuffer* buffer, guint frame, const JobflowMetaJsonOptions* options) {
  g_return_val_if_fail(GST_IS_BUFFER(buffer), nullptr);
  const JobflowMuxMeta* mm = jobflow_buffer_get_mux_meta(buffer);
  const JobflowBatchMeta* bm = jobflow_buffer_get_batch_meta(buffer);
  const bool batched = mm && mm->batch_size > 1;
  const guint n = batched ? mm->batch_size : 1;
  const guint slot = batched ? std::min(frame, n - 1) : 0;

  GstClockTime pts = GST_BUFFER_PTS(buffer), dur = GST_BUFFER_DURATION(buffer);
  guint64 offset = GST_BUFFER_OFFSET(buffer);
  if (batched && bm && slot < bm->batch_size) {
    pts = bm->pts[slot];
    dur = bm->duration[slot];
    offset = bm->offset[slot];
  } else if (batched && mm->frames[slot]) {
    pts = GST_BUFFER_PTS(mm->frames[slot]);
    dur = GST_BUFFER_DURATION(mm->frames[slot]);
    offset = GST_BUFFER_OFFSET(mm->frames[slot]);
  }
  /* A frame through jobmux carries its source's segment; others the element's. */
  const GstSegment* seg = mm ? &mm->segments[slot] : options ? options->segment : nullptr;
  const bool timed = seg && seg->format == GST_FORMAT_TIME && GST_CLOCK_TIME_IS_VALID(pts);

  JsonObject* o = json_object_new();
  set_time(o, "timestamp", pts);
  set_time(o, "stream-time", timed ? gst_segment_to_stream_time(seg, GST_FORMAT_TIME, pts) : GST_CLOCK_TIME_NONE);
  set_time(o, "running-time", timed ? gst_segment_to_running_time(seg, GST_FORMAT_TIME, pts) : GST_CLOCK_TIME_NONE);
  set_time(o, "duration", dur);
  if (offset != GST_BUFFER_OFFSET_NONE)
    json_object_set_int_member(o, "offset", static_cast<gint64>(offset));
  else
    json_object_set_null_member(o, "offset");
  if (mm) json_object_set_int_member(o, "source", mm->source_id[slot]);
  if (const JobflowTensorMeta* tm = jobflow_buffer_get_tensor_meta(buffer))
    json_object_set_array_member(o, "tensors", tensors(buffer, tm, slot, n, options ? options->max_values : 0));

  /* The results: the analytics meta's own JSON, its members spliced in.
   * A frame's are on its buffer; a jobmux batch's on its slots' frames
   * (jobdecode's frame modes put them there). */
  JobflowAnalyticsRelationMeta* am = batched ? nullptr : jobflow_buffer_get_analytics_relation_meta(buffer);
  if (!am && mm && mm->frames[slot]) am = jobflow_buffer_get_analytics_relation_meta(mm->frames[slot]);
  JsonBuilder* b = json_builder_new();
  jobflow_analytics_relation_meta_write_json(am, b);
  JsonNode* results = json_builder_get_root(b);
  JsonObject* ro = json_node_get_object(results);
  GList* members = json_object_get_members(ro);  // in the order written
  for (GList* m = members; m; m = m->next) {
    const gchar* name = static_cast<const gchar*>(m->data);
    json_object_set_member(o, name, json_node_copy(json_object_get_member(ro, name)));
  }
  g_list_free(members);
  json_node_unref(results);
  g_object_unref(b);

  JsonNode* root = json_node_alloc();
  json_node_init_object(root, o);
  json_object_unref(o);
  gchar* text = jobflow_json_node_to_string(root);
  json_node_unref(root);
  return text;
}
