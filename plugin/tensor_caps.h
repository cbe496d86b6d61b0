/* Tensors on GStreamer pads (libjobflow-gst; installed as jobflow/gst/tensor_caps.h).
 *
 * Caps are NNStreamer's tensor formats, so Jobflow and NNStreamer elements
 * can be chained. Static:
 *   other/tensors, format=static, num_tensors=N,
 *     dimensions="d0:d1:d2:d3,e0:e1", types="float32,int32", framerate=F
 * Dimensions are written innermost first (a (100, 1, 28, 28) NCHW tensor is
 * "28:28:1:100"); tensors are separated by ',' (NNStreamer also accepts '.').
 * Each buffer holds one GstMemory per tensor, in order.
 * Flexible (shapes free per buffer):
 *   other/tensors, format=flexible, framerate=F
 * Each GstMemory is one tensor led by NNStreamer's 128-byte tensor header
 * (GstTensorMetaInfo version 1.0, native-endian uint32 words): magic
 * 0xfeedcced, version, element type, 16 dims innermost first (0 ends them),
 * format, media type; then the data. */
#pragma once

#include <gst/gst.h>

#include <jobflow/graph.h>
#include <jobflow/tensor.h>

#include <string>
#include <vector>

namespace jobflow::gst {

/* The media type and field names. */
inline constexpr const char* kTensorsMediaType = "other/tensors";
/* NNStreamer supports up to 16 tensors per buffer. */
inline constexpr int kMaxTensors = 16;

/* "float32" <-> DType, NNStreamer spelling (float16/32/64, int8/16/32/64,
 * uint8/16/32/64) plus Jobflow's bool and bfloat16. Returns false for a
 * type Jobflow has no dtype for. */
bool dtype_from_nns(const std::string& name, DType* out);
const char* dtype_to_nns(DType t);

/* Shape (outermost first) <-> "d0:d1:..." innermost first. Trailing 1s that
 * NNStreamer appends (rank-4 padding) are accepted on parse when
 * `expected_rank` says how many dims to keep (0 = keep all). */
std::string dims_to_string(const Shape& shape);
bool dims_from_string(const std::string& text, size_t expected_rank, Shape* out);

/* Fixed caps for a list of tensor specs, with an optional framerate
 * (fps_n/fps_d; 0/1 = unknown, field omitted when fps_d == 0). */
GstCaps* caps_from_specs(const std::vector<TensorSpec>& specs, int fps_n = 0, int fps_d = 1);
/* What a pad taking or giving tensors of `specs` accepts: their static caps
 * (with `dimensions` left out when some dim is kDynamic: any size there,
 * checked when caps arrive) and format=flexible; framerate left open. */
GstCaps* caps_accepting(const std::vector<TensorSpec>& specs);
/* Parses fixed other/tensors caps. On failure returns false and sets
 * *error to a message naming the field and the value. `ranks` (optional)
 * gives the rank to keep per tensor. */
bool specs_from_caps(const GstCaps* caps, std::vector<TensorSpec>* specs, std::string* error,
                     const std::vector<size_t>& ranks = {});

/* ---- format=flexible ---- */
inline constexpr size_t kFlexHeaderBytes = 128;
/* Whether fixed caps say format=flexible. */
bool caps_are_flexible(const GstCaps* caps);
/* other/tensors, format=flexible [, framerate=fps_n/fps_d when fps_d != 0]. */
GstCaps* flexible_caps(int fps_n = 0, int fps_d = 1);
/* The header of a tensor of `spec` (kFlexHeaderBytes bytes at `out`);
 * false for a rank over 16 or a dim over 2^32 - 1. */
bool write_flex_header(const TensorSpec& spec, void* out);
/* The spec a header describes. `expected_rank` (0 = as written) drops
 * outer 1s or adds them as dims_from_string does. False + *error naming
 * the field for a bad magic or version, an element type Jobflow has no
 * dtype for, or another format (sparse). */
bool read_flex_header(const void* header, size_t size, size_t expected_rank, TensorSpec* out, std::string* error);
/* Views of a flexible buffer's tensors (each memory: header + data), shapes
 * from the headers, zero-copy. `ranks` (optional) as in specs_from_caps. */
bool tensors_from_flexible_buffer(GstBuffer* buf, std::vector<Tensor>* out, std::string* error,
                                  const std::vector<size_t>& ranks = {});
/* A flexible buffer of `tensors`: one memory per tensor, header + a copy
 * of the data. Null on allocation failure. */
GstBuffer* flexible_buffer_from_tensors(const std::vector<Tensor>& tensors);

/* Zero-copy views of a buffer's memories as Tensors: each Tensor keeps the
 * buffer mapped and referenced until the last copy of it is gone. Fails
 * (false + *error naming the tensor, expected vs got bytes) when the
 * buffer does not match the specs. */
bool tensors_from_buffer(GstBuffer* buf, const std::vector<TensorSpec>& specs, std::vector<Tensor>* out,
                         std::string* error);
/* Wraps tensors as a buffer, one GstMemory per tensor, without copying: the
 * memories hold references to the tensors' storage. */
GstBuffer* buffer_from_tensors(const std::vector<Tensor>& tensors);

/* Bytes of one tensor of `spec`. */
size_t spec_bytes(const TensorSpec& spec);
/* A new buffer of one memory of `bytes`, 64-byte aligned as the engine's
 * tensors are. */
GstBuffer* new_tensor_buffer(size_t bytes);

/* A batch buffer's split into its frames along dim 0 (jobunbatch,
 * jobdemux): each frame's specs and each tensor's bytes in the batch. */
struct BatchSplit {
  std::vector<TensorSpec> frame_specs;  // the batch's, dim 0 divided by the frames
  std::vector<size_t> bytes;            // per tensor, all frames
};
/* Plans splitting `buf`, tensors `specs`, into `n` frames: "" and *split,
 * or why not (a tensor whose dim 0 does not divide by n, naming it and its
 * shape; a buffer whose size is not the specs'). */
std::string plan_split(GstBuffer* buf, const std::vector<TensorSpec>& specs, guint n, BatchSplit* split);
/* Frame `i` of the `n` in `batch`: a new buffer holding the frame's slice
 * of each tensor (memories shared, no copy); no timestamps, no metas. */
GstBuffer* frame_slices(GstBuffer* batch, const BatchSplit& split, guint i, guint n);

}  // namespace jobflow::gst
