// numpy broadcasting over N operands of possibly different element types
// (internal, CPU): the kernels of comparisons (T, T -> bool), logical ops and
// where (bool, T, T -> T). The view collapses size-1 output dims and merges
// neighbouring dims where every operand stays contiguous, as layout.h does
// for two operands, so a plain (B, N) op (N,) is B contiguous rows.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "kernel_util.h"

namespace jobflow::kern {

template <int N>
struct NView {
  int nd = 0;
  int64_t dim[kMaxRank];
  int64_t st[N][kMaxRank];  // element stride of each operand along each dim (0: broadcast)
};

// The collapsed view of out = f(in[0], ..., in[N-1]); ranks <= kMaxRank.
template <int N>
NView<N> nary_view(const Shape& out, const std::array<const Shape*, N>& in) {
  NView<N> v;
  const int r = static_cast<int>(out.size());
  int64_t contig[N];
  std::fill(contig, contig + N, int64_t{1});
  int64_t rd[kMaxRank], rs[N][kMaxRank];
  int n = 0;
  for (int i = r - 1; i >= 0; --i) {
    int64_t s[N];
    for (int k = 0; k < N; ++k) {
      const Shape& sh = *in[k];
      const int ik = i - (r - static_cast<int>(sh.size()));
      const int64_t d = ik >= 0 ? sh[ik] : 1;
      s[k] = d == 1 ? 0 : contig[k];
      contig[k] *= d;
    }
    if (out[i] == 1) continue;
    bool merge = n > 0;
    for (int k = 0; k < N && merge; ++k) merge = s[k] == rs[k][n - 1] * rd[n - 1];
    if (merge) {
      rd[n - 1] *= out[i];
    } else {
      rd[n] = out[i];
      for (int k = 0; k < N; ++k) rs[k][n] = s[k];
      ++n;
    }
  }
  if (n == 0) {
    rd[0] = 1;
    for (int k = 0; k < N; ++k) rs[k][0] = 0;
    n = 1;
  }
  v.nd = n;
  for (int j = 0; j < n; ++j) {
    v.dim[j] = rd[n - 1 - j];
    for (int k = 0; k < N; ++k) v.st[k][j] = rs[k][n - 1 - j];
  }
  return v;
}

// Calls row(off[N], out_offset, len) for each innermost row of the view (in
// parallel for big outputs); operand k advances by v.st[k][nd-1] per element.
template <int N, class Row>
void nary_rows(const NView<N>& v, int64_t n, Row row) {
  if (n == 0) return;
  const int last = v.nd - 1;
  const int64_t inner = v.dim[last], rows = n / inner;
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t q0 = 0; q0 < rows; ++q0) {
    int64_t q = q0, off[N] = {};
    for (int d = last - 1; d >= 0; --d) {
      const int64_t i = q % v.dim[d];
      q /= v.dim[d];
      for (int k = 0; k < N; ++k) off[k] += i * v.st[k][d];
    }
    row(off, q0 * inner, inner);
  }
}

// o = f(a, b) with broadcasting, A and B of type TA, the output of type TO.
template <class TA, class TO, class F>
void broadcast_map2(const Tensor& A, const Tensor& B, const Tensor& O, F f) {
  const int64_t n = O.numel();
  if (n == 0) return;
  const TA* a = static_cast<const TA*>(A.raw());
  const TA* b = static_cast<const TA*>(B.raw());
  TO* o = static_cast<TO*>(O.raw());
  if (A.numel() == n && B.numel() == n) {
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
    return;
  }
  const NView<2> v = nary_view<2>(O.shape(), {&A.shape(), &B.shape()});
  const int64_t sa = v.st[0][v.nd - 1], sb = v.st[1][v.nd - 1];
  nary_rows<2>(v, n, [&](const int64_t* off, int64_t oo, int64_t len) {
    const TA* pa = a + off[0];
    const TA* pb = b + off[1];
    for (int64_t i = 0; i < len; ++i) o[oo + i] = f(pa[i * sa], pb[i * sb]);
  });
}

// o = f(c, a, b) with broadcasting: c of type TC, a and b of type T, o of T.
template <class TC, class T, class F>
void broadcast_map3(const Tensor& C, const Tensor& A, const Tensor& B, const Tensor& O, F f) {
  const int64_t n = O.numel();
  if (n == 0) return;
  const TC* c = static_cast<const TC*>(C.raw());
  const T* a = static_cast<const T*>(A.raw());
  const T* b = static_cast<const T*>(B.raw());
  T* o = static_cast<T*>(O.raw());
  const NView<3> v = nary_view<3>(O.shape(), {&C.shape(), &A.shape(), &B.shape()});
  const int64_t sc = v.st[0][v.nd - 1], sa = v.st[1][v.nd - 1], sb = v.st[2][v.nd - 1];
  nary_rows<3>(v, n, [&](const int64_t* off, int64_t oo, int64_t len) {
    const TC* pc = c + off[0];
    const T* pa = a + off[1];
    const T* pb = b + off[2];
    for (int64_t i = 0; i < len; ++i) o[oo + i] = f(pc[i * sc], pa[i * sa], pb[i * sb]);
  });
}

}  // namespace jobflow::kern
