// cpu/avx512_math.h — activations on 16 float32 lanes in AVX-512, shared by
// Jobflow's own kernels (cpu/simd_kernels.cpp, cpu/expand_dw.cpp). The
// maskz forms throughout: GCC 12 warns about the undefined vector the
// plain min/max/roundscale/scalef start from.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace jobflow::cpu {

// The mask of the first min(n, 16) lanes (n >= 0).
inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// v * sigmoid(v) = v / (1 + exp(-v)): exp by range reduction to
// [-ln 2 / 2, ln 2 / 2], a degree-6 polynomial and vscalefps (relative
// error about 1e-7); NaN stays NaN.
__attribute__((target("avx512f"))) inline __m512 swish16(__m512 v) {
  const __m512 log2e = _mm512_set1_ps(1.44269504f), ln2 = _mm512_set1_ps(0.693147181f);
  const __m512 one = _mm512_set1_ps(1.f), lo = _mm512_set1_ps(-87.f), hi = _mm512_set1_ps(87.f);
  const __mmask16 all = 0xFFFF;
  const __m512 t = _mm512_maskz_min_ps(all, _mm512_maskz_max_ps(all, _mm512_sub_ps(_mm512_setzero_ps(), v), lo), hi);
  const __m512 k = _mm512_maskz_roundscale_ps(all, _mm512_mul_ps(t, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(k, ln2, t);
  __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(1.f / 720), r, _mm512_set1_ps(1.f / 120));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.f / 24));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.f / 6));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.f / 2));
  q = _mm512_fmadd_ps(q, r, one);
  q = _mm512_fmadd_ps(q, r, one);
  return _mm512_div_ps(v, _mm512_add_ps(one, _mm512_maskz_scalef_ps(all, q, k)));
}

// min(hi, max(lo, v)): a NaN v stays NaN (max and min return their second
// operand when either is NaN).
__attribute__((target("avx512f"))) inline __m512 clamp16(__m512 v, __m512 lo, __m512 hi) {
  const __mmask16 all = 0xFFFF;
  return _mm512_maskz_min_ps(all, hi, _mm512_maskz_max_ps(all, lo, v));
}

// v * min(max(v + 3, 0), 6) / 6 (ONNX HardSwish; oneDNN's eltwise_hardswish).
__attribute__((target("avx512f"))) inline __m512 hardswish16(__m512 v) {
  const __m512 g = clamp16(_mm512_add_ps(v, _mm512_set1_ps(3.f)), _mm512_setzero_ps(), _mm512_set1_ps(6.f));
  return _mm512_mul_ps(v, _mm512_mul_ps(g, _mm512_set1_ps(1.f / 6)));
}

}  // namespace jobflow::cpu
