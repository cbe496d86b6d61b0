// Shapes and index views shared by every backend's kernels and the ONNX
// importer (internal, header-only, no dependencies beyond the public
// headers): axis normalization, the (outer, C, inner) view around an axis,
// numpy broadcasting and its collapsed strided view. The CPU loops over
// these views are in cpu/broadcast.h; the CUDA backend (cuda/) builds the
// same views for its kernels.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "jobflow/primitive.h"
#include "jobflow/tensor.h"

namespace jobflow::layout {

// Kernels index shapes with fixed arrays of this many dims, so they never
// allocate; infer() rejects higher ranks (kern::check_rank).
inline constexpr int kMaxRank = 16;

// `axis` of a tensor of `rank` dims, negative counting from the end, as an
// index in [0, rank); -1 when out of range. A scalar (rank 0) has axis 0.
inline int wrap_axis(int64_t axis, int64_t rank) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  return a >= 0 && a < std::max<int64_t>(rank, 1) ? static_cast<int>(a) : -1;
}
// The same, or Error("[op] axis A out of range for rank R").
inline int norm_axis(const char* op, int64_t axis, int64_t rank) {
  const int a = wrap_axis(axis, rank);
  if (a < 0) op_error(op, "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return a;
}

// A tensor viewed as (outer, C, inner) around `axis`: a "lane" is the C
// elements of one (outer, inner) position, `inner` apart in memory.
struct Lanes {
  int64_t outer = 1, C = 1, inner = 1;
};
inline Lanes lanes_of(const Shape& s, int axis) {
  Lanes l;
  for (int i = 0; i < axis; ++i) l.outer *= s[i];
  l.C = s.empty() ? 1 : s[axis];
  for (size_t i = axis + 1; i < s.size(); ++i) l.inner *= s[i];
  return l;
}

// numpy's result shape of broadcasting a with b; false when they do not
// broadcast (then *out is meaningless).
inline bool broadcast_shape(const Shape& a, const Shape& b, Shape* out) {
  const size_t r = std::max(a.size(), b.size());
  out->assign(r, 1);
  bool ok = true;
  for (size_t k = 0; k < r; ++k) {  // k counts from the last dim
    const int64_t da = k < a.size() ? a[a.size() - 1 - k] : 1;
    const int64_t db = k < b.size() ? b[b.size() - 1 - k] : 1;
    // A dynamic dim (kDynamic) broadcasts with anything: the result is the
    // other dim unless that is 1 or dynamic too (then it is known at the call).
    ok &= da == db || da == 1 || db == 1 || da < 0 || db < 0;
    (*out)[r - 1 - k] = da == 1 ? db : db == 1 ? da : da < 0 ? db : da;
  }
  return ok;
}
// The same; Error("[op] shapes ... cannot broadcast (dim d: x vs y)") naming both.
inline Shape broadcast_shape(const char* op, const Shape& a, const Shape& b) {
  Shape out;
  if (broadcast_shape(a, b, &out)) return out;
  const size_t r = out.size();
  for (size_t k = 0; k < r; ++k) {
    const int64_t da = k < a.size() ? a[a.size() - 1 - k] : 1;
    const int64_t db = k < b.size() ? b[b.size() - 1 - k] : 1;
    if (da != db && da != 1 && db != 1 && da >= 0 && db >= 0)
      op_error(op, "shapes " + shape_str(a) + " and " + shape_str(b) + " cannot broadcast (dim " +
                       std::to_string(static_cast<int64_t>(r - 1 - k)) + ": " + std::to_string(da) + " vs " +
                       std::to_string(db) + ")");
  }
  return out;
}

// Collapsed view of out = f(a, b) under broadcasting: `nd` dims (outermost
// first) and each operand's element stride along them (0 where it is
// broadcast). Size-1 output dims carry no index and are dropped; a dim
// merges into its inner neighbour when stepping it once equals stepping the
// neighbour through its whole extent, for both operands. So (B, N) + (N,)
// is B rows of a contiguous N-vector. A single element is one dim of 1.
// `View` is any struct with `int nd` and int64_t arrays `dim`, `sa`, `sb` of
// kMaxRank entries (the CPU's kern::BView, the CUDA kernels' k::BView);
// the ranks must be <= kMaxRank.
template <class View>
void broadcast_view(View& v, const Shape& out, const Shape& a, const Shape& b) {
  const int r = static_cast<int>(out.size());
  // Built from the innermost dim outwards, so the running contiguous strides
  // of a and b are known, then flipped.
  int64_t ca = 1, cb = 1;  // contiguous stride of the next dim of a / b
  int64_t rd[kMaxRank], ra[kMaxRank], rb[kMaxRank];
  int n = 0;
  for (int i = r - 1; i >= 0; --i) {
    const int ia = i - (r - static_cast<int>(a.size())), ib = i - (r - static_cast<int>(b.size()));
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (out[i] == 1) continue;
    const int64_t sa = da == 1 ? 0 : ca, sb = db == 1 ? 0 : cb;
    ca *= da;
    cb *= db;
    if (n > 0 && sa == ra[n - 1] * rd[n - 1] && sb == rb[n - 1] * rd[n - 1]) {
      rd[n - 1] *= out[i];
    } else {
      rd[n] = out[i], ra[n] = sa, rb[n] = sb;
      ++n;
    }
  }
  if (n == 0) rd[0] = 1, ra[0] = rb[0] = 0, n = 1;
  v.nd = n;
  for (int k = 0; k < n; ++k) v.dim[k] = rd[n - 1 - k], v.sa[k] = ra[n - 1 - k], v.sb[k] = rb[n - 1 - k];
}

}  // namespace jobflow::layout
