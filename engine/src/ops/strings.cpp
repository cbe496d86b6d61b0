// String tensors (jobflow/strings.h): the packed form and the ops that read
// and make it (ONNX StringNormalizer, Cast to and from strings, and the
// vocabulary lookup of TfIdfVectorizer's pool_strings).
//
// Every op here works on the host and is sized by its data (SizedByData):
// a packed output's byte length, and a parsed output's dims, are known only
// from the strings. No gradients.
#include "jobflow/strings.h"

#include <locale.h>
#include <wctype.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <type_traits>

#include "jobflow/ops.h"
#include "ops/packed.h"
#include "ops_internal.h"

namespace jobflow {

// ---------------------------------------------------------------------------
// The packed form.

namespace {

constexpr int64_t kMaxStringsRank = 8;
int64_t padded(int64_t bytes) { return (bytes + 7) / 8 * 8; }

}  // namespace

Tensor pack_strings(const std::vector<std::string>& items, const Shape& shape) {
  if (static_cast<int64_t>(shape.size()) > kMaxStringsRank)
    throw Error("[strings] rank " + std::to_string(shape.size()) + "; string tensors have rank " +
                std::to_string(kMaxStringsRank) + " at most");
  int64_t n = 0;
  if (!is_static(shape) || !checked_numel(shape, &n) || n != static_cast<int64_t>(items.size()))
    throw Error("[strings] " + std::to_string(items.size()) + " strings for shape " + shape_str(shape));
  int64_t chars = 0;
  for (const std::string& s : items) chars += static_cast<int64_t>(s.size());
  const int64_t words = 2 + static_cast<int64_t>(shape.size()) + n;
  Tensor p({words * 8 + padded(chars)}, DType::UInt8);
  std::memset(p.raw(), 0, p.nbytes());
  auto* w = static_cast<int64_t*>(p.raw());
  int64_t at = 0;
  w[at++] = kStringsMagic;
  w[at++] = static_cast<int64_t>(shape.size());
  for (int64_t d : shape) w[at++] = d;
  for (const std::string& s : items) w[at++] = static_cast<int64_t>(s.size());
  char* bytes = static_cast<char*>(p.raw()) + words * 8;
  for (const std::string& s : items) {
    if (!s.empty()) std::memcpy(bytes, s.data(), s.size());
    bytes += s.size();
  }
  return p;
}

bool is_packed_strings(const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::UInt8 || t.ndim() != 1 || t.numel() < 16) return false;
  int64_t magic;
  std::memcpy(&magic, t.raw(), 8);
  return magic == kStringsMagic;
}

UnpackedStrings unpack_strings(const Tensor& p, const std::string& what) {
  const PackedWords w(p, what, "string tensor", kStringsMagic);
  auto bad = [&](const std::string& why) { return w.bad(why); };
  auto word = [&](int64_t i) { return w.word(i); };
  const int64_t size = w.size();
  const char* base = w.bytes();
  UnpackedStrings u;
  const int64_t r = word(1);
  if (r < 0 || r > kMaxStringsRank) throw bad("rank " + std::to_string(r));
  for (int64_t d = 0; d < r; ++d) {
    u.shape.push_back(word(2 + d));
    if (u.shape.back() < 0) throw bad("a negative dim");
  }
  int64_t n = 0;
  if (!checked_numel(u.shape, &n) || n > size / 8) throw bad("shape " + shape_str(u.shape) + " for its size");
  int64_t off = (2 + r + n) * 8;
  if (off > size) throw bad("it ends inside its lengths");
  u.items.reserve(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    const int64_t len = word(2 + r + k);
    if (len < 0 || len > size - off) throw bad("string " + std::to_string(k) + " runs past the end");
    u.items.emplace_back(base + off, static_cast<size_t>(len));
    off += len;
  }
  return u;
}

// ---------------------------------------------------------------------------
// Helpers of the ops.

namespace {

UnpackedStrings read_strings(const char* op, const Tensor& t) {
  try {
    return unpack_strings(t, "input 0");
  } catch (const Error& e) {
    op_error(op, e.what());
  }
}

void expect_packed(const char* op, const TensorSpec& s) {
  if (s.dtype != DType::UInt8 || s.shape.size() != 1)
    op_error(op, "x must be a string tensor (a packed uint8 tensor of rank 1), got " + spec_str(s));
}

TensorSpec packed_spec() { return {{kDynamic}, DType::UInt8}; }

}  // namespace

bool utf8_decode(const std::string& s, std::u32string* out, size_t* bad_at) {
  out->clear();
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int extra;
    char32_t cp;
    if (c < 0x80) extra = 0, cp = c;
    else if ((c & 0xe0) == 0xc0) extra = 1, cp = c & 0x1f;
    else if ((c & 0xf0) == 0xe0) extra = 2, cp = c & 0x0f;
    else if ((c & 0xf8) == 0xf0) extra = 3, cp = c & 0x07;
    else {
      *bad_at = i;
      return false;
    }
    for (int k = 1; k <= extra; ++k) {
      if (i + k >= s.size() || (static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) {
        *bad_at = i;
        return false;
      }
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static const char32_t least[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < least[extra] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) {
      *bad_at = i;
      return false;
    }
    out->push_back(cp);
    i += static_cast<size_t>(extra) + 1;
  }
  return true;
}

std::string utf8_encode(const std::u32string& s) {
  std::string r;
  std::string* out = &r;
  for (char32_t cp : s) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }
  return r;
}

namespace {

// Unicode's default (simple) case mapping, from the C library's C.UTF-8
// locale (glibc has it built in), whatever the process's locale is; without
// it, changing the case of a non-ASCII string is an error (change_case).
locale_t utf8_locale() {
  static const locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
  return loc;
}

char32_t map_case(char32_t cp, str::CaseChange to) {
  if (to == str::CaseChange::None) return cp;
  if (cp < 0x80) {
    if (to == str::CaseChange::Lower && cp >= 'A' && cp <= 'Z') return cp + 32;
    if (to == str::CaseChange::Upper && cp >= 'a' && cp <= 'z') return cp - 32;
    return cp;
  }
  locale_t l = utf8_locale();
  const wint_t w = static_cast<wint_t>(cp);
  return static_cast<char32_t>(to == str::CaseChange::Lower ? towlower_l(w, l) : towupper_l(w, l));
}

// `s` case-mapped; errors name the element `k` of op `op`.
std::string change_case(const char* op, const std::string& s, int64_t k, str::CaseChange to,
                        const char* noun = "string") {
  if (to == str::CaseChange::None) return s;
  bool ascii = true;
  for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  std::string r = s;
  if (ascii) {
    for (char& c : r) c = static_cast<char>(map_case(static_cast<unsigned char>(c), to));
    return r;
  }
  std::u32string cps;
  size_t bad_at = 0;
  if (!utf8_decode(s, &cps, &bad_at))
    op_error(op, std::string(noun) + " " + std::to_string(k) + " is not valid UTF-8 (at byte " +
                     std::to_string(bad_at) + ")");
  if (!utf8_locale())
    op_error(op, std::string(noun) + " " + std::to_string(k) +
                     " is not ASCII, and the C library has no C.UTF-8 locale to change its case with");
  for (char32_t& c : cps) c = map_case(c, to);
  return utf8_encode(cps);
}

const char* case_name(str::CaseChange c) {
  switch (c) {
    case str::CaseChange::None: return "NONE";
    case str::CaseChange::Lower: return "LOWER";
    case str::CaseChange::Upper: return "UPPER";
  }
  return "?";
}

// ---------------------------------------------------------------------------
// The ops.

class StringNormalizer final : public SizedByData {
 public:
  explicit StringNormalizer(str::NormalizeOptions o) : o_(std::move(o)) {
    for (size_t k = 0; k < o_.stopwords.size(); ++k) {
      const std::string& w = o_.stopwords[k];
      stop_.insert(o_.case_sensitive ? w
                                     : change_case("string_normalizer", w, static_cast<int64_t>(k),
                                                   str::CaseChange::Lower, "stopword"));
    }
  }
  OpKind kind() const override { return OpKind::StringNormalizer; }
  Attrs attributes() const override {
    return {{"case_change_action", std::string(case_name(o_.case_change))},
            {"is_case_sensitive", int64_t{o_.case_sensitive}},
            {"locale", o_.locale}};
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("string_normalizer", in, 1);
    expect_packed("string_normalizer", in[0]);
    return {packed_spec()};
  }
  std::vector<Tensor> make(const std::vector<Tensor>& in) const override {
    const char* op = "string_normalizer";
    const UnpackedStrings x = read_strings(op, in[0]);
    const bool two = x.shape.size() == 2;
    if (!(x.shape.size() == 1 || (two && x.shape[0] == 1)))
      op_error(op, "x must be (C,) or (1, C) strings, got " + shape_str(x.shape));
    std::vector<std::string> kept;
    for (size_t k = 0; k < x.items.size(); ++k) {
      const std::string& s = x.items[k];
      if (!stop_.empty()) {
        const std::string key =
            o_.case_sensitive ? s : change_case(op, s, static_cast<int64_t>(k), str::CaseChange::Lower);
        if (stop_.count(key)) continue;
      }
      kept.push_back(change_case(op, s, static_cast<int64_t>(k), o_.case_change));
    }
    // Nothing left: one empty string, as ONNX specifies.
    if (kept.empty()) kept.emplace_back();
    const int64_t c = static_cast<int64_t>(kept.size());
    return {pack_strings(kept, two ? Shape{1, c} : Shape{c})};
  }

 private:
  str::NormalizeOptions o_;
  std::set<std::string> stop_;
};

// The shortest digits that read back as v in its own type ("-d.ddde+XX"):
// float and double by to_chars; the 16-bit floats by the fewest printf
// digits whose value rounds back to the same bits (NumPy's Dragon4 gives
// the same digits for float16: 65504 is "65500.0").
template <class F>
std::string shortest_sci(F v) {
  char buf[64];
  if constexpr (std::is_same_v<F, float> || std::is_same_v<F, double>) {
    auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    return std::string(buf, r.ptr);
  } else {
    const float f = static_cast<float>(v);
    for (int p = 0; p < 9; ++p) {
      std::snprintf(buf, sizeof buf, "%.*e", p, static_cast<double>(f));
      if (F(std::strtod(buf, nullptr)).bits == v.bits) break;
    }
    return buf;
  }
}

// v as NumPy's str() writes a float: shortest round-trip digits, "0.25",
// "100.0", "1e-05", "1.5e+16", "nan", "inf", "-inf".
template <class F>
std::string numpy_str(F v) {
  double dv;  // the value, exactly (every float16, bfloat16 and float is a float)
  if constexpr (std::is_same_v<F, double>) dv = v;
  else dv = static_cast<double>(static_cast<float>(v));
  if (std::isnan(dv)) return "nan";
  if (std::isinf(dv)) return dv < 0 ? "-inf" : "inf";
  const std::string sci = shortest_sci(v);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = !mant.empty() && mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  const double a = std::fabs(dv);
  std::string out;
  if (a == 0 || (a >= 1e-4 && a < 1e16)) {
    const int point = exp + 1;  // digits before the point
    if (point <= 0) {
      out = "0." + std::string(static_cast<size_t>(-point), '0') + digits;
    } else if (point >= static_cast<int>(digits.size())) {
      out = digits + std::string(static_cast<size_t>(point) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(point)) + "." + digits.substr(static_cast<size_t>(point));
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const int ae = exp < 0 ? -exp : exp;
    out += std::string("e") + (exp < 0 ? "-" : "+") + (ae < 10 ? "0" : "") + std::to_string(ae);
  }
  return neg ? "-" + out : out;
}

class StringFormat final : public SizedByData {
 public:
  OpKind kind() const override { return OpKind::StringFormat; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("string_format", in, 1);
    return {packed_spec()};
  }
  std::vector<Tensor> make(const std::vector<Tensor>& in) const override {
    const Tensor& x = in[0];
    const int64_t n = x.numel();
    std::vector<std::string> s(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      std::string& o = s[static_cast<size_t>(i)];
      switch (x.dtype()) {
        case DType::Float32: o = numpy_str(x.data<float>()[i]); break;
        case DType::Float64: o = numpy_str(x.data<double>()[i]); break;
        case DType::Float16: o = numpy_str(x.data<float16>()[i]); break;  // shortest digits of the 16-bit value
        case DType::BFloat16: o = numpy_str(x.data<bfloat16>()[i]); break;
        case DType::Bool: o = x.data<bool>()[i] ? "True" : "False"; break;
        case DType::Int64: o = std::to_string(x.data<int64_t>()[i]); break;
        case DType::UInt64: o = std::to_string(x.data<uint64_t>()[i]); break;
        default: o = std::to_string(static_cast<int64_t>(x.at(i))); break;  // narrower integers: exact
      }
    }
    return {pack_strings(s, x.shape())};
  }
};

// s with surrounding ASCII blanks removed.
std::string trimmed(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

bool iequals(const std::string& a, const char* b) {
  const size_t n = std::strlen(b);
  if (a.size() != n) return false;
  for (size_t i = 0; i < n; ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// A number as double (the whole string), with ONNX's special values.
bool parse_double(const std::string& in, double* v) {
  std::string s = trimmed(in);
  if (s.empty()) return false;
  if (iequals(s, "nan") || iequals(s, "+nan") || iequals(s, "-nan")) {
    *v = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  bool neg = false;
  if (s[0] == '+' || s[0] == '-') {
    neg = s[0] == '-';
    s.erase(0, 1);
  }
  if (iequals(s, "inf") || iequals(s, "infinity")) {
    *v = neg ? -INFINITY : INFINITY;
    return true;
  }
  if (s.empty() || s[0] == '+' || s[0] == '-') return false;
  double d = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), d, std::chars_format::general);
  if (r.ptr != s.data() + s.size()) return false;  // trailing characters, or none of a number
  if (r.ec == std::errc::result_out_of_range) {
    // Past double's range: inf (overflow) or 0 (underflow), as strtod in
    // the C locale gives them.
    static const locale_t c_locale = newlocale(LC_NUMERIC_MASK, "C", static_cast<locale_t>(0));
    d = strtod_l(s.c_str(), nullptr, c_locale);
  } else if (r.ec != std::errc()) {
    return false;
  }
  *v = neg ? -d : d;
  return true;
}

template <class I>
bool parse_integer(const std::string& in, I* v) {
  const std::string s = trimmed(in);
  if (s.size() >= 2 && s[0] == '+' && (s[1] == '+' || s[1] == '-')) return false;  // one sign at most
  const char* b = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
  auto r = std::from_chars(b, s.data() + s.size(), *v);
  if (r.ec == std::errc() && r.ptr == s.data() + s.size()) return true;
  // "100.5", "1e3": a number, truncated toward zero, if in range.
  double d;
  if (!parse_double(s, &d) || !std::isfinite(d)) return false;
  d = std::trunc(d);
  // In range: [-2^digits, 2^digits) signed, [0, 2^digits) unsigned (exact
  // powers of two, unlike max() as a double).
  const double limit = std::ldexp(1.0, std::numeric_limits<I>::digits);
  if (d < (std::numeric_limits<I>::is_signed ? -limit : 0.0) || d >= limit) return false;
  *v = static_cast<I>(d);
  return true;
}

class StringParse final : public SizedByData {
 public:
  StringParse(DType to, int rank) : to_(to), rank_(rank) {}
  OpKind kind() const override { return OpKind::StringParse; }
  Attrs attributes() const override { return {{"dtype", std::string(dtype_name(to_))}, {"rank", int64_t{rank_}}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("string_parse", in, 1);
    expect_packed("string_parse", in[0]);
    return {{Shape(static_cast<size_t>(rank_), kDynamic), to_}};
  }
  std::vector<Tensor> make(const std::vector<Tensor>& in) const override {
    const char* op = "string_parse";
    const UnpackedStrings x = read_strings(op, in[0]);
    if (static_cast<int>(x.shape.size()) != rank_)
      op_error(op, "x is " + shape_str(x.shape) + " strings; the job was defined for rank " + std::to_string(rank_));
    Tensor y(x.shape, to_);
    for (size_t i = 0; i < x.items.size(); ++i) {
      const std::string& s = x.items[i];
      bool ok = true;
      switch (to_) {
        case DType::Float32:
        case DType::Float64:
        case DType::Float16:
        case DType::BFloat16: {
          double d = 0;
          ok = parse_double(s, &d);
          if (to_ == DType::Float32) y.data<float>()[i] = static_cast<float>(d);
          else if (to_ == DType::Float64) y.data<double>()[i] = d;
          else if (to_ == DType::Float16) y.data<float16>()[i] = float16(d);
          else y.data<bfloat16>()[i] = bfloat16(d);
          break;
        }
        case DType::Bool: {
          const std::string t = trimmed(s);
          double d = 0;
          if (iequals(t, "true")) y.data<bool>()[i] = true;
          else if (iequals(t, "false")) y.data<bool>()[i] = false;
          else if ((ok = parse_double(t, &d))) y.data<bool>()[i] = d != 0;
          break;
        }
        case DType::Int8: ok = parse_integer(s, &y.data<int8_t>()[i]); break;
        case DType::Int16: ok = parse_integer(s, &y.data<int16_t>()[i]); break;
        case DType::Int32: ok = parse_integer(s, &y.data<int32_t>()[i]); break;
        case DType::Int64: ok = parse_integer(s, &y.data<int64_t>()[i]); break;
        case DType::UInt8: ok = parse_integer(s, &y.data<uint8_t>()[i]); break;
        case DType::UInt16: ok = parse_integer(s, &y.data<uint16_t>()[i]); break;
        case DType::UInt32: ok = parse_integer(s, &y.data<uint32_t>()[i]); break;
        case DType::UInt64: ok = parse_integer(s, &y.data<uint64_t>()[i]); break;
      }
      if (!ok) {
        const std::string shown = s.size() > 40 ? s.substr(0, 40) + "..." : s;
        op_error(op, "string " + std::to_string(i) + " of " + shape_str(x.shape) + " (\"" + shown + "\") is not " +
                         (is_floating(to_) || is_half(to_) ? std::string("a number")
                                                           : std::string("a number that ") + dtype_name(to_) + " holds"));
      }
    }
    return {y};
  }

 private:
  DType to_;
  int rank_;
};

class StringLookup final : public SizedByData {
 public:
  StringLookup(std::vector<std::string> vocabulary, int rank) : vocab_(std::move(vocabulary)), rank_(rank) {
    for (size_t i = 0; i < vocab_.size(); ++i) index_.emplace(vocab_[i], static_cast<int64_t>(i));
  }
  OpKind kind() const override { return OpKind::StringLookup; }
  Attrs attributes() const override { return {{"vocabulary_size", static_cast<int64_t>(vocab_.size())}, {"rank", int64_t{rank_}}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("string_lookup", in, 1);
    expect_packed("string_lookup", in[0]);
    return {{Shape(static_cast<size_t>(rank_), kDynamic), DType::Int64}};
  }
  std::vector<Tensor> make(const std::vector<Tensor>& in) const override {
    const UnpackedStrings x = read_strings("string_lookup", in[0]);
    if (static_cast<int>(x.shape.size()) != rank_)
      op_error("string_lookup", "x is " + shape_str(x.shape) + " strings; the job was defined for rank " +
                                    std::to_string(rank_));
    Tensor y(x.shape, DType::Int64);
    for (size_t i = 0; i < x.items.size(); ++i) {
      auto it = index_.find(x.items[i]);
      y.data<int64_t>()[i] = it == index_.end() ? -1 : it->second;
    }
    return {y};
  }

 private:
  std::vector<std::string> vocab_;
  std::map<std::string, int64_t> index_;  // first position of each word
  int rank_;
};

}  // namespace

namespace str {

Blob normalize(Blob x, const NormalizeOptions& o, const std::string& name) {
  std::string lang = o.locale.substr(0, o.locale.find_first_of("_-."));
  std::transform(lang.begin(), lang.end(), lang.begin(), [](unsigned char c) { return std::tolower(c); });
  if (o.case_change != CaseChange::None && (lang == "tr" || lang == "az" || lang == "lt"))
    op_error("string_normalizer", "locale \"" + o.locale +
                                      "\" has its own case rules, which Jobflow does not apply (it maps case the "
                                      "same for every locale)");
  return internal::add_node(std::make_shared<StringNormalizer>(o), {x}, name)[0];
}

Blob format(Blob x, const std::string& name) {
  return internal::add_node(std::make_shared<StringFormat>(), {x}, name)[0];
}

Blob parse(Blob x, DType dtype, int rank, const std::string& name) {
  if (rank < 0 || rank > kMaxStringsRank) op_error("string_parse", "rank " + std::to_string(rank));
  return internal::add_node(std::make_shared<StringParse>(dtype, rank), {x}, name)[0];
}

Blob lookup(Blob x, const std::vector<std::string>& vocabulary, int rank, const std::string& name) {
  if (rank < 0 || rank > kMaxStringsRank) op_error("string_lookup", "rank " + std::to_string(rank));
  return internal::add_node(std::make_shared<StringLookup>(vocabulary, rank), {x}, name)[0];
}

}  // namespace str
}  // namespace jobflow
