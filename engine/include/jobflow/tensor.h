// jobflow/tensor.h — host tensors and dtypes.
//
// A Tensor is a shape, a dtype and a reference-counted buffer (64-byte
// aligned). Copying a Tensor copies the reference, never the data; use
// clone() for a deep copy. This is the type job functions take and return
// (the seeds' numpy.ndarray).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace jobflow {

// Bool is one byte per element holding 0 or 1 (the output of comparisons
// and logical ops, ONNX's bool); arithmetic ops refuse it.
//
// Float16 (IEEE 754 half) and BFloat16 are storage types: tensors, files,
// caps and cast() hold them, and every other op takes them only after a
// cast (ONNX models are legalized at load: such a node runs in float32
// between casts, exact for data movement, max/min and fmod, correctly
// rounded for one arithmetic op). The convolution and matrix kernels'
// own bfloat16 (FunctionConfig precision) is separate and internal.
// (New dtypes go at the end: the values are stored nowhere, but keep
// the order stable for readers of old traces.)
enum class DType : uint8_t {
  Float32, Float64, Int32, Int64, Int8, UInt8, Bool,
  Int16, UInt16, UInt32, UInt64, Float16, BFloat16
};
inline constexpr int kDTypeCount = 13;

// OneFlow spellings (flow.float, flow.int32, ...).
inline constexpr DType Float = DType::Float32;
inline constexpr DType Float32 = DType::Float32;
inline constexpr DType Double = DType::Float64;
inline constexpr DType Float64 = DType::Float64;
inline constexpr DType Int32 = DType::Int32;
inline constexpr DType Int64 = DType::Int64;
inline constexpr DType Int8 = DType::Int8;
inline constexpr DType UInt8 = DType::UInt8;
inline constexpr DType Bool = DType::Bool;
inline constexpr DType Int16 = DType::Int16;
inline constexpr DType UInt16 = DType::UInt16;
inline constexpr DType UInt32 = DType::UInt32;
inline constexpr DType UInt64 = DType::UInt64;
inline constexpr DType Float16 = DType::Float16;
inline constexpr DType BFloat16 = DType::BFloat16;

// The 16 bits of a Float16 or BFloat16 element. Conversions are explicit
// (no arithmetic happens on these by accident): from float or double rounds
// once, to nearest even (a double is not rounded to float first); overflow
// gives infinity, NaN stays NaN (quiet); to float is exact. Subnormals are
// kept both ways.
struct float16 {
  uint16_t bits = 0;
  float16() = default;
  explicit float16(double v);
  explicit operator float() const;
  static float16 from_bits(uint16_t b) { float16 h; h.bits = b; return h; }
};
struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(double v);
  explicit operator float() const;
  static bfloat16 from_bits(uint16_t b) { bfloat16 h; h.bits = b; return h; }
};

size_t dtype_size(DType t);
const char* dtype_name(DType t);            // "float32", "int32", ...
DType dtype_from_name(const std::string& s);  // inverse of dtype_name; throws
bool is_floating(DType t);  // float32 or float64 (the dtypes arithmetic ops compute in)
// float16 or bfloat16: storage only (see DType).
inline bool is_half(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::Int32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<int8_t>() { return DType::Int8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::UInt8; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }
template <> constexpr DType dtype_of<int16_t>() { return DType::Int16; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::UInt16; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::UInt32; }
template <> constexpr DType dtype_of<uint64_t>() { return DType::UInt64; }
template <> constexpr DType dtype_of<float16>() { return DType::Float16; }
template <> constexpr DType dtype_of<bfloat16>() { return DType::BFloat16; }

using Shape = std::vector<int64_t>;
// A dimension not known before a call (a placeholder's dynamic batch, a
// symbolic ONNX dim): shapes of blobs and placeholders may hold it, tensors
// never do. Each call's concrete shapes pick a compiled plan (runtime.h).
inline constexpr int64_t kDynamic = -1;
// Whether every dim of `s` is known (no kDynamic).
bool is_static(const Shape& s);
// The element count; kDynamic when some dim is kDynamic; throws "[shape]
// element count of (a, b) overflows 64 bits".
int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);  // "(100, 1, 28, 28)"; a dynamic dim prints as -1

// Checked size arithmetic, for every size computed from untrusted input
// (ONNX files, IDX headers, checkpoint meta, caps, buffer sizes): a product
// that does not fit is an error, never a wrapped value.
//
// The non-throwing forms return false when a dimension is negative or the
// element count (byte size) exceeds INT64_MAX, with the reason in *why
// ("dimension 1 is -3", "the element count overflows 64 bits", ...).
bool checked_numel(const Shape& s, int64_t* count, std::string* why = nullptr);
bool checked_nbytes(const Shape& s, DType t, int64_t* bytes, std::string* why = nullptr);
// Throwing forms: `what` starts with "[where] " and names the tensor; the
// message is "<what> <shape> <dtype>: <why>", e.g. "[CheckPoint.load] ckpt:
// variable 'w' (1099511627776, 1099511627776) float32: the element count
// overflows 64 bits".
int64_t checked_numel(const Shape& s, const std::string& what);
int64_t checked_nbytes(const Shape& s, DType t, const std::string& what);
// a * b and a + b for sizes (both >= 0), false when the result exceeds INT64_MAX.
inline bool size_mul(int64_t a, int64_t b, int64_t* out) { return a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, out); }
inline bool size_add(int64_t a, int64_t b, int64_t* out) { return a >= 0 && b >= 0 && !__builtin_add_overflow(a, b, out); }

// Base error of the library: every message starts with "[where] ".
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Tensor {
 public:
  Tensor() = default;
  // Allocates a zero-filled tensor.
  Tensor(Shape shape, DType dtype);
  // Allocates without filling: the contents are undefined until written
  // (for a caller that writes every element before anything reads it).
  static Tensor uninitialized(Shape shape, DType dtype);
  // Wraps memory owned by `owner` (no copy). `data` must stay valid while
  // any copy of the Tensor lives.
  static Tensor wrap(void* data, Shape shape, DType dtype, std::shared_ptr<void> owner);
  template <class T>
  static Tensor from(Shape shape, const std::vector<T>& values) {
    Tensor t(std::move(shape), dtype_of<T>());
    if (static_cast<int64_t>(values.size()) != t.numel())
      throw Error("[Tensor::from] " + std::to_string(values.size()) + " values for shape " +
                  shape_str(t.shape()));
    std::copy(values.begin(), values.end(), t.data<T>());
    return t;
  }
  template <class T>
  static Tensor scalar(T v) { return from<T>({}, {v}); }

  bool defined() const { return static_cast<bool>(storage_); }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? i + shape_.size() : i); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return jobflow::numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  void* raw() const { return data_; }
  template <class T> T* data() const {
    check_dtype(dtype_of<T>(), "data");
    return static_cast<T*>(data_);
  }
  template <class T> std::vector<T> to_vector() const {
    const T* p = data<T>();
    return std::vector<T>(p, p + numel());
  }
  template <class T> T item() const {
    if (numel() != 1) throw Error("[Tensor::item] tensor has " + std::to_string(numel()) + " elements");
    return data<T>()[0];
  }

  Tensor clone() const;
  // Same buffer, new shape with the same element count.
  Tensor reshape(Shape s) const;
  // Converts any numeric dtype (like numpy astype).
  Tensor astype(DType t) const;
  // Mean of all elements as double (the seeds' `loss.mean()`).
  double mean() const;
  // Element i (flat index) converted to double; for tests and printing.
  double at(int64_t i) const;
  // Bitwise equality of shape, dtype and bytes.
  bool equal(const Tensor& o) const;
  std::string str(int max_items = 8) const;
  // The shared owner of the buffer (for zero-copy hand-over).
  const std::shared_ptr<void>& storage() const { return storage_; }

 private:
  void check_dtype(DType want, const char* where) const;
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::Float32;
};

// 64-byte aligned allocation, owned by the returned pointer.
std::shared_ptr<void> aligned_alloc_shared(size_t bytes);

}  // namespace jobflow
