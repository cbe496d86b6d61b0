// numpy broadcasting for elementwise kernels (internal): the result shape,
// a collapsed strided view of two operands, and parallel row loops over it.
// Shared by ops/elementwise.cpp and ops/activations.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "jobflow/primitive.h"
#include "kernel_util.h"

namespace jobflow::kern {

// Long rows are cut into pieces of this many elements so that one huge row
// (e.g. a (1, 10^6) x (1,) broadcast) still spreads over the threads.
inline constexpr int64_t kRowPiece = 1 << 14;

// numpy's result shape of broadcasting a with b; names both on mismatch.
inline Shape broadcast_shape(const char* op, const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r, 1);
  for (size_t k = 0; k < r; ++k) {  // k counts from the last dim
    const int64_t da = k < a.size() ? a[a.size() - 1 - k] : 1;
    const int64_t db = k < b.size() ? b[b.size() - 1 - k] : 1;
    if (da != db && da != 1 && db != 1)
      op_error(op, "shapes " + shape_str(a) + " and " + shape_str(b) + " cannot broadcast (dim " +
                       std::to_string(static_cast<int64_t>(r - 1 - k)) + ": " + std::to_string(da) + " vs " +
                       std::to_string(db) + ")");
    out[r - 1 - k] = da == 1 ? db : da;
  }
  return out;
}

// Collapsed view of out = f(a, b): `nd` dims (outermost first) and each
// operand's element stride along them (0 where it is broadcast).
struct BView {
  int nd = 0;
  int64_t dim[kMaxRank];
  int64_t sa[kMaxRank];
  int64_t sb[kMaxRank];
};

inline BView broadcast_view(const Shape& out, const Shape& a, const Shape& b) {
  const int r = static_cast<int>(out.size());
  BView v;
  // Walk from the innermost dim outwards so the running contiguous strides of
  // a and b are known; build the view reversed and flip it at the end.
  int64_t ca = 1, cb = 1;  // contiguous stride of the next dim of a / b
  int64_t rd[kMaxRank], ra[kMaxRank], rb[kMaxRank];
  int n = 0;
  for (int i = r - 1; i >= 0; --i) {
    const int ia = i - (r - static_cast<int>(a.size())), ib = i - (r - static_cast<int>(b.size()));
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (out[i] == 1) continue;  // no index to walk
    const int64_t sa = da == 1 ? 0 : ca, sb = db == 1 ? 0 : cb;
    ca *= da;
    cb *= db;
    // Merge with the inner neighbour when stepping this dim once equals
    // stepping the neighbour through its whole extent, for both operands.
    if (n > 0 && sa == ra[n - 1] * rd[n - 1] && sb == rb[n - 1] * rd[n - 1]) {
      rd[n - 1] *= out[i];
    } else {
      rd[n] = out[i], ra[n] = sa, rb[n] = sb;
      ++n;
    }
  }
  if (n == 0) rd[0] = 1, ra[0] = rb[0] = 0, n = 1;  // a single element
  v.nd = n;
  for (int k = 0; k < n; ++k) v.dim[k] = rd[n - 1 - k], v.sa[k] = ra[n - 1 - k], v.sb[k] = rb[n - 1 - k];
  return v;
}

// Calls row(offset_a, offset_b, offset_out, len) for pieces of the view's
// innermost rows, in parallel for big outputs. Each call is a contiguous
// output range whose operands advance by v.sa/v.sb[nd-1] per element.
template <class Row>
void for_rows(const BView& v, int64_t n, Row row) {
  const int last = v.nd - 1;
  const int64_t inner = v.dim[last], piece = std::min(inner, kRowPiece);
  const int64_t pieces = (inner + piece - 1) / piece, tasks = (n / inner) * pieces;
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t q = t / pieces, oa = 0, ob = 0;
    const int64_t j0 = (t % pieces) * piece, out_off = q * inner + j0;
    for (int d = last - 1; d >= 0; --d) {
      const int64_t i = q % v.dim[d];
      q /= v.dim[d];
      oa += i * v.sa[d];
      ob += i * v.sb[d];
    }
    row(oa + j0 * v.sa[last], ob + j0 * v.sb[last], out_off, std::min(piece, inner - j0));
  }
}

// o[i] = f(a[i*sa], b[i*sb]) for one row. After collapsing, the inner strides
// are (1, 1), (1, 0) or (0, 1); each gets a plain loop the compiler vectorizes.
template <class T, class F>
inline void row_apply(const T* a, int64_t sa, const T* b, int64_t sb, T* o, int64_t len, F f) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < len; ++i) o[i] = f(a[i], b[i]);
  } else if (sb == 0) {
    const T bv = *b;
    for (int64_t i = 0; i < len; ++i) o[i] = f(a[i * sa], bv);
  } else if (sa == 0) {
    const T av = *a;
    for (int64_t i = 0; i < len; ++i) o[i] = f(av, b[i * sb]);
  } else {
    for (int64_t i = 0; i < len; ++i) o[i] = f(a[i * sa], b[i * sb]);
  }
}

// out = f(a, b) under broadcasting; flat loops when no index arithmetic is
// needed (same layout, or one operand a single element).
template <class T, class F>
void broadcast_binary(const Tensor& A, const Tensor& B, const Tensor& O, F f) {
  const int64_t n = O.numel();
  if (n == 0) return;
  const T* a = static_cast<const T*>(A.raw());
  const T* b = static_cast<const T*>(B.raw());
  T* o = static_cast<T*>(O.raw());
  const int64_t na = A.numel(), nb = B.numel();
  // An operand with as many elements as the output has the same layout
  // (shapes agree up to leading 1s).
  if (na == n && nb == n) {
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
    return;
  }
  if (nb == 1 && na == n) {
    const T bv = *b;
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv);
    return;
  }
  if (na == 1 && nb == n) {
    const T av = *a;
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) o[i] = f(av, b[i]);
    return;
  }
  const BView v = broadcast_view(O.shape(), A.shape(), B.shape());
  const int64_t ia = v.sa[v.nd - 1], ib = v.sb[v.nd - 1];
  for_rows(v, n, [&](int64_t oa, int64_t ob, int64_t oo, int64_t len) {
    row_apply(a + oa, ia, b + ob, ib, o + oo, len, f);
  });
}

// out = d(g, a, b) with g in the output's shape (so it shares the output's
// offsets) and a, b broadcast (gradients of broadcasting binary ops).
template <class T, class F>
void broadcast_ternary(const Tensor& G, const Tensor& A, const Tensor& B, const Tensor& O, F d) {
  const int64_t n = O.numel();
  if (n == 0) return;
  const T* g = static_cast<const T*>(G.raw());
  const T* a = static_cast<const T*>(A.raw());
  const T* b = static_cast<const T*>(B.raw());
  T* o = static_cast<T*>(O.raw());
  if (A.numel() == n && B.numel() == n) {
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) o[i] = d(g[i], a[i], b[i]);
    return;
  }
  const BView v = broadcast_view(O.shape(), A.shape(), B.shape());
  const int64_t ia = v.sa[v.nd - 1], ib = v.sb[v.nd - 1];
  for_rows(v, n, [&](int64_t oa, int64_t ob, int64_t oo, int64_t len) {
    const T* pa = a + oa;
    const T* pb = b + ob;
    const T* pg = g + oo;
    T* po = o + oo;
    for (int64_t i = 0; i < len; ++i) po[i] = d(pg[i], pa[i * ia], pb[i * ib]);
  });
}

}  // namespace jobflow::kern
