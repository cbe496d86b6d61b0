/* Frame metas as JSON. See meta_json.h. */
#include "meta_json.h"

#include "jobbatch_meta.h"
#include "jobflow_meta.h"
#include "jobmux_meta.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

namespace {

struct Writer {
  GType api;
  JobflowMetaJsonWriter write;
};
std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}
std::vector<Writer>& registry() {
  static std::vector<Writer> r;
  return r;
}

const char* type_name(JobflowTensorDataType t) {
  switch (t) {
    case JOBFLOW_TENSOR_DATA_TYPE_INT4: return "int4";
    case JOBFLOW_TENSOR_DATA_TYPE_INT8: return "int8";
    case JOBFLOW_TENSOR_DATA_TYPE_INT16: return "int16";
    case JOBFLOW_TENSOR_DATA_TYPE_INT32: return "int32";
    case JOBFLOW_TENSOR_DATA_TYPE_INT64: return "int64";
    case JOBFLOW_TENSOR_DATA_TYPE_UINT4: return "uint4";
    case JOBFLOW_TENSOR_DATA_TYPE_UINT8: return "uint8";
    case JOBFLOW_TENSOR_DATA_TYPE_UINT16: return "uint16";
    case JOBFLOW_TENSOR_DATA_TYPE_UINT32: return "uint32";
    case JOBFLOW_TENSOR_DATA_TYPE_UINT64: return "uint64";
    case JOBFLOW_TENSOR_DATA_TYPE_FLOAT16: return "float16";
    case JOBFLOW_TENSOR_DATA_TYPE_FLOAT32: return "float32";
    case JOBFLOW_TENSOR_DATA_TYPE_FLOAT64: return "float64";
    case JOBFLOW_TENSOR_DATA_TYPE_BFLOAT16: return "bfloat16";
  }
  return "unknown";
}

/* Bytes per element of the types whose values are written (0: not written). */
size_t value_size(JobflowTensorDataType t) {
  switch (t) {
    case JOBFLOW_TENSOR_DATA_TYPE_INT8:
    case JOBFLOW_TENSOR_DATA_TYPE_UINT8: return 1;
    case JOBFLOW_TENSOR_DATA_TYPE_INT32:
    case JOBFLOW_TENSOR_DATA_TYPE_FLOAT32: return 4;
    case JOBFLOW_TENSOR_DATA_TYPE_INT64:
    case JOBFLOW_TENSOR_DATA_TYPE_FLOAT64: return 8;
    default: return 0;
  }
}

void add_value(JsonBuilder* b, const guint8* p, JobflowTensorDataType t) {
  switch (t) {
    case JOBFLOW_TENSOR_DATA_TYPE_INT8: json_builder_add_int_value(b, static_cast<gint8>(*p)); break;
    case JOBFLOW_TENSOR_DATA_TYPE_UINT8: json_builder_add_int_value(b, *p); break;
    case JOBFLOW_TENSOR_DATA_TYPE_INT32: { gint32 v; std::memcpy(&v, p, 4); json_builder_add_int_value(b, v); break; }
    case JOBFLOW_TENSOR_DATA_TYPE_INT64: { gint64 v; std::memcpy(&v, p, 8); json_builder_add_int_value(b, v); break; }
    case JOBFLOW_TENSOR_DATA_TYPE_FLOAT32: { float v; std::memcpy(&v, p, 4); json_builder_add_double_value(b, v); break; }
    case JOBFLOW_TENSOR_DATA_TYPE_FLOAT64: { double v; std::memcpy(&v, p, 8); json_builder_add_double_value(b, v); break; }
    default: json_builder_add_null_value(b); break;
  }
}

void add_time(JsonBuilder* b, const char* name, GstClockTime t) {
  json_builder_set_member_name(b, name);
  if (GST_CLOCK_TIME_IS_VALID(t))
    json_builder_add_int_value(b, static_cast<gint64>(t));
  else
    json_builder_add_null_value(b);
}

/* "tensors": the buffer's JobflowTensorMeta, for frame `slot` of `n` (dim
 * 0 divided by n, values from that frame's part of each memory). */
void add_tensors(JsonBuilder* b, GstBuffer* buffer, const JobflowTensorMeta* tm, guint slot, guint n,
                 guint max_values) {
  json_builder_set_member_name(b, "tensors");
  json_builder_begin_array(b);
  for (gsize i = 0; i < tm->num_tensors; ++i) {
    const JobflowTensorInfo& ti = tm->tensors[i];
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "name");
    if (ti.id)
      json_builder_add_string_value(b, g_quark_to_string(ti.id));
    else
      json_builder_add_null_value(b);
    json_builder_set_member_name(b, "type");
    json_builder_add_string_value(b, type_name(ti.data_type));
    json_builder_set_member_name(b, "dims");
    json_builder_begin_array(b);
    gsize count = 1;
    for (gsize d = 0; d < ti.num_dims; ++d) {
      const gsize dim = d == 0 && n > 1 ? ti.dims[0] / n : ti.dims[d];
      json_builder_add_int_value(b, static_cast<gint64>(dim));
      count *= dim;
    }
    json_builder_end_array(b);
    const size_t esz = value_size(ti.data_type);
    if (max_values > 0 && esz > 0 && i < gst_buffer_n_memory(buffer)) {
      GstMemory* mem = gst_buffer_peek_memory(buffer, static_cast<guint>(i));
      GstMapInfo map;
      if (gst_memory_map(mem, &map, GST_MAP_READ)) {
        const size_t begin = count * esz * slot;
        const size_t k = std::min<size_t>(count, max_values);
        if (begin + k * esz <= map.size) {
          json_builder_set_member_name(b, "values");
          json_builder_begin_array(b);
          for (size_t v = 0; v < k; ++v) add_value(b, map.data + begin + v * esz, ti.data_type);
          json_builder_end_array(b);
        }
        gst_memory_unmap(mem, &map);
      }
    }
    json_builder_end_object(b);
  }
  json_builder_end_array(b);
}

}  // namespace

void jobflow_meta_json_register(GType meta_api, JobflowMetaJsonWriter writer) {
  std::lock_guard<std::mutex> lk(registry_mutex());
  auto& r = registry();
  for (auto it = r.begin(); it != r.end(); ++it)
    if (it->api == meta_api) {
      if (writer)
        it->write = writer;
      else
        r.erase(it);
      return;
    }
  if (writer) r.push_back({meta_api, writer});
}

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
  const guint slot = batched ? frame : 0;
  JsonBuilder* b = json_builder_new();
  json_builder_begin_object(b);

  GstClockTime pts = GST_BUFFER_PTS(buffer), dts = GST_BUFFER_DTS(buffer), dur = GST_BUFFER_DURATION(buffer);
  guint64 offset = GST_BUFFER_OFFSET(buffer);
  if (batched && bm && slot < bm->batch_size) {
    pts = bm->pts[slot];
    dts = bm->dts[slot];
    dur = bm->duration[slot];
    offset = bm->offset[slot];
  } else if (batched && mm->frames[slot]) {
    pts = GST_BUFFER_PTS(mm->frames[slot]);
    dts = GST_BUFFER_DTS(mm->frames[slot]);
    dur = GST_BUFFER_DURATION(mm->frames[slot]);
    offset = GST_BUFFER_OFFSET(mm->frames[slot]);
  }
  add_time(b, "pts", pts);
  add_time(b, "dts", dts);
  add_time(b, "duration", dur);
  json_builder_set_member_name(b, "offset");
  if (offset != GST_BUFFER_OFFSET_NONE)
    json_builder_add_int_value(b, static_cast<gint64>(offset));
  else
    json_builder_add_null_value(b);
  const GstSegment* seg = mm ? &mm->segments[slot] : options ? options->segment : nullptr;
  GstClockTime rt = GST_CLOCK_TIME_NONE;
  if (seg && seg->format == GST_FORMAT_TIME && GST_CLOCK_TIME_IS_VALID(pts))
    rt = gst_segment_to_running_time(seg, GST_FORMAT_TIME, pts);
  add_time(b, "running_time", rt);
  if (mm) {
    json_builder_set_member_name(b, "source");
    json_builder_add_int_value(b, mm->source_id[slot]);
  }
  if (const JobflowTensorMeta* tm = jobflow_buffer_get_tensor_meta(buffer))
    add_tensors(b, buffer, tm, slot, n, options ? options->max_values : 0);

  std::vector<Writer> writers;
  {
    std::lock_guard<std::mutex> lk(registry_mutex());
    writers = registry();
  }
  json_builder_set_member_name(b, "metas");
  json_builder_begin_array(b);
  gpointer state = nullptr;
  while (GstMeta* m = gst_buffer_iterate_meta(buffer, &state))
    for (const Writer& w : writers)
      if (m->info->api == w.api) w.write(m, slot, n, b);
  json_builder_end_array(b);

  json_builder_end_object(b);
  JsonNode* root = json_builder_get_root(b);
  JsonGenerator* gen = json_generator_new();
  json_generator_set_root(gen, root);
  gchar* text = json_generator_to_data(gen, nullptr);
  g_object_unref(gen);
  json_node_unref(root);
  g_object_unref(b);
  return text;
}
