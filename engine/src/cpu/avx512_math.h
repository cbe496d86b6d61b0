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

// min(hi, max(lo, v)): a NaN v stays NaN (max and min return their second
// operand when either is NaN).
__attribute__((target("avx512f"))) inline __m512 clamp16(__m512 v, __m512 lo, __m512 hi) {
  const __mmask16 all = 0xFFFF;
  return _mm512_maskz_min_ps(all, hi, _mm512_maskz_max_ps(all, lo, v));
}

// 1 + exp(-v), v clamped to [-87, 87]: exp(-v) = 2^k exp(r), k =
// round(-v log2 e), r = -v - k ln 2 in [-ln 2 / 2, ln 2 / 2] (one fnmsub),
// exp(r) by a degree-5 polynomial fitted for relative error (7.5e-8 on that
// interval with exact coefficients, about 1.2e-7 with them rounded to
// float; the degree-6 Taylor series it replaced took one more FMA and a
// negation), 2^k by vscalefps. NaN stays NaN.
__attribute__((target("avx512f"))) inline __m512 one_plus_exp_neg16(__m512 v) {
  const __mmask16 all = 0xFFFF;
  const __m512 vc = clamp16(v, _mm512_set1_ps(-87.f), _mm512_set1_ps(87.f));
  const __m512 k = _mm512_maskz_roundscale_ps(all, _mm512_mul_ps(vc, _mm512_set1_ps(-1.44269504f)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmsub_ps(k, _mm512_set1_ps(0.693147181f), vc);
  __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(0.008297654800117016f), r, _mm512_set1_ps(0.04191538318991661f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0.16667574644088745f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0.49998894333839417f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0.9999997019767761f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0000001192092896f));
  return _mm512_add_ps(_mm512_set1_ps(1.f), _mm512_maskz_scalef_ps(all, q, k));
}

// v * sigmoid(v) = v / (1 + exp(-v)): relative error about 2.5e-7 against
// double precision; NaN stays NaN. 2.9 ns a vector on the Zen 5 (3.3 with
// the Taylor series), about half of it the division (vrcp14ps with a
// Newton step was slower, and so were exp's 2^k and rounding done with
// integer shifts and a magic-number add).
__attribute__((target("avx512f"))) inline __m512 swish16(__m512 v) {
  return _mm512_div_ps(v, one_plus_exp_neg16(v));
}

// sigmoid(v) = 1 / (1 + exp(-v)) (ONNX Sigmoid; oneDNN's eltwise_logistic).
__attribute__((target("avx512f"))) inline __m512 sigmoid16(__m512 v) {
  return _mm512_div_ps(_mm512_set1_ps(1.f), one_plus_exp_neg16(v));
}

// v * min(max(v + 3, 0), 6) / 6 (ONNX HardSwish; oneDNN's eltwise_hardswish).
__attribute__((target("avx512f"))) inline __m512 hardswish16(__m512 v) {
  const __m512 g = clamp16(_mm512_add_ps(v, _mm512_set1_ps(3.f)), _mm512_setzero_ps(), _mm512_set1_ps(6.f));
  return _mm512_mul_ps(v, _mm512_mul_ps(g, _mm512_set1_ps(1.f / 6)));
}

}  // namespace jobflow::cpu
