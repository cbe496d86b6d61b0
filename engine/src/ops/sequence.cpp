// Sequences of tensors and optional values (jobflow/sequence.h): the packed
// form and the ops that read and make it (ONNX SequenceConstruct,
// SequenceInsert, SequenceAt, SequenceErase, SequenceLength,
// ConcatFromSequence, SplitToSequence, OptionalHasElement,
// OptionalGetElement).
//
// Every op here works on the host: it moves bytes (any dtype, the 16-bit
// floats included: stores_only()). An op whose output is a sequence or an
// item of one is sized by its data: infer() gives kDynamic dims, and the
// compiler cuts the call at it and calls eval_sized(), which returns the
// outputs it made. No gradients: a sequence is not differentiable.
#include "jobflow/sequence.h"

#include <algorithm>
#include <cstring>

#include "jobflow/ops.h"
#include "ops_internal.h"
#include "ops/packed.h"

namespace jobflow {

// ---------------------------------------------------------------------------
// The packed form.

namespace {

int64_t padded(int64_t bytes) { return (bytes + 7) / 8 * 8; }
constexpr int64_t kMaxItemRank = 8;

void check_elem(DType elem, const char* what) {
  if (static_cast<int>(elem) < 0 || static_cast<int>(elem) >= kDTypeCount)
    throw Error(std::string("[sequence] ") + what + ": no such dtype " + std::to_string(static_cast<int>(elem)));
}

Tensor pack(const std::vector<Tensor>& items, DType elem, bool none) {
  check_elem(elem, "pack");
  int64_t words = 3, data = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    const Tensor& t = items[k];
    if (!t.defined()) throw Error("[sequence] item " + std::to_string(k) + " is an undefined tensor");
    if (t.dtype() != elem)
      throw Error("[sequence] item " + std::to_string(k) + " is " + spec_str({t.shape(), t.dtype()}) +
                  ", the sequence holds " + dtype_name(elem));
    if (t.ndim() > kMaxItemRank)
      throw Error("[sequence] item " + std::to_string(k) + " has rank " + std::to_string(t.ndim()) +
                  "; sequences hold tensors of rank " + std::to_string(kMaxItemRank) + " at most");
    words += 1 + t.ndim();
    data += padded(static_cast<int64_t>(t.nbytes()));
  }
  Tensor p({words * 8 + data}, DType::UInt8);
  std::memset(p.raw(), 0, p.nbytes());
  auto* w = static_cast<int64_t*>(p.raw());
  w[0] = kSequenceMagic;
  w[1] = static_cast<int64_t>(elem);
  w[2] = none ? -1 : static_cast<int64_t>(items.size());
  int64_t at = 3;
  for (const Tensor& t : items) {
    w[at++] = t.ndim();
    for (int64_t d : t.shape()) w[at++] = d;
  }
  auto* bytes = static_cast<char*>(p.raw()) + words * 8;
  for (const Tensor& t : items) {
    if (t.nbytes() > 0) std::memcpy(bytes, t.raw(), t.nbytes());
    bytes += padded(static_cast<int64_t>(t.nbytes()));
  }
  return p;
}

}  // namespace

Tensor pack_sequence(const std::vector<Tensor>& items, DType elem) { return pack(items, elem, false); }
Tensor pack_none(DType elem) { return pack({}, elem, true); }

bool is_packed_sequence(const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::UInt8 || t.ndim() != 1 || t.numel() < 24) return false;
  int64_t magic;
  std::memcpy(&magic, t.raw(), 8);
  return magic == kSequenceMagic;
}

namespace {

// The packed form read back; `header_only`: the items' count and dtype,
// no items copied (their shapes and sizes still checked).
UnpackedSequence unpack(const Tensor& p, const std::string& what, bool header_only) {
  const PackedWords w(p, what, "sequence", kSequenceMagic);
  auto bad = [&](const std::string& why) { return w.bad(why); };
  auto word = [&](int64_t i) { return w.word(i); };
  const int64_t size = w.size();
  const char* base = w.bytes();
  UnpackedSequence u;
  const int64_t e = word(1);
  if (e < 0 || e >= kDTypeCount) throw bad("dtype " + std::to_string(e));
  u.elem = static_cast<DType>(e);
  const int64_t n = word(2);
  if (n < -1 || n > size / 8) throw bad("item count " + std::to_string(n));
  u.none = n == -1;
  std::vector<Shape> shapes;
  int64_t at = 3;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t r = word(at++);
    if (r < 0 || r > kMaxItemRank) throw bad("item " + std::to_string(k) + " has rank " + std::to_string(r));
    Shape s;
    for (int64_t d = 0; d < r; ++d) {
      s.push_back(word(at++));
      if (s.back() < 0) throw bad("item " + std::to_string(k) + " has a negative dim");
    }
    shapes.push_back(s);
  }
  int64_t off = at * 8;
  for (size_t k = 0; k < shapes.size(); ++k) {
    int64_t bytes = 0;
    std::string why;
    if (!checked_nbytes(shapes[k], u.elem, &bytes, &why) || bytes > size - off)
      throw bad("item " + std::to_string(k) + " " + shape_str(shapes[k]) + " runs past the end");
    if (header_only) {
      off += padded(bytes);
      u.items.emplace_back();
      continue;
    }
    Tensor t(shapes[k], u.elem);
    if (u.elem == DType::Bool) {  // any nonzero byte is true (a bool holds 0 or 1)
      for (int64_t i = 0; i < bytes; ++i) t.data<bool>()[i] = base[off + i] != 0;
    } else if (bytes > 0) {
      std::memcpy(t.raw(), base + off, static_cast<size_t>(bytes));
    }
    off += padded(bytes);
    u.items.push_back(std::move(t));
  }
  return u;
}

}  // namespace

UnpackedSequence unpack_sequence(const Tensor& p, const std::string& what) { return unpack(p, what, false); }

// ---------------------------------------------------------------------------
// The ops.

namespace {

UnpackedSequence read_seq(const char* op, const Tensor& t, bool header_only = false) {
  try {
    return unpack(t, "input 0", header_only);
  } catch (const Error& e) {
    op_error(op, e.what());
  }
}

// A sequence's item count, refusing an optional without a value.
int64_t count(const char* op, const UnpackedSequence& s) {
  if (s.none) op_error(op, "the input is an optional without a value");
  return static_cast<int64_t>(s.items.size());
}

// The position input (int32/int64, one value) in [lo, hi] after adding n
// to a negative one.
int64_t position(const char* op, const Tensor& p, int64_t n, bool insert) {
  if (p.numel() != 1) op_error(op, "position must hold one value, got " + shape_str(p.shape()));
  int64_t v = p.dtype() == DType::Int64 ? p.data<int64_t>()[0] : static_cast<int64_t>(p.at(0));
  const int64_t lo = -n, hi = insert ? n : n - 1;
  if (v < lo || v > hi)
    op_error(op, "position " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                     "] for a sequence of " + std::to_string(n) + " tensors");
  return v < 0 ? v + n : v;
}

void expect_packed(const char* op, const TensorSpec& s, const char* arg) {
  if (s.dtype != DType::UInt8 || s.shape.size() != 1)
    op_error(op, std::string(arg) + " must be a sequence (a packed uint8 tensor of rank 1), got " + spec_str(s));
}
void expect_position(const char* op, const TensorSpec& s) {
  if (s.dtype != DType::Int32 && s.dtype != DType::Int64)
    op_error(op, "position must be int32 or int64, got " + spec_str(s));
  if (is_static(s.shape) && numel(s.shape) != 1) op_error(op, "position must hold one value, got " + spec_str(s));
}

TensorSpec packed_spec() { return {{kDynamic}, DType::UInt8}; }
TensorSpec item_spec(DType elem, int rank) { return {Shape(static_cast<size_t>(rank), kDynamic), elem}; }

class SequenceConstruct final : public SizedByData {
 public:
  explicit SequenceConstruct(DType elem) : elem_(elem) {}
  OpKind kind() const override { return OpKind::SequenceConstruct; }
  Attrs attributes() const override { return {{"dtype", std::string(dtype_name(elem_))}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i].dtype != elem_)
        op_error("sequence_construct", "input " + std::to_string(i) + " is " + spec_str(in[i]) +
                                           ", the sequence holds " + dtype_name(elem_));
    return {packed_spec()};
  }
  std::vector<Tensor> make(const std::vector<Tensor>& in) const override { return {pack_sequence(in, elem_)}; }

 private:
  DType elem_;
};

class SequenceInsert final : public SizedByData {
 public:
  OpKind kind() const override { return OpKind::SequenceInsert; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    if (in.size() != 2 && in.size() != 3)
      op_error("sequence_insert", "takes a sequence, a tensor and an optional position, got " +
                                      std::to_string(in.size()) + " inputs");
    expect_packed("sequence_insert", in[0], "input 0");
    if (in.size() == 3) expect_position("sequence_insert", in[2]);
    return {packed_spec()};
  }
  std::vector<Tensor> make(const std::vector<Tensor>& in) const override {
    UnpackedSequence s = read_seq("sequence_insert", in[0]);
    const int64_t n = count("sequence_insert", s);
    if (in[1].dtype() != s.elem)
      op_error("sequence_insert", "the tensor is " + spec_str({in[1].shape(), in[1].dtype()}) +
                                      ", the sequence holds " + dtype_name(s.elem));
    const int64_t at = in.size() == 3 ? position("sequence_insert", in[2], n, true) : n;
    s.items.insert(s.items.begin() + at, in[1]);
    return {pack_sequence(s.items, s.elem)};
  }
};

class SequenceAt final : public SizedByData {
 public:
  SequenceAt(DType elem, int rank) : elem_(elem), rank_(rank) {}
  OpKind kind() const override { return OpKind::SequenceAt; }
  Attrs attributes() const override {
    return {{"dtype", std::string(dtype_name(elem_))}, {"rank", int64_t{rank_}}};
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("sequence_at", in, 2);
    expect_packed("sequence_at", in[0], "input 0");
    expect_position("sequence_at", in[1]);
    return {item_spec(elem_, rank_)};
  }
  std::vector<Tensor> make(const std::vector<Tensor>& in) const override {
    UnpackedSequence s = read_seq("sequence_at", in[0]);
    const int64_t at = position("sequence_at", in[1], count("sequence_at", s), false);
    return {checked_item("sequence_at", s, at, elem_, rank_)};
  }
  static Tensor checked_item(const char* op, const UnpackedSequence& s, int64_t at, DType elem, int rank) {
    const Tensor& t = s.items[static_cast<size_t>(at)];
    if (t.dtype() != elem || t.ndim() != rank)
      op_error(op, "tensor " + std::to_string(at) + " of the sequence is " + spec_str({t.shape(), t.dtype()}) +
                       "; the job was defined for a " + dtype_name(elem) + " tensor of rank " + std::to_string(rank));
    return t;
  }

 private:
  DType elem_;
  int rank_;
};

class SequenceErase final : public SizedByData {
 public:
  OpKind kind() const override { return OpKind::SequenceErase; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    if (in.size() != 1 && in.size() != 2)
      op_error("sequence_erase", "takes a sequence and an optional position, got " + std::to_string(in.size()) +
                                     " inputs");
    expect_packed("sequence_erase", in[0], "input 0");
    if (in.size() == 2) expect_position("sequence_erase", in[1]);
    return {packed_spec()};
  }
  std::vector<Tensor> make(const std::vector<Tensor>& in) const override {
    UnpackedSequence s = read_seq("sequence_erase", in[0]);
    const int64_t n = count("sequence_erase", s);
    if (n == 0) op_error("sequence_erase", "the sequence is empty");
    const int64_t at = in.size() == 2 ? position("sequence_erase", in[1], n, false) : n - 1;
    s.items.erase(s.items.begin() + at);
    return {pack_sequence(s.items, s.elem)};
  }
};

// ConcatFromSequence: the items joined along `axis` (new_axis: stacked along
// a new one); the items must agree on every other dim.
class ConcatFromSequence final : public SizedByData {
 public:
  ConcatFromSequence(int64_t axis, bool new_axis, DType elem, int rank)
      : axis_(axis), new_axis_(new_axis), elem_(elem), rank_(rank) {}
  OpKind kind() const override { return OpKind::ConcatFromSequence; }
  Attrs attributes() const override {
    return {{"axis", axis_}, {"new_axis", int64_t{new_axis_}}, {"dtype", std::string(dtype_name(elem_))},
            {"rank", int64_t{rank_}}};
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("concat_from_sequence", in, 1);
    expect_packed("concat_from_sequence", in[0], "input 0");
    const int out_rank = rank_ + (new_axis_ ? 1 : 0);
    if (axis_ < -out_rank || axis_ >= out_rank)
      op_error("concat_from_sequence", "axis " + std::to_string(axis_) + " is out of range for tensors of rank " +
                                           std::to_string(rank_) + (new_axis_ ? " (new_axis)" : ""));
    return {item_spec(elem_, out_rank)};
  }
  std::vector<Tensor> make(const std::vector<Tensor>& in) const override {
    const char* op = "concat_from_sequence";
    UnpackedSequence s = read_seq(op, in[0]);
    const int64_t n = count(op, s);
    if (n == 0) op_error(op, "the sequence is empty: there is nothing to join");
    for (int64_t k = 0; k < n; ++k) SequenceAt::checked_item(op, s, k, elem_, rank_);
    const int out_rank = rank_ + (new_axis_ ? 1 : 0);
    const int ax = static_cast<int>(axis_ < 0 ? axis_ + out_rank : axis_);
    std::vector<Tensor> parts;
    const Shape& first = s.items[0].shape();
    int64_t total = 0;
    for (int64_t k = 0; k < n; ++k) {
      Tensor t = s.items[static_cast<size_t>(k)];
      Shape want = first;
      if (new_axis_) {
        if (t.shape() != first)
          op_error(op, "tensor " + std::to_string(k) + " is " + shape_str(t.shape()) + ", tensor 0 " + shape_str(first) +
                           ": stacking needs equal shapes");
        Shape ts = t.shape();
        ts.insert(ts.begin() + ax, 1);
        t = t.reshape(ts);
      } else {
        for (int d = 0; d < rank_; ++d)
          if (d != ax && t.shape()[d] != first[d])
            op_error(op, "tensor " + std::to_string(k) + " is " + shape_str(t.shape()) + ", tensor 0 " +
                             shape_str(first) + ": they must agree on every dim but axis " + std::to_string(ax));
      }
      total += t.shape()[ax];
      parts.push_back(t);
    }
    Shape os = parts[0].shape();
    os[ax] = total;
    Tensor y(os, elem_);
    if (y.numel() == 0) return {y};  // (dims of zero-size items may be anything)
    int64_t outer = 1, inner = static_cast<int64_t>(dtype_size(elem_));
    for (int d = 0; d < ax; ++d) outer *= os[d];
    for (int d = ax + 1; d < out_rank; ++d) inner *= os[d];
    auto* dst = static_cast<char*>(y.raw());
    int64_t at = 0;
    for (const Tensor& t : parts) {
      const int64_t len = t.shape()[ax] * inner;
      const auto* src = static_cast<const char*>(t.raw());
      for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * total * inner + at, src + o * len, len);
      at += len;
    }
    return {y};
  }

 private:
  int64_t axis_;
  bool new_axis_;
  DType elem_;
  int rank_;
};

// SplitToSequence: x cut along `axis` into pieces of the sizes `split`
// gives (a scalar: pieces of that size, the last one shorter; a 1-D
// tensor: each piece's size), or without `split` into pieces of size 1,
// which keepdims=0 squeezes.
class SplitToSequence final : public SizedByData {
 public:
  SplitToSequence(int64_t axis, bool keepdims) : axis_(axis), keepdims_(keepdims) {}
  OpKind kind() const override { return OpKind::SplitToSequence; }
  Attrs attributes() const override { return {{"axis", axis_}, {"keepdims", int64_t{keepdims_}}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    if (in.size() != 1 && in.size() != 2)
      op_error("split_to_sequence", "takes a tensor and an optional split, got " + std::to_string(in.size()) + " inputs");
    const int64_t r = static_cast<int64_t>(in[0].shape.size());
    if (r == 0) op_error("split_to_sequence", "input is a scalar: there is no axis to split");
    if (axis_ < -r || axis_ >= r)
      op_error("split_to_sequence", "axis " + std::to_string(axis_) + " is out of range for " + spec_str(in[0]));
    if (in.size() == 2) {
      if (in[1].dtype != DType::Int32 && in[1].dtype != DType::Int64)
        op_error("split_to_sequence", "split must be int32 or int64, got " + spec_str(in[1]));
      if (in[1].shape.size() > 1) op_error("split_to_sequence", "split must be a scalar or 1-D, got " + spec_str(in[1]));
    }
    return {packed_spec()};
  }
  std::vector<Tensor> make(const std::vector<Tensor>& in) const override {
    const char* op = "split_to_sequence";
    const Tensor& x = in[0];
    const int ax = static_cast<int>(axis_ < 0 ? axis_ + x.ndim() : axis_);
    const int64_t len = x.dim(ax);
    std::vector<int64_t> sizes;
    bool squeeze = false;
    if (in.size() == 2) {
      const Tensor& sp = in[1];
      std::vector<int64_t> v(static_cast<size_t>(sp.numel()));
      for (int64_t i = 0; i < sp.numel(); ++i)
        v[i] = sp.dtype() == DType::Int64 ? sp.data<int64_t>()[i] : sp.data<int32_t>()[i];
      if (sp.ndim() == 0) {
        if (v[0] <= 0) op_error(op, "split " + std::to_string(v[0]) + " must be positive");
        for (int64_t at = 0; at < len; at += v[0]) sizes.push_back(std::min(v[0], len - at));
      } else {
        int64_t sum = 0;
        for (int64_t s : v) {
          if (s < 0) op_error(op, "split sizes must not be negative, got " + std::to_string(s));
          sum += s;
        }
        if (sum != len)
          op_error(op, "split sizes add up to " + std::to_string(sum) + ", the axis of " + shape_str(x.shape()) +
                           " has " + std::to_string(len));
        sizes = v;
      }
    } else {
      sizes.assign(static_cast<size_t>(len), 1);
      squeeze = !keepdims_;
    }
    int64_t outer = 1, inner = static_cast<int64_t>(dtype_size(x.dtype()));
    for (int d = 0; d < ax; ++d) outer *= x.dim(d);
    for (int d = ax + 1; d < x.ndim(); ++d) inner *= x.dim(d);
    const auto* src = static_cast<const char*>(x.raw());
    std::vector<Tensor> items;
    int64_t at = 0;
    for (int64_t sz : sizes) {
      Shape s = x.shape();
      s[ax] = sz;
      Tensor t(s, x.dtype());
      auto* dst = static_cast<char*>(t.raw());
      for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * sz * inner, src + (o * len + at) * inner, sz * inner);
      at += sz;
      if (squeeze) {
        s.erase(s.begin() + ax);
        t = t.reshape(s);
      }
      items.push_back(t);
    }
    return {pack_sequence(items, x.dtype())};
  }

 private:
  int64_t axis_;
  bool keepdims_;
};

// OptionalGetElement: an optional's value, which it must have: its item
// (an optional tensor) or the sequence (an optional sequence).
class OptionalGetElement final : public SizedByData {
 public:
  OptionalGetElement(bool of_tensor, DType elem, int rank) : of_tensor_(of_tensor), elem_(elem), rank_(rank) {}
  OpKind kind() const override { return OpKind::OptionalGetElement; }
  Attrs attributes() const override {
    return {{"of_tensor", int64_t{of_tensor_}}, {"dtype", std::string(dtype_name(elem_))}, {"rank", int64_t{rank_}}};
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("optional_get_element", in, 1);
    expect_packed("optional_get_element", in[0], "input 0");
    return {of_tensor_ ? item_spec(elem_, rank_) : packed_spec()};
  }
  std::vector<Tensor> make(const std::vector<Tensor>& in) const override {
    const char* op = "optional_get_element";
    UnpackedSequence s = read_seq(op, in[0]);
    if (s.none) op_error(op, "the optional has no value");
    if (!of_tensor_) return {in[0]};
    if (s.items.size() != 1) op_error(op, "an optional tensor holds one tensor, this one " + std::to_string(s.items.size()));
    return {SequenceAt::checked_item(op, s, 0, elem_, rank_)};
  }

 private:
  bool of_tensor_;
  DType elem_;
  int rank_;
};

// SequenceLength (int64 scalar) and OptionalHasElement (bool scalar): fixed
// output shapes, computed from the header alone.
class HeaderOp : public Primitive {
 public:
  bool differentiable_input(int) const override { return false; }
  bool stores_only() const override { return true; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 1);
    expect_packed(name(), in[0], "input 0");
    return {{{}, kind() == OpKind::SequenceLength ? DType::Int64 : DType::Bool}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const UnpackedSequence s = read_seq(name(), in[0], true);
    if (kind() == OpKind::SequenceLength) out[0].data<int64_t>()[0] = count(name(), s);
    else out[0].data<bool>()[0] = !s.none;
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }
};
class SequenceLength final : public HeaderOp {
 public:
  OpKind kind() const override { return OpKind::SequenceLength; }
};
class OptionalHasElement final : public HeaderOp {
 public:
  OpKind kind() const override { return OpKind::OptionalHasElement; }
};

Blob one(std::shared_ptr<Primitive> op, const std::vector<Blob>& in, const std::string& name) {
  return internal::add_node(std::move(op), in, name)[0];
}

}  // namespace

namespace seq {

Blob construct(const std::vector<Blob>& xs, DType elem, const std::string& name) {
  if (xs.empty()) return empty(elem, name);
  return one(std::make_shared<SequenceConstruct>(elem), xs, name);
}
Blob empty(DType elem, const std::string& name) { return constant(pack_sequence({}, elem), name); }
Blob none(DType elem, const std::string& name) { return constant(pack_none(elem), name); }
Blob insert(Blob s, Blob x, Blob position, const std::string& name) {
  std::vector<Blob> in{s, x};
  if (position.defined()) in.push_back(position);
  return one(std::make_shared<SequenceInsert>(), in, name);
}
Blob at(Blob s, Blob position, DType elem, int rank, const std::string& name) {
  if (rank < 0 || rank > 8) op_error("sequence_at", "rank " + std::to_string(rank) + " is out of range 0..8");
  return one(std::make_shared<SequenceAt>(elem, rank), {s, position}, name);
}
Blob erase(Blob s, Blob position, const std::string& name) {
  std::vector<Blob> in{s};
  if (position.defined()) in.push_back(position);
  return one(std::make_shared<SequenceErase>(), in, name);
}
Blob length(Blob s, const std::string& name) { return one(std::make_shared<SequenceLength>(), {s}, name); }
Blob concat(Blob s, int64_t axis, bool new_axis, DType elem, int rank, const std::string& name) {
  if (rank < 0 || rank > 7) op_error("concat_from_sequence", "rank " + std::to_string(rank) + " is out of range 0..7");
  return one(std::make_shared<ConcatFromSequence>(axis, new_axis, elem, rank), {s}, name);
}
Blob split(Blob x, Blob sizes, int64_t axis, bool keepdims, const std::string& name) {
  std::vector<Blob> in{x};
  if (sizes.defined()) in.push_back(sizes);
  return one(std::make_shared<SplitToSequence>(axis, keepdims), in, name);
}
Blob has_element(Blob s, const std::string& name) { return one(std::make_shared<OptionalHasElement>(), {s}, name); }
Blob get_element(Blob s, bool of_tensor, DType elem, int rank, const std::string& name) {
  return one(std::make_shared<OptionalGetElement>(of_tensor, elem, rank), {s}, name);
}

}  // namespace seq
}  // namespace jobflow
