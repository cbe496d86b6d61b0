// numpy broadcasting for elementwise kernels (internal): parallel row loops
// over the collapsed strided view of two operands (layout.h builds it).
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

// numpy broadcasting's result shape and collapsed view: layout.h.
using layout::broadcast_shape;

// The collapsed view of out = f(a, b) (layout::broadcast_view).
struct BView {
  int nd = 0;
  int64_t dim[kMaxRank];
  int64_t sa[kMaxRank];
  int64_t sb[kMaxRank];
};

inline BView broadcast_view(const Shape& out, const Shape& a, const Shape& b) {
  BView v;
  layout::broadcast_view(v, out, a, b);
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
