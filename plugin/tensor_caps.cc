/* Tensors on GStreamer pads: NNStreamer's static other/tensors caps and
 * zero-copy conversions between GstBuffers and jobflow::Tensors. See
 * tensor_caps.h. Nothing here throws: every failure is a false return with
 * a message, so callers in GObject vfuncs stay exception-free. */
#include "tensor_caps.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <exception>
#include <memory>
#include <new>

namespace jobflow::gst {

namespace {

struct NnsType {
  const char* name;
  DType dtype;
};
constexpr NnsType kTypes[] = {
    {"float32", DType::Float32}, {"float64", DType::Float64}, {"int32", DType::Int32},
    {"int64", DType::Int64},     {"int8", DType::Int8},       {"uint8", DType::UInt8},
    {"int16", DType::Int16},     {"uint16", DType::UInt16},   {"uint32", DType::UInt32},
    {"uint64", DType::UInt64},   {"float16", DType::Float16},
    // Not NNStreamer types: Jobflow's own, one byte (0 or 1) per element,
    // and bfloat16's 16 bits.
    {"bool", DType::Bool},       {"bfloat16", DType::BFloat16},
};

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\n");
  return s.substr(b, e - b + 1);
}

/* Splits on any of `seps`, keeping empty fields (so "a,,b" is an error
 * for the caller to report rather than silently two tensors). */
std::vector<std::string> split(const std::string& s, const char* seps) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (std::strchr(seps, c)) {
      out.push_back(trim(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(trim(cur));
  return out;
}

/* Keeps a GstMemory mapped (and referenced) for as long as a Tensor views
 * it. Deleting it unmaps and unrefs. */
struct MappedMemory {
  GstMemory* mem = nullptr;
  GstMapInfo info{};
  ~MappedMemory() {
    if (mem) {
      gst_memory_unmap(mem, &info);
      gst_memory_unref(mem);
    }
  }
};

/* The same for a whole buffer (used when the buffer does not hold one
 * memory per tensor, e.g. everything in one memory). */
struct MappedBuffer {
  GstBuffer* buf = nullptr;
  GstMapInfo info{};
  ~MappedBuffer() {
    if (buf) {
      gst_buffer_unmap(buf, &info);
      gst_buffer_unref(buf);
    }
  }
};

std::string describe(size_t i, const TensorSpec& s) {
  return "tensor " + std::to_string(i) + " " + spec_str(s);
}

}  // namespace

bool dtype_from_nns(const std::string& name, DType* out) {
  std::string n = trim(name);
  for (const auto& t : kTypes) {
    if (n == t.name) {
      if (out) *out = t.dtype;
      return true;
    }
  }
  return false;
}

const char* dtype_to_nns(DType t) {
  for (const auto& e : kTypes)
    if (e.dtype == t) return e.name;
  return "unknown";
}

std::string dims_to_string(const Shape& shape) {
  /* A scalar is one element: NNStreamer has no rank 0, write "1". */
  if (shape.empty()) return "1";
  std::string s;
  for (auto it = shape.rbegin(); it != shape.rend(); ++it) {
    if (!s.empty()) s += ':';
    s += std::to_string(*it);
  }
  return s;
}

namespace {
/* Dims innermost first -> a shape, with NNStreamer's rank padding: outer 1s
 * beyond `expected_rank` dropped, missing outer dims 1 (0 = keep all). */
bool shape_from_inner(std::vector<int64_t> inner_first, size_t expected_rank, Shape* out) {
  for (int64_t d : inner_first)
    if (d <= 0) return false;
  if (expected_rank > 0) {
    while (inner_first.size() > expected_rank) {
      if (inner_first.back() != 1) return false;
      inner_first.pop_back();
    }
    while (inner_first.size() < expected_rank) inner_first.push_back(1);
  }
  if (out) *out = Shape(inner_first.rbegin(), inner_first.rend());
  return true;
}
}  // namespace

bool dims_from_string(const std::string& text, size_t expected_rank, Shape* out) {
  std::string t = trim(text);
  if (t.empty()) return false;
  std::vector<int64_t> inner_first;
  for (const std::string& f : split(t, ":")) {
    if (f.empty()) return false;
    for (char c : f)
      if (c < '0' || c > '9') return false;
    errno = 0;
    char* end = nullptr;
    unsigned long long v = std::strtoull(f.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || v > static_cast<unsigned long long>(INT32_MAX)) return false;
    inner_first.push_back(static_cast<int64_t>(v));
  }
  /* Newer NNStreamer writes unused trailing (outer) dims as 0; drop them.
   * A 0 anywhere else is an empty tensor, which static caps cannot carry. */
  while (inner_first.size() > 1 && inner_first.back() == 0) inner_first.pop_back();
  /* Rank-4 padding: extra outer dims must be 1; missing outer dims are 1. */
  return shape_from_inner(std::move(inner_first), expected_rank, out);
}

GstCaps* caps_from_specs(const std::vector<TensorSpec>& specs, int fps_n, int fps_d) {
  std::string dims, types;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (i) {
      dims += ',';
      types += ',';
    }
    dims += dims_to_string(specs[i].shape);
    types += dtype_to_nns(specs[i].dtype);
  }
  GstCaps* caps = gst_caps_new_simple(kTensorsMediaType, "format", G_TYPE_STRING, "static", "num_tensors",
                                      G_TYPE_INT, static_cast<int>(specs.size()), "dimensions", G_TYPE_STRING,
                                      dims.c_str(), "types", G_TYPE_STRING, types.c_str(), nullptr);
  if (fps_d != 0) gst_caps_set_simple(caps, "framerate", GST_TYPE_FRACTION, fps_n, fps_d, nullptr);
  return caps;
}

GstCaps* caps_accepting(const std::vector<TensorSpec>& specs) {
  bool fixed = true;
  for (const TensorSpec& s : specs) fixed = fixed && is_static(s.shape);
  GstCaps* caps;
  if (fixed) {
    caps = caps_from_specs(specs, 0, 0);
  } else {
    std::string types;
    for (size_t i = 0; i < specs.size(); ++i) types += (i ? "," : "") + std::string(dtype_to_nns(specs[i].dtype));
    caps = gst_caps_new_simple(kTensorsMediaType, "format", G_TYPE_STRING, "static", "num_tensors", G_TYPE_INT,
                               static_cast<int>(specs.size()), "types", G_TYPE_STRING, types.c_str(), nullptr);
  }
  gst_caps_append(caps, flexible_caps(0, 0));
  return caps;
}

bool specs_from_caps(const GstCaps* caps, std::vector<TensorSpec>* specs, std::string* error,
                     const std::vector<size_t>& ranks) {
  auto fail = [&](const std::string& msg) {
    if (error) *error = msg;
    return false;
  };
  if (!caps) return fail("no caps");
  if (gst_caps_get_size(caps) != 1 || !gst_caps_is_fixed(caps)) {
    gchar* s = gst_caps_to_string(caps);
    std::string msg = std::string("caps are not fixed: ") + (s ? s : "");
    g_free(s);
    return fail(msg);
  }
  const GstStructure* st = gst_caps_get_structure(caps, 0);
  const char* name = gst_structure_get_name(st);
  /* NNStreamer's single-tensor media type is accepted too. */
  const bool single = g_strcmp0(name, "other/tensor") == 0;
  if (!single && g_strcmp0(name, kTensorsMediaType) != 0)
    return fail(std::string("media type is '") + name + "', expected 'other/tensors'");

  const char* format = gst_structure_get_string(st, "format");
  if (format && g_strcmp0(format, "static") != 0)
    return fail(std::string("format='") + format + "': these caps say nothing of the shapes (format=static has them)");

  const char* dims_field = single ? "dimension" : "dimensions";
  const char* types_field = single ? "type" : "types";
  /* A single dim may have been parsed as an int (dimensions=10). */
  std::string dims_buf;
  const char* dims_s = gst_structure_get_string(st, dims_field);
  int dims_int = 0;
  if (!dims_s && gst_structure_get_int(st, dims_field, &dims_int)) {
    dims_buf = std::to_string(dims_int);
    dims_s = dims_buf.c_str();
  }
  const char* types_s = gst_structure_get_string(st, types_field);
  if (!dims_s) {
    if (gst_structure_has_field(st, dims_field))
      return fail(std::string("field '") + dims_field + "' is not a string (caps not fixed?)");
    return fail(std::string("missing field '") + dims_field + "'");
  }
  if (!types_s && gst_structure_has_field(st, types_field))
    return fail(std::string("field '") + types_field + "' is not a string (caps not fixed?)");
  if (!types_s) return fail(std::string("missing field '") + types_field + "'");

  std::vector<std::string> dims = split(dims_s, ",.");
  std::vector<std::string> types = split(types_s, ",.");
  int num = single ? 1 : -1;
  if (!single) {
    if (!gst_structure_get_int(st, "num_tensors", &num)) num = static_cast<int>(dims.size());
  }
  if (num < 1 || num > kMaxTensors)
    return fail("num_tensors=" + std::to_string(num) + " is out of range 1.." + std::to_string(kMaxTensors));
  if (static_cast<int>(dims.size()) != num)
    return fail(std::string(dims_field) + "=\"" + dims_s + "\" lists " + std::to_string(dims.size()) +
                " tensors, num_tensors=" + std::to_string(num));
  if (static_cast<int>(types.size()) != num)
    return fail(std::string(types_field) + "=\"" + types_s + "\" lists " + std::to_string(types.size()) +
                " tensors, num_tensors=" + std::to_string(num));
  if (!ranks.empty() && static_cast<int>(ranks.size()) != num)
    return fail("caps carry " + std::to_string(num) + " tensors, expected " + std::to_string(ranks.size()));

  std::vector<TensorSpec> out(num);
  for (int i = 0; i < num; ++i) {
    size_t rank = ranks.empty() ? 0 : ranks[i];
    if (!dims_from_string(dims[i], rank, &out[i].shape))
      return fail(std::string(dims_field) + ": tensor " + std::to_string(i) + " has dims '" + dims[i] + "'" +
                  (rank ? " which do not fit rank " + std::to_string(rank) : std::string(" (expected d0:d1:...)")));
    if (!dtype_from_nns(types[i], &out[i].dtype))
      return fail(std::string(types_field) + ": tensor " + std::to_string(i) + " has type '" + types[i] +
                  "' (supported: float16/32/64, bfloat16, int8/16/32/64, uint8/16/32/64, bool)");
    /* Every size computed from these caps (buffers, batches) starts here. */
    int64_t bytes = 0;
    std::string why;
    if (!checked_nbytes(out[i].shape, out[i].dtype, &bytes, &why))
      return fail(std::string(dims_field) + ": tensor " + std::to_string(i) + " has dims '" + dims[i] + "' " +
                  types[i] + ": " + why);
  }
  if (specs) *specs = std::move(out);
  return true;
}

/* ---- format=flexible: NNStreamer's per-memory tensor header ---- */

namespace {
constexpr uint32_t kFlexMagic = 0xfeedcced;
constexpr uint32_t kFlexVersion = 0xDE000000u | (1u << 12);  // 1.0
constexpr int kFlexRank = 16;                                  // dims in the header
constexpr uint32_t kFlexFormat = 1;                            // static 0, flexible 1, sparse 2
constexpr uint32_t kMediaTensor = 4;                           // other/tensor(s)
/* NNStreamer's element type numbers (tensor_type), by Jobflow dtype. */
struct FlexType {
  uint32_t code;
  DType dtype;
};
constexpr FlexType kFlexTypes[] = {{0, DType::Int32},   {1, DType::UInt32},  {2, DType::Int16},
                                   {3, DType::UInt16},  {4, DType::Int8},    {5, DType::UInt8},
                                   {6, DType::Float64}, {7, DType::Float32}, {8, DType::Int64},
                                   {9, DType::UInt64},  {10, DType::Float16}};
const char* kFlexTypeNames[] = {"int32", "uint32", "int16", "uint16", "int8", "uint8",
                                "float64", "float32", "int64", "uint64", "float16"};
}  // namespace

bool caps_are_flexible(const GstCaps* caps) {
  if (!caps || gst_caps_get_size(caps) < 1) return false;
  const GstStructure* st = gst_caps_get_structure(caps, 0);
  return g_strcmp0(gst_structure_get_string(st, "format"), "flexible") == 0;
}

GstCaps* flexible_caps(int fps_n, int fps_d) {
  GstCaps* caps = gst_caps_new_simple(kTensorsMediaType, "format", G_TYPE_STRING, "flexible", nullptr);
  if (fps_d != 0) gst_caps_set_simple(caps, "framerate", GST_TYPE_FRACTION, fps_n, fps_d, nullptr);
  return caps;
}

bool write_flex_header(const TensorSpec& spec, void* out) {
  uint32_t w[kFlexHeaderBytes / 4] = {};
  w[0] = kFlexMagic;
  w[1] = kFlexVersion;
  bool typed = false;
  for (const FlexType& t : kFlexTypes)
    if (t.dtype == spec.dtype) w[2] = t.code, typed = true;
  if (!typed || spec.shape.size() > static_cast<size_t>(kFlexRank)) return false;
  if (spec.shape.empty()) {
    w[3] = 1;  // a scalar is one element
  } else {
    for (size_t i = 0; i < spec.shape.size(); ++i) {
      const int64_t d = spec.shape[spec.shape.size() - 1 - i];
      if (d <= 0 || d > static_cast<int64_t>(UINT32_MAX)) return false;
      w[3 + i] = static_cast<uint32_t>(d);
    }
  }
  w[3 + kFlexRank] = kFlexFormat;
  w[4 + kFlexRank] = kMediaTensor;
  std::memcpy(out, w, kFlexHeaderBytes);
  return true;
}

bool read_flex_header(const void* header, size_t size, size_t expected_rank, TensorSpec* out, std::string* error) {
  auto fail = [&](const std::string& msg) {
    if (error) *error = msg;
    return false;
  };
  if (size < kFlexHeaderBytes)
    return fail("a flexible tensor needs a " + std::to_string(kFlexHeaderBytes) + "-byte header, the memory has " +
                std::to_string(size) + " bytes");
  uint32_t w[kFlexHeaderBytes / 4];
  std::memcpy(w, header, kFlexHeaderBytes);
  char hex[16];
  if (w[0] != kFlexMagic) {
    std::snprintf(hex, sizeof hex, "0x%08x", w[0]);
    return fail(std::string("header magic is ") + hex + ", expected 0xfeedcced");
  }
  if ((w[1] & 0xDE000000u) != 0xDE000000u || ((w[1] >> 12) & 0xfff) != 1) {
    std::snprintf(hex, sizeof hex, "0x%08x", w[1]);
    return fail(std::string("header version is ") + hex + ", expected 1.x");
  }
  const uint32_t format = w[3 + kFlexRank];
  if (format == 2) return fail("the tensor is sparse (format 2); only static and flexible tensors are supported");
  if (format > 2) return fail("header format " + std::to_string(format) + " is unknown");
  const FlexType* type = nullptr;
  for (const FlexType& t : kFlexTypes)
    if (t.code == w[2]) type = &t;
  if (!type)
    return fail(std::string("element type ") +
                (w[2] < std::size(kFlexTypeNames) ? kFlexTypeNames[w[2]] : std::to_string(w[2]).c_str()) +
                " has no Jobflow dtype (float16/32/64, int8/16/32/64, uint8/16/32/64)");
  std::vector<int64_t> inner;
  for (int i = 0; i < kFlexRank && w[3 + i] != 0; ++i) inner.push_back(w[3 + i]);
  if (inner.empty()) return fail("the header has no dims");
  TensorSpec s;
  s.dtype = type->dtype;
  if (!shape_from_inner(inner, expected_rank, &s.shape)) {
    std::string d;
    for (int64_t v : inner) d += (d.empty() ? "" : ":") + std::to_string(v);
    return fail("header dims '" + d + "' do not fit rank " + std::to_string(expected_rank));
  }
  if (out) *out = std::move(s);
  return true;
}

bool tensors_from_flexible_buffer(GstBuffer* buf, std::vector<Tensor>* out, std::string* error,
                                  const std::vector<size_t>& ranks) {
  auto fail = [&](const std::string& msg) {
    if (error) *error = msg;
    return false;
  };
  if (!buf) return fail("no buffer");
  try {
    const guint n = gst_buffer_n_memory(buf);
    if (n < 1 || n > static_cast<guint>(kMaxTensors))
      return fail("a flexible buffer holds 1.." + std::to_string(kMaxTensors) + " memories, this one " + std::to_string(n));
    if (!ranks.empty() && n != ranks.size())
      return fail("the buffer holds " + std::to_string(n) + " tensors, expected " + std::to_string(ranks.size()));
    std::vector<Tensor> result;
    for (guint i = 0; i < n; ++i) {
      auto m = std::make_shared<MappedMemory>();
      GstMemory* mem = gst_buffer_get_memory(buf, i);
      if (!gst_memory_map(mem, &m->info, GST_MAP_READ)) {
        gst_memory_unref(mem);
        return fail("tensor " + std::to_string(i) + ": cannot map memory");
      }
      m->mem = mem;
      TensorSpec s;
      std::string why;
      if (!read_flex_header(m->info.data, m->info.size, ranks.empty() ? 0 : ranks[i], &s, &why))
        return fail("tensor " + std::to_string(i) + ": " + why);
      const size_t want = static_cast<size_t>(numel(s.shape)) * dtype_size(s.dtype);
      if (m->info.size - kFlexHeaderBytes != want)
        return fail(describe(i, s) + ": the header says " + std::to_string(want) + " bytes of data, the memory has " +
                    std::to_string(m->info.size - kFlexHeaderBytes));
      result.push_back(Tensor::wrap(m->info.data + kFlexHeaderBytes, s.shape, s.dtype, m));
    }
    if (out) *out = std::move(result);
    return true;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

GstBuffer* flexible_buffer_from_tensors(const std::vector<Tensor>& tensors) {
  GstBuffer* buf = gst_buffer_new();
  for (const Tensor& t : tensors) {
    const size_t bytes = t.defined() ? t.nbytes() : 0;
    GstMemory* mem = gst_allocator_alloc(nullptr, kFlexHeaderBytes + bytes, nullptr);
    GstMapInfo map;
    if (!mem || !gst_memory_map(mem, &map, GST_MAP_WRITE)) {
      if (mem) gst_memory_unref(mem);
      gst_buffer_unref(buf);
      return nullptr;
    }
    const bool ok = write_flex_header({t.shape(), t.dtype()}, map.data);
    if (ok && bytes) std::memcpy(map.data + kFlexHeaderBytes, t.raw(), bytes);
    gst_memory_unmap(mem, &map);
    if (!ok) {
      gst_memory_unref(mem);
      gst_buffer_unref(buf);
      return nullptr;
    }
    gst_buffer_append_memory(buf, mem);
  }
  return buf;
}

bool tensors_from_buffer(GstBuffer* buf, const std::vector<TensorSpec>& specs, std::vector<Tensor>* out,
                         std::string* error) {
  auto fail = [&](const std::string& msg) {
    if (error) *error = msg;
    return false;
  };
  if (!buf) return fail("no buffer");
  try {
    std::vector<Tensor> result;
    result.reserve(specs.size());
    const guint n_mem = gst_buffer_n_memory(buf);
    if (n_mem == specs.size()) {
      /* The normal case: one memory per tensor, each mapped on its own. */
      for (guint i = 0; i < n_mem; ++i) {
        const size_t want = static_cast<size_t>(checked_nbytes(specs[i].shape, specs[i].dtype, "tensor " + std::to_string(i)));
        auto m = std::make_shared<MappedMemory>();
        GstMemory* mem = gst_buffer_get_memory(buf, i);
        if (!gst_memory_map(mem, &m->info, GST_MAP_READ)) {
          gst_memory_unref(mem);
          return fail(describe(i, specs[i]) + ": cannot map memory");
        }
        m->mem = mem;
        if (m->info.size != want)
          return fail(describe(i, specs[i]) + ": expected " + std::to_string(want) + " bytes, got " +
                      std::to_string(m->info.size));
        result.push_back(Tensor::wrap(m->info.data, specs[i].shape, specs[i].dtype, m));
      }
    } else {
      /* Tensors packed in fewer (or more) memories: map the buffer as a
       * whole (GStreamer merges memories, copying only in that case) and
       * slice it. */
      int64_t total = 0;
      for (size_t i = 0; i < specs.size(); ++i)
        if (!size_add(total, checked_nbytes(specs[i].shape, specs[i].dtype, "tensor " + std::to_string(i)), &total))
          return fail("the tensors' sizes add up to more than 2^63 bytes");
      if (gst_buffer_get_size(buf) != static_cast<gsize>(total))
        return fail("buffer has " + std::to_string(gst_buffer_get_size(buf)) + " bytes in " +
                    std::to_string(n_mem) + " memories, expected " + std::to_string(specs.size()) +
                    " tensors of " + std::to_string(total) + " bytes");
      auto m = std::make_shared<MappedBuffer>();
      if (!gst_buffer_map(buf, &m->info, GST_MAP_READ)) return fail("cannot map buffer");
      m->buf = gst_buffer_ref(buf);
      size_t off = 0;
      for (const auto& s : specs) {
        result.push_back(Tensor::wrap(m->info.data + off, s.shape, s.dtype, m));
        off += static_cast<size_t>(numel(s.shape)) * dtype_size(s.dtype);
      }
    }
    if (out) *out = std::move(result);
    return true;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

GstBuffer* buffer_from_tensors(const std::vector<Tensor>& tensors) {
  GstBuffer* buf = gst_buffer_new();
  for (const Tensor& t : tensors) {
    /* The memory keeps a Tensor copy (a reference to the storage) alive;
     * READONLY: a writer gets a copy (gst_buffer_map WRITE copies), the
     * tensor's storage is never written through the buffer. */
    if (!t.defined() || t.nbytes() == 0) {
      gst_buffer_append_memory(buf, gst_allocator_alloc(nullptr, 0, nullptr));
      continue;
    }
    Tensor* keep = new (std::nothrow) Tensor(t);
    if (!keep) {
      gst_buffer_unref(buf);
      return nullptr;
    }
    const gsize size = t.nbytes();
    GstMemory* mem = gst_memory_new_wrapped(GST_MEMORY_FLAG_READONLY, t.raw(), size, 0, size, keep,
                                            [](gpointer p) { delete static_cast<Tensor*>(p); });
    gst_buffer_append_memory(buf, mem);
  }
  return buf;
}

size_t spec_bytes(const TensorSpec& spec) {
  return static_cast<size_t>(numel(spec.shape)) * dtype_size(spec.dtype);
}

std::string plan_split(GstBuffer* buf, const std::vector<TensorSpec>& specs, guint n, BatchSplit* split) {
  split->frame_specs = specs;
  split->bytes.clear();
  size_t total = 0;
  for (size_t t = 0; t < specs.size(); ++t) {
    const TensorSpec& s = specs[t];
    if (n == 0 || s.shape.empty() || s.shape[0] % n != 0)
      return "Tensor " + std::to_string(t) + " of shape " + shape_str(s.shape) + " cannot be split into " +
             std::to_string(n) + " frames along dim 0";
    split->frame_specs[t].shape[0] /= n;
    split->bytes.push_back(spec_bytes(s));
    total += split->bytes.back();
  }
  if (gst_buffer_get_size(buf) != total)
    return "Buffer has " + std::to_string(gst_buffer_get_size(buf)) + " bytes, the caps say " + std::to_string(total);
  return "";
}

GstBuffer* frame_slices(GstBuffer* batch, const BatchSplit& split, guint i, guint n) {
  GstBuffer* out = gst_buffer_new();
  size_t offset = 0;
  for (const size_t b : split.bytes) {
    const size_t fb = b / n;
    GstBuffer* region = gst_buffer_copy_region(batch, GST_BUFFER_COPY_MEMORY, offset + i * fb, fb);
    gst_buffer_append_memory(out, gst_buffer_get_all_memory(region));  // shares, or merges when split
    gst_buffer_unref(region);
    offset += b;
  }
  return out;
}

GstBuffer* new_tensor_buffer(size_t bytes) {
  GstAllocationParams params;
  gst_allocation_params_init(&params);
  params.align = 63;
  return gst_buffer_new_allocate(nullptr, bytes, &params);
}

}  // namespace jobflow::gst
