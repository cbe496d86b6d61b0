/* JobflowTensorMeta: see jobflow_meta.h (including the GStreamer 1.26
 * GstTensorMeta upgrade path). */
#include "jobflow_meta.h"

#include <algorithm>
#include <cstring>

namespace {

gboolean meta_init(GstMeta* meta, gpointer, GstBuffer*) {
  auto* m = reinterpret_cast<JobflowTensorMeta*>(meta);
  m->num_tensors = 0;
  m->tensors = nullptr;
  return TRUE;
}

void meta_free(GstMeta* meta, GstBuffer*) {
  auto* m = reinterpret_cast<JobflowTensorMeta*>(meta);
  g_free(m->tensors);
  m->tensors = nullptr;
  m->num_tensors = 0;
}

gboolean meta_transform(GstBuffer* dest, GstMeta* meta, GstBuffer* buffer, GQuark type, gpointer data) {
  auto* src = reinterpret_cast<JobflowTensorMeta*>(meta);
  if (!GST_META_TRANSFORM_IS_COPY(type)) return FALSE;  // other transforms: the description may no longer hold
  auto* copy = static_cast<GstMetaTransformCopy*>(data);
  /* A region copy only keeps the tensors if it is the whole buffer. */
  if (copy->region && !(copy->offset == 0 && (copy->size == static_cast<gsize>(-1) ||
                                              copy->size == gst_buffer_get_size(buffer))))
    return TRUE;
  JobflowTensorMeta* dst = jobflow_buffer_add_tensor_meta(dest);
  if (!dst) return FALSE;
  jobflow_tensor_meta_set(dst, src->num_tensors, src->tensors);
  return TRUE;
}

}  // namespace

extern "C" {

GType jobflow_tensor_meta_api_get_type(void) {
  static GType type = 0;
  static const gchar* tags[] = {nullptr};
  if (g_once_init_enter(&type)) {
    GType t = gst_meta_api_type_register("JobflowTensorMetaAPI", tags);
    g_once_init_leave(&type, t);
  }
  return type;
}

const GstMetaInfo* jobflow_tensor_meta_get_info(void) {
  static const GstMetaInfo* info = nullptr;
  if (g_once_init_enter(&info)) {
    const GstMetaInfo* i = gst_meta_register(JOBFLOW_TENSOR_META_API_TYPE, "JobflowTensorMeta",
                                             sizeof(JobflowTensorMeta), meta_init, meta_free, meta_transform);
    g_once_init_leave(&info, i);
  }
  return info;
}

JobflowTensorMeta* jobflow_buffer_add_tensor_meta(GstBuffer* buffer) {
  g_return_val_if_fail(GST_IS_BUFFER(buffer), nullptr);
  return reinterpret_cast<JobflowTensorMeta*>(gst_buffer_add_meta(buffer, JOBFLOW_TENSOR_META_INFO, nullptr));
}

void jobflow_tensor_meta_set(JobflowTensorMeta* meta, gsize num_tensors, const JobflowTensorInfo* tensors) {
  g_return_if_fail(meta != nullptr);
  g_free(meta->tensors);
  meta->tensors = nullptr;
  meta->num_tensors = 0;
  if (num_tensors == 0 || !tensors) return;
  meta->tensors = static_cast<JobflowTensorInfo*>(g_memdup2(tensors, sizeof(JobflowTensorInfo) * num_tensors));
  meta->num_tensors = num_tensors;
}

const JobflowTensorInfo* jobflow_tensor_meta_get_by_id(const JobflowTensorMeta* meta, GQuark id) {
  g_return_val_if_fail(meta != nullptr, nullptr);
  for (gsize i = 0; i < meta->num_tensors; ++i)
    if (meta->tensors[i].id == id) return &meta->tensors[i];
  return nullptr;
}

}  // extern "C"

namespace jobflow::gst {

JobflowTensorDataType meta_dtype(DType t) {
  switch (t) {
    case DType::Float32: return JOBFLOW_TENSOR_DATA_TYPE_FLOAT32;
    case DType::Float64: return JOBFLOW_TENSOR_DATA_TYPE_FLOAT64;
    case DType::Int32: return JOBFLOW_TENSOR_DATA_TYPE_INT32;
    case DType::Int64: return JOBFLOW_TENSOR_DATA_TYPE_INT64;
    case DType::Int8: return JOBFLOW_TENSOR_DATA_TYPE_INT8;
    case DType::UInt8: return JOBFLOW_TENSOR_DATA_TYPE_UINT8;
    case DType::Bool: return JOBFLOW_TENSOR_DATA_TYPE_UINT8;  // GstTensorMeta has no bool: bytes 0/1
    case DType::Int16: return JOBFLOW_TENSOR_DATA_TYPE_INT16;
    case DType::UInt16: return JOBFLOW_TENSOR_DATA_TYPE_UINT16;
    case DType::UInt32: return JOBFLOW_TENSOR_DATA_TYPE_UINT32;
    case DType::UInt64: return JOBFLOW_TENSOR_DATA_TYPE_UINT64;
    case DType::Float16: return JOBFLOW_TENSOR_DATA_TYPE_FLOAT16;
    case DType::BFloat16: return JOBFLOW_TENSOR_DATA_TYPE_BFLOAT16;
  }
  return JOBFLOW_TENSOR_DATA_TYPE_FLOAT32;
}

bool dtype_from_meta(JobflowTensorDataType t, DType* out) {
  DType d;
  switch (t) {
    case JOBFLOW_TENSOR_DATA_TYPE_FLOAT32: d = DType::Float32; break;
    case JOBFLOW_TENSOR_DATA_TYPE_FLOAT64: d = DType::Float64; break;
    case JOBFLOW_TENSOR_DATA_TYPE_INT32: d = DType::Int32; break;
    case JOBFLOW_TENSOR_DATA_TYPE_INT64: d = DType::Int64; break;
    case JOBFLOW_TENSOR_DATA_TYPE_INT8: d = DType::Int8; break;
    case JOBFLOW_TENSOR_DATA_TYPE_UINT8: d = DType::UInt8; break;
    case JOBFLOW_TENSOR_DATA_TYPE_INT16: d = DType::Int16; break;
    case JOBFLOW_TENSOR_DATA_TYPE_UINT16: d = DType::UInt16; break;
    case JOBFLOW_TENSOR_DATA_TYPE_UINT32: d = DType::UInt32; break;
    case JOBFLOW_TENSOR_DATA_TYPE_UINT64: d = DType::UInt64; break;
    case JOBFLOW_TENSOR_DATA_TYPE_FLOAT16: d = DType::Float16; break;
    case JOBFLOW_TENSOR_DATA_TYPE_BFLOAT16: d = DType::BFloat16; break;
    default: return false;
  }
  if (out) *out = d;
  return true;
}

JobflowTensorMeta* add_tensor_meta(GstBuffer* buffer, const std::vector<TensorSpec>& specs,
                                   const std::vector<std::string>& names) {
  JobflowTensorMeta* meta = jobflow_buffer_add_tensor_meta(buffer);
  if (!meta) return nullptr;
  std::vector<JobflowTensorInfo> infos(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    JobflowTensorInfo& ti = infos[i];
    std::memset(&ti, 0, sizeof ti);
    ti.id = i < names.size() && !names[i].empty() ? g_quark_from_string(names[i].c_str()) : 0;
    ti.data_type = meta_dtype(specs[i].dtype);
    ti.dims_order = JOBFLOW_TENSOR_DIM_ORDER_ROW_MAJOR;
    ti.num_dims = std::min<size_t>(specs[i].shape.size(), JOBFLOW_TENSOR_META_MAX_DIMS);
    for (size_t d = 0; d < ti.num_dims; ++d) ti.dims[d] = static_cast<gsize>(specs[i].shape[d]);
  }
  jobflow_tensor_meta_set(meta, infos.size(), infos.data());
  return meta;
}

bool specs_from_meta(const JobflowTensorMeta* meta, std::vector<TensorSpec>* specs) {
  if (!meta) return false;
  std::vector<TensorSpec> out(meta->num_tensors);
  for (gsize i = 0; i < meta->num_tensors; ++i) {
    const JobflowTensorInfo& ti = meta->tensors[i];
    if (ti.dims_order != JOBFLOW_TENSOR_DIM_ORDER_ROW_MAJOR || ti.num_dims > JOBFLOW_TENSOR_META_MAX_DIMS)
      return false;
    if (!dtype_from_meta(ti.data_type, &out[i].dtype)) return false;
    out[i].shape.assign(ti.dims, ti.dims + ti.num_dims);
  }
  if (specs) *specs = std::move(out);
  return true;
}

}  // namespace jobflow::gst
