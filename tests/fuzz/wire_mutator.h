// Protobuf-wire-format mutations for fuzzing the ONNX loader (used by
// driver.cpp and, with -DJOBFLOW_FUZZ_CUSTOM_MUTATOR, by fuzz_onnx_load.cpp's
// LLVMFuzzerCustomMutator).
//
// A model is parsed into a tree of fields without the schema: a
// length-delimited payload that itself parses as a message becomes a
// sub-message (names and raw_data that happen to parse too are harmless).
// Mutations change the tree and serialize it again with correct lengths, so
// the result still parses and reaches the loader's checks behind the parser:
// varint values set to edge values (dims, data types, attribute ints, opset),
// float/double bit patterns, fields deleted, duplicated, swapped or copied
// from elsewhere (another model), strings replaced with names from a
// dictionary (op types, tensor names, metadata keys), and lengths tampered
// with (a length varint that disagrees with its payload). Byte-level
// mutations (bit flips, byte sets, truncations, chunk duplication, splices)
// work on the serialized bytes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "jobflow/onnx.h"

namespace jobflow_fuzz::wire {

struct Msg;

struct Field {
  uint32_t num = 0;
  uint8_t wt = 0;                        // 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32
  uint64_t v = 0;                        // wt 0, 1, 5
  std::string bytes;                     // wt 2 when not a message
  std::unique_ptr<Msg> sub;              // wt 2 parsed as a message
  std::optional<uint64_t> len_override;  // wt 2: the length written instead of the real one

  Field() = default;
  Field(const Field& o);
  Field& operator=(const Field& o);
  Field(Field&&) = default;
  Field& operator=(Field&&) = default;
};

struct Msg {
  std::vector<Field> fields;
};

inline Field::Field(const Field& o)
    : num(o.num), wt(o.wt), v(o.v), bytes(o.bytes), sub(o.sub ? std::make_unique<Msg>(*o.sub) : nullptr),
      len_override(o.len_override) {}
inline Field& Field::operator=(const Field& o) {
  if (this != &o) {
    Field t(o);
    *this = std::move(t);
  }
  return *this;
}

// ------------------------------------------------------------------ parsing

inline bool read_varint(const uint8_t*& p, const uint8_t* end, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    const uint8_t b = *p++;
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

inline bool parse_range(const uint8_t* p, const uint8_t* end, Msg& m, int depth) {
  if (depth > 24) return false;
  while (p < end) {
    uint64_t key;
    if (!read_varint(p, end, key)) return false;
    Field f;
    f.num = static_cast<uint32_t>(key >> 3);
    f.wt = static_cast<uint8_t>(key & 7);
    if (f.num == 0 || (key >> 3) > (uint64_t(1) << 29)) return false;
    switch (f.wt) {
      case 0:
        if (!read_varint(p, end, f.v)) return false;
        break;
      case 1:
        if (end - p < 8) return false;
        std::memcpy(&f.v, p, 8);
        p += 8;
        break;
      case 5: {
        if (end - p < 4) return false;
        uint32_t x;
        std::memcpy(&x, p, 4);
        f.v = x;
        p += 4;
        break;
      }
      case 2: {
        uint64_t len;
        if (!read_varint(p, end, len) || len > static_cast<uint64_t>(end - p)) return false;
        auto sub = std::make_unique<Msg>();
        if (len > 0 && parse_range(p, p + len, *sub, depth + 1)) f.sub = std::move(sub);
        else f.bytes.assign(reinterpret_cast<const char*>(p), len);
        p += len;
        break;
      }
      default:
        return false;  // groups (3, 4) do not occur in ONNX
    }
    m.fields.push_back(std::move(f));
  }
  return true;
}

inline bool parse(const std::string& s, Msg& m) {
  m.fields.clear();
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  return !s.empty() && parse_range(p, p + s.size(), m, 0);
}

// ------------------------------------------------------------ serializing

inline void put_varint(std::string& o, uint64_t v) {
  while (v >= 0x80) {
    o += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  o += static_cast<char>(v);
}

inline void serialize_to(const Msg& m, std::string& o) {
  for (const Field& f : m.fields) {
    put_varint(o, (uint64_t(f.num) << 3) | f.wt);
    switch (f.wt) {
      case 0: put_varint(o, f.v); break;
      case 1: o.append(reinterpret_cast<const char*>(&f.v), 8); break;
      case 5: {
        const uint32_t x = static_cast<uint32_t>(f.v);
        o.append(reinterpret_cast<const char*>(&x), 4);
        break;
      }
      case 2: {
        std::string payload;
        if (f.sub) serialize_to(*f.sub, payload);
        else payload = f.bytes;
        put_varint(o, f.len_override ? *f.len_override : payload.size());
        o += payload;
        break;
      }
    }
  }
}

inline std::string serialize(const Msg& m) {
  std::string o;
  serialize_to(m, o);
  return o;
}

// ------------------------------------------------------------- dictionary

// Short strings to put where strings were: op types (every supported one and
// a few that are not), names seen in the corpus, metadata keys and values.
struct Dictionary {
  std::vector<std::string> words;
  std::set<std::string> seen;
  void add(const std::string& w) {
    if (words.size() >= 8192 || !seen.insert(w).second) return;
    words.push_back(w);
  }
};

inline Dictionary default_dictionary() {
  Dictionary d;
  for (auto& op : jobflow::onnx::supported_ops()) d.add(op);
  for (const char* w : {"", "If", "Loop", "Scan", "NonMaxSuppression", "ai.onnx", "ai.onnx.ml", "com.microsoft",
                        "jobflow.version", "jobflow.job_type", "train", "predict", "jobflow.loss",
                        "jobflow.optimizer", "sgd:lr=0.1,momentum=0.9", "adam:lr=0.001", "jobflow.schedule",
                        "jobflow.input_structure", "jobflow.output_structure", "(Numpy,Numpy)", "((Numpy,[Numpy]))",
                        "jobflow.trainable", "jobflow.optimizer_state", "jobflow.step", "-1", "99999999999999999999",
                        "jobflow.seed", "jobflow.callback", "1", "location", "offset", "length", "..", "/etc/passwd",
                        "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "none", "mean", "sum", "axes", "axis",
                        "kernel_shape", "pads", "strides", "dilations", "group", "perm", "shape", "value", "to"})
    d.add(w);
  d.add(std::string(300, 'A'));
  d.add(std::string(1, '\0') + "x");
  return d;
}

inline bool is_word(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (unsigned char c : s)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

inline void learn(const Msg& m, Dictionary& d) {
  for (const Field& f : m.fields) {
    if (f.wt != 2) continue;
    if (f.sub) learn(*f.sub, d);
    else if (is_word(f.bytes)) d.add(f.bytes);
  }
}

// -------------------------------------------------------------- mutations

using Rng = std::mt19937_64;

inline uint64_t pick(Rng& r, uint64_t n) { return n ? r() % n : 0; }

inline uint64_t interesting_varint(Rng& r, uint64_t old) {
  static const uint64_t vals[] = {0,
                                  1,
                                  2,
                                  3,
                                  7,
                                  8,
                                  9,
                                  16,
                                  255,
                                  256,
                                  1023,
                                  65535,
                                  65536,
                                  0x7fffffffull,
                                  0x80000000ull,
                                  0xffffffffull,
                                  0x100000000ull,
                                  uint64_t(1) << 40,
                                  uint64_t(1) << 62,
                                  0x7fffffffffffffffull,
                                  0x8000000000000000ull,
                                  ~uint64_t(0),                  // -1 as int64
                                  ~uint64_t(0) - 1,              // -2
                                  uint64_t(-9),                  // -9 (axis)
                                  uint64_t(-2147483648ll)};      // INT32_MIN
  switch (pick(r, 4)) {
    case 0: return old + 1;
    case 1: return old - 1;
    case 2: return pick(r, 32);
    default: return vals[pick(r, sizeof(vals) / sizeof(vals[0]))];
  }
}

inline uint64_t interesting_fixed(Rng& r, uint8_t wt) {
  if (wt == 5) {
    static const uint32_t f[] = {0x00000000, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000, 0xff800000,
                                 0x7fc00000, 0x7f7fffff, 0x00000001, 0x4f000000, 0xcf000000, 0x7fffffff};
    return f[pick(r, sizeof(f) / sizeof(f[0]))];
  }
  static const uint64_t d[] = {0, 0x8000000000000000ull, 0x3ff0000000000000ull, 0x7ff0000000000000ull,
                               0x7ff8000000000000ull, 0x7fefffffffffffffull, 1, ~uint64_t(0)};
  return d[pick(r, sizeof(d) / sizeof(d[0]))];
}

struct Slot {
  Msg* msg;
  size_t index;
  int depth;
};

inline void collect(Msg& m, std::vector<Slot>& out, int depth = 0) {
  for (size_t i = 0; i < m.fields.size(); ++i) {
    out.push_back({&m, i, depth});
    if (m.fields[i].sub) collect(*m.fields[i].sub, out, depth + 1);
  }
}

// One structural mutation of `m`; `other` (may be null or `m` itself) is a
// donor of fields. Appends a short description to `what`.
inline void mutate_tree(Msg& m, const Msg* other, const Dictionary& dict, Rng& r, std::string& what) {
  std::vector<Slot> slots;
  collect(m, slots);
  if (slots.empty()) {
    Field f;
    f.num = 1 + static_cast<uint32_t>(pick(r, 20));
    f.wt = 0;
    f.v = interesting_varint(r, 0);
    m.fields.push_back(f);
    what += " add-field";
    return;
  }
  const Slot s = slots[pick(r, slots.size())];
  Field& f = s.msg->fields[s.index];
  const std::string at = "#" + std::to_string(f.num) + "@" + std::to_string(s.depth);
  switch (pick(r, 10)) {
    case 0:
    case 1:
    case 2: {  // values: the commonest useful change (dims, types, attributes)
      // Prefer a varint field: pick again among varints if this is not one.
      std::vector<Slot> ints;
      for (auto& x : slots)
        if (x.msg->fields[x.index].wt == 0) ints.push_back(x);
      if (!ints.empty()) {
        const Slot t = ints[pick(r, ints.size())];
        Field& g = t.msg->fields[t.index];
        g.v = interesting_varint(r, g.v);
        what += " varint#" + std::to_string(g.num) + "@" + std::to_string(t.depth) + "=" + std::to_string(g.v);
      } else if (f.wt == 1 || f.wt == 5) {
        f.v = interesting_fixed(r, f.wt);
        what += " fixed" + at;
      }
      break;
    }
    case 3:
      if (f.wt == 1 || f.wt == 5) {
        f.v = interesting_fixed(r, f.wt);
        what += " fixed" + at;
      } else if (f.wt == 2 && !f.sub && !dict.words.empty()) {
        f.bytes = dict.words[pick(r, dict.words.size())];
        what += " string" + at + "='" + f.bytes.substr(0, 32) + "'";
      } else {
        f.v = interesting_varint(r, f.v);
        what += " varint" + at;
      }
      break;
    case 4: {  // strings: rename (rewires graphs), retype ops, metadata
      std::vector<Slot> strs;
      for (auto& x : slots) {
        const Field& g = x.msg->fields[x.index];
        if (g.wt == 2 && !g.sub && g.bytes.size() <= 64) strs.push_back(x);
      }
      if (!strs.empty() && !dict.words.empty()) {
        const Slot t = strs[pick(r, strs.size())];
        Field& g = t.msg->fields[t.index];
        g.bytes = dict.words[pick(r, dict.words.size())];
        what += " string#" + std::to_string(g.num) + "@" + std::to_string(t.depth) + "='" + g.bytes.substr(0, 32) + "'";
      }
      break;
    }
    case 5:
      s.msg->fields.erase(s.msg->fields.begin() + static_cast<std::ptrdiff_t>(s.index));
      what += " delete" + at;
      break;
    case 6: {
      Field copy = f;
      const size_t to = pick(r, s.msg->fields.size() + 1);
      s.msg->fields.insert(s.msg->fields.begin() + static_cast<std::ptrdiff_t>(to), std::move(copy));
      what += " duplicate" + at;
      break;
    }
    case 7: {
      const size_t j = pick(r, s.msg->fields.size());
      std::swap(s.msg->fields[s.index], s.msg->fields[j]);
      what += " swap" + at;
      break;
    }
    case 8: {  // a field from the donor (or from elsewhere in this model)
      const Msg* donor = other ? other : &m;
      std::vector<Slot> ds;
      collect(const_cast<Msg&>(*donor), ds);
      if (!ds.empty()) {
        const Slot d = ds[pick(r, ds.size())];
        Field copy = d.msg->fields[d.index];
        const size_t to = pick(r, s.msg->fields.size() + 1);
        what += " splice#" + std::to_string(copy.num) + "->" + at;
        s.msg->fields.insert(s.msg->fields.begin() + static_cast<std::ptrdiff_t>(to), std::move(copy));
      }
      break;
    }
    case 9: {  // length tampering
      std::vector<Slot> lens;
      for (auto& x : slots)
        if (x.msg->fields[x.index].wt == 2) lens.push_back(x);
      if (!lens.empty()) {
        const Slot t = lens[pick(r, lens.size())];
        Field& g = t.msg->fields[t.index];
        const uint64_t real = g.sub ? serialize(*g.sub).size() : g.bytes.size();
        static const uint64_t vals[] = {0, 0x7fffffffull, 0x80000000ull, 0xffffffffull, 0x100000000ull,
                                        ~uint64_t(0), uint64_t(1) << 62};
        switch (pick(r, 4)) {
          case 0: g.len_override = real + 1 + pick(r, 8); break;
          case 1: g.len_override = real ? real - 1 - pick(r, std::min<uint64_t>(real, 8)) : 1; break;
          case 2: g.len_override = real * 2 + 1; break;
          default: g.len_override = vals[pick(r, sizeof(vals) / sizeof(vals[0]))];
        }
        what += " length#" + std::to_string(g.num) + "@" + std::to_string(t.depth) + "=" +
                std::to_string(*g.len_override) + "(real " + std::to_string(real) + ")";
      }
      break;
    }
  }
}

// One byte-level mutation of `s`; `other` is a donor for splices.
inline void mutate_bytes(std::string& s, const std::string& other, Rng& r, std::string& what) {
  static const uint8_t bytes[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0x08, 0x0a, 0x12, 0x1a, 0x22};
  switch (s.empty() ? 4 : pick(r, 7)) {
    case 0: {
      const size_t i = pick(r, s.size());
      s[i] = static_cast<char>(s[i] ^ (1u << pick(r, 8)));
      what += " bitflip@" + std::to_string(i);
      break;
    }
    case 1: {
      const size_t i = pick(r, s.size());
      s[i] = static_cast<char>(pick(r, 2) ? bytes[pick(r, sizeof(bytes))] : pick(r, 256));
      what += " byte@" + std::to_string(i);
      break;
    }
    case 2: {
      const size_t n = pick(r, s.size());
      s.resize(n);
      what += " truncate@" + std::to_string(n);
      break;
    }
    case 3: {  // duplicate a chunk somewhere
      const size_t a = pick(r, s.size()), len = 1 + pick(r, std::min<size_t>(s.size() - a, 4096));
      const std::string chunk = s.substr(a, len);
      const size_t b = pick(r, s.size() + 1);
      s.insert(b, chunk);
      what += " dup[" + std::to_string(a) + "+" + std::to_string(len) + "]@" + std::to_string(b);
      break;
    }
    case 4: {  // splice: a prefix of this, a suffix of the donor
      if (other.empty()) break;
      const size_t a = pick(r, s.size() + 1), b = pick(r, other.size());
      s = s.substr(0, a) + other.substr(b);
      what += " splice@" + std::to_string(a) + "<-" + std::to_string(b);
      break;
    }
    case 5: {  // insert a chunk of the donor
      if (other.empty()) break;
      const size_t b = pick(r, other.size()), len = 1 + pick(r, std::min<size_t>(other.size() - b, 4096));
      const size_t a = pick(r, s.size() + 1);
      s.insert(a, other.substr(b, len));
      what += " insert@" + std::to_string(a) + "<-[" + std::to_string(b) + "+" + std::to_string(len) + "]";
      break;
    }
    case 6: {  // erase a chunk
      const size_t a = pick(r, s.size()), len = 1 + pick(r, std::min<size_t>(s.size() - a, 256));
      s.erase(a, len);
      what += " erase[" + std::to_string(a) + "+" + std::to_string(len) + "]";
      break;
    }
  }
}

}  // namespace jobflow_fuzz::wire
