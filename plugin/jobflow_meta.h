/* JobflowTensorMeta: what the tensors of a buffer are, attached by the
 * elements that produce tensors (jobdatasrc, jobconvert, jobfunction, ...).
 *
 * The caps already say it (other/tensors, see tensor_caps.h); the meta
 * carries it on the buffer itself so it survives elements that do not
 * look at caps, and so applications can read it from a pulled sample.
 *
 * It mirrors GstTensorMeta (gst-plugins-bad gst-libs/gst/analytics,
 * "Since: 1.26") field for field, minus the data pointer (our tensor i is
 * GstMemory i of the buffer itself):
 *
 *   GstTensorMeta { GstMeta meta; gsize num_tensors; GstTensor **tensors; }
 *   GstTensor     { GQuark id; GstTensorDataType data_type; GstBuffer *data;
 *                   GstTensorDimOrder dims_order; gsize num_dims; gsize dims[]; }
 *
 * JobflowTensorDataType uses GstTensorDataType's values (INT4 = 0 ...
 * BFLOAT16 = 13), JobflowTensorDimOrder GstTensorDimOrder's, and dims are
 * outermost first in row-major order, as GstTensor's are.
 *
 * Upgrade path (GStreamer >= 1.26, when gstreamer-analytics-1.0 is found):
 *   1. meson: add dependency('gstreamer-analytics-1.0', version: '>= 1.26',
 *      required: false) and define JOBFLOW_HAVE_GST_TENSOR_META.
 *   2. jobflow_buffer_add_tensor_meta() additionally calls
 *      gst_buffer_add_tensor_meta() and fills it with
 *      gst_tensor_new_simple(id, (GstTensorDataType)data_type,
 *      gst_buffer_copy_region(buf, GST_BUFFER_COPY_MEMORY, offset_of(i),
 *      size_of(i)), (GstTensorDimOrder)dims_order, num_dims, dims) — the
 *      enum values already match, so this is a cast, and the memories are
 *      shared (no copy).
 *   3. Readers prefer GstTensorMeta when present and fall back to this one;
 *      after a deprecation cycle this meta is dropped.
 * Until then, this meta's API name "JobflowTensorMetaAPI" is what to look
 * for (jobflow_buffer_get_tensor_meta()). */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

/* Same values as GstTensorDataType (1.26). */
typedef enum {
  JOBFLOW_TENSOR_DATA_TYPE_INT4,
  JOBFLOW_TENSOR_DATA_TYPE_INT8,
  JOBFLOW_TENSOR_DATA_TYPE_INT16,
  JOBFLOW_TENSOR_DATA_TYPE_INT32,
  JOBFLOW_TENSOR_DATA_TYPE_INT64,
  JOBFLOW_TENSOR_DATA_TYPE_UINT4,
  JOBFLOW_TENSOR_DATA_TYPE_UINT8,
  JOBFLOW_TENSOR_DATA_TYPE_UINT16,
  JOBFLOW_TENSOR_DATA_TYPE_UINT32,
  JOBFLOW_TENSOR_DATA_TYPE_UINT64,
  JOBFLOW_TENSOR_DATA_TYPE_FLOAT16,
  JOBFLOW_TENSOR_DATA_TYPE_FLOAT32,
  JOBFLOW_TENSOR_DATA_TYPE_FLOAT64,
  JOBFLOW_TENSOR_DATA_TYPE_BFLOAT16
} JobflowTensorDataType;

/* Same values as GstTensorDimOrder (1.26). Jobflow always writes ROW_MAJOR. */
typedef enum {
  JOBFLOW_TENSOR_DIM_ORDER_ROW_MAJOR,
  JOBFLOW_TENSOR_DIM_ORDER_COL_MAJOR
} JobflowTensorDimOrder;

#define JOBFLOW_TENSOR_META_MAX_DIMS 16

/* One tensor's description (GstTensor minus its data). */
typedef struct {
  GQuark id;                        /* what the tensor means (0 = unnamed) */
  JobflowTensorDataType data_type;
  JobflowTensorDimOrder dims_order;
  gsize num_dims;
  gsize dims[JOBFLOW_TENSOR_META_MAX_DIMS]; /* outermost first */
} JobflowTensorInfo;

typedef struct {
  GstMeta meta;
  gsize num_tensors;
  JobflowTensorInfo* tensors;       /* num_tensors entries; tensor i is memory i */
} JobflowTensorMeta;

GType jobflow_tensor_meta_api_get_type(void);
#define JOBFLOW_TENSOR_META_API_TYPE (jobflow_tensor_meta_api_get_type())
const GstMetaInfo* jobflow_tensor_meta_get_info(void);
#define JOBFLOW_TENSOR_META_INFO (jobflow_tensor_meta_get_info())

/* Adds an empty meta (num_tensors = 0); fill it with
 * jobflow_tensor_meta_set(). */
JobflowTensorMeta* jobflow_buffer_add_tensor_meta(GstBuffer* buffer);
/* Replaces the meta's tensors with a copy of `tensors[0..num_tensors)`. */
void jobflow_tensor_meta_set(JobflowTensorMeta* meta, gsize num_tensors, const JobflowTensorInfo* tensors);
/* The tensor with `id`, or NULL (as gst_tensor_meta_get_by_id). */
const JobflowTensorInfo* jobflow_tensor_meta_get_by_id(const JobflowTensorMeta* meta, GQuark id);
#define jobflow_buffer_get_tensor_meta(b) \
  ((JobflowTensorMeta*)gst_buffer_get_meta((b), JOBFLOW_TENSOR_META_API_TYPE))

G_END_DECLS

#ifdef __cplusplus
#include <jobflow/graph.h>

#include <string>
#include <vector>

namespace jobflow::gst {
/* Attaches a JobflowTensorMeta describing `specs` (ids from `names` when
 * given, via g_quark_from_string). Returns the meta. */
JobflowTensorMeta* add_tensor_meta(GstBuffer* buffer, const std::vector<TensorSpec>& specs,
                                   const std::vector<std::string>& names = {});
/* DType <-> JobflowTensorDataType; false for a type Jobflow lacks. */
JobflowTensorDataType meta_dtype(DType t);
bool dtype_from_meta(JobflowTensorDataType t, DType* out);
/* The specs a meta describes; false when a type or dim order is unsupported. */
bool specs_from_meta(const JobflowTensorMeta* meta, std::vector<TensorSpec>* specs);
}  // namespace jobflow::gst
#endif
