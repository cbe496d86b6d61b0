// cpu/winograd_avx512.cpp — wino::avx512::block(): the Winograd kernel's block
// on AVX-512 (AVX512F), 16 lanes, nChw16c (winograd_block.h).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "cpu/winograd_block.h"

// Everything defined from here on is compiled for avx512f,avx2,fma (the headers
// above are not: nothing of the standard library gets these instructions).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#endif

namespace jobflow::cpu::wino::avx512 {
namespace {

using Vec = __m512;
inline Vec vset1(float v) { return _mm512_set1_ps(v); }
inline Vec vzero() { return _mm512_setzero_ps(); }
inline Vec vload(const float* p) { return _mm512_load_ps(p); }
inline Vec vloadu(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, Vec v) { _mm512_store_ps(p, v); }
inline void vstoreu(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec vbcast(const float* p) { return _mm512_set1_ps(*p); }
inline Vec vadd(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec vsub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
// (The masked forms: the plain ones read an undefined vector GCC 12 warns about.)
inline Vec vmin(Vec a, Vec b) { return _mm512_maskz_min_ps(0xFFFF, a, b); }
inline Vec vmax(Vec a, Vec b) { return _mm512_maskz_max_ps(0xFFFF, a, b); }
inline Vec vfmadd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec vfnmadd(Vec a, Vec b, Vec c) { return _mm512_fnmadd_ps(a, b, c); }

}  // namespace

#include "cpu/winograd_block.inc"

}  // namespace jobflow::cpu::wino::avx512

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
