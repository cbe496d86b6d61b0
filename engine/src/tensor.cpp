#include "jobflow/tensor.h"

#include "kernel_util.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <type_traits>

namespace jobflow {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int32: return 4;
    case DType::Int64: return 8;
    case DType::Int8: return 1;
    case DType::UInt8: return 1;
    case DType::Bool: return 1;
    case DType::Int16: return 2;
    case DType::UInt16: return 2;
    case DType::UInt32: return 4;
    case DType::UInt64: return 8;
    case DType::Float16: return 2;
    case DType::BFloat16: return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Int8: return "int8";
    case DType::UInt8: return "uint8";
    case DType::Bool: return "bool";
    case DType::Int16: return "int16";
    case DType::UInt16: return "uint16";
    case DType::UInt32: return "uint32";
    case DType::UInt64: return "uint64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
  }
  return "?";
}

DType dtype_from_name(const std::string& s) {
  for (int i = 0; i < kDTypeCount; ++i)
    if (s == dtype_name(static_cast<DType>(i))) return static_cast<DType>(i);
  if (s == "float") return DType::Float32;
  if (s == "double") return DType::Float64;
  if (s == "half") return DType::Float16;
  throw Error("[dtype] unknown dtype '" + s + "'");
}

bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }

namespace {

// Rounds v to the nearest value with `mant` fraction bits and `exp` exponent
// bits (IEEE layout: bias 2^(exp-1) - 1, subnormals, infinity), ties to
// even, and returns its 16 bits. All steps are exact in double except the
// one nearbyint, so a double is rounded once.
uint16_t round_to_bits(double v, int mant, int exp) {
  const uint16_t sign = std::signbit(v) ? uint16_t(1u << 15) : uint16_t(0);
  const uint16_t exp_all = uint16_t(((1u << exp) - 1) << mant);
  if (std::isnan(v)) return uint16_t(sign | exp_all | (1u << (mant - 1)));
  if (std::isinf(v)) return uint16_t(sign | exp_all);
  const double a = std::fabs(v);
  const int bias = (1 << (exp - 1)) - 1;
  const int emin = 1 - bias;  // the smallest normal exponent
  if (a < std::ldexp(1.0, emin)) {  // subnormal or zero: units of 2^(emin - mant)
    const double q = std::nearbyint(std::ldexp(a, mant - emin));
    return uint16_t(sign | static_cast<uint16_t>(q));  // q == 2^mant is the smallest normal
  }
  int e = 0;
  const double f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int E = e - 1;
  double q = std::nearbyint((f * 2 - 1) * std::ldexp(1.0, mant));
  if (q == std::ldexp(1.0, mant)) {
    q = 0;
    ++E;
  }
  if (E > bias) return uint16_t(sign | exp_all);  // overflow (infinity included)
  return uint16_t(sign | (uint16_t(E + bias) << mant) | static_cast<uint16_t>(q));
}

}  // namespace

float16::float16(double v) : bits(round_to_bits(v, 10, 5)) {}
float16::operator float() const {
  const int e = (bits >> 10) & 0x1f, m = bits & 0x3ff;
  float a;
  if (e == 0) a = std::ldexp(static_cast<float>(m), -24);
  else if (e == 31) a = m ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else a = std::ldexp(static_cast<float>(m + 1024), e - 25);
  return (bits & 0x8000) ? -a : a;
}
bfloat16::bfloat16(double v) : bits(round_to_bits(v, 7, 8)) {}
bfloat16::operator float() const {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool is_static(const Shape& s) {
  for (int64_t d : s)
    if (d < 0) return false;
  return true;
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  if (!is_static(s)) return kDynamic;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n))  // shapes can come from untrusted files
      throw Error("[shape] element count of " + shape_str(s) + " overflows 64 bits");
  return n;
}

bool checked_numel(const Shape& s, int64_t* count, std::string* why) {
  int64_t n = 1;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] < 0) {
      if (why) *why = "dimension " + std::to_string(i) + " is " + std::to_string(s[i]);
      return false;
    }
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n)) {
      if (why) *why = "the element count overflows 64 bits";
      return false;
    }
  *count = n;
  return true;
}

bool checked_nbytes(const Shape& s, DType t, int64_t* bytes, std::string* why) {
  int64_t n = 0;
  if (!checked_numel(s, &n, why)) return false;
  if (__builtin_mul_overflow(n, static_cast<int64_t>(dtype_size(t)), bytes)) {
    if (why) *why = "the byte size (" + std::to_string(n) + " elements of " + std::to_string(dtype_size(t)) +
                    " bytes) overflows 64 bits";
    return false;
  }
  return true;
}

int64_t checked_numel(const Shape& s, const std::string& what) {
  int64_t n = 0;
  std::string why;
  if (!checked_numel(s, &n, &why)) throw Error(what + " " + shape_str(s) + ": " + why);
  return n;
}

int64_t checked_nbytes(const Shape& s, DType t, const std::string& what) {
  int64_t n = 0;
  std::string why;
  if (!checked_nbytes(s, t, &n, &why)) throw Error(what + " " + shape_str(s) + " " + dtype_name(t) + ": " + why);
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream o;
  o << "(";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  if (s.size() == 1) o << ",";
  o << ")";
  return o.str();
}

std::shared_ptr<void> aligned_alloc_shared(size_t bytes) {
  if (bytes > std::numeric_limits<size_t>::max() - 63)
    throw Error("[alloc] cannot allocate " + std::to_string(bytes) + " bytes");
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw Error("[alloc] out of memory allocating " + std::to_string(bytes) + " bytes");
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

Tensor::Tensor(Shape shape, DType dtype) : Tensor(uninitialized(std::move(shape), dtype)) {
  std::memset(data_, 0, nbytes());
}

Tensor Tensor::wrap(void* data, Shape shape, DType dtype, std::shared_ptr<void> owner) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.data_ = data;
  t.storage_ = owner ? std::move(owner) : std::shared_ptr<void>(data, [](void*) {});
  return t;
}

void Tensor::check_dtype(DType want, const char* where) const {
  if (!storage_) throw Error(std::string("[Tensor::") + where + "] tensor is empty");
  if (want != dtype_)
    throw Error(std::string("[Tensor::") + where + "] tensor is " + dtype_name(dtype_) + ", asked for " +
                dtype_name(want));
}

Tensor Tensor::uninitialized(Shape shape, DType dtype) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  const int64_t bytes = checked_nbytes(t.shape_, dtype, "[Tensor] cannot allocate");
  t.storage_ = aligned_alloc_shared(static_cast<size_t>(bytes));
  t.data_ = t.storage_.get();
  return t;
}

Tensor Tensor::clone() const {
  if (!storage_) return Tensor();
  Tensor t = uninitialized(shape_, dtype_);  // every byte copied below
  std::memcpy(t.data_, data_, nbytes());
  return t;
}

Tensor Tensor::reshape(Shape s) const {
  if (jobflow::numel(s) != numel())
    throw Error("[Tensor::reshape] cannot reshape " + shape_str(shape_) + " to " + shape_str(s));
  Tensor t = *this;
  t.shape_ = std::move(s);
  return t;
}

// Element access and conversions go through the kernels' storage dispatch
// and cast's conversion rule (kernel_util.h), so astype() and a cast op
// agree element for element.
using kern::convert;
using kern::dispatch_storage;

double Tensor::at(int64_t i) const {
  if (i < 0 || i >= numel()) throw Error("[Tensor::at] index " + std::to_string(i) + " out of range");
  double v = 0;
  dispatch_storage(dtype_, [&](auto z) { v = convert<double>(static_cast<const decltype(z)*>(data_)[i]); });
  return v;
}

Tensor Tensor::astype(DType to) const {
  Tensor out(shape_, to);
  const int64_t n = numel();
  dispatch_storage(dtype_, [&](auto zi) {
    using I = decltype(zi);
    const I* src = static_cast<const I*>(data_);
    dispatch_storage(to, [&](auto zo) {
      using O = decltype(zo);
      O* dst = static_cast<O*>(out.data_);
      for (int64_t i = 0; i < n; ++i) dst[i] = convert<O>(src[i]);
    });
  });
  return out;
}

double Tensor::mean() const {
  const int64_t n = numel();
  if (n == 0) return 0.0;
  double s = 0;
  dispatch_storage(dtype_, [&](auto z) {
    const auto* p = static_cast<const decltype(z)*>(data_);
    for (int64_t i = 0; i < n; ++i) s += convert<double>(p[i]);
  });
  return s / static_cast<double>(n);
}

bool Tensor::equal(const Tensor& o) const {
  if (shape_ != o.shape_ || dtype_ != o.dtype_) return false;
  if (nbytes() == 0) return true;
  return std::memcmp(data_, o.data_, nbytes()) == 0;
}

std::string Tensor::str(int max_items) const {
  std::ostringstream o;
  o << "Tensor" << shape_str(shape_) << " " << dtype_name(dtype_) << " [";
  const int64_t n = numel();
  for (int64_t i = 0; i < n && i < max_items; ++i) o << (i ? ", " : "") << at(i);
  if (n > max_items) o << ", ...";
  o << "]";
  return o.str();
}

}  // namespace jobflow
