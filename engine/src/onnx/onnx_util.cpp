// Shared ONNX helpers: dtypes, tensors <-> TensorProto, and the text forms
// stored under the jobflow.* metadata keys (docs/job-files.md).
#include "onnx/onnx_util.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "jobflow/strings.h"

namespace jobflow::onnx_util {

namespace fs = std::filesystem;
using ::onnx::TensorProto;

int32_t to_onnx_dtype(DType t) {
  switch (t) {
    case DType::Float32: return TensorProto::FLOAT;
    case DType::Float64: return TensorProto::DOUBLE;
    case DType::Int32: return TensorProto::INT32;
    case DType::Int64: return TensorProto::INT64;
    case DType::Int8: return TensorProto::INT8;
    case DType::UInt8: return TensorProto::UINT8;
    case DType::Bool: return TensorProto::BOOL;
    case DType::Int16: return TensorProto::INT16;
    case DType::UInt16: return TensorProto::UINT16;
    case DType::UInt32: return TensorProto::UINT32;
    case DType::UInt64: return TensorProto::UINT64;
    case DType::Float16: return TensorProto::FLOAT16;
    case DType::BFloat16: return TensorProto::BFLOAT16;
  }
  throw Error("[onnx] unknown dtype");
}

static const char* onnx_dtype_name(int32_t t) {
  if (TensorProto::DataType_IsValid(t)) {
    static thread_local std::string s;
    s = TensorProto::DataType_Name(static_cast<TensorProto::DataType>(t));
    return s.c_str();
  }
  return "invalid";
}

DType from_onnx_dtype(int32_t t, const std::string& what) {
  switch (t) {
    case TensorProto::FLOAT: return DType::Float32;
    case TensorProto::DOUBLE: return DType::Float64;
    case TensorProto::INT32: return DType::Int32;
    case TensorProto::INT64: return DType::Int64;
    case TensorProto::INT8: return DType::Int8;
    case TensorProto::UINT8: return DType::UInt8;
    case TensorProto::BOOL: return DType::Bool;
    case TensorProto::INT16: return DType::Int16;
    case TensorProto::UINT16: return DType::UInt16;
    case TensorProto::UINT32: return DType::UInt32;
    case TensorProto::UINT64: return DType::UInt64;
    case TensorProto::FLOAT16: return DType::Float16;
    case TensorProto::BFLOAT16: return DType::BFloat16;
    default: break;
  }
  throw Error("[onnx] " + what + ": element type " + onnx_dtype_name(t) + " (" + std::to_string(t) +
              ") is not supported (float16/32/64, bfloat16, int8/16/32/64, uint8/16/32/64, bool)");
}

void tensor_to_proto(const Tensor& t, const std::string& name, TensorProto* out) {
  out->Clear();
  out->set_name(name);
  out->set_data_type(to_onnx_dtype(t.dtype()));
  for (int64_t d : t.shape()) out->add_dims(d);
  // The engine runs on little-endian hosts, which is ONNX's raw_data order.
  out->set_raw_data(static_cast<const char*>(t.raw()), t.nbytes());
}

namespace {

// Element count of `dims`, checked for negatives and overflow, and the byte
// size against `max_bytes`.
int64_t checked_numel(const google::protobuf::RepeatedField<int64_t>& dims, size_t elem, uint64_t max_bytes,
                      const std::string& what) {
  uint64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) throw Error("[onnx] " + what + ": negative dimension " + std::to_string(d));
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d))
      throw Error("[onnx] " + what + ": dimensions overflow");
    n *= static_cast<uint64_t>(d);
  }
  if (n > max_bytes / (elem ? elem : 1))
    throw Error("[onnx] " + what + ": " + std::to_string(n) + " elements of " + std::to_string(elem) +
                " bytes exceed the limit of " + std::to_string(max_bytes) + " bytes");
  return static_cast<int64_t>(n);
}

template <class Src, class Dst>
void copy_field(const google::protobuf::RepeatedField<Src>& f, Dst* dst) {
  for (int i = 0; i < f.size(); ++i) dst[i] = static_cast<Dst>(f.Get(i));
}

uint64_t parse_u64(const std::string& s, const std::string& what, const char* key) {
  uint64_t v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size())
    throw Error("[onnx] " + what + ": external data " + key + " '" + s + "' is not a non-negative integer");
  return v;
}

}  // namespace

Tensor tensor_from_proto(const TensorProto& p, const std::string& base_dir, uint64_t max_bytes,
                         const std::string& what) {
  if (p.data_type() == TensorProto::STRING) {  // packed (jobflow/strings.h)
    if (p.data_location() == TensorProto::EXTERNAL || p.has_raw_data())
      throw Error("[onnx] " + what + ": strings must be in string_data");
    if (p.has_segment()) throw Error("[onnx] " + what + ": segmented tensors are not supported");
    const int64_t n = checked_numel(p.dims(), 8, max_bytes, what);
    if (n != p.string_data_size())
      throw Error("[onnx] " + what + ": " + std::to_string(p.string_data_size()) + " strings for dims of " +
                  std::to_string(n) + " elements");
    uint64_t bytes = static_cast<uint64_t>(n) * 8;
    for (const std::string& s : p.string_data()) bytes += s.size();
    if (bytes > max_bytes)
      throw Error("[onnx] " + what + ": " + std::to_string(bytes) + " bytes of strings exceed the limit of " +
                  std::to_string(max_bytes) + " bytes");
    return pack_strings(std::vector<std::string>(p.string_data().begin(), p.string_data().end()),
                        Shape(p.dims().begin(), p.dims().end()));
  }
  const DType dt = from_onnx_dtype(p.data_type(), what);
  const size_t es = dtype_size(dt);
  const int64_t n = checked_numel(p.dims(), es, max_bytes, what);
  const uint64_t nbytes = static_cast<uint64_t>(n) * es;
  if (p.has_segment()) throw Error("[onnx] " + what + ": segmented tensors are not supported");
  Shape shape(p.dims().begin(), p.dims().end());

  if (p.data_location() == TensorProto::EXTERNAL) {
    std::string location;
    uint64_t offset = 0, length = 0;
    bool has_length = false;
    for (const auto& kv : p.external_data()) {
      if (kv.key() == "location") location = kv.value();
      else if (kv.key() == "offset") offset = parse_u64(kv.value(), what, "offset");
      else if (kv.key() == "length") { length = parse_u64(kv.value(), what, "length"); has_length = true; }
      // "checksum" and unknown keys are ignored, as ONNX does.
    }
    if (location.empty()) throw Error("[onnx] " + what + ": external data without a location");
    if (base_dir.empty())
      throw Error("[onnx] " + what + ": external data '" + location + "' needs the model's folder (load from a file)");
    const fs::path loc(location);
    if (loc.is_absolute() || loc.has_root_name() || loc.has_root_directory())
      throw Error("[onnx] " + what + ": external data location '" + location + "' must be relative to the model's folder");
    for (const auto& part : loc)
      if (part == "..") throw Error("[onnx] " + what + ": external data location '" + location + "' leaves the model's folder");
    std::error_code ec;
    const fs::path base = fs::weakly_canonical(fs::path(base_dir), ec);
    const fs::path full = fs::weakly_canonical(fs::path(base_dir) / loc, ec);
    if (ec) throw Error("[onnx] " + what + ": external data '" + location + "': " + ec.message());
    {
      auto b = base.begin(), f = full.begin();
      for (; b != base.end(); ++b, ++f)
        if (f == full.end() || *b != *f)
          throw Error("[onnx] " + what + ": external data location '" + location + "' leaves the model's folder");
    }
    std::ifstream in(full, std::ios::binary);
    if (!in) throw Error("[onnx] " + what + ": cannot open external data file " + full.string());
    const uint64_t fsize = fs::file_size(full, ec);
    if (ec) throw Error("[onnx] " + what + ": cannot size external data file " + full.string());
    if (!has_length) length = nbytes;
    if (length != nbytes)
      throw Error("[onnx] " + what + ": external data length " + std::to_string(length) + " != " +
                  std::to_string(nbytes) + " bytes of shape " + shape_str(shape));
    if (offset > fsize || length > fsize - offset)
      throw Error("[onnx] " + what + ": external data [" + std::to_string(offset) + ", +" + std::to_string(length) +
                  ") is past the end of " + full.string() + " (" + std::to_string(fsize) + " bytes)");
    Tensor t(shape, dt);
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(nbytes));
    if (!in) throw Error("[onnx] " + what + ": short read from " + full.string());
    if (dt == DType::Bool) {
      auto* b = static_cast<uint8_t*>(t.raw());
      for (uint64_t i = 0; i < nbytes; ++i) b[i] = b[i] != 0;
    }
    return t;
  }

  if (p.has_raw_data()) {
    if (p.raw_data().size() != nbytes)
      throw Error("[onnx] " + what + ": raw_data has " + std::to_string(p.raw_data().size()) + " bytes, shape " +
                  shape_str(shape) + " of " + dtype_name(dt) + " needs " + std::to_string(nbytes));
    Tensor t(shape, dt);
    if (nbytes) std::memcpy(t.raw(), p.raw_data().data(), nbytes);
    if (dt == DType::Bool) {  // any nonzero byte is true; the engine's bools are 0 or 1
      auto* b = static_cast<uint8_t*>(t.raw());
      for (uint64_t i = 0; i < nbytes; ++i) b[i] = b[i] != 0;
    }
    return t;
  }

  // Typed repeated fields.
  auto check_count = [&](int64_t have, const char* field) {
    if (have != n)
      throw Error("[onnx] " + what + ": " + field + " has " + std::to_string(have) + " values, shape " +
                  shape_str(shape) + " needs " + std::to_string(n));
  };
  Tensor t(shape, dt);
  switch (dt) {
    case DType::Float32: check_count(p.float_data_size(), "float_data"); copy_field(p.float_data(), t.data<float>()); break;
    case DType::Float64: check_count(p.double_data_size(), "double_data"); copy_field(p.double_data(), t.data<double>()); break;
    case DType::Int64: check_count(p.int64_data_size(), "int64_data"); copy_field(p.int64_data(), t.data<int64_t>()); break;
    case DType::Int32: check_count(p.int32_data_size(), "int32_data"); copy_field(p.int32_data(), t.data<int32_t>()); break;
    case DType::Int8: check_count(p.int32_data_size(), "int32_data"); copy_field(p.int32_data(), t.data<int8_t>()); break;
    case DType::UInt8: check_count(p.int32_data_size(), "int32_data"); copy_field(p.int32_data(), t.data<uint8_t>()); break;
    case DType::Bool:
      check_count(p.int32_data_size(), "int32_data");
      for (int64_t i = 0; i < n; ++i) t.data<bool>()[i] = p.int32_data(static_cast<int>(i)) != 0;
      break;
    case DType::Int16: check_count(p.int32_data_size(), "int32_data"); copy_field(p.int32_data(), t.data<int16_t>()); break;
    case DType::UInt16: check_count(p.int32_data_size(), "int32_data"); copy_field(p.int32_data(), t.data<uint16_t>()); break;
    // ONNX keeps the 16-bit floats' bits in int32_data.
    case DType::Float16: check_count(p.int32_data_size(), "int32_data"); copy_field(p.int32_data(), static_cast<uint16_t*>(t.raw())); break;
    case DType::BFloat16: check_count(p.int32_data_size(), "int32_data"); copy_field(p.int32_data(), static_cast<uint16_t*>(t.raw())); break;
    case DType::UInt32: check_count(p.uint64_data_size(), "uint64_data"); copy_field(p.uint64_data(), t.data<uint32_t>()); break;
    case DType::UInt64: check_count(p.uint64_data_size(), "uint64_data"); copy_field(p.uint64_data(), t.data<uint64_t>()); break;
  }
  return t;
}

// ---------------------------------------------------------------- structures

namespace {

bool plain_key_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '.';
}

void write_key(std::string& o, const std::string& k) {
  bool plain = !k.empty();
  for (char c : k) plain = plain && plain_key_char(c);
  if (plain) { o += k; return; }
  o += '"';
  for (char c : k) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  o += '"';
}

void write_structure(std::string& o, const Structure& s, int& next) {
  using K = Structure::Kind;
  switch (s.kind) {
    case K::None: o += "None"; return;
    case K::Leaf:
      o += s.leaf == Structure::Leaf::Numpy ? "Numpy" : s.leaf == Structure::Leaf::ListNumpy ? "ListNumpy" : "ListListNumpy";
      // Leaf indices are implied by order; an index out of order is written.
      if (s.index != next) {
        o += '#';
        o += std::to_string(s.index);
      }
      next = s.index + 1;
      return;
    case K::Tuple:
    case K::List:
      o += s.kind == K::Tuple ? '(' : '[';
      for (size_t i = 0; i < s.children.size(); ++i) {
        if (i) o += ',';
        write_structure(o, s.children[i], next);
      }
      o += s.kind == K::Tuple ? ')' : ']';
      return;
    case K::Dict:
      o += '{';
      for (size_t i = 0; i < s.children.size(); ++i) {
        if (i) o += ',';
        write_key(o, i < s.keys.size() ? s.keys[i] : std::string());
        o += ':';
        write_structure(o, s.children[i], next);
      }
      o += '}';
      return;
  }
}

struct StructureParser {
  const std::string& t;
  size_t p = 0;
  int next = 0;
  int depth = 0;

  [[noreturn]] void fail(const std::string& why) const {
    throw Error("[onnx] bad structure text '" + t + "' at " + std::to_string(p) + ": " + why);
  }
  bool eat(char c) {
    if (p < t.size() && t[p] == c) { ++p; return true; }
    return false;
  }
  bool eat_word(const char* w) {
    const size_t n = std::strlen(w);
    if (t.compare(p, n, w) == 0) {
      // Not a prefix of a longer word.
      if (p + n < t.size() && (std::isalnum(static_cast<unsigned char>(t[p + n])) || t[p + n] == '_')) return false;
      p += n;
      return true;
    }
    return false;
  }
  std::string key() {
    std::string k;
    if (eat('"')) {
      while (true) {
        if (p >= t.size()) fail("unterminated key");
        char c = t[p++];
        if (c == '"') break;
        if (c == '\\') {
          if (p >= t.size()) fail("unterminated key");
          c = t[p++];
        }
        k += c;
      }
      return k;
    }
    while (p < t.size() && plain_key_char(t[p])) k += t[p++];
    if (k.empty()) fail("expected a key");
    return k;
  }
  Structure parse() {
    if (++depth > 256) fail("nested too deeply");
    Structure s;
    using K = Structure::Kind;
    if (eat('(')) {
      s.kind = K::Tuple;
      items(s, ')');
    } else if (eat('[')) {
      s.kind = K::List;
      items(s, ']');
    } else if (eat('{')) {
      s.kind = K::Dict;
      if (!eat('}')) {
        do {
          s.keys.push_back(key());
          if (!eat(':')) fail("expected ':'");
          s.children.push_back(parse());
        } while (eat(','));
        if (!eat('}')) fail("expected '}' or ','");
      }
    } else if (eat_word("None")) {
      s.kind = K::None;
    } else {
      s.kind = K::Leaf;
      if (eat_word("ListListNumpy")) s.leaf = Structure::Leaf::ListListNumpy;
      else if (eat_word("ListNumpy")) s.leaf = Structure::Leaf::ListNumpy;
      else if (eat_word("Numpy")) s.leaf = Structure::Leaf::Numpy;
      else fail("expected Numpy, ListNumpy, ListListNumpy, None, '(', '[' or '{'");
      if (eat('#')) {
        int v = 0;
        auto r = std::from_chars(t.data() + p, t.data() + t.size(), v);
        if (r.ec != std::errc() || v < 0) fail("bad leaf index");
        p = static_cast<size_t>(r.ptr - t.data());
        s.index = v;
      } else {
        s.index = next;
      }
      next = s.index + 1;
    }
    --depth;
    return s;
  }
  void items(Structure& s, char close) {
    if (eat(close)) return;
    do s.children.push_back(parse());
    while (eat(','));
    if (!eat(close)) fail(std::string("expected '") + close + "' or ','");
  }
};

}  // namespace

std::string structure_to_text(const Structure& s) {
  std::string o;
  int next = 0;
  write_structure(o, s, next);
  return o;
}

Structure structure_from_text(const std::string& text) {
  StructureParser ps{text};
  Structure s = ps.parse();
  if (ps.p != text.size()) ps.fail("trailing text");
  return s;
}

// ---------------------------------------------------------------- numbers

std::string number_to_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest form that round-trips
  return std::string(buf, r.ptr);
}

double number_from_text(const std::string& s, const std::string& what) {
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  double v = 0;
  const char* b = s.data();
  if (!s.empty() && s[0] == '+') ++b;
  auto r = std::from_chars(b, s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size())
    throw Error("[onnx] " + what + ": '" + s + "' is not a number");
  return v;
}

namespace {

int64_t int_from_text(const std::string& s, const std::string& what) {
  int64_t v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size())
    throw Error("[onnx] " + what + ": '" + s + "' is not an integer");
  return v;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t b = 0;
  while (true) {
    size_t e = s.find(sep, b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return out;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// "k=v,k=v" -> ordered map; `what` names the text for errors.
std::map<std::string, std::string> kv_list(const std::string& s, char sep, const std::string& what) {
  std::map<std::string, std::string> m;
  if (trim(s).empty()) return m;
  for (const auto& item : split(s, sep)) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw Error("[onnx] " + what + ": expected key=value, got '" + item + "'");
    const std::string k = trim(item.substr(0, eq));
    if (m.count(k)) throw Error("[onnx] " + what + ": '" + k + "' given twice");
    m[k] = trim(item.substr(eq + 1));
  }
  return m;
}

std::string take(std::map<std::string, std::string>& m, const std::string& k) {
  auto it = m.find(k);
  if (it == m.end()) return {};
  std::string v = it->second;
  m.erase(it);
  return v;
}

void no_more(const std::map<std::string, std::string>& m, const std::string& what, const std::string& allowed) {
  if (!m.empty()) throw Error("[onnx] " + what + ": unknown parameter '" + m.begin()->first + "' (allowed: " + allowed + ")");
}

}  // namespace

// ---------------------------------------------------------------- schedules

static std::string schedule_impl_text(const optimizer::LrScheduler& s) {
  const std::string kind = s.kind();
  const auto ps = s.params();
  auto get = [&](const char* k) -> const std::vector<double>& {
    for (auto& [n, v] : ps)
      if (n == k) return v;
    throw Error("[onnx] schedule " + s.str() + " has no parameter " + k);
  };
  if (kind == "piecewise_constant") {
    std::string o = "piecewise_constant:boundaries=";
    const auto& b = get("boundaries");
    for (size_t i = 0; i < b.size(); ++i) {
      if (i) o += ',';
      o += std::to_string(static_cast<int64_t>(b[i]));
    }
    o += ";values=";
    const auto& v = get("values");
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) o += ',';
      o += number_to_text(v[i]);
    }
    return o;
  }
  if (kind == "cosine")
    return "cosine:base_lr=" + number_to_text(get("base_lr").at(0)) +
           ",decay_steps=" + std::to_string(static_cast<int64_t>(get("decay_steps").at(0))) +
           ",alpha=" + number_to_text(get("alpha").at(0));
  if (kind == "linear_warmup") {
    auto inner = s.inner();
    if (!inner) throw Error("[onnx] schedule " + s.str() + " wraps no schedule");
    return "linear_warmup:steps=" + std::to_string(static_cast<int64_t>(get("steps").at(0))) +
           ",start=" + number_to_text(get("start").at(0)) + ";then=" + schedule_impl_text(*inner);
  }
  throw Error("[onnx] the learning-rate schedule " + s.str() + " has no job-file form");
}

std::string schedule_to_text(const optimizer::Scheduler& s) {
  if (!s.impl()) return "none";
  return schedule_impl_text(*s.impl());
}

optimizer::Scheduler schedule_from_text(const std::string& text) {
  const std::string what = "schedule '" + text + "'";
  const auto colon = text.find(':');
  const std::string kind = trim(text.substr(0, colon));
  const std::string rest = colon == std::string::npos ? "" : text.substr(colon + 1);
  if (kind == "none" && colon == std::string::npos) return optimizer::Scheduler();
  if (kind == "piecewise_constant") {
    auto m = kv_list(rest, ';', what);
    const std::string b = take(m, "boundaries"), v = take(m, "values");
    no_more(m, what, "boundaries, values");
    std::vector<int64_t> bs;
    std::vector<double> vs;
    if (!b.empty())
      for (auto& x : split(b, ',')) bs.push_back(int_from_text(trim(x), what));
    if (v.empty()) throw Error("[onnx] " + what + ": needs values=");
    for (auto& x : split(v, ',')) vs.push_back(number_from_text(trim(x), what));
    return optimizer::PiecewiseConstantScheduler(std::move(bs), std::move(vs));
  }
  if (kind == "cosine") {
    auto m = kv_list(rest, ',', what);
    const std::string base = take(m, "base_lr"), steps = take(m, "decay_steps"), alpha = take(m, "alpha");
    no_more(m, what, "base_lr, decay_steps, alpha");
    if (base.empty() || steps.empty()) throw Error("[onnx] " + what + ": needs base_lr= and decay_steps=");
    return optimizer::CosineScheduler(number_from_text(base, what), int_from_text(steps, what),
                                      alpha.empty() ? 0.0 : number_from_text(alpha, what));
  }
  if (kind == "linear_warmup") {
    const auto then = rest.find(";then=");
    if (then == std::string::npos) throw Error("[onnx] " + what + ": needs ;then=<schedule>");
    auto m = kv_list(rest.substr(0, then), ',', what);
    const std::string steps = take(m, "steps"), start = take(m, "start");
    no_more(m, what, "steps, start, then");
    if (steps.empty()) throw Error("[onnx] " + what + ": needs steps=");
    return optimizer::LinearWarmupScheduler(schedule_from_text(rest.substr(then + 6)), int_from_text(steps, what),
                                            start.empty() ? 0.0 : number_from_text(start, what));
  }
  throw Error("[onnx] " + what + ": unknown schedule '" + kind +
              "' (piecewise_constant, cosine, linear_warmup, none)");
}

// ---------------------------------------------------------------- optimizers

std::string optimizer_to_text(const optimizer::Optimizer& o) {
  if (auto* s = dynamic_cast<const optimizer::SGD*>(&o)) return "sgd:momentum=" + number_to_text(s->momentum());
  if (auto* a = dynamic_cast<const optimizer::Adam*>(&o))
    return "adam:beta1=" + number_to_text(a->beta1()) + ",beta2=" + number_to_text(a->beta2()) +
           ",epsilon=" + number_to_text(a->epsilon());
  throw Error("[onnx] the optimizer " + o.str() + " has no job-file form");
}

std::shared_ptr<optimizer::Optimizer> optimizer_from_text(const std::string& text, optimizer::Scheduler schedule) {
  const std::string what = "optimizer '" + text + "'";
  const auto colon = text.find(':');
  const std::string kind = trim(text.substr(0, colon));
  auto m = kv_list(colon == std::string::npos ? "" : text.substr(colon + 1), ',', what);
  // "lr=" (LoadOptions.optimizer) is a constant schedule; it replaces an
  // empty `schedule` and must not be combined with a given one.
  const std::string lr = take(m, "lr");
  if (!lr.empty()) {
    if (schedule.impl()) throw Error("[onnx] " + what + ": lr= given together with a schedule");
    schedule = optimizer::PiecewiseConstantScheduler({}, {number_from_text(lr, what)});
  }
  if (kind == "sgd") {
    const std::string mom = take(m, "momentum");
    no_more(m, what, "lr, momentum");
    // OneFlow's flow.optimizer.SGD: momentum 0.9 unless given.
    return std::make_shared<optimizer::SGD>(std::move(schedule), mom.empty() ? 0.9 : number_from_text(mom, what));
  }
  if (kind == "adam") {
    std::string b1 = take(m, "beta1"), b2 = take(m, "beta2"), eps = take(m, "epsilon");
    const std::string eps2 = take(m, "eps");
    if (!eps2.empty()) {
      if (!eps.empty()) throw Error("[onnx] " + what + ": eps and epsilon both given");
      eps = eps2;
    }
    no_more(m, what, "lr, beta1, beta2, epsilon");
    return std::make_shared<optimizer::Adam>(std::move(schedule), b1.empty() ? 0.9 : number_from_text(b1, what),
                                             b2.empty() ? 0.999 : number_from_text(b2, what),
                                             eps.empty() ? 1e-8 : number_from_text(eps, what));
  }
  throw Error("[onnx] " + what + ": unknown optimizer '" + kind + "' (sgd, adam)");
}

}  // namespace jobflow::onnx_util
